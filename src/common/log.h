/* Minimal leveled logging to stderr, one line per event.
 * Only the tops of requests and background loops log (STYLE.md). */
#ifndef SL_COMMON_LOG_H
#define SL_COMMON_LOG_H

enum sl_log_level { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR };

void sl_log_set_level(enum sl_log_level level);
void sl_log(enum sl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sl_debug(...) sl_log(SL_LOG_DEBUG, __VA_ARGS__)
#define sl_info(...) sl_log(SL_LOG_INFO, __VA_ARGS__)
#define sl_warn(...) sl_log(SL_LOG_WARN, __VA_ARGS__)
#define sl_errorlog(...) sl_log(SL_LOG_ERROR, __VA_ARGS__)

#endif
