/* Private to runtime/: the runtime struct and what its files share. */
#ifndef SL_RUNTIME_INTERNAL_H
#define SL_RUNTIME_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "runtime/cgroup.h"
#include "runtime/runtime.h"
#include "runtime/spawn.h"

/* Namespaces on top of user+mount+IPC+UTS (and net by network mode). */
#define NS_PID 1u
#define NS_CGROUP 2u

/* A warm sandbox: sandloom-init in session mode, holding the namespaces and
 * the mount tree between executions (runtime/session.c). */
struct rt_session {
    uid_t uid;
    char root[PATH_MAX];
    pid_t pid;
    int pidfd;
    int ctl_fd;                  /* requests go here, under write_lock */
    pthread_mutex_t write_lock;
    /* guarded by sl_runtime.sessions_lock */
    int active;                  /* executions in flight */
    int refs;                    /* holders of this pointer */
    bool dead;                   /* init is gone or stopped: never reused */
    int64_t last_used_us;
};

struct sl_runtime {
    struct sl_spawn_layout layout;
    unsigned ns; /* the selected level's namespaces plus accepted additions */
    struct sl_cgroups *cgroups;
    struct sl_rt_profile profile;
    int level;
    bool net_ns;
    bool warm_sessions;
    atomic_int running;

    pthread_mutex_t sessions_lock;
    struct rt_session **sessions;
    size_t n_sessions, cap_sessions;
};

/* Output is read in chunks of this size (API.md §4.2). */
#define READ_CHUNK (64 * 1024)

/* Reset *res and refuse a request the runtime cannot run (empty argv,
 * relative cwd, no deadline). Both execution paths start with it. */
int rt_request_start(const struct sl_rt_exec_request *req, struct sl_rt_exec_result *res,
                     struct sl_error *err);

/* What rt_supervise watches besides the two output pipes. */
struct rt_watch {
    int *out_fd, *err_fd;          /* closed (set to -1) at EOF */
    int done_fd;                   /* readable when the command ended */
    void (*kill)(struct rt_watch *w); /* at the deadline */
    void (*done)(struct rt_watch *w); /* when done_fd is readable */
    void *ctx;
};

/* Capture output until done and both pipes reached EOF, or the deadline:
 * then kill, keep draining for the grace period, stop. */
void rt_supervise(struct rt_watch *w, const struct sl_rt_exec_request *req, int64_t deadline_us,
                  struct sl_rt_exec_result *res, char *chunk);

/* Spawn sandloom-init with `init_argv` into the runtime's namespaces and the
 * uid's cgroup (session_fd: see sl_spawn_request). */
int rt_spawn(struct sl_runtime *rt, unsigned ns, const char *root, uid_t uid, char *const *argv,
             int64_t deadline_us, int session_fd, struct sl_spawn_proc *proc,
             struct sl_error *err);

int rt_session_exec(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                    struct sl_rt_exec_result *res, struct sl_error *err);
void rt_session_stop_uid(struct sl_runtime *rt, uid_t uid);
void rt_sessions_stop_all(struct sl_runtime *rt);

#endif
