/* The route table: one row per HTTP route, used for dispatch, for the
 * 404/405 decisions and to generate /openapi.json, so the three cannot
 * disagree. Handlers are thin: decode, call one service function, encode. */
#ifndef SL_API_ROUTER_H
#define SL_API_ROUTER_H

#include <jansson.h>
#include <stdbool.h>

#include "common/error.h"
#include "service/principal.h"
#include <stddef.h>
#include <sys/types.h>

#define SL_ROUTE_MAX_PARAMS 4

struct sl_service;

struct sl_request {
    struct sl_service *svc;
    void *conn; /* struct MHD_Connection */
    const char *method;
    const char *params[SL_ROUTE_MAX_PARAMS]; /* path parameters, in pattern order */
    size_t nparams;
    json_t *body; /* parsed JSON object when the route takes a body */
    /* The raw body for routes that parse their own (route->body false):
     * valid for the handler's duration; NULL/0 when empty. */
    const char *raw_body;
    size_t raw_len;
    void *http_state; /* api/http.c's; see sl_request_defer */
    bool deferred;    /* set by sl_request_defer */
    /* Who the request acts as (decided before the handler runs; kind NONE
     * on a route without auth). Valid for the handler's duration. */
    const struct sl_principal *principal;
    /* Arrived through the worker protocol (/internal/v1): a replica
     * forwards a tenant's request with the operator's token, and says
     * for which tenant where a handler needs it (a template's owner). */
    bool internal;
};

/* A body produced while it is sent (an event stream). api/http.c reads it
 * when the connection can take more and closes it when the connection is
 * done with it (the end, or the client gone). */
struct sl_body_source {
    /* >0: bytes written to buf; 0: nothing now, and the source will call
     * wake(wake_ctx) exactly once when there is; -1: the body is complete. */
    ssize_t (*read)(struct sl_body_source *src, char *buf, size_t max);
    void (*close)(struct sl_body_source *src);
    /* Set by api/http.c before the first read. */
    void (*wake)(void *ctx);
    void *wake_ctx;
};

/* A WebSocket answer (101 Switching Protocols). Once the switch is sent,
 * api/http.c hands the connection's socket to `start`, which owns it from
 * then on (reads, writes, never closes it) and gives it back with
 * sl_upgraded_close when it is done. A switch never sent (the client gone
 * first) calls `abandon` instead. Either is called once, on a thread of
 * libmicrohttpd: neither may block. */
struct sl_upgraded; /* the connection while upgraded */
struct sl_upgrade {
    char accept[29];   /* Sec-WebSocket-Accept */
    char protocol[128];   /* Sec-WebSocket-Protocol chosen, "" for none */
    char extensions[256]; /* Sec-WebSocket-Extensions agreed, "" for none */
    void (*start)(struct sl_upgrade *u, int fd, const char *extra, size_t extra_len,
                  struct sl_upgraded *h);
    void (*abandon)(struct sl_upgrade *u);
};
/* Close an upgraded connection (any thread, once). */
void sl_upgraded_close(struct sl_upgraded *h);

struct sl_response {
    int status;
    const char *content_type; /* static string */
    char *body;               /* malloc'd */
    size_t len;
    char allow[64];           /* "Allow" header for 405, "" otherwise */
    /* For the access log only, never sent: the operator detail of an
     * error answer (sl_error.detail, or a 500's real message). */
    char log_detail[256];
    /* Static content (the /docs assets): browsers may keep it an hour;
     * everything else is no-store. */
    bool cacheable;
    /* Set by an answer whose service call said SL_E_OWNED_ELSEWHERE: the
     * request goes to that worker instead (api/forward.h); the error body
     * is what is sent should it not be forwarded. */
    bool forward;
    struct sl_error_owner owner;
    /* The body comes from here instead of `body` (status 200). */
    struct sl_body_source *source;
    /* Or the connection switches to WebSocket (status 101). */
    struct sl_upgrade *upgrade;
    /* A proxied answer (the ports route): its own headers, malloc'd
     * "Name: value\n" lines, sent as they are instead of ours
     * (Cache-Control, nosniff); content_type NULL unless it names one. */
    char *headers;
};

typedef void (*sl_handler)(struct sl_request *req, struct sl_response *resp);

/* A handler that cannot answer yet (a command still running) defers: it
 * takes the handle, leaves *resp alone and returns; whoever finishes the
 * work calls sl_deferred_respond exactly once, from any thread. The
 * connection waits suspended, holding no thread. (api/http.c) */
struct sl_deferred;
struct sl_deferred *sl_request_defer(struct sl_request *req);
void sl_deferred_respond(struct sl_deferred *d, struct sl_response *resp);

