/* Terminals over WebSocket (GET /api/v1/sandboxes/{id}/terminal): every
 * attached client on one relay thread (an epoll set), none a thread of its
 * own. A client gets the terminal's recent output first (the replay), then
 * what it shows as it comes; what it sends is typed into the terminal.
 *
 * Messages. Server to client: a text frame {"type":"ready","exec_id",
 * "cols","rows","offset"} first; binary frames of terminal output (bytes
 * as the terminal wrote them); {"type":"gap","bytes":N} when N bytes of
 * output were no longer kept for a client that fell behind; {"type":
 * "error","code","message"} for a message it could not take (the
 * connection stays); {"type":"exit", ...the execution's answer} when the
 * shell has ended, then a close frame. Client to server: binary frames
 * (bytes to type), or text frames {"type":"input","data":"..."} and
 * {"type":"resize","cols":C,"rows":R}. */
#ifndef SL_API_TERMINAL_WS_H
#define SL_API_TERMINAL_WS_H

#include <stdint.h>

/* The subprotocol a browser offers (and is answered): new WebSocket(url,
 * [SL_TERMINAL_WS_PROTOCOL, "sandloom.bearer." + token]). */
#define SL_TERMINAL_WS_PROTOCOL "sandloom.terminal"

#include "common/error.h"

struct sl_config;
struct sl_service;
struct sl_terminal;
struct sl_upgrade;

int sl_terminals_ws_start(const struct sl_config *cfg, struct sl_error *err);
/* Closes every client (close code 1001) and ends the relay thread; the
 * terminals themselves stay (and end with the service's executions). */
void sl_terminals_ws_stop(void);

/* The 101's upgrade for a client of terminal t (taken: attached, its
 * detach comes when the client goes), sized cols x rows, or NULL with err
 * (429 SANDBOX_STREAM_LIMIT past the stream bounds; t is then released
 * and detached). */
struct sl_upgrade *sl_terminal_ws_upgrade(struct sl_service *svc, const char *sandbox_id,
                                          struct sl_terminal *t, unsigned short cols,
                                          unsigned short rows, const char *ws_key,
                                          struct sl_error *err);

#endif
