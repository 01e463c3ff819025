/* The open streams of one kind (a command's output, a file watch): a list
 * bounded per sandbox and per worker, each bound with the variable that
 * sets it, which a refusal names. The caller's lock guards it. */
#ifndef SL_API_STREAM_SLOTS_H
#define SL_API_STREAM_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct sl_slot {
    struct sl_slot *prev, *next;
    char sandbox_id[129];
};

struct sl_slots {
    struct sl_slot *all;
    int count;
    int64_t per_sandbox, per_worker;
    const char *code;                     /* the refusal's (429) */
    const char *what;                     /* "output streams" */
    const char *sandbox_var, *worker_var; /* the variables of the bounds */
};

/* The struct a slot is the `member` of. */
#define SL_SLOT_OWNER(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

/* Under the caller's lock: slot joins for sandbox_id, or -1 with err (the
 * bound reached named). */
int sl_slots_join(struct sl_slots *s, struct sl_slot *slot, const char *sandbox_id,
                  struct sl_error *err);
void sl_slots_leave(struct sl_slots *s, struct sl_slot *slot);

#endif
