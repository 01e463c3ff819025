/* What sandloomd and sandloom-doctor share to start the runtime: where
 * sandloom-init is, and the runtime options a configuration implies. */
#ifndef SL_CMD_LAUNCH_H
#define SL_CMD_LAUNCH_H

#include <stddef.h>

#include "config/config.h"
#include "runtime/runtime.h"

/* sandloom-init is installed next to the running executable. 0 when found
 * and executable, -1 otherwise. */
int launch_find_init(char *out, size_t size);

/* Runtime options from the configuration; pointers borrow from cfg and the
 * two strings, which must outlive the options. */
struct sl_rt_options launch_runtime_options(const struct sl_config *cfg, const char *init_path,
                                            const char *probe_root);

#endif
