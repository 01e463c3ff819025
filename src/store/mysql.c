/* The MySQL/MariaDB driver of the store core (store/sql_driver.h,
 * libmariadb; spec/FLEET.md §2).
 *
 * Types are the reference's (VARCHAR, INT, BIGINT, DATETIME(6) holding naive
 * UTC, JSON, MEDIUMTEXT, TINYINT(1)); tables are InnoDB, utf8mb4 with
 * utf8mb4_unicode_ci. That collation compares case-insensitively, so two
 * sandbox ids that differ only in case are one row here, as they are for the
 * reference on MySQL (SQLite and PostgreSQL tell them apart).
 *
 * Statements are server-side prepared once per connection; parameters are
 * bound in their binary form (the neutral ?N renders as positional ?, and a
 * number named twice is bound twice), result columns are fetched as text
 * of their exact length. Sessions run READ COMMITTED (as PostgreSQL does by
 * default: a read after a row lock sees what committed before it) with
 * CLIENT_FOUND_ROWS, so an UPDATE that matches a row but changes nothing
 * still counts it: a compare-and-set that writes the values already there
 * has succeeded.
 *
 * Connections come from the pool of store/sql_pool.h. */
#include "store/store.h"

#include <errno.h>
#include <mysql.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "store/schema.h"
#include "store/sql_driver.h"
#include "store/sql_pool.h"

/* FLEET.md §2.4: the named lock every replica's auto-DDL takes. */
#define DDL_LOCK "'agent-sandbox-ddl-2800179869'"
/* Two statement slots past the core's, for introspection. */
#define ST_COLUMNS (SL_SQL_MAX_STMTS - 2)
#define ST_INDEX (SL_SQL_MAX_STMTS - 1)
#define MAX_COLS 32

static const char *my_column_type(const struct sl_schema_column *col, char *buf, size_t size);

static const struct sl_sql_dialect my_dialect = {
    .placeholders = SL_SQL_PH_POSITION,
    .for_update = " FOR UPDATE",
    .octets_fmt = "COALESCE(OCTET_LENGTH(%s), 0)",
    .json_text_fmt = "%s",
    .text_param_fmt = "%s",
    .is_op = "<=>",
    .text_allows_nul = true,
    .table_options = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    .column_type = my_column_type,
};

const struct sl_sql_dialect *sl_mysql_dialect(void) { return &my_dialect; }

struct my_conn {
    struct sl_sql_conn pub; /* first: with the pool's bookkeeping */
    MYSQL *my;
    MYSQL_STMT *stmts[SL_SQL_MAX_STMTS];
    MYSQL_STMT *cur;  /* of the last query */
    unsigned ncols;   /* its result columns, 0 for none */
    /* The current row: each column's bytes (NUL-terminated) or NULL. */
    char *vals[MAX_COLS];
    unsigned long lens[MAX_COLS];
    my_bool nulls[MAX_COLS];
};

struct my_db {
    struct sl_sql_db pub; /* first */
    char *host, *user, *password, *database, *socket;
    unsigned port;
    unsigned connect_timeout, rw_timeout, lock_wait_seconds;
    bool ssl;
    struct sl_sql_pool pool;
};

static struct my_conn *conn_of(struct sl_sql_conn *c) { return (struct my_conn *)c; }
static struct my_db *db_of(struct sl_sql_db *d) { return (struct my_db *)d; }

/* The client's error numbers that mean the connection is gone. */
static bool connection_lost(unsigned code)
{
    return code == 2006 /* CR_SERVER_GONE_ERROR */ || code == 2013 /* CR_SERVER_LOST */ ||
           code == 2002 || code == 2003 || code == 2055 /* lost, reading */ ||
           code == 1927 /* ER_CONNECTION_KILLED */ || code == 4031 /* idle timeout */;
}

static int my_fail(struct my_conn *c, unsigned code, const char *text, const char *what,
                   struct sl_error *err)
{
    if (connection_lost(code)) {
        c->pub.broken = true;
        sl_sql_pool_note(&db_of(c->pub.db)->pool, false, text);
    }
    char line[300];
    snprintf(line, sizeof(line), "%s (%u)", text && *text ? text : "unknown error", code);
    return sl_sql_fail(err, "mysql", what, line);
}

