#include "templates/catalog.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <dirent.h>
#include <ftw.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

int sl_tpl_name_check(const char *name, struct sl_error *err)
{
    size_t n = strlen(name);
    bool ok = n >= 1 && n <= SL_TPL_NAME_MAX && strcmp(name, ".") != 0 &&
              strcmp(name, "..") != 0 && (islower((unsigned char)name[0]) || isdigit((unsigned char)name[0]));
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    }
    if (ok)
        return 0;
    return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                        "invalid template name '%.80s': expected lowercase alphanumerics, '.', "
                        "'_' or '-', up to 64 characters",
                        name);
}

int sl_tpl_stored_name_check(const char *stored, struct sl_error *err)
{
    const char *sep = strchr(stored, SL_TPL_OWNER_SEP);
    if (!sep)
        return sl_tpl_name_check(stored, err);
    size_t owner = (size_t)(sep - stored);
    bool ok = owner >= 1 && owner <= SL_TPL_OWNER_MAX;
    for (size_t i = 0; ok && i < owner; i++) {
        unsigned char c = (unsigned char)stored[i];
        ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    }
    if (!ok)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "invalid template owner in '%.80s'",
                            stored);
    return sl_tpl_name_check(sep + 1, err);
}

const char *sl_tpl_plain_name(const char *stored)
{
    const char *sep = strchr(stored, SL_TPL_OWNER_SEP);
    return sep ? sep + 1 : stored;
}

static bool digest_valid(const char *d)
{
    if (strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
        return false;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

int sl_tpl_ref_parse(const char *ref, char name[SL_TPL_NAME_MAX + 1],
                     char digest[SL_TPL_DIGEST_SIZE], struct sl_error *err)
{
    while (isspace((unsigned char)*ref))
        ref++;
    size_t len = strlen(ref);
    while (len > 0 && isspace((unsigned char)ref[len - 1]))
        len--;
    char buf[256];
    if (len >= sizeof(buf))
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "invalid template reference");
    memcpy(buf, ref, len);
    buf[len] = '\0';
    char *at = strchr(buf, '@');
    digest[0] = '\0';
    if (at) {
        *at = '\0';
        if (!digest_valid(at + 1))
            return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                                "invalid template digest '%.80s': expected 'sha256:<64 hex>'",
                                at + 1);
        snprintf(digest, SL_TPL_DIGEST_SIZE, "%s", at + 1);
    }
    if (sl_tpl_name_check(buf, err) < 0)
        return -1;
    memcpy(name, buf, strlen(buf) + 1); /* at most 64 characters: checked */
    return 0;
}

static int mkdir_p1(const char *path, mode_t mode, struct sl_error *err)
{
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot create %s", path);
    return 0;
}

int sl_tpl_root_prepare(const char *root, struct sl_error *err)
{
    /* The root and the trees are traversable by every sandbox uid; the
     * bookkeeping directories are not. */
    if (mkdir_p1(root, 0711, err) < 0)
        return -1;
    static const char *const priv[] = {".archives", ".locks", ".staging"};
    for (size_t i = 0; i < SL_ARRAY_LEN(priv); i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", root, priv[i]);
        if (mkdir_p1(p, 0700, err) < 0)
            return -1;
    }
    return 0;
}

static int lock_file(const char *path, struct sl_error *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot open lock %s", path);
    while (flock(fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            close(fd);
            return sl_error_errno(err, SL_E_INTERNAL, "cannot lock %s", path);
        }
    }
    return fd;
}

json_t *sl_tpl_catalog_load(const char *root, struct sl_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/catalog.json", root);
    json_error_t jerr;
    json_t *c = json_load_file(path, 0, &jerr);
    if (!c) {
        if (access(path, F_OK) < 0 && errno == ENOENT)
            return json_object(); /* nothing published yet */
        sl_error_set(err, SL_E_INTERNAL, 0, "the template catalog is unreadable");
        return NULL;
    }
    if (!json_is_object(c)) {
        json_decref(c);
        sl_error_set(err, SL_E_INTERNAL, 0, "the template catalog is not an object");
        return NULL;
    }
    return c;
}

