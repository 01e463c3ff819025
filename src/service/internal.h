/* Private to service/: the service struct and helpers shared by its files. */
#ifndef SL_SERVICE_INTERNAL_H
#define SL_SERVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "config/config.h"
#include "net/egress.h"
#include "net/privnet.h"
#include "registry/registry.h"
#include "runtime/runtime.h"
#include "service/api_keys.h"
#include "service/owner_cache.h"
#include "service/service.h"
#include "store/store.h"

#define SVC_TENANT_LIMITS_SLOTS 64
#define SVC_TENANT_LIMITS_TTL_US 1000000
#include "workspace/layout.h"
#include "workspace/quota.h"

/* A sandbox live on this worker process (the runtime table of API.md §2.2
 * rule 4): created by connect, removed by release. */
/* A sandbox's stored egress policies (service/network.c): its own and
 * its tenant's, each when there is one. */
struct svc_egress {
    bool has_own, has_tenant;
    bool tenant_owned; /* a tenant's sandbox ("<tenant>~<name>") */
    struct sl_egress_policy own, tenant;
};

struct sl_live {
    char *sandbox_id;
    int64_t generation;
    uid_t uid;
    bool destroying;
    int64_t last_activity_us;
    int listings; /* directory listings in progress (SVC_MAX_LISTINGS_PER_SANDBOX) */
    int64_t stored_output_bytes; /* of its finished records; -1 = not counted yet */
    bool over_disk_quota;        /* by the last count of the maintenance cycle */
    int64_t disk_bytes;          /* bytes its tree held at that count (-1: not counted) */
    /* Attached templates (API.md §3.13): array of records, each with its
     * "local_path"; NULL = none. Owned by the entry. */
    json_t *templates;
    /* Private network mode: its egress policies as last read (NULL: not
     * yet), and the denial counts its log line last said. */
    struct svc_egress *egress;
    int64_t egress_at_us;
    uint64_t denied_logged, refused_logged;
};

struct svc_exec;
struct sl_pool;

/* The reaper's counters (FLEET.md §6.2), guarded by loop_lock. */
struct svc_reaper {
    bool ran, orphans_seen, dormant_seen;
    int64_t last_run_at;
    int64_t last_released, released_total, failures_total;
    int64_t last_already_gone, already_gone_total;
    int64_t orphan_workspaces_deleted_total;
    int64_t dormant_evicted_total;
    int64_t last_duration_us;
    int64_t last_orphan_scan_us; /* maintenance thread only */
    /* the hourly prune (FLEET.md §6.1 step 7) */
    bool pruned;
    int64_t last_prune_us;           /* maintenance thread only; 0 = never */
    bool prune_unfinished;           /* the last one hit its per-cycle bound */
    int64_t exec_history_pruned_rows; /* total deleted so far */
    int64_t audit_history_pruned_rows; /* routes whose history was trimmed, total */
};

struct sl_service {
    const struct sl_config *cfg;
    struct sl_store *store;
    struct sl_registry *registry;
    struct sl_runtime *runtime;
    struct sl_privnet *privnet; /* private network mode, else NULL (not owned) */
    struct sl_net_modes net_modes; /* what the host can provide, probed at open */
    struct sl_blobstore *blobstore; /* NULL: templates stay on this worker */

    /* Sized like the registry entry and the SQL columns they end up in. */
    char worker_id[129];
    char worker_epoch[33];
    char endpoint[513];
    char profile_hash[192]; /* effective hash (RUNTIME.md §3.2) */
    json_t *capabilities;   /* RUNTIME.md §8 document, built once at open */
    struct svc_owner_cache *owners; /* forwards decided lately; NULL: none kept */
    struct sl_key_cache *keys;      /* API key checks (service/api_keys.h); NULL: none kept */
    pthread_mutex_t quota_lock;     /* a tenant's quota check and what it admits */
    /* The limits of the tenants whose sandboxes run here, as the store had
     * them at most SVC_TENANT_LIMITS_TTL_US ago (svc_tenant_limits). */
    pthread_mutex_t limits_lock;
    struct svc_tenant_limits_entry {
        char tenant_id[33];
        int64_t at_mono_us;
        int64_t quota[SL_LIMIT_COUNT];
    } limits_cache[SVC_TENANT_LIMITS_SLOTS];
    /* Each limited tenant's workspace bytes on this worker, as the last
     * disk cycle counted them (under limits_lock). */
    struct svc_tenant_disk {
        char tenant_id[33];
        int64_t bytes;
    } tenant_disk[SVC_TENANT_LIMITS_SLOTS];
    size_t tenant_disk_n;

