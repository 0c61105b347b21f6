/* SPDX-License-Identifier: MIT */
/* test_engine_limits_stress.c - requests on random overlapping sets of semaphores, with
 * tenants, caps and a rate, under random acquires, releases, revokes, timeouts, cancels,
 * short ttls and resizes, against a checker fed by the engine's own events and completions:
 * - no semaphore above its capacity and no tenant above its tenant_max at any grant;
 * - a request on several semaphores granted only all at once (a "granted" event on each of
 *   its semaphores, with its lease id, before its completion, and none before all fit);
 * - FIFO within each tenant on each semaphore (plain FIFO in the phase without tenants),
 *   judged on each semaphore's own events: a request is in its line from its "queued" there
 *   to its "granted" or "left" there (each request's owner names it), and nobody of its
 *   tenant who arrived after it is granted there meanwhile. (Completions do not tell it: on
 *   Redis the grants a call makes on a semaphore other than its own come by a message of
 *   their own, which may overtake the reply that tells an earlier request's grant or timeout);
 * - no deadlock: at the end nobody new comes, holders give back what they get, and every
 *   request that waits forever is granted (bounded wait);
 * - a rate: no grant without its tokens, by a model of the bucket on the loop's clock.
 * A back end without these answers SEMA_ENOTSUP and the cases are skipped. */
#include "engine/engine_limits.h"
#include "test_engine_util.h"

#define NSEM 4
#define NCLIENT 40
#define NTENANT 3
#define RATE 2000 /* units a second on s3, burst BURST */
#define BURST 4

typedef struct {
    treq_t *t;
    engine_part_t parts[NSEM];
    char names[NSEM][4];
    size_t nparts;
    int tenant;     /* -1: none */
    char owner[24]; /* "r<its request's number>" */
    int pending;
    int holding;
    char lease[40];
} client_t;

typedef struct {
    uint64_t capacity, tenant_max; /* tenant_max: the last one asked for */
    /* The tenant_max grants are checked against: a resize's takes effect at its "resized"
     * event (on Redis a grant made before it may be told after the resize was asked for) */
    uint64_t tm_check, tm_next[8];
    unsigned tm_head, tm_n;
    uint64_t held, held_t[NTENANT + 1]; /* [NTENANT]: no tenant */
    engine_sub_t *sub;
    uint64_t tokens_n, tokens_ms; /* the rate's model (s3 only) */
    uint64_t grants;
} semck_t;

static fx_t F;
static client_t C[NCLIENT];
static semck_t S[NSEM];
static uint64_t rng = 0x51ed27e5ull;
static int with_tenants;
static const char *const TENANT[NTENANT] = {"t0", "t1", "t2"};

/* Grants seen per lease id (its "granted" events), to check all-at-once; and the grants
 * completed since the last check, with the semaphores they must have (events come after
 * completions, in the same delivery). */
#define NSEEN 4096
static struct {
    char id[40];
    unsigned sems;
} seen[NSEEN], done[NCLIENT * 4];
static size_t nseen, ndone;

/* Every request of a case by its number, in arrival order (the order of engine_submit: one
 * loop, and on Redis one connection, keeps it): its tenant and the lines it is in now. */
typedef struct {
    int tenant;
    unsigned in_line; /* bit i: it waits in s<i>'s line ("queued" there, no "granted"/"left") */
} reqck_t;
static reqck_t *R;
static size_t nreq, req_cap, nqueued;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static const char *sem_name(int i)
{
    static const char *const names[NSEM] = {"s0", "s1", "s2", "s3"};
    return names[i];
}

static int tenant_of(const char *name)
{
    for (int i = 0; name != NULL && i < NTENANT; i++)
        if (strcmp(name, TENANT[i]) == 0)
            return i;
    return NTENANT;
}

