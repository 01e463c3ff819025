#include "cli/copy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base64.h"

#define FILE_TIMEOUT_S 300L
/* What the CLI reads into memory to send one file; the service's own
 * File API limit (SANDBOX_MAX_FILE_BYTES) is the one that decides. */
#define UPLOAD_MAX (64L * 1024 * 1024)
/* Entries asked per listing page (the service caps it at its own
 * SANDBOX_MAX_LIST_ENTRIES). */
#define LIST_PAGE 1000
/* Below this, a transfer is quick enough to need no progress line. */
#define PROGRESS_MIN_BYTES (1024 * 1024)

struct item {
    char *src, *dst;
    uint64_t size;
    bool dir;
};

struct plan {
    struct item *items;
    size_t n, cap;
    uint64_t bytes, files;
    size_t links; /* symbolic links seen and left */
};

struct progress {
    bool on;
    uint64_t bytes_total, bytes_done, files_total, files_done;
};

static int fail(struct cli_error *e, const char *code, const char *fmt, const char *a,
                const char *b)
{
    snprintf(e->code, sizeof(e->code), "%s", code);
    snprintf(e->message, sizeof(e->message), fmt, a, b);
    return -1;
}

static int oom(struct cli_error *e)
{
    return fail(e, "CLI_INTERNAL", "out of memory%s%s", "", "");
}

static void plan_free(struct plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->items[i].src);
        free(p->items[i].dst);
    }
    free(p->items);
}

static int plan_add(struct plan *p, const char *src, const char *dst, uint64_t size, bool dir,
                    struct cli_error *e)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct item *grown = realloc(p->items, cap * sizeof(*grown));
        if (!grown)
            return oom(e);
        p->items = grown;
        p->cap = cap;
    }
    struct item *it = &p->items[p->n];
    it->src = strdup(src);
    it->dst = strdup(dst);
    if (!it->src || !it->dst) {
        free(it->src);
        free(it->dst);
        return oom(e);
    }
    it->size = size;
    it->dir = dir;
    p->n++;
    if (!dir) {
        p->bytes += size;
        p->files++;
    }
    return 0;
}

