/* service/outlog.c: what a command's readers get at any offset — the head,
 * the ring past it, a gap where neither holds the bytes — and waiters
 * woken once by an append or the end, never by anything after they were
 * taken back. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/outlog.h"

/* Everything a reader starting at off[] gets of `stream` until nothing is
 * left: the bytes, and the gaps' total. */
static size_t read_all(struct sl_outlog *log, int stream, uint64_t from, char *out, size_t max,
                       uint64_t *skipped)
{
    uint64_t off[2] = {UINT64_MAX, UINT64_MAX};
    off[stream] = from;
    size_t n = 0;
    *skipped = 0;
    struct sl_outlog_chunk c;
    char buf[7]; /* small: many reads, across the ring's wrap */
    while (sl_outlog_read(log, off, stream, buf, sizeof(buf), &c) == 1) {
        assert_int_equal(c.stream, stream);
        assert_int_equal(c.offset, off[stream] + c.skipped);
        *skipped += c.skipped;
        assert_true(n + c.len <= max);
        memcpy(out + n, buf, c.len);
        n += c.len;
        off[stream] = c.offset + c.len;
    }
    return n;
}

static void the_head_then_the_ring_then_a_gap(void **state)
{
    (void)state;
    struct sl_outlog *log = sl_outlog_new(10, 8);
    char text[64];
    for (int i = 0; i < 40; i++)
        text[i] = (char)('a' + i % 26);
    /* Appends of odd sizes: the ring wraps several times. */
    for (int at = 0; at < 40;) {
        int n = at % 3 + 1;
        if (at + n > 40)
            n = 40 - at;
        sl_outlog_append(log, SL_OUT_STDOUT, text + at, (size_t)n);
        at += n;
    }
    char got[64];
    uint64_t skipped;
    /* From 0: the head (10), a gap to the last 8, those 8. */
    size_t n = read_all(log, SL_OUT_STDOUT, 0, got, sizeof(got), &skipped);
    assert_int_equal(n, 18);
    assert_int_equal(skipped, 40 - 18);
    assert_memory_equal(got, text, 10);
    assert_memory_equal(got + 10, text + 32, 8);
    /* From inside the ring: exact, no gap. */
    n = read_all(log, SL_OUT_STDOUT, 35, got, sizeof(got), &skipped);
    assert_int_equal(n, 5);
    assert_int_equal(skipped, 0);
    assert_memory_equal(got, text + 35, 5);
    /* Past the end: nothing, and the reader waits. */
    uint64_t off[2] = {40, 0};
    struct sl_outlog_chunk c;
    assert_int_equal(sl_outlog_read(log, off, 0, got, sizeof(got), &c), 0);
    uint64_t totals[2];
    sl_outlog_totals(log, totals);
    assert_int_equal(totals[0], 40);
    assert_int_equal(totals[1], 0);
    assert_true(sl_outlog_overflowed(log));
    size_t head_len;
    const char *head = sl_outlog_head(log, SL_OUT_STDOUT, &head_len);
    assert_int_equal(head_len, 10);
    assert_memory_equal(head, text, 10);
    sl_outlog_put(log);
}

static void without_a_ring_only_the_head_is_kept(void **state)
{
    (void)state;
    struct sl_outlog *log = sl_outlog_new(4, 0);
    sl_outlog_append(log, SL_OUT_STDERR, "0123456789", 10);
    char got[16];
    uint64_t skipped;
    assert_int_equal(read_all(log, SL_OUT_STDERR, 2, got, sizeof(got), &skipped), 2);
    assert_int_equal(skipped, 6);
    assert_memory_equal(got, "23", 2);
    sl_outlog_put(log);
}

struct counter {
    struct sl_outlog_waiter w;
    int woken;
};

static void count_wake(struct sl_outlog_waiter *w)
{
    ((struct counter *)w)->woken++;
}

static void waiters_are_woken_once_by_bytes_or_the_end(void **state)
{
    (void)state;
    struct sl_outlog *log = sl_outlog_new(100, 100);
    struct counter a = {.w.wake = count_wake}, b = {.w.wake = count_wake};
    uint64_t off[2] = {0, 0};
    assert_true(sl_outlog_wait(log, off, &a.w));
    assert_true(sl_outlog_wait(log, off, &b.w));
    /* b is taken back before anything comes: its wake is the caller's. */
    assert_true(sl_outlog_unwait(log, &b.w));
    sl_outlog_append(log, SL_OUT_STDERR, "x", 1);
    assert_int_equal(a.woken, 1);
    assert_int_equal(b.woken, 0);
    assert_false(sl_outlog_unwait(log, &a.w)); /* already woken */
    sl_outlog_append(log, SL_OUT_STDERR, "y", 1);
    assert_int_equal(a.woken, 1); /* once per registration */
    /* Something to read: no wait. */
    assert_false(sl_outlog_wait(log, off, &a.w));
    off[1] = 2;
    assert_true(sl_outlog_wait(log, off, &a.w));
    assert_null(sl_outlog_end(log));
    sl_outlog_finish(log, json_pack("{s:s}", "status", "SUCCEEDED"));
    assert_int_equal(a.woken, 2);
    assert_string_equal(json_string_value(json_object_get(sl_outlog_end(log), "status")),
                        "SUCCEEDED");
    /* Ended: never waits, and a read past everything says so. */
    assert_false(sl_outlog_wait(log, off, &a.w));
    char buf[4];
    struct sl_outlog_chunk c;
    assert_int_equal(sl_outlog_read(log, off, 0, buf, sizeof(buf), &c), -1);
    sl_outlog_put(log);
}

