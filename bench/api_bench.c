/* Cost of commands through the HTTP API, beside baselines measured in the
 * same run:
 *
 *   baseline A    fork+exec of /bin/true, serial
 *   baseline B    fork+exec of /bin/true from --clients parallel workers
 *   HTTP floor    GET /health, serial: what any request through the daemon
 *                 costs (the connection's bytes, MHD, the hand-off to a
 *                 handler thread and back) before it does anything
 *   auth rows     GET of a path no route has (404 once authenticated),
 *                 serial, with the internal token and with a tenant's API
 *                 key made for the run: the difference is what checking a
 *                 key costs (none when the daemon has no tenant tables)
 *   serial        POST .../exec of /bin/true, one at a time, warm sandbox
 *   unscoped      --clients clients over --sandboxes sandboxes, no exec_scope
 *   scoped        the same, each command with an exec_scope of its own
 *   new serial    resolve + connect of a new sandbox, one at a time
 *   new N-way     the same from --clients clients
 *
 * Each row is cut into --rounds slices and the slices of all rows take turns
 * (baseline A, the serial row and the HTTP floor alternate request by
 * request), so machine
 * noise hits every row alike. Latencies are per request (CLOCK_MONOTONIC);
 * throughput is completed operations over the row's wall time.
 *
 *   api_bench --url http://127.0.0.1:PORT [--token T] [--commands 5000]
 *             [--clients 32] [--sandboxes 50] [--serial 500] [--new 200]
 *             [--rounds 5]
 *
 * With --daemon-pid (api_bench.sh passes it) the daemon's VmRSS is read
 * idle, before anything is asked, and again with --memory-sandboxes (1000)
 * sandboxes connected and 32 background commands in flight.
 *
 * The token may come from SANDBOX_INTERNAL_TOKEN instead (argv shows in ps).
 * The daemon must accept sandboxes + 2 * new + 1 live sandboxes
 * (SANDBOX_WORKER_CAPACITY); bench/api_bench.sh starts such a daemon, runs
 * this program against it and removes it again. Everything created here is
 * released at the end.
 *
 * Not a test: it asserts nothing about speed, but every answer is checked and
 * a run with any failed request exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Answers of resolve, connect and exec of /bin/true are a few hundred bytes;
 * anything past this is refused rather than buffered. */
#define RESP_MAX (256 * 1024)
#define REQ_MAX 4096
#define MAX_CLIENTS 1024
#define SHOWN_FAILURES 10

/* Published figures of the Python reference, for context only. */
#define REF_MS_PER_COMMAND 49.0
#define REF_COMMANDS_PER_S 30.0

struct http_conn {
    int fd;
    size_t len;
    char buf[RESP_MAX + 1];
};

struct http_resp {
    int status;
    const char *body; /* NUL-terminated, inside the connection's buffer */
    size_t body_len;
};

struct sandbox {
    char id[128];
    long long generation;
    atomic_int inflight; /* commands of ours running on it now */
};

struct client {
    int id;
    struct http_conn *conn;
    long seq; /* for unique exec and sandbox ids */
};

enum row_id {
    ROW_BASE_A,
    ROW_BASE_B,
    ROW_SERIAL,
    ROW_FLOOR,
    ROW_AUTH_TOKEN,
    ROW_AUTH_KEY,
    ROW_UNSCOPED,
    ROW_SCOPED,
    ROW_NEW_SERIAL,
    ROW_NEW_PARALLEL,
    ROW_COUNT
};

struct row {
    char name[96];
    int64_t *lat; /* ns, successful operations only */
    int n;
    int cap;
    int failures;
    int64_t wall_ns;
};

enum job_kind { JOB_FORK, JOB_EXEC_UNSCOPED, JOB_EXEC_SCOPED, JOB_NEW, JOB_RELEASE };

struct job {
    struct client *cl;
    enum job_kind kind;
    int quota;
    int64_t *lat;
    int ok;
    int failed;
    pthread_barrier_t *start;
};

static struct {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char host[300]; /* Host header */
    char url[320];
    char token[512];
    char tenant_key[128]; /* "" when the daemon has no tenancy */
    char tag[32]; /* prefix of every id this run creates */
    int commands, clients, nsandboxes, serial, fresh, rounds;
    int daemon_pid;  /* 0 = no memory phase */
    int mem_sandboxes, mem_inflight;
    struct sandbox *sandboxes;
    struct sandbox warm; /* the serial row's sandbox */
    struct client *cls;
    struct http_conn *main_conn;
    /* ids of every sandbox created, for the release at the end */
    char (*created)[128];
    atomic_int ncreated;
    int created_cap;
    atomic_int release_next;
    atomic_int release_failed;
    /* The sandboxes no unscoped command runs on, longest idle first. */
    pthread_mutex_t idle_lock;
    pthread_cond_t idle_cond;
    int *idle_ring;
    int idle_head, idle_count;
    int idle_waits;
    atomic_uint scoped_next;   /* the scoped row's next sandbox, modulo their number */
    atomic_int max_overlap[2]; /* [0] unscoped, [1] scoped */
    atomic_int reconnects;
    atomic_int shown;
} bench;

static struct row rows[ROW_COUNT];

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void note_failure(const char *what, const struct http_resp *r, const char *why)
{
    if (atomic_fetch_add(&bench.shown, 1) >= SHOWN_FAILURES)
        return;
    if (r && r->status)
        fprintf(stderr, "api_bench: %s: HTTP %d: %.200s\n", what, r->status, r->body);
    else
        fprintf(stderr, "api_bench: %s: %s\n", what, why ? why : "failed");
}

