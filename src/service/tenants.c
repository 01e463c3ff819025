#include "service/tenants.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "service/api_keys.h"
#include "service/internal.h"

const char *const sl_tenant_quota_names[] = {
    "sandboxes",            /* routes that exist (not RELEASED) */
    "running_sessions",     /* sandboxes live on a worker */
    "commands_in_flight",   /* executions RUNNING at once */
    "workspace_bytes",      /* bytes of workspace on disk, all its sandboxes */
    "sandbox_memory_bytes", /* the most memory one sandbox may ask for */
    "sandbox_pids",         /* the most processes one sandbox may ask for */
    "sandbox_cpu_millis",   /* the most CPU one sandbox may ask for (1000 = a core) */
    NULL,
};

/* The operator as a record's actor (created_by). */
#define OPERATOR_ACTOR "operator"
/* key_id draws before giving up (48 random bits: a clash is a fluke). */
#define KEY_ID_ATTEMPTS 3

/* 1 to max characters of [a-z0-9-], not starting with '-'. */
static bool tenant_id_shape(const char *id, size_t max)
{
    size_t n = id ? strlen(id) : 0;
    if (n < 1 || n > max || id[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '-'))
            return false;
    return true;
}

bool sl_tenant_id_valid(const char *id)
{
    return tenant_id_shape(id, SL_TENANT_ID_MAX);
}

bool sl_tenant_id_lookup_valid(const char *id)
{
    return tenant_id_shape(id, 64); /* the column's width */
}

static int require_tenancy(struct sl_service *svc, struct sl_error *err)
{
    if (svc->store->tenancy)
        return 0;
    return sl_error_set(err, SL_E_TENANCY_UNAVAILABLE, 0,
                        "this database has no tenant tables: apply the deploy SQL (deploy/sql/) "
                        "or enable SANDBOX_DATABASE_AUTO_DDL, then restart the service");
}

static int tenant_missing(struct sl_error *err)
{
    return sl_error_set(err, SL_E_TENANT_NOT_FOUND, 0, "no tenant with this tenant_id");
}

/* ---- views ---- */

/* The stored quotas as an object ({} when none or unreadable). */
static json_t *quotas_of(const char *text)
{
    json_t *q = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(q)) {
        json_decref(q);
        q = json_object();
    }
    return q;
}

static json_t *tenant_view(const struct sl_tenant *t)
{
    return json_pack("{s:s,s:o,s:o,s:o,s:o}", "tenant_id", t->tenant_id, "quotas",
                     quotas_of(t->quotas_json), "created_by", sl_json_str_or_null(t->created_by),
                     "created_at", sl_json_ts(t->created_at, "Z"), "updated_at",
                     sl_json_ts(t->updated_at, "Z"));
}

static const char *key_status(const struct sl_api_key *k, int64_t now)
{
    if (k->revoked_at)
        return "revoked";
    if (k->expires_at && now >= k->expires_at)
        return "expired";
    return "active";
}

static json_t *key_view(const struct sl_api_key *k)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "key_id", k->key_id, "tenant_id",
                     k->tenant_id, "name", k->name, "status", key_status(k, sl_now_us()),
                     "created_by", sl_json_str_or_null(k->created_by), "created_at",
                     sl_json_ts(k->created_at, "Z"), "expires_at", sl_json_ts(k->expires_at, "Z"),
                     "revoked_at", sl_json_ts(k->revoked_at, "Z"));
}

/* Compact text of a quotas object, NULL when it has no limit. */
static char *quotas_text(const json_t *quotas)
{
    if (!quotas || json_object_size(quotas) == 0)
        return NULL;
    return json_dumps(quotas, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- the operator's ---- */

json_t *sl_svc_tenant_create(struct sl_service *svc, const char *tenant_id, const json_t *quotas,
                             struct sl_error *err)
{
    if (require_tenancy(svc, err) < 0)
        return NULL;
    _cleanup_json_ json_t *limits = json_object();
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)quotas, name, value)
        if (!json_is_null(value))
            json_object_set(limits, name, value);
    _cleanup_free_ char *text = quotas_text(limits);
    struct sl_tenant t = {.quotas_json = text, .created_by = OPERATOR_ACTOR,
                          .created_at = sl_now_us()};
    snprintf(t.tenant_id, sizeof(t.tenant_id), "%s", tenant_id);
    t.updated_at = t.created_at;
    int rc = svc->store->ops->tenant_insert(svc->store, &t, err);
    if (rc < 0)
        return NULL;
    if (rc == 0) {
        sl_error_set(err, SL_E_TENANT_EXISTS, 0, "a tenant with this tenant_id exists");
        return NULL;
    }
    return tenant_view(&t);
}

