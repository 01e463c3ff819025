/* A command's output as Server-Sent Events (exec_stream.h). */
#include "api/exec_stream.h"
#include "api/stream_slots.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/util.h"
#include "config/config.h"
#include "service/outlog.h"

/* Raw bytes per event: an escaped event stays below a few times this. */
#define EVENT_BYTES 65536

struct exec_stream {
    struct sl_body_source src;
    struct sl_slot slot; /* in reg.open */
    struct sl_outlog *log;
    struct sl_outlog_waiter waiter;
    struct sl_outlog_reader reader; /* holds the command back (backpressure) */
    bool holding;                   /* reader registered (the ticker may let go) */
    uint64_t off[2];
    uint64_t skipped[2]; /* what its gaps said, per stream: in its end event */
    int prefer;          /* the stream read first next time: they take turns */
    char *pending;       /* an encoded event being sent */
    size_t pending_len, pending_pos, pending_cap;
    bool done; /* the end event is out (or being sent) */
    /* -1: events; 0 or 1: that stream's bytes as they are (the raw form,
     * application/octet-stream), which no escaping slows */
    int raw;
    /* Or another protocol's framing (exec_stream.h); begun: its begin is out. */
    struct sl_stream_encoder enc;
    bool encoded, begun;
    atomic_bool keepalive_due;
    atomic_llong last_send_us;
};

static struct {
    pthread_mutex_t lock;
    struct sl_slots open;
    int64_t keepalive_us, stall_us;
    pthread_t ticker;
    bool started;
    pthread_cond_t stop_cond;
    bool stopping;
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER,
         .open = {.code = SL_E_STREAM_LIMIT,
                  .what = "output streams",
                  .sandbox_var = "SANDBOX_MAX_STREAMS_PER_SANDBOX",
                  .worker_var = "SANDBOX_MAX_STREAMS"}};

#define STREAM_OF(p) SL_SLOT_OWNER(p, struct exec_stream, slot)

/* ---- encoding ---- */

static int reserve(struct exec_stream *s, size_t more)
{
    if (s->pending_len + more <= s->pending_cap)
        return 0;
    size_t cap = s->pending_cap ? s->pending_cap : 4096;
    while (cap < s->pending_len + more)
        cap *= 2;
    char *p = realloc(s->pending, cap);
    if (!p)
        return -1;
    s->pending = p;
    s->pending_cap = cap;
    return 0;
}

static int put(struct exec_stream *s, const char *data, size_t len)
{
    if (reserve(s, len) < 0)
        return -1;
    memcpy(s->pending + s->pending_len, data, len);
    s->pending_len += len;
    return 0;
}

