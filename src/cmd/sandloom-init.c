/* sandloom-init: the first program of every sandbox (PID 1 when the sandbox
 * has a PID namespace), executed by the runtime after the sandbox was built.
 *
 *   sandloom-init --cwd DIR -- COMMAND [ARG...]
 *
 * Changes to DIR, runs COMMAND (looked up in the sandbox's PATH) as its only
 * direct child, forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to the execution's
 * process group, reaps every child (orphans are reparented to PID 1), and
 * exits with the command's status: its exit code, or 128+N when it died of
 * signal N. Static, so it needs nothing from inside the sandbox.
 *
 * The command stays in init's process group and session (created by the
 * runtime before exec): the runtime kills that group at the end of an
 * execution, which is what ends the whole tree at basic level.
 *
 *   sandloom-init --session FD
 *
 * Session mode (warm sandboxes): init stays, and runs one command per
 * request received on the control socket FD, as runtime/session_proto.h
 * describes; background processes of one command outlive it and are still
 * there for the next. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <termios.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/session_proto.h"

#define EXIT_USAGE 127
#define MAX_RUNNING 256
/* --gvisor-compat: the library that makes the stat family work under
 * Debian's runsc (src/cmd/gvisor-compat.c), preloaded into commands. */
#define GVISOR_COMPAT_LIB "/.sandloom/gvisor-compat.so"
static bool gvisor_compat;

/* The signals init reacts to, blocked and taken synchronously (sigwaitinfo
 * or a signalfd): blocked signals also reach PID 1, while unblocked ones
 * without a handler would be dropped by the kernel. */
static void block_handled_signals(sigset_t *handled, sigset_t *original)
{
    sigemptyset(handled);
    sigaddset(handled, SIGCHLD);
    sigaddset(handled, SIGTERM);
    sigaddset(handled, SIGINT);
    sigaddset(handled, SIGHUP);
    sigaddset(handled, SIGQUIT);
    sigaddset(handled, SL_INIT_PARENT_DEATH_SIGNAL);
    sigprocmask(SIG_BLOCK, handled, original);
}

static int usage(void)
{
    fprintf(stderr, "sandloom-init: usage: sandloom-init --cwd DIR -- COMMAND [ARG...]\n");
    return EXIT_USAGE;
}

static _Noreturn void run_command(char **argv, const sigset_t *mask, pid_t init_pid)
{
    /* Killed with init at basic level (with a PID namespace, init's death
     * ends everything anyway). */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != init_pid)
        _exit(EXIT_USAGE);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "sandloom-init: cannot execute '%s': %s\n", argv[0], strerror(e));
    _exit(e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG ? 127 : 126);
}

/* ---- session mode ------------------------------------------------------ */

struct running {
    pid_t pid;     /* 0 = free slot */
    int status_fd; /* -1 once the status was written */
};

static struct running running[MAX_RUNNING];

static int read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* The child side of one request: its own session, the given stdio, cwd,
 * environment; then the command. */
