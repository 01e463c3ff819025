/* Who is at the other end of an accepted TCP connection, when it is a
 * process of this host: NETLINK_SOCK_DIAG looks the peer's own socket up by
 * its exact address pair and answers the uid that created it. Loopback
 * peers carry no credentials (SO_PEERCRED is for unix sockets), and this is
 * one netlink round trip, not a scan of /proc/net/tcp. */
#include "api/peer_uid.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"

static void fill_addr(const struct sockaddr_storage *ss, __be16 *port, __be32 addr[4])
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        *port = in->sin_port;
        addr[0] = in->sin_addr.s_addr;
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        *port = in6->sin6_port;
        memcpy(addr, &in6->sin6_addr, 16);
    }
}

int sl_peer_uid(int fd, uid_t *uid)
{
    struct sockaddr_storage local, peer;
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    if (getsockname(fd, (struct sockaddr *)&local, &llen) < 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &plen) < 0)
        return -1;
    if ((peer.ss_family != AF_INET && peer.ss_family != AF_INET6) ||
        peer.ss_family != local.ss_family) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg = {
        .nlh = {.nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1},
        .req = {.sdiag_family = (__u8)peer.ss_family, .sdiag_protocol = IPPROTO_TCP,
                .idiag_states = ~0U,
                .id = {.idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}},
    };
    /* The peer's socket: its source is our peer address, its destination us. */
    fill_addr(&peer, &msg.req.id.idiag_sport, msg.req.id.idiag_src);
    fill_addr(&local, &msg.req.id.idiag_dport, msg.req.id.idiag_dst);

    _cleanup_close_ int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return -1;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return -1;
    union {
        char buf[1024];
        struct nlmsghdr align;
    } reply;
    ssize_t n;
    do
        n = recv(nl, reply.buf, sizeof(reply.buf), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    for (struct nlmsghdr *h = &reply.align; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
                break;
            /* ENOENT: no such socket here, the peer is another host. */
            if (e->error == -ENOENT)
                return 1;
            errno = -e->error;
            return -1;
        }
        if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
            h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            *uid = (uid_t)m->idiag_uid;
            return 0;
        }
    }
    errno = EPROTO;
    return -1;
}
