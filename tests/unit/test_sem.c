/* SPDX-License-Identifier: MIT */
/* test_sem.c - unit tests of the weighted semaphore: one case per rule of docs/semantics.md. */
#include "test_sem_helpers.h"

#include "sem_internal.h"

static sema_sem_stats_t stats(sema_sem_t *sem)
{
    sema_sem_stats_t st;

    ASSERT_OK(sema_sem_stats(sem, &st));
    return st;
}

TEST(new_rejects_bad_input)
{
    sema_sem_t *sem = (sema_sem_t *)1;

    ASSERT_EQ(sema_sem_new(NULL, 1), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_new(&sem, 0), SEMA_EINVAL);
    ASSERT_NULL(sem);
    ASSERT_EQ(sema_sem_new(&sem, SEMA_SEM_MAX_CAPACITY + 1), SEMA_EINVAL);
    ASSERT_OK(sema_sem_new(&sem, SEMA_SEM_MAX_CAPACITY));
    ASSERT_EQ(stats(sem).available, (int64_t)SEMA_SEM_MAX_CAPACITY);
    sema_sem_free(sem);
    sema_sem_free(NULL);
}

TEST(null_and_zero_weight_rejected)
{
    sema_sem_t *sem;
    sema_sem_waiter_t w;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_EQ(sema_sem_acquire(NULL, 1, -1), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_release(NULL, 1), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_acquire(sem, 0, -1), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_try_acquire(sem, 0), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_release(sem, 0), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, NULL, NULL, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_acquire_async(sem, 0, &w, NULL, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_stats(sem, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_close(NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_set_capacity(NULL, 1), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_wait_idle(NULL, 0), SEMA_EINVAL);
    ASSERT_EQ(stats(sem).available, 3);
    sema_sem_free(sem);
}

TEST(weight_above_capacity_rejected_at_once)
{
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1)); /* the slow path decides, not the fast word */
    ASSERT_EQ(sema_sem_acquire(sem, 4, -1), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_try_acquire(sem, 4), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_acquire(sem, UINT64_MAX, 100), SEMA_EINVAL);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

TEST(acquire_release_counts)
{
    sema_sem_t *sem;
    sema_sem_stats_t st;

    ASSERT_OK(sema_sem_new(&sem, 10));
    ASSERT_OK(sema_sem_acquire(sem, 4, -1));
    ASSERT_OK(sema_sem_acquire(sem, 6, 0));
    ASSERT_EQ(sema_sem_try_acquire(sem, 1), SEMA_EBUSY);
    st = stats(sem);
    ASSERT_EQ(st.capacity, 10);
    ASSERT_EQ(st.available, 0);
    ASSERT_EQ(st.held, 10);
    ASSERT_EQ(st.waiters, 0);
    ASSERT_OK(sema_sem_release(sem, 4));
    ASSERT_OK(sema_sem_release(sem, 6));
    ASSERT_EQ(stats(sem).available, 10);
    sema_sem_free(sem);
}

TEST(over_release_is_an_error)
{
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 5));
    ASSERT_EQ(sema_sem_release(sem, 1), SEMA_EOVERFLOW);
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    ASSERT_EQ(sema_sem_release(sem, 3), SEMA_EOVERFLOW);
    ASSERT_EQ(sema_sem_release(sem, UINT64_MAX), SEMA_EOVERFLOW);
    ASSERT_EQ(stats(sem).held, 2);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_EQ(sema_sem_release(sem, 1), SEMA_EOVERFLOW);
    ASSERT_EQ(stats(sem).available, 5);
    sema_sem_free(sem);
}

TEST(blocking_acquire_is_granted_by_release)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w;

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    start_waiter(&w, sem, 2, -1, NULL, 1);
    ASSERT(!waiter_done(&w));
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_OK(join_waiter(&w));
    ASSERT_EQ(stats(sem).held, 2);
    ASSERT_OK(sema_sem_release(sem, 2));
    sema_sem_free(sem);
}

