/* The store core: every store method (store.h) over a SQL driver
 * (sql_driver.h), once for all databases.
 *
 * What lives here: the statements in neutral SQL, rendered for the driver's
 * dialect when the store is made; binding rows to parameters and reading
 * them back; the transaction of each method; the admission rules of API.md
 * §4.1 (fence, parallel limit, exec scopes); the schema DDL and its check.
 *
 * Concurrency (FLEET.md §9): every lifecycle write is a compare-and-set on
 * (sandbox_id, generation, status). The methods that read and then write a
 * route's executions — admission, finish, withdraw — first lock the route
 * row ({FOR_UPDATE}; on SQLite the write transaction holds the database), so
 * two of them on one sandbox run one after the other, and a finish always
 * sees every other finish that committed before it.
 *
 * SQL text is constant; inputs are always bound. Timestamps are bound as
 * naive-UTC text with six fraction digits (they also compare as text on
 * SQLite, which stores them so), booleans as TRUE/FALSE. */
#include "store/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "store/schema.h"
#include "store/sql_driver.h"

#define ROUTE_TABLE "agent_sandbox_route"
#define EXEC_TABLE "agent_sandbox_exec"
#define WORKER_TABLE "agent_sandbox_worker"

/* Column order of struct sl_route and of FLEET.md §2.2; route_args() and
 * route_read() use the same numbering (?1..?25, columns 0..24). */
#define ROUTE_COLUMNS                                                                    \
    "sandbox_id, workspace_scope_id, worker_id, worker_epoch, generation, sandbox_uid, " \
    "profile_id, profile_hash, status, storage_mode, active_exec_id, last_active_at, "   \
    "generation_started_at, generation_created_by, ready_at, last_released_generation, " \
    "last_released_at, last_release_reason, last_released_by, last_lifetime_ms, "        \
    "lifecycle_count, total_lifetime_ms, lifecycle_history_json, created_at, updated_at"

/* Ours (store/schema.c): tenants and their API keys. */
#define EGRESS_TABLE "agent_sandbox_egress_policy"
#define E2B_TABLE "agent_sandbox_e2b"
/* An E2B row with its route's status, generation and owner (e = the E2B
 * table, r = the route). */
#define E2B_SELECT                                                                           \
    "SELECT e.sandbox_id, e.template_id, {JSON_TEXT:e.metadata_json}, "                    \
    "{JSON_TEXT:e.env_json}, e.on_timeout, e.started_at, e.end_at, e.updated_at, r.status, " \
    "r.generation, r.worker_id FROM " E2B_TABLE " e JOIN " ROUTE_TABLE                       \
    " r ON r.sandbox_id = e.sandbox_id"
#define TENANT_TABLE "agent_sandbox_tenant"
#define TENANT_COLUMNS "tenant_id, quotas_json, created_by, created_at, updated_at"
#define KEY_TABLE "agent_sandbox_api_key"
#define KEY_COLUMNS                                                                  \
    "key_id, tenant_id, name, secret_sha256, created_by, created_at, expires_at, " \
    "revoked_at"

/* FLEET.md §2.3 order, then our additive termination_reason (column 14). */
#define EXEC_COLUMNS                                                                         \
    "sandbox_id, exec_id, generation, worker_id, status, command_json, exec_scope, exit_code, " \
    "stdout_text, stderr_text, truncated, started_at, finished_at, created_at, "               \
    "termination_reason"

/* route_cas() binds up to this many expected statuses (there are 7 route
 * statuses); unused slots are bound NULL, which never matches in IN (...). */
#define CAS_MAX_STATUSES 7

/* The admin search is a LIKE pattern with this escape character ('\' would
 * need doubling in MySQL's string literals and not in the others'). */
#define LIKE_ESCAPE '!'

enum stmt_id {
    ST_ROUTE_GET,
    ST_ROUTE_EXISTS,
    ST_ROUTE_INSERT,
    ST_ROUTE_TAKE_WARM,
    ST_ROUTE_CAS,
    ST_ROUTE_TOUCH,
    ST_ROUTE_LOCK,
    ST_ROUTE_ADMIT,
    ST_ROUTE_FINISH,
    ST_EXEC_GET,
    ST_EXEC_ADMIT_READ,
    ST_EXEC_INSERT,
    ST_EXEC_FINISH,
    ST_EXEC_MARK,
    ST_EXEC_MARK_WORKER,
    ST_EXEC_WITHDRAW,
    ST_EXEC_PRUNE_PICK,
    ST_EXEC_DELETE,
    ST_ROUTE_HISTORY_CAS,
    ST_EXEC_OUTPUT_BYTES,
    ST_EXEC_OUTPUT_OLDEST,
    ST_EXEC_OUTPUT_CLEAR,
    ST_WORKER_UPDATE,
    ST_WORKER_INSERT,
    ST_EXEC_LIST,
    ST_EXEC_COUNT,
    ST_ROUTE_UIDS_OF_WORKER,
    ST_ROUTE_LIST,
    ST_ROUTE_LIST_ASC,
    ST_ROUTE_COUNT,
    ST_ROUTE_HISTOGRAM,
    ST_WORKER_LIST,
    ST_ROUTE_REAPABLE,
    ST_TENANT_INSERT,
    ST_TENANT_GET,
    ST_TENANT_LIST,
    ST_TENANT_SET_QUOTAS,
    ST_KEY_INSERT,
    ST_KEY_GET,
    ST_KEY_LIST,
    ST_KEY_REVOKE,
    ST_TENANT_USAGE,
    ST_EGRESS_GET,
    ST_EGRESS_UPDATE,
    ST_EGRESS_INSERT,
    ST_EGRESS_DELETE,
    ST_E2B_INSERT,
    ST_E2B_GET,
    ST_E2B_SET_END,
    ST_E2B_LIST,
    ST_E2B_DUE,
    ST_COUNT
};
_Static_assert(ST_COUNT <= SL_SQL_MAX_STMTS, "raise SL_SQL_MAX_STMTS");

/* {TEXT:?N}: a filter parameter PostgreSQL would otherwise have to type from
 * "?N IS NULL" alone. */
