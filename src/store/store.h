/* Metadata store interface: the authoritative record of routes, executions
 * and workers (spec/FLEET.md §2).
 *
 * A store is a struct of function pointers plus an opaque handle; the
 * service never names an implementation. Open one with sl_store_open(),
 * which picks the backend from the configuration, and release it with
 * store->close(store). Every method is safe to call from any thread; each is
 * one atomic unit against the database (its own transaction).
 *
 * Rows are plain structs owned by the caller; release them with the matching
 * *_clear() function. Timestamps are microseconds since the epoch (UTC);
 * 0 means NULL for nullable columns. Fallible methods return < 0 and fill err
 * (code SANDBOX_METADATA_UNAVAILABLE for database failures). */
#ifndef SL_STORE_STORE_H
#define SL_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct sl_config;

struct sl_route {
    char *sandbox_id;
    char *workspace_scope_id;
    char *worker_id;    /* NULL allowed */
    char *worker_epoch; /* NULL allowed */
    int64_t generation;
    int64_t sandbox_uid;
    char *profile_id;
    char *profile_hash;
    char status[16];       /* ASSIGNED, READY, RUNNING, RELEASING, RELEASED, SUSPENDING, SUSPENDED */
    char storage_mode[8];  /* local | shared */
    char *active_exec_id;  /* NULL when idle */
    int64_t last_active_at;
    int64_t generation_started_at;
    char *generation_created_by; /* NULL allowed */
    int64_t ready_at;            /* 0 = NULL */
    int64_t last_released_generation; /* 0 = NULL */
    int64_t last_released_at;         /* 0 = NULL */
    char *last_release_reason;        /* NULL allowed */
    char *last_released_by;           /* NULL allowed */
    int64_t last_lifetime_ms;         /* -1 = NULL */
    int64_t lifecycle_count;
    int64_t total_lifetime_ms;
    char *lifecycle_history_json;     /* JSON array text; NULL allowed */
    int64_t created_at;
    int64_t updated_at;
};
void sl_route_clear(struct sl_route *r);
/* Deep copy; returns -1 on allocation failure. */
int sl_route_copy(struct sl_route *dst, const struct sl_route *src);

/* The exec_scopes of the service's own executions that run beside every
 * other: they start with '~', which is outside the API's identifier
 * alphabet, so no client's scope can be one. A terminal's (a person's
 * shell does not serialise with the sandbox's commands) and an E2B
 * process's (E2B runs any number of processes side by side, e2b/): admission
 * finds no conflict with them, nor they with anything, and they take no
 * workspace lock. */
#define SL_EXEC_SCOPE_OWN "~terminal"
#define SL_EXEC_SCOPE_E2B "~e2b"
static inline bool sl_exec_scope_beside(const char *scope)
{
    return scope && scope[0] == '~';
}

struct sl_exec_record {
    char *sandbox_id;
    char *exec_id;
    int64_t generation;
    char *worker_id;
    char status[16];     /* RUNNING, SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, WORKER_LOST */
    char *command_json;  /* the full request object */
    char *exec_scope;    /* NULL = unscoped; SL_EXEC_SCOPE_OWN: see there */
    bool has_exit_code;
    int exit_code;
    char *stdout_text;   /* NULL allowed; may hold NUL bytes (decoded output) */
    char *stderr_text;   /* NULL allowed; may hold NUL bytes */
    size_t stdout_len, stderr_len; /* byte lengths of the two texts */
    bool truncated;
    /* Why the run ended when it was not its own choice: "OOM_KILLED",
     * "TIMED_OUT", "WORKER_LOST", "WORKER_RESTARTED", "WORKER_SHUTDOWN",
     * "CANCELLED_BY_CLIENT" ... or "" (none). Ours, additive to the
     * reference's schema: column termination_reason, VARCHAR(32), NULL for "";
     * a longer stored value reads back truncated. */
    char termination_reason[32];
    int64_t started_at;  /* 0 = NULL */
    int64_t finished_at; /* 0 = NULL */
    int64_t created_at;
};
void sl_exec_record_clear(struct sl_exec_record *e);
/* A deep copy of *src into *dst (the outputs by their lengths: they may
 * hold NUL bytes). -1 when out of memory, with *dst cleared. */
