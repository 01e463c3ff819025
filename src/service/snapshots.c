/* Suspend snapshots (API.md §7, FLEET.md §7.2, §8.3): a suspended sandbox's
 * workspace, home and envs archived to the object store, so it can be
 * resumed when its local directory is gone (evicted under disk pressure,
 * or the worker lost its disk).
 *
 * With a memory suspend, its checkpoint is a part too ("memory"), so the
 * processes resume on another worker as well.
 *
 * Layout: checkpoints/<id>/dormant/manifest.json names the current parts,
 * checkpoints/<id>/dormant/<nonce>/<part>.tar.gz. The manifest is written
 * last (the snapshot appears atomically) and deleted first. Parts use the
 * template archiver: deterministic, no link followed, limits enforced. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobstore/blobstore.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "common/util.h"
#include "service/internal.h"
#include "templates/archive.h"
#include "templates/catalog.h"
#include "workspace/layout.h"

/* memory: a memory suspend's checkpoint (lifecycle.c), when there is one:
 * root's, never given to the sandbox. */
static const char *const PARTS[] = {"workspace", "home", "envs", "memory"};
#define NPARTS 4
#define MANIFEST_MAX_BYTES (1u << 20)

static void manifest_key(const char *id, char *out, size_t size)
{
    snprintf(out, size, "checkpoints/%s/dormant/manifest.json", id);
}

static void part_key(const char *id, const char *nonce, const char *part, char *out, size_t size)
{
    snprintf(out, size, "checkpoints/%s/dormant/%s/%s.tar.gz", id, nonce, part);
}

/* The current manifest, NULL when absent or malformed (§8.3: treated as
 * absent); *failed on a store error. */
static json_t *manifest_get(struct sl_service *svc, const char *id, bool *failed,
                            struct sl_error *err)
{
    char key[300];
    manifest_key(id, key, sizeof(key));
    char *buf = NULL;
    size_t len = 0;
    *failed = false;
    int found = svc->blobstore->ops->get_buffer(svc->blobstore, key, MANIFEST_MAX_BYTES, &buf,
                                                &len, err);
    if (found < 0) {
        *failed = true;
        return NULL;
    }
    json_t *m = found ? json_loadb(buf, len, 0, NULL) : NULL;
    free(buf);
    const char *sid = json_string_value(json_object_get(m, "sandbox_id"));
    if (!json_is_object(m) || !sid || strcmp(sid, id) != 0 ||
        !json_is_string(json_object_get(m, "nonce")) ||
        !json_is_object(json_object_get(m, "parts"))) {
        json_decref(m);
        return NULL;
    }
    return m;
}

static void delete_parts(struct sl_service *svc, const char *id, const json_t *manifest)
{
    const char *nonce = json_string_value(json_object_get(manifest, "nonce"));
    const char *part;
    json_t *v;
    json_object_foreach((json_t *)json_object_get(manifest, "parts"), part, v)
    {
        char key[400];
        part_key(id, nonce, part, key, sizeof(key));
        struct sl_error ignored = {0};
        (void)svc->blobstore->ops->delete(svc->blobstore, key, &ignored);
    }
}

bool svc_snapshot_wanted(const struct sl_service *svc)
{
    return svc->blobstore && !svc->cfg->shared_root &&
           strcmp(svc->cfg->suspend_snapshot, "never") != 0;
}

