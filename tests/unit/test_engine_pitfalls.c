/* SPDX-License-Identifier: MIT */
/* test_engine_pitfalls.c - regression tests for the items of pitfalls.md that apply to
 * semad's engine, named after them, plus idempotency keys and the cancel/grant races. */
#include "test_engine_util.h"

TEST(pitfall1_head_waiter_cancel_wakes_followers)
{
    fx_t f;
    treq_t *a, *head, *f1;

    fx_init(&f);
    fx_put(&f, "s", 4);
    a = fx_acquire(&f, "s", 3, -1);
    head = fx_acquire(&f, "s", 3, -1);
    f1 = fx_acquire(&f, "s", 1, -1);
    ASSERT_EQ(f1->done, 0);
    engine_cancel(f.e, &head->r);
    ASSERT_EQ(head->done, 0); /* a cancelled request never gets its callback */
    fx_settle(&f);
    ASSERT_EQ(head->done, 0);
    ASSERT_EQ(f1->done, 1);
    ASSERT_EQ(f1->status, 0);
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 0);
    treq_free(a);
    treq_free(head);
    treq_free(f1);
    fx_free(&f);
}

static void cancel_count(fx_t *f, treq_t **w, int n)
{
    for (int i = 0; i < n; i++)
        engine_cancel(f->e, &w[i]->r);
}

/* A grant awaiting delivery (here: queued behind a callback) and a cancel: the units go
 * back exactly once. */
TEST(pitfall2_cancel_racing_grant_returns_units_once)
{
    fx_t f;
    treq_t *a, *w[3];
    engine_stats_t st;

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 2, -1);
    for (int i = 0; i < 3; i++)
        w[i] = fx_acquire(&f, "s", 1, -1);
    /* The release grants w0 and w1; cancel them both before the loop turns again
     * (without a store they were already delivered: cancel is then a no-op). */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(w[0]->done + w[1]->done, 2);
    cancel_count(&f, w, 2);
    ASSERT_EQ(fx_state(&f, "s", "held"), 2); /* delivered grants stay with their callers */
    engine_cancel(f.e, &w[2]->r);
    engine_stats(f.e, &st);
    ASSERT_EQ(st.parked, 0);
    ASSERT_EQ(st.leases, 2);
    ASSERT_EQ(fx_state(&f, "s", "available"), 0);
    for (int i = 0; i < 3; i++)
        treq_free(w[i]);
    treq_free(a);
    fx_free(&f);
}

/* The grant is pending while another completion's callback runs; that callback cancels
 * it (the client of the second went away as the first was answered). */
static treq_t *victim;
static fx_t *victim_fx;
static void cancel_victim(engine_req_t *r)
{
    (void)r;
    engine_cancel(victim_fx->e, &victim->r);
}

TEST(pitfall2_cancel_of_undelivered_grant_releases_it)
{
    fx_t f;
    treq_t *a, *w1, *w2, *w3;

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 2, -1);
    w1 = fx_acquire(&f, "s", 1, -1);
    w2 = fx_acquire(&f, "s", 1, -1);
    w3 = fx_acquire(&f, "s", 1, -1);
    victim = w2;
    victim_fx = &f;
    w1->then = cancel_victim; /* w1's callback runs first; w2's grant is still queued */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(w1->done, 1);
    ASSERT_EQ(w2->done, 0);
    fx_settle(&f);
    ASSERT_EQ(w2->done, 0);
    ASSERT_EQ(w3->done, 1); /* w2's unit went on to w3, exactly once */
    ASSERT_EQ(w3->status, 0);
    ASSERT_EQ(fx_state(&f, "s", "held"), 2);
    ASSERT_EQ(fx_state(&f, "s", "available"), 0);
    treq_free(a);
    treq_free(w1);
    treq_free(w2);
    treq_free(w3);
    fx_free(&f);
}

TEST(pitfall4_cancel_right_after_park_leaves_no_stale_waiter)
{
    fx_t f;
    treq_t *a, *w, *x;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    w = treq_new(ENGINE_ACQUIRE, "s");
    w->r.weight = 1;
    ASSERT_OK(engine_submit(f.e, &w->r));
    engine_cancel(f.e, &w->r); /* before any loop turn */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(fx_state(&f, "s", "available"), 1); /* nothing swallowed the unit */
    x = fx_acquire(&f, "s", 1, 0);
    ASSERT_EQ(x->status, 0);
    ASSERT_EQ(w->done, 0);
    treq_free(a);
    treq_free(w);
    treq_free(x);
    fx_free(&f);
}

