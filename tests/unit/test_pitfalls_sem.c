/* SPDX-License-Identifier: MIT */
/* test_pitfalls_sem.c - one regression test per in-process item of pitfalls.md, named after it. */
#include "test_sem_helpers.h"

static sema_sem_stats_t stats(sema_sem_t *sem)
{
    sema_sem_stats_t st;

    ASSERT_OK(sema_sem_stats(sem, &st));
    return st;
}

typedef struct {
    int calls;  /* atomic */
    int status; /* of the last call */
} cb_count_t;

static void count_cb(sema_sem_waiter_t *w, int status, void *arg)
{
    cb_count_t *c = arg;

    (void)w;
    c->status = status;
    __atomic_add_fetch(&c->calls, 1, __ATOMIC_ACQ_REL);
}

/* 1. Removing the head (cancel, timeout, async cancel) re-runs admission. */
TEST(pitfall01_head_cancel_wakes_followers)
{
    sema_sem_t *sem;
    sema_cancel_t *c;
    sem_waiter_thread_t head, f1, f2;
    sema_sem_waiter_t ahead;
    cb_count_t cc = {0};

    ASSERT_OK(sema_sem_new(&sem, 4));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_sem_acquire(sem, 3, -1));
    start_waiter(&head, sem, 3, -1, c, 1);
    start_waiter(&f1, sem, 1, -1, NULL, 2);
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_EQ(join_waiter(&head), SEMA_ECANCELED);
    ASSERT_OK(join_waiter(&f1)); /* granted without any release */
    ASSERT_EQ(stats(sem).available, 0);
    /* The same through the callback API. */
    ASSERT_EQ(sema_sem_acquire_async(sem, 2, &ahead, count_cb, &cc), SEMA_SEM_QUEUED);
    start_waiter(&f2, sem, 1, -1, NULL, 2);
    ASSERT_OK(sema_sem_release(sem, 1)); /* 1 free: the head (2) blocks f2 (1) */
    ASSERT(!waiter_done(&f2));
    ASSERT_OK(sema_sem_cancel_async(sem, &ahead));
    ASSERT_OK(join_waiter(&f2));
    ASSERT_EQ(cc.calls, 0);
    ASSERT_OK(sema_sem_release(sem, 4));
    sema_cancel_free(c);
    sema_sem_free(sem);
}

/* 2. A grant racing a cancel: the units end with the caller or in the pool, exactly once. */
typedef struct {
    sema_sem_t *sem;
    sema_cancel_t *cancel;
    pthread_barrier_t *go;
} race_t;

static void *release_after_barrier(void *arg)
{
    race_t *r = arg;

    pthread_barrier_wait(r->go);
    ASSERT_OK(sema_sem_release(r->sem, 1));
    return NULL;
}

static void *fire_after_barrier(void *arg)
{
    race_t *r = arg;

    pthread_barrier_wait(r->go);
    ASSERT_OK(sema_cancel_fire(r->cancel));
    return NULL;
}

TEST(pitfall02_cancel_racing_grant_exactly_once)
{
    long rounds = test_scale(2000);
    int granted = 0, canceled = 0;

    for (long i = 0; i < rounds; i++) {
        sema_sem_t *sem;
        sema_cancel_t *c;
        sem_waiter_thread_t w;
        pthread_barrier_t go;
        pthread_t rel, fire;
        race_t r;
        int rc;

        ASSERT_OK(sema_sem_new(&sem, 1));
        ASSERT_OK(sema_cancel_new(&c));
        ASSERT_OK(pthread_barrier_init(&go, NULL, 2));
        ASSERT_OK(sema_sem_acquire(sem, 1, -1));
        start_waiter(&w, sem, 1, -1, c, 1);
        r = (race_t){sem, c, &go};
        ASSERT_OK(pthread_create(&rel, NULL, release_after_barrier, &r));
        ASSERT_OK(pthread_create(&fire, NULL, fire_after_barrier, &r));
        pthread_join(rel, NULL);
        pthread_join(fire, NULL);
        rc = join_waiter(&w);
        if (rc == 0) {
            granted++;
            ASSERT_EQ(stats(sem).held, 1); /* the caller has the unit ... */
            ASSERT_OK(sema_sem_release(sem, 1));
        } else {
            canceled++;
            ASSERT_EQ(rc, SEMA_ECANCELED);
            ASSERT_EQ(stats(sem).held, 0); /* ... or the pool has it */
        }
        ASSERT_EQ(stats(sem).available, 1);
        ASSERT_EQ(stats(sem).waiters, 0);
        pthread_barrier_destroy(&go);
        sema_cancel_free(c);
        sema_sem_free(sem);
    }
    fprintf(stderr, "granted %d, canceled %d\n", granted, canceled);
}

