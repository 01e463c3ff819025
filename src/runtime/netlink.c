#include "runtime/netlink.h"

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

#include "common/cleanup.h"

/* One request: a header, its fixed part, attributes; far below a page. */
#define MSG_MAX 1024

struct msg {
    union {
        struct nlmsghdr h;
        char buf[MSG_MAX];
    };
};

/* ---- work in a namespace ------------------------------------------------- */

struct in_netns {
    int netns_fd;
    int (*fn)(void *arg); /* -1 with errno on failure */
    void *arg;
    int rc, err;
};

static void *in_netns_thread(void *arg)
{
    struct in_netns *w = arg;
    /* This thread alone enters the namespace; it ends right after. */
    if (w->netns_fd >= 0 && setns(w->netns_fd, CLONE_NEWNET) < 0) {
        w->rc = -1;
        w->err = errno;
        return NULL;
    }
    w->rc = w->fn(w->arg);
    w->err = errno;
    return NULL;
}

/* fn(arg) run in the namespace netns_fd (-1: here, on this thread); its
 * result, errno set from it. */
static int run_in_netns(int netns_fd, int (*fn)(void *arg), void *arg, struct sl_error *err)
{
    struct in_netns w = {.netns_fd = netns_fd, .fn = fn, .arg = arg};
    if (netns_fd < 0) {
        in_netns_thread(&w);
    } else {
        pthread_t t;
        int rc = pthread_create(&t, NULL, in_netns_thread, &w);
        if (rc != 0) {
            errno = rc;
            return sl_error_errno(err, SL_E_RUNTIME, "cannot start the netlink thread");
        }
        pthread_join(t, NULL);
    }
    errno = w.err;
    return w.rc;
}

static int open_socket(void *arg)
{
    (void)arg;
    return socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
}

static int nl_open(int netns_fd, struct sl_error *err)
{
    int fd = run_in_netns(netns_fd, open_socket, NULL, err);
    if (fd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open a netlink socket in the namespace");
    return fd;
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

/* Send m in the namespace and wait for its acknowledgement; the kernel's
 * errno, named with `what`, on refusal. */
static int nl_call(int netns_fd, struct msg *m, const char *what, struct sl_error *err)
{
    _cleanup_close_ int fd = nl_open(netns_fd, err);
    if (fd < 0)
        return -1;
    m->h.nlmsg_seq = 1;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(fd, m->buf, m->h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "%s: netlink send", what);
    union {
        struct nlmsghdr h; /* aligned for the headers read from it */
        char buf[4096];
    } reply;
    for (;;) {
        ssize_t n = recv(fd, reply.buf, sizeof(reply.buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "%s: netlink receive", what);
        /* NLMSG_OK/NEXT on an int: the length left can go below zero by
         * the alignment of the last message, which an unsigned would not. */
        int left = (int)n;
        for (struct nlmsghdr *h = &reply.h; NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_type != NLMSG_ERROR)
                continue;
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (e->error == 0)
                return 0;
            errno = -e->error;
            return sl_error_errno(err, SL_E_RUNTIME, "%s", what);
        }
    }
}

static int ifindex_in(int netns_fd, const char *ifname, struct sl_error *err);

/* ---- links -------------------------------------------------------------------- */

static bool name_ok(const char *name, struct sl_error *err)
{
    size_t n = strlen(name);
    if (n >= 1 && n <= SL_NL_IFNAME_MAX && !strchr(name, '/'))
        return true;
    sl_error_set(err, SL_E_RUNTIME, EINVAL, "invalid interface name '%.32s'", name);
    return false;
}

int sl_nl_bridge_add(const char *name, struct sl_error *err)
{
    if (!name_ok(name, err))
        return -1;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
    struct msg m;
    msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
    attr_str(&m, IFLA_IFNAME, name);
    struct rtattr *info = nest_begin(&m, IFLA_LINKINFO);
    attr_str(&m, IFLA_INFO_KIND, "bridge");
    nest_end(&m, info);
    return nl_call(-1, &m, "cannot create the bridge", err);
}

int sl_nl_veth_add(const char *host_if, const char *peer_if, int peer_netns_fd,
                   struct sl_error *err)
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
    struct ifinfomsg pifi = {.ifi_family = AF_UNSPEC};
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
    return nl_call(-1, &m, "cannot create the veth pair", err);
}

int sl_nl_link_set_master(const char *ifname, const char *bridge, struct sl_error *err)
{
    int index = ifindex_in(-1, ifname, err);
    int master = index > 0 ? ifindex_in(-1, bridge, err) : -1;
    if (index <= 0 || master <= 0)
        return -1;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = index};
    struct msg m;
    msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    uint32_t mi = (uint32_t)master;
    attr_add(&m, IFLA_MASTER, &mi, sizeof(mi));
    return nl_call(-1, &m, "cannot put the link into the bridge", err);
}

int sl_nl_link_up(int netns_fd, const char *ifname, struct sl_error *err)
{
    int index = ifindex_in(netns_fd, ifname, err);
    if (index <= 0)
        return -1;
    struct ifinfomsg ifi = {
        .ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
    struct msg m;
    msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    return nl_call(netns_fd, &m, "cannot bring the link up", err);
}

int sl_nl_addr4_add(int netns_fd, const char *ifname, uint32_t addr, int prefix,
                    struct sl_error *err)
{
    int index = ifindex_in(netns_fd, ifname, err);
    if (index <= 0)
        return -1;
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
    return nl_call(netns_fd, &m, "cannot add the address", err);
}

int sl_nl_route4_default(int netns_fd, uint32_t gateway, struct sl_error *err)
{
    struct rtmsg rt = {.rtm_family = AF_INET,
                       .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_STATIC,
                       .rtm_scope = RT_SCOPE_UNIVERSE,
                       .rtm_type = RTN_UNICAST};
    struct msg m;
    msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof(rt));
    attr_add(&m, RTA_GATEWAY, &gateway, sizeof(gateway));
    return nl_call(netns_fd, &m, "cannot add the default route", err);
}

int sl_nl_link_del(int netns_fd, const char *ifname, struct sl_error *err)
{
    struct sl_error lookup = {0};
    int index = ifindex_in(netns_fd, ifname, &lookup);
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
    return nl_call(netns_fd, &m, "cannot remove the link", err);
}

/* ---- names to indexes ------------------------------------------------------- */

static int name_to_index(void *arg)
{
    unsigned index = if_nametoindex(arg);
    return index ? (int)index : -1;
}

/* if_nametoindex asks the calling thread's namespace: asked from a
 * thread of the namespace's own. */
static int ifindex_in(int netns_fd, const char *ifname, struct sl_error *err)
{
    int index = run_in_netns(netns_fd, name_to_index, (void *)ifname, err);
    if (index > 0)
        return index;
    if (errno == 0)
        errno = ENODEV;
    sl_error_errno(err, SL_E_RUNTIME, "no interface '%s'", ifname);
    return -1;
}
