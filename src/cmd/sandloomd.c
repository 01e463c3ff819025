/* sandloomd: one process that is both the control plane and the worker.
 * Startup order follows spec RUNTIME.md §2; any refusal exits with status 3
 * and names the problem (CONFIG.md §4). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/http.h"
#include "cmd/launch.h"
#include "common/cleanup.h"
#include "blobstore/blobstore.h"
#include "common/log.h"
#include "config/config.h"
#include "config/token_file.h"
#include "registry/registry.h"
#include "runtime/env.h"
#include "runtime/runtime.h"
#include "service/service.h"
#include "store/store.h"
#include "workspace/image.h"
#include "workspace/layout.h"

#define EXIT_STARTUP_REFUSED 3

static void startup_log(const char *path, const char *line)
{
    if (!path || !*path)
        return;
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        mkdir(dir, 0755);
    }
    FILE *f = fopen(path, "ae");
    if (!f)
        return;
    fprintf(f, "%s\n", line);
    fclose(f);
}

/* Refuse to start: one line in the startup log, the reason on stderr. */
static void refuse(const char *log_path, const char *kind, const struct sl_error *err)
{
    char line[256];
    snprintf(line, sizeof(line), "agent-sandbox,status=failed,phase=startup,exc=%s", kind);
    startup_log(log_path, line);
    /* The startup log keeps the reference's marker (its tools read it);
     * the operator reads this. */
    sl_errorlog("sandloomd: startup refused (%s): %s", kind,
                err ? (err->message[0] ? err->message : sl_error_text(err)) : "no detail");
}

/* Async-signal-safe: a fixed line, then the default action (SA_RESETHAND:
 * returning re-runs the faulting instruction, which now kills us). */
static void on_sigbus(int sig)
{
    (void)sig;
    static const char msg[] = "sandloomd: fatal: SIGBUS (a memory-mapped file could not be "
                              "backed: is the state filesystem full?)\n";
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
        /* nothing else to do */
    }
}

