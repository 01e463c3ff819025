/* The front's owner cache (service/owner_cache.h): direct-mapped slots by a
 * hash of the sandbox id, one lock; an entry is allocated when first used,
 * so a replica that never forwards holds none. */
#include "service/owner_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct owner_entry {
    char sandbox_id[129];
    struct sl_error_owner owner;
    int64_t expires_us;
};

struct svc_owner_cache {
    pthread_mutex_t lock;
    struct owner_entry *slots[SVC_OWNER_CACHE_SLOTS];
};

struct svc_owner_cache *svc_owner_cache_new(void)
{
    struct svc_owner_cache *c = calloc(1, sizeof(*c));
    if (c)
        pthread_mutex_init(&c->lock, NULL);
    return c;
}

void svc_owner_cache_free(struct svc_owner_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < SVC_OWNER_CACHE_SLOTS; i++)
        free(c->slots[i]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static size_t slot_of(const char *sandbox_id)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)sandbox_id; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (size_t)(h % SVC_OWNER_CACHE_SLOTS);
}

void svc_owner_cache_put(struct svc_owner_cache *c, const char *sandbox_id,
                         const struct sl_error_owner *o)
{
    if (!c || strlen(sandbox_id) >= sizeof(((struct owner_entry *)0)->sandbox_id))
        return;
    size_t i = slot_of(sandbox_id);
    pthread_mutex_lock(&c->lock);
    if (!c->slots[i])
        c->slots[i] = malloc(sizeof(*c->slots[i]));
    struct owner_entry *e = c->slots[i];
    if (e) {
        snprintf(e->sandbox_id, sizeof(e->sandbox_id), "%s", sandbox_id);
        e->owner = *o;
        e->expires_us = sl_mono_us() + SVC_OWNER_CACHE_TTL_US;
    }
    pthread_mutex_unlock(&c->lock);
}

bool svc_owner_cache_get(struct svc_owner_cache *c, const char *sandbox_id, int64_t generation,
                         struct sl_error *err)
{
    if (!c)
        return false;
    size_t i = slot_of(sandbox_id);
    struct sl_error_owner o;
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    const struct owner_entry *e = c->slots[i];
    if (e && e->owner.generation == generation && strcmp(e->sandbox_id, sandbox_id) == 0 &&
        sl_mono_us() < e->expires_us) {
        o = e->owner;
        hit = true;
    }
    pthread_mutex_unlock(&c->lock);
    if (hit) {
        sl_error_set(err, SL_E_OWNED_ELSEWHERE, 0, "the sandbox is on worker %s", o.worker_id);
        if (err)
            err->owner = o;
    }
    return hit;
}

void svc_owner_cache_forget(struct svc_owner_cache *c, const char *sandbox_id)
{
    if (!c)
        return;
    size_t i = slot_of(sandbox_id);
    pthread_mutex_lock(&c->lock);
    struct owner_entry *e = c->slots[i];
    if (e && strcmp(e->sandbox_id, sandbox_id) == 0)
        e->expires_us = 0;
    pthread_mutex_unlock(&c->lock);
}
