#include "net/privnet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "net/netlink.h"
#include "net/nft.h"

/* Addresses a domain rule keeps for a policy change to put back into the
 * new rules' sets (the kernel's sets hold them all; this is a copy of the
 * newest). */
#define LEARNED_MAX 256
/* Elements of one domain rule's set: a sandbox cannot grow kernel memory
 * without bound by resolving names under a wildcard. */
#define DOMAIN_SET_SIZE 4096
/* Learned addresses live at least this long (a TTL of 0 would expire
 * between the answer and the connection). */
#define LEARN_MIN_SECONDS 5
#define LEARN_MAX_SECONDS 86400

/* Never reachable from a sandbox, whatever its policy: "this" network,
 * loopback, link-local (169.254.169.254 and the other metadata
 * endpoints), IETF protocol assignments, multicast, reserved and
 * broadcast; the worker's own subnet (other sandboxes) is added. */
static const char NEVER[] = "0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 192.0.0.0/24, 224.0.0.0/3";
/* Private ranges: reachable only when an allow rule names them. */
static const char PRIVATE[] =
    "10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16, 198.18.0.0/15";

struct learned {
    char name[SL_EGRESS_DOMAIN_MAX + 1];
    uint32_t addr;
    int64_t expires_us;
};

/* A layer of a sandbox's rules: [0] its policy, chain sb<N>; [1] its
 * tenant's bound, chain sb<N>b, which sb<N> asks first: an allow there
 * only returns to sb<N>, a deny there is final. */
struct layer {
    bool on;
    struct sl_egress_policy p;
    size_t n_sets; /* its domain rules' sets, <chain>_<i> */
};

struct slot {
    bool used, attached;
    bool installed;                 /* its rules are in the table (attached or about to be) */
    uid_t uid;
    uint64_t seq;
    char ifname[SL_NL_IFNAME_MAX + 1];
    struct layer layer[2];          /* installed (or being installed) */
    uint64_t refused;
    char error[256];
    struct learned *learned;        /* grows to a ring of LEARNED_MAX; NULL until the first */
    size_t n_learned, next_learned, cap_learned;
};

struct sl_privnet {
    pthread_mutex_t lock;
    struct sl_nft *nft;
    char cidr[24], table[24], prefix[8];
    uint32_t base;   /* host order, the subnet's first address */
    uint32_t gw;     /* network order: base + 1 */
    size_t max_slots;
    struct slot *slots;
    size_t n_slots;
    uint64_t seq;
    struct sl_egress_policy dflt;
    bool guard; /* the forwarding guard chain is ours to keep (forwarding was off) */
};

/* FNV-1a: a tag from the subnet's text, stable across restarts. */
static uint32_t text_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static uint32_t slot_addr(const struct sl_privnet *net, size_t slot)
{
    return htonl(net->base + 2 + (uint32_t)slot);
}

static void addr_text(uint32_t a, char *out)
{
    inet_ntop(AF_INET, &a, out, INET_ADDRSTRLEN);
}

/* ---- nftables text ---------------------------------------------------------- */

struct text {
    char *buf;
    size_t len;
    FILE *f;
};

static int text_open(struct text *t)
{
    t->buf = NULL;
    t->len = 0;
    t->f = open_memstream(&t->buf, &t->len);
    return t->f ? 0 : -1;
}

static char *text_close(struct text *t)
{
    if (fclose(t->f) != 0) {
        free(t->buf);
        return NULL;
    }
    return t->buf;
}

static void ports_text(const struct sl_egress_rule *r, char *out, size_t size)
{
    if (!r->port_lo)
        out[0] = '\0';
    else if (r->port_lo == r->port_hi)
        snprintf(out, size, " meta l4proto { tcp, udp } th dport %u", r->port_lo);
    else
        snprintf(out, size, " meta l4proto { tcp, udp } th dport %u-%u", r->port_lo, r->port_hi);
}

/* The conntrack mark of slot's current network (never 0: unmarked). */
static unsigned mark_of(const struct sl_privnet *net, size_t slot)
{
    unsigned m = (unsigned)(net->slots[slot].seq & 0xffffffffu);
    return m ? m : 1;
}

static void chain_name(size_t slot, int layer, char *out, size_t size)
{
    snprintf(out, size, layer ? "sb%zub" : "sb%zu", slot);
}

/* The commands that make a layer's chain say `p` (the chain exists,
 * empty or not). Domain rules get sets <chain>_<i>; *n_sets is their
 * count. The policy layer asks the bound layer first when there is one. */