int main(void)
{
    /* Every thread inherits this mask; the main thread waits for the
     * signals with sigwait, so no handler runs on a random thread. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* A SIGBUS is said in the log before the process dies: one from a
     * memory-mapped file on a full filesystem used to end the daemon
     * without a word. (Other crashes are left to the sanitizers and core
     * dumps.) */
    struct sigaction last_word = {.sa_handler = on_sigbus, .sa_flags = SA_RESETHAND};
    sigemptyset(&last_word.sa_mask);
    sigaction(SIGBUS, &last_word, NULL);
    /* Every command in flight holds ~4 descriptors and every waiting client
     * one: take all the descriptors the host allows us (sandboxes get their
     * own limit, set at spawn). */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &nofile);
    }

    const char *log_path = getenv("SANDBOX_STARTUP_LOG_PATH");
    if (!log_path || !*log_path)
        log_path = "/tmp/agent-sandbox-startup.log";

    struct sl_config cfg = {0};
    struct sl_error err = {0};
    const char *failure = NULL; /* exception-like kind for the startup log */
    struct sl_store *store = NULL;
    struct sl_registry *registry = NULL;
    struct sl_runtime *runtime = NULL;
    struct sl_blobstore *blobstore = NULL; /* owned by the service after open */
    struct sl_service *svc = NULL; /* owns store, registry, runtime once open */
    struct sl_http *http = NULL;
    struct ws_image image = {0}; /* mounted: unmounted last, after every sandbox is gone */
    struct launch_private private_net = {0}; /* closed after the runtime */
    _cleanup_free_ char *warnings = NULL;

    if (sl_config_load(&cfg, NULL, &err) < 0) {
        failure = "ConfigError";
        goto out;
    }
    log_path = cfg.startup_log_path;
    {
        enum sl_log_level level = SL_LOG_INFO;
        (void)sl_log_parse_level(cfg.log_level, &level); /* validated by the config */
        sl_log_set_level(level);
        sl_log_set_format(strcmp(cfg.log_format, "json") == 0 ? SL_LOG_JSON : SL_LOG_TEXT);
    }
    if (geteuid() != 0) {
        sl_error_set(&err, SL_E_CONFIG, 0,
                     "sandloomd must run as root: it creates user namespaces and chowns "
                     "sandbox directories to per-sandbox uids");
        failure = "PermissionError";
        goto out;
    }
    if (cfg.launcher_vars_set)
        sl_info("SANDBOX_BUBBLEWRAP_*/SANDBOX_SETPRIV_PATH/SANDBOX_PRLIMIT_PATH only configure the "
                "reference's launcher; this build's native runtime ignores them");
    if (sl_env_validate_config(&cfg, &err) < 0) {
        failure = "ConfigError";
        goto out;
    }

    /* Metadata store and schema (RUNTIME.md §2 step 2). The database holds
     * every command line and environment: created 0600 whatever the umask
     * (SQLite gives its -wal/-shm files the database file's mode). Still
     * single-threaded here, so the process-wide umask change is safe. */
    mode_t old_umask = umask(077);
    _cleanup_free_ char *store_warning = NULL;
    store = sl_store_open(&cfg, &store_warning, &err);
    int schema_rc = store ? store->ops->prepare_schema(store, cfg.database_auto_ddl, &warnings,
                                                       &err)
                          : -1;
    umask(old_umask);
    if (!store) {
        failure = "DatabaseError";
        goto out;
    }
    if (schema_rc < 0) {
        failure = "SchemaDriftError";
        goto out;
    }
    if (store_warning)
        sl_warn("%s", store_warning);
    if (warnings)
        sl_warn("database schema has extra columns (kept for rollback compatibility): %s",
                warnings);

    if (cfg.workspace_image_bytes > 0) {
        char note[256];
        if (ws_image_open(cfg.workspace_image_path, cfg.workspace_image_bytes, cfg.workspace_root,
                          cfg.template_root, &image, note, sizeof(note), &err) < 0) {
            failure = "PreflightError";
            goto out;
        }
        sl_info("workspace image %s on %s mounted at %s and %s%s", cfg.workspace_image_path,
                image.loop, image.workspace_root, image.template_root,
                image.created ? " (created)" : image.adopted ? " (left by a previous run)" : "");
        if (note[0])
            sl_warn("workspace image: %s", note);
    }
    if (ws_root_prepare(cfg.workspace_root, &err) < 0) {
        failure = "PreflightError";
        goto out;
    }
    /* No token given: the one a previous start saved, or this start's,
     * saved for the next (config/token_file.h). */
    bool token_saved = false;
    if (cfg.token_generated) {
        char *kept = NULL;
        if (sl_token_file_load(cfg.internal_token_file, cfg.internal_token, &kept, &token_saved,
                               &err) < 0) {
            failure = "ConfigError";
            goto out;
        }
        explicit_bzero(cfg.internal_token, strlen(cfg.internal_token));
        free(cfg.internal_token);
        cfg.internal_token = kept;
    }
    /* The registry (FLEET.md §3): one process's memory, or Redis for a
     * fleet. Redis is not contacted here: an unreachable one makes
     * placement answer 503 until it is back, it does not stop startup. */
    if (strcmp(cfg.registry_backend, "redis") == 0) {
        registry = sl_registry_redis_open(cfg.redis_url, cfg.registry_namespace,
                                          (int)cfg.heartbeat_ttl_seconds, 2000, &err);
        if (!registry) {
            failure = "ConfigError";
            goto out;
        }
    } else if (!(registry = sl_registry_memory_open())) {
        sl_error_set(&err, SL_E_INTERNAL, 0, "out of memory");
        failure = "MemoryError";
        goto out;
    }
    /* The object store (FLEET.md §8): present when the backend is s3 and a
     * bucket is set. A bad configuration (one key alone) stops startup; an
     * unreachable store does not (the first operation that needs it
     * answers OBJECT_STORE_UNAVAILABLE). */
    if (cfg.blobstore_bucket && *cfg.blobstore_bucket &&
        strcmp(cfg.object_store_backend, "s3") == 0) {
        struct sl_s3_options so;
        sl_s3_options_init(&so);
        so.endpoint = cfg.blobstore_endpoint;
        so.region = cfg.blobstore_region;
        so.bucket = cfg.blobstore_bucket;
        so.base_prefix = cfg.blobstore_base_prefix;
        so.access_key = cfg.blobstore_access_key;
        so.secret_key = cfg.blobstore_secret_key;
        blobstore = sl_blobstore_s3_open(&so, &err);
        if (!blobstore) {
            failure = "ConfigError";
            goto out;
        }
        struct sl_error berr = {0};
        int made = blobstore->ops->ensure_bucket(blobstore, &berr);
        if (made < 0)
            sl_warn("object store: bucket not ready (%s); %s", blobstore->ops->describe(blobstore),
                    berr.detail[0] ? berr.detail : sl_error_text(&berr));
        else
            sl_info("object store: %s%s", blobstore->ops->describe(blobstore),
                    made ? " (bucket created)" : "");
    }

    /* Runtime probe and level selection (RUNTIME.md §2 step 6). */
    char init_path[PATH_MAX + 32];
    if (launch_find_init(init_path, sizeof(init_path)) < 0) {
        sl_error_set(&err, SL_E_CONFIG, 0, "sandloom-init is missing next to sandloomd");
        failure = "RuntimeError";
        goto out;
    }
    struct sl_rt_options rto = launch_runtime_options(&cfg, init_path, cfg.workspace_root);
    if (strcmp(cfg.network_mode, "private") == 0) {
        if (launch_private_open(&cfg, &private_net, &err) < 0) {
            sl_error_wrap(&err, "SANDBOX_NETWORK_MODE=private (the default) cannot start here "
                                "(set SANDBOX_NETWORK_MODE=host or isolated to run without it)");
            failure = "ConfigError";
            goto out;
        }
        rto.privnet = private_net.net;
        rto.resolv_conf = private_net.resolv_conf;
        sl_info("private network %s (the sandboxes' resolver at its first address)",
                sl_privnet_cidr(private_net.net));
    }
    if (sl_rt_open(&rto, &runtime, &err) < 0) {
        failure = "IsolationError";
        goto out;
    }
    sl_info("isolation level %s selected (requested %s)",
            sl_rt_profile(runtime)->selected_level, cfg.isolation_level);

    struct sl_service_deps deps = {.cfg = &cfg,
                                   .store = store,
                                   .registry = registry,
                                   .runtime = runtime,
                                   .privnet = private_net.net,
                                   .blobstore = blobstore};
    svc = sl_service_open(&deps, &err);
    if (!svc) {
        failure = "RuntimeError";
        goto out;
    }
    store = NULL;
    registry = NULL;
    blobstore = NULL;
    runtime = NULL;
    if (sl_service_start(svc, &err) < 0) {
        failure = sl_error_is(&err, SL_E_CONFIG) ? "ConfigError" : "HeartbeatError";
        goto out;
    }

    /* Said before the first request can be answered: whoever sees the
     * service up has these lines (a test reading them raced the listener). */
    if (cfg.token_short)
        sl_warn("SANDBOX_INTERNAL_TOKEN is shorter than %d characters: it can be guessed through "
                "the API (refused outside the local environment)",
                SL_CONFIG_TOKEN_MIN_CHARS);
    /* Through the log, so a JSON log stays JSON line by line. */
    if (token_saved)
        sl_info("no SANDBOX_INTERNAL_TOKEN set; generated an API token and saved it in %s "
                "(mode 0600) for later starts: %s (send it as 'Authorization: Bearer <token>')",
                cfg.internal_token_file, cfg.internal_token);
    else if (cfg.token_generated)
        sl_info("no SANDBOX_INTERNAL_TOKEN set; the API token is the one saved in %s",
                cfg.internal_token_file);

    char line[512];
    snprintf(line, sizeof(line), "agent-sandbox,status=starting,phase=uvicorn,host=%s,port=%d",
             cfg.host, cfg.port);
    startup_log(log_path, line);
    http = sl_http_start(&cfg, svc, &err);
    if (!http) {
        failure = "OSError";
        goto out;
    }
    snprintf(line, sizeof(line), "agent-sandbox,status=success,ready,worker_id=%s,port=%d",
             sl_service_worker_id(svc), cfg.port);
    startup_log(log_path, line);

    sl_info("sandloomd listening on http://%s:%d (worker %s)", cfg.host, cfg.port,
            sl_service_worker_id(svc));

    int sig = 0;
    sigwait(&stop_signals, &sig);
    sl_info("received signal %d, shutting down", sig);

out:
    if (failure)
        refuse(log_path, failure, &err);
    /* Commands still running are killed and recorded (CANCELLED), and the
     * requests waiting for them answered, before the server goes. */
    sl_service_stop_execs(svc);
    sl_http_stop(http);
    sl_service_close(svc);
    if (runtime)
        sl_rt_close(runtime);
    launch_private_close(&private_net);
    if (registry)
        registry->ops->close(registry);
    if (blobstore)
        blobstore->ops->close(blobstore);
    if (store)
        store->ops->close(store);
    ws_image_close(&image);
    /* log_path may point into cfg: it is not used past this point. */
    sl_config_free(&cfg);
    return failure ? EXIT_STARTUP_REFUSED : 0;
}
