/* In-process registry: a map worker id -> (expiry on the monotonic clock,
 * payload). Only this process sees it, so a fleet needs Redis. Expired
 * entries are pruned on every read. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "registry/registry.h"

struct mem_slot {
    struct sl_worker_entry entry;
    int64_t expires_mono_us;
};

struct mem_registry {
    struct sl_registry pub;
    pthread_mutex_t lock;
    struct mem_slot *slots;
    size_t n;
};

/* Drop expired slots; returns how many. Caller holds the lock. */
static size_t mem_prune(struct mem_registry *m)
{
    int64_t now = sl_mono_us();
    size_t kept = 0, dropped = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->slots[i].expires_mono_us > now)
            m->slots[kept++] = m->slots[i];
        else
            dropped++;
    }
    m->n = kept;
    return dropped;
}

static int mem_publish(struct sl_registry *r, const struct sl_worker_entry *e,
                       const json_t *payload, int ttl_seconds, struct sl_error *err)
{
    struct mem_registry *m = (struct mem_registry *)r;
    (void)payload;
    pthread_mutex_lock(&m->lock);
    int64_t expires = sl_mono_us() + (int64_t)ttl_seconds * 1000000;
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->slots[i].entry.worker_id, e->worker_id) == 0) {
            m->slots[i].entry = *e;
            m->slots[i].expires_mono_us = expires;
            pthread_mutex_unlock(&m->lock);
            return 0;
        }
    }
    struct mem_slot *slots = realloc(m->slots, (m->n + 1) * sizeof(*slots));
    if (!slots) {
        pthread_mutex_unlock(&m->lock);
        return sl_error_set(err, SL_E_INTERNAL, 0, "out of memory");
    }
    m->slots = slots;
    m->slots[m->n].entry = *e;
    m->slots[m->n].expires_mono_us = expires;
    m->n++;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int mem_get(struct sl_registry *r, const char *worker_id, struct sl_worker_entry *out,
                   struct sl_error *err)
{
    struct mem_registry *m = (struct mem_registry *)r;
    (void)err;
    int found = 0;
    pthread_mutex_lock(&m->lock);
    mem_prune(m);
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->slots[i].entry.worker_id, worker_id) == 0) {
            *out = m->slots[i].entry;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sl_worker_entry *)a)->worker_id,
                  ((const struct sl_worker_entry *)b)->worker_id);
}

static int mem_list(struct sl_registry *r, size_t max, struct sl_worker_entry **out, size_t *n,
                    size_t *excluded, int *truncated, struct sl_error *err)
{
    struct mem_registry *m = (struct mem_registry *)r;
    pthread_mutex_lock(&m->lock);
    size_t dropped = mem_prune(m);
    size_t count = m->n < max ? m->n : max;
    struct sl_worker_entry *list = calloc(m->n ? m->n : 1, sizeof(*list));
    if (!list) {
        pthread_mutex_unlock(&m->lock);
        return sl_error_set(err, SL_E_INTERNAL, 0, "out of memory");
    }
    for (size_t i = 0; i < m->n; i++)
        list[i] = m->slots[i].entry;
    size_t total = m->n;
    pthread_mutex_unlock(&m->lock);
    qsort(list, total, sizeof(*list), entry_cmp);
    *out = list;
    *n = count;
    if (excluded)
        *excluded = dropped;
    if (truncated)
        *truncated = total > max;
    return 0;
}

static int mem_unregister(struct sl_registry *r, const char *worker_id, struct sl_error *err)
{
    struct mem_registry *m = (struct mem_registry *)r;
    (void)err;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->slots[i].entry.worker_id, worker_id) == 0) {
            m->slots[i] = m->slots[--m->n];
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static void mem_close(struct sl_registry *r)
{
    struct mem_registry *m = (struct mem_registry *)r;
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m->slots);
    free(m);
}

static const struct sl_registry_ops mem_ops = {
    .publish = mem_publish,
    .get = mem_get,
    .list = mem_list,
    .unregister = mem_unregister,
    .close = mem_close,
};

struct sl_registry *sl_registry_memory_open(void)
{
    struct mem_registry *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->pub.ops = &mem_ops;
    m->pub.backend = "memory";
    pthread_mutex_init(&m->lock, NULL);
    return &m->pub;
}

static void copy_str(char *dst, size_t size, const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    strncpy(dst, s, size - 1);
    dst[size - 1] = '\0';
}

int sl_worker_entry_from_json(const json_t *payload, struct sl_worker_entry *out)
{
    if (!json_is_object(payload))
        return -1;
    memset(out, 0, sizeof(*out));
    copy_str(out->worker_id, sizeof(out->worker_id), payload, "worker_id");
    copy_str(out->worker_epoch, sizeof(out->worker_epoch), payload, "worker_epoch");
    copy_str(out->endpoint, sizeof(out->endpoint), payload, "endpoint");
    copy_str(out->status, sizeof(out->status), payload, "status");
    copy_str(out->profile_id, sizeof(out->profile_id), payload, "profile_id");
    copy_str(out->profile_hash, sizeof(out->profile_hash), payload, "profile_hash");
    out->capacity = json_integer_value(json_object_get(payload, "capacity"));
    out->running_sessions = json_integer_value(json_object_get(payload, "running_sessions"));
    out->running_execs = json_integer_value(json_object_get(payload, "running_execs"));
    out->max_parallel_execs_per_sandbox =
        json_integer_value(json_object_get(payload, "max_parallel_execs_per_sandbox"));
    out->observed_at = json_integer_value(json_object_get(payload, "observed_at"));
    return out->worker_id[0] ? 0 : -1;
}
