/* The 13 MCP tools (spec MCP.md §2–§4), and ours beside them (issue 14:
 * listing, directories, delete, move, and files as UTF-8 text). Each
 * validates its arguments as the matching REST route does, calls the same
 * sl_svc_* function and reshapes the document where the MCP result model
 * differs (SandboxRouteInfo, ProfileInfo, ...). A refusal becomes a tool
 * result with isError true, never a protocol error, so the agent can read
 * it and recover. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/router.h"
#include "api/exec_request.h"
#include "api/mcp.h"
#include "api/tenant_view.h"
#include "api/validate.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "service/principal.h"
#include "service/service.h"
#include "service/tenants.h"

#define DEFAULT_PROFILE "coding-default"
#define MAX_PATH_CHARS 4096
#define MAX_B64_CHARS 47185920
/* Identifiers that the REST API takes from the path are not validated
 * there; here they are bounded so a huge string never reaches the store. */
#define MAX_ID_CHARS 1024

/* Who calls a tool: the service, and the principal of the request (its
 * key), whose quotas gate what adds to them and whose key the route
 * history names. A tenant's arguments and answers are in and out of its
 * namespace already (sl_mcp_tool_call), so a tool never sees the
 * difference otherwise. */
struct caller {
    struct sl_service *svc;
    const struct sl_principal *who;
};

static bool is_tenant(const struct caller *c)
{
    return c->who && c->who->kind == SL_PRINCIPAL_TENANT;
}

/* ---- annotation presets (MCP.md §2) ----------------------------------------- */

enum preset { READ_ONLY, IDEMPOTENT_WRITE, EXECUTE, RELEASE };

static json_t *annotations(enum preset p)
{
    switch (p) {
    case READ_ONLY:
        return json_pack("{s:b,s:b,s:b}", "readOnlyHint", 1, "idempotentHint", 1, "openWorldHint",
                         0);
    case IDEMPOTENT_WRITE:
        return json_pack("{s:b,s:b,s:b,s:b}", "readOnlyHint", 0, "destructiveHint", 0,
                         "idempotentHint", 1, "openWorldHint", 0);
    case EXECUTE:
    case RELEASE:
        return json_pack("{s:b,s:b,s:b,s:b}", "readOnlyHint", 0, "destructiveHint", 1,
                         "idempotentHint", 1, "openWorldHint", 0);
    }
    return json_object();
}

/* ---- schemas -------------------------------------------------------------- */

/* JSON Schema types of tool arguments and result fields (MCP.md §3:
 * str, int, bool, list[str], dict[str,str], "X|null"). */
enum ftype {
    F_STR,
    F_INT,
    F_BOOL,
    F_OBJ,
    F_STR_NULL,
    F_INT_NULL,
    F_STR_LIST,
    F_ENV_NULL,
    F_OBJ_LIST
};

struct field {
    const char *name;
    enum ftype type;
    bool required;
    const char *description; /* may be NULL */
    const char *def;         /* JSON text of the default, or NULL */
};

#define D_SANDBOX "Sandbox id (3-128 characters of A-Za-z0-9_.:-)"
#define D_GENERATION "Generation returned by sandbox_resolve; calls with another one are refused"
#define D_EXEC_ID "Idempotency key of the execution (3-128 characters of A-Za-z0-9_.:-)"
#define D_PATH "Path under /workspace (absolute, or relative to it)"

static const struct field IN_NONE[] = {{0}};
static const struct field IN_SANDBOX[] = {{"sandbox_id", F_STR, true, D_SANDBOX, NULL}, {0}};
static const struct field IN_SANDBOX_GEN[] = {{"sandbox_id", F_STR, true, D_SANDBOX, NULL},
                                              {"generation", F_INT, true, D_GENERATION, NULL},
                                              {0}};
static const struct field IN_EXEC_REF[] = {{"sandbox_id", F_STR, true, D_SANDBOX, NULL},
                                           {"generation", F_INT, true, D_GENERATION, NULL},
                                           {"exec_id", F_STR, true, D_EXEC_ID, NULL},
                                           {0}};
static const struct field IN_RESOLVE[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"workspace_scope_id", F_STR, true, "Owner scope; the sandbox id answers only this scope",
     NULL},
    {"profile", F_STR, false, "Runtime profile id of this worker", "\"" DEFAULT_PROFILE "\""},
    {0},
};
static const struct field IN_EXEC[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"exec_id", F_STR, true, D_EXEC_ID, NULL},
    {"argv", F_STR_LIST, true, "Command and arguments (1-256 items), run without a shell", NULL},
    {"cwd", F_STR, false, "/workspace or a directory below it", "\"/workspace\""},
    {"env", F_ENV_NULL, false, "Extra environment variables", "null"},
    {"timeout_seconds", F_INT_NULL, false, "1-86400; null = the worker's default", "null"},
    {"background", F_BOOL, false, "Answer RUNNING at once; poll with sandbox_exec_status", "false"},
    {"exec_scope", F_STR_NULL, false, "Executions sharing a scope never run concurrently", "null"},
    {0},
};
static const struct field IN_WRITE[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"path", F_STR, true, D_PATH, NULL},
    {"content_base64", F_STR, true, "File content, standard base64 with padding", NULL},
    {0},
};
static const struct field IN_READ[] = {{"sandbox_id", F_STR, true, D_SANDBOX, NULL},
                                       {"generation", F_INT, true, D_GENERATION, NULL},
                                       {"path", F_STR, true, D_PATH, NULL},
                                       {0}};

