/* cgroup tests against the real kernel, so root only (exit 77 = skipped
 * otherwise).
 *
 * The v2 cases mount a fresh cgroup2 at a temporary directory (the host's one
 * unified hierarchy, with whatever controllers it has) and open there. Each
 * case first moves this process into a cgroup of its own
 * (sl-cgtest-<pid>-<n> beside where it started), so everything the code
 * under test creates, and its move of "the daemon" into a leaf, stays below
 * that cgroup; the teardown moves the process back and removes the subtree,
 * after a failed assertion too. Cases that need what a host cannot give for
 * real (some controllers but not all, a cgroup namespace's root) use a fake
 * tree of plain files, which shows what the code writes where. The last case
 * checks the host's default open. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "runtime/cgroup.h"

#define UID_A 3990001u
#define UID_B 3990002u
#define UID_V1 3990003u

static const struct sl_cgroup_limits LIMITS = {
    .memory_bytes = 256 << 20,
    .pids = 64,
    .cpus = 0.5,
};
static const char *const CTL_NAMES[] = {"memory", "pids", "cpu"};

static char tmp_dir[] = "/tmp/sl-cg-test-XXXXXX";
static char mnt[PATH_MAX]; /* the fresh cgroup2 mount */
static bool mounted;
static char own0[PATH_MAX];     /* this process's v2 cgroup at start, "" = root */
static char case_rel[PATH_MAX]; /* the case's cgroup, from the hierarchy root */
static char case_dir[PATH_MAX]; /* the same under mnt */
static int case_no;
static char deep[PATH_MAX]; /* a second mount at a long path, when made */
static bool deep_mounted;

/* What a case leaves behind if an assertion stops it. */
static pid_t child = -1;
static struct sl_cgroups *open_cg;
static uid_t open_uid;

/* ------------------------------------------------------------------------ */