static void *cancel_async_after_barrier(void *arg)
{
    void **a = arg;

    pthread_barrier_wait(a[2]);
    *(int *)a[3] = sema_sem_cancel_async(a[0], a[1]);
    return NULL;
}

TEST(pitfall02_async_cancel_racing_grant_exactly_once)
{
    long rounds = test_scale(3000);

    for (long i = 0; i < rounds; i++) {
        sema_sem_t *sem;
        sema_sem_waiter_t w;
        cb_count_t cc = {0};
        pthread_barrier_t go;
        pthread_t rel, can;
        race_t r;
        int crc = 1;
        void *args[4];

        ASSERT_OK(sema_sem_new(&sem, 1));
        ASSERT_OK(pthread_barrier_init(&go, NULL, 2));
        ASSERT_OK(sema_sem_acquire(sem, 1, -1));
        ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w, count_cb, &cc), SEMA_SEM_QUEUED);
        r = (race_t){sem, NULL, &go};
        args[0] = sem;
        args[1] = &w;
        args[2] = &go;
        args[3] = &crc;
        ASSERT_OK(pthread_create(&rel, NULL, release_after_barrier, &r));
        ASSERT_OK(pthread_create(&can, NULL, cancel_async_after_barrier, args));
        pthread_join(rel, NULL);
        pthread_join(can, NULL);
        if (crc == 0) {
            ASSERT_EQ(__atomic_load_n(&cc.calls, __ATOMIC_ACQUIRE), 0);
            ASSERT_EQ(stats(sem).held, 0);
        } else {
            ASSERT_EQ(crc, SEMA_ENOENT);
            /* The releasing thread ran the callback before its release returned. */
            ASSERT_EQ(__atomic_load_n(&cc.calls, __ATOMIC_ACQUIRE), 1);
            ASSERT_EQ(cc.status, 0);
            ASSERT_EQ(stats(sem).held, 1);
            ASSERT_OK(sema_sem_release(sem, 1));
        }
        ASSERT_EQ(stats(sem).available, 1);
        pthread_barrier_destroy(&go);
        sema_sem_free(sem);
    }
}

/* 3. The rule: an already-expired deadline is a try (granted only if nobody is queued and
 * it fits now; otherwise SEMA_EBUSY, never a wait and never SEMA_ETIMEDOUT). */
TEST(pitfall03_expired_deadline_is_a_try)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w;
    int64_t past = sema_sem_now_ns() - 1000000000;

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_acquire_until(sem, 1, past, NULL));
    ASSERT_OK(sema_sem_acquire(sem, 1, 0));
    start_waiter(&w, sem, 2, -1, NULL, 1);
    ASSERT_EQ(sema_sem_acquire_until(sem, 1, past, NULL), SEMA_EBUSY); /* fits, but queue */
    ASSERT_EQ(sema_sem_wait_idle_until(sem, past, NULL), SEMA_EBUSY);
    ASSERT_EQ(stats(sem).waiters, 1);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_OK(join_waiter(&w));
    ASSERT_EQ(sema_sem_acquire_until(sem, 2, past, NULL), SEMA_EBUSY); /* does not fit */
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_OK(sema_sem_wait_idle_until(sem, past, NULL));
    sema_sem_free(sem);
}

