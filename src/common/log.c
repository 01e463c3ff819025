#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static enum sl_log_level min_level = SL_LOG_INFO;
static enum sl_log_format format = SL_LOG_TEXT;
static const char *const LEVEL_NAMES[] = {"debug", "info", "warn", "error"};

void sl_log_set_level(enum sl_log_level level)
{
    min_level = level;
}
void sl_log_set_format(enum sl_log_format f)
{
    format = f;
}
bool sl_log_enabled(enum sl_log_level level)
{
    return level >= min_level;
}

int sl_log_parse_level(const char *name, enum sl_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(name, LEVEL_NAMES[i]) == 0) {
            *out = (enum sl_log_level)i;
            return 0;
        }
    if (strcasecmp(name, "warning") == 0) {
        *out = SL_LOG_WARN;
        return 0;
    }
    return -1;
}

/* A line being built: bounded, truncated rather than split. */
struct line {
    char buf[4096];
    size_t n;
};

/* Room kept at the end of every line for its closing ("}, and the NUL):
 * a long line is cut inside a value, never left without its end. */
#define LINE_TAIL 4
/* The longest value a field shows; longer ones are cut (a sandbox
 * chooses its argv[0], for one). */
#define VALUE_MAX 512

static void put(struct line *l, const char *s, size_t len)
{
    size_t room = sizeof(l->buf) - LINE_TAIL - l->n;
    if (len > room)
        len = room;
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

static void putf(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct line *l, const char *fmt, ...)
{
    size_t room = sizeof(l->buf) - LINE_TAIL - l->n;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(l->buf + l->n, room, fmt, ap);
    va_end(ap);
    if (w > 0)
        l->n += (size_t)w < room ? (size_t)w : room - 1;
}

static size_t room(const struct line *l)
{
    return sizeof(l->buf) - LINE_TAIL - l->n;
}

/* A JSON string, quotes included: control characters as \u00XX, at most
 * `max` bytes of s (cut at a character boundary). When the line runs
 * out of room it is cut there too, and still closed: the closing quote
 * always fits (room is checked before every character). */
static void put_json_string(struct line *l, const char *s, size_t max)
{
    put(l, "\"", 1);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++, n++) {
        char e[8];
        size_t len = 1;
        if (*p == '"' || *p == '\\') {
            e[0] = '\\';
            e[1] = (char)*p;
            len = 2;
        } else if (*p < 0x20) {
            len = (size_t)snprintf(e, sizeof(e), "\\u%04x", *p);
        } else {
            e[0] = (char)*p;
        }
        bool boundary = (*p & 0xC0) != 0x80;
        if (boundary && (n >= max || room(l) < len + 4)) {
            put(l, "...", room(l) >= 4 ? 3 : 0);
            break;
        }
        if (room(l) < len + 1)
            break; /* inside a character: it is cut with the line */
        put(l, e, len);
    }
    l->buf[l->n++] = '"'; /* within LINE_TAIL */
}

/* A text value: bare when it is one plain word, else quoted with \" and
 * \\ escaped and control characters shown as \xNN, so a value can never
 * start a new line or fake another field. */
static void put_text_value(struct line *l, const char *s)
{
    bool plain = *s != '\0';
    for (const unsigned char *p = (const unsigned char *)s; *p && plain; p++)
        plain = *p > ' ' && *p != '"' && *p != '\\' && *p != '=' && *p < 0x7f;
    if (plain) {
        puts_(l, s);
        return;
    }
    put(l, "\"", 1);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++, n++) {
        if (n >= VALUE_MAX && (*p & 0xC0) != 0x80) {
            put(l, "...", 3);
            break;
        }
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            put(l, e, 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            putf(l, "\\x%02x", *p);
        } else {
            put(l, (const char *)p, 1);
        }
    }
    put(l, "\"", 1);
}

static void begin(struct line *l, enum sl_log_level level)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[64];
    snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    l->n = 0;
    if (format == SL_LOG_JSON)
        putf(l, "{\"ts\":\"%s\",\"level\":\"%s\"", when, LEVEL_NAMES[level]);
    else
        putf(l, "%s %s ", when, LEVEL_NAMES[level]);
}

/* One write per line keeps lines whole across threads. */
static void finish(struct line *l)
{
    /* The tail kept free by put(): a cut line still closes. */
    if (format == SL_LOG_JSON)
        l->buf[l->n++] = '}';
    l->buf[l->n] = '\0';
    fprintf(stderr, "%s\n", l->buf);
}

void sl_log(enum sl_log_level level, const char *fmt, ...)
{
    if (level < min_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct line l;
    begin(&l, level);
    if (format == SL_LOG_JSON) {
        puts_(&l, ",\"msg\":");
        put_json_string(&l, msg, sizeof(msg));
    } else {
        /* A message is the service's own text; a newline in it (from an
         * error string) still may not start a new line. */
        for (char *p = msg; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        puts_(&l, msg);
    }
    finish(&l);
}

void sl_log_event(enum sl_log_level level, const char *event, const struct sl_log_field *fields,
                  size_t n)
{
    if (level < min_level)
        return;
    struct line l;
    begin(&l, level);
    if (format == SL_LOG_JSON) {
        putf(&l, ",\"event\":\"%s\"", event);
        for (size_t i = 0; i < n; i++) {
            const struct sl_log_field *f = &fields[i];
            if (!f->str && !f->is_num)
                continue;
            /* A field starts only with room for its key and a short value:
             * the line stays valid JSON, losing its last fields. */
            if (room(&l) < strlen(f->key) + 32)
                break;
            putf(&l, ",\"%s\":", f->key);
            if (f->str)
                put_json_string(&l, f->str, VALUE_MAX);
            else
                putf(&l, "%lld", (long long)f->num);
        }
    } else {
        puts_(&l, event);
        for (size_t i = 0; i < n; i++) {
            const struct sl_log_field *f = &fields[i];
            if (!f->str && !f->is_num)
                continue;
            putf(&l, " %s=", f->key);
            if (f->str)
                put_text_value(&l, f->str);
            else
                putf(&l, "%lld", (long long)f->num);
        }
    }
    finish(&l);
}
