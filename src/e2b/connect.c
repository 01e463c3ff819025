/* Connect framing and error codes (connect.h). */
#include "e2b/connect.h"

#include <string.h>

#include "api/errors.h"
#include "common/cleanup.h"

int sl_connect_unwrap(const char *body, size_t len, json_t **msg, const char **why)
{
    *msg = NULL;
    if (len < 5) {
        *why = "the request is not a Connect envelope (flag, length, message)";
        return -1;
    }
    const unsigned char *p = (const unsigned char *)body;
    if (p[0] & 0x01) {
        *why = "compressed Connect messages are not supported";
        return -1;
    }
    uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    if ((size_t)n != len - 5 || n > SL_CONNECT_MAX_MESSAGE) {
        *why = "the request holds more or less than one Connect message";
        return -1;
    }
    json_error_t jerr;
    *msg = json_loadb(body + 5, n, 0, &jerr);
    if (!json_is_object(*msg)) {
        json_decref(*msg);
        *msg = NULL;
        *why = "the request message is not a JSON object";
        return -1;
    }
    return 0;
}

int sl_connect_frame(struct sl_buf *out, uint8_t flags, const json_t *json)
{
    _cleanup_free_ char *text = json_dumps(json, JSON_COMPACT);
    if (!text)
        return -1;
    size_t n = strlen(text);
    unsigned char head[5] = {flags, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 8), (unsigned char)n};
    if (sl_buf_append(out, head, sizeof(head)) < 0 || sl_buf_append(out, text, n) < 0)
        return -1;
    return 0;
}

int sl_connect_end(struct sl_buf *out, const char *code, const char *message)
{
    _cleanup_json_ json_t *end =
        code ? json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message ? message : "")
             : json_object();
    return end ? sl_connect_frame(out, SL_CONNECT_FLAG_END, end) : -1;
}

const char *sl_connect_code_of(const struct sl_error *err)
{
    const char *code = err->code;
    /* The file API's refusals are 400s whose sentence says which. */
    if (strcmp(code, SL_E_INVALID_ARGUMENT) == 0) {
        if (strstr(err->message, "does not exist"))
            return "not_found";
        if (strstr(err->message, "already exists"))
            return "already_exists";
        return "invalid_argument";
    }
    if (strcmp(code, SL_E_SANDBOX_NOT_FOUND) == 0 || strcmp(code, SL_E_EXEC_NOT_FOUND) == 0 ||
        strcmp(code, SL_E_EXEC_NOT_RUNNING) == 0)
        return "not_found";
    switch (sl_api_status_for_code(code)) {
    case 400:
    case 422:
        return "invalid_argument";
    case 401:
        return "unauthenticated";
    case 403:
        return "permission_denied";
    case 404:
        return "not_found";
    case 409:
        return "failed_precondition";
    case 413:
    case 429:
    case 507:
        return "resource_exhausted";
    case 500:
        return "internal";
    case 501:
        return "unimplemented";
    default:
        return "unavailable";
    }
}

int sl_connect_http_status(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } map[] = {
        {"canceled", 499},          {"invalid_argument", 400},   {"deadline_exceeded", 504},
        {"not_found", 404},         {"already_exists", 409},     {"permission_denied", 403},
        {"resource_exhausted", 429}, {"failed_precondition", 400}, {"aborted", 409},
        {"out_of_range", 400},      {"unimplemented", 501},      {"internal", 500},
        {"unavailable", 503},       {"data_loss", 500},          {"unauthenticated", 401},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(map[i].code, code) == 0)
            return map[i].status;
    return 500;
}