int sl_tpl_catalog_update(const char *root,
                          int (*edit)(json_t *catalog, void *arg, struct sl_error *err), void *arg,
                          struct sl_error *err)
{
    char lock[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
    snprintf(lock, sizeof(lock), "%s/catalog.lock", root);
    snprintf(path, sizeof(path), "%s/catalog.json", root);
    _cleanup_close_ int lfd = lock_file(lock, err);
    if (lfd < 0)
        return -1;
    _cleanup_json_ json_t *c = sl_tpl_catalog_load(root, err);
    if (!c)
        return -1;
    int rc = edit(c, arg, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    char hex[17];
    if (sl_random_hex(hex, 8) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "no randomness");
    snprintf(tmp, sizeof(tmp), "%s/.staging/catalog-%s.json", root, hex);
    /* §6.6: pretty-printed, 2-space indent, sorted keys. */
    if (json_dump_file(c, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) < 0 || chmod(tmp, 0644) < 0 ||
        rename(tmp, path) < 0) {
        unlink(tmp);
        return sl_error_errno(err, SL_E_INTERNAL, "cannot write the template catalog");
    }
    return 0;
}

int sl_tpl_archive_path(const char *root, const char *name, const char *digest, char *out,
                        size_t size)
{
    int n = snprintf(out, size, "%s/.archives/%s/sha256-%s.tar.gz", root, name, digest + 7);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

int sl_tpl_materialize(const char *root, const char *name, const char *digest,
                       const char *archive, int64_t max_extract_bytes, char out[PATH_MAX],
                       struct sl_error *err)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    int n = snprintf(out, PATH_MAX, "%s/sha256-%s", dir, digest + 7);
    if (n < 0 || n >= PATH_MAX)
        return sl_error_set(err, SL_E_INTERNAL, 0, "template cache path too long");
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
        (void)utimensat(AT_FDCWD, out, NULL, 0); /* LRU: used now */
        return 0;
    }
    char lock[PATH_MAX];
    snprintf(lock, sizeof(lock), "%s/.locks/%s-sha256-%s.lock", root, name, digest + 7);
    _cleanup_close_ int lfd = lock_file(lock, err);
    if (lfd < 0)
        return -1;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
        return 0; /* another caller materialised it meanwhile */
    char kept[PATH_MAX];
    if (!archive) {
        if (sl_tpl_archive_path(root, name, digest, kept, sizeof(kept)) < 0)
            return sl_error_set(err, SL_E_INTERNAL, 0, "template archive path too long");
        if (access(kept, R_OK) < 0)
            return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                                "template %s@%s is not cached on this worker and no object "
                                "store is configured to fetch it from",
                                name, digest);
        archive = kept;
    }
    if (mkdir_p1(dir, 0755, err) < 0)
        return -1;
    char hex[17], staging[PATH_MAX];
    if (sl_random_hex(hex, 8) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "no randomness");
    snprintf(staging, sizeof(staging), "%s/.staging/tree-%s", root, hex);
    if (sl_tpl_extract(archive, name, digest, staging, max_extract_bytes, err) < 0)
        return -1;
    /* The staging area is private (0700); the tree's own modes were set by
     * the extraction. Moving it in publishes it whole. */
    if (rename(staging, out) < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot move the template into the cache");
        return -1;
    }
    return 0;
}

/* ---- cache budget ---------------------------------------------------------- */

struct cached_tree {
    char path[PATH_MAX];
    int64_t bytes;
    struct timespec used;
};

static _Thread_local int64_t walk_bytes;

static int add_size(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path;
    (void)type;
    (void)ftw;
    walk_bytes += (int64_t)st->st_blocks * 512;
    return 0;
}

static int cmp_used(const void *a, const void *b)
{
    const struct cached_tree *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

/* Calls visit(name, hex, tree_path, ctx) for every revision tree
 * <root>/<name>/sha256-<hex>, of the one name `only` when it is set, and
 * then removes each name's directory if that left it empty. The private
 * directories (.archives, ...) start with a dot and are not names. 0, or
 * -1 when the root cannot be read. */
typedef void (*tree_visit_fn)(const char *name, const char *hex, const char *tree, void *ctx);

static void visit_name(const char *root, const char *name, tree_visit_fn visit, void *ctx)
{
    char name_dir[PATH_MAX - 300]; /* + "/" + an entry always fits PATH_MAX */
    if ((size_t)snprintf(name_dir, sizeof(name_dir), "%s/%s", root, name) >= sizeof(name_dir))
        return;
    DIR *d = opendir(name_dir);
    for (struct dirent *r; d && (r = readdir(d));) {
        if (strncmp(r->d_name, "sha256-", 7) != 0)
            continue;
        char tree[PATH_MAX];
        snprintf(tree, sizeof(tree), "%s/%s", name_dir, r->d_name);
        visit(name, r->d_name + 7, tree, ctx);
    }
    if (d)
        closedir(d);
    (void)rmdir(name_dir); /* only when its last revision went */
}

static int for_each_tree(const char *root, const char *only, tree_visit_fn visit, void *ctx,
                         struct sl_error *err)
{
    if (only) {
        visit_name(root, only, visit, ctx);
        return 0;
    }
    DIR *top = opendir(root);
    if (!top)
        return errno == ENOENT ? 0 : sl_error_errno(err, SL_E_INTERNAL, "cannot read %s", root);
    for (struct dirent *e; (e = readdir(top));)
        if (e->d_name[0] != '.' && e->d_type == DT_DIR)
            visit_name(root, e->d_name, visit, ctx);
    closedir(top);
    return 0;
}

struct remove_name_ctx {
    bool (*pinned)(const char *tree_path, void *arg);
    void *arg;
    int removed;
    bool mounted;
};

static void remove_name_visit(const char *name, const char *hex, const char *tree, void *ctx)
{
    (void)name;
    (void)hex;
    struct remove_name_ctx *c = ctx;
    if (c->pinned && c->pinned(tree, c->arg))
        c->mounted = true;
    else if (sl_tree_remove(tree) == 0)
        c->removed++;
}

int sl_tpl_remove_name(const char *root, const char *name,
                       bool (*pinned)(const char *tree_path, void *arg), void *arg,
                       struct sl_error *err)
{
    if (sl_tpl_stored_name_check(name, err) < 0)
        return -1;
    struct remove_name_ctx c = {.pinned = pinned, .arg = arg};
    (void)for_each_tree(root, name, remove_name_visit, &c, err);
    if (!c.mounted) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/.archives/%s", root, name);
        if (access(dir, F_OK) == 0 && sl_tree_remove(dir) == 0)
            c.removed++;
    }
    return c.removed;
}

