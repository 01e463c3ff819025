#include "net/resolver.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define RESOLVER_TIMEOUT_US (5 * 1000000LL)
#define PENDING_MAX 4096 /* queries waiting for upstream at once */
#define MAX_UPSTREAMS 4
#define DNS_MAX 4096     /* a datagram: EDNS0's usual payload size */
#define MAX_ADDRS 64     /* A records learned from one answer */
#define PENDING_PER_SOURCE 64 /* one sandbox's queries waiting at once: none starves the others */

enum { T_A = 1, T_AAAA = 28, C_IN = 1, RCODE_SERVFAIL = 2, RCODE_REFUSED = 5 };

struct pending {
    bool used;
    uint16_t id;        /* sent upstream: random */
    uint16_t qtype;
    uint16_t client_id;
    struct sockaddr_in client;
    bool learn;
    int64_t deadline_us;
    char name[256];
};

struct sl_resolver {
    struct sl_privnet *net;
    struct sl_resolver_upstream up[MAX_UPSTREAMS];
    size_t n_up, current; /* current: the server asked; moves on after a timeout */
    int listen_fd, upstream_fd, wake_fd, epfd;
    pthread_t thread;
    atomic_bool stopping;
    struct pending pending[PENDING_MAX]; /* indexed by the id sent upstream */
    uint16_t next_id;
};

/* ---- upstream servers ----------------------------------------------------- */

static int upstream_parse(const char *text, struct sl_resolver_upstream *out)
{
    char host[64];
    snprintf(host, sizeof(host), "%s", text);
    out->port = 53;
    char *colon = strchr(host, ':');
    if (colon) {
        *colon = '\0';
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 1 || p > 65535)
            return -1;
        out->port = (uint16_t)p;
    }
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) != 1)
        return -1;
    out->addr = a.s_addr;
    return 0;
}

int sl_resolver_upstreams(const char *const *texts, size_t n, struct sl_resolver_upstream *out,
                          size_t max, size_t *count, struct sl_error *err)
{
    *count = 0;
    for (size_t i = 0; i < n && *count < max; i++) {
        if (upstream_parse(texts[i], &out[*count]) < 0)
            return sl_error_set(err, SL_E_CONFIG, EINVAL,
                                "SANDBOX_DNS_SERVERS: '%.64s' is not an IPv4 address with an "
                                "optional :port",
                                texts[i]);
        (*count)++;
    }
    if (n > 0)
        return 0;
    FILE *f = fopen("/etc/resolv.conf", "re");
    if (!f)
        return sl_error_errno(err, SL_E_CONFIG,
                              "no DNS server for the private network: /etc/resolv.conf cannot "
                              "be read and SANDBOX_DNS_SERVERS is empty");
    char line[256];
    while (fgets(line, sizeof(line), f) && *count < max) {
        char ns[64];
        if (sscanf(line, " nameserver %63s", ns) == 1 && !strchr(ns, ':') &&
            upstream_parse(ns, &out[*count]) == 0)
            (*count)++;
    }
    fclose(f);
    if (*count == 0)
        return sl_error_set(err, SL_E_CONFIG, ENOENT,
                            "no DNS server for the private network: /etc/resolv.conf names no "
                            "IPv4 nameserver and SANDBOX_DNS_SERVERS is empty");
    return 0;
}

/* ---- the wire format --------------------------------------------------------- */

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* The question's name as text (lower case, no trailing dot) and the
 * offset after its type and class; -1 when the message is not one plain
 * question (of a query, or of an answer), -2 when a label holds a byte no
 * host name has. */
