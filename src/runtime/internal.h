/* Private to runtime/: the runtime struct and what its files share. */
#ifndef SL_RUNTIME_INTERNAL_H
#define SL_RUNTIME_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>

#include "net/privnet.h"
#include "runtime/cgroup.h"
#include "runtime/runtime.h"
#include "runtime/spawn.h"

/* Namespaces on top of user+mount+IPC+UTS (and net by network mode). */
#define NS_PID 1u
#define NS_CGROUP 2u

/* A session's template trees (runtime/mounts.c). */
struct rt_mount_set {
    size_t n;
    char **names, **paths;
};
int rt_mount_set_copy(struct rt_mount_set *dst, const struct sl_rt_mount *m, size_t n);
bool rt_mount_set_equal(const struct rt_mount_set *set, const struct sl_rt_mount *want, size_t n);
void rt_mount_set_free(struct rt_mount_set *set);
/* Bring the mount namespace of the process behind `pidfd` from *cur to
 * `want` (attach new trees at /envs/<name>, detach the others); *cur
 * becomes `want` on success. */
int rt_mounts_apply(int pidfd, struct rt_mount_set *cur, const struct sl_rt_mount *want,
                    size_t n, struct sl_error *err);

struct rt_session;
struct sl_rt_exec;

/* An execution backend (SANDBOX_EXECUTION_BACKEND): what builds the
 * boundary around sandloom-init. Everything else is shared and
 * backend-blind: the session protocol and its supervision, the cgroups,
 * the network, and all of the service above sl_rt_*. One implementation per
 * backend: native.c (namespaces built by spawn.c), gvisor.c (one runsc
 * sandbox per session). */
struct rt_backend {
    const char *name; /* what SANDBOX_EXECUTION_BACKEND says */
    /* Probe the host with real launches and fill rt->profile (levels,
     * additions, backend version and platform). -1 with err refuses the
     * backend: there is no fall-back to another one. */
    int (*open)(struct sl_runtime *rt, const struct sl_rt_options *opt, struct sl_error *err);
    void (*close)(struct sl_runtime *rt);
    /* One command in a sandbox built for it alone (warm sessions off).
     * `ns` is the native backend's namespace set (its probe tries several).
     * NULL: the backend only runs warm sessions. */
    int (*oneshot_launch)(struct sl_runtime *rt, unsigned ns, const struct sl_rt_exec_request *req,
                          struct sl_rt_exec *x, struct sl_error *err);
    /* Start s's boundary around `sandloom-init --session` holding `ctl`
     * (init's end of the control socket, the caller's), with the
     * templates, ceilings and egress given: fills s->pid, s->pidfd (of the
     * process whose death ends the session) and s->net_slot. */
    int (*session_start)(struct sl_runtime *rt, struct rt_session *s, int ctl,
                         const struct sl_rt_mount *mounts, size_t nmounts,
                         const struct sl_rt_caps *caps, const struct sl_rt_egress *egress,
                         struct sl_error *err);
    /* Kill everything of s and wait for it to be gone (s->pidfd closed). */
    void (*session_stop)(struct sl_runtime *rt, struct rt_session *s);
    /* Does s run anything besides init? */
    bool (*session_busy)(struct sl_runtime *rt, struct rt_session *s);
    /* Bring s's templates from s->mounts to `want` (s->mounts follows).
     * ENOTSUP in err: only a new session can have them. */
    int (*session_mounts)(struct sl_runtime *rt, struct rt_session *s,
                          const struct sl_rt_mount *want, size_t n, struct sl_error *err);
    /* Write s's processes, memory and open files to the image directory
     * `dir` and end s. NULL: the backend cannot (the native one). */
    int (*session_checkpoint)(struct sl_runtime *rt, struct rt_session *s, const char *dir,
                              struct sl_error *err);
    /* Whether session_checkpoint can work with this runtime's options: 0,
     * or -1 with err (ENOTSUP and why), asked before anything is touched. */
    int (*checkpoint_possible)(struct sl_runtime *rt, struct sl_error *err);
    /* A command can be put in a host cgroup of its own by init's child. */
    bool exec_cgroups;
};

extern const struct rt_backend rt_backend_native, rt_backend_gvisor;

