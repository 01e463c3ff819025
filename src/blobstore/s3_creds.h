/* AWS credentials for the S3 backend: explicit keys, or the standard chain
 * the AWS SDKs follow, in this order:
 *   1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 *      (+ AWS_SESSION_TOKEN); one of the two alone is an error;
 *   2. shared credentials file: AWS_SHARED_CREDENTIALS_FILE or
 *      ~/.aws/credentials, section [<profile>];
 *   3. shared config file: AWS_CONFIG_FILE or ~/.aws/config, section
 *      [default] or [profile <profile>] (static keys only);
 *      the profile is AWS_PROFILE, else AWS_DEFAULT_PROFILE, else "default";
 *      a profile named by the environment but present in neither file is an
 *      error;
 *   4. container endpoint (ECS/EKS): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
 *      (http://169.254.170.2<uri>) or AWS_CONTAINER_CREDENTIALS_FULL_URI
 *      (https, or http to a loopback or the ECS/EKS link-local hosts), with
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN as Authorization; when set and
 *      failing, an error (the chain does not fall through to 5);
 *   5. instance metadata, IMDSv2 only (PUT token, GET role, GET
 *      credentials; 1 s timeouts), unless AWS_EC2_METADATA_DISABLED=true;
 *      AWS_EC2_METADATA_SERVICE_ENDPOINT overrides http://169.254.169.254.
 * Temporary credentials (4, 5) are refreshed five minutes before they
 * expire, and on demand after the store answered ExpiredToken.
 *
 * Internal to src/blobstore/ (and its unit test). */
#ifndef SL_BLOBSTORE_S3_CREDS_H
#define SL_BLOBSTORE_S3_CREDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct sl_s3_creds {
    char *access_key;
    char *secret_key;
    char *session_token;   /* NULL when none */
    int64_t expires_at_us; /* wall clock; 0 = does not expire */
    const char *source;    /* static: "explicit", "environment", "shared-credentials-file",
                            * "shared-config-file", "container", "instance-metadata" */
};

void sl_s3_creds_clear(struct sl_s3_creds *c);
int sl_s3_creds_copy(struct sl_s3_creds *dst, const struct sl_s3_creds *src);

/* Look for static keys in INI text (AWS shared file syntax) under the
 * section whose header is `section` ("default", "dev", "profile dev";
 * whitespace inside the brackets is collapsed). Keys are case-insensitive;
 * '#' and ';' start comment lines; indented lines continue the previous
 * value and are ignored; a repeated key or section overrides.
 * 1 found (out filled, source not set), 0 section absent or without keys,
 * -1 the section has only one of the two keys (err says which). */
int sl_s3_creds_parse_ini(const char *text, size_t len, const char *section, bool *section_seen,
                          struct sl_s3_creds *out, struct sl_error *err);

/* The container endpoint URL from the environment into buf; 1 set, 0 not
 * configured, -1 refused (a plain-http FULL_URI to a host that is neither
 * loopback nor the ECS/EKS agent). */
int sl_s3_container_url(char *buf, size_t size, struct sl_error *err);

/* Walk the chain once. 1 found, 0 nothing anywhere, -1 a source is
 * configured but broken (err says which and why). */
int sl_s3_creds_resolve_chain(struct sl_s3_creds *out, struct sl_error *err);

/* A thread-safe cache in front of explicit keys or the chain. */
struct sl_s3_cred_provider;

/* access_key/secret_key: both set = explicit, both NULL/"" = chain; one
 * alone is refused (SANDBOX_CONFIG_INVALID). */
struct sl_s3_cred_provider *sl_s3_cred_provider_new(const char *access_key, const char *secret_key,
                                                    struct sl_error *err);
/* Current credentials, copied into out (sl_s3_creds_clear it). Resolves the
 * chain on first use, refreshes temporary ones near expiry; force_refresh
 * asks for new ones now (after ExpiredToken). Still-valid cached
 * credentials are kept when a refresh fails. 0 or -1. */
int sl_s3_cred_provider_get(struct sl_s3_cred_provider *p, bool force_refresh,
                            struct sl_s3_creds *out, struct sl_error *err);
/* true when the credentials come from a source that can hand out new ones. */
bool sl_s3_cred_provider_refreshable(struct sl_s3_cred_provider *p);
/* "explicit" or "default-chain". */
const char *sl_s3_cred_provider_kind(const struct sl_s3_cred_provider *p);
void sl_s3_cred_provider_free(struct sl_s3_cred_provider *p);

/* Seconds before expiry at which temporary credentials are replaced. */
#define SL_S3_CREDS_REFRESH_MARGIN_S 300

/* curl_global_init() exactly once for the process (s3.c). */
int sl_s3_curl_global_init(struct sl_error *err);

#endif
