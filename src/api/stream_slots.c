/* Open streams, bounded (stream_slots.h). */
#include "api/stream_slots.h"

#include <stdio.h>
#include <string.h>

int sl_slots_join(struct sl_slots *s, struct sl_slot *slot, const char *sandbox_id,
                  struct sl_error *err)
{
    snprintf(slot->sandbox_id, sizeof(slot->sandbox_id), "%s", sandbox_id);
    int here = 0;
    for (const struct sl_slot *p = s->all; p; p = p->next)
        here += strcmp(p->sandbox_id, slot->sandbox_id) == 0;
    bool sandbox_full = here >= s->per_sandbox;
    if (sandbox_full || s->count >= s->per_worker)
        return sl_error_set(err, s->code, 0, "this %s already has %s (%lld) %s open",
                            sandbox_full ? "sandbox" : "worker",
                            sandbox_full ? s->sandbox_var : s->worker_var,
                            (long long)(sandbox_full ? s->per_sandbox : s->per_worker), s->what);
    slot->prev = NULL;
    slot->next = s->all;
    if (s->all)
        s->all->prev = slot;
    s->all = slot;
    s->count++;
    return 0;
}

void sl_slots_leave(struct sl_slots *s, struct sl_slot *slot)
{
    if (slot->prev)
        slot->prev->next = slot->next;
    else
        s->all = slot->next;
    if (slot->next)
        slot->next->prev = slot->prev;
    s->count--;
}
