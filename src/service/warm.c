/* The warm pool: sandboxes prepared before anyone creates them, so a
 * create's first command does not pay for building its sandbox.
 *
 * A sandbox's first command costs a session build (runtime/session.c):
 * namespaces, the mount tree, its cgroups and its private network link,
 * tens of milliseconds; every later command costs a request to the
 * session's init. Each entry of the pool is all of that, made ahead for a
 * uid no sandbox has yet:
 *   - a route of status WARM with id WS_WARM_PREFIX<hex> reserves the uid
 *     in the store, so no other create, on any worker, can draw it (the
 *     store's uid is unique); such an id is refused by the API, so no
 *     client can name it;
 *   - the directories of a sandbox under that id (workspace/layout.c);
 *   - its session, with the worker's default ceilings and egress rules.
 * A create placed on this worker (lifecycle.c, insert_new_route) takes an
 * entry: the WARM row becomes the sandbox's route (one UPDATE: the uid
 * never is free in between), the directory is renamed to the sandbox's id
 * (the session's mounts follow the directory), and the session is the
 * sandbox's; its own ceilings and egress rules are written by its first
 * command, before it runs (runtime/session.c). The thread refills behind.
 *
 * An entry that cannot be given (its directory cannot be renamed) is not
 * lost for the sandbox: the route is its already, and its first command
 * builds a session as for any sandbox. WARM rows outlive a restart: the
 * next run of this worker adopts them (their processes ended with the old
 * daemon) instead of drawing new uids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "service/internal.h"
#include "workspace/layout.h"

#define WARM_STATUS "WARM"
/* After a failed preparation the thread waits this long before the next. */
#define RETRY_US (5 * 1000000LL)
/* How long after a take a refill waits: about a first command's time. */
#define REFILL_DELAY_US (50 * 1000LL)
/* The refill's nice value (sl_rt_session_adopt gives 0 back). */
#define WARM_NICE 19

static void root_of(const struct sl_service *svc, const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", svc->cfg->workspace_root, name);
}

/* Its directory and its session, for a WARM route already in the store. */
static int prepare(struct sl_service *svc, const char *id, uid_t uid, struct sl_error *err)
{
    struct sl_disk_status disk;
    svc_disk_status(svc, &disk);
    if (ws_warm_create(svc->cfg->workspace_root, id, uid, disk.available, &svc->quota, err) < 0)
        return -1;
    char root[4096];
    root_of(svc, id, root, sizeof(root));
    return sl_rt_session_prepare(svc->runtime, root, uid, err);
}

/* A prepared session no list holds any more: stopped, so it does not run
 * unseen for the rest of the run (its row, if still WARM, is taken up by
 * the next run). */
static void drop(struct sl_service *svc, const struct svc_warm_entry *e)
{
    char root[4096];
    root_of(svc, e->id, root, sizeof(root));
    sl_rt_session_drop(svc->runtime, e->uid, root);
}

/* false when out of memory: the row stays WARM, and the next run of the
 * worker takes it up. */
static bool push(struct svc_warm_list *l, const struct svc_warm_entry *e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct svc_warm_entry *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *e;
    return true;
}

static bool pop(struct svc_warm_list *l, struct svc_warm_entry *out)
{
    if (l->n == 0)
        return false;
    *out = l->v[--l->n];
    return true;
}

/* One more ready entry: an unready WARM row prepared, or else a new WARM
 * route with a free uid, then its directory and session. A row whose
 * preparation fails goes (back) to the unready list: a failing
 * preparation never draws uid after uid. */