static void render_layer(struct sl_privnet *net, size_t slot, int layer,
                         const struct sl_egress_policy *p, bool bound_on, FILE *f, size_t *n_sets)
{
    const char *T = net->table;
    char c[24], a[INET_ADDRSTRLEN], ports[64];
    chain_name(slot, layer, c, sizeof(c));
    /* An allow of the bound only lets the policy decide. */
    const char *allow = layer ? "return" : "accept";
    fprintf(f, "flush chain inet %s %s\n", T, c);
    if (layer == 0) {
        addr_text(slot_addr(net, slot), a);
        /* A sandbox without CAP_NET_RAW cannot forge its source; belt and
         * braces, since the policy is chosen by it. */
        fprintf(f, "add rule inet %s %s ip saddr != %s drop\n", T, c, a);
        /* Its flows carry its network's mark: once the network is gone
         * (the mark out of @live) they are no one's, whoever gets the
         * address next (from_sandbox, to_sandbox). */
        fprintf(f, "add rule inet %s %s ct mark set %u\n", T, c, mark_of(net, slot));
        fprintf(f, "add rule inet %s %s ip daddr @never counter name sb%zu_denied drop\n", T, c,
                slot);
        if (bound_on)
            fprintf(f, "add rule inet %s %s jump sb%zub\n", T, c, slot);
    }
    size_t sets = 0;
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct sl_egress_rule *r = &p->allow[i];
        ports_text(r, ports, sizeof(ports));
        if (r->is_domain) {
            fprintf(f, "add set inet %s %s_%zu { type ipv4_addr; flags timeout; size %d; }\n", T,
                    c, sets, DOMAIN_SET_SIZE);
            /* A name never opens a private address (rebinding: an
             * allowed name answered with 10.0.0.5): only an address rule
             * does. */
            fprintf(f, "add rule inet %s %s ip daddr @%s_%zu ip daddr != @private%s %s\n", T, c,
                    c, sets, ports, allow);
            sets++;
        } else {
            char n[INET_ADDRSTRLEN];
            addr_text(r->addr, n);
            fprintf(f, "add rule inet %s %s ip daddr %s/%d%s %s\n", T, c, n, r->prefix, ports,
                    allow);
        }
    }
    /* Names denied are refused by the resolver; their addresses are not
     * known here. */
    for (size_t i = 0; i < p->n_deny; i++) {
        const struct sl_egress_rule *r = &p->deny[i];
        if (r->is_domain)
            continue;
        char n[INET_ADDRSTRLEN];
        addr_text(r->addr, n);
        ports_text(r, ports, sizeof(ports));
        fprintf(f, "add rule inet %s %s ip daddr %s/%d%s counter name sb%zu_denied drop\n", T, c,
                n, r->prefix, ports, slot);
    }
    fprintf(f, "add rule inet %s %s ip daddr @private counter name sb%zu_denied drop\n", T, c,
            slot);
    if (p->dflt == SL_EGRESS_DENY)
        fprintf(f, "add rule inet %s %s counter name sb%zu_denied drop\n", T, c, slot);
    else
        fprintf(f, "add rule inet %s %s %s\n", T, c, allow);
    *n_sets = sets;
}

/* Both layers of slot: the bound's chain first (made, or removed when
 * there is none any more), then the policy's. */
static void render_slot(struct sl_privnet *net, size_t slot, struct layer want[2], bool had_bound,
                        FILE *f)
{
    const char *T = net->table;
    fprintf(f, "flush chain inet %s sb%zu\n", T, slot); /* no jump to the bound left */
    if (want[1].on) {
        fprintf(f, "add chain inet %s sb%zub\n", T, slot);
        render_layer(net, slot, 1, &want[1].p, false, f, &want[1].n_sets);
    } else if (had_bound) {
        fprintf(f, "flush chain inet %s sb%zub\ndelete chain inet %s sb%zub\n", T, slot, T, slot);
    }
    render_layer(net, slot, 0, &want[0].p, want[1].on, f, &want[0].n_sets);
}

/* For each set of `layer` (its allow domain rules, in order) that covers
 * `name`: fn(set index). */
static size_t covering_sets(const struct layer *l, const char *name, size_t *out, size_t max)
{
    size_t set = 0, n = 0;
    for (size_t i = 0; l->on && i < l->p.n_allow; i++) {
        if (!l->p.allow[i].is_domain)
            continue;
        if (sl_egress_domain_matches(&l->p.allow[i], name) && n < max)
            out[n++] = set;
        set++;
    }
    return n;
}

/* The learned addresses of slot that an allow rule of `want` covers, back
 * into that rule's set with the time they have left. */
static void render_learned(struct sl_privnet *net, size_t slot, const struct slot *s,
                           const struct layer want[2], FILE *f)
{
    int64_t now = sl_mono_us();
    for (size_t k = 0; k < s->n_learned; k++) {
        const struct learned *l = &s->learned[k];
        if (l->expires_us <= now)
            continue;
        long left = (long)((l->expires_us - now) / 1000000) + 1;
        char a[INET_ADDRSTRLEN], c[24];
        addr_text(l->addr, a);
        for (int layer = 0; layer < 2; layer++) {
            size_t sets[SL_EGRESS_MAX_RULES];
            size_t n = covering_sets(&want[layer], l->name, sets, SL_EGRESS_MAX_RULES);
            chain_name(slot, layer, c, sizeof(c));
            for (size_t i = 0; i < n; i++)
                fprintf(f, "add element inet %s %s_%zu { %s timeout %lds }\n", net->table, c,
                        sets[i], a, left);
        }
    }
}

static void delete_sets(struct sl_privnet *net, size_t slot, const struct layer have[2], FILE *f)
{
    for (int layer = 0; layer < 2; layer++) {
        char c[24];
        chain_name(slot, layer, c, sizeof(c));
        for (size_t i = 0; have[layer].on && i < have[layer].n_sets; i++)
            fprintf(f, "delete set inet %s %s_%zu\n", net->table, c, i);
    }
}

static void layers_free(struct layer l[2])
{
    for (int i = 0; i < 2; i++) {
        sl_egress_free(&l[i].p);
        l[i] = (struct layer){0};
    }
}

/* want[0] = policy (NULL: the worker's default), want[1] = bound (NULL:
 * none). */
static int layers_copy(struct sl_privnet *net, struct layer want[2],
                       const struct sl_egress_policy *policy, const struct sl_egress_policy *bound)
{
    memset(want, 0, 2 * sizeof(*want));
    want[0].on = true;
    if (sl_egress_copy(&want[0].p, policy ? policy : &net->dflt) < 0)
        return -1;
    if (bound) {
        want[1].on = true;
        if (sl_egress_copy(&want[1].p, bound) < 0) {
            layers_free(want);
            return -1;
        }
    }
    return 0;
}

/* ---- the worker's table ------------------------------------------------------ */

/* The table of another live sandloomd with this subnet: refuse, rather
 * than take its sandboxes' rules away. */
/* The pid in the table's owner set (nft's JSON output has no table
 * comments to carry it): 0 when there is no table or no owner set. */
