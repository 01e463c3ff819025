/* api/auth_guard: failed authentications counted per peer, slowed past the
 * free allowance within a minute, logged at most once per period. The
 * clock is the caller's, so nothing here sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "api/auth_guard.h"

static struct sockaddr_in v4(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static void free_failures_then_the_penalty(void **state)
{
    (void)state;
    struct sl_auth_guard *g = sl_auth_guard_new(3);
    assert_non_null(g);
    struct sockaddr_in a = v4("127.0.0.1"), b = v4("10.1.2.3");
    struct sl_auth_verdict v;
    int64_t t = 1000000;
    for (int i = 0; i < 3; i++) {
        sl_auth_guard_fail(g, (struct sockaddr *)&a, t + i, &v);
        assert_int_equal(v.delay_ms, 0);
    }
    sl_auth_guard_fail(g, (struct sockaddr *)&a, t + 10, &v);
    assert_int_equal(v.delay_ms, SL_AUTH_PENALTY_MS);
    assert_string_equal(v.peer, "127.0.0.1");
    /* Another peer has its own allowance. */
    sl_auth_guard_fail(g, (struct sockaddr *)&b, t + 11, &v);
    assert_int_equal(v.delay_ms, 0);
    assert_string_equal(v.peer, "10.1.2.3");
    /* A minute later the first peer starts afresh. */
    sl_auth_guard_fail(g, (struct sockaddr *)&a, t + SL_AUTH_WINDOW_US + 20, &v);
    assert_int_equal(v.delay_ms, 0);
    /* No address at all: one shared slot, slowed like any peer. */
    for (int i = 0; i < 3; i++)
        sl_auth_guard_fail(g, NULL, t + 30, &v);
    assert_int_equal(v.delay_ms, 0);
    assert_string_equal(v.peer, "unknown");
    sl_auth_guard_fail(g, NULL, t + 31, &v);
    assert_int_equal(v.delay_ms, SL_AUTH_PENALTY_MS);
    sl_auth_guard_free(g);
}

static void logging_is_bounded_and_counts_what_it_skipped(void **state)
{
    (void)state;
    struct sl_auth_guard *g = sl_auth_guard_new(1000);
    struct sockaddr_in a = v4("127.0.0.1");
    struct sl_auth_verdict v;
    int64_t t = 5000000;
    sl_auth_guard_fail(g, (struct sockaddr *)&a, t, &v);
    assert_true(v.log); /* the first failure is reported at once */
    assert_int_equal(v.failures, 1);
    int lines = 0;
    for (int i = 1; i <= 500; i++) {
        sl_auth_guard_fail(g, (struct sockaddr *)&a, t + i * 1000, &v); /* 0.5 s in all */
        lines += v.log;
    }
    assert_int_equal(lines, 0);
    sl_auth_guard_fail(g, (struct sockaddr *)&a, t + SL_AUTH_LOG_PERIOD_US, &v);
    assert_true(v.log);
    assert_int_equal(v.failures, 501); /* everything since the last line */
    sl_auth_guard_free(g);
}

static void many_peers_never_grow_the_table(void **state)
{
    (void)state;
    struct sl_auth_guard *g = sl_auth_guard_new(0);
    struct sl_auth_verdict v;
    /* 100,000 addresses: slots are reused (oldest first), nothing grows;
     * with no allowance every failure is slowed. */
    for (uint32_t i = 0; i < 100000; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x0a000000u + i)};
        sl_auth_guard_fail(g, (struct sockaddr *)&a, 1000000 + i, &v);
        assert_int_equal(v.delay_ms, SL_AUTH_PENALTY_MS);
    }
    struct sockaddr_in6 six = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::1", &six.sin6_addr);
    sl_auth_guard_fail(g, (struct sockaddr *)&six, 2000000, &v);
    assert_string_equal(v.peer, "::1");
    sl_auth_guard_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(free_failures_then_the_penalty),
        cmocka_unit_test(logging_is_bounded_and_counts_what_it_skipped),
        cmocka_unit_test(many_peers_never_grow_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
