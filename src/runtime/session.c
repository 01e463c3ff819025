/* Warm sessions: one sandloom-init per sandbox, in session mode, holding the
 * namespaces and the mount tree between executions, so an execution costs a
 * request on a socket and a fork inside the sandbox instead of building a
 * sandbox. Background processes of one execution live on for the next; the
 * session stops when its sandbox is released, or after an idle period with
 * nothing running (sl_rt_reap_idle), so a dormant sandbox costs no process.
 *
 * Locking: sessions_lock guards the table and each session's counters;
 * write_lock serialises requests on one control socket. A session pointer
 * is held with refs > 0; a dead session is never reused and is freed when
 * its last holder lets go. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "common/util.h"
#include "runtime/internal.h"
#include "runtime/session_proto.h"

static void session_free(struct sl_runtime *rt, struct rt_session *s)
{
    rt->backend->session_stop(rt, s);
    if (s->ctl_fd >= 0) {
        close(s->ctl_fd);
        s->ctl_fd = -1;
    }
    if (rt->privnet)
        sl_privnet_detach(rt->privnet, s->net_slot);
    if (s->spare_cg_seq && s->cgroups)
        sl_cgroup_exec_remove(s->cgroups, s->uid, s->spare_cg_seq);
    rt_mount_set_free(&s->mounts);
    pthread_mutex_destroy(&s->write_lock);
    free(s);
}

/* Remove from the table (caller holds sessions_lock). */
static void table_remove(struct sl_runtime *rt, struct rt_session *s)
{
    for (size_t i = 0; i < rt->n_sessions; i++)
        if (rt->sessions[i] == s) {
            rt->sessions[i] = rt->sessions[--rt->n_sessions];
            return;
        }
}

/* Into the table (caller holds sessions_lock). 0, or -1 out of memory. */
static int table_add(struct sl_runtime *rt, struct rt_session *s)
{
    if (rt->n_sessions == rt->cap_sessions) {
        size_t cap = rt->cap_sessions ? rt->cap_sessions * 2 : 64;
        struct rt_session **n = realloc(rt->sessions, cap * sizeof(*n));
        if (!n)
            return -1;
        rt->sessions = n;
        rt->cap_sessions = cap;
    }
    rt->sessions[rt->n_sessions++] = s;
    return 0;
}

/* Drop one reference; the last one of a dead session frees it. */
static void session_put(struct sl_runtime *rt, struct rt_session *s)
{
    pthread_mutex_lock(&rt->sessions_lock);
    bool free_it = --s->refs == 0 && s->dead;
    pthread_mutex_unlock(&rt->sessions_lock);
    if (free_it)
        session_free(rt, s);
}

