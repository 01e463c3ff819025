/* Route lifecycle: resolve, route record, audit, connect, release
 * (spec API.md §2, §3.5–§3.8, §3.14). Every transition is a compare-and-set
 * on (sandbox_id, generation, status) in the store. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "service/history.h"
#include "service/internal.h"
#include "service/peer.h"
#include "workspace/files.h"

#define RESOLVE_ATTEMPTS 3
#define UID_ATTEMPTS 50

static bool status_is(const struct sl_route *r, const char *s)
{
    return strcmp(r->status, s) == 0;
}
static bool is_dormant(const struct sl_route *r)
{
    return status_is(r, "SUSPENDING") || status_is(r, "SUSPENDED");
}

static char *actor_for_scope(const char *scope)
{
    char *s = NULL;
    if (asprintf(&s, "workspace:%s", scope) < 0)
        return NULL;
    return s;
}

static int replace_str(char **dst, const char *src)
{
    char *copy = NULL;
    if (src && !(copy = strdup(src)))
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

/* ---- fencing ----------------------------------------------------------- */

int svc_fence(struct sl_service *svc, const char *sandbox_id, int64_t generation,
              struct sl_route *route, struct sl_error *err)
{
    int found = svc->store->ops->route_get(svc->store, sandbox_id, route, err);
    if (found < 0)
        return -1;
    /* Each refusal says what the caller can do about it (never the id). */
    if (!found)
        return sl_error_set(err, SL_E_STALE_ROUTE, 0,
                            "this sandbox has no route: resolve it first (POST "
                            "/api/v1/sandboxes/resolve) and use the generation it answers");
    if (status_is(route, "RELEASED") || status_is(route, "RELEASING")) {
        sl_error_set(err, SL_E_STALE_ROUTE, 0,
                     "the sandbox was released (it is %s at generation %lld): resolve it again "
                     "to start a new generation",
                     route->status, (long long)route->generation);
        sl_route_clear(route);
        return -1;
    }
    if (route->generation != generation) {
        sl_error_set(err, SL_E_STALE_ROUTE, 0,
                     "the sandbox is at generation %lld (%s), not the one given: resolve it "
                     "again and use the generation it answers",
                     (long long)route->generation, route->status);
        sl_route_clear(route);
        return -1;
    }
    if (is_dormant(route)) {
        sl_error_set(err, SL_E_SUSPENDED, 0,
                     "the sandbox is %s: resume it (POST /api/v1/sandboxes/{id}/resume), then "
                     "call again with the generation resume answers",
                     route->status);
        sl_route_clear(route);
        return -1;
    }
    struct sl_worker_entry owner;
    int live = svc_worker_lookup(svc, route->worker_id, &owner, err);
    if (live < 0) {
        sl_route_clear(route);
        return -1;
    }
    if (!live || !route->worker_epoch || strcmp(owner.worker_epoch, route->worker_epoch) != 0) {
        sl_route_clear(route);
        return sl_error_set(err, SL_E_STALE_ROUTE, 0,
                            "the worker that held this sandbox has restarted or is gone: "
                            "resolve it again and use the generation it answers");
    }
    return 0;
}

int svc_route_owner(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                    struct sl_error *err)
{
    if (svc_owner_cache_get(svc->owners, sandbox_id, generation, err))
        return -1;
    struct sl_route route = {0};
    if (svc_fence(svc, sandbox_id, generation, &route, err) < 0)
        return -1;
    int rc = svc_require_local_owner(svc, &route, err);
    sl_route_clear(&route);
    if (rc < 0 && err && sl_error_is(err, SL_E_OWNED_ELSEWHERE))
        svc_owner_cache_put(svc->owners, sandbox_id, &err->owner);
    return rc;
}

int svc_owner_fence(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                    struct sl_error *err)
{
    if (svc_route_owner(svc, sandbox_id, generation, err) < 0)
        return -1;
    uid_t uid;
    return svc_live_lookup(svc, sandbox_id, generation, &uid, err);
}

void sl_svc_owner_forget(struct sl_service *svc, const char *sandbox_id)
{
    svc_owner_cache_forget(svc->owners, sandbox_id);
}

int sl_svc_sandbox_owner(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    int64_t generation = 0;
    uid_t uid;
    if (svc_live_current(svc, sandbox_id, &generation, &uid) == 0)
        return 0;
    /* The route read gives the generation the owner cache is keyed by: an
     * owner never changes within one, so a hit is the decision the
     * registry would give. */
    struct sl_route r = {0};
    struct sl_error decision = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, &decision);
    int rc = 0;
    if (found == 1 && r.worker_id && !status_is(&r, "RELEASED") && !status_is(&r, "RELEASING")) {
        if (svc_owner_cache_get(svc->owners, sandbox_id, r.generation, err)) {
            rc = -1;
        } else if (is_dormant(&r)) {
            /* A paused sandbox is resumed by the worker that holds it,
             * whatever its epoch now (sl_svc_resume decides the same). */
            struct sl_worker_entry owner;
            if (strcmp(r.worker_id, svc->worker_id) != 0 &&
                svc_worker_lookup(svc, r.worker_id, &owner, &decision) == 1)
                rc = svc_owned_elsewhere(&r, &owner, err);
        } else if (svc_require_local_owner(svc, &r, &decision) < 0 &&
                   sl_error_is(&decision, SL_E_OWNED_ELSEWHERE)) {
            if (err)
                *err = decision;
            rc = -1;
        }
    }
    if (rc < 0 && err && sl_error_is(err, SL_E_OWNED_ELSEWHERE))
        svc_owner_cache_put(svc->owners, sandbox_id, &err->owner);
    sl_route_clear(&r);
    return rc;
}

/* The one owner decision of every route that acts on a sandbox (after
 * svc_fence): 0 when this process owns it; SL_E_OWNED_ELSEWHERE, with the
 * owner in err->owner, when a live peer does (the API forwards there,
 * API.md §10); a refusal otherwise. */
int svc_require_local_owner(struct sl_service *svc, const struct sl_route *route,
                            struct sl_error *err)
{
    /* The owner's own fence (§9.1 + §4.1 step 1): the route names this
     * worker id and this process's epoch. */
    if (route->worker_id && strcmp(route->worker_id, svc->worker_id) == 0) {
        if (!route->worker_epoch || strcmp(route->worker_epoch, svc->worker_epoch) != 0)
            return sl_error_set(err, SL_E_STALE_ROUTE, 0,
                                "this worker has restarted since the sandbox was placed: "
                                "resolve it again and use the generation it answers");
        return 0;
    }
    struct sl_worker_entry owner;
    int live = svc_worker_lookup(svc, route->worker_id, &owner, err);
    if (live < 0)
        return -1;
    if (!live || !route->worker_epoch || strcmp(owner.worker_epoch, route->worker_epoch) != 0)
        return sl_error_set(err, SL_E_STALE_ROUTE, 0,
                            "the worker that held this sandbox has restarted or is gone: "
                            "resolve it again and use the generation it answers");
    return svc_owned_elsewhere(route, &owner, err);
}

int svc_owned_elsewhere(const struct sl_route *route, const struct sl_worker_entry *owner,
                        struct sl_error *err)
{
    sl_error_set(err, SL_E_OWNED_ELSEWHERE, 0, "the sandbox is on worker %s", owner->worker_id);
    if (err) {
        struct sl_error_owner *o = &err->owner;
        snprintf(o->worker_id, sizeof(o->worker_id), "%s", owner->worker_id);
        snprintf(o->worker_epoch, sizeof(o->worker_epoch), "%s", owner->worker_epoch);
        snprintf(o->endpoint, sizeof(o->endpoint), "%s", owner->endpoint);
        snprintf(o->profile_id, sizeof(o->profile_id), "%s", route->profile_id);
        o->generation = route->generation;
        o->sandbox_uid = route->sandbox_uid;
    }
    return -1;
}

