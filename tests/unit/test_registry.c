/* The worker registries (registry/): the in-process one, and the Redis one
 * on a real redis-server (tests/db/run-with-redis.sh starts it and sets
 * SANDLOOM_TEST_REDIS_URL; without it this test fails, it does not skip):
 * FLEET.md §3.2's keys, expiry, the list's exclusions and truncation, a
 * server that goes away and comes back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/util.h"
#include "registry/registry.h"

static const char *redis_url(void)
{
    const char *url = getenv("SANDLOOM_TEST_REDIS_URL");
    if (!url || !*url)
        fail_msg("SANDLOOM_TEST_REDIS_URL is not set: run under tests/db/run-with-redis.sh");
    return url;
}

/* A raw connection to the test server, for looking behind the registry. */
static redisContext *raw(void)
{
    char pass[128] = "";
    int port = 0;
    if (sscanf(redis_url(), "redis://:%127[^@]@127.0.0.1:%d", pass, &port) != 2)
        fail_msg("cannot read the test URL");
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    freeReplyObject(redisCommand(c, "AUTH %s", pass));
    return c;
}

static void entry_make(struct sl_worker_entry *e, const char *id, int64_t running)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->worker_id, sizeof(e->worker_id), "%s", id);
    snprintf(e->worker_epoch, sizeof(e->worker_epoch), "epoch-%s", id);
    snprintf(e->endpoint, sizeof(e->endpoint), "http://%s:8080", id);
    snprintf(e->status, sizeof(e->status), "ACTIVE");
    snprintf(e->profile_id, sizeof(e->profile_id), "coding-default");
    snprintf(e->profile_hash, sizeof(e->profile_hash), "hash-1");
    e->capacity = 8;
    e->running_sessions = running;
    e->max_parallel_execs_per_sandbox = 16;
    e->observed_at = sl_now_us() / 1000;
}

static json_t *payload_of(const struct sl_worker_entry *e)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:s,s:s}", "worker_id", e->worker_id,
                     "worker_epoch", e->worker_epoch, "endpoint", e->endpoint, "status",
                     e->status, "capacity", (json_int_t)e->capacity, "running_sessions",
                     (json_int_t)e->running_sessions, "running_execs", (json_int_t)0,
                     "max_parallel_execs_per_sandbox",
                     (json_int_t)e->max_parallel_execs_per_sandbox, "observed_at",
                     (json_int_t)e->observed_at, "profile_id", e->profile_id, "profile_hash",
                     e->profile_hash);
}

static void publish(struct sl_registry *r, const struct sl_worker_entry *e, int ttl)
{
    struct sl_error err = {0};
    json_t *p = payload_of(e);
    if (r->ops->publish(r, e, p, ttl, &err) < 0)
        fail_msg("publish: %s", sl_error_text(&err));
    json_decref(p);
}

/* Both registries: what one publishes another process reads (Redis), and
 * what expires is gone. */
