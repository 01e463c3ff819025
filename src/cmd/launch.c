#include "cmd/launch.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int launch_find_init(char *out, size_t size)
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
    /* Beside the binary (the build directory), else where `make install`
     * puts it: <prefix>/libexec/sandloom beside <prefix>/bin. */
    static const char *const places[] = {"/sandloom-init", "/../libexec/sandloom/sandloom-init"};
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
        int len = snprintf(out, size, "%s%s", self, places[i]);
        if (len < 0 || (size_t)len >= size)
            return -1;
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

struct sl_rt_options launch_runtime_options(const struct sl_config *cfg, const char *init_path,
                                            const char *probe_root)
{
    return (struct sl_rt_options){
        .init_path = init_path,
        .readonly_mounts = &cfg->readonly_mounts,
        /* Debian's python3 serves /opt/agent-sandbox/python-runtime. */
        .python_prefix = "/usr",
        .tmpfs_bytes = cfg->tmpfs_bytes,
        .cpu_seconds = cfg->cpu_seconds,
        .max_processes = cfg->max_processes,
        .max_open_files = cfg->max_open_files,
        .max_file_size_bytes = cfg->max_file_size_bytes,
        .network_isolated = strcmp(cfg->network_mode, "isolated") == 0,
        .requested_level = cfg->isolation_level,
        .probe_root = probe_root,
        .probe_uid = (uid_t)cfg->uid_start,
        .required_features = &cfg->isolation_required_features,
        .optional_features = &cfg->isolation_optional_features,
        .warm_sessions = cfg->session_idle_seconds > 0,
        .memory_limit_bytes = cfg->memory_limit_bytes,
        .pids_limit = cfg->pids_limit,
        .cpu_limit = cfg->cpu_limit,
    };
}
