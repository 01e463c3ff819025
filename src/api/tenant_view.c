/* A tenant's names in and out of its namespace (api/tenant_view.h). */
#include <stdio.h>
#include <string.h>

#include "api/tenant_view.h"
#include "service/principal.h"

bool sl_tenant_namespaced(const char *tenant_id, const char *name, size_t max, char *out,
                          size_t outsz)
{
    int n = snprintf(out, outsz, "%s%c%s", tenant_id, SL_TENANT_SEP, name);
    return n > 0 && (size_t)n <= max && (size_t)n < outsz;
}

bool sl_tenant_view_mentions(const char *tenant_id, const char *text, size_t len)
{
    char prefix[SL_TENANT_ID_MAX + 3];
    int plen = snprintf(prefix, sizeof(prefix), "\"%s%c", tenant_id, SL_TENANT_SEP);
    return plen > 0 && text && memmem(text, len, prefix, (size_t)plen);
}

static void strip_fields(json_t *obj, const char *prefix, size_t plen)
{
    static const char *const fields[] = {"sandbox_id", "workspace_scope_id", "source_sandbox_id"};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        json_t *v = json_object_get(obj, fields[i]);
        const char *text = json_string_value(v);
        if (text && strncmp(text, prefix, plen) == 0)
            json_string_set(v, text + plen);
    }
}

static void strip_namespace(json_t *j, const char *prefix, size_t plen, int depth)
{
    if (depth > 3)
        return;
    if (json_is_array(j)) {
        size_t i;
        json_t *item;
        json_array_foreach(j, i, item)
            strip_namespace(item, prefix, plen, depth + 1);
        return;
    }
    if (!json_is_object(j))
        return;
    strip_fields(j, prefix, plen);
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        /* Records are objects and lists of them; a command's argv, env
         * and output are strings or lists of strings, never walked into. */
        bool data = strcmp(key, "env") == 0 || strcmp(key, "labels") == 0 ||
                    strcmp(key, "command") == 0;
        if (!data &&
            (json_is_object(v) || (json_is_array(v) && json_is_object(json_array_get(v, 0)))))
            strip_namespace(v, prefix, plen, depth + 1);
    }
}


void sl_tenant_view_strip(json_t *doc, const char *tenant_id)
{
    char prefix[SL_TENANT_ID_MAX + 2];
    int plen = snprintf(prefix, sizeof(prefix), "%s%c", tenant_id, SL_TENANT_SEP);
    if (plen > 0)
        strip_namespace(doc, prefix, (size_t)plen, 0);
}
