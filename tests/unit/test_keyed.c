/* SPDX-License-Identifier: MIT */
/* test_keyed.c - the keyed reader/writer lock: seed 003's rules, timeouts, cancel, cleanup. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "sema/sema.h"
#include "test.h"

#define KEY "user:42"
#define KLEN (sizeof(KEY) - 1)

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};

    nanosleep(&ts, NULL);
}

/* Bounded wait (10 s) until `key` has `n` queued requests. */
static void wait_waiters(sema_keyed_t *k, const char *key, uint64_t n)
{
    sema_keyed_key_stats_t st = {0};

    for (int i = 0; i < 100000; i++) {
        if (sema_keyed_key_stats(k, key, strlen(key), &st) == 0 && st.waiters == n)
            return;
        pause_us(100);
    }
    TEST_FAIL_("key %s: %" PRIu64 " waiters, wanted %" PRIu64, key, st.waiters, n);
}

/* A thread that locks KEY in `mode`, logs its id when granted, holds until
 * told to go, then unlocks. */
struct req {
    sema_keyed_t *k;
    int mode;
    int id;
    int64_t timeout_ms;
    sema_cancel_t *cancel;
    int rc;
    atomic_int granted, go, done; /* done: the lock call returned */
    pthread_t t;
};

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int order_log[64];
static int order_n;

static void log_grant(int id)
{
    pthread_mutex_lock(&log_mu);
    if (order_n < (int)(sizeof(order_log) / sizeof(order_log[0])))
        order_log[order_n++] = id;
    pthread_mutex_unlock(&log_mu);
}

static int log_at(int i)
{
    int v;

    pthread_mutex_lock(&log_mu);
    v = i < order_n ? order_log[i] : -1;
    pthread_mutex_unlock(&log_mu);
    return v;
}

static void *req_main(void *arg)
{
    struct req *r = arg;
    sema_keyed_lock_t l = SEMA_KEYED_LOCK_INIT;

    r->rc = sema_keyed_lock_cancel(r->k, KEY, KLEN, r->mode, r->timeout_ms, r->cancel, &l);
    atomic_store(&r->done, 1);
    if (r->rc != 0)
        return NULL;
    log_grant(r->id);
    atomic_store(&r->granted, 1);
    while (!atomic_load(&r->go))
        pause_us(50);
    sema_keyed_unlock(&l);
    return NULL;
}

static void req_start_ex(struct req *r, sema_keyed_t *k, int mode, int id, int64_t timeout_ms,
                         sema_cancel_t *cancel)
{
    memset(r, 0, sizeof(*r));
    r->k = k;
    r->mode = mode;
    r->id = id;
    r->timeout_ms = timeout_ms;
    r->cancel = cancel;
    ASSERT_OK(pthread_create(&r->t, NULL, req_main, r));
}

static void req_start(struct req *r, sema_keyed_t *k, int mode, int id)
{
    req_start_ex(r, k, mode, id, -1, NULL);
}

static void wait_granted(struct req *r)
{
    for (int i = 0; i < 100000 && !atomic_load(&r->granted); i++)
        pause_us(100);
    ASSERT(atomic_load(&r->granted));
}

static void req_finish(struct req *r)
{
    atomic_store(&r->go, 1);
    ASSERT_OK(pthread_join(r->t, NULL));
}

TEST(shared_locks_overlap)
{
    sema_keyed_t *k;
    sema_keyed_lock_t a = SEMA_KEYED_LOCK_INIT, b = SEMA_KEYED_LOCK_INIT;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &a));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &b));
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.holders, 2);
    ASSERT_EQ(st.held, 2);
    ASSERT_EQ(sema_keyed_count(k), 1);
    sema_keyed_unlock(&a);
    sema_keyed_unlock(&b);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

TEST(exclusive_runs_alone)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    ASSERT_EQ(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &y), SEMA_EBUSY);
    ASSERT_EQ(sema_keyed_trylock(k, KEY, KLEN, SEMA_EXCLUSIVE, &y), SEMA_EBUSY);
    ASSERT(!sema_keyed_held(&y));
    /* Other keys are independent. */
    ASSERT_OK(sema_keyed_trylock(k, "other", 5, SEMA_EXCLUSIVE, &y));
    sema_keyed_unlock(&y);
    sema_keyed_unlock(&x);
    ASSERT_OK(sema_keyed_trylock(k, KEY, KLEN, SEMA_EXCLUSIVE, &y));
    sema_keyed_unlock(&y);
    sema_keyed_free(k);
}

TEST(exclusive_waits_for_shared_holders)
{
    sema_keyed_t *k;
    sema_keyed_lock_t a = SEMA_KEYED_LOCK_INIT;
    struct req w;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &a));
    req_start(&w, k, SEMA_EXCLUSIVE, 1);
    wait_waiters(k, KEY, 1);
    ASSERT(!atomic_load(&w.granted));
    sema_keyed_unlock(&a);
    wait_granted(&w);
    req_finish(&w);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* Exclusives run in request order. */
