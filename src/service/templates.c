/* Environment templates (API.md §3.13, §6): publish a tree of a sandbox as
 * a deterministic archive, attach revisions to sandboxes (read-only at
 * /envs/<name> from the next command on), list and unpublish.
 *
 * The catalog and the cache live under SANDBOX_TEMPLATE_ROOT
 * (templates/catalog.h). This build keeps them on the worker; with an
 * object store they are shared (templates_shared). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "common/util.h"
#include "blobstore/blobstore.h"
#include "service/internal.h"
#include "templates/archive.h"
#include "templates/catalog.h"
#include "workspace/files.h"

#define MAX_ATTACH 16
#define CATALOG_KEY "templates/catalog.json"
#define CATALOG_MAX_BYTES (16u << 20)

/* ---- the catalog, local or shared through the object store (§6.6) ---------- */

static void archive_key(const char *name, const char *digest, char *out, size_t size)
{
    snprintf(out, size, "templates/%s/sha256-%s.tar.gz", name, digest + 7);
}

/* The stored name of `owner`'s template `name` (the plain name itself for
 * the operator's, which are public). */
static int stored_name(const char *owner, const char *name, char out[SL_TPL_STORED_NAME_MAX + 1],
                       struct sl_error *err)
{
    if (sl_tpl_name_check(name, err) < 0)
        return -1;
    int n = owner ? snprintf(out, SL_TPL_STORED_NAME_MAX + 1, "%s%c%s", owner, SL_TPL_OWNER_SEP,
                             name)
                  : snprintf(out, SL_TPL_STORED_NAME_MAX + 1, "%s", name);
    if (n < 0 || n > SL_TPL_STORED_NAME_MAX)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "invalid template name");
    return 0;
}

static bool is_private(const char *stored)
{
    return strchr(stored, SL_TPL_OWNER_SEP) != NULL;
}

/* Whether `owner` may see the stored template: a public one always, a
 * private one only its tenant's (the operator sees every one). */
static bool visible_to(const char *owner, const char *stored)
{
    if (!owner || !is_private(stored))
        return true;
    size_t n = strlen(owner);
    return strncmp(stored, owner, n) == 0 && stored[n] == SL_TPL_OWNER_SEP;
}

/* A record as `owner` is shown it: its "visibility" (and for the operator
 * the tenant a private one belongs to); a tenant sees its plain names and
 * no host path. A new object. */
static json_t *record_view(const json_t *rec, const char *owner)
{
    json_t *view = json_deep_copy(rec);
    const char *stored = json_string_value(json_object_get(rec, "name"));
    if (!view || !stored)
        return view;
    bool priv = is_private(stored);
    json_object_set_new(view, "visibility", json_string(priv ? "private" : "public"));
    if (owner) {
        json_object_set_new(view, "name", json_string(sl_tpl_plain_name(stored)));
        json_object_del(view, "local_path");
    } else if (priv) {
        json_object_set_new(view, "tenant_id", json_stringn(stored, (size_t)(strchr(stored,
                                                            SL_TPL_OWNER_SEP) - stored)));
    }
    return view;
}

/* The shared catalog object from the store; {} when none was published. */
static json_t *store_catalog(struct sl_service *svc, struct sl_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    int found = svc->blobstore->ops->get_buffer(svc->blobstore, CATALOG_KEY, CATALOG_MAX_BYTES,
                                                &buf, &len, err);
    if (found < 0)
        return NULL;
    json_t *c = found ? json_loadb(buf, len, 0, NULL) : NULL;
    free(buf);
    if (!json_is_object(c)) {
        json_decref(c);
        c = json_object(); /* missing or not an object: nothing published */
    }
    return c;
}

struct shared_edit {
    struct sl_service *svc;
    int (*edit)(json_t *catalog, void *arg, struct sl_error *err);
    void *arg;
};

/* Under the local lock: start from the store's copy, edit, upload, then the
 * local copy is written (last writer wins across replicas, as FLEET.md
 * says). A read (no edit) uploads nothing: writing back the copy it just
 * read would undo another replica's publish that landed in between. */