/* Ours (additive tools). */
static const struct field IN_LIST[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"path", F_STR, true, "Directory under /workspace", NULL},
    {"limit", F_INT, false, "Entries per page, 1-10000 (the worker caps it at its own limit)",
     "200"},
    {"offset", F_INT, false, "Entries to skip (sorted by name)", "0"},
    {0},
};
static const struct field IN_MKDIR[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"path", F_STR, true, D_PATH, NULL},
    {"parents", F_BOOL, false, "Create missing parent directories too", "false"},
    {0},
};
static const struct field IN_DELETE[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"path", F_STR, true, D_PATH, NULL},
    {"recursive", F_BOOL, false, "Delete a directory and everything in it", "false"},
    {0},
};
static const struct field IN_MOVE[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"source", F_STR, true, D_PATH, NULL},
    {"destination", F_STR, true, D_PATH, NULL},
    {"overwrite", F_BOOL, false, "Replace an existing destination", "false"},
    {0},
};
static const struct field IN_WRITE_TEXT[] = {
    {"sandbox_id", F_STR, true, D_SANDBOX, NULL},
    {"generation", F_INT, true, D_GENERATION, NULL},
    {"path", F_STR, true, D_PATH, NULL},
    {"text", F_STR, true, "File content as text, written as UTF-8", NULL},
    {0},
};

/* Result models. Fields a result may lack are not required. */
static const struct field OUT_PROFILE[] = {
    {"profile_id", F_STR, true, NULL, NULL},      {"profile_hash", F_STR, true, NULL, NULL},
    {"mcp_sdk_version", F_STR, true, NULL, NULL}, {"transport", F_STR, true, NULL, NULL},
    {"stateless", F_BOOL, true, NULL, NULL},      {"worker_id", F_STR, true, NULL, NULL},
    {"healthy", F_BOOL, true, NULL, NULL},        {"running_sessions", F_INT, true, NULL, NULL},
    {"running_execs", F_INT, true, NULL, NULL},   {"capabilities", F_OBJ, true, NULL, NULL},
    {"orphan_reaper", F_OBJ, true, NULL, NULL},   {0},
};
static const struct field OUT_ROUTE[] = {
    {"sandbox_id", F_STR, true, NULL, NULL},     {"generation", F_INT, true, NULL, NULL},
    {"status", F_STR, true, NULL, NULL},         {"storage_mode", F_STR, true, NULL, NULL},
    {"profile_id", F_STR, true, NULL, NULL},     {"profile_hash", F_STR, true, NULL, NULL},
    {"worker_id", F_STR_NULL, true, NULL, NULL}, {0},
};
static const struct field OUT_CREATE[] = {{"sandbox_id", F_STR, true, NULL, NULL},
                                          {"generation", F_INT, true, NULL, NULL},
                                          {"status", F_STR, true, NULL, NULL},
                                          {0}};
static const struct field OUT_AUDIT[] = {
    {"sandbox_id", F_STR, true, NULL, NULL},
    {"workspace_scope_id", F_STR, true, NULL, NULL},
    {"generation", F_INT, true, NULL, NULL},
    {"status", F_STR, true, NULL, NULL},
    {"first_created_at", F_STR_NULL, false, NULL, NULL},
    {"generation_started_at", F_STR_NULL, false, NULL, NULL},
    {"generation_created_by", F_STR_NULL, false, NULL, NULL},
    {"ready_at", F_STR_NULL, false, NULL, NULL},
    {"last_active_at", F_STR_NULL, false, NULL, NULL},
    {"active_duration_ms", F_INT_NULL, false, NULL, NULL},
    {"last_released_generation", F_INT_NULL, false, NULL, NULL},
    {"last_released_at", F_STR_NULL, false, NULL, NULL},
    {"last_release_reason", F_STR_NULL, false, NULL, NULL},
    {"last_released_by", F_STR_NULL, false, NULL, NULL},
    {"last_lifetime_ms", F_INT_NULL, false, NULL, NULL},
    {"lifecycle_count", F_INT, true, NULL, NULL},
    {"total_lifetime_ms", F_INT, true, NULL, NULL},
    {"history_retention_days", F_INT, true, NULL, NULL},
    {"history_max_entries", F_INT, true, NULL, NULL},
    {"history_max_bytes", F_INT, true, NULL, NULL},
    {"history", F_OBJ_LIST, true, NULL, NULL},
    {0},
};
static const struct field OUT_EXEC[] = {
    {"exec_id", F_STR, true, NULL, NULL},
    {"status", F_STR, true, NULL, NULL},
    {"exit_code", F_INT_NULL, true, NULL, NULL},
    {"stdout", F_STR, true, NULL, NULL},
    {"stderr", F_STR, true, NULL, NULL},
    {"duration_ms", F_INT_NULL, true, NULL, NULL},
    {"truncated", F_BOOL, true, NULL, NULL},
    /* Ours, additive (as in the REST answer): why the command ended. */
    {"termination_reason", F_STR_NULL, false, NULL, NULL},
    /* Ours, additive: when the session stops / the route is released if
     * nothing more happens. */
    {"session_idle_stop_at", F_STR_NULL, false, NULL, NULL},
    {"idle_release_at", F_STR_NULL, false, NULL, NULL},
    /* Ours, additive: the answer is an earlier command's (exec_id reused),
     * and what the caller should know about it. */
    {"replayed", F_BOOL, false, NULL, NULL},
    {"warnings", F_STR_LIST, false, NULL, NULL},
    {0},
};
static const struct field OUT_CANCEL[] = {{"cancelled", F_BOOL, true, NULL, NULL}, {0}};
static const struct field OUT_WRITE[] = {{"sandbox_id", F_STR, true, NULL, NULL},
                                         {"generation", F_INT, true, NULL, NULL},
                                         {"status", F_STR, true, NULL, NULL},
                                         {0}};
