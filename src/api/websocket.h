/* WebSocket (RFC 6455) for the server side: the handshake's accept key,
 * reading a client's frames, writing ours. No state, no I/O: the caller
 * owns its buffers and its socket (api/terminal_ws.c). */
#ifndef SL_API_WEBSOCKET_H
#define SL_API_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    SL_WS_CONT = 0x0,
    SL_WS_TEXT = 0x1,
    SL_WS_BINARY = 0x2,
    SL_WS_CLOSE = 0x8,
    SL_WS_PING = 0x9,
    SL_WS_PONG = 0xa,
};

/* Close codes we send. */
#define SL_WS_CLOSE_NORMAL 1000
#define SL_WS_CLOSE_GOING_AWAY 1001
#define SL_WS_CLOSE_PROTOCOL 1002
#define SL_WS_CLOSE_TOO_BIG 1009

/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key: base64 of the
 * SHA-1 of the key and the RFC's GUID (28 characters and a NUL). false
 * when the key is not 16 bytes in base64. */
bool sl_ws_accept(const char *key, char out[29]);

struct sl_ws_frame {
    int opcode;
    bool fin;
    unsigned char *payload; /* unmasked in place, inside the caller's buffer */
    size_t len;
};

/* One client frame at the start of buf[0..len): >0 the bytes it took (f
 * filled, payload unmasked), 0 it is not all there yet, -1 a protocol
 * error (unmasked, a reserved bit or opcode, a control frame that is long
 * or fragmented), -2 a payload over max_payload. */
ssize_t sl_ws_parse(unsigned char *buf, size_t len, size_t max_payload, struct sl_ws_frame *f);

/* The size of the frame at buf (header and payload) without touching it:
 * >0 that size, with its payload length in *payload; 0 when its header is
 * not all there yet; -1 for a length no frame has. */
ssize_t sl_ws_frame_size(const unsigned char *buf, size_t len, size_t *payload);

/* The header of a server frame (unmasked, final) of len payload bytes
 * into out (at most 10 bytes); returns its size. */
size_t sl_ws_header(unsigned char out[10], int opcode, size_t len);

#endif
