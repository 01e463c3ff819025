/* The API token kept across restarts (SANDBOX_INTERNAL_TOKEN_FILE, ours).
 *
 * With no SANDBOX_INTERNAL_TOKEN set (allowed outside prod), the
 * reference draws a new random token at every start, so every restart
 * breaks the console's session and each MCP client's configuration. Here
 * the token drawn at the first start is saved in a file only root can
 * read, and every later start without SANDBOX_INTERNAL_TOKEN reuses it. A
 * token set in the environment always wins and the file is not touched. */
#ifndef SL_CONFIG_TOKEN_FILE_H
#define SL_CONFIG_TOKEN_FILE_H

#include <stdbool.h>

#include "common/error.h"

/* The token saved at `path`, or, when there is none, `fresh` saved there
 * (mode 0600, written completely before it appears under its name).
 * *token: a new string the caller owns; *created: whether this call saved
 * it. The file must be a regular file owned by this user, readable by no
 * one else, holding one token of 32 to 512 printable characters; anything
 * else refuses with SL_E_CONFIG naming the file (it is never replaced, so
 * a token clients hold is not silently changed). */
int sl_token_file_load(const char *path, const char *fresh, char **token, bool *created,
                       struct sl_error *err);

#endif
