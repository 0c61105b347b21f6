/* SPDX-License-Identifier: MIT */
/* remote_run.c - `sema run` and `sema lock`: hold a lease while a command runs, renew it in
 * the background, forward signals, and stop the command if the lease is lost. */
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Bytes on the self-pipe: a signal number (forward it), a signal number | 0x80 (it came
 * from the terminal: the command got it too), or one of these. */
enum { EV_LOST = 0xFD, EV_CHILD = 0xFE };

static int ev_pipe[2] = {-1, -1};
static volatile int cancel_flag; /* set by any handled signal: stops a waiting acquire */
static int lost_reason;          /* atomic: set by the keep-alive thread */

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;

    (void)uc;
    if (sig == SIGCHLD) {
        b = EV_CHILD;
    } else {
        __atomic_store_n((int *)&cancel_flag, 1, __ATOMIC_RELEASE);
        if (si != NULL && si->si_code == SI_KERNEL)
            b |= 0x80;
    }
    if (write(ev_pipe[1], &b, 1) < 0) {
        /* the pipe is full: the loop is far behind, and the byte is not needed */
    }
    errno = saved;
}

static void on_lost(void *arg, const sema_lease_t *lease, int reason)
{
    unsigned char b = EV_LOST;

    (void)arg;
    (void)lease;
    __atomic_store_n(&lost_reason, reason, __ATOMIC_RELEASE);
    if (write(ev_pipe[1], &b, 1) < 0) {
        /* as above */
    }
}

