/* The route table and its handlers. Each handler validates its input in the
 * reference's 422 shape, calls one service function and encodes the answer. */
#include <microhttpd.h>
#include <signal.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/forward.h"
#include "api/exec_request.h"
#include "api/exec_stream.h"
#include "api/fs_watch.h"
#include "api/mcp.h"
#include "api/pages.h"
#include "api/port_proxy.h"
#include "api/router.h"
#include "api/tenant_view.h"
#include "api/terminal_ws.h"
#include "api/validate.h"
#include "e2b/e2b.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "net/egress.h"
#include "service/outlog.h"
#include "service/service.h"
#include "service/tenants.h"
#include "store/store.h"

#define MAX_PATH_CHARS 4096
#define MAX_B64_CHARS 47185920
#define DEFAULT_PROFILE "coding-default"

/* ---- response helpers ------------------------------------------------------ */

static void respond_json(struct sl_response *resp, int status, json_t *doc)
{
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = json_dumps(doc, JSON_COMPACT);
    resp->len = resp->body ? strlen(resp->body) : 0;
    json_decref(doc);
}

static void respond_error(struct sl_response *resp, const struct sl_error *err)
{
    resp->status = sl_api_status_for_code(err->code);
    resp->content_type = "application/json";
    /* A 500 never carries internal detail to the client; the access log
     * line gets it (and any error's operator detail). */
    const char *message = resp->status == 500 ? "internal error" : err->message;
    snprintf(resp->log_detail, sizeof(resp->log_detail), "%.255s",
             err->detail[0] ? err->detail : resp->status == 500 ? err->message : "");
    if (sl_error_is(err, SL_E_OWNED_ELSEWHERE)) {
        resp->forward = true;
        resp->owner = err->owner;
    }
    if (err->limit) {
        /* A limit refused: which one, and its value (ours, additive). */
        _cleanup_json_ json_t *body =
            json_pack("{s:{s:s,s:s,s:s,s:I}}", "detail", "code", err->code, "message", message,
                      "limit", err->limit, "value", (json_int_t)err->limit_value);
        resp->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
    } else {
        resp->body = sl_api_error_body(err->code, message, NULL);
    }
    resp->len = resp->body ? strlen(resp->body) : 0;
}

static void respond_invalid(struct sl_response *resp, const struct sl_validation *v)
{
    resp->status = 422;
    resp->content_type = "application/json";
    char message[320];
    sl_v_message(v, message, sizeof(message));
    resp->body = sl_api_error_body(SL_E_INVALID_REQUEST, message, v->errors);
    resp->len = resp->body ? strlen(resp->body) : 0;
}

/* A tenant's request that adds one of `limit`: true when admitted, and
 * *held says whether the caller now holds the quota lock until what it
 * admits is done (sl_svc_quota_leave); false, answered (429 naming the
 * limit), when over. */
static bool quota_admits(struct sl_request *req, struct sl_response *resp,
                         enum sl_tenant_limit limit, const char *sandbox_id, bool *held)
{
    struct sl_error err = {0};
    int64_t value = -1;
    if (sl_svc_quota_enter(req->svc, req->principal, limit, sandbox_id, held, &value, &err) == 0)
        return true;
    respond_error(resp, &err); /* 429 names the limit and its value */
    return false;
}

/* The answer of a service call: the document, or the error it raised. */
static void respond_result(struct sl_response *resp, json_t *doc, const struct sl_error *err)
{
    if (doc)
        respond_json(resp, 200, doc);
    else
        respond_error(resp, err);
}

static void respond_text(struct sl_response *resp, int status, const char *type, const char *text)
{
    resp->status = status;
    resp->content_type = type;
    resp->body = strdup(text);
    resp->len = resp->body ? strlen(resp->body) : 0;
}

static const char *query_n(struct sl_request *req, const char *name, size_t *len)
{
    const char *value = NULL;
    size_t n = 0;
    if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name),
                                      &value, &n) != MHD_YES)
        return NULL;
    if (len)
        *len = n;
    return value ? value : "";
}

static const char *query(struct sl_request *req, const char *name)
{
    return query_n(req, name, NULL);
}

/* ---- public documents ---------------------------------------------------- */

static void h_health(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/plain; charset=utf-8", "ok");
}

static void h_healthz(struct sl_request *req, struct sl_response *resp)
{
    respond_json(resp, 200, sl_svc_healthz(req->svc));
}

static void h_internal_destroy(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        respond_result(resp, sl_svc_worker_destroy(req->svc, req->params[0], generation, &err),
                       &err);
    }
    sl_v_free(&v);
}

static void h_internal_health(struct sl_request *req, struct sl_response *resp)
{
    respond_json(resp, 200, sl_svc_internal_health(req->svc));
}

static void h_openapi(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_json(resp, 200, sl_openapi_document());
}

static void h_docs(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/html; charset=utf-8", sl_page_docs);
}

static void h_docs_js(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/javascript; charset=utf-8", sl_asset_swagger_js);
    resp->cacheable = true;
}

static void h_docs_css(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/css; charset=utf-8", sl_asset_swagger_css);
    resp->cacheable = true;
}

static void h_admin_xterm_js(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/javascript; charset=utf-8", sl_asset_xterm_js);
    resp->cacheable = true;
}

static void h_admin_xterm_css(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/css; charset=utf-8", sl_asset_xterm_css);
    resp->cacheable = true;
}

static void h_admin(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    respond_text(resp, 200, "text/html; charset=utf-8", sl_page_console);
}

/* ---- lifecycle --------------------------------------------------------------- */

#define SANDBOXES_PREFIX "/api/v1/sandboxes/"

bool sl_router_id_is_route(const char *sandbox_id)
{
    size_t n = strlen(sandbox_id);
    for (size_t i = 0; i < sl_routes_len; i++) {
        const char *p = sl_routes[i].pattern;
        if (strncmp(p, SANDBOXES_PREFIX, strlen(SANDBOXES_PREFIX)) != 0)
            continue;
        p += strlen(SANDBOXES_PREFIX);
        if (*p != '{' && strncmp(p, sandbox_id, n) == 0 && (p[n] == '/' || p[n] == '\0'))
            return true;
    }
    return false;
}

int sl_router_refuse_reserved_id(const char *sandbox_id, struct sl_error *err)
{
    return sl_error_set(err, SL_E_ID_RESERVED, 0,
                        "sandbox id '%s' is the name of an API route under %s: choose another id",
                        sandbox_id, SANDBOXES_PREFIX);
}

static void h_resolve(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    /* A tenant's names go into its namespace ("<tenant_id>~"): the room
     * they leave in the reference's columns is what a tenant may use. */
    bool tenant = req->principal && req->principal->kind == SL_PRINCIPAL_TENANT;
    size_t room = tenant ? strlen(req->principal->tenant_id) + 1 : 0;
    const char *id = sl_v_string(&v, req->body, "sandbox_id", true, 3, 128 - room, true, NULL);
    const char *scope =
        sl_v_string(&v, req->body, "workspace_scope_id", true, 1, 191 - room, false, NULL);
    const char *profile =
        sl_v_string(&v, req->body, "profile", false, 1, 64, false, DEFAULT_PROFILE);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        char nid[130], nscope[194], actor[SL_PRINCIPAL_ACTOR_MAX];
        const char *by = sl_principal_actor(req->principal, actor);
        if (tenant) {
            snprintf(nid, sizeof(nid), "%s%c%s", req->principal->tenant_id, SL_TENANT_SEP, id);
            snprintf(nscope, sizeof(nscope), "%s%c%s", req->principal->tenant_id, SL_TENANT_SEP,
                     scope);
        }
        bool held = false;
        if (sl_router_id_is_route(id)) {
            sl_router_refuse_reserved_id(id, &err);
            respond_error(resp, &err);
        } else if (quota_admits(req, resp, SL_LIMIT_SANDBOXES, tenant ? nid : id, &held)) {
            respond_result(resp, sl_svc_resolve(req->svc, tenant ? nid : id,
                                                tenant ? nscope : scope, profile, by, &err),
                           &err);
            sl_svc_quota_leave(req->svc, held);
        }
    }
    sl_v_free(&v);
}

static void h_route_get(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_route_get(req->svc, req->params[0], &err);
    respond_result(resp, doc, &err);
}

static void h_audit(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_audit(req->svc, req->params[0], &err);
    respond_result(resp, doc, &err);
}

/* "egress" of a body: absent (*given false), null (*given, *p empty:
 * back to what the sandbox inherits) or a policy. false when answered
 * (422 EGRESS_POLICY_INVALID). */
static bool body_egress(struct sl_request *req, struct sl_response *resp, bool *given,
                        struct sl_egress_policy *p, bool *is_null)
{
    memset(p, 0, sizeof(*p));
    const json_t *e = json_object_get(req->body, "egress");
    *given = e != NULL;
    *is_null = e && json_is_null(e);
    if (!e || *is_null)
        return true;
    struct sl_error err = {0};
    if (sl_egress_parse(e, p, &err) == 0)
        return true;
    respond_error(resp, &err);
    return false;
}

