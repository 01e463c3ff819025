#include "workspace/layout.h"
#include "workspace/quota.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/syscalls.h"
#include "common/util.h"
#include "workspace/files.h"

static const char *const SANDBOX_SUBDIRS[] = {"workspace", "home", "cache", "envs", "logs"};
/* Service-owned lock directories: the sandbox cannot see them (only the
 * four persistent directories are mounted) but keep them away from its uid
 * anyway so a lock file can never be swapped for a link by the sandbox. */
static const char *const SERVICE_SUBDIRS[] = {".exec-locks", ".file-locks"};

int ws_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int ws_root_prepare(const char *workspace_root, struct sl_error *err)
{
    struct stat st;
    if (lstat(workspace_root, &st) == 0 && S_ISLNK(st.st_mode))
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_LOCAL_ROOT: must not be a symlink");
    if (ws_mkdir_p(workspace_root, 0755) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot create the workspace root");
    if (access(workspace_root, W_OK) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "the workspace root is not writable");
    /* Sandbox setup runs as the sandbox's own uid (the reference's bwrap does
     * too), so the root and every directory above it must be searchable by
     * "others". Say so now rather than fail every launch with EACCES. */
    char real[PATH_MAX];
    if (!realpath(workspace_root, real))
        return sl_error_errno(err, SL_E_CONFIG, "cannot resolve the workspace root");
    for (char *end = real + strlen(real); end > real;) {
        struct stat dir_st;
        if (stat(real, &dir_st) < 0)
            return sl_error_errno(err, SL_E_CONFIG, "cannot inspect %s", real);
        if (!(dir_st.st_mode & S_IXOTH))
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "the workspace root must be reachable by sandbox uids: %s has no "
                                "search permission for others (chmod o+x)",
                                real);
        end = strrchr(real, '/');
        if (!end || end == real)
            break;
        *end = '\0';
    }
    char path[PATH_MAX];
    const char *dirs[] = {".trash", ".staging"};
    for (size_t i = 0; i < SL_ARRAY_LEN(dirs); i++) {
        snprintf(path, sizeof(path), "%s/%s", workspace_root, dirs[i]);
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
            return sl_error_errno(err, SL_E_CONFIG, "cannot create %s in the workspace root",
                                  dirs[i]);
    }
    return 0;
}

int ws_sandbox_id_check(const char *sandbox_id, struct sl_error *err)
{
    if (strcmp(sandbox_id, ".trash") == 0 || strcmp(sandbox_id, ".staging") == 0)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "sandbox id uses a reserved name");
    /* The API's id alphabet has no '/', so only "." and ".." could leave the
     * root. Other names starting with '.' are refused too (stricter than the
     * reference): the workspace root's dot-names are the service's own
     * (.trash, .staging, .probe-*) and orphan cleanup skips them. */
    if (strcmp(sandbox_id, ".") == 0 || strcmp(sandbox_id, "..") == 0 || strchr(sandbox_id, '/'))
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "sandbox id escapes the workspace root");
    if (sandbox_id[0] == '.')
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "sandbox id uses a reserved name");
    return 0;
}

/* Validate one existing directory of a sandbox: real directory, owned by uid. */
static int check_existing_dir(int dirfd, const char *name, uid_t uid, const char *what,
                              struct sl_error *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID,
                              "sandbox directory %s is missing or unreadable", what);
    if (!S_ISDIR(st.st_mode))
        return sl_error_set(err, SL_E_WORKSPACE_INVALID, 0,
                            "sandbox directory %s is not a real directory", what);
    if (st.st_uid != uid)
        return sl_error_set(err, SL_E_WORKSPACE_INVALID, 0,
                            "sandbox directory %s is not owned by the sandbox uid", what);
    return 0;
}

static int sandbox_make(const char *workspace_root, const char *sandbox_id, uid_t uid,
                        bool disk_available, const struct ws_quota *quota, struct sl_error *err);

int ws_sandbox_create(const char *workspace_root, const char *sandbox_id, uid_t uid,
                      bool disk_available, const struct ws_quota *quota, struct sl_error *err)
{
    if (ws_sandbox_id_check(sandbox_id, err) < 0)
        return -1;
    return sandbox_make(workspace_root, sandbox_id, uid, disk_available, quota, err);
}

int ws_warm_create(const char *workspace_root, const char *name, uid_t uid, bool disk_available,
                   const struct ws_quota *quota, struct sl_error *err)
{
    if (strncmp(name, WS_WARM_PREFIX, strlen(WS_WARM_PREFIX)) != 0 || strchr(name, '/') ||
        strlen(name) <= strlen(WS_WARM_PREFIX))
        return sl_error_set(err, SL_E_INTERNAL, EINVAL, "not a warm sandbox's name: %s", name);
    return sandbox_make(workspace_root, name, uid, disk_available, quota, err);
}

