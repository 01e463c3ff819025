/* The per-sandbox disk quota where the filesystem does not enforce it
 * (workspace/quota.h): each maintenance cycle counts every live sandbox's
 * tree, at most quota-inodes entries each, and marks those over it; the
 * file API then refuses their writes (507 SANDBOX_DISK_FULL). Commands are
 * not stopped: /healthz says so (resource_control.sandbox_disk_quota is
 * false unless btrfs qgroups enforce the bytes). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "service/internal.h"

/* The ids of the live sandboxes, copied so the walk runs without the lock. */
static char **live_ids(struct sl_service *svc, size_t *n)
{
    pthread_mutex_lock(&svc->live_lock);
    char **ids = calloc(svc->live_n + 1, sizeof(*ids));
    size_t k = 0;
    for (size_t i = 0; ids && i < svc->live_n; i++)
        if (!svc->live[i].destroying && (ids[k] = strdup(svc->live[i].sandbox_id)))
            k++;
    pthread_mutex_unlock(&svc->live_lock);
    *n = k;
    return ids;
}

static void mark(struct sl_service *svc, const char *sandbox_id, bool over)
{
    pthread_mutex_lock(&svc->live_lock);
    for (size_t i = 0; i < svc->live_n; i++)
        if (strcmp(svc->live[i].sandbox_id, sandbox_id) == 0)
            svc->live[i].over_disk_quota = over;
    pthread_mutex_unlock(&svc->live_lock);
}

void svc_disk_quota_cycle(struct sl_service *svc)
{
    const struct ws_quota *q = &svc->quota;
    /* Bytes under a qgroup are the filesystem's business; inodes never are. */
    int64_t bytes_cap = q->qgroups ? 0 : q->bytes;
    if (bytes_cap <= 0 && q->inodes <= 0)
        return;
    size_t n = 0;
    char **ids = live_ids(svc, &n);
    for (size_t i = 0; ids && i < n; i++) {
        struct sl_error err = {0};
        _cleanup_close_ int fd = ws_sandbox_open(svc->cfg->workspace_root, ids[i], &err);
        int64_t bytes = 0, inodes = 0;
        if (fd < 0) {
            free(ids[i]);
            continue;
        }
        int dir = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir >= 0) {
            (void)ws_quota_usage(dir, q->inodes, &bytes, &inodes);
            close(dir);
        }
        bool over = (bytes_cap > 0 && bytes >= bytes_cap) || (q->inodes > 0 && inodes >= q->inodes);
        mark(svc, ids[i], over);
        if (over)
            sl_warn("sandbox %s is over its disk quota (%lld bytes, %lld inodes counted): "
                    "writes through the API are refused",
                    ids[i], (long long)bytes, (long long)inodes);
        free(ids[i]);
    }
    free(ids);
}

int svc_disk_quota_check(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    bool over = false;
    pthread_mutex_lock(&svc->live_lock);
    for (size_t i = 0; i < svc->live_n; i++)
        if (strcmp(svc->live[i].sandbox_id, sandbox_id) == 0)
            over = svc->live[i].over_disk_quota;
    pthread_mutex_unlock(&svc->live_lock);
    if (over)
        return sl_error_set(err, SL_E_DISK_FULL, EDQUOT, "the sandbox's disk quota is exceeded");
    return 0;
}
