/* Private to runtime/: the default seccomp policy of every sandbox process.
 *
 * Built once at sl_rt_open() with libseccomp and kept as a classic BPF
 * program; the pre-exec child installs it (one syscall) right before it execs
 * sandloom-init, so the command and everything it starts run under it. The
 * program is owned by the runtime and read-only after build. */
#ifndef SL_RUNTIME_SECCOMP_H
#define SL_RUNTIME_SECCOMP_H

#include <linux/filter.h>
#include <stddef.h>

#include "common/error.h"

#define SL_SECCOMP_POLICY_NAME "sandloom-default-v2"

struct sl_seccomp_program {
    struct sock_filter *filter;
    unsigned short len;
};

int sl_seccomp_build(struct sl_seccomp_program *out, struct sl_error *err);
void sl_seccomp_free(struct sl_seccomp_program *p);

#endif
