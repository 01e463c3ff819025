/* Tenant API keys: their text form, and the cache that keeps their checks
 * off the database on the hot path.
 *
 * A key reads "sl" + 12 hex digits (its key_id: the readable prefix that
 * lists, logs and revocations name) + "_" + 48 hex digits of secret (192
 * bits of kernel randomness). The store keeps the key_id, the tenant and
 * the SHA-256 of the secret, never the key: a leaked database leaks no key.
 * A plain hash is enough because the secret is random, not a password.
 *
 * The cache maps a key_id to what the store said of it (tenant, secret
 * hash, expiry, revocation, or "no such key") for SL_KEY_CACHE_TTL_US, so a
 * request with a key costs one hash and one lookup; a revocation made on
 * this worker drops the entry at once, one made on another replica is seen
 * here within the TTL. Fixed size: an entry evicts whatever shared its
 * slot, and memory never grows. Thread-safe (one mutex). A NULL cache (no
 * memory for one) caches nothing: every check asks the store. */
#ifndef SL_SERVICE_API_KEYS_H
#define SL_SERVICE_API_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/principal.h"

#define SL_KEY_ID_LEN 14     /* "sl" + 12 hex */
#define SL_KEY_SECRET_LEN 48 /* hex */
#define SL_API_KEY_LEN (SL_KEY_ID_LEN + 1 + SL_KEY_SECRET_LEN)
#define SL_KEY_CACHE_TTL_US (1000 * 1000LL)
#define SL_KEY_CACHE_SLOTS 4096

/* A new key: *key_id, *secret and the whole *api_key, NUL-terminated. 0, or
 * -1 with errno (no randomness). */
int sl_api_key_generate(char key_id[SL_KEY_ID_LEN + 1], char secret[SL_KEY_SECRET_LEN + 1],
                        char api_key[SL_API_KEY_LEN + 1]);

/* Whether `id` is exactly a key_id: "sl" and 12 lowercase hex digits. */
bool sl_key_id_valid(const char *id);

/* Split a key (exactly the form above, nothing around it) into its key_id
 * and secret. False for anything else. */
bool sl_api_key_parse(const char *text, size_t len, char key_id[SL_KEY_ID_LEN + 1],
                      char secret[SL_KEY_SECRET_LEN + 1]);

/* What the store said of a key_id. */
struct sl_key_facts {
    bool exists;
    char tenant_id[SL_TENANT_ID_MAX + 1];
    char secret_sha256[65];
    int64_t expires_at; /* µs since the epoch, 0 = never */
    int64_t revoked_at; /* 0 = not revoked */
    int64_t quota[SL_LIMIT_COUNT]; /* the tenant's enforced limits, -1 = none */
};

/* Whether a presented secret opens a key with these facts at now_us (wall
 * clock): it exists, is neither revoked nor expired, and the secret's hash
 * matches (compared in constant time). */
bool sl_key_facts_accept(const struct sl_key_facts *f, const char *secret, int64_t now_us);

struct sl_key_cache;
struct sl_key_cache *sl_key_cache_new(void);
void sl_key_cache_free(struct sl_key_cache *c);
/* The facts cached for key_id no older than the TTL at mono_us: true and
 * *out filled, else false, with *ticket the slot's state for the put that
 * follows the store's answer. */
bool sl_key_cache_get(struct sl_key_cache *c, const char *key_id, int64_t mono_us,
                      struct sl_key_facts *out, uint64_t *ticket);
/* Remember what the store said, unless the slot was forgotten since the
 * miss that took `ticket` (a revocation raced the lookup: what was read
 * may be from before it), and unless it would put a key that does not
 * exist over a live one (a guesser's random ids must not evict real keys). */
void sl_key_cache_put(struct sl_key_cache *c, const char *key_id, const struct sl_key_facts *f,
                      int64_t mono_us, uint64_t ticket);
void sl_key_cache_forget(struct sl_key_cache *c, const char *key_id);

#endif
