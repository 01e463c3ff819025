#include "common/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job {
    sl_pool_fn fn;
    void *arg;
};

struct sl_pool {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    struct job *ring; /* circular queue of max_queued slots */
    size_t cap, head, len;
    size_t running;
    bool stopping;
    pthread_t *threads;
    int nthreads;
    int max_threads; /* > nthreads while a lazy pool may still grow */
    char name[16];
};

static void *worker_main(void *arg)
{
    struct sl_pool *p = arg;
    pthread_setname_np(pthread_self(), p->name);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->len == 0 && !p->stopping)
            pthread_cond_wait(&p->nonempty, &p->lock);
        if (p->len == 0)
            break; /* stopping and drained */
        struct job j = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->len--;
        p->running++;
        pthread_mutex_unlock(&p->lock);
        j.fn(j.arg);
        pthread_mutex_lock(&p->lock);
        p->running--;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static struct sl_pool *pool_new(const char *name, int threads, int max_threads,
                                size_t max_queued)
{
    if (max_threads < 1 || max_queued < 1)
        return NULL;
    struct sl_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->cap = max_queued;
    p->ring = calloc(max_queued, sizeof(*p->ring));
    p->threads = calloc((size_t)max_threads, sizeof(*p->threads));
    p->max_threads = max_threads;
    if (!p->ring || !p->threads) {
        free(p->ring);
        free(p->threads);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->nonempty, NULL);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            sl_pool_free(p);
            return NULL;
        }
        p->nthreads++;
    }
    return p;
}

struct sl_pool *sl_pool_new(const char *name, int threads, size_t max_queued)
{
    return threads < 1 ? NULL : pool_new(name, threads, threads, max_queued);
}

struct sl_pool *sl_pool_new_lazy(const char *name, int max_threads, size_t max_queued)
{
    return pool_new(name, 0, max_threads, max_queued);
}

int sl_pool_submit(struct sl_pool *p, sl_pool_fn fn, void *arg)
{
    pthread_mutex_lock(&p->lock);
    if (p->stopping || p->len == p->cap) {
        pthread_mutex_unlock(&p->lock);
        errno = EAGAIN;
        return -1;
    }
    p->ring[(p->head + p->len) % p->cap] = (struct job){fn, arg};
    p->len++;
    /* A lazy pool grows while every thread it has is busy; a thread that
     * cannot be made leaves the job to the ones there are (none: refused). */
    if (p->nthreads < p->max_threads && p->len > (size_t)p->nthreads - p->running) {
        if (pthread_create(&p->threads[p->nthreads], NULL, worker_main, p) == 0) {
            p->nthreads++;
        } else if (p->nthreads == 0) {
            p->len--;
            pthread_mutex_unlock(&p->lock);
            errno = EAGAIN;
            return -1;
        }
    }
    pthread_cond_signal(&p->nonempty);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

size_t sl_pool_pending(struct sl_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->len + p->running;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void sl_pool_free(struct sl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->nonempty);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->nonempty);
    pthread_mutex_destroy(&p->lock);
    free(p->ring);
    free(p->threads);
    free(p);
}
