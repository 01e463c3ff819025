/* The HTTP server (libmicrohttpd): body capping, authentication, routing
 * and error rendering around the handlers of api/routes.c.
 *
 * This build serves each connection on its own thread (MHD's
 * thread-per-connection mode), bounded by a connection limit, because a
 * synchronous exec blocks its handler for the command's duration; the
 * execution-engine issue replaces this with suspended connections over a
 * small pool. */
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
#define SL_HTTP_MAX_CONNECTIONS 512

struct sl_http *sl_http_start(const struct sl_config *cfg, struct sl_service *svc,
                              struct sl_error *err);
void sl_http_stop(struct sl_http *http);

#endif
