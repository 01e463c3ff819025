/* The ports route (port_proxy.h): HTTP through libcurl over a socket made by
 * the service in the sandbox's network, on a pool of its own; WebSocket as
 * a byte relay on one epoll thread.
 *
 * A relayed WebSocket is two sockets: the client's (libmicrohttpd's,
 * given back with sl_upgraded_close) and the server's (ours). Each
 * direction has one buffer of RELAY_BUF bytes: a side is read only while
 * its buffer is empty, so a slow reader slows the writer (TCP's window)
 * and the daemon never holds more than two buffers per connection. */
#include "api/port_proxy.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/errors.h"
#include "api/stream_slots.h"
#include "common/log.h"
#include "common/pool.h"
#include "common/util.h"
#include "config/config.h"
#include "service/service.h"

#define PORT_THREADS 8
#define PORT_QUEUE 256
#define CONNECT_TIMEOUT_MS 5000
#define HEAD_MAX ((size_t)16 * 1024)
#define RELAY_BUF ((size_t)64 * 1024)

struct pipe;

static struct {
    struct sl_pool *pool;
    int64_t timeout_ms;
    size_t max_body;
    /* the WebSocket relay */
    pthread_mutex_t lock; /* guards pending and the slots */
    struct sl_slots open;
    struct pipe *pending, *all;
    int epfd, wake_fd;
    pthread_t thread;
    bool started;
    atomic_bool stopping;
} ports = {.lock = PTHREAD_MUTEX_INITIALIZER,
           .open = {.code = SL_E_STREAM_LIMIT,
                    .what = "WebSockets to its ports",
                    .sandbox_var = "SANDBOX_MAX_STREAMS_PER_SANDBOX",
                    .worker_var = "SANDBOX_MAX_STREAMS"},
           .epfd = -1,
           .wake_fd = -1};

/* b's text (NUL-terminated; "" when empty), now the caller's; b is empty. */
static char *take_string(struct sl_buf *b)
{
    char *s = b->data ? b->data : strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return s;
}

/* ---- the request, taken from the connection before it is deferred ---- */

struct port_job {
    struct sl_service *svc;
    struct sl_deferred *d;
    char sandbox_id[129];
    unsigned port;
    int64_t generation;
    char method[16];
    char *target;       /* "/path?query", escaped as sent on */
    struct sl_buf head; /* forwarded header lines, "Name: value\r\n" each */
    const char *body;   /* the connection's, valid while it is deferred */
    size_t body_len;
    bool websocket;
};

static void job_free(struct port_job *j)
{
    free(j->target);
    sl_buf_free(&j->head);
    free(j);
}

/* Hop-by-hop headers (RFC 9110 §7.6.1), ours (Authorization, the
 * generation) and the ones rewritten here are not sent on. */
static bool dropped_header(const char *name, bool websocket)
{
    static const char *const always[] = {"host",
                                         "keep-alive",
                                         "proxy-connection",
                                         "proxy-authorization",
                                         "te",
                                         "trailer",
                                         "transfer-encoding",
                                         "authorization",
                                         "content-length",
                                         "expect",
                                         "x-sandbox-generation",
                                         "x-forwarded-for",
                                         "x-forwarded-host",
                                         "x-forwarded-proto",
                                         "x-forwarded-prefix",
                                         NULL};
    for (size_t i = 0; always[i]; i++)
        if (strcasecmp(name, always[i]) == 0)
            return true;
    /* An upgrade keeps what makes it one. */
    if (!websocket && (strcasecmp(name, "connection") == 0 || strcasecmp(name, "upgrade") == 0))
        return true;
    /* The browser's token, offered as a subprotocol (api/http.c). */
    return false;
}