static int owner_pid(struct sl_privnet *net, long *pid, struct sl_error *err)
{
    *pid = 0;
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "list set inet %s owner", net->table);
    json_t *list = NULL;
    struct sl_error e = {0};
    if (sl_nft_list_json(net->nft, cmd, &list, &e) < 0)
        return e.errnum == ENOENT ? 0 : (*err = e, -1);
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item)
    {
        json_t *elem = json_object_get(json_object_get(item, "set"), "elem");
        if (json_array_size(elem) > 0 && json_is_integer(json_array_get(elem, 0)))
            *pid = (long)json_integer_value(json_array_get(elem, 0));
    }
    json_decref(list);
    return 0;
}

static bool pid_alive(long pid)
{
    return pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* The table of another live sandloomd with this subnet: refuse, rather
 * than take its sandboxes' rules away. */
static int check_not_in_use(struct sl_privnet *net, struct sl_error *err)
{
    long pid = 0;
    if (owner_pid(net, &pid, err) < 0)
        return -1;
    if (pid_alive(pid))
        return sl_error_set(err, SL_E_CONFIG, EBUSY,
                            "SANDBOX_PRIVATE_NETWORK_CIDR %s is in use by another sandloomd "
                            "(pid %ld, nftables table inet %s): give each worker on a host a "
                            "subnet of its own",
                            net->cidr, pid, net->table);
    return 0;
}

/* Forwarding must be on for sandbox traffic to leave. When it was off,
 * the host was no router: the guard chain keeps it one for nothing but
 * Sandloom's links (interface names "sl*"), and it stays on after us,
 * since another worker's sandboxes may be using it. */
static int enable_forwarding(bool *was_off, struct sl_error *err)
{
    *was_off = false;
    int fd = open("/proc/sys/net/ipv4/ip_forward", O_RDWR | O_CLOEXEC);
    char c = 0;
    if (fd < 0 || pread(fd, &c, 1, 0) != 1) {
        if (fd >= 0)
            close(fd);
        return sl_error_errno(err, SL_E_CONFIG, "cannot read net.ipv4.ip_forward");
    }
    if (c == '0') {
        *was_off = true;
        if (pwrite(fd, "1", 1, 0) != 1) {
            close(fd);
            return sl_error_errno(err, SL_E_CONFIG, "cannot turn on net.ipv4.ip_forward");
        }
    }
    close(fd);
    return 0;
}

static int install_table(struct sl_privnet *net, bool guard, struct sl_error *err)
{
    const char *T = net->table, *P = net->prefix;
    char gw[INET_ADDRSTRLEN];
    addr_text(net->gw, gw);
    struct text t;
    if (text_open(&t) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    FILE *f = t.f;
    /* add+delete: remove a table a dead worker left, in the same
     * transaction that makes ours. */
    fprintf(f, "add table inet %s\ndelete table inet %s\n", T, T);
    fprintf(f, "table inet %s {\n comment \"sandloomd pid %ld\"\n", T, (long)getpid());
    fprintf(f, " set owner { type mark; elements = { %ld } }\n", (long)getpid());
    fprintf(f, " set never { type ipv4_addr; flags interval; elements = { %s, %s } }\n", NEVER,
            net->cidr);
    fprintf(f, " set private { type ipv4_addr; flags interval; elements = { %s } }\n", PRIVATE);
    fprintf(f, " map sandboxes { type ifname : verdict; }\n");
    fprintf(f, " set live { type mark; }\n");
    fprintf(f, " chain forward { type filter hook forward priority filter - 5; policy accept;\n"
               "  iifname \"%s*\" jump from_sandbox\n  oifname \"%s*\" jump to_sandbox\n }\n",
            P, P);
    /* IPv4 only; the policy decides new connections (an open one goes on,
     * as in any stateful firewall: a name's learned address expiring, or a
     * policy change, never cuts a download in the middle); a link with no
     * entry in the map has no policy: dropped. */
    fprintf(f, " chain from_sandbox {\n  meta nfproto ipv6 drop\n"
               "  ct state established,related ct mark @live accept\n"
               "  iifname vmap @sandboxes\n  drop\n }\n");
    fprintf(f, " chain to_sandbox {\n  ct state established,related ct mark @live accept\n"
               "  drop\n }\n");
    fprintf(f, " chain input { type filter hook input priority filter - 5; policy accept;\n"
               "  iifname \"%s*\" jump sandbox_to_host\n }\n",
            P);
    fprintf(f,
            " chain sandbox_to_host {\n  ct state established,related accept\n"
            "  ip daddr %s udp dport 53 accept\n"
            /* The resolver serves UDP only: TCP DNS is refused at once,
             * never passed to a server of the host's. */
            "  ip daddr %s tcp dport 53 reject with tcp reset\n  drop\n }\n",
            gw, gw);
    /* Only the host's root (the daemon) opens connections into a sandbox. */
    fprintf(f,
            " chain output { type filter hook output priority filter - 5; policy accept;\n"
            "  oifname \"%s*\" ct state new meta skuid != 0 drop\n }\n",
            P);
    /* Every DNS packet a sandbox sends goes to the resolver, whatever
     * server it names. */
    fprintf(f,
            " chain dns { type nat hook prerouting priority dstnat; policy accept;\n"
            "  iifname \"%s*\" meta l4proto { tcp, udp } th dport 53 dnat ip to %s\n }\n",
            P, gw);
    fprintf(f,
            " chain out { type nat hook postrouting priority srcnat; policy accept;\n"
            "  ip saddr %s oifname != \"%s*\" masquerade\n }\n",
            net->cidr, P);
    if (guard)
        fprintf(f,
                " chain guard { type filter hook forward priority filter - 10; policy accept;\n"
                "  iifname != \"sl*\" oifname != \"sl*\" drop\n }\n");
    fprintf(f, "}\n");
    char *cmds = text_close(&t);
    if (!cmds)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    int rc = sl_nft_run(net->nft, cmds, "cannot install the private network's table", err);
    free(cmds);
    return rc;
}

static int parse_cidr(const char *text, uint32_t *base, int *prefix)
{
    char host[24];
    const char *slash = strchr(text, '/');
    if (!slash || (size_t)(slash - text) >= sizeof(host))
        return -1;
    memcpy(host, text, (size_t)(slash - text));
    host[slash - text] = '\0';
    char *end;
    long p = strtol(slash + 1, &end, 10);
    struct in_addr a;
    if (*end || p < 8 || p > 24 || inet_pton(AF_INET, host, &a) != 1)
        return -1;
    *prefix = (int)p;
    *base = ntohl(a.s_addr) & (~0u << (32 - p));
    return 0;
}

/* Name the subnet base/prefix in net: its text, tag, table and links. */
static void name_subnet(struct sl_privnet *net, uint32_t base, int prefix)
{
    net->base = base;
    net->gw = htonl(base + 1);
    /* The network address, the gateway and the broadcast address are no
     * sandbox's. */
    net->max_slots = ((size_t)1 << (32 - prefix)) - 3;
    struct in_addr b = {.s_addr = htonl(base)};
    char a[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &b, a, sizeof(a));
    snprintf(net->cidr, sizeof(net->cidr), "%s/%d", a, prefix);
    /* The tag names the table and the links: two workers on one host with
     * different subnets never touch each other's. */
    unsigned tag = text_hash(net->cidr) & 0xffff;
    snprintf(net->prefix, sizeof(net->prefix), "sl%04x", tag);
    snprintf(net->table, sizeof(net->table), "sandloom_%04x", tag);
}

/* Does base/prefix overlap a route of this host (/proc/net/route: every
 * interface's subnet and every route, main table)? */
static bool overlaps_a_route(uint32_t base, int prefix)
{
    FILE *f = fopen("/proc/net/route", "re");
    if (!f)
        return true; /* cannot tell: not this one */
    char line[256];
    bool hit = false;
    uint32_t mask = ~0u << (32 - prefix);
    while (!hit && fgets(line, sizeof(line), f)) {
        char ifname[32];
        unsigned dst, gw, flags, refcnt, use, metric, rmask;
        if (sscanf(line, "%31s %x %x %x %u %u %u %x", ifname, &dst, &gw, &flags, &refcnt, &use,
                   &metric, &rmask) != 8)
            continue; /* the heading */
        uint32_t d = ntohl(dst), m = ntohl(rmask);
        if (m == 0)
            continue; /* the default route overlaps everything */
        uint32_t both = mask & m;
        hit = (d & both) == (base & both);
    }
    fclose(f);
    return hit;
}

/* "auto": the first of 10.201.0.0/16 .. 10.250.0.0/16 that no route of
 * this host overlaps and no live worker holds, claimed by creating its
 * table (creation fails when another worker made it first, so two workers
 * starting at once never pick the same). */
static int claim_auto(struct sl_privnet *net, bool guard, struct sl_error *err)
{
    for (uint32_t second = 201; second <= 250; second++) {
        uint32_t base = (10u << 24) | (second << 16);
        if (overlaps_a_route(base, 16))
            continue;
        name_subnet(net, base, 16);
        struct sl_error e = {0};
        long pid = 0;
        if (owner_pid(net, &pid, &e) < 0 || pid_alive(pid))
            continue; /* a live worker's, or nftables could not say */
        char cmd[200];
        if (pid == 0) {
            /* No table: made with us as its owner; fails (EEXIST) for the
             * second of two workers starting now. */
            snprintf(cmd, sizeof(cmd),
                     "create table inet %s\nadd set inet %s owner { type mark; elements = { %ld "
                     "} }",
                     net->table, net->table, (long)getpid());
            if (sl_nft_run(net->nft, cmd, "claim", &e) == 0)
                return install_table(net, guard, err);
            if (e.errnum != EEXIST)
                return sl_error_set(err, SL_E_CONFIG, e.errnum, "%s", e.message);
            /* Made a moment ago by another, or a table with no owner (not
             * a worker's, or not ours to take): asked once more. */
            if (owner_pid(net, &pid, &e) < 0 || pid == 0 || pid_alive(pid))
                continue;
        }
        /* A dead worker's table: its owner replaced by us in one
         * transaction, which fails for all but one of several workers that
         * found it dead at once (the dead pid is gone after the first). */
        snprintf(cmd, sizeof(cmd),
                 "delete element inet %s owner { %ld }\nadd element inet %s owner { %ld }",
                 net->table, pid, net->table, (long)getpid());
        if (sl_nft_run(net->nft, cmd, "claim", &e) == 0)
            return install_table(net, guard, err);
    }
    return sl_error_set(err, SL_E_CONFIG, EADDRINUSE,
                        "SANDBOX_PRIVATE_NETWORK_CIDR=auto: every subnet from 10.201.0.0/16 to "
                        "10.250.0.0/16 is routed on this host or held by a running worker: set "
                        "one");
}

int sl_privnet_open(const struct sl_privnet_options *opt, struct sl_privnet **out,
                    struct sl_error *err)
{
    uint32_t base = 0;
    int prefix = 0;
    bool automatic = opt->cidr && strcmp(opt->cidr, "auto") == 0;
    if (!automatic && (!opt->cidr || parse_cidr(opt->cidr, &base, &prefix) < 0))
        return sl_error_set(err, SL_E_CONFIG, EINVAL,
                            "SANDBOX_PRIVATE_NETWORK_CIDR '%s' is not \"auto\" or an IPv4 network "
                            "from /8 to /24",
                            opt->cidr ? opt->cidr : "");
    struct sl_privnet *net = calloc(1, sizeof(*net));
    if (!net)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    pthread_mutex_init(&net->lock, NULL);
    if (!automatic)
        name_subnet(net, base, prefix);
    bool guard = false;
    if ((opt->dflt && sl_egress_copy(&net->dflt, opt->dflt) < 0)) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto fail;
    }
    if (sl_nft_open(&net->nft, err) < 0 || enable_forwarding(&guard, err) < 0)
        goto fail;
    net->guard = guard;
    if (automatic ? claim_auto(net, guard, err) < 0
                  : check_not_in_use(net, err) < 0 || install_table(net, guard, err) < 0)
        goto fail;
    *out = net;
    return 0;
fail:
    sl_nft_close(net->nft);
    sl_egress_free(&net->dflt);
    pthread_mutex_destroy(&net->lock);
    free(net);
    return -1;
}

void sl_privnet_close(struct sl_privnet *net)
{
    if (!net)
        return;
    struct sl_nl nl;
    struct sl_error err = {0};
    bool have_nl = sl_nl_open(&nl, -1, &err) == 0;
    for (size_t i = 0; i < net->n_slots; i++) {
        struct slot *s = &net->slots[i];
        if (s->used && have_nl)
            sl_nl_link_del(&nl, s->ifname, NULL);
        layers_free(s->layer);
        free(s->learned);
    }
    if (have_nl)
        sl_nl_close(&nl);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "delete table inet %s", net->table);
    if (sl_nft_run(net->nft, cmd, "cannot remove the private network's table", &err) < 0)
        sl_warn("%s", sl_error_text(&err));
    sl_nft_close(net->nft);
    sl_egress_free(&net->dflt);
    free(net->slots);
    pthread_mutex_destroy(&net->lock);
    free(net);
}

