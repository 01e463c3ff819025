/* SQLite metadata store (spec/FLEET.md §2, CONFIG.md §2.5).
 *
 * Storage conventions follow what SQLAlchemy writes to SQLite, so a database
 * shared with the reference reads the same both ways:
 *   - timestamps are TEXT "YYYY-MM-DD HH:MM:SS.ffffff" (naive UTC, always six
 *     fraction digits, which also makes them sort chronologically as text);
 *     reading also accepts a 'T' separator and a missing fraction;
 *   - booleans are 0/1, JSON columns are TEXT.
 *
 * Concurrency: two connections, one for writes (and the reads inside write
 * transactions), one for reads (struct sqlite_store), each guarded by a
 * pthread mutex held for the whole of each method, and opened
 * SQLITE_OPEN_NOMUTEX. SQLITE_OPEN_FULLMUTEX alone
 * would not do: it serialises single API calls, but a transaction is many
 * calls (BEGIN, steps, COMMIT) and two threads sharing the connection would
 * interleave inside each other's transaction. SQLite admits one writer at a
 * time anyway, so the write mutex costs little, and in WAL mode a reader never
 * waits for the writer; other processes on the same file
 * are handled by busy_timeout and BEGIN IMMEDIATE (which takes the write lock
 * up front, so a read-then-write transaction never fails to upgrade).
 *
 * Every statement is prepared once (lazily, so a missing table fails the
 * method that needs it, not the open) and reset when the function using it
 * returns. SQL text is constant; inputs are always bound. */
#include "store/store.h"

#include <errno.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <limits.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "store/schema.h"

#define ROUTE_TABLE "agent_sandbox_route"
#define EXEC_TABLE "agent_sandbox_exec"
#define WORKER_TABLE "agent_sandbox_worker"

/* Column order of struct sl_route and of FLEET.md §2.2; route_bind() and
 * route_read() use the same numbering (?1..?25, columns 0..24). */
#define ROUTE_COLUMNS                                                                    \
    "sandbox_id, workspace_scope_id, worker_id, worker_epoch, generation, sandbox_uid, " \
    "profile_id, profile_hash, status, storage_mode, active_exec_id, last_active_at, "   \
    "generation_started_at, generation_created_by, ready_at, last_released_generation, " \
    "last_released_at, last_release_reason, last_released_by, last_lifetime_ms, "        \
    "lifecycle_count, total_lifetime_ms, lifecycle_history_json, created_at, updated_at"

/* FLEET.md §2.3 order, then our additive termination_reason (column 14). */
#define EXEC_COLUMNS                                                                         \
    "sandbox_id, exec_id, generation, worker_id, status, command_json, exec_scope, exit_code, " \
    "stdout_text, stderr_text, truncated, started_at, finished_at, created_at, "               \
    "termination_reason"

/* route_cas() binds up to this many expected statuses (there are 7 route
 * statuses); unused slots are bound NULL, which never matches in IN (...). */
#define CAS_MAX_STATUSES 7

enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_TABLE_INFO,
    ST_ROUTE_GET,
    ST_ROUTE_EXISTS,
    ST_ROUTE_INSERT,
    ST_ROUTE_CAS,
    ST_ROUTE_TOUCH,
    ST_ROUTE_FENCE,
    ST_ROUTE_ADMIT,
    ST_ROUTE_FINISH,
    ST_EXEC_GET,
    ST_EXEC_RUNNING,
    ST_EXEC_INSERT,
    ST_EXEC_FINISH,
    ST_EXEC_EARLIEST,
    ST_EXEC_MARK,
    ST_EXEC_MARK_WORKER,
    ST_EXEC_WITHDRAW,
    ST_EXEC_PRUNE,
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
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_TABLE_INFO] = "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
    [ST_ROUTE_GET] = "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE " WHERE sandbox_id = ?1",
    [ST_ROUTE_EXISTS] = "SELECT 1 FROM " ROUTE_TABLE " WHERE sandbox_id = ?1",
    [ST_ROUTE_INSERT] = "INSERT INTO " ROUTE_TABLE " (" ROUTE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, "
                        "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
                        "?20, ?21, ?22, ?23, ?24, ?25)",
    /* sandbox_uid (?6) and created_at (?24) are bound but never written: the
     * uid is permanent for the life of the id and created_at is the row's
     * birth (FLEET.md §2.2). */
    [ST_ROUTE_TOUCH] = "UPDATE " ROUTE_TABLE " SET last_active_at = ?3, updated_at = ?3 "
                       "WHERE sandbox_id = ?1 AND generation = ?2 "
                       "AND status IN ('ASSIGNED', 'READY', 'RUNNING')",
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
    [ST_ROUTE_FENCE] = "SELECT generation, status FROM " ROUTE_TABLE " WHERE sandbox_id = ?1",
    [ST_ROUTE_ADMIT] = "UPDATE " ROUTE_TABLE " SET status = 'RUNNING', "
                       "active_exec_id = COALESCE(active_exec_id, ?3), last_active_at = ?4, "
                       "updated_at = ?4 WHERE sandbox_id = ?1 AND generation = ?2 "
                       "AND status IN ('ASSIGNED', 'READY', 'RUNNING')",
    /* Only a RUNNING route changes status: a route a release or suspend has
     * claimed meanwhile must not be resurrected. A dormant route's
     * last_active_at is its retention clock (FLEET.md §7.1) and stays. */
    [ST_ROUTE_FINISH] = "UPDATE " ROUTE_TABLE " SET active_exec_id = ?3, "
                        "status = CASE WHEN status = 'RUNNING' THEN ?4 ELSE status END, "
                        "last_active_at = CASE WHEN status IN ('SUSPENDING', 'SUSPENDED') "
                        "THEN last_active_at ELSE ?5 END, updated_at = ?5 "
                        "WHERE sandbox_id = ?1 AND generation = ?2",
    /* The admin list: output columns read as NULL (the list has none). */
    [ST_EXEC_LIST] = "SELECT sandbox_id, exec_id, generation, worker_id, status, command_json, "
                     "exec_scope, exit_code, NULL, NULL, truncated, started_at, finished_at, "
                     "created_at, termination_reason FROM " EXEC_TABLE
                     " WHERE (?1 IS NULL OR sandbox_id = ?1) AND (?2 IS NULL OR status = ?2) "
                     "AND (?5 IS NULL OR (?5 = '' AND termination_reason IS NULL) "
                     "OR termination_reason = ?5) "
                     "ORDER BY created_at DESC, sandbox_id, exec_id LIMIT ?3 OFFSET ?4",
    /* ?4 is the search pattern, already escaped for LIKE ... ESCAPE '\\'. */
    [ST_ROUTE_LIST] = "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE
                      " WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workspace_scope_id = ?2)"
                      " AND (?3 IS NULL OR worker_id = ?3)"
                      " AND (?4 IS NULL OR sandbox_id LIKE ?4 ESCAPE '\\')"
                      " ORDER BY last_active_at DESC, sandbox_id LIMIT ?5 OFFSET ?6",
    [ST_ROUTE_LIST_ASC] = "SELECT " ROUTE_COLUMNS " FROM " ROUTE_TABLE
                          " WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workspace_scope_id = ?2)"
                          " AND (?3 IS NULL OR worker_id = ?3)"
                          " AND (?4 IS NULL OR sandbox_id LIKE ?4 ESCAPE '\\')"
                          " ORDER BY last_active_at ASC, sandbox_id LIMIT ?5 OFFSET ?6",
    [ST_ROUTE_COUNT] = "SELECT COUNT(*) FROM " ROUTE_TABLE
                       " WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workspace_scope_id = ?2)"
                       " AND (?3 IS NULL OR worker_id = ?3)"
                       " AND (?4 IS NULL OR sandbox_id LIKE ?4 ESCAPE '\\')",
    /* Timestamps are stored as text of one fixed format: comparing them as
     * strings compares the times. A 0 cut-off binds NULL: no match. */
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
                      " WHERE (?1 IS NULL OR sandbox_id = ?1) AND (?2 IS NULL OR status = ?2)"
                      " AND (?3 IS NULL OR (?3 = '' AND termination_reason IS NULL)"
                      " OR termination_reason = ?3)",
    [ST_EXEC_GET] = "SELECT " EXEC_COLUMNS " FROM " EXEC_TABLE
                    " WHERE sandbox_id = ?1 AND exec_id = ?2",
    [ST_EXEC_RUNNING] = "SELECT exec_scope, command_json FROM " EXEC_TABLE
                        " WHERE sandbox_id = ?1 AND generation = ?2 AND status = 'RUNNING'",
    [ST_EXEC_INSERT] = "INSERT INTO " EXEC_TABLE " (" EXEC_COLUMNS ") VALUES (?1, ?2, ?3, ?4, "
                       "'RUNNING', ?5, ?6, NULL, NULL, NULL, 0, ?7, NULL, ?7, NULL)",
    [ST_EXEC_FINISH] = "UPDATE " EXEC_TABLE " SET status = ?3, exit_code = ?4, stdout_text = ?5, "
                       "stderr_text = ?6, truncated = ?7, finished_at = ?8, "
                       "termination_reason = ?9 "
                       /* Only a running record finishes: one already marked
                        * WORKER_LOST by a reassignment keeps that verdict. */
                       "WHERE sandbox_id = ?1 AND exec_id = ?2 AND status = 'RUNNING'",
    [ST_EXEC_EARLIEST] = "SELECT exec_id FROM " EXEC_TABLE " WHERE sandbox_id = ?1 "
                         "AND generation = ?2 AND status = 'RUNNING' "
                         "ORDER BY started_at IS NULL, started_at, created_at, exec_id LIMIT 1",
    [ST_EXEC_MARK] = "UPDATE " EXEC_TABLE " SET status = ?3, finished_at = ?4, "
                     "termination_reason = ?5 "
                     "WHERE sandbox_id = ?1 AND generation = ?2 AND status = 'RUNNING'",
    [ST_EXEC_MARK_WORKER] = "UPDATE " EXEC_TABLE " SET status = ?2, finished_at = ?3, "
                            "termination_reason = ?4 "
                            "WHERE worker_id = ?1 AND status = 'RUNNING'",
    [ST_EXEC_WITHDRAW] = "DELETE FROM " EXEC_TABLE " WHERE sandbox_id = ?1 AND exec_id = ?2 "
                         "AND generation = ?3 AND status = 'RUNNING'",
    /* Timestamps are text of one fixed format: they compare as strings. */
    [ST_EXEC_PRUNE] = "DELETE FROM " EXEC_TABLE " WHERE rowid IN (SELECT rowid FROM " EXEC_TABLE
                      " WHERE status <> 'RUNNING' AND COALESCE(finished_at, started_at) < ?1"
                      " ORDER BY started_at LIMIT ?2)",
    /* Byte lengths: length() of a BLOB is its size, of TEXT its characters. */
    [ST_EXEC_OUTPUT_BYTES] = "SELECT COALESCE(SUM(length(CAST(stdout_text AS BLOB)) + "
                             "length(CAST(stderr_text AS BLOB))), 0) FROM " EXEC_TABLE
                             " WHERE sandbox_id = ?1 AND status <> 'RUNNING'",
    [ST_EXEC_OUTPUT_OLDEST] = "SELECT rowid, length(CAST(stdout_text AS BLOB)) + "
                              "length(CAST(stderr_text AS BLOB)) FROM " EXEC_TABLE
                              " WHERE sandbox_id = ?1 AND status <> 'RUNNING' AND exec_id <> ?2"
                              " AND (stdout_text <> '' OR stderr_text <> '')"
                              " ORDER BY started_at, created_at LIMIT 64",
    [ST_EXEC_OUTPUT_CLEAR] = "UPDATE " EXEC_TABLE " SET stdout_text = '', stderr_text = '', "
                             "truncated = 1 WHERE rowid = ?1",
    /* Only the history, and only if it is still what was read (IS: NULL
     * compares equal to NULL); updated_at and the rest stay. */
    [ST_ROUTE_HISTORY_CAS] = "UPDATE " ROUTE_TABLE " SET lifecycle_history_json = ?3"
                             " WHERE sandbox_id = ?1 AND lifecycle_history_json IS ?2",
    [ST_WORKER_UPDATE] = "UPDATE " WORKER_TABLE " SET worker_epoch = ?2, endpoint = ?3, "
                         "status = ?4, capacity = ?5, running_sessions = ?6, profile_hash = ?7, "
                         "heartbeat_at = ?8, updated_at = ?8 WHERE worker_id = ?1",
    [ST_WORKER_INSERT] = "INSERT INTO " WORKER_TABLE " (worker_id, worker_epoch, endpoint, "
                         "status, capacity, running_sessions, profile_hash, heartbeat_at, "
                         "started_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8)",
};

/* One connection and its prepared statements, used under its lock. */
struct sqlite_conn {
    pthread_mutex_t lock;
    sqlite3 *db;
    sqlite3_stmt *stmts[ST_COUNT];
    struct sqlite_store *owner;
};

/* Two connections: writes (and the reads inside write transactions) on
 * `w`; reads on `r`. In WAL mode a reader never waits for a writer, so a
 * write stuck on the database lock (another process holding it, a full
 * disk) no longer holds every read of the API behind the one mutex.
 * write_failing: the last write on `w` failed for a reason of the
 * database's own (busy, full, read-only, I/O); cleared by the next write
 * that succeeds. /healthz reports it. */
struct sqlite_store {
    struct sl_store pub; /* first: the public head, cast back in every method */
    struct sqlite_conn w, r;
    char *path;
    int busy_timeout_ms; /* PRAGMA busy_timeout of both connections */
    atomic_bool write_failing;
    pthread_mutex_t why_lock;
    char why[160];
};

static struct sqlite_store *store_of(struct sl_store *s) { return (struct sqlite_store *)s; }
static struct sqlite_conn *wconn(struct sl_store *s) { return &store_of(s)->w; }
/* An in-memory database has one connection: its reads share the writer's. */
static struct sqlite_conn *rconn(struct sl_store *s)
{
    struct sqlite_store *st = store_of(s);
    return st->r.db ? &st->r : &st->w;
}

/* ---- locking and statement lifetime ---- */

static pthread_mutex_t *store_lock(struct sqlite_conn *st)
{
    pthread_mutex_lock(&st->lock);
    return &st->lock;
}

static void unlockp(pthread_mutex_t **m)
{
    if (*m)
        pthread_mutex_unlock(*m);
}

static void stmt_resetp(sqlite3_stmt **stmt)
{
    if (*stmt) {
        sqlite3_reset(*stmt);
        sqlite3_clear_bindings(*stmt);
    }
}

/* Declare the lock guard first in a method so it is released last, after
 * every statement of the method has been reset. `unused`: the guard is only
 * ever read by its cleanup, which clang does not count as a use. */
#define _cleanup_unlock_ __attribute__((cleanup(unlockp), unused))
#define _cleanup_reset_ __attribute__((cleanup(stmt_resetp)))

/* ---- errors ---- */

/* Failures that say the database cannot be written now, whatever the
 * request: another process holds its lock, its disk is full, it is
 * read-only, or its file cannot be read or written. */
static bool database_unwritable(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
        return true;
    default:
        return false;
    }
}