static int fmt(char *out, size_t size, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int fmt(char *out, size_t size, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(out, size, f, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int read_text(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Into a cgroup: one write of the pid, nothing created. */
static int join_cgroup(const char *dir, pid_t pid)
{
    char path[PATH_MAX], text[32];
    if (fmt(path, sizeof(path), "%s/cgroup.procs", dir) < 0)
        return -1;
    snprintf(text, sizeof(text), "%d", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* pid's cgroup in hierarchy `ctl` ("" = v2), "" for the root. */
static int cgroup_of(pid_t pid, const char *ctl, char *out, size_t size)
{
    char path[64], line[PATH_MAX + 64];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int rc = -1;
    while (rc < 0 && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0'; /* line is the hierarchy id, c1 + 1 its controllers */
        bool match = false;
        if (!ctl[0]) {
            match = strcmp(line, "0") == 0 && !c1[1];
        } else {
            for (char *save = NULL, *t = strtok_r(c1 + 1, ",", &save); t;
                 t = strtok_r(NULL, ",", &save))
                match |= strcmp(t, ctl) == 0;
        }
        if (match)
            rc = fmt(out, size, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
    }
    fclose(f);
    return rc;
}

static bool has_word(const char *list, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = list; *p;) {
        p += strspn(p, " \n");
        size_t n = strcspn(p, " \n");
        if (n == len && strncmp(p, word, n) == 0)
            return true;
        p += n;
    }
    return false;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    if (fmt(buf, sizeof(buf), "%s", path) < 0)
        return -1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* A cgroup's files cannot be unlinked; its directories go deepest first. */
static int rmdir_dirs(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    return 0;
}

/* Kill whatever is left in a cgroup subtree (never this process: it has
 * left), then remove it. */
static void remove_cgroup_tree(const char *dir)
{
    char path[PATH_MAX];
    if (fmt(path, sizeof(path), "%s/cgroup.kill", dir) == 0)
        (void)write_text(path, "1");
    for (int i = 0; i < 100 && exists(dir); i++) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        nftw(dir, rmdir_dirs, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
        if (exists(dir))
            usleep(10000);
    }
}

/* The plain files of a temp tree; FTW_MOUNT keeps it off any mount still
 * there (a cgroup2 mount's directories are real cgroups). */
static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

/* A child that waits until *release is closed (then exits 0). */
static pid_t fork_waiting_child(int *release)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        char c;
        while (read(p[0], &c, 1) < 0 && errno == EINTR)
            ;
        _exit(0);
    }
    close(p[0]);
    if (pid < 0) {
        close(p[1]);
        return -1;
    }
    *release = p[1];
    return pid;
}

static struct sl_cgroups *open_at(const char *root, const struct sl_cgroup_limits *limits)
{
    struct sl_error err;
    sl_error_clear(&err);
    struct sl_cgroups *cg = NULL;
    if (sl_cgroups_open_at(root, limits, &cg, &err) < 0) {
        fprintf(stderr, "sl_cgroups_open_at(%s): %s\n", root, sl_error_text(&err));
        return NULL;
    }
    printf("open_at %.60s%s: version %d memory %d pids %d cpu %d why \"%s\"\n", root,
           strlen(root) > 60 ? "..." : "", (int)sl_cgroups_version(cg), sl_cgroups_memory(cg),
           sl_cgroups_pids(cg), sl_cgroups_cpu(cg), sl_cgroups_why(cg));
    return cg;
}

/* ------------------------------------------------------------------------ */

/* Leftovers of an earlier run that died: sl-cgtest-<pid>-<n> of a dead pid. */
static void remove_stale_cases(void)
{
    char dir[PATH_MAX];
    if (fmt(dir, sizeof(dir), "%s%s", mnt, own0) < 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = 0;
        char path[PATH_MAX];
        if (sscanf(e->d_name, "sl-cgtest-%d-", &pid) == 1 && pid > 0 && kill(pid, 0) < 0 &&
            errno == ESRCH && fmt(path, sizeof(path), "%s/%s", dir, e->d_name) == 0)
            remove_cgroup_tree(path);
    }
    closedir(d);
}

static int group_setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmp_dir))
        return -1;
    if (cgroup_of(getpid(), "", own0, sizeof(own0)) < 0) {
        printf("no cgroup v2 line in /proc/self/cgroup: v2 cases skipped\n");
        return 0;
    }
    snprintf(mnt, sizeof(mnt), "%s/cg", tmp_dir);
    if (mkdir(mnt, 0755) < 0)
        return -1;
    if (mount("none", mnt, "cgroup2", 0, NULL) < 0) {
        printf("cannot mount cgroup2 (%s): v2 cases skipped\n", strerror(errno));
        return 0;
    }
    mounted = true;
    remove_stale_cases();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (mounted && umount2(mnt, MNT_DETACH) < 0)
        fprintf(stderr, "umount %s: %s\n", mnt, strerror(errno));
    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    return 0;
}

static int case_setup(void **state)
{
    (void)state;
    case_rel[0] = case_dir[0] = '\0';
    if (!mounted)
        return 0;
    if (fmt(case_rel, sizeof(case_rel), "%s/sl-cgtest-%d-%d", own0, (int)getpid(), ++case_no) < 0 ||
        fmt(case_dir, sizeof(case_dir), "%s%s", mnt, case_rel) < 0)
        return -1;
    if (mkdir(case_dir, 0755) < 0 || join_cgroup(case_dir, getpid()) < 0) {
        fprintf(stderr, "cannot enter %s: %s\n", case_dir, strerror(errno));
        return -1;
    }
    return 0;
}

static void remove_deep_mount(void)
{
    if (deep_mounted && umount2(deep, MNT_DETACH) < 0)
        fprintf(stderr, "umount %s: %s\n", deep, strerror(errno));
    deep_mounted = false;
    /* Its directories, deepest first, up to the temp dir. */
    size_t top = strlen(tmp_dir);
    for (char *slash; deep[0] && strlen(deep) > top; *slash = '\0') {
        rmdir(deep);
        slash = strrchr(deep, '/');
    }
    deep[0] = '\0';
}

static int case_teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        child = -1;
    }
    if (open_cg) {
        sl_cgroup_remove(open_cg, open_uid);
        sl_cgroups_close(open_cg);
        open_cg = NULL;
    }
    remove_deep_mount();
    if (!case_dir[0])
        return 0;
    /* Back where this process started (it held us, so it takes us back),
     * and only then is it safe to kill what is left below the case. */
    char own[PATH_MAX], back[PATH_MAX];
    if (fmt(back, sizeof(back), "%s%s", mnt, own0) < 0 || join_cgroup(back, getpid()) < 0 ||
        cgroup_of(getpid(), "", own, sizeof(own)) < 0 || strcmp(own, own0) != 0) {
        fprintf(stderr, "cannot move back to %s: %s\n", back, strerror(errno));
        return -1;
    }
    remove_cgroup_tree(case_dir);
    if (exists(case_dir)) {
        fprintf(stderr, "cannot remove %s\n", case_dir);
        rc = -1;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */

/* Here: the unified hierarchy has none of memory, pids and cpu (they are on
 * v1), so V2 with nothing enforced and all three named. On a pure v2 host,
 * whatever the case's cgroup offers is enforced. */
static void test_v2_open_names_missing_controllers(void **state)
{
    (void)state;
    if (!mounted)
        skip();
    char path[PATH_MAX], ctls[512], own[PATH_MAX];
    assert_int_equal(fmt(path, sizeof(path), "%s/cgroup.controllers", case_dir), 0);
    assert_int_equal(read_text(path, ctls, sizeof(ctls)), 0);
    struct sl_cgroups *cg = open_cg = open_at(mnt, &LIMITS);
    assert_non_null(cg);
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V2);
    bool on[3] = {sl_cgroups_memory(cg), sl_cgroups_pids(cg), sl_cgroups_cpu(cg)};
    bool any = false;
    for (int c = 0; c < 3; c++) {
        bool avail = has_word(ctls, CTL_NAMES[c]);
        assert_int_equal(on[c], avail);
        if (!avail)
            assert_non_null(strstr(sl_cgroups_why(cg), CTL_NAMES[c]));
        any |= on[c];
    }
    if (!any)
        assert_int_equal(sl_cgroup_oom_kills(cg, UID_A), -1);
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-sandboxes", case_dir), 0);
    assert_true(exists(path));
    /* The move into a leaf happens only when there is a controller to hand
     * down. */
    assert_int_equal(cgroup_of(getpid(), "", own, sizeof(own)), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s%s", case_rel, any ? "/sandloom-daemon" : ""), 0);
    assert_string_equal(own, path);
}

static void check_limits_v2(struct sl_cgroups *cg, const char *sb)
{
    char path[PATH_MAX], text[128];
    if (sl_cgroups_memory(cg)) {
        assert_int_equal(fmt(path, sizeof(path), "%s/memory.max", sb), 0);
        assert_int_equal(read_text(path, text, sizeof(text)), 0);
        assert_string_equal(text, "268435456");
        assert_true(sl_cgroup_oom_kills(cg, UID_A) >= 0);
    } else {
        assert_int_equal(sl_cgroup_oom_kills(cg, UID_A), -1);
    }
    if (sl_cgroups_pids(cg)) {
        assert_int_equal(fmt(path, sizeof(path), "%s/pids.max", sb), 0);
        assert_int_equal(read_text(path, text, sizeof(text)), 0);
        assert_string_equal(text, "64");
    }
    if (sl_cgroups_cpu(cg)) {
        assert_int_equal(fmt(path, sizeof(path), "%s/cpu.max", sb), 0);
        assert_int_equal(read_text(path, text, sizeof(text)), 0);
        assert_string_equal(text, "50000 100000");
    }
}

static void test_v2_enter_moves_a_child_and_remove_cleans_up(void **state)
{
    (void)state;
    if (!mounted)
        skip();
    struct sl_cgroups *cg = open_cg = open_at(mnt, &LIMITS);
    assert_non_null(cg);
    open_uid = UID_A;
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V2);
    struct sl_error err;
    sl_error_clear(&err);
    int fds[SL_CGROUP_MAX_FDS];
    int n = sl_cgroup_enter_fds(cg, UID_A, NULL, fds, &err);
    if (n < 0)
        fprintf(stderr, "enter: %s\n", sl_error_text(&err));
    assert_int_equal(n, 1); /* v2: one directory, quotas or not */
    char sb[PATH_MAX], rel[PATH_MAX], where[PATH_MAX];
    assert_int_equal(fmt(sb, sizeof(sb), "%s/sandloom-sandboxes/sb-%u", case_dir, UID_A), 0);
    assert_int_equal(fmt(rel, sizeof(rel), "%s/sandloom-sandboxes/sb-%u", case_rel, UID_A), 0);
    assert_true(exists(sb));
    check_limits_v2(cg, sb);

    int release = -1;
    child = fork_waiting_child(&release);
    assert_true(child > 0);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)child);
    assert_int_equal(write(fds[0], pid, strlen(pid)), (ssize_t)strlen(pid));
    close(fds[0]);
    assert_int_equal(cgroup_of(child, "", where, sizeof(where)), 0);
    assert_string_equal(where, rel);

    /* A later execution finds the cgroup and only opens it. */
    n = sl_cgroup_enter_fds(cg, UID_A, NULL, fds, &err);
    assert_int_equal(n, 1);
    close(fds[0]);

    close(release);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    child = -1;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    sl_cgroup_remove(cg, UID_A);
    assert_false(exists(sb));
    /* Removing again (nothing there) is harmless. */
    sl_cgroup_remove(cg, UID_A);
}

