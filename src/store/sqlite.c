/* The SQLite driver of the store core (store/sql_driver.h; spec/FLEET.md
 * §2, CONFIG.md §2.5).
 *
 * Storage conventions follow what SQLAlchemy writes to SQLite, so a database
 * shared with the reference reads the same both ways:
 *   - timestamps are TEXT "YYYY-MM-DD HH:MM:SS.ffffff" (naive UTC, always six
 *     fraction digits, which also makes them sort chronologically as text);
 *     reading also accepts a 'T' separator and a missing fraction;
 *   - booleans are 0/1, JSON columns are TEXT.
 *
 * Concurrency: two connections, one for writes (and the reads inside write
 * transactions), one for reads, each guarded by a pthread mutex held from
 * acquire() to release() — the whole of one store method — and opened
 * SQLITE_OPEN_NOMUTEX. SQLITE_OPEN_FULLMUTEX alone would not do: it
 * serialises single API calls, but a transaction is many calls (BEGIN,
 * steps, COMMIT) and two threads sharing the connection would interleave
 * inside each other's transaction. SQLite admits one writer at a time
 * anyway, so the write mutex costs little, and in WAL mode a reader never
 * waits for the writer; other processes on the same file are handled by
 * busy_timeout and BEGIN IMMEDIATE (which takes the write lock up front, so
 * a read-then-write transaction never fails to upgrade, and which is also
 * the row lock the core asks for: {FOR_UPDATE} renders as nothing).
 *
 * Every statement is prepared once per connection, lazily (so a missing
 * table fails the method that needs it, not the open). */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "store/schema.h"
#include "store/sql_driver.h"

static const char *sqlite_column_type(const struct sl_schema_column *col, char *buf, size_t size);

static const struct sl_sql_dialect sqlite_dialect = {
    .placeholders = SL_SQL_PH_NUMBERED,
    .for_update = "",
    /* length() of a BLOB is its size, of TEXT its characters. */
    .octets_fmt = "length(CAST(%s AS BLOB))",
    .json_text_fmt = "%s",
    .text_param_fmt = "%s",
    .is_op = "IS",
    .text_allows_nul = true,
    .create_index_if_not_exists = true,
    .table_options = "",
    .column_type = sqlite_column_type,
};

const struct sl_sql_dialect *sl_sqlite_dialect(void) { return &sqlite_dialect; }

/* One connection and its prepared statements, used under its lock. */
struct sqlite_conn {
    struct sl_sql_conn pub; /* first */
    pthread_mutex_t lock;
    sqlite3 *db;
    sqlite3_stmt *stmts[SL_SQL_MAX_STMTS];
    sqlite3_stmt *cur;  /* the statement of the last query() */
    bool pending_row;   /* query() stepped onto a row next() has not returned */
    bool is_writer;
    struct sqlite_db *owner;
};

/* write_failing: the last write on `w` failed for a reason of the
 * database's own (busy, full, read-only, I/O); cleared by the next write
 * that succeeds. /healthz reports it. */
struct sqlite_db {
    struct sl_sql_db pub; /* first */
    struct sqlite_conn w, r;
    char *path;
    int busy_timeout_ms; /* PRAGMA busy_timeout of both connections */
    atomic_bool write_failing;
    pthread_mutex_t why_lock;
    char why[160];
};

static struct sqlite_conn *conn_of(struct sl_sql_conn *c) { return (struct sqlite_conn *)c; }
static struct sqlite_db *db_of(struct sl_sql_db *d) { return (struct sqlite_db *)d; }

/* ---- connections ---- */

static struct sl_sql_conn *sqlite_acquire(struct sl_sql_db *d, bool write, struct sl_error *err)
{
    (void)err;
    struct sqlite_db *db = db_of(d);
    /* An in-memory database has one connection: its reads share the
     * writer's. */
    struct sqlite_conn *c = write || !db->r.db ? &db->w : &db->r;
    pthread_mutex_lock(&c->lock);
    return &c->pub;
}

