/* The output of one command for its live readers and its record
 * (outlog.h). */
#include "service/outlog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct out_stream {
    char *head; /* the first head_len bytes (grows to head_max) */
    size_t head_len, head_cap;
    char *ring;                    /* bytes past head_max: the last ring_max of them */
    bool head_failed, ring_failed; /* no memory for it: readers get gaps there */
    uint64_t total;                /* bytes produced */
};

struct sl_outlog {
    atomic_int refs;
    pthread_mutex_t lock;
    size_t head_max, ring_max;
    struct out_stream s[2];
    json_t *end; /* set once: the command is over */
    struct sl_outlog_waiter *waiters;
    struct sl_outlog_reader *holders;
    bool paused;
    int64_t paused_us; /* since when (monotonic) */
    /* resume_lock: held while the callback runs, so finish can clear it
     * knowing no call is under way. */
    pthread_mutex_t resume_lock;
    void (*resume)(void *ctx);
    void *resume_ctx;
};

struct sl_outlog *sl_outlog_new(size_t head_max, size_t ring_max)
{
    struct sl_outlog *log = calloc(1, sizeof(*log));
    if (!log)
        return NULL;
    atomic_init(&log->refs, 1);
    pthread_mutex_init(&log->lock, NULL);
    pthread_mutex_init(&log->resume_lock, NULL);
    log->head_max = head_max;
    log->ring_max = ring_max;
    return log;
}

struct sl_outlog *sl_outlog_stored(const char *out, size_t out_len, const char *err, size_t err_len,
                                   json_t *end)
{
    size_t most = out_len > err_len ? out_len : err_len;
    struct sl_outlog *log = sl_outlog_new(most, 0);
    if (!log) {
        json_decref(end);
        return NULL;
    }
    sl_outlog_append(log, SL_OUT_STDOUT, out, out_len);
    sl_outlog_append(log, SL_OUT_STDERR, err, err_len);
    sl_outlog_finish(log, end);
    if (log->s[0].head_failed || log->s[1].head_failed) {
        sl_outlog_put(log); /* out of memory: not a faithful copy */
        return NULL;
    }
    return log;
}

struct sl_outlog *sl_outlog_ref(struct sl_outlog *log)
{
    atomic_fetch_add(&log->refs, 1);
    return log;
}

void sl_outlog_put(struct sl_outlog *log)
{
    if (!log || atomic_fetch_sub(&log->refs, 1) != 1)
        return;
    for (int i = 0; i < 2; i++) {
        free(log->s[i].head);
        free(log->s[i].ring);
    }
    json_decref(log->end);
    pthread_mutex_destroy(&log->lock);
    pthread_mutex_destroy(&log->resume_lock);
    free(log);
}

/* Detach every waiter (under the lock); the caller wakes them after it. */
static struct sl_outlog_waiter *take_waiters(struct sl_outlog *log)
{
    struct sl_outlog_waiter *w = log->waiters;
    log->waiters = NULL;
    for (struct sl_outlog_waiter *p = w; p; p = p->next)
        p->registered = false;
    return w;
}

static void wake_all(struct sl_outlog_waiter *w)
{
    while (w) {
        struct sl_outlog_waiter *next = w->next; /* w may be gone after its wake */
        w->wake(w);
        w = next;
    }
}

/* Append to the head while it has room; how many bytes it took (short
 * when out of memory: those bytes are then lost, as past its end). */
static size_t head_append(struct sl_outlog *log, struct out_stream *s, const char *data, size_t len)
{
    size_t room = log->head_max - s->head_len;
    size_t n = len < room ? len : room;
    if (!n || s->head_failed)
        return 0;
    if (s->head_len + n > s->head_cap) {
        size_t cap = s->head_cap ? s->head_cap : 4096;
        while (cap < s->head_len + n)
            cap *= 2;
        if (cap > log->head_max)
            cap = log->head_max;
        char *p = realloc(s->head, cap);
        if (!p) {
            s->head_failed = true; /* offsets must stay true: keep no more */
            return 0;
        }
        s->head = p;
        s->head_cap = cap;
    }
    memcpy(s->head + s->head_len, data, n);
    s->head_len += n;
    return n;
}

static void ring_append(struct sl_outlog *log, struct out_stream *s, const char *data, size_t len,
                        uint64_t at)
{
    if (!log->ring_max || s->ring_failed)
        return;
    if (!s->ring && !(s->ring = malloc(log->ring_max))) {
        s->ring_failed = true; /* readers get gaps past the head */
        return;
    }
    if (len > log->ring_max) {
        data += len - log->ring_max;
        at += len - log->ring_max;
        len = log->ring_max;
    }
    size_t pos = (size_t)((at - log->head_max) % log->ring_max);
    size_t first = log->ring_max - pos < len ? log->ring_max - pos : len;
    memcpy(s->ring + pos, data, first);
    memcpy(s->ring, data + first, len - first);
}