/* ---- HTTP/1.1 client: blocking socket, keep-alive, Content-Length -------- */

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void conn_close(struct http_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int conn_open(struct http_conn *c)
{
    int fd = socket(bench.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)&bench.addr, bench.addr_len);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    return 0;
}

static struct http_conn *conn_new(void)
{
    struct http_conn *c = malloc(sizeof(*c));
    if (!c) {
        fprintf(stderr, "api_bench: out of memory\n");
        exit(2);
    }
    c->fd = -1;
    c->len = 0;
    c->buf[0] = '\0';
    return c;
}

/* The response header block [0, hdr_len): status, Content-Length, close. */
static int parse_head(struct http_conn *c, size_t hdr_len, struct http_resp *r, long long *clen,
                      bool *close_after)
{
    int minor = 0;
    if (sscanf(c->buf, "HTTP/1.%d %d", &minor, &r->status) != 2)
        return -1;
    *clen = -1;
    *close_after = minor == 0;
    const char *line = strstr(c->buf, "\r\n");
    while (line && (size_t)(line - c->buf) + 2 < hdr_len) {
        line += 2;
        if (strncasecmp(line, "Content-Length:", 15) == 0)
            *clen = strtoll(line + 15, NULL, 10);
        else if (strncasecmp(line, "Connection:", 11) == 0)
            *close_after = strncasecmp(line + 11 + strspn(line + 11, " \t"), "close", 5) == 0;
        else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0)
            return -1; /* chunked answers are not expected from the API */
        line = strstr(line, "\r\n");
    }
    return *clen >= 0 && *clen <= RESP_MAX ? 0 : -1;
}

/* One exchange on an open connection. *dropped: the peer closed before
 * answering anything (an idle keep-alive connection it let go), so the
 * request can be sent again on a new connection. */
static int http_exchange(struct http_conn *c, const char *req, size_t req_len, struct http_resp *r,
                         bool *dropped)
{
    *dropped = false;
    if (send_all(c->fd, req, req_len) < 0) {
        *dropped = true;
        return -1;
    }
    c->len = 0;
    size_t hdr_len = 0;
    long long clen = 0;
    bool close_after = false;
    for (;;) {
        if (!hdr_len) {
            c->buf[c->len] = '\0';
            char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
            if (end) {
                hdr_len = (size_t)(end - c->buf) + 4;
                if (parse_head(c, hdr_len, r, &clen, &close_after) < 0)
                    return -1;
            }
        }
        if (hdr_len && c->len >= hdr_len + (size_t)clen)
            break;
        if (c->len >= RESP_MAX)
            return -1;
        ssize_t got = recv(c->fd, c->buf + c->len, RESP_MAX - c->len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            *dropped = c->len == 0;
            return -1;
        }
        c->len += (size_t)got;
    }
    c->buf[hdr_len + (size_t)clen] = '\0';
    r->body = c->buf + hdr_len;
    r->body_len = (size_t)clen;
    if (close_after)
        conn_close(c);
    return 0;
}

static int http_request_as(struct http_conn *c, const char *method, const char *path,
                           const char *body, const char *token, struct http_resp *r)
{
    char req[REQ_MAX];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, bench.host, token, blen, body ? body : "");
    if (n < 0 || (size_t)n >= sizeof(req))
        return -1;
    memset(r, 0, sizeof(*r));
    for (int attempt = 0; attempt < 2; attempt++) {
        bool reused = c->fd >= 0;
        if (!reused && conn_open(c) < 0)
            return -1;
        bool dropped = false;
        if (http_exchange(c, req, (size_t)n, r, &dropped) == 0)
            return 0;
        conn_close(c);
        if (!reused || !dropped)
            return -1;
        atomic_fetch_add(&bench.reconnects, 1);
        memset(r, 0, sizeof(*r));
    }
    return -1;
}

static int http_request(struct http_conn *c, const char *method, const char *path,
                        const char *body, struct http_resp *r)
{
    return http_request_as(c, method, path, body, bench.token, r);
}


/* ---- the few JSON fields read back ----------------------------------------
 * The answers are flat objects whose strings are ids of ours or enumeration
 * values; an escaped string cannot contain `"key"`, so the first match is the
 * field itself. */

