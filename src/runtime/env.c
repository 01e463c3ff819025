/* The managed environment of a sandbox process (RUNTIME.md §5–§7.4,
 * API.md §4.5).
 *
 * The environment is built as an ordered key list. Setting a key that is
 * already present replaces its value in place and keeps its first position
 * (Python dict semantics, which is how the reference builds the launcher's
 * --setenv list); a new key is appended. */
#include "runtime/env.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "config/config.h"
#include "runtime/pyvenv.h"

#define ENV_PATH_TAIL "/home/sandbox/.local/bin:/usr/local/bin:/usr/bin:/bin"
#define PROFILE_MARKER "# managed by agent-sandbox"
#define PROFILE_MARKER_WINDOW 400
#define PROFILE_NAME ".profile"
#define PROFILE_TMP_NAME ".profile.agent-sandbox"

/* ---------------------------------------------------------------------------
 * Toolchain table (RUNTIME.md §6) */

/* One variable (key != NULL) or PATH entry (key == NULL). The value is either
 * a literal or a char * field of struct sl_config, optionally followed by a
 * suffix; `when_set` items are skipped while that field is NULL or empty. */
struct tc_item {
    const char *key;
    const char *literal;
    size_t field;
    bool from_cfg;
    bool when_set;
    const char *suffix;
    /* Or a value found on the host (a static string), with the suffix. */
    const char *(*host)(void);
};

struct toolchain {
    const char *name;
    struct tc_item vars[14]; /* terminated by an all-zero item */
    struct tc_item paths[4]; /* terminated by an all-zero item */
    const char *reserved_names[6];
    const char *reserved_prefixes[6];
};

/* clang-format off */
#define CFGF(f) offsetof(struct sl_config, f)
#define LIT(k, v) {.key = k, .literal = v}
#define CFG(k, f) {.key = k, .field = CFGF(f), .from_cfg = true}
#define CFG_IF(k, f) {.key = k, .field = CFGF(f), .from_cfg = true, .when_set = true}
#define PLIT(v) {.literal = v}
#define PCFG_IF(f, sfx) {.field = CFGF(f), .from_cfg = true, .when_set = true, .suffix = sfx}
#define HOST(k, fn) {.key = k, .host = fn}
#define PHOST(fn, sfx) {.host = fn, .suffix = sfx}
/* clang-format on */

/* Where Go is installed. The sandbox sees the host's /usr read-only, so
 * the toolchain is the host's: /usr/local/go (the upstream tarball, the
 * reference's image) when it is there, else the directory above bin/ of
 * the `go` that /usr/bin/go resolves to (Debian's golang-go:
 * /usr/lib/go-1.19). Found once; /usr/local/go when there is no Go at
 * all (the launch check then says missing). */
static char go_root_found[PATH_MAX];
static pthread_once_t go_root_once = PTHREAD_ONCE_INIT;
static void find_go_root(void)
{
    snprintf(go_root_found, sizeof(go_root_found), "/usr/local/go");
    if (access("/usr/local/go/bin/go", X_OK) == 0)
        return;
    char real[PATH_MAX];
    if (!realpath("/usr/bin/go", real))
        return;
    size_t n = strlen(real);
    static const char tail[] = "/bin/go";
    if (n > sizeof(tail) - 1 && strcmp(real + n - (sizeof(tail) - 1), tail) == 0)
        snprintf(go_root_found, sizeof(go_root_found), "%.*s", (int)(n - (sizeof(tail) - 1)),
                 real);
}
static const char *go_root(void)
{
    pthread_once(&go_root_once, find_go_root);
    return go_root_found;
}

/* The reference's PYTHONPATH, then the managed environment's packages
 * (runtime/pyvenv.h), so python3 imports what `pip install` put there. */
