/* Per-sandbox disk quota (SANDBOX_WORKSPACE_QUOTA_BYTES and _INODES) for
 * a sandbox's whole tree: workspace, home, cache, envs.
 *
 * Where the filesystem can enforce it, it does: on btrfs each new sandbox
 * root is a subvolume with a qgroup limit on its bytes (a write past it
 * fails with EDQUOT, inside commands too). Where it cannot (ext4 and XFS
 * without project quotas, tmpfs, and inodes on btrfs), the service counts
 * usage in its maintenance cycle (ws_quota_usage) and refuses further
 * writes through the API; commands are not stopped there, and the probe
 * says so, for /healthz and the startup log.
 *
 * Chosen over a filesystem image per sandbox on a loop device: a subvolume
 * costs a few KiB and no mount, where an image costs a loop device, a
 * mount and a journal per live sandbox (thousands per host), and btrfs
 * gives reflink copies and snapshots for later work. The price: the
 * workspace root must be on btrfs for the quota to be enforced. */
#ifndef SL_WORKSPACE_QUOTA_H
#define SL_WORKSPACE_QUOTA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct ws_quota {
    int64_t bytes, inodes; /* 0 = no quota */
    bool qgroups;          /* btrfs qgroup limits are set on new roots */
    const char *mode;      /* "btrfs-qgroup", "accounting", "off" */
    char why[200];         /* what is not enforced by the filesystem, and why */
};

/* Decide how the quota is enforced under workspace_root. With `enable`,
 * btrfs quotas are switched on for the filesystem if they are off (the
 * service); without, they are only reported (the doctor changes nothing).
 * Never fails: out->why says what falls back to accounting. */
void ws_quota_probe(const char *workspace_root, int64_t bytes, int64_t inodes, bool enable,
                    struct ws_quota *out);

/* What btrfs qgroups enforce of the quota (bytes), and what falls back to
 * accounting (inodes): the probe's answer on btrfs, and the doctor's for
 * the workspace image before it is mounted. */
void ws_quota_btrfs(int64_t bytes, int64_t inodes, struct ws_quota *out);

/* Create the sandbox root `name` under parent_fd (mode 0700): a subvolume
 * with its byte limit when q->qgroups, else a directory. 0 created, 1 it
 * existed, -1 error (errno). */
int ws_quota_make_root(int parent_fd, const char *name, const struct ws_quota *q);

/* Whether `path` is the root of a mount. A sandbox sees, in
 * /proc/self/mountinfo, each of its bind mounts' path within its
 * filesystem: under a workspace root that is a filesystem of its own that
 * is "/<sandbox-id>/workspace"; under one inside the host's root
 * filesystem it is the host path, which shows the state layout. */
bool ws_is_mount_root(const char *path);

/* Bytes allocated and inodes used under dirfd (the sandbox root), counting
 * at most `max_inodes` entries (then *inodes = max_inodes + 1): bounded
 * whatever the sandbox made. 0 or -1 (errno). */
int ws_quota_usage(int dirfd, int64_t max_inodes, int64_t *bytes, int64_t *inodes);

#endif