struct sl_query_param {
    const char *name;
    const char *type; /* "string" | "integer" */
    bool required;
};

/* Where a route's caller puts its credential (auth true): the bearer
 * token or a tenant key in Authorization (the API's), an API key or the
 * token in X-API-KEY (E2B's control plane), or a sandbox's envd access
 * token in X-Access-Token (E2B's envd, for the route's {sandbox_id}). The
 * E2B routes are another protocol's (e2b/e2b.h): not in /openapi.json. */
/* SL_CRED_E2B_TRAFFIC: the same token in X-Access-Token or in
 * E2B-Traffic-Access-Token (E2B's code interpreter sends the latter on
 * its context calls). */
enum sl_route_credential {
    SL_CRED_BEARER = 0,
    SL_CRED_E2B_API_KEY,
    SL_CRED_E2B_ENVD,
    SL_CRED_E2B_TRAFFIC
};

struct sl_route_def {
    const char *method;
    const char *pattern; /* "/api/v1/sandboxes/{sandbox_id}" */
    sl_handler handler;
    bool auth;
    bool body; /* expects a JSON object body */
    const char *op_id;
    const char *summary;
    const char *request_schema;  /* components.schemas name or NULL */
    const char *response_schema; /* components.schemas name or NULL (then text) */
    const struct sl_query_param *query; /* terminated by a NULL name, or NULL */
    size_t max_body; /* largest accepted body; 0 = SL_ROUTE_DEFAULT_MAX_BODY */
    /* /internal/v1 (API.md §9): a replica forwarding to the owner. Checked
     * before the handler: X-Sandbox-Worker-ID must be this worker's (and
     * X-Sandbox-Generation present where internal_generation). Not in the
     * OpenAPI document: not a client surface. */
    bool internal;
    bool internal_generation;
    /* A tenant's API key may call it (the handler keeps to the tenant's
     * own). Every other route with auth takes the internal token only: a
     * tenant key there answers 403 before the handler runs. */
    bool tenant;
    /* Success is 201 Created (a create), not 200. */
    bool created;
    enum sl_route_credential credential;
};

/* Whether a route's handler never blocks (it hands its work to a pool of
 * its own and defers, as the ports route does): it then runs on the
 * server's thread, one hand-off fewer. (api/routes.c) */
bool sl_route_runs_inline(const struct sl_route_def *r);

/* Bodies of small requests (resolve, connect, mkdir ...) stay small. */
#define SL_ROUTE_DEFAULT_MAX_BODY ((size_t)64 * 1024)
/* An exec request: 256 argv items and 128 env values of 64 Ki characters. */
#define SL_ROUTE_EXEC_MAX_BODY ((size_t)26 * 1024 * 1024)
/* MCP: SANDBOX_MAX_FILE_API_BYTES (32 MiB) + 1 MiB (MCP.md §1). */
#define SL_ROUTE_MCP_MAX_BODY ((size_t)33 * 1024 * 1024)
/* A file write: 45 MiB of base64 plus the JSON around it. */
#define SL_ROUTE_FILE_MAX_BODY ((size_t)48 * 1024 * 1024 + 64 * 1024)

extern const struct sl_route_def sl_routes[];
extern const size_t sl_routes_len;

/* Whether a sandbox id is a literal segment of a route under
 * /api/v1/sandboxes/ ("resolve", "mcp", "diagnostics"): such a sandbox
 * could be resolved but never reached, so resolve refuses it. */
bool sl_router_id_is_route(const char *sandbox_id);
/* The refusal of such an id: 400 SANDBOX_ID_RESERVED (ours). */
int sl_router_refuse_reserved_id(const char *sandbox_id, struct sl_error *err);

enum sl_match { SL_MATCH_OK, SL_MATCH_METHOD, SL_MATCH_NONE };

/* Match method+path. `pathbuf` is a mutable copy of the path; params point
 * into it. On SL_MATCH_METHOD, `allow` lists the methods of that path. */
enum sl_match sl_router_match(const char *method, char *pathbuf, const struct sl_route_def **out,
                              const char **params, size_t *nparams, char *allow,
                              size_t allow_size);

/* Whether a path needs the bearer token even when no route matches it
 * (so unknown /api paths answer 401 before 404). */
bool sl_router_path_protected(const char *path);

json_t *sl_openapi_document(void);
/* The fields a request schema defines (its "properties", borrowed, for
 * the life of the process), or NULL for an unknown schema. */
const json_t *sl_openapi_request_fields(const char *schema);

#endif
