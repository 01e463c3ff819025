/* envd, natively (e2b.h): E2B's in-sandbox daemon answered by this service
 * over the sandbox's exec and file services. Its Connect RPCs are
 * dispatched by name; process.Process is in e2b/process.c.
 *
 * Paths: E2B's user is `user` with home /home/user, which is the
 * sandbox's workspace (mounted at /home/user as well as /workspace), so
 * "/home/user/a", "a" and "/workspace/a" are one file. Other absolute
 * paths are outside what the file API reaches and are refused. */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "api/errors.h"
#include "api/fs_watch.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "config/config.h"
#include "e2b/connect.h"
#include "e2b/e2b.h"
#include "e2b/envd.h"
#include "service/service.h"
#include "service/tenants.h"

#define HOME "/home/user"
/* ListDir's deepest walk, and its most entries. */
#define LIST_MAX_DEPTH 16
#define LIST_MAX_ENTRIES 10000
/* The files one multipart upload may write. */
#define MAX_PARTS 1000

/* ---- answers ---- */

void sl_envd_unary(struct sl_response *resp, json_t *doc)
{
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    resp->len = resp->body ? strlen(resp->body) : 0;
    json_decref(doc);
    if (!resp->body)
        sl_envd_unary_error(resp, "internal", "out of memory");
}

void sl_envd_unary_error(struct sl_response *resp, const char *code, const char *message)
{
    resp->status = sl_connect_http_status(code);
    resp->content_type = "application/json";
    _cleanup_json_ json_t *doc = json_pack("{s:s,s:s}", "code", code, "message", message);
    resp->body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    resp->len = resp->body ? strlen(resp->body) : 0;
}

void sl_envd_unary_err(struct sl_response *resp, const struct sl_error *err)
{
    int status = sl_api_status_for_code(err->code);
    snprintf(resp->log_detail, sizeof(resp->log_detail), "%s: %.200s", err->code,
             err->detail[0] ? err->detail : err->message);
    sl_envd_unary_error(resp, sl_connect_code_of(err), status == 500 ? "internal error"
                                                                     : err->message);
}

/* A stream that ends at once with an error (or none): HTTP 200 and the
 * end-stream envelope, as Connect wants for a server stream. */
void sl_envd_stream_error(struct sl_response *resp, const char *code, const char *message)
{
    struct sl_buf b;
    sl_buf_init(&b, SIZE_MAX);
    if (sl_connect_end(&b, code, message) < 0) {
        sl_buf_free(&b);
        return;
    }
    resp->status = 200;
    resp->content_type = SL_CONNECT_STREAM_TYPE;
    resp->body = b.data;
    resp->len = b.len;
}

void sl_envd_stream_err(struct sl_response *resp, const struct sl_error *err)
{
    snprintf(resp->log_detail, sizeof(resp->log_detail), "%s: %.200s", err->code,
             err->detail[0] ? err->detail : err->message);
    sl_envd_stream_error(resp, sl_connect_code_of(err),
                         sl_api_status_for_code(err->code) == 500 ? "internal error"
                                                                  : err->message);
}

/* ---- who and where ---- */

int sl_envd_user_check(struct sl_request *req, struct sl_error *err)
{
    const char *auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Authorization");
    const char *user = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "username");
    char decoded[128] = "";
    if (auth && strncasecmp(auth, "Basic ", 6) == 0) {
        struct sl_buf b;
        sl_buf_init(&b, sizeof(decoded) - 1);
        if (sl_base64_decode_strict(auth + 6, strlen(auth + 6), &b, sizeof(decoded) - 1, NULL) ==
            0) {
            memcpy(decoded, b.data ? b.data : "", b.len);
            decoded[b.len] = '\0';
            char *colon = strchr(decoded, ':');
            if (colon)
                *colon = '\0';
        }
        sl_buf_free(&b);
        user = decoded;
    }
    /* One identity per sandbox: uid 0 of its own user namespace, no
     * privilege on the host. E2B's two users name it; any other is not
     * there. */
    if (!user || !*user || strcmp(user, "user") == 0 || strcmp(user, "root") == 0)
        return 0;
    return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                        "this sandbox has one user, 'user' (also answering to 'root'): no "
                        "other user exists");
}

