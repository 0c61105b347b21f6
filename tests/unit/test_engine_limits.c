/* SPDX-License-Identifier: MIT */
/* test_engine_limits.c - several semaphores at once, tenants and rates through engine.h: all or
 * nothing with strict FIFO in every line, one lease ended as one; a tenant's cap and the round
 * robin across tenants; a token bucket whose head is granted by a timer. A back end that does
 * not serve one of them answers SEMA_ENOTSUP, and those cases are skipped. */
#include "engine/engine_limits.h"
#include "test_engine_util.h"

static engine_part_t P[ENGINE_PARTS_MAX];

/* A request on several semaphores: "gpu:2,db:1". */
static treq_t *multi_new(const char *spec, int64_t timeout_ms)
{
    static char buf[ENGINE_PARTS_MAX][64];
    treq_t *t = treq_new(ENGINE_ACQUIRE_MULTI, NULL);
    char tmp[256];
    size_t n = 0;

    snprintf(tmp, sizeof tmp, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        *colon = '\0';
        snprintf(buf[n], sizeof buf[n], "%s", tok);
        P[n] = (engine_part_t){buf[n], strlen(buf[n]), strtoull(colon + 1, NULL, 10), 0};
        n++;
    }
    engine_part_t *parts = calloc(n, sizeof(*parts));
    ASSERT_NOT_NULL(parts);
    memcpy(parts, P, n * sizeof(*parts));
    for (size_t i = 0; i < n; i++) {
        char *name = strdup(parts[i].name);
        ASSERT_NOT_NULL(name);
        parts[i].name = name;
    }
    t->r.parts = parts;
    t->r.nparts = n;
    t->r.timeout_ms = timeout_ms;
    return t;
}

static void multi_free(treq_t *t)
{
    for (size_t i = 0; i < t->r.nparts; i++)
        free((char *)t->r.parts[i].name);
    free((void *)t->r.parts);
    treq_free(t);
}

/* Submit; skips the case on a back end without requests on several semaphores. */
static treq_t *multi(fx_t *f, const char *spec, int64_t timeout_ms)
{
    treq_t *t = multi_new(spec, timeout_ms);

    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_settle(f);
    if (t->done && t->status == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve requests on several semaphores");
    return t;
}

static int64_t fence_of(const treq_t *t, const char *name)
{
    json_t *f = json_object_get(t->res, "fences");
    ASSERT_NOT_NULL(f);
    return jint(f, name);
}

/* PUT with limits; skips when the back end does not serve them. */
static void put_lim(fx_t *f, const char *name, uint64_t cap, uint64_t tenant_max, uint64_t rate,
                    uint64_t burst)
{
    treq_t *t = treq_new(ENGINE_SEM_PUT, name);

    t->r.capacity = cap;
    if (tenant_max) {
        t->r.tenant_max = tenant_max;
        t->r.limits |= ENGINE_LIMIT_TENANT_MAX;
    }
    if (rate) {
        t->r.rate_per_s = rate;
        t->r.limits |= ENGINE_LIMIT_RATE;
    }
    if (burst) {
        t->r.rate_burst = burst;
        t->r.limits |= ENGINE_LIMIT_BURST;
    }
    int st = fx_do(f, t);
    treq_free(t);
    if (st == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve tenants or rates");
    ASSERT_OK(st);
}

static treq_t *acq_tenant(fx_t *f, const char *name, uint64_t w, const char *tenant, int64_t tmo)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE, name);

    t->r.weight = w;
    t->r.tenant = tenant;
    t->r.timeout_ms = tmo;
    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_settle(f);
    if (t->done && t->status == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve tenants");
    return t;
}

static void release(fx_t *f, treq_t *t)
{
    ASSERT_OK(fx_lease_op(f, ENGINE_LEASE_RELEASE, lease_id(t)));
}

/* The view of semaphore `name` (a request to treq_free). */
static treq_t *view_of(fx_t *f, const char *name)
{
    treq_t *g = treq_new(ENGINE_SEM_GET, name);

    ASSERT_OK(fx_do(f, g));
    return g;
}

/* The i-th tenant of view g, which is `tenant` (tenants come by name). */
static json_t *tenant_at(const treq_t *g, size_t i, const char *tenant)
{
    json_t *t = json_array_get(json_object_get(g->res, "tenants"), i);

    ASSERT_STREQ(jstr(t, "tenant"), tenant);
    return t;
}

/* ---- several semaphores ---- */

TEST(multi_granted_all_at_once_with_a_fence_each)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "gpu", 2);
    fx_put(&f, "db", 1);
    treq_t *m = multi(&f, "gpu:2,db:1", -1);
    ASSERT_EQ(m->done, 1);
    ASSERT_OK(m->status);
    ASSERT_GT(fence_of(m, "gpu"), 0);
    ASSERT_GT(fence_of(m, "db"), 0);
    ASSERT_EQ(fx_state(&f, "gpu", "held"), 2);
    ASSERT_EQ(fx_state(&f, "db", "held"), 1);
    release(&f, m);
    ASSERT_EQ(fx_state(&f, "gpu", "held"), 0);
    ASSERT_EQ(fx_state(&f, "db", "held"), 0);
    multi_free(m);
    fx_free(&f);
}