static int putf(struct exec_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int putf(struct exec_stream *s, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        return -1;
    return put(s, line, (size_t)n);
}

/* The bytes a JSON string cannot carry raw (and CR and LF, which a data:
 * line cannot): how each is escaped (0: copied as it is). */
static const char escape_as[256] = {
    [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u',  [0x04] = 'u', [0x05] = 'u',
    [0x06] = 'u', [0x07] = 'u', [0x08] = 'b', [0x09] = 't',  [0x0a] = 'n', [0x0b] = 'u',
    [0x0c] = 'f', [0x0d] = 'r', [0x0e] = 'u', [0x0f] = 'u',  [0x10] = 'u', [0x11] = 'u',
    [0x12] = 'u', [0x13] = 'u', [0x14] = 'u', [0x15] = 'u',  [0x16] = 'u', [0x17] = 'u',
    [0x18] = 'u', [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u',  [0x1c] = 'u', [0x1d] = 'u',
    [0x1e] = 'u', [0x1f] = 'u', ['"'] = '"',  ['\\'] = '\\', [0x7f] = 'u',
};

/* JSON string content of valid UTF-8 (quotes not included). */
static int put_json_text(struct exec_stream *s, const unsigned char *p, size_t len)
{
    if (reserve(s, len * 6) < 0)
        return -1;
    char *o = s->pending + s->pending_len;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        char e = escape_as[c];
        if (!e) {
            *o++ = (char)c;
        } else if (e != 'u') {
            o[0] = '\\';
            o[1] = e;
            o += 2;
        } else {
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        }
    }
    s->pending_len = (size_t)(o - s->pending);
    return 0;
}

/* How many leading bytes of p are complete, valid UTF-8; *tail says
 * whether the rest is the start of a sequence that more bytes could
 * complete (a chunk cut inside a character). */
static size_t utf8_prefix(const unsigned char *p, size_t len, bool *tail)
{
    size_t i = 0;
    *tail = false;
    while (i < len) {
        /* ASCII, eight bytes at a time: most output is. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= len)
            break;
        unsigned char c = p[i];
        size_t n = c < 0x80             ? 1
                   : (c & 0xe0) == 0xc0 ? 2
                   : (c & 0xf0) == 0xe0 ? 3
                   : (c & 0xf8) == 0xf0 ? 4
                                        : 0;
        if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4))
            return i;
        size_t have = len - i < n ? len - i : n;
        for (size_t k = 1; k < have; k++)
            if ((p[i + k] & 0xc0) != 0x80)
                return i;
        if (n >= 3 && have >= 2) {
            unsigned char d = p[i + 1];
            if ((c == 0xe0 && d < 0xa0) || (c == 0xed && d > 0x9f) || (c == 0xf0 && d < 0x90) ||
                (c == 0xf4 && d > 0x8f))
                return i; /* overlong, surrogate, or past U+10FFFF */
        }
        if (have < n) {
            *tail = true;
            return i;
        }
        i += n;
    }
    return i;
}

static int put_id(struct exec_stream *s)
{
    return putf(s, "id: %llu:%llu\n", (unsigned long long)s->off[0], (unsigned long long)s->off[1]);
}

static const char *const stream_names[2] = {"stdout", "stderr"};

/* One chunk read from the log as its events (a gap, then the bytes). */
static int encode_chunk(struct exec_stream *s, const struct sl_outlog_chunk *c, char *data,
                        bool ended)
{
    int i = c->stream;
    if (c->skipped) {
        s->skipped[i] += c->skipped;
        s->off[i] = c->offset;
        if (put_id(s) < 0 ||
            putf(s, "event: gap\ndata: {\"stream\":\"%s\",\"offset\":%llu,\"skipped\":%llu}\n\n",
                 stream_names[i], (unsigned long long)(c->offset - c->skipped),
                 (unsigned long long)c->skipped) < 0)
            return -1;
    }
    if (!c->len)
        return 0;
    bool tail;
    size_t valid = utf8_prefix((const unsigned char *)data, c->len, &tail);
    size_t take = c->len;
    bool text = valid == c->len;
    if (!text && tail && valid > 0 && !ended) {
        take = valid; /* the character's rest comes with the next read */
        text = true;
    }
    s->off[i] = c->offset + take;
    if (put_id(s) < 0 || putf(s, "event: %s\ndata: {\"offset\":%llu,\"%s\":\"", stream_names[i],
                              (unsigned long long)c->offset, text ? "text" : "base64") < 0)
        return -1;
    if (text) {
        if (put_json_text(s, (const unsigned char *)data, take) < 0)
            return -1;
    } else {
        char *b64 = sl_base64_encode(data, take);
        if (!b64 || put(s, b64, strlen(b64)) < 0) {
            free(b64);
            return -1;
        }
        free(b64);
    }
    return put(s, "\"}\n\n", 4);
}

static int encode_end(struct exec_stream *s)
{
    /* The command's answer, and what this reader missed (its gaps). */
    json_t *end = json_deep_copy(sl_outlog_end(s->log));
    if (end) {
        json_object_set_new(end, "stdout_skipped", json_integer((json_int_t)s->skipped[0]));
        json_object_set_new(end, "stderr_skipped", json_integer((json_int_t)s->skipped[1]));
    }
    char *doc = end ? json_dumps(end, JSON_COMPACT) : NULL;
    json_decref(end);
    int rc = -1;
    if (doc && put_id(s) == 0 && putf(s, "event: end\ndata: ") == 0 &&
        put(s, doc, strlen(doc)) == 0 && put(s, "\n\n", 2) == 0)
        rc = 0;
    free(doc);
    return rc;
}

/* ---- the body source ---- */

static void on_output(struct sl_outlog_waiter *w)
{
    struct exec_stream *s =
        (struct exec_stream *)((char *)w - offsetof(struct exec_stream, waiter));
    s->src.wake(s->src.wake_ctx);
}

/* The raw form: bytes of one stream straight into the connection's buffer.
 * It has no way to say a gap or the end's status: a gap ends the body early
 * (fewer bytes than the record's count say so), and the status is the
 * record's (GET …/exec/{exec_id}). */
static ssize_t raw_read(struct exec_stream *s, char *buf, size_t max)
{
    int i = s->raw;
    for (;;) {
        if (s->done)
            return -1;
        atomic_store(&s->keepalive_due, false); /* a raw body has no comments */
        struct sl_outlog_chunk c;
        int rc = sl_outlog_read(s->log, s->off, i, buf, max, &c);
        if (rc == 1) {
            if (c.skipped) {
                s->done = true;
                return -1;
            }
            s->off[i] = c.offset + c.len;
            s->reader.moved_us = sl_mono_us();
            sl_outlog_advance(s->log, &s->reader, s->off);
            atomic_store(&s->last_send_us, sl_mono_us());
            if (c.len)
                return (ssize_t)c.len;
            continue;
        }
        if (rc < 0)
            return -1;
        if (sl_outlog_wait(s->log, s->off, &s->waiter))
            return 0;
    }
}

/* An encoder's output into the pending bytes. */
static int put_encoded(struct exec_stream *s, int rc, struct sl_buf *b)
{
    if (rc >= 0 && b->len)
        rc = put(s, b->data, b->len);
    sl_buf_free(b);
    return rc < 0 ? -1 : 0;
}

/* What the encoder makes of the next thing to send: 1 something was
 * queued, 0 nothing now (wait), -1 the end (or a failure). */
static int encode_next(struct exec_stream *s, char *chunk, size_t size)
{
    struct sl_buf b;
    sl_buf_init(&b, SIZE_MAX);
    void *ctx = s->enc.ctx;
    if (!s->begun) {
        s->begun = true;
        return put_encoded(s, s->enc.begin ? s->enc.begin(ctx, &b) : 0, &b) < 0 ? -1 : 1;
    }
    if (atomic_exchange(&s->keepalive_due, false))
        return put_encoded(s, s->enc.keepalive(ctx, &b), &b) < 0 ? -1 : 1;
    struct sl_outlog_chunk c;
    int rc = sl_outlog_read(s->log, s->off, s->prefer, chunk, size, &c);
    if (rc == 1) {
        s->prefer = !c.stream;
        int r = 0;
        if (c.skipped) {
            s->skipped[c.stream] += c.skipped;
            if (s->enc.gap)
                r = s->enc.gap(ctx, c.stream, c.skipped, &b);
        }
        if (r >= 0 && c.len)
            r = s->enc.chunk(ctx, c.stream, chunk, c.len, &b);
        if (r > 0)
            s->done = true; /* the encoder's answer is whole: the body ends */
        s->off[c.stream] = c.offset + c.len;
        s->reader.moved_us = sl_mono_us();
        sl_outlog_advance(s->log, &s->reader, s->off);
        return put_encoded(s, r, &b) < 0 ? -1 : 1;
    }
    if (rc < 0) {
        s->done = true;
        return put_encoded(s, s->enc.end(ctx, sl_outlog_end(s->log), &b), &b) < 0 ? -1 : 1;
    }
    sl_buf_free(&b);
    return sl_outlog_wait(s->log, s->off, &s->waiter) ? 0 : 1;
}

static ssize_t stream_read(struct sl_body_source *src, char *buf, size_t max)
{
    struct exec_stream *s = (struct exec_stream *)src;
    if (s->raw >= 0)
        return raw_read(s, buf, max);
    char chunk[EVENT_BYTES];
    for (;;) {
        if (s->pending_pos < s->pending_len) {
            size_t n = s->pending_len - s->pending_pos;
            n = n < max ? n : max;
            memcpy(buf, s->pending + s->pending_pos, n);
            s->pending_pos += n;
            atomic_store(&s->last_send_us, sl_mono_us());
            return (ssize_t)n;
        }
        s->pending_len = s->pending_pos = 0;
        if (s->done)
            return -1;
        if (s->encoded) {
            int r = encode_next(s, chunk, sizeof(chunk));
            if (r < 0)
                return -1;
            if (r == 0)
                return 0; /* on_output or the ticker wakes us */
            continue;
        }
        if (atomic_exchange(&s->keepalive_due, false)) {
            if (put(s, ": keepalive\n\n", 13) < 0)
                return -1;
            continue;
        }
        struct sl_outlog_chunk c;
        int rc = sl_outlog_read(s->log, s->off, s->prefer, chunk, sizeof(chunk), &c);
        if (rc == 1) {
            s->prefer = !c.stream;
            if (encode_chunk(s, &c, chunk, sl_outlog_end(s->log) != NULL) < 0)
                return -1;
            s->reader.moved_us = sl_mono_us();
            sl_outlog_advance(s->log, &s->reader, s->off);
            continue;
        }
        if (rc < 0) {
            s->done = true;
            if (encode_end(s) < 0)
                return -1;
            continue;
        }
        if (sl_outlog_wait(s->log, s->off, &s->waiter))
            return 0; /* on_output or the ticker wakes us */
    }
}

static void stream_close(struct sl_body_source *src)
{
    struct exec_stream *s = (struct exec_stream *)src;
    pthread_mutex_lock(&reg.lock);
    sl_slots_leave(&reg.open, &s->slot);
    bool holding = s->holding;
    s->holding = false;
    pthread_mutex_unlock(&reg.lock);
    if (holding)
        sl_outlog_unhold(s->log, &s->reader); /* a paused command goes on */
    /* A stream closes only while it is not waiting (its connection is not
     * suspended), so nobody else can wake it now. */
    (void)sl_outlog_unwait(s->log, &s->waiter);
    sl_outlog_put(s->log);
    if (s->encoded && s->enc.release)
        s->enc.release(s->enc.ctx);
    free(s->pending);
    free(s);
}

struct sl_body_source *sl_exec_stream_open(const char *sandbox_id, struct sl_outlog *log,
                                           const uint64_t off[2], struct sl_error *err)
{
    struct exec_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        sl_outlog_put(log);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    s->src.read = stream_read;
    s->src.close = stream_close;
    s->waiter.wake = on_output;
    s->raw = -1;
    s->log = log;
    s->off[0] = off[0];
    s->off[1] = off[1];
    s->reader.off[0] = off[0];
    s->reader.off[1] = off[1];
    s->reader.moved_us = sl_mono_us();
    atomic_init(&s->last_send_us, sl_mono_us());
    pthread_mutex_lock(&reg.lock);
    bool joined = sl_slots_join(&reg.open, &s->slot, sandbox_id, err) == 0;
    s->holding = joined;
    pthread_mutex_unlock(&reg.lock);
    if (!joined) {
        sl_outlog_put(log);
        free(s);
        return NULL;
    }
    sl_outlog_hold(log, &s->reader);
    return &s->src;
}

int sl_exec_stream_parse_offset(const char *text, uint64_t off[2])
{
    if (!text || !*text)
        return -1;
    char *end;
    off[0] = off[1] = 0;
    for (int i = 0; i < 2; i++) {
        if (*text < '0' || *text > '9')
            return -1;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno || end - text > 19)
            return -1;
        off[i] = v;
        if (*end == '\0')
            return 0;
        if (i == 1 || *end != ':')
            return -1;
        text = end + 1;
    }
    return -1;
}

