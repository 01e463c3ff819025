#include "common/util.h"

#include <errno.h>
#include <ftw.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t sl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t sl_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

char *sl_time_iso(int64_t us, const char *suffix, char *buf, size_t size)
{
    time_t secs = (time_t)(us / 1000000);
    long frac = (long)(us % 1000000);
    if (frac < 0) {
        frac += 1000000;
        secs -= 1;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    if (frac)
        snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06ld%s", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac, suffix);
    else
        snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d%s", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, suffix);
    return buf;
}

int sl_time_parse(const char *text, int64_t *us)
{
    struct tm tm = {0};
    int n = 0;
    if (sscanf(text, "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    long frac = 0;
    const char *p = text + n;
    if (*p == '.') {
        p++;
        int digits = 0;
        while (*p >= '0' && *p <= '9') {
            if (digits < 6) {
                frac = frac * 10 + (*p - '0');
                digits++;
            }
            p++;
        }
        while (digits++ < 6)
            frac *= 10;
    }
    if (*p && strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
        return -1;
    time_t secs = timegm(&tm);
    if (secs == (time_t)-1)
        return -1;
    *us = (int64_t)secs * 1000000 + frac;
    return 0;
}

int sl_random_hex(char *buf, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof(raw)) {
        errno = EINVAL;
        return -1;
    }
    size_t got = 0;
    while (got < nbytes) {
        ssize_t r = getrandom(raw + got, nbytes - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[2 * nbytes] = '\0';
    return 0;
}

int sl_random_range(int64_t lo, int64_t hi, int64_t *out)
{
    uint64_t span = (uint64_t)(hi - lo) + 1, r;
    /* Rejection sampling keeps the draw uniform. */
    uint64_t limit = UINT64_MAX - (UINT64_MAX % span);
    do {
        if (getrandom(&r, sizeof(r), 0) != sizeof(r))
            return -1;
    } while (r >= limit);
    *out = lo + (int64_t)(r % span);
    return 0;
}

void sl_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(data, len, digest);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[64] = '\0';
}

bool sl_consttime_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Runs over the expected length whatever the input, so timing reveals
     * neither the matching prefix nor the token length. */
    unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char ca = i < alen ? (unsigned char)a[i] : 0;
        diff |= ca ^ (unsigned char)b[i];
    }
    return diff == 0;
}

int sl_strlist_push(struct sl_strlist *list, const char *s)
{
    char *copy = strdup(s);
    if (!copy)
        return -1;
    char **items = realloc(list->items, (list->len + 1) * sizeof(*items));
    if (!items) {
        free(copy);
        return -1;
    }
    items[list->len++] = copy;
    list->items = items;
    return 0;
}

bool sl_strlist_contains(const struct sl_strlist *list, const char *s)
{
    for (size_t i = 0; i < list->len; i++)
        if (strcmp(list->items[i], s) == 0)
            return true;
    return false;
}

void sl_strlist_free(struct sl_strlist *list)
{
    for (size_t i = 0; i < list->len; i++)
        free(list->items[i]);
    free(list->items);
    list->items = NULL;
    list->len = 0;
}

void sl_buf_init(struct sl_buf *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

int sl_buf_append(struct sl_buf *b, const void *data, size_t len)
{
    if (len > b->max - b->len) {
        errno = ENOBUFS;
        return -1;
    }
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p)
            return -1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

void sl_buf_free(struct sl_buf *b)
{
    free(b->data);
    sl_buf_init(b, b->max);
}

void sl_free_secret(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

char *sl_percent_decode(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            out[j++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = '\0';
    return out;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

int sl_tree_remove(const char *path)
{
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0 ? 0 : -1;
}
