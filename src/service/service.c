/* Service lifetime, worker identity, capabilities, health, heartbeat and the
 * live-sandbox table. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blobstore/blobstore.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "net/privnet.h"
#include "runtime/env.h"
#include "service/internal.h"

#define SL_VERSION "0.2.0"
#define SL_RUNTIME_NAME "sandloom-native"

static const char *const LEVEL_FEATURES[3][3] = {
    {NULL}, /* basic adds nothing beyond the base list */
    {"pid_namespace", "private_procfs", NULL},
    {"cgroup_namespace", NULL},
};
static const char *const BASIC_FEATURES[] = {
    "resource_limits", "no_new_privileges", "uid_separation",
    "user_namespace",  "mount_namespace",   "ipc_namespace",
    "uts_namespace",   "private_tmp",       "readonly_system_mounts"};
static const char *const LEVEL_NAMES[3] = {"basic", "standard", "strict"};

static int level_index(const char *level)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(level, LEVEL_NAMES[i]) == 0)
            return i;
    return 0;
}

static int cmp_json_str(const void *a, const void *b)
{
    return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

static json_t *sorted_string_array(json_t *arr)
{
    size_t n = json_array_size(arr);
    json_t **items = calloc(n ? n : 1, sizeof(*items));
    for (size_t i = 0; i < n; i++)
        items[i] = json_array_get(arr, i);
    qsort(items, n, sizeof(*items), cmp_json_str);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, items[i]);
    free(items);
    json_decref(arr);
    return out;
}

static json_t *strlist_json(const struct sl_strlist *l)
{
    json_t *a = json_array();
    for (size_t i = 0; i < l->len; i++)
        json_array_append_new(a, json_string(l->items[i]));
    return a;
}

/* The effective profile hash of RUNTIME.md §3.2. The runtime always
 * disables nested user namespaces (max_user_namespaces = 0 inside), the
 * reference's default variant, so there is never a "-nested-userns" suffix.
 * A backend other than native adds "-<backend>-<version>-<platform>"
 * (ours): a sandbox placed on a worker of another boundary must be a new
 * placement, and a memory checkpoint restores only under the runsc that
 * made it. */
static int build_profile_hash(struct sl_service *svc, const struct sl_rt_profile *p)
{
    const struct sl_config *cfg = svc->cfg;
    char suffix[128];
    int n = snprintf(suffix, sizeof(suffix), "-%s-%s", p->selected_level,
                     p->network_private    ? "net-private"
                     : p->network_isolated ? "net-none"
                                           : "net-host");
    for (size_t i = 0; i < p->n_additions; i++)
        n += snprintf(suffix + n, sizeof(suffix) - (size_t)n, "%s%s", i ? "-" : "-with-",
                      p->enabled_additions[i]);
    if (strcmp(p->backend, "native") != 0)
        n += snprintf(suffix + n, sizeof(suffix) - (size_t)n, "-%s-%s-%s", p->backend,
                      p->backend_version, p->backend_platform);
    size_t blen = strlen(cfg->profile_hash), slen = strlen(suffix);
    if (blen >= slen && strcmp(cfg->profile_hash + blen - slen, suffix) == 0)
        n = snprintf(svc->profile_hash, sizeof(svc->profile_hash), "%s", cfg->profile_hash);
    else
        n = snprintf(svc->profile_hash, sizeof(svc->profile_hash), "%s%s", cfg->profile_hash,
                     suffix);
    return n < 0 || (size_t)n >= sizeof(svc->profile_hash) ? -1 : 0;
}

