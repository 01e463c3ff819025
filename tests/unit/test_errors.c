/* Error mapping, the JSON error body, validation shape, and /openapi.json
 * against the route table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "api/errors.h"
#include "api/router.h"
#include "api/validate.h"

static void status_table(void **state)
{
    (void)state;
    assert_int_equal(sl_api_status_for_code("SANDBOX_INVALID_ARGUMENT"), 400);
    assert_int_equal(sl_api_status_for_code("SANDBOX_UNAUTHORIZED"), 401);
    assert_int_equal(sl_api_status_for_code("SANDBOX_NOT_FOUND"), 404);
    assert_int_equal(sl_api_status_for_code("EXEC_NOT_FOUND"), 404);
    assert_int_equal(sl_api_status_for_code("METHOD_NOT_ALLOWED"), 405);
    const char *conflicts[] = {"SANDBOX_BUSY_OR_STALE", "STALE_SANDBOX_GENERATION",
                               "SANDBOX_SCOPE_MISMATCH", "SANDBOX_PROFILE_MISMATCH",
                               "SANDBOX_WORKSPACE_LOST", "STALE_SANDBOX_ROUTE",
                               "SANDBOX_SHARED_WORKSPACE_LOCKED", "SANDBOX_EXEC_SCOPE_BUSY",
                               "SANDBOX_EXEC_SCOPE_LOCKED", "SANDBOX_FILE_PATH_LOCKED",
                               "SANDBOX_SUSPENDED", "SANDBOX_SUSPEND_BUSY",
                               "SANDBOX_SUSPEND_IN_PROGRESS", "SANDBOX_NOT_READY",
                               "SANDBOX_SNAPSHOT_FAILED"};
    for (size_t i = 0; i < sizeof(conflicts) / sizeof(conflicts[0]); i++)
        assert_int_equal(sl_api_status_for_code(conflicts[i]), 409);
    assert_int_equal(sl_api_status_for_code("SANDBOX_REQUEST_TOO_LARGE"), 413);
    assert_int_equal(sl_api_status_for_code("SANDBOX_INVALID_REQUEST"), 422);
    assert_int_equal(sl_api_status_for_code("SANDBOX_PARALLEL_EXEC_LIMIT"), 429);
    assert_int_equal(sl_api_status_for_code("SANDBOX_TEMPLATES_UNSUPPORTED"), 501);
    assert_int_equal(sl_api_status_for_code("SANDBOX_SUSPEND_UNSUPPORTED"), 501);
    assert_int_equal(sl_api_status_for_code("OBJECT_STORE_UNAVAILABLE"), 503);
    /* The reference's default for every other code is 503. */
    assert_int_equal(sl_api_status_for_code("SANDBOX_WORKER_UNREACHABLE"), 503);
    assert_int_equal(sl_api_status_for_code("NO_SANDBOX_WORKER_AVAILABLE"), 503);
    assert_int_equal(sl_api_status_for_code("SANDBOX_PROFILE_UNAVAILABLE"), 503);
    assert_int_equal(sl_api_status_for_code(NULL), 500);
}

static void error_body_shape(void **state)
{
    (void)state;
    char *body = sl_api_error_body("STALE_SANDBOX_ROUTE", "STALE_SANDBOX_ROUTE", NULL);
    json_t *j = json_loads(body, 0, NULL);
    assert_non_null(j);
    json_t *detail = json_object_get(j, "detail");
    assert_true(json_is_object(detail));
    assert_string_equal(json_string_value(json_object_get(detail, "code")), "STALE_SANDBOX_ROUTE");
    /* A message that only repeats the code becomes the code's sentence. */
    assert_string_equal(json_string_value(json_object_get(detail, "message")),
                        "the sandbox's route is stale (released, reassigned, or its worker "
                        "restarted): resolve it again and use the generation it answers");
    assert_null(json_object_get(detail, "errors"));
    assert_int_equal(json_object_size(j), 1);
    json_decref(j);
    free(body);
    /* A message of its own is kept; a code without a sentence stays itself. */
    assert_string_equal(sl_api_message_for("STALE_SANDBOX_ROUTE", "the sandbox is at generation 4"),
                        "the sandbox is at generation 4");
    assert_string_equal(sl_api_message_for("SOME_PLUGIN_CODE", ""), "SOME_PLUGIN_CODE");
    assert_string_equal(sl_api_message_for(SL_E_NO_WORKER, NULL),
                        "no worker can take the sandbox now (capacity, disk pressure, or no "
                        "worker with its profile): retry later");
}

