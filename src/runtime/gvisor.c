/* The gVisor execution backend: every warm session is one runsc sandbox,
 * whose Sentry, a kernel in user space, answers the sandbox's system calls
 * instead of the host kernel (docs/GVISOR.md).
 *
 * sandloom-init is the container's PID 1, in session mode as under the
 * native backend: its control socket is the stdin of `runsc run -detach`,
 * and commands arrive as the same requests (session_proto.h). gVisor turns
 * the descriptors passed with them into host-backed files, so output,
 * status and stdin flow exactly as natively; there is no `runsc exec` per
 * command.
 *
 * The bundle of a session (<state>/b/<id>/config.json) is written from the
 * native layout (spawn.c): the same read-only host trees, links, python
 * runtime and /tmp size, the sandbox's four directories, its templates
 * read-only under /envs, a user namespace mapping 0 to the sandbox's uid,
 * and its rlimits. The root is a shared read-only skeleton of mount
 * points (<state>/rootfs): runsc's gofer would otherwise make missing ones
 * on the host's own root. `runsc run` is started inside the sandbox's
 * cgroups (and told to leave cgroups alone), so the Sentry, the gofer and
 * every process the platform makes are charged to the sandbox and killed
 * with it.
 *
 * Network: isolated is runsc's `none` (a loopback of the Sentry's own);
 * private is the host network stack (hostinet) inside a network namespace
 * made and linked here as the native backend's (this runsc refuses its own
 * stack in a namespace it did not make); host is hostinet in the host's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "common/util.h"
#include "net/privnet.h"
#include "runtime/internal.h"

#define NEWROOT_LEN (sizeof("/newroot") - 1)
#define OLDROOT_LEN (sizeof("/oldroot") - 1)
/* sandloom-init inside the sandbox. */
#define GV_INIT_PATH "/.sandloom/init"
/* Preloaded into its commands by init (src/cmd/gvisor-compat.c). */
#define GV_COMPAT_PATH "/.sandloom/gvisor-compat.so"
/* How long `runsc run -detach` may take to leave a sandbox running. */
#define GV_START_TIMEOUT_MS 15000
/* Checkpoint and restore scale with the memory held (about 0.7 s per
 * 100 MB measured each way): minutes for the largest sandboxes. */
#define GV_IMAGE_TIMEOUT_MS 300000
/* The state directory's path; every path built from it fits PATH_MAX. */
#define GV_DIR_MAX 2048

struct gv_state {
    char runsc[PATH_MAX];
    char platform[16];
    char dir[GV_DIR_MAX];  /* <workspace root>/.gvisor */
    char root[GV_DIR_MAX + 16];   /* runsc --root: its container state */
    char rootfs[GV_DIR_MAX + 16]; /* the skeleton */
    char init[PATH_MAX];   /* sandloom-init on the host */
    char compat[PATH_MAX]; /* sandloom-gvisor-compat.so beside it */
    const char *network;   /* runsc --network: none | host */
    /* The container in a user namespace mapping 0 to the sandbox's uid
     * (commands run as root there, as natively). This runsc starts no
     * sandbox with the host's network stack in one ("error converting
     * mounts"): with hostinet, commands run as the sandbox's uid instead,
     * and such a sandbox cannot be checkpointed anyway. */
    bool userns;
    json_t *mounts;        /* the read-only part of every bundle's mounts */
    atomic_uint_fast64_t seq;
    /* Deletions in flight on threads of their own (delete_later). */
    pthread_mutex_t deletes_lock;
    pthread_cond_t deletes_done;
    int deletes;
};

/* A session's own. */
struct gv_session {
    char id[64];
    char bundle[GV_DIR_MAX + 80];
    int netns_fd; /* private mode: its network namespace, until the sandbox is gone */
};

static struct gv_state *gv(struct sl_runtime *rt) { return rt->backend_state; }

/* ------------------------------------------------------------------------ */
/* Running runsc.                                                           */

/* Run runsc with `args` (after the global flags), stdin `in` and stdout
 * `out` (-1: /dev/null), inside the cgroups `cgfds` when given; it logs to
 * `log` (a path, truncated first: runsc --log). Its stderr is /dev/null,
 * never the log: `runsc run` hands its stdio to the container's init, and
 * a host file there is open to the sandbox through /proc/1/fd (this
 * Sentry does not hide a non-dumpable process's descriptors). Waits up to
 * timeout_ms. Returns its exit status (0..255), or -1 with err. Uses fork:
 * between fork and exec the child calls only async-signal-safe functions. */