static json_t *build_capabilities(struct sl_service *svc, const struct sl_rt_profile *p)
{
    const struct sl_config *cfg = svc->cfg;
    json_t *caps = json_object();
    int sel = level_index(p->selected_level);

    json_t *features = json_array();
    for (size_t i = 0; i < SL_ARRAY_LEN(BASIC_FEATURES); i++)
        json_array_append_new(features, json_string(BASIC_FEATURES[i]));
    for (int lvl = 1; lvl <= sel; lvl++)
        for (int i = 0; LEVEL_FEATURES[lvl][i]; i++)
            json_array_append_new(features, json_string(LEVEL_FEATURES[lvl][i]));
    json_t *additions = json_array();
    for (size_t i = 0; i < p->n_additions; i++) {
        json_array_append_new(features, json_string(p->enabled_additions[i]));
        json_array_append_new(additions, json_string(p->enabled_additions[i]));
        /* pid_namespace always brings private_procfs (RUNTIME.md §3). */
        if (strcmp(p->enabled_additions[i], "pid_namespace") == 0)
            json_array_append_new(features, json_string("private_procfs"));
    }
    features = sorted_string_array(features);
    json_t *skipped = json_object();
    for (size_t i = 0; i < p->n_skipped; i++)
        json_object_set_new(skipped, p->skipped_optional[i], json_string(p->skipped_detail[i]));

    json_t *supported = json_array(), *failures = json_object();
    for (int i = 0; i < 3; i++) {
        if (p->supported[i])
            json_array_append_new(supported, json_string(LEVEL_NAMES[i]));
        else
            json_object_set_new(failures, LEVEL_NAMES[i], json_string(p->probe_failure[i]));
    }

    json_object_set_new(caps, "profile_id", json_string(cfg->profile_id));
    json_object_set_new(caps, "profile_hash", json_string(svc->profile_hash));
    json_object_set_new(caps, "bubblewrap_version", json_null());
    json_object_set_new(caps, "runtime", json_string(SL_RUNTIME_NAME));
    json_object_set_new(caps, "runtime_version", json_string(SL_VERSION));
    /* Ours: the boundary this worker's sandboxes run behind. */
    json_object_set_new(caps, "execution_backend",
                        json_pack("{s:s,s:s,s:s}", "name", p->backend, "version",
                                  p->backend_version, "platform", p->backend_platform));
    json_object_set_new(caps, "user_namespace", json_boolean(p->user_namespace));
    json_object_set_new(caps, "mount_namespace", json_true());
    json_object_set_new(caps, "ipc_namespace", json_true());
    json_object_set_new(caps, "uts_namespace", json_true());
    json_object_set_new(caps, "private_tmp", json_true());
    json_object_set_new(caps, "requested_level", json_string(cfg->isolation_level));
    json_object_set_new(caps, "selected_level", json_string(p->selected_level));
    json_object_set_new(caps, "max_supported_level", json_string(p->max_supported_level));
    json_object_set_new(caps, "supported_levels", supported);
    json_object_set_new(caps, "probe_failures", failures);
    json_object_set_new(caps, "features", features);
    json_object_set_new(caps, "profile_mode", json_string(p->n_additions ? "custom" : "level"));

    json_t *policy = json_object();
    json_object_set_new(policy, "required", strlist_json(&cfg->isolation_required_features));
    json_object_set_new(policy, "optional", strlist_json(&cfg->isolation_optional_features));
    json_object_set_new(policy, "enabled_additions", additions);
    json_object_set_new(policy, "skipped_optional", skipped);
    json_object_set_new(caps, "feature_policy", policy);

    /* Measured: every enabled toolchain was launched in a real sandbox. */
    static const char *const NEEDS_PROCFS[] = {"rust", "java"};
    json_t *tc = json_object(), *needs = json_array(), *available = json_array();
    json_t *checks = sl_toolchain_checks(svc->runtime, cfg);
    for (size_t i = 0; i < cfg->toolchains.len; i++) {
        const char *name = cfg->toolchains.items[i];
        bool needs_procfs = false;
        for (size_t k = 0; k < SL_ARRAY_LEN(NEEDS_PROCFS); k++)
            if (strcmp(name, NEEDS_PROCFS[k]) == 0)
                needs_procfs = !((strcmp(name, "rust") == 0 && cfg->rust_launcher_dir) ||
                                 (strcmp(name, "java") == 0 && cfg->java_home));
        if (needs_procfs)
            json_array_append_new(needs, json_string(name));
    }
    const char *check_name;
    json_t *check;
    json_object_foreach(checks, check_name, check)
    {
        const char *status = sl_json_get_str(check, "status");
        if (status && strcmp(status, "available") == 0)
            json_array_append_new(available, json_string(check_name));
    }
    json_t *hints = p->pid_namespace ? json_array() : json_copy(needs);
    json_t *unavailable = json_array();
    size_t hi;
    json_t *hint;
    json_array_foreach(hints, hi, hint)
    {
        const char *status =
            sl_json_get_str(json_object_get(checks, json_string_value(hint)), "status");
        if (status && (strcmp(status, "failed") == 0 || strcmp(status, "timed_out") == 0))
            json_array_append(unavailable, hint);
    }
    json_object_set_new(tc, "configured", strlist_json(&cfg->toolchains));
    json_object_set_new(tc, "needs_procfs", json_copy(needs));
    json_object_set_new(tc, "isolation_hints", hints);
    json_object_set_new(tc, "unavailable_at_this_level", unavailable);
    json_object_set_new(tc, "checks", checks);
    json_object_set_new(tc, "available", available);
    json_decref(needs);
    json_object_set_new(caps, "toolchains", tc);

    json_object_set_new(caps, "disable_nested_userns", json_boolean(p->nested_userns_disabled));
    json_object_set_new(caps, "overlay", json_false());
    json_object_set_new(caps, "pid_namespace", json_boolean(p->pid_namespace));
    json_object_set_new(caps, "cgroup_namespace", json_boolean(p->cgroup_namespace));
    json_object_set_new(caps, "network_namespace",
                        json_boolean(p->network_isolated || p->network_private));
    /* Ours: the mode, and the private mode's subnet. */
    json_object_set_new(caps, "network_mode", json_string(cfg->network_mode));
    if (svc->privnet)
        json_object_set_new(caps, "private_network", json_string(sl_privnet_cidr(svc->privnet)));
    json_object_set_new(caps, "egress_address_filter", json_boolean(p->network_private));
    /* Quotas are reported true only when the kernel really enforces them
     * (COMPAT.md §2); the reference reports all false. */
    json_t *rc = json_pack(
        "{s:{s:I,s:I,s:I,s:I},s:b,s:b,s:b,s:b,s:b}", "process_limits", "cpu_seconds_per_process",
        (json_int_t)cfg->cpu_seconds, "processes_per_real_uid", (json_int_t)cfg->max_processes,
        "open_files_per_process", (json_int_t)cfg->max_open_files, "bytes_per_file",
        (json_int_t)cfg->max_file_size_bytes, "sandbox_cpu_quota", p->cpu_quota,
        "sandbox_memory_quota", p->memory_quota, "sandbox_pid_quota", p->pids_quota,
        "sandbox_disk_quota", svc->quota.qgroups && cfg->workspace_quota_bytes > 0,
        "execution_cgroup_supervision", p->cgroup_version != 0);
    json_t *quotas = json_object();
    if (p->memory_quota)
        json_object_set_new(quotas, "memory_bytes", json_integer(cfg->memory_limit_bytes));
    if (p->pids_quota)
        json_object_set_new(quotas, "pids", json_integer(cfg->pids_limit));
    if (p->cpu_quota)
        json_object_set_new(quotas, "cpus", json_real(cfg->cpu_limit));
    /* Ours: the disk quota and who enforces it (workspace/quota.h). */
    if (cfg->workspace_quota_bytes > 0)
        json_object_set_new(quotas, "disk_bytes", json_integer(cfg->workspace_quota_bytes));
    if (cfg->workspace_quota_inodes > 0)
        json_object_set_new(quotas, "disk_inodes", json_integer(cfg->workspace_quota_inodes));
    json_object_set_new(rc, "sandbox_disk_quota_mode", json_string(svc->quota.mode));
    if (svc->quota.why[0])
        json_object_set_new(rc, "sandbox_disk_quota_note", json_string(svc->quota.why));
    json_object_set_new(rc, "sandbox_quotas", quotas);
    json_object_set_new(rc, "cgroup_version",
                        p->cgroup_version ? json_integer(p->cgroup_version) : json_null());
    if (p->cgroup_note[0])
        json_object_set_new(rc, "cgroup_note", json_string(p->cgroup_note));
    json_object_set_new(rc, "favordynmods", json_boolean(p->favordynmods));
    if (p->favordynmods_note[0])
        json_object_set_new(rc, "favordynmods_note", json_string(p->favordynmods_note));
    json_object_set_new(caps, "resource_control", rc);
    /* Ours: whether a sandbox's /proc/self/mountinfo shows host paths of
     * the state layout (workspace/quota.h, ws_is_mount_root). */
    bool ws_own = ws_is_mount_root(cfg->workspace_root);
    bool tpl_own = ws_is_mount_root(cfg->template_root);
    json_t *layout =
        json_pack("{s:b,s:b,s:b,s:b}", "hidden", ws_own && tpl_own,
                  "workspace_root_is_a_filesystem", ws_own, "template_root_is_a_filesystem",
                  tpl_own, "workspace_image", cfg->workspace_image_bytes > 0);
    if (!(ws_own && tpl_own))
        json_object_set_new(layout, "note",
                            json_string("a sandbox's /proc/self/mountinfo shows the host path of "
                                        "its directories below the root of their filesystem: "
                                        "set SANDBOX_WORKSPACE_IMAGE_BYTES (a btrfs image the "
                                        "service mounts at both roots), or mount a filesystem "
                                        "of its own at the workspace root (SANDBOX_LOCAL_ROOT) "
                                        "and at the template root, to hide the host layout"));
    json_object_set_new(caps, "host_layout", layout);
    json_object_set_new(caps, "landlock", json_false());
    /* Ours, beyond the reference (COMPAT.md §2): every sandbox process runs
     * under a seccomp filter. */
    json_object_set_new(caps, "seccomp", json_true());
    json_object_set_new(caps, "warm_sessions",
                        json_pack("{s:b,s:I}", "enabled", cfg->session_idle_seconds > 0,
                                  "idle_seconds", (json_int_t)cfg->session_idle_seconds));
    json_object_set_new(caps, "seccomp_policy", json_string(p->seccomp_policy));
    json_object_set_new(caps, "extension", json_object());
    return caps;
}

