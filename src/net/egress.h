/* An egress policy: what a sandbox in the private network mode may reach
 * (docs/ARCHITECTURE.md §9e). Plain data: parsed, checked, compared and
 * printed here; net/privnet.c turns it into nftables rules and
 * net/resolver.c asks it which names to answer.
 *
 * A policy is a default verdict and two lists of rules. A rule is an IPv4
 * address or CIDR network, or a domain name (exact, or "*.name" for every
 * name under it), each with an optional port or port range
 * ("203.0.113.0/24", "pypi.org", "*.github.com:443", "10.0.0.5:5432",
 * "example.com:8000-8999"). The order of evaluation, first match wins:
 *   1. never reachable, whatever the policy says: the host itself, other
 *      sandboxes, loopback, link-local (the cloud metadata endpoints),
 *      multicast and reserved ranges;
 *   2. the allow rules (so an allowed address inside a denied network is
 *      reachable, as the reference's SANDBOX_EGRESS_ALLOWED_LITERALS and
 *      E2B's allowOut over denyOut);
 *   3. the deny rules;
 *   4. private ranges (RFC 1918, CGNAT 100.64/10, 198.18/15): denied
 *      unless an allow rule named them;
 *   5. the default: allow or deny.
 * A domain rule covers the addresses the sandbox's resolver answered for
 * the name (net/resolver.c); with the default deny, the resolver answers
 * only names an allow rule covers, so a denied sandbox cannot use DNS as a
 * channel out either. */
#ifndef SL_NET_EGRESS_H
#define SL_NET_EGRESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Rules per list: each one is an nftables rule (and a set for a domain),
 * evaluated for every new connection. */
#define SL_EGRESS_MAX_RULES 256
#define SL_EGRESS_DOMAIN_MAX 253

enum sl_egress_default { SL_EGRESS_ALLOW = 0, SL_EGRESS_DENY = 1 };

struct sl_egress_rule {
    bool is_domain;
    bool wildcard;                          /* "*.name": names under it, not name itself */
    char domain[SL_EGRESS_DOMAIN_MAX + 1];  /* lower case, no trailing dot */
    uint32_t addr;                          /* network order, host bits clear */
    int prefix;                             /* 0..32 */
    uint16_t port_lo, port_hi;              /* 0, 0: every port */
};

struct sl_egress_policy {
    enum sl_egress_default dflt;
    size_t n_allow, n_deny;
    struct sl_egress_rule *allow, *deny;
};

/* {"default":"allow"|"deny","allow":[...],"deny":[...]}: every key
 * optional (default "allow", empty lists), no other key. Refusals are 422
 * EGRESS_POLICY_INVALID naming the field and the entry. */
int sl_egress_parse(const json_t *obj, struct sl_egress_policy *out, struct sl_error *err);
/* One rule's text; `field` names it in the refusal ("egress.allow[3]"). */
int sl_egress_rule_parse(const char *text, const char *field, struct sl_egress_rule *out,
                         struct sl_error *err);
/* The canonical JSON form (what parse reads back to an equal policy). */
json_t *sl_egress_to_json(const struct sl_egress_policy *p);
/* One rule as text, canonical ("203.0.113.0/24:443"); `size` >= 280. */
void sl_egress_rule_text(const struct sl_egress_rule *r, char *out, size_t size);

int sl_egress_copy(struct sl_egress_policy *dst, const struct sl_egress_policy *src);
bool sl_egress_equal(const struct sl_egress_policy *a, const struct sl_egress_policy *b);
void sl_egress_free(struct sl_egress_policy *p);

/* Does rule r (a domain rule) cover `name` (lower case, no trailing dot)? */
bool sl_egress_domain_matches(const struct sl_egress_rule *r, const char *name);

/* What the resolver does with a name. */
enum sl_egress_answer {
    SL_EGRESS_ANSWER,  /* resolve it; its addresses are not learned */
    SL_EGRESS_LEARN,   /* resolve it and learn its addresses for the allow rules that cover it */
    SL_EGRESS_REFUSE,  /* refuse it: denied by name, or not allowed under a default deny */
};
enum sl_egress_answer sl_egress_answer_for(const struct sl_egress_policy *p, const char *name);

#endif
