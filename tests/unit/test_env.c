/* Unit tests for runtime/env.c: managed PATH and environment order,
 * toolchains, caller-name rules, proxy rotation, and the login-shell
 * .profile writer. The configuration comes from sl_config_load() with a
 * clean environment, so the defaults under test are the real ones. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"
#include "runtime/env.h"

extern char **environ;

#define DEFAULT_PATH                                                                               \
    "/opt/agent-sandbox/python-runtime/bin:/envs/uv-tools/bin:/envs/python-venv/bin:"              \
    "/envs/npm-global/bin:/envs/pnpm:/home/sandbox/.local/bin:/usr/local/bin:/usr/bin:/bin"

static void clear_sandbox_env(void)
{
    char *names[512];
    size_t n = 0;
    for (char **e = environ; *e && n < 512; e++)
        if (strncmp(*e, "SANDBOX_", 8) == 0 || strncmp(*e, "BLOBSTORE_", 10) == 0 ||
            strncmp(*e, "AUTO_PORT0=", 11) == 0)
            names[n++] = strndup(*e, strcspn(*e, "="));
    for (size_t i = 0; i < n; i++) {
        unsetenv(names[i]);
        free(names[i]);
    }
}

/* Defaults plus the given NAME=value settings (NULL-terminated). */
static void load_config(struct sl_config *cfg, const char *const *settings)
{
    clear_sandbox_env();
    for (; settings && *settings; settings++) {
        const char *eq = strchr(*settings, '=');
        char *name = strndup(*settings, (size_t)(eq - *settings));
        setenv(name, eq + 1, 1);
        free(name);
    }
    struct sl_error err = {0};
    if (sl_config_load(cfg, "/nonexistent/sl-test-env/.env", &err) != 0)
        fail_msg("config load failed: %s", err.message);
    clear_sandbox_env();
}

static const char *env_get(const struct sl_env *env, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < env->len; i++)
        if (strncmp(env->vars[i], key, klen) == 0 && env->vars[i][klen] == '=')
            return env->vars[i] + klen + 1;
    return NULL;
}

static ssize_t env_index(const struct sl_env *env, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < env->len; i++)
        if (strncmp(env->vars[i], key, klen) == 0 && env->vars[i][klen] == '=')
            return (ssize_t)i;
    return -1;
}

/* ------------------------------------------------------------------------- */

static void test_default_path(void **state)
{
    (void)state;
    struct sl_config cfg;
    load_config(&cfg, NULL);
    char *path = sl_env_managed_path(&cfg);
    assert_string_equal(path, DEFAULT_PATH);
    free(path);

    struct sl_env env;
    struct sl_error err = {0};
    assert_int_equal(sl_env_build(&cfg, NULL, NULL, 0, 0, &env, &err), 0);
    assert_string_equal(env.path, DEFAULT_PATH);
    assert_string_equal(env_get(&env, "PATH"), DEFAULT_PATH);
    sl_env_free(&env);
    sl_config_free(&cfg);
}

