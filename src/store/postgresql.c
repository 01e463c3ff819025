/* The PostgreSQL driver of the store core (store/sql_driver.h, libpq;
 * spec/FLEET.md §2).
 *
 * Types are the reference's (VARCHAR, INTEGER, BIGINT, TIMESTAMP without
 * time zone holding naive UTC, JSON, TEXT, BOOLEAN). Values travel as text:
 * every parameter in its text form, every column read back as text (the
 * session runs DateStyle ISO, so a timestamp reads "2026-12-02 05:30:00.5").
 *
 * Connections come from the pool of store/sql_pool.h (opened on first use,
 * reopened when broken, one attempt a second while the server is away).
 *
 * Statements are prepared once per connection (named sl<id>), with the
 * parameter types left to the server. */
#include "store/store.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "store/schema.h"
#include "store/sql_driver.h"
#include "store/sql_pool.h"

/* FLEET.md §2.4: the advisory lock every replica's auto-DDL takes. */
#define DDL_LOCK_KEY "2800179869"

static const char *pg_column_type(const struct sl_schema_column *col, char *buf, size_t size);

static const struct sl_sql_dialect pg_dialect = {
    .placeholders = SL_SQL_PH_DOLLAR,
    .for_update = " FOR UPDATE",
    .octets_fmt = "COALESCE(octet_length(%s), 0)",
    /* json has no equality operator; its text is the document as written. */
    .json_text_fmt = "%s::text",
    .text_param_fmt = "CAST(%s AS TEXT)",
    .is_op = "IS NOT DISTINCT FROM",
    .text_allows_nul = false,
    .create_index_if_not_exists = true,
    .table_options = "",
    .column_type = pg_column_type,
};

const struct sl_sql_dialect *sl_postgresql_dialect(void) { return &pg_dialect; }

/* A statement of query_at_commit: its name and copies of its values. */
#define PG_MAX_QUEUED 4
struct pg_queued {
    char name[16];
    int nargs;
    char *values[SL_SQL_MAX_ARGS];
};

struct pg_conn {
    struct sl_sql_conn pub; /* first: with the pool's bookkeeping */
    PGconn *pg;
    bool prepared[SL_SQL_MAX_STMTS];
    PGresult *res; /* of the last query */
    int row, nrows;
    /* A transaction begun but not sent yet: its BEGIN goes with the first
     * statement, in one round trip (pipeline mode). */
    bool begin_pending;
    /* Writes queued to go with the next statement or the COMMIT. */
    struct pg_queued queued[PG_MAX_QUEUED];
    int nqueued;
};

struct pg_db {
    struct sl_sql_db pub; /* first */
    /* PQconnectdbParams() keywords and values, NULL-terminated. */
    const char *keywords[12];
    char *values[12];
    char *database;
    struct sl_sql_pool pool;
};

static struct pg_conn *conn_of(struct sl_sql_conn *c) { return (struct pg_conn *)c; }
static void queue_clear(struct pg_conn *c);
static struct pg_db *db_of(struct sl_sql_db *d) { return (struct pg_db *)d; }

/* The first line of libpq's text, for the operator (never a password:
 * libpq does not print it). */
static void first_line(const char *text, char *out, size_t size)
{
    snprintf(out, size, "%s", text && *text ? text : "unknown error");
    out[strcspn(out, "\n")] = '\0';
}

static int pg_fail(struct pg_conn *c, struct sl_error *err, const char *what, const char *text)
{
    char line[256];
    first_line(text, line, sizeof(line));
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
        c->pub.broken = true;
        sl_sql_pool_note(&db_of(c->pub.db)->pool, false, line);
    }
    return sl_sql_fail(err, "postgresql", what, line);
}

/* ---- connections ---- */

static void pg_conn_close(struct sl_sql_conn *pc)
{
    struct pg_conn *c = conn_of(pc);
    PQclear(c->res);
    c->res = NULL;
    PQfinish(c->pg);
    c->pg = NULL;
    memset(c->prepared, 0, sizeof(c->prepared));
}

