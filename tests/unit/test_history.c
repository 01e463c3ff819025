/* Lifecycle history bounds (API.md §3.7). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "service/history.h"

#define DAY_US (86400LL * 1000000)
static const int64_t NOW = 1767225600000000LL;

static struct sl_history_entry entry(int64_t gen, int64_t released_at)
{
    struct sl_history_entry e = {.generation = gen,
                                 .started_at = released_at - 1000000,
                                 .created_by = "workspace:s",
                                 .ready_at = 0,
                                 .released_at = released_at,
                                 .release_reason = "CLIENT_RELEASE",
                                 .released_by = "workspace:s",
                                 .lifetime_ms = 1000};
    return e;
}

static void lifetime(void **state)
{
    (void)state;
    assert_int_equal(sl_history_lifetime_ms(NOW, NOW - 5000000, NOW - 9000000, 0), 5000);
    assert_int_equal(sl_history_lifetime_ms(NOW, 0, NOW - 9000000, 0), 9000);
    assert_int_equal(sl_history_lifetime_ms(NOW, 0, 0, NOW - 2000), 2);
    assert_int_equal(sl_history_lifetime_ms(NOW, 0, 0, 0), 0);
    assert_int_equal(sl_history_lifetime_ms(NOW, NOW + 1000000, 0, 0), 0); /* never negative */
}

static void append_and_fields(void **state)
{
    (void)state;
    struct sl_history_entry e = entry(1, NOW);
    char *text = sl_history_append(NULL, &e, NOW);
    json_t *arr = json_loads(text, 0, NULL);
    assert_int_equal(json_array_size(arr), 1);
    json_t *x = json_array_get(arr, 0);
    assert_int_equal(json_integer_value(json_object_get(x, "generation")), 1);
    assert_string_equal(json_string_value(json_object_get(x, "released_at")), "2026-01-01T00:00:00Z");
    assert_true(json_is_null(json_object_get(x, "ready_at")));
    assert_string_equal(json_string_value(json_object_get(x, "release_reason")), "CLIENT_RELEASE");
    json_decref(arr);
    free(text);
}

static void bounds(void **state)
{
    (void)state;
    char *text = NULL;
    /* One entry older than 15 days is dropped. */
    struct sl_history_entry old = entry(1, NOW - 16 * DAY_US);
    text = sl_history_append(NULL, &old, NOW - 16 * DAY_US);
    for (int i = 2; i <= 300; i++) {
        struct sl_history_entry e = entry(i, NOW - 1000000 * (300 - i));
        char *next = sl_history_append(text, &e, NOW);
        free(text);
        text = next;
    }
    json_t *arr = json_loads(text, 0, NULL);
    assert_int_equal(json_array_size(arr), 256);
    /* The newest are kept. */
    assert_int_equal(json_integer_value(json_object_get(json_array_get(arr, 255), "generation")),
                     300);
    assert_true(strlen(text) <= 65536);
    json_decref(arr);
    free(text);
    /* Garbage stored text reads as an empty history. */
    json_t *empty = sl_history_bounded("not json", NOW);
    assert_int_equal(json_array_size(empty), 0);
    json_decref(empty);
}

static void byte_bound(void **state)
{
    (void)state;
    char big[2048];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    char *text = NULL;
    for (int i = 1; i <= 100; i++) {
        struct sl_history_entry e = entry(i, NOW);
        e.released_by = big;
        char *next = sl_history_append(text, &e, NOW);
        free(text);
        text = next;
    }
    assert_true(strlen(text) <= 65536);
    json_t *arr = json_loads(text, 0, NULL);
    assert_true(json_array_size(arr) < 100 && json_array_size(arr) > 10);
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(arr, json_array_size(arr) - 1), "generation")),
                     100);
    json_decref(arr);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lifetime),
        cmocka_unit_test(append_and_fields),
        cmocka_unit_test(bounds),
        cmocka_unit_test(byte_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
