#include "store/schema.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

#define STR(n, len) {n, SL_SCHEMA_STRING, len, false, false, 0, false}
#define STR_NULL(n, len) {n, SL_SCHEMA_STRING, len, true, false, 0, false}
#define COL(n, type) {n, type, 0, false, false, 0, false}
#define COL_NULL(n, type) {n, type, 0, true, false, 0, false}
#define COL_DEFAULT(n, type, v) {n, type, 0, false, true, v, false}
/* Ours, additive to the reference's schema (see struct sl_schema_column). */
#define ADDITIVE_STR_NULL(n, len) {n, SL_SCHEMA_STRING, len, true, false, 0, true}

static const struct sl_schema_column worker_columns[] = {
    STR("worker_id", 128),
    STR("worker_epoch", 64),
    STR("endpoint", 512),
    STR("status", 32),
    COL("capacity", SL_SCHEMA_INTEGER),
    COL_DEFAULT("running_sessions", SL_SCHEMA_INTEGER, 0),
    STR("profile_hash", 191),
    COL("heartbeat_at", SL_SCHEMA_DATETIME),
    COL("started_at", SL_SCHEMA_DATETIME),
    COL("updated_at", SL_SCHEMA_DATETIME),
};

static const struct sl_schema_column route_columns[] = {
    STR("sandbox_id", 128),
    STR("workspace_scope_id", 191),
    STR_NULL("worker_id", 128),
    STR_NULL("worker_epoch", 64),
    COL_DEFAULT("generation", SL_SCHEMA_BIGINT, 1),
    COL("sandbox_uid", SL_SCHEMA_INTEGER),
    STR("profile_id", 64),
    STR("profile_hash", 191),
    STR("status", 32),
    STR("storage_mode", 16),
    STR_NULL("active_exec_id", 128),
    COL("last_active_at", SL_SCHEMA_DATETIME),
    COL("generation_started_at", SL_SCHEMA_DATETIME),
    STR_NULL("generation_created_by", 255),
    COL_NULL("ready_at", SL_SCHEMA_DATETIME),
    COL_NULL("last_released_generation", SL_SCHEMA_BIGINT),
    COL_NULL("last_released_at", SL_SCHEMA_DATETIME),
    STR_NULL("last_release_reason", 32),
    STR_NULL("last_released_by", 255),
    COL_NULL("last_lifetime_ms", SL_SCHEMA_BIGINT),
    COL_DEFAULT("lifecycle_count", SL_SCHEMA_INTEGER, 1),
    COL_DEFAULT("total_lifetime_ms", SL_SCHEMA_BIGINT, 0),
    COL_NULL("lifecycle_history_json", SL_SCHEMA_JSON),
    COL("created_at", SL_SCHEMA_DATETIME),
    COL("updated_at", SL_SCHEMA_DATETIME),
};

static const struct sl_schema_column exec_columns[] = {
    STR("sandbox_id", 128),
    STR("exec_id", 128),
    COL("generation", SL_SCHEMA_BIGINT),
    STR("worker_id", 128),
    STR("status", 32),
    COL("command_json", SL_SCHEMA_JSON),
    STR_NULL("exec_scope", 128),
    COL_NULL("exit_code", SL_SCHEMA_INTEGER),
    COL_NULL("stdout_text", SL_SCHEMA_TEXT),
    COL_NULL("stderr_text", SL_SCHEMA_TEXT),
    COL_DEFAULT("truncated", SL_SCHEMA_BOOLEAN, 0),
    COL_NULL("started_at", SL_SCHEMA_DATETIME),
    COL_NULL("finished_at", SL_SCHEMA_DATETIME),
    COL("created_at", SL_SCHEMA_DATETIME),
    /* Why a run ended when it was not its own choice (OOM_KILLED, TIMED_OUT,
     * WORKER_LOST ...); last, where ALTER TABLE ... ADD COLUMN puts it on a
     * database the reference created. */
    ADDITIVE_STR_NULL("termination_reason", 32),
};

/* Tenants (issue 14): quotas_json is the operator's object of limits
 * (service/tenants.h), NULL when none is set. */
static const struct sl_schema_column tenant_columns[] = {
    STR("tenant_id", 64),
    COL_NULL("quotas_json", SL_SCHEMA_JSON),
    STR_NULL("created_by", 255),
    COL("created_at", SL_SCHEMA_DATETIME),
    COL("updated_at", SL_SCHEMA_DATETIME),
};

