/* Sandbox-local flock(2) locks (API.md §4.4, §5.3).
 *
 * Lock files live in service-owned directories of the sandbox root
 * (.exec-locks, .file-locks; RUNTIME.md §9) that the sandbox never sees. They
 * are still opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) and
 * O_NOFOLLOW so a planted link could never make us create or lock a file
 * elsewhere. A lock is held by the returned descriptor; closing it releases
 * the lock.
 *
 * Per-path locks are transient: one file per path ever touched would pile
 * up forever (18,907 after ten minutes of load), so the last holder
 * removes the file on release (ws_unlock_path). Whoever locks checks
 * afterwards that the name still leads to the file it locked; a file
 * removed in between is one nobody holds any more, and it tries again with
 * the new one. */
#include "workspace/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/syscalls.h"
#include "common/util.h"

#define LOCK_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* Whether `rel` (relative to root_fd) names the file `st` describes. */
static bool names(int root_fd, const char *rel, const struct stat *st)
{
    struct stat now;
    return fstatat(root_fd, rel, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st->st_dev &&
           now.st_ino == st->st_ino;
}

/* One try: open (creating) and flock. On success the descriptor; else -1,
 * and when refused (EWOULDBLOCK) *tried describes the file that was held. */
static int lock_open_once(int root_fd, const char *dir, const char *rel, int op, bool blocking,
                          const char *busy_code, struct stat *tried, struct sl_error *err)
{
    const int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
    _cleanup_close_ int fd = sl_openat2(root_fd, rel, flags, 0600, LOCK_RESOLVE);
    if (fd < 0 && errno == ENOENT) {
        /* Lock directories of roots created before they existed. */
        if (mkdirat(root_fd, dir, 0700) < 0 && errno != EEXIST)
            goto fail;
        fd = sl_openat2(root_fd, rel, flags, 0600, LOCK_RESOLVE);
    }
    if (fd < 0 || fstat(fd, tried) < 0)
        goto fail;
    if (SL_RETRY(flock(fd, op | (blocking ? 0 : LOCK_NB))) < 0) {
        if (errno == EWOULDBLOCK) {
            sl_error_set(err, busy_code, EWOULDBLOCK, "%s", busy_code);
            errno = EWOULDBLOCK;
            return -1;
        }
        goto fail;
    }
    return steal_fd(fd);

fail:;
    int saved = errno;
    sl_error_errno(err, SL_E_INTERNAL, "sandbox lock could not be taken");
    sl_error_wrap(err, "lock %s", rel);
    errno = saved;
    return -1;
}

static int lock_open(int root_fd, const char *dir, const char *name, int op, bool blocking,
                     const char *busy_code, bool transient, struct sl_error *err)
{
    char rel[256];
    if (snprintf(rel, sizeof(rel), "%s/%s", dir, name) >= (int)sizeof(rel)) {
        errno = ENAMETOOLONG;
        return sl_error_errno(err, SL_E_INTERNAL, "lock file name too long");
    }
    for (int attempt = 0;; attempt++) {
        struct stat tried;
        int fd = lock_open_once(root_fd, dir, rel, op, blocking, busy_code, &tried, err);
        /* A transient file may have been removed by its last holder between
         * our open and our flock (then we locked, or were refused by, a
         * file nobody will look at again): whatever the outcome, it only
         * counts for the file the name still leads to. */
        if (!transient || attempt >= 8 || (fd < 0 && errno != EWOULDBLOCK) ||
            names(root_fd, rel, &tried))
            return fd;
        if (fd >= 0)
            close(fd);
        sl_error_clear(err);
    }
}

int ws_lock_global(int root_fd, bool exclusive, bool blocking, const char *busy_code,
                   struct sl_error *err)
{
    return lock_open(root_fd, ".exec-locks", "global.lock", exclusive ? LOCK_EX : LOCK_SH, blocking,
                     busy_code, false, err);
}

int ws_lock_scope(int root_fd, const char *exec_scope, const char *busy_code, struct sl_error *err)
{
    /* The API alphabet of exec_scope has no '/', but the name becomes a file
     * name here, so do not rely on validation done elsewhere. */
    if (!exec_scope[0] || strchr(exec_scope, '/')) {
        errno = EINVAL;
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, EINVAL, "invalid exec_scope");
    }
    char name[200];
    if (snprintf(name, sizeof(name), "scope-%s.lock", exec_scope) >= (int)sizeof(name)) {
        errno = ENAMETOOLONG;
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, ENAMETOOLONG, "invalid exec_scope");
    }
    return lock_open(root_fd, ".exec-locks", name, LOCK_EX, false, busy_code, false, err);
}

int ws_lock_path(int root_fd, const char *lock_key, bool exclusive, const char *busy_code,
                 struct sl_error *err)
{
    char hex[65], name[80];
    sl_sha256_hex(lock_key, strlen(lock_key), hex);
    snprintf(name, sizeof(name), "path-%s.lock", hex);
    return lock_open(root_fd, ".file-locks", name, exclusive ? LOCK_EX : LOCK_SH, false, busy_code,
                     true, err);
}

void ws_unlock_path(int root_fd, const char *lock_key, int fd)
{
    if (fd < 0)
        return;
    char hex[65], rel[96];
    sl_sha256_hex(lock_key, strlen(lock_key), hex);
    snprintf(rel, sizeof(rel), ".file-locks/path-%s.lock", hex);
    /* Exclusive now means nobody else holds it (nor waits: every path
     * lock is non-blocking): the file can go. Removed while held, so a
     * newcomer who opened it meanwhile sees it is gone and starts over. */
    struct stat st;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && names(root_fd, rel, &st))
        (void)unlinkat(root_fd, rel, 0);
    close(fd);
}