static int make_one(struct sl_service *svc, struct sl_error *err)
{
    struct svc_warm *w = &svc->warm;
    struct svc_warm_entry e;
    pthread_mutex_lock(&w->lock);
    bool old = pop(&w->unready, &e);
    pthread_mutex_unlock(&w->lock);
    if (!old) {
        struct sl_disk_status disk;
        svc_disk_status(svc, &disk);
        if (!disk.available)
            return sl_error_set(err, SL_E_DISK_PRESSURE, 0,
                                "SANDBOX_WORKER_DISK_PRESSURE: no sandbox is prepared");
        char hex[17];
        if (sl_random_hex(hex, 8) < 0)
            return sl_error_errno(err, SL_E_INTERNAL, "no randomness");
        snprintf(e.id, sizeof(e.id), WS_WARM_PREFIX "%s", hex);
        int64_t now = sl_now_us();
        struct sl_route r = {
            .sandbox_id = e.id,
            .workspace_scope_id = (char *)"",
            .worker_id = svc->worker_id,
            .worker_epoch = svc->worker_epoch,
            .generation = 0,
            .profile_id = svc->cfg->profile_id,
            .profile_hash = svc->profile_hash,
            .last_active_at = now,
            .generation_created_by = (char *)"warm-pool",
            .last_lifetime_ms = -1,
            .created_at = now,
            .updated_at = now,
        };
        snprintf(r.status, sizeof(r.status), WARM_STATUS);
        snprintf(r.storage_mode, sizeof(r.storage_mode), "local");
        int rc = svc_route_insert_new(svc, &r, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return sl_error_set(err, SL_E_INTERNAL, EEXIST, "warm id %s drawn twice", e.id);
        e.uid = (uid_t)r.sandbox_uid;
    }
    int rc = prepare(svc, e.id, e.uid, err);
    pthread_mutex_lock(&w->lock);
    bool kept = push(rc == 0 ? &w->ready : &w->unready, &e);
    if (rc == 0 && kept)
        w->made_total++;
    pthread_mutex_unlock(&w->lock);
    if (rc == 0 && !kept) {
        drop(svc, &e);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    return rc;
}

/* This worker's WARM rows of an earlier run: unready, prepared as the
 * pool needs them (their processes ended with that run). */
static void adopt_leftovers(struct sl_service *svc)
{
    struct sl_route_filter f = {.status = WARM_STATUS, .worker_id = svc->worker_id, .limit = 1000};
    struct sl_route *v = NULL;
    size_t n = 0, taken = 0;
    int64_t total = 0;
    struct sl_error err = {0};
    if (svc->store->ops->route_list(svc->store, &f, &v, &n, &total, &err) < 0) {
        sl_warn("warm pool: cannot read the WARM routes of an earlier run: %s",
                sl_error_text(&err));
        return;
    }
    pthread_mutex_lock(&svc->warm.lock);
    for (size_t i = 0; i < n; i++) {
        struct svc_warm_entry e = {.uid = (uid_t)v[i].sandbox_uid};
        if (strncmp(v[i].sandbox_id, WS_WARM_PREFIX, strlen(WS_WARM_PREFIX)) != 0 ||
            strlen(v[i].sandbox_id) >= sizeof(e.id))
            continue;
        snprintf(e.id, sizeof(e.id), "%s", v[i].sandbox_id);
        taken += push(&svc->warm.unready, &e);
    }
    pthread_mutex_unlock(&svc->warm.lock);
    if (taken > 0)
        sl_info("warm pool: %zu WARM routes of an earlier run taken up", taken);
    sl_routes_free(v, n);
}

/* Wait on the pool's condition for at most us, under its lock. */
static void wait_us(struct svc_warm *w, int64_t us)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += us / 1000000;
    ts.tv_nsec += (us % 1000000) * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&w->cond, &w->lock, &ts);
}

