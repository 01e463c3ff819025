/* Admin views of executions (API.md §3.18): the fleet's records, read from
 * the store, with paging bounded by the API layer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/util.h"
#include "service/internal.h"

/* How many registry entries a snapshot lists (FLEET.md §3.4). */
#define SNAPSHOT_MAX_WORKERS 256

/* argv from the stored request; [] when it cannot be read. */
static json_t *stored_argv(const char *command_json)
{
    json_t *req = command_json ? json_loads(command_json, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *argv = json_object_get(req, "argv");
    json_t *out = json_is_array(argv) ? json_incref(argv) : json_array();
    json_decref(req);
    return out;
}

static json_t *admin_exec_item(const struct sl_exec_record *e, bool with_output)
{
    bool timed = e->started_at && e->finished_at;
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o,s:b,s:o,s:o,s:o,s:o}", "sandbox_id", e->sandbox_id,
        "exec_id", e->exec_id, "generation", (json_int_t)e->generation, "worker_id",
        e->worker_id ? e->worker_id : "", "status", e->status, "exec_scope",
        sl_json_str_or_null(e->exec_scope), "argv", stored_argv(e->command_json), "exit_code",
        sl_json_int_or_null(e->exit_code, !e->has_exit_code), "truncated", e->truncated,
        "started_at", sl_json_ts(e->started_at, "Z"), "finished_at",
        sl_json_ts(e->finished_at, "Z"), "created_at", sl_json_ts(e->created_at, "Z"),
        "duration_ms",
        sl_json_int_or_null(timed ? (e->finished_at - e->started_at) / 1000 : 0, !timed));
    if (o)
        json_object_set_new(o, "termination_reason",
                            sl_json_str_or_null(e->termination_reason[0] ? e->termination_reason
                                                                         : NULL));
    if (o && with_output) {
        json_object_set_new(o, "stdout",
                            json_stringn(e->stdout_text ? e->stdout_text : "",
                                         e->stdout_text ? e->stdout_len : 0));
        json_object_set_new(o, "stderr",
                            json_stringn(e->stderr_text ? e->stderr_text : "",
                                         e->stderr_text ? e->stderr_len : 0));
    }
    return o;
}

json_t *sl_svc_admin_execs(struct sl_service *svc, const struct sl_exec_filter *filter,
                           struct sl_error *err)
{
    struct sl_exec_filter f = *filter;
    int64_t limit = f.limit, offset = f.offset;
    struct sl_exec_record *v = NULL;
    size_t n = 0;
    int64_t total = 0;
    if (svc->store->ops->exec_list(svc->store, &f, &v, &n, &total, err) < 0)
        return NULL;
    json_t *items = json_array();
    for (size_t i = 0; items && i < n; i++)
        json_array_append_new(items, admin_exec_item(&v[i], false));
    sl_exec_records_free(v, n);
    if (!items) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    return json_pack("{s:o,s:I,s:I,s:I}", "execs", items, "total", (json_int_t)total, "limit",
                     (json_int_t)limit, "offset", (json_int_t)offset);
}

json_t *svc_recent_execs(struct sl_service *svc, const char *sandbox_id, int64_t limit,
                         struct sl_error *err)
{
    struct sl_exec_filter f = {.sandbox_id = sandbox_id, .limit = limit};
    json_t *page = sl_svc_admin_execs(svc, &f, err);
    if (!page)
        return NULL;
    json_t *out = json_pack("{s:O,s:O}", "recent", json_object_get(page, "execs"), "total",
                            json_object_get(page, "total"));
    json_decref(page);
    return out;
}

json_t *sl_svc_admin_exec(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                          struct sl_error *err)
{
    struct sl_exec_record rec = {0};
    int found = svc->store->ops->exec_get(svc->store, sandbox_id, exec_id, &rec, err);
    if (found < 0)
        return NULL;
    if (found == 0) {
        sl_error_set(err, SL_E_EXEC_NOT_FOUND, 0, "execution not found");
        return NULL;
    }
    json_t *o = admin_exec_item(&rec, true);
    sl_exec_record_clear(&rec);
    return o;
}