static void test_default_order(void **state)
{
    (void)state;
    struct sl_config cfg;
    load_config(&cfg, NULL);
    struct sl_env env;
    struct sl_error err = {0};
    assert_int_equal(sl_env_build(&cfg, NULL, NULL, 0, 7, &env, &err), 0);

    static const char *const want[] = {
        "HOME=/home/sandbox",
        "TMPDIR=/tmp",
        "TMP=/tmp",
        "TEMP=/tmp",
        "XDG_CACHE_HOME=/cache",
        "PIP_CACHE_DIR=/cache/pip",
        "PIP_INDEX_URL=https://pypi.org/simple/",
        "UV_INDEX_URL=https://pypi.org/simple/",
        "UV_CACHE_DIR=/cache/uv",
        "UV_PYTHON_DOWNLOADS=never",
        "UV_PROJECT_ENVIRONMENT=/workspace/.venv",
        "UV_TOOL_DIR=/envs/uv-tools",
        "UV_TOOL_BIN_DIR=/envs/uv-tools/bin",
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONNOUSERSITE=1",
        "PYTHONPATH=/opt/agent-sandbox/runtime:/envs/python-venv/lib/python3.11/site-packages",
        "npm_config_cache=/cache/npm",
        "npm_config_registry=https://registry.npmjs.org",
        "npm_config_prefix=/envs/npm-global",
        "PNPM_HOME=/envs/pnpm",
        "YARN_CACHE_FOLDER=/cache/yarn",
        "YARN_NPM_REGISTRY_SERVER=https://registry.npmjs.org",
        "PATH=" DEFAULT_PATH,
        "LANG=C.UTF-8",
    };
    size_t n = sizeof(want) / sizeof(want[0]);
    assert_int_equal(env.len, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(env.vars[i], want[i]);
    assert_null(env.vars[n]);
    /* No proxies configured: no proxy variables. */
    assert_null(env_get(&env, "HTTP_PROXY"));
    assert_null(env_get(&env, "no_proxy"));
    sl_env_free(&env);
    sl_config_free(&cfg);
}

/* Where the Go toolchain is on this host, as the runtime must find it:
 * /usr/local/go when installed there, else above bin/ of what /usr/bin/go
 * resolves to (Debian's golang-go), else /usr/local/go. */
static const char *expected_go_root(void)
{
    static char root[PATH_MAX];
    snprintf(root, sizeof(root), "/usr/local/go");
    char real[PATH_MAX];
    if (access("/usr/local/go/bin/go", X_OK) != 0 && realpath("/usr/bin/go", real)) {
        char *bin = strstr(real, "/bin/go");
        if (bin && bin[7] == '\0') {
            *bin = '\0';
            snprintf(root, sizeof(root), "%s", real);
        }
    }
    return root;
}

static void test_all_toolchains(void **state)
{
    (void)state;
    struct sl_config cfg;
    static const char *const plain[] = {"SANDBOX_TOOLCHAINS=rust,java,go,node,python", NULL};
    load_config(&cfg, plain);
    char *path = sl_env_managed_path(&cfg);
    char want_path[PATH_MAX + 512];
    snprintf(want_path, sizeof(want_path),
             "/envs/cargo/bin:/usr/local/cargo/bin:/envs/java/bin:"
             "/envs/go/bin:%s/bin:/envs/npm-global/bin:/envs/pnpm:"
             "/opt/agent-sandbox/python-runtime/bin:/envs/uv-tools/bin:"
             "/envs/python-venv/bin:/home/sandbox/.local/bin:/usr/local/bin:"
             "/usr/bin:/bin",
             expected_go_root());
    assert_string_equal(path, want_path);
    free(path);
    struct sl_env env;
    struct sl_error err = {0};
    assert_int_equal(sl_env_build(&cfg, NULL, NULL, 0, 0, &env, &err), 0);
    assert_string_equal(env_get(&env, "GOPROXY"), "https://proxy.golang.org,direct");
    assert_string_equal(env_get(&env, "GOSUMDB"), "sum.golang.org");
    assert_string_equal(env_get(&env, "GOMAXPROCS"), "4");
    /* The host's Go, wherever it is installed. */
    assert_string_equal(env_get(&env, "GOROOT"), expected_go_root());
    /* pnpm's setting is not given to npm (it warns about it). */
    assert_null(env_get(&env, "npm_config_store_dir"));
    assert_string_equal(env_get(&env, "CARGO_NET_RETRY"), "3");
    assert_string_equal(env_get(&env, "MAVEN_OPTS"), "-Dmaven.repo.local=/cache/maven");
    /* Conditional ones are absent while their settings are empty. */
    assert_null(env_get(&env, "CARGO_REGISTRIES_CRATES_IO_INDEX"));
    assert_null(env_get(&env, "MAVEN_MIRROR_URL"));
    assert_null(env_get(&env, "JAVA_HOME"));
    /* Toolchain variables follow SANDBOX_TOOLCHAINS order. */
    assert_true(env_index(&env, "CARGO_HOME") < env_index(&env, "MAVEN_OPTS"));
    assert_true(env_index(&env, "MAVEN_OPTS") < env_index(&env, "GOPATH"));
    assert_true(env_index(&env, "GOPATH") < env_index(&env, "npm_config_cache"));
    assert_true(env_index(&env, "npm_config_cache") < env_index(&env, "PIP_CACHE_DIR"));
    assert_true(env_index(&env, "PIP_CACHE_DIR") < env_index(&env, "PATH"));
    sl_env_free(&env);
    assert_int_equal(sl_env_validate_config(&cfg, &err), 0);
    sl_config_free(&cfg);

    static const char *const extra[] = {
        "SANDBOX_TOOLCHAINS=java,rust",
        "SANDBOX_JAVA_HOME=/usr/lib/jvm/java-17",
        "SANDBOX_MAVEN_REPOSITORY_URL=https://maven.example/repo",
        "SANDBOX_CARGO_REGISTRY_URL=sparse+https://crates.example/index/",
        "SANDBOX_RUST_LAUNCHER_DIR=/opt/rust-launcher/bin",
        NULL,
    };
    load_config(&cfg, extra);
    assert_int_equal(sl_env_build(&cfg, NULL, NULL, 0, 0, &env, &err), 0);
    assert_string_equal(env.path, "/envs/java/bin:/usr/lib/jvm/java-17/bin:/envs/cargo/bin:"
                                  "/opt/rust-launcher/bin:/usr/local/cargo/bin:"
                                  "/home/sandbox/.local/bin:/usr/local/bin:/usr/bin:/bin");
    assert_string_equal(env_get(&env, "JAVA_HOME"), "/usr/lib/jvm/java-17");
    assert_string_equal(env_get(&env, "MAVEN_MIRROR_URL"), "https://maven.example/repo");
    assert_string_equal(env_get(&env, "CARGO_REGISTRIES_CRATES_IO_INDEX"),
                        "sparse+https://crates.example/index/");
    sl_env_free(&env);
    sl_config_free(&cfg);
}

static void test_path_dedup(void **state)
{
    (void)state;
    struct sl_config cfg;
    char java_home[PATH_MAX + 32];
    snprintf(java_home, sizeof(java_home), "SANDBOX_JAVA_HOME=%s", expected_go_root());
    const char *const s[] = {"SANDBOX_TOOLCHAINS=go,java", java_home, NULL};
    load_config(&cfg, s);
    char *path = sl_env_managed_path(&cfg);
    /* <go root>/bin comes from go and from JAVA_HOME: listed once. */
    char want[PATH_MAX + 128];
    snprintf(want, sizeof(want),
             "/envs/go/bin:%s/bin:/envs/java/bin:/home/sandbox/.local/bin:/usr/local/bin:"
             "/usr/bin:/bin",
             expected_go_root());
    assert_string_equal(path, want);
    free(path);
    sl_config_free(&cfg);
}

static void expect_reserved(const struct sl_config *cfg, const char *name)
{
    const char *keys[] = {"OK_FIRST", name};
    const char *values[] = {"1", "x"};
    struct sl_env env;
    struct sl_error err = {0};
    if (sl_env_build(cfg, keys, values, 2, 0, &env, &err) == 0)
        fail_msg("%s was accepted", name);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    char want[256];
    snprintf(want, sizeof(want),
             "this environment variable is sandbox-managed and cannot be overridden: %s", name);
    assert_string_equal(err.message, want);
    assert_null(env.vars);
}

static void expect_accepted(const struct sl_config *cfg, const char *name)
{
    const char *keys[] = {name};
    const char *values[] = {"v"};
    struct sl_env env;
    struct sl_error err = {0};
    if (sl_env_build(cfg, keys, values, 1, 0, &env, &err) != 0)
        fail_msg("%s was refused: %s", name, err.message);
    assert_string_equal(env_get(&env, name), "v");
    sl_env_free(&env);
}

static void test_reserved_names(void **state)
{
    (void)state;
    struct sl_config cfg;
    load_config(&cfg, NULL);
    static const char *const reserved[] = {
        "PATH",
        "path",
        "Home",
        "LANG",
        "LC_ALL",
        "BASH_ENV",
        "ENV",
        "TMPDIR",
        "TMP",
        "TEMP",
        "XDG_CACHE_HOME",
        "http_proxy",
        "HTTPS_PROXY",
        "no_proxy",
        "LD_PRELOAD",
        "ld_library_path",
        "LD_",
        "PIP_X",
        "pip_index_url",
        "UV_ANYTHING",
        "PYTHONPATH",
        "PYTHONNOUSERSITE",
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION",
        "npm_config_cache",
        "NPM_CONFIG_REGISTRY",
        "PNPM_HOME",
        "PNPM_OTHER",
        "YARN_ENABLE",
        "LD_1-not-a-name",
    };
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        expect_reserved(&cfg, reserved[i]);
    /* Not reserved with the default toolchains. */
    static const char *const free_names[] = {
        "GOPATH",         "CARGO_HOME", "JAVA_HOME", "MAVEN_OPTS",
        "PYTHONHASHSEED", "ALL_PROXY",  "_private",  "LDX"};
    for (size_t i = 0; i < sizeof(free_names) / sizeof(free_names[0]); i++)
        expect_accepted(&cfg, free_names[i]);
    sl_config_free(&cfg);

    static const char *const others[] = {"SANDBOX_TOOLCHAINS=go,rust,java", NULL};
    load_config(&cfg, others);
    static const char *const reserved2[] = {
        "GOPATH",           "goflags",          "GOOGLE_KEY",     "CARGO_HOME",
        "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER",    "RUSTFLAGS",      "MAVEN_OPTS",
        "MAVEN_MIRROR_URL", "GRADLE_USER_HOME", "SBT_OPTS",       "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",    "CLASSPATH",        "classpath_extra"};
    for (size_t i = 0; i < sizeof(reserved2) / sizeof(reserved2[0]); i++)
        expect_reserved(&cfg, reserved2[i]);
    /* JAVA_HOME is only managed when SANDBOX_JAVA_HOME is set; PIP_ only with python. */
    expect_accepted(&cfg, "JAVA_HOME");
    expect_accepted(&cfg, "PIP_INDEX_URL");
    sl_config_free(&cfg);

    static const char *const jh[] = {"SANDBOX_TOOLCHAINS=java", "SANDBOX_JAVA_HOME=/jdk", NULL};
    load_config(&cfg, jh);
    expect_reserved(&cfg, "java_home");
    sl_config_free(&cfg);
}

static void expect_invalid(const struct sl_config *cfg, const char *name, const char *want)
{
    const char *keys[] = {name};
    const char *values[] = {"x"};
    struct sl_env env;
    struct sl_error err = {0};
    if (sl_env_build(cfg, keys, values, 1, 0, &env, &err) == 0)
        fail_msg("%s was accepted", name);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, want);
}

