/* SPDX-License-Identifier: MIT */
/* test_sem_alloc.c - the semaphore and allocation: clean ENOMEM, and no allocation after creation.
 */
#include "test_sem_helpers.h"

static long allocs;    /* allocations made through the hook */
static long fail_from; /* allocations from this number on fail (-1: never) */

static int should_fail(void)
{
    long n = __atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);

    return fail_from >= 0 && n >= fail_from;
}

static void *t_malloc(size_t n)
{
    return should_fail() ? NULL : malloc(n);
}

static void *t_realloc(void *p, size_t n)
{
    return should_fail() ? NULL : realloc(p, n);
}

static void *t_calloc(size_t c, size_t n)
{
    return should_fail() ? NULL : calloc(c, n);
}

static void install(long fail)
{
    allocs = 0;
    fail_from = fail;
    ASSERT_OK(sema_set_allocator(t_malloc, t_realloc, t_calloc, free));
}

static void uninstall(void)
{
    ASSERT_OK(sema_set_allocator(malloc, realloc, calloc, free));
}

TEST(new_fails_cleanly_without_memory)
{
    sema_sem_t *sem = (sema_sem_t *)1;
    sema_cancel_t *c = (sema_cancel_t *)1;

    install(0);
    ASSERT_EQ(sema_sem_new(&sem, 4), SEMA_ENOMEM);
    ASSERT_NULL(sem);
    ASSERT_EQ(sema_cancel_new(&c), SEMA_ENOMEM);
    ASSERT_NULL(c);
    install(1); /* the first allocation succeeds: that is all a semaphore needs */
    ASSERT_OK(sema_sem_new(&sem, 4));
    sema_sem_free(sem);
    uninstall();
}

static void noop_cb(sema_sem_waiter_t *w, int status, void *arg)
{
    (void)w;
    *(int *)arg = status == 0 ? 1 : -1;
}

TEST(operations_never_allocate)
{
    sema_sem_t *sem;
    sema_cancel_t *c;
    sem_waiter_thread_t t1, t2;
    sema_sem_waiter_t w;
    sema_permit_t p;
    int granted = 0;

    install(-1);
    ASSERT_OK(sema_sem_new(&sem, 4));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_EQ(allocs, 2);
    fail_from = allocs; /* from here on, any allocation would fail */
    ASSERT_OK(sema_sem_acquire(sem, 4, -1));
    start_waiter(&t1, sem, 2, -1, c, 1);
    start_waiter(&t2, sem, 2, -1, NULL, 2);
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w, noop_cb, &granted), SEMA_SEM_QUEUED);
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_EQ(join_waiter(&t1), SEMA_ECANCELED);
    ASSERT_OK(sema_sem_release(sem, 4));
    ASSERT_OK(join_waiter(&t2));
    ASSERT_EQ(granted, 1);
    ASSERT_OK(sema_sem_release(sem, 3));
    ASSERT_OK(sema_sem_acquire_permit(sem, 1, 0, &p));
    ASSERT_OK(sema_permit_release(&p));
    ASSERT_OK(sema_sem_set_capacity(sem, 8));
    ASSERT_OK(sema_sem_wait_idle(sem, 10));
    ASSERT_EQ(sema_sem_acquire(sem, 8, 0), 0);
    ASSERT_EQ(sema_sem_acquire(sem, 1, 1), SEMA_ETIMEDOUT);
    ASSERT_OK(sema_sem_release(sem, 8));
    ASSERT_OK(sema_sem_close(sem));
    ASSERT_EQ(allocs, 2); /* nothing after creation */
    sema_cancel_free(c);
    sema_sem_free(sem);
    uninstall();
}
