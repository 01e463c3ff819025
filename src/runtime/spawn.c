/* Entering a fresh sandbox: the mount-tree plan (parent, at startup), the
 * clone3 + id-map handshake (parent, per exec) and the pre-exec child.
 *
 * Everything between clone3 and execveat (child_*) runs in a forked copy of
 * a multi-threaded daemon: it calls raw syscalls only (no malloc, no stdio,
 * no glibc set*id wrappers, which would try to signal the parent's threads),
 * reads data prepared before the clone, and reports a failure as one
 * struct spawn_failure on the error pipe before _exit(127). The layout
 * follows bubblewrap: a scratch tmpfs becomes the root, the host tree stays
 * reachable at /oldroot while /newroot is assembled, then /newroot becomes /
 * and the host tree is detached. */
#include "runtime/spawn.h"
#include "runtime/session_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/syscalls.h"
#include "common/util.h"

#define NEWROOT "/newroot"
#define OLDROOT "/oldroot"
#define NEWROOT_LEN (sizeof(NEWROOT) - 1)

/* Paths the sandbox builds itself; a read-only host mount may not overlap them. */
static const char *const sandbox_owned_paths[] = {
    "/dev", "/proc", "/tmp", "/workspace", "/home", "/cache", "/envs", "/opt/agent-sandbox",
};

/* The four persistent read-write directories: <root>/<name> -> dst. The
 * workspace is also E2B's home, /home/user (e2b/e2b.h): the same
 * directory at a second place, so the paths E2B's SDKs assume name the
 * files the rest of the API sees. */
static const char *const rw_names[] = {"workspace", "home", "cache", "envs", "workspace"};
static const char *const rw_dsts[] = {NEWROOT "/workspace", NEWROOT "/home/sandbox",
                                      NEWROOT "/cache", NEWROOT "/envs", NEWROOT "/home/user"};

/* Host device nodes visible in the synthetic /dev (bubblewrap's --dev set). */
static const char *const dev_nodes[][2] = {
    {OLDROOT "/dev/null", NEWROOT "/dev/null"},
    {OLDROOT "/dev/zero", NEWROOT "/dev/zero"},
    {OLDROOT "/dev/full", NEWROOT "/dev/full"},
    {OLDROOT "/dev/random", NEWROOT "/dev/random"},
    {OLDROOT "/dev/urandom", NEWROOT "/dev/urandom"},
    {OLDROOT "/dev/tty", NEWROOT "/dev/tty"},
};
static const char *const dev_links[][2] = {
    {"/proc/self/fd", NEWROOT "/dev/fd"},       {"/proc/self/fd/0", NEWROOT "/dev/stdin"},
    {"/proc/self/fd/1", NEWROOT "/dev/stdout"}, {"/proc/self/fd/2", NEWROOT "/dev/stderr"},
    {"pts/ptmx", NEWROOT "/dev/ptmx"},
};
/* procfs entries that could reach the host kernel; read-only even though
 * the sandbox lacks the capabilities to use them (bubblewrap does the same). */
static const char *const proc_covered[] = {NEWROOT "/proc/sys", NEWROOT "/proc/sysrq-trigger",
                                           NEWROOT "/proc/irq", NEWROOT "/proc/bus"};
/* What a sandbox has no need to read about the host's kernel and hardware
 * (its exact build, loaded modules, kernel addresses, timers of every
 * process, keys of other users): files covered by /dev/null, directories
 * by an empty read-only tmpfs, as container runtimes mask them. */
static const char *const proc_masked_files[] = {
    NEWROOT "/proc/config.gz",     NEWROOT "/proc/kcore",        NEWROOT "/proc/keys",
    NEWROOT "/proc/key-users",     NEWROOT "/proc/latency_stats", NEWROOT "/proc/timer_list",
    NEWROOT "/proc/timer_stats",   NEWROOT "/proc/sched_debug",  NEWROOT "/proc/kallsyms",
    NEWROOT "/proc/modules",       NEWROOT "/proc/vmallocinfo",  NEWROOT "/proc/slabinfo",
    NEWROOT "/proc/pagetypeinfo",  NEWROOT "/proc/buddyinfo",    NEWROOT "/proc/iomem",
    NEWROOT "/proc/ioports",       NEWROOT "/proc/partitions",   NEWROOT "/proc/diskstats",
};
static const char *const proc_masked_dirs[] = {NEWROOT "/proc/acpi", NEWROOT "/proc/scsi",
                                               NEWROOT "/proc/asound", NEWROOT "/proc/driver",
                                               NEWROOT "/proc/fs"};

/* ------------------------------------------------------------------------ */
/* Stages of the child, named in the parent's error message.                */

enum spawn_stage {
    STAGE_SYNC,
    STAGE_SETGROUPS,
    STAGE_SETGID,
    STAGE_SETUID,
    STAGE_PDEATHSIG,
    STAGE_SETSID,
    STAGE_DUMPABLE,
    STAGE_KEYRING,
    STAGE_CGROUP_NS,
    STAGE_NESTED_USERNS,
    STAGE_LOOPBACK,
    STAGE_PRIVATE,
    STAGE_SCRATCH,
    STAGE_PIVOT_SCRATCH,
    STAGE_MKDIR,
    STAGE_RO_BIND,
    STAGE_LINK,
    STAGE_DEV,
    STAGE_TMP,
    STAGE_PROC,
    STAGE_RW_BIND,
    STAGE_TEMPLATE,
    STAGE_PYTHON,
    STAGE_ROOT_RO,
    STAGE_PIVOT,
    STAGE_CAPS,
    STAGE_NNP,
    STAGE_RLIMIT,
    STAGE_STDIO,
    STAGE_SECCOMP,
    STAGE_EXEC,
    STAGE_COUNT
};