static enum MHD_Result take_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    struct port_job *j = cls;
    if (!key || !value || dropped_header(key, j->websocket))
        return MHD_YES;
    if (strchr(value, '\r') || strchr(value, '\n'))
        return MHD_YES;
    if (strcasecmp(key, "Sec-WebSocket-Protocol") == 0) {
        /* Without our token among the offered ones. */
        char kept[1024] = "";
        char copy[1024];
        snprintf(copy, sizeof(copy), "%s", value);
        for (char *save = NULL, *p = strtok_r(copy, ", ", &save); p;
             p = strtok_r(NULL, ", ", &save))
            if (strncmp(p, "sandloom.", 9) != 0)
                snprintf(kept + strlen(kept), sizeof(kept) - strlen(kept), "%s%s",
                         kept[0] ? ", " : "", p);
        if (!kept[0])
            return MHD_YES;
        value = kept;
        sl_buf_append(&j->head, key, strlen(key));
        sl_buf_append(&j->head, ": ", 2);
        sl_buf_append(&j->head, value, strlen(value));
        sl_buf_append(&j->head, "\r\n", 2);
        return MHD_YES;
    }
    sl_buf_append(&j->head, key, strlen(key));
    sl_buf_append(&j->head, ": ", 2);
    sl_buf_append(&j->head, value, strlen(value));
    sl_buf_append(&j->head, "\r\n", 2);
    return MHD_YES;
}

struct query {
    struct sl_buf b;
};

static void put_escaped(struct sl_buf *b, const char *s, bool path)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        /* '+' is escaped: in a query it would read as a space. */
        bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~!$'()*,;:@", *p) ||
                    (path && (*p == '/' || *p == '=' || *p == '&'));
        if (keep) {
            sl_buf_append(b, (const char *)p, 1);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            sl_buf_append(b, e, 3);
        }
    }
}

static enum MHD_Result take_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    struct query *q = cls;
    sl_buf_append(&q->b, q->b.len ? "&" : "?", 1);
    put_escaped(&q->b, key, false);
    if (value) {
        sl_buf_append(&q->b, "=", 1);
        put_escaped(&q->b, value, false);
    }
    return MHD_YES;
}

static bool is_websocket(struct MHD_Connection *conn)
{
    const char *upgrade = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Upgrade");
    return upgrade && strcasecmp(upgrade, "websocket") == 0;
}

/* ---- HTTP ---- */

struct answer {
    struct sl_buf headers; /* "Name: value\n" */
    struct sl_buf body;
    bool too_large;
};

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    struct answer *a = ctx;
    size_t len = size * n;
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        a->headers.len = 0; /* a new answer (after a 100 Continue) */
        return len;
    }
    char line[8192];
    size_t l = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
    memcpy(line, data, l);
    line[l] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    char *colon = strchr(line, ':');
    if (!colon)
        return len;
    *colon = '\0';
    static const char *const hop[] = {
        "connection",       "keep-alive", "transfer-encoding", "content-length",
        "proxy-connection", "trailer",    "upgrade",           NULL};
    for (size_t i = 0; hop[i]; i++)
        if (strcasecmp(line, hop[i]) == 0)
            return len;
    const char *value = colon + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    sl_buf_append(&a->headers, line, strlen(line));
    sl_buf_append(&a->headers, ": ", 2);
    sl_buf_append(&a->headers, value, strlen(value));
    sl_buf_append(&a->headers, "\n", 1);
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct answer *a = ctx;
    size_t len = size * n;
    if (a->body.len + len > ports.max_body) {
        a->too_large = true;
        return 0;
    }
    return sl_buf_append(&a->body, data, len) == 0 ? len : 0;
}

struct given_socket {
    int fd;
    bool taken;
};

static curl_socket_t open_given(void *ctx, curlsocktype purpose, struct curl_sockaddr *addr)
{
    (void)purpose;
    (void)addr;
    struct given_socket *g = ctx;
    if (g->taken)
        return CURL_SOCKET_BAD;
    g->taken = true;
    return g->fd;
}

static int already_connected(void *ctx, curl_socket_t fd, curlsocktype purpose)
{
    (void)ctx;
    (void)fd;
    (void)purpose;
    return CURL_SOCKOPT_ALREADY_CONNECTED;
}

static int close_given(void *ctx, curl_socket_t fd)
{
    struct given_socket *g = ctx;
    if (fd == g->fd)
        g->fd = -1;
    return close(fd);
}

static void respond_err(struct port_job *j, const struct sl_error *err)
{
    struct sl_response r = {.status = sl_api_status_for_code(err->code),
                            .content_type = "application/json"};
    r.body = sl_api_error_body(err->code, err->message, NULL);
    r.len = r.body ? strlen(r.body) : 0;
    snprintf(r.log_detail, sizeof(r.log_detail), "%.255s", err->detail);
    sl_deferred_respond(j->d, &r);
}