static _Noreturn void session_child(int *fds, bool tty, const char *cwd, char **argv,
                                    char **envp, const sigset_t *mask)
{
    /* Into the command's own cgroup before anything of the command runs,
     * so that everything it will ever fork can be ended with it. */
    if (fds[4] >= 0 && write(fds[4], "0", 1) != 1) {
        int e = errno;
        char msg[96];
        int len = snprintf(msg, sizeof(msg), "sandloom-init: cannot enter the command's cgroup: %s\n",
                           strerror(e));
        if (len > 0 && write(fds[2], msg, (size_t)len) < 0) {
            /* nobody to tell */
        }
        _exit(126);
    }
    setsid();
    for (int i = 0; i < 3; i++)
        if (dup2(fds[i], i) < 0)
            _exit(126);
    /* On a terminal (all three are its slave): it becomes the new
     * session's controlling terminal, so ^C and job control work. */
    if (tty && ioctl(0, TIOCSCTTY, 0) < 0)
        _exit(126);
    /* Only 0, 1, 2 reach the command: one close_range, not a loop of
     * closes (each of them would pay the seccomp filter). The upper bound
     * is INT_MAX, not ~0U: gVisor's Sentry refuses a bound above the
     * largest descriptor number with EINVAL, and the loop below would
     * then cost 38 ms a command there. */
    if (syscall(SYS_close_range, 3, 0x7fffffffU, 0) < 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    if (chdir(cwd) < 0) {
        fprintf(stderr, "sandloom-init: cannot change directory to '%s': %s\n", cwd,
                strerror(errno));
        _exit(1);
    }
    extern char **environ;
    environ = envp;
    if (gvisor_compat) {
        /* First in LD_PRELOAD: a sandbox's own preloads come after it. */
        const char *own = getenv("LD_PRELOAD");
        char preload[4096];
        snprintf(preload, sizeof(preload), "%s%s%s", GVISOR_COMPAT_LIB, own && *own ? ":" : "",
                 own ? own : "");
        setenv("LD_PRELOAD", preload, 1);
    }
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "sandloom-init: cannot execute '%s': %s\n", argv[0], strerror(e));
    _exit(e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG ? 127 : 126);
}

/* A pseudo-terminal of the sandbox's devpts, sized cols x rows: the master
 * in *master, the slave returned; -1 with errno. */
static int open_tty(unsigned cols, unsigned rows, int *master)
{
    int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return -1;
    int unlock = 0;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    int s = ioctl(m, TIOCSPTLCK, &unlock) < 0 ? -1 : ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    if (s < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0) {
        int e = errno;
        if (s >= 0)
            close(s);
        close(m);
        errno = e;
        return -1;
    }
    *master = m;
    return s;
}

/* Tell the runtime how the terminal went: the byte, and the master. */
static void send_tty(int status_fd, int master)
{
    char b = master >= 0 ? SL_SESSION_TTY_OK : SL_SESSION_TTY_FAILED;
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = &b, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (master >= 0) {
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &master, sizeof(int));
    }
    if (sendmsg(status_fd, &msg, MSG_NOSIGNAL) < 0) {
        /* the runtime gave up already: the status socket's end says so */
    }
}

/* Read one request and start its command. -1 when the control socket is
 * gone (the daemon died or stopped the session). */
