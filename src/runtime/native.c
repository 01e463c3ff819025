/* The native execution backend: the boundary is built from the kernel's
 * own namespaces, cgroups and seccomp (spawn.c), with sandloom-init as the
 * sandbox's PID 1. Its startup probe selects the strongest isolation level
 * (RUNTIME.md §3.1) that really launches on this host. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "runtime/internal.h"
#include "runtime/seccomp.h"
#include "runtime/session_proto.h"

enum { LEVEL_BASIC, LEVEL_STANDARD, LEVEL_STRICT, LEVEL_COUNT };
static const char *const level_names[LEVEL_COUNT] = {"basic", "standard", "strict"};

#define SESSION_START_TIMEOUT_US (15 * 1000000LL)

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

/* A session's init (session_fd: see sl_spawn_request). */
static int native_spawn(struct sl_runtime *rt, unsigned ns, const char *root, uid_t uid, char *const *argv,
             const struct sl_rt_mount *mounts, size_t nmounts, const struct sl_rt_caps *caps,
             const struct sl_rt_egress *egress, int64_t deadline_us, int session_fd,
             struct sl_spawn_proc *proc, int *net_slot, struct sl_error *err)
{
    return rt_spawn_env(rt, ns, root, uid, argv, NULL, mounts, nmounts, caps, egress,
                        deadline_us, session_fd, -1, -1, proc, net_slot, err);
}

/* One-shot: the launcher is sandloom-init itself, built for this one
 * command; the supervisor watches its pidfd. */
static int native_oneshot_launch(struct sl_runtime *rt, unsigned ns,
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

/* ------------------------------------------------------------------------ */
/* Warm sessions: init spawned into the selected namespaces.               */

static int native_session_start(struct sl_runtime *rt, struct rt_session *s, int ctl,
                                const struct sl_rt_mount *mounts, size_t nmounts,
                                const struct sl_rt_caps *caps, const struct sl_rt_egress *egress,
                                struct sl_error *err)
{
    char fdtext[16];
    snprintf(fdtext, sizeof(fdtext), "%d", ctl);
    char *argv[] = {(char *)"sandloom-init", (char *)"--session", fdtext, NULL};
    struct sl_spawn_proc proc;
    if (native_spawn(rt, rt->ns, s->root, s->uid, argv, mounts, nmounts, caps, egress,
                     sl_mono_us() + SESSION_START_TIMEOUT_US, ctl, &proc, &s->net_slot, err) < 0)
        return -1;
    /* init's own stdout/stderr: it writes nothing there in session mode. */
    close(proc.out_fd);
    close(proc.err_fd);
    s->pid = proc.pid;
    s->pidfd = proc.pidfd;
    return 0;
}

/* Killing init ends the PID namespace (and at basic, init kills what it
 * can reach of the sandbox's uid on its way out). */
static void native_session_stop(struct sl_runtime *rt, struct rt_session *s)
{
    (void)rt;
    if (s->pidfd < 0)
        return;
    (void)sl_pidfd_send_signal(s->pidfd, SIGKILL);
    siginfo_t si;
    while (waitid(P_PIDFD, (id_t)s->pidfd, &si, WEXITED) < 0 && errno == EINTR)
        ;
    close(s->pidfd);
    s->pidfd = -1;
}

/* Anything besides init in the session? Its direct children tell: every
 * process of a PID namespace is init's descendant, and orphans are
 * reparented to it (it is a subreaper at basic). */
static bool native_session_busy(struct sl_runtime *rt, struct rt_session *s)
{
    (void)rt;
    char path[64], buf[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)s->pid, (int)s->pid);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    return n > 0;
}

static int native_session_mounts(struct sl_runtime *rt, struct rt_session *s,
                                 const struct sl_rt_mount *want, size_t n, struct sl_error *err)
{
    (void)rt;
    return rt_mounts_apply(s->pidfd, &s->mounts, want, n, err);
}

/* ------------------------------------------------------------------------ */
/* Startup probe: the strongest level that launches, then the additions.    */

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
        if (!rt_probe_run(rt, base | required, false, probe_dir, opt->probe_uid, detail,
                          sizeof(detail)))
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
        if (rt_probe_run(rt, rt->ns | bit, false, probe_dir, opt->probe_uid, detail, sizeof(detail))) {
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

static int native_open(struct sl_runtime *rt, const struct sl_rt_options *opt,
                       struct sl_error *err)
{
    int requested;
    if (parse_level(opt->requested_level, &requested) < 0)
        return sl_error_set(err, SL_E_CONFIG, 0, "invalid isolation level: %s",
                            opt->requested_level);
    char probe_dir[PATH_MAX];
    if (rt_probe_dir_create(opt->probe_root, opt->probe_uid, probe_dir, sizeof(probe_dir), err) <
        0)
        return -1;
    struct sl_rt_profile *pr = &rt->profile;
    int best = -1;
    for (int level = LEVEL_STRICT; level >= LEVEL_BASIC; level--) {
        pr->supported[level] =
            rt_probe_run(rt, level_ns(level), false, probe_dir, opt->probe_uid,
                         pr->probe_failure[level], sizeof(pr->probe_failure[level]));
        if (pr->supported[level] && best < 0)
            best = level;
    }
    int rc = -1;
    if (best < 0) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "no supported isolation level: strict=%s; standard=%s; basic=%s",
                     pr->probe_failure[LEVEL_STRICT], pr->probe_failure[LEVEL_STANDARD],
                     pr->probe_failure[LEVEL_BASIC]);
        goto out;
    }
    if (requested >= 0 && !pr->supported[requested]) {
        sl_error_set(err, SL_E_CONFIG, 0, "requested isolation level '%s' is unavailable: %s",
                     level_names[requested], pr->probe_failure[requested]);
        goto out;
    }
    rt->level = requested >= 0 ? requested : best;
    rt->ns = level_ns(rt->level);
    snprintf(pr->selected_level, sizeof(pr->selected_level), "%s", level_names[rt->level]);
    snprintf(pr->max_supported_level, sizeof(pr->max_supported_level), "%s", level_names[best]);
    if (negotiate_additions(rt, opt, probe_dir, err) < 0)
        goto out;
    pr->pid_namespace = (rt->ns & NS_PID) != 0;
    pr->cgroup_namespace = (rt->ns & NS_CGROUP) != 0;
    pr->seccomp_policy = SL_SECCOMP_POLICY_NAME;
    pr->user_namespace = pr->nested_userns_disabled = true;
    /* The boundary is the host kernel's: its release is the version. */
    struct utsname u;
    snprintf(pr->backend_version, sizeof(pr->backend_version), "%s",
             uname(&u) == 0 ? u.release : "unknown");
    snprintf(pr->backend_platform, sizeof(pr->backend_platform), "namespaces");
    rc = 0;
out:
    (void)sl_tree_remove(probe_dir);
    sl_cgroup_remove(rt->cgroups, opt->probe_uid);
    return rc;
}

const struct rt_backend rt_backend_native = {
    .name = "native",
    .open = native_open,
    .oneshot_launch = native_oneshot_launch,
    .session_start = native_session_start,
    .session_stop = native_session_stop,
    .session_busy = native_session_busy,
    .session_mounts = native_session_mounts,
    .exec_cgroups = true,
};
