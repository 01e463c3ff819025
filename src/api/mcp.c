/* The MCP endpoint's transport and protocol layer (spec MCP.md §1, §4).
 *
 * Every POST is handled on its own; nothing is remembered between requests
 * and no Mcp-Session-Id is ever issued. The MCP-Protocol-Version header
 * picks the rules:
 *   - 2026-07-28 (modern): no handshake; every request carries params._meta
 *     with the protocol version, mirrored in headers (MCP-Protocol-Version,
 *     Mcp-Method, Mcp-Name) that must match the body (HTTP 400, -32020);
 *     results carry "resultType":"complete"; `initialize` does not exist.
 *   - 2025-06-18 / 2025-11-25 (legacy): the initialize-based revisions,
 *     served statelessly: `initialize` (sent without the header) answers
 *     and the client then sends the header with every request; no _meta and
 *     no mirror headers are required.
 *   - any other value: HTTP 400, -32022 with the supported versions.
 * Answers are single JSON objects (no SSE). */
#include "api/mcp.h"

#include <ctype.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "config/config.h"
#include "service/service.h"

/* JSON-RPC 2.0 and MCP error codes. */
#define RPC_PARSE_ERROR -32700
#define RPC_INVALID_REQUEST -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS -32602
#define RPC_INTERNAL_ERROR -32603
#define RPC_HEADER_MISMATCH -32020
#define RPC_UNSUPPORTED_VERSION -32022

#define META_PROTOCOL_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
#define LEGACY_NEWEST "2025-11-25"
#define LEGACY_OLDER "2025-06-18"

/* No MCP request needs more than a few dozen objects/arrays; a body of
 * "[{},{},...]" within the 33 MiB cap would otherwise become millions of
 * jansson nodes before anything could refuse it. */
#define MAX_JSON_CONTAINERS 1024
/* How long a client may cache tools/list and server/discover (2026-07-28
 * caching hints): the tool set never changes while the process runs. */
#define CACHE_TTL_MS 300000

static const char INSTRUCTIONS[] =
    "Agent sandboxes behind a control plane. Always go through these tools, never reach a "
    "worker directly. Start with sandbox_resolve (sandbox_id + workspace_scope_id) and keep the "
    "generation it returns: pass it to sandbox_create and to every later call; a "
    "STALE_SANDBOX_ROUTE answer means resolve again and use the new generation. Run commands "
    "with sandbox_exec (argv, no shell; background=true plus sandbox_exec_status for long "
    "jobs), move files with sandbox_write_file / sandbox_read_file (base64). Before a long "
    "wait, sandbox_suspend the sandbox and wake it with sandbox_resume or sandbox_resolve. "
    "Always call sandbox_release in a finally step when the work is done.";

enum era { ERA_MODERN, ERA_LEGACY };

/* ---- request headers -------------------------------------------------------- */

struct mcp_headers {
    const char *host, *origin, *content_type, *version, *method, *name;
    size_t name_len;
    unsigned n_version, n_method, n_name;
    bool accept_json, accept_sse;
};

/* One Accept media range (parameters such as q= ignored). */
static void accept_range(struct mcp_headers *h, const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s))
        s++, n--;
    const char *semi = memchr(s, ';', n);
    if (semi)
        n = (size_t)(semi - s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
#define IS(lit) (n == sizeof(lit) - 1 && strncasecmp(s, lit, n) == 0)
    if (IS("application/json") || IS("application/*") || IS("*/*"))
        h->accept_json = true;
    if (IS("text/event-stream") || IS("text/*") || IS("*/*"))
        h->accept_sse = true;
#undef IS
}

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    (void)key_size;
    struct mcp_headers *h = cls;
    if (!key || !value)
        return MHD_YES;
    if (strcasecmp(key, "Host") == 0 && !h->host) {
        h->host = value;
    } else if (strcasecmp(key, "Origin") == 0) {
        h->origin = value;
    } else if (strcasecmp(key, "Content-Type") == 0 && !h->content_type) {
        h->content_type = value;
    } else if (strcasecmp(key, "Accept") == 0) {
        for (const char *p = value; p < value + value_size;) {
            const char *comma = memchr(p, ',', (size_t)(value + value_size - p));
            size_t n = comma ? (size_t)(comma - p) : (size_t)(value + value_size - p);
            accept_range(h, p, n);
            p += n + 1;
        }
    } else if (strcasecmp(key, "MCP-Protocol-Version") == 0) {
        if (h->n_version++ == 0)
            h->version = value;
    } else if (strcasecmp(key, "Mcp-Method") == 0) {
        if (h->n_method++ == 0)
            h->method = value;
    } else if (strcasecmp(key, "Mcp-Name") == 0) {
        if (h->n_name++ == 0) {
            h->name = value;
            h->name_len = value_size;
        }
    }
    return MHD_YES;
}

