/* Service configuration (spec CONFIG.md §1–§3 and the value checks of
 * RUNTIME.md §13 that need no filesystem).
 *
 * Every plain variable is one row of config_vars[] below: name, type, field,
 * default, range or accepted values. Loading runs the table, then the few
 * settings that need more than one variable (database URL, token, derived
 * paths) and the cross-variable checks. Nothing here touches the filesystem
 * except reading the .env file; directories are created by their owners.
 *
 * Refusals name the variable and the reason, never the value: values may be
 * secrets (token, database password, S3 keys) and the message ends up in
 * logs. */
#include "config/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/base64.h"
#include "common/cleanup.h"
#include "config/config_doc.h"
#include "workspace/image.h"

/* A .env file larger than this is refused rather than read into memory. */
#define CONFIG_DOTENV_MAX (1024 * 1024)
#define CONFIG_TOKEN_BYTES 32
#define NOLIM INT64_MAX
#define NOMIN INT64_MIN

static void config_strlist_freep(struct sl_strlist *l)
{
    sl_strlist_free(l);
}
#define _cleanup_strlist_ __attribute__((cleanup(config_strlist_freep)))

/* ---------------------------------------------------------------------------
 * The variable table */

enum config_type {
    CFG_STR,     /* char *, value as given; empty stays empty; unset + NULL default => NULL */
    CFG_OPT_STR, /* char *, NULL when unset or empty */
    CFG_INT,     /* int64_t within [min, max]; F_OPTIONAL: -1 when unset or empty */
    CFG_INT32,   /* int within [min, max] */
    CFG_FLOAT,   /* double, finite, >= min (> min with F_EXCL_MIN) */
    CFG_CHOICE,  /* char *, trimmed + lower-cased, one of choices */
    CFG_BACKEND, /* char *, trimmed + lower-cased, non-empty, one of choices (else a plugin) */
    CFG_LIST,    /* struct sl_strlist, CONFIG.md §1 */
};

enum {
    F_LAUNCHER = 1 << 0,     /* configures the reference's launcher only (COMPAT §1) */
    F_PROCESS_ONLY = 1 << 1, /* read from the process environment only, never .env */
    F_OPTIONAL = 1 << 2,     /* CFG_INT: unset or empty => -1 */
    F_EXCL_MIN = 1 << 3,     /* CFG_FLOAT: strictly greater than min */
    F_LOWER = 1 << 4,        /* CFG_LIST: items lower-cased */
    F_DEDUP = 1 << 5,        /* CFG_LIST: duplicates dropped, first kept */
    F_SORT = 1 << 6,         /* CFG_LIST: items sorted */
    F_NONEMPTY = 1 << 7,     /* CFG_LIST: at least one item */
    F_IP = 1 << 8,           /* CFG_LIST: each item an IPv4/IPv6 address */
    F_CIDR = 1 << 9,         /* CFG_LIST: with F_IP, a network prefix is allowed */
};

struct config_var {
    const char *name;
    enum config_type type;
    size_t offset;
    const char *def;            /* the default, spelled as the variable would be */
    int64_t min, max;           /* CFG_INT, CFG_INT32, CFG_FLOAT (min only) */
    const char *const *choices; /* NULL-terminated; CFG_CHOICE, CFG_BACKEND, CFG_LIST allowlist */
    const char *what;           /* CFG_LIST allowlist: what one item is, for messages */
    const char *alt; /* fallback variable read from the process env when `name` is unset */
    unsigned flags;
};

static const char *const levels[] = {"auto", "basic", "standard", "strict", "1", "2", "3", NULL};
static const char *const features[] = {"cgroup_namespace", "pid_namespace", NULL};
static const char *const network_modes[] = {"host", "isolated", "private", NULL};
static const char *const egress_defaults[] = {"allow", "deny", NULL};
static const char *const on_off[] = {"on", "off", NULL};
static const char *const snapshot_modes[] = {"auto", "always", "never", NULL};
static const char *const environments[] = {"local", "staging", "prod", NULL};
static const char *const toolchain_names[] = {"go", "java", "node", "python", "rust", NULL};
/* Execution backends this build serves (runtime/internal.h); the
 * reference's "bubblewrap" names the native one, the boundary that takes
 * its place. */
static const char *const exec_backends[] = {"native", "gvisor", "bubblewrap", NULL};
static const char *const gvisor_platforms[] = {"ptrace", "systrap", "kvm", NULL};
static const char *const metadata_backends[] = {"auto", "sqlalchemy", NULL};
static const char *const registry_backends[] = {"memory", "redis", NULL};
static const char *const object_backends[] = {"s3", "disabled", NULL};
static const char *const credential_brokers[] = {"disabled", NULL};
static const char *const log_levels[] = {"debug", "info", "warn", "warning", "error", NULL};
static const char *const log_formats[] = {"text", "json", NULL};

/* One table row per variable; kept out of clang-format so each reads on one
 * line. */
/* clang-format off */
#define OFF(field) offsetof(struct sl_config, field)
#define V_STR(n, f, d, fl) \
    {.name = n, .type = CFG_STR, .offset = OFF(f), .def = d, .flags = fl}
#define V_OPT(n, f) \
    {.name = n, .type = CFG_OPT_STR, .offset = OFF(f)}
#define V_INT(n, f, d, lo, hi) \
    {.name = n, .type = CFG_INT, .offset = OFF(f), .def = d, .min = lo, .max = hi}
#define V_INT32(n, f, d, lo, hi, a) \
    {.name = n, .type = CFG_INT32, .offset = OFF(f), .def = d, .min = lo, .max = hi, .alt = a}
#define V_FLOAT(n, f, d, lo, fl) \
    {.name = n, .type = CFG_FLOAT, .offset = OFF(f), .def = d, .min = lo, .flags = fl}
#define V_CHOICE(n, f, d, c) \
    {.name = n, .type = CFG_CHOICE, .offset = OFF(f), .def = d, .choices = c}
#define V_BACKEND(n, f, d, c) \
    {.name = n, .type = CFG_BACKEND, .offset = OFF(f), .def = d, .choices = c}
#define V_LIST(n, f, d, c, w, fl) \
    {.name = n, .type = CFG_LIST, .offset = OFF(f), .def = d, .choices = c, .what = w, .flags = fl}
#define V_BLOB(n, f, d, a) \
    {.name = n, .type = CFG_STR, .offset = OFF(f), .def = d, .alt = a}
#define V_OPT_INT(n, f, lo, hi) \
    {.name = n, .type = CFG_INT, .offset = OFF(f), .min = lo, .max = hi, .flags = F_OPTIONAL}

