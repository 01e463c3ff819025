/* API keys (service/api_keys.c): the text form, what a check accepts, and
 * the cache's life. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "service/api_keys.h"

static void generate_and_parse(void **state)
{
    (void)state;
    char id[SL_KEY_ID_LEN + 1], secret[SL_KEY_SECRET_LEN + 1], key[SL_API_KEY_LEN + 1];
    char id2[SL_KEY_ID_LEN + 1], secret2[SL_KEY_SECRET_LEN + 1], key2[SL_API_KEY_LEN + 1];
    assert_int_equal(sl_api_key_generate(id, secret, key), 0);
    assert_int_equal(sl_api_key_generate(id2, secret2, key2), 0);
    assert_int_equal(strlen(key), SL_API_KEY_LEN);
    assert_memory_equal(key, "sl", 2);
    assert_int_equal(strncmp(key, id, SL_KEY_ID_LEN), 0);
    assert_string_not_equal(key, key2);
    char pid[SL_KEY_ID_LEN + 1], psecret[SL_KEY_SECRET_LEN + 1];
    assert_true(sl_api_key_parse(key, strlen(key), pid, psecret));
    assert_string_equal(pid, id);
    assert_string_equal(psecret, secret);

    /* Anything else is not a key. */
    char bad[SL_API_KEY_LEN + 2];
    const size_t n = SL_API_KEY_LEN;
    assert_false(sl_api_key_parse(key, n - 1, pid, psecret));
    snprintf(bad, sizeof(bad), "%s0", key);
    assert_false(sl_api_key_parse(bad, n + 1, pid, psecret));
    const size_t spots[] = {0, 1, 5, SL_KEY_ID_LEN, SL_KEY_ID_LEN + 3, n - 1};
    const char subs[] = {'S', 'x', 'G', '-', 'A', '\0'};
    for (size_t i = 0; i < sizeof(spots) / sizeof(spots[0]); i++) {
        memcpy(bad, key, n + 1);
        bad[spots[i]] = subs[i];
        assert_false(sl_api_key_parse(bad, n, pid, psecret));
    }
    assert_false(sl_api_key_parse(NULL, 0, pid, psecret));
    assert_false(sl_api_key_parse("", 0, pid, psecret));
}

/* The shape, written again independently of the parser. */
static bool is_key_shape(const char *s, size_t n)
{
    if (n != SL_API_KEY_LEN || s[0] != 's' || s[1] != 'l')
        return false;
    for (size_t i = 2; i < n; i++) {
        bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (i == SL_KEY_ID_LEN ? s[i] != '_' : !hex)
            return false;
    }
    return true;
}

/* Fuzz: random strings and random mutations of a real key (bytes of any
 * value, NUL included, lengths around the key's): the parser accepts
 * exactly the key shape, and what it splits out rebuilds the input. */
static void parse_fuzz(void **state)
{
    (void)state;
    char id[SL_KEY_ID_LEN + 1], secret[SL_KEY_SECRET_LEN + 1], key[SL_API_KEY_LEN + 1];
    assert_int_equal(sl_api_key_generate(id, secret, key), 0);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    static const char alphabet[] = "sl_0123456789abcdefABCDEF-gz \t\x01\xff";
    char buf[SL_API_KEY_LEN + 8];
    int accepted = 0;
    for (int round = 0; round < 200000; round++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n;
        if (round % 2) {
            n = SL_API_KEY_LEN - 3 + (size_t)(x % 7);
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                buf[i] = alphabet[x % (sizeof(alphabet) - 1)];
            }
        } else {
            n = SL_API_KEY_LEN;
            memcpy(buf, key, n);
            int flips = 1 + (int)(x % 3);
            for (int f = 0; f < flips; f++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                buf[x % n] = (char)(x >> 32);
            }
        }
        char pid[SL_KEY_ID_LEN + 1], psecret[SL_KEY_SECRET_LEN + 1];
        bool ok = sl_api_key_parse(buf, n, pid, psecret);
        assert_int_equal(ok, is_key_shape(buf, n));
        if (ok) {
            accepted++;
            char again[SL_API_KEY_LEN + 1];
            snprintf(again, sizeof(again), "%s_%s", pid, psecret);
            assert_memory_equal(again, buf, n);
        }
    }
    assert_true(accepted > 0); /* some mutations stay keys (a hex digit for a hex digit) */
}

