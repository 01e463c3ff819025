/* jansson helpers shared by the service and the API layer. */
#ifndef SL_COMMON_JSON_H
#define SL_COMMON_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A JSON string, or null when s is NULL. */
json_t *sl_json_str_or_null(const char *s);
/* An ISO-8601 timestamp string (sl_time_iso with suffix), or null when us == 0. */
json_t *sl_json_ts(int64_t us, const char *suffix);
/* An integer, or null when `is_null`. */
json_t *sl_json_int_or_null(int64_t v, int is_null);

/* Compact dump (malloc'd), or NULL. */
char *sl_json_dumps(const json_t *j);

/* Decode bytes as UTF-8, replacing every invalid sequence by U+FFFD, as
 * Python's bytes.decode("utf-8", "replace") does. NUL bytes are kept.
 * Returns a malloc'd NUL-terminated string and its length in *out_len. */
char *sl_utf8_repair(const char *data, size_t len, size_t *out_len);

/* Whether a JSON text holds more than `max` objects and arrays (counted
 * outside strings, stopping past max). Checked before parsing: a 20 MiB
 * body of "[{},{},...]" would otherwise become gigabytes of jansson nodes
 * before validation could refuse it. */
bool sl_json_too_many_containers(const char *data, size_t len, size_t max);

/* Get a string member (NULL if absent or not a string). */
const char *sl_json_get_str(const json_t *obj, const char *key);

#endif
