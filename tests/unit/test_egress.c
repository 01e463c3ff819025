/* net/egress.c: rules parsed and refused with the field named, the
 * canonical form read back equal, domains matched, and what the resolver
 * does with a name under each policy. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "net/egress.h"

static struct sl_egress_rule rule(const char *text)
{
    struct sl_egress_rule r;
    struct sl_error err = {0};
    assert_int_equal(sl_egress_rule_parse(text, "t", &r, &err), 0);
    return r;
}

static void refused(const char *text, const char *fragment)
{
    struct sl_egress_rule r;
    struct sl_error err = {0};
    assert_int_equal(sl_egress_rule_parse(text, "egress.allow[0]", &r, &err), -1);
    assert_string_equal(err.code, "EGRESS_POLICY_INVALID");
    if (!strstr(err.message, fragment) || !strstr(err.message, "egress.allow[0]"))
        fail_msg("'%s': '%s' has no '%s'", text, err.message, fragment);
}

static void rules_are_parsed_into_their_canonical_text(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"203.0.113.7", "203.0.113.7"},
        {"203.0.113.77/24", "203.0.113.0/24"}, /* host bits dropped */
        {"0.0.0.0/0", "0.0.0.0/0"},
        {"10.0.0.5:5432", "10.0.0.5:5432"},
        {"Example.COM.", "example.com"},
        {"*.GitHub.com:443", "*.github.com:443"},
        {"a-b.c_d.example:8000-8999", "a-b.c_d.example:8000-8999"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sl_egress_rule r = rule(cases[i][0]);
        char text[300];
        sl_egress_rule_text(&r, text, sizeof(text));
        assert_string_equal(text, cases[i][1]);
    }
    struct sl_egress_rule r = rule("10.1.2.3/8:80-81");
    assert_false(r.is_domain);
    assert_int_equal(r.prefix, 8);
    assert_int_equal(r.port_lo, 80);
    assert_int_equal(r.port_hi, 81);
}

static void bad_rules_are_refused_naming_the_entry(void **state)
{
    (void)state;
    refused("", "not an address");
    refused("2001:db8::1", "IPv6");
    refused("[2001:db8::1]:443", "IPv6");
    refused("example.com:0", "port");
    refused("example.com:65536", "port");
    refused("example.com:90-80", "port");
    refused("example.com:http", "port");
    refused("10.0.0.0/33", "prefix");
    refused("10.0.0.0/x", "prefix");
    refused("300.1.1.1/8", "IPv4 network");
    refused("localhost", "domain name"); /* one label */
    refused("-a.example", "domain name");
    refused("a-.example", "domain name");
    refused("a..example", "domain name");
    refused("a b.example", "domain name");
    refused("*.*.example", "domain name");
}

static void a_policy_reads_back_equal_and_refuses_what_it_does_not_know(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *doc = json_loads("{\"default\":\"deny\",\"allow\":[\"pypi.org:443\",\"10.0.0.0/8\"],"
                             "\"deny\":[\"*.evil.example\"]}",
                             0, &jerr);
    struct sl_egress_policy p, q;
    struct sl_error err = {0};
    assert_int_equal(sl_egress_parse(doc, &p, &err), 0);
    json_t *canon = sl_egress_to_json(&p);
    assert_int_equal(sl_egress_parse(canon, &q, &err), 0);
    assert_true(sl_egress_equal(&p, &q));
    assert_true(json_equal(doc, canon));
    q.dflt = SL_EGRESS_ALLOW;
    assert_false(sl_egress_equal(&p, &q));
    sl_egress_free(&q);
    json_decref(canon);
    json_decref(doc);
    sl_egress_free(&p);

    static const char *const bad[][2] = {
        {"{\"ports\":[1]}", "not a field"},
        {"{\"default\":\"maybe\"}", "egress.default"},
        {"{\"allow\":\"x.example\"}", "list"},
        {"{\"allow\":[1]}", "egress.allow[0] must be a string"},
        {"{\"deny\":[\"ok.example\",\"::1\"]}", "egress.deny[1]"},
        {"[]", "must be an object"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        doc = json_loads(bad[i][0], JSON_DECODE_ANY, &jerr);
        assert_non_null(doc);
        sl_error_clear(&err);
        assert_int_equal(sl_egress_parse(doc, &p, &err), -1);
        if (!strstr(err.message, bad[i][1]))
            fail_msg("%s: '%s' has no '%s'", bad[i][0], err.message, bad[i][1]);
        json_decref(doc);
    }
    /* The limit on rules, named. */
    json_t *many = json_array();
    for (int i = 0; i <= SL_EGRESS_MAX_RULES; i++)
        json_array_append_new(many, json_string("a.example"));
    doc = json_pack("{s:o}", "allow", many);
    assert_int_equal(sl_egress_parse(doc, &p, &err), -1);
    assert_non_null(strstr(err.message, "at most 256"));
    json_decref(doc);
}

static void domains_match_exactly_or_under_a_wildcard(void **state)
{
    (void)state;
    struct sl_egress_rule exact = rule("github.com"), wild = rule("*.github.com");
    assert_true(sl_egress_domain_matches(&exact, "github.com"));
    assert_false(sl_egress_domain_matches(&exact, "api.github.com"));
    assert_false(sl_egress_domain_matches(&exact, "evilgithub.com"));
    assert_true(sl_egress_domain_matches(&wild, "api.github.com"));
    assert_true(sl_egress_domain_matches(&wild, "a.b.github.com"));
    assert_false(sl_egress_domain_matches(&wild, "github.com"));
    assert_false(sl_egress_domain_matches(&wild, "evilgithub.com"));
    assert_false(sl_egress_domain_matches(&wild, "github.com.evil.example"));
    struct sl_egress_rule net = rule("10.0.0.0/8");
    assert_false(sl_egress_domain_matches(&net, "github.com"));
}

static void the_resolver_answers_learns_or_refuses_by_policy(void **state)
{
    (void)state;
    struct sl_egress_rule allow[] = {rule("*.github.com"), rule("10.0.0.0/8")};
    struct sl_egress_rule deny[] = {rule("evil.example"), rule("*.github.com")};
    struct sl_egress_policy open = {.dflt = SL_EGRESS_ALLOW, .n_allow = 2, .allow = allow,
                                    .n_deny = 2, .deny = deny};
    assert_int_equal(sl_egress_answer_for(&open, "api.github.com"), SL_EGRESS_LEARN);
    assert_int_equal(sl_egress_answer_for(&open, "evil.example"), SL_EGRESS_REFUSE);
    assert_int_equal(sl_egress_answer_for(&open, "pypi.org"), SL_EGRESS_ANSWER);
    struct sl_egress_policy closed = {.dflt = SL_EGRESS_DENY, .n_allow = 2, .allow = allow};
    assert_int_equal(sl_egress_answer_for(&closed, "api.github.com"), SL_EGRESS_LEARN);
    /* A denied sandbox cannot use DNS as a way out either. */
    assert_int_equal(sl_egress_answer_for(&closed, "pypi.org"), SL_EGRESS_REFUSE);
    assert_int_equal(sl_egress_answer_for(&closed, "github.com"), SL_EGRESS_REFUSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rules_are_parsed_into_their_canonical_text),
        cmocka_unit_test(bad_rules_are_refused_naming_the_entry),
        cmocka_unit_test(a_policy_reads_back_equal_and_refuses_what_it_does_not_know),
        cmocka_unit_test(domains_match_exactly_or_under_a_wildcard),
        cmocka_unit_test(the_resolver_answers_learns_or_refuses_by_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