static void write_health(struct sqlite_conn *st, bool ok)
{
    struct sqlite_store *owner = st->owner;
    if (!owner || st != &owner->w)
        return;
    if (ok) {
        atomic_store(&owner->write_failing, false);
        return;
    }
    pthread_mutex_lock(&owner->why_lock);
    /* The code and SQLite's text, never a path. */
    snprintf(owner->why, sizeof(owner->why), "%s (%s)", sqlite3_errstr(sqlite3_errcode(st->db)),
             sqlite3_errmsg(st->db));
    pthread_mutex_unlock(&owner->why_lock);
    atomic_store(&owner->write_failing, true);
}

static int db_fail(struct sqlite_conn *st, struct sl_error *err, const char *what)
{
    if (st->db && database_unwritable(sqlite3_errcode(st->db)))
        write_health(st, false);
    /* The client sees the code only; the SQLite text is for the operator. */
    sl_error_set(err, SL_E_STORE, 0, "%s", SL_E_STORE);
    if (err)
        snprintf(err->detail, sizeof(err->detail), "sqlite %s: %s", what,
                 st->db ? sqlite3_errmsg(st->db) : "no connection");
    return -1;
}

static int oom(struct sl_error *err)
{
    return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
}

static int refuse(struct sl_error *err, const char *code)
{
    return sl_error_set(err, code, 0, "%s", code);
}

static sqlite3_stmt *stmt_get(struct sqlite_conn *st, enum stmt_id id, struct sl_error *err)
{
    if (!st->stmts[id] && sqlite3_prepare_v3(st->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                             &st->stmts[id], NULL) != SQLITE_OK) {
        db_fail(st, err, "prepare");
        st->stmts[id] = NULL;
        return NULL;
    }
    return st->stmts[id];
}

/* Step once: 1 row, 0 done, -1 error (err filled). */
static int step(struct sqlite_conn *st, sqlite3_stmt *stmt, struct sl_error *err)
{
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return db_fail(st, err, "step");
}

/* Run a statement that returns no rows; returns the rows changed or -1. */
static int run(struct sqlite_conn *st, sqlite3_stmt *stmt, struct sl_error *err)
{
    int r = step(st, stmt, err);
    if (r < 0)
        return -1;
    if (sqlite3_get_autocommit(st->db))
        write_health(st, true); /* a write outside a transaction landed */
    return sqlite3_changes(st->db);
}

static int tx_begin(struct sqlite_conn *st, struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_BEGIN, err);
    if (!stmt || step(st, stmt, err) < 0)
        return sl_error_wrap(err, "begin");
    return 0;
}

static void tx_rollback(struct sqlite_conn *st)
{
    if (sqlite3_get_autocommit(st->db))
        return;
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROLLBACK, NULL);
    if (stmt)
        sqlite3_step(stmt);
}

/* Finish the transaction opened by tx_begin(): commit when rc >= 0, roll back
 * otherwise. Returns rc, or -1 when the commit fails. */
static int tx_end(struct sqlite_conn *st, int rc, struct sl_error *err)
{
    if (rc < 0) {
        tx_rollback(st);
        return rc;
    }
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_COMMIT, err);
    if (!stmt || step(st, stmt, err) < 0) {
        sl_error_wrap(err, "commit");
        tx_rollback(st);
        return -1;
    }
    write_health(st, true);
    return rc;
}

/* ---- timestamps ---- */

/* SQLAlchemy's SQLite DateTime text; buf needs 32 bytes. */
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

/* ---- binding: the first failure sticks, checked once at the end ---- */

struct binder {
    sqlite3_stmt *stmt;
    int rc;
};

