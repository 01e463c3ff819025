/* The runtime: startup probe and level selection, and the supervision of one
 * execution (output capture, deadline, kill, reap). Entering the sandbox is
 * spawn.c's job. */
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

enum { LEVEL_BASIC, LEVEL_STANDARD, LEVEL_STRICT, LEVEL_COUNT };
static const char *const level_names[LEVEL_COUNT] = {"basic", "standard", "strict"};

#define PROBE_TIMEOUT_MS 15000

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
#define OLDROOT_PREFIX "/oldroot"

struct net_attach {
    struct sl_runtime *rt;
    uid_t uid;
    const struct sl_rt_egress *egress;
    int slot;
};

/* Before the sandbox goes on: its network namespace gets its link. A
 * failure leaves it with loopback only (the privnet keeps why, for the
 * sandbox's status): no network, never an open one. */
static int attach_network(void *ctx, pid_t pid, struct sl_error *err)
{
    (void)err;
    struct net_attach *a = ctx;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    struct sl_error why = {0};
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sl_error_errno(&why, SL_E_RUNTIME, "cannot open the sandbox's network namespace");
        sl_warn("sandbox uid %u has no network: %s", (unsigned)a->uid, sl_error_text(&why));
        return 0;
    }
    a->slot = sl_privnet_attach(a->rt->privnet, a->uid, fd, a->egress ? a->egress->policy : NULL,
                                a->egress ? a->egress->bound : NULL, &why);
    if (why.code)
        sl_warn("sandbox uid %u has no network: %s", (unsigned)a->uid, sl_error_text(&why));
    return 0;
}

/* Spawn sandloom-init into the runtime's namespaces, placed in the uid's
 * cgroups before it runs, with the template trees of `mounts`. */
static int rt_spawn_env(struct sl_runtime *rt, unsigned ns, const char *root, uid_t uid,
                        char *const *argv, char *const *envp, const struct sl_rt_mount *mounts,
                        size_t nmounts, const struct sl_rt_caps *caps,
                        const struct sl_rt_egress *egress, int64_t deadline_us,
                        int session_fd, int exec_cg_fd, int stdin_fd,
                        struct sl_spawn_proc *proc, int *net_slot, struct sl_error *err)
{
    if (net_slot)
        *net_slot = -1;
    static char *const no_env[] = {NULL};
    /* Everything the child reads is prepared here: it may not allocate. */
    _cleanup_free_ struct sl_spawn_mount *smounts =
        nmounts ? calloc(nmounts, sizeof(*smounts)) : NULL;
    _cleanup_free_ char *srcs = NULL;
    size_t srcs_len = 0;
    for (size_t i = 0; i < nmounts; i++)
        srcs_len += sizeof(OLDROOT_PREFIX) + strlen(mounts[i].host_path);
    if (nmounts && (!smounts || !(srcs = malloc(srcs_len))))
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0, off = 0; i < nmounts; i++) {
        int n = sprintf(srcs + off, OLDROOT_PREFIX "%s", mounts[i].host_path);
        smounts[i].name = mounts[i].name;
        smounts[i].src = srcs + off;
        off += (size_t)n + 1;
    }
    struct sl_spawn_request sreq = {
        .sandbox_root = root,
        .uid = uid,
        .pid_ns = (ns & NS_PID) != 0,
        .cgroup_ns = (ns & NS_CGROUP) != 0,
        .net_ns = rt->net_ns,
        .argv = argv,
        .envp = envp ? envp : no_env,
        .deadline_us = deadline_us,
        .session_fd = session_fd,
        .has_stdin = stdin_fd >= 0,
        .stdin_fd = stdin_fd,
        .mounts = smounts,
        .nmounts = nmounts,
    };
    int cgfds[SL_CGROUP_MAX_FDS + 1];
    const struct sl_cgroup_limits cap = {.memory_bytes = caps ? caps->memory_bytes : 0,
                                         .pids = caps ? caps->pids : 0,
                                         .cpus = caps ? caps->cpus : 0};
    int ncg = rt->cgroups ? sl_cgroup_enter_fds(rt->cgroups, uid, &cap, cgfds, err) : 0;
    if (ncg < 0)
        return -1;
    sreq.cgroup_fds = cgfds;
    struct net_attach attach = {.rt = rt, .uid = uid, .egress = egress, .slot = -1};
    if (rt->privnet) {
        sreq.before_go = attach_network;
        sreq.before_go_ctx = &attach;
    }
    /* Last, after the sandbox's own: the command's cgroup, a child of the
     * sandbox's in its hierarchy (a one-shot run's launcher is the command). */
    sreq.n_cgroup_fds = (size_t)ncg + (exec_cg_fd >= 0);
    if (exec_cg_fd >= 0)
        cgfds[ncg] = exec_cg_fd;
    int started = sl_spawn_start(&rt->layout, &sreq, proc, err);
    for (int i = 0; i < ncg; i++)
        close(cgfds[i]);
    if (started < 0 || !net_slot)
        sl_privnet_detach(rt->privnet, attach.slot); /* no-op for -1 */
    else
        *net_slot = attach.slot;
    return started;
}

