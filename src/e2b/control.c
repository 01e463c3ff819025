/* E2B's control plane (e2b.h): sandboxes by E2B's routes and shapes over
 * service/e2b.c. Every refusal is E2B's {"code": <status>, "message"},
 * whose code the SDKs branch on (404: not found, 409: already paused). */
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/tenant_view.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "config/config.h"
#include "e2b/e2b.h"
#include "service/service.h"
#include "service/tenants.h"
#include "store/store.h"

/* metadata and envVars: at most this many string pairs. */
#define MAX_PAIRS 128
#define LIST_DEFAULT 100
#define LIST_MAX 1000

void sl_e2b_respond_error(struct sl_response *resp, int status, const char *message)
{
    resp->status = status;
    resp->content_type = "application/json";
    _cleanup_json_ json_t *doc = json_pack("{s:i,s:s}", "code", status, "message", message);
    resp->body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    resp->len = resp->body ? strlen(resp->body) : 0;
}

static void respond_err(struct sl_response *resp, const struct sl_error *err)
{
    int status = sl_api_status_for_code(err->code);
    snprintf(resp->log_detail, sizeof(resp->log_detail), "%s: %.200s", err->code,
             err->detail[0] ? err->detail : err->message);
    sl_e2b_respond_error(resp, status, status == 500 ? "internal error" : err->message);
}

static void respond_doc(struct sl_response *resp, int status, json_t *doc)
{
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    resp->len = resp->body ? strlen(resp->body) : 0;
    json_decref(doc);
    if (!resp->body)
        sl_e2b_respond_error(resp, 500, "internal error");
}

static void respond_empty(struct sl_response *resp, int status)
{
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = strdup("");
    resp->len = 0;
}

/* The request's JSON object ({} for an empty body), or NULL answered. */
static json_t *body_object(struct sl_request *req, struct sl_response *resp)
{
    if (!req->raw_body || req->raw_len == 0)
        return json_object();
    json_t *doc = json_loadb(req->raw_body, req->raw_len, 0, NULL);
    if (!json_is_object(doc)) {
        json_decref(doc);
        sl_e2b_respond_error(resp, 400, "the body must be a JSON object");
        return NULL;
    }
    return doc;
}

/* A timeout in seconds: absent (0), or 1 to SANDBOX_E2B_MAX_TIMEOUT_SECONDS. */
static bool body_timeout(struct sl_request *req, struct sl_response *resp, const json_t *body,
                         int64_t *out)
{
    const json_t *t = json_object_get(body, "timeout");
    *out = 0;
    if (!t || json_is_null(t))
        return true;
    int64_t max = sl_service_config(req->svc)->e2b_max_timeout_seconds;
    if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > max) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "timeout must be a whole number of seconds from 0 to %lld "
                 "(SANDBOX_E2B_MAX_TIMEOUT_SECONDS)",
                 (long long)max);
        sl_e2b_respond_error(resp, 400, msg);
        return false;
    }
    *out = json_integer_value(t);
    return true;
}

/* metadata / envVars: an object of at most MAX_PAIRS strings, as compact
 * text (NULL when absent or empty). */
static bool body_pairs(struct sl_response *resp, const json_t *body, const char *field,
                       char **out)
{
    *out = NULL;
    const json_t *o = json_object_get(body, field);
    if (!o || json_is_null(o))
        return true;
    const char *k;
    const json_t *v;
    bool ok = json_is_object(o) && json_object_size(o) <= MAX_PAIRS;
    json_object_foreach((json_t *)o, k, v) ok = ok && json_is_string(v) && strlen(k) <= 256 &&
                                                 strlen(k) > 0 &&
                                                 json_string_length(v) <= 65536 &&
                                                 strlen(json_string_value(v)) ==
                                                     json_string_length(v);
    if (!ok) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "%s must be an object of at most %d string values (names of 1 to 256 "
                 "characters, values of at most 65536, no NUL)",
                 field, MAX_PAIRS);
        sl_e2b_respond_error(resp, 400, msg);
        return false;
    }
    if (json_object_size(o) > 0)
        *out = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    return true;
}

