/* E2B's code interpreter (port 49999), natively (e2b.h).
 *
 * A context is a Python process of the sandbox (e2b/interpreter.py, given
 * as `python3 -c`), an execution like any E2B process: its record, limits
 * and fence, in the scope beside every other ("~e2b"), with its stdin
 * open. Its exec_id is "e2bctx-<context id>-<n>": the context's id is
 * what the SDK holds, n changes with every restart (an exec_id is never
 * used twice). Nothing is kept here: the running executions are the
 * contexts.
 *
 * An execution writes one request line to the process's stdin and
 * answers the process's answer lines, as they come, as E2B's NDJSON: the
 * exec stream registry reads them from the context's output log from
 * where it stood before the request, and the encoder below passes on each
 * whole line of this request's (every line carries its request's id)
 * until its end line, which ends the body. The process runs its requests
 * one by one, as a kernel does: executions sent meanwhile wait their turn
 * in its stdin, and one whose client went away runs on without mixing its
 * output into the next's. */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/errors.h"
#include "api/exec_stream.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "e2b/e2b.h"
#include "e2b/envd.h"
#include "interpreter_py.h"
#include "service/outlog.h"
#include "service/service.h"
#include "service/tenants.h"
#include "store/store.h"

#define CTX_PREFIX "e2bctx-"
#define DEFAULT_CONTEXT "default"
#define HOME "/home/user"
/* A context lives as long as its sandbox; the runtime wants a deadline. */
#define CONTEXT_TIMEOUT_SECONDS 86400
/* The longest answer line passed on (a PNG of a large figure). */
#define MAX_LINE ((size_t)32 * 1024 * 1024)

/* ---- answers ---- */

static void respond_json(struct sl_response *resp, int status, json_t *doc)
{
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = doc ? json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    resp->len = resp->body ? strlen(resp->body) : 0;
    json_decref(doc);
}

static void respond_err(struct sl_response *resp, const struct sl_error *err)
{
    snprintf(resp->log_detail, sizeof(resp->log_detail), "%s: %.200s", err->code,
             err->detail[0] ? err->detail : err->message);
    /* The SDK reads 502 as "the sandbox timed out": never for a refusal. */
    int status = sl_api_status_for_code(err->code);
    if (status == 502)
        status = 503;
    sl_e2b_respond_error(resp, status, status == 500 ? "internal error" : err->message);
}

/* ---- the contexts ---- */

static bool context_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 64)
        return false;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return false;
    return true;
}

/* The running process of a context: its exec_id and stored request. */
static bool context_find(struct sl_request *req, const char *ctx, char *exec_id, size_t size,
                         json_t **request)
{
    char prefix[96];
    snprintf(prefix, sizeof(prefix), CTX_PREFIX "%s-", ctx);
    _cleanup_json_ json_t *running = sl_svc_execs_running_list(req->svc, req->params[0], prefix);
    const json_t *item = json_array_get(running, 0);
    if (!item)
        return false;
    snprintf(exec_id, size, "%s", json_string_value(json_object_get(item, "exec_id")));
    if (request)
        *request = json_incref(json_object_get(item, "request"));
    return true;
}

static json_t *context_json(const char *id, const json_t *request)
{
    const char *cwd = json_string_value(json_object_get(request, "cwd"));
    return json_pack("{s:s,s:s,s:s}", "id", id, "language", "python", "cwd", cwd ? cwd : HOME);
}

static int context_launch(struct sl_request *req, int64_t generation, const char *ctx,
                          const char *cwd, char *exec_id, size_t size, struct sl_error *err);

/* A new process for context `ctx`: a command of its tenant's
 * (commands_in_flight), as any E2B process. */
static int context_start(struct sl_request *req, int64_t generation, const char *ctx,
                         const char *cwd, char *exec_id, size_t size, struct sl_error *err)
{
    bool held = false;
    if (sl_envd_command_quota_enter(req, &held, err) < 0)
        return -1;
    int rc = context_launch(req, generation, ctx, cwd, exec_id, size, err);
    sl_svc_quota_leave(req->svc, held);
    return rc;
}

