#include "api/errors.h"

#include <string.h>

#include "common/cleanup.h"
#include "service/tenants.h"

struct code_status {
    const char *code;
    int status;
    /* Ours: the message when the refusal carries none of its own (the
     * reference sends the bare code): what happened and what to do. */
    const char *sentence;
};

/* API.md §0.5, plus the codes of this build's own refusals (COMPAT.md §2).
 * Anything not listed is 503, as in the reference. */
static const struct code_status TABLE[] = {
    {SL_E_INVALID_ARGUMENT, 400, "a value in the request is not acceptable"},
    {SL_E_ID_RESERVED, 400, "this sandbox id is the name of an API route: choose another id"},
    {"SANDBOX_TEMPLATE_SOURCE_NOT_A_DIRECTORY", 400,
     "the template's source_path is not a directory inside the sandbox: make it (for example "
     "under /envs) before publishing"},
    {SL_E_UNAUTHORIZED, 401, "internal service authentication failed"},
    {SL_E_TENANT_NOT_FOUND, 404, "no tenant with this tenant_id"},
    {SL_E_API_KEY_NOT_FOUND, 404, "this tenant has no API key with this key_id"},
    {SL_E_TENANT_EXISTS, 409, "a tenant with this tenant_id exists"},
    {SL_E_TENANT_QUOTA_EXCEEDED, 429,
     "the tenant's quota is used up: release or suspend what it holds, or ask the operator for "
     "more"},
    {SL_E_TENANCY_UNAVAILABLE, 503,
     "this database has no tenant tables: apply the deploy SQL (deploy/sql/) or enable "
     "SANDBOX_DATABASE_AUTO_DDL, then restart the service"},
    {SL_E_TENANT_FORBIDDEN, 403,
     "this route is the operator's (the internal token): a tenant's API key cannot call it"},
    {SL_E_EGRESS_POLICY_INVALID, 422,
     "the egress policy is not valid: see the message for the field and entry"},
    {SL_E_EGRESS_UNSUPPORTED, 409,
     "egress policies apply in the private network mode (SANDBOX_NETWORK_MODE=private) only"},
    {SL_E_EGRESS_NOT_INSTALLED, 503,
     "the egress policy could not be installed, so the sandbox's network is cut off: try again"},
    {SL_E_SANDBOX_NOT_FOUND, 404,
     "no such sandbox: resolve it first (POST /api/v1/sandboxes/resolve)"},
    {SL_E_EXEC_NOT_FOUND, 404, "no execution with this exec_id in this sandbox"},
    {SL_E_NOT_FOUND, 404, "no such route"},
    {SL_E_METHOD_NOT_ALLOWED, 405, "method not allowed on this route (see the Allow header)"},
    {SL_E_BUSY_OR_STALE, 409,
     "the sandbox is running a command, or the generation given is stale: wait for the command, "
     "or resolve the sandbox again"},
    {SL_E_STALE_GENERATION, 409,
     "the generation given is not the sandbox's current one: resolve it again and use the "
     "generation it answers"},
    {SL_E_SCOPE_MISMATCH, 409, "the sandbox belongs to another workspace_scope_id"},
    {SL_E_PROFILE_MISMATCH, 409, "the sandbox was created with another profile"},
    {"SANDBOX_WORKSPACE_LOST", 409,
     "the sandbox's workspace was lost with its worker: release it and resolve it again"},
    {SL_E_STALE_ROUTE, 409,
     "the sandbox's route is stale (released, reassigned, or its worker restarted): resolve it "
     "again and use the generation it answers"},
    {SL_E_SHARED_WORKSPACE_LOCKED, 409,
     "another operation holds the shared workspace: retry when it is done"},
    {SL_E_EXEC_SCOPE_BUSY, 409,
     "a command with the same exec_scope is running: wait for it, or use another exec_scope"},
    {"SANDBOX_EXEC_SCOPE_LOCKED", 409,
     "the sandbox is held by a command without exec_scope, a template or a suspend: retry when "
     "it ends"},
    {SL_E_FILE_PATH_LOCKED, 409, "another file operation on this path is in progress: retry"},
    {SL_E_SUSPENDED, 409,
     "the sandbox is suspended: resume it (POST /api/v1/sandboxes/{id}/resume), then call again"},
    {"SANDBOX_SUSPEND_BUSY", 409,
     "the sandbox is running a command: suspend it when the command has ended"},
    {"SANDBOX_FORK_BUSY", 409,
     "the sandbox is busy: fork a READY sandbox whose commands have ended, or a suspended one"},
    {"SANDBOX_FORK_TARGET_EXISTS", 409, "a sandbox of that name exists: name new sandboxes"},
    {"SANDBOX_SUSPEND_IN_PROGRESS", 409,
     "a suspend or resume of this sandbox is in progress: retry when it is done"},
    {"SANDBOX_NOT_READY", 409,
     "the sandbox is not READY: create it (POST /api/v1/sandboxes/{id} with its generation) "
     "first"},
    {"SANDBOX_SNAPSHOT_FAILED", 409,
     "the workspace could not be archived to the object store; the sandbox is unchanged"},
    {SL_E_TOO_LARGE, 413, "the request body is too large for this route"},
    {SL_E_INVALID_REQUEST, 422, "request validation failed"},
    {SL_E_PARALLEL_EXEC_LIMIT, 429,
     "the sandbox already runs as many commands as SANDBOX_MAX_PARALLEL_EXECS_PER_SANDBOX "
     "allows: wait for one to end"},
    {SL_E_LIST_BUSY, 429, "the sandbox already runs two directory listings: retry when one ends"},
    {SL_E_STDIN_CLOSED, 409,
     "the command has no stdin to write to: start it with \"stdin\": true, and write "
     "before closing it"},
    {SL_E_EXEC_NOT_RUNNING, 409, "the command has ended"},
    {SL_E_TERMINAL_LIMIT, 429,
     "too many terminals run (SANDBOX_MAX_TERMINALS_PER_SANDBOX, SANDBOX_MAX_TERMINALS): exit "
     "one"},
    {SL_E_NOT_A_TERMINAL, 409, "this command runs without a terminal"},
    {SL_E_ALREADY_PAUSED, 409, "the sandbox is already paused: connect to resume it"},
    {SL_E_E2B_UNAVAILABLE, 503,
     "this database has no E2B table: apply the deploy SQL (deploy/sql/) or enable "
     "SANDBOX_DATABASE_AUTO_DDL, then restart the service"},
    {SL_E_PORT_NOT_LISTENING, 502, "nothing in the sandbox listens on this port"},
    {SL_E_PORT_BAD_GATEWAY, 502,
     "the server in the sandbox did not answer with HTTP within the limits (SANDBOX_PORT_TIMEOUT_SECONDS, SANDBOX_PORT_MAX_BODY_BYTES)"},
    {SL_E_ON_ANOTHER_WORKER, 421,
     "the sandbox runs on another worker, and this connection is not relayed there: connect to that worker (its endpoint is in the sandbox's route)"},
    {SL_E_UPGRADE_REQUIRED, 426,
     "this route speaks WebSocket: send the upgrade request (Connection: Upgrade, Upgrade: "
     "websocket, Sec-WebSocket-Version: 13, Sec-WebSocket-Key)"},
    {SL_E_WATCH_LIMIT, 429,
     "too many file watches are open (SANDBOX_MAX_WATCHES_PER_SANDBOX, SANDBOX_MAX_WATCHES): "
     "close one"},
    {SL_E_STREAM_LIMIT, 429,
     "too many output streams are open (SANDBOX_MAX_STREAMS_PER_SANDBOX, SANDBOX_MAX_STREAMS): "
     "close one"},
    {SL_E_INTERNAL, 500, "internal error"},
    {SL_E_DISK_FULL, 507, "no space left on the sandbox's disk"},
    {"SANDBOX_TEMPLATES_UNSUPPORTED", 501, "templates are not supported by this metadata store"},
    {"SANDBOX_SUSPEND_UNSUPPORTED", 501, "suspend is not supported by this metadata store"},
    {"SANDBOX_MEMORY_SUSPEND_UNSUPPORTED", 501,
     "this worker's execution backend cannot keep a sandbox's memory "
     "(SANDBOX_EXECUTION_BACKEND=gvisor can): suspend without \"memory\""},
    {"SANDBOX_SNAPSHOT_UNAVAILABLE", 501,
     "snapshots need an object store: set SANDBOX_BLOBSTORE_BUCKET"},
    {"SANDBOX_DIRECTORY_OPS_UNSUPPORTED", 501, "directory operations are not supported here"},
    {"SANDBOX_FLEET_QUERIES_UNSUPPORTED", 501,
     "fleet queries are not supported by this metadata store"},
    {"OBJECT_STORE_UNAVAILABLE", 503, "the object store cannot be reached: retry later"},
    /* 503 as every code not listed, with a sentence. */
    {SL_E_NO_WORKER, 503,
     "no worker can take the sandbox now (capacity, disk pressure, or no worker with its "
     "profile): retry later"},
    {SL_E_WORKER_UNREACHABLE, 503, "the worker that holds the sandbox cannot be reached"},
    {SL_E_DISK_PRESSURE, 503,
     "the worker's disk is too full for another sandbox (SANDBOX_MIN_FREE_BYTES, "
     "SANDBOX_DISK_HIGH_WATERMARK_PERCENT)"},
    {SL_E_UID_POOL_EXHAUSTED, 503,
     "every sandbox uid of this worker is in use (SANDBOX_UID_START to SANDBOX_UID_END)"},
    {SL_E_WORKSPACE_INVALID, 503,
     "the sandbox's directories on its worker have an unexpected shape: release it and resolve "
     "it again"},
    {SL_E_STORE, 503, "the metadata database is unavailable: retry later"},
    {SL_E_OVERLOADED, 503, "the worker has too many requests queued: retry later"},
    {SL_E_OWNED_ELSEWHERE, 503, "the request could not be forwarded to the worker that holds the sandbox"},
    {SL_E_RUNTIME, 503, "the command could not be started in the sandbox"},
    {SL_E_RELEASING, 503, "the sandbox is being released: resolve it again when that is done"},
    {SL_E_PROFILE_UNAVAILABLE, 503, "no worker offers this profile"},
    {"SANDBOX_DORMANT_WORKSPACE_UNAVAILABLE", 503,
     "the suspended sandbox's files are on a worker that is gone, and there is no snapshot"},
};

static const struct code_status *code_entry(const char *code)
{
    for (size_t i = 0; code && i < SL_ARRAY_LEN(TABLE); i++)
        if (strcmp(TABLE[i].code, code) == 0)
            return &TABLE[i];
    return NULL;
}

int sl_api_status_for_code(const char *code)
{
    if (!code)
        return 500;
    const struct code_status *e = code_entry(code);
    return e ? e->status : 503;
}

const char *sl_api_message_for(const char *code, const char *message)
{
    if (message && *message && (!code || strcmp(message, code) != 0))
        return message;
    const struct code_status *e = code_entry(code);
    if (e)
        return e->sentence;
    return code ? code : "error";
}

char *sl_api_error_body(const char *code, const char *message, const json_t *errors)
{
    json_t *detail = json_pack("{s:s,s:s}", "code", code ? code : SL_E_INTERNAL, "message",
                               sl_api_message_for(code, message));
    if (errors)
        json_object_set(detail, "errors", (json_t *)errors);
    _cleanup_json_ json_t *body = json_pack("{s:o}", "detail", detail);
    return json_dumps(body, JSON_COMPACT);
}
