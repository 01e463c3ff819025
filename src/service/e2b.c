/* E2B sandboxes: the service half of the E2B protocol (e2b/ is the wire).
 *
 * A sandbox made through E2B's control plane is a Sandloom sandbox like
 * any other: resolved and connected at once (so it is READY when the SDK
 * gets its id), fenced, limited and recorded the same way, in its
 * tenant's namespace. What E2B adds is kept in agent_sandbox_e2b beside
 * the route: the template it was asked for, its metadata and environment,
 * and a lifetime deadline (E2B's timeout) which this worker enforces
 * itself once a second for the sandboxes it owns: kill (release) or pause
 * (the files-only suspend), as the create asked. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "service/internal.h"
#include "service/service.h"
#include "runtime/cgroup.h"
#include "runtime/runtime.h"
#include "store/store.h"
#include "workspace/layout.h"
#include "workspace/quota.h"

#define E2B_ACTOR "system:e2b-timeout"
/* The templates E2B's SDKs name by default: a plain sandbox here. */
#define E2B_TEMPLATE_BASE "base"
#define E2B_TEMPLATE_INTERPRETER "code-interpreter-v1"
/* Deadlines acted on per tick. */
#define E2B_DUE_BATCH 32
/* How long a pause waits for the killed processes to be recorded. */
#define E2B_PAUSE_WAIT_US (10 * 1000000LL)

static int e2b_available(struct sl_service *svc, struct sl_error *err)
{
    if (svc->store->e2b)
        return 0;
    return sl_error_set(err, SL_E_E2B_UNAVAILABLE, 0,
                        "this database has no E2B table (agent_sandbox_e2b): apply the deploy "
                        "SQL (deploy/sql/) or enable SANDBOX_DATABASE_AUTO_DDL, then restart");
}

int sl_svc_current_generation(struct sl_service *svc, const char *sandbox_id,
                              int64_t *generation, struct sl_error *err)
{
    /* Live here: the live table is this worker's word (an exec's admission
     * re-checks it against the route anyway). */
    uid_t uid;
    if (svc_live_current(svc, sandbox_id, generation, &uid) == 0)
        return 0;
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found < 0)
        return -1;
    if (found == 0 || strcmp(r.status, "RELEASED") == 0) {
        sl_route_clear(&r);
        return sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "no such sandbox");
    }
    *generation = r.generation;
    sl_route_clear(&r);
    return 0;
}

int sl_svc_e2b_get(struct sl_service *svc, const char *sandbox_id, struct sl_e2b_sandbox *out,
                   struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    if (e2b_available(svc, err) < 0)
        return -1;
    int found = svc->store->ops->e2b_get(svc->store, sandbox_id, out, err);
    if (found < 0)
        return -1;
    if (found == 0 || strcmp(out->status, "RELEASED") == 0 ||
        strcmp(out->status, "RELEASING") == 0) {
        sl_e2b_sandbox_clear(out);
        return sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "no such sandbox");
    }
    return 0;
}

static int64_t generation_of(const json_t *doc)
{
    return json_integer_value(json_object_get(doc, "generation"));
}

/* envVars by sandbox, once read: a small table, oldest forgotten first
 * (a miss costs one read of the row). An id is never reused by E2B's
 * create, and its envVars never change, so an entry cannot go stale. */
#define ENV_CACHE 1024
static struct {
    pthread_mutex_t lock;
    struct {
        char id[160];
        char *env; /* NULL: none */
    } v[ENV_CACHE];
    size_t next;
} env_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void env_cache_put(const char *id, const char *env)
{
    char *copy = env ? strdup(env) : NULL;
    if (env && !copy)
        return;
    pthread_mutex_lock(&env_cache.lock);
    size_t i = env_cache.next;
    env_cache.next = (env_cache.next + 1) % ENV_CACHE;
    free(env_cache.v[i].env);
    snprintf(env_cache.v[i].id, sizeof(env_cache.v[i].id), "%s", id);
    env_cache.v[i].env = copy;
    pthread_mutex_unlock(&env_cache.lock);
}

