/* Unit tests of src/blobstore/: the AWS credential chain (pure parsing, the
 * environment and files, the container and instance metadata endpoints
 * against a fake metadata server in this process) and the S3 backend against
 * a real S3 server (s3rver behind a front that verifies SigV4 and payload
 * digests; tests/s3server/).
 *
 * Run: tests/s3server/run-with-s3rver.sh build/test_blobstore
 * The wrapper exports SANDLOOM_TEST_S3_ENDPOINT. Without it every S3 test
 * fails with the reason (they are never skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobstore/blobstore.h"
#include "blobstore/s3_creds.h"
#include "common/error.h"
#include "common/util.h"

#define MIB (1024ULL * 1024ULL)

static char tmp_root[64];
static const char *s3_endpoint;

/* ---- small helpers ---------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *tmp_path(const char *name)
{
    char *p = NULL;
    assert_true(asprintf(&p, "%s/%s", tmp_root, name) > 0);
    return p;
}

/* Write n pseudo-random bytes to path; their SHA-256 into sha. */
static void write_random_file(const char *path, size_t n, char sha[65])
{
    unsigned char *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    uint64_t x = 0x9e3779b97f4a7c15ULL ^ n;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    sl_sha256_hex(buf, n, sha);
    free(buf);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct sl_buf b;
    sl_buf_init(&b, SIZE_MAX);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        assert_int_equal(sl_buf_append(&b, chunk, n), 0);
    fclose(f);
    if (!b.data)
        b.data = calloc(1, 1);
    *len = b.len;
    return b.data;
}

static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static const char *const aws_vars[] = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_DISABLED",
};

/* A clean AWS environment: nothing set, HOME in the temp dir, and the
 * instance metadata service off (a test never talks to 169.254.169.254). */
static void clean_aws_env(void)
{
    for (size_t i = 0; i < sizeof(aws_vars) / sizeof(aws_vars[0]); i++)
        unsetenv(aws_vars[i]);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

/* ---- a fake metadata server (container + IMDSv2) ---------------------------- */

struct fake_md {
    int fd;
    int port;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    int token_puts, role_gets, cred_gets, container_gets;
    char access_key[64], secret_key[64], session_token[64];
    long expires_in_s;
    char expect_auth[64];
};

static struct fake_md md;

static void md_reply(int c, int status, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nContent-Type: text/plain\r\n"
                     "Connection: close\r\n\r\n",
                     status, strlen(body));
    (void)!write(c, head, (size_t)n);
    (void)!write(c, body, strlen(body));
}

static const char *md_header(const char *req, const char *name, char *out, size_t size)
{
    const char *p = req;
    size_t nl = strlen(name);
    while ((p = strstr(p, "\r\n")) != NULL) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t l = strcspn(v, "\r\n");
            if (l >= size)
                l = size - 1;
            memcpy(out, v, l);
            out[l] = '\0';
            return out;
        }
    }
    return NULL;
}

static void md_creds_json(char *out, size_t size)
{
    char iso[48];
    int64_t exp = (sl_now_us() / 1000000 + md.expires_in_s) * 1000000;
    sl_time_iso(exp, "Z", iso, sizeof(iso));
    snprintf(out, size,
             "{\"Code\": \"Success\", \"Type\": \"AWS-HMAC\", \"AccessKeyId\": \"%s\", "
             "\"SecretAccessKey\": \"%s\", \"Token\": \"%s\", \"Expiration\": \"%s\"}",
             md.access_key, md.secret_key, md.session_token, iso);
}

static void md_handle(int c)
{
    char req[8192];
    size_t len = 0;
    while (len < sizeof(req) - 1) {
        struct pollfd p = {.fd = c, .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0)
            break;
        ssize_t n = read(c, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[len] = '\0';
    char method[16] = "", path[512] = "", hv[256], body[1024];
    sscanf(req, "%15s %511s", method, path);
    pthread_mutex_lock(&md.mu);
    if (strcmp(method, "PUT") == 0 && strcmp(path, "/latest/api/token") == 0) {
        md.token_puts++;
        if (md_header(req, "X-aws-ec2-metadata-token-ttl-seconds", hv, sizeof(hv)))
            md_reply(c, 200, "imds-session-token");
        else
            md_reply(c, 400, "missing ttl");
    } else if (strncmp(path, "/latest/meta-data/iam/security-credentials/", 43) == 0) {
        const char *tok = md_header(req, "X-aws-ec2-metadata-token", hv, sizeof(hv));
        if (!tok || strcmp(tok, "imds-session-token") != 0) {
            md_reply(c, 401, "");
        } else if (path[43] == '\0') {
            md.role_gets++;
            md_reply(c, 200, "test-role\n");
        } else if (strcmp(path + 43, "test-role") == 0) {
            md.cred_gets++;
            md_creds_json(body, sizeof(body));
            md_reply(c, 200, body);
        } else {
            md_reply(c, 404, "");
        }
    } else if (strcmp(method, "GET") == 0 && strcmp(path, "/container-creds") == 0) {
        md.container_gets++;
        const char *auth = md_header(req, "Authorization", hv, sizeof(hv));
        if (md.expect_auth[0] && (!auth || strcmp(auth, md.expect_auth) != 0)) {
            md_reply(c, 403, "{\"message\": \"bad token\"}");
        } else {
            md_creds_json(body, sizeof(body));
            md_reply(c, 200, body);
        }
    } else {
        md_reply(c, 404, "");
    }
    pthread_mutex_unlock(&md.mu);
}

static void *md_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&md.stop)) {
        struct pollfd p = {.fd = md.fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept4(md.fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        md_handle(c);
        close(c);
    }
    return NULL;
}

static void md_start(void)
{
    memset(&md, 0, sizeof(md));
    pthread_mutex_init(&md.mu, NULL);
    md.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(md.fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(md.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(md.fd, 16), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(md.fd, (struct sockaddr *)&a, &al), 0);
    md.port = ntohs(a.sin_port);
    strcpy(md.access_key, "ASIAFAKEMETADATA");
    strcpy(md.secret_key, "fake-metadata-secret");
    strcpy(md.session_token, "fake-metadata-token");
    md.expires_in_s = 3600;
    assert_int_equal(pthread_create(&md.thread, NULL, md_main, NULL), 0);
}

static void md_stop(void)
{
    atomic_store(&md.stop, true);
    pthread_join(md.thread, NULL);
    close(md.fd);
    pthread_mutex_destroy(&md.mu);
}

static void md_set(const char *ak, const char *sk, const char *tok, long expires_in_s)
{
    pthread_mutex_lock(&md.mu);
    snprintf(md.access_key, sizeof(md.access_key), "%s", ak);
    snprintf(md.secret_key, sizeof(md.secret_key), "%s", sk);
    snprintf(md.session_token, sizeof(md.session_token), "%s", tok);
    md.expires_in_s = expires_in_s;
    pthread_mutex_unlock(&md.mu);
}

static int md_count(const int *counter)
{
    pthread_mutex_lock(&md.mu);
    int v = *counter;
    pthread_mutex_unlock(&md.mu);
    return v;
}

static void use_imds(void)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", md.port);
    unsetenv("AWS_EC2_METADATA_DISABLED");
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url, 1);
}