/* CREATE TABLE IF NOT EXISTS and friends send NOTICEs; libpq would print
 * them on stderr. */
static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static int pg_conn_open(struct sl_sql_conn *pc, char *text, size_t size)
{
    struct pg_conn *c = conn_of(pc);
    struct pg_db *db = db_of(pc->db);
    c->pg = PQconnectdbParams(db->keywords, (const char *const *)db->values, 1);
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
        first_line(c->pg ? PQerrorMessage(c->pg) : "out of memory", text, size);
        PQfinish(c->pg);
        c->pg = NULL;
        return -1;
    }
    PQsetNoticeProcessor(c->pg, quiet_notices, NULL);
    return 0;
}

static bool pg_conn_alive(struct sl_sql_conn *pc)
{
    return PQstatus(conn_of(pc)->pg) == CONNECTION_OK;
}

static const struct sl_sql_pool_ops pg_pool_ops = {
    .open = pg_conn_open,
    .close = pg_conn_close,
    .alive = pg_conn_alive,
};

static struct sl_sql_conn *pg_acquire(struct sl_sql_db *d, bool write, struct sl_error *err)
{
    (void)write;
    return sl_sql_pool_acquire(&db_of(d)->pool, err);
}

static void pg_release(struct sl_sql_conn *pc)
{
    struct pg_conn *c = conn_of(pc);
    PQclear(c->res);
    c->res = NULL;
    c->begin_pending = false;
    queue_clear(c); /* a method that neither committed nor rolled back */
    /* A connection left inside a transaction (a bug, or a failed
     * rollback) is not handed to the next method. */
    if (c->pg && PQtransactionStatus(c->pg) != PQTRANS_IDLE)
        pc->broken = true;
    sl_sql_pool_release(&db_of(pc->db)->pool, pc);
}

/* ---- statements ---- */

/* The outcome of a result: 0, SL_SQL_CONFLICT or -1; keeps it in c->res. */
static int take_result(struct pg_conn *c, PGresult *res, const char *what, struct sl_error *err)
{
    PQclear(c->res);
    c->res = res;
    c->row = -1;
    c->nrows = 0;
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        c->nrows = PQntuples(res);
        sl_sql_pool_note(&db_of(c->pub.db)->pool, true, NULL);
        return 0;
    }
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    pg_fail(c, err, what, res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
    /* 23505 unique_violation: a primary key or a unique constraint. */
    return state && strcmp(state, "23505") == 0 ? SL_SQL_CONFLICT : -1;
}

/* The next result of a pipeline and the NULL that ends it. */
static PGresult *pipeline_result(PGconn *pg)
{
    PGresult *res = PQgetResult(pg);
    PGresult *extra;
    while (res && (extra = PQgetResult(pg)) != NULL)
        PQclear(extra);
    return res;
}

static void queue_clear(struct pg_conn *c)
{
    for (int q = 0; q < c->nqueued; q++)
        for (int i = 0; i < c->queued[q].nargs; i++)
            free(c->queued[q].values[i]);
    c->nqueued = 0;
}

/* One statement of a pipeline: a prepared one and its values. */
struct pg_item {
    const char *name;
    int nargs;
    const char *const *values;
};

/* [BEGIN when pending], the items, [COMMIT], sent in pipeline mode with one
 * sync: one round trip. The first failure is the outcome (what follows it
 * was not run: PGRES_PIPELINE_ABORTED); otherwise the last result stays in
 * c->res, as a query's. */