char *sl_svc_e2b_env(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&env_cache.lock);
    for (size_t i = 0; i < ENV_CACHE; i++)
        if (env_cache.v[i].id[0] && strcmp(env_cache.v[i].id, sandbox_id) == 0) {
            char *env = env_cache.v[i].env ? strdup(env_cache.v[i].env) : NULL;
            pthread_mutex_unlock(&env_cache.lock);
            return env;
        }
    pthread_mutex_unlock(&env_cache.lock);
    struct sl_e2b_sandbox e;
    struct sl_error err = {0};
    if (sl_svc_e2b_get(svc, sandbox_id, &e, &err) < 0)
        return NULL; /* not an E2B sandbox, or the store failed: none */
    char *env = e.env_json ? strdup(e.env_json) : NULL;
    env_cache_put(sandbox_id, env);
    sl_e2b_sandbox_clear(&e);
    return env;
}

/* The connect of a create placed on a peer: what a forwarded connect sends
 * (API.md §9.2: the route's uid, profile and the owner's epoch). */
static json_t *owner_connect(struct sl_service *svc, const struct sl_error_owner *owner,
                             const char *sandbox_id, struct sl_error *err)
{
    _cleanup_json_ json_t *body = json_pack(
        "{s:I,s:I,s:s,s:s}", "generation", (json_int_t)owner->generation, "sandbox_uid",
        (json_int_t)owner->sandbox_uid, "profile", owner->profile_id, "worker_epoch",
        owner->worker_epoch);
    if (!body)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory"), NULL;
    json_t *doc = svc_owner_call(svc, owner, "POST", sandbox_id, "", body, err);
    if (!doc)
        sl_error_wrap(err, "connect the new sandbox on its worker");
    return doc;
}

/* Its template attached there too, for the tenant that creates it (the
 * worker protocol's calls carry the operator's token). */
static json_t *owner_attach(struct sl_service *svc, const struct sl_error_owner *owner,
                            const struct sl_e2b_new *n, struct sl_error *err)
{
    _cleanup_json_ json_t *body = json_pack("{s:I,s:[s]}", "generation",
                                            (json_int_t)owner->generation, "templates",
                                            n->template_id);
    /* "tenant_id": the worker protocol's field for it (api/forward.h's
     * SL_FORWARD_TENANT_FIELD, which the API's forwards add the same way). */
    if (body && n->owner)
        json_object_set_new(body, "tenant_id", json_string(n->owner));
    if (!body)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory"), NULL;
    json_t *doc = svc_owner_call(svc, owner, "PUT", n->sandbox_id, "/templates", body, err);
    if (!doc)
        sl_error_wrap(err, "attach template %s on the sandbox's worker", n->template_id);
    return doc;
}

int sl_svc_e2b_create(struct sl_service *svc, const struct sl_e2b_new *n,
                      struct sl_e2b_sandbox *out, struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    if (e2b_available(svc, err) < 0)
        return -1;
    _cleanup_json_ json_t *route =
        sl_svc_resolve(svc, n->sandbox_id, n->scope, "coding-default", n->actor, err);
    if (!route)
        return sl_error_wrap(err, "resolve the new sandbox");
    int64_t generation = generation_of(route);
    _cleanup_json_ json_t *connected = sl_svc_connect(svc, n->sandbox_id, generation, err);
    /* Placed on a peer (the fleet's least loaded worker): the sandbox is
     * made there over the worker protocol, as a forwarded connect is, and
     * this replica finishes the create (the E2B row is the store's). */
    struct sl_error_owner owner = {0};
    bool remote = !connected && err && sl_error_is(err, SL_E_OWNED_ELSEWHERE);
    if (remote) {
        owner = err->owner;
        connected = owner_connect(svc, &owner, n->sandbox_id, err);
    }
    /* Any other template is a Sandloom template (the tenant's own first,
     * then a public one), mounted read-only at /envs/<name>. */
    bool plain = strcmp(n->template_id, E2B_TEMPLATE_BASE) == 0 ||
                 strcmp(n->template_id, E2B_TEMPLATE_INTERPRETER) == 0;
    _cleanup_json_ json_t *attached = NULL;
    if (connected && !plain && remote)
        attached = owner_attach(svc, &owner, n, err);
    else if (connected && !plain)
        attached = sl_svc_template_attach(svc, n->sandbox_id, generation, n->owner,
                                          (const char *const[]){n->template_id}, 1, err);
    struct sl_e2b_sandbox row = {.started_at = sl_now_us()};
    snprintf(row.sandbox_id, sizeof(row.sandbox_id), "%s", n->sandbox_id);
    snprintf(row.template_id, sizeof(row.template_id), "%s", n->template_id);
    snprintf(row.on_timeout, sizeof(row.on_timeout), "%s", n->pause_on_timeout ? "pause" : "kill");
    row.metadata_json = (char *)n->metadata_json;
    row.env_json = (char *)n->env_json;
    row.end_at = row.started_at + n->timeout_seconds * 1000000;
    int inserted = connected && (plain || attached)
                       ? svc->store->ops->e2b_insert(svc->store, &row, err)
                       : -1;
    if (inserted == 0)
        sl_error_set(err, SL_E_INTERNAL, 0, "a new E2B sandbox's id is taken");
    if (inserted != 1) {
        /* Nothing half-made is left: the route is released at once. */
        struct sl_error undo = {0};
        json_t *gone = svc_release(svc, n->sandbox_id, "CLIENT_RELEASE", n->actor, &undo);
        if (!gone)
            sl_warn("e2b: cannot release the sandbox of a failed create: %s",
                    sl_error_text(&undo));
        json_decref(gone);
        return -1;
    }
    env_cache_put(n->sandbox_id, n->env_json);
    return sl_svc_e2b_get(svc, n->sandbox_id, out, err);
}

