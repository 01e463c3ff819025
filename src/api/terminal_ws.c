/* Terminal clients over WebSocket: one relay thread, one epoll set.
 *
 * Per client: its socket (frames in, frames out), a copy of the terminal's
 * master (input written to it, resizes), and a reader of the terminal's
 * output log (service/outlog.h) whose waiter wakes the thread when output
 * comes. Bounds, so no client makes the daemon buffer without limit: at
 * most OUT_HIGH bytes of frames wait for a client's socket (past it the
 * log is not read for that client: a client that falls behind the log's
 * ring gets a gap message); at most INPUT_MAX bytes of input wait for the
 * terminal (past it the socket is not read: the client's TCP window
 * fills); a client's message is at most FRAME_MAX bytes (close 1009).
 *
 * A client is referenced by the relay's list and, while registered, by its
 * log waiter (whose wake may run on the supervisor's thread as the client
 * closes): the last reference frees it. */
#include "api/terminal_ws.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "api/router.h"
#include "api/stream_slots.h"
#include "api/websocket.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "service/outlog.h"
#include "service/service.h"

#define OUT_HIGH ((size_t)256 * 1024)
#define OUT_LIMIT (4 * OUT_HIGH) /* past it a client that does not read is let go */
#define INPUT_MAX ((size_t)64 * 1024)
#define FRAME_MAX ((size_t)64 * 1024)
#define READ_CHUNK ((size_t)32 * 1024)
#define IN_BUF (FRAME_MAX + 16)

struct term_client;

struct tag {
    struct term_client *c;
    int which; /* 0 socket, 1 master */
};

struct term_client {
    atomic_int refs;
    struct sl_service *svc;
    char sandbox_id[129];
    struct sl_terminal t;
    int fd;
    struct sl_upgraded *h;
    struct sl_slot slot;
    struct tag tags[2];
    unsigned short cols, rows;
    /* Output: where this client reads the log next, its waiter. */
    uint64_t off[2];
    bool replaying; /* the first read: a gap there is the replay's start */
    struct sl_outlog_waiter waiter;
    atomic_bool woken;
    bool waiting; /* the waiter is registered (relay's view) */
    /* Frames for the socket. */
    unsigned char *out;
    size_t out_len, out_pos;
    bool want_out; /* EPOLLOUT on the socket */
    /* From the socket, not yet a whole frame. */
    unsigned char in[IN_BUF];
    size_t in_len;
    /* Input for the terminal, not yet taken by it. */
    char input[INPUT_MAX];
    size_t input_len;
    bool want_master; /* EPOLLOUT on the master */
    /* A text message in fragments. */
    char *frag;
    size_t frag_len;
    int frag_opcode;
    bool closing; /* our close frame is queued: nothing more after it */
    bool ended_sent;
    int64_t last_ping_us, last_touch_us;
    struct term_client *next, *pending_next;
};

static struct {
    pthread_mutex_t lock; /* guards pending and clients (the slots) */
    struct sl_slots open;
    struct term_client *pending; /* upgraded, not yet the thread's */
    struct term_client *clients; /* the relay thread's */
    int epfd, wake_fd;
    pthread_t thread;
    bool started;
    atomic_bool stopping;
    int64_t keepalive_us;
    size_t replay_bytes;
} relay = {.lock = PTHREAD_MUTEX_INITIALIZER,
           .open = {.code = SL_E_STREAM_LIMIT,
                    .what = "terminal clients",
                    .sandbox_var = "SANDBOX_MAX_STREAMS_PER_SANDBOX",
                    .worker_var = "SANDBOX_MAX_STREAMS"},
           .epfd = -1,
           .wake_fd = -1};

static void relay_wake(void)
{
    uint64_t one = 1;
    if (write(relay.wake_fd, &one, sizeof(one)) < 0) {
        /* the counter is already non-zero: the thread wakes anyway */
    }
}

static void client_put(struct term_client *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    free(c->out);
    free(c->frag);
    free(c);
}

/* The log's wake (any thread): only a flag and the relay's eventfd. */
static void on_output(struct sl_outlog_waiter *w)
{
    struct term_client *c =
        (struct term_client *)((char *)w - offsetof(struct term_client, waiter));
    atomic_store(&c->woken, true);
    relay_wake();
    client_put(c); /* the waiter's reference */
}