static int shared_edit(json_t *catalog, void *arg, struct sl_error *err)
{
    struct shared_edit *e = arg;
    if (e->svc->blobstore) {
        json_t *shared = store_catalog(e->svc, err);
        if (!shared)
            return -1;
        json_object_clear(catalog);
        json_object_update(catalog, shared);
        json_decref(shared);
    }
    int rc = e->edit ? e->edit(catalog, e->arg, err) : 0;
    if (rc != 0 || !e->edit || !e->svc->blobstore)
        return rc;
    char *text = json_dumps(catalog, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    int up = e->svc->blobstore->ops->put_buffer(e->svc->blobstore, CATALOG_KEY, text,
                                                strlen(text), err);
    free(text);
    return up < 0 ? -1 : 0;
}

static int catalog_update(struct sl_service *svc,
                          int (*edit)(json_t *catalog, void *arg, struct sl_error *err),
                          void *arg, struct sl_error *err)
{
    struct shared_edit e = {.svc = svc, .edit = edit, .arg = arg};
    return sl_tpl_catalog_update(svc->cfg->template_root, shared_edit, &e, err);
}

/* Every read of a shared catalog refreshes the local copy. */
static json_t *catalog_load(struct sl_service *svc, struct sl_error *err)
{
    if (sl_tpl_root_prepare(svc->cfg->template_root, err) < 0)
        return NULL;
    if (!svc->blobstore)
        return sl_tpl_catalog_load(svc->cfg->template_root, err);
    struct shared_edit e = {.svc = svc, .edit = NULL};
    if (sl_tpl_catalog_update(svc->cfg->template_root, shared_edit, &e, err) < 0)
        return NULL;
    return sl_tpl_catalog_load(svc->cfg->template_root, err);
}

/* A revision's tree, fetching its archive from the object store when this
 * worker has neither the tree nor the archive. */
static int materialize(struct sl_service *svc, const char *name, const char *digest,
                       char tree[PATH_MAX], struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    char kept[PATH_MAX], kept_dir[PATH_MAX];
    snprintf(tree, PATH_MAX, "%s/%s/sha256-%s", cfg->template_root, name, digest + 7);
    struct stat st;
    if (svc->blobstore && stat(tree, &st) < 0 &&
        sl_tpl_archive_path(cfg->template_root, name, digest, kept, sizeof(kept)) == 0 &&
        access(kept, R_OK) < 0) {
        snprintf(kept_dir, sizeof(kept_dir), "%s/.archives/%s", cfg->template_root, name);
        if (mkdir(kept_dir, 0700) < 0 && errno != EEXIST)
            return sl_error_errno(err, SL_E_INTERNAL, "cannot prepare %s", kept_dir);
        char key[256];
        archive_key(name, digest, key, sizeof(key));
        int got = svc->blobstore->ops->get_file(svc->blobstore, key, kept, digest + 7,
                                                (uint64_t)cfg->template_max_archive_bytes, err);
        if (got < 0) {
            if (sl_error_is(err, SL_E_OBJECT_DIGEST_MISMATCH))
                err->code = SL_E_INVALID_ARGUMENT;
            return -1;
        }
        if (got == 0)
            return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                                "template %s@%s is not in the object store", name, digest);
    }
    return sl_tpl_materialize(cfg->template_root, name, digest, NULL,
                              cfg->template_max_extract_bytes, tree, err);
}

static struct sl_tpl_limits limits_of(const struct sl_config *cfg)
{
    return (struct sl_tpl_limits){
        .max_entries = cfg->template_snapshot_max_entries,
        .max_depth = cfg->template_snapshot_max_depth,
        .max_source_bytes = cfg->template_max_extract_bytes,
        .max_archive_bytes = cfg->template_max_archive_bytes,
        .timeout_seconds = cfg->template_snapshot_timeout_seconds,
    };
}