/* What the tenant uses now, by the names of its quotas. */
static json_t *usage_view(struct sl_service *svc, const char *tenant_id, struct sl_error *err)
{
    int64_t sandboxes, running, commands;
    if (svc->store->ops->tenant_usage(svc->store, tenant_id, &sandboxes, &running, &commands,
                                      err) < 0)
        return NULL;
    /* Its workspace bytes as this worker's last disk cycle counted them
     * (only a tenant with workspace_bytes is counted: null otherwise). */
    json_t *disk = json_null();
    pthread_mutex_lock(&svc->limits_lock);
    for (size_t i = 0; i < svc->tenant_disk_n; i++)
        if (strcmp(svc->tenant_disk[i].tenant_id, tenant_id) == 0) {
            json_decref(disk);
            disk = json_integer(svc->tenant_disk[i].bytes);
        }
    pthread_mutex_unlock(&svc->limits_lock);
    return json_pack("{s:I,s:I,s:I,s:o}", "sandboxes", (json_int_t)sandboxes, "running_sessions",
                     (json_int_t)running, "commands_in_flight", (json_int_t)commands,
                     "workspace_bytes", disk);
}

/* The tenant's row into *t: 0, or -1 when there is no such tenant (err
 * TENANT_NOT_FOUND), no tenancy, or the store failed. */
static int tenant_load(struct sl_service *svc, const char *tenant_id, struct sl_tenant *t,
                       struct sl_error *err)
{
    if (require_tenancy(svc, err) < 0)
        return -1;
    int found = svc->store->ops->tenant_get(svc->store, tenant_id, t, err);
    if (found == 0)
        tenant_missing(err);
    return found == 1 ? 0 : -1;
}

int svc_tenant_exists(struct sl_service *svc, const char *tenant_id, struct sl_error *err)
{
    struct sl_tenant t;
    if (tenant_load(svc, tenant_id, &t, err) < 0)
        return -1;
    sl_tenant_clear(&t);
    return 0;
}

json_t *sl_svc_tenant_get(struct sl_service *svc, const char *tenant_id, struct sl_error *err)
{
    struct sl_tenant t;
    if (tenant_load(svc, tenant_id, &t, err) < 0)
        return NULL;
    json_t *doc = tenant_view(&t);
    sl_tenant_clear(&t);
    json_t *usage = doc ? usage_view(svc, tenant_id, err) : NULL;
    if (!usage) {
        json_decref(doc);
        return NULL;
    }
    json_object_set_new(doc, "usage", usage);
    return doc;
}

json_t *sl_svc_tenant_list(struct sl_service *svc, struct sl_error *err)
{
    if (require_tenancy(svc, err) < 0)
        return NULL;
    struct sl_tenant *v = NULL;
    size_t n = 0;
    if (svc->store->ops->tenant_list(svc->store, &v, &n, err) < 0)
        return NULL;
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, tenant_view(&v[i]));
    sl_tenants_free(v, n);
    return json_pack("{s:o}", "tenants", items);
}

