#include "net/nft.h"

#include <endian.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <nftables/libnftables.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_nft {
    struct nft_ctx *ctx;
    int nl_fd;     /* NETLINK_NETFILTER, for counter reads; -1 until the first */
    uint32_t seq;
};

/* Reverse lookups of addresses and services in listings would ask DNS.
 * JSON output is set for listings only: with it on, libnftables tries to
 * read every command as JSON first. */
#define OUTPUT_FLAGS NFT_CTX_OUTPUT_NUMERIC_ALL

/* One context for the owner's life, made at startup: libnftables waits for
 * the kernel's answers with select(), which aborts on a descriptor above
 * FD_SETSIZE, and a daemon with a thousand sessions holds more than that;
 * the context's socket, opened first, stays below. (Its copy of the
 * ruleset, ~85 KiB a sandbox, is the price: docs/PERFORMANCE.md.) */
int sl_nft_open(struct sl_nft **out, struct sl_error *err)
{
    struct sl_nft *n = calloc(1, sizeof(*n));
    if (!n)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    n->nl_fd = -1;
    n->ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!n->ctx || nft_ctx_buffer_output(n->ctx) < 0 || nft_ctx_buffer_error(n->ctx) < 0) {
        sl_nft_close(n);
        return sl_error_set(err, SL_E_RUNTIME, ENOMEM, "cannot start libnftables");
    }
    nft_ctx_output_set_flags(n->ctx, OUTPUT_FLAGS);
    *out = n;
    return 0;
}

void sl_nft_close(struct sl_nft *n)
{
    if (!n)
        return;
    if (n->ctx)
        nft_ctx_free(n->ctx);
    if (n->nl_fd >= 0)
        close(n->nl_fd);
    free(n);
}

/* nft's first error line, without its "Error: " and the echo of the
 * command it prints below. */
static void first_error(struct sl_nft *n, char *out, size_t size)
{
    const char *e = nft_ctx_get_error_buffer(n->ctx);
    if (!e || !*e) {
        snprintf(out, size, "no detail");
        return;
    }
    if (strncmp(e, "Error: ", 7) == 0)
        e += 7;
    size_t len = strcspn(e, "\n");
    snprintf(out, size, "%.*s", (int)(len < size ? len : size - 1), e);
}

int sl_nft_run(struct sl_nft *n, const char *cmds, const char *what, struct sl_error *err)
{
    int rc = nft_run_cmd_from_buffer(n->ctx, cmds);
    (void)nft_ctx_get_output_buffer(n->ctx); /* drained: it would grow */
    if (rc == 0)
        return 0;
    char why[256];
    first_error(n, why, sizeof(why));
    int errnum = strstr(why, "No such file") ? ENOENT : strstr(why, "File exists") ? EEXIST : EIO;
    return sl_error_set(err, SL_E_RUNTIME, errnum, "%s: nftables refused: %s", what, why);
}

int sl_nft_list_json(struct sl_nft *n, const char *cmd, json_t **out, struct sl_error *err)
{
    *out = NULL;
    nft_ctx_output_set_flags(n->ctx, OUTPUT_FLAGS | NFT_CTX_OUTPUT_JSON);
    int rc = nft_run_cmd_from_buffer(n->ctx, cmd);
    nft_ctx_output_set_flags(n->ctx, OUTPUT_FLAGS);
    if (rc != 0) {
        char why[256];
        first_error(n, why, sizeof(why));
        int errnum = strstr(why, "No such file") ? ENOENT : EIO;
        return sl_error_set(err, SL_E_RUNTIME, errnum, "nftables: %s: %s", cmd, why);
    }
    json_error_t jerr;
    json_t *doc = json_loads(nft_ctx_get_output_buffer(n->ctx), 0, &jerr);
    json_t *list = json_object_get(doc, "nftables");
    if (!json_is_array(list)) {
        json_decref(doc);
        return sl_error_set(err, SL_E_RUNTIME, EIO, "nftables: %s: unreadable answer", cmd);
    }
    *out = json_incref(list);
    json_decref(doc);
    return 0;
}

/* ---- a counter, from the kernel ------------------------------------------- */

static size_t put_attr(char *buf, size_t at, uint16_t type, const void *data, size_t len)
{
    struct nlattr *a = (struct nlattr *)(buf + at);
    a->nla_type = type;
    a->nla_len = (uint16_t)(NLA_HDRLEN + len);
    memcpy(buf + at + NLA_HDRLEN, data, len);
    return at + NLA_ALIGN(a->nla_len);
}

