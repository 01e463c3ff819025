/* File API path normalisation (API.md §5.1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "workspace/files.h"

#define REFUSED "file path may not contain .. or NUL"

struct path_case {
    const char *in;
    const char *canonical; /* NULL: refused */
    size_t n;              /* expected number of components */
};

static const struct path_case CASES[] = {
    /* §5.1 examples */
    {"/etc/passwd", "/workspace/etc/passwd", 2},
    {"notes/a.txt", "/workspace/notes/a.txt", 2},
    {"/workspacefoo", "/workspace/workspacefoo", 1},
    {"/workspace", "/workspace", 0},
    {"", "/workspace", 0},
    /* trailing slashes, empty and "." components */
    {"/workspace/", "/workspace", 0},
    {"/workspace///", "/workspace", 0},
    {"/", "/workspace", 0},
    {"//", "/workspace", 0},
    {".", "/workspace", 0},
    {"./", "/workspace", 0},
    {"/workspace/.", "/workspace", 0},
    {"a/./b//c/", "/workspace/a/b/c", 3},
    {"./a", "/workspace/a", 1},
    {"/workspace/a", "/workspace/a", 1},
    {"/workspace//a/", "/workspace/a", 1},
    {"/workspace/workspace/a", "/workspace/workspace/a", 2},
    /* only one leading "/workspace/" is removed, and only with a leading '/' */
    {"workspace/a", "/workspace/workspace/a", 2},
    {"///workspace/a", "/workspace/workspace/a", 2},
    {"/Workspace/a", "/workspace/Workspace/a", 2},
    /* names that merely contain dots are ordinary */
    {"..x", "/workspace/..x", 1},
    {"a/...", "/workspace/a/...", 2},
    {"x..", "/workspace/x..", 1},
    {".hidden/.a", "/workspace/.hidden/.a", 2},
    {"sp ace/tab\t", "/workspace/sp ace/tab\t", 2},
    /* ".." anywhere is refused, whatever follows */
    {"..", NULL, 0},
    {"../etc/passwd", NULL, 0},
    {"a/../b", NULL, 0},
    {"a/..", NULL, 0},
    {"a/../", NULL, 0},
    {"/workspace/..", NULL, 0},
    {"/workspace/../workspace/a", NULL, 0},
    {"/..", NULL, 0},
    {"a//..//b", NULL, 0},
};

static void test_normalisation_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        const struct path_case *c = &CASES[i];
        struct sl_wpath p;
        struct sl_error err;
        sl_error_clear(&err);
        int rc = sl_wpath_parse(c->in, strlen(c->in), &p, &err);
        if (!c->canonical) {
            if (rc != -1)
                fail_msg("'%s' should be refused", c->in);
            assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
            assert_string_equal(err.message, REFUSED);
            assert_null(p.canonical);
            assert_int_equal(p.n, 0);
            continue;
        }
        if (rc != 0)
            fail_msg("'%s' refused: %s", c->in, err.message);
        if (strcmp(p.canonical, c->canonical) != 0 || p.n != c->n)
            fail_msg("'%s' -> '%s' (%zu comps), want '%s' (%zu)", c->in, p.canonical, p.n,
                     c->canonical, c->n);
        sl_wpath_free(&p);
        assert_null(p.canonical);
    }
}

static void test_components(void **state)
{
    (void)state;
    struct sl_wpath p;
    struct sl_error err;
    assert_int_equal(sl_wpath_parse("/workspace/a/./b//c/", 20, &p, &err), 0);
    assert_int_equal(p.n, 3);
    assert_string_equal(p.comps[0], "a");
    assert_string_equal(p.comps[1], "b");
    assert_string_equal(p.comps[2], "c");
    sl_wpath_free(&p);

    assert_int_equal(sl_wpath_parse("/workspace", 10, &p, &err), 0);
    assert_int_equal(p.n, 0);
    assert_string_equal(p.canonical, "/workspace");
    sl_wpath_free(&p);
    sl_wpath_free(&p); /* idempotent */
}

static void test_nul_refused(void **state)
{
    (void)state;
    struct sl_wpath p;
    struct sl_error err;
    static const char with_nul[] = "a\0b";
    assert_int_equal(sl_wpath_parse(with_nul, 3, &p, &err), -1);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, REFUSED);

    static const char trailing_nul[] = "notes/a.txt\0";
    assert_int_equal(sl_wpath_parse(trailing_nul, sizeof(trailing_nul) - 1, &p, &err), -1);
    assert_string_equal(err.message, REFUSED);

    /* A NUL hidden behind a ".." is refused for either reason. */
    static const char both[] = "..\0x";
    assert_int_equal(sl_wpath_parse(both, 4, &p, &err), -1);
    assert_string_equal(err.message, REFUSED);
}

static void test_length_is_authoritative(void **state)
{
    (void)state;
    struct sl_wpath p;
    struct sl_error err;
    /* Only the first len bytes count; the rest of the buffer is ignored. */
    assert_int_equal(sl_wpath_parse("abc/../def", 3, &p, &err), 0);
    assert_string_equal(p.canonical, "/workspace/abc");
    sl_wpath_free(&p);
    assert_int_equal(sl_wpath_parse("/workspace/x", 10, &p, &err), 0);
    assert_int_equal(p.n, 0);
    sl_wpath_free(&p);
}

static void test_long_path(void **state)
{
    (void)state;
    char buf[4097];
    for (size_t i = 0; i < 4096; i += 2) {
        buf[i] = 'a';
        buf[i + 1] = '/';
    }
    buf[4096] = '\0';
    struct sl_wpath p;
    struct sl_error err;
    assert_int_equal(sl_wpath_parse(buf, 4096, &p, &err), 0);
    assert_int_equal(p.n, 2048);
    assert_int_equal(strlen(p.canonical), strlen("/workspace") + 2 * 2048);
    sl_wpath_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalisation_table), cmocka_unit_test(test_components),
        cmocka_unit_test(test_nul_refused),         cmocka_unit_test(test_length_is_authoritative),
        cmocka_unit_test(test_long_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