void svc_route_touch(struct sl_service *svc, const char *sandbox_id, int64_t generation)
{
    struct sl_error err = {0};
    if (svc->store->ops->route_touch(svc->store, sandbox_id, generation, sl_now_us(), &err) < 0)
        sl_warn("route %s: activity refresh failed: %s", sandbox_id, sl_error_text(&err));
}

/* ---- placement (FLEET.md §4) ------------------------------------------- */

static int place(struct sl_service *svc, struct sl_worker_entry *out, struct sl_error *err)
{
    struct sl_worker_entry *list = NULL;
    size_t n = 0;
    if (svc->registry->ops->list(svc->registry, 4096, &list, &n, NULL, NULL, err) < 0)
        return -1;
    int best = -1;
    double best_load = 0;
    for (size_t i = 0; i < n; i++) {
        struct sl_worker_entry *w = &list[i];
        if (strcmp(w->status, "ACTIVE") != 0 || strcmp(w->profile_hash, svc->profile_hash) != 0 ||
            w->running_sessions >= w->capacity)
            continue;
        double load = (double)w->running_sessions / (double)(w->capacity > 1 ? w->capacity : 1);
        if (best < 0 || load < best_load) {
            best = (int)i;
            best_load = load;
        }
    }
    if (best >= 0)
        *out = list[best];
    free(list);
    if (best < 0)
        return sl_error_set(err, SL_E_NO_WORKER, 0, "NO_SANDBOX_WORKER_AVAILABLE");
    return 0;
}

/* ---- JSON views ------------------------------------------------------------ */

static json_t *resolve_view(const struct sl_route *r, const struct sl_worker_entry *owner)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:s}", "sandbox_id", r->sandbox_id, "worker_id",
                     owner->worker_id, "worker_epoch", owner->worker_epoch, "worker_endpoint",
                     owner->endpoint, "generation", (json_int_t)r->generation, "sandbox_uid",
                     (json_int_t)r->sandbox_uid, "status", r->status, "storage_mode",
                     r->storage_mode);
}

static json_t *route_view(const struct sl_route *r)
{
    int64_t now = sl_now_us();
    json_t *o = json_object();
    json_object_set_new(o, "sandbox_id", json_string(r->sandbox_id));
    json_object_set_new(o, "workspace_scope_id", json_string(r->workspace_scope_id));
    json_object_set_new(o, "worker_id", sl_json_str_or_null(r->worker_id));
    json_object_set_new(o, "worker_epoch", sl_json_str_or_null(r->worker_epoch));
    json_object_set_new(o, "generation", json_integer(r->generation));
    json_object_set_new(o, "sandbox_uid", json_integer(r->sandbox_uid));
    json_object_set_new(o, "profile_id", json_string(r->profile_id));
    json_object_set_new(o, "profile_hash", json_string(r->profile_hash));
    json_object_set_new(o, "status", json_string(r->status));
    json_object_set_new(o, "storage_mode", json_string(r->storage_mode));
    json_object_set_new(o, "last_active_at", sl_json_ts(r->last_active_at, ""));
    json_object_set_new(o, "created_at", sl_json_ts(r->created_at, ""));
    json_object_set_new(o, "updated_at", sl_json_ts(r->updated_at, ""));
    json_object_set_new(
        o, "generation_started_at",
        sl_json_ts(r->generation_started_at ? r->generation_started_at : r->created_at, ""));
    if (r->generation_created_by) {
        json_object_set_new(o, "generation_created_by", json_string(r->generation_created_by));
    } else {
        char *actor = actor_for_scope(r->workspace_scope_id);
        json_object_set_new(o, "generation_created_by", sl_json_str_or_null(actor));
        free(actor);
    }
    json_object_set_new(o, "ready_at", sl_json_ts(r->ready_at, ""));
    json_object_set_new(
        o, "last_released_generation",
        sl_json_int_or_null(r->last_released_generation, r->last_released_generation == 0));
    json_object_set_new(o, "last_released_at", sl_json_ts(r->last_released_at, ""));
    json_object_set_new(o, "last_release_reason", sl_json_str_or_null(r->last_release_reason));
    json_object_set_new(o, "last_released_by", sl_json_str_or_null(r->last_released_by));
    json_object_set_new(o, "last_lifetime_ms",
                        sl_json_int_or_null(r->last_lifetime_ms, r->last_lifetime_ms < 0));
    json_object_set_new(o, "lifecycle_count",
                        json_integer(r->lifecycle_count ? r->lifecycle_count : 1));
    json_object_set_new(o, "total_lifetime_ms", json_integer(r->total_lifetime_ms));
    json_object_set_new(o, "lifecycle_history", sl_history_bounded(r->lifecycle_history_json, now));
    return o;
}

static json_t *audit_view(const struct sl_route *r)
{
    int64_t now = sl_now_us();
    json_t *o = json_object();
    json_object_set_new(o, "sandbox_id", json_string(r->sandbox_id));
    json_object_set_new(o, "workspace_scope_id", json_string(r->workspace_scope_id));
    json_object_set_new(o, "generation", json_integer(r->generation));
    json_object_set_new(o, "status", json_string(r->status));
    json_object_set_new(o, "first_created_at", sl_json_ts(r->created_at, "Z"));
    json_object_set_new(o, "generation_started_at", sl_json_ts(r->generation_started_at, "Z"));
    json_object_set_new(o, "generation_created_by", sl_json_str_or_null(r->generation_created_by));
    json_object_set_new(o, "ready_at", sl_json_ts(r->ready_at, "Z"));
    json_object_set_new(o, "last_active_at", sl_json_ts(r->last_active_at, "Z"));
    if (status_is(r, "RELEASED")) {
        json_object_set_new(o, "active_duration_ms", json_null());
    } else {
        int64_t from = r->ready_at                ? r->ready_at
                       : r->generation_started_at ? r->generation_started_at
                                                  : r->created_at;
        int64_t ms = from && now > from ? (now - from) / 1000 : 0;
        json_object_set_new(o, "active_duration_ms", json_integer(ms));
    }
    json_object_set_new(
        o, "last_released_generation",
        sl_json_int_or_null(r->last_released_generation, r->last_released_generation == 0));
    json_object_set_new(o, "last_released_at", sl_json_ts(r->last_released_at, "Z"));
    json_object_set_new(o, "last_release_reason", sl_json_str_or_null(r->last_release_reason));
    json_object_set_new(o, "last_released_by", sl_json_str_or_null(r->last_released_by));
    json_object_set_new(o, "last_lifetime_ms",
                        sl_json_int_or_null(r->last_lifetime_ms, r->last_lifetime_ms < 0));
    json_object_set_new(o, "lifecycle_count",
                        json_integer(r->lifecycle_count ? r->lifecycle_count : 1));
    json_object_set_new(o, "total_lifetime_ms", json_integer(r->total_lifetime_ms));
    json_object_set_new(o, "history_retention_days", json_integer(SL_HISTORY_RETENTION_DAYS));
    json_object_set_new(o, "history_max_entries", json_integer(SL_HISTORY_MAX_ENTRIES));
    json_object_set_new(o, "history_max_bytes", json_integer(SL_HISTORY_MAX_BYTES));
    json_object_set_new(o, "history", sl_history_bounded(r->lifecycle_history_json, now));
    return o;
}

/* Read a route and render it with `view`; SANDBOX_NOT_FOUND when absent. */
/* Ours, additive (the reclamation issue): when the sandbox will be
 * reclaimed if nothing happens. idle_release_at: an awake route idle for
 * SANDBOX_IDLE_TTL_SECONDS is released (null while a command runs, or when
 * the TTL is off); retained_until: a suspended one is released after
 * SANDBOX_SUSPENDED_RETENTION_SECONDS. The warm session's own idle stop is
 * on each exec answer (session_idle_stop_at). */
