/* The links of a sandbox's private network, made with rtnetlink from this
 * process (net/privnet.c: a veth pair from the sandbox's network namespace
 * to the host, routed; bench/netns_bench.sh and docs/PERFORMANCE.md say
 * why a veth pair).
 *
 * A handle is one NETLINK_ROUTE socket bound to the namespace it was
 * opened in (netns_fd: an open /proc/<pid>/ns/net or /run/netns/<name>;
 * -1: this process's). The socket is made by a short-lived thread that
 * enters the namespace (setns affects only that thread), so the caller's
 * own namespace never changes, and every later call on the handle acts in
 * that namespace with no thread at all. Each call waits for the kernel's
 * acknowledgement, so an error is the kernel's errno, named in err. A
 * handle is used by one thread at a time. */
#ifndef SL_NET_NETLINK_H
#define SL_NET_NETLINK_H

#include <stdint.h>

#include "common/error.h"

#define SL_NL_IFNAME_MAX 15 /* IFNAMSIZ - 1 */

struct sl_nl {
    int fd;
    uint32_t seq;
};

int sl_nl_open(struct sl_nl *nl, int netns_fd, struct sl_error *err);
void sl_nl_close(struct sl_nl *nl);

/* The index of `ifname` in the handle's namespace (ENODEV: none). */
int sl_nl_ifindex(struct sl_nl *nl, const char *ifname, struct sl_error *err);

/* A veth pair: `host_if` in the handle's namespace, `peer_if` made in the
 * namespace peer_netns_fd with index peer_index (0: the kernel's choice);
 * both down. */
int sl_nl_veth_add(struct sl_nl *nl, const char *host_if, const char *peer_if,
                   int peer_netns_fd, int peer_index, struct sl_error *err);

/* Bring link `index` up. */
int sl_nl_link_up(struct sl_nl *nl, int index, struct sl_error *err);

/* Add IPv4 address `addr` (network byte order) / prefix to link `index`. */
int sl_nl_addr4_add(struct sl_nl *nl, int index, uint32_t addr, int prefix,
                    struct sl_error *err);

/* An IPv4 route to dst/prefix (network byte order; prefix 0 = default),
 * out of link `index`, via `gateway` (0: none, the destination is on the
 * link). A gateway is taken as on the link (RTNH_F_ONLINK), since a /32
 * address has no subnet the gateway could be in. */
int sl_nl_route4_add(struct sl_nl *nl, uint32_t dst, int prefix, int index, uint32_t gateway,
                     struct sl_error *err);

/* Remove link `ifname` (a veth takes its peer with it); 0 when it is gone
 * already. */
int sl_nl_link_del(struct sl_nl *nl, const char *ifname, struct sl_error *err);

#endif
