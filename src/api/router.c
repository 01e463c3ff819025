#include <stdio.h>
#include <string.h>

#include "api/router.h"

/* Split off the next '/'-separated segment; returns NULL at the end. */
static char *next_segment(char **cursor)
{
    char *s = *cursor;
    if (!s || !*s)
        return NULL;
    if (*s == '/')
        s++;
    char *slash = strchr(s, '/');
    if (slash) {
        *slash = '\0';
        *cursor = slash + 1;
    } else {
        *cursor = s + strlen(s);
    }
    return s;
}

/* Match a pattern against path segments; fills params. */
static bool pattern_match(const char *pattern, char **segs, size_t nsegs, const char **params,
                          size_t *nparams)
{
    char pat[256];
    strncpy(pat, pattern, sizeof(pat) - 1);
    pat[sizeof(pat) - 1] = '\0';
    char *cursor = pat;
    size_t i = 0, np = 0;
    char *p;
    while ((p = next_segment(&cursor))) {
        if (i >= nsegs)
            return false;
        if (p[0] == '{') {
            if (!segs[i][0] || np >= SL_ROUTE_MAX_PARAMS)
                return false;
            params[np++] = segs[i];
        } else if (strcmp(p, segs[i]) != 0) {
            return false;
        }
        i++;
    }
    if (i != nsegs)
        return false;
    *nparams = np;
    return true;
}

/* A route whose pattern ends in "/{*}" takes the rest of the path, any
 * number of segments, a trailing slash included, as its last parameter
 * (without its leading '/': "" for the path ending there or with a '/').
 * Matched on the whole path before it is split: on success the fixed
 * parameters are cut out of pathbuf with NULs (where their '/' was). */
#define TAIL "/{*}"

static bool tail_match(const char *pattern, char *pathbuf, const char **params, size_t *nparams)
{
    size_t plen = strlen(pattern), tlen = strlen(TAIL);
    if (plen <= tlen || strcmp(pattern + plen - tlen, TAIL) != 0)
        return false;
    const char *pat = pattern, *pat_end = pattern + plen - tlen;
    char *at = pathbuf;
    char *cut[SL_ROUTE_MAX_PARAMS];
    size_t np = 0;
    while (pat < pat_end) {
        if (*pat != '/' || *at != '/')
            return false;
        pat++;
        at++;
        const char *pseg_end = memchr(pat, '/', (size_t)(pat_end - pat));
        if (!pseg_end)
            pseg_end = pat_end;
        size_t seg_len = strcspn(at, "/");
        if (*pat == '{') {
            if (!seg_len || np + 1 >= SL_ROUTE_MAX_PARAMS)
                return false;
            params[np] = at;
            cut[np++] = at + seg_len;
        } else if ((size_t)(pseg_end - pat) != seg_len || strncmp(pat, at, seg_len) != 0) {
            return false;
        }
        pat = pseg_end;
        at += seg_len;
    }
    if (*at && *at != '/')
        return false;
    char *tail = *at ? at + 1 : at;
    for (size_t i = 0; i < np; i++)
        *cut[i] = '\0';
    params[np++] = tail;
    *nparams = np;
    return true;
}

enum sl_match sl_router_match(const char *method, char *pathbuf, const struct sl_route_def **out,
                              const char **params, size_t *nparams, char *allow,
                              size_t allow_size)
{
    /* Routes with a tail first: their paths are no other route's. */
    {
        const char *lookup = strcmp(method, "HEAD") == 0 ? "GET" : method;
        bool seen = false;
        allow[0] = '\0';
        for (size_t r = 0; r < sl_routes_len; r++) {
            if (!strstr(sl_routes[r].pattern, TAIL))
                continue;
            char probe[4096];
            if (strlen(pathbuf) >= sizeof(probe))
                continue;
            strcpy(probe, pathbuf);
            const char *tmp[SL_ROUTE_MAX_PARAMS];
            size_t ntmp = 0;
            if (!tail_match(sl_routes[r].pattern, probe, tmp, &ntmp))
                continue;
            seen = true;
            if (strcmp(sl_routes[r].method, lookup) == 0) {
                tail_match(sl_routes[r].pattern, pathbuf, params, nparams);
                *out = &sl_routes[r];
                return SL_MATCH_OK;
            }
            if (!strstr(allow, sl_routes[r].method)) {
                size_t used = strlen(allow);
                snprintf(allow + used, allow_size - used, "%s%s", used ? ", " : "",
                         sl_routes[r].method);
            }
        }
        if (seen)
            return SL_MATCH_METHOD;
    }

    char *segs[16];
    size_t nsegs = 0;
    char *cursor = pathbuf, *s;
    /* A trailing slash is a different path (as in the reference's router). */
    size_t plen = strlen(pathbuf);
    bool trailing = plen > 1 && pathbuf[plen - 1] == '/';
    while ((s = next_segment(&cursor))) {
        if (nsegs == sizeof(segs) / sizeof(segs[0]))
            return SL_MATCH_NONE;
        segs[nsegs++] = s;
    }
    if (trailing)
        return SL_MATCH_NONE;
    const char *lookup = strcmp(method, "HEAD") == 0 ? "GET" : method;
    allow[0] = '\0';
    bool path_seen = false;
    for (size_t r = 0; r < sl_routes_len; r++) {
        const char *tmp[SL_ROUTE_MAX_PARAMS];
        size_t ntmp = 0;
        if (!pattern_match(sl_routes[r].pattern, segs, nsegs, tmp, &ntmp))
            continue;
        if (strcmp(sl_routes[r].method, lookup) == 0) {
            *out = &sl_routes[r];
            memcpy(params, tmp, sizeof(tmp));
            *nparams = ntmp;
            return SL_MATCH_OK;
        }
        /* A literal route declared earlier shadows a parameter route for the
         * same method only when it matches; collect every method of this
         * path for the Allow header. */
        if (!strstr(allow, sl_routes[r].method)) {
            size_t used = strlen(allow);
            snprintf(allow + used, allow_size - used, "%s%s", used ? ", " : "",
                     sl_routes[r].method);
        }
        path_seen = true;
    }
    return path_seen ? SL_MATCH_METHOD : SL_MATCH_NONE;
}

bool sl_router_path_protected(const char *path)
{
    return strncmp(path, "/api/", 5) == 0 || strcmp(path, "/api") == 0 ||
           strncmp(path, "/internal/", 10) == 0;
}
