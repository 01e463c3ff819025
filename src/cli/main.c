/* sandloom: the service from a shell. A user names a sandbox; the CLI finds
 * its generation (cli/sandbox.c). Errors are one line, "sandloom: CODE:
 * message", with the service's stable code; `exec` exits with the command's
 * own exit code. --json prints the service's answer instead, for scripts.
 *
 * Configuration, first found wins: flags, then SANDLOOM_URL /
 * SANDLOOM_API_KEY / SANDLOOM_SCOPE, then the config file ($SANDLOOM_CONFIG,
 * else ~/.config/sandloom/config: "url = ...", "api_key = ...",
 * "scope = ..." lines, '#' comments), then http://127.0.0.1:8080, scope
 * "default". */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cli/copy.h"
#include "cli/follow.h"
#include "common/cleanup.h"
#include "cli/http.h"
#include "cli/mcp_bridge.h"
#include "cli/sandbox.h"
#include "cli/shell.h"

/* Exit statuses besides a command's own (exec). */
#define EXIT_REFUSED 1 /* the service refused, or could not be reached */
#define EXIT_USAGE 2
#define EXIT_TIMED_OUT 124 /* as timeout(1) */

#define DEFAULT_URL "http://127.0.0.1:8080"
#define CALL_TIMEOUT_S 60L
/* A command's request waits for the command, plus this. */
#define EXEC_GRACE_S 30L

struct options {
    char *url, *api_key, *scope;
    /* Where each came from, for doctor: "flag", "environment", a path. */
    const char *url_from, *key_from, *scope_from;
    char config_path[4096];
    bool json;
};

static const char USAGE[] =
    "usage: sandloom [--url URL] [--scope SCOPE] [--json] COMMAND ...\n"
    "\n"
    "  create NAME              make the sandbox (or find it) and bring it up\n"
    "  info NAME                its route: status, generation, worker\n"
    "  rm NAME                  release it: processes and workspace are destroyed\n"
    "  suspend NAME             stop its processes, keep its files, free the slot\n"
    "  resume NAME              bring a suspended sandbox back\n"
    "  exec [-t SECONDS] [-C DIR] [-e K=V]... NAME -- CMD [ARG]...\n"
    "                           run CMD inside; its output goes to this terminal\n"
    "                           and its exit code is sandloom's (124: timed out,\n"
    "                           128+N: killed by signal N)\n"
    "  shell NAME [--attach ID] a terminal in the sandbox (a login shell), on this\n"
    "                           one; --attach: the running terminal ID again (its\n"
    "                           recent screen first); exits with the shell's code\n"
    "  cat NAME PATH            print a file of the sandbox\n"
    "  ls                       the sandboxes this key may see (a tenant's own)\n"
    "  ls NAME [PATH]           list a directory of the sandbox (/workspace)\n"
    "  cp [-r] LOCAL NAME:PATH  copy a file into the sandbox (-r: a directory's\n"
    "                           contents into PATH, made if missing)\n"
    "  cp [-r] NAME:PATH LOCAL  copy out of it ('-': standard output); a\n"
    "                           progress line on a terminal for 1 MiB or more\n"
    "  network NAME             its network: mode, egress policy, state, denials\n"
    "  egress NAME [--default allow|deny] [--allow RULE]... [--deny RULE]...\n"
    "  egress NAME --inherit    set its egress policy (private network mode; a\n"
    "                           running sandbox gets it at once), or drop its\n"
    "                           own for its tenant's or the worker's. RULE: an\n"
    "                           IPv4 address or CIDR, or a name (example.com,\n"
    "                           *.example.com), each with an optional :PORT[-PORT]\n"
    "  doctor                   check the configuration, the service and the key\n"
    "  mcp                      MCP over stdio, relayed to the service with the key\n"
    "                           (for agents that only speak stdio)\n"
    "\n"
    "  templates ls                           the published templates\n"
    "  templates publish NAME TEMPLATE [PATH] publish PATH (default /envs) of\n"
    "                                         sandbox NAME as TEMPLATE\n"
    "  templates attach NAME TEMPLATE[@DIGEST]...\n"
    "                                         mount them, read-only, at /envs/TEMPLATE\n"
    "  templates rm TEMPLATE                  unpublish it (attached ones stay)\n"
    "\n"
    "  admin tenants [ls]                     the tenants (operator only)\n"
    "  admin tenants create ID [LIMIT=N]...   a tenant, with its quotas\n"
    "  admin tenants show ID                  one, with its usage\n"
    "  admin quotas ID LIMIT=N|LIMIT=none...  change a tenant's quotas\n"
    "  admin keys ID [ls]                     a tenant's API keys\n"
    "  admin keys ID create NAME [--expires TIMESTAMP]\n"
    "                                         a new key, printed once\n"
    "  admin keys ID revoke KEY_ID            revoke one, at once\n"
    "     LIMIT: sandboxes, running_sessions, commands_in_flight,\n"
    "     workspace_bytes, sandbox_memory_bytes, sandbox_pids, sandbox_cpu_millis\n"
    "\n"
    "  --url URL        the service (SANDLOOM_URL; default " DEFAULT_URL ")\n"
    "  --scope SCOPE    the workspace scope names are resolved in\n"
    "                   (SANDLOOM_SCOPE; default \"default\")\n"
    "  --json           print the service's answers as JSON, for scripts\n"
    "\n"
    "The key (a tenant's API key or the internal token) comes from\n"
    "SANDLOOM_API_KEY or the config file ($SANDLOOM_CONFIG, else\n"
    "~/.config/sandloom/config), whose lines are \"url = ...\", \"api_key = ...\",\n"
    "\"scope = ...\". Errors are one line: sandloom: CODE: message (exit 1).\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "sandloom: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(sandloom --help for usage)\n");
    return EXIT_USAGE;
}

