/* The S3 backend of the blobstore (spec FLEET.md §8) on libcurl.
 *
 * Signing is libcurl's own SigV4 (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3").
 * libcurl signs the method, the path and query exactly as they appear in the
 * URL, every header we pass and the payload digest we put in
 * x-amz-content-sha256 (libcurl uses that header instead of hashing a body
 * it cannot see in advance). So this file builds URLs that are already
 * canonical — the key URI-encoded once as S3 wants, query parameters sorted
 * and encoded — and always computes the SHA-256 of what it sends: the store
 * then refuses bytes that differ from what was hashed.
 *
 * One request = one easy handle taken from a small locked pool (handles keep
 * their connections alive between requests), so every method is safe to
 * call from any thread. */
#include "blobstore/blobstore.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blobstore/s3_creds.h"
#include "common/cleanup.h"
#include "common/util.h"

#define MIB (1024ULL * 1024ULL)
#define S3_MIN_PART (5 * MIB)
#define S3_MAX_PARTS 10000ULL
#define S3_MAX_SINGLE_PUT (5ULL * 1024ULL * MIB)
#define S3_KEY_MAX 1024
#define RESPONSE_DOC_MAX (64 * 1024)
#define HASH_CHUNK (1024 * 1024)
#define POOL_MAX 8
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define UNAVAILABLE_MESSAGE "object store unavailable"

struct s3 {
    struct sl_blobstore pub;
    char *endpoint;   /* scheme://host[:port][/path], no trailing '/' */
    char *bucket_url; /* path-style <endpoint>/<bucket>; virtual
                         scheme://<bucket>.host[:port][/path] */
    char *bucket;
    char *prefix;
    char *region;
    char *sigv4; /* "aws:amz:<region>:s3" */
    bool path_style;
    long connect_timeout_ms, stall_timeout_ms, retry_base_ms, retry_max_ms;
    int max_attempts;
    uint64_t multipart_threshold, part_size;
    struct sl_s3_cred_provider *creds;
    char *description;
    char *ca_bundle; /* AWS_CA_BUNDLE at open, or NULL (system store) */
    pthread_mutex_t pool_mu;
    CURL *pool[POOL_MAX];
    size_t pool_len;
};

enum body_kind { BODY_NONE, BODY_MEM, BODY_FD };
enum sink_kind { SINK_NONE, SINK_BUF, SINK_FD };

struct s3_req {
    /* what to send */
    const char *op; /* S3 action name, for the log */
    const char *method;
    const char *key;   /* full key (prefix included), NULL for the bucket */
    const char *query; /* canonical query string or NULL */
    const char *content_type;
    enum body_kind body_kind;
    const char *mem;
    size_t mem_len;
    int fd;
    uint64_t off, len;
    char payload_sha[65];
    /* where the answer goes (2xx only) */
    enum sink_kind sink_kind;
    struct sl_buf *sink_buf;
    int sink_fd;
    uint64_t sink_max; /* SINK_FD: 0 = unbounded */
    EVP_MD_CTX *sink_sha;
    bool ok_404;       /* a 404 is an answer for the caller, not an error */
    bool error_in_200; /* CompleteMultipartUpload may answer 200 + <Error> */
    /* per attempt */
    uint64_t pos;
    uint64_t received;
    bool too_large;
    int sink_errno;
    int source_errno;
    long status;
    struct sl_buf errbody;
    char etag[136];
    char request_id[136];
    char bucket_region[64];
    char s3_code[64];
    char s3_message[256];
    int attempts;
};

/* ---- small helpers ------------------------------------------------------ */

static void hex_of(const unsigned char *d, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Accept 64 hex digits in either case; out gets lower case. */
static bool normalise_sha256(const char *in, char out[65])
{
    if (!in || strlen(in) != 64)
        return false;
    for (int i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)in[i]))
            return false;
        out[i] = (char)tolower((unsigned char)in[i]);
    }
    out[64] = '\0';
    return true;
}

/* AWS URI encoding: A-Z a-z 0-9 - . _ ~ kept, '/' kept when keep_slash,
 * everything else %XX with upper-case hex. */
static int aws_encode(struct sl_buf *b, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~' ||
            (keep_slash && *p == '/')) {
            if (sl_buf_append(b, p, 1) < 0)
                return -1;
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            if (sl_buf_append(b, e, 3) < 0)
                return -1;
        }
    }
    return 0;
}

static char *aws_encode_dup(const char *s, bool keep_slash)
{
    struct sl_buf b;
    sl_buf_init(&b, SIZE_MAX);
    if (aws_encode(&b, s, keep_slash) < 0 || sl_buf_append(&b, "", 0) < 0) {
        sl_buf_free(&b);
        return NULL;
    }
    return b.data;
}

static void xml_unescape(char *s)
{
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    char *w = s;
    for (char *r = s; *r;) {
        bool done = false;
        if (*r == '&') {
            for (size_t i = 0; i < SL_ARRAY_LEN(ents); i++) {
                size_t l = strlen(ents[i].ent);
                if (strncmp(r, ents[i].ent, l) == 0) {
                    *w++ = ents[i].c;
                    r += l;
                    done = true;
                    break;
                }
            }
        }
        if (!done)
            *w++ = *r++;
    }
    *w = '\0';
}

/* The text of the first <tag>…</tag> in an S3 XML answer; false when absent
 * or longer than the output. */
static bool xml_tag(const char *xml, size_t len, const char *tag, char *out, size_t size)
{
    char open_tag[64], close_tag[64];
    snprintf(open_tag, sizeof(open_tag), "<%s>", tag);
    snprintf(close_tag, sizeof(close_tag), "</%s>", tag);
    if (!xml)
        return false;
    const char *s = memmem(xml, len, open_tag, strlen(open_tag));
    if (!s)
        return false;
    s += strlen(open_tag);
    const char *e = memmem(s, len - (size_t)(s - xml), close_tag, strlen(close_tag));
    if (!e || (size_t)(e - s) >= size)
        return false;
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = '\0';
    xml_unescape(out);
    return true;
}