/* One curl handle per pool thread, reset between requests (making one
 * took a measurable part of a small request); freed with its thread. */
static pthread_key_t curl_key;
static pthread_once_t curl_key_once = PTHREAD_ONCE_INIT;

static void curl_key_free(void *h)
{
    curl_easy_cleanup(h);
}
static void curl_key_make(void)
{
    (void)pthread_key_create(&curl_key, curl_key_free);
}

static CURL *thread_curl(void)
{
    pthread_once(&curl_key_once, curl_key_make);
    CURL *h = pthread_getspecific(curl_key);
    if (h) {
        curl_easy_reset(h);
        return h;
    }
    h = curl_easy_init();
    if (h && pthread_setspecific(curl_key, h) != 0) {
        curl_easy_cleanup(h);
        h = NULL;
    }
    return h;
}

static void run_http(struct port_job *j, int fd)
{
    struct given_socket g = {.fd = fd};
    struct answer a;
    sl_buf_init(&a.headers, 256 * 1024);
    sl_buf_init(&a.body, ports.max_body);
    a.too_large = false;
    char *url = NULL;
    if (asprintf(&url, "http://127.0.0.1:%u%s", j->port, j->target) < 0)
        url = NULL;
    struct curl_slist *hdrs = NULL;
    char host[64];
    snprintf(host, sizeof(host), "Host: localhost:%u", j->port);
    hdrs = curl_slist_append(hdrs, host);
    hdrs = curl_slist_append(hdrs, "Expect:");
    /* Every forwarded line; curl sends them as given. */
    if (j->head.data) {
        for (char *line = j->head.data, *next; line && *line; line = next) {
            next = strstr(line, "\r\n");
            if (next) {
                *next = '\0';
                next += 2;
            }
            hdrs = curl_slist_append(hdrs, line);
        }
    }
    CURL *h = thread_curl();
    CURLcode rc = CURLE_FAILED_INIT;
    if (h && url) {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never the daemon's http_proxy */
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_given);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &g);
        curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, already_connected);
        curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, close_given);
        curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, &g);
        curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)ports.timeout_ms);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &a);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
        if (strcmp(j->method, "HEAD") == 0) {
            curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        } else {
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, j->method);
            if (j->body_len || strcmp(j->method, "GET") != 0) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, j->body ? j->body : "");
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)j->body_len);
            }
        }
        rc = curl_easy_perform(h);
    }
    long status = 0;
    if (h)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    free(url);
    if (g.fd >= 0 && !g.taken)
        close(g.fd);
    if (rc != CURLE_OK || status < 100) {
        struct sl_error err = {0};
        if (a.too_large)
            sl_error_set(&err, SL_E_PORT_BAD_GATEWAY, 0,
                         "the server's answer is larger than SANDBOX_PORT_MAX_BODY_BYTES (%zu)",
                         ports.max_body);
        else if (rc == CURLE_OPERATION_TIMEDOUT)
            sl_error_set(&err, SL_E_PORT_BAD_GATEWAY, 0,
                         "the server on port %u did not answer within "
                         "SANDBOX_PORT_TIMEOUT_SECONDS",
                         j->port);
        else
            sl_error_set(&err, SL_E_PORT_BAD_GATEWAY, 0,
                         "the server on port %u did not answer with HTTP (%s)", j->port,
                         curl_easy_strerror(rc));
        sl_buf_free(&a.headers);
        sl_buf_free(&a.body);
        respond_err(j, &err);
        return;
    }
    struct sl_response r = {.status = (int)status};
    r.headers = take_string(&a.headers);
    if (!r.headers)
        r.headers = strdup("");
    r.body = a.body.data;
    r.len = a.body.len;
    a.body.data = NULL;
    sl_buf_free(&a.body);
    sl_deferred_respond(j->d, &r);
}

/* ---- WebSocket ---- */

struct pipe_tag {
    struct pipe *p;
    int side; /* 0 the client, 1 the server */
};

