/* Live work beside the sandbox's commands.
 *
 * Terminals: a login shell on a pseudo-terminal, run as an execution of
 * its sandbox (exec.c): the same admission, fencing, uid, limits and
 * record as any command, with the terminal's bounds on top. The transport
 * (a WebSocket) is the API's (api/terminal_ws.c).
 *
 * Ports: a connection to a server in the sandbox, fenced like any call
 * (api/port_proxy.c carries HTTP and WebSocket over it). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "config/config.h"
#include "service/internal.h"
#include "service/outlog.h"
#include "service/service.h"
#include "runtime/runtime.h"
#include "store/store.h"

/* Counting and starting are one step, so two opens at once cannot both
 * take the last terminal a sandbox may have. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

/* The sandbox's login shell: bash where the host has it (a sandbox sees
 * the host's /usr), else sh. Both read /etc/profile and ~/.profile. */
static const char *login_shell(void)
{
    return access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
}

/* The fence of a long-lived connection (a terminal, a port): a sandbox a
 * peer owns is refused with where it runs, since these connections are not
 * relayed through a peer (an exec or a file call is). */
static int live_fence(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                      struct sl_error *err)
{
    if (svc_owner_fence(svc, sandbox_id, generation, err) == 0)
        return 0;
    if (sl_error_is(err, SL_E_OWNED_ELSEWHERE)) {
        char endpoint[sizeof(err->owner.endpoint)];
        snprintf(endpoint, sizeof(endpoint), "%s", err->owner.endpoint);
        sl_error_set(err, SL_E_ON_ANOTHER_WORKER, 0,
                     "the sandbox runs on the worker at %s: connect there", endpoint);
    }
    return -1;
}

void sl_terminal_clear(struct sl_terminal *t)
{
    if (t->master >= 0)
        close(t->master);
    t->master = -1;
    sl_outlog_put(t->log);
    t->log = NULL;
}

int sl_svc_terminal_start(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                          const struct sl_terminal_spec *spec, struct sl_terminal *out,
                          struct sl_error *err)
{
    const struct sl_config *cfg = svc->cfg;
    out->master = -1;
    out->log = NULL;
    if (live_fence(svc, sandbox_id, generation, err) < 0)
        return -1;
    struct sl_exec_request req = {
        .exec_id = spec->exec_id,
        .generation = generation,
        .argv = spec->argv,
        .argc = spec->argc,
        .cwd = spec->cwd,
        .env_keys = spec->env_keys,
        .env_values = spec->env_values,
        .env_len = spec->env_len,
        .timeout_seconds = cfg->terminal_max_seconds,
        .exec_scope = spec->exec_scope, /* beside the sandbox's commands */
        .tty = {.on = true, .cols = spec->cols, .rows = spec->rows},
        .request = spec->request,
    };
    pthread_mutex_lock(&open_lock);
    int rc = 0;
    int here = svc_terminals_count(svc, sandbox_id), all = svc_terminals_count(svc, NULL);
    if (here >= cfg->max_terminals_per_sandbox)
        rc = sl_error_set(err, SL_E_TERMINAL_LIMIT, 0,
                          "this sandbox already runs %d terminals "
                          "(SANDBOX_MAX_TERMINALS_PER_SANDBOX): exit one",
                          here);
    else if (all >= cfg->max_terminals)
        rc = sl_error_set(err, SL_E_TERMINAL_LIMIT, 0,
                          "this worker already runs %d terminals (SANDBOX_MAX_TERMINALS): "
                          "retry when one has ended",
                          all);
    json_t *answer = NULL;
    if (rc == 0)
        rc = sl_svc_exec(svc, sandbox_id, &req, NULL, NULL, &answer, err);
    pthread_mutex_unlock(&open_lock);
    bool replayed = rc == 0 && json_is_true(json_object_get(answer, "replayed"));
    json_decref(answer);
    if (rc < 0)
        return -1;
    if (replayed)
        return sl_error_set(err, SL_E_EXEC_NOT_RUNNING, EEXIST,
                            "this terminal's exec_id was used before");
    /* Attached from the start, so the idle clock waits for this client. */
    return svc_terminal_take(svc, sandbox_id, spec->exec_id, out, err);
}

int sl_svc_terminal_open(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         unsigned short cols, unsigned short rows, struct sl_terminal *out,
                         struct sl_error *err)
{
    out->master = -1;
    out->log = NULL;
    char exec_id[40] = "terminal-";
    if (sl_random_hex(exec_id + strlen(exec_id), 12) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot make the terminal's id");
    const char *shell = login_shell();
    const char *argv[] = {shell, "-l"};
    const char *env_keys[] = {"TERM", "COLORTERM"};
    const char *env_values[] = {"xterm-256color", "truecolor"};
    _cleanup_json_ json_t *doc =
        json_pack("{s:[ss],s:s,s:{s:i,s:i}}", "command", shell, "-l", "cwd", "/workspace",
                  "terminal", "cols", (int)cols, "rows", (int)rows);
    if (!doc)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    struct sl_terminal_spec spec = {
        .exec_id = exec_id,
        .argv = argv,
        .argc = 2,
        .cwd = "/workspace",
        .env_keys = env_keys,
        .env_values = env_values,
        .env_len = 2,
        .cols = cols,
        .rows = rows,
        .exec_scope = SL_EXEC_SCOPE_OWN,
        .request = doc,
    };
    return sl_svc_terminal_start(svc, sandbox_id, generation, &spec, out, err);
}

int sl_svc_terminal_attach(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           const char *exec_id, struct sl_terminal *out, struct sl_error *err)
{
    out->master = -1;
    out->log = NULL;
    if (live_fence(svc, sandbox_id, generation, err) < 0)
        return -1;
    return svc_terminal_take(svc, sandbox_id, exec_id, out, err);
}

void sl_svc_terminal_touch(struct sl_service *svc, const char *sandbox_id)
{
    svc_live_touch(svc, sandbox_id);
}

int sl_svc_port_connect(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                        unsigned port, int64_t timeout_ms, int *fd, struct sl_error *err)
{
    *fd = -1;
    if (port < 1 || port > 65535)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "a port is from 1 to 65535");
    uid_t uid;
    int64_t live_gen = 0;
    bool live = svc_live_current(svc, sandbox_id, &live_gen, &uid) == 0;
    /* Live here at the generation asked (or, none asked, at all): the live
     * table is this worker's word, as an exec's admission takes it; a
     * suspend or release takes the sandbox out of it first. */
    if (live && (generation <= 0 || generation == live_gen))
        goto connect;
    if (generation <= 0) {
        /* No generation given: the route's current one is the fence. */
        struct sl_route r = {0};
        int found = svc->store->ops->route_get(svc->store, sandbox_id, &r, err);
        if (found < 0)
            return -1;
        if (found == 0)
            return sl_error_set(err, SL_E_STALE_ROUTE, 0,
                                "this sandbox has no route: resolve it first");
        generation = r.generation;
        sl_route_clear(&r);
    }
    if (live_fence(svc, sandbox_id, generation, err) < 0)
        return -1;
    if (svc_live_lookup(svc, sandbox_id, generation, &uid, err) < 0)
        return -1;
connect:
    *fd = sl_rt_sandbox_connect(svc->runtime, uid, (uint16_t)port, timeout_ms, err);
    if (*fd < 0)
        return -1;
    svc_live_touch(svc, sandbox_id);
    return 0;
}