static const char *json_value(const char *body, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *p = strstr(body, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    p += strspn(p, " \t\r\n");
    if (*p != ':')
        return NULL;
    p++;
    return p + strspn(p, " \t\r\n");
}

static bool json_string_is(const char *body, const char *key, const char *want)
{
    const char *v = json_value(body, key);
    size_t n = strlen(want);
    return v && v[0] == '"' && strncmp(v + 1, want, n) == 0 && v[1 + n] == '"';
}

static long long json_int(const char *body, const char *key)
{
    const char *v = json_value(body, key);
    if (!v || *v < '0' || *v > '9')
        return -1;
    return strtoll(v, NULL, 10);
}

/* ---- operations -------------------------------------------------------- */

static int op_exec(struct http_conn *c, const struct sandbox *s, const char *exec_id,
                   const char *scope)
{
    char path[256], body[512], scope_field[160] = "";
    if (scope)
        snprintf(scope_field, sizeof(scope_field), ",\"exec_scope\":\"%s\"", scope);
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s/exec", s->id);
    snprintf(body, sizeof(body),
             "{\"exec_id\":\"%s\",\"generation\":%lld,\"argv\":[\"/bin/true\"]%s}", exec_id,
             s->generation, scope_field);
    struct http_resp r;
    if (http_request(c, "POST", path, body, &r) < 0) {
        note_failure("exec", NULL, "no HTTP answer");
        return -1;
    }
    if (r.status != 200 || !json_string_is(r.body, "status", "SUCCEEDED")) {
        note_failure("exec", &r, NULL);
        return -1;
    }
    return 0;
}

static void remember_created(const char *id)
{
    int i = atomic_fetch_add(&bench.ncreated, 1);
    if (i < bench.created_cap)
        snprintf(bench.created[i], sizeof(bench.created[i]), "%s", id);
}

/* resolve + connect of a sandbox id not seen before. */
static int op_new_sandbox(struct http_conn *c, struct sandbox *s)
{
    char body[512], path[256];
    struct http_resp r;
    snprintf(body, sizeof(body), "{\"sandbox_id\":\"%s\",\"workspace_scope_id\":\"api-bench\"}",
             s->id);
    if (http_request(c, "POST", "/api/v1/sandboxes/resolve", body, &r) < 0) {
        note_failure("resolve", NULL, "no HTTP answer");
        return -1;
    }
    long long gen = r.status == 200 ? json_int(r.body, "generation") : -1;
    if (gen < 1) {
        note_failure("resolve", &r, NULL);
        return -1;
    }
    remember_created(s->id);
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s", s->id);
    snprintf(body, sizeof(body), "{\"generation\":%lld}", gen);
    if (http_request(c, "POST", path, body, &r) < 0) {
        note_failure("connect", NULL, "no HTTP answer");
        return -1;
    }
    if (r.status != 200 || !json_string_is(r.body, "status", "READY")) {
        note_failure("connect", &r, NULL);
        return -1;
    }
    long long cgen = json_int(r.body, "generation");
    s->generation = cgen >= 1 ? cgen : gen;
    return 0;
}

static int op_release(struct http_conn *c, const char *id)
{
    char path[256];
    struct http_resp r = {0};
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s", id);
    if (http_request(c, "DELETE", path, NULL, &r) == 0 && r.status == 200)
        return 0;
    /* The first refusal says why (the others are counted). */
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&said))
        fprintf(stderr, "api_bench: release of %s: HTTP %d %.200s\n", id, r.status,
                r.status && r.body ? r.body : "(no answer)");
    return -1;
}

static int64_t time_fork_exec(void)
{
    static char *const argv[] = {(char *)"/bin/true", NULL};
    static char *const envp[] = {(char *)"PATH=/usr/bin:/bin", NULL};
    int64_t t = now_ns();
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return now_ns() - t;
}

/* One GET /health over the main connection: its latency, or -1 (noted as
 * a failure) when the answer is not 200 "ok". */
static int64_t time_health(void)
{
    struct http_resp r;
    int64_t t = now_ns();
    if (http_request(bench.main_conn, "GET", "/health", NULL, &r) < 0) {
        note_failure("GET /health", NULL, "no HTTP answer");
        return -1;
    }
    int64_t lat = now_ns() - t;
    if (r.status != 200 || strcmp(r.body, "ok") != 0) {
        note_failure("GET /health", &r, NULL);
        return -1;
    }
    return lat;
}

/* A tenant and one API key of its own, for the auth rows; "" (the rows
 * stay empty) when the daemon has no tenancy. */
static void make_tenant_key(void)
{
    char path[160], body[160];
    struct http_resp r;
    snprintf(body, sizeof(body), "{\"tenant_id\":\"%s\"}", bench.tag);
    if (http_request(bench.main_conn, "POST", "/api/v1/admin/tenants", body, &r) < 0 ||
        r.status != 201)
        return;
    snprintf(path, sizeof(path), "/api/v1/admin/tenants/%s/keys", bench.tag);
    if (http_request(bench.main_conn, "POST", path, "{\"name\":\"api_bench\"}", &r) < 0 ||
        r.status != 201)
        return;
    const char *v = json_value(r.body, "api_key");
    if (!v || *v != '"')
        return;
    size_t n = strcspn(v + 1, "\"");
    if (n < sizeof(bench.tenant_key))
        snprintf(bench.tenant_key, sizeof(bench.tenant_key), "%.*s", (int)n, v + 1);
}

/* One authenticated GET of a path no route has: 404 NOT_FOUND, decided
 * once the credential is checked; its latency, or -1 (a failure). */
static int64_t time_auth(const char *token)
{
    struct http_resp r;
    int64_t t = now_ns();
    if (http_request_as(bench.main_conn, "GET", "/api/v1/no-such-route", NULL, token, &r) < 0) {
        note_failure("GET /api/v1/no-such-route", NULL, "no HTTP answer");
        return -1;
    }
    int64_t lat = now_ns() - t;
    if (r.status != 404 || !json_string_is(r.body, "code", "NOT_FOUND")) {
        note_failure("GET /api/v1/no-such-route", &r, NULL);
        return -1;
    }
    return lat;
}

static struct sandbox *idle_take(void)
{
    pthread_mutex_lock(&bench.idle_lock);
    if (bench.idle_count == 0)
        bench.idle_waits++;
    while (bench.idle_count == 0)
        pthread_cond_wait(&bench.idle_cond, &bench.idle_lock);
    int i = bench.idle_ring[bench.idle_head];
    bench.idle_head = (bench.idle_head + 1) % bench.nsandboxes;
    bench.idle_count--;
    pthread_mutex_unlock(&bench.idle_lock);
    return &bench.sandboxes[i];
}

