/* What every backend's startup probe shares: a throw-away directory laid
 * out as a sandbox's, and a real launch of a trivial command in it
 * (RUNTIME.md §3.1: a real launch, never a kernel-version guess). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "runtime/internal.h"

#define PROBE_TIMEOUT_MS 15000

int rt_probe_dir_create(const char *probe_root, uid_t uid, char *path, size_t size,
                            struct sl_error *err)
{
    char hex[33];
    if (sl_random_hex(hex, 16) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot draw randomness for the probe");
    snprintf(path, size, "%s/.probe-%s", probe_root, hex);
    if (mkdir(path, 0700) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "cannot create probe directory %s", path);
    static const char *const subdirs[] = {"", "/workspace", "/home", "/cache", "/envs"};
    for (size_t i = 0; i < SL_ARRAY_LEN(subdirs); i++) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s%s", path, subdirs[i]);
        if ((i > 0 && mkdir(sub, 0700) < 0) ||
            fchownat(AT_FDCWD, sub, uid, uid, AT_SYMLINK_NOFOLLOW) < 0) {
            sl_error_errno(err, SL_E_CONFIG, "cannot prepare probe directory %s", sub);
            (void)sl_tree_remove(path);
            return -1;
        }
    }
    return 0;
}

/* The last bytes of stderr, trimmed, as the failure detail. */
static void stderr_tail(const struct sl_buf *b, char *out, size_t size)
{
    size_t start = 0, end = b->len;
    while (end > 0 && isspace((unsigned char)b->data[end - 1]))
        end--;
    if (end > size - 1)
        start = end - (size - 1);
    while (start < end && isspace((unsigned char)b->data[start]))
        start++;
    if (start == end) {
        snprintf(out, size, "probe failed");
        return;
    }
    memcpy(out, b->data + start, end - start);
    out[end - start] = '\0';
}

bool rt_probe_run(struct sl_runtime *rt, unsigned ns, bool session, const char *root, uid_t uid,
                  char *detail, size_t size)
{
    char *argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)"true", NULL};
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", (char *)"HOME=/home/sandbox",
                    (char *)"LANG=C.UTF-8", NULL};
    struct sl_rt_exec_request req = {
        .sandbox_root = root,
        .uid = uid,
        .argv = argv,
        .cwd = "/workspace",
        .envp = envp,
        .timeout_ms = PROBE_TIMEOUT_MS,
        .grace_ms = 1000,
        .max_output_bytes = 8192,
    };
    struct sl_rt_exec_result res;
    struct sl_error e;
    sl_error_clear(&e);
    if (rt_run(rt, ns, session, &req, &res, &e) < 0) {
        snprintf(detail, size, "SandboxRuntimeError: %s", e.message);
        return false;
    }
    bool ok = !res.timed_out && res.exit_code == 0;
    if (res.timed_out)
        snprintf(detail, size, "TimeoutError: the probe did not finish within %d s",
                 PROBE_TIMEOUT_MS / 1000);
    else if (!ok)
        stderr_tail(&res.err, detail, size);
    else
        detail[0] = '\0';
    sl_rt_exec_result_free(&res);
    return ok;
}

