#include "blobstore/s3_creds.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobstore/blobstore.h"
#include "common/cleanup.h"
#include "common/util.h"

#define CREDS_FILE_MAX (1024 * 1024)
#define CREDS_DOC_MAX (64 * 1024)
#define METADATA_TIMEOUT_MS 1000L
#define CONTAINER_TIMEOUT_MS 2000L
#define IMDS_DEFAULT_ENDPOINT "http://169.254.169.254"
#define ECS_RELATIVE_HOST "http://169.254.170.2"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int sl_s3_curl_global_init(struct sl_error *err)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return sl_error_set(err, SL_E_INTERNAL, 0, "curl_global_init failed: %s",
                            curl_easy_strerror(curl_init_rc));
    return 0;
}

void sl_s3_creds_clear(struct sl_s3_creds *c)
{
    if (!c)
        return;
    free(c->access_key);
    if (c->secret_key) {
        explicit_bzero(c->secret_key, strlen(c->secret_key));
        free(c->secret_key);
    }
    free(c->session_token);
    memset(c, 0, sizeof(*c));
}

int sl_s3_creds_copy(struct sl_s3_creds *dst, const struct sl_s3_creds *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->access_key = strdup(src->access_key ? src->access_key : "");
    dst->secret_key = strdup(src->secret_key ? src->secret_key : "");
    dst->session_token = src->session_token ? strdup(src->session_token) : NULL;
    dst->expires_at_us = src->expires_at_us;
    dst->source = src->source;
    if (!dst->access_key || !dst->secret_key || (src->session_token && !dst->session_token)) {
        sl_s3_creds_clear(dst);
        return -1;
    }
    return 0;
}

/* Set *slot to a copy of [s, s+n), replacing what was there. */
static int set_str(char **slot, const char *s, size_t n)
{
    char *copy = strndup(s, n);
    if (!copy)
        return -1;
    if (*slot) {
        explicit_bzero(*slot, strlen(*slot));
        free(*slot);
    }
    *slot = copy;
    return 0;
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && isspace((unsigned char)**s))
        (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

/* Section header text with runs of blanks collapsed to one space. */
static bool section_matches(const char *s, const char *e, const char *want)
{
    trim(&s, &e);
    const char *w = want;
    while (s < e) {
        if (isspace((unsigned char)*s)) {
            while (s < e && isspace((unsigned char)*s))
                s++;
            if (*w != ' ')
                return false;
            w++;
            continue;
        }
        if (*w != *s)
            return false;
        s++;
        w++;
    }
    return *w == '\0';
}

int sl_s3_creds_parse_ini(const char *text, size_t len, const char *section, bool *section_seen,
                          struct sl_s3_creds *out, struct sl_error *err)
{
    char *ak = NULL, *sk = NULL, *tok = NULL;
    bool in = false, seen = false;
    const char *p = text, *end = text + len;
    int rc = -1;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *ls = p, *le = nl ? nl : end;
        p = nl ? nl + 1 : end;
        /* An indented line continues the previous value (nested settings
         * of the config file); none of the keys read here is nested. */
        if (ls < le && (*ls == ' ' || *ls == '\t'))
            continue;
        trim(&ls, &le);
        if (ls == le || *ls == '#' || *ls == ';')
            continue;
        if (*ls == '[') {
            const char *close = memchr(ls, ']', (size_t)(le - ls));
            in = close && section_matches(ls + 1, close, section);
            seen = seen || in;
            continue;
        }
        if (!in)
            continue;
        const char *eq = memchr(ls, '=', (size_t)(le - ls));
        if (!eq)
            continue;
        const char *ks = ls, *ke = eq, *vs = eq + 1, *ve = le;
        trim(&ks, &ke);
        trim(&vs, &ve);
        size_t kl = (size_t)(ke - ks);
        char **slot = NULL;
        if (kl == strlen("aws_access_key_id") && strncasecmp(ks, "aws_access_key_id", kl) == 0)
            slot = &ak;
        else if (kl == strlen("aws_secret_access_key") &&
                 strncasecmp(ks, "aws_secret_access_key", kl) == 0)
            slot = &sk;
        else if ((kl == strlen("aws_session_token") &&
                  strncasecmp(ks, "aws_session_token", kl) == 0) ||
                 (kl == strlen("aws_security_token") &&
                  strncasecmp(ks, "aws_security_token", kl) == 0))
            slot = &tok;
        if (slot && set_str(slot, vs, (size_t)(ve - vs)) < 0) {
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            goto out;
        }
    }
    if (section_seen)
        *section_seen = seen;
    if (ak && !*ak) {
        free(ak);
        ak = NULL;
    }
    if (sk && !*sk) {
        free(sk);
        sk = NULL;
    }
    if (!ak && !sk) {
        rc = 0;
        goto out;
    }
    if (!ak || !sk) {
        sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, "profile [%s] has %s without %s",
                     section, ak ? "aws_access_key_id" : "aws_secret_access_key",
                     ak ? "aws_secret_access_key" : "aws_access_key_id");
        goto out;
    }
    memset(out, 0, sizeof(*out));
    out->access_key = steal_ptr(ak);
    out->secret_key = steal_ptr(sk);
    if (tok && *tok)
        out->session_token = steal_ptr(tok);
    rc = 1;