TEST(fifo_order_of_blocked_threads)
{
    enum { N = 6 };
    sema_sem_t *sem;
    sem_waiter_thread_t w[N];

    ASSERT_OK(sema_sem_new(&sem, 1));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    for (int i = 0; i < N; i++)
        start_waiter(&w[i], sem, 1, -1, NULL, (uint64_t)i + 1);
    for (int i = 0; i < N; i++) {
        ASSERT_OK(sema_sem_release(sem, 1)); /* hands the unit to w[i] exactly */
        ASSERT_OK(join_waiter(&w[i]));
        for (int j = i + 1; j < N; j++)
            ASSERT(!waiter_done(&w[j]));
    }
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

TEST(release_grants_every_head_request_that_fits)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w[4];

    ASSERT_OK(sema_sem_new(&sem, 10));
    ASSERT_OK(sema_sem_acquire(sem, 10, -1));
    start_waiter(&w[0], sem, 4, -1, NULL, 1);
    start_waiter(&w[1], sem, 4, -1, NULL, 2);
    start_waiter(&w[2], sem, 4, -1, NULL, 3);
    start_waiter(&w[3], sem, 1, -1, NULL, 4);
    ASSERT_OK(sema_sem_release(sem, 10));
    ASSERT_OK(join_waiter(&w[0]));
    ASSERT_OK(join_waiter(&w[1]));
    ASSERT_EQ(stats(sem).waiters, 2); /* the third 4 blocks the 1 behind it */
    ASSERT_EQ(stats(sem).available, 2);
    ASSERT_OK(sema_sem_release(sem, 8));
    ASSERT_OK(join_waiter(&w[2]));
    ASSERT_OK(join_waiter(&w[3]));
    ASSERT_OK(sema_sem_release(sem, 5));
    sema_sem_free(sem);
}

TEST(try_never_jumps_the_queue)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    start_waiter(&w, sem, 2, -1, NULL, 1);
    ASSERT_EQ(sema_sem_try_acquire(sem, 1), SEMA_EBUSY); /* 1 unit is free, but b is first */
    ASSERT_EQ(sema_sem_acquire_until(sem, 1, sema_sem_now_ns() - 1, NULL), SEMA_EBUSY);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_OK(join_waiter(&w));
    ASSERT_OK(sema_sem_try_acquire(sem, 1));
    ASSERT_OK(sema_sem_release(sem, 3));
    sema_sem_free(sem);
}

TEST(expired_deadline_is_a_try)
{
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire_until(sem, 1, 0, NULL)); /* long past, but it fits: granted */
    ASSERT_OK(sema_sem_acquire_until(sem, 1, sema_sem_now_ns() - 1000000, NULL));
    ASSERT_EQ(sema_sem_acquire_until(sem, 1, 0, NULL), SEMA_EBUSY); /* not ETIMEDOUT */
    ASSERT_EQ(sema_sem_acquire(sem, 1, 0), SEMA_EBUSY);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_OK(sema_sem_release(sem, 2));
    sema_sem_free(sem);
}

TEST(timeout_fails_and_dequeues)
{
    sema_sem_t *sem;
    int64_t t0 = sema_sem_now_ns();

    ASSERT_OK(sema_sem_new(&sem, 1));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    ASSERT_EQ(sema_sem_acquire(sem, 1, 30), SEMA_ETIMEDOUT);
    ASSERT_GE(sema_sem_now_ns() - t0, 30 * 1000000);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_EQ(stats(sem).waiting, 0);
    ASSERT_OK(sema_sem_release(sem, 1));
    ASSERT_EQ(stats(sem).available, 1);
    sema_sem_free(sem);
}

TEST(cancel_token_withdraws_waiter)
{
    sema_sem_t *sem;
    sema_cancel_t *c;
    sem_waiter_thread_t w;

    ASSERT_OK(sema_sem_new(&sem, 1));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    start_waiter(&w, sem, 1, -1, c, 1);
    ASSERT_EQ(sema_cancel_fired(c), 0);
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_EQ(sema_cancel_fired(c), 1);
    ASSERT_EQ(join_waiter(&w), SEMA_ECANCELED);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_OK(sema_cancel_fire(c)); /* idempotent */
    ASSERT_OK(sema_sem_release(sem, 1));
    /* A fired token fails at once, even when the units are free. */
    ASSERT_EQ(sema_sem_acquire_until(sem, 1, SEMA_DEADLINE_NONE, c), SEMA_ECANCELED);
    ASSERT_EQ(stats(sem).available, 1);
    sema_cancel_free(c);
    sema_sem_free(sem);
}

