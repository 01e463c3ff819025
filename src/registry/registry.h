/* Worker registry: a TTL'd index of live workers and their load
 * (spec FLEET.md §3). Never authoritative; the SQL store is.
 *
 * Interface = struct of function pointers + opaque handle, like the store.
 * Entries are copied in and out; the caller owns what it passes and gets. */
#ifndef SL_REGISTRY_REGISTRY_H
#define SL_REGISTRY_REGISTRY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct sl_worker_entry {
    char worker_id[129];
    char worker_epoch[65];
    char endpoint[513];
    char status[16]; /* ACTIVE | DRAINING */
    int64_t capacity;
    int64_t running_sessions;
    int64_t running_execs;
    int64_t max_parallel_execs_per_sandbox;
    int64_t observed_at; /* epoch milliseconds */
    char profile_id[65];
    char profile_hash[192];
};

struct sl_registry;

struct sl_registry_ops {
    /* Publish (or refresh) an entry for ttl_seconds; `payload` is the full
     * heartbeat document (borrowed). */
    int (*publish)(struct sl_registry *r, const struct sl_worker_entry *e, const json_t *payload,
                   int ttl_seconds, struct sl_error *err);
    /* 1 live (filled), 0 absent or expired, -1 error. */
    int (*get)(struct sl_registry *r, const char *worker_id, struct sl_worker_entry *out,
               struct sl_error *err);
    /* Live entries sorted by id, at most `max`; *excluded = expired entries
     * pruned by this call; *truncated = more than max. Caller frees *out. */
    int (*list)(struct sl_registry *r, size_t max, struct sl_worker_entry **out, size_t *n,
                size_t *excluded, int *truncated, struct sl_error *err);
    int (*unregister)(struct sl_registry *r, const char *worker_id, struct sl_error *err);
    void (*close)(struct sl_registry *r);
};

struct sl_registry {
    const struct sl_registry_ops *ops;
    const char *backend;
};

/* The in-process registry (SANDBOX_REGISTRY_BACKEND=memory). */
struct sl_registry *sl_registry_memory_open(void);

/* The Redis registry (SANDBOX_REGISTRY_BACKEND=redis): url is
 * SANDBOX_REDIS_URL, ns SANDBOX_REGISTRY_NAMESPACE, ttl_seconds the
 * heartbeat TTL (an entry observed that long ago is not live); every
 * command waits at most timeout_ms. Nothing is connected at open. NULL with
 * err (SANDBOX_CONFIG_INVALID) for a URL that cannot work. */
struct sl_registry *sl_registry_redis_open(const char *url, const char *ns, int ttl_seconds,
                                           int timeout_ms, struct sl_error *err);

/* Fill an entry from a heartbeat payload object. */
int sl_worker_entry_from_json(const json_t *payload, struct sl_worker_entry *out);

#endif