out:
    free(ak);
    if (sk) {
        explicit_bzero(sk, strlen(sk));
        free(sk);
    }
    free(tok);
    return rc;
}

/* 1 read (malloc'd, NUL-terminated), 0 the file does not exist, -1 error. */
static int read_small_file(const char *path, size_t max, char **text, size_t *len,
                           struct sl_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return sl_error_errno(err, SL_E_OBJECT_STORE_UNAVAILABLE, "cannot open %s", path);
    }
    struct sl_buf b;
    sl_buf_init(&b, max);
    char chunk[8192];
    for (;;) {
        ssize_t n = SL_RETRY(read(fd, chunk, sizeof(chunk)));
        if (n < 0) {
            sl_buf_free(&b);
            return sl_error_errno(err, SL_E_OBJECT_STORE_UNAVAILABLE, "cannot read %s", path);
        }
        if (n == 0)
            break;
        if (sl_buf_append(&b, chunk, (size_t)n) < 0) {
            sl_buf_free(&b);
            return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                                "%s is larger than %zu bytes", path, max);
        }
    }
    if (!b.data && sl_buf_append(&b, "", 0) < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    *text = b.data;
    *len = b.len;
    return 1;
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* `name` from the environment, else ~/<rel>; "~/" at the start of the
 * variable is expanded too. NULL when no home directory is known. */
static char *shared_file_path(const char *name, const char *rel)
{
    const char *v = env_nonempty(name);
    const char *home = env_nonempty("HOME");
    if (!home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : NULL;
    }
    char *path = NULL;
    if (v && strncmp(v, "~/", 2) != 0)
        return strdup(v);
    if (!home)
        return NULL;
    if (asprintf(&path, "%s/%s", home, v ? v + 2 : rel) < 0)
        return NULL;
    return path;
}

static int creds_from_env(struct sl_s3_creds *out, struct sl_error *err)
{
    const char *ak = env_nonempty("AWS_ACCESS_KEY_ID");
    const char *sk = env_nonempty("AWS_SECRET_ACCESS_KEY");
    if (!ak && !sk)
        return 0;
    if (!ak || !sk)
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, "%s is set without %s",
                            ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                            ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
    const char *tok = env_nonempty("AWS_SESSION_TOKEN");
    if (!tok)
        tok = env_nonempty("AWS_SECURITY_TOKEN");
    struct sl_s3_creds c = {
        .access_key = strdup(ak),
        .secret_key = strdup(sk),
        .session_token = tok ? strdup(tok) : NULL,
        .source = "environment",
    };
    if (!c.access_key || !c.secret_key || (tok && !c.session_token)) {
        sl_s3_creds_clear(&c);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    *out = c;
    return 1;
}

/* One shared file: 1 found, 0 not there, -1 broken. */
static int creds_from_shared_file(const char *path, const char *section, const char *source,
                                  bool *seen, struct sl_s3_creds *out, struct sl_error *err)
{
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = read_small_file(path, CREDS_FILE_MAX, &text, &len, err);
    if (r <= 0)
        return r;
    bool section_seen = false;
    r = sl_s3_creds_parse_ini(text, len, section, &section_seen, out, err);
    explicit_bzero(text, len);
    if (section_seen)
        *seen = true;
    if (r < 0)
        return sl_error_wrap(err, "%s", path);
    if (r > 0)
        out->source = source;
    return r;
}

/* ---- HTTP for the metadata endpoints ---------------------------------- */

static size_t fetch_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct sl_buf *b = userdata;
    size_t n = size * nmemb;
    return sl_buf_append(b, ptr, n) < 0 ? 0 : n;
}

/* One request with short timeouts and no retries; 0 with *status and the
 * body (bounded), or -1 (transport failure, err filled). */
static int fetch(const char *method, const char *url, struct curl_slist *headers, long timeout_ms,
                 long *status, struct sl_buf *body, struct sl_error *err)
{
    if (sl_s3_curl_global_init(err) < 0)
        return -1;
    CURL *h = curl_easy_init();
    if (!h)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "curl_easy_init failed");
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    /* The metadata services are local: never through a proxy. */
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    if (strcmp(method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK)
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0, "%s %s: %s", method, url,
                            errbuf[0] ? errbuf : curl_easy_strerror(rc));
    return 0;
}

