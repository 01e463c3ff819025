/* The metadata schema as data (spec/FLEET.md §2), shared by every store
 * backend: the reference's three tables with their columns in spec order,
 * our two optional ones (tenants, API keys), their keys and the named
 * indexes. A backend renders its own DDL from these tables and
 * checks a live database with sl_schema_check().
 *
 * Everything here is constant or pure: no database access, no module state. */
#ifndef SL_STORE_SCHEMA_H
#define SL_STORE_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "common/util.h"

/* Generic column types (the "Generic / SQLAlchemy" column of FLEET.md §2). */
enum sl_schema_type {
    SL_SCHEMA_STRING,   /* String(length) */
    SL_SCHEMA_INTEGER,  /* Integer */
    SL_SCHEMA_BIGINT,   /* BigInteger */
    SL_SCHEMA_DATETIME, /* DateTime, naive UTC */
    SL_SCHEMA_JSON,     /* JSON */
    SL_SCHEMA_TEXT,     /* Text */
    SL_SCHEMA_BOOLEAN,  /* Boolean */
};

struct sl_schema_column {
    const char *name;
    enum sl_schema_type type;
    int length; /* SL_SCHEMA_STRING only */
    bool nullable;
    bool has_default;
    long default_value; /* integer, or 0/1 for a boolean */
    /* Ours, not the reference's: absent from databases the reference (or an
     * older sandloomd) created, so auto-DDL adds it with ALTER TABLE ... ADD
     * COLUMN. Must be nullable or have a default, so that rows already there
     * stay valid. Placed after the reference's columns of its table. */
    bool additive;
};

struct sl_schema_table {
    const char *name;
    const struct sl_schema_column *columns;
    size_t ncolumns;
    const char *primary_key;    /* column list, e.g. "sandbox_id, exec_id" */
    const char *unique_name;    /* named UNIQUE constraint, NULL if none */
    const char *unique_columns;
    /* Ours, not the reference's (tenants and their keys): created by
     * auto-DDL and by the deploy SQL like the others, but a database
     * without it is accepted, since one the reference created has none;
     * what it holds is then unavailable (struct sl_store.tenancy). Once it
     * exists, its columns are checked like any table's. */
    bool optional;
};

struct sl_schema_index {
    const char *name;
    const char *table;
    const char *columns; /* column list in index order */
};

enum sl_schema_table_id {
    SL_SCHEMA_WORKER, /* agent_sandbox_worker */
    SL_SCHEMA_ROUTE,  /* agent_sandbox_route */
    SL_SCHEMA_EXEC,   /* agent_sandbox_exec */
    SL_SCHEMA_TENANT, /* agent_sandbox_tenant (ours, optional) */
    SL_SCHEMA_API_KEY, /* agent_sandbox_api_key (ours, optional) */
    SL_SCHEMA_EGRESS, /* agent_sandbox_egress_policy (ours, optional) */
    SL_SCHEMA_E2B,    /* agent_sandbox_e2b (ours, optional) */
    SL_SCHEMA_NTABLES
};

extern const struct sl_schema_table sl_schema_tables[SL_SCHEMA_NTABLES];
extern const struct sl_schema_index sl_schema_indexes[];
extern const size_t sl_schema_nindexes;

/* Help sentences of the refusal message (FLEET.md §2.4). */
extern const char sl_schema_help_no_tables[];
extern const char sl_schema_help_missing_columns[];

/* Render "ALTER TABLE <table> ADD COLUMN <column> <type>[ NOT NULL][ DEFAULT v]"
 * (no trailing semicolon) into buf; `type` is the backend's spelling of the
 * column's type. Returns the length snprintf() would write. */
size_t sl_schema_add_column_sql(const struct sl_schema_table *table,
                                const struct sl_schema_column *column, const char *type, char *buf,
                                size_t size);

/* Compare live column names with the expected schema. live[i] holds the
 * column names found for sl_schema_tables[i]; an empty list means the table
 * does not exist (which an optional table may: it is then not missing). Appends "<table>" / "<table>.<column>" entries to *missing
 * and "<table>.<column>" entries to *extra, in spec order (extras in live
 * order). Returns the number of missing entries, or -1 on allocation failure. */
int sl_schema_compare(const struct sl_strlist live[SL_SCHEMA_NTABLES], struct sl_strlist *missing,
                      struct sl_strlist *extra);

/* Join a list with ", " into a malloc'd string; NULL for an empty list or on
 * allocation failure (errno says which: ENOMEM, or 0). */
char *sl_schema_join(const struct sl_strlist *list);

/* Format "database schema is missing <list>. <help>" into buf. When the whole
 * list does not fit, as many entries as fit are kept followed by
 * "(and N more)", so the help sentence is never cut. none_exist selects the
 * help (no table of the schema exists); when every missing entry is an
 * additive column, the help gives the ALTER TABLE statements to run instead
 * of sl_schema_help_missing_columns. Returns the length written. */
size_t sl_schema_missing_message(const struct sl_strlist *missing, bool none_exist, char *buf,
                                 size_t size);

/* The whole startup check of FLEET.md §2.4 on live column names: any missing
 * entry => -1 with err code SANDBOX_CONFIG_INVALID and the refusal message
 * (message and detail); otherwise 0 and *warnings = the extra columns joined
 * (malloc'd, NULL if none). */
int sl_schema_check(const struct sl_strlist live[SL_SCHEMA_NTABLES], char **warnings,
                    struct sl_error *err);

#endif