static void note_grant(const char *id, int sem)
{
    for (size_t i = 0; i < nseen; i++)
        if (strcmp(seen[i].id, id) == 0) {
            seen[i].sems |= 1u << sem;
            return;
        }
    ASSERT_LT(nseen, NSEEN);
    snprintf(seen[nseen].id, sizeof seen[0].id, "%s", id);
    seen[nseen++].sems = 1u << sem;
}

static unsigned granted_sems(const char *id)
{
    for (size_t i = 0; i < nseen; i++)
        if (strcmp(seen[i].id, id) == 0)
            return seen[i].sems;
    return 0;
}

/* The rate of s3 as a bucket on the engine's clock: never a grant without its tokens. The
 * embedded engine's is the loop's; Redis's is its own (TIME), which a grant's acquired_at
 * gives (its events come in the order of its grants). */
static uint64_t rate_clock(json_t *ev)
{
    return fx_on_redis() ? (uint64_t)json_integer_value(json_object_get(ev, "acquired_at"))
                         : uv_now(&F.loop);
}

static void rate_take(semck_t *s, uint64_t w, uint64_t now)
{
    uint64_t cap = (uint64_t)BURST * 1000000000ull, per_ms = (uint64_t)RATE * 1000000ull;
    uint64_t el = now > s->tokens_ms ? now - s->tokens_ms : 0;
    uint64_t add = el > cap / per_ms ? cap : el * per_ms;

    s->tokens_n = s->tokens_n + add > cap ? cap : s->tokens_n + add;
    if (now > s->tokens_ms)
        s->tokens_ms = now;
    if (s->tokens_n < w * 1000000000ull)
        TEST_FAIL_("a grant of %llu on the rate's semaphore with %.3f tokens",
                   (unsigned long long)w, (double)s->tokens_n / 1e9);
    s->tokens_n -= w * 1000000000ull;
}

/* The request an event's owner names ("r<number>"), or NULL (the probe's, or none). */
static reqck_t *req_of(const char *owner)
{
    char *end;
    unsigned long n;

    if (owner == NULL || owner[0] != 'r')
        return NULL;
    n = strtoul(owner + 1, &end, 10);
    return *end == '\0' && n < nreq ? &R[n] : NULL;
}

/* Request q is granted on s<si>: whoever of its tenant arrived before it and still waits in
 * that line was overtaken, which FIFO forbids. It is out of that line now. */
static void check_fifo(int si, reqck_t *q)
{
    for (reqck_t *o = R; o < q; o++)
        if (o->tenant == q->tenant && (o->in_line & (1u << si)))
            TEST_FAIL_("request %zu granted on %s before %zu (arrived before it, still waiting "
                       "there)",
                       (size_t)(q - R), sem_name(si), (size_t)(o - R));
    q->in_line &= ~(1u << si);
}

static void on_event(void *arg, const char *id, const char *type, const char *data, size_t len)
{
    semck_t *s = arg;
    int si = (int)(s - S);
    json_t *j = json_loadb(data, len, 0, NULL);
    uint64_t w = (uint64_t)json_integer_value(json_object_get(j, "weight"));
    int t = tenant_of(json_string_value(json_object_get(j, "tenant")));
    const char *lease = json_string_value(json_object_get(j, "lease"));
    reqck_t *q = req_of(json_string_value(json_object_get(j, "owner")));

    (void)id;
    if (strcmp(type, "queued") == 0 && q != NULL) {
        q->in_line |= 1u << si;
        nqueued++;
    } else if (strcmp(type, "left") == 0 && q != NULL) {
        q->in_line &= ~(1u << si);
    } else if (strcmp(type, "granted") == 0) {
        if (q != NULL)
            check_fifo(si, q);
        if (s->held + w > s->capacity)
            TEST_FAIL_("%s: a grant of %llu with %llu held over capacity %llu", sem_name(si),
                       (unsigned long long)w, (unsigned long long)s->held,
                       (unsigned long long)s->capacity);
        if (s->tm_check != 0 && s->held_t[t] + w > s->tm_check)
            TEST_FAIL_("%s: tenant %d takes %llu holding %llu over tenant_max %llu", sem_name(si),
                       t, (unsigned long long)w, (unsigned long long)s->held_t[t],
                       (unsigned long long)s->tm_check);
        if (si == 3)
            rate_take(s, w, rate_clock(j));
        s->held += w;
        s->held_t[t] += w;
        s->grants++;
        note_grant(lease, si);
    } else if (strcmp(type, "released") == 0 || strcmp(type, "expired") == 0 ||
               strcmp(type, "revoked") == 0) {
        ASSERT_GE(s->held, w);
        ASSERT_GE(s->held_t[t], w);
        s->held -= w;
        s->held_t[t] -= w;
    } else if (strcmp(type, "resized") == 0) {
        s->capacity = (uint64_t)json_integer_value(json_object_get(j, "capacity"));
        if (s->tm_n > 0) {
            s->tm_check = s->tm_next[s->tm_head];
            s->tm_head = (s->tm_head + 1) % 8;
            s->tm_n--;
        }
    } else if (strcmp(type, "deleted") == 0) {
        memset(s->held_t, 0, sizeof s->held_t);
        s->held = 0;
    }
    json_decref(j);
}