static const char *const stage_names[STAGE_COUNT] = {
    [STAGE_SYNC] = "wait for the parent",
    [STAGE_SETGROUPS] = "drop supplementary groups",
    [STAGE_KEYRING] = "join a new session keyring",
    [STAGE_CGROUP_NS] = "enter a new cgroup namespace",
    [STAGE_LOOPBACK] = "bring up the loopback device",
    [STAGE_SECCOMP] = "install the seccomp filter",
    [STAGE_DUMPABLE] = "mark the process non-dumpable",
    [STAGE_SETGID] = "switch gid",
    [STAGE_SETUID] = "switch uid",
    [STAGE_PDEATHSIG] = "set parent-death signal",
    [STAGE_SETSID] = "start a new session",
    [STAGE_NESTED_USERNS] = "disable nested user namespaces",
    [STAGE_PRIVATE] = "make mounts private",
    [STAGE_SCRATCH] = "mount scratch tmpfs",
    [STAGE_PIVOT_SCRATCH] = "pivot into scratch tmpfs",
    [STAGE_MKDIR] = "create mount point",
    [STAGE_RO_BIND] = "bind read-only mount",
    [STAGE_LINK] = "create symlink",
    [STAGE_DEV] = "mount /dev",
    [STAGE_TMP] = "mount /tmp",
    [STAGE_PROC] = "mount /proc",
    [STAGE_RW_BIND] = "bind sandbox directory",
    [STAGE_TEMPLATE] = "mount template at /envs",
    [STAGE_PYTHON] = "bind python runtime",
    [STAGE_ROOT_RO] = "make root read-only",
    [STAGE_PIVOT] = "pivot_root",
    [STAGE_CAPS] = "drop capabilities",
    [STAGE_NNP] = "set no_new_privs",
    [STAGE_RLIMIT] = "set resource limits",
    [STAGE_STDIO] = "set up stdio",
    [STAGE_EXEC] = "execute sandloom-init",
};

struct spawn_failure {
    int stage;
    int errnum;
    int index; /* entry of the stage's list, -1 if none */
};

/* ------------------------------------------------------------------------ */
/* Layout (parent, once).                                                   */

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

/* p equals tree or lies below it. */
static bool path_within(const char *p, const char *tree)
{
    size_t n = strlen(tree);
    if (n == 1)
        return true;
    return strncmp(p, tree, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static bool paths_overlap(const char *a, const char *b)
{
    return path_within(a, b) || path_within(b, a);
}

static int grow(void *array, size_t len, size_t elem)
{
    void **p = array;
    void *n = realloc(*p, (len + 1) * elem);
    if (!n)
        return -1;
    *p = n;
    return 0;
}

/* Add "/newroot<inside>" and its missing ancestors to the mkdir list. */
static int layout_add_dir(struct sl_spawn_layout *lay, const char *inside)
{
    _cleanup_free_ char *full = str_printf(NEWROOT "%s", inside);
    if (!full)
        return -1;
    for (char *p = full + NEWROOT_LEN + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        bool known = false;
        for (size_t i = 0; i < lay->ndirs && !known; i++)
            known = strcmp(lay->dirs[i], full) == 0;
        if (!known) {
            char *copy = strdup(full);
            if (!copy || grow(&lay->dirs, lay->ndirs, sizeof(*lay->dirs)) < 0) {
                free(copy);
                return -1;
            }
            lay->dirs[lay->ndirs++] = copy;
        }
        *p = saved;
        if (saved == '\0')
            return 0;
    }
}

static int layout_add_parent_dirs(struct sl_spawn_layout *lay, const char *inside)
{
    _cleanup_free_ char *parent = strdup(inside);
    if (!parent)
        return -1;
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        return 0;
    *slash = '\0';
    return layout_add_dir(lay, parent);
}

static int layout_add_bind(struct sl_spawn_layout *lay, const char *host, const char *inside,
                           bool is_dir)
{
    for (size_t i = 0; i < lay->nro; i++)
        if (strcmp(lay->ro[i].dst + NEWROOT_LEN, inside) == 0)
            return 0;
    if (grow(&lay->ro, lay->nro, sizeof(*lay->ro)) < 0)
        return -1;
    struct sl_spawn_bind *b = &lay->ro[lay->nro];
    b->src = str_printf(OLDROOT "%s", host);
    b->dst = str_printf(NEWROOT "%s", inside);
    b->is_dir = is_dir;
    lay->nro++;
    if (!b->src || !b->dst)
        return -1;
    return is_dir ? layout_add_dir(lay, inside) : layout_add_parent_dirs(lay, inside);
}

static int layout_add_link(struct sl_spawn_layout *lay, const char *inside, const char *target)
{
    if (grow(&lay->links, lay->nlinks, sizeof(*lay->links)) < 0)
        return -1;
    struct sl_spawn_link *l = &lay->links[lay->nlinks++];
    l->path = str_printf(NEWROOT "%s", inside);
    l->target = strdup(target);
    if (!l->path || !l->target)
        return -1;
    return layout_add_parent_dirs(lay, inside);
}

static int bind_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sl_spawn_bind *)a)->dst, ((const struct sl_spawn_bind *)b)->dst);
}

/* Is a resolved host path visible inside through one of the directory binds? */
static bool layout_shows(const struct sl_spawn_layout *lay, const char *host)
{
    for (size_t i = 0; i < lay->nro; i++)
        if (lay->ro[i].is_dir &&
            strcmp(lay->ro[i].src + sizeof(OLDROOT) - 1, lay->ro[i].dst + NEWROOT_LEN) == 0 &&
            path_within(host, lay->ro[i].dst + NEWROOT_LEN))
            return true;
    return false;
}

struct ro_entry {
    char *inside;   /* where it appears: fully resolved, except a symlink's own name */
    char *resolved; /* realpath */
    char *link;     /* readlink text when the entry itself is a symlink */
    bool is_dir;
};

static void ro_entries_free(struct ro_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(e[i].inside);
        free(e[i].resolved);
        free(e[i].link);
    }
    free(e);
}