TEST(multi_holds_nothing_until_everything_and_keeps_its_place)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "gpu", 2);
    fx_put(&f, "db", 1);
    treq_t *d = fx_acquire(&f, "db", 1, -1);
    treq_t *m = multi(&f, "gpu:2,db:1", -1);
    ASSERT_EQ(m->done, 0);
    ASSERT_EQ(fx_state(&f, "gpu", "held"), 0); /* nothing held while it waits */
    treq_t *g = fx_acquire(&f, "gpu", 1, -1);  /* behind it in gpu's line: no barging */
    ASSERT_EQ(g->done, 0);
    release(&f, d);
    fx_run_until(&f, &m->done, 2000);
    ASSERT_OK(m->status);
    ASSERT_EQ(g->done, 0);
    release(&f, m);
    fx_run_until(&f, &g->done, 2000);
    ASSERT_OK(g->status);
    treq_free(d);
    treq_free(g);
    multi_free(m);
    fx_free(&f);
}

TEST(multi_crossing_orders_do_not_deadlock)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "a", 1);
    fx_put(&f, "b", 1);
    treq_t *ha = fx_acquire(&f, "a", 1, -1), *hb = fx_acquire(&f, "b", 1, -1);
    treq_t *m1 = multi(&f, "a:1,b:1", -1), *m2 = multi(&f, "b:1,a:1", -1);
    ASSERT_EQ(m1->done + m2->done, 0);
    release(&f, hb); /* m1 is first on b but waits for a */
    ASSERT_EQ(m1->done + m2->done, 0);
    release(&f, ha);
    fx_run_until(&f, &m1->done, 2000);
    ASSERT_OK(m1->status);
    ASSERT_EQ(m2->done, 0);
    release(&f, m1);
    fx_run_until(&f, &m2->done, 2000);
    ASSERT_OK(m2->status);
    release(&f, m2);
    treq_free(ha);
    treq_free(hb);
    multi_free(m1);
    multi_free(m2);
    fx_free(&f);
}

