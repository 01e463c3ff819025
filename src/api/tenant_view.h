/* What a tenant's request and answer look like from its side: its names go
 * into its namespace ("<tenant_id>~<name>", service/principal.h) on the
 * way in, and come out of it on the way back, so a tenant only ever sees
 * and names its own. Shared by the REST layer (api/http.c) and the MCP
 * tools (api/mcp_tools.c), which must agree exactly. */
#ifndef SL_API_TENANT_VIEW_H
#define SL_API_TENANT_VIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* "<tenant_id>~<name>" into out (of outsz bytes). False when the whole
 * would be longer than `max` characters (the column's 128 for a sandbox
 * id, 191 for a scope) or does not fit out: such a name names nothing of
 * the tenant's. The caller has checked the name's alphabet. */
bool sl_tenant_namespaced(const char *tenant_id, const char *name, size_t max, char *out,
                          size_t outsz);

/* Whether a JSON text may name one of the tenant's sandboxes: a cheap look
 * for the quoted prefix, so most answers (a command's output) are never
 * parsed. */
bool sl_tenant_view_mentions(const char *tenant_id, const char *text, size_t len);

/* The tenant's names in `doc` lose the namespace: the "sandbox_id",
 * "workspace_scope_id" and "source_sandbox_id" strings that start with
 * "<tenant_id>~", at the top level and in the records an answer lists, up
 * to three levels down (an audit's executions.recent[]). Values under
 * other keys (a command's argv, env, output) are the tenant's own data and
 * are never looked at. */
void sl_tenant_view_strip(json_t *doc, const char *tenant_id);

#endif