static void add_reclaim_times(const struct sl_service *svc, const struct sl_route *r, json_t *doc)
{
    const struct sl_config *cfg = svc->cfg;
    bool awake = status_is(r, "ASSIGNED") || status_is(r, "READY");
    bool dormant = status_is(r, "SUSPENDED");
    int64_t idle = awake && !r->active_exec_id && cfg->idle_ttl_seconds > 0 && r->last_active_at
                       ? r->last_active_at + cfg->idle_ttl_seconds * 1000000
                       : 0;
    int64_t kept = dormant && cfg->suspended_retention_seconds > 0 && r->last_active_at
                       ? r->last_active_at + cfg->suspended_retention_seconds * 1000000
                       : 0;
    json_object_set_new(doc, "idle_release_at", sl_json_ts(idle, "Z"));
    json_object_set_new(doc, "retained_until", sl_json_ts(kept, "Z"));
}

json_t *svc_route_owner_live(struct sl_service *svc, const struct sl_route *r)
{
    /* Nothing holds a released route (or one not placed yet). */
    if (!r->worker_id || !r->worker_epoch || status_is(r, "RELEASED"))
        return json_null();
    struct sl_worker_entry owner;
    struct sl_error ignored = {0};
    int live = svc_worker_lookup(svc, r->worker_id, &owner, &ignored);
    return json_boolean(live == 1 && strcmp(owner.worker_epoch, r->worker_epoch) == 0);
}

static json_t *route_lookup(struct sl_service *svc, const char *sandbox_id,
                            json_t *(*view)(const struct sl_route *), struct sl_error *err)
{
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found <= 0) {
        if (found == 0)
            sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "SANDBOX_NOT_FOUND");
        return NULL;
    }
    json_t *doc = view(&r);
    if (doc && view == route_view) {
        add_reclaim_times(svc, &r, doc);
        /* Ours, additive: false when the worker that holds the route is
         * gone or restarted (every call with its generation answers 409
         * STALE_SANDBOX_ROUTE until the sandbox is resolved again). */
        json_object_set_new(doc, "owner_live", svc_route_owner_live(svc, &r));
    }
    sl_route_clear(&r);
    return doc;
}

json_t *sl_svc_route_get(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    return route_lookup(svc, sandbox_id, route_view, err);
}

json_t *sl_svc_audit(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    json_t *doc = route_lookup(svc, sandbox_id, audit_view, err);
    if (!doc)
        return NULL;
    /* Ours, additive: the sandbox's most recent executions (all
     * generations) beside its lifecycle history. */
    struct sl_error ignored = {0};
    json_t *recent = svc_recent_execs(svc, sandbox_id, SVC_AUDIT_RECENT_EXECS, &ignored);
    json_object_set_new(doc, "executions", recent ? recent : json_null());
    return doc;
}

/* ---- release bookkeeping ------------------------------------------------- */

/* Close the current generation in *r: history entry, last_released_*,
 * lifetime totals. Used by release and by reassignment of a live route. */
static int close_generation(struct sl_route *r, const char *reason, const char *actor, int64_t now)
{
    int64_t lifetime =
        sl_history_lifetime_ms(now, r->ready_at, r->generation_started_at, r->created_at);
    struct sl_history_entry e = {
        .generation = r->generation,
        .started_at = r->generation_started_at ? r->generation_started_at : r->created_at,
        .created_by = r->generation_created_by,
        .ready_at = r->ready_at,
        .released_at = now,
        .release_reason = reason,
        .released_by = actor,
        .lifetime_ms = lifetime,
    };
    char *history = sl_history_append(r->lifecycle_history_json, &e, now);
    if (!history)
        return -1;
    free(r->lifecycle_history_json);
    r->lifecycle_history_json = history;
    r->last_released_generation = r->generation;
    r->last_released_at = now;
    r->last_lifetime_ms = lifetime;
    r->total_lifetime_ms += lifetime;
    if (replace_str(&r->last_release_reason, reason) < 0 ||
        replace_str(&r->last_released_by, actor) < 0)
        return -1;
    return 0;
}

/* Reassign *cur to `target` (generation+1, ASSIGNED). A route that was not
 * RELEASED closes its generation in the history first. 1 = done, 0 = lost
 * the compare-and-set (caller re-reads), -1 = error. */
