/* Execution: admission, the run and the record (spec API.md §3.9–§3.11,
 * §4).
 *
 * A command admitted here becomes a struct svc_exec in the service's table
 * of running executions (for cancel) and a runtime execution (supervised
 * by the runtime's thread). When it ends, the runtime's callback hands it
 * to the completion pool, which writes the record, releases the locks and
 * answers whoever waits (a suspended HTTP request): no thread is held
 * while a command runs. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/pool.h"
#include "common/util.h"
#include "runtime/env.h"
#include "runtime/pyvenv.h"
#include "service/internal.h"
#include "service/outlog.h"
#include "workspace/files.h"

static json_t *exec_view(const struct sl_exec_record *e, bool with_duration, int64_t duration_ms)
{
    /* Lengths, not C strings: output is data and may contain NUL. */
    return json_pack("{s:s,s:s,s:o,s:s%,s:s%,s:o,s:b,s:o}", "exec_id", e->exec_id, "status",
                     e->status, "exit_code", sl_json_int_or_null(e->exit_code, !e->has_exit_code),
                     "stdout", e->stdout_text ? e->stdout_text : "",
                     e->stdout_text ? e->stdout_len : 0, "stderr",
                     e->stderr_text ? e->stderr_text : "", e->stderr_text ? e->stderr_len : 0,
                     "duration_ms", sl_json_int_or_null(duration_ms, !with_duration), "truncated",
                     e->truncated, "termination_reason",
                     sl_json_str_or_null(e->termination_reason[0] ? e->termination_reason : NULL));
}

/* "{'A', 'B'}" — the reference prints a Python set; sorted for stability. */
static char *python_set_repr(const char *const *keys, size_t n)
{
    struct sl_buf b;
    sl_buf_init(&b, 1 << 20);
    sl_buf_append(&b, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            sl_buf_append(&b, ", ", 2);
        sl_buf_append(&b, "'", 1);
        sl_buf_append(&b, keys[i], strlen(keys[i]));
        sl_buf_append(&b, "'", 1);
    }
    sl_buf_append(&b, "}", 1);
    return b.data;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Set a failure outcome on the record: status FAILED, exit_code null,
 * stderr "<Kind>: <message>" as the reference reports runtime exceptions. */
static void record_failure(struct sl_exec_record *rec, const char *kind, const char *message)
{
    snprintf(rec->status, sizeof(rec->status), "FAILED");
    rec->has_exit_code = false;
    free(rec->stderr_text);
    rec->stderr_text = NULL;
    int n = asprintf(&rec->stderr_text, "%s: %s", kind, message);
    if (n < 0)
        rec->stderr_text = NULL;
    rec->stderr_len = n < 0 ? 0 : (size_t)n;
    rec->stdout_len = 0;
}

/* Take the sandbox execution locks of §4.4: unscoped = global exclusive,
 * scoped = global shared + scope exclusive. Returns 0 and the descriptors. */
static int take_exec_locks(int rootfd, const char *scope, int *global_fd, int *scope_fd,
                           struct sl_error *err)
{
    *global_fd = ws_lock_global(rootfd, scope == NULL, false, SL_E_SHARED_WORKSPACE_LOCKED, err);
    if (*global_fd < 0)
        return -1;
    if (scope) {
        *scope_fd = ws_lock_scope(rootfd, scope, SL_E_SHARED_WORKSPACE_LOCKED, err);
        if (*scope_fd < 0) {
            close(*global_fd);
            *global_fd = -1;
            return -1;
        }
    }
    return 0;
}


/* Ours, additive (the reclamation issue): on every exec answer, what
 * happens if nothing more is asked: when the warm session stops
 * (SANDBOX_SESSION_IDLE_SECONDS) and when the route is released
 * (SANDBOX_IDLE_TTL_SECONDS), counted from now; null when off. A command
 * still running holds both off; these are the times should it end now. */
static void add_idle_times(const struct sl_service *svc, json_t *view)
{
    if (!view)
        return;
    const struct sl_config *cfg = svc->cfg;
    int64_t now = sl_now_us();
    json_object_set_new(view, "session_idle_stop_at",
                        sl_json_ts(cfg->session_idle_seconds > 0
                                       ? now + cfg->session_idle_seconds * 1000000
                                       : 0,
                                   "Z"));
    json_object_set_new(view, "idle_release_at",
                        sl_json_ts(cfg->idle_ttl_seconds > 0 ? now + cfg->idle_ttl_seconds * 1000000
                                                             : 0,
                                   "Z"));
}

/* One execution running on this worker: in the table from admission to
 * completion. Two references: the request that launched it (a completion
 * may run before the launch call returns) and the completion. */
struct svc_exec {
    struct sl_service *svc;
    atomic_int refs;           /* the launching request and the completion */
    struct sl_exec_record rec; /* strings below are owned copies */
    char *sandbox_id, *exec_id, *command_json, *exec_scope;
    int global_fd, scope_fd;   /* the §4.4 locks, held for the run */
    struct sl_rt_exec *rt;     /* for cancel; set under execs_lock */
    struct sl_rt_exec_result res;
    /* Its output as it comes, for readers and the record (outlog.h);
     * finished, with the final answer, once the record is written. */
    struct sl_outlog *log;
    bool ran;                  /* launched: the record's output is the log's */
    /* The write end of its stdin when started with stdin open (-1: none or
     * closed); stdin_lock orders writers and the close at completion. */
    int stdin_fd;
    pthread_mutex_t stdin_lock, writer_lock;
    atomic_bool cancelled;     /* the client asked (API.md §3.11) */
    atomic_bool signalled;     /* the client sent a signal (ours) */
    /* A terminal session: stdin_fd is then its master (a copy). Clients
     * attached now, and since when none is (under execs_lock). */
    bool tty;
    int tty_clients;
    int64_t tty_alone_since_us;
    atomic_bool tty_idle;      /* ended for SANDBOX_TERMINAL_IDLE_SECONDS alone */
    bool resume_pending;       /* a resume came before x->rt (under execs_lock) */
    sl_exec_wait_fn wait;      /* NULL for background runs */
    void *wait_ctx;
    struct svc_exec *next;     /* in svc->execs */
};

static void svc_exec_put(struct svc_exec *x)
{
    if (!x || atomic_fetch_sub(&x->refs, 1) != 1)
        return;
    if (x->global_fd >= 0)
        close(x->global_fd);
    if (x->scope_fd >= 0)
        close(x->scope_fd);
    sl_rt_exec_put(x->rt);
    sl_rt_exec_result_free(&x->res);
    if (x->log)
        sl_outlog_on_resume(x->log, NULL, NULL); /* readers may keep the log */
    sl_outlog_put(x->log);
    if (x->stdin_fd >= 0)
        close(x->stdin_fd);
    pthread_mutex_destroy(&x->stdin_lock);
    pthread_mutex_destroy(&x->writer_lock);
    free(x->rec.stdout_text);
    free(x->rec.stderr_text);
    free(x->sandbox_id);
    free(x->exec_id);
    free(x->command_json);
    free(x->exec_scope);
    free(x);
}

/* -1 once the service is stopping its executions: sl_service_stop_execs
 * waits for every execution in the table, so none may join after it. */
static int table_add(struct sl_service *svc, struct svc_exec *x)
{
    pthread_mutex_lock(&svc->execs_lock);
    bool stopping = atomic_load(&svc->shutting_down);
    if (!stopping) {
        x->next = svc->execs;
        svc->execs = x;
        svc->execs_n++;
    }
    pthread_mutex_unlock(&svc->execs_lock);
    return stopping ? -1 : 0;
}

/* An ended command's log, kept for readers that reconnect after its end:
 * from it they go on byte for byte (the record holds text made valid
 * UTF-8, whose offsets differ past a byte that was not). The newest
 * RECENT_MAX of the worker, RECENT_BYTES together, RECENT_US each. */
#define RECENT_MAX 256
#define RECENT_BYTES ((size_t)64 << 20)
#define RECENT_US (600 * 1000000LL)

struct svc_recent {
    char *sandbox_id, *exec_id;
    struct sl_outlog *log;
    size_t bytes;
    int64_t ended_us;
    struct svc_recent *next; /* newest first */
};

static void recent_free(struct svc_recent *r)
{
    sl_outlog_put(r->log);
    free(r->sandbox_id);
    free(r->exec_id);
    free(r);
}

/* Under execs_lock: drop what is past the bounds (oldest first). */
static void recent_trim(struct sl_service *svc)
{
    int64_t now = sl_mono_us();
    size_t n = 0, bytes = 0;
    for (struct svc_recent **p = &svc->recent; *p;) {
        struct svc_recent *r = *p;
        if (n >= RECENT_MAX || bytes + r->bytes > RECENT_BYTES || now - r->ended_us > RECENT_US) {
            *p = r->next;
            recent_free(r);
            continue;
        }
        n++;
        bytes += r->bytes;
        p = &r->next;
    }
    svc->recent_n = n;
    svc->recent_bytes = bytes;
}

/* Under execs_lock. Out of memory: not kept (the record serves). */
static void recent_add(struct sl_service *svc, struct svc_exec *x)
{
    struct svc_recent *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    r->sandbox_id = strdup(x->sandbox_id);
    r->exec_id = strdup(x->exec_id);
    if (!r->sandbox_id || !r->exec_id) {
        free(r->sandbox_id);
        free(r->exec_id);
        free(r);
        return;
    }
    r->log = sl_outlog_ref(x->log);
    r->bytes = sl_outlog_kept_bytes(x->log);
    r->ended_us = sl_mono_us();
    r->next = svc->recent;
    svc->recent = r;
    recent_trim(svc);
}

void svc_execs_forget(struct sl_service *svc, const char *sandbox_id)
{
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_recent **p = &svc->recent; *p;) {
        struct svc_recent *r = *p;
        if (strcmp(r->sandbox_id, sandbox_id) == 0) {
            *p = r->next;
            recent_free(r);
        } else {
            p = &r->next;
        }
    }
    recent_trim(svc);
    pthread_mutex_unlock(&svc->execs_lock);
}