/* A warm sandbox: sandloom-init in session mode, holding the namespaces and
 * the mount tree between executions (runtime/session.c). */
struct rt_session {
    uid_t uid;
    char root[PATH_MAX];
    pid_t pid;
    int pidfd;
    void *boundary; /* the backend's own state of this session */
    /* Set before session_start: start from this checkpoint image instead
     * of afresh (sl_rt_session_restore). */
    const char *restore_image;
    int ctl_fd;                  /* requests go here, under write_lock */
    pthread_mutex_t write_lock;
    struct rt_mount_set mounts;  /* template trees in its namespace, under write_lock */
    /* guarded by sl_runtime.sessions_lock */
    int active;                  /* executions in flight */
    int refs;                    /* holders of this pointer */
    bool dead;                   /* init is gone or stopped: never reused */
    int64_t last_used_us;
    /* An empty execution cgroup left by a command that ended by itself,
     * taken by the next one (0: none); removed with the session. */
    uint64_t spare_cg_seq;
    struct sl_cgroups *cgroups;
    /* The ceilings its cgroup limits were last written with (under
     * sessions_lock): a later command with others writes them again, so a
     * tenant's changed ceiling reaches a session that is running. */
    struct sl_rt_caps caps;
    int net_slot; /* its private network (sl_privnet_detach), -1: none */
    /* Made ahead for a sandbox not created yet (sl_rt_session_prepare):
     * never idle-reaped until sl_rt_session_adopt gives it its sandbox. */
    bool prepared;
    /* Adopted, and not yet given its sandbox's egress rules: the next
     * session_get writes them before any command of the sandbox runs. */
    bool egress_pending;
    /* In the table while its boundary is built outside sessions_lock (a
     * gVisor sandbox takes a fraction of a second): a command of the same
     * sandbox waits on sessions_changed for it, others go on. */
    bool starting;
    /* Being checkpointed: no command may start on it (or beside it). */
    bool checkpointing;
};

/* ---- supervision (supervise.c) ---- */

enum { TAG_OUT, TAG_ERR, TAG_ENDED, TAG_TIMER, TAG_COUNT, TAG_DRAIN = TAG_COUNT };

/* epoll data of one watched descriptor. */
struct rt_tag {
    struct sl_rt_exec *x;
    int which;
};

/* One execution in flight. Set up by the thread that starts it, then
 * touched only by the supervisor thread, except the fields marked. */
struct sl_rt_exec {
    struct sl_runtime *rt;
    atomic_int refs;
    uid_t uid;
    sl_rt_exec_done_fn done;
    void *ctx;
    bool launched;              /* false: never started, res is final */
    int64_t start_us, deadline_us, grace_us;
    int64_t oom_before;         /* the memory cgroup's OOM kills at start */
    /* The command's own cgroup (sl_cgroup_exec_*), when the host has one:
     * termination reaches every process in it. cg_procs_fd is its
     * cgroup.procs, open only until the launch has used it. */
    bool cg_exec;
    bool cg_signalled; /* a signal went to the cgroup: never handed on */
    uint64_t cg_seq;
    int cg_procs_fd;
    int out_fd, err_fd, timer_fd;
    /* one-shot: the launcher */
    struct sl_spawn_proc proc;
    siginfo_t si;
    /* warm session */
    struct rt_session *session; /* NULL for one-shot */
    int status_fd;
    int32_t wstatus;
    int net_slot; /* one-shot, private network mode: detached when it ends; -1 none */
    struct sl_rt_output output; /* the caller's sink, or write NULL: res.out/err */
    bool paused[2];             /* the sink paused this pipe: not watched (supervisor's) */
    /* state */
    bool exited, got_status;
    int phase;
    int signal_sent;            /* the last signal delivered by us, 0 = none */
    struct sl_rt_exec_result res;
    struct rt_tag tags[TAG_COUNT];
    /* guarded by sup.lock */
    bool finished, queued, cancel_requested, kill_now;
    int client_signal; /* sl_rt_exec_signal's, 0 = none */
    bool resume_output; /* sl_rt_exec_resume_output asked */
    struct sl_rt_exec *queue_next, *prev, *next;
    struct sl_rt_exec *reap_next; /* finished: released after the epoll batch */
};