/* ---- overview, sandboxes, diagnostics ------------------------------------ */

static json_t *ts_or_null(int64_t us) { return sl_json_ts(us, "Z"); }

json_t *sl_svc_admin_sandboxes(struct sl_service *svc, const struct sl_route_filter *f,
                               struct sl_error *err)
{
    struct sl_route *v = NULL;
    size_t n = 0;
    int64_t total = 0;
    if (svc->store->ops->route_list(svc->store, f, &v, &n, &total, err) < 0)
        return NULL;
    int64_t now = sl_now_us();
    json_t *items = json_array();
    for (size_t i = 0; items && i < n; i++) {
        const struct sl_route *r = &v[i];
        bool released = strcmp(r->status, "RELEASED") == 0;
        double idle = r->last_active_at && now > r->last_active_at
                          ? (double)(now - r->last_active_at) / 1e6
                          : 0.0;
        json_array_append_new(
            items,
            json_pack("{s:s,s:s,s:o,s:I,s:I,s:s,s:s,s:s,s:o,s:o,s:o,s:I,s:I,s:o}", "sandbox_id",
                      r->sandbox_id, "workspace_scope_id", r->workspace_scope_id, "worker_id",
                      sl_json_str_or_null(r->worker_id), "generation", (json_int_t)r->generation,
                      "sandbox_uid", (json_int_t)r->sandbox_uid, "status", r->status,
                      "storage_mode", r->storage_mode, "profile_id",
                      r->profile_id ? r->profile_id : "", "created_at", ts_or_null(r->created_at),
                      "last_active_at", ts_or_null(r->last_active_at), "ready_at",
                      ts_or_null(r->ready_at), "lifecycle_count", (json_int_t)r->lifecycle_count,
                      "total_lifetime_ms", (json_int_t)r->total_lifetime_ms, "idle_seconds",
                      released ? json_null() : json_real(idle)));
        json_object_set_new(json_array_get(items, json_array_size(items) - 1), "owner_live",
                            svc_route_owner_live(svc, r));
    }
    sl_routes_free(v, n);
    if (!items) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    return json_pack("{s:o,s:I,s:I,s:I}", "sandboxes", items, "total", (json_int_t)total, "limit",
                     (json_int_t)f->limit, "offset", (json_int_t)f->offset);
}

json_t *sl_svc_admin_overview(struct sl_service *svc, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_status_count *counts = NULL;
    size_t ncounts = 0;
    if (svc->store->ops->route_status_counts(svc->store, &counts, &ncounts, err) < 0)
        return NULL;
    struct sl_worker_record *rows = NULL;
    size_t nrows = 0;
    if (svc->store->ops->worker_list(svc->store, &rows, &nrows, err) < 0) {
        free(counts);
        return NULL;
    }
    json_t *hist = json_object();
    int64_t sandbox_total = 0;
    for (size_t i = 0; i < ncounts; i++) {
        json_object_set_new(hist, counts[i].status, json_integer(counts[i].count));
        sandbox_total += counts[i].count;
    }
    free(counts);

    int64_t now = sl_now_us();
    json_t *workers = json_array();
    int64_t live_total = 0, capacity_total = 0, sessions_total = 0;
    for (size_t i = 0; i < nrows; i++) {
        const struct sl_worker_record *w = &rows[i];
        struct sl_worker_entry entry;
        struct sl_error ignored = {0};
        bool in_registry = svc->registry->ops->get(svc->registry, w->worker_id, &entry,
                                                   &ignored) == 1;
        double age = w->heartbeat_at ? (double)(now - w->heartbeat_at) / 1e6 : -1;
        if (age < 0 && w->heartbeat_at)
            age = 0;
        bool live = in_registry || (w->heartbeat_at && age < cfg->heartbeat_ttl_seconds);
        if (live) {
            live_total++;
            capacity_total += w->capacity;
            sessions_total += w->running_sessions;
        }
        json_array_append_new(
            workers,
            json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:o,s:o,s:o,s:b}", "worker_id", w->worker_id,
                      "worker_epoch", w->worker_epoch, "endpoint", w->endpoint, "status",
                      w->status, "capacity", (json_int_t)w->capacity, "running_sessions",
                      (json_int_t)w->running_sessions, "profile_hash", w->profile_hash,
                      "started_at", ts_or_null(w->started_at), "heartbeat_at",
                      ts_or_null(w->heartbeat_at), "heartbeat_age_seconds",
                      w->heartbeat_at ? json_real(age) : json_null(), "live", live));
    }
    free(rows);
    json_t *health = sl_svc_healthz(svc);
    json_t *worker = json_object_get(health, "worker");
    json_t *doc = json_pack(
        "{s:o,s:I,s:o,s:I,s:I,s:I,s:I,s:i,s:b,s:O,s:O,s:O,s:b}", "sandboxes_by_status", hist,
        "sandbox_total", (json_int_t)sandbox_total, "workers", workers, "worker_total",
        (json_int_t)nrows, "live_worker_total", (json_int_t)live_total, "capacity_total",
        (json_int_t)capacity_total, "running_sessions_total", (json_int_t)sessions_total,
        "template_total", (int)svc_template_total(svc), "templates_shared", svc->blobstore != NULL, "isolation",
        json_object_get(worker, "capabilities"), "disk", json_object_get(health, "disk"),
        "reclamation", json_object_get(worker, "reclamation"), "fleet_queries_available", true);
    json_decref(health);
    if (!doc)
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return doc;
}