int sl_exec_record_copy(struct sl_exec_record *dst, const struct sl_exec_record *src);
void sl_exec_records_free(struct sl_exec_record *v, size_t n);

/* Admin listing of routes (API.md §3.18): NULL = any; `search` is a
 * substring of sandbox_id matched literally (%, _ and \ included);
 * `id_prefix` a start it must have (a tenant's "<tenant_id>~"), matched
 * literally too. */
struct sl_route_filter {
    const char *status, *workspace_scope_id, *worker_id, *search, *id_prefix;
    int64_t limit, offset;
    bool oldest_first; /* last_active_at ascending (the reaper), else descending */
};
void sl_routes_free(struct sl_route *v, size_t n);

/* A worker row as read back (FLEET.md §2.1). */
struct sl_worker_record {
    char worker_id[129];
    char worker_epoch[65];
    char endpoint[513];
    char status[33];
    int64_t capacity, running_sessions;
    char profile_hash[192];
    int64_t heartbeat_at, started_at, updated_at; /* µs, 0 = unknown */
};

/* One bucket of the route status histogram. */
struct sl_status_count {
    char status[33];
    int64_t count;
};

/* The reaper's query (FLEET.md §6.1 step 3, §7.1): routes that are idle,
 * stuck releasing, running on a lost owner, stuck suspending or past their
 * retention, oldest activity first. Cut-offs are µs timestamps; 0 turns a
 * condition off. */
struct sl_reap_query {
    int64_t idle_before;        /* ASSIGNED/READY, no active exec, last_active_at < */
    int64_t releasing_before;   /* RELEASING, no active exec, updated_at < */
    int64_t running_before;     /* RUNNING with an active exec, last_active_at < */
    int64_t suspending_before;  /* SUSPENDING, updated_at < */
    int64_t suspended_before;   /* SUSPENDED, last_active_at < */
    int64_t limit;
};

struct sl_exec_filter {
    const char *sandbox_id; /* NULL = any */
    const char *status;     /* NULL = any */
    /* Ours: NULL = any; "" = none recorded (the column is NULL). */
    const char *termination_reason;
    int64_t limit, offset;
};

struct sl_worker_row {
    const char *worker_id;
    const char *worker_epoch;
    const char *endpoint;
    const char *status; /* ACTIVE, DRAINING, OFFLINE */
    int64_t capacity;
    int64_t running_sessions;
    const char *profile_hash;
    int64_t now; /* heartbeat_at = updated_at = now; started_at = now on first insert */
};

/* Outcome of exec admission (spec API.md §4.1 step 4). */
enum sl_admit_result {
    SL_ADMIT_ADMITTED = 0, /* record inserted, route marked RUNNING */
    SL_ADMIT_REPLAY = 1,   /* a record (sandbox_id, exec_id) exists; returned in *existing */
};

/* A tenant (agent_sandbox_tenant, ours). */
struct sl_tenant {
    char tenant_id[65];
    char *quotas_json; /* JSON object text; NULL = none set */
    char *created_by;  /* NULL allowed */
    int64_t created_at;
    int64_t updated_at;
};
void sl_tenant_clear(struct sl_tenant *t);
void sl_tenants_free(struct sl_tenant *v, size_t n);

/* One of a tenant's API keys (agent_sandbox_api_key, ours): never the key
 * itself, only the SHA-256 of its secret, in lowercase hex. */
struct sl_api_key {
    char key_id[17];
    char tenant_id[65];
    char name[129];
    char secret_sha256[65];
    char *created_by; /* NULL allowed */
    int64_t created_at;
    int64_t expires_at; /* 0 = never */
    int64_t revoked_at; /* 0 = not revoked */
};
void sl_api_key_clear(struct sl_api_key *k);
void sl_api_keys_free(struct sl_api_key *v, size_t n);

