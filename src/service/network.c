/* Egress policies of the private network mode (docs/ARCHITECTURE.md §9e):
 * where they are kept, which one a sandbox gets, and their changes
 * reaching running sandboxes.
 *
 * A sandbox's rules: its own policy (set by its tenant or the operator),
 * else its tenant's (set by the operator), else the worker's default
 * (SANDBOX_EGRESS_*). When it has both, the tenant's bounds its own: what
 * the tenant's denies stays denied (net/privnet.h's layers). Both live in
 * agent_sandbox_egress_policy, so any replica can answer and change them;
 * the owner of a running sandbox applies a change at once, and every
 * maintenance cycle brings each running sandbox's rules up to what the
 * store says (a tenant's policy changed through another replica). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "net/privnet.h"
#include "service/internal.h"
#include "service/tenants.h"

/* How long an exec trusts the rules it read last for its sandbox (a
 * change made through this worker replaces them at once). */
#define EGRESS_CACHE_US (2 * 1000000LL)

void svc_egress_free(struct svc_egress *e)
{
    sl_egress_free(&e->own);
    sl_egress_free(&e->tenant);
    e->has_own = e->has_tenant = false;
}

static int egress_copy(struct svc_egress *dst, const struct svc_egress *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->has_own = src->has_own;
    dst->has_tenant = src->has_tenant;
    dst->tenant_owned = src->tenant_owned;
    if ((src->has_own && sl_egress_copy(&dst->own, &src->own) < 0) ||
        (src->has_tenant && sl_egress_copy(&dst->tenant, &src->tenant) < 0)) {
        svc_egress_free(dst);
        return -1;
    }
    return 0;
}

void svc_egress_rt(struct sl_service *svc, const struct svc_egress *e, struct sl_rt_egress *out)
{
    out->policy = e->has_own ? &e->own : e->has_tenant ? &e->tenant : NULL;
    /* A policy a tenant set itself stays within its tenant's, or, when the
     * operator gave the tenant none, within the worker's default: a tenant
     * never opens what the operator closed. */
    out->bound = !e->has_own      ? NULL
                 : e->has_tenant  ? &e->tenant
                 : e->tenant_owned && svc->privnet ? sl_privnet_default(svc->privnet)
                                                   : NULL;
}

/* The tenant part of a sandbox id ("<tenant>~<name>"), or "" for the
 * operator's sandboxes. */
static void tenant_of(const char *sandbox_id, char *out, size_t size)
{
    const char *sep = strchr(sandbox_id, SL_TENANT_SEP);
    size_t n = sep ? (size_t)(sep - sandbox_id) : 0;
    if (n < 1 || n > SL_TENANT_ID_MAX || n >= size)
        n = 0;
    memcpy(out, sandbox_id, n);
    out[n] = '\0';
}

/* 1 with *out, 0 when the scope has none, -1. */
static int load_one(struct sl_service *svc, const char *scope_key, struct sl_egress_policy *out,
                    struct sl_error *err)
{
    _cleanup_free_ char *text = NULL;
    int r = svc->store->ops->egress_get(svc->store, scope_key, &text, err);
    if (r <= 0)
        return r;
    json_error_t jerr;
    _cleanup_json_ json_t *doc = json_loads(text, 0, &jerr);
    struct sl_error perr = {0};
    if (!doc || sl_egress_parse(doc, out, &perr) < 0)
        return sl_error_set(err, SL_E_STORE, EINVAL,
                            "the stored egress policy of %s cannot be read: %s", scope_key,
                            doc ? perr.message : jerr.text);
    return 1;
}

