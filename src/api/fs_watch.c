/* File watching as Server-Sent Events (fs_watch.h). */
#include "api/fs_watch.h"
#include "api/stream_slots.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "common/syscalls.h"
#include "common/util.h"
#include "config/config.h"

#define RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
#define MASK                                                                                       \
    (IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |            \
     IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
/* Encoded events queued per watch, at most (bytes): past it, dropped. */
#define QUEUE_BYTES (256 * 1024)

struct watch_dir {
    int wd;
    char *rel; /* "" for the root, else "a/b" */
};

struct fs_watch {
    struct sl_body_source src;
    struct sl_slot slot; /* in reg.open */
    int ino;             /* its inotify instance */
    int root;            /* the sandbox root (O_PATH): directories open beneath it */
    char *canonical;     /* "/workspace/…": canonical + 1 is its path beneath root */
    bool recursive;
    struct watch_dir *dirs;
    size_t ndirs;
    /* lock: the queue, shared by the watcher thread and the reader. */
    pthread_mutex_t lock;
    struct sl_buf queue; /* encoded events */
    size_t queued;       /* events in it */
    uint64_t dropped, seq;
    char last_modify[512]; /* a queued modify of this path: the next one coalesces */
    bool ended, end_sent, waiting, keepalive_due;
    int64_t last_send_us;
    char *sending; /* what the reader hands out (taken from the queue) */
    size_t sending_len, sending_pos;
    int refs; /* the registry's and the reader's */
    struct sl_watch_encoder enc; /* the framing: SSE unless another's */
    bool begun;                  /* enc.begin's bytes are out */
};

/* ---- Server-Sent Events, the API's own framing (fs_watch.h) ---- */

static int sse_event(void *ctx, uint64_t seq, const char *type, const char *kind,
                     const char *path, const char *from, struct sl_buf *out)
{
    (void)ctx;
    json_t *doc = json_pack("{s:s,s:s,s:s}", "type", type, "path", path, "kind", kind);
    if (doc && from)
        json_object_set_new(doc, "from", json_string(from));
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    char head[64];
    int n = snprintf(head, sizeof(head), "id: %llu\nevent: fs\ndata: ", (unsigned long long)seq);
    int rc = text && sl_buf_append(out, head, (size_t)n) == 0 &&
                     sl_buf_append(out, text, strlen(text)) == 0 &&
                     sl_buf_append(out, "\n\n", 2) == 0
                 ? 0
                 : -1;
    free(text);
    return rc;
}

static int sse_overflow(void *ctx, uint64_t dropped, struct sl_buf *out)
{
    (void)ctx;
    char line[96];
    int n = snprintf(line, sizeof(line), "event: overflow\ndata: {\"dropped\":%llu}\n\n",
                     (unsigned long long)dropped);
    return sl_buf_append(out, line, (size_t)n);
}

static int sse_keepalive(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    return sl_buf_append(out, ": keepalive\n\n", 13);
}

static int sse_end(void *ctx, struct sl_buf *out)
{
    (void)ctx;
    static const char end[] = "event: end\ndata: {\"reason\":\"deleted\"}\n\n";
    return sl_buf_append(out, end, sizeof(end) - 1);
}

static const struct sl_watch_encoder SSE = {
    .event = sse_event, .overflow = sse_overflow, .keepalive = sse_keepalive, .end = sse_end};

static struct {
    pthread_mutex_t lock;
    struct sl_slots open;
    int64_t keepalive_us;
    int epfd, wake;
    pthread_t thread;
    bool started, stopping;
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER,
         .open = {.code = SL_E_WATCH_LIMIT,
                  .what = "file watches",
                  .sandbox_var = "SANDBOX_MAX_WATCHES_PER_SANDBOX",
                  .worker_var = "SANDBOX_MAX_WATCHES"},
         .epfd = -1,
         .wake = -1};

#define WATCH_OF(p) SL_SLOT_OWNER(p, struct fs_watch, slot)

static void watch_put(struct fs_watch *w)
{
    pthread_mutex_lock(&w->lock);
    bool last = --w->refs == 0;
    pthread_mutex_unlock(&w->lock);
    if (!last)
        return;
    for (size_t i = 0; i < w->ndirs; i++)
        free(w->dirs[i].rel);
    free(w->dirs);
    if (w->ino >= 0)
        close(w->ino);
    if (w->root >= 0)
        close(w->root);
    sl_buf_free(&w->queue);
    free(w->sending);
    free(w->canonical);
    if (w->enc.release)
        w->enc.release(w->enc.ctx);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* ---- directories ---- */

/* A directory of the watch (rel "" its own), opened beneath the sandbox
 * root without following any link; -1 when it cannot be. */
static int open_rel(const struct fs_watch *w, const char *rel)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s%s%s", w->canonical + 1, rel[0] ? "/" : "", rel) >=
        sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return sl_openat2(w->root, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, RESOLVE);
}

static int add_dir(struct fs_watch *w, const char *rel)
{
    if (w->ndirs >= SL_WATCH_MAX_DIRS)
        return -1;
    int fd = open_rel(w, rel);
    if (fd < 0)
        return -1;
    /* The descriptor's own directory, whatever its path names now. */
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int wd = inotify_add_watch(w->ino, self, MASK);
    close(fd);
    if (wd < 0)
        return -1;
    struct watch_dir *grown = realloc(w->dirs, (w->ndirs + 1) * sizeof(*grown));
    char *copy = strdup(rel);
    if (!grown || !copy) {
        free(copy);
        if (grown)
            w->dirs = grown;
        inotify_rm_watch(w->ino, wd);
        return -1;
    }
    w->dirs = grown;
    w->dirs[w->ndirs++] = (struct watch_dir){.wd = wd, .rel = copy};
    return 0;
}

static void enqueue(struct fs_watch *w, const char *type, const char *kind, const char *path,
                    const char *from);

/* Every directory below rel, depth first; -1 past SL_WATCH_MAX_DIRS. With
 * report (a directory that just appeared, under w->lock), what is already
 * in it is reported created: it was, after the watch began, and before
 * its own watch could see it. */
static int add_tree(struct fs_watch *w, const char *rel, bool report)
{
    if (add_dir(w, rel) < 0)
        return -1;
    int fd = open_rel(w, rel);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0; /* gone meanwhile: nothing below it */
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[4096];
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) >=
            sizeof(sub))
            continue;
        if (report) {
            char path[4200];
            snprintf(path, sizeof(path), "%s/%s", w->canonical, sub);
            enqueue(w, "create", e->d_type == DT_DIR ? "directory" : "file", path, NULL);
        }
        if (e->d_type == DT_DIR)
            rc = add_tree(w, sub, report);
    }
    closedir(d);
    return rc;
}