static const struct config_var config_vars[] = {
    /* 2.1 identity and HTTP */
    V_STR("SANDBOX_HOST", host, "0.0.0.0", 0),
    V_INT32("SANDBOX_PORT", port, "8080", 1, 65535, "AUTO_PORT0"),
    V_STR("SANDBOX_ADVERTISE_HOST", advertise_host, NULL, 0), /* NULL: the FQDN, below */
    V_STR("SANDBOX_ADVERTISE_SCHEME", advertise_scheme, "http", 0),
    V_STR("SANDBOX_INTERNAL_TOKEN", internal_token, "", 0),
    /* Ours: where a token generated for an unset SANDBOX_INTERNAL_TOKEN is
     * kept for later starts (config/token_file.h); unset =>
     * <parent of the workspace root>/internal-token. */
    V_OPT("SANDBOX_INTERNAL_TOKEN_FILE", internal_token_file),
    V_STR("SANDBOX_STARTUP_LOG_PATH", startup_log_path, "/tmp/agent-sandbox-startup.log", 0),
    V_STR("SANDBOX_PROFILE_ID", profile_id, "coding-default", 0),
    V_STR("SANDBOX_PROFILE_HASH", profile_hash, "bubblewrap-0.11.2-generic-v12", 0),
    V_INT32("SANDBOX_WORKER_CAPACITY", worker_capacity, "32", 1, INT_MAX, NULL),
    V_FLOAT("SANDBOX_HEARTBEAT_INTERVAL_SECONDS", heartbeat_interval_seconds, "10.0", 0,
            F_EXCL_MIN),
    V_INT32("SANDBOX_HEARTBEAT_TTL_SECONDS", heartbeat_ttl_seconds, "30", 1, INT_MAX, NULL),

    /* 2.2 isolation and runtime */
    V_CHOICE("SANDBOX_ISOLATION_LEVEL", isolation_level, "auto", levels),
    V_LIST("SANDBOX_ISOLATION_REQUIRED_FEATURES", isolation_required_features, "", features,
           "isolation feature", F_LOWER | F_DEDUP | F_SORT),
    V_LIST("SANDBOX_ISOLATION_OPTIONAL_FEATURES", isolation_optional_features, "", features,
           "isolation feature", F_LOWER | F_DEDUP | F_SORT),
    V_CHOICE("SANDBOX_NETWORK_MODE", network_mode, "private", network_modes),
    V_BACKEND("SANDBOX_EXECUTION_BACKEND", execution_backend, "native", exec_backends),
    V_STR("SANDBOX_GVISOR_RUNSC", gvisor_runsc, "/usr/bin/runsc", 0),
    V_CHOICE("SANDBOX_GVISOR_PLATFORM", gvisor_platform, "ptrace", gvisor_platforms),
    V_STR("SANDBOX_BUBBLEWRAP_PATH", bubblewrap_path, "/usr/bin/bwrap", F_LAUNCHER),
    V_STR("SANDBOX_SETPRIV_PATH", setpriv_path, "/usr/bin/setpriv", F_LAUNCHER),
    V_STR("SANDBOX_PRLIMIT_PATH", prlimit_path, "/usr/bin/prlimit", F_LAUNCHER),
    V_STR("SANDBOX_BASH_PATH", bash_path, "/bin/bash", 0),
    V_STR("SANDBOX_BUBBLEWRAP_MIN_VERSION", bubblewrap_min_version, "0.11.2", F_LAUNCHER),
    V_INT("SANDBOX_TMPFS_BYTES", tmpfs_bytes, "536870912", 1, NOLIM),
    /* Rlimits: a negative value would become RLIM_INFINITY once cast to
     * rlim_t, so anything below 1 is refused. */
    V_INT("SANDBOX_CPU_SECONDS", cpu_seconds, "300", 1, NOLIM),
    V_INT("SANDBOX_MAX_PROCESSES", max_processes, "64", 1, NOLIM),
    V_INT("SANDBOX_MAX_OPEN_FILES", max_open_files, "512", 1, NOLIM),
    V_INT("SANDBOX_MAX_FILE_SIZE_BYTES", max_file_size_bytes, "1073741824", 1, NOLIM),
    V_LIST("SANDBOX_READONLY_MOUNTS", readonly_mounts, "/usr,/bin,/sbin,/lib,/lib64,/etc", NULL,
           NULL, 0),
    /* Ours: aggregate per-sandbox quotas (cgroups); 0 turns one off. */
    V_INT("SANDBOX_MEMORY_LIMIT_BYTES", memory_limit_bytes, "2147483648", 0, NOLIM),
    V_INT("SANDBOX_PIDS_LIMIT", pids_limit, "512", 0, NOLIM),
    V_FLOAT("SANDBOX_CPU_LIMIT", cpu_limit, "2.0", 0, 0),
    /* Ours: idle period of a warm session; 0 = a fresh sandbox per exec. */
    V_INT("SANDBOX_SESSION_IDLE_SECONDS", session_idle_seconds, "60", 0, NOLIM),
    /* Ours: failed authentications a peer gets answered at once per minute;
     * past that each 401 comes SL_AUTH_PENALTY_MS late (api/auth_guard.h). */
    V_INT("SANDBOX_AUTH_FAILURES_PER_MINUTE", auth_failures_per_minute, "10", 0, NOLIM),
    /* Ours: finished execution records older than this are deleted by the
     * maintenance cycle's prune (FLEET.md §6.1 step 7: 15 days); 0 = kept
     * forever. The prune runs every SANDBOX_HISTORY_PRUNE_INTERVAL_SECONDS
     * (the reference: hourly). */
    V_INT("SANDBOX_EXEC_RETENTION_SECONDS", exec_retention_seconds, "1296000", 0, NOLIM),
    V_INT("SANDBOX_HISTORY_PRUNE_INTERVAL_SECONDS", history_prune_interval_seconds, "3600", 1,
          NOLIM),
    /* Ours: stored stdout+stderr of one sandbox's finished records; past it
     * the oldest records lose their output first (emptied, truncated).
     * 0 = no cap. */
    V_INT("SANDBOX_MAX_STORED_OUTPUT_BYTES_PER_SANDBOX", max_stored_output_bytes_per_sandbox,
          "67108864", 0, NOLIM),
    /* Ours: how long a database write waits for a lock another process
     * holds before the request answers 503 SANDBOX_METADATA_UNAVAILABLE. */
    V_INT("SANDBOX_DATABASE_LOCK_TIMEOUT_SECONDS", database_lock_timeout_seconds, "5", 1, 600),
    V_INT("SANDBOX_DATABASE_POOL_SIZE", database_pool_size, "10", 1, 200),
    /* Ours: one sandbox's whole tree (workspace, home, cache, envs); 0 =
     * none. Enforced by btrfs qgroups where the workspace root is on btrfs,
     * else by accounting (workspace/quota.h). */
    V_INT("SANDBOX_WORKSPACE_QUOTA_BYTES", workspace_quota_bytes, "10737418240", 0, NOLIM),
    V_INT("SANDBOX_WORKSPACE_QUOTA_INODES", workspace_quota_inodes, "1000000", 0, NOLIM),
    /* Ours: a preallocated btrfs image of this size that sandloomd mounts
     * at the workspace and template roots (workspace/image.h); 0 = off,
     * the roots are plain directories. */
    V_INT("SANDBOX_WORKSPACE_IMAGE_BYTES", workspace_image_bytes, "0", 0, NOLIM),
    /* Ours: where that image lives; unset => <workspace root>.img. */
    V_OPT("SANDBOX_WORKSPACE_IMAGE_PATH", workspace_image_path),
    /* Ours: a connection waiting this long for a request's headers is
     * closed (api/conn_guard.h); 0 = only libmicrohttpd's 120 s idle limit. */
    V_INT("SANDBOX_HTTP_HEADER_TIMEOUT_SECONDS", http_header_timeout_seconds, "10", 0, 3600),
    /* Ours: connections one sandbox's uid may hold to the API at once
     * (host network mode reaches it); all sandboxes together get half the
     * connection limit. */
    V_INT("SANDBOX_MAX_CONNECTIONS_PER_SANDBOX", max_connections_per_sandbox, "32", 1, 16384),

    /* 2.3 workspace and lifecycle */
    V_STR("SANDBOX_LOCAL_ROOT", local_root, "/var/lib/agent-sandbox/sandboxes", 0),
    V_OPT("SANDBOX_SHARED_ROOT", shared_root),
    /* uid_t is 32 bits and (uid_t)-1 means "no change" to chown. */
    V_INT("SANDBOX_UID_START", uid_start, "20000", 1, 4294967294LL),
    V_INT("SANDBOX_UID_END", uid_end, "59999", 1, 4294967294LL),
    V_INT("SANDBOX_IDLE_TTL_SECONDS", idle_ttl_seconds, "1800", 1, NOLIM),
    V_INT("SANDBOX_ORPHAN_RELEASE_GRACE_SECONDS", orphan_release_grace_seconds, "300", 0, NOLIM),
    V_INT("SANDBOX_ORPHAN_RUNNING_GRACE_SECONDS", orphan_running_grace_seconds, "60", 0, NOLIM),
    V_INT("SANDBOX_ORPHAN_REAPER_BATCH_SIZE", orphan_reaper_batch_size, "100", 1, NOLIM),
    V_FLOAT("SANDBOX_MAINTENANCE_INTERVAL_SECONDS", maintenance_interval_seconds, "60.0", 1, 0),
    V_INT("SANDBOX_SUSPENDED_RETENTION_SECONDS", suspended_retention_seconds, "2592000", 0, NOLIM),
    V_CHOICE("SANDBOX_SUSPEND_SNAPSHOT", suspend_snapshot, "auto", snapshot_modes),
    V_INT("SANDBOX_ORPHAN_DORMANT_DIR_TTL_SECONDS", orphan_dormant_dir_ttl_seconds, "86400",
          0, NOLIM),
    V_INT("SANDBOX_DISK_HIGH_WATERMARK_PERCENT", disk_high_watermark_percent, "90", 1, 99),
    V_INT("SANDBOX_MIN_FREE_BYTES", min_free_bytes, "1073741824", 0, NOLIM),
    V_INT("SANDBOX_DEFAULT_TIMEOUT_SECONDS", default_timeout_seconds, "300", 1, NOLIM),
    /* Any finite value; users apply the 0.1 s effective minimum. */
    V_FLOAT("SANDBOX_TERMINATE_GRACE_SECONDS", terminate_grace_seconds, "5.0", NOMIN, 0),

    /* 2.4 API limits */
    V_INT("SANDBOX_MAX_OUTPUT_BYTES", max_output_bytes, "8388608", 1, NOLIM),
    V_INT("SANDBOX_STREAM_RETAIN_BYTES", stream_retain_bytes, "1048576", 0, 1073741824LL),
    V_INT("SANDBOX_MAX_STREAMS_PER_SANDBOX", max_streams_per_sandbox, "64", 1, 65536),
    V_INT("SANDBOX_MAX_STREAMS", max_streams, "2048", 1, 65536),
    /* At most half a relay's silence limit (SL_PEER_STREAM_SILENCE_S). */
    V_INT("SANDBOX_STREAM_KEEPALIVE_SECONDS", stream_keepalive_seconds, "15", 1, 60),
    V_INT("SANDBOX_STREAM_STALL_SECONDS", stream_stall_seconds, "30", 1, 86400),
    V_INT("SANDBOX_MAX_WATCHES_PER_SANDBOX", max_watches_per_sandbox, "8", 1, 1024),
    V_INT("SANDBOX_MAX_WATCHES", max_watches, "64", 1, 4096),
    V_INT("SANDBOX_MAX_TERMINALS_PER_SANDBOX", max_terminals_per_sandbox, "4", 1, 64),
    V_INT("SANDBOX_MAX_TERMINALS", max_terminals, "256", 1, 4096),
    V_INT("SANDBOX_TERMINAL_IDLE_SECONDS", terminal_idle_seconds, "300", 0, 86400),
    V_INT("SANDBOX_TERMINAL_MAX_SECONDS", terminal_max_seconds, "86400", 1, 604800),
    V_INT("SANDBOX_TERMINAL_REPLAY_BYTES", terminal_replay_bytes, "65536", 0, 1048576),
    V_STR("SANDBOX_PORTS_DOMAIN", ports_domain, "", 0),
    V_INT("SANDBOX_PORT_TIMEOUT_SECONDS", port_timeout_seconds, "60", 1, 3600),
    V_INT("SANDBOX_PORT_MAX_BODY_BYTES", port_max_body_bytes, "33554432", 1024, 1073741824LL),
    V_INT("SANDBOX_E2B_DEFAULT_TIMEOUT_SECONDS", e2b_default_timeout_seconds, "300", 1, 86400),
    V_INT("SANDBOX_E2B_MAX_TIMEOUT_SECONDS", e2b_max_timeout_seconds, "86400", 1, 2592000),
    V_STR("SANDBOX_E2B_DOMAIN", e2b_domain, "", 0),
    V_INT("SANDBOX_WARM_POOL_SIZE", warm_pool_size, "0", 0, 256),
    V_CHOICE("SANDBOX_CGROUP_FAVOR_DYNMODS", cgroup_favor_dynmods, "on", on_off),
    V_INT("SANDBOX_MAX_FILE_API_BYTES", max_file_api_bytes, "33554432", 1, NOLIM),
    V_INT("SANDBOX_MAX_LIST_ENTRIES", max_list_entries, "1000", 1, 10000),
    V_INT("SANDBOX_MAX_PARALLEL_EXECS_PER_SANDBOX", max_parallel_execs_per_sandbox, "16", 1, 64),
    V_LIST("SANDBOX_MCP_ALLOWED_HOSTS", mcp_allowed_hosts,
           "localhost,localhost:*,127.0.0.1,127.0.0.1:*,test", NULL, NULL, 0),

    /* 2.5 metadata and registry (DATABASE_URL and DATABASE_AUTO_DDL: config_load_database) */
    V_BACKEND("SANDBOX_METADATA_BACKEND", metadata_backend, "auto", metadata_backends),
    V_INT("SANDBOX_MYSQL_CONNECT_TIMEOUT_SECONDS", mysql_connect_timeout_seconds, "10", 1, NOLIM),
    /* -1 is SQLAlchemy's "never recycle". */
    V_INT("SANDBOX_MYSQL_POOL_RECYCLE_SECONDS", mysql_pool_recycle_seconds, "300", -1, NOLIM),
    V_BACKEND("SANDBOX_REGISTRY_BACKEND", registry_backend, "memory", registry_backends),
    V_STR("SANDBOX_REGISTRY_NAMESPACE", registry_namespace, "agent-sandbox", 0),
    V_STR("SANDBOX_REDIS_URL", redis_url, "redis://127.0.0.1:6379/0", 0),

    /* 2.6 object store and templates */
    V_BACKEND("SANDBOX_OBJECT_STORE_BACKEND", object_store_backend, "s3", object_backends),
    V_BLOB("SANDBOX_BLOBSTORE_ENDPOINT", blobstore_endpoint, "", "BLOBSTORE_ENDPOINT"),
    V_BLOB("SANDBOX_BLOBSTORE_BUCKET", blobstore_bucket, "", "BLOBSTORE_BUCKET"),
    V_BLOB("SANDBOX_BLOBSTORE_BASE_PREFIX", blobstore_base_prefix, "agent-sandbox/",
           "BLOBSTORE_BASE_PREFIX"),
    V_BLOB("SANDBOX_BLOBSTORE_REGION", blobstore_region, "us-east-1", "BLOBSTORE_REGION"),
    V_STR("BLOBSTORE_ACCESS_KEY", blobstore_access_key, "", F_PROCESS_ONLY),
    V_STR("BLOBSTORE_SECRET_KEY", blobstore_secret_key, "", F_PROCESS_ONLY),
    V_OPT("SANDBOX_TEMPLATE_ROOT", template_root),
    V_OPT_INT("SANDBOX_TEMPLATE_CACHE_MAX_BYTES", template_cache_max_bytes, 0, NOLIM),
    V_INT("SANDBOX_TEMPLATE_MAX_EXTRACT_BYTES", template_max_extract_bytes, "8589934592", 1, NOLIM),
    V_INT("SANDBOX_TEMPLATE_MAX_ARCHIVE_BYTES", template_max_archive_bytes, "4294967296", 1, NOLIM),
    V_INT("SANDBOX_TEMPLATE_SNAPSHOT_MAX_ENTRIES", template_snapshot_max_entries, "200000",
          1, NOLIM),
    V_INT("SANDBOX_TEMPLATE_SNAPSHOT_MAX_DEPTH", template_snapshot_max_depth, "128", 1, 256),
    V_FLOAT("SANDBOX_TEMPLATE_SNAPSHOT_TIMEOUT_SECONDS", template_snapshot_timeout_seconds, "600.0",
            0, F_EXCL_MIN),

    /* 2.7 toolchains, mirrors, proxies, egress */
    V_LIST("SANDBOX_TOOLCHAINS", toolchains, "python,node", toolchain_names, "toolchain",
           F_LOWER | F_DEDUP | F_NONEMPTY),
    V_STR("SANDBOX_PYTHON_INDEX_URL", python_index_url, "https://pypi.org/simple/", 0),
    V_STR("SANDBOX_NPM_REGISTRY", npm_registry, "https://registry.npmjs.org", 0),
    V_STR("SANDBOX_GO_PROXY", go_proxy, "https://proxy.golang.org,direct", 0),
    V_STR("SANDBOX_GO_SUMDB", go_sumdb, "sum.golang.org", 0),
    V_STR("SANDBOX_CARGO_REGISTRY_URL", cargo_registry_url, "", 0),
    V_STR("SANDBOX_MAVEN_REPOSITORY_URL", maven_repository_url, "", 0),
    V_OPT("SANDBOX_JAVA_HOME", java_home),
    V_OPT("SANDBOX_RUST_LAUNCHER_DIR", rust_launcher_dir),
    V_LIST("SANDBOX_HTTP_PROXIES", http_proxies, "", NULL, NULL, 0),
    V_STR("SANDBOX_NO_PROXY", no_proxy, "127.0.0.1,localhost,::1", 0),
    V_LIST("SANDBOX_EGRESS_DENIED_ADDRESSES", egress_denied_addresses, "", NULL,
           "IP address or CIDR network", F_IP | F_CIDR),
    V_LIST("SANDBOX_EGRESS_ALLOWED_LITERALS", egress_allowed_literals, "", NULL,
           "IP address", F_IP),
    /* Ours: the rest of the worker's default egress policy (private mode). */
    V_CHOICE("SANDBOX_EGRESS_DEFAULT", egress_default, "allow", egress_defaults),
    V_LIST("SANDBOX_EGRESS_ALLOWED_DOMAINS", egress_allowed_domains, "", NULL, NULL, F_LOWER),
    V_STR("SANDBOX_PRIVATE_NETWORK_CIDR", private_network_cidr, "auto", 0),
    V_LIST("SANDBOX_DNS_SERVERS", dns_servers, "", NULL, NULL, 0),

    /* 2.8 plugins and telemetry */
    V_BACKEND("SANDBOX_CREDENTIAL_BROKER", credential_broker, "disabled", credential_brokers),
    V_OPT("SANDBOX_TELEMETRY_SINK", telemetry_sink),
    /* Ours: the daemon's own log (common/log.h). */
    V_CHOICE("SANDBOX_LOG_LEVEL", log_level, "info", log_levels),
    V_CHOICE("SANDBOX_LOG_FORMAT", log_format, "text", log_formats),

    /* 3. read outside the settings model */
    V_CHOICE("SANDBOX_ENVIRONMENT", environment, "local", environments),
    V_STR("SANDBOX_ZONE", zone, "", 0),
    V_STR("SANDBOX_REGION", region, "", 0),
};
/* clang-format on */

