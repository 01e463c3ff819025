/* Completion writes that failed (a full disk, a locked or read-only
 * database) are kept here and written again by the service loop until they
 * land. The answer the client got stays true; until the write lands the
 * stored record says RUNNING, and the admission rules that read it (scope,
 * parallel limit, suspend) see a command that is not there. Retrying is
 * what un-wedges the sandbox once the database can be written again; no
 * in-memory state waits on it.
 *
 * Bounded: at most SVC_FINISH_RETRY_MAX records are held (a newer failure
 * past that is logged and dropped: the restart's WORKER_LOST sweep then
 * closes the record), each retried for at most SVC_FINISH_RETRY_FOR_US. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "service/internal.h"

struct svc_pending_finish {
    struct sl_exec_record rec; /* a deep copy */
    int64_t first_failure_us;  /* monotonic */
    unsigned attempts;
    struct svc_pending_finish *next;
};

void svc_finish_retry_add(struct sl_service *svc, const struct sl_exec_record *rec)
{
    struct svc_pending_finish *p = calloc(1, sizeof(*p));
    if (!p || sl_exec_record_copy(&p->rec, rec) < 0) {
        free(p);
        sl_errorlog("exec %s/%s: out of memory keeping its result for a retry: dropped",
                    rec->sandbox_id, rec->exec_id);
        return;
    }
    p->first_failure_us = sl_mono_us();
    pthread_mutex_lock(&svc->finish_lock);
    bool full = svc->finish_pending_n >= SVC_FINISH_RETRY_MAX;
    if (!full) {
        p->next = svc->finish_pending;
        svc->finish_pending = p;
        svc->finish_pending_n++;
    }
    pthread_mutex_unlock(&svc->finish_lock);
    if (full) {
        sl_errorlog("exec %s/%s: %d results already wait for the database: this one is dropped "
                    "(a restart marks it WORKER_LOST)",
                    rec->sandbox_id, rec->exec_id, SVC_FINISH_RETRY_MAX);
        sl_exec_record_clear(&p->rec);
        free(p);
        return;
    }
    /* The loop retries every second while anything is pending. */
    pthread_mutex_lock(&svc->loop_lock);
    pthread_cond_signal(&svc->loop_cond);
    pthread_mutex_unlock(&svc->loop_lock);
}

bool svc_finish_retry_holds(struct sl_service *svc, const char *sandbox_id)
{
    bool found = false;
    pthread_mutex_lock(&svc->finish_lock);
    for (struct svc_pending_finish *p = svc->finish_pending; p && !found; p = p->next)
        found = strcmp(p->rec.sandbox_id, sandbox_id) == 0;
    pthread_mutex_unlock(&svc->finish_lock);
    return found;
}

size_t svc_finish_retry_pending(struct sl_service *svc)
{
    pthread_mutex_lock(&svc->finish_lock);
    size_t n = svc->finish_pending_n;
    pthread_mutex_unlock(&svc->finish_lock);
    return n;
}

void svc_finish_retry_run(struct sl_service *svc)
{
    pthread_mutex_lock(&svc->finish_lock);
    struct svc_pending_finish *list = svc->finish_pending;
    svc->finish_pending = NULL;
    svc->finish_pending_n = 0;
    pthread_mutex_unlock(&svc->finish_lock);

    struct svc_pending_finish *keep = NULL;
    size_t kept = 0;
    bool failing = false;
    while (list) {
        struct svc_pending_finish *p = list;
        list = p->next;
        struct sl_error err = {0};
        /* One failure per pass is enough to know the database is still
         * refusing: the rest wait for the next pass. */
        if (!failing && svc->store->ops->exec_finish(svc->store, &p->rec, sl_now_us(), &err) == 0) {
            sl_info("exec %s/%s: result recorded after %u retries", p->rec.sandbox_id,
                    p->rec.exec_id, p->attempts + 1);
            sl_exec_record_clear(&p->rec);
            free(p);
            continue;
        }
        if (!failing) {
            p->attempts++;
            failing = true;
        }
        if (sl_mono_us() - p->first_failure_us > SVC_FINISH_RETRY_FOR_US) {
            sl_errorlog("exec %s/%s: result still not recorded after %u tries (%s): given up "
                        "(a restart marks it WORKER_LOST)",
                        p->rec.sandbox_id, p->rec.exec_id, p->attempts, sl_error_text(&err));
            sl_exec_record_clear(&p->rec);
            free(p);
            continue;
        }
        p->next = keep;
        keep = p;
        kept++;
    }
    if (!keep)
        return;
    pthread_mutex_lock(&svc->finish_lock);
    struct svc_pending_finish *tail = keep;
    while (tail->next)
        tail = tail->next;
    tail->next = svc->finish_pending;
    svc->finish_pending = keep;
    svc->finish_pending_n += kept;
    pthread_mutex_unlock(&svc->finish_lock);
}

void svc_finish_retry_free(struct sl_service *svc)
{
    struct svc_pending_finish *p = svc->finish_pending;
    while (p) {
        struct svc_pending_finish *next = p->next;
        sl_errorlog("exec %s/%s: result never recorded (the database refused it until shutdown)",
                    p->rec.sandbox_id, p->rec.exec_id);
        sl_exec_record_clear(&p->rec);
        free(p);
        p = next;
    }
    svc->finish_pending = NULL;
    svc->finish_pending_n = 0;
}