static void test_invalid_names(void **state)
{
    (void)state;
    struct sl_config cfg;
    load_config(&cfg, NULL);
    expect_invalid(&cfg, "1BAD", "invalid environment variable name: '1BAD'");
    expect_invalid(&cfg, "A-B", "invalid environment variable name: 'A-B'");
    expect_invalid(&cfg, "", "invalid environment variable name: ''");
    expect_invalid(&cfg, "A B", "invalid environment variable name: 'A B'");
    expect_invalid(&cfg, "A=B", "invalid environment variable name: 'A=B'");
    expect_invalid(&cfg, "it's", "invalid environment variable name: \"it's\"");
    expect_invalid(&cfg, "x\ny", "invalid environment variable name: 'x\\ny'");
    expect_invalid(&cfg, "caf\xc3\xa9", "invalid environment variable name: 'caf\xc3\xa9'");
    sl_config_free(&cfg);
}

static void test_caller_vars(void **state)
{
    (void)state;
    struct sl_config cfg;
    load_config(&cfg, NULL);
    const char *keys[] = {"FOO", "ZED", "FOO", "EQ"};
    const char *values[] = {"bar", "1", "baz", "a=b=c"};
    struct sl_env env;
    struct sl_error err = {0};
    assert_int_equal(sl_env_build(&cfg, keys, values, 4, 0, &env, &err), 0);
    /* Appended after the managed ones; a repeated key keeps its first slot. */
    assert_string_equal(env.vars[env.len - 3], "FOO=baz");
    assert_string_equal(env.vars[env.len - 2], "ZED=1");
    assert_string_equal(env.vars[env.len - 1], "EQ=a=b=c");
    assert_string_equal(env.vars[env.len - 4], "LANG=C.UTF-8");
    assert_null(env.vars[env.len]);
    sl_env_free(&env);
    sl_config_free(&cfg);
}