/* Out of the table and, its record written and its log finished, into
 * the recent ones, in one step: a reader finds it in one or the other. */
static void table_remove(struct sl_service *svc, struct svc_exec *x)
{
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec **p = &svc->execs; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            svc->execs_n--;
            if (sl_outlog_end(x->log))
                recent_add(svc, x);
            break;
        }
    pthread_cond_broadcast(&svc->execs_cond);
    pthread_mutex_unlock(&svc->execs_lock);
}

/* The sandbox's stored output stays under
 * SANDBOX_MAX_STORED_OUTPUT_BYTES_PER_SANDBOX: once a record is written,
 * the oldest records lose their output first. Counted in memory (from the
 * store on the first record after a start); the record just written keeps
 * its own. */
static void cap_stored_output(struct sl_service *svc, const struct sl_exec_record *rec)
{
    int64_t cap = svc->cfg->max_stored_output_bytes_per_sandbox;
    if (cap <= 0)
        return;
    int64_t bytes = (int64_t)(rec->stdout_len + rec->stderr_len);
    int64_t total = svc_live_output_add(svc, rec->sandbox_id, bytes);
    struct sl_error err = {0};
    if (total < 0) {
        if (svc->store->ops->exec_output_bytes(svc->store, rec->sandbox_id, &total, &err) < 0) {
            sl_warn("exec %s/%s: cannot count the sandbox's stored output: %s", rec->sandbox_id,
                    rec->exec_id, sl_error_text(&err));
            return;
        }
        svc_live_output_set(svc, rec->sandbox_id, total);
    }
    if (total <= cap)
        return;
    int64_t freed = 0;
    if (svc->store->ops->exec_output_drop(svc->store, rec->sandbox_id, rec->exec_id, total - cap,
                                          &freed, &err) < 0) {
        sl_warn("exec %s/%s: cannot drop old output over the sandbox's cap: %s", rec->sandbox_id,
                rec->exec_id, sl_error_text(&err));
        return;
    }
    svc_live_output_add(svc, rec->sandbox_id, -freed);
}

/* The final event of a command's readers: its answer without the output
 * (they have it), with how many bytes each stream produced. */
static json_t *end_event(const struct sl_exec_record *rec, bool with_duration,
                         int64_t duration_ms, const uint64_t totals[2])
{
    json_t *end = exec_view(rec, with_duration, duration_ms);
    if (!end)
        return NULL;
    json_object_del(end, "stdout");
    json_object_del(end, "stderr");
    json_object_set_new(end, "stdout_bytes", json_integer((json_int_t)totals[0]));
    json_object_set_new(end, "stderr_bytes", json_integer((json_int_t)totals[1]));
    return end;
}

/* The record is written: readers get the end. A command that never ran
 * (refused at launch) says why in its record's stderr, and its readers
 * get that too. */
static void finish_log(struct svc_exec *x, int64_t duration_ms)
{
    if (!x->ran) {
        if (x->rec.stdout_text)
            sl_outlog_append(x->log, SL_OUT_STDOUT, x->rec.stdout_text, x->rec.stdout_len);
        if (x->rec.stderr_text)
            sl_outlog_append(x->log, SL_OUT_STDERR, x->rec.stderr_text, x->rec.stderr_len);
    }
    uint64_t totals[2];
    sl_outlog_totals(x->log, totals);
    sl_outlog_finish(x->log, end_event(&x->rec, true, duration_ms, totals));
}

/* Persist the finished record, free the slot, answer the waiter. Runs on
 * the completion pool (or inline when the command never started). */
