/* What envd's services share (e2b/envd.c, e2b/process.c): answers in
 * Connect's shapes, the caller's user, E2B paths onto the workspace, the
 * sandbox's current generation (envd calls carry none). */
#ifndef SL_E2B_ENVD_H
#define SL_E2B_ENVD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/router.h"
#include "common/error.h"

void sl_envd_unary(struct sl_response *resp, json_t *doc); /* takes doc */
void sl_envd_unary_error(struct sl_response *resp, const char *code, const char *message);
void sl_envd_unary_err(struct sl_response *resp, const struct sl_error *err);
void sl_envd_stream_error(struct sl_response *resp, const char *code, const char *message);
void sl_envd_stream_err(struct sl_response *resp, const struct sl_error *err);
/* The user a request names (Basic header or username=): 'user' or
 * 'root', the sandbox's one identity; anything else is refused. */
int sl_envd_user_check(struct sl_request *req, struct sl_error *err);
/* An E2B path as the file API's ("/workspace/…"); -1 outside it. */
int sl_envd_path(const char *in, char *out, size_t size, struct sl_error *err);
int sl_envd_generation(struct sl_request *req, int64_t *generation, struct sl_error *err);
/* A new process (command, terminal, interpreter context) is one of its
 * tenant's commands_in_flight, counted from its admission as an exec of
 * the API: 0 admitted (*held: give it back with sl_svc_quota_leave once
 * started), -1 refused (err). */
int sl_envd_command_quota_enter(struct sl_request *req, bool *held, struct sl_error *err);
/* process.Process (e2b/process.c). */
void sl_envd_process(struct sl_request *req, struct sl_response *resp, const char *method,
                     bool streaming);

#endif
