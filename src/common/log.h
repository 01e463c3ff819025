/* Leveled logging to stderr, one line per event, as text or JSON
 * (SANDBOX_LOG_LEVEL, SANDBOX_LOG_FORMAT). Only the tops of requests and
 * background loops log (STYLE.md).
 *
 * Text:  2026-12-02T01:10:00.123Z info access method=POST status=200 ...
 * JSON:  {"ts":"2026-12-02T01:10:00.123Z","level":"info","event":"access",
 *         "method":"POST","status":200,...}
 * A plain message is event-less: its text is "msg" in JSON. */
#ifndef SL_COMMON_LOG_H
#define SL_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sl_log_level { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR };
enum sl_log_format { SL_LOG_TEXT, SL_LOG_JSON };

/* Set once at startup, before the threads. */
void sl_log_set_level(enum sl_log_level level);
void sl_log_set_format(enum sl_log_format format);
/* "debug", "info", "warn"/"warning", "error" -> 0, else -1. */
int sl_log_parse_level(const char *name, enum sl_log_level *out);
bool sl_log_enabled(enum sl_log_level level);

void sl_log(enum sl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One structured event: key/value fields after the event name. A field
 * with str NULL is a number (num); one whose str is NULL and !is_num is
 * left out. Values are escaped in both formats. */
struct sl_log_field {
    const char *key;
    const char *str;
    int64_t num;
    bool is_num;
};
#define SL_LF_STR(k, v) ((struct sl_log_field){.key = (k), .str = (v)})
#define SL_LF_NUM(k, v) ((struct sl_log_field){.key = (k), .num = (v), .is_num = true})
void sl_log_event(enum sl_log_level level, const char *event, const struct sl_log_field *fields,
                  size_t n);

#define sl_debug(...) sl_log(SL_LOG_DEBUG, __VA_ARGS__)
#define sl_info(...) sl_log(SL_LOG_INFO, __VA_ARGS__)
#define sl_warn(...) sl_log(SL_LOG_WARN, __VA_ARGS__)
#define sl_errorlog(...) sl_log(SL_LOG_ERROR, __VA_ARGS__)

#endif
