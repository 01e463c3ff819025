#include "api/validate.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ERRORS 20

/* loc[1] whitelist of API.md §0.4; anything else is reported as "request". */
static const char *const LOC_FIELDS[] = {
    "generation", "sandbox_uid",     "profile",         "worker_epoch", "exec_id",
    "argv",       "cwd",             "env",             "sensitive_env", "timeout_seconds",
    "background", "exec_scope",      "path",            "content_base64", "sandbox_id",
    "workspace_scope_id", NULL};

void sl_v_init(struct sl_validation *v)
{
    v->errors = json_array();
    v->failed = false;
}
void sl_v_free(struct sl_validation *v)
{
    json_decref(v->errors);
    v->errors = NULL;
}
bool sl_v_ok(const struct sl_validation *v)
{
    return !v->failed && json_array_size(v->errors) == 0;
}

void sl_v_fail_in(struct sl_validation *v, enum sl_v_in in, const char *field, const char *why,
                  ...)
{
    v->failed = true;
    if (json_array_size(v->errors) >= MAX_ERRORS)
        return;
    /* loc[1] as the reference computes it: the field's name without an
     * index ("argv[3]" is "argv"), if it is on the whitelist. */
    size_t base = field ? strcspn(field, "[") : 0;
    const char *loc = "request";
    for (size_t i = 0; field && LOC_FIELDS[i]; i++)
        if (strlen(LOC_FIELDS[i]) == base && strncmp(field, LOC_FIELDS[i], base) == 0)
            loc = LOC_FIELDS[i];
    char reason[160];
    va_list ap;
    va_start(ap, why);
    vsnprintf(reason, sizeof(reason), why, ap);
    va_end(ap);
    char msg[256];
    if (!field || strcmp(field, "request") == 0)
        snprintf(msg, sizeof(msg), "the request %s", reason);
    else
        snprintf(msg, sizeof(msg), "%s '%s' %s", in == SL_V_QUERY ? "query parameter" : "body field",
                 field, reason);
    json_t *e = json_pack("{s:[s,s],s:s,s:s,s:s}", "loc", "body", loc, "type", "invalid_request",
                          "msg", msg, "in", in == SL_V_QUERY ? "query" : "body");
    if (field && strcmp(field, "request") != 0)
        json_object_set_new(e, "field", json_string(field));
    json_array_append_new(v->errors, e);
}

void sl_v_message(const struct sl_validation *v, char *buf, size_t size)
{
    size_t n = json_array_size(v->errors);
    const char *first = json_string_value(json_object_get(json_array_get(v->errors, 0), "msg"));
    if (!first)
        snprintf(buf, size, "request validation failed");
    else if (n == 1)
        snprintf(buf, size, "request validation failed: %s", first);
    else
        snprintf(buf, size, "request validation failed: %s (and %zu more in errors)", first,
                 n - 1);
}

/* "must be an integer from 1 to 200", or "≥ 1" when there is no real top. */
static void fail_int(struct sl_validation *v, enum sl_v_in in, const char *field, int64_t min,
                     int64_t max)
{
    if (max >= INT32_MAX)
        sl_v_fail_in(v, in, field, "must be an integer of at least %lld", (long long)min);
    else
        sl_v_fail_in(v, in, field, "must be an integer from %lld to %lld", (long long)min,
                     (long long)max);
}

bool sl_v_is_identifier(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-'))
            return false;
    }
    return true;
}

size_t sl_v_utf8_len(const char *s, size_t bytes)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            n++;
    return n;
}

const char *sl_v_string_n(struct sl_validation *v, const json_t *obj, const char *field,
                          bool required, size_t min_chars, size_t max_chars, size_t *len)
{
    json_t *val = json_object_get(obj, field);
    if (!val) {
        if (required)
            sl_v_fail(v, field, "is required");
        return NULL;
    }
    if (!json_is_string(val)) {
        sl_v_fail(v, field, "must be a string");
        return NULL;
    }
    size_t bytes = json_string_length(val);
    size_t chars = sl_v_utf8_len(json_string_value(val), bytes);
    if (chars < min_chars || chars > max_chars) {
        if (min_chars == 0)
            sl_v_fail(v, field, "must be at most %zu characters", max_chars);
        else
            sl_v_fail(v, field, "must be %zu to %zu characters", min_chars, max_chars);
        return NULL;
    }
    if (len)
        *len = bytes;
    return json_string_value(val);
}

const char *sl_v_string(struct sl_validation *v, const json_t *obj, const char *field,
                        bool required, size_t min_chars, size_t max_chars, bool identifier,
                        const char *def)
{
    json_t *val = json_object_get(obj, field);
    if (!val) {
        if (required)
            sl_v_fail(v, field, "is required");
        return required ? NULL : def;
    }
    size_t len = 0;
    const char *s = sl_v_string_n(v, obj, field, required, min_chars, max_chars, &len);
    if (!s)
        return NULL;
    /* An identifier or any plain string may not hide a NUL. */
    if (strlen(s) != len) {
        sl_v_fail(v, field, "must not contain a NUL character");
        return NULL;
    }
    if (identifier && !sl_v_is_identifier(s)) {
        sl_v_fail(v, field, "may only contain letters, digits and _ . : -");
        return NULL;
    }
    return s;
}

bool sl_v_int(struct sl_validation *v, const json_t *obj, const char *field, bool required,
              int64_t min, int64_t max, int64_t def, int64_t *out)
{
    json_t *val = json_object_get(obj, field);
    if (!val) {
        *out = def;
        if (required)
            sl_v_fail(v, field, "is required");
        return !required;
    }
    /* Strict: a JSON integer, not a string or a float (COMPAT note in
     * docs/ARCHITECTURE.md). */
    if (!json_is_integer(val) || json_integer_value(val) < min || json_integer_value(val) > max) {
        fail_int(v, SL_V_BODY, field, min, max);
        return false;
    }
    *out = json_integer_value(val);
    return true;
}

bool sl_v_int_nullable(struct sl_validation *v, const json_t *obj, const char *field,
                       int64_t min, int64_t max, int64_t *out, bool *is_null)
{
    json_t *val = json_object_get(obj, field);
    *is_null = !val || json_is_null(val);
    if (*is_null)
        return true;
    return sl_v_int(v, obj, field, true, min, max, 0, out);
}

bool sl_v_bool(struct sl_validation *v, const json_t *obj, const char *field, bool def, bool *out)
{
    json_t *val = json_object_get(obj, field);
    if (!val) {
        *out = def;
        return true;
    }
    if (!json_is_boolean(val)) {
        sl_v_fail(v, field, "must be true or false");
        return false;
    }
    *out = json_is_true(val);
    return true;
}

bool sl_v_query_int(struct sl_validation *v, const char *text, const char *field, bool required,
                    int64_t min, int64_t max, int64_t def, int64_t *out)
{
    if (!text) {
        *out = def;
        if (required)
            sl_v_fail_in(v, SL_V_QUERY, field, "is required");
        return !required;
    }
    char *end = NULL;
    errno = 0;
    long long val = strtoll(text, &end, 10);
    if (errno || end == text || *end || val < min || val > max) {
        fail_int(v, SL_V_QUERY, field, min, max);
        return false;
    }
    *out = val;
    return true;
}