static int route_reassign(struct sl_service *svc, const struct sl_route *cur,
                          const struct sl_worker_entry *target, const char *reason,
                          const char *actor, struct sl_error *err)
{
    int64_t now = sl_now_us();
    struct sl_route next = {0};
    if (sl_route_copy(&next, cur) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    bool was_released = status_is(cur, "RELEASED");
    int rc = -1;
    if (!was_released && close_generation(&next, reason, "system:route-reassign", now) < 0)
        goto oom;
    next.generation = cur->generation + 1;
    snprintf(next.status, sizeof(next.status), "ASSIGNED");
    if (replace_str(&next.worker_id, target->worker_id) < 0 ||
        replace_str(&next.worker_epoch, target->worker_epoch) < 0 ||
        replace_str(&next.profile_hash, svc->profile_hash) < 0 ||
        replace_str(&next.generation_created_by, actor) < 0 ||
        replace_str(&next.active_exec_id, NULL) < 0)
        goto oom;
    next.generation_started_at = now;
    next.ready_at = 0;
    next.lifecycle_count = (cur->lifecycle_count ? cur->lifecycle_count : 1) + 1;
    next.last_active_at = now;
    next.updated_at = now;
    char status[16];
    snprintf(status, sizeof(status), "%s", cur->status);
    const char *expect[] = {status, NULL};
    rc = svc->store->ops->route_cas(svc->store, &next, cur->generation, expect, err);
    if (rc == 1 && !was_released) {
        struct sl_error ignored = {0};
        svc->store->ops->exec_mark_running(svc->store, cur->sandbox_id, cur->generation,
                                           "WORKER_LOST", "WORKER_LOST", now, &ignored);
    }
    goto out;
oom:
    rc = sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
out:
    sl_route_clear(&next);
    return rc;
}

static int insert_new_route(struct sl_service *svc, const char *sandbox_id, const char *scope,
                            const struct sl_worker_entry *target, const char *actor,
                            struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    int64_t now = sl_now_us();
    struct sl_route r = {
        .sandbox_id = (char *)sandbox_id,
        .workspace_scope_id = (char *)scope,
        .worker_id = (char *)target->worker_id,
        .worker_epoch = (char *)target->worker_epoch,
        .generation = 1,
        .profile_id = cfg->profile_id,
        .profile_hash = svc->profile_hash,
        .last_active_at = now,
        .generation_started_at = now,
        .generation_created_by = (char *)actor,
        .last_lifetime_ms = -1,
        .lifecycle_count = 1,
        .created_at = now,
        .updated_at = now,
    };
    snprintf(r.status, sizeof(r.status), "ASSIGNED");
    snprintf(r.storage_mode, sizeof(r.storage_mode), "%s", cfg->shared_root ? "shared" : "local");
    /* Placed here: a prepared sandbox's uid and session, when one is ready. */
    if (strcmp(target->worker_id, svc->worker_id) == 0 &&
        strcmp(target->worker_epoch, svc->worker_epoch) == 0) {
        int rc = svc_warm_insert(svc, &r, err);
        if (rc != -2)
            return rc;
    }
    return svc_route_insert_new(svc, &r, err);
}

int svc_route_insert_here(struct sl_service *svc, const char *sandbox_id, const char *scope,
                          const char *actor, struct sl_error *err)
{
    if (ws_sandbox_id_check(sandbox_id, err) < 0)
        return -1;
    struct sl_worker_entry self;
    int live = svc_worker_lookup(svc, svc->worker_id, &self, err);
    if (live < 0)
        return -1;
    if (!live || strcmp(self.worker_epoch, svc->worker_epoch) != 0 ||
        self.running_sessions >= self.capacity)
        return sl_error_set(err, SL_E_NO_WORKER, 0, "NO_SANDBOX_WORKER_AVAILABLE");
    return insert_new_route(svc, sandbox_id, scope, &self, actor, err);
}

int svc_route_insert_new(struct sl_service *svc, struct sl_route *r, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    for (int attempt = 0; attempt < UID_ATTEMPTS; attempt++) {
        int64_t uid;
        if (sl_random_range(cfg->uid_start, cfg->uid_end, &uid) < 0)
            return sl_error_errno(err, SL_E_INTERNAL, "no randomness");
        r->sandbox_uid = uid;
        int rc = svc->store->ops->route_insert(svc->store, r, err);
        if (rc != -2)
            return rc; /* 1 inserted, 0 someone else inserted the id, -1 error */
    }
    return sl_error_set(err, SL_E_UID_POOL_EXHAUSTED, 0, "Sandbox UID pool is exhausted");
}

json_t *sl_svc_resolve(struct sl_service *svc, const char *sandbox_id, const char *scope,
                       const char *profile, const char *actor, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    if (strcmp(profile, cfg->profile_id) != 0) {
        sl_error_set(err, SL_E_PROFILE_UNAVAILABLE, 0, "SANDBOX_PROFILE_UNAVAILABLE");
        return NULL;
    }
    if (ws_sandbox_id_check(sandbox_id, err) < 0)
        return NULL;
    _cleanup_free_ char *scope_actor = actor ? NULL : actor_for_scope(scope);
    if (!actor && !(actor = scope_actor)) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    for (int attempt = 0; attempt < RESOLVE_ATTEMPTS; attempt++) {
        struct sl_route r = {0};
        struct sl_worker_entry owner;
        int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
        if (found < 0)
            return NULL;
        if (!found) {
            if (place(svc, &owner, err) < 0)
                return NULL;
            if (insert_new_route(svc, sandbox_id, scope, &owner, actor, err) < 0)
                return NULL;
            continue; /* re-read: ours or the concurrent winner's row */
        }
        json_t *answer = NULL;
        int rc = 1;
        if (strcmp(r.workspace_scope_id, scope) != 0) {
            sl_error_set(err, SL_E_SCOPE_MISMATCH, 0, "SANDBOX_SCOPE_MISMATCH");
        } else if (strcmp(r.profile_id, profile) != 0) {
            sl_error_set(err, SL_E_PROFILE_MISMATCH, 0, "SANDBOX_PROFILE_MISMATCH");
        } else if (is_dormant(&r)) {
            /* Step 5: wake it, then answer with the route as resolve does. */
            json_t *woken = sl_svc_resume(svc, sandbox_id, err);
            rc = woken ? 0 : -1; /* 0: re-read and answer below */
            json_decref(woken);
        } else if (strcmp(r.profile_hash, svc->profile_hash) != 0) {
            rc = place(svc, &owner, err) < 0
                     ? -1
                     : route_reassign(svc, &r, &owner, "PROFILE_UPGRADE", actor, err);
        } else if (status_is(&r, "RELEASED")) {
            int live = svc_worker_lookup(svc, r.worker_id, &owner, err);
            if (live < 0 || (!live && place(svc, &owner, err) < 0))
                rc = -1;
            else
                rc = route_reassign(svc, &r, &owner, "CLIENT_RELEASE", actor, err);
        } else {
            int live = svc_worker_lookup(svc, r.worker_id, &owner, err);
            if (live < 0) {
                rc = -1;
            } else if (live && r.worker_epoch && strcmp(owner.worker_epoch, r.worker_epoch) == 0) {
                answer = resolve_view(&r, &owner);
            } else if (!live && place(svc, &owner, err) < 0) {
                rc = -1;
            } else {
                rc = route_reassign(svc, &r, &owner, "WORKER_REASSIGNED", actor, err);
            }
        }
        sl_route_clear(&r);
        if (answer)
            return answer;
        if (rc < 0 || err->code)
            return NULL;
        /* rc == 1 reassigned or 0 lost a race: re-read and answer. */
    }
    sl_error_set(err, SL_E_BUSY_OR_STALE, 0, "SANDBOX_BUSY_OR_STALE");
    return NULL;
}

/* ---- connect (create on the owner) ------------------------------------- */

json_t *sl_svc_connect(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                       struct sl_error *err)
{
    struct sl_route r = {0};
    if (svc_fence(svc, sandbox_id, generation, &r, err) < 0)
        return NULL;
    json_t *answer = NULL;
    if (svc_require_local_owner(svc, &r, err) < 0)
        goto out;
    if (strcmp(r.profile_id, svc->cfg->profile_id) != 0) {
        sl_error_set(err, SL_E_PROFILE_UNAVAILABLE, 0, "SANDBOX_PROFILE_UNAVAILABLE");
        goto out;
    }
    struct sl_disk_status disk;
    svc_disk_status(svc, &disk);
    if (ws_sandbox_create(svc->cfg->workspace_root, sandbox_id, (uid_t)r.sandbox_uid,
                          disk.available, &svc->quota, err) < 0)
        goto out;
    if (status_is(&r, "RUNNING")) {
        sl_error_set(err, SL_E_STALE_ROUTE, 0, "STALE_SANDBOX_ROUTE");
        goto out;
    }
    int64_t now = sl_now_us();
    if (!r.ready_at)
        r.ready_at = now;
    snprintf(r.status, sizeof(r.status), "READY");
    r.last_active_at = r.updated_at = now;
    const char *expect[] = {"ASSIGNED", "READY", NULL};
    int rc = svc->store->ops->route_cas(svc->store, &r, generation, expect, err);
    if (rc < 0)
        goto out;
    if (rc == 0) {
        sl_error_set(err, SL_E_STALE_ROUTE, 0, "STALE_SANDBOX_ROUTE");
        goto out;
    }
    /* Live only once the route says READY at this generation. */
    if (svc_live_register(svc, sandbox_id, r.generation, (uid_t)r.sandbox_uid) < 0) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    answer = json_pack("{s:s,s:I,s:I,s:s}", "sandbox_id", sandbox_id, "generation",
                       (json_int_t)generation, "uid", (json_int_t)r.sandbox_uid, "status", "READY");
out:
    sl_route_clear(&r);
    return answer;
}

/* ---- release -------------------------------------------------------------- */

/* The owner's destroy (RUNTIME.md §9): refuse new calls, drain in-flight
 * file calls and executions through the global lock, forget the live entry,
 * move the root into the trash. */
static int worker_destroy(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                          struct sl_error *err)
{
    svc_live_mark_destroying(svc, sandbox_id);
    struct sl_error ignored = {0};
    /* Nothing of the sandbox may outlive it (a process that escaped its
     * execution's process group at basic level). */
    if (sl_rt_kill_sandbox(svc->runtime, uid, err) < 0)
        return sl_error_wrap(err, "destroy %s", sandbox_id);
    _cleanup_close_ int rootfd = ws_sandbox_open(svc->cfg->workspace_root, sandbox_id, &ignored);
    _cleanup_close_ int lockfd = -1;
    if (rootfd >= 0)
        lockfd = ws_lock_global(rootfd, true, true, SL_E_RELEASING, &ignored);
    svc_live_remove(svc, sandbox_id);
    svc_execs_forget(svc, sandbox_id);
    if (ws_sandbox_trash(svc->cfg->workspace_root, sandbox_id, err) < 0)
        return sl_error_wrap(err, "destroy %s", sandbox_id);
    return 0;
}

/* The owner's half of a release asked by a peer (DELETE
 * /internal/v1/sandboxes/{id}?generation=G, API.md §9.2): the route is
 * still this worker's at G (RELEASING by then), and the sandbox goes. */
json_t *sl_svc_worker_destroy(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                              struct sl_error *err)
{
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found < 0)
        return NULL;
    json_t *answer = NULL;
    if (!found || r.generation != generation || status_is(&r, "RELEASED")) {
        sl_error_set(err, SL_E_STALE_ROUTE, 0,
                     "the route is not at this generation any more: nothing to destroy");
    } else if (svc_require_local_owner(svc, &r, err) < 0) {
        if (sl_error_is(err, SL_E_OWNED_ELSEWHERE))
            sl_error_set(err, SL_E_STALE_ROUTE, 0, "the sandbox is held by another worker");
    } else if (worker_destroy(svc, sandbox_id, (uid_t)r.sandbox_uid, err) == 0) {
        answer = json_pack("{s:s}", "status", "DESTROYED");
    }
    sl_route_clear(&r);
    return answer;
}