static void h_connect(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    bool has_egress = false, egress_null = false;
    struct sl_egress_policy egress;
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else if (body_egress(req, resp, &has_egress, &egress, &egress_null)) {
        struct sl_error err = {0};
        bool held = false;
        if (has_egress && sl_svc_egress_supported(req->svc, &err) < 0) {
            respond_error(resp, &err); /* refused before the sandbox is made */
        } else if (quota_admits(req, resp, SL_LIMIT_RUNNING_SESSIONS, req->params[0], &held)) {
            json_t *doc = sl_svc_connect(req->svc, req->params[0], generation, &err);
            /* Ours: the egress policy it is created with (private mode),
             * stored before its first command can start a network. */
            char actor[SL_PRINCIPAL_ACTOR_MAX];
            json_t *net = doc && has_egress
                              ? sl_svc_network_set(req->svc, req->params[0], generation,
                                                   egress_null ? NULL : &egress,
                                                   sl_principal_actor(req->principal, actor), &err)
                              : NULL;
            if (net)
                json_object_set_new(doc, "network", net);
            if (doc && has_egress && !net) {
                json_decref(doc);
                doc = NULL;
            }
            respond_result(resp, doc, &err);
            sl_svc_quota_leave(req->svc, held);
        }
        sl_egress_free(&egress);
    }
    sl_v_free(&v);
}

/* ---- network (ours: the private mode's egress policy) ---------------------- */

static void h_network_get(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    respond_result(resp, sl_svc_network_get(req->svc, req->params[0], &err), &err);
}

static void h_network_put(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    if (!json_object_get(req->body, "egress"))
        sl_v_fail(&v, "egress", "is required: a policy object, or null for the inherited one");
    bool given = false, is_null = false;
    struct sl_egress_policy egress;
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else if (body_egress(req, resp, &given, &egress, &is_null)) {
        struct sl_error err = {0};
        char actor[SL_PRINCIPAL_ACTOR_MAX];
        respond_result(resp,
                       sl_svc_network_set(req->svc, req->params[0], generation,
                                          is_null ? NULL : &egress,
                                          sl_principal_actor(req->principal, actor), &err),
                       &err);
        sl_egress_free(&egress);
    }
    sl_v_free(&v);
}

