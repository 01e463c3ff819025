/* Supervision of executions in flight: one thread, one epoll set, every
 * running execution of the runtime.
 *
 * A running execution is four descriptors: its stdout and stderr pipes, the
 * descriptor that says it ended (the launcher's pidfd for one-shot runs, the
 * per-execution status socket for warm sessions) and a timerfd carrying the
 * next deadline of its termination sequence. The thread drains output into
 * bounded buffers, walks deadline -> SIGTERM -> grace -> SIGKILL -> grace
 * (API.md §4.6), and when the execution is over computes the result and
 * hands it to the caller's completion callback. So a thousand commands in
 * flight cost a thousand small structs and ~4000 descriptors, not a thousand
 * threads.
 *
 * Ownership: the execution struct is reference counted. Starting it gives
 * one reference to the supervisor (dropped after the completion callback)
 * and one to the caller (sl_rt_exec_put). Requests from other threads
 * (cancel, finish-now) go through a locked queue and an eventfd; everything
 * else about a running execution is touched by the supervisor thread only. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/syscalls.h"
#include "runtime/internal.h"
#include "runtime/session_proto.h"

#define MIN_GRACE_MS 100
#define MAX_EVENTS 256
/* Chunks read per readiness event of one pipe before moving on: a chatty
 * command must not starve the others. Level-triggered epoll comes back. */
#define CHUNKS_PER_EVENT 4

/* PH_LINGER: the command itself has exited but a pipe is still open (a
 * job it started in the background holds it): read what comes for
 * LINGER_MS, then answer, and hand the pipes to a drain. */
enum { PH_RUN, PH_TERM, PH_KILL, PH_LINGER };
#define LINGER_MS 50
/* Drained pipes per sandbox uid and in all: each costs one descriptor
 * for as long as the job holding it lives. Past the bound the pipe is
 * closed, and the job's next write to it raises SIGPIPE, which ends a job
 * that does not ignore it. */
#define DRAINS_PER_UID 32
#define DRAINS_MAX 4096

/* One pipe of a finished command that a background job still holds. Read
 * and discarded so the job never blocks on a full pipe nor dies of
 * SIGPIPE for writing to a log nobody reads; closed at EOF, when the job
 * (or its whole session, at suspend, release or idle stop) is gone. */