/* ---- keepalives ---- */

/* A holder of a paused log that has not read since before the pause for
 * SANDBOX_STREAM_STALL_SECONDS (a reader that was idle only because
 * nothing came is not stalled until the pause is that old). */
static bool stalled(struct exec_stream *s, int64_t now)
{
    int64_t since = 0;
    if (!sl_outlog_paused(s->log, &since))
        return false;
    int64_t from = s->reader.moved_us > since ? s->reader.moved_us : since;
    return now - from >= reg.stall_us;
}

static void *ticker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&reg.lock);
    while (!reg.stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&reg.stop_cond, &reg.lock, &until);
        int64_t now = sl_mono_us();
        /* Streams waiting on their log and silent too long: taken off the
         * log (so only this wakes them) and woken with a keepalive due. A
         * waiting stream's connection is suspended and stays so until it
         * is woken, so it cannot be closed before the wake below. */
        struct exec_stream *due[64];
        size_t n = 0;
        for (struct sl_slot *p = reg.open.all; p && n < 64; p = p->next) {
            struct exec_stream *s = STREAM_OF(p);
            if (now - atomic_load(&s->last_send_us) >= reg.keepalive_us &&
                sl_outlog_unwait(s->log, &s->waiter)) {
                atomic_store(&s->keepalive_due, true);
                atomic_store(&s->last_send_us, now);
                due[n++] = s;
            }
        }
        /* A reader that holds a paused command and has not read for
         * SANDBOX_STREAM_STALL_SECONDS lets go of it: the command goes on,
         * and the reader gets a gap if it ever reads again. Under reg.lock,
         * so the stream cannot be closed meanwhile (nothing on the way to
         * the runtime takes reg.lock). */
        for (struct sl_slot *p = reg.open.all; p; p = p->next) {
            struct exec_stream *s = STREAM_OF(p);
            if (s->holding && stalled(s, now)) {
                s->holding = false;
                sl_outlog_unhold(s->log, &s->reader);
            }
        }
        pthread_mutex_unlock(&reg.lock);
        for (size_t i = 0; i < n; i++)
            due[i]->src.wake(due[i]->src.wake_ctx);
        pthread_mutex_lock(&reg.lock);
    }
    pthread_mutex_unlock(&reg.lock);
    return NULL;
}