static const struct field OUT_READ[] = {
    {"path", F_STR, true, NULL, NULL}, {"content_base64", F_STR, true, NULL, NULL}, {0}};
static const struct field OUT_LIST[] = {
    {"path", F_STR, true, NULL, NULL},       {"entries", F_OBJ_LIST, true, NULL, NULL},
    {"total", F_INT, true, NULL, NULL},      {"has_more", F_BOOL, true, NULL, NULL},
    {0}};
static const struct field OUT_PATH_OK[] = {
    {"status", F_STR, true, NULL, NULL}, {"path", F_STR, true, NULL, NULL}, {0}};
static const struct field OUT_MOVE[] = {{"status", F_STR, true, NULL, NULL},
                                        {"source", F_STR, true, NULL, NULL},
                                        {"destination", F_STR, true, NULL, NULL},
                                        {0}};
static const struct field OUT_WRITE_TEXT[] = {
    {"sandbox_id", F_STR, true, NULL, NULL}, {"generation", F_INT, true, NULL, NULL},
    {"path", F_STR, true, NULL, NULL},       {"status", F_STR, true, NULL, NULL},
    {"bytes", F_INT, true, NULL, NULL},      {0}};
static const struct field OUT_READ_TEXT[] = {{"path", F_STR, true, NULL, NULL},
                                             {"text", F_STR, true, NULL, NULL},
                                             {"bytes", F_INT, true, NULL, NULL},
                                             {0}};
static const struct field OUT_SUSPEND[] = {
    {"sandbox_id", F_STR, true, NULL, NULL},
    {"generation", F_INT, true, NULL, NULL},
    {"status", F_STR, true, NULL, NULL},
    {"snapshot", F_BOOL, true, NULL, NULL},
    {"suspended", F_BOOL, true, NULL, NULL},
    {"retained_until", F_STR_NULL, true, NULL, NULL},
    {0},
};
static const struct field OUT_RESUME[] = {
    {"sandbox_id", F_STR, true, NULL, NULL},
    {"worker_id", F_STR, true, NULL, NULL},
    {"worker_epoch", F_STR, true, NULL, NULL},
    {"worker_endpoint", F_STR, true, NULL, NULL},
    {"generation", F_INT, true, NULL, NULL},
    {"sandbox_uid", F_INT, true, NULL, NULL},
    {"status", F_STR, true, NULL, NULL},
    {"storage_mode", F_STR, true, NULL, NULL},
    {"resumed", F_BOOL, true, NULL, NULL},
    {"workspace_source", F_STR, true, NULL, NULL},
    {0},
};
static const struct field OUT_RELEASE[] = {
    {"sandbox_id", F_STR, true, NULL, NULL}, {"status", F_STR, true, NULL, NULL}, {0}};

static json_t *type_schema(enum ftype t)
{
    switch (t) {
    case F_STR:
        return json_pack("{s:s}", "type", "string");
    case F_INT:
        return json_pack("{s:s}", "type", "integer");
    case F_BOOL:
        return json_pack("{s:s}", "type", "boolean");
    case F_OBJ:
        return json_pack("{s:s}", "type", "object");
    case F_STR_NULL:
        return json_pack("{s:[{s:s},{s:s}]}", "anyOf", "type", "string", "type", "null");
    case F_INT_NULL:
        return json_pack("{s:[{s:s},{s:s}]}", "anyOf", "type", "integer", "type", "null");
    case F_STR_LIST:
        return json_pack("{s:s,s:{s:s}}", "type", "array", "items", "type", "string");
    case F_ENV_NULL:
        return json_pack("{s:[{s:s,s:{s:s}},{s:s}]}", "anyOf", "type", "object",
                         "additionalProperties", "type", "string", "type", "null");
    case F_OBJ_LIST:
        return json_pack("{s:s,s:{s:s}}", "type", "array", "items", "type", "object");
    }
    return json_object();
}

