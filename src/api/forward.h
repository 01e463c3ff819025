/* Forwarding a public request to the worker that owns its sandbox (API.md
 * §10), over the worker protocol (/internal/v1, §9): one blocking call,
 * run off the handler threads (api/http.c keeps a pool of its own for it).
 *
 * What goes: the same method, the path with /api/v1 turned into
 * /internal/v1, the same query, the body, the bearer token of this replica
 * (a fleet shares one), X-Sandbox-Worker-ID and X-Sandbox-Generation. What
 * comes back is relayed as it is: status, body bytes, content type. A
 * connection failure or a timeout is 503 SANDBOX_WORKER_UNREACHABLE.
 *
 * E2B's requests go another way (a raw relay, `headers` set): E2B's
 * protocol is not the worker protocol, and its credentials are the
 * client's (an API key, a sandbox's access token), which the owner checks
 * as any replica would. The request goes on as it came: the same method,
 * path and query, the client's headers (its credentials, E2B's routing
 * headers, Host) and body, plus X-Sandbox-Worker-ID and
 * X-Sandbox-Generation, which mark it forwarded: a replica never forwards
 * such a request again. The owner's answer comes back with its headers;
 * a Connect server-stream or NDJSON answer streams through. */
#ifndef SL_API_FORWARD_H
#define SL_API_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/router.h"

/* The body field (ours, worker protocol only) that names the tenant a
 * forwarded template call is for; a public route ignores it, since there
 * the caller's key says who it is. */
#define SL_FORWARD_TENANT_FIELD "tenant_id"

struct sl_forward_request {
    const char *method;
    const char *url;       /* endpoint + internal path + query */
    const char *auth;      /* "Bearer <token>"; NULL for a raw relay */
    const char *headers;   /* a raw relay: the client's header lines */
    const char *worker_id; /* X-Sandbox-Worker-ID */
    int64_t generation;    /* X-Sandbox-Generation */
    const char *body;      /* NULL = none */
    size_t body_len;
    int64_t timeout_ms;    /* the read timeout of the route (§10.2) */
    /* An event stream is relayed as it comes (service/peer.h's hook), as
     * are the types of stream_types (NULL: text/event-stream). */
    bool (*stream)(void *ctx, int status, const char *type, const char *data, size_t len);
    const char *const *stream_types;
    void *stream_ctx;
    const char *last_event_id;
    bool (*keep_going)(void *ctx);
};

/* Fills *out (body malloc'd): the owner's answer, or a 503 when the owner
 * could not be reached, and then returns false. An answer that went to
 * rq->stream leaves *out with its status and no body. A raw relay's answer
 * carries the owner's headers (out->headers), and its 503 is E2B's
 * {"code", "message"}. */
bool sl_forward_run(const struct sl_forward_request *rq, struct sl_response *out);

/* Header names ours alone (the worker protocol's fence): a client's are
 * never sent on, and a request carrying X-Sandbox-Worker-ID was forwarded
 * already. */
#define SL_FORWARD_WORKER_HEADER "X-Sandbox-Worker-ID"

/* The client's request headers for a raw relay, "Name: value\n" each
 * (malloc'd; NULL when out of memory): all of them but the hop-by-hop
 * ones, the length (the body is sent whole) and ours. conn: the request's
 * struct MHD_Connection. */
char *sl_forward_client_headers(void *conn);

#endif