/* /envs[/...] or /workspace[/...] -> the path below the sandbox root. */
static int source_relpath(const char *source, char *out, size_t size, struct sl_error *err)
{
    if (strstr(source, "/../") || strcmp(source, "/..") == 0 ||
        (strlen(source) >= 3 && strcmp(source + strlen(source) - 3, "/..") == 0) ||
        strstr(source, "/./") || (strlen(source) >= 2 && strcmp(source + strlen(source) - 2, "/.") == 0))
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                            "template source path may not contain .. or NUL");
    const char *roots[] = {"/envs", "/workspace"};
    for (size_t i = 0; i < SL_ARRAY_LEN(roots); i++) {
        size_t n = strlen(roots[i]);
        if (strncmp(source, roots[i], n) == 0 && (source[n] == '\0' || source[n] == '/')) {
            const char *rest = source + n;
            while (*rest == '/')
                rest++;
            int w = snprintf(out, size, "%s%s%s", roots[i] + 1, *rest ? "/" : "", rest);
            /* trailing slashes are harmless for openat2 */
            return w < 0 || (size_t)w >= size
                       ? sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "template source path too long")
                       : 0;
        }
    }
    return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                        "template source path must live under /envs, /workspace");
}

struct publish_edit {
    const char *name;
    json_t *record;
};

static int publish_edit(json_t *catalog, void *arg, struct sl_error *err)
{
    struct publish_edit *e = arg;
    (void)err;
    json_object_set(catalog, e->name, e->record);
    return 0;
}

json_t *sl_svc_template_publish(struct sl_service *svc, const char *sandbox_id,
                                int64_t generation, const char *owner, const char *plain,
                                const char *source_path, const char *description,
                                const json_t *labels, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    char name[SL_TPL_STORED_NAME_MAX + 1];
    if (stored_name(owner, plain, name, err) < 0 ||
        svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return NULL;
    char rel[4200];
    if (source_relpath(source_path, rel, sizeof(rel), err) < 0)
        return NULL;
    if (sl_tpl_root_prepare(cfg->template_root, err) < 0)
        return NULL;
    _cleanup_close_ int rootfd = ws_sandbox_open(cfg->workspace_root, sandbox_id, err);
    if (rootfd < 0)
        return NULL;
    /* Nothing may write the tree while it is archived: every command and
     * file call holds the global lock. */
    _cleanup_close_ int lockfd =
        ws_lock_global(rootfd, true, false, SL_E_SHARED_WORKSPACE_LOCKED, err);
    if (lockfd < 0)
        return NULL;
    _cleanup_close_ int src = sl_openat2(rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
                                         RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                             RESOLVE_NO_MAGICLINKS);
    if (src < 0) {
        sl_error_set(err, "SANDBOX_TEMPLATE_SOURCE_NOT_A_DIRECTORY", 0,
                     "SANDBOX_TEMPLATE_SOURCE_NOT_A_DIRECTORY");
        return NULL;
    }
    char hex[17], staging[PATH_MAX];
    if (sl_random_hex(hex, 8) < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "no randomness");
        return NULL;
    }
    snprintf(staging, sizeof(staging), "%s/.staging/build-%s-%s.tar.gz", cfg->template_root,
             name, hex);
    struct sl_tpl_limits lim = limits_of(cfg);
    struct sl_tpl_archive_info info;
    if (sl_tpl_archive(src, staging, &lim, &info, err) < 0)
        return NULL;
    /* §6.2 step 5: seed the cache from the archive, keep the archive, then
     * publish the catalog entry. */
    char tree[PATH_MAX], kept[PATH_MAX], kept_dir[PATH_MAX];
    if (sl_tpl_materialize(cfg->template_root, name, info.digest, staging,
                           cfg->template_max_extract_bytes, tree, err) < 0 ||
        sl_tpl_archive_path(cfg->template_root, name, info.digest, kept, sizeof(kept)) < 0) {
        unlink(staging);
        return NULL;
    }
    snprintf(kept_dir, sizeof(kept_dir), "%s/.archives/%s", cfg->template_root, name);
    if ((mkdir(kept_dir, 0700) < 0 && errno != EEXIST) || rename(staging, kept) < 0) {
        unlink(staging);
        sl_error_errno(err, SL_E_INTERNAL, "cannot keep the template archive");
        return NULL;
    }
    if (svc->blobstore) {
        char key[256];
        archive_key(name, info.digest, key, sizeof(key));
        if (svc->blobstore->ops->put_file(svc->blobstore, key, kept, info.digest + 7, err) < 0)
            return NULL;
    }
    char target[80];
    snprintf(target, sizeof(target), "/envs/%s", plain);
    json_t *record = json_pack("{s:s,s:s,s:I,s:s,s:f,s:s,s:s,s:O}", "name", name, "digest",
                               info.digest, "size_bytes", (json_int_t)info.size_bytes,
                               "mount_target", target, "created_at", (double)sl_now_us() / 1e6,
                               "description", description, "source_sandbox_id", sandbox_id,
                               "labels", labels ? labels : json_object());
    if (!record) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    struct publish_edit e = {.name = name, .record = record};
    if (catalog_update(svc, publish_edit, &e, err) < 0) {
        json_decref(record);
        return NULL;
    }
    sl_info("template %s published from %s: %s (%lld bytes)", name, sandbox_id, info.digest,
            (long long)info.size_bytes);
    json_t *view = record_view(record, owner);
    json_decref(record);
    return view;
}

