/* Execution: admission, the run and the record (spec API.md §3.9, §4).
 * This build answers synchronously; background runs, polling and cancel
 * arrive with the execution-engine issue. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "runtime/env.h"
#include "service/internal.h"
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

static void run_command(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                        const struct sl_exec_request *req, struct sl_exec_record *rec,
                        int64_t *duration_ms)
{
    const struct sl_config *cfg = svc->cfg;
    struct sl_error err = {0};
    *duration_ms = 0;

    _cleanup_close_ int rootfd = ws_sandbox_open(cfg->workspace_root, sandbox_id, &err);
    if (rootfd < 0) {
        record_failure(rec, "RuntimeError", "SANDBOX_WORKSPACE_LOST");
        return;
    }
    _cleanup_close_ int global_fd = -1;
    _cleanup_close_ int scope_fd = -1;
    if (take_exec_locks(rootfd, req->exec_scope, &global_fd, &scope_fd, &err) < 0) {
        record_failure(rec, "RuntimeError", err.message);
        return;
    }

    struct sl_env env = {0};
    unsigned proxy = atomic_fetch_add(&svc->proxy_counter, 1);
    if (sl_env_build(cfg, req->env_keys, req->env_values, req->env_len, proxy, &env, &err) < 0) {
        record_failure(rec, "ValueError", err.message);
        return;
    }
    if (sl_env_write_profile(rootfd, uid, env.path, &err) < 0) {
        sl_env_free(&env);
        record_failure(rec, "RuntimeError", "could not write the login profile");
        sl_warn("exec %s/%s: %s", sandbox_id, req->exec_id, sl_error_text(&err));
        return;
    }

    char root_path[4096];
    snprintf(root_path, sizeof(root_path), "%s/%s", cfg->workspace_root, sandbox_id);
    char **argv = calloc(req->argc + 1, sizeof(*argv));
    if (!argv) {
        sl_env_free(&env);
        record_failure(rec, "RuntimeError", "out of memory");
        return;
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
    };
    struct sl_rt_exec_result res = {0};
    atomic_fetch_add(&svc->running_execs, 1);
    int rc = sl_rt_exec(svc->runtime, &rreq, &res, &err);
    atomic_fetch_sub(&svc->running_execs, 1);
    free(argv);
    sl_env_free(&env);
    if (rc < 0) {
        record_failure(rec, "RuntimeError", err.message);
        sl_warn("exec %s/%s: sandbox start failed: %s", sandbox_id, req->exec_id,
                sl_error_text(&err));
        sl_rt_exec_result_free(&res);
        return;
    }
    rec->has_exit_code = true;
    rec->exit_code = res.exit_code;
    rec->truncated = res.truncated;
    snprintf(rec->status, sizeof(rec->status), "%s",
             res.timed_out ? "TIMED_OUT" : res.exit_code == 0 ? "SUCCEEDED" : "FAILED");
    /* The memory quota's kill is named, never left a bare failure. */
    snprintf(rec->termination_reason, sizeof(rec->termination_reason), "%s",
             res.oom_killed ? "OOM_KILLED" : res.timed_out ? "TIMED_OUT" : "");
    rec->stdout_text =
        sl_utf8_repair(res.out.data ? res.out.data : "", res.out.len, &rec->stdout_len);
    rec->stderr_text =
        sl_utf8_repair(res.err.data ? res.err.data : "", res.err.len, &rec->stderr_len);
    *duration_ms = res.duration_ms;
    sl_rt_exec_result_free(&res);
}

json_t *sl_svc_exec(struct sl_service *svc, const char *sandbox_id,
                    const struct sl_exec_request *req, struct sl_error *err)
{
    struct sl_route route = {0};
    if (svc_fence(svc, sandbox_id, req->generation, &route, err) < 0)
        return NULL;
    int rc = svc_require_local_owner(svc, &route, err);
    sl_route_clear(&route);
    if (rc < 0)
        return NULL;

    if (req->sensitive_len > 0) {
        /* The default credential broker ("disabled") refuses every key. */
        const char **keys = calloc(req->sensitive_len, sizeof(*keys));
        if (!keys) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            return NULL;
        }
        memcpy(keys, req->sensitive_keys, req->sensitive_len * sizeof(*keys));
        qsort(keys, req->sensitive_len, sizeof(*keys), cmp_cstr);
        _cleanup_free_ char *set = python_set_repr(keys, req->sensitive_len);
        free(keys);
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                     "sensitive environment variables not supported without a credential "
                     "broker: %s",
                     set ? set : "{}");
        return NULL;
    }

    uid_t uid;
    if (svc_live_lookup(svc, sandbox_id, req->generation, &uid, err) < 0)
        return NULL;

    _cleanup_free_ char *command_json = sl_json_dumps(req->request);
    int64_t now = sl_now_us();
    struct sl_exec_record rec = {
        .sandbox_id = (char *)sandbox_id,
        .exec_id = (char *)req->exec_id,
        .generation = req->generation,
        .worker_id = svc->worker_id,
        .command_json = command_json,
        .exec_scope = (char *)req->exec_scope,
        .started_at = now,
        .created_at = now,
    };
    snprintf(rec.status, sizeof(rec.status), "RUNNING");
    struct sl_exec_record existing = {0};
    int admitted = svc->store->ops->exec_admit(svc->store, &rec, svc->cfg->max_parallel_execs_per_sandbox,
                                               &existing, err);
    if (admitted < 0)
        return NULL;
    if (admitted == SL_ADMIT_REPLAY) {
        json_t *view = exec_view(&existing, false, 0);
        sl_exec_record_clear(&existing);
        return view;
    }

    int64_t duration_ms = 0;
    svc_live_touch(svc, sandbox_id);
    run_command(svc, sandbox_id, uid, req, &rec, &duration_ms);
    rec.finished_at = sl_now_us();

    struct sl_error store_err = {0};
    if (svc->store->ops->exec_finish(svc->store, &rec, rec.finished_at, &store_err) < 0)
        sl_errorlog("exec %s/%s: cannot record the result: %s", sandbox_id, req->exec_id,
                    sl_error_text(&store_err));
    json_t *view = exec_view(&rec, true, duration_ms);
    free(rec.stdout_text);
    free(rec.stderr_text);
    return view;
}