int svc_egress_load(struct sl_service *svc, const char *sandbox_id, struct svc_egress *out,
                    struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    char key[SL_EGRESS_DOMAIN_MAX + 16], tid[SL_TENANT_ID_MAX + 1];
    tenant_of(sandbox_id, tid, sizeof(tid));
    out->tenant_owned = tid[0] != '\0';
    if (!svc->store->egress_policies)
        return 0;
    snprintf(key, sizeof(key), "sandbox:%s", sandbox_id);
    int r = load_one(svc, key, &out->own, err);
    if (r < 0)
        return -1;
    out->has_own = r == 1;
    if (tid[0]) {
        snprintf(key, sizeof(key), "tenant:%s", tid);
        r = load_one(svc, key, &out->tenant, err);
        if (r < 0) {
            svc_egress_free(out);
            return -1;
        }
        out->has_tenant = r == 1;
    }
    return 0;
}

/* The live entry's copy, replaced (under live_lock). */
static void live_egress_put(struct sl_service *svc, const char *sandbox_id,
                            const struct svc_egress *e)
{
    struct svc_egress copy;
    if (egress_copy(&copy, e) < 0)
        return;
    pthread_mutex_lock(&svc->live_lock);
    for (size_t i = 0; i < svc->live_n; i++) {
        struct sl_live *l = &svc->live[i];
        if (strcmp(l->sandbox_id, sandbox_id) != 0)
            continue;
        if (!l->egress)
            l->egress = calloc(1, sizeof(*l->egress));
        if (l->egress) {
            svc_egress_free(l->egress);
            *l->egress = copy;
            memset(&copy, 0, sizeof(copy));
            l->egress_at_us = sl_mono_us();
        }
        break;
    }
    pthread_mutex_unlock(&svc->live_lock);
    svc_egress_free(&copy);
}

int svc_egress_for_exec(struct sl_service *svc, const char *sandbox_id, struct svc_egress *out,
                        struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    if (!svc->privnet)
        return 0;
    int64_t now = sl_mono_us();
    bool fresh = false;
    pthread_mutex_lock(&svc->live_lock);
    for (size_t i = 0; i < svc->live_n; i++) {
        struct sl_live *l = &svc->live[i];
        if (strcmp(l->sandbox_id, sandbox_id) == 0 && l->egress &&
            now - l->egress_at_us < EGRESS_CACHE_US) {
            fresh = egress_copy(out, l->egress) == 0;
            break;
        }
    }
    pthread_mutex_unlock(&svc->live_lock);
    if (fresh)
        return 0;
    if (svc_egress_load(svc, sandbox_id, out, err) < 0)
        return -1;
    live_egress_put(svc, sandbox_id, out);
    return 0;
}

/* Bring the running network of sandbox_id (if any) to `e`. -1 when it
 * had to be cut off. */
static int apply(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                 const struct svc_egress *e, struct sl_error *err)
{
    /* A session prepared ahead (service/warm.c) whose sandbox has run
     * nothing yet: its first command writes the rules the store says then,
     * as a new session's start would, and fails the same way. */
    if (sl_rt_session_egress_pending(svc->runtime, uid))
        return 0;
    struct sl_rt_egress rules;
    svc_egress_rt(svc, e, &rules);
    if (sl_privnet_set_policy(svc->privnet, uid, rules.policy, rules.bound, err) == 0)
        return 0;
    sl_warn("sandbox %s: its network is cut off: %s", sandbox_id, sl_error_text(err));
    char why[sizeof(err->message)];
    snprintf(why, sizeof(why), "%s", err->message);
    return sl_error_set(err, SL_E_EGRESS_NOT_INSTALLED, 0,
                        "the new egress policy could not be installed, so the sandbox's network "
                        "is cut off until its next session: %s",
                        why);
}

static int need_private(struct sl_service *svc, struct sl_error *err);

/* Write a scope's policy in its canonical form, or remove it (NULL). */
static int store_policy(struct sl_service *svc, const char *key,
                        const struct sl_egress_policy *policy, const char *actor,
                        struct sl_error *err)
{
    if (!policy)
        return svc->store->ops->egress_delete(svc->store, key, err) < 0 ? -1 : 0;
    _cleanup_json_ json_t *doc = sl_egress_to_json(policy);
    _cleanup_free_ char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    return svc->store->ops->egress_put(svc->store, key, text, actor, sl_now_us(), err);
}

