/* SPDX-License-Identifier: MIT */
/* test_keyed_scale.c - keyed lock at scale: a million keys, memory back, failing allocations,
 * stress. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "sema/sema.h"
#include "test.h"

/* A counting allocator: bytes and blocks outstanding, and an optional
 * failure of the n-th allocation. */
static atomic_long out_bytes, out_blocks, alloc_calls;
static atomic_long fail_at = -1; /* alloc_calls value that fails, -1: none */
static atomic_int fail_all;      /* every allocation fails */

#define HDR 16

static void *count_malloc(size_t n)
{
    unsigned char *p;

    if (atomic_fetch_add(&alloc_calls, 1) == atomic_load(&fail_at) || atomic_load(&fail_all))
        return NULL;
    p = malloc(n + HDR);
    if (p == NULL)
        return NULL;
    memcpy(p, &n, sizeof(n));
    atomic_fetch_add(&out_bytes, (long)n);
    atomic_fetch_add(&out_blocks, 1);
    return p + HDR;
}

static void count_free(void *ptr)
{
    unsigned char *p = ptr;
    size_t n;

    if (p == NULL)
        return;
    p -= HDR;
    memcpy(&n, p, sizeof(n));
    atomic_fetch_sub(&out_bytes, (long)n);
    atomic_fetch_sub(&out_blocks, 1);
    free(p);
}

static void *count_calloc(size_t c, size_t n)
{
    void *p = count_malloc(c * n);

    if (p != NULL)
        memset(p, 0, c * n);
    return p;
}

static void *count_realloc(void *ptr, size_t n)
{
    void *p = count_malloc(n);
    size_t old;

    if (p == NULL || ptr == NULL)
        return p;
    memcpy(&old, (unsigned char *)ptr - HDR, sizeof(old));
    memcpy(p, ptr, old < n ? old : n);
    count_free(ptr);
    return p;
}

static void use_counting_allocator(void)
{
    ASSERT_OK(sema_set_allocator(count_malloc, count_realloc, count_calloc, count_free));
}

/* What the table may keep for reuse once every key is gone: up to 8 small
 * entries (< 160 bytes each) in each of the 64 stripes. */
#define CACHE_BOUND (64L * 8 * 160)

static size_t key_of(char *buf, size_t cap, long t, long i)
{
    return (size_t)snprintf(buf, cap, "tenant-%ld/object-%ld", t, i);
}

TEST(million_distinct_keys_leave_nothing)
{
    sema_keyed_t *k;
    long n = test_scale(1000000), base;
    char key[64];

    use_counting_allocator();
    ASSERT_OK(sema_keyed_new(&k));
    base = atomic_load(&out_bytes);
    for (long i = 0; i < n; i++) {
        sema_keyed_lock_t l = SEMA_KEYED_LOCK_INIT;
        size_t len = key_of(key, sizeof(key), 0, i);

        ASSERT_OK(sema_keyed_lock(k, key, len, (i & 1) ? SEMA_SHARED : SEMA_EXCLUSIVE, -1, &l));
        sema_keyed_unlock(&l);
    }
    ASSERT_EQ(sema_keyed_count(k), 0);
    ASSERT_LE(atomic_load(&out_bytes) - base, CACHE_BOUND);
    sema_keyed_free(k);
    ASSERT_EQ(atomic_load(&out_bytes), 0);
    ASSERT_EQ(atomic_load(&out_blocks), 0);
}

/* Many keys held at once: the stripes' tables grow, lookups stay O(1), and
 * everything shrinks back once the keys are released. */
