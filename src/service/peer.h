/* One call of the worker protocol (/internal/v1, API.md §9) to another
 * replica: what the API's forwarding relays (api/forward.c) and what the
 * service itself asks of an owner (the destroy of a release, an E2B
 * create's connect). Blocking; libcurl; connect timeout 10 s (§10.1).
 *
 * Or a raw relay (`headers` set): a client's request sent on to the owner
 * as it came, with the client's own headers and credentials (E2B's
 * requests, which another protocol authenticates), and the owner's answer
 * given back with its headers. */
#ifndef SL_SERVICE_PEER_H
#define SL_SERVICE_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sl_peer_request {
    const char *method;
    const char *url;       /* endpoint + /internal/v1 path + query */
    const char *auth;      /* "Bearer <token>" (a fleet shares one); NULL = none */
    /* A raw relay: the client's header lines ("Name: value\n" each), sent
     * instead of our Authorization and Content-Type; the answer's header
     * lines come back in sl_peer_answer.headers. NULL = the protocol's. */
    const char *headers;
    const char *worker_id; /* X-Sandbox-Worker-ID */
    int64_t generation;    /* X-Sandbox-Generation */
    const char *body;      /* JSON, NULL = none */
    size_t body_len;
    int64_t timeout_ms;    /* the route's read timeout (§10.2) */
    /* When set: a 2xx answer of one of stream_types is not collected but
     * handed here as it arrives, with the entry of stream_types it matched
     * (false stops the transfer), and instead of timeout_ms only silence
     * longer than SL_PEER_STREAM_SILENCE_S ends it (the owner's keepalives
     * come far more often). */
    bool (*stream)(void *ctx, int status, const char *type, const char *data, size_t len);
    /* NULL-terminated; NULL = text/event-stream alone (ours). */
    const char *const *stream_types;
    void *stream_ctx;
    const char *last_event_id; /* sent on as Last-Event-ID; NULL = none */
    /* Asked about once a second during a stream: false ends it. */
    bool (*keep_going)(void *ctx);
};
#define SL_PEER_STREAM_SILENCE_S 120L

struct sl_peer_answer {
    int status;     /* 0 when the peer did not answer */
    bool json;      /* Content-Type application/json */
    bool streamed;  /* the body went to rq->stream (body NULL) */
    char *body;     /* malloc'd, NUL-terminated; NULL when no answer */
    size_t len;
    /* A raw relay's collected answer: its header lines ("Name: value\n",
     * hop-by-hop ones left out), malloc'd; NULL otherwise. */
    char *headers;
    char why[256];  /* when status is 0: what went wrong (operator text) */
};

/* 0 answered (any status), -1 no answer (a->why says why). */
int sl_peer_call(const struct sl_peer_request *rq, struct sl_peer_answer *a);

#endif
