/* Object store interface: template archives, the catalog and dormant
 * snapshots (spec FLEET.md §8).
 *
 * A blobstore is a struct of function pointers plus an opaque handle, like
 * the metadata store; the service never names an implementation. Open the
 * S3 one with sl_blobstore_s3_open() and release it with bs->ops->close(bs).
 * Every method may be called from any thread at once; each call is
 * independent (its own HTTP exchange with retries).
 *
 * Keys are relative ("templates/catalog.json"): the implementation prefixes
 * the normalised base prefix. A key is non-empty, at most 1024 bytes with
 * the prefix, has no leading '/', no empty, "." or ".." segment and no
 * control character; anything else is refused as a caller bug
 * (SANDBOX_INTERNAL_ERROR).
 *
 * Results: lookups return 1 found, 0 absent (a missing object is never an
 * error), -1 error. Every store failure — missing bucket, credentials,
 * connection or timeout after the retries, any error answer — is
 * OBJECT_STORE_UNAVAILABLE with a client-safe message; the operator detail
 * (operation, bucket, key, endpoint, HTTP status, S3 code and message,
 * attempts) is in err->detail, for the log only. Two codes of this module
 * are never sent to a client as they are; callers map them (a snapshot
 * restore maps both to SANDBOX_SNAPSHOT_FAILED):
 *   OBJECT_DIGEST_MISMATCH  downloaded or uploaded bytes differ from the
 *                           SHA-256 the caller named (both digests in the
 *                           message);
 *   OBJECT_TOO_LARGE        the object exceeds the caller's byte limit.
 * Memory handed out (get_buffer) belongs to the caller (free()). */
#ifndef SL_BLOBSTORE_BLOBSTORE_H
#define SL_BLOBSTORE_BLOBSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define SL_E_OBJECT_STORE_UNAVAILABLE "OBJECT_STORE_UNAVAILABLE" /* 503 */
#define SL_E_OBJECT_DIGEST_MISMATCH "OBJECT_DIGEST_MISMATCH"     /* internal, mapped by callers */
#define SL_E_OBJECT_TOO_LARGE "OBJECT_TOO_LARGE"                 /* internal, mapped by callers */

struct sl_blobstore;

struct sl_blobstore_ops {
    /* Upload the regular file at `path` to `key` (replacing it). sha256_hex
     * is the file's lowercase hex SHA-256 when the caller knows it, else
     * NULL (then it is computed); the store checks the bytes it receives
     * against it, so a file that changes while it is sent is refused.
     * Large files go up in parts. 0 or -1. */
    int (*put_file)(struct sl_blobstore *bs, const char *key, const char *path,
                    const char *sha256_hex, struct sl_error *err);
    /* Upload len bytes of memory to `key`. 0 or -1. */
    int (*put_buffer)(struct sl_blobstore *bs, const char *key, const void *data, size_t len,
                      struct sl_error *err);
    /* Download `key` to dest_path: written to a temporary file beside it,
     * checked against expected_sha256_hex when not NULL, fsync'd, then
     * renamed over dest_path (nothing is left behind on failure). max_bytes
     * bounds the object (0 = no bound). 1 found, 0 absent (dest_path
     * untouched), -1 error. */
    int (*get_file)(struct sl_blobstore *bs, const char *key, const char *dest_path,
                    const char *expected_sha256_hex, uint64_t max_bytes, struct sl_error *err);
    /* Download `key` into memory, at most max_bytes (more is
     * OBJECT_TOO_LARGE). On 1, *out is malloc'd, NUL-terminated after *len
     * bytes. 1 found, 0 absent, -1 error. */
    int (*get_buffer)(struct sl_blobstore *bs, const char *key, size_t max_bytes, char **out,
                      size_t *len, struct sl_error *err);
    /* 1 the object exists, 0 absent, -1 error. */
    int (*exists)(struct sl_blobstore *bs, const char *key, struct sl_error *err);
    /* Delete `key`; deleting an absent object succeeds. 0 or -1. */
    int (*delete)(struct sl_blobstore *bs, const char *key, struct sl_error *err);
    /* Startup bucket preparation (FLEET.md §8.2): HEAD the bucket; when it
     * does not exist, create it. 1 created, 0 already there, -1 error (the
     * caller logs it and goes on: never fatal). */
    int (*ensure_bucket)(struct sl_blobstore *bs, struct sl_error *err);
    /* One line for logs and /healthz: backend, endpoint, bucket, prefix,
     * region, addressing, credential source. Owned by bs. No secrets. */
    const char *(*describe)(struct sl_blobstore *bs);
    void (*close)(struct sl_blobstore *bs);
};

struct sl_blobstore {
    const struct sl_blobstore_ops *ops;
    const char *backend; /* "s3" */
};

/* Options of the S3 backend. Start from sl_s3_options_init(); a numeric
 * field left at 0 takes its default. Strings are copied by open. */
struct sl_s3_options {
    const char
        *endpoint; /* "http[s]://host[:port][/path]"; NULL/"" = https://s3.<region>.amazonaws.com */
    const char *region;      /* NULL/"" = us-east-1 */
    const char *bucket;      /* required */
    const char *base_prefix; /* already normalised ("agent-sandbox/" or ""); NULL = "" */
    const char *access_key;  /* explicit credentials: both or neither; */
    const char *secret_key;  /* neither (NULL/"") = the default AWS chain */
    bool path_style;         /* true (init): <endpoint>/<bucket>/<key>;
                              * false: virtual-hosted <scheme>://<bucket>.<host>/<key> */
    long connect_timeout_ms; /* 10000 */
    long stall_timeout_ms;   /* a transfer under 1 byte/s for this long fails: 60000 */
    int max_attempts;        /* 5: tries of one request (connection errors, timeouts, 5xx, 429) */
    long retry_base_ms; /* 200: backoff before try n+1 is base*2^(n-1), jittered to [50%,100%] */
    long retry_max_ms;  /* 20000: backoff cap */
    uint64_t multipart_threshold; /* 64 MiB: files larger than this go up in parts */
    uint64_t part_size;           /* 16 MiB (at least 5 MiB, the S3 minimum) */
};

void sl_s3_options_init(struct sl_s3_options *opt);

/* Validate the options and build the client; no network traffic (the
 * credential chain is resolved on first use). Errors (code
 * SANDBOX_CONFIG_INVALID): no bucket, a bad endpoint or bucket name, only
 * one of access_key/secret_key, a libcurl without SigV4. */
struct sl_blobstore *sl_blobstore_s3_open(const struct sl_s3_options *opt, struct sl_error *err);

#endif
