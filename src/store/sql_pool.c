/* The connection pool of the server drivers (PostgreSQL, MySQL):
 * store/sql_pool.h. */
#include "store/sql_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

/* How often a server that could not be reached is tried again. */
#define RETRY_US 1000000

static struct sl_sql_conn *conn_at(struct sl_sql_pool *p, int i)
{
    return (struct sl_sql_conn *)(p->conns + (size_t)i * p->conn_size);
}

int sl_sql_pool_init(struct sl_sql_pool *p, struct sl_sql_db *db,
                     const struct sl_sql_pool_ops *ops, int size, size_t conn_size,
                     int64_t wait_us, int64_t recycle_us)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    p->ops = ops;
    p->db = db;
    p->size = size > 0 ? size : 1;
    p->conn_size = conn_size;
    p->wait_us = wait_us;
    p->recycle_us = recycle_us;
    p->conns = calloc((size_t)p->size, conn_size);
    if (!p->conns)
        return -1;
    for (int i = 0; i < p->size; i++)
        conn_at(p, i)->db = db;
    return 0;
}

void sl_sql_pool_destroy(struct sl_sql_pool *p)
{
    for (int i = 0; p->conns && i < p->size; i++) {
        struct sl_sql_conn *c = conn_at(p, i);
        if (c->open)
            p->ops->close(c);
    }
    free(p->conns);
    p->conns = NULL;
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->freed);
}

/* What /healthz says (it needs no token): the driver's reason without the
 * server's address ("connection to server at "h", port p failed: X"). */
static void health_text(const char *text, char *out, size_t size)
{
    char line[256];
    snprintf(line, sizeof(line), "%s", text && *text ? text : "unknown error");
    line[strcspn(line, "\n")] = '\0';
    const char *failed = strstr(line, " failed: ");
    snprintf(out, size, "%s", failed ? failed + 9 : line);
    /* MySQL: "Can't connect to server on '10.0.0.5' (115)": the words
     * " on '<address>'" go. */
    for (char *q = out; (q = strstr(q, " on '")) != NULL;) {
        char *close = strchr(q + 5, '\'');
        if (!close)
            break;
        memmove(q, close + 1, strlen(close + 1) + 1);
    }
}

void sl_sql_pool_note(struct sl_sql_pool *p, bool ok, const char *text)
{
    if (ok) {
        atomic_store(&p->failing, false);
        return;
    }
    pthread_mutex_lock(&p->lock);
    health_text(text, p->why, sizeof(p->why));
    pthread_mutex_unlock(&p->lock);
    atomic_store(&p->failing, true);
}

bool sl_sql_pool_health(struct sl_sql_pool *p, char *why, size_t size)
{
    bool failing = atomic_load(&p->failing);
    if (failing && why && size) {
        pthread_mutex_lock(&p->lock);
        snprintf(why, size, "%s", p->why);
        pthread_mutex_unlock(&p->lock);
    }
    return !failing;
}

/* Open c, unless an attempt failed less than RETRY_US ago. */
static int conn_open(struct sl_sql_pool *p, struct sl_sql_conn *c, struct sl_error *err)
{
    pthread_mutex_lock(&p->lock);
    bool wait = sl_mono_us() < p->retry_at_us;
    char why[256];
    snprintf(why, sizeof(why), "%s", p->why);
    pthread_mutex_unlock(&p->lock);
    if (wait)
        return sl_sql_fail(err, p->db->backend, "connect (retried once a second)", why);
    char text[256] = "";
    if (p->ops->open(c, text, sizeof(text)) < 0) {
        pthread_mutex_lock(&p->lock);
        p->retry_at_us = sl_mono_us() + RETRY_US;
        health_text(text, p->why, sizeof(p->why));
        pthread_mutex_unlock(&p->lock);
        atomic_store(&p->failing, true);
        return sl_sql_fail(err, p->db->backend, "connect", text);
    }
    c->open = true;
    c->broken = false;
    c->opened_us = sl_mono_us();
    return 0;
}

struct sl_sql_conn *sl_sql_pool_acquire(struct sl_sql_pool *p, struct sl_error *err)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    int64_t ns = deadline.tv_nsec + (p->wait_us % 1000000) * 1000;
    deadline.tv_sec += (time_t)(p->wait_us / 1000000 + ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);
    struct sl_sql_conn *c = NULL;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        for (int i = 0; i < p->size && !c; i++)
            if (!conn_at(p, i)->busy)
                c = conn_at(p, i);
        if (c || pthread_cond_timedwait(&p->freed, &p->lock, &deadline) == ETIMEDOUT)
            break;
    }
    if (c)
        c->busy = true;
    pthread_mutex_unlock(&p->lock);
    if (!c) {
        char text[96];
        snprintf(text, sizeof(text), "all %d connections of the pool stayed busy", p->size);
        sl_sql_fail(err, p->db->backend, "acquire", text);
        return NULL;
    }
    bool stale = c->open && p->recycle_us > 0 && sl_mono_us() - c->opened_us > p->recycle_us;
    if (c->open && (c->broken || stale || !p->ops->alive(c))) {
        p->ops->close(c);
        c->open = false;
    }
    if (!c->open && conn_open(p, c, err) < 0) {
        sl_sql_pool_release(p, c);
        return NULL;
    }
    return c;
}

void sl_sql_pool_release(struct sl_sql_pool *p, struct sl_sql_conn *c)
{
    pthread_mutex_lock(&p->lock);
    c->busy = false;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->lock);
}