int sl_svc_e2b_set_timeout(struct sl_service *svc, const char *sandbox_id,
                           int64_t timeout_seconds, struct sl_error *err)
{
    struct sl_e2b_sandbox e;
    if (sl_svc_e2b_get(svc, sandbox_id, &e, err) < 0)
        return -1;
    sl_e2b_sandbox_clear(&e);
    int64_t now = sl_now_us();
    int rc = svc->store->ops->e2b_set_end(svc->store, sandbox_id, now + timeout_seconds * 1000000,
                                          NULL, now, err);
    if (rc == 0)
        return sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "no such sandbox");
    return rc < 0 ? -1 : 0;
}

/* Every process of the sandbox killed and recorded: E2B's processes run
 * side by side with no end of their own, while a sandbox that runs a
 * command can neither be suspended nor released. */
static int stop_processes(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    if (svc_execs_kill(svc, sandbox_id) == 0)
        return 0;
    /* SIGKILL ends them at once; their completions then write the
     * records, after which the route is no longer RUNNING. Polled in
     * memory only (the running table), then the route a few times. */
    int64_t until = sl_mono_us() + E2B_PAUSE_WAIT_US;
    while (svc_execs_running(svc, sandbox_id) > 0 && sl_mono_us() < until)
        usleep(5000);
    for (int i = 0; i < 20; i++) {
        struct sl_route r = {0};
        int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
        bool busy = found == 1 && r.active_exec_id;
        sl_route_clear(&r);
        if (found < 0)
            return -1;
        if (!busy)
            return 0;
        usleep(10000);
    }
    return 0; /* the suspend or release says what still holds it */
}

/* Files-only: an E2B pause stops what runs (E2B keeps it; this backend
 * cannot), then the sandbox is suspended as any other. */
static int pause_now(struct sl_service *svc, const struct sl_e2b_sandbox *e, struct sl_error *err)
{
    if (stop_processes(svc, e->sandbox_id, err) < 0)
        return -1;
    _cleanup_json_ json_t *doc = sl_svc_suspend(svc, e->sandbox_id, e->generation, false, err);
    return doc ? 0 : -1;
}

static int kill_now(struct sl_service *svc, const char *sandbox_id, const char *reason,
                    const char *actor, struct sl_error *err)
{
    if (stop_processes(svc, sandbox_id, err) < 0)
        return -1;
    _cleanup_json_ json_t *doc = svc_release(svc, sandbox_id, reason, actor, err);
    return doc ? 0 : -1;
}

int sl_svc_e2b_pause(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    struct sl_e2b_sandbox e;
    if (sl_svc_e2b_get(svc, sandbox_id, &e, err) < 0)
        return -1;
    int rc;
    if (strcmp(e.status, "SUSPENDED") == 0 || strcmp(e.status, "SUSPENDING") == 0)
        rc = sl_error_set(err, SL_E_ALREADY_PAUSED, 0, "the sandbox is already paused");
    else
        rc = pause_now(svc, &e, err);
    sl_e2b_sandbox_clear(&e);
    return rc;
}