TEST(exclusives_in_request_order)
{
    sema_keyed_t *k;
    sema_keyed_lock_t hold = SEMA_KEYED_LOCK_INIT;
    struct req r[5];

    order_n = 0;
    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &hold));
    for (int i = 0; i < 5; i++) {
        req_start(&r[i], k, SEMA_EXCLUSIVE, i);
        wait_waiters(k, KEY, (uint64_t)i + 1);
    }
    sema_keyed_unlock(&hold);
    for (int i = 0; i < 5; i++) {
        wait_granted(&r[i]);
        for (int j = i + 1; j < 5; j++)
            ASSERT(!atomic_load(&r[j].granted));
        req_finish(&r[i]);
    }
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(log_at(i), i);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* Seed 003: shared requests made after an exclusive queued wait for it;
 * shared requests made before it run together before it. */
TEST(pitfall20_writer_is_not_starved_by_later_readers)
{
    sema_keyed_t *k;
    sema_keyed_lock_t r0 = SEMA_KEYED_LOCK_INIT, r1 = SEMA_KEYED_LOCK_INIT;
    struct req w, late[3];

    order_n = 0;
    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &r0));
    req_start(&w, k, SEMA_EXCLUSIVE, 100);
    wait_waiters(k, KEY, 1);
    /* A try never jumps the queue. */
    ASSERT_EQ(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &r1), SEMA_EBUSY);
    for (int i = 0; i < 3; i++) {
        req_start(&late[i], k, SEMA_SHARED, i);
        wait_waiters(k, KEY, (uint64_t)i + 2);
    }
    /* A stream of new readers while the first one holds: all queue. */
    sema_keyed_unlock(&r0);
    wait_granted(&w);
    for (int i = 0; i < 3; i++)
        ASSERT(!atomic_load(&late[i].granted));
    req_finish(&w);
    /* The three late readers are admitted together. */
    for (int i = 0; i < 3; i++)
        wait_granted(&late[i]);
    for (int i = 0; i < 3; i++)
        req_finish(&late[i]);
    ASSERT_EQ(log_at(0), 100);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* R (max_readers) bounds the number of shared holders. */
TEST(max_readers_caps_shared_holders)
{
    sema_keyed_opts_t o = {0, 2};
    sema_keyed_t *k;
    sema_keyed_lock_t a = SEMA_KEYED_LOCK_INIT, b = SEMA_KEYED_LOCK_INIT, c = SEMA_KEYED_LOCK_INIT;

    ASSERT_OK(sema_keyed_new_opts(&k, &o));
    ASSERT_OK(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &a));
    ASSERT_OK(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &b));
    ASSERT_EQ(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &c), SEMA_EBUSY);
    sema_keyed_unlock(&a);
    ASSERT_OK(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &c));
    sema_keyed_unlock(&b);
    sema_keyed_unlock(&c);
    ASSERT_OK(sema_keyed_trylock(k, KEY, KLEN, SEMA_EXCLUSIVE, &a));
    sema_keyed_unlock(&a);
    sema_keyed_free(k);
}

TEST(try_has_no_side_effects)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_trylock(k, KEY, KLEN, SEMA_EXCLUSIVE, &x));
    for (int i = 0; i < 100; i++)
        ASSERT_EQ(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &y), SEMA_EBUSY);
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.waiters, 0);
    ASSERT_EQ(st.holders, 1);
    sema_keyed_unlock(&x);
    ASSERT_EQ(sema_keyed_key_stats(k, KEY, KLEN, &st), SEMA_ENOENT);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* pitfall 5 and 1: a queued exclusive that times out leaves the queue at
 * once, and the shared request behind it is admitted. */
TEST(pitfall5_timeout_dequeues_and_readmits)
{
    sema_keyed_t *k;
    sema_keyed_lock_t r0 = SEMA_KEYED_LOCK_INIT;
    struct req w, r;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &r0));
    /* Long enough for the reader to queue behind it even on a slow
     * (sanitized) build; the reader must be queued before it expires. */
    req_start_ex(&w, k, SEMA_EXCLUSIVE, 1, 1500, NULL);
    wait_waiters(k, KEY, 1);
    req_start(&r, k, SEMA_SHARED, 2);
    wait_waiters(k, KEY, 2);
    ASSERT_OK(pthread_join(w.t, NULL)); /* times out while r0 is held */
    ASSERT_EQ(w.rc, SEMA_ETIMEDOUT);
    wait_granted(&r); /* r0 still held: the reader behind got in */
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.waiters, 0);
    ASSERT_EQ(st.holders, 2);
    req_finish(&r);
    sema_keyed_unlock(&r0);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