/* ---------------------------------------------------------------------------
 * .env file */

struct dotenv {
    struct sl_strlist keys;
    struct sl_strlist values;
};

static void dotenv_free(struct dotenv *d)
{
    sl_strlist_free(&d->keys);
    sl_strlist_free(&d->values);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* One `KEY=value` line (python-dotenv's common subset): optional `export `,
 * blank and `#` lines skipped, a value in matching single or double quotes
 * is taken verbatim up to the closing quote (no escape processing), an
 * unquoted value ends at ` #` (inline comment) and is trimmed. Lines without
 * `=` are ignored. */
static int dotenv_parse_line(struct dotenv *d, char *line)
{
    while (is_blank(*line))
        line++;
    if (*line == '\0' || *line == '#')
        return 0;
    if (strncmp(line, "export", 6) == 0 && is_blank(line[6])) {
        line += 7;
        while (is_blank(*line))
            line++;
    }
    char *eq = strchr(line, '=');
    if (!eq)
        return 0;
    char *key_end = eq;
    while (key_end > line && is_blank(key_end[-1]))
        key_end--;
    *key_end = '\0';
    if (*line == '\0')
        return 0;

    char *value = eq + 1;
    while (is_blank(*value))
        value++;
    char *close = NULL;
    if ((*value == '"' || *value == '\'') && (close = strchr(value + 1, *value)) != NULL) {
        value++;
        *close = '\0';
    } else {
        for (char *p = value; *p; p++) {
            if (*p == '#' && p > value && is_blank(p[-1])) {
                *p = '\0';
                break;
            }
        }
        size_t n = strlen(value);
        while (n > 0 && is_blank(value[n - 1]))
            value[--n] = '\0';
    }
    if (sl_strlist_push(&d->keys, line) < 0)
        return -1;
    if (sl_strlist_push(&d->values, value) < 0) {
        free(d->keys.items[--d->keys.len]);
        return -1;
    }
    return 0;
}

static int dotenv_read(struct dotenv *d, const char *path, struct sl_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return sl_error_errno(err, SL_E_CONFIG, ".env: cannot open the file");
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sl_error_errno(err, SL_E_CONFIG, ".env: cannot stat the file");
    if (!S_ISREG(st.st_mode))
        return sl_error_set(err, SL_E_CONFIG, 0, ".env: not a regular file");
    if (st.st_size > CONFIG_DOTENV_MAX)
        return sl_error_set(err, SL_E_CONFIG, 0, ".env: larger than %d bytes", CONFIG_DOTENV_MAX);

    _cleanup_free_ char *text = malloc((size_t)st.st_size + 1);
    if (!text)
        return sl_error_errno(err, SL_E_CONFIG, ".env: out of memory");
    size_t len = 0;
    for (;;) {
        ssize_t r = SL_RETRY(read(fd, text + len, (size_t)st.st_size - len));
        if (r < 0)
            return sl_error_errno(err, SL_E_CONFIG, ".env: cannot read the file");
        if (r == 0 || (len += (size_t)r) == (size_t)st.st_size)
            break;
    }
    text[len] = '\0';

    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (dotenv_parse_line(d, line) < 0)
            return sl_error_errno(err, SL_E_CONFIG, ".env: out of memory");
    return 0;
}

/* The process environment wins over .env; the last .env line for a key wins. */
static const char *config_lookup(const struct dotenv *d, const char *name, bool process_only)
{
    const char *v = getenv(name);
    if (v || process_only)
        return v;
    for (size_t i = d->keys.len; i-- > 0;)
        if (strcmp(d->keys.items[i], name) == 0)
            return d->values.items[i];
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Value parsers */

static char *dup_trimmed(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return strndup(s, n);
}

/* NULL, empty or only whitespace: "unset" for optional values. */
static bool is_blank_str(const char *s)
{
    if (!s)
        return true;
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

static void lower_in_place(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* Integral decimal only: "1.5", "1e3", "0x10", "" and overflow are refused. */
static int parse_int64(const char *text, int64_t *out)
{
    _cleanup_free_ char *s = dup_trimmed(text);
    if (!s)
        return -1;
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (*p == '\0')
        return -1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q))
            return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}

/* Decimal with optional fraction and exponent; nan, inf and hex refused. */
static int parse_double(const char *text, double *out)
{
    _cleanup_free_ char *s = dup_trimmed(text);
    if (!s)
        return -1;
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    size_t digits = 0;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p != '\0')
        return -1;
    double v = strtod(s, NULL);
    if (!isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int sl_config_parse_bool(const char *value)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    if (!value)
        return -1;
    _cleanup_free_ char *s = dup_trimmed(value);
    if (!s)
        return -1;
    for (size_t i = 0; i < SL_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return 1;
        if (strcasecmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}

/* A JSON array item as Python's str() spells it (the reference stringifies
 * the parsed items). */
static char *json_item_string(json_t *item)
{
    char buf[64];
    switch (json_typeof(item)) {
    case JSON_STRING:
        return strndup(json_string_value(item), json_string_length(item));
    case JSON_INTEGER:
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(item));
        return strdup(buf);
    case JSON_REAL: {
        double v = json_real_value(item);
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof(buf), "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
        if (!strpbrk(buf, ".eni"))
            strcat(buf, ".0");
        return strdup(buf);
    }
    case JSON_TRUE:
        return strdup("True");
    case JSON_FALSE:
        return strdup("False");
    case JSON_NULL:
        return strdup("None");
    default:
        return json_dumps(item, JSON_COMPACT | JSON_ENCODE_ANY);
    }
}

static int list_push_trimmed(struct sl_strlist *out, const char *item, size_t len)
{
    while (len > 0 && isspace((unsigned char)*item)) {
        item++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)item[len - 1]))
        len--;
    if (len == 0)
        return 0;
    _cleanup_free_ char *copy = strndup(item, len);
    return copy ? sl_strlist_push(out, copy) : -1;
}

int sl_config_parse_list(const char *value, struct sl_strlist *out)
{
    if (!value)
        return 0;
    _cleanup_free_ char *s = dup_trimmed(value);
    if (!s)
        return -1;
    if (s[0] == '[') {
        _cleanup_json_ json_t *arr = json_loads(s, 0, NULL);
        if (arr && json_is_array(arr)) {
            size_t i;
            json_t *item;
            json_array_foreach(arr, i, item)
            {
                _cleanup_free_ char *text = json_item_string(item);
                if (!text || list_push_trimmed(out, text, strlen(text)) < 0) {
                    sl_strlist_free(out);
                    return -1;
                }
            }
            return 0;
        }
        /* Not a JSON array: the comma form below, as the reference does. */
    }
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (list_push_trimmed(out, p, len) < 0) {
            sl_strlist_free(out);
            return -1;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

static bool choice_contains(const char *const *choices, const char *s)
{
    for (; *choices; choices++)
        if (strcmp(*choices, s) == 0)
            return true;
    return false;
}

static const char *choices_text(const char *const *choices, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (; *choices && used < size; choices++) {
        int n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", *choices);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}

/* An IPv4/IPv6 address, or with allow_prefix an address "/" prefix length
 * (host bits may be set, as Python's ip_network(strict=False)). */
static bool parse_ip(const char *s, bool allow_prefix)
{
    char addr[INET6_ADDRSTRLEN + 8];
    unsigned char bin[sizeof(struct in6_addr)];
    const char *slash = allow_prefix ? strchr(s, '/') : NULL;
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    if (alen == 0 || alen >= sizeof(addr))
        return false;
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    int bits;
    if (inet_pton(AF_INET, addr, bin) == 1)
        bits = 32;
    else if (inet_pton(AF_INET6, addr, bin) == 1)
        bits = 128;
    else
        return false;
    if (!slash)
        return true;
    const char *p = slash + 1;
    if (*p == '\0' || strlen(p) > 3)
        return false;
    int prefix = 0;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return false;
        prefix = prefix * 10 + (*p - '0');
    }
    return prefix <= bits;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---------------------------------------------------------------------------
 * Table-driven loading */

static int oom(struct sl_error *err, const char *name)
{
    return sl_error_set(err, SL_E_CONFIG, ENOMEM, "%s: out of memory", name);
}

static int range_error(struct sl_error *err, const char *name, int64_t min, int64_t max)
{
    if (max == NOLIM)
        return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be at least %lld", name, (long long)min);
    return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be between %lld and %lld", name,
                        (long long)min, (long long)max);
}

static int load_list(struct sl_strlist *field, const struct config_var *v, const char *name,
                     const char *raw, struct sl_error *err)
{
    _cleanup_strlist_ struct sl_strlist items = {0};
    if (sl_config_parse_list(raw, &items) < 0)
        return oom(err, name);
    char buf[128];
    for (size_t i = 0; i < items.len; i++) {
        char *item = items.items[i];
        if (v->flags & F_LOWER)
            lower_in_place(item);
        if (v->choices && !choice_contains(v->choices, item))
            return sl_error_set(err, SL_E_CONFIG, 0, "%s: unknown %s (supported: %s)", name,
                                v->what, choices_text(v->choices, buf, sizeof(buf)));
        if ((v->flags & F_IP) && !parse_ip(item, v->flags & F_CIDR))
            return sl_error_set(err, SL_E_CONFIG, 0, "%s: an entry is not a valid %s", name,
                                v->what);
    }
    for (size_t i = 0; i < items.len; i++) {
        if ((v->flags & F_DEDUP) && sl_strlist_contains(field, items.items[i]))
            continue;
        if (sl_strlist_push(field, items.items[i]) < 0)
            return oom(err, name);
    }
    if ((v->flags & F_SORT) && field->len > 1)
        qsort(field->items, field->len, sizeof(*field->items), cmp_str);
    if ((v->flags & F_NONEMPTY) && field->len == 0)
        return sl_error_set(err, SL_E_CONFIG, 0, "%s: must name at least one %s", name, v->what);
    return 0;
}

static int load_var(struct sl_config *cfg, const struct config_var *v, const struct dotenv *d,
                    struct sl_error *err)
{
    const char *name = v->name;
    const char *raw = config_lookup(d, name, v->flags & F_PROCESS_ONLY);
    if (raw && (v->flags & F_LAUNCHER))
        cfg->launcher_vars_set = true;
    if (!raw && v->alt) {
        /* Fallbacks come from the process environment only; empty = unset.
         * Errors then name the variable the value came from. */
        const char *alt = getenv(v->alt);
        if (alt && *alt) {
            raw = alt;
            name = v->alt;
        }
    }
    if (!raw)
        raw = v->def;
    void *field = (char *)cfg + v->offset;
    char buf[128];

    switch (v->type) {
    case CFG_STR:
        if (raw && !(*(char **)field = strdup(raw)))
            return oom(err, name);
        return 0;
    case CFG_OPT_STR:
        if (raw && *raw && !(*(char **)field = strdup(raw)))
            return oom(err, name);
        return 0;
    case CFG_INT:
    case CFG_INT32: {
        int64_t n;
        if ((v->flags & F_OPTIONAL) && is_blank_str(raw)) {
            *(int64_t *)field = -1;
            return 0;
        }
        if (!raw || parse_int64(raw, &n) < 0)
            return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be an integer", name);
        if (n < v->min || n > v->max)
            return range_error(err, name, v->min, v->max);
        if (v->type == CFG_INT32)
            *(int *)field = (int)n;
        else
            *(int64_t *)field = n;
        return 0;
    }
    case CFG_FLOAT: {
        double x;
        if (!raw || parse_double(raw, &x) < 0)
            return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be a finite number", name);
        if (v->min != NOMIN) {
            if ((v->flags & F_EXCL_MIN) && !(x > (double)v->min))
                return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be greater than %lld", name,
                                    (long long)v->min);
            if (!(v->flags & F_EXCL_MIN) && x < (double)v->min)
                return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be at least %lld", name,
                                    (long long)v->min);
        }
        *(double *)field = x;
        return 0;
    }
    case CFG_CHOICE:
    case CFG_BACKEND: {
        _cleanup_free_ char *s = dup_trimmed(raw ? raw : "");
        if (!s)
            return oom(err, name);
        lower_in_place(s);
        if (v->type == CFG_BACKEND && *s == '\0')
            return sl_error_set(err, SL_E_CONFIG, 0, "%s: must not be empty", name);
        if (!choice_contains(v->choices, s)) {
            if (v->type == CFG_BACKEND) {
                sl_error_set(err, SL_E_CONFIG, 0,
                             "%s: plugin backends are not supported by this build", name);
                if (err)
                    snprintf(err->detail, sizeof(err->detail), "%s (supported: %s)", err->message,
                             choices_text(v->choices, buf, sizeof(buf)));
                return -1;
            }
            return sl_error_set(err, SL_E_CONFIG, 0, "%s: must be one of: %s", name,
                                choices_text(v->choices, buf, sizeof(buf)));
        }
        *(char **)field = steal_ptr(s);
        return 0;
    }
    case CFG_LIST:
        return load_list(field, v, name, raw, err);
    }
    return sl_error_set(err, SL_E_INTERNAL, 0, "%s: unknown variable type", name);
}

/* ---------------------------------------------------------------------------
 * Settings that need more than one row */

struct db_driver {
    const char *scheme;
    const char *driver;
    enum sl_db_backend backend;
};

static const struct db_driver db_drivers[] = {
    {"sqlite", "sqlite+aiosqlite", SL_DB_SQLITE},
    {"sqlite+aiosqlite", "sqlite+aiosqlite", SL_DB_SQLITE},
    {"postgres", "postgresql+asyncpg", SL_DB_POSTGRESQL},
    {"postgresql", "postgresql+asyncpg", SL_DB_POSTGRESQL},
    {"postgresql+psycopg", "postgresql+asyncpg", SL_DB_POSTGRESQL},
    {"postgresql+asyncpg", "postgresql+asyncpg", SL_DB_POSTGRESQL},
    {"mysql", "mysql+aiomysql", SL_DB_MYSQL},
    {"mysql+pymysql", "mysql+aiomysql", SL_DB_MYSQL},
    {"mysql+aiomysql", "mysql+aiomysql", SL_DB_MYSQL},
};

#define DB_DEFAULT_URL "sqlite+aiosqlite:///./data/agent-sandbox.db"

static int config_load_database(struct sl_config *cfg, const struct dotenv *d, struct sl_error *err)
{
    static const char *const name = "SANDBOX_DATABASE_URL";
    const char *raw = config_lookup(d, name, false);
    _cleanup_free_ char *url = dup_trimmed(raw ? raw : "");
    if (!url)
        return oom(err, name);
    if (*url == '\0') {
        free(url);
        if (!(url = strdup(DB_DEFAULT_URL)))
            return oom(err, name);
        cfg->database_url_default = true;
    }

    char *sep = strstr(url, "://");
    if (!sep || sep == url)
        return sl_error_set(err, SL_E_CONFIG, 0, "%s: not a database URL (driver://...)", name);
    const struct db_driver *drv = NULL;
    for (size_t i = 0; i < SL_ARRAY_LEN(db_drivers); i++) {
        if (strlen(db_drivers[i].scheme) == (size_t)(sep - url) &&
            strncasecmp(url, db_drivers[i].scheme, (size_t)(sep - url)) == 0) {
            drv = &db_drivers[i];
            break;
        }
    }
    if (!drv)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "%s: unsupported database backend (supported: sqlite, postgresql, "
                            "mysql)",
                            name);
    const char *rest = sep + 3;
    size_t rest_end = strcspn(rest, "?#");

    if (drv->backend == SL_DB_SQLITE) {
        /* sqlite:///<path>: the path is everything after the third slash, so
         * sqlite:////abs/x.db is absolute and sqlite:///./x.db relative. */
        if (rest[0] != '/' || rest_end <= 1)
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "%s: a SQLite URL needs a file path after the third slash", name);
        cfg->database_path = strndup(rest + 1, rest_end - 1);
    } else {
        /* The database name is the path after the authority. Userinfo ends
         * at the last '@' (a password may hold an unescaped '/'). */
        const char *host = rest;
        for (const char *p = rest; p < rest + rest_end; p++)
            if (*p == '@')
                host = p + 1;
        size_t host_len = (size_t)(rest + rest_end - host);
        const char *slash = memchr(host, '/', host_len);
        cfg->database_path =
            slash ? strndup(slash + 1, (size_t)(host + host_len - slash - 1)) : strdup("");
    }
    if (!cfg->database_path)
        return oom(err, name);
    if (asprintf(&cfg->database_url, "%s://%s", drv->driver, rest) < 0) {
        cfg->database_url = NULL;
        return oom(err, name);
    }
    cfg->db_backend = drv->backend;

    static const char *const ddl = "SANDBOX_DATABASE_AUTO_DDL";
    raw = config_lookup(d, ddl, false);
    if (is_blank_str(raw)) {
        cfg->database_auto_ddl = drv->backend == SL_DB_SQLITE;
    } else {
        int b = sl_config_parse_bool(raw);
        if (b < 0)
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "%s: must be a boolean (true/false, 1/0, yes/no, on/off)", ddl);
        cfg->database_auto_ddl = b;
    }
    return 0;
}

