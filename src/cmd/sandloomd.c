/* sandloomd: one process that is both the control plane and the worker.
 * Startup order follows spec RUNTIME.md §2; any refusal exits with status 3
 * and names the problem (CONFIG.md §4). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/http.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "config/config.h"
#include "registry/registry.h"
#include "runtime/env.h"
#include "runtime/runtime.h"
#include "service/service.h"
#include "store/store.h"
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
static int refuse(const char *log_path, const char *kind, const struct sl_error *err)
{
    char line[256];
    snprintf(line, sizeof(line), "agent-sandbox,status=failed,phase=startup,exc=%s", kind);
    startup_log(log_path, line);
    fprintf(stderr, "agent-sandbox startup crashed: %s\n", kind);
    if (err)
        fprintf(stderr, "sandloomd: %s\n", err->message[0] ? err->message : sl_error_text(err));
    return EXIT_STARTUP_REFUSED;
}

/* sandloom-init is installed next to sandloomd. */
static int find_init(char *out, size_t size)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    snprintf(out, size, "%s/sandloom-init", self);
    return access(out, X_OK);
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

    const char *early_log = getenv("SANDBOX_STARTUP_LOG_PATH");
    if (!early_log || !*early_log)
        early_log = "/tmp/agent-sandbox-startup.log";

    struct sl_config cfg = {0};
    struct sl_error err = {0};
    if (sl_config_load(&cfg, NULL, &err) < 0)
        return refuse(early_log, "ConfigError", &err);
    const char *log_path = cfg.startup_log_path;
    if (geteuid() != 0) {
        sl_error_set(&err, SL_E_CONFIG, 0,
                     "sandloomd must run as root: it creates user namespaces and chowns "
                     "sandbox directories to per-sandbox uids");
        return refuse(log_path, "PermissionError", &err);
    }
    if (cfg.launcher_vars_set)
        sl_info("SANDBOX_BUBBLEWRAP_*/SANDBOX_SETPRIV_PATH/SANDBOX_PRLIMIT_PATH only configure the "
                "reference's launcher; this build's native runtime ignores them");
    if (sl_env_validate_config(&cfg, &err) < 0)
        return refuse(log_path, "ConfigError", &err);

    /* Metadata store and schema (RUNTIME.md §2 step 2). */
    struct sl_store *store = sl_store_open(&cfg, &err);
    if (!store)
        return refuse(log_path, "DatabaseError", &err);
    _cleanup_free_ char *warnings = NULL;
    if (store->ops->prepare_schema(store, cfg.database_auto_ddl, &warnings, &err) < 0) {
        store->ops->close(store);
        return refuse(log_path, "SchemaDriftError", &err);
    }
    if (warnings)
        sl_warn("database schema has extra columns (kept for rollback compatibility): %s",
                warnings);

    if (ws_root_prepare(cfg.workspace_root, &err) < 0) {
        store->ops->close(store);
        return refuse(log_path, "PreflightError", &err);
    }

    if (strcmp(cfg.registry_backend, "memory") != 0) {
        sl_error_set(&err, SL_E_CONFIG, 0,
                     "SANDBOX_REGISTRY_BACKEND: the %s registry is not supported by this build yet",
                     cfg.registry_backend);
        store->ops->close(store);
        return refuse(log_path, "ConfigError", &err);
    }
    struct sl_registry *registry = sl_registry_memory_open();
    if (cfg.blobstore_bucket && *cfg.blobstore_bucket &&
        strcmp(cfg.object_store_backend, "s3") == 0)
        sl_warn("an object store bucket is configured but this build has no object store yet; "
                "templates and snapshots are unavailable");

    /* Runtime probe and level selection (RUNTIME.md §2 step 6). */
    char init_path[PATH_MAX + 32];
    if (find_init(init_path, sizeof(init_path)) < 0) {
        sl_error_set(&err, SL_E_CONFIG, 0, "sandloom-init is missing next to sandloomd");
        return refuse(log_path, "RuntimeError", &err);
    }
    struct sl_rt_options rto = {
        .init_path = init_path,
        .readonly_mounts = &cfg.readonly_mounts,
        .python_prefix = "/usr",
        .tmpfs_bytes = cfg.tmpfs_bytes,
        .cpu_seconds = cfg.cpu_seconds,
        .max_processes = cfg.max_processes,
        .max_open_files = cfg.max_open_files,
        .max_file_size_bytes = cfg.max_file_size_bytes,
        .network_isolated = strcmp(cfg.network_mode, "isolated") == 0,
        .requested_level = cfg.isolation_level,
        .probe_root = cfg.workspace_root,
        .probe_uid = (uid_t)cfg.uid_start,
    };
    struct sl_runtime *runtime = NULL;
    if (sl_rt_open(&rto, &runtime, &err) < 0) {
        registry->ops->close(registry);
        store->ops->close(store);
        return refuse(log_path, "IsolationError", &err);
    }
    sl_info("isolation level %s selected (requested %s)",
            sl_rt_profile(runtime)->selected_level, cfg.isolation_level);

    struct sl_service_deps deps = {
        .cfg = &cfg, .store = store, .registry = registry, .runtime = runtime};
    struct sl_service *svc = sl_service_open(&deps, &err);
    if (!svc)
        return refuse(log_path, "RuntimeError", &err);
    if (sl_service_start(svc, &err) < 0) {
        sl_service_close(svc);
        return refuse(log_path, "HeartbeatError", &err);
    }

    char line[512];
    snprintf(line, sizeof(line), "agent-sandbox,status=starting,phase=uvicorn,host=%s,port=%d",
             cfg.host, cfg.port);
    startup_log(log_path, line);
    struct sl_http *http = sl_http_start(&cfg, svc, &err);
    if (!http) {
        sl_service_close(svc);
        return refuse(log_path, "OSError", &err);
    }
    snprintf(line, sizeof(line), "agent-sandbox,status=success,ready,worker_id=%s,port=%d",
             sl_service_worker_id(svc), cfg.port);
    startup_log(log_path, line);

    sl_info("sandloomd listening on http://%s:%d (worker %s)", cfg.host, cfg.port,
            sl_service_worker_id(svc));
    if (cfg.token_generated)
        fprintf(stderr,
                "sandloomd: no SANDBOX_INTERNAL_TOKEN set; generated API token for this run: %s\n"
                "sandloomd: send it as 'Authorization: Bearer <token>'\n",
                cfg.internal_token);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    sl_info("received signal %d, shutting down", sig);
    sl_http_stop(http);
    sl_service_close(svc);
    sl_config_free(&cfg);
    return 0;
}
