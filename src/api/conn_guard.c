#include "api/conn_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api/peer_uid.h"
#include "common/log.h"
#include "common/util.h"

#define WATCH_EVERY_US 250000
#define LOG_PERIOD_US (10 * 1000000LL)
/* Per-uid counts, open addressing; sized so it never fills before the
 * all-sandboxes budget refuses (see sl_conn_guard_new). */
#define UID_SLOTS 32768

struct sl_conn_track {
    int fd;
    uid_t uid;
    bool sandbox;      /* counted against the sandbox budgets */
    bool waiting;      /* for a request's headers, since `since_us` */
    bool shut;         /* the watchdog shut it down already */
    int64_t since_us;
    struct sl_conn_track *prev, *next;
};

/* A slot, once used, stays on every probe path that passed it (no
 * deletion, so lookups stay correct); one whose count fell to 0 may be
 * taken over by another uid. */
struct uid_slot {
    uid_t uid;
    int count;
    bool used;
};

struct sl_conn_guard {
    struct sl_conn_guard_limits lim;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; wakes the watchdog to stop */
    pthread_t watchdog;
    bool started, stopping;
    struct sl_conn_track *all;
    struct uid_slot *uids;
    int64_t open, sandbox_open, refused_total, timed_out_total;
    /* rate-limited reporting */
    int64_t last_log_us;
    int64_t refused_unlogged, timed_out_unlogged;
};

static struct uid_slot *uid_slot(struct sl_conn_guard *g, uid_t uid, bool create)
{
    uint32_t h = (uint32_t)uid * 2654435761u;
    struct uid_slot *free_slot = NULL;
    for (uint32_t i = 0; i < UID_SLOTS; i++) {
        struct uid_slot *s = &g->uids[(h + i) % UID_SLOTS];
        if (s->used && s->uid == uid)
            return s;
        if (s->used && s->count == 0 && !free_slot)
            free_slot = s; /* a uid with no connection left: reusable */
        if (!s->used) {
            if (!create)
                return NULL;
            if (!free_slot)
                free_slot = s;
            break;
        }
    }
    if (!create || !free_slot)
        return NULL;
    free_slot->used = true;
    free_slot->uid = uid;
    free_slot->count = 0;
    return free_slot;
}

/* Under the lock: one line at most every LOG_PERIOD_US for what happened. */
static void report_locked(struct sl_conn_guard *g, int64_t now)
{
    if (!g->refused_unlogged && !g->timed_out_unlogged)
        return;
    if (g->last_log_us && now - g->last_log_us < LOG_PERIOD_US)
        return;
    sl_warn("http: since the last report %lld connections of sandboxes refused (at most %d per "
            "sandbox, %d for all), %lld connections shut after %lld s without a request",
            (long long)g->refused_unlogged, g->lim.per_sandbox, g->lim.sandboxes_total,
            (long long)g->timed_out_unlogged, (long long)(g->lim.header_timeout_us / 1000000));
    g->refused_unlogged = g->timed_out_unlogged = 0;
    g->last_log_us = now;
}