/* Slashes trimmed, one trailing '/' added unless empty. */
static int config_normalise_prefix(struct sl_config *cfg, struct sl_error *err)
{
    const char *p = cfg->blobstore_base_prefix;
    while (*p == '/')
        p++;
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == '/')
        n--;
    char *out = NULL;
    if (asprintf(&out, "%.*s%s", (int)n, p, n ? "/" : "") < 0)
        return oom(err, "SANDBOX_BLOBSTORE_BASE_PREFIX");
    free(cfg->blobstore_base_prefix);
    cfg->blobstore_base_prefix = out;
    return 0;
}

/* <parent of the workspace root>/<name>: where the template root (as
 * Python's Path(root).parent / "templates") and the token file live. */
static char *config_sibling(const char *root, const char *name)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    const char *last = NULL;
    for (size_t i = 0; i < n; i++)
        if (root[i] == '/')
            last = root + i;
    if (!last)
        return strdup(name);
    size_t parent = (size_t)(last - root);
    while (parent > 1 && root[parent - 1] == '/')
        parent--;
    char *out = NULL;
    if (asprintf(&out, "%.*s/%s", (int)parent, root, name) < 0)
        return NULL;
    return out;
}

static char *config_env_type(const struct sl_config *cfg)
{
    _cleanup_free_ char *env = strdup(cfg->environment);
    if (!env)
        return NULL;
    for (char *p = env; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    char *out = NULL;
    if (asprintf(&out, "%s%s%s%s%s", env, *cfg->zone ? "-" : "", cfg->zone, *cfg->region ? "-" : "",
                 cfg->region) < 0)
        return NULL;
    return out;
}

/* The machine's FQDN: the canonical name of gethostname(), else the plain
 * hostname. */
static char *config_default_host(void)
{
    char name[256];
    if (gethostname(name, sizeof(name)) != 0)
        return strdup("");
    name[sizeof(name) - 1] = '\0';
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_CANONNAME};
    struct addrinfo *res = NULL;
    if (getaddrinfo(name, NULL, &hints, &res) == 0 && res) {
        char *out = NULL;
        if (res->ai_canonname && *res->ai_canonname)
            out = strdup(res->ai_canonname);
        freeaddrinfo(res);
        if (out)
            return out;
    }
    return strdup(name);
}

