/* Private to runtime/: aggregate per-sandbox quotas through cgroups.
 *
 * One cgroup per sandbox (named after its unique host uid) under the
 * daemon's own cgroup, so all the sandboxes together also stay inside
 * whatever the service itself is given. cgroup v2 (the production norm) and
 * v1 (memory, pids and cpu hierarchies, as on hosts that still mount them)
 * sit behind this one interface: v2 enables whichever of the three the
 * service's cgroup has and names the rest in `why`; v1 is used only when v2
 * has none of them (hybrid hosts). On v2 the daemon moves into a
 * "sandloom-daemon" leaf of its cgroup so that it can hand controllers down.
 * Created at sl_rt_open(); every function is thread-safe (the kernel
 * serialises the file writes; no state changes after open). */
#ifndef SL_RUNTIME_CGROUP_H
#define SL_RUNTIME_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

enum sl_cgroup_version { SL_CGROUP_NONE = 0, SL_CGROUP_V1 = 1, SL_CGROUP_V2 = 2 };

struct sl_cgroup_limits {
    int64_t memory_bytes; /* 0 = no memory quota */
    int64_t pids;         /* 0 = no pids quota */
    double cpus;          /* 0 = no CPU quota */
};

#define SL_CGROUP_MAX_FDS 3

#define SL_CGROUP_ROOT "/sys/fs/cgroup"

struct sl_cgroups;

/* Never fails for lack of cgroups: *out then enforces what it can and `why`
 * says what is missing (for /healthz and the doctor). With a usable v2 but
 * no quota, the version is still V2 (each sandbox gets a cgroup of its own,
 * killed as a whole); with neither v2 nor v1, it is NONE. -1 only on
 * allocation failure. */
int sl_cgroups_open(const struct sl_cgroup_limits *limits, struct sl_cgroups **out,
                    struct sl_error *err);
/* The same with the cgroup filesystems mounted at `root` instead of
 * SL_CGROUP_ROOT (a cgroup2 mount, or v1 hierarchies at root/memory ...):
 * for tests. Also -1 when root is not an absolute path shorter than
 * PATH_MAX. */
int sl_cgroups_open_at(const char *root, const struct sl_cgroup_limits *limits,
                       struct sl_cgroups **out, struct sl_error *err);
void sl_cgroups_close(struct sl_cgroups *cg);

enum sl_cgroup_version sl_cgroups_version(const struct sl_cgroups *cg);

/* The kernel's `favordynmods` on the host's cgroup2 superblock (the first
 * cgroup2 mount in /proc/self/mounts, its other options kept): a process
 * moved into a cgroup (every command is, runtime/session.c) no longer
 * waits for an RCU grace period when moves are not back to back; forks
 * and exits cost slightly more. The flag is global to the cgroup core, so
 * it serves v1 hierarchies too. 1 on (already, or now), 0 not possible
 * (`why` says why: no cgroup2 mount, an older kernel, not privileged). */
int sl_cgroup_favor_dynmods(char *why, size_t size);
/* Which quotas are really enforced. */
bool sl_cgroups_memory(const struct sl_cgroups *cg);
bool sl_cgroups_pids(const struct sl_cgroups *cg);
bool sl_cgroups_cpu(const struct sl_cgroups *cg);
const char *sl_cgroups_why(const struct sl_cgroups *cg);

/* Create (or find) the sandbox's cgroup with the limits and open its
 * cgroup.procs files for writing: the spawn writes the new process's pid
 * into each before it lets the child go. Returns the number of descriptors
 * (v2: 1; v1: one per enforced quota; NONE: 0), -1 on error. Caller closes
 * them. */
/* `cap` (may be NULL; a 0 field is none) lowers the limits for this
 * sandbox: each enforced quota is the smaller of the open's and cap's. */
int sl_cgroup_enter_fds(struct sl_cgroups *cg, uid_t uid, const struct sl_cgroup_limits *cap,
                        int fds[SL_CGROUP_MAX_FDS], struct sl_error *err);

/* OOM kills recorded in the sandbox's memory cgroup so far (-1: unknown). */
int64_t sl_cgroup_oom_kills(struct sl_cgroups *cg, uid_t uid);

/* What a sandbox uses now, as its cgroups count it (-1: not counted here:
 * no such controller, or the sandbox runs nothing and has no cgroup). */
struct sl_cgroup_usage {
    int64_t cpu_usec;      /* CPU time of all its processes so far */
    int64_t memory_bytes;  /* memory charged now, page cache included */
    int64_t cache_bytes;   /* of it, page cache */
    int64_t memory_limit;  /* its limit (0: none) */
};
void sl_cgroup_usage(struct sl_cgroups *cg, uid_t uid, struct sl_cgroup_usage *out);

/* Per-execution cgroups, so that ending a command reaches every process it
 * started, in any process group or session, without racing its forks (a
 * fork bomb). v2: a child of the sandbox's cgroup (no controllers of its
 * own; the sandbox's limits still cover it), killed with cgroup.kill. v1: a
 * child of the sandbox's pids cgroup (none without a pids quota), killed by
 * setting its pids.max to 0 and then killing what it lists. `seq` is unique
 * per execution of this daemon.
 *
 * exec_create makes x<seq> under the sandbox's cgroup and returns its
 * cgroup.procs opened for writing (the caller closes it): whoever writes a
 * pid (or "0": itself) there before running the command puts the command's
 * whole future tree in it. The kernel checks that write against the
 * credentials of the opener, so a sandbox process may use the descriptor.
 * exec_signal: SIGKILL race-free as above; other signals to each listed
 * process. Returns the number signalled, -1 if the cgroup is unreadable.
 * exec_remove: rmdir, which fails harmlessly while a background job lives;
 * sl_cgroup_remove kills and removes what is left.
 * exec_empty: whether nothing is left in x<seq>; exec_reopen: its
 * cgroup.procs again, for another command (a warm session keeps one empty
 * execution cgroup for its next command: the mkdir alone took 41 µs of a
 * warm command's 90 µs launch on v1, and the rmdir is saved too). */
bool sl_cgroups_exec_supported(const struct sl_cgroups *cg);
int sl_cgroup_exec_create(struct sl_cgroups *cg, uid_t uid, uint64_t seq, struct sl_error *err);
int sl_cgroup_exec_reopen(struct sl_cgroups *cg, uid_t uid, uint64_t seq, struct sl_error *err);
bool sl_cgroup_exec_empty(struct sl_cgroups *cg, uid_t uid, uint64_t seq);
int sl_cgroup_exec_signal(struct sl_cgroups *cg, uid_t uid, uint64_t seq, int sig);
void sl_cgroup_exec_remove(struct sl_cgroups *cg, uid_t uid, uint64_t seq);
/* Remove the sandbox's cgroups (its processes must be gone). Best effort. */
void sl_cgroup_remove(struct sl_cgroups *cg, uid_t uid);

#endif