#define ROUTE_FILTER                                                                  \
    " WHERE ({TEXT:?1} IS NULL OR status = ?1)"                                       \
    " AND ({TEXT:?2} IS NULL OR workspace_scope_id = ?2)"                             \
    " AND ({TEXT:?3} IS NULL OR worker_id = ?3)"                                      \
    " AND ({TEXT:?4} IS NULL OR sandbox_id LIKE ?4 ESCAPE '!')"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_ROUTE_GET] = "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE " WHERE sandbox_id = ?1",
    [ST_ROUTE_EXISTS] = "SELECT 1 FROM " ROUTE_TABLE " WHERE sandbox_id = ?1",
    [ST_ROUTE_INSERT] = "INSERT INTO " ROUTE_TABLE " (" ROUTE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, "
                        "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
                        "?20, ?21, ?22, ?23, ?24, ?25)",
    /* Every column but the uid, which is the warm row's: the row becomes the
     * sandbox's (service/warm.c). */
    [ST_ROUTE_TAKE_WARM] = "UPDATE " ROUTE_TABLE " SET sandbox_id = ?1, workspace_scope_id = ?2, "
                           "worker_id = ?3, worker_epoch = ?4, generation = ?5, profile_id = ?7, "
                           "profile_hash = ?8, status = ?9, storage_mode = ?10, "
                           "active_exec_id = ?11, last_active_at = ?12, "
                           "generation_started_at = ?13, generation_created_by = ?14, "
                           "ready_at = ?15, last_released_generation = ?16, "
                           "last_released_at = ?17, last_release_reason = ?18, "
                           "last_released_by = ?19, last_lifetime_ms = ?20, "
                           "lifecycle_count = ?21, total_lifetime_ms = ?22, "
                           "lifecycle_history_json = ?23, created_at = ?24, updated_at = ?25 "
                           "WHERE sandbox_id = ?26 AND sandbox_uid = ?6 AND status = 'WARM'",
    [ST_ROUTE_TOUCH] = "UPDATE " ROUTE_TABLE " SET last_active_at = ?3, updated_at = ?3 "
                       "WHERE sandbox_id = ?1 AND generation = ?2 "
                       "AND status IN ('ASSIGNED', 'READY', 'RUNNING')",
    /* sandbox_uid (?6) and created_at (?24) are bound but never written: the
     * uid is permanent for the life of the id and created_at is the row's
     * birth (FLEET.md §2.2). */
    [ST_ROUTE_CAS] = "UPDATE " ROUTE_TABLE " SET workspace_scope_id = ?2, worker_id = ?3, "
                     "worker_epoch = ?4, generation = ?5, profile_id = ?7, profile_hash = ?8, "
                     "status = ?9, storage_mode = ?10, active_exec_id = ?11, "
                     "last_active_at = ?12, generation_started_at = ?13, "
                     "generation_created_by = ?14, ready_at = ?15, "
                     "last_released_generation = ?16, last_released_at = ?17, "
                     "last_release_reason = ?18, last_released_by = ?19, "
                     "last_lifetime_ms = ?20, lifecycle_count = ?21, total_lifetime_ms = ?22, "
                     "lifecycle_history_json = ?23, updated_at = ?25 "
                     "WHERE sandbox_id = ?1 AND generation = ?26 "
                     "AND status IN (?27, ?28, ?29, ?30, ?31, ?32, ?33)",
    [ST_ROUTE_LOCK] = "SELECT generation, status FROM " ROUTE_TABLE
                      " WHERE sandbox_id = ?1{FOR_UPDATE}",
    [ST_ROUTE_ADMIT] = "UPDATE " ROUTE_TABLE " SET status = 'RUNNING', "
                       "active_exec_id = COALESCE(active_exec_id, ?3), last_active_at = ?4, "
                       "updated_at = ?4 WHERE sandbox_id = ?1 AND generation = ?2 "
                       "AND status IN ('ASSIGNED', 'READY', 'RUNNING')",
    /* API.md §4.1 step 6 in one statement (one round trip on a server):
     * active_exec_id becomes the earliest running execution left, and a
     * RUNNING route with none becomes READY. Only a RUNNING route changes
     * status: a route a release or suspend has claimed meanwhile must not be
     * resurrected. A dormant route's last_active_at is its retention clock
     * (FLEET.md §7.1) and stays. */
    [ST_ROUTE_FINISH] = "UPDATE " ROUTE_TABLE " SET active_exec_id = (SELECT exec_id FROM "
                        EXEC_TABLE " WHERE sandbox_id = ?1 AND generation = ?2 "
                        "AND status = 'RUNNING' ORDER BY started_at IS NULL, started_at, "
                        "created_at, exec_id LIMIT 1), "
                        "status = CASE WHEN status <> 'RUNNING' THEN status "
                        "WHEN EXISTS (SELECT 1 FROM " EXEC_TABLE " WHERE sandbox_id = ?1 "
                        "AND generation = ?2 AND status = 'RUNNING') THEN 'RUNNING' "
                        "ELSE 'READY' END, "
                        "last_active_at = CASE WHEN status IN ('SUSPENDING', 'SUSPENDED') "
                        "THEN last_active_at ELSE ?3 END, updated_at = ?3 "
                        "WHERE sandbox_id = ?1 AND generation = ?2",
    /* The admin list: output columns read as NULL (the list has none). */
    [ST_EXEC_LIST] = "SELECT sandbox_id, exec_id, generation, worker_id, status, command_json, "
                     "exec_scope, exit_code, NULL, NULL, truncated, started_at, finished_at, "
                     "created_at, termination_reason FROM " EXEC_TABLE
                     " WHERE ({TEXT:?1} IS NULL OR sandbox_id = ?1) "
                     "AND ({TEXT:?2} IS NULL OR status = ?2) "
                     "AND ({TEXT:?5} IS NULL OR (?5 = '' AND termination_reason IS NULL) "
                     "OR termination_reason = ?5) "
                     "ORDER BY created_at DESC, sandbox_id, exec_id LIMIT ?3 OFFSET ?4",
    /* ?4 is the search pattern, already escaped for LIKE ... ESCAPE '!'. */
    [ST_ROUTE_LIST] = "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE ROUTE_FILTER
                      " ORDER BY last_active_at DESC, sandbox_id LIMIT ?5 OFFSET ?6",
    [ST_ROUTE_LIST_ASC] = "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE ROUTE_FILTER
                          " ORDER BY last_active_at ASC, sandbox_id LIMIT ?5 OFFSET ?6",
    [ST_ROUTE_COUNT] = "SELECT COUNT(*) FROM " ROUTE_TABLE ROUTE_FILTER,
    /* A 0 cut-off binds NULL: no match. */
    [ST_ROUTE_REAPABLE] =
        "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE " WHERE "
        "(active_exec_id IS NULL AND status IN ('ASSIGNED', 'READY') AND last_active_at < ?1)"
        " OR (active_exec_id IS NULL AND status = 'RELEASING' AND updated_at < ?2)"
        " OR (status = 'RUNNING' AND active_exec_id IS NOT NULL AND last_active_at < ?3)"
        " OR (status = 'SUSPENDING' AND updated_at < ?4)"
        " OR (status = 'SUSPENDED' AND last_active_at < ?5)"
        " ORDER BY last_active_at ASC, sandbox_id LIMIT ?6",
    [ST_ROUTE_HISTOGRAM] = "SELECT status, COUNT(*) FROM " ROUTE_TABLE
                           " GROUP BY status ORDER BY status",
    [ST_WORKER_LIST] = "SELECT worker_id, worker_epoch, endpoint, status, capacity, "
                       "running_sessions, profile_hash, heartbeat_at, started_at, updated_at FROM "
                       WORKER_TABLE " ORDER BY worker_id",
    [ST_ROUTE_UIDS_OF_WORKER] = "SELECT DISTINCT sandbox_uid FROM " ROUTE_TABLE
                                " WHERE worker_id = ?1 AND status <> 'RELEASED'",
    [ST_EXEC_COUNT] = "SELECT COUNT(*) FROM " EXEC_TABLE
                      " WHERE ({TEXT:?1} IS NULL OR sandbox_id = ?1)"
                      " AND ({TEXT:?2} IS NULL OR status = ?2)"
                      " AND ({TEXT:?3} IS NULL OR (?3 = '' AND termination_reason IS NULL)"
                      " OR termination_reason = ?3)",
    [ST_EXEC_GET] = "SELECT " EXEC_COLUMNS " FROM " EXEC_TABLE
                    " WHERE sandbox_id = ?1 AND exec_id = ?2",
    /* Admission's one read, after the route row is locked: the record of
     * this exec_id (a replay, last column 1), the generation's other running
     * executions (the limit and the scopes; 0) and the route's fence (its
     * generation and status in those columns; 2). One branch each, so each
     * uses its index (the primary keys; sandbox_id + status): one WHERE with
     * an OR read every record of the sandbox on SQLite. = and <> are the
     * database's own comparison (MySQL's collation folds case), so a record
     * is in exactly one. UNION ALL, never UNION: PostgreSQL cannot compare
     * the json column. */
    [ST_EXEC_ADMIT_READ] = "SELECT " EXEC_COLUMNS ", 1 FROM " EXEC_TABLE
                           " WHERE sandbox_id = ?1 AND exec_id = ?2 UNION ALL "
                           "SELECT " EXEC_COLUMNS ", 0 FROM " EXEC_TABLE
                           " WHERE sandbox_id = ?1 AND status = 'RUNNING' AND generation = ?3 "
                           "AND exec_id <> ?2 UNION ALL "
                           "SELECT sandbox_id, NULL, generation, NULL, status, NULL, NULL, NULL, "
                           "NULL, NULL, NULL, NULL, NULL, NULL, NULL, 2 FROM " ROUTE_TABLE
                           " WHERE sandbox_id = ?1",
    [ST_EXEC_INSERT] = "INSERT INTO " EXEC_TABLE " (" EXEC_COLUMNS ") VALUES (?1, ?2, ?3, ?4, "
                       "'RUNNING', ?5, ?6, NULL, NULL, NULL, FALSE, ?7, NULL, ?7, NULL)",
    [ST_EXEC_FINISH] = "UPDATE " EXEC_TABLE " SET status = ?3, exit_code = ?4, stdout_text = ?5, "
                       "stderr_text = ?6, truncated = ?7, finished_at = ?8, "
                       "termination_reason = ?9 "
                       /* Only a running record finishes: one already marked
                        * WORKER_LOST by a reassignment keeps that verdict. */
                       "WHERE sandbox_id = ?1 AND exec_id = ?2 AND status = 'RUNNING'",
    [ST_EXEC_MARK] = "UPDATE " EXEC_TABLE " SET status = ?3, finished_at = ?4, "
                     "termination_reason = ?5 "
                     "WHERE sandbox_id = ?1 AND generation = ?2 AND status = 'RUNNING'",
    [ST_EXEC_MARK_WORKER] = "UPDATE " EXEC_TABLE " SET status = ?2, finished_at = ?3, "
                            "termination_reason = ?4 "
                            "WHERE worker_id = ?1 AND status = 'RUNNING'",
    [ST_EXEC_WITHDRAW] = "DELETE FROM " EXEC_TABLE " WHERE sandbox_id = ?1 AND exec_id = ?2 "
                         "AND generation = ?3 AND status = 'RUNNING'",
    /* Pruning picks its batch by key, then deletes each: MySQL refuses
     * LIMIT in an IN (subquery), and the tables have no common row id. */
    [ST_EXEC_PRUNE_PICK] = "SELECT sandbox_id, exec_id FROM " EXEC_TABLE
                           " WHERE status <> 'RUNNING' AND COALESCE(finished_at, started_at) < ?1"
                           " ORDER BY started_at LIMIT ?2",
    [ST_EXEC_DELETE] = "DELETE FROM " EXEC_TABLE " WHERE sandbox_id = ?1 AND exec_id = ?2 "
                       "AND status <> 'RUNNING'",
    [ST_EXEC_OUTPUT_BYTES] = "SELECT COALESCE(SUM({OCTETS:stdout_text} + "
                             "{OCTETS:stderr_text}), 0) FROM " EXEC_TABLE
                             " WHERE sandbox_id = ?1 AND status <> 'RUNNING'",
    [ST_EXEC_OUTPUT_OLDEST] = "SELECT exec_id, {OCTETS:stdout_text} + {OCTETS:stderr_text} FROM "
                              EXEC_TABLE
                              " WHERE sandbox_id = ?1 AND status <> 'RUNNING' AND exec_id <> ?2"
                              " AND (stdout_text <> '' OR stderr_text <> '')"
                              " ORDER BY started_at, created_at LIMIT 64",
    [ST_EXEC_OUTPUT_CLEAR] = "UPDATE " EXEC_TABLE " SET stdout_text = '', stderr_text = '', "
                             "truncated = TRUE WHERE sandbox_id = ?1 AND exec_id = ?2",
    /* Only the history, and only if it is still what was read (NULL
     * compares equal to NULL); updated_at and the rest stay. */
    [ST_ROUTE_HISTORY_CAS] = "UPDATE " ROUTE_TABLE " SET lifecycle_history_json = ?3"
                             " WHERE sandbox_id = ?1 AND {JSON_TEXT:lifecycle_history_json}"
                             " {IS} ?2",
    [ST_WORKER_UPDATE] = "UPDATE " WORKER_TABLE " SET worker_epoch = ?2, endpoint = ?3, "
                         "status = ?4, capacity = ?5, running_sessions = ?6, profile_hash = ?7, "
                         "heartbeat_at = ?8, updated_at = ?8 WHERE worker_id = ?1",
    [ST_WORKER_INSERT] = "INSERT INTO " WORKER_TABLE " (worker_id, worker_epoch, endpoint, "
                         "status, capacity, running_sessions, profile_hash, heartbeat_at, "
                         "started_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8)",
    [ST_TENANT_INSERT] = "INSERT INTO " TENANT_TABLE " (" TENANT_COLUMNS ") "
                         "VALUES (?1, ?2, ?3, ?4, ?4)",
    [ST_TENANT_GET] = "SELECT " TENANT_COLUMNS " FROM " TENANT_TABLE " WHERE tenant_id = ?1",
    [ST_TENANT_LIST] = "SELECT " TENANT_COLUMNS " FROM " TENANT_TABLE " ORDER BY tenant_id",
    [ST_TENANT_SET_QUOTAS] = "UPDATE " TENANT_TABLE " SET quotas_json = ?2, updated_at = ?3 "
                             "WHERE tenant_id = ?1",
    [ST_KEY_INSERT] = "INSERT INTO " KEY_TABLE " (" KEY_COLUMNS ") "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
    [ST_KEY_GET] = "SELECT " KEY_COLUMNS " FROM " KEY_TABLE " WHERE key_id = ?1",
    [ST_KEY_LIST] = "SELECT " KEY_COLUMNS " FROM " KEY_TABLE " WHERE tenant_id = ?1 "
                    "ORDER BY created_at, key_id",
    [ST_KEY_REVOKE] = "UPDATE " KEY_TABLE " SET revoked_at = ?3 WHERE tenant_id = ?1 "
                      "AND key_id = ?2 AND revoked_at IS NULL",
    /* ?1 is "<tenant_id>~%": tenant ids hold no LIKE wildcard (a-z 0-9 -),
     * and each LIKE is a range of the primary key. */
    [ST_TENANT_USAGE] = "SELECT (SELECT COUNT(*) FROM " ROUTE_TABLE " WHERE sandbox_id LIKE ?1 "
                        "AND status <> 'RELEASED'), (SELECT COUNT(*) FROM " ROUTE_TABLE
                        " WHERE sandbox_id LIKE ?1 AND status IN ('READY', 'RUNNING')), "
                        "(SELECT COUNT(*) FROM " EXEC_TABLE " WHERE sandbox_id LIKE ?1 "
                        "AND status = 'RUNNING')",
    [ST_EGRESS_GET] = "SELECT {JSON_TEXT:policy_json} FROM " EGRESS_TABLE " WHERE scope_key = ?1",
    [ST_EGRESS_UPDATE] = "UPDATE " EGRESS_TABLE " SET policy_json = ?2, updated_by = ?3, "
                         "updated_at = ?4 WHERE scope_key = ?1",
    [ST_EGRESS_INSERT] = "INSERT INTO " EGRESS_TABLE " (scope_key, policy_json, updated_by, "
                         "updated_at) VALUES (?1, ?2, ?3, ?4)",
    [ST_EGRESS_DELETE] = "DELETE FROM " EGRESS_TABLE " WHERE scope_key = ?1",
    [ST_E2B_INSERT] = "INSERT INTO " E2B_TABLE " (sandbox_id, template_id, metadata_json, "
                      "env_json, on_timeout, started_at, end_at, updated_at) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6)",
    [ST_E2B_GET] = E2B_SELECT " WHERE e.sandbox_id = ?1",
    [ST_E2B_SET_END] = "UPDATE " E2B_TABLE " SET end_at = ?2, on_timeout = COALESCE(?3, "
                       "on_timeout), updated_at = ?4 WHERE sandbox_id = ?1",
    /* ?1 a LIKE prefix pattern ("<tenant>~%", or "%"), ?2 the id to start
     * after ("" from the first): a range of the primary key. */
    [ST_E2B_LIST] = E2B_SELECT " WHERE e.sandbox_id LIKE ?1 ESCAPE '!' AND e.sandbox_id > ?2 "
                    "AND r.status <> 'RELEASED' ORDER BY e.sandbox_id LIMIT ?3",
    [ST_E2B_DUE] = E2B_SELECT " WHERE e.end_at <= ?2 AND r.worker_id = ?1 AND (r.status IN "
                   "('ASSIGNED', 'READY', 'RUNNING') OR (e.on_timeout = 'kill' AND r.status IN "
                   "('SUSPENDING', 'SUSPENDED'))) ORDER BY e.end_at LIMIT ?3",
};

struct sql_store {
    struct sl_store pub; /* first: the public head, cast back in every method */
    struct sl_sql_db *db;
    const struct sl_sql_driver *drv;
    struct sl_sql_text text[ST_COUNT];
};

static struct sql_store *store_of(struct sl_store *s) { return (struct sql_store *)s; }

/* ---- rendering ---- */

