#include "net/netlink.h"

#include <errno.h>
#include <net/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


/* One request: a header, its fixed part, attributes; far below a page. */
#define MSG_MAX 1024

struct msg {
    union {
        struct nlmsghdr h;
        char buf[MSG_MAX];
    };
};

/* ---- opening a socket in a namespace ------------------------------------ */

struct in_netns {
    int netns_fd;
    int fd, err;
};

static void *open_in_netns(void *arg)
{
    struct in_netns *w = arg;
    /* This thread alone enters the namespace; it ends right after, and
     * the socket stays bound to the namespace it was made in. */
    if (w->netns_fd >= 0 && setns(w->netns_fd, CLONE_NEWNET) < 0) {
        w->fd = -1;
        w->err = errno;
        return NULL;
    }
    w->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    w->err = errno;
    return NULL;
}

int sl_nl_open(struct sl_nl *nl, int netns_fd, struct sl_error *err)
{
    nl->fd = -1;
    nl->seq = 0;
    struct in_netns w = {.netns_fd = netns_fd, .fd = -1};
    if (netns_fd < 0) {
        open_in_netns(&w);
    } else {
        pthread_t t;
        int rc = pthread_create(&t, NULL, open_in_netns, &w);
        if (rc != 0) {
            errno = rc;
            return sl_error_errno(err, SL_E_RUNTIME, "cannot start the netlink thread");
        }
        pthread_join(t, NULL);
    }
    if (w.fd < 0) {
        errno = w.err;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open a netlink socket in the namespace");
    }
    nl->fd = w.fd;
    return 0;
}

void sl_nl_close(struct sl_nl *nl)
{
    if (nl->fd >= 0)
        close(nl->fd);
    nl->fd = -1;
}

/* ---- building a message ---------------------------------------------------- */

static void msg_init(struct msg *m, uint16_t type, uint16_t flags, const void *fixed,
                     size_t fixed_len)
{
    memset(m, 0, sizeof(*m));
    m->h.nlmsg_type = type;
    m->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    m->h.nlmsg_len = NLMSG_LENGTH(fixed_len);
    memcpy(NLMSG_DATA(&m->h), fixed, fixed_len);
}

static struct rtattr *attr_add(struct msg *m, uint16_t type, const void *data, size_t len)
{
    size_t at = NLMSG_ALIGN(m->h.nlmsg_len);
    if (at + RTA_SPACE(len) > sizeof(m->buf))
        return NULL; /* the callers' messages are far smaller: never here */
    struct rtattr *a = (struct rtattr *)(m->buf + at);
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(len);
    if (len)
        memcpy(RTA_DATA(a), data, len);
    m->h.nlmsg_len = (uint32_t)(at + RTA_SPACE(len));
    return a;
}

static struct rtattr *nest_begin(struct msg *m, uint16_t type)
{
    return attr_add(m, type, NULL, 0);
}

static void nest_end(struct msg *m, struct rtattr *nest)
{
    if (nest)
        nest->rta_len = (unsigned short)(m->buf + m->h.nlmsg_len - (char *)nest);
}

static void attr_str(struct msg *m, uint16_t type, const char *s)
{
    attr_add(m, type, s, strlen(s) + 1);
}

/* ---- one exchange ------------------------------------------------------------ */

/* Send m and wait for its acknowledgement; the kernel's errno, named with
 * `what`, on refusal. A message of the answer that is not the
 * acknowledgement goes to on_reply (NULL: ignored). */
static int nl_call(struct sl_nl *nl, struct msg *m, const char *what,
                   void (*on_reply)(const struct nlmsghdr *h, void *ctx), void *ctx,
                   struct sl_error *err)
{
    m->h.nlmsg_seq = ++nl->seq;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(nl->fd, m->buf, m->h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "%s: netlink send", what);
    union {
        struct nlmsghdr h; /* aligned for the headers read from it */
        char buf[8192];
    } reply;
    for (;;) {
        ssize_t n = recv(nl->fd, reply.buf, sizeof(reply.buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "%s: netlink receive", what);
        /* NLMSG_OK/NEXT on an int: the length left can go below zero by
         * the alignment of the last message, which an unsigned would not. */
        int left = (int)n;
        for (struct nlmsghdr *h = &reply.h; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_seq != nl->seq)
                continue; /* the answer to an earlier call that gave up */
            if (h->nlmsg_type != NLMSG_ERROR) {
                if (on_reply)
                    on_reply(h, ctx);
                continue;
            }
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (e->error == 0)
                return 0;
            errno = -e->error;
            return sl_error_errno(err, SL_E_RUNTIME, "%s", what);
        }
    }
}

/* ---- links -------------------------------------------------------------------- */

static bool name_ok(const char *name, struct sl_error *err)
{
    size_t n = strlen(name);
    if (n >= 1 && n <= SL_NL_IFNAME_MAX && !strchr(name, '/'))
        return true;
    sl_error_set(err, SL_E_RUNTIME, EINVAL, "invalid interface name '%.32s'", name);
    return false;
}