static void idle_put(struct sandbox *s)
{
    pthread_mutex_lock(&bench.idle_lock);
    int tail = (bench.idle_head + bench.idle_count) % bench.nsandboxes;
    bench.idle_ring[tail] = (int)(s - bench.sandboxes);
    bench.idle_count++;
    pthread_cond_signal(&bench.idle_cond);
    pthread_mutex_unlock(&bench.idle_lock);
}

/* Unscoped, a client takes the sandbox idle the longest and gives it back
 * after the answer: the service refuses an unscoped command overlapping any
 * other on its sandbox (409 SANDBOX_EXEC_SCOPE_BUSY), so a client never sends
 * one to a busy sandbox. With more sandboxes than clients one is always idle.
 * Scoped, the n-th command of the row (all clients counted) goes to sandbox
 * n mod sandboxes whatever runs there: a command slower than the next
 * `sandboxes` ones shares its sandbox, far below the service's per-sandbox
 * parallel limit (16 by default; a 429 would count as a failure). */
static int client_exec(struct client *cl, bool scoped, int64_t *lat)
{
    struct sandbox *s =
        scoped ? &bench.sandboxes[atomic_fetch_add(&bench.scoped_next, 1) % bench.nsandboxes]
               : idle_take();
    long seq = cl->seq++;
    char exec_id[96], scope[64];
    snprintf(exec_id, sizeof(exec_id), "%s-%c%d-%ld", bench.tag, scoped ? 's' : 'u', cl->id, seq);
    snprintf(scope, sizeof(scope), "s-%d-%ld", cl->id, seq);
    int now = atomic_fetch_add(&s->inflight, 1) + 1;
    atomic_int *overlap = &bench.max_overlap[scoped];
    int max = atomic_load(overlap);
    while (now > max && !atomic_compare_exchange_weak(overlap, &max, now))
        ;
    int64_t t = now_ns();
    int rc = op_exec(cl->conn, s, exec_id, scoped ? scope : NULL);
    *lat = now_ns() - t;
    atomic_fetch_sub(&s->inflight, 1);
    if (!scoped)
        idle_put(s);
    return rc;
}

static int client_new(struct client *cl, int64_t *lat)
{
    struct sandbox s = {0};
    snprintf(s.id, sizeof(s.id), "%s-n%d-%ld", bench.tag, cl->id, cl->seq++);
    int64_t t = now_ns();
    int rc = op_new_sandbox(cl->conn, &s);
    *lat = now_ns() - t;
    return rc;
}

static void *job_main(void *arg)
{
    struct job *j = arg;
    pthread_barrier_wait(j->start);
    if (j->kind == JOB_RELEASE) {
        int i;
        while ((i = atomic_fetch_add(&bench.release_next, 1)) < atomic_load(&bench.ncreated) &&
               i < bench.created_cap)
            if (op_release(j->cl->conn, bench.created[i]) < 0)
                atomic_fetch_add(&bench.release_failed, 1);
        return NULL;
    }
    for (int i = 0; i < j->quota; i++) {
        int64_t lat = 0;
        int rc;
        switch (j->kind) {
        case JOB_FORK:
            lat = time_fork_exec();
            rc = lat < 0 ? -1 : 0;
            if (rc < 0)
                note_failure("fork+exec /bin/true", NULL, "did not exit 0");
            break;
        case JOB_EXEC_UNSCOPED:
        case JOB_EXEC_SCOPED:
            rc = client_exec(j->cl, j->kind == JOB_EXEC_SCOPED, &lat);
            break;
        default:
            rc = client_new(j->cl, &lat);
            break;
        }
        if (rc == 0)
            j->lat[j->ok++] = lat;
        else
            j->failed++;
    }
    return NULL;
}

static void row_add(struct row *r, int64_t lat)
{
    if (r->n < r->cap)
        r->lat[r->n++] = lat;
}

/* `total` operations of one kind spread over the clients, all started
 * together; the row's wall time grows by the time until the last finished. */
static void run_parallel(struct row *row, enum job_kind kind, int total)
{
    int nthreads = bench.clients;
    if (kind != JOB_RELEASE && total < nthreads)
        nthreads = total;
    if (nthreads <= 0)
        return;
    struct job jobs[MAX_CLIENTS];
    pthread_t tids[MAX_CLIENTS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        int quota = total / nthreads + (i < total % nthreads);
        jobs[i] = (struct job){.cl = &bench.cls[i],
                               .kind = kind,
                               .quota = quota,
                               .lat = calloc((size_t)quota + 1, sizeof(int64_t)),
                               .start = &start};
        if (!jobs[i].lat || pthread_create(&tids[i], NULL, job_main, &jobs[i]) != 0) {
            fprintf(stderr, "api_bench: cannot start client %d\n", i);
            exit(2);
        }
    }
    pthread_barrier_wait(&start);
    int64_t t0 = now_ns();
    for (int i = 0; i < nthreads; i++)
        pthread_join(tids[i], NULL);
    int64_t wall = now_ns() - t0;
    pthread_barrier_destroy(&start);
    for (int i = 0; i < nthreads; i++) {
        if (row) {
            for (int k = 0; k < jobs[i].ok; k++)
                row_add(row, jobs[i].lat[k]);
            row->failures += jobs[i].failed;
        }
        free(jobs[i].lat);
    }
    if (row)
        row->wall_ns += wall;
}

