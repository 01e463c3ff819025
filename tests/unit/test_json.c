/* JSON helpers: UTF-8 repair as Python's decode("utf-8", "replace"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

static void check_repair(const char *in, size_t len, const char *expect)
{
    size_t out_len = 0;
    char *out = sl_utf8_repair(in, len, &out_len);
    assert_non_null(out);
    assert_int_equal(out_len, strlen(expect));
    assert_memory_equal(out, expect, out_len);
    free(out);
}

#define R "\xEF\xBF\xBD"

static void utf8_valid_passes(void **state)
{
    (void)state;
    check_repair("hello", 5, "hello");
    check_repair("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15, "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
}

static void utf8_invalid_replaced(void **state)
{
    (void)state;
    check_repair("a\xff" "b", 3, "a" R "b");
    check_repair("\x80\x80", 2, R R);
    /* A truncated 3-byte sequence is one replacement, like Python. */
    check_repair("a\xe2\x82" "b", 4, "a" R "b");
    /* Overlong encoding and surrogates are invalid. */
    check_repair("\xc0\xaf", 2, R R);
    check_repair("\xed\xa0\x80", 3, R R R);
    /* Above U+10FFFF. */
    check_repair("\xf4\x90\x80\x80", 4, R R R R);
    check_repair("end\xe2", 4, "end" R);
}

static void utf8_result_is_valid_json(void **state)
{
    (void)state;
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    size_t n = 0;
    char *out = sl_utf8_repair((const char *)all, sizeof(all), &n);
    json_t *s = json_stringn(out, n);
    assert_non_null(s); /* jansson refuses invalid UTF-8 */
    json_decref(s);
    free(out);
}

static void timestamps(void **state)
{
    (void)state;
    json_t *t = sl_json_ts(1767225600123456LL, "Z");
    assert_string_equal(json_string_value(t), "2026-01-01T00:00:00.123456Z");
    json_decref(t);
    t = sl_json_ts(1767225600000000LL, "");
    assert_string_equal(json_string_value(t), "2026-01-01T00:00:00");
    json_decref(t);
    t = sl_json_ts(0, "Z");
    assert_true(json_is_null(t));
    json_decref(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(utf8_valid_passes),
        cmocka_unit_test(utf8_invalid_replaced),
        cmocka_unit_test(utf8_result_is_valid_json),
        cmocka_unit_test(timestamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