/* 4. A cancel that fires between "check the token" and "enqueue" must not leave a stale
 * waiter behind that later swallows a unit. */
TEST(pitfall04_cancel_between_check_and_enqueue)
{
    long rounds = test_scale(3000);

    for (long i = 0; i < rounds; i++) {
        sema_sem_t *sem;
        sema_cancel_t *c;
        sem_waiter_thread_t w;
        pthread_barrier_t go;
        pthread_t fire;
        race_t r;

        ASSERT_OK(sema_sem_new(&sem, 1));
        ASSERT_OK(sema_cancel_new(&c));
        ASSERT_OK(pthread_barrier_init(&go, NULL, 2));
        ASSERT_OK(sema_sem_acquire(sem, 1, -1));
        r = (race_t){sem, c, &go};
        ASSERT_OK(pthread_create(&fire, NULL, fire_after_barrier, &r));
        start_waiter(&w, sem, 1, -1, c, 0); /* races the fire, not yet queued */
        pthread_barrier_wait(&go);
        pthread_join(fire, NULL);
        ASSERT_EQ(join_waiter(&w), SEMA_ECANCELED); /* never hangs, never granted */
        ASSERT_EQ(stats(sem).waiters, 0);
        ASSERT_OK(sema_sem_release(sem, 1));
        ASSERT_EQ(stats(sem).available, 1); /* no stale waiter took it */
        pthread_barrier_destroy(&go);
        sema_cancel_free(c);
        sema_sem_free(sem);
    }
}

/* 5. A timed-out request leaves the queue and gives up its FIFO place. */
TEST(pitfall05_timeout_dequeues)
{
    sema_sem_t *sem;
    sem_waiter_thread_t t;
    sema_sem_waiter_t f;
    cb_count_t cc = {0};

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    start_waiter(&t, sem, 2, 300, NULL, 1);
    /* Queued behind t at once (no thread start), well inside t's 300 ms. */
    ASSERT_EQ(sema_sem_acquire_async(sem, 1, &f, count_cb, &cc), SEMA_SEM_QUEUED);
    ASSERT_EQ(join_waiter(&t), SEMA_ETIMEDOUT);
    /* Granted when the head left, with no release, before t's acquire returned. */
    ASSERT_EQ(__atomic_load_n(&cc.calls, __ATOMIC_ACQUIRE), 1);
    ASSERT_EQ(cc.status, 0);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_EQ(stats(sem).waiting, 0);
    ASSERT_OK(sema_sem_release(sem, 2));
    ASSERT_EQ(stats(sem).available, 2);
    sema_sem_free(sem);
}

/* 6. A release of k wakes every waiter it grants (no "only wake if it was zero"). */
TEST(pitfall06_release_wakes_enough_waiters)
{
    enum { N = 8 };
    long rounds = test_scale(50);

    for (long r = 0; r < rounds; r++) {
        sema_sem_t *sem;
        sem_waiter_thread_t w[N];

        ASSERT_OK(sema_sem_new(&sem, N));
        ASSERT_OK(sema_sem_acquire(sem, N, -1));
        for (int i = 0; i < N; i++)
            start_waiter(&w[i], sem, 1, -1, NULL, (uint64_t)i + 1);
        ASSERT_OK(sema_sem_release(sem, N)); /* one release, eight grants */
        for (int i = 0; i < N; i++)
            ASSERT_OK(join_waiter(&w[i]));
        ASSERT_EQ(stats(sem).held, N);
        ASSERT_OK(sema_sem_release(sem, N));
        sema_sem_free(sem);
    }
}