/* localhost, localhost.localdomain or a loopback IP (IPv4-mapped too). */
static bool config_is_loopback(const char *host)
{
    _cleanup_free_ char *h = dup_trimmed(host);
    if (!h)
        return false;
    size_t n = strlen(h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        memmove(h, h + 1, n - 2);
        h[n - 2] = '\0';
        n -= 2;
    }
    if (n > 0 && h[n - 1] == '.')
        h[--n] = '\0';
    if (strcasecmp(h, "localhost") == 0 || strcasecmp(h, "localhost.localdomain") == 0)
        return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return false;
}

/* 32 random bytes, URL-safe base64 without padding (43 characters), like
 * Python's secrets.token_urlsafe(32). */
static char *config_generate_token(void)
{
    unsigned char raw[CONFIG_TOKEN_BYTES];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t r = getrandom(raw + got, sizeof(raw) - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        got += (size_t)r;
    }
    char *out = sl_base64url_nopad(raw, sizeof(raw));
    explicit_bzero(raw, sizeof(raw));
    return out;
}

static int config_derive(struct sl_config *cfg, struct sl_error *err)
{
    if (config_normalise_prefix(cfg, err) < 0)
        return -1;
    if (!cfg->advertise_host && !(cfg->advertise_host = config_default_host()))
        return oom(err, "SANDBOX_ADVERTISE_HOST");
    if (!(cfg->workspace_root = strdup(cfg->shared_root ? cfg->shared_root : cfg->local_root)))
        return oom(err, "SANDBOX_LOCAL_ROOT");
    if (!cfg->template_root &&
        !(cfg->template_root = config_sibling(cfg->workspace_root, "templates")))
        return oom(err, "SANDBOX_TEMPLATE_ROOT");
    if (!cfg->internal_token_file &&
        !(cfg->internal_token_file = config_sibling(cfg->workspace_root, "internal-token")))
        return oom(err, "SANDBOX_INTERNAL_TOKEN_FILE");
    if (!cfg->workspace_image_path) {
        size_t n = strlen(cfg->workspace_root);
        while (n > 1 && cfg->workspace_root[n - 1] == '/')
            n--;
        if (asprintf(&cfg->workspace_image_path, "%.*s.img", (int)n, cfg->workspace_root) < 0) {
            cfg->workspace_image_path = NULL;
            return oom(err, "SANDBOX_WORKSPACE_IMAGE_PATH");
        }
    }
    if (!(cfg->env_type = config_env_type(cfg)))
        return oom(err, "SANDBOX_ENVIRONMENT");
    if (strcmp(cfg->execution_backend, "bubblewrap") == 0) {
        free(cfg->execution_backend);
        if (!(cfg->execution_backend = strdup("native")))
            return oom(err, "SANDBOX_EXECUTION_BACKEND");
    }
    return 0;
}

