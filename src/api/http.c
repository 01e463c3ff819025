#include "api/http.h"
#include "api/validate.h"

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "api/auth_guard.h"
#include "api/conn_guard.h"
#include "api/errors.h"
#include "api/exec_stream.h"
#include "api/forward.h"
#include "api/fs_watch.h"
#include "api/port_proxy.h"
#include "api/terminal_ws.h"
#include "api/mcp.h"
#include "api/tenant_view.h"
#include "api/router.h"
#include "api/stream_relay.h"
#include "e2b/connect.h"
#include "e2b/e2b.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/pool.h"
#include "common/util.h"
#include "config/config.h"
#include "service/api_keys.h"
#include "service/service.h"
#include "service/tenants.h"
#include <curl/curl.h>

/* Failed authentications answered late (auth_guard.h): their connections
 * wait suspended in a FIFO (every delay is the same), bounded; one thread
 * resumes them when due. No handler thread is ever held by a guesser. */
#define PENALTY_QUEUE_MAX 1024

struct conn_state;

struct penalty_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    pthread_t thread;
    bool started, stopping;
    struct conn_state *head, *tail;
    size_t n;
};

struct sl_http {
    struct MHD_Daemon *daemon;
    struct sl_service *svc;
    struct sl_pool *handlers; /* runs route handlers off MHD's event threads */
    struct sl_pool *forwards; /* runs forwards to owners (api/forward.h) */
    struct sl_pool *key_checks; /* API keys asked of the store (run_key_check) */
    const struct sl_config *cfg;
    char *expected_auth;      /* "Bearer <token>" */
    size_t expected_len;
    struct sl_auth_guard *auth_guard;
    struct sl_conn_guard *conn_guard;
    /* rate-limited libmicrohttpd log lines */
    pthread_mutex_t log_lock;
    int64_t log_window_us;
    int log_lines;
    int64_t log_suppressed;
    struct penalty_queue penalty;
};

/* Where a request is. RECEIVING: MHD's thread is collecting the body.
 * DISPATCHED: the connection is suspended; a handler job (and then maybe a
 * deferred completion, e.g. a running command) owns the answer. READY: the
 * answer is in `resp` and the connection was resumed to send it. DONE: sent
 * (or refused early). */
/* PH_CHECKING_KEY: suspended before anything else while a handler thread
 * asks the store about an API key the cache could not vouch for; it ends
 * in PH_KEY_ACCEPTED or PH_KEY_REFUSED (or an answer: PH_READY). */
enum conn_phase {
    PH_RECEIVING,
    PH_DISPATCHED,
    PH_READY,
    PH_DONE,
    PH_CHECKING_KEY,
    PH_KEY_ACCEPTED,
    PH_KEY_REFUSED,
};

/* Per-request state, from the first callback to completion. */
struct conn_state {
    struct sl_http *http;
    struct MHD_Connection *conn;
    const struct sl_route_def *route;
    char *pathbuf; /* params point into it */
    char *path;    /* the request's path as sent (forwarding) */
    /* An E2B sandbox request's path as it came, before sl_e2b_rewrite
     * (what a raw relay to the owner sends); NULL for any other. */
    char *sent_url;
    /* While the handler runs: the parsed body, for a forward. */
    const json_t *parsed;
    const char *params[SL_ROUTE_MAX_PARAMS];
    size_t nparams;
    char method[16];
    struct sl_buf body;
    bool too_large;
    enum conn_phase phase;
    struct sl_response resp; /* when READY */
    int64_t due_us;          /* a delayed 401: when to answer */
    json_t *warnings;        /* body fields the route does not know; NULL = none */
    /* The access log line (log_access), filled as the request goes. */
    int64_t start_us;
    int status;
    char exec_id[129];
    char code[64];
    char message[256];
    char log_detail[256];
    struct conn_state *penalty_next;
    struct sl_principal principal; /* decided in on_request, before the route runs */
    /* The route match, kept for after a key check. */
    enum sl_match match;
    char allow[64];
    /* A key waiting for its check (PH_CHECKING_KEY); wiped after it. */
    char key_id[SL_KEY_ID_LEN + 1];
    char key_secret[SL_KEY_SECRET_LEN + 1];
    /* A tenant's path sandbox id in its namespace ("<tenant_id>~<name>"):
     * what params[] and path point at from run_handler on. */
    char tenant_sandbox_id[SL_TENANT_ID_MAX + 1 + SL_TENANT_NAME_MAX + 1];
    /* A 101 queued: its owner until libmicrohttpd says it was sent. */
    struct sl_upgrade *upgrade;
};

/* The deferred answer handle of api/http.h is the connection state. */
struct sl_deferred {
    struct conn_state st;
};

/* What the access line says of an answer: its status and, for an
 * error, the code and the message the client got (from the one body). */
static void note_answer(struct conn_state *st, const struct sl_response *resp)
{
    if (!st)
        return;
    st->status = resp->status;
    if (resp->log_detail[0])
        snprintf(st->log_detail, sizeof(st->log_detail), "%s", resp->log_detail);
    if (resp->status < 400 || !resp->body)
        return;
    json_t *doc = json_loadb(resp->body, resp->len, 0, NULL);
    json_t *detail = json_object_get(doc, "detail");
    const char *code = json_string_value(json_object_get(detail, "code"));
    const char *message = json_string_value(json_object_get(detail, "message"));
    snprintf(st->code, sizeof(st->code), "%s", code ? code : "");
    snprintf(st->message, sizeof(st->message), "%s", message ? message : "");
    json_decref(doc);
}

/* ---- bodies produced while they are sent (router.h's sl_body_source) ---- */

struct body_ctx {
    struct sl_body_source *src;
    struct MHD_Connection *conn;
};

/* The source's promised wake: the connection was suspended (or is about
 * to be: libmicrohttpd then cancels the suspend) waiting for it. */
static void body_wake(void *ctx) { MHD_resume_connection(ctx); }

static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct body_ctx *b = cls;
    ssize_t n = b->src->read(b->src, buf, max);
    if (n > 0)
        return n;
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* Nothing yet: park the connection, holding no thread, until the
     * source wakes it (microhttpd.h's pattern for a reader with no data). */
    MHD_suspend_connection(b->conn);
    return 0;
}

static void body_free(void *cls)
{
    struct body_ctx *b = cls;
    b->src->close(b->src);
    free(b);
}

/* Bytes of the body produced per read: one event of a command's output. */
#define BODY_BLOCK (128 * 1024)

