/* The runtime's entry points: opening it (the host's cgroups, then the
 * selected backend's probe), starting executions one-shot or in warm
 * sessions, and closing it. The boundary itself is the backend's (native.c,
 * gvisor.c); supervision is supervise.c's. */
#include "runtime/runtime.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "runtime/cgroup.h"
#include "runtime/seccomp.h"
#include "runtime/spawn.h"

#include "runtime/internal.h"

void sl_rt_exec_result_free(struct sl_rt_exec_result *r)
{
    if (!r)
        return;
    sl_buf_free(&r->out);
    sl_buf_free(&r->err);
}

int rt_request_check(const struct sl_rt_exec_request *req, struct sl_error *err)
{
    if (!req->argv || !req->argv[0])
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "empty command");
    if (!req->cwd || req->cwd[0] != '/')
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "cwd must be an absolute path");
    if (req->timeout_ms <= 0)
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "timeout must be positive");
    if (req->tty.on && (!req->tty.master || !req->tty.cols || !req->tty.rows))
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "a terminal needs a size and a master");
    return 0;
}

/* The child sees the host under /oldroot while it builds its tree. */

static int rt_exec_start_ns(struct sl_runtime *rt, unsigned ns, bool session,
                            const struct sl_rt_exec_request *req, sl_rt_exec_done_fn done,
                            void *ctx, struct sl_rt_exec **out, struct sl_error *err)
{
    if (out)
        *out = NULL;
    if (rt_request_check(req, err) < 0)
        return -1;
    if (!session && !rt->backend->oneshot_launch)
        return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                            "the %s backend runs commands in warm sessions only",
                            rt->backend->name);
    if (req->tty.on && !session)
        return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                            "a terminal needs warm sessions (SANDBOX_SESSION_IDLE_SECONDS > 0)");
    struct sl_rt_exec *x = rt_exec_new(rt, req, done, ctx);
    if (!x)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    /* The command's own cgroup first: the launch puts the command in it
     * before it runs anything, so its whole tree is in there. A session
     * launch makes it (or takes its session's spare) itself. */
    bool want_cgroup =
        rt->backend->exec_cgroups && rt->cgroups && sl_cgroups_exec_supported(rt->cgroups);
    if (want_cgroup && !session) {
        x->cg_seq = atomic_fetch_add(&rt->exec_seq, 1) + 1;
        x->cg_procs_fd = sl_cgroup_exec_create(rt->cgroups, req->uid, x->cg_seq, err);
        if (x->cg_procs_fd < 0) {
            sl_rt_exec_put(x);
            return -1;
        }
        x->cg_exec = true;
    }
    int rc = session ? rt_session_launch(rt, req, x, want_cgroup, err)
                     : rt->backend->oneshot_launch(rt, ns, req, x, err);
    if (x->cg_procs_fd >= 0) {
        close(x->cg_procs_fd);
        x->cg_procs_fd = -1;
    }
    if (rc < 0 || rt_exec_submit(x, err) < 0) {
        if (x->cg_exec && !x->launched)
            sl_cgroup_exec_remove(rt->cgroups, req->uid, x->cg_seq);
        sl_rt_exec_put(x);
        return -1;
    }
    if (out)
        *out = x;
    else
        sl_rt_exec_put(x);
    return 0;
}

int sl_rt_exec_start(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                     sl_rt_exec_done_fn done, void *ctx, struct sl_rt_exec **out,
                     struct sl_error *err)
{
    return rt_exec_start_ns(rt, rt->ns, rt->warm_sessions, req, done, ctx, out, err);
}

/* Waiting for one execution: the completion moves the result here. */
struct sync_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    struct sl_rt_exec_result *res;
};