static void validation_shape(void **state)
{
    (void)state;
    struct sl_validation v;
    sl_v_init(&v);
    json_t *body = json_pack("{s:s,s:i,s:s}", "generation", "SECRET-MARKER", "limit", 5,
                             "sandbox_id", "bad id!");
    int64_t gen = 0;
    assert_false(sl_v_int(&v, body, "generation", true, 1, INT64_MAX, 0, &gen));
    assert_null(sl_v_string(&v, body, "sandbox_id", true, 3, 128, true, NULL));
    assert_null(sl_v_string(&v, body, "name", true, 1, 64, false, NULL));
    assert_false(sl_v_ok(&v));
    assert_int_equal(json_array_size(v.errors), 3);
    json_t *e0 = json_array_get(v.errors, 0);
    assert_string_equal(json_string_value(json_array_get(json_object_get(e0, "loc"), 0)), "body");
    assert_string_equal(json_string_value(json_array_get(json_object_get(e0, "loc"), 1)),
                        "generation");
    assert_string_equal(json_string_value(json_object_get(e0, "type")), "invalid_request");
    /* Ours: the sentence says which field, where and why; never the value. */
    assert_string_equal(json_string_value(json_object_get(e0, "msg")),
                        "body field 'generation' must be an integer of at least 1");
    assert_string_equal(json_string_value(json_object_get(e0, "in")), "body");
    assert_string_equal(json_string_value(json_object_get(json_array_get(v.errors, 1), "msg")),
                        "body field 'sandbox_id' may only contain letters, digits and _ . : -");
    /* Fields outside the whitelist are reported as "request" in loc, by
     * name in "field". */
    json_t *e2 = json_array_get(v.errors, 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(e2, "loc"), 1)),
                        "request");
    assert_string_equal(json_string_value(json_object_get(e2, "field")), "name");
    assert_string_equal(json_string_value(json_object_get(e2, "msg")),
                        "body field 'name' is required");
    char message[320];
    sl_v_message(&v, message, sizeof(message));
    assert_string_equal(message, "request validation failed: body field 'generation' must be an "
                                 "integer of at least 1 (and 2 more in errors)");
    /* A query parameter says so; loc stays the reference's ["body", ...]. */
    int64_t limit = 0;
    assert_false(sl_v_query_int(&v, "999", "limit", false, 1, 200, 50, &limit));
    json_t *e3 = json_array_get(v.errors, 3);
    assert_string_equal(json_string_value(json_array_get(json_object_get(e3, "loc"), 0)), "body");
    assert_string_equal(json_string_value(json_object_get(e3, "in")), "query");
    assert_string_equal(json_string_value(json_object_get(e3, "msg")),
                        "query parameter 'limit' must be an integer from 1 to 200");
    /* An indexed field keeps its whitelisted loc. */
    sl_v_fail(&v, "argv[3]", "must be a string");
    json_t *e4 = json_array_get(v.errors, 4);
    assert_string_equal(json_string_value(json_array_get(json_object_get(e4, "loc"), 1)), "argv");
    assert_string_equal(json_string_value(json_object_get(e4, "field")), "argv[3]");
    char *text = json_dumps(v.errors, 0);
    assert_null(strstr(text, "SECRET-MARKER"));
    assert_null(strstr(text, "bad id!"));
    free(text);
    /* At most 20 entries. */
    for (int i = 0; i < 40; i++)
        sl_v_fail(&v, "argv", "is wrong");
    assert_int_equal(json_array_size(v.errors), 20);
    sl_v_free(&v);
    json_decref(body);
}