/* The destroy of a release whose owner is a live peer: asked of it over
 * the worker protocol (15 s, API.md §10.2). A peer that does not answer
 * leaves the route RELEASING; the reaper's RELEASE_RETRY finishes it. */
static int peer_destroy(struct sl_service *svc, const struct sl_worker_entry *owner,
                        const char *sandbox_id, int64_t generation, struct sl_error *err)
{
    char *url = NULL, *auth = NULL;
    size_t elen = strlen(owner->endpoint);
    while (elen && owner->endpoint[elen - 1] == '/')
        elen--;
    if (asprintf(&url, "%.*s/internal/v1/sandboxes/%s?generation=%lld", (int)elen, owner->endpoint,
                 sandbox_id, (long long)generation) < 0)
        url = NULL;
    if (asprintf(&auth, "Bearer %s", svc->cfg->internal_token) < 0)
        auth = NULL;
    int rc = -1;
    struct sl_peer_answer a = {0};
    if (url && auth) {
        struct sl_peer_request rq = {.method = "DELETE",
                                     .url = url,
                                     .auth = auth,
                                     .worker_id = owner->worker_id,
                                     .generation = generation,
                                     .timeout_ms = 15000};
        if (sl_peer_call(&rq, &a) < 0)
            sl_error_set(err, SL_E_WORKER_UNREACHABLE, 0, "SANDBOX_WORKER_UNREACHABLE");
        else if (a.status != 200)
            sl_error_set(err, SL_E_WORKER_UNREACHABLE, 0, "SANDBOX_WORKER_UNREACHABLE");
        else
            rc = 0;
        if (rc < 0 && err)
            snprintf(err->detail, sizeof(err->detail), "destroy on %s: %s %.200s", owner->worker_id,
                     a.status ? "answered" : a.why, a.body ? a.body : "");
    } else {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    free(a.body);
    free(url);
    sl_free_secret(auth);
    return rc;
}

json_t *svc_owner_call(struct sl_service *svc, const struct sl_error_owner *owner,
                       const char *method, const char *sandbox_id, const char *suffix,
                       const json_t *body, struct sl_error *err)
{
    _cleanup_free_ char *url = NULL, *text = NULL;
    char *auth = NULL;
    size_t elen = strlen(owner->endpoint);
    while (elen && owner->endpoint[elen - 1] == '/')
        elen--;
    if (asprintf(&url, "%.*s/internal/v1/sandboxes/%s%s", (int)elen, owner->endpoint,
                 sandbox_id, suffix) < 0)
        url = NULL;
    if (asprintf(&auth, "Bearer %s", svc->cfg->internal_token) < 0)
        auth = NULL;
    if (body)
        text = json_dumps(body, JSON_COMPACT);
    if (!url || !auth || (body && !text)) {
        sl_free_secret(auth);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory"), NULL;
    }
    struct sl_peer_request rq = {.method = method,
                                 .url = url,
                                 .auth = auth,
                                 .worker_id = owner->worker_id,
                                 .generation = owner->generation,
                                 .body = text,
                                 .body_len = text ? strlen(text) : 0,
                                 .timeout_ms = 30000};
    struct sl_peer_answer a = {0};
    int called = sl_peer_call(&rq, &a);
    sl_free_secret(auth);
    json_t *doc = NULL;
    if (called == 0 && a.status >= 200 && a.status < 300)
        doc = json_loadb(a.body, a.len, 0, NULL);
    if (!doc) {
        sl_error_set(err, SL_E_WORKER_UNREACHABLE, 0,
                     "the worker that holds the sandbox did not do what was asked of it: retry");
        if (err)
            snprintf(err->detail, sizeof(err->detail), "%s %s%s on %s: %s%d %.400s", method,
                     sandbox_id, suffix, owner->worker_id, called == 0 ? "answered " : a.why,
                     a.status, a.body ? a.body : "");
    }
    free(a.body);
    return doc;
}

json_t *sl_svc_release(struct sl_service *svc, const char *sandbox_id, const char *actor,
                       struct sl_error *err)
{
    json_t *doc = svc_release(svc, sandbox_id, "CLIENT_RELEASE", actor, err);
    /* Its egress policy goes with it: the next sandbox of this id starts
     * from its tenant's or the worker's. */
    if (doc)
        svc_egress_forget(svc, sandbox_id);
    return doc;
}

json_t *svc_release(struct sl_service *svc, const char *sandbox_id, const char *reason,
                    const char *by, struct sl_error *err)
{
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found < 0)
        return NULL;
    if (!found || status_is(&r, "RELEASED")) {
        sl_route_clear(&r);
        return json_pack("{s:s}", "status", "RELEASED");
    }
    json_t *answer = NULL;
    _cleanup_free_ char *actor = NULL;
    int64_t now = sl_now_us();
    int64_t gen = r.generation;
    /* A RUNNING route is busy while its owner lives. Once the owner is gone
     * (a crash: the registry no longer has its epoch) the executions can
     * never finish, so release takes it as the reaper's worker-lost claim
     * would (FLEET.md §6.1) instead of refusing until someone resolves. */
    struct sl_worker_entry owner;
    int live = svc_worker_lookup(svc, r.worker_id, &owner, err);
    if (live < 0)
        goto out;
    bool owner_live = live && r.worker_epoch && strcmp(owner.worker_epoch, r.worker_epoch) == 0;
    if (status_is(&r, "RUNNING") && owner_live) {
        sl_error_set(err, SL_E_BUSY_OR_STALE, 0, "SANDBOX_BUSY_OR_STALE");
        goto out;
    }
    if (!status_is(&r, "RELEASING")) {
        bool was_running = status_is(&r, "RUNNING");
        snprintf(r.status, sizeof(r.status), "RELEASING");
        r.last_active_at = r.updated_at = now;
        const char *claimable[] = {"ASSIGNED", "READY", "SUSPENDING", "SUSPENDED", NULL};
        const char *lost[] = {"RUNNING", NULL};
        replace_str(&r.active_exec_id, NULL);
        int rc =
            svc->store->ops->route_cas(svc->store, &r, gen, was_running ? lost : claimable, err);
        if (rc < 0)
            goto out;
        if (rc == 1 && was_running) {
            struct sl_error ignored = {0};
            svc->store->ops->exec_mark_running(svc->store, sandbox_id, gen, "WORKER_LOST",
                                               "WORKER_LOST", now, &ignored);
        }
        if (rc == 0) {
            struct sl_route now_r = {0};
            int again = svc->store->ops->route_get(svc->store, sandbox_id, &now_r, err);
            bool running = again == 1 && status_is(&now_r, "RUNNING");
            sl_route_clear(&now_r);
            sl_error_set(err, running ? SL_E_BUSY_OR_STALE : SL_E_STALE_GENERATION, 0, "%s",
                         running ? SL_E_BUSY_OR_STALE : SL_E_STALE_GENERATION);
            goto out;
        }
    }

    /* Destroy on the owner. Live with the same epoch => it is this process
     * in this build (a peer would be called over /internal/v1). Owner gone:
     * destroy locally when storage is shared or we are the recorded owner. */
    bool owner_is_us = r.worker_id && strcmp(r.worker_id, svc->worker_id) == 0;
    if (owner_live) {
        if (!owner_is_us) {
            if (peer_destroy(svc, &owner, sandbox_id, gen, err) < 0)
                goto out;
        } else if (worker_destroy(svc, sandbox_id, (uid_t)r.sandbox_uid, err) < 0) {
            goto out;
        }
    } else if (svc->cfg->shared_root || owner_is_us) {
        if (worker_destroy(svc, sandbox_id, (uid_t)r.sandbox_uid, err) < 0)
            goto out;
    }

    /* RELEASING -> RELEASED, generation + 1. */
    actor = by ? strdup(by) : actor_for_scope(r.workspace_scope_id);
    now = sl_now_us();
    if (!actor || close_generation(&r, reason, actor, now) < 0) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    snprintf(r.status, sizeof(r.status), "RELEASED");
    r.generation = gen + 1;
    replace_str(&r.active_exec_id, NULL);
    r.last_active_at = r.updated_at = now;
    const char *releasing[] = {"RELEASING", NULL};
    int rc = svc->store->ops->route_cas(svc->store, &r, gen, releasing, err);
    if (rc < 0)
        goto out;
    if (rc == 0) {
        sl_error_set(err, SL_E_STALE_GENERATION, 0, "STALE_SANDBOX_GENERATION");
        goto out;
    }
    /* A released sandbox's snapshot has nothing left to restore. */
    svc_snapshot_delete(svc, sandbox_id);
    answer = json_pack("{s:s}", "status", "RELEASED");
out:
    sl_route_clear(&r);
    return answer;
}