static int runsc_run(struct gv_state *g, char *const *args, int in, int out, const int *cgfds,
                     int ncg, const char *log, int timeout_ms, struct sl_error *err)
{
    char *argv[32];
    size_t n = 0;
    char root_flag[PATH_MAX + 8], platform_flag[32], network_flag[32], log_flag[PATH_MAX + 8];
    snprintf(root_flag, sizeof(root_flag), "--root=%s", g->root);
    snprintf(platform_flag, sizeof(platform_flag), "--platform=%s", g->platform);
    snprintf(network_flag, sizeof(network_flag), "--network=%s", g->network);
    argv[n++] = g->runsc;
    argv[n++] = root_flag;
    argv[n++] = platform_flag;
    argv[n++] = network_flag;
    argv[n++] = (char *)"--ignore-cgroups";
    if (log) {
        snprintf(log_flag, sizeof(log_flag), "--log=%s", log);
        argv[n++] = log_flag;
    }
    for (size_t i = 0; args[i] && n < SL_ARRAY_LEN(argv) - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int log_fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (null_fd < 0 || log_fd < 0) {
        if (null_fd >= 0)
            close(null_fd);
        if (log_fd >= 0)
            close(log_fd);
        return sl_error_errno(err, SL_E_RUNTIME, "gVisor: cannot open %s", log ? log : "/dev/null");
    }
    static char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    /* The daemon blocks SIGTERM and SIGINT in every thread and ignores
     * SIGPIPE: runsc, and the sandbox and gofer it leaves running, get
     * an empty mask and the default actions. Blocked across the fork, so
     * no handler of the daemon's runs in the child. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int sig = 1; sig < NSIG; sig++)
            (void)sigaction(sig, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int i = 0; i < ncg; i++)
            if (write(cgfds[i], "0", 1) != 1)
                _exit(125);
        if (dup2(in >= 0 ? in : null_fd, 0) < 0 || dup2(out >= 0 ? out : null_fd, 1) < 0 ||
            dup2(null_fd, 2) < 0)
            _exit(125);
        (void)sl_close_range(3, 0x7fffffffU, 0);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(null_fd);
    close(log_fd);
    if (pid < 0) {
        errno = fork_errno;
        return sl_error_errno(err, SL_E_RUNTIME, "gVisor: cannot start runsc");
    }
    /* Poll its end: runsc either returns quickly or is stuck, and a stuck
     * one is killed rather than waited for. */
    int64_t deadline = sl_mono_us() + (int64_t)timeout_ms * 1000;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            int e = errno;
            kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            errno = e;
            return sl_error_errno(err, SL_E_RUNTIME, "gVisor: lost runsc");
        }
        if (sl_mono_us() > deadline) {
            kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            return sl_error_set(err, SL_E_RUNTIME, ETIMEDOUT, "gVisor: runsc %s took over %d ms",
                                args[0], timeout_ms);
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return sl_error_set(err, SL_E_RUNTIME, 0, "gVisor: runsc %s died of signal %d", args[0],
                        WTERMSIG(status));
}

/* The last line runsc logged (its reason), trimmed, into out. */
static void log_tail(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[4096];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t start = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, start);
    if (n <= 0)
        return;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    char *line = strrchr(buf, '\n');
    const char *last = line ? line + 1 : buf;
    /* runsc --log writes its fatal error as {"msg": ...}, without a newline. */
    const char *obj = NULL;
    for (const char *p = last; (p = strstr(p, "{\"msg\":")); p++)
        obj = p;
    json_t *j = obj ? json_loads(obj, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "msg"));
    snprintf(out, size, "%.*s", (int)(size - 1), msg ? msg : last);
    json_decref(j);
}

/* What runsc prints on stdout (at most size-1 bytes, NUL-terminated):
 * its exit status, or -1 with err. Written to an unlinked file rather
 * than a pipe, so a long answer (a process table) never blocks runsc. */
static int runsc_capture(struct gv_state *g, char *const *args, char *buf, size_t size,
                         struct sl_error *err)
{
    int fd = open(g->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "gVisor: cannot make a file in %s", g->dir);
    int rc = runsc_run(g, args, -1, fd, NULL, 0, NULL, 10000, err);
    ssize_t n = pread(fd, buf, size - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    return rc;
}

/* runsc delete --force: its state gone, whatever is left of it killed. */
static void runsc_delete(struct gv_state *g, const char *id)
{
    char *args[] = {(char *)"delete", (char *)"--force", (char *)id, NULL};
    struct sl_error err = {0};
    if (runsc_run(g, args, -1, -1, NULL, 0, NULL, 10000, &err) < 0)
        sl_warn("gVisor sandbox %s: %s", id, sl_error_text(&err));
}

/* ------------------------------------------------------------------------ */
/* Bundles.                                                                 */

static json_t *bind_mount(const char *dst, const char *src, bool ro)
{
    return json_pack("{s:s,s:s,s:s,s:[s,s,s,s]}", "destination", dst, "type", "bind", "source",
                     src, "options", "rbind", ro ? "ro" : "rw", "nosuid", "nodev");
}

/* mkdir -p, each new directory 0755 root's. */
static int mkdirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = saved;
        if (!saved)
            return 0;
    }
}