/* `name:*` allows any port of `name`; anything else must match exactly
 * (host names compare case-insensitively). */
static bool host_matches(const char *pattern, const char *host)
{
    size_t plen = strlen(pattern);
    if (plen >= 2 && strcmp(pattern + plen - 2, ":*") == 0) {
        size_t base = plen - 2;
        if (strncasecmp(host, pattern, base) != 0 || host[base] != ':' || !host[base + 1])
            return false;
        for (const char *p = host + base + 1; *p; p++)
            if (!isdigit((unsigned char)*p))
                return false;
        return true;
    }
    return strcasecmp(pattern, host) == 0;
}

/* DNS-rebinding protection (MCP.md §1.2): a page on another site can make
 * a browser send requests to this port under a name the attacker controls;
 * only names the operator listed (and our own advertised name) pass. */
static bool host_allowed(const struct sl_config *cfg, const char *host)
{
    if (!host || !*host)
        return false;
    for (size_t i = 0; i < cfg->mcp_allowed_hosts.len; i++)
        if (host_matches(cfg->mcp_allowed_hosts.items[i], host))
            return true;
    if (cfg->advertise_host && *cfg->advertise_host) {
        char with_port[300];
        snprintf(with_port, sizeof(with_port), "%s:%d", cfg->advertise_host, cfg->port);
        if (strcasecmp(host, cfg->advertise_host) == 0 || strcasecmp(host, with_port) == 0)
            return true;
    }
    return false;
}

static bool content_type_json(const char *ct)
{
    if (!ct)
        return false;
    while (isspace((unsigned char)*ct))
        ct++;
    size_t n = strcspn(ct, ";");
    while (n && isspace((unsigned char)ct[n - 1]))
        n--;
    return n == 16 && strncasecmp(ct, "application/json", 16) == 0;
}

static bool is_legacy_version(const char *v)
{
    return v && (strcmp(v, LEGACY_NEWEST) == 0 || strcmp(v, LEGACY_OLDER) == 0);
}


/* ---- answers ------------------------------------------------------------------ */

static void respond_doc(struct sl_response *resp, int status, json_t *doc)
{
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    resp->len = resp->body ? strlen(resp->body) : 0;
    json_decref(doc);
    if (!resp->body)
        resp->status = 500; /* out of memory: http.c answers the generic 500 */
}

/* The HTTP status of a JSON-RPC error. 2026-07-28 maps protocol errors to
 * statuses (400; 404 for an unknown method); the earlier revisions answer
 * handler errors inside a 200. Unparseable or malformed messages are 400 in
 * both. */
static int error_status(enum era era, int code)
{
    switch (code) {
    case RPC_PARSE_ERROR:
    case RPC_INVALID_REQUEST:
        return 400;
    case RPC_INTERNAL_ERROR:
        return 500;
    case RPC_INVALID_PARAMS:
    case RPC_HEADER_MISMATCH:
    case RPC_UNSUPPORTED_VERSION:
        return era == ERA_MODERN ? 400 : 200;
    case RPC_METHOD_NOT_FOUND:
        return era == ERA_MODERN ? 404 : 200;
    default:
        return 200;
    }
}