/* ---- suspend / resume (API.md §3.15, §3.16, §7) ------------------------- */

/* memory (ours): processes and memory were kept (a checkpoint). */
static json_t *suspend_view(const struct sl_route *r, bool suspended, bool snapshot, bool memory,
                            int64_t retention_s)
{
    int64_t until =
        retention_s > 0 && r->last_active_at ? r->last_active_at + retention_s * 1000000 : 0;
    return json_pack("{s:s,s:I,s:s,s:b,s:b,s:b,s:o}", "sandbox_id", r->sandbox_id, "generation",
                     (json_int_t)r->generation, "status", "SUSPENDED", "snapshot", snapshot,
                     "memory", memory, "suspended", suspended, "retained_until",
                     sl_json_ts(until, "Z"));
}

/* Move the route from one status to another at its generation. 1 done, 0
 * lost the race, -1 error. */
static int route_move(struct sl_service *svc, struct sl_route *r, const char *from, const char *to,
                      bool touch, struct sl_error *err)
{
    int64_t now = sl_now_us();
    snprintf(r->status, sizeof(r->status), "%s", to);
    if (touch)
        r->last_active_at = now;
    r->updated_at = now;
    const char *expect[] = {from, NULL};
    return svc->store->ops->route_cas(svc->store, r, r->generation, expect, err);
}

void svc_memory_dir(const struct sl_service *svc, const char *sandbox_id, char *out, size_t size)
{
    snprintf(out, size, "%s/%s/memory", svc->cfg->workspace_root, sandbox_id);
}


/* With memory: the running session checkpointed into memory_dir() (its
 * processes end with it). *kept says whether there was one to keep.
 * Refusals: the backend cannot (501), a background process holds a host
 * descriptor (409 SANDBOX_SUSPEND_BUSY, with which). */
static int checkpoint_session(struct sl_service *svc, const struct sl_route *r, bool *kept,
                              struct sl_error *err)
{
    char root[PATH_MAX], dir[PATH_MAX + 16];
    snprintf(root, sizeof(root), "%s/%s", svc->cfg->workspace_root, r->sandbox_id);
    svc_memory_dir(svc, r->sandbox_id, dir, sizeof(dir));
    (void)sl_tree_remove(dir); /* an older image (a suspend that did not finish) */
    struct sl_error why = {0};
    *kept = false;
    if (sl_rt_session_checkpoint(svc->runtime, (uid_t)r->sandbox_uid, root, dir, &why) == 0) {
        *kept = true;
        if (svc_image_save_templates(svc, r->sandbox_id, dir, err) < 0) {
            /* Unrestorable without them: the processes come back now. */
            (void)svc_session_restore(svc, r->sandbox_id, (uid_t)r->sandbox_uid, dir, &why);
            (void)sl_tree_remove(dir);
            return -1;
        }
        return 0;
    }
    (void)sl_tree_remove(dir);
    switch (why.errnum) {
    case ENOENT: /* nothing runs: nothing to keep but the files */
        return 0;
    case ENOTSUP:
        return sl_error_set(err, "SANDBOX_MEMORY_SUSPEND_UNSUPPORTED", 0, "%s", why.message);
    case EBUSY:
        return sl_error_set(err, "SANDBOX_SUSPEND_BUSY", 0,
                            "the sandbox's memory cannot be kept: %s", why.message);
    default:
        *err = why;
        return sl_error_wrap(err, "suspend %s with its memory", r->sandbox_id);
    }
}

/* The worker's suspend (§7): nothing may run or hold the sandbox; every
 * process goes (a suspended sandbox costs no process), the directory stays,
 * the capacity slot is freed. With memory, the processes are checkpointed
 * first (checkpoint_session). */
static int worker_suspend(struct sl_service *svc, const struct sl_route *r, bool memory,
                          bool *snapshot, bool *kept_memory, struct sl_error *err)
{
    *snapshot = false;
    *kept_memory = false;
    if (strcmp(svc->cfg->suspend_snapshot, "always") == 0 && !svc->blobstore)
        return sl_error_set(err, "SANDBOX_SNAPSHOT_UNAVAILABLE", 0, "SANDBOX_SNAPSHOT_UNAVAILABLE");
    if (svc_execs_running(svc, r->sandbox_id) > 0)
        return sl_error_set(err, "SANDBOX_SUSPEND_BUSY", 0, "SANDBOX_SUSPEND_BUSY");
    struct sl_error ignored = {0};
    _cleanup_close_ int rootfd = ws_sandbox_open(svc->cfg->workspace_root, r->sandbox_id, &ignored);
    _cleanup_close_ int lockfd = -1;
    if (rootfd >= 0) {
        /* Any file call or execution holds the global lock: busy. */
        lockfd = ws_lock_global(rootfd, true, false, "SANDBOX_SUSPEND_BUSY", err);
        if (lockfd < 0)
            return -1;
    }
    char image[PATH_MAX + 16];
    svc_memory_dir(svc, r->sandbox_id, image, sizeof(image));
    if (!memory)
        (void)sl_tree_remove(image); /* never restored over the files of a later suspend */
    if (memory && rootfd >= 0 && checkpoint_session(svc, r, kept_memory, err) < 0)
        return -1;
    /* Every process goes first, so the snapshot sees files at rest. */
    svc_live_remove(svc, r->sandbox_id);
    int rc = sl_rt_kill_sandbox(svc->runtime, (uid_t)r->sandbox_uid, err);
    if (rc < 0)
        sl_error_wrap(err, "suspend %s", r->sandbox_id);
    else if (rootfd >= 0 && svc_snapshot_wanted(svc) &&
             (rc = svc_snapshot_write(svc, r->sandbox_id, r->generation, err)) == 0)
        *snapshot = true;
    if (rc < 0) {
        /* Refused: the sandbox stays awake; with memory kept, its
         * processes come back from the checkpoint, which then goes. */
        (void)svc_live_register(svc, r->sandbox_id, r->generation, (uid_t)r->sandbox_uid);
        if (*kept_memory) {
            struct sl_error back = {0};
            if (svc_session_restore(svc, r->sandbox_id, (uid_t)r->sandbox_uid, image, &back) <
                0)
                sl_warn("suspend %s failed, and its processes could not be restored: %s",
                        r->sandbox_id, sl_error_text(&back));
            (void)sl_tree_remove(image);
            *kept_memory = false;
        }
        return -1;
    }
    return 0;
}