static int context_launch(struct sl_request *req, int64_t generation, const char *ctx,
                          const char *cwd, char *exec_id, size_t size, struct sl_error *err)
{
    char n[9];
    if (sl_random_hex(n, 4) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot name the context's process");
    snprintf(exec_id, size, CTX_PREFIX "%s-%s", ctx, n);
    const char *argv[] = {"python3", "-u", "-c", sl_e2b_interpreter_py};
    const char *keys[] = {"MPLBACKEND", "PYTHONUNBUFFERED"};
    const char *values[] = {"Agg", "1"};
    _cleanup_json_ json_t *stored =
        json_pack("{s:s,s:I,s:[sss],s:s,s:s,s:s}", "exec_id", exec_id, "generation",
                  (json_int_t)generation, "argv", "python3", "-c", "(sandloom interpreter)",
                  "context", ctx, "language", "python", "cwd", cwd);
    struct sl_exec_request er = {
        .exec_id = exec_id,
        .generation = generation,
        .argv = argv,
        .argc = 4,
        .cwd = cwd,
        .env_keys = keys,
        .env_values = values,
        .env_len = 2,
        .timeout_seconds = CONTEXT_TIMEOUT_SECONDS,
        .background = true,
        .stdin_open = true,
        .exec_scope = SL_EXEC_SCOPE_E2B,
        .request = stored,
    };
    json_t *answer = NULL;
    int rc = sl_svc_exec(req->svc, req->params[0], &er, NULL, NULL, &answer, err);
    json_decref(answer);
    return rc < 0 ? -1 : 0;
}

/* The context's process killed, and gone from the running ones (a
 * listing after it does not show it). */
static int context_stop(struct sl_request *req, int64_t generation, const char *ctx,
                        const char *exec_id, struct sl_error *err)
{
    _cleanup_json_ json_t *doc =
        sl_svc_exec_signal(req->svc, req->params[0], exec_id, generation, 9, err);
    if (!doc)
        return -1;
    char still[128];
    for (int i = 0; i < 500 && context_find(req, ctx, still, sizeof(still), NULL); i++)
        usleep(10000);
    return 0;
}

/* ---- an execution's answer ---- */

struct exec_lines {
    char request_id[40];
    struct sl_buf line; /* a line still being read */
    bool done;
};

static int lines_chunk(void *ctx, int stream, const char *data, size_t len, struct sl_buf *out)
{
    struct exec_lines *x = ctx;
    if (stream != SL_OUT_STDOUT || x->done)
        return 0;
    for (size_t i = 0; i < len; i++) {
        const char *nl = memchr(data + i, '\n', len - i);
        size_t take = nl ? (size_t)(nl - (data + i)) : len - i;
        if (sl_buf_append(&x->line, data + i, take) < 0)
            return -1;
        i += take;
        if (!nl)
            break;
        if (x->done)
            return 1;
        /* A whole line of this execution's (another's was left by a
         * client that went away): the end is ours, the rest the client's,
         * without the id (the SDK would show it among a result's extras). */
        _cleanup_json_ json_t *msg = json_loadb(x->line.data ? x->line.data : "", x->line.len, 0,
                                                NULL);
        x->line.len = 0;
        const char *id = json_string_value(json_object_get(msg, "id"));
        if (!id || strcmp(id, x->request_id) != 0)
            continue;
        const char *type = json_string_value(json_object_get(msg, "type"));
        if (type && strcmp(type, "end") == 0) {
            x->done = true;
            return 1;
        }
        json_object_del(msg, "id");
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text || sl_buf_append(out, text, strlen(text)) < 0 || sl_buf_append(out, "\n", 1) < 0)
            return -1;
    }
    return 0;
}

