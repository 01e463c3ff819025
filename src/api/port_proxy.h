/* The ports route: /api/v1/sandboxes/{id}/ports/{port}/{path} carries an
 * HTTP request, or a WebSocket, to a server listening on that port inside
 * the sandbox (service: sl_svc_port_connect; runtime/ports.c says how each
 * network mode is reached without opening the host).
 *
 * HTTP: the request goes on as it came (method, the path after the port,
 * the query, the body, its headers but for hop-by-hop ones and our
 * Authorization), with Host localhost:<port> and X-Forwarded-For, -Host,
 * -Proto and -Prefix (/api/v1/sandboxes/{id}/ports/{port}) added, on a pool
 * of its own so a slow server never holds the API's handlers; the answer
 * comes back as the server gave it (status, headers, body), within
 * SANDBOX_PORT_TIMEOUT_SECONDS and SANDBOX_PORT_MAX_BODY_BYTES.
 * WebSocket: the upgrade goes to the server, and after its 101 the bytes
 * are relayed both ways as they are (one relay thread for them all). */
#ifndef SL_API_PORT_PROXY_H
#define SL_API_PORT_PROXY_H

#include "api/router.h"
#include "common/error.h"

struct sl_config;

int sl_ports_start(const struct sl_config *cfg, struct sl_error *err);
/* Ends the relayed WebSockets (both sides closed) and the pool. */
void sl_ports_stop(void);

/* The handler of every method of the ports route (params: sandbox_id,
 * port, path). */
void sl_port_proxy_handle(struct sl_request *req, struct sl_response *resp);

/* The host-based form (SANDBOX_PORTS_DOMAIN): the path a request for
 * `url` to Host "<port>-<sandbox_id>.<domain>[:p]" stands for, malloc'd,
 * or NULL when the host is not of that form. */
char *sl_port_host_path(const char *domain, const char *host, const char *url);

/* The largest request body the route takes. */
#define SL_PORT_MAX_REQUEST_BODY ((size_t)32 * 1024 * 1024)

#endif