static int pipeline(struct pg_conn *c, const struct pg_item *items, int n, bool commit,
                    struct sl_error *err)
{
    bool begin = c->begin_pending;
    c->begin_pending = false;
    if (PQenterPipelineMode(c->pg) != 1) {
        /* Not idle (cannot happen between statements): one at a time. */
        int rc = begin ? take_result(c, PQexec(c->pg, "BEGIN"), "BEGIN", err) : 0;
        for (int k = 0; rc == 0 && k < n; k++)
            rc = take_result(c,
                             PQexecPrepared(c->pg, items[k].name, items[k].nargs,
                                            items[k].values, NULL, NULL, 0),
                             "query", err);
        if (rc == 0 && commit)
            rc = take_result(c, PQexec(c->pg, "COMMIT"), "COMMIT", err);
        return rc;
    }
    bool sent = !begin || PQsendQueryParams(c->pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) == 1;
    for (int k = 0; sent && k < n; k++)
        sent = PQsendQueryPrepared(c->pg, items[k].name, items[k].nargs, items[k].values, NULL,
                                   NULL, 0) == 1;
    if (sent && commit)
        sent = PQsendQueryParams(c->pg, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) == 1;
    sent = sent && PQpipelineSync(c->pg) == 1;
    int total = (begin ? 1 : 0) + n + (commit ? 1 : 0);
    PGresult *failed = NULL, *last = NULL;
    const char *failed_what = "query";
    bool lost = !sent;
    for (int k = 0; !lost && k < total; k++) {
        PGresult *r = pipeline_result(c->pg);
        if (!r) {
            lost = true; /* the connection went: no result at all */
            break;
        }
        ExecStatusType st = PQresultStatus(r);
        if (!failed && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            failed = r;
            failed_what = begin && k == 0 ? "BEGIN" : commit && k == total - 1 ? "COMMIT" : "query";
        } else if (!failed && k == total - 1) {
            last = r;
        } else {
            PQclear(r);
        }
    }
    PGresult *sync = lost ? NULL : PQgetResult(c->pg);
    bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (!synced || PQexitPipelineMode(c->pg) != 1)
        c->pub.broken = true; /* results out of step: never reuse this connection */
    if (failed || lost)
        return take_result(c, failed, failed_what, err); /* NULL: the connection's error */
    return take_result(c, last, commit ? "COMMIT" : "query", err);
}

/* Prepared once per connection, as "sl<id>". */
static int prepare_once(struct pg_conn *c, int id, const struct sl_sql_text *text, int nargs,
                        struct sl_error *err)
{
    if (c->prepared[id])
        return 0;
    char name[16];
    snprintf(name, sizeof(name), "sl%d", id);
    /* A parameter the text never names (route_cas binds the uid and
     * created_at it does not write) has no type to infer: say text. */
    Oid types[SL_SQL_MAX_ARGS] = {0};
    for (int i = 0; i < nargs; i++) {
        char ph[16];
        int n = snprintf(ph, sizeof(ph), "$%d", i + 1);
        const char *at = text->sql;
        bool named = false;
        while (!named && (at = strstr(at, ph)) != NULL) {
            named = at[n] < '0' || at[n] > '9';
            at += n;
        }
        types[i] = named ? 0 : 25; /* TEXTOID */
    }
    if (take_result(c, PQprepare(c->pg, name, text->sql, nargs, types), "prepare", err) < 0)
        return -1;
    c->prepared[id] = true;
    return 0;
}

/* The text form of each argument; ints[] holds the numbers'. */
static void bind_values(const struct sl_sql_arg *args, int nargs,
                        const char *values[SL_SQL_MAX_ARGS], char ints[SL_SQL_MAX_ARGS][24])
{
    for (int i = 0; i < nargs; i++) {
        const struct sl_sql_arg *a = &args[i];
        switch (a->kind) {
        case SL_SQL_NULL:
            values[i] = NULL;
            break;
        case SL_SQL_INT:
            snprintf(ints[i], sizeof(ints[i]), "%lld", (long long)a->i);
            values[i] = ints[i];
            break;
        case SL_SQL_BOOL:
            values[i] = a->i ? "true" : "false";
            break;
        case SL_SQL_TEXT:
        case SL_SQL_TS:
            values[i] = a->s; /* NUL-terminated: text carries no NUL here */
            break;
        }
    }
}

