/* File watching (ours): GET /api/v1/sandboxes/{id}/files/watch?path=…
 * [&recursive=true] answers Server-Sent Events of what changes under a
 * workspace directory, as inotify reports it:
 *
 *   id: <n>                 (a sequence number of this watch)
 *   event: fs
 *   data: {"type": "create"|"modify"|"delete"|"move", "path": "/workspace/…",
 *          "kind": "file"|"directory", "from": "/workspace/…" (move only)}
 *
 *   event: overflow
 *   data: {"dropped": N}    (events this watch could not keep: a burst
 *                            past SL_WATCH_QUEUE, or the kernel's queue)
 *
 *   event: end
 *   data: {"reason": "deleted"}  (the directory watched is gone or moved)
 *
 * and a ": keepalive" comment after SANDBOX_STREAM_KEEPALIVE_SECONDS of
 * silence. A move within the tree is one event; out of it a delete, into
 * it a create. Repeated writes to one file coalesce while queued. A
 * recursive watch follows new subdirectories, up to SL_WATCH_MAX_DIRS.
 * Paths follow the file API's rules; no symlink is ever followed (every
 * directory is opened beneath the watch's root without resolving links).
 *
 * One thread (epoll over every watch's inotify descriptor) serves all
 * watches; a watch with nothing to send is a suspended connection.
 * Bounded by SANDBOX_MAX_WATCHES_PER_SANDBOX and SANDBOX_MAX_WATCHES:
 * past either, 429 SANDBOX_WATCH_LIMIT. */
#ifndef SL_API_FS_WATCH_H
#define SL_API_FS_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "api/router.h"
#include "common/error.h"
#include "common/util.h"

#define SL_WATCH_QUEUE 1024
#define SL_WATCH_MAX_DIRS 1024

struct sl_config;

int sl_fs_watches_start(const struct sl_config *cfg, struct sl_error *err);
void sl_fs_watches_stop(void);

/* A watch of the directory `canonical` ("/workspace/…", checked by the
 * caller) of the sandbox whose root is rootfd (taken; every directory is
 * opened beneath it). NULL with err past a bound, or with more than
 * SL_WATCH_MAX_DIRS directories to watch. */
struct sl_body_source *sl_fs_watch_open(const char *sandbox_id, int rootfd, const char *canonical,
                                        bool recursive, struct sl_error *err);

/* Another protocol's framing of the same events (E2B's WatchDir, e2b/):
 * the watching, queue, bounds and keepalives are this module's, the bytes
 * the encoder's. Each appends to `out` (< 0: the event is dropped and
 * counted). begin (may be NULL) comes first; event gets the type
 * ("create", "modify", "delete", "move"), kind ("file", "directory"), the
 * path and, for a move, where from; end once, last. release frees ctx. */
struct sl_watch_encoder {
    int (*begin)(void *ctx, struct sl_buf *out);
    int (*event)(void *ctx, uint64_t seq, const char *type, const char *kind, const char *path,
                 const char *from, struct sl_buf *out);
    int (*overflow)(void *ctx, uint64_t dropped, struct sl_buf *out);
    int (*keepalive)(void *ctx, struct sl_buf *out);
    int (*end)(void *ctx, struct sl_buf *out);
    void (*release)(void *ctx);
    void *ctx;
};
/* As sl_fs_watch_open, framed by enc (copied; its ctx is the watch's from
 * now on, released even when this fails). */
struct sl_body_source *sl_fs_watch_open_encoded(const char *sandbox_id, int rootfd,
                                                const char *canonical, bool recursive,
                                                const struct sl_watch_encoder *enc,
                                                struct sl_error *err);

#endif
