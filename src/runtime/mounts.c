/* Template trees in a live warm session (API.md §6.5, issue "templates"):
 * attaching takes effect for the next command without restarting the
 * session, so its background processes live on.
 *
 * A short-lived child of the daemon opens each new tree on the host
 * (open_tree clone, made read-only, nosuid, nodev while still detached),
 * joins the session's mount namespace through init's pidfd, and attaches
 * the trees at /envs/<name> (and detaches the ones no longer wanted). Inside
 * the sandbox's namespace every path is resolved from /envs without
 * following links: /envs belongs to the sandbox and may hold anything. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/syscalls.h"
#include "runtime/internal.h"

void rt_mount_set_free(struct rt_mount_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        free(set->names[i]);
        free(set->paths[i]);
    }
    free(set->names);
    free(set->paths);
    memset(set, 0, sizeof(*set));
}

int rt_mount_set_copy(struct rt_mount_set *dst, const struct sl_rt_mount *m, size_t n)
{
    memset(dst, 0, sizeof(*dst));
    if (n == 0)
        return 0;
    dst->names = calloc(n, sizeof(char *));
    dst->paths = calloc(n, sizeof(char *));
    if (!dst->names || !dst->paths) {
        rt_mount_set_free(dst);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        dst->names[i] = strdup(m[i].name);
        dst->paths[i] = strdup(m[i].host_path);
        dst->n = i + 1;
        if (!dst->names[i] || !dst->paths[i]) {
            rt_mount_set_free(dst);
            return -1;
        }
    }
    return 0;
}

/* Index of `name` in the set with the same tree, -1 if absent or different. */
static int set_find(const struct rt_mount_set *set, const char *name, const char *path)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->names[i], name) == 0)
            return strcmp(set->paths[i], path) == 0 ? (int)i : -1;
    return -1;
}

static bool want_has(const struct sl_rt_mount *want, size_t n, const char *name, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(want[i].name, name) == 0 && strcmp(want[i].host_path, path) == 0)
            return true;
    return false;
}

bool rt_mount_set_equal(const struct rt_mount_set *set, const struct sl_rt_mount *want, size_t n)
{
    if (set->n != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (set_find(set, want[i].name, want[i].host_path) < 0)
            return false;
    return true;
}

#define MAX_MOUNTS 64

/* The child: everything it needs was prepared by the parent. Reports the
 * failing step's errno through `report` and exits non-zero. */
static _Noreturn void apply_child(int pidfd, const struct rt_mount_set *cur,
                                  const struct sl_rt_mount *want, size_t n, const bool *add,
                                  const bool *drop, char (*drop_paths)[96], int report)
{
    int trees[MAX_MOUNTS];
    int step = 0;
    /* Dies with the daemon (it never blocks, but no child may outlive it). */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    for (size_t i = 0; i < n; i++) {
        trees[i] = -1;
        if (!add[i])
            continue;
        step = 1;
        int src = open(want[i].host_path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0)
            goto fail;
        trees[i] = open_tree(src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH |
                                          AT_RECURSIVE);
        if (trees[i] < 0 ||
            sl_mount_setattr(trees[i], "", AT_EMPTY_PATH | AT_RECURSIVE,
                             MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) < 0)
            goto fail;
        close(src);
    }
    step = 2;
    if (setns(pidfd, CLONE_NEWNS) < 0)
        goto fail;
    step = 3;
    int envs = open("/envs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (envs < 0)
        goto fail;
    for (size_t i = 0; i < cur->n; i++) {
        if (!drop[i])
            continue;
        step = 4;
        int t = sl_openat2(envs, cur->names[i], O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                           RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        if (t < 0)
            continue; /* the sandbox removed the mount point: nothing to detach */
        close(t);
        if (umount2(drop_paths[i], MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL)
            goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (!add[i])
            continue;
        step = 5;
        if (mkdirat(envs, want[i].name, 0755) < 0 && errno != EEXIST)
            goto fail;
        int dst = sl_openat2(envs, want[i].name, O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                             RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        if (dst < 0 ||
            move_mount(trees[i], "", dst, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) <
                0)
            goto fail;
        close(dst);
    }
    _exit(0);
fail:;
    int what[2] = {step, errno};
    if (write(report, what, sizeof(what)) < 0) {
        /* the parent sees the exit status anyway */
    }
    _exit(1);
}

int rt_mounts_apply(int pidfd, struct rt_mount_set *cur, const struct sl_rt_mount *want,
                    size_t n, struct sl_error *err)
{
    static const char *const steps[] = {"",
                                        "open the template tree",
                                        "enter the session's mount namespace",
                                        "open /envs in the sandbox",
                                        "detach a template",
                                        "attach a template"};
    if (n > MAX_MOUNTS || cur->n > MAX_MOUNTS)
        return sl_error_set(err, SL_E_RUNTIME, E2BIG, "too many template mounts");
    bool add[MAX_MOUNTS] = {0}, drop[MAX_MOUNTS] = {0};
    char drop_paths[MAX_MOUNTS][96];
    for (size_t i = 0; i < n; i++)
        add[i] = set_find(cur, want[i].name, want[i].host_path) < 0;
    for (size_t i = 0; i < cur->n; i++) {
        /* A name that stays with another tree is detached, then attached anew. */
        drop[i] = !want_has(want, n, cur->names[i], cur->paths[i]);
        snprintf(drop_paths[i], sizeof(drop_paths[i]), "/envs/%s", cur->names[i]);
    }
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot update the session's templates");
    pid_t pid = fork();
    if (pid < 0) {
        close(report[0]);
        close(report[1]);
        return sl_error_errno(err, SL_E_RUNTIME, "cannot update the session's templates");
    }
    if (pid == 0) {
        close(report[0]);
        apply_child(pidfd, cur, want, n, add, drop, drop_paths, report[1]);
    }
    close(report[1]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int what[2] = {0, 0};
    ssize_t got = read(report[0], what, sizeof(what));
    close(report[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        int step = got == (ssize_t)sizeof(what) && what[0] > 0 && what[0] < 6 ? what[0] : 0;
        errno = got == (ssize_t)sizeof(what) ? what[1] : EIO;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot %s",
                              step ? steps[step] : "update the session's templates");
    }
    struct rt_mount_set next;
    if (rt_mount_set_copy(&next, want, n) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    rt_mount_set_free(cur);
    *cur = next;
    return 0;
}