int rt_spawn(struct sl_runtime *rt, unsigned ns, const char *root, uid_t uid, char *const *argv,
             const struct sl_rt_mount *mounts, size_t nmounts, const struct sl_rt_caps *caps,
             const struct sl_rt_egress *egress, int64_t deadline_us, int session_fd,
             struct sl_spawn_proc *proc, int *net_slot, struct sl_error *err)
{
    return rt_spawn_env(rt, ns, root, uid, argv, NULL, mounts, nmounts, caps, egress,
                        deadline_us, session_fd, -1, -1, proc, net_slot, err);
}

/* One-shot: the launcher is sandloom-init itself, built for this one
 * command; the supervisor watches its pidfd. */
static int rt_oneshot_launch(struct sl_runtime *rt, unsigned ns,
                             const struct sl_rt_exec_request *req, struct sl_rt_exec *x,
                             struct sl_error *err)
{
    size_t argc = 0;
    while (req->argv[argc])
        argc++;
    _cleanup_free_ char **init_argv = calloc(argc + 5, sizeof(*init_argv));
    if (!init_argv)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    init_argv[0] = (char *)"sandloom-init";
    init_argv[1] = (char *)"--cwd";
    init_argv[2] = (char *)req->cwd;
    init_argv[3] = (char *)"--";
    memcpy(init_argv + 4, req->argv, argc * sizeof(*init_argv));
    x->oom_before = rt->cgroups ? sl_cgroup_oom_kills(rt->cgroups, req->uid) : -1;
    struct sl_error spawn_err;
    sl_error_clear(&spawn_err);
    if (rt_spawn_env(rt, ns, req->sandbox_root, req->uid, init_argv, req->envp, req->mounts,
                     req->nmounts, &req->caps, &req->egress, x->deadline_us, -1, x->cg_procs_fd,
                     req->has_stdin ? req->stdin_fd : -1, &x->proc, &x->net_slot,
                     &spawn_err) < 0) {
        if (spawn_err.errnum == ETIMEDOUT) {
            /* The deadline passed while the sandbox was being built: the
             * same outcome as a command killed at its deadline. */
            x->res.timed_out = true;
            x->res.exit_code = -SIGKILL;
            x->res.duration_ms = (sl_mono_us() - x->start_us) / 1000;
            return 0; /* x->launched stays false: the result is final */
        }
        if (err)
            *err = spawn_err;
        return -1;
    }
    x->out_fd = x->proc.out_fd;
    x->err_fd = x->proc.err_fd;
    x->proc.out_fd = x->proc.err_fd = -1;
    x->launched = true;
    return 0;
}