static void validation_values(void **state)
{
    (void)state;
    struct sl_validation v;
    sl_v_init(&v);
    json_t *body = json_pack("{s:i,s:f,s:s,s:b,s:s}", "a", 7, "f", 1.0, "id", "ok_id.1:-x", "b",
                             1, "u", "\xc3\xa9\xc3\xa9\xc3\xa9");
    int64_t out = 0;
    bool b = false;
    assert_true(sl_v_int(&v, body, "a", true, 1, 10, 0, &out));
    assert_int_equal(out, 7);
    assert_false(sl_v_int(&v, body, "a", true, 8, 10, 0, &out)); /* out of range */
    assert_false(sl_v_int(&v, body, "f", true, 0, 10, 0, &out)); /* a float is not an int */
    assert_non_null(sl_v_string(&v, body, "id", true, 3, 128, true, NULL));
    assert_true(sl_v_bool(&v, body, "b", false, &b) && b);
    assert_false(sl_v_bool(&v, body, "a", false, &b));
    /* Lengths count characters, not bytes: 3 characters in 6 bytes. */
    assert_non_null(sl_v_string(&v, body, "u", true, 3, 3, false, NULL));
    assert_true(sl_v_query_int(&v, "12", "limit", false, 1, 100, 5, &out) && out == 12);
    assert_false(sl_v_query_int(&v, "12x", "limit", false, 1, 100, 5, &out));
    assert_false(sl_v_query_int(&v, NULL, "generation", true, 1, 100, 5, &out));
    assert_true(sl_v_query_int(&v, NULL, "offset", false, 0, 100, 5, &out) && out == 5);
    sl_v_free(&v);
    json_decref(body);
}

/* Every route but /admin appears in /openapi.json with its method, and the
 * document lists nothing the router does not serve. */
static void openapi_matches_router(void **state)
{
    (void)state;
    json_t *doc = sl_openapi_document();
    json_t *paths = json_object_get(doc, "paths");
    assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "info"), "title")),
                        "Sandloom");
    size_t documented = 0;
    for (size_t i = 0; i < sl_routes_len; i++) {
        const struct sl_route_def *r = &sl_routes[i];
        if (strcmp(r->pattern, "/admin") == 0 || strncmp(r->pattern, "/admin/", 7) == 0 ||
            strncmp(r->pattern, "/docs/", 6) == 0 || r->internal ||
            r->credential != SL_CRED_BEARER)
            continue; /* pages and their assets, the worker protocol and E2B's are not the API */
        /* A tail route's "{*}" is shown as "{path}". */
        char shown[256];
        snprintf(shown, sizeof(shown), "%s", r->pattern);
        char *star = strstr(shown, "{*}");
        if (star)
            snprintf(star, sizeof(shown) - (size_t)(star - shown), "{path}");
        json_t *item = json_object_get(paths, shown);
        assert_non_null(item);
        char method[16] = {0};
        for (size_t k = 0; r->method[k]; k++)
            method[k] = (char)(r->method[k] + 32);
        assert_non_null(json_object_get(item, method));
        documented++;
    }
    size_t ops = 0;
    const char *path;
    json_t *item;
    json_object_foreach(paths, path, item) {
        const char *m;
        json_t *op;
        json_object_foreach(item, m, op) {
            ops++;
            /* Every code an operation lists answers the status it is
             * listed under (the one code table, api/errors.c). */
            const char *status;
            json_t *resp;
            json_object_foreach(json_object_get(op, "responses"), status, resp) {
                size_t ci;
                json_t *code;
                json_array_foreach(json_object_get(resp, "x-error-codes"), ci, code) {
                    int want = atoi(status);
                    int got = sl_api_status_for_code(json_string_value(code));
                    if (got != want)
                        fail_msg("%s %s lists %s under %d, but it answers %d", m, path,
                                 json_string_value(code), want, got);
                }
            }
            /* Each operation must route to a handler with that method. */
            char upper[16] = {0}, buf[256];
            for (size_t k = 0; m[k] && k < 15; k++)
                upper[k] = (char)(m[k] - 32);
            /* Substitute parameters with a sample value. */
            size_t o = 0;
            for (const char *p = path; *p && o < sizeof(buf) - 8;) {
                if (*p == '{') {
                    memcpy(buf + o, "x-1", 3);
                    o += 3;
                    p = strchr(p, '}') + 1;
                } else {
                    buf[o++] = *p++;
                }
            }
            buf[o] = '\0';
            const struct sl_route_def *route = NULL;
            const char *params[SL_ROUTE_MAX_PARAMS];
            size_t np = 0;
            char allow[64];
            assert_int_equal(sl_router_match(upper, buf, &route, params, &np, allow,
                                             sizeof(allow)),
                             SL_MATCH_OK);
        }
    }
    assert_int_equal(ops, documented);
    json_decref(doc);
}

