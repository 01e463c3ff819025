/* The Connect protocol as E2B's envd speaks it: JSON messages, unary calls
 * as plain JSON bodies, server streams as envelopes (one flag byte, a
 * 4-byte big-endian length, the JSON) closed by an end-stream envelope
 * (flag 0x02). Pure functions: framing and the mapping of this service's
 * refusals onto Connect's error codes. */
#ifndef SL_E2B_CONNECT_H
#define SL_E2B_CONNECT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/util.h"

#define SL_CONNECT_FLAG_END 0x02
#define SL_CONNECT_STREAM_TYPE "application/connect+json"
/* The largest request message taken (a SendInput carries 1 MiB of input,
 * base64). */
#define SL_CONNECT_MAX_MESSAGE ((size_t)2 * 1024 * 1024)

/* The one message of a server-streaming request's body: 0 and *msg (a
 * JSON object), or -1 with a reason in why. */
int sl_connect_unwrap(const char *body, size_t len, json_t **msg, const char **why);
/* An envelope of `json` (compact) appended to out; -1 out of memory. */
int sl_connect_frame(struct sl_buf *out, uint8_t flags, const json_t *json);
/* The end-stream envelope: {} or {"error": {"code", "message"}}. */
int sl_connect_end(struct sl_buf *out, const char *code, const char *message);

/* The Connect code ("not_found", "already_exists", ...) of a refusal, and
 * the HTTP status a unary error answers with. */
const char *sl_connect_code_of(const struct sl_error *err);
int sl_connect_http_status(const char *code);

#endif
