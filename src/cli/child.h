/* SPDX-License-Identifier: MIT */
/* child.h - the command `sema run` (and `sema lock`) holds units for: started with the
 * signals sema passes on restored, supervised until it exits. One supervisor for the local
 * (shared-memory) and remote (lease) forms. Signals reach the supervisor through handlers
 * that write a byte to a self-pipe, which it polls beside its own deadlines. */
#ifndef SEMA_CLI_CHILD_H
#define SEMA_CLI_CHILD_H

#include <stdint.h>
#include <sys/types.h>

/* Catch the signals sema passes on to its command (INT, TERM, HUP, QUIT, USR1, USR2,
 * WINCH) and SIGCHLD. Until the command starts, each of those signals also sets *cancel
 * (NULL: none), so a waiting acquire can give up. Returns 0, or -1 with errno set. */
int cli_child_catch(volatile int *cancel);

/* The first passed-on signal that came before the command started, or 0. */
int cli_child_pending(void);

/* The command must stop (its lease was lost): the supervisor sends it SIGTERM, then
 * SIGKILL after its grace. Async-signal-safe; for another thread (the lease keep-alive). */
void cli_child_stop(void);

/* Fork and exec `cmd`, its signals at their defaults, with the environment `env` ("K=V"
 * strings, NULL-terminated, built before the fork; NULL: sema's own). A failed exec prints
 * "sema VERB: CMD: why" and exits CLI_EXIT_NOTFOUND or CLI_EXIT_NOEXEC (the child writes
 * with write() alone: another thread may run). Returns the pid, or -1 with errno set. */
pid_t cli_child_start(const char *verb, char **cmd, char **env);

/* Wait for the command: signals sent to sema alone are passed on (those from the terminal
 * reached both), and after cli_child_stop() the command gets SIGTERM, then SIGKILL after
 * grace_ms; on_stop(arg) runs first, to say why. Returns the command's status as sema's
 * exit code: its own, or CLI_EXIT_SIGNAL_BASE + N for signal N. */
int cli_child_wait(const char *verb, pid_t pid, int64_t grace_ms, void (*on_stop)(void *arg),
                   void *arg);

#endif /* SEMA_CLI_CHILD_H */
