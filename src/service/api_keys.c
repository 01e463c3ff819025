#include "service/api_keys.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int sl_api_key_generate(char key_id[SL_KEY_ID_LEN + 1], char secret[SL_KEY_SECRET_LEN + 1],
                        char api_key[SL_API_KEY_LEN + 1])
{
    char id_hex[13];
    if (sl_random_hex(id_hex, 6) < 0 || sl_random_hex(secret, SL_KEY_SECRET_LEN / 2) < 0)
        return -1;
    memcpy(key_id, "sl", 2);
    memcpy(key_id + 2, id_hex, 13);
    memcpy(api_key, key_id, SL_KEY_ID_LEN);
    api_key[SL_KEY_ID_LEN] = '_';
    memcpy(api_key + SL_KEY_ID_LEN + 1, secret, SL_KEY_SECRET_LEN + 1);
    return 0;
}

static bool lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool key_id_shape(const char *s)
{
    return s[0] == 's' && s[1] == 'l' && lower_hex(s + 2, SL_KEY_ID_LEN - 2);
}

bool sl_key_id_valid(const char *id)
{
    return id && strlen(id) == SL_KEY_ID_LEN && key_id_shape(id);
}

bool sl_api_key_parse(const char *text, size_t len, char key_id[SL_KEY_ID_LEN + 1],
                      char secret[SL_KEY_SECRET_LEN + 1])
{
    if (!text || len != SL_API_KEY_LEN || !key_id_shape(text) || text[SL_KEY_ID_LEN] != '_' ||
        !lower_hex(text + SL_KEY_ID_LEN + 1, SL_KEY_SECRET_LEN))
        return false;
    memcpy(key_id, text, SL_KEY_ID_LEN);
    key_id[SL_KEY_ID_LEN] = '\0';
    memcpy(secret, text + SL_KEY_ID_LEN + 1, SL_KEY_SECRET_LEN);
    secret[SL_KEY_SECRET_LEN] = '\0';
    return true;
}

bool sl_key_facts_accept(const struct sl_key_facts *f, const char *secret, int64_t now_us)
{
    char hash[65];
    sl_sha256_hex(secret, strlen(secret), hash);
    /* The hash is compared whatever the rest says, so an unknown, revoked
     * or expired key takes as long as a wrong secret. */
    bool match = sl_consttime_equal(hash, 64, f->secret_sha256, strlen(f->secret_sha256));
    return match && f->exists && f->revoked_at == 0 && (f->expires_at == 0 || now_us < f->expires_at);
}

/* ---- the cache ---- */

struct slot {
    char key_id[SL_KEY_ID_LEN + 1]; /* "" = empty */
    int64_t fetched_mono_us;
    uint64_t forgets; /* bumped by every forget of this slot */
    struct sl_key_facts facts;
};

struct sl_key_cache {
    pthread_mutex_t lock;
    struct slot slots[SL_KEY_CACHE_SLOTS];
};

struct sl_key_cache *sl_key_cache_new(void)
{
    struct sl_key_cache *c = calloc(1, sizeof(*c));
    if (c)
        pthread_mutex_init(&c->lock, NULL);
    return c;
}

void sl_key_cache_free(struct sl_key_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* FNV-1a: key_ids are random, so any spread is as good. */
static struct slot *slot_of(struct sl_key_cache *c, const char *key_id)
{
    uint32_t h = 2166136261u;
    for (const char *p = key_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return &c->slots[h % SL_KEY_CACHE_SLOTS];
}

static bool fresh(const struct slot *s, int64_t mono_us)
{
    return s->key_id[0] && mono_us >= s->fetched_mono_us &&
           mono_us - s->fetched_mono_us < SL_KEY_CACHE_TTL_US;
}

bool sl_key_cache_get(struct sl_key_cache *c, const char *key_id, int64_t mono_us,
                      struct sl_key_facts *out, uint64_t *ticket)
{
    *ticket = 0;
    if (!c)
        return false;
    pthread_mutex_lock(&c->lock);
    struct slot *s = slot_of(c, key_id);
    bool hit = strcmp(s->key_id, key_id) == 0 && fresh(s, mono_us);
    if (hit)
        *out = s->facts;
    *ticket = s->forgets;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

void sl_key_cache_put(struct sl_key_cache *c, const char *key_id, const struct sl_key_facts *f,
                      int64_t mono_us, uint64_t ticket)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    struct slot *s = slot_of(c, key_id);
    bool raced = s->forgets != ticket;
    bool evicts_live = !f->exists && strcmp(s->key_id, key_id) != 0 && fresh(s, mono_us) &&
                       s->facts.exists;
    if (!raced && !evicts_live) {
        snprintf(s->key_id, sizeof(s->key_id), "%s", key_id);
        s->fetched_mono_us = mono_us;
        s->facts = *f;
    }
    pthread_mutex_unlock(&c->lock);
}

void sl_key_cache_forget(struct sl_key_cache *c, const char *key_id)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    struct slot *s = slot_of(c, key_id);
    if (strcmp(s->key_id, key_id) == 0)
        s->key_id[0] = '\0';
    s->forgets++; /* whatever the slot holds: a lookup in flight for key_id must not land */
    pthread_mutex_unlock(&c->lock);
}