json_t *sl_svc_tenant_set_quotas(struct sl_service *svc, const char *tenant_id,
                                 const json_t *quotas, struct sl_error *err)
{
    struct sl_tenant t;
    if (tenant_load(svc, tenant_id, &t, err) < 0)
        return NULL;
    /* A merge: the names given change, the others stay; null removes. Two
     * operators patching the same tenant at once: the last one wins. */
    _cleanup_json_ json_t *limits = quotas_of(t.quotas_json);
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)quotas, name, value) {
        if (json_is_null(value))
            json_object_del(limits, name);
        else
            json_object_set(limits, name, value);
    }
    _cleanup_free_ char *text = quotas_text(limits);
    int64_t now = sl_now_us();
    int rc = svc->store->ops->tenant_set_quotas(svc->store, tenant_id, text, now, err);
    if (rc <= 0) {
        sl_tenant_clear(&t);
        return rc < 0 ? NULL : (tenant_missing(err), NULL);
    }
    free(t.quotas_json);
    t.quotas_json = text;
    text = NULL;
    t.updated_at = now;
    json_t *doc = tenant_view(&t);
    sl_tenant_clear(&t);
    return doc;
}

/* 0 the tenant exists, -1 not (err says why). */
static int tenant_exists(struct sl_service *svc, const char *tenant_id, struct sl_error *err)
{
    struct sl_tenant t;
    int rc = tenant_load(svc, tenant_id, &t, err);
    sl_tenant_clear(&t);
    return rc;
}

json_t *sl_svc_api_key_create(struct sl_service *svc, const char *tenant_id, const char *name,
                              int64_t expires_at, struct sl_error *err)
{
    if (tenant_exists(svc, tenant_id, err) < 0)
        return NULL;
    struct sl_api_key k = {.created_by = OPERATOR_ACTOR, .created_at = sl_now_us(),
                           .expires_at = expires_at};
    snprintf(k.tenant_id, sizeof(k.tenant_id), "%s", tenant_id);
    snprintf(k.name, sizeof(k.name), "%s", name);
    char secret[SL_KEY_SECRET_LEN + 1], api_key[SL_API_KEY_LEN + 1];
    for (int attempt = 0; attempt < KEY_ID_ATTEMPTS; attempt++) {
        if (sl_api_key_generate(k.key_id, secret, api_key) < 0) {
            sl_error_errno(err, SL_E_INTERNAL, "no randomness for a key");
            return NULL;
        }
        sl_sha256_hex(secret, strlen(secret), k.secret_sha256);
        int rc = svc->store->ops->api_key_insert(svc->store, &k, err);
        if (rc < 0)
            break;
        if (rc == 1) {
            json_t *doc = key_view(&k);
            if (!doc) {
                explicit_bzero(secret, sizeof(secret));
                explicit_bzero(api_key, sizeof(api_key));
                sl_error_set(err, SL_E_INTERNAL, 0, "could not encode the key");
                return NULL;
            }
            json_object_set_new(doc, "api_key", json_string(api_key));
            /* E2B's spelling of the same key (e2b/e2b.h): its 60 hex digits. */
            char e2b[4 + SL_KEY_ID_LEN - 2 + SL_KEY_SECRET_LEN + 1];
            snprintf(e2b, sizeof(e2b), "e2b_%.12s%.48s", k.key_id + 2, secret);
            json_object_set_new(doc, "e2b_api_key", json_string(e2b));
            explicit_bzero(e2b, sizeof(e2b));
            explicit_bzero(secret, sizeof(secret));
            explicit_bzero(api_key, sizeof(api_key));
            return doc;
        }
    }
    explicit_bzero(secret, sizeof(secret));
    explicit_bzero(api_key, sizeof(api_key));
    if (!err->code[0])
        sl_error_set(err, SL_E_INTERNAL, 0, "no free key_id after %d draws", KEY_ID_ATTEMPTS);
    return NULL;
}

json_t *sl_svc_api_key_list(struct sl_service *svc, const char *tenant_id, struct sl_error *err)
{
    if (tenant_exists(svc, tenant_id, err) < 0)
        return NULL;
    struct sl_api_key *v = NULL;
    size_t n = 0;
    if (svc->store->ops->api_key_list(svc->store, tenant_id, &v, &n, err) < 0)
        return NULL;
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *view = key_view(&v[i]);
        if (view)
            json_array_append_new(items, view);
    }
    sl_api_keys_free(v, n);
    return json_pack("{s:s,s:o}", "tenant_id", tenant_id, "keys", items);
}

