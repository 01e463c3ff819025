/* Runtime tests: real sandboxes, so root only (exit 77 = skipped otherwise).
 *
 *   SANDLOOM_INIT=/path/to/sandloom-init ./test_runtime
 *
 * Every case checks what a process inside can observe; the last one prints
 * the launch cost next to fork+exec of /bin/true measured in the same run
 * (figures, never an assertion). */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/keyctl.h>
#include <sys/syscall.h>
#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/util.h"
#include "runtime/runtime.h"

#define SANDBOX_UID 23456
#define PROBE_UID 20000

static char base_dir[] = "/tmp/sl-rt-test-XXXXXX";
static char sandbox_root[256];
static struct sl_strlist readonly_mounts;
static struct sl_runtime *rt_auto, *rt_basic, *rt_net;

static char *test_env[] = {(char *)"PATH=/usr/bin:/bin", (char *)"HOME=/home/sandbox",
                           (char *)"LANG=C.UTF-8", NULL};

static int make_dir(const char *path, mode_t mode, uid_t uid)
{
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return -1;
    if (chmod(path, mode) < 0 || chown(path, uid, uid) < 0)
        return -1;
    return 0;
}

static int make_sandbox_root(const char *root, uid_t uid)
{
    static const char *const subdirs[] = {"workspace", "home", "cache", "envs", "logs"};
    if (make_dir(root, 0700, uid) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", root, subdirs[i]);
        if (make_dir(p, 0700, uid) < 0)
            return -1;
    }
    return 0;
}

static struct sl_rt_options base_options(const char *level, bool isolated)
{
    const char *init = getenv("SANDLOOM_INIT");
    return (struct sl_rt_options){
        .init_path = init && init[0] ? init : "./build/sandloom-init",
        .readonly_mounts = &readonly_mounts,
        .python_prefix = "/usr",
        .tmpfs_bytes = 64 << 20,
        .cpu_seconds = 300,
        .max_processes = 64,
        .max_open_files = 512,
        .max_file_size_bytes = 1 << 30,
        .network_isolated = isolated,
        .requested_level = level,
        .probe_root = base_dir,
        .probe_uid = PROBE_UID,
    };
}

