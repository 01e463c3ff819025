/* The File API on the owner (spec API.md §3.12, §5): fence, runtime lookup,
 * then one safe operation of workspace/files.c. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "service/internal.h"
#include "workspace/files.h"

struct file_ctx {
    struct sl_service *svc;
    const char *sandbox_id;
    int64_t generation;
};

/* Under the file locks (§5.3): still live here at this generation? A
 * release marks the sandbox destroying before it takes the global lock
 * exclusively, so checking the live table while we hold it shared closes
 * the race with destroy. */
static int file_recheck(void *arg, struct sl_error *err)
{
    const struct file_ctx *c = arg;
    return svc_live_lookup(c->svc, c->sandbox_id, c->generation, NULL, err);
}

/* Fence + owner + live lookup; on success returns the sandbox root fd and
 * fills *target (which points at *ctx for the re-check). */
static int file_prepare(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                        struct sl_ws_target *target, struct file_ctx *ctx, struct sl_error *err)
{
    if (svc_route_owner(svc, sandbox_id, generation, err) < 0)
        return -1;
    uid_t uid;
    if (svc_live_lookup(svc, sandbox_id, generation, &uid, err) < 0)
        return -1;
    int fd = ws_sandbox_open(svc->cfg->workspace_root, sandbox_id, err);
    if (fd < 0)
        return -1;
    *ctx = (struct file_ctx){svc, sandbox_id, generation};
    target->root_fd = fd;
    target->uid = uid;
    target->max_file_bytes = svc->cfg->max_file_api_bytes;
    target->recheck = file_recheck;
    target->recheck_ctx = ctx;
    return fd;
}

int sl_svc_watch_open(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                      const char *path, size_t path_len, char **canonical,
                      struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    int root = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (root < 0)
        return -1;
    int dir = ws_dir_open(&t, path, path_len, canonical, err);
    if (dir < 0) {
        close(root);
        return -1;
    }
    close(dir);
    return root;
}

static void file_done(struct sl_service *svc, const char *sandbox_id, int64_t generation)
{
    svc_live_touch(svc, sandbox_id);
    svc_route_touch(svc, sandbox_id, generation);
}

/* A JSON string of bytes that may not be UTF-8 (a path as the client sent
 * it, a name the sandbox created): invalid sequences become U+FFFD, so an
 * entry is shown rather than dropped. The API echoes paths back; a path is
 * not a secret, unlike validation inputs. */
static json_t *bytes_json(const char *s, size_t len)
{
    size_t n = 0;
    _cleanup_free_ char *text = sl_utf8_repair(s, len, &n);
    return text ? json_stringn(text, n) : NULL;
}

static json_t *path_json(struct sl_file_path p) { return bytes_json(p.s, p.len); }

/* json_pack failed (out of memory): say so instead of answering nothing. */
static json_t *checked(json_t *doc, struct sl_error *err)
{
    if (!doc)
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return doc;
}

json_t *sl_svc_file_write(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                          struct sl_file_path path, const char *b64, size_t b64_len,
                          struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0 || svc_disk_quota_check(svc, sandbox_id, err) < 0)
        return NULL;
    struct sl_buf data;
    sl_buf_init(&data, (size_t)t.max_file_bytes);
    if (sl_base64_decode_strict(b64, b64_len, &data, (size_t)t.max_file_bytes, err) < 0) {
        sl_buf_free(&data);
        return NULL;
    }
    int rc = ws_file_write(&t, path.s, path.len, data.data ? data.data : "", data.len, err);
    sl_buf_free(&data);
    if (rc < 0)
        return NULL;
    file_done(svc, sandbox_id, generation);
    return checked(json_pack("{s:s,s:o}", "status", "ok", "path", path_json(path)), err);
}

json_t *sl_svc_file_write_bytes(struct sl_service *svc, const char *sandbox_id,
                                int64_t generation, struct sl_file_path path, const char *data,
                                size_t len, struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0 || svc_disk_quota_check(svc, sandbox_id, err) < 0)
        return NULL;
    if ((int64_t)len > t.max_file_bytes) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, EFBIG,
                     "file exceeds the sandbox File API size limit");
        return NULL;
    }
    if (ws_file_write(&t, path.s, path.len, data, len, err) < 0)
        return NULL;
    file_done(svc, sandbox_id, generation);
    return checked(json_pack("{s:s,s:o}", "status", "ok", "path", path_json(path)), err);
}

int sl_svc_file_read_bytes(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           struct sl_file_path path, struct sl_buf *out, struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    sl_buf_init(out, 0);
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0)
        return -1;
    sl_buf_init(out, (size_t)t.max_file_bytes);
    if (ws_file_read(&t, path.s, path.len, out, err) < 0) {
        sl_buf_free(out);
        return -1;
    }
    file_done(svc, sandbox_id, generation);
    return 0;
}

