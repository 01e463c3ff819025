#include "api/errors.h"

#include <string.h>

#include "common/cleanup.h"

struct code_status {
    const char *code;
    int status;
};

/* API.md §0.5, plus the codes of this build's own refusals (COMPAT.md §2).
 * Anything not listed is 503, as in the reference. */
static const struct code_status TABLE[] = {
    {SL_E_INVALID_ARGUMENT, 400},
    {"SANDBOX_TEMPLATE_SOURCE_NOT_A_DIRECTORY", 400},
    {SL_E_UNAUTHORIZED, 401},
    {SL_E_SANDBOX_NOT_FOUND, 404},
    {SL_E_EXEC_NOT_FOUND, 404},
    {SL_E_NOT_FOUND, 404},
    {SL_E_METHOD_NOT_ALLOWED, 405},
    {SL_E_BUSY_OR_STALE, 409},
    {SL_E_STALE_GENERATION, 409},
    {SL_E_SCOPE_MISMATCH, 409},
    {SL_E_PROFILE_MISMATCH, 409},
    {"SANDBOX_WORKSPACE_LOST", 409},
    {SL_E_STALE_ROUTE, 409},
    {SL_E_SHARED_WORKSPACE_LOCKED, 409},
    {SL_E_EXEC_SCOPE_BUSY, 409},
    {"SANDBOX_EXEC_SCOPE_LOCKED", 409},
    {SL_E_FILE_PATH_LOCKED, 409},
    {SL_E_SUSPENDED, 409},
    {"SANDBOX_SUSPEND_BUSY", 409},
    {"SANDBOX_SUSPEND_IN_PROGRESS", 409},
    {"SANDBOX_NOT_READY", 409},
    {"SANDBOX_SNAPSHOT_FAILED", 409},
    {SL_E_TOO_LARGE, 413},
    {SL_E_INVALID_REQUEST, 422},
    {SL_E_PARALLEL_EXEC_LIMIT, 429},
    {SL_E_LIST_BUSY, 429},
    {SL_E_INTERNAL, 500},
    {SL_E_DISK_FULL, 507},
    {"SANDBOX_TEMPLATES_UNSUPPORTED", 501},
    {"SANDBOX_SUSPEND_UNSUPPORTED", 501},
    {"SANDBOX_SNAPSHOT_UNAVAILABLE", 501},
    {"SANDBOX_DIRECTORY_OPS_UNSUPPORTED", 501},
    {"SANDBOX_FLEET_QUERIES_UNSUPPORTED", 501},
    {"OBJECT_STORE_UNAVAILABLE", 503},
};

int sl_api_status_for_code(const char *code)
{
    if (!code)
        return 500;
    for (size_t i = 0; i < SL_ARRAY_LEN(TABLE); i++)
        if (strcmp(TABLE[i].code, code) == 0)
            return TABLE[i].status;
    return 503;
}

char *sl_api_error_body(const char *code, const char *message, const json_t *errors)
{
    json_t *detail = json_pack("{s:s,s:s}", "code", code ? code : SL_E_INTERNAL, "message",
                               message && *message ? message : (code ? code : "error"));
    if (errors)
        json_object_set(detail, "errors", (json_t *)errors);
    _cleanup_json_ json_t *body = json_pack("{s:o}", "detail", detail);
    return json_dumps(body, JSON_COMPACT);
}