static enum MHD_Result queue_source(struct conn_state *st, struct MHD_Connection *conn,
                                    struct sl_response *resp)
{
    (void)st;
    struct sl_body_source *src = resp->source;
    resp->source = NULL;
    struct body_ctx *b = malloc(sizeof(*b));
    struct MHD_Response *r = NULL;
    if (b) {
        *b = (struct body_ctx){.src = src, .conn = conn};
        src->wake = body_wake;
        src->wake_ctx = conn;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, BODY_BLOCK, body_read, b,
                                              body_free);
    }
    if (!r) {
        free(b);
        src->close(src);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    /* A proxy in front must pass events on as they come. */
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- WebSocket: the switch, then the socket is the route's ---- */

void sl_upgraded_close(struct sl_upgraded *h)
{
    MHD_upgrade_action((struct MHD_UpgradeResponseHandle *)h, MHD_UPGRADE_ACTION_CLOSE);
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls,
                        const char *extra_in, size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    (void)cls;
    (void)conn;
    struct conn_state *st = con_cls;
    struct sl_upgrade *u = st ? st->upgrade : NULL;
    if (!u) {
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return;
    }
    st->upgrade = NULL;
    u->start(u, sock, extra_in, extra_in_size, (struct sl_upgraded *)urh);
}

static enum MHD_Result queue_upgrade(struct conn_state *st, struct MHD_Connection *conn,
                                     struct sl_response *resp)
{
    struct sl_upgrade *u = resp->upgrade;
    resp->upgrade = NULL;
    struct MHD_Response *r = MHD_create_response_for_upgrade(on_upgraded, NULL);
    if (!r) {
        u->abandon(u);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(r, "Sec-WebSocket-Accept", u->accept);
    if (u->protocol[0])
        MHD_add_response_header(r, "Sec-WebSocket-Protocol", u->protocol);
    if (u->extensions[0])
        MHD_add_response_header(r, "Sec-WebSocket-Extensions", u->extensions);
    st->upgrade = u;
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, r);
    MHD_destroy_response(r);
    return rc;
}

/* A proxied answer's own header lines ("Name: value\n"). */
static void add_proxied_headers(struct MHD_Response *r, char *lines)
{
    for (char *line = lines, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *colon = strchr(line, ':');
        if (!colon || colon == line)
            continue;
        *colon = '\0';
        const char *value = colon + 1;
        while (*value == ' ')
            value++;
        MHD_add_response_header(r, line, value);
    }
}

static enum MHD_Result queue(struct conn_state *st, struct MHD_Connection *conn,
                             struct sl_response *resp)
{
    note_answer(st, resp);
    if (resp->source)
        return queue_source(st, conn, resp);
    if (resp->upgrade)
        return queue_upgrade(st, conn, resp);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        resp->len, resp->body ? resp->body : (void *)"", resp->body ? MHD_RESPMEM_MUST_FREE
                                                                    : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(resp->body);
        return MHD_NO;
    }
    resp->body = NULL;
    if (resp->headers) {
        add_proxied_headers(r, resp->headers);
        free(resp->headers);
        resp->headers = NULL;
    } else {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
        MHD_add_response_header(r, "Cache-Control",
                                resp->cacheable ? "public, max-age=3600" : "no-store");
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    }
    if (resp->allow[0])
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
    /* RFC 9110 §11.6.1: a 401 names the scheme it wants (MCP clients read
     * it to find how to authenticate). */
    if (resp->status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result queue_error(struct conn_state *st, struct MHD_Connection *conn,
                                   const char *code, const char *message, const char *allow)
{
    struct sl_response resp = {
        .status = sl_api_status_for_code(code),
        .content_type = "application/json",
        .body = sl_api_error_body(code, message, NULL),
    };
    resp.len = resp.body ? strlen(resp.body) : 0;
    if (allow)
        snprintf(resp.allow, sizeof(resp.allow), "%s", allow);
    return queue(st, conn, &resp);
}

static enum MHD_Result queue_mcp_unauthorized(struct conn_state *st,
                                              struct MHD_Connection *conn)
{
    struct sl_response resp = {
        .status = 401,
        .content_type = "application/json",
        .body = strdup(SL_MCP_UNAUTHORIZED_BODY),
    };
    resp.len = resp.body ? strlen(resp.body) : 0;
    return queue(st, conn, &resp);
}

enum auth_outcome { AUTH_REFUSED, AUTH_ACCEPTED, AUTH_NEEDS_STORE };

/* A browser's WebSocket cannot send an Authorization header: it may offer
 * the token as a subprotocol instead, "sandloom.bearer.<token>" among the
 * Sec-WebSocket-Protocol values (never echoed back). Only on an upgrade
 * request. The credential as "Bearer <token>" in buf. */
#define WS_BEARER_PREFIX "sandloom.bearer."
static bool websocket_bearer(struct MHD_Connection *conn, char *buf, size_t size,
                             const char **value, size_t *len)
{
    const char *upgrade = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Upgrade");
    const char *offered =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
    if (!upgrade || strcasecmp(upgrade, "websocket") != 0 || !offered)
        return false;
    const char *p = strstr(offered, WS_BEARER_PREFIX);
    if (!p || (p != offered && p[-1] != ' ' && p[-1] != ','))
        return false;
    p += strlen(WS_BEARER_PREFIX);
    size_t n = strcspn(p, ", \t");
    if (n == 0 || n + 8 > size)
        return false;
    int w = snprintf(buf, size, "Bearer %.*s", (int)n, p);
    *value = buf;
    *len = (size_t)w;
    return true;
}

/* The one authentication decision of a request: who its credential says
 * it is, into st->principal. The internal token is the operator; a tenant
 * API key is checked against the key cache, and when the cache cannot say
 * the key is left in st for a handler thread to check (AUTH_NEEDS_STORE:
 * MHD's threads never wait on the database). Anything else, and every way
 * a key can be wrong, is AUTH_REFUSED: one 401 that says nothing of why. */
/* E2B's envd: the sandbox's access token for the route's sandbox. */
static enum auth_outcome authenticate_envd(struct conn_state *st, struct MHD_Connection *conn)
{
    const char *value = NULL;
    size_t len = 0;
    enum sl_e2b_token kind = SL_E2B_TOKEN_ENVD;
    if ((MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, "X-Access-Token", 14, &value,
                                       &len) != MHD_YES ||
         !value)) {
        /* The interpreter's context calls carry the traffic token alone. */
        kind = SL_E2B_TOKEN_TRAFFIC;
        if (st->route->credential != SL_CRED_E2B_TRAFFIC ||
            MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, "E2B-Traffic-Access-Token", 24,
                                          &value, &len) != MHD_YES ||
            !value)
            return AUTH_REFUSED;
    }
    if (st->nparams < 1)
        return AUTH_REFUSED;
    return sl_e2b_envd_token_check(st->http->cfg->internal_token, kind, st->params[0], value,
                                   len, &st->principal)
               ? AUTH_ACCEPTED
               : AUTH_REFUSED;
}

/* A credential copied out of a header leaves no trace on the stack. */
static void wipe_credential(char (*buf)[600]) { explicit_bzero(*buf, sizeof(*buf)); }

static enum auth_outcome authenticate(struct conn_state *st, struct MHD_Connection *conn)
{
    struct sl_http *http = st->http;
    const char *value = NULL;
    size_t len = 0;
    st->principal = (struct sl_principal){.kind = SL_PRINCIPAL_NONE};
    __attribute__((cleanup(wipe_credential))) char from_protocol[600];
    enum sl_route_credential cred =
        st->match == SL_MATCH_OK ? st->route->credential : SL_CRED_BEARER;
    if (cred == SL_CRED_E2B_ENVD || cred == SL_CRED_E2B_TRAFFIC)
        return authenticate_envd(st, conn);
    if (cred == SL_CRED_E2B_API_KEY) {
        /* E2B's X-API-KEY: the token, or a key in either spelling. */
        const char *key = NULL;
        size_t klen = 0;
        if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, "X-API-KEY", 9, &key, &klen) !=
                MHD_YES ||
            !key || klen > 512)
            return AUTH_REFUSED;
        char canon[520];
        if (!sl_e2b_key_canonical(key, klen, canon, sizeof(canon)))
            return AUTH_REFUSED;
        len = (size_t)snprintf(from_protocol, sizeof(from_protocol), "Bearer %s", canon);
        value = from_protocol;
        explicit_bzero(canon, sizeof(canon));
    } else if ((MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                       strlen(MHD_HTTP_HEADER_AUTHORIZATION), &value,
                                       &len) != MHD_YES ||
                !value) &&
               !websocket_bearer(conn, from_protocol, sizeof(from_protocol), &value, &len)) {
        return AUTH_REFUSED;
    }
    if (sl_consttime_equal(value, len, http->expected_auth, http->expected_len)) {
        st->principal.kind = SL_PRINCIPAL_OPERATOR;
        return AUTH_ACCEPTED;
    }
    static const char bearer[] = "Bearer ";
    if (len <= sizeof(bearer) - 1 || strncmp(value, bearer, sizeof(bearer) - 1) != 0 ||
        !sl_api_key_parse(value + sizeof(bearer) - 1, len - (sizeof(bearer) - 1), st->key_id,
                          st->key_secret))
        return AUTH_REFUSED;
    struct sl_error err = {0};
    int r = sl_svc_key_check(http->svc, st->key_id, st->key_secret, false, &st->principal, &err);
    if (r == SL_KEY_NEEDS_STORE)
        return AUTH_NEEDS_STORE;
    explicit_bzero(st->key_secret, sizeof(st->key_secret));
    return r == SL_KEY_ACCEPTED ? AUTH_ACCEPTED : AUTH_REFUSED;
}



static size_t route_max_body(const struct sl_route_def *route)
{
    return route && route->max_body ? route->max_body : SL_ROUTE_DEFAULT_MAX_BODY;
}

/* Refuse a declared body above the cap before reading any of it. */
static bool content_length_too_large(struct MHD_Connection *conn, size_t max)
{
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return false;
    char *end = NULL;
    unsigned long long n = strtoull(cl, &end, 10);
    return end == cl || *end || n > max;
}

