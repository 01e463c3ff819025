/* The HTTP server (libmicrohttpd): body capping, authentication, routing
 * and error rendering around the handlers of api/routes.c.
 *
 * Threads: SL_HTTP_IO_THREADS MHD event loops (epoll) read requests and
 * write answers; once a request's body is in, its connection is suspended
 * and the handler runs on a pool of SL_HTTP_HANDLER_THREADS (handlers may
 * block on the database or build a sandbox). A handler whose answer waits
 * for a running command defers it (router.h): the connection stays
 * suspended with no thread held until the command ends. */
#ifndef SL_API_HTTP_H
#define SL_API_HTTP_H

#include "common/error.h"

struct sl_config;
struct sl_service;
struct sl_http;

/* Body caps are per route (api/router.h); every body must also hold at
 * most this many JSON objects and arrays, so a small body cannot expand
 * into a huge tree in memory (no request of the API needs more than a
 * handful). */
#define SL_HTTP_MAX_JSON_CONTAINERS 256
/* Upper bound; the real limit also follows RLIMIT_NOFILE (http.c). With
 * SL_HTTP_CONNECTION_MEMORY each, what connections that have not even
 * authenticated can make the daemon hold is bounded: 4096 x 64 KiB =
 * 256 MiB at the very worst (an idle one costs about 5 KiB). */
#define SL_HTTP_MAX_CONNECTIONS 4096
/* libmicrohttpd's buffer per connection: the request line and headers must
 * fit in it (beyond: its own 431), and bodies stream through it. */
#define SL_HTTP_CONNECTION_MEMORY (64 * 1024)
#define SL_HTTP_IO_THREADS 2
#define SL_HTTP_HANDLER_THREADS 16
/* Requests waiting for a handler thread; beyond it: 503. */
#define SL_HTTP_MAX_QUEUED 8192
/* Forwards to owners waiting at once (api/forward.h); more queue. */
#define SL_HTTP_FORWARD_THREADS 64
/* API keys the cache could not vouch for, asked of the store at once; more
 * queue, and beyond SL_HTTP_KEY_CHECKS_QUEUED a 503. On a pool of their
 * own, so keys nobody issued (a guesser's) never hold the handler threads. */
#define SL_HTTP_KEY_CHECK_THREADS 2
#define SL_HTTP_KEY_CHECKS_QUEUED 256

struct sl_http *sl_http_start(const struct sl_config *cfg, struct sl_service *svc,
                              struct sl_error *err);
void sl_http_stop(struct sl_http *http);

#endif