int sl_envd_path(const char *in, char *out, size_t size, struct sl_error *err)
{
    const char *rest = NULL;
    if (!in || !*in || strcmp(in, "~") == 0)
        rest = "";
    else if (strncmp(in, "~/", 2) == 0)
        rest = in + 1;
    else if (strncmp(in, HOME, strlen(HOME)) == 0 && (in[strlen(HOME)] == '/' || !in[strlen(HOME)]))
        rest = in + strlen(HOME);
    else if (strncmp(in, "/workspace", 10) == 0 && (in[10] == '/' || !in[10]))
        rest = in + 10;
    else if (in[0] != '/')
        rest = in; /* relative to the home */
    if (!rest)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                            "this path is outside the sandbox's files: they are under "
                            "/home/user (the workspace)");
    if ((size_t)snprintf(out, size, "/workspace%s%s", rest[0] && rest[0] != '/' ? "/" : "",
                         rest) >= size)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "the path is too long");
    /* "a/" names "a": its entries' paths must not read "a//b". */
    size_t n = strlen(out);
    while (n > strlen("/workspace") && out[n - 1] == '/')
        out[--n] = '\0';
    return 0;
}

/* A workspace path as E2B names it. */
static void e2b_name(const char *ws, char *out, size_t size)
{
    snprintf(out, size, HOME "%s", ws + strlen("/workspace"));
}

/* ---- EntryInfo ---- */

static void permissions(unsigned mode, const char *type, char out[11])
{
    out[0] = strcmp(type, "directory") == 0 ? 'd' : strcmp(type, "symlink") == 0 ? 'L' : '-';
    const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        out[1 + i] = mode & (0400u >> i) ? rwx[i] : '-';
    out[10] = '\0';
}

static json_t *entry_info(const char *ws_path, const json_t *stat)
{
    const char *type = json_string_value(json_object_get(stat, "type"));
    unsigned mode = (unsigned)json_integer_value(json_object_get(stat, "mode"));
    double mtime = json_number_value(json_object_get(stat, "modified_at"));
    char name_path[4200], perms[11], when[48], size[32];
    e2b_name(ws_path, name_path, sizeof(name_path));
    permissions(mode, type ? type : "", perms);
    snprintf(size, sizeof(size), "%lld",
             (long long)json_integer_value(json_object_get(stat, "size_bytes")));
    const char *slash = strrchr(name_path, '/');
    json_t *e = json_pack(
        "{s:s,s:s,s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "name", slash ? slash + 1 : name_path, "type",
        !type                               ? "FILE_TYPE_UNSPECIFIED"
        : strcmp(type, "directory") == 0 ? "FILE_TYPE_DIRECTORY"
        : strcmp(type, "symlink") == 0   ? "FILE_TYPE_SYMLINK"
        : strcmp(type, "file") == 0      ? "FILE_TYPE_FILE"
                                         : "FILE_TYPE_UNSPECIFIED",
        "path", name_path, "size", size, "mode", (json_int_t)(mode & 07777), "permissions", perms,
        "owner", "user", "group", "user", "modifiedTime",
        sl_time_iso((int64_t)(mtime * 1e6), "Z", when, sizeof(when)));
    const json_t *target = json_object_get(stat, "symlink_target");
    if (e && json_is_string(target))
        json_object_set(e, "symlinkTarget", (json_t *)target);
    return e;
}

/* ---- the Filesystem service ---- */

struct envd_ctx {
    struct sl_request *req;
    const char *sandbox_id;
    int64_t generation;
};

static const char *msg_str(const json_t *msg, const char *field)
{
    const char *s = json_string_value(json_object_get(msg, field));
    return s ? s : "";
}

static json_t *fs_stat(struct envd_ctx *c, const char *ws, struct sl_error *err)
{
    _cleanup_json_ json_t *st = sl_svc_file_stat(c->req->svc, c->sandbox_id, c->generation,
                                                 (struct sl_file_path){ws, strlen(ws)}, err);
    return st ? entry_info(ws, st) : NULL;
}

static json_t *rpc_stat(struct envd_ctx *c, const json_t *msg, struct sl_error *err)
{
    char ws[4200];
    if (sl_envd_path(msg_str(msg, "path"), ws, sizeof(ws), err) < 0)
        return NULL;
    json_t *e = fs_stat(c, ws, err);
    return e ? json_pack("{s:o}", "entry", e) : NULL;
}