/* A sandbox made through the E2B protocol (agent_sandbox_e2b, ours; e2b/):
 * E2B's view beside its route. Reads join the route, whose status,
 * generation and owner come with it. */
struct sl_e2b_sandbox {
    char sandbox_id[129];  /* the route's (a tenant's in its namespace) */
    char template_id[129];
    char *metadata_json;   /* object text; NULL = {} */
    char *env_json;        /* object text; NULL = {} */
    char on_timeout[16];   /* "kill" | "pause": what end_at does */
    int64_t started_at;
    int64_t end_at;        /* the lifetime deadline */
    int64_t updated_at;
    /* From the route, on reads. */
    char status[16];
    int64_t generation;
    char worker_id[129];   /* "" when none */
};
void sl_e2b_sandbox_clear(struct sl_e2b_sandbox *e);
void sl_e2b_sandboxes_free(struct sl_e2b_sandbox *v, size_t n);

struct sl_store;

struct sl_store_ops {
    /* Schema: create missing tables/indexes when cfg->database_auto_ddl, and
     * add our additive columns (struct sl_schema_column.additive) to tables
     * created without them, then compare column names. Missing table/column
     * => -1, err names them (code SANDBOX_CONFIG_INVALID). Extra columns are
     * returned in *warnings (malloc'd comma-separated "table.column" list,
     * NULL if none). */
    int (*prepare_schema)(struct sl_store *s, bool auto_ddl, char **warnings, struct sl_error *err);

    /* Routes. get: 1 found, 0 absent, -1 error. */
    int (*route_get)(struct sl_store *s, const char *sandbox_id, struct sl_route *out,
                     struct sl_error *err);
    /* Insert a new route. 1 inserted; 0 when sandbox_id already exists (caller
     * re-reads); -2 when sandbox_uid is taken (caller draws again); -1 error. */
    int (*route_insert)(struct sl_store *s, const struct sl_route *r, struct sl_error *err);
    /* A warm route (status WARM, service/warm.c) becomes r's: every column
     * of *r is written, sandbox_id included, where sandbox_id = warm_id,
     * status is WARM and sandbox_uid = r->sandbox_uid. 1 taken; 0 when
     * r->sandbox_id has a route already (caller re-reads; the warm row is
     * unchanged); -2 when the warm row is gone or not WARM; -1 error. */
    int (*route_take_warm)(struct sl_store *s, const char *warm_id, const struct sl_route *r,
                           struct sl_error *err);
    /* Compare-and-set: write every column of *r (except sandbox_uid and
     * created_at, which never change) where sandbox_id matches,
     * generation = expect_generation and status is one of expect_statuses
     * (NULL-terminated array). Returns 1 if written, 0 if the row did not
     * match, -1 on error. updated_at is written from r->updated_at. */
    int (*route_cas)(struct sl_store *s, const struct sl_route *r, int64_t expect_generation,
                     const char *const *expect_statuses, struct sl_error *err);

    /* Activity (FLEET.md §6.3): last_active_at = updated_at = now for an
     * awake route (ASSIGNED/READY/RUNNING) at `generation`; touches nothing
     * else. 1 written, 0 no such awake route, -1 error. */
    int (*route_touch)(struct sl_store *s, const char *sandbox_id, int64_t generation,
                       int64_t now, struct sl_error *err);