static bool owner_is_us(const struct sl_service *svc, const struct sl_route *r)
{
    return r->worker_id && strcmp(r->worker_id, svc->worker_id) == 0 && r->worker_epoch &&
           strcmp(r->worker_epoch, svc->worker_epoch) == 0;
}

/* 1 when a live peer holds the route (err says SL_E_OWNED_ELSEWHERE: the
 * request is forwarded); 0 when it is ours or its owner is gone (err
 * untouched: the caller's own checks decide); -1 when the owner could not
 * be asked (the registry is away: err), so nothing is claimed. */
static int owned_by_live_peer(struct sl_service *svc, const struct sl_route *r,
                              struct sl_error *err)
{
    struct sl_error decision = {0};
    if (svc_require_local_owner(svc, r, &decision) == 0 ||
        sl_error_is(&decision, SL_E_STALE_ROUTE))
        return 0; /* ours, or its owner is gone: the caller's own checks decide */
    *err = decision; /* a live peer's (forward), or the question failed */
    return sl_error_is(&decision, SL_E_OWNED_ELSEWHERE) ? 1 : -1;
}

json_t *sl_svc_suspend(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                       bool memory, struct sl_error *err)
{
    int64_t retention = svc->cfg->suspended_retention_seconds;
    for (int attempt = 0; attempt < RESOLVE_ATTEMPTS; attempt++) {
        struct sl_route r = {0};
        int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
        if (found < 0)
            return NULL;
        if (!found) {
            sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "SANDBOX_NOT_FOUND");
            return NULL;
        }
        json_t *answer = NULL;
        int rc = 1, peer = 0;
        if (r.generation != generation) {
            sl_error_set(err, SL_E_STALE_GENERATION, 0, "STALE_SANDBOX_GENERATION");
        } else if (status_is(&r, "SUSPENDED")) {
            /* a no-op; whether memory was kept then is on disk */
            char dir[PATH_MAX + 16];
            svc_memory_dir(svc, sandbox_id, dir, sizeof(dir));
            answer = suspend_view(&r, false, false, access(dir, F_OK) == 0, retention);
        } else if (status_is(&r, "RUNNING") || (status_is(&r, "READY") && r.active_exec_id)) {
            sl_error_set(err, "SANDBOX_SUSPEND_BUSY", 0, "SANDBOX_SUSPEND_BUSY");
        } else if (status_is(&r, "ASSIGNED")) {
            sl_error_set(err, "SANDBOX_NOT_READY", 0,
                         "the sandbox is ASSIGNED, not READY: create it (POST "
                         "/api/v1/sandboxes/{id} with its generation) before suspending it");
        } else if (!status_is(&r, "READY") && !status_is(&r, "SUSPENDING")) {
            sl_error_set(err, SL_E_STALE_GENERATION, 0, "STALE_SANDBOX_GENERATION");
        } else if ((peer = owned_by_live_peer(svc, &r, err)) != 0) {
            /* A live peer's: the whole suspend runs there (forwarded); or
             * the owner could not be asked. Nothing was claimed. */
            rc = peer < 0 ? -1 : 1;
        } else if (status_is(&r, "READY") &&
                   (rc = route_move(svc, &r, "READY", "SUSPENDING", false, err)) != 1) {
            /* lost the claim (rc 0: re-read) or failed */
        } else {
            /* SUSPENDING: ours now, or left by an earlier attempt. */
            bool snapshot = false, kept_memory = false;
            struct sl_worker_entry owner;
            int live = svc_worker_lookup(svc, r.worker_id, &owner, err);
            bool same_epoch =
                live == 1 && r.worker_epoch && strcmp(owner.worker_epoch, r.worker_epoch) == 0;
            if (live < 0) {
                rc = -1;
            } else if (same_epoch && !owner_is_us(svc, &r)) {
                svc_owned_elsewhere(&r, &owner, err); /* forwarded: it finishes there */
            } else if (same_epoch &&
                       worker_suspend(svc, &r, memory, &snapshot, &kept_memory, err) < 0) {
                struct sl_error ignored = {0};
                (void)route_move(svc, &r, "SUSPENDING", "READY", false, &ignored);
            } else if ((rc = route_move(svc, &r, "SUSPENDING", "SUSPENDED", true, err)) == 1) {
                answer = suspend_view(&r, true, snapshot, kept_memory, retention);
            }
        }
        sl_route_clear(&r);
        if (answer)
            return answer;
        if (rc < 0 || err->code)
            return NULL;
    }
    sl_error_set(err, SL_E_BUSY_OR_STALE, 0, "SANDBOX_BUSY_OR_STALE");
    return NULL;
}

int svc_image_save_templates(struct sl_service *svc, const char *sandbox_id, const char *image,
                             struct sl_error *err)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/templates.json", image);
    json_t *records = svc_live_templates(svc, sandbox_id);
    int rc = json_dump_file(records ? records : json_array(), path, JSON_COMPACT);
    json_decref(records);
    return rc < 0 ? sl_error_errno(err, SL_E_INTERNAL, "cannot write %s", path) : 0;
}

json_t *svc_image_templates(const char *image)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/templates.json", image);
    json_t *records = json_load_file(path, 0, NULL);
    if (!json_is_array(records)) {
        json_decref(records);
        records = json_array();
    }
    return records;
}

int svc_session_restore(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                        const char *image, struct sl_error *err)
{
    char root[PATH_MAX];
    snprintf(root, sizeof(root), "%s/%s", svc->cfg->workspace_root, sandbox_id);
    struct sl_rt_mount *mounts = NULL;
    size_t nmounts = 0;
    _cleanup_json_ json_t *records = svc_image_templates(image);
    struct sl_rt_caps caps;
    int rc = svc_template_mounts_of(svc, records, &mounts, &nmounts, err);
    if (rc == 0)
        rc = svc_tenant_caps(svc, sandbox_id, &caps, err);
    if (rc == 0)
        rc = sl_rt_session_restore(svc->runtime, root, uid, image, mounts, nmounts, &caps, err);
    free(mounts);
    return rc;
}

/* After a memory suspend, before the sandbox is READY again (so no command
 * starts a session of its own meanwhile): the session restored from its
 * checkpoint, the image removed (a restore reads all of it), and its
 * templates in *templates (a new reference) for the live entry. A restore
 * that fails leaves the sandbox with its files and no process, as a plain
 * suspend would: said in the log and in *why, and the image kept aside
 * (memory.unrestored, never restored by itself) for an operator. */
static bool restore_session(struct sl_service *svc, const struct sl_route *r, json_t **templates,
                            char *why, size_t why_size)
{
    char dir[PATH_MAX + 16], aside[PATH_MAX + 32];
    *templates = NULL;
    svc_memory_dir(svc, r->sandbox_id, dir, sizeof(dir));
    if (access(dir, F_OK) < 0)
        return false;
    struct sl_error err = {0};
    *templates = svc_image_templates(dir);
    if (svc_session_restore(svc, r->sandbox_id, (uid_t)r->sandbox_uid, dir, &err) == 0) {
        (void)sl_tree_remove(dir);
        return true;
    }
    sl_warn("resume %s: its processes could not be restored, its files are: %s", r->sandbox_id,
            sl_error_text(&err));
    snprintf(why, why_size, "%s", sl_error_text(&err));
    snprintf(aside, sizeof(aside), "%s.unrestored", dir);
    (void)sl_tree_remove(aside);
    if (rename(dir, aside) < 0)
        (void)sl_tree_remove(dir);
    json_decref(*templates);
    *templates = NULL;
    return false;
}

