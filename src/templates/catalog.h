/* Template names, references, the catalog and the local cache (API.md §6).
 *
 * Layout under the template root (SANDBOX_TEMPLATE_ROOT):
 *   catalog.json, catalog.lock        the catalog (§6.6) and its lock
 *   <name>/sha256-<hex>/              a materialised tree (read-only mounts)
 *   .archives/<name>/sha256-<hex>.tar.gz
 *                                      the archive a tree came from, kept so a
 *                                      worker without an object store can
 *                                      materialise an evicted revision again
 *   .locks/<name>-sha256-<hex>.lock   one materialisation at a time per revision
 *   .staging/                         archives being built, trees being extracted
 * Every directory is root-owned; trees are world-readable so sandboxes can
 * use them (§6.4). Thread-safe: state lives in files under flocks. */
#ifndef SL_TEMPLATES_CATALOG_H
#define SL_TEMPLATES_CATALOG_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "templates/archive.h"

#define SL_TPL_NAME_MAX 64

/* ^[a-z0-9][a-z0-9._-]{0,63}$ and not "." / ".."; 400 with the spec's
 * sentence otherwise. */
int sl_tpl_name_check(const char *name, struct sl_error *err);

/* A template as the catalog and the cache store it: its name for a public
 * one (published with the internal token), "<tenant_id>~<name>" for a
 * tenant's private one (tenant ids are [a-z0-9-], 1-32). Both name the
 * catalog key, the cache directory and the archive; a sandbox mounts it at
 * /envs/<name> either way (sl_tpl_plain_name). */
#define SL_TPL_OWNER_MAX 32
#define SL_TPL_OWNER_SEP '~'
#define SL_TPL_STORED_NAME_MAX (SL_TPL_OWNER_MAX + 1 + SL_TPL_NAME_MAX)
int sl_tpl_stored_name_check(const char *stored, struct sl_error *err);
/* The name a stored name mounts as: what follows the owner, if any. */
const char *sl_tpl_plain_name(const char *stored);

/* "name" or "name@sha256:<64 lowercase hex>", whitespace around trimmed.
 * digest is "" when not pinned. */
int sl_tpl_ref_parse(const char *ref, char name[SL_TPL_NAME_MAX + 1],
                     char digest[SL_TPL_DIGEST_SIZE], struct sl_error *err);

/* Create the root and its private subdirectories. */
int sl_tpl_root_prepare(const char *root, struct sl_error *err);

/* The catalog object (name -> record), {} when none was published. */
json_t *sl_tpl_catalog_load(const char *root, struct sl_error *err);

/* Read-modify-write under catalog.lock: edit(catalog, arg) changes the
 * object in place and returns 0 (write it back), 1 (nothing to write) or -1
 * (abort, err set). Written pretty-printed with sorted keys, atomically. */
int sl_tpl_catalog_update(const char *root, int (*edit)(json_t *catalog, void *arg, struct sl_error *err),
                          void *arg, struct sl_error *err);

/* The archive kept for a revision: <root>/.archives/<name>/sha256-<hex>.tar.gz. */
int sl_tpl_archive_path(const char *root, const char *name, const char *digest, char *out,
                        size_t size);

/* Make sure <root>/<name>/sha256-<hex>/ exists (extracting the kept
 * archive, or `archive` when given, under the revision's lock) and touch
 * it for the LRU; *out is its path. */
int sl_tpl_materialize(const char *root, const char *name, const char *digest,
                       const char *archive, int64_t max_extract_bytes, char out[PATH_MAX],
                       struct sl_error *err);

/* The cache budget (SANDBOX_TEMPLATE_CACHE_MAX_BYTES): while the trees
 * under root take more than max_bytes, remove the least recently used one
 * (directory mtime, touched on every use) that `pinned` does not protect.
 * Kept archives are not counted: they are the source of truth without an
 * object store. Returns the number of trees removed, -1 on error. */
int sl_tpl_cache_evict(const char *root, int64_t max_bytes,
                       bool (*pinned)(const char *tree_path, void *arg), void *arg,
                       struct sl_error *err);

/* Remove what nothing references any more (and was not used within the
 * last ten minutes: a publish writes its tree before its catalog entry):
 * every tree <name>/sha256-<hex>
 * for which keep(name, hex, tree_path, arg) is false (not the revision a
 * published name stands for, not mounted by a live sandbox), and the kept
 * archives (.archives/<name>) of names keep(name, NULL, NULL, arg) refuses
 * (unpublished). Returns the number of trees and archive directories
 * removed, -1 when the root cannot be read. */
/* Unpublish: remove name's trees that `pinned` does not protect, and its
 * kept archives when none is left mounted. Returns how many went. */
int sl_tpl_remove_name(const char *root, const char *name,
                       bool (*pinned)(const char *tree_path, void *arg), void *arg,
                       struct sl_error *err);
int sl_tpl_sweep_unreferenced(const char *root,
                              bool (*keep)(const char *name, const char *hex,
                                           const char *tree_path, void *arg),
                              void *arg, struct sl_error *err);

#endif
