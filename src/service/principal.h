/* Who a request acts as, decided once from its credential (api/http.c)
 * before anything else is read, and carried to every handler.
 *
 * The operator holds the internal token (SANDBOX_INTERNAL_TOKEN) and may do
 * everything, as every caller could before tenants existed. A tenant holds
 * one of its API keys (service/tenants.h): its identity comes from the key,
 * never from a request field. Routes say which principals they take
 * (struct sl_route_def.tenant); a tenant key on any other route is refused
 * before its handler runs. */
#ifndef SL_SERVICE_PRINCIPAL_H
#define SL_SERVICE_PRINCIPAL_H

#include <stdbool.h>
#include <stdio.h>

/* tenant_id: 1-32 characters of [a-z0-9-] (service/tenants.h): short, since
 * a tenant's sandbox ids are stored as "<tenant_id>~<name>" in the
 * reference's 128-character column. */
#define SL_TENANT_ID_MAX 32
/* A tenant's names (sandbox ids, scopes) are stored under this separator,
 * which no id of the API's alphabet holds, so no name can reach another
 * tenant's, nor an operator's. */
#define SL_TENANT_SEP '~'
/* The longest sandbox id a tenant may name is what its namespace leaves of
 * 128 characters: 95 for a tenant_id of 32. */
#define SL_TENANT_NAME_MAX 127
/* key_id: "sl" and 12 lowercase hex digits (service/api_keys.h). */
#define SL_KEY_ID_MAX 16

/* A tenant's limits (its quotas of those names, service/tenants.h). The
 * first three are counts a request adds to (checked at admission, under
 * the quota lock); workspace_bytes is its sandboxes' disk use as this
 * worker counts it; the last three are ceilings on what one sandbox of
 * the tenant gets (its cgroup limits are the worker's, lowered to them). */
enum sl_tenant_limit {
    SL_LIMIT_SANDBOXES,         /* routes that exist (not RELEASED) */
    SL_LIMIT_RUNNING_SESSIONS,  /* sandboxes live on a worker (READY, RUNNING) */
    SL_LIMIT_COMMANDS,          /* executions RUNNING */
    SL_LIMIT_COUNTED = SL_LIMIT_COMMANDS + 1,
    SL_LIMIT_WORKSPACE_BYTES = SL_LIMIT_COUNTED, /* bytes under its sandboxes' roots */
    SL_LIMIT_SANDBOX_MEMORY,    /* bytes of memory per sandbox */
    SL_LIMIT_SANDBOX_PIDS,      /* processes per sandbox */
    SL_LIMIT_SANDBOX_CPU_MILLIS, /* CPU per sandbox, in thousandths of a CPU */
    SL_LIMIT_COUNT
};

enum sl_principal_kind {
    SL_PRINCIPAL_NONE,     /* no credential checked (public routes) */
    SL_PRINCIPAL_OPERATOR, /* the internal token */
    SL_PRINCIPAL_TENANT,   /* a tenant's API key */
};

struct sl_principal {
    enum sl_principal_kind kind;
    char tenant_id[SL_TENANT_ID_MAX + 1]; /* SL_PRINCIPAL_TENANT only */
    char key_id[SL_KEY_ID_MAX + 1];       /* SL_PRINCIPAL_TENANT only */
    /* The tenant's limits as its key's check found them (-1: none), at
     * most a key cache TTL old. */
    int64_t quota[SL_LIMIT_COUNT];
};

static inline bool sl_principal_is_operator(const struct sl_principal *p)
{
    return p && p->kind == SL_PRINCIPAL_OPERATOR;
}

/* The actor the route history records for a tenant's request (FLEET.md's
 * generation_created_by / released_by): the key that made it, with its
 * tenant, e.g. "tenant:acme/key:sl0123456789ab". NULL for every other
 * principal, whose actor stays the reference's "workspace:<scope>". */
#define SL_PRINCIPAL_ACTOR_MAX (sizeof("tenant:/key:") + SL_TENANT_ID_MAX + SL_KEY_ID_MAX)

static inline const char *sl_principal_actor(const struct sl_principal *p,
                                             char buf[SL_PRINCIPAL_ACTOR_MAX])
{
    if (!p || p->kind != SL_PRINCIPAL_TENANT)
        return NULL;
    snprintf(buf, SL_PRINCIPAL_ACTOR_MAX, "tenant:%s/key:%s", p->tenant_id, p->key_id);
    return buf;
}

#endif