static int list_into(struct envd_ctx *c, const char *ws, int depth, json_t *entries,
                     struct sl_error *err)
{
    for (int64_t offset = 0;;) {
        _cleanup_json_ json_t *page =
            sl_svc_file_list(c->req->svc, c->sandbox_id, c->generation,
                             (struct sl_file_path){ws, strlen(ws)}, 1000, offset, err);
        if (!page)
            return -1;
        const json_t *list = json_object_get(page, "entries");
        size_t i;
        const json_t *item;
        json_array_foreach(list, i, item)
        {
            if (json_array_size(entries) >= LIST_MAX_ENTRIES)
                return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                                    "the listing passes %d entries: list with a smaller depth",
                                    LIST_MAX_ENTRIES);
            char child[4200];
            snprintf(child, sizeof(child), "%s/%s", ws,
                     json_string_value(json_object_get(item, "name")));
            json_array_append_new(entries, entry_info(child, item));
            const char *type = json_string_value(json_object_get(item, "type"));
            if (depth > 1 && type && strcmp(type, "directory") == 0 &&
                list_into(c, child, depth - 1, entries, err) < 0)
                return -1;
        }
        offset += (int64_t)json_array_size(list);
        if (!json_is_true(json_object_get(page, "has_more")) || json_array_size(list) == 0)
            return 0;
    }
}

static json_t *rpc_list_dir(struct envd_ctx *c, const json_t *msg, struct sl_error *err)
{
    char ws[4200];
    if (sl_envd_path(msg_str(msg, "path"), ws, sizeof(ws), err) < 0)
        return NULL;
    json_int_t depth = json_integer_value(json_object_get(msg, "depth"));
    if (depth < 1)
        depth = 1;
    if (depth > LIST_MAX_DEPTH)
        depth = LIST_MAX_DEPTH;
    json_t *entries = json_array();
    if (!entries || list_into(c, ws, (int)depth, entries, err) < 0) {
        json_decref(entries);
        return NULL;
    }
    return json_pack("{s:o}", "entries", entries);
}

static json_t *rpc_make_dir(struct envd_ctx *c, const json_t *msg, struct sl_error *err)
{
    char ws[4200];
    if (sl_envd_path(msg_str(msg, "path"), ws, sizeof(ws), err) < 0)
        return NULL;
    struct sl_error probe = {0};
    _cleanup_json_ json_t *there = fs_stat(c, ws, &probe);
    if (there) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "path already exists");
        return NULL;
    }
    _cleanup_json_ json_t *made = sl_svc_file_mkdir(c->req->svc, c->sandbox_id, c->generation,
                                                    (struct sl_file_path){ws, strlen(ws)}, true,
                                                    err);
    json_t *e = made ? fs_stat(c, ws, err) : NULL;
    return e ? json_pack("{s:o}", "entry", e) : NULL;
}

static json_t *rpc_move(struct envd_ctx *c, const json_t *msg, struct sl_error *err)
{
    char src[4200], dst[4200];
    if (sl_envd_path(msg_str(msg, "source"), src, sizeof(src), err) < 0 ||
        sl_envd_path(msg_str(msg, "destination"), dst, sizeof(dst), err) < 0)
        return NULL;
    _cleanup_json_ json_t *moved = sl_svc_file_move(
        c->req->svc, c->sandbox_id, c->generation, (struct sl_file_path){src, strlen(src)},
        (struct sl_file_path){dst, strlen(dst)}, true, err);
    json_t *e = moved ? fs_stat(c, dst, err) : NULL;
    return e ? json_pack("{s:o}", "entry", e) : NULL;
}

static json_t *rpc_remove(struct envd_ctx *c, const json_t *msg, struct sl_error *err)
{
    char ws[4200];
    if (sl_envd_path(msg_str(msg, "path"), ws, sizeof(ws), err) < 0)
        return NULL;
    _cleanup_json_ json_t *gone = sl_svc_file_delete(c->req->svc, c->sandbox_id, c->generation,
                                                     (struct sl_file_path){ws, strlen(ws)}, true,
                                                     err);
    return gone ? json_object() : NULL;
}