static const char *dir_of(const struct fs_watch *w, int wd)
{
    for (size_t i = 0; i < w->ndirs; i++)
        if (w->dirs[i].wd == wd)
            return w->dirs[i].rel;
    return NULL;
}

/* ---- the queue ---- */

/* Under w->lock: one encoded event, or counted as dropped. */
static void enqueue(struct fs_watch *w, const char *type, const char *kind, const char *path,
                    const char *from)
{
    if (strcmp(type, "modify") == 0 && strcmp(w->last_modify, path) == 0)
        return; /* the same file written again before the reader came */
    size_t before = w->queue.len;
    if (w->queued >= SL_WATCH_QUEUE ||
        w->enc.event(w->enc.ctx, w->seq + 1, type, kind, path, from, &w->queue) < 0) {
        w->queue.len = before; /* nothing half-written stays */
        w->dropped++;
    } else {
        w->seq++;
        w->queued++;
        snprintf(w->last_modify, sizeof(w->last_modify), "%s",
                 strcmp(type, "modify") == 0 ? path : "");
    }
}

/* Under w->lock: whether the reader waits, and is now the caller's to wake
 * (after the lock: it is suspended until then, and only this wakes it). */
static bool take_waiting(struct fs_watch *w)
{
    bool was = w->waiting;
    w->waiting = false;
    return was;
}