static void check_basics(struct sl_registry *r)
{
    struct sl_error err = {0};
    struct sl_worker_entry a, b, got;
    entry_make(&a, "worker-a-8080", 1);
    entry_make(&b, "worker-b-8080", 3);
    publish(r, &a, 30);
    publish(r, &b, 30);
    assert_int_equal(r->ops->get(r, "worker-a-8080", &got, &err), 1);
    assert_string_equal(got.worker_epoch, "epoch-worker-a-8080");
    assert_string_equal(got.endpoint, "http://worker-a-8080:8080");
    assert_int_equal(got.capacity, 8);
    assert_int_equal(r->ops->get(r, "worker-z-8080", &got, &err), 0);

    struct sl_worker_entry *v = NULL;
    size_t n = 0, excluded = 0;
    int truncated = -1;
    assert_int_equal(r->ops->list(r, 256, &v, &n, &excluded, &truncated, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].worker_id, "worker-a-8080"); /* sorted by id */
    assert_string_equal(v[1].worker_id, "worker-b-8080");
    assert_int_equal(v[1].running_sessions, 3);
    assert_int_equal(truncated, 0);
    free(v);
    assert_int_equal(r->ops->list(r, 1, &v, &n, &excluded, &truncated, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(truncated, 1);
    free(v);

    assert_int_equal(r->ops->unregister(r, "worker-b-8080", &err), 0);
    assert_int_equal(r->ops->get(r, "worker-b-8080", &got, &err), 0);
    /* A TTL of one second: gone after it. */
    publish(r, &b, 1);
    usleep(1300 * 1000);
    assert_int_equal(r->ops->get(r, "worker-b-8080", &got, &err), 0);
    assert_int_equal(r->ops->list(r, 256, &v, &n, &excluded, &truncated, &err), 0);
    assert_int_equal(n, 1);
    free(v);
    assert_int_equal(r->ops->unregister(r, "worker-a-8080", &err), 0);
}

static void test_memory(void **state)
{
    (void)state;
    struct sl_registry *r = sl_registry_memory_open();
    check_basics(r);
    r->ops->close(r);
}

static void test_redis_keys_and_expiry(void **state)
{
    (void)state;
    struct sl_error err = {0};
    struct sl_registry *r = sl_registry_redis_open(redis_url(), "ns-keys", 30, 2000, &err);
    if (!r)
        fail_msg("open: %s", sl_error_text(&err));
    assert_string_equal(r->backend, "redis");
    check_basics(r);

    /* FLEET.md §3.2's layout, as another implementation reads it. */
    struct sl_worker_entry a;
    entry_make(&a, "worker-a-8080", 2);
    publish(r, &a, 30);
    redisContext *c = raw();
    redisReply *doc = redisCommand(c, "GET ns-keys:worker:worker-a-8080");
    assert_int_equal(doc->type, REDIS_REPLY_STRING);
    json_t *p = json_loads(doc->str, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(p, "worker_epoch")),
                        "epoch-worker-a-8080");
    assert_null(strchr(doc->str, ' ')); /* compact */
    json_decref(p);
    freeReplyObject(doc);
    redisReply *ttl = redisCommand(c, "TTL ns-keys:worker:worker-a-8080");
    assert_true(ttl->integer > 25 && ttl->integer <= 30);
    freeReplyObject(ttl);
    redisReply *member = redisCommand(c, "SISMEMBER ns-keys:workers worker-a-8080");
    assert_int_equal(member->integer, 1);
    freeReplyObject(member);

    /* An id left in the set whose key expired is excluded and removed; one
     * whose observed_at is older than the TTL is excluded too. */
    freeReplyObject(redisCommand(c, "SADD ns-keys:workers worker-gone-8080"));
    struct sl_worker_entry stale;
    entry_make(&stale, "worker-stale-8080", 0);
    stale.observed_at -= 60 * 1000;
    publish(r, &stale, 30);
    struct sl_worker_entry *v = NULL;
    size_t n = 0, excluded = 0;
    int truncated = 0;
    assert_int_equal(r->ops->list(r, 256, &v, &n, &excluded, &truncated, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].worker_id, "worker-a-8080");
    assert_int_equal(excluded, 2);
    free(v);
    member = redisCommand(c, "SISMEMBER ns-keys:workers worker-gone-8080");
    assert_int_equal(member->integer, 0);
    freeReplyObject(member);
    /* Namespaces do not see each other. */
    struct sl_registry *other = sl_registry_redis_open(redis_url(), "ns-other", 30, 2000, &err);
    struct sl_worker_entry got;
    assert_int_equal(other->ops->get(other, "worker-a-8080", &got, &err), 0);
    other->ops->close(other);
    /* The URL's password is percent-decoded ('-' written %2D here). */
    char pass[128] = "", encoded[400];
    int port = 0;
    assert_int_equal(sscanf(redis_url(), "redis://:%127[^@]@127.0.0.1:%d", pass, &port), 2);
    size_t k = 0;
    for (const char *ch = pass; *ch && k + 4 < sizeof(encoded); ch++)
        k += (size_t)(*ch == '-' ? snprintf(encoded + k, 4, "%%2D")
                                : snprintf(encoded + k, 2, "%c", *ch));
    char url[512];
    snprintf(url, sizeof(url), "redis://:%s@127.0.0.1:%d/0", encoded, port);
    struct sl_registry *enc = sl_registry_redis_open(url, "ns-keys", 30, 2000, &err);
    assert_int_equal(enc->ops->get(enc, "worker-a-8080", &got, &err), 1);
    enc->ops->close(enc);
    redisFree(c);
    r->ops->close(r);
}

static void test_redis_outage_and_recovery(void **state)
{
    (void)state;
    const char *ctl = getenv("SANDLOOM_TEST_REDIS_CTL");
    assert_non_null(ctl);
    struct sl_error err = {0};
    struct sl_registry *r = sl_registry_redis_open(redis_url(), "ns-outage", 30, 2000, &err);
    struct sl_worker_entry a, got;
    entry_make(&a, "worker-a-8080", 0);
    publish(r, &a, 30);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s stop", ctl);
    assert_int_equal(system(cmd), 0);
    int64_t t = sl_mono_us();
    assert_int_equal(r->ops->get(r, "worker-a-8080", &got, &err), -1);
    assert_string_equal(err.code, SL_E_NO_WORKER);
    assert_null(strstr(err.message, "127.0.0.1"));
    /* The next calls within the second fail at once. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(r->ops->get(r, "worker-a-8080", &got, &err), -1);
    assert_true(sl_mono_us() - t < 2500000);
    snprintf(cmd, sizeof(cmd), "%s start", ctl);
    assert_int_equal(system(cmd), 0);
    /* Back by itself (no persistence: the entry is published again). */
    usleep(1100 * 1000);
    struct sl_error e2 = {0};
    json_t *p = payload_of(&a);
    int rc = -1;
    for (int i = 0; i < 30 && rc < 0; i++) {
        rc = r->ops->publish(r, &a, p, 30, &e2);
        if (rc < 0)
            usleep(200 * 1000);
    }
    json_decref(p);
    assert_int_equal(rc, 0);
    assert_int_equal(r->ops->get(r, "worker-a-8080", &got, &err), 1);
    r->ops->close(r);
}

static void test_redis_bad_urls(void **state)
{
    (void)state;
    struct sl_error err = {0};
    assert_null(sl_registry_redis_open("rediss://h:6380/0", "ns", 30, 100, &err));
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_non_null(strstr(err.message, "TLS"));
    assert_null(sl_registry_redis_open("http://h:6379", "ns", 30, 100, &err));
    assert_null(sl_registry_redis_open("redis://h:99999/0", "ns", 30, 100, &err));
    struct sl_registry *r = sl_registry_redis_open("redis://:pw@127.0.0.1:1/2", "ns", 30, 500, &err);
    assert_non_null(r); /* nothing is connected at open */
    struct sl_worker_entry got;
    assert_int_equal(r->ops->get(r, "w", &got, &err), -1);
    assert_string_equal(err.code, SL_E_NO_WORKER);
    assert_null(strstr(err.detail, "pw"));
    r->ops->close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_redis_keys_and_expiry),
        cmocka_unit_test(test_redis_outage_and_recovery),
        cmocka_unit_test(test_redis_bad_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
