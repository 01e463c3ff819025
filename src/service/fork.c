/* Fork (ours, issue 18): N new sandboxes made from a running or suspended
 * one, on this worker. Each gets its own route (generation 1), uid and
 * directory; the source's workspace, home, cache and envs are copied into
 * it (blocks shared where the filesystem can, workspace/clone.c), and its
 * attached templates. With a backend that can checkpoint (gvisor), the
 * source's processes and memory are restored into every copy from one
 * checkpoint: a running source is checkpointed and restored in place (its
 * processes pause for the time of it), a memory-suspended one lends its
 * image. The native backend forks files only.
 *
 * Fork is all or nothing: a copy that cannot be made releases those made
 * before it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "common/util.h"
#include "runtime/cgroup.h"
#include "service/internal.h"
#include "service/tenants.h"
#include "workspace/clone.h"
#include "workspace/files.h"
#include "workspace/layout.h"

static const char *const FORK_PARTS[] = {"workspace", "home", "cache", "envs"};

static int open_part(int rootfd, const char *name)
{
    return sl_openat2(rootfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
                      RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

/* What the source's files take. */
static int64_t source_bytes(int rootfd)
{
    int64_t total = 0;
    for (size_t i = 0; i < SL_ARRAY_LEN(FORK_PARTS); i++) {
        int fd = open_part(rootfd, FORK_PARTS[i]);
        if (fd >= 0) {
            total += ws_tree_bytes(fd);
            close(fd);
        }
    }
    return total;
}

/* The source's files into the copy's (made empty by its connect). */
static int copy_files(struct sl_service *svc, int src_root, const char *copy_id, uid_t uid,
                      int64_t budget, bool *reflinked, struct sl_error *err)
{
    _cleanup_close_ int dst_root = ws_sandbox_open(svc->cfg->workspace_root, copy_id, err);
    if (dst_root < 0)
        return -1;
    for (size_t i = 0; i < SL_ARRAY_LEN(FORK_PARTS); i++) {
        _cleanup_close_ int src = open_part(src_root, FORK_PARTS[i]);
        _cleanup_close_ int dst = open_part(dst_root, FORK_PARTS[i]);
        if (src < 0)
            continue;
        if (dst < 0)
            return sl_error_errno(err, SL_E_INTERNAL, "fork %s: no %s", copy_id, FORK_PARTS[i]);
        struct ws_clone_stats st;
        if (ws_tree_clone(src, dst, uid, budget, &st, err) < 0)
            return sl_error_wrap(err, "fork %s", copy_id);
        budget -= st.bytes;
        *reflinked = *reflinked || st.reflinked;
    }
    return 0;
}

/* The processes to give the copies: a memory-suspended source's image, or
 * a checkpoint of the running one, written to `tmp` with its templates
 * (*checkpointed: the caller restores the source from it once every copy
 * has its files, so the files copied are the ones the processes saw).
 * *image is NULL when there are none to give (nothing runs, or the
 * backend cannot: files only). */
static int source_image(struct sl_service *svc, const struct sl_route *r, const char *root,
                        char *tmp, size_t tmp_size, const char **image, bool *checkpointed,
                        struct sl_error *err)
{
    *image = NULL;
    *checkpointed = false;
    if (strcmp(r->status, "SUSPENDED") == 0) {
        svc_memory_dir(svc, r->sandbox_id, tmp, tmp_size);
        if (access(tmp, F_OK) == 0)
            *image = tmp;
        return 0;
    }
    snprintf(tmp, tmp_size, "%s/fork-memory", root);
    (void)sl_tree_remove(tmp);
    struct sl_error why = {0};
    if (sl_rt_session_checkpoint(svc->runtime, (uid_t)r->sandbox_uid, root, tmp, &why) < 0) {
        (void)sl_tree_remove(tmp);
        if (why.errnum == ENOENT || why.errnum == ENOTSUP)
            return 0; /* files only */
        if (why.errnum == EBUSY)
            return sl_error_set(err, "SANDBOX_FORK_BUSY", 0,
                                "the sandbox's processes cannot be copied: %s", why.message);
        *err = why;
        return sl_error_wrap(err, "fork %s", r->sandbox_id);
    }
    *image = tmp;
    *checkpointed = true;
    return svc_image_save_templates(svc, r->sandbox_id, tmp, err);
}