/* The skeleton root and the read-only mounts every bundle shares, from the
 * native layout: the same host trees at the same places. */
static int build_skeleton(struct sl_runtime *rt, struct gv_state *g, struct sl_error *err)
{
    const struct sl_spawn_layout *lay = &rt->layout;
    char path[PATH_MAX];
    if (mkdirs(g->rootfs) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", g->rootfs);
    static const char *const own[] = {"/proc", "/dev", "/sys", "/tmp", "/workspace",
                                      "/home/sandbox", "/home/user", "/cache", "/envs",
                                      "/.sandloom", "/opt/agent-sandbox/runtime"};
    for (size_t i = 0; i < SL_ARRAY_LEN(own); i++) {
        snprintf(path, sizeof(path), "%s%s", g->rootfs, own[i]);
        if (mkdirs(path) < 0)
            return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
    }
    for (size_t i = 0; i < lay->ndirs; i++) {
        snprintf(path, sizeof(path), "%s%s", g->rootfs, lay->dirs[i] + NEWROOT_LEN);
        if (mkdirs(path) < 0)
            return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
    }
    g->mounts = json_array();
    for (size_t i = 0; i < lay->nro; i++) {
        const char *dst = lay->ro[i].dst + NEWROOT_LEN;
        snprintf(path, sizeof(path), "%s%s", g->rootfs, dst);
        int rc = lay->ro[i].is_dir ? mkdirs(path) : 0;
        if (!lay->ro[i].is_dir) {
            int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            rc = fd < 0 ? -1 : close(fd);
        }
        if (rc < 0)
            return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
        json_array_append_new(g->mounts, bind_mount(dst, lay->ro[i].src + OLDROOT_LEN, true));
    }
    for (size_t i = 0; i < lay->nlinks; i++) {
        snprintf(path, sizeof(path), "%s%s", g->rootfs, lay->links[i].path + NEWROOT_LEN);
        char *slash = strrchr(path, '/');
        *slash = '\0';
        (void)mkdirs(path);
        *slash = '/';
        if (symlink(lay->links[i].target, path) < 0 && errno != EEXIST)
            return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
    }
    if (lay->python_src) {
        snprintf(path, sizeof(path), "%s/opt/agent-sandbox/python-runtime", g->rootfs);
        if (mkdirs(path) < 0)
            return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
        json_array_append_new(g->mounts, bind_mount("/opt/agent-sandbox/python-runtime",
                                                    lay->python_src + OLDROOT_LEN, true));
    }
    snprintf(path, sizeof(path), "%s" GV_INIT_PATH, g->rootfs);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
    if (fd < 0)
        return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
    close(fd);
    json_array_append_new(g->mounts, bind_mount(GV_INIT_PATH, g->init, true));
    snprintf(path, sizeof(path), "%s" GV_COMPAT_PATH, g->rootfs);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", path);
    close(fd);
    json_array_append_new(g->mounts, bind_mount(GV_COMPAT_PATH, g->compat, true));
    return 0;
}

/* The layout's rlimits (-1: unlimited, left out: the Sentry's default is
 * none). */
static json_t *rlimits(const struct sl_spawn_layout *lay)
{
    const struct {
        const char *name;
        int64_t v;
    } all[] = {{"RLIMIT_CPU", lay->rl_cpu},
               {"RLIMIT_NPROC", lay->rl_nproc},
               {"RLIMIT_NOFILE", lay->rl_nofile},
               {"RLIMIT_FSIZE", lay->rl_fsize}};
    json_t *a = json_array();
    for (size_t i = 0; i < SL_ARRAY_LEN(all); i++)
        if (all[i].v >= 0)
            json_array_append_new(a, json_pack("{s:s,s:I,s:I}", "type", all[i].name, "hard",
                                               (json_int_t)all[i].v, "soft",
                                               (json_int_t)all[i].v));
    return a;
}

/* The sandbox's own directory <root>/<name>: a real directory of its uid
 * (a link or another owner would show the wrong files). */
static int check_own_dir(const char *root, const char *name, uid_t uid, char *out, size_t size,
                         struct sl_error *err)
{
    snprintf(out, size, "%s/%s", root, name);
    struct stat st;
    if (lstat(out, &st) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: %s", out);
    if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
        return sl_error_set(err, SL_E_RUNTIME, EPERM,
                            "sandbox setup failed: %s is not the sandbox's directory", out);
    return 0;
}

static int write_spec(struct sl_runtime *rt, struct gv_state *g, struct rt_session *s,
                      struct gv_session *gs, const struct sl_rt_mount *tmpl, size_t ntmpl,
                      struct sl_error *err)
{
    const struct sl_spawn_layout *lay = &rt->layout;
    json_t *mounts = json_deep_copy(g->mounts);
    json_array_append_new(mounts, json_pack("{s:s,s:s,s:s}", "destination", "/proc", "type",
                                            "proc", "source", "proc"));
    /* /tmp as natively sized; runsc wants one option per item. */
    json_t *tmp_opts = json_pack("[s,s]", "nosuid", "nodev");
    char opts[sizeof(lay->tmp_opts)];
    snprintf(opts, sizeof(opts), "%s", lay->tmp_opts);
    char *save = NULL;
    for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
        json_array_append_new(tmp_opts, json_string(o));
    if (!g->userns) {
        /* Commands run as the sandbox's uid: /tmp is its own, as the
         * root of its user namespace owns it natively. */
        char owner[32];
        snprintf(owner, sizeof(owner), "uid=%u", (unsigned)s->uid);
        json_array_append_new(tmp_opts, json_string(owner));
        snprintf(owner, sizeof(owner), "gid=%u", (unsigned)s->uid);
        json_array_append_new(tmp_opts, json_string(owner));
    }
    json_array_append_new(mounts, json_pack("{s:s,s:s,s:s,s:o}", "destination", "/tmp", "type",
                                            "tmpfs", "source", "tmpfs", "options", tmp_opts));
    /* /dev/shm as natively: everyone's (1777), capped like /tmp (the
     * Sentry's own has no size: memory up to the sandbox's quota). */
    json_t *shm_opts = json_pack("[s,s]", "nosuid", "nodev");
    snprintf(opts, sizeof(opts), "%s", lay->shm_opts);
    for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
        json_array_append_new(shm_opts, json_string(o));
    json_array_append_new(mounts, json_pack("{s:s,s:s,s:s,s:o}", "destination", "/dev/shm",
                                            "type", "tmpfs", "source", "shm", "options",
                                            shm_opts));
    static const char *const names[] = {"workspace", "home", "cache", "envs", "workspace"};
    static const char *const dsts[] = {"/workspace", "/home/sandbox", "/cache", "/envs",
                                       "/home/user"};
    for (size_t i = 0; i < SL_ARRAY_LEN(names); i++) {
        char src[PATH_MAX + 16];
        if (check_own_dir(s->root, names[i], s->uid, src, sizeof(src), err) < 0) {
            json_decref(mounts);
            return -1;
        }
        json_array_append_new(mounts, bind_mount(dsts[i], src, false));
    }
    for (size_t i = 0; i < ntmpl; i++) {
        char dst[PATH_MAX];
        snprintf(dst, sizeof(dst), "/envs/%s", tmpl[i].name);
        json_array_append_new(mounts, bind_mount(dst, tmpl[i].host_path, true));
    }
    json_t *ns = json_pack("[{s:s},{s:s},{s:s},{s:s}]", "type", "pid", "type", "ipc", "type",
                           "uts", "type", "mount");
    if (g->userns)
        json_array_append_new(ns, json_pack("{s:s}", "type", "user"));
    if (gs->netns_fd >= 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), gs->netns_fd);
        json_array_append_new(ns, json_pack("{s:s,s:s}", "type", "network", "path", path));
    } else if (strcmp(g->network, "none") == 0) {
        json_array_append_new(ns, json_pack("{s:s}", "type", "network"));
    }
    int inside = g->userns ? 0 : (int)s->uid;
    /* The host's name, as a native sandbox's UTS namespace shows it. */
    char hostname[256] = "sandbox";
    (void)gethostname(hostname, sizeof(hostname) - 1);
    json_t *spec = json_pack(
        "{s:s,s:{s:{s:i,s:i},s:[s,s,s,s],s:[s,s],s:s,s:b,s:b,s:{s:[],s:[],s:[],s:[]},s:o},"
        "s:{s:s,s:b},s:s,s:o,s:{s:o}}",
        "ociVersion", "1.0.2", "process", "user", "uid", inside, "gid", inside, "args", GV_INIT_PATH,
        "--session", "0", "--gvisor-compat", "env", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "cwd", "/", "terminal", 0,
        "noNewPrivileges", 1, "capabilities", "bounding", "effective", "inheritable",
        "permitted", "rlimits", rlimits(lay), "root", "path", g->rootfs, "readonly", 1,
        "hostname", hostname, "mounts", mounts, "linux", "namespaces", ns);
    if (spec && g->userns) {
        json_t *ids = json_pack("[{s:i,s:I,s:i}]", "containerID", 0, "hostID",
                                (json_int_t)s->uid, "size", 1);
        json_t *linux_ = json_object_get(spec, "linux");
        json_object_set_new(linux_, "uidMappings", json_deep_copy(ids));
        json_object_set_new(linux_, "gidMappings", ids);
    }
    if (!spec)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "gVisor: cannot build the bundle");
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/config.json", gs->bundle);
    int rc = json_dump_file(spec, path, JSON_COMPACT);
    json_decref(spec);
    if (rc < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "gVisor: cannot write %s", path);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The network namespace of a private-mode session.                        */