/* ---- WatchDir: the file watch registry's events as Connect messages ---- */

struct watch_names {
    size_t base_len; /* of the watched directory's canonical path */
};

static int watch_frame(struct sl_buf *out, json_t *msg)
{
    int rc = msg ? sl_connect_frame(out, 0, msg) : -1;
    json_decref(msg);
    return rc;
}

static int watch_begin(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    return watch_frame(out, json_pack("{s:{}}", "start"));
}

/* The file API writes through a temporary file renamed over its target:
 * its own name is not the user's. */
static bool temporary(const char *path)
{
    const char *base = strrchr(path, '/');
    return strncmp(base ? base + 1 : path, ".sandbox-write-", 15) == 0;
}

static int watch_one(struct sl_buf *out, const struct watch_names *n, const char *path,
                     const char *type)
{
    if (temporary(path))
        return 0;
    const char *name = strlen(path) > n->base_len ? path + n->base_len + 1 : "";
    return watch_frame(out, json_pack("{s:{s:s,s:s}}", "filesystem", "name", name, "type", type));
}

/* E2B's names: a path relative to the watched directory; a move is the
 * old name renamed and the new one created, as envd reports it. */
static int watch_event(void *ctx, uint64_t seq, const char *type, const char *kind,
                       const char *path, const char *from, struct sl_buf *out)
{
    (void)seq;
    (void)kind;
    const struct watch_names *n = ctx;
    /* A file the API wrote: its content arrived (and it may be new). */
    if (strcmp(type, "move") == 0 && temporary(from))
        return watch_one(out, n, path, "EVENT_TYPE_CREATE") < 0
                   ? -1
                   : watch_one(out, n, path, "EVENT_TYPE_WRITE");
    if (strcmp(type, "move") == 0)
        return watch_one(out, n, from, "EVENT_TYPE_RENAME") < 0
                   ? -1
                   : watch_one(out, n, path, "EVENT_TYPE_CREATE");
    return watch_one(out, n, path,
                     strcmp(type, "create") == 0   ? "EVENT_TYPE_CREATE"
                     : strcmp(type, "delete") == 0 ? "EVENT_TYPE_REMOVE"
                                                   : "EVENT_TYPE_WRITE");
}

static int watch_overflow(void *ctx, uint64_t dropped, struct sl_buf *out)
{
    /* E2B has no word for it: the events are gone; the stream goes on. */
    (void)ctx;
    (void)dropped;
    (void)out;
    return 0;
}

static int watch_keepalive(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    return watch_frame(out, json_pack("{s:{}}", "keepalive"));
}

static int watch_end(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    return sl_connect_end(out, NULL, NULL);
}

static void watch_release(void *ctx) { free(ctx); }