static void sync_done(struct sl_rt_exec_result *res, void *ctx)
{
    struct sync_wait *w = ctx;
    pthread_mutex_lock(&w->lock);
    *w->res = *res;
    memset(res, 0, sizeof(*res)); /* the buffers are the waiter's now */
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int rt_run(struct sl_runtime *rt, unsigned ns, bool session, const struct sl_rt_exec_request *req,
           struct sl_rt_exec_result *res, struct sl_error *err)
{
    memset(res, 0, sizeof(*res));
    struct sync_wait w = {.res = res};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    int rc = rt_exec_start_ns(rt, ns, session, req, sync_done, &w, NULL, err);
    if (rc == 0) {
        pthread_mutex_lock(&w.lock);
        while (!w.done)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
    }
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return rc;
}

int sl_rt_exec(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
               struct sl_rt_exec_result *res, struct sl_error *err)
{
    return rt_run(rt, rt->ns, rt->warm_sessions, req, res, err);
}

int sl_rt_kill_sandbox(struct sl_runtime *rt, uid_t uid, struct sl_error *err)
{
    rt_session_stop_uid(rt, uid);
    if (sl_spawn_kill_uid(uid) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot stop the sandbox's processes");
    if (rt->cgroups)
        sl_cgroup_remove(rt->cgroups, uid);
    return 0;
}

int sl_rt_running(const struct sl_runtime *rt)
{
    return atomic_load(&rt->running);
}

const struct sl_rt_profile *sl_rt_profile(const struct sl_runtime *rt)
{
    return &rt->profile;
}

void sl_rt_close(struct sl_runtime *rt)
{
    if (!rt)
        return;
    rt_sessions_stop_all(rt);
    rt_supervisor_stop(rt);
    if (rt->backend && rt->backend->close)
        rt->backend->close(rt);
    sl_spawn_layout_free(&rt->layout);
    sl_cgroups_close(rt->cgroups);
    pthread_mutex_destroy(&rt->sessions_lock);
    pthread_cond_destroy(&rt->sessions_changed);
    free(rt->sessions);
    free(rt);
}

/* The backend SANDBOX_EXECUTION_BACKEND names. */
static const struct rt_backend *backend_named(const char *name)
{
    static const struct rt_backend *const all[] = {&rt_backend_native, &rt_backend_gvisor};
    for (size_t i = 0; i < SL_ARRAY_LEN(all); i++)
        if (strcmp(all[i]->name, name ? name : "native") == 0)
            return all[i];
    return NULL;
}

int sl_rt_open(const struct sl_rt_options *opt, struct sl_runtime **out, struct sl_error *err)
{
    *out = NULL;
    const struct rt_backend *backend = backend_named(opt->backend);
    if (!backend)
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_EXECUTION_BACKEND: no backend '%s' "
                            "in this build", opt->backend);
    if (!opt->probe_root || opt->probe_root[0] != '/')
        return sl_error_set(err, SL_E_CONFIG, 0, "probe root must be an absolute path");
    struct sl_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    rt->backend = backend;
    atomic_init(&rt->running, 0);
    pthread_mutex_init(&rt->sessions_lock, NULL);
    pthread_cond_init(&rt->sessions_changed, NULL);
    rt->net_ns = opt->network_isolated || opt->privnet;
    rt->privnet = opt->privnet;
    rt->warm_sessions = opt->warm_sessions;
    if (rt_supervisor_start(rt, err) < 0) {
        rt_supervisor_stop(rt);
        pthread_mutex_destroy(&rt->sessions_lock);
        free(rt);
        return -1;
    }
    if (sl_spawn_layout_init(opt, &rt->layout, err) < 0) {
        rt_supervisor_stop(rt);
        pthread_mutex_destroy(&rt->sessions_lock);
        free(rt);
        return -1;
    }
    struct sl_cgroup_limits limits = {
        .memory_bytes = opt->memory_limit_bytes,
        .pids = opt->pids_limit,
        .cpus = opt->cpu_limit,
    };
    struct sl_rt_profile *pr = &rt->profile;
    snprintf(pr->backend, sizeof(pr->backend), "%s", backend->name);
    if (sl_cgroups_open(&limits, &rt->cgroups, err) < 0)
        goto fail;
    pr->cgroup_version = (int)sl_cgroups_version(rt->cgroups);
    pr->memory_quota = sl_cgroups_memory(rt->cgroups);
    pr->pids_quota = sl_cgroups_pids(rt->cgroups);
    pr->cpu_quota = sl_cgroups_cpu(rt->cgroups);
    snprintf(pr->cgroup_note, sizeof(pr->cgroup_note), "%s", sl_cgroups_why(rt->cgroups));
    if (opt->favor_dynmods && pr->cgroup_version != SL_CGROUP_NONE)
        pr->favordynmods =
            sl_cgroup_favor_dynmods(pr->favordynmods_note, sizeof(pr->favordynmods_note)) == 1;
    pr->network_isolated = opt->network_isolated;
    pr->network_private = opt->privnet != NULL;
    if (backend->open(rt, opt, err) < 0)
        goto fail;
    *out = rt;
    return 0;
fail:
    sl_rt_close(rt);
    return -1;
}

void sl_rt_sandbox_usage(struct sl_runtime *rt, uid_t uid, struct sl_cgroup_usage *out)
{
    if (rt->cgroups)
        sl_cgroup_usage(rt->cgroups, uid, out);
    else
        *out = (struct sl_cgroup_usage){-1, -1, -1, -1};
}