struct sl_service *sl_service_open(const struct sl_service_deps *deps, struct sl_error *err)
{
    const struct sl_config *cfg = deps->cfg;
    struct sl_service *svc = calloc(1, sizeof(*svc));
    if (!svc) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    svc->cfg = cfg;
    svc->store = deps->store;
    svc->registry = deps->registry;
    svc->runtime = deps->runtime;
    svc->privnet = deps->privnet;
    sl_net_modes_probe(&svc->net_modes);
    svc->blobstore = deps->blobstore;
    pthread_mutex_init(&svc->live_lock, NULL);
    pthread_mutex_init(&svc->quota_lock, NULL);
    pthread_mutex_init(&svc->limits_lock, NULL);
    pthread_mutex_init(&svc->loop_lock, NULL);
    pthread_mutex_init(&svc->finish_lock, NULL);
    /* The loop computes its deadlines on CLOCK_MONOTONIC; the condition
     * variable must wait on the same clock (the default, CLOCK_REALTIME,
     * would see every monotonic deadline as long past and spin). */
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&svc->loop_cond, &cattr);
    pthread_cond_init(&svc->warm.cond, &cattr);
    pthread_condattr_destroy(&cattr);
    pthread_mutex_init(&svc->warm.lock, NULL);

    int idlen =
        snprintf(svc->worker_id, sizeof(svc->worker_id), "%s-%d", cfg->advertise_host, cfg->port);
    int eplen = snprintf(svc->endpoint, sizeof(svc->endpoint), "%s://%s:%d", cfg->advertise_scheme,
                         cfg->advertise_host, cfg->port);
    if (idlen < 0 || (size_t)idlen >= sizeof(svc->worker_id) || eplen < 0 ||
        (size_t)eplen >= sizeof(svc->endpoint)) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "SANDBOX_ADVERTISE_HOST: too long for a worker id (128 characters)");
        free(svc);
        return NULL;
    }
    if (sl_random_hex(svc->worker_epoch, 16) < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot draw the worker epoch");
        free(svc);
        return NULL;
    }
    const struct sl_rt_profile *p = sl_rt_profile(svc->runtime);
    if (build_profile_hash(svc, p) < 0) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "SANDBOX_PROFILE_HASH: too long once the level suffix is added (191 "
                     "characters)");
        free(svc);
        return NULL;
    }
    ws_quota_probe(cfg->workspace_root, cfg->workspace_quota_bytes, cfg->workspace_quota_inodes,
                   true, &svc->quota);
    if (svc->quota.why[0])
        sl_warn("workspace quota (%s): %s", svc->quota.mode, svc->quota.why);
    svc->capabilities = build_capabilities(svc, p);
    svc->owners = svc_owner_cache_new(); /* NULL (no memory): every request decides afresh */
    svc->keys = sl_key_cache_new();      /* NULL (no memory): every key check asks the store */
    if (!json_is_true(json_object_get(json_object_get(svc->capabilities, "host_layout"), "hidden")))
        sl_warn("host layout: the workspace root or the template root is not a filesystem of its "
                "own, so sandboxes read their host paths in /proc/self/mountinfo (set "
                "SANDBOX_WORKSPACE_IMAGE_BYTES to hide it; see capabilities.host_layout)");
    if (p->favordynmods_note[0])
        sl_warn("cgroups: %s, so a command started after a pause waits for the kernel's "
                "grace period to enter its cgroup (SANDBOX_CGROUP_FAVOR_DYNMODS)",
                p->favordynmods_note);
    ws_disk_status(cfg->workspace_root, cfg->min_free_bytes, cfg->disk_high_watermark_percent,
                   &svc->disk);
    if (svc_execs_start(svc, err) < 0) {
        json_decref(svc->capabilities);
        free(svc);
        return NULL;
    }
    return svc;
}