static int render_token(const char *token, size_t n, const struct sl_sql_dialect *d,
                        struct sl_buf *out)
{
    char name[32], arg[64] = "", piece[160];
    const char *colon = memchr(token, ':', n);
    size_t name_len = colon ? (size_t)(colon - token) : n;
    if (name_len >= sizeof(name) || (colon && (size_t)(token + n - colon - 1) >= sizeof(arg)))
        return -1;
    memcpy(name, token, name_len);
    name[name_len] = '\0';
    if (colon) {
        memcpy(arg, colon + 1, (size_t)(token + n - colon - 1));
        arg[token + n - colon - 1] = '\0';
    }
    if (strcmp(name, "FOR_UPDATE") == 0)
        snprintf(piece, sizeof(piece), "%s", d->for_update);
    else if (strcmp(name, "IS") == 0)
        snprintf(piece, sizeof(piece), "%s", d->is_op);
    else if (strcmp(name, "OCTETS") == 0 && *arg)
        snprintf(piece, sizeof(piece), d->octets_fmt, arg);
    else if (strcmp(name, "JSON_TEXT") == 0 && *arg)
        snprintf(piece, sizeof(piece), d->json_text_fmt, arg);
    else
        return -1;
    return sl_buf_append(out, piece, strlen(piece));
}

int sl_sql_render(const char *neutral, const struct sl_sql_dialect *d, struct sl_sql_text *out)
{
    struct sl_buf b;
    sl_buf_init(&b, 64 * 1024);
    memset(out, 0, sizeof(*out));
    int rc = 0;
    for (const char *p = neutral; *p && rc == 0;) {
        if (*p == '?' && p[1] >= '0' && p[1] <= '9') {
            char *end;
            long n = strtol(p + 1, &end, 10);
            if (n < 1 || n > SL_SQL_MAX_ARGS) {
                rc = -1;
                break;
            }
            char ph[16];
            switch (d->placeholders) {
            case SL_SQL_PH_NUMBERED:
                snprintf(ph, sizeof(ph), "?%ld", n);
                break;
            case SL_SQL_PH_DOLLAR:
                snprintf(ph, sizeof(ph), "$%ld", n);
                break;
            case SL_SQL_PH_POSITION:
                if (out->norder >= (int)sizeof(out->order)) {
                    rc = -1;
                    continue;
                }
                out->order[out->norder++] = (unsigned char)n;
                snprintf(ph, sizeof(ph), "?");
                break;
            }
            rc = sl_buf_append(&b, ph, strlen(ph));
            p = end;
        } else if (strncmp(p, "{TEXT:?", 7) == 0) {
            /* A typed parameter: the placeholder inside the dialect's cast. */
            char *end;
            long n = strtol(p + 7, &end, 10);
            if (n < 1 || n > SL_SQL_MAX_ARGS || *end != '}' ||
                (d->placeholders == SL_SQL_PH_POSITION && out->norder >= (int)sizeof(out->order))) {
                rc = -1;
                break;
            }
            char ph[16], piece[64];
            if (d->placeholders == SL_SQL_PH_POSITION) {
                out->order[out->norder++] = (unsigned char)n;
                snprintf(ph, sizeof(ph), "?");
            } else {
                snprintf(ph, sizeof(ph), "%c%ld", d->placeholders == SL_SQL_PH_DOLLAR ? '$' : '?', n);
            }
            snprintf(piece, sizeof(piece), d->text_param_fmt, ph);
            rc = sl_buf_append(&b, piece, strlen(piece));
            p = end + 1;
        } else if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close) {
                rc = -1;
                break;
            }
            rc = render_token(p + 1, (size_t)(close - p - 1), d, &b);
            p = close + 1;
        } else {
            rc = sl_buf_append(&b, p, 1);
            p++;
        }
    }
    if (rc == 0)
        rc = sl_buf_append(&b, "", 1);
    if (rc < 0) {
        sl_buf_free(&b);
        return -1;
    }
    out->sql = b.data; /* the buffer's NUL-terminated text, ours now */
    return 0;
}

/* ---- connections ---- */

static void releasep(struct sl_sql_conn **c)
{
    if (*c)
        (*c)->db->drv->release(*c);
}

/* Declare first in a method so the connection goes back last. */
#define _cleanup_conn_ __attribute__((cleanup(releasep)))

static struct sl_sql_conn *conn_get(struct sl_store *s, bool write, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    return st->drv->acquire(st->db, write, err);
}

static int oom(struct sl_error *err)
{
    return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
}

static int refuse(struct sl_error *err, const char *code)
{
    return sl_error_set(err, code, 0, "%s", code);
}

int sl_sql_fail(struct sl_error *err, const char *backend, const char *what, const char *text)
{
    sl_error_set(err, SL_E_STORE, 0, "%s", SL_E_STORE);
    if (err)
        snprintf(err->detail, sizeof(err->detail), "%s %s: %s", backend, what,
                 text ? text : "no connection");
    return -1;
}

/* ---- arguments ---- */

/* SQLAlchemy's DateTime text (naive UTC, six fraction digits). */
static void ts_format(int64_t us, char *buf, size_t size)
{
    int64_t secs = us / 1000000, frac = us % 1000000;
    if (frac < 0) {
        frac += 1000000;
        secs -= 1;
    }
    time_t t = (time_t)secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(buf, size, "%04d-%02d-%02d %02d:%02d:%02d.%06ld", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)frac);
}

/* The parameters of one statement, numbered from 1. Timestamp texts live
 * in the struct, so it must outlive the query. */
struct args {
    struct sl_sql_arg v[SL_SQL_MAX_ARGS];
    char ts[SL_SQL_MAX_ARGS][48];
    int n;
    const struct sl_sql_dialect *dialect;
    char *owned[2]; /* NUL-free copies of command output, when the dialect needs them */
};

static void args_init(struct args *a, struct sl_store *s)
{
    a->n = 0;
    a->dialect = store_of(s)->db->dialect;
    a->owned[0] = a->owned[1] = NULL;
}

static void args_free(struct args *a)
{
    free(a->owned[0]);
    free(a->owned[1]);
}

static struct sl_sql_arg *arg_at(struct args *a, int i)
{
    if (i > a->n) {
        for (int k = a->n; k < i; k++)
            a->v[k] = (struct sl_sql_arg){.kind = SL_SQL_NULL};
        a->n = i;
    }
    return &a->v[i - 1];
}

static void arg_text(struct args *a, int i, const char *v)
{
    *arg_at(a, i) = v ? (struct sl_sql_arg){.kind = SL_SQL_TEXT, .s = v, .len = strlen(v)}
                      : (struct sl_sql_arg){.kind = SL_SQL_NULL};
}

/* A termination reason: "" (no reason) is stored as NULL. */
static void arg_reason(struct args *a, int i, const char *reason)
{
    arg_text(a, i, reason && *reason ? reason : NULL);
}

static void arg_int(struct args *a, int i, int64_t v)
{
    *arg_at(a, i) = (struct sl_sql_arg){.kind = SL_SQL_INT, .i = v};
}

/* v == null_value binds NULL (0 for nullable counters, -1 for
 * last_lifetime_ms ...). */
static void arg_int_or_null(struct args *a, int i, int64_t v, int64_t null_value)
{
    if (v == null_value)
        *arg_at(a, i) = (struct sl_sql_arg){.kind = SL_SQL_NULL};
    else
        arg_int(a, i, v);
}

static void arg_bool(struct args *a, int i, bool v)
{
    *arg_at(a, i) = (struct sl_sql_arg){.kind = SL_SQL_BOOL, .i = v ? 1 : 0};
}

static void arg_ts(struct args *a, int i, int64_t us, bool nullable)
{
    if (nullable && us == 0) {
        *arg_at(a, i) = (struct sl_sql_arg){.kind = SL_SQL_NULL};
        return;
    }
    struct sl_sql_arg *v = arg_at(a, i);
    ts_format(us, a->ts[i - 1], sizeof(a->ts[i - 1]));
    *v = (struct sl_sql_arg){.kind = SL_SQL_TS, .i = us, .s = a->ts[i - 1],
                             .len = strlen(a->ts[i - 1])};
}

/* Command output: text that may hold NUL bytes. A dialect whose text
 * cannot gets U+FFFD in their place (slot: 0 stdout, 1 stderr). */
static int arg_output(struct args *a, int i, int slot, const char *v, size_t len)
{
    if (!v) {
        *arg_at(a, i) = (struct sl_sql_arg){.kind = SL_SQL_NULL};
        return 0;
    }
    if (!a->dialect->text_allows_nul && memchr(v, '\0', len)) {
        char *copy = malloc(len * 3 + 1);
        if (!copy)
            return -1;
        size_t n = 0;
        for (size_t k = 0; k < len; k++) {
            if (v[k] == '\0') {
                memcpy(copy + n, "\xef\xbf\xbd", 3);
                n += 3;
            } else {
                copy[n++] = v[k];
            }
        }
        copy[n] = '\0';
        a->owned[slot] = copy;
        v = copy;
        len = n;
    }
    *arg_at(a, i) = (struct sl_sql_arg){.kind = SL_SQL_TEXT, .s = v, .len = len};
    return 0;
}


/* ---- statements and transactions ---- */

/* Run statement `id`: 0, SL_SQL_CONFLICT, or -1 with err filled. */
static int query(struct sql_store *st, struct sl_sql_conn *c, enum stmt_id id,
                 const struct args *a, struct sl_error *err)
{
    return st->drv->query(c, (int)id, &st->text[id], a->v, a->n, err);
}

/* A statement that returns no rows: the rows it changed, or -1. */
static int64_t run(struct sql_store *st, struct sl_sql_conn *c, enum stmt_id id,
                   const struct args *a, struct sl_error *err)
{
    int rc = query(st, c, id, a, err);
    if (rc < 0)
        return -1;
    return st->drv->changes(c);
}

/* A statement whose result does not matter (a write's changed rows, a row
 * lock's row), in a transaction: where the driver can, it goes with the
 * next statement or the COMMIT in one round trip (PostgreSQL). 0 or -1. */
static int run_at_commit(struct sql_store *st, struct sl_sql_conn *c, enum stmt_id id,
                         const struct args *a, struct sl_error *err)
{
    if (st->drv->query_at_commit)
        return st->drv->query_at_commit(c, (int)id, &st->text[id], a->v, a->n, err) < 0 ? -1 : 0;
    return run(st, c, id, a, err) < 0 ? -1 : 0;
}

static int next(struct sql_store *st, struct sl_sql_conn *c, struct sl_error *err)
{
    return st->drv->next(c, err);
}

static int tx_begin(struct sql_store *st, struct sl_sql_conn *c, struct sl_error *err)
{
    if (st->drv->begin(c, err) < 0)
        return sl_error_wrap(err, "begin");
    return 0;
}

/* Finish the transaction opened by tx_begin(): commit when rc >= 0, roll back
 * otherwise. Returns rc, or -1 when the commit fails. */
static int tx_end(struct sql_store *st, struct sl_sql_conn *c, int rc, struct sl_error *err)
{
    if (rc < 0) {
        st->drv->rollback(c);
        return rc;
    }
    if (st->drv->commit(c, err) < 0) {
        sl_error_wrap(err, "commit");
        st->drv->rollback(c);
        return -1;
    }
    return rc;
}

/* ---- reading: the first failure sticks ---- */

struct reader {
    struct sl_sql_conn *c;
    const struct sl_sql_driver *drv;
    bool oom;
    const char *bad; /* a value we cannot represent, NULL if none */
};

static struct reader reader_of(struct sql_store *st, struct sl_sql_conn *c)
{
    return (struct reader){c, st->drv, false, NULL};
}

static bool read_failed(const struct reader *r) { return r->oom || r->bad; }

/* The column's text, NULL for SQL NULL (a NULL pointer for a value that is
 * not NULL is the driver running out of memory). */
static const char *col(struct reader *r, int i, size_t *len)
{
    size_t n = 0;
    const char *v = r->drv->col_text(r->c, i, &n);
    if (!v && !r->drv->col_null(r->c, i))
        r->oom = true;
    if (len)
        *len = v ? n : 0;
    return v;
}

/* A text column; NULL stays NULL only when nullable (a NOT NULL column read
 * from a foreign schema gives "" rather than a surprise NULL). */
static char *read_str(struct reader *r, int i, bool nullable)
{
    if (read_failed(r))
        return NULL;
    const char *v = col(r, i, NULL);
    if (!v) {
        if (nullable || r->oom)
            return NULL;
        v = "";
    }
    char *copy = strdup(v);
    if (!copy)
        r->oom = true;
    return copy;
}

/* Nullable text that may hold NUL bytes; *len gets its byte length. */
static char *read_blob_text(struct reader *r, int i, size_t *len)
{
    *len = 0;
    if (read_failed(r))
        return NULL;
    size_t n = 0;
    const char *v = col(r, i, &n);
    if (!v)
        return NULL;
    char *copy = malloc(n + 1);
    if (!copy) {
        r->oom = true;
        return NULL;
    }
    memcpy(copy, v, n);
    copy[n] = '\0';
    *len = n;
    return copy;
}

