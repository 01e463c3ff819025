/* The store conformance suite: schema data and check (store/schema.c), the
 * store core (store/sql_store.c) and a driver. On SQLite (store/sqlite.c)
 * each test gets a database in a fresh temporary directory; with
 * SANDLOOM_TEST_DATABASE_URL set to a PostgreSQL URL (tests/db/
 * run-with-postgres.sh starts a server of its own) the same tests run on
 * that database, its tables dropped before each. The raw SQL the tests use
 * to look behind the store's back is given per dialect where the two
 * differ (DIALECT). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
#include <libpq-fe.h>
#include <mysql.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/util.h"
#include "config/config.h"
#include "store/schema.h"
#include "store/store.h"

/* 2026-09-30 17:43:53.123456 UTC */
#define T0 INT64_C(1790790233123456)
#define T0_TEXT "2026-09-30 17:43:53.123456"

struct fixture {
    char dir[64];
    char path[128];
    struct sl_store *store;
};

/* The server database of this run (SANDLOOM_TEST_DATABASE_URL), NULL for
 * SQLite; g_mysql when it is a MySQL one. */
static const char *g_pg_url;
static bool g_mysql;
#define DIALECT3(sqlite_sql, pg_sql, mysql_sql) \
    (!g_pg_url ? (sqlite_sql) : g_mysql ? (mysql_sql) : (pg_sql))
#define DIALECT(sqlite_sql, pg_sql) DIALECT3(sqlite_sql, pg_sql, pg_sql)

static void raw_exec(const char *path, const char *sql);

/* ---- helpers ---- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int fixture_new(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/sl-test-store-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    /* Two missing levels: the store creates the parent directories. */
    snprintf(f->path, sizeof(f->path), "%s/data/meta/agent-sandbox.db", f->dir);
    if (g_pg_url && !g_mysql)
        raw_exec(f->path, "DROP TABLE IF EXISTS agent_sandbox_worker, agent_sandbox_route, "
                          "agent_sandbox_exec, agent_sandbox_tenant, agent_sandbox_api_key, "
                          "agent_sandbox_e2b, skip_once CASCADE;"
                          "DROP FUNCTION IF EXISTS skip_update() CASCADE");
    if (g_mysql)
        raw_exec(f->path, "DROP TABLE IF EXISTS agent_sandbox_worker, agent_sandbox_route, "
                          "agent_sandbox_exec, agent_sandbox_tenant, agent_sandbox_api_key, "
                          "agent_sandbox_e2b, skip_once");
    *state = f;
    return 0;
}

static void fixture_open(struct fixture *f)
{
    struct sl_error err = {0};
    struct sl_server_db_options o = {.url = g_pg_url, .database = "conformance", .pool_size = 4,
                              .wait_ms = 15000, .statement_timeout_ms = 60000,
                              .connect_timeout_seconds = 5, .recycle_seconds = 300};
    f->store = !g_pg_url ? sl_store_sqlite_open(f->path, 15000, &err)
               : g_mysql ? sl_store_mysql_open(&o, &err)
                         : sl_store_postgresql_open(&o, &err);
    if (!f->store)
        fail_msg("open: %s", sl_error_text(&err));
}

/* Open and create the schema. */
static int setup_ready(void **state)
{
    fixture_new(state);
    struct fixture *f = *state;
    fixture_open(f);
    struct sl_error err = {0};
    char *warnings = NULL;
    if (f->store->ops->prepare_schema(f->store, true, &warnings, &err) < 0)
        fail_msg("prepare_schema: %s", sl_error_text(&err));
    assert_null(warnings);
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f->store)
        f->store->ops->close(f->store);
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* Run SQL on a separate raw connection (what another process would see). */
static PGconn *pg_raw(void)
{
    PGconn *pg = PQconnectdb(g_pg_url);
    if (PQstatus(pg) != CONNECTION_OK)
        fail_msg("raw connect failed: %s", PQerrorMessage(pg));
    PQclear(PQexec(pg, "SET client_min_messages = warning"));
    return pg;
}

/* A raw MySQL connection from the URL: several statements a call, and ||
 * concatenating as in the other dialects. */
static MYSQL *my_raw(void)
{
    char user[64], pass[128], host[64], db[64];
    unsigned port = 0;
    if (sscanf(g_pg_url, "mysql://%63[^:]:%127[^@]@%63[^:]:%u/%63s", user, pass, host, &port, db) !=
        5)
        fail_msg("cannot read the test URL");
    MYSQL *my = mysql_init(NULL);
    if (!mysql_real_connect(my, host, user, pass, db, port, NULL, CLIENT_MULTI_STATEMENTS))
        fail_msg("raw connect failed: %s", mysql_error(my));
    mysql_query(my, "SET sql_mode = CONCAT(@@sql_mode, ',PIPES_AS_CONCAT')");
    return my;
}

/* Every result of a multi-statement call; the first row's first column. */
static char *my_run(const char *sql)
{
    MYSQL *my = my_raw();
    if (mysql_query(my, sql) != 0)
        fail_msg("raw sql failed: %s: %s", sql, mysql_error(my));
    char *out = NULL;
    do {
        MYSQL_RES *res = mysql_store_result(my);
        if (res) {
            MYSQL_ROW row = mysql_fetch_row(res);
            if (row && !out)
                out = strdup(row[0] ? row[0] : "<NULL>");
            mysql_free_result(res);
        } else if (mysql_field_count(my) != 0) {
            fail_msg("raw sql failed: %s: %s", sql, mysql_error(my));
        }
    } while (mysql_next_result(my) == 0);
    if (mysql_errno(my))
        fail_msg("raw sql failed: %s: %s", sql, mysql_error(my));
    mysql_close(my);
    return out;
}