static char python_path_found[PATH_MAX];
static pthread_once_t python_path_once = PTHREAD_ONCE_INIT;
static void find_python_path(void)
{
    const char *ver = sl_pyvenv_python_version();
    if (ver)
        snprintf(python_path_found, sizeof(python_path_found),
                 "/opt/agent-sandbox/runtime:/envs/python-venv/lib/python%s/site-packages", ver);
    else
        snprintf(python_path_found, sizeof(python_path_found), "/opt/agent-sandbox/runtime");
}
static const char *python_path(void)
{
    pthread_once(&python_path_once, find_python_path);
    return python_path_found;
}

static const struct toolchain toolchains[] = {
    {.name = "python",
     .vars = {LIT("PIP_CACHE_DIR", "/cache/pip"), CFG("PIP_INDEX_URL", python_index_url),
              CFG("UV_INDEX_URL", python_index_url), LIT("UV_CACHE_DIR", "/cache/uv"),
              LIT("UV_PYTHON_DOWNLOADS", "never"),
              LIT("UV_PROJECT_ENVIRONMENT", "/workspace/.venv"),
              LIT("UV_TOOL_DIR", "/envs/uv-tools"), LIT("UV_TOOL_BIN_DIR", "/envs/uv-tools/bin"),
              LIT("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python"),
              LIT("PYTHONDONTWRITEBYTECODE", "1"), LIT("PYTHONNOUSERSITE", "1"),
              HOST("PYTHONPATH", python_path)},
     .paths = {PLIT("/opt/agent-sandbox/python-runtime/bin"), PLIT("/envs/uv-tools/bin"),
               PLIT("/envs/python-venv/bin")},
     .reserved_names = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONNOUSERSITE", "PYTHONPATH"},
     .reserved_prefixes = {"PIP_", "UV_"}},
    {.name = "node",
     .vars = {LIT("npm_config_cache", "/cache/npm"), CFG("npm_config_registry", npm_registry),
              /* Not npm_config_store_dir (the reference's): it is pnpm's
               * setting and npm warns about it on every run. pnpm's store
               * is $PNPM_HOME/store. */
              LIT("npm_config_prefix", "/envs/npm-global"), LIT("PNPM_HOME", "/envs/pnpm"),
              LIT("YARN_CACHE_FOLDER", "/cache/yarn"),
              CFG("YARN_NPM_REGISTRY_SERVER", npm_registry)},
     .paths = {PLIT("/envs/npm-global/bin"), PLIT("/envs/pnpm")},
     .reserved_names = {"PNPM_HOME"},
     .reserved_prefixes = {"NPM_CONFIG_", "PNPM_", "YARN_"}},
    {.name = "go",
     .vars = {LIT("GOMAXPROCS", "4"), LIT("GOPATH", "/envs/go"), LIT("GOMODCACHE", "/cache/go/mod"),
              LIT("GOCACHE", "/cache/go/build"), CFG("GOPROXY", go_proxy), CFG("GOSUMDB", go_sumdb),
              LIT("GOTOOLCHAIN", "local"), HOST("GOROOT", go_root)},
     .paths = {PLIT("/envs/go/bin"), PHOST(go_root, "/bin")},
     .reserved_prefixes = {"GO"}},
    {.name = "rust",
     .vars = {LIT("CARGO_HOME", "/envs/cargo"), LIT("RUSTUP_HOME", "/usr/local/rustup"),
              LIT("CARGO_TARGET_DIR", "/cache/cargo-target"), LIT("CARGO_NET_RETRY", "3"),
              CFG_IF("CARGO_REGISTRIES_CRATES_IO_INDEX", cargo_registry_url)},
     .paths = {PLIT("/envs/cargo/bin"), PCFG_IF(rust_launcher_dir, NULL),
               PLIT("/usr/local/cargo/bin")},
     .reserved_prefixes = {"CARGO_", "RUSTUP_", "RUSTC_", "RUSTFLAGS"}},
    {.name = "java",
     .vars = {LIT("MAVEN_OPTS", "-Dmaven.repo.local=/cache/maven"),
              LIT("GRADLE_USER_HOME", "/cache/gradle"),
              LIT("SBT_OPTS", "-Dsbt.global.base=/envs/sbt"),
              CFG_IF("MAVEN_MIRROR_URL", maven_repository_url), CFG_IF("JAVA_HOME", java_home)},
     .paths = {PLIT("/envs/java/bin"), PCFG_IF(java_home, "/bin")},
     .reserved_names = {"MAVEN_OPTS", "GRADLE_USER_HOME", "SBT_OPTS", "MAVEN_MIRROR_URL"},
     .reserved_prefixes = {"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH"}},
};