static void a_stored_record_reads_back_whole_and_ended(void **state)
{
    (void)state;
    struct sl_outlog *log = sl_outlog_stored("out", 3, "error", 5, json_object());
    assert_non_null(log);
    assert_non_null(sl_outlog_end(log));
    char got[16];
    uint64_t skipped;
    assert_int_equal(read_all(log, SL_OUT_STDOUT, 0, got, sizeof(got), &skipped), 3);
    assert_memory_equal(got, "out", 3);
    assert_int_equal(read_all(log, SL_OUT_STDERR, 1, got, sizeof(got), &skipped), 4);
    assert_memory_equal(got, "rror", 4);
    assert_false(sl_outlog_overflowed(log));
    sl_outlog_put(log);
}

static int resumed;
static void count_resume(void *ctx)
{
    (void)ctx;
    resumed++;
}

static void a_lagging_holder_pauses_the_command_until_it_reads_on(void **state)
{
    (void)state;
    size_t ring = 256 * 1024;
    struct sl_outlog *log = sl_outlog_new(100, ring);
    sl_outlog_on_resume(log, count_resume, NULL);
    struct sl_outlog_reader r = {0};
    sl_outlog_hold(log, &r);
    static char block[32 * 1024];
    memset(block, 'x', sizeof(block));
    /* The head (100 bytes), then the ring fills towards its last 64 KiB. */
    assert_true(sl_outlog_append(log, SL_OUT_STDOUT, block, 100));
    size_t sent = 0;
    bool go_on = true;
    while (go_on && sent < 2 * ring) {
        go_on = sl_outlog_append(log, SL_OUT_STDOUT, block, sizeof(block));
        sent += sizeof(block);
    }
    assert_false(go_on);
    assert_true(sent <= ring - SL_OUTLOG_PAUSE_ROOM + sizeof(block));
    int64_t since = 0;
    assert_true(sl_outlog_paused(log, &since));
    assert_true(since > 0);
    assert_false(sl_outlog_may_read(log, SL_OUT_STDOUT));
    /* Reading on frees it: once half the ring is free, one resume. */
    uint64_t off[2] = {100 + sent / 4, 0};
    sl_outlog_advance(log, &r, off);
    assert_int_equal(resumed, 0);
    off[0] = 100 + sent;
    sl_outlog_advance(log, &r, off);
    assert_int_equal(resumed, 1);
    assert_true(sl_outlog_may_read(log, SL_OUT_STDOUT));
    sl_outlog_unhold(log, &r);
    sl_outlog_put(log);
}

static void a_holder_already_behind_the_ring_holds_nothing(void **state)
{
    (void)state;
    size_t ring = 256 * 1024;
    struct sl_outlog *log = sl_outlog_new(100, ring);
    static char block[32 * 1024];
    memset(block, 'y', sizeof(block));
    for (size_t sent = 0; sent < 2 * ring; sent += sizeof(block))
        assert_true(sl_outlog_append(log, SL_OUT_STDOUT, block, sizeof(block)));
    /* A reader that attaches now at 0 (in the head) will get a gap after
     * the head anyway: it must not pause the command. */
    struct sl_outlog_reader r = {0};
    sl_outlog_hold(log, &r);
    for (int i = 0; i < 16; i++)
        assert_true(sl_outlog_append(log, SL_OUT_STDOUT, block, sizeof(block)));
    sl_outlog_unhold(log, &r);
    sl_outlog_put(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_head_then_the_ring_then_a_gap),
        cmocka_unit_test(without_a_ring_only_the_head_is_kept),
        cmocka_unit_test(waiters_are_woken_once_by_bytes_or_the_end),
        cmocka_unit_test(a_stored_record_reads_back_whole_and_ended),
        cmocka_unit_test(a_lagging_holder_pauses_the_command_until_it_reads_on),
        cmocka_unit_test(a_holder_already_behind_the_ring_holds_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
