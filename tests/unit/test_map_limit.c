/* SPDX-License-Identifier: MIT */
/* test_map_limit.c - the bounded parallel map: limit, order, first error, cancel, stats. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "sema/sema.h"
#include "test.h"

/* A counting producer over 0..n-1 (the item is the number itself). */
struct run {
    uint64_t n, pos;
    uint64_t fail_at; /* fn fails for this index (UINT64_MAX: never) */
    int fail_code;
    atomic_long active, max_active, calls;
    atomic_long after_fail; /* fn calls for an index above fail_at */
    uint64_t emitted_next;  /* emit checks order with this */
    long emit_calls, discards;
    unsigned char *seen; /* per index: emit/discard count */
    sema_map_limit_t *map;
    pthread_barrier_t *gate; /* if set, fn for index 0 waits here */
};

static int count_next(void *ctx, void **item)
{
    struct run *r = ctx;

    if (r->pos == r->n)
        return 0;
    *item = (void *)(uintptr_t)r->pos++;
    return 1;
}

static void note_active(struct run *r)
{
    long a = atomic_fetch_add(&r->active, 1) + 1;
    long m = atomic_load(&r->max_active);

    while (a > m && !atomic_compare_exchange_weak(&r->max_active, &m, a))
        ;
}

static void tiny_pause(void)
{
    struct timespec ts = {0, 200000};

    nanosleep(&ts, NULL);
}

static int square_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct run *r = ctx;
    uint64_t v = (uint64_t)(uintptr_t)item;

    note_active(r);
    atomic_fetch_add(&r->calls, 1);
    if (r->fail_at != UINT64_MAX && index > r->fail_at)
        atomic_fetch_add(&r->after_fail, 1);
    if ((index % 7) == 0)
        tiny_pause(); /* finish out of order */
    atomic_fetch_sub(&r->active, 1);
    if (index == r->fail_at)
        return r->fail_code;
    *result = (void *)(uintptr_t)(v * v + 1);
    return 0;
}

static int ordered_emit(void *ctx, uint64_t index, void *result)
{
    struct run *r = ctx;

    ASSERT_EQ(index, r->emitted_next);
    ASSERT_EQ((uint64_t)(uintptr_t)result, index * index + 1);
    r->emitted_next++;
    r->emit_calls++;
    if (r->seen != NULL)
        r->seen[index]++;
    return 0;
}

static void count_discard(void *ctx, uint64_t index, void *result)
{
    struct run *r = ctx;

    (void)result;
    r->discards++;
    if (r->seen != NULL)
        r->seen[index]++;
}

static int endless_next(void *ctx, void **item)
{
    (void)ctx;
    *item = NULL;
    return 1;
}

static void run_init(struct run *r, uint64_t n)
{
    memset(r, 0, sizeof(*r));
    r->n = n;
    r->fail_at = UINT64_MAX;
}

static sema_map_limit_opts_t opts_for(struct run *r, size_t limit)
{
    sema_map_limit_opts_t o = {0};

    o.limit = limit;
    o.next = count_next;
    o.fn = square_fn;
    o.emit = ordered_emit;
    o.discard = count_discard;
    o.ctx = r;
    o.total = r->n;
    return o;
}

TEST(results_in_input_order)
{
    struct run r;
    sema_map_limit_opts_t o;

    run_init(&r, (uint64_t)test_scale(2000));
    o = opts_for(&r, 4);
    ASSERT_OK(sema_map_limit(&o));
    ASSERT_EQ(r.emit_calls, r.n);
    ASSERT_EQ(r.discards, 0);
    ASSERT_EQ(atomic_load(&r.calls), r.n);
}

TEST(never_more_than_limit_running)
{
    struct run r;
    sema_map_limit_opts_t o;

    run_init(&r, (uint64_t)test_scale(3000));
    o = opts_for(&r, 3);
    ASSERT_OK(sema_map_limit(&o));
    ASSERT_LE(atomic_load(&r.max_active), 3);
    ASSERT_GE(atomic_load(&r.max_active), 1);
}

static int slow_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct run *r = ctx;

    (void)item;
    (void)index;
    note_active(r);
    tiny_pause();
    tiny_pause();
    atomic_fetch_sub(&r->active, 1);
    return 0;
}

