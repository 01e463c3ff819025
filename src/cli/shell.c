/* The sandbox's terminal on this one: a WebSocket client over libcurl's
 * connect-only mode (so http and https alike), the upgrade written and
 * read by hand, frames both ways (api/terminal_ws.h says the messages). */
#include "cli/shell.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <termios.h>
#include <unistd.h>

#include "common/base64.h"

#define FRAME_MAX ((size_t)4 << 20) /* the largest server frame we take */

struct ws {
    CURL *h;
    curl_socket_t fd;
    unsigned char *in;
    size_t in_len, in_cap;
};

/* ---- the local terminal ---- */

static struct termios saved_tio;
static char terminal_id[129]; /* the ready message's exec_id, for a reattach */
static bool raw_mode;
static int winch_pipe[2] = {-1, -1};

static void restore_tty(void)
{
    if (raw_mode)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
    raw_mode = false;
}

static void on_winch(int sig)
{
    (void)sig;
    int saved = errno;
    if (write(winch_pipe[1], "w", 1) < 0) {
        /* a resize already waits to be read */
    }
    errno = saved;
}

static void local_size(unsigned *cols, unsigned *rows)
{
    struct winsize ws;
    *cols = 80;
    *rows = 24;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
        *cols = ws.ws_col;
        *rows = ws.ws_row;
    }
}

/* ---- bytes on the connection ---- */

static int send_all(struct ws *w, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        size_t sent = 0;
        CURLcode rc = curl_easy_send(w->h, p, len, &sent);
        if (rc == CURLE_AGAIN) {
            struct pollfd pf = {.fd = w->fd, .events = POLLOUT};
            if (poll(&pf, 1, 10000) <= 0)
                return -1;
            continue;
        }
        if (rc != CURLE_OK)
            return -1;
        p += sent;
        len -= sent;
    }
    return 0;
}

/* Whatever the connection has now into w->in: 1 got some, 0 none yet,
 * -1 closed or broken. */
static int recv_some(struct ws *w)
{
    if (w->in_cap - w->in_len < 65536) {
        size_t cap = w->in_cap ? w->in_cap * 2 : 131072;
        if (cap > FRAME_MAX + 65536 + 16)
            cap = FRAME_MAX + 65536 + 16;
        if (cap <= w->in_len)
            return -1; /* a frame larger than we take */
        unsigned char *grown = realloc(w->in, cap);
        if (!grown)
            return -1;
        w->in = grown;
        w->in_cap = cap;
    }
    size_t got = 0;
    CURLcode rc = curl_easy_recv(w->h, w->in + w->in_len, w->in_cap - w->in_len, &got);
    if (rc == CURLE_AGAIN)
        return 0;
    if (rc != CURLE_OK || got == 0)
        return -1;
    w->in_len += got;
    return 1;
}

