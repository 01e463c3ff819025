/* Copying one sandbox's tree into another's (fork, service/fork.c). */
#ifndef SL_WORKSPACE_CLONE_H
#define SL_WORKSPACE_CLONE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct ws_clone_stats {
    int64_t bytes;   /* of regular files, shared or copied */
    bool reflinked;  /* the filesystem shared at least one file's blocks */
};

/* Everything under src_dir recreated under dst_dir (an empty directory),
 * owned by uid. -1 with err (SANDBOX_DISK_FULL when the files would exceed
 * `budget` bytes, or the disk is full); what was made stays for the caller
 * to remove. */
int ws_tree_clone(int src_dir, int dst_dir, uid_t uid, int64_t budget,
                  struct ws_clone_stats *stats, struct sl_error *err);

/* Bytes of the regular files under dir (what a copy of it takes). */
int64_t ws_tree_bytes(int dir);

#endif