uint32_t sl_privnet_gateway(const struct sl_privnet *net)
{
    return net->gw;
}

const char *sl_privnet_cidr(const struct sl_privnet *net)
{
    return net->cidr;
}

const struct sl_egress_policy *sl_privnet_default(const struct sl_privnet *net)
{
    return &net->dflt;
}

/* ---- slots --------------------------------------------------------------------- */

/* A free slot, the lowest (under lock); -1 when the subnet is full. */
static int slot_take(struct sl_privnet *net, uid_t uid)
{
    size_t i = 0;
    while (i < net->n_slots && net->slots[i].used)
        i++;
    if (i == net->n_slots) {
        if (i == net->max_slots)
            return -1;
        struct slot *grown = realloc(net->slots, (i + 1) * sizeof(*grown));
        if (!grown)
            return -1;
        net->slots = grown;
        net->n_slots = i + 1;
    }
    struct slot *s = &net->slots[i];
    *s = (struct slot){.used = true, .uid = uid, .seq = ++net->seq};
    snprintf(s->ifname, sizeof(s->ifname), "%s%zu", net->prefix, i);
    return (int)i;
}

/* Under lock: the chains, the counter, the map entry, for want. */
static int install_slot(struct sl_privnet *net, size_t slot, struct layer want[2],
                        struct sl_error *err)
{
    struct slot *s = &net->slots[slot];
    struct text t;
    if (text_open(&t) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    const char *T = net->table;
    /* Whatever an earlier network of this slot left when its removal
     * failed goes first: its chains emptied (so nothing refers to the
     * counter), its bound chain removed; then a counter from zero (add,
     * delete, add: whether or not one was there). */
    fprintf(t.f, "add chain inet %s sb%zu\nflush chain inet %s sb%zu\n", T, slot, T, slot);
    fprintf(t.f, "add chain inet %s sb%zub\nflush chain inet %s sb%zub\n", T, slot, T, slot);
    fprintf(t.f, "delete chain inet %s sb%zub\n", T, slot);
    fprintf(t.f, "add counter inet %s sb%zu_denied\ndelete counter inet %s sb%zu_denied\n", T,
            slot, T, slot);
    fprintf(t.f, "add counter inet %s sb%zu_denied\n", T, slot);
    render_slot(net, slot, want, false, t.f);
    fprintf(t.f, "add element inet %s live { %u }\n", T, mark_of(net, slot));
    fprintf(t.f, "add element inet %s sandboxes { \"%s\" : jump sb%zu }\n", T, s->ifname, slot);
    char *cmds = text_close(&t);
    if (!cmds)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    int rc = sl_nft_run(net->nft, cmds, "cannot install the sandbox's egress policy", err);
    free(cmds);
    return rc;
}

static void uninstall_slot(struct sl_privnet *net, size_t slot)
{
    struct slot *s = &net->slots[slot];
    const char *T = net->table;
    struct text t;
    if (text_open(&t) < 0)
        return;
    fprintf(t.f, "delete element inet %s sandboxes { \"%s\" }\n", T, s->ifname);
    /* Its flows are no one's from now on (from_sandbox, to_sandbox). */
    fprintf(t.f, "delete element inet %s live { %u }\n", T, mark_of(net, slot));
    fprintf(t.f, "delete chain inet %s sb%zu\n", T, slot);
    if (s->layer[1].on)
        fprintf(t.f, "delete chain inet %s sb%zub\n", T, slot);
    delete_sets(net, slot, s->layer, t.f);
    fprintf(t.f, "delete counter inet %s sb%zu_denied\n", T, slot);
    char *cmds = text_close(&t);
    struct sl_error err = {0};
    if (cmds && sl_nft_run(net->nft, cmds, "cannot remove a sandbox's egress rules", &err) < 0)
        sl_warn("private network, %s: %s", s->ifname, sl_error_text(&err));
    free(cmds);
    s->installed = false;
}

/* The link: a veth pair, eth0 inside, routed both ways. */
static int make_link(struct sl_privnet *net, const char *ifname, int netns_fd, uint32_t addr,
                     struct sl_error *err)
{
    struct sl_nl here, there;
    if (sl_nl_open(&here, -1, err) < 0)
        return -1;
    if (sl_nl_open(&there, netns_fd, err) < 0) {
        sl_nl_close(&here);
        return -1;
    }
    int rc = -1, host, inside;
    struct sl_error first = {0};
    if (sl_nl_veth_add(&here, ifname, "eth0", netns_fd, 0, &first) < 0) {
        /* A link of this name left by a worker that died with its
         * sandboxes still up: it is no one's now. */
        if (first.errnum != EEXIST || sl_nl_link_del(&here, ifname, err) < 0 ||
            sl_nl_veth_add(&here, ifname, "eth0", netns_fd, 0, err) < 0) {
            if (first.errnum != EEXIST && err)
                *err = first;
            goto out;
        }
    }
    /* eth0's index: not always 2 (a host with tunnel modules loaded gives
     * every new namespace tunl0 and sit0 first). */
    if ((host = sl_nl_ifindex(&here, ifname, err)) < 0 ||
        (inside = sl_nl_ifindex(&there, "eth0", err)) < 0 ||
        sl_nl_addr4_add(&here, host, net->gw, 32, err) < 0 || sl_nl_link_up(&here, host, err) < 0 ||
        sl_nl_route4_add(&here, addr, 32, host, 0, err) < 0 ||
        sl_nl_addr4_add(&there, inside, addr, 32, err) < 0 ||
        sl_nl_link_up(&there, inside, err) < 0 ||
        sl_nl_route4_add(&there, 0, 0, inside, net->gw, err) < 0) {
        sl_nl_link_del(&here, ifname, NULL);
        goto out;
    }
    rc = 0;
out:
    sl_nl_close(&there);
    sl_nl_close(&here);
    return rc;
}

int sl_privnet_attach(struct sl_privnet *net, uid_t uid, int netns_fd,
                      const struct sl_egress_policy *policy, const struct sl_egress_policy *bound,
                      struct sl_error *err)
{
    struct layer want[2];
    if (layers_copy(net, want, policy, bound) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    pthread_mutex_lock(&net->lock);
    int slot = slot_take(net, uid);
    if (slot < 0) {
        pthread_mutex_unlock(&net->lock);
        layers_free(want);
        return sl_error_set(err, SL_E_RUNTIME, ENOSPC,
                            "the private network %s has no free address", net->cidr);
    }
    struct slot *s = &net->slots[slot];
    char ifname[sizeof(s->ifname)];
    snprintf(ifname, sizeof(ifname), "%s", s->ifname);
    /* The rules first: there is never a link without them. A failed
     * install left nothing (one transaction). */
    int rc = install_slot(net, (size_t)slot, want, err);
    bool installed = rc == 0;
    memcpy(s->layer, want, sizeof(want)); /* owned by the slot now */
    /* Installed: a policy change from now on reaches it (set_policy), even
     * while its link is being made. */
    s->installed = installed;
    pthread_mutex_unlock(&net->lock);
    if (rc == 0)
        rc = make_link(net, ifname, netns_fd, slot_addr(net, (size_t)slot), err);
    pthread_mutex_lock(&net->lock);
    s = &net->slots[slot]; /* the array may have moved */
    if (rc == 0 && !s->installed) {
        /* Cut off while its link was being made (a policy change that
         * could not be installed): the link goes too. */
        struct sl_nl nl;
        if (sl_nl_open(&nl, -1, err) == 0) {
            sl_nl_link_del(&nl, ifname, NULL);
            sl_nl_close(&nl);
        }
        rc = sl_error_set(err, SL_E_RUNTIME, ECANCELED, "%s", s->error);
        installed = false;
    }
    if (rc == 0) {
        s->attached = true;
    } else {
        if (!s->error[0])
            snprintf(s->error, sizeof(s->error), "%s", sl_error_text(err));
        if (installed && s->installed)
            uninstall_slot(net, (size_t)slot);
        layers_free(s->layer);
    }
    pthread_mutex_unlock(&net->lock);
    return slot;
}

void sl_privnet_detach(struct sl_privnet *net, int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&net->lock);
    if ((size_t)slot >= net->n_slots || !net->slots[slot].used) {
        pthread_mutex_unlock(&net->lock);
        return;
    }
    struct slot *s = &net->slots[slot];
    char ifname[sizeof(s->ifname)];
    snprintf(ifname, sizeof(ifname), "%s", s->ifname);
    bool attached = s->attached;
    s->attached = false;
    pthread_mutex_unlock(&net->lock);
    /* The link first (it usually went with its namespace already), the
     * rules after it: never a link without rules. */
    if (attached) {
        struct sl_nl nl;
        struct sl_error err = {0};
        if (sl_nl_open(&nl, -1, &err) < 0 || sl_nl_link_del(&nl, ifname, &err) < 0)
            sl_warn("private network: cannot remove %s: %s", ifname, sl_error_text(&err));
        if (nl.fd >= 0)
            sl_nl_close(&nl);
    }
    pthread_mutex_lock(&net->lock);
    s = &net->slots[slot];
    if (s->installed)
        uninstall_slot(net, (size_t)slot);
    layers_free(s->layer);
    free(s->learned);
    *s = (struct slot){0};
    pthread_mutex_unlock(&net->lock);
}

/* Under lock: cut slot off (its link goes; the map entry with it). */
static void cut_off(struct sl_privnet *net, size_t slot, const char *why)
{
    struct slot *s = &net->slots[slot];
    struct sl_nl nl;
    struct sl_error err = {0};
    if (sl_nl_open(&nl, -1, &err) == 0) {
        sl_nl_link_del(&nl, s->ifname, NULL);
        sl_nl_close(&nl);
    }
    uninstall_slot(net, slot);
    layers_free(s->layer);
    s->attached = false;
    snprintf(s->error, sizeof(s->error), "%s", why);
}

int sl_privnet_set_policy(struct sl_privnet *net, uid_t uid, const struct sl_egress_policy *policy,
                          const struct sl_egress_policy *bound, struct sl_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&net->lock);
    for (size_t i = 0; i < net->n_slots; i++) {
        struct slot *s = &net->slots[i];
        if (!s->used || !s->installed || s->uid != uid)
            continue;
        struct layer want[2];
        struct text t;
        if (layers_copy(net, want, policy, bound) < 0) {
            rc = sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            cut_off(net, i, "out of memory while changing its egress policy");
            continue;
        }
        if (sl_egress_equal(&want[0].p, &s->layer[0].p) && want[1].on == s->layer[1].on &&
            (!want[1].on || sl_egress_equal(&want[1].p, &s->layer[1].p))) {
            layers_free(want); /* nothing to change */
            continue;
        }
        if (text_open(&t) < 0) {
            layers_free(want);
            rc = sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            cut_off(net, i, "out of memory while changing its egress policy");
            continue;
        }
        /* One transaction: the old rules, then the old sets (no rule
         * refers to them once the chains are flushed), the new ones, and
         * what was learned that the new rules cover. */
        fprintf(t.f, "flush chain inet %s sb%zu\n", net->table, i);
        if (s->layer[1].on)
            fprintf(t.f, "flush chain inet %s sb%zub\n", net->table, i);
        delete_sets(net, i, s->layer, t.f);
        render_slot(net, i, want, s->layer[1].on, t.f);
        render_learned(net, i, s, want, t.f);
        char *cmds = text_close(&t);
        struct sl_error e = {0};
        if (cmds && sl_nft_run(net->nft, cmds, "cannot change the sandbox's egress policy", &e) == 0) {
            layers_free(s->layer);
            memcpy(s->layer, want, sizeof(want));
            s->error[0] = '\0';
        } else {
            layers_free(want);
            if (!cmds)
                sl_error_set(&e, SL_E_INTERNAL, ENOMEM, "out of memory");
            /* Fail closed: the old policy is not what was asked. */
            cut_off(net, i, sl_error_text(&e));
            rc = -1;
            if (err)
                *err = e;
        }
        free(cmds);
    }
    pthread_mutex_unlock(&net->lock);
    return rc;
}