/* A tenant's API keys: only the SHA-256 of the secret is kept (the key is
 * shown once, at creation); revoked_at and expires_at NULL = never. */
static const struct sl_schema_column api_key_columns[] = {
    STR("key_id", 16),
    STR("tenant_id", 64),
    STR("name", 128),
    STR("secret_sha256", 64),
    STR_NULL("created_by", 255),
    COL("created_at", SL_SCHEMA_DATETIME),
    COL_NULL("expires_at", SL_SCHEMA_DATETIME),
    COL_NULL("revoked_at", SL_SCHEMA_DATETIME),
};

/* Egress policies of the private network mode (issue 15): scope_key is
 * "sandbox:<sandbox_id>" or "tenant:<tenant_id>", policy_json the policy
 * (net/egress.h) in its canonical form. */
static const struct sl_schema_column egress_columns[] = {
    STR("scope_key", 200),
    COL("policy_json", SL_SCHEMA_JSON),
    STR_NULL("updated_by", 255),
    COL("updated_at", SL_SCHEMA_DATETIME),
};

/* Sandboxes made through the E2B protocol (issue 17, e2b/): what E2B's
 * control plane keeps beside the route. sandbox_id is the route's (a
 * tenant's is in its namespace); end_at is the lifetime deadline the
 * service enforces (E2B's timeout), on_timeout what it then does ("kill"
 * or "pause"); metadata_json and env_json the create's objects. */
static const struct sl_schema_column e2b_columns[] = {
    STR("sandbox_id", 128),
    STR("template_id", 128),
    COL_NULL("metadata_json", SL_SCHEMA_JSON),
    COL_NULL("env_json", SL_SCHEMA_JSON),
    STR("on_timeout", 16),
    COL("started_at", SL_SCHEMA_DATETIME),
    COL("end_at", SL_SCHEMA_DATETIME),
    COL("updated_at", SL_SCHEMA_DATETIME),
};

const struct sl_schema_table sl_schema_tables[SL_SCHEMA_NTABLES] = {
    [SL_SCHEMA_WORKER] = {"agent_sandbox_worker", worker_columns, SL_ARRAY_LEN(worker_columns),
                          "worker_id", NULL, NULL},
    [SL_SCHEMA_ROUTE] = {"agent_sandbox_route", route_columns, SL_ARRAY_LEN(route_columns),
                         "sandbox_id", "uniq_agent_sandbox_uid", "sandbox_uid"},
    [SL_SCHEMA_EXEC] = {"agent_sandbox_exec", exec_columns, SL_ARRAY_LEN(exec_columns),
                        "sandbox_id, exec_id", NULL, NULL},
    [SL_SCHEMA_TENANT] = {"agent_sandbox_tenant", tenant_columns, SL_ARRAY_LEN(tenant_columns),
                          "tenant_id", NULL, NULL, true},
    [SL_SCHEMA_API_KEY] = {"agent_sandbox_api_key", api_key_columns,
                           SL_ARRAY_LEN(api_key_columns), "key_id", NULL, NULL, true},
    [SL_SCHEMA_EGRESS] = {"agent_sandbox_egress_policy", egress_columns,
                          SL_ARRAY_LEN(egress_columns), "scope_key", NULL, NULL, true},
    [SL_SCHEMA_E2B] = {"agent_sandbox_e2b", e2b_columns, SL_ARRAY_LEN(e2b_columns), "sandbox_id",
                       NULL, NULL, true},
};

const struct sl_schema_index sl_schema_indexes[] = {
    {"idx_agent_sandbox_worker_heartbeat", "agent_sandbox_worker", "status, heartbeat_at"},
    {"idx_agent_sandbox_route_scope", "agent_sandbox_route", "workspace_scope_id"},
    {"idx_agent_sandbox_route_worker", "agent_sandbox_route", "worker_id, status"},
    {"idx_agent_sandbox_exec_status", "agent_sandbox_exec", "sandbox_id, status"},
    {"idx_agent_sandbox_api_key_tenant", "agent_sandbox_api_key", "tenant_id"},
    {"idx_agent_sandbox_e2b_end", "agent_sandbox_e2b", "end_at"},
};
const size_t sl_schema_nindexes = SL_ARRAY_LEN(sl_schema_indexes);

/* Both sentences are kept short: the refusal message (with its list) must
 * fit struct sl_error's 256-byte message. */
const char sl_schema_help_no_tables[] =
    "Apply the deploy SQL (deploy/sql/) or enable SANDBOX_DATABASE_AUTO_DDL to create the "
    "tables.";
