/* The per-sandbox disk quota where the filesystem does not enforce it
 * (workspace/quota.h): each maintenance cycle counts every live sandbox's
 * tree, at most quota-inodes entries each, and marks those over it; the
 * file API then refuses their writes (507 SANDBOX_DISK_FULL). Commands are
 * not stopped: /healthz says so (resource_control.sandbox_disk_quota is
 * false unless btrfs qgroups enforce the bytes). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "service/internal.h"
#include "service/tenants.h"

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

/* The most entries one sandbox's tree is counted to for its tenant's
 * workspace_bytes when no inode quota bounds the walk. */
#define TENANT_COUNT_MAX_INODES 1000000

/* A tenant's workspace_bytes is its sandboxes' trees on this worker, live
 * or suspended: every directory of the workspace root named
 * "<tenant_id>~…" of a tenant with that limit is counted, and the sums
 * replace the last cycle's. */
static void tenant_disk_cycle(struct sl_service *svc)
{
    if (!svc->store->tenancy)
        return;
    _cleanup_close_ int root = open(svc->cfg->workspace_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = root >= 0 ? fdopendir(dup(root)) : NULL;
    if (!d)
        return;
    struct svc_tenant_disk sums[SVC_TENANT_LIMITS_SLOTS];
    size_t n = 0;
    int64_t inode_cap = svc->quota.inodes > 0 ? svc->quota.inodes : TENANT_COUNT_MAX_INODES;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t quota[SL_LIMIT_COUNT];
        char tid[33];
        struct sl_error err = {0};
        if (e->d_name[0] == '.' || !strchr(e->d_name, SL_TENANT_SEP) ||
            svc_tenant_limits(svc, e->d_name, quota, tid, &err) != 1 ||
            quota[SL_LIMIT_WORKSPACE_BYTES] < 0)
            continue;
        int dir = openat(root, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int64_t bytes = 0, inodes = 0;
        if (dir < 0)
            continue;
        (void)ws_quota_usage(dir, inode_cap, &bytes, &inodes);
        close(dir);
        size_t i = 0;
        while (i < n && strcmp(sums[i].tenant_id, tid) != 0)
            i++;
        if (i == n) {
            if (n == SVC_TENANT_LIMITS_SLOTS)
                continue; /* more limited tenants on one worker than counted */
            snprintf(sums[n].tenant_id, sizeof(sums[n].tenant_id), "%s", tid);
            sums[n++].bytes = 0;
        }
        sums[i].bytes += bytes;
    }
    closedir(d);
    pthread_mutex_lock(&svc->limits_lock);
    memcpy(svc->tenant_disk, sums, n * sizeof(sums[0]));
    svc->tenant_disk_n = n;
    pthread_mutex_unlock(&svc->limits_lock);
}

int svc_tenant_disk_check(struct sl_service *svc, const char *sandbox_id, struct sl_error *err)
{
    int64_t quota[SL_LIMIT_COUNT];
    char tid[33];
    int r = svc_tenant_limits(svc, sandbox_id, quota, tid, err);
    if (r <= 0 || quota[SL_LIMIT_WORKSPACE_BYTES] < 0)
        return r < 0 ? -1 : 0;
    int64_t used = 0;
    pthread_mutex_lock(&svc->limits_lock);
    for (size_t i = 0; i < svc->tenant_disk_n; i++)
        if (strcmp(svc->tenant_disk[i].tenant_id, tid) == 0)
            used = svc->tenant_disk[i].bytes;
    pthread_mutex_unlock(&svc->limits_lock);
    if (used < quota[SL_LIMIT_WORKSPACE_BYTES])
        return 0;
    sl_error_set(err, SL_E_TENANT_QUOTA_EXCEEDED, 0,
                 "the tenant's quota of %lld workspace_bytes is used up (%lld counted): delete "
                 "files or release sandboxes",
                 (long long)quota[SL_LIMIT_WORKSPACE_BYTES], (long long)used);
    return sl_error_limit(err, "workspace_bytes", quota[SL_LIMIT_WORKSPACE_BYTES]);
}

void svc_disk_quota_cycle(struct sl_service *svc)
{
    tenant_disk_cycle(svc);
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
    return svc_tenant_disk_check(svc, sandbox_id, err);
}