static int lines_end(void *ctx, const json_t *end, struct sl_buf *out)
{
    /* The process ended before its answer did: say so in E2B's words. */
    struct exec_lines *x = ctx;
    (void)end;
    if (x->done)
        return 0;
    _cleanup_json_ json_t *err = json_pack(
        "{s:s,s:s,s:s,s:s}", "type", "error", "name", "ContextRestarting", "value",
        "the context's interpreter ended during the execution (restarted, killed or out of "
        "memory)",
        "traceback", "");
    _cleanup_free_ char *text = err ? json_dumps(err, JSON_COMPACT) : NULL;
    if (!text || sl_buf_append(out, text, strlen(text)) < 0 || sl_buf_append(out, "\n", 1) < 0)
        return -1;
    return 0;
}

static int lines_keepalive(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    (void)out;
    return 0; /* NDJSON has no comment; the client waits for the body */
}

static void lines_release(void *ctx)
{
    struct exec_lines *x = ctx;
    sl_buf_free(&x->line);
    free(x);
}

void sl_interp_execute(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *body =
        req->raw_len ? json_loadb(req->raw_body, req->raw_len, 0, NULL) : NULL;
    const char *code = json_string_value(json_object_get(body, "code"));
    const char *ctx = json_string_value(json_object_get(body, "context_id"));
    const char *language = json_string_value(json_object_get(body, "language"));
    const json_t *env = json_object_get(body, "env_vars");
    if (!json_is_object(body) || !code) {
        sl_e2b_respond_error(resp, 400, "the body must be a JSON object with code");
        return;
    }
    if (language && strcmp(language, "python") != 0 && strcmp(language, "py") != 0) {
        sl_e2b_respond_error(resp, 400, "this interpreter runs python only");
        return;
    }
    if (env && !json_is_null(env) && !json_is_object(env)) {
        sl_e2b_respond_error(resp, 400, "env_vars must be an object of strings");
        return;
    }
    if (!ctx)
        ctx = DEFAULT_CONTEXT;
    if (!context_id_ok(ctx)) {
        sl_e2b_respond_error(resp, 404, "no such context");
        return;
    }
    struct sl_error err = {0};
    int64_t generation = 0;
    if (sl_envd_generation(req, &generation, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    char exec_id[128];
    /* The default context is made on first use; others by POST /contexts. */
    if (!context_find(req, ctx, exec_id, sizeof(exec_id), NULL) &&
        (strcmp(ctx, DEFAULT_CONTEXT) != 0 ||
         context_start(req, generation, ctx, HOME, exec_id, sizeof(exec_id), &err) < 0)) {
        if (err.code[0])
            respond_err(resp, &err);
        else
            sl_e2b_respond_error(resp, 404, "no such context");
        return;
    }
    struct sl_outlog *log = NULL;
    if (sl_svc_exec_attach(req->svc, req->params[0], exec_id, generation, &log, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    uint64_t totals[2];
    sl_outlog_totals(log, totals);
    struct exec_lines *x = calloc(1, sizeof(*x));
    char id[17];
    if (!x || sl_random_hex(id, 8) < 0) {
        free(x);
        sl_outlog_put(log);
        sl_e2b_respond_error(resp, 500, "internal error");
        return;
    }
    snprintf(x->request_id, sizeof(x->request_id), "%s", id);
    sl_buf_init(&x->line, MAX_LINE);
    _cleanup_json_ json_t *line =
        json_pack("{s:s,s:s,s:o}", "id", id, "code", code, "env_vars",
                  json_is_object(env) ? json_incref((json_t *)env) : json_object());
    _cleanup_free_ char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    struct sl_stream_encoder enc = {.chunk = lines_chunk,
                                    .end = lines_end,
                                    .keepalive = lines_keepalive,
                                    .release = lines_release,
                                    .ctx = x};
    /* Reading starts where the log stood, so nothing of this answer is
     * missed, and nothing of an earlier one is read. */
    struct sl_body_source *src = sl_exec_stream_open_encoded(
        req->params[0], log, (uint64_t[2]){totals[0], UINT64_MAX}, &enc, &err);
    if (!src) {
        respond_err(resp, &err);
        return;
    }
    size_t n = text ? strlen(text) : 0;
    if (text)
        text[n] = '\n'; /* the terminating NUL becomes the line's end */
    _cleanup_json_ json_t *sent =
        text ? sl_svc_exec_stdin(req->svc, req->params[0], exec_id, generation, text, n + 1,
                                 false, &err)
             : NULL;
    if (!sent || json_integer_value(json_object_get(sent, "written")) != (json_int_t)(n + 1)) {
        /* Half a request in its stdin would spoil every later one: the
         * process goes, and the context starts afresh at its next use. */
        src->close(src);
        struct sl_error ignored = {0};
        if (sent)
            json_decref(sl_svc_exec_signal(req->svc, req->params[0], exec_id, generation, 9,
                                           &ignored));
        sl_e2b_respond_error(resp, 503, "the context's interpreter did not take the code; it was "
                                 "stopped, and starts afresh on the next execution");
        return;
    }
    resp->status = 200;
    resp->content_type = "application/x-ndjson";
    resp->source = src;
}

void sl_interp_contexts_create(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *body =
        req->raw_len ? json_loadb(req->raw_body, req->raw_len, 0, NULL) : json_object();
    const char *language = json_string_value(json_object_get(body, "language"));
    const char *cwd = json_string_value(json_object_get(body, "cwd"));
    if (!json_is_object(body) || (language && strcmp(language, "python") != 0)) {
        sl_e2b_respond_error(resp, 400, "a context is {\"language\": \"python\", \"cwd\"?}: this "
                                 "interpreter runs python only");
        return;
    }
    if (!cwd || !*cwd)
        cwd = HOME;
    if (cwd[0] != '/' || strlen(cwd) > 1024) {
        sl_e2b_respond_error(resp, 400, "cwd must be an absolute path");
        return;
    }
    struct sl_error err = {0};
    int64_t generation = 0;
    char id[17], exec_id[128];
    if (sl_envd_generation(req, &generation, &err) < 0 || sl_random_hex(id, 8) < 0 ||
        context_start(req, generation, id, cwd, exec_id, sizeof(exec_id), &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    _cleanup_json_ json_t *stored = json_pack("{s:s}", "cwd", cwd);
    respond_json(resp, 200, context_json(id, stored));
}

void sl_interp_contexts_list(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *running = sl_svc_execs_running_list(req->svc, req->params[0],
                                                               CTX_PREFIX);
    json_t *out = json_array();
    size_t i;
    const json_t *item;
    json_array_foreach(running, i, item)
    {
        const json_t *r = json_object_get(item, "request");
        const char *ctx = json_string_value(json_object_get(r, "context"));
        if (ctx)
            json_array_append_new(out, context_json(ctx, r));
    }
    respond_json(resp, 200, out);
}

void sl_interp_context_delete(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    int64_t generation = 0;
    char exec_id[128];
    if (sl_envd_generation(req, &generation, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    if (!context_id_ok(req->params[1]) ||
        !context_find(req, req->params[1], exec_id, sizeof(exec_id), NULL)) {
        sl_e2b_respond_error(resp, 404, "no such context");
        return;
    }
    if (context_stop(req, generation, req->params[1], exec_id, &err) < 0)
        respond_err(resp, &err);
    else
        respond_json(resp, 200, json_object());
}

void sl_interp_context_restart(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    int64_t generation = 0;
    char exec_id[128];
    _cleanup_json_ json_t *stored = NULL;
    const char *ctx = req->params[1];
    if (sl_envd_generation(req, &generation, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    if (!context_id_ok(ctx) || !context_find(req, ctx, exec_id, sizeof(exec_id), &stored)) {
        sl_e2b_respond_error(resp, 404, "no such context");
        return;
    }
    char cwd[1100];
    const char *c = json_string_value(json_object_get(stored, "cwd"));
    snprintf(cwd, sizeof(cwd), "%s", c ? c : HOME);
    /* The old process goes first: a context is one process at a time. */
    if (context_stop(req, generation, ctx, exec_id, &err) < 0) {
        respond_err(resp, &err);
        return;
    }
    if (context_start(req, generation, ctx, cwd, exec_id, sizeof(exec_id), &err) < 0)
        respond_err(resp, &err);
    else
        respond_json(resp, 200, json_object());
}