const char sl_schema_help_missing_columns[] =
    "CREATE TABLE IF NOT EXISTS scripts do not add columns to existing tables; an ALTER TABLE "
    "is needed.";

static const char missing_prefix[] = "database schema is missing ";
static const char additive_help_prefix[] = "Enable SANDBOX_DATABASE_AUTO_DDL or run: ";

static bool list_has(const struct sl_strlist *list, const char *name)
{
    return list && sl_strlist_contains(list, name);
}

static bool table_known_column(const struct sl_schema_table *t, const char *name)
{
    for (size_t i = 0; i < t->ncolumns; i++)
        if (strcmp(t->columns[i].name, name) == 0)
            return true;
    return false;
}

/* The column a missing entry "<table>.<column>" names, NULL for a table entry
 * or a name outside the schema. */
static const struct sl_schema_column *entry_column(const char *entry,
                                                   const struct sl_schema_table **table)
{
    const char *dot = strchr(entry, '.');
    if (!dot)
        return NULL;
    size_t tlen = (size_t)(dot - entry);
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++) {
        const struct sl_schema_table *tab = &sl_schema_tables[t];
        if (strlen(tab->name) != tlen || strncmp(tab->name, entry, tlen) != 0)
            continue;
        for (size_t c = 0; c < tab->ncolumns; c++)
            if (strcmp(tab->columns[c].name, dot + 1) == 0) {
                *table = tab;
                return &tab->columns[c];
            }
    }
    return NULL;
}

/* The type as every supported backend accepts it in an ALTER TABLE (the
 * help sentence cannot know which backend the operator runs). */
static const char *generic_type(const struct sl_schema_column *c, char *buf, size_t size)
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
        return "TIMESTAMP";
    case SL_SCHEMA_JSON:
        return "JSON";
    case SL_SCHEMA_TEXT:
        return "TEXT";
    case SL_SCHEMA_BOOLEAN:
        return "BOOLEAN";
    }
    return "TEXT";
}

size_t sl_schema_add_column_sql(const struct sl_schema_table *table,
                                const struct sl_schema_column *column, const char *type, char *buf,
                                size_t size)
{
    char dflt[48] = "";
    if (column->has_default)
        snprintf(dflt, sizeof(dflt), " DEFAULT %ld", column->default_value);
    int n = snprintf(buf, size, "ALTER TABLE %s ADD COLUMN %s %s%s%s", table->name, column->name,
                     type, column->nullable ? "" : " NOT NULL", dflt);
    return n < 0 ? 0 : (size_t)n;
}

/* When every missing entry is an additive column, the help naming the ALTER
 * statements that add them ("... run: ALTER ...; ALTER ...;"). Returns false
 * (buf untouched) otherwise: a missing reference column or table is the
 * operator's deploy SQL to fix, with the generic help. */
static bool additive_help(const struct sl_strlist *missing, char *buf, size_t size)
{
    if (missing->len == 0)
        return false;
    for (size_t i = 0; i < missing->len; i++) {
        const struct sl_schema_table *table = NULL;
        const struct sl_schema_column *col = entry_column(missing->items[i], &table);
        if (!col || !col->additive)
            return false;
    }
    snprintf(buf, size, "%s", additive_help_prefix);
    for (size_t i = 0; i < missing->len; i++) {
        const struct sl_schema_table *table = NULL;
        const struct sl_schema_column *col = entry_column(missing->items[i], &table);
        char type[32], sql[256];
        sl_schema_add_column_sql(table, col, generic_type(col, type, sizeof(type)), sql,
                                 sizeof(sql));
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%s%s;", i ? " " : "", sql);
    }
    return true;
}

static int push_qualified(struct sl_strlist *list, const char *table, const char *column)
{
    char entry[256];
    if ((size_t)snprintf(entry, sizeof(entry), "%s.%s", table, column) >= sizeof(entry)) {
        /* A live column name this long cannot be ours; keep it recognisable. */
        entry[sizeof(entry) - 4] = '.';
        entry[sizeof(entry) - 3] = '.';
        entry[sizeof(entry) - 2] = '.';
    }
    return sl_strlist_push(list, entry);
}