/* One copy: its route here, its directory, files, templates and (with an
 * image) processes. The copy's view, or NULL with err (what was made of it
 * is the caller's to release). */
static json_t *make_copy(struct sl_service *svc, const struct sl_principal *who,
                         const char *copy_id, const char *actor, int src_root,
                         json_t *templates, const char *image, int64_t budget, bool *reflinked,
                         bool *inserted, struct sl_error *err)
{
    *inserted = false;
    struct sl_route existing = {0};
    int found = svc->store->ops->route_get(svc->store, copy_id, &existing, err);
    sl_route_clear(&existing);
    if (found < 0)
        return NULL;
    if (found) {
        sl_error_set(err, "SANDBOX_FORK_TARGET_EXISTS", 0,
                     "a sandbox named %s exists: a fork makes new sandboxes only", copy_id);
        return NULL;
    }
    bool held = false;
    int64_t value = -1;
    if (sl_svc_quota_enter(svc, who, SL_LIMIT_SANDBOXES, copy_id, &held, &value, err) < 0)
        return NULL;
    int rc = svc_route_insert_here(svc, copy_id, copy_id, actor, err);
    sl_svc_quota_leave(svc, held);
    if (rc < 0)
        return NULL;
    struct sl_route r = {0};
    if (svc->store->ops->route_get(svc->store, copy_id, &r, err) != 1)
        return NULL;
    /* Ours only if it is the fresh route this call made: a concurrent
     * create of the same name keeps its sandbox. */
    if (r.generation != 1 || strcmp(r.status, "ASSIGNED") != 0 || !r.worker_id ||
        strcmp(r.worker_id, svc->worker_id) != 0) {
        sl_route_clear(&r);
        sl_error_set(err, "SANDBOX_FORK_TARGET_EXISTS", 0,
                     "a sandbox named %s was made meanwhile: a fork makes new sandboxes only",
                     copy_id);
        return NULL;
    }
    *inserted = true;
    json_t *view = NULL;
    json_t *conn = sl_svc_connect(svc, copy_id, r.generation, err);
    if (!conn)
        goto out;
    json_decref(conn);
    if (copy_files(svc, src_root, copy_id, (uid_t)r.sandbox_uid, budget, reflinked, err) < 0)
        goto out;
    if (templates &&
        svc_live_set_templates(svc, copy_id, r.generation, json_deep_copy(templates)) < 0) {
        sl_error_set(err, SL_E_INTERNAL, 0, "fork %s: cannot attach its templates", copy_id);
        goto out;
    }
    bool memory = false;
    if (image) {
        if (svc_session_restore(svc, copy_id, (uid_t)r.sandbox_uid, image, err) < 0) {
            sl_error_wrap(err, "fork %s: its processes", copy_id);
            goto out;
        }
        memory = true;
    }
    view = json_pack("{s:s,s:I,s:I,s:s,s:b}", "sandbox_id", copy_id, "generation",
                     (json_int_t)r.generation, "sandbox_uid", (json_int_t)r.sandbox_uid,
                     "status", "READY", "memory", memory);
out:
    sl_route_clear(&r);
    return view;
}