static int query_once(struct sl_sql_conn *pc, int id, const struct sl_sql_text *text,
                      const struct sl_sql_arg *args, int nargs, struct sl_error *err)
{
    struct pg_conn *c = conn_of(pc);
    if (prepare_once(c, id, text, nargs, err) < 0)
        return -1;
    char name[16];
    snprintf(name, sizeof(name), "sl%d", id);
    const char *values[SL_SQL_MAX_ARGS];
    char ints[SL_SQL_MAX_ARGS][24];
    bind_values(args, nargs, values, ints);
    if (!c->begin_pending && c->nqueued == 0)
        return take_result(c, PQexecPrepared(c->pg, name, nargs, values, NULL, NULL, 0),
                           "query", err);
    /* A BEGIN or queued writes go first, in the same round trip. */
    struct pg_item items[PG_MAX_QUEUED + 1];
    int n = 0;
    for (; n < c->nqueued; n++)
        items[n] = (struct pg_item){c->queued[n].name, c->queued[n].nargs,
                                    (const char *const *)c->queued[n].values};
    items[n++] = (struct pg_item){name, nargs, values};
    int rc = pipeline(c, items, n, false, err);
    queue_clear(c);
    return rc;
}

/* A statement whose result nobody reads (a write, a row lock): queued, sent
 * with the next statement or the COMMIT in the same round trip; its
 * failure is theirs. */
static int pg_query_at_commit(struct sl_sql_conn *pc, int id, const struct sl_sql_text *text,
                              const struct sl_sql_arg *args, int nargs, struct sl_error *err)
{
    struct pg_conn *c = conn_of(pc);
    if (c->nqueued == PG_MAX_QUEUED)
        return query_once(pc, id, text, args, nargs, err) < 0 ? -1 : 0;
    if (prepare_once(c, id, text, nargs, err) < 0)
        return -1;
    const char *values[SL_SQL_MAX_ARGS];
    char ints[SL_SQL_MAX_ARGS][24];
    bind_values(args, nargs, values, ints);
    struct pg_queued *q = &c->queued[c->nqueued];
    snprintf(q->name, sizeof(q->name), "sl%d", id);
    q->nargs = 0;
    for (int i = 0; i < nargs; i++, q->nargs++) {
        q->values[i] = values[i] ? strdup(values[i]) : NULL;
        if (values[i] && !q->values[i]) {
            c->nqueued++; /* freed with the rest */
            queue_clear(c);
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        }
    }
    c->nqueued++;
    return 0;
}

/* SQLSTATE of the last result, "" if none. */
static const char *last_state(const struct pg_conn *c)
{
    const char *state = c->res ? PQresultErrorField(c->res, PG_DIAG_SQLSTATE) : NULL;
    return state ? state : "";
}

static int pg_query(struct sl_sql_conn *pc, int id, const struct sl_sql_text *text,
                    const struct sl_sql_arg *args, int nargs, struct sl_error *err)
{
    struct pg_conn *c = conn_of(pc);
    int rc = query_once(pc, id, text, args, nargs, err);
    /* 0A000 "cached plan must not change result type": the table changed
     * under the prepared statements (an operator's ALTER TABLE). Outside a
     * transaction they are made again and the statement retried once;
     * inside one the transaction is lost, and the connection is reopened
     * before its next use. */
    if (rc == -1 && strcmp(last_state(c), "0A000") == 0) {
        if (PQtransactionStatus(c->pg) != PQTRANS_IDLE) {
            c->pub.broken = true;
            return -1;
        }
        PQclear(PQexec(c->pg, "DEALLOCATE ALL"));
        memset(c->prepared, 0, sizeof(c->prepared));
        rc = query_once(pc, id, text, args, nargs, err);
    }
    return rc;
}

static int pg_next(struct sl_sql_conn *pc, struct sl_error *err)
{
    (void)err;
    struct pg_conn *c = conn_of(pc);
    if (!c->res || c->row + 1 >= c->nrows)
        return 0;
    c->row++;
    return 1;
}

static int64_t pg_changes(struct sl_sql_conn *pc)
{
    struct pg_conn *c = conn_of(pc);
    const char *n = c->res ? PQcmdTuples(c->res) : "";
    return *n ? strtoll(n, NULL, 10) : 0;
}

static bool pg_col_null(struct sl_sql_conn *pc, int i)
{
    struct pg_conn *c = conn_of(pc);
    return PQgetisnull(c->res, c->row, i);
}