static void read_word(struct reader *r, int i, char *dst, size_t size)
{
    if (read_failed(r))
        return;
    const char *v = col(r, i, NULL);
    if (!v || strlen(v) >= size) {
        if (!r->oom)
            r->bad = "unexpected status or storage_mode value";
        return;
    }
    memcpy(dst, v, strlen(v) + 1);
}

/* A nullable short text into a fixed buffer: NULL reads as "", a value
 * longer than the buffer (another writer's, the column is wider) is cut
 * rather than refused: it is informative, never a key. */
static void read_word_trunc(struct reader *r, int i, char *dst, size_t size)
{
    dst[0] = '\0';
    if (read_failed(r))
        return;
    const char *v = col(r, i, NULL);
    if (v)
        snprintf(dst, size, "%s", v);
}

static int64_t read_int64(struct reader *r, int i, int64_t null_value)
{
    if (read_failed(r) || r->drv->col_null(r->c, i))
        return null_value;
    return r->drv->col_int(r->c, i);
}

/* 0/1 (SQLite, MySQL) or t/f (PostgreSQL). */
static bool read_bool(struct reader *r, int i)
{
    if (read_failed(r) || r->drv->col_null(r->c, i))
        return false;
    const char *v = col(r, i, NULL);
    return v && (v[0] == '1' || v[0] == 't' || v[0] == 'T');
}

static int64_t read_ts(struct reader *r, int i)
{
    if (read_failed(r) || r->drv->col_null(r->c, i))
        return 0;
    const char *v = col(r, i, NULL);
    int64_t us = 0;
    if (!v || sl_time_parse(v, &us) < 0) {
        if (!r->oom)
            r->bad = "unreadable timestamp";
        return 0;
    }
    return us;
}

static int reader_done(struct reader *r, const char *table, struct sl_error *err)
{
    if (r->oom)
        return oom(err);
    if (!r->bad)
        return 0;
    sl_error_set(err, SL_E_STORE, 0, "%s", SL_E_STORE);
    if (err)
        snprintf(err->detail, sizeof(err->detail), "reading %s: %s", table, r->bad);
    return -1;
}

/* ---- rows ---- */

static void route_args(struct args *a, const struct sl_route *r)
{
    arg_text(a, 1, r->sandbox_id);
    arg_text(a, 2, r->workspace_scope_id);
    arg_text(a, 3, r->worker_id);
    arg_text(a, 4, r->worker_epoch);
    arg_int(a, 5, r->generation);
    arg_int(a, 6, r->sandbox_uid);
    arg_text(a, 7, r->profile_id);
    arg_text(a, 8, r->profile_hash);
    arg_text(a, 9, r->status);
    arg_text(a, 10, r->storage_mode);
    arg_text(a, 11, r->active_exec_id);
    arg_ts(a, 12, r->last_active_at, false);
    arg_ts(a, 13, r->generation_started_at, false);
    arg_text(a, 14, r->generation_created_by);
    arg_ts(a, 15, r->ready_at, true);
    arg_int_or_null(a, 16, r->last_released_generation, 0);
    arg_ts(a, 17, r->last_released_at, true);
    arg_text(a, 18, r->last_release_reason);
    arg_text(a, 19, r->last_released_by);
    arg_int_or_null(a, 20, r->last_lifetime_ms, -1);
    arg_int(a, 21, r->lifecycle_count);
    arg_int(a, 22, r->total_lifetime_ms);
    arg_text(a, 23, r->lifecycle_history_json);
    arg_ts(a, 24, r->created_at, false);
    arg_ts(a, 25, r->updated_at, false);
}

static int route_read(struct sql_store *st, struct sl_sql_conn *c, struct sl_route *out,
                      struct sl_error *err)
{
    struct reader r = reader_of(st, c);
    memset(out, 0, sizeof(*out));
    out->sandbox_id = read_str(&r, 0, false);
    out->workspace_scope_id = read_str(&r, 1, false);
    out->worker_id = read_str(&r, 2, true);
    out->worker_epoch = read_str(&r, 3, true);
    out->generation = read_int64(&r, 4, 0);
    out->sandbox_uid = read_int64(&r, 5, 0);
    out->profile_id = read_str(&r, 6, false);
    out->profile_hash = read_str(&r, 7, false);
    read_word(&r, 8, out->status, sizeof(out->status));
    read_word(&r, 9, out->storage_mode, sizeof(out->storage_mode));
    out->active_exec_id = read_str(&r, 10, true);
    out->last_active_at = read_ts(&r, 11);
    out->generation_started_at = read_ts(&r, 12);
    out->generation_created_by = read_str(&r, 13, true);
    out->ready_at = read_ts(&r, 14);
    out->last_released_generation = read_int64(&r, 15, 0);
    out->last_released_at = read_ts(&r, 16);
    out->last_release_reason = read_str(&r, 17, true);
    out->last_released_by = read_str(&r, 18, true);
    out->last_lifetime_ms = read_int64(&r, 19, -1);
    out->lifecycle_count = read_int64(&r, 20, 0);
    out->total_lifetime_ms = read_int64(&r, 21, 0);
    out->lifecycle_history_json = read_str(&r, 22, true);
    out->created_at = read_ts(&r, 23);
    out->updated_at = read_ts(&r, 24);
    if (reader_done(&r, ROUTE_TABLE, err) < 0) {
        sl_route_clear(out);
        return -1;
    }
    return 0;
}

static int exec_read(struct sql_store *st, struct sl_sql_conn *c, struct sl_exec_record *out,
                     struct sl_error *err)
{
    struct reader r = reader_of(st, c);
    memset(out, 0, sizeof(*out));
    out->sandbox_id = read_str(&r, 0, false);
    out->exec_id = read_str(&r, 1, false);
    out->generation = read_int64(&r, 2, 0);
    out->worker_id = read_str(&r, 3, false);
    read_word(&r, 4, out->status, sizeof(out->status));
    out->command_json = read_str(&r, 5, false);
    out->exec_scope = read_str(&r, 6, true);
    out->has_exit_code = !st->drv->col_null(c, 7);
    out->exit_code = (int)read_int64(&r, 7, 0);
    out->stdout_text = read_blob_text(&r, 8, &out->stdout_len);
    out->stderr_text = read_blob_text(&r, 9, &out->stderr_len);
    out->truncated = read_bool(&r, 10);
    out->started_at = read_ts(&r, 11);
    out->finished_at = read_ts(&r, 12);
    out->created_at = read_ts(&r, 13);
    read_word_trunc(&r, 14, out->termination_reason, sizeof(out->termination_reason));
    if (reader_done(&r, EXEC_TABLE, err) < 0) {
        sl_exec_record_clear(out);
        return -1;
    }
    return 0;
}

static bool status_in(const char *status, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(status, *set) == 0)
            return true;
    return false;
}

static const char *const live_statuses[] = {"ASSIGNED", "READY", "RUNNING", NULL};
static const char *const dormant_statuses[] = {"SUSPENDING", "SUSPENDED", NULL};

/* API.md §4.4: does a running execution conflict with a new request scoped
 * `want` (NULL = unscoped)? A running record whose scope column is empty
 * falls back to the exec_scope inside its stored request; unreadable means
 * unscoped. */
static bool scope_conflicts(const char *want, const char *column, const char *command_json)
{
    if (sl_exec_scope_beside(want) || sl_exec_scope_beside(column))
        return false;
    if (!want)
        return true;
    if (column && *column)
        return strcmp(column, want) == 0;
    _cleanup_json_ json_t *request = command_json ? json_loads(command_json, 0, NULL) : NULL;
    json_t *scope = json_object_get(request, "exec_scope");
    if (!json_is_string(scope) || json_string_length(scope) == 0)
        return true;
    return strcmp(json_string_value(scope), want) == 0;
}

/* ---- schema ---- */

/* CREATE TABLE IF NOT EXISTS for one table, from the shared schema data. */
static int ddl_render_table(const struct sl_sql_dialect *d, const struct sl_schema_table *table,
                            bool inline_indexes, struct sl_buf *out)
{
    char line[512];
    snprintf(line, sizeof(line), "CREATE TABLE IF NOT EXISTS %s (\n", table->name);
    int rc = sl_buf_append(out, line, strlen(line));
    for (size_t c = 0; c < table->ncolumns && rc == 0; c++) {
        const struct sl_schema_column *col = &table->columns[c];
        char type[64], dflt[48] = "";
        if (col->has_default && col->type == SL_SCHEMA_BOOLEAN)
            snprintf(dflt, sizeof(dflt), " DEFAULT %s", col->default_value ? "TRUE" : "FALSE");
        else if (col->has_default)
            snprintf(dflt, sizeof(dflt), " DEFAULT %ld", col->default_value);
        snprintf(line, sizeof(line), "    %s %s%s%s,\n", col->name,
                 d->column_type(col, type, sizeof(type)), col->nullable ? "" : " NOT NULL",
                 dflt);
        rc = sl_buf_append(out, line, strlen(line));
    }
    if (rc == 0) {
        snprintf(line, sizeof(line), "    PRIMARY KEY (%s)", table->primary_key);
        rc = sl_buf_append(out, line, strlen(line));
    }
    if (rc == 0 && table->unique_name) {
        snprintf(line, sizeof(line), ",\n    CONSTRAINT %s UNIQUE (%s)", table->unique_name,
                 table->unique_columns);
        rc = sl_buf_append(out, line, strlen(line));
    }
    for (size_t i = 0; inline_indexes && i < sl_schema_nindexes && rc == 0; i++) {
        const struct sl_schema_index *ix = &sl_schema_indexes[i];
        if (strcmp(ix->table, table->name) != 0)
            continue;
        snprintf(line, sizeof(line), ",\n    INDEX %s (%s)", ix->name, ix->columns);
        rc = sl_buf_append(out, line, strlen(line));
    }
    if (rc == 0) {
        snprintf(line, sizeof(line), "\n)%s", d->table_options);
        rc = sl_buf_append(out, line, strlen(line) + 1);
    }
    return rc;
}

/* Every column of an index definition ("a, b") exists in the live table. */
static bool index_columns_present(const char *columns, const struct sl_strlist *live)
{
    char copy[128], *save = NULL;
    snprintf(copy, sizeof(copy), "%s", columns);
    for (char *col = strtok_r(copy, ", ", &save); col; col = strtok_r(NULL, ", ", &save))
        if (!sl_strlist_contains(live, col))
            return false;
    return true;
}

/* Add our additive columns to tables created without them (by the reference
 * or an older sandloomd). The reference's own columns are never ALTERed in
 * (FLEET.md §2.4); ours are nullable, so the rows already there stay valid.
 * Runs under the DDL lock: a second replica waits, then finds the column
 * and adds nothing. */
static int ddl_add_columns(struct sql_store *st, struct sl_sql_conn *c, struct sl_error *err)
{
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++) {
        const struct sl_schema_table *table = &sl_schema_tables[t];
        struct sl_strlist live = {0};
        bool listed = false;
        for (size_t k = 0; k < table->ncolumns; k++) {
            const struct sl_schema_column *col = &table->columns[k];
            if (!col->additive)
                continue;
            if (!listed && st->drv->table_columns(c, table->name, &live, err) < 0) {
                sl_strlist_free(&live);
                return -1;
            }
            listed = true;
            if (live.len == 0 || sl_strlist_contains(&live, col->name))
                continue;
            char type[64], sql[256];
            sl_schema_add_column_sql(table, col, st->db->dialect->column_type(col, type, sizeof(type)),
                                     sql, sizeof(sql));
            if (st->drv->exec_ddl(c, sql, err) < 0) {
                sl_strlist_free(&live);
                return sl_error_wrap(err, "add column %s.%s", table->name, col->name);
            }
        }
        sl_strlist_free(&live);
    }
    return 0;
}

