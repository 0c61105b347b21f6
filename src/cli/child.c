/* SPDX-License-Identifier: MIT */
/* child.c - the command `sema run` holds units for: start it, pass signals on, stop it when
 * its lease is lost, wait for it (see child.h). */
#include "cli/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* Bytes on the self-pipe: a signal number (pass it on), a signal number | 0x80 (it came
 * from the terminal: the command got it too), or one of these. */
enum { EV_STOP = 0xFD, EV_CHILD = 0xFE };

static const int passed_on[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
#define NPASSED (sizeof passed_on / sizeof passed_on[0])

static int ev_pipe[2] = {-1, -1};
static volatile int *cancel_flag; /* set by a passed-on signal until the command starts */

static void put(unsigned char b)
{
    if (write(ev_pipe[1], &b, 1) < 0) {
        /* the pipe is full: the supervisor is far behind, and the byte is not needed */
    }
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;

    (void)uc;
    if (sig == SIGCHLD) {
        b = EV_CHILD;
    } else {
        if (cancel_flag != NULL)
            __atomic_store_n((int *)cancel_flag, 1, __ATOMIC_RELEASE);
        if (si != NULL && si->si_code == SI_KERNEL)
            b |= 0x80;
    }
    put(b);
    errno = saved;
}

int cli_child_catch(volatile int *cancel)
{
    struct sigaction sa;

    if (ev_pipe[0] < 0 && pipe2(ev_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    cancel_flag = cancel;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NPASSED; i++)
        sigaction(passed_on[i], &sa, NULL);
    sa.sa_flags |= SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    return 0;
}

int cli_child_pending(void)
{
    unsigned char b;

    while (read(ev_pipe[0], &b, 1) == 1)
        if (b != EV_CHILD && b != EV_STOP)
            return b & 0x7F;
    return 0;
}

void cli_child_stop(void)
{
    put(EV_STOP);
}

pid_t cli_child_start(const char *verb, char **cmd, char **env)
{
    pid_t pid = fork();

    if (pid != 0)
        return pid;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (size_t i = 0; i < NPASSED; i++)
        sigaction(passed_on[i], &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    if (env != NULL)
        environ = env; /* a pointer store: safe after fork, unlike setenv */
    execvp(cmd[0], cmd);
    int code = errno == ENOENT ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC;
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

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return CLI_EXIT_SIGNAL_BASE + WTERMSIG(status);
    return CLI_EXIT_FAIL;
}

/* React to one byte; returns 1 when the command has exited (its status in *status). */
static int on_byte(unsigned char b, pid_t pid, int *status, int64_t *kill_at, int64_t grace_ms,
                   void (*on_stop)(void *), void *arg)
{
    if (b == EV_CHILD)
        return waitpid(pid, status, WNOHANG) == pid;
    if (b == EV_STOP) {
        if (on_stop != NULL)
            on_stop(arg);
        kill(pid, SIGTERM);
        if (*kill_at < 0)
            *kill_at = now_ms() + grace_ms;
        return 0;
    }
    if (!(b & 0x80))
        kill(pid, b); /* sent to sema alone: pass it on (terminal signals reach both) */
    return 0;
}

int cli_child_wait(const char *verb, pid_t pid, int64_t grace_ms, void (*on_stop)(void *arg),
                   void *arg)
{
    int64_t kill_at = -1;
    int status = 0;

    cancel_flag = NULL;
    for (;;) {
        struct pollfd pfd = {.fd = ev_pipe[0], .events = POLLIN};
        int64_t left = kill_at < 0 ? 1000 : kill_at - now_ms();
        poll(&pfd, 1, left < 0 ? 0 : (int)left);
        unsigned char b;
        while (read(ev_pipe[0], &b, 1) == 1)
            if (on_byte(b, pid, &status, &kill_at, grace_ms, on_stop, arg))
                return exit_code(status);
        if (waitpid(pid, &status, WNOHANG) == pid) /* a SIGCHLD byte may have been lost */
            return exit_code(status);
        if (kill_at >= 0 && now_ms() >= kill_at) {
            fprintf(stderr, "sema %s: the command ignored SIGTERM for %.1fs: SIGKILL\n", verb,
                    (double)grace_ms / 1000.0);
            kill(pid, SIGKILL);
            kill_at = INT64_MAX;
        }
    }
}