static int open_runtime(const char *level, bool isolated, struct sl_runtime **out)
{
    struct sl_rt_options opt = base_options(level, isolated);
    struct sl_error err;
    sl_error_clear(&err);
    if (sl_rt_open(&opt, out, &err) < 0) {
        fprintf(stderr, "sl_rt_open(%s): %s\n", level, sl_error_text(&err));
        return -1;
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    if (!mkdtemp(base_dir) || chmod(base_dir, 0711) < 0)
        return -1;
    /* Like a daemon: SIGPIPE ignored (must not leak into the sandbox) and
     * supplementary groups (none may show inside). */
    signal(SIGPIPE, SIG_IGN);
    umask(077);
    gid_t groups[] = {4, 27, 100};
    if (setgroups(3, groups) < 0)
        return -1;
    snprintf(sandbox_root, sizeof(sandbox_root), "%s/sb", base_dir);
    if (make_sandbox_root(sandbox_root, SANDBOX_UID) < 0)
        return -1;
    static const char *const ro[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"};
    for (size_t i = 0; i < sizeof(ro) / sizeof(ro[0]); i++)
        sl_strlist_push(&readonly_mounts, ro[i]);
    if (open_runtime("auto", false, &rt_auto) < 0 || open_runtime("basic", false, &rt_basic) < 0 ||
        open_runtime("standard", true, &rt_net) < 0)
        return -1;
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static int group_teardown(void **state)
{
    (void)state;
    sl_rt_close(rt_auto);
    sl_rt_close(rt_basic);
    sl_rt_close(rt_net);
    sl_strlist_free(&readonly_mounts);
    nftw(base_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* Run argv in the sandbox; asserts that the sandbox started. */
static void run_full(struct sl_runtime *rt, const char *root, uid_t uid, char *const *argv,
                     const char *cwd, int64_t timeout_ms, size_t max_output,
                     struct sl_rt_exec_result *res)
{
    struct sl_rt_exec_request req = {
        .sandbox_root = root,
        .uid = uid,
        .argv = argv,
        .cwd = cwd,
        .envp = test_env,
        .timeout_ms = timeout_ms,
        .grace_ms = 500,
        .max_output_bytes = max_output,
    };
    struct sl_error err;
    sl_error_clear(&err);
    int rc = sl_rt_exec(rt, &req, res, &err);
    if (rc < 0)
        fprintf(stderr, "sl_rt_exec: %s\n", sl_error_text(&err));
    assert_int_equal(rc, 0);
}

static void run_sh(struct sl_runtime *rt, const char *script, struct sl_rt_exec_result *res)
{
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)script, NULL};
    run_full(rt, sandbox_root, SANDBOX_UID, argv, "/workspace", 10000, 1 << 20, res);
}

static const char *text(const struct sl_buf *b)
{
    return b->data ? b->data : "";
}

/* ------------------------------------------------------------------------ */

static void test_probe_profile(void **state)
{
    (void)state;
    const struct sl_rt_profile *p = sl_rt_profile(rt_auto);
    printf("probe: selected=%s max=%s supported basic=%d standard=%d strict=%d\n",
           p->selected_level, p->max_supported_level, p->supported[0], p->supported[1],
           p->supported[2]);
    for (int i = 0; i < 3; i++)
        if (p->probe_failure[i][0])
            printf("probe failure %d: %s\n", i, p->probe_failure[i]);
    assert_string_equal(p->selected_level, p->max_supported_level);
    assert_true(p->supported[0]);
    const struct sl_rt_profile *b = sl_rt_profile(rt_basic);
    assert_string_equal(b->selected_level, "basic");
    assert_false(b->pid_namespace);
    assert_true(sl_rt_profile(rt_net)->network_isolated);
    assert_true(sl_rt_profile(rt_net)->pid_namespace);

    struct sl_rt_options opt = base_options("bogus", false);
    struct sl_runtime *rt = NULL;
    struct sl_error err;
    sl_error_clear(&err);
    assert_int_equal(sl_rt_open(&opt, &rt, &err), -1);
    assert_true(sl_error_is(&err, SL_E_CONFIG));
}

static void test_echo(void **state)
{
    (void)state;
    char *argv[] = {(char *)"echo", (char *)"hello", NULL};
    struct sl_rt_exec_result res;
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace", 10000, 1 << 20, &res);
    assert_int_equal(res.exit_code, 0);
    assert_false(res.timed_out);
    assert_false(res.truncated);
    assert_string_equal(text(&res.out), "hello\n");
    assert_int_equal(res.err.len, 0);
    assert_true(res.duration_ms >= 0);
    sl_rt_exec_result_free(&res);
}

static void test_uid_and_ownership(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto, "id -u; id -g; umask; rm -f /workspace/owned; touch /workspace/owned", &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(text(&res.out), "0\n0\n0022\n");
    sl_rt_exec_result_free(&res);
    char path[512];
    snprintf(path, sizeof(path), "%s/workspace/owned", sandbox_root);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_uid, SANDBOX_UID);
    assert_int_equal(st.st_gid, SANDBOX_UID);
}

static void test_exit_code(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto, "exit 7", &res);
    assert_int_equal(res.exit_code, 7);
    sl_rt_exec_result_free(&res);
    run_sh(rt_basic, "exit 7", &res);
    assert_int_equal(res.exit_code, 7);
    sl_rt_exec_result_free(&res);
}

static void test_command_killed_by_signal(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto, "kill -9 $$", &res);
    assert_int_equal(res.exit_code, 137);
    assert_false(res.timed_out);
    sl_rt_exec_result_free(&res);
    run_sh(rt_basic, "kill -9 $$", &res);
    assert_int_equal(res.exit_code, 137);
    sl_rt_exec_result_free(&res);
}

static int count_sandbox_processes(uid_t uid)
{
    int n = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], stat_line[512] = {0};
        snprintf(path, sizeof(path), "/proc/%s", e->d_name);
        struct stat st;
        if (stat(path, &st) < 0 || st.st_uid != uid)
            continue;
        /* Zombies are dead already; orphans at basic are reaped by the
         * host's init, whenever it gets to it. */
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(stat_line, sizeof(stat_line), f))
                stat_line[0] = '\0';
            fclose(f);
        }
        const char *state_field = strrchr(stat_line, ')');
        if (state_field && state_field[1] == ' ' && state_field[2] == 'Z')
            continue;
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

/* Nothing of an execution may outlive it (killed processes take a moment
 * to disappear). */
static void assert_no_sandbox_process_left(void)
{
    /* Up to 5 s: SIGKILLed processes only go once scheduled, and CI machines
     * run the sanitizer build under heavy load. */
    for (int i = 0; i < 500 && count_sandbox_processes(SANDBOX_UID) > 0; i++)
        usleep(10 * 1000);
    assert_int_equal(count_sandbox_processes(SANDBOX_UID), 0);
}

/* At the deadline the command's group gets SIGTERM; one that ignores it
 * gets SIGKILL after the grace (500 ms here). The exit code names the
 * signal that ended it, negative: our termination, not the command's. */
