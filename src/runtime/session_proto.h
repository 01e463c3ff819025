/* The wire protocol between the runtime and sandloom-init in session mode.
 * Shared by both sides; sandloom-init is static and includes nothing else of
 * the project.
 *
 * The runtime holds a SOCK_STREAM control socket (its number in init is
 * the argument of --session). For each
 * execution it sends one request: this header, then `payload_len` bytes
 * "cwd\0argv0\0...argvN\0env0\0...envM\0", with four descriptors attached to
 * the header by SCM_RIGHTS: stdin, stdout, stderr and a per-execution
 * status socket (and optionally a fifth: see SL_SESSION_MAX_NFDS). Init forks the command in its own session (process group =
 * its pid) with those descriptors as 0, 1, 2, and when it ends writes the
 * raw wait status (int32) to the status socket and closes it. If the runtime
 * closes its end of the status socket first (deadline, cancel), init kills
 * the command's process group. Before that the runtime may write one byte
 * to the status socket: SL_SESSION_TERM asks init to send SIGTERM to the
 * command's process group, SL_SESSION_KILL SIGKILL, a signal's number that
 * signal (the status still follows). If the control socket closes, the daemon is gone: init kills
 * everything and exits.
 *
 * A request with SL_SESSION_F_TTY runs its command on a terminal: init
 * opens a pseudo-terminal in the sandbox's own devpts (as the sandbox's
 * uid, so the slave is the sandbox's), sizes it cols x rows, and the
 * command gets the slave as 0, 1, 2 and as its controlling terminal (the
 * stdio descriptors of the request are closed unused). Before the status,
 * init then sends one byte on the status socket: SL_SESSION_TTY_OK with
 * the master attached (SCM_RIGHTS), or SL_SESSION_TTY_FAILED (the command
 * did not start: its reason went to the request's stderr, status 126
 * follows). */
#ifndef SL_RUNTIME_SESSION_PROTO_H
#define SL_RUNTIME_SESSION_PROTO_H

#include <signal.h>
#include <stdint.h>

#define SL_SESSION_MAGIC 0x534c5331u /* "SLS1" */
/* One-shot mode: the signal the kernel sends sandloom-init when the daemon
 * thread that spawned it dies (PR_SET_PDEATHSIG). Catchable on purpose:
 * init answers it by killing every process it can reach (the whole PID
 * namespace, or at basic every process of the sandbox's unique uid), so
 * nothing of the sandbox outlives a daemon killed with -9. */
#define SL_INIT_PARENT_DEATH_SIGNAL (SIGRTMIN + 2)

#define SL_SESSION_NFDS 4
/* A fifth descriptor may follow: the command's cgroup.procs, open for
 * writing. The forked child writes "0" to it (enters the cgroup) before it
 * runs the command, so the command's whole tree, whatever process groups
 * or sessions it makes, can be ended as one; a child that cannot enter it
 * does not run the command (status 126). */
#define SL_SESSION_MAX_NFDS 5
#define SL_SESSION_TERM 'T'
#define SL_SESSION_KILL 'K'
/* A byte from 1 to SL_SESSION_MAX_SIGNAL asks for that signal (a client's
 * SIGINT, SIGHUP, SIGQUIT) to the group; the letters above are beyond it. */
#define SL_SESSION_MAX_SIGNAL 64
/* argv and env of the API fit far below this (16 MiB + 8 MiB). */
#define SL_SESSION_MAX_PAYLOAD (32u * 1024 * 1024)
#define SL_SESSION_MAX_ITEMS 4096u

#define SL_SESSION_F_TTY 1u
#define SL_SESSION_TTY_OK 'P'
#define SL_SESSION_TTY_FAILED 'E'

struct sl_session_req {
    uint32_t magic;
    uint32_t payload_len;
    uint32_t argc;
    uint32_t envc;
    uint32_t flags;      /* SL_SESSION_F_* */
    uint16_t cols, rows; /* the terminal's size, with SL_SESSION_F_TTY */
};

#endif