static void test_proxies(void **state)
{
    (void)state;
    struct sl_config cfg;
    static const char *const s[] = {
        "SANDBOX_HTTP_PROXIES=proxy-a:3128, https://proxy-b:8443 ,socks5://proxy-c:1080",
        "SANDBOX_NO_PROXY=localhost,.internal", NULL};
    load_config(&cfg, s);
    static const char *const want[] = {"http://proxy-a:3128", "https://proxy-b:8443",
                                       "socks5://proxy-c:1080", "http://proxy-a:3128"};
    for (unsigned i = 0; i < 4; i++) {
        struct sl_env env;
        struct sl_error err = {0};
        const char *keys[] = {"MINE"};
        const char *values[] = {"1"};
        assert_int_equal(sl_env_build(&cfg, keys, values, 1, i, &env, &err), 0);
        assert_string_equal(env_get(&env, "HTTP_PROXY"), want[i]);
        assert_string_equal(env_get(&env, "HTTPS_PROXY"), want[i]);
        assert_string_equal(env_get(&env, "http_proxy"), want[i]);
        assert_string_equal(env_get(&env, "https_proxy"), want[i]);
        assert_string_equal(env_get(&env, "NO_PROXY"), "localhost,.internal");
        assert_string_equal(env_get(&env, "no_proxy"), "localhost,.internal");
        /* Order: LANG, the six proxy variables, then the caller's. */
        static const char *const order[] = {"LANG",       "HTTP_PROXY",  "HTTPS_PROXY",
                                            "http_proxy", "https_proxy", "NO_PROXY",
                                            "no_proxy",   "MINE"};
        ssize_t lang = env_index(&env, "LANG");
        assert_int_equal(lang + 8, (ssize_t)env.len);
        for (size_t k = 0; k < 8; k++)
            assert_int_equal(env_index(&env, order[k]), lang + (ssize_t)k);
        sl_env_free(&env);
    }
    sl_config_free(&cfg);
}