/* API.md §4.5: never settable by a caller, whatever the toolchains. */
static const char *const reserved_fixed[] = {
    "BASH_ENV", "ENV",  "HOME", "HTTP_PROXY", "HTTPS_PROXY", "LANG",           "LC_ALL",
    "NO_PROXY", "PATH", "TEMP", "TMP",        "TMPDIR",      "XDG_CACHE_HOME",
};
/* The dynamic loader's variables would let a caller inject code into every
 * process of the sandbox, including the managed shell. */
static const char *const reserved_fixed_prefixes[] = {"LD_"};

static bool tc_item_end(const struct tc_item *it)
{
    return !it->literal && !it->from_cfg && !it->host;
}

static const struct toolchain *tc_find(const char *name)
{
    for (size_t i = 0; i < SL_ARRAY_LEN(toolchains); i++)
        if (strcmp(toolchains[i].name, name) == 0)
            return &toolchains[i];
    return NULL;
}

/* The item's value under cfg: 1 and *out (owned) when set, 0 when skipped,
 * -1 when out of memory. */
static int tc_item_value(const struct sl_config *cfg, const struct tc_item *it, char **out)
{
    const char *base = it->host ? it->host() : it->literal;
    if (it->from_cfg) {
        base = *(char *const *)((const char *)cfg + it->field);
        if (it->when_set && (!base || !*base))
            return 0;
        if (!base)
            base = "";
    }
    if (asprintf(out, "%s%s", base, it->suffix ? it->suffix : "") < 0) {
        *out = NULL;
        return -1;
    }
    return 1;
}

/* ---------------------------------------------------------------------------
 * Ordered key list */

struct env_list {
    struct sl_strlist keys;
    struct sl_strlist values;
};

static void env_list_free(struct env_list *l)
{
    sl_strlist_free(&l->keys);
    sl_strlist_free(&l->values);
}