static uint64_t kept_from(const struct sl_outlog *log, const struct out_stream *s, uint64_t off);

/* Under the lock: the least room any holder leaves in stream i before its
 * next byte is overwritten (SIZE_MAX: nobody holds it back). A holder
 * that already lost bytes (behind what is kept) holds nothing. */
static size_t least_room(const struct sl_outlog *log, int i)
{
    const struct out_stream *s = &log->s[i];
    size_t least = SIZE_MAX;
    if (log->ring_max < 2 * SL_OUTLOG_PAUSE_ROOM || s->ring_failed)
        return least;
    for (const struct sl_outlog_reader *r = log->holders; r; r = r->next) {
        uint64_t at = r->off[i];
        if (at >= s->total || (at >= s->head_len && at < kept_from(log, s, at)))
            continue;
        /* In the head, but what follows the head is already partly gone:
         * this reader gets a gap there whatever happens, so waiting for it
         * would hold the command back for nothing. */
        if (at < s->head_len && kept_from(log, s, log->head_max) > log->head_max)
            continue;
        uint64_t need = at > log->head_max ? at : log->head_max; /* the head keeps the rest */
        uint64_t used = s->total > need ? s->total - need : 0;
        size_t room = used >= log->ring_max ? 0 : (size_t)(log->ring_max - used);
        least = room < least ? room : least;
    }
    return least;
}

bool sl_outlog_append(struct sl_outlog *log, int stream, const void *data, size_t len)
{
    if (!len)
        return true;
    struct out_stream *s = &log->s[stream];
    pthread_mutex_lock(&log->lock);
    const char *p = data;
    /* Offsets below head_max belong to the head, the rest to the ring. */
    size_t in_head = 0;
    if (s->total < log->head_max) {
        uint64_t room = log->head_max - s->total;
        in_head = room < len ? (size_t)room : len;
        (void)head_append(log, s, p, in_head);
    }
    if (in_head < len)
        ring_append(log, s, p + in_head, len - in_head, s->total + in_head);
    s->total += len;
    bool go_on = least_room(log, stream) >= SL_OUTLOG_PAUSE_ROOM;
    if (!go_on && !log->paused) {
        log->paused = true;
        log->paused_us = sl_mono_us();
    }
    struct sl_outlog_waiter *w = take_waiters(log);
    pthread_mutex_unlock(&log->lock);
    wake_all(w);
    return go_on;
}

void sl_outlog_on_resume(struct sl_outlog *log, void (*resume)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&log->resume_lock);
    log->resume = resume;
    log->resume_ctx = ctx;
    pthread_mutex_unlock(&log->resume_lock);
}

/* Under the lock: whether a paused log may go on (half its ring free for
 * every holder, so the command is not paused again at once). */
static bool take_unpause(struct sl_outlog *log)
{
    if (!log->paused || log->end)
        return false;
    for (int i = 0; i < 2; i++)
        if (least_room(log, i) < log->ring_max / 2 && least_room(log, i) != SIZE_MAX)
            return false;
    log->paused = false;
    return true;
}

static void call_resume(struct sl_outlog *log)
{
    pthread_mutex_lock(&log->resume_lock);
    if (log->resume)
        log->resume(log->resume_ctx);
    pthread_mutex_unlock(&log->resume_lock);
}

void sl_outlog_hold(struct sl_outlog *log, struct sl_outlog_reader *r)
{
    pthread_mutex_lock(&log->lock);
    r->next = log->holders;
    log->holders = r;
    pthread_mutex_unlock(&log->lock);
}

