#include "workspace/quota.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/cleanup.h"

static const char *fs_name(long type)
{
    switch ((unsigned long)type) {
    case EXT4_SUPER_MAGIC:
        return "ext4";
    case XFS_SUPER_MAGIC:
        return "xfs";
    case TMPFS_MAGIC:
        return "tmpfs";
    case BTRFS_SUPER_MAGIC:
        return "btrfs";
    case OVERLAYFS_SUPER_MAGIC:
        return "overlay";
    default:
        return "this filesystem";
    }
}

void ws_quota_probe(const char *workspace_root, int64_t bytes, int64_t inodes, bool enable,
                    struct ws_quota *out)
{
    *out = (struct ws_quota){.bytes = bytes, .inodes = inodes, .mode = "off"};
    if (bytes <= 0 && inodes <= 0)
        return;
    out->mode = "accounting";
    struct statfs fs;
    _cleanup_close_ int fd = open(workspace_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstatfs(fd, &fs) < 0) {
        snprintf(out->why, sizeof(out->why),
                 "the workspace root cannot be examined (%s): usage accounting only",
                 strerror(errno));
        return;
    }
    if ((unsigned long)fs.f_type != BTRFS_SUPER_MAGIC) {
        snprintf(out->why, sizeof(out->why),
                 "the workspace root is on %s, which has no per-directory quota this build "
                 "uses (btrfs qgroups): usage accounting only, writes through the API refused "
                 "past the quota",
                 fs_name((long)fs.f_type));
        return;
    }
    /* Quotas on for the filesystem (a no-op when they are already). */
    struct btrfs_ioctl_quota_ctl_args ctl = {.cmd = BTRFS_QUOTA_CTL_ENABLE};
    if (bytes > 0 && enable && ioctl(fd, BTRFS_IOC_QUOTA_CTL, &ctl) < 0) {
        snprintf(out->why, sizeof(out->why),
                 "btrfs quotas cannot be enabled on the workspace root (%s): usage "
                 "accounting only",
                 strerror(errno));
        return;
    }
    ws_quota_btrfs(bytes, inodes, out);
}

void ws_quota_btrfs(int64_t bytes, int64_t inodes, struct ws_quota *out)
{
    *out = (struct ws_quota){.bytes = bytes, .inodes = inodes, .mode = "off"};
    if (bytes <= 0 && inodes <= 0)
        return;
    out->mode = "accounting";
    if (bytes > 0) {
        out->qgroups = true;
        out->mode = "btrfs-qgroup";
    }
    if (inodes > 0)
        snprintf(out->why, sizeof(out->why),
                 "btrfs qgroups limit bytes, not inodes: the inode quota is enforced by usage "
                 "accounting (writes through the API refused past it)");
}

int ws_quota_make_root(int parent_fd, const char *name, const struct ws_quota *q)
{
    if (!q || !q->qgroups) {
        if (mkdirat(parent_fd, name, 0700) == 0)
            return 0;
        return errno == EEXIST ? 1 : -1;
    }
    struct btrfs_ioctl_vol_args args = {.fd = 0};
    if (strlen(name) >= sizeof(args.name)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(args.name, name, strlen(name) + 1);
    /* ioctls need a descriptor that is open for real, not an O_PATH one. */
    _cleanup_close_ int parent = openat(parent_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0)
        return -1;
    if (ioctl(parent, BTRFS_IOC_SUBVOL_CREATE, &args) < 0)
        return errno == EEXIST ? 1 : -1;
    _cleanup_close_ int fd =
        openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* qgroupid 0: the subvolume this descriptor is in. */
    struct btrfs_ioctl_qgroup_limit_args lim = {
        .qgroupid = 0,
        .lim = {.flags = BTRFS_QGROUP_LIMIT_MAX_RFER, .max_rfer = (__u64)q->bytes}};
    if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &lim) < 0) {
        int saved = errno;
        (void)unlinkat(parent_fd, name, AT_REMOVEDIR); /* an empty subvolume */
        errno = saved;
        return -1;
    }
    if (fchmod(fd, 0700) < 0)
        return -1;
    return 0;
}

/* Depth-first, through descriptors only, never following links. */
static int usage_walk(int dirfd, int depth, int64_t max_inodes, int64_t *bytes, int64_t *inodes)
{
    if (depth > 256)
        return 0;
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) && *inodes <= max_inodes) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        (*inodes)++;
        *bytes += (int64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                (void)usage_walk(sub, depth + 1, max_inodes, bytes, inodes);
                close(sub);
            }
        }
    }
    closedir(d);
    return 0;
}

bool ws_is_mount_root(const char *path)
{
    struct statx stx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) < 0)
        return false;
    return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
           (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

int ws_quota_usage(int dirfd, int64_t max_inodes, int64_t *bytes, int64_t *inodes)
{
    *bytes = 0;
    *inodes = 0;
    return usage_walk(dirfd, 0, max_inodes > 0 ? max_inodes : INT64_MAX - 1, bytes, inodes);
}
