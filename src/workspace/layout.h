/* Sandbox directories on the host (spec RUNTIME.md §9–§10).
 *
 * <workspace_root>/<sandbox_id>/{workspace,home,cache,envs,logs} owned by the
 * sandbox uid, mode 0700; .exec-locks and .file-locks owned by the service.
 * Destroyed roots are renamed into <workspace_root>/.trash and purged by the
 * maintenance loop. */
#ifndef SL_WORKSPACE_LAYOUT_H
#define SL_WORKSPACE_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct sl_disk_status {
    bool available;
    int64_t total_bytes, used_bytes, free_bytes, used_percent;
};

/* mkdir -p: `path` and every missing directory above it, with `mode`.
 * 0, or -1 with errno. */
int ws_mkdir_p(const char *path, mode_t mode);

/* Create the workspace root (parents included) and .trash/.staging. */
int ws_root_prepare(const char *workspace_root, struct sl_error *err);

/* Refuse ids that are reserved or would leave the root (400 messages of the
 * reference: "sandbox id uses a reserved name" / "sandbox id escapes the
 * workspace root"). */
int ws_sandbox_id_check(const char *sandbox_id, struct sl_error *err);

/* Create the sandbox root and its subdirectories, or validate an existing
 * one (each a real directory owned by uid, then chmod 0700). A new root is
 * refused with SANDBOX_WORKER_DISK_PRESSURE when !disk_available. */
struct ws_quota;
int ws_sandbox_create(const char *workspace_root, const char *sandbox_id, uid_t uid,
                      bool disk_available, const struct ws_quota *quota,
                      struct sl_error *err);

/* A warm sandbox's root (service/warm.c): made as a sandbox's, under a
 * service-owned name starting with WS_WARM_PREFIX; ws_warm_claim renames
 * it to its sandbox's id when a create takes it (never over an existing
 * directory). 0, or -1 with err. */
#define WS_WARM_PREFIX ".warm-"
int ws_warm_create(const char *workspace_root, const char *name, uid_t uid, bool disk_available,
                   const struct ws_quota *quota, struct sl_error *err);
int ws_warm_claim(const char *workspace_root, const char *name, const char *sandbox_id,
                  struct sl_error *err);

/* O_PATH|O_DIRECTORY descriptor of the sandbox root (never through a symlink). */
int ws_sandbox_open(const char *workspace_root, const char *sandbox_id, struct sl_error *err);

/* Move the sandbox root into .trash/<id>-<32hex> (delete in place if the
 * rename fails). Absent root is not an error. */
int ws_sandbox_trash(const char *workspace_root, const char *sandbox_id, struct sl_error *err);

/* Delete everything under .trash. Returns entries removed. */
int ws_trash_purge(const char *workspace_root);

/* Disk status of the workspace root (or its parent if missing). */
void ws_disk_status(const char *workspace_root, int64_t min_free_bytes, int64_t watermark_percent,
                    struct sl_disk_status *out);

#endif
