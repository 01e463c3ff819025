/* The reaper: the reclamation steps of the maintenance cycle (FLEET.md §6.1
 * step 3, §7.1, §7.4) and its status document (§6.2).
 *
 * Every replica sweeps the whole database; each action goes through the
 * normal compare-and-set paths (release, suspend), so a route somebody else
 * changed meanwhile is simply "already gone". A failure is counted and
 * logged and the cycle goes on. Runs on the maintenance thread only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "service/history.h"
#include "service/internal.h"
#include "workspace/layout.h"

#define REAPER_ACTOR "system:orphan-reaper"

static void count_outcome(struct sl_service *svc, const char *sandbox_id, const char *what,
                          const json_t *doc, const struct sl_error *err, int64_t *released,
                          int64_t *gone)
{
    struct svc_reaper *rs = &svc->reaper;
    if (doc) {
        (*released)++;
        sl_info("reaper: %s %s", what, sandbox_id);
        return;
    }
    if (sl_error_is(err, SL_E_STALE_GENERATION) || sl_error_is(err, SL_E_STALE_ROUTE)) {
        (*gone)++; /* someone else released or reassigned it first */
        return;
    }
    rs->failures_total++;
    sl_warn("reaper: %s %s failed: %s", what, sandbox_id, sl_error_text(err));
}

static bool owner_live(struct sl_service *svc, const struct sl_route *r)
{
    struct sl_worker_entry owner;
    struct sl_error ignored = {0};
    return r->worker_id && r->worker_epoch &&
           svc_worker_lookup(svc, r->worker_id, &owner, &ignored) == 1 &&
           strcmp(owner.worker_epoch, r->worker_epoch) == 0;
}

/* FLEET.md §6.1 step 3 and §7.1, one batch. */
static void reap_routes(struct sl_service *svc, int64_t now, int64_t *released, int64_t *gone)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_reap_query q = {
        .idle_before = cfg->idle_ttl_seconds > 0 ? now - cfg->idle_ttl_seconds * 1000000 : 0,
        .releasing_before = now - (int64_t)cfg->orphan_release_grace_seconds * 1000000,
        .running_before = now - (int64_t)cfg->orphan_running_grace_seconds * 1000000,
        .suspending_before = now - (int64_t)cfg->orphan_release_grace_seconds * 1000000,
        .suspended_before = cfg->suspended_retention_seconds > 0
                                ? now - cfg->suspended_retention_seconds * 1000000
                                : 0,
        .limit = cfg->orphan_reaper_batch_size > 0 ? cfg->orphan_reaper_batch_size : 100,
    };
    struct sl_route *v = NULL;
    size_t n = 0;
    struct sl_error err = {0};
    if (svc->store->ops->route_reapable(svc->store, &q, &v, &n, &err) < 0) {
        svc->reaper.failures_total++;
        sl_warn("reaper: cannot list reapable routes: %s", sl_error_text(&err));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const struct sl_route *r = &v[i];
        struct sl_error e = {0};
        json_t *doc = NULL;
        const char *what;
        if (!strcmp(r->status, "ASSIGNED") || !strcmp(r->status, "READY")) {
            what = "idle release of";
            doc = svc_release(svc, r->sandbox_id, "IDLE_TIMEOUT", REAPER_ACTOR, &e);
        } else if (!strcmp(r->status, "RELEASING")) {
            what = "release retry of";
            doc = svc_release(svc, r->sandbox_id, "RELEASE_RETRY", REAPER_ACTOR, &e);
        } else if (!strcmp(r->status, "RUNNING")) {
            if (owner_live(svc, r))
                continue; /* a long command on a live owner is not an orphan */
            what = "worker-lost release of";
            doc = svc_release(svc, r->sandbox_id, "WORKER_LOST", REAPER_ACTOR, &e);
        } else if (!strcmp(r->status, "SUSPENDING")) {
            int rc = svc_finish_suspend(svc, r->sandbox_id, &e);
            if (rc < 0) {
                svc->reaper.failures_total++;
                sl_warn("reaper: finishing the suspend of %s failed: %s", r->sandbox_id,
                        sl_error_text(&e));
            } else if (rc > 0) {
                sl_info("reaper: finished the suspend of %s", r->sandbox_id);
            }
            continue;
        } else if (!strcmp(r->status, "SUSPENDED")) {
            what = "suspend-expiry release of";
            doc = svc_release(svc, r->sandbox_id, "SUSPEND_EXPIRED", REAPER_ACTOR, &e);
        } else {
            continue;
        }
        count_outcome(svc, r->sandbox_id, what, doc, &e, released, gone);
        json_decref(doc);
    }
    sl_routes_free(v, n);
}