static uint64_t denied_packets(struct sl_privnet *net, size_t slot)
{
    char name[32];
    snprintf(name, sizeof(name), "sb%zu_denied", slot);
    uint64_t packets = 0;
    struct sl_error err = {0};
    (void)sl_nft_counter_packets(net->nft, net->table, name, &packets, &err);
    return packets;
}

bool sl_privnet_status(struct sl_privnet *net, uid_t uid, struct sl_privnet_status *out)
{
    memset(out, 0, sizeof(*out));
    bool found = false;
    pthread_mutex_lock(&net->lock);
    size_t best = 0;
    for (size_t i = 0; i < net->n_slots; i++) {
        const struct slot *s = &net->slots[i];
        if (s->used && s->uid == uid && (!found || s->seq > net->slots[best].seq)) {
            best = i;
            found = true;
        }
    }
    if (found) {
        const struct slot *s = &net->slots[best];
        out->attached = s->attached;
        if (s->attached)
            addr_text(slot_addr(net, best), out->address);
        snprintf(out->error, sizeof(out->error), "%s", s->error);
        out->refused_names = s->refused;
        out->denied_packets = s->attached ? denied_packets(net, best) : 0;
    }
    pthread_mutex_unlock(&net->lock);
    return found;
}

int sl_privnet_check(struct sl_privnet *net, struct sl_error *err)
{
    /* Its base and policy chains: each asked of the kernel (cheap, and not
     * growing with the table). */
    static const char *const chains[] = {"forward", "from_sandbox", "to_sandbox", "input",
                                         "sandbox_to_host", "output", "dns", "out"};
    struct sl_error e = {0};
    pthread_mutex_lock(&net->lock);
    int missing = 0;
    for (size_t i = 0; i < sizeof(chains) / sizeof(chains[0]) && !missing; i++) {
        int r = sl_nft_chain_exists(net->nft, net->table, chains[i], &e);
        if (r < 0) {
            pthread_mutex_unlock(&net->lock);
            return 0; /* nftables could not say: nothing to act on */
        }
        missing = r == 0;
    }
    if (!missing) {
        pthread_mutex_unlock(&net->lock);
        return 0;
    }
    size_t cut = 0;
    for (size_t i = 0; i < net->n_slots; i++) {
        struct slot *s = &net->slots[i];
        if (!s->used || !s->attached)
            continue;
        struct sl_nl nl;
        struct sl_error ne = {0};
        if (sl_nl_open(&nl, -1, &ne) == 0) {
            sl_nl_link_del(&nl, s->ifname, NULL);
            sl_nl_close(&nl);
        }
        layers_free(s->layer);
        s->attached = s->installed = false;
        snprintf(s->error, sizeof(s->error),
                 "the private network's nftables table was removed: cut off until its next "
                 "session");
        cut++;
    }
    bool was_off = false;
    struct sl_error ie = {0};
    if (enable_forwarding(&was_off, &ie) < 0 || install_table(net, net->guard || was_off, &ie) < 0)
        sl_warn("private network: cannot make its table again: %s", sl_error_text(&ie));
    net->guard = net->guard || was_off;
    pthread_mutex_unlock(&net->lock);
    return sl_error_set(err, SL_E_RUNTIME, ENOENT,
                        "the private network's nftables table inet %s lost its chains: %zu "
                        "sandbox links cut off, the table made again",
                        net->table, cut);
}