TEST(timeout_on_a_key_with_no_other_waiter_frees_nothing_held)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    int64_t t0;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, -1, &x));
    {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    ASSERT_EQ(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 50, &y), SEMA_ETIMEDOUT);
    {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        ASSERT_GE((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - t0, 49);
    }
    ASSERT(!sema_keyed_held(&y));
    ASSERT(sema_keyed_held(&x));
    ASSERT_EQ(sema_keyed_count(k), 1);
    sema_keyed_unlock(&x);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* A cancel token withdraws a queued request at once (pitfall 1 too: the
 * reader behind the cancelled exclusive is admitted). */
TEST(pitfall1_cancelled_head_waiter_lets_followers_in)
{
    sema_keyed_t *k;
    sema_cancel_t *c;
    sema_keyed_lock_t r0 = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    struct req w, r;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &r0));
    req_start_ex(&w, k, SEMA_EXCLUSIVE, 1, -1, c);
    wait_waiters(k, KEY, 1);
    req_start(&r, k, SEMA_SHARED, 2);
    wait_waiters(k, KEY, 2);
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_OK(pthread_join(w.t, NULL));
    ASSERT_EQ(w.rc, SEMA_ECANCELED);
    wait_granted(&r);
    req_finish(&r);
    /* A fired token fails later calls before they look at the key. */
    ASSERT_EQ(sema_keyed_lock_cancel(k, "free", 4, SEMA_SHARED, -1, c, &y), SEMA_ECANCELED);
    sema_keyed_unlock(&r0);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_cancel_free(c);
    sema_keyed_free(k);
}

/* pitfall 2: cancel racing grant. The request is queued (with a follower
 * behind it) before the holder's unlock and the cancel are released together,
 * so every round races a hand-off against a withdrawal. Either the request
 * holds the lock and the follower still waits, or it failed and the lock went
 * on to the follower: never both, never neither. */
struct race {
    sema_keyed_lock_t *hold;
    sema_cancel_t *c;
    pthread_barrier_t b;
};

static void *race_unlocker(void *arg)
{
    struct race *r = arg;

    pthread_barrier_wait(&r->b);
    sema_keyed_unlock(r->hold);
    return NULL;
}

static void *race_canceller(void *arg)
{
    struct race *r = arg;

    pthread_barrier_wait(&r->b);
    sema_cancel_fire(r->c);
    return NULL;
}

/* After the race: either y holds the key and its follower f still waits, or
 * y failed with `fail_rc` and f holds it. Both finish; nothing is left. */
static void settle_race(sema_keyed_t *k, struct req *y, struct req *f, int fail_rc, long *granted,
                        long *failed)
{
    sema_keyed_key_stats_t st;

    for (int i = 0; i < 100000 && !atomic_load(&y->granted) && !atomic_load(&f->granted); i++)
        pause_us(100);
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.holders, 1);
    if (atomic_load(&y->granted)) {
        ASSERT(!atomic_load(&f->granted));
        ASSERT_EQ(st.waiters, 1);
        req_finish(y);
        ASSERT_OK(y->rc);
        wait_granted(f);
        (*granted)++;
    } else {
        ASSERT(atomic_load(&f->granted));
        req_finish(y);
        ASSERT_EQ(y->rc, fail_rc);
        ASSERT(!atomic_load(&y->granted));
        (*failed)++;
    }
    req_finish(f);
    ASSERT_EQ(sema_keyed_count(k), 0);
}

static void race_round(sema_keyed_t *k, long *granted, long *cancelled)
{
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT;
    struct race r = {&x, NULL, {{0}}};
    struct req y, f;
    pthread_t t1, t2;

    ASSERT_OK(sema_cancel_new(&r.c));
    ASSERT_OK(pthread_barrier_init(&r.b, NULL, 2));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    req_start_ex(&y, k, SEMA_EXCLUSIVE, 1, -1, r.c);
    wait_waiters(k, KEY, 1);
    req_start(&f, k, SEMA_EXCLUSIVE, 2);
    wait_waiters(k, KEY, 2);
    ASSERT_OK(pthread_create(&t1, NULL, race_unlocker, &r));
    ASSERT_OK(pthread_create(&t2, NULL, race_canceller, &r));
    ASSERT_OK(pthread_join(t1, NULL));
    ASSERT_OK(pthread_join(t2, NULL));
    settle_race(k, &y, &f, SEMA_ECANCELED, granted, cancelled);
    pthread_barrier_destroy(&r.b);
    sema_cancel_free(r.c);
}

TEST(pitfall2_cancel_racing_grant_is_exact)
{
    sema_keyed_t *k;
    long granted = 0, cancelled = 0;

    ASSERT_OK(sema_keyed_new(&k));
    for (long i = 0; i < test_scale(300); i++)
        race_round(k, &granted, &cancelled);
    fprintf(stderr, "granted %ld cancelled %ld\n", granted, cancelled);
    sema_keyed_free(k);
}

