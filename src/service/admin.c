/* Admin views of executions (API.md §3.18): the fleet's records, read from
 * the store, with paging bounded by the API layer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "service/internal.h"

/* argv from the stored request; [] when it cannot be read. */
static json_t *stored_argv(const char *command_json)
{
    json_t *req = command_json ? json_loads(command_json, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *argv = json_object_get(req, "argv");
    json_t *out = json_is_array(argv) ? json_incref(argv) : json_array();
    json_decref(req);
    return out;
}

static json_t *admin_exec_item(const struct sl_exec_record *e, bool with_output)
{
    bool timed = e->started_at && e->finished_at;
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o,s:b,s:o,s:o,s:o,s:o}", "sandbox_id", e->sandbox_id,
        "exec_id", e->exec_id, "generation", (json_int_t)e->generation, "worker_id",
        e->worker_id ? e->worker_id : "", "status", e->status, "exec_scope",
        sl_json_str_or_null(e->exec_scope), "argv", stored_argv(e->command_json), "exit_code",
        sl_json_int_or_null(e->exit_code, !e->has_exit_code), "truncated", e->truncated,
        "started_at", sl_json_ts(e->started_at, "Z"), "finished_at",
        sl_json_ts(e->finished_at, "Z"), "created_at", sl_json_ts(e->created_at, "Z"),
        "duration_ms",
        sl_json_int_or_null(timed ? (e->finished_at - e->started_at) / 1000 : 0, !timed));
    if (o)
        json_object_set_new(o, "termination_reason",
                            sl_json_str_or_null(e->termination_reason[0] ? e->termination_reason
                                                                         : NULL));
    if (o && with_output) {
        json_object_set_new(o, "stdout",
                            json_stringn(e->stdout_text ? e->stdout_text : "",
                                         e->stdout_text ? e->stdout_len : 0));
        json_object_set_new(o, "stderr",
                            json_stringn(e->stderr_text ? e->stderr_text : "",
                                         e->stderr_text ? e->stderr_len : 0));
    }
    return o;
}

json_t *sl_svc_admin_execs(struct sl_service *svc, const char *sandbox_id, const char *status,
                           int64_t limit, int64_t offset, struct sl_error *err)
{
    struct sl_exec_filter f = {.sandbox_id = sandbox_id, .status = status,
                               .limit = limit, .offset = offset};
    struct sl_exec_record *v = NULL;
    size_t n = 0;
    int64_t total = 0;
    if (svc->store->ops->exec_list(svc->store, &f, &v, &n, &total, err) < 0)
        return NULL;
    json_t *items = json_array();
    for (size_t i = 0; items && i < n; i++)
        json_array_append_new(items, admin_exec_item(&v[i], false));
    sl_exec_records_free(v, n);
    if (!items) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    return json_pack("{s:o,s:I,s:I,s:I}", "execs", items, "total", (json_int_t)total, "limit",
                     (json_int_t)limit, "offset", (json_int_t)offset);
}

json_t *svc_recent_execs(struct sl_service *svc, const char *sandbox_id, int64_t limit,
                         struct sl_error *err)
{
    json_t *page = sl_svc_admin_execs(svc, sandbox_id, NULL, limit, 0, err);
    if (!page)
        return NULL;
    json_t *out = json_pack("{s:O,s:O}", "recent", json_object_get(page, "execs"), "total",
                            json_object_get(page, "total"));
    json_decref(page);
    return out;
}

json_t *sl_svc_admin_exec(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                          struct sl_error *err)
{
    struct sl_exec_record rec = {0};
    int found = svc->store->ops->exec_get(svc->store, sandbox_id, exec_id, &rec, err);
    if (found < 0)
        return NULL;
    if (found == 0) {
        sl_error_set(err, SL_E_EXEC_NOT_FOUND, 0, "execution not found");
        return NULL;
    }
    json_t *o = admin_exec_item(&rec, true);
    sl_exec_record_clear(&rec);
    return o;
}
