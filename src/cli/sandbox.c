#include "cli/sandbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_TIMEOUT_S 60L

static bool stale(const struct cli_error *e)
{
    return strcmp(e->code, "STALE_SANDBOX_GENERATION") == 0 ||
           strcmp(e->code, "STALE_SANDBOX_ROUTE") == 0;
}

int cli_sandbox_open(struct cli_sandbox *sb, struct cli_error *e)
{
    json_t *answer = NULL;
    json_t *body = json_pack("{s:s,s:s}", "sandbox_id", sb->name, "workspace_scope_id",
                             sb->scope);
    int rc = cli_call(sb->conn, "POST", "/api/v1/sandboxes/resolve", body, CALL_TIMEOUT_S,
                      &answer, e);
    json_decref(body);
    if (rc < 0)
        return -1;
    sb->generation = json_integer_value(json_object_get(answer, "generation"));
    const char *status = json_string_value(json_object_get(answer, "status"));
    bool dormant = status && (strcmp(status, "SUSPENDED") == 0 || strcmp(status, "SUSPENDING") == 0);
    json_decref(answer);
    char path[256];
    /* Names are of the API's alphabet ([A-Za-z0-9_.:-]): no escaping. */
    if (dormant) {
        snprintf(path, sizeof(path), "/api/v1/sandboxes/%s/resume", sb->name);
        rc = cli_call(sb->conn, "POST", path, NULL, CALL_TIMEOUT_S, &answer, e);
        if (rc == 0)
            sb->generation = json_integer_value(json_object_get(answer, "generation"));
    } else {
        snprintf(path, sizeof(path), "/api/v1/sandboxes/%s", sb->name);
        body = json_pack("{s:I}", "generation", (json_int_t)sb->generation);
        rc = cli_call(sb->conn, "POST", path, body, CALL_TIMEOUT_S, &answer, e);
        json_decref(body);
    }
    json_decref(answer);
    return rc;
}

static int send_once(struct cli_sandbox *sb, const char *method, const char *suffix,
                     const char *query, json_t *body, long timeout_s, json_t **answer,
                     struct cli_error *e)
{
    char *path = NULL;
    int n;
    if (body) {
        json_object_set_new(body, "generation", json_integer(sb->generation));
        n = asprintf(&path, "/api/v1/sandboxes/%s%s%s", sb->name, suffix, query);
    } else {
        n = asprintf(&path, "/api/v1/sandboxes/%s%s%s%cgeneration=%lld", sb->name, suffix, query,
                     query[0] ? '&' : '?', sb->generation);
    }
    if (n < 0) {
        snprintf(e->code, sizeof(e->code), "CLI_INTERNAL");
        snprintf(e->message, sizeof(e->message), "out of memory");
        return -1;
    }
    int rc = cli_call(sb->conn, method, path, body, timeout_s, answer, e);
    free(path);
    return rc;
}

int cli_sandbox_call(struct cli_sandbox *sb, const char *method, const char *suffix,
                     const char *query, json_t *body, long timeout_s, json_t **answer,
                     struct cli_error *e)
{
    int rc = send_once(sb, method, suffix, query, body, timeout_s, answer, e);
    if (rc == 0 || !stale(e))
        return rc;
    if (cli_sandbox_open(sb, e) < 0)
        return -1;
    return send_once(sb, method, suffix, query, body, timeout_s, answer, e);
}