static void rpc_watch_dir(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *msg = NULL;
    const char *why = NULL;
    if (sl_connect_unwrap(req->raw_body, req->raw_len, &msg, &why) < 0) {
        sl_envd_stream_error(resp, "invalid_argument", why);
        return;
    }
    struct sl_error err = {0};
    char ws[4200];
    int64_t generation = 0;
    if (sl_envd_user_check(req, &err) < 0 || sl_envd_path(msg_str(msg, "path"), ws, sizeof(ws), &err) < 0 ||
        sl_envd_generation(req, &generation, &err) < 0) {
        sl_envd_stream_err(resp, &err);
        return;
    }
    if (json_is_true(json_object_get(msg, "includeEntry"))) {
        sl_envd_stream_error(resp, "unimplemented", "includeEntry is not supported here yet");
        return;
    }
    _cleanup_free_ char *canonical = NULL;
    int root = sl_svc_watch_open(req->svc, req->params[0], generation, ws, strlen(ws), &canonical,
                                 &err);
    if (root < 0) {
        sl_envd_stream_err(resp, &err);
        return;
    }
    struct watch_names *names = calloc(1, sizeof(*names));
    if (!names) {
        close(root);
        sl_envd_stream_error(resp, "internal", "out of memory");
        return;
    }
    names->base_len = strlen(canonical);
    struct sl_watch_encoder enc = {.begin = watch_begin,
                                   .event = watch_event,
                                   .overflow = watch_overflow,
                                   .keepalive = watch_keepalive,
                                   .end = watch_end,
                                   .release = watch_release,
                                   .ctx = names};
    struct sl_body_source *src =
        sl_fs_watch_open_encoded(req->params[0], root, canonical,
                                 json_is_true(json_object_get(msg, "recursive")), &enc, &err);
    if (!src) {
        sl_envd_stream_err(resp, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = SL_CONNECT_STREAM_TYPE;
    resp->source = src;
}

/* ---- dispatch ---- */

typedef json_t *(*unary_fn)(struct envd_ctx *c, const json_t *msg, struct sl_error *err);

static const struct {
    const char *service, *method;
    unary_fn fn;
} UNARY[] = {
    {"filesystem.Filesystem", "Stat", rpc_stat},
    {"filesystem.Filesystem", "ListDir", rpc_list_dir},
    {"filesystem.Filesystem", "MakeDir", rpc_make_dir},
    {"filesystem.Filesystem", "Move", rpc_move},
    {"filesystem.Filesystem", "Remove", rpc_remove},
};

int sl_envd_generation(struct sl_request *req, int64_t *generation, struct sl_error *err)
{
    return sl_svc_current_generation(req->svc, req->params[0], generation, err);
}

int sl_envd_command_quota_enter(struct sl_request *req, bool *held, struct sl_error *err)
{
    /* The access token names the tenant, not its limits: the sandbox's
     * stored id gives them (cached a second). */
    struct sl_principal who = *req->principal;
    int64_t value = 0;
    *held = false;
    if (sl_svc_principal_of_sandbox(req->svc, req->params[0], &who, err) < 0)
        return -1;
    return sl_svc_quota_enter(req->svc, &who, SL_LIMIT_COMMANDS, NULL, held, &value, err);
}

void sl_envd_rpc(struct sl_request *req, struct sl_response *resp)
{
    const char *service = req->params[1], *method = req->params[2];
    const char *type = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Type");
    bool streaming = type && strncasecmp(type, SL_CONNECT_STREAM_TYPE,
                                         strlen(SL_CONNECT_STREAM_TYPE)) == 0;
    if (strcmp(service, "process.Process") == 0) {
        sl_envd_process(req, resp, method, streaming);
        return;
    }
    struct sl_error err = {0};
    if (streaming && strcmp(service, "filesystem.Filesystem") == 0 &&
        strcmp(method, "WatchDir") == 0) {
        rpc_watch_dir(req, resp);
        return;
    }
    for (size_t i = 0; i < sizeof(UNARY) / sizeof(UNARY[0]); i++) {
        if (strcmp(UNARY[i].service, service) != 0 || strcmp(UNARY[i].method, method) != 0)
            continue;
        _cleanup_json_ json_t *msg =
            req->raw_len ? json_loadb(req->raw_body, req->raw_len, 0, NULL) : json_object();
        if (!json_is_object(msg)) {
            sl_envd_unary_error(resp, "invalid_argument", "the request is not a JSON object");
            return;
        }
        struct envd_ctx c = {.req = req, .sandbox_id = req->params[0]};
        if (sl_envd_user_check(req, &err) < 0 || sl_envd_generation(req, &c.generation, &err) < 0) {
            sl_envd_unary_err(resp, &err);
            return;
        }
        json_t *out = UNARY[i].fn(&c, msg, &err);
        if (out)
            sl_envd_unary(resp, out);
        else
            sl_envd_unary_err(resp, &err);
        return;
    }
    if (streaming)
        sl_envd_stream_error(resp, "unimplemented", "no such RPC in this service's envd");
    else
        sl_envd_unary_error(resp, "unimplemented", "no such RPC in this service's envd");
}

/* ---- REST ---- */

static void respond_rest_err(struct sl_response *resp, const struct sl_error *err)
{
    const char *code = sl_connect_code_of(err);
    int status = strcmp(code, "not_found") == 0 ? 404 : sl_api_status_for_code(err->code);
    snprintf(resp->log_detail, sizeof(resp->log_detail), "%s: %.200s", err->code,
             err->detail[0] ? err->detail : err->message);
    sl_e2b_respond_error(resp, status, status == 500 ? "internal error" : err->message);
}

void sl_envd_health(struct sl_request *req, struct sl_response *resp)
{
    int64_t generation = 0;
    struct sl_error err = {0};
    /* 502 is what the SDK reads as "not running". */
    if (sl_envd_generation(req, &generation, &err) < 0) {
        sl_e2b_respond_error(resp, 502, "the sandbox is not running");
        return;
    }
    resp->status = 204;
    resp->content_type = "text/plain";
    resp->body = strdup("");
    resp->len = 0;
}

void sl_envd_files_get(struct sl_request *req, struct sl_response *resp)
{
    const char *path = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "path");
    struct sl_error err = {0};
    char ws[4200];
    int64_t generation = 0;
    if (!path) {
        sl_e2b_respond_error(resp, 400, "path is required");
        return;
    }
    if (sl_envd_user_check(req, &err) < 0 || sl_envd_path(path, ws, sizeof(ws), &err) < 0 ||
        sl_envd_generation(req, &generation, &err) < 0) {
        respond_rest_err(resp, &err);
        return;
    }
    struct sl_buf data;
    if (sl_svc_file_read_bytes(req->svc, req->params[0], generation,
                               (struct sl_file_path){ws, strlen(ws)}, &data, &err) < 0) {
        respond_rest_err(resp, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = "application/octet-stream";
    resp->body = data.data ? data.data : strdup("");
    resp->len = data.len;
}

/* One file written: its WriteInfo. */
static json_t *write_one(struct sl_request *req, int64_t generation, const char *path,
                         const char *data, size_t len, struct sl_error *err)
{
    char ws[4200], name[4200];
    if (sl_envd_path(path, ws, sizeof(ws), err) < 0)
        return NULL;
    _cleanup_json_ json_t *done = sl_svc_file_write_bytes(
        req->svc, req->params[0], generation, (struct sl_file_path){ws, strlen(ws)}, data, len,
        err);
    if (!done)
        return NULL;
    e2b_name(ws, name, sizeof(name));
    const char *slash = strrchr(name, '/');
    return json_pack("{s:s,s:s,s:s}", "name", slash ? slash + 1 : name, "type", "file", "path",
                     name);
}

/* A part's filename="…" (the full target path), in out. */
static bool part_filename(const char *headers, size_t len, char *out, size_t size)
{
    const char *p = memmem(headers, len, "filename=\"", 10);
    if (!p)
        return false;
    p += 10;
    const char *end = memchr(p, '"', (size_t)(headers + len - p));
    if (!end || (size_t)(end - p) >= size)
        return false;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return true;
}

/* multipart/form-data: every part named "file" written to its filename,
 * or to `path` when the request names one (a single file). */
static json_t *write_multipart(struct sl_request *req, int64_t generation, const char *type,
                               const char *path, struct sl_error *err)
{
    const char *b = strstr(type, "boundary=");
    if (!b) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "the multipart body has no boundary");
        return NULL;
    }
    b += 9;
    char delim[200];
    size_t bl = strcspn(b, ";");
    if (*b == '"')
        bl = strcspn(++b, "\"");
    if (bl == 0 || bl > 150) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "the multipart boundary is not usable");
        return NULL;
    }
    /* A delimiter after the first starts its own line: content that holds
     * "--<boundary>" elsewhere is content. */
    int dl = snprintf(delim, sizeof(delim), "\r\n--%.*s", (int)bl, b);
    json_t *out = json_array();
    const char *p = req->raw_body ? req->raw_body : "", *end = p + req->raw_len;
    /* `head`: just past a delimiter (the first one may open the body). */
    const char *head = NULL;
    if ((size_t)(end - p) >= (size_t)dl - 2 && memcmp(p, delim + 2, (size_t)dl - 2) == 0) {
        head = p + dl - 2;
    } else {
        const char *first = memmem(p, (size_t)(end - p), delim, (size_t)dl);
        head = first ? first + dl : NULL;
    }
    size_t parts = 0;
    while (out && head) {
        if (++parts > MAX_PARTS) {
            sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                         "an upload holds at most %d files: send the rest in another", MAX_PARTS);
            json_decref(out);
            return NULL;
        }
        if (end - head >= 2 && head[0] == '-' && head[1] == '-')
            break; /* the closing delimiter */
        head += 2; /* the CRLF ending the delimiter's line */
        const char *body = head < end ? memmem(head, (size_t)(end - head), "\r\n\r\n", 4) : NULL;
        if (!body)
            break;
        body += 4;
        const char *next = memmem(body, (size_t)(end - body), delim, (size_t)dl);
        if (!next) {
            sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "the multipart body is cut short");
            json_decref(out);
            return NULL;
        }
        char name[4200];
        const char *target = path;
        if (!target) {
            if (!part_filename(head, (size_t)(body - head), name, sizeof(name))) {
                sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "a part has no filename (its path)");
                json_decref(out);
                return NULL;
            }
            target = name;
        }
        json_t *info = write_one(req, generation, target, body, (size_t)(next - body), err);
        if (!info) {
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, info);
        head = next + dl;
    }
    if (out && json_array_size(out) == 0) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "the upload holds no file");
        json_decref(out);
        return NULL;
    }
    return out;
}