/* The live sandboxes (not being destroyed) whose ids start with `prefix`
 * ("" for all): ids (strdup'd) and uids, for work done outside
 * live_lock. Free with live_free. */
struct live_list {
    char **ids;
    uid_t *uids;
    size_t n;
};

static void live_collect(struct sl_service *svc, const char *prefix, struct live_list *out)
{
    size_t plen = strlen(prefix);
    pthread_mutex_lock(&svc->live_lock);
    out->ids = calloc(svc->live_n + 1, sizeof(*out->ids));
    out->uids = calloc(svc->live_n + 1, sizeof(*out->uids));
    out->n = 0;
    for (size_t i = 0; out->ids && out->uids && i < svc->live_n; i++) {
        const struct sl_live *l = &svc->live[i];
        if (!l->destroying && strncmp(l->sandbox_id, prefix, plen) == 0 &&
            (out->ids[out->n] = strdup(l->sandbox_id)))
            out->uids[out->n++] = l->uid;
    }
    pthread_mutex_unlock(&svc->live_lock);
}

static void live_free(struct live_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->ids[i]);
    free(l->ids);
    free(l->uids);
}

static int apply(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                 const struct svc_egress *e, struct sl_error *err);

/* A running sandbox's rules brought to what the store says now (a no-op
 * when unchanged); a failure is logged by apply. */
static void refresh(struct sl_service *svc, const char *sandbox_id, uid_t uid)
{
    struct svc_egress e;
    struct sl_error err = {0};
    if (svc_egress_load(svc, sandbox_id, &e, &err) < 0)
        return;
    live_egress_put(svc, sandbox_id, &e);
    (void)apply(svc, sandbox_id, uid, &e, &err);
    svc_egress_free(&e);
}

void svc_egress_forget(struct sl_service *svc, const char *sandbox_id)
{
    if (!svc->store->egress_policies)
        return;
    char key[SL_EGRESS_DOMAIN_MAX + 16];
    snprintf(key, sizeof(key), "sandbox:%s", sandbox_id);
    struct sl_error err = {0};
    if (store_policy(svc, key, NULL, NULL, &err) < 0)
        sl_warn("sandbox %s: its egress policy stays stored: %s", sandbox_id,
                sl_error_text(&err));
}

int sl_svc_egress_supported(struct sl_service *svc, struct sl_error *err)
{
    return need_private(svc, err);
}

/* ---- the view ---------------------------------------------------------------- */

static json_t *network_view(struct sl_service *svc, const char *sandbox_id, uid_t uid,
                            const struct svc_egress *e)
{
    const struct sl_egress_policy *eff = e->has_own      ? &e->own
                                         : e->has_tenant ? &e->tenant
                                                         : sl_privnet_default(svc->privnet);
    json_t *doc = json_pack("{s:s,s:s,s:o,s:s,s:o}", "sandbox_id", sandbox_id, "network_mode",
                            svc->cfg->network_mode, "egress", sl_egress_to_json(eff),
                            "egress_source",
                            e->has_own ? "sandbox" : e->has_tenant ? "tenant" : "worker",
                            "tenant_bound", json_null());
    struct sl_rt_egress rules;
    svc_egress_rt(svc, e, &rules);
    if (rules.bound)
        json_object_set_new(doc, "tenant_bound", sl_egress_to_json(rules.bound));
    struct sl_privnet_status st;
    bool have = uid && sl_privnet_status(svc->privnet, uid, &st);
    /* connected: a session with its link and rules; cut_off: its rules
     * could not be installed, so it has no network (error says why);
     * no_session: nothing runs, the rules apply from the next command. */
    json_object_set_new(doc, "state",
                        json_string(!have ? "no_session" : st.attached ? "connected" : "cut_off"));
    json_object_set_new(doc, "address", have && st.address[0] ? json_string(st.address)
                                                              : json_null());
    json_object_set_new(doc, "error", have && st.error[0] ? json_string(st.error) : json_null());
    json_object_set_new(doc, "denied_connections",
                        json_integer(have ? (json_int_t)st.denied_packets : 0));
    json_object_set_new(doc, "refused_names", json_integer(have ? (json_int_t)st.refused_names : 0));
    return doc;
}

