/* The CLI's one way to the service: a JSON request over libcurl, its answer
 * parsed, and a refusal turned into the service's stable code and message.
 *
 * Nothing here knows a route's meaning; cli/sandbox.c does. The key is sent
 * as a bearer token and never printed (an error names the URL's path only). */
#ifndef SL_CLI_HTTP_H
#define SL_CLI_HTTP_H

#include <jansson.h>
#include <stdbool.h>

struct cli_conn {
    const char *url;     /* base, e.g. http://127.0.0.1:8080 (no trailing '/') */
    const char *api_key; /* a tenant key or the internal token; NULL: none */
};

/* What went wrong, in the service's words when it answered: code is its
 * stable code (TENANT_QUOTA_EXCEEDED, ...) or one of the CLI's own:
 * CLI_UNREACHABLE (no answer), CLI_BAD_ANSWER (not the JSON expected). */
struct cli_error {
    long status; /* HTTP status; 0 when none came */
    char code[64];
    char message[512];
};

/* Send method path (already escaped) with body (may be NULL; not stolen).
 * 2xx: *answer is the parsed body (an empty body is {}), owned by the
 * caller, 0 is returned. Otherwise -1 with e filled. timeout_s bounds the
 * whole exchange (a command's request waits for the command). */
int cli_call(const struct cli_conn *c, const char *method, const char *path, json_t *body,
             long timeout_s, json_t **answer, struct cli_error *e);

/* One exchange as it is, for the MCP bridge, which relays what the service
 * answers without judging it: the request's body text (NULL: none) and
 * extra header lines (NULL-terminated; NULL: none); accept replaces the
 * "Accept: application/json" line. 0 when an answer came, whatever its
 * status: *status, and *answer (malloc'd, NUL-terminated; NULL when empty)
 * of *answer_len bytes. -1 with e (CLI_UNREACHABLE, ...) when none came.
 * timeout_s 0: no limit but the connect's 10 s. */
struct cli_exchange {
    const char *method;
    const char *path;
    const char *body;
    size_t body_len;
    const char *accept;
    const char *const *headers;
    long timeout_s;
    /* When set, a 2xx answer's body goes here as it arrives (an event
     * stream) instead of into *answer; false stops the exchange. */
    bool (*on_data)(void *ctx, const char *data, size_t len);
    void *on_data_ctx;
};
int cli_exchange(const struct cli_conn *c, const struct cli_exchange *x, long *status,
                 char **answer, size_t *answer_len, struct cli_error *e);

/* e from a refusal's answer: the service's {"detail": {"code", "message"}}
 * or {"detail": "<CODE>"}, else HTTP_<status>. */
void cli_refusal(const char *answer, size_t len, long status, struct cli_error *e);

/* s escaped for a query value or a path segment (malloc'd; NULL on OOM). */
char *cli_escape(const char *s);

#endif
