/* The one error type of the project.
 *
 * Convention: a fallible function returns a negative value (or NULL) and
 * fills the caller-provided struct sl_error. The error carries
 *   - code:    a stable API code spelled as the API spells it
 *              ("STALE_SANDBOX_ROUTE"), a static string, never NULL once set;
 *   - errnum:  the errno of the failing syscall, 0 if none;
 *   - message: a sentence safe to show a client (never a host path, never an
 *              input value);
 *   - detail:  context for the operator's log, prepended to on the way up by
 *              sl_error_wrap() (may name host paths).
 * The HTTP layer turns it into a response once (api/errors.c). Library code
 * does not log; the top of a request or background loop does. */
#ifndef SL_COMMON_ERROR_H
#define SL_COMMON_ERROR_H

#include <stdbool.h>
#include <stdint.h>

/* Codes used across modules. Names are the API's own. */
#define SL_E_INVALID_ARGUMENT "SANDBOX_INVALID_ARGUMENT"   /* 400, message is the reference's sentence */
#define SL_E_ID_RESERVED "SANDBOX_ID_RESERVED"             /* 400, ours: an id that is a route name */
#define SL_E_INVALID_REQUEST "SANDBOX_INVALID_REQUEST"     /* 422 */
#define SL_E_UNAUTHORIZED "SANDBOX_UNAUTHORIZED"           /* 401 */
#define SL_E_TENANT_FORBIDDEN "TENANT_FORBIDDEN"           /* 403, ours: operator route, tenant key */
#define SL_E_NOT_FOUND "NOT_FOUND"                         /* 404 unknown path */
#define SL_E_METHOD_NOT_ALLOWED "METHOD_NOT_ALLOWED"       /* 405 */
#define SL_E_TOO_LARGE "SANDBOX_REQUEST_TOO_LARGE"         /* 413 */
#define SL_E_INTERNAL "SANDBOX_INTERNAL_ERROR"             /* 500 */
#define SL_E_SANDBOX_NOT_FOUND "SANDBOX_NOT_FOUND"
#define SL_E_EXEC_NOT_FOUND "EXEC_NOT_FOUND"
#define SL_E_STALE_ROUTE "STALE_SANDBOX_ROUTE"
#define SL_E_STALE_GENERATION "STALE_SANDBOX_GENERATION"
#define SL_E_BUSY_OR_STALE "SANDBOX_BUSY_OR_STALE"
#define SL_E_SCOPE_MISMATCH "SANDBOX_SCOPE_MISMATCH"
#define SL_E_PROFILE_MISMATCH "SANDBOX_PROFILE_MISMATCH"
#define SL_E_PROFILE_UNAVAILABLE "SANDBOX_PROFILE_UNAVAILABLE"
#define SL_E_SUSPENDED "SANDBOX_SUSPENDED"
#define SL_E_RELEASING "SANDBOX_RELEASING"
#define SL_E_FILE_PATH_LOCKED "SANDBOX_FILE_PATH_LOCKED"
#define SL_E_SHARED_WORKSPACE_LOCKED "SANDBOX_SHARED_WORKSPACE_LOCKED"
#define SL_E_EXEC_SCOPE_BUSY "SANDBOX_EXEC_SCOPE_BUSY"
#define SL_E_PARALLEL_EXEC_LIMIT "SANDBOX_PARALLEL_EXEC_LIMIT"
#define SL_E_NO_WORKER "NO_SANDBOX_WORKER_AVAILABLE"
#define SL_E_WORKER_UNREACHABLE "SANDBOX_WORKER_UNREACHABLE"
#define SL_E_DISK_PRESSURE "SANDBOX_WORKER_DISK_PRESSURE"
#define SL_E_LIST_BUSY "SANDBOX_FILE_LIST_BUSY"       /* 429, listings per sandbox */
#define SL_E_DISK_FULL "SANDBOX_DISK_FULL"                 /* 507, ENOSPC/EDQUOT or no room */
#define SL_E_UID_POOL_EXHAUSTED "SANDBOX_UID_POOL_EXHAUSTED"
#define SL_E_WORKSPACE_INVALID "SANDBOX_WORKSPACE_INVALID" /* 503, host dir has wrong shape */
#define SL_E_STORE "SANDBOX_METADATA_UNAVAILABLE"          /* 503 */
#define SL_E_OVERLOADED "SANDBOX_WORKER_OVERLOADED"        /* 503, handler queue full */
#define SL_E_RUNTIME "SANDBOX_RUNTIME_ERROR"               /* exec could not start */
#define SL_E_TOKEN_NOT_CONFIGURED "SANDBOX_INTERNAL_TOKEN_NOT_CONFIGURED" /* 503 */
#define SL_E_CONFIG "SANDBOX_CONFIG_INVALID"               /* startup refusal */
/* Not a refusal: the sandbox is a live peer's, err->owner says whose. The
 * API forwards the request there (api/forward.c); it never reaches a client
 * (were it to, it is a 503). */
