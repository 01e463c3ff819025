/* The sandbox runtime: turns a profile and a sandbox's directories into an
 * isolated process (spec RUNTIME.md §4, DESIGN.md §3), behind one of its
 * execution backends (internal.h: struct rt_backend): `native`, built from
 * the kernel's namespaces, or `gvisor`, a user-space kernel (runsc).
 *
 * It knows nothing of HTTP, SQL or tenants. Lifecycle: sl_rt_open() once at
 * startup (opens sandloom-init, probes the levels the host supports with
 * real launches and selects one); sl_rt_exec() from any thread, any number of
 * times concurrently; sl_rt_close() at shutdown. The runtime owns its
 * descriptors and the probe result; callers own requests and results.
 *
 * Native backend, one execution = one fresh sandbox: clone3 into new user, mount, IPC, UTS
 * (+PID, +cgroup, +net) namespaces; the parent writes the uid/gid maps
 * (uid 0 inside = the sandbox's host uid); the child builds the mount tree,
 * pivot_roots into it, drops every capability, sets no_new_privs and the
 * rlimits, and execs sandloom-init, which becomes PID 1, changes to cwd and
 * runs the command. The pre-exec child code lives in spawn.c only and calls
 * nothing but async-signal-safe syscalls. */
#ifndef SL_RUNTIME_RUNTIME_H
#define SL_RUNTIME_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "common/util.h"

struct sl_privnet;
struct sl_egress_policy;

struct sl_rt_options {
    const char *backend;                       /* SANDBOX_EXECUTION_BACKEND: native | gvisor */
    const char *gvisor_runsc;                  /* gvisor: runsc's path */
    const char *gvisor_platform;               /* gvisor: ptrace | systrap | kvm */
    const char *init_path;                     /* sandloom-init binary (static) */
    const struct sl_strlist *readonly_mounts;  /* host trees bound read-only at the same path */
    const char *python_prefix;                 /* host prefix whose bin/python3 serves
                                                  /opt/agent-sandbox/python-runtime; e.g. "/usr" */
    int64_t tmpfs_bytes;                       /* size of /tmp */
    int64_t cpu_seconds, max_processes, max_open_files, max_file_size_bytes; /* rlimits */
    bool network_isolated;                     /* SANDBOX_NETWORK_MODE=isolated */
    /* SANDBOX_NETWORK_MODE=private: every sandbox namespace gets its own
     * network namespace, and this gives it a link and its egress policy
     * (owned by the caller; outlives the runtime). */
    struct sl_privnet *privnet;
    const char *resolv_conf;                   /* private: shown at /etc/resolv.conf */
    const char *requested_level;               /* auto|basic|standard|strict|1|2|3 */
    const char *probe_root;                    /* dir for the probe sandbox (created, removed) */
    uid_t probe_uid;                           /* SANDBOX_UID_START */
    /* Additive features (RUNTIME.md §3): pid_namespace, cgroup_namespace. */
    const struct sl_strlist *required_features, *optional_features;
    /* Keep a sandbox's namespaces and mount tree (sandloom-init in session
     * mode) between executions; otherwise one fresh sandbox per execution. */
    bool warm_sessions;
    /* Give the host's cgroup2 superblock favordynmods (cgroup.h). */
    bool favor_dynmods;
    /* Aggregate per-sandbox quotas (cgroups); 0 = no such quota. */
    int64_t memory_limit_bytes, pids_limit;
    double cpu_limit; /* CPUs */
};

/* What the startup probe found and selected. */
struct sl_rt_profile {
    char backend[16];             /* native | gvisor */
    char backend_version[80];     /* native: the kernel's release; gvisor: runsc's */
    char backend_platform[32];    /* native: namespaces; gvisor: runsc's platform (ptrace...) */
    /* The sandbox's processes are in a user namespace of their own (uid 0
     * inside mapped to the sandbox's uid), and cannot make nested ones
     * (max_user_namespaces 0). gVisor: the first only in the isolated
     * network mode; nested ones can be made inside the Sentry, where they
     * give nothing on the host. */
    bool user_namespace, nested_userns_disabled;
    char selected_level[16];      /* basic | standard | strict */
    char max_supported_level[16];
    bool supported[3];            /* basic, standard, strict */
    char probe_failure[3][512];   /* detail per failed level, "" if passed */
    bool pid_namespace, cgroup_namespace, network_isolated;
    bool network_private; /* SANDBOX_NETWORK_MODE=private */
    char enabled_additions[2][24]; /* sorted; features added on top of the level */
    size_t n_additions;
    char skipped_optional[2][24];  /* optional additions that failed their probe */
    char skipped_detail[2][512];
    size_t n_skipped;
    const char *seccomp_policy; /* name of the filter every sandbox process runs under */
    int cgroup_version;         /* 0 none, 1, 2 */
    bool memory_quota, pids_quota, cpu_quota; /* really enforced */
    char cgroup_note[256];      /* why a quota is off, "" when all are on */
    bool favordynmods;          /* cgroup moves wait for no grace period */
    char favordynmods_note[256]; /* why not, when asked and not on */
};

