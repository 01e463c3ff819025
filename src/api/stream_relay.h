/* An event stream an owner sends, relayed by a replica to its client as it
 * comes (a forwarded GET …/stream, or exec with "stream": true).
 *
 * Two sides, two threads: the forward thread pushes what the owner sends
 * (blocking while the buffer is full, so a slow client slows the owner's
 * stream, which holds its command back as any slow reader does); the HTTP
 * server reads it as a body source. Whichever side goes last frees it. */
#ifndef SL_API_STREAM_RELAY_H
#define SL_API_STREAM_RELAY_H

#include <stdbool.h>
#include <stddef.h>

#include "api/router.h"

struct sl_relay;

/* Streams one replica relays at once, at most: each holds a forward thread
 * (SL_HTTP_FORWARD_THREADS), and the other forwards need theirs. */
#define SL_RELAY_MAX 32

/* NULL: out of memory, or errno EBUSY with SL_RELAY_MAX relays open. */
struct sl_relay *sl_relay_new(void);
/* Whether the client still reads (the forward's transfer goes on). */
bool sl_relay_open(struct sl_relay *r);
/* Server stop: every relay's client side is closed, so each forward ends
 * at its transfer's next check (within a second). */
void sl_relays_close_all(void);
/* The reading side, for sl_response.source (closed by the HTTP server). */
struct sl_body_source *sl_relay_source(struct sl_relay *r);
/* The forward thread's: false when the client is gone (stop the transfer). */
bool sl_relay_push(struct sl_relay *r, const char *data, size_t len);
/* The forward thread is done: the reader gets the end after what is left.
 * never_read: the source was never handed to the HTTP server (the owner
 * refused): it is freed here. */
void sl_relay_end(struct sl_relay *r, bool never_read);

#endif