/* FLEET.md §7.4: local directories of sandboxes this worker no longer owns
 * go after SANDBOX_ORPHAN_DORMANT_DIR_TTL_SECONDS, the clock kept in marker
 * files so it survives restarts. */
static void reap_orphan_dirs(struct sl_service *svc, int64_t now)
{
    const struct sl_config *cfg = svc->cfg;
    if (cfg->orphan_dormant_dir_ttl_seconds <= 0 || cfg->shared_root)
        return;
    /* The scan reads every directory's route: with thousands of dormant
     * sandboxes that is the costly step of a pass (bench/reaper_bench).
     * Its clock counts in TTLs, so it runs at most every quarter TTL (and
     * at most every 5 minutes apart), not every maintenance interval. */
    int64_t every = cfg->orphan_dormant_dir_ttl_seconds * 1000000 / 4;
    if (every > 300 * 1000000LL)
        every = 300 * 1000000LL;
    if (svc->reaper.last_orphan_scan_us && now - svc->reaper.last_orphan_scan_us < every)
        return;
    svc->reaper.last_orphan_scan_us = now;
    char markers[PATH_MAX];
    snprintf(markers, sizeof(markers), "%s/.orphan-workspaces", cfg->template_root);
    if (mkdir(cfg->template_root, 0711) < 0 && errno != EEXIST)
        return;
    if (mkdir(markers, 0700) < 0 && errno != EEXIST)
        return;
    DIR *d = opendir(cfg->workspace_root);
    if (!d)
        return;
    /* Names orphaned this cycle; markers of the others are dropped below. */
    struct sl_strlist orphaned = {0};
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR)
            continue;
        struct sl_error ignored = {0};
        if (svc_live_exists(svc, e->d_name))
            continue;
        struct sl_route r = {0};
        int found = svc->store->ops->route_get(svc->store, e->d_name, &r, &ignored);
        /* No route: kept (never ours to judge); released, or owned by another
         * worker id: orphaned. */
        bool is_orphan = found == 1 && (!strcmp(r.status, "RELEASED") ||
                                        (r.worker_id && strcmp(r.worker_id, svc->worker_id) != 0));
        sl_route_clear(&r);
        if (!is_orphan)
            continue;
        sl_strlist_push(&orphaned, e->d_name);
        char marker[PATH_MAX + 300];
        snprintf(marker, sizeof(marker), "%s/%s", markers, e->d_name);
        struct stat st;
        if (stat(marker, &st) < 0) {
            int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (fd >= 0)
                close(fd);
            continue; /* the clock starts now */
        }
        int64_t since = (int64_t)st.st_mtim.tv_sec * 1000000 + st.st_mtim.tv_nsec / 1000;
        if (now - since < cfg->orphan_dormant_dir_ttl_seconds * 1000000)
            continue;
        struct sl_error terr = {0};
        if (ws_sandbox_trash(cfg->workspace_root, e->d_name, &terr) == 0) {
            unlink(marker);
            svc->reaper.orphan_workspaces_deleted_total++;
            svc->reaper.orphans_seen = true;
            sl_info("reaper: removed the orphaned directory of %s", e->d_name);
        } else {
            svc->reaper.failures_total++;
            sl_warn("reaper: cannot remove the orphaned directory of %s: %s", e->d_name,
                    sl_error_text(&terr));
        }
    }
    closedir(d);
    /* Markers of ids no longer orphaned: the clock resets. */
    DIR *m = opendir(markers);
    for (struct dirent *e; m && (e = readdir(m));) {
        if (e->d_name[0] == '.' || sl_strlist_contains(&orphaned, e->d_name))
            continue;
        char marker[PATH_MAX + 300];
        snprintf(marker, sizeof(marker), "%s/%s", markers, e->d_name);
        unlink(marker);
    }
    if (m)
        closedir(m);
    sl_strlist_free(&orphaned);
}

