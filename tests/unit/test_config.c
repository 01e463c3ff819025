/* Unit tests for config/config.c: defaults, sources (process env vs .env),
 * every refusal kind, URL normalisation, lists, booleans, token generation.
 * Each test starts from an environment without SANDBOX_* / BLOBSTORE_* /
 * AUTO_PORT0 and points .env at its own temporary file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"

extern char **environ;

struct fixture {
    char dir[PATH_MAX - 64];
    char dotenv[PATH_MAX];
    char oldcwd[PATH_MAX];
};

static void clear_sandbox_env(void)
{
    char *names[512];
    size_t n = 0;
    for (char **e = environ; *e && n < 512; e++) {
        if (strncmp(*e, "SANDBOX_", 8) == 0 || strncmp(*e, "BLOBSTORE_", 10) == 0 ||
            strncmp(*e, "AUTO_PORT0=", 11) == 0) {
            size_t len = strcspn(*e, "=");
            names[n++] = strndup(*e, len);
        }
    }
    for (size_t i = 0; i < n; i++) {
        unsetenv(names[i]);
        free(names[i]);
    }
}

static void write_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(content, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "%s/sl-test-config-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(fx->dir))
        return -1;
    snprintf(fx->dotenv, sizeof(fx->dotenv), "%s/.env", fx->dir);
    if (!getcwd(fx->oldcwd, sizeof(fx->oldcwd)) || chdir(fx->dir) != 0)
        return -1;
    clear_sandbox_env();
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    clear_sandbox_env();
    if (chdir(fx->oldcwd) != 0)
        return -1;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
    if (system(cmd) != 0)
        return -1;
    free(fx);
    return 0;
}

/* Names the refusal case under test in failure messages. */
static const char *current_case = "";