static void raw_exec(const char *path, const char *sql)
{
    if (g_mysql) {
        free(my_run(sql));
        return;
    }
    if (g_pg_url) {
        PGconn *pg = pg_raw();
        PGresult *res = PQexec(pg, sql);
        if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
            fail_msg("raw sql failed: %s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(pg);
        return;
    }
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("raw sql failed: %s: %s", sql, msg);
    sqlite3_close(db);
}

/* First column of the first row as text ("<NULL>" for NULL), malloc'd. */
static char *raw_text(const char *path, const char *sql)
{
    if (g_mysql) {
        char *out = my_run(sql);
        assert_non_null(out);
        return out;
    }
    if (g_pg_url) {
        PGconn *pg = pg_raw();
        PGresult *res = PQexec(pg, sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            fail_msg("raw query failed: %s: %s", sql, PQresultErrorMessage(res));
        char *out = NULL;
        if (PQntuples(res) > 0)
        {
            const char *v = PQgetisnull(res, 0, 0) ? "<NULL>" : PQgetvalue(res, 0, 0);
            /* A boolean reads t/f here, 1/0 on SQLite. */
            out = strdup(strcmp(v, "t") == 0 ? "1" : strcmp(v, "f") == 0 ? "0" : v);
        }
        PQclear(res);
        PQfinish(pg);
        assert_non_null(out);
        return out;
    }
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("raw prepare failed: %s: %s", sql, sqlite3_errmsg(db));
    char *out = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        out = strdup(v ? (const char *)v : "<NULL>");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_non_null(out);
    return out;
}

static void assert_raw(const char *path, const char *sql, const char *expect)
{
    char *got = raw_text(path, sql);
    assert_string_equal(got, expect);
    free(got);
}

static char *xdup(const char *s) { return s ? strdup(s) : NULL; }

/* A route with every NOT NULL column set and every nullable one NULL. */
static void route_make(struct sl_route *r, const char *id, int64_t uid, int64_t generation,
                       const char *status)
{
    memset(r, 0, sizeof(*r));
    r->sandbox_id = xdup(id);
    r->workspace_scope_id = xdup("scope-1");
    r->generation = generation;
    r->sandbox_uid = uid;
    r->profile_id = xdup("default");
    r->profile_hash = xdup("hash-1");
    snprintf(r->status, sizeof(r->status), "%s", status);
    snprintf(r->storage_mode, sizeof(r->storage_mode), "local");
    r->last_active_at = T0;
    r->generation_started_at = T0;
    r->last_lifetime_ms = -1;
    r->lifecycle_count = 1;
    r->created_at = T0;
    r->updated_at = T0;
}

static void route_put(struct sl_store *s, const char *id, int64_t uid, int64_t generation,
                      const char *status)
{
    struct sl_route r;
    struct sl_error err = {0};
    route_make(&r, id, uid, generation, status);
    int rc = s->ops->route_insert(s, &r, &err);
    if (rc != 1)
        fail_msg("route_insert %s: %d %s", id, rc, sl_error_text(&err));
    sl_route_clear(&r);
}

static void route_fetch(struct sl_store *s, const char *id, struct sl_route *out)
{
    struct sl_error err = {0};
    int rc = s->ops->route_get(s, id, out, &err);
    if (rc != 1)
        fail_msg("route_get %s: %d %s", id, rc, sl_error_text(&err));
}

/* An exec record as the service would hand it to exec_admit. */
static void exec_make(struct sl_exec_record *e, const char *sandbox_id, const char *exec_id,
                      int64_t generation, const char *scope, int64_t now)
{
    memset(e, 0, sizeof(*e));
    e->sandbox_id = xdup(sandbox_id);
    e->exec_id = xdup(exec_id);
    e->generation = generation;
    e->worker_id = xdup("worker-a-8080");
    snprintf(e->status, sizeof(e->status), "RUNNING");
    char json[256];
    if (scope)
        snprintf(json, sizeof(json),
                 "{\"exec_id\":\"%s\",\"argv\":[\"true\"],\"exec_scope\":\"%s\"}", exec_id,
                 scope);
    else
        snprintf(json, sizeof(json), "{\"exec_id\":\"%s\",\"argv\":[\"true\"],\"exec_scope\":null}",
                 exec_id);
    e->command_json = xdup(json);
    e->exec_scope = xdup(scope);
    e->created_at = now;
}

/* exec_admit; returns the result or -1 with *code set to the refusal code. */
static int admit(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                 int64_t generation, const char *scope, int64_t max_parallel, int64_t now,
                 const char **code)
{
    struct sl_exec_record rec, existing = {0};
    struct sl_error err = {0};
    exec_make(&rec, sandbox_id, exec_id, generation, scope, now);
    int rc = s->ops->exec_admit(s, &rec, max_parallel, &existing, &err);
    if (code)
        *code = rc < 0 ? err.code : NULL;
    if (rc < 0 && !sl_error_is(&err, SL_E_STALE_GENERATION) && !sl_error_is(&err, SL_E_SUSPENDED) &&
        !sl_error_is(&err, SL_E_PARALLEL_EXEC_LIMIT) && !sl_error_is(&err, SL_E_EXEC_SCOPE_BUSY))
        fail_msg("exec_admit %s: %s", exec_id, sl_error_text(&err));
    if (rc < 0)
        assert_string_equal(err.message, err.code); /* TEXT refusals carry the bare code */
    sl_exec_record_clear(&rec);
    sl_exec_record_clear(&existing);
    return rc;
}

static void assert_admitted(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                            const char *scope)
{
    const char *code = NULL;
    int rc = admit(s, sandbox_id, exec_id, 1, scope, 8, T0, &code);
    if (rc != SL_ADMIT_ADMITTED)
        fail_msg("%s/%s not admitted: %s", sandbox_id, exec_id, code ? code : "replay");
}

static void assert_refused(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                           const char *scope, int64_t generation, int64_t max_parallel,
                           const char *expect_code)
{
    const char *code = NULL;
    assert_int_equal(admit(s, sandbox_id, exec_id, generation, scope, max_parallel, T0, &code), -1);
    assert_string_equal(code, expect_code);
    /* A refusal writes no record. */
    struct sl_exec_record e = {0};
    struct sl_error err = {0};
    assert_int_equal(s->ops->exec_get(s, sandbox_id, exec_id, &e, &err), 0);
}

static void finish_reason(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                          int64_t generation, const char *status, int exit_code,
                          const char *reason, int64_t now)
{
    struct sl_exec_record rec = {0};
    struct sl_error err = {0};
    rec.sandbox_id = xdup(sandbox_id);
    rec.exec_id = xdup(exec_id);
    rec.generation = generation;
    snprintf(rec.status, sizeof(rec.status), "%s", status);
    rec.has_exit_code = exit_code >= 0;
    rec.exit_code = exit_code;
    rec.stdout_text = xdup("out\n");
    rec.stdout_len = 4;
    rec.stderr_text = xdup("");
    rec.truncated = true;
    rec.finished_at = now;
    snprintf(rec.termination_reason, sizeof(rec.termination_reason), "%s", reason);
    if (s->ops->exec_finish(s, &rec, now, &err) < 0)
        fail_msg("exec_finish %s: %s", exec_id, sl_error_text(&err));
    sl_exec_record_clear(&rec);
}

static void finish(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                   int64_t generation, const char *status, int exit_code, int64_t now)
{
    finish_reason(s, sandbox_id, exec_id, generation, status, exit_code, "", now);
}

static void assert_reason(struct sl_store *s, const char *sandbox_id, const char *exec_id,
                          const char *expect)
{
    struct sl_exec_record got;
    struct sl_error err = {0};
    if (s->ops->exec_get(s, sandbox_id, exec_id, &got, &err) != 1)
        fail_msg("exec_get %s/%s: %s", sandbox_id, exec_id, sl_error_text(&err));
    assert_string_equal(got.termination_reason, expect);
    sl_exec_record_clear(&got);
}

/* ---- schema ---- */

static void test_schema_created(void **state)
{
    struct fixture *f = *state;
    fixture_open(f);

    if (!g_pg_url) {
        /* The SQLite file's directory is made, private. */
        char parent[160];
        struct stat sb;
        snprintf(parent, sizeof(parent), "%s/data/meta", f->dir);
        assert_int_equal(stat(parent, &sb), 0);
        assert_int_equal(sb.st_mode & 0777, 0700);
        assert_string_equal(f->store->backend, "sqlite");
        assert_string_equal(f->store->database, f->path);
    } else {
        assert_string_equal(f->store->backend, g_mysql ? "mysql" : "postgresql");
    }

    struct sl_error err = {0};
    char *warnings = NULL;
    assert_int_equal(f->store->ops->prepare_schema(f->store, true, &warnings, &err), 0);
    assert_null(warnings);
    /* Idempotent, and the check alone passes too. */
    assert_int_equal(f->store->ops->prepare_schema(f->store, true, &warnings, &err), 0);
    assert_int_equal(f->store->ops->prepare_schema(f->store, false, &warnings, &err), 0);
    assert_null(warnings);

    if (!g_pg_url)
        assert_raw(f->path, "PRAGMA journal_mode", "wal");
    assert_raw(f->path,
               DIALECT3("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master "
                        "WHERE type = 'index' AND name LIKE 'idx_%' ORDER BY name)",
                        "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes "
                        "WHERE indexname LIKE 'idx_%'",
                        "SELECT GROUP_CONCAT(DISTINCT INDEX_NAME ORDER BY INDEX_NAME) FROM "
                        "information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                        "AND INDEX_NAME LIKE 'idx_%'"),
               "idx_agent_sandbox_api_key_tenant,idx_agent_sandbox_e2b_end,"
               "idx_agent_sandbox_exec_status,"
               "idx_agent_sandbox_route_scope,idx_agent_sandbox_route_worker,"
               "idx_agent_sandbox_worker_heartbeat");
    assert_true(f->store->tenancy);
    assert_true(f->store->e2b);
    assert_raw(f->path,
               DIALECT("SELECT instr(sql, 'CONSTRAINT uniq_agent_sandbox_uid UNIQUE "
                       "(sandbox_uid)') > 0 FROM sqlite_master WHERE name = 'agent_sandbox_route'",
                       "SELECT count(*) FROM information_schema.table_constraints WHERE "
                       "constraint_name = 'uniq_agent_sandbox_uid' AND constraint_type = 'UNIQUE'"),
               "1");
    /* Columns in spec order. */
    assert_raw(f->path,
               DIALECT3("SELECT group_concat(name, ',') FROM pragma_table_info('agent_sandbox_exec')",
                        "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM "
                        "information_schema.columns WHERE table_name = 'agent_sandbox_exec'",
                        "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM "
                        "information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                        "AND TABLE_NAME = 'agent_sandbox_exec'"),
               "sandbox_id,exec_id,generation,worker_id,status,command_json,exec_scope,exit_code,"
               "stdout_text,stderr_text,truncated,started_at,finished_at,created_at,"
               "termination_reason");
    assert_raw(f->path,
               DIALECT("SELECT count(*) FROM pragma_table_info('agent_sandbox_route')",
                       "SELECT count(*) FROM information_schema.columns "
                       "WHERE table_name = 'agent_sandbox_route'"),
               "25");
    assert_raw(f->path,
               DIALECT("SELECT count(*) FROM pragma_table_info('agent_sandbox_worker')",
                       "SELECT count(*) FROM information_schema.columns "
                       "WHERE table_name = 'agent_sandbox_worker'"),
               "10");
    if (g_mysql) {
        /* The dialect's types (FLEET.md §2; MariaDB's JSON is LONGTEXT with a
         * json_valid check), and the tables' engine and collation. */
        assert_raw(f->path,
                   "SELECT GROUP_CONCAT(COLUMN_TYPE ORDER BY ORDINAL_POSITION) FROM "
                   "information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                   "AND TABLE_NAME = 'agent_sandbox_exec'",
                   "varchar(128),varchar(128),bigint(20),varchar(128),varchar(32),longtext,"
                   "varchar(128),int(11),mediumtext,mediumtext,tinyint(1),datetime(6),"
                   "datetime(6),datetime(6),varchar(32)");
        assert_raw(f->path,
                   "SELECT GROUP_CONCAT(DISTINCT CONCAT(ENGINE, ' ', TABLE_COLLATION)) FROM "
                   "information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                   "AND TABLE_NAME LIKE 'agent_sandbox_%'",
                   "InnoDB utf8mb4_unicode_ci");
    } else if (g_pg_url) {
        /* The dialect's types (FLEET.md §2). */
        assert_raw(f->path,
                   "SELECT string_agg(data_type, ',' ORDER BY ordinal_position) FROM "
                   "information_schema.columns WHERE table_name = 'agent_sandbox_exec'",
                   "character varying,character varying,bigint,character varying,"
                   "character varying,json,character varying,integer,text,text,boolean,"
                   "timestamp without time zone,timestamp without time zone,"
                   "timestamp without time zone,character varying");
    }
}

/* The route table as an old deploy script made it, without `column`; auto-DDL
 * creates the other tables, and the check names the column. */
static void check_missing_route_column(struct fixture *f, const char *column)
{
    fixture_open(f);
    char sql[4096] = "CREATE TABLE agent_sandbox_route (";
    const struct sl_schema_table *t = &sl_schema_tables[SL_SCHEMA_ROUTE];
    bool first = true;
    for (size_t i = 0; i < t->ncolumns; i++) {
        if (strcmp(t->columns[i].name, column) == 0)
            continue;
        strcat(sql, first ? "" : ", ");
        strcat(sql, t->columns[i].name);
        strcat(sql, " VARCHAR(191)"); /* indexable on MySQL, unlike TEXT */
        first = false;
    }
    strcat(sql, ")");
    raw_exec(f->path, sql);

    struct sl_error err = {0};
    char *warnings = NULL;
    assert_int_equal(f->store->ops->prepare_schema(f->store, true, &warnings, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    char expect[512];
    snprintf(expect, sizeof(expect), "database schema is missing agent_sandbox_route.%s. %s",
             column, sl_schema_help_missing_columns);
    assert_string_equal(err.message, expect);
    assert_non_null(strstr(err.message, "ALTER TABLE"));
    assert_null(warnings);
    /* The other tables were still created. */
    assert_raw(f->path,
               DIALECT("SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                       "AND name IN ('agent_sandbox_worker', 'agent_sandbox_exec')",
                       "SELECT count(*) FROM information_schema.tables "
                       "WHERE table_name IN ('agent_sandbox_worker', 'agent_sandbox_exec')"),
               "2");
}

static void test_schema_missing_column(void **state)
{
    check_missing_route_column(*state, "ready_at");
}

/* An indexed column: the index cannot be created, the refusal still names it. */
static void test_schema_missing_indexed_column(void **state)
{
    check_missing_route_column(*state, "status");
}

static void test_schema_extra_column(void **state)
{
    struct fixture *f = *state;
    raw_exec(f->path, "ALTER TABLE agent_sandbox_route ADD COLUMN legacy_flag INTEGER;"
                      "ALTER TABLE agent_sandbox_exec ADD COLUMN note TEXT");
    struct sl_error err = {0};
    char *warnings = NULL;
    assert_int_equal(f->store->ops->prepare_schema(f->store, false, &warnings, &err), 0);
    assert_non_null(warnings);
    assert_string_equal(warnings, "agent_sandbox_route.legacy_flag, agent_sandbox_exec.note");
    free(warnings);
}

static void test_schema_no_tables(void **state)
{
    struct fixture *f = *state;
    fixture_open(f);
    struct sl_error err = {0};
    char *warnings = NULL;
    assert_int_equal(f->store->ops->prepare_schema(f->store, false, &warnings, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    char expect[512];
    snprintf(expect, sizeof(expect),
             "database schema is missing agent_sandbox_worker, agent_sandbox_route, "
             "agent_sandbox_exec. %s",
             sl_schema_help_no_tables);
    assert_string_equal(err.message, expect);
    assert_non_null(strstr(err.message, "deploy SQL"));
    assert_non_null(strstr(err.message, "SANDBOX_DATABASE_AUTO_DDL"));
}

/* The three tables as the reference implementation creates them on SQLite
 * (SQLAlchemy's DDL for FLEET.md §2): no termination_reason, which is ours. */
static const char reference_ddl[] =
    "CREATE TABLE agent_sandbox_worker ("
    " worker_id VARCHAR(128) NOT NULL, worker_epoch VARCHAR(64) NOT NULL,"
    " endpoint VARCHAR(512) NOT NULL, status VARCHAR(32) NOT NULL, capacity INTEGER NOT NULL,"
    " running_sessions INTEGER NOT NULL DEFAULT 0, profile_hash VARCHAR(191) NOT NULL,"
    " heartbeat_at DATETIME NOT NULL, started_at DATETIME NOT NULL,"
    " updated_at DATETIME NOT NULL, PRIMARY KEY (worker_id));"
    "CREATE INDEX idx_agent_sandbox_worker_heartbeat ON agent_sandbox_worker "
    "(status, heartbeat_at);"
    "CREATE TABLE agent_sandbox_route ("
    " sandbox_id VARCHAR(128) NOT NULL, workspace_scope_id VARCHAR(191) NOT NULL,"
    " worker_id VARCHAR(128), worker_epoch VARCHAR(64), generation BIGINT NOT NULL DEFAULT 1,"
    " sandbox_uid INTEGER NOT NULL, profile_id VARCHAR(64) NOT NULL,"
    " profile_hash VARCHAR(191) NOT NULL, status VARCHAR(32) NOT NULL,"
    " storage_mode VARCHAR(16) NOT NULL, active_exec_id VARCHAR(128),"
    " last_active_at DATETIME NOT NULL, generation_started_at DATETIME NOT NULL,"
    " generation_created_by VARCHAR(255), ready_at DATETIME, last_released_generation BIGINT,"
    " last_released_at DATETIME, last_release_reason VARCHAR(32), last_released_by VARCHAR(255),"
    " last_lifetime_ms BIGINT, lifecycle_count INTEGER NOT NULL DEFAULT 1,"
    " total_lifetime_ms BIGINT NOT NULL DEFAULT 0, lifecycle_history_json JSON,"
    " created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL, PRIMARY KEY (sandbox_id),"
    " CONSTRAINT uniq_agent_sandbox_uid UNIQUE (sandbox_uid));"
    "CREATE INDEX idx_agent_sandbox_route_scope ON agent_sandbox_route (workspace_scope_id);"
    "CREATE INDEX idx_agent_sandbox_route_worker ON agent_sandbox_route (worker_id, status);"
    "CREATE TABLE agent_sandbox_exec ("
    " sandbox_id VARCHAR(128) NOT NULL, exec_id VARCHAR(128) NOT NULL,"
    " generation BIGINT NOT NULL, worker_id VARCHAR(128) NOT NULL, status VARCHAR(32) NOT NULL,"
    " command_json JSON NOT NULL, exec_scope VARCHAR(128), exit_code INTEGER, stdout_text TEXT,"
    " stderr_text TEXT, truncated BOOLEAN NOT NULL DEFAULT FALSE, started_at DATETIME,"
    " finished_at DATETIME, created_at DATETIME NOT NULL, PRIMARY KEY (sandbox_id, exec_id));"
    "CREATE INDEX idx_agent_sandbox_exec_status ON agent_sandbox_exec (sandbox_id, status);"
    "INSERT INTO agent_sandbox_route (sandbox_id, workspace_scope_id, worker_id, generation,"
    " sandbox_uid, profile_id, profile_hash, status, storage_mode, active_exec_id,"
    " last_active_at, generation_started_at, created_at, updated_at) VALUES ('sb-1', 'scope-1',"
    " 'worker-a-8080', 1, 40001, 'default', 'hash-1', 'RUNNING', 'local', 'exec-run',"
    " '" T0_TEXT "', '" T0_TEXT "', '" T0_TEXT "', '" T0_TEXT "');"
    "INSERT INTO agent_sandbox_exec (sandbox_id, exec_id, generation, worker_id, status,"
    " command_json, exit_code, stdout_text, stderr_text, truncated, started_at, finished_at,"
    " created_at) VALUES ('sb-1', 'exec-done', 1, 'worker-a-8080', 'SUCCEEDED',"
    " '{\"argv\":[\"true\"]}', 0, 'hello', '', FALSE, '" T0_TEXT "', '" T0_TEXT "', '" T0_TEXT "');"
    "INSERT INTO agent_sandbox_exec (sandbox_id, exec_id, generation, worker_id, status,"
    " command_json, truncated, started_at, created_at) VALUES ('sb-1', 'exec-run', 1,"
    " 'worker-a-8080', 'RUNNING', '{\"argv\":[\"sleep\",\"9\"]}', FALSE, '" T0_TEXT "',"
    " '" T0_TEXT "');";

/* reference_ddl in the running dialect: PostgreSQL has no DATETIME, and
 * MySQL's keeps no fraction unless asked. */
static const char *ref_ddl(void)
{
    /* TIMESTAMP and DATETIME(6) are longer, 16 times */
    static char pg[sizeof(reference_ddl) + 64];
    if (!g_pg_url)
        return reference_ddl;
    const char *type = g_mysql ? "DATETIME(6)" : "TIMESTAMP";
    char *w = pg;
    for (const char *r = reference_ddl; *r;) {
        if (strncmp(r, "DATETIME", 8) == 0) {
            memcpy(w, type, strlen(type));
            w += strlen(type);
            r += 8;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return pg;
}

#define ADD_REASON_SQL \
    "ALTER TABLE agent_sandbox_exec ADD COLUMN termination_reason VARCHAR(32)"

/* Without auto-DDL, a database without our additive column is refused like
 * any missing column, and the help gives the exact ALTER to run. */
static void test_schema_additive_refused(void **state)
{
    struct fixture *f = *state;
    fixture_open(f);
    raw_exec(f->path, ref_ddl());
    struct sl_error err = {0};
    char *warnings = NULL;
    assert_int_equal(f->store->ops->prepare_schema(f->store, false, &warnings, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_string_equal(err.message, "database schema is missing "
                                     "agent_sandbox_exec.termination_reason. Enable "
                                     "SANDBOX_DATABASE_AUTO_DDL or run: " ADD_REASON_SQL ";");
    assert_string_equal(err.detail, err.message);
    assert_null(warnings);
    /* Nothing was changed. */
    assert_raw(f->path,
               DIALECT("SELECT count(*) FROM pragma_table_info('agent_sandbox_exec') "
                       "WHERE name = 'termination_reason'",
                       "SELECT count(*) FROM information_schema.columns WHERE "
                       "table_name = 'agent_sandbox_exec' AND column_name = 'termination_reason'"),
               "0");
    assert_raw(f->path, "SELECT count(*) FROM agent_sandbox_exec", "2");

    /* The statement the help gives is the fix. The reference's database has
     * no tenant tables: accepted, without tenancy. */
    raw_exec(f->path, ADD_REASON_SQL);
    assert_int_equal(f->store->ops->prepare_schema(f->store, false, &warnings, &err), 0);
    assert_null(warnings);
    assert_false(f->store->tenancy);
}

/* With auto-DDL, the same database gets the column by ALTER TABLE and keeps
 * its rows; the column is ours, never reported as extra. */
static void test_schema_additive_upgrade(void **state)
{
    struct fixture *f = *state;
    fixture_open(f);
    raw_exec(f->path, ref_ddl());
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    char *warnings = NULL;
    if (s->ops->prepare_schema(s, true, &warnings, &err) < 0)
        fail_msg("prepare_schema: %s", sl_error_text(&err));
    assert_null(warnings);
    assert_raw(f->path,
               DIALECT3("SELECT group_concat(name || ' ' || type || ' ' || \"notnull\", ',') "
                        "FROM pragma_table_info('agent_sandbox_exec') WHERE cid >= 13",
                        "SELECT string_agg(column_name || ' ' || data_type || ' ' || is_nullable, "
                        "',' ORDER BY ordinal_position) FROM information_schema.columns "
                        "WHERE table_name = 'agent_sandbox_exec' AND ordinal_position >= 14",
                        "SELECT GROUP_CONCAT(COLUMN_NAME || ' ' || COLUMN_TYPE || ' ' || "
                        "IS_NULLABLE ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'agent_sandbox_exec' "
                        "AND ORDINAL_POSITION >= 14"),
               DIALECT3("created_at DATETIME 1,termination_reason VARCHAR(32) 0",
                        "created_at timestamp without time zone NO,"
                        "termination_reason character varying YES",
                        "created_at datetime(6) NO,termination_reason varchar(32) YES"));
    /* Idempotent; the check alone passes; nothing else was rebuilt. */
    assert_int_equal(s->ops->prepare_schema(s, true, &warnings, &err), 0);
    assert_int_equal(s->ops->prepare_schema(s, false, &warnings, &err), 0);
    assert_null(warnings);
    assert_raw(f->path,
               DIALECT3("SELECT count(*) FROM sqlite_master WHERE type = 'index' "
                        "AND name LIKE 'idx_agent_sandbox_%'",
                        "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'idx_agent_sandbox_%'",
                        "SELECT count(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS "
                        "WHERE TABLE_SCHEMA = DATABASE() AND INDEX_NAME LIKE 'idx_agent_sandbox_%'"),
               "6"); /* the reference's four, the tenant tables' and the E2B table's, made by
                        auto-DDL */
    assert_true(s->tenancy);
    assert_true(s->e2b);

    /* The rows are kept, the old ones without a reason. */
    assert_raw(f->path, "SELECT count(*) FROM agent_sandbox_exec", "2");
    struct sl_exec_record got;
    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-done", &got, &err), 1);
    assert_string_equal(got.status, "SUCCEEDED");
    assert_string_equal(got.stdout_text, "hello");
    assert_int_equal(got.finished_at, T0);
    assert_string_equal(got.termination_reason, "");
    sl_exec_record_clear(&got);
    struct sl_route route;
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.active_exec_id, "exec-run");
    sl_route_clear(&route);

    /* ... and the upgraded table takes reasons. */
    finish_reason(s, "sb-1", "exec-run", 1, "FAILED", 137, "OOM_KILLED", T0 + 10);
    assert_reason(s, "sb-1", "exec-run", "OOM_KILLED");
    assert_raw(f->path, "SELECT termination_reason IS NULL FROM agent_sandbox_exec "
                        "WHERE exec_id = 'exec-done'",
               "1");
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.status, "READY");
    assert_null(route.active_exec_id);
    sl_route_clear(&route);
}

static void test_schema_compare_pure(void **state)
{
    (void)state;
    struct sl_strlist live[SL_SCHEMA_NTABLES] = {0};
    /* Worker table absent, route complete but for two columns, exec complete. */
    const struct sl_schema_table *route = &sl_schema_tables[SL_SCHEMA_ROUTE];
    for (size_t i = 0; i < route->ncolumns; i++)
        if (strcmp(route->columns[i].name, "status") != 0 &&
            strcmp(route->columns[i].name, "updated_at") != 0)
            assert_int_equal(sl_strlist_push(&live[SL_SCHEMA_ROUTE], route->columns[i].name), 0);
    const struct sl_schema_table *ex = &sl_schema_tables[SL_SCHEMA_EXEC];
    for (size_t i = 0; i < ex->ncolumns; i++)
        assert_int_equal(sl_strlist_push(&live[SL_SCHEMA_EXEC], ex->columns[i].name), 0);
    assert_int_equal(sl_strlist_push(&live[SL_SCHEMA_EXEC], "extra_one"), 0);

    struct sl_strlist missing = {0}, extra = {0};
    assert_int_equal(sl_schema_compare(live, &missing, &extra), 3);
    char *m = sl_schema_join(&missing), *x = sl_schema_join(&extra);
    assert_string_equal(m, "agent_sandbox_worker, agent_sandbox_route.status, "
                           "agent_sandbox_route.updated_at");
    assert_string_equal(x, "agent_sandbox_exec.extra_one");
    free(m);
    free(x);

    /* One table present => the ALTER TABLE help, not the deploy-SQL one. */
    struct sl_error err = {0};
    char *warnings = NULL;
    assert_int_equal(sl_schema_check(live, &warnings, &err), -1);
    assert_non_null(strstr(err.message, sl_schema_help_missing_columns));
    assert_null(warnings);

    /* A long list is shortened, never the help sentence. */
    struct sl_strlist many = {0};
    char name[64];
    for (int i = 0; i < 30; i++) {
        snprintf(name, sizeof(name), "agent_sandbox_route.column_%02d", i);
        assert_int_equal(sl_strlist_push(&many, name), 0);
    }
    char buf[256];
    size_t n = sl_schema_missing_message(&many, false, buf, sizeof(buf));
    assert_int_equal(n, strlen(buf));
    assert_true(n < sizeof(buf));
    const char *head = "database schema is missing agent_sandbox_route.column_00, ";
    assert_true(strncmp(buf, head, strlen(head)) == 0);
    assert_non_null(strstr(buf, " more). "));
    size_t help_len = strlen(sl_schema_help_missing_columns);
    assert_string_equal(buf + n - help_len, sl_schema_help_missing_columns);

    /* Only additive columns missing: the help is their ALTER; one reference
     * column among them: the generic help. */
    struct sl_strlist ours = {0};
    assert_int_equal(sl_strlist_push(&ours, "agent_sandbox_exec.termination_reason"), 0);
    n = sl_schema_missing_message(&ours, false, buf, sizeof(buf));
    assert_string_equal(buf, "database schema is missing agent_sandbox_exec.termination_reason. "
                             "Enable SANDBOX_DATABASE_AUTO_DDL or run: ALTER TABLE "
                             "agent_sandbox_exec ADD COLUMN termination_reason VARCHAR(32);");
    assert_int_equal(n, strlen(buf));
    assert_int_equal(sl_strlist_push(&ours, "agent_sandbox_exec.status"), 0);
    sl_schema_missing_message(&ours, false, buf, sizeof(buf));
    assert_non_null(strstr(buf, sl_schema_help_missing_columns));
    assert_null(strstr(buf, "ADD COLUMN"));
    sl_strlist_free(&ours);

    /* Our column is known: never an extra. */
    const struct sl_schema_column *last = &ex->columns[ex->ncolumns - 1];
    assert_string_equal(last->name, "termination_reason");
    assert_true(last->additive);
    assert_true(last->nullable);
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++)
        for (size_t c = 0; c < sl_schema_tables[t].ncolumns; c++)
            if (sl_schema_tables[t].columns[c].additive)
                assert_ptr_equal(&sl_schema_tables[t].columns[c], last);

    sl_strlist_free(&many);
    sl_strlist_free(&missing);
    sl_strlist_free(&extra);
    for (size_t t = 0; t < SL_SCHEMA_NTABLES; t++)
        sl_strlist_free(&live[t]);
}

static void test_no_schema_is_store_error(void **state)
{
    struct fixture *f = *state;
    fixture_open(f);
    struct sl_route r;
    struct sl_error err = {0};
    assert_int_equal(f->store->ops->route_get(f->store, "sb-1", &r, &err), -1);
    assert_string_equal(err.code, SL_E_STORE);
    const char *missing = DIALECT3("no such table", "does not exist", "doesn't exist");
    assert_null(strstr(err.message, missing));
    assert_non_null(strstr(err.detail, missing));
}

/* ---- routes ---- */

static void test_route_roundtrip(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    struct sl_route in, out;

    route_make(&in, "sb-full", 40001, 7, "READY");
    in.worker_id = xdup("worker-a-8080");
    in.worker_epoch = xdup("epoch-1");
    snprintf(in.storage_mode, sizeof(in.storage_mode), "shared");
    in.active_exec_id = xdup("exec-1");
    in.last_active_at = T0 + 1;
    in.generation_started_at = T0 + 2;
    in.generation_created_by = xdup("workspace:scope-1");
    in.ready_at = T0 + 3;
    in.last_released_generation = 6;
    in.last_released_at = T0 + 4;
    in.last_release_reason = xdup("CLIENT_RELEASE");
    in.last_released_by = xdup("workspace:scope-1");
    in.last_lifetime_ms = 0; /* 0 is a value, -1 is NULL */
    in.lifecycle_count = 4;
    in.total_lifetime_ms = 123456789012;
    in.lifecycle_history_json = xdup("[{\"generation\":6,\"release_reason\":\"CLIENT_RELEASE\"}]");
    in.created_at = T0 - 1000000; /* whole-second fraction */
    in.updated_at = T0 + 5;
    assert_int_equal(s->ops->route_insert(s, &in, &err), 1);
    route_fetch(s, "sb-full", &out);

    assert_string_equal(out.sandbox_id, in.sandbox_id);
    assert_string_equal(out.workspace_scope_id, in.workspace_scope_id);
    assert_string_equal(out.worker_id, in.worker_id);
    assert_string_equal(out.worker_epoch, in.worker_epoch);
    assert_int_equal(out.generation, 7);
    assert_int_equal(out.sandbox_uid, 40001);
    assert_string_equal(out.profile_id, in.profile_id);
    assert_string_equal(out.profile_hash, in.profile_hash);
    assert_string_equal(out.status, "READY");
    assert_string_equal(out.storage_mode, "shared");
    assert_string_equal(out.active_exec_id, "exec-1");
    assert_int_equal(out.last_active_at, T0 + 1);
    assert_int_equal(out.generation_started_at, T0 + 2);
    assert_string_equal(out.generation_created_by, in.generation_created_by);
    assert_int_equal(out.ready_at, T0 + 3);
    assert_int_equal(out.last_released_generation, 6);
    assert_int_equal(out.last_released_at, T0 + 4);
    assert_string_equal(out.last_release_reason, "CLIENT_RELEASE");
    assert_string_equal(out.last_released_by, in.last_released_by);
    assert_int_equal(out.last_lifetime_ms, 0);
    assert_int_equal(out.lifecycle_count, 4);
    assert_int_equal(out.total_lifetime_ms, 123456789012);
    assert_string_equal(out.lifecycle_history_json, in.lifecycle_history_json);
    assert_int_equal(out.created_at, T0 - 1000000);
    assert_int_equal(out.updated_at, T0 + 5);

    /* Stored as SQLAlchemy writes DateTime to SQLite: space, six digits. */
    assert_raw(f->path, "SELECT updated_at FROM agent_sandbox_route WHERE sandbox_id = 'sb-full'",
               "2026-09-30 17:43:53.123461");
    assert_raw(f->path, "SELECT created_at FROM agent_sandbox_route WHERE sandbox_id = 'sb-full'",
               "2026-09-30 17:43:52.123456");

    /* A deep copy is independent of its source. */
    struct sl_route copy;
    assert_int_equal(sl_route_copy(&copy, &out), 0);
    assert_ptr_not_equal(copy.sandbox_id, out.sandbox_id);
    assert_string_equal(copy.lifecycle_history_json, out.lifecycle_history_json);
    assert_string_equal(copy.worker_id, "worker-a-8080");
    sl_route_clear(&copy);
    sl_route_clear(&out);
    sl_route_clear(&in);

    /* The NULL conventions: 0 timestamps, 0 last_released_generation, -1
     * last_lifetime_ms and NULL strings are stored as SQL NULL. */
    route_make(&in, "sb-nulls", 40002, 1, "ASSIGNED");
    assert_int_equal(s->ops->route_insert(s, &in, &err), 1);
    assert_raw(f->path,
               "SELECT worker_id IS NULL AND worker_epoch IS NULL AND active_exec_id IS NULL "
               "AND generation_created_by IS NULL AND ready_at IS NULL "
               "AND last_released_generation IS NULL AND last_released_at IS NULL "
               "AND last_release_reason IS NULL AND last_released_by IS NULL "
               "AND last_lifetime_ms IS NULL AND lifecycle_history_json IS NULL "
               "FROM agent_sandbox_route WHERE sandbox_id = 'sb-nulls'",
               "1");
    route_fetch(s, "sb-nulls", &out);
    assert_null(out.worker_id);
    assert_null(out.worker_epoch);
    assert_null(out.active_exec_id);
    assert_null(out.generation_created_by);
    assert_int_equal(out.ready_at, 0);
    assert_int_equal(out.last_released_generation, 0);
    assert_int_equal(out.last_released_at, 0);
    assert_null(out.last_release_reason);
    assert_null(out.last_released_by);
    assert_int_equal(out.last_lifetime_ms, -1);
    assert_null(out.lifecycle_history_json);
    assert_string_equal(out.status, "ASSIGNED");
    sl_route_clear(&out);
    sl_route_clear(&in);

    /* Timestamps written by others: 'T' separator, no fraction. */
    raw_exec(f->path, "UPDATE agent_sandbox_route SET ready_at = '2026-09-30T17:43:53', "
                      "last_active_at = '2026-09-30 17:43:53.5' WHERE sandbox_id = 'sb-nulls'");
    route_fetch(s, "sb-nulls", &out);
    assert_int_equal(out.ready_at, T0 - 123456);
    assert_int_equal(out.last_active_at, T0 - 123456 + 500000);
    sl_route_clear(&out);

    assert_int_equal(s->ops->route_get(s, "sb-absent", &out, &err), 0);
}

static void test_route_insert_conflicts(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    struct sl_error err = {0};
    struct sl_route r;
    route_put(s, "sb-1", 40001, 1, "ASSIGNED");

    route_make(&r, "sb-1", 40002, 1, "ASSIGNED"); /* same id, free uid */
    assert_int_equal(s->ops->route_insert(s, &r, &err), 0);
    sl_route_clear(&r);

    route_make(&r, "sb-2", 40001, 1, "ASSIGNED"); /* new id, taken uid */
    assert_int_equal(s->ops->route_insert(s, &r, &err), -2);
    sl_route_clear(&r);

    route_make(&r, "sb-1", 40001, 1, "ASSIGNED"); /* both: the caller must re-read */
    assert_int_equal(s->ops->route_insert(s, &r, &err), 0);
    sl_route_clear(&r);

    route_make(&r, "sb-2", 40002, 1, "ASSIGNED");
    assert_int_equal(s->ops->route_insert(s, &r, &err), 1);
    sl_route_clear(&r);
}

/* route_touch moves only the two activity clocks of an awake route. */
static void test_route_touch(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    struct sl_error err = {0};
    struct sl_route out;
    route_put(s, "sb-t", 40011, 2, "READY");
    route_put(s, "sb-r", 40012, 5, "RELEASED");
    assert_int_equal(s->ops->route_touch(s, "sb-t", 1, T0 + 99, &err), 0); /* wrong generation */
    assert_int_equal(s->ops->route_touch(s, "sb-r", 5, T0 + 99, &err), 0); /* not awake */
    assert_int_equal(s->ops->route_touch(s, "nope", 1, T0 + 99, &err), 0);
    assert_int_equal(s->ops->route_touch(s, "sb-t", 2, T0 + 77, &err), 1);
    route_fetch(s, "sb-t", &out);
    assert_int_equal(out.last_active_at, T0 + 77);
    assert_int_equal(out.updated_at, T0 + 77);
    assert_string_equal(out.status, "READY");
    assert_int_equal(out.generation, 2);
    assert_int_equal(out.created_at, T0);
    sl_route_clear(&out);
    route_fetch(s, "sb-r", &out);
    assert_int_equal(out.updated_at, T0);
    sl_route_clear(&out);
}

static void test_route_cas(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    struct sl_error err = {0};
    struct sl_route r, out;
    route_put(s, "sb-1", 40001, 3, "ASSIGNED");
    static const char *const from_assigned[] = {"ASSIGNED", "READY", NULL};
    static const char *const from_released[] = {"RELEASED", NULL};

    route_fetch(s, "sb-1", &r);
    snprintf(r.status, sizeof(r.status), "READY");
    r.ready_at = T0 + 10;
    r.worker_id = xdup("worker-b-8080");
    r.updated_at = T0 + 10;
    r.sandbox_uid = 49999; /* permanent: never rewritten */

    assert_int_equal(s->ops->route_cas(s, &r, 2, from_assigned, &err), 0); /* wrong generation */
    assert_int_equal(s->ops->route_cas(s, &r, 3, from_released, &err), 0); /* wrong status */
    route_fetch(s, "sb-1", &out);
    assert_string_equal(out.status, "ASSIGNED");
    assert_int_equal(out.updated_at, T0);
    sl_route_clear(&out);

    assert_int_equal(s->ops->route_cas(s, &r, 3, from_assigned, &err), 1);
    route_fetch(s, "sb-1", &out);
    assert_string_equal(out.status, "READY");
    assert_int_equal(out.ready_at, T0 + 10);
    assert_string_equal(out.worker_id, "worker-b-8080");
    assert_int_equal(out.updated_at, T0 + 10);
    assert_int_equal(out.sandbox_uid, 40001);
    sl_route_clear(&out);

    /* The status moved on: the same CAS no longer matches. Then a generation
     * bump as a release would write it. */
    static const char *const from_ready[] = {"READY", NULL};
    assert_int_equal(s->ops->route_cas(s, &r, 3, from_released, &err), 0);
    snprintf(r.status, sizeof(r.status), "RELEASED");
    r.generation = 4;
    assert_int_equal(s->ops->route_cas(s, &r, 3, from_ready, &err), 1);
    assert_int_equal(s->ops->route_cas(s, &r, 3, from_released, &err), 0);
    route_fetch(s, "sb-1", &out);
    assert_int_equal(out.generation, 4);
    assert_string_equal(out.status, "RELEASED");
    sl_route_clear(&out);
    sl_route_clear(&r);
}

/* ---- executions ---- */

static void test_exec_admit_and_replay(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    route_put(s, "sb-1", 40001, 1, "READY");

    struct sl_exec_record rec, existing = {0}, got;
    exec_make(&rec, "sb-1", "exec-1", 1, NULL, T0 + 100);
    assert_int_equal(s->ops->exec_admit(s, &rec, 4, &existing, &err), SL_ADMIT_ADMITTED);
    assert_null(existing.exec_id);

    struct sl_route route;
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.status, "RUNNING");
    assert_string_equal(route.active_exec_id, "exec-1");
    assert_int_equal(route.last_active_at, T0 + 100);
    assert_int_equal(route.updated_at, T0 + 100);
    sl_route_clear(&route);

    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-1", &got, &err), 1);
    assert_string_equal(got.status, "RUNNING");
    assert_string_equal(got.worker_id, "worker-a-8080");
    assert_string_equal(got.command_json, rec.command_json);
    assert_null(got.exec_scope);
    assert_false(got.has_exit_code);
    assert_null(got.stdout_text);
    assert_null(got.stderr_text);
    assert_false(got.truncated);
    assert_int_equal(got.started_at, T0 + 100);
    assert_int_equal(got.created_at, T0 + 100);
    assert_int_equal(got.finished_at, 0);
    assert_int_equal(got.generation, 1);
    sl_exec_record_clear(&got);
    sl_exec_record_clear(&rec);

    /* Same id, different request: the stored record comes back untouched. */
    exec_make(&rec, "sb-1", "exec-1", 1, "other-scope", T0 + 200);
    assert_int_equal(s->ops->exec_admit(s, &rec, 1, &existing, &err), SL_ADMIT_REPLAY);
    assert_string_equal(existing.exec_id, "exec-1");
    assert_string_equal(existing.status, "RUNNING");
    assert_null(existing.exec_scope);
    assert_int_equal(existing.started_at, T0 + 100);
    assert_non_null(strstr(existing.command_json, "\"exec_scope\":null"));
    sl_exec_record_clear(&existing);
    sl_exec_record_clear(&rec);

    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-none", &got, &err), 0);
}

static void test_exec_admit_parallel_limit(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    route_put(s, "sb-1", 40001, 1, "READY");
    const char *code = NULL;
    assert_int_equal(admit(s, "sb-1", "exec-a", 1, "a", 2, T0, &code), SL_ADMIT_ADMITTED);
    assert_int_equal(admit(s, "sb-1", "exec-b", 1, "b", 2, T0, &code), SL_ADMIT_ADMITTED);
    /* A free scope is still over the limit; a busy scope too: limit first. */
    assert_refused(s, "sb-1", "exec-c", "c", 1, 2, SL_E_PARALLEL_EXEC_LIMIT);
    assert_refused(s, "sb-1", "exec-d", "a", 1, 2, SL_E_PARALLEL_EXEC_LIMIT);
    assert_refused(s, "sb-1", "exec-e", NULL, 1, 2, SL_E_PARALLEL_EXEC_LIMIT);
    /* A replay is answered before the limit. */
    assert_int_equal(admit(s, "sb-1", "exec-a", 1, "a", 2, T0, &code), SL_ADMIT_REPLAY);

    /* Only RUNNING executions of this generation count. */
    finish(s, "sb-1", "exec-a", 1, "SUCCEEDED", 0, T0 + 1);
    assert_int_equal(admit(s, "sb-1", "exec-c", 1, "c", 2, T0, &code), SL_ADMIT_ADMITTED);
}

static void test_exec_scope_rules(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    /* One sandbox per row of API.md §4.4. */
    route_put(s, "sb-ab", 40001, 1, "READY");
    assert_admitted(s, "sb-ab", "exec-1", "A");
    assert_admitted(s, "sb-ab", "exec-2", "B"); /* scoped A, scoped B: parallel */

    route_put(s, "sb-aa", 40002, 1, "READY");
    assert_admitted(s, "sb-aa", "exec-1", "A");
    assert_refused(s, "sb-aa", "exec-2", "A", 1, 8, SL_E_EXEC_SCOPE_BUSY);

    route_put(s, "sb-a-none", 40003, 1, "READY");
    assert_admitted(s, "sb-a-none", "exec-1", "A");
    assert_refused(s, "sb-a-none", "exec-2", NULL, 1, 8, SL_E_EXEC_SCOPE_BUSY);
    assert_refused(s, "sb-a-none", "exec-3", "", 1, 8, SL_E_EXEC_SCOPE_BUSY); /* "" = unscoped */

    route_put(s, "sb-none", 40004, 1, "READY");
    assert_admitted(s, "sb-none", "exec-1", NULL);
    assert_refused(s, "sb-none", "exec-2", "A", 1, 8, SL_E_EXEC_SCOPE_BUSY);
    assert_refused(s, "sb-none", "exec-3", NULL, 1, 8, SL_E_EXEC_SCOPE_BUSY);

    /* An empty scope column falls back to the stored request's exec_scope. */
    route_put(s, "sb-fallback", 40005, 1, "READY");
    assert_admitted(s, "sb-fallback", "exec-1", "A");
    raw_exec(f->path, "UPDATE agent_sandbox_exec SET exec_scope = NULL "
                      "WHERE sandbox_id = 'sb-fallback'");
    assert_admitted(s, "sb-fallback", "exec-2", "B");
    assert_refused(s, "sb-fallback", "exec-3", "A", 1, 8, SL_E_EXEC_SCOPE_BUSY);
    /* ... and an unreadable request counts as unscoped. */
    /* (PostgreSQL's json column holds only JSON: a document that is not an
     * object is as unreadable as a scope.) */
    raw_exec(f->path, DIALECT("UPDATE agent_sandbox_exec SET exec_scope = '', "
                              "command_json = 'not json' "
                              "WHERE sandbox_id = 'sb-fallback' AND exec_id = 'exec-1'",
                              "UPDATE agent_sandbox_exec SET exec_scope = '', "
                              "command_json = '[\"not an object\"]' "
                              "WHERE sandbox_id = 'sb-fallback' AND exec_id = 'exec-1'"));
    assert_refused(s, "sb-fallback", "exec-4", "C", 1, 8, SL_E_EXEC_SCOPE_BUSY);

    /* Running executions of another generation do not count. */
    route_put(s, "sb-gen", 40006, 2, "READY");
    raw_exec(f->path, "INSERT INTO agent_sandbox_exec (sandbox_id, exec_id, generation, worker_id, "
                      "status, command_json, exec_scope, truncated, started_at, created_at) "
                      "VALUES ('sb-gen', 'old', 1, 'w', 'RUNNING', '{}', NULL, FALSE, "
                      "'2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000')");
    const char *code = NULL;
    assert_int_equal(admit(s, "sb-gen", "exec-1", 2, NULL, 1, T0, &code), SL_ADMIT_ADMITTED);
}

static void test_exec_admit_stale_and_suspended(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    assert_refused(s, "sb-missing", "exec-1", NULL, 1, 8, SL_E_STALE_GENERATION);

    route_put(s, "sb-gen", 40001, 2, "READY");
    assert_refused(s, "sb-gen", "exec-1", NULL, 1, 8, SL_E_STALE_GENERATION);
    assert_refused(s, "sb-gen", "exec-1", NULL, 3, 8, SL_E_STALE_GENERATION);

    static const char *const stale[] = {"RELEASING", "RELEASED"};
    static const char *const dormant[] = {"SUSPENDING", "SUSPENDED"};
    char id[32];
    for (size_t i = 0; i < 2; i++) {
        snprintf(id, sizeof(id), "sb-%s", stale[i]);
        route_put(s, id, 40010 + (int64_t)i, 1, stale[i]);
        assert_refused(s, id, "exec-1", NULL, 1, 8, SL_E_STALE_GENERATION);

        snprintf(id, sizeof(id), "sb-%s", dormant[i]);
        route_put(s, id, 40020 + (int64_t)i, 1, dormant[i]);
        assert_refused(s, id, "exec-1", "A", 1, 8, SL_E_SUSPENDED);
        /* Dormant at another generation is just stale. */
        assert_refused(s, id, "exec-1", "A", 2, 8, SL_E_STALE_GENERATION);
    }

    /* ASSIGNED (resolved, before connect) admits at the database level. */
    route_put(s, "sb-assigned", 40030, 1, "ASSIGNED");
    assert_admitted(s, "sb-assigned", "exec-1", NULL);
}

static void test_exec_finish(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    route_put(s, "sb-1", 40001, 1, "READY");
    const char *code = NULL;
    /* Admitted in the order 1, 3, 2 but started 100, 300, 200. */
    assert_int_equal(admit(s, "sb-1", "exec-1", 1, "s1", 8, T0 + 100, &code), SL_ADMIT_ADMITTED);
    assert_int_equal(admit(s, "sb-1", "exec-3", 1, "s3", 8, T0 + 300, &code), SL_ADMIT_ADMITTED);
    assert_int_equal(admit(s, "sb-1", "exec-2", 1, "s2", 8, T0 + 200, &code), SL_ADMIT_ADMITTED);

    struct sl_route route;
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.active_exec_id, "exec-1"); /* first admitted stays */
    sl_route_clear(&route);

    finish(s, "sb-1", "exec-1", 1, "FAILED", 2, T0 + 1000);
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.status, "RUNNING");
    assert_string_equal(route.active_exec_id, "exec-2"); /* earliest-started remaining */
    assert_int_equal(route.last_active_at, T0 + 1000);
    assert_int_equal(route.updated_at, T0 + 1000);
    sl_route_clear(&route);

    struct sl_exec_record got;
    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-1", &got, &err), 1);
    assert_string_equal(got.status, "FAILED");
    assert_true(got.has_exit_code);
    assert_int_equal(got.exit_code, 2);
    assert_string_equal(got.stdout_text, "out\n");
    assert_string_equal(got.stderr_text, "");
    assert_true(got.truncated);
    assert_int_equal(got.finished_at, T0 + 1000);
    assert_int_equal(got.started_at, T0 + 100);
    sl_exec_record_clear(&got);

    finish(s, "sb-1", "exec-2", 1, "TIMED_OUT", -1, T0 + 2000);
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.active_exec_id, "exec-3");
    assert_string_equal(route.status, "RUNNING");
    sl_route_clear(&route);
    assert_raw(f->path, "SELECT exit_code IS NULL FROM agent_sandbox_exec WHERE exec_id = 'exec-2'",
               "1");

    finish(s, "sb-1", "exec-3", 1, "SUCCEEDED", 0, T0 + 3000);
    route_fetch(s, "sb-1", &route);
    assert_string_equal(route.status, "READY");
    assert_null(route.active_exec_id);
    assert_int_equal(route.last_active_at, T0 + 3000);
    sl_route_clear(&route);
}

/* An admission withdrawn before its command started (its locks stayed
 * busy): the record is gone, the id can be admitted again, the route is
 * recomputed; a finished record is never withdrawn. */
static void test_exec_withdraw(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    route_put(s, "sb-w", 40009, 1, "READY");
    const char *code = NULL;
    assert_int_equal(admit(s, "sb-w", "exec-a", 1, "s1", 8, T0 + 100, &code), SL_ADMIT_ADMITTED);
    assert_int_equal(admit(s, "sb-w", "exec-b", 1, "s2", 8, T0 + 200, &code), SL_ADMIT_ADMITTED);
    struct sl_exec_record rec;
    exec_make(&rec, "sb-w", "exec-a", 1, "s1", T0 + 100);
    assert_int_equal(s->ops->exec_withdraw(s, &rec, T0 + 300, &err), 1);
    struct sl_exec_record got = {0};
    assert_int_equal(s->ops->exec_get(s, "sb-w", "exec-a", &got, &err), 0);
    struct sl_route route;
    route_fetch(s, "sb-w", &route);
    assert_string_equal(route.status, "RUNNING");
    assert_string_equal(route.active_exec_id, "exec-b");
    sl_route_clear(&route);
    /* Twice: nothing left to withdraw. */
    assert_int_equal(s->ops->exec_withdraw(s, &rec, T0 + 310, &err), 0);
    assert_int_equal(admit(s, "sb-w", "exec-a", 1, "s1", 8, T0 + 400, &code), SL_ADMIT_ADMITTED);
    finish(s, "sb-w", "exec-a", 1, "SUCCEEDED", 0, T0 + 500);
    assert_int_equal(s->ops->exec_withdraw(s, &rec, T0 + 600, &err), 0);
    assert_int_equal(s->ops->exec_get(s, "sb-w", "exec-a", &got, &err), 1);
    assert_string_equal(got.status, "SUCCEEDED");
    sl_exec_record_clear(&got);
    sl_exec_record_clear(&rec);
    finish(s, "sb-w", "exec-b", 1, "SUCCEEDED", 0, T0 + 700);
    route_fetch(s, "sb-w", &route);
    assert_string_equal(route.status, "READY");
    assert_null(route.active_exec_id);
    sl_route_clear(&route);
}

static void test_exec_finish_route_moved_on(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    struct sl_error err = {0};
    route_put(s, "sb-1", 40001, 1, "READY");
    const char *code = NULL;
    assert_int_equal(admit(s, "sb-1", "exec-1", 1, NULL, 8, T0, &code), SL_ADMIT_ADMITTED);

    /* Worker-lost release claimed while the exec runs: no resurrection. */
    struct sl_route r;
    static const char *const from_running[] = {"RUNNING", NULL};
    route_fetch(s, "sb-1", &r);
    snprintf(r.status, sizeof(r.status), "RELEASING");
    assert_int_equal(s->ops->route_cas(s, &r, 1, from_running, &err), 1);
    finish(s, "sb-1", "exec-1", 1, "SUCCEEDED", 0, T0 + 50);
    sl_route_clear(&r);
    route_fetch(s, "sb-1", &r);
    assert_string_equal(r.status, "RELEASING");
    assert_null(r.active_exec_id);
    sl_route_clear(&r);

    /* Generation moved on: the record is written, the route is not. */
    route_put(s, "sb-2", 40002, 1, "READY");
    assert_int_equal(admit(s, "sb-2", "exec-1", 1, NULL, 8, T0, &code), SL_ADMIT_ADMITTED);
    route_fetch(s, "sb-2", &r);
    static const char *const any[] = {"RUNNING", NULL};
    snprintf(r.status, sizeof(r.status), "ASSIGNED");
    r.generation = 2;
    r.updated_at = T0 + 10;
    assert_int_equal(s->ops->route_cas(s, &r, 1, any, &err), 1);
    sl_route_clear(&r);
    finish(s, "sb-2", "exec-1", 1, "SUCCEEDED", 0, T0 + 99);
    route_fetch(s, "sb-2", &r);
    assert_string_equal(r.status, "ASSIGNED");
    assert_string_equal(r.active_exec_id, "exec-1");
    assert_int_equal(r.updated_at, T0 + 10);
    sl_route_clear(&r);
    struct sl_exec_record got;
    assert_int_equal(s->ops->exec_get(s, "sb-2", "exec-1", &got, &err), 1);
    assert_string_equal(got.status, "SUCCEEDED");
    sl_exec_record_clear(&got);
}

static void test_exec_mark_running(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    route_put(s, "sb-1", 40001, 1, "READY");
    route_put(s, "sb-2", 40002, 1, "READY");
    assert_admitted(s, "sb-1", "exec-1", "a");
    assert_admitted(s, "sb-1", "exec-2", "b");
    assert_admitted(s, "sb-2", "exec-1", NULL);
    finish(s, "sb-1", "exec-2", 1, "SUCCEEDED", 0, T0 + 1);

    assert_int_equal(
        s->ops->exec_mark_running(s, "sb-1", 2, "WORKER_LOST", "WORKER_LOST", T0 + 5, &err), 0);
    assert_int_equal(
        s->ops->exec_mark_running(s, "sb-1", 1, "WORKER_LOST", "WORKER_LOST", T0 + 5, &err), 1);
    struct sl_exec_record got;
    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-1", &got, &err), 1);
    assert_string_equal(got.status, "WORKER_LOST");
    assert_string_equal(got.termination_reason, "WORKER_LOST");
    assert_int_equal(got.finished_at, T0 + 5);
    sl_exec_record_clear(&got);
    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-2", &got, &err), 1);
    assert_string_equal(got.status, "SUCCEEDED"); /* finished ones untouched */
    assert_string_equal(got.termination_reason, "");
    sl_exec_record_clear(&got);
    /* A late finish keeps the verdict and its reason. */
    finish_reason(s, "sb-1", "exec-1", 1, "SUCCEEDED", 0, "TIMED_OUT", T0 + 7);
    assert_reason(s, "sb-1", "exec-1", "WORKER_LOST");

    assert_int_equal(s->ops->exec_mark_worker_running(s, "worker-z", "WORKER_LOST",
                                                      "WORKER_RESTARTED", T0 + 6, &err),
                     0);
    assert_int_equal(s->ops->exec_mark_worker_running(s, "worker-a-8080", "WORKER_LOST",
                                                      "WORKER_RESTARTED", T0 + 6, &err),
                     1);
    assert_raw(f->path, "SELECT status || ' ' || finished_at || ' ' || termination_reason "
                        "FROM agent_sandbox_exec WHERE sandbox_id = 'sb-2'",
               "WORKER_LOST 2026-09-30 17:43:53.123462 WORKER_RESTARTED");
    assert_reason(s, "sb-2", "exec-1", "WORKER_RESTARTED");

    /* No reason is NULL, not "". */
    route_put(s, "sb-3", 40003, 1, "READY");
    assert_admitted(s, "sb-3", "exec-1", NULL);
    assert_int_equal(s->ops->exec_mark_running(s, "sb-3", 1, "CANCELLED", "", T0 + 8, &err), 1);
    assert_raw(f->path, "SELECT status || ' ' || CASE WHEN termination_reason IS NULL "
                        "THEN 1 ELSE 0 END "
                        "FROM agent_sandbox_exec WHERE sandbox_id = 'sb-3'",
               "CANCELLED 1");
    assert_reason(s, "sb-3", "exec-1", "");
}

/* termination_reason through admit, finish, get and the admin list. */
static void test_exec_termination_reason(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    route_put(s, "sb-1", 40001, 1, "READY");
    assert_admitted(s, "sb-1", "exec-oom", "a");
    assert_admitted(s, "sb-1", "exec-cancel", "b");
    assert_admitted(s, "sb-1", "exec-plain", "c");
    /* Admission writes none. */
    assert_raw(f->path, "SELECT count(*) FROM agent_sandbox_exec WHERE termination_reason IS NULL",
               "3");
    assert_reason(s, "sb-1", "exec-oom", "");

    finish_reason(s, "sb-1", "exec-oom", 1, "FAILED", 137, "OOM_KILLED", T0 + 1);
    finish_reason(s, "sb-1", "exec-cancel", 1, "FAILED", -1, "CANCELLED_BY_CLIENT", T0 + 2);
    finish_reason(s, "sb-1", "exec-plain", 1, "SUCCEEDED", 0, "", T0 + 3);
    assert_reason(s, "sb-1", "exec-oom", "OOM_KILLED");
    assert_reason(s, "sb-1", "exec-cancel", "CANCELLED_BY_CLIENT");
    assert_reason(s, "sb-1", "exec-plain", "");
    assert_raw(f->path, "SELECT termination_reason IS NULL FROM agent_sandbox_exec "
                        "WHERE exec_id = 'exec-plain'",
               "1");

    /* A replay answers the stored reason. */
    struct sl_exec_record rec, existing = {0};
    exec_make(&rec, "sb-1", "exec-oom", 1, "a", T0 + 9);
    assert_int_equal(s->ops->exec_admit(s, &rec, 8, &existing, &err), SL_ADMIT_REPLAY);
    assert_string_equal(existing.termination_reason, "OOM_KILLED");
    sl_exec_record_clear(&existing);
    sl_exec_record_clear(&rec);

    /* The admin list returns it. */
    struct sl_exec_filter filter = {.sandbox_id = "sb-1", .status = "FAILED", .limit = 10};
    struct sl_exec_record *list = NULL;
    size_t n = 0;
    int64_t total = 0;
    assert_int_equal(s->ops->exec_list(s, &filter, &list, &n, &total, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(total, 2);
    for (size_t i = 0; i < n; i++) {
        assert_null(list[i].stdout_text);
        assert_string_equal(list[i].termination_reason, strcmp(list[i].exec_id, "exec-oom") == 0
                                                            ? "OOM_KILLED"
                                                            : "CANCELLED_BY_CLIENT");
    }
    sl_exec_records_free(list, n);

    /* A value wider than the buffer, written by someone else, reads back cut,
     * not as an error. */
    /* The servers hold VARCHAR(32) to its length: widen it as that writer did. */
    if (g_pg_url)
        raw_exec(f->path, DIALECT3("", "ALTER TABLE agent_sandbox_exec ALTER COLUMN "
                                       "termination_reason TYPE VARCHAR(64)",
                                   "ALTER TABLE agent_sandbox_exec MODIFY termination_reason "
                                   "VARCHAR(64)"));
    raw_exec(f->path, "UPDATE agent_sandbox_exec SET termination_reason = "
                      "'A_REASON_FAR_LONGER_THAN_THIRTY_TWO_BYTES' WHERE exec_id = 'exec-plain'");
    struct sl_exec_record got;
    assert_int_equal(s->ops->exec_get(s, "sb-1", "exec-plain", &got, &err), 1);
    assert_int_equal(strlen(got.termination_reason), sizeof(got.termination_reason) - 1);
    assert_true(strncmp(got.termination_reason, "A_REASON_FAR_LONGER_THAN_THIRTY_TWO_BYTES",
                        sizeof(got.termination_reason) - 1) == 0);
    sl_exec_record_clear(&got);
}

/* ---- workers ---- */

/* Tenants and their API keys (ours): on every backend, with the same
 * answers for a second insert, an unknown id and a second revocation. */
/* Egress policies by scope key: absent, written, replaced (an update, not
 * a second row), removed. */
static void test_egress_policies(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    assert_true(s->egress_policies);
    char *json = NULL;
    assert_int_equal(s->ops->egress_get(s, "sandbox:sb-1", &json, &err), 0);
    assert_null(json);
    assert_int_equal(s->ops->egress_put(s, "sandbox:sb-1", "{\"default\":\"deny\"}", "op", T0, &err),
                     0);
    assert_int_equal(s->ops->egress_put(s, "tenant:acme", "{\"default\":\"allow\"}", NULL, T0, &err),
                     0);
    assert_int_equal(s->ops->egress_put(s, "sandbox:sb-1", "{\"default\":\"allow\",\"allow\":[]}",
                                        "op", T0 + 1, &err),
                     0);
    assert_int_equal(s->ops->egress_get(s, "sandbox:sb-1", &json, &err), 1);
    assert_non_null(strstr(json, "\"allow\""));
    assert_null(strstr(json, "deny"));
    free(json);
    assert_int_equal(s->ops->egress_delete(s, "sandbox:sb-1", &err), 1);
    assert_int_equal(s->ops->egress_delete(s, "sandbox:sb-1", &err), 0);
    assert_int_equal(s->ops->egress_get(s, "sandbox:sb-1", &json, &err), 0);
    assert_int_equal(s->ops->egress_get(s, "tenant:acme", &json, &err), 1);
    free(json);
}

static void e2b_route(struct sl_store *s, const char *id, int64_t uid, const char *status)
{
    struct sl_route r;
    struct sl_error err = {0};
    route_make(&r, id, uid, 1, status);
    r.worker_id = xdup("w-1");
    assert_int_equal(s->ops->route_insert(s, &r, &err), 1);
    sl_route_clear(&r);
}

static void test_e2b_sandboxes(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    assert_true(s->e2b);
    e2b_route(s, "acme~ia", 1001, "READY");
    e2b_route(s, "acme~ib", 1002, "SUSPENDED");
    e2b_route(s, "acme~ic", 1003, "RELEASED");
    e2b_route(s, "beta~id", 1004, "READY");
    struct sl_e2b_sandbox e = {.template_id = "base", .metadata_json = "{\"k\":\"v\"}",
                               .on_timeout = "kill", .started_at = T0, .end_at = T0 + 5000000};
    const char *ids[] = {"acme~ia", "acme~ib", "acme~ic", "beta~id"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(e.sandbox_id, sizeof(e.sandbox_id), "%s", ids[i]);
        snprintf(e.on_timeout, sizeof(e.on_timeout), "%s", i == 1 ? "pause" : "kill");
        assert_int_equal(s->ops->e2b_insert(s, &e, &err), 1);
    }
    assert_int_equal(s->ops->e2b_insert(s, &e, &err), 0);

    struct sl_e2b_sandbox got = {0};
    assert_int_equal(s->ops->e2b_get(s, "acme~ia", &got, &err), 1);
    assert_string_equal(got.template_id, "base");
    assert_non_null(strstr(got.metadata_json, "\"k\""));
    assert_null(got.env_json);
    assert_string_equal(got.status, "READY");
    assert_string_equal(got.worker_id, "w-1");
    assert_true(got.generation == 1 && got.end_at == T0 + 5000000);
    sl_e2b_sandbox_clear(&got);
    assert_int_equal(s->ops->e2b_get(s, "acme~zz", &got, &err), 0);

    /* A tenant's, not released, in id order, paged by the last id. */
    struct sl_e2b_sandbox *v = NULL;
    size_t n = 0;
    assert_int_equal(s->ops->e2b_list(s, "acme~", NULL, 10, &v, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].sandbox_id, "acme~ia");
    assert_string_equal(v[1].status, "SUSPENDED");
    sl_e2b_sandboxes_free(v, n);
    assert_int_equal(s->ops->e2b_list(s, "acme~", "acme~ia", 10, &v, &n, &err), 0);
    assert_true(n == 1 && strcmp(v[0].sandbox_id, "acme~ib") == 0);
    sl_e2b_sandboxes_free(v, n);

    /* Due: past the deadline, this worker's, not released; a dormant one
     * only when its end is a kill. */
    assert_int_equal(s->ops->e2b_due(s, "w-1", T0 + 4000000, 10, &v, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(s->ops->e2b_due(s, "w-1", T0 + 5000000, 10, &v, &n, &err), 0);
    assert_int_equal(n, 2);
    sl_e2b_sandboxes_free(v, n);
    assert_int_equal(s->ops->e2b_due(s, "w-2", T0 + 5000000, 10, &v, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(s->ops->e2b_set_end(s, "acme~ia", T0 + 9000000, NULL, T0 + 1, &err), 1);
    assert_int_equal(s->ops->e2b_set_end(s, "acme~ib", T0, "kill", T0 + 1, &err), 1);
    assert_int_equal(s->ops->e2b_set_end(s, "acme~zz", T0, NULL, T0 + 1, &err), 0);
    assert_int_equal(s->ops->e2b_due(s, "w-1", T0 + 5000000, 10, &v, &n, &err), 0);
    assert_int_equal(n, 2); /* beta~id, and acme~ib now that its end kills */
    assert_string_equal(v[0].sandbox_id, "acme~ib");
    assert_string_equal(v[0].on_timeout, "kill");
    sl_e2b_sandboxes_free(v, n);
}

static void test_tenants_and_keys(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    assert_true(s->tenancy);
    struct sl_tenant t = {.tenant_id = "acme", .quotas_json = "{\"sandboxes\":3}",
                          .created_by = "operator", .created_at = T0};
    assert_int_equal(s->ops->tenant_insert(s, &t, &err), 1);
    assert_int_equal(s->ops->tenant_insert(s, &t, &err), 0);
    struct sl_tenant other = {.tenant_id = "beta", .created_at = T0 + 1};
    assert_int_equal(s->ops->tenant_insert(s, &other, &err), 1);

    struct sl_tenant got = {0};
    assert_int_equal(s->ops->tenant_get(s, "acme", &got, &err), 1);
    assert_string_equal(got.tenant_id, "acme");
    assert_non_null(strstr(got.quotas_json, "\"sandboxes\""));
    assert_string_equal(got.created_by, "operator");
    assert_true(got.created_at == T0 && got.updated_at == T0);
    sl_tenant_clear(&got);
    assert_int_equal(s->ops->tenant_get(s, "nobody", &got, &err), 0);
    assert_int_equal(s->ops->tenant_get(s, "beta", &got, &err), 1);
    assert_null(got.quotas_json);
    assert_null(got.created_by);
    sl_tenant_clear(&got);

    assert_int_equal(s->ops->tenant_set_quotas(s, "beta", "{\"running_sessions\":1}", T0 + 5, &err),
                     1);
    assert_int_equal(s->ops->tenant_set_quotas(s, "nobody", NULL, T0 + 5, &err), 0);
    struct sl_tenant *list = NULL;
    size_t n = 0;
    assert_int_equal(s->ops->tenant_list(s, &list, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].tenant_id, "acme");
    assert_string_equal(list[1].tenant_id, "beta");
    assert_non_null(strstr(list[1].quotas_json, "running_sessions"));
    assert_true(list[1].updated_at == T0 + 5);
    sl_tenants_free(list, n);

    struct sl_api_key k = {.key_id = "sl0123456789ab", .tenant_id = "acme", .name = "ci",
                           .secret_sha256 = "aa11", .created_by = "operator",
                           .created_at = T0, .expires_at = T0 + 3600 * 1000000LL};
    assert_int_equal(s->ops->api_key_insert(s, &k, &err), 1);
    assert_int_equal(s->ops->api_key_insert(s, &k, &err), 0); /* key_id taken */
    struct sl_api_key k2 = {.key_id = "slffffffffffff", .tenant_id = "acme", .name = "laptop",
                            .secret_sha256 = "bb22", .created_at = T0 + 2};
    assert_int_equal(s->ops->api_key_insert(s, &k2, &err), 1);
    struct sl_api_key k3 = {.key_id = "sl000000000001", .tenant_id = "beta", .name = "x",
                            .secret_sha256 = "cc33", .created_at = T0 + 3};
    assert_int_equal(s->ops->api_key_insert(s, &k3, &err), 1);

    struct sl_api_key kg = {0};
    assert_int_equal(s->ops->api_key_get(s, "sl0123456789ab", &kg, &err), 1);
    assert_string_equal(kg.tenant_id, "acme");
    assert_string_equal(kg.name, "ci");
    assert_string_equal(kg.secret_sha256, "aa11");
    assert_string_equal(kg.created_by, "operator");
    assert_true(kg.expires_at == T0 + 3600 * 1000000LL);
    assert_true(kg.revoked_at == 0);
    sl_api_key_clear(&kg);
    assert_int_equal(s->ops->api_key_get(s, "sl999999999999", &kg, &err), 0);

    struct sl_api_key *keys = NULL;
    assert_int_equal(s->ops->api_key_list(s, "acme", &keys, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0].key_id, "sl0123456789ab");
    assert_string_equal(keys[1].key_id, "slffffffffffff");
    assert_true(keys[1].expires_at == 0);
    sl_api_keys_free(keys, n);

    /* Revocation is the tenant's own key only, once. */
    assert_int_equal(s->ops->api_key_revoke(s, "beta", "sl0123456789ab", T0 + 9, &err), 0);
    assert_int_equal(s->ops->api_key_revoke(s, "acme", "sl0123456789ab", T0 + 9, &err), 1);
    assert_int_equal(s->ops->api_key_revoke(s, "acme", "sl0123456789ab", T0 + 10, &err), 0);
    assert_int_equal(s->ops->api_key_get(s, "sl0123456789ab", &kg, &err), 1);
    assert_true(kg.revoked_at == T0 + 9);
    sl_api_key_clear(&kg);
    assert_int_equal(s->ops->api_key_get(s, "sl000000000001", &kg, &err), 1);
    assert_true(kg.revoked_at == 0);
    sl_api_key_clear(&kg);
}

static void test_worker_upsert(void **state)
{
    struct fixture *f = *state;
    struct sl_store *s = f->store;
    struct sl_error err = {0};
    struct sl_worker_row w = {
        .worker_id = "worker-a-8080",
        .worker_epoch = "epoch-1",
        .endpoint = "http://worker-a:8080",
        .status = "ACTIVE",
        .capacity = 16,
        .running_sessions = 0,
        .profile_hash = "hash-1",
        .now = T0,
    };
    assert_int_equal(s->ops->worker_upsert(s, &w, &err), 0);
    assert_raw(f->path, "SELECT started_at || '|' || heartbeat_at || '|' || updated_at "
                        "FROM agent_sandbox_worker",
               T0_TEXT "|" T0_TEXT "|" T0_TEXT);

    w.worker_epoch = "epoch-2";
    w.status = "DRAINING";
    w.running_sessions = 3;
    w.now = T0 + 1000000;
    assert_int_equal(s->ops->worker_upsert(s, &w, &err), 0);
    assert_raw(f->path, "SELECT count(*) FROM agent_sandbox_worker", "1");
    assert_raw(f->path,
               "SELECT worker_epoch || '|' || status || '|' || running_sessions || '|' || "
               "capacity || '|' || started_at || '|' || heartbeat_at || '|' || updated_at "
               "FROM agent_sandbox_worker",
               "epoch-2|DRAINING|3|16|" T0_TEXT "|2026-09-30 17:43:54.123456|"
               "2026-09-30 17:43:54.123456");

    /* Another replica inserted the row between our UPDATE and INSERT: a
     * trigger makes the first UPDATE match nothing once, so the INSERT hits
     * the primary key and must be retried as an UPDATE. A MySQL trigger
     * cannot skip a row: there the retry (the core's, the same on every
     * driver) is not reached; the driver's half of it, a duplicate key read
     * as a conflict, is test_route_insert_conflicts'. */
    if (g_mysql)
        return;
    raw_exec(f->path,
             DIALECT("CREATE TABLE skip_once (n INTEGER);"
                     "INSERT INTO skip_once VALUES (1);"
                     "CREATE TRIGGER skip_update BEFORE UPDATE ON agent_sandbox_worker "
                     "WHEN (SELECT n FROM skip_once) > 0 BEGIN "
                     "UPDATE skip_once SET n = n - 1; SELECT RAISE(IGNORE); END;",
                     "CREATE TABLE skip_once (n INTEGER);"
                     "INSERT INTO skip_once VALUES (1);"
                     "CREATE FUNCTION skip_update() RETURNS trigger LANGUAGE plpgsql AS $$ "
                     "BEGIN IF (SELECT n FROM skip_once) > 0 THEN "
                     "UPDATE skip_once SET n = n - 1; RETURN NULL; END IF; RETURN NEW; END $$;"
                     "CREATE TRIGGER skip_update BEFORE UPDATE ON agent_sandbox_worker "
                     "FOR EACH ROW EXECUTE FUNCTION skip_update();"));
    w.worker_epoch = "epoch-3";
    w.now = T0 + 2000000;
    assert_int_equal(s->ops->worker_upsert(s, &w, &err), 0);
    assert_raw(f->path, "SELECT n FROM skip_once", "0");
    assert_raw(f->path, "SELECT worker_epoch || '|' || started_at || '|' || heartbeat_at "
                        "FROM agent_sandbox_worker",
               "epoch-3|" T0_TEXT "|2026-09-30 17:43:55.123456");
}

/* ---- concurrency and dispatch ---- */

struct race {
    struct sl_store *store;
    int index;
    int result;
    const char *code;
};

static void *race_admit(void *arg)
{
    struct race *r = arg;
    struct sl_exec_record rec, existing = {0};
    struct sl_error err = {0};
    char id[32], scope[32];
    snprintf(id, sizeof(id), "exec-%d", r->index);
    snprintf(scope, sizeof(scope), "scope-%d", r->index);
    exec_make(&rec, "sb-1", id, 1, scope, T0 + r->index);
    r->result = r->store->ops->exec_admit(r->store, &rec, 3, &existing, &err);
    r->code = r->result < 0 ? err.code : NULL;
    sl_exec_record_clear(&rec);
    sl_exec_record_clear(&existing);
    return NULL;
}

static void test_concurrent_admission(void **state)
{
    struct sl_store *s = ((struct fixture *)*state)->store;
    route_put(s, "sb-1", 40001, 1, "READY");
    enum { N = 12 };
    struct race races[N];
    pthread_t threads[N];
    for (int i = 0; i < N; i++) {
        races[i] = (struct race){s, i, 0, NULL};
        assert_int_equal(pthread_create(&threads[i], NULL, race_admit, &races[i]), 0);
    }
    int admitted = 0, limited = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(threads[i], NULL);
        if (races[i].result == SL_ADMIT_ADMITTED)
            admitted++;
        else if (races[i].code && strcmp(races[i].code, SL_E_PARALLEL_EXEC_LIMIT) == 0)
            limited++;
    }
    assert_int_equal(admitted, 3);
    assert_int_equal(limited, N - 3);
}

/* A server database that cannot be reached: the store opens (nothing is
 * connected at open), the first method answers METADATA_UNAVAILABLE, the
 * next within the second fails at once without a connect, /healthz's
 * reason says why without the address, and no password reaches a text. */
static void check_unreachable(const char *backend, const char *url, const char *database)
{
    struct sl_config cfg;
    struct sl_error err = {0};
    char *warning = NULL;
    memset(&cfg, 0, sizeof(cfg));
    cfg.db_backend = strcmp(backend, "mysql") == 0 ? SL_DB_MYSQL : SL_DB_POSTGRESQL;
    cfg.database_url = (char *)url;
    cfg.database_path = (char *)database;
    cfg.database_pool_size = 2;
    cfg.database_lock_timeout_seconds = 1;
    cfg.mysql_connect_timeout_seconds = 1;
    struct sl_store *db = sl_store_open(&cfg, &warning, &err);
    if (!db)
        fail_msg("open %s: %s", backend, sl_error_text(&err));
    assert_string_equal(db->backend, backend);
    assert_string_equal(db->database, database);
    /* Options the driver does not know are dropped and named. */
    assert_non_null(warning);
    assert_non_null(strstr(warning, "prepared_statement_cache_size"));
    assert_null(strstr(warning, "secret"));
    free(warning);
    struct sl_route r;
    int64_t t = sl_mono_us();
    assert_int_equal(db->ops->route_get(db, "sb-1", &r, &err), -1);
    assert_string_equal(err.code, SL_E_STORE);
    assert_null(strstr(err.detail, "secret"));
    assert_int_equal(db->ops->route_get(db, "sb-1", &r, &err), -1);
    assert_non_null(strstr(err.detail, "retried once a second"));
    assert_true(sl_mono_us() - t < 1500000);
    char why[128] = "";
    assert_false(db->ops->health(db, why, sizeof(why)));
    assert_true(why[0] != '\0');
    assert_null(strstr(why, "127.0.0.1"));
    db->ops->close(db);
}

static void test_store_open_dispatch(void **state)
{
    struct fixture *f = *state;
    check_unreachable("postgresql",
                      "postgresql+asyncpg://u:secret@127.0.0.1:1/sandbox?sslmode=disable&"
                      "prepared_statement_cache_size=0",
                      "sandbox");
    check_unreachable("mysql",
                      "mysql+aiomysql://u:secret@127.0.0.1:1/sandbox?charset=utf8mb4&"
                      "prepared_statement_cache_size=0",
                      "sandbox");

    struct sl_config cfg;
    struct sl_error err = {0};
    char *warning = NULL;
    memset(&cfg, 0, sizeof(cfg));
    cfg.db_backend = SL_DB_SQLITE;
    cfg.database_path = f->path;
    f->store = sl_store_open(&cfg, &warning, &err);
    assert_non_null(f->store);
    assert_null(warning);
    assert_string_equal(f->store->backend, "sqlite");
}

int main(void)
{
    const char *url = getenv("SANDLOOM_TEST_DATABASE_URL");
    g_pg_url = url && *url ? url : NULL;
    g_mysql = g_pg_url && strncmp(g_pg_url, "mysql", 5) == 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_schema_created, fixture_new, teardown),
        cmocka_unit_test_setup_teardown(test_schema_missing_column, fixture_new, teardown),
        cmocka_unit_test_setup_teardown(test_schema_missing_indexed_column, fixture_new, teardown),
        cmocka_unit_test_setup_teardown(test_schema_extra_column, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_schema_no_tables, fixture_new, teardown),
        cmocka_unit_test_setup_teardown(test_schema_additive_refused, fixture_new, teardown),
        cmocka_unit_test_setup_teardown(test_schema_additive_upgrade, fixture_new, teardown),
        cmocka_unit_test(test_schema_compare_pure),
        cmocka_unit_test_setup_teardown(test_no_schema_is_store_error, fixture_new, teardown),
        cmocka_unit_test_setup_teardown(test_route_roundtrip, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_egress_policies, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_e2b_sandboxes, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_route_insert_conflicts, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_route_touch, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_route_cas, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_admit_and_replay, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_admit_parallel_limit, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_scope_rules, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_admit_stale_and_suspended, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_withdraw, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_finish, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_finish_route_moved_on, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_mark_running, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_exec_termination_reason, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_worker_upsert, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_tenants_and_keys, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_admission, setup_ready, teardown),
        cmocka_unit_test_setup_teardown(test_store_open_dispatch, fixture_new, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