static int parse_question(const uint8_t *m, size_t len, bool answer, char *name, size_t size,
                          uint16_t *qtype, size_t *end)
{
    if (len < 12 || get16(m + 4) != 1 || ((m[2] & 0x80) != 0) != answer)
        return -1;
    size_t at = 12, out = 0;
    for (;;) {
        if (at >= len)
            return -1;
        uint8_t l = m[at++];
        if (l == 0)
            break;
        if (l > 63 || at + l > len || out + l + 2 > size)
            return -1; /* a pointer or an overlong label: not in a question */
        if (out)
            name[out++] = '.';
        for (uint8_t i = 0; i < l; i++) {
            /* A host name's bytes only: a NUL or a dot inside a label
             * would make the text name another name than the one
             * upstream resolves ("allowed.test\0.attacker.example"). */
            unsigned char c = m[at + i];
            if (!(isalnum(c) || c == '-' || c == '_'))
                return -2;
            name[out++] = (char)tolower(c);
        }
        at += l;
    }
    name[out] = '\0';
    if (at + 4 > len)
        return -1;
    *qtype = get16(m + at);
    *end = at + 4;
    return 0;
}

/* Skip a (possibly compressed) name; the offset after it, or 0. */
static size_t skip_name(const uint8_t *m, size_t len, size_t at)
{
    for (int hops = 0; hops < 128; hops++) {
        if (at >= len)
            return 0;
        uint8_t l = m[at];
        if (l == 0)
            return at + 1;
        if ((l & 0xc0) == 0xc0)
            return at + 2 <= len ? at + 2 : 0;
        at += 1 + l;
    }
    return 0;
}

/* The A records of an answer's answer section. */
static size_t answer_addrs(const uint8_t *m, size_t len, uint32_t *addrs, uint32_t *ttls,
                           size_t max)
{
    if (len < 12)
        return 0;
    uint16_t qd = get16(m + 4), an = get16(m + 6);
    size_t at = 12, n = 0;
    for (uint16_t i = 0; i < qd; i++) {
        at = skip_name(m, len, at);
        if (!at || at + 4 > len)
            return 0;
        at += 4;
    }
    for (uint16_t i = 0; i < an && n < max; i++) {
        at = skip_name(m, len, at);
        if (!at || at + 10 > len)
            break;
        uint16_t type = get16(m + at), cls = get16(m + at + 2), rdlen = get16(m + at + 8);
        uint32_t ttl = (uint32_t)get16(m + at + 4) << 16 | get16(m + at + 6);
        at += 10;
        if (at + rdlen > len)
            break;
        if (type == T_A && cls == C_IN && rdlen == 4) {
            memcpy(&addrs[n], m + at, 4);
            ttls[n++] = ttl;
        }
        at += rdlen;
    }
    return n;
}

/* An answer made here: the query's header and question, no records. */
static void reply_empty(struct sl_resolver *r, const uint8_t *q, size_t qend,
                        const struct sockaddr_in *to, int rcode)
{
    uint8_t m[512];
    if (qend > sizeof(m))
        return;
    memcpy(m, q, qend);
    m[2] = (uint8_t)(0x80 | (q[2] & 0x79)); /* QR, the opcode and RD kept */
    m[3] = (uint8_t)(0x80 | rcode);         /* RA */
    put16(m + 6, 0);
    put16(m + 8, 0);
    put16(m + 10, 0);
    (void)sendto(r->listen_fd, m, qend, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(*to));
}

/* ---- the loop -------------------------------------------------------------------- */