TEST(limit_is_reached_with_slow_items)
{
    struct run r;
    sema_map_limit_opts_t o;

    run_init(&r, 200);
    o = opts_for(&r, 4);
    o.fn = slow_fn;
    o.emit = NULL;
    ASSERT_OK(sema_map_limit(&o));
    ASSERT_EQ(atomic_load(&r.max_active), 4);
}

TEST(array_form_writes_results_by_index)
{
    enum { N = 500 };
    void *items[N], *results[N];
    struct run r;

    run_init(&r, N);
    for (size_t i = 0; i < N; i++)
        items[i] = (void *)(uintptr_t)i;
    ASSERT_OK(sema_map_limit_array(items, N, square_fn, &r, results, 8));
    for (size_t i = 0; i < N; i++)
        ASSERT_EQ((uint64_t)(uintptr_t)results[i], (uint64_t)i * i + 1);
    ASSERT_OK(sema_map_limit_array(NULL, 0, square_fn, &r, NULL, 2));
}

TEST(array_form_first_error_and_limit)
{
    enum { N = 3000 };
    static void *items[N], *results[N];
    struct run r;

    run_init(&r, N);
    r.fail_at = 700;
    r.fail_code = -77;
    for (size_t i = 0; i < N; i++)
        items[i] = (void *)(uintptr_t)i;
    ASSERT_EQ(sema_map_limit_array(items, N, square_fn, &r, results, 3), -77);
    ASSERT_LE(atomic_load(&r.max_active), 3);
    ASSERT_LT(atomic_load(&r.calls), N);
    /* Every index below the failure ran and has its result. */
    for (size_t i = 0; i < 700; i++)
        ASSERT_EQ((uint64_t)(uintptr_t)results[i], (uint64_t)i * i + 1);
    ASSERT_NULL(results[700]);
}

TEST(first_error_by_input_index_is_returned)
{
    struct run r;
    sema_map_limit_opts_t o;

    run_init(&r, 1000);
    r.fail_at = 100;
    r.fail_code = -4242;
    o = opts_for(&r, 4);
    ASSERT_EQ(sema_map_limit(&o), -4242);
    /* Everything before the error is emitted, in order; nothing after it. */
    ASSERT_EQ(r.emit_calls, 100);
    ASSERT_LT(atomic_load(&r.calls), 1000);
}

/* Lowest index wins even if a later index fails first in time. */
struct two_ctx {
    pthread_barrier_t both_running;
    sema_map_limit_t *map;
};

static int two_failures_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct two_ctx *c = ctx;
    sema_map_limit_stats_t st;

    (void)item;
    (void)result;
    pthread_barrier_wait(&c->both_running);
    if (index == 1)
        return -11;
    /* Index 0: fail only once index 1's error has stopped the map. */
    for (int i = 0; i < 20000; i++) {
        sema_map_limit_stats(c->map, &st);
        if (st.stopped)
            break;
        tiny_pause();
    }
    ASSERT_EQ(st.stopped, 1);
    return -10;
}

TEST(first_error_is_lowest_index_not_first_in_time)
{
    struct two_ctx c;
    sema_map_limit_opts_t o = {0};

    pthread_barrier_init(&c.both_running, NULL, 2);
    o.limit = 2;
    o.next = endless_next;
    o.fn = two_failures_fn;
    o.ctx = &c;
    ASSERT_OK(sema_map_limit_new(&c.map, &o));
    ASSERT_EQ(sema_map_limit_run(c.map), -10);
    sema_map_limit_free(c.map);
    pthread_barrier_destroy(&c.both_running);
}

TEST(pitfall15_nothing_launches_after_an_error)
{
    struct run r;
    sema_map_limit_opts_t o;

    run_init(&r, 100000);
    r.fail_at = 50;
    r.fail_code = SEMA_EIO;
    o = opts_for(&r, 1);
    ASSERT_EQ(sema_map_limit(&o), SEMA_EIO);
    ASSERT_EQ(atomic_load(&r.after_fail), 0);
    ASSERT_EQ(atomic_load(&r.calls), 51);
    ASSERT_EQ(r.emit_calls, 50);
}

