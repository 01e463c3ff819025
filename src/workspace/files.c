/* Safe File API operations (API.md §5.2), see files.h.
 *
 * Security model: the workspace directory is writable by the sandbox, whose
 * processes may run concurrently with a file call (scoped executions) and
 * may swap any entry for a symlink at any moment. So nothing here uses a
 * host path string below the sandbox root: each directory is opened one
 * component at a time with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS) from the descriptor of its parent, and every final
 * operation is an *at() call on that descriptor that does not follow links
 * (fstatat AT_SYMLINK_NOFOLLOW, unlinkat, renameat, O_NOFOLLOW). A swap can
 * then only make a call fail, never make it touch anything outside. */
#include "workspace/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/syscalls.h"

#define WS_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* §5.4 message catalogue. */
#define MSG_NO_SUCH "path does not exist"
#define MSG_NOT_DIR "path is not a directory or traverses a symlink"
#define MSG_SYMLINK "file path may not traverse symlinks"
#define MSG_EXISTS "path already exists"
#define MSG_NOT_EMPTY "directory is not empty or is busy"
#define MSG_OS "workspace operation could not be completed"
#define MSG_DISK_FULL "no space left on the sandbox's disk"
#define MSG_QUOTA "the sandbox's disk quota is exceeded"
#define MSG_NO_PARENT "parent directory does not exist"
#define MSG_NO_SRC_PARENT "source parent directory does not exist"
#define MSG_NO_DST_PARENT "destination parent directory does not exist"
#define MSG_NOT_REGULAR "path is not a regular file"
#define MSG_TOO_LARGE "file exceeds the sandbox File API size limit"
#define MSG_ROOT_WRITE "cannot write the workspace root"
#define MSG_ROOT_MKDIR "cannot create the workspace root"
#define MSG_ROOT_DELETE "cannot delete the workspace root"
#define MSG_ROOT_MOVE "cannot move the workspace root"
#define MSG_NO_SRC "source path does not exist"
#define MSG_DST_EXISTS "destination already exists"
#define MSG_OVERLAP "cannot move overlapping directories"

/* Recursive removal holds one open directory per level; deeper directories
 * are moved up to the top of the tree instead (see rm_entry). */
#define RM_MAX_DEPTH 64
/* Bound on removal passes, so a sandbox process that keeps refilling the
 * tree cannot keep a worker thread busy forever. */
#define RM_MAX_PASSES 4096
#define RM_MAX_IDLE_PASSES 2

static inline void ws_wpath_freep(struct sl_wpath *p)
{
    sl_wpath_free(p);
}
#define _cleanup_wpath_ __attribute__((cleanup(ws_wpath_freep)))

/* The locks of one file call. The keys point into the caller's parsed
 * paths, which outlive this (declared before it, cleaned up after). */
struct ws_locks {
    int root_fd;
    int global;
    int path[2];
    const char *keys[2];
};
#define WS_LOCKS_INIT                                                                              \
    {                                                                                              \
        .root_fd = -1, .global = -1, .path = {-1, -1}                                              \
    }

static void ws_locks_release(struct ws_locks *l)
{
    for (int i = 1; i >= 0; i--) {
        if (l->path[i] >= 0)
            ws_unlock_path(l->root_fd, l->keys[i], l->path[i]);
        l->path[i] = -1;
    }
    sl_closep(&l->global);
}
#define _cleanup_locks_ __attribute__((cleanup(ws_locks_release)))

static int ws_refuse(struct sl_error *err, const char *msg)
{
    return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "%s", msg);
}

/* Any OS failure the catalogue has no sentence for. The client sees the
 * generic sentence; the operator's detail names the operation. */
static int ws_fail_os(struct sl_error *err, int errnum, const char *op, const struct sl_wpath *p)
{
    /* A full disk or an exhausted quota is not the client's mistake: it
     * gets a code of its own, so it can tell "free some space" from "bad
     * request". */
    if (errnum == ENOSPC || errnum == EDQUOT)
        sl_error_set(err, SL_E_DISK_FULL, errnum, "%s",
                     errnum == ENOSPC ? MSG_DISK_FULL : MSG_QUOTA);
    else
        sl_error_set(err, SL_E_INVALID_ARGUMENT, errnum, "%s", MSG_OS);
    if (err)
        snprintf(err->detail, sizeof(err->detail), "%s %s: %s", op, p ? p->canonical : "",
                 strerror(errnum));
    errno = errnum;
    return -1;
}

