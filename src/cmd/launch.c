#include "cmd/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int launch_find_init(char *out, size_t size)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    /* Beside the binary (the build directory), else where `make install`
     * puts it: <prefix>/libexec/sandloom beside <prefix>/bin. */
    static const char *const places[] = {"/sandloom-init", "/../libexec/sandloom/sandloom-init"};
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
        int len = snprintf(out, size, "%s%s", self, places[i]);
        if (len < 0 || (size_t)len >= size)
            return -1;
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

struct sl_rt_options launch_runtime_options(const struct sl_config *cfg, const char *init_path,
                                            const char *probe_root)
{
    return (struct sl_rt_options){
        .backend = cfg->execution_backend,
        .gvisor_runsc = cfg->gvisor_runsc,
        .gvisor_platform = cfg->gvisor_platform,
        .init_path = init_path,
        .readonly_mounts = &cfg->readonly_mounts,
        /* Debian's python3 serves /opt/agent-sandbox/python-runtime. */
        .python_prefix = "/usr",
        .tmpfs_bytes = cfg->tmpfs_bytes,
        .cpu_seconds = cfg->cpu_seconds,
        .max_processes = cfg->max_processes,
        .max_open_files = cfg->max_open_files,
        .max_file_size_bytes = cfg->max_file_size_bytes,
        .network_isolated = strcmp(cfg->network_mode, "isolated") == 0,
        .requested_level = cfg->isolation_level,
        .probe_root = probe_root,
        .probe_uid = (uid_t)cfg->uid_start,
        .required_features = &cfg->isolation_required_features,
        .optional_features = &cfg->isolation_optional_features,
        .warm_sessions = cfg->session_idle_seconds > 0,
        .favor_dynmods = strcmp(cfg->cgroup_favor_dynmods, "on") == 0,
        .memory_limit_bytes = cfg->memory_limit_bytes,
        .pids_limit = cfg->pids_limit,
        .cpu_limit = cfg->cpu_limit,
    };
}

/* Rules of one configuration list into `rules` (allocated). */
static int config_rules(const struct sl_strlist *list, const char *name,
                        struct sl_egress_rule **rules, size_t *n, struct sl_error *err)
{
    *rules = NULL;
    *n = 0;
    if (list->len == 0)
        return 0;
    if (list->len > SL_EGRESS_MAX_RULES)
        return sl_error_set(err, SL_E_CONFIG, E2BIG, "%s: at most %d rules", name,
                            SL_EGRESS_MAX_RULES);
    *rules = calloc(list->len, sizeof(**rules));
    if (!*rules)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < list->len; i++) {
        /* The reference's lists may name IPv6 networks (the configuration
         * checked them); the private network routes no IPv6, so such a
         * rule can neither allow nor deny anything: skipped. */
        if (strchr(list->items[i], ':') && strchr(list->items[i], ':') != strrchr(list->items[i], ':'))
            continue;
        if (sl_egress_rule_parse(list->items[i], name, &(*rules)[k], err) < 0) {
            err->code = SL_E_CONFIG;
            free(*rules);
            *rules = NULL;
            return -1;
        }
        k++;
    }
    *n = k;
    return 0;
}