const char *sl_service_worker_id(const struct sl_service *svc)
{
    return svc->worker_id;
}
const struct sl_config *sl_service_config(const struct sl_service *svc)
{
    return svc->cfg;
}

json_t *svc_disk_json(const struct sl_disk_status *d)
{
    return json_pack("{s:b,s:I,s:I,s:I,s:I}", "available", d->available, "total_bytes",
                     (json_int_t)d->total_bytes, "used_bytes", (json_int_t)d->used_bytes,
                     "free_bytes", (json_int_t)d->free_bytes, "used_percent",
                     (json_int_t)d->used_percent);
}

/* A fresh statvfs every time (a syscall, no I/O): a decision to admit a
 * new sandbox must not rest on the heartbeat's reading from seconds ago,
 * taken before the disk filled. */
void svc_disk_status(struct sl_service *svc, struct sl_disk_status *out)
{
    const struct sl_config *cfg = svc->cfg;
    ws_disk_status(cfg->workspace_root, cfg->min_free_bytes, cfg->disk_high_watermark_percent, out);
    pthread_mutex_lock(&svc->loop_lock);
    svc->disk = *out;
    pthread_mutex_unlock(&svc->loop_lock);
}

static json_t *heartbeat_payload(struct sl_service *svc, const struct sl_disk_status *disk,
                                 struct sl_worker_entry *entry)
{
    const struct sl_config *cfg = svc->cfg;
    memset(entry, 0, sizeof(*entry));
    snprintf(entry->worker_id, sizeof(entry->worker_id), "%s", svc->worker_id);
    snprintf(entry->worker_epoch, sizeof(entry->worker_epoch), "%s", svc->worker_epoch);
    snprintf(entry->endpoint, sizeof(entry->endpoint), "%s", svc->endpoint);
    snprintf(entry->status, sizeof(entry->status), "%s", disk->available ? "ACTIVE" : "DRAINING");
    snprintf(entry->profile_id, sizeof(entry->profile_id), "%s", cfg->profile_id);
    snprintf(entry->profile_hash, sizeof(entry->profile_hash), "%s", svc->profile_hash);
    entry->capacity = cfg->worker_capacity;
    entry->running_sessions = svc_live_count(svc);
    entry->running_execs = atomic_load(&svc->running_execs);
    entry->max_parallel_execs_per_sandbox = cfg->max_parallel_execs_per_sandbox;
    entry->observed_at = sl_now_us() / 1000;
    return json_pack(
        "{s:I,s:I,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:s,s:s,s:O,s:o}", "observed_at",
        (json_int_t)entry->observed_at, "max_parallel_execs_per_sandbox",
        (json_int_t)entry->max_parallel_execs_per_sandbox, "worker_id", entry->worker_id,
        "worker_epoch", entry->worker_epoch, "endpoint", entry->endpoint, "status", entry->status,
        "capacity", (json_int_t)entry->capacity, "running_sessions",
        (json_int_t)entry->running_sessions, "running_execs", (json_int_t)entry->running_execs,
        "profile_id", entry->profile_id, "profile_hash", entry->profile_hash, "capabilities",
        svc->capabilities, "disk", svc_disk_json(disk));
}

/* One heartbeat: registry entry + SQL worker row (FLEET.md §3.1). */
static int heartbeat(struct sl_service *svc, const char *status_override, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_disk_status disk;
    ws_disk_status(cfg->workspace_root, cfg->min_free_bytes, cfg->disk_high_watermark_percent,
                   &disk);
    pthread_mutex_lock(&svc->loop_lock);
    svc->disk = disk;
    pthread_mutex_unlock(&svc->loop_lock);

    struct sl_worker_entry entry;
    _cleanup_json_ json_t *payload = heartbeat_payload(svc, &disk, &entry);
    pthread_mutex_lock(&svc->loop_lock);
    svc->self_entry = entry;
    pthread_mutex_unlock(&svc->loop_lock);
    /* The registry and the SQL row are written independently: a Redis that
     * is away must not age this worker's row too (peers fall back to it,
     * svc_worker_lookup). */
    struct sl_error publish_err = {0};
    bool published = status_override ||
                     svc->registry->ops->publish(svc->registry, &entry, payload,
                                                 cfg->heartbeat_ttl_seconds, &publish_err) == 0;
    struct sl_worker_row row = {
        .worker_id = svc->worker_id,
        .worker_epoch = svc->worker_epoch,
        .endpoint = svc->endpoint,
        .status = status_override ? status_override : entry.status,
        .capacity = entry.capacity,
        .running_sessions = entry.running_sessions,
        .profile_hash = svc->profile_hash,
        .now = sl_now_us(),
    };
    if (svc->store->ops->worker_upsert(svc->store, &row, err) < 0)
        return sl_error_wrap(err, "worker row upsert");
    if (!published) {
        if (err)
            *err = publish_err;
        return sl_error_wrap(err, "registry publish");
    }
    if (!status_override)
        atomic_store(&svc->last_heartbeat_mono_us, sl_mono_us());
    return 0;
}