/* ---- the watcher thread ---- */

static void full_path(const struct fs_watch *w, const char *dir, const char *name, char *out,
                      size_t size)
{
    snprintf(out, size, "%s%s%s%s%s", w->canonical, dir[0] ? "/" : "", dir, name[0] ? "/" : "",
             name);
}

/* What one inotify read said, into the queue. */
static void take_events(struct fs_watch *w, const char *buf, size_t len)
{
    char from[4096] = "", from_kind[16] = "";
    uint32_t from_cookie = 0;
    for (size_t at = 0; at + sizeof(struct inotify_event) <= len;) {
        const struct inotify_event *ev = (const void *)(buf + at);
        at += sizeof(*ev) + ev->len;
        if (ev->mask & IN_Q_OVERFLOW) {
            w->dropped++;
            continue;
        }
        const char *dir = dir_of(w, ev->wd);
        if (!dir)
            continue;
        if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
            if (!dir[0])
                w->ended = true; /* the watched directory itself */
            continue;
        }
        const char *name = ev->len ? ev->name : "";
        const char *kind = ev->mask & IN_ISDIR ? "directory" : "file";
        char path[4096];
        full_path(w, dir, name, path, sizeof(path));
        if (from[0] && !((ev->mask & IN_MOVED_TO) && ev->cookie == from_cookie)) {
            enqueue(w, "delete", from_kind, from, NULL); /* moved out of the tree */
            from[0] = '\0';
        }
        if (ev->mask & IN_MOVED_FROM) {
            snprintf(from, sizeof(from), "%s", path);
            snprintf(from_kind, sizeof(from_kind), "%s", kind);
            from_cookie = ev->cookie;
        } else if (ev->mask & IN_MOVED_TO) {
            enqueue(w, from[0] ? "move" : "create", kind, path, from[0] ? from : NULL);
            from[0] = '\0';
        } else if (ev->mask & IN_CREATE) {
            enqueue(w, "create", kind, path, NULL);
        } else if (ev->mask & IN_DELETE) {
            enqueue(w, "delete", kind, path, NULL);
        } else if (ev->mask & IN_MODIFY) {
            enqueue(w, "modify", kind, path, NULL);
        }
        /* A new directory of a recursive watch is watched too, and what
         * was made in it before that is reported (add_tree). */
        if (w->recursive && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
            char rel[4096];
            snprintf(rel, sizeof(rel), "%s%s%s", dir, dir[0] ? "/" : "", name);
            if (add_tree(w, rel, true) < 0)
                w->dropped++;
        }
    }
    if (from[0])
        enqueue(w, "delete", from_kind, from, NULL);
}

static void *watcher_main(void *arg)
{
    (void)arg;
    char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        struct epoll_event ev[32];
        int n = epoll_wait(reg.epfd, ev, 32, 1000);
        pthread_mutex_lock(&reg.lock);
        if (reg.stopping) {
            pthread_mutex_unlock(&reg.lock);
            return NULL;
        }
        struct fs_watch *wake[64];
        size_t nw = 0;
        for (int i = 0; i < n; i++) {
            struct fs_watch *w = ev[i].data.ptr;
            if (!w)
                continue; /* the control eventfd */
            /* Closed since epoll_wait? Then it is no longer listed. */
            bool listed = false;
            for (struct sl_slot *p = reg.open.all; p && !listed; p = p->next)
                listed = WATCH_OF(p) == w;
            if (!listed)
                continue;
            ssize_t got = read(w->ino, buf, sizeof(buf));
            pthread_mutex_lock(&w->lock);
            if (got > 0)
                take_events(w, buf, (size_t)got);
            if ((w->queued || w->dropped || w->ended) && take_waiting(w) && nw < 64)
                wake[nw++] = w;
            pthread_mutex_unlock(&w->lock);
        }
        int64_t now = sl_mono_us();
        for (struct sl_slot *p = reg.open.all; p && nw < 64; p = p->next) {
            struct fs_watch *w = WATCH_OF(p);
            pthread_mutex_lock(&w->lock);
            if (now - w->last_send_us >= reg.keepalive_us && take_waiting(w)) {
                w->keepalive_due = true;
                w->last_send_us = now;
                wake[nw++] = w;
            }
            pthread_mutex_unlock(&w->lock);
        }
        pthread_mutex_unlock(&reg.lock);
        /* After the lock: a watch taken from waiting is suspended, and
         * nothing closes a suspended connection, so it is there to wake. */
        for (size_t i = 0; i < nw; i++)
            wake[i]->src.wake(wake[i]->src.wake_ctx);
        if (n < 0 && errno != EINTR)
            usleep(100000);
    }
}

