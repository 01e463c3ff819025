/* envd's process.Process over the exec service (e2b.h).
 *
 * An E2B process is an execution of its sandbox like any other (record,
 * limits, fence, output log), started in the background in the service's
 * own scope "~e2b" so any number run side by side, as E2B's do. Its pid
 * is the number in its exec_id ("e2b-<pid>"): a handle the SDK lists,
 * reconnects to, signals and feeds; not the kernel's pid inside the
 * sandbox. Its events are the output log read through the exec stream
 * registry, framed as Connect envelopes: start, data, keepalives, end,
 * then the end-stream envelope; a Connect replays from the first byte. */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>

#include "api/exec_stream.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "config/config.h"
#include "e2b/connect.h"
#include "e2b/e2b.h"
#include "e2b/envd.h"
#include "service/outlog.h"
#include "service/service.h"
#include "service/tenants.h"
#include "store/store.h"

#define EXEC_PREFIX "e2b-"
#define HOME_CWD "/home/user"
/* A process has no deadline of its own in E2B: the sandbox's end is its
 * end. The runtime wants one: the longest an execution may have. */
#define PROCESS_TIMEOUT_SECONDS 86400

/* ---- events ---- */

struct proc_events {
    uint32_t pid;
    /* A terminal's: its output is "pty" data, and the stream is one of
     * its attached clients while it is open (so it is not ended as idle). */
    bool pty;
    struct sl_service *svc;
    char sandbox_id[160];
    char exec_id[32];
};

static int ev_frame(struct sl_buf *out, json_t *event)
{
    _cleanup_json_ json_t *msg = event ? json_pack("{s:o}", "event", event) : NULL;
    return msg ? sl_connect_frame(out, 0, msg) : -1;
}

static int ev_begin(void *ctx, struct sl_buf *out)
{
    struct proc_events *e = ctx;
    return ev_frame(out, json_pack("{s:{s:I}}", "start", "pid", (json_int_t)e->pid));
}

static int ev_chunk(void *ctx, int stream, const char *data, size_t len, struct sl_buf *out)
{
    struct proc_events *e = ctx;
    _cleanup_free_ char *b64 = sl_base64_encode(data, len);
    if (!b64)
        return -1;
    const char *kind = e->pty ? "pty" : stream == SL_OUT_STDERR ? "stderr" : "stdout";
    return ev_frame(out, json_pack("{s:{s:s}}", "data", kind, b64));
}

static int ev_keepalive(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    return ev_frame(out, json_pack("{s:{}}", "keepalive"));
}

/* E2B's end: the exit code, and for a signal what Go's os/exec says
 * ("signal: killed"), exitCode -1; the error names the status as envd's
 * does ("exit status 1"), which the SDK's CommandExitError carries. */
static int ev_end(void *ctx, const json_t *end, struct sl_buf *out)
{
    (void)ctx;
    /* The service's exit code is -N for a signal it sent (a kill, a
     * cancel), the process's own status otherwise (128+N after a signal
     * nobody here sent, as a shell reports it). */
    const json_t *code = json_object_get(end, "exit_code");
    json_int_t exit_code = json_is_integer(code) ? json_integer_value(code) : -1;
    char status[64];
    bool exited = exit_code >= 0;
    if (exited)
        snprintf(status, sizeof(status), "exit status %lld", (long long)exit_code);
    else
        snprintf(status, sizeof(status), "signal: killed");
    json_t *ev = json_pack("{s:{s:I,s:b,s:s}}", "end", "exitCode",
                           exited ? exit_code : (json_int_t)-1, "exited", exited, "status",
                           status);
    if (ev && !(exited && exit_code == 0))
        json_object_set_new(json_object_get(ev, "end"), "error", json_string(status));
    if (ev_frame(out, ev) < 0)
        return -1;
    return sl_connect_end(out, NULL, NULL);
}

static void ev_release(void *ctx)
{
    struct proc_events *e = ctx;
    if (e->pty)
        sl_svc_terminal_detach(e->svc, e->sandbox_id, e->exec_id);
    free(e);
}

/* The events of a process from its first byte: `log` (a reference, taken),
 * and for a terminal the attachment the stream holds until it closes. */