static int refused(const struct options *o, const struct cli_error *e)
{
    if (o->json) {
        json_t *doc = json_pack("{s:{s:s,s:s,s:I}}", "error", "code", e->code, "message",
                                e->message, "status", (json_int_t)e->status);
        json_dumpf(doc, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(doc);
    }
    fprintf(stderr, "sandloom: %s: %s\n", e->code, e->message);
    return EXIT_REFUSED;
}

static void print_json(const json_t *doc)
{
    json_dumpf(doc, stdout, JSON_COMPACT | JSON_SORT_KEYS);
    putchar('\n');
}

/* ---- configuration ---------------------------------------------------- */

static char *trimmed(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Fills what flags and the environment left unset. A missing file is
 * fine; an unreadable or malformed one is said, not ignored. */
static int read_config(struct options *o)
{
    char *path = o->config_path;
    const size_t path_size = sizeof(o->config_path);
    const char *given = getenv("SANDLOOM_CONFIG");
    const char *home = getenv("HOME");
    if (given && *given)
        snprintf(path, path_size, "%s", given);
    else if (home && *home)
        snprintf(path, path_size, "%s/.config/sandloom/config", home);
    else
        return 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && !(given && *given))
            return 0;
        fprintf(stderr, "sandloom: CLI_CONFIG: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *s = trimmed(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(stderr, "sandloom: CLI_CONFIG: %s:%d: expected key = value\n", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *key = trimmed(s), *value = trimmed(eq + 1);
        char **slot = strcmp(key, "url") == 0       ? &o->url
                      : strcmp(key, "api_key") == 0 ? &o->api_key
                      : strcmp(key, "scope") == 0   ? &o->scope
                                                    : NULL;
        const char **from = slot == &o->url ? &o->url_from
                            : slot == &o->api_key ? &o->key_from : &o->scope_from;
        if (!slot) {
            fprintf(stderr, "sandloom: CLI_CONFIG: %s:%d: unknown key '%s' (url, api_key, scope)\n",
                    path, lineno, key);
            rc = -1;
            break;
        }
        if (!*slot) {
            if (!(*slot = strdup(value))) {
                rc = -1;
                break;
            }
            *from = path;
        }
    }
    fclose(f);
    return rc;
}

static char *env_dup(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? strdup(v) : NULL;
}

/* ---- commands ----------------------------------------------------------- */

struct ctx {
    struct options *o;
    struct cli_conn conn;
};

static struct cli_sandbox sandbox_of(struct ctx *c, const char *name)
{
    return (struct cli_sandbox){.conn = &c->conn, .name = name, .scope = c->o->scope};
}

/* A name made of letters and digits of one case or both, plus the
 * punctuation in `extra`, at most `max` bytes: the ids the API spells, so
 * nothing else reaches a path unescaped. */
static bool spelled_with(const char *name, bool upper, const char *extra, size_t max)
{
    if (!*name || strlen(name) > max)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (upper && *p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || strchr(extra, *p)))
            return false;
    return true;
}

/* A sandbox id: [A-Za-z0-9_.:-], at most 128. */
static bool valid_name(const char *name)
{
    return spelled_with(name, true, "_.:-", 128);
}

/* One answer printed: as JSON with --json, else by `human` (none: quiet). */
static void print_answer(const struct options *o, const json_t *doc,
                         void (*human)(const json_t *doc))
{
    if (o->json)
        print_json(doc);
    else if (human)
        human(doc);
}

static int route_info(struct ctx *c, const char *name, bool after_create)
{
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s", name);
    json_t *doc = NULL;
    struct cli_error e;
    if (cli_call(&c->conn, "GET", path, NULL, CALL_TIMEOUT_S, &doc, &e) < 0)
        return refused(c->o, &e);
    if (c->o->json) {
        print_json(doc);
    } else {
        const char *status = json_string_value(json_object_get(doc, "status"));
        printf("%s\t%s\tgeneration %lld", name, status ? status : "?",
               (long long)json_integer_value(json_object_get(doc, "generation")));
        if (!after_create) {
            const char *worker = json_string_value(json_object_get(doc, "worker_id"));
            printf("\tuid %lld\tworker %s",
                   (long long)json_integer_value(json_object_get(doc, "sandbox_uid")),
                   worker ? worker : "-");
        }
        putchar('\n');
    }
    json_decref(doc);
    return 0;
}

static int cmd_create(struct ctx *c, const char *name)
{
    struct cli_sandbox sb = sandbox_of(c, name);
    struct cli_error e;
    if (cli_sandbox_open(&sb, &e) < 0)
        return refused(c->o, &e);
    return route_info(c, name, true);
}

static int cmd_rm(struct ctx *c, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s", name);
    json_t *doc = NULL;
    struct cli_error e;
    if (cli_call(&c->conn, "DELETE", path, NULL, CALL_TIMEOUT_S, &doc, &e) < 0)
        return refused(c->o, &e);
    if (c->o->json)
        print_json(doc);
    json_decref(doc);
    return 0;
}