json_t *sl_svc_diagnostics(struct sl_service *svc, struct sl_error *err)
{
    struct sl_worker_entry *v = NULL;
    size_t n = 0, excluded = 0;
    int truncated = 0;
    if (svc->registry->ops->list(svc->registry, SNAPSHOT_MAX_WORKERS, &v, &n, &excluded,
                                 &truncated, err) < 0)
        return NULL;
    json_t *workers = json_array();
    int64_t capacity = 0, sessions = 0, remaining = 0, execs = 0, exec_capacity = 0;
    for (size_t i = 0; i < n; i++) {
        const struct sl_worker_entry *w = &v[i];
        json_array_append_new(
            workers, json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:s}", "worker_id", w->worker_id,
                               "status", w->status, "capacity", (json_int_t)w->capacity,
                               "running_sessions", (json_int_t)w->running_sessions,
                               "running_execs", (json_int_t)w->running_execs,
                               "max_parallel_execs_per_sandbox",
                               (json_int_t)w->max_parallel_execs_per_sandbox, "observed_at",
                               (json_int_t)w->observed_at, "profile_id", w->profile_id));
        capacity += w->capacity;
        sessions += w->running_sessions;
        if (strcmp(w->status, "ACTIVE") == 0 && w->capacity > w->running_sessions)
            remaining += w->capacity - w->running_sessions;
        execs += w->running_execs;
        exec_capacity += w->running_sessions * w->max_parallel_execs_per_sandbox;
    }
    free(v);
    json_t *totals =
        n == 0 ? json_null()
               : json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "session_capacity", (json_int_t)capacity,
                           "running_sessions", (json_int_t)sessions, "remaining_sessions",
                           (json_int_t)remaining, "running_execs", (json_int_t)execs,
                           "existing_session_exec_capacity", (json_int_t)exec_capacity,
                           "existing_session_free_execs",
                           (json_int_t)(exec_capacity > execs ? exec_capacity - execs : 0));
    json_t *doc = json_pack(
        "{s:b,s:s,s:o,s:I,s:b,s:o,s:n,s:s}", "available", true, "scope", "observed_workers",
        "workers", workers, "excluded_workers", (json_int_t)excluded, "truncated", truncated != 0,
        "totals", totals, "queue_length", "note",
        "A snapshot of the workers' last heartbeats (at most 256, stale ones excluded): "
        "capacity is sessions per worker; there is no queue, a full fleet refuses new "
        "sandboxes with NO_SANDBOX_WORKER_AVAILABLE.");
    if (!doc)
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    else /* ours: this worker's prepared sandboxes (warm.c) */
        json_object_set_new(doc, "warm_pool", svc_warm_status(svc));
    return doc;
}
