/* A fixed pool of connections to a database server, shared by the
 * PostgreSQL and MySQL drivers (store/sql_driver.h).
 *
 * Connections are opened on first use. acquire() hands one to a single
 * store method, waiting for a free one at most wait_us; one that broke, that
 * the driver finds dead, or that is older than recycle_us is reopened first.
 * While the server cannot be reached one attempt a second is made and every
 * other acquire() fails at once with METADATA_UNAVAILABLE, so requests
 * answer 503 quickly, and the first attempt that succeeds brings the
 * service back without a restart.
 *
 * The driver's connection struct begins with struct sl_sql_conn; the pool
 * allocates `size` of them of conn_size bytes each and owns the bookkeeping
 * in the head (busy, open, broken, opened_us). */
#ifndef SL_STORE_SQL_POOL_H
#define SL_STORE_SQL_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/sql_driver.h"

struct sl_sql_pool_ops {
    /* Open c (its head is zeroed but for db): 0, or -1 with the driver's
     * reason in text. */
    int (*open)(struct sl_sql_conn *c, char *text, size_t size);
    void (*close)(struct sl_sql_conn *c);
    /* Whether an open connection can still be used (cheap, no round trip). */
    bool (*alive)(struct sl_sql_conn *c);
};

struct sl_sql_pool {
    const struct sl_sql_pool_ops *ops;
    struct sl_sql_db *db;
    pthread_mutex_t lock;
    pthread_cond_t freed;
    char *conns; /* size * conn_size bytes */
    size_t conn_size;
    int size;
    int64_t wait_us;
    int64_t recycle_us; /* 0 = never */
    /* Under lock: when the next connection attempt may be made after one
     * failed, and what the last failure said (without the address). */
    int64_t retry_at_us;
    char why[256];
    atomic_bool failing;
};

int sl_sql_pool_init(struct sl_sql_pool *p, struct sl_sql_db *db,
                     const struct sl_sql_pool_ops *ops, int size, size_t conn_size,
                     int64_t wait_us, int64_t recycle_us);
void sl_sql_pool_destroy(struct sl_sql_pool *p);

struct sl_sql_conn *sl_sql_pool_acquire(struct sl_sql_pool *p, struct sl_error *err);
void sl_sql_pool_release(struct sl_sql_pool *p, struct sl_sql_conn *c);

/* A statement's outcome for /healthz: ok clears the failure, else text
 * (a driver message) becomes it. */
void sl_sql_pool_note(struct sl_sql_pool *p, bool ok, const char *text);
bool sl_sql_pool_health(struct sl_sql_pool *p, char *why, size_t size);

#endif