/* A client frame: masked, final. */
static int send_frame(struct ws *w, int opcode, const void *data, size_t len)
{
    unsigned char hdr[14];
    size_t n = 0;
    hdr[n++] = (unsigned char)(0x80 | opcode);
    if (len < 126) {
        hdr[n++] = (unsigned char)(0x80 | len);
    } else if (len <= 0xffff) {
        hdr[n++] = 0x80 | 126;
        hdr[n++] = (unsigned char)(len >> 8);
        hdr[n++] = (unsigned char)len;
    } else {
        hdr[n++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            hdr[n++] = (unsigned char)((uint64_t)len >> (8 * i));
    }
    unsigned char mask[4];
    if (getrandom(mask, sizeof(mask), 0) != (ssize_t)sizeof(mask))
        return -1;
    memcpy(hdr + n, mask, 4);
    n += 4;
    unsigned char *buf = malloc(n + len);
    if (!buf)
        return -1;
    memcpy(buf, hdr, n);
    const unsigned char *src = data;
    for (size_t i = 0; i < len; i++)
        buf[n + i] = src[i] ^ mask[i & 3];
    int rc = send_all(w, buf, n + len);
    free(buf);
    return rc;
}

static int send_resize(struct ws *w)
{
    unsigned cols, rows;
    local_size(&cols, &rows);
    char msg[96];
    int n = snprintf(msg, sizeof(msg), "{\"type\":\"resize\",\"cols\":%u,\"rows\":%u}", cols, rows);
    return send_frame(w, 0x1, msg, (size_t)n);
}

/* ---- the upgrade ---- */

static void set_error(struct cli_error *e, long status, const char *code, const char *fmt,
                      const char *arg)
{
    e->status = status;
    snprintf(e->code, sizeof(e->code), "%s", code);
    snprintf(e->message, sizeof(e->message), fmt, arg);
}

/* Connect, send the upgrade for path, read the answer's head. 0 on 101;
 * -1 with e (the service's refusal when it answered one). */
static int upgrade(const struct cli_conn *conn, const char *path, struct ws *w, struct cli_error *e)
{
    w->h = curl_easy_init();
    if (!w->h) {
        set_error(e, 0, "CLI_INTERNAL", "%s", "cannot start libcurl");
        return -1;
    }
    curl_easy_setopt(w->h, CURLOPT_URL, conn->url);
    curl_easy_setopt(w->h, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(w->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(w->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(w->h, CURLOPT_CONNECTTIMEOUT, 10L);
    if (curl_easy_perform(w->h) != CURLE_OK ||
        curl_easy_getinfo(w->h, CURLINFO_ACTIVESOCKET, &w->fd) != CURLE_OK) {
        set_error(e, 0, "CLI_UNREACHABLE", "no answer from %s", conn->url);
        return -1;
    }
    unsigned char nonce[16];
    if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
        set_error(e, 0, "CLI_INTERNAL", "%s", "no random bytes for the WebSocket key");
        return -1;
    }
    char *key = sl_base64_encode(nonce, sizeof(nonce));
    const char *host = strstr(conn->url, "://");
    host = host ? host + 3 : conn->url;
    char *req = NULL;
    int n = asprintf(&req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n"
                     "User-Agent: sandloom-cli/1\r\n%s%s%s\r\n",
                     path, host, key ? key : "", conn->api_key ? "Authorization: Bearer " : "",
                     conn->api_key ? conn->api_key : "", conn->api_key ? "\r\n" : "");
    free(key);
    if (n < 0 || send_all(w, req, (size_t)n) < 0) {
        free(req);
        set_error(e, 0, "CLI_UNREACHABLE", "the connection to %s broke", conn->url);
        return -1;
    }
    free(req);
    /* The head, then (a refusal) its JSON body, which ends with the
     * connection (the service closes after an error on this route). */
    char *head_end = NULL;
    while (!head_end) {
        struct pollfd pf = {.fd = w->fd, .events = POLLIN};
        if (poll(&pf, 1, 30000) <= 0) {
            set_error(e, 0, "CLI_UNREACHABLE", "%s did not answer the upgrade", conn->url);
            return -1;
        }
        int got = recv_some(w);
        if (got < 0) {
            set_error(e, 0, "CLI_UNREACHABLE", "%s closed the connection", conn->url);
            return -1;
        }
        if (w->in_len >= 4)
            head_end = memmem(w->in, w->in_len, "\r\n\r\n", 4);
    }
    long status = 0;
    if (sscanf((const char *)w->in, "HTTP/1.%*d %ld", &status) != 1)
        status = 0;
    size_t head_len = (size_t)((unsigned char *)head_end - w->in) + 4;
    if (status == 101) {
        memmove(w->in, w->in + head_len, w->in_len - head_len);
        w->in_len -= head_len;
        return 0;
    }
    /* Content-Length of the refusal, read to the end of its body. */
    size_t want = 0;
    const char *cl = memmem(w->in, head_len, "Content-Length:", 15);
    if (!cl)
        cl = memmem(w->in, head_len, "content-length:", 15);
    if (cl)
        want = (size_t)strtoul(cl + 15, NULL, 10);
    while (w->in_len - head_len < want) {
        struct pollfd pf = {.fd = w->fd, .events = POLLIN};
        if (poll(&pf, 1, 10000) <= 0 || recv_some(w) < 0)
            break;
    }
    size_t body_len = w->in_len - head_len;
    cli_refusal((const char *)w->in + head_len, body_len < want || !want ? body_len : want, status,
                e);
    return -1;
}

/* ---- the session ---- */

/* A server frame from w->in: >0 consumed, 0 incomplete, -1 broken. */
static ssize_t next_frame(struct ws *w, int *opcode, unsigned char **payload, size_t *len)
{
    if (w->in_len < 2)
        return 0;
    *opcode = w->in[0] & 0x0f;
    uint64_t plen = w->in[1] & 0x7f;
    size_t at = 2;
    if (w->in[1] & 0x80)
        return -1; /* a server's frames are not masked */
    if (plen == 126) {
        if (w->in_len < 4)
            return 0;
        plen = ((uint64_t)w->in[2] << 8) | w->in[3];
        at = 4;
    } else if (plen == 127) {
        if (w->in_len < 10)
            return 0;
        plen = 0;
        for (int i = 0; i < 8; i++)
            plen = (plen << 8) | w->in[2 + i];
        at = 10;
    }
    if (plen > FRAME_MAX)
        return -1;
    if (w->in_len < at + plen)
        return 0;
    *payload = w->in + at;
    *len = (size_t)plen;
    return (ssize_t)(at + plen);
}

/* One server frame. 1 go on, 0 the terminal ended (*end), -1 broken. */
static int on_server_frame(struct ws *w, int opcode, unsigned char *p, size_t len, json_t **end)
{
    switch (opcode) {
    case 0x2: /* output */
        return fwrite(p, 1, len, stdout) == len && fflush(stdout) == 0 ? 1 : -1;
    case 0x1: {
        json_t *msg = json_loadb((const char *)p, len, 0, NULL);
        const char *type = json_string_value(json_object_get(msg, "type"));
        if (type && strcmp(type, "ready") == 0) {
            const char *id = json_string_value(json_object_get(msg, "exec_id"));
            snprintf(terminal_id, sizeof(terminal_id), "%s", id ? id : "");
        }
        if (type && strcmp(type, "exit") == 0) {
            *end = msg;
            return 1; /* the close frame follows */
        }
        if (type && strcmp(type, "error") == 0) {
            /* Said where the terminal shows it; the session goes on raw. */
            fprintf(stderr, "\r\nsandloom: %s: %s\r\n",
                    json_string_value(json_object_get(msg, "code")),
                    json_string_value(json_object_get(msg, "message")));
        }
        json_decref(msg);
        return 1;
    }
    case 0x8:
        (void)send_frame(w, 0x8, p, len < 2 ? len : 2);
        return 0;
    case 0x9:
        return send_frame(w, 0xa, p, len) == 0 ? 1 : -1;
    default:
        return 1;
    }
}

static int relay(struct ws *w, json_t **end)
{
    bool stdin_open = true;
    for (;;) {
        /* Frames already here (the upgrade's answer may carry some). */
        for (;;) {
            int opcode;
            unsigned char *p;
            size_t len;
            ssize_t used = next_frame(w, &opcode, &p, &len);
            if (used < 0)
                return -1;
            if (used == 0)
                break;
            int rc = on_server_frame(w, opcode, p, len, end);
            memmove(w->in, w->in + used, w->in_len - (size_t)used);
            w->in_len -= (size_t)used;
            if (rc <= 0)
                return rc;
        }
        struct pollfd pf[3] = {{.fd = w->fd, .events = POLLIN},
                               {.fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN},
                               {.fd = winch_pipe[0], .events = POLLIN}};
        if (poll(pf, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (pf[2].revents & POLLIN) {
            char drain[16];
            (void)read(winch_pipe[0], drain, sizeof(drain));
            if (send_resize(w) < 0)
                return -1;
        }
        if (pf[1].revents & (POLLIN | POLLHUP)) {
            char buf[4096];
            ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n > 0 && send_frame(w, 0x2, buf, (size_t)n) < 0)
                return -1;
            if (n <= 0) {
                /* Input ended (a pipe): the terminal's end-of-file, so the
                 * shell ends when it has read what came before. */
                stdin_open = false;
                if (send_frame(w, 0x2, "\x04", 1) < 0)
                    return -1;
            }
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            int got = recv_some(w);
            if (got < 0)
                return *end ? 0 : -1;
        }
    }
}

int cli_shell(struct cli_sandbox *sb, const char *exec_id, json_t **end, struct cli_error *e)
{
    *end = NULL;
    unsigned cols, rows;
    local_size(&cols, &rows);
    char *path = NULL;
    char *id = exec_id ? cli_escape(exec_id) : NULL;
    if (asprintf(&path, "/api/v1/sandboxes/%s/terminal?generation=%lld&cols=%u&rows=%u%s%s",
                 sb->name, sb->generation, cols, rows, id ? "&exec_id=" : "", id ? id : "") < 0)
        path = NULL;
    free(id);
    struct ws w = {.fd = CURL_SOCKET_BAD};
    int rc = path ? upgrade(sb->conn, path, &w, e) : -1;
    free(path);
    if (rc == 0) {
        if (pipe(winch_pipe) == 0) {
            struct sigaction sa = {.sa_handler = on_winch};
            sigaction(SIGWINCH, &sa, NULL);
        }
        if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
            struct termios raw = saved_tio;
            cfmakeraw(&raw);
            raw_mode = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
            atexit(restore_tty);
        }
        rc = relay(&w, end);
        restore_tty();
        signal(SIGWINCH, SIG_DFL);
        /* Closed without the shell's exit (a broken connection, or the
         * service going away): the terminal may still run. */
        if (!*end)
            set_error(e, 0, "CLI_UNREACHABLE",
                      "the terminal's connection ended before its shell did; it runs on for a "
                      "while: sandloom shell NAME --attach %s",
                      terminal_id);
        rc = *end ? 0 : -1;
    }
    if (w.h)
        curl_easy_cleanup(w.h);
    free(w.in);
    return rc;
}
