/* A TCP connection to a server listening inside a sandbox (the ports route).
 *
 * With a network namespace per sandbox (isolated and private modes) the
 * socket is made inside the namespace of the sandbox's warm session: the
 * calling thread enters it for the socket() call only (a socket belongs to
 * the namespace it was made in), so connect() reaches the sandbox's own
 * loopback and nothing of the host. In host mode the sandbox shares the
 * host's network, so the host's loopback is where its servers listen: a
 * connection is made only to a port whose listening socket belongs to the
 * sandbox's uid (asked of the kernel by sock_diag), never to another
 * sandbox's server or a service of the host. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/syscalls.h"
#include "runtime/internal.h"
#include "runtime/runtime.h"

/* The network namespace of uid's live session (an fd), or -1: none runs. */
static int session_netns(struct sl_runtime *rt, uid_t uid)
{
    int fd = -1;
    pthread_mutex_lock(&rt->sessions_lock);
    for (size_t i = 0; i < rt->n_sessions && fd < 0; i++) {
        struct rt_session *s = rt->sessions[i];
        if (s->uid != uid || s->dead || s->pidfd < 0)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)s->pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        /* The pid is the session's only while its pidfd says it lives:
         * checked after the open, so a recycled pid is never entered. */
        if (fd >= 0 && sl_pidfd_send_signal(s->pidfd, 0) < 0) {
            close(fd);
            fd = -1;
        }
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    return fd;
}

/* A TCP socket made inside netns (the calling thread goes there and back). */
static int socket_in(int netns, int family, struct sl_error *err)
{
    int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open this thread's network namespace");
    if (setns(netns, CLONE_NEWNET) < 0) {
        int e = errno;
        close(home);
        errno = e;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot enter the sandbox's network namespace");
    }
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int e = errno;
    if (setns(home, CLONE_NEWNET) < 0) {
        /* A thread of the daemon left in a sandbox's namespace would make
         * every later connection of it there: nothing safe to go on with. */
        sl_errorlog("runtime: cannot return to the daemon's network namespace: %s",
                    strerror(errno));
        abort();
    }
    close(home);
    if (fd < 0) {
        errno = e;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot make a socket in the sandbox");
    }
    return fd;
}

/* Whether a socket of uid listens on port of the wildcard or loopback
 * address of `family`: the kernel's listening sockets (sock_diag, which
 * dumps those alone: /proc/net/tcp lists every socket of the host, and
 * reading it took most of a small proxied request). Only a listener on
 * the wildcard or loopback address counts: one on another address would
 * leave 127.0.0.1:port free for someone else's server, which the
 * connection must never reach. */
static bool listens(int family, uid_t uid, uint16_t port)
{
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return false;
    struct {
        struct nlmsghdr nh;
        struct inet_diag_req_v2 r;
    } req = {
        .nh = {.nlmsg_len = sizeof(req),
               .nlmsg_type = SOCK_DIAG_BY_FAMILY,
               .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
        .r = {.sdiag_family = (uint8_t)family,
              .sdiag_protocol = IPPROTO_TCP,
              .idiag_states = 1u << 10 /* TCP_LISTEN */},
    };
    bool found = false, done = false;
    if (send(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req)) {
        close(nl);
        return false;
    }
    static __thread char buf[32768];
    while (!done && !found) {
        ssize_t n = recv(nl, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
                done = true;
                break;
            }
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            if (ntohs(m->id.idiag_sport) != port || m->idiag_uid != uid)
                continue;
            const uint32_t *a = m->id.idiag_src;
            bool any = !a[0] && !a[1] && !a[2] && !a[3];
            /* Not a v4-mapped ::ffff:127.0.0.1: that binds IPv4's port,
             * so [::1]:port may be someone else's, and ::1 is where the
             * connection would go. */
            bool loop = family == AF_INET ? a[0] == htonl(INADDR_LOOPBACK)
                                          : (!a[0] && !a[1] && !a[2] && a[3] == htonl(1));
            if (family == AF_INET)
                any = !a[0];
            if (any || loop) {
                found = true;
                break;
            }
        }
    }
    close(nl);
    return found;
}

static int connect_within(int fd, const struct sockaddr *sa, socklen_t len, int64_t timeout_ms,
                          uint16_t port, struct sl_error *err)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return sl_error_set(err, SL_E_PORT_NOT_LISTENING, errno,
                            "nothing in the sandbox listens on port %u", (unsigned)port);
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r;
    do
        r = poll(&p, 1, (int)timeout_ms);
    while (r < 0 && errno == EINTR);
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (r <= 0)
        return sl_error_set(err, SL_E_PORT_NOT_LISTENING, ETIMEDOUT,
                            "the server on port %u did not accept the connection in time",
                            (unsigned)port);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr)
        return sl_error_set(err, SL_E_PORT_NOT_LISTENING, soerr,
                            "nothing in the sandbox listens on port %u", (unsigned)port);
    return 0;
}

int sl_rt_sandbox_connect(struct sl_runtime *rt, uid_t uid, uint16_t port, int64_t timeout_ms,
                          struct sl_error *err)
{
    struct sockaddr_in v4 = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in6 v6 = {
        .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd;
    const struct sockaddr *sa = (const struct sockaddr *)&v4;
    socklen_t salen = sizeof(v4);
    if (rt->net_ns) {
        int netns = session_netns(rt, uid);
        if (netns < 0)
            return sl_error_set(err, SL_E_PORT_NOT_LISTENING, 0,
                                "nothing in the sandbox listens on port %u: it runs nothing "
                                "now (start the server with a background command)",
                                (unsigned)port);
        fd = socket_in(netns, AF_INET, err);
        close(netns);
    } else {
        /* Host mode: the sandbox's own listener, or no connection. */
        bool on4 = listens(AF_INET, uid, port), on6 = !on4 && listens(AF_INET6, uid, port);
        if (!on4 && !on6)
            return sl_error_set(err, SL_E_PORT_NOT_LISTENING, 0,
                                "nothing in the sandbox listens on port %u", (unsigned)port);
        if (on6) {
            sa = (const struct sockaddr *)&v6;
            salen = sizeof(v6);
        }
        fd = socket(on6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            sl_error_errno(err, SL_E_RUNTIME, "cannot make a socket");
    }
    if (fd < 0)
        return -1;
    if (connect_within(fd, sa, salen, timeout_ms, port, err) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}