/* A template tree to show read-only at /envs/<name> (API.md §6.5). */
struct sl_rt_mount {
    const char *name;      /* validated template name */
    const char *host_path; /* the materialised tree on the host (root-owned) */
};

struct sl_rt_exec_request {
    const char *sandbox_root;   /* host path <workspace_root>/<sandbox_id> */
    uid_t uid;                  /* sandbox host uid (gid is the same number) */
    char *const *argv;          /* NULL-terminated, argv[0] looked up in the sandbox PATH */
    const char *cwd;            /* inside the sandbox, e.g. /workspace */
    char *const *envp;          /* full managed environment, NULL-terminated */
    int64_t timeout_ms;         /* deadline for exit and output drain */
    int64_t grace_ms;           /* SIGTERM -> SIGKILL grace */
    size_t max_output_bytes;    /* kept per stream; the rest is drained */
    /* The sandbox's attached templates. A warm session is brought to this
     * set before the command runs: trees are mounted into (and removed
     * from) its live mount namespace, so its background processes live on. */
    const struct sl_rt_mount *mounts;
    size_t nmounts;
    /* Ceilings below the runtime's per-sandbox limits (0: none): the
     * sandbox's cgroup gets the smaller of each, for a quota the runtime
     * enforces (a ceiling cannot add one it does not). Written when the
     * sandbox's session (or one-shot launcher) enters its cgroup. */
    struct sl_rt_caps {
        int64_t memory_bytes, pids;
        double cpus;
    } caps;
    /* Private network mode: the sandbox's egress rules when it starts a
     * network namespace (sl_privnet_attach: policy NULL = the worker's
     * default, bound NULL = none). A running session gets changed ones
     * from sl_privnet_set_policy, not from here. */
    struct sl_rt_egress {
        const struct sl_egress_policy *policy, *bound;
    } egress;
    /* Where the output goes as it is read, when write is set: every byte,
     * on the supervisor thread (write must not block), and the result's
     * out/err stay empty (what is kept, and `truncated` for what is not,
     * is then the sink's to say). write returns false when it wants no
     * more of that stream for now (a reader is behind): the pipe is not
     * read again (the command blocks writing to it) until
     * sl_rt_exec_resume_output; the deadline still holds. Unset: the first
     * max_output_bytes of each stream are kept in the result. */
    struct sl_rt_output {
        bool (*write)(void *ctx, int stream, const char *data, size_t len); /* 0 out, 1 err */
        /* Asked before a paused stream is read again (a resume may be
         * older than a new pause): false keeps it paused. NULL: read. */
        bool (*may_read)(void *ctx, int stream);
        void *ctx;
    } output;
    /* The command's stdin when has_stdin (the caller's, e.g. a pipe's read
     * end; the runtime passes a copy and the caller keeps its own), else
     * /dev/null as in the reference. */
    bool has_stdin;
    int stdin_fd;
    /* On a terminal (warm sessions only): the command runs on a
     * pseudo-terminal of the sandbox's own devpts, cols x rows, as its
     * controlling terminal; its output is what the terminal shows, read as
     * stdout (stderr stays empty), and stdin is ignored. The launch puts a
     * copy of the master (non-blocking, close-on-exec, the caller's) in
     * *master: input is written to it and TIOCSWINSZ resizes it. -1 there
     * after a start that succeeded: the sandbox opened no terminal (the
     * command did not start, or the caller cancels it). */
    struct sl_rt_tty {
        bool on;
        unsigned short cols, rows;
        int *master;
    } tty;
};

struct sl_rt_exec_result {
    int exit_code;         /* normal exit code; 128+N when the command died of a signal N
                              nobody here sent; -N when our termination (deadline, cancel,
                              kill) ended it with signal N */
    bool timed_out;
    bool oom_killed;       /* the sandbox's memory quota killed a process during the run */
    bool truncated;
    struct sl_buf out, err; /* captured bytes (not NUL-safe text; caller decodes) */
    int64_t duration_ms;
};
void sl_rt_exec_result_free(struct sl_rt_exec_result *r);

struct sl_runtime;

int sl_rt_open(const struct sl_rt_options *opt, struct sl_runtime **out, struct sl_error *err);
const struct sl_rt_profile *sl_rt_profile(const struct sl_runtime *rt);

/* An execution in flight. Executions are supervised by one runtime thread
 * (an epoll loop over their pipes, end notifications and deadlines), so a
 * caller does not wait on a thread of its own per command. */
struct sl_rt_exec;
/* Called exactly once, on the supervision thread, when the execution is
 * over (exit, deadline, cancel, kill or shutdown). It may move the output
 * buffers out of *res (and zero them); whatever it leaves is freed with the
 * execution. It must not block: hand slow work (a database write) to
 * another thread. */
typedef void (*sl_rt_exec_done_fn)(struct sl_rt_exec_result *res, void *ctx);

/* Start one command. 0: it runs, `done` will be called, and *out (when not
 * NULL) is a handle for sl_rt_exec_cancel that the caller releases with
 * sl_rt_exec_put. -1: the sandbox could not be started (err says why);
 * `done` is never called. A deadline that passes while the sandbox is being
 * built is a started execution that ends TIMED_OUT. */
