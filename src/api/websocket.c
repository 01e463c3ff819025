/* WebSocket framing (RFC 6455 §5) and the handshake's key (§4.2.2). */
#include "api/websocket.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

bool sl_ws_accept(const char *key, char out[29])
{
    /* A 16-byte nonce in base64 is 24 characters ending in "==". */
    if (!key || strlen(key) != 24 || key[22] != '=' || key[23] != '=')
        return false;
    char joined[24 + sizeof(WS_GUID)];
    memcpy(joined, key, 24);
    memcpy(joined + 24, WS_GUID, sizeof(WS_GUID));
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (!EVP_Digest(joined, strlen(joined), digest, &dlen, EVP_sha1(), NULL) || dlen != 20)
        return false;
    char *b64 = sl_base64_encode(digest, dlen);
    if (!b64)
        return false;
    bool ok = strlen(b64) == 28;
    if (ok)
        memcpy(out, b64, 29);
    free(b64);
    return ok;
}

/* A frame's payload length (§5.2: 7 bits, or 16 or 64 after them) and
 * where what follows it starts (the mask, or the payload); false when the
 * header is not all there yet. */
static bool payload_length(const unsigned char *buf, size_t len, uint64_t *plen, size_t *at)
{
    if (len < 2)
        return false;
    *plen = buf[1] & 0x7f;
    *at = 2;
    if (*plen == 126) {
        if (len < 4)
            return false;
        *plen = ((uint64_t)buf[2] << 8) | buf[3];
        *at = 4;
    } else if (*plen == 127) {
        if (len < 10)
            return false;
        *plen = 0;
        for (int i = 0; i < 8; i++)
            *plen = (*plen << 8) | buf[2 + i];
        *at = 10;
    }
    return true;
}

ssize_t sl_ws_parse(unsigned char *buf, size_t len, size_t max_payload, struct sl_ws_frame *f)
{
    if (len < 2)
        return 0;
    bool fin = buf[0] & 0x80;
    int opcode = buf[0] & 0x0f;
    if (buf[0] & 0x70)
        return -1; /* no extension was negotiated */
    if (!(buf[1] & 0x80))
        return -1; /* a client's frames are masked (§5.1) */
    bool control = opcode & 0x8;
    if (opcode != SL_WS_CONT && opcode != SL_WS_TEXT && opcode != SL_WS_BINARY &&
        opcode != SL_WS_CLOSE && opcode != SL_WS_PING && opcode != SL_WS_PONG)
        return -1;
    uint64_t plen;
    size_t at;
    if (!payload_length(buf, len, &plen, &at))
        return 0;
    if (control && (plen > 125 || !fin))
        return -1;
    if (plen > max_payload)
        return -2;
    if (len < at + 4 + plen)
        return 0;
    const unsigned char *mask = buf + at;
    unsigned char *payload = buf + at + 4;
    for (uint64_t i = 0; i < plen; i++)
        payload[i] ^= mask[i & 3];
    f->opcode = opcode;
    f->fin = fin;
    f->payload = payload;
    f->len = (size_t)plen;
    return (ssize_t)(at + 4 + plen);
}

ssize_t sl_ws_frame_size(const unsigned char *buf, size_t len, size_t *payload)
{
    uint64_t plen;
    size_t at;
    if (!payload_length(buf, len, &plen, &at))
        return 0;
    if (plen > ((uint64_t)1 << 40))
        return -1;
    if (buf[1] & 0x80)
        at += 4;
    *payload = (size_t)plen;
    return (ssize_t)(at + plen);
}

size_t sl_ws_header(unsigned char out[10], int opcode, size_t len)
{
    out[0] = (unsigned char)(0x80 | (opcode & 0x0f));
    if (len < 126) {
        out[1] = (unsigned char)len;
        return 2;
    }
    if (len <= 0xffff) {
        out[1] = 126;
        out[2] = (unsigned char)(len >> 8);
        out[3] = (unsigned char)len;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++)
        out[2 + i] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
    return 10;
}
