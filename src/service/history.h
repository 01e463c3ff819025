/* Lifecycle history of a route (spec API.md §3.7): the bounded list kept in
 * agent_sandbox_route.lifecycle_history_json. Pure functions. */
#ifndef SL_SERVICE_HISTORY_H
#define SL_SERVICE_HISTORY_H

#include <jansson.h>
#include <stdint.h>

#define SL_HISTORY_RETENTION_DAYS 15
#define SL_HISTORY_MAX_ENTRIES 256
#define SL_HISTORY_MAX_BYTES 65536

struct sl_history_entry {
    int64_t generation;
    int64_t started_at;     /* 0 = null */
    const char *created_by; /* NULL = null */
    int64_t ready_at;       /* 0 = null */
    int64_t released_at;
    const char *release_reason;
    const char *released_by;
    int64_t lifetime_ms;
};

/* released_at - (ready_at || started_at || created_at), >= 0; 0 if unknown. */
int64_t sl_history_lifetime_ms(int64_t released_at, int64_t ready_at, int64_t started_at,
                               int64_t created_at);

/* Parse the stored text (NULL, invalid or non-array => empty) and apply the
 * bounds as of now_us: entries older than 15 days dropped, the last 256
 * kept, then oldest dropped until the compact encoding is <= 64 KiB.
 * Returns a new array reference. */
json_t *sl_history_bounded(const char *history_json, int64_t now_us);

/* Append e and bound; returns the new compact JSON text (malloc'd). */
char *sl_history_append(const char *history_json, const struct sl_history_entry *e,
                        int64_t now_us);

#endif