static int put_sem(int i, uint64_t cap, uint64_t tenant_max)
{
    treq_t *t = treq_new(ENGINE_SEM_PUT, sem_name(i));
    int st;

    t->r.capacity = cap;
    if (tenant_max != 0) {
        t->r.tenant_max = tenant_max;
        t->r.limits |= ENGINE_LIMIT_TENANT_MAX;
    }
    if (i == 3) {
        t->r.rate_per_s = RATE;
        t->r.rate_burst = BURST;
        t->r.limits |= ENGINE_LIMIT_RATE | ENGINE_LIMIT_BURST;
    }
    st = fx_do(&F, t);
    treq_free(t);
    return st;
}

static void create_sem(int i, uint64_t cap)
{
    memset(&S[i], 0, sizeof S[i]);
    S[i].capacity = cap;
    S[i].tenant_max = with_tenants ? 1 + rnd(cap) : 0;
    S[i].tm_check = S[i].tenant_max;
    S[i].tokens_n = (uint64_t)BURST * 1000000000ull;
    S[i].tokens_ms = fx_on_redis() ? 0 : uv_now(&F.loop); /* (full from the start) */
    int st = put_sem(i, cap, S[i].tenant_max);
    if (st == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve requests on several semaphores, tenants or rates");
    ASSERT_OK(st);
    ASSERT_OK(fx_subscribe(&F, sem_name(i), on_event, &S[i], &S[i].sub));
}

static void client_cb(engine_req_t *r)
{
    client_t *c = r->data;

    c->pending = 0;
    if (r->status != 0)
        return;
    unsigned want = 0;
    for (size_t i = 0; i < c->nparts; i++)
        want |= 1u << (c->names[i][1] - '0');
    ASSERT_LT(ndone, sizeof done / sizeof done[0]);
    snprintf(done[ndone].id, sizeof done[0].id, "%s", r->res.lease.id);
    done[ndone++].sems = want;
    snprintf(c->lease, sizeof c->lease, "%s", r->res.lease.id);
    c->holding = 1;
}

static void start(client_t *c, int64_t timeout_ms)
{
    static const int64_t ttls[] = {0, 0, 0, 15, 60000};
    treq_t *t = c->t;
    unsigned used = 0;

    memset(&t->r, 0, sizeof(t->r));
    c->nparts = 1 + rnd(3);
    for (size_t i = 0; i < c->nparts; i++) {
        int s;
        do
            s = (int)rnd(NSEM);
        while (used & (1u << s));
        used |= 1u << s;
        snprintf(c->names[i], sizeof c->names[i], "%s", sem_name(s));
        uint64_t cap = s == 3 && S[s].capacity > BURST ? BURST : S[s].capacity;
        uint64_t w = 1 + rnd(cap + (rnd(20) == 0)); /* sometimes too heavy */
        if (S[s].tenant_max != 0 && w > S[s].tenant_max && rnd(4) != 0)
            w = S[s].tenant_max;
        c->parts[i] = (engine_part_t){c->names[i], 2, w, 0};
    }
    c->tenant = with_tenants && rnd(4) != 0 ? (int)rnd(NTENANT) : -1;
    if (nreq == req_cap) {
        req_cap = req_cap ? 2 * req_cap : 1024;
        R = realloc(R, req_cap * sizeof(*R));
        ASSERT(R != NULL);
    }
    R[nreq] = (reqck_t){c->tenant < 0 ? NTENANT : c->tenant, 0};
    snprintf(c->owner, sizeof c->owner, "r%zu", nreq++);
    t->r.op = ENGINE_ACQUIRE_MULTI;
    t->r.owner = c->owner;
    t->r.parts = c->parts;
    t->r.nparts = c->nparts;
    t->r.tenant = c->tenant >= 0 ? TENANT[c->tenant] : NULL;
    t->r.timeout_ms = timeout_ms;
    t->r.ttl_ms = ttls[rnd(5)];
    t->r.cb = client_cb;
    t->r.data = c;
    if (c->tenant < 0)
        c->tenant = NTENANT;
    c->pending = 1;
    ASSERT_OK(engine_submit(F.e, &t->r));
}

/* Each grant completed is on all of its semaphores, none missing, none more. (On Redis the
 * events of a semaphore other than the one a call was sent for come by a message of their
 * own, maybe after the grant's completion: they are waited for, a bounded time.) */
static void check_done(void)
{
    for (size_t i = 0; i < ndone; i++) {
        unsigned got = granted_sems(done[i].id);
        for (int k = 0; k < 200 && got != done[i].sems && (got & ~done[i].sems) == 0; k++) {
            int never = 0;
            fx_run_until(&F, &never, 10);
            got = granted_sems(done[i].id);
        }
        if (got != done[i].sems)
            TEST_FAIL_("lease %s granted on %#x of %#x", done[i].id, got, done[i].sems);
    }
    ndone = 0;
}

static void step(void)
{
    static const int64_t timeouts[] = {0, -1, 5, 20, -1};
    client_t *c = &C[rnd(NCLIENT)];
    uint64_t k = rnd(100);

    if (c->pending) {
        if (k < 10) {
            c->pending = 0;
            engine_cancel(F.e, &c->t->r);
        }
    } else if (c->holding) {
        if (k < 70) {
            int st = fx_lease_op(&F, ENGINE_LEASE_RELEASE, c->lease);
            ASSERT(st == 0 || st == SEMA_EEXPIRED || st == SEMA_ECANCELED);
            c->holding = 0;
        } else if (k < 74) {
            (void)fx_lease_op(&F, ENGINE_LEASE_REVOKE, c->lease);
            c->holding = 0;
        }
    } else {
        start(c, timeouts[rnd(5)]);
    }
    k = rnd(1000);
    if (k < 8) {
        int i = (int)rnd(3); /* not the rate's: its model keeps its bucket */
        treq_t *t = treq_new(ENGINE_SEM_RESIZE, sem_name(i));
        t->r.capacity = 1 + rnd(6);
        if (with_tenants) { /* the grants the resize makes keep the new cap */
            t->r.tenant_max = 1 + rnd(t->r.capacity);
            t->r.limits = ENGINE_LIMIT_TENANT_MAX;
            S[i].tenant_max = t->r.tenant_max;
            ASSERT_LT(S[i].tm_n, 8);
            S[i].tm_next[(S[i].tm_head + S[i].tm_n++) % 8] = t->r.tenant_max;
        }
        ASSERT_OK(fx_do(&F, t)); /* its "resized" event gives the capacity */
        treq_free(t);
    } else if (k < 60) {
        int never = 0;
        fx_run_until(&F, &never, 2); /* timeouts, expiries, the rate's timer */
    }
    check_done();
}

/* Nobody new: holders give back what they get, and every request waiting forever must be
 * granted in the end (those with a timeout may time out instead). */
static void drain(void)
{
    uint64_t t0 = uv_hrtime();
    int left = 1;

    while (left && uv_hrtime() - t0 < 20 * 1000000000ull) {
        int never = 0;
        left = 0;
        for (int i = 0; i < NCLIENT; i++) {
            if (C[i].holding) {
                (void)fx_lease_op(&F, ENGINE_LEASE_RELEASE, C[i].lease);
                C[i].holding = 0;
            }
            left |= C[i].pending;
        }
        fx_run_until(&F, &never, 5);
        check_done();
    }
    for (int i = 0; i < NCLIENT; i++)
        if (C[i].pending)
            TEST_FAIL_("client %d still waits with nothing held: a deadlock", i);
    for (int i = 0; i < NSEM; i++) {
        ASSERT_EQ(fx_state(&F, sem_name(i), "held"), 0);
        ASSERT_EQ(fx_state(&F, sem_name(i), "waiting"), 0);
    }
}

/* Every client makes requests on several semaphores (with tenants: naming them): a back end
 * without them skips. (The probe is heavier than its semaphore: it takes nothing where it is
 * served.) */
static void skip_without_multi(void)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE_MULTI, NULL);
    engine_part_t part = {sem_name(0), strlen(sem_name(0)), S[0].capacity + 1, 0};
    int st;

    t->r.parts = &part;
    t->r.nparts = 1;
    t->r.timeout_ms = 0;
    t->r.tenant = with_tenants ? "probe" : NULL;
    st = fx_do(&F, t);
    treq_free(t);
    if (st == SEMA_ENOTSUP)
        TEST_SKIP(with_tenants ? "this back end does not serve requests on several semaphores "
                                 "naming a tenant"
                               : "this back end does not serve requests on several semaphores");
}