/* Bounded wait until `f` is queued behind `y` (or alone, if y already timed
 * out). */
static void wait_queued_behind(sema_keyed_t *k, struct req *y)
{
    sema_keyed_key_stats_t st = {0};

    for (int i = 0; i < 100000; i++) {
        if (sema_keyed_key_stats(k, KEY, KLEN, &st) == 0 &&
            (st.waiters == 2 || (atomic_load(&y->done) && st.waiters == 1)))
            return;
        pause_us(100);
    }
    TEST_FAIL_("follower never queued: %" PRIu64 " waiters", st.waiters);
}

/* pitfall 2 with a timeout: the holder unlocks around the moment the queued
 * request's 5 ms deadline passes (the pause only varies the timing). A grant
 * that lands as the deadline passes wins; otherwise the request times out and
 * the key goes on to the follower. Exactly one of the two, every round. */
TEST(pitfall2_timeout_racing_grant_is_exact)
{
    sema_keyed_t *k;
    long granted = 0, timedout = 0;

    ASSERT_OK(sema_keyed_new(&k));
    for (long i = 0; i < test_scale(200); i++) {
        sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT;
        struct req y, f;

        ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
        req_start_ex(&y, k, SEMA_EXCLUSIVE, 1, 5, NULL);
        for (int j = 0; j < 100000 && !atomic_load(&y.done); j++) {
            sema_keyed_key_stats_t st;

            if (sema_keyed_key_stats(k, KEY, KLEN, &st) == 0 && st.waiters == 1)
                break;
            pause_us(50);
        }
        req_start(&f, k, SEMA_EXCLUSIVE, 2);
        wait_queued_behind(k, &y);
        pause_us((i * 37) % 6000);
        sema_keyed_unlock(&x);
        settle_race(k, &y, &f, SEMA_ETIMEDOUT, &granted, &timedout);
    }
    fprintf(stderr, "granted %ld timed out %ld\n", granted, timedout);
    sema_keyed_free(k);
}

/* pitfall 13: the key of a released holder stays while someone waits on it. */
TEST(pitfall13_cleanup_never_deletes_awaited_key)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    struct req w;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    req_start(&w, k, SEMA_EXCLUSIVE, 1);
    wait_waiters(k, KEY, 1);
    sema_keyed_unlock(&x); /* holders drop to 0, a waiter remains */
    wait_granted(&w);
    /* The same state: the waiter now holds it, so others are refused. */
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.holders, 1);
    ASSERT_EQ(sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &y), SEMA_EBUSY);
    ASSERT_EQ(sema_keyed_count(k), 1);
    req_finish(&w);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* pitfall 16: close settles every waiter; holders keep their locks. */
TEST(pitfall16_close_settles_every_waiter)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    struct req w[4];

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    for (int i = 0; i < 4; i++) {
        req_start(&w[i], k, i % 2 ? SEMA_SHARED : SEMA_EXCLUSIVE, i);
        wait_waiters(k, KEY, (uint64_t)i + 1);
    }
    sema_keyed_close(k);
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(pthread_join(w[i].t, NULL));
        ASSERT_EQ(w[i].rc, SEMA_ECANCELED);
    }
    ASSERT(sema_keyed_held(&x));
    ASSERT_EQ(sema_keyed_lock(k, "new", 3, SEMA_SHARED, -1, &y), SEMA_ECANCELED);
    ASSERT_EQ(sema_keyed_count(k), 1);
    sema_keyed_unlock(&x);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_close(k);
    sema_keyed_free(k);
}

TEST(unlock_is_idempotent)
{
    sema_keyed_t *k;
    sema_keyed_lock_t a = SEMA_KEYED_LOCK_INIT, b = SEMA_KEYED_LOCK_INIT;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &a));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, &b));
    sema_keyed_unlock(&a);
    sema_keyed_unlock(&a); /* must not release b's share */
    sema_keyed_unlock(&a);
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.holders, 1);
    ASSERT_EQ(st.held, 1);
    sema_keyed_unlock(&b);
    sema_keyed_unlock(&b);
    sema_keyed_unlock(NULL);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

static int task_fail(void *arg)
{
    sema_keyed_t *k = arg;
    sema_keyed_lock_t y = SEMA_KEYED_LOCK_INIT;

    /* Inside the task the key is held exclusively. */
    if (sema_keyed_trylock(k, KEY, KLEN, SEMA_SHARED, &y) != SEMA_EBUSY)
        return -1;
    return -4242;
}

static int task_ok(void *arg)
{
    int *n = arg;

    (*n)++;
    return 0;
}