static void check_timeout(struct sl_runtime *rt, char *const *argv, int expect_code,
                          int64_t min_ms)
{
    struct sl_rt_exec_result res;
    run_full(rt, sandbox_root, SANDBOX_UID, argv, "/workspace", 300, 1 << 20, &res);
    assert_true(res.timed_out);
    assert_int_equal(res.exit_code, expect_code);
    assert_true(res.duration_ms >= min_ms);
    assert_true(res.duration_ms < 3000);
    sl_rt_exec_result_free(&res);
    assert_no_sandbox_process_left();
}

static void test_timeout(void **state)
{
    (void)state;
    char *sleep_argv[] = {(char *)"sleep", (char *)"10", NULL};
    check_timeout(rt_auto, sleep_argv, -SIGTERM, 300);
    /* At basic there is no PID namespace: the group signal must end the
     * grandchild holding the pipe too. */
    char *sh_argv[] = {(char *)"sh", (char *)"-c", (char *)"sleep 10; echo never", NULL};
    check_timeout(rt_basic, sh_argv, -SIGTERM, 300);
    /* Ignoring SIGTERM buys the grace period, not more. */
    char *stubborn_argv[] = {(char *)"sh", (char *)"-c",
                             (char *)"trap '' TERM; sleep 10 & wait; sleep 10", NULL};
    check_timeout(rt_auto, stubborn_argv, -SIGKILL, 800);
    check_timeout(rt_basic, stubborn_argv, -SIGKILL, 800);
    /* A deadline that passes while the sandbox is still being built. */
    struct sl_rt_exec_result res;
    run_full(rt_auto, sandbox_root, SANDBOX_UID, sleep_argv, "/workspace", 1, 1024, &res);
    assert_true(res.timed_out);
    /* Killed while being built (-9), or just after the command started
     * when the build was faster than the timer (-15 then). */
    assert_true(res.exit_code == -9 || res.exit_code == -15);
    sl_rt_exec_result_free(&res);
}

static void test_background_job_does_not_hold_the_call(void **state)
{
    (void)state;
    struct sl_runtime *rts[] = {rt_auto, rt_basic};
    for (size_t i = 0; i < 2; i++) {
        struct sl_rt_exec_result res;
        run_sh(rts[i], "sleep 30 & echo started", &res);
        assert_false(res.timed_out);
        assert_int_equal(res.exit_code, 0);
        assert_string_equal(text(&res.out), "started\n");
        assert_true(res.duration_ms < 5000);
        sl_rt_exec_result_free(&res);
        assert_no_sandbox_process_left();
    }
}

static void test_output_truncated(void **state)
{
    (void)state;
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)"yes | head -c 200000; echo done >&2",
                    NULL};
    struct sl_rt_exec_result res;
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace", 10000, 1000, &res);
    assert_int_equal(res.exit_code, 0);
    assert_false(res.timed_out);
    assert_true(res.truncated);
    assert_int_equal(res.out.len, 1000);
    assert_memory_equal(res.out.data, "y\ny\ny\n", 6);
    assert_string_equal(text(&res.err), "done\n");
    sl_rt_exec_result_free(&res);
}

static void test_missing_cwd(void **state)
{
    (void)state;
    char *argv[] = {(char *)"true", NULL};
    struct sl_rt_exec_result res;
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace/does-not-exist", 10000, 1 << 20,
             &res);
    assert_int_not_equal(res.exit_code, 0);
    assert_non_null(strstr(text(&res.err), "/workspace/does-not-exist"));
    sl_rt_exec_result_free(&res);
}

static void test_system_trees_read_only(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto,
           "touch /usr/x 2>/dev/null && echo usr-writable; "
           "touch /etc/x 2>/dev/null && echo etc-writable; "
           "touch /x 2>/dev/null && echo root-writable; "
           "mkdir /dev/x 2>/dev/null && echo dev-writable; "
           "touch /tmp/x && echo tmp-ok; touch /home/sandbox/x && echo home-ok; "
           "stat -c %a /tmp",
           &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(text(&res.out), "tmp-ok\nhome-ok\n700\n");
    sl_rt_exec_result_free(&res);
    /* Read-only by mount flag, not only by host permissions. */
    run_sh(rt_auto,
           "while read -r id parent major root mnt opts rest; do case $mnt in "
           "/|/usr|/etc|/dev|/proc/sys) echo $mnt ${opts%%,*};; esac; done < /proc/self/mountinfo",
           &res);
    assert_string_equal(text(&res.out), "/ ro\n/etc ro\n/usr ro\n/dev ro\n/proc/sys ro\n");
    sl_rt_exec_result_free(&res);
    /* /tmp is fresh for every execution. */
    run_sh(rt_auto, "ls -A /tmp", &res);
    assert_string_equal(text(&res.out), "");
    sl_rt_exec_result_free(&res);
}