static char *joined(const char *dir, const char *name)
{
    char *s = NULL;
    size_t n = strlen(dir);
    if (asprintf(&s, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0)
        return NULL;
    return s;
}

/* One path component, as a directory listing must give it. */
static bool plain_name(const char *name)
{
    return *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static void progress_show(struct progress *pr, bool last)
{
    if (!pr->on)
        return;
    fprintf(stderr, "\rsandloom cp: %.1f / %.1f MiB, %llu / %llu files%s",
            (double)pr->bytes_done / 1048576.0, (double)pr->bytes_total / 1048576.0,
            (unsigned long long)pr->files_done, (unsigned long long)pr->files_total,
            last ? "\n" : "");
    fflush(stderr);
}

/* ---- one file ------------------------------------------------------------ */

/* GET `route`?path=PATH`extra` on the sandbox: the one way a workspace
 * path goes into a query (escaped). */
static int get_path(struct cli_sandbox *sb, const char *route, const char *path,
                    const char *extra, json_t **doc, struct cli_error *e)
{
    char *escaped = cli_escape(path), *query = NULL;
    if (escaped && asprintf(&query, "?path=%s%s", escaped, extra) < 0)
        query = NULL;
    free(escaped);
    if (!query)
        return oom(e);
    int rc = cli_sandbox_call(sb, "GET", route, query, NULL, FILE_TIMEOUT_S, doc, e);
    free(query);
    return rc;
}

int cli_read_file(struct cli_sandbox *sb, const char *path, struct sl_buf *out,
                  struct cli_error *e)
{
    json_t *doc = NULL;
    int rc = get_path(sb, "/files", path, "", &doc, e);
    if (rc < 0)
        return -1;
    const char *b64 = json_string_value(json_object_get(doc, "content_base64"));
    struct sl_error derr = {0};
    rc = b64 ? sl_base64_decode_strict(b64, strlen(b64), out, SIZE_MAX / 2, &derr) : -1;
    json_decref(doc);
    if (rc < 0)
        return fail(e, "CLI_BAD_ANSWER", "the content of %s is not valid base64%s", path, "");
    return 0;
}

static int write_remote(struct cli_sandbox *sb, const char *local, const char *remote,
                        struct cli_error *e)
{
    FILE *f = fopen(local, "re");
    if (!f)
        return fail(e, "CLI_LOCAL_FILE", "cannot read %s: %s", local, strerror(errno));
    struct sl_buf data;
    sl_buf_init(&data, (size_t)UPLOAD_MAX);
    char chunk[65536];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        ok = sl_buf_append(&data, chunk, n) == 0;
    ok = ok && !ferror(f);
    fclose(f);
    if (!ok) {
        sl_buf_free(&data);
        return fail(e, "CLI_LOCAL_FILE", "cannot read %s (or it is larger than the CLI sends%s)",
                    local, ", 64 MiB");
    }
    char *b64 = sl_base64_encode(data.data ? data.data : "", data.len);
    sl_buf_free(&data);
    if (!b64)
        return oom(e);
    json_t *body = json_pack("{s:s,s:s}", "path", remote, "content_base64", b64);
    free(b64);
    json_t *doc = NULL;
    int rc = cli_sandbox_call(sb, "PUT", "/files", "", body, FILE_TIMEOUT_S, &doc, e);
    json_decref(body);
    json_decref(doc);
    return rc;
}

static int mkdir_remote(struct cli_sandbox *sb, const char *remote, struct cli_error *e)
{
    json_t *body = json_pack("{s:s,s:b}", "path", remote, "parents", 1);
    json_t *doc = NULL;
    int rc = cli_sandbox_call(sb, "POST", "/files/mkdir", "", body, FILE_TIMEOUT_S, &doc, e);
    json_decref(body);
    json_decref(doc);
    return rc;
}

static int write_local(const char *path, const struct sl_buf *data, struct cli_error *e)
{
    FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "we");
    bool ok = f && fwrite(data->data, 1, data->len, f) == data->len;
    if (f == stdout)
        ok = ok && fflush(stdout) == 0;
    else if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        return fail(e, "CLI_LOCAL_FILE", "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* ---- walks ----------------------------------------------------------------- */

static int walk_local(const char *dir, const char *remote, struct plan *p, struct cli_error *e)
{
    if (plan_add(p, dir, remote, 0, true, e) < 0)
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return fail(e, "CLI_LOCAL_FILE", "cannot read the directory %s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (!plain_name(de->d_name))
            continue;
        char *src = joined(dir, de->d_name), *dst = joined(remote, de->d_name);
        struct stat st;
        if (!src || !dst) {
            rc = oom(e);
        } else if (lstat(src, &st) < 0) {
            rc = fail(e, "CLI_LOCAL_FILE", "cannot stat %s: %s", src, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk_local(src, dst, p, e);
        } else if (S_ISREG(st.st_mode)) {
            rc = plan_add(p, src, dst, (uint64_t)st.st_size, false, e);
        } else {
            p->links += S_ISLNK(st.st_mode);
            fprintf(stderr, "sandloom cp: left %s (not a regular file or directory)\n", src);
        }
        free(src);
        free(dst);
    }
    closedir(d);
    return rc;
}

static int walk_remote(struct cli_sandbox *sb, const char *remote, const char *local,
                       struct plan *p, struct cli_error *e)
{
    if (plan_add(p, remote, local, 0, true, e) < 0)
        return -1;
    for (long offset = 0;;) {
        char extra[64];
        snprintf(extra, sizeof(extra), "&limit=%d&offset=%ld", LIST_PAGE, offset);
        json_t *doc = NULL;
        int rc = get_path(sb, "/files/list", remote, extra, &doc, e);
        if (rc < 0)
            return -1;
        json_t *entries = json_object_get(doc, "entries"), *entry;
        size_t i;
        json_array_foreach(entries, i, entry) {
            const char *name = json_string_value(json_object_get(entry, "name"));
            const char *type = json_string_value(json_object_get(entry, "type"));
            if (!name || !type || !plain_name(name)) {
                json_decref(doc);
                return fail(e, "CLI_BAD_ANSWER", "the listing of %s names an entry '%s'", remote,
                            name ? name : "");
            }
            char *src = joined(remote, name), *dst = joined(local, name);
            if (!src || !dst)
                rc = oom(e);
            else if (strcmp(type, "directory") == 0)
                rc = walk_remote(sb, src, dst, p, e);
            else if (strcmp(type, "file") == 0)
                rc = plan_add(p, src, dst,
                              (uint64_t)json_integer_value(json_object_get(entry, "size_bytes")),
                              false, e);
            else {
                p->links += strcmp(type, "symlink") == 0;
                fprintf(stderr, "sandloom cp: left %s (a %s)\n", src, type);
            }
            free(src);
            free(dst);
            if (rc < 0) {
                json_decref(doc);
                return -1;
            }
        }
        bool more = json_is_true(json_object_get(doc, "has_more"));
        offset += (long)json_array_size(entries);
        size_t got = json_array_size(entries);
        json_decref(doc);
        if (!more || got == 0)
            return 0;
    }
}

/* ---- transfers ------------------------------------------------------------- */

static void progress_start(struct progress *pr, const struct plan *p, bool wanted)
{
    pr->on = wanted && p->bytes >= PROGRESS_MIN_BYTES;
    pr->bytes_total = p->bytes;
    pr->files_total = p->files;
}

static void progress_step(struct progress *pr, const struct item *it)
{
    pr->bytes_done += it->size;
    pr->files_done++;
    progress_show(pr, pr->files_done == pr->files_total);
}

int cli_upload(struct cli_sandbox *sb, const char *local, const char *remote, bool recursive,
               bool progress, struct cli_error *e)
{
    struct stat st;
    if (stat(local, &st) < 0)
        return fail(e, "CLI_LOCAL_FILE", "cannot read %s: %s", local, strerror(errno));
    if (S_ISDIR(st.st_mode) && !recursive)
        return fail(e, "CLI_USAGE", "%s is a directory (cp -r copies directories)%s", local, "");
    if (cli_sandbox_open(sb, e) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode))
        return write_remote(sb, local, remote, e);
    struct plan p = {0};
    struct progress pr = {0};
    int rc = walk_local(local, remote, &p, e);
    progress_start(&pr, &p, progress);
    for (size_t i = 0; rc == 0 && i < p.n; i++) {
        const struct item *it = &p.items[i];
        rc = it->dir ? mkdir_remote(sb, it->dst, e) : write_remote(sb, it->src, it->dst, e);
        if (rc == 0 && !it->dir)
            progress_step(&pr, it);
    }
    if (rc < 0 && pr.on)
        fputc('\n', stderr);
    plan_free(&p);
    return rc;
}

int cli_download(struct cli_sandbox *sb, const char *remote, const char *local, bool recursive,
                 bool progress, struct cli_error *e)
{
    if (cli_sandbox_open(sb, e) < 0)
        return -1;
    if (!recursive) {
        struct sl_buf data = {0};
        if (cli_read_file(sb, remote, &data, e) < 0)
            return -1;
        int rc = write_local(local, &data, e);
        sl_buf_free(&data);
        return rc;
    }
    if (strcmp(local, "-") == 0)
        return fail(e, "CLI_USAGE", "cp -r cannot write a directory to standard output%s%s", "",
                    "");
    struct plan p = {0};
    struct progress pr = {0};
    int rc = walk_remote(sb, remote, local, &p, e);
    progress_start(&pr, &p, progress);
    for (size_t i = 0; rc == 0 && i < p.n; i++) {
        const struct item *it = &p.items[i];
        if (it->dir) {
            if (mkdir(it->dst, 0755) < 0 && errno != EEXIST)
                rc = fail(e, "CLI_LOCAL_FILE", "cannot make %s: %s", it->dst, strerror(errno));
            continue;
        }
        struct sl_buf data = {0};
        rc = cli_read_file(sb, it->src, &data, e);
        if (rc == 0)
            rc = write_local(it->dst, &data, e);
        sl_buf_free(&data);
        if (rc == 0)
            progress_step(&pr, it);
    }
    if (rc < 0 && pr.on)
        fputc('\n', stderr);
    plan_free(&p);
    return rc;
}
