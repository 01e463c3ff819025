/* Error code -> HTTP status (spec API.md §0.5) and the one JSON error body
 * of COMPAT.md §2: {"detail": {"code": ..., "message": ...[, "errors": [...]]}}. */
#ifndef SL_API_ERRORS_H
#define SL_API_ERRORS_H

#include <jansson.h>

#include "common/error.h"

int sl_api_status_for_code(const char *code);
/* Compact JSON text (malloc'd). `errors` (may be NULL) is borrowed. */
/* The message an error answer carries: `message` when the refusal has
 * its own, else the code's sentence (what happened, what to do), else the
 * code. */
const char *sl_api_message_for(const char *code, const char *message);
char *sl_api_error_body(const char *code, const char *message, const json_t *errors);

#endif