static int xml_escape_append(struct sl_buf *b, const char *s)
{
    for (; *s; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&quot;";
            break;
        default:
            break;
        }
        if (sl_buf_append(b, rep ? rep : s, rep ? strlen(rep) : 1) < 0)
            return -1;
    }
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Exponential backoff with jitter: before try n+1, a delay drawn from
 * [d/2, d] with d = base * 2^(n-1) capped, so a fleet of replicas retrying
 * the same outage spreads out. */
static long backoff_ms(const struct s3 *s, int attempt)
{
    long d = s->retry_base_ms;
    for (int i = 1; i < attempt && d < s->retry_max_ms; i++)
        d *= 2;
    if (d > s->retry_max_ms)
        d = s->retry_max_ms;
    int64_t j = 0;
    if (sl_random_range(0, d / 2, &j) < 0)
        j = d / 4;
    return d / 2 + (long)j;
}

/* ---- errors ------------------------------------------------------------- */

/* code + client-safe message + operator detail. */
static int s3_fail(struct sl_error *err, const char *code, int errnum, const char *message,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int s3_fail(struct sl_error *err, const char *code, int errnum, const char *message,
                   const char *fmt, ...)
{
    if (!err)
        return -1;
    sl_error_set(err, code, errnum, "%s", message);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->detail, sizeof(err->detail), fmt, ap);
    va_end(ap);
    return -1;
}

static const char *where(const struct s3 *s, const struct s3_req *r, char *buf, size_t size)
{
    snprintf(buf, size, "s3 %s s3://%s/%s (endpoint %s, region %s)", r->op, s->bucket,
             r->key ? r->key : "", s->endpoint, s->region);
    return buf;
}

static bool curl_retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_UPLOAD_FAILED:
        return true;
    default:
        return false;
    }
}

/* A name for statuses whose answer has no body (HEAD). */
static const char *status_code_name(long status)
{
    switch (status) {
    case 301:
        return "PermanentRedirect";
    case 307:
        return "TemporaryRedirect";
    case 400:
        return "BadRequest";
    case 403:
        return "Forbidden";
    case 404:
        return "NotFound";
    case 409:
        return "Conflict";
    case 429:
        return "TooManyRequests";
    case 500:
        return "InternalError";
    case 503:
        return "ServiceUnavailable";
    default:
        return "";
    }
}

/* ---- the handle pool ------------------------------------------------------ */

static CURL *pool_get(struct s3 *s)
{
    CURL *h = NULL;
    pthread_mutex_lock(&s->pool_mu);
    if (s->pool_len > 0)
        h = s->pool[--s->pool_len];
    pthread_mutex_unlock(&s->pool_mu);
    return h ? h : curl_easy_init();
}

static void pool_put(struct s3 *s, CURL *h)
{
    /* reset clears every option (credentials included) but keeps the
     * connection cache, which is the point of the pool. */
    curl_easy_reset(h);
    pthread_mutex_lock(&s->pool_mu);
    if (s->pool_len < POOL_MAX) {
        s->pool[s->pool_len++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&s->pool_mu);
    if (h)
        curl_easy_cleanup(h);
}

/* ---- curl callbacks ------------------------------------------------------- */

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
    struct s3_req *r = ud;
    size_t n = size * nitems;
    char line[512];
    size_t l = n < sizeof(line) - 1 ? n : sizeof(line) - 1;
    memcpy(line, buf, l);
    line[l] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) {
        /* A new response (after 100 Continue, say): start over. */
        const char *sp = strchr(line, ' ');
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->etag[0] = r->request_id[0] = r->bucket_region[0] = '\0';
        return n;
    }
    char *colon = strchr(line, ':');
    if (!colon)
        return n;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (strcasecmp(line, "ETag") == 0)
        snprintf(r->etag, sizeof(r->etag), "%s", v);
    else if (strcasecmp(line, "x-amz-request-id") == 0)
        snprintf(r->request_id, sizeof(r->request_id), "%s", v);
    else if (strcasecmp(line, "x-amz-bucket-region") == 0)
        snprintf(r->bucket_region, sizeof(r->bucket_region), "%s", v);
    return n;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct s3_req *r = ud;
    size_t n = size * nmemb;
    if (r->status < 200 || r->status > 299) {
        /* An error document: keep the first 64 KiB, drop the rest. */
        size_t room = r->errbody.max - r->errbody.len;
        sl_buf_append(&r->errbody, ptr, n < room ? n : room);
        return n;
    }
    switch (r->sink_kind) {
    case SINK_NONE:
        return n;
    case SINK_BUF:
        if (sl_buf_append(r->sink_buf, ptr, n) < 0) {
            if (errno == ENOBUFS)
                r->too_large = true;
            else
                r->sink_errno = ENOMEM;
            return 0;
        }
        r->received += n;
        return n;
    case SINK_FD:
        if (r->sink_max && (r->received + n > r->sink_max)) {
            r->too_large = true;
            return 0;
        }
        for (size_t done = 0; done < n;) {
            ssize_t w = SL_RETRY(write(r->sink_fd, ptr + done, n - done));
            if (w < 0) {
                r->sink_errno = errno;
                return 0;
            }
            done += (size_t)w;
        }
        EVP_DigestUpdate(r->sink_sha, ptr, n);
        r->received += n;
        return n;
    }
    return 0;
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *ud)
{
    struct s3_req *r = ud;
    uint64_t total = r->body_kind == BODY_MEM ? r->mem_len : r->len;
    size_t want = size * nitems;
    uint64_t left = total - r->pos;
    size_t n = left < want ? (size_t)left : want;
    if (n == 0)
        return 0;
    if (r->body_kind == BODY_MEM) {
        memcpy(buf, r->mem + r->pos, n);
    } else {
        ssize_t got = SL_RETRY(pread(r->fd, buf, n, (off_t)(r->off + r->pos)));
        if (got <= 0) {
            /* 0: the file shrank since it was hashed. */
            r->source_errno = got < 0 ? errno : EIO;
            return CURL_READFUNC_ABORT;
        }
        n = (size_t)got;
    }
    r->pos += n;
    return n;
}