int sl_exec_streams_start(const struct sl_config *cfg, struct sl_error *err)
{
    reg.open.per_sandbox = cfg->max_streams_per_sandbox;
    reg.open.per_worker = cfg->max_streams;
    reg.keepalive_us = cfg->stream_keepalive_seconds * 1000000;
    reg.stall_us = cfg->stream_stall_seconds * 1000000;
    reg.stopping = false;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&reg.stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&reg.ticker, NULL, ticker_main, NULL) != 0)
        return sl_error_set(err, SL_E_INTERNAL, errno, "cannot start the streams' ticker");
    reg.started = true;
    return 0;
}

void sl_exec_streams_stop(void)
{
    if (!reg.started)
        return;
    pthread_mutex_lock(&reg.lock);
    reg.stopping = true;
    pthread_cond_signal(&reg.stop_cond);
    pthread_mutex_unlock(&reg.lock);
    pthread_join(reg.ticker, NULL);
    pthread_cond_destroy(&reg.stop_cond);
    reg.started = false;
}

struct sl_body_source *sl_exec_stream_open_raw(const char *sandbox_id, struct sl_outlog *log,
                                               int stream, uint64_t offset, struct sl_error *err)
{
    /* The other stream is never read: its offset is past anything. */
    uint64_t off[2] = {UINT64_MAX, UINT64_MAX};
    off[stream] = offset;
    struct sl_body_source *src = sl_exec_stream_open(sandbox_id, log, off, err);
    if (src)
        ((struct exec_stream *)src)->raw = stream;
    return src;
}

struct sl_body_source *sl_exec_stream_open_encoded(const char *sandbox_id, struct sl_outlog *log,
                                                   const uint64_t off[2],
                                                   const struct sl_stream_encoder *enc,
                                                   struct sl_error *err)
{
    struct sl_body_source *src = sl_exec_stream_open(sandbox_id, log, off, err);
    if (!src) {
        if (enc->release)
            enc->release(enc->ctx);
        return NULL;
    }
    struct exec_stream *s = (struct exec_stream *)src;
    s->enc = *enc;
    s->encoded = true;
    return src;
}
