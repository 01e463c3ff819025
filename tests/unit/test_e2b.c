/* The E2B protocol's pure parts (e2b/identity.c, e2b/connect.c): routing a
 * sandbox request, the two spellings of a key, the envd access token, and
 * Connect's framing and error codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b/connect.h"
#include "e2b/e2b.h"

#define SECRET "an-internal-token-of-at-least-32-characters"

static void rewrite_by_header_host_and_token(void **state)
{
    (void)state;
    char *p = sl_e2b_rewrite("iabc123", "49983", NULL, NULL, NULL, "/files?path=a");
    assert_string_equal(p, "/e2b/envd/iabc123/files?path=a");
    free(p);
    p = sl_e2b_rewrite("iabc123", "49999", NULL, NULL, NULL, "/execute");
    assert_string_equal(p, "/e2b/interpreter/iabc123/execute");
    free(p);
    /* No port: envd's. Another port: not envd's nor the interpreter's. */
    p = sl_e2b_rewrite("iabc123", NULL, NULL, NULL, NULL, "/health");
    assert_string_equal(p, "/e2b/envd/iabc123/health");
    free(p);
    assert_null(sl_e2b_rewrite("iabc123", "3000", NULL, NULL, NULL, "/"));
    assert_null(sl_e2b_rewrite(NULL, NULL, "my-api.sbx.example.com", "sbx.example.com", NULL, "/"));
    /* An id outside the API's alphabet routes nowhere (it cannot name a
     * path segment of another route). */
    assert_null(sl_e2b_rewrite("../x", "49983", NULL, NULL, NULL, "/health"));
    assert_null(sl_e2b_rewrite("a/b", "49983", NULL, NULL, NULL, "/health"));
    assert_null(sl_e2b_rewrite("", "49983", NULL, NULL, NULL, "/health"));
    /* The host form, only under the configured domain. */
    p = sl_e2b_rewrite(NULL, NULL, "49983-iabc123.sbx.example.com:8080", "sbx.example.com",
                       NULL, "/health");
    assert_string_equal(p, "/e2b/envd/iabc123/health");
    free(p);
    assert_null(sl_e2b_rewrite(NULL, NULL, "49983-iabc123.evil.com", "sbx.example.com", NULL,
                               "/health"));
    assert_null(sl_e2b_rewrite(NULL, NULL, "49983-iabc123.sbx.example.com.evil", "sbx.example.com",
                               NULL, "/health"));
    assert_null(sl_e2b_rewrite(NULL, NULL, "49983-IABC.sbx.example.com", "sbx.example.com", NULL,
                               "/health"));
    assert_null(sl_e2b_rewrite(NULL, NULL, "localhost:8080", "", NULL, "/health"));
    /* Older SDKs' REST calls: the sandbox the token names. */
    p = sl_e2b_rewrite(NULL, NULL, "127.0.0.1:8080", NULL, "acme.iabc123.0123abcd", "/files");
    assert_string_equal(p, "/e2b/envd/iabc123/files");
    free(p);
    p = sl_e2b_rewrite(NULL, NULL, NULL, NULL, "iabc123.0123abcd", "/files");
    assert_string_equal(p, "/e2b/envd/iabc123/files");
    free(p);
    assert_null(sl_e2b_rewrite(NULL, NULL, NULL, NULL, "nodots", "/files"));
    /* Only envd's REST paths move by token: nothing else of the API. */
    assert_null(sl_e2b_rewrite(NULL, NULL, NULL, NULL, "iabc123.0123abcd", "/api/v1/tenant"));
    assert_null(sl_e2b_rewrite(NULL, NULL, NULL, NULL, "iabc123.0123abcd", "/filesx"));
    p = sl_e2b_rewrite(NULL, NULL, NULL, NULL, "iabc123.0123abcd", "/files?path=a");
    assert_string_equal(p, "/e2b/envd/iabc123/files?path=a");
    free(p);
    assert_null(sl_e2b_rewrite(NULL, NULL, NULL, NULL, ".abc", "/files"));
    /* No header, no domain, no token: an ordinary request. */
    assert_null(sl_e2b_rewrite(NULL, NULL, "127.0.0.1", NULL, NULL, "/health"));
}

static void key_spellings(void **state)
{
    (void)state;
    char out[128];
    const char *hex = "0123456789ab" "0123456789abcdef0123456789abcdef0123456789abcdef";
    char e2b[80];
    snprintf(e2b, sizeof(e2b), "e2b_%s", hex);
    assert_true(sl_e2b_key_canonical(e2b, strlen(e2b), out, sizeof(out)));
    assert_string_equal(out, "sl0123456789ab_0123456789abcdef0123456789abcdef0123456789abcdef");
    /* E2B's spelling with a digit that is not lowercase hex: no key. */
    e2b[10] = 'G';
    assert_false(sl_e2b_key_canonical(e2b, strlen(e2b), out, sizeof(out)));
    e2b[10] = 'A';
    assert_false(sl_e2b_key_canonical(e2b, strlen(e2b), out, sizeof(out)));
    /* Anything else (the token, our spelling) is passed on as it is. */
    assert_true(sl_e2b_key_canonical("token", 5, out, sizeof(out)));
    assert_string_equal(out, "token");
    assert_false(sl_e2b_key_canonical("token", 5, out, 5)); /* no room */
}

