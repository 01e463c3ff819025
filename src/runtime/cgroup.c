#include "runtime/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

#define CG_MOUNT "/sys/fs/cgroup"
#define SANDBOXES_DIR "sandloom-sandboxes"
#define CPU_PERIOD_US 100000

enum { CTL_MEMORY, CTL_PIDS, CTL_CPU, CTL_COUNT };
static const char *const CTL_NAMES[CTL_COUNT] = {"memory", "pids", "cpu"};

struct sl_cgroups {
    enum sl_cgroup_version version;
    struct sl_cgroup_limits limits;
    bool enforced[CTL_COUNT];
    /* v2: parent[0] is the one parent directory. v1: one per controller. */
    char parent[CTL_COUNT][PATH_MAX];
    char why[256];
};

/* snprintf for paths and values: truncation is reported, not silent (a
 * truncated cgroup path must never name another cgroup). */
static int cg_fmt(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cg_fmt(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) {
        out[0] = '\0'; /* an empty path opens nothing */
        return -1;
    }
    return 0;
}

static int write_file(const char *path, const char *value)
{
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = strlen(value);
    return write(fd, value, len) == (ssize_t)len ? 0 : -1;
}

static int read_file(const char *path, char *buf, size_t size)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* The daemon's own cgroup path in hierarchy `ctl` ("" for v2's "0::"). */
static int own_cgroup(const char *ctl, char *out, size_t size)
{
    _cleanup_fclose_ FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char line[PATH_MAX + 64];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctls = c1 + 1, *path = c2 + 1;
        bool match = false;
        if (!ctl[0]) {
            match = strcmp(line, "0") == 0 && !ctls[0];
        } else {
            char list[256];
            cg_fmt(list, sizeof(list), "%s", ctls);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save))
                if (strcmp(t, ctl) == 0)
                    match = true;
        }
        if (match) {
            cg_fmt(out, size, "%s", strcmp(path, "/") == 0 ? "" : path);
            return 0;
        }
    }
    return -1;
}

static int mkdir_ok(const char *path) { return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1; }

/* v2: the daemon's cgroup may hold processes (the daemon itself), and a
 * cgroup with processes cannot hand controllers to children ("no internal
 * processes"). So the daemon moves into a leaf of its own, and sandboxes get
 * a sibling subtree with memory, pids and cpu enabled. */
static bool open_v2(struct sl_cgroups *cg)
{
    char own[PATH_MAX], base[PATH_MAX], path[PATH_MAX + 64], controllers[512];
    if (read_file(CG_MOUNT "/cgroup.controllers", controllers, sizeof(controllers)) < 0)
        return false;
    if (own_cgroup("", own, sizeof(own)) < 0) {
        cg_fmt(cg->why, sizeof(cg->why), "cgroup v2: own cgroup unknown");
        return false;
    }
    cg_fmt(base, sizeof(base), CG_MOUNT "%s", own);
    cg_fmt(path, sizeof(path), "%s/cgroup.controllers", base);
    if (read_file(path, controllers, sizeof(controllers)) < 0 || !strstr(controllers, "memory") ||
        !strstr(controllers, "pids") || !strstr(controllers, "cpu")) {
        cg_fmt(cg->why, sizeof(cg->why),
                 "cgroup v2: memory, pids and cpu are not all delegated to this service");
        return false;
    }
    cg_fmt(path, sizeof(path), "%s/sandloom-daemon", base);
    char self_procs[PATH_MAX + 64];
    cg_fmt(self_procs, sizeof(self_procs), "%s/cgroup.procs", path);
    char pid[32];
    cg_fmt(pid, sizeof(pid), "%d", getpid());
    cg_fmt(path, sizeof(path), "%s/sandloom-daemon", base);
    if (own[0] && (mkdir_ok(path) < 0 || write_file(self_procs, pid) < 0)) {
        cg_fmt(cg->why, sizeof(cg->why), "cgroup v2: cannot move the daemon into a leaf");
        return false;
    }
    cg_fmt(path, sizeof(path), "%s/cgroup.subtree_control", base);
    if (write_file(path, "+memory +pids +cpu") < 0) {
        cg_fmt(cg->why, sizeof(cg->why), "cgroup v2: cannot enable memory, pids and cpu");
        return false;
    }
    cg_fmt(cg->parent[0], sizeof(cg->parent[0]), "%s/" SANDBOXES_DIR, base);
    cg_fmt(path, sizeof(path), "%s/cgroup.subtree_control", cg->parent[0]);
    if (mkdir_ok(cg->parent[0]) < 0 || write_file(path, "+memory +pids +cpu") < 0) {
        cg_fmt(cg->why, sizeof(cg->why), "cgroup v2: cannot prepare the sandbox subtree");
        return false;
    }
    for (int c = 0; c < CTL_COUNT; c++)
        cg->enforced[c] = true;
    cg->version = SL_CGROUP_V2;
    return true;
}