static void stmt_done(struct sqlite_conn *c)
{
    if (c->cur) {
        sqlite3_reset(c->cur);
        sqlite3_clear_bindings(c->cur);
        c->cur = NULL;
    }
    c->pending_row = false;
}

static void sqlite_release(struct sl_sql_conn *pc)
{
    struct sqlite_conn *c = conn_of(pc);
    stmt_done(c);
    pthread_mutex_unlock(&c->lock);
}

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

static void write_health(struct sqlite_conn *c, bool ok)
{
    struct sqlite_db *db = c->owner;
    if (!c->is_writer)
        return;
    if (ok) {
        atomic_store(&db->write_failing, false);
        return;
    }
    pthread_mutex_lock(&db->why_lock);
    /* The code and SQLite's text, never a path. */
    snprintf(db->why, sizeof(db->why), "%s (%s)", sqlite3_errstr(sqlite3_errcode(c->db)),
             sqlite3_errmsg(c->db));
    pthread_mutex_unlock(&db->why_lock);
    atomic_store(&db->write_failing, true);
}

static int db_fail(struct sqlite_conn *c, struct sl_error *err, const char *what)
{
    if (c->db && database_unwritable(sqlite3_errcode(c->db)))
        write_health(c, false);
    return sl_sql_fail(err, "sqlite", what, c->db ? sqlite3_errmsg(c->db) : NULL);
}

/* ---- statements ---- */

static int bind_arg(sqlite3_stmt *stmt, int i, const struct sl_sql_arg *a)
{
    switch (a->kind) {
    case SL_SQL_NULL:
        return sqlite3_bind_null(stmt, i);
    case SL_SQL_INT:
    case SL_SQL_BOOL:
        return sqlite3_bind_int64(stmt, i, a->i);
    case SL_SQL_TEXT:
    case SL_SQL_TS:
        /* SQLITE_STATIC: bindings are cleared before the caller's strings
         * can go. An explicit length: command output may hold NUL bytes. */
        return sqlite3_bind_text64(stmt, i, a->s, a->len, SQLITE_STATIC, SQLITE_UTF8);
    }
    return SQLITE_MISUSE;
}

static int sqlite_query(struct sl_sql_conn *pc, int id, const struct sl_sql_text *text,
                        const struct sl_sql_arg *args, int nargs, struct sl_error *err)
{
    struct sqlite_conn *c = conn_of(pc);
    stmt_done(c);
    if (!c->stmts[id] && sqlite3_prepare_v3(c->db, text->sql, -1, SQLITE_PREPARE_PERSISTENT,
                                            &c->stmts[id], NULL) != SQLITE_OK) {
        c->stmts[id] = NULL;
        return db_fail(c, err, "prepare");
    }
    sqlite3_stmt *stmt = c->stmts[id];
    c->cur = stmt;
    for (int i = 0; i < nargs; i++)
        if (bind_arg(stmt, i + 1, &args[i]) != SQLITE_OK)
            return db_fail(c, err, "bind");
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        c->pending_row = true;
        return 0;
    }
    if (rc == SQLITE_DONE) {
        if (sqlite3_get_autocommit(c->db))
            write_health(c, true); /* a write outside a transaction landed */
        return 0;
    }
    int ext = sqlite3_extended_errcode(c->db);
    db_fail(c, err, "step");
    if (ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE)
        return SL_SQL_CONFLICT;
    return -1;
}

static int sqlite_next(struct sl_sql_conn *pc, struct sl_error *err)
{
    struct sqlite_conn *c = conn_of(pc);
    if (!c->cur)
        return 0;
    if (c->pending_row) {
        c->pending_row = false;
        return 1;
    }
    /* A statement that ended (DONE) is not stepped again: that would rerun it. */
    if (!sqlite3_stmt_busy(c->cur))
        return 0;
    int rc = sqlite3_step(c->cur);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return db_fail(c, err, "step");
}