json_t *sl_svc_api_key_revoke(struct sl_service *svc, const char *tenant_id, const char *key_id,
                              struct sl_error *err)
{
    if (require_tenancy(svc, err) < 0)
        return NULL;
    /* Exactly a key_id: a database whose collation folds case or ignores
     * trailing spaces (MySQL's) would otherwise revoke a row under a
     * spelling the cache does not know. */
    if (!sl_key_id_valid(key_id)) {
        sl_error_set(err, SL_E_API_KEY_NOT_FOUND, 0, "this tenant has no key with this key_id");
        return NULL;
    }
    if (svc->store->ops->api_key_revoke(svc->store, tenant_id, key_id, sl_now_us(), err) < 0)
        return NULL;
    /* Revoked now or before: either way this worker stops trusting what
     * it cached. */
    sl_key_cache_forget(svc->keys, key_id);
    struct sl_api_key k;
    int found = svc->store->ops->api_key_get(svc->store, key_id, &k, err);
    if (found < 0)
        return NULL;
    if (found == 0 || strcmp(k.tenant_id, tenant_id) != 0) {
        sl_api_key_clear(&k);
        sl_error_set(err, SL_E_API_KEY_NOT_FOUND, 0, "this tenant has no key with this key_id");
        return NULL;
    }
    json_t *doc = key_view(&k);
    sl_api_key_clear(&k);
    if (!doc)
        sl_error_set(err, SL_E_INTERNAL, 0, "could not encode the key");
    return doc;
}

/* ---- a tenant's ---- */

json_t *sl_svc_tenant_self(struct sl_service *svc, const struct sl_principal *who,
                           struct sl_error *err)
{
    if (who->kind != SL_PRINCIPAL_TENANT) {
        sl_error_set(err, SL_E_TENANT_NOT_FOUND, 0,
                     "the internal token is the operator's, not a tenant's: use a tenant's "
                     "API key, or GET /api/v1/admin/tenants");
        return NULL;
    }
    json_t *doc = sl_svc_tenant_get(svc, who->tenant_id, err);
    if (doc)
        json_object_set_new(doc, "key_id", json_string(who->key_id));
    return doc;
}

/* The quota-name of each enforced limit. */
static const char *const limit_names[SL_LIMIT_COUNT] = {
    [SL_LIMIT_SANDBOXES] = "sandboxes",
    [SL_LIMIT_RUNNING_SESSIONS] = "running_sessions",
    [SL_LIMIT_COMMANDS] = "commands_in_flight",
    [SL_LIMIT_WORKSPACE_BYTES] = "workspace_bytes",
    [SL_LIMIT_SANDBOX_MEMORY] = "sandbox_memory_bytes",
    [SL_LIMIT_SANDBOX_PIDS] = "sandbox_pids",
    [SL_LIMIT_SANDBOX_CPU_MILLIS] = "sandbox_cpu_millis",
};

const char *sl_tenant_limit_name(enum sl_tenant_limit limit)
{
    return limit < SL_LIMIT_COUNT ? limit_names[limit] : "?";
}

/* A tenant's enforced limits from its stored quotas (-1: none). */
static int load_quotas(struct sl_service *svc, const char *tenant_id,
                       int64_t quota[SL_LIMIT_COUNT], struct sl_error *err)
{
    for (int i = 0; i < SL_LIMIT_COUNT; i++)
        quota[i] = -1;
    struct sl_tenant t;
    int found = svc->store->ops->tenant_get(svc->store, tenant_id, &t, err);
    if (found < 0)
        return -1;
    _cleanup_json_ json_t *q = quotas_of(found ? t.quotas_json : NULL);
    sl_tenant_clear(&t);
    for (int i = 0; i < SL_LIMIT_COUNT; i++) {
        json_t *v = json_object_get(q, limit_names[i]);
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            quota[i] = json_integer_value(v);
    }
    return 0;
}

void sl_svc_quota_lock(struct sl_service *svc)
{
    pthread_mutex_lock(&svc->quota_lock);
}

void sl_svc_quota_unlock(struct sl_service *svc)
{
    pthread_mutex_unlock(&svc->quota_lock);
}