static int on_seek(void *ud, curl_off_t offset, int origin)
{
    struct s3_req *r = ud;
    uint64_t total = r->body_kind == BODY_MEM ? r->mem_len : r->len;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > total)
        return CURL_SEEKFUNC_FAIL;
    r->pos = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* ---- one request, with retries ------------------------------------------ */

static int reset_attempt(struct s3_req *r)
{
    r->pos = r->received = 0;
    r->too_large = false;
    r->sink_errno = r->source_errno = 0;
    r->status = 0;
    r->errbody.len = 0;
    if (r->errbody.data)
        r->errbody.data[0] = '\0';
    r->etag[0] = r->request_id[0] = r->bucket_region[0] = '\0';
    r->s3_code[0] = r->s3_message[0] = '\0';
    if (r->sink_kind == SINK_BUF) {
        r->sink_buf->len = 0;
        if (r->sink_buf->data)
            r->sink_buf->data[0] = '\0';
    } else if (r->sink_kind == SINK_FD) {
        if (ftruncate(r->sink_fd, 0) < 0 || lseek(r->sink_fd, 0, SEEK_SET) < 0) {
            r->sink_errno = errno;
            return -1;
        }
        if (EVP_DigestInit_ex(r->sink_sha, EVP_sha256(), NULL) != 1) {
            r->sink_errno = ENOMEM;
            return -1;
        }
    }
    return 0;
}

static CURLcode attempt_once(struct s3 *s, struct s3_req *r, const char *url,
                             const struct sl_s3_creds *c, char *errbuf)
{
    CURL *h = pool_get(s);
    if (!h)
        return CURLE_OUT_OF_MEMORY;
    struct curl_slist *headers = NULL;
    char line[160];
    _cleanup_free_ char *token_header = NULL;
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    snprintf(line, sizeof(line), "x-amz-content-sha256: %s", r->payload_sha);
    headers = curl_slist_append(headers, line);
    if (c->session_token) {
        if (asprintf(&token_header, "X-Amz-Security-Token: %s", c->session_token) < 0)
            goto out;
        headers = curl_slist_append(headers, token_header);
    }
    if (r->content_type) {
        snprintf(line, sizeof(line), "Content-Type: %s", r->content_type);
        headers = curl_slist_append(headers, line);
    }
    if (!headers)
        goto out;

    errbuf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* Keys are sent exactly as encoded here: "." and ".." segments are
     * refused before, and nothing may rewrite what was signed. */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    /* A redirect would re-send the credentials elsewhere; S3 redirects
     * (wrong region) are reported instead. */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, s->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     s->stall_timeout_ms >= 1000 ? s->stall_timeout_ms / 1000 : 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "sandloom-blobstore/1");
    if (s->ca_bundle)
        curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_bundle);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, c->access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret_key);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 128L * 1024L);

    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, r);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)(r->body_kind == BODY_FD ? r->len : r->mem_len));
    } else if (strcmp(r->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->mem ? r->mem : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->mem_len);
    } else if (strcmp(r->method, "DELETE") == 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    rc = curl_easy_perform(h);
out:
    pool_put(s, h);
    curl_slist_free_all(headers);
    if (token_header)
        explicit_bzero(token_header, strlen(token_header));
    return rc;
}

static char *request_url(const struct s3 *s, const struct s3_req *r)
{
    _cleanup_free_ char *enc = NULL;
    if (r->key && !(enc = aws_encode_dup(r->key, true)))
        return NULL;
    char *url = NULL;
    /* Bucket requests: <endpoint>/<bucket> path-style, <bucket>.<host>/ virtual. */
    if (asprintf(&url, "%s%s%s%s%s", s->bucket_url, enc ? "/" : (s->path_style ? "" : "/"),
                 enc ? enc : "", r->query ? "?" : "", r->query ? r->query : "") < 0)
        return NULL;
    return url;
}

/* Sends r with retries. 0: a 2xx answer (or a 404 when r->ok_404; look at
 * r->status and r->s3_code). -1: err filled. */