TEST(task_style_propagates_errors_and_releases)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT;
    int n = 0, res = 0;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_with(k, KEY, KLEN, SEMA_EXCLUSIVE, -1, task_fail, k, &res));
    ASSERT_EQ(res, -4242); /* fn's error comes back; the lock is released */
    ASSERT_EQ(sema_keyed_count(k), 0);
    ASSERT_OK(sema_keyed_with(k, KEY, KLEN, SEMA_SHARED, -1, task_ok, &n, NULL));
    ASSERT_EQ(n, 1);
    /* The lock's own error comes back and fn is not called. */
    res = 7;
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    ASSERT_EQ(sema_keyed_with(k, KEY, KLEN, SEMA_SHARED, 0, task_ok, &n, &res), SEMA_EBUSY);
    ASSERT_EQ(sema_keyed_with(k, KEY, KLEN, SEMA_SHARED, 20, task_ok, &n, &res), SEMA_ETIMEDOUT);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(res, 7);
    sema_keyed_unlock(&x);
    ASSERT_EQ(sema_keyed_with(k, KEY, KLEN, SEMA_SHARED, 0, NULL, NULL, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

static int scoped_holder(sema_keyed_t *k, int early_return)
{
    SEMA_KEYED_SCOPED(l);

    if (sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &l) != 0)
        return -1;
    if (early_return)
        return 1;          /* the cleanup unlocks */
    sema_keyed_unlock(&l); /* unlocking early is fine: the cleanup is then a no-op */
    return 0;
}

TEST(scoped_lock_is_released_at_block_end)
{
    sema_keyed_t *k;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_EQ(scoped_holder(k, 1), 1);
    ASSERT_EQ(sema_keyed_count(k), 0);
    ASSERT_EQ(scoped_holder(k, 0), 0);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

TEST(key_cap_returns_elimit)
{
    sema_keyed_opts_t o = {3, 0};
    sema_keyed_t *k;
    sema_keyed_lock_t l[4] = {SEMA_KEYED_LOCK_INIT, SEMA_KEYED_LOCK_INIT, SEMA_KEYED_LOCK_INIT,
                              SEMA_KEYED_LOCK_INIT};
    char key[8];

    ASSERT_OK(sema_keyed_new_opts(&k, &o));
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ASSERT_OK(sema_keyed_lock(k, key, strlen(key), SEMA_SHARED, 0, &l[i]));
    }
    ASSERT_EQ(sema_keyed_lock(k, "k3", 2, SEMA_SHARED, -1, &l[3]), SEMA_ELIMIT);
    /* An existing key still works at the cap. */
    ASSERT_OK(sema_keyed_lock(k, "k0", 2, SEMA_SHARED, 0, &l[3]));
    sema_keyed_unlock(&l[3]);
    sema_keyed_unlock(&l[1]);
    ASSERT_OK(sema_keyed_lock(k, "k3", 2, SEMA_SHARED, 0, &l[3]));
    for (int i = 0; i < 4; i++)
        sema_keyed_unlock(&l[i]);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

TEST(empty_key_is_a_key)
{
    sema_keyed_t *k;
    sema_keyed_lock_t a = SEMA_KEYED_LOCK_INIT, b = SEMA_KEYED_LOCK_INIT;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, NULL, 0, SEMA_EXCLUSIVE, 0, &a));
    ASSERT_EQ(sema_keyed_lock(k, "", 0, SEMA_SHARED, 0, &b), SEMA_EBUSY);
    ASSERT_OK(sema_keyed_lock(k, "x", 1, SEMA_SHARED, 0, &b));
    sema_keyed_unlock(&a);
    sema_keyed_unlock(&b);
    sema_keyed_free(k);
}