/* This worker's sandbox, or a refusal (forwarded when a live peer has it). */
static int local_sandbox(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         uid_t *uid, struct sl_error *err)
{
    *uid = 0;
    struct sl_route r = {0};
    int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
    if (found <= 0) {
        if (found == 0)
            sl_error_set(err, SL_E_SANDBOX_NOT_FOUND, 0, "SANDBOX_NOT_FOUND");
        return -1;
    }
    int rc = 0;
    if (generation && r.generation != generation)
        rc = sl_error_set(err, SL_E_STALE_GENERATION, 0, "STALE_SANDBOX_GENERATION");
    else if (r.worker_id && strcmp(r.worker_id, svc->worker_id) != 0)
        rc = svc_require_local_owner(svc, &r, err); /* a peer's: forwarded */
    if (rc == 0)
        *uid = (uid_t)r.sandbox_uid;
    sl_route_clear(&r);
    return rc;
}

static int need_private(struct sl_service *svc, struct sl_error *err)
{
    if (svc->privnet && svc->store->egress_policies)
        return 0;
    if (!svc->privnet)
        return sl_error_set(err, SL_E_EGRESS_UNSUPPORTED, 0,
                            "this worker runs SANDBOX_NETWORK_MODE=%s: egress policies apply in "
                            "the private mode only",
                            svc->cfg->network_mode);
    return sl_error_set(err, SL_E_EGRESS_UNSUPPORTED, 0,
                        "this database has no agent_sandbox_egress_policy table: apply the "
                        "deploy SQL (deploy/sql/) or enable SANDBOX_DATABASE_AUTO_DDL");
}

json_t *sl_svc_network_get(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    uid_t uid;
    if (local_sandbox(svc, sandbox_id, 0, &uid, err) < 0 || need_private(svc, err) < 0)
        return NULL;
    struct svc_egress e;
    if (svc_egress_load(svc, sandbox_id, &e, err) < 0)
        return NULL;
    json_t *doc = network_view(svc, sandbox_id, uid, &e);
    svc_egress_free(&e);
    return doc;
}

json_t *sl_svc_network_set(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           const struct sl_egress_policy *policy, const char *actor,
                           struct sl_error *err)
{
    uid_t uid;
    if (local_sandbox(svc, sandbox_id, generation, &uid, err) < 0 || need_private(svc, err) < 0)
        return NULL;
    char key[SL_EGRESS_DOMAIN_MAX + 16];
    snprintf(key, sizeof(key), "sandbox:%s", sandbox_id);
    if (store_policy(svc, key, policy, actor, err) < 0)
        return NULL;
    struct svc_egress e;
    if (svc_egress_load(svc, sandbox_id, &e, err) < 0)
        return NULL;
    live_egress_put(svc, sandbox_id, &e);
    json_t *doc = NULL;
    if (apply(svc, sandbox_id, uid, &e, err) == 0)
        doc = network_view(svc, sandbox_id, uid, &e);
    svc_egress_free(&e);
    return doc;
}

/* ---- tenants ------------------------------------------------------------------ */

static json_t *tenant_egress_view(const char *tenant_id, const struct sl_egress_policy *p)
{
    return json_pack("{s:s,s:o}", "tenant_id", tenant_id,
                     "egress", p ? sl_egress_to_json(p) : json_null());
}