struct pipe {
    int fd[2];
    struct sl_upgraded *h;
    struct pipe_tag tags[2];
    char buf[2][RELAY_BUF]; /* buf[i]: read from fd[i], for fd[1 - i] */
    size_t len[2], pos[2];
    bool eof[2], shut[2];
    struct sl_slot slot;
    struct pipe *next, *pending_next;
};

static void relay_wake(void)
{
    uint64_t one = 1;
    if (write(ports.wake_fd, &one, sizeof(one)) < 0) {
        /* already due */
    }
}

static void pipe_close(struct pipe *p)
{
    for (int i = 0; i < 2; i++)
        if (p->fd[i] >= 0)
            (void)epoll_ctl(ports.epfd, EPOLL_CTL_DEL, p->fd[i], NULL);
    if (p->fd[1] >= 0)
        close(p->fd[1]);
    if (p->h)
        sl_upgraded_close(p->h);
    pthread_mutex_lock(&ports.lock);
    sl_slots_leave(&ports.open, &p->slot);
    pthread_mutex_unlock(&ports.lock);
    free(p);
}

static void pipe_interest(struct pipe *p)
{
    for (int i = 0; i < 2; i++) {
        bool in = !p->eof[i] && p->len[i] == 0;
        bool out = p->len[1 - i] > 0;
        struct epoll_event ev = {.events = (in ? EPOLLIN : 0) | (out ? EPOLLOUT : 0),
                                 .data.ptr = &p->tags[i]};
        (void)epoll_ctl(ports.epfd, EPOLL_CTL_MOD, p->fd[i], &ev);
    }
}

/* Move what can move. false: the relay is over. */
static bool pipe_step(struct pipe *p)
{
    for (int i = 0; i < 2; i++) {
        if (!p->eof[i] && p->len[i] == 0) {
            ssize_t n = recv(p->fd[i], p->buf[i], RELAY_BUF, 0);
            if (n > 0) {
                p->len[i] = (size_t)n;
                p->pos[i] = 0;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                p->eof[i] = true;
            }
        }
        int to = 1 - i;
        while (p->len[i] > 0) {
            ssize_t n = send(p->fd[to], p->buf[i] + p->pos[i], p->len[i], MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    break;
                return false;
            }
            p->pos[i] += (size_t)n;
            p->len[i] -= (size_t)n;
        }
        /* One side ended and all it said is through: so does the other's
         * way in. */
        if (p->eof[i] && p->len[i] == 0 && !p->shut[to]) {
            p->shut[to] = true;
            (void)shutdown(p->fd[to], SHUT_WR);
        }
    }
    if (p->eof[0] && p->eof[1] && !p->len[0] && !p->len[1])
        return false;
    pipe_interest(p);
    return true;
}

static void remove_pipe(struct pipe *p)
{
    for (struct pipe **pp = &ports.all; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pipe_close(p);
}

/* The upgraded relays not yet the thread's, taken off the list. */
static struct pipe *take_pending_pipes(void)
{
    pthread_mutex_lock(&ports.lock);
    struct pipe *q = ports.pending;
    ports.pending = NULL;
    pthread_mutex_unlock(&ports.lock);
    return q;
}

static void *relay_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "sl-port-relay");
    struct epoll_event evs[64];
    while (!atomic_load(&ports.stopping)) {
        int n = epoll_wait(ports.epfd, evs, 64, 1000);
        for (int i = 0; i < n; i++) {
            if (!evs[i].events)
                continue;
            if (!evs[i].data.ptr) {
                uint64_t v;
                (void)read(ports.wake_fd, &v, sizeof(v));
                struct pipe *q = take_pending_pipes();
                while (q) {
                    struct pipe *p = q;
                    q = q->pending_next;
                    bool ok = true;
                    for (int s = 0; s < 2 && ok; s++) {
                        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->tags[s]};
                        ok = epoll_ctl(ports.epfd, EPOLL_CTL_ADD, p->fd[s], &ev) == 0;
                    }
                    p->next = ports.all;
                    ports.all = p;
                    if (!ok || !pipe_step(p))
                        remove_pipe(p);
                }
                continue;
            }
            struct pipe *p = ((struct pipe_tag *)evs[i].data.ptr)->p;
            /* A side that reset or hung up is read to its end (recv says
             * so); one that errs while its buffer waits would wake the
             * thread for ever: the relay ends. */
            if ((evs[i].events & EPOLLERR) || !pipe_step(p)) {
                remove_pipe(p);
                for (int k = i + 1; k < n; k++)
                    if (evs[k].data.ptr && ((struct pipe_tag *)evs[k].data.ptr)->p == p)
                        evs[k].events = 0;
            }
        }
    }
    while (ports.all)
        remove_pipe(ports.all);
    return NULL;
}