/* v2's remove kills what is still in the sandbox's cgroup (cgroup.kill). */
static void test_v2_remove_kills_what_is_left(void **state)
{
    (void)state;
    if (!mounted)
        skip();
    struct sl_cgroups *cg = open_cg = open_at(mnt, &LIMITS);
    assert_non_null(cg);
    open_uid = UID_B;
    struct sl_error err;
    sl_error_clear(&err);
    int fds[SL_CGROUP_MAX_FDS];
    assert_int_equal(sl_cgroup_enter_fds(cg, UID_B, NULL, fds, &err), 1);
    int release = -1;
    child = fork_waiting_child(&release);
    assert_true(child > 0);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)child);
    assert_int_equal(write(fds[0], pid, strlen(pid)), (ssize_t)strlen(pid));
    close(fds[0]);

    char sb[PATH_MAX];
    assert_int_equal(fmt(sb, sizeof(sb), "%s/sandloom-sandboxes/sb-%u", case_dir, UID_B), 0);
    sl_cgroup_remove(cg, UID_B);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    child = -1;
    close(release);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_false(exists(sb));
}

/* A second open by a process already in its sandloom-daemon leaf uses the
 * same places as the first, instead of nesting one level deeper. */
static void test_v2_reopen_from_the_daemon_leaf(void **state)
{
    (void)state;
    if (!mounted)
        skip();
    char leaf[PATH_MAX], path[PATH_MAX];
    assert_int_equal(fmt(leaf, sizeof(leaf), "%s/sandloom-daemon", case_dir), 0);
    assert_int_equal(mkdir(leaf, 0755), 0);
    assert_int_equal(join_cgroup(leaf, getpid()), 0);
    struct sl_cgroups *cg = open_cg = open_at(mnt, &LIMITS);
    assert_non_null(cg);
    open_uid = UID_A;
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V2);
    struct sl_error err;
    sl_error_clear(&err);
    int fds[SL_CGROUP_MAX_FDS];
    assert_int_equal(sl_cgroup_enter_fds(cg, UID_A, NULL, fds, &err), 1);
    close(fds[0]);
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-sandboxes/sb-%u", case_dir, UID_A), 0);
    assert_true(exists(path));
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-sandboxes", leaf), 0);
    assert_false(exists(path));
    sl_cgroup_remove(cg, UID_A);
}