static int cmd_suspend(struct ctx *c, const char *name)
{
    /* Resolve only: opening would wake a suspended sandbox. */
    json_t *doc = NULL, *body = json_pack("{s:s,s:s}", "sandbox_id", name, "workspace_scope_id",
                                          c->o->scope);
    struct cli_error e;
    int rc = cli_call(&c->conn, "POST", "/api/v1/sandboxes/resolve", body, CALL_TIMEOUT_S, &doc,
                      &e);
    json_decref(body);
    if (rc < 0)
        return refused(c->o, &e);
    struct cli_sandbox sb = sandbox_of(c, name);
    sb.generation = json_integer_value(json_object_get(doc, "generation"));
    json_decref(doc);
    body = json_object();
    rc = cli_sandbox_call(&sb, "POST", "/suspend", "", body, CALL_TIMEOUT_S * 5, &doc, &e);
    json_decref(body);
    if (rc < 0)
        return refused(c->o, &e);
    if (c->o->json)
        print_json(doc);
    json_decref(doc);
    return 0;
}

static int cmd_resume(struct ctx *c, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s/resume", name);
    json_t *doc = NULL;
    struct cli_error e;
    if (cli_call(&c->conn, "POST", path, NULL, CALL_TIMEOUT_S * 5, &doc, &e) < 0)
        return refused(c->o, &e);
    if (c->o->json)
        print_json(doc);
    json_decref(doc);
    return 0;
}

/* The command's ending as sandloom's exit status. */
static int exit_status_of(const json_t *rec)
{
    const char *status = json_string_value(json_object_get(rec, "status"));
    json_t *code = json_object_get(rec, "exit_code");
    if (status && strcmp(status, "TIMED_OUT") == 0)
        return EXIT_TIMED_OUT;
    if (!json_is_integer(code))
        return EXIT_REFUSED;
    json_int_t n = json_integer_value(code);
    if (n < 0)
        return 128 + (int)(-n & 0x7f); /* killed by signal -n */
    return (int)(n & 0xff);
}

static int cmd_exec(struct ctx *c, int argc, char **argv)
{
    long timeout = 0;
    const char *cwd = NULL;
    json_t *env = json_object();
    int opt;
    optind = 1;
    while ((opt = getopt(argc, argv, "+t:C:e:")) != -1) {
        char *end = NULL;
        switch (opt) {
        case 't':
            timeout = strtol(optarg, &end, 10);
            if (!*optarg || *end || timeout < 1) {
                json_decref(env);
                return usage_error("exec -t wants a whole number of seconds, not '%s'", optarg);
            }
            break;
        case 'C':
            cwd = optarg;
            break;
        case 'e': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg) {
                json_decref(env);
                return usage_error("exec -e wants NAME=VALUE, not '%s'", optarg);
            }
            *eq = '\0';
            json_object_set_new(env, optarg, json_string(eq + 1));
            break;
        }
        default:
            json_decref(env);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc || !valid_name(argv[optind])) {
        json_decref(env);
        return usage_error("exec wants a sandbox name, then -- and a command%s", "");
    }
    const char *name = argv[optind++];
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc) {
        json_decref(env);
        return usage_error("exec %s: no command given (sandloom exec NAME -- CMD ...)", name);
    }
    json_t *cmd = json_array();
    for (int i = optind; i < argc; i++)
        json_array_append_new(cmd, json_string(argv[i]));
    unsigned char rnd[16];
    char exec_id[64] = "cli-";
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        json_decref(env);
        json_decref(cmd);
        fprintf(stderr, "sandloom: CLI_INTERNAL: no random bytes for an exec id\n");
        return EXIT_REFUSED;
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(exec_id + 4 + 2 * i, 3, "%02x", rnd[i]);
    json_t *body = json_pack("{s:s,s:o}", "exec_id", exec_id, "argv", cmd);
    if (json_object_size(env))
        json_object_set(body, "env", env);
    json_decref(env);
    if (cwd)
        json_object_set_new(body, "cwd", json_string(cwd));
    if (timeout)
        json_object_set_new(body, "timeout_seconds", json_integer(timeout));

    struct cli_sandbox sb = sandbox_of(c, name);
    struct cli_error e;
    json_t *rec = NULL;
    int rc = cli_sandbox_open(&sb, &e);
    long wait_s = (timeout ? timeout : 300) + EXEC_GRACE_S;
    /* The human form follows the output as it comes; --json answers the
     * record once, as the API's synchronous call does. */
    bool follow = !c->o->json;
    if (rc == 0 && follow)
        rc = cli_follow_exec(&sb, body, exec_id, wait_s, &rec, &e);
    else if (rc == 0)
        rc = cli_sandbox_call(&sb, "POST", "/exec", "", body, wait_s, &rec, &e);
    json_decref(body);
    if (rc < 0)
        return refused(c->o, &e);
    /* Followed, the output is out already (all of it: a gap, if the
     * service ever had to drop some, was said where it happened). */
    if (!follow)
        print_json(rec);
    int status = exit_status_of(rec);
    json_decref(rec);
    return status;
}

static int cmd_shell(struct ctx *c, const char *name, const char *attach)
{
    struct cli_sandbox sb = sandbox_of(c, name);
    struct cli_error e;
    json_t *end = NULL;
    if (cli_sandbox_open(&sb, &e) < 0 || cli_shell(&sb, attach, &end, &e) < 0)
        return refused(c->o, &e);
    int status = end ? exit_status_of(end) : 0;
    json_decref(end);
    return status;
}

static int cmd_cat(struct ctx *c, const char *name, const char *path)
{
    struct sl_buf data = {0};
    struct cli_error e;
    struct cli_sandbox sb = sandbox_of(c, name);
    if (cli_sandbox_open(&sb, &e) < 0 || cli_read_file(&sb, path, &data, &e) < 0)
        return refused(c->o, &e);
    bool ok = fwrite(data.data, 1, data.len, stdout) == data.len;
    sl_buf_free(&data);
    return ok ? 0 : EXIT_REFUSED;
}

