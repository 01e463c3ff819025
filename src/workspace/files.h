/* Safe file operations of the File API (spec API.md §3.12 and §5).
 *
 * Every operation works from a descriptor of the sandbox root
 * (<workspace_root>/<sandbox_id>, opened O_PATH|O_DIRECTORY by the caller,
 * who keeps ownership) and resolves every path with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
 * from the `workspace` directory under it: no check-then-use races, no
 * symlink ever followed. Each call takes its locks itself (§5.3): the
 * sandbox's `.exec-locks/global.lock` shared and `.file-locks/path-<sha>.lock`
 * (shared for read/list, exclusive otherwise), non-blocking; contention
 * fails with SANDBOX_FILE_PATH_LOCKED. Refusals use code
 * SANDBOX_INVALID_ARGUMENT with the exact sentences of §5.4 as message.
 * Files and directories created are owned by `uid` (the sandbox's host uid,
 * gid = uid) with the modes of §5.2. */
#ifndef SL_WORKSPACE_FILES_H
#define SL_WORKSPACE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "common/util.h"

struct sl_ws_target {
    int root_fd;            /* <sandbox_root>, O_PATH|O_DIRECTORY; not owned */
    uid_t uid;              /* sandbox host uid (gid is the same number) */
    int64_t max_file_bytes; /* SANDBOX_MAX_FILE_API_BYTES */
    /* Called with the locks held, before the workspace is touched: the
     * re-check of §5.3 that the sandbox is still live at the caller's
     * generation (a release may have won the race since the caller looked).
     * NULL to skip; < 0 with err filled refuses. */
    int (*recheck)(void *ctx, struct sl_error *err);
    void *recheck_ctx;
};

/* A path normalised per §5.1. */
struct sl_wpath {
    char **comps;    /* components inside /workspace; n == 0 is the root */
    size_t n;
    char *canonical; /* "/workspace" or "/workspace/a/b" */
};
/* Normalise; refuses NUL (len != strlen) and ".." with
 * "file path may not contain .. or NUL". */
int sl_wpath_parse(const char *path, size_t len, struct sl_wpath *out, struct sl_error *err);
void sl_wpath_free(struct sl_wpath *p);

struct sl_ws_entry {
    char *name;
    char *path;        /* "/workspace/<dir comps>/<name>" */
    const char *type;  /* "file" | "directory" | "symlink" (static) */
    int64_t size_bytes;
    double modified_at;
    int mode;          /* st_mode & 07777 */
};
struct sl_ws_listing {
    struct sl_ws_entry *entries;
    size_t n;
    int64_t total;
    bool has_more;
};
void sl_ws_listing_free(struct sl_ws_listing *l);

int ws_file_write(const struct sl_ws_target *t, const char *path, size_t path_len,
                  const void *data, size_t len, struct sl_error *err);
/* On success out holds the content (caller frees out->data). */
int ws_file_read(const struct sl_ws_target *t, const char *path, size_t path_len,
                 struct sl_buf *out, struct sl_error *err);
/* A directory of the workspace opened for reading (a watch's root): the
 * same path rules and refusals as a listing, no lock held after. Its
 * canonical path in *canonical (malloc'd). */
int ws_dir_open(const struct sl_ws_target *t, const char *path, size_t path_len,
                char **canonical, struct sl_error *err);
int ws_file_list(const struct sl_ws_target *t, const char *path, size_t path_len, int64_t limit,
                 int64_t offset, struct sl_ws_listing *out, struct sl_error *err);
int ws_file_mkdir(const struct sl_ws_target *t, const char *path, size_t path_len, bool parents,
                  struct sl_error *err);
int ws_file_delete(const struct sl_ws_target *t, const char *path, size_t path_len,
                   bool recursive, struct sl_error *err);
int ws_file_move(const struct sl_ws_target *t, const char *src, size_t src_len, const char *dst,
                 size_t dst_len, bool overwrite, struct sl_error *err);

/* Locks shared with the execution path (§4.4). Returns a descriptor holding
 * the flock (close it to release), or -1 with errno EWOULDBLOCK on
 * contention (err code = `busy_code`) or another errno. */
int ws_lock_global(int root_fd, bool exclusive, bool blocking, const char *busy_code,
                   struct sl_error *err);
int ws_lock_scope(int root_fd, const char *exec_scope, const char *busy_code,
                  struct sl_error *err);
/* Per-path File API lock (§5.3): <root>/.file-locks/path-<sha256(lock_key)>.lock,
 * shared or exclusive, non-blocking; returns as ws_lock_global. */
int ws_lock_path(int root_fd, const char *lock_key, bool exclusive, const char *busy_code,
                 struct sl_error *err);
/* Release a per-path lock and, if no one else holds it, remove its file. */
void ws_unlock_path(int root_fd, const char *lock_key, int fd);

/* Remove a directory tree below dirfd (name is one component) without ever
 * following a symlink. */
int ws_remove_tree_at(int dirfd, const char *name, struct sl_error *err);

#endif
