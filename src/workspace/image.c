#include "workspace/image.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "workspace/layout.h"

extern char **environ;

#define SUBVOL_SANDBOXES "sandboxes"
#define SUBVOL_TEMPLATES "templates"
/* No setuid programs and no device nodes from a sandbox's files; the
 * filesystem never discards (that would punch holes in the reservation). */
#define IMAGE_MOUNT_FLAGS (MS_NOSUID | MS_NODEV)

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static int unescape_field(const char *in, size_t len, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '\\' && i + 3 < len && in[i + 1] >= '0' && in[i + 1] <= '3' && in[i + 2] >= '0' &&
            in[i + 2] <= '7' && in[i + 3] >= '0' && in[i + 3] <= '7') {
            c = (char)((in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 + (in[i + 3] - '0'));
            i += 3;
        }
        if (o + 1 >= size)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

/* The n-th space-separated field of a line (0-based): start and length. */
static const char *field(const char *line, const char *end, int n, size_t *len)
{
    const char *p = line;
    for (int i = 0;; i++) {
        while (p < end && *p == ' ')
            p++;
        const char *start = p;
        while (p < end && *p != ' ')
            p++;
        if (start == p)
            return NULL;
        if (i == n) {
            *len = (size_t)(p - start);
            return start;
        }
    }
}

int ws_mountinfo_source(const char *mountinfo, const char *mountpoint, char *src, size_t src_size,
                        char *root, size_t root_size)
{
    int found = 0;
    for (const char *line = mountinfo; *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        size_t len = 0;
        const char *mp = field(line, end, 4, &len);
        char path[PATH_MAX];
        if (mp && unescape_field(mp, len, path, sizeof(path)) == 0 &&
            strcmp(path, mountpoint) == 0) {
            /* After the optional fields, "-", then type and source. */
            const char *sep = strstr(mp, " - ");
            if (!sep || sep > end)
                return -1;
            const char *s = field(sep + 3, end, 1, &len);
            if (!s || unescape_field(s, len, src, src_size) < 0)
                return -1;
            const char *r = root ? field(line, end, 3, &len) : NULL;
            if (root && (!r || unescape_field(r, len, root, root_size) < 0))
                return -1;
            found = 1; /* keep going: a later line is mounted on top */
        }
        line = *end ? end + 1 : end;
    }
    return found;
}

static int read_text(const char *path, char **out)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t cap = 0;
    ssize_t n = getdelim(out, &cap, '\0', f);
    int saved = errno;
    fclose(f);
    errno = saved;
    return n < 0 ? -1 : 0;
}

/* What is mounted at `mountpoint`: 1 this image's subvolume `subvol`
 * (its name in loop), 2 this image but another part of it (the top, left
 * by a start killed half-way), 0 nothing, -1 something else (its source
 * in loop). */
static int mounted_from(const char *mountpoint, const char *image, const char *subvol, char *loop,
                        size_t size)
{
    _cleanup_free_ char *info = NULL;
    if (read_text("/proc/self/mountinfo", &info) < 0)
        return 0;
    char src[PATH_MAX], root[PATH_MAX];
    int r = ws_mountinfo_source(info, mountpoint, src, sizeof(src), root, sizeof(root));
    if (r <= 0)
        return 0;
    snprintf(loop, size, "%s", src);
    if (strncmp(src, "/dev/loop", 9) != 0 || strlen(src) > 24)
        return -1;
    char sys[128];
    snprintf(sys, sizeof(sys), "/sys/block/%.24s/loop/backing_file", src + 5);
    _cleanup_free_ char *backing = NULL;
    if (read_text(sys, &backing) < 0)
        return -1;
    backing[strcspn(backing, "\n")] = '\0';
    if (strcmp(backing, image) != 0)
        return -1;
    return root[0] == '/' && strcmp(root + 1, subvol) == 0 ? 1 : 2;
}

/* mkfs.btrfs from btrfs-progs, where Debian puts it (the daemon's PATH
 * may lack the sbin directories). */
static bool find_mkfs(char *prog, size_t size)
{
    static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(prog, size, "%s/mkfs.btrfs", dirs[i]);
        if (access(prog, X_OK) == 0)
            return true;
    }
    return false;
}

#define NO_MKFS "mkfs.btrfs is not installed (Debian package btrfs-progs)"

/* No discard (-K keeps the reservation). Its error output goes to the
 * daemon's stderr, where the operator reads it. */