TEST(bad_input)
{
    sema_keyed_t *k;
    sema_keyed_lock_t l = SEMA_KEYED_LOCK_INIT;
    sema_keyed_opts_t o = {0, (uint64_t)SEMA_KEYED_READERS_MAX + 1};
    sema_keyed_key_stats_t st;
    static char big[SEMA_KEYED_KEY_MAX + 1];

    ASSERT_EQ(sema_keyed_new(NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_new_opts(&k, &o), SEMA_EINVAL);
    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_EQ(sema_keyed_lock(NULL, KEY, KLEN, SEMA_SHARED, 0, &l), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_lock(k, KEY, KLEN, SEMA_SHARED, 0, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_lock(k, NULL, 3, SEMA_SHARED, 0, &l), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_lock(k, KEY, KLEN, 0, 0, &l), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_lock(k, KEY, KLEN, 3, -1, &l), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_lock(k, big, sizeof(big), SEMA_SHARED, 0, &l), SEMA_ENAMETOOLONG);
    ASSERT_OK(sema_keyed_lock(k, big, sizeof(big) - 1, SEMA_SHARED, 0, &l));
    sema_keyed_unlock(&l);
    ASSERT(!sema_keyed_held(&l));
    ASSERT(!sema_keyed_held(NULL));
    ASSERT_EQ(sema_keyed_key_stats(NULL, KEY, KLEN, &st), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_key_stats(k, KEY, KLEN, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_keyed_count(NULL), 0);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_close(NULL);
    sema_keyed_free(NULL);
    sema_keyed_free(k);
}

/* pitfall 4: a token that fires before the request registers can never leave
 * a stale waiter behind (registration happens under the stripe lock, before
 * the request is queued). */
TEST(pitfall4_fired_token_leaves_no_stale_waiter)
{
    sema_keyed_t *k;
    sema_cancel_t *c;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    ASSERT_OK(sema_cancel_fire(c));
    ASSERT_EQ(sema_keyed_lock_cancel(k, KEY, KLEN, SEMA_SHARED, -1, c, &y), SEMA_ECANCELED);
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.waiters, 0);
    sema_keyed_unlock(&x);
    ASSERT_EQ(sema_keyed_count(k), 0);
    /* The key is free again: an unfired token does not get in the way. */
    sema_cancel_free(c);
    ASSERT_OK(sema_cancel_new(&c));
    ASSERT_OK(sema_keyed_lock_cancel(k, KEY, KLEN, SEMA_EXCLUSIVE, -1, c, &y));
    sema_keyed_unlock(&y);
    sema_cancel_free(c);
    sema_keyed_free(k);
}

/* pitfall 4, the race itself: the token fires from another thread while the
 * call is on its way in (before its check, between the check and the
 * registration, or once it is queued). Whichever window it hits, the call
 * fails with ECANCELED well before its timeout and leaves no waiter behind. */
struct firer {
    sema_cancel_t *c;
    pthread_barrier_t b;
    long spin; /* a varying head start for the call, so every window is hit */
};

static void *firer_main(void *arg)
{
    struct firer *f = arg;

    pthread_barrier_wait(&f->b);
    for (volatile long i = 0; i < f->spin; i++)
        ;
    sema_cancel_fire(f->c);
    return NULL;
}

TEST(pitfall4_cancel_racing_the_call_leaves_no_stale_waiter)
{
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT, y = SEMA_KEYED_LOCK_INIT;
    sema_keyed_key_stats_t st;

    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    for (long i = 0; i < test_scale(300); i++) {
        struct firer f;
        pthread_t t;

        ASSERT_OK(sema_cancel_new(&f.c));
        ASSERT_OK(pthread_barrier_init(&f.b, NULL, 2));
        f.spin = (i * 7919) % 4000;
        ASSERT_OK(pthread_create(&t, NULL, firer_main, &f));
        pthread_barrier_wait(&f.b);
        ASSERT_EQ(sema_keyed_lock_cancel(k, KEY, KLEN, SEMA_SHARED, 10000, f.c, &y),
                  SEMA_ECANCELED);
        ASSERT_OK(pthread_join(t, NULL));
        ASSERT(!sema_keyed_held(&y));
        ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
        ASSERT_EQ(st.waiters, 0);
        ASSERT_EQ(st.holders, 1);
        pthread_barrier_destroy(&f.b);
        sema_cancel_free(f.c);
    }
    sema_keyed_unlock(&x);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* Waiters for the same key from many threads; every other one is withdrawn
 * by its cancel token from the middle of the queue (O(1) unlink), in an
 * order unrelated to the queue's; the rest are granted in order when the
 * holder leaves. */
TEST(withdrawals_from_the_middle_of_the_queue)
{
    enum { N = 12 };
    static const int fire_order[] = {7, 1, 11, 5, 3, 9};
    sema_keyed_t *k;
    sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT;
    sema_cancel_t *c[N] = {0};
    struct req r[N];

    order_n = 0;
    ASSERT_OK(sema_keyed_new(&k));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
    for (int i = 0; i < N; i++) {
        if (i % 2)
            ASSERT_OK(sema_cancel_new(&c[i]));
        req_start_ex(&r[i], k, SEMA_EXCLUSIVE, i, -1, c[i]);
        wait_waiters(k, KEY, (uint64_t)i + 1);
    }
    for (int j = 0; j < N / 2; j++) {
        int i = fire_order[j];

        ASSERT_OK(sema_cancel_fire(c[i]));
        ASSERT_OK(pthread_join(r[i].t, NULL));
        ASSERT_EQ(r[i].rc, SEMA_ECANCELED);
        wait_waiters(k, KEY, (uint64_t)(N - j - 1));
    }
    sema_keyed_unlock(&x);
    for (int i = 0; i < N; i += 2) {
        wait_granted(&r[i]);
        req_finish(&r[i]);
    }
    for (int i = 0; i < N / 2; i++)
        ASSERT_EQ(log_at(i), 2 * i);
    for (int i = 1; i < N; i += 2)
        sema_cancel_free(c[i]);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

/* Random request sequences checked step by step against a model of the
 * rule (a FIFO of weights 1 and R, capacity R; grant heads while they fit):
 * after every release the holders and waiters of the key are exactly the
 * model's. */
struct model {
    int n, r;
    int weight[8];
    int state[8]; /* 0 queued, 1 holding, 2 done */
    int held;
};

static void model_admit(struct model *m)
{
    for (int i = 0; i < m->n; i++) {
        if (m->state[i] != 0)
            continue;
        if (m->held + m->weight[i] > m->r)
            return; /* head-of-line blocking */
        m->state[i] = 1;
        m->held += m->weight[i];
    }
}

static void model_check(struct model *m, sema_keyed_t *k, struct req *r)
{
    sema_keyed_key_stats_t st = {0};
    int holders = 0, waiters = 0;

    for (int i = 0; i < m->n; i++) {
        holders += m->state[i] == 1;
        waiters += m->state[i] == 0;
        if (m->state[i] == 1)
            wait_granted(&r[i]);
        else if (m->state[i] == 0)
            ASSERT(!atomic_load(&r[i].granted));
    }
    if (holders + waiters == 0) {
        ASSERT_EQ(sema_keyed_key_stats(k, KEY, KLEN, &st), SEMA_ENOENT);
        return;
    }
    ASSERT_OK(sema_keyed_key_stats(k, KEY, KLEN, &st));
    ASSERT_EQ(st.holders, holders);
    ASSERT_EQ(st.waiters, waiters);
    ASSERT_EQ(st.held, m->held);
}

static void model_round(uint64_t *seed)
{
    sema_keyed_opts_t o = {0, 0};
    struct model m = {0};
    struct req r[8];
    sema_keyed_t *k;
    sema_keyed_lock_t gate = SEMA_KEYED_LOCK_INIT;

    order_n = 0;
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    m.r = 1 + (int)((*seed >> 33) % 3);
    m.n = 2 + (int)((*seed >> 40) % 7);
    o.max_readers = (uint64_t)m.r;
    ASSERT_OK(sema_keyed_new_opts(&k, &o));
    ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &gate));
    for (int i = 0; i < m.n; i++) {
        int excl = (int)((*seed >> (i * 3 + 5)) & 1);

        m.weight[i] = excl ? m.r : 1;
        req_start(&r[i], k, excl ? SEMA_EXCLUSIVE : SEMA_SHARED, i);
        wait_waiters(k, KEY, (uint64_t)i + 1);
    }
    sema_keyed_unlock(&gate);
    model_admit(&m);
    model_check(&m, k, r);
    for (int left = m.n; left > 0; left--) {
        int pick = -1, c = 0;

        for (int i = 0; i < m.n; i++) /* a random holder leaves */
            if (m.state[i] == 1 && (pick < 0 || (*seed >> (c++ % 60)) % 2))
                pick = i;
        ASSERT_GE(pick, 0);
        req_finish(&r[pick]); /* joined: its unlock (and the grants) are done */
        m.state[pick] = 2;
        m.held -= m.weight[pick];
        model_admit(&m);
        model_check(&m, k, r);
    }
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}

TEST(randomized_sequences_match_the_fifo_model)
{
    uint64_t seed = 20261122;

    for (long i = 0; i < test_scale(60); i++)
        model_round(&seed);
}

/* An allocator that gives every block its own mapping and unmaps it on free:
 * any touch of freed libsema memory faults at once, even inside libc (where
 * ASan does not look) and in a plain build. */
#define MAP_HDR 64

static void *map_malloc(size_t n)
{
    size_t len = n + MAP_HDR;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED)
        return NULL;
    memcpy(p, &len, sizeof(len));
    return p + MAP_HDR;
}

static void map_free(void *ptr)
{
    unsigned char *p = ptr;
    size_t len;

    if (p == NULL)
        return;
    p -= MAP_HDR;
    memcpy(&len, p, sizeof(len));
    munmap(p, len);
}

static void *map_calloc(size_t c, size_t n)
{
    return map_malloc(c * n); /* fresh mappings are zeroed */
}

static void *map_realloc(void *ptr, size_t n)
{
    void *p = map_malloc(n);
    size_t old;

    if (p == NULL || ptr == NULL)
        return p;
    memcpy(&old, (unsigned char *)ptr - MAP_HDR, sizeof(old));
    old -= MAP_HDR;
    memcpy(p, ptr, old < n ? old : n);
    map_free(ptr);
    return p;
}

/* pitfall 9: an unlock that hands the key to a waiter must not touch the
 * table afterwards: the waiter may unlock and free everything at once (ASan
 * sees any late touch). */
struct handoff {
    sema_keyed_t *k;
    sema_keyed_lock_t held;
};

static void *handoff_unlocker(void *arg)
{
    struct handoff *h = arg;

    wait_waiters(h->k, KEY, 1); /* hand off every round: the main thread is queued */
    sema_keyed_unlock(&h->held);
    return NULL;
}

TEST(pitfall9_unlock_never_touches_the_table_after_hand_off)
{
    ASSERT_OK(sema_set_allocator(map_malloc, map_realloc, map_calloc, map_free));
    for (long i = 0; i < test_scale(300); i++) {
        struct handoff *h = calloc(1, sizeof(*h));
        sema_keyed_lock_t mine = SEMA_KEYED_LOCK_INIT;
        pthread_t t;

        ASSERT_OK(sema_keyed_new(&h->k));
        ASSERT_OK(sema_keyed_lock(h->k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &h->held));
        ASSERT_OK(pthread_create(&t, NULL, handoff_unlocker, h));
        ASSERT_OK(sema_keyed_lock(h->k, KEY, KLEN, SEMA_EXCLUSIVE, -1, &mine));
        sema_keyed_unlock(&mine);
        sema_keyed_free(h->k); /* the unlocker may still be returning */
        ASSERT_OK(pthread_join(t, NULL));
        ASSERT(!sema_keyed_held(&h->held));
        free(h);
    }
}

/* pitfall 9 (and 16): close fails the waiters, the holder unlocks, and the
 * table is freed at once, as the header allows ("close it, then let every
 * holder unlock"). The failed waiters are still on their way out of
 * sema_keyed_lock() (they must take the stripe lock again): free must wait
 * for them, never pull the table from under them. */
struct leaver {
    sema_keyed_t *k;
    int rc;
    pthread_t t;
};

static void *leaver_main(void *arg)
{
    struct leaver *l = arg;
    sema_keyed_lock_t h = SEMA_KEYED_LOCK_INIT;

    l->rc = sema_keyed_lock(l->k, KEY, KLEN, SEMA_EXCLUSIVE, -1, &h);
    return NULL;
}

TEST(pitfall9_free_right_after_close_waits_for_leaving_waiters)
{
    enum { W = 8 };

    ASSERT_OK(sema_set_allocator(map_malloc, map_realloc, map_calloc, map_free));
    for (long i = 0; i < test_scale(40); i++) {
        sema_keyed_t *k;
        sema_keyed_lock_t x = SEMA_KEYED_LOCK_INIT;
        struct leaver l[W];

        ASSERT_OK(sema_keyed_new(&k));
        ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &x));
        for (int j = 0; j < W; j++) {
            l[j].k = k;
            l[j].rc = 1;
            ASSERT_OK(pthread_create(&l[j].t, NULL, leaver_main, &l[j]));
        }
        wait_waiters(k, KEY, W);
        sema_keyed_close(k);
        sema_keyed_unlock(&x);
        ASSERT_EQ(sema_keyed_count(k), 0);
        sema_keyed_free(k); /* the waiters may still be leaving */
        for (int j = 0; j < W; j++) {
            ASSERT_OK(pthread_join(l[j].t, NULL));
            ASSERT_EQ(l[j].rc, SEMA_ECANCELED);
        }
    }
}

