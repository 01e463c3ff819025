/* sandloom-doctor: runs the isolation probe without starting the service and
 * reports what this host can provide (spec RUNTIME.md §14). --json prints only
 * the JSON. Exit 0 when the configured policy is usable, 2 when blocked. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cmd/launch.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "config/config.h"
#include "runtime/runtime.h"
#include "workspace/image.h"
#include "workspace/quota.h"
#include "service/service.h"
#include <sys/stat.h>

static const char *const GUIDANCE[] = {
    "Run sandloomd as root on a Linux host with user namespaces enabled.",
    "SANDBOX_ISOLATION_LEVEL=auto selects the strongest level that a real launch proves.",
    "An explicitly requested level or required feature that fails stops startup.",
    "This report covers local execution only: no database, registry or object store checks.",
};

int main(int argc, char **argv)
{
    bool json_only = argc > 1 && strcmp(argv[1], "--json") == 0;
    struct utsname uts;
    uname(&uts);
    json_t *report = json_pack("{s:i,s:s,s:s,s:b,s:{s:s,s:s,s:s,s:i}}", "schema_version", 1,
                               "product", "Sandloom", "status", "blocked", "can_start", 0,
                               "environment", "system", uts.sysname, "kernel", uts.release,
                               "architecture", uts.machine, "effective_uid", (int)geteuid());
    json_t *errors = json_array(), *warnings = json_array();
    json_object_set_new(report, "scope",
                        json_string("local execution only: no database, Redis, S3 or plugin "
                                    "checks"));

    struct sl_config cfg = {0};
    struct sl_error err = {0};
    int exit_code = 2;
    char tmpl[] = "/tmp/sandloom-doctor-XXXXXX";
    char *dir = NULL;
    if (sl_config_load(&cfg, NULL, &err) < 0) {
        json_array_append_new(errors, json_string(err.message));
    } else if (geteuid() != 0) {
        json_array_append_new(errors, json_string("the probe needs root (effective uid 0)"));
    } else if (!(dir = mkdtemp(tmpl)) || chmod(dir, 0711) < 0) {
        json_array_append_new(errors, json_string("cannot create a temporary probe directory"));
    } else {
        json_object_set_new(report, "requested_policy",
                            json_pack("{s:s,s:s,s:[],s:[]}", "level", cfg.isolation_level,
                                      "network_mode", cfg.network_mode, "required_features",
                                      "optional_features"));
        char init_path[PATH_MAX + 32];
        if (launch_find_init(init_path, sizeof(init_path)) < 0)
            init_path[0] = '\0'; /* sl_rt_open then reports it missing */
        struct sl_rt_options rto = launch_runtime_options(&cfg, init_path, dir);
        rto.favor_dynmods = false; /* a diagnosis changes nothing on the host */
        struct sl_runtime *rt = NULL;
        if (sl_rt_open(&rto, &rt, &err) < 0) {
            json_array_append_new(errors, json_string(err.message));
        } else {
            const struct sl_rt_profile *p = sl_rt_profile(rt);
            static const char *const names[] = {"basic", "standard", "strict"};
            json_t *levels = json_array(), *failures = json_object();
            for (int i = 0; i < 3; i++) {
                if (p->supported[i])
                    json_array_append_new(levels, json_string(names[i]));
                else
                    json_object_set_new(failures, names[i], json_string(p->probe_failure[i]));
            }
            json_object_set_new(
                report, "capabilities",
                json_pack("{s:s,s:s,s:o,s:o,s:b,s:b,s:b,s:s,s:b,s:s}", "selected_level",
                          p->selected_level, "max_supported_level", p->max_supported_level,
                          "supported_levels", levels, "probe_failures", failures,
                          "pid_namespace", p->pid_namespace, "cgroup_namespace",
                          p->cgroup_namespace, "network_namespace", p->network_isolated,
                          "runtime", "sandloom-native", "seccomp", 1, "seccomp_policy",
                          p->seccomp_policy));
            json_t *caps = json_object_get(report, "capabilities");
            json_object_set_new(caps, "execution_backend",
                                json_pack("{s:s,s:s,s:s}", "name", p->backend, "version",
                                          p->backend_version, "platform", p->backend_platform));
            json_t *additions = json_array();
            for (size_t i = 0; i < p->n_additions; i++)
                json_array_append_new(additions, json_string(p->enabled_additions[i]));
            json_object_set_new(caps, "enabled_additions", additions);
            json_object_set_new(
                caps, "cgroups",
                json_pack("{s:o,s:b,s:b,s:b,s:s}", "version",
                          p->cgroup_version ? json_integer(p->cgroup_version) : json_null(),
                          "memory_quota", p->memory_quota, "pids_quota", p->pids_quota,
                          "cpu_quota", p->cpu_quota, "note", p->cgroup_note));
            /* The disk quota: what the service would enforce, and how. With
             * the workspace image, that is the image's btrfs, whether or
             * not it is mounted now. */
            struct ws_quota dq;
            char image_why[160] = "";
            bool image_ok = cfg.workspace_image_bytes > 0 &&
                            ws_image_usable(image_why, sizeof(image_why));
            if (cfg.workspace_image_bytes > 0 && !image_ok)
                json_array_append_new(errors,
                                      json_string("SANDBOX_WORKSPACE_IMAGE_BYTES is set but "
                                                  "the image cannot be made here (see "
                                                  "capabilities.disk_quota)"));
            if (image_ok)
                ws_quota_btrfs(cfg.workspace_quota_bytes, cfg.workspace_quota_inodes, &dq);
            else
                ws_quota_probe(cfg.workspace_root, cfg.workspace_quota_bytes,
                               cfg.workspace_quota_inodes, false, &dq);
            json_t *disk = json_pack("{s:b,s:s,s:I,s:I}", "sandbox_disk_quota",
                                     dq.qgroups && cfg.workspace_quota_bytes > 0, "mode", dq.mode,
                                     "bytes", (json_int_t)cfg.workspace_quota_bytes, "inodes",
                                     (json_int_t)cfg.workspace_quota_inodes);
            if (dq.why[0]) {
                json_object_set_new(disk, "note", json_string(dq.why));
                json_array_append_new(warnings, json_string("the per-sandbox disk quota is not "
                                                            "fully enforced by the filesystem "
                                                            "(see capabilities.disk_quota)"));
            }
            json_object_set_new(disk, "workspace_image", json_boolean(image_ok));
            if (image_why[0])
                json_object_set_new(disk, "workspace_image_note", json_string(image_why));
            json_object_set_new(caps, "disk_quota", disk);
            if (!p->memory_quota || !p->pids_quota || !p->cpu_quota)
                json_array_append_new(warnings,
                                      json_string("some aggregate sandbox quotas are not enforced "
                                                  "on this host (see capabilities.cgroups)"));
            /* Network modes this host can give a sandbox: host always;
             * isolated if a sandbox with its own network namespace launches;
             * private if that and the private network's parts work. */
            json_t *modes = json_array();
            json_array_append_new(modes, json_string("host"));
            struct sl_rt_options iso = rto;
            iso.network_isolated = true;
            iso.requested_level = "auto";
            struct sl_runtime *rt_iso = NULL;
            struct sl_error iso_err = {0};
            if (sl_rt_open(&iso, &rt_iso, &iso_err) == 0) {
                json_array_append_new(modes, json_string("isolated"));
                sl_rt_close(rt_iso);
            } else {
                json_array_append_new(warnings, json_string("network mode 'isolated' is unavailable"));
            }
            /* private: nftables tables can be made here and forwarding
             * turned on (net/privnet.c's needs besides the namespace). */
            struct sl_net_modes nm;
            sl_net_modes_probe(&nm);
            if (nm.private_mode)
                json_array_append_new(modes, json_string("private"));
            else
                json_array_append_new(
                    warnings, json_string(nm.why[0] ? nm.why
                                                    : "network mode 'private' is unavailable"));
            json_object_set_new(caps, "network_modes", modes);
            /* The toolchains, launched for real with the managed environment;
             * the probe sandbox lives in the doctor's temporary directory. */
            char *saved_root = cfg.workspace_root;
            cfg.workspace_root = dir;
            json_object_set_new(caps, "toolchains", sl_toolchain_checks(rt, &cfg));
            cfg.workspace_root = saved_root;
            json_object_set_new(report, "status", json_string("ready"));
            json_object_set_new(report, "can_start", json_true());
            exit_code = 0;
            sl_rt_close(rt);
        }
        /* All of it: a gVisor probe leaves its state (.gvisor) there. */
        (void)sl_tree_remove(dir);
    }
    json_t *guidance = json_array();
    for (size_t i = 0; i < SL_ARRAY_LEN(GUIDANCE); i++)
        json_array_append_new(guidance, json_string(GUIDANCE[i]));
    json_object_set_new(report, "warnings", warnings);
    json_object_set_new(report, "errors", errors);
    json_object_set_new(report, "operator_guidance", guidance);
    if (!json_only)
        printf("Sandloom doctor: %s\n", exit_code == 0 ? "ready" : "blocked");
    char *text = json_dumps(report, JSON_INDENT(2) | JSON_SORT_KEYS);
    printf("%s\n", text);
    free(text);
    json_decref(report);
    sl_config_free(&cfg);
    return exit_code;
}