static void complete(struct svc_exec *x, int64_t duration_ms)
{
    struct sl_service *svc = x->svc;
    struct sl_exec_record *rec = &x->rec;
    rec->finished_at = sl_now_us();
    /* One line per command end (its start is logged at launch). */
    struct sl_log_field f[] = {
        SL_LF_STR("sandbox_id", x->sandbox_id),
        SL_LF_STR("exec_id", x->exec_id),
        SL_LF_STR("status", rec->status),
        rec->has_exit_code ? SL_LF_NUM("exit_code", rec->exit_code) : SL_LF_STR("exit_code", NULL),
        SL_LF_STR("reason", rec->termination_reason[0] ? rec->termination_reason : NULL),
        SL_LF_NUM("duration_ms", rec->started_at ? (rec->finished_at - rec->started_at) / 1000
                                                 : duration_ms),
        SL_LF_STR("truncated", rec->truncated ? "true" : NULL),
    };
    sl_log_event(SL_LOG_INFO, "exec_end", f, sizeof(f) / sizeof(f[0]));
    struct sl_error store_err = {0};
    if (svc->store->ops->exec_finish(svc->store, rec, rec->finished_at, &store_err) < 0) {
        sl_errorlog("exec %s/%s: cannot record the result (retried every second): %s",
                    x->sandbox_id, x->exec_id, sl_error_text(&store_err));
        svc_finish_retry_add(svc, rec);
    } else {
        cap_stored_output(svc, rec);
    }
    /* The locks go with the record written: a file call that sees them
     * free also sees the route READY. */
    if (x->global_fd >= 0)
        close(x->global_fd);
    if (x->scope_fd >= 0)
        close(x->scope_fd);
    x->global_fd = x->scope_fd = -1;
    svc_live_touch(svc, x->sandbox_id);
    finish_log(x, duration_ms);
    json_t *view = x->wait ? exec_view(rec, true, duration_ms) : NULL;
    add_idle_times(svc, view);
    sl_exec_wait_fn wait = x->wait;
    void *wait_ctx = x->wait_ctx;
    table_remove(svc, x);
    svc_exec_put(x);
    if (wait)
        wait(view, wait_ctx);
}

/* Fill the record from the runtime's result. */
static void record_result(struct sl_service *svc, struct svc_exec *x)
{
    struct sl_exec_record *rec = &x->rec;
    struct sl_rt_exec_result *res = &x->res;
    bool shutdown = atomic_load(&svc->shutting_down);
    rec->has_exit_code = true;
    rec->exit_code = res->exit_code;
    /* The record keeps what the log's head kept: the first
     * SANDBOX_MAX_OUTPUT_BYTES of each stream. */
    rec->truncated = res->truncated || sl_outlog_overflowed(x->log);
    size_t out_len, err_len;
    const char *out = sl_outlog_head(x->log, SL_OUT_STDOUT, &out_len);
    const char *errs = sl_outlog_head(x->log, SL_OUT_STDERR, &err_len);
    rec->stdout_text = sl_utf8_repair(out, out_len, &rec->stdout_len);
    rec->stderr_text = sl_utf8_repair(errs, err_len, &rec->stderr_len);
    if (shutdown) {
        /* API.md §4.2: the worker's own task cancelled (shutdown). Unlike
         * the reference (empty output), what the command printed until its
         * termination is kept, with the exit code the termination gave. */
        snprintf(rec->status, sizeof(rec->status), "CANCELLED");
        snprintf(rec->termination_reason, sizeof(rec->termination_reason), "WORKER_SHUTDOWN");
        return;
    }
    snprintf(rec->status, sizeof(rec->status), "%s",
             res->timed_out ? "TIMED_OUT" : res->exit_code == 0 ? "SUCCEEDED" : "FAILED");
    /* Why it ended when that was not its own choice: the memory quota's
     * kill is named, never left a bare failure; a client's cancel stays
     * FAILED with the signal's code (§4.6) but says so here. */
    const char *reason = res->oom_killed                                    ? "OOM_KILLED"
                         : res->timed_out                                   ? "TIMED_OUT"
                         : atomic_load(&x->tty_idle) && res->exit_code < 0  ? "TERMINAL_IDLE"
                         : atomic_load(&x->cancelled) && res->exit_code < 0 ? "CANCELLED_BY_CLIENT"
                         : atomic_load(&x->signalled) && res->exit_code < 0 ? "SIGNALLED_BY_CLIENT"
                                                                            : "";
    snprintf(rec->termination_reason, sizeof(rec->termination_reason), "%s", reason);
}

static void completion_job(void *arg)
{
    struct svc_exec *x = arg;
    atomic_fetch_sub(&x->svc->running_execs, 1);
    x->ran = true;
    /* Its stdin goes with it: a writer waiting for room gives up. */
    pthread_mutex_lock(&x->stdin_lock);
    if (x->stdin_fd >= 0)
        close(x->stdin_fd);
    x->stdin_fd = -1;
    pthread_mutex_unlock(&x->stdin_lock);
    record_result(x->svc, x);
    complete(x, x->res.duration_ms);
}

/* The runtime's supervision thread: output as it is read. */
static bool log_output(void *ctx, int stream, const char *data, size_t len)
{
    return sl_outlog_append(ctx, stream, data, len);
}

static bool log_may_read(void *ctx, int stream) { return sl_outlog_may_read(ctx, stream); }

/* A reader caught up with a paused command (any thread): its pipes are
 * read again. x lives until its log is finished (which waits for this). */
static void resume_output(void *ctx)
{
    struct svc_exec *x = ctx;
    pthread_mutex_lock(&x->svc->execs_lock);
    if (x->rt)
        sl_rt_exec_resume_output(x->rt);
    else
        x->resume_pending = true; /* the launch hands it on with the handle */
    pthread_mutex_unlock(&x->svc->execs_lock);
}

/* The runtime's supervision thread: move the result, hand over. */
static void on_rt_done(struct sl_rt_exec_result *res, void *ctx)
{
    struct svc_exec *x = ctx;
    x->res = *res;
    memset(res, 0, sizeof(*res));
    if (sl_pool_submit(x->svc->completions, completion_job, x) < 0)
        completion_job(x); /* pool stopping or full: do it here rather than lose it */
}

/* How long admission waits for the §4.4 locks: an execution that has just
 * finished writes its record before it lets them go, so a new one admitted
 * in between finds them held for a moment. */
#define LOCK_WAIT_US 200000
#define LOCK_WAIT_STEP_US 2000

/* The locks of an admitted execution, before anything else happens, so a
 * conflict is a refusal (409, the lock's code) and not a FAILED record
 * that burns the exec_id: the admission is withdrawn. 0 ok (or the root
 * cannot be opened: launch records that), -1 refused. */