/* pitfall 9, the handle's side: a holder's handle may live in an object the
 * next holder frees (the lock guards the object's lifetime). Once unlock has
 * handed the key over it must not write the handle any more. TSan sees a late
 * write without any timing luck; ASan sees it when the race is lost. */
struct guarded {
    sema_keyed_lock_t h;
    char payload[64];
};

struct successor {
    sema_keyed_t *k;
    struct guarded *obj;
    int rc;
};

static void *successor_main(void *arg)
{
    struct successor *s = arg;
    sema_keyed_lock_t mine = SEMA_KEYED_LOCK_INIT;

    s->rc = sema_keyed_lock(s->k, KEY, KLEN, SEMA_EXCLUSIVE, -1, &mine);
    if (s->rc == 0) {
        free(s->obj); /* ours now: the previous holder is done with it */
        sema_keyed_unlock(&mine);
    }
    return NULL;
}

TEST(pitfall9_unlock_never_touches_the_handle_after_hand_off)
{
    sema_keyed_t *k;

    ASSERT_OK(sema_keyed_new(&k));
    for (long i = 0; i < test_scale(200); i++) {
        struct successor s = {k, calloc(1, sizeof(struct guarded)), 1};
        pthread_t t;

        ASSERT_NOT_NULL(s.obj);
        ASSERT_OK(sema_keyed_lock(k, KEY, KLEN, SEMA_EXCLUSIVE, 0, &s.obj->h));
        ASSERT_OK(pthread_create(&t, NULL, successor_main, &s));
        wait_waiters(k, KEY, 1);
        sema_keyed_unlock(&s.obj->h); /* s.obj may be gone when this returns */
        ASSERT_OK(pthread_join(t, NULL));
        ASSERT_OK(s.rc);
    }
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
}