/* ---- frames out ---- */

static int queue_frame(struct term_client *c, int opcode, const void *data, size_t len)
{
    if (c->closing)
        return 0;
    if (c->out_pos && c->out_pos == c->out_len)
        c->out_pos = c->out_len = 0;
    /* Answers the client does not read (pongs, errors) beyond what the
     * output may hold: it goes. */
    if (c->out_len - c->out_pos > OUT_LIMIT && opcode != SL_WS_CLOSE)
        return -1;
    unsigned char hdr[10];
    size_t hlen = sl_ws_header(hdr, opcode, len);
    size_t need = c->out_len + hlen + len;
    if (c->out_pos > 0 && need > OUT_HIGH + READ_CHUNK + 64) {
        memmove(c->out, c->out + c->out_pos, c->out_len - c->out_pos);
        c->out_len -= c->out_pos;
        c->out_pos = 0;
        need = c->out_len + hlen + len;
    }
    unsigned char *grown = realloc(c->out, need);
    if (!grown)
        return -1;
    c->out = grown;
    memcpy(c->out + c->out_len, hdr, hlen);
    if (len)
        memcpy(c->out + c->out_len + hlen, data, len);
    c->out_len = need;
    if (opcode == SL_WS_CLOSE)
        c->closing = true;
    return 0;
}

static int queue_json(struct term_client *c, json_t *doc)
{
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!text)
        return -1;
    int rc = queue_frame(c, SL_WS_TEXT, text, strlen(text));
    free(text);
    return rc;
}

static int queue_close(struct term_client *c, int code)
{
    unsigned char b[2] = {(unsigned char)(code >> 8), (unsigned char)code};
    return queue_frame(c, SL_WS_CLOSE, b, sizeof(b));
}

static void queue_error(struct term_client *c, const char *code, const char *message)
{
    (void)queue_json(c,
                     json_pack("{s:s,s:s,s:s}", "type", "error", "code", code, "message", message));
}

static size_t out_pending(const struct term_client *c)
{
    return c->out_len - c->out_pos;
}

/* ---- epoll interest ---- */

/* Whether the client's socket is read now. */
static bool reading(const struct term_client *c)
{
    return c->input_len < INPUT_MAX / 2 && out_pending(c) < OUT_HIGH && !c->closing;
}

static void set_interest(struct term_client *c)
{
    bool out = out_pending(c) > 0;
    /* Input waiting for the terminal, or answers waiting for the client:
     * the socket is not read meanwhile (its TCP window pushes back). Its
     * half-close is asked for only while it is read (level-triggered, it
     * would wake the thread for ever). */
    bool in = reading(c);
    struct epoll_event ev = {.events = (in ? EPOLLIN | EPOLLRDHUP : 0) | (out ? EPOLLOUT : 0),
                             .data.ptr = &c->tags[0]};
    (void)epoll_ctl(relay.epfd, EPOLL_CTL_MOD, c->fd, &ev);
    bool want_master = c->input_len > 0;
    if (want_master != c->want_master) {
        struct epoll_event mev = {.events = EPOLLOUT, .data.ptr = &c->tags[1]};
        (void)epoll_ctl(relay.epfd, want_master ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c->t.master, &mev);
        c->want_master = want_master;
    }
}

/* ---- output: the log to frames ---- */

static int pump_output(struct term_client *c)
{
    char chunk[READ_CHUNK];
    while (!c->closing && out_pending(c) < OUT_HIGH) {
        struct sl_outlog_chunk k;
        int rc = sl_outlog_read(c->t.log, c->off, SL_OUT_STDOUT, chunk, sizeof(chunk), &k);
        if (rc == 1) {
            if (k.skipped && !c->replaying &&
                queue_json(
                    c, json_pack("{s:s,s:I}", "type", "gap", "bytes", (json_int_t)k.skipped)) < 0)
                return -1;
            c->replaying = false;
            c->off[k.stream] = k.offset + k.len;
            if (k.stream == SL_OUT_STDOUT && k.len &&
                queue_frame(c, SL_WS_BINARY, chunk, k.len) < 0)
                return -1;
            continue;
        }
        c->replaying = false;
        if (rc < 0) {
            /* The shell has ended: its answer, then goodbye. */
            if (!c->ended_sent) {
                c->ended_sent = true;
                json_t *end = json_deep_copy(sl_outlog_end(c->t.log));
                if (end)
                    json_object_set_new(end, "type", json_string("exit"));
                if (queue_json(c, end) < 0)
                    return -1;
                queue_close(c, SL_WS_CLOSE_NORMAL);
            }
            return 0;
        }
        atomic_fetch_add(&c->refs, 1); /* the waiter's */
        if (sl_outlog_wait(c->t.log, c->off, &c->waiter)) {
            c->waiting = true;
            return 0;
        }
        client_put(c); /* not registered: read again */
    }
    return 0;
}