static bool session_alive(const struct rt_session *s)
{
    struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
    return s->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

/* A session not started yet: its fields and template set. */
static struct rt_session *session_new(struct sl_runtime *rt, const char *root, uid_t uid,
                                      const struct sl_rt_mount *mounts, size_t nmounts,
                                      struct sl_error *err)
{
    struct rt_session *s = calloc(1, sizeof(*s));
    if (!s) {
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    s->uid = uid;
    s->cgroups = rt->cgroups;
    s->pidfd = s->ctl_fd = s->net_slot = -1;
    snprintf(s->root, sizeof(s->root), "%s", root);
    pthread_mutex_init(&s->write_lock, NULL);
    if (rt_mount_set_copy(&s->mounts, mounts, nmounts) < 0) {
        session_free(rt, s);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    return s;
}

/* Build s's boundary around sandloom-init with the templates s was made
 * with (from restore_image when set): the backend's session_start, with a
 * new control socket. */
static int session_boot(struct sl_runtime *rt, struct rt_session *s,
                        const struct sl_rt_mount *mounts, size_t nmounts,
                        const struct sl_rt_caps *caps, const struct sl_rt_egress *egress,
                        const char *restore_image, struct sl_error *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "sandbox setup failed: socketpair");
    s->restore_image = restore_image;
    int rc = rt->backend->session_start(rt, s, sv[1], mounts, nmounts, caps, egress, err);
    s->restore_image = NULL; /* the caller's, used up */
    close(sv[1]);
    if (rc < 0) {
        close(sv[0]);
        return -1;
    }
    s->ctl_fd = sv[0];
    return 0;
}

static struct rt_session *session_start(struct sl_runtime *rt, const char *root, uid_t uid,
                                        const struct sl_rt_mount *mounts, size_t nmounts,
                                        const struct sl_rt_caps *caps,
                                        const struct sl_rt_egress *egress, struct sl_error *err)
{
    struct rt_session *s = session_new(rt, root, uid, mounts, nmounts, err);
    if (s && session_boot(rt, s, mounts, nmounts, caps, egress, NULL, err) < 0) {
        session_free(rt, s);
        return NULL;
    }
    return s;
}

/* s, a placeholder in the table with one reference (the caller's), has
 * been booted (rc): it stops starting, and the waiters are woken. true
 * when it runs; false (err set, the reference dropped) when it failed or
 * was stopped meanwhile. */
static bool session_started(struct sl_runtime *rt, struct rt_session *s, int rc,
                            struct sl_error *err)
{
    pthread_mutex_lock(&rt->sessions_lock);
    s->starting = false;
    bool lost = rc < 0 || s->dead;
    if (lost && !s->dead) {
        s->dead = true;
        table_remove(rt, s);
    }
    pthread_cond_broadcast(&rt->sessions_changed);
    pthread_mutex_unlock(&rt->sessions_lock);
    if (!lost)
        return true;
    if (rc == 0)
        sl_error_set(err, SL_E_RUNTIME, EPIPE, "the sandbox was stopped while it started");
    session_put(rt, s);
    return false;
}

/* New ceilings for a running session: its cgroup limits written again
 * (the kernel may refuse to lower memory below what the sandbox holds
 * now: then the old ones stay until the session starts again, said once
 * in the log). Under sessions_lock. */
static void session_recap(struct sl_runtime *rt, struct rt_session *s,
                          const struct sl_rt_caps *caps)
{
    if (!rt->cgroups)
        return;
    const struct sl_cgroup_limits cap = {
        .memory_bytes = caps->memory_bytes, .pids = caps->pids, .cpus = caps->cpus};
    int fds[SL_CGROUP_MAX_FDS];
    struct sl_error err = {0};
    s->caps = *caps; /* tried once per change */
    int n = sl_cgroup_enter_fds(rt->cgroups, s->uid, &cap, fds, &err);
    if (n < 0) {
        sl_warn("sandbox uid %u: its new limits apply from its next session: %s",
                (unsigned)s->uid, sl_error_text(&err));
        return;
    }
    while (n > 0)
        close(fds[--n]);
}

/* An adopted session's network given its sandbox's rules (it was made
 * with the worker's defaults). false when they could not be written: the
 * session is then dropped and a new one starts with them. Under
 * sessions_lock. */
static bool session_set_egress(struct sl_runtime *rt, struct rt_session *s,
                               const struct sl_rt_egress *egress)
{
    s->egress_pending = false;
    if (!rt->privnet || s->net_slot < 0)
        return true;
    /* Prepared long ago, its link may have been cut meanwhile (the
     * worker's table lost, say): a new session makes one. */
    struct sl_privnet_status st;
    if (!sl_privnet_status(rt->privnet, s->uid, &st) || !st.attached) {
        sl_warn("sandbox uid %u: its prepared session has no network: a new one is made",
                (unsigned)s->uid);
        return false;
    }
    if (!egress || (!egress->policy && !egress->bound))
        return true;
    struct sl_error err = {0};
    if (sl_privnet_set_policy(rt->privnet, s->uid, egress->policy, egress->bound, &err) == 0)
        return true;
    sl_warn("sandbox uid %u: its prepared session is dropped, its rules could not be written: %s",
            (unsigned)s->uid, sl_error_text(&err));
    return false;
}

/* The live session of uid, started if needed; returned with refs and
 * active taken. A session is built outside sessions_lock, as a "starting"
 * placeholder in the table: a first command of the same sandbox waits for
 * it (two must not start two sessions), and commands of other sandboxes
 * are not held up by it. */
static struct rt_session *session_get(struct sl_runtime *rt, const char *root, uid_t uid,
                                      const struct sl_rt_mount *mounts, size_t nmounts,
                                      const struct sl_rt_caps *caps,
                                      const struct sl_rt_egress *egress,
                                      struct sl_error *err)
{
    pthread_mutex_lock(&rt->sessions_lock);
again:
    for (size_t i = 0; i < rt->n_sessions; i++) {
        struct rt_session *s = rt->sessions[i];
        if (s->uid != uid)
            continue;
        if (s->starting) {
            pthread_cond_wait(&rt->sessions_changed, &rt->sessions_lock);
            goto again;
        }
        if (s->checkpointing) {
            pthread_mutex_unlock(&rt->sessions_lock);
            sl_error_set(err, SL_E_RUNTIME, EBUSY,
                         "the sandbox's processes are being checkpointed (a suspend or a "
                         "fork): retry when it is done");
            return NULL;
        }
        if (!s->dead && session_alive(s) && strcmp(s->root, root) == 0 &&
            (!s->egress_pending || session_set_egress(rt, s, egress))) {
            s->refs++;
            s->active++;
            if (caps && memcmp(&s->caps, caps, sizeof(*caps)) != 0)
                session_recap(rt, s, caps);
            pthread_mutex_unlock(&rt->sessions_lock);
            return s;
        }
        s->dead = true; /* init died (or the sandbox moved): start afresh */
        table_remove(rt, s);
        if (s->refs == 0) {
            pthread_mutex_unlock(&rt->sessions_lock);
            session_free(rt, s);
            pthread_mutex_lock(&rt->sessions_lock);
            goto again;
        }
        break;
    }
    struct rt_session *s = session_new(rt, root, uid, mounts, nmounts, err);
    if (!s) {
        pthread_mutex_unlock(&rt->sessions_lock);
        return NULL;
    }
    if (table_add(rt, s) < 0) {
        pthread_mutex_unlock(&rt->sessions_lock);
        session_free(rt, s);
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
        return NULL;
    }
    s->starting = true;
    s->refs = 1;
    s->active = 1;
    if (caps)
        s->caps = *caps;
    pthread_mutex_unlock(&rt->sessions_lock);
    int rc = session_boot(rt, s, mounts, nmounts, caps, egress, NULL, err);
    return session_started(rt, s, rc, err) ? s : NULL;
}

/* Is the caller's execution the only one on s? */
static bool session_sole_user(struct sl_runtime *rt, struct rt_session *s)
{
    pthread_mutex_lock(&rt->sessions_lock);
    bool sole = s->active == 1;
    pthread_mutex_unlock(&rt->sessions_lock);
    return sole;
}

static void session_release_exec(struct sl_runtime *rt, struct rt_session *s, bool broken)
{
    pthread_mutex_lock(&rt->sessions_lock);
    s->active--;
    s->last_used_us = sl_mono_us();
    if (broken && !s->dead) {
        s->dead = true;
        table_remove(rt, s);
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    session_put(rt, s);
}

static int write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One request on the control socket (see session_proto.h). */
static int session_send(struct rt_session *s, const struct sl_rt_exec_request *req,
                        const int fds[SL_SESSION_MAX_NFDS], int nfds)
{
    struct sl_buf payload;
    sl_buf_init(&payload, SL_SESSION_MAX_PAYLOAD);
    uint32_t argc = 0, envc = 0;
    int rc = sl_buf_append(&payload, req->cwd, strlen(req->cwd) + 1);
    for (; rc == 0 && req->argv[argc]; argc++)
        rc = sl_buf_append(&payload, req->argv[argc], strlen(req->argv[argc]) + 1);
    for (; rc == 0 && req->envp && req->envp[envc]; envc++)
        rc = sl_buf_append(&payload, req->envp[envc], strlen(req->envp[envc]) + 1);
    if (rc < 0 || argc > SL_SESSION_MAX_ITEMS || envc > SL_SESSION_MAX_ITEMS) {
        sl_buf_free(&payload);
        errno = E2BIG;
        return -1;
    }
    struct sl_session_req hdr = {.magic = SL_SESSION_MAGIC,
                                 .payload_len = (uint32_t)payload.len,
                                 .argc = argc,
                                 .envc = envc,
                                 .flags = req->tty.on ? SL_SESSION_F_TTY : 0,
                                 .cols = req->tty.cols,
                                 .rows = req->tty.rows};
    char cbuf[CMSG_SPACE(sizeof(int) * SL_SESSION_MAX_NFDS)];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = &hdr, .iov_len = sizeof(hdr)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    pthread_mutex_lock(&s->write_lock);
    ssize_t n;
    do
        n = sendmsg(s->ctl_fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    rc = n == (ssize_t)sizeof(hdr) ? write_full(s->ctl_fd, payload.data, payload.len) : -1;
    pthread_mutex_unlock(&s->write_lock);
    sl_buf_free(&payload);
    return rc;
}

/* Pipes and the status socket of one execution. Parent ends in mine[],
 * the ends handed to init in theirs[] (stdin, stdout, stderr, status). */
static int exec_fds(const struct sl_rt_exec_request *req, int mine[3],
                    int theirs[SL_SESSION_NFDS])
{
    int out[2], err[2], st[2];
    theirs[0] = req->has_stdin ? fcntl(req->stdin_fd, F_DUPFD_CLOEXEC, 3)
                               : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (theirs[0] < 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(theirs[0]);
        return -1;
    }
    if (pipe2(err, O_CLOEXEC) < 0) {
        close(theirs[0]);
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st) < 0) {
        close(theirs[0]);
        close(out[0]);
        close(out[1]);
        close(err[0]);
        close(err[1]);
        return -1;
    }
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    mine[0] = out[0];
    mine[1] = err[0];
    mine[2] = st[0];
    theirs[1] = out[1];
    theirs[2] = err[1];
    theirs[3] = st[1];
    return 0;
}

/* x's execution cgroup: the session's spare when it has one, else a new
 * one. 0, or -1 with err. */
static int exec_cgroup(struct sl_runtime *rt, struct rt_session *s, struct sl_rt_exec *x,
                       struct sl_error *err)
{
    pthread_mutex_lock(&rt->sessions_lock);
    uint64_t spare = s->spare_cg_seq;
    s->spare_cg_seq = 0;
    pthread_mutex_unlock(&rt->sessions_lock);
    if (spare) {
        struct sl_error ignored = {0};
        x->cg_procs_fd = sl_cgroup_exec_reopen(rt->cgroups, s->uid, spare, &ignored);
        if (x->cg_procs_fd >= 0) {
            x->cg_seq = spare;
            x->cg_exec = true;
            return 0;
        }
        sl_cgroup_exec_remove(rt->cgroups, s->uid, spare); /* gone or broken: a new one */
    }
    x->cg_seq = atomic_fetch_add(&rt->exec_seq, 1) + 1;
    x->cg_procs_fd = sl_cgroup_exec_create(rt->cgroups, s->uid, x->cg_seq, err);
    if (x->cg_procs_fd < 0)
        return -1;
    x->cg_exec = true;
    return 0;
}

bool rt_session_keep_cgroup(struct sl_runtime *rt, struct rt_session *s, uint64_t seq)
{
    pthread_mutex_lock(&rt->sessions_lock);
    bool keep = !s->dead && !s->spare_cg_seq;
    if (keep)
        s->spare_cg_seq = seq;
    pthread_mutex_unlock(&rt->sessions_lock);
    return keep;
}

/* How long init may take to say how a terminal went (an open and a fork). */
#define TTY_REPLY_MS 5000

/* init's word on a terminal request (session_proto.h): 1 with the master
 * in *master, 0 when it could not open one (the command did not start;
 * its status follows as usual), -1 when init said nothing in time. */
static int tty_reply(int status_fd, int *master)
{
    struct pollfd p = {.fd = status_fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, TTY_REPLY_MS);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return -1;
    char b = 0;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &b, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof(cbuf)};
    ssize_t n;
    do
        n = recvmsg(status_fd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return -1;
    int fd = -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
    if (b != SL_SESSION_TTY_OK || fd < 0) {
        if (fd >= 0)
            close(fd);
        return b == SL_SESSION_TTY_FAILED ? 0 : -1;
    }
    *master = fd;
    return 1;
}

/* A terminal command just sent: its output is the master's (the pipes only
 * carry init's reason when it could not open one), and the caller gets a
 * copy of the master in *req->tty.master. When init could not open one,
 * or said nothing in time, *master stays -1 and the command is supervised
 * as any other (a failed start's status, or the caller's cancel). */
static void tty_attach(const struct sl_rt_exec_request *req, struct sl_rt_exec *x)
{
    int master = -1;
    *req->tty.master = -1;
    if (tty_reply(x->status_fd, &master) <= 0)
        return;
    int copy = fcntl(master, F_DUPFD_CLOEXEC, 3);
    if (copy < 0) {
        close(master);
        return;
    }
    (void)fcntl(master, F_SETFL, O_NONBLOCK);
    (void)fcntl(copy, F_SETFL, O_NONBLOCK);
    close(x->out_fd);
    x->out_fd = master;
    *req->tty.master = copy;
}

int rt_session_launch(struct sl_runtime *rt, const struct sl_rt_exec_request *req,
                      struct sl_rt_exec *x, bool want_cgroup, struct sl_error *err)
{
    /* A session found dead on send (init killed, e.g. by the memory quota)
     * is replaced once. */
    for (int attempt = 0; attempt < 2; attempt++) {
        struct rt_session *s =
            session_get(rt, req->sandbox_root, req->uid, req->mounts, req->nmounts, &req->caps,
                        &req->egress, err);
        if (!s)
            return -1;
        /* Templates attached or detached since the session started: its
         * namespace is brought up to date before the command runs. */
        pthread_mutex_lock(&s->write_lock);
        int mrc = rt_mount_set_equal(&s->mounts, req->mounts, req->nmounts)
                      ? 0
                      : rt->backend->session_mounts(rt, s, req->mounts, req->nmounts, err);
        pthread_mutex_unlock(&s->write_lock);
        if (mrc < 0 && err && err->errnum == ENOTSUP && attempt == 0 && session_sole_user(rt, s)) {
            /* The backend binds templates only when a session starts: this
             * one ends (with its background processes) and the retry
             * starts one with the new set. */
            (void)sl_pidfd_send_signal(s->pidfd, SIGKILL);
            session_release_exec(rt, s, true);
            sl_error_clear(err);
            continue;
        }
        if (mrc < 0) {
            session_release_exec(rt, s, false);
            return -1;
        }
        /* Once: a retry on a new session keeps the first attempt's. */
        if (want_cgroup && !x->cg_exec && exec_cgroup(rt, s, x, err) < 0) {
            session_release_exec(rt, s, false);
            return -1;
        }
        /* After session_get: a first execution has just made the cgroup. */
        x->oom_before = rt->cgroups ? sl_cgroup_oom_kills(rt->cgroups, req->uid) : -1;
        int mine[3], theirs[SL_SESSION_MAX_NFDS];
        if (exec_fds(req, mine, theirs) < 0) {
            session_release_exec(rt, s, false);
            return sl_error_errno(err, SL_E_RUNTIME, "cannot create the execution's pipes");
        }
        /* The command's cgroup: init's child enters it before exec. */
        int nfds = SL_SESSION_NFDS;
        if (x->cg_procs_fd >= 0)
            theirs[nfds++] = x->cg_procs_fd;
        int sent = session_send(s, req, theirs, nfds);
        int send_errno = errno;
        for (int i = 0; i < SL_SESSION_NFDS; i++)
            close(theirs[i]); /* not the cgroup's: the launcher closes it */
        if (sent < 0) {
            for (int i = 0; i < 3; i++)
                close(mine[i]);
            session_release_exec(rt, s, true);
            if (send_errno == E2BIG)
                return sl_error_set(err, SL_E_RUNTIME, E2BIG, "the command is too large");
            continue;
        }
        x->session = s; /* its refs/active are released by rt_session_exec_done */
        x->out_fd = mine[0];
        x->err_fd = mine[1];
        x->status_fd = mine[2];
        x->launched = true;
        if (req->tty.on)
            tty_attach(req, x);
        return 0;
    }
    return sl_error_set(err, SL_E_RUNTIME, EPIPE, "sandbox session failed twice");
}

void rt_session_exec_done(struct sl_runtime *rt, struct rt_session *s, bool broken)
{
    session_release_exec(rt, s, broken);
}

/* Mark dead and take out of the table every session matching `pick`;
 * kill them outside the lock. */
static int stop_matching(struct sl_runtime *rt, bool (*pick)(struct rt_session *, void *),
                         void *arg)
{
    struct rt_session *victims[64];
    int n = 0, total = 0;
    for (;;) {
        n = 0;
        pthread_mutex_lock(&rt->sessions_lock);
        for (size_t i = 0; i < rt->n_sessions && n < (int)SL_ARRAY_LEN(victims);) {
            struct rt_session *s = rt->sessions[i];
            if (pick(s, arg)) {
                s->dead = true;
                s->refs++;
                victims[n++] = s;
                table_remove(rt, s);
            } else {
                i++;
            }
        }
        pthread_mutex_unlock(&rt->sessions_lock);
        for (int i = 0; i < n; i++) {
            /* Killing init ends the PID namespace; running executions see
             * their status socket close and end as killed. */
            (void)sl_pidfd_send_signal(victims[i]->pidfd, SIGKILL);
            session_put(rt, victims[i]);
        }
        total += n;
        if (n < (int)SL_ARRAY_LEN(victims))
            return total;
    }
}

static bool pick_uid(struct rt_session *s, void *arg) { return s->uid == *(uid_t *)arg; }
static bool pick_all(struct rt_session *s, void *arg)
{
    (void)s;
    (void)arg;
    return true;
}

void rt_session_stop_uid(struct sl_runtime *rt, uid_t uid) { stop_matching(rt, pick_uid, &uid); }

struct prepared_arg {
    uid_t uid;
    const char *root;
};

static bool pick_prepared(struct rt_session *s, void *arg)
{
    const struct prepared_arg *a = arg;
    return s->prepared && s->uid == a->uid && strcmp(s->root, a->root) == 0;
}

void sl_rt_session_drop(struct sl_runtime *rt, uid_t uid, const char *root)
{
    struct prepared_arg a = {.uid = uid, .root = root};
    stop_matching(rt, pick_prepared, &a);
}

void rt_sessions_stop_all(struct sl_runtime *rt) { stop_matching(rt, pick_all, NULL); }

/* Idle sessions stop in two passes: the candidates (unused for idle_ms,
 * nothing in flight) are taken under sessions_lock, and asked whether they
 * run anything outside it (a gVisor sandbox is asked through runsc, which
 * must not hold up every command of the worker); those still unused then
 * stop. */
int sl_rt_reap_idle(struct sl_runtime *rt, int64_t idle_ms)
{
    int64_t now = sl_mono_us(), idle_us = idle_ms * 1000;
    struct rt_session *cand[64];
    size_t n = 0;
    pthread_mutex_lock(&rt->sessions_lock);
    for (size_t i = 0; i < rt->n_sessions && n < SL_ARRAY_LEN(cand); i++) {
        struct rt_session *s = rt->sessions[i];
        if (s->active == 0 && s->refs == 0 && !s->prepared && !s->starting &&
            !s->checkpointing && !s->dead && now - s->last_used_us >= idle_us) {
            s->refs++;
            cand[n++] = s;
        }
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    bool busy[SL_ARRAY_LEN(cand)];
    for (size_t i = 0; i < n; i++)
        busy[i] = rt->backend->session_busy(rt, cand[i]);
    int stopped = 0;
    pthread_mutex_lock(&rt->sessions_lock);
    for (size_t i = 0; i < n; i++) {
        struct rt_session *s = cand[i];
        /* Still only ours, and not used meanwhile. */
        busy[i] = busy[i] || s->refs != 1 || s->active != 0 || s->dead || s->checkpointing ||
                  sl_mono_us() - s->last_used_us < idle_us;
        if (!busy[i]) {
            s->dead = true;
            table_remove(rt, s);
            stopped++;
        }
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    for (size_t i = 0; i < n; i++) {
        if (!busy[i])
            (void)sl_pidfd_send_signal(cand[i]->pidfd, SIGKILL);
        session_put(rt, cand[i]);
    }
    return stopped;
}

int sl_rt_session_prepare(struct sl_runtime *rt, const char *root, uid_t uid,
                          struct sl_error *err)
{
    if (!rt->warm_sessions)
        return sl_error_set(err, SL_E_RUNTIME, ENOTSUP, "this runtime keeps no warm sessions");
    /* The worker's own ceilings and egress defaults: a sandbox's own are
     * written when it is adopted (its first command's caps, the service's
     * egress) like any running session's. */
    const struct sl_rt_caps none = {0};
    const struct sl_rt_egress defaults = {0};
    /* Built outside sessions_lock, unlike session_get's: nobody else knows
     * this uid yet, and every command's session lookup takes that lock. */
    struct rt_session *s = session_start(rt, root, uid, NULL, 0, &none, &defaults, err);
    if (!s)
        return -1;
    s->caps = none;
    /* Its first command's cgroup too (a command that ends by itself leaves
     * its own to the next, exec_cgroup): making one is a mkdir in each
     * hierarchy and its limits, a few milliseconds. */
    if (rt->backend->exec_cgroups && rt->cgroups && sl_cgroups_exec_supported(rt->cgroups)) {
        uint64_t seq = atomic_fetch_add(&rt->exec_seq, 1) + 1;
        struct sl_error ignored = {0};
        int fd = sl_cgroup_exec_create(rt->cgroups, uid, seq, &ignored);
        if (fd >= 0) {
            close(fd);
            s->spare_cg_seq = seq;
        }
    }
    s->prepared = true;
    s->last_used_us = sl_mono_us();
    pthread_mutex_lock(&rt->sessions_lock);
    int rc = table_add(rt, s);
    pthread_mutex_unlock(&rt->sessions_lock);
    if (rc < 0) {
        session_free(rt, s);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    return 0;
}

bool sl_rt_session_adopt(struct sl_runtime *rt, uid_t uid, const char *old_root,
                         const char *new_root)
{
    bool adopted = false;
    pthread_mutex_lock(&rt->sessions_lock);
    for (size_t i = 0; i < rt->n_sessions; i++) {
        struct rt_session *s = rt->sessions[i];
        if (s->uid == uid && !s->dead && strcmp(s->root, old_root) == 0 && session_alive(s)) {
            /* Its mounts are the directory's, which moved with its name. */
            snprintf(s->root, sizeof(s->root), "%s", new_root);
            /* Made at a low priority (service/warm.c): its commands, which
             * inherit init's, run at the normal one. */
            if (setpriority(PRIO_PROCESS, (id_t)s->pid, 0) < 0)
                sl_warn("sandbox uid %u: its session keeps a low priority: %s", (unsigned)uid,
                        strerror(errno));
            s->prepared = false;
            s->egress_pending = true;
            s->last_used_us = sl_mono_us();
            adopted = true;
            break;
        }
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    return adopted;
}

bool sl_rt_session_egress_pending(struct sl_runtime *rt, uid_t uid)
{
    bool pending = false;
    pthread_mutex_lock(&rt->sessions_lock);
    for (size_t i = 0; i < rt->n_sessions && !pending; i++) {
        struct rt_session *s = rt->sessions[i];
        pending = s->uid == uid && !s->dead && s->egress_pending;
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    return pending;
}

int sl_rt_sessions(struct sl_runtime *rt)
{
    pthread_mutex_lock(&rt->sessions_lock);
    int n = (int)rt->n_sessions;
    pthread_mutex_unlock(&rt->sessions_lock);
    return n;
}

/* ---- suspend that keeps memory ------------------------------------------ */

/* Lists the processes, besides init and itself, that hold a descriptor of
 * the host: under gVisor they read "host:[N]" in /proc/<pid>/fd. A
 * background job started without redirecting its output still holds the
 * pipes of the command that started it, and a checkpoint of such a
 * descriptor fails and ends the sandbox (docs/GVISOR.md). */
static const char HOST_FD_SCRIPT[] =
    "for d in /proc/[0-9]*; do p=${d#/proc/}; "
    "if [ \"$p\" = 1 ] || [ \"$p\" = $$ ]; then continue; fi; "
    "for f in \"$d\"/fd/*; do l=$(readlink \"$f\" 2>/dev/null) || continue; "
    "case $l in host:*) echo \"$p $(cat \"$d\"/comm 2>/dev/null)\"; break;; esac; done; done";

/* The live, idle session of uid at root, with a reference; NULL with err
 * (ENOENT none, EBUSY a command runs). */
static struct rt_session *session_idle_ref(struct sl_runtime *rt, uid_t uid, const char *root,
                                           struct sl_error *err)
{
    struct rt_session *found = NULL;
    pthread_mutex_lock(&rt->sessions_lock);
    for (size_t i = 0; i < rt->n_sessions && !found; i++) {
        struct rt_session *s = rt->sessions[i];
        if (s->uid == uid && !s->dead && strcmp(s->root, root) == 0 && session_alive(s))
            found = s;
    }
    if (found && found->active > 0) {
        pthread_mutex_unlock(&rt->sessions_lock);
        sl_error_set(err, SL_E_RUNTIME, EBUSY, "a command of the sandbox runs");
        return NULL;
    }
    if (found)
        found->refs++;
    pthread_mutex_unlock(&rt->sessions_lock);
    if (!found)
        sl_error_set(err, SL_E_RUNTIME, ENOENT, "the sandbox runs nothing");
    return found;
}

int sl_rt_session_checkpoint(struct sl_runtime *rt, uid_t uid, const char *root, const char *dir,
                             struct sl_error *err)
{
    if (!rt->backend->session_checkpoint)
        return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                            "the %s execution backend cannot keep a sandbox's memory "
                            "(SANDBOX_EXECUTION_BACKEND=gvisor can)",
                            rt->backend->name);
    if (rt->backend->checkpoint_possible && rt->backend->checkpoint_possible(rt, err) < 0)
        return -1;
    struct rt_session *s = session_idle_ref(rt, uid, root, err);
    if (!s)
        return -1;
    /* The check runs as a command of the session itself, with its own
     * templates and ceilings (so it changes neither). */
    struct sl_rt_mount *mounts = calloc(s->mounts.n + 1, sizeof(*mounts));
    if (!mounts) {
        session_put(rt, s);
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < s->mounts.n; i++)
        mounts[i] = (struct sl_rt_mount){.name = s->mounts.names[i], .host_path = s->mounts.paths[i]};
    char *argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)HOST_FD_SCRIPT, NULL};
    char *envp[] = {(char *)"PATH=/usr/bin:/bin", NULL};
    struct sl_rt_exec_request req = {.sandbox_root = root, .uid = uid, .argv = argv, .cwd = "/",
                                     .envp = envp, .timeout_ms = 10000, .grace_ms = 500,
                                     .max_output_bytes = 4096, .mounts = mounts,
                                     .nmounts = s->mounts.n, .caps = s->caps};
    struct sl_rt_exec_result res;
    int rc = rt_run(rt, 0, true, &req, &res, err);
    free(mounts);
    if (rc == 0 && (res.timed_out || res.exit_code != 0))
        rc = sl_error_set(err, SL_E_RUNTIME, EIO, "the sandbox could not be inspected before "
                          "its checkpoint (exit %d)", res.exit_code);
    else if (rc == 0 && res.out.len > 0)
        rc = sl_error_set(err, SL_E_RUNTIME, EBUSY,
                          "processes hold the output of the command that started them, which "
                          "a checkpoint cannot keep (start them with their output redirected, "
                          "e.g. > file 2>&1 < /dev/null): %.*s",
                          (int)(res.out.len > 200 ? 200 : res.out.len), res.out.data);
    sl_rt_exec_result_free(&res);
    if (rc < 0) {
        session_put(rt, s);
        return -1;
    }
    /* No command may start on it, nor a new session beside it, from here
     * (session_get answers EBUSY): commands on a terminal take no lock of
     * the service's. */
    pthread_mutex_lock(&rt->sessions_lock);
    bool still = !s->dead && s->active == 0;
    if (still)
        s->checkpointing = true;
    pthread_mutex_unlock(&rt->sessions_lock);
    if (!still) {
        session_put(rt, s);
        return sl_error_set(err, SL_E_RUNTIME, EBUSY, "a command of the sandbox runs");
    }
    bool tried = !(mkdir(dir, 0700) < 0 && errno != EEXIST);
    if (!tried)
        rc = sl_error_errno(err, SL_E_RUNTIME, "cannot create %s", dir);
    else
        rc = rt->backend->session_checkpoint(rt, s, dir, err);
    /* The checkpoint ended the session (or a failed one lost it); one not
     * tried leaves it running. */
    pthread_mutex_lock(&rt->sessions_lock);
    s->checkpointing = false;
    if (tried && !s->dead) {
        s->dead = true;
        table_remove(rt, s);
    }
    pthread_cond_broadcast(&rt->sessions_changed);
    pthread_mutex_unlock(&rt->sessions_lock);
    session_put(rt, s); /* the last reference: stopped and freed */
    return rc;
}

int sl_rt_session_restore(struct sl_runtime *rt, const char *root, uid_t uid, const char *dir,
                          const struct sl_rt_mount *mounts, size_t nmounts,
                          const struct sl_rt_caps *caps, struct sl_error *err)
{
    if (!rt->backend->session_checkpoint)
        return sl_error_set(err, SL_E_RUNTIME, ENOTSUP,
                            "the %s execution backend cannot keep a sandbox's memory",
                            rt->backend->name);
    /* In one hold of the lock: a session the uid has already (a warm
     * pool's, made before its sandbox was a fork's copy) gives way, and
     * the restored one takes its place as a starting placeholder, so a
     * command that comes meanwhile waits for it rather than starting one
     * of its own. */
    struct rt_session *old = NULL;
    pthread_mutex_lock(&rt->sessions_lock);
again:
    for (size_t i = 0; i < rt->n_sessions; i++) {
        struct rt_session *o = rt->sessions[i];
        if (o->uid != uid)
            continue;
        if (o->starting || o->checkpointing) {
            pthread_cond_wait(&rt->sessions_changed, &rt->sessions_lock);
            goto again;
        }
        o->dead = true;
        o->refs++;
        table_remove(rt, o);
        old = o;
        break;
    }
    struct rt_session *s = session_new(rt, root, uid, mounts, nmounts, err);
    if (s && table_add(rt, s) < 0) {
        session_free(rt, s);
        s = NULL;
        sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    }
    if (s) {
        s->starting = true;
        s->refs = 1;
        s->caps = *caps;
        s->last_used_us = sl_mono_us();
    }
    pthread_mutex_unlock(&rt->sessions_lock);
    if (old) {
        (void)sl_pidfd_send_signal(old->pidfd, SIGKILL);
        session_put(rt, old);
    }
    if (!s)
        return -1;
    const struct sl_rt_egress none = {0};
    int rc = session_boot(rt, s, mounts, nmounts, caps, &none, dir, err);
    if (!session_started(rt, s, rc, err))
        return -1;
    session_put(rt, s); /* it lives in the table, unused until a command comes */
    return 0;
}