int ws_warm_claim(const char *workspace_root, const char *name, const char *sandbox_id,
                  struct sl_error *err)
{
    if (ws_sandbox_id_check(sandbox_id, err) < 0)
        return -1;
    _cleanup_close_ int rootfd =
        open(workspace_root, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (rootfd < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "the workspace root is unavailable");
    /* Never over a directory the sandbox's id has already. */
    if (renameat2(rootfd, name, rootfd, sandbox_id, RENAME_NOREPLACE) < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot give %s its directory",
                              sandbox_id);
    return 0;
}

static int sandbox_make(const char *workspace_root, const char *sandbox_id, uid_t uid,
                        bool disk_available, const struct ws_quota *quota, struct sl_error *err)
{
    _cleanup_close_ int rootfd =
        open(workspace_root, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (rootfd < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "the workspace root is unavailable");

    /* A new root is a subvolume with its quota where the filesystem can
     * enforce one (workspace/quota.h). */
    int made = ws_quota_make_root(rootfd, sandbox_id, quota);
    if (made < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot create the sandbox directory");
    bool created = made == 0;
    if (created && !disk_available) {
        unlinkat(rootfd, sandbox_id, AT_REMOVEDIR);
        return sl_error_set(err, SL_E_DISK_PRESSURE, 0, "SANDBOX_WORKER_DISK_PRESSURE");
    }
    if (!created && check_existing_dir(rootfd, sandbox_id, uid, "root", err) < 0)
        return -1;

    _cleanup_close_ int sbfd = sl_openat2(rootfd, sandbox_id, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                                          0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
    if (sbfd < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot open the sandbox directory");
    if (fchown(sbfd, uid, uid) < 0 || fchmod(sbfd, 0700) < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot set sandbox root ownership");

    for (size_t i = 0; i < SL_ARRAY_LEN(SANDBOX_SUBDIRS); i++) {
        const char *name = SANDBOX_SUBDIRS[i];
        if (mkdirat(sbfd, name, 0700) < 0) {
            if (errno != EEXIST)
                return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot create %s", name);
            if (check_existing_dir(sbfd, name, uid, name, err) < 0)
                return -1;
        }
        _cleanup_close_ int fd = sl_openat2(sbfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
                                            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
        if (fd < 0 || fchown(fd, uid, uid) < 0 || fchmod(fd, 0700) < 0)
            return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot prepare %s", name);
    }
    for (size_t i = 0; i < SL_ARRAY_LEN(SERVICE_SUBDIRS); i++) {
        if (mkdirat(sbfd, SERVICE_SUBDIRS[i], 0700) < 0 && errno != EEXIST)
            return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "cannot create %s",
                                  SERVICE_SUBDIRS[i]);
    }
    return 0;
}

int ws_sandbox_open(const char *workspace_root, const char *sandbox_id, struct sl_error *err)
{
    _cleanup_close_ int rootfd = open(workspace_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "the workspace root is unavailable");
    int fd = sl_openat2(rootfd, sandbox_id, O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "the sandbox directory is unavailable");
    return fd;
}

int ws_sandbox_trash(const char *workspace_root, const char *sandbox_id, struct sl_error *err)
{
    _cleanup_close_ int rootfd = open(workspace_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return sl_error_errno(err, SL_E_WORKSPACE_INVALID, "the workspace root is unavailable");
    struct stat st;
    if (fstatat(rootfd, sandbox_id, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : sl_error_errno(err, SL_E_INTERNAL, "cannot stat sandbox root");
    char hex[33], name[300];
    if (sl_random_hex(hex, 16) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "no randomness");
    snprintf(name, sizeof(name), ".trash/%s-%s", sandbox_id, hex);
    if (renameat(rootfd, sandbox_id, rootfd, name) == 0)
        return 0;
    return ws_remove_tree_at(rootfd, sandbox_id, err);
}

int ws_trash_purge(const char *workspace_root)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/.trash", workspace_root);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    int dupfd = dup(fd);
    if (dupfd < 0)
        return 0;
    _cleanup_closedir_ DIR *dir = fdopendir(dupfd);
    if (!dir) {
        close(dupfd);
        return 0;
    }
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct sl_error err;
        if (ws_remove_tree_at(fd, de->d_name, &err) == 0)
            removed++;
    }
    return removed;
}

void ws_disk_status(const char *workspace_root, int64_t min_free_bytes, int64_t watermark_percent,
                    struct sl_disk_status *out)
{
    struct statvfs vfs;
    memset(out, 0, sizeof(*out));
    int rc = statvfs(workspace_root, &vfs);
    if (rc < 0) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", workspace_root);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent)
            *slash = '\0';
        rc = statvfs(parent, &vfs);
    }
    if (rc < 0)
        return;
    /* Python's shutil.disk_usage: total = f_blocks*f_frsize, free = f_bavail,
     * used = (f_blocks - f_bfree) * f_frsize. */
    out->total_bytes = (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize;
    out->free_bytes = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    out->used_bytes = (int64_t)(vfs.f_blocks - vfs.f_bfree) * (int64_t)vfs.f_frsize;
    out->used_percent = out->total_bytes ? out->used_bytes * 100 / out->total_bytes : 100;
    out->available = out->free_bytes >= min_free_bytes && out->used_percent < watermark_percent;
}