TEST(pitfall15_callbacks_fire_exactly_once)
{
    struct run r;
    sema_map_limit_opts_t o;
    uint64_t n = (uint64_t)test_scale(20000);

    run_init(&r, n);
    r.fail_at = n / 2;
    r.fail_code = -1;
    r.seen = calloc(n, 1);
    o = opts_for(&r, 4);
    o.window = 16;
    ASSERT_EQ(sema_map_limit(&o), -1);
    /* Each finished, successful item went to emit or discard exactly once. */
    for (uint64_t i = 0; i < n; i++)
        ASSERT_LE(r.seen[i], 1);
    for (uint64_t i = 0; i < n / 2; i++)
        ASSERT_EQ(r.seen[i], 1);
    ASSERT_EQ(r.emit_calls, (long)(n / 2));
    ASSERT_EQ(r.emit_calls + r.discards + 1, atomic_load(&r.calls));
    free(r.seen);
}

static int sync_fn(void *ctx, uint64_t index, void *item, void **result)
{
    (void)ctx;
    (void)index;
    *result = item;
    return 0;
}

static int sync_emit(void *ctx, uint64_t index, void *result)
{
    uint64_t *sum = ctx;

    (void)index;
    *sum += (uint64_t)(uintptr_t)result;
    return 0;
}

static int range_next(void *ctx, void **item)
{
    uint64_t *st = ctx;

    if (st[1] == st[2])
        return 0;
    *item = (void *)(uintptr_t)st[1]++;
    return 1;
}

/* Synchronous callbacks, a million of them through a single slot: a
 * completion path that recursed would overflow the stack. */
TEST(pitfall15_no_recursion_with_synchronous_callbacks)
{
    uint64_t st[3] = {0, 0, (uint64_t)test_scale(1000000)};
    sema_map_limit_opts_t o = {0};

    o.limit = 1;
    o.next = range_next;
    o.fn = sync_fn;
    o.emit = sync_emit;
    o.window = 1;
    o.ctx = st;
    ASSERT_OK(sema_map_limit(&o));
    ASSERT_EQ(st[0], st[2] * (st[2] - 1) / 2);
}

/* Queue operations are O(1): two million items through a small window would
 * take minutes (and hit the test timeout) with an O(n) shift per item. */
TEST(pitfall14_queue_operations_are_constant_time)
{
    uint64_t st[3] = {0, 0, (uint64_t)test_scale(2000000)};
    sema_map_limit_opts_t o = {0};

    o.limit = 2;
    o.next = range_next;
    o.fn = sync_fn;
    o.emit = sync_emit;
    o.window = 64;
    o.ctx = st;
    ASSERT_OK(sema_map_limit(&o));
    ASSERT_EQ(st[0], st[2] * (st[2] - 1) / 2);
}

/* Cancel from another thread while items block; run returns ECANCELED. */
struct cancel_ctx {
    pthread_barrier_t started;
    sema_map_limit_t *map;
    atomic_int release;
    atomic_long calls;
};

static int blocking_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct cancel_ctx *c = ctx;

    (void)item;
    (void)result;
    atomic_fetch_add(&c->calls, 1);
    if (index == 0)
        pthread_barrier_wait(&c->started);
    while (!atomic_load(&c->release))
        tiny_pause();
    return 0;
}

static void *cancel_thread(void *arg)
{
    struct cancel_ctx *c = arg;
    sema_map_limit_stats_t st;

    pthread_barrier_wait(&c->started);
    sema_map_limit_stats(c->map, &st);
    ASSERT_GE(st.active, 1);
    ASSERT_EQ(st.pending, SEMA_MAP_LIMIT_UNKNOWN);
    sema_map_limit_cancel(c->map);
    sema_map_limit_stats(c->map, &st);
    ASSERT_EQ(st.stopped, 1);
    atomic_store(&c->release, 1);
    return NULL;
}

