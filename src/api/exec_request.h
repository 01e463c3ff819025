/* ExecRequest validation (spec API.md §3.9), shared by the REST exec route
 * and the MCP sandbox_exec tool so both accept and refuse exactly the same
 * requests before calling sl_svc_exec().
 *
 * Ownership: a parsed request borrows every string from the JSON body it
 * was parsed from (which must outlive it) and owns only its pointer arrays
 * and the stored request object; release it with sl_api_exec_clear(),
 * whether parsing succeeded or not. */
#ifndef SL_API_EXEC_REQUEST_H
#define SL_API_EXEC_REQUEST_H

#include <jansson.h>
#include <stdbool.h>

#include "api/validate.h"
#include "service/service.h"

struct sl_api_exec {
    struct sl_exec_request req; /* ready for sl_svc_exec() when parsing succeeded */
    const char **argv;
    const char **env_keys, **env_values;
    const char **sensitive_keys, **sensitive_values;
    json_t *stored; /* the nine-field request object recorded with the execution */
};

/* Validate `body` (an ExecRequest object). Failures are recorded in `v` in
 * the reference's 422 shape. With `with_sensitive` false the sensitive_env
 * field is not part of the request (the MCP tool has none): it is ignored
 * and stored as {}. Returns sl_v_ok(v). */
bool sl_api_exec_parse(const json_t *body, bool with_sensitive, struct sl_validation *v,
                       struct sl_api_exec *out);
void sl_api_exec_clear(struct sl_api_exec *p);

#endif