TEST(multi_try_timeout_and_bad_input)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "a", 2);
    fx_put(&f, "b", 2);
    treq_t *h = fx_acquire(&f, "b", 2, -1);
    treq_t *t = multi(&f, "a:1,b:1", 0);
    ASSERT_EQ(t->status, SEMA_EBUSY);
    ASSERT_EQ(fx_state(&f, "a", "waiting"), 0);
    treq_t *w = multi(&f, "a:1,b:1", 50);
    fx_run_until(&f, &w->done, 3000);
    ASSERT_EQ(w->status, SEMA_ETIMEDOUT);
    ASSERT_EQ(fx_state(&f, "a", "waiting"), 0); /* out of every line */
    ASSERT_EQ(fx_state(&f, "b", "waiting"), 0);
    treq_t *x = multi(&f, "a:1,nope:1", -1);
    ASSERT_EQ(x->status, SEMA_ENOENT);
    treq_t *y = multi(&f, "a:3,b:1", -1);
    ASSERT_EQ(y->status, SEMA_EINVAL);
    treq_t *z = multi(&f, "a:1,a:1", -1);
    ASSERT_EQ(z->status, SEMA_EINVAL);
    release(&f, h);
    treq_free(h);
    multi_free(t);
    multi_free(w);
    multi_free(x);
    multi_free(y);
    multi_free(z);
    fx_free(&f);
}

TEST(multi_lease_renewed_revoked_and_expired_as_one)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "a", 1);
    fx_put(&f, "b", 1);
    treq_t *m = multi(&f, "a:1,b:1", -1);
    ASSERT_OK(m->status);
    int64_t fa = fence_of(m, "a");
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_REVOKE, lease_id(m)));
    ASSERT_EQ(fx_state(&f, "a", "held"), 0);
    ASSERT_EQ(fx_state(&f, "b", "held"), 0);
    ASSERT_GT(fx_state(&f, "a", "fence"), fa); /* the fence moved on on both */
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RENEW, lease_id(m)), SEMA_EREVOKED);
    treq_t *e = multi_new("a:1,b:1", -1);
    e->r.ttl_ms = 30;
    ASSERT_OK(engine_submit(f.e, &e->r));
    fx_settle(&f);
    ASSERT_OK(e->status);
    treq_t *w = multi(&f, "b:1,a:1", -1); /* granted when e expires */
    fx_run_until(&f, &w->done, 5000);
    ASSERT_OK(w->status);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(e)), SEMA_EEXPIRED);
    release(&f, w);
    multi_free(m);
    multi_free(e);
    multi_free(w);
    fx_free(&f);
}

TEST(multi_idempotency_key_returns_the_same_lease)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "a", 2);
    fx_put(&f, "b", 2);
    treq_t *m = multi_new("a:1,b:2", -1);
    m->r.idem_key = "job-7";
    if (fx_do(&f, m) == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve requests on several semaphores");
    ASSERT_OK(m->status);
    treq_t *again = multi_new("a:1,b:2", -1);
    again->r.idem_key = "job-7";
    ASSERT_OK(fx_do(&f, again));
    ASSERT_STREQ(lease_id(again), lease_id(m));
    ASSERT_EQ(fx_state(&f, "b", "held"), 2);
    treq_t *other = multi_new("a:1,b:1", -1);
    other->r.idem_key = "job-7";
    ASSERT_EQ(fx_do(&f, other), SEMA_EKEYMISMATCH);
    release(&f, m);
    multi_free(m);
    multi_free(again);
    multi_free(other);
    fx_free(&f);
}

TEST(multi_deleted_semaphore_cancels_the_waiter_and_voids_the_lease)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "a", 1);
    fx_put(&f, "b", 1);
    fx_put(&f, "c", 1);
    treq_t *m = multi(&f, "a:1,b:1", -1);
    ASSERT_OK(m->status);
    treq_t *w = multi(&f, "b:1,c:1", -1);
    ASSERT_EQ(w->done, 0);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_DELETE, "c", 0));
    fx_run_until(&f, &w->done, 2000);
    ASSERT_EQ(w->status, SEMA_ECANCELED);
    ASSERT_EQ(fx_state(&f, "b", "waiting"), 0);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_DELETE, "a", 0));
    ASSERT_EQ(fx_state(&f, "b", "held"), 0); /* the lease is void on b too */
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(m)), SEMA_ECANCELED);
    multi_free(m);
    multi_free(w);
    fx_free(&f);
}

/* ---- tenants ---- */