static int lock_admitted(struct sl_service *svc, struct svc_exec *x, const char *scope,
                         struct sl_error *err)
{
    /* A terminal is a person's shell, an E2B process one of many side by
     * side: they take no workspace lock, so neither the sandbox's commands
     * nor its file operations wait for them (as they would behind an
     * unscoped command). */
    if (x->tty || sl_exec_scope_beside(scope))
        return 0;
    struct sl_error open_err = {0};
    _cleanup_close_ int rootfd = ws_sandbox_open(svc->cfg->workspace_root, x->sandbox_id, &open_err);
    if (rootfd < 0)
        return 0;
    int64_t until = sl_mono_us() + LOCK_WAIT_US;
    struct sl_error lock_err = {0};
    while (take_exec_locks(rootfd, scope, &x->global_fd, &x->scope_fd, &lock_err) < 0) {
        if (errno != EWOULDBLOCK || sl_mono_us() >= until) {
            struct sl_error store_err = {0};
            if (svc->store->ops->exec_withdraw(svc->store, &x->rec, sl_now_us(), &store_err) < 0)
                sl_errorlog("exec %s/%s: cannot withdraw the refused admission: %s",
                            x->sandbox_id, x->exec_id, sl_error_text(&store_err));
            if (err)
                *err = lock_err;
            return -1;
        }
        sl_error_clear(&lock_err);
        usleep(LOCK_WAIT_STEP_US);
    }
    return 0;
}

/* Everything between admission and launch (API.md §4.2): locks, the
 * environment, the login profile, the start. A failure here is a FAILED
 * record, not an HTTP error; it is completed inline. Returns whether the
 * command was launched. */
static bool launch(struct sl_service *svc, struct svc_exec *x, uid_t uid,
                   const struct sl_exec_request *req)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_error err = {0};
    _cleanup_close_ int rootfd = ws_sandbox_open(cfg->workspace_root, x->sandbox_id, &err);
    if (rootfd < 0) {
        record_failure(&x->rec, "RuntimeError", "SANDBOX_WORKSPACE_LOST");
        return false;
    }
    if (x->global_fd < 0 && !x->tty && !sl_exec_scope_beside(req->exec_scope) &&
        take_exec_locks(rootfd, req->exec_scope, &x->global_fd, &x->scope_fd, &err) < 0) {
        record_failure(&x->rec, "RuntimeError", err.message);
        return false;
    }
    struct sl_env env = {0};
    unsigned proxy = atomic_fetch_add(&svc->proxy_counter, 1);
    if (sl_env_build(cfg, req->env_keys, req->env_values, req->env_len, proxy, &env, &err) < 0) {
        record_failure(&x->rec, "ValueError", err.message);
        return false;
    }
    /* The python toolchain's /envs/python-venv, made on first use. */
    if (sl_strlist_contains(&cfg->toolchains, "python") &&
        sl_pyvenv_ensure(rootfd, uid, &err) < 0) {
        sl_warn("exec %s/%s: %s (pip falls back to the system's)", x->sandbox_id, x->exec_id,
                sl_error_text(&err));
        sl_error_clear(&err);
    }
    if (sl_env_write_profile(rootfd, uid, env.path, &err) < 0) {
        sl_env_free(&env);
        record_failure(&x->rec, "RuntimeError", "could not write the login profile");
        sl_warn("exec %s/%s: %s", x->sandbox_id, x->exec_id, sl_error_text(&err));
        return false;
    }
    char root_path[4096];
    snprintf(root_path, sizeof(root_path), "%s/%s", cfg->workspace_root, x->sandbox_id);
    char **argv = calloc(req->argc + 1, sizeof(*argv));
    if (!argv) {
        sl_env_free(&env);
        record_failure(&x->rec, "RuntimeError", "out of memory");
        return false;
    }
    for (size_t i = 0; i < req->argc; i++)
        argv[i] = (char *)req->argv[i];
    int64_t timeout_s = req->timeout_seconds ? req->timeout_seconds : cfg->default_timeout_seconds;
    int64_t grace_ms = (int64_t)(cfg->terminate_grace_seconds * 1000);
    struct sl_rt_exec_request rreq = {
        .sandbox_root = root_path,
        .uid = uid,
        .argv = argv,
        .cwd = req->cwd,
        .envp = env.vars,
        .timeout_ms = timeout_s * 1000,
        .grace_ms = grace_ms < 100 ? 100 : grace_ms,
        .max_output_bytes = (size_t)cfg->max_output_bytes,
        .output = {.write = log_output, .may_read = log_may_read, .ctx = x->log},
    };
    /* Ours: stdin a pipe the client writes to (sl_svc_exec_stdin); the
     * command gets the read end, the service keeps the write end. */
    _cleanup_close_ int stdin_read = -1;
    if (req->stdin_open) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
            free(argv);
            sl_env_free(&env);
            record_failure(&x->rec, "RuntimeError", "cannot create the command's stdin");
            return false;
        }
        (void)fcntl(p[1], F_SETFL, O_NONBLOCK);
        stdin_read = p[0];
        pthread_mutex_lock(&x->stdin_lock); /* a writer may find x already */
        x->stdin_fd = p[1];
        pthread_mutex_unlock(&x->stdin_lock);
        rreq.has_stdin = true;
        rreq.stdin_fd = stdin_read;
    }
    /* The attached templates, read-only at /envs/<name> (API.md §6.5). */
    struct sl_rt_mount *mounts = NULL;
    size_t nmounts = 0;
    _cleanup_json_ json_t *mount_holder = NULL;
    if (svc_template_mounts(svc, x->sandbox_id, &mounts, &nmounts, &mount_holder, &err) < 0) {
        free(mounts);
        free(argv);
        sl_env_free(&env);
        record_failure(&x->rec, "RuntimeError", err.message);
        return false;
    }
    rreq.mounts = mounts;
    rreq.nmounts = nmounts;
    /* A tenant's per-sandbox ceilings lower this worker's limits for its
     * sandboxes (from their session's start on). A store that cannot say
     * fails the command rather than run it without them. */
    if (svc_tenant_caps(svc, x->sandbox_id, &rreq.caps, &err) < 0) {
        free(mounts);
        free(argv);
        sl_env_free(&env);
        record_failure(&x->rec, "RuntimeError", err.message);
        return false;
    }
    /* Private network mode: the rules its network starts with, if this
     * command starts one. A store that cannot say fails the command
     * rather than run it with rules it did not ask for. */
    struct svc_egress egress;
    if (svc_egress_for_exec(svc, x->sandbox_id, &egress, &err) < 0) {
        free(mounts);
        free(argv);
        sl_env_free(&env);
        record_failure(&x->rec, "RuntimeError", err.message);
        return false;
    }
    svc_egress_rt(svc, &egress, &rreq.egress);
    int master = -1;
    if (req->tty.on)
        rreq.tty = (struct sl_rt_tty){
            .on = true, .cols = req->tty.cols, .rows = req->tty.rows, .master = &master};
    atomic_fetch_add(&svc->running_execs, 1);
    struct sl_rt_exec *handle = NULL;
    int rc = sl_rt_exec_start(svc->runtime, &rreq, on_rt_done, x, &handle, &err);
    if (rc == 0 && req->tty.on) {
        /* The terminal's master is its input; a sandbox that opened none
         * ran nothing (its reason is on stderr) or is told to stop. */
        pthread_mutex_lock(&x->stdin_lock);
        x->stdin_fd = master;
        pthread_mutex_unlock(&x->stdin_lock);
        if (master < 0)
            sl_rt_exec_cancel(handle);
    }
    if (rc == 0) {
        /* The program's name only: arguments and environment may hold
         * what a log must not. */
        const char *slash = strrchr(req->argv[0], '/');
        struct sl_log_field f[] = {
            SL_LF_STR("sandbox_id", x->sandbox_id),
            SL_LF_STR("exec_id", x->exec_id),
            SL_LF_NUM("generation", req->generation),
            SL_LF_STR("program", slash && slash[1] ? slash + 1 : req->argv[0]),
            SL_LF_NUM("args", (int64_t)req->argc - 1),
            SL_LF_STR("background", req->background ? "true" : NULL),
            SL_LF_STR("exec_scope", req->exec_scope),
            SL_LF_NUM("timeout_s", timeout_s),
        };
        sl_log_event(SL_LOG_INFO, "exec_start", f, sizeof(f) / sizeof(f[0]));
        pthread_mutex_lock(&svc->execs_lock);
        x->rt = handle; /* x cannot be gone: this request holds a reference */
        if (x->resume_pending)
            sl_rt_exec_resume_output(handle); /* a reader caught up before this */
        pthread_mutex_unlock(&svc->execs_lock);
    }
    free(argv);
    free(mounts);
    sl_env_free(&env);
    svc_egress_free(&egress);
    if (rc < 0) {
        atomic_fetch_sub(&svc->running_execs, 1);
        record_failure(&x->rec, "RuntimeError", err.message);
        sl_warn("exec %s/%s: sandbox start failed: %s", x->sandbox_id, x->exec_id,
                sl_error_text(&err));
        return false;
    }
    return true;
}