static void test_proc_only_sandbox_processes(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto, "set -- /proc/[0-9]*; echo $#", &res);
    assert_int_equal(res.exit_code, 0);
    int n = atoi(text(&res.out));
    assert_true(n >= 1 && n <= 3);
    sl_rt_exec_result_free(&res);
    run_sh(rt_basic, "test -e /proc", &res);
    assert_int_equal(res.exit_code, 1);
    sl_rt_exec_result_free(&res);
}

static void test_host_tree_hidden(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto,
           "for p in /root /oldroot /newroot /sys /run /var /boot; do "
           "test -e $p && echo visible $p; done; ls /",
           &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(text(&res.out), "bin\ncache\ndev\nenvs\netc\nhome\nlib\nlib64\nopt\nproc\n"
                                        "sbin\ntmp\nusr\nworkspace\n");
    sl_rt_exec_result_free(&res);
}

static void test_hostname_is_the_hosts(void **state)
{
    (void)state;
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    char want[300];
    snprintf(want, sizeof(want), "%s\n", host);
    struct sl_rt_exec_result res;
    run_sh(rt_auto, "uname -n", &res);
    assert_string_equal(text(&res.out), want);
    sl_rt_exec_result_free(&res);
}

static void test_no_capabilities(void **state)
{
    (void)state;
    struct sl_runtime *rts[] = {rt_auto, rt_basic};
    const char *scripts[] = {"grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs)' /proc/self/status",
                             /* no /proc at basic: read the status through a fresh
                                procfs is impossible, so check the effect instead */
                             "mount -t tmpfs none /tmp 2>/dev/null && echo mounted; "
                             "chown 1 /workspace 2>/dev/null && echo chowned; echo end"};
    for (size_t i = 0; i < 2; i++) {
        struct sl_rt_exec_result res;
        run_sh(rts[i], scripts[i], &res);
        if (i == 0)
            assert_string_equal(text(&res.out), "CapInh:\t0000000000000000\n"
                                                "CapPrm:\t0000000000000000\n"
                                                "CapEff:\t0000000000000000\n"
                                                "CapBnd:\t0000000000000000\n"
                                                "CapAmb:\t0000000000000000\n"
                                                "NoNewPrivs:\t1\n");
        else
            assert_string_equal(text(&res.out), "end\n");
        sl_rt_exec_result_free(&res);
    }
}

/* The daemon's session keyring (systemd gives services one) must not be
 * shared with sandboxes: a key the daemon possesses stays invisible. */
static void test_session_keyring_not_shared(void **state)
{
    (void)state;
    long ring = syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "sl-test-ring");
    assert_true(ring > 0);
    long key = syscall(SYS_add_key, "user", "sl-test-marker", "secret", 6,
                       KEY_SPEC_SESSION_KEYRING);
    assert_true(key > 0);
    /* Describe the session keyring from inside (keyctl(KEYCTL_DESCRIBE,
     * KEY_SPEC_SESSION_KEYRING) through python3's ctypes): it must be a new
     * one, not the daemon's "sl-test-ring". */
    struct sl_rt_exec_result res;
    char *argv[] = {(char *)"python3", (char *)"-c",
                    (char *)"import ctypes; l = ctypes.CDLL(None); b = ctypes.create_string_buffer(512);"
                            " n = l.syscall(250, 6, -3, b, 512); print(b.value.decode() if n > 0 else 'none')",
                    NULL};
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace", 10000, 4096, &res);
    assert_int_equal(res.exit_code, 0);
    assert_null(strstr(text(&res.out), "sl-test-ring"));
    sl_rt_exec_result_free(&res);
    syscall(SYS_keyctl, KEYCTL_INVALIDATE, key);
}

/* The default seccomp policy: each refused syscall answers EPERM (ENOSYS for
 * clone3), ordinary work (threads, fork) still runs, and a syscall through
 * the x32 ABI kills the process. */