struct port_upgrade {
    struct sl_upgrade u;
    struct pipe *p;
};

static void upgrade_start(struct sl_upgrade *u, int fd, const char *extra, size_t extra_len,
                          struct sl_upgraded *h)
{
    struct port_upgrade *pu = (struct port_upgrade *)u;
    struct pipe *p = pu->p;
    free(pu);
    p->fd[0] = fd;
    p->h = h;
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    /* What the client sent after its upgrade goes to the server first. */
    if (extra_len) {
        size_t take = extra_len < RELAY_BUF ? extra_len : RELAY_BUF;
        memcpy(p->buf[0], extra, take);
        p->len[0] = take;
    }
    pthread_mutex_lock(&ports.lock);
    bool stopping = atomic_load(&ports.stopping) || !ports.started;
    if (!stopping) {
        p->pending_next = ports.pending;
        ports.pending = p;
    }
    pthread_mutex_unlock(&ports.lock);
    if (stopping)
        pipe_close(p);
    else
        relay_wake();
}

static void upgrade_abandon(struct sl_upgrade *u)
{
    struct port_upgrade *pu = (struct port_upgrade *)u;
    struct pipe *p = pu->p;
    free(pu);
    p->fd[0] = -1;
    pipe_close(p);
}

/* The value of header `name` in a response head, copied into out. */
static void head_value(const char *head, const char *name, char *out, size_t size)
{
    out[0] = '\0';
    size_t nlen = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        const char *l = line + 2;
        if (strncasecmp(l, name, nlen) == 0 && l[nlen] == ':') {
            const char *v = l + nlen + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t vlen = strcspn(v, "\r\n");
            snprintf(out, size, "%.*s", (int)vlen, v);
            return;
        }
    }
}