static int ro_entry_resolve(const char *path, struct ro_entry *e, struct sl_error *err)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0; /* bubblewrap's --ro-bind-try: a missing tree is skipped */
        return sl_error_errno(err, SL_E_CONFIG, "cannot inspect read-only mount %s", path);
    }
    e->resolved = realpath(path, NULL);
    if (!e->resolved) {
        if (errno == ENOENT)
            return 0; /* dangling symlink */
        return sl_error_errno(err, SL_E_CONFIG, "cannot resolve read-only mount %s", path);
    }
    struct stat target;
    if (stat(e->resolved, &target) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot inspect read-only mount %s", path);
    e->is_dir = S_ISDIR(target.st_mode);
    if (!S_ISLNK(st.st_mode)) {
        e->inside = strdup(e->resolved);
        return e->inside ? 1 : sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    /* A merged-usr symlink (/bin -> usr/bin) is recreated as a symlink at
     * the resolved location of its parent, so it resolves inside exactly as
     * on the host. */
    _cleanup_free_ char *dir = strdup(path);
    char link[PATH_MAX];
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (!dir || n < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot read symlink %s", path);
    link[n] = '\0';
    char *slash = strrchr(dir, '/');
    *slash = '\0';
    _cleanup_free_ char *real_dir = realpath(dir[0] ? dir : "/", NULL);
    if (!real_dir)
        return sl_error_errno(err, SL_E_CONFIG, "cannot resolve read-only mount %s", path);
    e->inside = str_printf("%s/%s", strcmp(real_dir, "/") == 0 ? "" : real_dir, slash + 1);
    e->link = strdup(link);
    if (!e->inside || !e->link)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 1;
}

static int layout_add_readonly(struct sl_spawn_layout *lay, const struct sl_strlist *mounts,
                               struct sl_error *err)
{
    size_t n = mounts ? mounts->len : 0, count = 0;
    struct ro_entry *entries = calloc(n ? n : 1, sizeof(*entries));
    if (!entries)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        const char *path = mounts->items[i];
        if (path[0] != '/') {
            sl_error_set(err, SL_E_CONFIG, 0, "read-only mount is not an absolute path: %s", path);
            goto out;
        }
        int r = ro_entry_resolve(path, &entries[count], err);
        if (r < 0)
            goto out;
        if (r == 0) {
            free(entries[count].resolved);
            entries[count] = (struct ro_entry){0};
            continue;
        }
        struct ro_entry *e = &entries[count++];
        /* Checked on both sides: the sandbox's own mount points must stay
         * ours, and host /proc, /dev or /tmp must never be bound in under
         * another name. */
        for (size_t k = 0; k < SL_ARRAY_LEN(sandbox_owned_paths); k++) {
            if (paths_overlap(e->inside, sandbox_owned_paths[k]) ||
                paths_overlap(e->resolved, sandbox_owned_paths[k])) {
                sl_error_set(err, SL_E_CONFIG, 0,
                             "read-only mount %s overlaps the sandbox's own %s", path,
                             sandbox_owned_paths[k]);
                goto out;
            }
        }
    }
    for (size_t i = 0; i < count; i++)
        if (!entries[i].link &&
            layout_add_bind(lay, entries[i].resolved, entries[i].inside, entries[i].is_dir) < 0)
            goto oom;
    for (size_t i = 0; i < count; i++) {
        struct ro_entry *e = &entries[i];
        if (!e->link)
            continue;
        /* A symlink whose target is not visible would dangle: bind the
         * target at the symlink's place instead. */
        int r = layout_shows(lay, e->resolved)
                    ? layout_add_link(lay, e->inside, e->link)
                    : layout_add_bind(lay, e->resolved, e->inside, e->is_dir);
        if (r < 0)
            goto oom;
    }
    if (lay->nro)
        qsort(lay->ro, lay->nro, sizeof(*lay->ro), bind_cmp);
    rc = 0;
    goto out;
oom:
    sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
out:
    ro_entries_free(entries, n);
    return rc;
}

static int layout_add_python(struct sl_spawn_layout *lay, const char *prefix, struct sl_error *err)
{
    if (!prefix || !prefix[0])
        return layout_add_dir(lay, "/opt/agent-sandbox/python-runtime");
    _cleanup_free_ char *real = realpath(prefix, NULL);
    if (!real)
        return sl_error_errno(err, SL_E_CONFIG, "python runtime prefix %s not found", prefix);
    _cleanup_free_ char *python = str_printf("%s/bin/python3", strcmp(real, "/") ? real : "");
    if (!python)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    if (access(python, X_OK) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "python runtime %s is not executable", python);
    if (layout_shows(lay, real)) {
        /* Same interpreter, reached through the read-only /usr: python finds
         * its prefix by resolving the symlink, no extra mount needed. */
        if (layout_add_link(lay, "/opt/agent-sandbox/python-runtime/bin/python3", python) < 0 ||
            layout_add_link(lay, "/opt/agent-sandbox/python-runtime/bin/python", python) < 0)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return 0;
    }
    lay->python_src = str_printf(OLDROOT "%s", real);
    if (!lay->python_src || layout_add_dir(lay, "/opt/agent-sandbox/python-runtime") < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

/* The private network's resolver, at /etc/resolv.conf: where the host's
 * file is a symlink (systemd-resolved's stub), at the path it resolves to,
 * which is what a sandbox reading /etc/resolv.conf reads. */
static int layout_add_resolv_conf(struct sl_spawn_layout *lay, const char *file,
                                  struct sl_error *err)
{
    if (!file)
        return 0;
    _cleanup_free_ char *target = realpath("/etc/resolv.conf", NULL);
    const char *inside = target ? target : "/etc/resolv.conf";
    if (layout_add_bind(lay, file, inside, false) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    qsort(lay->ro, lay->nro, sizeof(*lay->ro), bind_cmp);
    return 0;
}

static rlim_t clamp_limit(int resource, int64_t want)
{
    struct rlimit cur;
    if (getrlimit(resource, &cur) < 0)
        cur.rlim_max = RLIM_INFINITY;
    /* Raising a hard limit needs CAP_SYS_RESOURCE on the host, which the
     * sandboxed child no longer has: never ask for more than we hold. */
    if (want <= 0)
        return cur.rlim_max;
    if (cur.rlim_max != RLIM_INFINITY && (rlim_t)want > cur.rlim_max)
        return cur.rlim_max;
    return (rlim_t)want;
}

static int read_cap_last_cap(void)
{
    _cleanup_close_ int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    char buf[16] = {0};
    if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0)
        return CAP_LAST_CAP;
    int v = atoi(buf);
    return v > 0 && v < 64 ? v : CAP_LAST_CAP;
}

/* Descriptors that reach the child must not be 0..2, or dup2 onto stdio
 * would clobber them (a daemon may run with stdio closed). */
static int fd_above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int saved = errno;
    close(fd);
    errno = saved;
    return moved;
}

int sl_spawn_layout_init(const struct sl_rt_options *opt, struct sl_spawn_layout *lay,
                         struct sl_error *err)
{
    *lay = (struct sl_spawn_layout){.init_fd = -1};
    if (!opt->init_path || !opt->init_path[0]) {
        sl_error_set(err, SL_E_CONFIG, 0, "sandloom-init path is not set");
        goto fail;
    }
    lay->init_fd = fd_above_stdio(open(opt->init_path, O_PATH | O_CLOEXEC));
    struct stat st;
    if (lay->init_fd < 0 || fstat(lay->init_fd, &st) < 0) {
        sl_error_errno(err, SL_E_CONFIG, "cannot open sandloom-init at %s", opt->init_path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IXOTH)) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "sandloom-init at %s is not an executable file for every user",
                     opt->init_path);
        goto fail;
    }
    if (layout_add_readonly(lay, opt->readonly_mounts, err) < 0 ||
        layout_add_python(lay, opt->python_prefix, err) < 0 ||
        layout_add_resolv_conf(lay, opt->resolv_conf, err) < 0)
        goto fail;
    static const char *const fixed_dirs[] = {
        "/dev",
        "/tmp",
        "/workspace",
        "/home/sandbox",
        "/home/user",
        "/cache",
        "/envs",
        "/opt/agent-sandbox/runtime",
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(fixed_dirs); i++)
        if (layout_add_dir(lay, fixed_dirs[i]) < 0) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            goto fail;
        }
    if (opt->tmpfs_bytes > 0) {
        /* /dev/shm is tmpfs memory too: capped like Docker's default (64 MiB)
         * and never above /tmp's size. */
        int64_t shm = opt->tmpfs_bytes < (64 << 20) ? opt->tmpfs_bytes : (64 << 20);
        snprintf(lay->tmp_opts, sizeof(lay->tmp_opts), "size=%lld,mode=0700",
                 (long long)opt->tmpfs_bytes);
        snprintf(lay->shm_opts, sizeof(lay->shm_opts), "size=%lld,mode=1777", (long long)shm);
    } else {
        snprintf(lay->tmp_opts, sizeof(lay->tmp_opts), "mode=0700");
        snprintf(lay->shm_opts, sizeof(lay->shm_opts), "size=67108864,mode=1777");
    }
    lay->cap_last_cap = read_cap_last_cap();
    lay->rl_cpu = (int64_t)clamp_limit(RLIMIT_CPU, opt->cpu_seconds);
    lay->rl_nproc = (int64_t)clamp_limit(RLIMIT_NPROC, opt->max_processes);
    lay->rl_nofile = (int64_t)clamp_limit(RLIMIT_NOFILE, opt->max_open_files);
    lay->rl_fsize = (int64_t)clamp_limit(RLIMIT_FSIZE, opt->max_file_size_bytes);
    if (sl_seccomp_build(&lay->seccomp, err) < 0)
        goto fail;
    return 0;