TEST(cancel_bad_input)
{
    sema_cancel_t *c = (sema_cancel_t *)1;

    ASSERT_EQ(sema_cancel_new(NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_cancel_fire(NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_cancel_fired(NULL), 0);
    sema_cancel_free(NULL);
    ASSERT_OK(sema_cancel_new(&c));
    sema_cancel_free(c);
}

TEST(one_token_cancels_many_semaphores)
{
    sema_sem_t *a, *b;
    sema_cancel_t *c;
    sem_waiter_thread_t wa, wb;

    ASSERT_OK(sema_sem_new(&a, 1));
    ASSERT_OK(sema_sem_new(&b, 1));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_sem_acquire(a, 1, -1));
    ASSERT_OK(sema_sem_acquire(b, 1, -1));
    start_waiter(&wa, a, 1, -1, c, 1);
    start_waiter(&wb, b, 1, -1, c, 1);
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_EQ(join_waiter(&wa), SEMA_ECANCELED);
    ASSERT_EQ(join_waiter(&wb), SEMA_ECANCELED);
    ASSERT_OK(sema_sem_release(a, 1));
    ASSERT_OK(sema_sem_release(b, 1));
    sema_cancel_free(c);
    sema_sem_free(a);
    sema_sem_free(b);
}

TEST(close_fails_waiters_and_later_calls_keeps_holders)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w, idle;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    start_waiter(&w, sem, 2, -1, NULL, 1);
    start_idle_waiter(&idle, sem, -1, 2);
    ASSERT_OK(sema_sem_close(sem));
    ASSERT_EQ(join_waiter(&w), SEMA_ECANCELED);
    ASSERT_EQ(join_waiter(&idle), SEMA_ECANCELED);
    ASSERT_EQ(sema_sem_acquire(sem, 1, -1), SEMA_ECANCELED);
    ASSERT_EQ(sema_sem_try_acquire(sem, 1), SEMA_ECANCELED);
    ASSERT_EQ(sema_sem_wait_idle(sem, -1), SEMA_ECANCELED);
    ASSERT_EQ(stats(sem).held, 2);
    ASSERT_EQ(stats(sem).closed, 1);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_EQ(sema_sem_release(sem, 1), SEMA_EOVERFLOW);
    ASSERT_OK(sema_sem_close(sem));
    sema_sem_free(sem);
}

TEST(grow_admits_waiters)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w1, w2;

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    start_waiter(&w1, sem, 1, -1, NULL, 1);
    start_waiter(&w2, sem, 1, -1, NULL, 2);
    ASSERT_OK(sema_sem_set_capacity(sem, 4));
    ASSERT_OK(join_waiter(&w1));
    ASSERT_OK(join_waiter(&w2));
    ASSERT_EQ(stats(sem).available, 0);
    ASSERT_EQ(stats(sem).capacity, 4);
    ASSERT_OK(sema_sem_release(sem, 4));
    ASSERT_EQ(sema_sem_release(sem, 1), SEMA_EOVERFLOW);
    sema_sem_free(sem);
}

TEST(shrink_never_revokes)
{
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 4));
    ASSERT_OK(sema_sem_acquire(sem, 3, -1));
    ASSERT_OK(sema_sem_set_capacity(sem, 2));
    ASSERT_EQ(stats(sem).available, -1);
    ASSERT_EQ(stats(sem).held, 3);
    ASSERT_EQ(sema_sem_try_acquire(sem, 1), SEMA_EBUSY);
    ASSERT_EQ(sema_sem_release(sem, 4), SEMA_EOVERFLOW);
    ASSERT_OK(sema_sem_release(sem, 3));
    ASSERT_EQ(stats(sem).available, 2);
    ASSERT_OK(sema_sem_try_acquire(sem, 2)); /* back on the fast path */
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_EQ(sema_sem_set_capacity(sem, 0), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_set_capacity(sem, SEMA_SEM_MAX_CAPACITY + 1), SEMA_EINVAL);
    ASSERT_EQ(stats(sem).capacity, 2);
    sema_sem_free(sem);
}

