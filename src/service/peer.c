/* The worker protocol's client (service/peer.h). */
#include "service/peer.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define CONNECT_TIMEOUT_MS 10000
/* A peer answers with an error body or a JSON document; past the largest
 * file read (32 MiB, base64) it is not an answer. */
#define MAX_ANSWER_BYTES ((size_t)64 << 20)

struct sink {
    struct sl_buf body;
    bool too_big;
    CURL *curl;
    const struct sl_peer_request *rq;
    bool streamed; /* the answer is an event stream, handed to rq->stream */
};

/* Whether this answer goes to the request's stream hook: a 2xx event
 * stream (a refusal is collected as JSON, as any answer). */
static bool streams(struct sink *k)
{
    if (k->streamed)
        return true;
    long status = 0;
    char *type = NULL;
    if (!k->rq->stream || curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK ||
        status < 200 || status > 299 ||
        curl_easy_getinfo(k->curl, CURLINFO_CONTENT_TYPE, &type) != CURLE_OK || !type ||
        strncmp(type, "text/event-stream", 17) != 0)
        return false;
    return k->streamed = true;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct sink *k = arg;
    size_t len = size * n;
    if (streams(k)) {
        long status = 200;
        curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &status);
        return k->rq->stream(k->rq->stream_ctx, (int)status, data, len) ? len : 0;
    }
    if (sl_buf_append(&k->body, data, len) < 0) {
        k->too_big = true;
        return 0; /* curl stops */
    }
    return len;
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
    char worker[200], generation[64];
    char *auth = NULL;
    snprintf(worker, sizeof(worker), "X-Sandbox-Worker-ID: %s", rq->worker_id);
    snprintf(generation, sizeof(generation), "X-Sandbox-Generation: %lld",
             (long long)rq->generation);
    /* The token has no length limit: the header is as long as it needs. */
    if (asprintf(&auth, "Authorization: %s", rq->auth) < 0) {
        snprintf(a->why, sizeof(a->why), "out of memory");
        return -1;
    }
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    sl_free_secret(auth);
    headers = curl_slist_append(headers, worker);
    headers = curl_slist_append(headers, generation);
    /* No "Expect: 100-continue" round trip before a large body. */
    headers = curl_slist_append(headers, "Expect:");
    if (rq->body)
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
    if (rq->body) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, rq->body);
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
        result = 0;
    } else {
        snprintf(a->why, sizeof(a->why), "out of memory");
    }
    sl_buf_free(&k.body);
    curl_slist_free_all(headers);
    return result;
}