/* ---- credentials: parsing and the chain -------------------------------------- */

static const char ini_text[] = "# a comment\n"
                               "[default]\n"
                               "aws_access_key_id = AKIDEFAULT\n"
                               "aws_secret_access_key=secret/default+key\n"
                               "\n"
                               "; another comment\n"
                               "[  profile   dev ]\n"
                               "AWS_ACCESS_KEY_ID = AKIDEVCONFIG\n"
                               "aws_secret_access_key = dev-config-secret\n"
                               "s3 =\n"
                               "    aws_access_key_id = NESTEDNOTAKEY\n"
                               "[dev]\n"
                               "aws_access_key_id=AKIDEV\n"
                               "aws_secret_access_key =  dev secret with spaces  \n"
                               "aws_session_token = dev-token\n"
                               "[half]\n"
                               "aws_access_key_id = AKIHALF\n"
                               "[role-only]\n"
                               "role_arn = arn:aws:iam::123456789012:role/x\n"
                               "[dup]\n"
                               "aws_access_key_id = FIRST\n"
                               "aws_secret_access_key = first\n"
                               "[dup]\n"
                               "aws_access_key_id = SECOND\n";

static void creds_ini_parse(void **state)
{
    (void)state;
    struct sl_s3_creds c = {0};
    struct sl_error err = {0};
    bool seen = false;
    size_t len = strlen(ini_text);

    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "default", &seen, &c, &err), 1);
    assert_true(seen);
    assert_string_equal(c.access_key, "AKIDEFAULT");
    assert_string_equal(c.secret_key, "secret/default+key");
    assert_null(c.session_token);
    sl_s3_creds_clear(&c);

    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "dev", &seen, &c, &err), 1);
    assert_string_equal(c.access_key, "AKIDEV");
    assert_string_equal(c.secret_key, "dev secret with spaces");
    assert_string_equal(c.session_token, "dev-token");
    sl_s3_creds_clear(&c);

    /* Config-file syntax; the indented nested value is not a key. */
    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "profile dev", &seen, &c, &err), 1);
    assert_string_equal(c.access_key, "AKIDEVCONFIG");
    sl_s3_creds_clear(&c);

    /* A repeated section and key: the later value wins. */
    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "dup", &seen, &c, &err), 1);
    assert_string_equal(c.access_key, "SECOND");
    assert_string_equal(c.secret_key, "first");
    sl_s3_creds_clear(&c);

    seen = false;
    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "role-only", &seen, &c, &err), 0);
    assert_true(seen);
    seen = true;
    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "absent", &seen, &c, &err), 0);
    assert_false(seen);

    assert_int_equal(sl_s3_creds_parse_ini(ini_text, len, "half", &seen, &c, &err), -1);
    assert_non_null(strstr(err.message, "aws_access_key_id without aws_secret_access_key"));

    /* No trailing newline, CRLF line ends. */
    const char *crlf = "[default]\r\naws_access_key_id = A\r\naws_secret_access_key = B";
    assert_int_equal(sl_s3_creds_parse_ini(crlf, strlen(crlf), "default", &seen, &c, &err), 1);
    assert_string_equal(c.access_key, "A");
    assert_string_equal(c.secret_key, "B");
    sl_s3_creds_clear(&c);
}

static void creds_chain_order(void **state)
{
    (void)state;
    clean_aws_env();
    struct sl_s3_creds c = {0};
    struct sl_error err = {0};
    char *cred_file = tmp_path("credentials");
    char *conf_file = tmp_path("config");
    write_text(cred_file, "[default]\naws_access_key_id = FILEDEFAULT\naws_secret_access_key = f1\n"
                          "[dev]\naws_access_key_id = FILEDEV\naws_secret_access_key = f2\n");
    write_text(conf_file,
               "[default]\naws_access_key_id = CONFDEFAULT\naws_secret_access_key = c1\n"
               "[profile ops]\naws_access_key_id = CONFOPS\naws_secret_access_key = c2\n");

    /* Nothing anywhere. */
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 0);

    /* ~/.aws/credentials under HOME. */
    char *aws_dir = tmp_path(".aws");
    char *home_creds = tmp_path(".aws/credentials");
    mkdir(aws_dir, 0700);
    write_text(home_creds, "[default]\naws_access_key_id = HOMEKEY\naws_secret_access_key = h\n");
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.source, "shared-credentials-file");
    assert_string_equal(c.access_key, "HOMEKEY");
    sl_s3_creds_clear(&c);
    unlink(home_creds);

    /* The files named by the environment; credentials file before config. */
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred_file, 1);
    setenv("AWS_CONFIG_FILE", conf_file, 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.access_key, "FILEDEFAULT");
    assert_int_equal(c.expires_at_us, 0);
    sl_s3_creds_clear(&c);

    setenv("AWS_PROFILE", "dev", 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.access_key, "FILEDEV");
    sl_s3_creds_clear(&c);

    /* Only in the config file, as [profile ops]. */
    setenv("AWS_PROFILE", "ops", 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.source, "shared-config-file");
    assert_string_equal(c.access_key, "CONFOPS");
    sl_s3_creds_clear(&c);

    /* A named profile that exists nowhere is an error, not a fall-through. */
    setenv("AWS_PROFILE", "nope", 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), -1);
    assert_non_null(strstr(err.message, "\"nope\""));
    unsetenv("AWS_PROFILE");

    /* The environment beats the files. */
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_SESSION_TOKEN", "envtoken", 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.source, "environment");
    assert_string_equal(c.access_key, "ENVKEY");
    assert_string_equal(c.secret_key, "envsecret");
    assert_string_equal(c.session_token, "envtoken");
    sl_s3_creds_clear(&c);

    /* Half of the pair is an error. */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), -1);
    assert_non_null(strstr(err.message, "AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY"));

    clean_aws_env();
    free(cred_file);
    free(conf_file);
    free(aws_dir);
    free(home_creds);
}