static void row_free(struct my_conn *c)
{
    for (unsigned i = 0; i < MAX_COLS; i++) {
        free(c->vals[i]);
        c->vals[i] = NULL;
    }
}

static void stmt_done(struct my_conn *c)
{
    row_free(c);
    if (c->cur) {
        mysql_stmt_free_result(c->cur);
        mysql_stmt_reset(c->cur);
        c->cur = NULL;
    }
    c->ncols = 0;
}

/* ---- connections ---- */

static void my_conn_close(struct sl_sql_conn *pc)
{
    struct my_conn *c = conn_of(pc);
    stmt_done(c);
    for (size_t i = 0; i < SL_SQL_MAX_STMTS; i++) {
        if (c->stmts[i])
            mysql_stmt_close(c->stmts[i]);
        c->stmts[i] = NULL;
    }
    mysql_close(c->my);
    c->my = NULL;
}

static int session_setup(struct my_conn *c, struct my_db *db)
{
    static const char isolation[] = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SET time_zone = '+00:00', innodb_lock_wait_timeout = %u, "
             "sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')",
             db->lock_wait_seconds);
    return mysql_real_query(c->my, isolation, sizeof(isolation) - 1) == 0 &&
                   mysql_real_query(c->my, sql, strlen(sql)) == 0
               ? 0
               : -1;
}

