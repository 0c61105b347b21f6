/* SPDX-License-Identifier: MIT */
/* test_embedded_alloc.c - allocation failures inside semad's engine on the embedded back end,
 * through the allocator hook: fail the 1st allocation of an operation, then the 2nd, ...
 * until it succeeds; each time a clean error, no lost or doubled unit, and (under ASan) no
 * leak. */
#include "sema/alloc.h"
#include "test_engine_util.h"

static long fail_countdown = -1; /* < 0: never fail; 0: the next allocation fails */
static long failures;

static int should_fail(void)
{
    if (fail_countdown < 0)
        return 0;
    if (fail_countdown-- == 0) {
        failures++;
        return 1;
    }
    return 0;
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

static void install_hook(void)
{
    static int done;

    if (!done)
        ASSERT_OK(sema_set_allocator(t_malloc, t_realloc, t_calloc, free));
    done = 1;
}

/* available + held == capacity, and the engine's lease count agrees. */
static void check_units(fx_t *f, const char *name, int64_t capacity, uint64_t leases)
{
    engine_stats_t st;

    fail_countdown = -1;
    ASSERT_EQ(fx_state(f, name, "available") + fx_state(f, name, "held"), capacity);
    engine_stats(f->e, &st);
    ASSERT_EQ(st.leases, leases);
}

TEST(alloc_failure_in_immediate_acquire)
{
    int ok = 0;

    if (fx_on_redis())
        TEST_SKIP("allocation failures are injected where the embedded back end allocates; "
                  "the Redis back end's requests complete on a later loop turn");
    install_hook();
    for (long k = 0; k < 50 && !ok; k++) {
        fx_t f;
        treq_t *a = treq_new(ENGINE_ACQUIRE, "s");
        int rc;

        fx_init(&f);
        fx_put(&f, "s", 2);
        a->r.weight = 2;
        a->r.idem_key = "key";
        a->r.owner = "me";
        fail_countdown = k;
        rc = engine_submit(f.e, &a->r);
        fail_countdown = -1;
        if (rc == 0) {
            ASSERT_EQ(a->done, 1);
            ASSERT(a->status == 0 || a->status == SEMA_ENOMEM);
            ok = a->status == 0;
            check_units(&f, "s", 2, ok ? 1 : 0);
        } else {
            ASSERT_EQ(rc, SEMA_ENOMEM);
            ASSERT_EQ(a->done, 0);
            check_units(&f, "s", 2, 0);
        }
        fx_free(&f);
        treq_free(a);
    }
    ASSERT(ok);
}

TEST(alloc_failure_in_hand_off_to_parked_waiter)
{
    int ok = 0;

    if (fx_on_redis())
        TEST_SKIP("allocation failures are injected where the embedded back end allocates; "
                  "the Redis back end's requests complete on a later loop turn");
    install_hook();
    for (long k = 0; k < 50 && !ok; k++) {
        fx_t f;
        treq_t *a, *w, *rel;

        fx_init(&f);
        fx_put(&f, "s", 1);
        a = fx_acquire(&f, "s", 1, -1);
        w = fx_acquire(&f, "s", 1, 60000);
        ASSERT_EQ(w->done, 0);
        rel = treq_new(ENGINE_LEASE_RELEASE, lease_id(a));
        fail_countdown = k; /* the release allocates its request, a tombstone, the grant */
        int rc = engine_submit(f.e, &rel->r);
        fail_countdown = -1;
        if (rc != 0) {
            ASSERT_EQ(rc, SEMA_ENOMEM); /* nothing happened: the holder still holds */
            ASSERT_EQ(w->done, 0);
            check_units(&f, "s", 1, 1);
            fx_free(&f);
            treq_free(a);
            treq_free(w);
            treq_free(rel);
            continue;
        }
        ASSERT_EQ(rel->status, 0);
        ASSERT_EQ(w->done, 1);
        ASSERT(w->status == 0 || w->status == SEMA_ENOMEM);
        ok = w->status == 0;
        check_units(&f, "s", 1, ok ? 1 : 0);
        fx_free(&f);
        treq_free(a);
        treq_free(w);
        treq_free(rel);
    }
    ASSERT(ok);
}

TEST(alloc_failure_in_create_and_park)
{
    int created = 0, parked = 0;

    if (fx_on_redis())
        TEST_SKIP("allocation failures are injected where the embedded back end allocates; "
                  "the Redis back end's requests complete on a later loop turn");
    install_hook();
    for (long k = 0; k < 50 && !(created && parked); k++) {
        fx_t f;
        treq_t *c = treq_new(ENGINE_SEM_PUT, "s"), *w;
        engine_stats_t st;
        int rc;

        fx_init(&f);
        c->r.capacity = 1;
        fail_countdown = k;
        rc = engine_submit(f.e, &c->r);
        fail_countdown = -1;
        ASSERT(rc == 0 || rc == SEMA_ENOMEM);
        if (rc == 0 && c->status == 0) {
            created = 1;
            treq_t *a = fx_acquire(&f, "s", 1, -1);
            w = treq_new(ENGINE_ACQUIRE, "s");
            w->r.weight = 1;
            w->r.timeout_ms = 60000;
            fail_countdown = k;
            rc = engine_submit(f.e, &w->r);
            fail_countdown = -1;
            engine_stats(f.e, &st);
            if (rc == 0 && !w->done) {
                parked = 1;
                ASSERT_EQ(st.parked, 1);
            } else {
                ASSERT_EQ(st.parked, 0);
                ASSERT(rc == SEMA_ENOMEM || w->status == SEMA_ENOMEM);
            }
            check_units(&f, "s", 1, 1);
            fx_free(&f);
            treq_free(a);
            treq_free(w);
        } else {
            ASSERT(rc == SEMA_ENOMEM || c->status == SEMA_ENOMEM);
            ASSERT_EQ(fx_op(&f, ENGINE_SEM_GET, "s", 0), SEMA_ENOENT);
            fx_free(&f);
        }
        treq_free(c);
    }
    ASSERT(created && parked);
    ASSERT_GT(failures, 0);
}