struct netns_made {
    int fd;
    int err;
};

/* A new network namespace, made by a thread of its own (unshare changes
 * only the calling thread's, and this one ends right after). */
static void *make_netns(void *arg)
{
    struct netns_made *m = arg;
    m->fd = -1;
    if (unshare(CLONE_NEWNET) < 0) {
        m->err = errno;
        return NULL;
    }
    /* Its loopback up, as a native sandbox's (spawn.c): a server and its
     * client inside talk over it. */
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    memcpy(ifr.ifr_name, "lo", 3);
    bool up = false;
    if (sock >= 0 && ioctl(sock, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        up = ioctl(sock, SIOCSIFFLAGS, &ifr) == 0;
    }
    if (sock >= 0)
        close(sock);
    if (!up) {
        m->err = errno;
        return NULL;
    }
    m->fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    m->err = m->fd < 0 ? errno : 0;
    return NULL;
}

static int new_netns(struct sl_error *err)
{
    pthread_t t;
    struct netns_made m = {.fd = -1};
    if (pthread_create(&t, NULL, make_netns, &m) != 0)
        return sl_error_set(err, SL_E_RUNTIME, EAGAIN, "gVisor: cannot make a network namespace");
    pthread_join(t, NULL);
    if (m.fd < 0) {
        errno = m.err;
        return sl_error_errno(err, SL_E_RUNTIME, "gVisor: cannot make a network namespace");
    }
    return m.fd;
}

/* ------------------------------------------------------------------------ */
/* Sessions.                                                                */

static void gv_session_free(struct gv_session *gs)
{
    if (!gs)
        return;
    if (gs->netns_fd >= 0)
        close(gs->netns_fd);
    free(gs);
}

/* What is left of a stopped sandbox (runsc's state, the bundle) goes on a
 * thread of its own: `runsc delete` of a sandbox whose Sentry is dead
 * takes 1.4 s here, which a suspend or a release need not wait for. The
 * ids are never reused; gv_close waits for the ones in flight, and a
 * restart deletes what a crash left (delete_leftovers). */
struct gv_delete {
    struct gv_state *g;
    struct gv_session *gs;
};

static void *delete_thread(void *arg)
{
    struct gv_delete *d = arg;
    runsc_delete(d->g, d->gs->id);
    char path[PATH_MAX + 32];
    static const char *const files[] = {"config.json", "pid", "runsc.log"};
    for (size_t i = 0; i < SL_ARRAY_LEN(files); i++) {
        snprintf(path, sizeof(path), "%s/%s", d->gs->bundle, files[i]);
        (void)unlink(path);
    }
    (void)rmdir(d->gs->bundle);
    gv_session_free(d->gs);
    struct gv_state *g = d->g;
    free(d);
    pthread_mutex_lock(&g->deletes_lock);
    g->deletes--;
    pthread_cond_broadcast(&g->deletes_done);
    pthread_mutex_unlock(&g->deletes_lock);
    return NULL;
}

static void delete_later(struct gv_state *g, struct gv_session *gs)
{
    struct gv_delete *d = malloc(sizeof(*d));
    pthread_attr_t attr;
    pthread_t t;
    if (d) {
        *d = (struct gv_delete){.g = g, .gs = gs};
        pthread_mutex_lock(&g->deletes_lock);
        g->deletes++;
        pthread_mutex_unlock(&g->deletes_lock);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, delete_thread, d);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            return;
        pthread_mutex_lock(&g->deletes_lock);
        g->deletes--;
        pthread_mutex_unlock(&g->deletes_lock);
        free(d);
    }
    /* No thread: done here. */
    struct gv_delete now = {.g = g, .gs = gs};
    runsc_delete(now.g, now.gs->id);
    gv_session_free(gs);
}

