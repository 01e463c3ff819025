/* Pure helpers: time, random identifiers, string lists, buffers.
 * No module state; thread-safe. */
#ifndef SL_COMMON_UTIL_H
#define SL_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Wall clock in microseconds since the epoch (UTC). */
int64_t sl_now_us(void);
/* Monotonic clock in microseconds. */
int64_t sl_mono_us(void);

/* ISO-8601 UTC from microseconds since the epoch, Python isoformat style:
 * "2026-09-30T17:43:53.123456" (microseconds omitted when zero), followed by
 * `suffix` ("" for naive, "Z", "+00:00"). buf needs 40 bytes. */
char *sl_time_iso(int64_t us, const char *suffix, char *buf, size_t size);
/* Parse "YYYY-MM-DD[T ]HH:MM:SS[.ffffff][Z|+00:00]" as UTC; -1 on error. */
int sl_time_parse(const char *text, int64_t *us);

/* Fill buf with 2*nbytes lowercase hex characters of kernel randomness
 * (getrandom) and a NUL. Returns 0, or -1 with errno. */
int sl_random_hex(char *buf, size_t nbytes);
/* rm -rf of path: nothing followed, no other filesystem entered (a mount
 * below it stays, and so does its mount point). 0, or -1 when something
 * was left; a path that is not there is removed already. */
int sl_tree_remove(const char *path);
/* Uniform random integer in [lo, hi]. */
int sl_random_range(int64_t lo, int64_t hi, int64_t *out);

/* Lowercase hex SHA-256 of data (65 bytes incl. NUL). */
void sl_sha256_hex(const void *data, size_t len, char out[65]);

/* Constant-time equality of two byte strings of possibly different length. */
bool sl_consttime_equal(const char *a, size_t alen, const char *b, size_t blen);

/* A growable list of owned strings. */
struct sl_strlist {
    char **items;
    size_t len;
};
int sl_strlist_push(struct sl_strlist *list, const char *s);
bool sl_strlist_contains(const struct sl_strlist *list, const char *s);
void sl_strlist_free(struct sl_strlist *list);

/* free() of a string that held a secret (a token, a password), zeroed
 * first; NULL is fine. */
void sl_free_secret(char *s);
/* A malloc'd, NUL-terminated copy of s[0..n) with %XX escapes decoded (the
 * userinfo of a database or Redis URL); NULL when out of memory. */
char *sl_percent_decode(const char *s, size_t n);

/* A bounded byte buffer (curl's dynbuf idea): appends fail with -1/ENOBUFS
 * past `max`. */
struct sl_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
};
void sl_buf_init(struct sl_buf *b, size_t max);
int sl_buf_append(struct sl_buf *b, const void *data, size_t len);
void sl_buf_free(struct sl_buf *b);

#endif