/* ---- input: frames to the terminal ---- */

static void type_input(struct term_client *c, const char *data, size_t len)
{
    size_t room = INPUT_MAX - c->input_len;
    if (len > room) {
        /* Only when a client ignores the window it was given. */
        queue_error(c, "SANDBOX_TERMINAL_INPUT_FULL",
                    "the terminal is not reading its input: some of it was dropped");
        len = room;
    }
    memcpy(c->input + c->input_len, data, len);
    c->input_len += len;
    int64_t now = sl_mono_us();
    if (now - c->last_touch_us > 1000000) {
        c->last_touch_us = now;
        sl_svc_terminal_touch(c->svc, c->sandbox_id);
    }
}

static void resize(struct term_client *c, json_t *msg)
{
    json_t *jc = json_object_get(msg, "cols"), *jr = json_object_get(msg, "rows");
    json_int_t cols = json_is_integer(jc) ? json_integer_value(jc) : 0;
    json_int_t rows = json_is_integer(jr) ? json_integer_value(jr) : 0;
    if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000) {
        queue_error(c, SL_E_INVALID_REQUEST, "a resize needs integer cols and rows from 1 to 1000");
        return;
    }
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    /* The kernel tells the terminal's foreground job (SIGWINCH). */
    if (ioctl(c->t.master, TIOCSWINSZ, &ws) == 0) {
        c->cols = (unsigned short)cols;
        c->rows = (unsigned short)rows;
    }
}

static void on_text(struct term_client *c, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(text, len, 0, &jerr);
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!json_is_object(msg) || !type) {
        queue_error(c, SL_E_INVALID_REQUEST,
                    "a text message is a JSON object with a \"type\": \"input\" or \"resize\"");
    } else if (strcmp(type, "input") == 0) {
        json_t *data = json_object_get(msg, "data");
        if (json_is_string(data))
            type_input(c, json_string_value(data), json_string_length(data));
        else
            queue_error(c, SL_E_INVALID_REQUEST, "an input message needs a string \"data\"");
    } else if (strcmp(type, "resize") == 0) {
        resize(c, msg);
    } else {
        queue_error(c, SL_E_INVALID_REQUEST,
                    "unknown message type: the types are \"input\" and \"resize\"");
    }
    json_decref(msg);
}

/* One whole frame from the client. false: the connection ends. */
static bool on_frame(struct term_client *c, const struct sl_ws_frame *f)
{
    switch (f->opcode) {
    case SL_WS_BINARY:
        type_input(c, (const char *)f->payload, f->len);
        if (!f->fin)
            c->frag_opcode = SL_WS_BINARY;
        return true;
    case SL_WS_TEXT:
    case SL_WS_CONT:
        if (f->opcode == SL_WS_CONT && c->frag_opcode == SL_WS_BINARY) {
            type_input(c, (const char *)f->payload, f->len);
            if (f->fin)
                c->frag_opcode = 0;
            return true;
        }
        if (f->opcode == SL_WS_TEXT && f->fin && !c->frag_len) {
            on_text(c, (const char *)f->payload, f->len);
            return true;
        }
        if (c->frag_len + f->len > FRAME_MAX) {
            queue_close(c, SL_WS_CLOSE_TOO_BIG);
            return true;
        }
        char *grown = realloc(c->frag, c->frag_len + f->len + 1);
        if (!grown)
            return false;
        c->frag = grown;
        memcpy(c->frag + c->frag_len, f->payload, f->len);
        c->frag_len += f->len;
        c->frag_opcode = SL_WS_TEXT;
        if (f->fin) {
            on_text(c, c->frag, c->frag_len);
            c->frag_len = 0;
            c->frag_opcode = 0;
        }
        return true;
    case SL_WS_PING:
        return queue_frame(c, SL_WS_PONG, f->payload, f->len) == 0;
    case SL_WS_PONG:
        return true;
    case SL_WS_CLOSE:
        /* Its close, answered; the connection ends once ours is sent. */
        queue_close(c, SL_WS_CLOSE_NORMAL);
        return true;
    default:
        return false;
    }
}

