/* Who an E2B request is for: its sandbox (headers or host form), its API
 * key in either spelling, a sandbox's envd access token (e2b.h). */
#include <ctype.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "e2b/e2b.h"
#include "service/api_keys.h"
#include "service/tenants.h"

static bool dns_label(const char *s, size_t n)
{
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '-')
            return false;
    return true;
}

/* envd's REST paths, with or without a query. */
static bool envd_rest_path(const char *url)
{
    static const char *const paths[] = {"/files", "/health"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        size_t n = strlen(paths[i]);
        if (strncmp(url, paths[i], n) == 0 && (url[n] == '\0' || url[n] == '?'))
            return true;
    }
    return false;
}

/* The sandbox an access token names ("[<tenant>.]<id>.<mac>"), in id. */
static bool token_sandbox(const char *token, char *id, size_t size)
{
    const char *mac = token ? strrchr(token, '.') : NULL;
    if (!mac || mac == token)
        return false;
    const char *start = mac - 1;
    while (start > token && start[-1] != '.')
        start--;
    size_t n = (size_t)(mac - start);
    if (n == 0 || n >= size)
        return false;
    memcpy(id, start, n);
    id[n] = '\0';
    return sl_v_is_identifier(id);
}

char *sl_e2b_rewrite(const char *sandbox_id_header, const char *port_header, const char *host,
                     const char *domain, const char *access_token, const char *url)
{
    char id[129];
    long port = 0;
    if (!sandbox_id_header && access_token && envd_rest_path(url) &&
        token_sandbox(access_token, id, sizeof(id))) {
        /* Older SDKs (e2b 2.7) send envd's REST calls (/files, /health)
         * without the sandbox headers: the access token names its
         * sandbox. Only those paths: nothing else of the API moves. */
        port = SL_E2B_ENVD_PORT;
    } else if (sandbox_id_header) {
        size_t n = strlen(sandbox_id_header);
        if (n == 0 || n >= sizeof(id) || !sl_v_is_identifier(sandbox_id_header))
            return NULL;
        memcpy(id, sandbox_id_header, n + 1);
        port = port_header ? strtol(port_header, NULL, 10) : SL_E2B_ENVD_PORT;
    } else if (domain && *domain && host) {
        /* "<port>-<id>.<domain>[:<listener port>]" */
        const char *dot = strchr(host, '.');
        const char *dash = strchr(host, '-');
        if (!dot || !dash || dash > dot)
            return NULL;
        size_t dl = strlen(domain);
        const char *rest = dot + 1;
        if (strncmp(rest, domain, dl) != 0 || (rest[dl] != '\0' && rest[dl] != ':'))
            return NULL;
        port = strtol(host, NULL, 10);
        size_t n = (size_t)(dot - dash - 1);
        if (n >= sizeof(id) || !dns_label(dash + 1, n))
            return NULL;
        memcpy(id, dash + 1, n);
        id[n] = '\0';
    } else {
        return NULL;
    }
    /* envd and the interpreter only: any other port of a sandbox is the
     * ports route's (with its own token), and a Host like
     * "my-api.<domain>" is not a sandbox's. */
    if (port != SL_E2B_ENVD_PORT && port != SL_E2B_INTERPRETER_PORT)
        return NULL;
    const char *where = port == SL_E2B_ENVD_PORT ? "envd" : "interpreter";
    char *out = NULL;
    if (asprintf(&out, "/e2b/%s/%s%s%s", where, id, url[0] == '/' ? "" : "/", url) < 0)
        return NULL;
    return out;
}

bool sl_e2b_key_canonical(const char *value, size_t len, char *out, size_t size)
{
    const size_t pre = strlen(SL_E2B_KEY_PREFIX);
    if (len == pre + 60 && strncmp(value, SL_E2B_KEY_PREFIX, pre) == 0) {
        for (size_t i = pre; i < len; i++)
            if (!isxdigit((unsigned char)value[i]) || isupper((unsigned char)value[i]))
                return false;
        return snprintf(out, size, "sl%.12s_%.48s", value + pre, value + pre + 12) == 63;
    }
    if (len + 1 > size)
        return false;
    memcpy(out, value, len);
    out[len] = '\0';
    return true;
}

static void token_mac(const char *secret, enum sl_e2b_token kind, const char *tenant_id,
                      const char *sandbox_id, char hex[65])
{
    /* A key of its own for each purpose, so a token never says anything
     * about the internal token, nor opens what the other kind opens. */
    unsigned char key[32], mac[32];
    unsigned int klen = 0, mlen = 0;
    const char *purpose = kind == SL_E2B_TOKEN_TRAFFIC ? "sandloom e2b traffic token v1"
                                                       : "sandloom e2b envd access token v1";
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)purpose,
         strlen(purpose), key, &klen);
    char msg[SL_TENANT_ID_MAX + 1 + 130];
    int n = snprintf(msg, sizeof(msg), "%s\n%s", tenant_id ? tenant_id : "", sandbox_id);
    HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, (size_t)n, mac, &mlen);
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[mac[i] >> 4];
        hex[2 * i + 1] = digits[mac[i] & 15];
    }
    hex[64] = '\0';
    OPENSSL_cleanse(key, sizeof(key));
}

void sl_e2b_envd_token(const char *secret, enum sl_e2b_token kind, const char *tenant_id,
                       const char *sandbox_id, char *out)
{
    char hex[65];
    token_mac(secret, kind, tenant_id, sandbox_id, hex);
    if (tenant_id)
        snprintf(out, SL_E2B_TOKEN_MAX, "%s.%s.%s", tenant_id, sandbox_id, hex);
    else
        snprintf(out, SL_E2B_TOKEN_MAX, "%s.%s", sandbox_id, hex);
}

bool sl_e2b_envd_token_check(const char *secret, enum sl_e2b_token kind, const char *sandbox_id,
                             const char *token, size_t len, struct sl_principal *p)
{
    /* "[<tenant>.]<sandbox_id>.<64 hex>", for exactly this sandbox. */
    size_t idl = strlen(sandbox_id);
    if (len < idl + 65 || len > SL_TENANT_ID_MAX + 1 + idl + 65 || token[len - 65] != '.' ||
        strncmp(token + len - 65 - idl, sandbox_id, idl) != 0)
        return false;
    size_t tl = len - 65 - idl;
    char tenant[SL_TENANT_ID_MAX + 1] = "";
    if (tl > 0) {
        if (tl < 2 || token[tl - 1] != '.')
            return false;
        memcpy(tenant, token, tl - 1);
        tenant[tl - 1] = '\0';
        if (!sl_tenant_id_valid(tenant))
            return false;
    }
    char want[65];
    token_mac(secret, kind, tenant[0] ? tenant : NULL, sandbox_id, want);
    if (CRYPTO_memcmp(want, token + len - 64, 64) != 0)
        return false;
    *p = (struct sl_principal){.kind = tenant[0] ? SL_PRINCIPAL_TENANT : SL_PRINCIPAL_OPERATOR};
    if (tenant[0]) {
        snprintf(p->tenant_id, sizeof(p->tenant_id), "%s", tenant);
        snprintf(p->key_id, sizeof(p->key_id), "e2b-envd");
        for (int i = 0; i < SL_LIMIT_COUNT; i++)
            p->quota[i] = -1;
    }
    return true;
}
