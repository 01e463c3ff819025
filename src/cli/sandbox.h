/* A sandbox by name, as the CLI user sees it: the generation (the API's
 * fencing token) is found and carried here, never asked of the user.
 *
 * cli_sandbox_open() resolves the name in the caller's scope and brings the
 * sandbox up (connects it, or resumes it when suspended); cli_sandbox_call()
 * sends a request that carries the generation, and on a stale one (the
 * sandbox moved, was resumed elsewhere, its worker restarted) opens it again
 * and sends the same request once more: a command keeps its exec_id, so the
 * service answers a replay from its record instead of running it twice. */
#ifndef SL_CLI_SANDBOX_H
#define SL_CLI_SANDBOX_H

#include "cli/http.h"

struct cli_sandbox {
    const struct cli_conn *conn;
    const char *name;
    const char *scope;
    long long generation;
};

/* 0, or -1 with e filled. */
int cli_sandbox_open(struct cli_sandbox *sb, struct cli_error *e);

/* method path-suffix (after /api/v1/sandboxes/<name>) with body, whose
 * "generation" is set to the current one; query: "" or "?a=b" (the
 * generation is appended to it for a GET). *answer as cli_call. */
int cli_sandbox_call(struct cli_sandbox *sb, const char *method, const char *suffix,
                     const char *query, json_t *body, long timeout_s, json_t **answer,
                     struct cli_error *e);

#endif