/* Waiting inside the service (callers without a deferred answer). */
struct blocking_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    json_t *doc;
    bool done;
};

static void blocking_done(json_t *doc, void *ctx)
{
    struct blocking_wait *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->doc = doc;
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int sl_svc_exec(struct sl_service *svc, const char *sandbox_id, const struct sl_exec_request *req,
                sl_exec_wait_fn wait, void *wait_ctx, json_t **out, struct sl_error *err)
{
    *out = NULL;
    /* A sandbox live here at the request's generation skips the route read:
     * admission re-checks the route under its lock (below). */
    uid_t uid;
    bool fenced = svc_live_lookup(svc, sandbox_id, req->generation, &uid, NULL) < 0;
    if (fenced && svc_route_owner(svc, sandbox_id, req->generation, err) < 0)
        return -1;

    if (req->sensitive_len > 0) {
        /* The default credential broker ("disabled") refuses every key. */
        const char **keys = calloc(req->sensitive_len, sizeof(*keys));
        if (!keys)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        memcpy(keys, req->sensitive_keys, req->sensitive_len * sizeof(*keys));
        qsort(keys, req->sensitive_len, sizeof(*keys), cmp_cstr);
        _cleanup_free_ char *set = python_set_repr(keys, req->sensitive_len);
        free(keys);
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                            "sensitive environment variables not supported without a "
                            "credential broker: %s",
                            set ? set : "{}");
    }

    /* After the fence: its refusal comes first (§4.1 step 1). */
    if (fenced && svc_live_lookup(svc, sandbox_id, req->generation, &uid, err) < 0)
        return -1;
    if (atomic_load(&svc->shutting_down))
        return sl_error_set(err, SL_E_WORKER_UNREACHABLE, 0, "the worker is shutting down");
    /* A tenant over its workspace_bytes runs nothing new until it frees
     * space (deletes and releases still work). */
    if (svc_tenant_disk_check(svc, sandbox_id, err) < 0)
        return -1;

    struct svc_exec *x = calloc(1, sizeof(*x));
    if (!x)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    x->svc = svc;
    atomic_init(&x->refs, 1);
    x->global_fd = x->scope_fd = -1;
    x->stdin_fd = -1;
    pthread_mutex_init(&x->stdin_lock, NULL);
    pthread_mutex_init(&x->writer_lock, NULL);
    x->tty = req->tty.on;
    x->tty_alone_since_us = sl_mono_us();
    x->sandbox_id = strdup(sandbox_id);
    x->exec_id = strdup(req->exec_id);
    x->command_json = sl_json_dumps(req->request);
    x->exec_scope = dup_or_null(req->exec_scope);
    x->log = sl_outlog_new((size_t)svc->cfg->max_output_bytes,
                           (size_t)svc->cfg->stream_retain_bytes);
    if (x->log)
        sl_outlog_on_resume(x->log, resume_output, x);
    if (!x->sandbox_id || !x->exec_id || !x->command_json ||
        (req->exec_scope && !x->exec_scope) || !x->log) {
        svc_exec_put(x);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    int64_t now = sl_now_us();
    x->rec = (struct sl_exec_record){
        .sandbox_id = x->sandbox_id,
        .exec_id = x->exec_id,
        .generation = req->generation,
        .worker_id = svc->worker_id,
        .command_json = x->command_json,
        .exec_scope = x->exec_scope,
        .started_at = now,
        .created_at = now,
    };
    snprintf(x->rec.status, sizeof(x->rec.status), "RUNNING");
    struct sl_exec_record existing = {0};
    int admitted = svc->store->ops->exec_admit(
        svc->store, &x->rec, svc->cfg->max_parallel_execs_per_sandbox, &existing, err);
    if (admitted < 0 && !fenced && err &&
        (sl_error_is(err, SL_E_STALE_GENERATION) || sl_error_is(err, SL_E_SUSPENDED))) {
        /* The route moved on since this process placed the sandbox (a
         * suspend, a release, a reassign elsewhere, which is a new
         * generation): the fence's answer is the one to give. */
        struct sl_error fence_err = {0};
        if (svc_route_owner(svc, sandbox_id, req->generation, &fence_err) < 0)
            *err = fence_err;
    }
    if (admitted < 0) {
        /* "Busy" because a finished command's record could not be written
         * yet (it still says RUNNING): the database is the cause. */
        if (err && (sl_error_is(err, SL_E_EXEC_SCOPE_BUSY) ||
                    sl_error_is(err, SL_E_PARALLEL_EXEC_LIMIT)) &&
            svc_finish_retry_holds(svc, sandbox_id)) {
            sl_error_set(err, SL_E_STORE, 0, "%s", SL_E_STORE);
            snprintf(err->detail, sizeof(err->detail),
                     "results of finished commands of %s wait to be written", sandbox_id);
        }
        svc_exec_put(x);
        return -1;
    }
    if (admitted == SL_ADMIT_REPLAY && !fenced) {
        /* A replay answers after the fence (§4.1 step 1 comes first), and
         * admission answers a replay whatever the route's state: a sandbox
         * still live here while its suspend or release is under way must
         * get the fence's refusal, as it did before the route read was
         * skipped. */
        if (svc_route_owner(svc, sandbox_id, req->generation, err) < 0) {
            sl_exec_record_clear(&existing);
            svc_exec_put(x);
            return -1;
        }
    }
    if (admitted == SL_ADMIT_REPLAY) {
        /* §4.3: the stored record, at once, whatever this request says.
         * Ours, additive: it says it is a replay, and when this request
         * differs from the stored one, that the answer is the earlier
         * command's (an agent reusing an id can tell). */
        *out = exec_view(&existing, false, 0);
        add_idle_times(svc, *out);
        json_object_set_new(*out, "replayed", json_true());
        if (!existing.command_json || strcmp(existing.command_json, x->command_json) != 0)
            json_object_set_new(*out, "warnings",
                                json_pack("[s]", "this exec_id was used before with a different "
                                                 "request: the answer is the earlier command's"));
        sl_exec_record_clear(&existing);
        svc_exec_put(x);
        return 0;
    }
    if (lock_admitted(svc, x, req->exec_scope, err) < 0) {
        svc_exec_put(x);
        return -1;
    }
    svc_live_touch(svc, sandbox_id);

    struct blocking_wait bw = {0};
    /* A streamed command answers at once, as a background one does: its
     * output follows on the stream (sl_svc_exec_attach). */
    bool detached = req->background || req->stream || req->tty.on;
    bool blocking = !detached && !wait;
    if (!detached) {
        if (blocking) {
            pthread_mutex_init(&bw.lock, NULL);
            pthread_cond_init(&bw.cond, NULL);
        }
        x->wait = blocking ? blocking_done : wait;
        x->wait_ctx = blocking ? (void *)&bw : wait_ctx;
    }
    atomic_fetch_add(&x->refs, 1); /* the completion's */
    bool in_table = table_add(svc, x) == 0;
    /* A background answer is built before launch: once launched, x
     * belongs to the completion. */
    json_t *stub = NULL;
    if (detached)
        stub = json_pack("{s:s,s:s,s:n,s:s,s:s,s:n,s:b,s:n}", "exec_id", req->exec_id, "status",
                         "RUNNING", "exit_code", "stdout", "", "stderr", "", "duration_ms",
                         "truncated", false, "termination_reason");
    if (!in_table) {
        snprintf(x->rec.status, sizeof(x->rec.status), "CANCELLED"); /* worker shutdown */
        complete(x, 0);
    } else if (!launch(svc, x, uid, req)) {
        complete(x, 0); /* a FAILED record; answers a waiter with it */
    }
    svc_exec_put(x);
    if (detached) {
        add_idle_times(svc, stub);
        *out = stub;
        return 0;
    }
    if (!blocking)
        return 1; /* the waiter gets the answer */
    pthread_mutex_lock(&bw.lock);
    while (!bw.done)
        pthread_cond_wait(&bw.cond, &bw.lock);
    pthread_mutex_unlock(&bw.lock);
    pthread_cond_destroy(&bw.cond);
    pthread_mutex_destroy(&bw.lock);
    *out = bw.doc;
    return 0;
}

json_t *sl_svc_exec_get(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                        int64_t generation, struct sl_error *err)
{
    if (svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return NULL;
    struct sl_exec_record rec = {0};
    int found = svc->store->ops->exec_get(svc->store, sandbox_id, exec_id, &rec, err);
    if (found < 0)
        return NULL;
    if (found == 0) {
        sl_error_set(err, SL_E_EXEC_NOT_FOUND, 0, "execution not found");
        return NULL;
    }
    json_t *view = exec_view(&rec, false, 0);
    add_idle_times(svc, view);
    sl_exec_record_clear(&rec);
    return view;
}

/* How long an attach waits for a command whose record says RUNNING to
 * appear in the table: admission writes the record a moment before. */
#define ATTACH_WAIT_US 1000000
#define ATTACH_WAIT_STEP_US 5000

/* The running (or lately ended) command's log, a reference, or NULL. */
static struct sl_outlog *running_log(struct sl_service *svc, const char *sandbox_id,
                                     const char *exec_id)
{
    struct sl_outlog *log = NULL;
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x && !log; x = x->next)
        if (strcmp(x->sandbox_id, sandbox_id) == 0 && strcmp(x->exec_id, exec_id) == 0)
            log = sl_outlog_ref(x->log);
    recent_trim(svc);
    for (struct svc_recent *r = svc->recent; r && !log; r = r->next)
        if (strcmp(r->sandbox_id, sandbox_id) == 0 && strcmp(r->exec_id, exec_id) == 0)
            log = sl_outlog_ref(r->log);
    pthread_mutex_unlock(&svc->execs_lock);
    return log;
}

static int attach_log(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                      struct sl_outlog **out, struct sl_error *err)
{
    int64_t until = sl_mono_us() + ATTACH_WAIT_US;
    for (;;) {
        if ((*out = running_log(svc, sandbox_id, exec_id)))
            return 0;
        struct sl_exec_record rec = {0};
        int found = svc->store->ops->exec_get(svc->store, sandbox_id, exec_id, &rec, err);
        if (found < 0)
            return -1;
        if (found == 0)
            return sl_error_set(err, SL_E_EXEC_NOT_FOUND, 0, "execution not found");
        /* RUNNING and not in the table: admitted a moment ago (it is being
         * launched), or ended a moment ago (its record is being written). */
        if (strcmp(rec.status, "RUNNING") == 0 && sl_mono_us() < until) {
            sl_exec_record_clear(&rec);
            usleep(ATTACH_WAIT_STEP_US);
            continue;
        }
        uint64_t totals[2] = {rec.stdout_len, rec.stderr_len};
        *out = sl_outlog_stored(rec.stdout_text, rec.stdout_len, rec.stderr_text, rec.stderr_len,
                                end_event(&rec, false, 0, totals));
        sl_exec_record_clear(&rec);
        if (!*out)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return 0;
    }
}

int sl_svc_exec_attach(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                       int64_t generation, struct sl_outlog **out, struct sl_error *err)
{
    *out = NULL;
    if (svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return -1;
    return attach_log(svc, sandbox_id, exec_id, out, err);
}

/* What a poll with offsets answers of one stream: the text from off, at
 * most max bytes of it, where the next poll goes on, and what was no longer
 * kept. */
static int read_from(struct sl_outlog *log, int stream, uint64_t off, size_t max, json_t *view)
{
    static const char *const names[2] = {"stdout", "stderr"};
    struct sl_buf buf;
    sl_buf_init(&buf, max);
    uint64_t at[2] = {UINT64_MAX, UINT64_MAX};
    at[stream] = off;
    uint64_t skipped = 0;
    char chunk[16384];
    while (buf.len < max) {
        struct sl_outlog_chunk c;
        size_t want = max - buf.len < sizeof(chunk) ? max - buf.len : sizeof(chunk);
        if (sl_outlog_read(log, at, stream, chunk, want, &c) != 1)
            break;
        skipped += c.skipped;
        if (sl_buf_append(&buf, chunk, c.len) < 0) {
            sl_buf_free(&buf);
            return -1;
        }
        at[stream] = c.offset + c.len;
    }
    size_t text_len;
    char *text = sl_utf8_repair(buf.data ? buf.data : "", buf.len, &text_len);
    sl_buf_free(&buf);
    if (!text)
        return -1;
    char key[32];
    json_object_set_new(view, names[stream], json_stringn_nocheck(text, text_len));
    free(text);
    snprintf(key, sizeof(key), "%s_next_offset", names[stream]);
    json_object_set_new(view, key, json_integer((json_int_t)at[stream]));
    snprintf(key, sizeof(key), "%s_skipped", names[stream]);
    json_object_set_new(view, key, json_integer((json_int_t)skipped));
    return 0;
}

json_t *sl_svc_exec_get_from(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                             int64_t generation, const int64_t offsets[2],
                             struct sl_error *err)
{
    struct sl_outlog *log = NULL;
    if (sl_svc_exec_attach(svc, sandbox_id, exec_id, generation, &log, err) < 0)
        return NULL;
    /* The state as of now: the end when there is one, else RUNNING. */
    const json_t *end = sl_outlog_end(log);
    json_t *view = end ? json_deep_copy(end)
                       : json_pack("{s:s,s:s,s:n,s:n,s:b,s:n}", "exec_id", exec_id, "status",
                                   "RUNNING", "exit_code", "duration_ms", "truncated", false,
                                   "termination_reason");
    if (view) {
        /* Polls read what is new only; the end says how much there was. */
        json_object_del(view, "stdout_bytes");
        json_object_del(view, "stderr_bytes");
        json_object_set_new(view, "duration_ms", json_null());
        size_t max = (size_t)svc->cfg->max_output_bytes;
        if (read_from(log, SL_OUT_STDOUT, (uint64_t)offsets[0], max, view) < 0 ||
            read_from(log, SL_OUT_STDERR, (uint64_t)offsets[1], max, view) < 0) {
            json_decref(view);
            view = NULL;
        }
        add_idle_times(svc, view);
    }
    sl_outlog_put(log);
    if (!view)
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return view;
}

/* The running command (a reference the caller puts), or NULL with err:
 * 409 SANDBOX_EXEC_NOT_RUNNING when its record says it ended, 404. */
static struct svc_exec *find_running(struct sl_service *svc, const char *sandbox_id,
                                     const char *exec_id, struct sl_error *err)
{
    struct svc_exec *found = NULL;
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x && !found; x = x->next)
        if (strcmp(x->sandbox_id, sandbox_id) == 0 && strcmp(x->exec_id, exec_id) == 0) {
            atomic_fetch_add(&x->refs, 1);
            found = x;
        }
    pthread_mutex_unlock(&svc->execs_lock);
    if (found)
        return found;
    struct sl_exec_record rec = {0};
    int got = svc->store->ops->exec_get(svc->store, sandbox_id, exec_id, &rec, err);
    sl_exec_record_clear(&rec);
    if (got > 0)
        sl_error_set(err, SL_E_EXEC_NOT_RUNNING, 0, "the command has ended");
    else if (got == 0)
        sl_error_set(err, SL_E_EXEC_NOT_FOUND, 0, "execution not found");
    return NULL;
}

/* Write what fits within the wait; -1 with errno on a broken pipe. */
static ssize_t write_within(int fd, const char *data, size_t len, int64_t until_us)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            return done ? (ssize_t)done : -1;
        int64_t left_ms = (until_us - sl_mono_us()) / 1000;
        if (left_ms <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, (int)left_ms) <= 0)
            break;
    }
    return (ssize_t)done;
}