/* {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"} as the
 * container and instance endpoints answer. */
static int creds_from_json(const char *text, size_t len, const char *source,
                           struct sl_s3_creds *out, struct sl_error *err)
{
    json_error_t jerr;
    _cleanup_json_ json_t *doc = json_loadb(text, len, 0, &jerr);
    if (!json_is_object(doc))
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                            "%s credentials are not a JSON object", source);
    const char *code = json_string_value(json_object_get(doc, "Code"));
    if (code && strcmp(code, "Success") != 0)
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                            "%s credentials answer Code=%.64s", source, code);
    const char *ak = json_string_value(json_object_get(doc, "AccessKeyId"));
    const char *sk = json_string_value(json_object_get(doc, "SecretAccessKey"));
    const char *tok = json_string_value(json_object_get(doc, "Token"));
    const char *exp = json_string_value(json_object_get(doc, "Expiration"));
    if (!ak || !*ak || !sk || !*sk)
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                            "%s credentials lack AccessKeyId or SecretAccessKey", source);
    int64_t expires = 0;
    if (exp && *exp && sl_time_parse(exp, &expires) < 0)
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                            "%s credentials have an unreadable Expiration", source);
    struct sl_s3_creds c = {
        .access_key = strdup(ak),
        .secret_key = strdup(sk),
        .session_token = tok && *tok ? strdup(tok) : NULL,
        .expires_at_us = expires,
        .source = source,
    };
    if (!c.access_key || !c.secret_key || (tok && *tok && !c.session_token)) {
        sl_s3_creds_clear(&c);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    *out = c;
    return 1;
}

static bool host_allowed_for_http(const char *host)
{
    /* What the AWS SDKs accept for a plain-http FULL_URI: loopback and the
     * ECS / EKS Pod Identity agents. */
    static const char *const allowed[] = {
        "localhost", "169.254.170.2", "169.254.170.23", "[fd00:ec2::23]", "fd00:ec2::23", "[::1]",
        "::1"};
    for (size_t i = 0; i < SL_ARRAY_LEN(allowed); i++)
        if (strcasecmp(host, allowed[i]) == 0)
            return true;
    return strncmp(host, "127.", 4) == 0;
}

