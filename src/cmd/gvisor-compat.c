/* Preloaded into every command of a gVisor sandbox (LD_PRELOAD, set by
 * sandloom-init --gvisor-compat): the stat family without AT_NO_AUTOMOUNT.
 *
 * The Sentry of Debian's runsc (0.0~20221219) answers EINVAL to statx and
 * fstatat given AT_NO_AUTOMOUNT, and coreutils passes it on every stat, so
 * `ls -l` and `stat` fail. Since Linux 2.6.38 the stat family never
 * triggers an automount (it is the default, the flag a no-op), so clearing
 * the flag changes no answer. Statically linked programs (Go's) do not use
 * the flag. This file is built on its own, with nothing of the project. */
/* Both symbols are defined here: no redirection of one to the other. */
#undef _FILE_OFFSET_BITS
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}