static void h_suspend(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    bool memory = false;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    sl_v_bool(&v, req->body, "memory", false, &memory);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_suspend(req->svc, req->params[0], generation, memory, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* POST /api/v1/sandboxes/{id}/fork {"count": N, "sandbox_ids": [...]}:
 * the names are the client's, or the source's with "-fork-<hex>". A
 * tenant's names go into its namespace, as resolve's do. */
static void h_fork(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t count = 1;
    bool has_count = json_object_get(req->body, "count") != NULL;
    sl_v_int(&v, req->body, "count", false, 1, SL_FORK_MAX, 1, &count);
    const json_t *names = json_object_get(req->body, "sandbox_ids");
    bool tenant = req->principal && req->principal->kind == SL_PRINCIPAL_TENANT;
    size_t room = tenant ? strlen(req->principal->tenant_id) + 1 : 0;
    if (names && !json_is_null(names)) {
        size_t n = json_array_size(names);
        if (!json_is_array(names) || n < 1 || n > SL_FORK_MAX)
            sl_v_fail(&v, "sandbox_ids", "must be a list of 1 to %d sandbox ids", SL_FORK_MAX);
        else if (has_count && (size_t)count != n)
            sl_v_fail(&v, "sandbox_ids", "must name as many sandboxes as count (%lld)",
                      (long long)count);
        else
            count = (int64_t)n;
        for (size_t i = 0; json_is_array(names) && i < n; i++) {
            const char *id = json_string_value(json_array_get(names, i));
            size_t len = id ? strlen(id) : 0;
            if (!id || len < 3 || len > 128 - room || !sl_v_is_identifier(id))
                sl_v_fail(&v, "sandbox_ids",
                          "must hold ids of 3 to %zu characters of A-Z a-z 0-9 _ . : -",
                          128 - room);
            for (size_t k = 0; id && k < i; k++)
                if (strcmp(id, json_string_value(json_array_get(names, k)) ?: "") == 0)
                    sl_v_fail(&v, "sandbox_ids", "must not name a sandbox twice");
        }
    }
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
        sl_v_free(&v);
        return;
    }
    sl_v_free(&v);
    char ids[SL_FORK_MAX][136];
    const char *ptrs[SL_FORK_MAX];
    struct sl_error err = {0};
    for (int64_t i = 0; i < count; i++) {
        const char *given = names ? json_string_value(json_array_get(names, (size_t)i)) : NULL;
        char hex[9];
        if (given && tenant)
            snprintf(ids[i], sizeof(ids[i]), "%s%c%s", req->principal->tenant_id, SL_TENANT_SEP,
                     given);
        else if (given)
            snprintf(ids[i], sizeof(ids[i]), "%s", given);
        else if (sl_random_hex(hex, 4) < 0 ||
                 snprintf(ids[i], sizeof(ids[i]), "%.110s-fork-%s", req->params[0], hex) < 0)
            sl_error_set(&err, SL_E_INTERNAL, 0, "no randomness");
        if (given && sl_router_id_is_route(given))
            sl_router_refuse_reserved_id(given, &err);
        ptrs[i] = ids[i];
    }
    if (err.code) {
        respond_error(resp, &err);
        return;
    }
    char actor[SL_PRINCIPAL_ACTOR_MAX];
    json_t *doc = sl_svc_fork(req->svc, req->principal, req->params[0], ptrs, (size_t)count,
                              sl_principal_actor(req->principal, actor), &err);
    respond_result(resp, doc, &err);
}

static void h_resume(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    bool held = false;
    if (quota_admits(req, resp, SL_LIMIT_RUNNING_SESSIONS, req->params[0], &held)) {
        respond_result(resp, sl_svc_resume(req->svc, req->params[0], &err), &err);
        sl_svc_quota_leave(req->svc, held);
    }
}

static void h_release(struct sl_request *req, struct sl_response *resp)
{
    /* Any ?generation= is ignored: release uses the route's current one. */
    struct sl_error err = {0};
    char actor[SL_PRINCIPAL_ACTOR_MAX];
    json_t *doc = sl_svc_release(req->svc, req->params[0], sl_principal_actor(req->principal, actor),
                                 &err);
    respond_result(resp, doc, &err);
}

/* ---- exec -------------------------------------------------------------------- */

/* cwd: "/workspace" or below it, no ".." segment (API.md §3.9). */
static bool cwd_valid(const char *cwd)
{
    if (strcmp(cwd, "/workspace") != 0 && strncmp(cwd, "/workspace/", 11) != 0)
        return false;
    for (const char *p = cwd; (p = strstr(p, "..")); p += 2) {
        bool starts = p == cwd || p[-1] == '/';
        bool ends = p[2] == '\0' || p[2] == '/';
        if (starts && ends)
            return false;
    }
    return true;
}

/* A JSON object of string values with key/value/count bounds; fills
 * parallel arrays (borrowed from the object). */
static bool env_object(struct sl_validation *v, const json_t *body, const char *field,
                       size_t max_keys, const char ***keys, const char ***values, size_t *n)
{
    json_t *obj = json_object_get(body, field);
    *n = 0;
    if (!obj)
        return true;
    if (!json_is_object(obj) || json_object_size(obj) > max_keys) {
        sl_v_fail(v, field, "must be an object of at most %zu string values", max_keys);
        return false;
    }
    size_t count = json_object_size(obj);
    *keys = calloc(count + 1, sizeof(**keys));
    *values = calloc(count + 1, sizeof(**values));
    if (!*keys || !*values) {
        sl_v_fail(v, field, "could not be read (out of memory)");
        return false;
    }
    const char *k;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(obj, k, klen, val) {
        if (!json_is_string(val) || klen != strlen(k) ||
            strlen(json_string_value(val)) != json_string_length(val) ||
            sl_v_utf8_len(k, klen) > 256 ||
            sl_v_utf8_len(json_string_value(val), json_string_length(val)) > 65536) {
            sl_v_fail(v, field,
                      "must map names of at most 256 characters to strings of at most 65536, "
                      "without NUL characters");
            return false;
        }
        (*keys)[*n] = k;
        (*values)[*n] = json_string_value(val);
        (*n)++;
    }
    return true;
}

/* The answer of a synchronous command, when it ends (any thread). */
static void exec_answered(json_t *doc, void *ctx)
{
    struct sl_response r = {.status = 500, .content_type = "application/json"};
    if (doc)
        respond_json(&r, 200, doc);
    sl_deferred_respond(ctx, &r);
}

bool sl_api_exec_parse(const json_t *b, bool with_sensitive, struct sl_validation *v,
                       struct sl_api_exec *out)
{
    memset(out, 0, sizeof(*out));
    int64_t generation = 0, timeout = 0;
    bool timeout_null = true, background = false;
    const char *exec_id = sl_v_string(v, b, "exec_id", true, 3, 128, true, NULL);
    sl_v_int(v, b, "generation", true, 1, INT64_MAX, 0, &generation);

    json_t *argv_json = json_object_get(b, "argv");
    size_t argc = 0;
    if (!json_is_array(argv_json) || json_array_size(argv_json) < 1 ||
        json_array_size(argv_json) > 256) {
        if (!argv_json)
            sl_v_fail(v, "argv", "is required");
        else
            sl_v_fail(v, "argv", "must be an array of 1 to 256 strings");
    } else {
        argc = json_array_size(argv_json);
        out->argv = calloc(argc + 1, sizeof(*out->argv));
        if (!out->argv)
            sl_v_fail(v, "argv", "could not be read (out of memory)");
        for (size_t i = 0; out->argv && i < argc; i++) {
            json_t *item = json_array_get(argv_json, i);
            if (!json_is_string(item) || strlen(json_string_value(item)) != json_string_length(item) ||
                sl_v_utf8_len(json_string_value(item), json_string_length(item)) > 65536) {
                char at[32];
                snprintf(at, sizeof(at), "argv[%zu]", i);
                sl_v_fail(v, at, "must be a string of at most 65536 characters without NUL");
                break;
            }
            out->argv[i] = json_string_value(item);
        }
    }
    const char *cwd = sl_v_string(v, b, "cwd", false, 0, 4096, false, "/workspace");
    if (cwd && !cwd_valid(cwd)) {
        sl_v_fail(v, "cwd", "must be /workspace or a path below it, without '..'");
        cwd = NULL;
    }
    size_t env_n = 0, sens_n = 0;
    env_object(v, b, "env", 128, &out->env_keys, &out->env_values, &env_n);
    if (with_sensitive)
        env_object(v, b, "sensitive_env", 8, &out->sensitive_keys, &out->sensitive_values,
                   &sens_n);
    sl_v_int_nullable(v, b, "timeout_seconds", 1, 86400, &timeout, &timeout_null);
    sl_v_bool(v, b, "background", false, &background);
    /* Ours: how the answer comes, not what runs: not stored, so a replay
     * asked as a stream is still the same command. */
    bool stream = false, stdin_open = false;
    sl_v_bool(v, b, "stream", false, &stream);
    /* Ours: stdin a pipe the client writes to (…/stdin); what runs
     * differs, so it is stored, where set, with the request. */
    sl_v_bool(v, b, "stdin", false, &stdin_open);
    const char *scope = NULL;
    json_t *scope_json = json_object_get(b, "exec_scope");
    if (scope_json && !json_is_null(scope_json))
        scope = sl_v_string(v, b, "exec_scope", true, 3, 128, true, NULL);
    if (!sl_v_ok(v))
        return false;

    /* The stored request: all nine fields with defaults filled (§4.1). */
    json_t *env_json = json_object_get(b, "env");
    json_t *sens_json = with_sensitive ? json_object_get(b, "sensitive_env") : NULL;
    out->stored = json_pack(
        "{s:s,s:I,s:O,s:s,s:o,s:o,s:o,s:b,s:o}", "exec_id", exec_id, "generation",
        (json_int_t)generation, "argv", argv_json, "cwd", cwd, "env",
        env_json ? json_incref(env_json) : json_object(), "sensitive_env",
        sens_json ? json_incref(sens_json) : json_object(),
        "timeout_seconds", sl_json_int_or_null(timeout, timeout_null), "background", background,
        "exec_scope", sl_json_str_or_null(scope));
    if (stdin_open && out->stored)
        json_object_set_new(out->stored, "stdin", json_true());
    out->req = (struct sl_exec_request){
        .exec_id = exec_id,
        .generation = generation,
        .argv = out->argv,
        .argc = argc,
        .cwd = cwd,
        .env_keys = out->env_keys,
        .env_values = out->env_values,
        .env_len = env_n,
        .sensitive_keys = out->sensitive_keys,
        .sensitive_len = sens_n,
        .timeout_seconds = timeout_null ? 0 : timeout,
        .background = background,
        .stream = stream,
        .stdin_open = stdin_open,
        .exec_scope = scope,
        .request = out->stored,
    };
    return true;
}

void sl_api_exec_clear(struct sl_api_exec *p)
{
    free(p->argv);
    free(p->env_keys);
    free(p->env_values);
    free(p->sensitive_keys);
    free(p->sensitive_values);
    json_decref(p->stored);
    memset(p, 0, sizeof(*p));
}

/* A command's output as an event stream (api/exec_stream.h) from off[]. */
static void respond_stream(struct sl_request *req, struct sl_response *resp,
                           const char *exec_id, int64_t generation, const uint64_t off[2])
{
    struct sl_error err = {0};
    struct sl_outlog *log = NULL;
    if (sl_svc_exec_attach(req->svc, req->params[0], exec_id, generation, &log, &err) < 0) {
        respond_result(resp, NULL, &err);
        return;
    }
    struct sl_body_source *src = sl_exec_stream_open(req->params[0], log, off, &err);
    if (!src) {
        respond_result(resp, NULL, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->source = src;
}

static void h_exec(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    __attribute__((cleanup(sl_api_exec_clear))) struct sl_api_exec p = {0};
    if (!sl_api_exec_parse(req->body, true, &v, &p)) {
        respond_invalid(resp, &v);
        sl_v_free(&v);
        return;
    }
    sl_v_free(&v);

    /* A tenant's command counts against its commands_in_flight from its
     * admission on: the check and the admission go together. */
    bool held = false;
    if (!quota_admits(req, resp, SL_LIMIT_COMMANDS, NULL, &held))
        return;
    /* Deferred before the call: a synchronous command may end (and its
     * answer be sent) before sl_svc_exec returns. */
    bool detached = p.req.background || p.req.stream;
    struct sl_deferred *d = detached ? NULL : sl_request_defer(req);
    struct sl_error err = {0};
    json_t *doc = NULL;
    int rc = sl_svc_exec(req->svc, req->params[0], &p.req, d ? exec_answered : NULL, d, &doc,
                         &err);
    sl_svc_quota_leave(req->svc, held);
    if (rc == 1)
        return; /* exec_answered answers */
    if (p.req.stream && rc == 0) {
        /* Admitted (or a replay): its output from the start. */
        json_decref(doc);
        respond_stream(req, resp, p.req.exec_id, p.req.generation, (uint64_t[2]){0, 0});
        return;
    }
    if (!d) {
        respond_result(resp, doc, &err);
        return;
    }
    struct sl_response now = {.status = 500, .content_type = "application/json"};
    respond_result(&now, rc == 0 ? doc : NULL, &err);
    sl_deferred_respond(d, &now);
}

static void h_exec_get(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0, off[2] = {0, 0};
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    /* Ours: with an offset, only what is new from it (live while the
     * command runs); without, the stored record as in the reference. */
    const char *so = query(req, "stdout_offset"), *se = query(req, "stderr_offset");
    sl_v_query_int(&v, so, "stdout_offset", false, 0, INT64_MAX, 0, &off[0]);
    sl_v_query_int(&v, se, "stderr_offset", false, 0, INT64_MAX, 0, &off[1]);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = so || se ? sl_svc_exec_get_from(req->svc, req->params[0], req->params[1],
                                                      generation, off, &err)
                               : sl_svc_exec_get(req->svc, req->params[0], req->params[1],
                                                 generation, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* Ours: POST …/exec/{exec_id}/stdin — {"data": text} or {"data_base64"},
 * and/or "close": true, for a command started with "stdin": true. */
static void h_exec_stdin(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    bool close_it = false;
    sl_v_bool(&v, req->body, "close", false, &close_it);
    size_t text_len = 0, b64_len = 0;
    const char *text = json_object_get(req->body, "data")
                           ? sl_v_string_n(&v, req->body, "data", false, 0, SL_STDIN_MAX_BYTES,
                                           &text_len)
                           : NULL;
    const char *b64 = json_object_get(req->body, "data_base64")
                          ? sl_v_string_n(&v, req->body, "data_base64", false, 0,
                                          SL_STDIN_MAX_BYTES / 3 * 4 + 4, &b64_len)
                          : NULL;
    if (text && b64)
        sl_v_fail(&v, "data", "give data or data_base64, not both");
    struct sl_buf bytes = {0};
    if (sl_v_ok(&v) && b64 &&
        sl_base64_decode_strict(b64, b64_len, &bytes, SL_STDIN_MAX_BYTES, NULL) < 0)
        sl_v_fail(&v, "data_base64", "must be standard base64 of at most %d bytes",
                  SL_STDIN_MAX_BYTES);
    if (sl_v_ok(&v) && text && text_len > SL_STDIN_MAX_BYTES)
        sl_v_fail(&v, "data", "must be at most %d bytes", SL_STDIN_MAX_BYTES);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        const char *data = b64 ? bytes.data : text;
        size_t len = b64 ? bytes.len : text_len;
        json_t *doc = sl_svc_exec_stdin(req->svc, req->params[0], req->params[1], generation,
                                        data ? data : "", len, close_it, &err);
        respond_result(resp, doc, &err);
    }
    sl_buf_free(&bytes);
    sl_v_free(&v);
}

/* The signals a client may send: what a terminal's keys and a supervisor
 * send, never one that could stop the service's own bookkeeping. */
static int signal_named(const char *name)
{
    static const struct {
        const char *name;
        int sig;
    } known[] = {{"SIGINT", SIGINT},   {"SIGTERM", SIGTERM}, {"SIGKILL", SIGKILL},
                 {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT}};
    for (size_t i = 0; name && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(known[i].name, name) == 0)
            return known[i].sig;
    return 0;
}

/* Ours: POST …/exec/{exec_id}/signal — {"signal": "SIGINT"}. */
static void h_exec_signal(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    const char *name = sl_v_string(&v, req->body, "signal", true, 1, 16, false, NULL);
    int sig = signal_named(name);
    if (name && !sig)
        sl_v_fail(&v, "signal", "must be one of SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT");
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc =
            sl_svc_exec_signal(req->svc, req->params[0], req->params[1], generation, sig, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* Ours: GET …/exec/{exec_id}/stream — a running or finished command's
 * output as events, from Last-Event-ID (a reconnect) or ?offset=. */
static void h_exec_stream(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    uint64_t off[2] = {0, 0};
    const char *format = query(req, "format"), *which = query(req, "stream");
    bool raw = format && strcmp(format, "raw") == 0;
    if (format && !raw && strcmp(format, "events") != 0)
        sl_v_fail(&v, "format", "must be events (the default) or raw");
    if (which && strcmp(which, "stdout") != 0 && strcmp(which, "stderr") != 0)
        sl_v_fail(&v, "stream", "must be stdout or stderr");
    if (which && !raw)
        sl_v_fail(&v, "stream", "is for format=raw (events carry both streams)");
    int64_t raw_from = 0;
    if (raw)
        sl_v_query_int(&v, query(req, "offset"), "offset", false, 0, INT64_MAX, 0, &raw_from);
    const char *last = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Last-Event-ID");
    const char *from = last && *last ? last : query(req, "offset");
    if (!raw && from && sl_exec_stream_parse_offset(from, off) < 0)
        sl_v_fail(&v, last && *last ? "Last-Event-ID" : "offset",
                  "must be <stdout offset>:<stderr offset> (an event id) or one offset");
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else if (raw) {
        struct sl_error err = {0};
        struct sl_outlog *log = NULL;
        int stream = which && strcmp(which, "stderr") == 0 ? SL_OUT_STDERR : SL_OUT_STDOUT;
        struct sl_body_source *src = NULL;
        if (sl_svc_exec_attach(req->svc, req->params[0], req->params[1], generation, &log,
                               &err) == 0)
            src = sl_exec_stream_open_raw(req->params[0], log, stream, (uint64_t)raw_from, &err);
        if (!src) {
            respond_result(resp, NULL, &err);
        } else {
            resp->status = 200;
            resp->content_type = "application/octet-stream";
            resp->source = src;
        }
    } else {
        respond_stream(req, resp, req->params[1], generation, off);
    }
    sl_v_free(&v);
}

/* Whether a request asks for a WebSocket (RFC 6455 §4.2.1): its key, or
 * NULL. */
static const char *websocket_key(struct sl_request *req)
{
    const char *upgrade = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Upgrade");
    const char *version =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Sec-WebSocket-Version");
    const char *key = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    if (!upgrade || strcasecmp(upgrade, "websocket") != 0 || !version ||
        strcmp(version, "13") != 0 || !key)
        return NULL;
    return key;
}

/* Ours: GET …/terminal — a terminal over WebSocket: a new login shell, or
 * (exec_id) one still running, attached again. */
static void h_terminal(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0, cols = 80, rows = 24;
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    sl_v_query_int(&v, query(req, "cols"), "cols", false, 1, 1000, 80, &cols);
    sl_v_query_int(&v, query(req, "rows"), "rows", false, 1, 1000, 24, &rows);
    const char *exec_id = query(req, "exec_id");
    if (exec_id && (!*exec_id || strlen(exec_id) > 128 || !sl_v_is_identifier(exec_id)))
        sl_v_fail(&v, "exec_id", "must be the exec_id of a terminal (1 to 128 characters)");
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
        sl_v_free(&v);
        return;
    }
    sl_v_free(&v);
    const char *key = websocket_key(req);
    struct sl_error err = {0};
    if (!key) {
        sl_error_set(&err, SL_E_UPGRADE_REQUIRED, 0, "%s", SL_E_UPGRADE_REQUIRED);
        respond_error(resp, &err);
        return;
    }
    struct sl_terminal t = {.master = -1};
    int rc;
    if (exec_id) {
        rc = sl_svc_terminal_attach(req->svc, req->params[0], generation, exec_id, &t, &err);
        if (rc == 0 && (query(req, "cols") || query(req, "rows"))) {
            struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
            (void)ioctl(t.master, TIOCSWINSZ, &ws);
        }
    } else {
        /* A new shell is a command: the tenant's commands_in_flight. */
        bool held = false;
        if (!quota_admits(req, resp, SL_LIMIT_COMMANDS, NULL, &held))
            return;
        rc = sl_svc_terminal_open(req->svc, req->params[0], generation, (unsigned short)cols,
                                  (unsigned short)rows, &t, &err);
        sl_svc_quota_leave(req->svc, held);
    }
    if (rc < 0) {
        respond_error(resp, &err);
        return;
    }
    struct sl_upgrade *u = sl_terminal_ws_upgrade(req->svc, req->params[0], &t,
                                                  (unsigned short)cols, (unsigned short)rows,
                                                  key, &err);
    if (!u) {
        respond_error(resp, &err);
        return;
    }
    /* A browser names the protocol it speaks (with its token, see
     * api/http.c): the answer must choose one of those it offered. */
    const char *offered =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
    if (offered && strstr(offered, SL_TERMINAL_WS_PROTOCOL))
        snprintf(u->protocol, sizeof(u->protocol), "%s", SL_TERMINAL_WS_PROTOCOL);
    resp->status = 101;
    resp->content_type = "application/octet-stream";
    resp->upgrade = u;
}

static void h_exec_cancel(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_query_int(&v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, &generation);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc =
            sl_svc_exec_cancel(req->svc, req->params[0], req->params[1], generation, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* ---- templates ----------------------------------------------------------------- */

/* labels: at most 32 keys of 1-64 characters, string values of at most 256. */
static const json_t *labels_object(struct sl_validation *v, const json_t *body)
{
    json_t *labels = json_object_get(body, "labels");
    if (!labels || json_is_null(labels))
        return NULL;
    if (!json_is_object(labels) || json_object_size(labels) > 32) {
        sl_v_fail(v, "labels", "must be an object of at most 32 labels");
        return NULL;
    }
    const char *k;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(labels, k, klen, val) {
        if (klen < 1 || sl_v_utf8_len(k, klen) > 64 || strlen(k) != klen || !json_is_string(val) ||
            strlen(json_string_value(val)) != json_string_length(val) ||
            sl_v_utf8_len(json_string_value(val), json_string_length(val)) > 256) {
            sl_v_fail(v, "labels",
                      "must map names of 1 to 64 characters to strings of at most 256");
            return NULL;
        }
    }
    return labels;
}

static bool template_name_shape(const char *name)
{
    if (!name || !*name || strlen(name) > 64)
        return false;
    if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
              *p == '-'))
            return false;
    return true;
}

/* The tenant a template call is for (its templates are private to it), or
 * NULL for the operator's (public). */
static const char *template_owner(const struct sl_request *req)
{
    if (req->principal && req->principal->kind == SL_PRINCIPAL_TENANT)
        return req->principal->tenant_id;
    /* Forwarded by a replica for a tenant (api/forward.h). */
    const char *forwarded =
        req->internal ? json_string_value(json_object_get(req->body, SL_FORWARD_TENANT_FIELD))
                      : NULL;
    return forwarded && sl_tenant_id_valid(forwarded) ? forwarded : NULL;
}

static void h_template_publish(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    const char *name = sl_v_string(&v, req->body, "name", true, 1, 64, false, NULL);
    if (name && !template_name_shape(name))
        sl_v_fail(&v, "name",
                  "must start with a lowercase letter or digit and use only a-z, 0-9 and . _ - "
                  "(at most 64)");
    const char *source = sl_v_string(&v, req->body, "source_path", false, 1, 4096, false, "/envs");
    const char *description =
        sl_v_string(&v, req->body, "description", false, 0, 1024, false, "");
    const json_t *labels = labels_object(&v, req->body);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_template_publish(req->svc, req->params[0], generation,
                                              template_owner(req), name, source, description,
                                              labels, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

static void h_template_attach(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    json_t *list = json_object_get(req->body, "templates");
    const char *refs[16];
    size_t n = 0;
    if (!json_is_array(list) || json_array_size(list) < 1 || json_array_size(list) > 16) {
        sl_v_fail(&v, "templates", list ? "must be an array of 1 to 16 template names"
                                        : "is required");
    } else {
        for (size_t i = 0; i < json_array_size(list); i++) {
            json_t *item = json_array_get(list, i);
            if (!json_is_string(item) || json_string_length(item) > 256 ||
                strlen(json_string_value(item)) != json_string_length(item)) {
                char at[32];
                snprintf(at, sizeof(at), "templates[%zu]", i);
                sl_v_fail(&v, at, "must be a template name or name@digest of at most 256 "
                                  "characters");
                break;
            }
            refs[n++] = json_string_value(item);
        }
    }
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_template_attach(req->svc, req->params[0], generation,
                                             template_owner(req), refs, n, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

static void h_templates_list(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_templates_list(req->svc, template_owner(req), &err);
    respond_result(resp, doc, &err);
}

static void h_template_unpublish(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_template_unpublish(req->svc, template_owner(req), req->params[0], &err);
    respond_result(resp, doc, &err);
}

/* ---- admin ------------------------------------------------------------------- */

/* A string query parameter of at most `max` characters, NULL when absent. */
static const char *query_bounded(struct sl_request *req, struct sl_validation *v,
                                 const char *name, size_t max)
{
    size_t len = 0;
    const char *s = query_n(req, name, &len);
    if (s && (len > max || strlen(s) != len || sl_v_utf8_len(s, len) > max)) {
        sl_v_fail_in(v, SL_V_QUERY, name, "must be at most %zu characters without NUL", max);
        return NULL;
    }
    return s;
}

/* Paging of §3.18: limit 1–200 (422 above, not clamped), offset ≥ 0. */
static void query_paging(struct sl_request *req, struct sl_validation *v, int64_t *limit,
                         int64_t *offset)
{
    sl_v_query_int(v, query(req, "limit"), "limit", false, 1, 200, 50, limit);
    sl_v_query_int(v, query(req, "offset"), "offset", false, 0, INT64_MAX, 0, offset);
}

static void h_admin_execs(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    struct sl_exec_filter f = {.limit = 50};
    f.sandbox_id = query_bounded(req, &v, "sandbox_id", 128);
    f.status = query_bounded(req, &v, "status", 32);
    /* Ours: "none" selects executions without a reason. */
    const char *reason = query_bounded(req, &v, "termination_reason", 32);
    query_paging(req, &v, &f.limit, &f.offset);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        if (f.sandbox_id && !*f.sandbox_id)
            f.sandbox_id = NULL;
        if (f.status && !*f.status)
            f.status = NULL;
        f.termination_reason = !reason || !*reason          ? NULL
                               : strcmp(reason, "none") == 0 ? ""
                                                             : reason;
        struct sl_error err = {0};
        json_t *doc = sl_svc_admin_execs(req->svc, &f, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* The admin listing, for the operator everything; for a tenant its own
 * sandboxes only (the ids that start with its namespace, a scope filter
 * in its namespace), whose names the answer then gives back without it. */
static void list_sandboxes(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    bool tenant = req->principal && req->principal->kind == SL_PRINCIPAL_TENANT;
    size_t room = tenant ? strlen(req->principal->tenant_id) + 1 : 0;
    struct sl_route_filter f = {.limit = 50};
    f.status = query_bounded(req, &v, "status", 32);
    f.workspace_scope_id = query_bounded(req, &v, "workspace_scope_id", 191 - room);
    f.worker_id = query_bounded(req, &v, "worker_id", 128);
    f.search = query_bounded(req, &v, "search", 128 - room);
    query_paging(req, &v, &f.limit, &f.offset);
    /* An empty filter value filters nothing. */
    const char **fields[] = {&f.status, &f.workspace_scope_id, &f.worker_id, &f.search};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (*fields[i] && !**fields[i])
            *fields[i] = NULL;
    char prefix[SL_TENANT_ID_MAX + 2], scope[194];
    if (tenant) {
        snprintf(prefix, sizeof(prefix), "%s%c", req->principal->tenant_id, SL_TENANT_SEP);
        f.id_prefix = prefix;
        if (f.workspace_scope_id && sl_tenant_namespaced(req->principal->tenant_id,
                                                         f.workspace_scope_id, 191, scope,
                                                         sizeof(scope)))
            f.workspace_scope_id = scope;
    }
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_admin_sandboxes(req->svc, &f, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

static void h_admin_sandboxes(struct sl_request *req, struct sl_response *resp)
{
    list_sandboxes(req, resp);
}

static void h_sandboxes(struct sl_request *req, struct sl_response *resp)
{
    list_sandboxes(req, resp);
}

/* ---- tenants and their keys (issue 14) ---------------------------------- */

/* The 201 of a create, or its error. */
static void respond_created(struct sl_response *resp, json_t *doc, const struct sl_error *err)
{
    if (doc)
        respond_json(resp, 201, doc);
    else
        respond_error(resp, err);
}

/* A path's tenant_id: an id outside the alphabet names no tenant. */
static bool tenant_param_ok(struct sl_response *resp, const char *id)
{
    if (sl_tenant_id_lookup_valid(id))
        return true;
    struct sl_error err = {0};
    sl_error_set(&err, SL_E_TENANT_NOT_FOUND, 0, "no tenant with this tenant_id");
    respond_error(resp, &err);
    return false;
}

/* "quotas": an object of known limits, each a non-negative integer or null
 * (null: no limit). NULL when absent. */
static const json_t *v_quotas(struct sl_validation *v, const json_t *body, bool required)
{
    const json_t *q = json_object_get(body, "quotas");
    if (!q || json_is_null(q)) {
        if (required)
            sl_v_fail(v, "quotas", "is required");
        return NULL;
    }
    if (!json_is_object(q)) {
        sl_v_fail(v, "quotas", "must be an object of limits");
        return NULL;
    }
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)q, name, value)
    {
        bool known = false;
        for (const char *const *n = sl_tenant_quota_names; *n && !known; n++)
            known = strcmp(*n, name) == 0;
        /* The name in the error, cut at a character boundary: half a
         * character would make the entry invalid UTF-8 and lose it. */
        size_t keep = strlen(name) > 80 ? 80 : strlen(name);
        while (keep > 0 && ((unsigned char)name[keep] & 0xC0) == 0x80)
            keep--;
        char field[96];
        snprintf(field, sizeof(field), "quotas.%.*s", (int)keep, name);
        if (!known)
            sl_v_fail(v, field, "is not a known limit (sandboxes, running_sessions, "
                                "commands_in_flight, workspace_bytes, sandbox_memory_bytes, "
                                "sandbox_pids, sandbox_cpu_millis)");
        else if (!json_is_null(value) && (!json_is_integer(value) || json_integer_value(value) < 0))
            sl_v_fail(v, field, "must be a non-negative integer, or null for no limit");
        /* A ceiling is what one sandbox's cgroup gets: 0 would leave it
         * nothing to run with (null means none). */
        else if (strncmp(name, "sandbox_", 8) == 0 && json_is_integer(value) &&
                 json_integer_value(value) < 1)
            sl_v_fail(v, field, "must be at least 1 (a per-sandbox ceiling), or null for none");
    }
    return q;
}

static void h_tenant_create(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    const char *id = sl_v_string(&v, req->body, "tenant_id", true, 1, SL_TENANT_ID_MAX, false, NULL);
    if (id && !sl_tenant_id_valid(id))
        sl_v_fail(&v, "tenant_id", "must be 1 to 32 characters of a-z, 0-9 and -, not starting "
                                   "with -");
    const json_t *quotas = v_quotas(&v, req->body, false);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        respond_created(resp, sl_svc_tenant_create(req->svc, id, quotas, &err), &err);
    }
    sl_v_free(&v);
}

static void h_tenants_list(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    respond_result(resp, sl_svc_tenant_list(req->svc, &err), &err);
}

static void h_tenant_get(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_error err = {0};
    respond_result(resp, sl_svc_tenant_get(req->svc, req->params[0], &err), &err);
}

static void h_tenant_patch(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_validation v;
    sl_v_init(&v);
    const json_t *quotas = v_quotas(&v, req->body, true);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        respond_result(resp, sl_svc_tenant_set_quotas(req->svc, req->params[0], quotas, &err),
                       &err);
    }
    sl_v_free(&v);
}

static void h_tenant_egress_get(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_error err = {0};
    respond_result(resp, sl_svc_tenant_egress_get(req->svc, req->params[0], &err), &err);
}

static void h_tenant_egress_put(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_validation v;
    sl_v_init(&v);
    if (!json_object_get(req->body, "egress"))
        sl_v_fail(&v, "egress", "is required: a policy object, or null for none");
    bool given = false, is_null = false;
    struct sl_egress_policy egress;
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else if (body_egress(req, resp, &given, &egress, &is_null)) {
        struct sl_error err = {0};
        char actor[SL_PRINCIPAL_ACTOR_MAX];
        respond_result(resp,
                       sl_svc_tenant_egress_set(req->svc, req->params[0], is_null ? NULL : &egress,
                                                sl_principal_actor(req->principal, actor), &err),
                       &err);
        sl_egress_free(&egress);
    }
    sl_v_free(&v);
}

static void h_key_create(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_validation v;
    sl_v_init(&v);
    const char *name = sl_v_string(&v, req->body, "name", true, 1, 128, false, NULL);
    if (name && strlen(name) > 128)
        sl_v_fail(&v, "name", "must be at most 128 bytes of UTF-8");
    for (const char *p = name; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            sl_v_fail(&v, "name", "must not hold control characters");
            break;
        }
    int64_t expires_at = 0;
    const json_t *exp = json_object_get(req->body, "expires_at");
    if (exp && !json_is_null(exp)) {
        if (!json_is_string(exp) || sl_time_parse(json_string_value(exp), &expires_at) < 0)
            sl_v_fail(&v, "expires_at", "must be an ISO-8601 UTC time "
                                        "(YYYY-MM-DDTHH:MM:SS[.ffffff]Z) or null");
        else if (expires_at <= sl_now_us())
            sl_v_fail(&v, "expires_at", "must be in the future");
    }
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        respond_created(resp, sl_svc_api_key_create(req->svc, req->params[0], name, expires_at, &err),
                        &err);
    }
    sl_v_free(&v);
}

static void h_keys_list(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_error err = {0};
    respond_result(resp, sl_svc_api_key_list(req->svc, req->params[0], &err), &err);
}

static void h_key_revoke(struct sl_request *req, struct sl_response *resp)
{
    if (!tenant_param_ok(resp, req->params[0]))
        return;
    struct sl_error err = {0};
    respond_result(resp, sl_svc_api_key_revoke(req->svc, req->params[0], req->params[1], &err),
                   &err);
}

static void h_tenant_self(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    respond_result(resp, sl_svc_tenant_self(req->svc, req->principal, &err), &err);
}

static void h_admin_overview(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_admin_overview(req->svc, &err);
    respond_result(resp, doc, &err);
}

static void h_diagnostics(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_diagnostics(req->svc, &err);
    respond_result(resp, doc, &err);
}

static void h_admin_exec(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    json_t *doc = sl_svc_admin_exec(req->svc, req->params[0], req->params[1], &err);
    respond_result(resp, doc, &err);
}

/* ---- files ------------------------------------------------------------------- */

static bool body_path(struct sl_validation *v, const json_t *b, const char *field,
                      struct sl_file_path *out)
{
    size_t len = 0;
    const char *s = sl_v_string_n(v, b, field, true, 1, MAX_PATH_CHARS, &len);
    if (!s)
        return false;
    out->s = s;
    out->len = len;
    return true;
}

static void h_file_write(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    struct sl_file_path path = {0};
    size_t b64_len = 0;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    body_path(&v, req->body, "path", &path);
    const char *b64 =
        sl_v_string_n(&v, req->body, "content_base64", true, 0, MAX_B64_CHARS, &b64_len);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_file_write(req->svc, req->params[0], generation, path, b64, b64_len,
                                        &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* path + generation from the query string (GET routes). */
static bool query_path_generation(struct sl_request *req, struct sl_validation *v,
                                  struct sl_file_path *path, int64_t *generation)
{
    size_t len = 0;
    const char *p = query_n(req, "path", &len);
    if (!p)
        sl_v_fail_in(v, SL_V_QUERY, "path", "is required");
    else {
        path->s = p;
        path->len = len;
    }
    sl_v_query_int(v, query(req, "generation"), "generation", true, 1, INT64_MAX, 0, generation);
    return sl_v_ok(v);
}

static void h_file_read(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    struct sl_file_path path = {0};
    int64_t generation = 0;
    if (!query_path_generation(req, &v, &path, &generation)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_file_read(req->svc, req->params[0], generation, path, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

static void h_file_list(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    struct sl_file_path path = {0};
    int64_t generation = 0, limit = 200, offset = 0;
    query_path_generation(req, &v, &path, &generation);
    sl_v_query_int(&v, query(req, "limit"), "limit", false, 1, 10000, 200, &limit);
    sl_v_query_int(&v, query(req, "offset"), "offset", false, 0, INT64_MAX, 0, &offset);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc =
            sl_svc_file_list(req->svc, req->params[0], generation, path, limit, offset, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* Ours: GET …/files/watch?path=&recursive= — what changes under a
 * directory, as events (api/fs_watch.h). */
static void h_file_watch(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    struct sl_file_path path = {0};
    int64_t generation = 0;
    query_path_generation(req, &v, &path, &generation);
    const char *rec = query(req, "recursive");
    if (rec && strcmp(rec, "true") != 0 && strcmp(rec, "false") != 0)
        sl_v_fail_in(&v, SL_V_QUERY, "recursive", "must be true or false");
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
        sl_v_free(&v);
        return;
    }
    sl_v_free(&v);
    struct sl_error err = {0};
    char *canonical = NULL;
    int fd = sl_svc_watch_open(req->svc, req->params[0], generation, path.s, path.len,
                               &canonical, &err);
    struct sl_body_source *src =
        fd >= 0 ? sl_fs_watch_open(req->params[0], fd, canonical,
                                   rec && strcmp(rec, "true") == 0, &err)
                : NULL;
    free(canonical);
    if (!src) {
        respond_result(resp, NULL, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = "text/event-stream";
    resp->source = src;
}

static void h_file_mkdir(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    struct sl_file_path path = {0};
    bool parents = false;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    body_path(&v, req->body, "path", &path);
    sl_v_bool(&v, req->body, "parents", false, &parents);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc = sl_svc_file_mkdir(req->svc, req->params[0], generation, path, parents, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

static void h_file_delete(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    struct sl_file_path path = {0};
    bool recursive = false;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    body_path(&v, req->body, "path", &path);
    sl_v_bool(&v, req->body, "recursive", false, &recursive);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc =
            sl_svc_file_delete(req->svc, req->params[0], generation, path, recursive, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

static void h_file_move(struct sl_request *req, struct sl_response *resp)
{
    struct sl_validation v;
    sl_v_init(&v);
    int64_t generation = 0;
    struct sl_file_path src = {0}, dst = {0};
    bool overwrite = false;
    sl_v_int(&v, req->body, "generation", true, 1, INT64_MAX, 0, &generation);
    body_path(&v, req->body, "source", &src);
    body_path(&v, req->body, "destination", &dst);
    sl_v_bool(&v, req->body, "overwrite", false, &overwrite);
    if (!sl_v_ok(&v)) {
        respond_invalid(resp, &v);
    } else {
        struct sl_error err = {0};
        json_t *doc =
            sl_svc_file_move(req->svc, req->params[0], generation, src, dst, overwrite, &err);
        respond_result(resp, doc, &err);
    }
    sl_v_free(&v);
}

/* ---- the table ---------------------------------------------------------------- */

static const struct sl_query_param Q_GENERATION[] = {{"generation", "integer", true},
                                                     {NULL, NULL, false}};
static const struct sl_query_param Q_POLL[] = {{"generation", "integer", true},
                                               {"stdout_offset", "integer", false},
                                               {"stderr_offset", "integer", false},
                                               {NULL, NULL, false}};
static const struct sl_query_param Q_WATCH[] = {{"path", "string", true},
                                                {"generation", "integer", true},
                                                {"recursive", "string", false},
                                                {NULL, NULL, false}};
static const struct sl_query_param Q_STREAM[] = {
    {"generation", "integer", true}, {"offset", "string", false}, {"format", "string", false},
    {"stream", "string", false},     {NULL, NULL, false}};
static const struct sl_query_param Q_TERMINAL[] = {
    {"generation", "integer", true}, {"cols", "integer", false}, {"rows", "integer", false},
    {"exec_id", "string", false},    {NULL, NULL, false}};
static const struct sl_query_param Q_ADMIN_SANDBOXES[] = {{"status", "string", false},
                                                          {"workspace_scope_id", "string", false},
                                                          {"worker_id", "string", false},
                                                          {"search", "string", false},
                                                          {"limit", "integer", false},
                                                          {"offset", "integer", false},
                                                          {NULL, NULL, false}};
static const struct sl_query_param Q_ADMIN_EXECS[] = {{"sandbox_id", "string", false},
                                                      {"status", "string", false},
                                                      {"termination_reason", "string", false},
                                                      {"limit", "integer", false},
                                                      {"offset", "integer", false},
                                                      {NULL, NULL, false}};
static const struct sl_query_param Q_FILE[] = {
    {"path", "string", true}, {"generation", "integer", true}, {NULL, NULL, false}};
static const struct sl_query_param Q_LIST[] = {{"path", "string", true},
                                               {"generation", "integer", true},
                                               {"limit", "integer", false},
                                               {"offset", "integer", false},
                                               {NULL, NULL, false}};

#define SBX "/api/v1/sandboxes/{sandbox_id}"

/* Order matters where a literal and a parameter segment overlap:
 * /sandboxes/resolve is declared before /sandboxes/{sandbox_id} (API.md §0.3). */
/* The ports route, one row per method (api/port_proxy.h). */
#define PORT_ROUTE(m, op)                                                                      \
    {.method = m, .pattern = SBX "/ports/{port}/{*}", .handler = sl_port_proxy_handle,         \
     .auth = true, .op_id = op, .summary = "To a server listening in the sandbox",             \
     .max_body = SL_PORT_MAX_REQUEST_BODY, .tenant = true}

bool sl_route_runs_inline(const struct sl_route_def *r)
{
    return r->handler == sl_port_proxy_handle;
}

const struct sl_route_def sl_routes[] = {
    {"GET", "/health", h_health, false, false, "health", "Liveness", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/healthz", h_healthz, false, false, "healthz", "Worker status document", NULL,
     "Healthz", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/openapi.json", h_openapi, false, false, "openapi", "This document", NULL, NULL,
     NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/docs", h_docs, false, false, "docs", "API reference page", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/docs/swagger-ui-bundle.js", h_docs_js, false, false, "docsScript",
     "Swagger UI's script, for /docs", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/docs/swagger-ui.css", h_docs_css, false, false, "docsStyle",
     "Swagger UI's stylesheet, for /docs", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/admin", h_admin, false, false, "admin", "Operator console page", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/admin/xterm.js", h_admin_xterm_js, false, false, "adminTerminalScript",
     "The console's terminal emulator (xterm.js)", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/admin/xterm.css", h_admin_xterm_css, false, false, "adminTerminalStyle",
     "The console's terminal stylesheet", NULL, NULL, NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"POST", "/api/v1/sandboxes/mcp/streamable-http", sl_mcp_handle, true, false, "mcp",
     "MCP endpoint (Streamable HTTP, stateless)", NULL, NULL, NULL, SL_ROUTE_MCP_MAX_BODY, false, false, true, false, SL_CRED_BEARER},
    {"GET", "/api/v1/sandboxes/diagnostics/runtime", h_diagnostics, true, false,
     "runtimeDiagnostics", "Fleet capacity snapshot", NULL, "RuntimeDiagnostics", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"POST", "/api/v1/sandboxes/resolve", h_resolve, true, true, "resolveSandbox",
     "Create or find a sandbox route", "ResolveRequest", "RouteResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX, h_route_get, true, false, "getSandboxRoute", "Raw route record", NULL,
     "RouteRecord", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX, h_connect, true, true, "connectSandbox", "Create the sandbox on its worker",
     "ConnectRequest", "ConnectResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"DELETE", SBX, h_release, true, false, "releaseSandbox", "Release the sandbox", NULL,
     "ReleaseResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/suspend", h_suspend, true, true, "suspendSandbox",
     "Suspend: stop every process (or keep them, with memory), keep the files, free the slot",
     "SuspendRequest",
     "SuspendResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/resume", h_resume, true, false, "resumeSandbox", "Resume a suspended sandbox",
     NULL, "ResumeResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/fork", h_fork, true, true, "forkSandbox",
     "Fork: new sandboxes with a copy of this one's files (and processes, under gVisor)",
     "ForkRequest", "ForkResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/templates", h_template_publish, true, true, "publishTemplate",
     "Build and publish a template from a sandbox tree", "TemplatePublishRequest",
     "TemplateResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"PUT", SBX "/templates", h_template_attach, true, true, "attachTemplates",
     "Replace the sandbox's attached templates", "TemplateAttachRequest", "TemplateAttachResponse",
     NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX "/audit", h_audit, true, false, "getSandboxAudit", "Lifecycle audit trail", NULL,
     "AuditResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX "/network", h_network_get, true, false, "getSandboxNetwork",
     "Its network: mode, egress policy, state, denials", NULL, "SandboxNetwork", NULL, 0, false,
     false, true, false, SL_CRED_BEARER},
    {"PUT", SBX "/network", h_network_put, true, true, "setSandboxEgress",
     "Set its egress policy (applies to a running session at once)", "SandboxEgressRequest",
     "SandboxNetwork", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/exec", h_exec, true, true, "execCommand", "Run a command", "ExecRequest",
     "ExecResponse", NULL, SL_ROUTE_EXEC_MAX_BODY, false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX "/exec/{exec_id}", h_exec_get, true, false, "getExecution",
     "Poll an execution", NULL, "ExecResponse", Q_POLL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/exec/{exec_id}/stdin", h_exec_stdin, true, true, "writeExecutionStdin",
     "Write to a running command's stdin", "StdinRequest", "StdinResponse", Q_GENERATION,
     SL_STDIN_MAX_BYTES * 2 + 64 * 1024, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/exec/{exec_id}/signal", h_exec_signal, true, true, "signalExecution",
     "Send a signal to a running command", "SignalRequest", "SignalResponse", Q_GENERATION, 0,
     false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX "/exec/{exec_id}/stream", h_exec_stream, true, false, "streamExecution",
     "Follow an execution's output as events", NULL, NULL, Q_STREAM, 0, false, false, true,
     false, SL_CRED_BEARER},
    PORT_ROUTE("GET", "portGet"),
    PORT_ROUTE("POST", "portPost"),
    PORT_ROUTE("PUT", "portPut"),
    PORT_ROUTE("PATCH", "portPatch"),
    PORT_ROUTE("DELETE", "portDelete"),
    PORT_ROUTE("OPTIONS", "portOptions"),
    {"GET", SBX "/terminal", h_terminal, true, false, "openTerminal",
     "An interactive terminal over WebSocket", NULL, NULL, Q_TERMINAL, 0, false, false, true,
     false, SL_CRED_BEARER},
    {"POST", SBX "/exec/{exec_id}/cancel", h_exec_cancel, true, false, "cancelExecution",
     "Signal a running execution", NULL, "CancelResponse", Q_GENERATION, 0, false, false, true, false, SL_CRED_BEARER},
    {"GET", "/api/v1/templates", h_templates_list, true, false, "listTemplates",
     "The template catalog", NULL, "TemplateList", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"DELETE", "/api/v1/templates/{name}", h_template_unpublish, true, false,
     "unpublishTemplate", "Remove a template from the catalog", NULL, "TemplateRemoveResponse",
     NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", "/api/v1/admin/tenants", h_tenant_create, true, true, "adminCreateTenant",
     "Create a tenant", "TenantCreateRequest", "Tenant", NULL, 0, false, false, false, true, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/tenants", h_tenants_list, true, false, "adminListTenants",
     "Every tenant", NULL, "TenantList", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/tenants/{tenant_id}", h_tenant_get, true, false, "adminGetTenant",
     "One tenant", NULL, "Tenant", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"PATCH", "/api/v1/admin/tenants/{tenant_id}", h_tenant_patch, true, true,
     "adminSetTenantQuotas", "Change a tenant's quotas", "TenantQuotasRequest", "Tenant", NULL, 0,
     false, false, false, false, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/tenants/{tenant_id}/egress", h_tenant_egress_get, true, false,
     "adminGetTenantEgress", "A tenant's egress policy (private network mode)", NULL,
     "TenantEgress", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"PUT", "/api/v1/admin/tenants/{tenant_id}/egress", h_tenant_egress_put, true, true,
     "adminSetTenantEgress", "Set or remove a tenant's egress policy", "TenantEgressRequest",
     "TenantEgress", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"POST", "/api/v1/admin/tenants/{tenant_id}/keys", h_key_create, true, true,
     "adminCreateApiKey", "Issue an API key to a tenant", "ApiKeyCreateRequest", "ApiKeyCreated",
     NULL, 0, false, false, false, true, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/tenants/{tenant_id}/keys", h_keys_list, true, false,
     "adminListApiKeys", "A tenant's API keys (never the keys themselves)", NULL, "ApiKeyList",
     NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"DELETE", "/api/v1/admin/tenants/{tenant_id}/keys/{key_id}", h_key_revoke, true, false,
     "adminRevokeApiKey", "Revoke an API key at once", NULL, "ApiKey", NULL, 0, false, false,
     false, false, SL_CRED_BEARER},
    {"GET", "/api/v1/tenant", h_tenant_self, true, false, "getTenant",
     "The caller's tenant: who the key is, and its quotas", NULL, "TenantSelf", NULL, 0, false,
     false, true, false, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/overview", h_admin_overview, true, false, "adminOverview",
     "Fleet overview", NULL, "AdminOverview", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/api/v1/sandboxes", h_sandboxes, true, false, "listSandboxes",
     "The caller's sandboxes, most recently active first", NULL, "AdminSandboxList",
     Q_ADMIN_SANDBOXES, 0, false, false, true, false, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/sandboxes", h_admin_sandboxes, true, false, "adminListSandboxes",
     "Sandboxes, most recently active first", NULL, "AdminSandboxList", Q_ADMIN_SANDBOXES, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/execs", h_admin_execs, true, false, "adminListExecutions",
     "Executions, newest first", NULL, "AdminExecList", Q_ADMIN_EXECS, 0, false, false, false, false, SL_CRED_BEARER},
    {"GET", "/api/v1/admin/execs/{sandbox_id}/{exec_id}", h_admin_exec, true, false,
     "adminGetExecution", "One execution with its output", NULL, "AdminExec", NULL, 0, false, false, false, false, SL_CRED_BEARER},
    {"PUT", SBX "/files", h_file_write, true, true, "writeFile", "Write a file atomically",
     "FileWriteRequest", "FileWriteResponse", NULL, SL_ROUTE_FILE_MAX_BODY, false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX "/files", h_file_read, true, false, "readFile", "Read a file", NULL,
     "FileReadResponse", Q_FILE, 0, false, false, true, false, SL_CRED_BEARER},
    {"GET", SBX "/files/watch", h_file_watch, true, false, "watchFiles",
     "Follow changes under a directory as events", NULL, NULL, Q_WATCH, 0, false, false, true,
     false, SL_CRED_BEARER},
    {"GET", SBX "/files/list", h_file_list, true, false, "listDirectory", "List a directory",
     NULL, "DirectoryListResponse", Q_LIST, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/files/mkdir", h_file_mkdir, true, true, "makeDirectory", "Create a directory",
     "MkdirRequest", "FileWriteResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/files/delete", h_file_delete, true, true, "deletePath",
     "Delete a file or directory", "DeleteRequest", "FileWriteResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},
    {"POST", SBX "/files/move", h_file_move, true, true, "movePath", "Move or rename a path",
     "MoveRequest", "MoveResponse", NULL, 0, false, false, true, false, SL_CRED_BEARER},

    /* E2B's control plane and envd (e2b/e2b.h): another protocol on the
     * same listener, its own credentials, not in /openapi.json. */
#define E2B(m, path, h, max)                                                                    \
    {.method = m, .pattern = path, .handler = h, .auth = true, .op_id = "e2b",                 \
     .summary = "E2B protocol", .max_body = max, .tenant = true,                              \
     .credential = SL_CRED_E2B_API_KEY}
#define ENVD(m, path, h, max)                                                                   \
    {.method = m, .pattern = SL_E2B_ENVD_PREFIX "{sandbox_id}" path, .handler = h,             \
     .auth = true, .op_id = "envd", .summary = "E2B envd", .max_body = max, .tenant = true,    \
     .credential = SL_CRED_E2B_ENVD}
    E2B("POST", "/v2/sandboxes", sl_e2b_create, 0),
    E2B("GET", "/v2/sandboxes", sl_e2b_list, 0),
    E2B("POST", "/sandboxes", sl_e2b_create, 0),
    E2B("GET", "/sandboxes", sl_e2b_list_v1, 0),
    E2B("GET", "/sandboxes/{sandbox_id}", sl_e2b_info, 0),
    E2B("DELETE", "/sandboxes/{sandbox_id}", sl_e2b_kill, 0),
    E2B("POST", "/sandboxes/{sandbox_id}/timeout", sl_e2b_timeout, 0),
    E2B("POST", "/sandboxes/{sandbox_id}/pause", sl_e2b_pause, 0),
    E2B("POST", "/sandboxes/{sandbox_id}/resume", sl_e2b_resume, 0),
    E2B("POST", "/sandboxes/{sandbox_id}/connect", sl_e2b_connect, 0),
    E2B("POST", "/v2/sandboxes/{sandbox_id}/connect", sl_e2b_connect, 0),
    E2B("GET", "/sandboxes/{sandbox_id}/metrics", sl_e2b_metrics, 0),
    E2B("POST", "/sandboxes/{sandbox_id}/fork", sl_e2b_unsupported, 0),
    E2B("POST", "/sandboxes/{sandbox_id}/snapshots", sl_e2b_unsupported, 0),
    E2B("PUT", "/sandboxes/{sandbox_id}/network", sl_e2b_unsupported, 0),
    E2B("GET", "/snapshots", sl_e2b_unsupported, 0),
    E2B("POST", "/v3/templates", sl_e2b_unsupported, 0),
    E2B("GET", "/volumes", sl_e2b_unsupported, 0),
    E2B("POST", "/volumes", sl_e2b_unsupported, 0),
    E2B("GET", "/secrets", sl_e2b_unsupported, 0),
    E2B("POST", "/secrets", sl_e2b_unsupported, 0),
    ENVD("GET", "/health", sl_envd_health, 0),
    ENVD("GET", "/files", sl_envd_files_get, 0),
    ENVD("POST", "/files", sl_envd_files_post, SL_ROUTE_FILE_MAX_BODY),
    ENVD("POST", "/{service}/{method}", sl_envd_rpc, (size_t)3 * 1024 * 1024),
#define INTERP(m, path, h)                                                                      \
    {.method = m, .pattern = SL_E2B_INTERPRETER_PREFIX "{sandbox_id}" path, .handler = h,      \
     .auth = true, .op_id = "interpreter", .summary = "E2B code interpreter",                  \
     .max_body = (size_t)3 * 1024 * 1024, .tenant = true, .credential = SL_CRED_E2B_TRAFFIC}
    INTERP("POST", "/execute", sl_interp_execute),
    INTERP("POST", "/contexts", sl_interp_contexts_create),
    INTERP("GET", "/contexts", sl_interp_contexts_list),
    INTERP("DELETE", "/contexts/{context_id}", sl_interp_context_delete),
    INTERP("POST", "/contexts/{context_id}/restart", sl_interp_context_restart),
#undef INTERP
#undef ENVD
#undef E2B

    /* The worker protocol (API.md §9): what a replica forwards to the owner,
     * answered by the same handlers once the fence headers pass. No request
     * schema: the forwarder's extra fields (connect's sandbox_uid, profile,
     * worker_epoch) draw no warnings. */
    {.method = "GET", .pattern = "/internal/v1/health", .handler = h_internal_health,
     .auth = true, .op_id = "internalHealth", .summary = "Worker health", .internal = true},
#define INT "/internal/v1/sandboxes/{sandbox_id}"
#define INTERNAL(m, path, h, b, max, gen) \
    {.method = m, .pattern = INT path, .handler = h, .auth = true, .body = b, \
     .op_id = "internal", .summary = "Forwarded to the owner", .max_body = max, .internal = true, \
     .internal_generation = gen}
    INTERNAL("POST", "", h_connect, true, 0, false),
    INTERNAL("DELETE", "", h_internal_destroy, false, 0, false),
    INTERNAL("POST", "/exec", h_exec, true, SL_ROUTE_EXEC_MAX_BODY, false),
    INTERNAL("GET", "/exec/{exec_id}", h_exec_get, false, 0, true),
    INTERNAL("POST", "/exec/{exec_id}/cancel", h_exec_cancel, false, 0, true),
    INTERNAL("POST", "/exec/{exec_id}/stdin", h_exec_stdin, true,
             SL_STDIN_MAX_BYTES * 2 + 64 * 1024, true),
    INTERNAL("POST", "/exec/{exec_id}/signal", h_exec_signal, true, 0, true),
    INTERNAL("GET", "/exec/{exec_id}/stream", h_exec_stream, false, 0, true),
    INTERNAL("PUT", "/files", h_file_write, true, SL_ROUTE_FILE_MAX_BODY, false),
    INTERNAL("GET", "/files", h_file_read, false, 0, false),
    INTERNAL("GET", "/files/list", h_file_list, false, 0, false),
    INTERNAL("GET", "/files/watch", h_file_watch, false, 0, false),
    INTERNAL("POST", "/files/mkdir", h_file_mkdir, true, 0, false),
    INTERNAL("POST", "/files/delete", h_file_delete, true, 0, false),
    INTERNAL("POST", "/files/move", h_file_move, true, 0, false),
    INTERNAL("POST", "/suspend", h_suspend, true, 0, false),
    INTERNAL("POST", "/resume", h_resume, false, 0, false),
    INTERNAL("POST", "/templates", h_template_publish, true, 0, false),
    INTERNAL("PUT", "/templates", h_template_attach, true, 0, false),
    INTERNAL("GET", "/network", h_network_get, false, 0, false),
    INTERNAL("PUT", "/network", h_network_put, true, 0, false),
#undef INTERNAL
#undef INT
};
const size_t sl_routes_len = sizeof(sl_routes) / sizeof(sl_routes[0]);
