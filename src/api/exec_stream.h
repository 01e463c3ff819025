/* A command's output as Server-Sent Events (ours: POST …/exec with
 * "stream": true, GET …/exec/{exec_id}/stream).
 *
 * Events, in the order the command produced them per stream:
 *
 *   id: <stdout offset>:<stderr offset>     (after this event)
 *   event: stdout | stderr
 *   data: {"offset": N, "text": "…"}          (or "base64" when the bytes
 *                                             are not UTF-8)
 *
 *   event: gap
 *   data: {"stream": "stdout", "offset": N, "skipped": K}
 *                                            (K bytes from N were no longer
 *                                             kept: SANDBOX_STREAM_RETAIN_BYTES)
 *
 *   event: end
 *   data: the exec answer without its output, with stdout_bytes and
 *         stderr_bytes (what the command produced) and stdout_skipped and
 *         stderr_skipped (what this stream's gaps left out); the stream
 *         then closes.
 *
 * and a comment (": keepalive") after SANDBOX_STREAM_KEEPALIVE_SECONDS of
 * silence. A reconnect with Last-Event-ID (or ?offset=S:E) goes on right
 * after the last event it got: no byte twice, none missing.
 *
 * Streams cost no thread: one waits on its command's log (outlog.h) with
 * its connection suspended. The registry here bounds how many are open
 * (per sandbox, per worker) and sends the keepalives. */
#ifndef SL_API_EXEC_STREAM_H
#define SL_API_EXEC_STREAM_H

#include <jansson.h>
#include <stdint.h>

#include "common/util.h"

#include "api/router.h"
#include "common/error.h"

struct sl_config;
struct sl_outlog;

/* The registry: started with the HTTP server, stopped after it. */
int sl_exec_streams_start(const struct sl_config *cfg, struct sl_error *err);
void sl_exec_streams_stop(void);

/* A stream of `log` (a reference, taken whatever the outcome) from
 * offsets off[] (stdout, stderr). NULL with err SANDBOX_STREAM_LIMIT past a
 * bound. */
struct sl_body_source *sl_exec_stream_open(const char *sandbox_id, struct sl_outlog *log,
                                           const uint64_t off[2], struct sl_error *err);

/* The raw form (?format=raw): the bytes of one stream (SL_OUT_STDOUT or
 * SL_OUT_STDERR) from `offset`, as the command wrote them, no events; a
 * gap ends it early, and the command's status is its record's. */
struct sl_body_source *sl_exec_stream_open_raw(const char *sandbox_id, struct sl_outlog *log,
                                               int stream, uint64_t offset, struct sl_error *err);

/* Another protocol's framing of the same stream (E2B's Connect events,
 * e2b/): the registry, bounds, backpressure and keepalives are this
 * module's, the bytes the encoder's. Each function appends to `out`;
 * < 0 ends the body; chunk answering > 0 ends it too, its answer whole
 * (E2B's interpreter answer ends before its process does). begin (may be NULL) comes before anything else, gap
 * (may be NULL: nothing) for bytes no longer kept, end once, last.
 * release frees ctx when the stream closes. */
struct sl_stream_encoder {
    int (*begin)(void *ctx, struct sl_buf *out);
    int (*chunk)(void *ctx, int stream, const char *data, size_t len, struct sl_buf *out);
    int (*gap)(void *ctx, int stream, uint64_t skipped, struct sl_buf *out);
    int (*end)(void *ctx, const json_t *end, struct sl_buf *out);
    int (*keepalive)(void *ctx, struct sl_buf *out);
    void (*release)(void *ctx);
    void *ctx;
};
/* The stream of `log` from off[], framed by `enc` (copied; its ctx is the
 * stream's from now on, released even when this fails). */
struct sl_body_source *sl_exec_stream_open_encoded(const char *sandbox_id, struct sl_outlog *log,
                                                   const uint64_t off[2],
                                                   const struct sl_stream_encoder *enc,
                                                   struct sl_error *err);

/* "S:E" or "S" (stderr 0): a Last-Event-ID or ?offset= value. -1 when it
 * is neither. */
int sl_exec_stream_parse_offset(const char *text, uint64_t off[2]);

#endif
