/* The worker protocol's client (service/peer.h). */
#include "service/peer.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"

#define CONNECT_TIMEOUT_MS 10000
/* A peer answers with an error body or a JSON document; past the largest
 * file read (32 MiB, base64) it is not an answer. */
#define MAX_ANSWER_BYTES ((size_t)64 << 20)

/* A raw relay's answer headers: at most this much of them. */
#define MAX_HEADER_BYTES ((size_t)64 << 10)

struct sink {
    struct sl_buf body;
    bool too_big;
    CURL *curl;
    const struct sl_peer_request *rq;
    const char *streamed; /* the stream type matched: the body goes to rq->stream */
    struct sl_buf headers; /* a raw relay's answer header lines */
};

static const char *const event_stream_only[] = {"text/event-stream", NULL};

/* The entry of the request's stream types this answer is, when it goes to
 * the stream hook: a 2xx of one of them (a refusal is collected, as any
 * answer). NULL when collected. */
static const char *streams(struct sink *k)
{
    if (k->streamed)
        return k->streamed;
    long status = 0;
    char *type = NULL;
    if (!k->rq->stream || curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK ||
        status < 200 || status > 299 ||
        curl_easy_getinfo(k->curl, CURLINFO_CONTENT_TYPE, &type) != CURLE_OK || !type)
        return NULL;
    const char *const *types = k->rq->stream_types ? k->rq->stream_types : event_stream_only;
    for (size_t i = 0; types[i]; i++) {
        size_t n = strlen(types[i]);
        if (strncasecmp(type, types[i], n) == 0 && (type[n] == '\0' || type[n] == ';'))
            return k->streamed = types[i];
    }
    return NULL;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct sink *k = arg;
    size_t len = size * n;
    const char *type = streams(k);
    if (type) {
        long status = 200;
        curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &status);
        return k->rq->stream(k->rq->stream_ctx, (int)status, type, data, len) ? len : 0;
    }
    if (sl_buf_append(&k->body, data, len) < 0) {
        k->too_big = true;
        return 0; /* curl stops */
    }
    return len;
}

/* A raw relay's answer header, kept unless it is hop-by-hop (RFC 9110
 * §7.6.1) or one the relaying server writes itself (the length, the
 * date). A status line starts a new answer (after a 1xx). */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct sink *k = arg;
    size_t len = size * n;
    static const char *const dropped[] = {"connection", "keep-alive", "transfer-encoding",
                                          "content-length", "te", "trailer", "upgrade",
                                          "proxy-connection", "date", NULL};
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        k->headers.len = 0;
        return len;
    }
    const char *colon = memchr(data, ':', len);
    if (!colon || colon == data)
        return len; /* the blank line that ends them, or not a header */
    size_t name = (size_t)(colon - data);
    for (size_t i = 0; dropped[i]; i++)
        if (strlen(dropped[i]) == name && strncasecmp(data, dropped[i], name) == 0)
            return len;
    size_t end = len;
    while (end > name && (data[end - 1] == '\r' || data[end - 1] == '\n'))
        end--;
    if (sl_buf_append(&k->headers, data, end) < 0 || sl_buf_append(&k->headers, "\n", 1) < 0)
        return 0; /* curl stops: not an answer to relay */
    return len;
}

/* Our header list for a raw relay: the client's lines as they came. */
static struct curl_slist *raw_header_list(const char *lines)
{
    struct curl_slist *list = NULL;
    for (const char *p = lines; p && *p;) {
        size_t n = strcspn(p, "\n");
        char *line = strndup(p, n);
        struct curl_slist *grown = line ? curl_slist_append(list, line) : NULL;
        free(line);
        if (!grown) {
            curl_slist_free_all(list);
            return NULL;
        }
        list = grown;
        p += n + (p[n] == '\n');
    }
    return list;
}

/* libcurl's progress callback: a stream whose other side is gone stops. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const struct sl_peer_request *rq = arg;
    return rq->keep_going && !rq->keep_going(rq->stream_ctx);
}

/* The thread's kept handle, cleaned up when the thread ends. */
static pthread_key_t handle_key;
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;

static void drop_handle(void *curl) { curl_easy_cleanup(curl); }

static void make_handle_key(void) { (void)pthread_key_create(&handle_key, drop_handle); }