/* A failed directory walk: `missing` is the operation's sentence for a
 * missing directory, `symlink` the one for a link on the way. */
static int ws_walk_failed(struct sl_error *err, int errnum, const char *missing,
                          const char *symlink, const char *op, const struct sl_wpath *p)
{
    switch (errnum) {
    case ENOENT:
        return ws_refuse(err, missing);
    case ELOOP:
    case EXDEV: /* RESOLVE_BENEATH refusal; cannot happen without ".." or links */
        return ws_refuse(err, symlink);
    case ENOTDIR:
        return ws_refuse(err, MSG_NOT_DIR);
    default:
        return ws_fail_os(err, errnum, op, p);
    }
}

/* The lock key of §5.3: "/workspace/" + joined components, so the root
 * is "/workspace/" (not the canonical "/workspace"). */
static const char *ws_lock_key(const struct sl_wpath *p)
{
    return p->n ? p->canonical : "/workspace/";
}

/* Global lock shared, then the per-path lock(s) in sorted order. */
static int ws_lock(const struct sl_ws_target *t, const struct sl_wpath *a, const struct sl_wpath *b,
                   bool exclusive, struct ws_locks *l, struct sl_error *err)
{
    const char *keys[2] = {ws_lock_key(a), b ? ws_lock_key(b) : NULL};
    if (keys[1] && strcmp(keys[1], keys[0]) < 0) {
        const char *tmp = keys[0];
        keys[0] = keys[1];
        keys[1] = tmp;
    }
    l->root_fd = t->root_fd;
    l->global = ws_lock_global(t->root_fd, false, false, SL_E_FILE_PATH_LOCKED, err);
    for (size_t i = 0; l->global >= 0 && i < 2 && keys[i]; i++) {
        l->keys[i] = keys[i];
        l->path[i] = ws_lock_path(t->root_fd, keys[i], exclusive, SL_E_FILE_PATH_LOCKED, err);
        if (l->path[i] < 0)
            break;
    }
    if (l->global >= 0 && l->path[0] >= 0 && (!keys[1] || l->path[1] >= 0))
        return t->recheck ? t->recheck(t->recheck_ctx, err) : 0;
    if (errno == EWOULDBLOCK)
        return -1; /* err already says SANDBOX_FILE_PATH_LOCKED */
    /* A lock that cannot be taken for another reason is an OS error like
     * any other for the client; locks.c's detail is kept for the log. */
    if (err) {
        bool full = errno == ENOSPC || errno == EDQUOT;
        err->code = full ? SL_E_DISK_FULL : SL_E_INVALID_ARGUMENT;
        snprintf(err->message, sizeof(err->message), "%s",
                 !full ? MSG_OS : errno == ENOSPC ? MSG_DISK_FULL : MSG_QUOTA);
    }
    return -1;
}

static int ws_open_workspace(const struct sl_ws_target *t, const struct sl_wpath *p,
                             struct sl_error *err)
{
    int fd = sl_openat2(t->root_fd, "workspace", O_PATH | O_DIRECTORY | O_CLOEXEC, 0, WS_RESOLVE);
    if (fd < 0)
        return ws_fail_os(err, errno, "open workspace for", p);
    return fd;
}

/* Give a directory of the chain to the sandbox (§5.2: uid:uid, 0700). */
static int ws_fix_dir(int fd, uid_t uid)
{
    if (fchown(fd, uid, (gid_t)uid) < 0 || fchmod(fd, 0700) < 0)
        return -1;
    return 0;
}

/* Open the directory comps[0..n) below the workspace for reading, one
 * component per openat2 so that no symlink is followed anywhere (n == 0 is
 * the workspace itself). With `create`, missing directories are made 0700;
 * with `fix_owner`, every directory on the chain, workspace root included,
 * is given to the sandbox uid with mode 0700. Returns the descriptor, or -1
 * with errno of the failing step (ENOENT, ENOTDIR, ELOOP, ...). */
