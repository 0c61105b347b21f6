/* SPDX-License-Identifier: MIT */
/* test_engine_tickets.c - tickets through engine.h: exact positions and weights ahead after
 * many departures anywhere in a line mixed with parked acquires, FIFO grants across both,
 * keepalive held off by a watcher, and a watcher answered on a position change. A back end
 * without tickets answers SEMA_ENOTSUP, and these cases are skipped. */
#include "test_engine_util.h"

#define N 2000

static treq_t *ticket_new(fx_t *f, const char *name, uint64_t weight, int64_t keepalive_ms)
{
    treq_t *t = treq_new(ENGINE_TICKET_CREATE, name);

    t->r.weight = weight;
    t->r.keepalive_ms = keepalive_ms;
    fx_do(f, t);
    if (t->status == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve tickets");
    ASSERT_OK(t->status);
    return t;
}

static const char *tid(const treq_t *t)
{
    return jstr(t->res, "ticket");
}

static treq_t *ticket_get(fx_t *f, const char *id, int64_t wait_ms)
{
    treq_t *t = treq_new(ENGINE_TICKET_GET, id);

    t->r.timeout_ms = wait_ms;
    ASSERT_OK(engine_submit(f->e, &t->r));
    if (wait_ms <= 0)
        fx_run_until(f, &t->done, 2000);
    return t;
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

TEST(ticket_positions_exact_after_random_departures)
{
    static treq_t *line[N];
    static uint64_t weight[N];
    static int gone[N];
    uint64_t rnd = 0x5eed;
    treq_t *holder;
    fx_t f;

    fx_init(&f);
    fx_put(&f, "line", 3);
    holder = fx_acquire(&f, "line", 3, -1);
    ASSERT_EQ(holder->done, 1);
    for (int i = 0; i < N; i++) {
        weight[i] = 1 + next_rand(&rnd) % 3;
        if (i % 10 == 5) { /* a parked long-poll acquire among the tickets */
            line[i] = fx_acquire(&f, "line", weight[i], -1);
            ASSERT_EQ(line[i]->done, 0);
        } else {
            line[i] = ticket_new(&f, "line", weight[i], 3600000);
            ASSERT_EQ(jint(line[i]->res, "position"), i + 1);
        }
    }
    /* A quarter leave, anywhere in the line: tickets by DELETE, acquires by cancel. */
    for (int k = 0; k < N / 4; k++) {
        int i = (int)(next_rand(&rnd) % N);
        if (gone[i])
            continue;
        gone[i] = 1;
        if (i % 10 == 5)
            engine_cancel(f.e, &line[i]->r);
        else
            ASSERT_OK(fx_op(&f, ENGINE_TICKET_DELETE, tid(line[i]), 0));
    }
    uint64_t ahead = 0, ahead_w = 0;
    for (int i = 0; i < N; i++) {
        if (gone[i])
            continue;
        if (i % 10 != 5) {
            treq_t *g = ticket_get(&f, tid(line[i]), 0);
            ASSERT_OK(g->status);
            ASSERT_EQ(jint(g->res, "position"), (int64_t)ahead + 1);
            ASSERT_EQ(jint(g->res, "ahead_weight"), (int64_t)ahead_w);
            treq_free(g);
        }
        ahead++;
        ahead_w += weight[i];
    }
    ASSERT_EQ(fx_state(&f, "line", "waiting"), (int64_t)ahead);
    /* FIFO across both kinds: releasing the holder's 3 units grants exactly the heads that
     * fit, in order, whichever kind they are, and stops at the first that does not. */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(holder)));
    fx_settle(&f);
    uint64_t room = 3;
    int blocked = 0;
    for (int i = 0, seen = 0; i < N && seen < 8; i++) {
        if (gone[i])
            continue;
        seen++;
        int fits = !blocked && weight[i] <= room;
        if (fits)
            room -= weight[i];
        else
            blocked = 1;
        if (i % 10 == 5) {
            ASSERT_EQ(line[i]->done, fits);
        } else {
            treq_t *g = ticket_get(&f, tid(line[i]), 0);
            ASSERT_STREQ(jstr(g->res, "status"), fits ? "granted" : "waiting");
            treq_free(g);
        }
    }
    for (int i = 0; i < N; i++)
        if (i % 10 == 5 && !gone[i] && !line[i]->done)
            engine_cancel(f.e, &line[i]->r);
    for (int i = 0; i < N; i++)
        treq_free(line[i]);
    treq_free(holder);
    fx_free(&f);
}

/* One try of the watcher case with b's keepalive `keepalive`: a and b join the line behind the
 * holder, a long-poll on b outlives b's keepalive, then a leaves and the watcher must hear
 * position 1. Returns 1 if it did; 0 if b was dropped first (a 410, rightly: the watcher's
 * renewals did not reach the back end within the keepalive). Fills *bp and *wp. */
static int watcher_try(fx_t *f, int64_t keepalive, treq_t **bp, treq_t **wp)
{
    treq_t *a = ticket_new(f, "w", 1, 3600000);
    treq_t *b = ticket_new(f, "w", 1, keepalive);
    treq_t *w = ticket_get(f, tid(b), 60000);
    int never = 0;

    *bp = b;
    *wp = w;
    fx_run_until(f, &never, 3 * (int)keepalive);
    int heard = !w->done;
    /* a leaves: the watcher hears position 1 (at the next position check) */
    ASSERT_OK(fx_op(f, ENGINE_TICKET_DELETE, tid(a), 0));
    if (heard) {
        fx_run_until(f, &w->done, 5000);
        ASSERT_EQ(w->done, 1);
        heard = w->status != SEMA_EGONE;
    }
    if (!heard)
        ASSERT_EQ(w->status, SEMA_EGONE);
    treq_free(a);
    return heard;
}

TEST(ticket_watcher_keeps_it_alive_and_hears_its_move)
{
    treq_t *holder, *b, *w;
    fx_t f;

    fx_init(&f);
    fx_put(&f, "w", 1);
    holder = fx_acquire(&f, "w", 1, -1);
    /* The watcher's renewals must reach the back end within b's keepalive, for the whole try:
     * on a machine too busy for that, b is dropped (a 410, rightly) and the case runs again
     * with a keepalive four times longer; a watcher that never renews fails every try. */
    int64_t keepalive = 100;
    for (; !watcher_try(&f, keepalive, &b, &w); keepalive *= 4) {
        ASSERT(keepalive < 20000);
        treq_free(w);
        treq_free(b);
    }
    ASSERT_OK(w->status);
    ASSERT_EQ(jint(w->res, "position"), 1);
    /* unread from now, b is dropped after its keepalive (bounded wait) */
    int never = 0;
    fx_run_until(&f, &never, 6 * (int)keepalive);
    treq_t *g = ticket_get(&f, tid(b), 0);
    ASSERT_EQ(g->status, SEMA_EGONE);
    treq_free(g);
    treq_free(w);
    treq_free(b);
    treq_free(holder);
    fx_free(&f);
}
