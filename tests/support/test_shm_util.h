/* SPDX-License-Identifier: MIT */
/* test_shm_util.h - helpers for the shared-memory semaphore tests: unique names, forked
 * children with bounded waits, and an anonymous shared page for witnesses. */
#ifndef SEMA_TEST_SHM_UTIL_H
#define SEMA_TEST_SHM_UTIL_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sema/shm.h"
#include "shm_internal.h"
#include "test.h"

/* A unique semaphore name for this test process (pid + counter), unlinked first. */
static inline const char *tshm_name(char *buf, size_t cap)
{
    static int counter;
    snprintf(buf, cap, "test-%d-%d", (int)getpid(), counter++);
    (void)sema_shm_unlink(buf);
    return buf;
}

static inline sema_shm_t *tshm_open(const char *name, uint64_t capacity)
{
    sema_shm_t *h = NULL;
    ASSERT_OK(sema_shm_open(name, capacity, 0, 0, &h));
    return h;
}

static inline void tshm_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline int64_t tshm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* fork() whose child dies with the test (no orphans holding pipes after a failure). */
static inline pid_t tshm_fork(void)
{
    pid_t parent = getpid(), pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(9);
    }
    return pid;
}

/* An anonymous shared mapping that forked children see (witness counters, logs). */
static inline void *tshm_shared(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT(p != MAP_FAILED);
    memset(p, 0, size);
    return p;
}

/* Wait for child `pid` up to `ms`; kill it and fail if it does not exit. Returns its
 * exit status (or 128+signal). */
static inline int tshm_wait(pid_t pid, long ms)
{
    int64_t end = tshm_now_ms() + ms;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        ASSERT_EQ(r, 0);
        if (tshm_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            TEST_FAIL_("child %d did not finish within %ld ms", (int)pid, ms);
        }
        tshm_sleep_ms(2);
    }
}

/* Poll `cond` (an expression) every 2 ms for up to `ms`; true if it became true. */
#define TSHM_EVENTUALLY(cond, ms)                                                                  \
    ({                                                                                             \
        int64_t end_ = tshm_now_ms() + (ms);                                                       \
        int ok_ = 0;                                                                               \
        while (!(ok_ = !!(cond)) && tshm_now_ms() < end_)                                          \
            tshm_sleep_ms(2);                                                                      \
        ok_;                                                                                       \
    })

static inline sema_shm_stats_t tshm_stats(sema_shm_t *h)
{
    sema_shm_stats_t st;
    ASSERT_OK(sema_shm_stats(h, &st));
    return st;
}

/* A request on its own thread. */
typedef struct {
    sema_shm_t *h;
    uint64_t weight;
    int64_t timeout_ms;
    _Atomic int done;
    int rc;
    pthread_t th;
} req_t;

static inline void *req_main(void *arg)
{
    req_t *r = arg;
    r->rc = sema_shm_acquire(r->h, r->weight, r->timeout_ms);
    atomic_store(&r->done, 1);
    return NULL;
}

static inline void req_start(req_t *r, sema_shm_t *h, uint64_t w, int64_t t)
{
    r->h = h;
    r->weight = w;
    r->timeout_ms = t;
    atomic_store(&r->done, 0);
    ASSERT_OK(pthread_create(&r->th, NULL, req_main, r));
    ASSERT(TSHM_EVENTUALLY(sema__shm_test_waiting(h) || atomic_load(&r->done), 5000));
}

static inline int req_join(req_t *r)
{
    ASSERT(TSHM_EVENTUALLY(atomic_load(&r->done), 5000));
    pthread_join(r->th, NULL);
    return r->rc;
}

#endif /* SEMA_TEST_SHM_UTIL_H */