json_t *sl_svc_file_stat(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path path, struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0)
        return NULL;
    /* The parent opened by the listing's rules (no link followed on the
     * way), then the entry itself, never followed. */
    _cleanup_free_ char *copy = strndup(path.s, path.len);
    if (!copy)
        return checked(NULL, err);
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/')
        copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    bool root = strcmp(copy, "/workspace") == 0 || n == 0 || strcmp(copy, "/") == 0;
    const char *name = root ? "." : slash ? slash + 1 : copy;
    if (!root && slash)
        *slash = '\0';
    const char *parent = root ? "/workspace" : slash ? (copy[0] ? copy : "/") : "/workspace";
    _cleanup_free_ char *canonical = NULL;
    _cleanup_close_ int dir = ws_dir_open(&t, parent, strlen(parent), &canonical, err);
    if (dir < 0)
        return NULL;
    struct stat st;
    if (strchr(name, '/') || strcmp(name, "..") == 0 ||
        fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, errno, "path does not exist");
        return NULL;
    }
    const char *type = S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symlink"
                       : S_ISREG(st.st_mode)                                  ? "file"
                                                                              : "other";
    json_t *doc = json_pack("{s:s,s:I,s:f,s:i}", "type", type, "size_bytes", (json_int_t)st.st_size,
                            "modified_at",
                            (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9, "mode",
                            (int)(st.st_mode & 07777));
    if (doc && S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t len = readlinkat(dir, name, target, sizeof(target) - 1);
        if (len >= 0)
            json_object_set_new(doc, "symlink_target", bytes_json(target, (size_t)len));
    }
    file_done(svc, sandbox_id, generation);
    return checked(doc, err);
}

json_t *sl_svc_file_read(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path path, struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0)
        return NULL;
    struct sl_buf data;
    sl_buf_init(&data, (size_t)t.max_file_bytes);
    if (ws_file_read(&t, path.s, path.len, &data, err) < 0) {
        sl_buf_free(&data);
        return NULL;
    }
    _cleanup_free_ char *encoded = sl_base64_encode(data.data ? data.data : "", data.len);
    sl_buf_free(&data);
    if (!encoded) {
        sl_error_set(err, SL_E_INTERNAL, 0, "out of memory");
        return NULL;
    }
    file_done(svc, sandbox_id, generation);
    return checked(json_pack("{s:o,s:s}", "path", path_json(path), "content_base64", encoded), err);
}

json_t *sl_svc_file_list(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path path, int64_t limit, int64_t offset,
                         struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0)
        return NULL;
    if (limit > svc->cfg->max_list_entries)
        limit = svc->cfg->max_list_entries;
    if (svc_live_listing_enter(svc, sandbox_id, err) < 0)
        return NULL;
    struct sl_ws_listing l = {0};
    int listed = ws_file_list(&t, path.s, path.len, limit, offset, &l, err);
    svc_live_listing_leave(svc, sandbox_id);
    if (listed < 0)
        return NULL;
    json_t *entries = json_array();
    for (size_t i = 0; i < l.n; i++) {
        const struct sl_ws_entry *e = &l.entries[i];
        json_t *entry = json_pack("{s:o,s:o,s:s,s:I,s:f,s:i}", "name",
                                  bytes_json(e->name, strlen(e->name)), "path",
                                  bytes_json(e->path, strlen(e->path)), "type", e->type,
                                  "size_bytes", (json_int_t)e->size_bytes, "modified_at",
                                  e->modified_at, "mode", e->mode);
        if (!entry || json_array_append_new(entries, entry) < 0) {
            json_decref(entries);
            sl_ws_listing_free(&l);
            return checked(NULL, err);
        }
    }
    json_t *answer = checked(json_pack("{s:o,s:o,s:I,s:b}", "path", path_json(path), "entries",
                                       entries, "total", (json_int_t)l.total, "has_more",
                                       l.has_more),
                             err);
    sl_ws_listing_free(&l);
    file_done(svc, sandbox_id, generation);
    return answer;
}

json_t *sl_svc_file_mkdir(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                          struct sl_file_path path, bool parents, struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0 || svc_disk_quota_check(svc, sandbox_id, err) < 0 ||
        ws_file_mkdir(&t, path.s, path.len, parents, err) < 0)
        return NULL;
    file_done(svc, sandbox_id, generation);
    return checked(json_pack("{s:s,s:o}", "status", "ok", "path", path_json(path)), err);
}

json_t *sl_svc_file_delete(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           struct sl_file_path path, bool recursive, struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0 || ws_file_delete(&t, path.s, path.len, recursive, err) < 0)
        return NULL;
    file_done(svc, sandbox_id, generation);
    return checked(json_pack("{s:s,s:o}", "status", "ok", "path", path_json(path)), err);
}

json_t *sl_svc_file_move(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path src, struct sl_file_path dst, bool overwrite,
                         struct sl_error *err)
{
    struct sl_ws_target t = {0};
    struct file_ctx ctx;
    _cleanup_close_ int fd = file_prepare(svc, sandbox_id, generation, &t, &ctx, err);
    if (fd < 0 || ws_file_move(&t, src.s, src.len, dst.s, dst.len, overwrite, err) < 0)
        return NULL;
    file_done(svc, sandbox_id, generation);
    return checked(json_pack("{s:s,s:o,s:o}", "status", "ok", "source", path_json(src), "destination",
                     path_json(dst)), err);
}