TEST(shrink_fails_queued_requests_above_new_capacity)
{
    sema_sem_t *sem;
    sem_waiter_thread_t big, small;

    ASSERT_OK(sema_sem_new(&sem, 4));
    ASSERT_OK(sema_sem_acquire(sem, 4, -1));
    start_waiter(&big, sem, 3, -1, NULL, 1);
    start_waiter(&small, sem, 1, -1, NULL, 2);
    ASSERT_OK(sema_sem_set_capacity(sem, 2));
    ASSERT_EQ(join_waiter(&big), SEMA_EINVAL);
    ASSERT_EQ(stats(sem).waiters, 1);
    ASSERT_OK(sema_sem_release(sem, 4));
    ASSERT_OK(join_waiter(&small));
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

TEST(wait_idle_waits_for_holders_and_earlier_waiters)
{
    sema_sem_t *sem;
    sem_waiter_thread_t b, idle, c;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_wait_idle(sem, 0));
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    ASSERT_EQ(sema_sem_wait_idle(sem, 0), SEMA_EBUSY);
    start_waiter(&b, sem, 2, -1, NULL, 1);
    start_idle_waiter(&idle, sem, -1, 2);
    start_waiter(&c, sem, 1, -1, NULL, 3);
    ASSERT_EQ(stats(sem).waiting, 2 + 3 + 1);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_OK(join_waiter(&b));
    ASSERT(!waiter_done(&idle));
    ASSERT(!waiter_done(&c)); /* one unit is free, but wait-idle is ahead of c */
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_OK(join_waiter(&idle));
    ASSERT_OK(join_waiter(&c));
    ASSERT_EQ(stats(sem).held, 1);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

TEST(wait_idle_timeout)
{
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    ASSERT_EQ(sema_sem_wait_idle(sem, 20), SEMA_ETIMEDOUT);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

/* ---- callbacks ---- */

typedef struct {
    int calls;
    int status;
    sema_sem_t *sem;
    uint64_t release_weight; /* released from inside the callback when nonzero */
} cb_rec_t;

static void record_cb(sema_sem_waiter_t *w, int status, void *arg)
{
    cb_rec_t *r = arg;

    (void)w;
    r->calls++;
    r->status = status;
    if (status == 0 && r->release_weight != 0)
        ASSERT_OK(sema_sem_release(r->sem, r->release_weight));
}

TEST(async_acquire_granted_now_or_called_back_once)
{
    sema_sem_t *sem;
    sema_sem_waiter_t w1, w2;
    cb_rec_t r1 = {0}, r2 = {0};

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire_async(sem, 2, &w1, record_cb, &r1));
    ASSERT_EQ(r1.calls, 0);
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w2, record_cb, &r2), SEMA_SEM_QUEUED);
    ASSERT_EQ(stats(sem).waiters, 1);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_EQ(r2.calls, 1);
    ASSERT_EQ(r2.status, 0);
    ASSERT_EQ(stats(sem).held, 1);
    ASSERT_EQ(sema_sem_cancel_async(sem, &w2), SEMA_ENOENT); /* too late: already granted */
    ASSERT_EQ(sema_sem_acquire_async(sem, 3, &w1, record_cb, &r1), SEMA_EINVAL);
    ASSERT_OK(sema_sem_release(sem, 1));
    ASSERT_EQ(r2.calls, 1);
    sema_sem_free(sem);
}

