#include "service/history.h"

#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/util.h"

int64_t sl_history_lifetime_ms(int64_t released_at, int64_t ready_at, int64_t started_at,
                               int64_t created_at)
{
    int64_t from = ready_at ? ready_at : started_at ? started_at : created_at;
    if (!from || !released_at || released_at < from)
        return 0;
    return (released_at - from) / 1000;
}

static size_t compact_size(json_t *arr)
{
    char *s = json_dumps(arr, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    return n;
}

json_t *sl_history_bounded(const char *history_json, int64_t now_us)
{
    json_t *parsed = history_json ? json_loads(history_json, 0, NULL) : NULL;
    json_t *out = json_array();
    if (!json_is_array(parsed)) {
        json_decref(parsed);
        return out;
    }
    int64_t cutoff = now_us - (int64_t)SL_HISTORY_RETENTION_DAYS * 86400 * 1000000;
    size_t i;
    json_t *entry;
    json_array_foreach(parsed, i, entry) {
        if (!json_is_object(entry))
            continue;
        const char *released = sl_json_get_str(entry, "released_at");
        int64_t at;
        /* An entry whose release time cannot be read is kept: dropping
         * audit data on a parse quirk would lose history silently. */
        if (released && sl_time_parse(released, &at) == 0 && at < cutoff)
            continue;
        json_array_append(out, entry);
    }
    json_decref(parsed);
    while (json_array_size(out) > SL_HISTORY_MAX_ENTRIES)
        json_array_remove(out, 0);
    while (json_array_size(out) > 0 && compact_size(out) > SL_HISTORY_MAX_BYTES)
        json_array_remove(out, 0);
    return out;
}

char *sl_history_append(const char *history_json, const struct sl_history_entry *e,
                        int64_t now_us)
{
    json_t *arr = json_array();
    json_t *old = sl_history_bounded(history_json, now_us);
    json_array_extend(arr, old);
    json_decref(old);
    json_t *entry = json_object();
    json_object_set_new(entry, "generation", json_integer(e->generation));
    json_object_set_new(entry, "started_at", sl_json_ts(e->started_at, "Z"));
    json_object_set_new(entry, "created_by", sl_json_str_or_null(e->created_by));
    json_object_set_new(entry, "ready_at", sl_json_ts(e->ready_at, "Z"));
    json_object_set_new(entry, "released_at", sl_json_ts(e->released_at, "Z"));
    json_object_set_new(entry, "release_reason", sl_json_str_or_null(e->release_reason));
    json_object_set_new(entry, "released_by", sl_json_str_or_null(e->released_by));
    json_object_set_new(entry, "lifetime_ms", json_integer(e->lifetime_ms));
    json_array_append_new(arr, entry);
    json_t *bounded = NULL;
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    bounded = sl_history_bounded(text, now_us);
    free(text);
    text = json_dumps(bounded, JSON_COMPACT);
    json_decref(bounded);
    return text;
}