int svc_snapshot_write(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                       struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_tpl_limits lim = {
        .max_entries = cfg->template_snapshot_max_entries,
        .max_depth = cfg->template_snapshot_max_depth,
        .max_source_bytes = cfg->template_max_extract_bytes,
        .max_archive_bytes = cfg->template_max_archive_bytes,
        .timeout_seconds = cfg->template_snapshot_timeout_seconds,
    };
    char nonce[33];
    if (sl_random_hex(nonce, 16) < 0 || sl_tpl_root_prepare(cfg->template_root, err) < 0)
        return sl_error_set(err, "SANDBOX_SNAPSHOT_FAILED", 0, "SANDBOX_SNAPSHOT_FAILED");
    _cleanup_close_ int rootfd = ws_sandbox_open(cfg->workspace_root, sandbox_id, err);
    if (rootfd < 0)
        return -1;
    bool failed = false;
    json_t *previous = manifest_get(svc, sandbox_id, &failed, err);
    if (failed)
        return -1;
    json_t *parts = json_object();
    json_t *manifest = json_pack("{s:f,s:I,s:s,s:o,s:s,s:i}", "created_at",
                                 (double)sl_now_us() / 1e6, "generation", (json_int_t)generation,
                                 "nonce", nonce, "parts", parts, "sandbox_id", sandbox_id,
                                 "version", 1);
    int rc = 0;
    for (size_t i = 0; i < NPARTS && rc == 0; i++) {
        int dirfd = sl_openat2(rootfd, PARTS[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
                               RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        if (dirfd < 0)
            continue; /* only the directories that exist */
        char staging[PATH_MAX], key[400];
        snprintf(staging, sizeof(staging), "%s/.staging/snap-%s-%s.tar.gz", cfg->template_root,
                 nonce, PARTS[i]);
        struct sl_tpl_archive_info info;
        rc = sl_tpl_archive(dirfd, staging, &lim, &info, err);
        close(dirfd);
        if (rc == 0) {
            part_key(sandbox_id, nonce, PARTS[i], key, sizeof(key));
            rc = svc->blobstore->ops->put_file(svc->blobstore, key, staging, info.digest + 7, err);
            json_object_set_new(parts, PARTS[i],
                                json_pack("{s:s,s:I}", "digest", info.digest, "size_bytes",
                                          (json_int_t)info.size_bytes));
        }
        unlink(staging);
    }
    if (rc == 0) {
        char *text = json_dumps(manifest, JSON_SORT_KEYS);
        char key[300];
        manifest_key(sandbox_id, key, sizeof(key));
        rc = text ? svc->blobstore->ops->put_buffer(svc->blobstore, key, text, strlen(text), err)
                  : sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        free(text);
    }
    if (rc < 0) {
        sl_warn("snapshot of %s failed: %s", sandbox_id, sl_error_text(err));
        delete_parts(svc, sandbox_id, manifest); /* this attempt's parts */
        json_decref(manifest);
        json_decref(previous);
        return sl_error_set(err, "SANDBOX_SNAPSHOT_FAILED", 0, "SANDBOX_SNAPSHOT_FAILED");
    }
    if (previous)
        delete_parts(svc, sandbox_id, previous);
    json_decref(previous);
    json_decref(manifest);
    return 0;
}

int svc_snapshot_exists(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    if (!svc->blobstore)
        return 0;
    bool failed = false;
    json_t *m = manifest_get(svc, sandbox_id, &failed, err);
    json_decref(m);
    return failed ? -1 : m != NULL;
}

void svc_snapshot_delete(struct sl_service *svc, const char *sandbox_id)
{
    if (!svc->blobstore)
        return;
    struct sl_error err = {0};
    bool failed = false;
    json_t *m = manifest_get(svc, sandbox_id, &failed, &err);
    if (!m)
        return;
    char key[300];
    manifest_key(sandbox_id, key, sizeof(key));
    if (svc->blobstore->ops->delete(svc->blobstore, key, &err) == 0)
        delete_parts(svc, sandbox_id, m);
    else
        sl_warn("snapshot of %s: cannot delete the manifest: %s", sandbox_id, sl_error_text(&err));
    json_decref(m);
}

static _Thread_local uid_t chown_uid;

static int chown_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return lchown(path, chown_uid, chown_uid) < 0 ? -1 : 0;
}

int svc_snapshot_restore(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                         struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    bool failed = false;
    json_t *m = svc->blobstore ? manifest_get(svc, sandbox_id, &failed, err) : NULL;
    if (!m) {
        if (!failed)
            sl_error_set(err, "SANDBOX_WORKSPACE_LOST", 0, "SANDBOX_WORKSPACE_LOST");
        return -1;
    }
    const char *nonce = json_string_value(json_object_get(m, "nonce"));
    json_t *parts = json_object_get(m, "parts");
    int rc = sl_tpl_root_prepare(cfg->template_root, err);
    struct sl_disk_status disk;
    svc_disk_status(svc, &disk);
    if (rc == 0)
        rc = ws_sandbox_create(cfg->workspace_root, sandbox_id, uid, disk.available, &svc->quota,
                               err);
    const char *part;
    json_t *v;
    json_object_foreach(parts, part, v)
    {
        if (rc < 0)
            break;
        bool known = false;
        for (size_t i = 0; i < NPARTS; i++)
            known = known || strcmp(part, PARTS[i]) == 0;
        const char *digest = json_string_value(json_object_get(v, "digest"));
        if (!known || !digest || strlen(digest) != 71) {
            rc = sl_error_set(err, "SANDBOX_SNAPSHOT_FAILED", 0, "SANDBOX_SNAPSHOT_FAILED");
            break;
        }
        char key[400], staging[PATH_MAX], dest[PATH_MAX];
        part_key(sandbox_id, nonce, part, key, sizeof(key));
        snprintf(staging, sizeof(staging), "%s/.staging/restore-%s-%s.tar.gz", cfg->template_root,
                 nonce, part);
        snprintf(dest, sizeof(dest), "%s/%s/%s", cfg->workspace_root, sandbox_id, part);
        int got = svc->blobstore->ops->get_file(svc->blobstore, key, staging, digest + 7,
                                                (uint64_t)cfg->template_max_archive_bytes, err);
        if (got <= 0) {
            if (got == 0)
                rc = sl_error_set(err, "SANDBOX_SNAPSHOT_FAILED", 0, "SANDBOX_SNAPSHOT_FAILED");
            else if (sl_error_is(err, SL_E_OBJECT_DIGEST_MISMATCH))
                rc = sl_error_recode(err, "SANDBOX_SNAPSHOT_FAILED", "SANDBOX_SNAPSHOT_FAILED");
            else
                rc = -1;
            break;
        }
        /* The fresh directory made above is empty: the part replaces it,
         * then belongs to the sandbox again. */
        (void)rmdir(dest);
        rc = sl_tpl_extract(staging, part, digest, dest, cfg->template_max_extract_bytes, err);
        unlink(staging);
        chown_uid = uid;
        if (rc == 0 && strcmp(part, "memory") == 0)
            rc = chmod(dest, 0700) < 0 ? sl_error_errno(err, SL_E_INTERNAL, "chmod %s", dest) : 0;
        else if (rc == 0 &&
                 (nftw(dest, chown_entry, 16, FTW_PHYS) != 0 || chmod(dest, 0700) < 0))
            rc = sl_error_errno(err, SL_E_INTERNAL, "cannot give %s back to its sandbox", dest);
        if (rc < 0 && !err->code)
            sl_error_set(err, "SANDBOX_SNAPSHOT_FAILED", 0, "SANDBOX_SNAPSHOT_FAILED");
    }
    json_decref(m);
    if (rc < 0) {
        struct sl_error ignored = {0};
        (void)ws_sandbox_trash(cfg->workspace_root, sandbox_id, &ignored);
        return -1;
    }
    return 0;
}
