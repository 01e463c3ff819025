#include "cli/mcp_bridge.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"

#define MCP_PATH "/api/v1/sandboxes/mcp/streamable-http"
#define META_VERSION "io.modelcontextprotocol/protocolVersion"
/* JSON-RPC's "internal error": what a client gets for an answer that never
 * came or was not JSON-RPC. */
#define RPC_INTERNAL (-32603)
#define RPC_PARSE (-32700)

struct bridge {
    const struct cli_conn *conn;
    FILE *out;
    pthread_mutex_t out_lock; /* one line at a time on stdout */
    pthread_mutex_t lock;     /* in_flight, version */
    pthread_cond_t idle;
    int in_flight;
    /* The revision initialize settled ("" before), sent on every later
     * message of a client of the initialize-based revisions. */
    char version[32];
};

struct job {
    struct bridge *b;
    json_t *msg;
    char *line;
    size_t len;
};

static void emit(struct bridge *b, const json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT); /* no raw newline inside */
    if (!text)
        return;
    pthread_mutex_lock(&b->out_lock);
    fputs(text, b->out);
    fputc('\n', b->out);
    fflush(b->out);
    pthread_mutex_unlock(&b->out_lock);
    free(text);
}

/* The answer to request `id` when the endpoint's was not JSON-RPC: the
 * service's code and message, where they reach an agent, and on stderr. */
static void emit_failure(struct bridge *b, const json_t *id, const char *method, int code,
                         const struct cli_error *e)
{
    fprintf(stderr, "sandloom mcp: %s: %s: %s\n", method ? method : "message", e->code,
            e->message);
    if (!id)
        return; /* a notification has no one to answer */
    char text[700];
    snprintf(text, sizeof(text), "sandloom mcp: %s: %s", e->code, e->message);
    json_t *err = json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id, "error", "code",
                            code, "message", text);
    emit(b, err);
    json_decref(err);
}

/* A header value as Mcp-Name carries it: as is when it is printable ASCII,
 * else in the =?base64?…?= form the endpoint decodes. */
static char *name_header(const char *value)
{
    bool plain = true;
    for (const unsigned char *p = (const unsigned char *)value; *p && plain; p++)
        plain = *p >= 0x20 && *p < 0x7f;
    char *line = NULL;
    if (plain) {
        if (asprintf(&line, "Mcp-Name: %s", value) < 0)
            line = NULL;
        return line;
    }
    char *b64 = sl_base64_encode(value, strlen(value));
    if (b64 && asprintf(&line, "Mcp-Name: =?base64?%s?=", b64) < 0)
        line = NULL;
    free(b64);
    return line;
}

static void relay(struct bridge *b, const json_t *msg, const char *line, size_t len)
{
    const json_t *id = json_object_get(msg, "id");
    const char *method = json_string_value(json_object_get(msg, "method"));
    const json_t *params = json_object_get(msg, "params");
    const char *modern = json_string_value(json_object_get(json_object_get(params, "_meta"),
                                                           META_VERSION));
    char version_line[64] = "", method_line[256] = "";
    char *name_line = NULL;
    const char *headers[4] = {0};
    size_t n = 0;
    if (modern) {
        /* 2026-07-28: every message names its revision, and the headers
         * mirror the body (the endpoint compares them). */
        snprintf(version_line, sizeof(version_line), "MCP-Protocol-Version: %.40s", modern);
        headers[n++] = version_line;
        if (method && strlen(method) < 200) {
            snprintf(method_line, sizeof(method_line), "Mcp-Method: %s", method);
            headers[n++] = method_line;
        }
        const char *field = !method                                 ? NULL
                            : strcmp(method, "resources/read") == 0 ? "uri"
                            : strcmp(method, "tools/call") == 0 ||
                                    strcmp(method, "prompts/get") == 0
                                ? "name"
                                : NULL;
        const char *value = field ? json_string_value(json_object_get(params, field)) : NULL;
        if (value && (name_line = name_header(value)))
            headers[n++] = name_line;
    } else if (!method || strcmp(method, "initialize") != 0) {
        pthread_mutex_lock(&b->lock);
        if (b->version[0])
            snprintf(version_line, sizeof(version_line), "MCP-Protocol-Version: %s", b->version);
        pthread_mutex_unlock(&b->lock);
        if (version_line[0])
            headers[n++] = version_line;
    }
    const struct cli_exchange x = {.method = "POST",
                                   .path = MCP_PATH,
                                   .body = line,
                                   .body_len = len,
                                   .accept = "Accept: application/json, text/event-stream",
                                   .headers = headers,
                                   .timeout_s = 0}; /* a command may run for hours */
    long status = 0;
    char *answer = NULL;
    size_t answer_len = 0;
    struct cli_error e;
    int rc = cli_exchange(b->conn, &x, &status, &answer, &answer_len, &e);
    free(name_line);
    if (rc < 0) {
        emit_failure(b, id, method, RPC_INTERNAL, &e);
        return;
    }
    json_t *reply = answer_len ? json_loadb(answer, answer_len, 0, NULL) : NULL;
    if (json_is_object(reply) && json_object_get(reply, "jsonrpc")) {
        /* The endpoint's own answer, a result or a JSON-RPC error. */
        const char *settled = json_string_value(
            json_object_get(json_object_get(reply, "result"), "protocolVersion"));
        if (method && strcmp(method, "initialize") == 0 && settled && strlen(settled) < 32) {
            pthread_mutex_lock(&b->lock);
            snprintf(b->version, sizeof(b->version), "%s", settled);
            pthread_mutex_unlock(&b->lock);
        }
        emit(b, reply);
    } else if (status == 202 || (status >= 200 && status < 300 && !answer_len && !id)) {
        /* A notification, accepted: nothing to say. */
    } else {
        cli_refusal(answer, answer_len, status, &e);
        emit_failure(b, id, method, RPC_INTERNAL, &e);
    }
    json_decref(reply);
    free(answer);
}