static int s3_perform(struct s3 *s, struct s3_req *r, struct sl_error *err)
{
    char wbuf[512];
    _cleanup_free_ char *url = request_url(s, r);
    if (!url)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");

    struct sl_s3_creds creds = {0};
    if (sl_s3_cred_provider_get(s->creds, false, &creds, err) < 0) {
        if (!err)
            return -1;
        /* The chain's reasons may name files: detail only. */
        char why[sizeof(err->detail)];
        snprintf(why, sizeof(why), "%s", sl_error_text(err));
        return s3_fail(
            err, sl_error_is(err, SL_E_INTERNAL) ? SL_E_INTERNAL : SL_E_OBJECT_STORE_UNAVAILABLE,
            err->errnum, UNAVAILABLE_MESSAGE, "%s: credentials: %.500s",
            where(s, r, wbuf, sizeof(wbuf)), why);
    }

    sl_buf_init(&r->errbody, RESPONSE_DOC_MAX);
    char errbuf[CURL_ERROR_SIZE];
    CURLcode rc = CURLE_OK;
    bool refreshed = false, error_in_body = false;
    for (int attempt = 1;; attempt++) {
        r->attempts = attempt;
        error_in_body = false;
        if (reset_attempt(r) < 0)
            break;
        rc = attempt_once(s, r, url, &creds, errbuf);
        if (rc == CURLE_OK && r->status >= 300) {
            const char *doc = r->errbody.data;
            if (!xml_tag(doc, r->errbody.len, "Code", r->s3_code, sizeof(r->s3_code)))
                snprintf(r->s3_code, sizeof(r->s3_code), "%s", status_code_name(r->status));
            xml_tag(doc, r->errbody.len, "Message", r->s3_message, sizeof(r->s3_message));
        } else if (rc == CURLE_OK && r->error_in_200 && r->sink_buf && r->sink_buf->data &&
                   strstr(r->sink_buf->data, "<Error>")) {
            error_in_body = true;
            xml_tag(r->sink_buf->data, r->sink_buf->len, "Code", r->s3_code, sizeof(r->s3_code));
            xml_tag(r->sink_buf->data, r->sink_buf->len, "Message", r->s3_message,
                    sizeof(r->s3_message));
        }

        bool retry = false, now = false;
        if (rc != CURLE_OK)
            retry = curl_retryable(rc) && !r->too_large && !r->sink_errno && !r->source_errno;
        else if (r->status >= 500 || r->status == 429 || error_in_body)
            retry = true;
        else if (r->status == 400 && strcmp(r->s3_code, "RequestTimeout") == 0)
            retry = true;
        else if ((strcmp(r->s3_code, "ExpiredToken") == 0 ||
                  strcmp(r->s3_code, "TokenRefreshRequired") == 0) &&
                 !refreshed && sl_s3_cred_provider_refreshable(s->creds)) {
            struct sl_s3_creds fresh = {0};
            struct sl_error ignored;
            refreshed = true;
            if (sl_s3_cred_provider_get(s->creds, true, &fresh, &ignored) == 0) {
                sl_s3_creds_clear(&creds);
                creds = fresh;
                retry = now = true;
            }
        }
        if (!retry || attempt >= s->max_attempts)
            break;
        if (!now)
            sleep_ms(backoff_ms(s, attempt));
    }
    sl_s3_creds_clear(&creds);

    int ret = 0;
    const char *w = where(s, r, wbuf, sizeof(wbuf));
    char tries[48];
    snprintf(tries, sizeof(tries), "after %d attempt%s", r->attempts, r->attempts == 1 ? "" : "s");
    if (r->too_large) {
        ret = s3_fail(err, SL_E_OBJECT_TOO_LARGE, EFBIG, "object too large",
                      "%s: object larger than %" PRIu64 " bytes", w,
                      r->sink_kind == SINK_FD ? r->sink_max : (uint64_t)r->sink_buf->max);
    } else if (r->sink_errno) {
        ret = s3_fail(err, SL_E_INTERNAL, r->sink_errno, "cannot store the downloaded object",
                      "%s: writing the download: %s", w, strerror(r->sink_errno));
    } else if (r->source_errno) {
        ret = s3_fail(err, SL_E_INTERNAL, r->source_errno, "cannot read the file to upload",
                      "%s: reading the upload: %s", w, strerror(r->source_errno));
    } else if (rc != CURLE_OK) {
        ret = s3_fail(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, UNAVAILABLE_MESSAGE,
                      "%s: %s (curl %d), %s", w, errbuf[0] ? errbuf : curl_easy_strerror(rc),
                      (int)rc, tries);
    } else if (error_in_body || r->status < 200 ||
               (r->status > 299 && !(r->status == 404 && r->ok_404))) {
        bool digest = strcmp(r->s3_code, "XAmzContentSHA256Mismatch") == 0 ||
                      strcmp(r->s3_code, "BadDigest") == 0;
        ret = s3_fail(err, digest ? SL_E_OBJECT_DIGEST_MISMATCH : SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                      digest ? "uploaded bytes differ from their digest" : UNAVAILABLE_MESSAGE,
                      "%s: HTTP %ld %s%s%.200s%s%s%s%s%s, %s", w, r->status,
                      r->s3_code[0] ? r->s3_code : "(no S3 code)", r->s3_message[0] ? ": " : "",
                      r->s3_message, r->request_id[0] ? " (request id " : "", r->request_id,
                      r->request_id[0] ? ")" : "", r->bucket_region[0] ? "; bucket region " : "",
                      r->bucket_region, tries);
    }
    sl_buf_free(&r->errbody);
    return ret;
}

/* ---- keys and digests ----------------------------------------------------- */