/* A gzip body inflated, at most `max` bytes (a bomb stops there). */
static int gunzip(const char *in, size_t len, size_t max, struct sl_buf *out,
                  struct sl_error *err)
{
    sl_buf_init(out, max);
    z_stream z = {0};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return sl_error_set(err, SL_E_INTERNAL, 0, "cannot inflate the upload");
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    char chunk[65536];
    int rc = Z_OK;
    while (rc == Z_OK) {
        z.next_out = (Bytef *)chunk;
        z.avail_out = sizeof(chunk);
        rc = inflate(&z, Z_NO_FLUSH);
        size_t got = sizeof(chunk) - z.avail_out;
        if ((rc == Z_OK || rc == Z_STREAM_END) && got && sl_buf_append(out, chunk, got) < 0) {
            inflateEnd(&z);
            return sl_error_set(err, SL_E_INVALID_ARGUMENT, EFBIG,
                                "file exceeds the sandbox File API size limit");
        }
        if (rc == Z_OK && got == 0 && z.avail_in == 0)
            rc = Z_BUF_ERROR; /* the stream ends before its end */
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "the upload is not valid gzip");
    return 0;
}

void sl_envd_files_post(struct sl_request *req, struct sl_response *resp)
{
    const char *path = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "path");
    const char *type = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Type");
    const char *encoding =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Encoding");
    struct sl_error err = {0};
    int64_t generation = 0;
    if (sl_envd_user_check(req, &err) < 0 || sl_envd_generation(req, &generation, &err) < 0) {
        respond_rest_err(resp, &err);
        return;
    }
    bool gzip = encoding && strcasecmp(encoding, "gzip") == 0;
    if (encoding && !gzip && strcasecmp(encoding, "identity") != 0) {
        sl_e2b_respond_error(resp, 415, "an upload's Content-Encoding is gzip or none");
        return;
    }
    json_t *out = NULL;
    if (gzip && (!path || (type && strncasecmp(type, "multipart/", 10) == 0))) {
        sl_e2b_respond_error(resp, 415, "a gzip upload is application/octet-stream with path");
        return;
    } else if (type && strncasecmp(type, "multipart/form-data", 19) == 0) {
        out = write_multipart(req, generation, type, path, &err);
    } else if (path && gzip) {
        struct sl_buf plain;
        if (gunzip(req->raw_body ? req->raw_body : "", req->raw_len,
                   (size_t)sl_service_config(req->svc)->max_file_api_bytes, &plain, &err) == 0) {
            json_t *one = write_one(req, generation, path, plain.data ? plain.data : "",
                                    plain.len, &err);
            out = one ? json_pack("[o]", one) : NULL;
        }
        sl_buf_free(&plain);
    } else if (path) {
        json_t *one = write_one(req, generation, path, req->raw_body ? req->raw_body : "",
                                req->raw_len, &err);
        out = one ? json_pack("[o]", one) : NULL;
    } else {
        sl_error_set(err.code[0] ? &err : &err, SL_E_INVALID_ARGUMENT, 0,
                     "an upload is multipart/form-data, or application/octet-stream with path");
    }
    if (!out) {
        respond_rest_err(resp, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = json_dumps(out, JSON_COMPACT);
    resp->len = resp->body ? strlen(resp->body) : 0;
    json_decref(out);
}
