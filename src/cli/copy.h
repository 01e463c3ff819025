/* Files between this machine and a sandbox, over the File API (one file per
 * request, base64 in JSON, as the service takes them).
 *
 * A directory is copied by walking it first (so the total is known), then
 * sending or fetching each file; the walk makes directories on the far
 * side as it goes. Symbolic links are neither followed nor copied: they are
 * counted and named on stderr. A name the sandbox lists is used as one path
 * component only ('/', "." and ".." refused), so a sandbox cannot make the
 * CLI write outside the destination. With progress on, a line on stderr
 * says bytes and files done so far. */
#ifndef SL_CLI_COPY_H
#define SL_CLI_COPY_H

#include <stdbool.h>

#include "cli/sandbox.h"
#include "common/util.h"

/* A file of the sandbox, decoded into out (caller frees with sl_buf_free). */
int cli_read_file(struct cli_sandbox *sb, const char *path, struct sl_buf *out,
                  struct cli_error *e);

/* local -> remote (a file, or with recursive a directory's contents into
 * remote, made if missing). */
int cli_upload(struct cli_sandbox *sb, const char *local, const char *remote, bool recursive,
               bool progress, struct cli_error *e);

/* remote -> local ("-": standard output, files only). */
int cli_download(struct cli_sandbox *sb, const char *remote, const char *local, bool recursive,
                 bool progress, struct cli_error *e);

#endif