static void envd_tokens(void **state)
{
    (void)state;
    char t[SL_E2B_TOKEN_MAX], u[SL_E2B_TOKEN_MAX];
    struct sl_principal p;
    sl_e2b_envd_token(SECRET, SL_E2B_TOKEN_ENVD, "acme", "iabc", t);
    assert_int_equal(strncmp(t, "acme.iabc.", 10), 0);
    assert_int_equal(strlen(t), 10 + 64);
    assert_true(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", t, strlen(t), &p));
    assert_int_equal(p.kind, SL_PRINCIPAL_TENANT);
    assert_string_equal(p.tenant_id, "acme");
    /* Another sandbox, another secret, another tenant: refused. */
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabd", t, strlen(t), &p));
    assert_false(sl_e2b_envd_token_check(SECRET "x", SL_E2B_TOKEN_ENVD, "iabc", t, strlen(t), &p));
    char forged[SL_E2B_TOKEN_MAX];
    snprintf(forged, sizeof(forged), "beta%s", t + 4);
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", forged, strlen(forged), &p));
    /* The operator's names no tenant; neither passes for the other. */
    sl_e2b_envd_token(SECRET, SL_E2B_TOKEN_ENVD, NULL, "iabc", u);
    assert_int_equal(strncmp(u, "iabc.", 5), 0);
    assert_true(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", u, strlen(u), &p));
    assert_int_equal(p.kind, SL_PRINCIPAL_OPERATOR);
    snprintf(forged, sizeof(forged), "acme.%s", u);
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", forged, strlen(forged), &p));
    /* Cut, lengthened, one digit changed. */
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", t, strlen(t) - 1, &p));
    snprintf(forged, sizeof(forged), "%s0", t);
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", forged, strlen(forged), &p));
    snprintf(forged, sizeof(forged), "%s", t);
    forged[strlen(forged) - 1] = forged[strlen(forged) - 1] == '0' ? '1' : '0';
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", forged, strlen(forged), &p));
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", "", 0, &p));
    /* A traffic token is not an envd token, nor the other way round. */
    char traffic[SL_E2B_TOKEN_MAX];
    sl_e2b_envd_token(SECRET, SL_E2B_TOKEN_TRAFFIC, "acme", "iabc", traffic);
    assert_string_not_equal(traffic, t);
    assert_true(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_TRAFFIC, "iabc", traffic,
                                        strlen(traffic), &p));
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_ENVD, "iabc", traffic,
                                         strlen(traffic), &p));
    assert_false(sl_e2b_envd_token_check(SECRET, SL_E2B_TOKEN_TRAFFIC, "iabc", t, strlen(t), &p));
}

static void connect_framing(void **state)
{
    (void)state;
    struct sl_buf b;
    sl_buf_init(&b, SIZE_MAX);
    json_t *msg = json_pack("{s:s}", "path", "/x");
    assert_int_equal(sl_connect_frame(&b, 0, msg), 0);
    assert_int_equal(sl_connect_end(&b, "not_found", "gone"), 0);
    const unsigned char *p = (const unsigned char *)b.data;
    assert_int_equal(p[0], 0);
    uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    assert_int_equal(n, strlen("{\"path\":\"/x\"}"));
    assert_memory_equal(b.data + 5, "{\"path\":\"/x\"}", n);
    const unsigned char *end = p + 5 + n;
    assert_int_equal(end[0], SL_CONNECT_FLAG_END);
    assert_memory_equal(end + 5, "{\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}",
                        b.len - 5 - n - 5);

    /* A request envelope back: exactly one message, an object. */
    json_t *got = NULL;
    const char *why = NULL;
    assert_int_equal(sl_connect_unwrap(b.data, 5 + n, &got, &why), 0);
    assert_string_equal(json_string_value(json_object_get(got, "path")), "/x");
    json_decref(got);
    assert_int_equal(sl_connect_unwrap(b.data, b.len, &got, &why), -1); /* two */
    assert_int_equal(sl_connect_unwrap(b.data, 4, &got, &why), -1);      /* cut */
    char compressed[64];
    memcpy(compressed, b.data, 5 + n);
    compressed[0] = 1;
    assert_int_equal(sl_connect_unwrap(compressed, 5 + n, &got, &why), -1);
    const char array[] = {0, 0, 0, 0, 2, '[', ']'};
    assert_int_equal(sl_connect_unwrap(array, sizeof(array), &got, &why), -1);
    assert_null(got);
    json_decref(msg);
    sl_buf_free(&b);
}

static void connect_codes(void **state)
{
    (void)state;
    struct sl_error e = {0};
    sl_error_set(&e, SL_E_INVALID_ARGUMENT, 0, "path does not exist");
    assert_string_equal(sl_connect_code_of(&e), "not_found");
    sl_error_set(&e, SL_E_INVALID_ARGUMENT, 0, "path already exists");
    assert_string_equal(sl_connect_code_of(&e), "already_exists");
    sl_error_set(&e, SL_E_INVALID_ARGUMENT, 0, "file path may not contain .. or NUL");
    assert_string_equal(sl_connect_code_of(&e), "invalid_argument");
    sl_error_set(&e, SL_E_EXEC_NOT_RUNNING, 0, "ended");
    assert_string_equal(sl_connect_code_of(&e), "not_found");
    sl_error_set(&e, SL_E_PARALLEL_EXEC_LIMIT, 0, "many");
    assert_string_equal(sl_connect_code_of(&e), "resource_exhausted");
    sl_error_set(&e, SL_E_STORE, 0, "down");
    assert_string_equal(sl_connect_code_of(&e), "unavailable");
    assert_int_equal(sl_connect_http_status("not_found"), 404);
    assert_int_equal(sl_connect_http_status("already_exists"), 409);
    assert_int_equal(sl_connect_http_status("unimplemented"), 501);
    assert_int_equal(sl_connect_http_status("failed_precondition"), 400);
    assert_int_equal(sl_connect_http_status("nonsense"), 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rewrite_by_header_host_and_token),
        cmocka_unit_test(key_spellings),
        cmocka_unit_test(envd_tokens),
        cmocka_unit_test(connect_framing),
        cmocka_unit_test(connect_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
