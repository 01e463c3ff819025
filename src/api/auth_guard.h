/* Failed authentications: counted per peer address, slowed once a peer
 * keeps failing, and reported to the operator at a bounded rate.
 *
 * A sandbox in host network mode reaches the API from 127.0.0.1, like the
 * host's own clients, so nothing here ever refuses or delays a request that
 * carries the right token: only failures are slowed, and only those of a
 * peer that has failed more than `free_failures` times
 * (SANDBOX_AUTH_FAILURES_PER_MINUTE) within SL_AUTH_WINDOW_US. A guesser then gets one answer per SL_AUTH_PENALTY_MS
 * per connection instead of thousands a second.
 *
 * One guard per HTTP server, created with sl_auth_guard_new(); every call is
 * thread-safe (one mutex; the table is fixed-size: an attacker with many
 * addresses evicts the oldest entries, never grows memory). The caller
 * passes the clock, so the rules are testable without sleeping. */
#ifndef SL_API_AUTH_GUARD_H
#define SL_API_AUTH_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define SL_AUTH_WINDOW_US (60 * 1000000LL)
#define SL_AUTH_PENALTY_MS 1000
/* At most one log line per this period, summarising the failures since. */
#define SL_AUTH_LOG_PERIOD_US (10 * 1000000LL)
#define SL_AUTH_PEERS 1024

struct sl_auth_guard;

/* What one failure means. delay_ms: hold the 401 this long (0: answer now).
 * log: true when the caller should write one line now, saying `failures`
 * failures since the last line (this one included), the last from `peer`. */
struct sl_auth_verdict {
    int delay_ms;
    bool log;
    uint64_t failures;
    char peer[64];
};

struct sl_auth_guard *sl_auth_guard_new(int64_t free_failures);
void sl_auth_guard_free(struct sl_auth_guard *g);
/* Whether `peer` is past its free failures in the current window (its next
 * failure would be delayed). Counts nothing. */
bool sl_auth_guard_throttled(struct sl_auth_guard *g, const struct sockaddr *peer, int64_t now_us);
/* Record one failed authentication from `peer` (NULL: unknown) at now_us. */
void sl_auth_guard_fail(struct sl_auth_guard *g, const struct sockaddr *peer, int64_t now_us,
                        struct sl_auth_verdict *out);

#endif
