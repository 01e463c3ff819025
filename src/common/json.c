#include "common/json.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

json_t *sl_json_str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

json_t *sl_json_ts(int64_t us, const char *suffix)
{
    if (us == 0)
        return json_null();
    char buf[48];
    return json_string(sl_time_iso(us, suffix, buf, sizeof(buf)));
}

json_t *sl_json_int_or_null(int64_t v, int is_null)
{
    return is_null ? json_null() : json_integer(v);
}

char *sl_json_dumps(const json_t *j) { return json_dumps(j, JSON_COMPACT); }

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. Follows
 * the Unicode table of well-formed byte sequences (no overlongs, no
 * surrogates, nothing above U+10FFFF). */
static size_t utf8_valid_len(const unsigned char *p, size_t avail)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c == 0xE0) {
        need = 3;
        lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
        need = 3;
    else if (c == 0xED) {
        need = 3;
        hi = 0x9F;
    } else if (c == 0xF0) {
        need = 4;
        lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3)
        need = 4;
    else if (c == 0xF4) {
        need = 4;
        hi = 0x8F;
    } else
        return 0;
    if (avail < 2 || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (i >= avail || p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return need;
}

char *sl_utf8_repair(const char *data, size_t len, size_t *out_len)
{
    /* Worst case: every byte becomes the 3-byte U+FFFD. */
    char *out = malloc(len * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t n = utf8_valid_len(p + i, len - i);
        if (n) {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
            continue;
        }
        /* Python replaces the maximal invalid prefix of a sequence with one
         * U+FFFD: skip the lead byte and any continuation bytes that were a
         * valid prefix. */
        size_t skip = 1;
        unsigned char c = p[i];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
        while (skip < need && i + skip < len) {
            unsigned char probe[4] = {0};
            memcpy(probe, p + i, skip + 1);
            /* still a valid prefix? test by padding with a continuation byte */
            size_t k;
            for (k = skip + 1; k < need; k++)
                probe[k] = 0x80;
            if (utf8_valid_len(probe, need) == 0)
                break;
            skip++;
        }
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += skip;
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}

const char *sl_json_get_str(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

bool sl_json_too_many_containers(const char *data, size_t len, size_t max)
{
    size_t count = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if ((c == '{' || c == '[') && ++count > max) {
            return true;
        }
    }
    return false;
}