int sl_svc_tenant_quota_check(struct sl_service *svc, const struct sl_principal *who,
                              enum sl_tenant_limit limit, const char *sandbox_id, int64_t *value,
                              struct sl_error *err)
{
    *value = -1;
    if (who->kind != SL_PRINCIPAL_TENANT || limit >= SL_LIMIT_COUNTED || who->quota[limit] < 0)
        return 0;
    /* A sandbox that already counts adds nothing. */
    if (limit != SL_LIMIT_COMMANDS && sandbox_id) {
        struct sl_route r = {0};
        int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
        if (found < 0)
            return -1;
        bool counts = found && (limit == SL_LIMIT_SANDBOXES
                                    ? strcmp(r.status, "RELEASED") != 0
                                    : strcmp(r.status, "READY") == 0 ||
                                          strcmp(r.status, "RUNNING") == 0);
        sl_route_clear(&r);
        if (counts)
            return 0;
    }
    int64_t used[SL_LIMIT_COUNT];
    if (svc->store->ops->tenant_usage(svc->store, who->tenant_id, &used[SL_LIMIT_SANDBOXES],
                                      &used[SL_LIMIT_RUNNING_SESSIONS], &used[SL_LIMIT_COMMANDS],
                                      err) < 0)
        return -1;
    if (used[limit] < who->quota[limit])
        return 0;
    *value = who->quota[limit];
    sl_error_set(err, SL_E_TENANT_QUOTA_EXCEEDED, 0, "the tenant's quota of %lld %s is used up",
                 (long long)who->quota[limit], limit_names[limit]);
    return sl_error_limit(err, limit_names[limit], who->quota[limit]);
}

int sl_svc_quota_enter(struct sl_service *svc, const struct sl_principal *who,
                       enum sl_tenant_limit limit, const char *sandbox_id, bool *held,
                       int64_t *value, struct sl_error *err)
{
    *held = false;
    *value = -1;
    if (!who || who->kind != SL_PRINCIPAL_TENANT || limit >= SL_LIMIT_COUNTED ||
        who->quota[limit] < 0)
        return 0; /* an unlimited tenant's requests are not serialized for nothing */
    sl_svc_quota_lock(svc);
    if (sl_svc_tenant_quota_check(svc, who, limit, sandbox_id, value, err) < 0) {
        sl_svc_quota_unlock(svc);
        return -1;
    }
    *held = true;
    return 0;
}

void sl_svc_quota_leave(struct sl_service *svc, bool held)
{
    if (held)
        sl_svc_quota_unlock(svc);
}

int sl_svc_key_check(struct sl_service *svc, const char *key_id, const char *secret,
                     bool may_block, struct sl_principal *who, struct sl_error *err)
{
    struct sl_key_facts facts = {0};
    int64_t mono = sl_mono_us();
    uint64_t ticket = 0;
    if (!sl_key_cache_get(svc->keys, key_id, mono, &facts, &ticket)) {
        if (!may_block)
            return SL_KEY_NEEDS_STORE;
        if (svc->store->tenancy) {
            struct sl_api_key k;
            int found = svc->store->ops->api_key_get(svc->store, key_id, &k, err);
            if (found < 0)
                return -1;
            /* A tenant id longer than a tenant may have would be cut here
             * and could then name another tenant's namespace: such a key
             * is no key. */
            facts.exists = found == 1 && sl_tenant_id_valid(k.tenant_id);
            snprintf(facts.tenant_id, sizeof(facts.tenant_id), "%.*s", SL_TENANT_ID_MAX,
                     facts.exists ? k.tenant_id : "");
            snprintf(facts.secret_sha256, sizeof(facts.secret_sha256), "%s", k.secret_sha256);
            facts.expires_at = k.expires_at;
            facts.revoked_at = k.revoked_at;
            sl_api_key_clear(&k);
            if (facts.exists && load_quotas(svc, facts.tenant_id, facts.quota, err) < 0)
                return -1;
        }
        /* Without tenant tables no key exists; said once a TTL all the same,
         * so a key-shaped guess costs no more than any other. */
        sl_key_cache_put(svc->keys, key_id, &facts, mono, ticket);
    }
    if (!sl_key_facts_accept(&facts, secret, sl_now_us()))
        return SL_KEY_REFUSED;
    *who = (struct sl_principal){.kind = SL_PRINCIPAL_TENANT};
    memcpy(who->quota, facts.quota, sizeof(who->quota));
    snprintf(who->tenant_id, sizeof(who->tenant_id), "%s", facts.tenant_id);
    snprintf(who->key_id, sizeof(who->key_id), "%s", key_id);
    return SL_KEY_ACCEPTED;
}