int launch_egress_default(const struct sl_config *cfg, struct sl_egress_policy *out,
                          struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    out->dflt = strcmp(cfg->egress_default, "deny") == 0 ? SL_EGRESS_DENY : SL_EGRESS_ALLOW;
    struct sl_egress_rule *literals = NULL, *domains = NULL;
    size_t n_literals = 0, n_domains = 0;
    if (config_rules(&cfg->egress_denied_addresses, "SANDBOX_EGRESS_DENIED_ADDRESSES",
                     &out->deny, &out->n_deny, err) < 0 ||
        config_rules(&cfg->egress_allowed_literals, "SANDBOX_EGRESS_ALLOWED_LITERALS", &literals,
                     &n_literals, err) < 0 ||
        config_rules(&cfg->egress_allowed_domains, "SANDBOX_EGRESS_ALLOWED_DOMAINS", &domains,
                     &n_domains, err) < 0)
        goto fail;
    for (size_t i = 0; i < n_domains; i++)
        if (!domains[i].is_domain) {
            sl_error_set(err, SL_E_CONFIG, EINVAL,
                         "SANDBOX_EGRESS_ALLOWED_DOMAINS: '%s' is not a domain name (addresses "
                         "go in SANDBOX_EGRESS_ALLOWED_LITERALS)",
                         cfg->egress_allowed_domains.items[i]);
            goto fail;
        }
    if (n_literals + n_domains > SL_EGRESS_MAX_RULES) {
        sl_error_set(err, SL_E_CONFIG, E2BIG,
                     "SANDBOX_EGRESS_ALLOWED_LITERALS and SANDBOX_EGRESS_ALLOWED_DOMAINS: at "
                     "most %d rules together",
                     SL_EGRESS_MAX_RULES);
        goto fail;
    }
    out->n_allow = n_literals + n_domains;
    if (out->n_allow) {
        out->allow = calloc(out->n_allow, sizeof(*out->allow));
        if (!out->allow) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            goto fail;
        }
        if (n_literals)
            memcpy(out->allow, literals, n_literals * sizeof(*literals));
        if (n_domains)
            memcpy(out->allow + n_literals, domains, n_domains * sizeof(*domains));
    }
    free(literals);
    free(domains);
    return 0;
fail:
    free(literals);
    free(domains);
    sl_egress_free(out);
    return -1;
}

/* The resolv.conf of the worker's sandboxes: the resolver only. */
static int write_resolv_conf(const struct sl_privnet *net, char *path, size_t size,
                             struct sl_error *err)
{
    if (mkdir("/run/sandloom", 0755) < 0 && errno != EEXIST)
        return sl_error_errno(err, SL_E_CONFIG, "cannot make /run/sandloom");
    char gw[INET_ADDRSTRLEN];
    uint32_t a = sl_privnet_gateway(net);
    inet_ntop(AF_INET, &a, gw, sizeof(gw));
    snprintf(path, size, "/run/sandloom/resolv-%s.conf", gw);
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f)
        return sl_error_errno(err, SL_E_CONFIG, "cannot write %s", tmp);
    fprintf(f, "# Sandloom private network: the worker's resolver\nnameserver %s\n", gw);
    if (fclose(f) != 0 || chmod(tmp, 0644) < 0 || rename(tmp, path) < 0) {
        unlink(tmp);
        return sl_error_errno(err, SL_E_CONFIG, "cannot write %s", path);
    }
    return 0;
}

int launch_private_open(const struct sl_config *cfg, struct launch_private *lp,
                        struct sl_error *err)
{
    memset(lp, 0, sizeof(*lp));
    struct sl_egress_policy dflt;
    if (launch_egress_default(cfg, &dflt, err) < 0)
        return -1;
    struct sl_resolver_upstream up[4];
    size_t n_up = 0;
    const char *const *texts = (const char *const *)cfg->dns_servers.items;
    const struct sl_privnet_options opt = {.cidr = cfg->private_network_cidr, .dflt = &dflt};
    int rc = -1;
    if (sl_resolver_upstreams(texts, cfg->dns_servers.len, up, 4, &n_up, err) < 0 ||
        sl_privnet_open(&opt, &lp->net, err) < 0)
        goto out;
    if (write_resolv_conf(lp->net, lp->resolv_conf, sizeof(lp->resolv_conf), err) < 0 ||
        sl_resolver_start(lp->net, up, n_up, &lp->resolver, err) < 0) {
        launch_private_close(lp);
        goto out;
    }
    rc = 0;
out:
    sl_egress_free(&dflt);
    return rc;
}

void launch_private_close(struct launch_private *lp)
{
    sl_resolver_stop(lp->resolver);
    sl_privnet_close(lp->net);
    if (lp->resolv_conf[0])
        unlink(lp->resolv_conf);
    memset(lp, 0, sizeof(*lp));
}