    /* Executions. get: 1 found, 0 absent, -1 error. */
    int (*exec_get)(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                    struct sl_exec_record *out, struct sl_error *err);
    /* Atomic admission (API.md §4.1 step 4). On REPLAY *existing is filled.
     * Refusals return -1 with err->code STALE_SANDBOX_GENERATION,
     * SANDBOX_SUSPENDED, SANDBOX_PARALLEL_EXEC_LIMIT or SANDBOX_EXEC_SCOPE_BUSY. */
    int (*exec_admit)(struct sl_store *s, const struct sl_exec_record *rec, int64_t max_parallel,
                      struct sl_exec_record *existing, struct sl_error *err);
    /* Persist a finished execution (termination_reason included, "" stored
     * as NULL) and recompute the route's active_exec_id / status (API.md
     * §4.1 step 6). Nothing is written to the route if its generation moved
     * on. */
    int (*exec_finish)(struct sl_store *s, const struct sl_exec_record *rec, int64_t now,
                       struct sl_error *err);
    /* Undo an admission whose command never started (its locks stayed
     * busy): the RUNNING record of (sandbox_id, exec_id, generation) is
     * deleted, so the exec_id can be used again, and the route is
     * recomputed as after a finish. 1 removed, 0 none, -1 error. */
    int (*exec_withdraw)(struct sl_store *s, const struct sl_exec_record *rec, int64_t now,
                         struct sl_error *err);
    /* FLEET.md §6.1 step 7: delete at most `batch` executions that are not
     * RUNNING and whose COALESCE(finished_at, started_at) is before
     * older_than, oldest started first. Returns rows deleted, -1 error. */
    int (*exec_prune)(struct sl_store *s, int64_t older_than, int64_t batch,
                      struct sl_error *err);
    /* Replace a route's lifecycle_history_json with `history` if it is
     * still `expect` (NULL = NULL); nothing else of the row changes. 1
     * written, 0 it changed meanwhile, -1 error. */
    int (*route_history_cas)(struct sl_store *s, const char *sandbox_id, const char *expect,
                             const char *history, struct sl_error *err);
    /* Stored output (stdout + stderr bytes) of a sandbox's finished
     * executions. */
    int (*exec_output_bytes)(struct sl_store *s, const char *sandbox_id, int64_t *bytes,
                             struct sl_error *err);
    /* Drop the output of the sandbox's oldest finished executions (but
     * keep_exec_id's): stdout and stderr emptied, truncated set, until
     * *freed >= need bytes or none is left. */
    /* Whether writes land now: false after a write failed for a reason of
     * the database's own (locked by another process, disk full, read-only,
     * I/O), until one succeeds again; *why then says what (no path). */
    bool (*health)(struct sl_store *s, char *why, size_t size);
    int (*exec_output_drop)(struct sl_store *s, const char *sandbox_id, const char *keep_exec_id,
                            int64_t need, int64_t *freed, struct sl_error *err);
    /* Mark every RUNNING execution of (sandbox_id, generation) with `status`
     * (e.g. WORKER_LOST), termination_reason = reason (NULL or "" = NULL) and
     * finished_at = now. Returns rows changed. */
    int (*exec_mark_running)(struct sl_store *s, const char *sandbox_id, int64_t generation,
                             const char *status, const char *reason, int64_t now,
                             struct sl_error *err);
    /* Mark every RUNNING execution owned by worker_id (any sandbox) with
     * `status` and `reason`; used at startup for executions of a previous
     * incarnation. */
    int (*exec_mark_worker_running)(struct sl_store *s, const char *worker_id, const char *status,
                                    const char *reason, int64_t now, struct sl_error *err);

    /* Admin listing (API.md §3.18): records matching the filter (NULL =
     * any), newest created first, `limit` from `offset`, without their
     * output (termination_reason included); *total is the unpaged count. Caller frees with
     * sl_exec_records_free. */
    int (*exec_list)(struct sl_store *s, const struct sl_exec_filter *f,
                     struct sl_exec_record **out, size_t *n, int64_t *total,
                     struct sl_error *err);

