#include "runtime/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/mount.h>

#include "common/cleanup.h"

#define SANDBOXES_DIR "sandloom-sandboxes"
#define DAEMON_LEAF "sandloom-daemon"
/* The longest tail ever put after a sandbox parent directory. Open refuses a
 * parent with which it would not fit PATH_MAX, so no later path is cut. */
#define LONGEST_TAIL "/sb-4294967295/x18446744073709551615/cgroup.procs"
#define CPU_PERIOD_US 100000

enum { CTL_MEMORY, CTL_PIDS, CTL_CPU, CTL_COUNT };
static const char *const CTL_NAMES[CTL_COUNT] = {"memory", "pids", "cpu"};
#define CTL_BIT(c) (1u << (c))

struct sl_cgroups {
    enum sl_cgroup_version version;
    struct sl_cgroup_limits limits;
    bool enforced[CTL_COUNT];
    char root[PATH_MAX];
    /* v2: parent[0] is the one parent directory. v1: one per controller. */
    char parent[CTL_COUNT][PATH_MAX];
    char why[256];
};

/* snprintf for paths and values: truncation is reported (errno
 * ENAMETOOLONG), not silent (a truncated cgroup path must never name another
 * cgroup). */
static int cg_fmt(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cg_fmt(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) {
        out[0] = '\0'; /* an empty path opens nothing */
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static int dir_file(char out[PATH_MAX], const char *dir, const char *name)
{
    return cg_fmt(out, PATH_MAX, "%s/%s", dir, name);
}

/* A note for `why`, appended after "; ". Cut short if it does not fit: it is
 * only read by people. */
static void why_add(struct sl_cgroups *cg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void why_add(struct sl_cgroups *cg, const char *fmt, ...)
{
    size_t len = strlen(cg->why);
    if (len > 0 && len + 2 < sizeof(cg->why)) {
        memcpy(cg->why + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cg->why + len, sizeof(cg->why) - len, fmt, ap);
    va_end(ap);
}

/* "memory, cpu" for a set of controllers. */
static const char *ctl_list(unsigned mask, char out[32])
{
    out[0] = '\0';
    for (int c = 0; c < CTL_COUNT; c++)
        if (mask & CTL_BIT(c)) {
            size_t len = strlen(out);
            snprintf(out + len, 32 - len, "%s%s", len ? ", " : "", CTL_NAMES[c]);
        }
    return out;
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

/* Whether a space-separated list (cgroup.controllers) holds `name` as a
 * whole word: "cpuset" is not "cpu". */
static bool has_word(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        p += strspn(p, " \t\n");
        size_t n = strcspn(p, " \t\n");
        if (n == len && strncmp(p, name, n) == 0)
            return true;
        p += n;
    }
    return false;
}

/* The daemon's own cgroup path in hierarchy `ctl` ("" for v2's "0::"), ""
 * for the root. Fails rather than cut a path short: "" would be the root. */
static int own_cgroup(const char *ctl, char *out, size_t size)
{
    _cleanup_fclose_ FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    _cleanup_free_ char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0'; /* line is the hierarchy id, c1 + 1 its controllers */
        const char *ctls = c1 + 1, *path = c2 + 1;
        bool match = false;
        if (!ctl[0]) {
            match = strcmp(line, "0") == 0 && !ctls[0];
        } else {
            char list[256];
            if (cg_fmt(list, sizeof(list), "%s", ctls) < 0)
                continue;
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save))
                if (strcmp(t, ctl) == 0)
                    match = true;
        }
        if (match)
            return cg_fmt(out, size, "%s", strcmp(path, "/") == 0 ? "" : path);
    }
    return -1;
}

static int mkdir_ok(const char *path) { return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1; }

/* Every path the module builds below `parent` fits PATH_MAX. */
static bool tail_fits(const char *parent)
{
    return strlen(parent) + strlen(LONGEST_TAIL) < PATH_MAX;
}

/* v2 as far as it can be seen without changing anything: the daemon's
 * cgroup (`base`) and which of memory, pids and cpu it may hand down
 * (`avail`). false when v2 is not usable at the root; `why` then says why,
 * unless the root is simply not a cgroup2 mount. */
static bool probe_v2(struct sl_cgroups *cg, char base[PATH_MAX], unsigned *avail)
{
    char own[PATH_MAX], path[PATH_MAX], controllers[512];
    if (dir_file(path, cg->root, "cgroup.controllers") < 0 ||
        read_file(path, controllers, sizeof(controllers)) < 0)
        return false;
    if (own_cgroup("", own, sizeof(own)) < 0) {
        why_add(cg, "cgroup v2: own cgroup unknown");
        return false;
    }
    /* Already in our leaf (an earlier open by this process): its parent is
     * the base, else every open would nest one level deeper. */
    size_t len = strlen(own), leaf = strlen("/" DAEMON_LEAF);
    if (len >= leaf && strcmp(own + len - leaf, "/" DAEMON_LEAF) == 0)
        own[len - leaf] = '\0';
    if (cg_fmt(base, PATH_MAX, "%s%s", cg->root, own) < 0 ||
        strlen(base) + strlen("/" SANDBOXES_DIR) + strlen(LONGEST_TAIL) >= PATH_MAX) {
        why_add(cg, "cgroup v2: the path of this service's cgroup is too long");
        return false;
    }
    if (dir_file(path, base, "cgroup.controllers") < 0 ||
        read_file(path, controllers, sizeof(controllers)) < 0) {
        why_add(cg, "cgroup v2: cannot read this service's cgroup (%s)", strerror(errno));
        return false;
    }
    if (access(base, W_OK) < 0) {
        why_add(cg, "cgroup v2: this service's cgroup is not writable (%s)", strerror(errno));
        return false;
    }
    *avail = 0;
    for (int c = 0; c < CTL_COUNT; c++)
        if (has_word(controllers, CTL_NAMES[c]))
            *avail |= CTL_BIT(c);
    return true;
}

/* A non-root cgroup that holds processes cannot hand controllers to
 * children ("no internal processes"), so the daemon first moves into a leaf
 * of its own. Only the real root is exempt, and it is the one cgroup without
 * cgroup.type: "/" inside a cgroup namespace (a container) is not it. */
static int move_to_leaf(const char *base)
{
    char path[PATH_MAX], pid[32];
    if (dir_file(path, base, "cgroup.type") < 0)
        return -1;
    if (access(path, F_OK) < 0)
        return errno == ENOENT ? 0 : -1;
    if (dir_file(path, base, DAEMON_LEAF) < 0 || mkdir_ok(path) < 0 ||
        dir_file(path, base, DAEMON_LEAF "/cgroup.procs") < 0)
        return -1;
    cg_fmt(pid, sizeof(pid), "%d", (int)getpid());
    return write_file(path, pid);
}

/* Hand the controllers in `mask` to dir's children; returns those that are
 * on. One write first (the kernel applies it all or nothing), then one at a
 * time, so a controller the kernel refuses (cpu while a realtime thread sits
 * in a non-root cgroup, say) costs only its own quota. */
static unsigned enable_controllers(const char *dir, unsigned mask, int *why_errno)
{
    char path[PATH_MAX], all[64] = "";
    if (!mask)
        return 0;
    if (dir_file(path, dir, "cgroup.subtree_control") < 0) {
        *why_errno = errno;
        return 0;
    }
    for (int c = 0; c < CTL_COUNT; c++)
        if (mask & CTL_BIT(c)) {
            size_t len = strlen(all);
            snprintf(all + len, sizeof(all) - len, "%s+%s", len ? " " : "", CTL_NAMES[c]);
        }
    if (write_file(path, all) == 0)
        return mask;
    unsigned on = 0;
    for (int c = 0; c < CTL_COUNT; c++) {
        if (!(mask & CTL_BIT(c)))
            continue;
        char one[16];
        snprintf(one, sizeof(one), "+%s", CTL_NAMES[c]);
        if (write_file(path, one) == 0)
            on |= CTL_BIT(c);
        else if (!*why_errno)
            *why_errno = errno;
    }
    return on;
}

/* v2: the sandboxes' subtree beside the daemon, with those of the wanted
 * controllers that the service's cgroup has and the kernel agrees to hand
 * down; the rest are named in `why`. false only when the subtree itself
 * cannot be made. */
static bool setup_v2(struct sl_cgroups *cg, const char *base, unsigned want, unsigned avail)
{
    char names[32];
    unsigned tried = want & avail, on = 0;
    int why_errno = 0;
    bool moved = true;
    if (tried) {
        if (move_to_leaf(base) < 0) {
            why_errno = errno;
            moved = false;
        } else {
            on = enable_controllers(base, tried, &why_errno);
        }
    }
    cg_fmt(cg->parent[0], sizeof(cg->parent[0]), "%s/" SANDBOXES_DIR, base); /* fits: probe_v2 */
    if (mkdir_ok(cg->parent[0]) < 0) {
        why_add(cg, "cgroup v2: cannot create the sandbox subtree (%s)", strerror(errno));
        return false;
    }
    on = enable_controllers(cg->parent[0], on, &why_errno);
    if (want & ~avail)
        why_add(cg, "cgroup v2: no %s controller in this service's cgroup",
                ctl_list(want & ~avail, names));
    if (tried & ~on)
        why_add(cg, "cgroup v2: cannot enable %s: %s%s", ctl_list(tried & ~on, names),
                moved ? "" : "cannot move the daemon into a leaf cgroup: ", strerror(why_errno));
    for (int c = 0; c < CTL_COUNT; c++)
        cg->enforced[c] = (on & CTL_BIT(c)) != 0;
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
            char own[PATH_MAX], probe[PATH_MAX], parent[PATH_MAX];
            if (cg_fmt(probe, sizeof(probe), "%s/%s/cgroup.procs", cg->root, mounts[m]) < 0 ||
                access(probe, W_OK) < 0 || own_cgroup(CTL_NAMES[c], own, sizeof(own)) < 0)
                continue;
            int rc =
                cg_fmt(parent, sizeof(parent), "%s/%s%s/" SANDBOXES_DIR, cg->root, mounts[m], own);
            if (rc < 0 || !tail_fits(parent) || mkdir_ok(parent) < 0)
                continue;
            memcpy(cg->parent[c], parent, sizeof(parent));
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

int sl_cgroups_open_at(const char *root, const struct sl_cgroup_limits *limits,
                       struct sl_cgroups **out, struct sl_error *err)
{
    if (!root || root[0] != '/')
        return sl_error_set(err, SL_E_INTERNAL, EINVAL, "the cgroup root is not an absolute path");
    size_t root_len = strlen(root);
    while (root_len > 1 && root[root_len - 1] == '/')
        root_len--;
    if (root_len >= PATH_MAX)
        return sl_error_set(err, SL_E_INTERNAL, ENAMETOOLONG, "the cgroup root path is too long");
    struct sl_cgroups *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    memcpy(cg->root, root, root_len);
    cg->limits = *limits;
    unsigned want = (limits->memory_bytes > 0 ? CTL_BIT(CTL_MEMORY) : 0) |
                    (limits->pids > 0 ? CTL_BIT(CTL_PIDS) : 0) |
                    (limits->cpus > 0 ? CTL_BIT(CTL_CPU) : 0);
    unsigned avail = 0;
    char base[PATH_MAX] = "";
    bool v2 = probe_v2(cg, base, &avail), v2_ready = false;
    if (v2 && (!want || (want & avail))) {
        v2_ready = setup_v2(cg, base, want, avail);
        bool any = false;
        for (int c = 0; c < CTL_COUNT; c++)
            any |= cg->enforced[c];
        if (v2_ready && (any || !want)) {
            cg->version = SL_CGROUP_V2;
            goto done;
        }
    }
    /* v2 hands down none of the wanted controllers: v1 hierarchies (a hybrid
     * host) may still have them. */
    char why_v2[sizeof(cg->why)];
    memcpy(why_v2, cg->why, sizeof(why_v2));
    memset(cg->enforced, 0, sizeof(cg->enforced));
    if (open_v1(cg)) {
        char names[32];
        unsigned found = 0;
        for (int c = 0; c < CTL_COUNT; c++)
            found |= cg->enforced[c] ? CTL_BIT(c) : 0;
        cg->why[0] = '\0';
        if (want & ~found)
            why_add(cg, "cgroup v1: no writable %s hierarchy", ctl_list(want & ~found, names));
        goto done;
    }
    /* Nothing enforceable, but a usable v2 still gives each sandbox a cgroup
     * of its own, so that it can be killed as a whole. */
    memcpy(cg->why, why_v2, sizeof(cg->why));
    if (v2 && !(want & avail))
        v2_ready = setup_v2(cg, base, want, avail);
    if (v2_ready) {
        cg->version = SL_CGROUP_V2;
        goto done;
    }
    if (cg->why[0])
        why_add(cg, "cgroup v1: no usable hierarchy");
    else
        cg_fmt(cg->why, sizeof(cg->why), "cgroup v1: no writable memory, pids or cpu hierarchy");
done:
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

int sl_cgroups_open(const struct sl_cgroup_limits *limits, struct sl_cgroups **out,
                    struct sl_error *err)
{
    return sl_cgroups_open_at(SL_CGROUP_ROOT, limits, out, err);
}

void sl_cgroups_close(struct sl_cgroups *cg) { free(cg); }

enum sl_cgroup_version sl_cgroups_version(const struct sl_cgroups *cg) { return cg->version; }
bool sl_cgroups_memory(const struct sl_cgroups *cg) { return cg->enforced[CTL_MEMORY]; }
bool sl_cgroups_pids(const struct sl_cgroups *cg) { return cg->enforced[CTL_PIDS]; }
bool sl_cgroups_cpu(const struct sl_cgroups *cg) { return cg->enforced[CTL_CPU]; }
const char *sl_cgroups_why(const struct sl_cgroups *cg) { return cg->why; }

/* The sandbox's directory in hierarchy c (v2: always parent[0]). */
static int sandbox_dir(const struct sl_cgroups *cg, int c, uid_t uid, char out[PATH_MAX])
{
    return cg_fmt(out, PATH_MAX, "%s/sb-%u", cg->parent[cg->version == SL_CGROUP_V2 ? 0 : c],
                  (unsigned)uid);
}

/* The directories sandboxes get: v2 one (even with no quota on), v1 one per
 * enforced controller. */
static bool has_dir(const struct sl_cgroups *cg, int c)
{
    return cg->version == SL_CGROUP_V2 ? c == 0 : cg->enforced[c];
}

static int64_t lower(int64_t base, int64_t cap)
{
    return cap > 0 && cap < base ? cap : base;
}

static int set_limit(const struct sl_cgroups *cg, int c, const char *dir,
                     const struct sl_cgroup_limits *cap, struct sl_error *err)
{
    char path[PATH_MAX], value[64];
    struct sl_cgroup_limits capped = cg->limits;
    if (cap) {
        capped.memory_bytes = lower(capped.memory_bytes, cap->memory_bytes);
        capped.pids = lower(capped.pids, cap->pids);
        if (cap->cpus > 0 && cap->cpus < capped.cpus)
            capped.cpus = cap->cpus;
    }
    const struct sl_cgroup_limits *l = &capped;
    bool v2 = cg->version == SL_CGROUP_V2;
    switch (c) {
    case CTL_MEMORY: {
        cg_fmt(value, sizeof(value), "%lld", (long long)l->memory_bytes);
        char swap[PATH_MAX];
        bool has_swap =
            dir_file(swap, dir, v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes") == 0;
        if (dir_file(path, dir, v2 ? "memory.max" : "memory.limit_in_bytes") < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox memory quota");
        /* v1 keeps memsw >= memory: raising a limit an earlier entry set
         * lower (a ceiling lifted, a larger SANDBOX_MEMORY_LIMIT_BYTES)
         * takes memsw first, lowering takes memory first. */
        if (write_file(path, value) < 0 &&
            (v2 || !has_swap || write_file(swap, value) < 0 || write_file(path, value) < 0))
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox memory quota");
        /* No swap beyond the quota, so the limit means what it says. */
        if (has_swap)
            write_file(swap, v2 ? "0" : value); /* absent without swap accounting */
        return 0;
    }
    case CTL_PIDS:
        cg_fmt(value, sizeof(value), "%lld", (long long)l->pids);
        if (dir_file(path, dir, "pids.max") < 0 || write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox process quota");
        return 0;
    default: {
        long long quota = (long long)(l->cpus * CPU_PERIOD_US);
        if (quota < 1000)
            quota = 1000; /* the kernel's minimum */
        if (v2) {
            cg_fmt(value, sizeof(value), "%lld %d", quota, CPU_PERIOD_US);
            if (dir_file(path, dir, "cpu.max") < 0 || write_file(path, value) < 0)
                return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox CPU quota");
            return 0;
        }
        cg_fmt(value, sizeof(value), "%d", CPU_PERIOD_US);
        if (dir_file(path, dir, "cpu.cfs_period_us") < 0 || write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox CPU period");
        cg_fmt(value, sizeof(value), "%lld", quota);
        if (dir_file(path, dir, "cpu.cfs_quota_us") < 0 || write_file(path, value) < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot set the sandbox CPU quota");
        return 0;
    }
    }
}

int sl_cgroup_enter_fds(struct sl_cgroups *cg, uid_t uid, const struct sl_cgroup_limits *cap,
                        int fds[SL_CGROUP_MAX_FDS], struct sl_error *err)
{
    bool v2 = cg->version == SL_CGROUP_V2;
    int n = 0;
    for (int c = 0; c < CTL_COUNT; c++) {
        if (!has_dir(cg, c))
            continue;
        char dir[PATH_MAX], procs[PATH_MAX];
        if (sandbox_dir(cg, c, uid, dir) < 0 || dir_file(procs, dir, "cgroup.procs") < 0) {
            sl_error_errno(err, SL_E_RUNTIME, "cannot name the sandbox cgroup");
            goto fail;
        }
        /* Limits are written every time, not only when the cgroup is made:
         * a cgroup left by an earlier daemon (a crash, another instance with
         * other settings) must not keep its old, possibly larger, limits.
         * Warm sessions come here once per session, not per command. v2:
         * one directory holds every controller. */
        bool made = mkdir(dir, 0755) == 0;
        if (!made && errno != EEXIST) {
            sl_error_errno(err, SL_E_RUNTIME, "cannot create the sandbox cgroup");
            goto fail;
        }
        for (int k = 0; k < CTL_COUNT; k++)
            if (cg->enforced[k] && (v2 || k == c) && set_limit(cg, k, dir, cap, err) < 0) {
                if (made)
                    rmdir(dir);
                goto fail;
            }
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
    char dir[PATH_MAX], path[PATH_MAX], buf[1024];
    const char *events = cg->version == SL_CGROUP_V2 ? "memory.events" : "memory.oom_control";
    if (sandbox_dir(cg, CTL_MEMORY, uid, dir) < 0 || dir_file(path, dir, events) < 0 ||
        read_file(path, buf, sizeof(buf)) < 0)
        return -1;
    const char *p = strstr(buf, "oom_kill ");
    return p ? strtoll(p + strlen("oom_kill "), NULL, 10) : -1;
}

/* One number of a cgroup file: the whole file, or the value of `key` in
 * a "key value" list (memory.stat, cpu.stat); -1 when absent. */
static int64_t cg_number(const struct sl_cgroups *cg, int c, uid_t uid, const char *file,
                         const char *key)
{
    char dir[PATH_MAX], path[PATH_MAX], buf[8192];
    if (sandbox_dir(cg, c, uid, dir) < 0 || dir_file(path, dir, file) < 0 ||
        read_file(path, buf, sizeof(buf)) < 0)
        return -1;
    if (!key)
        return strncmp(buf, "max", 3) == 0 ? 0 : strtoll(buf, NULL, 10);
    size_t kl = strlen(key);
    for (const char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
            return strtoll(p + kl + 1, NULL, 10);
    return -1;
}

/* CPU time of the processes listed in one cgroup.procs, with what their
 * reaped children used (/proc/<pid>/stat utime, stime, cutime, cstime). */
static int64_t procs_cpu_usec(const char *procs_path)
{
    FILE *f = fopen(procs_path, "re");
    if (!f)
        return 0;
    long tick = sysconf(_SC_CLK_TCK);
    int64_t ticks = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        if (read_file(path, buf, sizeof(buf)) < 0)
            continue;
        /* After the command's name, which may hold spaces and parentheses. */
        const char *p = strrchr(buf, ')');
        unsigned long long ut = 0, st = 0;
        long long cut = 0, cst = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
                        &ut, &st, &cut, &cst) == 4)
            ticks += (int64_t)(ut + st) + (int64_t)(cut + cst);
    }
    fclose(f);
    return tick > 0 ? ticks * (1000000 / tick) : 0;
}

/* v1 without a cpuacct hierarchy of the sandbox's: its live processes'
 * CPU, read through the one hierarchy that lists them all (pids: the
 * sandbox's cgroup and its executions' x<seq> below it). Processes that
 * ended unreaped by one of its own are not counted. */
static int64_t v1_cpu_usec(const struct sl_cgroups *cg, uid_t uid)
{
    char dir[PATH_MAX], path[PATH_MAX];
    if (!cg->enforced[CTL_PIDS] || sandbox_dir(cg, CTL_PIDS, uid, dir) < 0)
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int64_t total = 0;
    if (dir_file(path, dir, "cgroup.procs") == 0)
        total += procs_cpu_usec(path);
    for (struct dirent *e; (e = readdir(d));) {
        char sub[PATH_MAX];
        if (e->d_name[0] != 'x' || e->d_type != DT_DIR ||
            cg_fmt(sub, sizeof(sub), "%s/%s/cgroup.procs", dir, e->d_name) < 0)
            continue;
        total += procs_cpu_usec(sub);
    }
    closedir(d);
    return total;
}

void sl_cgroup_usage(struct sl_cgroups *cg, uid_t uid, struct sl_cgroup_usage *out)
{
    *out = (struct sl_cgroup_usage){-1, -1, -1, -1};
    bool v2 = cg->version == SL_CGROUP_V2;
    if (cg->enforced[CTL_MEMORY]) {
        out->memory_bytes =
            cg_number(cg, CTL_MEMORY, uid, v2 ? "memory.current" : "memory.usage_in_bytes", NULL);
        out->cache_bytes = cg_number(cg, CTL_MEMORY, uid, "memory.stat", v2 ? "file" : "cache");
        out->memory_limit =
            cg_number(cg, CTL_MEMORY, uid, v2 ? "memory.max" : "memory.limit_in_bytes", NULL);
    }
    if (v2) {
        out->cpu_usec = cg_number(cg, 0, uid, "cpu.stat", "usage_usec");
    } else if (cg->version == SL_CGROUP_V1) {
        /* cpuacct where it is mounted with cpu, else the processes'. */
        int64_t ns = cg->enforced[CTL_CPU] ? cg_number(cg, CTL_CPU, uid, "cpuacct.usage", NULL)
                                           : -1;
        out->cpu_usec = ns >= 0 ? ns / 1000 : v1_cpu_usec(cg, uid);
    }
}

/* ---- per-execution cgroups ---------------------------------------------- */

/* The hierarchy holding execution cgroups: v2's one, or v1's pids (the one
 * v1 controller that can stop a tree from forking: pids.max = 0). */
static int exec_ctl(const struct sl_cgroups *cg)
{
    if (cg->version == SL_CGROUP_V2)
        return 0;
    return cg->version == SL_CGROUP_V1 && cg->enforced[CTL_PIDS] ? CTL_PIDS : -1;
}

bool sl_cgroups_exec_supported(const struct sl_cgroups *cg) { return exec_ctl(cg) >= 0; }

static int exec_dir(const struct sl_cgroups *cg, uid_t uid, uint64_t seq, char out[PATH_MAX])
{
    int c = exec_ctl(cg);
    char sb[PATH_MAX];
    if (c < 0 || sandbox_dir(cg, c, uid, sb) < 0) {
        errno = c < 0 ? ENOTSUP : errno;
        return -1;
    }
    return cg_fmt(out, PATH_MAX, "%s/x%llu", sb, (unsigned long long)seq);
}

static int exec_procs_open(const char *dir, struct sl_error *err)
{
    char procs[PATH_MAX];
    if (dir_file(procs, dir, "cgroup.procs") < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot name the command's cgroup");
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open the command's cgroup");
    return fd;
}

int sl_cgroup_exec_create(struct sl_cgroups *cg, uid_t uid, uint64_t seq, struct sl_error *err)
{
    char sb[PATH_MAX], dir[PATH_MAX];
    if (exec_dir(cg, uid, seq, dir) < 0 || sandbox_dir(cg, exec_ctl(cg), uid, sb) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot name the command's cgroup");
    /* The sandbox's own may not exist yet (its first command): its limits
     * are written when its first process enters it (sl_cgroup_enter_fds),
     * before this command's launcher runs anything. */
    if (mkdir_ok(sb) < 0 || (mkdir(dir, 0755) < 0 && errno != EEXIST))
        return sl_error_errno(err, SL_E_RUNTIME, "cannot create the command's cgroup");
    int fd = exec_procs_open(dir, err);
    if (fd < 0) {
        int saved = errno;
        rmdir(dir);
        errno = saved;
    }
    return fd;
}

int sl_cgroup_exec_reopen(struct sl_cgroups *cg, uid_t uid, uint64_t seq, struct sl_error *err)
{
    char dir[PATH_MAX];
    if (exec_dir(cg, uid, seq, dir) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot name the command's cgroup");
    return exec_procs_open(dir, err);
}

bool sl_cgroup_exec_empty(struct sl_cgroups *cg, uid_t uid, uint64_t seq)
{
    char dir[PATH_MAX], procs[PATH_MAX], buf[16];
    if (exec_dir(cg, uid, seq, dir) < 0 || dir_file(procs, dir, "cgroup.procs") < 0)
        return false;
    _cleanup_close_ int fd = open(procs, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n;
    do
        n = read(fd, buf, sizeof(buf));
    while (n < 0 && errno == EINTR);
    return n == 0;
}

/* Signal every pid listed in dir/cgroup.procs; the count signalled, -1 if
 * the file cannot be read. Pids are read in chunks: a fork bomb lists
 * hundreds. */
static int signal_listed(const char *dir, int sig)
{
    char path[PATH_MAX], buf[4096];
    if (dir_file(path, dir, "cgroup.procs") < 0)
        return -1;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int count = 0;
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *p = buf, *nl;
        while ((nl = strchr(p, '\n'))) {
            *nl = '\0';
            long pid = strtol(p, NULL, 10);
            if (pid > 1 && kill((pid_t)pid, sig) == 0)
                count++;
            p = nl + 1;
        }
        have = (size_t)(buf + have - p);
        memmove(buf, p, have);
    }
    return count;
}

int sl_cgroup_exec_signal(struct sl_cgroups *cg, uid_t uid, uint64_t seq, int sig)
{
    char dir[PATH_MAX], path[PATH_MAX];
    if (exec_dir(cg, uid, seq, dir) < 0)
        return -1;
    if (sig != SIGKILL)
        return signal_listed(dir, sig);
    /* SIGKILL must not race with fork: v2 has cgroup.kill for exactly that;
     * v1 stops the tree from forking first (pids.max = 0 fails every fork
     * in it at once), then kills what is listed until nothing is. */
    if (cg->version == SL_CGROUP_V2 && dir_file(path, dir, "cgroup.kill") == 0 &&
        write_file(path, "1") == 0)
        return 0;
    if (cg->version == SL_CGROUP_V1 && dir_file(path, dir, "pids.max") == 0)
        (void)write_file(path, "0");
    int total = 0;
    for (int round = 0; round < 100; round++) {
        int n = signal_listed(dir, SIGKILL);
        if (n <= 0)
            return n < 0 && round == 0 ? -1 : total;
        total += n;
        usleep(1000); /* let the killed leave the list */
    }
    return total;
}

void sl_cgroup_exec_remove(struct sl_cgroups *cg, uid_t uid, uint64_t seq)
{
    char dir[PATH_MAX];
    if (exec_dir(cg, uid, seq, dir) == 0)
        (void)rmdir(dir); /* EBUSY: a background job lives on; swept at release */
}

/* Execution cgroups left under a sandbox's directory (background jobs that
 * outlived their command, an earlier daemon's): killed and removed. */
static void remove_exec_children(const char *sbdir, bool v2)
{
    DIR *d = opendir(sbdir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char child[PATH_MAX], path[PATH_MAX];
        if (de->d_name[0] != 'x' || de->d_type != DT_DIR ||
            cg_fmt(child, sizeof(child), "%s/%s", sbdir, de->d_name) < 0)
            continue;
        if (v2 && dir_file(path, child, "cgroup.kill") == 0)
            (void)write_file(path, "1");
        else
            (void)signal_listed(child, SIGKILL);
        for (int i = 0; i < 50 && rmdir(child) < 0 && errno == EBUSY; i++)
            usleep(10000);
    }
    closedir(d);
}

void sl_cgroup_remove(struct sl_cgroups *cg, uid_t uid)
{
    for (int c = 0; c < CTL_COUNT; c++) {
        char dir[PATH_MAX], kill_path[PATH_MAX];
        if (!has_dir(cg, c) || sandbox_dir(cg, c, uid, dir) < 0)
            continue;
        if (c == exec_ctl(cg))
            remove_exec_children(dir, cg->version == SL_CGROUP_V2);
        if (cg->version == SL_CGROUP_V2 && dir_file(kill_path, dir, "cgroup.kill") == 0)
            write_file(kill_path, "1");
        /* Killed processes leave the cgroup once reaped: retry briefly. */
        for (int i = 0; i < 50 && rmdir(dir) < 0 && errno == EBUSY; i++)
            usleep(10000);
    }
}

/* ---- favordynmods -------------------------------------------------------- */

/* The per-mount flags /proc/self/mounts lists beside a superblock's own
 * options: a superblock reconfigure takes only the latter. */
static const char *const vfs_flags[] = {"rw",      "ro",         "nosuid",      "nodev",
                                        "noexec",  "relatime",   "noatime",     "nodiratime",
                                        "strictatime", "lazytime", "sync",      "dirsync",
                                        "mand",    "nosymfollow", NULL};

static bool listed(const char *const *names, const char *name, size_t len)
{
    for (size_t i = 0; names[i]; i++)
        if (strlen(names[i]) == len && strncmp(names[i], name, len) == 0)
            return true;
    return false;
}

static bool option_listed(const char *options, const char *name)
{
    const char *one[] = {name, NULL};
    for (const char *q = options; *q;) {
        size_t len = strcspn(q, ",");
        if (listed(one, q, len))
            return true;
        q += len + (q[len] == ',');
    }
    return false;
}

/* The first cgroup2 mount: its directory and options. false when none. */
static bool cgroup2_mount(char *dir, size_t dir_size, char *options, size_t options_size)
{
    _cleanup_fclose_ FILE *f = fopen("/proc/self/mounts", "re");
    char line[4096];
    while (f && fgets(line, sizeof(line), f)) {
        char src[256], mnt[PATH_MAX], type[64], opts[1024];
        if (sscanf(line, "%255s %4095s %63s %1023s", src, mnt, type, opts) == 4 &&
            strcmp(type, "cgroup2") == 0) {
            snprintf(dir, dir_size, "%s", mnt);
            snprintf(options, options_size, "%s", opts);
            return true;
        }
    }
    return false;
}

/* Every superblock option the mount shows given again, favordynmods
 * added: a reconfigure applies exactly the options it is given, so one
 * left out would be cleared host-wide. 0, or -1 with errno. */
static int reconfigure_with_favordynmods(int fd, const char *options)
{
    char opt[256];
    for (const char *q = options; *q;) {
        const char *tok = q;
        size_t len = strcspn(q, ",");
        q += len + (q[len] == ',');
        if (len == 0 || len >= sizeof(opt) || listed(vfs_flags, tok, len))
            continue;
        memcpy(opt, tok, len);
        opt[len] = '\0';
        char *value = strchr(opt, '=');
        if (value)
            *value++ = '\0';
        if (syscall(SYS_fsconfig, fd, value ? FSCONFIG_SET_STRING : FSCONFIG_SET_FLAG, opt,
                    value, 0) < 0)
            return -1;
    }
    if (syscall(SYS_fsconfig, fd, FSCONFIG_SET_FLAG, "favordynmods", NULL, 0) < 0)
        return -1;
    return (int)syscall(SYS_fsconfig, fd, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0);
}

int sl_cgroup_favor_dynmods(char *why, size_t size)
{
    why[0] = '\0';
    char dir[PATH_MAX], options[1024];
    if (!cgroup2_mount(dir, sizeof(dir), options, sizeof(options))) {
        snprintf(why, size, "the host has no cgroup2 mount to give favordynmods");
        return 0;
    }
    if (option_listed(options, "favordynmods"))
        return 1;
    /* The superblock alone (fspick + reconfigure): the mount's own flags
     * (nosuid, nodev, ...) are not touched, as a remount would. */
    _cleanup_close_ int fd = (int)syscall(SYS_fspick, AT_FDCWD, dir, FSPICK_CLOEXEC);
    if (fd < 0 || reconfigure_with_favordynmods(fd, options) < 0) {
        snprintf(why, size, "cannot give %s favordynmods: %s", dir, strerror(errno));
        return 0;
    }
    /* Outside the host's cgroup namespace the kernel takes the reconfigure
     * and changes nothing: only the mount's options say. */
    if (!cgroup2_mount(dir, sizeof(dir), options, sizeof(options)) ||
        !option_listed(options, "favordynmods")) {
        snprintf(why, size, "%s took favordynmods without effect (not the host's cgroup "
                 "namespace?)", dir);
        return 0;
    }
    return 1;
}