json_t *sl_svc_fork(struct sl_service *svc, const struct sl_principal *who,
                    const char *sandbox_id, const char *const *ids, size_t count,
                    const char *actor, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found <= 0) {
        if (found == 0)
            sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "SANDBOX_NOT_FOUND");
        return NULL;
    }
    json_t *answer = NULL, *forks = NULL, *templates = NULL;
    bool checkpointed = false;
    _cleanup_close_ int rootfd = -1, lockfd = -1;
    char root[PATH_MAX], tmp[PATH_MAX + 32];
    const char *image = NULL;
    snprintf(root, sizeof(root), "%s/%s", cfg->workspace_root, sandbox_id);
    tmp[0] = '\0';
    bool ready = strcmp(r.status, "READY") == 0 && !r.active_exec_id;
    if (strcmp(r.status, "RELEASED") == 0 || strcmp(r.status, "RELEASING") == 0) {
        sl_error_set(err, SL_E_STALE_ROUTE, 0, "STALE_SANDBOX_ROUTE");
        goto out;
    }
    if (!ready && strcmp(r.status, "SUSPENDED") != 0) {
        sl_error_set(err, "SANDBOX_FORK_BUSY", 0,
                     "the sandbox is %s: fork a READY (idle) or SUSPENDED sandbox", r.status);
        goto out;
    }
    if (svc_require_local_owner(svc, &r, err) < 0)
        goto out; /* a live peer's: forwarded there */
    if (svc_execs_running(svc, sandbox_id) > 0) {
        sl_error_set(err, "SANDBOX_FORK_BUSY", 0,
                     "a command of the sandbox runs: fork it when the command has ended");
        goto out;
    }
    if ((rootfd = ws_sandbox_open(cfg->workspace_root, sandbox_id, err)) < 0)
        goto out;
    /* The source's files at rest while they are copied. */
    if ((lockfd = ws_lock_global(rootfd, true, false, "SANDBOX_FORK_BUSY", err)) < 0)
        goto out;
    /* Room for every copy in full (a reflink may take none of it), and for
     * a checkpoint of the memory the source holds. */
    int64_t bytes = source_bytes(rootfd);
    int64_t budget = svc->quota.bytes > 0 ? svc->quota.bytes : INT64_MAX;
    struct sl_cgroup_usage use;
    sl_rt_sandbox_usage(svc->runtime, (uid_t)r.sandbox_uid, &use);
    int64_t need = bytes * (int64_t)count + (use.memory_bytes > 0 ? use.memory_bytes : 0);
    struct sl_disk_status disk;
    svc_disk_status(svc, &disk);
    if (!disk.available) {
        sl_error_set(err, SL_E_DISK_PRESSURE, 0, "SANDBOX_WORKER_DISK_PRESSURE");
        goto out;
    }
    if (disk.free_bytes - cfg->min_free_bytes < need) {
        sl_error_set(err, SL_E_DISK_FULL, ENOSPC,
                     "%zu copies of %lld bytes (and the memory checkpoint) do not fit: %lld "
                     "bytes are free above the worker's floor",
                     count, (long long)bytes, (long long)(disk.free_bytes - cfg->min_free_bytes));
        goto out;
    }
    if (source_image(svc, &r, root, tmp, sizeof(tmp), &image, &checkpointed, err) < 0)
        goto out;
    /* The templates the copies get: the checkpoint's when there is one
     * (a suspended source has no live entry), else the live ones. */
    templates = image ? svc_image_templates(image) : svc_live_templates(svc, sandbox_id);
    forks = json_array();
    bool reflinked = false;
    for (size_t i = 0; i < count; i++) {
        bool inserted = false;
        json_t *copy = make_copy(svc, who, ids[i], actor, rootfd, templates, image, budget,
                                 &reflinked, &inserted, err);
        if (!copy) {
            /* All or nothing: what this call made goes, never a sandbox
             * that was there before it. */
            struct sl_error ignored = {0};
            if (inserted)
                json_decref(sl_svc_release(svc, ids[i], actor, &ignored));
            size_t made;
            json_t *v;
            json_array_foreach(forks, made, v)
            {
                sl_error_clear(&ignored);
                json_decref(sl_svc_release(svc, json_string_value(json_object_get(v, "sandbox_id")),
                                           actor, &ignored));
            }
            goto out;
        }
        json_array_append_new(forks, copy);
    }
    answer = json_pack("{s:s,s:O,s:b,s:s}", "sandbox_id", sandbox_id, "forks", forks, "memory",
                       image != NULL, "files", reflinked ? "reflink" : "copy");
out:
    if (checkpointed) {
        /* The source goes on from its checkpoint, whatever became of the
         * copies; then the image is used up. */
        struct sl_error again = {0};
        bool back = svc_session_restore(svc, sandbox_id, (uid_t)r.sandbox_uid, tmp, &again) == 0;
        if (!back)
            sl_warn("fork %s: the source's processes could not be restored, its files are: %s",
                    sandbox_id, sl_error_text(&again));
        if (answer)
            json_object_set_new(answer, "source_memory", json_boolean(back));
        (void)sl_tree_remove(tmp);
    }
    json_decref(forks);
    json_decref(templates);
    sl_route_clear(&r);
    return answer;
}