static int rt_exec_start_ns(struct sl_runtime *rt, unsigned ns, bool session,
                            const struct sl_rt_exec_request *req, sl_rt_exec_done_fn done,
                            void *ctx, struct sl_rt_exec **out, struct sl_error *err)
{
    if (out)
        *out = NULL;
    if (rt_request_check(req, err) < 0)
        return -1;
    if (req->tty.on && !session)
        return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                            "a terminal needs warm sessions (SANDBOX_SESSION_IDLE_SECONDS > 0)");
    struct sl_rt_exec *x = rt_exec_new(rt, req, done, ctx);
    if (!x)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    /* The command's own cgroup first: the launch puts the command in it
     * before it runs anything, so its whole tree is in there. A session
     * launch makes it (or takes its session's spare) itself. */
    bool want_cgroup = rt->cgroups && sl_cgroups_exec_supported(rt->cgroups);
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
                     : rt_oneshot_launch(rt, ns, req, x, err);
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

static int rt_run(struct sl_runtime *rt, unsigned ns, bool session,
                  const struct sl_rt_exec_request *req, struct sl_rt_exec_result *res,
                  struct sl_error *err)
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
    sl_spawn_layout_free(&rt->layout);
    sl_cgroups_close(rt->cgroups);
    pthread_mutex_destroy(&rt->sessions_lock);
    free(rt->sessions);
    free(rt);
}

/* ------------------------------------------------------------------------ */
/* Startup probe.                                                           */

/* -1 = auto. */
static int parse_level(const char *text, int *level)
{
    char buf[16];
    size_t n = 0;
    const char *p = text ? text : "auto";
    while (isspace((unsigned char)*p))
        p++;
    while (*p && n < sizeof(buf) - 1)
        buf[n++] = *p++;
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    static const struct {
        const char *name;
        int level;
    } names[] = {{"auto", -1},
                 {"", -1},
                 {"basic", LEVEL_BASIC},
                 {"1", LEVEL_BASIC},
                 {"standard", LEVEL_STANDARD},
                 {"2", LEVEL_STANDARD},
                 {"strict", LEVEL_STRICT},
                 {"3", LEVEL_STRICT}};
    for (size_t i = 0; i < SL_ARRAY_LEN(names); i++)
        if (strcasecmp(buf, names[i].name) == 0 && !*p) {
            *level = names[i].level;
            return 0;
        }
    return -1;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

static void probe_dir_remove(const char *path)
{
    (void)nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static int probe_dir_create(const char *probe_root, uid_t uid, char *path, size_t size,
                            struct sl_error *err)
{
    char hex[33];
    if (sl_random_hex(hex, 16) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot draw randomness for the probe");
    snprintf(path, size, "%s/.probe-%s", probe_root, hex);
    if (mkdir(path, 0700) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot create probe directory %s", path);
    static const char *const subdirs[] = {"", "/workspace", "/home", "/cache", "/envs"};
    for (size_t i = 0; i < SL_ARRAY_LEN(subdirs); i++) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s%s", path, subdirs[i]);
        if ((i > 0 && mkdir(sub, 0700) < 0) ||
            fchownat(AT_FDCWD, sub, uid, uid, AT_SYMLINK_NOFOLLOW) < 0) {
            sl_error_errno(err, SL_E_CONFIG, "cannot prepare probe directory %s", sub);
            probe_dir_remove(path);
            return -1;
        }
    }
    return 0;
}

/* The last bytes of stderr, trimmed, as the failure detail. */
static void stderr_tail(const struct sl_buf *b, char *out, size_t size)
{
    size_t start = 0, end = b->len;
    while (end > 0 && isspace((unsigned char)b->data[end - 1]))
        end--;
    if (end > size - 1)
        start = end - (size - 1);
    while (start < end && isspace((unsigned char)b->data[start]))
        start++;
    if (start == end) {
        snprintf(out, size, "probe failed");
        return;
    }
    memcpy(out, b->data + start, end - start);
    out[end - start] = '\0';
}

static bool probe_ns(struct sl_runtime *rt, unsigned ns, const char *root, uid_t uid, char *detail,
                     size_t size)
{
    char *argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)"true", NULL};
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", (char *)"HOME=/home/sandbox",
                    (char *)"LANG=C.UTF-8", NULL};
    struct sl_rt_exec_request req = {
        .sandbox_root = root,
        .uid = uid,
        .argv = argv,
        .cwd = "/workspace",
        .envp = envp,
        .timeout_ms = PROBE_TIMEOUT_MS,
        .grace_ms = 1000,
        .max_output_bytes = 8192,
    };
    struct sl_rt_exec_result res;
    struct sl_error e;
    sl_error_clear(&e);
    if (rt_run(rt, ns, false, &req, &res, &e) < 0) {
        snprintf(detail, size, "SandboxRuntimeError: %s", e.message);
        return false;
    }
    bool ok = !res.timed_out && res.exit_code == 0;
    if (res.timed_out)
        snprintf(detail, size, "TimeoutError: the probe did not finish within %d s",
                 PROBE_TIMEOUT_MS / 1000);
    else if (!ok)
        stderr_tail(&res.err, detail, size);
    else
        detail[0] = '\0';
    sl_rt_exec_result_free(&res);
    return ok;
}

