/* File API path normalisation (API.md §5.1). Pure string work: nothing here
 * touches the filesystem, so the result is only a list of components that
 * files.c then resolves beneath the workspace descriptor. */
#include "workspace/files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WPATH_REFUSED_MSG "file path may not contain .. or NUL"
#define WPATH_PREFIX "/workspace"

static bool wpath_has_dotdot(const char *p, size_t len)
{
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || p[i] == '/') {
            if (i - start == 2 && p[start] == '.' && p[start + 1] == '.')
                return true;
            start = i + 1;
        }
    }
    return false;
}

static int wpath_push(struct sl_wpath *out, const char *s, size_t n)
{
    char *comp = strndup(s, n);
    if (!comp)
        return -1;
    char **comps = realloc(out->comps, (out->n + 1) * sizeof(*comps));
    if (!comps) {
        free(comp);
        return -1;
    }
    comps[out->n++] = comp;
    out->comps = comps;
    return 0;
}

static char *wpath_join(const struct sl_wpath *p)
{
    size_t size = sizeof(WPATH_PREFIX);
    for (size_t i = 0; i < p->n; i++)
        size += 1 + strlen(p->comps[i]);
    char *s = malloc(size);
    if (!s)
        return NULL;
    char *w = stpcpy(s, WPATH_PREFIX);
    for (size_t i = 0; i < p->n; i++) {
        *w++ = '/';
        w = stpcpy(w, p->comps[i]);
    }
    return s;
}

int sl_wpath_parse(const char *path, size_t len, struct sl_wpath *out, struct sl_error *err)
{
    out->comps = NULL;
    out->n = 0;
    out->canonical = NULL;

    if (memchr(path, '\0', len) || wpath_has_dotdot(path, len))
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, WPATH_REFUSED_MSG);

    while (len > 0 && path[len - 1] == '/')
        len--;
    const size_t plen = strlen(WPATH_PREFIX);
    bool root = len == 0 || (len == plen && memcmp(path, WPATH_PREFIX, plen) == 0);
    if (!root) {
        if (len > plen && memcmp(path, WPATH_PREFIX "/", plen + 1) == 0) {
            path += plen + 1;
            len -= plen + 1;
        }
        while (len > 0 && *path == '/') {
            path++;
            len--;
        }
        size_t start = 0;
        for (size_t i = 0; i <= len; i++) {
            if (i < len && path[i] != '/')
                continue;
            size_t n = i - start;
            bool skip = n == 0 || (n == 1 && path[start] == '.');
            if (!skip && wpath_push(out, path + start, n) < 0)
                goto oom;
            start = i + 1;
        }
    }
    out->canonical = wpath_join(out);
    if (!out->canonical)
        goto oom;
    return 0;

oom:
    sl_wpath_free(out);
    return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
}

void sl_wpath_free(struct sl_wpath *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->comps[i]);
    free(p->comps);
    free(p->canonical);
    p->comps = NULL;
    p->n = 0;
    p->canonical = NULL;
}