static int setup_signals(void)
{
    struct sigaction sa;

    if (pipe2(ev_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &sa, NULL);
    sa.sa_flags |= SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    return 0;
}

/* The first forwarded signal that arrived while acquiring (0 if none). */
static int pending_signal(void)
{
    unsigned char b;

    while (read(ev_pipe[0], &b, 1) == 1)
        if (b != EV_CHILD && b != EV_LOST)
            return b & 0x7F;
    return 0;
}

static int take_lease(remote_opts_t *o, sema_client_t *c, sema_lease_t *lease)
{
    sema_acquire_opts_t ao = {.weight = o->weight,
                              .timeout_ms = o->timeout_ms,
                              .ttl_ms = o->ttl_ms,
                              .owner = o->owner,
                              .cancel = &cancel_flag};
    sema_client_error_t e;
    int rc;

    if (o->capacity > 0 && (rc = sema_client_create(c, o->pos[0], o->capacity, NULL, &e)) != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->mode != 0)
        rc = sema_client_lock(c, o->pos[0], o->mode, &ao, lease, &e);
    else
        rc = sema_client_acquire(c, o->pos[0], &ao, lease, &e);
    if (rc == SEMA_ECANCELED && __atomic_load_n((int *)&cancel_flag, __ATOMIC_ACQUIRE)) {
        int sig = pending_signal();
        return 128 + (sig ? sig : SIGINT);
    }
    if (rc == SEMA_ENOENT && o->mode == 0 && o->capacity == 0)
        fprintf(stderr, "sema %s: %s: no such semaphore (create it, or pass -c CAPACITY)\n",
                o->verb, o->pos[0]);
    else if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    return rc == 0 ? 0 : CLI_EXIT_FAIL;
}

/* Fork and exec cmd. A failed exec says "sema VERB: CMD: why", as `sema run --local` does,
 * with write() alone: the keep-alive thread runs, so the child may only be async-signal-safe. */
static pid_t start_command(const char *verb, char **cmd)
{
    pid_t pid = fork();

    if (pid != 0)
        return pid;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    execvp(cmd[0], cmd);
    int code = errno == ENOENT ? 127 : 126;
    const char *why = strerror(errno);
    const char *parts[] = {"sema ", verb, ": ", cmd[0], ": ", why, "\n"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (write(2, parts[i], strlen(parts[i])) < 0)
            break;
    _exit(code);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* React to one event byte; returns 1 when the child has exited (status in *status). */
static int handle_event(remote_opts_t *o, unsigned char b, pid_t pid, int *status, int64_t *kill_at,
                        const sema_lease_t *lease)
{
    if (b == EV_CHILD)
        return waitpid(pid, status, WNOHANG) == pid;
    if (b == EV_LOST) {
        int why = __atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE);
        fprintf(stderr, "sema %s: lease %s on %s lost (%s): stopping the command\n", o->verb,
                lease->id, lease->name, sema_strerror(why));
        kill(pid, SIGTERM);
        if (*kill_at < 0)
            *kill_at = now_ms() + o->grace_ms;
        return 0;
    }
    if (!(b & 0x80))
        kill(pid, b); /* sent to sema alone: pass it on (terminal signals reach both) */
    return 0;
}

/* Wait for the child, forwarding signals and enforcing a lost lease. Returns its status. */
static int supervise(remote_opts_t *o, pid_t pid, const sema_lease_t *lease)
{
    int64_t kill_at = -1;
    int status = 0;

    for (;;) {
        struct pollfd pfd = {.fd = ev_pipe[0], .events = POLLIN};
        int wait = kill_at < 0 ? 1000 : (int)(kill_at - now_ms());
        if (wait < 0)
            wait = 0;
        poll(&pfd, 1, wait);
        unsigned char b;
        while (read(ev_pipe[0], &b, 1) == 1)
            if (handle_event(o, b, pid, &status, &kill_at, lease))
                return status;
        if (waitpid(pid, &status, WNOHANG) == pid) /* a SIGCHLD byte may have been lost */
            return status;
        if (kill_at >= 0 && now_ms() >= kill_at) {
            fprintf(stderr, "sema %s: the command ignored SIGTERM for %.1fs: SIGKILL\n", o->verb,
                    (double)o->grace_ms / 1000.0);
            kill(pid, SIGKILL);
            kill_at = INT64_MAX;
        }
    }
}

static int exit_status(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return CLI_EXIT_FAIL;
}

/* Stop renewing and release; a lease that ended early turns the result into "lost". */
static int finish(remote_opts_t *o, sema_keepalive_t *ka, int cmd_status)
{
    sema_client_error_t e;
    int rc = sema_lease_keepalive_stop(ka, 1, &e);

    if (rc == 0)
        return cmd_status;
    if (__atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE) != 0)
        return CLI_EXIT_LOST; /* already reported */
    if (rc == SEMA_EEXPIRED || rc == SEMA_EREVOKED || rc == SEMA_ESTALE || rc == SEMA_ECANCELED ||
        rc == SEMA_ENOENT || __atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE) != 0) {
        fprintf(stderr, "sema %s: the lease ended before the command did: %s\n", o->verb,
                e.message);
        return CLI_EXIT_LOST;
    }
    fprintf(stderr, "sema %s: warning: could not release the lease (%s); it expires by itself\n",
            o->verb, e.message);
    return cmd_status;
}

int remote_run(remote_opts_t *o)
{
    sema_lease_t lease;
    sema_keepalive_t *ka = NULL;

    if (setup_signals() != 0) {
        perror("sema: pipe");
        return CLI_EXIT_FAIL;
    }
    sema_client_t *c = remote_client(o);
    if (c == NULL)
        return CLI_EXIT_USAGE;
    int rc = take_lease(o, c, &lease);
    if (rc == 0 && (rc = sema_lease_keepalive_start(&ka, c, &lease, on_lost, NULL)) != 0) {
        fprintf(stderr, "sema %s: cannot start the keep-alive: %s\n", o->verb, sema_strerror(rc));
        sema_client_release(c, lease.id, NULL);
        rc = CLI_EXIT_FAIL;
    }
    if (rc != 0) {
        sema_client_free(c);
        return rc;
    }
    pid_t pid = start_command(o->verb, o->cmd);
    int status;
    if (pid < 0) {
        perror("sema: fork");
        status = CLI_EXIT_FAIL << 8;
    } else {
        status = supervise(o, pid, &lease);
    }
    int lost = __atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE) != 0;
    rc = finish(o, ka, exit_status(status));
    sema_client_free(c);
    return lost ? CLI_EXIT_LOST : rc;
}