struct rt_supervisor {
    pthread_t thread;
    bool started;
    atomic_bool stopping;
    int epfd, wake_fd;
    char *chunk;               /* the read buffer (supervisor thread only) */
    pthread_mutex_t lock;      /* guards the fields below and the marked fields of executions */
    pthread_cond_t drained;    /* signalled when count drops */
    struct sl_rt_exec *all;    /* every execution not yet completed */
    size_t count;
    struct sl_rt_exec *queue;  /* requests for the supervisor */
    /* Pipes that background jobs of finished commands still hold, read
     * and discarded (supervisor thread only; supervise.c). */
    struct rt_drain *drains;
    size_t n_drains;
    /* Executions finished during the current epoll batch: their last
     * reference is dropped after it, since later events of the same batch
     * may still point at them (supervisor thread only). */
    struct sl_rt_exec *reap;
};

struct sl_runtime {
    const struct rt_backend *backend;
    void *backend_state; /* the backend's own, from open to close */
    struct sl_spawn_layout layout;
    unsigned ns; /* the selected level's namespaces plus accepted additions */
    struct sl_cgroups *cgroups;
    struct sl_rt_profile profile;
    int level;
    bool net_ns;
    struct sl_privnet *privnet; /* private network mode (not owned) */
    bool warm_sessions;
    atomic_int running;
    atomic_uint_fast64_t exec_seq; /* names execution cgroups */
    struct rt_supervisor sup;

    pthread_mutex_t sessions_lock;
    pthread_cond_t sessions_changed; /* a session stopped starting or checkpointing */
    struct rt_session **sessions;
    size_t n_sessions, cap_sessions;
};

/* Output is read in chunks of this size (API.md §4.2). */
#define READ_CHUNK (64 * 1024)

/* Refuse a request the runtime cannot run (empty argv, relative cwd, no
 * deadline). Both execution paths start with it. */
int rt_request_check(const struct sl_rt_exec_request *req, struct sl_error *err);

int rt_supervisor_start(struct sl_runtime *rt, struct sl_error *err);
/* Kill every execution, wait for all completions, stop the thread. */
void rt_supervisor_stop(struct sl_runtime *rt);
/* A new execution with its result buffers and deadline (one reference). */
struct sl_rt_exec *rt_exec_new(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                               sl_rt_exec_done_fn done, void *ctx);
/* Give it to the supervisor (see supervise.c). */
int rt_exec_submit(struct sl_rt_exec *x, struct sl_error *err);

/* Run one command and wait for it: in a warm session, or one-shot with
 * the native namespace set `ns` (the probes). */
int rt_run(struct sl_runtime *rt, unsigned ns, bool session, const struct sl_rt_exec_request *req,
           struct sl_rt_exec_result *res, struct sl_error *err);

/* Startup probes (probe.c): a directory laid out as a sandbox's, owned by
 * uid, and `/bin/sh -c true` run in it as a sandbox would run it. */
int rt_probe_dir_create(const char *probe_root, uid_t uid, char *path, size_t size,
                        struct sl_error *err);
/* true when the command ran and exited 0; else false with why in detail. */
bool rt_probe_run(struct sl_runtime *rt, unsigned ns, bool session, const char *root, uid_t uid,
                  char *detail, size_t size);

/* Send x's request to the uid's warm session (started if needed); on
 * success x holds the session, its pipes and status socket, and with
 * want_cgroup its execution cgroup (the session's spare, or a new one). */
int rt_session_launch(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                      struct sl_rt_exec *x, bool want_cgroup, struct sl_error *err);
/* Offer x's execution cgroup, empty now, to its session for the next
 * command; false when the session has one already or is dead (the caller
 * removes it). */
bool rt_session_keep_cgroup(struct sl_runtime *rt, struct rt_session *s, uint64_t seq);
/* The execution on session s ended; broken = init died under it. */
void rt_session_exec_done(struct sl_runtime *rt, struct rt_session *s, bool broken);
void rt_session_stop_uid(struct sl_runtime *rt, uid_t uid);
void rt_sessions_stop_all(struct sl_runtime *rt);

#endif
