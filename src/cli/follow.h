/* A command's output followed as the service streams it (its Server-Sent
 * Events, api/exec_stream.h): written to stdout and stderr as it comes.
 * A dropped connection is taken up again from the last event it got
 * (Last-Event-ID), so nothing is written twice or left out. */
#ifndef SL_CLI_FOLLOW_H
#define SL_CLI_FOLLOW_H

#include <jansson.h>

#include "cli/sandbox.h"

/* Run `body` (an exec request; its exec_id names it) with "stream": true,
 * or, body NULL, follow the command exec_id that runs already. 0 with *end
 * the end event (the command's answer without its output), or -1 with e. */
int cli_follow_exec(struct cli_sandbox *sb, json_t *body, const char *exec_id, long timeout_s,
                    json_t **end, struct cli_error *e);

#endif
