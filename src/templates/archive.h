/* Template archives (spec API.md §6.3, §6.4): the deterministic .tar.gz a
 * template is published as, and its safe extraction into the cache.
 *
 * No service or HTTP knowledge here: callers pick the paths, hold the locks
 * and map the limits from the configuration.
 *
 * sl_tpl_archive() snapshots the tree under a directory descriptor the
 * caller opened no-follow (and keeps owning). The walk only ever goes
 * through descriptors (openat O_NOFOLLOW, fstatat AT_SYMLINK_NOFOLLOW): no
 * symlink is followed and no path string is resolved through the tree, so a
 * sandbox racing the snapshot cannot make us read outside it. The archive
 * file is created (or truncated) at out_path and removed again on failure.
 * The same tree always gives the same bytes: names sorted, owners, times and
 * the gzip header zeroed, fixed compression level.
 *
 * sl_tpl_extract() verifies the archive's digest, then extracts it into a
 * directory it creates (dest_dir must not exist) and removes that directory
 * again if anything fails. Every file is created relative to directory
 * descriptors opened no-follow, so no member can write through a symlink,
 * whatever the archive holds. Runs as root: directories get their final
 * mode as soon as their member is seen, and root can still fill them.
 *
 * Refusals a client can cause are SL_E_INVALID_ARGUMENT with the spec's
 * sentences as message; host failures are SL_E_INTERNAL with the host path
 * only in the detail. Thread-safe: no module state. */
#ifndef SL_TEMPLATES_ARCHIVE_H
#define SL_TEMPLATES_ARCHIVE_H

#include <stdint.h>

#include "common/error.h"

/* A value <= 0 turns that limit off. */
struct sl_tpl_limits {
    int64_t max_entries;      /* SANDBOX_TEMPLATE_SNAPSHOT_MAX_ENTRIES: members scanned */
    int64_t max_depth;        /* SANDBOX_TEMPLATE_SNAPSHOT_MAX_DEPTH: components of a member name */
    int64_t max_source_bytes; /* SANDBOX_TEMPLATE_MAX_EXTRACT_BYTES: summed regular-file sizes */
    int64_t max_archive_bytes; /* SANDBOX_TEMPLATE_MAX_ARCHIVE_BYTES: compressed bytes */
    double timeout_seconds;    /* SANDBOX_TEMPLATE_SNAPSHOT_TIMEOUT_SECONDS */
};

#define SL_TPL_DIGEST_SIZE 72 /* "sha256:" + 64 hex + NUL */

struct sl_tpl_archive_info {
    char digest[SL_TPL_DIGEST_SIZE]; /* "sha256:<hex of the compressed bytes>" */
    int64_t size_bytes;              /* compressed bytes */
    int64_t entries;                 /* members written */
    int64_t source_bytes;            /* summed regular-file sizes */
};

/* Deepest member name sl_tpl_extract() accepts (components); the archiver's
 * own depth limit is at most 256 (CONFIG.md). */
#define SL_TPL_EXTRACT_MAX_DEPTH 256

/* Write the deterministic archive of every descendant of src_dirfd to
 * out_path. Returns 0 and fills info (may be NULL), or -1 and err. */
int sl_tpl_archive(int src_dirfd, const char *out_path, const struct sl_tpl_limits *lim,
                   struct sl_tpl_archive_info *info, struct sl_error *err);

/* SHA-256 of the file at path as "sha256:<hex>". Returns 0, or -1 and err. */
int sl_tpl_digest_file(const char *path, char digest[SL_TPL_DIGEST_SIZE], struct sl_error *err);

/* Verify archive_path against expected_digest ("sha256:<hex>"; the message
 * names the template `name`), then extract it into dest_dir, created 0755.
 * max_extract_bytes bounds the summed member sizes (<= 0: no bound).
 * Returns 0, or -1 and err with dest_dir removed. */
int sl_tpl_extract(const char *archive_path, const char *name, const char *expected_digest,
                   const char *dest_dir, int64_t max_extract_bytes, struct sl_error *err);

#endif