static int run_mkfs(const char *path, struct sl_error *err)
{
    char prog[64];
    if (!find_mkfs(prog, sizeof(prog)))
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_WORKSPACE_IMAGE_BYTES: " NO_MKFS);
    char *const argv[] = {prog, "-q", "-K", "-L", "sandloom", (char *)path, NULL};
    /* Its notices on stdout say nothing an operator needs; stderr stays. */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return sl_error_errno(err, SL_E_CONFIG, "cannot run %s", prog);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return sl_error_errno(err, SL_E_CONFIG, "cannot wait for %s", prog);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return sl_error_set(err, SL_E_CONFIG, 0, "%s failed on the workspace image (status %d)",
                            prog, status);
    return 0;
}

/* Reserve `bytes` for the file (growing it when it is smaller). */
static int reserve(int fd, int64_t bytes, const char *what, struct sl_error *err)
{
    struct statfs fs;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot inspect %s", what);
    /* On a btrfs host, copy-on-write would allocate anew on every write:
     * no reservation could hold. The flag only takes on an empty file. */
    if (st.st_size == 0 && fstatfs(fd, &fs) == 0 && (unsigned long)fs.f_type == BTRFS_SUPER_MAGIC) {
        int flags = 0;
        if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
            flags |= FS_NOCOW_FL;
            (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
        }
    }
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc != 0)
        return sl_error_set(err, SL_E_CONFIG, rc,
                            "SANDBOX_WORKSPACE_IMAGE_BYTES: cannot reserve %lld bytes for %s: %s",
                            (long long)bytes, what, strerror(rc));
    return 0;
}

/* A new image: made under a temporary name and renamed when complete, so
 * a crash half-way never leaves a file the next start would try to mount. */
static int create_image(const char *path, int64_t bytes, struct sl_error *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.new", path) >= (int)sizeof(tmp))
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_WORKSPACE_IMAGE_PATH: too long");
    (void)unlink(tmp);
    _cleanup_close_ int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot create the workspace image %s", tmp);
    if (reserve(fd, bytes, "the workspace image", err) < 0 || run_mkfs(tmp, err) < 0 ||
        fsync(fd) < 0 || rename(tmp, path) < 0) {
        if (!err || !err->code)
            sl_error_errno(err, SL_E_CONFIG, "cannot complete the workspace image");
        (void)unlink(tmp);
        return -1;
    }
    return 0;
}

/* A free loop device with the image attached, autoclear: it detaches when
 * its last user (the mounts, and the descriptor returned) goes. */
static int attach_loop(int image_fd, char *name, size_t size, struct sl_error *err)
{
    _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return sl_error_errno(err, SL_E_CONFIG,
                              "SANDBOX_WORKSPACE_IMAGE_BYTES: no loop devices "
                              "(/dev/loop-control)");
    /* Another process may take the same free device between the two
     * calls: then LOOP_CONFIGURE answers EBUSY and the next one is asked. */
    for (int attempt = 0; attempt < 32; attempt++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return sl_error_errno(err, SL_E_CONFIG, "no free loop device");
        snprintf(name, size, "/dev/loop%d", n);
        int fd = open(name, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return sl_error_errno(err, SL_E_CONFIG, "cannot open %s", name);
        struct loop_config lc = {.fd = (__u32)image_fd, .block_size = 4096};
        lc.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
        if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0)
            return fd;
        int saved = errno;
        /* Direct I/O needs the host filesystem's support (tmpfs has none). */
        if (saved == EINVAL) {
            lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
            if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0)
                return fd;
            saved = errno;
        }
        close(fd);
        if (saved != EBUSY) {
            errno = saved;
            return sl_error_errno(err, SL_E_CONFIG, "cannot attach the workspace image to %s",
                                  name);
        }
    }
    return sl_error_set(err, SL_E_CONFIG, EBUSY, "no loop device stayed free to attach");
}

static int make_subvolume(int dirfd, const char *name, struct sl_error *err)
{
    struct btrfs_ioctl_vol_args args = {.fd = 0};
    snprintf(args.name, sizeof(args.name), "%s", name);
    if (ioctl(dirfd, BTRFS_IOC_SUBVOL_CREATE, &args) < 0 && errno != EEXIST)
        return sl_error_errno(err, SL_E_CONFIG, "cannot create the subvolume %s in the image",
                              name);
    return 0;
}