static int gv_session_start(struct sl_runtime *rt, struct rt_session *s, int ctl,
                            const struct sl_rt_mount *mounts, size_t nmounts,
                            const struct sl_rt_caps *caps, const struct sl_rt_egress *egress,
                            struct sl_error *err)
{
    struct gv_state *g = gv(rt);
    struct gv_session *gs = calloc(1, sizeof(*gs));
    if (!gs)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    gs->netns_fd = -1;
    snprintf(gs->id, sizeof(gs->id), "sl-%u-%llu", (unsigned)s->uid,
             (unsigned long long)atomic_fetch_add(&g->seq, 1));
    snprintf(gs->bundle, sizeof(gs->bundle), "%s/b/%s", g->dir, gs->id);
    if (mkdirs(gs->bundle) < 0) {
        sl_error_errno(err, SL_E_RUNTIME, "gVisor: cannot create %s", gs->bundle);
        gv_session_free(gs);
        return -1;
    }
    s->boundary = gs; /* from here session_stop cleans up */
    if (rt->privnet) {
        if ((gs->netns_fd = new_netns(err)) < 0)
            return -1;
        struct sl_error why = {0};
        s->net_slot = sl_privnet_attach(rt->privnet, s->uid, gs->netns_fd,
                                        egress ? egress->policy : NULL,
                                        egress ? egress->bound : NULL, &why);
        if (why.code) /* loopback only: no network, never an open one */
            sl_warn("sandbox uid %u has no network: %s", (unsigned)s->uid, sl_error_text(&why));
    }
    if (write_spec(rt, g, s, gs, mounts, nmounts, err) < 0)
        return -1;
    int cgfds[SL_CGROUP_MAX_FDS];
    const struct sl_cgroup_limits cap = {.memory_bytes = caps ? caps->memory_bytes : 0,
                                         .pids = caps ? caps->pids : 0,
                                         .cpus = caps ? caps->cpus : 0};
    int ncg = rt->cgroups ? sl_cgroup_enter_fds(rt->cgroups, s->uid, &cap, cgfds, err) : 0;
    if (ncg < 0)
        return -1;
    char bundle_flag[PATH_MAX + 16], pid_flag[PATH_MAX + 16], log[PATH_MAX + 16],
        pid_path[PATH_MAX + 16];
    snprintf(bundle_flag, sizeof(bundle_flag), "--bundle=%s", gs->bundle);
    snprintf(pid_path, sizeof(pid_path), "%s/pid", gs->bundle);
    snprintf(pid_flag, sizeof(pid_flag), "--pid-file=%s/pid", gs->bundle);
    snprintf(log, sizeof(log), "%s/runsc.log", gs->bundle);
    /* A session from a checkpoint (sl_rt_session_restore) is restored:
     * its processes go on, and init finds the new control socket as its
     * stdin, as at a start. */
    char image_flag[PATH_MAX + 16];
    snprintf(image_flag, sizeof(image_flag), "--image-path=%s",
             s->restore_image ? s->restore_image : "");
    char *run_args[] = {(char *)"run", (char *)"--detach", bundle_flag, pid_flag, gs->id, NULL};
    char *restore_args[] = {(char *)"restore", (char *)"--detach", image_flag, bundle_flag,
                            pid_flag,          gs->id,             NULL};
    char **args = s->restore_image ? restore_args : run_args;
    int rc = runsc_run(g, args, ctl, -1, cgfds, ncg, log,
                       s->restore_image ? GV_IMAGE_TIMEOUT_MS : GV_START_TIMEOUT_MS, err);
    for (int i = 0; i < ncg; i++)
        close(cgfds[i]);
    if (rc < 0)
        return -1;
    if (rc != 0) {
        char why[512];
        log_tail(log, why, sizeof(why));
        return sl_error_set(err, SL_E_RUNTIME, 0, "gVisor: runsc %s failed (%d): %s", args[0],
                            rc, why[0] ? why : "no reason logged");
    }
    char text[32] = "";
    _cleanup_close_ int fd = open(pid_path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    long pid = n > 0 ? strtol(text, NULL, 10) : 0;
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
    if (pidfd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "gVisor: the sandbox of %s is gone", gs->id);
    s->pid = (pid_t)pid;
    s->pidfd = pidfd;
    return 0;
}

static void gv_session_stop(struct sl_runtime *rt, struct rt_session *s)
{
    struct gv_session *gs = s->boundary;
    if (!gs)
        return;
    if (s->pidfd >= 0) {
        /* The sandbox process holds the Sentry: its death ends every guest
         * process at once. It is not our child (runsc run left it). */
        (void)sl_pidfd_send_signal(s->pidfd, SIGKILL);
        struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
        (void)poll(&p, 1, 5000);
        close(s->pidfd);
        s->pidfd = -1;
    }
    s->boundary = NULL;
    delete_later(gv(rt), gs);
}

/* Does the container run anything besides init? The Sentry's process
 * table says (runsc ps); without an answer it counts as busy, so a
 * session is never reaped by mistake. */
static bool gv_session_busy(struct sl_runtime *rt, struct rt_session *s)
{
    struct gv_session *gs = s->boundary;
    char *args[] = {(char *)"ps", (char *)"--format=json", gs->id, NULL};
    char buf[16384];
    struct sl_error err = {0};
    if (runsc_capture(gv(rt), args, buf, sizeof(buf), &err) != 0)
        return true;
    json_t *procs = json_loads(buf, 0, NULL);
    bool busy = !json_is_array(procs) || json_array_size(procs) > 1;
    json_decref(procs);
    return busy;
}

/* A sandbox on the host's network stack (hostinet) cannot be
 * checkpointed by this runsc. */
static int gv_checkpoint_possible(struct sl_runtime *rt, struct sl_error *err)
{
    if (gv(rt)->userns)
        return 0;
    return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                        "this runsc cannot checkpoint a sandbox on the host's network stack: a "
                        "gVisor worker keeps memory with SANDBOX_NETWORK_MODE=isolated");
}

