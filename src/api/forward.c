/* Forwarding to the owner (api/forward.h), over service/peer.h. */
#include "api/forward.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/errors.h"
#include "common/util.h"
#include "e2b/e2b.h"
#include "service/peer.h"

/* A client's headers: at most this much is sent on. */
#define MAX_CLIENT_HEADERS ((size_t)64 << 10)

bool sl_forward_run(const struct sl_forward_request *rq, struct sl_response *out)
{
    memset(out, 0, sizeof(*out));
    struct sl_peer_request p = {
        .method = rq->method,
        .url = rq->url,
        .auth = rq->auth,
        .headers = rq->headers,
        .worker_id = rq->worker_id,
        .generation = rq->generation,
        .body = rq->body,
        .body_len = rq->body_len,
        .timeout_ms = rq->timeout_ms,
        .stream = rq->stream,
        .stream_types = rq->stream_types,
        .stream_ctx = rq->stream_ctx,
        .last_event_id = rq->last_event_id,
        .keep_going = rq->keep_going,
    };
    struct sl_peer_answer a;
    if (sl_peer_call(&p, &a) < 0) {
        if (rq->headers) {
            /* E2B's client reads E2B's error shape. */
            sl_e2b_respond_error(out, 503,
                                 "the worker that holds the sandbox did not answer: retry");
        } else {
            out->status = 503;
            out->content_type = "application/json";
            out->body = sl_api_error_body(SL_E_WORKER_UNREACHABLE,
                                          "the worker that holds the sandbox did not answer: "
                                          "retry, or resolve the sandbox again if its worker is "
                                          "gone",
                                          NULL);
            out->len = out->body ? strlen(out->body) : 0;
        }
        snprintf(out->log_detail, sizeof(out->log_detail), "forward: %.240s", a.why);
        return false;
    }
    out->status = a.status;
    /* The content types the owner answers with (a static string each). */
    out->content_type = a.json ? "application/json" : "text/plain; charset=utf-8";
    out->body = a.body;
    out->len = a.len;
    /* A raw relay's answer is the owner's as it gave it: its headers say
     * its type (a proxied answer, api/router.h). */
    if (rq->headers && !a.streamed) {
        out->headers = a.headers ? a.headers : strdup("");
        out->content_type = NULL;
    }
    snprintf(out->log_detail, sizeof(out->log_detail), "forwarded to %s", rq->worker_id);
    return true;
}

/* Hop-by-hop (RFC 9110 §7.6.1), the length (curl sends the body whole,
 * with its own) and ours: never sent on. */
static bool client_header_dropped(const char *name)
{
    static const char *const dropped[] = {
        "connection",        "keep-alive",        "proxy-connection", "proxy-authorization",
        "te",                "trailer",           "transfer-encoding", "upgrade",
        "content-length",    "expect",            SL_FORWARD_WORKER_HEADER,
        "X-Sandbox-Generation", NULL};
    for (size_t i = 0; dropped[i]; i++)
        if (strcasecmp(name, dropped[i]) == 0)
            return true;
    return false;
}

struct client_headers {
    struct sl_buf b;
    bool failed; /* past MAX_CLIENT_HEADERS, or out of memory */
};

static enum MHD_Result take_client_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
    (void)kind;
    struct client_headers *h = cls;
    struct sl_buf *b = &h->b;
    /* A value with a line break would be two headers on the wire. */
    if (!key || !value || client_header_dropped(key) || strpbrk(value, "\r\n") ||
        strpbrk(key, "\r\n:"))
        return MHD_YES;
    if (sl_buf_append(b, key, strlen(key)) < 0 || sl_buf_append(b, ": ", 2) < 0 ||
        sl_buf_append(b, value, strlen(value)) < 0 || sl_buf_append(b, "\n", 1) < 0) {
        h->failed = true;
        return MHD_NO;
    }
    return MHD_YES;
}

char *sl_forward_client_headers(void *conn)
{
    struct client_headers h = {.failed = false};
    sl_buf_init(&h.b, MAX_CLIENT_HEADERS);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, take_client_header, &h);
    if (h.failed || sl_buf_append(&h.b, "", 1) < 0) {
        sl_buf_free(&h.b);
        return NULL;
    }
    return h.b.data;
}