static void *warm_loop(void *arg)
{
    struct sl_service *svc = arg;
    struct svc_warm *w = &svc->warm;
    /* Behind every command: the scheduler serves this thread, and the
     * sandloom-init processes it starts, last (a taken session is given
     * back the normal priority, runtime/session.c). */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WARM_NICE) < 0)
        sl_warn("warm pool: cannot lower the refill's priority: %s", strerror(errno));
    adopt_leftovers(svc);
    size_t target = (size_t)svc->cfg->warm_pool_size;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        if (w->ready.n >= target) {
            wait_us(w, 1000000);
            continue;
        }
        /* A refill is a session build, tens of milliseconds of both cores.
         * Right after a take it would compete with that sandbox's first
         * command (the reason for the pool), so it waits a moment. */
        int64_t quiet_at = w->last_take_us + REFILL_DELAY_US;
        if (sl_mono_us() < quiet_at) {
            wait_us(w, quiet_at - sl_mono_us());
            continue;
        }
        pthread_mutex_unlock(&w->lock);
        struct sl_error err = {0};
        int rc = make_one(svc, &err);
        pthread_mutex_lock(&w->lock);
        if (rc < 0) {
            w->failures_total++;
            sl_warn("warm pool: cannot prepare a sandbox: %s", sl_error_text(&err));
            wait_us(w, RETRY_US);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int svc_warm_start(struct sl_service *svc, struct sl_error *err)
{
    struct svc_warm *w = &svc->warm; /* lock and cond: made with the service */
    if (svc->cfg->warm_pool_size <= 0)
        return 0;
    if (!svc->cfg->session_idle_seconds) {
        sl_warn("warm pool: SANDBOX_WARM_POOL_SIZE=%lld needs warm sessions "
                "(SANDBOX_SESSION_IDLE_SECONDS above 0): no sandbox is prepared",
                (long long)svc->cfg->warm_pool_size);
        return 0;
    }
    if (pthread_create(&w->thread, NULL, warm_loop, svc) != 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot start the warm pool's thread");
    w->started = true;
    return 0;
}

void svc_warm_stop(struct sl_service *svc)
{
    struct svc_warm *w = &svc->warm;
    if (w->started) {
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        w->started = false;
    }
    free(w->ready.v);
    free(w->unready.v);
    w->ready = w->unready = (struct svc_warm_list){0};
}

int svc_warm_insert(struct sl_service *svc, struct sl_route *r, struct sl_error *err)
{
    struct svc_warm *w = &svc->warm;
    if (!w->started)
        return -2;
    struct svc_warm_entry e;
    pthread_mutex_lock(&w->lock);
    bool have = pop(&w->ready, &e);
    pthread_mutex_unlock(&w->lock);
    if (!have)
        return -2;
    r->sandbox_uid = e.uid;
    int rc = svc->store->ops->route_take_warm(svc->store, e.id, r, err);
    if (rc == 1) {
        char from[4096], to[4096];
        root_of(svc, e.id, from, sizeof(from));
        root_of(svc, r->sandbox_id, to, sizeof(to));
        struct sl_error e2 = {0};
        if (ws_warm_claim(svc->cfg->workspace_root, e.id, r->sandbox_id, &e2) < 0) {
            /* The route is the sandbox's: it gets a directory and a
             * session as any new sandbox does. */
            sl_warn("warm pool: %s starts without its prepared session: %s", r->sandbox_id,
                    sl_error_text(&e2));
            if (sl_rt_kill_sandbox(svc->runtime, e.uid, &e2) < 0)
                sl_warn("warm pool: %s", sl_error_text(&e2));
            (void)ws_sandbox_trash(svc->cfg->workspace_root, e.id, &e2);
        } else if (!sl_rt_session_adopt(svc->runtime, e.uid, from, to)) {
            sl_info("warm pool: the prepared session of %s had ended", r->sandbox_id);
        }
    }
    /* 0 or -1: the row is unchanged in the store, the entry still ready.
     * -2: the row is not WARM any more, not ours to give (the caller
     * draws a uid). */
    pthread_mutex_lock(&w->lock);
    bool lost = rc == -2 || (rc != 1 && !push(&w->ready, &e));
    if (rc == 1) {
        w->taken_total++;
        w->last_take_us = sl_mono_us();
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    if (lost)
        drop(svc, &e);
    return rc;
}

json_t *svc_warm_status(struct sl_service *svc)
{
    struct svc_warm *w = &svc->warm;
    pthread_mutex_lock(&w->lock);
    json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:I}", "target",
                          (json_int_t)(w->started ? svc->cfg->warm_pool_size : 0), "ready",
                          (json_int_t)w->ready.n, "taken_total", (json_int_t)w->taken_total,
                          "made_total", (json_int_t)w->made_total, "failures_total",
                          (json_int_t)w->failures_total);
    pthread_mutex_unlock(&w->lock);
    return o;
}
