/* The service: lifecycle, fencing, exec admission and the file API on top
 * of the store, the registry, the workspace and the runtime.
 *
 * One struct sl_service per process, created by sl_service_open() after the
 * configuration is loaded and the store schema checked; every public function
 * is safe to call from any HTTP thread. Functions answer JSON documents in the
 * spec's shapes (caller owns the returned reference) or fail with an
 * sl_error whose code the API layer maps to a status. The REST route and the
 * MCP tool for one action call the same function here.
 *
 * This build serves a single worker: the control-plane checks of spec
 * API.md §2.2/§10 run, then the owner's work is a direct call when the owner
 * is this process. Forwarding to a peer over /internal/v1 arrives with the
 * fleet issue; until then a route owned by a live peer is answered with
 * SANDBOX_WORKER_UNREACHABLE. */
#ifndef SL_SERVICE_SERVICE_H
#define SL_SERVICE_SERVICE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct sl_config;
struct sl_store;
struct sl_registry;
struct sl_runtime;
struct sl_blobstore;

struct sl_service;

struct sl_service_deps {
    const struct sl_config *cfg;
    struct sl_store *store;       /* owned by the service after open */
    struct sl_registry *registry; /* owned by the service after open */
    struct sl_runtime *runtime;   /* owned by the service after open */
    struct sl_blobstore *blobstore; /* NULL = no object store; owned after open */
    struct sl_privnet *privnet;   /* private network mode, else NULL; not owned, outlives it */
};

struct sl_service *sl_service_open(const struct sl_service_deps *deps, struct sl_error *err);
/* Stop background loops, publish OFFLINE, release everything. */
void sl_service_close(struct sl_service *svc);

/* Start the heartbeat/maintenance thread (first beat happens synchronously). */
int sl_service_start(struct sl_service *svc, struct sl_error *err);

const char *sl_service_worker_id(const struct sl_service *svc);

/* Egress policies (private network mode; service/network.c). A policy of
 * NULL removes the sandbox's (or tenant's) own, back to what it inherits.
 * Refusals: 409 EGRESS_POLICY_UNSUPPORTED outside the private mode, 503
 * EGRESS_POLICY_NOT_INSTALLED when a running sandbox had to be cut off. */