static int64_t sqlite_changes(struct sl_sql_conn *pc) { return sqlite3_changes64(conn_of(pc)->db); }

static bool sqlite_col_null(struct sl_sql_conn *pc, int i)
{
    return sqlite3_column_type(conn_of(pc)->cur, i) == SQLITE_NULL;
}

static int64_t sqlite_col_int(struct sl_sql_conn *pc, int i)
{
    return sqlite3_column_int64(conn_of(pc)->cur, i);
}

static const char *sqlite_col_text(struct sl_sql_conn *pc, int i, size_t *len)
{
    sqlite3_stmt *stmt = conn_of(pc)->cur;
    const unsigned char *v = sqlite3_column_text(stmt, i);
    *len = v ? (size_t)sqlite3_column_bytes(stmt, i) : 0;
    return (const char *)v;
}

static void sqlite_try_once(struct sl_sql_conn *pc, bool on)
{
    struct sqlite_conn *c = conn_of(pc);
    sqlite3_busy_timeout(c->db, on ? 0 : c->owner->busy_timeout_ms);
}

/* ---- transactions ---- */

static int exec_simple(struct sqlite_conn *c, const char *sql, const char *what,
                       struct sl_error *err)
{
    stmt_done(c);
    if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(c, err, what);
    return 0;
}

static int sqlite_begin(struct sl_sql_conn *pc, struct sl_error *err)
{
    return exec_simple(conn_of(pc), "BEGIN IMMEDIATE", "begin", err);
}

static int sqlite_commit(struct sl_sql_conn *pc, struct sl_error *err)
{
    struct sqlite_conn *c = conn_of(pc);
    if (exec_simple(c, "COMMIT", "commit", err) < 0)
        return -1;
    write_health(c, true);
    return 0;
}