static int ws_walk(const struct sl_ws_target *t, int ws_fd, char *const *comps, size_t n,
                   bool create, bool fix_owner)
{
    _cleanup_close_ int fd =
        sl_openat2(ws_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, WS_RESOLVE);
    if (fd < 0)
        return -1;
    if (fix_owner && ws_fix_dir(fd, t->uid) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (create && mkdirat(fd, comps[i], 0700) < 0 && errno != EEXIST)
            return -1;
        int next = sl_openat2(fd, comps[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, WS_RESOLVE);
        if (next < 0)
            return -1;
        close(fd);
        fd = next;
        if (fix_owner && ws_fix_dir(fd, t->uid) < 0)
            return -1;
    }
    return steal_fd(fd);
}

/* ---- write ---- */

static int ws_fill_temp(int fd, uid_t uid, const void *data, size_t len)
{
    if (fchown(fd, uid, (gid_t)uid) < 0 || fchmod(fd, 0600) < 0)
        return -1;
    const char *p = data;
    while (len > 0) {
        ssize_t w = SL_RETRY(write(fd, p, len));
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int ws_file_write(const struct sl_ws_target *t, const char *path, size_t path_len, const void *data,
                  size_t len, struct sl_error *err)
{
    _cleanup_wpath_ struct sl_wpath p = {0};
    if (sl_wpath_parse(path, path_len, &p, err) < 0)
        return -1;
    if (t->max_file_bytes < 0 || (uint64_t)len > (uint64_t)t->max_file_bytes)
        return ws_refuse(err, MSG_TOO_LARGE);
    if (p.n == 0)
        return ws_refuse(err, MSG_ROOT_WRITE);

    _cleanup_locks_ struct ws_locks locks = WS_LOCKS_INIT;
    if (ws_lock(t, &p, NULL, true, &locks, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &p, err);
    if (ws < 0)
        return -1;
    _cleanup_close_ int dir = ws_walk(t, ws, p.comps, p.n - 1, true, true);
    if (dir < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_SYMLINK, "write", &p);
    /* A fresh reading, not the heartbeat's: a write that cannot fit is
     * refused before it fills the disk for every other sandbox. */
    struct statvfs vfs;
    if (fstatvfs(dir, &vfs) == 0 && (uint64_t)len > (uint64_t)vfs.f_bavail * vfs.f_frsize)
        return ws_fail_os(err, ENOSPC, "write", &p);

    const char *name = p.comps[p.n - 1];
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISREG(st.st_mode))
            return ws_refuse(err, MSG_NOT_REGULAR);
    } else if (errno != ENOENT) {
        return ws_fail_os(err, errno, "write", &p);
    }

    char hex[33], tmp[64];
    if (sl_random_hex(hex, 16) < 0)
        return ws_fail_os(err, errno, "write", &p);
    snprintf(tmp, sizeof(tmp), ".sandbox-write-%s", hex);
    /* Exclusive and no-follow: a name planted by the sandbox makes the call
     * fail instead of writing through it. */
    _cleanup_close_ int fd =
        openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return ws_fail_os(err, errno, "write", &p);
    int rc = ws_fill_temp(fd, t->uid, data, len);
    if (rc == 0)
        rc = close(steal_fd(fd)); /* reports delayed write errors */
    /* rename(2) replaces a symlink or file at the target itself; it never
     * follows one. Readers see the old or the new content, nothing between. */
    if (rc == 0)
        rc = renameat(dir, tmp, dir, name);
    if (rc < 0) {
        int saved = errno;
        unlinkat(dir, tmp, 0);
        if (saved == EISDIR)
            return ws_refuse(err, MSG_NOT_REGULAR); /* became a directory meanwhile */
        return ws_fail_os(err, saved, "write", &p);
    }
    return 0;
}

/* ---- read ---- */

/* Read at most max bytes; 1 when the file holds more, -1 with errno. */
static int ws_read_bounded(int fd, size_t hint, size_t max, struct sl_buf *out)
{
    if (max > SIZE_MAX - 2)
        max = SIZE_MAX - 2;
    /* One byte beyond the size detects growth, one more for the NUL. */
    size_t cap = (hint < max ? hint : max) + 2;
    _cleanup_free_ char *data = malloc(cap);
    if (!data)
        return -1;
    size_t len = 0;
    for (;;) {
        if (len + 1 == cap) {
            size_t ncap = cap > (max + 2) / 2 ? max + 2 : cap * 2;
            char *grown = realloc(data, ncap);
            if (!grown)
                return -1;
            data = grown;
            cap = ncap;
        }
        ssize_t r = SL_RETRY(read(fd, data + len, cap - 1 - len));
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        len += (size_t)r;
        if (len > max)
            return 1;
    }
    data[len] = '\0';
    out->data = steal_ptr(data);
    out->len = len;
    out->cap = cap;
    return 0;
}

int ws_file_read(const struct sl_ws_target *t, const char *path, size_t path_len,
                 struct sl_buf *out, struct sl_error *err)
{
    size_t max = t->max_file_bytes < 0 ? 0 : (size_t)t->max_file_bytes;
    sl_buf_init(out, max);
    _cleanup_wpath_ struct sl_wpath p = {0};
    if (sl_wpath_parse(path, path_len, &p, err) < 0)
        return -1;
    if (p.n == 0)
        return ws_refuse(err, MSG_NOT_REGULAR);

    _cleanup_locks_ struct ws_locks locks = WS_LOCKS_INIT;
    if (ws_lock(t, &p, NULL, false, &locks, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &p, err);
    if (ws < 0)
        return -1;
    _cleanup_close_ int dir = ws_walk(t, ws, p.comps, p.n - 1, false, false);
    if (dir < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_SYMLINK, "read", &p);

    const char *name = p.comps[p.n - 1];
    /* Look at the entry through O_PATH first, so a FIFO or device node in
     * the workspace is never really opened. O_PATH|O_NOFOLLOW yields the
     * link itself for a final symlink. */
    struct stat st;
    {
        _cleanup_close_ int pfd =
            sl_openat2(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, WS_RESOLVE);
        if (pfd < 0)
            return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_SYMLINK, "read", &p);
        if (fstat(pfd, &st) < 0)
            return ws_fail_os(err, errno, "read", &p);
    }
    if (S_ISLNK(st.st_mode))
        return ws_refuse(err, MSG_SYMLINK);
    if (!S_ISREG(st.st_mode))
        return ws_refuse(err, MSG_NOT_REGULAR);
    if ((uint64_t)st.st_size > max)
        return ws_refuse(err, MSG_TOO_LARGE);

    /* Non-blocking: had the entry just been swapped for a FIFO, the open
     * returns instead of waiting for a writer; the inode check refuses it. */
    _cleanup_close_ int fd =
        sl_openat2(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0, WS_RESOLVE);
    if (fd < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_SYMLINK, "read", &p);
    struct stat st2;
    if (fstat(fd, &st2) < 0)
        return ws_fail_os(err, errno, "read", &p);
    if (!S_ISREG(st2.st_mode) || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino)
        return ws_refuse(err, MSG_NOT_REGULAR);
    if ((uint64_t)st2.st_size > max)
        return ws_refuse(err, MSG_TOO_LARGE);

    int rc = ws_read_bounded(fd, (size_t)st2.st_size, max, out);
    if (rc > 0)
        return ws_refuse(err, MSG_TOO_LARGE);
    if (rc < 0)
        return ws_fail_os(err, errno, "read", &p);
    return 0;
}

/* ---- list ---- */

struct ws_names {
    char **items;
    size_t len, cap;
};

static void ws_names_free(struct ws_names *n)
{
    for (size_t i = 0; i < n->len; i++)
        free(n->items[i]);
    free(n->items);
    n->items = NULL;
    n->len = n->cap = 0;
}
#define _cleanup_names_ __attribute__((cleanup(ws_names_free)))

/* Open a DIR on a duplicate of dirfd, rewound: the duplicate shares the
 * file offset, which an earlier scan of the same descriptor has moved. */
static DIR *ws_opendir_dup(int dirfd)
{
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d) {
        int saved = errno;
        close(fd);
        errno = saved;
        return NULL;
    }
    rewinddir(d);
    return d;
}

/* Max-heap on strcmp: items[0] is the largest name kept. */
static void heap_sift_down(char **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && strcmp(h[l], h[m]) > 0)
            m = l;
        if (r < n && strcmp(h[r], h[m]) > 0)
            m = r;
        if (m == i)
            return;
        char *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_sift_up(char **h, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (strcmp(h[i], h[parent]) <= 0)
            return;
        char *t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

/* The `keep` smallest names of the directory (but "." and "..") in
 * *out, unsorted, and how many names it has in all in *total: one pass,
 * memory for `keep` names whatever the directory holds (a page of a
 * 300,000-entry directory must not read all of it into memory). 0 or an
 * errno value. */
static int ws_read_smallest(int dirfd, size_t keep, struct ws_names *out, uint64_t *total)
{
    *total = 0;
    _cleanup_closedir_ DIR *d = ws_opendir_dup(dirfd);
    if (!d)
        return errno;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de)
            return errno;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        (*total)++;
        if (keep == 0)
            continue;
        if (out->len == keep) {
            /* Full: a name only gets in by replacing the largest kept. */
            if (strcmp(de->d_name, out->items[0]) >= 0)
                continue;
            char *name = strdup(de->d_name);
            if (!name)
                return ENOMEM;
            free(out->items[0]);
            out->items[0] = name;
            heap_sift_down(out->items, out->len, 0);
            continue;
        }
        if (out->len == out->cap) {
            size_t ncap = out->cap ? out->cap * 2 : 64;
            if (ncap > keep)
                ncap = keep;
            char **items = realloc(out->items, ncap * sizeof(*items));
            if (!items)
                return ENOMEM;
            out->items = items;
            out->cap = ncap;
        }
        if (!(out->items[out->len] = strdup(de->d_name)))
            return ENOMEM;
        out->len++;
        heap_sift_up(out->items, out->len - 1);
    }
}