json_t *sl_svc_exec_stdin(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                          int64_t generation, const char *data, size_t len, bool close_it,
                          struct sl_error *err)
{
    if (svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return NULL;
    struct svc_exec *x = find_running(svc, sandbox_id, exec_id, err);
    if (!x)
        return NULL;
    ssize_t written = 0;
    /* Writers take turns (writer_lock), and the wait for room happens on a
     * copy of the descriptor, without stdin_lock: the completion closes
     * the command's stdin under it and never waits behind a writer. */
    pthread_mutex_lock(&x->writer_lock);
    pthread_mutex_lock(&x->stdin_lock);
    int fd = x->stdin_fd >= 0 && len ? fcntl(x->stdin_fd, F_DUPFD_CLOEXEC, 3) : -1;
    bool open_ = x->stdin_fd >= 0;
    pthread_mutex_unlock(&x->stdin_lock);
    if (fd >= 0) {
        /* A command that ended meanwhile closed the pipe's other end
         * (EPIPE): then it is no longer running, as far as stdin goes. */
        written = write_within(fd, data, len, sl_mono_us() + SL_STDIN_WAIT_MS * 1000);
        close(fd);
    }
    pthread_mutex_lock(&x->stdin_lock);
    if (written < 0 && x->stdin_fd >= 0) {
        close(x->stdin_fd);
        x->stdin_fd = -1;
    }
    if (written < 0)
        open_ = false;
    if (open_ && x->stdin_fd < 0 && written == 0 && len)
        open_ = false; /* closed while it waited, before anything went */
    if (open_ && close_it && x->stdin_fd >= 0) {
        close(x->stdin_fd);
        x->stdin_fd = -1;
    }
    pthread_mutex_unlock(&x->stdin_lock);
    pthread_mutex_unlock(&x->writer_lock);
    svc_exec_put(x);
    if (!open_) {
        sl_error_set(err, SL_E_STDIN_CLOSED, 0,
                     written < 0 ? "the command closed its stdin"
                                 : "the command has no stdin open: start it with \"stdin\": "
                                   "true, and write before closing it");
        return NULL;
    }
    svc_live_touch(svc, sandbox_id);
    return json_pack("{s:I,s:b}", "written", (json_int_t)written, "closed", close_it);
}

json_t *sl_svc_exec_signal(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                           int64_t generation, int sig, struct sl_error *err)
{
    if (svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return NULL;
    struct svc_exec *x = find_running(svc, sandbox_id, exec_id, err);
    if (!x)
        return NULL;
    bool sent = false;
    pthread_mutex_lock(&svc->execs_lock);
    if (x->rt) {
        sent = sl_rt_exec_signal(x->rt, sig);
        if (sent)
            atomic_store(&x->signalled, true);
    }
    pthread_mutex_unlock(&svc->execs_lock);
    svc_exec_put(x);
    return json_pack("{s:b}", "signalled", sent);
}

json_t *sl_svc_exec_cancel(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                           int64_t generation, struct sl_error *err)
{
    if (svc_owner_fence(svc, sandbox_id, generation, err) < 0)
        return NULL;
    bool cancelled = false;
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->rt && strcmp(x->sandbox_id, sandbox_id) == 0 && strcmp(x->exec_id, exec_id) == 0) {
            /* Signals only: the run ends through its normal path, FAILED
             * with the signal's negative code (§4.6). */
            cancelled = sl_rt_exec_cancel(x->rt);
            if (cancelled)
                atomic_store(&x->cancelled, true);
            break;
        }
    pthread_mutex_unlock(&svc->execs_lock);
    return json_pack("{s:b}", "cancelled", cancelled);
}

int svc_terminal_take(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                      struct sl_terminal *out, struct sl_error *err)
{
    out->master = -1;
    out->log = NULL;
    struct svc_exec *x = find_running(svc, sandbox_id, exec_id, err);
    if (!x)
        return -1;
    int rc = 0;
    pthread_mutex_lock(&x->stdin_lock);
    if (!x->tty)
        rc = sl_error_set(err, SL_E_NOT_A_TERMINAL, 0,
                          "this command runs without a terminal: attach to its output "
                          "stream instead");
    else if (x->stdin_fd < 0)
        rc = sl_error_set(err, SL_E_EXEC_NOT_RUNNING, 0, "the terminal has ended");
    else if ((out->master = fcntl(x->stdin_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        rc = sl_error_errno(err, SL_E_INTERNAL, "cannot share the terminal");
    pthread_mutex_unlock(&x->stdin_lock);
    if (rc == 0) {
        out->log = sl_outlog_ref(x->log);
        snprintf(out->exec_id, sizeof(out->exec_id), "%s", x->exec_id);
        pthread_mutex_lock(&svc->execs_lock);
        x->tty_clients++;
        pthread_mutex_unlock(&svc->execs_lock);
    }
    svc_exec_put(x);
    return rc;
}

void sl_svc_terminal_detach(struct sl_service *svc, const char *sandbox_id, const char *exec_id)
{
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->tty && strcmp(x->sandbox_id, sandbox_id) == 0 &&
            strcmp(x->exec_id, exec_id) == 0 && x->tty_clients > 0) {
            if (--x->tty_clients == 0)
                x->tty_alone_since_us = sl_mono_us();
            break;
        }
    pthread_mutex_unlock(&svc->execs_lock);
}

int svc_terminals_count(struct sl_service *svc, const char *sandbox_id)
{
    int n = 0;
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->tty && (!sandbox_id || strcmp(x->sandbox_id, sandbox_id) == 0))
            n++;
    pthread_mutex_unlock(&svc->execs_lock);
    return n;
}

void svc_terminals_cycle(struct sl_service *svc)
{
    int64_t idle_us = svc->cfg->terminal_idle_seconds * 1000000;
    if (idle_us <= 0)
        return;
    int64_t now = sl_mono_us();
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->tty && x->rt && x->tty_clients == 0 && !atomic_load(&x->tty_idle) &&
            now - x->tty_alone_since_us >= idle_us) {
            atomic_store(&x->tty_idle, true);
            sl_rt_exec_cancel(x->rt);
        }
    pthread_mutex_unlock(&svc->execs_lock);
}

bool sl_svc_env_is_managed_as(struct sl_service *svc, const char *name, const char *value)
{
    return sl_env_is_managed_as(svc->cfg, name, value);
}

json_t *sl_svc_execs_running_list(struct sl_service *svc, const char *sandbox_id,
                                  const char *prefix)
{
    json_t *list = json_array();
    if (!list)
        return NULL;
    size_t plen = strlen(prefix);
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next) {
        if (strcmp(x->sandbox_id, sandbox_id) != 0 || strncmp(x->exec_id, prefix, plen) != 0 ||
            sl_outlog_end(x->log))
            continue;
        json_t *request = x->command_json ? json_loads(x->command_json, 0, NULL) : NULL;
        json_t *item = json_pack("{s:s,s:o}", "exec_id", x->exec_id, "request",
                                 request ? request : json_object());
        if (!item || json_array_append_new(list, item) < 0) {
            json_decref(list);
            list = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&svc->execs_lock);
    return list;
}

int svc_execs_kill(struct sl_service *svc, const char *sandbox_id)
{
    int n = 0;
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->rt && strcmp(x->sandbox_id, sandbox_id) == 0 && sl_rt_exec_signal(x->rt, SIGKILL)) {
            atomic_store(&x->signalled, true);
            n++;
        }
    pthread_mutex_unlock(&svc->execs_lock);
    return n;
}

