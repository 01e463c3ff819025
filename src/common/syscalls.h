/* Thin wrappers for syscalls that glibc 2.36 does not wrap (or wraps late).
 * Each is a direct syscall(2); callers handle errno as usual. */
#ifndef SL_COMMON_SYSCALLS_H
#define SL_COMMON_SYSCALLS_H

#include <linux/openat2.h>
#include <linux/sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline int sl_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode,
                             uint64_t resolve)
{
    struct open_how how = {.flags = flags, .mode = mode, .resolve = resolve};
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* Fork-like clone3: no new stack, returns 0 in the child. */
static inline pid_t sl_clone3(struct clone_args *args)
{
    return (pid_t)syscall(SYS_clone3, args, sizeof(*args));
}

static inline int sl_pidfd_send_signal(int pidfd, int sig)
{
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

static inline int sl_close_range(unsigned first, unsigned last, unsigned flags)
{
    return (int)syscall(SYS_close_range, first, last, flags);
}

static inline int sl_execveat(int fd, const char *path, char *const argv[], char *const envp[],
                              int flags)
{
    return (int)syscall(SYS_execveat, fd, path, argv, envp, flags);
}

static inline int sl_pivot_root(const char *new_root, const char *put_old)
{
    return (int)syscall(SYS_pivot_root, new_root, put_old);
}

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#define MOUNT_ATTR_NOEXEC 0x00000008
struct mount_attr {
    uint64_t attr_set;
    uint64_t attr_clr;
    uint64_t propagation;
    uint64_t userns_fd;
};
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

static inline int sl_mount_setattr(int dirfd, const char *path, unsigned flags, uint64_t set)
{
    struct mount_attr attr = {.attr_set = set};
    return (int)syscall(SYS_mount_setattr, dirfd, path, flags, &attr, sizeof(attr));
}

#endif