static int ws_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void sl_ws_listing_free(struct sl_ws_listing *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->entries[i].name);
        free(l->entries[i].path);
    }
    free(l->entries);
    l->entries = NULL;
    l->n = 0;
    l->total = 0;
    l->has_more = false;
}
static inline void ws_listing_freep(struct sl_ws_listing **l)
{
    sl_ws_listing_free(*l);
}

int ws_dir_open(const struct sl_ws_target *t, const char *path, size_t path_len,
                char **canonical, struct sl_error *err)
{
    _cleanup_wpath_ struct sl_wpath p = {0};
    if (sl_wpath_parse(path, path_len, &p, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &p, err);
    if (ws < 0)
        return -1;
    int dir = ws_walk(t, ws, p.comps, p.n, false, false);
    if (dir < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_NOT_DIR, "watch", &p);
    if (!(*canonical = strdup(p.canonical))) {
        close(dir);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    return dir;
}

int ws_file_list(const struct sl_ws_target *t, const char *path, size_t path_len, int64_t limit,
                 int64_t offset, struct sl_ws_listing *out, struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    _cleanup_wpath_ struct sl_wpath p = {0};
    if (sl_wpath_parse(path, path_len, &p, err) < 0)
        return -1;

    _cleanup_locks_ struct ws_locks locks = WS_LOCKS_INIT;
    if (ws_lock(t, &p, NULL, false, &locks, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &p, err);
    if (ws < 0)
        return -1;
    _cleanup_close_ int dir = ws_walk(t, ws, p.comps, p.n, false, false);
    if (dir < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_NOT_DIR, "list", &p);

    uint64_t first = offset < 0 ? 0 : (uint64_t)offset;
    uint64_t count = limit < 0 ? 0 : (uint64_t)limit;
    /* Only the first offset + limit names in order are ever needed. */
    uint64_t want = first + count < first ? UINT64_MAX : first + count;
    _cleanup_names_ struct ws_names names = {0};
    uint64_t total = 0;
    int rc = ws_read_smallest(dir, want > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)want, &names,
                              &total);
    if (rc)
        return ws_fail_os(err, rc, "list", &p);
    if (names.len > 1)
        qsort(names.items, names.len, sizeof(*names.items), ws_name_cmp);

    uint64_t end = first >= total ? first : (count > total - first ? total : first + count);
    out->total = (int64_t)total;
    out->has_more = first < total && count < total - first;
    if (first >= total)
        return 0;

    /* Freed on any early return below; stolen on success. */
    struct sl_ws_listing *guard __attribute__((cleanup(ws_listing_freep))) = out;
    out->entries = calloc(end - first, sizeof(*out->entries));
    if (!out->entries)
        return ws_fail_os(err, ENOMEM, "list", &p);
    for (uint64_t i = first; i < end && i < names.len; i++) {
        const char *name = names.items[i];
        struct stat st;
        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue; /* vanished since the scan */
            return ws_fail_os(err, errno, "list", &p);
        }
        struct sl_ws_entry *e = &out->entries[out->n];
        e->name = strdup(name);
        if (!e->name || asprintf(&e->path, "%s/%s", p.canonical, name) < 0) {
            e->path = NULL;
            out->n++;
            return ws_fail_os(err, ENOMEM, "list", &p);
        }
        out->n++;
        e->type = S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symlink" : "file";
        e->size_bytes = (int64_t)st.st_size;
        e->modified_at = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9;
        e->mode = (int)(st.st_mode & 07777);
    }
    guard = NULL;
    return 0;
}

/* ---- mkdir ---- */

int ws_file_mkdir(const struct sl_ws_target *t, const char *path, size_t path_len, bool parents,
                  struct sl_error *err)
{
    _cleanup_wpath_ struct sl_wpath p = {0};
    if (sl_wpath_parse(path, path_len, &p, err) < 0)
        return -1;
    if (p.n == 0)
        return ws_refuse(err, MSG_ROOT_MKDIR);

    _cleanup_locks_ struct ws_locks locks = WS_LOCKS_INIT;
    if (ws_lock(t, &p, NULL, true, &locks, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &p, err);
    if (ws < 0)
        return -1;
    _cleanup_close_ int dir = ws_walk(t, ws, p.comps, p.n - 1, parents, true);
    if (dir < 0)
        return ws_walk_failed(err, errno, parents ? MSG_NO_SUCH : MSG_NO_PARENT, MSG_NOT_DIR,
                              "mkdir", &p);

    const char *name = p.comps[p.n - 1];
    if (mkdirat(dir, name, 0700) < 0) {
        if (errno != EEXIST)
            return ws_fail_os(err, errno, "mkdir", &p);
        if (!parents)
            return ws_refuse(err, MSG_EXISTS);
    }
    _cleanup_close_ int fd =
        sl_openat2(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, WS_RESOLVE);
    if (fd < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_NOT_DIR, "mkdir", &p);
    if (ws_fix_dir(fd, t->uid) < 0)
        return ws_fail_os(err, errno, "mkdir", &p);
    return 0;
}

/* ---- delete and tree removal ---- */

struct rm_tree {
    int top_fd;     /* the directory being removed */
    uint64_t mount; /* its mount (or device): never descend into another */
    bool relocated; /* a too-deep directory was moved up during this pass */
};

/* Mount id where the kernel reports it (a bind mount of the same
 * filesystem shares st_dev), else the device. 0 or an errno value. */
static int rm_mount_of(int fd, uint64_t *id)
{
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) == 0 &&
        (stx.stx_mask & STATX_MNT_ID)) {
        *id = stx.stx_mnt_id;
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return errno;
    *id = (uint64_t)st.st_dev;
    return 0;
}

static int rm_children(struct rm_tree *rt, int dfd, unsigned depth);

/* Remove one entry of dfd; 0 or an errno value. A vanished entry is fine. */
static int rm_entry(struct rm_tree *rt, int dfd, const char *name, unsigned char type,
                    unsigned depth)
{
    if (type != DT_DIR) {
        /* unlink(2) never follows a symlink; on a directory it says EISDIR. */
        if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
            return 0;
        if (errno != EISDIR)
            return errno;
    }
    if (depth >= RM_MAX_DEPTH) {
        /* Keep the recursion and the number of open directories bounded
         * however deep the tree: move this subtree up to the top directory,
         * whose next pass removes it. rename(2) follows nothing. */
        char hex[33], tmp[48];
        if (sl_random_hex(hex, 16) < 0)
            return errno;
        snprintf(tmp, sizeof(tmp), ".sandbox-rm-%s", hex);
        if (renameat(dfd, name, rt->top_fd, tmp) < 0)
            return errno == ENOENT ? 0 : errno;
        rt->relocated = true;
        return 0;
    }
    _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        if (errno == ENOTDIR || errno == ELOOP) {
            /* Swapped for a link or file since readdir: remove that instead. */
            if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
                return 0;
        }
        return errno;
    }
    uint64_t mount;
    int rc = rm_mount_of(fd, &mount);
    if (rc)
        return rc;
    if (mount != rt->mount)
        return EBUSY; /* a mount point: do not empty another filesystem */
    rc = rm_children(rt, fd, depth + 1);
    if (rc)
        return rc;
    if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return errno;
    return 0;
}