/* ---- handler jobs and deferred answers ------------------------------------ */

static void conn_state_free(struct conn_state *st)
{
    json_decref(st->warnings);
    sl_buf_free(&st->body);
    free(st->resp.body);
    free(st->resp.headers);
    if (st->resp.source) /* an answer never sent */
        st->resp.source->close(st->resp.source);
    if (st->resp.upgrade)
        st->resp.upgrade->abandon(st->resp.upgrade);
    if (st->upgrade) /* queued, never switched */
        st->upgrade->abandon(st->upgrade);
    free(st->pathbuf);
    free(st->path);
    free(st->sent_url);
    free(st);
}

/* Hand the finished answer to MHD's thread (it sends it after resume). */
/* A successful JSON answer carries the request's warnings (ours,
 * additive): the reference ignores unknown fields silently. */
static void add_warnings(struct conn_state *st, struct sl_response *resp)
{
    if (!st->warnings || resp->status < 200 || resp->status > 299 || !resp->body ||
        !resp->content_type || strcmp(resp->content_type, "application/json") != 0)
        return;
    json_t *doc = json_loadb(resp->body, resp->len, 0, NULL);
    json_t *own = json_object_get(doc, "warnings"); /* the handler's, e.g. a replay's */
    if (json_is_object(doc) && (!own || json_is_array(own))) {
        if (own)
            json_array_extend(own, st->warnings);
        else
            json_object_set(doc, "warnings", st->warnings);
        char *text = json_dumps(doc, JSON_COMPACT);
        if (text) {
            free(resp->body);
            resp->body = text;
            resp->len = strlen(text);
        }
    }
    json_decref(doc);
}

static void tenant_view_of(struct conn_state *st, struct sl_response *resp)
{
    if (st->principal.kind != SL_PRINCIPAL_TENANT || !resp->body)
        return;
    /* Most answers (a command's output) name no sandbox: not parsed. */
    if (!sl_tenant_view_mentions(st->principal.tenant_id, resp->body, resp->len))
        return;
    _cleanup_json_ json_t *doc = json_loadb(resp->body, resp->len, JSON_ALLOW_NUL, NULL);
    if (!doc)
        return;
    sl_tenant_view_strip(doc, st->principal.tenant_id);
    char *body = json_dumps(doc, JSON_COMPACT);
    if (!body)
        return;
    free(resp->body);
    resp->body = body;
    resp->len = strlen(body);
}

/* Put a tenant's path sandbox id into its namespace, in params[] and in the
 * path a forward sends on. A name outside the API's alphabet or too long
 * for a tenant names no sandbox of its: false (the caller answers 404, as
 * for any sandbox that does not exist). */
static bool tenant_namespace(struct conn_state *st)
{
    if (st->principal.kind != SL_PRINCIPAL_TENANT)
        return true;
    size_t i = 0;
    bool found = false;
    for (const char *p = st->route->pattern; (p = strchr(p, '{')) && i < st->nparams; i++, p++)
        if (strncmp(p, "{sandbox_id}", 12) == 0) {
            found = true;
            break;
        }
    if (!found)
        return true;
    const char *name = st->params[i];
    size_t n = strlen(name);
    /* What resolve let the tenant name: 128 characters with its namespace. */
    if (n < 3 || !sl_v_is_identifier(name) ||
        !sl_tenant_namespaced(st->principal.tenant_id, name, 128, st->tenant_sandbox_id,
                              sizeof(st->tenant_sandbox_id)))
        return false;
    /* The path as sent, with the name replaced (names need no escaping):
     * every tenant route's sandbox id is the segment after this. */
    static const char pre[] = "/api/v1/sandboxes/";
    const size_t pl = sizeof(pre) - 1;
    char *path = NULL;
    /* E2B's routes are never forwarded: their path stays as it came. */
    if (st->route->credential != SL_CRED_BEARER) {
        st->params[i] = st->tenant_sandbox_id;
        return true;
    }
    if (strncmp(st->path, pre, pl) == 0 && strncmp(st->path + pl, name, n) == 0 &&
        (st->path[pl + n] == '/' || st->path[pl + n] == '\0') &&
        asprintf(&path, "%s%s%s", pre, st->tenant_sandbox_id, st->path + pl + n) < 0)
        path = NULL;
    if (!path)
        return false;
    free(st->path);
    st->path = path;
    st->params[i] = st->tenant_sandbox_id;
    return true;
}

static void answer(struct conn_state *st, struct sl_response *resp)
{
    /* A proxied answer (the ports route) is the server's, as it gave it. */
    if (!resp->headers) {
        tenant_view_of(st, resp);
        add_warnings(st, resp);
    }
    st->resp = *resp;
    resp->body = NULL;
    st->phase = PH_READY;
    MHD_resume_connection(st->conn);
}

static void answer_error(struct conn_state *st, const char *code, const char *message)
{
    struct sl_response resp = {
        .status = sl_api_status_for_code(code),
        .content_type = "application/json",
        .body = sl_api_error_body(code, message, NULL),
    };
    resp.len = resp.body ? strlen(resp.body) : 0;
    answer(st, &resp);
}

/* No body, or one that is not a JSON object: the reference's one entry
 * at loc ["body", "request"], with what was wrong. */
static void answer_invalid_body(struct conn_state *st, const char *why)
{
    struct sl_validation v;
    sl_v_init(&v);
    sl_v_fail(&v, "request", "%s", why);
    char message[320];
    sl_v_message(&v, message, sizeof(message));
    struct sl_response resp = {
        .status = 422,
        .content_type = "application/json",
        .body = sl_api_error_body(SL_E_INVALID_REQUEST, message, v.errors),
    };
    sl_v_free(&v);
    resp.len = resp.body ? strlen(resp.body) : 0;
    answer(st, &resp);
}

/* ---- forwarding to the owner (API.md §10) ---- */

struct forward_job {
    struct conn_state *st;
    struct sl_forward_request rq;
    /* An event stream: relayed as it comes; answered (st handed over) at
     * its first bytes. */
    struct sl_relay *relay;
    bool answered;
    char last_event_id[128];
    char *url, *body;
    char *headers; /* a raw relay's: the client's header lines */
    char worker_id[129];
    char sandbox_id[129];
    int64_t generation;
};

/* The owner's event stream, as it comes (the forward thread): the client
 * gets its answer with the first bytes, then the rest through the relay. */
static bool relay_out(void *ctx, int status, const char *type, const char *data, size_t len)
{
    struct forward_job *job = ctx;
    if (!job->answered && !job->relay && !(job->relay = sl_relay_new())) {
        /* A raw relay makes its relay at the first bytes of a stream (most
         * of E2B's answers are not one). */
        job->answered = true;
        struct sl_response resp = {0};
        sl_e2b_respond_error(&resp, errno == EBUSY ? 429 : 500,
                             errno == EBUSY ? "this replica already relays as many streams as it "
                                              "may: retry later"
                                            : "internal error");
        answer(job->st, &resp); /* st is not ours after this */
        return false;
    }
    if (!job->answered) {
        struct sl_response resp = {.status = status,
                                   .content_type = type,
                                   .source = sl_relay_source(job->relay)};
        snprintf(resp.log_detail, sizeof(resp.log_detail), "streamed from %s", job->worker_id);
        job->answered = true;
        answer(job->st, &resp); /* st is not ours after this */
    }
    return sl_relay_push(job->relay, data, len);
}

static bool relay_open(void *ctx)
{
    struct forward_job *job = ctx;
    return !job->relay || sl_relay_open(job->relay);
}

static void forward_job_free(struct forward_job *job)
{
    free(job->url);
    free(job->body);
    free(job->headers);
    free(job);
}

static void run_forward(void *arg)
{
    struct forward_job *job = arg;
    struct sl_response resp;
    struct sl_service *svc = job->st->http->svc;
    bool reached = sl_forward_run(&job->rq, &resp);
    bool touch = resp.status >= 200 && resp.status < 300;
    bool forget = !reached || resp.status == 503; /* an owner gone or going */
    if (job->relay)
        sl_relay_end(job->relay, !job->answered);
    if (job->answered) {
        free(resp.body); /* the stream was the answer */
        free(resp.headers);
    } else
        answer(job->st, &resp); /* st is not ours after this */
    if (forget)
        sl_svc_owner_forget(svc, job->sandbox_id);
    /* §10.1 step 5: a 2xx is activity (the store skips dormant routes);
     * written after the client has its answer, off its latency. */
    if (touch)
        sl_svc_route_touch(svc, job->sandbox_id, job->generation);
    forward_job_free(job);
}