static void bind_text(struct binder *b, int i, const char *v)
{
    if (b->rc != SQLITE_OK)
        return;
    /* SQLITE_STATIC: bindings are cleared before the caller's strings can go. */
    b->rc = v ? sqlite3_bind_text(b->stmt, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(b->stmt, i);
}

/* Text with an explicit length: command output may contain NUL bytes. */
static void bind_text_n(struct binder *b, int i, const char *v, size_t len)
{
    if (b->rc != SQLITE_OK)
        return;
    b->rc = v ? sqlite3_bind_text64(b->stmt, i, v, len, SQLITE_STATIC, SQLITE_UTF8)
              : sqlite3_bind_null(b->stmt, i);
}

/* A termination reason: "" (no reason) is stored as NULL. */
static void bind_reason(struct binder *b, int i, const char *reason)
{
    bind_text(b, i, reason && *reason ? reason : NULL);
}

static void bind_int64(struct binder *b, int i, int64_t v)
{
    if (b->rc == SQLITE_OK)
        b->rc = sqlite3_bind_int64(b->stmt, i, v);
}

/* v == null_value binds NULL (0 for nullable timestamps, -1 for
 * last_lifetime_ms ...). */
static void bind_int64_or_null(struct binder *b, int i, int64_t v, int64_t null_value)
{
    if (b->rc == SQLITE_OK)
        b->rc = v == null_value ? sqlite3_bind_null(b->stmt, i) : sqlite3_bind_int64(b->stmt, i, v);
}

static void bind_ts(struct binder *b, int i, int64_t us, bool nullable)
{
    if (b->rc != SQLITE_OK)
        return;
    if (nullable && us == 0) {
        b->rc = sqlite3_bind_null(b->stmt, i);
        return;
    }
    char text[64];
    ts_format(us, text, sizeof(text));
    b->rc = sqlite3_bind_text(b->stmt, i, text, -1, SQLITE_TRANSIENT);
}

static int bind_done(struct sqlite_conn *st, struct binder *b, struct sl_error *err)
{
    if (b->rc == SQLITE_OK)
        return 0;
    return db_fail(st, err, "bind");
}

/* ---- reading: the first failure sticks ---- */

struct reader {
    sqlite3_stmt *stmt;
    bool oom;
    const char *bad; /* a value we cannot represent, NULL if none */
};

/* A text column; NULL stays NULL only when nullable (a NOT NULL column read
 * from a foreign schema gives "" rather than a surprise NULL). */
static bool read_failed(const struct reader *r) { return r->oom || r->bad; }

static char *read_str(struct reader *r, int i, bool nullable)
{
    if (read_failed(r))
        return NULL;
    const unsigned char *v = sqlite3_column_text(r->stmt, i);
    if (!v) {
        if (sqlite3_column_type(r->stmt, i) != SQLITE_NULL) {
            r->oom = true;
            return NULL;
        }
        if (nullable)
            return NULL;
        v = (const unsigned char *)"";
    }
    char *copy = strdup((const char *)v);
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
    const unsigned char *v = sqlite3_column_text(r->stmt, i);
    if (!v) {
        if (sqlite3_column_type(r->stmt, i) != SQLITE_NULL)
            r->oom = true;
        return NULL;
    }
    size_t n = (size_t)sqlite3_column_bytes(r->stmt, i);
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
    const unsigned char *v = sqlite3_column_text(r->stmt, i);
    if (!v || strlen((const char *)v) >= size) {
        r->bad = "unexpected status or storage_mode value";
        return;
    }
    memcpy(dst, v, strlen((const char *)v) + 1);
}

/* A nullable short text into a fixed buffer: NULL reads as "", a value
 * longer than the buffer (another writer's, the column is wider) is cut
 * rather than refused: it is informative, never a key. */
static void read_word_trunc(struct reader *r, int i, char *dst, size_t size)
{
    dst[0] = '\0';
    if (read_failed(r))
        return;
    const unsigned char *v = sqlite3_column_text(r->stmt, i);
    if (!v) {
        if (sqlite3_column_type(r->stmt, i) != SQLITE_NULL)
            r->oom = true;
        return;
    }
    snprintf(dst, size, "%s", (const char *)v);
}

static int64_t read_int64(struct reader *r, int i, int64_t null_value)
{
    if (read_failed(r) || sqlite3_column_type(r->stmt, i) == SQLITE_NULL)
        return null_value;
    return sqlite3_column_int64(r->stmt, i);
}

static int64_t read_ts(struct reader *r, int i)
{
    if (read_failed(r) || sqlite3_column_type(r->stmt, i) == SQLITE_NULL)
        return 0;
    const unsigned char *v = sqlite3_column_text(r->stmt, i);
    int64_t us = 0;
    if (!v || sl_time_parse((const char *)v, &us) < 0) {
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

static void route_bind(struct binder *b, const struct sl_route *r)
{
    bind_text(b, 1, r->sandbox_id);
    bind_text(b, 2, r->workspace_scope_id);
    bind_text(b, 3, r->worker_id);
    bind_text(b, 4, r->worker_epoch);
    bind_int64(b, 5, r->generation);
    bind_int64(b, 6, r->sandbox_uid);
    bind_text(b, 7, r->profile_id);
    bind_text(b, 8, r->profile_hash);
    bind_text(b, 9, r->status);
    bind_text(b, 10, r->storage_mode);
    bind_text(b, 11, r->active_exec_id);
    bind_ts(b, 12, r->last_active_at, false);
    bind_ts(b, 13, r->generation_started_at, false);
    bind_text(b, 14, r->generation_created_by);
    bind_ts(b, 15, r->ready_at, true);
    bind_int64_or_null(b, 16, r->last_released_generation, 0);
    bind_ts(b, 17, r->last_released_at, true);
    bind_text(b, 18, r->last_release_reason);
    bind_text(b, 19, r->last_released_by);
    bind_int64_or_null(b, 20, r->last_lifetime_ms, -1);
    bind_int64(b, 21, r->lifecycle_count);
    bind_int64(b, 22, r->total_lifetime_ms);
    bind_text(b, 23, r->lifecycle_history_json);
    bind_ts(b, 24, r->created_at, false);
    bind_ts(b, 25, r->updated_at, false);
}

static int route_read(sqlite3_stmt *stmt, struct sl_route *out, struct sl_error *err)
{
    struct reader r = {stmt, false, NULL};
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

static int exec_read(sqlite3_stmt *stmt, struct sl_exec_record *out, struct sl_error *err)
{
    struct reader r = {stmt, false, NULL};
    memset(out, 0, sizeof(*out));
    out->sandbox_id = read_str(&r, 0, false);
    out->exec_id = read_str(&r, 1, false);
    out->generation = read_int64(&r, 2, 0);
    out->worker_id = read_str(&r, 3, false);
    read_word(&r, 4, out->status, sizeof(out->status));
    out->command_json = read_str(&r, 5, false);
    out->exec_scope = read_str(&r, 6, true);
    out->has_exit_code = sqlite3_column_type(stmt, 7) != SQLITE_NULL;
    out->exit_code = (int)read_int64(&r, 7, 0);
    out->stdout_text = read_blob_text(&r, 8, &out->stdout_len);
    out->stderr_text = read_blob_text(&r, 9, &out->stderr_len);
    out->truncated = read_int64(&r, 10, 0) != 0;
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

static const char *sqlite_type(const struct sl_schema_column *c, char *buf, size_t size)
{
    switch (c->type) {
    case SL_SCHEMA_STRING:
        snprintf(buf, size, "VARCHAR(%d)", c->length);
        return buf;
    case SL_SCHEMA_INTEGER:
        return "INTEGER";
    case SL_SCHEMA_BIGINT:
        return "BIGINT";
    case SL_SCHEMA_DATETIME:
        return "DATETIME";
    /* Not "JSON": that declared type has NUMERIC affinity in SQLite, which
     * would rewrite a scalar document such as 1e5; TEXT keeps it verbatim. */
    case SL_SCHEMA_JSON:
    case SL_SCHEMA_TEXT:
        return "TEXT";
    case SL_SCHEMA_BOOLEAN:
        return "BOOLEAN";
    }
    return "TEXT";
}

static int table_columns(struct sqlite_conn *st, const char *table, struct sl_strlist *out,
                         struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_TABLE_INFO, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, table);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r;
    while ((r = step(st, stmt, err)) == 1) {
        const unsigned char *name = sqlite3_column_text(stmt, 0);
        if (name && sl_strlist_push(out, (const char *)name) < 0)
            return oom(err);
    }
    return r;
}

/* CREATE TABLE IF NOT EXISTS for every table, rendered from the shared
 * schema data (constant input only). */
static int ddl_render_tables(struct sl_buf *out)
{
    char line[512];
    int rc = 0;
    for (size_t t = 0; t < SL_SCHEMA_NTABLES && rc == 0; t++) {
        const struct sl_schema_table *table = &sl_schema_tables[t];
        snprintf(line, sizeof(line), "CREATE TABLE IF NOT EXISTS %s (\n", table->name);
        rc = sl_buf_append(out, line, strlen(line));
        for (size_t c = 0; c < table->ncolumns && rc == 0; c++) {
            const struct sl_schema_column *col = &table->columns[c];
            char type[32], dflt[48] = "";
            if (col->has_default)
                snprintf(dflt, sizeof(dflt), " DEFAULT %ld", col->default_value);
            snprintf(line, sizeof(line), "    %s %s%s%s,\n", col->name,
                     sqlite_type(col, type, sizeof(type)), col->nullable ? "" : " NOT NULL", dflt);
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
        if (rc == 0)
            rc = sl_buf_append(out, "\n);\n", 4);
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
 * Runs inside ddl_apply()'s BEGIN IMMEDIATE: a second process waits for the
 * write lock, then finds the column and adds nothing. */
static int ddl_add_columns(struct sqlite_conn *st, struct sl_error *err)
{
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++) {
        const struct sl_schema_table *table = &sl_schema_tables[t];
        struct sl_strlist live = {0};
        bool listed = false;
        for (size_t c = 0; c < table->ncolumns; c++) {
            const struct sl_schema_column *col = &table->columns[c];
            if (!col->additive)
                continue;
            if (!listed && table_columns(st, table->name, &live, err) < 0) {
                sl_strlist_free(&live);
                return -1;
            }
            listed = true;
            if (live.len == 0 || sl_strlist_contains(&live, col->name))
                continue;
            char type[32], sql[256];
            sl_schema_add_column_sql(table, col, sqlite_type(col, type, sizeof(type)), sql,
                                     sizeof(sql));
            if (sqlite3_exec(st->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
                sl_strlist_free(&live);
                db_fail(st, err, "add column");
                return sl_error_wrap(err, "%s.%s", table->name, col->name);
            }
        }
        sl_strlist_free(&live);
    }
    return 0;
}

/* Create missing tables, add missing additive columns, then create missing
 * indexes. An index whose columns are missing from a pre-existing table is
 * skipped rather than failing the whole DDL: the column check that follows
 * names the column, which is the useful refusal. */
static int ddl_locked(struct sqlite_conn *st, struct sl_error *err)
{
    struct sl_buf script;
    sl_buf_init(&script, 64 * 1024);
    if (ddl_render_tables(&script) < 0) {
        sl_buf_free(&script);
        return oom(err);
    }
    int rc = sqlite3_exec(st->db, script.data, NULL, NULL, NULL);
    sl_buf_free(&script);
    if (rc != SQLITE_OK)
        return db_fail(st, err, "create tables");
    if (ddl_add_columns(st, err) < 0)
        return -1;
    for (size_t i = 0; i < sl_schema_nindexes; i++) {
        const struct sl_schema_index *ix = &sl_schema_indexes[i];
        struct sl_strlist live = {0};
        if (table_columns(st, ix->table, &live, err) < 0) {
            sl_strlist_free(&live);
            return -1;
        }
        bool present = index_columns_present(ix->columns, &live);
        sl_strlist_free(&live);
        if (!present)
            continue;
        char sql[256];
        snprintf(sql, sizeof(sql), "CREATE INDEX IF NOT EXISTS %s ON %s (%s)", ix->name, ix->table,
                 ix->columns);
        if (sqlite3_exec(st->db, sql, NULL, NULL, NULL) != SQLITE_OK)
            return db_fail(st, err, "create index");
    }
    return 0;
}

static int ddl_apply(struct sqlite_conn *st, struct sl_error *err)
{
    if (tx_begin(st, err) < 0)
        return -1;
    return tx_end(st, ddl_locked(st, err), err);
}

static int sqlite_prepare_schema(struct sl_store *s, bool auto_ddl, char **warnings,
                                 struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    *warnings = NULL;
    if (auto_ddl && ddl_apply(st, err) < 0)
        return -1;
    struct sl_strlist live[SL_SCHEMA_NTABLES] = {0};
    int rc = 0;
    for (size_t t = 0; t < SL_SCHEMA_NTABLES && rc == 0; t++)
        rc = table_columns(st, sl_schema_tables[t].name, &live[t], err);
    if (rc == 0)
        rc = sl_schema_check(live, warnings, err);
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++)
        sl_strlist_free(&live[t]);
    return rc;
}

/* ---- routes ---- */

static int sqlite_route_get(struct sl_store *s, const char *sandbox_id, struct sl_route *out,
                            struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_GET, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r = step(st, stmt, err);
    if (r <= 0)
        return r;
    return route_read(stmt, out, err) < 0 ? -1 : 1;
}

static int route_exists(struct sqlite_conn *st, const char *sandbox_id, struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_EXISTS, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return step(st, stmt, err);
}

static int sqlite_route_insert(struct sl_store *s, const struct sl_route *r, struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    {
        _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_INSERT, err);
        if (!stmt)
            return -1;
        struct binder b = {stmt, SQLITE_OK};
        route_bind(&b, r);
        if (bind_done(st, &b, err) < 0)
            return -1;
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE)
            return 1;
        if ((rc & 0xff) != SQLITE_CONSTRAINT)
            return db_fail(st, err, "insert route");
        rc = sqlite3_extended_errcode(st->db);
        if (rc != SQLITE_CONSTRAINT_PRIMARYKEY && rc != SQLITE_CONSTRAINT_UNIQUE)
            return db_fail(st, err, "insert route");
    }
    /* Both keys may clash at once; the caller must then re-read, so the
     * sandbox_id answer wins over the uid one. Rows are never deleted, so the
     * check after the failed insert cannot race a removal. */
    int exists = route_exists(st, r->sandbox_id, err);
    if (exists < 0)
        return -1;
    return exists ? 0 : -2;
}

static int sqlite_route_cas(struct sl_store *s, const struct sl_route *r, int64_t expect_generation,
                            const char *const *expect_statuses, struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    size_t n = 0;
    while (expect_statuses && expect_statuses[n])
        n++;
    if (n > CAS_MAX_STATUSES)
        return sl_error_set(err, SL_E_INTERNAL, EINVAL, "too many expected route statuses");
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_CAS, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    route_bind(&b, r);
    bind_int64(&b, 26, expect_generation);
    for (size_t i = 0; i < CAS_MAX_STATUSES; i++)
        bind_text(&b, 27 + (int)i, i < n ? expect_statuses[i] : NULL);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int changed = run(st, stmt, err);
    if (changed < 0)
        return -1;
    return changed > 0 ? 1 : 0;
}

static int sqlite_route_touch(struct sl_store *s, const char *sandbox_id, int64_t generation,
                              int64_t now, struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_TOUCH, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    bind_int64(&b, 2, generation);
    bind_ts(&b, 3, now, false);
    if (bind_done(st, &b, err) < 0)
        return -1;
    /* Activity is refreshed on every call: it must not make a file read
     * wait out another process's lock. Tried once; a touch that loses is
     * made good by the next one (the clock it feeds counts in minutes). */
    sqlite3_busy_timeout(st->db, 0);
    int changed = run(st, stmt, err);
    sqlite3_busy_timeout(st->db, st->owner->busy_timeout_ms);
    return changed < 0 ? -1 : changed > 0 ? 1 : 0;
}

/* ---- executions ---- */

static int exec_lookup(struct sqlite_conn *st, const char *sandbox_id, const char *exec_id,
                       struct sl_exec_record *out, struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_GET, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    bind_text(&b, 2, exec_id);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r = step(st, stmt, err);
    if (r <= 0)
        return r;
    return exec_read(stmt, out, err) < 0 ? -1 : 1;
}

static int sqlite_exec_get(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                           struct sl_exec_record *out, struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    return exec_lookup(st, sandbox_id, exec_id, out, err);
}

static int sqlite_exec_list(struct sl_store *s, const struct sl_exec_filter *f,
                            struct sl_exec_record **out, size_t *n, int64_t *total,
                            struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    *out = NULL;
    *n = 0;
    *total = 0;
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    {
        _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_COUNT, err);
        if (!stmt)
            return -1;
        struct binder b = {stmt, SQLITE_OK};
        bind_text(&b, 1, f->sandbox_id);
        bind_text(&b, 2, f->status);
        bind_text(&b, 3, f->termination_reason);
        if (bind_done(st, &b, err) < 0 || step(st, stmt, err) < 0)
            return -1;
        *total = sqlite3_column_int64(stmt, 0);
    }
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_LIST, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, f->sandbox_id);
    bind_text(&b, 2, f->status);
    bind_int64(&b, 3, f->limit);
    bind_int64(&b, 4, f->offset);
    bind_text(&b, 5, f->termination_reason);
    if (bind_done(st, &b, err) < 0)
        return -1;
    struct sl_exec_record *v = calloc((size_t)(f->limit > 0 ? f->limit : 1), sizeof(*v));
    if (!v)
        return oom(err);
    size_t count = 0;
    int r = 0;
    while (count < (size_t)f->limit && (r = step(st, stmt, err)) == 1) {
        if (exec_read(stmt, &v[count], err) < 0) {
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

/* "%<search with %, _ and \ escaped>%" for LIKE ... ESCAPE '\'. */
static char *like_pattern(const char *search)
{
    size_t n = strlen(search);
    char *p = malloc(2 * n + 3);
    if (!p)
        return NULL;
    size_t j = 0;
    p[j++] = '%';
    for (size_t i = 0; i < n; i++) {
        if (search[i] == '%' || search[i] == '_' || search[i] == '\\')
            p[j++] = '\\';
        p[j++] = search[i];
    }
    p[j++] = '%';
    p[j] = '\0';
    return p;
}

static void route_filter_bind(struct binder *b, const struct sl_route_filter *f,
                              const char *pattern)
{
    bind_text(b, 1, f->status);
    bind_text(b, 2, f->workspace_scope_id);
    bind_text(b, 3, f->worker_id);
    bind_text(b, 4, pattern);
}

/* Up to `limit` routes from a bound statement into a malloc'd array. */
static int read_routes(struct sqlite_conn *st, sqlite3_stmt *stmt, int64_t limit,
                       struct sl_route **out, size_t *n, struct sl_error *err)
{
    struct sl_route *v = calloc((size_t)(limit > 0 ? limit : 1), sizeof(*v));
    if (!v)
        return oom(err);
    size_t count = 0;
    int r = 0;
    while (count < (size_t)limit && (r = step(st, stmt, err)) == 1) {
        if (route_read(stmt, &v[count], err) < 0) {
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

static int sqlite_route_list(struct sl_store *s, const struct sl_route_filter *f,
                             struct sl_route **out, size_t *n, int64_t *total,
                             struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    *out = NULL;
    *n = 0;
    *total = 0;
    _cleanup_free_ char *pattern = NULL;
    if (f->search && !(pattern = like_pattern(f->search)))
        return oom(err);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    {
        _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_COUNT, err);
        if (!stmt)
            return -1;
        struct binder b = {stmt, SQLITE_OK};
        route_filter_bind(&b, f, pattern);
        if (bind_done(st, &b, err) < 0 || step(st, stmt, err) < 0)
            return -1;
        *total = sqlite3_column_int64(stmt, 0);
    }
    _cleanup_reset_ sqlite3_stmt *stmt =
        stmt_get(st, f->oldest_first ? ST_ROUTE_LIST_ASC : ST_ROUTE_LIST, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    route_filter_bind(&b, f, pattern);
    bind_int64(&b, 5, f->limit);
    bind_int64(&b, 6, f->offset);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return read_routes(st, stmt, f->limit, out, n, err);
}

static int sqlite_route_reapable(struct sl_store *s, const struct sl_reap_query *q,
                                 struct sl_route **out, size_t *n, struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    *out = NULL;
    *n = 0;
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_REAPABLE, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    const int64_t cut[] = {q->idle_before, q->releasing_before, q->running_before,
                           q->suspending_before, q->suspended_before};
    for (int i = 0; i < 5; i++) {
        if (cut[i] > 0)
            bind_ts(&b, i + 1, cut[i], false);
        else
            bind_text(&b, i + 1, NULL);
    }
    bind_int64(&b, 6, q->limit);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return read_routes(st, stmt, q->limit, out, n, err);
}

static int sqlite_route_status_counts(struct sl_store *s, struct sl_status_count **out,
                                      size_t *n, struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    *out = NULL;
    *n = 0;
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_HISTOGRAM, err);
    if (!stmt)
        return -1;
    size_t cap = 0;
    struct sl_status_count *v = NULL;
    int r;
    while ((r = step(st, stmt, err)) == 1) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            struct sl_status_count *nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                free(v);
                return oom(err);
            }
            v = nv;
        }
        const unsigned char *status = sqlite3_column_text(stmt, 0);
        snprintf(v[*n].status, sizeof(v[*n].status), "%s", status ? (const char *)status : "");
        v[*n].count = sqlite3_column_int64(stmt, 1);
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

static int sqlite_worker_list(struct sl_store *s, struct sl_worker_record **out, size_t *n,
                              struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    *out = NULL;
    *n = 0;
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_WORKER_LIST, err);
    if (!stmt)
        return -1;
    size_t cap = 0;
    struct sl_worker_record *v = NULL;
    int r;
    while ((r = step(st, stmt, err)) == 1) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            struct sl_worker_record *nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                free(v);
                return oom(err);
            }
            v = nv;
        }
        struct sl_worker_record *w = &v[*n];
        memset(w, 0, sizeof(*w));
        struct reader rd = {stmt, false, NULL};
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

static int sqlite_route_uids_of_worker(struct sl_store *s, const char *worker_id, int64_t **uids,
                                       struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    *uids = NULL;
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_UIDS_OF_WORKER, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, worker_id);
    if (bind_done(st, &b, err) < 0)
        return -1;
    size_t n = 0, cap = 0;
    int64_t *v = NULL;
    int r;
    while ((r = step(st, stmt, err)) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            int64_t *nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                free(v);
                return oom(err);
            }
            v = nv;
        }
        v[n++] = sqlite3_column_int64(stmt, 0);
    }
    if (r < 0) {
        free(v);
        return -1;
    }
    *uids = v;
    return (int)n;
}

/* Admission step 4.2: the route must be live at the request's generation. */
static int admit_check_route(struct sqlite_conn *st, const struct sl_exec_record *rec,
                             struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_FENCE, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r = step(st, stmt, err);
    if (r < 0)
        return -1;
    if (r == 0)
        return refuse(err, SL_E_STALE_GENERATION);
    int64_t generation = sqlite3_column_int64(stmt, 0);
    const char *status = (const char *)sqlite3_column_text(stmt, 1);
    if (!status)
        status = "";
    if (generation == rec->generation && status_in(status, dormant_statuses))
        return refuse(err, SL_E_SUSPENDED);
    if (generation != rec->generation || !status_in(status, live_statuses))
        return refuse(err, SL_E_STALE_GENERATION);
    return 0;
}

/* Admission steps 4.3 and 4.4: the parallel limit first, then scopes. */
static int admit_check_running(struct sqlite_conn *st, const struct sl_exec_record *rec,
                               const char *want_scope, int64_t max_parallel, struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_RUNNING, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_int64(&b, 2, rec->generation);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int64_t running = 0;
    bool conflict = false;
    int r;
    while ((r = step(st, stmt, err)) == 1) {
        running++;
        if (!conflict)
            conflict = scope_conflicts(want_scope, (const char *)sqlite3_column_text(stmt, 0),
                                       (const char *)sqlite3_column_text(stmt, 1));
    }
    if (r < 0)
        return -1;
    if (running >= max_parallel)
        return refuse(err, SL_E_PARALLEL_EXEC_LIMIT);
    if (conflict)
        return refuse(err, SL_E_EXEC_SCOPE_BUSY);
    return 0;
}

static int admit_insert(struct sqlite_conn *st, const struct sl_exec_record *rec,
                        const char *scope, int64_t now, struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_INSERT, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_text(&b, 2, rec->exec_id);
    bind_int64(&b, 3, rec->generation);
    bind_text(&b, 4, rec->worker_id);
    bind_text(&b, 5, rec->command_json);
    bind_text(&b, 6, scope);
    bind_ts(&b, 7, now, false);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return run(st, stmt, err) < 0 ? sl_error_wrap(err, "insert execution") : 0;
}

static int admit_mark_route(struct sqlite_conn *st, const struct sl_exec_record *rec,
                            int64_t now, struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_ADMIT, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_int64(&b, 2, rec->generation);
    bind_text(&b, 3, rec->exec_id);
    bind_ts(&b, 4, now, false);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int changed = run(st, stmt, err);
    if (changed < 0)
        return -1;
    /* Unreachable while BEGIN IMMEDIATE holds the write lock since the route
     * was read; kept as the spec's re-check of the status. */
    if (changed == 0)
        return refuse(err, SL_E_STALE_GENERATION);
    return 0;
}

static int admit_locked(struct sqlite_conn *st, const struct sl_exec_record *rec,
                        int64_t max_parallel, struct sl_exec_record *existing,
                        struct sl_error *err)
{
    int found = exec_lookup(st, rec->sandbox_id, rec->exec_id, existing, err);
    if (found < 0)
        return -1;
    if (found)
        return SL_ADMIT_REPLAY;
    /* An empty scope is no scope: the column's NULL means unscoped. */
    const char *scope = rec->exec_scope && *rec->exec_scope ? rec->exec_scope : NULL;
    int64_t now = rec->created_at ? rec->created_at : sl_now_us();
    if (admit_check_route(st, rec, err) < 0 ||
        admit_check_running(st, rec, scope, max_parallel, err) < 0 ||
        admit_insert(st, rec, scope, now, err) < 0 || admit_mark_route(st, rec, now, err) < 0)
        return -1;
    return SL_ADMIT_ADMITTED;
}

static int sqlite_exec_admit(struct sl_store *s, const struct sl_exec_record *rec,
                             int64_t max_parallel, struct sl_exec_record *existing,
                             struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    struct sl_exec_record scratch = {0};
    if (!existing)
        existing = &scratch;
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    if (tx_begin(st, err) < 0)
        return -1;
    int outcome = admit_locked(st, rec, max_parallel, existing, err);
    int rc = tx_end(st, outcome, err);
    /* *existing is ours to fill only on a replay; an admitted call leaves
     * the caller's struct untouched. */
    if (outcome == SL_ADMIT_REPLAY && (rc != SL_ADMIT_REPLAY || existing == &scratch))
        sl_exec_record_clear(existing);
    return rc;
}

static int finish_record(struct sqlite_conn *st, const struct sl_exec_record *rec, int64_t now,
                         struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_FINISH, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_text(&b, 2, rec->exec_id);
    bind_text(&b, 3, rec->status);
    if (rec->has_exit_code)
        bind_int64(&b, 4, rec->exit_code);
    else
        bind_text(&b, 4, NULL);
    bind_text_n(&b, 5, rec->stdout_text, rec->stdout_len);
    bind_text_n(&b, 6, rec->stderr_text, rec->stderr_len);
    bind_int64(&b, 7, rec->truncated ? 1 : 0);
    bind_ts(&b, 8, rec->finished_at ? rec->finished_at : now, false);
    bind_reason(&b, 9, rec->termination_reason);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return run(st, stmt, err) < 0 ? sl_error_wrap(err, "finish execution") : 0;
}

/* The earliest-started RUNNING execution of the generation, malloc'd into
 * *out (NULL when none). */
static int earliest_running(struct sqlite_conn *st, const struct sl_exec_record *rec, char **out,
                            struct sl_error *err)
{
    *out = NULL;
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_EARLIEST, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_int64(&b, 2, rec->generation);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r = step(st, stmt, err);
    if (r <= 0)
        return r;
    const unsigned char *id = sqlite3_column_text(stmt, 0);
    if (id && !(*out = strdup((const char *)id)))
        return oom(err);
    return 0;
}

/* The route after one of its executions left RUNNING (finished or
 * withdrawn): active_exec_id is the earliest still running, status RUNNING
 * or READY accordingly. */
static int route_after_exec_locked(struct sqlite_conn *st, const struct sl_exec_record *rec,
                                   int64_t now, struct sl_error *err)
{
    _cleanup_free_ char *active = NULL;
    if (earliest_running(st, rec, &active, err) < 0)
        return -1;
    /* The WHERE on generation is the "route moved on => nothing written" rule. */
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_FINISH, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_int64(&b, 2, rec->generation);
    bind_text(&b, 3, active);
    bind_text(&b, 4, active ? "RUNNING" : "READY");
    bind_ts(&b, 5, now, false);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return run(st, stmt, err) < 0 ? sl_error_wrap(err, "update route") : 0;
}

static int finish_locked(struct sqlite_conn *st, const struct sl_exec_record *rec, int64_t now,
                         struct sl_error *err)
{
    if (finish_record(st, rec, now, err) < 0)
        return -1;
    return route_after_exec_locked(st, rec, now, err);
}

static int withdraw_locked(struct sqlite_conn *st, const struct sl_exec_record *rec, int64_t now,
                           struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_WITHDRAW, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, rec->sandbox_id);
    bind_text(&b, 2, rec->exec_id);
    bind_int64(&b, 3, rec->generation);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int removed = run(st, stmt, err);
    if (removed < 0 || route_after_exec_locked(st, rec, now, err) < 0)
        return -1;
    return removed > 0;
}

