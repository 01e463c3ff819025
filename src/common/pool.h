/* A fixed pool of worker threads with a bounded FIFO queue of jobs.
 *
 * Used where work may block (a database transaction, a sandbox build, a
 * file write) but must not hold the thread of an event loop: the HTTP
 * server's request handlers and the completions of executions. The pool
 * owns its threads and queue; jobs own their argument. */
#ifndef SL_COMMON_POOL_H
#define SL_COMMON_POOL_H

#include <stddef.h>

struct sl_pool;

typedef void (*sl_pool_fn)(void *arg);

/* `threads` workers, at most `max_queued` jobs waiting. NULL on failure. */
struct sl_pool *sl_pool_new(const char *name, int threads, size_t max_queued);
/* A pool that starts no thread and makes one, up to max_threads, whenever
 * a job finds every thread busy: for work most processes never get (the
 * forwards of a replica that owns everything it is asked about). Threads
 * stay once made. */
struct sl_pool *sl_pool_new_lazy(const char *name, int max_threads, size_t max_queued);
/* Queue a job. -1 (errno EAGAIN) when the queue is full or the pool is
 * stopping: the caller still owns arg. */
int sl_pool_submit(struct sl_pool *p, sl_pool_fn fn, void *arg);
/* Jobs queued or running now. */
size_t sl_pool_pending(struct sl_pool *p);
/* Run every queued job, join the threads, free the pool. */
void sl_pool_free(struct sl_pool *p);

#endif