static void *service_loop(void *arg)
{
    struct sl_service *svc = arg;
    const struct sl_config *cfg = svc->cfg;
    int64_t beat_every = (int64_t)(cfg->heartbeat_interval_seconds * 1e6);
    int64_t maint_every = (int64_t)(cfg->maintenance_interval_seconds * 1e6);
    int64_t next_beat = sl_mono_us() + beat_every, next_maint = sl_mono_us();
    int64_t next_retry = 0, next_term = sl_mono_us() + 1000000;
    pthread_mutex_lock(&svc->loop_lock);
    while (!svc->stopping) {
        int64_t now = sl_mono_us();
        int64_t wake = next_beat < next_maint ? next_beat : next_maint;
        if (next_term < wake)
            wake = next_term;
        /* Completion writes that failed: every second while any wait. */
        bool retrying = svc_finish_retry_pending(svc) > 0;
        if (retrying && !next_retry)
            next_retry = now + SVC_FINISH_RETRY_EVERY_US;
        if (retrying && next_retry < wake)
            wake = next_retry;
        if (now < wake) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t wait_us = wake - now;
            ts.tv_sec += wait_us / 1000000;
            ts.tv_nsec += (wait_us % 1000000) * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&svc->loop_cond, &svc->loop_lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&svc->loop_lock);
        struct sl_error err = {0};
        if (retrying && now >= next_retry) {
            svc_finish_retry_run(svc);
            next_retry = 0;
        }
        if (now >= next_beat) {
            if (heartbeat(svc, NULL, &err) < 0)
                sl_warn("heartbeat failed: %s", sl_error_text(&err));
            next_beat = now + beat_every;
            /* A dormant sandbox costs no process: idle warm sessions with
             * nothing running go. */
            if (cfg->session_idle_seconds > 0)
                sl_rt_reap_idle(svc->runtime, cfg->session_idle_seconds * 1000);
        }
        /* Terminals left alone end within a second of their idle limit. */
        if (now >= next_term) {
            svc_terminals_cycle(svc);
            next_term = now + 1000000;
        }
        if (now >= next_maint) {
            /* Maintenance step 1 (FLEET.md §6.1): empty the trash. The
             * reaper steps arrive with the reclamation issue. */
            int removed = ws_trash_purge(cfg->workspace_root);
            if (removed > 0)
                sl_info("maintenance: removed %d destroyed sandbox roots", removed);
            svc_template_cache_budget(svc);
            /* Steps 3-5: idle, stuck and expired routes, orphaned dirs. */
            svc_reaper_cycle(svc);
            svc_disk_quota_cycle(svc);
            svc_egress_cycle(svc);
            next_maint = now + maint_every;
        }
        pthread_mutex_lock(&svc->loop_lock);
    }
    pthread_mutex_unlock(&svc->loop_lock);
    return NULL;
}

static int cmp_uid(const void *a, const void *b)
{
    uid_t x = *(const uid_t *)a, y = *(const uid_t *)b;
    return x < y ? -1 : x > y;
}

/* The real uids in [lo, hi] of the processes alive now (sorted, malloc'd).
 * On any failure to read /proc, every uid counts (returns SIZE_MAX and
 * *out NULL): the caller then sweeps them all. */
static size_t uids_with_processes(int64_t lo, int64_t hi, uid_t **out)
{
    *out = NULL;
    DIR *d = opendir("/proc");
    if (!d)
        return SIZE_MAX;
    size_t n = 0, cap = 0;
    uid_t *v = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue; /* gone meanwhile */
        long long uid = -1;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "Uid: %lld", &uid) == 1)
                break;
        fclose(f);
        if (uid < lo || uid > hi)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            uid_t *nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                free(v);
                closedir(d);
                return SIZE_MAX;
            }
            v = nv;
        }
        v[n++] = (uid_t)uid;
    }
    closedir(d);
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_uid);
    *out = v;
    return n;
}

static bool uid_listed(const uid_t *v, size_t n, uid_t uid)
{
    if (n == SIZE_MAX)
        return true; /* unknown: sweep */
    return v && bsearch(&uid, v, n, sizeof(*v), cmp_uid) != NULL;
}

/* A memory registry is one process's: replicas sharing the database could
 * never find each other (forwarding would fail, placement would see one
 * worker each). Another worker id that heartbeat into this database within
 * the TTL says this configuration cannot work: refuse it at startup. */
static int refuse_shared_memory_registry(struct sl_service *svc, struct sl_error *err)
{
    if (strcmp(svc->registry->backend, "memory") != 0)
        return 0;
    struct sl_worker_record *w = NULL;
    size_t n = 0;
    struct sl_error ignored = {0};
    if (svc->store->ops->worker_list(svc->store, &w, &n, &ignored) < 0)
        return 0; /* the store answers for itself on the first request */
    int64_t since = sl_now_us() - (int64_t)svc->cfg->heartbeat_ttl_seconds * 1000000;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (strcmp(w[i].worker_id, svc->worker_id) == 0 || w[i].heartbeat_at < since ||
            strcmp(w[i].status, "OFFLINE") == 0)
            continue;
        rc = sl_error_set(err, SL_E_CONFIG, 0,
                          "SANDBOX_REGISTRY_BACKEND=memory: worker %s heartbeats into this "
                          "database (%lld s ago); replicas that share a database need "
                          "SANDBOX_REGISTRY_BACKEND=redis",
                          w[i].worker_id, (long long)((sl_now_us() - w[i].heartbeat_at) / 1000000));
    }
    free(w);
    return rc;
}