    /* Admin (API.md §3.18): routes ordered by last_active_at descending,
     * paged, with the unpaged *total; free with sl_routes_free. */
    int (*route_list)(struct sl_store *s, const struct sl_route_filter *f, struct sl_route **out,
                      size_t *n, int64_t *total, struct sl_error *err);
    /* FLEET.md §6.1: the routes the reaper should look at. */
    int (*route_reapable)(struct sl_store *s, const struct sl_reap_query *q,
                          struct sl_route **out, size_t *n, struct sl_error *err);
    /* Route counts by status; *out malloc'd (caller frees). */
    int (*route_status_counts)(struct sl_store *s, struct sl_status_count **out, size_t *n,
                               struct sl_error *err);
    /* Every worker row ordered by worker_id; *out malloc'd (caller frees). */
    int (*worker_list)(struct sl_store *s, struct sl_worker_record **out, size_t *n,
                       struct sl_error *err);

    /* The sandbox uids of routes assigned to worker_id that are not
     * RELEASED (at startup: the sandboxes a previous incarnation of this
     * worker ran, whose processes must not outlive it). Returns the count,
     * *uids malloc'd (caller frees), -1 on error. */
    int (*route_uids_of_worker)(struct sl_store *s, const char *worker_id, int64_t **uids,
                                struct sl_error *err);

    /* Workers: upsert the heartbeat row (FLEET.md §2.1). */
    int (*worker_upsert)(struct sl_store *s, const struct sl_worker_row *w, struct sl_error *err);

    /* Egress policies (only when s->egress_policies), by scope key
     * ("sandbox:<id>", "tenant:<id>"). get: 1 with *json (the caller
     * frees it), 0 none, -1. put: written (made or replaced), 0 or -1.
     * delete: 1 removed, 0 there was none, -1. */
    int (*egress_get)(struct sl_store *s, const char *scope_key, char **json,
                      struct sl_error *err);
    int (*egress_put)(struct sl_store *s, const char *scope_key, const char *json,
                      const char *updated_by, int64_t now, struct sl_error *err);
    int (*egress_delete)(struct sl_store *s, const char *scope_key, struct sl_error *err);
    /* Tenants (only when s->tenancy). insert: 1 inserted, 0 the tenant_id
     * exists, -1. get: 1 found, 0 absent, -1. list: ordered by tenant_id,
     * free with sl_tenants_free. set_quotas: quotas_json (NULL = none) and
     * updated_at = now; 1 written, 0 no such tenant, -1. */
    int (*tenant_insert)(struct sl_store *s, const struct sl_tenant *t, struct sl_error *err);
    int (*tenant_get)(struct sl_store *s, const char *tenant_id, struct sl_tenant *out,
                      struct sl_error *err);
    int (*tenant_list)(struct sl_store *s, struct sl_tenant **out, size_t *n,
                       struct sl_error *err);
    int (*tenant_set_quotas)(struct sl_store *s, const char *tenant_id, const char *quotas_json,
                             int64_t now, struct sl_error *err);
    /* API keys. insert: 1 inserted, 0 the key_id is taken (the caller draws
     * another), -1. get: 1 found, 0 absent, -1. list: a tenant's keys,
     * oldest first, free with sl_api_keys_free. revoke: revoked_at = now on
     * the tenant's key if not revoked yet; 1 revoked, 0 no such key or
     * already revoked, -1. */
    int (*api_key_insert)(struct sl_store *s, const struct sl_api_key *k, struct sl_error *err);
    int (*api_key_get)(struct sl_store *s, const char *key_id, struct sl_api_key *out,
                       struct sl_error *err);
    int (*api_key_list)(struct sl_store *s, const char *tenant_id, struct sl_api_key **out,
                        size_t *n, struct sl_error *err);
    int (*api_key_revoke)(struct sl_store *s, const char *tenant_id, const char *key_id,
                          int64_t now, struct sl_error *err);
    /* What a tenant uses now, by the ids of its namespace ("<tenant_id>~"):
     * routes not RELEASED, routes READY or RUNNING, executions RUNNING. */
    int (*tenant_usage)(struct sl_store *s, const char *tenant_id, int64_t *sandboxes,
                        int64_t *running_sessions, int64_t *commands, struct sl_error *err);