static json_t *object_schema(const struct field *fields)
{
    json_t *props = json_object(), *required = json_array();
    for (const struct field *f = fields; f->name; f++) {
        json_t *p = type_schema(f->type);
        if (f->description)
            json_object_set_new(p, "description", json_string(f->description));
        if (f->def)
            json_object_set_new(p, "default", json_loads(f->def, JSON_DECODE_ANY, NULL));
        json_object_set_new(props, f->name, p);
        if (f->required)
            json_array_append_new(required, json_string(f->name));
    }
    json_t *schema = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    if (json_array_size(required))
        json_object_set(schema, "required", required);
    json_decref(required);
    return schema;
}

/* ---- argument helpers ----------------------------------------------------------- */

/* A tool's failure: an API code and a client-safe message. */
static json_t *fail(struct sl_error *err, const char *code, const char *message)
{
    sl_error_set(err, code, 0, "%s", message);
    return NULL;
}

/* Invalid arguments become a tool error naming each field and why (never
 * its value), as the reference's request models refuse them. */
static json_t *fail_invalid(struct sl_error *err, const struct sl_validation *v)
{
    char text[480] = "";
    size_t i;
    json_t *e;
    json_array_foreach(v->errors, i, e)
    {
        const char *msg = json_string_value(json_object_get(e, "msg"));
        if (!msg)
            continue;
        /* Tool arguments are not a request body. */
        static const char body[] = "body field ";
        bool arg = strncmp(msg, body, sizeof(body) - 1) == 0;
        size_t used = strlen(text);
        snprintf(text + used, sizeof(text) - used, "%s%s%s", used ? "; " : "",
                 arg ? "argument " : "", arg ? msg + sizeof(body) - 1 : msg);
    }
    sl_error_set(err, SL_E_INVALID_REQUEST, 0, "invalid arguments: %s", text);
    return NULL;
}

/* A sandbox or execution id taken from the path in REST. */
static const char *arg_id(struct sl_validation *v, const json_t *args, const char *field)
{
    return sl_v_string(v, args, field, true, 0, MAX_ID_CHARS, false, NULL);
}

static int64_t arg_generation(struct sl_validation *v, const json_t *args)
{
    int64_t generation = 0;
    sl_v_int(v, args, "generation", true, 1, INT64_MAX, 0, &generation);
    return generation;
}

static json_t *str_member(const json_t *doc, const char *key)
{
    json_t *s = json_object_get(doc, key);
    return json_is_string(s) ? json_incref(s) : json_null();
}

/* SandboxRouteInfo (MCP.md §3.2) from the raw route record. */
static json_t *route_info(const json_t *route)
{
    json_t *worker = json_object_get(route, "worker_id");
    return json_pack("{s:o,s:O,s:o,s:o,s:o,s:o,s:O}", "sandbox_id", str_member(route, "sandbox_id"),
                     "generation", json_object_get(route, "generation"), "status",
                     str_member(route, "status"), "storage_mode", str_member(route, "storage_mode"),
                     "profile_id", str_member(route, "profile_id"), "profile_hash",
                     str_member(route, "profile_hash"), "worker_id", worker ? worker : json_null());
}

/* ---- the tools ----------------------------------------------------------------- */

static json_t *t_profile(const struct caller *c, const json_t *args, struct sl_error *err)
{
    (void)args;
    _cleanup_json_ json_t *health = sl_svc_healthz(c->svc);
    if (!health)
        return fail(err, SL_E_INTERNAL, "internal error");
    const json_t *worker = json_object_get(health, "worker");
    const json_t *disk = json_object_get(health, "disk");
    /* /healthz is "ok" only with a fresh heartbeat and disk available;
     * ProfileInfo.healthy is the heartbeat part alone, so a "degraded"
     * explained by the disk still counts as healthy. */
    const char *status = sl_json_get_str(health, "status");
    bool healthy =
        (status && strcmp(status, "ok") == 0) || json_is_false(json_object_get(disk, "available"));
    json_t *caps = json_object_get(worker, "capabilities");
    json_t *reaper = json_object_get(worker, "orphan_reaper");
    return json_pack("{s:o,s:o,s:s,s:s,s:b,s:o,s:b,s:O,s:O,s:o,s:o}", "profile_id",
                     str_member(worker, "profile_id"), "profile_hash",
                     str_member(worker, "profile_hash"), "mcp_sdk_version",
                     "sandloom " SL_MCP_SERVER_VERSION " (protocol " SL_MCP_PROTOCOL_MODERN ")",
                     "transport", "streamable-http", "stateless", 1, "worker_id",
                     str_member(worker, "id"), "healthy", healthy, "running_sessions",
                     json_object_get(worker, "running_sessions"), "running_execs",
                     json_object_get(worker, "running_execs"), "capabilities",
                     caps ? json_incref(caps) : json_object(), "orphan_reaper",
                     reaper ? json_incref(reaper) : json_object());
}