/* NFTA_COUNTER_PACKETS inside NFTA_OBJ_DATA of a NEWOBJ answer. */
static bool find_packets(const struct nlmsghdr *h, uint64_t *packets)
{
    const char *p = (const char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(struct nfgenmsg));
    const char *end = (const char *)h + h->nlmsg_len;
    while (p + NLA_HDRLEN <= end) {
        const struct nlattr *a = (const struct nlattr *)p;
        if (a->nla_len < NLA_HDRLEN || p + a->nla_len > end)
            return false;
        if ((a->nla_type & NLA_TYPE_MASK) == NFTA_OBJ_DATA) {
            const char *q = p + NLA_HDRLEN, *qend = p + a->nla_len;
            while (q + NLA_HDRLEN <= qend) {
                const struct nlattr *b = (const struct nlattr *)q;
                if (b->nla_len < NLA_HDRLEN || q + b->nla_len > qend)
                    return false;
                if ((b->nla_type & NLA_TYPE_MASK) == NFTA_COUNTER_PACKETS &&
                    b->nla_len >= NLA_HDRLEN + 8) {
                    uint64_t be;
                    memcpy(&be, q + NLA_HDRLEN, 8);
                    *packets = be64toh(be);
                    return true;
                }
                q += NLA_ALIGN(b->nla_len);
            }
        }
        p += NLA_ALIGN(a->nla_len);
    }
    return false;
}

/* One nf_tables GET of an object by table and name (attributes tkey,
 * nkey; a counter type for GETOBJ); *packets from a counter's answer. 1
 * found, 0 no such object (ENOENT), -1. */
static int nf_get(struct sl_nft *n, uint16_t msg, uint16_t tkey, uint16_t nkey, bool counter,
                  const char *table, const char *name, uint64_t *packets, struct sl_error *err)
{
    if (n->nl_fd < 0) {
        n->nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
        if (n->nl_fd < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "nf_tables: cannot open a netlink socket");
        struct timeval tv = {.tv_sec = 2};
        (void)setsockopt(n->nl_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
    union {
        struct nlmsghdr h;
        char buf[512];
    } m;
    memset(&m, 0, sizeof(m));
    size_t tl = strlen(table) + 1, nl = strlen(name) + 1;
    if (tl > 64 || nl > 64)
        return sl_error_set(err, SL_E_RUNTIME, EINVAL, "nf_tables: name too long");
    m.h.nlmsg_type = (uint16_t)((NFNL_SUBSYS_NFTABLES << 8) | msg);
    m.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    m.h.nlmsg_seq = ++n->seq;
    struct nfgenmsg g = {.nfgen_family = NFPROTO_INET, .version = NFNETLINK_V0};
    size_t at = NLMSG_HDRLEN;
    memcpy(m.buf + at, &g, sizeof(g));
    at += NLMSG_ALIGN(sizeof(g));
    at = put_attr(m.buf, at, tkey, table, tl);
    at = put_attr(m.buf, at, nkey, name, nl);
    if (counter) {
        uint32_t type = htobe32(NFT_OBJECT_COUNTER);
        at = put_attr(m.buf, at, NFTA_OBJ_TYPE, &type, sizeof(type));
    }
    m.h.nlmsg_len = (uint32_t)at;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(n->nl_fd, m.buf, at, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "nf_tables: netlink send");
    union {
        struct nlmsghdr h;
        char buf[8192];
    } reply;
    bool found = false;
    for (;;) {
        ssize_t len = recv(n->nl_fd, reply.buf, sizeof(reply.buf), 0);
        if (len < 0 && errno == EINTR)
            continue;
        if (len < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "nf_tables: netlink receive");
        int left = (int)len;
        for (struct nlmsghdr *h = &reply.h; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_seq != n->seq)
                continue;
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (e->error == 0)
                    return found ? 1 : 0;
                if (e->error == -ENOENT)
                    return 0;
                errno = -e->error;
                return sl_error_errno(err, SL_E_RUNTIME, "nf_tables: %s", name);
            }
            if (!counter || (packets && find_packets(h, packets)))
                found = true;
        }
    }
}

int sl_nft_counter_packets(struct sl_nft *n, const char *table, const char *name,
                           uint64_t *packets, struct sl_error *err)
{
    *packets = 0;
    int r = nf_get(n, NFT_MSG_GETOBJ, NFTA_OBJ_TABLE, NFTA_OBJ_NAME, true, table, name, packets,
                   err);
    if (r == 0) {
        errno = ENOENT;
        return sl_error_errno(err, SL_E_RUNTIME, "nf_tables: no counter %s", name);
    }
    return r < 0 ? -1 : 0;
}

int sl_nft_chain_exists(struct sl_nft *n, const char *table, const char *chain,
                        struct sl_error *err)
{
    return nf_get(n, NFT_MSG_GETCHAIN, NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME, false, table, chain,
                  NULL, err);
}