struct query_buf {
    struct sl_buf b;
    bool failed;
};

static enum MHD_Result add_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    struct query_buf *q = cls;
    char *k = curl_easy_escape(NULL, key, 0);
    char *v = value ? curl_easy_escape(NULL, value, 0) : NULL;
    if (!k || (value && !v) || (q->b.len && sl_buf_append(&q->b, "&", 1) < 0) ||
        sl_buf_append(&q->b, k, strlen(k)) < 0 ||
        (v && (sl_buf_append(&q->b, "=", 1) < 0 || sl_buf_append(&q->b, v, strlen(v)) < 0)))
        q->failed = true;
    curl_free(k);
    curl_free(v);
    return q->failed ? MHD_NO : MHD_YES;
}

/* §10.2: how long the owner may take to answer this route. */
static int64_t forward_timeout_ms(const struct conn_state *st)
{
    const char *p = st->route->pattern;
    const char *m = st->route->method;
    if (strstr(p, "/templates"))
        return strcmp(m, "POST") == 0 ? 900000 : 600000;
    if (strstr(p, "/files"))
        return 60000;
    if (strcmp(m, "POST") == 0 && strlen(p) > 5 && strcmp(p + strlen(p) - 5, "/exec") == 0 &&
        !json_is_true(json_object_get(st->parsed, "background"))) {
        const json_t *t = json_object_get(st->parsed, "timeout_seconds");
        double timeout = json_is_number(t) ? json_number_value(t)
                                           : (double)st->http->cfg->default_timeout_seconds;
        return (int64_t)((timeout + st->http->cfg->terminate_grace_seconds + 15) * 1000);
    }
    return 30000;
}

/* The body that goes to the owner: the request's, and for a connect the
 * fields the worker protocol's create takes (§9.2). */