static int wait_fd(int fd, short events, int64_t until_us)
{
    for (;;) {
        int64_t left = (until_us - sl_mono_us()) / 1000;
        if (left <= 0)
            return -1;
        struct pollfd pf = {.fd = fd, .events = events};
        int r = poll(&pf, 1, (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

static void run_websocket(struct port_job *j, int fd)
{
    struct sl_error err = {0};
    int64_t until = sl_mono_us() + ports.timeout_ms * 1000;
    char *req = NULL;
    int n = asprintf(&req, "GET %s HTTP/1.1\r\nHost: localhost:%u\r\n%.*s\r\n", j->target, j->port,
                     (int)j->head.len, j->head.data ? j->head.data : "");
    size_t sent = 0;
    while (n > 0 && sent < (size_t)n) {
        ssize_t w = send(fd, req + sent, (size_t)n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(fd, POLLOUT, until) == 0)
            continue;
        break;
    }
    free(req);
    char head[HEAD_MAX + 1];
    size_t got = 0;
    char *end = NULL;
    while (n > 0 && sent == (size_t)n && !end && got < HEAD_MAX) {
        ssize_t r = recv(fd, head + got, HEAD_MAX - got, 0);
        if (r > 0) {
            got += (size_t)r;
            head[got] = '\0';
            end = strstr(head, "\r\n\r\n");
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(fd, POLLIN, until) == 0)
            continue;
        break;
    }
    int status = 0;
    if (end && sscanf(head, "HTTP/1.%*d %d", &status) != 1)
        status = 0;
    if (status != 101) {
        close(fd);
        if (!end)
            sl_error_set(&err, SL_E_PORT_BAD_GATEWAY, 0,
                         "the server on port %u did not answer the WebSocket upgrade", j->port);
        else
            sl_error_set(&err, SL_E_PORT_BAD_GATEWAY, 0,
                         "the server on port %u answered the WebSocket upgrade with HTTP %d",
                         j->port, status);
        respond_err(j, &err);
        return;
    }
    struct pipe *p = calloc(1, sizeof(*p));
    struct port_upgrade *pu = calloc(1, sizeof(*pu));
    int joined = -1;
    if (p && pu) {
        pthread_mutex_lock(&ports.lock);
        joined = sl_slots_join(&ports.open, &p->slot, j->sandbox_id, &err);
        pthread_mutex_unlock(&ports.lock);
    } else {
        sl_error_set(&err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    if (joined < 0) {
        free(p);
        free(pu);
        close(fd);
        respond_err(j, &err);
        return;
    }
    p->fd[0] = -1;
    p->fd[1] = fd;
    p->tags[0] = (struct pipe_tag){.p = p, .side = 0};
    p->tags[1] = (struct pipe_tag){.p = p, .side = 1};
    /* What the server sent after its 101 goes to the client first. */
    size_t head_len = (size_t)(end - head) + 4;
    if (got > head_len) {
        memcpy(p->buf[1], head + head_len, got - head_len);
        p->len[1] = got - head_len;
    }
    *end = '\0';
    head_value(head, "Sec-WebSocket-Accept", pu->u.accept, sizeof(pu->u.accept));
    head_value(head, "Sec-WebSocket-Protocol", pu->u.protocol, sizeof(pu->u.protocol));
    head_value(head, "Sec-WebSocket-Extensions", pu->u.extensions, sizeof(pu->u.extensions));
    pu->p = p;
    pu->u.start = upgrade_start;
    pu->u.abandon = upgrade_abandon;
    struct sl_response r = {
        .status = 101, .content_type = "application/octet-stream", .upgrade = &pu->u};
    sl_deferred_respond(j->d, &r);
}

/* ---- the job ---- */

static void run_job(void *arg)
{
    struct port_job *j = arg;
    struct sl_error err = {0};
    int fd = -1;
    if (sl_svc_port_connect(j->svc, j->sandbox_id, j->generation, j->port, CONNECT_TIMEOUT_MS, &fd,
                            &err) < 0)
        respond_err(j, &err);
    else if (j->websocket)
        run_websocket(j, fd);
    else
        run_http(j, fd);
    job_free(j);
}

void sl_port_proxy_handle(struct sl_request *req, struct sl_response *resp)
{
    struct sl_error err = {0};
    char *end = NULL;
    unsigned long port = strtoul(req->params[1], &end, 10);
    const char *gen_text =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Sandbox-Generation");
    char *gend = NULL;
    long long generation = gen_text ? strtoll(gen_text, &gend, 10) : 0;
    if (!*req->params[1] || *end || port < 1 || port > 65535 ||
        (gen_text && (!*gen_text || *gend || generation < 1))) {
        sl_error_set(&err, SL_E_INVALID_REQUEST, 0,
                     gen_text && (!*gen_text || *gend || generation < 1)
                         ? "X-Sandbox-Generation must be a positive integer"
                         : "the port is a number from 1 to 65535");
        resp->status = 422;
        resp->content_type = "application/json";
        resp->body = sl_api_error_body(err.code, err.message, NULL);
        resp->len = resp->body ? strlen(resp->body) : 0;
        return;
    }
    struct port_job *j = calloc(1, sizeof(*j));
    struct sl_buf target;
    sl_buf_init(&target, 64 * 1024);
    sl_buf_append(&target, "/", 1);
    put_escaped(&target, req->params[2] ? req->params[2] : "", true);
    struct query q;
    sl_buf_init(&q.b, 64 * 1024);
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, take_arg, &q);
    if (q.b.len)
        sl_buf_append(&target, q.b.data, q.b.len);
    sl_buf_free(&q.b);
    if (j)
        j->target = take_string(&target);
    sl_buf_free(&target);
    if (!j || !j->target) {
        if (j)
            job_free(j);
        resp->status = 500;
        return;
    }
    j->svc = req->svc;
    snprintf(j->sandbox_id, sizeof(j->sandbox_id), "%s", req->params[0]);
    j->port = (unsigned)port;
    j->generation = generation;
    snprintf(j->method, sizeof(j->method), "%s", req->method);
    j->websocket = is_websocket(req->conn) && strcmp(req->method, "GET") == 0;
    sl_buf_init(&j->head, 256 * 1024);
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, take_header, j);
    /* Where the request came from and under which prefix the app lives. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char ip[64] = "";
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
    }
    if (ip[0]) {
        char xff[96];
        int xl = snprintf(xff, sizeof(xff), "X-Forwarded-For: %s\r\n", ip);
        sl_buf_append(&j->head, xff, (size_t)xl);
    }
    const char *host = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Host");
    char line[512];
    int l = snprintf(line, sizeof(line),
                     "X-Forwarded-Proto: http\r\nX-Forwarded-Prefix: "
                     "/api/v1/sandboxes/%s/ports/%u\r\n",
                     j->sandbox_id, j->port);
    sl_buf_append(&j->head, line, (size_t)l);
    if (host && !strpbrk(host, "\r\n")) {
        l = snprintf(line, sizeof(line), "X-Forwarded-Host: %.400s\r\n", host);
        sl_buf_append(&j->head, line, (size_t)l);
    }
    j->body = req->raw_body;
    j->body_len = req->raw_len;
    j->d = sl_request_defer(req);
    if (sl_pool_submit(ports.pool, run_job, j) < 0) {
        sl_error_set(&err, SL_E_STREAM_LIMIT, 0,
                     "too many requests to sandbox ports wait already: retry in a moment");
        respond_err(j, &err);
        job_free(j);
    }
}

int sl_ports_start(const struct sl_config *cfg, struct sl_error *err)
{
    ports.timeout_ms = cfg->port_timeout_seconds * 1000;
    ports.max_body = (size_t)cfg->port_max_body_bytes;
    ports.open.per_sandbox = cfg->max_streams_per_sandbox;
    ports.open.per_worker = cfg->max_streams;
    atomic_store(&ports.stopping, false);
    ports.pool = sl_pool_new("sl-ports", PORT_THREADS, PORT_QUEUE);
    ports.epfd = epoll_create1(EPOLL_CLOEXEC);
    ports.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (!ports.pool || ports.epfd < 0 || ports.wake_fd < 0 ||
        epoll_ctl(ports.epfd, EPOLL_CTL_ADD, ports.wake_fd, &ev) < 0 ||
        pthread_create(&ports.thread, NULL, relay_main, NULL) != 0) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot start the ports' relay");
        sl_pool_free(ports.pool);
        ports.pool = NULL;
        if (ports.epfd >= 0)
            close(ports.epfd);
        if (ports.wake_fd >= 0)
            close(ports.wake_fd);
        ports.epfd = ports.wake_fd = -1;
        return -1;
    }
    ports.started = true;
    return 0;
}

void sl_ports_stop(void)
{
    if (!ports.started)
        return;
    /* Requests under way answer (their connections are still there). */
    sl_pool_free(ports.pool);
    ports.pool = NULL;
    atomic_store(&ports.stopping, true);
    relay_wake();
    pthread_join(ports.thread, NULL);
    for (struct pipe *q = take_pending_pipes(), *p; (p = q);) {
        q = q->pending_next;
        pipe_close(p);
    }
    ports.started = false;
    close(ports.epfd);
    close(ports.wake_fd);
    ports.epfd = ports.wake_fd = -1;
}

char *sl_port_host_path(const char *domain, const char *host, const char *url)
{
    if (!domain || !*domain || !host || !url || url[0] != '/')
        return NULL;
    size_t hlen = strcspn(host, ":"); /* without the port */
    size_t dlen = strlen(domain);
    if (hlen <= dlen + 1 || host[hlen - dlen - 1] != '.' ||
        strncasecmp(host + hlen - dlen, domain, dlen) != 0)
        return NULL;
    size_t llen = hlen - dlen - 1; /* "<port>-<id>" */
    const char *label = host;
    size_t digits = 0;
    while (digits < llen && label[digits] >= '0' && label[digits] <= '9')
        digits++;
    if (!digits || digits > 5 || digits + 1 >= llen || label[digits] != '-')
        return NULL;
    const char *id = label + digits + 1;
    size_t idlen = llen - digits - 1;
    for (size_t i = 0; i < idlen; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return NULL; /* a DNS label: also no dot, so one level only */
    }
    char *path = NULL;
    if (asprintf(&path, "/api/v1/sandboxes/%.*s/ports/%.*s%s", (int)idlen, id, (int)digits, label,
                 url) < 0)
        return NULL;
    return path;
}