static int64_t pg_col_int(struct sl_sql_conn *pc, int i)
{
    struct pg_conn *c = conn_of(pc);
    return strtoll(PQgetvalue(c->res, c->row, i), NULL, 10);
}

static const char *pg_col_text(struct sl_sql_conn *pc, int i, size_t *len)
{
    struct pg_conn *c = conn_of(pc);
    if (PQgetisnull(c->res, c->row, i)) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)PQgetlength(c->res, c->row, i);
    return PQgetvalue(c->res, c->row, i);
}

/* ---- transactions ---- */

static int simple(struct pg_conn *c, const char *sql, struct sl_error *err)
{
    return take_result(c, PQexec(c->pg, sql), sql, err) < 0 ? -1 : 0;
}

static int pg_begin(struct sl_sql_conn *pc, struct sl_error *err)
{
    (void)err;
    conn_of(pc)->begin_pending = true; /* sent with the first statement */
    return 0;
}

static int pg_commit(struct sl_sql_conn *pc, struct sl_error *err)
{
    struct pg_conn *c = conn_of(pc);
    if (c->begin_pending && c->nqueued == 0) {
        c->begin_pending = false; /* nothing was sent: nothing to commit */
        return 0;
    }
    if (c->nqueued > 0) {
        struct pg_item items[PG_MAX_QUEUED];
        for (int k = 0; k < c->nqueued; k++)
            items[k] = (struct pg_item){c->queued[k].name, c->queued[k].nargs,
                                        (const char *const *)c->queued[k].values};
        int rc = pipeline(c, items, c->nqueued, true, err);
        queue_clear(c);
        if (rc < 0)
            return -1;
    } else if (simple(c, "COMMIT", err) < 0) {
        return -1;
    }
    /* COMMIT of a transaction an error aborted answers ROLLBACK, not an
     * error. */
    if (strcmp(PQcmdStatus(c->res), "COMMIT") != 0)
        return sl_sql_fail(err, "postgresql", "commit", "the transaction was rolled back");
    return 0;
}

static void pg_rollback(struct sl_sql_conn *pc)
{
    struct pg_conn *c = conn_of(pc);
    c->begin_pending = false;
    queue_clear(c);
    if (c->pg && PQtransactionStatus(c->pg) != PQTRANS_IDLE)
        (void)simple(c, "ROLLBACK", NULL);
}

/* ---- schema ---- */

static const char *pg_column_type(const struct sl_schema_column *col, char *buf, size_t size)
{
    switch (col->type) {
    case SL_SCHEMA_STRING:
        snprintf(buf, size, "VARCHAR(%d)", col->length);
        return buf;
    case SL_SCHEMA_INTEGER:
        return "INTEGER";
    case SL_SCHEMA_BIGINT:
        return "BIGINT";
    case SL_SCHEMA_DATETIME:
        return "TIMESTAMP"; /* without time zone: naive UTC */
    case SL_SCHEMA_JSON:
        return "JSON";
    case SL_SCHEMA_TEXT:
        return "TEXT";
    case SL_SCHEMA_BOOLEAN:
        return "BOOLEAN";
    }
    return "TEXT";
}

/* An introspection query with one or two text parameters: every first
 * column into *out. */
