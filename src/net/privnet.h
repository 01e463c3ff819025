/* The private network mode (SANDBOX_NETWORK_MODE=private,
 * docs/ARCHITECTURE.md §9e): each sandbox's network namespace gets one
 * veth pair to the host, routed (no bridge: sandboxes share no link, so
 * nothing at layer 2 passes between them), an address of the worker's
 * subnet, a default route via the host's end, NAT out, and its egress
 * policy as an nftables chain of its own.
 *
 * The worker's table (`inet sandloom_<tag>`, made at open, removed at
 * close) sends everything a sandbox's interface forwards to that
 * sandbox's chain through a verdict map keyed by interface name; an
 * interface with no entry is dropped, so a sandbox whose policy could not
 * be installed has no network, never an open one. Towards the host a
 * sandbox reaches only the resolver (net/resolver.c: every DNS packet it
 * sends is redirected there), and nothing but the host's root (the
 * daemon: the ports route) opens a connection into a sandbox.
 *
 * Thread-safe: one lock over the slots and the nftables context. */
#ifndef SL_NET_PRIVNET_H
#define SL_NET_PRIVNET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "net/egress.h"

struct sl_privnet;

struct sl_privnet_options {
    const char *cidr;                      /* the worker's sandbox subnet, IPv4, /8../24 */
    const struct sl_egress_policy *dflt;   /* the policy of a sandbox that has none of its own */
};

int sl_privnet_open(const struct sl_privnet_options *opt, struct sl_privnet **out,
                    struct sl_error *err);
void sl_privnet_close(struct sl_privnet *net);

/* The host's address on every sandbox link: the sandboxes' gateway and
 * resolver (network order). */
uint32_t sl_privnet_gateway(const struct sl_privnet *net);
const char *sl_privnet_cidr(const struct sl_privnet *net);
/* The worker's default policy (lives as long as net). */
const struct sl_egress_policy *sl_privnet_default(const struct sl_privnet *net);

/* Give the network namespace netns_fd of sandbox uid its link and rules:
 * `policy` (NULL: the worker's default), within `bound` (its tenant's,
 * set by the operator; NULL: none), which is asked first: what the bound
 * denies is denied whatever the policy says. Returns a slot to detach
 * later (>= 0, even when the setup failed: then err is set, the namespace
 * keeps loopback only and the slot keeps why, for the status); -1 when no
 * slot could be had. */
int sl_privnet_attach(struct sl_privnet *net, uid_t uid, int netns_fd,
                      const struct sl_egress_policy *policy, const struct sl_egress_policy *bound,
                      struct sl_error *err);
/* The namespace of `slot` ended (or is about to): its link, rules and
 * address go. */
void sl_privnet_detach(struct sl_privnet *net, int slot);

/* Replace the policy of every live network of uid, each in one
 * transaction (running commands keep running; connections already open
 * stay open). A network whose new policy cannot be installed is cut off:
 * its link is removed, and -1 says so. 0 when uid has no live network. */
int sl_privnet_set_policy(struct sl_privnet *net, uid_t uid, const struct sl_egress_policy *policy,
                          const struct sl_egress_policy *bound, struct sl_error *err);

struct sl_privnet_status {
    bool attached;          /* a link with its policy installed */
    char address[16];       /* dotted quad, "" when none */
    char error[256];        /* why the last setup failed, "" when it did not */
    uint64_t denied_packets; /* dropped by policy since the network was made */
    uint64_t refused_names;  /* names the resolver refused by policy */
};
/* The status of uid's network (the newest when it has several); false
 * when it has none. */
bool sl_privnet_status(struct sl_privnet *net, uid_t uid, struct sl_privnet_status *out);

/* The worker's table is still there; when it is not (removed by hand,
 * or by another program's ruleset flush), every sandbox link is cut off
 * at once (without its table, a link's traffic would be forwarded
 * unfiltered) and the table is made again; the sandboxes get a network
 * again with their next session. -1 with err saying so. */
int sl_privnet_check(struct sl_privnet *net, struct sl_error *err);

/* Sandboxes with a connected network now. */
size_t sl_privnet_connected(struct sl_privnet *net);

/* Which network modes this host can give a sandbox, asked for real:
 * "isolated" when a thread can make a network namespace, "private" when
 * this process can also make and remove an nftables table and turn on
 * forwarding; `why` says what was missing for the first that cannot
 * (empty when all can). */
struct sl_net_modes {
    bool host, isolated, private_mode;
    char why[256];
};
void sl_net_modes_probe(struct sl_net_modes *out);

/* ---- for the resolver ---- */

/* What to do with a query for `name` from sandbox address `src` (network
 * order); REFUSE for an address that is no sandbox's. A refusal is
 * counted. */
enum sl_egress_answer sl_privnet_answer_for(struct sl_privnet *net, uint32_t src,
                                            const char *name);
/* The resolver answered `name` to `src` with these IPv4 addresses: put
 * them into the sets of the allow rules that cover the name, for ttl
 * seconds, before the answer goes out. */
void sl_privnet_learn(struct sl_privnet *net, uint32_t src, const char *name,
                      const uint32_t *addrs, const uint32_t *ttls, size_t n);

#endif