static int session_request(int ctl, const sigset_t *mask)
{
    struct sl_session_req req;
    char cbuf[CMSG_SPACE(sizeof(int) * SL_SESSION_MAX_NFDS)];
    struct iovec iov = {.iov_base = &req, .iov_len = sizeof(req)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof(cbuf)};
    ssize_t n;
    do
        n = recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    int fds[SL_SESSION_MAX_NFDS] = {-1, -1, -1, -1, -1};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        (c->cmsg_len == CMSG_LEN(sizeof(int) * SL_SESSION_NFDS) ||
         c->cmsg_len == CMSG_LEN(sizeof(int) * SL_SESSION_MAX_NFDS)))
        memcpy(fds, CMSG_DATA(c), c->cmsg_len - CMSG_LEN(0));
    if ((size_t)n != sizeof(req) || req.magic != SL_SESSION_MAGIC ||
        req.payload_len > SL_SESSION_MAX_PAYLOAD || req.argc == 0 ||
        req.argc > SL_SESSION_MAX_ITEMS || req.envc > SL_SESSION_MAX_ITEMS || fds[3] < 0) {
        close_fds(fds, SL_SESSION_MAX_NFDS);
        return -1; /* a protocol error: the stream can no longer be trusted */
    }
    char *payload = malloc(req.payload_len + 1);
    char **argv = calloc(req.argc + 1, sizeof(*argv));
    char **envp = calloc(req.envc + 1, sizeof(*envp));
    if (!payload || !argv || !envp || read_full(ctl, payload, req.payload_len) < 0) {
        free(payload);
        free(argv);
        free(envp);
        close_fds(fds, SL_SESSION_MAX_NFDS);
        return -1;
    }
    payload[req.payload_len] = '\0';
    /* Split "cwd\0argv...\0env...\0" without trusting the counts. */
    char *p = payload, *end = payload + req.payload_len;
    const char *cwd = p;
    p += strlen(p) + 1;
    for (uint32_t i = 0; i < req.argc && p < end; i++, p += strlen(p) + 1)
        argv[i] = p;
    for (uint32_t i = 0; i < req.envc && p < end; i++, p += strlen(p) + 1)
        envp[i] = p;
    int status_fd = fds[3];
    int slot = -1;
    for (int i = 0; i < MAX_RUNNING && slot < 0; i++)
        if (!running[i].pid)
            slot = i;
    bool tty = req.flags & SL_SESSION_F_TTY;
    int master = -1, slave = -1;
    if (tty && slot >= 0 && argv[0]) {
        slave = open_tty(req.cols, req.rows, &master);
        if (slave < 0) {
            char why[96];
            int len = snprintf(why, sizeof(why), "sandloom-init: cannot open a terminal: %s\n",
                               strerror(errno));
            if (len > 0 && write(fds[2], why, (size_t)len) < 0) {
                /* nobody to tell */
            }
        } else {
            /* The command's stdio is the terminal's slave. */
            close_fds(fds, 3);
            fds[0] = fds[1] = fds[2] = slave;
        }
    }
    pid_t pid = slot >= 0 && argv[0] && (!tty || slave >= 0) ? fork() : -1;
    if (pid == 0)
        session_child(fds, tty, cwd, argv, envp, mask);
    if (tty)
        send_tty(status_fd, pid > 0 ? master : -1);
    if (master >= 0)
        close(master);
    if (slave >= 0) {
        close(slave);
        fds[0] = fds[1] = fds[2] = -1;
    }
    close_fds(fds, 3);
    close_fds(fds + 4, 1);
    free(payload);
    free(argv);
    free(envp);
    if (pid < 0) {
        int32_t status = (int32_t)(126 << 8); /* as if it exited 126: could not start */
        if (write(status_fd, &status, sizeof(status)) < 0) {
            /* the runtime gave up already */
        }
        close(status_fd);
        return 0;
    }
    running[slot].pid = pid;
    running[slot].status_fd = status_fd;
    return 0;
}

