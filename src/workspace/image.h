/* The workspace image (SANDBOX_WORKSPACE_IMAGE_BYTES, ours): one btrfs
 * filesystem in a preallocated file, on a loop device, that sandloomd
 * mounts at the workspace root (its subvolume "sandboxes") and at the
 * template root (its subvolume "templates") before anything else uses
 * them.
 *
 * Why: with the roots inside the host's root filesystem, a sandbox reads
 * the host path of its directories in /proc/self/mountinfo (a bind mount
 * shows its path within its filesystem, and a mount namespace cannot
 * rewrite that), and the disk quota falls back to accounting. On the
 * image both roots are filesystems of their own, so a sandbox reads
 * "/sandboxes/<id>/workspace", and the quota is a btrfs qgroup limit
 * (workspace/quota.h) on any host with loop devices and btrfs.
 *
 * Why preallocated: a sparse image whose host filesystem fills up fails
 * btrfs's own writes, which turns the whole filesystem read-only for every
 * sandbox. The image reserves its size up front (fallocate; NOCOW on a
 * btrfs host), and neither mkfs nor the mount discards, which would punch
 * the reservation back out.
 *
 * Lifetime: the mounts are in the daemon's mount namespace (the host's,
 * so an operator sees the files at the usual paths). A clean stop
 * unmounts both and the loop device detaches itself (autoclear). After a
 * kill -9 they stay mounted; the next start adopts them when they are this
 * image's, and refuses a root that is a mount of anything else. */
#ifndef SL_WORKSPACE_IMAGE_H
#define SL_WORKSPACE_IMAGE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* The smallest image accepted: btrfs needs ~114 MiB for its own metadata
 * in mixed mode; a quarter GiB leaves room for a few sandboxes. */
#define WS_IMAGE_MIN_BYTES (256LL << 20)

struct ws_image {
    bool mounted;  /* the roots are this image's: unmount at close */
    bool created;  /* this start made the image file */
    bool adopted;  /* the mounts were already there (a previous run) */
    char loop[32]; /* /dev/loopN, for the log */
    char workspace_root[PATH_MAX];
    char template_root[PATH_MAX];
};

/* Create (first start), attach and mount the image at `path` of `bytes`
 * at both roots, or adopt the mounts a previous run left. A larger `bytes`
 * than the image has grows it (file and filesystem); a smaller one keeps
 * the image's size (a filesystem is not shrunk under its data) and says
 * so in *note. 0, or -1 with err (SL_E_CONFIG: the host cannot do it). */
int ws_image_open(const char *path, int64_t bytes, const char *workspace_root,
                  const char *template_root, struct ws_image *out, char *note, size_t note_size,
                  struct sl_error *err);

/* Whether this host has what ws_image_open needs (mkfs.btrfs, loop
 * devices), for the doctor; else why not. Changes nothing. */
bool ws_image_usable(char *why, size_t size);

/* Unmount both roots (lazily: a file still open elsewhere keeps the
 * filesystem until it closes); the loop device then detaches itself. */
void ws_image_close(struct ws_image *img);

/* The source of the topmost mount at `mountpoint` in a mountinfo text
 * (proc(5) format, octal escapes undone), into src, and (root not NULL)
 * the part of its filesystem mounted there. 1 found, 0 none, -1 malformed
 * or too long. Pure: the unit tests drive it. */
int ws_mountinfo_source(const char *mountinfo, const char *mountpoint, char *src, size_t src_size,
                        char *root, size_t root_size);

#endif