static void sqlite_rollback(struct sl_sql_conn *pc)
{
    struct sqlite_conn *c = conn_of(pc);
    stmt_done(c);
    if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ---- schema ---- */

static const char *sqlite_column_type(const struct sl_schema_column *c, char *buf, size_t size)
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

/* Introspection statements are the driver's own, prepared each time (they
 * run at startup only). */
static int sqlite_names(struct sqlite_conn *c, const char *sql, const char *a1, const char *a2,
                        struct sl_strlist *out, struct sl_error *err)
{
    stmt_done(c);
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(c->db, sql, -1, &stmt, NULL) != SQLITE_OK)
        return db_fail(c, err, "prepare");
    int rc = sqlite3_bind_text(stmt, 1, a1, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK && a2)
        rc = sqlite3_bind_text(stmt, 2, a2, -1, SQLITE_STATIC);
    int r = rc == SQLITE_OK ? 0 : db_fail(c, err, "bind");
    while (r == 0 && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const unsigned char *name = sqlite3_column_text(stmt, 0);
        if (name && sl_strlist_push(out, (const char *)name) < 0)
            r = sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = db_fail(c, err, "step");
    sqlite3_finalize(stmt);
    return r;
}

static int sqlite_table_columns(struct sl_sql_conn *pc, const char *table,
                                struct sl_strlist *out, struct sl_error *err)
{
    return sqlite_names(conn_of(pc), "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
                        table, NULL, out, err);
}

static int sqlite_index_exists(struct sl_sql_conn *pc, const char *table, const char *index,
                               struct sl_error *err)
{
    struct sl_strlist found = {0};
    int rc = sqlite_names(conn_of(pc),
                          "SELECT name FROM sqlite_master WHERE type = 'index' "
                          "AND tbl_name = ?1 AND name = ?2",
                          table, index, &found, err);
    bool exists = found.len > 0;
    sl_strlist_free(&found);
    return rc < 0 ? -1 : exists;
}

static int sqlite_exec_ddl(struct sl_sql_conn *pc, const char *sql, struct sl_error *err)
{
    return exec_simple(conn_of(pc), sql, "schema", err);
}

/* SQLite needs no advisory lock: BEGIN IMMEDIATE holds the write lock, so
 * a second process waits, then finds everything made. */
static int sqlite_ddl_begin(struct sl_sql_conn *pc, struct sl_error *err)
{
    return sqlite_begin(pc, err);
}

static int sqlite_ddl_end(struct sl_sql_conn *pc, bool ok, struct sl_error *err)
{
    if (!ok) {
        sqlite_rollback(pc);
        return 0;
    }
    if (sqlite_commit(pc, err) < 0) {
        sqlite_rollback(pc);
        return -1;
    }
    return 0;
}

/* ---- lifecycle ---- */

static bool sqlite_health(struct sl_sql_db *d, char *why, size_t size)
{
    struct sqlite_db *db = db_of(d);
    bool failing = atomic_load(&db->write_failing);
    if (failing && why && size) {
        pthread_mutex_lock(&db->why_lock);
        snprintf(why, size, "%s", db->why);
        pthread_mutex_unlock(&db->why_lock);
    }
    return !failing;
}

static void conn_close(struct sqlite_conn *c)
{
    for (size_t i = 0; i < SL_SQL_MAX_STMTS; i++)
        sqlite3_finalize(c->stmts[i]);
    sqlite3_close(c->db);
    pthread_mutex_destroy(&c->lock);
}

static void sqlite_close(struct sl_sql_db *d)
{
    if (!d)
        return;
    struct sqlite_db *db = db_of(d);
    conn_close(&db->w);
    conn_close(&db->r);
    pthread_mutex_destroy(&db->why_lock);
    free(db->path);
    free(db);
}

static const struct sl_sql_driver sqlite_driver = {
    .acquire = sqlite_acquire,
    .release = sqlite_release,
    .begin = sqlite_begin,
    .commit = sqlite_commit,
    .rollback = sqlite_rollback,
    .query = sqlite_query,
    .next = sqlite_next,
    .changes = sqlite_changes,
    .col_null = sqlite_col_null,
    .col_int = sqlite_col_int,
    .col_text = sqlite_col_text,
    .try_once = sqlite_try_once,
    .table_columns = sqlite_table_columns,
    .index_exists = sqlite_index_exists,
    .exec_ddl = sqlite_exec_ddl,
    .ddl_begin = sqlite_ddl_begin,
    .ddl_end = sqlite_ddl_end,
    .health = sqlite_health,
    .close = sqlite_close,
};

static int oom(struct sl_error *err)
{
    return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
}

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

    struct sqlite_db *db = calloc(1, sizeof(*db));
    if (!db || !(db->path = strdup(path))) {
        free(db);
        oom(err);
        return NULL;
    }
    pthread_mutex_init(&db->w.lock, NULL);
    pthread_mutex_init(&db->r.lock, NULL);
    pthread_mutex_init(&db->why_lock, NULL);
    db->w.owner = db->r.owner = db;
    db->w.pub.db = db->r.pub.db = &db->pub;
    db->w.is_writer = true;
    db->busy_timeout_ms = busy_timeout_ms;
    db->pub.drv = &sqlite_driver;
    db->pub.dialect = &sqlite_dialect;
    db->pub.backend = "sqlite";
    db->pub.database = db->path;
    /* An in-memory database is private to its connection: reads share the
     * writer's. */
    bool shared = !in_memory;
    struct sqlite_conn *conns[2] = {&db->w, &db->r};
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
            sqlite_close(&db->pub);
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
                 db->busy_timeout_ms);
        if (sqlite3_exec(c->db, pragmas, NULL, NULL, NULL) != SQLITE_OK) {
            db_fail(c, err, "configure");
            sl_error_wrap(err, "%s", path);
            sqlite_close(&db->pub);
            return NULL;
        }
    }
    return sl_sql_store_new(&db->pub, err);
}