static unsigned level_ns(int level)
{
    return (level >= LEVEL_STANDARD ? NS_PID : 0) | (level >= LEVEL_STRICT ? NS_CGROUP : 0);
}

static unsigned feature_ns(const char *name)
{
    return strcmp(name, "pid_namespace") == 0 ? NS_PID
           : strcmp(name, "cgroup_namespace") == 0 ? NS_CGROUP
                                                   : 0;
}

/* RUNTIME.md §3.1 step 5: required additions not already in the level are
 * probed together and must pass; then each optional one (sorted, not
 * required, not in the level) is probed with everything accepted so far and
 * kept if it passes. Nothing is ever weakened silently. */
static int negotiate_additions(struct sl_runtime *rt, const struct sl_rt_options *opt,
                               const char *probe_dir, struct sl_error *err)
{
    struct sl_rt_profile *pr = &rt->profile;
    unsigned base = rt->ns, required = 0;
    char names[128] = "";
    for (size_t i = 0; opt->required_features && i < opt->required_features->len; i++) {
        unsigned bit = feature_ns(opt->required_features->items[i]);
        if (bit && !(base & bit)) {
            required |= bit;
            size_t used = strlen(names);
            snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
                     opt->required_features->items[i]);
        }
    }
    if (required) {
        char detail[512];
        if (!probe_ns(rt, base | required, probe_dir, opt->probe_uid, detail, sizeof(detail)))
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "required isolation features [%s] unavailable: %s", names,
                                detail);
        rt->ns |= required;
    }
    for (size_t i = 0; opt->optional_features && i < opt->optional_features->len; i++) {
        const char *name = opt->optional_features->items[i];
        unsigned bit = feature_ns(name);
        if (!bit || (rt->ns & bit))
            continue;
        char detail[512];
        if (probe_ns(rt, rt->ns | bit, probe_dir, opt->probe_uid, detail, sizeof(detail))) {
            rt->ns |= bit;
        } else if (pr->n_skipped < SL_ARRAY_LEN(pr->skipped_optional)) {
            snprintf(pr->skipped_optional[pr->n_skipped], sizeof(pr->skipped_optional[0]), "%s",
                     name);
            snprintf(pr->skipped_detail[pr->n_skipped], sizeof(pr->skipped_detail[0]), "%s",
                     detail);
            pr->n_skipped++;
        }
    }
    /* The additions actually enabled, sorted by name. */
    static const char *const sorted[] = {"cgroup_namespace", "pid_namespace"};
    for (size_t i = 0; i < SL_ARRAY_LEN(sorted); i++)
        if ((rt->ns & feature_ns(sorted[i])) && !(base & feature_ns(sorted[i])))
            snprintf(pr->enabled_additions[pr->n_additions++], sizeof(pr->enabled_additions[0]),
                     "%s", sorted[i]);
    return 0;
}