/* ---- attach ---------------------------------------------------------------- */

json_t *sl_svc_template_attach(struct sl_service *svc, const char *sandbox_id,
                               int64_t generation, const char *owner, const char *const *refs,
                               size_t nrefs, struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    if (svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return NULL;
    if (nrefs < 1 || nrefs > MAX_ATTACH) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "attach between 1 and 16 templates");
        return NULL;
    }
    char names[MAX_ATTACH][SL_TPL_NAME_MAX + 1], digests[MAX_ATTACH][SL_TPL_DIGEST_SIZE];
    const char *shown[MAX_ATTACH];
    size_t n = 0;
    for (size_t i = 0; i < nrefs; i++) {
        char name[SL_TPL_NAME_MAX + 1], digest[SL_TPL_DIGEST_SIZE];
        if (sl_tpl_ref_parse(refs[i], name, digest, err) < 0)
            return NULL;
        bool dup = false;
        for (size_t j = 0; j < n && !dup; j++)
            if (strcmp(names[j], name) == 0) {
                if (strcmp(digests[j], digest) != 0) {
                    sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                                 "templates '%s' and '%s' both mount at /envs/%s", shown[j],
                                 refs[i], name);
                    return NULL;
                }
                dup = true; /* identical refs collapse */
            }
        if (dup)
            continue;
        snprintf(names[n], sizeof(names[n]), "%s", name);
        snprintf(digests[n], sizeof(digests[n]), "%s", digest);
        shown[n] = refs[i];
        n++;
    }
    _cleanup_json_ json_t *catalog = catalog_load(svc, err);
    if (!catalog)
        return NULL;
    json_t *attached = json_array();
    for (size_t i = 0; i < n; i++) {
        /* A tenant's own template of that name first, then a public one;
         * another tenant's is not there to find. */
        char own[SL_TPL_STORED_NAME_MAX + 1];
        const char *key = names[i];
        json_t *entry = NULL;
        if (owner && stored_name(owner, names[i], own, err) == 0 &&
            json_is_object(entry = json_object_get(catalog, own)))
            key = own;
        else
            entry = json_object_get(catalog, names[i]);
        if (!json_is_object(entry)) {
            json_decref(attached);
            sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "template '%s' is not in the catalog",
                         names[i]);
            return NULL;
        }
        /* A pin resolves to the pinned digest with the entry's other
         * metadata (§6.1). */
        /* The catalog's key is the name it is stored and cached under. */
        json_t *rec = json_deep_copy(entry);
        json_object_set_new(rec, "name", json_string(key));
        if (digests[i][0])
            json_object_set_new(rec, "digest", json_string(digests[i]));
        char tree[PATH_MAX];
        if (materialize(svc, key, json_string_value(json_object_get(rec, "digest")), tree,
                        err) < 0) {
            json_decref(rec);
            json_decref(attached);
            return NULL;
        }
        json_object_set_new(rec, "local_path", json_string(tree));
        json_array_append_new(attached, rec);
    }
    /* Like publish, attach waits for nothing: a running command or file
     * call holds the sandbox. */
    struct sl_error lerr = {0};
    _cleanup_close_ int rootfd = ws_sandbox_open(cfg->workspace_root, sandbox_id, err);
    _cleanup_close_ int lockfd =
        rootfd >= 0 ? ws_lock_global(rootfd, true, false, SL_E_SHARED_WORKSPACE_LOCKED, &lerr)
                    : -1;
    if (rootfd < 0 || lockfd < 0) {
        if (rootfd >= 0)
            *err = lerr;
        json_decref(attached);
        return NULL;
    }
    if (svc_live_set_templates(svc, sandbox_id, generation, json_incref(attached)) < 0) {
        json_decref(attached);
        sl_error_set(err, SL_E_STALE_GENERATION, 0, "STALE_SANDBOX_GENERATION");
        return NULL;
    }
    json_t *views = json_array();
    size_t k;
    json_t *rec;
    json_array_foreach(attached, k, rec)
        json_array_append_new(views, record_view(rec, owner));
    json_decref(attached);
    return json_pack("{s:s,s:o}", "status", "ATTACHED", "templates", views);
}