static void creds_container_endpoint(void **state)
{
    (void)state;
    clean_aws_env();
    struct sl_s3_creds c = {0};
    struct sl_error err = {0};
    char url[256];

    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc", 1);
    assert_int_equal(sl_s3_container_url(url, sizeof(url), &err), 1);
    assert_string_equal(url, "http://169.254.170.2/v2/credentials/abc");
    unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");

    /* Plain http only to loopback or the agents; refused before any traffic. */
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds", 1);
    assert_int_equal(sl_s3_container_url(url, sizeof(url), &err), -1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), -1);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "https://example.com/creds", 1);
    assert_int_equal(sl_s3_container_url(url, sizeof(url), &err), 1);

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/container-creds", md.port);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    strcpy(md.expect_auth, "Bearer container-secret");
    md_set("ASIACONTAINER", "container-secret-key", "container-token", 3600);

    /* Wrong token: the endpoint refuses, and the chain says so. */
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer wrong", 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), -1);
    assert_non_null(strstr(sl_error_text(&err), "HTTP 403"));

    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer container-secret", 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.source, "container");
    assert_string_equal(c.access_key, "ASIACONTAINER");
    assert_string_equal(c.secret_key, "container-secret-key");
    assert_string_equal(c.session_token, "container-token");
    int64_t left = c.expires_at_us - sl_now_us();
    assert_true(left > 3500LL * 1000000 && left <= 3600LL * 1000000);
    sl_s3_creds_clear(&c);

    /* The token file wins over the variable (EKS Pod Identity). */
    char *tok_file = tmp_path("container-token");
    write_text(tok_file, "Bearer container-secret\n");
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer wrong", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tok_file, 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    sl_s3_creds_clear(&c);

    /* A token with a line break would inject headers. */
    write_text(tok_file, "Bearer x\r\nX-Injected: 1");
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), -1);

    md.expect_auth[0] = '\0';
    free(tok_file);
    clean_aws_env();
}

static void creds_instance_metadata(void **state)
{
    (void)state;
    clean_aws_env();
    struct sl_s3_creds c = {0};
    struct sl_error err = {0};
    md_set("ASIAINSTANCE", "instance-secret", "instance-token", 3600);

    /* Disabled: the fake server is never asked. */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", md.port);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url, 1);
    int puts_before = md_count(&md.token_puts);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 0);
    assert_int_equal(md_count(&md.token_puts), puts_before);

    use_imds();
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.source, "instance-metadata");
    assert_string_equal(c.access_key, "ASIAINSTANCE");
    assert_string_equal(c.session_token, "instance-token");
    assert_true(c.expires_at_us > sl_now_us());
    assert_int_equal(md_count(&md.token_puts), puts_before + 1);
    sl_s3_creds_clear(&c);

    /* The files come before the metadata service. */
    char *cred_file = tmp_path("credentials-imds");
    write_text(cred_file, "[default]\naws_access_key_id = FILEFIRST\naws_secret_access_key = f\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred_file, 1);
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 1);
    assert_string_equal(c.access_key, "FILEFIRST");
    sl_s3_creds_clear(&c);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");

    /* No metadata service listening: nothing found, quickly. */
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
    int64_t t0 = sl_mono_us();
    assert_int_equal(sl_s3_creds_resolve_chain(&c, &err), 0);
    assert_true(sl_mono_us() - t0 < 3000000);
    free(cred_file);
    clean_aws_env();
}

static void creds_provider_refresh(void **state)
{
    (void)state;
    clean_aws_env();
    use_imds();
    struct sl_error err = {0};
    struct sl_s3_creds c = {0};

    assert_null(sl_s3_cred_provider_new("AKONLY", NULL, &err));
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_null(sl_s3_cred_provider_new("", "secretonly", &err));

    struct sl_s3_cred_provider *p = sl_s3_cred_provider_new("AKEXPLICIT", "sk", &err);
    assert_non_null(p);
    assert_string_equal(sl_s3_cred_provider_kind(p), "explicit");
    int gets = md_count(&md.cred_gets);
    assert_int_equal(sl_s3_cred_provider_get(p, true, &c, &err), 0);
    assert_string_equal(c.access_key, "AKEXPLICIT");
    assert_string_equal(c.source, "explicit");
    assert_false(sl_s3_cred_provider_refreshable(p));
    assert_int_equal(md_count(&md.cred_gets), gets);
    sl_s3_creds_clear(&c);
    sl_s3_cred_provider_free(p);

    p = sl_s3_cred_provider_new(NULL, NULL, &err);
    assert_non_null(p);
    assert_string_equal(sl_s3_cred_provider_kind(p), "default-chain");

    /* Expiring within the refresh margin: fetched again on every use. */
    md_set("ASIAONE", "s1", "t1", 60);
    assert_int_equal(sl_s3_cred_provider_get(p, false, &c, &err), 0);
    assert_string_equal(c.access_key, "ASIAONE");
    sl_s3_creds_clear(&c);
    assert_int_equal(md_count(&md.cred_gets), gets + 1);
    md_set("ASIATWO", "s2", "t2", 3600);
    assert_int_equal(sl_s3_cred_provider_get(p, false, &c, &err), 0);
    assert_string_equal(c.access_key, "ASIATWO");
    sl_s3_creds_clear(&c);
    assert_int_equal(md_count(&md.cred_gets), gets + 2);
    assert_true(sl_s3_cred_provider_refreshable(p));

    /* Valid for an hour: cached. */
    md_set("ASIATHREE", "s3", "t3", 3600);
    assert_int_equal(sl_s3_cred_provider_get(p, false, &c, &err), 0);
    assert_string_equal(c.access_key, "ASIATWO");
    sl_s3_creds_clear(&c);
    assert_int_equal(md_count(&md.cred_gets), gets + 2);

    /* Forced (the store said ExpiredToken). */
    assert_int_equal(sl_s3_cred_provider_get(p, true, &c, &err), 0);
    assert_string_equal(c.access_key, "ASIATHREE");
    sl_s3_creds_clear(&c);
    assert_int_equal(md_count(&md.cred_gets), gets + 3);

    /* The service goes away: still-valid credentials are kept. */
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
    assert_int_equal(sl_s3_cred_provider_get(p, true, &c, &err), 0);
    assert_string_equal(c.access_key, "ASIATHREE");
    sl_s3_creds_clear(&c);
    sl_s3_cred_provider_free(p);

    /* Nothing in the chain: a clear error. */
    clean_aws_env();
    p = sl_s3_cred_provider_new(NULL, NULL, &err);
    assert_int_equal(sl_s3_cred_provider_get(p, false, &c, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.message, "no AWS credentials"));
    sl_s3_cred_provider_free(p);
}

/* ---- the S3 server's test controls ------------------------------------------- */