static int names(struct pg_conn *c, const char *sql, const char *a1, const char *a2,
                 struct sl_strlist *out, struct sl_error *err)
{
    const char *values[2] = {a1, a2};
    if (take_result(c, PQexecParams(c->pg, sql, a2 ? 2 : 1, NULL, values, NULL, NULL, 0),
                    "introspect", err) < 0)
        return -1;
    for (int r = 0; r < c->nrows; r++)
        if (sl_strlist_push(out, PQgetvalue(c->res, r, 0)) < 0)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

static int pg_table_columns(struct sl_sql_conn *pc, const char *table, struct sl_strlist *out,
                            struct sl_error *err)
{
    return names(conn_of(pc),
                 "SELECT column_name FROM information_schema.columns "
                 "WHERE table_schema = current_schema() AND table_name = $1 "
                 "ORDER BY ordinal_position",
                 table, NULL, out, err);
}

static int pg_index_exists(struct sl_sql_conn *pc, const char *table, const char *index,
                           struct sl_error *err)
{
    struct sl_strlist found = {0};
    int rc = names(conn_of(pc),
                   "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                   "AND tablename = $1 AND indexname = $2",
                   table, index, &found, err);
    bool exists = found.len > 0;
    sl_strlist_free(&found);
    return rc < 0 ? -1 : exists;
}

static int pg_exec_ddl(struct sl_sql_conn *pc, const char *sql, struct sl_error *err)
{
    return simple(conn_of(pc), sql, err);
}

/* FLEET.md §2.4: one transaction under pg_advisory_xact_lock (released at
 * its end), so replicas starting at once create the schema one at a time. */
static int pg_ddl_begin(struct sl_sql_conn *pc, struct sl_error *err)
{
    struct pg_conn *c = conn_of(pc);
    if (simple(c, "BEGIN", err) < 0)
        return -1;
    if (simple(c, "SELECT pg_advisory_xact_lock(" DDL_LOCK_KEY ")", err) < 0) {
        pg_rollback(pc);
        return -1;
    }
    return 0;
}

static int pg_ddl_end(struct sl_sql_conn *pc, bool ok, struct sl_error *err)
{
    if (!ok) {
        pg_rollback(pc);
        return 0;
    }
    if (pg_commit(pc, err) < 0) {
        pg_rollback(pc);
        return -1;
    }
    return 0;
}

/* ---- lifecycle ---- */

static bool pg_health(struct sl_sql_db *d, char *why, size_t size)
{
    return sl_sql_pool_health(&db_of(d)->pool, why, size);
}

static void pg_close(struct sl_sql_db *d)
{
    if (!d)
        return;
    struct pg_db *db = db_of(d);
    if (db->pool.conns)
        sl_sql_pool_destroy(&db->pool);
    for (size_t i = 0; i < SL_ARRAY_LEN(db->values); i++)
        sl_free_secret(db->values[i]);
    free(db->database);
    free(db);
}

static const struct sl_sql_driver pg_driver = {
    .acquire = pg_acquire,
    .release = pg_release,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .query = pg_query,
    .query_at_commit = pg_query_at_commit,
    .next = pg_next,
    .changes = pg_changes,
    .col_null = pg_col_null,
    .col_int = pg_col_int,
    .col_text = pg_col_text,
    .try_once = NULL,
    .table_columns = pg_table_columns,
    .index_exists = pg_index_exists,
    .exec_ddl = pg_exec_ddl,
    .ddl_begin = pg_ddl_begin,
    .ddl_end = pg_ddl_end,
    .health = pg_health,
    .close = pg_close,
};

/* ---- the URL ---- */

/* Whether libpq knows a connection keyword (so it may stay in the URI). */
static bool libpq_keyword(const char *name, size_t len)
{
    PQconninfoOption *opts = PQconndefaults();
    bool known = false;
    for (PQconninfoOption *o = opts; o && o->keyword && !known; o++)
        known = strlen(o->keyword) == len && strncmp(o->keyword, name, len) == 0;
    PQconninfoFree(opts);
    return known;
}

/* "postgresql+asyncpg://u:p@h:5432/db?sslmode=require&ssl=true&x=y" ->
 * "postgresql://u:p@h:5432/db?sslmode=require&sslmode=require": the
 * scheme libpq reads, the asyncpg spelling `ssl=<mode>` as `sslmode`, and
 * query options libpq does not know (driver options of SQLAlchemy's
 * dialects) left out, each named in *dropped. */
static char *libpq_uri(const char *url, struct sl_strlist *dropped)
{
    const char *rest = strstr(url, "://");
    if (!rest)
        return NULL;
    rest += 3;
    size_t base = strcspn(rest, "?");
    struct sl_buf b;
    sl_buf_init(&b, 8192);
    int rc = sl_buf_append(&b, "postgresql://", 13);
    if (rc == 0)
        rc = sl_buf_append(&b, rest, base);
    char sep = '?';
    for (const char *q = rest[base] ? rest + base + 1 : NULL; q && *q && rc == 0;) {
        size_t n = strcspn(q, "&");
        size_t klen = strcspn(q, "=");
        if (klen > n)
            klen = n;
        const char *value = klen < n ? q + klen + 1 : "";
        size_t vlen = klen < n ? n - klen - 1 : 0;
        if (klen == 3 && strncmp(q, "ssl", 3) == 0) {
            /* asyncpg: ssl=true|require|verify-full ... */
            bool on = vlen == 4 && strncmp(value, "true", 4) == 0;
            rc = sl_buf_append(&b, &sep, 1);
            if (rc == 0)
                rc = sl_buf_append(&b, "sslmode=", 8);
            if (rc == 0)
                rc = on ? sl_buf_append(&b, "require", 7) : sl_buf_append(&b, value, vlen);
            sep = '&';
        } else if (klen > 0 && libpq_keyword(q, klen)) {
            rc = sl_buf_append(&b, &sep, 1);
            if (rc == 0)
                rc = sl_buf_append(&b, q, n);
            sep = '&';
        } else if (klen > 0) {
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(klen < 63 ? klen : 63), q);
            rc = sl_strlist_push(dropped, name);
        }
        q += n;
        if (*q == '&')
            q++;
    }
    if (rc == 0)
        rc = sl_buf_append(&b, "", 1);
    if (rc < 0) {
        sl_buf_free(&b);
        return NULL;
    }
    return b.data;
}

