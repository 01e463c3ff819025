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

/* s escaped for a query value or a path segment (malloc'd; NULL on OOM). */
char *cli_escape(const char *s);

#endif
