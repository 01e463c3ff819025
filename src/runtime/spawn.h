/* Private to runtime/: entering a fresh sandbox (the security boundary).
 *
 * sl_spawn_layout_init() runs once, at sl_rt_open(): it turns the options
 * into an immutable plan of the sandbox's mount tree holding every path
 * string, limit and descriptor the child will need, so the child between
 * clone and exec only walks prepared data with raw syscalls. The layout is
 * owned by the runtime and shared read-only by all threads.
 *
 * sl_spawn_start() clones one child into new namespaces, writes its id maps,
 * lets it build the tree, drop every privilege and exec sandloom-init, and
 * returns once that exec happened. The caller then owns the process (pidfd,
 * output pipes) and must reap it with sl_spawn_reap(). */
#ifndef SL_RUNTIME_SPAWN_H
#define SL_RUNTIME_SPAWN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "runtime/runtime.h"
#include "runtime/seccomp.h"

/* A read-only host tree (or file) bound at the same, fully resolved path. */
struct sl_spawn_bind {
    char *src;   /* "/oldroot<host path>" */
    char *dst;   /* "/newroot<host path>" */
    bool is_dir; /* else a file bind: the mount point is created as an empty file */
};

/* A symlink created in the (read-only) root tmpfs. */
struct sl_spawn_link {
    char *path;   /* "/newroot/bin" */
    char *target; /* "usr/bin" */
};

struct sl_spawn_layout {
    char **dirs; /* created in the new root, parents first */
    size_t ndirs;
    struct sl_spawn_bind *ro; /* read-only binds, parents before children */
    size_t nro;
    struct sl_spawn_link *links; /* merged-usr symlinks, python-runtime/bin links */
    size_t nlinks;
    char *python_src;  /* "/oldroot<prefix>" bound at python-runtime when the
                          prefix is not visible through a read-only bind */
    char tmp_opts[96]; /* tmpfs options of /tmp */
    char shm_opts[96]; /* tmpfs options of /dev/shm */
    int cap_last_cap;
    int64_t rl_cpu, rl_nproc, rl_nofile, rl_fsize; /* already clamped, -1 = unlimited */
    int init_fd;                                   /* sandloom-init, O_PATH, >= 3 */
    struct sl_seccomp_program seccomp;             /* installed right before exec */
};

int sl_spawn_layout_init(const struct sl_rt_options *opt, struct sl_spawn_layout *lay,
                         struct sl_error *err);
void sl_spawn_layout_free(struct sl_spawn_layout *lay);

/* A read-only tree bound at /envs/<name> (a template, API.md §6.5). */
struct sl_spawn_mount {
    const char *name; /* a validated template name: no '/', not "." or ".." */
    const char *src;  /* the tree as the child sees it: "/oldroot<host path>" */
};

struct sl_spawn_request {
    const char *sandbox_root; /* absolute host path */
    uid_t uid;                /* host uid = gid of the sandbox, never 0 */
    bool pid_ns, cgroup_ns, net_ns;
    char *const *argv; /* sandloom-init's argv */
    char *const *envp;
    int64_t deadline_us; /* monotonic; the setup must finish before it */
    const int *cgroup_fds; /* cgroup.procs files the child is placed in before it goes */
    int session_fd;        /* >= 0: kept open across exec (session control socket) */
    bool has_stdin;        /* stdin_fd is the command's stdin; else /dev/null */
    int stdin_fd;
    size_t n_cgroup_fds;
    const struct sl_spawn_mount *mounts; /* template trees, after the persistent dirs */
    size_t nmounts;
    /* Called in the parent once the child is in its namespaces and
     * cgroups and before it goes on (net/privnet.c gives its network
     * namespace a link there); -1 kills the child and fails the start. */
    int (*before_go)(void *ctx, pid_t pid, struct sl_error *err);
    void *before_go_ctx;
};

struct sl_spawn_proc {
    pid_t pid; /* host pid of sandloom-init = its process group */
    int pidfd;
    int out_fd; /* read ends, O_NONBLOCK | O_CLOEXEC */
    int err_fd;
};

/* 0 when sandloom-init was executed (the caller owns proc), -1 with err
 * (SANDBOX_RUNTIME_ERROR) when the sandbox could not be set up, errnum
 * ETIMEDOUT when the deadline passed first; then no process and no
 * descriptor is left behind. */
int sl_spawn_start(const struct sl_spawn_layout *lay, const struct sl_spawn_request *req,
                   struct sl_spawn_proc *proc, struct sl_error *err);

/* Wait for the process and close proc's descriptors. Returns 0 with *si. */
int sl_spawn_reap(struct sl_spawn_proc *proc, siginfo_t *si);

/* SIGKILL every process whose uid is `uid`, from a short-lived child that
 * takes that uid and calls kill(-1). 0 on success, -1 with errno. */
int sl_spawn_kill_uid(uid_t uid);

#endif
