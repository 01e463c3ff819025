/* Base64 codecs (RFC 4648).
 *
 * The decoder is strict on purpose: the File API accepts exactly one
 * spelling of each byte string (standard alphabet, '=' padding required, no
 * whitespace, zero trailing bits), so a client cannot smuggle variants past
 * size or equality checks. Encoders return malloc'd NUL-terminated strings
 * the caller frees; NULL means out of memory (errno ENOMEM). No state. */
#ifndef SL_COMMON_BASE64_H
#define SL_COMMON_BASE64_H

#include <stddef.h>

#include "common/error.h"
#include "common/util.h"

/* Decode in[0..len) into out, which this function initialises (any previous
 * content is not freed); on success out->data is malloc'd, NUL-terminated
 * after out->len bytes, and owned by the caller (sl_buf_free). The decoded
 * size is checked against max_out before anything is decoded. Errors, code
 * SL_E_INVALID_ARGUMENT:
 *   "content_base64 is not valid base64"
 *   "file exceeds the sandbox File API size limit"
 * (and SL_E_INTERNAL on allocation failure). out is left empty on error. */
int sl_base64_decode_strict(const char *in, size_t len, struct sl_buf *out, size_t max_out,
                            struct sl_error *err);

/* Standard alphabet with '=' padding. */
char *sl_base64_encode(const void *data, size_t len);

/* URL-safe alphabet ('-', '_'), no padding. */
char *sl_base64url_nopad(const void *data, size_t len);

#endif