static void print_entry(const json_t *entry)
{
    const char *type = json_string_value(json_object_get(entry, "type"));
    const char *name = json_string_value(json_object_get(entry, "name"));
    printf("%-9s %12lld  %s%s\n", type ? type : "?",
           (long long)json_integer_value(json_object_get(entry, "size_bytes")), name ? name : "?",
           type && strcmp(type, "directory") == 0 ? "/" : "");
}

/* Every page of a listing, one call per page: the items of each under
 * `key` into one array (*all), so nothing past the first page is left out
 * unsaid. A page is `page` items: &limit=&offset= on `path_query` (the
 * route's own query, or its path when sb is NULL). */
static int list_all(struct ctx *c, struct cli_sandbox *sb, const char *route,
                    const char *path_query, const char *key, int page, json_t **all,
                    struct cli_error *e)
{
    *all = json_array();
    for (long offset = 0; *all;) {
        char *query = NULL;
        if (asprintf(&query, "%s%climit=%d&offset=%ld", path_query,
                     strchr(path_query, '?') ? '&' : '?', page, offset) < 0) {
            snprintf(e->code, sizeof(e->code), "CLI_INTERNAL");
            snprintf(e->message, sizeof(e->message), "out of memory");
            break;
        }
        json_t *doc = NULL;
        int rc = sb ? cli_sandbox_call(sb, "GET", route, query, NULL, CALL_TIMEOUT_S, &doc, e)
                    : cli_call(&c->conn, "GET", query, NULL, CALL_TIMEOUT_S, &doc, e);
        free(query);
        if (rc < 0)
            break;
        json_t *items = json_object_get(doc, key);
        size_t got = json_array_size(items);
        json_array_extend(*all, items);
        long total = (long)json_integer_value(json_object_get(doc, "total"));
        json_decref(doc);
        offset += (long)got;
        if (got == 0 || offset >= total)
            return 0;
    }
    json_decref(*all);
    *all = NULL;
    return -1;
}

static int cmd_ls(struct ctx *c, const char *name, const char *path)
{
    struct cli_sandbox sb = sandbox_of(c, name);
    struct cli_error e;
    if (cli_sandbox_open(&sb, &e) < 0)
        return refused(c->o, &e);
    char *escaped = cli_escape(path), *query = NULL;
    if (!escaped || asprintf(&query, "?path=%s", escaped) < 0) {
        free(escaped);
        return EXIT_REFUSED;
    }
    free(escaped);
    json_t *entries = NULL;
    int rc = list_all(c, &sb, "/files/list", query, "entries", 1000, &entries, &e);
    free(query);
    if (rc < 0)
        return refused(c->o, &e);
    json_t *doc = json_pack("{s:s,s:o,s:I}", "path", path, "entries", entries, "total",
                            (json_int_t)json_array_size(entries));
    if (c->o->json) {
        print_json(doc);
    } else {
        size_t i;
        json_t *entry;
        json_array_foreach(entries, i, entry)
            print_entry(entry);
    }
    json_decref(doc);
    return 0;
}

/* The caller's sandboxes: a tenant's own, or with the internal token all. */
static int cmd_list(struct ctx *c)
{
    json_t *all = NULL;
    struct cli_error e;
    if (list_all(c, NULL, NULL, "/api/v1/sandboxes", "sandboxes", 200, &all, &e) < 0)
        return refused(c->o, &e);
    json_t *doc = json_pack("{s:o,s:I}", "sandboxes", all, "total",
                            (json_int_t)json_array_size(all));
    if (c->o->json) {
        print_json(doc);
    } else {
        size_t i;
        json_t *s;
        json_array_foreach(all, i, s) {
            const char *scope = json_string_value(json_object_get(s, "workspace_scope_id"));
            printf("%s\t%s\tgeneration %lld\tscope %s\n",
                   json_string_value(json_object_get(s, "sandbox_id")),
                   json_string_value(json_object_get(s, "status")),
                   (long long)json_integer_value(json_object_get(s, "generation")),
                   scope ? scope : "-");
        }
    }
    json_decref(doc);
    return 0;
}

/* "NAME:PATH" names a file of a sandbox; anything else is local. */
static bool split_remote(char *arg, char **name, char **path)
{
    char *colon = strchr(arg, ':');
    if (!colon || colon[1] != '/')
        return false;
    *colon = '\0';
    if (!valid_name(arg)) {
        *colon = ':';
        return false;
    }
    *name = arg;
    *path = colon + 1;
    return true;
}

static int cmd_cp(struct ctx *c, int argc, char **argv)
{
    bool recursive = false;
    int opt;
    optind = 1;
    while ((opt = getopt(argc, argv, "+r")) != -1) {
        if (opt != 'r')
            return EXIT_USAGE;
        recursive = true;
    }
    if (argc - optind != 2)
        return usage_error("cp wants [-r] SOURCE DESTINATION%s", "");
    char *src = argv[optind], *dst = argv[optind + 1];
    char *name, *path;
    struct cli_error e;
    struct cli_sandbox sb;
    /* Progress only where someone watches, and never into a script's JSON. */
    bool progress = isatty(STDERR_FILENO) && !c->o->json;
    int rc;
    if (split_remote(src, &name, &path)) {
        sb = sandbox_of(c, name);
        rc = cli_download(&sb, path, dst, recursive, progress, &e);
    } else if (split_remote(dst, &name, &path)) {
        sb = sandbox_of(c, name);
        rc = cli_upload(&sb, src, path, recursive, progress, &e);
    } else {
        return usage_error("cp: one side must be NAME:/PATH (a sandbox's file), not '%s'", dst);
    }
    if (rc < 0 && strcmp(e.code, "CLI_USAGE") == 0)
        return usage_error("cp: %s", e.message);
    return rc < 0 ? refused(c->o, &e) : 0;
}