/* A JSON-RPC error answer; `id` is borrowed (NULL: null). `data` is stolen. */
static void respond_error_status(struct sl_response *resp, int status, const json_t *id, int code,
                                 const char *message, json_t *data)
{
    json_t *error = json_pack("{s:i,s:s}", "code", code, "message", message);
    if (error && data)
        json_object_set_new(error, "data", data);
    else
        json_decref(data);
    respond_doc(
        resp, status,
        json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", error));
}

static void respond_error(struct sl_response *resp, enum era era, const json_t *id, int code,
                          const char *message)
{
    respond_error_status(resp, error_status(era, code), id, code, message, NULL);
}

static json_t *supported_versions(void)
{
    return json_pack("[s,s,s]", SL_MCP_PROTOCOL_MODERN, LEGACY_NEWEST, LEGACY_OLDER);
}

static void respond_unsupported_version(struct sl_response *resp, const json_t *id,
                                        const char *requested)
{
    respond_error_status(
        resp, 400, id, RPC_UNSUPPORTED_VERSION, "Unsupported protocol version",
        json_pack("{s:o,s:s}", "supported", supported_versions(), "requested", requested));
}

/* `result` is stolen; modern results carry "resultType":"complete". */
static void respond_result(struct sl_response *resp, enum era era, const json_t *id, json_t *result)
{
    if (!result) {
        respond_error(resp, era, id, RPC_INTERNAL_ERROR, "Internal error");
        return;
    }
    if (era == ERA_MODERN)
        json_object_set_new(result, "resultType", json_string("complete"));
    respond_doc(resp, 200,
                json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

/* 202 with no body: a notification (or initialized) needs no answer. */
static void respond_accepted(struct sl_response *resp)
{
    resp->status = 202;
    resp->content_type = "application/json";
    resp->body = NULL;
    resp->len = 0;
}

/* ---- methods ------------------------------------------------------------------ */

static json_t *server_info(void)
{
    return json_pack("{s:s,s:s}", "name", SL_MCP_SERVER_NAME, "version", SL_MCP_SERVER_VERSION);
}

static void m_tools_call(struct sl_request *req, struct sl_response *resp, enum era era,
                         const json_t *id, const json_t *params)
{
    const char *name = sl_json_get_str(params, "name");
    json_t *args = json_object_get(params, "arguments");
    if (!name) {
        respond_error(resp, era, id, RPC_INVALID_PARAMS, "Invalid params: name must be a string");
        return;
    }
    if (args && !json_is_null(args) && !json_is_object(args)) {
        respond_error(resp, era, id, RPC_INVALID_PARAMS,
                      "Invalid params: arguments must be an object");
        return;
    }
    _cleanup_json_ json_t *empty = json_object();
    json_t *result = sl_mcp_tool_call(req->svc, req->principal, name, json_is_object(args) ? args : empty);
    if (!result) {
        /* The name is not echoed: nothing a client sends comes back. */
        respond_error(resp, era, id, RPC_INVALID_PARAMS, "Unknown tool");
        return;
    }
    respond_result(resp, era, id, result);
}

static void m_tools_list(struct sl_response *resp, enum era era, const json_t *id)
{
    json_t *result = json_pack("{s:o}", "tools", sl_mcp_tools_list());
    if (result && era == ERA_MODERN) {
        json_object_set_new(result, "ttlMs", json_integer(CACHE_TTL_MS));
        json_object_set_new(result, "cacheScope", json_string("private"));
    }
    respond_result(resp, era, id, result);
}

static void m_discover(struct sl_response *resp, const json_t *id)
{
    json_t *result =
        json_pack("{s:o,s:{s:{}},s:s,s:i,s:s,s:{s:o}}", "supportedVersions", supported_versions(),
                  "capabilities", "tools", "instructions", INSTRUCTIONS, "ttlMs", CACHE_TTL_MS,
                  "cacheScope", "private", "_meta", META_SERVER_INFO, server_info());
    respond_result(resp, ERA_MODERN, id, result);
}

static void m_initialize(struct sl_response *resp, const json_t *id, const json_t *params)
{
    const char *asked = sl_json_get_str(params, "protocolVersion");
    if (!asked) {
        respond_error(resp, ERA_LEGACY, id, RPC_INVALID_PARAMS,
                      "Invalid params: protocolVersion must be a string");
        return;
    }
    /* Answer the revision the client asked for when we speak it, else our
     * newest initialize-based one (the client then decides). */
    const char *version = is_legacy_version(asked) ? asked : LEGACY_NEWEST;
    json_t *result = json_pack("{s:s,s:{s:{}},s:o,s:s}", "protocolVersion", version, "capabilities",
                               "tools", "serverInfo", server_info(), "instructions", INSTRUCTIONS);
    respond_result(resp, ERA_LEGACY, id, result);
}

/* ---- the two eras ------------------------------------------------------------- */

/* The mirrored Mcp-Name value, decoded from the =?base64?...?= sentinel
 * when the client had to encode it, compared with the body's string. */
static int name_header_matches(const struct mcp_headers *h, const json_t *body_value)
{
    const char *want = json_string_value(body_value);
    size_t want_len = json_string_length(body_value);
    const char *got = h->name;
    size_t got_len = h->name_len;
    struct sl_buf decoded = {0};
    static const char pre[] = "=?base64?", post[] = "?=";
    bool sentinel = got_len >= sizeof(pre) - 1 + sizeof(post) - 1 &&
                    memcmp(got, pre, sizeof(pre) - 1) == 0 &&
                    memcmp(got + got_len - 2, post, 2) == 0;
    if (sentinel) {
        struct sl_error ignored = {0};
        if (sl_base64_decode_strict(got + sizeof(pre) - 1, got_len - (sizeof(pre) - 1) - 2,
                                    &decoded, 64 * 1024, &ignored) < 0)
            return -1;
        got = decoded.data;
        got_len = decoded.len;
    }
    bool same = got_len == want_len && memcmp(got, want, want_len) == 0;
    sl_buf_free(&decoded);
    return same;
}

static void handle_modern(struct sl_request *req, struct sl_response *resp,
                          const struct mcp_headers *h, const json_t *id, const char *method,
                          const json_t *params)
{
    const enum era era = ERA_MODERN;
    if (!h->accept_json || !h->accept_sse) {
        respond_error(resp, era, id, RPC_HEADER_MISMATCH,
                      "Accept header must list application/json and text/event-stream");
        return;
    }
    /* 2026-07-28 has no initialize: whatever envelope a client built for
     * it, the answer is "no such method" (a legacy client reads that as
     * "not my era" and an agent sees the supported versions in the text). */
    if (strcmp(method, "initialize") == 0) {
        respond_error(resp, era, id, RPC_METHOD_NOT_FOUND,
                      "Method not found: protocol 2026-07-28 has no initialize (this server "
                      "also speaks 2025-11-25 and 2025-06-18 through initialize without the "
                      "MCP-Protocol-Version header)");
        return;
    }
    if (h->n_version > 1 || h->n_method > 1 || h->n_name > 1) {
        respond_error(resp, era, id, RPC_HEADER_MISMATCH,
                      "a request metadata header appears more than once");
        return;
    }
    const json_t *meta = json_object_get(params, "_meta");
    const char *body_version = sl_json_get_str(meta, META_PROTOCOL_VERSION);
    if (!body_version) {
        respond_error(resp, era, id, RPC_INVALID_PARAMS,
                      "Invalid params: params._meta must carry " META_PROTOCOL_VERSION);
        return;
    }
    if (strcmp(body_version, h->version) != 0) {
        respond_error(resp, era, id, RPC_HEADER_MISMATCH,
                      "MCP-Protocol-Version header does not match the request's _meta "
                      "protocol version");
        return;
    }
    if (!h->method || strcmp(h->method, method) != 0) {
        respond_error(resp, era, id, RPC_HEADER_MISMATCH,
                      h->method ? "Mcp-Method header does not match the request method"
                                : "Mcp-Method header is required");
        return;
    }
    /* Mcp-Name mirrors params.name (params.uri for resources/read). */
    const char *name_field = strcmp(method, "tools/call") == 0 || strcmp(method, "prompts/get") == 0
                                 ? "name"
                             : strcmp(method, "resources/read") == 0 ? "uri"
                                                                     : NULL;
    if (name_field) {
        const json_t *value = json_object_get(params, name_field);
        if (!json_is_string(value)) {
            char message[64];
            snprintf(message, sizeof(message), "Invalid params: params.%s must be a string",
                     name_field);
            respond_error(resp, era, id, RPC_INVALID_PARAMS, message);
            return;
        }
        if (!h->name) {
            respond_error(resp, era, id, RPC_HEADER_MISMATCH, "Mcp-Name header is required");
            return;
        }
        if (name_header_matches(h, value) != 1) {
            respond_error(resp, era, id, RPC_HEADER_MISMATCH,
                          "Mcp-Name header does not match the request body");
            return;
        }
    }
    if (strcmp(method, "tools/call") == 0)
        m_tools_call(req, resp, era, id, params);
    else if (strcmp(method, "tools/list") == 0)
        m_tools_list(resp, era, id);
    else if (strcmp(method, "server/discover") == 0)
        m_discover(resp, id);
    else if (strcmp(method, "ping") == 0)
        respond_result(resp, era, id, json_object());
    else
        respond_error(resp, era, id, RPC_METHOD_NOT_FOUND, "Method not found");
}

static void handle_legacy(struct sl_request *req, struct sl_response *resp,
                          const struct mcp_headers *h, const json_t *id, const char *method,
                          const json_t *params)
{
    const enum era era = ERA_LEGACY;
    /* JSON answers only, so application/json is what the client must take. */
    if (!h->accept_json) {
        respond_error_status(resp, 406, id, RPC_INVALID_REQUEST,
                             "Not Acceptable: the client must accept application/json", NULL);
        return;
    }
    if (strcmp(method, "initialize") == 0)
        m_initialize(resp, id, params);
    else if (strcmp(method, "tools/call") == 0)
        m_tools_call(req, resp, era, id, params);
    else if (strcmp(method, "tools/list") == 0)
        m_tools_list(resp, era, id);
    else if (strcmp(method, "ping") == 0)
        respond_result(resp, era, id, json_object());
    else
        respond_error(resp, era, id, RPC_METHOD_NOT_FOUND, "Method not found");
}

void sl_mcp_handle(struct sl_request *req, struct sl_response *resp)
{
    const struct sl_config *cfg = sl_service_config(req->svc);
    struct mcp_headers h = {0};
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, collect_header, &h);

    /* Transport security first, before the body is looked at. */
    if (!host_allowed(cfg, h.host)) {
        respond_error_status(resp, 421, NULL, RPC_INVALID_REQUEST, "Invalid Host header", NULL);
        return;
    }
    /* No browser origin is allowed: server-to-server clients send none. */
    if (h.origin) {
        respond_error_status(resp, 403, NULL, RPC_INVALID_REQUEST, "Invalid Origin header", NULL);
        return;
    }
    bool modern_header = h.version && strcmp(h.version, SL_MCP_PROTOCOL_MODERN) == 0;
    if (!content_type_json(h.content_type)) {
        respond_error_status(resp, 400, NULL,
                             modern_header ? RPC_HEADER_MISMATCH : RPC_INVALID_REQUEST,
                             "Content-Type must be application/json", NULL);
        return;
    }

    /* The message. */
    const enum era err_era = modern_header ? ERA_MODERN : ERA_LEGACY;
    if (!req->raw_body || req->raw_len == 0 ||
        sl_json_too_many_containers(req->raw_body, req->raw_len, MAX_JSON_CONTAINERS)) {
        respond_error(resp, err_era, NULL, req->raw_len ? RPC_INVALID_REQUEST : RPC_PARSE_ERROR,
                      req->raw_len ? "Invalid Request: too many objects and arrays"
                                   : "Parse error");
        return;
    }
    _cleanup_json_ json_t *msg =
        json_loadb(req->raw_body, req->raw_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!msg) {
        respond_error(resp, err_era, NULL, RPC_PARSE_ERROR, "Parse error");
        return;
    }
    if (!json_is_object(msg)) {
        respond_error(resp, err_era, NULL, RPC_INVALID_REQUEST,
                      "Invalid Request: the body must be one JSON-RPC message object");
        return;
    }
    json_t *id = json_object_get(msg, "id");
    if (id && !json_is_string(id) && !json_is_integer(id)) {
        respond_error(resp, err_era, NULL, RPC_INVALID_REQUEST,
                      "Invalid Request: id must be a string or an integer");
        return;
    }
    const char *jsonrpc = sl_json_get_str(msg, "jsonrpc");
    const char *method = sl_json_get_str(msg, "method");
    json_t *params = json_object_get(msg, "params");
    if (!jsonrpc || strcmp(jsonrpc, "2.0") != 0 || !method) {
        respond_error(resp, err_era, id, RPC_INVALID_REQUEST,
                      "Invalid Request: expected a JSON-RPC 2.0 request or notification");
        return;
    }
    if (params && !json_is_object(params)) {
        respond_error(resp, err_era, id, RPC_INVALID_PARAMS,
                      "Invalid params: params must be an object");
        return;
    }

    /* Which revision's rules apply. */
    if (h.version && !modern_header && !is_legacy_version(h.version)) {
        respond_unsupported_version(resp, id, h.version);
        return;
    }
    if (!id) {
        /* A notification (notifications/initialized, cancelled, ...):
         * nothing to answer and no state to change. */
        respond_accepted(resp);
        return;
    }
    if (modern_header) {
        handle_modern(req, resp, &h, id, method, params);
    } else if (h.version || strcmp(method, "initialize") == 0) {
        /* An initialize-based client: initialize comes without the header
         * (the version is in its params), every later request with it. */
        handle_legacy(req, resp, &h, id, method, params);
    } else {
        respond_error(resp, ERA_MODERN, id, RPC_HEADER_MISMATCH,
                      "MCP-Protocol-Version header is required");
    }
}
