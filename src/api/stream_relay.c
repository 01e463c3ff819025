/* An owner's event stream relayed to a replica's client (stream_relay.h). */
#include "api/stream_relay.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What the relay holds at most between the owner and the client. */
#define RELAY_BYTES (256 * 1024)

struct sl_relay {
    struct sl_body_source src;
    pthread_mutex_t lock;
    pthread_cond_t room; /* the writer waits for the reader */
    char *buf;
    size_t start, len;            /* a ring of RELAY_BYTES */
    bool ended;                   /* the writer is done */
    bool closed;                  /* the reader is done */
    bool waiting;                 /* the reader waits: the next push (or the end) wakes it */
    int refs;                     /* the two sides */
    struct sl_relay *prev, *next; /* every relay open (the registry's) */
};

static struct {
    pthread_mutex_t lock;
    struct sl_relay *all;
    int count;
} relays = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void put_ref(struct sl_relay *r)
{
    pthread_mutex_lock(&r->lock);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->lock);
    if (!last)
        return;
    pthread_mutex_lock(&relays.lock);
    if (r->prev)
        r->prev->next = r->next;
    else
        relays.all = r->next;
    if (r->next)
        r->next->prev = r->prev;
    relays.count--;
    pthread_mutex_unlock(&relays.lock);
    pthread_cond_destroy(&r->room);
    pthread_mutex_destroy(&r->lock);
    free(r->buf);
    free(r);
}

/* Under the lock: whether the reader waits, and is now the caller's to
 * wake, after the lock (it is suspended: its connection lives until
 * woken, and only this wakes it). */
static bool take_waiting(struct sl_relay *r)
{
    bool was = r->waiting;
    r->waiting = false;
    return was;
}

static ssize_t relay_read(struct sl_body_source *src, char *out, size_t max)
{
    struct sl_relay *r = (struct sl_relay *)src;
    pthread_mutex_lock(&r->lock);
    ssize_t n;
    if (r->len) {
        size_t take = r->len < max ? r->len : max;
        size_t first = RELAY_BYTES - r->start < take ? RELAY_BYTES - r->start : take;
        memcpy(out, r->buf + r->start, first);
        memcpy(out + first, r->buf, take - first);
        r->start = (r->start + take) % RELAY_BYTES;
        r->len -= take;
        pthread_cond_signal(&r->room);
        n = (ssize_t)take;
    } else if (r->ended) {
        n = -1;
    } else {
        r->waiting = true;
        n = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

static void relay_close(struct sl_body_source *src)
{
    struct sl_relay *r = (struct sl_relay *)src;
    pthread_mutex_lock(&r->lock);
    r->closed = true;
    pthread_cond_signal(&r->room);
    pthread_mutex_unlock(&r->lock);
    put_ref(r);
}

struct sl_relay *sl_relay_new(void)
{
    struct sl_relay *r = calloc(1, sizeof(*r));
    if (!r || !(r->buf = malloc(RELAY_BYTES))) {
        free(r);
        return NULL;
    }
    r->src.read = relay_read;
    r->src.close = relay_close;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->room, NULL);
    r->refs = 2;
    pthread_mutex_lock(&relays.lock);
    bool full = relays.count >= SL_RELAY_MAX;
    if (!full) {
        r->next = relays.all;
        if (relays.all)
            relays.all->prev = r;
        relays.all = r;
        relays.count++;
    }
    pthread_mutex_unlock(&relays.lock);
    if (full) {
        pthread_cond_destroy(&r->room);
        pthread_mutex_destroy(&r->lock);
        free(r->buf);
        free(r);
        errno = EBUSY;
        return NULL;
    }
    return r;
}

bool sl_relay_open(struct sl_relay *r)
{
    pthread_mutex_lock(&r->lock);
    bool open = !r->closed;
    pthread_mutex_unlock(&r->lock);
    return open;
}

void sl_relays_close_all(void)
{
    pthread_mutex_lock(&relays.lock);
    for (struct sl_relay *r = relays.all; r; r = r->next) {
        pthread_mutex_lock(&r->lock);
        r->closed = true;
        pthread_cond_signal(&r->room);
        pthread_mutex_unlock(&r->lock);
    }
    pthread_mutex_unlock(&relays.lock);
}

struct sl_body_source *sl_relay_source(struct sl_relay *r)
{
    return &r->src;
}

bool sl_relay_push(struct sl_relay *r, const char *data, size_t len)
{
    pthread_mutex_lock(&r->lock);
    while (len && !r->closed) {
        while (r->len == RELAY_BYTES && !r->closed)
            pthread_cond_wait(&r->room, &r->lock);
        if (r->closed)
            break;
        size_t end = (r->start + r->len) % RELAY_BYTES;
        size_t room = RELAY_BYTES - r->len;
        size_t take = len < room ? len : room;
        size_t first = RELAY_BYTES - end < take ? RELAY_BYTES - end : take;
        memcpy(r->buf + end, data, first);
        memcpy(r->buf, data + first, take - first);
        r->len += take;
        data += take;
        len -= take;
        if (take_waiting(r)) {
            /* Woken outside the lock, and before waiting for room. */
            pthread_mutex_unlock(&r->lock);
            r->src.wake(r->src.wake_ctx);
            pthread_mutex_lock(&r->lock);
        }
    }
    bool open = !r->closed;
    pthread_mutex_unlock(&r->lock);
    return open;
}

void sl_relay_end(struct sl_relay *r, bool never_read)
{
    if (never_read) {
        put_ref(r); /* the reader's */
        put_ref(r);
        return;
    }
    pthread_mutex_lock(&r->lock);
    r->ended = true;
    bool wake = take_waiting(r);
    pthread_mutex_unlock(&r->lock);
    if (wake)
        r->src.wake(r->src.wake_ctx);
    put_ref(r);
}