/* Empty the directory dfd; 0 or an errno value. */
static int rm_children(struct rm_tree *rt, int dfd, unsigned depth)
{
    _cleanup_closedir_ DIR *d = ws_opendir_dup(dfd);
    if (!d)
        return errno;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de)
            return errno;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int rc = rm_entry(rt, dfd, de->d_name, de->d_type, depth);
        if (rc)
            return rc;
    }
}

static int rm_failed(struct sl_error *err, int errnum, const char *name)
{
    bool busy = errnum == ENOTEMPTY || errnum == EEXIST || errnum == EBUSY;
    sl_error_set(err, SL_E_INVALID_ARGUMENT, errnum, "%s", busy ? MSG_NOT_EMPTY : MSG_OS);
    if (err)
        snprintf(err->detail, sizeof(err->detail), "remove tree %s: %s", name, strerror(errnum));
    errno = errnum;
    return -1;
}

int ws_remove_tree_at(int dirfd, const char *name, struct sl_error *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : rm_failed(err, errno, name);
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
            return rm_failed(err, errno, name);
        return 0;
    }
    _cleanup_close_ int top = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0) {
        if (errno == ENOENT)
            return 0;
        return rm_failed(err, errno, name);
    }
    uint64_t parent_mount;
    struct rm_tree rt = {.top_fd = top};
    int rc = rm_mount_of(dirfd, &parent_mount);
    if (!rc)
        rc = rm_mount_of(top, &rt.mount);
    if (!rc && rt.mount != parent_mount)
        rc = EBUSY;
    for (unsigned pass = 0, idle = 0; !rc; pass++) {
        rt.relocated = false;
        rc = rm_children(&rt, top, 1);
        if (rc)
            break;
        if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
            return 0;
        rc = errno;
        if (rc != ENOTEMPTY && rc != EEXIST)
            break;
        /* Moved-up subtrees may not have been seen by this scan; a tree
         * refilled concurrently gets a couple more passes, then fails. */
        idle = rt.relocated ? 0 : idle + 1;
        if (pass + 1 >= RM_MAX_PASSES || idle > RM_MAX_IDLE_PASSES)
            break;
        rc = 0;
    }
    return rm_failed(err, rc, name);
}