/* One check's line: "ok   what  detail" or "FAIL what  detail". */
static void check_line(const struct options *o, json_t *report, const char *what, bool ok,
                       const char *detail)
{
    json_array_append_new(json_object_get(report, "checks"),
                          json_pack("{s:s,s:b,s:s}", "check", what, "ok", ok, "detail", detail));
    if (!o->json)
        printf("%-4s %-9s %s\n", ok ? "ok" : "FAIL", what, detail);
}

/* What a user asks first when nothing works: which service, which key,
 * and does the service take it. Exit 0 when every check passed. */
static int cmd_doctor(struct ctx *c)
{
    struct options *o = c->o;
    json_t *report = json_pack("{s:s,s:s,s:[]}", "url", o->url, "scope", o->scope, "checks");
    char line[8448]; /* a URL or config path of up to 4096, and words */
    bool all = true;
    snprintf(line, sizeof(line), "%s (from %s)", o->url, o->url_from ? o->url_from : "the default");
    check_line(o, report, "url", true, line);
    bool has_key = o->api_key && *o->api_key;
    if (has_key)
        snprintf(line, sizeof(line), "set (from %s; %zu characters)", o->key_from, strlen(o->api_key));
    else
        snprintf(line, sizeof(line), "none: set SANDLOOM_API_KEY or api_key in %s",
                 o->config_path[0] ? o->config_path : "~/.config/sandloom/config");
    check_line(o, report, "key", has_key, line);
    all = all && has_key;

    json_t *doc = NULL;
    struct cli_error e;
    if (cli_call(&c->conn, "GET", "/healthz", NULL, 10, &doc, &e) < 0) {
        snprintf(line, sizeof(line), "%s: %s", e.code, e.message);
        check_line(o, report, "service", false, line);
        all = false;
    } else {
        const char *status = json_string_value(json_object_get(doc, "status"));
        snprintf(line, sizeof(line), "answers /healthz (status %s)", status ? status : "?");
        check_line(o, report, "service", true, line);
        json_decref(doc);
        doc = NULL;
        if (has_key) {
            /* A tenant's key says who it is; the internal token is no
             * tenant (404 TENANT_NOT_FOUND) but is taken. */
            int rc = cli_call(&c->conn, "GET", "/api/v1/tenant", NULL, 10, &doc, &e);
            if (rc == 0) {
                const char *tid = json_string_value(json_object_get(doc, "tenant_id"));
                snprintf(line, sizeof(line), "accepted: tenant %s", tid ? tid : "?");
                check_line(o, report, "auth", true, line);
                json_object_set(report, "tenant", doc);
            } else if (strcmp(e.code, "TENANT_NOT_FOUND") == 0) {
                check_line(o, report, "auth", true, "accepted: the operator's internal token");
            } else {
                snprintf(line, sizeof(line), "%s: %s", e.code, e.message);
                check_line(o, report, "auth", false, line);
                all = false;
            }
            json_decref(doc);
        }
    }
    json_object_set_new(report, "ok", json_boolean(all));
    if (o->json)
        print_json(report);
    json_decref(report);
    return all ? 0 : EXIT_REFUSED;
}

/* ---- templates ------------------------------------------------------------- */

static void print_template(const json_t *t)
{
    const char *desc = json_string_value(json_object_get(t, "description"));
    printf("%s\t%s\t%lld bytes%s%s\n", json_string_value(json_object_get(t, "name")),
           json_string_value(json_object_get(t, "digest")),
           (long long)json_integer_value(json_object_get(t, "size_bytes")),
           desc && *desc ? "\t" : "", desc && *desc ? desc : "");
}

static void print_templates(const json_t *doc)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(doc, "templates"), i, t)
        print_template(t);
}

/* A template's name: [a-z0-9._-], at most 64; the operator may name a
 * tenant's by its stored name, "<tenant_id>~<name>". The service judges
 * the rest. */
static bool valid_template(const char *name)
{
    return spelled_with(name, false, "._-~", 97);
}

static int sandbox_answer(struct ctx *c, const char *name, const char *method, json_t *body,
                          void (*human)(const json_t *doc))
{
    struct cli_sandbox sb = sandbox_of(c, name);
    struct cli_error e;
    json_t *doc = NULL;
    int rc = cli_sandbox_open(&sb, &e);
    if (rc == 0)
        rc = cli_sandbox_call(&sb, method, "/templates", "", body, CALL_TIMEOUT_S * 5, &doc, &e);
    json_decref(body);
    if (rc < 0)
        return refused(c->o, &e);
    print_answer(c->o, doc, human);
    json_decref(doc);
    return 0;
}

static void print_attached(const json_t *doc)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(doc, "templates"), i, t)
        printf("%s\t%s\t/envs/%s\n", json_string_value(json_object_get(t, "name")),
               json_string_value(json_object_get(t, "digest")),
               json_string_value(json_object_get(t, "name")));
}

static int admin_call(struct ctx *c, const char *method, const char *path, json_t *body,
                      void (*human)(const json_t *doc));

static void print_rules(const char *label, const json_t *list)
{
    printf("  %s", label);
    if (json_array_size(list) == 0)
        printf(" (none)");
    size_t i;
    json_t *r;
    json_array_foreach(list, i, r) printf(" %s", json_string_value(r));
    putchar('\n');
}