    pthread_mutex_t live_lock; /* guards live[] */
    struct sl_live *live;
    size_t live_n, live_cap;

    atomic_uint proxy_counter;
    atomic_int running_execs;

    /* executions running on this worker (service/exec.c) */
    pthread_mutex_t execs_lock;
    pthread_cond_t execs_cond; /* signalled when one leaves */
    struct svc_exec *execs;
    size_t execs_n;
    /* Logs of commands that ended lately (exec.c): a reconnecting reader
     * goes on from the raw bytes, as it would have live. */
    struct svc_recent *recent;
    size_t recent_n, recent_bytes;
    struct sl_pool *completions;
    atomic_bool shutting_down;

    /* the per-sandbox disk quota and how it is enforced (disk_quota.c) */
    struct ws_quota quota;

    /* completion writes that failed, retried by the loop (finish_retry.c) */
    pthread_mutex_t finish_lock;
    struct svc_pending_finish *finish_pending;
    size_t finish_pending_n;

    /* heartbeat / maintenance */
    pthread_t loop_thread;
    /* E2B lifetimes (service/e2b.c): a thread of their own, so a kill or
     * pause that waits for processes never holds the heartbeat. Stopped
     * with the loop (stopping, loop_cond). */
    pthread_t e2b_thread;
    bool e2b_started;
    /* Sandboxes prepared ahead of their create (warm.c). */
    struct svc_warm {
        pthread_mutex_t lock;
        pthread_cond_t cond; /* a take, or stopping */
        /* ready: prepared, to be taken; unready: WARM rows whose directory
         * and session are not made (an earlier run's, or a preparation
         * that failed), prepared before any new uid is drawn. */
        struct svc_warm_list {
            struct svc_warm_entry {
                char id[32]; /* WS_WARM_PREFIX + hex: its route's id and directory */
                uid_t uid;
            } *v;
            size_t n, cap;
        } ready, unready;
        pthread_t thread;
        bool started, stop;
        int64_t taken_total, made_total, failures_total;
        int64_t last_take_us; /* monotonic */
    } warm;
    bool loop_started;
    pthread_mutex_t loop_lock;
    pthread_cond_t loop_cond;
    bool stopping;
    atomic_llong last_heartbeat_mono_us; /* 0 = never */
    struct sl_disk_status disk;          /* guarded by loop_lock */
    struct sl_worker_entry self_entry;   /* the last heartbeat's, guarded by loop_lock */
    struct svc_reaper reaper;            /* counters guarded by loop_lock */
};

/* Whether the worker recorded on the route is alive in the route's epoch:
 * JSON true/false, null for a released or unplaced route. */
json_t *svc_route_owner_live(struct sl_service *svc, const struct sl_route *r);
/* Control-plane fence (API.md §2.2 rule 2 + §10.1 steps 1–2): the route must
 * exist at `generation`, be awake, and its owner be live with the route's
 * epoch. On success *route is filled (caller clears it). */
int svc_fence(struct sl_service *svc, const char *sandbox_id, int64_t generation,
              struct sl_route *route, struct sl_error *err);
/* The one owner decision (after svc_fence): 0 when this process owns the
 * route; SL_E_OWNED_ELSEWHERE, with the owner in err->owner, when a live
 * peer does (the API forwards there, API.md §10); a refusal otherwise. */
int svc_require_local_owner(struct sl_service *svc, const struct sl_route *route,
                            struct sl_error *err);
/* svc_fence + svc_require_local_owner, through the owner cache
 * (service/owner_cache.h): a forward decided within the last second for
 * this generation is decided again without the route read and the registry
 * lookup. */
int svc_route_owner(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                    struct sl_error *err);
/* SL_E_OWNED_ELSEWHERE naming `owner`, a live peer holding `route`: the
 * API forwards the request there. Returns -1. */
struct sl_worker_entry;
int svc_owned_elsewhere(const struct sl_route *route, const struct sl_worker_entry *owner,
                        struct sl_error *err);
/* Whether a worker is live, and its entry: this process's own without a
 * round trip, else the registry's, else (the registry lost it: a Redis
 * restart) a fresh SQL heartbeat row. 1, 0 (gone), -1 (the registry cannot
 * be asked: err). Every owner decision asks this. */