static void take_index(const struct nlmsghdr *h, void *ctx)
{
    if (h->nlmsg_type == RTM_NEWLINK && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct ifinfomsg)))
        *(int *)ctx = ((const struct ifinfomsg *)NLMSG_DATA(h))->ifi_index;
}

int sl_nl_ifindex(struct sl_nl *nl, const char *ifname, struct sl_error *err)
{
    if (!name_ok(ifname, err))
        return -1;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct msg m;
    msg_init(&m, RTM_GETLINK, 0, &ifi, sizeof(ifi));
    attr_str(&m, IFLA_IFNAME, ifname);
    int index = 0;
    char what[64];
    snprintf(what, sizeof(what), "no interface '%s'", ifname);
    if (nl_call(nl, &m, what, take_index, &index, err) < 0)
        return -1;
    if (index <= 0) {
        errno = ENODEV;
        return sl_error_errno(err, SL_E_RUNTIME, "%s", what);
    }
    return index;
}

int sl_nl_veth_add(struct sl_nl *nl, const char *host_if, const char *peer_if,
                   int peer_netns_fd, int peer_index, struct sl_error *err)
{
    if (!name_ok(host_if, err) || !name_ok(peer_if, err))
        return -1;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct msg m;
    msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
    attr_str(&m, IFLA_IFNAME, host_if);
    struct rtattr *info = nest_begin(&m, IFLA_LINKINFO);
    attr_str(&m, IFLA_INFO_KIND, "veth");
    struct rtattr *data = nest_begin(&m, IFLA_INFO_DATA);
    /* The peer: its own ifinfomsg, then its attributes. */
    struct rtattr *peer = nest_begin(&m, VETH_INFO_PEER);
    struct ifinfomsg pifi = {.ifi_family = AF_UNSPEC, .ifi_index = peer_index};
    size_t at = NLMSG_ALIGN(m.h.nlmsg_len);
    memcpy(m.buf + at, &pifi, sizeof(pifi));
    m.h.nlmsg_len = (uint32_t)(at + NLMSG_ALIGN(sizeof(pifi)));
    attr_str(&m, IFLA_IFNAME, peer_if);
    if (peer_netns_fd >= 0) {
        uint32_t fd = (uint32_t)peer_netns_fd;
        attr_add(&m, IFLA_NET_NS_FD, &fd, sizeof(fd));
    }
    nest_end(&m, peer);
    nest_end(&m, data);
    nest_end(&m, info);
    return nl_call(nl, &m, "cannot create the veth pair", NULL, NULL, err);
}

int sl_nl_link_up(struct sl_nl *nl, int index, struct sl_error *err)
{
    struct ifinfomsg ifi = {
        .ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
    struct msg m;
    msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    return nl_call(nl, &m, "cannot bring the link up", NULL, NULL, err);
}

int sl_nl_addr4_add(struct sl_nl *nl, int index, uint32_t addr, int prefix, struct sl_error *err)
{
    if (prefix < 0 || prefix > 32)
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "invalid prefix length %d", prefix);
    struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                            .ifa_prefixlen = (unsigned char)prefix,
                            .ifa_scope = RT_SCOPE_UNIVERSE,
                            .ifa_index = (unsigned)index};
    struct msg m;
    msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof(ifa));
    attr_add(&m, IFA_LOCAL, &addr, sizeof(addr));
    attr_add(&m, IFA_ADDRESS, &addr, sizeof(addr));
    return nl_call(nl, &m, "cannot add the address", NULL, NULL, err);
}

int sl_nl_route4_add(struct sl_nl *nl, uint32_t dst, int prefix, int index, uint32_t gateway,
                     struct sl_error *err)
{
    if (prefix < 0 || prefix > 32)
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "invalid prefix length %d", prefix);
    struct rtmsg rt = {.rtm_family = AF_INET,
                       .rtm_dst_len = (unsigned char)prefix,
                       .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_STATIC,
                       .rtm_scope = gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK,
                       .rtm_type = RTN_UNICAST,
                       .rtm_flags = gateway ? RTNH_F_ONLINK : 0};
    struct msg m;
    msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof(rt));
    if (prefix > 0)
        attr_add(&m, RTA_DST, &dst, sizeof(dst));
    uint32_t oif = (uint32_t)index;
    attr_add(&m, RTA_OIF, &oif, sizeof(oif));
    if (gateway)
        attr_add(&m, RTA_GATEWAY, &gateway, sizeof(gateway));
    return nl_call(nl, &m, "cannot add the route", NULL, NULL, err);
}

int sl_nl_link_del(struct sl_nl *nl, const char *ifname, struct sl_error *err)
{
    struct sl_error lookup = {0};
    int index = sl_nl_ifindex(nl, ifname, &lookup);
    if (index <= 0) {
        if (lookup.errnum == ENODEV)
            return 0;
        if (err)
            *err = lookup;
        return -1;
    }
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = index};
    struct msg m;
    msg_init(&m, RTM_DELLINK, 0, &ifi, sizeof(ifi));
    struct sl_error del = {0};
    if (nl_call(nl, &m, "cannot remove the link", NULL, NULL, &del) == 0 || del.errnum == ENODEV)
        return 0; /* gone meanwhile, with its namespace */
    if (err)
        *err = del;
    return -1;
}