/* Cross-variable checks (CONFIG.md §2, RUNTIME.md §12–§13 without the
 * filesystem ones). */
static int config_check(struct sl_config *cfg, struct sl_error *err)
{
    if (cfg->uid_end < cfg->uid_start)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_UID_END: must be greater than or equal to SANDBOX_UID_START");
    if (!((double)cfg->heartbeat_ttl_seconds > 2.0 * cfg->heartbeat_interval_seconds))
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_HEARTBEAT_TTL_SECONDS: must be greater than 2 x "
                            "SANDBOX_HEARTBEAT_INTERVAL_SECONDS");
    bool prod = strcmp(cfg->environment, "prod") == 0;
    if (prod && cfg->internal_token[0] == '\0')
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_INTERNAL_TOKEN is not configured");
    size_t token_len = strlen(cfg->internal_token);
    if (token_len > 0 && token_len < SL_CONFIG_TOKEN_MIN_CHARS) {
        if (strcmp(cfg->environment, "local") != 0)
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "SANDBOX_INTERNAL_TOKEN: must be at least %d characters outside "
                                "the local environment",
                                SL_CONFIG_TOKEN_MIN_CHARS);
        cfg->token_short = true;
    }
    if (strcmp(cfg->environment, "local") != 0) {
        _cleanup_free_ char *h = dup_trimmed(cfg->advertise_host);
        if (!h)
            return oom(err, "SANDBOX_ADVERTISE_HOST");
        if (*h == '\0' || config_is_loopback(h))
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "SANDBOX_ADVERTISE_HOST: must be set to a non-loopback host "
                                "outside the local environment");
    }
    /* In the host network mode nothing can enforce address filters;
     * accepting the lists would promise a boundary that does not exist
     * (RUNTIME.md §12). The private mode enforces them (net/privnet.c), and
     * an isolated sandbox reaches no address at all. */
    if (strcmp(cfg->network_mode, "host") == 0 &&
        (cfg->egress_denied_addresses.len > 0 || cfg->egress_allowed_literals.len > 0))
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_EGRESS_POLICY_UNSUPPORTED: %s is set but the host network "
                            "mode cannot enforce egress address policy (SANDBOX_NETWORK_MODE="
                            "private can)",
                            cfg->egress_denied_addresses.len > 0
                                ? "SANDBOX_EGRESS_DENIED_ADDRESSES"
                                : "SANDBOX_EGRESS_ALLOWED_LITERALS");
    if (cfg->workspace_image_bytes > 0 && cfg->workspace_image_bytes < WS_IMAGE_MIN_BYTES)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_WORKSPACE_IMAGE_BYTES: must be 0 (no image) or at least %lld "
                            "(256 MiB)",
                            (long long)WS_IMAGE_MIN_BYTES);
    /* An image on a loop device is one host's: a shared root is a network
     * filesystem every worker mounts. */
    if (cfg->workspace_image_bytes > 0 && cfg->shared_root)
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_WORKSPACE_IMAGE_BYTES: cannot be used with "
                            "SANDBOX_SHARED_ROOT (an image is local to one host)");
    /* The S3 client is only built for backend s3 with a bucket; that is when
     * the reference fails on half a key pair. */
    if (strcmp(cfg->object_store_backend, "s3") == 0 && cfg->blobstore_bucket[0] != '\0' &&
        (cfg->blobstore_access_key[0] == '\0') != (cfg->blobstore_secret_key[0] == '\0'))
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "BLOBSTORE_ACCESS_KEY and BLOBSTORE_SECRET_KEY must be set together");
    return 0;
}

