/* The Redis registry (SANDBOX_REGISTRY_BACKEND=redis; spec/FLEET.md §3.2),
 * over hiredis.
 *
 * Keys under the namespace <ns> (SANDBOX_REGISTRY_NAMESPACE):
 *   <ns>:worker:<id>  the compact heartbeat payload, SET ... EX <ttl>
 *   <ns>:workers      the set of ids (SADD on every heartbeat)
 * get = GET + JSON; list = SMEMBERS, sorted, the first `max`, MGET in
 * batches of 16, ids whose key expired (or whose observed_at is in the
 * future or a TTL old) counted as excluded and removed from the set.
 *
 * Connections: a few (every request fences through get()), each used by one
 * caller at a time under its own mutex. Every command has a timeout; a
 * failed connection is dropped and reopened by the next call, at most once
 * a second while Redis cannot be reached (the calls in between fail at
 * once). A failure is NO_SANDBOX_WORKER_AVAILABLE (503): without the
 * registry no worker can be placed or found. */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "registry/registry.h"

#define NCONNS 4
#define BATCH 16
#define RETRY_US 1000000

struct redis_conn {
    pthread_mutex_t lock;
    redisContext *ctx;
};

struct redis_registry {
    struct sl_registry pub;
    char *host, *user, *password, *ns; /* user: a Redis 6 ACL user, NULL = default */
    int port, db;
    int64_t ttl_us; /* the heartbeat TTL: list()'s staleness check */
    struct timeval timeout;
    struct redis_conn conns[NCONNS];
    unsigned next; /* round robin, racy by design: any slot will do */
    pthread_mutex_t retry_lock;
    int64_t retry_at_us;
    char why[160];
};

static struct redis_registry *reg_of(struct sl_registry *r) { return (struct redis_registry *)r; }

static int fail(struct sl_error *err, const char *what, const char *text)
{
    sl_error_set(err, SL_E_NO_WORKER, 0, "the worker registry (Redis) cannot be reached");
    if (err)
        snprintf(err->detail, sizeof(err->detail), "redis %s: %s", what,
                 text && *text ? text : "unknown error");
    return -1;
}

static void drop(struct redis_conn *c)
{
    if (c->ctx)
        redisFree(c->ctx);
    c->ctx = NULL;
}

/* One round trip: the reply (caller frees), or NULL with err (the
 * connection is then dropped: its state is unknown). */