    /* E2B sandboxes (only when s->e2b). insert: 1 inserted, 0 the id
     * exists, -1. get: 1 found (with its route), 0 absent, -1. set_end:
     * end_at (and on_timeout when not NULL), updated_at = now; 1 written,
     * 0 none, -1. list: those whose route is not RELEASED and whose id
     * starts with id_prefix (literal; NULL = any) and sorts after `after`
     * (NULL = from the first), by sandbox_id, at most limit; free with
     * sl_e2b_sandboxes_free. due: those owned by worker_id whose end_at
     * is at or before now and whose route is not RELEASED (awake ones for
     * "pause", awake or dormant for "kill"), earliest first. */
    int (*e2b_insert)(struct sl_store *s, const struct sl_e2b_sandbox *e, struct sl_error *err);
    int (*e2b_get)(struct sl_store *s, const char *sandbox_id, struct sl_e2b_sandbox *out,
                   struct sl_error *err);
    int (*e2b_set_end)(struct sl_store *s, const char *sandbox_id, int64_t end_at,
                       const char *on_timeout, int64_t now, struct sl_error *err);
    int (*e2b_list)(struct sl_store *s, const char *id_prefix, const char *after, int64_t limit,
                    struct sl_e2b_sandbox **out, size_t *n, struct sl_error *err);
    int (*e2b_due)(struct sl_store *s, const char *worker_id, int64_t now, int64_t limit,
                   struct sl_e2b_sandbox **out, size_t *n, struct sl_error *err);

    void (*close)(struct sl_store *s);
};

struct sl_store {
    const struct sl_store_ops *ops;
    const char *backend; /* "sqlite", "postgresql", "mysql" */
    const char *database; /* file path or database name, for /healthz */
    /* The tenant tables exist (set by prepare_schema, which creates them
     * with auto-DDL): false on a database the reference made, where the
     * tenant methods must not be called. */
    bool tenancy;
    /* The egress policy table exists (prepare_schema); without it the
     * egress methods must not be called. */
    bool egress_policies;
    /* The E2B table exists (prepare_schema); without it the e2b methods
     * must not be called. */
    bool e2b;
};

/* Open the store configured in cfg. *warning (malloc'd, NULL if none) says
 * what of the configuration was ignored, for the caller to log. Nothing
 * is connected yet for a server database: the first method connects. */
struct sl_store *sl_store_open(const struct sl_config *cfg, char **warning, struct sl_error *err);

/* Backends. */
/* busy_timeout_ms: how long a statement waits for another connection's
 * lock (PRAGMA busy_timeout; SANDBOX_DATABASE_LOCK_TIMEOUT_SECONDS). */
struct sl_store *sl_store_sqlite_open(const char *path, int busy_timeout_ms,
                                      struct sl_error *err);

/* The schema script of a backend ("sqlite", "postgresql", "mysql"): the tables and
 * indexes auto-DDL creates, as deploy/sql/generic-<backend>.sql ships them.
 * malloc'd; NULL for an unknown backend or out of memory. */
char *sl_store_schema_sql(const char *backend);

struct sl_strlist;
/* The server databases. url: the configured URL (any of COMPAT.md §1's
 * spellings); wait_ms bounds the wait for a free connection and for a row
 * lock; statement_timeout_ms any one statement. */
struct sl_server_db_options {
    const char *url;
    const char *database; /* the name, for /healthz */
    int pool_size;
    int64_t wait_ms;
    int64_t statement_timeout_ms;
    int64_t connect_timeout_seconds;
    int64_t recycle_seconds; /* <= 0: never */
    struct sl_strlist *dropped; /* URL query options libpq does not know; NULL = not asked */
};
struct sl_store *sl_store_postgresql_open(const struct sl_server_db_options *o, struct sl_error *err);
/* MySQL and MariaDB (libmariadb), the same options. */
struct sl_store *sl_store_mysql_open(const struct sl_server_db_options *o, struct sl_error *err);

#endif