static int ddl_create_indexes(struct sql_store *st, struct sl_sql_conn *c, struct sl_error *err)
{
    for (size_t i = 0; i < sl_schema_nindexes; i++) {
        const struct sl_schema_index *ix = &sl_schema_indexes[i];
        struct sl_strlist live = {0};
        if (st->drv->table_columns(c, ix->table, &live, err) < 0) {
            sl_strlist_free(&live);
            return -1;
        }
        bool present = index_columns_present(ix->columns, &live);
        sl_strlist_free(&live);
        /* An index whose columns are missing from a pre-existing table is
         * skipped: the column check that follows names the column, which is
         * the useful refusal. */
        if (!present)
            continue;
        int exists = st->drv->index_exists(c, ix->table, ix->name, err);
        if (exists < 0)
            return -1;
        if (exists)
            continue;
        char sql[256];
        snprintf(sql, sizeof(sql), "CREATE INDEX %s ON %s (%s)", ix->name, ix->table,
                 ix->columns);
        if (st->drv->exec_ddl(c, sql, err) < 0)
            return sl_error_wrap(err, "create index %s", ix->name);
    }
    return 0;
}

/* Create missing tables, add missing additive columns, then create missing
 * indexes. */
static int ddl_locked(struct sql_store *st, struct sl_sql_conn *c, struct sl_error *err)
{
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++) {
        struct sl_buf sql;
        sl_buf_init(&sql, 16 * 1024);
        if (ddl_render_table(st->db->dialect, &sl_schema_tables[t], false, &sql) < 0) {
            sl_buf_free(&sql);
            return oom(err);
        }
        int rc = st->drv->exec_ddl(c, sql.data, err);
        sl_buf_free(&sql);
        if (rc < 0)
            return sl_error_wrap(err, "create table %s", sl_schema_tables[t].name);
    }
    if (ddl_add_columns(st, c, err) < 0)
        return -1;
    return ddl_create_indexes(st, c, err);
}

char *sl_sql_schema_script(const struct sl_sql_dialect *d, const char *heading)
{
    struct sl_buf b;
    sl_buf_init(&b, 256 * 1024);
    int rc = sl_buf_append(&b, heading, strlen(heading));
    for (size_t t = 0; t < SL_SCHEMA_NTABLES && rc == 0; t++) {
        /* ddl_render_table() ends its text with a NUL: drop it. */
        rc = ddl_render_table(d, &sl_schema_tables[t], !d->create_index_if_not_exists, &b);
        if (rc == 0) {
            b.len--;
            rc = sl_buf_append(&b, ";\n\n", 3);
        }
    }
    for (size_t i = 0; d->create_index_if_not_exists && i < sl_schema_nindexes && rc == 0; i++) {
        const struct sl_schema_index *ix = &sl_schema_indexes[i];
        char line[256];
        snprintf(line, sizeof(line), "CREATE INDEX IF NOT EXISTS %s ON %s (%s);\n", ix->name,
                 ix->table, ix->columns);
        rc = sl_buf_append(&b, line, strlen(line));
    }
    if (rc == 0)
        rc = sl_buf_append(&b, "", 1);
    if (rc < 0) {
        sl_buf_free(&b);
        return NULL;
    }
    return b.data;
}

static int sql_prepare_schema(struct sl_store *s, bool auto_ddl, char **warnings,
                              struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    *warnings = NULL;
    if (!c)
        return -1;
    if (auto_ddl) {
        if (st->drv->ddl_begin(c, err) < 0)
            return sl_error_wrap(err, "schema lock");
        int rc = ddl_locked(st, c, err);
        if (st->drv->ddl_end(c, rc == 0, rc == 0 ? err : NULL) < 0 || rc < 0)
            return -1;
    }
    struct sl_strlist live[SL_SCHEMA_NTABLES] = {0};
    int rc = 0;
    for (size_t t = 0; t < SL_SCHEMA_NTABLES && rc == 0; t++)
        rc = st->drv->table_columns(c, sl_schema_tables[t].name, &live[t], err);
    if (rc == 0)
        rc = sl_schema_check(live, warnings, err);
    s->tenancy = rc == 0 && live[SL_SCHEMA_TENANT].len > 0 && live[SL_SCHEMA_API_KEY].len > 0;
    s->egress_policies = rc == 0 && live[SL_SCHEMA_EGRESS].len > 0;
    s->e2b = rc == 0 && live[SL_SCHEMA_E2B].len > 0;
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++)
        sl_strlist_free(&live[t]);
    return rc;
}

/* ---- routes ---- */

static int sql_route_get(struct sl_store *s, const char *sandbox_id, struct sl_route *out,
                         struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    if (query(st, c, ST_ROUTE_GET, &a, err) < 0)
        return -1;
    int r = next(st, c, err);
    if (r <= 0)
        return r;
    return route_read(st, c, out, err) < 0 ? -1 : 1;
}

static int sql_route_insert(struct sl_store *s, const struct sl_route *r, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    route_args(&a, r);
    int rc = query(st, c, ST_ROUTE_INSERT, &a, err);
    if (rc == 0)
        return 1;
    if (rc != SL_SQL_CONFLICT)
        return sl_error_wrap(err, "insert route");
    /* Both keys may clash at once; the caller must then re-read, so the
     * sandbox_id answer wins over the uid one. Rows are never deleted, so the
     * check after the failed insert cannot race a removal. */
    args_init(&a, s);
    arg_text(&a, 1, r->sandbox_id);
    if (query(st, c, ST_ROUTE_EXISTS, &a, err) < 0)
        return -1;
    int exists = next(st, c, err);
    if (exists < 0)
        return -1;
    return exists ? 0 : -2;
}

static int sql_route_take_warm(struct sl_store *s, const char *warm_id, const struct sl_route *r,
                               struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    route_args(&a, r);
    arg_text(&a, 26, warm_id);
    int rc = query(st, c, ST_ROUTE_TAKE_WARM, &a, err);
    if (rc == SL_SQL_CONFLICT) {
        sl_error_clear(err);
        return 0; /* the sandbox's id has a route already: the caller re-reads */
    }
    if (rc < 0)
        return sl_error_wrap(err, "take a warm route");
    return st->drv->changes(c) > 0 ? 1 : -2;
}

static int sql_route_cas(struct sl_store *s, const struct sl_route *r, int64_t expect_generation,
                         const char *const *expect_statuses, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    size_t n = 0;
    while (expect_statuses && expect_statuses[n])
        n++;
    if (n > CAS_MAX_STATUSES)
        return sl_error_set(err, SL_E_INTERNAL, EINVAL, "too many expected route statuses");
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    route_args(&a, r);
    arg_int(&a, 26, expect_generation);
    for (size_t i = 0; i < CAS_MAX_STATUSES; i++)
        arg_text(&a, 27 + (int)i, i < n ? expect_statuses[i] : NULL);
    int64_t changed = run(st, c, ST_ROUTE_CAS, &a, err);
    if (changed < 0)
        return -1;
    return changed > 0 ? 1 : 0;
}

static int sql_route_touch(struct sl_store *s, const char *sandbox_id, int64_t generation,
                           int64_t now, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    arg_int(&a, 2, generation);
    arg_ts(&a, 3, now, false);
    /* Activity is refreshed on every call: it must not make a file read
     * wait out another process's lock. Tried once; a touch that loses is
     * made good by the next one (the clock it feeds counts in minutes). */
    if (st->drv->try_once)
        st->drv->try_once(c, true);
    int64_t changed = run(st, c, ST_ROUTE_TOUCH, &a, err);
    if (st->drv->try_once)
        st->drv->try_once(c, false);
    return changed < 0 ? -1 : changed > 0 ? 1 : 0;
}

/* ---- executions ---- */

static int exec_lookup(struct sql_store *st, struct sl_sql_conn *c, const char *sandbox_id,
                       const char *exec_id, struct sl_exec_record *out, struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, sandbox_id);
    arg_text(&a, 2, exec_id);
    if (query(st, c, ST_EXEC_GET, &a, err) < 0)
        return -1;
    int r = next(st, c, err);
    if (r <= 0)
        return r;
    return exec_read(st, c, out, err) < 0 ? -1 : 1;
}

static int sql_exec_get(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                        struct sl_exec_record *out, struct sl_error *err)
{
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    return exec_lookup(store_of(s), c, sandbox_id, exec_id, out, err);
}

/* The single number a COUNT/SUM statement answers. */
static int scalar(struct sql_store *st, struct sl_sql_conn *c, enum stmt_id id,
                  const struct args *a, int64_t *out, struct sl_error *err)
{
    *out = 0;
    if (query(st, c, id, a, err) < 0)
        return -1;
    int r = next(st, c, err);
    if (r < 0)
        return -1;
    if (r > 0 && !st->drv->col_null(c, 0))
        *out = st->drv->col_int(c, 0);
    return 0;
}

static int sql_exec_list(struct sl_store *s, const struct sl_exec_filter *f,
                         struct sl_exec_record **out, size_t *n, int64_t *total,
                         struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    *total = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, f->sandbox_id);
    arg_text(&a, 2, f->status);
    arg_text(&a, 3, f->termination_reason);
    if (scalar(st, c, ST_EXEC_COUNT, &a, total, err) < 0)
        return -1;
    args_init(&a, s);
    arg_text(&a, 1, f->sandbox_id);
    arg_text(&a, 2, f->status);
    arg_int(&a, 3, f->limit);
    arg_int(&a, 4, f->offset);
    arg_text(&a, 5, f->termination_reason);
    if (query(st, c, ST_EXEC_LIST, &a, err) < 0)
        return -1;
    struct sl_exec_record *v = calloc((size_t)(f->limit > 0 ? f->limit : 1), sizeof(*v));
    if (!v)
        return oom(err);
    size_t count = 0;
    int r = 0;
    while (count < (size_t)f->limit && (r = next(st, c, err)) == 1) {
        if (exec_read(st, c, &v[count], err) < 0) {
            sl_exec_records_free(v, count);
            return -1;
        }
        count++;
    }
    if (count < (size_t)f->limit && r < 0) {
        sl_exec_records_free(v, count);
        return -1;
    }
    *out = v;
    *n = count;
    return 0;
}

/* "<prefix>%<search>%" for LIKE ... ESCAPE, each with %, _ and the escape
 * escaped (no prefix: "%<search>%"; no search: "<prefix>%"). */
static void like_literal(char *p, size_t *j, const char *text)
{
    for (size_t i = 0; text[i]; i++) {
        if (text[i] == '%' || text[i] == '_' || text[i] == LIKE_ESCAPE)
            p[(*j)++] = LIKE_ESCAPE;
        p[(*j)++] = text[i];
    }
}

static char *like_pattern(const char *prefix, const char *search)
{
    size_t n = (prefix ? strlen(prefix) : 0) + (search ? strlen(search) : 0);
    char *p = malloc(2 * n + 3);
    if (!p)
        return NULL;
    size_t j = 0;
    if (prefix)
        like_literal(p, &j, prefix);
    p[j++] = '%';
    if (search) {
        like_literal(p, &j, search);
        p[j++] = '%';
    }
    p[j] = '\0';
    return p;
}

static void route_filter_args(struct args *a, const struct sl_route_filter *f,
                              const char *pattern)
{
    arg_text(a, 1, f->status);
    arg_text(a, 2, f->workspace_scope_id);
    arg_text(a, 3, f->worker_id);
    arg_text(a, 4, pattern);
}

/* Up to `limit` routes of the last query into a malloc'd array. */
static int read_routes(struct sql_store *st, struct sl_sql_conn *c, int64_t limit,
                       struct sl_route **out, size_t *n, struct sl_error *err)
{
    struct sl_route *v = calloc((size_t)(limit > 0 ? limit : 1), sizeof(*v));
    if (!v)
        return oom(err);
    size_t count = 0;
    int r = 0;
    while (count < (size_t)limit && (r = next(st, c, err)) == 1) {
        if (route_read(st, c, &v[count], err) < 0) {
            sl_routes_free(v, count);
            return -1;
        }
        count++;
    }
    if (r < 0) {
        sl_routes_free(v, count);
        return -1;
    }
    *out = v;
    *n = count;
    return 0;
}

static int sql_route_list(struct sl_store *s, const struct sl_route_filter *f,
                          struct sl_route **out, size_t *n, int64_t *total,
                          struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    *total = 0;
    _cleanup_free_ char *pattern = NULL;
    if ((f->search || f->id_prefix) && !(pattern = like_pattern(f->id_prefix, f->search)))
        return oom(err);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    route_filter_args(&a, f, pattern);
    if (scalar(st, c, ST_ROUTE_COUNT, &a, total, err) < 0)
        return -1;
    arg_int(&a, 5, f->limit);
    arg_int(&a, 6, f->offset);
    if (query(st, c, f->oldest_first ? ST_ROUTE_LIST_ASC : ST_ROUTE_LIST, &a, err) < 0)
        return -1;
    return read_routes(st, c, f->limit, out, n, err);
}

