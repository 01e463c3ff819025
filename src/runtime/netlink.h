/* Private to runtime/: the links of a sandbox's own network, made with
 * rtnetlink calls from this process (the networking issue's private mode:
 * a veth pair from the sandbox's network namespace onto a worker bridge;
 * bench/netns_bench.sh and docs/PERFORMANCE.md say why a veth pair).
 *
 * Each call opens a NETLINK_ROUTE socket in the namespace it acts on
 * (netns_fd, an open /proc/<pid>/ns/net or /run/netns/<name>; -1: this
 * process's) and waits for the kernel's acknowledgement, so an error is
 * the kernel's errno, named in err. The socket is made by a short-lived
 * thread that enters the namespace (setns affects only that thread), so
 * the caller's own namespace never changes. Thread-safe: no state. */
#ifndef SL_RUNTIME_NETLINK_H
#define SL_RUNTIME_NETLINK_H

#include <stdint.h>

#include "common/error.h"

#define SL_NL_IFNAME_MAX 15 /* IFNAMSIZ - 1 */

/* A bridge named `name`, up (EEXIST is an error: the caller decides). */
int sl_nl_bridge_add(const char *name, struct sl_error *err);

/* A veth pair: `host_if` stays here, `peer_if` is made in the namespace
 * peer_netns_fd (both down). */
int sl_nl_veth_add(const char *host_if, const char *peer_if, int peer_netns_fd,
                   struct sl_error *err);

/* Put link `ifname` (of this namespace) into bridge `bridge`. */
int sl_nl_link_set_master(const char *ifname, const char *bridge, struct sl_error *err);

/* Bring `ifname` up in the namespace netns_fd. */
int sl_nl_link_up(int netns_fd, const char *ifname, struct sl_error *err);

/* Add IPv4 address `addr` (network byte order) / prefix to `ifname`. */
int sl_nl_addr4_add(int netns_fd, const char *ifname, uint32_t addr, int prefix,
                    struct sl_error *err);

/* A default IPv4 route via `gateway` (network byte order). */
int sl_nl_route4_default(int netns_fd, uint32_t gateway, struct sl_error *err);

/* Remove link `ifname` (a veth takes its peer with it); 0 when it is gone
 * already. */
int sl_nl_link_del(int netns_fd, const char *ifname, struct sl_error *err);

#endif