int ws_file_delete(const struct sl_ws_target *t, const char *path, size_t path_len, bool recursive,
                   struct sl_error *err)
{
    _cleanup_wpath_ struct sl_wpath p = {0};
    if (sl_wpath_parse(path, path_len, &p, err) < 0)
        return -1;
    if (p.n == 0)
        return ws_refuse(err, MSG_ROOT_DELETE);

    _cleanup_locks_ struct ws_locks locks = WS_LOCKS_INIT;
    if (ws_lock(t, &p, NULL, true, &locks, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &p, err);
    if (ws < 0)
        return -1;
    _cleanup_close_ int dir = ws_walk(t, ws, p.comps, p.n - 1, false, false);
    if (dir < 0)
        return ws_walk_failed(err, errno, MSG_NO_SUCH, MSG_SYMLINK, "delete", &p);

    const char *name = p.comps[p.n - 1];
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return ws_refuse(err, MSG_NO_SUCH);
        return ws_fail_os(err, errno, "delete", &p);
    }
    if (!S_ISDIR(st.st_mode)) {
        /* A symlink is removed itself, never followed. */
        if (unlinkat(dir, name, 0) == 0)
            return 0;
        if (errno == ENOENT)
            return ws_refuse(err, MSG_NO_SUCH);
        return ws_fail_os(err, errno, "delete", &p);
    }
    if (recursive) {
        if (ws_remove_tree_at(dir, name, err) < 0)
            return sl_error_wrap(err, "delete %s", p.canonical);
        return 0;
    }
    if (unlinkat(dir, name, AT_REMOVEDIR) == 0)
        return 0;
    switch (errno) {
    case ENOENT:
        return ws_refuse(err, MSG_NO_SUCH);
    case ENOTEMPTY:
    case EEXIST:
    case EBUSY:
        return ws_refuse(err, MSG_NOT_EMPTY);
    default:
        return ws_fail_os(err, errno, "delete", &p);
    }
}