static void what_a_check_accepts(void **state)
{
    (void)state;
    const char *secret = "00112233445566778899aabbccddeeff0011223344556677";
    struct sl_key_facts f = {.exists = true, .tenant_id = "acme"};
    sl_sha256_hex(secret, strlen(secret), f.secret_sha256);
    int64_t now = 1790790233123456;
    assert_true(sl_key_facts_accept(&f, secret, now));
    assert_false(sl_key_facts_accept(&f, "10112233445566778899aabbccddeeff0011223344556677", now));
    f.expires_at = now + 1;
    assert_true(sl_key_facts_accept(&f, secret, now));
    f.expires_at = now;
    assert_false(sl_key_facts_accept(&f, secret, now)); /* expired at its instant */
    f.expires_at = 0;
    f.revoked_at = now - 5;
    assert_false(sl_key_facts_accept(&f, secret, now));
    f.revoked_at = 0;
    f.exists = false;
    assert_false(sl_key_facts_accept(&f, secret, now));
    struct sl_key_facts none = {0}; /* no such key: an empty hash matches nothing */
    assert_false(sl_key_facts_accept(&none, secret, now));
}

static void the_cache_forgets_and_expires(void **state)
{
    (void)state;
    struct sl_key_cache *c = sl_key_cache_new();
    assert_non_null(c);
    struct sl_key_facts f = {.exists = true, .tenant_id = "acme"}, out;
    int64_t t = 5000000;
    uint64_t ticket;
    assert_false(sl_key_cache_get(c, "sl000000000001", t, &out, &ticket));
    sl_key_cache_put(c, "sl000000000001", &f, t, ticket);
    assert_true(sl_key_cache_get(c, "sl000000000001", t + SL_KEY_CACHE_TTL_US - 1, &out, &ticket));
    assert_string_equal(out.tenant_id, "acme");
    assert_false(sl_key_cache_get(c, "sl000000000001", t + SL_KEY_CACHE_TTL_US, &out, &ticket));
    assert_false(sl_key_cache_get(c, "sl000000000002", t, &out, &ticket));
    sl_key_cache_forget(c, "sl000000000001");
    assert_false(sl_key_cache_get(c, "sl000000000001", t, &out, &ticket));
    /* A clock that went back does not make an entry young. */
    assert_false(sl_key_cache_get(c, "sl000000000003", t, &out, &ticket));
    sl_key_cache_put(c, "sl000000000003", &f, t, ticket);
    assert_false(sl_key_cache_get(c, "sl000000000003", t - 1, &out, &ticket));
    sl_key_cache_free(c);
    /* No cache: nothing is ever remembered, nothing breaks. */
    sl_key_cache_put(NULL, "sl000000000001", &f, t, 0);
    assert_false(sl_key_cache_get(NULL, "sl000000000001", t, &out, &ticket));
    sl_key_cache_forget(NULL, "sl000000000001");
}

/* A lookup that raced a revocation (the slot was forgotten between its
 * miss and its put) does not land; a key nobody issued does not evict a
 * live one from a shared slot. */
static void the_cache_keeps_revocations_and_live_keys(void **state)
{
    (void)state;
    struct sl_key_cache *c = sl_key_cache_new();
    struct sl_key_facts live = {.exists = true, .tenant_id = "acme"}, none = {0}, out;
    int64_t t = 7000000;
    uint64_t ticket;
    assert_false(sl_key_cache_get(c, "sl00000000000a", t, &out, &ticket));
    sl_key_cache_forget(c, "sl00000000000a"); /* the revocation, while the store is asked */
    sl_key_cache_put(c, "sl00000000000a", &live, t, ticket);
    assert_false(sl_key_cache_get(c, "sl00000000000a", t, &out, &ticket));
    /* The next miss takes a fresh ticket and lands. */
    sl_key_cache_put(c, "sl00000000000a", &live, t, ticket);
    assert_true(sl_key_cache_get(c, "sl00000000000a", t, &out, &ticket));
    /* Find another id in the same slot, then try to evict with "no such key". */
    char other[SL_KEY_ID_LEN + 1] = "";
    for (int i = 0; i < 1000000 && !other[0]; i++) {
        char cand[SL_KEY_ID_LEN + 1];
        snprintf(cand, sizeof(cand), "sl%012x", i + 0x100);
        uint64_t tk;
        sl_key_cache_get(c, cand, t, &out, &tk);
        sl_key_cache_put(c, cand, &none, t, tk);
        if (!sl_key_cache_get(c, "sl00000000000a", t, &out, &tk))
            fail_msg("a nonexistent key evicted a live one");
        if (sl_key_cache_get(c, cand, t, &out, &tk) == false) {
            /* not cached: it shares the live key's slot */
            snprintf(other, sizeof(other), "%s", cand);
        }
    }
    assert_true(other[0] != '\0');
    sl_key_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(generate_and_parse),
        cmocka_unit_test(parse_fuzz),
        cmocka_unit_test(what_a_check_accepts),
        cmocka_unit_test(the_cache_forgets_and_expires),
        cmocka_unit_test(the_cache_keeps_revocations_and_live_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