TEST(tenant_max_caps_one_tenant_and_lets_another_in)
{
    fx_t f;

    fx_init(&f);
    put_lim(&f, "pool", 10, 3, 0, 0);
    treq_t *a1 = acq_tenant(&f, "pool", 3, "acme", -1);
    ASSERT_OK(a1->status);
    treq_t *a2 = acq_tenant(&f, "pool", 1, "acme", -1);
    ASSERT_EQ(a2->done, 0); /* 7 free, but acme holds its 3 */
    treq_t *b = acq_tenant(&f, "pool", 2, "bolt", -1);
    ASSERT_OK(b->status);
    treq_t *big = acq_tenant(&f, "pool", 4, "bolt", -1);
    ASSERT_EQ(big->status, SEMA_EINVAL); /* above tenant_max: never */
    release(&f, a1);
    fx_run_until(&f, &a2->done, 2000);
    ASSERT_OK(a2->status);
    release(&f, a2);
    release(&f, b);
    treq_free(a1);
    treq_free(a2);
    treq_free(b);
    treq_free(big);
    fx_free(&f);
}

TEST(tenants_take_turns_by_units_fifo_within_each)
{
    enum { N = 6 };
    treq_t *q[N];
    const char *who[N] = {"a", "a", "a", "b", "b", "b"};
    int order[N], n = 0;
    fx_t f;

    fx_init(&f);
    put_lim(&f, "one", 1, 0, 0, 0);
    treq_t *h = acq_tenant(&f, "one", 1, "z", -1);
    ASSERT_OK(h->status);
    for (int i = 0; i < N; i++) {
        q[i] = acq_tenant(&f, "one", 1, who[i], -1);
        ASSERT_EQ(q[i]->done, 0);
    }
    release(&f, h);
    while (n < N) {
        int got = -1;
        for (int spins = 0; got < 0 && spins < 2000; spins++) {
            for (int i = 0; i < N; i++)
                if (q[i]->done && q[i]->status == 0 && q[i]->created != 99)
                    got = i;
            if (got < 0)
                fx_run_until(&f, &(int){0}, 1);
        }
        ASSERT_GE(got, 0);
        q[got]->created = 99; /* seen */
        order[n++] = got;
        release(&f, q[got]);
    }
    /* a, b, a, b, a, b and each tenant in its own order */
    ASSERT_EQ(order[0], 0);
    ASSERT_EQ(order[1], 3);
    ASSERT_EQ(order[2], 1);
    ASSERT_EQ(order[3], 4);
    ASSERT_EQ(order[4], 2);
    ASSERT_EQ(order[5], 5);
    treq_free(h);
    for (int i = 0; i < N; i++)
        treq_free(q[i]);
    fx_free(&f);
}

TEST(tenants_shown_in_the_view)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "v", 2);
    treq_t *a = acq_tenant(&f, "v", 2, "acme", -1);
    if (a->status == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve tenants");
    ASSERT_OK(a->status);
    treq_t *b = acq_tenant(&f, "v", 1, "bolt", -1);
    treq_t *g = view_of(&f, "v");
    ASSERT_EQ(json_array_size(json_object_get(g->res, "tenants")), 2);
    ASSERT_EQ(jint(tenant_at(g, 0, "acme"), "held"), 2);
    ASSERT_EQ(jint(tenant_at(g, 1, "bolt"), "waiting_weight"), 1);
    ASSERT_STREQ(jstr(json_array_get(json_object_get(g->res, "holders"), 0), "tenant"), "acme");
    release(&f, a);
    fx_run_until(&f, &b->done, 2000);
    release(&f, b);
    treq_free(a);
    treq_free(b);
    treq_free(g);
    fx_free(&f);
}

/* Pairs one after another, nobody waiting (on Redis the short paths of a semaphore with
 * limits, after the first grant): each tenant's hold, the tenant_max, the lease's tenant and
 * the view stay exactly as the general path keeps them. */