int sl_svc_e2b_connect(struct sl_service *svc, const char *sandbox_id, int64_t timeout_seconds,
                       bool *resumed, struct sl_e2b_sandbox *out, struct sl_error *err)
{
    *resumed = false;
    if (sl_svc_e2b_get(svc, sandbox_id, out, err) < 0)
        return -1;
    if (strcmp(out->status, "SUSPENDED") == 0 || strcmp(out->status, "SUSPENDING") == 0) {
        _cleanup_json_ json_t *doc = sl_svc_resume(svc, sandbox_id, err);
        if (!doc) {
            sl_e2b_sandbox_clear(out);
            return -1;
        }
        *resumed = true;
    }
    int64_t now = sl_now_us();
    if (timeout_seconds <= 0 && out->end_at <= now)
        timeout_seconds = svc->cfg->e2b_default_timeout_seconds;
    if (timeout_seconds > 0 &&
        svc->store->ops->e2b_set_end(svc->store, sandbox_id, now + timeout_seconds * 1000000,
                                     NULL, now, err) < 0) {
        sl_e2b_sandbox_clear(out);
        return -1;
    }
    sl_e2b_sandbox_clear(out);
    return sl_svc_e2b_get(svc, sandbox_id, out, err);
}

int sl_svc_e2b_list(struct sl_service *svc, const char *id_prefix, const char *after,
                    int64_t limit, struct sl_e2b_sandbox **out, size_t *n, struct sl_error *err)
{
    *out = NULL;
    *n = 0;
    if (e2b_available(svc, err) < 0)
        return -1;
    return svc->store->ops->e2b_list(svc->store, id_prefix, after, limit, out, n, err);
}

int sl_svc_e2b_kill(struct sl_service *svc, const char *sandbox_id, const char *actor,
                    struct sl_error *err)
{
    struct sl_e2b_sandbox e;
    if (sl_svc_e2b_get(svc, sandbox_id, &e, err) < 0)
        return -1;
    sl_e2b_sandbox_clear(&e);
    return kill_now(svc, sandbox_id, "CLIENT_RELEASE", actor, err);
}

static void e2b_cycle(struct sl_service *svc)
{
    if (!svc->store->e2b)
        return;
    struct sl_error err = {0};
    struct sl_e2b_sandbox *due = NULL;
    size_t n = 0;
    if (svc->store->ops->e2b_due(svc->store, sl_svc_worker_id(svc), sl_now_us(), E2B_DUE_BATCH,
                                 &due, &n, &err) < 0) {
        sl_warn("e2b: cannot read the sandboxes past their timeout: %s", sl_error_text(&err));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct sl_e2b_sandbox *e = &due[i];
        struct sl_error e_err = {0};
        bool pause = strcmp(e->on_timeout, "pause") == 0;
        int rc;
        if (pause) {
            rc = pause_now(svc, e, &e_err);
        } else {
            rc = kill_now(svc, e->sandbox_id, "E2B_TIMEOUT", E2B_ACTOR, &e_err);
        }
        if (rc < 0)
            sl_warn("e2b: sandbox %s past its timeout could not be %s: %s", e->sandbox_id,
                    pause ? "paused" : "killed", sl_error_text(&e_err));
        else
            sl_info("e2b: sandbox %s %s at the end of its timeout", e->sandbox_id,
                    pause ? "paused" : "killed");
    }
    sl_e2b_sandboxes_free(due, n);
}

static void *e2b_loop(void *arg)
{
    struct sl_service *svc = arg;
    pthread_mutex_lock(&svc->loop_lock);
    while (!svc->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&svc->loop_cond, &svc->loop_lock, &ts);
        if (svc->stopping)
            break;
        pthread_mutex_unlock(&svc->loop_lock);
        e2b_cycle(svc);
        pthread_mutex_lock(&svc->loop_lock);
    }
    pthread_mutex_unlock(&svc->loop_lock);
    return NULL;
}