TEST(pitfall5_timeout_dequeues_and_wakes_followers)
{
    fx_t f;
    treq_t *a, *t, *fl;

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 1, -1);
    t = fx_acquire(&f, "s", 2, 50);
    fl = fx_acquire(&f, "s", 1, -1);
    ASSERT_EQ(fl->done, 0);
    ASSERT(fx_run_until(&f, &t->done, 2000));
    ASSERT_EQ(t->status, SEMA_ETIMEDOUT);
    fx_settle(&f); /* embedded: same tick as the timeout; Redis: the cancel's answer */
    ASSERT_EQ(fl->done, 1);
    ASSERT_EQ(fl->status, 0);
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 0);
    treq_free(a);
    treq_free(t);
    treq_free(fl);
    fx_free(&f);
}

TEST(pitfall10_weight_above_capacity_rejected_at_once)
{
    fx_t f;
    treq_t *big, *zero;

    fx_init(&f);
    fx_put(&f, "s", 3);
    big = fx_acquire(&f, "s", 4, -1);
    zero = fx_acquire(&f, "s", 0, -1);
    ASSERT_EQ(big->status, SEMA_EINVAL);
    ASSERT_EQ(zero->status, SEMA_EINVAL);
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 0);
    treq_free(big);
    treq_free(zero);
    fx_free(&f);
}

TEST(pitfall11_over_release_does_not_inflate)
{
    fx_t f;
    treq_t *a;
    char id[64];

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 2, -1);
    snprintf(id, sizeof(id), "%s", lease_id(a));
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id));
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id), SEMA_ESTALE);
    ASSERT_EQ(fx_state(&f, "s", "available"), 2);
    treq_free(a);
    fx_free(&f);
}

TEST(pitfall12_counters_are_64_bit)
{
    fx_t f;
    treq_t *a, *b;
    const uint64_t cap = (uint64_t)1 << 53;

    fx_init(&f);
    fx_put(&f, "big", cap);
    a = fx_acquire(&f, "big", cap - 1, -1);
    ASSERT_EQ(a->status, 0);
    ASSERT_EQ(jint(a->res, "weight"), (int64_t)(cap - 1));
    b = fx_acquire(&f, "big", (uint64_t)1 << 33, 0);
    ASSERT_EQ(b->status, SEMA_EBUSY);
    ASSERT_EQ(fx_state(&f, "big", "available"), 1);
    ASSERT_EQ(fx_state(&f, "big", "held"), (int64_t)(cap - 1));
    treq_free(a);
    treq_free(b);
    fx_free(&f);
}

TEST(pitfall21_crashed_client_permits_come_back_by_lease)
{
    fx_t f;
    treq_t *a, *w;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = 20; /* the holder then "crashes": it never releases */
    ASSERT_OK(fx_do(&f, a));
    w = fx_acquire(&f, "s", 1, 5000);
    ASSERT(fx_run_until(&f, &w->done, 3000));
    ASSERT_EQ(w->status, 0);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

TEST(pitfall23_parked_waiter_handed_off_without_polling)
{
    fx_t f;
    treq_t *a, *w;

    if (fx_on_redis())
        TEST_SKIP("a release on Redis is a round trip; test_redis covers the hand-off by "
                  "message");
    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    w = fx_acquire(&f, "s", 1, -1);
    ASSERT_EQ(w->done, 0);
    treq_t *rel = treq_new(ENGINE_LEASE_RELEASE, lease_id(a));
    ASSERT_OK(engine_submit(f.e, &rel->r));
    /* granted within the release's own processing, before any loop turn or timer */
    ASSERT_EQ(rel->done, 1);
    ASSERT_EQ(w->done, 1);
    ASSERT_EQ(w->status, 0);
    treq_free(rel);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

TEST(pitfall24_server_clock_decides_expiry)
{
    fx_t f;
    treq_t *a;
    struct timespec ts;
    int64_t now;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = 1000;
    ASSERT_OK(fx_do(&f, a));
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* the request carries no time at all: acquired_at is the server's */
    ASSERT_LE(jint(a->res, "acquired_at"), now);
    ASSERT_GT(jint(a->res, "acquired_at"), now - 5000);
    ASSERT_EQ(jint(a->res, "expires_at"), jint(a->res, "acquired_at") + 1000);
    treq_free(a);
    fx_free(&f);
}

TEST(pitfall26_renewing_a_lost_lease_fails_loudly)
{
    fx_t f;
    treq_t *a, *t;
    char id[64];

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = 10;
    ASSERT_OK(fx_do(&f, a));
    snprintf(id, sizeof(id), "%s", lease_id(a));
    t = fx_acquire(&f, "s", 1, 5000); /* parks until the expiry */
    ASSERT(fx_run_until(&f, &t->done, 3000));
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RENEW, id), SEMA_EEXPIRED);
    ASSERT_EQ(fx_state(&f, "s", "held"), 1); /* the renew did not silently re-acquire */
    treq_free(a);
    treq_free(t);
    fx_free(&f);
}