static int sqlite_exec_withdraw(struct sl_store *s, const struct sl_exec_record *rec, int64_t now,
                                struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    if (tx_begin(st, err) < 0)
        return -1;
    int r = withdraw_locked(st, rec, now, err);
    return tx_end(st, r < 0 ? -1 : 0, err) < 0 ? -1 : r;
}

static int sqlite_route_history_cas(struct sl_store *s, const char *sandbox_id,
                                    const char *expect, const char *history, struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_ROUTE_HISTORY_CAS, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    bind_text(&b, 2, expect);
    bind_text(&b, 3, history);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r = run(st, stmt, err);
    return r < 0 ? -1 : r > 0;
}

static int sqlite_exec_prune(struct sl_store *s, int64_t older_than, int64_t batch,
                             struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_PRUNE, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_ts(&b, 1, older_than, false);
    bind_int64(&b, 2, batch);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return run(st, stmt, err);
}

static int sqlite_exec_output_bytes(struct sl_store *s, const char *sandbox_id, int64_t *bytes,
                                    struct sl_error *err)
{
    struct sqlite_conn *st = rconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_OUTPUT_BYTES, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int r = step(st, stmt, err);
    if (r < 0)
        return -1;
    *bytes = r > 0 ? sqlite3_column_int64(stmt, 0) : 0;
    return 0;
}