TEST(cancel_from_another_thread)
{
    struct cancel_ctx c = {0};
    sema_map_limit_opts_t o = {0};
    pthread_t t;
    sema_map_limit_stats_t st;

    pthread_barrier_init(&c.started, NULL, 2);
    o.limit = 3;
    o.next = endless_next;
    o.fn = blocking_fn;
    o.ctx = &c;
    ASSERT_OK(sema_map_limit_new(&c.map, &o));
    pthread_create(&t, NULL, cancel_thread, &c);
    ASSERT_EQ(sema_map_limit_run(c.map), SEMA_ECANCELED);
    pthread_join(t, NULL);
    sema_map_limit_stats(c.map, &st);
    ASSERT_EQ(st.active, 0);
    ASSERT_EQ(st.started, st.completed);
    ASSERT_LE(st.started, 3);
    ASSERT_EQ(atomic_load(&c.calls), (long)st.started);
    ASSERT_EQ(sema_map_limit_run(c.map), SEMA_EINVAL); /* one run per map */
    sema_map_limit_free(c.map);
    pthread_barrier_destroy(&c.started);
}

TEST(cancel_before_run_calls_nothing)
{
    struct run r;
    sema_map_limit_opts_t o;
    sema_map_limit_t *m;

    run_init(&r, 10);
    o = opts_for(&r, 2);
    ASSERT_OK(sema_map_limit_new(&m, &o));
    sema_map_limit_cancel(m);
    sema_map_limit_cancel(m);
    ASSERT_EQ(sema_map_limit_run(m), SEMA_ECANCELED);
    ASSERT_EQ(atomic_load(&r.calls), 0);
    ASSERT_EQ(r.pos, 0);
    sema_map_limit_free(m);
}

/* Stats read from inside fn: active counts this call, pending = total - started. */
struct stats_ctx {
    sema_map_limit_t *map;
    uint64_t n, pos;
    int bad;
};

static int stats_next(void *ctx, void **item)
{
    struct stats_ctx *s = ctx;

    if (s->pos == s->n)
        return 0;
    *item = NULL;
    s->pos++;
    return 1;
}

static int stats_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct stats_ctx *s = ctx;
    sema_map_limit_stats_t st;

    (void)item;
    (void)result;
    sema_map_limit_stats(s->map, &st);
    if (st.active < 1 || st.active > 1 || st.started != index + 1 || st.pending != s->n - index - 1)
        s->bad = 1;
    return 0;
}

TEST(stats_from_inside_fn)
{
    struct stats_ctx s = {0};
    sema_map_limit_opts_t o = {0};
    sema_map_limit_stats_t st;

    s.n = 50;
    o.limit = 1;
    o.next = stats_next;
    o.fn = stats_fn;
    o.ctx = &s;
    o.total = s.n;
    ASSERT_OK(sema_map_limit_new(&s.map, &o));
    ASSERT_OK(sema_map_limit_run(s.map));
    ASSERT_EQ(s.bad, 0);
    sema_map_limit_stats(s.map, &st);
    ASSERT_EQ(st.completed, 50);
    ASSERT_EQ(st.pending, 0);
    ASSERT_EQ(st.active, 0);
    ASSERT_EQ(st.threads, 1);
    sema_map_limit_free(s.map);
}

/* ctx: {items handed out, calls}; fails on the call after the fifth item. */
static int failing_next(void *ctx, void **item)
{
    uint64_t *pos = ctx;

    pos[1]++;
    if (pos[0] == 5)
        return SEMA_EIO;
    *item = NULL;
    pos[0]++;
    return 1;
}

static int noop_fn(void *ctx, uint64_t index, void *item, void **result)
{
    (void)ctx;
    (void)index;
    (void)item;
    (void)result;
    return 0;
}

/* The producer's error stops the map, and the producer is never called again
 * (its position alone could not show that: it stays at 5 either way). */
TEST(producer_error_stops_the_map)
{
    uint64_t pos[2] = {0, 0};
    sema_map_limit_opts_t o = {0};

    o.limit = 2;
    o.next = failing_next;
    o.fn = noop_fn;
    o.ctx = pos;
    ASSERT_EQ(sema_map_limit(&o), SEMA_EIO);
    ASSERT_EQ(pos[0], 5);
    ASSERT_EQ(pos[1], 6);
}

static int fail_emit(void *ctx, uint64_t index, void *result)
{
    (void)ctx;
    (void)result;
    return index == 3 ? SEMA_EOVERFLOW : 0;
}