TEST(pitfall27_deadlines_are_absolute_and_dead_waiters_do_not_stall)
{
    fx_t f;
    treq_t *a, *w[5], *last;
    uint64_t t0;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    t0 = uv_now(&f.loop);
    for (int i = 0; i < 5; i++)
        w[i] = fx_acquire(&f, "s", 1, 60);
    last = fx_acquire(&f, "s", 1, -1);
    /* activity on the semaphore does not push the deadlines back */
    for (int i = 0; i < 3; i++)
        ASSERT_OK(fx_op(&f, ENGINE_SEM_GET, "s", 0));
    ASSERT(fx_run_until(&f, &w[4]->done, 3000));
    ASSERT_LT(uv_now(&f.loop) - t0, 1000);
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(w[i]->status, SEMA_ETIMEDOUT);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(last->done, 1); /* the timed-out waiters left no trace in the queue */
    for (int i = 0; i < 5; i++)
        treq_free(w[i]);
    treq_free(a);
    treq_free(last);
    fx_free(&f);
}

TEST(pitfall28_lock_keys_do_not_outlive_their_queue)
{
    fx_t f;
    treq_t *x, *w;
    engine_stats_t st;

    fx_init(&f);
    x = treq_new(ENGINE_LOCK_ACQUIRE, "key");
    x->r.mode = ENGINE_MODE_EXCLUSIVE;
    x->r.ttl_ms = 300; /* far beyond the waiter's timeout, even on a loaded machine */
    ASSERT_OK(fx_do(&f, x));
    w = treq_new(ENGINE_LOCK_ACQUIRE, "key");
    w->r.mode = ENGINE_MODE_SHARED;
    w->r.timeout_ms = 5;
    ASSERT_OK(engine_submit(f.e, &w->r));
    ASSERT(fx_run_until(&f, &w->done, 2000));
    ASSERT_EQ(w->status, SEMA_ETIMEDOUT);
    engine_stats(f.e, &st);
    ASSERT_EQ(st.locks, 1); /* still held */
    /* bounded: 5 s */
    for (int i = 0; i < 500 && st.locks != 0; i++) {
        int never = 0;
        fx_run_until(&f, &never, 10);
        engine_stats(f.e, &st);
    }
    ASSERT_EQ(st.locks, 0); /* the expiry freed the key */
    ASSERT_EQ(fx_op(&f, ENGINE_LOCK_GET, "key", 0), SEMA_ENOENT);
    treq_free(x);
    treq_free(w);
    fx_free(&f);
}

TEST(pitfall29_timeout_zero_is_a_try)
{
    fx_t f;
    treq_t *a, *b, *c;

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 1, 0);
    b = fx_acquire(&f, "s", 1, 0);
    c = fx_acquire(&f, "s", 1, 0);
    ASSERT_EQ(a->status, 0);
    ASSERT_EQ(b->status, 0);
    ASSERT_EQ(c->done, 1);
    ASSERT_EQ(c->status, SEMA_EBUSY); /* never parks */
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 0);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    fx_free(&f);
}

static treq_t *idem_acquire(fx_t *f, const char *key, uint64_t weight, int64_t timeout_ms)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE, "s");

    snprintf(t->idem, sizeof(t->idem), "%s", key);
    t->r.idem_key = t->idem;
    t->r.weight = weight;
    t->r.timeout_ms = timeout_ms;
    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_settle(f);
    return t;
}