size_t sl_privnet_connected(struct sl_privnet *net)
{
    size_t n = 0;
    pthread_mutex_lock(&net->lock);
    for (size_t i = 0; i < net->n_slots; i++)
        n += net->slots[i].used && net->slots[i].attached;
    pthread_mutex_unlock(&net->lock);
    return n;
}

static void *try_netns(void *arg)
{
    *(int *)arg = unshare(CLONE_NEWNET) == 0 ? 0 : errno;
    return NULL;
}

void sl_net_modes_probe(struct sl_net_modes *out)
{
    memset(out, 0, sizeof(*out));
    out->host = true;
    int e = EAGAIN;
    pthread_t t;
    /* A thread of its own: the namespace goes with it. */
    if (pthread_create(&t, NULL, try_netns, &e) == 0)
        pthread_join(t, NULL);
    if (e != 0) {
        snprintf(out->why, sizeof(out->why), "isolated: cannot make a network namespace: %s",
                 strerror(e));
        return;
    }
    out->isolated = true;
    if (access("/proc/sys/net/ipv4/ip_forward", W_OK) < 0) {
        snprintf(out->why, sizeof(out->why),
                 "private: cannot turn on net.ipv4.ip_forward (%s): run as root", strerror(errno));
        return;
    }
    struct sl_nft *nft = NULL;
    struct sl_error err = {0};
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "add table inet sandloom_probe_%d\ndelete table inet sandloom_probe_%d",
             (int)getpid(), (int)getpid());
    if (sl_nft_open(&nft, &err) < 0 || sl_nft_run(nft, cmd, "nftables", &err) < 0) {
        snprintf(out->why, sizeof(out->why), "private: %s", sl_error_text(&err));
        sl_nft_close(nft);
        return;
    }
    sl_nft_close(nft);
    out->private_mode = true;
}