static int my_conn_open(struct sl_sql_conn *pc, char *text, size_t size)
{
    struct my_conn *c = conn_of(pc);
    struct my_db *db = db_of(pc->db);
    c->my = mysql_init(NULL);
    if (!c->my) {
        snprintf(text, size, "out of memory");
        return -1;
    }
    my_bool yes = 1;
    mysql_options(c->my, MYSQL_OPT_CONNECT_TIMEOUT, &db->connect_timeout);
    mysql_options(c->my, MYSQL_OPT_READ_TIMEOUT, &db->rw_timeout);
    mysql_options(c->my, MYSQL_OPT_WRITE_TIMEOUT, &db->rw_timeout);
    mysql_options(c->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (db->ssl)
        mysql_options(c->my, MYSQL_OPT_SSL_ENFORCE, &yes);
    if (!mysql_real_connect(c->my, db->host, db->user, db->password, db->database, db->port,
                            db->socket, CLIENT_FOUND_ROWS) ||
        session_setup(c, db) < 0) {
        snprintf(text, size, "%s", mysql_error(c->my));
        mysql_close(c->my);
        c->my = NULL;
        return -1;
    }
    return 0;
}

/* No round trip: a lost connection shows at its next statement, which
 * marks it broken for the pool. */
static bool my_conn_alive(struct sl_sql_conn *pc) { return conn_of(pc)->my != NULL; }

static const struct sl_sql_pool_ops my_pool_ops = {
    .open = my_conn_open,
    .close = my_conn_close,
    .alive = my_conn_alive,
};

static struct sl_sql_conn *my_acquire(struct sl_sql_db *d, bool write, struct sl_error *err)
{
    (void)write;
    return sl_sql_pool_acquire(&db_of(d)->pool, err);
}

static void my_release(struct sl_sql_conn *pc)
{
    struct my_conn *c = conn_of(pc);
    stmt_done(c);
    /* A connection left inside a transaction is not handed on. */
    if (c->my && (c->my->server_status & SERVER_STATUS_IN_TRANS))
        pc->broken = true;
    sl_sql_pool_release(&db_of(pc->db)->pool, pc);
}

/* ---- statements ---- */

static int run_query(struct my_conn *c, int id, const char *sql, const struct sl_sql_arg *args,
                     const unsigned char *order, int norder, struct sl_error *err)
{
    stmt_done(c);
    if (!c->stmts[id]) {
        MYSQL_STMT *stmt = mysql_stmt_init(c->my);
        if (!stmt)
            return my_fail(c, mysql_errno(c->my), mysql_error(c->my), "prepare", err);
        if (mysql_stmt_prepare(stmt, sql, strlen(sql)) != 0) {
            int rc = my_fail(c, mysql_stmt_errno(stmt), mysql_stmt_error(stmt), "prepare", err);
            mysql_stmt_close(stmt);
            return rc;
        }
        c->stmts[id] = stmt;
    }
    MYSQL_STMT *stmt = c->stmts[id];
    MYSQL_BIND bind[SL_SQL_MAX_ARGS * 2];
    long long ints[SL_SQL_MAX_ARGS * 2];
    unsigned long lens[SL_SQL_MAX_ARGS * 2];
    memset(bind, 0, sizeof(bind));
    for (int k = 0; k < norder; k++) {
        const struct sl_sql_arg *a = &args[order[k] - 1];
        switch (a->kind) {
        case SL_SQL_NULL:
            bind[k].buffer_type = MYSQL_TYPE_NULL;
            break;
        case SL_SQL_INT:
        case SL_SQL_BOOL:
            ints[k] = a->i;
            bind[k].buffer_type = MYSQL_TYPE_LONGLONG;
            bind[k].buffer = &ints[k];
            break;
        case SL_SQL_TEXT:
        case SL_SQL_TS: /* the server reads a DATETIME(6) from its text */
            lens[k] = (unsigned long)a->len;
            bind[k].buffer_type = MYSQL_TYPE_STRING;
            bind[k].buffer = (void *)a->s;
            bind[k].buffer_length = lens[k];
            bind[k].length = &lens[k];
            break;
        }
    }
    if ((norder && mysql_stmt_bind_param(stmt, bind) != 0) || mysql_stmt_execute(stmt) != 0) {
        unsigned code = mysql_stmt_errno(stmt);
        int rc = my_fail(c, code, mysql_stmt_error(stmt), "query", err);
        /* 1062 ER_DUP_ENTRY: a primary key or a unique constraint. */
        return code == 1062 ? SL_SQL_CONFLICT : rc;
    }
    c->cur = stmt;
    c->ncols = mysql_stmt_field_count(stmt);
    if (c->ncols > MAX_COLS)
        return sl_sql_fail(err, "mysql", "query", "too many result columns");
    if (c->ncols && mysql_stmt_store_result(stmt) != 0)
        return my_fail(c, mysql_stmt_errno(stmt), mysql_stmt_error(stmt), "store", err);
    sl_sql_pool_note(&db_of(c->pub.db)->pool, true, NULL);
    return 0;
}

static int my_query(struct sl_sql_conn *pc, int id, const struct sl_sql_text *text,
                    const struct sl_sql_arg *args, int nargs, struct sl_error *err)
{
    (void)nargs;
    return run_query(conn_of(pc), id, text->sql, args, text->order, text->norder, err);
}

/* One row: every column as text of its exact length (a first fetch with no
 * buffers learns the lengths, then each column is read into its own). */
static int my_next(struct sl_sql_conn *pc, struct sl_error *err)
{
    struct my_conn *c = conn_of(pc);
    if (!c->cur || !c->ncols)
        return 0;
    row_free(c);
    MYSQL_BIND out[MAX_COLS];
    memset(out, 0, sizeof(out));
    for (unsigned i = 0; i < c->ncols; i++) {
        out[i].buffer_type = MYSQL_TYPE_STRING;
        out[i].length = &c->lens[i];
        out[i].is_null = &c->nulls[i];
    }
    if (mysql_stmt_bind_result(c->cur, out) != 0)
        return my_fail(c, mysql_stmt_errno(c->cur), mysql_stmt_error(c->cur), "bind", err);
    int rc = mysql_stmt_fetch(c->cur);
    if (rc == MYSQL_NO_DATA)
        return 0;
    if (rc == 1)
        return my_fail(c, mysql_stmt_errno(c->cur), mysql_stmt_error(c->cur), "fetch", err);
    for (unsigned i = 0; i < c->ncols; i++) {
        if (c->nulls[i])
            continue;
        c->vals[i] = malloc(c->lens[i] + 1);
        if (!c->vals[i])
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        MYSQL_BIND col;
        memset(&col, 0, sizeof(col));
        col.buffer_type = MYSQL_TYPE_STRING;
        col.buffer = c->vals[i];
        col.buffer_length = c->lens[i] + 1;
        unsigned long got = 0;
        col.length = &got;
        if (c->lens[i] > 0 && mysql_stmt_fetch_column(c->cur, &col, i, 0) != 0)
            return my_fail(c, mysql_stmt_errno(c->cur), mysql_stmt_error(c->cur), "fetch", err);
        c->vals[i][c->lens[i]] = '\0';
    }
    return 1;
}

static int64_t my_changes(struct sl_sql_conn *pc)
{
    struct my_conn *c = conn_of(pc);
    return c->cur ? (int64_t)mysql_stmt_affected_rows(c->cur) : 0;
}

static bool my_col_null(struct sl_sql_conn *pc, int i) { return conn_of(pc)->vals[i] == NULL; }

static int64_t my_col_int(struct sl_sql_conn *pc, int i)
{
    const char *v = conn_of(pc)->vals[i];
    return v ? strtoll(v, NULL, 10) : 0;
}

static const char *my_col_text(struct sl_sql_conn *pc, int i, size_t *len)
{
    struct my_conn *c = conn_of(pc);
    *len = c->vals[i] ? c->lens[i] : 0;
    return c->vals[i];
}

/* ---- transactions ---- */

static int simple(struct my_conn *c, const char *sql, struct sl_error *err)
{
    stmt_done(c);
    if (mysql_real_query(c->my, sql, strlen(sql)) != 0)
        return my_fail(c, mysql_errno(c->my), mysql_error(c->my), sql, err);
    MYSQL_RES *res = mysql_store_result(c->my);
    mysql_free_result(res);
    return 0;
}

static int my_begin(struct sl_sql_conn *pc, struct sl_error *err)
{
    return simple(conn_of(pc), "START TRANSACTION", err);
}

static int my_commit(struct sl_sql_conn *pc, struct sl_error *err)
{
    return simple(conn_of(pc), "COMMIT", err);
}

static void my_rollback(struct sl_sql_conn *pc)
{
    struct my_conn *c = conn_of(pc);
    if (c->my)
        (void)simple(c, "ROLLBACK", NULL);
}

/* ---- schema ---- */

static const char *my_column_type(const struct sl_schema_column *col, char *buf, size_t size)
{
    switch (col->type) {
    case SL_SCHEMA_STRING:
        snprintf(buf, size, "VARCHAR(%d)", col->length);
        return buf;
    case SL_SCHEMA_INTEGER:
        return "INT";
    case SL_SCHEMA_BIGINT:
        return "BIGINT";
    case SL_SCHEMA_DATETIME:
        return "DATETIME(6)";
    case SL_SCHEMA_JSON:
        return "JSON";
    case SL_SCHEMA_TEXT:
        return "MEDIUMTEXT";
    case SL_SCHEMA_BOOLEAN:
        return "TINYINT(1)";
    }
    return "MEDIUMTEXT";
}

/* An introspection query with text parameters ?1 (and ?2): every first
 * column into *out. */
static int names(struct my_conn *c, int id, const char *sql, const char *a1, const char *a2,
                 struct sl_strlist *out, struct sl_error *err)
{
    struct sl_sql_arg args[2] = {
        {.kind = SL_SQL_TEXT, .s = a1, .len = strlen(a1)},
        {.kind = a2 ? SL_SQL_TEXT : SL_SQL_NULL, .s = a2, .len = a2 ? strlen(a2) : 0},
    };
    static const unsigned char order[] = {1, 2};
    if (run_query(c, id, sql, args, order, a2 ? 2 : 1, err) < 0)
        return -1;
    int r;
    while ((r = my_next(&c->pub, err)) == 1)
        if (c->vals[0] && sl_strlist_push(out, c->vals[0]) < 0)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return r;
}

static int my_table_columns(struct sl_sql_conn *pc, const char *table, struct sl_strlist *out,
                            struct sl_error *err)
{
    return names(conn_of(pc), ST_COLUMNS,
                 "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
                 "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                 table, NULL, out, err);
}

static int my_index_exists(struct sl_sql_conn *pc, const char *table, const char *index,
                           struct sl_error *err)
{
    struct sl_strlist found = {0};
    int rc = names(conn_of(pc), ST_INDEX,
                   "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS "
                   "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?",
                   table, index, &found, err);
    bool exists = found.len > 0;
    sl_strlist_free(&found);
    return rc < 0 ? -1 : exists;
}

static int my_exec_ddl(struct sl_sql_conn *pc, const char *sql, struct sl_error *err)
{
    return simple(conn_of(pc), sql, err);
}

/* FLEET.md §2.4: GET_LOCK must answer 1 within 60 s (else another replica
 * is creating the schema and this one does not start); MySQL commits each
 * DDL statement by itself, so the lock is what serialises replicas. */
static int my_ddl_begin(struct sl_sql_conn *pc, struct sl_error *err)
{
    struct my_conn *c = conn_of(pc);
    stmt_done(c);
    const char *sql = "SELECT GET_LOCK(" DDL_LOCK ", 60)";
    if (mysql_real_query(c->my, sql, strlen(sql)) != 0)
        return my_fail(c, mysql_errno(c->my), mysql_error(c->my), "GET_LOCK", err);
    MYSQL_RES *res = mysql_store_result(c->my);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    bool locked = row && row[0] && strcmp(row[0], "1") == 0;
    mysql_free_result(res);
    if (!locked)
        return sl_sql_fail(err, "mysql", "GET_LOCK",
                           "another replica holds the schema lock (60 s): it is creating the "
                           "schema");
    return 0;
}

static int my_ddl_end(struct sl_sql_conn *pc, bool ok, struct sl_error *err)
{
    (void)ok;
    return simple(conn_of(pc), "SELECT RELEASE_LOCK(" DDL_LOCK ")", err);
}

/* ---- lifecycle ---- */

static bool my_health(struct sl_sql_db *d, char *why, size_t size)
{
    return sl_sql_pool_health(&db_of(d)->pool, why, size);
}

static void my_close(struct sl_sql_db *d)
{
    if (!d)
        return;
    struct my_db *db = db_of(d);
    if (db->pool.conns)
        sl_sql_pool_destroy(&db->pool);
    free(db->host);
    free(db->user);
    sl_free_secret(db->password);
    free(db->database);
    free(db->socket);
    free(db);
}

static const struct sl_sql_driver my_driver = {
    .acquire = my_acquire,
    .release = my_release,
    .begin = my_begin,
    .commit = my_commit,
    .rollback = my_rollback,
    .query = my_query,
    .next = my_next,
    .changes = my_changes,
    .col_null = my_col_null,
    .col_int = my_col_int,
    .col_text = my_col_text,
    .try_once = NULL,
    .table_columns = my_table_columns,
    .index_exists = my_index_exists,
    .exec_ddl = my_exec_ddl,
    .ddl_begin = my_ddl_begin,
    .ddl_end = my_ddl_end,
    .health = my_health,
    .close = my_close,
};

/* ---- the URL ---- */

/* "mysql+aiomysql://user:pass@host:port/db?unix_socket=/x&ssl=true":
 * the parts libmariadb takes; query options it has no use for are named in
 * *dropped (charset is always utf8mb4 here). -1 when out of memory or the
 * URL has no authority. */
static int parse_url(struct my_db *db, const char *url, struct sl_strlist *dropped)
{
    const char *rest = strstr(url, "://");
    if (!rest)
        return -1;
    rest += 3;
    size_t end = strcspn(rest, "?#");
    const char *at = NULL;
    for (const char *p = rest; p < rest + end; p++)
        if (*p == '@')
            at = p;
    const char *host = at ? at + 1 : rest;
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        db->user = sl_percent_decode(rest, (size_t)((colon ? colon : at) - rest));
        db->password = colon ? sl_percent_decode(colon + 1, (size_t)(at - colon - 1)) : NULL;
        if (!db->user || (colon && !db->password))
            return -1;
    }
    const char *slash = memchr(host, '/', (size_t)(rest + end - host));
    const char *host_end = slash ? slash : rest + end;
    const char *port = NULL;
    if (*host == '[') { /* [ipv6]:port */
        const char *close = memchr(host, ']', (size_t)(host_end - host));
        if (close) {
            db->host = strndup(host + 1, (size_t)(close - host - 1));
            port = close[1] == ':' ? close + 2 : NULL;
        }
    } else {
        const char *colon = memchr(host, ':', (size_t)(host_end - host));
        db->host = strndup(host, (size_t)((colon ? colon : host_end) - host));
        port = colon ? colon + 1 : NULL;
    }
    if (!db->host)
        return -1;
    db->port = port ? (unsigned)strtoul(port, NULL, 10) : 3306;
    db->database = slash ? sl_percent_decode(slash + 1, (size_t)(rest + end - slash - 1)) : strdup("");
    if (!db->database)
        return -1;
    for (const char *q = rest[end] == '?' ? rest + end + 1 : NULL; q && *q;) {
        size_t n = strcspn(q, "&#");
        size_t klen = strcspn(q, "=");
        if (klen > n)
            klen = n;
        const char *value = klen < n ? q + klen + 1 : "";
        size_t vlen = klen < n ? n - klen - 1 : 0;
        char key[64];
        snprintf(key, sizeof(key), "%.*s", (int)(klen < 63 ? klen : 63), q);
        if (strcmp(key, "unix_socket") == 0) {
            free(db->socket);
            if (!(db->socket = sl_percent_decode(value, vlen)))
                return -1;
        } else if (strcmp(key, "ssl") == 0 || strcmp(key, "ssl_mode") == 0) {
            db->ssl = !(vlen == 5 && strncasecmp(value, "false", 5) == 0) &&
                      !(vlen == 8 && strncasecmp(value, "DISABLED", 8) == 0);
        } else if (strcmp(key, "charset") != 0 && klen > 0 &&
                   sl_strlist_push(dropped, key) < 0) {
            return -1;
        }
        q += n;
        if (*q == '&')
            q++;
        else
            break;
    }
    return 0;
}

struct sl_store *sl_store_mysql_open(const struct sl_server_db_options *o, struct sl_error *err)
{
    /* Once, before any thread uses the library (startup is single-threaded). */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, (void (*)(void))mysql_library_init);
    struct my_db *db = calloc(1, sizeof(*db));
    if (!db) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    db->pub.drv = &my_driver;
    db->pub.dialect = &my_dialect;
    db->pub.backend = "mysql";
    db->connect_timeout = (unsigned)(o->connect_timeout_seconds > 0 ? o->connect_timeout_seconds : 10);
    db->rw_timeout = (unsigned)(o->statement_timeout_ms / 1000 > 0 ? o->statement_timeout_ms / 1000 : 60);
    db->lock_wait_seconds = (unsigned)(o->wait_ms / 1000 > 0 ? o->wait_ms / 1000 : 1);
    struct sl_strlist dropped = {0};
    bool ok = sl_sql_pool_init(&db->pool, &db->pub, &my_pool_ops, o->pool_size,
                               sizeof(struct my_conn), o->wait_ms * 1000,
                               o->recycle_seconds > 0 ? o->recycle_seconds * 1000000 : 0) == 0 &&
              parse_url(db, o->url, &dropped) == 0;
    db->pub.database = db->database;
    if (!ok) {
        sl_strlist_free(&dropped);
        my_close(&db->pub);
        sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_DATABASE_URL: not a MySQL URL");
        return NULL;
    }
    if (o->dropped)
        *o->dropped = dropped;
    else
        sl_strlist_free(&dropped);
    return sl_sql_store_new(&db->pub, err);
}