TEST(pitfall30_retried_acquire_same_idempotency_key)
{
    fx_t f;
    treq_t *a, *b, *c;

    fx_init(&f);
    fx_put(&f, "s", 5);
    a = idem_acquire(&f, "k1", 2, -1);
    b = idem_acquire(&f, "k1", 2, -1);
    ASSERT_STREQ(lease_id(a), lease_id(b));
    ASSERT_EQ(fx_state(&f, "s", "held"), 2); /* one grant */
    c = idem_acquire(&f, "k2", 2, -1);
    ASSERT(strcmp(lease_id(a), lease_id(c)) != 0);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    treq_free(b);
    b = idem_acquire(&f, "k1", 2, -1); /* the lease ended: the key starts a new grant */
    ASSERT(strcmp(lease_id(a), lease_id(b)) != 0);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    fx_free(&f);
}

TEST(pitfall30_retry_while_parked_takes_its_place)
{
    fx_t f;
    treq_t *a, *first, *other, *retry;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    first = idem_acquire(&f, "k", 1, -1);
    other = fx_acquire(&f, "s", 1, -1);
    retry = idem_acquire(&f, "k", 1, -1);
    ASSERT_EQ(first->done, 1);
    ASSERT_EQ(first->status, SEMA_EREPLACED);   /* not "deleted": the semaphore is there */
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 2); /* not queued twice */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(retry->done, 1); /* it kept the first attempt's place, ahead of `other` */
    ASSERT_EQ(retry->status, 0);
    ASSERT_EQ(other->done, 0);
    fx_free(&f); /* first: a parked request must outlive the engine's use of it */
    treq_free(a);
    treq_free(first);
    treq_free(other);
    treq_free(retry);
}

/* A key names one request: reused with another weight it fails, parked or granted, and
 * neither grants again nor hands out the first request's lease. */
TEST(pitfall30_key_reused_with_another_weight_fails)
{
    fx_t f;
    treq_t *a, *b, *first, *other, *retry;

    fx_init(&f);
    fx_put(&f, "s", 5);
    a = idem_acquire(&f, "k1", 2, -1);
    b = idem_acquire(&f, "k1", 3, -1);
    ASSERT_EQ(a->status, 0);
    ASSERT_EQ(b->done, 1);
    ASSERT_EQ(b->status, SEMA_EKEYMISMATCH);
    ASSERT_EQ(fx_state(&f, "s", "held"), 2); /* one grant, still a's */
    first = idem_acquire(&f, "k2", 4, -1);   /* parks: 3 available */
    ASSERT_EQ(first->done, 0);
    retry = idem_acquire(&f, "k2", 1, -1);
    ASSERT_EQ(retry->done, 1);
    ASSERT_EQ(retry->status, SEMA_EKEYMISMATCH);
    ASSERT_EQ(first->done, 0); /* the first attempt waits on */
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 1);
    other = idem_acquire(&f, "k2", 4, -1); /* the same request again takes its place */
    ASSERT_EQ(first->done, 1);
    ASSERT_EQ(first->status, SEMA_EREPLACED);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(other->done, 1);
    ASSERT_EQ(other->status, 0);
    ASSERT_EQ(fx_state(&f, "s", "held"), 4);
    fx_free(&f);
    treq_free(a);
    treq_free(b);
    treq_free(first);
    treq_free(retry);
    treq_free(other);
}

/* Pitfall 15: completions that submit more work do not recurse. */
static int chain_left;
static fx_t *chain_fx;
static void chain_cb(engine_req_t *r)
{
    treq_t *t = (treq_t *)r;

    t->done++;
    if (--chain_left > 0)
        ASSERT_OK(engine_submit(chain_fx->e, r)); /* completes at once, queued */
}

TEST(completion_callbacks_do_not_recurse)
{
    fx_t f;
    treq_t *t;

    if (fx_on_redis())
        TEST_SKIP("every completion on Redis is a reply, never inside engine_submit: the front's "
                  "no-recursion rule is checked with the embedded back end");
    fx_init(&f);
    fx_put(&f, "s", 1);
    t = treq_new(ENGINE_SEM_GET, "s");
    t->r.cb = chain_cb;
    chain_left = (int)test_scale(200000);
    chain_fx = &f;
    ASSERT_OK(engine_submit(f.e, &t->r));
    ASSERT_EQ(chain_left, 0);
    ASSERT_EQ(t->done, (int)test_scale(200000));
    t->res = NULL;
    treq_free(t);
    fx_free(&f);
}