struct rt_drain {
    struct rt_tag tag; /* first: epoll's data points here */
    int fd;
    uid_t uid;
    struct rt_drain *prev, *next;
};

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void watch_add(struct sl_runtime *rt, struct sl_rt_exec *x, int which, int fd)
{
    x->tags[which] = (struct rt_tag){.x = x, .which = which};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &x->tags[which]};
    if (fd >= 0 && epoll_ctl(rt->sup.epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        sl_warn("runtime: cannot watch an execution descriptor: %s", strerror(errno));
}

static void watch_del(struct sl_runtime *rt, int fd)
{
    if (fd >= 0)
        (void)epoll_ctl(rt->sup.epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void arm_timer(struct sl_rt_exec *x, int64_t at_us)
{
    if (at_us <= 0)
        at_us = 1; /* 0 would disarm it */
    struct itimerspec its = {.it_value = {.tv_sec = at_us / 1000000,
                                          .tv_nsec = (at_us % 1000000) * 1000}};
    (void)timerfd_settime(x->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* ---- the two kinds of execution ---------------------------------------- */

/* Deliver `sig` to the execution. While the command itself runs, through
 * its process group (§4.6): one-shot, the launcher (sandloom-init)
 * forwards a catchable signal to its group, SIGKILL goes to the launcher
 * (whose death ends a PID namespace) and to the group; session, one byte on
 * the status socket asks init to signal the group. With a cgroup of its
 * own, SIGKILL also goes to everything in it, without a race against forks
 * (processes that left the group), and once the command is gone SIGTERM
 * does too (what it left behind: a fork bomb's processes). A catchable
 * signal reaches each process once: a handler must not run twice. */
static void deliver(struct sl_rt_exec *x, int sig)
{
    if (x->cg_exec && (sig == SIGKILL || x->exited)) {
        x->cg_signalled = true; /* v1: its pids.max may be 0 now */
        (void)sl_cgroup_exec_signal(x->rt->cgroups, x->uid, x->cg_seq, sig);
    }
    if (x->exited)
        return;
    x->signal_sent = sig;
    if (!x->session) {
        (void)sl_pidfd_send_signal(x->proc.pidfd, sig);
        if (sig == SIGKILL)
            (void)kill(-x->proc.pid, SIGKILL);
        return;
    }
    char byte = sig == SIGKILL   ? SL_SESSION_KILL
                : sig == SIGTERM ? SL_SESSION_TERM
                                 : (char)sig;
    if (x->status_fd < 0 || send(x->status_fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
        /* init cannot be told: closing the socket makes it kill the group. */
        watch_del(x->rt, x->status_fd);
        close_fd(&x->status_fd);
        x->exited = true;
    }
}

/* The "ended" descriptor became readable. */
static void on_ended(struct sl_rt_exec *x)
{
    struct sl_runtime *rt = x->rt;
    if (!x->session) {
        /* Nothing of an execution outlives its launcher: at basic this ends
         * background jobs left in its process group. */
        (void)kill(-x->proc.pid, SIGKILL);
        watch_del(rt, x->proc.pidfd);
        memset(&x->si, 0, sizeof(x->si));
        if (waitid(P_PIDFD, (id_t)x->proc.pidfd, &x->si, WEXITED | WNOHANG) == 0 &&
            x->si.si_pid != 0)
            x->got_status = true;
        x->exited = true;
        return;
    }
    int32_t st;
    ssize_t n = recv(x->status_fd, &st, sizeof(st), MSG_DONTWAIT | MSG_WAITALL);
    if (n == (ssize_t)sizeof(st)) {
        x->wstatus = st;
        x->got_status = true;
    }
    watch_del(rt, x->status_fd);
    close_fd(&x->status_fd);
    x->exited = true;
}

/* The reference reports a launcher killed by our signal as -signal; a
 * command that died of a signal nobody here sent as 128+signal. */
static int exit_code_of(struct sl_rt_exec *x)
{
    if (!x->got_status)
        return -SIGKILL; /* killed, or its supervisor (init) died under it */
    if (!x->session) {
        if (x->si.si_code == CLD_EXITED) {
            int code = x->si.si_status;
            return x->signal_sent && code == 128 + x->signal_sent ? -x->signal_sent : code;
        }
        return -x->si.si_status;
    }
    if (WIFEXITED(x->wstatus)) {
        int code = WEXITSTATUS(x->wstatus);
        return x->signal_sent && code == 128 + x->signal_sent ? -x->signal_sent : code;
    }
    int sig = WIFSIGNALED(x->wstatus) ? WTERMSIG(x->wstatus) : SIGKILL;
    return x->signal_sent ? -sig : 128 + sig;
}

/* ---- completion -------------------------------------------------------- */

static void list_remove(struct sl_runtime *rt, struct sl_rt_exec *x)
{
    pthread_mutex_lock(&rt->sup.lock);
    if (x->prev)
        x->prev->next = x->next;
    else
        rt->sup.all = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
    rt->sup.count--;
    pthread_cond_broadcast(&rt->sup.drained);
    pthread_mutex_unlock(&rt->sup.lock);
}

static void drain_free(struct sl_runtime *rt, struct rt_drain *d)
{
    struct rt_supervisor *s = &rt->sup;
    if (d->prev)
        d->prev->next = d->next;
    else
        s->drains = d->next;
    if (d->next)
        d->next->prev = d->prev;
    s->n_drains--;
    watch_del(rt, d->fd);
    close(d->fd);
    free(d);
}

/* Take over *fd (a pipe a background job holds) as a drain, or close it
 * when the bounds are reached. */
static void drain_adopt(struct sl_runtime *rt, uid_t uid, int *fd)
{
    if (*fd < 0)
        return;
    struct rt_supervisor *s = &rt->sup;
    size_t of_uid = 0;
    for (struct rt_drain *d = s->drains; d; d = d->next)
        of_uid += d->uid == uid;
    struct rt_drain *d = of_uid < DRAINS_PER_UID && s->n_drains < DRAINS_MAX
                             ? calloc(1, sizeof(*d))
                             : NULL;
    watch_del(rt, *fd);
    if (!d) {
        close_fd(fd);
        return;
    }
    d->tag = (struct rt_tag){.x = NULL, .which = TAG_DRAIN};
    d->fd = *fd;
    d->uid = uid;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &d->tag};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, d->fd, &ev) < 0) {
        close_fd(fd);
        free(d);
        return;
    }
    *fd = -1;
    d->next = s->drains;
    if (d->next)
        d->next->prev = d;
    s->drains = d;
    s->n_drains++;
}

static void on_drain(struct sl_runtime *rt, struct rt_drain *d)
{
    for (int i = 0; i < CHUNKS_PER_EVENT; i++) {
        ssize_t n = read(d->fd, rt->sup.chunk, READ_CHUNK);
        if (n == READ_CHUNK)
            continue;
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
            return;
        drain_free(rt, d); /* EOF: the job is gone (or closed it) */
        return;
    }
}

/* Defined with the event handlers below. */
static void drain(struct sl_runtime *rt, struct sl_rt_exec *x, int *fd, int stream);

static void finish(struct sl_rt_exec *x)
{
    struct sl_runtime *rt = x->rt;
    pthread_mutex_lock(&rt->sup.lock);
    bool already = x->finished;
    x->finished = true; /* under the lock: sl_rt_exec_cancel reads it */
    pthread_mutex_unlock(&rt->sup.lock);
    if (already)
        return;
    struct sl_rt_exec_result *res = &x->res;
    if (x->phase == PH_LINGER) {
        /* The command ended by itself; what it left running keeps its
         * output pipes, now drained instead of read into the answer. What
         * is already in them (the command's last words, a busy supervisor
         * may not have read yet) goes into the answer first. */
        /* One drain empties a default pipe (CHUNKS_PER_EVENT x 64 KiB). */
        if (x->out_fd >= 0)
            drain(rt, x, &x->out_fd, 0);
        if (x->err_fd >= 0)
            drain(rt, x, &x->err_fd, 1);
        drain_adopt(rt, x->uid, &x->out_fd);
        drain_adopt(rt, x->uid, &x->err_fd);
    } else if ((x->out_fd >= 0 || x->err_fd >= 0) && x->exited) {
        res->truncated = true; /* something outside our reach still held a pipe */
    }
    watch_del(rt, x->out_fd);
    watch_del(rt, x->err_fd);
    watch_del(rt, x->timer_fd);
    close_fd(&x->out_fd);
    close_fd(&x->err_fd);
    close_fd(&x->timer_fd);
    if (!x->session && x->proc.pidfd >= 0) {
        if (!x->exited) {
            /* Forced end: the launcher must still be killed and reaped. */
            (void)sl_pidfd_send_signal(x->proc.pidfd, SIGKILL);
            (void)kill(-x->proc.pid, SIGKILL);
            watch_del(rt, x->proc.pidfd);
            memset(&x->si, 0, sizeof(x->si));
            int rc;
            do
                rc = waitid(P_PIDFD, (id_t)x->proc.pidfd, &x->si, WEXITED);
            while (rc < 0 && errno == EINTR);
            x->got_status = rc == 0;
        }
        close_fd(&x->proc.pidfd);
    }
    if (rt->privnet && x->net_slot >= 0) {
        sl_privnet_detach(rt->privnet, x->net_slot); /* its namespace is gone */
        x->net_slot = -1;
    }
    bool session_broken = false;
    if (x->session) {
        if (x->status_fd >= 0) {
            watch_del(rt, x->status_fd);
            close_fd(&x->status_fd); /* init kills the group if still running */
        }
        /* No status and no kill of ours: init itself died under the command. */
        session_broken = !x->got_status && !x->signal_sent;
    }
    if (x->launched)
        res->exit_code = exit_code_of(x);
    if (x->cg_exec) {
        /* A terminated command leaves nothing behind; one that ended by
         * itself keeps its background jobs (warm sessions), and then the
         * directory stays until they end or the sandbox is released. One
         * that ended by itself and left nothing hands its cgroup, never
         * signalled (pids.max untouched), to its session's next command. */
        bool ended_itself = x->phase == PH_RUN || x->phase == PH_LINGER;
        if (!ended_itself) {
            x->cg_signalled = true;
            (void)sl_cgroup_exec_signal(rt->cgroups, x->uid, x->cg_seq, SIGKILL);
        }
        bool kept = ended_itself && !x->signal_sent && !x->cg_signalled && x->session &&
                    !session_broken &&
                    sl_cgroup_exec_empty(rt->cgroups, x->uid, x->cg_seq) &&
                    rt_session_keep_cgroup(rt, x->session, x->cg_seq);
        if (!kept)
            sl_cgroup_exec_remove(rt->cgroups, x->uid, x->cg_seq);
    }
    if (x->session) {
        rt_session_exec_done(rt, x->session, session_broken);
        x->session = NULL;
    }
    if (x->launched) {
        res->duration_ms = (sl_mono_us() - x->start_us) / 1000;
        int64_t oom_after = rt->cgroups ? sl_cgroup_oom_kills(rt->cgroups, x->uid) : -1;
        res->oom_killed = x->oom_before >= 0 && oom_after > x->oom_before;
        atomic_fetch_sub(&rt->running, 1);
    }
    x->done(res, x->ctx); /* the callback owns *res now */
    list_remove(rt, x);
    /* The supervisor's reference goes after this epoll batch (reap_all):
     * another event of the batch may still name x. */
    x->reap_next = rt->sup.reap;
    rt->sup.reap = x;
}

static void reap_all(struct sl_runtime *rt)
{
    while (rt->sup.reap) {
        struct sl_rt_exec *x = rt->sup.reap;
        rt->sup.reap = x->reap_next;
        sl_rt_exec_put(x);
    }
}

static bool complete(const struct sl_rt_exec *x)
{
    return x->exited && x->out_fd < 0 && x->err_fd < 0;
}

/* Begin the termination sequence (deadline or cancel). */
static void terminate(struct sl_rt_exec *x, int64_t now)
{
    if (x->phase != PH_RUN)
        return;
    if (x->exited && !x->cg_exec) {
        /* The command is gone but something it started still holds its
         * output (a background job): there is nobody left to signal
         * through this execution, so read for one more grace and stop. */
        x->phase = PH_KILL;
        arm_timer(x, now + x->grace_us);
        return;
    }
    deliver(x, SIGTERM);
    x->phase = PH_TERM;
    arm_timer(x, now + x->grace_us);
}

static void on_timer(struct sl_rt_exec *x)
{
    uint64_t ticks;
    if (read(x->timer_fd, &ticks, sizeof(ticks)) < 0 && errno == EAGAIN)
        return; /* re-armed since it fired */
    int64_t now = sl_mono_us();
    switch (x->phase) {
    case PH_RUN:
        x->res.timed_out = true;
        terminate(x, now);
        break;
    case PH_TERM:
        if (!x->exited || x->cg_exec)
            deliver(x, SIGKILL);
        x->phase = PH_KILL;
        arm_timer(x, now + x->grace_us);
        break;
    case PH_LINGER:
        /* Output still waits in a paused pipe: the answer waits for it
         * (its reader), up to the deadline. */
        if ((x->paused[0] || x->paused[1]) && now < x->deadline_us) {
            arm_timer(x, now + LINGER_MS * 1000);
            break;
        }
        finish(x); /* the command is over; its background jobs live on */
        break;
    default:
        finish(x); /* output still held open past the last grace: stop */
        break;
    }
}

/* The command itself exited but a pipe is still open. In a warm session
 * that is a job it started in the background (`server &`, `nohup …`):
 * the command is over, so answer after a short linger instead of at the
 * deadline, and leave the job running. A one-shot run kills its group
 * when its launcher ends, so the pipes close there anyway. */
static void maybe_linger(struct sl_rt_exec *x)
{
    if (x->phase != PH_RUN || !x->exited || !x->session || !x->got_status)
        return;
    if (x->out_fd < 0 && x->err_fd < 0)
        return;
    x->phase = PH_LINGER;
    arm_timer(x, sl_mono_us() + LINGER_MS * 1000);
}

/* Read what a command's pipe holds (stream 0 stdout, 1 stderr) into its
 * result, or hand it to the caller's sink. */
static void drain(struct sl_runtime *rt, struct sl_rt_exec *x, int *fd, int stream)
{
    struct sl_buf *buf = stream ? &x->res.err : &x->res.out;
    for (int i = 0; i < CHUNKS_PER_EVENT; i++) {
        ssize_t n = read(*fd, rt->sup.chunk, READ_CHUNK);
        if (n > 0 && x->output.write) {
            if (!x->output.write(x->output.ctx, stream, rt->sup.chunk, (size_t)n)) {
                /* A reader is behind: the pipe waits (and the command with
                 * it) until the sink asks for more. */
                watch_del(rt, *fd);
                x->paused[stream] = true;
                return;
            }
            if ((size_t)n < READ_CHUNK)
                return;
            continue;
        }
        if (n > 0) {
            size_t room = buf->max - buf->len;
            size_t keep = (size_t)n < room ? (size_t)n : room;
            if (keep && sl_buf_append(buf, rt->sup.chunk, keep) < 0)
                keep = 0;
            if (keep < (size_t)n)
                x->res.truncated = true;
            if ((size_t)n < READ_CHUNK)
                return;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        watch_del(rt, *fd);
        close_fd(fd);
        return;
    }
}

/* Requests queued by other threads. */
static void take_requests(struct sl_runtime *rt)
{
    uint64_t v;
    (void)read(rt->sup.wake_fd, &v, sizeof(v));
    pthread_mutex_lock(&rt->sup.lock);
    struct sl_rt_exec *q = rt->sup.queue;
    rt->sup.queue = NULL;
    pthread_mutex_unlock(&rt->sup.lock);
    int64_t now = sl_mono_us();
    while (q) {
        struct sl_rt_exec *x = q;
        q = x->queue_next;
        /* What other threads asked, taken under their lock. */
        pthread_mutex_lock(&rt->sup.lock);
        x->queued = false;
        bool resume = x->resume_output;
        int sig = x->client_signal;
        x->resume_output = false;
        x->client_signal = 0;
        pthread_mutex_unlock(&rt->sup.lock);
        if (!x->finished) {
            if (!x->launched || x->kill_now) {
                if (x->launched && (!x->exited || x->cg_exec))
                    deliver(x, SIGKILL);
                finish(x);
            } else if (x->cancel_requested) {
                terminate(x, now);
            }
            if (resume && !x->finished) {
                for (int i = 0; i < 2; i++) {
                    int fd = i ? x->err_fd : x->out_fd;
                    if (!x->paused[i] ||
                        (x->output.may_read && !x->output.may_read(x->output.ctx, i)))
                        continue; /* paused again since the resume was asked */
                    if (fd >= 0)
                        watch_add(rt, x, i ? TAG_ERR : TAG_OUT, fd);
                    x->paused[i] = false;
                }
            }
            /* A client's signal, once, to the command as the termination
             * sequence signals it; the command decides what it means. */
            if (sig && !x->finished && x->phase == PH_RUN)
                deliver(x, sig);
        }
        sl_rt_exec_put(x); /* the queue's reference */
    }
}

static void *supervisor_main(void *arg)
{
    struct sl_runtime *rt = arg;
    struct epoll_event ev[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(rt->sup.epfd, ev, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            sl_errorlog("runtime: supervisor epoll_wait: %s", strerror(errno));
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            struct rt_tag *t = ev[i].data.ptr;
            if (!t) {
                if (atomic_load(&rt->sup.stopping)) {
                    reap_all(rt);
                    return NULL;
                }
                take_requests(rt);
                continue;
            }
            if (t->which == TAG_DRAIN) {
                on_drain(rt, (struct rt_drain *)t);
                continue;
            }
            struct sl_rt_exec *x = t->x;
            if (x->finished)
                continue; /* ended earlier in this batch */
            switch (t->which) {
            case TAG_OUT:
                if (x->out_fd >= 0)
                    drain(rt, x, &x->out_fd, 0);
                break;
            case TAG_ERR:
                if (x->err_fd >= 0)
                    drain(rt, x, &x->err_fd, 1);
                break;
            case TAG_ENDED:
                if (!x->exited) {
                    on_ended(x);
                    maybe_linger(x);
                }
                break;
            case TAG_TIMER:
                on_timer(x);
                break;
            }
            if (!x->finished && complete(x))
                finish(x);
        }
        reap_all(rt);
    }
}

/* ---- interface to the rest of the runtime ------------------------------ */

int rt_supervisor_start(struct sl_runtime *rt, struct sl_error *err)
{
    struct rt_supervisor *s = &rt->sup;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->drained, NULL);
    s->epfd = s->wake_fd = -1;
    s->chunk = malloc(READ_CHUNK);
    if (!s->chunk)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (s->epfd < 0 || s->wake_fd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_fd, &ev) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "cannot create the supervisor's epoll set");
    if (pthread_create(&s->thread, NULL, supervisor_main, rt) != 0)
        return sl_error_set(err, SL_E_INTERNAL, EAGAIN, "cannot start the supervisor thread");
    s->started = true;
    return 0;
}

static void wake(struct sl_runtime *rt)
{
    uint64_t one = 1;
    (void)write(rt->sup.wake_fd, &one, sizeof(one));
}

/* Queue x for the supervisor (cancel or finish-now); takes a reference. */
static void enqueue(struct sl_rt_exec *x)
{
    struct sl_runtime *rt = x->rt;
    pthread_mutex_lock(&rt->sup.lock);
    if (!x->queued) {
        x->queued = true;
        atomic_fetch_add(&x->refs, 1);
        x->queue_next = rt->sup.queue;
        rt->sup.queue = x;
    }
    pthread_mutex_unlock(&rt->sup.lock);
    wake(rt);
}

void rt_supervisor_stop(struct sl_runtime *rt)
{
    struct rt_supervisor *s = &rt->sup;
    if (s->started) {
        /* Kill whatever still runs and wait for every completion. */
        pthread_mutex_lock(&s->lock);
        for (struct sl_rt_exec *x = s->all; x; x = x->next)
            if (!x->queued) {
                x->kill_now = true;
                x->queued = true;
                atomic_fetch_add(&x->refs, 1);
                x->queue_next = s->queue;
                s->queue = x;
            }
        pthread_mutex_unlock(&s->lock);
        wake(rt);
        pthread_mutex_lock(&s->lock);
        while (s->count > 0)
            pthread_cond_wait(&s->drained, &s->lock);
        pthread_mutex_unlock(&s->lock);
        atomic_store(&s->stopping, true);
        wake(rt);
        pthread_join(s->thread, NULL);
        s->started = false;
    }
    while (s->drains)
        drain_free(rt, s->drains);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    s->epfd = s->wake_fd = -1;
    free(s->chunk);
    s->chunk = NULL;
    pthread_cond_destroy(&s->drained);
    pthread_mutex_destroy(&s->lock);
}

struct sl_rt_exec *rt_exec_new(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                               sl_rt_exec_done_fn done, void *ctx)
{
    struct sl_rt_exec *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->rt = rt;
    atomic_init(&x->refs, 1);
    x->out_fd = x->err_fd = x->timer_fd = x->status_fd = x->cg_procs_fd = -1;
    x->proc.pidfd = x->proc.out_fd = x->proc.err_fd = -1;
    x->net_slot = -1;
    x->uid = req->uid;
    x->output = req->output;
    x->done = done;
    x->ctx = ctx;
    int64_t grace = req->grace_ms > MIN_GRACE_MS ? req->grace_ms : MIN_GRACE_MS;
    x->grace_us = grace * 1000;
    x->start_us = sl_mono_us();
    int64_t timeout_ms = req->timeout_ms < INT64_MAX / 4000 ? req->timeout_ms : INT64_MAX / 4000;
    x->deadline_us = x->start_us + timeout_ms * 1000;
    sl_buf_init(&x->res.out, req->max_output_bytes);
    sl_buf_init(&x->res.err, req->max_output_bytes);
    return x;
}

/* Hand a launched execution (its descriptors set) to the supervisor, or
 * one that never launched (x->launched false: its result is already
 * final) for completion on the supervisor thread. Takes the supervisor's
 * reference; the caller keeps its own. */
int rt_exec_submit(struct sl_rt_exec *x, struct sl_error *err)
{
    struct sl_runtime *rt = x->rt;
    atomic_fetch_add(&x->refs, 1);
    pthread_mutex_lock(&rt->sup.lock);
    x->next = rt->sup.all;
    if (x->next)
        x->next->prev = x;
    rt->sup.all = x;
    rt->sup.count++;
    pthread_mutex_unlock(&rt->sup.lock);
    if (!x->launched) {
        enqueue(x);
        return 0;
    }
    atomic_fetch_add(&rt->running, 1);
    x->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (x->timer_fd < 0) {
        /* Cannot keep a deadline: do not run without one. */
        sl_error_errno(err, SL_E_RUNTIME, "cannot create the execution's timer");
        x->kill_now = true;
        enqueue(x);
        return 0;
    }
    arm_timer(x, x->deadline_us);
    watch_add(rt, x, TAG_OUT, x->out_fd);
    watch_add(rt, x, TAG_ERR, x->err_fd);
    watch_add(rt, x, TAG_ENDED, x->session ? x->status_fd : x->proc.pidfd);
    watch_add(rt, x, TAG_TIMER, x->timer_fd);
    return 0;
}

bool sl_rt_exec_cancel(struct sl_rt_exec *x)
{
    struct sl_runtime *rt = x->rt;
    pthread_mutex_lock(&rt->sup.lock);
    bool running = !x->finished && x->launched;
    if (running)
        x->cancel_requested = true;
    pthread_mutex_unlock(&rt->sup.lock);
    if (running)
        enqueue(x);
    return running;
}

void sl_rt_exec_resume_output(struct sl_rt_exec *x)
{
    struct sl_runtime *rt = x->rt;
    pthread_mutex_lock(&rt->sup.lock);
    bool running = !x->finished;
    if (running)
        x->resume_output = true;
    pthread_mutex_unlock(&rt->sup.lock);
    if (running)
        enqueue(x);
}

bool sl_rt_exec_signal(struct sl_rt_exec *x, int sig)
{
    struct sl_runtime *rt = x->rt;
    pthread_mutex_lock(&rt->sup.lock);
    bool running = !x->finished && x->launched;
    if (running)
        x->client_signal = sig;
    pthread_mutex_unlock(&rt->sup.lock);
    if (running)
        enqueue(x);
    return running;
}

void sl_rt_exec_kill(struct sl_rt_exec *x)
{
    struct sl_runtime *rt = x->rt;
    pthread_mutex_lock(&rt->sup.lock);
    bool running = !x->finished;
    if (running)
        x->kill_now = true;
    pthread_mutex_unlock(&rt->sup.lock);
    if (running)
        enqueue(x);
}

void sl_rt_exec_put(struct sl_rt_exec *x)
{
    if (!x || atomic_fetch_sub(&x->refs, 1) != 1)
        return;
    sl_buf_free(&x->res.out);
    sl_buf_free(&x->res.err);
    free(x);
}
