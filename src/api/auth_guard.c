#include "api/auth_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Linear probing over this many slots; past them the oldest is replaced. */
#define PROBE 8

struct peer_slot {
    bool used;
    uint8_t addr[16]; /* IPv4 as v4-mapped IPv6 */
    int64_t window_start_us;
    uint32_t failures;
};

struct sl_auth_guard {
    pthread_mutex_t lock;
    int64_t free_failures;
    struct peer_slot peers[SL_AUTH_PEERS];
    int64_t last_log_us;
    bool logged_once;
    uint64_t unlogged;
};

struct sl_auth_guard *sl_auth_guard_new(int64_t free_failures)
{
    struct sl_auth_guard *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    pthread_mutex_init(&g->lock, NULL);
    g->free_failures = free_failures;
    return g;
}

void sl_auth_guard_free(struct sl_auth_guard *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* The peer's address as 16 bytes and as text; false when it has none. */
static bool peer_key(const struct sockaddr *sa, uint8_t key[16], char *text, size_t size)
{
    memset(key, 0, 16);
    snprintf(text, size, "unknown");
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in->sin_addr, 4);
        inet_ntop(AF_INET, &in->sin_addr, text, (socklen_t)size);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(key, &in6->sin6_addr, 16);
        inet_ntop(AF_INET6, &in6->sin6_addr, text, (socklen_t)size);
        return true;
    }
    return false;
}

static uint32_t hash16(const uint8_t key[16])
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    return h;
}

static struct peer_slot *slot_for(struct sl_auth_guard *g, const uint8_t key[16])
{
    uint32_t h = hash16(key);
    struct peer_slot *oldest = NULL;
    for (int i = 0; i < PROBE; i++) {
        struct peer_slot *s = &g->peers[(h + (uint32_t)i) % SL_AUTH_PEERS];
        if (s->used && memcmp(s->addr, key, 16) == 0)
            return s;
        if (!s->used) {
            oldest = s;
            break;
        }
        if (!oldest || s->window_start_us < oldest->window_start_us)
            oldest = s;
    }
    memset(oldest, 0, sizeof(*oldest));
    oldest->used = true;
    memcpy(oldest->addr, key, 16);
    return oldest;
}

bool sl_auth_guard_throttled(struct sl_auth_guard *g, const struct sockaddr *peer, int64_t now_us)
{
    uint8_t key[16];
    char text[64];
    (void)peer_key(peer, key, text, sizeof(text));
    bool throttled = false;
    pthread_mutex_lock(&g->lock);
    uint32_t h = hash16(key);
    for (int i = 0; i < PROBE; i++) {
        struct peer_slot *s = &g->peers[(h + (uint32_t)i) % SL_AUTH_PEERS];
        if (!s->used)
            break;
        if (memcmp(s->addr, key, 16) == 0) {
            throttled = now_us - s->window_start_us <= SL_AUTH_WINDOW_US &&
                        (int64_t)s->failures >= g->free_failures;
            break;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return throttled;
}

void sl_auth_guard_fail(struct sl_auth_guard *g, const struct sockaddr *peer, int64_t now_us,
                        struct sl_auth_verdict *out)
{
    memset(out, 0, sizeof(*out));
    uint8_t key[16];
    /* Peers without an address share one slot (the all-zero key). */
    (void)peer_key(peer, key, out->peer, sizeof(out->peer));
    pthread_mutex_lock(&g->lock);
    struct peer_slot *s = slot_for(g, key);
    if (now_us - s->window_start_us > SL_AUTH_WINDOW_US) {
        s->window_start_us = now_us;
        s->failures = 0;
    }
    if (s->failures < UINT32_MAX)
        s->failures++;
    out->delay_ms = (int64_t)s->failures > g->free_failures ? SL_AUTH_PENALTY_MS : 0;
    g->unlogged++;
    if (!g->logged_once || now_us - g->last_log_us >= SL_AUTH_LOG_PERIOD_US) {
        out->log = true;
        out->failures = g->unlogged;
        g->unlogged = 0;
        g->last_log_us = now_us;
        g->logged_once = true;
    }
    pthread_mutex_unlock(&g->lock);
}