static void test_root_must_be_an_absolute_path_that_fits(void **state)
{
    (void)state;
    struct sl_cgroups *cg = NULL;
    struct sl_error err;
    sl_error_clear(&err);
    assert_int_equal(sl_cgroups_open_at(NULL, &LIMITS, &cg, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    sl_error_clear(&err);
    assert_int_equal(sl_cgroups_open_at("sys/fs/cgroup", &LIMITS, &cg, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    static char longer[PATH_MAX + 16];
    memset(longer, 'a', sizeof(longer) - 1);
    longer[0] = '/';
    sl_error_clear(&err);
    assert_int_equal(sl_cgroups_open_at(longer, &LIMITS, &cg, &err), -1);
    assert_int_equal(err.errnum, ENAMETOOLONG);
    assert_null(cg);
    if (!mounted)
        return;
    /* Trailing slashes are the same root. */
    char slash[PATH_MAX];
    assert_int_equal(fmt(slash, sizeof(slash), "%s//", mnt), 0);
    cg = open_cg = open_at(slash, &LIMITS);
    assert_non_null(cg);
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V2);
}

/* A cgroup2 mounted where the paths below the service's cgroup would not
 * fit PATH_MAX: refused at open, nothing created, rather than a cut path
 * later. */
static void test_v2_long_path_refused(void **state)
{
    (void)state;
    if (!mounted)
        skip();
    /* Short enough that the base and the subtree's name fit, too long for
     * "/sb-<uid>/<file>" below it. */
    size_t target = PATH_MAX - 1 - strlen(case_rel) - strlen("/sandloom-sandboxes") - 20;
    assert_int_equal(fmt(deep, sizeof(deep), "%s", tmp_dir), 0);
    while (strlen(deep) < target) {
        size_t len = strlen(deep), part = target - len - 1;
        if (part > 200)
            part = 200;
        if (part == 0)
            break;
        deep[len] = '/';
        memset(deep + len + 1, 'd', part);
        deep[len + 1 + part] = '\0';
        assert_true(mkdir(deep, 0755) == 0 || errno == EEXIST);
    }
    assert_int_equal(mount("none", deep, "cgroup2", 0, NULL), 0);
    deep_mounted = true;
    struct sl_cgroups *cg = open_cg = open_at(deep, &LIMITS);
    assert_non_null(cg);
    open_uid = UID_A;
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_NONE);
    assert_false(sl_cgroups_memory(cg) || sl_cgroups_pids(cg) || sl_cgroups_cpu(cg));
    assert_non_null(strstr(sl_cgroups_why(cg), "too long"));
    char path[PATH_MAX];
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-sandboxes", case_dir), 0);
    assert_false(exists(path));
    struct sl_error err;
    sl_error_clear(&err);
    int fds[SL_CGROUP_MAX_FDS];
    assert_int_equal(sl_cgroup_enter_fds(cg, UID_A, NULL, fds, &err), 0);
}

/* A fake v2 tree at `fake` for a service whose cgroup is `own`: plain files
 * where the kernel has cgroup files, so what the code writes stays there. */
static void make_fake_v2(const char *fake, const char *own, const char *controllers, bool root)
{
    char base[PATH_MAX], path[PATH_MAX];
    assert_int_equal(fmt(base, sizeof(base), "%s%s", fake, own), 0);
    assert_int_equal(mkdir_p(base), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/cgroup.controllers", fake), 0);
    assert_int_equal(write_text(path, "cpuset cpu io memory hugetlb pids\n"), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/cgroup.controllers", base), 0);
    assert_int_equal(write_text(path, controllers), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/cgroup.subtree_control", base), 0);
    assert_int_equal(write_text(path, ""), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/cgroup.type", base), 0);
    if (root)
        assert_true(unlink(path) == 0 || errno == ENOENT);
    else
        assert_int_equal(write_text(path, "domain\n"), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-daemon", base), 0);
    assert_int_equal(mkdir_p(path), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-daemon/cgroup.procs", base), 0);
    assert_int_equal(write_text(path, ""), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-sandboxes", base), 0);
    assert_int_equal(mkdir_p(path), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/sandloom-sandboxes/cgroup.subtree_control", base),
                     0);
    assert_int_equal(write_text(path, ""), 0);
}

static void read_fake(const char *fake, const char *own, const char *file, char *out, size_t size)
{
    char path[PATH_MAX];
    assert_int_equal(fmt(path, sizeof(path), "%s%s/%s", fake, own, file), 0);
    assert_int_equal(read_text(path, out, size), 0);
}

/* Some of the three in v2: those are enabled and enforced, the rest named.
 * "cpuset" is not "cpu". */
static void test_v2_partial_controllers(void **state)
{
    (void)state;
    char fake[PATH_MAX], own[PATH_MAX], text[256], pid[32];
    assert_int_equal(fmt(fake, sizeof(fake), "%s/fake-partial", tmp_dir), 0);
    assert_int_equal(cgroup_of(getpid(), "", own, sizeof(own)), 0);
    make_fake_v2(fake, own, "cpuset io memory pids\n", false);
    struct sl_cgroups *cg = open_cg = open_at(fake, &LIMITS);
    assert_non_null(cg);
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V2);
    assert_true(sl_cgroups_memory(cg));
    assert_true(sl_cgroups_pids(cg));
    assert_false(sl_cgroups_cpu(cg));
    assert_non_null(strstr(sl_cgroups_why(cg), "cpu"));
    assert_null(strstr(sl_cgroups_why(cg), "memory"));
    assert_null(strstr(sl_cgroups_why(cg), "pids"));
    read_fake(fake, own, "cgroup.subtree_control", text, sizeof(text));
    assert_string_equal(text, "+memory +pids");
    read_fake(fake, own, "sandloom-sandboxes/cgroup.subtree_control", text, sizeof(text));
    assert_string_equal(text, "+memory +pids");
    /* Not the root cgroup: the daemon moves into its leaf first (here a
     * plain file takes the pid; this process stays where it is). */
    read_fake(fake, own, "sandloom-daemon/cgroup.procs", text, sizeof(text));
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    assert_string_equal(text, pid);
    sl_cgroups_close(cg);
    open_cg = NULL;

    /* A quota turned off is not missing. */
    make_fake_v2(fake, own, "cpuset io memory pids\n", false);
    struct sl_cgroup_limits no_cpu = LIMITS;
    no_cpu.cpus = 0;
    cg = open_cg = open_at(fake, &no_cpu);
    assert_non_null(cg);
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V2);
    assert_true(sl_cgroups_memory(cg) && sl_cgroups_pids(cg));
    assert_false(sl_cgroups_cpu(cg));
    assert_string_equal(sl_cgroups_why(cg), "");
}

/* In a child: unshare a cgroup namespace (so its own cgroup reads "/"),
 * open the fake tree, exit 0 if it is V2 with all three. */
static int open_in_cgroup_namespace(const char *fake)
{
    pid_t pid = fork();
    if (pid == 0) {
        char own[PATH_MAX];
        if (unshare(CLONE_NEWCGROUP) < 0 || cgroup_of(getpid(), "", own, sizeof(own)) < 0 || own[0])
            _exit(2);
        struct sl_cgroups *cg = NULL;
        if (sl_cgroups_open_at(fake, &LIMITS, &cg, NULL) < 0)
            _exit(3);
        bool ok = sl_cgroups_version(cg) == SL_CGROUP_V2 && sl_cgroups_memory(cg) &&
                  sl_cgroups_pids(cg) && sl_cgroups_cpu(cg) && !sl_cgroups_why(cg)[0];
        sl_cgroups_close(cg);
        _exit(ok ? 0 : 4);
    }
    if (pid < 0)
        return -1;
    child = pid;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    child = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* "/" in a cgroup namespace (a container) is not the real root: the daemon
 * must still move into a leaf before handing controllers down. The real root
 * (no cgroup.type) needs no move. */
static void test_v2_namespace_root_moves_the_daemon(void **state)
{
    (void)state;
    char fake[PATH_MAX], text[256];
    assert_int_equal(fmt(fake, sizeof(fake), "%s/fake-ns", tmp_dir), 0);
    make_fake_v2(fake, "", "cpuset cpu io memory pids\n", false);
    assert_int_equal(open_in_cgroup_namespace(fake), 0);
    read_fake(fake, "", "cgroup.subtree_control", text, sizeof(text));
    assert_string_equal(text, "+memory +pids +cpu");
    read_fake(fake, "", "sandloom-daemon/cgroup.procs", text, sizeof(text));
    assert_true(atoi(text) > 0);

    make_fake_v2(fake, "", "cpuset cpu io memory pids\n", true);
    assert_int_equal(open_in_cgroup_namespace(fake), 0);
    read_fake(fake, "", "cgroup.subtree_control", text, sizeof(text));
    assert_string_equal(text, "+memory +pids +cpu");
    read_fake(fake, "", "sandloom-daemon/cgroup.procs", text, sizeof(text));
    assert_string_equal(text, "");
}

/* This host: controllers on v1 only, cgroup2 (none) at /sys/fs/cgroup/unified.
 * The default open falls back to v1 and enforces all three. */
/* The host's own cgroups, opened as the daemon opens them, when they are
 * v1 with `hierarchy` writable (else the case is skipped, saying why). */
static struct sl_cgroups *open_default_v1(const char *hierarchy)
{
    char procs[PATH_MAX];
    snprintf(procs, sizeof(procs), SL_CGROUP_ROOT "/%s/cgroup.procs", hierarchy);
    if (access(SL_CGROUP_ROOT "/cgroup.controllers", F_OK) == 0 || access(procs, W_OK) < 0) {
        printf("not a v1 or hybrid host: skipped\n");
        skip();
    }
    struct sl_error err;
    sl_error_clear(&err);
    struct sl_cgroups *cg = NULL;
    assert_int_equal(sl_cgroups_open(&LIMITS, &cg, &err), 0);
    open_cg = cg;
    open_uid = UID_V1;
    return cg;
}

static void test_default_open_on_a_v1_host(void **state)
{
    (void)state;
    struct sl_error err;
    sl_error_clear(&err);
    struct sl_cgroups *cg = open_default_v1("memory");
    printf("default open: version %d why \"%s\"\n", (int)sl_cgroups_version(cg),
           sl_cgroups_why(cg));
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V1);
    assert_true(sl_cgroups_memory(cg));
    assert_true(sl_cgroups_pids(cg));
    assert_true(sl_cgroups_cpu(cg));
    assert_string_equal(sl_cgroups_why(cg), "");

    int fds[SL_CGROUP_MAX_FDS];
    int n = sl_cgroup_enter_fds(cg, UID_V1, NULL, fds, &err);
    if (n < 0)
        fprintf(stderr, "enter: %s\n", sl_error_text(&err));
    assert_int_equal(n, 3);
    assert_int_equal(sl_cgroup_oom_kills(cg, UID_V1), 0);
    int release = -1;
    child = fork_waiting_child(&release);
    assert_true(child > 0);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)child);
    for (int i = 0; i < n; i++) {
        assert_int_equal(write(fds[i], pid, strlen(pid)), (ssize_t)strlen(pid));
        close(fds[i]);
    }
    static const char *const files[] = {"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us"};
    static const char *const values[] = {"268435456", "64", "50000"};
    char sbs[3][PATH_MAX];
    for (int c = 0; c < 3; c++) {
        char where[PATH_MAX], tail[64], path[PATH_MAX], text[64];
        assert_int_equal(cgroup_of(child, CTL_NAMES[c], where, sizeof(where)), 0);
        snprintf(tail, sizeof(tail), "/sandloom-sandboxes/sb-%u", UID_V1);
        assert_true(strlen(where) >= strlen(tail));
        assert_string_equal(where + strlen(where) - strlen(tail), tail);
        /* cpu may be mounted alone or as cpu,cpuacct. */
        if (fmt(sbs[c], sizeof(sbs[c]), SL_CGROUP_ROOT "/%s%s", CTL_NAMES[c], where) == 0 &&
            !exists(sbs[c]))
            fmt(sbs[c], sizeof(sbs[c]), SL_CGROUP_ROOT "/cpu,cpuacct%s", where);
        assert_int_equal(fmt(path, sizeof(path), "%s/%s", sbs[c], files[c]), 0);
        assert_int_equal(read_text(path, text, sizeof(text)), 0);
        assert_string_equal(text, values[c]);
    }
    close(release);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    child = -1;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sl_cgroup_remove(cg, UID_V1);
    for (int c = 0; c < 3; c++)
        assert_false(exists(sbs[c]));
}

/* A sandbox's ceilings (a tenant's, sl_cgroup_enter_fds' cap) lower the
 * limits written for it, never raise them; without a cap the next entry
 * writes the open's limits again. */
static void test_v1_caps_lower_the_limits_and_never_raise_them(void **state)
{
    (void)state;
    struct sl_error err;
    sl_error_clear(&err);
    struct sl_cgroups *cg = open_default_v1("memory");
    const struct sl_cgroup_limits cap = {.memory_bytes = 128 << 20, .pids = 32, .cpus = 2.0};
    int fds[SL_CGROUP_MAX_FDS];
    int n = sl_cgroup_enter_fds(cg, UID_V1, &cap, fds, &err);
    assert_int_equal(n, 3);
    int release = -1;
    child = fork_waiting_child(&release);
    assert_true(child > 0);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)child);
    for (int i = 0; i < n; i++) {
        assert_int_equal(write(fds[i], pid, strlen(pid)), (ssize_t)strlen(pid));
        close(fds[i]);
    }
    static const char *const files[] = {"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us"};
    /* 128 MiB and 32 under the open's 256 MiB and 64; 2 CPUs over its 0.5. */
    static const char *const capped[] = {"134217728", "32", "50000"};
    static const char *const plain[] = {"268435456", "64", "50000"};
    char paths[3][PATH_MAX];
    for (int c = 0; c < 3; c++) {
        char where[PATH_MAX], sb[PATH_MAX], text[64];
        assert_int_equal(cgroup_of(child, CTL_NAMES[c], where, sizeof(where)), 0);
        if (fmt(sb, sizeof(sb), SL_CGROUP_ROOT "/%s%s", CTL_NAMES[c], where) == 0 && !exists(sb))
            fmt(sb, sizeof(sb), SL_CGROUP_ROOT "/cpu,cpuacct%s", where);
        assert_int_equal(fmt(paths[c], sizeof(paths[c]), "%s/%s", sb, files[c]), 0);
        assert_int_equal(read_text(paths[c], text, sizeof(text)), 0);
        assert_string_equal(text, capped[c]);
    }
    n = sl_cgroup_enter_fds(cg, UID_V1, NULL, fds, &err);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    for (int c = 0; c < 3; c++) {
        char text[64];
        assert_int_equal(read_text(paths[c], text, sizeof(text)), 0);
        assert_string_equal(text, plain[c]);
    }
    close(release);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    child = -1;
    sl_cgroup_remove(cg, UID_V1);
}

/* A command's own cgroup (sl_cgroup_exec_*): a child enters it through the
 * descriptor ("0": itself), then keeps forking and daemonising (setsid'd
 * grandchildren that leave its process group, short-lived children forked
 * in a loop so the kill races forks); one exec_signal(SIGKILL) empties it,
 * and remove takes the directory. The sandbox's own cgroup and its other
 * members are not touched. */
static void check_exec_cgroup_kill(struct sl_cgroups *cg, uid_t uid)
{
    struct sl_error err;
    sl_error_clear(&err);
    assert_true(sl_cgroups_exec_supported(cg));
    int fds[SL_CGROUP_MAX_FDS];
    int n = sl_cgroup_enter_fds(cg, uid, NULL, fds, &err);
    assert_true(n >= 1);
    int release = -1;
    pid_t bystander = fork_waiting_child(&release); /* in the sandbox, not the command */
    assert_true(bystander > 0);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)bystander);
    for (int i = 0; i < n; i++) {
        assert_int_equal(write(fds[i], pid, strlen(pid)), (ssize_t)strlen(pid));
        close(fds[i]);
    }
    int procs = sl_cgroup_exec_create(cg, uid, 7, &err);
    if (procs < 0)
        fprintf(stderr, "exec_create: %s\n", sl_error_text(&err));
    assert_true(procs >= 0);
    int ready[2];
    assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
    child = fork();
    if (child == 0) {
        if (write(procs, "0", 1) != 1)
            _exit(3);
        for (int i = 0; i < 8; i++)
            if (fork() == 0) {
                setsid();
                if (fork() == 0)
                    for (;;)
                        pause();
                for (;;)
                    pause();
            }
        if (write(ready[1], "r", 1) != 1)
            _exit(4);
        for (;;) {
            pid_t p = fork();
            if (p == 0)
                _exit(0);
            if (p > 0)
                waitpid(p, NULL, 0);
        }
    }
    close(procs);
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    usleep(50000);
    assert_true(sl_cgroup_exec_signal(cg, uid, 7, SIGTERM) >= 17); /* the tree is all in there */
    /* SIGTERM kills these (no handlers); the loop may still be forking. */
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    child = -1;
    (void)sl_cgroup_exec_signal(cg, uid, 7, SIGKILL);
    char dir[PATH_MAX], path[PATH_MAX], text[4096];
    char sbdir[PATH_MAX];
    assert_int_equal(cgroup_of(bystander, sl_cgroups_version(cg) == SL_CGROUP_V2 ? "" : "pids",
                               sbdir, sizeof(sbdir)), 0);
    bool v2 = sl_cgroups_version(cg) == SL_CGROUP_V2;
    const char *base = v2 ? mnt : SL_CGROUP_ROOT "/pids";
    assert_int_equal(fmt(dir, sizeof(dir), "%s%s/x7", base, sbdir), 0);
    assert_int_equal(fmt(path, sizeof(path), "%s/cgroup.procs", dir), 0);
    bool empty = false;
    for (int i = 0; i < 100 && !empty; i++) {
        empty = read_text(path, text, sizeof(text)) == 0 && text[0] == '\0';
        if (!empty)
            usleep(10000);
    }
    assert_true(empty);
    sl_cgroup_exec_remove(cg, uid, 7);
    assert_false(exists(dir));
    /* The sandbox's other member lives on. */
    assert_int_equal(kill(bystander, 0), 0);
    close(release);
    assert_int_equal(waitpid(bystander, &status, 0), bystander);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_v2_exec_cgroup_kills_a_forking_tree(void **state)
{
    (void)state;
    if (!mounted)
        skip();
    struct sl_cgroups *cg = open_cg = open_at(mnt, &LIMITS);
    assert_non_null(cg);
    open_uid = UID_A;
    check_exec_cgroup_kill(cg, UID_A);
}

static void test_v1_exec_cgroup_kills_a_forking_tree(void **state)
{
    (void)state;
    struct sl_cgroups *cg = open_default_v1("pids");
    assert_int_equal(sl_cgroups_version(cg), SL_CGROUP_V1);
    check_exec_cgroup_kill(cg, UID_V1);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("test_cgroup: SKIP: needs root (mounts a cgroup2, moves processes)\n");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v2_open_names_missing_controllers, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_enter_moves_a_child_and_remove_cleans_up,
                                        case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_remove_kills_what_is_left, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_reopen_from_the_daemon_leaf, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_root_must_be_an_absolute_path_that_fits, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_long_path_refused, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_partial_controllers, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_namespace_root_moves_the_daemon, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_default_open_on_a_v1_host, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_v1_caps_lower_the_limits_and_never_raise_them,
                                        case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_v2_exec_cgroup_kills_a_forking_tree, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_v1_exec_cgroup_kills_a_forking_tree, case_setup,
                                        case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
