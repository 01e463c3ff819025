/* A command's output followed as it comes (follow.h). */
#include "cli/follow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/util.h"

/* Reconnects after a dropped connection, a second apart. */
#define RECONNECTS 5

struct follower {
    struct sl_buf line; /* the line being read */
    char event[32];     /* the event being read: its name, */
    char id[64];        /* its id, */
    struct sl_buf data; /* and its data */
    char last_id[64];   /* the last event's id: where a reconnect goes on */
    json_t *end;        /* the end event, once it came */
    bool failed;        /* a write to stdout or stderr failed */
};

static void dispatch(struct follower *f)
{
    if (f->id[0])
        snprintf(f->last_id, sizeof(f->last_id), "%s", f->id);
    /* Output may hold NUL (\u0000 in its text). */
    json_t *doc = f->data.len ? json_loadb(f->data.data, f->data.len, JSON_ALLOW_NUL, NULL) : NULL;
    bool out = strcmp(f->event, "stdout") == 0, err = strcmp(f->event, "stderr") == 0;
    if (out || err) {
        FILE *to = out ? stdout : stderr;
        const char *text = json_string_value(json_object_get(doc, "text"));
        const char *b64 = json_string_value(json_object_get(doc, "base64"));
        if (text) {
            size_t n = json_string_length(json_object_get(doc, "text"));
            f->failed |= fwrite(text, 1, n, to) != n;
        } else if (b64) {
            struct sl_buf bytes = {0};
            if (sl_base64_decode_strict(b64, strlen(b64), &bytes, strlen(b64), NULL) == 0)
                f->failed |= fwrite(bytes.data, 1, bytes.len, to) != bytes.len;
            sl_buf_free(&bytes);
        }
        fflush(to);
    } else if (strcmp(f->event, "gap") == 0) {
        fflush(stdout);
        fprintf(stderr, "sandloom: %lld bytes of %s were no longer kept by the service\n",
                (long long)json_integer_value(json_object_get(doc, "skipped")),
                json_string_value(json_object_get(doc, "stream")) ?: "output");
    } else if (strcmp(f->event, "end") == 0 && doc) {
        json_decref(f->end);
        f->end = json_incref(doc);
    }
    json_decref(doc);
    f->event[0] = f->id[0] = '\0';
    f->data.len = 0;
}

/* One line of the stream (without its newline). */
static void take_line(struct follower *f, const char *line, size_t len)
{
    if (len == 0) {
        if (f->event[0] || f->data.len)
            dispatch(f);
        return;
    }
    if (line[0] == ':')
        return; /* a keepalive */
    const char *colon = memchr(line, ':', len);
    size_t name_len = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t value_len = len - (size_t)(value - line);
    if (value_len && value[0] == ' ') {
        value++;
        value_len--;
    }
    if (name_len == 5 && memcmp(line, "event", 5) == 0)
        snprintf(f->event, sizeof(f->event), "%.*s", (int)value_len, value);
    else if (name_len == 2 && memcmp(line, "id", 2) == 0)
        snprintf(f->id, sizeof(f->id), "%.*s", (int)value_len, value);
    else if (name_len == 4 && memcmp(line, "data", 4) == 0) {
        if (f->data.len)
            (void)sl_buf_append(&f->data, "\n", 1);
        (void)sl_buf_append(&f->data, value, value_len);
    }
}

static bool on_data(void *ctx, const char *data, size_t len)
{
    struct follower *f = ctx;
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            take_line(f, f->line.data ? f->line.data : "", f->line.len);
            f->line.len = 0;
        } else if (sl_buf_append(&f->line, data + i, 1) < 0) {
            return false;
        }
    }
    return !f->failed;
}

/* One connection: POST the request (body) or GET the stream from the last
 * event. 0 when the service answered 2xx (the stream ran until it closed),
 * -1 with e otherwise (a refusal, or no answer). */
static int connect_once(struct cli_sandbox *sb, json_t *body, const char *exec_id, long timeout_s,
                        struct follower *f, struct cli_error *e)
{
    char path[512], last[96];
    char *text = NULL;
    const char *headers[2] = {NULL, NULL};
    if (body) {
        json_object_set_new(body, "generation", json_integer(sb->generation));
        json_object_set_new(body, "stream", json_true());
        text = json_dumps(body, JSON_COMPACT);
        snprintf(path, sizeof(path), "/api/v1/sandboxes/%s/exec", sb->name);
    } else {
        snprintf(path, sizeof(path), "/api/v1/sandboxes/%s/exec/%s/stream?generation=%lld",
                 sb->name, exec_id, sb->generation);
        if (f->last_id[0]) {
            snprintf(last, sizeof(last), "Last-Event-ID: %s", f->last_id);
            headers[0] = last;
        }
    }
    /* A new connection starts a new stream: nothing of a cut event stays. */
    f->line.len = f->data.len = 0;
    f->event[0] = f->id[0] = '\0';
    struct cli_exchange x = {
        .method = body ? "POST" : "GET",
        .path = path,
        .body = text,
        .body_len = text ? strlen(text) : 0,
        .accept = "Accept: text/event-stream",
        .headers = headers,
        .timeout_s = timeout_s,
        .on_data = on_data,
        .on_data_ctx = f,
    };
    long status = 0;
    char *answer = NULL;
    size_t answer_len = 0;
    int rc = cli_exchange(sb->conn, &x, &status, &answer, &answer_len, e);
    free(text);
    if (rc == 0 && (status < 200 || status > 299)) {
        cli_refusal(answer, answer_len, status, e);
        rc = -1;
    }
    free(answer);
    return rc;
}

static bool stale(const struct cli_error *e)
{
    return strcmp(e->code, "STALE_SANDBOX_GENERATION") == 0 ||
           strcmp(e->code, "STALE_SANDBOX_ROUTE") == 0;
}

int cli_follow_exec(struct cli_sandbox *sb, json_t *body, const char *exec_id, long timeout_s,
                    json_t **end, struct cli_error *e)
{
    *end = NULL;
    struct follower f = {0};
    /* An event's data is at most 64 KiB of output, escaped (6x at worst); lines too. */
    sl_buf_init(&f.line, 1 << 20);
    sl_buf_init(&f.data, 1 << 20);
    int rc = connect_once(sb, body, exec_id, timeout_s, &f, e);
    if (rc < 0 && stale(e) && cli_sandbox_open(sb, e) == 0)
        rc = connect_once(sb, body, exec_id, timeout_s, &f, e); /* a replay if it ran */
    /* Admitted, but the stream broke before its end: go on from the last
     * event. A refusal of the first request stays one. */
    bool started = rc == 0 || f.last_id[0];
    for (int i = 0; started && !f.end && !f.failed && i < RECONNECTS; i++) {
        sleep(1);
        rc = connect_once(sb, NULL, exec_id, timeout_s, &f, e);
        if (rc < 0 && stale(e))
            break;
    }
    sl_buf_free(&f.line);
    sl_buf_free(&f.data);
    if (f.end) {
        *end = f.end;
        return 0;
    }
    if (f.failed) {
        snprintf(e->code, sizeof(e->code), "CLI_OUTPUT");
        snprintf(e->message, sizeof(e->message), "cannot write the command's output");
    } else if (rc == 0) {
        snprintf(e->code, sizeof(e->code), "CLI_UNREACHABLE");
        snprintf(e->message, sizeof(e->message),
                 "the command's output stream ended before the command did");
    }
    return -1;
}