static void router_decisions(void **state)
{
    (void)state;
    const struct sl_route_def *route = NULL;
    const char *params[SL_ROUTE_MAX_PARAMS];
    size_t np = 0;
    char allow[64];
    char p1[] = "/api/v1/sandboxes/resolve";
    assert_int_equal(sl_router_match("POST", p1, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_OK);
    assert_string_equal(route->op_id, "resolveSandbox");
    char p2[] = "/api/v1/sandboxes/abc/files/list";
    assert_int_equal(sl_router_match("GET", p2, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_OK);
    assert_int_equal(np, 1);
    assert_string_equal(params[0], "abc");
    char p3[] = "/api/v1/sandboxes/abc";
    assert_int_equal(sl_router_match("PATCH", p3, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_METHOD);
    assert_non_null(strstr(allow, "GET"));
    assert_non_null(strstr(allow, "POST"));
    assert_non_null(strstr(allow, "DELETE"));
    char p4[] = "/api/v1/nothing/here";
    assert_int_equal(sl_router_match("GET", p4, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_NONE);
    char p5[] = "/health/";
    assert_int_equal(sl_router_match("GET", p5, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_NONE);
    assert_true(sl_router_path_protected("/api/v1/whatever"));
    assert_false(sl_router_path_protected("/healthz"));
    /* A tail route takes the rest of the path, slashes and all. */
    char t1[] = "/api/v1/sandboxes/abc/ports/8080/a/b//c/";
    assert_int_equal(sl_router_match("POST", t1, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_OK);
    assert_int_equal(np, 3);
    assert_string_equal(params[0], "abc");
    assert_string_equal(params[1], "8080");
    assert_string_equal(params[2], "a/b//c/");
    char t2[] = "/api/v1/sandboxes/abc/ports/8080";
    assert_int_equal(sl_router_match("GET", t2, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_OK);
    assert_string_equal(params[1], "8080");
    assert_string_equal(params[2], "");
    char t3[] = "/api/v1/sandboxes/abc/ports/8080/";
    assert_int_equal(sl_router_match("GET", t3, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_OK);
    assert_string_equal(params[2], "");
    char t4[] = "/api/v1/sandboxes/abc/ports/8080x";
    assert_int_equal(sl_router_match("GET", t4, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_OK); /* the port's own check refuses "8080x" */
    assert_string_equal(params[1], "8080x");
    char t5[] = "/api/v1/sandboxes/abc/ports/8080/x";
    assert_int_equal(sl_router_match("TRACE", t5, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_METHOD);
    assert_non_null(strstr(allow, "PATCH"));
    char t6[] = "/api/v1/sandboxes/abc/portsx/8080/x";
    assert_int_equal(sl_router_match("GET", t6, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_NONE);
    char t7[] = "/api/v1/sandboxes//ports/8080/x";
    assert_int_equal(sl_router_match("GET", t7, &route, params, &np, allow, sizeof(allow)),
                     SL_MATCH_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_table),      cmocka_unit_test(error_body_shape),
        cmocka_unit_test(validation_shape),  cmocka_unit_test(validation_values),
        cmocka_unit_test(openapi_matches_router), cmocka_unit_test(router_decisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