int svc_template_mounts(struct sl_service *svc, const char *sandbox_id,
                        struct sl_rt_mount **mounts, size_t *n, json_t **holder,
                        struct sl_error *err)
{
    *holder = svc_live_templates(svc, sandbox_id);
    return svc_template_mounts_of(svc, *holder, mounts, n, err);
}

int svc_template_mounts_of(struct sl_service *svc, const json_t *records,
                           struct sl_rt_mount **mounts, size_t *n, struct sl_error *err)
{
    *mounts = NULL;
    *n = 0;
    size_t count = json_array_size(records);
    if (count == 0)
        return 0;
    *mounts = calloc(count, sizeof(**mounts));
    if (!*mounts)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0; i < count; i++) {
        json_t *rec = json_array_get(records, i);
        const char *name = json_string_value(json_object_get(rec, "name"));
        const char *digest = json_string_value(json_object_get(rec, "digest"));
        const char *path = json_string_value(json_object_get(rec, "local_path"));
        /* §6.5: an evicted revision is materialised again. */
        struct stat st;
        if (!name || !digest || !path)
            continue;
        if (stat(path, &st) < 0) {
            char tree[PATH_MAX];
            if (materialize(svc, name, digest, tree, err) < 0)
                return -1;
        }
        (*mounts)[*n].name = sl_tpl_plain_name(name); /* /envs/<name>, whoever owns it */
        (*mounts)[*n].host_path = path;
        (*n)++;
    }
    return 0;
}

/* ---- catalog routes ---------------------------------------------------------- */

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

json_t *sl_svc_templates_list(struct sl_service *svc, const char *owner, struct sl_error *err)
{
    _cleanup_json_ json_t *catalog = catalog_load(svc, err);
    if (!catalog)
        return NULL;
    /* Ordered by name. */
    size_t n = json_object_size(catalog);
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    if (!keys) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach(catalog, k, v) if (visible_to(owner, k)) keys[i++] = k;
    n = i;
    qsort(keys, n, sizeof(*keys), cmp_key);
    json_t *list = json_array();
    for (i = 0; i < n; i++)
        json_array_append_new(list, record_view(json_object_get(catalog, keys[i]), owner));
    free(keys);
    return json_pack("{s:o}", "templates", list);
}

struct remove_edit {
    const char *name;
    bool removed;
};

static int remove_edit(json_t *catalog, void *arg, struct sl_error *err)
{
    struct remove_edit *e = arg;
    (void)err;
    e->removed = json_object_del(catalog, e->name) == 0;
    return e->removed ? 0 : 1;
}

static bool tree_pinned(const char *tree_path, void *arg);

