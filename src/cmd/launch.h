/* What sandloomd and sandloom-doctor share to start the runtime: where
 * sandloom-init is, and the runtime options a configuration implies. */
#ifndef SL_CMD_LAUNCH_H
#define SL_CMD_LAUNCH_H

#include <stddef.h>

#include "config/config.h"
#include "net/egress.h"
#include "net/privnet.h"
#include "net/resolver.h"
#include "runtime/runtime.h"

/* sandloom-init is installed next to the running executable. 0 when found
 * and executable, -1 otherwise. */
int launch_find_init(char *out, size_t size);

/* Runtime options from the configuration; pointers borrow from cfg and the
 * two strings, which must outlive the options. */
struct sl_rt_options launch_runtime_options(const struct sl_config *cfg, const char *init_path,
                                            const char *probe_root);

/* The private network mode's parts: the worker's network, its resolver and
 * the resolv.conf sandboxes see. Closed in reverse by
 * launch_private_close, after the runtime. */
struct launch_private {
    struct sl_privnet *net;
    struct sl_resolver *resolver;
    char resolv_conf[128];
};
/* The worker's default egress policy from SANDBOX_EGRESS_* (the caller
 * frees it with sl_egress_free). */
int launch_egress_default(const struct sl_config *cfg, struct sl_egress_policy *out,
                          struct sl_error *err);
int launch_private_open(const struct sl_config *cfg, struct launch_private *lp,
                        struct sl_error *err);
void launch_private_close(struct launch_private *lp);

#endif