static int sql_route_reapable(struct sl_store *s, const struct sl_reap_query *q,
                              struct sl_route **out, size_t *n, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    const int64_t cut[] = {q->idle_before, q->releasing_before, q->running_before,
                           q->suspending_before, q->suspended_before};
    for (int i = 0; i < 5; i++)
        arg_ts(&a, i + 1, cut[i] > 0 ? cut[i] : 0, true);
    arg_int(&a, 6, q->limit);
    if (query(st, c, ST_ROUTE_REAPABLE, &a, err) < 0)
        return -1;
    return read_routes(st, c, q->limit, out, n, err);
}

/* Grow *v (of *cap elements of `size`) to hold one more; -1 out of memory. */
static int grow(void **v, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : first;
    void *nv = realloc(*v, ncap * size);
    if (!nv)
        return -1;
    *v = nv;
    *cap = ncap;
    return 0;
}

static int sql_route_status_counts(struct sl_store *s, struct sl_status_count **out, size_t *n,
                                   struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    if (query(st, c, ST_ROUTE_HISTOGRAM, &a, err) < 0)
        return -1;
    size_t cap = 0;
    struct sl_status_count *v = NULL;
    int r;
    while ((r = next(st, c, err)) == 1) {
        if (grow((void **)&v, &cap, *n, sizeof(*v), 8) < 0) {
            free(v);
            *n = 0;
            return oom(err);
        }
        struct reader rd = reader_of(st, c);
        read_word_trunc(&rd, 0, v[*n].status, sizeof(v[*n].status));
        v[*n].count = read_int64(&rd, 1, 0);
        (*n)++;
    }
    if (r < 0) {
        free(v);
        *n = 0;
        return -1;
    }
    *out = v;
    return 0;
}

static int sql_worker_list(struct sl_store *s, struct sl_worker_record **out, size_t *n,
                           struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    if (query(st, c, ST_WORKER_LIST, &a, err) < 0)
        return -1;
    size_t cap = 0;
    struct sl_worker_record *v = NULL;
    int r;
    while ((r = next(st, c, err)) == 1) {
        if (grow((void **)&v, &cap, *n, sizeof(*v), 8) < 0) {
            free(v);
            *n = 0;
            return oom(err);
        }
        struct sl_worker_record *w = &v[*n];
        memset(w, 0, sizeof(*w));
        struct reader rd = reader_of(st, c);
        read_word(&rd, 0, w->worker_id, sizeof(w->worker_id));
        read_word(&rd, 1, w->worker_epoch, sizeof(w->worker_epoch));
        read_word(&rd, 2, w->endpoint, sizeof(w->endpoint));
        read_word(&rd, 3, w->status, sizeof(w->status));
        w->capacity = read_int64(&rd, 4, 0);
        w->running_sessions = read_int64(&rd, 5, 0);
        read_word(&rd, 6, w->profile_hash, sizeof(w->profile_hash));
        w->heartbeat_at = read_ts(&rd, 7);
        w->started_at = read_ts(&rd, 8);
        w->updated_at = read_ts(&rd, 9);
        (*n)++;
    }
    if (r < 0) {
        free(v);
        *n = 0;
        return -1;
    }
    *out = v;
    return 0;
}

static int sql_route_uids_of_worker(struct sl_store *s, const char *worker_id, int64_t **uids,
                                    struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *uids = NULL;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, worker_id);
    if (query(st, c, ST_ROUTE_UIDS_OF_WORKER, &a, err) < 0)
        return -1;
    size_t n = 0, cap = 0;
    int64_t *v = NULL;
    int r;
    while ((r = next(st, c, err)) == 1) {
        if (grow((void **)&v, &cap, n, sizeof(*v), 64) < 0) {
            free(v);
            return oom(err);
        }
        v[n++] = st->drv->col_int(c, 0);
    }
    if (r < 0) {
        free(v);
        return -1;
    }
    *uids = v;
    return (int)n;
}

/* Lock the route row for the rest of the transaction without reading it
 * here. The lock is a statement nobody reads the result of, so on
 * PostgreSQL it travels with the next one (one round trip); SQLite's write
 * transaction already holds the whole database. */
static int lock_route_row(struct sql_store *st, struct sl_sql_conn *c, const char *sandbox_id,
                          struct sl_error *err)
{
    if (!*st->db->dialect->for_update)
        return 0;
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, sandbox_id);
    return run_at_commit(st, c, ST_ROUTE_LOCK, &a, err) < 0 ? sl_error_wrap(err, "lock route")
                                                           : 0;
}

/* Admission step 4.2 on the route's fence as admit_read found it: 0 when
 * the route is live at the request's generation, else the refusal's code. */
static const char *admit_fence(const struct sl_exec_record *rec, bool found, int64_t generation,
                               const char *status)
{
    if (!found)
        return SL_E_STALE_GENERATION;
    if (generation == rec->generation && status_in(status, dormant_statuses))
        return SL_E_SUSPENDED;
    if (generation != rec->generation || !status_in(status, live_statuses))
        return SL_E_STALE_GENERATION;
    return NULL;
}

/* Admission steps 4.1 to 4.4 from one read, with the route row locked:
 * SL_ADMIT_REPLAY with *existing filled when the exec_id is known (a replay
 * answers whatever the route's state now: step 4.1 comes before the
 * fence); else the fence, then the parallel limit, then scopes (0, or -1
 * refused). */
static int admit_read(struct sql_store *st, struct sl_sql_conn *c,
                      const struct sl_exec_record *rec, const char *want_scope,
                      int64_t max_parallel, struct sl_exec_record *existing,
                      struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, rec->sandbox_id);
    arg_text(&a, 2, rec->exec_id);
    arg_int(&a, 3, rec->generation);
    if (query(st, c, ST_EXEC_ADMIT_READ, &a, err) < 0)
        return -1;
    int64_t running = 0, generation = 0;
    char status[33] = "";
    bool conflict = false, replay = false, route = false;
    int r;
    while ((r = next(st, c, err)) == 1) {
        struct reader rd = reader_of(st, c);
        int64_t branch = read_int64(&rd, 15, 0);
        if (branch == 2) {
            route = true;
            generation = read_int64(&rd, 2, 0);
            read_word_trunc(&rd, 4, status, sizeof(status));
            if (reader_done(&rd, ROUTE_TABLE, err) < 0) {
                r = -1;
                break;
            }
        } else if (branch == 1) {
            if (exec_read(st, c, existing, err) < 0) {
                r = -1;
                break;
            }
            replay = true;
        } else {
            running++;
            if (!conflict)
                conflict = scope_conflicts(want_scope, col(&rd, 6, NULL), col(&rd, 5, NULL));
        }
    }
    if (r < 0) {
        if (replay)
            sl_exec_record_clear(existing);
        return -1;
    }
    if (replay)
        return SL_ADMIT_REPLAY;
    const char *refused = admit_fence(rec, route, generation, status);
    if (refused)
        return refuse(err, refused);
    if (running >= max_parallel)
        return refuse(err, SL_E_PARALLEL_EXEC_LIMIT);
    if (conflict)
        return refuse(err, SL_E_EXEC_SCOPE_BUSY);
    return 0;
}

static int admit_insert(struct sql_store *st, struct sl_sql_conn *c,
                        const struct sl_exec_record *rec, const char *scope, int64_t now,
                        struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, rec->sandbox_id);
    arg_text(&a, 2, rec->exec_id);
    arg_int(&a, 3, rec->generation);
    arg_text(&a, 4, rec->worker_id);
    arg_text(&a, 5, rec->command_json);
    arg_text(&a, 6, scope);
    arg_ts(&a, 7, now, false);
    return run_at_commit(st, c, ST_EXEC_INSERT, &a, err) < 0
               ? sl_error_wrap(err, "insert execution")
               : 0;
}

static int admit_mark_route(struct sql_store *st, struct sl_sql_conn *c,
                            const struct sl_exec_record *rec, int64_t now, struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, rec->sandbox_id);
    arg_int(&a, 2, rec->generation);
    arg_text(&a, 3, rec->exec_id);
    arg_ts(&a, 4, now, false);
    /* Its WHERE is the spec's re-check of generation and status; the route
     * row has been locked since admit_check_route found both live, so it
     * cannot miss, and the changed count is not read (the write goes with
     * the COMMIT where the driver can). */
    return run_at_commit(st, c, ST_ROUTE_ADMIT, &a, err) < 0 ? sl_error_wrap(err, "update route")
                                                             : 0;
}

static int admit_locked(struct sql_store *st, struct sl_sql_conn *c,
                        const struct sl_exec_record *rec, int64_t max_parallel,
                        struct sl_exec_record *existing, struct sl_error *err)
{
    /* The route first: its row lock orders this admission against every
     * other write to the sandbox, replays included. */
    if (lock_route_row(st, c, rec->sandbox_id, err) < 0)
        return -1;
    /* An empty scope is no scope: the column's NULL means unscoped. */
    const char *scope = rec->exec_scope && *rec->exec_scope ? rec->exec_scope : NULL;
    int found = admit_read(st, c, rec, scope, max_parallel, existing, err);
    if (found != 0)
        return found;
    int64_t now = rec->created_at ? rec->created_at : sl_now_us();
    if (admit_insert(st, c, rec, scope, now, err) < 0 || admit_mark_route(st, c, rec, now, err) < 0)
        return -1;
    return SL_ADMIT_ADMITTED;
}

static int sql_exec_admit(struct sl_store *s, const struct sl_exec_record *rec,
                          int64_t max_parallel, struct sl_exec_record *existing,
                          struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    struct sl_exec_record scratch = {0};
    if (!existing)
        existing = &scratch;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c || tx_begin(st, c, err) < 0)
        return -1;
    int outcome = admit_locked(st, c, rec, max_parallel, existing, err);
    int rc = tx_end(st, c, outcome, err);
    /* *existing is ours to fill only on a replay; an admitted call leaves
     * the caller's struct untouched. */
    if (outcome == SL_ADMIT_REPLAY && (rc != SL_ADMIT_REPLAY || existing == &scratch))
        sl_exec_record_clear(existing);
    return rc;
}

static int finish_record(struct sql_store *st, struct sl_sql_conn *c,
                         const struct sl_exec_record *rec, int64_t now, struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, rec->sandbox_id);
    arg_text(&a, 2, rec->exec_id);
    arg_text(&a, 3, rec->status);
    if (rec->has_exit_code)
        arg_int(&a, 4, rec->exit_code);
    else
        arg_text(&a, 4, NULL);
    if (arg_output(&a, 5, 0, rec->stdout_text, rec->stdout_len) < 0 ||
        arg_output(&a, 6, 1, rec->stderr_text, rec->stderr_len) < 0) {
        args_free(&a);
        return oom(err);
    }
    arg_bool(&a, 7, rec->truncated);
    arg_ts(&a, 8, rec->finished_at ? rec->finished_at : now, false);
    arg_reason(&a, 9, rec->termination_reason);
    int r = run_at_commit(st, c, ST_EXEC_FINISH, &a, err);
    args_free(&a);
    return r < 0 ? sl_error_wrap(err, "finish execution") : 0;
}

/* API.md §4.1 step 6: the route's active_exec_id becomes the earliest
 * running execution left, and a RUNNING route with none becomes READY. The
 * WHERE on generation is the "route moved on => nothing written" rule. */
static int route_after_exec_locked(struct sql_store *st, struct sl_sql_conn *c,
                                   const struct sl_exec_record *rec, int64_t now,
                                   struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, rec->sandbox_id);
    arg_int(&a, 2, rec->generation);
    arg_ts(&a, 3, now, false);
    return run_at_commit(st, c, ST_ROUTE_FINISH, &a, err) < 0 ? sl_error_wrap(err, "update route")
                                                              : 0;
}

static int finish_locked(struct sql_store *st, struct sl_sql_conn *c,
                         const struct sl_exec_record *rec, int64_t now, struct sl_error *err)
{
    if (lock_route_row(st, c, rec->sandbox_id, err) < 0 || finish_record(st, c, rec, now, err) < 0)
        return -1;
    return route_after_exec_locked(st, c, rec, now, err);
}

static int sql_exec_finish(struct sl_store *s, const struct sl_exec_record *rec, int64_t now,
                           struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c || tx_begin(st, c, err) < 0)
        return -1;
    return tx_end(st, c, finish_locked(st, c, rec, now, err), err);
}