static void test_validate_config(void **state)
{
    (void)state;
    struct sl_config cfg;
    struct sl_error err = {0};
    static const char *const s[] = {"SANDBOX_TOOLCHAINS=python,node,go,rust,java",
                                    "SANDBOX_JAVA_HOME=/jdk", NULL};
    load_config(&cfg, s);
    assert_int_equal(sl_env_validate_config(&cfg, &err), 0);
    /* A struct built by hand with an unknown name is refused. */
    assert_int_equal(sl_strlist_push(&cfg.toolchains, "cobol"), 0);
    assert_int_equal(sl_env_validate_config(&cfg, &err), -1);
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_non_null(strstr(err.message, "SANDBOX_TOOLCHAINS"));
    sl_config_free(&cfg);
}

/* ------------------------------------------------------------------------- */
/* .profile */

struct profile_fixture {
    char root[PATH_MAX - 64];
    char home[PATH_MAX];
    char profile[PATH_MAX + 16];
    char tmp[PATH_MAX + 32];
    int root_fd;
};

static int profile_setup(void **state)
{
    struct profile_fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->root, sizeof(fx->root), "%s/sl-test-env-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(fx->root))
        return -1;
    snprintf(fx->home, sizeof(fx->home), "%s/home", fx->root);
    snprintf(fx->profile, sizeof(fx->profile), "%s/.profile", fx->home);
    snprintf(fx->tmp, sizeof(fx->tmp), "%s/.profile.agent-sandbox", fx->home);
    if (mkdir(fx->home, 0700) != 0)
        return -1;
    fx->root_fd = open(fx->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fx->root_fd < 0)
        return -1;
    *state = fx;
    return 0;
}