static int full_key(const struct s3 *s, const char *key, char **out, struct sl_error *err)
{
    if (!key || !*key || key[0] == '/')
        return s3_fail(err, SL_E_INTERNAL, EINVAL, "invalid object key",
                       "blobstore: invalid object key \"%.200s\"", key ? key : "(null)");
    for (const char *seg = key; seg;) {
        const char *slash = strchr(seg, '/');
        size_t l = slash ? (size_t)(slash - seg) : strlen(seg);
        if (l == 0 || (l == 1 && seg[0] == '.') || (l == 2 && seg[0] == '.' && seg[1] == '.'))
            return s3_fail(err, SL_E_INTERNAL, EINVAL, "invalid object key",
                           "blobstore: invalid object key \"%.200s\" (empty or dot segment)", key);
        seg = slash ? slash + 1 : NULL;
    }
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return s3_fail(err, SL_E_INTERNAL, EINVAL, "invalid object key",
                           "blobstore: object key with a control character");
    if (strlen(s->prefix) + strlen(key) > S3_KEY_MAX)
        return s3_fail(err, SL_E_INTERNAL, EINVAL, "invalid object key",
                       "blobstore: object key longer than %d bytes", S3_KEY_MAX);
    if (asprintf(out, "%s%s", s->prefix, key) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

/* SHA-256 of [off, off+len) of fd; also fed to `whole` when not NULL. */
static int hash_range(int fd, uint64_t off, uint64_t len, char out[65], EVP_MD_CTX *whole,
                      const char *path, struct sl_error *err)
{
    _cleanup_free_ unsigned char *buf = malloc(HASH_CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ret = -1;
    if (!buf || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    for (uint64_t done = 0; done < len;) {
        size_t want = len - done < HASH_CHUNK ? (size_t)(len - done) : HASH_CHUNK;
        ssize_t n = SL_RETRY(pread(fd, buf, want, (off_t)(off + done)));
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            s3_fail(err, SL_E_INTERNAL, errno, "cannot read the file to upload",
                    "blobstore: reading %s: %s", path, n == 0 ? "file shrank" : strerror(errno));
            goto out;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        if (whole)
            EVP_DigestUpdate(whole, buf, (size_t)n);
        done += (uint64_t)n;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    hex_of(md, mdlen, out);
    ret = 0;
out:
    EVP_MD_CTX_free(ctx);
    return ret;
}

/* ---- operations ------------------------------------------------------------ */

static int s3_put_buffer(struct sl_blobstore *bs, const char *key, const void *data, size_t len,
                         struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    _cleanup_free_ char *fk = NULL;
    if (full_key(s, key, &fk, err) < 0)
        return -1;
    struct s3_req r = {.op = "PutObject",
                       .method = "PUT",
                       .key = fk,
                       .content_type = "application/octet-stream",
                       .body_kind = BODY_MEM,
                       .mem = data ? data : "",
                       .mem_len = len};
    sl_sha256_hex(r.mem, len, r.payload_sha);
    return s3_perform(s, &r, err);
}

static void abort_multipart(struct s3 *s, const char *fk, const char *query)
{
    struct sl_error ignored;
    struct s3_req r = {.op = "AbortMultipartUpload",
                       .method = "DELETE",
                       .key = fk,
                       .query = query,
                       .ok_404 = true};
    memcpy(r.payload_sha, EMPTY_SHA256, sizeof(r.payload_sha));
    s3_perform(s, &r, &ignored);
}

static int put_multipart(struct s3 *s, const char *fk, int fd, uint64_t size, const char *path,
                         const char *expected, struct sl_error *err)
{
    uint64_t part = s->part_size;
    while ((size + part - 1) / part > S3_MAX_PARTS)
        part *= 2;
    size_t nparts = (size_t)((size + part - 1) / part);

    /* CreateMultipartUpload */
    struct sl_buf answer;
    sl_buf_init(&answer, RESPONSE_DOC_MAX);
    struct s3_req cr = {.op = "CreateMultipartUpload",
                        .method = "POST",
                        .key = fk,
                        .query = "uploads=",
                        .content_type = "application/octet-stream",
                        .body_kind = BODY_MEM,
                        .mem = "",
                        .mem_len = 0,
                        .sink_kind = SINK_BUF,
                        .sink_buf = &answer};
    memcpy(cr.payload_sha, EMPTY_SHA256, sizeof(cr.payload_sha));
    if (s3_perform(s, &cr, err) < 0) {
        sl_buf_free(&answer);
        return -1;
    }
    char upload_id[1024];
    bool ok =
        xml_tag(answer.data, answer.len, "UploadId", upload_id, sizeof(upload_id)) && upload_id[0];
    sl_buf_free(&answer);
    if (!ok)
        return s3_fail(
            err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, UNAVAILABLE_MESSAGE,
            "s3 CreateMultipartUpload s3://%s/%s (endpoint %s): no UploadId in the answer",
            s->bucket, fk, s->endpoint);
    _cleanup_free_ char *enc_id = aws_encode_dup(upload_id, false);
    _cleanup_free_ char *id_query = NULL;
    _cleanup_free_ char **etags = calloc(nparts, sizeof(char *));
    EVP_MD_CTX *whole = EVP_MD_CTX_new();
    struct sl_buf xml;
    sl_buf_init(&xml, SIZE_MAX);
    int ret = -1;
    if (!enc_id || !etags || !whole || asprintf(&id_query, "uploadId=%s", enc_id) < 0 ||
        EVP_DigestInit_ex(whole, EVP_sha256(), NULL) != 1) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }

    /* UploadPart, one after the other, each hashed just before it goes. */
    for (size_t i = 0; i < nparts; i++) {
        uint64_t off = (uint64_t)i * part;
        uint64_t len = size - off < part ? size - off : part;
        _cleanup_free_ char *q = NULL;
        /* Sorted: partNumber < uploadId. */
        if (asprintf(&q, "partNumber=%zu&uploadId=%s", i + 1, enc_id) < 0) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            goto out;
        }
        struct s3_req pr = {.op = "UploadPart",
                            .method = "PUT",
                            .key = fk,
                            .query = q,
                            .body_kind = BODY_FD,
                            .fd = fd,
                            .off = off,
                            .len = len};
        if (hash_range(fd, off, len, pr.payload_sha, whole, path, err) < 0)
            goto out;
        if (s3_perform(s, &pr, err) < 0) {
            sl_error_wrap(err, "part %zu of %zu", i + 1, nparts);
            goto out;
        }
        if (!pr.etag[0]) {
            s3_fail(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, UNAVAILABLE_MESSAGE,
                    "s3 UploadPart s3://%s/%s (endpoint %s): part %zu answered without an ETag",
                    s->bucket, fk, s->endpoint, i + 1);
            goto out;
        }
        etags[i] = strdup(pr.etag);
        if (!etags[i]) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            goto out;
        }
    }
    if (expected) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        char got[65];
        EVP_DigestFinal_ex(whole, md, &mdlen);
        hex_of(md, mdlen, got);
        if (strcmp(got, expected) != 0) {
            s3_fail(err, SL_E_OBJECT_DIGEST_MISMATCH, 0, "file digest mismatch",
                    "blobstore: %s has sha256 %s, the caller said %s (not uploaded to s3://%s/%s)",
                    path, got, expected, s->bucket, fk);
            goto out;
        }
    }

    /* CompleteMultipartUpload */
    if (sl_buf_append(&xml, "<CompleteMultipartUpload>", 25) < 0)
        goto oom;
    for (size_t i = 0; i < nparts; i++) {
        char num[64];
        snprintf(num, sizeof(num), "<Part><PartNumber>%zu</PartNumber><ETag>", i + 1);
        if (sl_buf_append(&xml, num, strlen(num)) < 0 || xml_escape_append(&xml, etags[i]) < 0 ||
            sl_buf_append(&xml, "</ETag></Part>", 14) < 0)
            goto oom;
    }
    if (sl_buf_append(&xml, "</CompleteMultipartUpload>", 26) < 0)
        goto oom;
    sl_buf_init(&answer, RESPONSE_DOC_MAX);
    struct s3_req fr = {.op = "CompleteMultipartUpload",
                        .method = "POST",
                        .key = fk,
                        .query = id_query,
                        .content_type = "application/xml",
                        .body_kind = BODY_MEM,
                        .mem = xml.data,
                        .mem_len = xml.len,
                        .sink_kind = SINK_BUF,
                        .sink_buf = &answer,
                        .error_in_200 = true};
    sl_sha256_hex(xml.data, xml.len, fr.payload_sha);
    ret = s3_perform(s, &fr, err);
    sl_buf_free(&answer);
    goto out;
oom:
    sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
out:
    if (ret < 0 && id_query)
        abort_multipart(s, fk, id_query);
    if (etags)
        for (size_t i = 0; i < nparts; i++)
            free(etags[i]);
    EVP_MD_CTX_free(whole);
    sl_buf_free(&xml);
    return ret;
}

static int s3_put_file(struct sl_blobstore *bs, const char *key, const char *path,
                       const char *sha256_hex, struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    char expected[65];
    if (sha256_hex && !normalise_sha256(sha256_hex, expected))
        return s3_fail(err, SL_E_INTERNAL, EINVAL, "invalid digest",
                       "blobstore: put_file digest is not 64 hex digits");
    _cleanup_free_ char *fk = NULL;
    if (full_key(s, key, &fk, err) < 0)
        return -1;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s3_fail(err, SL_E_INTERNAL, errno, "cannot read the file to upload",
                       "blobstore: open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0)
        return s3_fail(err, SL_E_INTERNAL, errno, "cannot read the file to upload",
                       "blobstore: stat %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return s3_fail(err, SL_E_INTERNAL, EINVAL, "cannot read the file to upload",
                       "blobstore: %s is not a regular file", path);
    uint64_t size = (uint64_t)st.st_size;
    if (size > s->multipart_threshold || size > S3_MAX_SINGLE_PUT)
        return put_multipart(s, fk, fd, size, path, sha256_hex ? expected : NULL, err);

    struct s3_req r = {.op = "PutObject",
                       .method = "PUT",
                       .key = fk,
                       .content_type = "application/octet-stream",
                       .body_kind = BODY_FD,
                       .fd = fd,
                       .off = 0,
                       .len = size};
    /* The caller's digest is what the store checks the bytes against. */
    if (sha256_hex)
        memcpy(r.payload_sha, expected, sizeof(r.payload_sha));
    else if (hash_range(fd, 0, size, r.payload_sha, NULL, path, err) < 0)
        return -1;
    return s3_perform(s, &r, err);
}

/* After a 404 on an object: 0 when it is the object that is missing, -1
 * (err filled) when it is the bucket. */
static int absent_or_error(struct s3 *s, struct s3_req *r, struct sl_error *err)
{
    char wbuf[512];
    if (strcmp(r->s3_code, "NoSuchBucket") == 0)
        return s3_fail(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, UNAVAILABLE_MESSAGE,
                       "%s: HTTP 404 NoSuchBucket", where(s, r, wbuf, sizeof(wbuf)));
    if (strcmp(r->s3_code, "NoSuchKey") == 0)
        return 0;
    /* No body (HEAD): ask the bucket. */
    struct s3_req b = {.op = "HeadBucket", .method = "HEAD", .ok_404 = true};
    memcpy(b.payload_sha, EMPTY_SHA256, sizeof(b.payload_sha));
    if (s3_perform(s, &b, err) < 0)
        return -1;
    if (b.status == 404)
        return s3_fail(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, UNAVAILABLE_MESSAGE,
                       "%s: HTTP 404 NoSuchBucket", where(s, r, wbuf, sizeof(wbuf)));
    return 0;
}

static int s3_get_file(struct sl_blobstore *bs, const char *key, const char *dest_path,
                       const char *expected_sha256_hex, uint64_t max_bytes, struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    char expected[65];
    if (expected_sha256_hex && !normalise_sha256(expected_sha256_hex, expected))
        return s3_fail(err, SL_E_INTERNAL, EINVAL, "invalid digest",
                       "blobstore: get_file digest is not 64 hex digits");
    _cleanup_free_ char *fk = NULL;
    if (full_key(s, key, &fk, err) < 0)
        return -1;
    _cleanup_free_ char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp-XXXXXX", dest_path) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return s3_fail(err, SL_E_INTERNAL, errno, "cannot store the downloaded object",
                       "blobstore: create %s: %s", tmp, strerror(errno));
    EVP_MD_CTX *sha = EVP_MD_CTX_new();
    if (!sha) {
        unlink(tmp);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    struct s3_req r = {.op = "GetObject",
                       .method = "GET",
                       .key = fk,
                       .sink_kind = SINK_FD,
                       .sink_fd = fd,
                       .sink_max = max_bytes,
                       .sink_sha = sha,
                       .ok_404 = true};
    memcpy(r.payload_sha, EMPTY_SHA256, sizeof(r.payload_sha));
    int ret = s3_perform(s, &r, err);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char got[65] = "";
    if (ret == 0 && r.status != 404) {
        EVP_DigestFinal_ex(sha, md, &mdlen);
        hex_of(md, mdlen, got);
    }
    EVP_MD_CTX_free(sha);
    if (ret < 0)
        goto fail;
    if (r.status == 404) {
        ret = absent_or_error(s, &r, err);
        unlink(tmp);
        return ret;
    }
    if (expected_sha256_hex && strcmp(got, expected) != 0) {
        s3_fail(err, SL_E_OBJECT_DIGEST_MISMATCH, 0, "object digest mismatch",
                "blobstore: s3://%s/%s downloaded with sha256 %s, expected %s (%" PRIu64 " bytes)",
                s->bucket, fk, got, expected, r.received);
        if (err)
            snprintf(err->message, sizeof(err->message),
                     "object digest mismatch: expected sha256 %s, downloaded %s", expected, got);
        goto fail;
    }
    if (fsync(fd) < 0) {
        s3_fail(err, SL_E_INTERNAL, errno, "cannot store the downloaded object",
                "blobstore: fsync %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, dest_path) < 0) {
        s3_fail(err, SL_E_INTERNAL, errno, "cannot store the downloaded object",
                "blobstore: rename %s to %s: %s", tmp, dest_path, strerror(errno));
        goto fail;
    }
    return 1;
fail:
    unlink(tmp);
    return -1;
}

static int s3_get_buffer(struct sl_blobstore *bs, const char *key, size_t max_bytes, char **out,
                         size_t *len, struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    _cleanup_free_ char *fk = NULL;
    if (full_key(s, key, &fk, err) < 0)
        return -1;
    struct sl_buf b;
    sl_buf_init(&b, max_bytes);
    struct s3_req r = {.op = "GetObject",
                       .method = "GET",
                       .key = fk,
                       .sink_kind = SINK_BUF,
                       .sink_buf = &b,
                       .ok_404 = true};
    memcpy(r.payload_sha, EMPTY_SHA256, sizeof(r.payload_sha));
    if (s3_perform(s, &r, err) < 0) {
        sl_buf_free(&b);
        return -1;
    }
    if (r.status == 404) {
        sl_buf_free(&b);
        return absent_or_error(s, &r, err);
    }
    if (!b.data) {
        b.data = calloc(1, 1);
        if (!b.data)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    *out = b.data;
    *len = b.len;
    return 1;
}

static int s3_exists(struct sl_blobstore *bs, const char *key, struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    _cleanup_free_ char *fk = NULL;
    if (full_key(s, key, &fk, err) < 0)
        return -1;
    struct s3_req r = {.op = "HeadObject", .method = "HEAD", .key = fk, .ok_404 = true};
    memcpy(r.payload_sha, EMPTY_SHA256, sizeof(r.payload_sha));
    if (s3_perform(s, &r, err) < 0)
        return -1;
    return r.status == 404 ? absent_or_error(s, &r, err) : 1;
}

static int s3_delete(struct sl_blobstore *bs, const char *key, struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    _cleanup_free_ char *fk = NULL;
    if (full_key(s, key, &fk, err) < 0)
        return -1;
    struct s3_req r = {.op = "DeleteObject", .method = "DELETE", .key = fk, .ok_404 = true};
    memcpy(r.payload_sha, EMPTY_SHA256, sizeof(r.payload_sha));
    if (s3_perform(s, &r, err) < 0)
        return -1;
    /* S3 answers 204 for an absent key; some compatible stores 404. */
    return r.status == 404 ? absent_or_error(s, &r, err) : 0;
}

static int head_bucket(struct s3 *s, long *status, struct sl_error *err)
{
    struct s3_req r = {.op = "HeadBucket", .method = "HEAD", .ok_404 = true};
    memcpy(r.payload_sha, EMPTY_SHA256, sizeof(r.payload_sha));
    if (s3_perform(s, &r, err) < 0)
        return -1;
    *status = r.status;
    return 0;
}

static int s3_ensure_bucket(struct sl_blobstore *bs, struct sl_error *err)
{
    struct s3 *s = (struct s3 *)bs;
    long status = 0;
    if (head_bucket(s, &status, err) < 0)
        return -1;
    if (status != 404)
        return 0;

    _cleanup_free_ char *body = NULL;
    /* us-east-1 is the one region that takes no LocationConstraint (and
     * refuses one). */
    if (strcmp(s->region, "us-east-1") != 0 &&
        asprintf(&body,
                 "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                 "<LocationConstraint>%s</LocationConstraint></CreateBucketConfiguration>",
                 s->region) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    struct s3_req r = {.op = "CreateBucket",
                       .method = "PUT",
                       .body_kind = BODY_MEM,
                       .mem = body ? body : "",
                       .mem_len = body ? strlen(body) : 0,
                       .content_type = body ? "application/xml" : NULL};
    sl_sha256_hex(r.mem, r.mem_len, r.payload_sha);
    if (s3_perform(s, &r, err) == 0)
        return 1;
    if (strcmp(r.s3_code, "BucketAlreadyOwnedByYou") == 0)
        return 0;
    if (strcmp(r.s3_code, "BucketAlreadyExists") == 0) {
        /* Another replica may have won the race; if we can see the bucket
         * it is ours to use. */
        struct sl_error again;
        if (head_bucket(s, &status, &again) == 0 && status >= 200 && status <= 299)
            return 0;
    }
    return -1;
}

static const char *s3_describe(struct sl_blobstore *bs)
{
    return ((struct s3 *)bs)->description;
}

static void s3_close(struct sl_blobstore *bs)
{
    struct s3 *s = (struct s3 *)bs;
    if (!s)
        return;
    for (size_t i = 0; i < s->pool_len; i++)
        curl_easy_cleanup(s->pool[i]);
    pthread_mutex_destroy(&s->pool_mu);
    sl_s3_cred_provider_free(s->creds);
    free(s->endpoint);
    free(s->bucket_url);
    free(s->bucket);
    free(s->prefix);
    free(s->region);
    free(s->sigv4);
    free(s->description);
    free(s->ca_bundle);
    free(s);
}

static const struct sl_blobstore_ops s3_ops = {
    .put_file = s3_put_file,
    .put_buffer = s3_put_buffer,
    .get_file = s3_get_file,
    .get_buffer = s3_get_buffer,
    .exists = s3_exists,
    .delete = s3_delete,
    .ensure_bucket = s3_ensure_bucket,
    .describe = s3_describe,
    .close = s3_close,
};

/* ---- open ------------------------------------------------------------------- */

void sl_s3_options_init(struct sl_s3_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->path_style = true;
    opt->connect_timeout_ms = 10000;
    opt->stall_timeout_ms = 60000;
    opt->max_attempts = 5;
    opt->retry_base_ms = 200;
    opt->retry_max_ms = 20000;
    opt->multipart_threshold = 64 * MIB;
    opt->part_size = 16 * MIB;
}

static bool valid_region(const char *r)
{
    if (!*r || strlen(r) > 32)
        return false;
    for (; *r; r++)
        if (!isalnum((unsigned char)*r) && *r != '-' && *r != '_')
            return false;
    return true;
}

static bool valid_bucket(const char *b, bool path_style)
{
    size_t n = strlen(b);
    if (path_style ? (n < 1 || n > 255) : (n < 3 || n > 63))
        return false;
    for (const char *p = b; *p; p++) {
        unsigned char c = (unsigned char)*p;
        bool ok = islower(c) || isdigit(c) || c == '-' || c == '.' ||
                  (path_style && (isupper(c) || c == '_'));
        if (!ok)
            return false;
    }
    /* A host label cannot be empty. */
    return path_style || (b[0] != '.' && b[n - 1] != '.' && !strstr(b, ".."));
}

static bool is_ip_literal(const char *host)
{
    if (host[0] == '[')
        return true;
    for (const char *p = host; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != '.')
            return false;
    return true;
}

/* Parse the endpoint into the normalised endpoint and the bucket URL. */
static int build_urls(struct s3 *s, const char *endpoint, struct sl_error *err)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *user = NULL, *query = NULL,
         *frag = NULL;
    int ret = -1;
    if (!u) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    if (curl_url_set(u, CURLUPART_URL, endpoint, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "SANDBOX_BLOBSTORE_ENDPOINT is not a URL (expected http[s]://host[:port])");
        goto out;
    }
    if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0) {
        sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_BLOBSTORE_ENDPOINT must be http or https");
        goto out;
    }
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
        curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
        curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_OK) {
        sl_error_set(
            err, SL_E_CONFIG, 0,
            "SANDBOX_BLOBSTORE_ENDPOINT must not carry credentials, a query or a fragment");
        goto out;
    }
    curl_url_get(u, CURLUPART_PORT, &port, 0);
    curl_url_get(u, CURLUPART_PATH, &path, 0);
    size_t plen = path ? strlen(path) : 0;
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    if (!s->path_style && is_ip_literal(host)) {
        sl_error_set(err, SL_E_CONFIG, 0,
                     "virtual-hosted addressing needs a DNS name in SANDBOX_BLOBSTORE_ENDPOINT");
        goto out;
    }
    if (asprintf(&s->endpoint, "%s://%s%s%s%.*s", scheme, host, port ? ":" : "", port ? port : "",
                 (int)plen, path ? path : "") < 0)
        s->endpoint = NULL;
    if (!s->endpoint)
        goto oom;
    if (s->path_style) {
        if (asprintf(&s->bucket_url, "%s/%s", s->endpoint, s->bucket) < 0)
            s->bucket_url = NULL;
    } else if (asprintf(&s->bucket_url, "%s://%s.%s%s%s%.*s", scheme, s->bucket, host,
                        port ? ":" : "", port ? port : "", (int)plen, path ? path : "") < 0) {
        s->bucket_url = NULL;
    }
    if (!s->bucket_url)
        goto oom;
    ret = 0;
    goto out;
oom:
    sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(user);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    return ret;
}

struct sl_blobstore *sl_blobstore_s3_open(const struct sl_s3_options *opt, struct sl_error *err)
{
    if (sl_s3_curl_global_init(err) < 0)
        return NULL;
    /* CURLOPT_AWS_SIGV4 appeared in 7.75; it takes x-amz-content-sha256 as
     * the payload digest since 7.87 (curl PR 9804): before that, every
     * upload would be signed as an empty body. */
    const curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
    if (vi->version_num < 0x075700) {
        sl_error_set(err, SL_E_CONFIG, 0, "libcurl %s is too old for S3 (7.87 or later needed)",
                     vi->version);
        return NULL;
    }
    const char *region = opt->region && *opt->region ? opt->region : "us-east-1";
    if (!valid_region(region)) {
        sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_BLOBSTORE_REGION is not a region name");
        return NULL;
    }
    if (!opt->bucket || !*opt->bucket) {
        sl_error_set(err, SL_E_CONFIG, 0, "no bucket configured for the object store");
        return NULL;
    }
    if (!valid_bucket(opt->bucket, opt->path_style)) {
        sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_BLOBSTORE_BUCKET is not a valid bucket name%s",
                     opt->path_style ? "" : " for virtual-hosted addressing");
        return NULL;
    }
    const char *prefix = opt->base_prefix ? opt->base_prefix : "";
    if (prefix[0] == '/' || strlen(prefix) > 512) {
        sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_BLOBSTORE_BASE_PREFIX is not normalised");
        return NULL;
    }

    struct s3 *s = calloc(1, sizeof(*s));
    if (!s) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->pool_mu, NULL);
    s->pub.ops = &s3_ops;
    s->pub.backend = "s3";
    s->path_style = opt->path_style;
    s->connect_timeout_ms = opt->connect_timeout_ms > 0 ? opt->connect_timeout_ms : 10000;
    s->stall_timeout_ms = opt->stall_timeout_ms > 0 ? opt->stall_timeout_ms : 60000;
    s->max_attempts = opt->max_attempts > 0 ? opt->max_attempts : 5;
    s->retry_base_ms = opt->retry_base_ms > 0 ? opt->retry_base_ms : 200;
    s->retry_max_ms = opt->retry_max_ms > 0 ? opt->retry_max_ms : 20000;
    s->multipart_threshold = opt->multipart_threshold > 0 ? opt->multipart_threshold : 64 * MIB;
    s->part_size = opt->part_size > 0 ? opt->part_size : 16 * MIB;
    if (s->part_size < S3_MIN_PART)
        s->part_size = S3_MIN_PART;
    s->bucket = strdup(opt->bucket);
    s->prefix = strdup(prefix);
    s->region = strdup(region);
    if (!s->bucket || !s->prefix || !s->region ||
        asprintf(&s->sigv4, "aws:amz:%s:s3", region) < 0) {
        s->sigv4 = NULL;
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto fail;
    }
    _cleanup_free_ char *default_endpoint = NULL;
    const char *endpoint = opt->endpoint;
    if (!endpoint || !*endpoint) {
        if (asprintf(&default_endpoint, "https://s3.%s.amazonaws.com", region) < 0) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            goto fail;
        }
        endpoint = default_endpoint;
    }
    if (build_urls(s, endpoint, err) < 0)
        goto fail;
    /* The AWS SDKs' variable for a private CA (MinIO, Ceph behind an
     * internal PKI); read once, requests run on many threads. */
    const char *ca = getenv("AWS_CA_BUNDLE");
    if (ca && *ca && !(s->ca_bundle = strdup(ca))) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto fail;
    }
    s->creds = sl_s3_cred_provider_new(opt->access_key, opt->secret_key, err);
    if (!s->creds)
        goto fail;
    if (asprintf(&s->description,
                 "s3 endpoint=%s bucket=%s prefix=%s region=%s addressing=%s credentials=%s",
                 s->endpoint, s->bucket, s->prefix[0] ? s->prefix : "\"\"", s->region,
                 s->path_style ? "path" : "virtual-hosted",
                 sl_s3_cred_provider_kind(s->creds)) < 0) {
        s->description = NULL;
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        goto fail;
    }
    return &s->pub;
fail:
    s3_close(&s->pub);
    return NULL;
}
