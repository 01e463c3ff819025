/* The private network's resolver: a DNS forwarder on the sandboxes'
 * gateway address, port 53 over UDP (every DNS packet a sandbox sends is
 * redirected to it: net/privnet.c), and the half of the egress policy
 * that concerns names.
 *
 * For each query it asks the policy of the sandbox that sent it
 * (sl_privnet_answer_for): a refused name gets REFUSED and is counted; an
 * allowed one goes to the upstream servers, and when an allow rule covers
 * the name, the IPv4 addresses of the answer enter that rule's set with
 * their TTL before the answer goes back, so the connection that follows
 * is let through. AAAA questions get an empty answer: the private network
 * is IPv4 only, and an empty answer sends clients to IPv4 at once.
 *
 * One thread and one epoll set; a query waits at most RESOLVER_TIMEOUT
 * for upstream, then is forgotten (the client asks again). TCP is not
 * served: answers larger than a UDP datagram are rare for the names
 * agents look up, and the client sees a refused connection at once. */
#ifndef SL_NET_RESOLVER_H
#define SL_NET_RESOLVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "net/privnet.h"

struct sl_resolver;

struct sl_resolver_upstream {
    uint32_t addr; /* network order */
    uint16_t port; /* host order */
};

/* Upstream servers from text ("192.0.2.53", "127.0.0.1:5353"); none
 * given: the IPv4 nameservers of /etc/resolv.conf. */
int sl_resolver_upstreams(const char *const *texts, size_t n, struct sl_resolver_upstream *out,
                          size_t max, size_t *count, struct sl_error *err);

int sl_resolver_start(struct sl_privnet *net, const struct sl_resolver_upstream *up, size_t n_up,
                      struct sl_resolver **out, struct sl_error *err);
void sl_resolver_stop(struct sl_resolver *r);

#endif