static int session_main(int ctl)
{
    /* init holds the session's control and status sockets: processes of the
     * sandbox (same uid) must not open them through /proc/1/fd or ptrace
     * init. Commands get the flag back at their exec. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (fcntl(ctl, F_SETFD, FD_CLOEXEC) < 0)
        return EXIT_USAGE;
    sigset_t handled, original;
    block_handled_signals(&handled, &original);
    int sfd = signalfd(-1, &handled, SFD_CLOEXEC);
    if (sfd < 0)
        return EXIT_USAGE;
    /* A runtime that closes a status socket while init writes to it must not
     * kill init; the commands get SIGPIPE back (session_child). */
    signal(SIGPIPE, SIG_IGN);
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    for (int i = 0; i < MAX_RUNNING; i++)
        running[i].status_fd = -1;

    for (;;) {
        struct pollfd pfd[2 + MAX_RUNNING];
        int map[2 + MAX_RUNNING];
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = ctl, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
        for (int i = 0; i < MAX_RUNNING; i++)
            if (running[i].pid && running[i].status_fd >= 0) {
                map[n] = i;
                pfd[n++] = (struct pollfd){.fd = running[i].status_fd, .events = POLLIN};
            }
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            return EXIT_USAGE;
        }
        if (pfd[0].revents && session_request(ctl, &original) < 0) {
            kill(-1, SIGKILL); /* the daemon is gone: so is everything here */
            return 0;
        }
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo != SIGCHLD) {
                    kill(-1, SIGKILL);
                    return 128 + (int)si.ssi_signo;
                }
                break;
            }
            int status;
            pid_t pid;
            while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                for (int i = 0; i < MAX_RUNNING; i++) {
                    if (running[i].pid != pid)
                        continue;
                    if (running[i].status_fd >= 0) {
                        int32_t st = status;
                        if (write(running[i].status_fd, &st, sizeof(st)) < 0) {
                            /* the runtime gave up already */
                        }
                        close(running[i].status_fd);
                    }
                    running[i].pid = 0;
                    running[i].status_fd = -1;
                }
            }
        }
        /* The runtime spoke on a status socket: a byte asks for SIGTERM or
         * SIGKILL of the command's process group (its pid, from setsid);
         * end of stream means it gave up on the command (deadline passed
         * or daemon gone): kill the group and forget the socket. The
         * command is still reaped above. */
        for (int k = 2; k < n; k++) {
            struct running *r = &running[map[k]];
            /* The command may have been reaped above in this same round:
             * then its socket is closed and this event is stale. */
            if (!pfd[k].revents || r->pid <= 0 || r->status_fd != pfd[k].fd)
                continue;
            char req = 0;
            ssize_t got = read(r->status_fd, &req, 1);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            unsigned char b = (unsigned char)req;
            int sig = got != 1                   ? SIGKILL
                      : b == SL_SESSION_TERM     ? SIGTERM
                      : b >= 1 && b <= SL_SESSION_MAX_SIGNAL ? (int)b
                                                             : SIGKILL;
            kill(-r->pid, sig);
            /* A command that left its group (setsid, setpgid) still gets
             * the signal, but a catchable one reaches it once: the group's
             * copy already did when it is still the leader, and a second,
             * arriving while its handler runs, would run the handler again. */
            if (sig == SIGKILL || getpgid(r->pid) != r->pid)
                kill(r->pid, sig);
            if (got != 1) {
                close(r->status_fd);
                r->status_fd = -1;
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--session") == 0)
        return session_main(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "--session") == 0 &&
        strcmp(argv[3], "--gvisor-compat") == 0) {
        gvisor_compat = true;
        return session_main(atoi(argv[2]));
    }
    if (argc < 5 || strcmp(argv[1], "--cwd") != 0 || strcmp(argv[3], "--") != 0)
        return usage();
    const char *cwd = argv[2];
    char **command = argv + 4;

    sigset_t handled, original;
    block_handled_signals(&handled, &original);

    if (chdir(cwd) < 0) {
        fprintf(stderr, "sandloom-init: cannot change directory to '%s': %s\n", cwd,
                strerror(errno));
        return 1;
    }

    pid_t self = getpid();
    pid_t parent = getppid(); /* 0 when we are PID 1 of a namespace */
    /* Without a PID namespace, orphans of the command come to us rather
     * than to the host's init: we reap them like PID 1 does. */
    if (self != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "sandloom-init: cannot fork: %s\n", strerror(errno));
        return 126;
    }
    if (child == 0)
        run_command(command, &original, self);

    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&handled, &info);
        if (sig < 0)
            continue;
        if (sig == SL_INIT_PARENT_DEATH_SIGNAL) {
            /* The daemon died (the kernel's parent-death signal) when our
             * parent changed (reparenting happens before the signal). As
             * PID 1 of a namespace our parent reads as 0 and processes of
             * the sandbox cannot signal us, so the signal came from
             * outside. Otherwise (basic) it is a sandbox process's and is
             * ignored. */
            if (parent != 0 && getppid() == parent)
                continue;
            /* Nothing of this execution may outlive the daemon: kill(-1)
             * reaches every process of the PID namespace, or at basic
             * every process of this sandbox's unique uid. */
            kill(-1, SIGKILL);
            return 128 + SIGKILL;
        }
        if (sig != SIGCHLD) {
            /* Our own forwarded copy comes back to us: not again. */
            if (info.si_code == SI_USER && info.si_pid == self)
                continue;
            kill(0, sig);
            continue;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            if (pid != child)
                continue;
            if (WIFEXITED(status))
                return WEXITSTATUS(status);
            if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
        }
        if (pid < 0 && errno == ECHILD)
            return 127; /* cannot happen: the command is our child */
    }
}