static int withdraw_locked(struct sql_store *st, struct sl_sql_conn *c,
                           const struct sl_exec_record *rec, int64_t now, struct sl_error *err)
{
    if (lock_route_row(st, c, rec->sandbox_id, err) < 0)
        return -1;
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, rec->sandbox_id);
    arg_text(&a, 2, rec->exec_id);
    arg_int(&a, 3, rec->generation);
    int64_t removed = run(st, c, ST_EXEC_WITHDRAW, &a, err);
    if (removed < 0 || route_after_exec_locked(st, c, rec, now, err) < 0)
        return -1;
    return removed > 0;
}

static int sql_exec_withdraw(struct sl_store *s, const struct sl_exec_record *rec, int64_t now,
                             struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c || tx_begin(st, c, err) < 0)
        return -1;
    int r = withdraw_locked(st, c, rec, now, err);
    return tx_end(st, c, r < 0 ? -1 : 0, err) < 0 ? -1 : r;
}

static int sql_route_history_cas(struct sl_store *s, const char *sandbox_id, const char *expect,
                                 const char *history, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    arg_text(&a, 2, expect);
    arg_text(&a, 3, history);
    int64_t r = run(st, c, ST_ROUTE_HISTORY_CAS, &a, err);
    return r < 0 ? -1 : r > 0;
}

/* One batch of the prune, in one transaction: pick the keys, delete each. */
static int prune_locked(struct sql_store *st, struct sl_sql_conn *c, int64_t older_than,
                        int64_t batch, struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_ts(&a, 1, older_than, false);
    arg_int(&a, 2, batch);
    if (query(st, c, ST_EXEC_PRUNE_PICK, &a, err) < 0)
        return -1;
    struct sl_strlist keys = {0}; /* sandbox_id, exec_id, sandbox_id, ... */
    int r;
    while ((r = next(st, c, err)) == 1) {
        struct reader rd = reader_of(st, c);
        const char *sid = col(&rd, 0, NULL), *eid = col(&rd, 1, NULL);
        if (!sid || !eid)
            continue;
        if (sl_strlist_push(&keys, sid) < 0 || sl_strlist_push(&keys, eid) < 0) {
            sl_strlist_free(&keys);
            return oom(err);
        }
    }
    int64_t deleted = 0;
    for (size_t i = 0; r == 0 && i + 1 < keys.len; i += 2) {
        args_init(&a, &st->pub);
        arg_text(&a, 1, keys.items[i]);
        arg_text(&a, 2, keys.items[i + 1]);
        int64_t n = run(st, c, ST_EXEC_DELETE, &a, err);
        if (n < 0)
            r = -1;
        else
            deleted += n;
    }
    sl_strlist_free(&keys);
    return r < 0 ? -1 : (int)deleted;
}

static int sql_exec_prune(struct sl_store *s, int64_t older_than, int64_t batch,
                          struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c || tx_begin(st, c, err) < 0)
        return -1;
    return tx_end(st, c, prune_locked(st, c, older_than, batch, err), err);
}

static int sql_exec_output_bytes(struct sl_store *s, const char *sandbox_id, int64_t *bytes,
                                 struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    return scalar(st, c, ST_EXEC_OUTPUT_BYTES, &a, bytes, err);
}

static int drop_output_locked(struct sql_store *st, struct sl_sql_conn *c,
                              const char *sandbox_id, const char *keep_exec_id, int64_t need,
                              int64_t *freed, struct sl_error *err)
{
    while (*freed < need) {
        struct sl_strlist ids = {0};
        int64_t sizes[64];
        struct args a;
        args_init(&a, &st->pub);
        arg_text(&a, 1, sandbox_id);
        arg_text(&a, 2, keep_exec_id);
        if (query(st, c, ST_EXEC_OUTPUT_OLDEST, &a, err) < 0)
            return -1;
        int r;
        while (ids.len < 64 && (r = next(st, c, err)) > 0) {
            struct reader rd = reader_of(st, c);
            const char *id = col(&rd, 0, NULL);
            if (!id)
                continue;
            sizes[ids.len] = read_int64(&rd, 1, 0);
            if (sl_strlist_push(&ids, id) < 0) {
                sl_strlist_free(&ids);
                return oom(err);
            }
        }
        if (r < 0) {
            sl_strlist_free(&ids);
            return -1;
        }
        if (ids.len == 0)
            return 0; /* nothing older left to drop */
        for (size_t i = 0; i < ids.len && *freed < need; i++) {
            args_init(&a, &st->pub);
            arg_text(&a, 1, sandbox_id);
            arg_text(&a, 2, ids.items[i]);
            if (run(st, c, ST_EXEC_OUTPUT_CLEAR, &a, err) < 0) {
                sl_strlist_free(&ids);
                return -1;
            }
            *freed += sizes[i];
        }
        sl_strlist_free(&ids);
    }
    return 0;
}

static int sql_exec_output_drop(struct sl_store *s, const char *sandbox_id,
                                const char *keep_exec_id, int64_t need, int64_t *freed,
                                struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *freed = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c || tx_begin(st, c, err) < 0)
        return -1;
    return tx_end(st, c,
                  drop_output_locked(st, c, sandbox_id, keep_exec_id, need, freed, err), err);
}

static int sql_exec_mark_running(struct sl_store *s, const char *sandbox_id, int64_t generation,
                                 const char *status, const char *reason, int64_t now,
                                 struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    arg_int(&a, 2, generation);
    arg_text(&a, 3, status);
    arg_ts(&a, 4, now, false);
    arg_reason(&a, 5, reason);
    return (int)run(st, c, ST_EXEC_MARK, &a, err);
}

static int sql_exec_mark_worker_running(struct sl_store *s, const char *worker_id,
                                        const char *status, const char *reason, int64_t now,
                                        struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, worker_id);
    arg_text(&a, 2, status);
    arg_ts(&a, 3, now, false);
    arg_reason(&a, 4, reason);
    return (int)run(st, c, ST_EXEC_MARK_WORKER, &a, err);
}

/* ---- workers ---- */

/* The rows written, SL_SQL_CONFLICT (the insert lost to another replica's),
 * or -1. */
static int64_t worker_write(struct sql_store *st, struct sl_sql_conn *c, enum stmt_id id,
                            const struct sl_worker_row *w, struct sl_error *err)
{
    struct args a;
    args_init(&a, &st->pub);
    arg_text(&a, 1, w->worker_id);
    arg_text(&a, 2, w->worker_epoch);
    arg_text(&a, 3, w->endpoint);
    arg_text(&a, 4, w->status);
    arg_int(&a, 5, w->capacity);
    arg_int(&a, 6, w->running_sessions);
    arg_text(&a, 7, w->profile_hash);
    arg_ts(&a, 8, w->now, false);
    int rc = query(st, c, id, &a, err);
    if (rc < 0)
        return rc == SL_SQL_CONFLICT && id == ST_WORKER_INSERT
                   ? SL_SQL_CONFLICT
                   : sl_error_wrap(err, id == ST_WORKER_INSERT ? "insert worker" : "update worker");
    return st->drv->changes(c);
}

/* FLEET.md §2.1: UPDATE; no row, INSERT; an insert conflict is retried as
 * an UPDATE. The same three statements on every database (an upsert of
 * the dialect would save one round trip on the first heartbeat only). */
static int sql_worker_upsert(struct sl_store *s, const struct sl_worker_row *w,
                             struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    int64_t r = worker_write(st, c, ST_WORKER_UPDATE, w, err);
    if (r != 0)
        return r < 0 ? -1 : 0;
    r = worker_write(st, c, ST_WORKER_INSERT, w, err);
    if (r == SL_SQL_CONFLICT) {
        sl_error_clear(err);
        r = worker_write(st, c, ST_WORKER_UPDATE, w, err);
    }
    return r < 0 ? -1 : 0;
}

/* ---- tenants and their API keys (ours) ---- */

static int tenant_read(struct sql_store *st, struct sl_sql_conn *c, struct sl_tenant *out,
                       struct sl_error *err)
{
    struct reader rd = reader_of(st, c);
    memset(out, 0, sizeof(*out));
    read_word(&rd, 0, out->tenant_id, sizeof(out->tenant_id));
    out->quotas_json = read_str(&rd, 1, true);
    out->created_by = read_str(&rd, 2, true);
    out->created_at = read_ts(&rd, 3);
    out->updated_at = read_ts(&rd, 4);
    if (reader_done(&rd, TENANT_TABLE, err) < 0) {
        sl_tenant_clear(out);
        return -1;
    }
    return 0;
}

static int sql_tenant_insert(struct sl_store *s, const struct sl_tenant *t, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, t->tenant_id);
    arg_text(&a, 2, t->quotas_json);
    arg_text(&a, 3, t->created_by);
    arg_ts(&a, 4, t->created_at, false);
    int rc = query(st, c, ST_TENANT_INSERT, &a, err);
    if (rc == SL_SQL_CONFLICT) {
        sl_error_clear(err);
        return 0;
    }
    return rc < 0 ? sl_error_wrap(err, "insert tenant") : 1;
}

static int sql_tenant_get(struct sl_store *s, const char *tenant_id, struct sl_tenant *out,
                          struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    memset(out, 0, sizeof(*out));
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, tenant_id);
    if (query(st, c, ST_TENANT_GET, &a, err) < 0)
        return -1;
    int r = next(st, c, err);
    if (r <= 0)
        return r;
    return tenant_read(st, c, out, err) < 0 ? -1 : 1;
}

static int sql_tenant_list(struct sl_store *s, struct sl_tenant **out, size_t *n,
                           struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    if (query(st, c, ST_TENANT_LIST, &a, err) < 0)
        return -1;
    size_t cap = 0;
    struct sl_tenant *v = NULL;
    int r;
    while ((r = next(st, c, err)) == 1) {
        if (grow((void **)&v, &cap, *n, sizeof(*v), 8) < 0) {
            r = oom(err);
            break;
        }
        if ((r = tenant_read(st, c, &v[*n], err)) < 0)
            break;
        (*n)++;
    }
    if (r < 0) {
        sl_tenants_free(v, *n);
        *n = 0;
        return -1;
    }
    *out = v;
    return 0;
}

static int sql_tenant_set_quotas(struct sl_store *s, const char *tenant_id,
                                 const char *quotas_json, int64_t now, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, tenant_id);
    arg_text(&a, 2, quotas_json);
    arg_ts(&a, 3, now, false);
    int64_t changed = run(st, c, ST_TENANT_SET_QUOTAS, &a, err);
    return changed < 0 ? sl_error_wrap(err, "update tenant") : changed > 0 ? 1 : 0;
}

static int sql_egress_get(struct sl_store *s, const char *scope_key, char **json,
                          struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *json = NULL;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, scope_key);
    if (query(st, c, ST_EGRESS_GET, &a, err) < 0)
        return sl_error_wrap(err, "read egress policy");
    int r = next(st, c, err);
    if (r <= 0)
        return r;
    struct reader rd = reader_of(st, c);
    *json = read_str(&rd, 0, false);
    if (reader_done(&rd, EGRESS_TABLE, err) < 0) {
        free(*json);
        *json = NULL;
        return -1;
    }
    return 1;
}

/* Update, else insert; an insert that lost to another's insert updates. */
static int sql_egress_put(struct sl_store *s, const char *scope_key, const char *json,
                          const char *updated_by, int64_t now, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        struct args a;
        args_init(&a, s);
        arg_text(&a, 1, scope_key);
        arg_text(&a, 2, json);
        arg_text(&a, 3, updated_by);
        arg_ts(&a, 4, now, false);
        int64_t changed = run(st, c, ST_EGRESS_UPDATE, &a, err);
        if (changed < 0)
            return sl_error_wrap(err, "update egress policy");
        if (changed > 0)
            return 0;
        args_init(&a, s);
        arg_text(&a, 1, scope_key);
        arg_text(&a, 2, json);
        arg_text(&a, 3, updated_by);
        arg_ts(&a, 4, now, false);
        int rc = query(st, c, ST_EGRESS_INSERT, &a, err);
        if (rc == SL_SQL_CONFLICT) {
            sl_error_clear(err);
            continue;
        }
        return rc < 0 ? sl_error_wrap(err, "insert egress policy") : 0;
    }
    return sl_error_set(err, SL_E_STORE, 0, "egress policy %s: written by another meanwhile",
                        scope_key);
}