/* ---- a sandbox's tenant and its limits, on the worker that runs it ------ */

int svc_tenant_caps(struct sl_service *svc, const char *sandbox_id, struct sl_rt_caps *caps,
                    struct sl_error *err)
{
    int64_t tq[SL_LIMIT_COUNT];
    if (svc_tenant_limits(svc, sandbox_id, tq, NULL, err) < 0)
        return -1;
    *caps = (struct sl_rt_caps){
        .memory_bytes = tq[SL_LIMIT_SANDBOX_MEMORY] > 0 ? tq[SL_LIMIT_SANDBOX_MEMORY] : 0,
        .pids = tq[SL_LIMIT_SANDBOX_PIDS] > 0 ? tq[SL_LIMIT_SANDBOX_PIDS] : 0,
        .cpus = tq[SL_LIMIT_SANDBOX_CPU_MILLIS] > 0 ? (double)tq[SL_LIMIT_SANDBOX_CPU_MILLIS] / 1000
                                                    : 0,
    };
    return 0;
}

int svc_tenant_limits(struct sl_service *svc, const char *sandbox_id,
                      int64_t quota[SL_LIMIT_COUNT], char tenant_id[33], struct sl_error *err)
{
    for (int i = 0; i < SL_LIMIT_COUNT; i++)
        quota[i] = -1;
    const char *sep = strchr(sandbox_id, SL_TENANT_SEP);
    size_t n = sep ? (size_t)(sep - sandbox_id) : 0;
    if (!sep || n < 1 || n > SL_TENANT_ID_MAX || !svc->store->tenancy)
        return 0;
    char tid[SL_TENANT_ID_MAX + 1];
    memcpy(tid, sandbox_id, n);
    tid[n] = '\0';
    if (tenant_id)
        memcpy(tenant_id, tid, n + 1);
    int64_t now = sl_mono_us();
    pthread_mutex_lock(&svc->limits_lock);
    struct svc_tenant_limits_entry *slot = NULL, *oldest = &svc->limits_cache[0];
    for (size_t i = 0; i < SVC_TENANT_LIMITS_SLOTS && !slot; i++) {
        struct svc_tenant_limits_entry *e = &svc->limits_cache[i];
        if (strcmp(e->tenant_id, tid) == 0)
            slot = e;
        else if (e->at_mono_us < oldest->at_mono_us)
            oldest = e;
    }
    if (slot && now - slot->at_mono_us < SVC_TENANT_LIMITS_TTL_US) {
        memcpy(quota, slot->quota, sizeof(slot->quota));
        pthread_mutex_unlock(&svc->limits_lock);
        return 1;
    }
    pthread_mutex_unlock(&svc->limits_lock);
    /* Looked up without the lock: two threads may both ask the store once. */
    int64_t fresh[SL_LIMIT_COUNT];
    if (load_quotas(svc, tid, fresh, err) < 0)
        return -1;
    pthread_mutex_lock(&svc->limits_lock);
    if (!slot || strcmp(slot->tenant_id, tid) != 0)
        slot = oldest;
    snprintf(slot->tenant_id, sizeof(slot->tenant_id), "%s", tid);
    slot->at_mono_us = now;
    memcpy(slot->quota, fresh, sizeof(fresh));
    pthread_mutex_unlock(&svc->limits_lock);
    memcpy(quota, fresh, sizeof(fresh));
    return 1;
}

int sl_svc_principal_of_sandbox(struct sl_service *svc, const char *sandbox_id,
                                struct sl_principal *p, struct sl_error *err)
{
    if (p->kind != SL_PRINCIPAL_TENANT)
        return 0;
    return svc_tenant_limits(svc, sandbox_id, p->quota, NULL, err) < 0 ? -1 : 0;
}
