/* The managed environment of a sandbox process (spec RUNTIME.md §5–§7.4,
 * API.md §4.5): toolchain variables, PATH, proxies, the caller's variables
 * with the reserved-name rules, and the login-shell .profile fix.
 *
 * Pure except sl_env_write_profile(), which writes one file. The built
 * environment is owned by the caller (sl_env_free). */
#ifndef SL_RUNTIME_ENV_H
#define SL_RUNTIME_ENV_H

#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

struct sl_config;

struct sl_env {
    char **vars;   /* "KEY=VALUE", NULL-terminated, in the spec's order */
    size_t len;
    char *path;    /* the managed PATH value */
};

/* Whether `name` is a variable the sandbox manages and its managed value
 * is `value`: giving it changes nothing (E2B's SDKs send LANG=C.UTF-8). */
bool sl_env_is_managed_as(const struct sl_config *cfg, const char *name, const char *value);

/* Check SANDBOX_TOOLCHAINS for conflicts (two toolchains setting one
 * variable to different values => -1, SANDBOX_CONFIG_INVALID). */
int sl_env_validate_config(const struct sl_config *cfg, struct sl_error *err);

/* Build the environment for one execution. `caller_keys`/`caller_values`
 * (n entries) are the request's env; `proxy_index` picks the round-robin
 * proxy when SANDBOX_HTTP_PROXIES is set. A reserved or malformed caller
 * name fails with code SANDBOX_INVALID_ARGUMENT and the exact message
 * "this environment variable is sandbox-managed and cannot be overridden: <name>"
 * or "invalid environment variable name: '<name>'" (the caller prefixes
 * "ValueError: " when it records the execution). */
int sl_env_build(const struct sl_config *cfg, const char *const *caller_keys,
                 const char *const *caller_values, size_t n, unsigned proxy_index,
                 struct sl_env *out, struct sl_error *err);
void sl_env_free(struct sl_env *env);

/* The managed PATH alone (same value sl_env_build puts in PATH). Caller frees. */
char *sl_env_managed_path(const struct sl_config *cfg);

/* Write <sandbox_root>/home/.profile per RUNTIME.md §7.4 (unless a user-owned
 * .profile without the marker exists), owned by uid, mode 0644, atomically. */
int sl_env_write_profile(int sandbox_root_fd, uid_t uid, const char *managed_path,
                         struct sl_error *err);

#endif
