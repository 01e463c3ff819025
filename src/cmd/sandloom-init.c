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
 * execution, which is what ends the whole tree at basic level. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_USAGE 127

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

int main(int argc, char **argv)
{
    if (argc < 5 || strcmp(argv[1], "--cwd") != 0 || strcmp(argv[3], "--") != 0)
        return usage();
    const char *cwd = argv[2];
    char **command = argv + 4;

    /* Everything init reacts to is taken synchronously with sigwaitinfo.
     * Blocked signals also reach PID 1 (unblocked ones without a handler
     * would be dropped by the kernel). */
    sigset_t handled, original;
    sigemptyset(&handled);
    sigaddset(&handled, SIGCHLD);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGHUP);
    sigaddset(&handled, SIGQUIT);
    sigprocmask(SIG_BLOCK, &handled, &original);

    if (chdir(cwd) < 0) {
        fprintf(stderr, "sandloom-init: cannot change directory to '%s': %s\n", cwd,
                strerror(errno));
        return 1;
    }

    pid_t self = getpid();
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
