/* Cost of one command through the native runtime, beside the baseline of a
 * plain fork+exec of /bin/true measured in the same run, interleaved so that
 * machine noise hits both alike. Prints p50/p99 and the p50 ratio.
 *
 *   build/exec_bench [runs]     (root; SANDLOOM_INIT overrides build/sandloom-init)
 *
 * Not a test: it asserts nothing about speed. */
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

#define UID 39999

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void mkdir_owned(const char *path)
{
    mkdir(path, 0700);
    if (chown(path, UID, UID) < 0)
        perror(path);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 500;
    if (runs < 10)
        runs = 10;
    if (geteuid() != 0) {
        fprintf(stderr, "exec_bench: needs root\n");
        return 2;
    }
    char base[] = "/tmp/sl-bench-XXXXXX";
    if (!mkdtemp(base) || chmod(base, 0711) < 0)
        return 2;
    char root[256], sub[300];
    snprintf(root, sizeof(root), "%s/sbx", base);
    mkdir_owned(root);
    const char *dirs[] = {"workspace", "home", "cache", "envs"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(sub, sizeof(sub), "%s/%s", root, dirs[i]);
        mkdir_owned(sub);
    }
    struct sl_strlist ro = {0};
    const char *mounts[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"};
    for (size_t i = 0; i < 6; i++)
        sl_strlist_push(&ro, mounts[i]);
    const char *init = getenv("SANDLOOM_INIT") ? getenv("SANDLOOM_INIT") : "build/sandloom-init";
    struct sl_rt_options opt = {
        .init_path = init, .readonly_mounts = &ro, .python_prefix = "/usr",
        .tmpfs_bytes = 64 << 20, .cpu_seconds = 300, .max_processes = 64,
        .max_open_files = 512, .max_file_size_bytes = 1 << 30, .requested_level = "auto",
        .probe_root = base, .probe_uid = UID,
    };
    struct sl_runtime *rt = NULL;
    struct sl_error err = {0};
    if (sl_rt_open(&opt, &rt, &err) < 0) {
        fprintf(stderr, "exec_bench: %s\n", sl_error_text(&err));
        return 2;
    }
    char *cmd[] = {(char *)"/bin/true", NULL};
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", NULL};
    int64_t *base_us = calloc((size_t)runs, sizeof(int64_t));
    int64_t *sbx_us = calloc((size_t)runs, sizeof(int64_t));
    for (int i = 0; i < runs; i++) {
        int64_t t = sl_mono_us();
        pid_t pid = fork();
        if (pid == 0) {
            execve("/bin/true", cmd, envp);
            _exit(127);
        }
        waitpid(pid, NULL, 0);
        base_us[i] = sl_mono_us() - t;

        struct sl_rt_exec_request req = {
            .sandbox_root = root, .uid = UID, .argv = cmd, .cwd = "/workspace", .envp = envp,
            .timeout_ms = 10000, .grace_ms = 100, .max_output_bytes = 1024};
        struct sl_rt_exec_result res = {0};
        t = sl_mono_us();
        if (sl_rt_exec(rt, &req, &res, &err) < 0 || res.exit_code != 0) {
            fprintf(stderr, "exec_bench: run %d failed: %s\n", i, sl_error_text(&err));
            return 1;
        }
        sbx_us[i] = sl_mono_us() - t;
        sl_rt_exec_result_free(&res);
    }
    qsort(base_us, (size_t)runs, sizeof(int64_t), cmp_i64);
    qsort(sbx_us, (size_t)runs, sizeof(int64_t), cmp_i64);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("exec_bench: %d runs, %ld cores, level %s\n", runs, cores,
           sl_rt_profile(rt)->selected_level);
    printf("%-34s p50 %7.2f ms   p99 %7.2f ms\n", "baseline fork+exec /bin/true",
           base_us[runs / 2] / 1000.0, base_us[runs * 99 / 100] / 1000.0);
    printf("%-34s p50 %7.2f ms   p99 %7.2f ms\n", "fresh sandbox per command",
           sbx_us[runs / 2] / 1000.0, sbx_us[runs * 99 / 100] / 1000.0);
    printf("ratio (p50 sandbox / p50 baseline): %.2f\n",
           (double)sbx_us[runs / 2] / (double)base_us[runs / 2]);
    sl_rt_close(rt);
    free(base_us);
    free(sbx_us);
    sl_strlist_free(&ro);
    int tmpfd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (tmpfd >= 0) {
        ws_remove_tree_at(tmpfd, base + strlen("/tmp/"), &err);
        close(tmpfd);
    }
    return 0;
}