/* 7. Concurrent single-unit releases must together wake a multi-unit waiter. */
typedef struct {
    sema_sem_t *sem;
    pthread_barrier_t *go;
} releaser_t;

static void *release_one(void *arg)
{
    releaser_t *r = arg;

    pthread_barrier_wait(r->go);
    ASSERT_OK(sema_sem_release(r->sem, 1));
    return NULL;
}

TEST(pitfall07_concurrent_releases_wake_multi_unit_waiters)
{
    enum { N = 4 };
    long rounds = test_scale(500);

    for (long r = 0; r < rounds; r++) {
        sema_sem_t *sem;
        sem_waiter_thread_t big, half1, half2;
        pthread_barrier_t go;
        pthread_t t[N];
        releaser_t rel;

        ASSERT_OK(sema_sem_new(&sem, N));
        ASSERT_OK(sema_sem_acquire(sem, N, -1));
        start_waiter(&big, sem, N, -1, NULL, 1);
        start_waiter(&half1, sem, N / 2, -1, NULL, 2);
        start_waiter(&half2, sem, N / 2, -1, NULL, 3);
        ASSERT_OK(pthread_barrier_init(&go, NULL, N));
        rel = (releaser_t){sem, &go};
        for (int i = 0; i < N; i++)
            ASSERT_OK(pthread_create(&t[i], NULL, release_one, &rel));
        for (int i = 0; i < N; i++)
            pthread_join(t[i], NULL);
        ASSERT_OK(join_waiter(&big));
        ASSERT_OK(sema_sem_release(sem, N));
        ASSERT_OK(join_waiter(&half1));
        ASSERT_OK(join_waiter(&half2));
        ASSERT_OK(sema_sem_release(sem, N));
        ASSERT_EQ(stats(sem).available, N);
        pthread_barrier_destroy(&go);
        sema_sem_free(sem);
    }
}

/* 8. The CLOSED state and the resize generation must survive concurrent fast-path CASes on
 * the packed word: after close no acquire succeeds; after resizes the count is exact. */
typedef struct {
    sema_sem_t *sem;
    int stop;    /* atomic */
    int closed;  /* atomic: set once sema_sem_close returned */
    int late_ok; /* grants that began after close returned (must stay 0) */
    long ops;
} hammer_t;

static void *hammer(void *arg)
{
    hammer_t *h = arg;

    while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
        int closed_before = __atomic_load_n(&h->closed, __ATOMIC_ACQUIRE);
        int rc = sema_sem_try_acquire(h->sem, 1);

        if (rc == 0) {
            if (closed_before)
                __atomic_add_fetch(&h->late_ok, 1, __ATOMIC_RELAXED);
            ASSERT_OK(sema_sem_release(h->sem, 1));
        } else if (rc != SEMA_EBUSY && rc != SEMA_ECANCELED) {
            TEST_FAIL_("try_acquire: %s", sema_strerror(rc));
        }
        h->ops++;
    }
    return NULL;
}

TEST(pitfall08_flag_bits_survive_concurrent_cas)
{
    enum { T = 3 };
    long rounds = test_scale(200);

    for (long r = 0; r < rounds; r++) {
        sema_sem_t *sem;
        hammer_t h[T];
        pthread_t t[T];

        ASSERT_OK(sema_sem_new(&sem, 4));
        for (int i = 0; i < T; i++) {
            h[i] = (hammer_t){.sem = sem};
            ASSERT_OK(pthread_create(&t[i], NULL, hammer, &h[i]));
        }
        for (uint64_t c = 1; c <= 8; c++) /* resizes race the fast releases */
            ASSERT_OK(sema_sem_set_capacity(sem, (c * 7) % 5 + 1));
        ASSERT_OK(sema_sem_set_capacity(sem, 4));
        ASSERT_OK(sema_sem_close(sem));
        for (int i = 0; i < T; i++)
            __atomic_store_n(&h[i].closed, 1, __ATOMIC_RELEASE);
        sleep_ms(1);
        for (int i = 0; i < T; i++)
            __atomic_store_n(&h[i].stop, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < T; i++) {
            pthread_join(t[i], NULL);
            ASSERT_EQ(h[i].late_ok, 0);
        }
        ASSERT_EQ(stats(sem).held, 0);
        ASSERT_EQ(stats(sem).available, 4);
        ASSERT_EQ(sema_sem_try_acquire(sem, 1), SEMA_ECANCELED);
        sema_sem_free(sem);
    }
}