/* Load and expect a refusal naming `var` and not echoing `bad`. */
static void expect_refusal(const struct fixture *fx, const char *var, const char *bad)
{
    struct sl_config cfg;
    struct sl_error err = {0};
    int r = sl_config_load(&cfg, fx->dotenv, &err);
    if (r == 0)
        fail_msg("%s: expected a refusal naming %s", current_case, var);
    assert_int_equal(r, -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    if (!strstr(err.message, var))
        fail_msg("%s: message '%s' does not name %s", current_case, err.message, var);
    if (bad && (strstr(err.message, bad) || strstr(err.detail, bad)))
        fail_msg("%s: message '%s' echoes the value", current_case, err.message);
    /* A failed load leaves nothing allocated behind. */
    assert_null(cfg.host);
    assert_null(cfg.toolchains.items);
}

static void load_ok(const struct fixture *fx, struct sl_config *cfg)
{
    struct sl_error err = {0};
    if (sl_config_load(cfg, fx->dotenv, &err) != 0)
        fail_msg("load failed: %s", err.message);
}

static void assert_list(const struct sl_strlist *l, const char *const *want, size_t n)
{
    assert_int_equal(l->len, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(l->items[i], want[i]);
}

static bool urlsafe_token(const char *t)
{
    for (; *t; t++)
        if (!((*t >= 'A' && *t <= 'Z') || (*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') ||
              *t == '-' || *t == '_'))
            return false;
    return true;
}

/* ------------------------------------------------------------------------- */

static void test_defaults(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;
    load_ok(fx, &cfg);

    assert_string_equal(cfg.host, "0.0.0.0");
    assert_int_equal(cfg.port, 8080);
    assert_non_null(cfg.advertise_host);
    assert_true(cfg.advertise_host[0] != '\0');
    assert_string_equal(cfg.advertise_scheme, "http");
    assert_string_equal(cfg.startup_log_path, "/tmp/agent-sandbox-startup.log");
    assert_string_equal(cfg.profile_id, "coding-default");
    assert_string_equal(cfg.profile_hash, "bubblewrap-0.11.2-generic-v12");
    assert_int_equal(cfg.worker_capacity, 32);
    assert_true(cfg.heartbeat_interval_seconds == 10.0);
    assert_int_equal(cfg.heartbeat_ttl_seconds, 30);

    assert_string_equal(cfg.isolation_level, "auto");
    assert_int_equal(cfg.isolation_required_features.len, 0);
    assert_int_equal(cfg.isolation_optional_features.len, 0);
    assert_string_equal(cfg.network_mode, "private"); /* ours; the reference's is host */
    assert_string_equal(cfg.private_network_cidr, "auto");
    assert_string_equal(cfg.egress_default, "allow");
    assert_string_equal(cfg.execution_backend, "native");
    assert_string_equal(cfg.bubblewrap_path, "/usr/bin/bwrap");
    assert_string_equal(cfg.setpriv_path, "/usr/bin/setpriv");
    assert_string_equal(cfg.prlimit_path, "/usr/bin/prlimit");
    assert_string_equal(cfg.bash_path, "/bin/bash");
    assert_string_equal(cfg.bubblewrap_min_version, "0.11.2");
    assert_int_equal(cfg.tmpfs_bytes, 536870912);
    assert_int_equal(cfg.cpu_seconds, 300);
    assert_int_equal(cfg.max_processes, 64);
    assert_int_equal(cfg.max_open_files, 512);
    assert_int_equal(cfg.max_file_size_bytes, 1073741824);
    static const char *const mounts[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"};
    assert_list(&cfg.readonly_mounts, mounts, 6);

    assert_string_equal(cfg.local_root, "/var/lib/agent-sandbox/sandboxes");
    assert_null(cfg.shared_root);
    assert_int_equal(cfg.uid_start, 20000);
    assert_int_equal(cfg.uid_end, 59999);
    assert_int_equal(cfg.idle_ttl_seconds, 1800);
    assert_int_equal(cfg.orphan_release_grace_seconds, 300);
    assert_int_equal(cfg.orphan_running_grace_seconds, 60);
    assert_int_equal(cfg.orphan_reaper_batch_size, 100);
    assert_true(cfg.maintenance_interval_seconds == 60.0);
    assert_int_equal(cfg.suspended_retention_seconds, 2592000);
    assert_string_equal(cfg.suspend_snapshot, "auto");
    assert_int_equal(cfg.orphan_dormant_dir_ttl_seconds, 86400);
    assert_int_equal(cfg.disk_high_watermark_percent, 90);
    assert_int_equal(cfg.min_free_bytes, 1073741824);
    assert_int_equal(cfg.default_timeout_seconds, 300);
    assert_true(cfg.terminate_grace_seconds == 5.0);

    assert_int_equal(cfg.max_output_bytes, 8388608);
    assert_int_equal(cfg.max_file_api_bytes, 33554432);
    assert_int_equal(cfg.max_list_entries, 1000);
    assert_int_equal(cfg.max_parallel_execs_per_sandbox, 16);
    static const char *const mcp[] = {"localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*",
                                      "test"};
    assert_list(&cfg.mcp_allowed_hosts, mcp, 5);

    assert_string_equal(cfg.database_url, "sqlite+aiosqlite:///./data/agent-sandbox.db");
    assert_int_equal(cfg.db_backend, SL_DB_SQLITE);
    assert_string_equal(cfg.database_path, "./data/agent-sandbox.db");
    assert_true(cfg.database_url_default);
    assert_true(cfg.database_auto_ddl);
    assert_string_equal(cfg.metadata_backend, "auto");
    assert_int_equal(cfg.mysql_connect_timeout_seconds, 10);
    assert_int_equal(cfg.mysql_pool_recycle_seconds, 300);
    assert_string_equal(cfg.registry_backend, "memory");
    assert_string_equal(cfg.registry_namespace, "agent-sandbox");
    assert_string_equal(cfg.redis_url, "redis://127.0.0.1:6379/0");

    assert_string_equal(cfg.object_store_backend, "s3");
    assert_string_equal(cfg.blobstore_endpoint, "");
    assert_string_equal(cfg.blobstore_bucket, "");
    assert_string_equal(cfg.blobstore_base_prefix, "agent-sandbox/");
    assert_string_equal(cfg.blobstore_region, "us-east-1");
    assert_string_equal(cfg.blobstore_access_key, "");
    assert_string_equal(cfg.blobstore_secret_key, "");
    assert_string_equal(cfg.template_root, "/var/lib/agent-sandbox/templates");
    assert_int_equal(cfg.template_cache_max_bytes, -1);
    assert_int_equal(cfg.template_max_extract_bytes, 8589934592LL);
    assert_int_equal(cfg.template_max_archive_bytes, 4294967296LL);
    assert_int_equal(cfg.template_snapshot_max_entries, 200000);
    assert_int_equal(cfg.template_snapshot_max_depth, 128);
    assert_true(cfg.template_snapshot_timeout_seconds == 600.0);

    static const char *const tcs[] = {"python", "node"};
    assert_list(&cfg.toolchains, tcs, 2);
    assert_string_equal(cfg.python_index_url, "https://pypi.org/simple/");
    assert_string_equal(cfg.npm_registry, "https://registry.npmjs.org");
    assert_string_equal(cfg.go_proxy, "https://proxy.golang.org,direct");
    assert_string_equal(cfg.go_sumdb, "sum.golang.org");
    assert_string_equal(cfg.cargo_registry_url, "");
    assert_string_equal(cfg.maven_repository_url, "");
    assert_null(cfg.java_home);
    assert_null(cfg.rust_launcher_dir);
    assert_int_equal(cfg.http_proxies.len, 0);
    assert_string_equal(cfg.no_proxy, "127.0.0.1,localhost,::1");
    assert_int_equal(cfg.egress_denied_addresses.len, 0);
    assert_int_equal(cfg.egress_allowed_literals.len, 0);
    assert_string_equal(cfg.credential_broker, "disabled");
    assert_null(cfg.telemetry_sink);

    assert_string_equal(cfg.environment, "local");
    assert_string_equal(cfg.zone, "");
    assert_string_equal(cfg.region, "");
    assert_string_equal(cfg.workspace_root, "/var/lib/agent-sandbox/sandboxes");
    assert_string_equal(cfg.env_type, "LOCAL");
    assert_false(cfg.launcher_vars_set);
    assert_true(cfg.token_generated);

    /* Loading has no side effects: the SQLite parent is not created here. */
    struct stat st;
    assert_int_equal(stat("data", &st), -1);
    sl_config_free(&cfg);
}

static void test_env_overrides_dotenv(void **state)
{
    struct fixture *fx = *state;
    write_file(fx->dotenv, "SANDBOX_PORT=9000\nSANDBOX_WORKER_CAPACITY=5\n"
                           "SANDBOX_PROFILE_ID=from-dotenv\n");
    setenv("SANDBOX_PORT", "9100", 1);
    setenv("SANDBOX_PROFILE_ID", "", 1); /* set-but-empty in the process env still wins */
    struct sl_config cfg;
    load_ok(fx, &cfg);
    assert_int_equal(cfg.port, 9100);
    assert_int_equal(cfg.worker_capacity, 5);
    assert_string_equal(cfg.profile_id, "");
    sl_config_free(&cfg);
}

static void test_dotenv_parsing(void **state)
{
    struct fixture *fx = *state;
    write_file(fx->dotenv, "# a comment line\n"
                           "\n"
                           "   # indented comment\n"
                           "SANDBOX_HOST = 127.0.0.2   \n"
                           "export SANDBOX_PROFILE_ID=exported\n"
                           "SANDBOX_PROFILE_HASH=\"quoted # not a comment\"\n"
                           "SANDBOX_ADVERTISE_SCHEME='https'\n"
                           "SANDBOX_REGISTRY_NAMESPACE=ns # trailing comment\n"
                           "SANDBOX_REDIS_URL=redis://r:6379/1#frag\n"
                           "SANDBOX_WORKER_CAPACITY=7\r\n"
                           "SANDBOX_IDLE_TTL_SECONDS=10\n"
                           "SANDBOX_IDLE_TTL_SECONDS=20\n"
                           "this line has no equals sign\n"
                           "SANDBOX_ZONE=\n"
                           "SANDBOX_NOT_A_SETTING=whatever\n"
                           "BLOBSTORE_BUCKET=from-dotenv-is-ignored\n"
                           "BLOBSTORE_ACCESS_KEY=ignored-too\n");
    struct sl_config cfg;
    load_ok(fx, &cfg);
    assert_string_equal(cfg.host, "127.0.0.2");
    assert_string_equal(cfg.profile_id, "exported");
    assert_string_equal(cfg.profile_hash, "quoted # not a comment");
    assert_string_equal(cfg.advertise_scheme, "https");
    assert_string_equal(cfg.registry_namespace, "ns");
    assert_string_equal(cfg.redis_url, "redis://r:6379/1#frag");
    assert_int_equal(cfg.worker_capacity, 7);
    assert_int_equal(cfg.idle_ttl_seconds, 20);
    assert_string_equal(cfg.zone, "");
    /* BLOBSTORE_* fallbacks come from the process environment only. */
    assert_string_equal(cfg.blobstore_bucket, "");
    assert_string_equal(cfg.blobstore_access_key, "");
    sl_config_free(&cfg);
}

static void test_dotenv_missing_is_fine(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;
    struct sl_error err = {0};
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/does-not-exist.env", fx->dir);
    assert_int_equal(sl_config_load(&cfg, path, &err), 0);
    assert_int_equal(cfg.port, 8080);
    sl_config_free(&cfg);
    /* A directory in its place is refused rather than silently skipped. */
    assert_int_equal(mkdir(fx->dotenv, 0700), 0);
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_non_null(strstr(err.message, ".env"));
    rmdir(fx->dotenv);
}

struct refusal {
    const char *var;   /* variable set */
    const char *value; /* its bad value */
    const char *named; /* variable the message must name (NULL = var) */
};

static void test_refusals(void **state)
{
    struct fixture *fx = *state;
    static const struct refusal cases[] = {
        /* integers */
        {"SANDBOX_PORT", "80x80", NULL},
        {"SANDBOX_PORT", "1.5", NULL},
        {"SANDBOX_PORT", "", NULL},
        {"SANDBOX_PORT", "70000", NULL},
        {"SANDBOX_PORT", "-80", NULL},
        {"SANDBOX_CPU_SECONDS", "99999999999999999999999", NULL},
        {"SANDBOX_TMPFS_BYTES", "abc", NULL},
        {"SANDBOX_TMPFS_BYTES", "1e6", NULL},
        {"SANDBOX_WORKER_CAPACITY", "-3", NULL},
        {"SANDBOX_UID_START", "-20", NULL},
        {"SANDBOX_UID_END", "100", NULL},
        {"SANDBOX_IDLE_TTL_SECONDS", "-1800", NULL},
        {"SANDBOX_DISK_HIGH_WATERMARK_PERCENT", "100", NULL},
        {"SANDBOX_MIN_FREE_BYTES", "-77", NULL},
        {"SANDBOX_MAX_OUTPUT_BYTES", "-8", NULL},
        {"SANDBOX_MAX_FILE_API_BYTES", "-33", NULL},
        {"SANDBOX_DEFAULT_TIMEOUT_SECONDS", "-300", NULL},
        {"SANDBOX_MAX_LIST_ENTRIES", "10001", NULL},
        {"SANDBOX_MAX_PARALLEL_EXECS_PER_SANDBOX", "65", NULL},
        {"SANDBOX_TEMPLATE_SNAPSHOT_MAX_DEPTH", "257", NULL},
        {"SANDBOX_TEMPLATE_CACHE_MAX_BYTES", "-555", NULL},
        {"SANDBOX_HEARTBEAT_TTL_SECONDS", "20", NULL},
        {"AUTO_PORT0", "port-zero", NULL},
        /* floats */
        {"SANDBOX_HEARTBEAT_INTERVAL_SECONDS", "nan", NULL},
        {"SANDBOX_HEARTBEAT_INTERVAL_SECONDS", "inf", NULL},
        {"SANDBOX_HEARTBEAT_INTERVAL_SECONDS", "0x1p3", NULL},
        {"SANDBOX_MAINTENANCE_INTERVAL_SECONDS", "0.25", NULL},
        {"SANDBOX_TEMPLATE_SNAPSHOT_TIMEOUT_SECONDS", "1e999", NULL},
        {"SANDBOX_TEMPLATE_SNAPSHOT_TIMEOUT_SECONDS", "-600.0", NULL},
        {"SANDBOX_TERMINATE_GRACE_SECONDS", "soon", NULL},
        /* lists and choices */
        {"SANDBOX_TOOLCHAINS", "python,cobol", NULL},
        {"SANDBOX_TOOLCHAINS", " , ", NULL},
        {"SANDBOX_ISOLATION_LEVEL", "maximum", NULL},
        {"SANDBOX_ISOLATION_REQUIRED_FEATURES", "pid_namespace,net_namespace", NULL},
        {"SANDBOX_ISOLATION_OPTIONAL_FEATURES", "[\"landlock\"]", NULL},
        {"SANDBOX_NETWORK_MODE", "bridge", NULL},
        {"SANDBOX_SUSPEND_SNAPSHOT", "sometimes", NULL},
        {"SANDBOX_ENVIRONMENT", "production", NULL},
        {"SANDBOX_DATABASE_AUTO_DDL", "perhaps", NULL},
        /* backends */
        {"SANDBOX_EXECUTION_BACKEND", "firecracker", NULL},
        {"SANDBOX_EXECUTION_BACKEND", "   ", NULL},
        {"SANDBOX_METADATA_BACKEND", "dynamodb", NULL},
        {"SANDBOX_REGISTRY_BACKEND", "etcd-cluster", NULL},
        {"SANDBOX_OBJECT_STORE_BACKEND", "gcs-bucket", NULL},
        {"SANDBOX_CREDENTIAL_BROKER", "vault-agent", NULL},
        /* database URLs (secrets inside must never be echoed) */
        {"SANDBOX_DATABASE_URL", "oracle://scott:tigerpw@db/orcl", NULL},
        {"SANDBOX_DATABASE_URL", "postgresql+psycopg2://u:secretpw@h/db", NULL},
        {"SANDBOX_DATABASE_URL", "just-some-secretpw", NULL},
        {"SANDBOX_DATABASE_URL", "sqlite://", NULL},
        /* egress entries that are not addresses */
        {"SANDBOX_EGRESS_DENIED_ADDRESSES", "10.0.0.0/33", NULL},
        {"SANDBOX_EGRESS_DENIED_ADDRESSES", "example.com", NULL},
        {"SANDBOX_EGRESS_ALLOWED_LITERALS", "192.0.2.0/24", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        clear_sandbox_env();
        setenv(cases[i].var, cases[i].value, 1);
        /* Short values like "" or " , " cannot be meaningfully searched for. */
        const char *bad = strlen(cases[i].value) >= 3 && strcmp(cases[i].value, " , ") != 0
                              ? cases[i].value
                              : NULL;
        char label[160];
        snprintf(label, sizeof(label), "case %zu (%s)", i, cases[i].var);
        current_case = label;
        expect_refusal(fx, cases[i].named ? cases[i].named : cases[i].var, bad);
    }
    current_case = "";
}

static void test_refusal_from_dotenv(void **state)
{
    struct fixture *fx = *state;
    write_file(fx->dotenv, "SANDBOX_WORKER_CAPACITY=lots-of-workers\n");
    expect_refusal(fx, "SANDBOX_WORKER_CAPACITY", "lots-of-workers");
}

static void test_backend_message(void **state)
{
    struct fixture *fx = *state;
    setenv("SANDBOX_REGISTRY_BACKEND", "etcd-cluster", 1);
    struct sl_config cfg;
    struct sl_error err = {0};
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_string_equal(
        err.message, "SANDBOX_REGISTRY_BACKEND: plugin backends are not supported by this build");
    setenv("SANDBOX_REGISTRY_BACKEND", "", 1);
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_string_equal(err.message, "SANDBOX_REGISTRY_BACKEND: must not be empty");
}

static void test_selectors_normalised(void **state)
{
    struct fixture *fx = *state;
    setenv("SANDBOX_EXECUTION_BACKEND", "  BubbleWrap ", 1);
    setenv("SANDBOX_METADATA_BACKEND", "SQLAlchemy", 1);
    setenv("SANDBOX_REGISTRY_BACKEND", " Redis", 1);
    setenv("SANDBOX_OBJECT_STORE_BACKEND", "DISABLED", 1);
    setenv("SANDBOX_ISOLATION_LEVEL", " Strict ", 1);
    setenv("SANDBOX_NETWORK_MODE", "Isolated", 1);
    setenv("SANDBOX_SUSPEND_SNAPSHOT", "NEVER", 1);
    setenv("SANDBOX_ENVIRONMENT", " Local ", 1);
    struct sl_config cfg;
    load_ok(fx, &cfg);
    /* The reference's name for the backend is the native one's alias. */
    assert_string_equal(cfg.execution_backend, "native");
    assert_string_equal(cfg.metadata_backend, "sqlalchemy");
    assert_string_equal(cfg.registry_backend, "redis");
    assert_string_equal(cfg.object_store_backend, "disabled");
    assert_string_equal(cfg.isolation_level, "strict");
    assert_string_equal(cfg.network_mode, "isolated");
    assert_string_equal(cfg.suspend_snapshot, "never");
    assert_string_equal(cfg.environment, "local");
    sl_config_free(&cfg);
    setenv("SANDBOX_EXECUTION_BACKEND", " GVisor", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.execution_backend, "gvisor");
    sl_config_free(&cfg);

    setenv("SANDBOX_ISOLATION_LEVEL", "2", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.isolation_level, "2");
    sl_config_free(&cfg);
}

static void test_egress_refused(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;
    struct sl_error err = {0};

    /* The host mode cannot enforce the lists (the private mode can). */
    setenv("SANDBOX_NETWORK_MODE", "host", 1);
    setenv("SANDBOX_EGRESS_DENIED_ADDRESSES", "10.0.0.0/8, fd00::/8 ,192.0.2.1", 1);
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_memory_equal(err.message, "SANDBOX_EGRESS_POLICY_UNSUPPORTED:", 34);
    assert_non_null(strstr(err.message, "SANDBOX_EGRESS_DENIED_ADDRESSES"));
    assert_null(strstr(err.message, "10.0.0.0"));

    unsetenv("SANDBOX_EGRESS_DENIED_ADDRESSES");
    setenv("SANDBOX_EGRESS_ALLOWED_LITERALS", "[\"192.0.2.7\", \"2001:db8::1\"]", 1);
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_memory_equal(err.message, "SANDBOX_EGRESS_POLICY_UNSUPPORTED:", 34);
    assert_non_null(strstr(err.message, "SANDBOX_EGRESS_ALLOWED_LITERALS"));

    /* Empty lists are fine. */
    setenv("SANDBOX_EGRESS_ALLOWED_LITERALS", " , ", 1);
    load_ok(fx, &cfg);
    sl_config_free(&cfg);

    /* The private and isolated modes take them. */
    for (int i = 0; i < 2; i++) {
        setenv("SANDBOX_NETWORK_MODE", i ? "isolated" : "private", 1);
        setenv("SANDBOX_EGRESS_DENIED_ADDRESSES", "10.0.0.0/8", 1);
        setenv("SANDBOX_EGRESS_ALLOWED_LITERALS", "10.0.0.7", 1);
        load_ok(fx, &cfg);
        assert_int_equal(cfg.egress_denied_addresses.len, 1);
        sl_config_free(&cfg);
    }
    unsetenv("SANDBOX_EGRESS_DENIED_ADDRESSES");
    unsetenv("SANDBOX_EGRESS_ALLOWED_LITERALS");
    unsetenv("SANDBOX_NETWORK_MODE");
}

static void test_prod_requires_token(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;
    struct sl_error err = {0};
    setenv("SANDBOX_ENVIRONMENT", "prod", 1);
    setenv("SANDBOX_ADVERTISE_HOST", "worker-a.example.net", 1);
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_string_equal(err.message, "SANDBOX_INTERNAL_TOKEN is not configured");

    /* A short token outside local: refused, without echoing it. */
    setenv("SANDBOX_INTERNAL_TOKEN", "s3cret-token", 1);
    assert_int_equal(sl_config_load(&cfg, fx->dotenv, &err), -1);
    assert_string_equal(err.message, "SANDBOX_INTERNAL_TOKEN: must be at least 32 characters "
                                     "outside the local environment");
    assert_null(strstr(err.detail, "s3cret"));
    setenv("SANDBOX_INTERNAL_TOKEN", "s3cret-token-0123456789abcdef0123", 1);
    setenv("SANDBOX_ZONE", "z1", 1);
    setenv("SANDBOX_REGION", "r1", 1);
    load_ok(fx, &cfg);
    assert_false(cfg.token_short);
    assert_string_equal(cfg.internal_token, "s3cret-token-0123456789abcdef0123");
    assert_false(cfg.token_generated);
    assert_string_equal(cfg.env_type, "PROD-z1-r1");
    sl_config_free(&cfg);

    unsetenv("SANDBOX_ZONE");
    setenv("SANDBOX_ENVIRONMENT", "staging", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.env_type, "STAGING-r1");
    sl_config_free(&cfg);
}

static void test_advertise_host_outside_local(void **state)
{
    struct fixture *fx = *state;
    static const char *const loopbacks[] = {
        "localhost", "LOCALHOST.localdomain", "127.0.0.1", "127.9.8.7", "::1",
        "[::1]",     "::ffff:127.0.0.1",      ""};
    setenv("SANDBOX_ENVIRONMENT", "staging", 1);
    for (size_t i = 0; i < sizeof(loopbacks) / sizeof(loopbacks[0]); i++) {
        setenv("SANDBOX_ADVERTISE_HOST", loopbacks[i], 1);
        expect_refusal(fx, "SANDBOX_ADVERTISE_HOST",
                       strlen(loopbacks[i]) >= 3 ? loopbacks[i] : NULL);
    }
    struct sl_config cfg;
    setenv("SANDBOX_ADVERTISE_HOST", "10.1.2.3", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.advertise_host, "10.1.2.3");
    sl_config_free(&cfg);

    /* In local, loopback is fine. */
    setenv("SANDBOX_ENVIRONMENT", "local", 1);
    setenv("SANDBOX_ADVERTISE_HOST", "127.0.0.1", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.advertise_host, "127.0.0.1");
    sl_config_free(&cfg);
}

static void test_blobstore(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;

    setenv("BLOBSTORE_BUCKET", "fallback-bucket", 1);
    setenv("BLOBSTORE_ENDPOINT", "http://minio:9000", 1);
    setenv("BLOBSTORE_BASE_PREFIX", "//team/sandboxes//", 1);
    setenv("BLOBSTORE_REGION", "eu-west-1", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.blobstore_bucket, "fallback-bucket");
    assert_string_equal(cfg.blobstore_endpoint, "http://minio:9000");
    assert_string_equal(cfg.blobstore_base_prefix, "team/sandboxes/");
    assert_string_equal(cfg.blobstore_region, "eu-west-1");
    sl_config_free(&cfg);

    /* The prefixed form wins; an explicitly empty prefix stays empty. */
    setenv("SANDBOX_BLOBSTORE_BUCKET", "main-bucket", 1);
    setenv("SANDBOX_BLOBSTORE_BASE_PREFIX", "///", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.blobstore_bucket, "main-bucket");
    assert_string_equal(cfg.blobstore_base_prefix, "");
    sl_config_free(&cfg);

    /* Half a key pair with a bucket is refused, naming both, echoing none. */
    setenv("BLOBSTORE_ACCESS_KEY", "AKIAEXAMPLEKEY", 1);
    expect_refusal(fx, "BLOBSTORE_SECRET_KEY", "AKIAEXAMPLEKEY");
    expect_refusal(fx, "BLOBSTORE_ACCESS_KEY", "AKIAEXAMPLEKEY");
    unsetenv("BLOBSTORE_ACCESS_KEY");
    setenv("BLOBSTORE_SECRET_KEY", "wJalrXUtnFEMIsecret", 1);
    expect_refusal(fx, "BLOBSTORE_ACCESS_KEY", "wJalrXUtnFEMIsecret");

    /* Both set: fine. */
    setenv("BLOBSTORE_ACCESS_KEY", "AKIAEXAMPLEKEY", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.blobstore_access_key, "AKIAEXAMPLEKEY");
    assert_string_equal(cfg.blobstore_secret_key, "wJalrXUtnFEMIsecret");
    sl_config_free(&cfg);

    /* Half a pair without a bucket (or with the store disabled) builds no
     * client, so it is not refused. */
    unsetenv("BLOBSTORE_ACCESS_KEY");
    setenv("SANDBOX_BLOBSTORE_BUCKET", "", 1);
    unsetenv("BLOBSTORE_BUCKET");
    load_ok(fx, &cfg);
    assert_string_equal(cfg.blobstore_bucket, "");
    sl_config_free(&cfg);
    setenv("SANDBOX_BLOBSTORE_BUCKET", "main-bucket", 1);
    setenv("SANDBOX_OBJECT_STORE_BACKEND", "disabled", 1);
    load_ok(fx, &cfg);
    sl_config_free(&cfg);
}

struct url_case {
    const char *in;
    const char *url;
    enum sl_db_backend backend;
    const char *path;
    bool auto_ddl;
};

static void test_database_urls(void **state)
{
    struct fixture *fx = *state;
    static const struct url_case cases[] = {
        {"sqlite:////abs/x.db", "sqlite+aiosqlite:////abs/x.db", SL_DB_SQLITE, "/abs/x.db", true},
        {"sqlite+aiosqlite:///./d/x.db", "sqlite+aiosqlite:///./d/x.db", SL_DB_SQLITE, "./d/x.db",
         true},
        {"  sqlite:///rel.db?mode=rwc ", "sqlite+aiosqlite:///rel.db?mode=rwc", SL_DB_SQLITE,
         "rel.db", true},
        {"postgres://u:p@h:5432/app?sslmode=require",
         "postgresql+asyncpg://u:p@h:5432/app?sslmode=require", SL_DB_POSTGRESQL, "app", false},
        {"postgresql://h/db1", "postgresql+asyncpg://h/db1", SL_DB_POSTGRESQL, "db1", false},
        {"postgresql+psycopg://u:p@h/db2", "postgresql+asyncpg://u:p@h/db2", SL_DB_POSTGRESQL,
         "db2", false},
        {"postgresql+asyncpg://u:pa/ss@h/db3", "postgresql+asyncpg://u:pa/ss@h/db3",
         SL_DB_POSTGRESQL, "db3", false},
        {"mysql://u:p@h/shop", "mysql+aiomysql://u:p@h/shop", SL_DB_MYSQL, "shop", false},
        {"mysql+pymysql://u:p@h:3306/shop?charset=utf8mb4",
         "mysql+aiomysql://u:p@h:3306/shop?charset=utf8mb4", SL_DB_MYSQL, "shop", false},
        {"MySQL+AIOMySQL://h", "mysql+aiomysql://h", SL_DB_MYSQL, "", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sl_config cfg;
        setenv("SANDBOX_DATABASE_URL", cases[i].in, 1);
        load_ok(fx, &cfg);
        assert_string_equal(cfg.database_url, cases[i].url);
        assert_int_equal(cfg.db_backend, cases[i].backend);
        assert_string_equal(cfg.database_path, cases[i].path);
        assert_int_equal(cfg.database_auto_ddl, cases[i].auto_ddl);
        assert_false(cfg.database_url_default);
        sl_config_free(&cfg);
    }

    struct sl_config cfg;
    setenv("SANDBOX_DATABASE_URL", "postgresql://h/db", 1);
    setenv("SANDBOX_DATABASE_AUTO_DDL", "Yes", 1);
    load_ok(fx, &cfg);
    assert_true(cfg.database_auto_ddl);
    sl_config_free(&cfg);
    setenv("SANDBOX_DATABASE_URL", "sqlite:///x.db", 1);
    setenv("SANDBOX_DATABASE_AUTO_DDL", "off", 1);
    load_ok(fx, &cfg);
    assert_false(cfg.database_auto_ddl);
    sl_config_free(&cfg);
    /* Empty means default. */
    setenv("SANDBOX_DATABASE_URL", "  ", 1);
    unsetenv("SANDBOX_DATABASE_AUTO_DDL");
    load_ok(fx, &cfg);
    assert_true(cfg.database_url_default);
    assert_string_equal(cfg.database_url, "sqlite+aiosqlite:///./data/agent-sandbox.db");
    sl_config_free(&cfg);
}

static void test_parse_list(void **state)
{
    (void)state;
    struct sl_strlist l = {0};

    assert_int_equal(sl_config_parse_list(" [\"a\", \" b \", \"\", 3, 1.5, true, null] ", &l), 0);
    static const char *const json[] = {"a", "b", "3", "1.5", "True", "None"};
    assert_list(&l, json, 6);
    sl_strlist_free(&l);

    assert_int_equal(sl_config_parse_list("[\"x,y\"]", &l), 0);
    static const char *const one[] = {"x,y"};
    assert_list(&l, one, 1);
    sl_strlist_free(&l);

    assert_int_equal(sl_config_parse_list(" a, b,,c , ", &l), 0);
    static const char *const comma[] = {"a", "b", "c"};
    assert_list(&l, comma, 3);
    sl_strlist_free(&l);

    /* Starts with '[' but is not a JSON array: the comma form. */
    assert_int_equal(sl_config_parse_list("[a, b", &l), 0);
    static const char *const broken[] = {"[a", "b"};
    assert_list(&l, broken, 2);
    sl_strlist_free(&l);

    assert_int_equal(sl_config_parse_list("single", &l), 0);
    static const char *const single[] = {"single"};
    assert_list(&l, single, 1);
    sl_strlist_free(&l);

    assert_int_equal(sl_config_parse_list("   ", &l), 0);
    assert_int_equal(l.len, 0);
    assert_int_equal(sl_config_parse_list("[]", &l), 0);
    assert_int_equal(l.len, 0);
}

static void test_lists_in_config(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;
    setenv("SANDBOX_TOOLCHAINS", "[\"Node\", \"python\", \"node\", \"GO\"]", 1);
    setenv("SANDBOX_ISOLATION_REQUIRED_FEATURES", "PID_NAMESPACE, cgroup_namespace,pid_namespace",
           1);
    setenv("SANDBOX_HTTP_PROXIES", "[\"proxy-a:3128\", \"http://proxy-b:8080\"]", 1);
    setenv("SANDBOX_READONLY_MOUNTS", "/usr", 1);
    load_ok(fx, &cfg);
    static const char *const tcs[] = {"node", "python", "go"};
    assert_list(&cfg.toolchains, tcs, 3);
    static const char *const feats[] = {"cgroup_namespace", "pid_namespace"};
    assert_list(&cfg.isolation_required_features, feats, 2);
    static const char *const proxies[] = {"proxy-a:3128", "http://proxy-b:8080"};
    assert_list(&cfg.http_proxies, proxies, 2);
    static const char *const mounts[] = {"/usr"};
    assert_list(&cfg.readonly_mounts, mounts, 1);
    sl_config_free(&cfg);
}

static void test_parse_bool(void **state)
{
    (void)state;
    static const char *const yes[] = {"true", "TRUE", "1", "yes", "Yes", "on", " ON "};
    static const char *const no[] = {"false", "False", "0", "no", "NO", "off", "Off"};
    static const char *const bad[] = {"", "2", "y", "enabled", "truee"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        assert_int_equal(sl_config_parse_bool(yes[i]), 1);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        assert_int_equal(sl_config_parse_bool(no[i]), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(sl_config_parse_bool(bad[i]), -1);
    assert_int_equal(sl_config_parse_bool(NULL), -1);
}

static void test_numbers_accepted(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;
    setenv("SANDBOX_PORT", " 65535 ", 1);
    setenv("SANDBOX_HEARTBEAT_INTERVAL_SECONDS", "2.5", 1);
    setenv("SANDBOX_HEARTBEAT_TTL_SECONDS", "6", 1); /* 6 > 2 x 2.5 */
    setenv("SANDBOX_TERMINATE_GRACE_SECONDS", "-1", 1);
    setenv("SANDBOX_TEMPLATE_SNAPSHOT_TIMEOUT_SECONDS", "1e3", 1);
    setenv("SANDBOX_TEMPLATE_CACHE_MAX_BYTES", "0", 1);
    setenv("SANDBOX_MAX_FILE_SIZE_BYTES", "+9223372036854775807", 1);
    setenv("SANDBOX_UID_START", "1000", 1);
    setenv("SANDBOX_UID_END", "1000", 1);
    setenv("SANDBOX_DISK_HIGH_WATERMARK_PERCENT", "99", 1);
    setenv("SANDBOX_SUSPENDED_RETENTION_SECONDS", "0", 1);
    load_ok(fx, &cfg);
    assert_int_equal(cfg.port, 65535);
    assert_true(cfg.heartbeat_interval_seconds == 2.5);
    assert_int_equal(cfg.heartbeat_ttl_seconds, 6);
    assert_true(cfg.terminate_grace_seconds == -1.0);
    assert_true(cfg.template_snapshot_timeout_seconds == 1000.0);
    assert_int_equal(cfg.template_cache_max_bytes, 0);
    assert_int_equal(cfg.max_file_size_bytes, INT64_MAX);
    assert_int_equal(cfg.uid_start, 1000);
    assert_int_equal(cfg.uid_end, 1000);
    assert_int_equal(cfg.disk_high_watermark_percent, 99);
    assert_int_equal(cfg.suspended_retention_seconds, 0);
    sl_config_free(&cfg);

    /* TTL exactly 2 x interval is refused (must be strictly greater). */
    setenv("SANDBOX_HEARTBEAT_TTL_SECONDS", "5", 1);
    expect_refusal(fx, "SANDBOX_HEARTBEAT_TTL_SECONDS", NULL);
}

static void test_token_generated(void **state)
{
    struct fixture *fx = *state;
    struct sl_config a, b;
    load_ok(fx, &a);
    load_ok(fx, &b);
    assert_true(a.token_generated);
    assert_int_equal(strlen(a.internal_token), 43);
    assert_true(urlsafe_token(a.internal_token));
    assert_string_not_equal(a.internal_token, b.internal_token);
    sl_config_free(&a);
    sl_config_free(&b);

    setenv("SANDBOX_ENVIRONMENT", "staging", 1);
    setenv("SANDBOX_ADVERTISE_HOST", "worker-b", 1);
    load_ok(fx, &a);
    assert_true(a.token_generated);
    assert_int_equal(strlen(a.internal_token), 43);
    sl_config_free(&a);

    setenv("SANDBOX_INTERNAL_TOKEN", "given-0123456789abcdef0123456789ab", 1);
    load_ok(fx, &a);
    assert_false(a.token_generated);
    assert_string_equal(a.internal_token, "given-0123456789abcdef0123456789ab");
    sl_config_free(&a);
    /* Locally a short token is accepted, flagged for the startup warning. */
    setenv("SANDBOX_ENVIRONMENT", "local", 1);
    setenv("SANDBOX_INTERNAL_TOKEN", "given", 1);
    load_ok(fx, &a);
    assert_true(a.token_short);
    sl_config_free(&a);
}

static void test_derived_and_misc(void **state)
{
    struct fixture *fx = *state;
    struct sl_config cfg;

    setenv("SANDBOX_SHARED_ROOT", "/srv/shared/sandboxes/", 1);
    setenv("SANDBOX_BUBBLEWRAP_MIN_VERSION", "9.9.9", 1);
    setenv("SANDBOX_BASH_PATH", "/nonexistent/bash", 1);
    setenv("SANDBOX_SOMETHING_UNKNOWN", "ignored", 1);
    setenv("AUTO_PORT0", "18080", 1);
    setenv("SANDBOX_JAVA_HOME", "/usr/lib/jvm/default", 1);
    setenv("SANDBOX_TELEMETRY_SINK", "", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.workspace_root, "/srv/shared/sandboxes/");
    assert_string_equal(cfg.template_root, "/srv/shared/templates");
    assert_true(cfg.launcher_vars_set);
    assert_string_equal(cfg.bash_path, "/nonexistent/bash");
    assert_int_equal(cfg.port, 18080);
    assert_string_equal(cfg.java_home, "/usr/lib/jvm/default");
    assert_null(cfg.telemetry_sink);
    sl_config_free(&cfg);

    /* SANDBOX_PORT wins over AUTO_PORT0; an empty shared root is unset; an
     * explicit template root is kept; a relative root's parent is ".". */
    setenv("SANDBOX_PORT", "8081", 1);
    setenv("SANDBOX_SHARED_ROOT", "", 1);
    setenv("SANDBOX_LOCAL_ROOT", "state", 1);
    load_ok(fx, &cfg);
    assert_int_equal(cfg.port, 8081);
    assert_null(cfg.shared_root);
    assert_string_equal(cfg.workspace_root, "state");
    assert_string_equal(cfg.template_root, "templates");
    sl_config_free(&cfg);

    setenv("SANDBOX_TEMPLATE_ROOT", "/data/tpl", 1);
    setenv("SANDBOX_LOCAL_ROOT", "/sandboxes", 1);
    load_ok(fx, &cfg);
    assert_string_equal(cfg.template_root, "/data/tpl");
    sl_config_free(&cfg);
    unsetenv("SANDBOX_TEMPLATE_ROOT");
    load_ok(fx, &cfg);
    assert_string_equal(cfg.template_root, "/templates");
    sl_config_free(&cfg);

    /* Each launcher-only variable alone sets the flag; existence unchecked. */
    static const char *const launcher[] = {"SANDBOX_BUBBLEWRAP_PATH", "SANDBOX_SETPRIV_PATH",
                                           "SANDBOX_PRLIMIT_PATH"};
    for (size_t i = 0; i < 3; i++) {
        clear_sandbox_env();
        setenv(launcher[i], "/nonexistent/tool", 1);
        load_ok(fx, &cfg);
        assert_true(cfg.launcher_vars_set);
        sl_config_free(&cfg);
    }
}

static void test_free_is_safe(void **state)
{
    (void)state;
    struct sl_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    sl_config_free(&cfg);
    sl_config_free(&cfg);
    sl_config_free(NULL);

    cfg.host = strdup("partial");
    assert_int_equal(sl_strlist_push(&cfg.toolchains, "python"), 0);
    sl_config_free(&cfg);
    assert_null(cfg.host);
    assert_int_equal(cfg.toolchains.len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_overrides_dotenv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dotenv_parsing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dotenv_missing_is_fine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusal_from_dotenv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_selectors_normalised, setup, teardown),
        cmocka_unit_test_setup_teardown(test_egress_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prod_requires_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_advertise_host_outside_local, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blobstore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_database_urls, setup, teardown),
        cmocka_unit_test(test_parse_list),
        cmocka_unit_test_setup_teardown(test_lists_in_config, setup, teardown),
        cmocka_unit_test(test_parse_bool),
        cmocka_unit_test_setup_teardown(test_numbers_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_generated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_derived_and_misc, setup, teardown),
        cmocka_unit_test(test_free_is_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