int sl_config_load(struct sl_config *cfg, const char *dotenv_path, struct sl_error *err)
{
    struct dotenv d = {0};
    memset(cfg, 0, sizeof(*cfg));
    /* A budget by default (ours; the reference has none): published trees
     * otherwise grow without bound on the disk every sandbox shares. */
    cfg->template_cache_max_bytes = SL_CONFIG_TEMPLATE_CACHE_DEFAULT;

    int r = dotenv_read(&d, dotenv_path ? dotenv_path : ".env", err);
    for (size_t i = 0; r == 0 && i < SL_ARRAY_LEN(config_vars); i++)
        r = load_var(cfg, &config_vars[i], &d, err);
    if (r == 0)
        r = config_load_database(cfg, &d, err);
    dotenv_free(&d);
    if (r == 0)
        r = config_derive(cfg, err);
    if (r == 0)
        r = config_check(cfg, err);
    if (r == 0 && cfg->internal_token[0] == '\0') {
        char *token = config_generate_token();
        if (!token) {
            r = sl_error_errno(err, SL_E_CONFIG, "SANDBOX_INTERNAL_TOKEN: cannot generate a token");
        } else {
            free(cfg->internal_token);
            cfg->internal_token = token;
            cfg->token_generated = true;
        }
    }
    if (r < 0) {
        sl_config_free(cfg);
        return -1;
    }
    return 0;
}