static const char *tenant_of(const struct sl_request *req)
{
    return req->principal && req->principal->kind == SL_PRINCIPAL_TENANT
               ? req->principal->tenant_id
               : NULL;
}

/* The E2B id of a stored one (a tenant's namespace stripped). */
static const char *plain_id(const char *stored)
{
    const char *sep = strchr(stored, SL_TENANT_SEP);
    return sep ? sep + 1 : stored;
}

static const char *state_of(const char *status)
{
    return strcmp(status, "SUSPENDED") == 0 || strcmp(status, "SUSPENDING") == 0 ? "paused"
                                                                                 : "running";
}

static json_t *time_json(int64_t us)
{
    char buf[48];
    return json_string(sl_time_iso(us, "Z", buf, sizeof(buf)));
}

static json_t *object_of(const char *text)
{
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    return json_is_object(o) ? o : (json_decref(o), json_object());
}

/* The `Sandbox` of a create or connect: what the SDK needs to reach it. */
static json_t *sandbox_json(struct sl_request *req, const struct sl_e2b_sandbox *e)
{
    const struct sl_config *cfg = sl_service_config(req->svc);
    char token[SL_E2B_TOKEN_MAX], traffic[SL_E2B_TOKEN_MAX];
    const char *id = plain_id(e->sandbox_id);
    sl_e2b_envd_token(cfg->internal_token, SL_E2B_TOKEN_ENVD, tenant_of(req), id, token);
    /* The code interpreter sends the traffic token on its context calls,
     * which carry no X-Access-Token; it opens those only. */
    sl_e2b_envd_token(cfg->internal_token, SL_E2B_TOKEN_TRAFFIC, tenant_of(req), id, traffic);
    const char *domain = cfg->e2b_domain && cfg->e2b_domain[0] ? cfg->e2b_domain : NULL;
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:s}", "sandboxID", id, "templateID",
                     e->template_id, "clientID", "sandloom", "envdVersion", SL_E2B_ENVD_VERSION,
                     "envdAccessToken", token, "domain",
                     domain ? json_string(domain) : json_null(), "trafficAccessToken", traffic);
}

/* The `SandboxDetail` of info and of each listed sandbox. */
static json_t *detail_json(struct sl_request *req, const struct sl_e2b_sandbox *e)
{
    const struct sl_config *cfg = sl_service_config(req->svc);
    int64_t mem = cfg->memory_limit_bytes > 0 ? cfg->memory_limit_bytes / (1024 * 1024) : 0;
    int cpus = cfg->cpu_limit > 0 ? (int)ceil(cfg->cpu_limit) : 1;
    json_t *doc = json_pack(
        "{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:s,s:i,s:I,s:I,s:o,s:{s:s}}", "sandboxID",
        plain_id(e->sandbox_id), "templateID", e->template_id, "clientID", "sandloom",
        "envdVersion", SL_E2B_ENVD_VERSION, "metadata", object_of(e->metadata_json), "startedAt",
        time_json(e->started_at), "endAt", time_json(e->end_at), "state", state_of(e->status),
        "cpuCount", cpus, "memoryMB", (json_int_t)mem, "diskSizeMB", (json_int_t)0,
        "volumeMounts", json_array(), "lifecycle", "onTimeout", e->on_timeout);
    return doc;
}

/* A create adds a sandbox and a running session of its tenant's: both
 * checked, and what they admit, under the one quota lock (held after). */
static int create_quotas(struct sl_request *req, const char *stored, bool *held,
                         struct sl_error *err)
{
    int64_t value = 0;
    if (sl_svc_quota_enter(req->svc, req->principal, SL_LIMIT_SANDBOXES, stored, held, &value,
                           err) < 0)
        return -1;
    if (!*held)
        return sl_svc_quota_enter(req->svc, req->principal, SL_LIMIT_RUNNING_SESSIONS, stored,
                                  held, &value, err);
    if (sl_svc_tenant_quota_check(req->svc, req->principal, SL_LIMIT_RUNNING_SESSIONS, stored,
                                  &value, err) < 0) {
        sl_svc_quota_leave(req->svc, *held);
        *held = false;
        return -1;
    }
    return 0;
}