int sl_s3_container_url(char *buf, size_t size, struct sl_error *err)
{
    const char *rel = env_nonempty("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    const char *full = env_nonempty("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    if (rel) {
        if (snprintf(buf, size, "%s%s%s", ECS_RELATIVE_HOST, rel[0] == '/' ? "" : "/", rel) >=
            (int)size)
            return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is too long");
        return 1;
    }
    if (!full)
        return 0;
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    int rc = -1;
    if (!u || curl_url_set(u, CURLUPART_URL, full, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI is not a URL");
    } else if (strcasecmp(scheme, "https") != 0 &&
               !(strcasecmp(scheme, "http") == 0 && host_allowed_for_http(host))) {
        sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to a loopback "
                     "or the ECS/EKS agent address (host %.128s)",
                     host);
    } else if (snprintf(buf, size, "%s", full) >= (int)size) {
        sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI is too long");
    } else {
        rc = 1;
    }
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

static int creds_from_container(struct sl_s3_creds *out, struct sl_error *err)
{
    char url[2048];
    int r = sl_s3_container_url(url, sizeof(url), err);
    if (r <= 0)
        return r;

    _cleanup_free_ char *token = NULL;
    const char *token_file = env_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    if (token_file) {
        size_t len = 0;
        r = read_small_file(token_file, 16384, &token, &len, err);
        if (r == 0)
            return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, ENOENT,
                                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s does not exist",
                                token_file);
        if (r < 0)
            return -1;
        while (len > 0 && (token[len - 1] == '\n' || token[len - 1] == '\r'))
            token[--len] = '\0';
    } else if (env_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
        token = strdup(getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN"));
        if (!token)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    /* A token is one header value: a line break would add headers. */
    if (token && strpbrk(token, "\r\n"))
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                            "the container authorization token contains a line break");

    struct curl_slist *headers = NULL;
    _cleanup_free_ char *auth = NULL;
    if (token) {
        if (asprintf(&auth, "Authorization: %s", token) < 0)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        headers = curl_slist_append(headers, auth);
    }
    headers = curl_slist_append(headers, "Accept: application/json");
    struct sl_buf body;
    sl_buf_init(&body, CREDS_DOC_MAX);
    long status = 0;
    r = fetch("GET", url, headers, CONTAINER_TIMEOUT_MS, &status, &body, err);
    curl_slist_free_all(headers);
    if (r == 0 && (status < 200 || status > 299))
        r = sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                         "container credentials endpoint answered HTTP %ld", status);
    if (r == 0)
        r = creds_from_json(body.data ? body.data : "", body.len, "container", out, err);
    if (body.data)
        explicit_bzero(body.data, body.len);
    sl_buf_free(&body);
    if (r < 0)
        return sl_error_wrap(err, "container credentials (%s)", url);
    return r;
}

/* 1 found, 0 no instance role or no metadata service (the chain ends
 * empty), -1 a service that answered nonsense. */
static int creds_from_imds(struct sl_s3_creds *out, struct sl_error *err)
{
    const char *disabled = getenv("AWS_EC2_METADATA_DISABLED");
    if (disabled && strcasecmp(disabled, "true") == 0)
        return 0;
    const char *base = env_nonempty("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (!base)
        base = IMDS_DEFAULT_ENDPOINT;
    size_t blen = strlen(base);
    while (blen > 0 && base[blen - 1] == '/')
        blen--;

    struct sl_error ignored;
    char url[2048];
    long status = 0;
    struct sl_buf tok;
    sl_buf_init(&tok, 4096);
    snprintf(url, sizeof(url), "%.*s/latest/api/token", (int)blen, base);
    struct curl_slist *h = curl_slist_append(NULL, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
    int r = fetch("PUT", url, h, METADATA_TIMEOUT_MS, &status, &tok, &ignored);
    curl_slist_free_all(h);
    if (r < 0 || status != 200 || !tok.data || !tok.len || strpbrk(tok.data, "\r\n")) {
        /* No IMDSv2 here (not on EC2, or the hop limit drops us): the
         * chain simply has nothing. */
        sl_buf_free(&tok);
        return 0;
    }
    _cleanup_free_ char *tok_header = NULL;
    int ar = asprintf(&tok_header, "X-aws-ec2-metadata-token: %s", tok.data);
    sl_buf_free(&tok);
    if (ar < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");

    h = curl_slist_append(NULL, tok_header);
    struct sl_buf role;
    sl_buf_init(&role, 1024);
    snprintf(url, sizeof(url), "%.*s/latest/meta-data/iam/security-credentials/", (int)blen, base);
    r = fetch("GET", url, h, METADATA_TIMEOUT_MS, &status, &role, &ignored);
    if (r < 0 || status != 200 || !role.data || !role.len) {
        /* 404: the instance has no role. */
        curl_slist_free_all(h);
        sl_buf_free(&role);
        return 0;
    }
    size_t rl = strcspn(role.data, "\r\n");
    role.data[rl] = '\0';
    for (size_t i = 0; i < rl; i++) {
        char c = role.data[i];
        if (!(isalnum((unsigned char)c) || strchr("+=,.@_-", c))) {
            curl_slist_free_all(h);
            sl_buf_free(&role);
            return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                                "instance metadata answered an invalid role name");
        }
    }
    snprintf(url, sizeof(url), "%.*s/latest/meta-data/iam/security-credentials/%s", (int)blen, base,
             role.data);
    sl_buf_free(&role);
    struct sl_buf body;
    sl_buf_init(&body, CREDS_DOC_MAX);
    r = fetch("GET", url, h, METADATA_TIMEOUT_MS, &status, &body, err);
    curl_slist_free_all(h);
    if (r == 0 && status != 200)
        r = sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                         "instance metadata credentials answered HTTP %ld", status);
    if (r == 0)
        r = creds_from_json(body.data ? body.data : "", body.len, "instance-metadata", out, err);
    if (body.data)
        explicit_bzero(body.data, body.len);
    sl_buf_free(&body);
    if (r < 0)
        return sl_error_wrap(err, "instance metadata credentials");
    return r;
}

int sl_s3_creds_resolve_chain(struct sl_s3_creds *out, struct sl_error *err)
{
    int r = creds_from_env(out, err);
    if (r != 0)
        return r;

    const char *profile = env_nonempty("AWS_PROFILE");
    if (!profile)
        profile = env_nonempty("AWS_DEFAULT_PROFILE");
    bool profile_named = profile != NULL;
    if (!profile)
        profile = "default";
    bool seen = false;

    _cleanup_free_ char *cred_path =
        shared_file_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    if (cred_path) {
        r = creds_from_shared_file(cred_path, profile, "shared-credentials-file", &seen, out, err);
        if (r != 0)
            return r;
    }
    _cleanup_free_ char *conf_path = shared_file_path("AWS_CONFIG_FILE", ".aws/config");
    if (conf_path) {
        _cleanup_free_ char *section = NULL;
        if (strcmp(profile, "default") == 0)
            section = strdup("default");
        else if (asprintf(&section, "profile %s", profile) < 0)
            section = NULL;
        if (!section)
            return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        r = creds_from_shared_file(conf_path, section, "shared-config-file", &seen, out, err);
        if (r != 0)
            return r;
    }
    if (profile_named && !seen)
        return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                            "AWS profile \"%.64s\" is in neither %s nor %s", profile,
                            cred_path ? cred_path : "~/.aws/credentials",
                            conf_path ? conf_path : "~/.aws/config");

    r = creds_from_container(out, err);
    if (r != 0)
        return r;
    return creds_from_imds(out, err);
}

/* ---- the cache --------------------------------------------------------- */

struct sl_s3_cred_provider {
    pthread_mutex_t mu;
    bool explicit_keys;
    bool have;
    struct sl_s3_creds cached;
};

struct sl_s3_cred_provider *sl_s3_cred_provider_new(const char *access_key, const char *secret_key,
                                                    struct sl_error *err)
{
    bool has_ak = access_key && *access_key, has_sk = secret_key && *secret_key;
    if (has_ak != has_sk) {
        sl_error_set(
            err, SL_E_CONFIG, 0,
            "BLOBSTORE_ACCESS_KEY and BLOBSTORE_SECRET_KEY must be both set or both empty");
        return NULL;
    }
    struct sl_s3_cred_provider *p = calloc(1, sizeof(*p));
    if (!p) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    if (has_ak) {
        struct sl_s3_creds c = {.access_key = (char *)access_key,
                                .secret_key = (char *)secret_key,
                                .source = "explicit"};
        if (sl_s3_creds_copy(&p->cached, &c) < 0) {
            sl_s3_cred_provider_free(p);
            sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
            return NULL;
        }
        p->explicit_keys = p->have = true;
    }
    return p;
}

static bool refreshable_locked(const struct sl_s3_cred_provider *p)
{
    return !p->explicit_keys && p->have && p->cached.expires_at_us != 0;
}

bool sl_s3_cred_provider_refreshable(struct sl_s3_cred_provider *p)
{
    pthread_mutex_lock(&p->mu);
    bool r = refreshable_locked(p);
    pthread_mutex_unlock(&p->mu);
    return r;
}

const char *sl_s3_cred_provider_kind(const struct sl_s3_cred_provider *p)
{
    return p->explicit_keys ? "explicit" : "default-chain";
}

int sl_s3_cred_provider_get(struct sl_s3_cred_provider *p, bool force_refresh,
                            struct sl_s3_creds *out, struct sl_error *err)
{
    pthread_mutex_lock(&p->mu);
    int64_t now = sl_now_us();
    bool need = !p->have;
    /* Credentials without an expiry (keys, files, environment) are read
     * once; only temporary ones are fetched again. */
    if (refreshable_locked(p) &&
        (force_refresh ||
         now >= p->cached.expires_at_us - (int64_t)SL_S3_CREDS_REFRESH_MARGIN_S * 1000000))
        need = true;
    if (need) {
        struct sl_s3_creds fresh = {0};
        struct sl_error rerr = {0};
        int r = sl_s3_creds_resolve_chain(&fresh, &rerr);
        if (r > 0) {
            sl_s3_creds_clear(&p->cached);
            p->cached = fresh;
            p->have = true;
        } else {
            bool still_valid =
                p->have && (p->cached.expires_at_us == 0 || now < p->cached.expires_at_us);
            if (!still_valid) {
                pthread_mutex_unlock(&p->mu);
                if (r == 0)
                    return sl_error_set(err, SL_E_OBJECT_STORE_UNAVAILABLE, 0,
                                        "no AWS credentials: none in the environment, the shared "
                                        "credentials and config files, the container or the "
                                        "instance metadata endpoints");
                if (err)
                    *err = rerr;
                return -1;
            }
        }
    }
    int r = sl_s3_creds_copy(out, &p->cached);
    pthread_mutex_unlock(&p->mu);
    if (r < 0)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

void sl_s3_cred_provider_free(struct sl_s3_cred_provider *p)
{
    if (!p)
        return;
    sl_s3_creds_clear(&p->cached);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