/* v1: one hierarchy per controller; the parent sits under the daemon's own
 * cgroup in each. A missing controller disables only its quota. */
static bool open_v1(struct sl_cgroups *cg)
{
    bool any = false;
    for (int c = 0; c < CTL_COUNT; c++) {
        const char *mounts[] = {CTL_NAMES[c], c == CTL_CPU ? "cpu,cpuacct" : NULL};
        for (size_t m = 0; m < 2 && mounts[m] && !cg->enforced[c]; m++) {
            char own[PATH_MAX], probe[PATH_MAX + 64];
            cg_fmt(probe, sizeof(probe), CG_MOUNT "/%s/cgroup.procs", mounts[m]);
            if (access(probe, W_OK) < 0 || own_cgroup(CTL_NAMES[c], own, sizeof(own)) < 0)
                continue;
            cg_fmt(cg->parent[c], sizeof(cg->parent[c]), CG_MOUNT "/%s%s/" SANDBOXES_DIR,
                     mounts[m], own);
            if (mkdir_ok(cg->parent[c]) < 0)
                continue;
            cg->enforced[c] = true;
            any = true;
        }
    }
    if (any)
        cg->version = SL_CGROUP_V1;
    else
        cg_fmt(cg->why, sizeof(cg->why), "cgroup v1: no writable memory, pids or cpu hierarchy");
    return any;
}

int sl_cgroups_open(const struct sl_cgroup_limits *limits, struct sl_cgroups **out,
                    struct sl_error *err)
{
    struct sl_cgroups *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    cg->limits = *limits;
    if (!open_v2(cg)) {
        char why_v2[256];
        cg_fmt(why_v2, sizeof(why_v2), "%s", cg->why);
        memset(cg->enforced, 0, sizeof(cg->enforced));
        if (!open_v1(cg) && why_v2[0])
            cg_fmt(cg->why, sizeof(cg->why), "%s; cgroup v1: no usable hierarchy", why_v2);
    }
    /* A quota set to 0 is not enforced (the operator turned it off). */
    if (limits->memory_bytes <= 0)
        cg->enforced[CTL_MEMORY] = false;
    if (limits->pids <= 0)
        cg->enforced[CTL_PIDS] = false;
    if (limits->cpus <= 0)
        cg->enforced[CTL_CPU] = false;
    *out = cg;
    return 0;
}

void sl_cgroups_close(struct sl_cgroups *cg) { free(cg); }

enum sl_cgroup_version sl_cgroups_version(const struct sl_cgroups *cg) { return cg->version; }
bool sl_cgroups_memory(const struct sl_cgroups *cg) { return cg->enforced[CTL_MEMORY]; }
bool sl_cgroups_pids(const struct sl_cgroups *cg) { return cg->enforced[CTL_PIDS]; }
bool sl_cgroups_cpu(const struct sl_cgroups *cg) { return cg->enforced[CTL_CPU]; }
const char *sl_cgroups_why(const struct sl_cgroups *cg) { return cg->why; }

/* The sandbox's directory in hierarchy c (v2: always parent[0]). */
static void sandbox_dir(const struct sl_cgroups *cg, int c, uid_t uid, char *out, size_t size)
{
    cg_fmt(out, size, "%s/sb-%u", cg->parent[cg->version == SL_CGROUP_V2 ? 0 : c],
             (unsigned)uid);
}