/* The worker's resume (§7, restore mode "reuse"): the directory must be
 * here; the sandbox becomes live and READY. */
static json_t *worker_resume(struct sl_service *svc, struct sl_route *r,
                             const struct sl_worker_entry *owner, struct sl_error *err)
{
    struct sl_error ignored = {0};
    const char *source = "reused";
    int rootfd = ws_sandbox_open(svc->cfg->workspace_root, r->sandbox_id, &ignored);
    if (rootfd >= 0) {
        close(rootfd);
    } else if (svc_snapshot_restore(svc, r->sandbox_id, (uid_t)r->sandbox_uid, err) == 0) {
        source = "restored"; /* the local copy was gone: rebuilt from the snapshot */
    } else {
        (void)route_move(svc, r, "ASSIGNED", "SUSPENDED", false, &ignored);
        return NULL;
    }
    char why[512] = "";
    json_t *templates = NULL;
    bool restored = restore_session(svc, r, &templates, why, sizeof(why));
    if (!r->ready_at)
        r->ready_at = sl_now_us();
    int rc = route_move(svc, r, "ASSIGNED", "READY", true, err);
    if (rc <= 0) {
        if (rc == 0)
            sl_error_set(err, SL_E_BUSY_OR_STALE, 0, "SANDBOX_BUSY_OR_STALE");
        json_decref(templates);
        return NULL;
    }
    if (svc_live_register(svc, r->sandbox_id, r->generation, (uid_t)r->sandbox_uid) < 0) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        json_decref(templates);
        return NULL;
    }
    /* The restored processes see the templates they were checkpointed
     * with: the sandbox has them attached again. */
    if (templates && json_array_size(templates) > 0)
        (void)svc_live_set_templates(svc, r->sandbox_id, r->generation, json_incref(templates));
    json_decref(templates);
    /* §3.16 step 7: awake again, the snapshot has served. */
    svc_snapshot_delete(svc, r->sandbox_id);
    json_t *view = resolve_view(r, owner);
    json_object_set_new(view, "memory", json_boolean(restored));
    if (why[0])
        json_object_set_new(view, "memory_error", json_string(why));
    json_object_set_new(view, "resumed", json_true());
    json_object_set_new(view, "workspace_source", json_string(source));
    return view;
}

json_t *sl_svc_resume(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    for (int attempt = 0; attempt < RESOLVE_ATTEMPTS; attempt++) {
        struct sl_route r = {0};
        int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
        if (found < 0)
            return NULL;
        if (!found) {
            sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "SANDBOX_NOT_FOUND");
            return NULL;
        }
        json_t *answer = NULL;
        int rc = 1;
        if (status_is(&r, "RELEASED") || status_is(&r, "RELEASING")) {
            sl_error_set(err, SL_E_STALE_ROUTE, 0, "STALE_SANDBOX_ROUTE");
        } else if (status_is(&r, "SUSPENDING")) {
            sl_error_set(err, "SANDBOX_SUSPEND_IN_PROGRESS", 0, "SANDBOX_SUSPEND_IN_PROGRESS");
        } else if (!status_is(&r, "SUSPENDED")) {
            /* Awake: a no-op, after the recovery resolve runs for a lost owner. */
            answer = sl_svc_resolve(svc, sandbox_id, r.workspace_scope_id, r.profile_id, NULL,
                                    err);
            if (answer) {
                json_object_set_new(answer, "resumed", json_false());
                json_object_set_new(answer, "workspace_source", json_string("active"));
            }
            rc = answer ? 1 : -1;
        } else {
            struct sl_worker_entry owner;
            _cleanup_free_ char *actor = actor_for_scope(r.workspace_scope_id);
            int live = actor ? svc_worker_lookup(svc, r.worker_id, &owner, err)
                             : sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            bool usable = live == 1 && strcmp(owner.status, "ACTIVE") == 0 &&
                          strcmp(owner.profile_hash, svc->profile_hash) == 0 &&
                          owner.running_sessions < owner.capacity;
            if (live < 0) {
                rc = -1;
            } else if (live == 1 && strcmp(owner.worker_id, svc->worker_id) != 0) {
                /* A live peer's: the whole resume runs there (forwarded), and
                 * the owner judges its own capacity and profile. */
                svc_owned_elsewhere(&r, &owner, err);
            } else if (live == 1 && !usable) {
                sl_error_set(err, SL_E_NO_WORKER, 0, "NO_SANDBOX_WORKER_AVAILABLE");
            } else if (live != 1) {
                /* The original worker is gone. Local storage: only a snapshot
                 * can bring the sandbox back, on a placed worker (§3.16 4c). */
                int snap = svc_snapshot_exists(svc, sandbox_id, err);
                struct sl_worker_entry target;
                if (snap < 0) {
                    rc = -1;
                } else if (snap == 0) {
                    sl_error_set(err, "SANDBOX_DORMANT_WORKSPACE_UNAVAILABLE", 0,
                                 "SANDBOX_DORMANT_WORKSPACE_UNAVAILABLE");
                } else if (place(svc, &target, err) < 0) {
                    rc = -1;
                } else if (strcmp(target.worker_id, svc->worker_id) != 0) {
                    sl_error_set(err, SL_E_WORKER_UNREACHABLE, 0, "SANDBOX_WORKER_UNREACHABLE");
                } else if ((rc = route_reassign(svc, &r, &target, "WORKER_REASSIGNED", actor,
                                                err)) == 1) {
                    struct sl_route now_r = {0};
                    int again = svc->store->ops->route_get(svc->store, sandbox_id, &now_r, err);
                    if (again == 1 && status_is(&now_r, "ASSIGNED"))
                        answer = worker_resume(svc, &now_r, &target, err);
                    rc = answer ? 1 : again < 0 ? -1 : 0;
                    sl_route_clear(&now_r);
                }
            } else {
                bool new_epoch = !r.worker_epoch || strcmp(r.worker_epoch, owner.worker_epoch) != 0;
                bool new_hash = strcmp(r.profile_hash, svc->profile_hash) != 0;
                if (new_epoch || new_hash)
                    /* generation + 1, ASSIGNED, history entry */
                    rc = route_reassign(svc, &r, &owner,
                                        new_hash ? "PROFILE_UPGRADE" : "WORKER_REASSIGNED",
                                        actor, err);
                else
                    rc = route_move(svc, &r, "SUSPENDED", "ASSIGNED", false, err);
                if (rc == 1) {
                    struct sl_route now_r = {0};
                    int again = svc->store->ops->route_get(svc->store, sandbox_id, &now_r, err);
                    if (again == 1 && status_is(&now_r, "ASSIGNED"))
                        answer = worker_resume(svc, &now_r, &owner, err);
                    else if (again >= 0)
                        rc = 0;
                    else
                        rc = -1;
                    sl_route_clear(&now_r);
                    if (!answer && rc == 1)
                        rc = -1;
                }
            }
        }
        sl_route_clear(&r);
        if (answer)
            return answer;
        if (rc < 0 || err->code)
            return NULL;
    }
    sl_error_set(err, SL_E_BUSY_OR_STALE, 0, "SANDBOX_BUSY_OR_STALE");
    return NULL;
}

int svc_finish_suspend(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found <= 0)
        return found;
    int64_t gen = r.generation;
    bool suspending = status_is(&r, "SUSPENDING");
    sl_route_clear(&r);
    if (!suspending)
        return 0;
    json_t *doc = sl_svc_suspend(svc, sandbox_id, gen, false, err);
    json_decref(doc);
    return doc ? 1 : -1;
}