/* FLEET.md §7.3 (b): under disk pressure, drop the local copies of this
 * worker's suspended sandboxes that have a snapshot, oldest suspension
 * first, until the disk is available again. They stay SUSPENDED; resume
 * restores them. One without a snapshot is never dropped. */
static void relieve_disk_pressure(struct sl_service *svc)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_disk_status disk;
    ws_disk_status(cfg->workspace_root, cfg->min_free_bytes, cfg->disk_high_watermark_percent,
                   &disk);
    if (disk.available || !svc->blobstore || cfg->shared_root)
        return;
    struct sl_route_filter f = {
        .status = "SUSPENDED",
        .worker_id = svc->worker_id,
        .limit = cfg->orphan_reaper_batch_size > 0 ? cfg->orphan_reaper_batch_size : 100,
        .oldest_first = true};
    struct sl_route *v = NULL;
    size_t n = 0;
    int64_t total = 0;
    struct sl_error err = {0};
    if (svc->store->ops->route_list(svc->store, &f, &v, &n, &total, &err) < 0) {
        svc->reaper.failures_total++;
        sl_warn("disk pressure: cannot list suspended sandboxes: %s", sl_error_text(&err));
        return;
    }
    for (size_t i = 0; i < n && !disk.available; i++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/%s", cfg->workspace_root, v[i].sandbox_id);
        struct stat st;
        if (stat(dir, &st) < 0)
            continue; /* no local copy left */
        struct sl_error e = {0};
        int snap = svc_snapshot_exists(svc, v[i].sandbox_id, &e);
        if (snap <= 0) {
            if (snap < 0)
                svc->reaper.failures_total++;
            continue;
        }
        if (ws_sandbox_trash(cfg->workspace_root, v[i].sandbox_id, &e) < 0) {
            svc->reaper.failures_total++;
            sl_warn("disk pressure: cannot drop the local copy of %s: %s", v[i].sandbox_id,
                    sl_error_text(&e));
            continue;
        }
        (void)ws_trash_purge(cfg->workspace_root);
        svc->reaper.dormant_evicted_total++;
        svc->reaper.dormant_seen = true;
        sl_info("disk pressure: dropped the local copy of suspended %s (it has a snapshot)",
                v[i].sandbox_id);
        ws_disk_status(cfg->workspace_root, cfg->min_free_bytes, cfg->disk_high_watermark_percent,
                       &disk);
    }
    sl_routes_free(v, n);
}

/* Step 7 (FLEET.md §6.1), every SANDBOX_HISTORY_PRUNE_INTERVAL_SECONDS:
 * finished execution records past SANDBOX_EXEC_RETENTION_SECONDS go, in
 * batches of PRUNE_BATCH until one deletes nothing, at most
 * PRUNE_MAX_BATCHES per cycle (the rest in the next cycle, not an hour
 * later), so one cycle stays short whatever has piled up. */
#define PRUNE_BATCH 2000
#define PRUNE_MAX_BATCHES 25

/* The other half of step 7: the lifecycle histories of up to
 * HISTORY_TRIM_BATCH routes (least recently active first) brought to their
 * bounds again (API.md §3.9: 15 days, 256 entries, 64 KiB); histories are
 * bounded when written, so this drops what aged out since. Written only if
 * unchanged meanwhile. Returns the routes trimmed. */
#define HISTORY_TRIM_BATCH 500

static int64_t trim_histories(struct sl_service *svc, int64_t now)
{
    struct sl_route_filter f = {.limit = HISTORY_TRIM_BATCH, .oldest_first = true};
    struct sl_route *routes = NULL;
    size_t n = 0;
    int64_t total = 0, trimmed = 0;
    struct sl_error err = {0};
    if (svc->store->ops->route_list(svc->store, &f, &routes, &n, &total, &err) < 0) {
        sl_warn("maintenance: reading route histories failed: %s", sl_error_text(&err));
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const char *old = routes[i].lifecycle_history_json;
        if (!old || !*old)
            continue;
        json_t *parsed = json_loads(old, 0, NULL);
        size_t before = json_is_array(parsed) ? json_array_size(parsed) : 0;
        json_decref(parsed);
        json_t *bounded = sl_history_bounded(old, now);
        size_t after = json_array_size(bounded);
        char *text = after < before ? json_dumps(bounded, JSON_COMPACT) : NULL;
        json_decref(bounded);
        if (!text)
            continue;
        if (svc->store->ops->route_history_cas(svc->store, routes[i].sandbox_id, old, text, &err) >
            0)
            trimmed++;
        free(text);
    }
    sl_routes_free(routes, n);
    if (trimmed > 0)
        sl_info("maintenance: trimmed the lifecycle history of %lld routes", (long long)trimmed);
    return trimmed;
}