static void on_query(struct sl_resolver *r, uint8_t *m, size_t len, const struct sockaddr_in *from)
{
    char name[256];
    uint16_t qtype;
    size_t qend;
    int parsed = parse_question(m, len, false, name, sizeof(name), &qtype, &qend);
    if (parsed == -2) {
        /* A name no policy could be asked about: refused, counted. */
        (void)sl_privnet_answer_for(r->net, from->sin_addr.s_addr, "");
        uint8_t h[12];
        memcpy(h, m, 12);
        h[2] = (uint8_t)(0x80 | (m[2] & 0x79));
        h[3] = 0x80 | RCODE_REFUSED;
        memset(h + 4, 0, 8);
        (void)sendto(r->listen_fd, h, 12, MSG_DONTWAIT, (const struct sockaddr *)from,
                     sizeof(*from));
        return;
    }
    if (parsed < 0)
        return; /* not a query we answer: dropped, as a server would */
    enum sl_egress_answer a = sl_privnet_answer_for(r->net, from->sin_addr.s_addr, name);
    if (a == SL_EGRESS_REFUSE) {
        reply_empty(r, m, qend, from, RCODE_REFUSED);
        return;
    }
    if (qtype == T_AAAA) {
        reply_empty(r, m, qend, from, 0);
        return;
    }
    /* A free entry, if this sandbox has not too many waiting, and an id
     * for upstream: 16 random bits no waiting query has. */
    struct pending *p = NULL;
    size_t mine = 0;
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (!r->pending[i].used)
            p = p ? p : &r->pending[i];
        else if (r->pending[i].client.sin_addr.s_addr == from->sin_addr.s_addr)
            mine++;
    }
    uint16_t id = 0;
    for (int tries = 0; p && tries < 8; tries++) {
        if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
            id = (uint16_t)(sl_mono_us() ^ (uint64_t)tries);
        bool taken = false;
        for (size_t i = 0; i < PENDING_MAX && !taken; i++)
            taken = r->pending[i].used && r->pending[i].id == id;
        if (!taken)
            break;
    }
    if (!p || mine >= PENDING_PER_SOURCE) {
        reply_empty(r, m, qend, from, RCODE_SERVFAIL);
        return;
    }
    *p = (struct pending){.used = true,
                          .id = id,
                          .qtype = qtype,
                          .client_id = get16(m),
                          .client = *from,
                          .learn = a == SL_EGRESS_LEARN,
                          .deadline_us = sl_mono_us() + RESOLVER_TIMEOUT_US};
    snprintf(p->name, sizeof(p->name), "%s", name);
    put16(m, id);
    const struct sl_resolver_upstream *u = &r->up[r->current];
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(u->port),
                             .sin_addr.s_addr = u->addr};
    if (sendto(r->upstream_fd, m, len, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to)) < 0) {
        p->used = false;
        put16(m, p->client_id);
        reply_empty(r, m, qend, from, RCODE_SERVFAIL);
    }
}

static void on_answer(struct sl_resolver *r, uint8_t *m, size_t len, const struct sockaddr_in *from)
{
    if (len < 12)
        return;
    bool known = false;
    for (size_t i = 0; i < r->n_up; i++)
        if (r->up[i].addr == from->sin_addr.s_addr && htons(r->up[i].port) == from->sin_port)
            known = true;
    uint16_t id = get16(m);
    struct pending *p = NULL;
    for (size_t i = 0; i < PENDING_MAX && !p; i++)
        if (r->pending[i].used && r->pending[i].id == id)
            p = &r->pending[i];
    if (!known || !p)
        return; /* not an answer to us: a late or forged one */
    /* The answer must be to the question asked: its addresses are
     * learned under that name. */
    char name[256];
    uint16_t qtype;
    size_t qend;
    if (parse_question(m, len, true, name, sizeof(name), &qtype, &qend) < 0 ||
        strcmp(name, p->name) != 0 || qtype != p->qtype)
        return;
    p->used = false;
    if (p->learn) {
        uint32_t addrs[MAX_ADDRS], ttls[MAX_ADDRS];
        size_t n = answer_addrs(m, len, addrs, ttls, MAX_ADDRS);
        sl_privnet_learn(r->net, p->client.sin_addr.s_addr, p->name, addrs, ttls, n);
    }
    put16(m, p->client_id);
    (void)sendto(r->listen_fd, m, len, MSG_DONTWAIT, (struct sockaddr *)&p->client,
                 sizeof(p->client));
}

static void expire(struct sl_resolver *r)
{
    int64_t now = sl_mono_us();
    bool timed_out = false;
    for (size_t i = 0; i < PENDING_MAX; i++)
        if (r->pending[i].used && r->pending[i].deadline_us <= now) {
            r->pending[i].used = false;
            timed_out = true;
        }
    /* The server did not answer: the next query goes to the next one. */
    if (timed_out && r->n_up > 1)
        r->current = (r->current + 1) % r->n_up;
}