/* 9. Release must not touch the semaphore after the woken waiter could free it. */
static void *acquire_then_free(void *arg)
{
    sema_sem_t *sem = arg;

    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem); /* the releaser may still be inside sema_sem_release */
    return NULL;
}

static void release_and_free_cb(sema_sem_waiter_t *w, int status, void *arg)
{
    (void)w;
    ASSERT_OK(status);
    ASSERT_OK(sema_sem_release(arg, 1));
    sema_sem_free(arg);
}

TEST(pitfall09_release_does_not_touch_freed_semaphore)
{
    long rounds = test_scale(2000);

    for (long r = 0; r < rounds; r++) {
        sema_sem_t *sem;
        pthread_t t;
        sema_sem_waiter_t w;

        ASSERT_OK(sema_sem_new(&sem, 1));
        ASSERT_OK(sema_sem_acquire(sem, 1, -1));
        ASSERT_OK(pthread_create(&t, NULL, acquire_then_free, sem));
        wait_waiters(sem, 1);
        ASSERT_OK(sema_sem_release(sem, 1)); /* ASan reports any later touch */
        pthread_join(t, NULL);
        /* The callback form: the callback frees it inside this release. */
        ASSERT_OK(sema_sem_new(&sem, 1));
        ASSERT_OK(sema_sem_acquire(sem, 1, -1));
        ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w, release_and_free_cb, sem), SEMA_SEM_QUEUED);
        ASSERT_OK(sema_sem_release(sem, 1));
    }
}

/* 10. A request larger than the capacity is rejected at once, never queued. */
TEST(pitfall10_request_above_capacity_rejected)
{
    sema_sem_t *sem;
    sema_sem_waiter_t w;
    cb_count_t cc = {0};

    ASSERT_OK(sema_sem_new(&sem, 3));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    ASSERT_EQ(sema_sem_acquire(sem, 4, -1), SEMA_EINVAL); /* would block forever otherwise */
    ASSERT_EQ(sema_sem_acquire_async(sem, 4, &w, count_cb, &cc), SEMA_EINVAL);
    ASSERT_OK(sema_sem_set_capacity(sem, 2));
    ASSERT_EQ(sema_sem_acquire(sem, 3, -1), SEMA_EINVAL);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_EQ(cc.calls, 0);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
}

/* 11. Over-release is an error and changes nothing. */
TEST(pitfall11_over_release_rejected)
{
    sema_sem_t *sem;
    sema_permit_t p;

    ASSERT_OK(sema_sem_new(&sem, 4));
    ASSERT_EQ(sema_sem_release(sem, 1), SEMA_EOVERFLOW); /* fast path */
    ASSERT_OK(sema_sem_acquire_permit(sem, 2, -1, &p));
    ASSERT_EQ(sema_sem_release(sem, 3), SEMA_EOVERFLOW);
    ASSERT_OK(sema_sem_close(sem));
    ASSERT_EQ(sema_sem_release(sem, 3), SEMA_EOVERFLOW); /* slow path */
    ASSERT_OK(sema_permit_release(&p));
    ASSERT_EQ(sema_permit_release(&p), SEMA_ESTALE);
    ASSERT_EQ(stats(sem).available, 4);
    ASSERT_EQ(stats(sem).capacity, 4);
    sema_sem_free(sem);
}