TEST(emit_error_stops_the_map)
{
    uint64_t st[3] = {0, 0, 100000};
    sema_map_limit_opts_t o = {0};

    o.limit = 2;
    o.next = range_next;
    o.fn = sync_fn;
    o.emit = fail_emit;
    o.ctx = st;
    ASSERT_EQ(sema_map_limit(&o), SEMA_EOVERFLOW);
    ASSERT_LT(st[1], st[2]);
}

TEST(empty_input)
{
    struct run r;
    sema_map_limit_opts_t o;

    run_init(&r, 0);
    o = opts_for(&r, 8);
    ASSERT_OK(sema_map_limit(&o));
    ASSERT_EQ(atomic_load(&r.calls), 0);
}

TEST(bad_input)
{
    sema_map_limit_opts_t o = {0};
    sema_map_limit_t *m = (sema_map_limit_t *)&o;
    void *one[1] = {NULL};

    ASSERT_EQ(sema_map_limit_new(NULL, &o), SEMA_EINVAL);
    ASSERT_EQ(sema_map_limit_new(&m, NULL), SEMA_EINVAL);
    ASSERT_NULL(m);
    o.next = endless_next;
    o.fn = noop_fn;
    ASSERT_EQ(sema_map_limit_new(&m, &o), SEMA_EINVAL); /* limit 0 */
    o.limit = SEMA_MAP_LIMIT_MAX + 1;
    ASSERT_EQ(sema_map_limit_new(&m, &o), SEMA_EINVAL);
    o.limit = 2;
    o.window = SEMA_MAP_LIMIT_MAX_WINDOW + 1;
    ASSERT_EQ(sema_map_limit_new(&m, &o), SEMA_EINVAL);
    o.window = 0;
    o.fn = NULL;
    ASSERT_EQ(sema_map_limit(&o), SEMA_EINVAL);
    ASSERT_EQ(sema_map_limit_run(NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_map_limit_array(one, 1, noop_fn, NULL, NULL, 1), SEMA_EINVAL);
    ASSERT_EQ(sema_map_limit_array(one, 1, NULL, NULL, one, 1), SEMA_EINVAL);
    ASSERT_EQ(sema_map_limit_array(one, 1, noop_fn, NULL, one, 0), SEMA_EINVAL);
    sema_map_limit_cancel(NULL);
    sema_map_limit_stats(NULL, NULL);
    sema_map_limit_free(NULL);
}

/* Many maps at once from several threads, with errors and cancels mixed in. */
static void *stress_thread(void *arg)
{
    long seed = (long)(intptr_t)arg;

    for (int round = 0; round < test_scale(40); round++) {
        struct run r;
        sema_map_limit_opts_t o;
        int rc;

        run_init(&r, (uint64_t)(50 + (seed * 31 + round * 17) % 400));
        if (round % 3 == 1)
            r.fail_at = (uint64_t)(round * 7) % r.n, r.fail_code = -1000 - round;
        o = opts_for(&r, (size_t)(1 + (seed + round) % 6));
        o.window = (size_t)(round % 4 == 0 ? 1 : 0);
        rc = sema_map_limit(&o);
        if (r.fail_at != UINT64_MAX) {
            ASSERT_EQ(rc, r.fail_code);
            ASSERT_EQ(r.emit_calls, (long)r.fail_at);
        } else {
            ASSERT_OK(rc);
            ASSERT_EQ(r.emit_calls, (long)r.n);
        }
        ASSERT_LE(atomic_load(&r.max_active), (long)o.limit);
    }
    return NULL;
}

TEST(stress_many_maps_in_parallel)
{
    pthread_t t[4];

    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, stress_thread, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
}

/* Cancel from inside emit: the rest of the results are discarded, each
 * exactly once, and nothing is emitted after the cancel. */
struct emit_cancel {
    struct run r;
    sema_map_limit_t *map;
    long after_cancel;
    int cancelled;
};

static int cancelling_emit(void *ctx, uint64_t index, void *result)
{
    struct emit_cancel *e = ctx;

    if (e->cancelled)
        e->after_cancel++;
    ordered_emit(&e->r, index, result);
    if (index == 10) {
        sema_map_limit_cancel(e->map);
        e->cancelled = 1;
    }
    return 0;
}

static int emit_cancel_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct emit_cancel *e = ctx;

    return square_fn(&e->r, index, item, result);
}

