/* The MCP endpoint (spec MCP.md): POST /api/v1/sandboxes/mcp/streamable-http,
 * stateless Streamable HTTP answering JSON only (no SSE, no Mcp-Session-Id).
 *
 * mcp.c is the transport and protocol layer: Host/Origin/Content-Type
 * checks, the choice between protocol revision 2026-07-28 (per-request
 * `_meta`, mirrored headers) and the earlier initialize-based revisions
 * 2025-06-18 / 2025-11-25, JSON-RPC framing and error mapping. mcp_tools.c
 * holds the 13 tools; each calls the same sl_svc_* function as the matching
 * REST route and never keeps state between requests.
 *
 * Everything here runs on a handler-pool thread; no function keeps a
 * reference to its arguments after returning. */
#ifndef SL_API_MCP_H
#define SL_API_MCP_H

#include <jansson.h>

#include "api/router.h"

#define SL_MCP_PATH "/api/v1/sandboxes/mcp/streamable-http"
/* The 401 body of the MCP endpoint (MCP.md §1.1): key "error", unlike the
 * REST 401; sent by api/http.c, which checks the token before the body. */
/* The reference's body (key "error", MCP.md §1.1) with the one error
 * shape of every other route beside it (ours, additive). */
#define SL_MCP_UNAUTHORIZED_BODY                                                                \
    "{\"error\":\"internal service authentication failed\",\"detail\":{\"code\":"        \
    "\"SANDBOX_UNAUTHORIZED\",\"message\":\"internal service authentication failed: send "   \
    "'Authorization: Bearer <token>' (SANDBOX_INTERNAL_TOKEN)\"}}"

#define SL_MCP_SERVER_NAME "agent-sandbox"
#define SL_MCP_SERVER_VERSION "0.2.0"
#define SL_MCP_PROTOCOL_MODERN "2026-07-28"

void sl_mcp_handle(struct sl_request *req, struct sl_response *resp);

/* ---- shared by mcp.c and mcp_tools.c ------------------------------------- */

struct sl_service;

/* The tool definitions for tools/list (new reference): name, description,
 * inputSchema, outputSchema, annotations (and title where one exists). */
json_t *sl_mcp_tools_list(void);

/* Run tool `name` with `args` (an object). Returns NULL when no tool has
 * that name; otherwise a CallToolResult: {content, structuredContent,
 * isError:false} on success, {content, isError:true} when the tool failed
 * (a service refusal or invalid arguments). `who` is the request's
 * principal: a tenant's key keeps every call to its own sandboxes (its
 * names in and out of its namespace, its quotas, its key as the actor). */
struct sl_principal;
json_t *sl_mcp_tool_call(struct sl_service *svc, const struct sl_principal *who,
                         const char *name, const json_t *args);

#endif