#define SL_E_OWNED_ELSEWHERE "SANDBOX_OWNED_ELSEWHERE"
#define SL_E_EGRESS_POLICY_INVALID "EGRESS_POLICY_INVALID"       /* 422, ours */
#define SL_E_EGRESS_UNSUPPORTED "EGRESS_POLICY_UNSUPPORTED"     /* 409, ours: not private mode */
#define SL_E_EGRESS_NOT_INSTALLED "EGRESS_POLICY_NOT_INSTALLED" /* 503, ours: cut off */
#define SL_E_STREAM_LIMIT "SANDBOX_STREAM_LIMIT" /* 429, ours: open streams per sandbox/worker */
#define SL_E_STDIN_CLOSED "SANDBOX_STDIN_CLOSED"   /* 409, ours: no stdin to write to */
#define SL_E_WATCH_LIMIT "SANDBOX_WATCH_LIMIT"     /* 429, ours: file watches per sandbox/worker */
#define SL_E_EXEC_NOT_RUNNING "SANDBOX_EXEC_NOT_RUNNING" /* 409, ours: it has ended */
#define SL_E_TERMINAL_LIMIT "SANDBOX_TERMINAL_LIMIT" /* 429, ours: terminals per sandbox/worker */
#define SL_E_NOT_A_TERMINAL "SANDBOX_NOT_A_TERMINAL" /* 409, ours: a command without one */
#define SL_E_UPGRADE_REQUIRED "SANDBOX_UPGRADE_REQUIRED" /* 426, ours: a WebSocket route */
#define SL_E_PORT_NOT_LISTENING "SANDBOX_PORT_NOT_LISTENING" /* 502, ours: ports route */
#define SL_E_PORT_BAD_GATEWAY "SANDBOX_PORT_BAD_ANSWER" /* 502, ours: not HTTP, or too large */
#define SL_E_ON_ANOTHER_WORKER "SANDBOX_ON_ANOTHER_WORKER" /* 421, ours: terminal, ports */
#define SL_E_E2B_UNAVAILABLE "E2B_UNAVAILABLE"   /* 503, ours: no agent_sandbox_e2b table */
#define SL_E_ALREADY_PAUSED "SANDBOX_ALREADY_PAUSED" /* 409, ours: E2B pause of a paused one */

/* The owner of a sandbox that is not this worker (SL_E_OWNED_ELSEWHERE). */
struct sl_error_owner {
    char worker_id[129];
    char worker_epoch[65];
    char endpoint[513];
    int64_t generation;
    int64_t sandbox_uid;
    char profile_id[65];
};

struct sl_error {
    const char *code;
    int errnum;
    char message[256];
    char detail[768];
    struct sl_error_owner owner; /* filled with SL_E_OWNED_ELSEWHERE only */
    /* The limit that refused, named in the answer beside the code (ours,
     * additive: "limit" and "value"); NULL for any other error. A static
     * string. */
    const char *limit;
    int64_t limit_value;
};

/* Name the limit (and its value) that refused: set after sl_error_set,
 * which clears it. Returns -1. */
int sl_error_limit(struct sl_error *err, const char *limit, int64_t value);

/* Set code/errnum and a client-safe message (printf format). Returns -1 so
 * callers can write `return sl_error_set(err, ...);`. err may be NULL. */
int sl_error_set(struct sl_error *err, const char *code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Same as sl_error_set with errnum = errno and the message also copied into
 * detail together with strerror(errno). */
int sl_error_errno(struct sl_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend operator context to detail ("context: previous detail"). */
int sl_error_wrap(struct sl_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Give an error a new code and client message, keeping what it said for
 * the operator: the detail becomes "<old code>: <old detail or message>",
 * so a refusal re-raised under the API's code (a failed download reported
 * as SANDBOX_SNAPSHOT_FAILED) still logs its cause. Returns -1. */
int sl_error_recode(struct sl_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void sl_error_clear(struct sl_error *err);
bool sl_error_is(const struct sl_error *err, const char *code);

/* The detail if any, else the message; for logs. */
const char *sl_error_text(const struct sl_error *err);

#endif