static int sql_egress_delete(struct sl_store *s, const char *scope_key, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, scope_key);
    int64_t changed = run(st, c, ST_EGRESS_DELETE, &a, err);
    return changed < 0 ? sl_error_wrap(err, "delete egress policy") : changed > 0 ? 1 : 0;
}

/* ---- E2B sandboxes (ours, e2b/) ---- */

static int e2b_read(struct sql_store *st, struct sl_sql_conn *c, struct sl_e2b_sandbox *out,
                    struct sl_error *err)
{
    struct reader rd = reader_of(st, c);
    memset(out, 0, sizeof(*out));
    read_word(&rd, 0, out->sandbox_id, sizeof(out->sandbox_id));
    read_word_trunc(&rd, 1, out->template_id, sizeof(out->template_id));
    out->metadata_json = read_str(&rd, 2, true);
    out->env_json = read_str(&rd, 3, true);
    read_word_trunc(&rd, 4, out->on_timeout, sizeof(out->on_timeout));
    out->started_at = read_ts(&rd, 5);
    out->end_at = read_ts(&rd, 6);
    out->updated_at = read_ts(&rd, 7);
    read_word(&rd, 8, out->status, sizeof(out->status));
    out->generation = read_int64(&rd, 9, 0);
    read_word_trunc(&rd, 10, out->worker_id, sizeof(out->worker_id));
    if (reader_done(&rd, E2B_TABLE, err) < 0) {
        sl_e2b_sandbox_clear(out);
        return -1;
    }
    return 0;
}

static int e2b_read_all(struct sql_store *st, struct sl_sql_conn *c, struct sl_e2b_sandbox **out,
                        size_t *n, struct sl_error *err)
{
    size_t cap = 0;
    struct sl_e2b_sandbox *v = NULL;
    int r;
    while ((r = next(st, c, err)) == 1) {
        if (grow((void **)&v, &cap, *n, sizeof(*v), 16) < 0) {
            r = oom(err);
            break;
        }
        if ((r = e2b_read(st, c, &v[*n], err)) < 0)
            break;
        (*n)++;
    }
    if (r < 0) {
        sl_e2b_sandboxes_free(v, *n);
        *n = 0;
        return -1;
    }
    *out = v;
    return 0;
}

static int sql_e2b_insert(struct sl_store *s, const struct sl_e2b_sandbox *e,
                          struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, e->sandbox_id);
    arg_text(&a, 2, e->template_id);
    arg_text(&a, 3, e->metadata_json);
    arg_text(&a, 4, e->env_json);
    arg_text(&a, 5, e->on_timeout);
    arg_ts(&a, 6, e->started_at, false);
    arg_ts(&a, 7, e->end_at, false);
    int rc = query(st, c, ST_E2B_INSERT, &a, err);
    if (rc == SL_SQL_CONFLICT) {
        sl_error_clear(err);
        return 0;
    }
    return rc < 0 ? sl_error_wrap(err, "insert e2b sandbox") : 1;
}

static int sql_e2b_get(struct sl_store *s, const char *sandbox_id, struct sl_e2b_sandbox *out,
                       struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    memset(out, 0, sizeof(*out));
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    if (query(st, c, ST_E2B_GET, &a, err) < 0)
        return sl_error_wrap(err, "read e2b sandbox");
    int r = next(st, c, err);
    if (r <= 0)
        return r;
    return e2b_read(st, c, out, err) < 0 ? -1 : 1;
}

static int sql_e2b_set_end(struct sl_store *s, const char *sandbox_id, int64_t end_at,
                           const char *on_timeout, int64_t now, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, sandbox_id);
    arg_ts(&a, 2, end_at, false);
    arg_text(&a, 3, on_timeout);
    arg_ts(&a, 4, now, false);
    int64_t changed = run(st, c, ST_E2B_SET_END, &a, err);
    return changed < 0 ? sl_error_wrap(err, "update e2b sandbox") : changed > 0 ? 1 : 0;
}

static int sql_e2b_list(struct sl_store *s, const char *id_prefix, const char *after,
                        int64_t limit, struct sl_e2b_sandbox **out, size_t *n,
                        struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_free_ char *pattern = like_pattern(id_prefix, NULL);
    if (!pattern)
        return oom(err);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, pattern);
    arg_text(&a, 2, after ? after : "");
    arg_int(&a, 3, limit);
    if (query(st, c, ST_E2B_LIST, &a, err) < 0)
        return sl_error_wrap(err, "list e2b sandboxes");
    return e2b_read_all(st, c, out, n, err);
}

static int sql_e2b_due(struct sl_store *s, const char *worker_id, int64_t now, int64_t limit,
                       struct sl_e2b_sandbox **out, size_t *n, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, worker_id);
    arg_ts(&a, 2, now, false);
    arg_int(&a, 3, limit);
    if (query(st, c, ST_E2B_DUE, &a, err) < 0)
        return sl_error_wrap(err, "read due e2b sandboxes");
    return e2b_read_all(st, c, out, n, err);
}

static int key_read(struct sql_store *st, struct sl_sql_conn *c, struct sl_api_key *out,
                    struct sl_error *err)
{
    struct reader rd = reader_of(st, c);
    memset(out, 0, sizeof(*out));
    read_word(&rd, 0, out->key_id, sizeof(out->key_id));
    read_word(&rd, 1, out->tenant_id, sizeof(out->tenant_id));
    read_word(&rd, 2, out->name, sizeof(out->name));
    read_word(&rd, 3, out->secret_sha256, sizeof(out->secret_sha256));
    out->created_by = read_str(&rd, 4, true);
    out->created_at = read_ts(&rd, 5);
    out->expires_at = read_ts(&rd, 6);
    out->revoked_at = read_ts(&rd, 7);
    if (reader_done(&rd, KEY_TABLE, err) < 0) {
        sl_api_key_clear(out);
        return -1;
    }
    return 0;
}

static int sql_api_key_insert(struct sl_store *s, const struct sl_api_key *k,
                              struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, k->key_id);
    arg_text(&a, 2, k->tenant_id);
    arg_text(&a, 3, k->name);
    arg_text(&a, 4, k->secret_sha256);
    arg_text(&a, 5, k->created_by);
    arg_ts(&a, 6, k->created_at, false);
    arg_ts(&a, 7, k->expires_at, true);
    int rc = query(st, c, ST_KEY_INSERT, &a, err);
    if (rc == SL_SQL_CONFLICT) {
        sl_error_clear(err);
        return 0;
    }
    return rc < 0 ? sl_error_wrap(err, "insert api key") : 1;
}

static int sql_api_key_get(struct sl_store *s, const char *key_id, struct sl_api_key *out,
                           struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    memset(out, 0, sizeof(*out));
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, key_id);
    if (query(st, c, ST_KEY_GET, &a, err) < 0)
        return -1;
    int r = next(st, c, err);
    if (r <= 0)
        return r;
    return key_read(st, c, out, err) < 0 ? -1 : 1;
}

static int sql_api_key_list(struct sl_store *s, const char *tenant_id, struct sl_api_key **out,
                            size_t *n, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *out = NULL;
    *n = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, tenant_id);
    if (query(st, c, ST_KEY_LIST, &a, err) < 0)
        return -1;
    size_t cap = 0;
    struct sl_api_key *v = NULL;
    int r;
    while ((r = next(st, c, err)) == 1) {
        if (grow((void **)&v, &cap, *n, sizeof(*v), 8) < 0) {
            r = oom(err);
            break;
        }
        if ((r = key_read(st, c, &v[*n], err)) < 0)
            break;
        (*n)++;
    }
    if (r < 0) {
        sl_api_keys_free(v, *n);
        *n = 0;
        return -1;
    }
    *out = v;
    return 0;
}

static int sql_api_key_revoke(struct sl_store *s, const char *tenant_id, const char *key_id,
                              int64_t now, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, true, err);
    if (!c)
        return -1;
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, tenant_id);
    arg_text(&a, 2, key_id);
    arg_ts(&a, 3, now, false);
    int64_t changed = run(st, c, ST_KEY_REVOKE, &a, err);
    return changed < 0 ? sl_error_wrap(err, "revoke api key") : changed > 0 ? 1 : 0;
}

static int sql_tenant_usage(struct sl_store *s, const char *tenant_id, int64_t *sandboxes,
                            int64_t *running_sessions, int64_t *commands, struct sl_error *err)
{
    struct sql_store *st = store_of(s);
    *sandboxes = *running_sessions = *commands = 0;
    _cleanup_conn_ struct sl_sql_conn *c = conn_get(s, false, err);
    if (!c)
        return -1;
    char pattern[80];
    snprintf(pattern, sizeof(pattern), "%s~%%", tenant_id);
    struct args a;
    args_init(&a, s);
    arg_text(&a, 1, pattern);
    if (query(st, c, ST_TENANT_USAGE, &a, err) < 0)
        return -1;
    int r = next(st, c, err);
    if (r <= 0)
        return r < 0 ? -1 : 0;
    struct reader rd = reader_of(st, c);
    *sandboxes = read_int64(&rd, 0, 0);
    *running_sessions = read_int64(&rd, 1, 0);
    *commands = read_int64(&rd, 2, 0);
    return reader_done(&rd, ROUTE_TABLE, err) < 0 ? -1 : 0;
}

/* ---- the store ---- */

static bool sql_health(struct sl_store *s, char *why, size_t size)
{
    struct sql_store *st = store_of(s);
    return st->drv->health(st->db, why, size);
}

static void sql_close(struct sl_store *s)
{
    if (!s)
        return;
    struct sql_store *st = store_of(s);
    for (size_t i = 0; i < ST_COUNT; i++)
        free(st->text[i].sql);
    if (st->db)
        st->drv->close(st->db);
    free(st);
}

static const struct sl_store_ops sql_ops = {
    .prepare_schema = sql_prepare_schema,
    .route_get = sql_route_get,
    .route_insert = sql_route_insert,
    .route_take_warm = sql_route_take_warm,
    .route_cas = sql_route_cas,
    .route_touch = sql_route_touch,
    .exec_get = sql_exec_get,
    .exec_admit = sql_exec_admit,
    .exec_list = sql_exec_list,
    .route_uids_of_worker = sql_route_uids_of_worker,
    .route_list = sql_route_list,
    .route_status_counts = sql_route_status_counts,
    .route_reapable = sql_route_reapable,
    .worker_list = sql_worker_list,
    .tenant_insert = sql_tenant_insert,
    .tenant_get = sql_tenant_get,
    .tenant_list = sql_tenant_list,
    .tenant_set_quotas = sql_tenant_set_quotas,
    .egress_get = sql_egress_get,
    .egress_put = sql_egress_put,
    .egress_delete = sql_egress_delete,
    .e2b_insert = sql_e2b_insert,
    .e2b_get = sql_e2b_get,
    .e2b_set_end = sql_e2b_set_end,
    .e2b_list = sql_e2b_list,
    .e2b_due = sql_e2b_due,
    .api_key_insert = sql_api_key_insert,
    .api_key_get = sql_api_key_get,
    .api_key_list = sql_api_key_list,
    .api_key_revoke = sql_api_key_revoke,
    .tenant_usage = sql_tenant_usage,
    .exec_finish = sql_exec_finish,
    .exec_withdraw = sql_exec_withdraw,
    .exec_prune = sql_exec_prune,
    .route_history_cas = sql_route_history_cas,
    .exec_output_bytes = sql_exec_output_bytes,
    .exec_output_drop = sql_exec_output_drop,
    .exec_mark_running = sql_exec_mark_running,
    .exec_mark_worker_running = sql_exec_mark_worker_running,
    .worker_upsert = sql_worker_upsert,
    .health = sql_health,
    .close = sql_close,
};

struct sl_store *sl_sql_store_new(struct sl_sql_db *db, struct sl_error *err)
{
    struct sql_store *st = calloc(1, sizeof(*st));
    if (!st) {
        db->drv->close(db);
        oom(err);
        return NULL;
    }
    st->db = db;
    st->drv = db->drv;
    st->pub.ops = &sql_ops;
    st->pub.backend = db->backend;
    st->pub.database = db->database;
    for (size_t i = 0; i < ST_COUNT; i++) {
        if (sl_sql_render(stmt_sql[i], db->dialect, &st->text[i]) < 0) {
            sql_close(&st->pub);
            sl_error_set(err, SL_E_INTERNAL, 0, "internal error");
            snprintf(err->detail, sizeof(err->detail), "cannot render statement %zu", i);
            return NULL;
        }
    }
    return &st->pub;
}