static void run(int tenants, long steps)
{
    uint64_t grants = 0;

    with_tenants = tenants;
    nseen = 0;
    nreq = nqueued = 0;
    fx_init_patient(&F); /* (the checks here are about admission) */
    for (int i = 0; i < NSEM; i++)
        create_sem(i, i == 3 ? 8 : 1 + rnd(6));
    skip_without_multi();
    for (int i = 0; i < NCLIENT; i++)
        C[i].t = treq_new(ENGINE_ACQUIRE_MULTI, NULL);
    for (long i = 0; i < steps; i++) {
        step();
        if (nseen > NSEEN - 64)
            nseen = 0; /* forget old leases (their checks are done) */
    }
    ndone = 0;
    drain();
    for (int i = 0; i < NSEM; i++) {
        grants += S[i].grants;
        engine_unsubscribe(F.e, S[i].sub);
    }
    fprintf(stderr, "limits stress (%s tenants): %ld steps, %llu grants, %zu waits in a line\n",
            tenants ? "with" : "no", steps, (unsigned long long)grants, nqueued);
    ASSERT_GT(grants, (uint64_t)steps / 50); /* (about one step in ten grants) */
    ASSERT_GT(nqueued, (size_t)steps / 50);  /* (the FIFO check has lines to judge) */
    fx_free(&F);
    free(R);
    R = NULL;
    req_cap = 0;
    for (int i = 0; i < NCLIENT; i++) {
        treq_free(C[i].t);
        memset(&C[i], 0, sizeof C[i]);
    }
}

/* Steps per case: on Redis each is a round trip to a script that works on several
 * semaphores, so fewer keep the case within seconds. */
static long steps(void)
{
    return test_scale(fx_on_redis() ? 5000 : 20000);
}

TEST(random_overlapping_sets_keep_capacity_all_at_once_fifo_and_drain)
{
    run(0, steps());
}

TEST(random_sets_with_tenants_and_caps_keep_tenant_max_and_drain)
{
    run(1, steps());
}