int svc_worker_lookup(struct sl_service *svc, const char *worker_id, struct sl_worker_entry *out,
                      struct sl_error *err);
/* One call of the worker protocol (API.md §9.2) that this service makes of
 * a sandbox's owner, a live peer: POST or PUT of `body` (JSON, NULL = none)
 * to <endpoint>/internal/v1/sandboxes/<id><suffix>, fenced with the
 * owner's id and the route's generation. The owner's answer document on a
 * 2xx; otherwise NULL and SANDBOX_WORKER_UNREACHABLE, with what the owner
 * said (or why it did not answer) in the detail. */
json_t *svc_owner_call(struct sl_service *svc, const struct sl_error_owner *owner,
                       const char *method, const char *sandbox_id, const char *suffix,
                       const json_t *body, struct sl_error *err);
/* For calls on a sandbox's owner (poll, cancel, templates, files):
 * svc_route_owner, then live here at that generation. */
int svc_owner_fence(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                    struct sl_error *err);
/* Runtime lookup: live here at that generation, not being destroyed. */
int svc_live_lookup(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                    uid_t *uid, struct sl_error *err);
int svc_live_register(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                      uid_t uid);
/* Mark destroying (new calls get SANDBOX_RELEASING); returns whether it was live. */
bool svc_live_mark_destroying(struct sl_service *svc, const char *sandbox_id);
void svc_live_remove(struct sl_service *svc, const char *sandbox_id);
void svc_live_touch(struct sl_service *svc, const char *sandbox_id);
/* Live here (not being destroyed): its generation and uid; -1 when not. */
int svc_live_current(struct sl_service *svc, const char *sandbox_id, int64_t *generation,
                     uid_t *uid);
/* A directory listing reads a whole directory (however large) on a handler
 * thread: one sandbox may run only this many at once, so it cannot take
 * the handler pool from everyone else. enter: 0, or -1 with
 * SANDBOX_FILE_LIST_BUSY (429); leave after every successful enter. */
#define SVC_MAX_LISTINGS_PER_SANDBOX 2
/* Stored output of the sandbox's finished records: add `bytes` and return
 * the new total, or -1 when not counted yet (then _set it from the store). */