static void print_network(const json_t *doc)
{
    const json_t *eg = json_object_get(doc, "egress");
    const char *addr = json_string_value(json_object_get(doc, "address"));
    const char *error = json_string_value(json_object_get(doc, "error"));
    printf("mode %s, %s%s%s\n", json_string_value(json_object_get(doc, "network_mode")),
           json_string_value(json_object_get(doc, "state")), addr ? " at " : "", addr ? addr : "");
    if (error)
        printf("  error: %s\n", error);
    printf("egress (%s's): default %s\n", json_string_value(json_object_get(doc, "egress_source")),
           json_string_value(json_object_get(eg, "default")));
    print_rules("allow", json_object_get(eg, "allow"));
    print_rules("deny", json_object_get(eg, "deny"));
    const json_t *bound = json_object_get(doc, "tenant_bound");
    if (json_is_object(bound))
        printf("within the tenant's policy (default %s)\n",
               json_string_value(json_object_get(bound, "default")));
    printf("denied: %lld packets, %lld names\n",
           (long long)json_integer_value(json_object_get(doc, "denied_connections")),
           (long long)json_integer_value(json_object_get(doc, "refused_names")));
}

/* network NAME, egress NAME [options]: GET or PUT /network. */
static int cmd_network(struct ctx *c, int argc, char **argv)
{
    bool set = strcmp(argv[0], "egress") == 0;
    static const struct option opts[] = {
        {"default", required_argument, NULL, 'd'}, {"allow", required_argument, NULL, 'a'},
        {"deny", required_argument, NULL, 'n'},    {"inherit", no_argument, NULL, 'i'},
        {NULL, 0, NULL, 0},
    };
    _cleanup_json_ json_t *egress = json_pack("{s:s,s:[],s:[]}", "default", "allow", "allow",
                                              "deny");
    bool inherit = false, any = false;
    int opt;
    optind = 0; /* 0: GNU getopt starts afresh, the permuting included */
    /* Options before or after the name (GNU getopt moves the name last). */
    while (set && (opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        any = true;
        if (opt == 'd' && (strcmp(optarg, "allow") == 0 || strcmp(optarg, "deny") == 0))
            json_object_set_new(egress, "default", json_string(optarg));
        else if (opt == 'd')
            return usage_error("egress --default is allow or deny, not '%s'", optarg);
        else if (opt == 'a' || opt == 'n')
            json_array_append_new(json_object_get(egress, opt == 'a' ? "allow" : "deny"),
                                  json_string(optarg));
        else if (opt == 'i')
            inherit = true;
        else
            return usage_error("egress NAME [--default allow|deny] [--allow RULE]... [--deny "
                               "RULE]... or --inherit%s",
                               "");
    }
    int first = set ? optind : 1;
    if (argc - first != 1 || !valid_name(argv[first]))
        return usage_error("%s wants one sandbox name", argv[0]);
    if (set && !any)
        return usage_error("egress %s: say the policy (--default, --allow, --deny) or --inherit",
                           argv[first]);
    if (inherit && json_array_size(json_object_get(egress, "allow")) +
                           json_array_size(json_object_get(egress, "deny")) >
                       0)
        return usage_error("egress --inherit takes no rules%s", "");
    struct cli_sandbox sb = sandbox_of(c, argv[first]);
    struct cli_error e;
    if (cli_sandbox_open(&sb, &e) < 0)
        return refused(c->o, &e);
    json_t *doc = NULL;
    int rc;
    if (set) {
        json_t *body = json_pack("{s:O}", "egress", inherit ? json_null() : egress);
        rc = cli_sandbox_call(&sb, "PUT", "/network", "", body, CALL_TIMEOUT_S, &doc, &e);
        json_decref(body);
    } else {
        rc = cli_sandbox_call(&sb, "GET", "/network", "", NULL, CALL_TIMEOUT_S, &doc, &e);
    }
    if (rc < 0)
        return refused(c->o, &e);
    if (c->o->json)
        print_json(doc);
    else
        print_network(doc);
    json_decref(doc);
    return 0;
}

static int cmd_templates(struct ctx *c, int argc, char **argv)
{
    const char *verb = argc > 1 ? argv[1] : "ls";
    if (strcmp(verb, "ls") == 0 && argc <= 2)
        return admin_call(c, "GET", "/api/v1/templates", NULL, print_templates);
    if (strcmp(verb, "publish") == 0 && (argc == 4 || argc == 5)) {
        if (!valid_name(argv[2]) || !valid_template(argv[3]))
            return usage_error("templates publish NAME TEMPLATE [PATH]: TEMPLATE is [a-z0-9._-]%s",
                               "");
        json_t *body = json_pack("{s:s,s:s}", "name", argv[3], "source_path",
                                 argc == 5 ? argv[4] : "/envs");
        return sandbox_answer(c, argv[2], "POST", body, print_template);
    }
    if (strcmp(verb, "attach") == 0 && argc >= 4) {
        if (!valid_name(argv[2]))
            return usage_error("templates attach wants a sandbox name%s", "");
        json_t *refs = json_array();
        for (int i = 3; i < argc; i++)
            json_array_append_new(refs, json_string(argv[i]));
        return sandbox_answer(c, argv[2], "PUT", json_pack("{s:o}", "templates", refs),
                              print_attached);
    }
    if (strcmp(verb, "rm") == 0 && argc == 3) {
        if (!valid_template(argv[2]))
            return usage_error("templates rm: '%s' is no template name ([a-z0-9._-])", argv[2]);
        char path[128];
        snprintf(path, sizeof(path), "/api/v1/templates/%s", argv[2]);
        return admin_call(c, "DELETE", path, NULL, NULL);
    }
    return usage_error("templates: ls, publish NAME TEMPLATE [PATH], attach NAME TEMPLATE... "
                       "or rm TEMPLATE%s", "");
}

/* ---- admin (the operator's token) ---------------------------------------- */

#define ADMIN_TENANTS "/api/v1/admin/tenants"

/* "k=v k=v" of a quotas object, or "none". */
static void print_limits(const json_t *quotas)
{
    const char *key;
    json_t *v;
    bool any = false;
    json_object_foreach((json_t *)quotas, key, v) {
        printf("%s%s=%lld", any ? " " : "", key, (long long)json_integer_value(v));
        any = true;
    }
    if (!any)
        printf("none");
}

/* LIMIT=N / LIMIT=none arguments as a quotas object (NULL: said why). */
static json_t *limits_of(int argc, char **argv)
{
    json_t *q = json_object();
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        char *end = NULL;
        if (!eq || eq == argv[i]) {
            usage_error("a quota is LIMIT=N or LIMIT=none, not '%s'", argv[i]);
            json_decref(q);
            return NULL;
        }
        *eq = '\0';
        const char *value = eq + 1;
        if (strcmp(value, "none") == 0) {
            json_object_set_new(q, argv[i], json_null());
            continue;
        }
        long long n = strtoll(value, &end, 10);
        if (!*value || *end || n < 0) {
            *eq = '=';
            usage_error("a quota is LIMIT=N (a whole number) or LIMIT=none, not '%s'", argv[i]);
            json_decref(q);
            return NULL;
        }
        json_object_set_new(q, argv[i], json_integer(n));
    }
    return q;
}