/* runsc checkpoint: the sandbox's state written to dir; the container
 * ends with it (this runsc loses it with --leave-running). */
static int gv_session_checkpoint(struct sl_runtime *rt, struct rt_session *s, const char *dir,
                                 struct sl_error *err)
{
    struct gv_session *gs = s->boundary;
    char image_flag[PATH_MAX + 16], log[PATH_MAX + 16];
    snprintf(image_flag, sizeof(image_flag), "--image-path=%s", dir);
    snprintf(log, sizeof(log), "%s/runsc.log", gs->bundle);
    char *args[] = {(char *)"checkpoint", image_flag, gs->id, NULL};
    int rc = runsc_run(gv(rt), args, -1, -1, NULL, 0, log, GV_IMAGE_TIMEOUT_MS, err);
    if (rc > 0) {
        char why[512];
        log_tail(log, why, sizeof(why));
        return sl_error_set(err, SL_E_RUNTIME, EIO, "gVisor: runsc checkpoint failed (%d): %s",
                            rc, why[0] ? why : "no reason logged");
    }
    return rc;
}

/* Templates are bound when the sandbox starts: another set needs a new
 * session (the caller starts one when nothing runs). */
static int gv_session_mounts(struct sl_runtime *rt, struct rt_session *s,
                             const struct sl_rt_mount *want, size_t n, struct sl_error *err)
{
    (void)rt;
    (void)s;
    (void)want;
    (void)n;
    return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                        "a gVisor sandbox's templates change with its next session");
}