static size_t ctl_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    return sl_buf_append(ud, ptr, size * nmemb) < 0 ? 0 : size * nmemb;
}

static long ctl(const char *method, const char *path, struct sl_buf *out)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", s3_endpoint, path);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct sl_buf ignored;
    sl_buf_init(&ignored, 1 << 20);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ctl_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out ? out : &ignored);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    sl_buf_free(&ignored);
    return status;
}

static void ctl_reset(void)
{
    assert_int_equal(ctl("POST", "/__s3test/reset", NULL), 204);
}

static void ctl_fail(int count, int status, const char *code, const char *match)
{
    char path[256];
    snprintf(path, sizeof(path), "/__s3test/fail?count=%d&status=%d%s%s%s%s", count, status,
             code ? "&code=" : "", code ? code : "", match ? "&match=" : "", match ? match : "");
    assert_int_equal(ctl("POST", path, NULL), 204);
}

/* The requests the server saw, as a JSON array (decref it). */
static json_t *ctl_log(void)
{
    struct sl_buf b;
    sl_buf_init(&b, 64 << 20);
    assert_int_equal(ctl("GET", "/__s3test/log", &b), 200);
    json_t *log = json_loads(b.data, 0, NULL);
    sl_buf_free(&b);
    assert_true(json_is_array(log));
    return log;
}

/* How many logged requests have this method and contain the substrings
 * (NULL = any) in their path and query. */
static int log_count(json_t *log, const char *method, const char *path_part, const char *query_part)
{
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(log, i, e)
    {
        const char *m = json_string_value(json_object_get(e, "method"));
        const char *p = json_string_value(json_object_get(e, "path"));
        const char *q = json_string_value(json_object_get(e, "query"));
        if (method && strcmp(m, method) != 0)
            continue;
        if (path_part && !strstr(p, path_part))
            continue;
        if (query_part && !strstr(q, query_part))
            continue;
        n++;
    }
    return n;
}

/* ---- the S3 backend --------------------------------------------------------------- */

static void need_s3(void)
{
    if (!s3_endpoint)
        fail_msg("SANDLOOM_TEST_S3_ENDPOINT is not set: this test needs the S3 server that "
                 "tests/s3server/run-with-s3rver.sh starts (run it as "
                 "tests/s3server/run-with-s3rver.sh BUILD/test_blobstore)");
}

static void unique_bucket(char *out, size_t size, const char *tag)
{
    char r[9];
    assert_int_equal(sl_random_hex(r, 4), 0);
    snprintf(out, size, "sl-%s-%s", tag, r);
}

static void base_options(struct sl_s3_options *o, const char *bucket)
{
    sl_s3_options_init(o);
    o->endpoint = s3_endpoint;
    o->bucket = bucket;
    o->base_prefix = "agent-sandbox/";
    o->access_key = "S3RVER";
    o->secret_key = "S3RVER";
    o->retry_base_ms = 10;
    o->connect_timeout_ms = 2000;
    o->stall_timeout_ms = 10000;
}

static struct sl_blobstore *open_bucket(const char *tag, char *bucket, size_t size)
{
    need_s3();
    unique_bucket(bucket, size, tag);
    struct sl_s3_options o;
    base_options(&o, bucket);
    struct sl_error err = {0};
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    if (!bs)
        fail_msg("open: %s", sl_error_text(&err));
    int r = bs->ops->ensure_bucket(bs, &err);
    if (r < 0)
        fail_msg("ensure_bucket: %s", sl_error_text(&err));
    return bs;
}

static void s3_open_validation(void **state)
{
    (void)state;
    struct sl_s3_options o;
    struct sl_error err = {0};

    sl_s3_options_init(&o);
    assert_true(o.path_style);
    assert_int_equal(o.max_attempts, 5);
    assert_int_equal(o.multipart_threshold, 64 * MIB);
    assert_int_equal(o.part_size, 16 * MIB);

    o.bucket = "my-bucket";
    o.access_key = "AKONLY";
    assert_null(sl_blobstore_s3_open(&o, &err));
    assert_string_equal(err.code, SL_E_CONFIG);
    assert_non_null(strstr(err.message, "both set or both empty"));

    o.access_key = NULL;
    o.bucket = NULL;
    assert_null(sl_blobstore_s3_open(&o, &err));
    assert_string_equal(err.code, SL_E_CONFIG);

    o.bucket = "my-bucket";
    o.endpoint = "ftp://example.com";
    assert_null(sl_blobstore_s3_open(&o, &err));
    o.endpoint = "not a url";
    assert_null(sl_blobstore_s3_open(&o, &err));
    o.endpoint = "http://127.0.0.1:9000";
    o.path_style = false;
    assert_null(sl_blobstore_s3_open(&o, &err));
    assert_non_null(strstr(err.message, "DNS name"));
    o.endpoint = "http://s3.localhost:9000";
    o.bucket = "Bad_Name";
    assert_null(sl_blobstore_s3_open(&o, &err));
    o.path_style = true;
    o.region = "us-east-1:evil";
    assert_null(sl_blobstore_s3_open(&o, &err));

    /* Defaults: the AWS endpoint of the region, the chain, path-style. */
    sl_s3_options_init(&o);
    o.bucket = "my-bucket";
    o.region = "eu-west-3";
    o.base_prefix = "agent-sandbox/";
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_string_equal(bs->backend, "s3");
    assert_string_equal(bs->ops->describe(bs),
                        "s3 endpoint=https://s3.eu-west-3.amazonaws.com bucket=my-bucket "
                        "prefix=agent-sandbox/ region=eu-west-3 addressing=path "
                        "credentials=default-chain");
    bs->ops->close(bs);

    o.endpoint = "http://s3.localhost:9000/";
    o.path_style = false;
    o.access_key = "AK";
    o.secret_key = "SK";
    o.base_prefix = "";
    bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_string_equal(bs->ops->describe(bs),
                        "s3 endpoint=http://s3.localhost:9000 bucket=my-bucket prefix=\"\" "
                        "region=eu-west-3 addressing=virtual-hosted credentials=explicit");
    assert_null(strstr(bs->ops->describe(bs), "SK"));
    bs->ops->close(bs);
}