TEST(pitfall14_table_grows_and_shrinks_with_held_keys)
{
    sema_keyed_t *k;
    long n = test_scale(200000), base, peak;
    sema_keyed_lock_t *l = calloc((size_t)n, sizeof(*l));
    char key[64];

    use_counting_allocator();
    ASSERT_OK(sema_keyed_new(&k));
    base = atomic_load(&out_bytes);
    for (long i = 0; i < n; i++)
        ASSERT_OK(
            sema_keyed_trylock(k, key, key_of(key, sizeof(key), 1, i), SEMA_EXCLUSIVE, &l[i]));
    ASSERT_EQ(sema_keyed_count(k), n);
    peak = atomic_load(&out_bytes);
    ASSERT_GE(peak - base, n * 32);
    for (long i = 0; i < n; i++) {
        sema_keyed_lock_t again = SEMA_KEYED_LOCK_INIT;

        ASSERT_EQ(sema_keyed_trylock(k, key, key_of(key, sizeof(key), 1, i), SEMA_SHARED, &again),
                  SEMA_EBUSY);
    }
    for (long i = 0; i < n; i++)
        sema_keyed_unlock(&l[i]);
    ASSERT_EQ(sema_keyed_count(k), 0);
    ASSERT_LE(atomic_load(&out_bytes) - base, CACHE_BOUND);
    sema_keyed_free(k);
    ASSERT_EQ(atomic_load(&out_blocks), 0);
    free(l);
}

struct churn {
    sema_keyed_t *k;
    long t, n;
    pthread_barrier_t *b;
};

static void *churn_main(void *arg)
{
    struct churn *c = arg;
    char key[64];

    pthread_barrier_wait(c->b);
    for (long i = 0; i < c->n; i++) {
        sema_keyed_lock_t l = SEMA_KEYED_LOCK_INIT;
        size_t len = key_of(key, sizeof(key), c->t, i);

        ASSERT_OK(sema_keyed_lock(c->k, key, len, (i % 3) ? SEMA_SHARED : SEMA_EXCLUSIVE, -1, &l));
        sema_keyed_unlock(&l);
    }
    return NULL;
}

TEST(distinct_keys_from_threads_leave_nothing)
{
    enum { T = 4 };
    sema_keyed_t *k;
    struct churn c[T];
    pthread_t t[T];
    pthread_barrier_t b;

    use_counting_allocator();
    ASSERT_OK(sema_keyed_new(&k));
    pthread_barrier_init(&b, NULL, T);
    for (long i = 0; i < T; i++) {
        c[i] = (struct churn){k, i, test_scale(250000), &b};
        pthread_create(&t[i], NULL, churn_main, &c[i]);
    }
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
    ASSERT_EQ(atomic_load(&out_blocks), 0);
    pthread_barrier_destroy(&b);
}

/* Allocation-failure loop: fail the 1st, 2nd, ... allocation of new() until
 * it succeeds; each failure is a clean ENOMEM with nothing leaked. */
TEST(new_fails_cleanly_on_every_allocation)
{
    use_counting_allocator();
    for (long i = 0;; i++) {
        sema_keyed_t *k = (sema_keyed_t *)&i;
        int rc;

        atomic_store(&alloc_calls, 0);
        atomic_store(&fail_at, i);
        rc = sema_keyed_new(&k);
        atomic_store(&fail_at, -1);
        if (rc == 0) {
            sema_keyed_free(k);
            ASSERT_GE(i, 2);
            break;
        }
        ASSERT_EQ(rc, SEMA_ENOMEM);
        ASSERT_NULL(k);
        ASSERT_EQ(atomic_load(&out_blocks), 0);
    }
    ASSERT_EQ(atomic_load(&out_blocks), 0);
}

TEST(lock_of_a_new_key_fails_cleanly_without_memory)
{
    sema_keyed_t *k;
    sema_keyed_lock_t a = SEMA_KEYED_LOCK_INIT, b = SEMA_KEYED_LOCK_INIT;
    static char longkey[200];

    use_counting_allocator();
    ASSERT_OK(sema_keyed_new(&k));
    memset(longkey, 'x', sizeof(longkey));
    ASSERT_OK(sema_keyed_lock(k, "held", 4, SEMA_SHARED, 0, &a));
    atomic_store(&alloc_calls, 0);
    atomic_store(&fail_at, 0);
    /* A long key is never served from the cache: the allocation fails. */
    ASSERT_EQ(sema_keyed_lock(k, longkey, sizeof(longkey), SEMA_SHARED, -1, &b), SEMA_ENOMEM);
    atomic_store(&fail_at, -1);
    ASSERT(!sema_keyed_held(&b));
    ASSERT_EQ(sema_keyed_count(k), 1);
    /* Existing keys never allocate. */
    atomic_store(&alloc_calls, 0);
    ASSERT_OK(sema_keyed_lock(k, "held", 4, SEMA_SHARED, 0, &b));
    ASSERT_EQ(atomic_load(&alloc_calls), 0);
    sema_keyed_unlock(&b);
    sema_keyed_unlock(&a);
    ASSERT_EQ(sema_keyed_count(k), 0);
    sema_keyed_free(k);
    ASSERT_EQ(atomic_load(&out_blocks), 0);
}