/* ------------------------------------------------------------------------ */
/* Open.                                                                    */

/* "runsc version X" -> X. */
static int runsc_version(struct gv_state *g, char *out, size_t size, struct sl_error *err)
{
    char *args[] = {(char *)"--version", NULL};
    char buf[512];
    int rc = runsc_capture(g, args, buf, sizeof(buf), err);
    const char *v = strstr(buf, "runsc version ");
    if (rc != 0 || !v)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_GVISOR_RUNSC: %s does not answer `--version` as runsc does",
                            g->runsc);
    v += strlen("runsc version ");
    snprintf(out, size, "%.*s", (int)strcspn(v, "\n"), v);
    return 0;
}

/* Containers a previous run of this worker left, and their bundles:
 * deleted (no session of this run exists yet). */
static void delete_leftovers(struct gv_state *g)
{
    char bundles[GV_DIR_MAX + 8];
    snprintf(bundles, sizeof(bundles), "%s/b", g->dir);
    (void)sl_tree_remove(bundles);
    DIR *d = opendir(g->root);
    if (!d)
        return;
    struct dirent *e;
    struct sl_strlist ids = {0};
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "sl-", 3) == 0) {
            char id[64];
            snprintf(id, sizeof(id), "%.*s", (int)strcspn(e->d_name, "_."), e->d_name);
            (void)sl_strlist_push(&ids, id);
        }
    closedir(d);
    for (size_t i = 0; i < ids.len; i++)
        runsc_delete(g, ids.items[i]);
    sl_strlist_free(&ids);
}

static void gv_close(struct sl_runtime *rt)
{
    struct gv_state *g = gv(rt);
    if (!g)
        return;
    pthread_mutex_lock(&g->deletes_lock);
    while (g->deletes > 0)
        pthread_cond_wait(&g->deletes_done, &g->deletes_lock);
    pthread_mutex_unlock(&g->deletes_lock);
    pthread_mutex_destroy(&g->deletes_lock);
    pthread_cond_destroy(&g->deletes_done);
    json_decref(g->mounts);
    free(g);
    rt->backend_state = NULL;
}