/* ---- for the resolver ------------------------------------------------------- */

/* The slot of a sandbox address (under lock); NULL when none is there. */
static struct slot *slot_of(struct sl_privnet *net, uint32_t src, size_t *index)
{
    uint32_t h = ntohl(src);
    if (h < net->base + 2)
        return NULL;
    size_t i = h - net->base - 2;
    if (i >= net->n_slots || !net->slots[i].used || !net->slots[i].attached)
        return NULL;
    *index = i;
    return &net->slots[i];
}

enum sl_egress_answer sl_privnet_answer_for(struct sl_privnet *net, uint32_t src,
                                            const char *name)
{
    pthread_mutex_lock(&net->lock);
    size_t i;
    struct slot *s = slot_of(net, src, &i);
    enum sl_egress_answer a = SL_EGRESS_REFUSE;
    if (s) {
        /* Refused by either layer: refused; learned if either learns. */
        a = sl_egress_answer_for(&s->layer[0].p, name);
        if (s->layer[1].on) {
            enum sl_egress_answer b = sl_egress_answer_for(&s->layer[1].p, name);
            if (b == SL_EGRESS_REFUSE || a == SL_EGRESS_REFUSE)
                a = SL_EGRESS_REFUSE;
            else if (b == SL_EGRESS_LEARN)
                a = SL_EGRESS_LEARN;
        }
        if (a == SL_EGRESS_REFUSE)
            s->refused++;
    }
    pthread_mutex_unlock(&net->lock);
    return a;
}

