/* The MCP endpoint (spec MCP.md): POST /api/v1/sandboxes/mcp/streamable-http,
 * stateless Streamable HTTP. Each tool calls the same sl_svc_* function as
 * the matching REST route. */
#ifndef SL_API_MCP_H
#define SL_API_MCP_H

#include "api/router.h"

void sl_mcp_handle(struct sl_request *req, struct sl_response *resp);

#endif