TEST(async_cancel_before_grant_never_calls_back)
{
    sema_sem_t *sem;
    sema_sem_waiter_t head, next;
    cb_rec_t rh = {0}, rn = {0};

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    ASSERT_EQ(sema_sem_acquire_async(sem, 2, &head, record_cb, &rh), SEMA_SEM_QUEUED);
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, &next, record_cb, &rn), SEMA_SEM_QUEUED);
    ASSERT_OK(sema_sem_cancel_async(sem, &head)); /* next now fits: granted here */
    ASSERT_EQ(rh.calls, 0);
    ASSERT_EQ(rn.calls, 1);
    ASSERT_EQ(sema_sem_cancel_async(sem, &head), SEMA_ENOENT);
    ASSERT_EQ(sema_sem_acquire_async(sem, 2, &head, record_cb, &rh), SEMA_SEM_QUEUED); /* reuse */
    ASSERT_EQ(sema_sem_acquire_async(sem, 2, &head, record_cb, &rh), SEMA_EINVAL);     /* twice */
    ASSERT_EQ(stats(sem).waiters, 1);
    ASSERT_OK(sema_sem_cancel_async(sem, &head));
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_EQ(stats(sem).available, 2);
    sema_sem_free(sem);
}

TEST(async_cancel_on_another_semaphore_refused)
{
    sema_sem_t *a, *b;
    sema_sem_waiter_t w;
    cb_rec_t r = {0};

    ASSERT_OK(sema_sem_new(&a, 1));
    ASSERT_OK(sema_sem_new(&b, 1));
    ASSERT_OK(sema_sem_acquire(a, 1, -1));
    ASSERT_EQ(sema_sem_acquire_async(a, 1, &w, record_cb, &r), SEMA_SEM_QUEUED);
    ASSERT_EQ(sema_sem_cancel_async(b, &w), SEMA_ENOENT);
    ASSERT_EQ(sema_sem_stats(b, &(sema_sem_stats_t){0}), 0);
    ASSERT_EQ(stats(a).waiters, 1);
    ASSERT_EQ(sema_sem_cancel_async(NULL, &w), SEMA_EINVAL);
    ASSERT_OK(sema_sem_cancel_async(a, &w));
    ASSERT_EQ(r.calls, 0);
    ASSERT_OK(sema_sem_release(a, 1));
    sema_sem_free(a);
    sema_sem_free(b);
}

TEST(async_close_calls_back_with_ecanceled)
{
    sema_sem_t *sem;
    sema_sem_waiter_t w, wi;
    cb_rec_t r = {0}, ri = {0};

    ASSERT_OK(sema_sem_new(&sem, 1));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w, record_cb, &r), SEMA_SEM_QUEUED);
    ASSERT_EQ(sema_sem_wait_idle_async(sem, &wi, record_cb, &ri), SEMA_SEM_QUEUED);
    ASSERT_OK(sema_sem_close(sem));
    ASSERT_EQ(r.calls, 1);
    ASSERT_EQ(r.status, SEMA_ECANCELED);
    ASSERT_EQ(ri.calls, 1);
    ASSERT_EQ(ri.status, SEMA_ECANCELED);
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w, record_cb, &r), SEMA_ECANCELED);
    ASSERT_EQ(r.calls, 1);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

/* ---- permits, with, wrap ---- */

TEST(permit_release_is_idempotent_and_detects_double_release)
{
    sema_sem_t *sem;
    sema_permit_t p, never = SEMA_PERMIT_INIT;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_acquire_permit(sem, 2, -1, &p));
    ASSERT_EQ(sema_permit_held(&p), 1);
    ASSERT_EQ(stats(sem).held, 2);
    ASSERT_OK(sema_permit_release(&p));
    ASSERT_EQ(sema_permit_held(&p), 0);
    ASSERT_EQ(sema_permit_release(&p), SEMA_ESTALE);
    ASSERT_EQ(stats(sem).available, 3);
    ASSERT_EQ(sema_permit_release(&never), SEMA_ESTALE);
    ASSERT_EQ(sema_permit_release(NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_acquire_permit(sem, 4, -1, &p), SEMA_EINVAL);
    ASSERT_EQ(sema_permit_release(&p), SEMA_ESTALE); /* failed acquire: empty permit */
    ASSERT_EQ(sema_sem_acquire_permit(sem, 1, -1, NULL), SEMA_EINVAL);
    sema_sem_free(sem);
}

static int scoped_user(sema_sem_t *sem, int bail_early)
{
    SEMA_PERMIT_SCOPED(p);

    if (sema_sem_acquire_permit(sem, 2, -1, &p) != 0)
        return -1;
    if (bail_early)
        return 1; /* the cleanup attribute releases p here */
    {
        sema_sem_stats_t st;

        ASSERT_OK(sema_sem_stats(sem, &st));
        ASSERT_EQ(st.held, 2);
    }
    return 0;
}