int sl_rt_open(const struct sl_rt_options *opt, struct sl_runtime **out, struct sl_error *err)
{
    *out = NULL;
    char probe_dir[PATH_MAX] = "";
    int requested;
    if (parse_level(opt->requested_level, &requested) < 0)
        return sl_error_set(err, SL_E_CONFIG, 0, "invalid isolation level: %s",
                            opt->requested_level);
    if (!opt->probe_root || opt->probe_root[0] != '/')
        return sl_error_set(err, SL_E_CONFIG, 0, "probe root must be an absolute path");
    struct sl_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    atomic_init(&rt->running, 0);
    pthread_mutex_init(&rt->sessions_lock, NULL);
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
    if (sl_cgroups_open(&limits, &rt->cgroups, err) < 0)
        goto fail;
    {
        struct sl_rt_profile *p = &rt->profile;
        p->cgroup_version = (int)sl_cgroups_version(rt->cgroups);
        p->memory_quota = sl_cgroups_memory(rt->cgroups);
        p->pids_quota = sl_cgroups_pids(rt->cgroups);
        p->cpu_quota = sl_cgroups_cpu(rt->cgroups);
        snprintf(p->cgroup_note, sizeof(p->cgroup_note), "%s", sl_cgroups_why(rt->cgroups));
        if (opt->favor_dynmods && p->cgroup_version != SL_CGROUP_NONE)
            p->favordynmods = sl_cgroup_favor_dynmods(p->favordynmods_note,
                                                      sizeof(p->favordynmods_note)) == 1;
    }

    if (probe_dir_create(opt->probe_root, opt->probe_uid, probe_dir, sizeof(probe_dir), err) < 0) {
        probe_dir[0] = '\0'; /* it cleaned up after itself */
        goto fail;
    }
    struct sl_rt_profile *pr = &rt->profile;
    int best = -1;
    for (int level = LEVEL_STRICT; level >= LEVEL_BASIC; level--) {
        pr->supported[level] =
            probe_ns(rt, level_ns(level), probe_dir, opt->probe_uid, pr->probe_failure[level],
                     sizeof(pr->probe_failure[level]));
        if (pr->supported[level] && best < 0)
            best = level;
    }
    if (best < 0) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "no supported isolation level: strict=%s; standard=%s; basic=%s",
                     pr->probe_failure[LEVEL_STRICT], pr->probe_failure[LEVEL_STANDARD],
                     pr->probe_failure[LEVEL_BASIC]);
        goto fail;
    }
    if (requested >= 0 && !pr->supported[requested]) {
        sl_error_set(err, SL_E_CONFIG, 0, "requested isolation level '%s' is unavailable: %s",
                     level_names[requested], pr->probe_failure[requested]);
        goto fail;
    }
    rt->level = requested >= 0 ? requested : best;
    rt->ns = level_ns(rt->level);
    snprintf(pr->selected_level, sizeof(pr->selected_level), "%s", level_names[rt->level]);
    snprintf(pr->max_supported_level, sizeof(pr->max_supported_level), "%s", level_names[best]);
    if (negotiate_additions(rt, opt, probe_dir, err) < 0)
        goto fail;
    probe_dir_remove(probe_dir);
    probe_dir[0] = '\0';
    sl_cgroup_remove(rt->cgroups, opt->probe_uid);
    pr->pid_namespace = (rt->ns & NS_PID) != 0;
    pr->cgroup_namespace = (rt->ns & NS_CGROUP) != 0;
    pr->network_isolated = opt->network_isolated;
    pr->network_private = opt->privnet != NULL;
    pr->seccomp_policy = SL_SECCOMP_POLICY_NAME;
    *out = rt;
    return 0;
fail:
    if (probe_dir[0])
        probe_dir_remove(probe_dir);
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