/* ---- the body source ---- */

static ssize_t watch_read(struct sl_body_source *src, char *out, size_t max)
{
    struct fs_watch *w = (struct fs_watch *)src;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        if (w->sending_pos < w->sending_len) {
            size_t n = w->sending_len - w->sending_pos;
            n = n < max ? n : max;
            memcpy(out, w->sending + w->sending_pos, n);
            w->sending_pos += n;
            w->last_send_us = sl_mono_us();
            pthread_mutex_unlock(&w->lock);
            return (ssize_t)n;
        }
        free(w->sending);
        w->sending = NULL;
        w->sending_len = w->sending_pos = 0;
        struct sl_buf extra;
        sl_buf_init(&extra, SIZE_MAX);
        int rc = 0;
        if (!w->begun) {
            /* What begins the stream goes alone, before anything queued. */
            w->begun = true;
            if (w->enc.begin && (rc = w->enc.begin(w->enc.ctx, &extra)) == 0 && extra.len) {
                w->sending = extra.data;
                w->sending_len = extra.len;
                continue;
            }
            if (rc == 0) {
                sl_buf_free(&extra);
                continue; /* nothing begins it: what is due comes next */
            }
        } else if (w->dropped) {
            rc = w->enc.overflow(w->enc.ctx, w->dropped, &extra);
            w->dropped = 0; /* said (or, for a framing with no word for it, not) */
        } else if (w->keepalive_due && !w->queued) {
            rc = w->enc.keepalive(w->enc.ctx, &extra);
        } else if (w->ended && !w->end_sent && !w->queued) {
            w->end_sent = true;
            rc = w->enc.end(w->enc.ctx, &extra);
        }
        if (rc < 0) {
            sl_buf_free(&extra);
            pthread_mutex_unlock(&w->lock);
            return -1;
        }
        if (w->queued || extra.len) {
            /* The queue, then what it could not keep (or its end), go out
             * as one. */
            size_t n = w->queue.len + extra.len;
            w->sending = malloc(n + 1);
            if (!w->sending) {
                sl_buf_free(&extra);
                pthread_mutex_unlock(&w->lock);
                return -1;
            }
            memcpy(w->sending, w->queue.data ? w->queue.data : "", w->queue.len);
            memcpy(w->sending + w->queue.len, extra.data ? extra.data : "", extra.len);
            sl_buf_free(&extra);
            w->sending_len = n;
            w->queue.len = 0;
            w->queued = 0;
            w->dropped = 0;
            w->keepalive_due = false;
            w->last_modify[0] = '\0';
            continue;
        }
        sl_buf_free(&extra);
        if (w->end_sent) {
            pthread_mutex_unlock(&w->lock);
            return -1;
        }
        w->waiting = true;
        pthread_mutex_unlock(&w->lock);
        return 0;
    }
}

static void watch_close(struct sl_body_source *src)
{
    struct fs_watch *w = (struct fs_watch *)src;
    pthread_mutex_lock(&reg.lock);
    sl_slots_leave(&reg.open, &w->slot);
    (void)epoll_ctl(reg.epfd, EPOLL_CTL_DEL, w->ino, NULL);
    pthread_mutex_unlock(&reg.lock);
    watch_put(w); /* the registry's */
    watch_put(w); /* the reader's */
}