struct sl_egress_policy;
json_t *sl_svc_network_get(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
/* 0 when this worker takes egress policies (the private mode, and the
 * store's table), else the 409 refusal. */
int sl_svc_egress_supported(struct sl_service *svc, struct sl_error *err);
json_t *sl_svc_network_set(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           const struct sl_egress_policy *policy, const char *actor,
                           struct sl_error *err);
json_t *sl_svc_tenant_egress_get(struct sl_service *svc, const char *tenant_id,
                                 struct sl_error *err);
json_t *sl_svc_tenant_egress_set(struct sl_service *svc, const char *tenant_id,
                                 const struct sl_egress_policy *policy, const char *actor,
                                 struct sl_error *err);
/* The configuration the service was opened with (read-only, lives as long
 * as the service). */
const struct sl_config *sl_service_config(const struct sl_service *svc);

/* Launch each enabled toolchain (and typescript with node) in a disposable
 * sandbox under cfg->workspace_root (RUNTIME.md §8.2): the "checks" object
 * of the capabilities document. Used at startup and by the doctor. */
json_t *sl_toolchain_checks(struct sl_runtime *rt, const struct sl_config *cfg);

/* Health. */
json_t *sl_svc_healthz(struct sl_service *svc);
/* DELETE /internal/v1/sandboxes/{id}?generation=G (API.md §9.2): the
 * owner's half of a release a peer asked for. */
json_t *sl_svc_worker_destroy(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                              struct sl_error *err);
/* GET /internal/v1/health (API.md §9.2). */
json_t *sl_svc_internal_health(struct sl_service *svc);
/* This worker's id (<advertise host>-<port>), for the /internal/v1 fence. */
const char *sl_svc_worker_id(const struct sl_service *svc);
/* The activity of a forwarded request that succeeded (API.md §10.1 step 5). */
void sl_svc_route_touch(struct sl_service *svc, const char *sandbox_id, int64_t generation);
/* A forward to the sandbox's owner failed to reach it: the owner cache
 * forgets the sandbox, so the next request decides from the route and the
 * registry again. */
void sl_svc_owner_forget(struct sl_service *svc, const char *sandbox_id);
/* The owner decision for a request that names a sandbox but no generation
 * (E2B's): -1 with SL_E_OWNED_ELSEWHERE and the owner in err->owner when a
 * live peer holds it, awake or paused (the API sends the request there);
 * 0 when it is to be served here: live here (decided with no I/O), or
 * nothing a peer could answer better (no such sandbox, released, its
 * worker gone, or the store could not say), which the handler's own fence
 * then answers. */
int sl_svc_sandbox_owner(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);

/* Lifecycle (API.md §3.5–§3.8, §3.14). actor: who the route history
 * records as creating or releasing a generation; NULL for the reference's
 * "workspace:<scope>" (a tenant's key names itself, sl_principal_actor). */
json_t *sl_svc_resolve(struct sl_service *svc, const char *sandbox_id, const char *scope,
                       const char *profile, const char *actor, struct sl_error *err);
json_t *sl_svc_route_get(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
json_t *sl_svc_audit(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
json_t *sl_svc_connect(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                       struct sl_error *err);
json_t *sl_svc_release(struct sl_service *svc, const char *sandbox_id, const char *actor,
                       struct sl_error *err);

/* Suspend / resume (API.md §3.15, §3.16). memory (ours): the running
 * session's processes, memory and open files are kept too (a backend that
 * can checkpoint: gvisor), and resume restores them. */
json_t *sl_svc_suspend(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                       bool memory, struct sl_error *err);
json_t *sl_svc_resume(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
/* Fork (ours, service/fork.c): `count` new sandboxes named `ids` from a
 * READY (idle) or SUSPENDED one on this worker: its files copied, and its
 * processes restored into each where the backend can checkpoint. `who`
 * (may be NULL) has its sandbox quota checked for each. */
#define SL_FORK_MAX 16
struct sl_principal;
json_t *sl_svc_fork(struct sl_service *svc, const struct sl_principal *who,
                    const char *sandbox_id, const char *const *ids, size_t count,
                    const char *actor, struct sl_error *err);

/* Templates (API.md §3.13, §6). labels may be NULL ({}).
 *
 * `owner` is the tenant a call is for, NULL for the operator (the internal
 * token). The operator's templates are public: every tenant lists and
 * attaches them. A tenant's are private to it: stored as
 * "<tenant_id>~<name>" (templates/catalog.h), listed, attached and
 * unpublished by that tenant alone, by its plain name; attaching a name
 * takes the tenant's own template first, then a public one. Answers to a
 * tenant name its templates plainly and hold no host path (local_path);
 * every listing says each template's "visibility" (ours, additive). */
json_t *sl_svc_template_publish(struct sl_service *svc, const char *sandbox_id,
                                int64_t generation, const char *owner, const char *name,
                                const char *source_path, const char *description,
                                const json_t *labels, struct sl_error *err);
json_t *sl_svc_template_attach(struct sl_service *svc, const char *sandbox_id,
                               int64_t generation, const char *owner, const char *const *refs,
                               size_t nrefs, struct sl_error *err);
json_t *sl_svc_templates_list(struct sl_service *svc, const char *owner, struct sl_error *err);
json_t *sl_svc_template_unpublish(struct sl_service *svc, const char *owner, const char *name,
                                  struct sl_error *err);

/* Exec (API.md §3.9, §4). */
struct sl_exec_request {
    const char *exec_id;
    int64_t generation;
    const char *const *argv;
    size_t argc;
    const char *cwd;
    const char *const *env_keys;
    const char *const *env_values;
    size_t env_len;
    const char *const *sensitive_keys;
    size_t sensitive_len;
    int64_t timeout_seconds; /* 0 = default */
    bool background;
    bool stream;            /* ours: answered at once, output read with sl_svc_exec_attach */
    bool stdin_open;        /* ours: stdin is a pipe fed by sl_svc_exec_stdin, not /dev/null */
    /* ours: on a pseudo-terminal of this size (a terminal session: stream
     * implied, output on stdout, input through sl_svc_terminal_attach) */
    struct sl_exec_tty {
        bool on;
        unsigned short cols, rows;
    } tty;
    const char *exec_scope; /* NULL = unscoped */
    const json_t *request;  /* the validated request object, stored as command_json */
};
/* Called once with the final ExecResponse document (the callee owns it;
 * NULL only when out of memory), from a service thread. */
typedef void (*sl_exec_wait_fn)(json_t *doc, void *ctx);
/* Admit and run a command. Returns -1 with err set when refused (no record
 * written unless the spec says so); 0 with *out the answer now (a replay,
 * a background run's RUNNING stub, or a synchronous run's result when wait
 * is NULL: then this call blocks); 1 when wait is given and the command is
 * synchronous: wait has been or will be called with the answer. */
int sl_svc_exec(struct sl_service *svc, const char *sandbox_id, const struct sl_exec_request *req,
                sl_exec_wait_fn wait, void *wait_ctx, json_t **out, struct sl_error *err);
/* API.md §3.10: the stored record (404 EXEC_NOT_FOUND). */
json_t *sl_svc_exec_get(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                        int64_t generation, struct sl_error *err);
struct sl_outlog;
/* Ours: the directory a file watch follows, checked as a listing checks
 * it (fenced, the file API's path rules): the sandbox root's descriptor
 * (O_PATH, the caller's: the watch opens its directories beneath it, and
 * holds none of them open, so their removal is seen) and the directory's
 * canonical path in *canonical (malloc'd). */
int sl_svc_watch_open(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                      const char *path, size_t path_len, char **canonical,
                      struct sl_error *err);
/* Ours: a command's output log (service/outlog.h; a reference the caller
 * puts): the running command's, live, or one holding its record's output
 * when it has ended. Fenced like the poll; 404 EXEC_NOT_FOUND. */
int sl_svc_exec_attach(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                       int64_t generation, struct sl_outlog **out, struct sl_error *err);
/* Ours: the poll with offsets (stdout, stderr): the answer's stdout and
 * stderr hold only what was produced from those offsets on, live while the
 * command runs, with <stream>_next_offset and <stream>_skipped (bytes no
 * longer kept) for each. */
json_t *sl_svc_exec_get_from(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                             int64_t generation, const int64_t offsets[2],
                             struct sl_error *err);
/* Ours: bytes for a running command's stdin (it was started with stdin
 * open), and/or its end (close). Waits at most SL_STDIN_WAIT_MS for room
 * in the pipe; {"written": n, "closed": bool}: fewer than len written means
 * the command is not reading, and the caller sends the rest later. 409
 * SANDBOX_STDIN_CLOSED (none, or closed), SANDBOX_EXEC_NOT_RUNNING. */
#define SL_STDIN_WAIT_MS 2000
#define SL_STDIN_MAX_BYTES (1024 * 1024)
json_t *sl_svc_exec_stdin(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                          int64_t generation, const char *data, size_t len, bool close_it,
                          struct sl_error *err);
/* Ours: a signal (SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT) to a running
 * command: {"signalled": bool} (false: it had ended). */
json_t *sl_svc_exec_signal(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                           int64_t generation, int sig, struct sl_error *err);
/* Ours: a terminal (service/terminal.c): a login shell on a
 * pseudo-terminal, an execution like any other (its record, its limits,
 * its exec_id), started with sl_svc_terminal_open and reached while it runs
 * with sl_svc_terminal_attach. What a client gets: the command's output log
 * (a reference it puts) and a copy of the terminal's master (non-blocking,
 * its own to close) to write input to and resize. Every attach is paired
 * with one sl_svc_terminal_detach; a terminal nobody is attached to for
 * SANDBOX_TERMINAL_IDLE_SECONDS is ended (termination_reason
 * TERMINAL_IDLE). */
struct sl_terminal {
    char exec_id[128];
    struct sl_outlog *log;
    int master;
};
/* 429 SANDBOX_TERMINAL_LIMIT past SANDBOX_MAX_TERMINALS_PER_SANDBOX; the
 * exec admission's refusals otherwise. */
/* Any program on a terminal (E2B's pty): the same bounds, record and
 * attachment as a terminal of the API, under the caller's exec_id, in
 * the caller's scope of its own (SL_EXEC_SCOPE_*: beside the sandbox's
 * commands). */
struct sl_terminal_spec {
    const char *exec_id;
    const char *const *argv;
    size_t argc;
    const char *cwd;
    const char *const *env_keys;
    const char *const *env_values;
    size_t env_len;
    unsigned short cols, rows;
    const char *exec_scope;
    const json_t *request;
};
int sl_svc_terminal_start(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                          const struct sl_terminal_spec *spec, struct sl_terminal *out,
                          struct sl_error *err);
int sl_svc_terminal_open(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         unsigned short cols, unsigned short rows, struct sl_terminal *out,
                         struct sl_error *err);
/* 404 EXEC_NOT_FOUND, 409 SANDBOX_EXEC_NOT_RUNNING (it ended), 409
 * SANDBOX_NOT_A_TERMINAL (a command without one). */
int sl_svc_terminal_attach(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           const char *exec_id, struct sl_terminal *out, struct sl_error *err);
void sl_svc_terminal_detach(struct sl_service *svc, const char *sandbox_id, const char *exec_id);
/* Input arrived: the sandbox is in use (its idle clock). */
void sl_svc_terminal_touch(struct sl_service *svc, const char *sandbox_id);
/* Releases what sl_svc_terminal_open/attach gave (not the attachment). */
void sl_terminal_clear(struct sl_terminal *t);

/* Ours: a TCP connection to a server listening on `port` inside the
 * sandbox (the ports route; runtime/ports.c says how each network mode
 * reaches it): fenced at `generation`, or at the sandbox's current one
 * when 0 (a browser's requests carry none); its activity counts. The
 * socket (non-blocking) in *fd is the caller's. 502
 * SANDBOX_PORT_NOT_LISTENING; 421 SANDBOX_ON_ANOTHER_WORKER when a
 * peer owns the sandbox. */
int sl_svc_port_connect(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                        unsigned port, int64_t timeout_ms, int *fd, struct sl_error *err);

/* Whether giving `name` = `value` to a command changes nothing: the
 * sandbox manages that variable, with that value (runtime/env.h). */
bool sl_svc_env_is_managed_as(struct sl_service *svc, const char *name, const char *value);
/* Ours: the executions of a sandbox running on this worker whose exec_id
 * starts with `prefix`: [{"exec_id", "request"}] (the stored request
 * object). NULL when out of memory. */
json_t *sl_svc_execs_running_list(struct sl_service *svc, const char *sandbox_id,
                                  const char *prefix);

/* E2B sandboxes (service/e2b.c; their protocol is e2b/). A sandbox made
 * through E2B's control plane is a route like any other (resolved and
 * connected at once, in its tenant's namespace) with a row of
 * agent_sandbox_e2b beside it: template, metadata, environment and a
 * lifetime deadline that the service enforces itself (kill or pause when
 * it passes, within a second). Every function takes the stored id. 404
 * SANDBOX_NOT_FOUND for an id with no E2B row or a released route; 503
 * E2B_UNAVAILABLE when the store has no E2B table. */
struct sl_e2b_sandbox;
struct sl_e2b_new {
    const char *sandbox_id;    /* stored id, fresh */
    const char *scope;         /* stored workspace scope */
    const char *owner;         /* the tenant (its templates), NULL for the operator */
    const char *template_id;   /* "base" and "code-interpreter-v1": a plain sandbox */
    const char *metadata_json; /* object text or NULL */
    const char *env_json;      /* object text or NULL */
    int64_t timeout_seconds;
    bool pause_on_timeout;
    const char *actor;         /* the route history's creator (NULL: the scope's) */
};
int sl_svc_e2b_create(struct sl_service *svc, const struct sl_e2b_new *n,
                      struct sl_e2b_sandbox *out, struct sl_error *err);
int sl_svc_e2b_get(struct sl_service *svc, const char *sandbox_id, struct sl_e2b_sandbox *out,
                   struct sl_error *err);
/* A new deadline, timeout_seconds from now. */
int sl_svc_e2b_set_timeout(struct sl_service *svc, const char *sandbox_id,
                           int64_t timeout_seconds, struct sl_error *err);
/* Files-only pause: every process is stopped (E2B's running processes
 * with it), the files kept; 409 SANDBOX_ALREADY_PAUSED when it is. */
int sl_svc_e2b_pause(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
/* Awake (resumed when paused: *resumed) with a deadline timeout_seconds
 * from now (0: the one it has, or the default when that has passed). */
int sl_svc_e2b_connect(struct sl_service *svc, const char *sandbox_id, int64_t timeout_seconds,
                       bool *resumed, struct sl_e2b_sandbox *out, struct sl_error *err);
/* Its envVars (object text, malloc'd; NULL for none): kept in memory once
 * read, since they never change (every E2B process reads them). */
char *sl_svc_e2b_env(struct sl_service *svc, const char *sandbox_id);
/* Those not released whose stored id starts with id_prefix (NULL: all),
 * after `after`, by id (store.h's e2b_list). */
int sl_svc_e2b_list(struct sl_service *svc, const char *id_prefix, const char *after,
                    int64_t limit, struct sl_e2b_sandbox **out, size_t *n, struct sl_error *err);
int sl_svc_e2b_kill(struct sl_service *svc, const char *sandbox_id, const char *actor,
                    struct sl_error *err);
/* What a sandbox uses now: {"cpu_usec", "cpu_used_pct" (of its CPU limit,
 * since the previous sample, or over 0.1 s for a first), "memory_bytes",
 * "cache_bytes", "memory_limit", "disk_bytes", "disk_limit"}; -1 for what
 * this worker does not count (no such cgroup controller, a sandbox that
 * runs nothing). */
json_t *sl_svc_sandbox_usage(struct sl_service *svc, const char *sandbox_id, struct sl_error *err);
/* The generation a sandbox is at now (live here, else its route's), for
 * calls that carry none (E2B's, a browser's). */
int sl_svc_current_generation(struct sl_service *svc, const char *sandbox_id,
                              int64_t *generation, struct sl_error *err);

/* API.md §3.11: {"cancelled": bool}. */
json_t *sl_svc_exec_cancel(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                           int64_t generation, struct sl_error *err);
/* Admin (API.md §3.18): paged records without output (limit/offset
 * already validated), and one record with its output (EXEC_NOT_FOUND). */
/* Admin listing of executions (API.md §3.18); ours: by termination
 * reason too ("" = none recorded). */
struct sl_exec_filter;
json_t *sl_svc_admin_execs(struct sl_service *svc, const struct sl_exec_filter *f,
                           struct sl_error *err);
json_t *sl_svc_admin_exec(struct sl_service *svc, const char *sandbox_id, const char *exec_id,
                          struct sl_error *err);
struct sl_route_filter;
/* GET /api/v1/admin/sandboxes (filter and paging already validated). */
json_t *sl_svc_admin_sandboxes(struct sl_service *svc, const struct sl_route_filter *f,
                               struct sl_error *err);
/* GET /api/v1/admin/overview. */
json_t *sl_svc_admin_overview(struct sl_service *svc, struct sl_error *err);
/* GET /api/v1/sandboxes/diagnostics/runtime (API.md §3.17, FLEET.md §3.4). */
json_t *sl_svc_diagnostics(struct sl_service *svc, struct sl_error *err);
/* Kill every running command and wait until each has been recorded
 * (CANCELLED) and its waiter answered. Before stopping the HTTP server. */
void sl_service_stop_execs(struct sl_service *svc);

/* Files (API.md §3.12, §5). Path arguments carry explicit lengths so an
 * embedded NUL is seen and refused. */
struct sl_file_path {
    const char *s;
    size_t len;
};
json_t *sl_svc_file_write(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                          struct sl_file_path path, const char *b64, size_t b64_len,
                          struct sl_error *err);
json_t *sl_svc_file_read(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path path, struct sl_error *err);
/* Ours, for E2B's envd: the bytes as they are (no base64 either way), and
 * one entry's stat ({"type", "size_bytes", "modified_at", "mode",
 * "symlink_target"?}, never following a link; the file API's path rules,
 * "path does not exist" when absent). */
struct sl_buf;
json_t *sl_svc_file_write_bytes(struct sl_service *svc, const char *sandbox_id,
                                int64_t generation, struct sl_file_path path, const char *data,
                                size_t len, struct sl_error *err);
int sl_svc_file_read_bytes(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           struct sl_file_path path, struct sl_buf *out, struct sl_error *err);
json_t *sl_svc_file_stat(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path path, struct sl_error *err);
json_t *sl_svc_file_list(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path path, int64_t limit, int64_t offset,
                         struct sl_error *err);
json_t *sl_svc_file_mkdir(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                          struct sl_file_path path, bool parents, struct sl_error *err);
json_t *sl_svc_file_delete(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                           struct sl_file_path path, bool recursive, struct sl_error *err);
json_t *sl_svc_file_move(struct sl_service *svc, const char *sandbox_id, int64_t generation,
                         struct sl_file_path src, struct sl_file_path dst, bool overwrite,
                         struct sl_error *err);

#endif