static json_t *t_resolve(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    /* A tenant's names go into its namespace, as in REST: the room they
     * leave in the reference's columns is what it may use. */
    const char *tenant = is_tenant(c) ? c->who->tenant_id : NULL;
    size_t room = tenant ? strlen(tenant) + 1 : 0;
    const char *id = sl_v_string(&v, args, "sandbox_id", true, 3, 128 - room, true, NULL);
    const char *scope =
        sl_v_string(&v, args, "workspace_scope_id", true, 1, 191 - room, false, NULL);
    const char *profile = sl_v_string(&v, args, "profile", false, 1, 64, false, DEFAULT_PROFILE);
    json_t *out = NULL;
    char nid[130], nscope[194], actor[SL_PRINCIPAL_ACTOR_MAX];
    bool held = false;
    int64_t value = -1;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else if (sl_router_id_is_route(id)) {
        sl_router_refuse_reserved_id(id, err);
    } else if (tenant && (!sl_tenant_namespaced(tenant, id, 128, nid, sizeof(nid)) ||
                          !sl_tenant_namespaced(tenant, scope, 191, nscope, sizeof(nscope)))) {
        sl_error_set(err, SL_E_INTERNAL, 0, "internal error"); /* validated above */
    } else if (sl_svc_quota_enter(c->svc, c->who, SL_LIMIT_SANDBOXES, tenant ? nid : id, &held,
                                  &value, err) == 0) {
        if (tenant) {
            id = nid;
            scope = nscope;
        }
        _cleanup_json_ json_t *resolved = sl_svc_resolve(
            c->svc, id, scope, profile, sl_principal_actor(c->who, actor), err);
        sl_svc_quota_leave(c->svc, held);
        /* The answer is the route as stored after resolve (it may have
         * woken or reassigned it), in the MCP's own shape. */
        _cleanup_json_ json_t *route = resolved ? sl_svc_route_get(c->svc, id, err) : NULL;
        if (route)
            out = route_info(route);
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_create(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else {
        /* sl_svc_connect fences first: a missing route or another
         * generation is STALE_SANDBOX_ROUTE, as the tool requires. */
        bool held = false;
        int64_t value = -1;
        _cleanup_json_ json_t *doc = NULL;
        if (sl_svc_quota_enter(c->svc, c->who, SL_LIMIT_RUNNING_SESSIONS, id, &held, &value,
                               err) == 0) {
            doc = sl_svc_connect(c->svc, id, generation, err);
            sl_svc_quota_leave(c->svc, held);
        }
        if (doc) {
            const char *status = sl_json_get_str(doc, "status");
            out = json_pack("{s:s,s:I,s:s}", "sandbox_id", id, "generation", (json_int_t)generation,
                            "status", status ? status : "READY");
        }
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_status(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else {
        _cleanup_json_ json_t *route = sl_svc_route_get(c->svc, id, err);
        if (route)
            out = route_info(route);
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_audit(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_audit(c->svc, id, err);
    sl_v_free(&v);
    return out;
}

/* A synchronous command's answer, waited for on this thread. */
struct exec_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    json_t *doc;
};

static void exec_done(json_t *doc, void *ctx)
{
    struct exec_wait *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->doc = doc;
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* The command of a tenant with commands_in_flight set, whose quota lock the
 * caller holds: let go of it once the command is admitted (it counts from
 * then on), not when it ends, as REST does, then wait for the answer. */
static json_t *exec_admitted(const struct caller *c, const char *id,
                             const struct sl_exec_request *req, struct sl_error *err)
{
    struct exec_wait w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    json_t *out = NULL;
    int rc = sl_svc_exec(c->svc, id, req, exec_done, &w, &out, err);
    sl_svc_quota_leave(c->svc, true);
    if (rc == 1) {
        pthread_mutex_lock(&w.lock);
        while (!w.done)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        out = w.doc;
        if (!out)
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    } else if (rc < 0) {
        out = NULL;
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    return out;
}

static json_t *t_exec(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    /* The REST route's own validation; the MCP tool has no sensitive_env. */
    __attribute__((cleanup(sl_api_exec_clear))) struct sl_api_exec p = {0};
    bool ok = sl_api_exec_parse(args, false, &v, &p) && sl_v_ok(&v);
    p.req.stream = false; /* MCP answers in one response: no event stream */
    json_t *out = NULL;
    if (!ok) {
        fail_invalid(err, &v);
    } else {
        /* No waiter: a synchronous command blocks this handler thread
         * until it ends (MCP answers in one JSON response anyway). */
        bool held = false;
        int64_t value = -1;
        if (sl_svc_quota_enter(c->svc, c->who, SL_LIMIT_COMMANDS, NULL, &held, &value, err) <
            0)
            out = NULL;
        else if (!held && sl_svc_exec(c->svc, id, &p.req, NULL, NULL, &out, err) < 0)
            out = NULL;
        else if (held)
            out = exec_admitted(c, id, &p.req, err);
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_exec_status(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    const char *exec_id = arg_id(&v, args, "exec_id");
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_exec_get(c->svc, id, exec_id, generation, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_cancel(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    const char *exec_id = arg_id(&v, args, "exec_id");
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_exec_cancel(c->svc, id, exec_id, generation, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_write(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = {0};
    size_t b64_len = 0;
    path.s = sl_v_string_n(&v, args, "path", true, 1, MAX_PATH_CHARS, &path.len);
    const char *b64 = sl_v_string_n(&v, args, "content_base64", true, 0, MAX_B64_CHARS, &b64_len);
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else {
        _cleanup_json_ json_t *doc =
            sl_svc_file_write(c->svc, id, generation, path, b64, b64_len, err);
        if (doc)
            out = json_pack("{s:s,s:I,s:s}", "sandbox_id", id, "generation", (json_int_t)generation,
                            "status", "WRITTEN");
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_read(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = {0};
    /* Like the REST query parameter: any string; the file layer judges it. */
    path.s = sl_v_string_n(&v, args, "path", true, 0, SIZE_MAX, &path.len);
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else {
        _cleanup_json_ json_t *doc = sl_svc_file_read(c->svc, id, generation, path, err);
        if (doc)
            out = json_pack("{s:O,s:o}", "path", json_object_get(args, "path"), "content_base64",
                            str_member(doc, "content_base64"));
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_suspend(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_suspend(c->svc, id, generation, false, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_resume(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    json_t *out = NULL;
    bool held = false;
    int64_t value = -1;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else if (sl_svc_quota_enter(c->svc, c->who, SL_LIMIT_RUNNING_SESSIONS, id, &held, &value,
                                  err) == 0) {
        out = sl_svc_resume(c->svc, id, err);
        sl_svc_quota_leave(c->svc, held);
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_release(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else {
        /* An unknown id is released already: the service answers RELEASED. */
        char actor[SL_PRINCIPAL_ACTOR_MAX];
        _cleanup_json_ json_t *doc =
            sl_svc_release(c->svc, id, sl_principal_actor(c->who, actor), err);
        if (doc)
            out = json_pack("{s:s,s:s}", "sandbox_id", id, "status", "RELEASED");
    }
    sl_v_free(&v);
    return out;
}

/* ---- the table -------------------------------------------------------------- */

/* ---- ours: directories, moves, and files as text ------------------------ */

/* A path argument as the REST routes take it: 1-4096 characters. */
static struct sl_file_path arg_path(struct sl_validation *v, const json_t *args, const char *field)
{
    struct sl_file_path p = {0};
    p.s = sl_v_string_n(v, args, field, true, 1, MAX_PATH_CHARS, &p.len);
    return p;
}

static json_t *t_list_dir(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = arg_path(&v, args, "path");
    int64_t limit = 200, offset = 0;
    sl_v_int(&v, args, "limit", false, 1, 10000, 200, &limit);
    sl_v_int(&v, args, "offset", false, 0, INT64_MAX, 0, &offset);
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_file_list(c->svc, id, generation, path, limit, offset, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_make_dir(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = arg_path(&v, args, "path");
    bool parents = false;
    sl_v_bool(&v, args, "parents", false, &parents);
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_file_mkdir(c->svc, id, generation, path, parents, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_delete_path(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = arg_path(&v, args, "path");
    bool recursive = false;
    sl_v_bool(&v, args, "recursive", false, &recursive);
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_file_delete(c->svc, id, generation, path, recursive, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_move_path(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path src = arg_path(&v, args, "source");
    struct sl_file_path dst = arg_path(&v, args, "destination");
    bool overwrite = false;
    sl_v_bool(&v, args, "overwrite", false, &overwrite);
    json_t *out = NULL;
    if (!sl_v_ok(&v))
        fail_invalid(err, &v);
    else
        out = sl_svc_file_move(c->svc, id, generation, src, dst, overwrite, err);
    sl_v_free(&v);
    return out;
}

static json_t *t_write_text(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = arg_path(&v, args, "path");
    size_t len = 0;
    /* The file API's byte limit is checked by the write itself. */
    const char *text = sl_v_string_n(&v, args, "text", true, 0, MAX_B64_CHARS, &len);
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
    } else {
        _cleanup_free_ char *b64 = sl_base64_encode(text, len);
        _cleanup_json_ json_t *doc =
            b64 ? sl_svc_file_write(c->svc, id, generation, path, b64, strlen(b64), err) : NULL;
        if (!b64)
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        else if (doc)
            out = json_pack("{s:s,s:I,s:O,s:s,s:I}", "sandbox_id", id, "generation",
                            (json_int_t)generation, "path", json_object_get(args, "path"),
                            "status", "WRITTEN", "bytes", (json_int_t)len);
    }
    sl_v_free(&v);
    return out;
}

static json_t *t_read_text(const struct caller *c, const json_t *args, struct sl_error *err)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = arg_id(&v, args, "sandbox_id");
    int64_t generation = arg_generation(&v, args);
    struct sl_file_path path = {0};
    path.s = sl_v_string_n(&v, args, "path", true, 0, SIZE_MAX, &path.len);
    json_t *out = NULL;
    if (!sl_v_ok(&v)) {
        fail_invalid(err, &v);
        sl_v_free(&v);
        return NULL;
    }
    sl_v_free(&v);
    _cleanup_json_ json_t *doc = sl_svc_file_read(c->svc, id, generation, path, err);
    if (!doc)
        return NULL;
    const char *b64 = json_string_value(json_object_get(doc, "content_base64"));
    struct sl_buf raw;
    sl_buf_init(&raw, SIZE_MAX);
    if (sl_base64_decode_strict(b64 ? b64 : "", b64 ? strlen(b64) : 0, &raw, SIZE_MAX, err) < 0)
        return NULL;
    /* json_stringn refuses what is not UTF-8: such a file is read with
     * sandbox_read_file, as base64. */
    json_t *text = json_stringn(raw.data ? raw.data : "", raw.len);
    if (!text) {
        sl_buf_free(&raw);
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                     "the file is not UTF-8 text: read it with sandbox_read_file (base64)");
        return NULL;
    }
    out = json_pack("{s:O,s:o,s:I}", "path", json_object_get(args, "path"), "text", text, "bytes",
                    (json_int_t)raw.len);
    sl_buf_free(&raw);
    return out;
}

struct tool {
    const char *name;
    const char *title; /* only sandbox_profile has one (MCP.md §2) */
    const char *description;
    enum preset preset;
    const struct field *input;
    const struct field *output;
    json_t *(*call)(const struct caller *c, const json_t *args, struct sl_error *err);
};

static const struct tool TOOLS[] = {
    {"sandbox_profile", "Sandbox runtime profile",
     "Describe this worker: runtime profile id and hash, health, load, isolation "
     "capabilities and the orphan reaper's status.",
     READ_ONLY, IN_NONE, OUT_PROFILE, t_profile},
    {"sandbox_resolve", NULL,
     "Create or find the sandbox route for an id and workspace scope (waking a suspended "
     "sandbox). Keep the returned generation: every later call must carry it. Then call "
     "sandbox_create.",
     IDEMPOTENT_WRITE, IN_RESOLVE, OUT_ROUTE, t_resolve},
    {"sandbox_create", NULL,
     "Create the sandbox on its worker for the generation returned by sandbox_resolve "
     "(idempotent).",
     IDEMPOTENT_WRITE, IN_SANDBOX_GEN, OUT_CREATE, t_create},
    {"sandbox_status", NULL, "Read the sandbox route: generation, status, owner worker.", READ_ONLY,
     IN_SANDBOX, OUT_ROUTE, t_status},
    {"sandbox_audit_get", NULL,
     "Lifecycle audit of a sandbox: current generation, timings and the bounded history of "
     "earlier generations.",
     READ_ONLY, IN_SANDBOX, OUT_AUDIT, t_audit},
    {"sandbox_exec", NULL,
     "Run a command (argv, no shell) in the sandbox. Synchronous by default; with "
     "background=true answers RUNNING at once. Reusing an exec_id replays the stored result.",
     EXECUTE, IN_EXEC, OUT_EXEC, t_exec},
    {"sandbox_exec_status", NULL, "Poll an execution by exec_id (status, exit code, output).",
     READ_ONLY, IN_EXEC_REF, OUT_EXEC, t_exec_status},
    {"sandbox_cancel", NULL,
     "Signal a running execution (SIGTERM, then SIGKILL after the grace period); "
     "cancelled=false when nothing was running.",
     IDEMPOTENT_WRITE, IN_EXEC_REF, OUT_CANCEL, t_cancel},
    {"sandbox_write_file", NULL, "Write a file under /workspace atomically (base64 content).",
     IDEMPOTENT_WRITE, IN_WRITE, OUT_WRITE, t_write},
    {"sandbox_read_file", NULL, "Read a file under /workspace (base64 content).", READ_ONLY,
     IN_READ, OUT_READ, t_read},
    {"sandbox_suspend", NULL,
     "Suspend an idle sandbox before a long wait: its workspace is kept, its slot freed. "
     "sandbox_resume or sandbox_resolve wakes it.",
     IDEMPOTENT_WRITE, IN_SANDBOX_GEN, OUT_SUSPEND, t_suspend},
    {"sandbox_resume", NULL,
     "Wake a suspended sandbox; answers the route with its (possibly new) generation.",
     IDEMPOTENT_WRITE, IN_SANDBOX, OUT_RESUME, t_resume},
    {"sandbox_release", NULL,
     "Release the sandbox: kill its processes and discard its workspace. Always call it when "
     "done; an unknown id is already released.",
     RELEASE, IN_SANDBOX, OUT_RELEASE, t_release},
    /* Ours, additive: the same service calls as the REST file routes. */
    {"sandbox_list_dir", NULL,
     "List a directory under /workspace: name, path, type, size, mtime and mode of each entry, "
     "sorted by name, paged with limit and offset.",
     READ_ONLY, IN_LIST, OUT_LIST, t_list_dir},
    {"sandbox_make_dir", NULL, "Create a directory under /workspace (parents=true: with its "
                               "missing parents).",
     IDEMPOTENT_WRITE, IN_MKDIR, OUT_PATH_OK, t_make_dir},
    {"sandbox_delete_path", NULL,
     "Delete a file, or a directory (recursive=true for one that is not empty), under "
     "/workspace.",
     RELEASE, IN_DELETE, OUT_PATH_OK, t_delete_path},
    {"sandbox_move_path", NULL,
     "Move or rename a file or directory under /workspace (overwrite=true replaces an existing "
     "destination).",
     RELEASE, IN_MOVE, OUT_MOVE, t_move_path},
    {"sandbox_write_text", NULL,
     "Write a text file under /workspace atomically, as UTF-8 (sandbox_write_file takes "
     "base64 for binary content).",
     IDEMPOTENT_WRITE, IN_WRITE_TEXT, OUT_WRITE_TEXT, t_write_text},
    {"sandbox_read_text", NULL,
     "Read a text file under /workspace as UTF-8 (a file that is not UTF-8 is refused: read it "
     "with sandbox_read_file, as base64).",
     READ_ONLY, IN_READ, OUT_READ_TEXT, t_read_text},
};

json_t *sl_mcp_tools_list(void)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < SL_ARRAY_LEN(TOOLS); i++) {
        const struct tool *t = &TOOLS[i];
        json_t *def =
            json_pack("{s:s,s:s,s:o,s:o,s:o}", "name", t->name, "description", t->description,
                      "inputSchema", object_schema(t->input), "outputSchema",
                      object_schema(t->output), "annotations", annotations(t->preset));
        if (def && t->title)
            json_object_set_new(def, "title", json_string(t->title));
        json_array_append_new(list, def);
    }
    return list;
}

/* The text block of a failed call: the SDK's prefix, then the code and the
 * client-safe message (only one of them when they are the same). A failed
 * call still answers HTTP 200, so the access line says nothing of it: this
 * is the top of the call, and it logs the refusal once, operator detail
 * included. */
static json_t *error_result(const char *tool, const struct sl_error *err)
{
    const char *code = err->code ? err->code : SL_E_INTERNAL;
    const char *message = sl_api_message_for(code, err->message);
    int status = sl_api_status_for_code(code);
    struct sl_log_field f[] = {
        SL_LF_STR("tool", tool),
        SL_LF_STR("code", code),
        SL_LF_STR("message", message),
        SL_LF_STR("detail", err->detail[0] ? err->detail : NULL),
    };
    sl_log_event(status >= 500 ? SL_LOG_WARN : SL_LOG_INFO, "mcp_tool_error", f,
                 sizeof(f) / sizeof(f[0]));
    if (status == 500)
        message = "internal error"; /* never internals */
    char text[512];
    if (strcmp(code, message) == 0)
        snprintf(text, sizeof(text), "Error executing tool %s: %s", tool, code);
    else
        snprintf(text, sizeof(text), "Error executing tool %s: %s: %s", tool, code, message);
    return json_pack("{s:[{s:s,s:s}],s:b}", "content", "type", "text", "text", text, "isError", 1);
}

/* A tenant's sandbox_id argument in its namespace, in a shallow copy of the
 * arguments (a file's content is shared, not copied). sandbox_resolve
 * does its own, since it validates the name first. NULL with
 * SANDBOX_NOT_FOUND for a name the tenant could not have created, the
 * answer REST gives (api/http.c). */
static json_t *tenant_args(const struct caller *c, const struct tool *t, const json_t *args,
                           struct sl_error *err)
{
    const char *name = json_string_value(json_object_get(args, "sandbox_id"));
    if (!is_tenant(c) || t->call == t_resolve || !name)
        return json_incref((json_t *)args); /* a missing or wrong type is the tool's refusal */
    char nid[130];
    if (strlen(name) < 3 || !sl_v_is_identifier(name) ||
        !sl_tenant_namespaced(c->who->tenant_id, name, 128, nid, sizeof(nid))) {
        sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "SANDBOX_NOT_FOUND");
        return NULL;
    }
    json_t *own = json_copy((json_t *)args);
    if (!own || json_object_set_new(own, "sandbox_id", json_string(nid)) < 0) {
        json_decref(own);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    return own;
}

json_t *sl_mcp_tool_call(struct sl_service *svc, const struct sl_principal *who,
                         const char *name, const json_t *args)
{
    const struct tool *t = NULL;
    for (size_t i = 0; i < SL_ARRAY_LEN(TOOLS); i++)
        if (strcmp(TOOLS[i].name, name) == 0)
            t = &TOOLS[i];
    if (!t)
        return NULL;
    const struct caller c = {.svc = svc, .who = who};
    struct sl_error err = {0};
    _cleanup_json_ json_t *own = tenant_args(&c, t, args, &err);
    _cleanup_json_ json_t *structured = own ? t->call(&c, own, &err) : NULL;
    if (!json_is_object(structured)) {
        if (!err.code)
            sl_error_set(&err, SL_E_INTERNAL, 0, "internal error");
        return error_result(t->name, &err);
    }
    if (is_tenant(&c))
        sl_tenant_view_strip(structured, who->tenant_id);
    /* The text block carries the same data for clients that ignore
     * structuredContent (MCP.md §4.1). */
    _cleanup_free_ char *text = json_dumps(structured, JSON_COMPACT);
    if (!text) {
        sl_error_set(&err, SL_E_INTERNAL, 0, "internal error");
        return error_result(t->name, &err);
    }
    return json_pack("{s:[{s:s,s:s}],s:O,s:b}", "content", "type", "text", "text", text,
                     "structuredContent", structured, "isError", 0);
}