/* 12. Counts are 64-bit: capacities and weights beyond 2^32 work exactly. */
TEST(pitfall12_counts_are_64_bit)
{
    sema_sem_t *sem;
    sem_waiter_thread_t w;
    const uint64_t g = UINT64_C(5) << 32;

    ASSERT_OK(sema_sem_new(&sem, 2 * g + 1));
    ASSERT_OK(sema_sem_acquire(sem, g, -1));
    ASSERT_OK(sema_sem_acquire(sem, g + 1, -1));
    start_waiter(&w, sem, 2 * g, -1, NULL, 1);
    ASSERT_EQ((uint64_t)stats(sem).waiting, 2 * g);
    ASSERT_OK(sema_sem_release(sem, g + 1));
    ASSERT(!waiter_done(&w)); /* g + 1 free, 2g needed */
    ASSERT_OK(sema_sem_release(sem, g));
    ASSERT_OK(join_waiter(&w));
    ASSERT_EQ((uint64_t)stats(sem).held, 2 * g);
    ASSERT_EQ(sema_sem_release(sem, 2 * g + 1), SEMA_EOVERFLOW);
    ASSERT_OK(sema_sem_release(sem, 2 * g));
    sema_sem_free(sem);
}

/* 12. The total weight queued never wraps round: 300 requests of the largest weight add up
 * to more than 2^64, and the snapshot says so (it saturates) instead of showing a small sum;
 * once most are withdrawn it is exact again. Wait-idle requests count as the capacity. */
TEST(pitfall12_waiting_total_never_wraps)
{
    enum { N = 300 };
    const uint64_t max = SEMA_SEM_MAX_CAPACITY;
    sema_sem_waiter_t *w = calloc(2 * N, sizeof(*w));
    cb_count_t cc = {0};
    sema_sem_t *sem;

    ASSERT_NOT_NULL(w);
    ASSERT_OK(sema_sem_new(&sem, max));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    for (int i = 0; i < N; i++)
        ASSERT_EQ(sema_sem_acquire_async(sem, max, &w[i], count_cb, &cc), SEMA_SEM_QUEUED);
    ASSERT_EQ(stats(sem).waiters, N);
    ASSERT_EQ(stats(sem).waiting, UINT64_MAX);
    for (int i = 1; i < N; i++)
        ASSERT_OK(sema_sem_cancel_async(sem, &w[i]));
    ASSERT_EQ(stats(sem).waiting, max);
    for (int i = N; i < 2 * N; i++)
        ASSERT_EQ(sema_sem_wait_idle_async(sem, &w[i], count_cb, &cc), SEMA_SEM_QUEUED);
    ASSERT_EQ(stats(sem).waiting, UINT64_MAX);
    for (int i = N + 1; i < 2 * N; i++)
        ASSERT_OK(sema_sem_cancel_async(sem, &w[i]));
    ASSERT_EQ(stats(sem).waiting, 2 * max);
    ASSERT_OK(sema_sem_cancel_async(sem, &w[0]));
    ASSERT_OK(sema_sem_cancel_async(sem, &w[N]));
    ASSERT_EQ(stats(sem).waiting, 0);
    ASSERT_EQ(cc.calls, 0);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
    free(w);
}

/* 14. Queue operations are O(1): withdrawing from the middle of a long queue is cheap. */
TEST(pitfall14_queue_ops_are_constant_time)
{
    long n = test_scale(100000);
    sema_sem_waiter_t *w = calloc((size_t)n, sizeof(*w));
    cb_count_t cc = {0};
    sema_sem_t *sem;

    ASSERT_NOT_NULL(w);
    ASSERT_OK(sema_sem_new(&sem, 1));
    ASSERT_OK(sema_sem_acquire(sem, 1, -1));
    for (long i = 0; i < n; i++)
        ASSERT_EQ(sema_sem_acquire_async(sem, 1, &w[i], count_cb, &cc), SEMA_SEM_QUEUED);
    for (long i = n / 2; i < n; i++) /* from the middle outwards */
        ASSERT_OK(sema_sem_cancel_async(sem, &w[i]));
    for (long i = n / 2 - 1; i >= 0; i--)
        ASSERT_OK(sema_sem_cancel_async(sem, &w[i]));
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_EQ(cc.calls, 0);
    ASSERT_OK(sema_sem_release(sem, 1));
    sema_sem_free(sem);
    free(w);
}