static void *watchdog_main(void *arg)
{
    struct sl_conn_guard *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->stopping) {
        int64_t now = sl_mono_us();
        for (struct sl_conn_track *t = g->all; t; t = t->next) {
            if (!t->waiting || t->shut || now - t->since_us < g->lim.header_timeout_us)
                continue;
            /* MHD sees end of stream and closes it; the descriptor stays
             * valid until close() below has taken it off this list. */
            (void)shutdown(t->fd, SHUT_RDWR);
            t->shut = true;
            g->timed_out_total++;
            g->timed_out_unlogged++;
        }
        report_locked(g, now);
        int64_t wake = now + WATCH_EVERY_US;
        struct timespec until = {.tv_sec = wake / 1000000, .tv_nsec = (wake % 1000000) * 1000};
        pthread_cond_timedwait(&g->cond, &g->lock, &until);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

struct sl_conn_guard *sl_conn_guard_new(const struct sl_conn_guard_limits *limits)
{
    struct sl_conn_guard *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->lim = *limits;
    if (g->lim.sandboxes_total > UID_SLOTS / 2)
        g->lim.sandboxes_total = UID_SLOTS / 2;
    g->uids = calloc(UID_SLOTS, sizeof(*g->uids));
    if (!g->uids) {
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cond, &cattr);
    pthread_condattr_destroy(&cattr);
    if (g->lim.header_timeout_us > 0) {
        if (pthread_create(&g->watchdog, NULL, watchdog_main, g) != 0) {
            sl_conn_guard_free(g);
            return NULL;
        }
        g->started = true;
    }
    return g;
}

void sl_conn_guard_free(struct sl_conn_guard *g)
{
    if (!g)
        return;
    if (g->started) {
        pthread_mutex_lock(&g->lock);
        g->stopping = true;
        pthread_cond_signal(&g->cond);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->watchdog, NULL);
    }
    while (g->all) {
        struct sl_conn_track *t = g->all;
        g->all = t->next;
        free(t);
    }
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g->uids);
    free(g);
}

struct sl_conn_track *sl_conn_guard_open(struct sl_conn_guard *g, int fd, bool *refused)
{
    *refused = false;
    uid_t uid = (uid_t)-1;
    /* Outside the lock: one netlink round trip. A peer we cannot look up
     * (another host, an error) is not a sandbox of ours. */
    bool known = sl_peer_uid(fd, &uid) == 0;
    bool sandbox =
        known && uid >= g->lim.sandbox_uid_first && uid <= g->lim.sandbox_uid_last;
    struct sl_conn_track *t = calloc(1, sizeof(*t));
    pthread_mutex_lock(&g->lock);
    int64_t now = sl_mono_us();
    if (sandbox) {
        struct uid_slot *s = uid_slot(g, uid, true);
        if (!s || s->count >= g->lim.per_sandbox || g->sandbox_open >= g->lim.sandboxes_total) {
            *refused = true;
            g->refused_total++;
            g->refused_unlogged++;
            report_locked(g, now);
            pthread_mutex_unlock(&g->lock);
            free(t);
            (void)shutdown(fd, SHUT_RDWR);
            return NULL;
        }
        if (t) {
            s->count++;
            g->sandbox_open++;
        }
    }
    if (t) {
        *t = (struct sl_conn_track){.fd = fd, .uid = uid, .sandbox = sandbox, .waiting = true,
                                    .since_us = now, .next = g->all};
        if (g->all)
            g->all->prev = t;
        g->all = t;
        g->open++;
    }
    pthread_mutex_unlock(&g->lock);
    return t;
}

void sl_conn_guard_close(struct sl_conn_guard *g, struct sl_conn_track *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&g->lock);
    if (t->prev)
        t->prev->next = t->next;
    else
        g->all = t->next;
    if (t->next)
        t->next->prev = t->prev;
    g->open--;
    if (t->sandbox) {
        struct uid_slot *s = uid_slot(g, t->uid, false);
        if (s && s->count > 0)
            s->count--;
        g->sandbox_open--;
    }
    pthread_mutex_unlock(&g->lock);
    free(t);
}

void sl_conn_guard_request_begin(struct sl_conn_guard *g, struct sl_conn_track *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&g->lock);
    t->waiting = false;
    pthread_mutex_unlock(&g->lock);
}

void sl_conn_guard_request_end(struct sl_conn_guard *g, struct sl_conn_track *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&g->lock);
    t->waiting = true;
    t->since_us = sl_mono_us();
    pthread_mutex_unlock(&g->lock);
}

void sl_conn_guard_stats(struct sl_conn_guard *g, struct sl_conn_guard_stats *out)
{
    pthread_mutex_lock(&g->lock);
    *out = (struct sl_conn_guard_stats){g->open, g->sandbox_open, g->refused_total,
                                        g->timed_out_total};
    pthread_mutex_unlock(&g->lock);
}