void sl_e2b_create(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *body = body_object(req, resp);
    if (!body)
        return;
    const struct sl_config *cfg = sl_service_config(req->svc);
    const json_t *tpl = json_object_get(body, "templateID");
    const char *template_id = json_is_string(tpl) ? json_string_value(tpl) : "base";
    if ((tpl && !json_is_string(tpl)) || !*template_id || strlen(template_id) > 64) {
        sl_e2b_respond_error(resp, 400, "templateID must be a template name of 1 to 64 characters");
        return;
    }
    int64_t timeout = 0;
    _cleanup_free_ char *metadata = NULL, *env = NULL;
    if (!body_timeout(req, resp, body, &timeout) || !body_pairs(resp, body, "metadata", &metadata) ||
        !body_pairs(resp, body, "envVars", &env))
        return;
    /* What this build does not do is refused, never ignored: a sandbox
     * that silently lacks its volume or network rule is worse. */
    static const char *const unsupported[] = {"volumeMounts", "network", "mcp", "iam",
                                              "autoResume"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        const json_t *v = json_object_get(body, unsupported[i]);
        if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0)) {
            char msg[200];
            snprintf(msg, sizeof(msg),
                     "%s is not supported by this service (see docs/E2B.md for what is)",
                     unsupported[i]);
            sl_e2b_respond_error(resp, 400, msg);
            return;
        }
    }
    const json_t *internet = json_object_get(body, "allow_internet_access");
    if (json_is_false(internet)) {
        sl_e2b_respond_error(resp, 400,
                          "allow_internet_access=false is not supported here yet: set the "
                          "sandbox's egress policy through the Sandloom API instead");
        return;
    }
    bool pause = json_is_true(json_object_get(body, "autoPause"));
    char id[24] = "i";
    if (sl_random_hex(id + 1, 9) < 0) {
        sl_e2b_respond_error(resp, 500, "internal error");
        return;
    }
    const char *tenant = tenant_of(req);
    char stored[SL_TENANT_ID_MAX + 32];
    if (tenant)
        snprintf(stored, sizeof(stored), "%s%c%s", tenant, SL_TENANT_SEP, id);
    else
        snprintf(stored, sizeof(stored), "%s", id);
    bool held = false;
    struct sl_error err = {0};
    if (create_quotas(req, stored, &held, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    char actor[SL_PRINCIPAL_ACTOR_MAX];
    struct sl_e2b_new n = {
        .sandbox_id = stored,
        .scope = stored,
        .owner = tenant,
        .template_id = template_id,
        .metadata_json = metadata,
        .env_json = env,
        .timeout_seconds = timeout > 0 ? timeout : cfg->e2b_default_timeout_seconds,
        .pause_on_timeout = pause,
        .actor = sl_principal_actor(req->principal, actor),
    };
    struct sl_e2b_sandbox e;
    int rc = sl_svc_e2b_create(req->svc, &n, &e, &err);
    sl_svc_quota_leave(req->svc, held);
    if (rc < 0) {
        respond_err(resp, &err);
        return;
    }
    respond_doc(resp, 201, sandbox_json(req, &e));
    sl_e2b_sandbox_clear(&e);
}

void sl_e2b_connect(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *body = body_object(req, resp);
    int64_t timeout = 0;
    if (!body || !body_timeout(req, resp, body, &timeout))
        return;
    struct sl_error err = {0};
    struct sl_e2b_sandbox e;
    bool resumed = false, held = false;
    int64_t value = 0;
    /* A resume adds a running session (one awake already counts nothing). */
    if (sl_svc_quota_enter(req->svc, req->principal, SL_LIMIT_RUNNING_SESSIONS, req->params[0],
                           &held, &value, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    int rc = sl_svc_e2b_connect(req->svc, req->params[0], timeout, &resumed, &e, &err);
    sl_svc_quota_leave(req->svc, held);
    if (rc < 0) {
        respond_err(resp, &err);
        return;
    }
    respond_doc(resp, resumed ? 201 : 200, sandbox_json(req, &e));
    sl_e2b_sandbox_clear(&e);
}

/* The v1 resume (older SDKs): a connect that answers the sandbox. */
void sl_e2b_resume(struct sl_request *req, struct sl_response *resp)
{
    sl_e2b_connect(req, resp);
}

void sl_e2b_kill(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    char actor[SL_PRINCIPAL_ACTOR_MAX];
    if (sl_svc_e2b_kill(req->svc, req->params[0], sl_principal_actor(req->principal, actor),
                        &err) < 0)
        respond_err(resp, &err);
    else
        respond_empty(resp, 204);
}

void sl_e2b_info(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    struct sl_e2b_sandbox e;
    if (sl_svc_e2b_get(req->svc, req->params[0], &e, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    respond_doc(resp, 200, detail_json(req, &e));
    sl_e2b_sandbox_clear(&e);
}

void sl_e2b_timeout(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *body = body_object(req, resp);
    int64_t timeout = 0;
    if (!body || !body_timeout(req, resp, body, &timeout))
        return;
    if (!json_object_get(body, "timeout")) {
        sl_e2b_respond_error(resp, 400, "timeout is required (seconds from now)");
        return;
    }
    struct sl_error err = {0};
    if (sl_svc_e2b_set_timeout(req->svc, req->params[0], timeout, &err) < 0)
        respond_err(resp, &err);
    else
        respond_empty(resp, 204);
}

void sl_e2b_pause(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *body = body_object(req, resp);
    if (!body)
        return;
    /* Memory is not kept by this backend (the native runtime): asked for
     * explicitly, that is said rather than done silently. */
    if (json_is_true(json_object_get(body, "memory"))) {
        sl_e2b_respond_error(resp, 400,
                          "this worker's runtime cannot keep a paused sandbox's memory: pause "
                          "without memory (its files are kept, its processes stop)");
        return;
    }
    struct sl_error err = {0};
    if (sl_svc_e2b_pause(req->svc, req->params[0], &err) < 0)
        respond_err(resp, &err);
    else
        respond_empty(resp, 204);
}

/* metadata query: "k=v&k2=v2" once URL-decoded, each part URL-encoded. */
static bool metadata_matches(const char *filter, const json_t *metadata)
{
    if (!filter || !*filter)
        return true;
    _cleanup_free_ char *copy = strdup(filter);
    if (!copy)
        return false;
    char *save = NULL;
    for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (!eq)
            return false;
        *eq = '\0';
        MHD_http_unescape(pair);
        char *value = eq + 1;
        MHD_http_unescape(value);
        const json_t *have = json_object_get(metadata, pair);
        if (!json_is_string(have) || strcmp(json_string_value(have), value) != 0)
            return false;
    }
    return true;
}

static const char *query(struct sl_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

static void list_sandboxes(struct sl_request *req, struct sl_response *resp, bool paged)
{
    const char *state = query(req, "state"), *metadata = query(req, "metadata");
    const char *limit_text = query(req, "limit"), *token = query(req, "nextToken");
    bool want_running = !state || strstr(state, "running"), want_paused = !state || strstr(state, "paused");
    long limit = LIST_DEFAULT;
    if (limit_text) {
        char *end = NULL;
        limit = strtol(limit_text, &end, 10);
        if (!*limit_text || *end || limit < 1 || limit > LIST_MAX) {
            sl_e2b_respond_error(resp, 400, "limit must be a whole number from 1 to 1000");
            return;
        }
    }
    if (token && (strlen(token) > 128 || !*token)) {
        sl_e2b_respond_error(resp, 400, "nextToken is not one this service gave");
        return;
    }
    const char *tenant = tenant_of(req);
    char prefix[SL_TENANT_ID_MAX + 2] = "", after[SL_TENANT_ID_MAX + 132] = "";
    if (tenant)
        snprintf(prefix, sizeof(prefix), "%s%c", tenant, SL_TENANT_SEP);
    if (token)
        snprintf(after, sizeof(after), "%s%s", prefix, token);
    _cleanup_json_ json_t *out = json_array();
    const char *last = NULL;
    char last_buf[160] = "";
    bool more = false;
    /* Filtered here (state, metadata), so read in batches until the page
     * is full or the store has no more. */
    for (int round = 0; out && round < 64; round++) {
        struct sl_e2b_sandbox *v = NULL;
        size_t n = 0;
        struct sl_error err = {0};
        if (sl_svc_e2b_list(req->svc, tenant ? prefix : NULL, after[0] ? after : NULL, 256, &v,
                            &n, &err) < 0) {
            respond_err(resp, &err);
            return;
        }
        size_t i = 0;
        for (; i < n; i++) {
            if ((long)json_array_size(out) >= limit) {
                more = true;
                break;
            }
            snprintf(after, sizeof(after), "%s", v[i].sandbox_id);
            bool paused = strcmp(state_of(v[i].status), "paused") == 0;
            if ((paused && !want_paused) || (!paused && !want_running))
                continue;
            _cleanup_json_ json_t *md = object_of(v[i].metadata_json);
            if (!metadata_matches(metadata, md))
                continue;
            json_array_append_new(out, detail_json(req, &v[i]));
            snprintf(last_buf, sizeof(last_buf), "%s", plain_id(v[i].sandbox_id));
            last = last_buf;
        }
        bool exhausted = n < 256;
        sl_e2b_sandboxes_free(v, n);
        if (more || exhausted)
            break;
    }
    if (!out) {
        sl_e2b_respond_error(resp, 500, "internal error");
        return;
    }
    if (paged && more && last) {
        char line[200];
        snprintf(line, sizeof(line), "Content-Type: application/json\nx-next-token: %s\n", last);
        resp->headers = strdup(line);
    }
    respond_doc(resp, 200, json_incref(out));
}

void sl_e2b_list(struct sl_request *req, struct sl_response *resp)
{
    list_sandboxes(req, resp, true);
}

void sl_e2b_list_v1(struct sl_request *req, struct sl_response *resp)
{
    list_sandboxes(req, resp, false);
}

void sl_e2b_metrics(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    struct sl_e2b_sandbox e;
    if (sl_svc_e2b_get(req->svc, req->params[0], &e, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    sl_e2b_sandbox_clear(&e);
    /* One sample, now, of what its cgroups count (E2B keeps a series of
     * them; this service does not record any between calls). */
    _cleanup_json_ json_t *u = sl_svc_sandbox_usage(req->svc, req->params[0], &err);
    if (!u) {
        respond_err(resp, &err);
        return;
    }
    const struct sl_config *cfg = sl_service_config(req->svc);
    int64_t now = sl_now_us();
    char when[48];
#define USAGE(k) (json_integer_value(json_object_get(u, k)) > 0 ? json_integer_value(json_object_get(u, k)) : 0)
    json_int_t limit = USAGE("memory_limit");
    if (!limit || limit > (json_int_t)cfg->memory_limit_bytes)
        limit = cfg->memory_limit_bytes > 0 ? cfg->memory_limit_bytes : 0;
    json_t *sample = json_pack(
        "{s:s,s:I,s:i,s:f,s:I,s:I,s:I,s:I,s:I}", "timestamp",
        sl_time_iso(now, "Z", when, sizeof(when)), "timestampUnix", (json_int_t)(now / 1000000),
        "cpuCount", cfg->cpu_limit > 0 ? (int)ceil(cfg->cpu_limit) : 1, "cpuUsedPct",
        json_real_value(json_object_get(u, "cpu_used_pct")), "memUsed", USAGE("memory_bytes"),
        "memTotal", limit, "memCache", USAGE("cache_bytes"), "diskUsed", USAGE("disk_bytes"),
        "diskTotal", USAGE("disk_limit"));
#undef USAGE
    respond_doc(resp, 200, sample ? json_pack("[o]", sample) : NULL);
}

void sl_e2b_unsupported(struct sl_request *req, struct sl_response *resp)
{
    (void)req;
    sl_e2b_respond_error(resp, 501,
                      "this E2B call is not supported by this service (templates' builds, "
                      "volumes, snapshots, fork, network rules, secrets): see docs/E2B.md");
}