TEST(uncontended_pairs_keep_each_tenants_hold_exact)
{
    fx_t f;

    fx_init(&f);
    put_lim(&f, "pairs", 10, 2, 0, 0);
    for (int round = 0; round < 3; round++) {
        treq_t *a1 = acq_tenant(&f, "pairs", 1, "acme", -1);
        treq_t *b = acq_tenant(&f, "pairs", 1, "bolt", -1);
        treq_t *a2 = acq_tenant(&f, "pairs", 1, "acme", -1);
        ASSERT_OK(a1->status);
        ASSERT_OK(b->status);
        ASSERT_OK(a2->status);
        ASSERT_STREQ(jstr(a2->res, "tenant"), "acme");
        treq_t *a3 = acq_tenant(&f, "pairs", 1, "acme", 0);
        ASSERT_EQ(a3->status, SEMA_EBUSY); /* acme holds its 2, 7 units free */
        treq_t *g = view_of(&f, "pairs");
        ASSERT_EQ(json_array_size(json_object_get(g->res, "tenants")), 2);
        ASSERT_EQ(jint(tenant_at(g, 0, "acme"), "held"), 2);
        ASSERT_EQ(jint(tenant_at(g, 1, "bolt"), "held"), 1);
        ASSERT_STREQ(jstr(json_array_get(json_object_get(g->res, "holders"), 2), "tenant"), "acme");
        release(&f, a1);
        treq_t *a4 = acq_tenant(&f, "pairs", 1, "acme", 0); /* room again */
        ASSERT_OK(a4->status);
        release(&f, a2);
        release(&f, a4);
        release(&f, b);
        treq_free(g);
        g = view_of(&f, "pairs");
        ASSERT_EQ(json_array_size(json_object_get(g->res, "tenants")), 0);
        ASSERT_EQ(jint(g->res, "available"), 10);
        treq_free(g);
        treq_free(a1);
        treq_free(a2);
        treq_free(a3);
        treq_free(a4);
        treq_free(b);
    }
    fx_free(&f);
}

/* The grants and releases a subscriber was told of, and how many of them named acme. */
typedef struct {
    int granted, released, acme;
} told_t;

static void count_told(void *arg, const char *id, const char *type, const char *data, size_t len)
{
    told_t *n = arg;
    json_t *j = json_loadb(data, len, 0, NULL);
    const char *tn = json_string_value(json_object_get(j, "tenant"));

    (void)id;
    if (strcmp(type, "granted") == 0 || strcmp(type, "released") == 0) {
        n->granted += type[0] == 'g';
        n->released += type[0] == 'r';
        n->acme += tn != NULL && strcmp(tn, "acme") == 0;
    }
    json_decref(j);
}

/* Whoever follows a semaphore with limits is told of every uncontended grant and release (on
 * Redis their short paths run only while the row says nobody follows; the pairs before the
 * subscription leave it saying so, and the subscription must say otherwise). */
TEST(uncontended_pairs_with_limits_reach_a_subscriber)
{
    told_t n = {0, 0, 0};
    engine_sub_t *sub;
    fx_t f;

    fx_init(&f);
    put_lim(&f, "told", 10, 2, 1000000, 0); /* a tenant_max and a rate that never bind */
    for (int i = 0; i < 7; i++) {
        if (i == 2) /* (the second pair takes both short paths on Redis) */
            ASSERT_OK(fx_subscribe(&f, "told", count_told, &n, &sub));
        treq_t *t = acq_tenant(&f, "told", 1, "acme", -1);
        ASSERT_OK(t->status);
        release(&f, t);
        treq_free(t);
    }
    for (int k = 0; k < 300 && n.released < 5; k++) { /* (bounded: 3 s) */
        int never = 0;
        fx_run_until(&f, &never, 10);
    }
    ASSERT_EQ(n.granted, 5);
    ASSERT_EQ(n.released, 5);
    ASSERT_EQ(n.acme, 10);
    engine_unsubscribe(f.e, sub);
    fx_free(&f);
}

/* Acquires naming no tenant, sent in one turn of the loop (on Redis: one call, each member
 * taking its short path or else its general path in its place), keep the tenant_max of the
 * tenant they share: two granted, two waiting in their order, each granted as a unit returns. */
