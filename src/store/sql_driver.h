/* What a SQL metadata backend supplies to the store core (store/sql_store.c).
 *
 * The core owns everything that is the same on every database: the
 * statements (written once, in a neutral form), row mapping, the
 * transactions of each store method and the admission rules. A driver owns
 * what differs: its connections (and their pool), prepare/bind/step, its
 * placeholder style and the few dialect words of the neutral SQL, column
 * types and schema introspection, the DDL lock, and how its failures are
 * classified. Only store/ includes this header.
 *
 * Neutral SQL (rendered once per driver by sl_sql_render()):
 *   ?N               parameter N (1-based; a number may appear twice)
 *   {FOR_UPDATE}     row lock of a SELECT inside a transaction ("" on SQLite,
 *                    whose write transaction already holds the database)
 *   {OCTETS:col}     byte length of a text column
 *   {JSON_TEXT:col}  a JSON column as comparable text
 *   {IS}             null-safe equality ("a {IS} ?1" is true for NULL, NULL)
 *   {TEXT:?N}        parameter N typed as text, where nothing else in the
 *                    statement would type it ("{TEXT:?1} IS NULL OR ...")
 *
 * Ownership: the core calls acquire() at the start of each store method and
 * release() at its end; between the two the connection is the caller's
 * alone. A connection runs one statement at a time: query() finishes the
 * previous one, and the rows it answers are read with next() and the col_*
 * accessors, whose pointers are valid until the next next() or query(). */
#ifndef SL_STORE_SQL_DRIVER_H
#define SL_STORE_SQL_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct sl_schema_column;
struct sl_strlist;

/* Prepared statements a connection caches, by the core's statement id. */
#define SL_SQL_MAX_STMTS 64
/* Parameters a statement binds (route_cas: 25 columns, the generation and
 * seven statuses). */
#define SL_SQL_MAX_ARGS 40

enum sl_sql_placeholders {
    SL_SQL_PH_NUMBERED, /* ?1 ?2 (SQLite) */
    SL_SQL_PH_DOLLAR,   /* $1 $2 (PostgreSQL) */
    SL_SQL_PH_POSITION, /* ? ? in order, a repeated number bound again (MySQL) */
};

struct sl_sql_dialect {
    enum sl_sql_placeholders placeholders;
    const char *for_update; /* "" or " FOR UPDATE" */
    const char *octets_fmt; /* printf format of {OCTETS:col}, one %s */
    const char *json_text_fmt; /* of {JSON_TEXT:col}, one %s */
    const char *is_op;         /* {IS} */
    const char *text_param_fmt; /* of {TEXT:?N}, one %s: the placeholder */
    /* Whether a text value may hold NUL bytes; when not, the core stores
     * U+FFFD in their place (command output is text, PostgreSQL refuses
     * \0 in TEXT). */
    bool text_allows_nul;
    /* Whether CREATE INDEX IF NOT EXISTS exists; without it (MySQL) the
     * schema script declares the indexes inside CREATE TABLE. */
    bool create_index_if_not_exists;
    /* Appended to every CREATE TABLE (MySQL: engine and character set). */
    const char *table_options;
    /* The dialect's spelling of a schema column's type. */
    const char *(*column_type)(const struct sl_schema_column *col, char *buf, size_t size);
};

/* Each driver's dialect, for the schema script without a database. */
const struct sl_sql_dialect *sl_sqlite_dialect(void);
const struct sl_sql_dialect *sl_postgresql_dialect(void);
const struct sl_sql_dialect *sl_mysql_dialect(void);

/* A statement rendered for one dialect. `order` maps the k-th placeholder
 * of the text to its parameter number (SL_SQL_PH_POSITION only). */
struct sl_sql_text {
    char *sql;
    unsigned char order[SL_SQL_MAX_ARGS * 2];
    int norder;
};

/* Render neutral SQL for a dialect; -1 on an unknown token or too many
 * placeholders (a bug: the statements are constant). */
int sl_sql_render(const char *neutral, const struct sl_sql_dialect *d, struct sl_sql_text *out);

enum sl_sql_kind { SL_SQL_NULL, SL_SQL_INT, SL_SQL_TEXT, SL_SQL_BOOL, SL_SQL_TS };

/* One bound value. TEXT: s with len bytes. TS: i is µs since the epoch and
 * s the same instant as "YYYY-MM-DD HH:MM:SS.ffffff" (naive UTC, always six
 * fraction digits, so it also sorts as text). BOOL: i is 0 or 1. */
struct sl_sql_arg {
    enum sl_sql_kind kind;
    int64_t i;
    const char *s;
    size_t len;
};