void sl_config_free(struct sl_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < SL_ARRAY_LEN(config_vars); i++) {
        const struct config_var *v = &config_vars[i];
        void *field = (char *)cfg + v->offset;
        switch (v->type) {
        case CFG_STR:
        case CFG_OPT_STR:
        case CFG_CHOICE:
        case CFG_BACKEND:
            sl_free_secret(*(char **)field);
            *(char **)field = NULL;
            break;
        case CFG_LIST:
            sl_strlist_free(field);
            break;
        case CFG_INT:
        case CFG_INT32:
        case CFG_FLOAT:
            break;
        }
    }
    sl_free_secret(cfg->database_url);
    free(cfg->database_path);
    free(cfg->workspace_root);
    free(cfg->env_type);
    memset(cfg, 0, sizeof(*cfg));
}

/* ---------------------------------------------------------------------------
 * docs/CONFIGURATION.md: the table's names, defaults and accepted values,
 * with the prose of config_doc.c. */

static const struct config_var *config_var_named(const char *name)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(config_vars); i++)
        if (strcmp(config_vars[i].name, name) == 0)
            return &config_vars[i];
    return NULL;
}

/* Markdown cell text: a '|' would end the cell. */
static void put_cell(FILE *out, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            fputc('\\', out);
        fputc(*p, out);
    }
}

static void put_choices(FILE *out, const char *const *choices)
{
    for (size_t i = 0; choices[i]; i++)
        fprintf(out, "%s`%s`", i ? ", " : "", choices[i]);
}

static void put_int_range(FILE *out, const struct config_var *v)
{
    bool no_max = v->max == NOLIM || (v->type == CFG_INT32 && v->max == INT_MAX);
    if (v->min == NOMIN && no_max)
        fputs("an integer", out);
    else if (no_max)
        fprintf(out, "an integer ≥ %lld", (long long)v->min);
    else
        fprintf(out, "an integer from %lld to %lld", (long long)v->min, (long long)v->max);
}

static void put_accepts(FILE *out, const struct config_var *v)
{
    switch (v->type) {
    case CFG_STR:
        fputs("a string", out);
        break;
    case CFG_OPT_STR:
        fputs("a string; empty = unset", out);
        break;
    case CFG_INT:
    case CFG_INT32:
        put_int_range(out, v);
        if (v->flags & F_OPTIONAL)
            fputs("; empty = unset", out);
        break;
    case CFG_FLOAT:
        if (v->min == NOMIN)
            fputs("a finite number", out);
        else
            fprintf(out, "a number %s %lld", (v->flags & F_EXCL_MIN) ? ">" : "≥",
                    (long long)v->min);
        break;
    case CFG_CHOICE:
    case CFG_BACKEND:
        fputs("one of ", out);
        put_choices(out, v->choices);
        fputs(" (any case)", out);
        break;
    case CFG_LIST:
        fputs("a list (comma-separated, or a JSON array)", out);
        if (v->choices) {
            fputs(" of ", out);
            put_choices(out, v->choices);
        } else if (v->flags & F_IP) {
            fputs((v->flags & F_CIDR) ? " of IP addresses or CIDR networks" : " of IP addresses",
                  out);
        }
        if (v->flags & F_NONEMPTY)
            fputs("; at least one", out);
        break;
    }
    if (v->flags & F_PROCESS_ONLY)
        fputs("; process environment only, not `.env`", out);
    if (v->alt)
        fprintf(out, "; unset: `%s` from the process environment", v->alt);
}

static void put_default(FILE *out, const struct config_var *v)
{
    if (!v->def)
        fputs("unset", out);
    else if (!*v->def)
        fputs("empty", out);
    else
        fprintf(out, "`%s`", v->def);
}

static const char REFERENCE_HEAD[] =
    "# Configuration\n"
    "\n"
    "<!-- Generated by `make docs` (build/config-reference) from the configuration\n"
    "     table in src/config/config.c and the prose in src/config/config_doc.c.\n"
    "     Edit those; tests/e2e/test_docs.py fails when this file differs. -->\n"
    "\n"
    "Every variable below is read once, at startup: from the process environment\n"
    "first, then from `.env` in the working directory (`KEY=value` lines; `export`,\n"
    "quotes and `#` comments allowed), except where a row says process environment\n"
    "only. A value that does not parse, or is out of range, stops startup with exit\n"
    "status 3 and a message naming the variable (never its value). Names the\n"
    "service does not know are ignored. Lists are comma-separated (items trimmed,\n"
    "empty items dropped) or a JSON array; booleans are `true/false`, `1/0`,\n"
    "`yes/no` or `on/off`.\n"
    "\n"
    "`make run` sets `SANDBOX_HOST`, `SANDBOX_PORT`, `SANDBOX_ADVERTISE_HOST`,\n"
    "`SANDBOX_LOCAL_ROOT`, `SANDBOX_DATABASE_URL` and `SANDBOX_STARTUP_LOG_PATH`\n"
    "to its own defaults (under `state/`) unless the environment, its command line\n"
    "or `.env` sets them.\n"
    "\n"
    "**Ours** marks a variable this service adds to the reference's; every other\n"
    "one means what it means there (`COMPAT.md` lists the differences).\n";

int sl_config_write_reference(FILE *out, struct sl_error *err)
{
    bool seen[SL_ARRAY_LEN(config_vars)] = {false};
    fputs(REFERENCE_HEAD, out);
    for (size_t i = 0; i < sl_config_docs_len; i++) {
        const struct sl_config_doc *e = &sl_config_docs[i];
        if (e->section) {
            fprintf(out, "\n## %s\n\n| Variable | Default | Accepted | What it does |\n"
                         "|---|---|---|---|\n",
                    e->section);
            continue;
        }
        const struct config_var *v = config_var_named(e->name);
        if (e->extra ? v != NULL : v == NULL)
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "%s: %s", e->name,
                                e->extra ? "documented as read outside the table, but it is in "
                                           "the table"
                                         : "documented, but the service does not read it");
        if (v) {
            size_t at = (size_t)(v - config_vars);
            if (seen[at])
                return sl_error_set(err, SL_E_CONFIG, 0, "%s: documented twice", e->name);
            seen[at] = true;
        }
        fprintf(out, "| `%s`%s | ", e->name, e->ours ? " (ours)" : "");
        if (e->def)
            put_cell(out, e->def);
        else
            put_default(out, v);
        fputs(" | ", out);
        if (e->accepts)
            put_cell(out, e->accepts);
        else
            put_accepts(out, v);
        fputs(" | ", out);
        put_cell(out, e->doc);
        fputs(" |\n", out);
    }
    for (size_t i = 0; i < SL_ARRAY_LEN(config_vars); i++)
        if (!seen[i])
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "%s: read by the service but not documented (add it to "
                                "src/config/config_doc.c)",
                                config_vars[i].name);
    return 0;
}