static void job_free(struct job *j)
{
    json_decref(j->msg);
    free(j->line);
    free(j);
}

static void *run_job(void *arg)
{
    struct job *j = arg;
    struct bridge *b = j->b;
    relay(b, j->msg, j->line, j->len);
    job_free(j);
    pthread_mutex_lock(&b->lock);
    b->in_flight--;
    pthread_cond_broadcast(&b->idle);
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

/* Wait until fewer than `most` requests are in flight. */
static void wait_in_flight(struct bridge *b, int most)
{
    pthread_mutex_lock(&b->lock);
    while (b->in_flight > most)
        pthread_cond_wait(&b->idle, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

/* One line read: relayed at once (initialize, notifications) or by a
 * thread of its own (requests). */
static void take(struct bridge *b, char *line, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    if (!msg) {
        json_t *err = json_pack("{s:s,s:n,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                                RPC_PARSE, "message", "Parse error");
        emit(b, err);
        json_decref(err);
        free(line);
        return;
    }
    const char *method = json_string_value(json_object_get(msg, "method"));
    bool initialize = method && strcmp(method, "initialize") == 0;
    if (initialize || !json_object_get(msg, "id")) {
        /* initialize settles the revision that later messages carry:
         * everything before it is answered first, nothing after it
         * starts before its answer. A notification (cancelled, ...) has
         * no answer to wait for and goes at once, in order. */
        if (initialize)
            wait_in_flight(b, 0);
        relay(b, msg, line, len);
        json_decref(msg);
        free(line);
        return;
    }
    struct job *j = malloc(sizeof(*j));
    if (!j) {
        json_decref(msg);
        free(line);
        return;
    }
    *j = (struct job){.b = b, .msg = msg, .line = line, .len = len};
    wait_in_flight(b, CLI_MCP_IN_FLIGHT - 1);
    pthread_mutex_lock(&b->lock);
    b->in_flight++;
    pthread_mutex_unlock(&b->lock);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, run_job, j) != 0)
        run_job(j); /* no thread to spare: relayed here, in order */
    pthread_attr_destroy(&attr);
}

int cli_mcp_bridge(const struct cli_conn *conn, FILE *in, FILE *out)
{
    struct bridge b = {.conn = conn,
                       .out = out,
                       .out_lock = PTHREAD_MUTEX_INITIALIZER,
                       .lock = PTHREAD_MUTEX_INITIALIZER,
                       .idle = PTHREAD_COND_INITIALIZER};
    if (!conn->api_key || !conn->api_key[0])
        fprintf(stderr, "sandloom mcp: no key (SANDLOOM_API_KEY or the config file): the "
                        "service will refuse every call\n");
    fprintf(stderr, "sandloom mcp: relaying stdio to %s%s\n", conn->url, MCP_PATH);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, in)) >= 0) {
        if (got > CLI_MCP_LINE_MAX) {
            fprintf(stderr, "sandloom mcp: a message of %zd bytes is over the %ld the bridge "
                            "reads; dropped\n", got, CLI_MCP_LINE_MAX);
            continue;
        }
        if (blank(line, (size_t)got))
            continue;
        /* The buffer goes with the message; getline makes the next. */
        take(&b, line, (size_t)got);
        line = NULL;
        cap = 0;
    }
    free(line);
    wait_in_flight(&b, 0);
    return 0;
}