/* 15. Callbacks that release (and so grant the next callback) must not recurse: 200k
 * chained grants on one stack would overflow it. Each callback runs exactly once. */
typedef struct {
    sema_sem_t *sem;
    sema_sem_waiter_t *base;
    unsigned char *calls; /* per waiter */
    long done;
} chain_t;

static void chain_cb(sema_sem_waiter_t *w, int status, void *arg)
{
    chain_t *c = arg;
    char pad[256]; /* makes recursion, if any, blow the stack quickly */

    memset(pad, (int)(c->done & 0x7f), sizeof(pad));
    __asm__ volatile("" : : "r"(pad) : "memory");
    ASSERT_OK(status);
    c->calls[w - c->base]++;
    c->done++;
    ASSERT_OK(sema_sem_release(c->sem, 1));
}

TEST(pitfall15_no_recursion_in_callback_chain)
{
    long n = test_scale(200000);
    sema_sem_waiter_t *w = calloc((size_t)n, sizeof(*w));
    chain_t c = {NULL, w, calloc((size_t)n, 1), 0};

    ASSERT_NOT_NULL(w);
    ASSERT_NOT_NULL(c.calls);
    ASSERT_OK(sema_sem_new(&c.sem, 1));
    ASSERT_OK(sema_sem_acquire(c.sem, 1, -1));
    for (long i = 0; i < n; i++)
        ASSERT_EQ(sema_sem_acquire_async(c.sem, 1, &w[i], chain_cb, &c), SEMA_SEM_QUEUED);
    ASSERT_OK(sema_sem_release(c.sem, 1)); /* every callback runs in here, one after another */
    ASSERT_EQ(c.done, n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(c.calls[i], 1); /* exactly once each */
    ASSERT_EQ(stats(c.sem).waiters, 0);
    ASSERT_EQ(stats(c.sem).available, 1);
    ASSERT_EQ(sema_sem_cancel_async(c.sem, &w[0]), SEMA_ENOENT);
    sema_sem_free(c.sem);
    free(c.calls);
    free(w);
}

/* 16. Close settles every kind of waiter: blocked threads, callbacks, wait-idle. */
TEST(pitfall16_close_settles_every_waiter)
{
    enum { N = 4 };
    sema_sem_t *sem;
    sem_waiter_thread_t t[N], idle;
    sema_sem_waiter_t w[N];
    cb_count_t cc[N] = {{0}};

    ASSERT_OK(sema_sem_new(&sem, 2));
    ASSERT_OK(sema_sem_acquire(sem, 2, -1));
    for (int i = 0; i < N; i++)
        start_waiter(&t[i], sem, 1, -1, NULL, (uint64_t)i + 1);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(sema_sem_acquire_async(sem, 2, &w[i], count_cb, &cc[i]), SEMA_SEM_QUEUED);
    start_idle_waiter(&idle, sem, -1, 2 * N + 1);
    ASSERT_OK(sema_sem_close(sem));
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(join_waiter(&t[i]), SEMA_ECANCELED);
        ASSERT_EQ(cc[i].calls, 1);
        ASSERT_EQ(cc[i].status, SEMA_ECANCELED);
    }
    ASSERT_EQ(join_waiter(&idle), SEMA_ECANCELED);
    ASSERT_EQ(stats(sem).waiters, 0);
    ASSERT_OK(sema_sem_release(sem, 2));
    sema_sem_free(sem);
}
