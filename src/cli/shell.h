/* `sandloom shell NAME`: the sandbox's terminal (GET …/terminal, a
 * WebSocket) on this one. The local terminal goes raw while connected (the
 * sandbox's line discipline does the editing, ^C reaches its job), its
 * size follows SIGWINCH, and it is restored however the session ends. */
#ifndef SL_CLI_SHELL_H
#define SL_CLI_SHELL_H

#include <jansson.h>

#include "cli/sandbox.h"

/* Open a terminal (exec_id NULL: a new shell; else attach to that one) and
 * relay until it ends or the connection does. 0 with *end the exit
 * message (the execution's answer; NULL when the connection ended first),
 * or -1 with e (a refusal before the upgrade, or no connection). */
int cli_shell(struct cli_sandbox *sb, const char *exec_id, json_t **end, struct cli_error *e);

#endif
