/* The E2B protocol (issue 17): what E2B's SDKs send, served natively over
 * Sandloom's sandboxes, so code written for E2B runs here unchanged
 * (spec/E2B.md, docs/E2B.md).
 *
 * Two surfaces on the one HTTP listener:
 *
 *   - the control plane (`/sandboxes…`, `/v2/sandboxes…`, e2b/control.c):
 *     create, connect, kill, info, list, timeout, pause, metrics; the
 *     caller's credential comes in X-API-KEY (an API key in either
 *     spelling, `sl…_…` or E2B's `e2b_<hex>`, or the internal token), its
 *     errors are E2B's {"code": <status>, "message"};
 *
 *   - envd, the in-sandbox daemon (e2b/envd.c, e2b/process.c): a request
 *     carrying `E2b-Sandbox-Id` (port 49983 in `E2b-Sandbox-Port`), or whose
 *     Host is `49983-<id>.<SANDBOX_E2B_DOMAIN>`, is routed to
 *     `/e2b/envd/<id>/<path>` before anything else (sl_e2b_rewrite); its
 *     credential is the sandbox's envd access token in X-Access-Token.
 *
 * Handlers are thin like the API's: decode, call the service
 * (service/e2b.c for the sandboxes, the exec and file services for envd),
 * encode. Nothing here holds state beyond a request but the Connect
 * streams, which the exec stream registry owns (api/exec_stream.h). */
#ifndef SL_E2B_E2B_H
#define SL_E2B_E2B_H

#include <stdbool.h>
#include <stddef.h>

#include "api/router.h"
#include "service/principal.h"

/* The envd version this build speaks: what the SDKs switch on (0.5.7:
 * octet-stream uploads, CloseStdin, the default user, recursive watches). */
#define SL_E2B_ENVD_VERSION "0.5.7"
#define SL_E2B_ENVD_PORT 49983
#define SL_E2B_INTERPRETER_PORT 49999
/* Where an envd request is routed once its sandbox is known. */
#define SL_E2B_ENVD_PREFIX "/e2b/envd/"
#define SL_E2B_INTERPRETER_PREFIX "/e2b/interpreter/"

/* The path an E2B sandbox request is served at, or NULL when the request
 * is not one: by its E2b-Sandbox-Id and E2b-Sandbox-Port headers, by a
 * Host of `<port>-<id>.<domain>` when `domain` is set, or by the sandbox
 * its X-Access-Token names (older SDKs' REST calls carry no sandbox
 * header). malloc'd. */
char *sl_e2b_rewrite(const char *sandbox_id_header, const char *port_header, const char *host,
                     const char *domain, const char *access_token, const char *url);

/* E2B's API key spelling of a tenant key: "e2b_" and the key's 60 hex
 * digits (its key_id's 12 and its secret's 48). The Python SDK refuses any
 * other shape; both spellings are the same key here. */
#define SL_E2B_KEY_PREFIX "e2b_"
/* The key as `sl<12 hex>_<48 hex>` from either spelling, in out (at least
 * 64 bytes); false when it is neither. */
bool sl_e2b_key_canonical(const char *value, size_t len, char *out, size_t size);

/* The envd access token of a sandbox: an HMAC-SHA256, under a key derived
 * from the internal token (a fleet shares it), of the owning tenant and
 * the sandbox's E2B id, so any replica can check it with no lookup and a
 * token opens one sandbox only. It names what it was made for: a
 * tenant's is "<tenant_id>.<sandbox id>.<hex>", the operator's
 * "<sandbox id>.<hex>". out: at least SL_E2B_TOKEN_MAX bytes. */
#define SL_E2B_TOKEN_MAX 240
/* Two kinds, each under a key of its own: the envd access token opens
 * envd and the interpreter; the traffic token (E2B's trafficAccessToken,
 * which the code interpreter's context calls carry instead) opens the
 * interpreter only. */
enum sl_e2b_token { SL_E2B_TOKEN_ENVD, SL_E2B_TOKEN_TRAFFIC };
void sl_e2b_envd_token(const char *secret, enum sl_e2b_token kind, const char *tenant_id,
                       const char *sandbox_id, char *out);
/* Who a token speaks for, checked in constant time against the sandbox
 * it is presented for: true and *p (operator, or the tenant with no key;
 * its limits are the handler's to fill) when it is that sandbox's. */
bool sl_e2b_envd_token_check(const char *secret, enum sl_e2b_token kind, const char *sandbox_id,
                             const char *token, size_t len, struct sl_principal *p);

/* E2B's error body, {"code": <status>, "message"}: the control plane's,
 * envd's REST and the interpreter's (e2b/control.c). */
void sl_e2b_respond_error(struct sl_response *resp, int status, const char *message);

/* Control plane (e2b/control.c). */
void sl_e2b_create(struct sl_request *req, struct sl_response *resp);
void sl_e2b_connect(struct sl_request *req, struct sl_response *resp);
void sl_e2b_kill(struct sl_request *req, struct sl_response *resp);
void sl_e2b_info(struct sl_request *req, struct sl_response *resp);
void sl_e2b_list(struct sl_request *req, struct sl_response *resp);
void sl_e2b_list_v1(struct sl_request *req, struct sl_response *resp);
void sl_e2b_timeout(struct sl_request *req, struct sl_response *resp);
void sl_e2b_pause(struct sl_request *req, struct sl_response *resp);
void sl_e2b_resume(struct sl_request *req, struct sl_response *resp);
void sl_e2b_metrics(struct sl_request *req, struct sl_response *resp);
/* What E2B offers and this build does not (templates' builds, volumes,
 * snapshots, fork, network rules, secrets): a clear 501, never a hang. */
void sl_e2b_unsupported(struct sl_request *req, struct sl_response *resp);

/* The code interpreter (e2b/interpreter.c): /e2b/interpreter/{sandbox_id}/… */
void sl_interp_execute(struct sl_request *req, struct sl_response *resp);
void sl_interp_contexts_create(struct sl_request *req, struct sl_response *resp);
void sl_interp_contexts_list(struct sl_request *req, struct sl_response *resp);
void sl_interp_context_delete(struct sl_request *req, struct sl_response *resp);
void sl_interp_context_restart(struct sl_request *req, struct sl_response *resp);

/* envd (e2b/envd.c, e2b/process.c). */
void sl_envd_health(struct sl_request *req, struct sl_response *resp);
void sl_envd_files_get(struct sl_request *req, struct sl_response *resp);
void sl_envd_files_post(struct sl_request *req, struct sl_response *resp);
/* Every Connect RPC: /e2b/envd/{sandbox_id}/{service}/{method}. */
void sl_envd_rpc(struct sl_request *req, struct sl_response *resp);

#endif