int sl_service_start(struct sl_service *svc, struct sl_error *err)
{
    struct sl_error ignored = {0};
    if (refuse_shared_memory_registry(svc, err) < 0)
        return -1;
    /* Executions recorded RUNNING by a previous incarnation of this worker can
     * never finish: their processes died with it. */
    int lost = svc->store->ops->exec_mark_worker_running(svc->store, svc->worker_id, "WORKER_LOST",
                                                         "WORKER_RESTARTED", sl_now_us(), &ignored);
    if (lost > 0)
        sl_warn("marked %d executions of a previous run WORKER_LOST", lost);
    /* Their processes must not outlive that run either. Warm sessions and
     * PID namespaces end with the old daemon by themselves; at basic a
     * command's children can survive its launcher. Each sandbox's uid is
     * its own, so killing by uid reaches exactly them. */
    int64_t *uids = NULL;
    int nuids = svc->store->ops->route_uids_of_worker(svc->store, svc->worker_id, &uids, &ignored);
    /* Only uids that still have a process: a worker with 10,000 suspended
     * sandboxes must not fork 10,000 killers at every start. */
    _cleanup_free_ uid_t *busy = NULL;
    size_t nbusy = uids_with_processes(svc->cfg->uid_start, svc->cfg->uid_end, &busy);
    for (int i = 0; i < nuids; i++) {
        struct sl_error kill_err = {0};
        if (uids[i] > 0 && uid_listed(busy, nbusy, (uid_t)uids[i]) &&
            sl_rt_kill_sandbox(svc->runtime, (uid_t)uids[i], &kill_err) < 0)
            sl_warn("cannot stop processes of sandbox uid %lld: %s", (long long)uids[i],
                    sl_error_text(&kill_err));
    }
    free(uids);
    if (heartbeat(svc, NULL, err) < 0)
        return -1;
    if (pthread_create(&svc->loop_thread, NULL, service_loop, svc) != 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot start the heartbeat thread");
    svc->loop_started = true;
    if (svc_e2b_start(svc, err) < 0)
        return -1;
    return svc_warm_start(svc, err);
}

void sl_service_close(struct sl_service *svc)
{
    if (!svc)
        return;
    if (svc->loop_started) {
        pthread_mutex_lock(&svc->loop_lock);
        svc->stopping = true;
        pthread_cond_broadcast(&svc->loop_cond);
        pthread_mutex_unlock(&svc->loop_lock);
        pthread_join(svc->loop_thread, NULL);
        svc_e2b_join(svc);
        svc_warm_stop(svc);
        struct sl_error err = {0};
        if (heartbeat(svc, "OFFLINE", &err) < 0)
            sl_warn("final heartbeat failed: %s", sl_error_text(&err));
        svc->registry->ops->unregister(svc->registry, svc->worker_id, &err);
    }
    /* Running commands end CANCELLED and are recorded while the store is
     * still open. */
    svc_execs_close(svc);
    if (svc_finish_retry_pending(svc) > 0)
        svc_finish_retry_run(svc); /* one last try while the store is open */
    svc_finish_retry_free(svc);
    if (svc->runtime)
        sl_rt_close(svc->runtime);
    if (svc->registry)
        svc->registry->ops->close(svc->registry);
    if (svc->blobstore)
        svc->blobstore->ops->close(svc->blobstore);
    if (svc->store)
        svc->store->ops->close(svc->store);
    for (size_t i = 0; i < svc->live_n; i++) {
        free(svc->live[i].sandbox_id);
        json_decref(svc->live[i].templates);
        if (svc->live[i].egress) {
            svc_egress_free(svc->live[i].egress);
            free(svc->live[i].egress);
        }
    }
    free(svc->live);
    svc_owner_cache_free(svc->owners);
    sl_key_cache_free(svc->keys);
    json_decref(svc->capabilities);
    pthread_mutex_destroy(&svc->live_lock);
    pthread_mutex_destroy(&svc->quota_lock);
    pthread_mutex_destroy(&svc->limits_lock);
    pthread_mutex_destroy(&svc->loop_lock);
    pthread_mutex_destroy(&svc->finish_lock);
    pthread_cond_destroy(&svc->loop_cond);
    free(svc);
}

int svc_worker_lookup(struct sl_service *svc, const char *worker_id, struct sl_worker_entry *out,
                      struct sl_error *err)
{
    if (!worker_id)
        return 0;
    /* This process is alive by definition: its own entry, without asking. */
    if (strcmp(worker_id, svc->worker_id) == 0) {
        pthread_mutex_lock(&svc->loop_lock);
        *out = svc->self_entry;
        pthread_mutex_unlock(&svc->loop_lock);
        return out->worker_id[0] ? 1 : 0;
    }
    int live = svc->registry->ops->get(svc->registry, worker_id, out, err);
    if (live != 0)
        return live;
    /* Absent from the registry. A Redis that restarted has lost every
     * entry until each worker's next heartbeat: a worker whose SQL row
     * heartbeat within the TTL is taken as live meanwhile, or a restart of
     * Redis would make every peer look gone (and a resolve reassign its
     * sandboxes). A dead worker's row ages out with its key. */
    struct sl_worker_record *rows = NULL;
    size_t n = 0;
    struct sl_error ignored = {0};
    if (svc->store->ops->worker_list(svc->store, &rows, &n, &ignored) < 0)
        return 0;
    int64_t since = sl_now_us() - (int64_t)svc->cfg->heartbeat_ttl_seconds * 1000000;
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        const struct sl_worker_record *w = &rows[i];
        if (strcmp(w->worker_id, worker_id) != 0 || w->heartbeat_at < since ||
            strcmp(w->status, "OFFLINE") == 0)
            continue;
        memset(out, 0, sizeof(*out));
        snprintf(out->worker_id, sizeof(out->worker_id), "%s", w->worker_id);
        snprintf(out->worker_epoch, sizeof(out->worker_epoch), "%s", w->worker_epoch);
        snprintf(out->endpoint, sizeof(out->endpoint), "%s", w->endpoint);
        snprintf(out->status, sizeof(out->status), "%s", w->status);
        snprintf(out->profile_hash, sizeof(out->profile_hash), "%s", w->profile_hash);
        out->capacity = w->capacity;
        out->running_sessions = w->running_sessions;
        out->observed_at = w->heartbeat_at / 1000;
        found = 1;
    }
    free(rows);
    return found;
}