static char *forward_body(const struct conn_state *st, const struct sl_error_owner *o)
{
    if (!st->parsed)
        return NULL;
    if (strcmp(st->route->method, "POST") == 0 &&
        strcmp(st->route->pattern, "/api/v1/sandboxes/{sandbox_id}") == 0) {
        json_t *copy = json_copy((json_t *)st->parsed);
        json_object_set_new(copy, "sandbox_uid", json_integer(o->sandbox_uid));
        json_object_set_new(copy, "profile", json_string(o->profile_id));
        json_object_set_new(copy, "worker_epoch", json_string(o->worker_epoch));
        char *text = json_dumps(copy, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(copy);
        return text;
    }
    /* A tenant's template call: the owner acts for that tenant (its
     * templates are private to it), which the operator's token it is sent
     * with does not say. */
    if (st->principal.kind == SL_PRINCIPAL_TENANT && strstr(st->route->pattern, "/templates")) {
        json_t *copy = json_copy((json_t *)st->parsed);
        json_object_set_new(copy, SL_FORWARD_TENANT_FIELD, json_string(st->principal.tenant_id));
        char *text = json_dumps(copy, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(copy);
        return text;
    }
    return json_dumps(st->parsed, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* The service said the sandbox is a live peer's: send the request there
 * and relay its answer (run_forward answers). A request that already came
 * through the worker protocol is not sent on: it was addressed to this
 * worker, which no longer holds the sandbox. */
static const char *path_param(const struct conn_state *st, const char *name);

/* A decoded path ("/sandboxes/x/exec/a?b") escaped again segment by
 * segment, so what the owner decodes is what this replica decoded.
 * malloc'd, NULL on failure. */
static char *escape_path(const char *path)
{
    struct sl_buf b;
    sl_buf_init(&b, strlen(path) * 3 + 2);
    bool ok = true;
    for (const char *p = path; ok && *p;) {
        size_t n = strcspn(p, "/");
        if (n) {
            char *seg = curl_easy_escape(NULL, p, (int)n);
            ok = seg && sl_buf_append(&b, seg, strlen(seg)) == 0;
            curl_free(seg);
            p += n;
        }
        if (ok && *p == '/') {
            ok = sl_buf_append(&b, "/", 1) == 0;
            p++;
        }
    }
    if (!ok || sl_buf_append(&b, "", 1) < 0) {
        sl_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* The owner's URL for this request: its endpoint (without a trailing
 * '/'), then prefix, the path escaped, and the query as it came. NULL out
 * of memory. */
static char *owner_url(struct conn_state *st, const struct sl_error_owner *o, const char *prefix,
                       const char *path)
{
    struct query_buf q;
    sl_buf_init(&q.b, 64 * 1024);
    q.failed = false;
    MHD_get_connection_values(st->conn, MHD_GET_ARGUMENT_KIND, add_query, &q);
    size_t elen = strlen(o->endpoint);
    while (elen && o->endpoint[elen - 1] == '/')
        elen--;
    _cleanup_free_ char *escaped = escape_path(path);
    char *url = NULL;
    if (!q.failed && escaped &&
        asprintf(&url, "%.*s%s%s%s%.*s", (int)elen, o->endpoint, prefix, escaped,
                 q.b.len ? "?" : "", (int)q.b.len, q.b.data ? q.b.data : "") < 0)
        url = NULL;
    sl_buf_free(&q.b);
    return url;
}

static void start_forward(struct conn_state *st, struct sl_response *resp)
{
    const struct sl_error_owner *o = &resp->owner;
    if (st->route->internal) {
        free(resp->body);
        answer_error(st, SL_E_STALE_ROUTE,
                     "the sandbox is held by another worker than the one this request was "
                     "sent to");
        return;
    }
    /* Only a route of one sandbox has an owner to forward to. Resolve meets
     * one when it wakes a sandbox whose owner is another live replica: its
     * own path means nothing there, so the client is told what to call. */
    if (!path_param(st, "sandbox_id")) {
        free(resp->body);
        answer_error(st, SL_E_WORKER_UNREACHABLE,
                     "the sandbox is suspended on another worker: resume it first (POST "
                     "/api/v1/sandboxes/{sandbox_id}/resume), then resolve it");
        return;
    }
    struct forward_job *job = calloc(1, sizeof(*job));
    const char *rest = strncmp(st->path, "/api/v1/", 8) == 0 ? st->path + 7 : st->path;
    if (job)
        job->url = owner_url(st, o, "/internal/v1", rest);
    if (!job || !job->url) {
        if (job)
            forward_job_free(job);
        free(resp->body);
        answer_error(st, SL_E_INTERNAL, "internal error");
        return;
    }
    job->st = st;
    job->body = forward_body(st, o);
    snprintf(job->worker_id, sizeof(job->worker_id), "%s", o->worker_id);
    snprintf(job->sandbox_id, sizeof(job->sandbox_id), "%s", st->nparams ? st->params[0] : "");
    job->generation = o->generation;
    job->rq = (struct sl_forward_request){
        .method = st->method,
        .url = job->url,
        .auth = st->http->expected_auth,
        .worker_id = job->worker_id,
        .generation = o->generation,
        .body = job->body,
        .body_len = job->body ? strlen(job->body) : 0,
        .timeout_ms = forward_timeout_ms(st),
    };
    /* An event stream (ours) is relayed as it comes, not collected: it
     * lasts as long as its command. It holds a forward thread meanwhile. */
    bool events = strcmp(st->route->op_id, "streamExecution") == 0 ||
                  strcmp(st->route->op_id, "watchFiles") == 0 ||
                  (strcmp(st->route->op_id, "execCommand") == 0 &&
                   json_is_true(json_object_get(st->parsed, "stream")));
    if (events && !(job->relay = sl_relay_new()) && errno == EBUSY) {
        forward_job_free(job);
        free(resp->body);
        resp->body = NULL;
        answer_error(st, SL_E_STREAM_LIMIT,
                     "this replica already relays as many streams as it may: open the stream "
                     "on the worker that holds the sandbox (its route names it)");
        return;
    }
    if (events && job->relay) {
        job->rq.stream = relay_out;
        job->rq.stream_ctx = job;
        job->rq.keep_going = relay_open;
        const char *last =
            MHD_lookup_connection_value(st->conn, MHD_HEADER_KIND, "Last-Event-ID");
        if (last && *last) {
            snprintf(job->last_event_id, sizeof(job->last_event_id), "%s", last);
            job->rq.last_event_id = job->last_event_id;
        }
    }
    free(resp->body);
    resp->body = NULL;
    if (sl_pool_submit(st->http->forwards, run_forward, job) < 0) {
        if (job->relay)
            sl_relay_end(job->relay, true);
        forward_job_free(job);
        answer_error(st, SL_E_OVERLOADED, "the server is overloaded; retry shortly");
    }
}

/* What of an owner's answer to a raw relay streams through as it comes:
 * envd's Connect server-streams, the interpreter's NDJSON, an event
 * stream; anything else is collected and answered whole. */
static const char *const raw_stream_types[] = {SL_CONNECT_STREAM_TYPE, "application/x-ndjson",
                                               "text/event-stream", NULL};

/* An E2B request for a sandbox a live peer holds: sent there as it came
 * (api/forward.h's raw relay), its answer relayed (run_forward answers). */
static void start_raw_forward(struct conn_state *st, const struct sl_error_owner *o)
{
    struct forward_job *job = calloc(1, sizeof(*job));
    if (job) {
        job->url = owner_url(st, o, "", st->sent_url ? st->sent_url : st->path);
        job->headers = sl_forward_client_headers(st->conn);
    }
    if (!job || !job->url || !job->headers) {
        if (job)
            forward_job_free(job);
        struct sl_response resp = {0};
        sl_e2b_respond_error(&resp, 500, "internal error");
        answer(st, &resp);
        return;
    }
    job->st = st;
    /* The body is the request's bytes as they came; st no longer needs
     * them, and the transfer may outlive st (a stream answered early). */
    size_t body_len = st->body.len;
    job->body = st->body.data;
    st->body.data = NULL;
    st->body.len = st->body.cap = 0;
    snprintf(job->worker_id, sizeof(job->worker_id), "%s", o->worker_id);
    snprintf(job->sandbox_id, sizeof(job->sandbox_id), "%s", path_param(st, "sandbox_id"));
    job->generation = o->generation;
    job->rq = (struct sl_forward_request){
        .method = st->method,
        .url = job->url,
        .headers = job->headers,
        .worker_id = job->worker_id,
        .generation = o->generation,
        .body = job->body,
        .body_len = job->body ? body_len : 0,
        .timeout_ms = 60000,
        /* Any answer may be a stream: only silence ends the wait. */
        .stream = relay_out,
        .stream_types = raw_stream_types,
        .stream_ctx = job,
        .keep_going = relay_open,
    };
    if (sl_pool_submit(st->http->forwards, run_forward, job) < 0) {
        forward_job_free(job);
        struct sl_response resp = {0};
        sl_e2b_respond_error(&resp, 503, "the server is overloaded; retry shortly");
        answer(st, &resp);
    }
}

/* E2B's requests name their sandbox and speak another protocol than the
 * worker protocol: one that reaches a replica not holding its sandbox
 * (the owner decision of the native routes, through the same owner cache)
 * goes to the owner as it came. True when it was sent there (st is not
 * ours any more). A request a replica sent on already is served here,
 * whatever this worker holds: never forwarded twice. */
static bool e2b_to_owner(struct conn_state *st)
{
    const char *id = st->route->credential != SL_CRED_BEARER ? path_param(st, "sandbox_id")
                                                             : NULL;
    if (!id || MHD_lookup_connection_value(st->conn, MHD_HEADER_KIND, SL_FORWARD_WORKER_HEADER))
        return false;
    struct sl_error err = {0};
    if (sl_svc_sandbox_owner(st->http->svc, id, &err) == 0)
        return false;
    start_raw_forward(st, &err.owner);
    return true;
}

/* /internal/v1 (§9.1): addressed to this worker, before anything else. */
static bool internal_fence(struct conn_state *st)
{
    const char *worker = MHD_lookup_connection_value(st->conn, MHD_HEADER_KIND,
                                                     "X-Sandbox-Worker-ID");
    if (!worker || strcmp(worker, sl_svc_worker_id(st->http->svc)) != 0) {
        answer_error(st, SL_E_STALE_ROUTE,
                     "this request was addressed to another worker (X-Sandbox-Worker-ID)");
        return false;
    }
    if (st->route->internal_generation &&
        !MHD_lookup_connection_value(st->conn, MHD_HEADER_KIND, "X-Sandbox-Generation")) {
        answer_error(st, SL_E_STALE_ROUTE, "X-Sandbox-Generation is required on this route");
        return false;
    }
    return true;
}

struct sl_deferred *sl_request_defer(struct sl_request *req)
{
    req->deferred = true;
    return (struct sl_deferred *)req->http_state;
}

void sl_deferred_respond(struct sl_deferred *d, struct sl_response *resp)
{
    struct conn_state *st = (struct conn_state *)d;
    if (resp->forward) {
        start_forward(st, resp);
        return;
    }
    if (!resp->body && resp->status == 500) {
        answer_error(st, SL_E_INTERNAL, "internal error");
        return;
    }
    answer(st, resp);
}

/* A known field the unknown one was probably meant to be: one that starts
 * with it or that it starts with ("timeout" for "timeout_seconds"). */
static const char *likely_field(const json_t *known, const char *name)
{
    const char *k;
    const json_t *unused;
    size_t n = strlen(name);
    json_object_foreach((json_t *)known, k, unused)
    {
        size_t kn = strlen(k);
        if (n >= 3 && kn >= 3 && strncmp(k, name, n < kn ? n : kn) == 0)
            return k;
    }
    return NULL;
}

/* Body fields the route's request schema does not define are ignored, as
 * the reference does, and named in the answer's warnings (never their
 * values), so "timeout": 5 does not silently run with the default. */
static void note_unknown_fields(struct conn_state *st, const json_t *body)
{
    const json_t *known =
        st->route->request_schema ? sl_openapi_request_fields(st->route->request_schema) : NULL;
    if (!known || !body)
        return;
    const char *name;
    const json_t *unused;
    json_object_foreach((json_t *)body, name, unused)
    {
        if (json_object_get(known, name))
            continue;
        if (st->warnings && json_array_size(st->warnings) >= 20)
            return;
        /* At most 64 bytes of the name, cut at a character boundary (a
         * cut inside one would make the text invalid UTF-8). */
        int n = (int)strlen(name);
        if (n > 64)
            for (n = 64; n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80; n--)
                ;
        char text[256];
        const char *like = likely_field(known, name);
        if (like)
            snprintf(text, sizeof(text), "unknown field '%.*s' was ignored (did you mean '%s'?)",
                     n, name, like);
        else
            snprintf(text, sizeof(text), "unknown field '%.*s' was ignored", n, name);
        json_t *warning = json_string(text);
        if (!warning || (!st->warnings && !(st->warnings = json_array()))) {
            json_decref(warning);
            return;
        }
        json_array_append_new(st->warnings, warning);
    }
}

static void run_handler(void *arg)
{
    struct conn_state *st = arg;
    if (!tenant_namespace(st)) {
        answer_error(st, SL_E_SANDBOX_NOT_FOUND, NULL);
        return;
    }
    /* GET /internal/v1/health is the protocol's one route with no fence. */
    if (st->route->internal && strcmp(st->route->pattern, "/internal/v1/health") != 0 &&
        !internal_fence(st))
        return;
    if (e2b_to_owner(st))
        return;
    /* NUL inside strings is accepted by the parser so that validation can
     * refuse it per field (and the file API with its own message). */
    _cleanup_json_ json_t *body = NULL;
    if (st->route->body) {
        const char *why = NULL;
        json_error_t jerr;
        if (st->body.len == 0)
            why = "needs a JSON object body";
        else if (sl_json_too_many_containers(st->body.data, st->body.len,
                                             SL_HTTP_MAX_JSON_CONTAINERS))
            why = "body nests too many objects and arrays";
        else if (!(body = json_loadb(st->body.data, st->body.len, JSON_ALLOW_NUL, &jerr)))
            why = "body is not valid JSON";
        else if (!json_is_object(body))
            why = "body must be a JSON object";
        sl_buf_free(&st->body); /* the request's bytes are not needed past parsing */
        if (why) {
            answer_invalid_body(st, why);
            return;
        }
    }
    note_unknown_fields(st, body);
    const char *exec_id = json_string_value(json_object_get(body, "exec_id"));
    if (exec_id)
        snprintf(st->exec_id, sizeof(st->exec_id), "%s", exec_id);
    struct sl_request req = {
        .svc = st->http->svc,
        .conn = st->conn,
        .method = st->method,
        .nparams = st->nparams,
        .body = body,
        .raw_body = st->route->body ? NULL : st->body.data,
        .raw_len = st->route->body ? 0 : st->body.len,
        .http_state = st,
        .principal = &st->principal,
        .internal = st->route->internal,
    };
    memcpy(req.params, st->params, sizeof(req.params));
    struct sl_response resp = {.status = 500, .content_type = "application/json"};
    st->parsed = body;
    st->route->handler(&req, &resp);
    if (req.deferred) {
        /* The handler promised an answer later (sl_deferred_respond), which
         * may already have been sent: st is not ours to touch any more. */
        free(resp.body);
        return;
    }
    if (resp.forward) {
        /* start_forward hands st away (whoever answers may free it at
         * once): nothing of st is touched after it. */
        start_forward(st, &resp);
        return;
    }
    st->parsed = NULL;
    if (!resp.body && resp.status == 500) {
        answer_error(st, SL_E_INTERNAL, "internal error");
        return;
    }
    answer(st, &resp);
}

static bool ambiguous_length(struct MHD_Connection *conn);

static void *penalty_main(void *arg)
{
    struct sl_http *http = arg;
    struct penalty_queue *q = &http->penalty;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        struct conn_state *st = q->head;
        if (!st) {
            if (q->stopping)
                break;
            pthread_cond_wait(&q->cond, &q->lock);
            continue;
        }
        int64_t now = sl_mono_us();
        if (st->due_us > now && !q->stopping) {
            struct timespec until = {.tv_sec = st->due_us / 1000000,
                                     .tv_nsec = (st->due_us % 1000000) * 1000};
            pthread_cond_timedwait(&q->cond, &q->lock, &until);
            continue;
        }
        q->head = st->penalty_next;
        if (!q->head)
            q->tail = NULL;
        q->n--;
        pthread_mutex_unlock(&q->lock);
        st->phase = PH_READY; /* resp was set when it was queued */
        MHD_resume_connection(st->conn);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* The 401 of a request without the right token. Counted (auth_guard.h);
 * a peer that keeps failing gets it late, from a suspended connection. */
static enum MHD_Result refuse_unauthorized(struct conn_state *st, struct MHD_Connection *conn,
                                           const char *url)
{
    struct sl_http *http = st->http;
    st->phase = PH_DONE;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    struct sl_auth_verdict v;
    sl_auth_guard_fail(http->auth_guard, ci ? ci->client_addr : NULL, sl_mono_us(), &v);
    if (v.log)
        sl_warn("auth: %llu failed authentication%s since the last report, the last from %s "
                "(the token is never logged; a peer failing more than "
                "SANDBOX_AUTH_FAILURES_PER_MINUTE times a minute is answered after %d ms)",
                (unsigned long long)v.failures, v.failures == 1 ? "" : "s", v.peer,
                SL_AUTH_PENALTY_MS);
    /* The MCP endpoint keeps the reference's own 401 body (MCP.md §1.1,
     * key "error"); every other path the one error shape. */
    bool mcp = strcmp(url, SL_MCP_PATH) == 0;
    if (v.delay_ms <= 0) {
        if (mcp)
            return queue_mcp_unauthorized(st, conn);
        return queue_error(st, conn, SL_E_UNAUTHORIZED, "internal service authentication failed",
                           NULL);
    }
    struct penalty_queue *q = &http->penalty;
    st->resp = (struct sl_response){.status = 401, .content_type = "application/json"};
    st->resp.body = mcp ? strdup(SL_MCP_UNAUTHORIZED_BODY)
                        : sl_api_error_body(SL_E_UNAUTHORIZED,
                                            "internal service authentication failed", NULL);
    st->resp.len = st->resp.body ? strlen(st->resp.body) : 0;
    st->conn = conn;
    st->due_us = sl_mono_us() + (int64_t)v.delay_ms * 1000;
    pthread_mutex_lock(&q->lock);
    bool full = q->n >= PENALTY_QUEUE_MAX || q->stopping;
    if (!full) {
        st->phase = PH_DISPATCHED;
        st->penalty_next = NULL;
        if (q->tail)
            q->tail->penalty_next = st;
        else
            q->head = st;
        q->tail = st;
        q->n++;
        MHD_suspend_connection(conn);
        pthread_cond_signal(&q->cond);
    }
    pthread_mutex_unlock(&q->lock);
    if (full) {
        /* Too many guesses waiting already: this one gets no answer. */
        free(st->resp.body);
        st->resp.body = NULL;
        return MHD_NO;
    }
    return MHD_YES;
}

/* A handler thread's check of a key the cache could not vouch for; the
 * connection is resumed with the outcome (or answered: the store failed). */
static void run_key_check(void *arg)
{
    struct conn_state *st = arg;
    struct sl_error err = {0};
    int r = sl_svc_key_check(st->http->svc, st->key_id, st->key_secret, true, &st->principal,
                             &err);
    explicit_bzero(st->key_secret, sizeof(st->key_secret));
    if (r < 0) {
        answer_error(st, err.code, err.message);
        return;
    }
    st->phase = r == SL_KEY_ACCEPTED ? PH_KEY_ACCEPTED : PH_KEY_REFUSED;
    MHD_resume_connection(st->conn);
}

static bool peer_throttled(struct sl_http *http, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return sl_auth_guard_throttled(http->auth_guard, ci ? ci->client_addr : NULL, sl_mono_us());
}

/* The first call's checks once the caller is known: the route exists, takes
 * this method and this caller (a tenant key only where the route keeps to
 * the tenant's own: 403 before any body is read), and its body cap admits
 * the declared length. */
static enum MHD_Result after_auth(struct conn_state *st, struct MHD_Connection *conn)
{
    if (st->match == SL_MATCH_NONE) {
        st->phase = PH_DONE;
        return queue_error(st, conn, SL_E_NOT_FOUND, "no route matches this path", NULL);
    }
    if (st->match == SL_MATCH_METHOD) {
        st->phase = PH_DONE;
        return queue_error(st, conn, SL_E_METHOD_NOT_ALLOWED,
                           "this path does not accept this method", st->allow);
    }
    if (st->principal.kind == SL_PRINCIPAL_TENANT && !st->route->tenant) {
        st->phase = PH_DONE;
        return queue_error(st, conn, SL_E_TENANT_FORBIDDEN, NULL, NULL);
    }
    sl_buf_init(&st->body, route_max_body(st->route));
    if (content_length_too_large(conn, route_max_body(st->route))) {
        st->phase = PH_DONE;
        return queue_error(st, conn, SL_E_TOO_LARGE, "request body exceeds the size limit", NULL);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct sl_http *http = cls;
    (void)version;
    struct conn_state *st = *con_cls;

    if (!st) {
        const union MHD_ConnectionInfo *sc =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (sc && sc->socket_context)
            sl_conn_guard_request_begin(http->conn_guard, sc->socket_context);
        st = calloc(1, sizeof(*st));
        if (!st)
            return MHD_NO;
        *con_cls = st;
        st->http = http;
        st->start_us = sl_mono_us();
        snprintf(st->method, sizeof(st->method), "%s", method);
        /* The ports route's host-based form: "<port>-<id>.<domain>/x" is
         * that sandbox's port, as /api/v1/sandboxes/<id>/ports/<port>/x. */
        char *by_host = NULL;
        if (http->cfg->ports_domain && http->cfg->ports_domain[0])
            by_host = sl_port_host_path(
                http->cfg->ports_domain,
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST), url);
        /* E2B's sandbox requests (envd, the interpreter): by their
         * headers, or the host form under SANDBOX_E2B_DOMAIN. */
        char *e2b = by_host ? NULL
                            : sl_e2b_rewrite(
                                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              "E2b-Sandbox-Id"),
                                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              "E2b-Sandbox-Port"),
                                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              MHD_HTTP_HEADER_HOST),
                                  http->cfg->e2b_domain,
                                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              "X-Access-Token"),
                                  url);
        if (e2b) {
            free(by_host);
            by_host = e2b;
            if (!(st->sent_url = strdup(url)))
                return MHD_NO;
        }
        if (by_host)
            url = by_host;
        st->pathbuf = strdup(url);
        st->path = strdup(url);
        free(by_host);
        url = st->path;
        if (!st->pathbuf || !st->path)
            return MHD_NO;
        /* Request smuggling: two Content-Length headers (libmicrohttpd
         * takes the first), or one beside Transfer-Encoding, mean two
         * parties may read two different requests here. */
        if (ambiguous_length(conn)) {
            st->phase = PH_DONE;
            return queue_error(st, conn, SL_E_INVALID_ARGUMENT,
                               "ambiguous request length: repeated Content-Length, or "
                               "Content-Length with Transfer-Encoding",
                               NULL);
        }
        st->match = sl_router_match(method, st->pathbuf, &st->route, st->params, &st->nparams,
                                    st->allow, sizeof(st->allow));
        bool needs_auth =
            st->match == SL_MATCH_OK ? st->route->auth : sl_router_path_protected(url);
        /* Authentication comes first: an unauthenticated client learns
         * nothing about which paths exist and no body is parsed for it. */
        if (needs_auth) {
            enum auth_outcome auth = authenticate(st, conn);
            if (auth == AUTH_REFUSED)
                return refuse_unauthorized(st, conn, url);
            if (auth == AUTH_NEEDS_STORE && peer_throttled(http, conn)) {
                /* A peer that keeps failing gets no store lookup: only its
                 * (delayed) 401. Its keys, real or not, wait for the window. */
                explicit_bzero(st->key_secret, sizeof(st->key_secret));
                return refuse_unauthorized(st, conn, url);
            }
            if (auth == AUTH_NEEDS_STORE) {
                st->phase = PH_CHECKING_KEY;
                st->conn = conn;
                MHD_suspend_connection(conn);
                if (sl_pool_submit(http->key_checks, run_key_check, st) < 0) {
                    explicit_bzero(st->key_secret, sizeof(st->key_secret));
                    answer_error(st, SL_E_OVERLOADED, "the server is overloaded; retry shortly");
                }
                return MHD_YES;
            }
        }
        return after_auth(st, conn);
    }

    /* Resumed after a key check: what the first call would have done. */
    if (st->phase == PH_KEY_REFUSED)
        return refuse_unauthorized(st, conn, url);
    if (st->phase == PH_KEY_ACCEPTED) {
        st->phase = PH_RECEIVING;
        enum MHD_Result r = after_auth(st, conn);
        if (r != MHD_YES || st->phase != PH_RECEIVING || *upload_data_size == 0)
            return r;
        /* The body's first bytes came with this call: take them below. */
    }

    if (st->phase == PH_DONE) {
        *upload_data_size = 0; /* discard whatever the client still sends */
        return MHD_YES;
    }
    if (*upload_data_size > 0 && st->phase == PH_RECEIVING) {
        /* A chunked body that grows past the cap is discarded as it arrives
         * (memory stays bounded) and answered 413 once the client has sent
         * it: answering mid-upload makes most clients see a reset, not 413. */
        if (!st->too_large && sl_buf_append(&st->body, upload_data, *upload_data_size) < 0) {
            st->too_large = true;
            sl_buf_free(&st->body);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }

    if (st->phase != PH_RECEIVING) {
        /* Resumed with the answer (MHD calls once more after a resume). */
        if (st->phase != PH_READY)
            return MHD_YES;
        st->phase = PH_DONE;
        return queue(st, conn, &st->resp);
    }

    /* The whole body is here. */
    if (st->too_large) {
        st->phase = PH_DONE;
        return queue_error(st, conn, SL_E_TOO_LARGE, "request body exceeds the size limit", NULL);
    }
    /* The handler may block (a transaction, a sandbox build, a file write):
     * it runs on the handler pool while this connection is suspended, so
     * MHD's threads only ever move bytes. */
    st->phase = PH_DISPATCHED;
    st->conn = conn;
    MHD_suspend_connection(conn);
    if (sl_route_runs_inline(st->route)) {
        run_handler(st);
        return MHD_YES;
    }
    if (sl_pool_submit(http->handlers, run_handler, st) < 0) {
        /* Queue full: answer at once rather than queue without bound. */
        answer_error(st, SL_E_OVERLOADED, "the server is overloaded; retry shortly");
    }
    return MHD_YES;
}

/* The id a route pattern's parameter `name` took in this request, or NULL. */
static const char *path_param(const struct conn_state *st, const char *name)
{
    if (!st->route)
        return NULL;
    size_t i = 0;
    for (const char *p = st->route->pattern; (p = strchr(p, '{')) && i < st->nparams; i++) {
        const char *end = strchr(p, '}');
        if (!end)
            break;
        if ((size_t)(end - p - 1) == strlen(name) && strncmp(p + 1, name, strlen(name)) == 0)
            return st->params[i];
        p = end;
    }
    return NULL;
}

/* One line per request (SANDBOX_LOG_LEVEL info; GET /health at debug):
 * method, route pattern (never the raw path, which may hold a query),
 * status, duration, the sandbox and exec ids, and for an error its code,
 * message and operator detail. Never a token, a header or a body. */
static void log_access(const struct conn_state *st, enum MHD_RequestTerminationCode toe)
{
    bool health = st->route && strcmp(st->route->pattern, "/health") == 0;
    enum sl_log_level level = st->status >= 500 ? SL_LOG_WARN
                              : health          ? SL_LOG_DEBUG
                                                : SL_LOG_INFO;
    if (!sl_log_enabled(level))
        return;
    const char *exec_id = st->exec_id[0] ? st->exec_id : path_param(st, "exec_id");
    bool tenant = st->principal.kind == SL_PRINCIPAL_TENANT;
    struct sl_log_field f[] = {
        SL_LF_STR("method", st->method),
        SL_LF_STR("route", st->route ? st->route->pattern : "(no route)"),
        st->status ? SL_LF_NUM("status", st->status) : SL_LF_STR("status", "none"),
        SL_LF_NUM("duration_ms", (sl_mono_us() - st->start_us) / 1000),
        SL_LF_STR("sandbox_id", path_param(st, "sandbox_id")),
        SL_LF_STR("exec_id", exec_id),
        /* A tenant's requests name it and the key (its id, never the key). */
        SL_LF_STR("tenant", tenant ? st->principal.tenant_id : NULL),
        SL_LF_STR("key_id", tenant ? st->principal.key_id : NULL),
        SL_LF_STR("code", st->code[0] ? st->code : NULL),
        SL_LF_STR("message", st->message[0] ? st->message : NULL),
        SL_LF_STR("detail", st->log_detail[0] ? st->log_detail : NULL),
        SL_LF_STR("ended", toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? NULL
                                                                      : "client went away"),
    };
    sl_log_event(level, "access", f, sizeof(f) / sizeof(f[0]));
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct sl_http *http = cls;
    const union MHD_ConnectionInfo *sc =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (sc && sc->socket_context)
        sl_conn_guard_request_end(http->conn_guard, sc->socket_context);
    struct conn_state *st = *con_cls;
    if (!st)
        return;
    log_access(st, toe);
    /* MHD does not complete a suspended connection, so no job still holds
     * the state here. */
    conn_state_free(st);
    *con_cls = NULL;
}

/* libmicrohttpd's own messages ("connection limit reached", a client that
 * went away...): at most LOG_BURST lines per LOG_WINDOW_US, then one line
 * saying how many were left out, so a flood of bad connections cannot
 * flood the log (one wave of an attack wrote 12,000 lines). */
#define LOG_BURST 20
#define LOG_WINDOW_US (10 * 1000000LL)

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct sl_http *http = cls;
    int64_t now = sl_mono_us();
    long long suppressed = 0;
    pthread_mutex_lock(&http->log_lock);
    if (now - http->log_window_us >= LOG_WINDOW_US) {
        suppressed = http->log_suppressed;
        http->log_window_us = now;
        http->log_lines = 0;
        http->log_suppressed = 0;
    }
    bool keep = http->log_lines < LOG_BURST;
    if (keep)
        http->log_lines++;
    else
        http->log_suppressed++;
    pthread_mutex_unlock(&http->log_lock);
    if (suppressed)
        sl_warn("http: %lld more libmicrohttpd messages left out in the last %lld s", suppressed,
                (long long)(LOG_WINDOW_US / 1000000));
    if (!keep)
        return;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    sl_warn("http: %s", line);
}

/* Accepted and closed connections: the budget and header timeout of
 * api/conn_guard.h. The tracker lives in MHD's socket context. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct sl_http *http = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        bool refused = false;
        *socket_context = ci ? sl_conn_guard_open(http->conn_guard, ci->connect_fd, &refused)
                             : NULL;
        return;
    }
    sl_conn_guard_close(http->conn_guard, *socket_context);
    *socket_context = NULL;
}

struct header_count {
    int content_length, transfer_encoding;
};

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    struct header_count *c = cls;
    (void)kind;
    (void)value;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        c->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        c->transfer_encoding++;
    return MHD_YES;
}

static bool ambiguous_length(struct MHD_Connection *conn)
{
    struct header_count c = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &c);
    return c.content_length > 1 || (c.content_length && c.transfer_encoding);
}

/* Answers every delayed 401 at once and joins the thread. */
static void penalty_stop(struct sl_http *http)
{
    struct penalty_queue *q = &http->penalty;
    if (q->started) {
        pthread_mutex_lock(&q->lock);
        q->stopping = true;
        pthread_cond_signal(&q->cond);
        pthread_mutex_unlock(&q->lock);
        pthread_join(q->thread, NULL);
        q->started = false;
    }
}

/* After the MHD threads are gone: nothing can fail authentication now. */
static void penalty_free(struct sl_http *http)
{
    penalty_stop(http);
    pthread_cond_destroy(&http->penalty.cond);
    pthread_mutex_destroy(&http->penalty.lock);
    sl_auth_guard_free(http->auth_guard);
    http->auth_guard = NULL;
}

/* Connections allowed at once: a quarter of the descriptors this process
 * may open (each running command needs about four more), within bounds. */
static unsigned connection_limit(void)
{
    struct rlimit rl;
    rlim_t n = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur / 4 : 256;
    if (n < 64)
        n = 64;
    if (n > SL_HTTP_MAX_CONNECTIONS)
        n = SL_HTTP_MAX_CONNECTIONS;
    return (unsigned)n;
}

struct sl_http *sl_http_start(const struct sl_config *cfg, struct sl_service *svc,
                              struct sl_error *err)
{
    struct sl_http *http = calloc(1, sizeof(*http));
    if (!http) {
        sl_error_set(err, SL_E_INTERNAL, 0, "out of memory");
        return NULL;
    }
    http->svc = svc;
    if (asprintf(&http->expected_auth, "Bearer %s", cfg->internal_token) < 0) {
        free(http);
        sl_error_set(err, SL_E_INTERNAL, 0, "out of memory");
        return NULL;
    }
    http->expected_len = strlen(http->expected_auth);
    http->auth_guard = sl_auth_guard_new(cfg->auth_failures_per_minute);
    pthread_mutex_init(&http->penalty.lock, NULL);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&http->penalty.cond, &cattr);
    pthread_condattr_destroy(&cattr);
    if (!http->auth_guard ||
        pthread_create(&http->penalty.thread, NULL, penalty_main, http) != 0) {
        sl_auth_guard_free(http->auth_guard);
        free(http->expected_auth);
        free(http);
        sl_error_set(err, SL_E_INTERNAL, 0, "cannot start the authentication guard");
        return NULL;
    }
    http->penalty.started = true;
    pthread_mutex_init(&http->log_lock, NULL);
    unsigned limit = connection_limit();
    struct sl_conn_guard_limits guard = {
        .sandbox_uid_first = (uid_t)cfg->uid_start,
        .sandbox_uid_last = (uid_t)cfg->uid_end,
        .per_sandbox = (int)cfg->max_connections_per_sandbox,
        .sandboxes_total = (int)(limit / 2),
        .header_timeout_us = cfg->http_header_timeout_seconds * 1000000,
    };
    http->conn_guard = sl_conn_guard_new(&guard);
    if (!http->conn_guard) {
        penalty_free(http);
        pthread_mutex_destroy(&http->log_lock);
        free(http->expected_auth);
        free(http);
        sl_error_set(err, SL_E_INTERNAL, 0, "cannot start the connection guard");
        return NULL;
    }

    char port[16];
    snprintf(port, sizeof(port), "%d", cfg->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_HOST: cannot resolve the bind address");
        penalty_free(http);
        sl_conn_guard_free(http->conn_guard);
        pthread_mutex_destroy(&http->log_lock);
        free(http->expected_auth);
        free(http);
        return NULL;
    }
    http->cfg = cfg;
    http->handlers = sl_pool_new("sl-handler", SL_HTTP_HANDLER_THREADS, SL_HTTP_MAX_QUEUED);
    /* A forward waits for its owner (a command may run for minutes): on a
     * pool of its own, so forwards never hold the handler threads. */
    http->forwards = http->handlers ? sl_pool_new_lazy("sl-forward", SL_HTTP_FORWARD_THREADS,
                                                       SL_HTTP_MAX_QUEUED)
                                    : NULL;
    http->key_checks = http->forwards ? sl_pool_new_lazy("sl-keycheck", SL_HTTP_KEY_CHECK_THREADS,
                                                         SL_HTTP_KEY_CHECKS_QUEUED)
                                      : NULL;
    if (!http->key_checks) {
        sl_pool_free(http->forwards);
        sl_pool_free(http->handlers);
        http->handlers = NULL;
    }
    if (!http->handlers) {
        freeaddrinfo(ai);
        sl_error_set(err, SL_E_INTERNAL, 0, "cannot start the request handler threads");
        penalty_free(http);
        sl_conn_guard_free(http->conn_guard);
        pthread_mutex_destroy(&http->log_lock);
        free(http->expected_auth);
        free(http);
        return NULL;
    }
    /* MHD's own threads only move bytes (epoll, one event loop per thread);
     * handlers run on the pool; a request waiting for its command is a
     * suspended connection, not a thread. */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE |
                     MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    http->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, http, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, http, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, http, MHD_OPTION_NOTIFY_CONNECTION, on_connection, http,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)SL_HTTP_IO_THREADS,
        MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        /* Bounded: a client that sends 200 KB of headers and waits held
         * 200 KB here with a 256 KiB buffer (http.h). */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SL_HTTP_CONNECTION_MEMORY, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (http->daemon && (sl_exec_streams_start(cfg, err) < 0 || sl_fs_watches_start(cfg, err) < 0 ||
                         sl_terminals_ws_start(cfg, err) < 0 || sl_ports_start(cfg, err) < 0)) {
        sl_http_stop(http);
        return NULL;
    }
    if (!http->daemon) {
        sl_error_set(err, SL_E_CONFIG, 0, "cannot listen on %s:%d (in use or not permitted)",
                     cfg->host, cfg->port);
        sl_pool_free(http->key_checks);
        sl_pool_free(http->handlers);
        sl_pool_free(http->forwards);
        penalty_free(http);
        sl_conn_guard_free(http->conn_guard);
        pthread_mutex_destroy(&http->log_lock);
        free(http->expected_auth);
        free(http);
        return NULL;
    }
    return http;
}

