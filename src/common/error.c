#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int error_vset(struct sl_error *err, const char *code, int errnum, const char *fmt,
                      va_list ap)
{
    if (!err)
        return -1;
    err->code = code ? code : SL_E_INTERNAL;
    err->errnum = errnum;
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    err->detail[0] = '\0';
    err->limit = NULL;
    err->limit_value = 0;
    return -1;
}

int sl_error_limit(struct sl_error *err, const char *limit, int64_t value)
{
    if (err) {
        err->limit = limit;
        err->limit_value = value;
    }
    return -1;
}

int sl_error_set(struct sl_error *err, const char *code, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(err, code, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

int sl_error_errno(struct sl_error *err, const char *code, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    error_vset(err, code, saved, fmt, ap);
    va_end(ap);
    if (err)
        snprintf(err->detail, sizeof(err->detail), "%s: %s", err->message, strerror(saved));
    errno = saved;
    return -1;
}

int sl_error_wrap(struct sl_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char ctx[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof(ctx), fmt, ap);
    va_end(ap);
    char prev[sizeof(err->detail)];
    snprintf(prev, sizeof(prev), "%s", err->detail[0] ? err->detail : err->message);
    snprintf(err->detail, sizeof(err->detail), "%.255s: %.500s", ctx, prev);
    return -1;
}

int sl_error_recode(struct sl_error *err, const char *code, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prev[sizeof(err->detail)];
    if (err->code)
        snprintf(prev, sizeof(prev), "%.63s: %.600s", err->code,
                 err->detail[0] ? err->detail : err->message);
    else
        snprintf(prev, sizeof(prev), "%s", err->detail);
    int errnum = err->errnum;
    va_list ap;
    va_start(ap, fmt);
    error_vset(err, code, errnum, fmt, ap);
    va_end(ap);
    snprintf(err->detail, sizeof(err->detail), "%s", prev);
    return -1;
}

void sl_error_clear(struct sl_error *err)
{
    if (!err)
        return;
    err->code = NULL;
    err->errnum = 0;
    err->message[0] = '\0';
    err->detail[0] = '\0';
}

bool sl_error_is(const struct sl_error *err, const char *code)
{
    return err && err->code && code && strcmp(err->code, code) == 0;
}

const char *sl_error_text(const struct sl_error *err)
{
    return err->detail[0] ? err->detail : err->message;
}