static int drop_output_locked(struct sqlite_conn *st, const char *sandbox_id,
                              const char *keep_exec_id, int64_t need, int64_t *freed,
                              struct sl_error *err)
{
    while (*freed < need) {
        int64_t rows[64], sizes[64];
        int n = 0;
        {
            _cleanup_reset_ sqlite3_stmt *sel = stmt_get(st, ST_EXEC_OUTPUT_OLDEST, err);
            if (!sel)
                return -1;
            struct binder b = {sel, SQLITE_OK};
            bind_text(&b, 1, sandbox_id);
            bind_text(&b, 2, keep_exec_id);
            if (bind_done(st, &b, err) < 0)
                return -1;
            int r;
            while (n < 64 && (r = step(st, sel, err)) > 0) {
                rows[n] = sqlite3_column_int64(sel, 0);
                sizes[n] = sqlite3_column_int64(sel, 1);
                n++;
            }
            if (r < 0)
                return -1;
        }
        if (n == 0)
            return 0; /* nothing older left to drop */
        for (int i = 0; i < n && *freed < need; i++) {
            _cleanup_reset_ sqlite3_stmt *upd = stmt_get(st, ST_EXEC_OUTPUT_CLEAR, err);
            if (!upd)
                return -1;
            struct binder b = {upd, SQLITE_OK};
            bind_int64(&b, 1, rows[i]);
            if (bind_done(st, &b, err) < 0 || run(st, upd, err) < 0)
                return -1;
            *freed += sizes[i];
        }
    }
    return 0;
}

