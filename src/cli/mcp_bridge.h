/* `sandloom mcp`: MCP over stdio, relayed to the service's MCP endpoint
 * (POST /api/v1/sandboxes/mcp/streamable-http) with the user's key, so an
 * agent that only speaks stdio (Claude Desktop, Cursor, ...) uses Sandloom.
 *
 * The stdio transport is one JSON-RPC message per line each way. Each
 * message goes to the endpoint as it came; the endpoint's JSON-RPC answer
 * comes back as one line. The bridge adds only what Streamable HTTP needs
 * beside the body: the key, the protocol version the initialize answer
 * settled (MCP-Protocol-Version on every later message), and for a
 * message of revision 2026-07-28 the headers that mirror its body
 * (Mcp-Method, Mcp-Name). It keeps no other state: the endpoint is
 * stateless. A refusal that is not JSON-RPC (a wrong key, an unreachable
 * service) becomes a JSON-RPC error for the request it answers, and a line
 * on stderr; stdout carries nothing but messages.
 *
 * Requests are relayed concurrently (a long sandbox_exec does not hold up
 * a ping), at most CLI_MCP_IN_FLIGHT at once; initialize is relayed alone,
 * before anything after it. At the end of input the bridge waits for the
 * answers still due, then returns 0. */
#ifndef SL_CLI_MCP_BRIDGE_H
#define SL_CLI_MCP_BRIDGE_H

#include <stdio.h>

#include "cli/http.h"

#define CLI_MCP_IN_FLIGHT 16
/* The longest message line read: a file write's base64 within the File
 * API's limit fits. */
#define CLI_MCP_LINE_MAX (64L * 1024 * 1024)

int cli_mcp_bridge(const struct cli_conn *conn, FILE *in, FILE *out);

#endif