int sl_peer_call(const struct sl_peer_request *rq, struct sl_peer_answer *a)
{
    memset(a, 0, sizeof(*a));
    /* One handle per thread, kept: its connection to an owner stays open
     * (keep-alive) for the next call, which saves a TCP handshake and the
     * owner's accept on every forwarded request. Reset clears the options,
     * not the connection cache. */
    pthread_once(&handle_once, make_handle_key);
    CURL *curl = pthread_getspecific(handle_key);
    if (curl) {
        curl_easy_reset(curl);
    } else if ((curl = curl_easy_init()) && pthread_setspecific(handle_key, curl) != 0) {
        curl_easy_cleanup(curl);
        curl = NULL;
    }
    if (!curl) {
        snprintf(a->why, sizeof(a->why), "curl_easy_init failed");
        return -1;
    }
    struct sink k = {.curl = curl, .rq = rq};
    sl_buf_init(&k.body, MAX_ANSWER_BYTES + 1);
    sl_buf_init(&k.headers, MAX_HEADER_BYTES);
    char worker[200], generation[64];
    char *auth = NULL;
    snprintf(worker, sizeof(worker), "X-Sandbox-Worker-ID: %s", rq->worker_id);
    snprintf(generation, sizeof(generation), "X-Sandbox-Generation: %lld",
             (long long)rq->generation);
    /* The token has no length limit: the header is as long as it needs. */
    if (rq->auth && asprintf(&auth, "Authorization: %s", rq->auth) < 0) {
        snprintf(a->why, sizeof(a->why), "out of memory");
        return -1;
    }
    struct curl_slist *headers = rq->headers ? raw_header_list(rq->headers) : NULL;
    if (rq->headers && !headers) {
        sl_free_secret(auth);
        snprintf(a->why, sizeof(a->why), "out of memory");
        return -1;
    }
    if (auth)
        headers = curl_slist_append(headers, auth);
    sl_free_secret(auth);
    headers = curl_slist_append(headers, worker);
    headers = curl_slist_append(headers, generation);
    /* No "Expect: 100-continue" round trip before a large body. */
    headers = curl_slist_append(headers, "Expect:");
    if (rq->body && !rq->headers)
        headers = curl_slist_append(headers, "Content-Type: application/json");
    char last[128];
    if (rq->last_event_id) {
        snprintf(last, sizeof(last), "Last-Event-ID: %.100s", rq->last_event_id);
        headers = curl_slist_append(headers, last);
    }
    curl_easy_setopt(curl, CURLOPT_URL, rq->url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, rq->method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
    if (rq->stream) {
        /* A stream lasts as long as its command: only silence ends it. */
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 0L);
        curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, SL_PEER_STREAM_SILENCE_S);
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(curl, CURLOPT_XFERINFODATA, rq);
    } else {
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)(rq->timeout_ms + CONNECT_TIMEOUT_MS));
    }
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &k);
    if (rq->headers) {
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, &k);
    }
    if (rq->body || (rq->headers && strcmp(rq->method, "GET") != 0 &&
                     strcmp(rq->method, "HEAD") != 0)) {
        /* A relayed POST without a body still says Content-Length: 0. */
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
    } else if (strcmp(rq->method, "GET") == 0) {
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    }
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    char *type = NULL;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type);
    int result = -1;
    if (k.streamed) {
        /* Answered, and relayed as it came; how it ended (the command's
         * end, the client gone, the owner gone) the stream itself says. */
        a->status = (int)status;
        a->streamed = true;
        result = 0;
    } else if (rc != CURLE_OK || status < 100) {
        snprintf(a->why, sizeof(a->why), "%s %.160s: %s", rq->method, rq->url,
                 k.too_big ? "answer too large" : curl_easy_strerror(rc));
    } else if (sl_buf_append(&k.body, "", 1) == 0) {
        /* The buffer becomes the answer (NUL-terminated, not copied). */
        a->status = (int)status;
        a->json = type && strncmp(type, "application/json", 16) == 0;
        a->body = k.body.data;
        a->len = k.body.len - 1;
        k.body.data = NULL;
        if (rq->headers && sl_buf_append(&k.headers, "", 1) == 0) {
            a->headers = k.headers.data;
            k.headers.data = NULL;
        }
        result = 0;
    } else {
        snprintf(a->why, sizeof(a->why), "out of memory");
    }
    sl_buf_free(&k.body);
    sl_buf_free(&k.headers);
    curl_slist_free_all(headers);
    return result;
}
