/* Pure helpers of common/: time, randomness, constant-time compare,
 * bounded buffers, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "common/error.h"
#include "common/util.h"

static void time_iso_and_parse(void **state)
{
    (void)state;
    char buf[48];
    assert_string_equal(sl_time_iso(1767225600123456LL, "", buf, sizeof(buf)),
                        "2026-01-01T00:00:00.123456");
    assert_string_equal(sl_time_iso(1767225600000000LL, "+00:00", buf, sizeof(buf)),
                        "2026-01-01T00:00:00+00:00");
    int64_t us = 0;
    assert_int_equal(sl_time_parse("2026-01-01 00:00:00.123456", &us), 0);
    assert_int_equal(us, 1767225600123456LL);
    assert_int_equal(sl_time_parse("2026-01-01T00:00:00.5Z", &us), 0);
    assert_int_equal(us, 1767225600500000LL);
    assert_int_equal(sl_time_parse("2026-01-01T00:00:00+00:00", &us), 0);
    assert_int_equal(us, 1767225600000000LL);
    assert_int_equal(sl_time_parse("yesterday", &us), -1);
    assert_int_equal(sl_time_parse("2026-01-01T00:00:00+02:00", &us), -1);
}

static void random_values(void **state)
{
    (void)state;
    char a[33], b[33];
    assert_int_equal(sl_random_hex(a, 16), 0);
    assert_int_equal(sl_random_hex(b, 16), 0);
    assert_int_equal(strlen(a), 32);
    assert_string_not_equal(a, b);
    for (int i = 0; i < 1000; i++) {
        int64_t v;
        assert_int_equal(sl_random_range(20000, 20003, &v), 0);
        assert_true(v >= 20000 && v <= 20003);
    }
}

static void consttime(void **state)
{
    (void)state;
    assert_true(sl_consttime_equal("Bearer abc", 10, "Bearer abc", 10));
    assert_false(sl_consttime_equal("Bearer abd", 10, "Bearer abc", 10));
    assert_false(sl_consttime_equal("Bearer ab", 9, "Bearer abc", 10));
    assert_false(sl_consttime_equal("Bearer abcd", 11, "Bearer abc", 10));
    assert_false(sl_consttime_equal("", 0, "Bearer abc", 10));
}

static void bounded_buffer(void **state)
{
    (void)state;
    struct sl_buf b;
    sl_buf_init(&b, 10);
    assert_int_equal(sl_buf_append(&b, "hello", 5), 0);
    assert_int_equal(sl_buf_append(&b, "world", 5), 0);
    assert_int_equal(sl_buf_append(&b, "!", 1), -1);
    assert_int_equal(errno, ENOBUFS);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.data, "helloworld", 10);
    sl_buf_free(&b);
}

static void sha256(void **state)
{
    (void)state;
    char hex[65];
    sl_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void errors_travel(void **state)
{
    (void)state;
    struct sl_error err = {0};
    errno = ENOENT;
    assert_int_equal(sl_error_errno(&err, "SANDBOX_X", "cannot open %s", "thing"), -1);
    assert_string_equal(err.code, "SANDBOX_X");
    assert_int_equal(err.errnum, ENOENT);
    assert_string_equal(err.message, "cannot open thing");
    sl_error_wrap(&err, "connect %s", "sbx-1");
    assert_non_null(strstr(err.detail, "connect sbx-1: cannot open thing"));
    /* The client-facing message keeps no operator context. */
    assert_string_equal(err.message, "cannot open thing");
    assert_true(sl_error_is(&err, "SANDBOX_X"));
    /* Re-coding changes what the client is told, not what the operator
     * reads: the old code and detail stay in the detail. */
    sl_error_recode(&err, "SANDBOX_Y", "it failed");
    assert_string_equal(err.code, "SANDBOX_Y");
    assert_string_equal(err.message, "it failed");
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.detail, "SANDBOX_X: connect sbx-1: cannot open thing"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(time_iso_and_parse), cmocka_unit_test(random_values),
        cmocka_unit_test(consttime),          cmocka_unit_test(bounded_buffer),
        cmocka_unit_test(sha256),             cmocka_unit_test(errors_travel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