static void respond_log(struct sl_request *req, struct sl_response *resp, struct sl_outlog *log,
                        const char *exec_id, uint32_t pid, bool pty)
{
    struct sl_error err = {0};
    struct proc_events *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        sl_outlog_put(log);
        if (pty)
            sl_svc_terminal_detach(req->svc, req->params[0], exec_id);
        sl_envd_stream_error(resp, "internal", "out of memory");
        return;
    }
    ctx->pid = pid;
    ctx->pty = pty;
    ctx->svc = req->svc;
    snprintf(ctx->sandbox_id, sizeof(ctx->sandbox_id), "%s", req->params[0]);
    snprintf(ctx->exec_id, sizeof(ctx->exec_id), "%s", exec_id);
    struct sl_stream_encoder enc = {.begin = ev_begin,
                                    .chunk = ev_chunk,
                                    .end = ev_end,
                                    .keepalive = ev_keepalive,
                                    .release = ev_release,
                                    .ctx = ctx};
    struct sl_body_source *src = sl_exec_stream_open_encoded(req->params[0], log,
                                                             (uint64_t[2]){0, 0}, &enc, &err);
    if (!src) {
        sl_envd_stream_err(resp, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = SL_CONNECT_STREAM_TYPE;
    resp->source = src;
}

/* A running process's events: a terminal's through an attachment. */
static void respond_events(struct sl_request *req, struct sl_response *resp, int64_t generation,
                           const char *exec_id, uint32_t pid)
{
    struct sl_error err = {0};
    struct sl_terminal t = {.master = -1};
    if (sl_svc_terminal_attach(req->svc, req->params[0], generation, exec_id, &t, &err) == 0) {
        struct sl_outlog *log = t.log;
        t.log = NULL;
        sl_terminal_clear(&t);
        respond_log(req, resp, log, exec_id, pid, true);
        return;
    }
    if (!sl_error_is(&err, SL_E_NOT_A_TERMINAL) && !sl_error_is(&err, SL_E_EXEC_NOT_RUNNING) &&
        !sl_error_is(&err, SL_E_EXEC_NOT_FOUND)) {
        sl_envd_stream_err(resp, &err);
        return;
    }
    sl_error_clear(&err);
    struct sl_outlog *log = NULL;
    if (sl_svc_exec_attach(req->svc, req->params[0], exec_id, generation, &log, &err) < 0) {
        sl_envd_stream_err(resp, &err);
        return;
    }
    respond_log(req, resp, log, exec_id, pid, false);
}

/* ---- selectors ---- */

/* The pid a ProcessSelector names: {"pid": N} (a tag is looked up among
 * the running ones). 0 when it names none. */
static uint32_t selected_pid(struct sl_request *req, const json_t *selector)
{
    const json_t *pid = json_object_get(selector, "pid");
    if (json_is_integer(pid) && json_integer_value(pid) > 0 &&
        json_integer_value(pid) <= UINT32_MAX)
        return (uint32_t)json_integer_value(pid);
    const char *tag = json_string_value(json_object_get(selector, "tag"));
    if (!tag)
        return 0;
    _cleanup_json_ json_t *running = sl_svc_execs_running_list(req->svc, req->params[0],
                                                               EXEC_PREFIX);
    size_t i;
    const json_t *item;
    json_array_foreach(running, i, item)
    {
        const json_t *t = json_object_get(json_object_get(item, "request"), "tag");
        if (json_is_string(t) && strcmp(json_string_value(t), tag) == 0)
            return (uint32_t)strtoul(json_string_value(json_object_get(item, "exec_id")) +
                                         strlen(EXEC_PREFIX),
                                     NULL, 10);
    }
    return 0;
}

static void exec_id_of(uint32_t pid, char out[32])
{
    snprintf(out, 32, EXEC_PREFIX "%u", pid);
}

/* ---- Start ---- */

/* The sandbox's E2B environment under the request's own (which wins). */
static json_t *merged_envs(struct sl_request *req, const json_t *own)
{
    json_t *envs = json_object();
    _cleanup_free_ char *text = sl_svc_e2b_env(req->svc, req->params[0]);
    _cleanup_json_ json_t *base = text ? json_loads(text, 0, NULL) : NULL;
    if (envs && json_is_object(base))
        json_object_update(envs, base);
    if (envs && json_is_object(own))
        json_object_update(envs, (json_t *)own);
    return envs;
}

static void process_start(struct sl_request *req, struct sl_response *resp, const json_t *msg,
                          int64_t generation)
{
    const json_t *proc = json_object_get(msg, "process");
    const char *cmd = json_string_value(json_object_get(proc, "cmd"));
    const json_t *args = json_object_get(proc, "args");
    if (!cmd || !*cmd || (args && !json_is_array(args)) || json_array_size(args) > 255) {
        sl_envd_stream_error(resp, "invalid_argument",
                             "process.cmd is required, and args an array of at most 255 strings");
        return;
    }
    const json_t *pty = json_object_get(msg, "pty");
    const json_t *size = json_object_get(pty, "size");
    json_int_t cols = json_integer_value(json_object_get(size, "cols"));
    json_int_t rows = json_integer_value(json_object_get(size, "rows"));
    if (pty && (cols < 1 || cols > 1000 || rows < 1 || rows > 1000)) {
        sl_envd_stream_error(resp, "invalid_argument",
                             "pty.size needs cols and rows from 1 to 1000");
        return;
    }
    const char *argv[256] = {cmd};
    size_t argc = 1, i;
    const json_t *a;
    json_array_foreach(args, i, a)
    {
        if (!json_is_string(a)) {
            sl_envd_stream_error(resp, "invalid_argument", "process.args must be strings");
            return;
        }
        argv[argc++] = json_string_value(a);
    }
    const char *cwd = json_string_value(json_object_get(proc, "cwd"));
    char cwd_buf[4200];
    if (!cwd || !*cwd) {
        cwd = HOME_CWD;
    } else if (cwd[0] != '/') {
        snprintf(cwd_buf, sizeof(cwd_buf), HOME_CWD "/%s", cwd);
        cwd = cwd_buf;
    }
    _cleanup_json_ json_t *envs = merged_envs(req, json_object_get(proc, "envs"));
    size_t n_env = json_object_size(envs), k = 0;
    _cleanup_free_ const char **keys = calloc(n_env + 1, sizeof(*keys));
    _cleanup_free_ const char **values = calloc(n_env + 1, sizeof(*values));
    if (!envs || !keys || !values) {
        sl_envd_stream_error(resp, "internal", "out of memory");
        return;
    }
    const char *key;
    const json_t *value;
    json_object_foreach(envs, key, value)
    {
        if (!json_is_string(value)) {
            sl_envd_stream_error(resp, "invalid_argument", "process.envs must map to strings");
            return;
        }
        /* A managed variable given its managed value (the SDK's pty sends
         * LANG=C.UTF-8) changes nothing: not an override to refuse. */
        if (sl_svc_env_is_managed_as(req->svc, key, json_string_value(value)))
            continue;
        keys[k] = key;
        values[k++] = json_string_value(value);
    }
    bool stdin_open = json_is_true(json_object_get(msg, "stdin"));
    const json_t *tag = json_object_get(msg, "tag");
    /* A fresh pid: a collision with an exec_id used before is a replay,
     * and another number is drawn. */
    for (int attempt = 0; attempt < 8; attempt++) {
        int64_t pid = 0;
        char exec_id[32];
        if (sl_random_range(1000, 4000000, &pid) < 0)
            break;
        exec_id_of((uint32_t)pid, exec_id);
        _cleanup_json_ json_t *stored =
            json_pack("{s:s,s:I,s:[s],s:s,s:o,s:o,s:b,s:s}", "exec_id", exec_id, "generation",
                      (json_int_t)generation, "argv", cmd, "cmd", cmd, "args",
                      args ? json_incref((json_t *)args) : json_array(), "envs",
                      json_is_object(json_object_get(proc, "envs"))
                          ? json_incref(json_object_get(proc, "envs"))
                          : json_object(),
                      "stdin", stdin_open, "cwd", cwd);
        if (stored && args)
            json_array_extend(json_object_get(stored, "argv"), (json_t *)args);
        if (stored && json_is_string(tag))
            json_object_set(stored, "tag", (json_t *)tag);
        struct sl_error err = {0};
        if (pty) {
            if (stored)
                json_object_set_new(stored, "pty", json_true());
            struct sl_terminal_spec spec = {
                .exec_id = exec_id, .argv = argv, .argc = argc, .cwd = cwd,
                .env_keys = keys, .env_values = values, .env_len = k,
                .cols = (unsigned short)cols, .rows = (unsigned short)rows,
                .exec_scope = SL_EXEC_SCOPE_E2B, .request = stored,
            };
            struct sl_terminal t = {.master = -1};
            if (sl_svc_terminal_start(req->svc, req->params[0], generation, &spec, &t, &err) < 0) {
                if (err.errnum == EEXIST)
                    continue; /* a pid used before: another */
                sl_envd_stream_err(resp, &err);
                return;
            }
            struct sl_outlog *log = t.log;
            t.log = NULL;
            sl_terminal_clear(&t);
            respond_log(req, resp, log, exec_id, (uint32_t)pid, true);
            return;
        }
        struct sl_exec_request er = {
            .exec_id = exec_id,
            .generation = generation,
            .argv = argv,
            .argc = argc,
            .cwd = cwd,
            .env_keys = keys,
            .env_values = values,
            .env_len = k,
            .timeout_seconds = PROCESS_TIMEOUT_SECONDS,
            .background = true,
            .stream = true,
            .stdin_open = stdin_open,
            .exec_scope = SL_EXEC_SCOPE_E2B,
            .request = stored,
        };
        json_t *answer = NULL;
        int rc = sl_svc_exec(req->svc, req->params[0], &er, NULL, NULL, &answer, &err);
        bool replayed = rc == 0 && json_is_true(json_object_get(answer, "replayed"));
        json_decref(answer);
        if (rc < 0) {
            sl_envd_stream_err(resp, &err);
            return;
        }
        if (!replayed) {
            respond_events(req, resp, generation, exec_id, (uint32_t)pid);
            return;
        }
    }
    sl_envd_stream_error(resp, "internal", "no free process id");
}

/* ---- the others ---- */

static void process_list(struct sl_request *req, struct sl_response *resp)
{
    _cleanup_json_ json_t *running = sl_svc_execs_running_list(req->svc, req->params[0],
                                                               EXEC_PREFIX);
    json_t *processes = json_array();
    size_t i;
    const json_t *item;
    json_array_foreach(running, i, item)
    {
        const json_t *r = json_object_get(item, "request");
        const char *id = json_string_value(json_object_get(item, "exec_id"));
        json_t *config = json_pack("{s:s,s:O,s:O}", "cmd",
                                   json_string_value(json_object_get(r, "cmd"))
                                       ? json_string_value(json_object_get(r, "cmd"))
                                       : "",
                                   "args", json_object_get(r, "args"), "envs",
                                   json_object_get(r, "envs"));
        if (config && json_is_string(json_object_get(r, "cwd")))
            json_object_set(config, "cwd", json_object_get(r, "cwd"));
        json_t *info = json_pack("{s:I,s:o}", "pid",
                                 (json_int_t)strtoul(id + strlen(EXEC_PREFIX), NULL, 10),
                                 "config", config);
        if (info && json_is_string(json_object_get(r, "tag")))
            json_object_set(info, "tag", json_object_get(r, "tag"));
        json_array_append_new(processes, info);
    }
    sl_envd_unary(resp, json_pack("{s:o}", "processes", processes));
}

static void process_signal(struct sl_request *req, struct sl_response *resp, const json_t *msg,
                           int64_t generation)
{
    uint32_t pid = selected_pid(req, json_object_get(msg, "process"));
    const char *name = json_string_value(json_object_get(msg, "signal"));
    int sig = name && strcmp(name, "SIGNAL_SIGKILL") == 0   ? 9
              : name && strcmp(name, "SIGNAL_SIGTERM") == 0 ? 15
                                                            : 0;
    if (!sig) {
        sl_envd_unary_error(resp, "invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        return;
    }
    char exec_id[32];
    exec_id_of(pid, exec_id);
    struct sl_error err = {0};
    _cleanup_json_ json_t *doc =
        pid ? sl_svc_exec_signal(req->svc, req->params[0], exec_id, generation, sig, &err) : NULL;
    if (!pid)
        sl_envd_unary_error(resp, "not_found", "no such process");
    else if (!doc)
        sl_envd_unary_err(resp, &err);
    else if (!json_is_true(json_object_get(doc, "signalled")))
        sl_envd_unary_error(resp, "not_found", "the process has ended");
    else
        sl_envd_unary(resp, json_object());
}

static void process_input(struct sl_request *req, struct sl_response *resp, const json_t *msg,
                          int64_t generation, bool close_it)
{
    uint32_t pid = selected_pid(req, json_object_get(msg, "process"));
    const json_t *input = json_object_get(msg, "input");
    const char *b64 = json_string_value(json_object_get(input, "stdin"));
    if (!b64)
        b64 = json_string_value(json_object_get(input, "pty"));
    struct sl_buf bytes;
    sl_buf_init(&bytes, SL_STDIN_MAX_BYTES);
    struct sl_error err = {0};
    if (!pid) {
        sl_envd_unary_error(resp, "not_found", "no such process");
    } else if (!close_it && !b64) {
        sl_envd_unary_error(resp, "invalid_argument", "input.stdin is required");
    } else if (b64 && sl_base64_decode_strict(b64, strlen(b64), &bytes, SL_STDIN_MAX_BYTES,
                                              NULL) < 0) {
        sl_envd_unary_error(resp, "invalid_argument",
                            "input must be standard base64 of at most 1 MiB");
    } else {
        char exec_id[32];
        exec_id_of(pid, exec_id);
        _cleanup_json_ json_t *doc =
            sl_svc_exec_stdin(req->svc, req->params[0], exec_id, generation,
                              bytes.data ? bytes.data : "", bytes.len, close_it, &err);
        if (doc)
            sl_envd_unary(resp, json_object());
        else
            sl_envd_unary_err(resp, &err);
    }
    sl_buf_free(&bytes);
}

/* A terminal's new size (TIOCSWINSZ: its foreground job gets SIGWINCH). */
static void process_update(struct sl_request *req, struct sl_response *resp, const json_t *msg,
                           int64_t generation)
{
    uint32_t pid = selected_pid(req, json_object_get(msg, "process"));
    const json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
    json_int_t cols = json_integer_value(json_object_get(size, "cols"));
    json_int_t rows = json_integer_value(json_object_get(size, "rows"));
    if (!size) {
        sl_envd_unary(resp, json_object()); /* nothing to change */
        return;
    }
    if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000) {
        sl_envd_unary_error(resp, "invalid_argument", "pty.size needs cols and rows from 1 to 1000");
        return;
    }
    char exec_id[32];
    exec_id_of(pid, exec_id);
    struct sl_error err = {0};
    struct sl_terminal t = {.master = -1};
    if (!pid) {
        sl_envd_unary_error(resp, "not_found", "no such process");
        return;
    }
    if (sl_svc_terminal_attach(req->svc, req->params[0], generation, exec_id, &t, &err) < 0) {
        sl_envd_unary_err(resp, &err);
        return;
    }
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    int rc = ioctl(t.master, TIOCSWINSZ, &ws);
    sl_svc_terminal_detach(req->svc, req->params[0], exec_id);
    sl_terminal_clear(&t);
    if (rc < 0)
        sl_envd_unary_error(resp, "internal", "the terminal could not be resized");
    else
        sl_envd_unary(resp, json_object());
}

void sl_envd_process(struct sl_request *req, struct sl_response *resp, const char *method,
                     bool streaming)
{
    _cleanup_json_ json_t *msg = NULL;
    const char *why = NULL;
    if (streaming) {
        if (sl_connect_unwrap(req->raw_body, req->raw_len, &msg, &why) < 0) {
            sl_envd_stream_error(resp, "invalid_argument", why);
            return;
        }
    } else {
        msg = req->raw_len ? json_loadb(req->raw_body, req->raw_len, 0, NULL) : json_object();
        if (!json_is_object(msg)) {
            sl_envd_unary_error(resp, "invalid_argument", "the request is not a JSON object");
            return;
        }
    }
    struct sl_error err = {0};
    int64_t generation = 0;
    if (sl_envd_user_check(req, &err) < 0 || sl_envd_generation(req, &generation, &err) < 0) {
        if (streaming)
            sl_envd_stream_err(resp, &err);
        else
            sl_envd_unary_err(resp, &err);
        return;
    }
    if (streaming && strcmp(method, "Start") == 0) {
        bool held = false;
        if (sl_envd_command_quota_enter(req, &held, &err) < 0) {
            sl_envd_stream_err(resp, &err);
            return;
        }
        process_start(req, resp, msg, generation);
        sl_svc_quota_leave(req->svc, held);
    } else if (streaming && strcmp(method, "Connect") == 0) {
        uint32_t pid = selected_pid(req, json_object_get(msg, "process"));
        char exec_id[32];
        exec_id_of(pid, exec_id);
        if (!pid)
            sl_envd_stream_error(resp, "not_found", "no such process");
        else
            respond_events(req, resp, generation, exec_id, pid);
    } else if (!streaming && strcmp(method, "List") == 0) {
        process_list(req, resp);
    } else if (!streaming && strcmp(method, "SendSignal") == 0) {
        process_signal(req, resp, msg, generation);
    } else if (!streaming && strcmp(method, "SendInput") == 0) {
        process_input(req, resp, msg, generation, false);
    } else if (!streaming && strcmp(method, "CloseStdin") == 0) {
        process_input(req, resp, msg, generation, true);
    } else if (!streaming && strcmp(method, "Update") == 0) {
        process_update(req, resp, msg, generation);
    } else if (streaming) {
        sl_envd_stream_error(resp, "unimplemented", "this process RPC is not supported here");
    } else {
        sl_envd_unary_error(resp, "unimplemented", "this process RPC is not supported here");
    }
}