static void test_seccomp_policy(void **state)
{
    (void)state;
    const char *script =
        "import ctypes, errno, os, threading\n"
        "l = ctypes.CDLL(None, use_errno=True)\n"
        "def err(*a):\n"
        "    r = l.syscall(*a)\n"
        "    return 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()]\n"
        "print('bpf', err(321, 0, 0, 0))\n"
        "print('keyctl', err(250, 0, 0, 0))\n"
        "print('ptrace', err(101, 0, 0, 0))\n"
        "print('io_uring_setup', err(425, 1, 0))\n"
        "print('perf_event_open', err(298, 0, 0, -1, -1, 0))\n"
        "print('unshare_user', err(272, 0x10000000))\n"
        "print('clone3', err(435, 0, 0))\n"
        "print('tiocsti', err(16, 0, 0x5412, ctypes.c_char_p(b'x')))\n"
        "print('open_by_handle_at', err(304, 0, 0, 0))\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join(); print('thread ok')\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(7)\n"
        "print('fork', os.waitpid(pid, 0)[1] >> 8)\n"
        "print([x for x in open('/proc/self/status') if x.startswith('Seccomp:')][0].split()[1])\n";
    char *argv[] = {(char *)"python3", (char *)"-c", (char *)script, NULL};
    struct sl_rt_exec_result res;
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace", 20000, 1 << 16, &res);
    const char *out = text(&res.out);
    if (res.exit_code != 0)
        fail_msg("exit %d, stdout %s stderr %s", res.exit_code, out, text(&res.err));
    assert_string_equal(out, "bpf EPERM\nkeyctl EPERM\nptrace EPERM\nio_uring_setup EPERM\n"
                             "perf_event_open EPERM\nunshare_user EPERM\nclone3 ENOSYS\n"
                             "tiocsti EPERM\nopen_by_handle_at EPERM\nthread ok\nfork 7\n2\n");
    sl_rt_exec_result_free(&res);

    /* getpid through the x32 ABI (syscall number | 0x40000000): killed by
     * SIGSYS, so the shell reports 128 + 31. */
    char *x32[] = {(char *)"python3", (char *)"-c",
                   (char *)"import ctypes; ctypes.CDLL(None).syscall(0x40000027); print('alive')",
                   NULL};
    run_full(rt_auto, sandbox_root, SANDBOX_UID, x32, "/workspace", 20000, 4096, &res);
    assert_int_equal(res.exit_code, 128 + SIGSYS);
    assert_null(strstr(text(&res.out), "alive"));
    sl_rt_exec_result_free(&res);
}

static void test_no_host_groups(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto, "id -G", &res);
    assert_string_equal(text(&res.out), "0\n");
    sl_rt_exec_result_free(&res);
}

static void test_nested_user_namespace_denied(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto,
           "unshare -U true 2>/dev/null && echo nested; unshare -Ur true 2>&1 | head -c 0; "
           "echo end",
           &res);
    assert_string_equal(text(&res.out), "end\n");
    sl_rt_exec_result_free(&res);
}

static void test_path_lookup(void **state)
{
    (void)state;
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)"echo ok", NULL};
    struct sl_rt_exec_result res;
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace", 10000, 1 << 20, &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(text(&res.out), "ok\n");
    sl_rt_exec_result_free(&res);

    char *missing[] = {(char *)"no-such-command-xyz", NULL};
    run_full(rt_auto, sandbox_root, SANDBOX_UID, missing, "/workspace", 10000, 1 << 20, &res);
    assert_int_equal(res.exit_code, 127);
    assert_non_null(strstr(text(&res.err), "cannot execute 'no-such-command-xyz'"));
    sl_rt_exec_result_free(&res);
}

static void test_python_runtime(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_auto,
           "PATH=/opt/agent-sandbox/python-runtime/bin:$PATH; python3 -V; python -c 'print(6*7)'; "
           "test -d /opt/agent-sandbox/runtime && echo runtime-dir",
           &res);
    assert_int_equal(res.exit_code, 0);
    assert_non_null(strstr(text(&res.out), "Python 3."));
    assert_non_null(strstr(text(&res.out), "\n42\nruntime-dir\n"));
    sl_rt_exec_result_free(&res);
}

static void test_only_stdio_open(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    /* The shell is looked at while it waits: when it starts a pipeline or
     * a redirection itself, it holds a pipe or a saved descriptor for a
     * moment, and a look then could see it. */
    run_sh(rt_auto,
           "ls /proc/1/fd | tr '\\n' ' '; echo; (sleep 0.2; ls /proc/$$/fd | tr '\\n' ' ') & wait",
           &res);
    assert_string_equal(text(&res.out), "0 1 2 \n0 1 2 ");
    sl_rt_exec_result_free(&res);
    /* stdin is /dev/null: cat ends at once. */
    char *cat[] = {(char *)"cat", NULL};
    run_full(rt_auto, sandbox_root, SANDBOX_UID, cat, "/workspace", 5000, 1 << 20, &res);
    assert_int_equal(res.exit_code, 0);
    assert_false(res.timed_out);
    assert_int_equal(res.out.len, 0);
    sl_rt_exec_result_free(&res);
}