int sl_schema_compare(const struct sl_strlist live[SL_SCHEMA_NTABLES], struct sl_strlist *missing,
                      struct sl_strlist *extra)
{
    int nmissing = 0;
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++) {
        const struct sl_schema_table *table = &sl_schema_tables[t];
        const struct sl_strlist *cols = &live[t];
        if (cols->len == 0 && table->optional)
            continue;
        if (cols->len == 0) {
            if (sl_strlist_push(missing, table->name) < 0)
                return -1;
            nmissing++;
            continue;
        }
        for (size_t c = 0; c < table->ncolumns; c++) {
            if (list_has(cols, table->columns[c].name))
                continue;
            if (push_qualified(missing, table->name, table->columns[c].name) < 0)
                return -1;
            nmissing++;
        }
        for (size_t c = 0; c < cols->len; c++) {
            if (table_known_column(table, cols->items[c]))
                continue;
            if (push_qualified(extra, table->name, cols->items[c]) < 0)
                return -1;
        }
    }
    return nmissing;
}

static size_t list_joined_len(const struct sl_strlist *list, size_t count)
{
    size_t len = 0;
    for (size_t i = 0; i < count; i++)
        len += strlen(list->items[i]) + (i ? 2 : 0);
    return len;
}

char *sl_schema_join(const struct sl_strlist *list)
{
    errno = 0;
    if (list->len == 0)
        return NULL;
    size_t len = list_joined_len(list, list->len);
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    char *p = out;
    for (size_t i = 0; i < list->len; i++) {
        if (i) {
            memcpy(p, ", ", 2);
            p += 2;
        }
        size_t n = strlen(list->items[i]);
        memcpy(p, list->items[i], n);
        p += n;
    }
    *p = '\0';
    return out;
}

/* Append src to buf at *pos, never past size - 1. */
static void put(char *buf, size_t size, size_t *pos, const char *src)
{
    size_t n = strlen(src);
    if (*pos + 1 >= size)
        return;
    if (n > size - 1 - *pos)
        n = size - 1 - *pos;
    memcpy(buf + *pos, src, n);
    *pos += n;
    buf[*pos] = '\0';
}

size_t sl_schema_missing_message(const struct sl_strlist *missing, bool none_exist, char *buf,
                                 size_t size)
{
    if (size == 0)
        return 0;
    char alter_help[512];
    const char *help = none_exist ? sl_schema_help_no_tables
                       : additive_help(missing, alter_help, sizeof(alter_help))
                           ? alter_help
                           : sl_schema_help_missing_columns;
    size_t n = missing->len;
    size_t keep = n;
    char tail[64] = "";
    for (;;) {
        tail[0] = '\0';
        if (keep == 0 && n > 0)
            snprintf(tail, sizeof(tail), "%zu entries", n);
        else if (keep < n)
            snprintf(tail, sizeof(tail), " (and %zu more)", n - keep);
        size_t need = strlen(missing_prefix) + list_joined_len(missing, keep) + strlen(tail) + 2 +
                      strlen(help);
        if (need < size || keep == 0)
            break;
        keep--;
    }
    size_t pos = 0;
    buf[0] = '\0';
    put(buf, size, &pos, missing_prefix);
    for (size_t i = 0; i < keep; i++) {
        if (i)
            put(buf, size, &pos, ", ");
        put(buf, size, &pos, missing->items[i]);
    }
    put(buf, size, &pos, tail);
    put(buf, size, &pos, ". ");
    put(buf, size, &pos, help);
    return pos;
}

int sl_schema_check(const struct sl_strlist live[SL_SCHEMA_NTABLES], char **warnings,
                    struct sl_error *err)
{
    struct sl_strlist missing = {0}, extra = {0};
    *warnings = NULL;
    int nmissing = sl_schema_compare(live, &missing, &extra);
    if (nmissing < 0) {
        sl_strlist_free(&missing);
        sl_strlist_free(&extra);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory checking the schema");
    }
    if (nmissing > 0) {
        bool none_exist = true;
        for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++)
            if (live[t].len > 0 && !sl_schema_tables[t].optional)
                none_exist = false;
        sl_error_set(err, SL_E_CONFIG, 0, "database schema is missing");
        if (err) {
            sl_schema_missing_message(&missing, none_exist, err->message, sizeof(err->message));
            sl_schema_missing_message(&missing, none_exist, err->detail, sizeof(err->detail));
        }
        sl_strlist_free(&missing);
        sl_strlist_free(&extra);
        return -1;
    }
    int rc = 0;
    if (extra.len > 0) {
        *warnings = sl_schema_join(&extra);
        if (!*warnings)
            rc = sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory checking the schema");
    }
    sl_strlist_free(&missing);
    sl_strlist_free(&extra);
    return rc;
}