/* Take the whole frames c->in holds, as long as the terminal has room for
 * what a frame types (a frame that does not fit waits in c->in: its input
 * is never dropped). false: the connection ends. */
static bool take_frames(struct term_client *c)
{
    size_t at = 0;
    bool ok = true;
    while (ok && !c->closing) {
        size_t payload = 0;
        ssize_t whole = sl_ws_frame_size(c->in + at, c->in_len - at, &payload);
        if (whole == 0)
            break;
        if (whole > 0 && payload > INPUT_MAX - c->input_len && (c->in[at] & 0x0f) != SL_WS_PING &&
            (c->in[at] & 0x0f) != SL_WS_PONG && (c->in[at] & 0x0f) != SL_WS_CLOSE)
            break; /* the terminal reads on first */
        struct sl_ws_frame f;
        ssize_t used = sl_ws_parse(c->in + at, c->in_len - at, FRAME_MAX, &f);
        if (used == 0)
            break;
        if (used == -2) {
            queue_close(c, SL_WS_CLOSE_TOO_BIG);
            break;
        }
        if (used < 0) {
            queue_close(c, SL_WS_CLOSE_PROTOCOL);
            break;
        }
        ok = on_frame(c, &f);
        at += (size_t)used;
    }
    memmove(c->in, c->in + at, c->in_len - at);
    c->in_len -= at;
    return ok;
}

/* Read what the socket has. false: the connection ends. */
static bool read_socket(struct term_client *c)
{
    while (reading(c) && c->in_len < sizeof(c->in)) {
        ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EINTR;
        c->in_len += (size_t)n;
        if (!take_frames(c))
            return false;
    }
    return true;
}