static void test_network_isolated(void **state)
{
    (void)state;
    struct sl_rt_exec_result res;
    run_sh(rt_net, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", &res);
    assert_string_equal(text(&res.out), "lo\n");
    sl_rt_exec_result_free(&res);

    /* The host listens on 127.0.0.1:<port>; inside, the same address is the
     * sandbox's own loopback (up, usable) where nothing listens. */
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    socklen_t alen = sizeof(addr);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&addr, &alen), 0);
    char script[1024];
    snprintf(script, sizeof(script),
             "import socket\n"
             "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
             "c = socket.create_connection(s.getsockname(), timeout=2); print('loopback up')\n"
             "try:\n"
             "    socket.create_connection(('127.0.0.1', %d), timeout=2); print('host reached')\n"
             "except OSError as e:\n"
             "    print('host unreachable')\n",
             ntohs(addr.sin_port));
    char *argv[] = {(char *)"python3", (char *)"-c", script, NULL};
    run_full(rt_net, sandbox_root, SANDBOX_UID, argv, "/workspace", 20000, 4096, &res);
    assert_string_equal(text(&res.out), "loopback up\nhost unreachable\n");
    sl_rt_exec_result_free(&res);
    /* Host mode (the reference's default) shares the host's network. */
    run_full(rt_auto, sandbox_root, SANDBOX_UID, argv, "/workspace", 20000, 4096, &res);
    assert_string_equal(text(&res.out), "loopback up\nhost reached\n");
    sl_rt_exec_result_free(&res);
    close(lfd);
}

static void test_strict_cgroup_namespace(void **state)
{
    (void)state;
    if (strcmp(sl_rt_profile(rt_auto)->selected_level, "strict") != 0)
        skip();
    struct sl_rt_exec_result res;
    /* Every hierarchy shows the sandbox's own cgroup as its root. */
    run_sh(rt_auto, "grep -vc ':/$' /proc/self/cgroup", &res);
    assert_string_equal(text(&res.out), "0\n");
    sl_rt_exec_result_free(&res);
}

static void test_setup_failures(void **state)
{
    (void)state;
    char *argv[] = {(char *)"true", NULL};
    struct sl_rt_exec_request req = {
        .sandbox_root = "/nonexistent/sandbox",
        .uid = SANDBOX_UID,
        .argv = argv,
        .cwd = "/workspace",
        .envp = test_env,
        .timeout_ms = 5000,
        .grace_ms = 100,
        .max_output_bytes = 100,
    };
    struct sl_rt_exec_result res;
    struct sl_error err;
    sl_error_clear(&err);
    assert_int_equal(sl_rt_exec(rt_auto, &req, &res, &err), -1);
    assert_true(sl_error_is(&err, SL_E_RUNTIME));
    assert_non_null(strstr(err.message, "sandbox setup failed: bind sandbox directory"));
    assert_null(strstr(err.message, "/nonexistent")); /* no host path for clients */

    /* A root whose directories belong to someone else is refused, even
     * when the sandbox user could reach them. */
    char other[512];
    snprintf(other, sizeof(other), "%s/other", base_dir);
    assert_int_equal(make_sandbox_root(other, SANDBOX_UID + 1), 0);
    assert_int_equal(chown(other, SANDBOX_UID, SANDBOX_UID), 0);
    static const char *const names[] = {"workspace", "home", "cache", "envs"};
    for (size_t i = 0; i < 4; i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s/%s", other, names[i]);
        assert_int_equal(chmod(p, 0755), 0);
    }
    req.sandbox_root = other;
    sl_error_clear(&err);
    assert_int_equal(sl_rt_exec(rt_auto, &req, &res, &err), -1);
    assert_non_null(strstr(err.message, "bind sandbox directory"));

    /* A symlinked directory is never followed. */
    char linked[512], link[600], target[600];
    snprintf(linked, sizeof(linked), "%s/linked", base_dir);
    assert_int_equal(make_sandbox_root(linked, SANDBOX_UID), 0);
    snprintf(link, sizeof(link), "%s/workspace", linked);
    snprintf(target, sizeof(target), "../sb/workspace"); /* resolvable inside too */
    assert_int_equal(rmdir(link), 0);
    assert_int_equal(symlink(target, link), 0);
    req.sandbox_root = linked;
    sl_error_clear(&err);
    assert_int_equal(sl_rt_exec(rt_auto, &req, &res, &err), -1);
    assert_non_null(strstr(err.detail, "bind sandbox directory /workspace"));

    /* Never map the host's root. */
    req.sandbox_root = sandbox_root;
    req.uid = 0;
    sl_error_clear(&err);
    assert_int_equal(sl_rt_exec(rt_auto, &req, &res, &err), -1);
}

struct thread_arg {
    int index;
    int failures;
};