int svc_e2b_start(struct sl_service *svc, struct sl_error *err)
{
    if (!svc->store->e2b)
        return 0;
    if (pthread_create(&svc->e2b_thread, NULL, e2b_loop, svc) != 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot start the E2B lifetimes thread");
    svc->e2b_started = true;
    return 0;
}

void svc_e2b_join(struct sl_service *svc)
{
    if (svc->e2b_started)
        pthread_join(svc->e2b_thread, NULL);
    svc->e2b_started = false;
}

/* ---- usage (E2B's metrics) ---- */

/* The CPU time a sandbox had at its last sample, so a sample says how busy
 * it was since: a small table, oldest forgotten first. */
#define USAGE_SAMPLES 1024
/* A first sample has no earlier one: it measures over this long. */
#define USAGE_FIRST_WINDOW_US 100000
/* A disk count reads at most this many entries of a sandbox. */
#define USAGE_MAX_INODES 200000

static struct {
    pthread_mutex_t lock;
    struct {
        char id[160];
        int64_t at_us, cpu_usec;
    } v[USAGE_SAMPLES];
    size_t next;
} samples = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool sample_swap(const char *id, int64_t at_us, int64_t cpu_usec, int64_t *prev_at,
                        int64_t *prev_cpu)
{
    bool found = false;
    pthread_mutex_lock(&samples.lock);
    size_t slot = samples.next;
    for (size_t i = 0; i < USAGE_SAMPLES; i++)
        if (strcmp(samples.v[i].id, id) == 0) {
            found = true;
            slot = i;
            *prev_at = samples.v[i].at_us;
            *prev_cpu = samples.v[i].cpu_usec;
            break;
        }
    if (!found)
        samples.next = (samples.next + 1) % USAGE_SAMPLES;
    snprintf(samples.v[slot].id, sizeof(samples.v[slot].id), "%s", id);
    samples.v[slot].at_us = at_us;
    samples.v[slot].cpu_usec = cpu_usec;
    pthread_mutex_unlock(&samples.lock);
    return found;
}

json_t *sl_svc_sandbox_usage(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    int64_t generation = 0;
    uid_t uid = 0;
    /* Only a sandbox live here has this worker's cgroups (one suspended,
     * or another worker's, runs nothing here): else nothing is counted. */
    struct sl_cgroup_usage u = {-1, -1, -1, -1};
    if (svc_live_current(svc, sandbox_id, &generation, &uid) == 0)
        sl_rt_sandbox_usage(svc->runtime, uid, &u);
    int64_t now = sl_mono_us(), prev_at = 0, prev_cpu = 0;
    double cpu_pct = 0;
    if (u.cpu_usec >= 0) {
        if (!sample_swap(sandbox_id, now, u.cpu_usec, &prev_at, &prev_cpu)) {
            usleep(USAGE_FIRST_WINDOW_US);
            struct sl_cgroup_usage later;
            sl_rt_sandbox_usage(svc->runtime, uid, &later);
            prev_at = now;
            prev_cpu = u.cpu_usec;
            now = sl_mono_us();
            u.cpu_usec = later.cpu_usec >= 0 ? later.cpu_usec : u.cpu_usec;
            sample_swap(sandbox_id, now, u.cpu_usec, &prev_at, &prev_cpu);
            prev_at = now - USAGE_FIRST_WINDOW_US;
        }
        int cpus = svc->cfg->cpu_limit > 0 ? (int)svc->cfg->cpu_limit : 1;
        if (now > prev_at && u.cpu_usec >= prev_cpu)
            cpu_pct = 100.0 * (double)(u.cpu_usec - prev_cpu) / (double)(now - prev_at) /
                      (cpus > 0 ? cpus : 1);
    }
    int64_t disk = -1, inodes = 0;
    struct sl_error open_err = {0};
    int root = ws_sandbox_open(svc->cfg->workspace_root, sandbox_id, &open_err);
    if (root >= 0) {
        int dir = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir >= 0) {
            if (ws_quota_usage(dir, USAGE_MAX_INODES, &disk, &inodes) < 0)
                disk = -1;
            close(dir);
        }
        close(root);
    }
    json_t *doc = json_pack("{s:I,s:f,s:I,s:I,s:I,s:I,s:I}", "cpu_usec", (json_int_t)u.cpu_usec,
                            "cpu_used_pct", cpu_pct, "memory_bytes",
                            (json_int_t)u.memory_bytes, "cache_bytes", (json_int_t)u.cache_bytes,
                            "memory_limit", (json_int_t)u.memory_limit, "disk_bytes",
                            (json_int_t)disk, "disk_limit",
                            (json_int_t)svc->cfg->workspace_quota_bytes);
    if (!doc)
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return doc;
}