static void emit_cancel_discard(void *ctx, uint64_t index, void *result)
{
    struct emit_cancel *e = ctx;

    count_discard(&e->r, index, result);
}

static int emit_cancel_next(void *ctx, void **item)
{
    struct emit_cancel *e = ctx;

    return count_next(&e->r, item);
}

TEST(cancel_inside_emit_discards_the_rest_once)
{
    struct emit_cancel e;
    sema_map_limit_opts_t o = {0};

    memset(&e, 0, sizeof(e));
    run_init(&e.r, 5000);
    e.r.seen = calloc(e.r.n, 1);
    o.limit = 3;
    o.next = emit_cancel_next;
    o.fn = emit_cancel_fn;
    o.emit = cancelling_emit;
    o.discard = emit_cancel_discard;
    o.ctx = &e;
    ASSERT_OK(sema_map_limit_new(&e.map, &o));
    ASSERT_EQ(sema_map_limit_run(e.map), SEMA_ECANCELED);
    ASSERT_EQ(e.after_cancel, 0);
    ASSERT_EQ(e.r.emit_calls, 11);
    ASSERT_EQ(e.r.emit_calls + e.r.discards, atomic_load(&e.r.calls));
    for (uint64_t i = 0; i < e.r.n; i++)
        ASSERT_LE(e.r.seen[i], 1);
    sema_map_limit_free(e.map);
    free(e.r.seen);
}

/* pitfall 16: threads parked waiting for window space are settled by a
 * cancel; run returns instead of hanging. */
struct park {
    sema_map_limit_t *map;
    atomic_int release;
};

static int park_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct park *p = ctx;

    (void)item;
    (void)result;
    if (index == 0) {
        sema_map_limit_stats_t st;

        /* Wait (bounded) until the others started and now wait for room. */
        for (int i = 0; i < 20000; i++) {
            sema_map_limit_stats(p->map, &st);
            if (st.started == 2 && st.completed == 1)
                break;
            tiny_pause();
        }
        ASSERT_EQ(st.started, 2);
        sema_map_limit_cancel(p->map);
    }
    return 0;
}

static int park_emit(void *ctx, uint64_t index, void *result)
{
    (void)ctx;
    (void)index;
    (void)result;
    return 0;
}

TEST(pitfall16_cancel_settles_threads_waiting_for_window)
{
    struct park p = {0};
    sema_map_limit_opts_t o = {0};

    o.limit = 3;
    o.next = endless_next;
    o.fn = park_fn;
    o.emit = park_emit;
    o.window = 2; /* item 0 blocks the window: items 2.. cannot start */
    o.ctx = &p;
    ASSERT_OK(sema_map_limit_new(&p.map, &o));
    ASSERT_EQ(sema_map_limit_run(p.map), SEMA_ECANCELED);
    sema_map_limit_free(p.map);
}

/* next() runs under the map's lock: a cancel from inside it must not
 * deadlock, and the item it just produced never starts. */
struct next_cancel {
    sema_map_limit_t *map;
    uint64_t pos;
    atomic_long calls;
};

static int next_that_cancels(void *ctx, void **item)
{
    struct next_cancel *c = ctx;
    sema_map_limit_stats_t st;

    sema_map_limit_stats(c->map, &st); /* also allowed from inside next() */
    if (c->pos == 5)
        sema_map_limit_cancel(c->map);
    *item = NULL;
    c->pos++;
    return 1;
}

static int count_calls_fn(void *ctx, uint64_t index, void *item, void **result)
{
    struct next_cancel *c = ctx;

    (void)index;
    (void)item;
    (void)result;
    atomic_fetch_add(&c->calls, 1);
    return 0;
}

TEST(cancel_from_inside_next)
{
    struct next_cancel c = {0};
    sema_map_limit_opts_t o = {0};

    o.limit = 2;
    o.next = next_that_cancels;
    o.fn = count_calls_fn;
    o.ctx = &c;
    ASSERT_OK(sema_map_limit_new(&c.map, &o));
    ASSERT_EQ(sema_map_limit_run(c.map), SEMA_ECANCELED);
    ASSERT_EQ(c.pos, 6);
    ASSERT_EQ(atomic_load(&c.calls), 5);
    sema_map_limit_free(c.map);
}
