/* The output of one command, kept for the readers that follow it while it
 * runs (streams, offset polls) and for its record when it ends.
 *
 * Per stream (stdout, stderr) a log keeps the first `head_max` bytes (what
 * the record stores: SANDBOX_MAX_OUTPUT_BYTES) and, past them, the last
 * `ring_max` bytes (SANDBOX_STREAM_RETAIN_BYTES), so a reader that follows a
 * long command live, or reconnects to it, gets everything from where it
 * was unless it fell more than `ring_max` behind; then it is told how many
 * bytes it missed (a gap), never handed them silently skipped.
 *
 * Offsets count bytes of one stream from the command's start. Appends come
 * from one thread (the runtime's supervisor); reads and waits from any.
 * A reader with nothing to read registers a waiter, woken once (outside the
 * log's lock) when bytes arrive or the command ends. */
#ifndef SL_SERVICE_OUTLOG_H
#define SL_SERVICE_OUTLOG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SL_OUT_STDOUT = 0, SL_OUT_STDERR = 1 };

struct sl_outlog;

struct sl_outlog_waiter {
    /* Called once per registration, without the log's lock held, from the
     * appending or finishing thread (or whoever unregisters it: then not
     * at all). */
    void (*wake)(struct sl_outlog_waiter *w);
    struct sl_outlog_waiter *next; /* the log's */
    bool registered;               /* the log's */
};

/* One read: `len` bytes of `stream` starting at `offset`, preceded by
 * `skipped` bytes of that stream no longer kept (len 0 with skipped > 0:
 * a gap alone). */
struct sl_outlog_chunk {
    int stream;
    uint64_t offset;
    uint64_t skipped;
    size_t len;
};

/* A live reader that holds the command back rather than miss bytes
 * (backpressure): while it is within what the log keeps, an append that
 * would leave less than SL_OUTLOG_PAUSE_ROOM before its bytes are
 * overwritten says "pause" (the runtime stops reading the command's pipe),
 * and its reading on frees the pipe again (the log's resume callback).
 * Only with a ring of at least 2 x SL_OUTLOG_PAUSE_ROOM. */
struct sl_outlog_reader {
    uint64_t off[2];               /* where it reads next; set with sl_outlog_advance */
    int64_t moved_us;              /* when it last read (monotonic) */
    struct sl_outlog_reader *next; /* the log's */
};
#define SL_OUTLOG_PAUSE_ROOM ((size_t)64 * 1024)

struct sl_outlog *sl_outlog_new(size_t head_max, size_t ring_max);
/* Called (from a reader's thread, no lock held) when a paused log has room
 * again; the setter keeps ctx alive until sl_outlog_finish, which waits for
 * a call under way. */
void sl_outlog_on_resume(struct sl_outlog *log, void (*resume)(void *ctx), void *ctx);
void sl_outlog_hold(struct sl_outlog *log, struct sl_outlog_reader *r);
void sl_outlog_unhold(struct sl_outlog *log, struct sl_outlog_reader *r);
/* The reader read up to off[]: room for the command again, maybe. */
void sl_outlog_advance(struct sl_outlog *log, struct sl_outlog_reader *r, const uint64_t off[2]);
/* Whether the log has paused its command for a reader, and since when. */
bool sl_outlog_paused(struct sl_outlog *log, int64_t *since_us);
/* The supervisor, about to read a paused stream again: whether every
 * holder has room for it (if not it stays paused, and the next reader's
 * advance asks again). */
bool sl_outlog_may_read(struct sl_outlog *log, int stream);
/* A finished log holding a stored record's output (an attach to a command
 * that ended): `end` (taken) is its final event. */
struct sl_outlog *sl_outlog_stored(const char *out, size_t out_len, const char *err, size_t err_len,
                                   json_t *end);
struct sl_outlog *sl_outlog_ref(struct sl_outlog *log);
void sl_outlog_put(struct sl_outlog *log);

/* The supervisor's: bytes as they are read from the command's pipe.
 * false: a holding reader is behind; read no more of this command until
 * the resume callback says so. */
bool sl_outlog_append(struct sl_outlog *log, int stream, const void *data, size_t len);
/* The command is over: `end` (taken; the exec answer without output) is
 * what readers get last. No append may follow. */
void sl_outlog_finish(struct sl_outlog *log, json_t *end);

/* The next bytes at off[] (off[stream] for each stream), at most `max`,
 * from `prefer`'s stream when both have some. 1: *c says what was copied
 * into buf; 0: nothing yet; -1: the command is over and everything up to
 * the end has been read. */
int sl_outlog_read(struct sl_outlog *log, const uint64_t off[2], int prefer, char *buf, size_t max,
                   struct sl_outlog_chunk *c);
/* Register w when there is nothing to read at off[] and the command still
 * runs (true); false: read now. */
bool sl_outlog_wait(struct sl_outlog *log, const uint64_t off[2], struct sl_outlog_waiter *w);
/* Take w back. true: it was still registered and will not be woken (the
 * caller now does what the wake would have done); false: its wake has
 * been or is being called. */
bool sl_outlog_unwait(struct sl_outlog *log, struct sl_outlog_waiter *w);

/* The final event (borrowed; NULL while the command runs). */
const json_t *sl_outlog_end(struct sl_outlog *log);
/* Bytes produced so far per stream. */
void sl_outlog_totals(struct sl_outlog *log, uint64_t totals[2]);
/* The bytes of output it holds (both streams, head and ring). */
size_t sl_outlog_kept_bytes(struct sl_outlog *log);
/* Whether either stream went past what the record keeps. */
bool sl_outlog_overflowed(struct sl_outlog *log);
/* The record's bytes of a stream (the head). Only once no append can
 * come (the runtime's completion): borrowed, valid while the log is. */
const char *sl_outlog_head(struct sl_outlog *log, int stream, size_t *len);

#endif