static void s3_ensure_bucket(void **state)
{
    (void)state;
    need_s3();
    ctl_reset();
    char bucket[64];
    unique_bucket(bucket, sizeof(bucket), "ensure");
    struct sl_s3_options o;
    base_options(&o, bucket);
    struct sl_error err = {0};
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), 1);
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), 0);
    json_t *log = ctl_log();
    char path[80];
    snprintf(path, sizeof(path), "/%s", bucket);
    assert_int_equal(log_count(log, "HEAD", path, NULL), 2);
    assert_int_equal(log_count(log, "PUT", path, NULL), 1);
    /* us-east-1: no LocationConstraint. */
    size_t i;
    json_t *e;
    json_array_foreach(log, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "method")), "PUT") == 0)
            assert_int_equal(json_integer_value(json_object_get(e, "length")), 0);
    }
    json_decref(log);
    bs->ops->close(bs);

    /* Another region: the constraint is sent. */
    ctl_reset();
    unique_bucket(bucket, sizeof(bucket), "region");
    base_options(&o, bucket);
    o.region = "eu-west-1";
    bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), 1);
    log = ctl_log();
    bool found = false;
    json_array_foreach(log, i, e)
    {
        const char *body = json_string_value(json_object_get(e, "body"));
        if (body && strstr(body, "<LocationConstraint>eu-west-1</LocationConstraint>"))
            found = true;
    }
    assert_true(found);
    json_decref(log);
    bs->ops->close(bs);

    /* A bucket that cannot be created: reported, not fatal. */
    base_options(&o, "no");
    bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_string_equal(err.message, "object store unavailable");
    assert_non_null(strstr(err.detail, "CreateBucket s3://no/"));
    assert_non_null(strstr(err.detail, "InvalidBucketName"));
    bs->ops->close(bs);
}