TEST(scoped_permit_released_at_block_end)
{
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_EQ(scoped_user(sem, 0), 0);
    ASSERT_EQ(stats(sem).held, 0);
    ASSERT_EQ(scoped_user(sem, 1), 1);
    ASSERT_EQ(stats(sem).held, 0);
    {
        SEMA_PERMIT_SCOPED(p);

        ASSERT_OK(sema_sem_acquire_permit(sem, 1, -1, &p));
        ASSERT_OK(sema_permit_release(&p)); /* released early: cleanup leaves it alone */
    }
    ASSERT_EQ(stats(sem).held, 0);
    sema_sem_free(sem);
}

static int check_held(void *arg)
{
    sema_sem_stats_t st;

    ASSERT_OK(sema_sem_stats(arg, &st));
    return (int)st.held;
}

TEST(with_runs_under_the_units_and_releases_them)
{
    sema_sem_t *sem;
    int res = -1;

    ASSERT_OK(sema_sem_new(&sem, 5));
    ASSERT_OK(sema_sem_with(sem, 3, -1, check_held, sem, &res));
    ASSERT_EQ(res, 3);
    ASSERT_EQ(stats(sem).held, 0);
    ASSERT_OK(sema_sem_acquire(sem, 5, -1));
    res = -1;
    ASSERT_EQ(sema_sem_with(sem, 1, 0, check_held, sem, &res), SEMA_EBUSY);
    ASSERT_EQ(res, -1); /* fn did not run */
    ASSERT_OK(sema_sem_release(sem, 5));
    ASSERT_EQ(sema_sem_with(sem, 1, 0, NULL, NULL, NULL), SEMA_EINVAL);
    sema_sem_free(sem);
}

static int release_own_units(void *arg)
{
    return sema_sem_release(arg, 2); /* misuse: gives back the units `with` holds */
}

/* A function that releases what `with` holds leaves nothing for `with` to give back:
 * an error code, not an abort, and the count stays right. */
TEST(with_reports_a_function_that_released_the_units)
{
    sema_sem_t *sem;
    int res = -1;

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_EQ(sema_sem_with(sem, 2, -1, release_own_units, sem, &res), SEMA_EOVERFLOW);
    ASSERT_EQ(res, 0);
    ASSERT_EQ(stats(sem).held, 0);
    ASSERT_EQ(stats(sem).available, 2);
    sema_sem_free(sem);
}

TEST(wrap_binds_function_and_weight)
{
    sema_sem_t *sem;
    sema_sem_wrapped_t w;
    int res = -1;

    ASSERT_OK(sema_sem_new(&sem, 4));
    ASSERT_EQ(sema_sem_wrap(&w, sem, 5, -1, check_held), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_wrap(&w, sem, 0, -1, check_held), SEMA_EINVAL);
    ASSERT_EQ(sema_sem_wrap(&w, sem, 1, -1, NULL), SEMA_EINVAL);
    ASSERT_OK(sema_sem_wrap(&w, sem, 2, -1, check_held));
    ASSERT_OK(sema_sem_call(&w, sem, &res));
    ASSERT_EQ(res, 2);
    ASSERT_OK(sema_sem_call(&w, sem, NULL));
    ASSERT_EQ(stats(sem).held, 0);
    ASSERT_EQ(sema_sem_call(NULL, sem, NULL), SEMA_EINVAL);
    sema_sem_free(sem);
}

TEST(counts_are_64_bit)
{
    sema_sem_t *sem;
    const uint64_t big = UINT64_C(1) << 40;

    ASSERT_OK(sema_sem_new(&sem, 3 * big));
    ASSERT_OK(sema_sem_acquire(sem, 2 * big, -1));
    ASSERT_EQ(sema_sem_try_acquire(sem, big + 1), SEMA_EBUSY);
    ASSERT_OK(sema_sem_acquire(sem, big, 0));
    ASSERT_EQ(stats(sem).held, (int64_t)(3 * big));
    ASSERT_OK(sema_sem_set_capacity(sem, big));
    ASSERT_EQ(stats(sem).available, -(int64_t)(2 * big));
    ASSERT_OK(sema_sem_release(sem, 3 * big));
    ASSERT_EQ(stats(sem).available, (int64_t)big);
    sema_sem_free(sem);
}