json_t *sl_svc_internal_health(struct sl_service *svc)
{
    struct sl_disk_status disk;
    svc_disk_status(svc, &disk);
    return json_pack("{s:s,s:s,s:s,s:I,s:i,s:I,s:o}", "status", disk.available ? "UP" : "DRAINING",
                     "worker_id", svc->worker_id, "worker_epoch", svc->worker_epoch, "capacity",
                     (json_int_t)svc->cfg->worker_capacity, "running_sessions", svc_live_count(svc),
                     "running_execs", (json_int_t)atomic_load(&svc->running_execs), "disk",
                     svc_disk_json(&disk));
}

const char *sl_svc_worker_id(const struct sl_service *svc)
{
    return svc->worker_id;
}

void sl_svc_route_touch(struct sl_service *svc, const char *sandbox_id, int64_t generation)
{
    svc_route_touch(svc, sandbox_id, generation);
}

json_t *sl_svc_healthz(struct sl_service *svc)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_disk_status disk;
    svc_disk_status(svc, &disk);
    int64_t last = atomic_load(&svc->last_heartbeat_mono_us);
    bool fresh = last && sl_mono_us() - last < (int64_t)cfg->heartbeat_ttl_seconds * 1000000;
    json_t *reclamation =
        json_pack("{s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I}", "maintenance_interval_seconds",
                  cfg->maintenance_interval_seconds, "heartbeat_interval_seconds",
                  cfg->heartbeat_interval_seconds, "heartbeat_ttl_seconds",
                  (json_int_t)cfg->heartbeat_ttl_seconds, "idle_ttl_seconds",
                  (json_int_t)cfg->idle_ttl_seconds, "orphan_running_grace_seconds",
                  (json_int_t)cfg->orphan_running_grace_seconds, "orphan_release_grace_seconds",
                  (json_int_t)cfg->orphan_release_grace_seconds, "suspended_retention_seconds",
                  (json_int_t)cfg->suspended_retention_seconds, "orphan_dormant_dir_ttl_seconds",
                  (json_int_t)cfg->orphan_dormant_dir_ttl_seconds);
    json_t *reaper = svc_reaper_status(svc);
    /* Ours: the network mode, those the host can provide (probed at
     * start), and the private mode's subnet and connected sandboxes. */
    json_t *modes = json_array();
    json_array_append_new(modes, json_string("host"));
    if (svc->net_modes.isolated)
        json_array_append_new(modes, json_string("isolated"));
    if (svc->net_modes.private_mode)
        json_array_append_new(modes, json_string("private"));
    json_t *network = json_pack(
        "{s:s,s:o,s:o,s:I}", "mode", cfg->network_mode, "modes_available", modes,
        "private_network", svc->privnet ? json_string(sl_privnet_cidr(svc->privnet)) : json_null(),
        "connected_sandboxes", (json_int_t)(svc->privnet ? sl_privnet_connected(svc->privnet) : 0));
    json_t *worker =
        json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:O,s:s,s:s,s:o,s:o}", "id", svc->worker_id, "epoch",
                  svc->worker_epoch, "endpoint", svc->endpoint, "storage_mode",
                  cfg->shared_root ? "shared" : "local", "running_sessions", svc_live_count(svc),
                  "running_execs", atomic_load(&svc->running_execs), "capabilities",
                  svc->capabilities, "profile_id", cfg->profile_id, "profile_hash",
                  svc->profile_hash, "orphan_reaper", reaper, "reclamation", reclamation);
    json_object_set_new(worker, "network", network);
    /* /healthz needs no token: a file's name, never where it lives (the
     * state layout is the host's business, not every caller's). */
    const char *database = svc->store->database;
    const char *slash = strcmp(svc->store->backend, "sqlite") == 0 ? strrchr(database, '/') : NULL;
    json_t *db = json_pack("{s:s,s:s,s:s}", "backend", svc->store->backend, "database",
                           slash ? slash + 1 : database, "source",
                           cfg->database_url_default ? "default-sqlite" : "url");
    /* Ours, additive: whether writes land now (a lock held elsewhere, a
     * full disk or a read-only file makes them fail), and how many command
     * results wait to be written (service/finish_retry.c). */
    char why[160] = "";
    bool writable = svc->store->ops->health(svc->store, why, sizeof(why));
    size_t pending = svc_finish_retry_pending(svc);
    json_object_set_new(db, "writable", json_boolean(writable));
    json_object_set_new(db, "error", writable ? json_null() : json_string(why));
    json_object_set_new(db, "results_waiting", json_integer((json_int_t)pending));
    return json_pack("{s:s,s:s,s:{s:b},s:[s],s:o,s:s,s:o,s:o}", "status",
                     fresh && disk.available && writable && !pending ? "ok" : "degraded", "mode",
                     "agent-sandbox", "logging", "enabled", 0, "api_capabilities",
                     "redacted_validation_v1", "db", db, "env_type", cfg->env_type, "worker",
                     worker, "disk", svc_disk_json(&disk));
}

/* ---- live table ---------------------------------------------------------- */