static void *resolver_thread(void *arg)
{
    struct sl_resolver *r = arg;
    uint8_t *buf = malloc(DNS_MAX);
    if (!buf)
        return NULL;
    int64_t next_sweep = sl_mono_us() + 1000000;
    while (!atomic_load(&r->stopping)) {
        struct epoll_event ev[16];
        int n = epoll_wait(r->epfd, ev, 16, 1000);
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            if (fd == r->wake_fd)
                continue;
            for (int k = 0; k < 64; k++) {
                struct sockaddr_in from;
                socklen_t fl = sizeof(from);
                ssize_t len = recvfrom(fd, buf, DNS_MAX, MSG_DONTWAIT | MSG_TRUNC,
                                       (struct sockaddr *)&from, &fl);
                if (len < 0)
                    break;
                if (len > DNS_MAX)
                    continue; /* cut short: never passed on broken */
                if (fd == r->listen_fd)
                    on_query(r, buf, (size_t)len, &from);
                else
                    on_answer(r, buf, (size_t)len, &from);
            }
        }
        if (sl_mono_us() >= next_sweep) {
            expire(r);
            next_sweep = sl_mono_us() + 1000000;
        }
    }
    free(buf);
    return NULL;
}

static int udp_socket(uint32_t addr, uint16_t port, bool freebind, struct sl_error *err)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return sl_error_errno(err, SL_E_CONFIG, "resolver: cannot make a socket");
    int one = 1;
    /* The gateway address is on the sandboxes' links, and there may be
     * none yet. */
    if (freebind)
        (void)setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = addr};
    if (bind(fd, (struct sockaddr *)&at, sizeof(at)) < 0) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &addr, a, sizeof(a));
        sl_error_errno(err, SL_E_CONFIG, "resolver: cannot bind %s:%u", a, port);
        close(fd);
        return -1;
    }
    return fd;
}

int sl_resolver_start(struct sl_privnet *net, const struct sl_resolver_upstream *up, size_t n_up,
                      struct sl_resolver **out, struct sl_error *err)
{
    if (n_up == 0)
        return sl_error_set(err, SL_E_CONFIG, EINVAL, "resolver: no upstream DNS server");
    struct sl_resolver *r = calloc(1, sizeof(*r));
    if (!r)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    r->net = net;
    r->n_up = n_up < MAX_UPSTREAMS ? n_up : MAX_UPSTREAMS;
    memcpy(r->up, up, r->n_up * sizeof(*up));
    r->listen_fd = r->upstream_fd = r->wake_fd = r->epfd = -1;
    if ((r->listen_fd = udp_socket(sl_privnet_gateway(net), 53, true, err)) < 0 ||
        (r->upstream_fd = udp_socket(htonl(INADDR_ANY), 0, false, err)) < 0)
        goto fail;
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->wake_fd < 0 || r->epfd < 0) {
        sl_error_errno(err, SL_E_CONFIG, "resolver: cannot make its epoll set");
        goto fail;
    }
    int fds[] = {r->listen_fd, r->upstream_fd, r->wake_fd};
    for (size_t i = 0; i < 3; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
            sl_error_errno(err, SL_E_CONFIG, "resolver: epoll_ctl");
            goto fail;
        }
    }
    int rc = pthread_create(&r->thread, NULL, resolver_thread, r);
    if (rc != 0) {
        errno = rc;
        sl_error_errno(err, SL_E_CONFIG, "resolver: cannot start its thread");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    if (r->upstream_fd >= 0)
        close(r->upstream_fd);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    if (r->epfd >= 0)
        close(r->epfd);
    free(r);
    return -1;
}

void sl_resolver_stop(struct sl_resolver *r)
{
    if (!r)
        return;
    atomic_store(&r->stopping, true);
    uint64_t one = 1;
    (void)!write(r->wake_fd, &one, sizeof(one));
    pthread_join(r->thread, NULL);
    close(r->listen_fd);
    close(r->upstream_fd);
    close(r->wake_fd);
    close(r->epfd);
    free(r);
}