static redisReply *command(struct redis_conn *c, struct sl_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *reply = redisvCommand(c->ctx, fmt, ap);
    va_end(ap);
    if (!reply) {
        fail(err, "command", c->ctx->errstr);
        drop(c);
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        fail(err, "command", reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

static int connect_conn(struct redis_registry *g, struct redis_conn *c, struct sl_error *err)
{
    pthread_mutex_lock(&g->retry_lock);
    bool wait = sl_mono_us() < g->retry_at_us;
    char why[160];
    snprintf(why, sizeof(why), "%s", g->why);
    pthread_mutex_unlock(&g->retry_lock);
    if (wait)
        return fail(err, "connect (retried once a second)", why);
    c->ctx = redisConnectWithTimeout(g->host, g->port, g->timeout);
    const char *problem = !c->ctx ? "out of memory" : c->ctx->err ? c->ctx->errstr : NULL;
    if (!problem && redisSetTimeout(c->ctx, g->timeout) != REDIS_OK)
        problem = c->ctx->errstr;
    redisReply *reply = NULL;
    if (!problem && g->password) {
        reply = g->user ? command(c, err, "AUTH %s %s", g->user, g->password)
                        : command(c, err, "AUTH %s", g->password);
        if (!reply)
            problem = "AUTH refused";
        freeReplyObject(reply);
    }
    if (!problem && g->db > 0) {
        reply = command(c, err, "SELECT %d", g->db);
        if (!reply)
            problem = "SELECT refused";
        freeReplyObject(reply);
    }
    if (problem) {
        char text[160];
        snprintf(text, sizeof(text), "%s", problem);
        drop(c);
        pthread_mutex_lock(&g->retry_lock);
        g->retry_at_us = sl_mono_us() + RETRY_US;
        snprintf(g->why, sizeof(g->why), "%s", text);
        pthread_mutex_unlock(&g->retry_lock);
        return fail(err, "connect", text);
    }
    return 0;
}

/* A connection for one call, locked; NULL with err. */
static struct redis_conn *acquire(struct redis_registry *g, struct sl_error *err)
{
    struct redis_conn *c = NULL;
    for (unsigned i = 0; i < NCONNS && !c; i++) {
        struct redis_conn *t = &g->conns[(g->next + i) % NCONNS];
        if (pthread_mutex_trylock(&t->lock) == 0)
            c = t;
    }
    if (!c) {
        c = &g->conns[g->next % NCONNS];
        pthread_mutex_lock(&c->lock);
    }
    g->next++;
    if (!c->ctx && connect_conn(g, c, err) < 0) {
        pthread_mutex_unlock(&c->lock);
        return NULL;
    }
    return c;
}

static void release(struct redis_conn *c) { pthread_mutex_unlock(&c->lock); }

static int redis_publish(struct sl_registry *r, const struct sl_worker_entry *e,
                         const json_t *payload, int ttl_seconds, struct sl_error *err)
{
    struct redis_registry *g = reg_of(r);
    _cleanup_free_ char *doc = json_dumps(payload, JSON_COMPACT);
    if (!doc)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    struct redis_conn *c = acquire(g, err);
    if (!c)
        return -1;
    redisReply *a = command(c, err, "SET %s:worker:%s %s EX %d", g->ns, e->worker_id, doc,
                            ttl_seconds > 0 ? ttl_seconds : 1);
    redisReply *b = a ? command(c, err, "SADD %s:workers %s", g->ns, e->worker_id) : NULL;
    freeReplyObject(a);
    freeReplyObject(b);
    release(c);
    return b ? 0 : -1;
}

static int entry_of(const char *text, size_t len, struct sl_worker_entry *out)
{
    json_t *doc = json_loadb(text, len, 0, NULL);
    int rc = sl_worker_entry_from_json(doc, out);
    json_decref(doc);
    return rc;
}

static int redis_get(struct sl_registry *r, const char *worker_id, struct sl_worker_entry *out,
                     struct sl_error *err)
{
    struct redis_registry *g = reg_of(r);
    struct redis_conn *c = acquire(g, err);
    if (!c)
        return -1;
    redisReply *reply = command(c, err, "GET %s:worker:%s", g->ns, worker_id);
    release(c);
    if (!reply)
        return -1;
    int found = reply->type == REDIS_REPLY_STRING && entry_of(reply->str, reply->len, out) == 0;
    freeReplyObject(reply);
    return found;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* FLEET.md §3.4: an entry whose observed_at is in the future or a TTL old
 * is not live, whatever its key says. */
static bool fresh(const struct redis_registry *g, const struct sl_worker_entry *e)
{
    int64_t age_ms = sl_now_us() / 1000 - e->observed_at;
    return age_ms >= 0 && (g->ttl_us <= 0 || age_ms * 1000 < g->ttl_us);
}

static int redis_list(struct sl_registry *r, size_t max, struct sl_worker_entry **out, size_t *n,
                      size_t *excluded, int *truncated, struct sl_error *err)
{
    struct redis_registry *g = reg_of(r);
    *out = NULL;
    *n = 0;
    if (excluded)
        *excluded = 0;
    if (truncated)
        *truncated = 0;
    struct redis_conn *c = acquire(g, err);
    if (!c)
        return -1;
    redisReply *members = command(c, err, "SMEMBERS %s:workers", g->ns);
    if (!members || members->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(members);
        release(c);
        return members ? fail(err, "SMEMBERS", "not a set") : -1;
    }
    size_t total = members->elements;
    char **ids = calloc(total ? total : 1, sizeof(*ids));
    struct sl_worker_entry *v = calloc(total ? total : 1, sizeof(*v));
    int rc = ids && v ? 0 : sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < total; i++)
        ids[i] = members->element[i]->str;
    if (rc == 0)
        qsort(ids, total, sizeof(*ids), cmp_str);
    size_t take = total < max ? total : max;
    if (truncated)
        *truncated = total > max;
    for (size_t at = 0; rc == 0 && at < take; at += BATCH) {
        size_t k = take - at < BATCH ? take - at : BATCH;
        /* MGET <key> ... : argv form, ids are arbitrary bytes. */
        const char *argv[BATCH + 1];
        char *keys[BATCH];
        argv[0] = "MGET";
        for (size_t j = 0; j < k; j++) {
            if (asprintf(&keys[j], "%s:worker:%s", g->ns, ids[at + j]) < 0)
                keys[j] = NULL;
            argv[j + 1] = keys[j] ? keys[j] : "";
        }
        redisReply *got = redisCommandArgv(c->ctx, (int)k + 1, argv, NULL);
        for (size_t j = 0; j < k; j++)
            free(keys[j]);
        if (!got) {
            rc = fail(err, "MGET", c->ctx->errstr);
            drop(c);
            break;
        }
        for (size_t j = 0; got->type == REDIS_REPLY_ARRAY && j < got->elements && j < k; j++) {
            redisReply *e = got->element[j];
            struct sl_worker_entry entry;
            if (e->type == REDIS_REPLY_STRING && entry_of(e->str, e->len, &entry) == 0 &&
                fresh(g, &entry)) {
                v[(*n)++] = entry;
                continue;
            }
            if (excluded)
                (*excluded)++;
            if (e->type == REDIS_REPLY_NIL) /* the key expired: out of the set */
                freeReplyObject(command(c, NULL, "SREM %s:workers %s", g->ns, ids[at + j]));
            if (!c->ctx)
                break;
        }
        freeReplyObject(got);
        if (!c->ctx)
            rc = fail(err, "SREM", "connection lost");
    }
    free(ids);
    freeReplyObject(members);
    release(c);
    if (rc < 0) {
        free(v);
        *n = 0;
        return -1;
    }
    *out = v;
    return 0;
}

static int redis_unregister(struct sl_registry *r, const char *worker_id, struct sl_error *err)
{
    struct redis_registry *g = reg_of(r);
    struct redis_conn *c = acquire(g, err);
    if (!c)
        return -1;
    redisReply *a = command(c, err, "DEL %s:worker:%s", g->ns, worker_id);
    redisReply *b = a ? command(c, err, "SREM %s:workers %s", g->ns, worker_id) : NULL;
    freeReplyObject(a);
    freeReplyObject(b);
    release(c);
    return b ? 0 : -1;
}

static void redis_close(struct sl_registry *r)
{
    if (!r)
        return;
    struct redis_registry *g = reg_of(r);
    for (int i = 0; i < NCONNS; i++) {
        drop(&g->conns[i]);
        pthread_mutex_destroy(&g->conns[i].lock);
    }
    pthread_mutex_destroy(&g->retry_lock);
    free(g->host);
    free(g->user);
    sl_free_secret(g->password);
    free(g->ns);
    free(g);
}

static const struct sl_registry_ops redis_ops = {
    .publish = redis_publish,
    .get = redis_get,
    .list = redis_list,
    .unregister = redis_unregister,
    .close = redis_close,
};

/* redis://[[user]:password@]host[:port][/db]: the parts hiredis takes. */
static int parse_url(struct redis_registry *g, const char *url, struct sl_error *err)
{
    if (strncmp(url, "rediss://", 9) == 0)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_REDIS_URL: rediss:// (TLS) is not supported by this build");
    if (strncmp(url, "redis://", 8) != 0)
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_REDIS_URL: not a redis:// URL");
    const char *rest = url + 8;
    size_t end = strcspn(rest, "/?#");
    const char *at = NULL;
    for (const char *p = rest; p < rest + end; p++)
        if (*p == '@')
            at = p;
    const char *host = at ? at + 1 : rest;
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon && at > colon + 1)
            g->password = sl_percent_decode(colon + 1, (size_t)(at - colon - 1));
        if (colon && colon > rest && !(g->user = sl_percent_decode(rest, (size_t)(colon - rest))))
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    const char *host_end = rest + end;
    const char *colon = memchr(host, ':', (size_t)(host_end - host));
    g->host = strndup(host, (size_t)((colon ? colon : host_end) - host));
    g->port = colon ? atoi(colon + 1) : 6379;
    g->db = rest[end] == '/' ? atoi(rest + end + 1) : 0;
    if (!g->host || !*g->host || g->port <= 0 || g->port > 65535 || g->db < 0)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_REDIS_URL: needs a host, a port from 1 to 65535 and a "
                            "database number");
    return 0;
}

struct sl_registry *sl_registry_redis_open(const char *url, const char *ns, int ttl_seconds,
                                           int timeout_ms, struct sl_error *err)
{
    struct redis_registry *g = calloc(1, sizeof(*g));
    if (!g) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    g->pub.ops = &redis_ops;
    g->pub.backend = "redis";
    for (int i = 0; i < NCONNS; i++)
        pthread_mutex_init(&g->conns[i].lock, NULL);
    pthread_mutex_init(&g->retry_lock, NULL);
    g->ttl_us = (int64_t)ttl_seconds * 1000000;
    g->timeout.tv_sec = timeout_ms / 1000;
    g->timeout.tv_usec = (timeout_ms % 1000) * 1000;
    g->ns = strdup(ns && *ns ? ns : "agent-sandbox");
    if (!g->ns || parse_url(g, url, err) < 0) {
        if (!g->ns)
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        redis_close(&g->pub);
        return NULL;
    }
    return &g->pub;
}
