/* common/log.c: every line is one line, and in JSON one valid object, what
 * ever the values hold (a sandbox chooses its argv[0]: control characters,
 * quotes, 64 KiB). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* Runs fn with stderr going to a file; returns what it wrote. */
static char *captured(void (*fn)(void))
{
    char path[] = "/tmp/sandloom-log-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fdopen(fd, "r");
    rewind(f);
    char *text = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&text, &cap, '\0', f);
    fclose(f);
    unlink(path);
    if (n < 0) {
        free(text);
        return strdup("");
    }
    return text;
}

static char hostile[70000];

static void log_hostile(void)
{
    struct sl_log_field f[] = {
        SL_LF_STR("program", hostile), SL_LF_STR("quote", "a\"b\\c\nd"), SL_LF_NUM("n", 42),
        SL_LF_STR("again", hostile),   SL_LF_STR("absent", NULL),        SL_LF_STR("utf8", "é€"),
    };
    sl_log_event(SL_LOG_INFO, "exec_start", f, sizeof(f) / sizeof(f[0]));
    sl_log(SL_LOG_WARN, "a message with %s and a newline\nin it", "\"quotes\"");
    sl_debug("not shown at info");
}

static void json_lines_stay_json(void **state)
{
    (void)state;
    for (size_t i = 0; i + 1 < sizeof(hostile); i++)
        hostile[i] = (char)(1 + i % 126); /* every control character and quote */
    sl_log_set_format(SL_LOG_JSON);
    sl_log_set_level(SL_LOG_INFO);
    char *text = captured(log_hostile);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        json_error_t e;
        json_t *doc = json_loads(line, 0, &e);
        assert_non_null(doc);
        assert_non_null(json_object_get(doc, "ts"));
        if (lines == 0) {
            assert_string_equal(json_string_value(json_object_get(doc, "event")), "exec_start");
            assert_string_equal(json_string_value(json_object_get(doc, "quote")), "a\"b\\c\nd");
            assert_true(strlen(json_string_value(json_object_get(doc, "program"))) <= 515);
            assert_int_equal(json_integer_value(json_object_get(doc, "n")), 42);
            assert_null(json_object_get(doc, "absent"));
        } else {
            assert_string_equal(json_string_value(json_object_get(doc, "level")), "warn");
        }
        json_decref(doc);
    }
    assert_int_equal(lines, 2); /* debug filtered; no value split a line */
    free(text);
}

static void text_values_cannot_fake_fields(void **state)
{
    (void)state;
    sl_log_set_format(SL_LOG_TEXT);
    char *text = captured(log_hostile);
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_non_null(strstr(text, " info exec_start program=\""));
    assert_non_null(strstr(text, " quote=\"a\\\"b\\\\c\\x0ad\" n=42 "));
    assert_null(strstr(text, "absent="));
    /* The message's newline did not start a line of its own. */
    assert_non_null(strstr(nl + 1, "and a newline in it"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_lines_stay_json),
        cmocka_unit_test(text_values_cannot_fake_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