/* Unlock never fails: with every allocation failing, releasing many held
 * keys (whose stripes then want smaller tables) frees every key's state; the
 * tables shrink later, once memory is back. */
TEST(unlock_never_fails_when_allocation_fails)
{
    sema_keyed_t *k;
    long n = test_scale(20000), base;
    sema_keyed_lock_t *l = calloc((size_t)n, sizeof(*l));
    char key[64];

    use_counting_allocator();
    ASSERT_OK(sema_keyed_new(&k));
    base = atomic_load(&out_bytes);
    for (long i = 0; i < n; i++)
        ASSERT_OK(
            sema_keyed_trylock(k, key, key_of(key, sizeof(key), 2, i), SEMA_EXCLUSIVE, &l[i]));
    atomic_store(&alloc_calls, 0);
    atomic_store(&fail_all, 1);
    for (long i = 0; i < n; i++)
        sema_keyed_unlock(&l[i]);
    atomic_store(&fail_all, 0);
    ASSERT_GT(atomic_load(&alloc_calls), 0); /* the shrinks were tried, and failed */
    ASSERT_EQ(sema_keyed_count(k), 0);
    for (long i = 0; i < n; i++)
        ASSERT(!sema_keyed_held(&l[i]));
    /* With memory back, churn on every stripe shrinks the tables again. */
    for (long i = 0; i < n; i++) {
        sema_keyed_lock_t t = SEMA_KEYED_LOCK_INIT;

        ASSERT_OK(sema_keyed_trylock(k, key, key_of(key, sizeof(key), 3, i), SEMA_SHARED, &t));
        sema_keyed_unlock(&t);
    }
    ASSERT_LE(atomic_load(&out_bytes) - base, CACHE_BOUND);
    sema_keyed_free(k);
    ASSERT_EQ(atomic_load(&out_blocks), 0);
    free(l);
}

/* Stress: threads lock a few hot keys in random modes with random timeouts
 * and cancels; inside each critical section the holder checks that the
 * rules hold (an exclusive is alone; at most R readers). */
#define HOT 4
#define READERS 3

struct hot {
    atomic_int readers, writers;
    atomic_long grants;
};

#define STRESS_T 6

/* A worker's current cancel token, published so that the canceller thread
 * can fire it while the worker waits; the worker frees a token only after
 * unpublishing it under the same mutex. */
struct token_slot {
    pthread_mutex_t mu;
    sema_cancel_t *c;
};