void sl_http_stop(struct sl_http *http)
{
    if (!http)
        return;
    /* Handlers still queued run (their answers may then be dropped); a
     * deferred answer must have been given before this (the service
     * finishes every command first), since MHD frees the connections. */
    MHD_quiesce_daemon(http->daemon);
    penalty_stop(http); /* answers the delayed 401s now: MHD frees suspended connections */
    /* Key checks first: a connection they resume may still dispatch to the
     * handler pool, which must be alive then. */
    sl_pool_free(http->key_checks);
    sl_pool_free(http->handlers);
    /* Relayed streams last as long as their commands: their clients are
     * let go, so the forward threads end within a second. */
    sl_relays_close_all();
    sl_pool_free(http->forwards);
    /* Its keepalives resume suspended connections: not once MHD frees them.
     * Every other stream's wake came with its command's end (the service
     * finished them all before this). */
    sl_exec_streams_stop();
    sl_fs_watches_stop();
    /* Upgraded connections are ours to close: before the daemon stops. */
    sl_terminals_ws_stop();
    sl_ports_stop();
    MHD_stop_daemon(http->daemon);
    penalty_free(http);
    sl_conn_guard_free(http->conn_guard);
    pthread_mutex_destroy(&http->log_lock);
    free(http->expected_auth);
    free(http);
}