/* ---- setup ----------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: api_bench --url http://HOST:PORT [--token T] [--commands 5000] "
                    "[--clients 32]\n"
                    "                 [--sandboxes 50] [--serial 500] [--new 200] [--rounds 5]\n"
                    "                 [--daemon-pid PID [--memory-sandboxes 1000]]\n"
                    "       (token defaults to $SANDBOX_INTERNAL_TOKEN)\n");
    exit(2);
}

static int parse_url(const char *url)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0)
        return -1;
    p += 7;
    char host[256], port[16] = "80";
    size_t hlen = strcspn(p, ":/");
    if (hlen == 0 || hlen >= sizeof(host))
        return -1;
    memcpy(host, p, hlen);
    host[hlen] = '\0';
    p += hlen;
    if (*p == ':') {
        size_t plen = strspn(p + 1, "0123456789");
        if (plen == 0 || plen >= sizeof(port))
            return -1;
        memcpy(port, p + 1, plen);
        port[plen] = '\0';
        p += 1 + plen;
    }
    if (*p && strcmp(p, "/") != 0)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(&bench.addr, ai->ai_addr, ai->ai_addrlen);
    bench.addr_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    snprintf(bench.host, sizeof(bench.host), "%s:%s", host, port);
    snprintf(bench.url, sizeof(bench.url), "http://%s:%s", host, port);
    return 0;
}

static int arg_int(const char *v, int min, int max)
{
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < min || n > max)
        usage();
    return (int)n;
}

static void parse_args(int argc, char **argv)
{
    const char *url = getenv("SANDLOOM_URL");
    const char *token = getenv("SANDBOX_INTERNAL_TOKEN");
    bench.commands = 5000;
    bench.clients = 32;
    bench.nsandboxes = 50;
    bench.serial = 500;
    bench.fresh = 200;
    bench.rounds = 5;
    bench.mem_sandboxes = 1000;
    bench.mem_inflight = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || !v)
            usage();
        i++;
        if (strcmp(a, "--url") == 0)
            url = v;
        else if (strcmp(a, "--token") == 0)
            token = v;
        else if (strcmp(a, "--commands") == 0)
            bench.commands = arg_int(v, 1, 10000000);
        else if (strcmp(a, "--clients") == 0)
            bench.clients = arg_int(v, 1, MAX_CLIENTS);
        else if (strcmp(a, "--sandboxes") == 0)
            bench.nsandboxes = arg_int(v, 1, 100000);
        else if (strcmp(a, "--serial") == 0)
            bench.serial = arg_int(v, 1, 10000000);
        else if (strcmp(a, "--new") == 0)
            bench.fresh = arg_int(v, 1, 1000000);
        else if (strcmp(a, "--rounds") == 0)
            bench.rounds = arg_int(v, 1, 1000);
        else if (strcmp(a, "--daemon-pid") == 0)
            bench.daemon_pid = arg_int(v, 1, 1 << 30);
        else if (strcmp(a, "--memory-sandboxes") == 0)
            bench.mem_sandboxes = arg_int(v, 1, 1000000);
        else
            usage();
    }
    if (!url || parse_url(url) < 0) {
        fprintf(stderr, "api_bench: --url must be http://HOST:PORT (got %s)\n",
                url ? url : "nothing");
        usage();
    }
    if (!token || !*token || strlen(token) >= sizeof(bench.token) || strpbrk(token, "\r\n")) {
        fprintf(stderr, "api_bench: a token is needed (--token or SANDBOX_INTERNAL_TOKEN)\n");
        usage();
    }
    snprintf(bench.token, sizeof(bench.token), "%s", token);
}

static void fail_setup(const char *what)
{
    fprintf(stderr, "api_bench: setup failed: %s\n", what);
    exit(2);
}

/* An untimed command on every sandbox the next slice uses: sessions that
 * went idle between rounds start again here, not inside a measurement. */
static void warm_up(struct sandbox *s, int n)
{
    static long seq;
    for (int i = 0; i < n; i++) {
        char exec_id[96];
        snprintf(exec_id, sizeof(exec_id), "%s-w-%ld", bench.tag, seq++);
        if (op_exec(bench.main_conn, &s[i], exec_id, NULL) < 0)
            fail_setup("warm-up exec of /bin/true");
    }
}