/* The common heads drivers embed first in their own structs. */
struct sl_sql_driver;
struct sl_sql_db {
    const struct sl_sql_driver *drv;
    const struct sl_sql_dialect *dialect;
    const char *backend;  /* "sqlite", "postgresql", "mysql" */
    const char *database; /* file path or database name, for /healthz */
};
struct sl_sql_conn {
    struct sl_sql_db *db;
    /* The pool's bookkeeping (store/sql_pool.h); SQLite has none. */
    bool busy, open, broken;
    int64_t opened_us;
};

/* query() outcomes besides 0 and -1. */
#define SL_SQL_CONFLICT (-2) /* a primary key or unique constraint refused the write */

struct sl_sql_driver {
    /* A connection for one store method: `write` when it may write (SQLite
     * keeps a writer and a reader). Waits for a free one of the pool; a
     * broken one is reopened. NULL with err (METADATA_UNAVAILABLE). */
    struct sl_sql_conn *(*acquire)(struct sl_sql_db *db, bool write, struct sl_error *err);
    void (*release)(struct sl_sql_conn *c);

    /* A read-write transaction (SQLite: BEGIN IMMEDIATE). */
    int (*begin)(struct sl_sql_conn *c, struct sl_error *err);
    int (*commit)(struct sl_sql_conn *c, struct sl_error *err);
    void (*rollback)(struct sl_sql_conn *c);

    /* Run statement `id` (rendered `text`) with args[0..nargs-1] bound as
     * parameters 1..nargs. 0, SL_SQL_CONFLICT or -1 (err filled). */
    int (*query)(struct sl_sql_conn *c, int id, const struct sl_sql_text *text,
                 const struct sl_sql_arg *args, int nargs, struct sl_error *err);
    /* Optional: a statement of the open transaction whose result nobody
     * reads (a write's changed rows, a row lock's row), which may be sent
     * with the next statement or the COMMIT in one round trip; its failure
     * is then theirs. NULL: the store runs
     * it with query(). 0 or -1 (err). */
    int (*query_at_commit)(struct sl_sql_conn *c, int id, const struct sl_sql_text *text,
                           const struct sl_sql_arg *args, int nargs, struct sl_error *err);
    /* The next row of the last query: 1, 0 when none is left, -1. */
    int (*next)(struct sl_sql_conn *c, struct sl_error *err);
    /* Rows the last query changed. */
    int64_t (*changes)(struct sl_sql_conn *c);
    bool (*col_null)(struct sl_sql_conn *c, int i);
    int64_t (*col_int)(struct sl_sql_conn *c, int i);
    /* NULL for SQL NULL; *len the byte length. */
    const char *(*col_text)(struct sl_sql_conn *c, int i, size_t *len);
    /* Optional: the next statement tries once instead of waiting for
     * another writer's lock (activity touches). */
    void (*try_once)(struct sl_sql_conn *c, bool on);

    /* Schema. */
    /* The live table's column names in order; an absent table gives none. */
    int (*table_columns)(struct sl_sql_conn *c, const char *table, struct sl_strlist *out,
                         struct sl_error *err);
    int (*index_exists)(struct sl_sql_conn *c, const char *table, const char *index,
                        struct sl_error *err);
    /* Run one constant DDL statement. */
    int (*exec_ddl)(struct sl_sql_conn *c, const char *sql, struct sl_error *err);
    /* Around the whole DDL: serialise replicas creating the schema at once
     * (FLEET.md §2.4: a transaction plus the advisory lock). */
    int (*ddl_begin)(struct sl_sql_conn *c, struct sl_error *err);
    int (*ddl_end)(struct sl_sql_conn *c, bool ok, struct sl_error *err);

    /* Whether writes land now; *why says why not (never a path). */
    bool (*health)(struct sl_sql_db *db, char *why, size_t size);
    void (*close)(struct sl_sql_db *db);
};

struct sl_store;
/* The store over an opened driver database; takes ownership of db (closed
 * with the store, or here on failure). */
struct sl_store *sl_sql_store_new(struct sl_sql_db *db, struct sl_error *err);

/* The schema as a script of the dialect (what auto-DDL creates), after
 * `heading`; malloc'd, NULL when out of memory. */
char *sl_sql_schema_script(const struct sl_sql_dialect *d, const char *heading);

/* The METADATA_UNAVAILABLE refusal of a driver: the client sees the code,
 * the operator the database's text. Returns -1. */
int sl_sql_fail(struct sl_error *err, const char *backend, const char *what, const char *text);

#endif
