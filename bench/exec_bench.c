/* Cost of one command through the native runtime, beside baselines measured
 * in the same run (interleaved, so machine noise hits all rows alike):
 *
 *   baseline      fork+exec of /bin/true
 *   bwrap         a bare bwrap --unshare-user/ipc/uts/pid launch of /bin/true
 *                 (the reference's per-command floor; skipped if bwrap is absent)
 *   warm          /bin/true through a warm session (the default mode)
 *   fresh         /bin/true in a fresh sandbox per command (sessions off)
 *   cold          session start + /bin/true, for a sandbox with no session
 *
 * then the memory a warm idle session costs: MemAvailable before and after
 * starting N sessions (quotas off, so only the session itself is counted).
 *
 *   build/exec_bench [runs] [sessions]   (root; SANDLOOM_INIT overrides build/sandloom-init)
 *
 * Not a test: it prints figures and asserts nothing about speed. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "runtime/runtime.h"
#include "workspace/files.h"

#define BASE_UID 39000

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void mkdir_owned(const char *path, uid_t uid)
{
    mkdir(path, 0700);
    if (chown(path, uid, uid) < 0)
        perror(path);
}

static void make_sandbox(const char *base, uid_t uid, char *root, size_t size)
{
    snprintf(root, size, "%s/sbx-%u", base, (unsigned)uid);
    mkdir_owned(root, uid);
    const char *dirs[] = {"workspace", "home", "cache", "envs"};
    for (size_t i = 0; i < 4; i++) {
        char sub[600];
        snprintf(sub, sizeof(sub), "%s/%s", root, dirs[i]);
        mkdir_owned(sub, uid);
    }
}

static int64_t time_fork_exec(char *const argv[], char *const envp[])
{
    int64_t t = sl_mono_us();
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return sl_mono_us() - t;
}

static int64_t time_exec(struct sl_runtime *rt, const char *root, uid_t uid)
{
    char *cmd[] = {(char *)"/bin/true", NULL};
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", NULL};
    struct sl_rt_exec_request req = {.sandbox_root = root, .uid = uid, .argv = cmd,
                                     .cwd = "/workspace", .envp = envp, .timeout_ms = 10000,
                                     .grace_ms = 100, .max_output_bytes = 1024};
    struct sl_rt_exec_result res = {0};
    struct sl_error err = {0};
    int64_t t = sl_mono_us();
    if (sl_rt_exec(rt, &req, &res, &err) < 0 || res.exit_code != 0) {
        fprintf(stderr, "exec_bench: run failed: %s (exit %d)\n", sl_error_text(&err),
                res.exit_code);
        sl_rt_exec_result_free(&res);
        return -1;
    }
    sl_rt_exec_result_free(&res);
    return sl_mono_us() - t;
}

static void report(const char *name, int64_t *v, int n, int64_t base_p50)
{
    qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
    printf("%-44s p50 %7.3f ms  p99 %7.3f ms", name, v[n / 2] / 1000.0, v[n * 99 / 100] / 1000.0);
    if (base_p50 > 0)
        printf("  (p50 %.2fx baseline)", (double)v[n / 2] / (double)base_p50);
    printf("\n");
}

static long mem_available_kib(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static struct sl_runtime *open_rt(const char *base, struct sl_strlist *ro, bool warm)
{
    const char *init = getenv("SANDLOOM_INIT") ? getenv("SANDLOOM_INIT") : "build/sandloom-init";
    struct sl_rt_options opt = {
        .init_path = init, .readonly_mounts = ro, .python_prefix = "/usr",
        .tmpfs_bytes = 64 << 20, .cpu_seconds = 300, .max_processes = 64,
        .max_open_files = 512, .max_file_size_bytes = 1 << 30, .requested_level = "auto",
        .probe_root = base, .probe_uid = BASE_UID, .warm_sessions = warm,
    };
    struct sl_runtime *rt = NULL;
    struct sl_error err = {0};
    if (sl_rt_open(&opt, &rt, &err) < 0) {
        fprintf(stderr, "exec_bench: %s\n", sl_error_text(&err));
        exit(2);
    }
    return rt;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 500;
    int nsessions = argc > 2 ? atoi(argv[2]) : 1000;
    if (runs < 10)
        runs = 10;
    if (geteuid() != 0) {
        fprintf(stderr, "exec_bench: needs root\n");
        return 2;
    }
    char base[] = "/tmp/sl-bench-XXXXXX";
    if (!mkdtemp(base) || chmod(base, 0711) < 0)
        return 2;
    struct sl_strlist ro = {0};
    const char *mounts[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"};
    for (size_t i = 0; i < 6; i++)
        sl_strlist_push(&ro, mounts[i]);
    struct sl_runtime *fresh = open_rt(base, &ro, false);
    struct sl_runtime *warm = open_rt(base, &ro, true);

    char root[512];
    make_sandbox(base, BASE_UID + 1, root, sizeof(root));
    char *true_argv[] = {(char *)"/bin/true", NULL};
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", NULL};
    char *bwrap_argv[] = {(char *)"/usr/bin/bwrap", (char *)"--unshare-user",
                          (char *)"--unshare-ipc", (char *)"--unshare-uts", (char *)"--unshare-pid",
                          (char *)"--ro-bind", (char *)"/usr", (char *)"/usr", (char *)"--symlink",
                          (char *)"usr/bin", (char *)"/bin", (char *)"--symlink", (char *)"usr/lib",
                          (char *)"/lib", (char *)"--symlink", (char *)"usr/lib64", (char *)"/lib64",
                          (char *)"--proc", (char *)"/proc", (char *)"--dev", (char *)"/dev",
                          (char *)"/bin/true", NULL};
    bool have_bwrap = access("/usr/bin/bwrap", X_OK) == 0 &&
                      time_fork_exec(bwrap_argv, envp) >= 0;

    int64_t *base_us = calloc((size_t)runs, sizeof(int64_t));
    int64_t *bwrap_us = calloc((size_t)runs, sizeof(int64_t));
    int64_t *warm_us = calloc((size_t)runs, sizeof(int64_t));
    int64_t *fresh_us = calloc((size_t)runs, sizeof(int64_t));
    if (time_exec(warm, root, BASE_UID + 1) < 0) /* start the session */
        return 1;
    for (int i = 0; i < runs; i++) {
        base_us[i] = time_fork_exec(true_argv, envp);
        if (have_bwrap)
            bwrap_us[i] = time_fork_exec(bwrap_argv, envp);
        warm_us[i] = time_exec(warm, root, BASE_UID + 1);
        fresh_us[i] = time_exec(fresh, root, BASE_UID + 1);
        if (base_us[i] < 0 || warm_us[i] < 0 || fresh_us[i] < 0)
            return 1;
    }
    /* Cold: a sandbox without a session, session start + /bin/true. */
    int ncold = runs < 200 ? runs : 200;
    int64_t *cold_us = calloc((size_t)ncold, sizeof(int64_t));
    struct sl_error err = {0};
    for (int i = 0; i < ncold; i++) {
        char croot[512];
        make_sandbox(base, BASE_UID + 100 + (uid_t)i, croot, sizeof(croot));
        cold_us[i] = time_exec(warm, croot, BASE_UID + 100 + (uid_t)i);
        sl_rt_kill_sandbox(warm, BASE_UID + 100 + (uid_t)i, &err);
        if (cold_us[i] < 0)
            return 1;
    }

    printf("exec_bench: %d runs (%d cold), %ld cores, level %s\n", runs, ncold,
           sysconf(_SC_NPROCESSORS_ONLN), sl_rt_profile(warm)->selected_level);
    qsort(base_us, (size_t)runs, sizeof(int64_t), cmp_i64);
    int64_t b50 = base_us[runs / 2];
    report("baseline: fork+exec /bin/true", base_us, runs, 0);
    int64_t bw50 = 0;
    if (have_bwrap) {
        report("bare bwrap launch of /bin/true", bwrap_us, runs, b50);
        bw50 = bwrap_us[runs / 2];
    } else {
        printf("%-44s (bubblewrap not installed: make bench installs it)\n",
               "bare bwrap launch of /bin/true");
    }
    report("warm session exec of /bin/true", warm_us, runs, b50);
    report("fresh sandbox per exec (sessions off)", fresh_us, runs, b50);
    report("cold exec (session start + /bin/true)", cold_us, ncold, b50);
    if (bw50) {
        printf("warm vs bwrap: %.1fx faster; cold vs bwrap: %.1fx faster\n",
               (double)bw50 / (double)warm_us[runs / 2], (double)bw50 / (double)cold_us[ncold / 2]);
    }
    printf("targets (issue 3): warm <= 1.2x baseline and >= 3x faster than bwrap; "
           "cold <= 3x baseline and faster than bwrap\n");

    /* Memory of warm idle sessions. */
    if (nsessions > 0) {
        /* The sandboxes' directories exist before the first reading: only
         * what the sessions themselves hold is measured. */
        char (*roots)[512] = calloc((size_t)nsessions, sizeof(*roots));
        for (int i = 0; i < nsessions; i++)
            make_sandbox(base, BASE_UID + 1000 + (uid_t)i, roots[i], sizeof(roots[i]));
        sleep(1);
        long before = mem_available_kib();
        for (int i = 0; i < nsessions; i++)
            if (time_exec(warm, roots[i], BASE_UID + 1000 + (uid_t)i) < 0)
                return 1;
        sleep(1);
        long after = mem_available_kib();
        free(roots);
        printf("%d warm idle sessions: MemAvailable dropped %ld KiB = %.1f KiB per session "
               "(target <= 200 KiB)\n",
               nsessions, before - after, (double)(before - after) / nsessions);
        for (int i = 0; i < nsessions; i++)
            sl_rt_kill_sandbox(warm, BASE_UID + 1000 + (uid_t)i, &err);
        printf("after stopping them: %d sessions, %ld KiB recovered\n", sl_rt_sessions(warm),
               mem_available_kib() - after);
    }

    sl_rt_close(warm);
    sl_rt_close(fresh);
    sl_strlist_free(&ro);
    int tmpfd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (tmpfd >= 0) {
        ws_remove_tree_at(tmpfd, base + strlen("/tmp/"), &err);
        close(tmpfd);
    }
    return 0;
}