static int env_list_set(struct env_list *l, const char *key, const char *value)
{
    for (size_t i = 0; i < l->keys.len; i++) {
        if (strcmp(l->keys.items[i], key) == 0) {
            char *copy = strdup(value);
            if (!copy)
                return -1;
            free(l->values.items[i]);
            l->values.items[i] = copy;
            return 0;
        }
    }
    if (sl_strlist_push(&l->keys, key) < 0)
        return -1;
    if (sl_strlist_push(&l->values, value) < 0) {
        free(l->keys.items[--l->keys.len]);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Caller names (API.md §4.5) */

static bool env_name_valid(const char *name)
{
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_'))
        return false;
    for (const char *p = name + 1; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return false;
    return true;
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool upper_equal(const char *upper_name, const char *key)
{
    for (; *upper_name && *key; upper_name++, key++)
        if (*upper_name != toupper((unsigned char)*key))
            return false;
    return *upper_name == *key;
}

/* Reserved = the fixed list, LD_*, and per enabled toolchain: every variable
 * it sets under this config, its reserved names and prefixes; all compared
 * upper-cased. */
static int env_is_reserved(const struct sl_config *cfg, const char *name, bool *reserved)
{
    _cleanup_free_ char *upper = strdup(name);
    if (!upper)
        return -1;
    for (char *p = upper; *p; p++)
        *p = (char)toupper((unsigned char)*p);

    *reserved = true;
    for (size_t i = 0; i < SL_ARRAY_LEN(reserved_fixed); i++)
        if (strcmp(upper, reserved_fixed[i]) == 0)
            return 0;
    for (size_t i = 0; i < SL_ARRAY_LEN(reserved_fixed_prefixes); i++)
        if (has_prefix(upper, reserved_fixed_prefixes[i]))
            return 0;
    for (size_t t = 0; t < cfg->toolchains.len; t++) {
        const struct toolchain *tc = tc_find(cfg->toolchains.items[t]);
        if (!tc)
            continue;
        for (const struct tc_item *it = tc->vars; !tc_item_end(it); it++) {
            _cleanup_free_ char *value = NULL;
            int r = tc_item_value(cfg, it, &value);
            if (r < 0)
                return -1;
            if (r > 0 && upper_equal(upper, it->key))
                return 0;
        }
        for (size_t i = 0; i < SL_ARRAY_LEN(tc->reserved_names) && tc->reserved_names[i]; i++)
            if (strcmp(upper, tc->reserved_names[i]) == 0)
                return 0;
        for (size_t i = 0; i < SL_ARRAY_LEN(tc->reserved_prefixes) && tc->reserved_prefixes[i]; i++)
            if (has_prefix(upper, tc->reserved_prefixes[i]))
                return 0;
    }
    *reserved = false;
    return 0;
}

/* Python's repr() of a str, as the reference's message prints the name:
 * single quotes unless the name holds a single quote and no double quote. */
static void py_repr(const char *s, char *buf, size_t size)
{
    char quote = (strchr(s, '\'') && !strchr(s, '"')) ? '"' : '\'';
    size_t o = 0;
    if (size < 3) {
        if (size)
            buf[0] = '\0';
        return;
    }
    buf[o++] = quote;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < size; p++) {
        if (*p == '\\' || *p == (unsigned char)quote) {
            buf[o++] = '\\';
            buf[o++] = (char)*p;
        } else if (*p == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else if (*p == '\r') {
            buf[o++] = '\\';
            buf[o++] = 'r';
        } else if (*p == '\t') {
            buf[o++] = '\\';
            buf[o++] = 't';
        } else if (*p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", *p);
        } else {
            buf[o++] = (char)*p;
        }
    }
    buf[o++] = quote;
    buf[o] = '\0';
}

static int env_check_caller_name(const struct sl_config *cfg, const char *name,
                                 struct sl_error *err)
{
    bool reserved = false;
    if (env_is_reserved(cfg, name, &reserved) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    if (reserved)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                            "this environment variable is sandbox-managed and cannot be "
                            "overridden: %s",
                            name);
    if (!env_name_valid(name)) {
        char quoted[200];
        py_repr(name, quoted, sizeof(quoted));
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "invalid environment variable name: %s",
                            quoted);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Public functions */

int sl_env_validate_config(const struct sl_config *cfg, struct sl_error *err)
{
    for (size_t a = 0; a < cfg->toolchains.len; a++) {
        const struct toolchain *ta = tc_find(cfg->toolchains.items[a]);
        if (!ta)
            return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_TOOLCHAINS: unknown toolchain");
        for (size_t b = a + 1; b < cfg->toolchains.len; b++) {
            const struct toolchain *tb = tc_find(cfg->toolchains.items[b]);
            if (!tb)
                return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_TOOLCHAINS: unknown toolchain");
            for (const struct tc_item *x = ta->vars; !tc_item_end(x); x++) {
                for (const struct tc_item *y = tb->vars; !tc_item_end(y); y++) {
                    if (strcmp(x->key, y->key) != 0)
                        continue;
                    _cleanup_free_ char *vx = NULL, *vy = NULL;
                    int rx = tc_item_value(cfg, x, &vx), ry = tc_item_value(cfg, y, &vy);
                    if (rx < 0 || ry < 0)
                        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
                    if (rx > 0 && ry > 0 && strcmp(vx, vy) != 0)
                        return sl_error_set(err, SL_E_CONFIG, 0,
                                            "SANDBOX_TOOLCHAINS: toolchains %s and %s set %s to "
                                            "different values",
                                            ta->name, tb->name, x->key);
                }
            }
        }
    }
    return 0;
}

char *sl_env_managed_path(const struct sl_config *cfg)
{
    struct sl_strlist entries = {0};
    struct sl_buf path;
    sl_buf_init(&path, SIZE_MAX);
    for (size_t t = 0; t < cfg->toolchains.len; t++) {
        const struct toolchain *tc = tc_find(cfg->toolchains.items[t]);
        if (!tc)
            continue;
        for (const struct tc_item *it = tc->paths; !tc_item_end(it); it++) {
            _cleanup_free_ char *entry = NULL;
            int r = tc_item_value(cfg, it, &entry);
            if (r < 0)
                goto fail;
            if (r == 0 || sl_strlist_contains(&entries, entry))
                continue;
            if (sl_strlist_push(&entries, entry) < 0 ||
                sl_buf_append(&path, entry, strlen(entry)) < 0 || sl_buf_append(&path, ":", 1) < 0)
                goto fail;
        }
    }
    if (sl_buf_append(&path, ENV_PATH_TAIL, strlen(ENV_PATH_TAIL)) < 0)
        goto fail;
    sl_strlist_free(&entries);
    return path.data;
fail:
    sl_strlist_free(&entries);
    sl_buf_free(&path);
    return NULL;
}

static int env_build_list(const struct sl_config *cfg, const char *const *caller_keys,
                          const char *const *caller_values, size_t n, unsigned proxy_index,
                          const char *path, struct env_list *l)
{
    static const char *const base[][2] = {
        {"HOME", "/home/sandbox"}, {"TMPDIR", "/tmp"},           {"TMP", "/tmp"},
        {"TEMP", "/tmp"},          {"XDG_CACHE_HOME", "/cache"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(base); i++)
        if (env_list_set(l, base[i][0], base[i][1]) < 0)
            return -1;

    for (size_t t = 0; t < cfg->toolchains.len; t++) {
        const struct toolchain *tc = tc_find(cfg->toolchains.items[t]);
        if (!tc)
            continue;
        for (const struct tc_item *it = tc->vars; !tc_item_end(it); it++) {
            _cleanup_free_ char *value = NULL;
            int r = tc_item_value(cfg, it, &value);
            if (r < 0 || (r > 0 && env_list_set(l, it->key, value) < 0))
                return -1;
        }
    }

    if (env_list_set(l, "PATH", path) < 0 || env_list_set(l, "LANG", "C.UTF-8") < 0)
        return -1;

    if (cfg->http_proxies.len > 0) {
        const char *proxy = cfg->http_proxies.items[proxy_index % cfg->http_proxies.len];
        _cleanup_free_ char *url = NULL;
        if (asprintf(&url, "%s%s", strstr(proxy, "://") ? "" : "http://", proxy) < 0) {
            url = NULL;
            return -1;
        }
        static const char *const proxy_keys[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                                                 "https_proxy"};
        for (size_t i = 0; i < SL_ARRAY_LEN(proxy_keys); i++)
            if (env_list_set(l, proxy_keys[i], url) < 0)
                return -1;
        const char *no_proxy = cfg->no_proxy ? cfg->no_proxy : "";
        if (env_list_set(l, "NO_PROXY", no_proxy) < 0 || env_list_set(l, "no_proxy", no_proxy) < 0)
            return -1;
    }

    for (size_t i = 0; i < n; i++)
        if (env_list_set(l, caller_keys[i], caller_values[i] ? caller_values[i] : "") < 0)
            return -1;
    return 0;
}

int sl_env_build(const struct sl_config *cfg, const char *const *caller_keys,
                 const char *const *caller_values, size_t n, unsigned proxy_index,
                 struct sl_env *out, struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < n; i++)
        if (env_check_caller_name(cfg, caller_keys[i], err) < 0)
            return -1;

    _cleanup_free_ char *path = sl_env_managed_path(cfg);
    if (!path)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    struct env_list l = {0};
    if (env_build_list(cfg, caller_keys, caller_values, n, proxy_index, path, &l) < 0)
        goto oom;

    out->vars = calloc(l.keys.len + 1, sizeof(*out->vars));
    if (!out->vars)
        goto oom;
    for (size_t i = 0; i < l.keys.len; i++) {
        if (asprintf(&out->vars[i], "%s=%s", l.keys.items[i], l.values.items[i]) < 0) {
            out->vars[i] = NULL;
            goto oom;
        }
        out->len++;
    }
    out->path = steal_ptr(path);
    env_list_free(&l);
    return 0;
oom:
    env_list_free(&l);
    sl_env_free(out);
    return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
}

bool sl_env_is_managed_as(const struct sl_config *cfg, const char *name, const char *value)
{
    bool reserved = false;
    if (env_is_reserved(cfg, name, &reserved) < 0 || !reserved)
        return false;
    struct sl_env env;
    struct sl_error err = {0};
    if (sl_env_build(cfg, NULL, NULL, 0, 0, &env, &err) < 0)
        return false;
    /* The locale categories (LC_ALL, LC_CTYPE ...) are the managed LANG's
     * when unset: the same value names the same locale. */
    const char *as = strncmp(name, "LC_", 3) == 0 ? "LANG" : name;
    bool same = false;
    size_t n = strlen(as);
    for (size_t i = 0; i < env.len && !same; i++)
        same = strncmp(env.vars[i], as, n) == 0 && env.vars[i][n] == '=' &&
               strcmp(env.vars[i] + n + 1, value) == 0;
    sl_env_free(&env);
    return same;
}

void sl_env_free(struct sl_env *env)
{
    if (!env)
        return;
    for (size_t i = 0; env->vars && i < env->len; i++)
        free(env->vars[i]);
    free(env->vars);
    free(env->path);
    memset(env, 0, sizeof(*env));
}

/* ---------------------------------------------------------------------------
 * Login-shell .profile (RUNTIME.md §7.4) */

/* PATH='<value>' with every ' written as '\'' so sh reads the value back
 * verbatim. */
static char *profile_content(const char *managed_path)
{
    struct sl_buf b;
    sl_buf_init(&b, SIZE_MAX);
    static const char head[] =
        PROFILE_MARKER ": restores PATH after /etc/profile\n"
                       "# /etc/profile resets PATH for login shells (sh -lc, bash -lc); this file\n"
                       "# puts the sandbox PATH back so login and plain shells see the same PATH.\n"
                       "PATH='";
    if (sl_buf_append(&b, head, sizeof(head) - 1) < 0)
        goto fail;
    for (const char *p = managed_path; *p; p++) {
        int r = *p == '\'' ? sl_buf_append(&b, "'\\''", 4) : sl_buf_append(&b, p, 1);
        if (r < 0)
            goto fail;
    }
    if (sl_buf_append(&b, "'\nexport PATH\n", 14) < 0)
        goto fail;
    return b.data;
fail:
    sl_buf_free(&b);
    return NULL;
}

/* True when <home>/.profile exists and is not ours: a regular file whose
 * first 400 bytes lack the marker, or anything else (a symlink or special
 * file the sandbox user made; never followed or opened). */
/* *user_owned: a .profile exists that is not ours (no marker, or not a
 * regular file). *current: ours, already holding exactly `want`, owned by
 * uid with mode 0644, so nothing needs writing. */
static int profile_inspect(int home_fd, const char *want, uid_t uid, bool *user_owned,
                           bool *current, struct sl_error *err)
{
    struct stat st;
    *user_owned = false;
    *current = false;
    if (fstatat(home_fd, PROFILE_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return 0;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot inspect the sandbox login profile");
    }
    if (!S_ISREG(st.st_mode)) {
        *user_owned = true;
        return 0;
    }
    _cleanup_close_ int fd =
        openat(home_fd, PROFILE_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        if (errno == ELOOP) { /* swapped for a symlink since the fstatat */
            *user_owned = true;
            return 0;
        }
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open the sandbox login profile");
    }
    if (fstat(fd, &st) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot inspect the sandbox login profile");
    if (!S_ISREG(st.st_mode)) {
        *user_owned = true;
        return 0;
    }
    size_t want_len = strlen(want);
    size_t cap = want_len + 1 > PROFILE_MARKER_WINDOW ? want_len + 1 : PROFILE_MARKER_WINDOW;
    _cleanup_free_ char *head = malloc(cap);
    if (!head)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    size_t len = 0;
    while (len < cap) {
        ssize_t r = SL_RETRY(read(fd, head + len, cap - len));
        if (r < 0)
            return sl_error_errno(err, SL_E_RUNTIME, "cannot read the sandbox login profile");
        if (r == 0)
            break;
        len += (size_t)r;
    }
    size_t window = len < PROFILE_MARKER_WINDOW ? len : PROFILE_MARKER_WINDOW;
    *user_owned = memmem(head, window, PROFILE_MARKER, strlen(PROFILE_MARKER)) == NULL;
    *current = !*user_owned && len == want_len && memcmp(head, want, want_len) == 0 &&
               (geteuid() != 0 || uid == 0 || st.st_uid == uid) && (st.st_mode & 07777) == 0644;
    return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t r = SL_RETRY(write(fd, data, len));
        if (r < 0)
            return -1;
        data += r;
        len -= (size_t)r;
    }
    return 0;
}

int sl_env_write_profile(int sandbox_root_fd, uid_t uid, const char *managed_path,
                         struct sl_error *err)
{
    /* home/ is writable by the sandbox user, who may plant symlinks there:
     * every step is relative to a directory fd and refuses to follow one. */
    _cleanup_close_ int home_fd =
        openat(sandbox_root_fd, "home", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (home_fd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open the sandbox home directory");

    _cleanup_free_ char *content = profile_content(managed_path);
    if (!content)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    bool user_owned = false, current = false;
    if (profile_inspect(home_fd, content, uid, &user_owned, &current, err) < 0)
        return -1;
    /* Nothing to do in the common case: the profile is already right. */
    if (user_owned || current)
        return 0;

    /* A per-writer temporary name: concurrent executions of one sandbox may
     * rewrite the profile at the same moment, and each rename is atomic. */
    char tmp_name[sizeof(PROFILE_TMP_NAME) + 40], hex[17];
    if (sl_random_hex(hex, 8) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "no randomness");
    snprintf(tmp_name, sizeof(tmp_name), "%s-%s", PROFILE_TMP_NAME, hex);
    /* O_EXCL: never write through whatever may have appeared at this name. */
    _cleanup_close_ int fd = openat(home_fd, tmp_name,
                                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot create the sandbox login profile");

    const char *failed = NULL;
    if (write_all(fd, content, strlen(content)) < 0)
        failed = "cannot write the sandbox login profile";
    else if (geteuid() == 0 && uid != 0 && fchown(fd, uid, uid) < 0)
        failed = "cannot chown the sandbox login profile";
    else if (fchmod(fd, 0644) < 0)
        failed = "cannot chmod the sandbox login profile";
    /* No fsync: the file is rewritten before every execution, so only
     * atomicity for concurrent readers matters, which rename gives. */
    else if (renameat(home_fd, tmp_name, home_fd, PROFILE_NAME) < 0)
        failed = "cannot replace the sandbox login profile";
    if (failed) {
        sl_error_errno(err, SL_E_RUNTIME, "%s", failed);
        int saved = errno;
        unlinkat(home_fd, tmp_name, 0);
        errno = saved;
        return -1;
    }
    return 0;
}