static void s3_buffer_roundtrip(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *bs = open_bucket("buf", bucket, sizeof(bucket));
    ctl_reset();
    struct sl_error err = {0};
    const char doc[] = "{\"templates\": []}";
    assert_int_equal(bs->ops->put_buffer(bs, "templates/catalog.json", doc, strlen(doc), &err), 0);
    assert_int_equal(bs->ops->exists(bs, "templates/catalog.json", &err), 1);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(bs->ops->get_buffer(bs, "templates/catalog.json", 1024, &out, &len, &err), 1);
    assert_int_equal(len, strlen(doc));
    assert_memory_equal(out, doc, len);
    assert_int_equal(out[len], '\0');
    free(out);

    /* The base prefix is in the key on the wire. */
    json_t *log = ctl_log();
    char path[128];
    snprintf(path, sizeof(path), "/%s/agent-sandbox/templates/catalog.json", bucket);
    assert_int_equal(log_count(log, "PUT", path, NULL), 1);
    assert_int_equal(log_count(log, "GET", path, NULL), 1);
    json_decref(log);

    /* Over the caller's bound. */
    assert_int_equal(bs->ops->get_buffer(bs, "templates/catalog.json", 5, &out, &len, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_TOO_LARGE);

    /* Empty object; binary content with NUL bytes; overwrite. */
    assert_int_equal(bs->ops->put_buffer(bs, "empty", "", 0, &err), 0);
    assert_int_equal(bs->ops->get_buffer(bs, "empty", 10, &out, &len, &err), 1);
    assert_int_equal(len, 0);
    assert_string_equal(out, "");
    free(out);
    const char bin[] = {'a', '\0', 'b', '\n', (char)0xff};
    assert_int_equal(bs->ops->put_buffer(bs, "empty", bin, sizeof(bin), &err), 0);
    assert_int_equal(bs->ops->get_buffer(bs, "empty", 10, &out, &len, &err), 1);
    assert_int_equal(len, sizeof(bin));
    assert_memory_equal(out, bin, sizeof(bin));
    free(out);

    /* Keys that need encoding: signed exactly as sent. */
    const char *odd = "checkpoints/sb 1/a+b=c~d(1)!'*,;$@&:.tar.gz";
    assert_int_equal(bs->ops->put_buffer(bs, odd, "x", 1, &err), 0);
    assert_int_equal(bs->ops->get_buffer(bs, odd, 10, &out, &len, &err), 1);
    assert_memory_equal(out, "x", 1);
    free(out);
    const char *utf8 = "templates/caf\xc3\xa9/\xe2\x9c\x93.json";
    assert_int_equal(bs->ops->put_buffer(bs, utf8, "y", 1, &err), 0);
    assert_int_equal(bs->ops->exists(bs, utf8, &err), 1);

    /* Keys are checked before anything is sent. */
    const char *bad[] = {"", "/abs", "a//b", "a/../b", "./a", "a/.", "tab\there"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(bs->ops->put_buffer(bs, bad[i], "z", 1, &err), -1);
        assert_string_equal(err.code, SL_E_INTERNAL);
    }
    bs->ops->close(bs);
}

static void s3_missing_and_delete(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *bs = open_bucket("missing", bucket, sizeof(bucket));
    struct sl_error err = {0};
    char *out = (char *)"untouched";
    size_t len = 7;
    assert_int_equal(bs->ops->get_buffer(bs, "nope.json", 100, &out, &len, &err), 0);
    assert_string_equal(out, "untouched");
    assert_int_equal(bs->ops->exists(bs, "nope.json", &err), 0);
    char *dest = tmp_path("missing-dest");
    write_text(dest, "keep me");
    assert_int_equal(bs->ops->get_file(bs, "nope.tar.gz", dest, NULL, 0, &err), 0);
    size_t dl = 0;
    char *kept = read_all(dest, &dl);
    assert_string_equal(kept, "keep me");
    free(kept);
    assert_int_equal(bs->ops->delete (bs, "nope.json", &err), 0);

    assert_int_equal(bs->ops->put_buffer(bs, "checkpoints/x/dormant/manifest.json", "{}", 2, &err),
                     0);
    assert_int_equal(bs->ops->exists(bs, "checkpoints/x/dormant/manifest.json", &err), 1);
    assert_int_equal(bs->ops->delete (bs, "checkpoints/x/dormant/manifest.json", &err), 0);
    assert_int_equal(bs->ops->exists(bs, "checkpoints/x/dormant/manifest.json", &err), 0);
    assert_int_equal(
        bs->ops->get_buffer(bs, "checkpoints/x/dormant/manifest.json", 10, &out, &len, &err), 0);
    bs->ops->close(bs);

    /* A bucket that does not exist is not "absent": it is an error. */
    struct sl_s3_options o;
    char ghost[64];
    unique_bucket(ghost, sizeof(ghost), "ghost");
    base_options(&o, ghost);
    bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_int_equal(bs->ops->get_buffer(bs, "a", 10, &out, &len, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "NoSuchBucket"));
    assert_non_null(strstr(err.detail, ghost));
    assert_non_null(strstr(err.detail, s3_endpoint));
    assert_int_equal(bs->ops->exists(bs, "a", &err), -1);
    assert_non_null(strstr(err.detail, "NoSuchBucket"));
    assert_int_equal(bs->ops->get_file(bs, "a", dest, NULL, 0, &err), -1);
    assert_int_equal(bs->ops->put_buffer(bs, "a", "x", 1, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    bs->ops->close(bs);
    unlink(dest);
    free(dest);
}

static void s3_file_roundtrip(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *bs = open_bucket("file", bucket, sizeof(bucket));
    struct sl_error err = {0};
    char sha[65];
    char *src = tmp_path("upload.bin");
    write_random_file(src, 1536 * 1024 + 7, sha);
    char key[128];
    snprintf(key, sizeof(key), "templates/py/sha256-%s.tar.gz", sha);

    /* Digest computed here, then the caller's digest. */
    assert_int_equal(bs->ops->put_file(bs, key, src, NULL, &err), 0);
    assert_int_equal(bs->ops->put_file(bs, key, src, sha, &err), 0);

    char *dldir = tmp_path("dl");
    mkdir(dldir, 0700);
    char *dest = tmp_path("dl/archive.tar.gz");
    assert_int_equal(bs->ops->get_file(bs, key, dest, sha, 0, &err), 1);
    size_t a_len = 0, b_len = 0;
    char *a = read_all(src, &a_len), *b = read_all(dest, &b_len);
    assert_int_equal(a_len, b_len);
    assert_memory_equal(a, b, a_len);
    free(a);
    free(b);
    assert_int_equal(count_entries(dldir), 1);

    /* Without an expected digest; upper-case digests are accepted. */
    char upper[65];
    for (int i = 0; i < 65; i++)
        upper[i] = (char)toupper((unsigned char)sha[i]);
    unlink(dest);
    assert_int_equal(bs->ops->get_file(bs, key, dest, upper, 0, &err), 1);
    unlink(dest);
    assert_int_equal(bs->ops->get_file(bs, key, dest, NULL, 0, &err), 1);

    /* A wrong expected digest: refused, both digests named, nothing left. */
    unlink(dest);
    const char *wrong = "0000000000000000000000000000000000000000000000000000000000000000";
    assert_int_equal(bs->ops->get_file(bs, key, dest, wrong, 0, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_DIGEST_MISMATCH);
    assert_non_null(strstr(err.message, wrong));
    assert_non_null(strstr(err.message, sha));
    assert_int_equal(access(dest, F_OK), -1);
    assert_int_equal(count_entries(dldir), 0);

    /* An existing destination is only replaced after verification. */
    write_text(dest, "old");
    assert_int_equal(bs->ops->get_file(bs, key, dest, wrong, 0, &err), -1);
    size_t ol = 0;
    char *old = read_all(dest, &ol);
    assert_string_equal(old, "old");
    free(old);

    /* Over the caller's bound. */
    assert_int_equal(bs->ops->get_file(bs, key, dest, sha, 1024, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_TOO_LARGE);
    assert_int_equal(count_entries(dldir), 1);

    /* The store checks the bytes against the caller's digest. */
    assert_int_equal(bs->ops->put_file(bs, "templates/lie.tar.gz", src, wrong, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_DIGEST_MISMATCH);
    assert_non_null(strstr(err.detail, "XAmzContentSHA256Mismatch"));
    assert_int_equal(bs->ops->exists(bs, "templates/lie.tar.gz", &err), 0);

    /* Local failures are not the store's. */
    assert_int_equal(bs->ops->put_file(bs, "x", "/nonexistent/file", NULL, &err), -1);
    assert_string_equal(err.code, SL_E_INTERNAL);
    assert_int_equal(bs->ops->put_file(bs, "x", tmp_root, NULL, &err), -1);
    assert_int_equal(bs->ops->put_file(bs, "x", src, "nothex", &err), -1);

    bs->ops->close(bs);
    unlink(dest);
    unlink(src);
    free(dest);
    free(dldir);
    free(src);
}

static void s3_multipart(void **state)
{
    (void)state;
    need_s3();
    char bucket[64];
    unique_bucket(bucket, sizeof(bucket), "multi");
    struct sl_s3_options o;
    base_options(&o, bucket);
    o.multipart_threshold = 6 * MIB;
    o.part_size = 5 * MIB;
    struct sl_error err = {0};
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), 1);

    char sha[65];
    char *src = tmp_path("big.bin");
    write_random_file(src, 12 * MIB + 12345, sha);
    ctl_reset();
    assert_int_equal(bs->ops->put_file(bs, "templates/big.tar.gz", src, sha, &err), 0);
    json_t *log = ctl_log();
    assert_int_equal(log_count(log, "POST", "big.tar.gz", "uploads="), 1);
    assert_int_equal(log_count(log, "PUT", "big.tar.gz", "partNumber="), 3);
    assert_int_equal(log_count(log, "PUT", "big.tar.gz", "partNumber=3&uploadId="), 1);
    assert_int_equal(log_count(log, "POST", "big.tar.gz", "uploadId="), 1);
    assert_int_equal(log_count(log, "PUT", "big.tar.gz", ""), 3); /* no single PUT */
    json_decref(log);

    char *dest = tmp_path("big.out");
    assert_int_equal(bs->ops->get_file(bs, "templates/big.tar.gz", dest, sha, 0, &err), 1);
    size_t al = 0, bl = 0;
    char *a = read_all(src, &al), *b = read_all(dest, &bl);
    assert_int_equal(al, bl);
    assert_memory_equal(a, b, al);
    free(a);
    free(b);

    /* Without the caller's digest too. */
    assert_int_equal(bs->ops->put_file(bs, "templates/big2.tar.gz", src, NULL, &err), 0);
    unlink(dest);
    assert_int_equal(bs->ops->get_file(bs, "templates/big2.tar.gz", dest, sha, 0, &err), 1);

    /* A part refused (4xx): the upload is aborted, the error reported. */
    ctl_reset();
    ctl_fail(1, 400, "InvalidPart", "partNumber=2");
    assert_int_equal(bs->ops->put_file(bs, "templates/broken.tar.gz", src, sha, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "part 2 of 3"));
    assert_non_null(strstr(err.detail, "InvalidPart"));
    log = ctl_log();
    assert_int_equal(log_count(log, "DELETE", "broken.tar.gz", "uploadId="), 1);
    assert_int_equal(log_count(log, "POST", "broken.tar.gz", "uploadId="), 0);
    json_decref(log);
    assert_int_equal(bs->ops->exists(bs, "templates/broken.tar.gz", &err), 0);

    /* The file is not what the caller said: aborted before completion. */
    ctl_reset();
    const char *wrong = "1111111111111111111111111111111111111111111111111111111111111111";
    assert_int_equal(bs->ops->put_file(bs, "templates/lie.tar.gz", src, wrong, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_DIGEST_MISMATCH);
    log = ctl_log();
    assert_int_equal(log_count(log, "DELETE", "lie.tar.gz", "uploadId="), 1);
    assert_int_equal(log_count(log, "POST", "lie.tar.gz", "uploadId="), 0);
    json_decref(log);

    /* A part that fails once with 503 is retried; the upload completes. */
    ctl_reset();
    ctl_fail(1, 503, NULL, "partNumber=1");
    assert_int_equal(bs->ops->put_file(bs, "templates/retry.tar.gz", src, sha, &err), 0);
    log = ctl_log();
    assert_int_equal(log_count(log, "PUT", "retry.tar.gz", "partNumber=1&"), 2);
    json_decref(log);

    bs->ops->close(bs);
    unlink(src);
    unlink(dest);
    free(src);
    free(dest);
}

static void s3_retries(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *bs = open_bucket("retry", bucket, sizeof(bucket));
    struct sl_error err = {0};
    json_t *log;

    /* 503 twice, then success. */
    ctl_reset();
    ctl_fail(2, 503, NULL, "PUT");
    assert_int_equal(bs->ops->put_buffer(bs, "a.json", "1", 1, &err), 0);
    log = ctl_log();
    assert_int_equal(log_count(log, "PUT", "/a.json", NULL), 3);
    json_decref(log);

    /* A dropped connection, then success. */
    ctl_reset();
    ctl_fail(1, 0, NULL, "GET");
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(bs->ops->get_buffer(bs, "a.json", 10, &out, &len, &err), 1);
    free(out);
    log = ctl_log();
    assert_int_equal(log_count(log, "GET", "/a.json", NULL), 2);
    json_decref(log);

    /* 429 is retried too. */
    ctl_reset();
    ctl_fail(1, 429, "SlowDown", "HEAD");
    assert_int_equal(bs->ops->exists(bs, "a.json", &err), 1);

    /* 4xx is not retried. */
    ctl_reset();
    ctl_fail(1, 400, "InvalidRequest", "PUT");
    assert_int_equal(bs->ops->put_buffer(bs, "b.json", "1", 1, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "HTTP 400 InvalidRequest"));
    assert_non_null(strstr(err.detail, "after 1 attempt"));
    log = ctl_log();
    assert_int_equal(log_count(log, "PUT", "/b.json", NULL), 1);
    json_decref(log);

    /* 5xx every time: all five attempts, then the error. */
    ctl_reset();
    ctl_fail(100, 500, NULL, "PUT");
    int64_t t0 = sl_mono_us();
    assert_int_equal(bs->ops->put_buffer(bs, "c.json", "1", 1, &err), -1);
    int64_t took = sl_mono_us() - t0;
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "HTTP 500 InternalError"));
    assert_non_null(strstr(err.detail, "after 5 attempts"));
    assert_non_null(strstr(err.detail, bucket));
    log = ctl_log();
    assert_int_equal(log_count(log, "PUT", "/c.json", NULL), 5);
    json_decref(log);
    /* Backoff 10 ms base: at least 5+10+20+40 ms of waiting. */
    assert_true(took >= 75000);
    ctl_reset();
    bs->ops->close(bs);
}

static void s3_bad_credentials(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *good = open_bucket("creds", bucket, sizeof(bucket));
    struct sl_error err = {0};
    assert_int_equal(good->ops->put_buffer(good, "k", "v", 1, &err), 0);
    good->ops->close(good);

    struct sl_s3_options o;
    base_options(&o, bucket);
    o.secret_key = "NOT-THE-SECRET";
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    ctl_reset();
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(bs->ops->get_buffer(bs, "k", 10, &out, &len, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_string_equal(err.message, "object store unavailable");
    assert_non_null(strstr(err.detail, "HTTP 403 SignatureDoesNotMatch"));
    assert_null(strstr(err.detail, "NOT-THE-SECRET"));
    assert_int_equal(bs->ops->exists(bs, "k", &err), -1);
    assert_non_null(strstr(err.detail, "HTTP 403"));
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    json_t *log = ctl_log();
    assert_int_equal(log_count(log, "GET", "/k", NULL), 1); /* not retried */
    json_decref(log);
    bs->ops->close(bs);

    o.access_key = "NOSUCHKEY";
    bs = sl_blobstore_s3_open(&o, &err);
    assert_int_equal(bs->ops->put_buffer(bs, "k", "v", 1, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "InvalidAccessKeyId"));
    bs->ops->close(bs);
}

static void s3_dead_endpoint(void **state)
{
    (void)state;
    /* A port nobody listens on: bound, then closed. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));

    struct sl_s3_options o;
    sl_s3_options_init(&o);
    o.endpoint = endpoint;
    o.bucket = "dead-bucket";
    o.access_key = "S3RVER";
    o.secret_key = "S3RVER";
    o.max_attempts = 3;
    o.retry_base_ms = 20;
    o.connect_timeout_ms = 500;
    struct sl_error err = {0};
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    int64_t t0 = sl_mono_us();
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), -1);
    assert_true(sl_mono_us() - t0 < 5000000);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "after 3 attempts"));
    assert_non_null(strstr(err.detail, endpoint));
    assert_non_null(strstr(err.detail, "dead-bucket"));
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(bs->ops->get_buffer(bs, "x", 10, &out, &len, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_int_equal(bs->ops->exists(bs, "x", &err), -1);
    bs->ops->close(bs);
}

static void s3_virtual_hosted(void **state)
{
    (void)state;
    need_s3();
    const char *port = strrchr(s3_endpoint, ':');
    assert_non_null(port);
    char endpoint[128];
    /* libcurl resolves *.localhost to the loopback itself. */
    snprintf(endpoint, sizeof(endpoint), "http://s3.localhost%s", port);
    char bucket[64];
    unique_bucket(bucket, sizeof(bucket), "vhost");
    struct sl_s3_options o;
    base_options(&o, bucket);
    o.endpoint = endpoint;
    o.path_style = false;
    struct sl_error err = {0};
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    ctl_reset();
    assert_int_equal(bs->ops->ensure_bucket(bs, &err), 1);
    assert_int_equal(bs->ops->put_buffer(bs, "templates/catalog.json", "{}", 2, &err), 0);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(bs->ops->get_buffer(bs, "templates/catalog.json", 10, &out, &len, &err), 1);
    assert_memory_equal(out, "{}", 2);
    free(out);
    assert_int_equal(bs->ops->exists(bs, "absent", &err), 0);

    char host[128];
    snprintf(host, sizeof(host), "%s.s3.localhost%s", bucket, port);
    json_t *log = ctl_log();
    size_t i;
    json_t *e;
    int seen = 0;
    json_array_foreach(log, i, e)
    {
        assert_string_equal(json_string_value(json_object_get(e, "host")), host);
        assert_null(strstr(json_string_value(json_object_get(e, "path")), bucket));
        seen++;
    }
    assert_true(seen >= 5);
    json_decref(log);
    bs->ops->close(bs);

    /* Path-style through the same host name: the bucket is in the path. */
    base_options(&o, bucket);
    o.endpoint = endpoint;
    bs = sl_blobstore_s3_open(&o, &err);
    assert_int_equal(bs->ops->get_buffer(bs, "templates/catalog.json", 10, &out, &len, &err), 1);
    free(out);
    bs->ops->close(bs);
}

static void s3_chain_credentials(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *admin = open_bucket("chain", bucket, sizeof(bucket));
    admin->ops->close(admin);
    struct sl_s3_options o;
    struct sl_error err = {0};

    /* Temporary credentials from the environment: the session token is
     * sent (and signed). */
    clean_aws_env();
    setenv("AWS_ACCESS_KEY_ID", "ASIATESTTEMPORARY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "test-temporary-secret", 1);
    setenv("AWS_SESSION_TOKEN", "test-session-token", 1);
    base_options(&o, bucket);
    o.access_key = o.secret_key = NULL;
    struct sl_blobstore *bs = sl_blobstore_s3_open(&o, &err);
    assert_non_null(bs);
    assert_non_null(strstr(bs->ops->describe(bs), "credentials=default-chain"));
    ctl_reset();
    assert_int_equal(bs->ops->put_buffer(bs, "env.json", "e", 1, &err), 0);
    json_t *log = ctl_log();
    json_t *last = json_array_get(log, json_array_size(log) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "security_token")),
                        "test-session-token");
    json_decref(log);
    bs->ops->close(bs);

    /* The same key without its token is refused by the store. */
    unsetenv("AWS_SESSION_TOKEN");
    bs = sl_blobstore_s3_open(&o, &err);
    assert_int_equal(bs->ops->put_buffer(bs, "env.json", "e", 1, &err), -1);
    assert_non_null(strstr(err.detail, "InvalidToken"));
    bs->ops->close(bs);

    /* No credentials anywhere: a clear error, no request. */
    clean_aws_env();
    bs = sl_blobstore_s3_open(&o, &err);
    ctl_reset();
    assert_int_equal(bs->ops->put_buffer(bs, "none.json", "e", 1, &err), -1);
    assert_string_equal(err.code, SL_E_OBJECT_STORE_UNAVAILABLE);
    assert_non_null(strstr(err.detail, "no AWS credentials"));
    log = ctl_log();
    assert_int_equal(json_array_size(log), 0);
    json_decref(log);
    bs->ops->close(bs);

    /* From the container endpoint, and refreshed after ExpiredToken. */
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/container-creds", md.port);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    md_set("ASIATESTTEMPORARY", "test-temporary-secret", "test-session-token", 3600);
    bs = sl_blobstore_s3_open(&o, &err);
    int before = md_count(&md.container_gets);
    assert_int_equal(bs->ops->put_buffer(bs, "container.json", "c", 1, &err), 0);
    assert_int_equal(md_count(&md.container_gets), before + 1);
    assert_int_equal(bs->ops->put_buffer(bs, "container.json", "c", 1, &err), 0);
    assert_int_equal(md_count(&md.container_gets), before + 1);
    ctl_reset();
    ctl_fail(1, 400, "ExpiredToken", "PUT");
    assert_int_equal(bs->ops->put_buffer(bs, "container.json", "d", 1, &err), 0);
    assert_int_equal(md_count(&md.container_gets), before + 2);
    log = ctl_log();
    assert_int_equal(log_count(log, "PUT", "container.json", NULL), 2);
    json_decref(log);
    bs->ops->close(bs);
    clean_aws_env();
}

struct worker_arg {
    struct sl_blobstore *bs;
    int id;
    int failures;
};

static void *worker(void *p)
{
    struct worker_arg *a = p;
    for (int i = 0; i < 10; i++) {
        char key[64], val[64];
        snprintf(key, sizeof(key), "threads/%d/%d.json", a->id, i);
        snprintf(val, sizeof(val), "{\"worker\": %d, \"i\": %d}", a->id, i);
        struct sl_error err = {0};
        char *out = NULL;
        size_t len = 0;
        if (a->bs->ops->put_buffer(a->bs, key, val, strlen(val), &err) < 0 ||
            a->bs->ops->get_buffer(a->bs, key, 100, &out, &len, &err) != 1 || len != strlen(val) ||
            memcmp(out, val, len) != 0)
            a->failures++;
        free(out);
    }
    return NULL;
}

static void s3_threads(void **state)
{
    (void)state;
    char bucket[64];
    struct sl_blobstore *bs = open_bucket("threads", bucket, sizeof(bucket));
    pthread_t t[8];
    struct worker_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct worker_arg){.bs = bs, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    bs->ops->close(bs);
}

/* ---- main ---------------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    strcpy(tmp_root, "/tmp/sl-blobstore-test-XXXXXX");
    if (!mkdtemp(tmp_root))
        return -1;
    setenv("HOME", tmp_root, 1);
    /* Requests go straight to the loopback servers. */
    unsetenv("http_proxy");
    unsetenv("https_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("HTTPS_PROXY");
    unsetenv("ALL_PROXY");
    unsetenv("all_proxy");
    clean_aws_env();
    const char *ep = getenv("SANDLOOM_TEST_S3_ENDPOINT");
    s3_endpoint = ep && *ep ? ep : NULL;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    md_start();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    md_stop();
    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(creds_ini_parse),
        cmocka_unit_test(creds_chain_order),
        cmocka_unit_test(creds_container_endpoint),
        cmocka_unit_test(creds_instance_metadata),
        cmocka_unit_test(creds_provider_refresh),
        cmocka_unit_test(s3_open_validation),
        cmocka_unit_test(s3_ensure_bucket),
        cmocka_unit_test(s3_buffer_roundtrip),
        cmocka_unit_test(s3_missing_and_delete),
        cmocka_unit_test(s3_file_roundtrip),
        cmocka_unit_test(s3_multipart),
        cmocka_unit_test(s3_retries),
        cmocka_unit_test(s3_bad_credentials),
        cmocka_unit_test(s3_dead_endpoint),
        cmocka_unit_test(s3_virtual_hosted),
        cmocka_unit_test(s3_chain_credentials),
        cmocka_unit_test(s3_threads),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
