/* Toolchain launch checks (spec RUNTIME.md §8.2): at startup, each enabled
 * toolchain is launched through the real runtime, in a disposable sandbox,
 * with the managed environment, so /healthz says what actually runs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "runtime/env.h"
#include "service/internal.h"
#include "workspace/files.h"

#define CHECK_TIMEOUT_MS 10000
#define DETAIL_MAX 1000
#define MISSING_MARKER "sandbox-tool-missing:"

struct toolchain_check {
    const char *name;
    const char *binaries[3];
    const char *launch;
};

static const struct toolchain_check CHECKS[] = {
    {"python", {"python3"}, "python3 -c 'print(42)'"},
    {"node", {"node"}, "node -e 'console.log(42)'"},
    {"go", {"go"}, "go version"},
    {"rust", {"rustc", "cargo"}, "rustc --version && cargo --version"},
    {"java", {"javac", "java"}, "javac -version && java -version"},
    {"typescript", {"tsc", "node"}, "tsc --version && node -e 'console.log(42)'"},
};

static const struct toolchain_check *find_check(const char *name)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(CHECKS); i++)
        if (strcmp(CHECKS[i].name, name) == 0)
            return &CHECKS[i];
    return NULL;
}

static char *check_script(const struct toolchain_check *c)
{
    struct sl_buf b;
    sl_buf_init(&b, 4096);
    const char *head = "set -e\n";
    sl_buf_append(&b, head, strlen(head));
    for (size_t i = 0; i < SL_ARRAY_LEN(c->binaries) && c->binaries[i]; i++) {
        char line[256];
        int n = snprintf(line, sizeof(line),
                         "command -v %s >/dev/null 2>&1 || { echo " MISSING_MARKER
                         "%s; exit 127; }\n",
                         c->binaries[i], c->binaries[i]);
        sl_buf_append(&b, line, (size_t)n);
    }
    sl_buf_append(&b, c->launch, strlen(c->launch));
    sl_buf_append(&b, "\n", 1);
    return b.data;
}

/* stdout + stderr, trimmed, first 1000 characters. */
static json_t *detail_of(const struct sl_rt_exec_result *res)
{
    struct sl_buf all;
    sl_buf_init(&all, res->out.len + res->err.len + 1);
    if (res->out.len)
        sl_buf_append(&all, res->out.data, res->out.len);
    if (res->err.len)
        sl_buf_append(&all, res->err.data, res->err.len);
    size_t start = 0, end = all.len;
    while (start < end && (all.data[start] == ' ' || all.data[start] == '\n' ||
                           all.data[start] == '\t' || all.data[start] == '\r'))
        start++;
    while (end > start && (all.data[end - 1] == ' ' || all.data[end - 1] == '\n' ||
                           all.data[end - 1] == '\t' || all.data[end - 1] == '\r'))
        end--;
    if (end - start > DETAIL_MAX)
        end = start + DETAIL_MAX;
    size_t n = 0;
    _cleanup_free_ char *text = sl_utf8_repair(all.data ? all.data + start : "", end - start, &n);
    sl_buf_free(&all);
    return text ? json_stringn(text, n) : json_string("");
}

static json_t *run_check(struct sl_runtime *rt, const char *root, uid_t uid,
                         const struct toolchain_check *c, const struct sl_env *env)
{
    _cleanup_free_ char *script = check_script(c);
    char *argv[] = {(char *)"/bin/sh", (char *)"-c", script, NULL};
    struct sl_rt_exec_request req = {
        .sandbox_root = root,
        .uid = uid,
        .argv = argv,
        .cwd = "/workspace",
        .envp = env->vars,
        .timeout_ms = CHECK_TIMEOUT_MS,
        .grace_ms = 100,
        .max_output_bytes = 64 * 1024,
    };
    struct sl_rt_exec_result res = {0};
    struct sl_error err = {0};
    if (sl_rt_exec(rt, &req, &res, &err) < 0) {
        char detail[DETAIL_MAX + 1];
        snprintf(detail, sizeof(detail), "RuntimeError: %s", err.message);
        return json_pack("{s:s,s:s,s:s}", "status", "failed", "check", "launch", "detail",
                         detail);
    }
    const char *status;
    bool missing = res.exit_code == 127 && res.out.len >= strlen(MISSING_MARKER) &&
                   memcmp(res.out.data, MISSING_MARKER, strlen(MISSING_MARKER)) == 0;
    if (res.timed_out)
        status = "timed_out";
    else if (missing)
        status = "missing";
    else if (res.exit_code == 0)
        status = "available";
    else
        status = "failed";
    json_t *check = json_pack("{s:s,s:s,s:o,s:o}", "status", status, "check", "launch",
                              "exit_code", res.timed_out ? json_null() : json_integer(res.exit_code),
                              "detail", detail_of(&res));
    sl_rt_exec_result_free(&res);
    return check;
}

json_t *sl_toolchain_checks(struct sl_runtime *rt, const struct sl_config *cfg)
{
    json_t *checks = json_object();
    uid_t uid = (uid_t)cfg->uid_start;
    char hex[17], name[64], root[4096];
    if (sl_random_hex(hex, 8) < 0)
        return checks;
    snprintf(name, sizeof(name), ".probe-toolchains-%s", hex);
    snprintf(root, sizeof(root), "%s/%s", cfg->workspace_root, name);
    struct sl_error err = {0};
    struct sl_env env = {0};
    bool ready = mkdir(root, 0700) == 0 && chown(root, uid, uid) == 0;
    static const char *const subdirs[] = {"workspace", "home", "cache", "envs"};
    for (size_t i = 0; ready && i < SL_ARRAY_LEN(subdirs); i++) {
        char sub[4200];
        snprintf(sub, sizeof(sub), "%s/%s", root, subdirs[i]);
        ready = mkdir(sub, 0700) == 0 && chown(sub, uid, uid) == 0;
    }
    if (ready)
        ready = sl_env_build(cfg, NULL, NULL, 0, 0, &env, &err) == 0;
    struct sl_strlist names = {0};
    for (size_t i = 0; i < cfg->toolchains.len; i++)
        sl_strlist_push(&names, cfg->toolchains.items[i]);
    if (sl_strlist_contains(&cfg->toolchains, "node"))
        sl_strlist_push(&names, "typescript");
    for (size_t i = 0; i < names.len; i++) {
        const struct toolchain_check *c = find_check(names.items[i]);
        json_t *check;
        if (!c)
            check = json_pack("{s:s,s:s}", "status", "not_checked", "check", "launch");
        else if (!ready)
            check = json_pack("{s:s,s:s,s:s}", "status", "failed", "check", "launch", "detail",
                              "RuntimeError: the probe sandbox could not be prepared");
        else
            check = run_check(rt, root, uid, c, &env);
        const char *status = sl_json_get_str(check, "status");
        if (status && strcmp(status, "available") != 0)
            sl_warn("toolchain %s: launch check %s", names.items[i], status);
        json_object_set_new(checks, names.items[i], check);
    }
    sl_strlist_free(&names);
    sl_env_free(&env);
    _cleanup_close_ int rootfd = open(cfg->workspace_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd >= 0)
        ws_remove_tree_at(rootfd, name, &err);
    struct sl_error ignored = {0};
    sl_rt_kill_sandbox(rt, uid, &ignored); /* its session and cgroups go too */
    return checks;
}