struct sl_body_source *sl_fs_watch_open(const char *sandbox_id, int rootfd, const char *canonical,
                                        bool recursive, struct sl_error *err)
{
    return sl_fs_watch_open_encoded(sandbox_id, rootfd, canonical, recursive, &SSE, err);
}

struct sl_body_source *sl_fs_watch_open_encoded(const char *sandbox_id, int rootfd,
                                                const char *canonical, bool recursive,
                                                const struct sl_watch_encoder *enc,
                                                struct sl_error *err)
{
    struct fs_watch *w = calloc(1, sizeof(*w));
    if (!w) {
        close(rootfd);
        if (enc->release)
            enc->release(enc->ctx);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    w->enc = *enc;
    w->src.read = watch_read;
    w->src.close = watch_close;
    w->root = rootfd;
    w->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    w->canonical = strdup(canonical);
    w->recursive = recursive;
    w->refs = 2;
    w->last_send_us = sl_mono_us();
    pthread_mutex_init(&w->lock, NULL);
    sl_buf_init(&w->queue, QUEUE_BYTES);
    if (w->ino < 0 || !w->canonical) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot start a file watch");
        w->refs = 1;
        watch_put(w);
        return NULL;
    }
    if ((recursive ? add_tree(w, "", false) : add_dir(w, "")) < 0) {
        sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                     "cannot watch %s: more than %d directories under it, or it is gone", canonical,
                     SL_WATCH_MAX_DIRS);
        w->refs = 1;
        watch_put(w);
        return NULL;
    }
    pthread_mutex_lock(&reg.lock);
    bool joined = sl_slots_join(&reg.open, &w->slot, sandbox_id, err) == 0;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
    if (joined && epoll_ctl(reg.epfd, EPOLL_CTL_ADD, w->ino, &ev) < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot start a file watch");
        sl_slots_leave(&reg.open, &w->slot);
        joined = false;
    }
    pthread_mutex_unlock(&reg.lock);
    if (!joined) {
        w->refs = 1;
        watch_put(w);
        return NULL;
    }
    return &w->src;
}

int sl_fs_watches_start(const struct sl_config *cfg, struct sl_error *err)
{
    reg.open.per_sandbox = cfg->max_watches_per_sandbox;
    reg.open.per_worker = cfg->max_watches;
    reg.keepalive_us = cfg->stream_keepalive_seconds * 1000000;
    reg.stopping = false;
    reg.epfd = epoll_create1(EPOLL_CLOEXEC);
    reg.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (reg.epfd < 0 || reg.wake < 0 || epoll_ctl(reg.epfd, EPOLL_CTL_ADD, reg.wake, &ev) < 0 ||
        pthread_create(&reg.thread, NULL, watcher_main, NULL) != 0) {
        sl_error_errno(err, SL_E_INTERNAL, "cannot start the file watcher");
        if (reg.epfd >= 0)
            close(reg.epfd);
        if (reg.wake >= 0)
            close(reg.wake);
        reg.epfd = reg.wake = -1;
        return -1;
    }
    reg.started = true;
    return 0;
}

void sl_fs_watches_stop(void)
{
    if (!reg.started)
        return;
    pthread_mutex_lock(&reg.lock);
    reg.stopping = true;
    /* A waiting watch's connection must be resumed before the server
     * stops: it then ends (its reader sees the end). */
    struct fs_watch *wake[256];
    size_t nw = 0;
    for (struct sl_slot *p = reg.open.all; p; p = p->next) {
        struct fs_watch *w = WATCH_OF(p);
        pthread_mutex_lock(&w->lock);
        w->ended = true; /* a reader not waiting now sees it next time */
        if (nw < 256 && take_waiting(w))
            wake[nw++] = w;
        pthread_mutex_unlock(&w->lock);
    }
    pthread_mutex_unlock(&reg.lock);
    for (size_t i = 0; i < nw; i++)
        wake[i]->src.wake(wake[i]->src.wake_ctx);
    uint64_t one = 1;
    (void)write(reg.wake, &one, sizeof(one));
    pthread_join(reg.thread, NULL);
    reg.started = false;
}