struct sl_store *sl_store_postgresql_open(const struct sl_server_db_options *o, struct sl_error *err)
{
    struct pg_db *db = calloc(1, sizeof(*db));
    if (!db) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    db->pub.drv = &pg_driver;
    db->pub.dialect = &pg_dialect;
    db->pub.backend = "postgresql";
    db->database = strdup(o->database ? o->database : "");
    db->pub.database = db->database;
    int pool_rc = sl_sql_pool_init(&db->pool, &db->pub, &pg_pool_ops, o->pool_size,
                                   sizeof(struct pg_conn), o->wait_ms * 1000,
                                   o->recycle_seconds > 0 ? o->recycle_seconds * 1000000 : 0);
    struct sl_strlist dropped = {0};
    char *uri = libpq_uri(o->url, &dropped);
    /* Later keywords override what the URI says: the session settings the
     * core relies on, and a connect timeout so an unreachable server
     * answers within seconds. */
    char timeout[24], options[160], user_timeout[24];
    snprintf(timeout, sizeof(timeout), "%lld", (long long)o->connect_timeout_seconds);
    /* The server's timeouts need a server that answers: a host that went
     * off the network (no reset) is noticed by the socket, within the
     * statement timeout and a margin, not by the kernel's retransmissions
     * minutes later. */
    snprintf(user_timeout, sizeof(user_timeout), "%lld",
             (long long)(o->statement_timeout_ms + 10000));
    snprintf(options, sizeof(options),
             "-c DateStyle=ISO -c TimeZone=UTC -c lock_timeout=%lld -c statement_timeout=%lld",
             (long long)o->wait_ms, (long long)o->statement_timeout_ms);
    const char *kw[] = {"dbname",          "connect_timeout",     "options",
                        "application_name", "keepalives",          "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                        NULL};
    const char *vals[] = {uri, timeout, options, "sandloom", "1", "10", "5", "3", user_timeout};
    bool ok = pool_rc == 0 && db->database && uri;
    for (size_t i = 0; kw[i]; i++) {
        db->keywords[i] = kw[i];
        db->values[i] = vals[i] ? strdup(vals[i]) : NULL;
        ok = ok && db->values[i];
    }
    sl_free_secret(uri);
    if (!ok) {
        sl_strlist_free(&dropped);
        pg_close(&db->pub);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    if (o->dropped)
        *o->dropped = dropped;
    else
        sl_strlist_free(&dropped);
    return sl_sql_store_new(&db->pub, err);
}