static void setup(void)
{
    uint32_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
        nonce = (uint32_t)getpid() ^ (uint32_t)time(NULL);
    snprintf(bench.tag, sizeof(bench.tag), "ab%08x", nonce);

    bench.main_conn = conn_new();
    struct http_resp r;
    if (http_request(bench.main_conn, "GET", "/health", NULL, &r) < 0 || r.status != 200 ||
        strcmp(r.body, "ok") != 0) {
        fprintf(stderr, "api_bench: no daemon answering GET /health at %s\n", bench.url);
        exit(2);
    }
    for (int i = 0; i < ROW_COUNT; i++) {
        int cap = i == ROW_BASE_A || i == ROW_SERIAL || i == ROW_FLOOR || i == ROW_AUTH_TOKEN ||
                          i == ROW_AUTH_KEY
                      ? bench.serial
                  : i == ROW_NEW_SERIAL || i == ROW_NEW_PARALLEL ? bench.fresh
                                                                 : bench.commands;
        rows[i].lat = calloc((size_t)cap, sizeof(int64_t));
        rows[i].cap = cap;
        if (!rows[i].lat)
            fail_setup("out of memory");
    }
    bench.created_cap = bench.nsandboxes + 1 + 2 * bench.fresh + bench.mem_sandboxes;
    bench.created = calloc((size_t)bench.created_cap, sizeof(*bench.created));
    bench.sandboxes = calloc((size_t)bench.nsandboxes, sizeof(*bench.sandboxes));
    bench.cls = calloc((size_t)bench.clients, sizeof(*bench.cls));
    bench.idle_ring = calloc((size_t)bench.nsandboxes, sizeof(int));
    if (!bench.created || !bench.sandboxes || !bench.cls || !bench.idle_ring)
        fail_setup("out of memory");
    pthread_mutex_init(&bench.idle_lock, NULL);
    pthread_cond_init(&bench.idle_cond, NULL);
    for (int i = 0; i < bench.nsandboxes; i++)
        bench.idle_ring[i] = i;
    bench.idle_count = bench.nsandboxes;

    snprintf(bench.warm.id, sizeof(bench.warm.id), "%s-serial", bench.tag);
    if (op_new_sandbox(bench.main_conn, &bench.warm) < 0)
        fail_setup("resolve + connect of the serial row's sandbox");
    for (int i = 0; i < bench.nsandboxes; i++) {
        struct sandbox *s = &bench.sandboxes[i];
        snprintf(s->id, sizeof(s->id), "%s-c%d", bench.tag, i);
        atomic_init(&s->inflight, 0);
        if (op_new_sandbox(bench.main_conn, s) < 0)
            fail_setup("resolve + connect of the concurrent rows' sandboxes "
                       "(is SANDBOX_WORKER_CAPACITY large enough?)");
    }
    warm_up(&bench.warm, 1);
    warm_up(bench.sandboxes, bench.nsandboxes);
    make_tenant_key();
    /* One open connection per client before any measurement. */
    for (int i = 0; i < bench.clients; i++) {
        bench.cls[i].id = i;
        bench.cls[i].conn = conn_new();
        if (http_request(bench.cls[i].conn, "GET", "/health", NULL, &r) < 0 || r.status != 200)
            fail_setup("a client's connection");
    }
}

/* Best-effort: the isolation level from /healthz, for the heading. */
static void isolation_level(char *out, size_t size)
{
    struct http_resp r;
    snprintf(out, size, "?");
    if (http_request(bench.main_conn, "GET", "/healthz", NULL, &r) < 0 || r.status != 200)
        return;
    const char *v = json_value(r.body, "selected_level");
    if (v && *v == '"') {
        size_t n = strcspn(v + 1, "\"");
        snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), v + 1);
    }
}

/* ---- report ----------------------------------------------------------- */

static double pct_ms(const struct row *r, double q)
{
    size_t rank = (size_t)(q * r->n + 0.999999); /* nearest rank */
    if (rank < 1)
        rank = 1;
    return r->lat[rank - 1] / 1e6;
}

static double rate(const struct row *r)
{
    return r->wall_ns > 0 ? r->n / (r->wall_ns / 1e9) : 0;
}

static void print_row(const struct row *r, const struct row *a, const struct row *b)
{
    if (r->n == 0) {
        printf("| %-52s | %5d | %7s | %7s | %7s | %8s | %7s | %7s |\n", r->name, 0, "-", "-", "-",
               "-", "-", "-");
        return;
    }
    printf("| %-52s | %5d | %7.2f | %7.2f | %7.2f | %8.1f |", r->name, r->n, pct_ms(r, 0.50),
           pct_ms(r, 0.95), pct_ms(r, 0.99), rate(r));
    if (r == a || a->n == 0)
        printf(" %7s |", "");
    else
        printf(" %6.2fx |", pct_ms(r, 0.50) / pct_ms(a, 0.50));
    if (r == b || b->n == 0 || rate(b) == 0)
        printf(" %7s |\n", "");
    else
        printf(" %6.2fx |\n", rate(r) / rate(b));
}

/* The share of `total` operations that round `round` runs. */
static int slice(int total, int round)
{
    return (int)((long long)total * (round + 1) / bench.rounds -
                 (long long)total * round / bench.rounds);
}

/* ---- daemon memory ---------------------------------------------------- */

/* VmRSS of the daemon in KiB (-1: unknown). */
static long rss_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

/* A background command (answered RUNNING at once). */
static int op_exec_background(struct http_conn *c, const struct sandbox *s, const char *exec_id,
                              const char *shell)
{
    char path[256], body[512];
    snprintf(path, sizeof(path), "/api/v1/sandboxes/%s/exec", s->id);
    snprintf(body, sizeof(body),
             "{\"exec_id\":\"%s\",\"generation\":%lld,\"argv\":[\"sh\",\"-c\",\"%s\"],"
             "\"background\":true}",
             exec_id, s->generation, shell);
    struct http_resp r;
    if (http_request(c, "POST", path, body, &r) < 0 || r.status != 200 ||
        !json_string_is(r.body, "status", "RUNNING")) {
        note_failure("background exec", NULL, "not RUNNING");
        return -1;
    }
    return 0;
}

/* The memory targets: RSS with mem_sandboxes connected and
 * mem_inflight commands running (sampled while they run, the maximum). */