static int profile_teardown(void **state)
{
    struct profile_fixture *fx = *state;
    close(fx->root_fd);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->root);
    if (system(cmd) != 0)
        return -1;
    free(fx);
    return 0;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_profile_write(void **state)
{
    struct profile_fixture *fx = *state;
    struct sl_error err = {0};
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, DEFAULT_PATH, &err), 0);

    const char *text = read_text(fx->profile);
    assert_non_null(text);
    const char *lines[5];
    char copy[8192];
    snprintf(copy, sizeof(copy), "%s", text);
    size_t n = 0;
    char *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l && n < 5; l = strtok_r(NULL, "\n", &save))
        lines[n++] = l;
    assert_int_equal(n, 5);
    assert_string_equal(lines[0], "# managed by agent-sandbox: restores PATH after /etc/profile");
    assert_true(lines[1][0] == '#' && lines[2][0] == '#');
    assert_string_equal(lines[3], "PATH='" DEFAULT_PATH "'");
    assert_string_equal(lines[4], "export PATH");
    assert_int_equal(text[strlen(text) - 1], '\n');

    struct stat st;
    assert_int_equal(lstat(fx->profile, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(lstat(fx->tmp, &st), -1); /* temp renamed away */
    if (geteuid() == 0) {
        assert_int_equal(stat(fx->profile, &st), 0);
        assert_int_equal(st.st_uid, 12345);
        assert_int_equal(st.st_gid, 12345);
    } else {
        print_message("not root: skipping the owner (uid 12345) assertion\n");
    }
}

/* A profile that is already right is not rewritten (same inode), and a
 * changed PATH is written again. */
static void test_profile_unchanged_is_not_rewritten(void **state)
{
    struct profile_fixture *fx = *state;
    struct sl_error err = {0};
    uid_t uid = geteuid() == 0 ? 12345 : geteuid();
    assert_int_equal(sl_env_write_profile(fx->root_fd, uid, DEFAULT_PATH, &err), 0);
    struct stat a, b;
    assert_int_equal(stat(fx->profile, &a), 0);
    assert_int_equal(sl_env_write_profile(fx->root_fd, uid, DEFAULT_PATH, &err), 0);
    assert_int_equal(stat(fx->profile, &b), 0);
    assert_int_equal(a.st_ino, b.st_ino);
    assert_int_equal(sl_env_write_profile(fx->root_fd, uid, "/usr/bin:/bin", &err), 0);
    assert_int_equal(stat(fx->profile, &b), 0);
    assert_int_not_equal(a.st_ino, b.st_ino);
    assert_non_null(strstr(read_text(fx->profile), "PATH='/usr/bin:/bin'"));
}

struct profile_race {
    int root_fd;
    const char *path;
    int rc;
};

static void *profile_writer(void *arg)
{
    struct profile_race *r = arg;
    struct sl_error err = {0};
    for (int i = 0; i < 50 && r->rc == 0; i++)
        r->rc = sl_env_write_profile(r->root_fd, geteuid() == 0 ? 12345 : geteuid(),
                                     (i % 2) ? r->path : "/usr/bin:/bin", &err);
    return NULL;
}

/* Concurrent executions of one sandbox rewrite the profile at once; none of
 * them may fail (each writer has its own temporary file). */
static void test_profile_concurrent_writers(void **state)
{
    struct profile_fixture *fx = *state;
    pthread_t t[6];
    struct profile_race r[6];
    for (int i = 0; i < 6; i++) {
        r[i] = (struct profile_race){fx->root_fd, DEFAULT_PATH, 0};
        assert_int_equal(pthread_create(&t[i], NULL, profile_writer, &r[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].rc, 0);
    }
    const char *text = read_text(fx->profile);
    assert_non_null(strstr(text, "# managed by agent-sandbox"));
}

static void test_profile_quoting(void **state)
{
    struct profile_fixture *fx = *state;
    struct sl_error err = {0};
    const char *path = "/opt/it's here:/weird $HOME `x`:/bin";
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, path, &err), 0);
    const char *text = read_text(fx->profile);
    assert_non_null(strstr(text, "PATH='/opt/it'\\''s here:/weird $HOME `x`:/bin'\n"));
    /* sh reads the value back verbatim. */
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof(cmd), "sh -c '. \"$1\"; printf %%s \"$PATH\"' sh '%s'", fx->profile);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[512] = {0};
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_string_equal(out, path);
}

