/* The HTTP server's connections: whose they are and how long they wait.
 *
 * In host network mode every sandbox reaches the API's port. A sandbox that
 * opens thousands of connections and never finishes a request line used to
 * take the whole connection budget, so /health and every client on the
 * host timed out. The guard stops that in two ways:
 *   - budget: each connection's peer uid is looked up (api/peer_uid.h);
 *     a peer in the sandbox uid range may hold at most `per_sandbox`
 *     connections, and all sandboxes together at most `sandboxes_total`.
 *     Past that the connection is shut down at once (the host's own
 *     clients, with other uids, are never counted against it);
 *   - header timeout: a connection waiting for a request's headers (a new
 *     one, or one idle between keep-alive requests) longer than
 *     `header_timeout_us` is shut down by the guard's watchdog thread.
 *     Connections whose request is being handled (a long upload, a command
 *     the client waits for) are not watched.
 *
 * Lifecycle: sl_conn_guard_new() starts the watchdog; the MHD callbacks call
 * open (connection accepted), request_begin/request_end, close (before MHD
 * closes the descriptor, which is what makes shutting it down from the
 * watchdog safe); sl_conn_guard_free() after the MHD daemon is stopped.
 * Thread-safe. Refusals and timeouts are counted and logged at most once
 * per 10 s. */
#ifndef SL_API_CONN_GUARD_H
#define SL_API_CONN_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sl_conn_guard_limits {
    uid_t sandbox_uid_first, sandbox_uid_last;
    int per_sandbox;
    int sandboxes_total;
    int64_t header_timeout_us;
};

struct sl_conn_guard;
struct sl_conn_track;

struct sl_conn_guard *sl_conn_guard_new(const struct sl_conn_guard_limits *limits);
void sl_conn_guard_free(struct sl_conn_guard *g);

/* A connection was accepted on `fd`. Returns its tracker (NULL only when
 * out of memory: then it is neither counted nor watched). *refused: over a
 * budget; the descriptor has been shut down and MHD will close it. */
struct sl_conn_track *sl_conn_guard_open(struct sl_conn_guard *g, int fd, bool *refused);
void sl_conn_guard_close(struct sl_conn_guard *g, struct sl_conn_track *t);
/* A request's headers are in (no longer watched) / it was answered (the
 * connection waits for the next request's headers again). */
void sl_conn_guard_request_begin(struct sl_conn_guard *g, struct sl_conn_track *t);
void sl_conn_guard_request_end(struct sl_conn_guard *g, struct sl_conn_track *t);

/* Counters for /healthz and tests. */
struct sl_conn_guard_stats {
    int64_t open, sandbox_open, refused_total, timed_out_total;
};
void sl_conn_guard_stats(struct sl_conn_guard *g, struct sl_conn_guard_stats *out);

#endif