int64_t svc_live_output_add(struct sl_service *svc, const char *sandbox_id, int64_t bytes);
void svc_live_output_set(struct sl_service *svc, const char *sandbox_id, int64_t total);
int svc_live_listing_enter(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
void svc_live_listing_leave(struct sl_service *svc, const char *sandbox_id);
/* Live on this worker (or being destroyed)? */
bool svc_live_exists(struct sl_service *svc, const char *sandbox_id);
/* Replace the attached-template array (steals `templates`); -1 if not live. */
int svc_live_set_templates(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           json_t *templates);
/* A new reference to the attached-template array, NULL when none. */
json_t *svc_live_templates(struct sl_service *svc, const char *sandbox_id);
int svc_live_count(struct sl_service *svc);
/* Refresh last_active_at/updated_at after a successful forwarded call
 * (§10.1 step 5); failures are logged, not raised. */
void svc_route_touch(struct sl_service *svc, const char *sandbox_id, int64_t generation);

/* service/admin.c: {"recent": [admin items, newest first], "total": N} of
 * one sandbox's executions, for its audit trail. */
#define SVC_AUDIT_RECENT_EXECS 20
json_t *svc_recent_execs(struct sl_service *svc, const char *sandbox_id, int64_t limit,
                         struct sl_error *err);

/* service/templates.c: the runtime mounts of a sandbox's attached
 * templates, re-materialising evicted revisions. *mounts and the strings
 * live in *holder (json_decref it, then free(*mounts)). */
int svc_template_mounts(struct sl_service *svc, const char *sandbox_id,
                        struct sl_rt_mount **mounts, size_t *n, json_t **holder,
                        struct sl_error *err);
/* The same for the attached-template records given (a checkpoint's, which
 * must be restored with the templates it was taken with); the mounts
 * point into `records`. */
int svc_template_mounts_of(struct sl_service *svc, const json_t *records,
                           struct sl_rt_mount **mounts, size_t *n, struct sl_error *err);

/* Maintenance: enforce SANDBOX_TEMPLATE_CACHE_MAX_BYTES, least recently
 * used first, never a revision mounted by a live sandbox. */
void svc_template_cache_budget(struct sl_service *svc);

/* The release path (API.md §3.14) with a reason (§1.4) and the actor the
 * history records: the reaper's system actor, a tenant's key, or NULL for
 * the client's actor of the scope ("workspace:<scope>"). */
json_t *svc_release(struct sl_service *svc, const char *sandbox_id, const char *reason,
                    const char *by, struct sl_error *err);
/* service/snapshots.c (FLEET.md §7.2, §8.3). wanted: an object store,
 * local storage, policy not "never". write: archive workspace/home/envs
 * and publish the manifest (SANDBOX_SNAPSHOT_FAILED on refusal). exists:
 * 1/0/-1. delete: manifest then parts, best effort. restore: rebuild the
 * sandbox directory from the manifest (SANDBOX_WORKSPACE_LOST when none). */
bool svc_snapshot_wanted(const struct sl_service *svc);
int svc_snapshot_write(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                       struct sl_error *err);
int svc_snapshot_exists(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
void svc_snapshot_delete(struct sl_service *svc, const char *sandbox_id);
int svc_snapshot_restore(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                         struct sl_error *err);

/* service/reaper.c: one reclamation pass of the maintenance cycle, and the
 * reaper_status document (FLEET.md §6.2). */
void svc_reaper_cycle(struct sl_service *svc);
json_t *svc_reaper_status(struct sl_service *svc);

/* Finish a suspend left SUSPENDING (the reaper's stalled-suspend sweep). */
int svc_finish_suspend(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);

/* Templates published in the catalog this worker sees. */
int64_t svc_template_total(struct sl_service *svc);

/* A released sandbox's ended commands' logs go. */
void svc_execs_forget(struct sl_service *svc, const char *sandbox_id);
/* Executions of this sandbox running on this worker now. */
int svc_execs_running(struct sl_service *svc, const char *sandbox_id);

/* Memory suspend and fork (lifecycle.c, fork.c). Where a memory suspend
 * keeps the session's checkpoint: in the sandbox's directory, beside its
 * workspace (root's, never bound into the sandbox). */
void svc_memory_dir(const struct sl_service *svc, const char *sandbox_id, char *out, size_t size);
/* A new route (generation 1, ASSIGNED) placed on this worker, whatever
 * placement would choose (fork: the copies are made here). 0, or -1 with
 * err (NO_SANDBOX_WORKER_AVAILABLE when this worker is full). */
int svc_route_insert_here(struct sl_service *svc, const char *sandbox_id, const char *scope,
                          const char *actor, struct sl_error *err);
/* A checkpoint's attached templates, kept in its image directory
 * (templates.json): saved when it is taken, read back (a new reference;
 * an empty array when none) to restore it with the same mounts. */
int svc_image_save_templates(struct sl_service *svc, const char *sandbox_id, const char *image,
                             struct sl_error *err);
json_t *svc_image_templates(const char *image);
/* The sandbox's session started from the checkpoint in `image`, with the
 * image's templates and the tenant's ceilings. */
int svc_session_restore(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                        const char *image, struct sl_error *err);
/* SIGKILL to every execution of this sandbox running here (their process
 * groups; they then end through their normal path): how many were sent. */
int svc_execs_kill(struct sl_service *svc, const char *sandbox_id);
/* Terminals (service/terminal.c over exec.c's table): a running one's log
 * and master, counted as attached; how many run (sandbox_id NULL: on the
 * worker); end those alone past SANDBOX_TERMINAL_IDLE_SECONDS. */
struct sl_terminal;
int svc_terminal_take(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                      struct sl_terminal *out, struct sl_error *err);
int svc_terminals_count(struct sl_service *svc, const char *sandbox_id);
void svc_terminals_cycle(struct sl_service *svc);
/* service/e2b.c: E2B sandboxes of this worker past their deadline are
 * killed or paused, every second, on a thread of their own; start after
 * the loop, stop (join) after the loop's stop was asked. */
int svc_e2b_start(struct sl_service *svc, struct sl_error *err);
void svc_e2b_join(struct sl_service *svc);

/* The warm pool (warm.c). start: its thread, which adopts this worker's
 * WARM routes of an earlier run and keeps SANDBOX_WARM_POOL_SIZE prepared;
 * nothing when the size is 0. stop: the thread joined (the prepared
 * sessions end with the runtime). */
int svc_warm_start(struct sl_service *svc, struct sl_error *err);
void svc_warm_stop(struct sl_service *svc);
/* Insert the new route *r (uid unset) with a prepared sandbox's uid, whose
 * directory and session become r's sandbox's. route_insert's answers (1
 * inserted, 0 the id has a route already, -1 error), or -2 when none is
 * ready (the caller draws a uid as for any sandbox). */
int svc_warm_insert(struct sl_service *svc, struct sl_route *r, struct sl_error *err);
/* JSON {target, ready, taken_total, made_total, failures_total}. */
json_t *svc_warm_status(struct sl_service *svc);
/* Insert *r with a newly drawn free uid (lifecycle.c): route_insert's
 * answers, or SANDBOX_UID_POOL_EXHAUSTED. */
int svc_route_insert_new(struct sl_service *svc, struct sl_route *r, struct sl_error *err);

/* service/exec.c: set up / stop the execution table and completion pool. */
int svc_execs_start(struct sl_service *svc, struct sl_error *err);
void svc_execs_close(struct sl_service *svc);

void svc_disk_status(struct sl_service *svc, struct sl_disk_status *out);

/* disk_quota.c: usage of every live sandbox counted against the quota
 * (where the filesystem does not enforce it); file writes of a sandbox
 * over it are refused. */
/* The limits of the tenant a sandbox belongs to (its stored id is
 * "<tenant_id>~<name>"), every one -1 for an operator's sandbox or a
 * tenant without them; looked up in the store at most once a second per
 * tenant. The owner applies them: a request forwarded to it carries the
 * operator's token, not the tenant's key. 1 for a tenant's sandbox (and
 * tenant_id filled when not NULL), 0 otherwise; -1 when the store failed
 * (err). */
int svc_tenant_limits(struct sl_service *svc, const char *sandbox_id,
                      int64_t quota[SL_LIMIT_COUNT], char tenant_id[33], struct sl_error *err);
/* The per-sandbox ceilings (memory, pids, CPU) those limits set for the
 * runtime, 0 where none: what a command's session, a restore, gets. 0, or
 * -1 when the store failed (err). */
int svc_tenant_caps(struct sl_service *svc, const char *sandbox_id, struct sl_rt_caps *caps,
                    struct sl_error *err);
/* 429 TENANT_QUOTA_EXCEEDED (limit workspace_bytes) when the sandbox's
 * tenant has used its bytes on this worker, as the last disk cycle
 * counted; 0 otherwise. */
int svc_tenant_disk_check(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);

void svc_disk_quota_cycle(struct sl_service *svc);
int svc_disk_quota_check(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);

/* finish_retry.c: failed completion writes, retried every second by the
 * service loop until they land. */
#define SVC_FINISH_RETRY_MAX 10000
#define SVC_FINISH_RETRY_FOR_US (3600 * 1000000LL)
#define SVC_FINISH_RETRY_EVERY_US 1000000
struct svc_pending_finish;
void svc_finish_retry_add(struct sl_service *svc, const struct sl_exec_record *rec);
void svc_finish_retry_run(struct sl_service *svc);
size_t svc_finish_retry_pending(struct sl_service *svc);
/* Whether a result of this sandbox waits to be written. */
bool svc_finish_retry_holds(struct sl_service *svc, const char *sandbox_id);
void svc_finish_retry_free(struct sl_service *svc);
json_t *svc_disk_json(const struct sl_disk_status *d);

/* ---- egress policies (network.c) ---- */

int svc_tenant_exists(struct sl_service *svc, const char *tenant_id, struct sl_error *err);
/* The stored policies of a sandbox (none: both has_ false). */
int svc_egress_load(struct sl_service *svc, const char *sandbox_id, struct svc_egress *out,
                    struct sl_error *err);
/* Those of a command about to start (a copy, read at most
 * EGRESS_CACHE_US ago); nothing outside the private mode. */
int svc_egress_for_exec(struct sl_service *svc, const char *sandbox_id, struct svc_egress *out,
                        struct sl_error *err);
void svc_egress_free(struct svc_egress *e);
/* The runtime's view of them (pointers into e). */
void svc_egress_rt(struct sl_service *svc, const struct svc_egress *e, struct sl_rt_egress *out);
/* Maintenance: running sandboxes' rules brought to the store's; denials
 * logged, once a cycle per sandbox that had new ones. */
void svc_egress_cycle(struct sl_service *svc);
/* A released sandbox's own policy, removed (logged when it cannot be). */
void svc_egress_forget(struct sl_service *svc, const char *sandbox_id);

#endif
