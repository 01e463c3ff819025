/* The default seccomp policy: allow by default, refuse the kernel
 * interfaces a sandboxed agent has no business with and that widen the
 * kernel's attack surface for an unprivileged user. Each entry says why.
 * Refusals answer EPERM (ENOSYS for clone3, so libc falls back to clone,
 * whose flags we can inspect); a syscall from another ABI (i386, x32) kills
 * the process, since the filter only understands the native one. Sockets
 * are the exception to allow-by-default: only the families listed below. */
#include "runtime/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/cleanup.h"

/* Syscalls refused outright with EPERM. */
static const char *const DENIED[] = {
    /* kernel code and the machine itself */
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "iopl", "ioperm", "syslog", "lookup_dcookie", "uselib", "nfsservctl", "vhangup",
    /* the mount tree is built before exec and must stay as built */
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "chroot",
    /* namespaces: joining or making them is the runtime's job only */
    "setns",
    /* large, frequently exploited kernel surfaces */
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key",
    /* other processes' memory and state */
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    /* the clock is the host's */
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    /* file handles bypass path-based confinement (the shocker escape) */
    "open_by_handle_at", "name_to_handle_at",
};

static int deny(scmp_filter_ctx ctx, const char *name, uint32_t action, unsigned argc,
                const struct scmp_arg_cmp *args, struct sl_error *err)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* not on this architecture */
    int rc = seccomp_rule_add_array(ctx, action, nr, argc, args);
    if (rc < 0) {
        errno = -rc;
        return sl_error_errno(err, SL_E_RUNTIME, "seccomp rule for %s", name);
    }
    return 0;
}

/* Export the filter as classic BPF (through a memfd: libseccomp writes to a
 * descriptor). */
static int export_program(scmp_filter_ctx ctx, struct sl_seccomp_program *out,
                          struct sl_error *err)
{
    _cleanup_close_ int fd = memfd_create("sandloom-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "memfd for the seccomp program");
    int rc = seccomp_export_bpf(ctx, fd);
    if (rc < 0) {
        errno = -rc;
        return sl_error_errno(err, SL_E_RUNTIME, "export the seccomp program");
    }
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
        size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
        return sl_error_set(err, SL_E_RUNTIME, 0, "the seccomp program has an invalid size");
    struct sock_filter *filter = malloc((size_t)size);
    if (!filter)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    if (pread(fd, filter, (size_t)size, 0) != size) {
        free(filter);
        return sl_error_errno(err, SL_E_RUNTIME, "read the seccomp program");
    }
    out->filter = filter;
    out->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    return 0;
}

/* Address families a sandbox may open: local sockets, IPv4, IPv6, and
 * NETLINK_ROUTE (getaddrinfo, getifaddrs and `ip` read interfaces through
 * it). Everything else answers EAFNOSUPPORT, as on a kernel built without
 * it, so programs take their fallback: AF_VSOCK above all, which ignores
 * network namespaces and would let even an `isolated` sandbox talk to the
 * hypervisor; and the rarely used families whose code has carried most of
 * the kernel's socket exploits (AF_ALG, AF_PACKET, AF_KEY, AF_TIPC, AF_RDS,
 * AF_XDP, Bluetooth, CAN, ...). The other netlink protocols (netfilter,
 * audit, uevents, sock_diag, which lists the host's sockets in host mode)
 * are refused the same way. socketpair only makes sense for AF_UNIX. */
static const int SOCKET_FAMILIES_ALLOWED[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

static bool family_allowed(int family)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(SOCKET_FAMILIES_ALLOWED); i++)
        if (SOCKET_FAMILIES_ALLOWED[i] == family)
            return true;
    return false;
}

static int deny_socket_families(scmp_filter_ctx ctx, struct sl_error *err)
{
    const uint32_t refuse = SCMP_ACT_ERRNO(EAFNOSUPPORT);
    /* Every value above the largest allowed one, compared on all 64 bits of
     * the register (the kernel reads only the low 32: a value with high bits
     * set is above the bound and refused too). */
    int top = 0;
    for (size_t i = 0; i < SL_ARRAY_LEN(SOCKET_FAMILIES_ALLOWED); i++)
        top = SOCKET_FAMILIES_ALLOWED[i] > top ? SOCKET_FAMILIES_ALLOWED[i] : top;
    const struct scmp_arg_cmp above = SCMP_A0(SCMP_CMP_GT, (scmp_datum_t)top);
    if (deny(ctx, "socket", refuse, 1, &above, err) < 0)
        return -1;
    for (int family = 0; family < top; family++) {
        if (family_allowed(family))
            continue;
        const struct scmp_arg_cmp eq = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)family);
        if (deny(ctx, "socket", refuse, 1, &eq, err) < 0)
            return -1;
    }
    const struct scmp_arg_cmp netlink[] = {SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                                           SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE)};
    if (deny(ctx, "socket", SCMP_ACT_ERRNO(EPROTONOSUPPORT), 2, netlink, err) < 0)
        return -1;
    const struct scmp_arg_cmp not_unix = SCMP_A0(SCMP_CMP_NE, AF_UNIX);
    return deny(ctx, "socketpair", refuse, 1, &not_unix, err);
}

int sl_seccomp_build(struct sl_seccomp_program *out, struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return sl_error_set(err, SL_E_RUNTIME, 0, "seccomp_init failed");
    int rc = -1;
    /* Only the native ABI is understood; anything else (int 0x80, x32) is
     * killed rather than let through unfiltered. */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) < 0) {
        sl_error_set(err, SL_E_RUNTIME, 0, "seccomp: cannot set the bad-arch action");
        goto out;
    }
    for (size_t i = 0; i < SL_ARRAY_LEN(DENIED); i++)
        if (deny(ctx, DENIED[i], SCMP_ACT_ERRNO(EPERM), 0, NULL, err) < 0)
            goto out;

    /* New user namespaces: refused by flag (max_user_namespaces is 0 too;
     * two locks on the door nested-userns escapes have used). */
    const struct scmp_arg_cmp newuser = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
    if (deny(ctx, "clone", SCMP_ACT_ERRNO(EPERM), 1, &newuser, err) < 0 ||
        deny(ctx, "unshare", SCMP_ACT_ERRNO(EPERM), 1, &newuser, err) < 0)
        goto out;
    /* clone3 passes its flags in memory a filter cannot read: ENOSYS makes
     * libc fall back to clone, which is checked above. */
    if (deny(ctx, "clone3", SCMP_ACT_ERRNO(ENOSYS), 0, NULL, err) < 0)
        goto out;
    /* Typing into a terminal that is not yours (TIOCSTI) and the console's
     * TIOCLINUX; the request is 32 bits, so compare only those. */
    const struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
    const struct scmp_arg_cmp linux_ioctl = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX);
    if (deny(ctx, "ioctl", SCMP_ACT_ERRNO(EPERM), 1, &sti, err) < 0 ||
        deny(ctx, "ioctl", SCMP_ACT_ERRNO(EPERM), 1, &linux_ioctl, err) < 0)
        goto out;
    if (deny_socket_families(ctx, err) < 0)
        goto out;
    rc = export_program(ctx, out, err);
out:
    seccomp_release(ctx);
    return rc;
}

void sl_seccomp_free(struct sl_seccomp_program *p)
{
    free(p->filter);
    p->filter = NULL;
    p->len = 0;
}