int svc_execs_running(struct sl_service *svc, const char *sandbox_id)
{
    int n = 0;
    pthread_mutex_lock(&svc->execs_lock);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (strcmp(x->sandbox_id, sandbox_id) == 0)
            n++;
    pthread_mutex_unlock(&svc->execs_lock);
    return n;
}

int svc_execs_start(struct sl_service *svc, struct sl_error *err)
{
    pthread_mutex_init(&svc->execs_lock, NULL);
    pthread_condattr_t cattr; /* the shutdown waits against monotonic deadlines */
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&svc->execs_cond, &cattr);
    pthread_condattr_destroy(&cattr);
    /* Completions write one record each; a few threads keep the store
     * busy without queueing behind one slow write. */
    svc->completions = sl_pool_new("sl-complete", 4, 1 << 16);
    if (!svc->completions)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "cannot start the completion threads");
    return 0;
}

void sl_service_stop_execs(struct sl_service *svc)
{
    if (!svc || !svc->completions)
        return;
    /* The termination sequence of §4.6 for each (SIGTERM, grace, SIGKILL,
     * grace), all at once, so the whole shutdown is bounded by about two
     * grace periods; whatever is still there after that is killed outright. */
    int64_t grace_us = (int64_t)(svc->cfg->terminate_grace_seconds * 1e6);
    int64_t deadline = sl_mono_us() + 2 * grace_us + 2000000;
    pthread_mutex_lock(&svc->execs_lock);
    atomic_store(&svc->shutting_down, true);
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->rt)
            sl_rt_exec_cancel(x->rt);
    while (svc->execs && sl_mono_us() < deadline) {
        struct timespec until = {.tv_sec = deadline / 1000000,
                                 .tv_nsec = (deadline % 1000000) * 1000};
        pthread_cond_timedwait(&svc->execs_cond, &svc->execs_lock, &until);
    }
    for (struct svc_exec *x = svc->execs; x; x = x->next)
        if (x->rt)
            sl_rt_exec_kill(x->rt);
    while (svc->execs)
        pthread_cond_wait(&svc->execs_cond, &svc->execs_lock);
    pthread_mutex_unlock(&svc->execs_lock);
}

void svc_execs_close(struct sl_service *svc)
{
    if (!svc->completions)
        return;
    sl_service_stop_execs(svc);
    sl_pool_free(svc->completions);
    svc->completions = NULL;
    while (svc->recent) {
        struct svc_recent *r = svc->recent;
        svc->recent = r->next;
        recent_free(r);
    }
    pthread_cond_destroy(&svc->execs_cond);
    pthread_mutex_destroy(&svc->execs_lock);
}