static long memory_loaded(int *failures)
{
    struct sandbox *boxes = calloc((size_t)bench.mem_sandboxes, sizeof(*boxes));
    if (!boxes)
        return -1;
    for (int i = 0; i < bench.mem_sandboxes; i++) {
        snprintf(boxes[i].id, sizeof(boxes[i].id), "%s-mem-%d", bench.tag, i);
        if (op_new_sandbox(bench.main_conn, &boxes[i]) < 0)
            (*failures)++;
    }
    int n = bench.mem_inflight < bench.mem_sandboxes ? bench.mem_inflight : bench.mem_sandboxes;
    for (int i = 0; i < n; i++) {
        char exec_id[96];
        snprintf(exec_id, sizeof(exec_id), "%s-mem-%d", bench.tag, i);
        if (op_exec_background(bench.main_conn, &boxes[i], exec_id, "sleep 3") < 0)
            (*failures)++;
    }
    long peak = -1;
    for (int i = 0; i < 20; i++) {
        long kib = rss_kib(bench.daemon_pid);
        if (kib > peak)
            peak = kib;
        usleep(100 * 1000);
    }
    free(boxes);
    return peak;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    parse_args(argc, argv);
    /* Idle: the daemon as it started, before this run asked anything. */
    long rss_idle = bench.daemon_pid ? rss_kib(bench.daemon_pid) : -1;
    setup();

    snprintf(rows[ROW_BASE_A].name, sizeof(rows[0].name),
             "baseline A: fork+exec /bin/true, serial");
    snprintf(rows[ROW_BASE_B].name, sizeof(rows[0].name),
             "baseline B: fork+exec /bin/true, %d workers", bench.clients);
    snprintf(rows[ROW_SERIAL].name, sizeof(rows[0].name), "HTTP exec /bin/true, serial, warm");
    snprintf(rows[ROW_FLOOR].name, sizeof(rows[0].name), "HTTP floor: GET /health, serial");
    snprintf(rows[ROW_AUTH_TOKEN].name, sizeof(rows[0].name),
             "auth: internal token (GET, 404), serial");
    snprintf(rows[ROW_AUTH_KEY].name, sizeof(rows[0].name),
             "auth: tenant API key (GET, 404), serial");
    snprintf(rows[ROW_UNSCOPED].name, sizeof(rows[0].name),
             "HTTP exec, %d clients / %d sandboxes, unscoped", bench.clients, bench.nsandboxes);
    snprintf(rows[ROW_SCOPED].name, sizeof(rows[0].name),
             "HTTP exec, %d clients / %d sandboxes, exec_scope", bench.clients, bench.nsandboxes);
    snprintf(rows[ROW_NEW_SERIAL].name, sizeof(rows[0].name),
             "resolve + connect new sandbox, serial");
    snprintf(rows[ROW_NEW_PARALLEL].name, sizeof(rows[0].name),
             "resolve + connect new sandbox, %d-way", bench.clients);

    int64_t t_start = now_ns();
    for (int round = 0; round < bench.rounds; round++) {
        int nserial = slice(bench.serial, round);
        int ncommands = slice(bench.commands, round);
        int nfresh = slice(bench.fresh, round);
        warm_up(&bench.warm, 1);
        for (int i = 0; i < nserial; i++) {
            int64_t lat = time_fork_exec();
            if (lat < 0) {
                rows[ROW_BASE_A].failures++;
                note_failure("fork+exec /bin/true", NULL, "did not exit 0");
            } else {
                row_add(&rows[ROW_BASE_A], lat);
                rows[ROW_BASE_A].wall_ns += lat;
            }
            char exec_id[96];
            snprintf(exec_id, sizeof(exec_id), "%s-serial-%d-%d", bench.tag, round, i);
            int64_t t = now_ns();
            int rc = op_exec(bench.main_conn, &bench.warm, exec_id, NULL);
            lat = now_ns() - t;
            if (rc < 0) {
                rows[ROW_SERIAL].failures++;
            } else {
                row_add(&rows[ROW_SERIAL], lat);
                rows[ROW_SERIAL].wall_ns += lat;
            }
            lat = time_health();
            if (lat < 0) {
                rows[ROW_FLOOR].failures++;
            } else {
                row_add(&rows[ROW_FLOOR], lat);
                rows[ROW_FLOOR].wall_ns += lat;
            }
            /* Which credential goes first alternates, so neither always
             * follows the same request. */
            for (int k = 0; bench.tenant_key[0] && k < 2; k++) {
                bool key = (k + i) % 2 == 1;
                struct row *row = &rows[key ? ROW_AUTH_KEY : ROW_AUTH_TOKEN];
                lat = time_auth(key ? bench.tenant_key : bench.token);
                if (lat < 0) {
                    row->failures++;
                } else {
                    row_add(row, lat);
                    row->wall_ns += lat;
                }
            }
        }
        run_parallel(&rows[ROW_BASE_B], JOB_FORK, ncommands);
        warm_up(bench.sandboxes, bench.nsandboxes);
        run_parallel(&rows[ROW_UNSCOPED], JOB_EXEC_UNSCOPED, ncommands);
        run_parallel(&rows[ROW_SCOPED], JOB_EXEC_SCOPED, ncommands);
        for (int i = 0; i < nfresh; i++) {
            struct sandbox s = {0};
            snprintf(s.id, sizeof(s.id), "%s-ns-%d-%d", bench.tag, round, i);
            int64_t t = now_ns();
            int rc = op_new_sandbox(bench.main_conn, &s);
            int64_t lat = now_ns() - t;
            if (rc < 0) {
                rows[ROW_NEW_SERIAL].failures++;
            } else {
                row_add(&rows[ROW_NEW_SERIAL], lat);
                rows[ROW_NEW_SERIAL].wall_ns += lat;
            }
        }
        run_parallel(&rows[ROW_NEW_PARALLEL], JOB_NEW, nfresh);
    }
    double total_s = (now_ns() - t_start) / 1e9;
    int mem_failures = 0;
    long rss_loaded = bench.daemon_pid ? memory_loaded(&mem_failures) : -1;

    char level[32];
    isolation_level(level, sizeof(level));
    printf("api_bench: %s, %ld cores, isolation level %s, %d rounds interleaved, %.1f s\n",
           bench.url, sysconf(_SC_NPROCESSORS_ONLN), level, bench.rounds, total_s);
    printf("\n| %-52s | %5s | %7s | %7s | %7s | %8s | %7s | %7s |\n", "row", "n", "p50 ms",
           "p95 ms", "p99 ms", "per s", "p50/A", "rate/B");
    printf("|%.54s|%.7s|%.9s|%.9s|%.9s|%.10s|%.9s|%.9s|\n",
           "------------------------------------------------------", "-------", "---------",
           "---------", "---------", "----------", "---------", "---------");
    for (int i = 0; i < ROW_COUNT; i++) {
        qsort(rows[i].lat, (size_t)rows[i].n, sizeof(int64_t), cmp_i64);
        print_row(&rows[i], &rows[ROW_BASE_A], &rows[ROW_BASE_B]);
    }
    if (rows[ROW_AUTH_KEY].n && rows[ROW_AUTH_TOKEN].n)
        printf("\n- auth: a tenant API key costs %+.0f us p50 over the internal token on the same "
               "request (target <= +50 us)\n",
               1000 * (pct_ms(&rows[ROW_AUTH_KEY], 0.50) - pct_ms(&rows[ROW_AUTH_TOKEN], 0.50)));
    else
        printf("\n- auth: no tenant API key rows (the daemon has no tenant tables)\n");
    printf("\n- p50/A: the row's p50 over baseline A's; rate/B: the row's throughput over "
           "baseline B's.\n");
    printf("- latency: one request (resolve + connect: both requests), sent over a keep-alive\n"
           "  connection per client; per s: completed operations / the row's wall time.\n");
    printf("- unscoped: each command goes to the sandbox idle the longest, which its client\n"
           "  holds until the answer: the service answers 409 SANDBOX_EXEC_SCOPE_BUSY to\n"
           "  overlapping unscoped commands, so clients never share a sandbox (at most %d\n"
           "  command at once on one; a client waited for an idle sandbox %d times).\n",
           atomic_load(&bench.max_overlap[0]), bench.idle_waits);
    printf("- exec_scope: the row's n-th command goes to sandbox n mod %d, busy or not,\n"
           "  with scope s-<client>-<n>: up to %d commands ran at once on one sandbox.\n",
           bench.nsandboxes, atomic_load(&bench.max_overlap[1]));
    if (atomic_load(&bench.reconnects))
        printf("- %d requests were resent on a new connection after the daemon closed an idle "
               "one.\n",
               atomic_load(&bench.reconnects));
    printf("\nPython reference, published figures, NOT measured here: ~%.0f ms per command, "
           "~%.0f commands/s.\n",
           REF_MS_PER_COMMAND, REF_COMMANDS_PER_S);
    if (rows[ROW_SERIAL].n && rows[ROW_SCOPED].n && rows[ROW_UNSCOPED].n) {
        double best = rate(&rows[ROW_SCOPED]) > rate(&rows[ROW_UNSCOPED])
                          ? rate(&rows[ROW_SCOPED])
                          : rate(&rows[ROW_UNSCOPED]);
        printf("Beside them (another machine, indicative only): serial p50 here = %.2fx theirs, "
               "best concurrent rate here = %.1fx theirs.\n",
               pct_ms(&rows[ROW_SERIAL], 0.50) / REF_MS_PER_COMMAND, best / REF_COMMANDS_PER_S);
    }

    if (bench.daemon_pid) {
        printf("\nDaemon memory (VmRSS of sandloomd, pid %d):\n", bench.daemon_pid);
        printf("- idle, before this run: %.1f MiB (target <= 16 MiB: %s)\n", rss_idle / 1024.0,
               rss_idle >= 0 && rss_idle <= 16 * 1024 ? "met" : "MISSED");
        printf("- %d sandboxes connected, %d commands in flight (peak of 20 samples over 2 s): "
               "%.1f MiB (target <= 64 MiB: %s)\n",
               bench.mem_sandboxes, bench.mem_inflight, rss_loaded / 1024.0,
               rss_loaded >= 0 && rss_loaded <= 64 * 1024 && !mem_failures ? "met" : "MISSED");
        if (mem_failures)
            printf("- %d requests of the memory phase failed\n", mem_failures);
    }

    int failures = mem_failures;
    for (int i = 0; i < ROW_COUNT; i++)
        failures += rows[i].failures;
    if (failures) {
        printf("\nFAILED requests: %d\n", failures);
        for (int i = 0; i < ROW_COUNT; i++)
            if (rows[i].failures)
                printf("  %-52s %d\n", rows[i].name, rows[i].failures);
    } else {
        printf("\nfailures: 0 (every exec answered 200 SUCCEEDED, every connect 200 READY)\n");
    }
    fflush(stdout);

    /* Release everything this run created (not timed, best effort). */
    run_parallel(NULL, JOB_RELEASE, 0);
    if (atomic_load(&bench.release_failed))
        fprintf(stderr, "api_bench: %d of %d sandboxes could not be released\n",
                atomic_load(&bench.release_failed), atomic_load(&bench.ncreated));
    return failures ? 1 : 0;
}