TEST(embedded_semaphore_needs_no_allocation)
{
    struct host {
        int before;
        struct sema_sem sem; /* as a keyed lock embeds one per key */
        int after;
    } h = {1, {0}, 2};

    ASSERT_EQ(sema__sem_init(&h.sem, 0), SEMA_EINVAL);
    ASSERT_OK(sema__sem_init(&h.sem, 3));
    ASSERT_OK(sema_sem_acquire(&h.sem, 2, -1));
    ASSERT_EQ(sema_sem_try_acquire(&h.sem, 2), SEMA_EBUSY);
    ASSERT_EQ(stats(&h.sem).held, 2);
    ASSERT_OK(sema_sem_release(&h.sem, 2));
    sema__sem_destroy(&h.sem);
    ASSERT_EQ(h.before, 1);
    ASSERT_EQ(h.after, 2);
}

typedef struct {
    sema_permit_t *p;
    pthread_barrier_t *go;
    int rc;
} permit_racer_t;

static void *release_permit_after_barrier(void *arg)
{
    permit_racer_t *r = arg;

    pthread_barrier_wait(r->go);
    r->rc = sema_permit_release(r->p);
    return NULL;
}

TEST(permit_racing_releases_exactly_one_wins)
{
    long rounds = test_scale(2000);
    sema_sem_t *sem;

    ASSERT_OK(sema_sem_new(&sem, 2));
    for (long i = 0; i < rounds; i++) {
        sema_permit_t p;
        pthread_barrier_t go;
        pthread_t t[2];
        permit_racer_t r[2];

        ASSERT_OK(sema_sem_acquire_permit(sem, 2, -1, &p));
        ASSERT_OK(pthread_barrier_init(&go, NULL, 2));
        for (int k = 0; k < 2; k++) {
            r[k] = (permit_racer_t){&p, &go, 1};
            ASSERT_OK(pthread_create(&t[k], NULL, release_permit_after_barrier, &r[k]));
        }
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
        ASSERT_EQ(r[0].rc + r[1].rc, SEMA_ESTALE); /* one 0, one ESTALE */
        ASSERT_EQ(stats(sem).available, 2);
        pthread_barrier_destroy(&go);
    }
    sema_sem_free(sem);
}

TEST(wait_idle_cancel_token_and_async)
{
    sema_sem_t *sem;
    sema_cancel_t *c;
    sem_waiter_thread_t idle;
    sema_sem_waiter_t w;
    cb_rec_t r = {0};

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    memset(&idle, 0, sizeof(idle));
    idle.sem = sem;
    idle.timeout_ms = -1;
    idle.cancel = c;
    idle.idle = 1;
    ASSERT_OK(pthread_create(&idle.thread, NULL, sem_waiter_main, &idle));
    wait_waiters(sem, 1);
    ASSERT_EQ(stats(sem).waiting, 2); /* a wait-idle counts as the whole capacity */
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_EQ(join_waiter(&idle), SEMA_ECANCELED);
    ASSERT_EQ(sema_sem_wait_idle_until(sem, SEMA_DEADLINE_NONE, c), SEMA_ECANCELED);
    ASSERT_EQ(sema_sem_wait_idle_async(sem, &w, record_cb, &r), SEMA_SEM_QUEUED);
    ASSERT_EQ(r.calls, 0);
    ASSERT_OK(sema_sem_release(sem, 1)); /* idle now: the callback runs in here */
    ASSERT_EQ(r.calls, 1);
    ASSERT_EQ(r.status, 0);
    ASSERT_EQ(stats(sem).held, 0); /* wait-idle takes nothing */
    ASSERT_OK(sema_sem_wait_idle_async(sem, &w, record_cb, &r));
    ASSERT_EQ(r.calls, 1);
    sema_cancel_free(c);
    sema_sem_free(sem);
}
