/* The front's memory of where a sandbox lives (API.md §10): the owner a
 * forward was decided for, kept for a second per (sandbox, generation), so a
 * burst of requests through a replica that holds nothing pays the route read
 * and the registry lookup once, not per request.
 *
 * Why a stale entry is harmless: an owner never changes within a generation
 * (a move is a new generation, which misses here), and the owner fences
 * every forwarded request itself against the same database (§10.1), so the
 * answer it gives is the one the front's own fence would have given. What an
 * entry can hide for up to its second is an owner that is gone: a request
 * then gets 503 SANDBOX_WORKER_UNREACHABLE (retry) where the fence would say
 * STALE_SANDBOX_ROUTE at once for an owner that unregistered cleanly (one
 * killed is in the registry until its entry expires, and answers 503 there
 * too); a forward that gets no answer, or a 503, makes the front forget the
 * sandbox. A request deciding while another forgets may put the entry back
 * for its second: the same 503 again, never a wrong owner. */
#ifndef SL_SERVICE_OWNER_CACHE_H
#define SL_SERVICE_OWNER_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define SVC_OWNER_CACHE_SLOTS 1024
#define SVC_OWNER_CACHE_TTL_US 1000000LL

struct svc_owner_cache;

struct svc_owner_cache *svc_owner_cache_new(void);
void svc_owner_cache_free(struct svc_owner_cache *c);
/* Remember o (its generation is the key's) for sandbox_id. */
void svc_owner_cache_put(struct svc_owner_cache *c, const char *sandbox_id,
                         const struct sl_error_owner *o);
/* An entry for (sandbox_id, generation) younger than the TTL: err becomes
 * SL_E_OWNED_ELSEWHERE with the owner, as svc_require_local_owner sets it,
 * and true is returned. */
bool svc_owner_cache_get(struct svc_owner_cache *c, const char *sandbox_id, int64_t generation,
                         struct sl_error *err);
void svc_owner_cache_forget(struct svc_owner_cache *c, const char *sandbox_id);

#endif