static void prune_history(struct sl_service *svc, int64_t now)
{
    const struct sl_config *cfg = svc->cfg;
    struct svc_reaper *rs = &svc->reaper;
    int64_t mono = sl_mono_us();
    if (cfg->exec_retention_seconds <= 0)
        return;
    if (rs->last_prune_us && !rs->prune_unfinished &&
        mono - rs->last_prune_us < cfg->history_prune_interval_seconds * 1000000)
        return;
    int64_t cutoff = now - cfg->exec_retention_seconds * 1000000;
    int64_t deleted = 0;
    int batches = 0;
    int n = 0;
    struct sl_error err = {0};
    do {
        n = svc->store->ops->exec_prune(svc->store, cutoff, PRUNE_BATCH, &err);
        if (n < 0) {
            sl_warn("maintenance: pruning execution records failed: %s", sl_error_text(&err));
            pthread_mutex_lock(&svc->loop_lock);
            rs->failures_total++;
            pthread_mutex_unlock(&svc->loop_lock);
            break;
        }
        deleted += n;
    } while (n > 0 && ++batches < PRUNE_MAX_BATCHES);
    if (deleted > 0)
        sl_info("maintenance: deleted %lld execution records older than %lld s", (long long)deleted,
                (long long)cfg->exec_retention_seconds);
    int64_t trimmed = trim_histories(svc, now);
    pthread_mutex_lock(&svc->loop_lock);
    rs->last_prune_us = mono;
    rs->prune_unfinished = n > 0;
    rs->exec_history_pruned_rows += deleted;
    rs->audit_history_pruned_rows += trimmed;
    rs->pruned = true;
    pthread_mutex_unlock(&svc->loop_lock);
}

void svc_reaper_cycle(struct sl_service *svc)
{
    int64_t now = sl_now_us();
    int64_t released = 0, gone = 0;
    reap_routes(svc, now, &released, &gone);
    relieve_disk_pressure(svc);
    reap_orphan_dirs(svc, now);
    prune_history(svc, now);
    int64_t took_us = sl_now_us() - now;
    pthread_mutex_lock(&svc->loop_lock);
    struct svc_reaper *rs = &svc->reaper;
    rs->last_duration_us = took_us;
    rs->last_run_at = now;
    rs->last_released = released;
    rs->released_total += released;
    rs->last_already_gone = gone;
    rs->already_gone_total += gone;
    rs->ran = true;
    pthread_mutex_unlock(&svc->loop_lock);
}

json_t *svc_reaper_status(struct sl_service *svc)
{
    pthread_mutex_lock(&svc->loop_lock);
    struct svc_reaper rs = svc->reaper;
    pthread_mutex_unlock(&svc->loop_lock);
    json_t *o =
        json_pack("{s:o,s:I,s:I,s:I,s:I}", "last_run_at",
                  rs.ran ? sl_json_ts(rs.last_run_at, "+00:00") : json_null(), "last_released",
                  (json_int_t)rs.last_released, "released_total", (json_int_t)rs.released_total,
                  "failures_total", (json_int_t)rs.failures_total, "already_gone_total",
                  (json_int_t)rs.already_gone_total);
    if (rs.ran) {
        json_object_set_new(o, "last_already_gone", json_integer(rs.last_already_gone));
        /* Ours, additive: how long the last pass took (bench/reaper_bench). */
        json_object_set_new(o, "last_duration_ms", json_real((double)rs.last_duration_us / 1000));
    }
    if (rs.pruned) {
        json_object_set_new(o, "audit_history_pruned_rows",
                            json_integer(rs.audit_history_pruned_rows));
        json_object_set_new(o, "exec_history_pruned_rows",
                            json_integer(rs.exec_history_pruned_rows));
    }
    if (rs.dormant_seen)
        json_object_set_new(o, "dormant_evicted_total", json_integer(rs.dormant_evicted_total));
    if (rs.orphans_seen)
        json_object_set_new(o, "orphan_workspaces_deleted_total",
                            json_integer(rs.orphan_workspaces_deleted_total));
    return o;
}