static int gv_open(struct sl_runtime *rt, const struct sl_rt_options *opt, struct sl_error *err)
{
    if (!opt->warm_sessions)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_EXECUTION_BACKEND=gvisor runs commands in warm sessions: "
                            "SANDBOX_SESSION_IDLE_SECONDS must be above 0");
    struct gv_state *g = calloc(1, sizeof(*g));
    if (!g)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    rt->backend_state = g;
    atomic_init(&g->seq, 1);
    pthread_mutex_init(&g->deletes_lock, NULL);
    pthread_cond_init(&g->deletes_done, NULL);
    snprintf(g->runsc, sizeof(g->runsc), "%s", opt->gvisor_runsc ? opt->gvisor_runsc : "/usr/bin/runsc");
    snprintf(g->platform, sizeof(g->platform), "%s",
             opt->gvisor_platform ? opt->gvisor_platform : "ptrace");
    g->network = opt->network_isolated ? "none" : "host";
    g->userns = opt->network_isolated;
    if (!realpath(opt->init_path, g->init))
        return sl_error_errno(err, SL_E_CONFIG, "cannot find sandloom-init at %s",
                              opt->init_path);
    /* The compat library is built beside sandloom-init. */
    snprintf(g->compat, sizeof(g->compat), "%.*s/sandloom-gvisor-compat.so",
             (int)(strrchr(g->init, '/') - g->init), g->init);
    if (access(g->compat, R_OK) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "gVisor: no %s (built beside sandloom-init)",
                              g->compat);
    if (access(g->runsc, X_OK) < 0)
        return sl_error_errno(err, SL_E_CONFIG,
                              "SANDBOX_EXECUTION_BACKEND=gvisor: no runsc at %s (install "
                              "Debian's runsc, or set SANDBOX_GVISOR_RUNSC)",
                              g->runsc);
    if (strlen(opt->probe_root) > GV_DIR_MAX - 16)
        return sl_error_set(err, SL_E_CONFIG, ENAMETOOLONG,
                            "gVisor: the workspace root's path is too long");
    snprintf(g->dir, sizeof(g->dir), "%s/.gvisor", opt->probe_root);
    snprintf(g->root, sizeof(g->root), "%s/state", g->dir);
    snprintf(g->rootfs, sizeof(g->rootfs), "%s/rootfs", g->dir);
    if (mkdirs(g->dir) < 0 || chmod(g->dir, 0711) < 0 || mkdirs(g->root) < 0 ||
        chmod(g->root, 0700) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "gVisor: cannot create %s", g->dir);
    struct sl_rt_profile *pr = &rt->profile;
    if (runsc_version(g, pr->backend_version, sizeof(pr->backend_version), err) < 0)
        return -1;
    snprintf(pr->backend_platform, sizeof(pr->backend_platform), "%s", g->platform);
    delete_leftovers(g);
    if (build_skeleton(rt, g, err) < 0)
        return -1;
    /* A real sandbox, a real command: gVisor works here, or the worker
     * does not start (no fall-back to the native boundary). */
    char probe_dir[PATH_MAX], detail[512];
    if (rt_probe_dir_create(opt->probe_root, opt->probe_uid, probe_dir, sizeof(probe_dir), err) <
        0)
        return -1;
    bool ok = rt_probe_run(rt, 0, true, probe_dir, opt->probe_uid, detail, sizeof(detail));
    rt_session_stop_uid(rt, opt->probe_uid);
    (void)sl_tree_remove(probe_dir);
    if (rt->cgroups)
        sl_cgroup_remove(rt->cgroups, opt->probe_uid);
    if (!ok)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_EXECUTION_BACKEND=gvisor: a gVisor sandbox does not run "
                            "here (platform %s): %s",
                            g->platform, detail);
    /* The Sentry gives every sandbox its own PID, mount, IPC, UTS and
     * network namespaces and its own procfs: what the strict level asks
     * of the kernel, given by the user-space kernel instead. */
    for (int i = 0; i < 3; i++)
        pr->supported[i] = true;
    snprintf(pr->selected_level, sizeof(pr->selected_level), "strict");
    snprintf(pr->max_supported_level, sizeof(pr->max_supported_level), "strict");
    pr->pid_namespace = pr->cgroup_namespace = true;
    pr->seccomp_policy = "gvisor-sentry";
    pr->user_namespace = g->userns;
    pr->nested_userns_disabled = false;
    return 0;
}

const struct rt_backend rt_backend_gvisor = {
    .name = "gvisor",
    .open = gv_open,
    .close = gv_close,
    .oneshot_launch = NULL,
    .session_start = gv_session_start,
    .session_stop = gv_session_stop,
    .session_busy = gv_session_busy,
    .session_mounts = gv_session_mounts,
    .session_checkpoint = gv_session_checkpoint,
    .checkpoint_possible = gv_checkpoint_possible,
    .exec_cgroups = false,
};
