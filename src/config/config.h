/* Service configuration: every variable of spec/CONFIG.md, parsed and
 * validated in one place.
 *
 * Lifecycle: sl_config_load() fills a struct sl_config from the process
 * environment, falling back to a `.env` file in the working directory (the
 * process environment wins). The struct owns all its strings; release it with
 * sl_config_free(). After load it is read-only and shared by every thread.
 *
 * Field names are the variable names without the SANDBOX_ prefix, lower-case
 * (SANDBOX_WORKER_CAPACITY -> worker_capacity). Strings are never NULL unless
 * documented as "NULL = unset". A refusal returns -1 with err->code
 * SANDBOX_CONFIG_INVALID and a message naming the variable and the reason but
 * never the value. */
#ifndef SL_CONFIG_CONFIG_H
#define SL_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "common/error.h"
#include "common/util.h"

enum sl_db_backend { SL_DB_SQLITE, SL_DB_POSTGRESQL, SL_DB_MYSQL };

/* The shortest SANDBOX_INTERNAL_TOKEN accepted outside the local environment
 * (staging and prod): a shorter one can be guessed through the API, which
 * every sandbox in host network mode reaches. Locally it is a warning. */
#define SL_CONFIG_TOKEN_MIN_CHARS 32
/* SANDBOX_TEMPLATE_CACHE_MAX_BYTES when unset: 10 GiB. */
#define SL_CONFIG_TEMPLATE_CACHE_DEFAULT (10LL * 1024 * 1024 * 1024)

struct sl_config {
    /* 2.1 identity and HTTP */
    char *host;
    int port;
    char *advertise_host;   /* default: the machine's FQDN (gethostname + canonical name) */
    char *advertise_scheme;
    char *internal_token;   /* after load: never empty (generated outside prod) */
    bool token_generated;   /* internal_token was generated at load */
    char *internal_token_file; /* resolved: unset => <parent of workspace root>/internal-token */
    char *log_level, *log_format; /* SANDBOX_LOG_LEVEL, SANDBOX_LOG_FORMAT (ours) */
    bool token_short;       /* given, shorter than SL_CONFIG_TOKEN_MIN_CHARS (local only) */
    char *startup_log_path;
    char *profile_id;
    char *profile_hash;
    int worker_capacity;
    double heartbeat_interval_seconds;
    int heartbeat_ttl_seconds;

    /* 2.2 isolation and runtime */
    char *isolation_level; /* normalised: auto|basic|standard|strict|1|2|3 */
    struct sl_strlist isolation_required_features; /* lower-cased, de-duplicated, sorted */
    struct sl_strlist isolation_optional_features;
    char *network_mode;      /* host|isolated|private */
    char *execution_backend; /* lower-cased; "bubblewrap" is read as "native" */
    char *gvisor_runsc;      /* SANDBOX_GVISOR_RUNSC */
    char *gvisor_platform;   /* SANDBOX_GVISOR_PLATFORM */
    char *bubblewrap_path, *setpriv_path, *prlimit_path; /* accepted, ignored (COMPAT §1) */
    char *bash_path;
    char *bubblewrap_min_version; /* accepted, ignored */
    int64_t tmpfs_bytes;
    int64_t cpu_seconds;
    int64_t max_processes;
    int64_t max_open_files;
    int64_t max_file_size_bytes;
    struct sl_strlist readonly_mounts;
    /* Ours (COMPAT.md §2): aggregate per-sandbox quotas through cgroups;
     * 0 turns a quota off. */
    int64_t memory_limit_bytes; /* SANDBOX_MEMORY_LIMIT_BYTES, default 2 GiB */
    int64_t pids_limit;         /* SANDBOX_PIDS_LIMIT, default 512 */
    double cpu_limit;           /* SANDBOX_CPU_LIMIT (CPUs), default 2.0 */
    /* Ours: warm sessions stop after this long idle with nothing running;
     * 0 = no warm sessions (a fresh sandbox per execution, as the reference). */
    int64_t session_idle_seconds; /* SANDBOX_SESSION_IDLE_SECONDS, default 60 */

    /* 2.3 workspace and lifecycle */
    char *local_root;
    char *shared_root; /* NULL = unset (an empty value is unset) */
    int64_t uid_start, uid_end;
    int64_t idle_ttl_seconds;
    int64_t orphan_release_grace_seconds;
    int64_t orphan_running_grace_seconds;
    int64_t orphan_reaper_batch_size;
    double maintenance_interval_seconds;
    int64_t suspended_retention_seconds;
    char *suspend_snapshot; /* auto|always|never */
    int64_t orphan_dormant_dir_ttl_seconds;
    int64_t disk_high_watermark_percent;
    int64_t min_free_bytes;
    int64_t default_timeout_seconds;
    double terminate_grace_seconds;