static void *concurrent_worker(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < 5; i++) {
        char script[64], want[64];
        snprintf(script, sizeof(script), "echo t%d-%d", a->index, i);
        snprintf(want, sizeof(want), "t%d-%d\n", a->index, i);
        char *argv[] = {(char *)"sh", (char *)"-c", script, NULL};
        struct sl_rt_exec_request req = {
            .sandbox_root = sandbox_root,
            .uid = SANDBOX_UID,
            .argv = argv,
            .cwd = "/workspace",
            .envp = test_env,
            .timeout_ms = 20000,
            .grace_ms = 100,
            .max_output_bytes = 1024,
        };
        struct sl_rt_exec_result res;
        struct sl_error err;
        sl_error_clear(&err);
        if (sl_rt_exec(rt_auto, &req, &res, &err) < 0) {
            fprintf(stderr, "thread %d: %s\n", a->index, sl_error_text(&err));
            a->failures++;
            continue;
        }
        if (res.exit_code != 0 || res.timed_out || strcmp(text(&res.out), want) != 0)
            a->failures++;
        sl_rt_exec_result_free(&res);
    }
    return NULL;
}

static int count_open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1;
}

static void test_concurrent_execs(void **state)
{
    (void)state;
    int fds_before = count_open_fds();
    pthread_t threads[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){.index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, concurrent_worker, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    assert_int_equal(sl_rt_running(rt_auto), 0);
    assert_int_equal(count_open_fds(), fds_before);
}

static void test_no_zombie(void **state)
{
    (void)state;
    /* Every execution was reaped by the runtime itself. */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* The daemon dying (here: the thread that called sl_rt_exec, with its
 * process) ends the sandbox: parent-death signal + PID namespace. */
static void test_sandbox_dies_with_daemon(void **state)
{
    (void)state;
    char marker[512];
    snprintf(marker, sizeof(marker), "%s/workspace/started", sandbox_root);
    unlink(marker);
    pid_t helper = fork();
    assert_true(helper >= 0);
    if (helper == 0) {
        struct sl_rt_exec_result res;
        char *argv[] = {(char *)"sh", (char *)"-c",
                        (char *)"sleep 30 & touch /workspace/started; sleep 30; true", NULL};
        struct sl_rt_exec_request req = {
            .sandbox_root = sandbox_root,
            .uid = SANDBOX_UID,
            .argv = argv,
            .cwd = "/workspace",
            .envp = test_env,
            .timeout_ms = 60000,
            .grace_ms = 100,
            .max_output_bytes = 100,
        };
        _exit(sl_rt_exec(rt_auto, &req, &res, NULL) < 0 ? 1 : 0);
    }
    for (int i = 0; i < 200 && access(marker, F_OK) < 0; i++)
        usleep(20 * 1000);
    assert_int_equal(access(marker, F_OK), 0);
    assert_true(count_sandbox_processes(SANDBOX_UID) >= 3);
    kill(helper, SIGKILL);
    assert_int_equal(waitpid(helper, NULL, 0), helper);
    assert_no_sandbox_process_left();
}

/* sandloom-init on its own (not PID 1, like basic): SIGTERM reaches the
 * command, whose death by signal N becomes exit status 128+N. */
static void test_init_forwards_sigterm(void **state)
{
    (void)state;
    const char *init = base_options("auto", false).init_path;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setsid();
        execl(init, "sandloom-init", "--cwd", "/", "--", "sleep", "10", (char *)NULL);
        _exit(99);
    }
    usleep(300 * 1000);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 128 + SIGTERM);
}


/* Templates: read-only trees at /envs/<name>, in a fresh sandbox at spawn
 * and in a live warm session by attaching into its mount namespace, while a
 * background process of the session survives. */
static void write_host_file(const char *path, const char *text_)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text_, f);
    fclose(f);
    chmod(path, 0644);
}

static void run_with_mounts(struct sl_runtime *rt, const char *script,
                            const struct sl_rt_mount *mounts, size_t n,
                            struct sl_rt_exec_result *res)
{
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)script, NULL};
    struct sl_rt_exec_request req = {
        .sandbox_root = sandbox_root,
        .uid = SANDBOX_UID,
        .argv = argv,
        .cwd = "/workspace",
        .envp = test_env,
        .timeout_ms = 10000,
        .grace_ms = 500,
        .max_output_bytes = 1 << 20,
        .mounts = mounts,
        .nmounts = n,
    };
    struct sl_error err;
    sl_error_clear(&err);
    int rc = sl_rt_exec(rt, &req, res, &err);
    if (rc < 0)
        fprintf(stderr, "sl_rt_exec: %s\n", sl_error_text(&err));
    assert_int_equal(rc, 0);
}