TEST(one_turn_of_acquires_keeps_tenant_max_and_order)
{
    fx_t f;
    treq_t *a[4];

    fx_init(&f);
    put_lim(&f, "turn", 4, 2, 0, 0);
    for (int i = 0; i < 4; i++) {
        a[i] = treq_new(ENGINE_ACQUIRE, "turn");
        a[i]->r.weight = 1;
        ASSERT_OK(engine_submit(f.e, &a[i]->r));
    }
    ASSERT(fx_run_until(&f, &a[0]->done, 5000));
    ASSERT(fx_run_until(&f, &a[1]->done, 5000));
    ASSERT_OK(a[0]->status);
    ASSERT_OK(a[1]->status);
    for (int k = 0; k < 250 && fx_state(&f, "turn", "waiting") < 2; k++) { /* (bounded: 5 s) */
        int never = 0;
        fx_run_until(&f, &never, 20);
    }
    ASSERT_EQ(fx_state(&f, "turn", "waiting"), 2);
    ASSERT(!a[2]->done && !a[3]->done);
    release(&f, a[0]);
    ASSERT(fx_run_until(&f, &a[2]->done, 5000));
    ASSERT_OK(a[2]->status);
    ASSERT(!a[3]->done);
    release(&f, a[1]);
    ASSERT(fx_run_until(&f, &a[3]->done, 5000));
    ASSERT_OK(a[3]->status);
    for (int i = 2; i < 4; i++)
        release(&f, a[i]);
    ASSERT_EQ(fx_state(&f, "turn", "held"), 0);
    for (int i = 0; i < 4; i++)
        treq_free(a[i]);
    fx_free(&f);
}

/* ---- rates ---- */

TEST(rate_grants_the_burst_then_one_per_refill_by_a_timer)
{
    fx_t f;

    fx_init(&f);
    put_lim(&f, "api", 100, 0, 10, 2); /* 10 a second, 2 at once */
    treq_t *a = fx_acquire(&f, "api", 1, -1), *b = fx_acquire(&f, "api", 1, -1);
    ASSERT_OK(a->status);
    ASSERT_OK(b->status);
    treq_t *t = fx_acquire(&f, "api", 1, 0);
    ASSERT_EQ(t->status, SEMA_EBUSY); /* no token: a try fails */
    uint64_t t0 = uv_hrtime();
    treq_t *c = fx_acquire(&f, "api", 1, -1);
    ASSERT_EQ(c->done, 0);
    fx_run_until(&f, &c->done, 3000);
    ASSERT_OK(c->status);
    ASSERT_GE((uv_hrtime() - t0) / 1000000, 80); /* a token comes every 100 ms */
    treq_t *big = fx_acquire(&f, "api", 3, -1);
    ASSERT_EQ(big->status, SEMA_EINVAL); /* above the bucket: never */
    release(&f, a);
    release(&f, b);
    release(&f, c);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    treq_free(t);
    treq_free(big);
    fx_free(&f);
}

/* Pairs one after another on a semaphore with a rate: each grant takes its token (on Redis
 * the short paths, after the first grant), the burst spent a try fails. */
TEST(uncontended_pairs_take_a_token_each)
{
    fx_t f;

    fx_init(&f);
    put_lim(&f, "paced", 100, 0, 1, 4); /* 1 a second, 4 at once */
    uint64_t t0 = uv_hrtime();
    for (int i = 0; i < 4; i++) {
        treq_t *a = fx_acquire(&f, "paced", 1, 0);
        ASSERT_OK(a->status);
        release(&f, a);
        treq_free(a);
    }
    treq_t *t = fx_acquire(&f, "paced", 1, 0);
    if ((uv_hrtime() - t0) / 1000000 < 900) /* (a token comes back each second) */
        ASSERT_EQ(t->status, SEMA_EBUSY);
    treq_free(t);
    fx_free(&f);
}