    /* 2.4 API limits */
    int64_t max_output_bytes;
    int64_t stream_retain_bytes, max_streams_per_sandbox, max_streams, stream_keepalive_seconds;
    int64_t stream_stall_seconds, max_watches_per_sandbox, max_watches;
    int64_t max_terminals_per_sandbox, max_terminals, terminal_idle_seconds;
    int64_t terminal_max_seconds, terminal_replay_bytes;
    int64_t port_timeout_seconds, port_max_body_bytes;
    /* E2B's protocol (e2b/): a sandbox's lifetime when the create names
     * none, the longest one may ask, and the domain of the host form. */
    int64_t e2b_default_timeout_seconds, e2b_max_timeout_seconds;
    char *e2b_domain;
    /* Sandboxes prepared ahead of their create (service/warm.c). */
    int64_t warm_pool_size;
    /* "on": the host's cgroup2 superblock gets favordynmods (cgroup.h). */
    char *cgroup_favor_dynmods;
    char *ports_domain; /* "": no host-based form of the ports route */
    int64_t max_file_api_bytes;
    int64_t max_list_entries;
    int64_t auth_failures_per_minute;
    int64_t exec_retention_seconds, history_prune_interval_seconds;
    int64_t max_stored_output_bytes_per_sandbox;
    int64_t database_lock_timeout_seconds;
    int64_t database_pool_size; /* connections to a server database (not SQLite) */
    int64_t workspace_quota_bytes, workspace_quota_inodes;
    int64_t workspace_image_bytes; /* 0 = no workspace image (workspace/image.h) */
    char *workspace_image_path;    /* resolved: unset => <workspace root>.img */
    int64_t http_header_timeout_seconds;
    int64_t max_connections_per_sandbox;
    int64_t max_parallel_execs_per_sandbox;
    struct sl_strlist mcp_allowed_hosts;

    /* 2.5 metadata and registry */
    char *database_url;          /* normalised driver, e.g. sqlite+aiosqlite:///./data/x.db */
    enum sl_db_backend db_backend;
    char *database_path;         /* SQLite file path (the store creates its parent), or the database name */
    bool database_url_default;   /* true when SANDBOX_DATABASE_URL was empty */
    bool database_auto_ddl;      /* resolved: unset => true for SQLite only */
    char *metadata_backend;
    int64_t mysql_connect_timeout_seconds;
    int64_t mysql_pool_recycle_seconds;
    char *registry_backend;
    char *registry_namespace;
    char *redis_url;

    /* 2.6 object store and templates */
    char *object_store_backend;
    char *blobstore_endpoint, *blobstore_bucket, *blobstore_base_prefix, *blobstore_region;
    char *blobstore_access_key, *blobstore_secret_key; /* BLOBSTORE_* from the process env */
    char *template_root;             /* resolved: unset => <parent of workspace root>/templates */
    int64_t template_cache_max_bytes; /* -1 = unset (no eviction) */
    int64_t template_max_extract_bytes;
    int64_t template_max_archive_bytes;
    int64_t template_snapshot_max_entries;
    int64_t template_snapshot_max_depth;
    double template_snapshot_timeout_seconds;

    /* 2.7 toolchains, mirrors, proxies, egress */
    struct sl_strlist toolchains; /* order kept, duplicates dropped */
    char *python_index_url, *npm_registry, *go_proxy, *go_sumdb;
    char *cargo_registry_url, *maven_repository_url;
    char *java_home;         /* NULL = unset */
    char *rust_launcher_dir; /* NULL = unset */
    struct sl_strlist http_proxies;
    char *no_proxy;
    struct sl_strlist egress_denied_addresses;
    struct sl_strlist egress_allowed_literals;
    char *egress_default;                      /* allow|deny (private mode) */
    struct sl_strlist egress_allowed_domains;  /* domain rules allowed by default */
    char *private_network_cidr;                /* the worker's sandbox subnet */
    struct sl_strlist dns_servers;             /* the private resolver's upstreams */

    /* 2.8 plugins and telemetry */
    char *credential_broker;
    char *telemetry_sink; /* NULL = unset */

    /* 3. read outside the settings model */
    char *environment; /* local|staging|prod */
    char *zone, *region;

    /* derived */
    char *workspace_root; /* shared_root if set, else local_root */
    char *env_type;       /* "LOCAL" / "STAGING-zone-region" ... */
    bool launcher_vars_set; /* a launcher-only variable (BUBBLEWRAP, SETPRIV, PRLIMIT) was set */
};

/* Load from the process environment and ./.env (see header comment).
 * `dotenv_path` overrides the .env location (NULL = "./.env"). */
int sl_config_load(struct sl_config *cfg, const char *dotenv_path, struct sl_error *err);
void sl_config_free(struct sl_config *cfg);

/* Parse a list value as spec/CONFIG.md §1 says (JSON array or comma list). */
int sl_config_parse_list(const char *value, struct sl_strlist *out);
/* Parse a boolean spelling; -1 if not one. */
int sl_config_parse_bool(const char *value);


/* docs/CONFIGURATION.md: every variable the service reads, its default,
 * what it accepts and what it does (config_doc.c). -1 with err when the
 * prose and the table disagree (a variable undocumented, or documented
 * but not read). */
int sl_config_write_reference(FILE *out, struct sl_error *err);

#endif