static int set_limit(const struct sl_cgroups *cg, int c, const char *dir, struct sl_error *err)
{
    char path[PATH_MAX + 64], value[64];
    const struct sl_cgroup_limits *l = &cg->limits;
    bool v2 = cg->version == SL_CGROUP_V2;
    switch (c) {
    case CTL_MEMORY:
        cg_fmt(value, sizeof(value), "%lld", (long long)l->memory_bytes);
        cg_fmt(path, sizeof(path), "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        if (write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox memory quota");
        /* No swap beyond the quota, so the limit means what it says. */
        cg_fmt(path, sizeof(path), "%s/%s", dir,
                 v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes");
        write_file(path, v2 ? "0" : value); /* absent without swap accounting */
        return 0;
    case CTL_PIDS:
        cg_fmt(value, sizeof(value), "%lld", (long long)l->pids);
        cg_fmt(path, sizeof(path), "%s/pids.max", dir);
        if (write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox process quota");
        return 0;
    default: {
        long long quota = (long long)(l->cpus * CPU_PERIOD_US);
        if (quota < 1000)
            quota = 1000; /* the kernel's minimum */
        if (v2) {
            cg_fmt(value, sizeof(value), "%lld %d", quota, CPU_PERIOD_US);
            cg_fmt(path, sizeof(path), "%s/cpu.max", dir);
            if (write_file(path, value) < 0)
                return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox CPU quota");
            return 0;
        }
        cg_fmt(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
        cg_fmt(value, sizeof(value), "%d", CPU_PERIOD_US);
        if (write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox CPU period");
        cg_fmt(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
        cg_fmt(value, sizeof(value), "%lld", quota);
        if (write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox CPU quota");
        return 0;
    }
    }
}

int sl_cgroup_enter_fds(struct sl_cgroups *cg, uid_t uid, int fds[SL_CGROUP_MAX_FDS],
                        struct sl_error *err)
{
    int n = 0;
    for (int c = 0; c < CTL_COUNT; c++) {
        if (!cg->enforced[c])
            continue;
        char dir[PATH_MAX + 32], procs[PATH_MAX + 64];
        sandbox_dir(cg, c, uid, dir, sizeof(dir));
        /* Limits are written when the cgroup is made; later executions of
         * the sandbox find it and only open cgroup.procs. */
        if (mkdir(dir, 0755) == 0) {
            for (int k = 0; k < CTL_COUNT; k++)
                if (cg->enforced[k] && (cg->version == SL_CGROUP_V1 ? k == c : true) &&
                    set_limit(cg, k, dir, err) < 0) {
                    rmdir(dir);
                    goto fail;
                }
        } else if (errno != EEXIST) {
            sl_error_errno(err, SL_E_RUNTIME, "cannot create the sandbox cgroup");
            goto fail;
        }
        if (cg->version == SL_CGROUP_V2 && n == 1)
            continue; /* one directory holds every controller */
        cg_fmt(procs, sizeof(procs), "%s/cgroup.procs", dir);
        fds[n] = open(procs, O_WRONLY | O_CLOEXEC);
        if (fds[n] < 0) {
            sl_error_errno(err, SL_E_RUNTIME, "cannot open the sandbox cgroup");
            goto fail;
        }
        n++;
    }
    return n;
fail:
    while (n > 0)
        close(fds[--n]);
    return -1;
}

int64_t sl_cgroup_oom_kills(struct sl_cgroups *cg, uid_t uid)
{
    if (!cg->enforced[CTL_MEMORY])
        return -1;
    char dir[PATH_MAX + 32], path[PATH_MAX + 64], buf[1024];
    sandbox_dir(cg, CTL_MEMORY, uid, dir, sizeof(dir));
    cg_fmt(path, sizeof(path), "%s/%s", dir,
             cg->version == SL_CGROUP_V2 ? "memory.events" : "memory.oom_control");
    if (read_file(path, buf, sizeof(buf)) < 0)
        return -1;
    const char *p = strstr(buf, "oom_kill ");
    return p ? strtoll(p + strlen("oom_kill "), NULL, 10) : -1;
}

void sl_cgroup_remove(struct sl_cgroups *cg, uid_t uid)
{
    for (int c = 0; c < CTL_COUNT; c++) {
        if (!cg->enforced[c])
            continue;
        char dir[PATH_MAX + 32];
        sandbox_dir(cg, c, uid, dir, sizeof(dir));
        if (cg->version == SL_CGROUP_V2) {
            char kill_path[PATH_MAX + 64];
            cg_fmt(kill_path, sizeof(kill_path), "%s/cgroup.kill", dir);
            write_file(kill_path, "1");
        }
        /* Killed processes leave the cgroup once reaped: retry briefly. */
        for (int i = 0; i < 50 && rmdir(dir) < 0 && errno == EBUSY; i++)
            usleep(10000);
    }
}