fail:
    sl_spawn_layout_free(lay);
    return -1;
}

void sl_spawn_layout_free(struct sl_spawn_layout *lay)
{
    for (size_t i = 0; i < lay->ndirs; i++)
        free(lay->dirs[i]);
    for (size_t i = 0; i < lay->nro; i++) {
        free(lay->ro[i].src);
        free(lay->ro[i].dst);
    }
    for (size_t i = 0; i < lay->nlinks; i++) {
        free(lay->links[i].path);
        free(lay->links[i].target);
    }
    free(lay->dirs);
    free(lay->ro);
    free(lay->links);
    free(lay->python_src);
    sl_seccomp_free(&lay->seccomp);
    if (lay->init_fd >= 0)
        close(lay->init_fd);
    *lay = (struct sl_spawn_layout){.init_fd = -1};
}

/* ------------------------------------------------------------------------ */
/* The child, between clone3 and execveat. Raw syscalls only.               */

struct spawn_child {
    const struct sl_spawn_layout *lay;
    const struct sl_spawn_request *req;
    const char *host_root; /* "/oldroot<sandbox_root>" */
    int sync_fd, report_fd, null_fd, out_fd, err_fd;
};

static _Noreturn void child_fail(const struct spawn_child *c, int stage, int index)
{
    struct spawn_failure f = {.stage = stage, .errnum = errno, .index = index};
    ssize_t n;
    do
        n = write(c->report_fd, &f, sizeof(f));
    while (n < 0 && errno == EINTR);
    _exit(127);
}

#define CHILD_TRY(c, stage, index, expr)                                                           \
    do {                                                                                           \
        if ((expr) < 0)                                                                            \
            child_fail((c), (stage), (index));                                                     \
    } while (0)

static int child_setattr(const char *path, unsigned flags, uint64_t attrs)
{
    return sl_mount_setattr(AT_FDCWD, path, flags, attrs);
}

static void child_credentials(const struct spawn_child *c)
{
    /* Supplementary groups first, while we still may: otherwise the sandbox
     * would keep the daemon's host groups. Raw syscalls, because glibc's
     * wrappers broadcast to threads that do not exist in this process. */
    CHILD_TRY(c, STAGE_SETGROUPS, -1, syscall(SYS_setgroups, 0, NULL));
    CHILD_TRY(c, STAGE_SETGID, -1, syscall(SYS_setresgid, 0, 0, 0));
    CHILD_TRY(c, STAGE_SETUID, -1, syscall(SYS_setresuid, 0, 0, 0));
    /* Until exec this process is a copy of the daemon's memory (the token
     * included): nobody may ptrace or core-dump it, whatever the host's
     * suid_dumpable says. exec resets the flag for the sandboxed program. */
    CHILD_TRY(c, STAGE_DUMPABLE, -1, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0));
    /* A fresh session keyring: otherwise every sandbox would share the
     * daemon's (systemd and container runtimes give services one), and one
     * tenant could read or replace keys another tenant stored there. */
    CHILD_TRY(c, STAGE_KEYRING, -1, syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL));
    /* Only now: any euid/egid change clears the parent-death signal. It is
     * tied to the cloning thread, which stays in sl_rt_exec until a one-shot
     * run ends. A session outlives the thread that started it: its init
     * watches its control socket instead, which closes when the daemon dies
     * (and init then kills everything in the sandbox). */
    CHILD_TRY(c, STAGE_PDEATHSIG, -1,
              prctl(PR_SET_PDEATHSIG,
                    c->req->session_fd < 0 ? SL_INIT_PARENT_DEATH_SIGNAL : SIGKILL, 0, 0, 0));
    struct pollfd p = {.fd = c->sync_fd, .events = POLLIN};
    if (poll(&p, 1, 0) > 0 && (p.revents & POLLHUP))
        _exit(127); /* the parent died before the signal was armed */
    /* Our own session and process group: detached from any terminal, and
     * the group the parent kills (its id is our host pid). */
    CHILD_TRY(c, STAGE_SETSID, -1, setsid());
}

/* A new network namespace has only a loopback device, and it is down:
 * bring it up so programs that talk to themselves over 127.0.0.1 work. No
 * other interface exists, so there is no route out. */
static void child_loopback_up(const struct spawn_child *c)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHILD_TRY(c, STAGE_LOOPBACK, -1, fd);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    CHILD_TRY(c, STAGE_LOOPBACK, -1, ioctl(fd, SIOCGIFFLAGS, &ifr));
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    CHILD_TRY(c, STAGE_LOOPBACK, -1, ioctl(fd, SIOCSIFFLAGS, &ifr));
    close(fd);
}

static void child_disable_nested_userns(const struct spawn_child *c)
{
    /* Creating a user namespace hands its creator every capability inside it
     * and with them kernel code unprivileged users cannot otherwise reach.
     * The limit is per user namespace and only writable with
     * CAP_SYS_RESOURCE in it, which the sandbox loses before exec. */
    int fd = open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1)
        child_fail(c, STAGE_NESTED_USERNS, -1);
    close(fd);
}