/* ---- move ---- */

/* One normalised path is the other or lies inside it. */
static bool ws_overlap(const struct sl_wpath *a, const struct sl_wpath *b)
{
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t i = 0; i < n; i++)
        if (strcmp(a->comps[i], b->comps[i]) != 0)
            return false;
    return true;
}

int ws_file_move(const struct sl_ws_target *t, const char *src, size_t src_len, const char *dst,
                 size_t dst_len, bool overwrite, struct sl_error *err)
{
    _cleanup_wpath_ struct sl_wpath s = {0};
    _cleanup_wpath_ struct sl_wpath d = {0};
    if (sl_wpath_parse(src, src_len, &s, err) < 0 || sl_wpath_parse(dst, dst_len, &d, err) < 0)
        return -1;
    if (strcmp(s.canonical, d.canonical) == 0)
        return 0; /* §5.2: a no-op, even for a missing source */
    if (s.n == 0 || d.n == 0)
        return ws_refuse(err, MSG_ROOT_MOVE);

    _cleanup_locks_ struct ws_locks locks = WS_LOCKS_INIT;
    if (ws_lock(t, &s, &d, true, &locks, err) < 0)
        return -1;
    _cleanup_close_ int ws = ws_open_workspace(t, &s, err);
    if (ws < 0)
        return -1;
    _cleanup_close_ int sdir = ws_walk(t, ws, s.comps, s.n - 1, false, false);
    if (sdir < 0)
        return ws_walk_failed(err, errno, MSG_NO_SRC_PARENT, MSG_SYMLINK, "move", &s);
    _cleanup_close_ int ddir = ws_walk(t, ws, d.comps, d.n - 1, false, true);
    if (ddir < 0)
        return ws_walk_failed(err, errno, MSG_NO_DST_PARENT, MSG_SYMLINK, "move", &d);

    const char *sname = s.comps[s.n - 1], *dname = d.comps[d.n - 1];
    struct stat st;
    if (fstatat(sdir, sname, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return ws_refuse(err, MSG_NO_SRC);
        return ws_fail_os(err, errno, "move", &s);
    }
    bool dst_exists = true;
    if (fstatat(ddir, dname, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT)
            return ws_fail_os(err, errno, "move", &d);
        dst_exists = false;
    }
    if (dst_exists && !overwrite)
        return ws_refuse(err, MSG_DST_EXISTS);
    if (dst_exists && S_ISDIR(st.st_mode)) {
        /* Removing the destination would remove the source with it, or
         * the directory the source is being moved into. */
        if (ws_overlap(&s, &d))
            return ws_refuse(err, MSG_OVERLAP);
        if (ws_remove_tree_at(ddir, dname, err) < 0)
            return sl_error_wrap(err, "move onto %s", d.canonical);
    }

    int rc;
    if (overwrite) {
        rc = renameat(sdir, sname, ddir, dname);
    } else {
        /* NOREPLACE closes the window since the check above. */
        rc = renameat2(sdir, sname, ddir, dname, RENAME_NOREPLACE);
        if (rc < 0 && errno == EINVAL && fstatat(ddir, dname, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
            errno == ENOENT)
            rc = renameat(sdir, sname, ddir, dname); /* filesystem without NOREPLACE */
    }
    if (rc == 0)
        return 0;
    switch (errno) {
    case ENOENT:
        return ws_refuse(err, MSG_NO_SRC);
    case EEXIST:
        if (!overwrite)
            return ws_refuse(err, MSG_DST_EXISTS);
        return ws_refuse(err, MSG_NOT_EMPTY);
    case ENOTEMPTY:
    case EBUSY:
        return ws_refuse(err, MSG_NOT_EMPTY);
    default:
        return ws_fail_os(err, errno, "move", &s);
    }
}