static struct sl_live *live_find(struct sl_service *svc, const char *sandbox_id)
{
    for (size_t i = 0; i < svc->live_n; i++)
        if (strcmp(svc->live[i].sandbox_id, sandbox_id) == 0)
            return &svc->live[i];
    return NULL;
}

int svc_live_register(struct sl_service *svc, const char *sandbox_id, int64_t generation, uid_t uid)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    if (!l) {
        if (svc->live_n == svc->live_cap) {
            size_t cap = svc->live_cap ? svc->live_cap * 2 : 64;
            struct sl_live *n = realloc(svc->live, cap * sizeof(*n));
            if (!n) {
                pthread_mutex_unlock(&svc->live_lock);
                return -1;
            }
            svc->live = n;
            svc->live_cap = cap;
        }
        l = &svc->live[svc->live_n];
        l->sandbox_id = strdup(sandbox_id);
        l->templates = NULL;
        l->egress = NULL;
        l->egress_at_us = 0;
        l->denied_logged = l->refused_logged = 0;
        l->listings = 0;
        l->stored_output_bytes = -1;
        l->disk_bytes = -1;
        l->over_disk_quota = false;
        if (!l->sandbox_id) {
            pthread_mutex_unlock(&svc->live_lock);
            return -1;
        }
        svc->live_n++;
    }
    l->generation = generation;
    l->uid = uid;
    l->destroying = false;
    l->last_activity_us = sl_now_us();
    pthread_mutex_unlock(&svc->live_lock);
    return 0;
}

/* Mark destroying (new calls get SANDBOX_RELEASING); returns whether it was live. */
bool svc_live_mark_destroying(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    if (l)
        l->destroying = true;
    pthread_mutex_unlock(&svc->live_lock);
    return l != NULL;
}

void svc_live_remove(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    if (l) {
        free(l->sandbox_id);
        json_decref(l->templates);
        if (l->egress) {
            svc_egress_free(l->egress);
            free(l->egress);
        }
        *l = svc->live[--svc->live_n];
    }
    pthread_mutex_unlock(&svc->live_lock);
}

int svc_live_set_templates(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           json_t *templates)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    int rc = -1;
    if (l && !l->destroying && l->generation == generation) {
        json_decref(l->templates);
        l->templates = templates;
        templates = NULL;
        rc = 0;
    }
    pthread_mutex_unlock(&svc->live_lock);
    json_decref(templates);
    return rc;
}

bool svc_live_exists(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->live_lock);
    bool found = live_find(svc, sandbox_id) != NULL;
    pthread_mutex_unlock(&svc->live_lock);
    return found;
}

json_t *svc_live_templates(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    json_t *t = l && l->templates ? json_incref(l->templates) : NULL;
    pthread_mutex_unlock(&svc->live_lock);
    return t;
}

int svc_live_lookup(struct sl_service *svc, const char *sandbox_id, int64_t generation, uid_t *uid,
                    struct sl_error *err)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    int rc = 0;
    if (l && l->destroying)
        rc = sl_error_set(err, SL_E_RELEASING, 0,
                          "the sandbox is being released: resolve it again when that is done");
    else if (!l)
        rc = sl_error_set(err, SL_E_STALE_GENERATION, 0,
                          "the sandbox is not created on its worker: create it (POST "
                          "/api/v1/sandboxes/{id} with the generation resolve answered) first");
    else if (l->generation != generation)
        rc = sl_error_set(err, SL_E_STALE_GENERATION, 0,
                          "the sandbox runs at generation %lld on its worker, not the one "
                          "given: resolve it again and use the generation it answers",
                          (long long)l->generation);
    else if (uid)
        *uid = l->uid;
    pthread_mutex_unlock(&svc->live_lock);
    return rc;
}

int svc_live_current(struct sl_service *svc, const char *sandbox_id, int64_t *generation,
                     uid_t *uid)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    bool here = l && !l->destroying;
    if (here) {
        *generation = l->generation;
        *uid = l->uid;
    }
    pthread_mutex_unlock(&svc->live_lock);
    return here ? 0 : -1;
}

void svc_live_touch(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    if (l)
        l->last_activity_us = sl_now_us();
    pthread_mutex_unlock(&svc->live_lock);
}

int64_t svc_live_output_add(struct sl_service *svc, const char *sandbox_id, int64_t bytes)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    int64_t total = -1;
    if (l && l->stored_output_bytes >= 0) {
        l->stored_output_bytes += bytes;
        if (l->stored_output_bytes < 0)
            l->stored_output_bytes = 0;
        total = l->stored_output_bytes;
    }
    pthread_mutex_unlock(&svc->live_lock);
    return total;
}

void svc_live_output_set(struct sl_service *svc, const char *sandbox_id, int64_t total)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    if (l)
        l->stored_output_bytes = total;
    pthread_mutex_unlock(&svc->live_lock);
}

int svc_live_listing_enter(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    bool busy = l && l->listings >= SVC_MAX_LISTINGS_PER_SANDBOX;
    if (l && !busy)
        l->listings++;
    pthread_mutex_unlock(&svc->live_lock);
    if (busy)
        return sl_error_set(err, SL_E_LIST_BUSY, 0,
                            "too many directory listings of this sandbox at once (%d); retry "
                            "shortly",
                            SVC_MAX_LISTINGS_PER_SANDBOX);
    return 0;
}

void svc_live_listing_leave(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->live_lock);
    struct sl_live *l = live_find(svc, sandbox_id);
    if (l && l->listings > 0)
        l->listings--;
    pthread_mutex_unlock(&svc->live_lock);
}

int svc_live_count(struct sl_service *svc)
{
    pthread_mutex_lock(&svc->live_lock);
    int n = (int)svc->live_n;
    pthread_mutex_unlock(&svc->live_lock);
    return n;
}