static bool write_socket(struct term_client *c)
{
    while (out_pending(c) > 0) {
        ssize_t n = send(c->fd, c->out + c->out_pos, out_pending(c), MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR;
        c->out_pos += (size_t)n;
    }
    c->out_pos = c->out_len = 0;
    return !c->closing; /* our close frame went: done */
}

static bool write_master(struct term_client *c)
{
    while (c->input_len > 0) {
        ssize_t n = write(c->t.master, c->input, c->input_len);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR || errno == EIO;
        memmove(c->input, c->input + n, c->input_len - (size_t)n);
        c->input_len -= (size_t)n;
    }
    return true;
}

/* ---- the relay thread ---- */

/* What a client holds besides its connection: its terminal's attachment,
 * its slot, the list's reference. */
static void client_release(struct term_client *c)
{
    sl_svc_terminal_detach(c->svc, c->sandbox_id, c->t.exec_id);
    sl_terminal_clear(&c->t);
    pthread_mutex_lock(&relay.lock);
    sl_slots_leave(&relay.open, &c->slot);
    pthread_mutex_unlock(&relay.lock);
    client_put(c);
}

static void client_close(struct term_client *c)
{
    (void)epoll_ctl(relay.epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->want_master)
        (void)epoll_ctl(relay.epfd, EPOLL_CTL_DEL, c->t.master, NULL);
    if (c->waiting && sl_outlog_unwait(c->t.log, &c->waiter))
        client_put(c); /* never woken now: the waiter's reference is ours */
    c->waiting = false;
    sl_upgraded_close(c->h);
    client_release(c);
}

/* After any event of c: output, input, interest. false: it ended. */
static bool client_step(struct term_client *c)
{
    if (atomic_exchange(&c->woken, false))
        c->waiting = false;
    if (!c->waiting && pump_output(c) < 0)
        return false;
    if (!write_master(c))
        return false;
    /* Frames that waited for the terminal's room. */
    if (c->in_len && !take_frames(c))
        return false;
    if (!write_master(c))
        return false;
    if (!write_socket(c))
        return false;
    if (!c->waiting && out_pending(c) < OUT_HIGH && pump_output(c) < 0)
        return false;
    set_interest(c);
    return true;
}

static void take_pending(void)
{
    pthread_mutex_lock(&relay.lock);
    struct term_client *p = relay.pending;
    relay.pending = NULL;
    pthread_mutex_unlock(&relay.lock);
    while (p) {
        struct term_client *c = p;
        p = p->pending_next;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &c->tags[0]};
        if (epoll_ctl(relay.epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
            sl_warn("terminal: cannot watch a client: %s", strerror(errno));
            client_close(c);
            continue;
        }
        c->next = relay.clients;
        relay.clients = c;
        /* Anything the client sent with its upgrade is in c->in already. */
        if (!client_step(c)) {
            relay.clients = c->next;
            client_close(c);
        }
    }
}

static void remove_client(struct term_client *c)
{
    for (struct term_client **pp = &relay.clients; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    client_close(c);
}

static void keepalives(int64_t now)
{
    for (struct term_client *c = relay.clients, *next; c; c = next) {
        next = c->next;
        if (now - c->last_ping_us < relay.keepalive_us || c->closing)
            continue;
        c->last_ping_us = now;
        if (queue_frame(c, SL_WS_PING, "", 0) < 0 || !client_step(c))
            remove_client(c);
    }
}

/* Later events of this batch that name c, a client just freed: dropped. */
static void forget_events(struct epoll_event *evs, int from, int n, const struct term_client *c)
{
    for (int k = from; k < n; k++)
        if (evs[k].data.ptr && ((struct tag *)evs[k].data.ptr)->c == c)
            evs[k].events = 0;
}

static void *relay_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "sl-terminal");
    struct epoll_event evs[64];
    while (!atomic_load(&relay.stopping)) {
        int n = epoll_wait(relay.epfd, evs, 64, 1000);
        int64_t now = sl_mono_us();
        for (int i = 0; i < n; i++) {
            if (!evs[i].events)
                continue; /* of a client removed earlier in this batch */
            if (!evs[i].data.ptr) {
                uint64_t v;
                (void)read(relay.wake_fd, &v, sizeof(v));
                take_pending();
                /* Woken clients (their output came). */
                for (struct term_client *c = relay.clients, *next; c; c = next) {
                    next = c->next;
                    if (atomic_load(&c->woken) && !client_step(c)) {
                        remove_client(c);
                        forget_events(evs, i + 1, n, c);
                    }
                }
                continue;
            }
            struct tag *t = evs[i].data.ptr;
            struct term_client *c = t->c;
            bool ok = true;
            if (t->which == 0 && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                ok = read_socket(c);
            if (ok && t->which == 0 && (evs[i].events & (EPOLLHUP | EPOLLERR)))
                ok = false;
            if (!ok || !client_step(c)) {
                remove_client(c);
                forget_events(evs, i + 1, n, c);
            }
        }
        keepalives(now);
    }
    while (relay.clients) {
        struct term_client *c = relay.clients;
        relay.clients = c->next;
        queue_close(c, SL_WS_CLOSE_GOING_AWAY);
        (void)write_socket(c);
        client_close(c);
    }
    take_pending(); /* none can arrive now: the server takes no request */
    while (relay.clients) {
        struct term_client *c = relay.clients;
        relay.clients = c->next;
        client_close(c);
    }
    return NULL;
}

int sl_terminals_ws_start(const struct sl_config *cfg, struct sl_error *err)
{
    relay.open.per_sandbox = cfg->max_streams_per_sandbox;
    relay.open.per_worker = cfg->max_streams;
    relay.keepalive_us = cfg->stream_keepalive_seconds * 1000000;
    relay.replay_bytes = (size_t)cfg->terminal_replay_bytes;
    atomic_store(&relay.stopping, false);
    relay.epfd = epoll_create1(EPOLL_CLOEXEC);
    relay.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (relay.epfd < 0 || relay.wake_fd < 0 ||
        epoll_ctl(relay.epfd, EPOLL_CTL_ADD, relay.wake_fd, &ev) < 0 ||
        pthread_create(&relay.thread, NULL, relay_main, NULL) != 0) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot start the terminal relay");
        if (relay.epfd >= 0)
            close(relay.epfd);
        if (relay.wake_fd >= 0)
            close(relay.wake_fd);
        relay.epfd = relay.wake_fd = -1;
        return -1;
    }
    relay.started = true;
    return 0;
}

