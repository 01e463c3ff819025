/* Placeholder until the MCP endpoint lands (issue 5): answers 501. */
#include "api/mcp.h"

#include <stdlib.h>
#include <string.h>

#include "api/errors.h"

void sl_mcp_handle(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    resp->status = 501;
    resp->content_type = "application/json";
    resp->body = sl_api_error_body("SANDBOX_MCP_UNAVAILABLE", "the MCP endpoint is not built yet",
                                   NULL);
    resp->len = resp->body ? strlen(resp->body) : 0;
}