void sl_outlog_unhold(struct sl_outlog *log, struct sl_outlog_reader *r)
{
    pthread_mutex_lock(&log->lock);
    for (struct sl_outlog_reader **p = &log->holders; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    bool go = take_unpause(log);
    pthread_mutex_unlock(&log->lock);
    if (go)
        call_resume(log);
}

void sl_outlog_advance(struct sl_outlog *log, struct sl_outlog_reader *r, const uint64_t off[2])
{
    pthread_mutex_lock(&log->lock);
    r->off[0] = off[0];
    r->off[1] = off[1];
    bool go = take_unpause(log);
    pthread_mutex_unlock(&log->lock);
    if (go)
        call_resume(log);
}

bool sl_outlog_paused(struct sl_outlog *log, int64_t *since_us)
{
    pthread_mutex_lock(&log->lock);
    bool paused = log->paused;
    if (since_us)
        *since_us = log->paused_us;
    pthread_mutex_unlock(&log->lock);
    return paused;
}

bool sl_outlog_may_read(struct sl_outlog *log, int stream)
{
    pthread_mutex_lock(&log->lock);
    bool may = log->end || least_room(log, stream) >= SL_OUTLOG_PAUSE_ROOM;
    if (!may && !log->paused) {
        log->paused = true; /* the next reader's advance resumes it */
        log->paused_us = sl_mono_us();
    }
    pthread_mutex_unlock(&log->lock);
    return may;
}

void sl_outlog_finish(struct sl_outlog *log, json_t *end)
{
    pthread_mutex_lock(&log->lock);
    if (log->end) {
        pthread_mutex_unlock(&log->lock);
        json_decref(end);
        return;
    }
    log->end = end ? end : json_object();
    log->paused = false;
    struct sl_outlog_waiter *w = take_waiters(log);
    pthread_mutex_unlock(&log->lock);
    /* Its command is gone: no resume may reach it any more. */
    sl_outlog_on_resume(log, NULL, NULL);
    wake_all(w);
}

/* The first offset of s a reader can still get at or after `off`. */
static uint64_t kept_from(const struct sl_outlog *log, const struct out_stream *s, uint64_t off)
{
    if (off < s->head_len)
        return off;
    uint64_t start = s->total; /* nothing kept past the head */
    if (s->ring && s->total > log->head_max) {
        uint64_t ring_len = s->total - log->head_max;
        start = s->total - (ring_len < log->ring_max ? ring_len : log->ring_max);
    }
    return off < start ? start : off;
}

static bool has_more(const struct sl_outlog *log, int i, const uint64_t off[2])
{
    return off[i] < log->s[i].total;
}

static size_t copy_out(const struct sl_outlog *log, const struct out_stream *s, uint64_t from,
                       char *buf, size_t max)
{
    if (from < s->head_len) {
        size_t n = s->head_len - (size_t)from;
        n = n < max ? n : max;
        memcpy(buf, s->head + from, n);
        return n;
    }
    uint64_t avail = s->total - from;
    size_t n = avail < max ? (size_t)avail : max;
    size_t pos = (size_t)((from - log->head_max) % log->ring_max);
    size_t first = log->ring_max - pos < n ? log->ring_max - pos : n;
    memcpy(buf, s->ring + pos, first);
    memcpy(buf + first, s->ring, n - first);
    return n;
}

int sl_outlog_read(struct sl_outlog *log, const uint64_t off[2], int prefer, char *buf, size_t max,
                   struct sl_outlog_chunk *c)
{
    pthread_mutex_lock(&log->lock);
    int i = prefer;
    if (!has_more(log, i, off))
        i = !prefer;
    if (!has_more(log, i, off)) {
        int rc = log->end ? -1 : 0;
        pthread_mutex_unlock(&log->lock);
        return rc;
    }
    const struct out_stream *s = &log->s[i];
    uint64_t from = kept_from(log, s, off[i]);
    *c = (struct sl_outlog_chunk){.stream = i, .offset = from, .skipped = from - off[i]};
    if (from < s->total)
        c->len = copy_out(log, s, from, buf, max);
    pthread_mutex_unlock(&log->lock);
    return 1;
}

bool sl_outlog_wait(struct sl_outlog *log, const uint64_t off[2], struct sl_outlog_waiter *w)
{
    pthread_mutex_lock(&log->lock);
    bool wait = !log->end && !has_more(log, 0, off) && !has_more(log, 1, off);
    if (wait && !w->registered) {
        w->next = log->waiters;
        log->waiters = w;
        w->registered = true;
    }
    pthread_mutex_unlock(&log->lock);
    return wait;
}

bool sl_outlog_unwait(struct sl_outlog *log, struct sl_outlog_waiter *w)
{
    pthread_mutex_lock(&log->lock);
    bool was = w->registered;
    if (was) {
        for (struct sl_outlog_waiter **p = &log->waiters; *p; p = &(*p)->next)
            if (*p == w) {
                *p = w->next;
                break;
            }
        w->registered = false;
    }
    pthread_mutex_unlock(&log->lock);
    return was;
}

const json_t *sl_outlog_end(struct sl_outlog *log)
{
    pthread_mutex_lock(&log->lock);
    const json_t *end = log->end;
    pthread_mutex_unlock(&log->lock);
    return end;
}

void sl_outlog_totals(struct sl_outlog *log, uint64_t totals[2])
{
    pthread_mutex_lock(&log->lock);
    totals[0] = log->s[0].total;
    totals[1] = log->s[1].total;
    pthread_mutex_unlock(&log->lock);
}

size_t sl_outlog_kept_bytes(struct sl_outlog *log)
{
    pthread_mutex_lock(&log->lock);
    size_t n = 0;
    for (int i = 0; i < 2; i++)
        n += log->s[i].head_cap + (log->s[i].ring ? log->ring_max : 0);
    pthread_mutex_unlock(&log->lock);
    return n;
}

bool sl_outlog_overflowed(struct sl_outlog *log)
{
    pthread_mutex_lock(&log->lock);
    bool over = log->s[0].total > log->s[0].head_len || log->s[1].total > log->s[1].head_len;
    pthread_mutex_unlock(&log->lock);
    return over;
}

const char *sl_outlog_head(struct sl_outlog *log, int stream, size_t *len)
{
    *len = log->s[stream].head_len;
    return log->s[stream].head ? log->s[stream].head : "";
}