json_t *sl_svc_tenant_egress_get(struct sl_service *svc, const char *tenant_id,
                                 struct sl_error *err)
{
    if (need_private(svc, err) < 0 || svc_tenant_exists(svc, tenant_id, err) < 0)
        return NULL;
    char key[SL_TENANT_ID_MAX + 16];
    snprintf(key, sizeof(key), "tenant:%s", tenant_id);
    struct sl_egress_policy p;
    int r = load_one(svc, key, &p, err);
    if (r < 0)
        return NULL;
    json_t *doc = tenant_egress_view(tenant_id, r ? &p : NULL);
    if (r)
        sl_egress_free(&p);
    return doc;
}

/* Each of the tenant's sandboxes running here gets its new rules now. */
static void apply_tenant(struct sl_service *svc, const char *tenant_id)
{
    char prefix[SL_TENANT_ID_MAX + 2];
    snprintf(prefix, sizeof(prefix), "%s%c", tenant_id, SL_TENANT_SEP);
    struct live_list l;
    live_collect(svc, prefix, &l);
    for (size_t i = 0; i < l.n; i++)
        refresh(svc, l.ids[i], l.uids[i]);
    live_free(&l);
}

json_t *sl_svc_tenant_egress_set(struct sl_service *svc, const char *tenant_id,
                                 const struct sl_egress_policy *policy, const char *actor,
                                 struct sl_error *err)
{
    if (need_private(svc, err) < 0 || svc_tenant_exists(svc, tenant_id, err) < 0)
        return NULL;
    char key[SL_TENANT_ID_MAX + 16];
    snprintf(key, sizeof(key), "tenant:%s", tenant_id);
    if (store_policy(svc, key, policy, actor, err) < 0)
        return NULL;
    apply_tenant(svc, tenant_id);
    return tenant_egress_view(tenant_id, policy);
}

/* ---- the maintenance cycle --------------------------------------------------- */

void svc_egress_log_denied(struct sl_service *svc, const char *sandbox_id,
                           const struct sl_privnet_status *st);

/* One line per cycle for a sandbox whose policy denied something since
 * the last: so an agent's "connection timed out" can be told from a site
 * that is down, without a line per packet. */
void svc_egress_log_denied(struct sl_service *svc, const char *sandbox_id,
                           const struct sl_privnet_status *st)
{
    uint64_t denied = 0, refused = 0;
    pthread_mutex_lock(&svc->live_lock);
    for (size_t i = 0; i < svc->live_n; i++) {
        struct sl_live *l = &svc->live[i];
        if (strcmp(l->sandbox_id, sandbox_id) != 0)
            continue;
        /* A new network counts from zero again. */
        if (st->denied_packets < l->denied_logged || st->refused_names < l->refused_logged)
            l->denied_logged = l->refused_logged = 0;
        denied = st->denied_packets - l->denied_logged;
        refused = st->refused_names - l->refused_logged;
        l->denied_logged = st->denied_packets;
        l->refused_logged = st->refused_names;
        break;
    }
    pthread_mutex_unlock(&svc->live_lock);
    if (denied || refused)
        sl_info("sandbox %s: egress policy denied %llu packets and refused %llu names since the "
                "last report",
                sandbox_id, (unsigned long long)denied, (unsigned long long)refused);
}

void svc_egress_cycle(struct sl_service *svc)
{
    struct sl_error cerr = {0};
    if (svc->privnet && sl_privnet_check(svc->privnet, &cerr) < 0)
        sl_errorlog("%s", sl_error_text(&cerr));
    if (!svc->privnet || !svc->store->egress_policies)
        return;
    struct live_list l;
    live_collect(svc, "", &l);
    for (size_t i = 0; i < l.n; i++) {
        /* Only a sandbox with a network now; the others read their rules
         * when their next session starts. */
        struct sl_privnet_status st;
        if (sl_privnet_status(svc->privnet, l.uids[i], &st) && st.attached)
            refresh(svc, l.ids[i], l.uids[i]);
        if (st.denied_packets || st.refused_names)
            svc_egress_log_denied(svc, l.ids[i], &st);
    }
    live_free(&l);
}