static void print_tenant(const json_t *t)
{
    printf("%s\tquotas ", json_string_value(json_object_get(t, "tenant_id")));
    print_limits(json_object_get(t, "quotas"));
    json_t *usage = json_object_get(t, "usage");
    if (usage) {
        printf("\tusage ");
        print_limits(usage);
    }
    putchar('\n');
}

/* One admin request; prints the answer as JSON or with `human`. */
static int admin_call(struct ctx *c, const char *method, const char *path, json_t *body,
                      void (*human)(const json_t *doc))
{
    json_t *doc = NULL;
    struct cli_error e;
    int rc = cli_call(&c->conn, method, path, body, CALL_TIMEOUT_S, &doc, &e);
    json_decref(body);
    if (rc < 0)
        return refused(c->o, &e);
    print_answer(c->o, doc, human);
    json_decref(doc);
    return 0;
}

static void print_tenants(const json_t *doc)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(doc, "tenants"), i, t)
        print_tenant(t);
}

static void print_keys(const json_t *doc)
{
    size_t i;
    json_t *k;
    json_array_foreach(json_object_get(doc, "keys"), i, k) {
        const char *exp = json_string_value(json_object_get(k, "expires_at"));
        printf("%s\t%s\t%s\texpires %s\n", json_string_value(json_object_get(k, "key_id")),
               json_string_value(json_object_get(k, "name")),
               json_string_value(json_object_get(k, "status")), exp ? exp : "never");
    }
}

/* The key alone on stdout, so `KEY=$(sandloom admin keys acme create ci)`
 * captures it; the reminder that it is shown once goes to stderr. */
static void print_new_key(const json_t *doc)
{
    printf("%s\n", json_string_value(json_object_get(doc, "api_key")));
    fprintf(stderr, "sandloom: key %s created; it is shown only now\n",
            json_string_value(json_object_get(doc, "key_id")));
}

/* A tenant id or key id: [a-z0-9-], at most 64. */
static bool valid_admin_id(const char *id)
{
    return spelled_with(id, false, "-", 64);
}

static int cmd_admin(struct ctx *c, int argc, char **argv)
{
    char path[256];
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "tenants") == 0) {
        const char *verb = argc > 2 ? argv[2] : "ls";
        if (strcmp(verb, "ls") == 0 && argc <= 3)
            return admin_call(c, "GET", ADMIN_TENANTS, NULL, print_tenants);
        if (argc < 4 || !valid_admin_id(argv[3]))
            return usage_error("admin tenants %s wants a tenant id ([a-z0-9-])", verb);
        if (strcmp(verb, "create") == 0) {
            json_t *q = limits_of(argc - 4, argv + 4);
            if (!q)
                return EXIT_USAGE;
            return admin_call(c, "POST", ADMIN_TENANTS,
                              json_pack("{s:s,s:o}", "tenant_id", argv[3], "quotas", q),
                              print_tenant);
        }
        if (strcmp(verb, "show") == 0 && argc == 4) {
            snprintf(path, sizeof(path), ADMIN_TENANTS "/%s", argv[3]);
            return admin_call(c, "GET", path, NULL, print_tenant);
        }
        return usage_error("admin tenants: ls, create ID [LIMIT=N]... or show ID%s", "");
    }
    if (strcmp(what, "quotas") == 0) {
        if (argc < 4 || !valid_admin_id(argv[2]))
            return usage_error("admin quotas wants a tenant id and LIMIT=N|LIMIT=none...%s", "");
        json_t *q = limits_of(argc - 3, argv + 3);
        if (!q)
            return EXIT_USAGE;
        snprintf(path, sizeof(path), ADMIN_TENANTS "/%s", argv[2]);
        return admin_call(c, "PATCH", path, json_pack("{s:o}", "quotas", q), print_tenant);
    }
    if (strcmp(what, "keys") == 0) {
        if (argc < 3 || !valid_admin_id(argv[2]))
            return usage_error("admin keys wants a tenant id ([a-z0-9-])%s", "");
        const char *verb = argc > 3 ? argv[3] : "ls";
        if (strcmp(verb, "ls") == 0 && argc <= 4) {
            snprintf(path, sizeof(path), ADMIN_TENANTS "/%s/keys", argv[2]);
            return admin_call(c, "GET", path, NULL, print_keys);
        }
        if (strcmp(verb, "create") == 0 && (argc == 5 || argc == 7)) {
            json_t *body = json_pack("{s:s}", "name", argv[4]);
            if (argc == 7) {
                if (strcmp(argv[5], "--expires") != 0) {
                    json_decref(body);
                    return usage_error("admin keys ID create NAME [--expires TIMESTAMP]%s", "");
                }
                json_object_set_new(body, "expires_at", json_string(argv[6]));
            }
            snprintf(path, sizeof(path), ADMIN_TENANTS "/%s/keys", argv[2]);
            return admin_call(c, "POST", path, body, print_new_key);
        }
        if (strcmp(verb, "revoke") == 0 && argc == 5 && valid_admin_id(argv[4])) {
            snprintf(path, sizeof(path), ADMIN_TENANTS "/%s/keys/%s", argv[2], argv[4]);
            return admin_call(c, "DELETE", path, NULL, NULL);
        }
        return usage_error("admin keys ID: ls, create NAME [--expires TIMESTAMP] or revoke KEY_ID%s",
                           "");
    }
    return usage_error("admin: tenants, quotas or keys (sandloom --help)%s", "");
}

