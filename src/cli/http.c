#include "cli/http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Answers are small JSON documents (a file read is at most the File API's
 * limit, base64'd); a body past this is refused rather than buffered. */
#define ANSWER_MAX (64L * 1024 * 1024)

struct buf {
    char *data;
    size_t len;
    bool too_big;
    CURL *h;
    const struct cli_exchange *x; /* its on_data, for a 2xx stream */
};

static size_t on_body(char *ptr, size_t size, size_t n, void *arg)
{
    struct buf *b = arg;
    size_t add = size * n;
    long status = 0;
    if (b->x->on_data && curl_easy_getinfo(b->h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
        status >= 200 && status < 300)
        return b->x->on_data(b->x->on_data_ctx, ptr, add) ? add : 0;
    if (b->len + add > (size_t)ANSWER_MAX) {
        b->too_big = true;
        return 0;
    }
    char *grown = realloc(b->data, b->len + add + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, ptr, add);
    b->data = grown;
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

static void set(struct cli_error *e, long status, const char *code, const char *fmt,
                const char *arg)
{
    e->status = status;
    snprintf(e->code, sizeof(e->code), "%s", code);
    snprintf(e->message, sizeof(e->message), fmt, arg);
}

/* The service's refusal: {"detail": {"code", "message"}} (ours) or
 * {"detail": "<CODE>"} (the reference's short form). */
void cli_refusal(const char *answer, size_t len, long status, struct cli_error *e)
{
    json_t *doc = answer ? json_loadb(answer, len, 0, NULL) : NULL;
    json_t *detail = json_object_get(doc, "detail");
    const char *code = json_string_value(json_object_get(detail, "code"));
    const char *message = json_string_value(json_object_get(detail, "message"));
    if (!code && json_is_string(detail))
        code = message = json_string_value(detail);
    char fallback[32];
    snprintf(fallback, sizeof(fallback), "HTTP_%ld", status);
    set(e, status, code ? code : fallback, "%s", message ? message : "the service refused");
    json_decref(doc);
}

int cli_exchange(const struct cli_conn *c, const struct cli_exchange *x, long *status,
                 char **answer, size_t *answer_len, struct cli_error *e)
{
    *status = 0;
    *answer = NULL;
    *answer_len = 0;
    memset(e, 0, sizeof(*e));
    CURL *h = curl_easy_init();
    char *url = NULL, *auth = NULL;
    struct curl_slist *headers = NULL;
    struct buf b = {.h = h, .x = x};
    int rc = -1;
    if (!h || asprintf(&url, "%s%s", c->url, x->path) < 0) {
        url = NULL;
        set(e, 0, "CLI_INTERNAL", "%s", "out of memory");
        goto out;
    }
    headers = curl_slist_append(headers, x->accept ? x->accept : "Accept: application/json");
    if (x->body)
        headers = curl_slist_append(headers, "Content-Type: application/json");
    for (size_t i = 0; x->headers && x->headers[i]; i++)
        headers = curl_slist_append(headers, x->headers[i]);
    if (c->api_key && c->api_key[0]) {
        if (asprintf(&auth, "Authorization: Bearer %s", c->api_key) < 0) {
            auth = NULL;
            set(e, 0, "CLI_INTERNAL", "%s", "out of memory");
            goto out;
        }
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, x->timeout_s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "sandloom-cli/1");
    if (x->body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
    } else if (strcmp(x->method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    CURLcode res = curl_easy_perform(h);
    if (b.too_big) {
        set(e, 0, "CLI_BAD_ANSWER", "the answer to %s is larger than the CLI reads", x->path);
        goto out;
    }
    if (res != CURLE_OK) {
        /* The URL without its path: where the service was looked for. */
        set(e, 0, "CLI_UNREACHABLE", "%s", curl_easy_strerror(res));
        size_t used = strlen(e->message);
        snprintf(e->message + used, sizeof(e->message) - used, " (%s)", c->url);
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    *answer = b.data;
    *answer_len = b.len;
    b.data = NULL;
    rc = 0;
out:
    free(b.data);
    free(url);
    if (auth) {
        /* The key does not outlive the request in this process's memory. */
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    curl_slist_free_all(headers);
    if (h)
        curl_easy_cleanup(h);
    return rc;
}

int cli_call(const struct cli_conn *c, const char *method, const char *path, json_t *body,
             long timeout_s, json_t **answer, struct cli_error *e)
{
    *answer = NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text) {
        memset(e, 0, sizeof(*e));
        set(e, 0, "CLI_INTERNAL", "%s", "out of memory");
        return -1;
    }
    const struct cli_exchange x = {.method = method,
                                   .path = path,
                                   .body = text,
                                   .body_len = text ? strlen(text) : 0,
                                   .timeout_s = timeout_s};
    long status = 0;
    struct buf b = {0};
    int rc = cli_exchange(c, &x, &status, &b.data, &b.len, e);
    free(text);
    if (rc < 0)
        return -1;
    rc = -1;
    if (status < 200 || status > 299) {
        cli_refusal(b.data, b.len, status, e);
    } else if (!(*answer = b.len ? json_loadb(b.data, b.len, 0, NULL) : json_object())) {
        set(e, status, "CLI_BAD_ANSWER", "the answer to %s is not JSON", path);
    } else {
        rc = 0;
    }
    free(b.data);
    return rc;
}

char *cli_escape(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    char *copy = e ? strdup(e) : NULL;
    curl_free(e);
    return copy;
}