int sl_rt_exec_start(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                     sl_rt_exec_done_fn done, void *ctx, struct sl_rt_exec **out,
                     struct sl_error *err);
/* Begin the termination sequence of API.md §4.6 (SIGTERM to the command's
 * process group, grace, SIGKILL, grace). Returns whether the execution was
 * still running. Thread-safe; the end arrives through `done`. */
bool sl_rt_exec_cancel(struct sl_rt_exec *x);
/* A client's signal (SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT) to the
 * command's process group, once; the command's exit code then says -N if
 * it died of it. Returns whether it was still running. Thread-safe. */
bool sl_rt_exec_signal(struct sl_rt_exec *x, int sig);
/* Read the pipes a sink paused again. Thread-safe. */
void sl_rt_exec_resume_output(struct sl_rt_exec *x);
/* SIGKILL now, no grace (worker shutdown). */
void sl_rt_exec_kill(struct sl_rt_exec *x);
void sl_rt_exec_put(struct sl_rt_exec *x);

/* Run one command and wait for it (startup probe, toolchain checks). 0 when
 * the command ran (whatever its exit code), -1 when the sandbox could not
 * be started. */
int sl_rt_exec(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
               struct sl_rt_exec_result *res, struct sl_error *err);
/* Kill every process of a sandbox (its host uid is unique to it) and remove
 * its cgroups. At standard/strict nothing outlives its execution anyway; at
 * basic a process that left the process group would, and release must not
 * leave it. */
int sl_rt_kill_sandbox(struct sl_runtime *rt, uid_t uid, struct sl_error *err);

/* Stop warm sessions unused for idle_ms that have nothing running (no
 * process but sandloom-init), so a dormant sandbox costs no process.
 * Returns how many were stopped. */
int sl_rt_reap_idle(struct sl_runtime *rt, int64_t idle_ms);
/* Live warm sessions. */
int sl_rt_sessions(struct sl_runtime *rt);

/* A warm session made ahead of its sandbox (service/warm.c): the
 * namespaces, mount tree, cgroups and network of a sandbox rooted at
 * `root` with `uid`, with the worker's default ceilings and egress, kept
 * (never idle-reaped) until adopted. 0, or -1 with err (ENOTSUP when
 * warm sessions are off). */
int sl_rt_session_prepare(struct sl_runtime *rt, const char *root, uid_t uid,
                          struct sl_error *err);
/* The prepared session of uid at old_root is the sandbox's at new_root
 * now (the caller renamed the directory: the session's mounts followed
 * it). false when there is no such live session (the first command then
 * makes one, as for any sandbox). */
bool sl_rt_session_adopt(struct sl_runtime *rt, uid_t uid, const char *old_root,
                         const char *new_root);
/* Whether uid's session was adopted and has not had its sandbox's egress
 * rules written yet (its first command's session lookup writes them, as a
 * new session's start would). */
bool sl_rt_session_egress_pending(struct sl_runtime *rt, uid_t uid);
/* The prepared (not adopted) session of uid at root stopped, if any. */
void sl_rt_session_drop(struct sl_runtime *rt, uid_t uid, const char *root);

/* Suspend that keeps memory: uid's session at root (its processes, their
 * memory and open files) written to the image directory `dir` (created;
 * root's), and the session ended. ENOTSUP in err: the backend cannot (the
 * native one); ENOENT: no session runs (nothing to keep); EBUSY: a process
 * holds a descriptor of the host (the output of the command that started
 * it) that a checkpoint cannot keep. */
int sl_rt_session_checkpoint(struct sl_runtime *rt, uid_t uid, const char *root, const char *dir,
                             struct sl_error *err);
/* uid's session at root started again from the image in `dir`, with the
 * templates and ceilings a command of the sandbox would have (the same
 * templates as at the checkpoint: the image refers to their mounts): its
 * processes run on where they were. */
int sl_rt_session_restore(struct sl_runtime *rt, const char *root, uid_t uid, const char *dir,
                          const struct sl_rt_mount *mounts, size_t nmounts,
                          const struct sl_rt_caps *caps, struct sl_error *err);

/* A connected TCP socket (non-blocking, close-on-exec, the caller's) to
 * `port` on the loopback of the sandbox of uid, as the sandbox sees it:
 * made inside its session's network namespace (isolated, private), or in
 * host mode only to a port that the sandbox's own uid listens on.
 * SANDBOX_PORT_NOT_LISTENING when nothing of the sandbox listens there. */
/* What the sandbox of `uid` uses now (runtime/cgroup.h; every field -1
 * without cgroups). */
struct sl_cgroup_usage;
void sl_rt_sandbox_usage(struct sl_runtime *rt, uid_t uid, struct sl_cgroup_usage *out);

int sl_rt_sandbox_connect(struct sl_runtime *rt, uid_t uid, uint16_t port, int64_t timeout_ms,
                          struct sl_error *err);

/* Number of sandbox processes currently running through this runtime. */
int sl_rt_running(const struct sl_runtime *rt);
void sl_rt_close(struct sl_runtime *rt);

#endif