struct stress {
    sema_keyed_t *k;
    struct hot hot[HOT];
    pthread_barrier_t b;
    atomic_long timeouts, cancels, busy;
    atomic_int next_id, workers_done;
    struct token_slot slot[STRESS_T];
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void check_inside(struct hot *h, int mode)
{
    if (mode == SEMA_EXCLUSIVE) {
        ASSERT_EQ(atomic_fetch_add(&h->writers, 1), 0);
        ASSERT_EQ(atomic_load(&h->readers), 0);
        for (volatile int i = 0; i < 50; i++)
            ;
        atomic_fetch_sub(&h->writers, 1);
    } else {
        ASSERT_LT(atomic_fetch_add(&h->readers, 1), READERS);
        ASSERT_EQ(atomic_load(&h->writers), 0);
        for (volatile int i = 0; i < 50; i++)
            ;
        atomic_fetch_sub(&h->readers, 1);
    }
    atomic_fetch_add(&h->grants, 1);
}

static int one_op(struct stress *s, uint64_t *seed, sema_cancel_t *c)
{
    uint64_t r = rnd(seed);
    int key = (int)(r % HOT);
    int mode = (r >> 8) % 3 == 0 ? SEMA_EXCLUSIVE : SEMA_SHARED;
    int64_t timeout = (r >> 16) % 4 == 0 ? 0 : (r >> 16) % 4 == 1 ? 1 : -1;
    sema_keyed_lock_t l = SEMA_KEYED_LOCK_INIT;
    char name[8];
    int rc;

    snprintf(name, sizeof(name), "hot%d", key);
    rc = sema_keyed_lock_cancel(s->k, name, strlen(name), mode, timeout, c, &l);
    if (rc == 0) {
        if ((r >> 24) % 64 == 0) {
            struct timespec ts = {0, 100000}; /* sometimes hold long enough for timeouts */

            nanosleep(&ts, NULL);
        }
        check_inside(&s->hot[key], mode);
        sema_keyed_unlock(&l);
    }
    return rc;
}

static void publish(struct token_slot *ts, sema_cancel_t *c)
{
    pthread_mutex_lock(&ts->mu);
    ts->c = c;
    pthread_mutex_unlock(&ts->mu);
}

static void *stress_main(void *arg)
{
    struct stress *s = arg;
    struct token_slot *ts = &s->slot[atomic_fetch_add(&s->next_id, 1)];
    uint64_t seed = (uint64_t)(uintptr_t)&seed | 1;
    sema_cancel_t *c = NULL;

    pthread_barrier_wait(&s->b);
    for (long i = 0; i < test_scale(20000); i++) {
        int rc;

        if (c == NULL) {
            ASSERT_OK(sema_cancel_new(&c));
            publish(ts, c);
        }
        if (rnd(&seed) % 64 == 0)
            sema_cancel_fire(c); /* fired before the call */
        rc = one_op(s, &seed, c);
        if (rc == SEMA_ETIMEDOUT)
            atomic_fetch_add(&s->timeouts, 1);
        else if (rc == SEMA_EBUSY)
            atomic_fetch_add(&s->busy, 1);
        else if (rc == SEMA_ECANCELED)
            atomic_fetch_add(&s->cancels, 1);
        else
            ASSERT_OK(rc);
        if (sema_cancel_fired(c)) {
            publish(ts, NULL);
            sema_cancel_free(c);
            c = NULL;
        }
    }
    publish(ts, NULL);
    sema_cancel_free(c);
    atomic_fetch_add(&s->workers_done, 1);
    return NULL;
}

/* Fires the workers' tokens at random moments, so that cancels land while
 * requests wait in the queue (and race their grants), not only before the
 * call. The pause only spaces the cancels out. */
static void *canceller_main(void *arg)
{
    struct stress *s = arg;
    uint64_t seed = 0x9e3779b97f4a7c15ULL;

    while (atomic_load(&s->workers_done) < STRESS_T) {
        struct token_slot *ts = &s->slot[rnd(&seed) % STRESS_T];
        struct timespec pause = {0, (long)(rnd(&seed) % 300000)};

        pthread_mutex_lock(&ts->mu);
        if (ts->c != NULL)
            sema_cancel_fire(ts->c);
        pthread_mutex_unlock(&ts->mu);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

TEST(stress_hot_keys_random_modes_timeouts_cancels)
{
    enum { T = STRESS_T };
    sema_keyed_opts_t o = {0, READERS};
    struct stress s;
    pthread_t t[T], canceller;
    long grants = 0;

    memset(&s, 0, sizeof(s));
    for (int i = 0; i < T; i++)
        pthread_mutex_init(&s.slot[i].mu, NULL);
    ASSERT_OK(sema_keyed_new_opts(&s.k, &o));
    pthread_barrier_init(&s.b, NULL, T);
    for (int i = 0; i < T; i++)
        pthread_create(&t[i], NULL, stress_main, &s);
    pthread_create(&canceller, NULL, canceller_main, &s);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    pthread_join(canceller, NULL);
    for (int i = 0; i < HOT; i++)
        grants += atomic_load(&s.hot[i].grants);
    ASSERT_GT(grants, 0);
    ASSERT_GT(atomic_load(&s.cancels), 0);
    fprintf(stderr, "grants %ld timeouts %ld busy %ld cancels %ld\n", grants,
            atomic_load(&s.timeouts), atomic_load(&s.busy), atomic_load(&s.cancels));
    ASSERT_EQ(sema_keyed_count(s.k), 0);
    sema_keyed_free(s.k);
    pthread_barrier_destroy(&s.b);
    for (int i = 0; i < T; i++)
        pthread_mutex_destroy(&s.slot[i].mu);
}