static int sqlite_exec_output_drop(struct sl_store *s, const char *sandbox_id,
                                   const char *keep_exec_id, int64_t need, int64_t *freed,
                                   struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    *freed = 0;
    if (tx_begin(st, err) < 0)
        return -1;
    return tx_end(st, drop_output_locked(st, sandbox_id, keep_exec_id, need, freed, err), err);
}

static int sqlite_exec_finish(struct sl_store *s, const struct sl_exec_record *rec, int64_t now,
                              struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    if (tx_begin(st, err) < 0)
        return -1;
    return tx_end(st, finish_locked(st, rec, now, err), err);
}

static int sqlite_exec_mark_running(struct sl_store *s, const char *sandbox_id, int64_t generation,
                                    const char *status, const char *reason, int64_t now,
                                    struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_MARK, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, sandbox_id);
    bind_int64(&b, 2, generation);
    bind_text(&b, 3, status);
    bind_ts(&b, 4, now, false);
    bind_reason(&b, 5, reason);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return run(st, stmt, err);
}

static int sqlite_exec_mark_worker_running(struct sl_store *s, const char *worker_id,
                                           const char *status, const char *reason, int64_t now,
                                           struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, ST_EXEC_MARK_WORKER, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, worker_id);
    bind_text(&b, 2, status);
    bind_ts(&b, 3, now, false);
    bind_reason(&b, 4, reason);
    if (bind_done(st, &b, err) < 0)
        return -1;
    return run(st, stmt, err);
}

/* ---- workers ---- */