static void test_template_mounts(void **state)
{
    (void)state;
    char a[600], b[600], fa[700], fb[700];
    snprintf(a, sizeof(a), "%s/tpl-a", base_dir);
    snprintf(b, sizeof(b), "%s/tpl-b", base_dir);
    assert_int_equal(mkdir(a, 0755) < 0 && errno != EEXIST, 0);
    assert_int_equal(mkdir(b, 0755) < 0 && errno != EEXIST, 0);
    snprintf(fa, sizeof(fa), "%s/f", a);
    snprintf(fb, sizeof(fb), "%s/f", b);
    write_host_file(fa, "A\n");
    write_host_file(fb, "B\n");
    chmod(a, 0755); /* published trees are world-readable (API.md §6.4) */
    chmod(b, 0755);
    struct sl_rt_mount one[] = {{"tpl", a}};
    struct sl_rt_mount two[] = {{"tpl", b}, {"other", a}};

    /* A fresh sandbox per command. */
    struct sl_rt_exec_result res;
    run_with_mounts(rt_auto, "cat /envs/tpl/f; (echo x > /envs/tpl/g) 2>/dev/null || echo RO",
                    one, 1, &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(text(&res.out), "A\nRO\n");
    sl_rt_exec_result_free(&res);

    /* A warm session: attach, replace, detach while a background job lives. */
    struct sl_rt_options opt = base_options("auto", false);
    opt.warm_sessions = true;
    struct sl_runtime *warm = NULL;
    struct sl_error err;
    sl_error_clear(&err);
    assert_int_equal(sl_rt_open(&opt, &warm, &err), 0);
    run_with_mounts(warm, "sleep 60 > /dev/null 2>&1 & echo $! > /tmp/bg; cat /envs/tpl/f", NULL,
                    0, &res);
    assert_int_equal(res.exit_code, 1); /* not attached yet */
    sl_rt_exec_result_free(&res);
    run_with_mounts(warm, "cat /envs/tpl/f; kill -0 $(cat /tmp/bg) && echo ALIVE", one, 1, &res);
    assert_int_equal(res.exit_code, 0);
    assert_string_equal(text(&res.out), "A\nALIVE\n");
    sl_rt_exec_result_free(&res);
    run_with_mounts(warm, "cat /envs/tpl/f /envs/other/f; touch /envs/other/x 2>/dev/null || echo RO; "
                          "kill -0 $(cat /tmp/bg) && echo ALIVE",
                    two, 2, &res);
    assert_string_equal(text(&res.out), "B\nA\nRO\nALIVE\n");
    sl_rt_exec_result_free(&res);
    run_with_mounts(warm, "ls -A /envs/tpl | wc -l; kill -0 $(cat /tmp/bg) && echo ALIVE", NULL,
                    0, &res);
    assert_string_equal(text(&res.out), "0\nALIVE\n");
    sl_rt_exec_result_free(&res);
    sl_rt_close(warm);
    assert_no_sandbox_process_left();
}

int main(void)
{
    if (geteuid() != 0) {
        printf("test_runtime: SKIP: needs root (real namespaces and id maps)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_profile),
        cmocka_unit_test(test_echo),
        cmocka_unit_test(test_uid_and_ownership),
        cmocka_unit_test(test_exit_code),
        cmocka_unit_test(test_command_killed_by_signal),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_background_job_does_not_hold_the_call),
        cmocka_unit_test(test_output_truncated),
        cmocka_unit_test(test_missing_cwd),
        cmocka_unit_test(test_system_trees_read_only),
        cmocka_unit_test(test_proc_only_sandbox_processes),
        cmocka_unit_test(test_host_tree_hidden),
        cmocka_unit_test(test_hostname_is_the_hosts),
        cmocka_unit_test(test_no_capabilities),
        cmocka_unit_test(test_no_host_groups),
        cmocka_unit_test(test_seccomp_policy),
        cmocka_unit_test(test_session_keyring_not_shared),
        cmocka_unit_test(test_nested_user_namespace_denied),
        cmocka_unit_test(test_path_lookup),
        cmocka_unit_test(test_python_runtime),
        cmocka_unit_test(test_only_stdio_open),
        cmocka_unit_test(test_network_isolated),
        cmocka_unit_test(test_strict_cgroup_namespace),
        cmocka_unit_test(test_setup_failures),
        cmocka_unit_test(test_template_mounts),
        cmocka_unit_test(test_concurrent_execs),
        cmocka_unit_test(test_init_forwards_sigterm),
        cmocka_unit_test(test_sandbox_dies_with_daemon),
        cmocka_unit_test(test_no_zombie),
        cmocka_unit_test(test_no_zombie),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