void sl_terminals_ws_stop(void)
{
    if (!relay.started)
        return;
    atomic_store(&relay.stopping, true);
    relay_wake();
    pthread_join(relay.thread, NULL);
    relay.started = false;
    close(relay.epfd);
    close(relay.wake_fd);
    relay.epfd = relay.wake_fd = -1;
}

/* ---- the upgrade ---- */

struct term_upgrade {
    struct sl_upgrade u;
    struct term_client *c;
};

static void upgrade_start(struct sl_upgrade *u, int fd, const char *extra, size_t extra_len,
                          struct sl_upgraded *h)
{
    struct term_upgrade *tu = (struct term_upgrade *)u;
    struct term_client *c = tu->c;
    free(tu);
    c->fd = fd;
    c->h = h;
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    size_t take = extra_len < sizeof(c->in) ? extra_len : sizeof(c->in);
    memcpy(c->in, extra, take);
    c->in_len = take;
    pthread_mutex_lock(&relay.lock);
    bool stopping = atomic_load(&relay.stopping) || !relay.started;
    if (!stopping) {
        c->pending_next = relay.pending;
        relay.pending = c;
    }
    pthread_mutex_unlock(&relay.lock);
    if (stopping) {
        sl_upgraded_close(h);
        client_release(c);
        return;
    }
    relay_wake();
}

static void upgrade_abandon(struct sl_upgrade *u)
{
    struct term_upgrade *tu = (struct term_upgrade *)u;
    struct term_client *c = tu->c;
    free(tu);
    client_release(c);
}

struct sl_upgrade *sl_terminal_ws_upgrade(struct sl_service *svc, const char *sandbox_id,
                                          struct sl_terminal *t, unsigned short cols,
                                          unsigned short rows, const char *ws_key,
                                          struct sl_error *err)
{
    struct term_client *c = calloc(1, sizeof(*c));
    struct term_upgrade *tu = calloc(1, sizeof(*tu));
    if (!c || !tu || !sl_ws_accept(ws_key, tu->u.accept)) {
        if (c && tu)
            sl_error_set(err, SL_E_UPGRADE_REQUIRED, 0,
                         "Sec-WebSocket-Key must be 16 bytes in base64 (RFC 6455 4.1)");
        else
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        free(c);
        free(tu);
        sl_svc_terminal_detach(svc, sandbox_id, t->exec_id);
        sl_terminal_clear(t);
        return NULL;
    }
    pthread_mutex_lock(&relay.lock);
    int joined = sl_slots_join(&relay.open, &c->slot, sandbox_id, err);
    pthread_mutex_unlock(&relay.lock);
    if (joined < 0) {
        free(c);
        free(tu);
        sl_svc_terminal_detach(svc, sandbox_id, t->exec_id);
        sl_terminal_clear(t);
        return NULL;
    }
    atomic_init(&c->refs, 1);
    c->svc = svc;
    snprintf(c->sandbox_id, sizeof(c->sandbox_id), "%s", sandbox_id);
    c->t = *t;
    t->log = NULL;
    t->master = -1;
    c->fd = -1;
    c->tags[0] = (struct tag){.c = c, .which = 0};
    c->tags[1] = (struct tag){.c = c, .which = 1};
    c->waiter.wake = on_output;
    c->cols = cols;
    c->rows = rows;
    c->last_ping_us = c->last_touch_us = sl_mono_us();
    /* The replay: the terminal's most recent output, so a client that
     * (re)attaches sees the screen it left. */
    uint64_t totals[2];
    sl_outlog_totals(c->t.log, totals);
    c->off[0] = totals[0] > relay.replay_bytes ? totals[0] - relay.replay_bytes : 0;
    c->off[1] = totals[1];
    c->replaying = true;
    /* First message: which terminal this is. */
    if (queue_json(c, json_pack("{s:s,s:s,s:i,s:i,s:I}", "type", "ready", "exec_id", c->t.exec_id,
                                "cols", (int)cols, "rows", (int)rows, "offset",
                                (json_int_t)c->off[0])) < 0) {
        tu->c = c;
        upgrade_abandon(&tu->u);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    tu->c = c;
    tu->u.start = upgrade_start;
    tu->u.abandon = upgrade_abandon;
    return &tu->u;
}
