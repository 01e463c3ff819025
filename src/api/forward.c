/* Forwarding to the owner (api/forward.h), over service/peer.h. */
#include "api/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "service/peer.h"

bool sl_forward_run(const struct sl_forward_request *rq, struct sl_response *out)
{
    memset(out, 0, sizeof(*out));
    struct sl_peer_request p = {
        .method = rq->method,
        .url = rq->url,
        .auth = rq->auth,
        .worker_id = rq->worker_id,
        .generation = rq->generation,
        .body = rq->body,
        .body_len = rq->body_len,
        .timeout_ms = rq->timeout_ms,
        .stream = rq->stream,
        .stream_ctx = rq->stream_ctx,
        .last_event_id = rq->last_event_id,
        .keep_going = rq->keep_going,
    };
    struct sl_peer_answer a;
    if (sl_peer_call(&p, &a) < 0) {
        out->status = 503;
        out->content_type = "application/json";
        out->body = sl_api_error_body(SL_E_WORKER_UNREACHABLE,
                                      "the worker that holds the sandbox did not answer: retry, "
                                      "or resolve the sandbox again if its worker is gone",
                                      NULL);
        out->len = out->body ? strlen(out->body) : 0;
        snprintf(out->log_detail, sizeof(out->log_detail), "forward: %.240s", a.why);
        return false;
    }
    out->status = a.status;
    /* The content types the owner answers with (a static string each). */
    out->content_type = a.json ? "application/json" : "text/plain; charset=utf-8";
    out->body = a.body;
    out->len = a.len;
    snprintf(out->log_detail, sizeof(out->log_detail), "forwarded to %s", rq->worker_id);
    return true;
}