static void child_enter_scratch(const struct spawn_child *c)
{
    /* Private, not slave: host mount events must neither reach into the
     * sandbox nor cost anything per running sandbox. */
    CHILD_TRY(c, STAGE_PRIVATE, -1, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
    CHILD_TRY(
        c, STAGE_SCRATCH, -1,
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755"));
    CHILD_TRY(c, STAGE_SCRATCH, -1, chdir("/tmp"));
    CHILD_TRY(c, STAGE_SCRATCH, -1, mkdir("newroot", 0755));
    CHILD_TRY(c, STAGE_SCRATCH, -1, mkdir("oldroot", 0755));
    CHILD_TRY(c, STAGE_SCRATCH, -1, mount("newroot", "newroot", NULL, MS_BIND | MS_REC, NULL));
    /* The host tree moves to /oldroot whole: nothing is shadowed, even a
     * sandbox root that lives under the host's /tmp. */
    CHILD_TRY(c, STAGE_PIVOT_SCRATCH, -1, sl_pivot_root(".", "oldroot"));
    CHILD_TRY(c, STAGE_PIVOT_SCRATCH, -1, chdir("/"));
}

static void child_readonly_tree(const struct spawn_child *c)
{
    const struct sl_spawn_layout *lay = c->lay;
    for (size_t i = 0; i < lay->ndirs; i++)
        if (mkdir(lay->dirs[i], 0755) < 0 && errno != EEXIST)
            child_fail(c, STAGE_MKDIR, (int)i);
    for (size_t i = 0; i < lay->nro; i++) {
        const struct sl_spawn_bind *b = &lay->ro[i];
        if (!b->is_dir && mknod(b->dst, S_IFREG | 0444, 0) < 0 && errno != EEXIST)
            child_fail(c, STAGE_RO_BIND, (int)i);
        CHILD_TRY(c, STAGE_RO_BIND, (int)i, mount(b->src, b->dst, NULL, MS_BIND | MS_REC, NULL));
        /* System trees are read-only, and neither setuid binaries nor device
         * nodes found in them mean anything inside. */
        CHILD_TRY(c, STAGE_RO_BIND, (int)i,
                  child_setattr(b->dst, AT_RECURSIVE,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    }
    for (size_t i = 0; i < lay->nlinks; i++)
        if (symlink(lay->links[i].target, lay->links[i].path) < 0 && errno != EEXIST)
            child_fail(c, STAGE_LINK, (int)i);
    if (lay->python_src) {
        const char *dst = NEWROOT "/opt/agent-sandbox/python-runtime";
        CHILD_TRY(c, STAGE_PYTHON, -1, mount(lay->python_src, dst, NULL, MS_BIND | MS_REC, NULL));
        CHILD_TRY(c, STAGE_PYTHON, -1,
                  child_setattr(dst, AT_RECURSIVE,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    }
}

static void child_dev(const struct spawn_child *c)
{
    /* A tiny tmpfs with only the harmless host nodes bound in; no disk,
     * no kernel memory, no host terminal. */
    CHILD_TRY(c, STAGE_DEV, -1,
              mount("tmpfs", NEWROOT "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=64k,nr_inodes=64,mode=0755"));
    for (size_t i = 0; i < SL_ARRAY_LEN(dev_nodes); i++) {
        CHILD_TRY(c, STAGE_DEV, -1, mknod(dev_nodes[i][1], S_IFREG | 0666, 0));
        CHILD_TRY(c, STAGE_DEV, -1, mount(dev_nodes[i][0], dev_nodes[i][1], NULL, MS_BIND, NULL));
        CHILD_TRY(c, STAGE_DEV, -1,
                  child_setattr(dev_nodes[i][1], 0, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC));
    }
    for (size_t i = 0; i < SL_ARRAY_LEN(dev_links); i++)
        CHILD_TRY(c, STAGE_DEV, -1, symlink(dev_links[i][0], dev_links[i][1]));
    CHILD_TRY(c, STAGE_DEV, -1, mkdir(NEWROOT "/dev/pts", 0755));
    CHILD_TRY(c, STAGE_DEV, -1, mkdir(NEWROOT "/dev/shm", 01777));
    /* A private devpts instance; optional, as with bubblewrap. */
    (void)mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                "newinstance,ptmxmode=0666,mode=620");
    CHILD_TRY(c, STAGE_DEV, -1,
              mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, c->lay->shm_opts));
    CHILD_TRY(c, STAGE_DEV, -1, child_setattr(NEWROOT "/dev", 0, MOUNT_ATTR_RDONLY));
}

static void child_proc(const struct spawn_child *c)
{
    /* Only with a PID namespace: a procfs of the host's PID namespace would
     * show every host process. */
    if (!c->req->pid_ns)
        return;
    CHILD_TRY(c, STAGE_PROC, -1, mkdir(NEWROOT "/proc", 0755));
    CHILD_TRY(c, STAGE_PROC, -1,
              mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
    for (size_t i = 0; i < SL_ARRAY_LEN(proc_covered); i++) {
        if (mount(proc_covered[i], proc_covered[i], NULL, MS_BIND | MS_REC, NULL) < 0) {
            if (errno == ENOENT)
                continue;
            child_fail(c, STAGE_PROC, -1);
        }
        CHILD_TRY(c, STAGE_PROC, -1,
                  child_setattr(proc_covered[i], AT_RECURSIVE,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                    MOUNT_ATTR_NOEXEC));
    }
    for (size_t i = 0; i < SL_ARRAY_LEN(proc_masked_files); i++) {
        if (mount(OLDROOT "/dev/null", proc_masked_files[i], NULL, MS_BIND, NULL) < 0) {
            if (errno == ENOENT)
                continue; /* not in this kernel */
            child_fail(c, STAGE_PROC, -1);
        }
        /* Not nodev: the cover is /dev/null itself, which must open. */
        CHILD_TRY(c, STAGE_PROC, -1,
                  child_setattr(proc_masked_files[i], 0,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC));
    }
    /* One empty tmpfs, bound over every masked directory: a tmpfs
     * superblock per directory cost a warm session 40 KiB each. */
    const char *empty = NULL;
    for (size_t i = 0; i < SL_ARRAY_LEN(proc_masked_dirs); i++) {
        const char *dir = proc_masked_dirs[i];
        int rc = empty ? mount(empty, dir, NULL, MS_BIND, NULL)
                       : mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                               "size=0,nr_inodes=1,mode=0555");
        if (rc < 0) {
            if (errno == ENOENT)
                continue;
            child_fail(c, STAGE_PROC, -1);
        }
        CHILD_TRY(c, STAGE_PROC, -1,
                  child_setattr(dir, 0,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                    MOUNT_ATTR_NOEXEC));
        if (!empty)
            empty = dir;
    }
}

static void child_rw_dirs(const struct spawn_child *c)
{
    int root = open(c->host_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        child_fail(c, STAGE_RW_BIND, -1);
    for (size_t i = 0; i < SL_ARRAY_LEN(rw_names); i++) {
        /* The directories belong to the sandbox user: resolve them without
         * following any symlink, and refuse one that is not owned by the
         * sandbox (it shows as uid 0 here), so a wrong root never exposes
         * another tenant's files. */
        int dir = sl_openat2(root, rw_names[i], O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                             RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        struct stat st;
        if (dir < 0 || fstat(dir, &st) < 0)
            child_fail(c, STAGE_RW_BIND, (int)i);
        if (st.st_uid != 0) {
            errno = EPERM;
            child_fail(c, STAGE_RW_BIND, (int)i);
        }
        int tree =
            open_tree(dir, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
        if (tree < 0)
            child_fail(c, STAGE_RW_BIND, (int)i);
        CHILD_TRY(c, STAGE_RW_BIND, (int)i,
                  move_mount(tree, "", AT_FDCWD, rw_dsts[i], MOVE_MOUNT_F_EMPTY_PATH));
        CHILD_TRY(c, STAGE_RW_BIND, (int)i,
                  child_setattr(rw_dsts[i], AT_RECURSIVE, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
        close(tree);
        close(dir);
    }
    close(root);
}

/* Templates: each tree read-only at /envs/<name>, over the sandbox's own
 * /envs (which the child has just bound). The mount point is made and
 * opened without following links: /envs is the sandbox's to shape. */
static void child_templates(const struct spawn_child *c)
{
    if (c->req->nmounts == 0)
        return;
    int envs = open(NEWROOT "/envs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (envs < 0)
        child_fail(c, STAGE_TEMPLATE, -1);
    for (size_t i = 0; i < c->req->nmounts; i++) {
        const struct sl_spawn_mount *m = &c->req->mounts[i];
        int src = open(m->src, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0)
            child_fail(c, STAGE_TEMPLATE, (int)i);
        int tree =
            open_tree(src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
        if (tree < 0)
            child_fail(c, STAGE_TEMPLATE, (int)i);
        CHILD_TRY(c, STAGE_TEMPLATE, (int)i,
                  sl_mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE,
                                   MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
        if (mkdirat(envs, m->name, 0755) < 0 && errno != EEXIST)
            child_fail(c, STAGE_TEMPLATE, (int)i);
        int dst = sl_openat2(envs, m->name, O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                             RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        if (dst < 0)
            child_fail(c, STAGE_TEMPLATE, (int)i);
        CHILD_TRY(c, STAGE_TEMPLATE, (int)i,
                  move_mount(tree, "", dst, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH));
        close(dst);
        close(tree);
        close(src);
    }
    close(envs);
}

static void child_enter_newroot(const struct spawn_child *c)
{
    /* The root tmpfs holds only mount points and symlinks: read-only, so
     * the sandbox cannot add top-level entries. */
    CHILD_TRY(c, STAGE_ROOT_RO, -1,
              child_setattr(NEWROOT, 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    CHILD_TRY(c, STAGE_PIVOT, -1, umount2(OLDROOT, MNT_DETACH));
    CHILD_TRY(c, STAGE_PIVOT, -1, chdir(NEWROOT));
    CHILD_TRY(c, STAGE_PIVOT, -1, sl_pivot_root(".", "."));
    CHILD_TRY(c, STAGE_PIVOT, -1, umount2(".", MNT_DETACH));
    CHILD_TRY(c, STAGE_PIVOT, -1, chdir("/"));
}

static void child_drop_privileges(const struct spawn_child *c)
{
    /* Uid 0 of the namespace gets the bounding set back at every exec:
     * empty it, lock root out of capabilities for good, then clear the
     * current sets. */
    for (int cap = 0; cap <= c->lay->cap_last_cap; cap++)
        CHILD_TRY(c, STAGE_CAPS, cap, prctl(PR_CAPBSET_DROP, cap, 0, 0, 0));
    CHILD_TRY(c, STAGE_CAPS, -1, prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0));
    CHILD_TRY(c, STAGE_CAPS, -1,
              prctl(PR_SET_SECUREBITS,
                    SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                        SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                        SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                    0, 0, 0));
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    CHILD_TRY(c, STAGE_CAPS, -1, syscall(SYS_capset, &hdr, data));
    CHILD_TRY(c, STAGE_NNP, -1, prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));

    const struct {
        int resource;
        int64_t value;
    } limits[] = {
        {RLIMIT_CPU, c->lay->rl_cpu},
        {RLIMIT_NPROC, c->lay->rl_nproc},
        {RLIMIT_NOFILE, c->lay->rl_nofile},
        {RLIMIT_FSIZE, c->lay->rl_fsize},
        {RLIMIT_CORE, 0},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(limits); i++) {
        struct rlimit rl = {.rlim_cur = (rlim_t)limits[i].value,
                            .rlim_max = (rlim_t)limits[i].value};
        CHILD_TRY(c, STAGE_RLIMIT, limits[i].resource, setrlimit(limits[i].resource, &rl));
    }
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Closes every descriptor but stdio and the ones this child uses. The
 * daemon's descriptors are all O_CLOEXEC, but that only helps at exec: a
 * child that blocks before it (waiting for its "go") would otherwise keep
 * them open for as long as it lives. */
static void child_close_inherited(const struct spawn_child *c)
{
    int keep[8];
    size_t n = 0;
    keep[n++] = c->sync_fd;
    keep[n++] = c->report_fd;
    keep[n++] = c->null_fd;
    keep[n++] = c->out_fd;
    keep[n++] = c->err_fd;
    keep[n++] = c->lay->init_fd;
    if (c->req->session_fd >= 0)
        keep[n++] = c->req->session_fd;
    qsort(keep, n, sizeof(keep[0]), cmp_int);
    unsigned next = 3;
    for (size_t i = 0; i < n; i++) {
        if (keep[i] < (int)next)
            continue;
        if ((unsigned)keep[i] > next)
            (void)sl_close_range(next, (unsigned)keep[i] - 1, 0);
        next = (unsigned)keep[i] + 1;
    }
    (void)sl_close_range(next, ~0U, 0);
}

static _Noreturn void child_main(const struct spawn_child *c)
{
    /* The daemon's handlers must not run here, and an ignored SIGPIPE would
     * survive exec into the sandbox. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    umask(022);
    /* Before anything that can block: a daemon killed now takes this child
     * with it (SIGKILL cannot be blocked), and the child holds none of its
     * descriptors (the listening socket, the database, the lock files, the
     * "go" ends of other children's sockets: with those a dead daemon's
     * children would keep each other waiting forever). */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    child_close_inherited(c);

    char go;
    ssize_t n;
    do
        n = read(c->sync_fd, &go, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        _exit(127); /* the parent gave up; it reports why */

    child_credentials(c);
    /* The cgroup namespace is made only now, after the parent placed us in
     * the sandbox's cgroup: that cgroup becomes our view's root. */
    if (c->req->cgroup_ns)
        CHILD_TRY(c, STAGE_CGROUP_NS, -1, unshare(CLONE_NEWCGROUP));
    child_disable_nested_userns(c);
    if (c->req->net_ns)
        child_loopback_up(c);
    child_enter_scratch(c);
    child_readonly_tree(c);
    child_dev(c);
    CHILD_TRY(c, STAGE_TMP, -1,
              mount("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, c->lay->tmp_opts));
    child_proc(c);
    child_rw_dirs(c);
    child_templates(c);
    child_enter_newroot(c);
    child_drop_privileges(c);

    CHILD_TRY(c, STAGE_STDIO, 0, dup2(c->null_fd, 0));
    CHILD_TRY(c, STAGE_STDIO, 1, dup2(c->out_fd, 1));
    CHILD_TRY(c, STAGE_STDIO, 2, dup2(c->err_fd, 2));
    /* Whatever the daemon had open (other sandboxes' pipes, the database)
     * is gone at exec; the report pipe closing tells the parent exec worked. */
    CHILD_TRY(c, STAGE_STDIO, -1, sl_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC));
    /* The one exception: a session's control socket, for sandloom-init. */
    if (c->req->session_fd >= 0)
        CHILD_TRY(c, STAGE_STDIO, -1, fcntl(c->req->session_fd, F_SETFD, 0));
    sigset_t none;
    sigemptyset(&none);
    CHILD_TRY(c, STAGE_STDIO, -1, sigprocmask(SIG_SETMASK, &none, NULL));
    /* A session's init outlives the thread that started it, so it must not
     * carry that thread's death signal; from exec on it watches its control
     * socket instead. Until here SIGKILL stood in for it. */
    if (c->req->session_fd >= 0)
        CHILD_TRY(c, STAGE_PDEATHSIG, -1, prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0));
    /* Last: from here on only what the policy allows, execveat included. */
    struct sock_fprog prog = {.len = c->lay->seccomp.len, .filter = c->lay->seccomp.filter};
    CHILD_TRY(c, STAGE_SECCOMP, -1, syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
    sl_execveat(c->lay->init_fd, "", c->req->argv, c->req->envp, AT_EMPTY_PATH);
    child_fail(c, STAGE_EXEC, -1);
}

/* ------------------------------------------------------------------------ */
/* The parent.                                                              */

static int write_id_map(pid_t pid, const char *file, unsigned id)
{
    char path[64], line[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    int len = snprintf(line, sizeof(line), "0 %u 1\n", id);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, line, (size_t)len);
    if (n != len) {
        if (n >= 0)
            errno = EIO;
        return -1;
    }
    return 0;
}

static int pipe_above_stdio(int fds[2], bool use_socket)
{
    if ((use_socket ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds)
                    : pipe2(fds, O_CLOEXEC)) < 0)
        return -1;
    fds[0] = fd_above_stdio(fds[0]);
    fds[1] = fd_above_stdio(fds[1]);
    if (fds[0] < 0 || fds[1] < 0) {
        int saved = errno;
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        fds[0] = fds[1] = -1;
        errno = saved;
        return -1;
    }
    return 0;
}

static void close_pair(int fds[2])
{
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}

static void kill_and_reap(int pidfd)
{
    siginfo_t si;
    (void)sl_pidfd_send_signal(pidfd, SIGKILL);
    while (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
        ;
}

static const char *failure_subject(const struct sl_spawn_layout *lay, const struct spawn_failure *f)
{
    int i = f->index;
    switch (f->stage) {
    case STAGE_MKDIR:
        return i >= 0 && (size_t)i < lay->ndirs ? lay->dirs[i] + NEWROOT_LEN : "";
    case STAGE_RO_BIND:
        return i >= 0 && (size_t)i < lay->nro ? lay->ro[i].dst + NEWROOT_LEN : "";
    case STAGE_LINK:
        return i >= 0 && (size_t)i < lay->nlinks ? lay->links[i].path + NEWROOT_LEN : "";
    case STAGE_RW_BIND:
        return i >= 0 && (size_t)i < SL_ARRAY_LEN(rw_dsts) ? rw_dsts[i] + NEWROOT_LEN : "";
    default:
        return "";
    }
}

/* Wait for the child's report: EOF = exec happened, a record = it failed. */
static int await_exec(const struct sl_spawn_layout *lay, const struct sl_spawn_request *req,
                      int report_fd, struct sl_error *err)
{
    struct spawn_failure f;
    size_t got = 0;
    for (;;) {
        int64_t left_ms = (req->deadline_us - sl_mono_us() + 999) / 1000;
        if (left_ms <= 0) {
            return sl_error_set(err, SL_E_RUNTIME, ETIMEDOUT, "sandbox setup failed: timed out");
        }
        struct pollfd p = {.fd = report_fd, .events = POLLIN};
        int r = poll(&p, 1, left_ms > INT_MAX ? INT_MAX : (int)left_ms);
        if (r < 0 && errno != EINTR)
            return sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: poll");
        if (r <= 0)
            continue;
        ssize_t n = read(report_fd, (char *)&f + got, sizeof(f) - got);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: report pipe");
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got == sizeof(f))
            break;
    }
    if (got == 0)
        return 0;
    if (got != sizeof(f) || f.stage < 0 || f.stage >= STAGE_COUNT)
        return sl_error_set(err, SL_E_RUNTIME, EPROTO, "sandbox setup failed: bad report");
    const char *subject = failure_subject(lay, &f);
    sl_error_set(err, SL_E_RUNTIME, f.errnum, "sandbox setup failed: %s: %s", stage_names[f.stage],
                 strerror(f.errnum));
    if (err)
        snprintf(err->detail, sizeof(err->detail),
                 "sandbox setup failed: %s%s%s: %s (root %s, uid %u)", stage_names[f.stage],
                 subject[0] ? " " : "", subject, strerror(f.errnum), req->sandbox_root,
                 (unsigned)req->uid);
    return -1;
}

int sl_spawn_start(const struct sl_spawn_layout *lay, const struct sl_spawn_request *req,
                   struct sl_spawn_proc *proc, struct sl_error *err)
{
    *proc = (struct sl_spawn_proc){.pid = -1, .pidfd = -1, .out_fd = -1, .err_fd = -1};
    if (req->uid == 0 || req->uid == (uid_t)-1)
        return sl_error_set(err, SL_E_RUNTIME, EINVAL,
                            "sandbox setup failed: refusing to map the host's root user");
    if (!req->sandbox_root || req->sandbox_root[0] != '/')
        return sl_error_set(err, SL_E_RUNTIME, EINVAL,
                            "sandbox setup failed: sandbox root is not an absolute path");
    char host_root[PATH_MAX];
    if ((size_t)snprintf(host_root, sizeof(host_root), OLDROOT "%s", req->sandbox_root) >=
        sizeof(host_root))
        return sl_error_set(err, SL_E_RUNTIME, ENAMETOOLONG,
                            "sandbox setup failed: sandbox root path too long");

    int out[2] = {-1, -1}, errp[2] = {-1, -1}, sync[2] = {-1, -1}, report[2] = {-1, -1};
    /* "null_fd": the launcher's stdin, /dev/null unless the caller gave one. */
    int null_fd = fd_above_stdio(req->has_stdin ? fcntl(req->stdin_fd, F_DUPFD_CLOEXEC, 3)
                                                : open("/dev/null", O_RDONLY | O_CLOEXEC));
    int pidfd = -1, rc = -1;
    /* The "go" channel is a socket so that writing to a child that died
     * meanwhile fails with EPIPE instead of raising SIGPIPE in the daemon. */
    if (null_fd < 0 || pipe_above_stdio(out, false) < 0 || pipe_above_stdio(errp, false) < 0 ||
        pipe_above_stdio(sync, true) < 0 || pipe_above_stdio(report, false) < 0) {
        sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: cannot create pipes");
        goto out;
    }
    if (fcntl(out[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(errp[0], F_SETFL, O_NONBLOCK) < 0) {
        sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: cannot set up pipes");
        goto out;
    }

    struct spawn_child child = {
        .lay = lay,
        .req = req,
        .host_root = host_root,
        .sync_fd = sync[0],
        .report_fd = report[1],
        .null_fd = null_fd,
        .out_fd = out[1],
        .err_fd = errp[1],
    };
    struct clone_args args = {
        .flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD |
                 (req->pid_ns ? CLONE_NEWPID : 0) | (req->net_ns ? CLONE_NEWNET : 0),
        .pidfd = (uint64_t)(uintptr_t)&pidfd,
        /* exec resets any other exit signal to SIGCHLD anyway. The daemon
         * must therefore neither ignore SIGCHLD nor reap with waitpid(-1):
         * each execution is reaped here, through its pidfd. */
        .exit_signal = SIGCHLD,
    };
    /* No handler of the daemon may run in the child before it resets them. */
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid_t pid = sl_clone3(&args);
    if (pid == 0)
        child_main(&child);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (pid < 0) {
        errno = clone_errno;
        sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: clone3");
        goto out;
    }

    close(null_fd);
    null_fd = -1;
    close(out[1]);
    close(errp[1]);
    close(sync[0]);
    close(report[1]);
    out[1] = errp[1] = sync[0] = report[1] = -1;

    /* uid 0 and gid 0 inside = the sandbox's own host uid. setgroups stays
     * "allow" (we may, being privileged) so the child can drop the daemon's
     * supplementary groups itself. */
    if (write_id_map(pid, "uid_map", (unsigned)req->uid) < 0 ||
        write_id_map(pid, "gid_map", (unsigned)req->uid) < 0) {
        sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: cannot write id maps");
        kill_and_reap(pidfd);
        goto out;
    }
    /* Into the sandbox's cgroups before it runs anything of its own, so
     * every process it will ever start is counted against its quotas. */
    char pidtext[24];
    int pidlen = snprintf(pidtext, sizeof(pidtext), "%d", (int)pid);
    for (size_t i = 0; i < req->n_cgroup_fds; i++) {
        if (write(req->cgroup_fds[i], pidtext, (size_t)pidlen) != pidlen) {
            sl_error_errno(err, SL_E_RUNTIME,
                           "sandbox setup failed: cannot place the sandbox in its cgroup");
            kill_and_reap(pidfd);
            goto out;
        }
    }
    if (req->before_go && req->before_go(req->before_go_ctx, pid, err) < 0) {
        kill_and_reap(pidfd);
        goto out;
    }
    if (send(sync[1], "x", 1, MSG_NOSIGNAL) != 1) {
        sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: cannot start the child");
        kill_and_reap(pidfd);
        goto out;
    }
    if (await_exec(lay, req, report[0], err) < 0) {
        kill_and_reap(pidfd);
        goto out;
    }
    proc->pid = pid;
    proc->pidfd = steal_fd(pidfd);
    proc->out_fd = steal_fd(out[0]);
    proc->err_fd = steal_fd(errp[0]);
    rc = 0;
out:
    if (pidfd >= 0)
        close(pidfd);
    if (null_fd >= 0)
        close(null_fd);
    close_pair(out);
    close_pair(errp);
    close_pair(sync);
    close_pair(report);
    return rc;
}

int sl_spawn_reap(struct sl_spawn_proc *proc, siginfo_t *si)
{
    int rc;
    memset(si, 0, sizeof(*si));
    do
        rc = waitid(P_PIDFD, (id_t)proc->pidfd, si, WEXITED);
    while (rc < 0 && errno == EINTR);
    int saved = errno;
    if (proc->pidfd >= 0)
        close(proc->pidfd);
    if (proc->out_fd >= 0)
        close(proc->out_fd);
    if (proc->err_fd >= 0)
        close(proc->err_fd);
    proc->pidfd = proc->out_fd = proc->err_fd = -1;
    errno = saved;
    return rc;
}

int sl_spawn_kill_uid(uid_t uid)
{
    if (uid == 0) {
        errno = EPERM; /* kill(-1) as root would take the host down */
        return -1;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        /* A fork of a multi-threaded daemon: raw syscalls only. kill(-1)
         * reaches every process whose real or saved uid is ours — exactly
         * the sandbox's, in any PID namespace, since the uid is unique to
         * one sandbox. It never blocks; the death signal is for form's sake
         * until setresuid clears it. */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, uid, uid, uid) < 0 ||
            syscall(SYS_setresuid, uid, uid, uid) < 0)
            _exit(1);
        kill(-1, SIGKILL);
        _exit(0);
    }
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        errno = saved;
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errno = EPERM;
        return -1;
    }
    return 0;
}