/* Keep a learned address for a later policy change (under lock). The
 * copy grows as the sandbox learns, up to a ring of LEARNED_MAX. */
static void remember(struct slot *s, const char *name, uint32_t addr, int64_t expires_us)
{
    if (s->n_learned == s->cap_learned && s->cap_learned < LEARNED_MAX) {
        size_t cap = s->cap_learned ? s->cap_learned * 2 : 8;
        struct learned *grown = realloc(s->learned, cap * sizeof(*grown));
        if (!grown)
            return;
        s->learned = grown;
        s->cap_learned = cap;
    }
    if (!s->cap_learned)
        return;
    size_t at = s->n_learned < s->cap_learned ? s->n_learned++ : s->next_learned;
    s->next_learned = (at + 1) % s->cap_learned;
    struct learned *l = &s->learned[at];
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->addr = addr;
    l->expires_us = expires_us;
}

void sl_privnet_learn(struct sl_privnet *net, uint32_t src, const char *name,
                      const uint32_t *addrs, const uint32_t *ttls, size_t n)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&net->lock);
    size_t slot;
    struct slot *s = slot_of(net, src, &slot);
    struct text t;
    if (!s || text_open(&t) < 0) {
        pthread_mutex_unlock(&net->lock);
        return;
    }
    int64_t now = sl_mono_us();
    bool any = false;
    for (size_t k = 0; k < n; k++) {
        long ttl = ttls[k] < LEARN_MIN_SECONDS   ? LEARN_MIN_SECONDS
                   : ttls[k] > LEARN_MAX_SECONDS ? LEARN_MAX_SECONDS
                                                 : (long)ttls[k];
        char a[INET_ADDRSTRLEN], c[24];
        addr_text(addrs[k], a);
        for (int layer = 0; layer < 2; layer++) {
            size_t sets[SL_EGRESS_MAX_RULES];
            size_t m = covering_sets(&s->layer[layer], name, sets, SL_EGRESS_MAX_RULES);
            chain_name(slot, layer, c, sizeof(c));
            for (size_t i = 0; i < m; i++) {
                /* "add" keeps an existing element's older timeout; add,
                 * delete, add in one transaction renews it. */
                fprintf(t.f, "add element inet %s %s_%zu { %s }\n", net->table, c, sets[i], a);
                fprintf(t.f, "delete element inet %s %s_%zu { %s }\n", net->table, c, sets[i], a);
                fprintf(t.f, "add element inet %s %s_%zu { %s timeout %lds }\n", net->table, c,
                        sets[i], a, ttl);
                any = true;
            }
        }
        remember(s, name, addrs[k], now + (int64_t)ttl * 1000000);
    }
    char *cmds = text_close(&t);
    struct sl_error err = {0};
    if (any && cmds && sl_nft_run(net->nft, cmds, "cannot learn a name's addresses", &err) < 0)
        sl_warn("private network, %s, name %s: %s", s->ifname, name, sl_error_text(&err));
    free(cmds);
    pthread_mutex_unlock(&net->lock);
}
