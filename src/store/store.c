#include "store/store.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "config/config.h"

/* "ignored options of SANDBOX_DATABASE_URL: a, b" or NULL. */
static char *dropped_note(const struct sl_strlist *dropped)
{
    if (dropped->len == 0)
        return NULL;
    struct sl_buf b;
    sl_buf_init(&b, 4096);
    const char *head = "SANDBOX_DATABASE_URL: query options this driver does not know were "
                       "ignored: ";
    int rc = sl_buf_append(&b, head, strlen(head));
    for (size_t i = 0; rc == 0 && i < dropped->len; i++) {
        if (i)
            rc = sl_buf_append(&b, ", ", 2);
        if (rc == 0)
            rc = sl_buf_append(&b, dropped->items[i], strlen(dropped->items[i]));
    }
    if (rc == 0)
        rc = sl_buf_append(&b, "", 1);
    if (rc < 0) {
        sl_buf_free(&b);
        return NULL;
    }
    return b.data;
}

struct sl_store *sl_store_open(const struct sl_config *cfg, char **warning, struct sl_error *err)
{
    if (warning)
        *warning = NULL;
    switch (cfg->db_backend) {
    case SL_DB_SQLITE:
        return sl_store_sqlite_open(cfg->database_path,
                                    (int)(cfg->database_lock_timeout_seconds * 1000), err);
    case SL_DB_POSTGRESQL: {
        struct sl_strlist dropped = {0};
        struct sl_pg_options o = {
            .url = cfg->database_url,
            .database = cfg->database_path,
            .pool_size = (int)cfg->database_pool_size,
            .wait_ms = cfg->database_lock_timeout_seconds * 1000,
            /* A statement is one indexed row or one page: a minute is a
             * server that stopped answering, not a slow query. */
            .statement_timeout_ms = 60000,
            .connect_timeout_seconds = cfg->mysql_connect_timeout_seconds,
            .recycle_seconds = cfg->mysql_pool_recycle_seconds,
            .dropped = &dropped,
        };
        struct sl_store *s = sl_store_postgresql_open(&o, err);
        if (s && warning)
            *warning = dropped_note(&dropped);
        sl_strlist_free(&dropped);
        return s;
    }
    case SL_DB_MYSQL:
        sl_error_set(err, SL_E_CONFIG, 0,
                     "database backend mysql is not supported by this build yet");
        return NULL;
    }
    sl_error_set(err, SL_E_CONFIG, 0, "unknown database backend");
    return NULL;
}

void sl_route_clear(struct sl_route *r)
{
    if (!r)
        return;
    free(r->sandbox_id);
    free(r->workspace_scope_id);
    free(r->worker_id);
    free(r->worker_epoch);
    free(r->profile_id);
    free(r->profile_hash);
    free(r->active_exec_id);
    free(r->generation_created_by);
    free(r->last_release_reason);
    free(r->last_released_by);
    free(r->lifecycle_history_json);
    memset(r, 0, sizeof(*r));
}

/* strdup that keeps NULL; false only on allocation failure. */
static bool dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return true;
    *dst = strdup(src);
    return *dst != NULL;
}

int sl_route_copy(struct sl_route *dst, const struct sl_route *src)
{
    /* Scalars and the fixed-size status/storage_mode come with the struct
     * copy; every pointer is then replaced by its own copy. */
    *dst = *src;
    bool ok = dup_opt(&dst->sandbox_id, src->sandbox_id);
    ok = dup_opt(&dst->workspace_scope_id, src->workspace_scope_id) && ok;
    ok = dup_opt(&dst->worker_id, src->worker_id) && ok;
    ok = dup_opt(&dst->worker_epoch, src->worker_epoch) && ok;
    ok = dup_opt(&dst->profile_id, src->profile_id) && ok;
    ok = dup_opt(&dst->profile_hash, src->profile_hash) && ok;
    ok = dup_opt(&dst->active_exec_id, src->active_exec_id) && ok;
    ok = dup_opt(&dst->generation_created_by, src->generation_created_by) && ok;
    ok = dup_opt(&dst->last_release_reason, src->last_release_reason) && ok;
    ok = dup_opt(&dst->last_released_by, src->last_released_by) && ok;
    ok = dup_opt(&dst->lifecycle_history_json, src->lifecycle_history_json) && ok;
    if (!ok) {
        sl_route_clear(dst);
        return -1;
    }
    return 0;
}

/* NULL stays NULL; *ok turns false when a copy cannot be made. */
static char *dup_bytes(const char *s, size_t len, bool *ok)
{
    if (!s)
        return NULL;
    char *d = malloc(len + 1);
    if (!d) {
        *ok = false;
        return NULL;
    }
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

static char *dup_str(const char *s, bool *ok) { return dup_bytes(s, s ? strlen(s) : 0, ok); }

int sl_exec_record_copy(struct sl_exec_record *dst, const struct sl_exec_record *src)
{
    bool ok = true;
    *dst = *src;
    dst->sandbox_id = dup_str(src->sandbox_id, &ok);
    dst->exec_id = dup_str(src->exec_id, &ok);
    dst->worker_id = dup_str(src->worker_id, &ok);
    dst->command_json = dup_str(src->command_json, &ok);
    dst->exec_scope = dup_str(src->exec_scope, &ok);
    dst->stdout_text = dup_bytes(src->stdout_text, src->stdout_len, &ok);
    dst->stderr_text = dup_bytes(src->stderr_text, src->stderr_len, &ok);
    if (!ok) {
        sl_exec_record_clear(dst);
        return -1;
    }
    return 0;
}

void sl_exec_record_clear(struct sl_exec_record *e)
{
    if (!e)
        return;
    free(e->sandbox_id);
    free(e->exec_id);
    free(e->worker_id);
    free(e->command_json);
    free(e->exec_scope);
    free(e->stdout_text);
    free(e->stderr_text);
    memset(e, 0, sizeof(*e));
}

void sl_exec_records_free(struct sl_exec_record *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        sl_exec_record_clear(&v[i]);
    free(v);
}

void sl_routes_free(struct sl_route *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        sl_route_clear(&v[i]);
    free(v);
}