/* ---- main ----------------------------------------------------------------- */

static int dispatch(struct ctx *c, int argc, char **argv)
{
    const char *cmd = argv[0];
    if (strcmp(cmd, "exec") == 0)
        return cmd_exec(c, argc, argv);
    if (strcmp(cmd, "admin") == 0)
        return cmd_admin(c, argc, argv);
    if (strcmp(cmd, "templates") == 0)
        return cmd_templates(c, argc, argv);
    if (strcmp(cmd, "doctor") == 0) {
        if (argc != 1)
            return usage_error("doctor takes no arguments%s", "");
        return cmd_doctor(c);
    }
    if (strcmp(cmd, "cp") == 0)
        return cmd_cp(c, argc, argv);
    if (strcmp(cmd, "network") == 0 || strcmp(cmd, "egress") == 0)
        return cmd_network(c, argc, argv);
    if (strcmp(cmd, "mcp") == 0) {
        if (argc != 1)
            return usage_error("mcp takes no arguments%s", "");
        return cli_mcp_bridge(&c->conn, stdin, stdout);
    }
    if (strcmp(cmd, "ls") == 0 && argc == 1)
        return cmd_list(c);
    if (argc < 2 || !valid_name(argv[1]))
        return usage_error("%s wants a sandbox name (letters, digits, _ . : -)", cmd);
    const char *name = argv[1];
    if (strcmp(cmd, "shell") == 0) {
        if (argc != 2 && !(argc == 4 && strcmp(argv[2], "--attach") == 0 && valid_name(argv[3])))
            return usage_error("shell wants NAME [--attach TERMINAL_ID]%s", "");
        return cmd_shell(c, name, argc == 4 ? argv[3] : NULL);
    }
    if (strcmp(cmd, "cat") == 0) {
        if (argc != 3)
            return usage_error("cat wants NAME PATH%s", "");
        return cmd_cat(c, name, argv[2]);
    }
    if (strcmp(cmd, "ls") == 0) {
        if (argc > 3)
            return usage_error("ls wants NAME [PATH]%s", "");
        return cmd_ls(c, name, argc == 3 ? argv[2] : "/workspace");
    }
    if (argc != 2)
        return usage_error("%s wants exactly one sandbox name", cmd);
    if (strcmp(cmd, "create") == 0)
        return cmd_create(c, name);
    if (strcmp(cmd, "info") == 0)
        return route_info(c, name, false);
    if (strcmp(cmd, "rm") == 0)
        return cmd_rm(c, name);
    if (strcmp(cmd, "suspend") == 0)
        return cmd_suspend(c, name);
    if (strcmp(cmd, "resume") == 0)
        return cmd_resume(c, name);
    return usage_error("unknown command '%s'", cmd);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},   {"scope", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct options o = {0};
    int opt;
    /* '+': options end at the command; each command parses its own. */
    while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'u':
            free(o.url);
            o.url = strdup(optarg);
            o.url_from = "--url";
            break;
        case 's':
            free(o.scope);
            o.scope = strdup(optarg);
            o.scope_from = "--scope";
            break;
        case 'j':
            o.json = true;
            break;
        case 'h':
            fputs(USAGE, stdout);
            return 0;
        default:
            fputs("(sandloom --help for usage)\n", stderr);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    if (!o.url && (o.url = env_dup("SANDLOOM_URL")))
        o.url_from = "SANDLOOM_URL";
    if (!o.api_key && (o.api_key = env_dup("SANDLOOM_API_KEY")))
        o.key_from = "SANDLOOM_API_KEY";
    if (!o.scope && (o.scope = env_dup("SANDLOOM_SCOPE")))
        o.scope_from = "SANDLOOM_SCOPE";
    if (read_config(&o) < 0)
        return EXIT_USAGE;
    if (!o.url)
        o.url = strdup(DEFAULT_URL);
    if (!o.scope)
        o.scope = strdup("default");
    size_t n = o.url ? strlen(o.url) : 0;
    while (n && o.url[n - 1] == '/')
        o.url[--n] = '\0';
    struct ctx c = {.o = &o, .conn = {.url = o.url, .api_key = o.api_key}};
    /* Before any thread (the MCP bridge relays on several). */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = dispatch(&c, argc - optind, argv + optind);
    curl_global_cleanup();
    free(o.url);
    free(o.scope);
    if (o.api_key) {
        explicit_bzero(o.api_key, strlen(o.api_key));
        free(o.api_key);
    }
    return rc;
}
