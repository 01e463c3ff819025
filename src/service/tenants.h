/* Tenants and their API keys (issue 14): the operator's admin operations,
 * a tenant's view of itself, and the check of a key on every request.
 *
 * Tenants live in the store's optional tables (struct sl_store.tenancy);
 * on a database without them every operation here answers 503
 * TENANCY_UNAVAILABLE and every key is refused, so a service over the
 * reference's database behaves as before. */
#ifndef SL_SERVICE_TENANTS_H
#define SL_SERVICE_TENANTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "service/principal.h"

struct sl_service;

#define SL_E_TENANT_NOT_FOUND "TENANT_NOT_FOUND"       /* 404 */
#define SL_E_TENANT_EXISTS "TENANT_EXISTS"             /* 409 */
#define SL_E_API_KEY_NOT_FOUND "API_KEY_NOT_FOUND"     /* 404 */
#define SL_E_TENANCY_UNAVAILABLE "TENANCY_UNAVAILABLE" /* 503: no tenant tables */
#define SL_E_TENANT_QUOTA_EXCEEDED "TENANT_QUOTA_EXCEEDED" /* 429 */

/* The limits an operator may set on a tenant, by name (NULL-terminated):
 * each a non-negative integer, or absent / null for no limit. */
extern const char *const sl_tenant_quota_names[];

/* Whether `id` is a tenant id: 1-64 characters of [a-z0-9-], starting with
 * a letter or digit. */
bool sl_tenant_id_valid(const char *id);
/* Whether `id` may name a stored tenant in a lookup: the same alphabet, up
 * to the column's 64 (a build before tenant ids were limited to 32 could
 * store one; the operator must still be able to see it and revoke its
 * keys, while its keys are refused). */
bool sl_tenant_id_lookup_valid(const char *id);

/* Admin (the operator's). create: 201's document; TENANT_EXISTS when taken.
 * quotas: an object of sl_tenant_quota_names (checked by the caller), NULL
 * for none. set_quotas merges: a name with null removes that limit. */
json_t *sl_svc_tenant_create(struct sl_service *svc, const char *tenant_id, const json_t *quotas,
                             struct sl_error *err);
json_t *sl_svc_tenant_get(struct sl_service *svc, const char *tenant_id, struct sl_error *err);
json_t *sl_svc_tenant_list(struct sl_service *svc, struct sl_error *err);
json_t *sl_svc_tenant_set_quotas(struct sl_service *svc, const char *tenant_id,
                                 const json_t *quotas, struct sl_error *err);
/* A new key for the tenant: the document carries "api_key", the only time
 * it is ever shown. expires_at: µs since the epoch, 0 = never. */
json_t *sl_svc_api_key_create(struct sl_service *svc, const char *tenant_id, const char *name,
                              int64_t expires_at, struct sl_error *err);
json_t *sl_svc_api_key_list(struct sl_service *svc, const char *tenant_id, struct sl_error *err);
/* Revoke at once: refused from the next request on, on this worker at
 * once and on every other within the key cache's TTL. */
json_t *sl_svc_api_key_revoke(struct sl_service *svc, const char *tenant_id, const char *key_id,
                              struct sl_error *err);

/* GET /api/v1/tenant: who the key is, and its tenant's quotas. */
json_t *sl_svc_tenant_self(struct sl_service *svc, const struct sl_principal *who,
                           struct sl_error *err);

/* The check of a presented key (key_id and secret from sl_api_key_parse).
 * SL_KEY_ACCEPTED with *who the tenant's principal; SL_KEY_REFUSED (no such
 * key, wrong secret, revoked, expired: the caller answers one 401 for
 * all); SL_KEY_NEEDS_STORE when !may_block and the cache cannot say (ask
 * again from a thread that may wait); -1 when the store failed (err). */
enum { SL_KEY_REFUSED = 0, SL_KEY_ACCEPTED = 1, SL_KEY_NEEDS_STORE = 2 };

/* The name of an enforced limit, as in a tenant's quotas. */
const char *sl_tenant_limit_name(enum sl_tenant_limit limit);

/* Quotas. A tenant's request that would add one of `limit` takes the
 * quota lock, checks, does what it was for, and lets go: on this worker
 * no two such requests pass one check together (across replicas, requests
 * at the same instant may). sandbox_id (its stored id) is what the request
 * is about: a sandbox that already counts adds nothing (resolving a live
 * sandbox again, connecting a ready one). 0 when within the quota (or
 * none is set); -1 with TENANT_QUOTA_EXCEEDED and *value the quota, or a
 * store error. */
void sl_svc_quota_lock(struct sl_service *svc);
void sl_svc_quota_unlock(struct sl_service *svc);
int sl_svc_tenant_quota_check(struct sl_service *svc, const struct sl_principal *who,
                              enum sl_tenant_limit limit, const char *sandbox_id, int64_t *value,
                              struct sl_error *err);
/* The two together, for a request that would add one of `limit`: 0 when
 * admitted, *held telling whether the quota lock is now held (only for a
 * tenant with that limit set; give it back with sl_svc_quota_leave once
 * what was admitted is done); -1 refused or failed (err, and *value the
 * quota when TENANT_QUOTA_EXCEEDED), holding nothing. */
int sl_svc_quota_enter(struct sl_service *svc, const struct sl_principal *who,
                       enum sl_tenant_limit limit, const char *sandbox_id, bool *held,
                       int64_t *value, struct sl_error *err);
void sl_svc_quota_leave(struct sl_service *svc, bool held);
/* A tenant principal made without a key (E2B's envd access token) given
 * its tenant's limits, from the sandbox's stored id (cached a second), so
 * the quota gates above apply to it as to a key's. The operator's is left
 * as it is. */
int sl_svc_principal_of_sandbox(struct sl_service *svc, const char *sandbox_id,
                                struct sl_principal *p, struct sl_error *err);
int sl_svc_key_check(struct sl_service *svc, const char *key_id, const char *secret,
                     bool may_block, struct sl_principal *who, struct sl_error *err);

#endif
