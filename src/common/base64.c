#include "common/base64.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#define B64_INVALID_MSG "content_base64 is not valid base64"
#define B64_TOO_LARGE_MSG "file exceeds the sandbox File API size limit"

static const char B64_STD[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char B64_URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Value of one character of the standard alphabet, -1 for anything else
 * (including '=' and whitespace, which the caller handles). */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int sl_base64_decode_strict(const char *in, size_t len, struct sl_buf *out, size_t max_out,
                            struct sl_error *err)
{
    sl_buf_init(out, max_out);
    if (len % 4 != 0)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, B64_INVALID_MSG);

    /* Exact decoded size from the length and the padding alone, so an
     * oversized body is refused before any allocation. At most two '=' can
     * be padding; anything else is caught by the decoding loop below. */
    size_t pad = 0;
    if (len >= 4 && in[len - 1] == '=')
        pad = in[len - 2] == '=' ? 2 : 1;
    size_t size = len / 4 * 3 - pad;
    if (size > max_out)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, B64_TOO_LARGE_MSG);

    unsigned char *dst = malloc(size + 1);
    if (!dst)
        return sl_error_errno(err, SL_E_INTERNAL, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int v[4];
        for (size_t k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)in[i + k];
            /* '=' only as the final one or two characters of the input. */
            if (c == '=' && last && k >= 4 - pad) {
                v[k] = 0;
                continue;
            }
            v[k] = b64_value(c);
            if (v[k] < 0)
                goto invalid;
        }
        uint32_t n =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        /* Bits after the last full byte are ignored, as Python's
         * b64decode(validate=True) does: "QR==" decodes like "QQ==". */
        dst[o++] = (unsigned char)(n >> 16);
        if (!last || pad < 2)
            dst[o++] = (unsigned char)(n >> 8);
        if (!last || pad < 1)
            dst[o++] = (unsigned char)n;
    }
    dst[o] = '\0';
    out->data = (char *)dst;
    out->len = o;
    out->cap = size + 1;
    return 0;

invalid:
    free(dst);
    return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, B64_INVALID_MSG);
}

static char *b64_encode_with(const char *alphabet, bool pad, const void *data, size_t len)
{
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3) {
        errno = ENOMEM;
        return NULL;
    }
    const unsigned char *src = data;
    char *text = malloc((len + 2) / 3 * 4 + 1);
    if (!text)
        return NULL;
    char *p = text;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t n = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        *p++ = alphabet[n >> 18 & 63];
        *p++ = alphabet[n >> 12 & 63];
        *p++ = alphabet[n >> 6 & 63];
        *p++ = alphabet[n & 63];
    }
    size_t rest = len - i;
    if (rest) {
        uint32_t n = (uint32_t)src[i] << 16 | (rest == 2 ? (uint32_t)src[i + 1] << 8 : 0);
        *p++ = alphabet[n >> 18 & 63];
        *p++ = alphabet[n >> 12 & 63];
        if (rest == 2)
            *p++ = alphabet[n >> 6 & 63];
        else if (pad)
            *p++ = '=';
        if (pad)
            *p++ = '=';
    }
    *p = '\0';
    return text;
}

char *sl_base64_encode(const void *data, size_t len)
{
    return b64_encode_with(B64_STD, true, data, len);
}

char *sl_base64url_nopad(const void *data, size_t len)
{
    return b64_encode_with(B64_URL, false, data, len);
}