TEST(resize_changes_the_rate)
{
    fx_t f;

    fx_init(&f);
    put_lim(&f, "r", 10, 0, 1, 1);
    treq_t *a = fx_acquire(&f, "r", 1, -1);
    ASSERT_OK(a->status);
    treq_t *b = fx_acquire(&f, "r", 1, -1);
    ASSERT_EQ(b->done, 0); /* the next token is a second away */
    treq_t *rz = treq_new(ENGINE_SEM_RESIZE, "r");
    rz->r.rate_per_s = 1000;
    rz->r.limits = ENGINE_LIMIT_RATE;
    ASSERT_OK(fx_do(&f, rz));
    ASSERT_EQ(jint(rz->res, "rate_per_s"), 1000);
    ASSERT_EQ(jint(rz->res, "capacity"), 10);
    fx_run_until(&f, &b->done, 500);
    ASSERT_OK(b->status);
    release(&f, a);
    release(&f, b);
    treq_free(a);
    treq_free(b);
    treq_free(rz);
    fx_free(&f);
}

/* No idle gap: a head that has the units waits for its tokens and no longer, by the engine's
 * timer (never polled): with a backlog and units to spare, the i-th grant after the burst
 * comes at the refill of its token, never before it, and late only by the loop's own delay. */
static uint64_t grant_at[64];
static int ngrants;

/* When the back end granted it, by the clock its tokens are reckoned by: on Redis the lease's
 * acquired_at (Redis's TIME; the answers reach the test a round trip later, unevenly); on the
 * embedded back end the loop's time, which the grant's callback runs in (the lease's
 * acquired_at reads the wall clock later in the loop's turn: a stall of the process between
 * the two made a grant look 4 ms early under ASan). */
static void note_grant_time(engine_req_t *r)
{
    treq_t *t = (treq_t *)r;

    if (t->status == 0 && ngrants < 64)
        grant_at[ngrants++] =
            fx_on_redis() ? (uint64_t)r->res.lease.acquired_at_ms : uv_now((uv_loop_t *)r->data);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

TEST(rate_grants_at_each_refill_with_no_idle_gap)
{
    enum { N = 21, RATE = 10 }; /* a token every 100 ms */
    treq_t *q[N];
    int64_t late[N];
    fx_t f;

    fx_init(&f);
    put_lim(&f, "tick", 1000, 0, RATE, 1);
    ngrants = 0;
    for (int i = 0; i < N; i++) {
        q[i] = treq_new(ENGINE_ACQUIRE, "tick");
        q[i]->r.weight = 1;
        q[i]->r.data = &f.loop;
        q[i]->then = note_grant_time;
        ASSERT_OK(engine_submit(f.e, &q[i]->r));
    }
    fx_run_until(&f, &q[N - 1]->done, 10000);
    ASSERT_EQ(ngrants, N);
    /* With a bucket of 1, each token comes a period after the grant before it (a grant held
     * up by a stall of the process does not bring the later ones forward: the bucket keeps
     * no more than one token): the lateness of each is measured from there. */
    for (int i = 1; i < N; i++) {
        late[i] = (int64_t)grant_at[i] - (int64_t)grant_at[i - 1] - 1000 / RATE;
        ASSERT_GE(late[i], -1); /* never before its token (the loop's clock is in ms) */
    }
    /* Late only by the loop's own delays (a busy machine's), not by a poll: a poll of the
     * period would make the median half of it. A quarter leaves room for a loaded machine's
     * scheduling delays (tens of ms at times) and still tells a poll apart. */
    qsort(late + 1, N - 1, sizeof(late[0]), cmp_i64);
    printf("rate_no_idle_gap grants=%d median_late_ms=%lld worst_late_ms=%lld period_ms=%d\n",
           N - 1, (long long)late[N / 2], (long long)late[N - 1], 1000 / RATE);
    ASSERT_LE(late[N / 2], 1000 / RATE / 4);
    for (int i = 0; i < N; i++)
        treq_free(q[i]);
    fx_free(&f);
}