json_t *sl_svc_template_unpublish(struct sl_service *svc, const char *owner, const char *shown,
                                  struct sl_error *err)
{
    /* A tenant unpublishes its own by plain name (a public one of that
     * name is not its to remove); the operator any, by stored name. */
    char name[SL_TPL_STORED_NAME_MAX + 1];
    if (owner ? stored_name(owner, shown, name, err) < 0
              : sl_tpl_stored_name_check(shown, err) < 0)
        return NULL;
    if (!owner)
        snprintf(name, sizeof(name), "%s", shown);
    if (sl_tpl_root_prepare(svc->cfg->template_root, err) < 0)
        return NULL;
    struct remove_edit e = {.name = name};
    if (catalog_update(svc, remove_edit, &e, err) < 0)
        return NULL;
    /* Its trees and kept archive go now (the mounted ones stay until no
     * sandbox mounts them; the maintenance sweep takes them then). */
    struct sl_error ignored = {0};
    int removed = sl_tpl_remove_name(svc->cfg->template_root, name, tree_pinned, svc, &ignored);
    if (removed > 0)
        sl_info("template %s unpublished: %d local trees and archives removed", name, removed);
    return json_pack("{s:s,s:s}", "status", e.removed ? "REMOVED" : "NOT_FOUND", "name", shown);
}

int64_t svc_template_total(struct sl_service *svc)
{
    struct sl_error ignored = {0};
    json_t *catalog = catalog_load(svc, &ignored);
    int64_t n = catalog ? (int64_t)json_object_size(catalog) : 0;
    json_decref(catalog);
    return n;
}

/* ---- cache budget ---------------------------------------------------------- */

/* Is the tree attached to a live sandbox? Runs under live_lock. */
static bool tree_pinned(const char *tree_path, void *arg)
{
    struct sl_service *svc = arg;
    bool pinned = false;
    pthread_mutex_lock(&svc->live_lock);
    for (size_t i = 0; i < svc->live_n && !pinned; i++) {
        json_t *rec;
        size_t j;
        json_array_foreach(svc->live[i].templates, j, rec) {
            const char *p = json_string_value(json_object_get(rec, "local_path"));
            if (p && strcmp(p, tree_path) == 0)
                pinned = true;
        }
    }
    pthread_mutex_unlock(&svc->live_lock);
    return pinned;
}

struct sweep_ctx {
    struct sl_service *svc;
    json_t *catalog;
};

/* A tree stays while its name is published with this revision, or a live
 * sandbox mounts it; an archive directory while its name is published. */
static bool tree_referenced(const char *name, const char *hex, const char *tree_path, void *arg)
{
    struct sweep_ctx *c = arg;
    json_t *rec = json_object_get(c->catalog, name);
    if (!hex)
        return rec != NULL;
    const char *digest = json_string_value(json_object_get(rec, "digest"));
    if (digest && strncmp(digest, "sha256:", 7) == 0 && strcmp(digest + 7, hex) == 0)
        return true;
    return tree_pinned(tree_path, c->svc);
}

void svc_template_cache_budget(struct sl_service *svc)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_error err = {0};
    /* First what nothing references: unpublished names' trees, revisions a
     * newer publish replaced (not mounted anywhere); a catalog that cannot
     * be read leaves everything in place. */
    struct sweep_ctx ctx = {.svc = svc, .catalog = catalog_load(svc, &err)};
    if (ctx.catalog) {
        int swept = sl_tpl_sweep_unreferenced(cfg->template_root, tree_referenced, &ctx, &err);
        if (swept > 0)
            sl_info("template cache: removed %d unreferenced trees and archives", swept);
        json_decref(ctx.catalog);
    }
    sl_error_clear(&err);
    if (cfg->template_cache_max_bytes < 0)
        return;
    int removed = sl_tpl_cache_evict(cfg->template_root, cfg->template_cache_max_bytes,
                                     tree_pinned, svc, &err);
    if (removed < 0)
        sl_warn("template cache budget: %s", sl_error_text(&err));
    else if (removed > 0)
        sl_info("template cache budget: evicted %d least recently used revisions", removed);
}