/* A publish writes its tree and archive before its catalog entry, and a
 * tree's mtime is touched on every use: anything touched within the grace
 * may be on its way into the catalog, or was just in use. */
#define SWEEP_GRACE_SECONDS 600

static bool recently_used(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && time(NULL) - st.st_mtim.tv_sec < SWEEP_GRACE_SECONDS;
}

struct sweep_ctx {
    bool (*keep)(const char *name, const char *hex, const char *tree_path, void *arg);
    void *arg;
    int removed;
};

static void sweep_visit(const char *name, const char *hex, const char *tree, void *ctx)
{
    struct sweep_ctx *c = ctx;
    if (!recently_used(tree) && !c->keep(name, hex, tree, c->arg) && sl_tree_remove(tree) == 0)
        c->removed++;
}

int sl_tpl_sweep_unreferenced(const char *root,
                              bool (*keep)(const char *name, const char *hex,
                                           const char *tree_path, void *arg),
                              void *arg, struct sl_error *err)
{
    struct sweep_ctx c = {.keep = keep, .arg = arg};
    if (for_each_tree(root, NULL, sweep_visit, &c, err) < 0)
        return -1;
    char archives[PATH_MAX - 300]; /* + "/" + a name always fits PATH_MAX */
    if ((size_t)snprintf(archives, sizeof(archives), "%s/.archives", root) >= sizeof(archives))
        return c.removed;
    DIR *a = opendir(archives);
    for (struct dirent *e; a && (e = readdir(a));) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR || keep(e->d_name, NULL, NULL, arg))
            continue;
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/%s", archives, e->d_name);
        if (!recently_used(dir) && sl_tree_remove(dir) == 0)
            c.removed++;
    }
    if (a)
        closedir(a);
    return c.removed;
}

struct evict_ctx {
    struct cached_tree *trees;
    size_t n, cap;
    int64_t total;
};

static void evict_visit(const char *name, const char *hex, const char *tree, void *ctx)
{
    (void)name;
    (void)hex;
    struct evict_ctx *c = ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct cached_tree *nt = realloc(c->trees, cap * sizeof(*nt));
        if (!nt)
            return;
        c->trees = nt;
        c->cap = cap;
    }
    struct cached_tree *t = &c->trees[c->n];
    snprintf(t->path, sizeof(t->path), "%s", tree);
    struct stat st;
    if (stat(t->path, &st) < 0)
        return;
    t->used = st.st_mtim;
    walk_bytes = 0;
    (void)nftw(t->path, add_size, 16, FTW_PHYS);
    t->bytes = walk_bytes;
    c->total += t->bytes;
    c->n++;
}

int sl_tpl_cache_evict(const char *root, int64_t max_bytes,
                       bool (*pinned)(const char *tree_path, void *arg), void *arg,
                       struct sl_error *err)
{
    if (max_bytes < 0)
        return 0;
    struct evict_ctx c = {0};
    if (for_each_tree(root, NULL, evict_visit, &c, err) < 0)
        return -1;
    if (c.n > 1)
        qsort(c.trees, c.n, sizeof(*c.trees), cmp_used);
    int removed = 0;
    for (size_t i = 0; i < c.n && c.total > max_bytes; i++) {
        if (pinned && pinned(c.trees[i].path, arg))
            continue; /* mounted by a live sandbox: never evicted */
        if (sl_tree_remove(c.trees[i].path) == 0) {
            c.total -= c.trees[i].bytes;
            removed++;
        }
    }
    free(c.trees);
    return removed;
}
