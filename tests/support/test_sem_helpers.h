/* SPDX-License-Identifier: MIT */
/* test_sem_helpers.h - small helpers the semaphore tests share: waiter threads and bounded waits.
 */
#ifndef SEMA_TEST_SEM_HELPERS_H
#define SEMA_TEST_SEM_HELPERS_H

#include <pthread.h>
#include <time.h>

#include "sema/sema.h"
#include "test.h"

/* A thread blocked in an acquire (or wait-idle when idle is set). */
typedef struct {
    sema_sem_t *sem;
    uint64_t weight;
    int64_t timeout_ms;
    sema_cancel_t *cancel;
    int idle;
    int rc;           /* result, valid once done */
    int done;         /* atomic */
    int64_t done_seq; /* order in which waiters finished (from seq_counter) */
    pthread_t thread;
} sem_waiter_thread_t;

static int64_t seq_counter;

static inline void *sem_waiter_main(void *arg)
{
    sem_waiter_thread_t *w = arg;

    if (w->idle)
        w->rc = sema_sem_wait_idle_until(
            w->sem,
            w->timeout_ms < 0 ? SEMA_DEADLINE_NONE : sema_sem_now_ns() + w->timeout_ms * 1000000,
            w->cancel);
    else
        w->rc = sema_sem_acquire_until(
            w->sem, w->weight,
            w->timeout_ms < 0 ? SEMA_DEADLINE_NONE : sema_sem_now_ns() + w->timeout_ms * 1000000,
            w->cancel);
    w->done_seq = __atomic_add_fetch(&seq_counter, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* Wait (bounded, 5 s) until the semaphore has `n` queued requests. */
static inline void wait_waiters(sema_sem_t *sem, uint64_t n)
{
    sema_sem_stats_t st;

    for (int i = 0; i < 5000; i++) {
        ASSERT_OK(sema_sem_stats(sem, &st));
        if (st.waiters == n)
            return;
        sleep_ms(1);
    }
    TEST_FAIL_("waiters never reached %llu (now %llu)", (unsigned long long)n,
               (unsigned long long)st.waiters);
}

/* Start a waiter thread and wait until it is queued (the queue grows to `queued_after`). */
static inline void start_waiter(sem_waiter_thread_t *w, sema_sem_t *sem, uint64_t weight,
                                int64_t timeout_ms, sema_cancel_t *cancel, uint64_t queued_after)
{
    memset(w, 0, sizeof(*w));
    w->sem = sem;
    w->weight = weight;
    w->timeout_ms = timeout_ms;
    w->cancel = cancel;
    ASSERT_OK(pthread_create(&w->thread, NULL, sem_waiter_main, w));
    if (queued_after > 0)
        wait_waiters(sem, queued_after);
}

static inline void start_idle_waiter(sem_waiter_thread_t *w, sema_sem_t *sem, int64_t timeout_ms,
                                     uint64_t queued_after)
{
    memset(w, 0, sizeof(*w));
    w->sem = sem;
    w->timeout_ms = timeout_ms;
    w->idle = 1;
    ASSERT_OK(pthread_create(&w->thread, NULL, sem_waiter_main, w));
    if (queued_after > 0)
        wait_waiters(sem, queued_after);
}

static inline int waiter_done(sem_waiter_thread_t *w)
{
    return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

/* Join the waiter (bounded by the test timeout) and return its result. */
static inline int join_waiter(sem_waiter_thread_t *w)
{
    ASSERT_OK(pthread_join(w->thread, NULL));
    return w->rc;
}

#endif /* SEMA_TEST_SEM_HELPERS_H */
