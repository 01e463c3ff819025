/* A sandbox's tree copied into another's (fork): every entry recreated under
 * the destination, owned by the destination's uid, regular files shared
 * block for block where the filesystem can (FICLONE: btrfs, XFS) and
 * copied otherwise (copy_file_range). Nothing is followed: links are
 * copied as links, and other special files (sockets, devices, fifos) are
 * left out. The copy stops, with SANDBOX_DISK_FULL, before it writes past
 * its byte budget, so a fork never takes more disk than it was given. */
#include "workspace/clone.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

/* Deeper trees than this are refused rather than recursed into. */
#define CLONE_MAX_DEPTH 256

struct clone_ctx {
    uid_t uid;
    int64_t budget, used;
    bool reflinked; /* at least one file was shared, not copied */
};

static int copy_file(struct clone_ctx *c, int src_dir, int dst_dir, const char *name,
                     const struct stat *st, struct sl_error *err)
{
    if (c->used + st->st_size > c->budget)
        return sl_error_set(err, SL_E_DISK_FULL, ENOSPC,
                            "the copy would exceed its %lld bytes", (long long)c->budget);
    /* Non-blocking, and the same file as the one stat saw: a sandbox may
     * have swapped a fifo in meanwhile, whose open would wait for ever. */
    _cleanup_close_ int in =
        openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat now;
    if (in < 0 || fstat(in, &now) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot open %s", name);
    if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
        return 0; /* changed under the copy: left out, like any special file */
    _cleanup_close_ int out =
        openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot create %s", name);
    if (ioctl(out, FICLONE, in) == 0) {
        c->reflinked = true;
    } else {
        for (off_t left = st->st_size; left > 0;) {
            ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return sl_error_errno(err, errno == ENOSPC || errno == EDQUOT ? SL_E_DISK_FULL
                                                                              : SL_E_INTERNAL,
                                      "cannot copy %s", name);
            if (n == 0)
                break; /* it shrank meanwhile */
            left -= n;
        }
    }
    c->used += st->st_size;
    if (fchown(out, c->uid, c->uid) < 0 || fchmod(out, st->st_mode & 07777) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot give %s to its sandbox", name);
    const struct timespec times[2] = {st->st_atim, st->st_mtim};
    (void)futimens(out, times);
    return 0;
}

static int clone_dir(struct clone_ctx *c, int src, int dst, int depth, struct sl_error *err);

static int clone_entry(struct clone_ctx *c, int src, int dst, const char *name, int depth,
                       struct sl_error *err)
{
    struct stat st;
    if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : sl_error_errno(err, SL_E_INTERNAL, "cannot stat %s", name);
    if (S_ISREG(st.st_mode))
        return copy_file(c, src, dst, name, &st, err);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(src, name, target, sizeof(target) - 1);
        if (n < 0)
            return sl_error_errno(err, SL_E_INTERNAL, "cannot read the link %s", name);
        target[n] = '\0';
        if (symlinkat(target, dst, name) < 0 || fchownat(dst, name, c->uid, c->uid,
                                                         AT_SYMLINK_NOFOLLOW) < 0)
            return sl_error_errno(err, SL_E_INTERNAL, "cannot copy the link %s", name);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return 0; /* sockets, fifos, devices: not copied */
    if (depth >= CLONE_MAX_DEPTH)
        return sl_error_set(err, SL_E_INTERNAL, ELOOP, "the tree is deeper than %d",
                            CLONE_MAX_DEPTH);
    if (mkdirat(dst, name, 0700) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot create %s", name);
    _cleanup_close_ int s =
        openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_close_ int d =
        openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s < 0 || d < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot open %s", name);
    if (clone_dir(c, s, d, depth + 1, err) < 0)
        return -1;
    if (fchown(d, c->uid, c->uid) < 0 || fchmod(d, st.st_mode & 07777) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot give %s to its sandbox", name);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    (void)futimens(d, times);
    return 0;
}

static int clone_dir(struct clone_ctx *c, int src, int dst, int depth, struct sl_error *err)
{
    int fd = dup(src);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return sl_error_errno(err, SL_E_INTERNAL, "cannot list a directory");
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(dir));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            rc = clone_entry(c, src, dst, e->d_name, depth, err);
    closedir(dir);
    return rc;
}

int ws_tree_clone(int src_dir, int dst_dir, uid_t uid, int64_t budget,
                  struct ws_clone_stats *stats, struct sl_error *err)
{
    struct clone_ctx c = {.uid = uid, .budget = budget};
    int rc = clone_dir(&c, src_dir, dst_dir, 0, err);
    if (stats) {
        stats->bytes = c.used;
        stats->reflinked = c.reflinked;
    }
    return rc;
}

/* Bytes of the regular files under dir (links not followed). */
static int64_t tree_bytes_at(int dir, int depth)
{
    int fd = dup(dir);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    int64_t total = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            total += st.st_size;
        } else if (S_ISDIR(st.st_mode) && depth < CLONE_MAX_DEPTH) {
            int sub = openat(dir, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                total += tree_bytes_at(sub, depth + 1);
                close(sub);
            }
        }
    }
    closedir(d);
    return total;
}

int64_t ws_tree_bytes(int dir)
{
    return tree_bytes_at(dir, 0);
}