/* With the top of the filesystem mounted for a moment on a directory of
 * its own beside the image (never on a root, where a crash would leave
 * it to be taken for a subvolume): the two subvolumes (first start), and
 * the filesystem grown to the device. */
static int prepare_top(const char *loop, const char *image, struct sl_error *err)
{
    char at[PATH_MAX];
    if (snprintf(at, sizeof(at), "%s.top-XXXXXX", image) >= (int)sizeof(at) || !mkdtemp(at))
        return sl_error_errno(err, SL_E_CONFIG, "cannot make a directory beside %s", image);
    int rc = 0;
    if (mount(loop, at, "btrfs", IMAGE_MOUNT_FLAGS, "nodiscard") < 0)
        rc = sl_error_errno(err, SL_E_CONFIG, "cannot mount the workspace image (%s)", loop);
    int fd = rc == 0 ? open(at, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (rc == 0 && fd < 0)
        rc = sl_error_errno(err, SL_E_CONFIG, "cannot open the workspace image's top");
    if (rc == 0)
        rc = make_subvolume(fd, SUBVOL_SANDBOXES, err);
    if (rc == 0)
        rc = make_subvolume(fd, SUBVOL_TEMPLATES, err);
    if (rc == 0) {
        /* "max": to the size of the device, so a grown file is used. */
        struct btrfs_ioctl_vol_args args = {.fd = 0};
        snprintf(args.name, sizeof(args.name), "max");
        if (ioctl(fd, BTRFS_IOC_RESIZE, &args) < 0)
            sl_warn("workspace image: cannot grow the filesystem to its file (%s)",
                    strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    /* Lazily: nothing else holds it, and the directory goes at once. */
    (void)umount2(at, MNT_DETACH);
    (void)rmdir(at);
    return rc;
}

static int mount_subvolume(const char *loop, const char *subvol, const char *at,
                           struct sl_error *err)
{
    char opts[64];
    snprintf(opts, sizeof(opts), "nodiscard,subvol=%s", subvol);
    if (mount(loop, at, "btrfs", IMAGE_MOUNT_FLAGS, opts) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot mount the image's %s at %s", subvol, at);
    return 0;
}

/* Whether a root holds nothing the image's mount would hide. The empty
 * directories the daemon itself makes at every start (.trash, .staging)
 * are removed on the way; anything else makes it false. */
static bool root_ready_for_mount(const char *root)
{
    DIR *d = opendir(root);
    if (!d)
        return false;
    bool empty = true;
    struct dirent *e;
    while (empty && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strcmp(e->d_name, ".trash") == 0 || strcmp(e->d_name, ".staging") == 0) {
            char sub[PATH_MAX];
            snprintf(sub, sizeof(sub), "%s/%s", root, e->d_name);
            empty = rmdir(sub) == 0; /* only when it is empty */
            continue;
        }
        empty = false;
    }
    closedir(d);
    return empty;
}

/* Both roots exist and their real paths (mountinfo names real paths). */
static int resolve_root(const char *root, const char *name, char *out, struct sl_error *err)
{
    if (ws_mkdir_p(root, 0755) < 0 || !realpath(root, out))
        return sl_error_errno(err, SL_E_CONFIG, "cannot create the %s %s", name, root);
    return 0;
}

int ws_image_open(const char *path, int64_t bytes, const char *workspace_root,
                  const char *template_root, struct ws_image *out, char *note, size_t note_size,
                  struct sl_error *err)
{
    *out = (struct ws_image){0};
    note[0] = '\0';
    if (resolve_root(workspace_root, "workspace root", out->workspace_root, err) < 0 ||
        resolve_root(template_root, "template root", out->template_root, err) < 0)
        return -1;
    char image[PATH_MAX];
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (!exists && errno != ENOENT)
        return sl_error_errno(err, SL_E_CONFIG, "cannot inspect the workspace image %s", path);
    if (exists ? !realpath(path, image) : snprintf(image, sizeof(image), "%s", path) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot resolve the workspace image %s", path);

    /* Mounts a previous run left (kill -9): adopted when they are ours. */
    char ws_src[PATH_MAX] = "", tpl_src[PATH_MAX] = "";
    int ws_m = mounted_from(out->workspace_root, image, SUBVOL_SANDBOXES, ws_src, sizeof(ws_src));
    int tpl_m = mounted_from(out->template_root, image, SUBVOL_TEMPLATES, tpl_src, sizeof(tpl_src));
    /* This image, but not the subvolume a root gets (its top, mounted by
     * an older build or a start killed half-way): taken down, then
     * mounted as it should be below. */
    if (ws_m == 2 && umount2(out->workspace_root, MNT_DETACH) == 0)
        ws_m = 0;
    if (tpl_m == 2 && umount2(out->template_root, MNT_DETACH) == 0)
        tpl_m = 0;
    if (ws_m < 0 || tpl_m < 0 || ws_m == 2 || tpl_m == 2)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_WORKSPACE_IMAGE_BYTES: %s is already a mount of %s, not of "
                            "the workspace image: unmount it or unset the image",
                            ws_m < 0 || ws_m == 2 ? out->workspace_root : out->template_root,
                            ws_m < 0 || ws_m == 2 ? ws_src : tpl_src);
    if (ws_m == 1 && tpl_m == 1) {
        out->mounted = out->adopted = true;
        snprintf(out->loop, sizeof(out->loop), "%s", ws_src);
        return 0;
    }

    /* Mounting over files would hide them from the service (a sandbox
     * recorded in the database would lose its directories): refuse. */
    const char *full = NULL;
    if (ws_m == 0 && !root_ready_for_mount(out->workspace_root))
        full = out->workspace_root;
    else if (tpl_m == 0 && !root_ready_for_mount(out->template_root))
        full = out->template_root;
    if (full)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_WORKSPACE_IMAGE_BYTES: %s is not empty, and the workspace "
                            "image mounted there would hide its files: move them elsewhere (or "
                            "into the image once it is mounted) or unset the image",
                            full);
    if (!exists) {
        if (create_image(path, bytes, err) < 0)
            return -1;
        out->created = true;
        if (!realpath(path, image))
            return sl_error_errno(err, SL_E_CONFIG, "cannot resolve the workspace image %s", path);
    }

    _cleanup_close_ int image_fd = open(image, O_RDWR | O_CLOEXEC);
    if (image_fd < 0 || fstat(image_fd, &st) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot open the workspace image %s", image);
    if (st.st_size < bytes) {
        if (ws_m == 1 || tpl_m == 1)
            snprintf(note, note_size,
                     "the image is still mounted from a previous run: it is grown at the next "
                     "start after a clean stop");
        else if (reserve(image_fd, bytes, "the workspace image", err) < 0)
            return -1;
    } else if (st.st_size > bytes) {
        snprintf(note, note_size,
                 "the image is %lld bytes, more than SANDBOX_WORKSPACE_IMAGE_BYTES: kept at its "
                 "size (a filesystem is not shrunk under its data)",
                 (long long)st.st_size);
    }

    _cleanup_close_ int loop_fd = -1;
    if (ws_m == 1 || tpl_m == 1) {
        /* Half of a previous run's pair: mount the other half from it. */
        snprintf(out->loop, sizeof(out->loop), "%s", ws_m == 1 ? ws_src : tpl_src);
    } else {
        loop_fd = attach_loop(image_fd, out->loop, sizeof(out->loop), err);
        if (loop_fd < 0 || prepare_top(out->loop, image, err) < 0)
            return -1;
    }
    if (tpl_m != 1 && mount_subvolume(out->loop, SUBVOL_TEMPLATES, out->template_root, err) < 0)
        return -1;
    if (ws_m != 1 && mount_subvolume(out->loop, SUBVOL_SANDBOXES, out->workspace_root, err) < 0) {
        if (tpl_m != 1)
            (void)umount2(out->template_root, MNT_DETACH);
        return -1;
    }
    out->mounted = true;
    out->adopted = ws_m == 1 || tpl_m == 1;
    return 0;
}

bool ws_image_usable(char *why, size_t size)
{
    char prog[64];
    if (!find_mkfs(prog, sizeof(prog))) {
        snprintf(why, size, NO_MKFS);
        return false;
    }
    if (access("/dev/loop-control", R_OK | W_OK) < 0) {
        snprintf(why, size, "no loop devices (/dev/loop-control: %s)", strerror(errno));
        return false;
    }
    why[0] = '\0';
    return true;
}

void ws_image_close(struct ws_image *img)
{
    if (!img->mounted)
        return;
    const char *roots[] = {img->workspace_root, img->template_root};
    for (size_t i = 0; i < 2; i++)
        if (umount2(roots[i], MNT_DETACH) < 0)
            sl_warn("workspace image: cannot unmount %s: %s", roots[i], strerror(errno));
    img->mounted = false;
}