static int worker_write(struct sqlite_conn *st, enum stmt_id id, const struct sl_worker_row *w,
                        struct sl_error *err)
{
    _cleanup_reset_ sqlite3_stmt *stmt = stmt_get(st, id, err);
    if (!stmt)
        return -1;
    struct binder b = {stmt, SQLITE_OK};
    bind_text(&b, 1, w->worker_id);
    bind_text(&b, 2, w->worker_epoch);
    bind_text(&b, 3, w->endpoint);
    bind_text(&b, 4, w->status);
    bind_int64(&b, 5, w->capacity);
    bind_int64(&b, 6, w->running_sessions);
    bind_text(&b, 7, w->profile_hash);
    bind_ts(&b, 8, w->now, false);
    if (bind_done(st, &b, err) < 0)
        return -1;
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) {
        write_health(st, true);
        return sqlite3_changes(st->db);
    }
    /* -2: another process inserted the row first. */
    if (id == ST_WORKER_INSERT && (rc & 0xff) == SQLITE_CONSTRAINT &&
        sqlite3_extended_errcode(st->db) == SQLITE_CONSTRAINT_PRIMARYKEY)
        return -2;
    return db_fail(st, err, id == ST_WORKER_INSERT ? "insert worker" : "update worker");
}

static int sqlite_worker_upsert(struct sl_store *s, const struct sl_worker_row *w,
                                struct sl_error *err)
{
    struct sqlite_conn *st = wconn(s);
    _cleanup_unlock_ pthread_mutex_t *guard = store_lock(st);
    int r = worker_write(st, ST_WORKER_UPDATE, w, err);
    if (r != 0)
        return r < 0 ? -1 : 0;
    r = worker_write(st, ST_WORKER_INSERT, w, err);
    if (r == -2)
        r = worker_write(st, ST_WORKER_UPDATE, w, err);
    return r < 0 ? -1 : 0;
}

/* ---- lifecycle ---- */

static void conn_close(struct sqlite_conn *c)
{
    for (size_t i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(c->stmts[i]);
    sqlite3_close(c->db);
    pthread_mutex_destroy(&c->lock);
}

static void sqlite_close(struct sl_store *s)
{
    if (!s)
        return;
    struct sqlite_store *st = store_of(s);
    conn_close(&st->w);
    conn_close(&st->r);
    pthread_mutex_destroy(&st->why_lock);
    free(st->path);
    free(st);
}

static bool sqlite_health(struct sl_store *s, char *why, size_t size)
{
    struct sqlite_store *st = store_of(s);
    bool failing = atomic_load(&st->write_failing);
    if (failing && why && size) {
        pthread_mutex_lock(&st->why_lock);
        snprintf(why, size, "%s", st->why);
        pthread_mutex_unlock(&st->why_lock);
    }
    return !failing;
}

static const struct sl_store_ops sqlite_ops = {
    .prepare_schema = sqlite_prepare_schema,
    .route_get = sqlite_route_get,
    .route_insert = sqlite_route_insert,
    .route_cas = sqlite_route_cas,
    .route_touch = sqlite_route_touch,
    .exec_get = sqlite_exec_get,
    .exec_admit = sqlite_exec_admit,
    .exec_list = sqlite_exec_list,
    .route_uids_of_worker = sqlite_route_uids_of_worker,
    .route_list = sqlite_route_list,
    .route_status_counts = sqlite_route_status_counts,
    .route_reapable = sqlite_route_reapable,
    .worker_list = sqlite_worker_list,
    .exec_finish = sqlite_exec_finish,
    .exec_withdraw = sqlite_exec_withdraw,
    .exec_prune = sqlite_exec_prune,
    .route_history_cas = sqlite_route_history_cas,
    .exec_output_bytes = sqlite_exec_output_bytes,
    .exec_output_drop = sqlite_exec_output_drop,
    .exec_mark_running = sqlite_exec_mark_running,
    .exec_mark_worker_running = sqlite_exec_mark_worker_running,
    .worker_upsert = sqlite_worker_upsert,
    .health = sqlite_health,
    .close = sqlite_close,
};

/* mkdir -p of the database's parent directory. New directories are 0700: the
 * database holds every command line and output; existing ones are left as
 * the operator made them. */
static int make_parent_dirs(const char *path, struct sl_error *err)
{
    _cleanup_free_ char *dir = strdup(path);
    if (!dir)
        return oom(err);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
            sl_error_errno(err, SL_E_STORE, "cannot create the database directory");
            return sl_error_wrap(err, "mkdir %s", dir);
        }
        if (end)
            return 0;
        *p = '/';
    }
}

/* SQLite maps the WAL index (<db>-shm) into memory. On a copy-on-write
 * filesystem (btrfs) every write to a mapped page needs a new block, and
 * on a full disk the kernel can only answer SIGBUS: the daemon died in the
 * middle of a command, with no log line. A file created empty with the
 * no-copy-on-write flag keeps its blocks, which SQLite allocates when it
 * grows the file (it writes to every new page first), so a mapped write
 * never needs a block again. Elsewhere the flag is not supported and
 * nothing changes; a -shm that exists already is left as it is. */
static void shm_no_cow(const char *path)
{
    char shm[PATH_MAX];
    if ((size_t)snprintf(shm, sizeof(shm), "%s-shm", path) >= sizeof(shm))
        return;
    int fd = open(shm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    int flags = 0;
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
        flags |= FS_NOCOW_FL;
        (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    close(fd);
}

struct sl_store *sl_store_sqlite_open(const char *path, int busy_timeout_ms,
                                      struct sl_error *err)
{
    if (!path || !*path) {
        sl_error_set(err, SL_E_CONFIG, 0, "the SQLite database path is empty");
        return NULL;
    }
    bool in_memory = strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0;
    if (!in_memory && make_parent_dirs(path, err) < 0)
        return NULL;
    if (!in_memory)
        shm_no_cow(path);

    struct sqlite_store *st = calloc(1, sizeof(*st));
    if (!st || !(st->path = strdup(path))) {
        free(st);
        oom(err);
        return NULL;
    }
    pthread_mutex_init(&st->w.lock, NULL);
    pthread_mutex_init(&st->r.lock, NULL);
    pthread_mutex_init(&st->why_lock, NULL);
    st->w.owner = st->r.owner = st;
    st->busy_timeout_ms = busy_timeout_ms;
    st->pub.ops = &sqlite_ops;
    st->pub.backend = "sqlite";
    st->pub.database = st->path;
    /* An in-memory database is private to its connection: reads share the
     * writer's. */
    bool shared = !in_memory;
    struct sqlite_conn *conns[2] = {&st->w, &st->r};
    for (int i = 0; i < (shared ? 2 : 1); i++) {
        struct sqlite_conn *c = conns[i];
        /* NOMUTEX: c->lock serialises every use of the connection (see the
         * top of this file). SQLite opens its files O_CLOEXEC, so sandbox
         * children never inherit the database. */
        int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                    (strncmp(path, "file:", 5) == 0 ? SQLITE_OPEN_URI : 0);
        if (sqlite3_open_v2(path, &c->db, flags, NULL) != SQLITE_OK) {
            db_fail(c, err, "open");
            sl_error_wrap(err, "%s", path);
            sqlite_close(&st->pub);
            return NULL;
        }
        sqlite3_extended_result_codes(c->db, 1);
        /* busy_timeout first, so switching to WAL waits for other openers.
         * It bounds how long a write waits for another process's lock;
         * then the request answers SANDBOX_METADATA_UNAVAILABLE. */
        char pragmas[160];
        snprintf(pragmas, sizeof(pragmas),
                 "PRAGMA busy_timeout = %d;"
                 "PRAGMA journal_mode = WAL;"
                 "PRAGMA synchronous = NORMAL;",
                 st->busy_timeout_ms);
        if (sqlite3_exec(c->db, pragmas, NULL, NULL, NULL) != SQLITE_OK) {
            db_fail(c, err, "configure");
            sl_error_wrap(err, "%s", path);
            sqlite_close(&st->pub);
            return NULL;
        }
    }
    return &st->pub;
}