static void test_profile_user_owned(void **state)
{
    struct profile_fixture *fx = *state;
    struct sl_error err = {0};

    /* A user's .profile without the marker is left alone. */
    write_text(fx->profile, "export EDITOR=vi\n");
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, DEFAULT_PATH, &err), 0);
    assert_string_equal(read_text(fx->profile), "export EDITOR=vi\n");

    /* The marker past the first 400 bytes does not count. */
    char big[1024];
    memset(big, '#', 450);
    big[450] = '\n';
    strcpy(big + 451, "# managed by agent-sandbox\n");
    write_text(fx->profile, big);
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, DEFAULT_PATH, &err), 0);
    assert_string_equal(read_text(fx->profile), big);

    /* Our own older file is replaced. */
    write_text(fx->profile, "# managed by agent-sandbox: old\nPATH=/old\n");
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, "/new:/bin", &err), 0);
    assert_non_null(strstr(read_text(fx->profile), "PATH='/new:/bin'\n"));
}

static void test_profile_symlinks(void **state)
{
    struct profile_fixture *fx = *state;
    struct sl_error err = {0};
    char outside[PATH_MAX + 16];
    snprintf(outside, sizeof(outside), "%s/outside", fx->root);
    write_text(outside, "# managed by agent-sandbox\nhost file\n");

    /* A stale temp that is a symlink is removed, never written through. */
    assert_int_equal(symlink(outside, fx->tmp), 0);
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, DEFAULT_PATH, &err), 0);
    assert_string_equal(read_text(outside), "# managed by agent-sandbox\nhost file\n");
    struct stat st;
    assert_int_equal(lstat(fx->profile, &st), 0);
    assert_true(S_ISREG(st.st_mode));

    /* A .profile symlink (even to a file with the marker) is not followed
     * and not replaced. */
    assert_int_equal(unlink(fx->profile), 0);
    assert_int_equal(symlink(outside, fx->profile), 0);
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, DEFAULT_PATH, &err), 0);
    assert_int_equal(lstat(fx->profile, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_string_equal(read_text(outside), "# managed by agent-sandbox\nhost file\n");

    /* home itself a symlink: refused. */
    char moved[PATH_MAX + 16];
    snprintf(moved, sizeof(moved), "%s/realhome", fx->root);
    assert_int_equal(rename(fx->home, moved), 0);
    assert_int_equal(symlink(moved, fx->home), 0);
    assert_int_equal(sl_env_write_profile(fx->root_fd, 12345, DEFAULT_PATH, &err), -1);
    assert_string_equal(err.code, SL_E_RUNTIME);
    assert_null(strstr(err.message, fx->root)); /* no host path for clients */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_path),
        cmocka_unit_test(test_default_order),
        cmocka_unit_test(test_all_toolchains),
        cmocka_unit_test(test_path_dedup),
        cmocka_unit_test(test_reserved_names),
        cmocka_unit_test(test_invalid_names),
        cmocka_unit_test(test_caller_vars),
        cmocka_unit_test(test_proxies),
        cmocka_unit_test(test_validate_config),
        cmocka_unit_test_setup_teardown(test_profile_write, profile_setup, profile_teardown),
        cmocka_unit_test_setup_teardown(test_profile_unchanged_is_not_rewritten, profile_setup, profile_teardown),
        cmocka_unit_test_setup_teardown(test_profile_concurrent_writers, profile_setup, profile_teardown),
        cmocka_unit_test_setup_teardown(test_profile_quoting, profile_setup, profile_teardown),
        cmocka_unit_test_setup_teardown(test_profile_user_owned, profile_setup, profile_teardown),
        cmocka_unit_test_setup_teardown(test_profile_symlinks, profile_setup, profile_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
