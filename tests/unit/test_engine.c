/* SPDX-License-Identifier: MIT */
/* test_engine.c - semad's engine on the embedded back end driven directly on a libuv loop: one case
 * per operation and rule, and the regression tests for the pitfalls that apply to the engine. */
#include <ctype.h>
#include "test_engine_util.h"

#include "common/strbuf.h"

/* ---- semaphores: create, get, delete, resize, list ---- */

TEST(sem_put_creates_then_identical_then_conflict)
{
    fx_t f;
    treq_t *t;

    fx_init(&f);
    t = treq_new(ENGINE_SEM_PUT, "a");
    t->r.capacity = 3;
    ASSERT_OK(fx_do(&f, t));
    ASSERT_EQ(t->created, 1);
    ASSERT_EQ(jint(t->res, "capacity"), 3);
    ASSERT_EQ(jint(t->res, "available"), 3);
    ASSERT_EQ(jint(t->res, "held"), 0);
    ASSERT_EQ(jint(t->res, "fence"), 0);
    ASSERT(json_is_array(json_object_get(t->res, "holders")));
    ASSERT(json_is_array(json_object_get(t->res, "waiters")));
    treq_free(t);
    t = treq_new(ENGINE_SEM_PUT, "a");
    t->r.capacity = 3;
    ASSERT_OK(fx_do(&f, t));
    ASSERT_EQ(t->created, 0);
    treq_free(t);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_PUT, "a", 4), SEMA_EEXIST);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_PUT, "b", 0), SEMA_EINVAL);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_PUT, "c", ((uint64_t)1 << 53) + 1), SEMA_EINVAL);
    fx_free(&f);
}

TEST(sem_names_are_plain_strings)
{
    static const char *const names[] = {"constructor", "__proto__", "toString",
                                        "a.b c",       "x%2Fy",     "\xc3\xa9t\xc3\xa9"};
    fx_t f;

    fx_init(&f);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        fx_put(&f, names[i], i + 1);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        ASSERT_EQ(fx_state(&f, names[i], "capacity"), (int64_t)i + 1);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_PUT, "\xff\xfe", 1), SEMA_EINVAL);
    fx_free(&f);
}

TEST(sem_name_limits)
{
    fx_t f;
    char big[300];

    fx_init(&f);
    memset(big, 'n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    treq_t *t = treq_new(ENGINE_SEM_PUT, "x");
    t->r.name = big;
    t->r.name_len = strlen(big);
    t->r.capacity = 1;
    ASSERT_EQ(fx_do(&f, t), SEMA_ENAMETOOLONG);
    ASSERT_STREQ(t->r.message, "name is longer than the configured maximum of 256 bytes");
    treq_free(t);
    t = treq_new(ENGINE_SEM_GET, "x");
    t->r.name = "";
    t->r.name_len = 0;
    ASSERT_EQ(fx_do(&f, t), SEMA_EINVAL);
    treq_free(t);
    fx_free(&f);
}

TEST(sem_get_unknown_is_enoent)
{
    fx_t f;

    fx_init(&f);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_GET, "nope", 0), SEMA_ENOENT);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_DELETE, "nope", 0), SEMA_ENOENT);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_RESIZE, "nope", 3), SEMA_ENOENT);
    ASSERT_EQ(fx_op(&f, ENGINE_WAIT_IDLE, "nope", 0), SEMA_ENOENT);
    treq_t *a = fx_acquire(&f, "nope", 1, -1);
    ASSERT_EQ(a->status, SEMA_ENOENT);
    treq_free(a);
    fx_free(&f);
}

TEST(sem_delete_fails_waiters_and_voids_leases)
{
    fx_t f;
    treq_t *a, *b;

    fx_init(&f);
    fx_put(&f, "d", 2);
    a = fx_acquire(&f, "d", 2, -1);
    b = fx_acquire(&f, "d", 1, -1);
    ASSERT_EQ(b->done, 0);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_DELETE, "d", 0));
    ASSERT_EQ(b->done, 1);
    ASSERT_EQ(b->status, SEMA_ECANCELED);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, lease_id(a)), SEMA_ECANCELED);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)), SEMA_ECANCELED);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_GET, "d", 0), SEMA_ENOENT);
    /* the name can be created again, fresh */
    fx_put(&f, "d", 5);
    ASSERT_EQ(fx_state(&f, "d", "available"), 5);
    treq_free(a);
    treq_free(b);
    fx_free(&f);
}

TEST(sem_resize_grow_admits_and_shrink_never_revokes)
{
    fx_t f;
    treq_t *a, *b, *c;

    fx_init(&f);
    fx_put(&f, "r", 4);
    a = fx_acquire(&f, "r", 3, -1);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_RESIZE, "r", 2));
    ASSERT_EQ(fx_state(&f, "r", "available"), -1);
    ASSERT_EQ(fx_state(&f, "r", "held"), 3);
    b = fx_acquire(&f, "r", 1, -1);
    ASSERT_EQ(b->done, 0);
    c = fx_acquire(&f, "r", 2, -1);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_RESIZE, "r", 1));
    ASSERT_EQ(c->done, 1);
    ASSERT_EQ(c->status, SEMA_EINVAL); /* heavier than the new capacity */
    ASSERT_EQ(b->done, 0);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_RESIZE, "r", 5)); /* grow: 5 - 3 = 2 available */
    ASSERT_EQ(b->done, 1);
    ASSERT_EQ(b->status, 0);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_RESIZE, "r", 0), SEMA_EINVAL);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    fx_free(&f);
}

/* A page of a list (ENGINE_SEM_LIST, ENGINE_LOCK_LIST) as its JSON reply. */
static json_t *list_of(fx_t *f, engine_op_t op, const char *prefix, const char *cursor,
                       uint64_t limit)
{
    treq_t *t = treq_new(op, NULL);
    json_t *res;

    t->r.prefix = prefix;
    t->r.cursor = cursor;
    t->r.limit = limit;
    ASSERT_OK(fx_do(f, t));
    res = json_incref(t->res);
    treq_free(t);
    return res;
}

static json_t *list(fx_t *f, const char *prefix, const char *cursor, uint64_t limit)
{
    return list_of(f, ENGINE_SEM_LIST, prefix, cursor, limit);
}

TEST(sem_list_orders_pages_and_filters)
{
    fx_t f;
    char name[32];
    json_t *res;
    char cursor[64];
    int seen = 0;

    fx_init(&f);
    for (int i = 29; i >= 0; i--) {
        snprintf(name, sizeof(name), "job-%02d", i);
        fx_put(&f, name, 1);
    }
    fx_put(&f, "other", 1);
    fx_put(&f, "a", 1);
    cursor[0] = '\0';
    for (int page = 0; page < 10; page++) {
        json_t *arr, *nc;
        res = list(&f, "job-", cursor[0] ? cursor : NULL, 7);
        arr = json_object_get(res, "semaphores");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            snprintf(name, sizeof(name), "job-%02d", seen++);
            ASSERT_STREQ(jstr(json_array_get(arr, i), "name"), name);
        }
        nc = json_object_get(res, "next_cursor");
        if (json_is_null(nc)) {
            json_decref(res);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", json_string_value(nc));
        json_decref(res);
    }
    ASSERT_EQ(seen, 30);
    res = list(&f, NULL, NULL, 0);
    ASSERT_EQ(json_array_size(json_object_get(res, "semaphores")), 32);
    ASSERT_STREQ(jstr(json_array_get(json_object_get(res, "semaphores"), 0), "name"), "a");
    ASSERT(json_is_null(json_object_get(res, "next_cursor")));
    json_decref(res);
    res = list(&f, "zzz", NULL, 5);
    ASSERT_EQ(json_array_size(json_object_get(res, "semaphores")), 0);
    json_decref(res);
    fx_free(&f);
}

/* ---- acquire ---- */

TEST(acquire_grants_lease_with_fields)
{
    fx_t f;
    treq_t *a;

    fx_init(&f);
    fx_put(&f, "s", 3);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 2;
    a->r.ttl_ms = 5000;
    a->r.owner = "worker-1";
    ASSERT_OK(fx_do(&f, a));
    ASSERT(strlen(lease_id(a)) >= 24);
    ASSERT_STREQ(jstr(a->res, "name"), "s");
    ASSERT_EQ(jint(a->res, "weight"), 2);
    ASSERT_EQ(jint(a->res, "ttl_ms"), 5000);
    ASSERT_GE(jint(a->res, "fence"), 1);
    ASSERT_STREQ(jstr(a->res, "owner"), "worker-1");
    ASSERT_EQ(jint(a->res, "expires_at") - jint(a->res, "acquired_at"), 5000);
    ASSERT_EQ(fx_state(&f, "s", "available"), 1);
    ASSERT_EQ(fx_state(&f, "s", "held"), 2);
    ASSERT_EQ(fx_state(&f, "s", "fence"), jint(a->res, "fence"));
    treq_free(a);
    fx_free(&f);
}

TEST(acquire_default_and_max_ttl)
{
    fx_t f;
    treq_t *a;

    fx_init(&f);
    fx_put(&f, "s", 3);
    a = fx_acquire(&f, "s", 1, -1);
    ASSERT_EQ(jint(a->res, "ttl_ms"), 60000);
    treq_free(a);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = 86400001;
    ASSERT_EQ(fx_do(&f, a), SEMA_EINVAL);
    treq_free(a);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = -5;
    ASSERT_EQ(fx_do(&f, a), SEMA_EINVAL);
    treq_free(a);
    fx_free(&f);
}

TEST(acquire_lease_ids_unique)
{
    fx_t f;
    treq_t *a[64];

    fx_init(&f);
    fx_put(&f, "s", 64);
    for (int i = 0; i < 64; i++)
        a[i] = fx_acquire(&f, "s", 1, -1);
    for (int i = 0; i < 64; i++)
        for (int j = i + 1; j < 64; j++)
            ASSERT(strcmp(lease_id(a[i]), lease_id(a[j])) != 0);
    for (int i = 0; i < 64; i++)
        treq_free(a[i]);
    fx_free(&f);
}

/* Ids go on command lines (`sema release ID`): none may start like an option. */
TEST(lease_ids_start_with_a_letter_or_digit)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "s", 1);
    for (int i = 0; i < 2000; i++) {
        treq_t *a = fx_acquire(&f, "s", 1, -1);
        const char *id = lease_id(a);
        ASSERT_EQ(strlen(id), 24);
        ASSERT(isalnum((unsigned char)id[0]));
        ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id));
        treq_free(a);
    }
    fx_free(&f);
}

TEST(acquire_fifo_release_grants_several)
{
    fx_t f;
    treq_t *a, *b, *w[3];

    fx_init(&f);
    fx_put(&f, "s", 10);
    a = fx_acquire(&f, "s", 4, -1);
    b = fx_acquire(&f, "s", 6, -1);
    for (int i = 0; i < 3; i++)
        w[i] = fx_acquire(&f, "s", 1, -1);
    ASSERT_EQ(fx_state(&f, "s", "waiting"), 3);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(w[i]->status, 0);
        ASSERT_EQ(w[i]->done, 1);
    }
    /* fences strictly increase in grant order */
    ASSERT_LT(jint(b->res, "fence"), jint(w[0]->res, "fence"));
    ASSERT_LT(jint(w[0]->res, "fence"), jint(w[1]->res, "fence"));
    ASSERT_LT(jint(w[1]->res, "fence"), jint(w[2]->res, "fence"));
    ASSERT_EQ(fx_state(&f, "s", "available"), 1);
    treq_free(a);
    treq_free(b);
    for (int i = 0; i < 3; i++)
        treq_free(w[i]);
    fx_free(&f);
}

TEST(try_never_jumps_the_queue)
{
    fx_t f;
    treq_t *a, *b, *t;

    fx_init(&f);
    fx_put(&f, "s", 3);
    a = fx_acquire(&f, "s", 2, -1);
    b = fx_acquire(&f, "s", 2, -1);
    t = fx_acquire(&f, "s", 1, 0);
    ASSERT_EQ(t->status, SEMA_EBUSY);
    fx_free(&f); /* first: a parked request must outlive the engine's use of it */
    treq_free(a);
    treq_free(b);
    treq_free(t);
}

TEST(wait_idle_queues_fifo_and_completes_when_all_back)
{
    fx_t f;
    treq_t *a, *b, *w, *c;

    fx_init(&f);
    fx_put(&f, "s", 3);
    w = treq_new(ENGINE_WAIT_IDLE, "s");
    ASSERT_OK(fx_do(&f, w)); /* idle now */
    ASSERT(json_is_true(json_object_get(w->res, "idle")));
    treq_free(w);
    a = fx_acquire(&f, "s", 2, -1);
    b = fx_acquire(&f, "s", 2, -1);
    w = treq_new(ENGINE_WAIT_IDLE, "s");
    ASSERT_OK(engine_submit(f.e, &w->r));
    c = fx_acquire(&f, "s", 1, -1);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT_EQ(b->done, 1);
    ASSERT_EQ(w->done, 0);
    ASSERT_EQ(c->done, 0); /* behind the wait-idle */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(b)));
    ASSERT_EQ(w->done, 1);
    ASSERT_EQ(c->done, 1);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    treq_free(w);
    fx_free(&f);
}

/* ---- leases ---- */

TEST(lease_get_renew_release_and_tombstones)
{
    fx_t f;
    treq_t *a, *t;
    char id[64];

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 1, -1);
    snprintf(id, sizeof(id), "%s", lease_id(a));
    t = treq_new(ENGINE_LEASE_GET, id);
    ASSERT_OK(fx_do(&f, t));
    ASSERT_STREQ(jstr(t->res, "lease"), id);
    treq_free(t);
    t = treq_new(ENGINE_LEASE_RENEW, id);
    t->r.ttl_ms = 120000;
    ASSERT_OK(fx_do(&f, t));
    ASSERT_EQ(jint(t->res, "ttl_ms"), 120000);
    ASSERT_GE(jint(t->res, "expires_at"), jint(a->res, "expires_at"));
    treq_free(t);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id));
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id), SEMA_ESTALE);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RENEW, id), SEMA_ESTALE);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, id), SEMA_ESTALE);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, "never-seen-id-000000000000"), SEMA_ENOENT);
    ASSERT_EQ(fx_state(&f, "s", "available"), 2);
    treq_free(a);
    fx_free(&f);
}

/* Every ended lease id answers why (410) while it is among the newest 100,000: across the
 * tombstones' array growing (1,024 entries, doubled until 100,000) and then turning over. */
TEST(tombstones_keep_the_newest_100000_ids_across_growth)
{
    enum { N = 100000 + 1500 };
    fx_t f;
    char(*ids)[32] = calloc(N, sizeof(*ids));

    if (fx_on_redis())
        TEST_SKIP("the in-memory back end's tombstones: on Redis an ended lease's record "
                  "lives 10 minutes, with no count");
    ASSERT(ids != NULL);
    fx_init(&f);
    fx_put(&f, "s", 1);
    for (int i = 0; i < N; i++) {
        treq_t *a = fx_acquire(&f, "s", 1, -1);
        snprintf(ids[i], sizeof(ids[i]), "%s", lease_id(a));
        ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, ids[i]));
        treq_free(a);
        if (i == 2500) /* the array grew twice: every id so far is still known */
            for (int j = 0; j <= i; j++)
                ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, ids[j]), SEMA_ESTALE);
    }
    for (int j = 0; j < 1500; j++) /* the oldest went, in order */
        ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, ids[j]), SEMA_ENOENT);
    for (int j = 1500; j < N; j += 997)
        ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, ids[j]), SEMA_ESTALE);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_GET, ids[N - 1]), SEMA_ESTALE);
    free(ids);
    fx_free(&f);
}

TEST(lease_expiry_returns_units_at_once_active_timer)
{
    fx_t f;
    treq_t *a, *w;
    char id[64];

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = 60000; /* w parks behind it however slow this machine is */
    ASSERT_OK(fx_do(&f, a));
    snprintf(id, sizeof(id), "%s", lease_id(a));
    w = fx_acquire(&f, "s", 1, -1);
    ASSERT_EQ(w->done, 0);
    /* the lease now ends 30 ms from its renewal; then nobody calls the engine: only its
     * timer can hand the unit over */
    treq_t *r = treq_new(ENGINE_LEASE_RENEW, id);
    r->r.ttl_ms = 30;
    ASSERT_OK(fx_do(&f, r));
    treq_free(r);
    ASSERT(fx_run_until(&f, &w->done, 2000));
    ASSERT_EQ(w->status, 0);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id), SEMA_EEXPIRED);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RENEW, id), SEMA_EEXPIRED);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

TEST(lease_revoke_returns_units_and_bumps_fence)
{
    fx_t f;
    treq_t *a, *w;
    char id[64];
    int64_t fence;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    snprintf(id, sizeof(id), "%s", lease_id(a));
    fence = jint(a->res, "fence");
    w = fx_acquire(&f, "s", 1, -1);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_REVOKE, id));
    ASSERT_EQ(w->done, 1);
    ASSERT_GT(jint(w->res, "fence"), fence + 1); /* the revoke took a fence value too */
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RELEASE, id), SEMA_EREVOKED);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_RENEW, id), SEMA_EREVOKED);
    ASSERT_EQ(fx_lease_op(&f, ENGINE_LEASE_REVOKE, id), SEMA_EREVOKED);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

/* A lease op sent by a token (semad --auth): `who` NULL is semad itself. */
static int lease_op_as(fx_t *f, engine_op_t op, const char *id, const char *who, int admin,
                       const char **msg)
{
    treq_t *t = treq_new(op, id);
    int st;

    t->r.principal = who;
    t->r.principal_admin = admin;
    t->r.ttl_ms = 60000;
    st = fx_do(f, t);
    if (msg != NULL)
        *msg = t->msg;
    treq_free(t);
    return st;
}

static treq_t *acquire_as(fx_t *f, const char *name, uint64_t weight, const char *who,
                          const char *key)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE, name);

    t->r.weight = weight;
    t->r.principal = who;
    if (key != NULL) {
        snprintf(t->idem, sizeof t->idem, "%s", key);
        t->r.idem_key = t->idem;
    }
    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_settle(f);
    return t;
}

TEST(leases_remember_the_token_that_took_them)
{
    fx_t f;
    treq_t *a, *k, *w, *x, *c;
    const char *msg = NULL;
    char id[64];

    fx_init(&f);
    fx_put(&f, "p", 2);
    a = acquire_as(&f, "p", 1, "alice", NULL);
    snprintf(id, sizeof(id), "%s", lease_id(a));
    /* another token may read it, not end or renew it */
    ASSERT_OK(lease_op_as(&f, ENGINE_LEASE_GET, id, "bob", 0, NULL));
    ASSERT_EQ(lease_op_as(&f, ENGINE_LEASE_RENEW, id, "bob", 0, &msg), SEMA_EACCES);
    ASSERT_STREQ(msg,
                 "the lease was taken by another token (only its token or an admin may end it)");
    ASSERT_EQ(lease_op_as(&f, ENGINE_LEASE_RELEASE, id, "bob", 0, NULL), SEMA_EACCES);
    ASSERT_EQ(lease_op_as(&f, ENGINE_LEASE_REVOKE, id, "bob", 0, NULL), SEMA_EACCES);
    ASSERT_EQ(fx_state(&f, "p", "held"), 1);
    ASSERT_OK(lease_op_as(&f, ENGINE_LEASE_RENEW, id, "alice", 0, NULL));
    ASSERT_OK(lease_op_as(&f, ENGINE_LEASE_RELEASE, id, "alice", 0, NULL));
    /* an Idempotency-Key names its token's request: another token gets no lease from it */
    k = acquire_as(&f, "p", 1, "alice", "k1");
    ASSERT_EQ(k->status, 0);
    x = acquire_as(&f, "p", 1, "bob", "k1");
    ASSERT_EQ(x->done, 1);
    ASSERT_EQ(x->status, SEMA_EACCES);
    ASSERT_STREQ(x->msg, "the Idempotency-Key names a request of another token");
    treq_free(x);
    x = acquire_as(&f, "p", 1, "alice", "k1");
    ASSERT_STREQ(lease_id(x), lease_id(k));
    treq_free(x);
    /* nor takes the place of its parked request */
    w = acquire_as(&f, "p", 2, "alice", "k2");
    ASSERT_EQ(w->done, 0);
    x = acquire_as(&f, "p", 2, "bob", "k2");
    ASSERT_EQ(x->done, 1);
    ASSERT_EQ(x->status, SEMA_EACCES);
    treq_free(x);
    ASSERT_EQ(w->done, 0);
    /* an admin token, and semad itself, may end any lease */
    ASSERT_OK(lease_op_as(&f, ENGINE_LEASE_RELEASE, lease_id(k), "root", 1, NULL));
    ASSERT_EQ(w->done, 1);
    ASSERT_EQ(w->status, 0);
    ASSERT_EQ(lease_op_as(&f, ENGINE_LEASE_RELEASE, lease_id(w), "bob", 0, NULL), SEMA_EACCES);
    /* a plain acquire that waits keeps its token too (on Redis: sent in one argument, which
     * the script reads back into the general path's, and so is the release that grants it) */
    c = acquire_as(&f, "p", 1, "carol", NULL);
    ASSERT_EQ(c->done, 0);
    ASSERT_OK(lease_op_as(&f, ENGINE_LEASE_RELEASE, lease_id(w), NULL, 0, NULL));
    ASSERT_EQ(c->done, 1);
    ASSERT_EQ(c->status, 0);
    ASSERT_EQ(lease_op_as(&f, ENGINE_LEASE_RELEASE, lease_id(c), "bob", 0, NULL), SEMA_EACCES);
    ASSERT_OK(lease_op_as(&f, ENGINE_LEASE_RELEASE, lease_id(c), "carol", 0, NULL));
    ASSERT_EQ(fx_state(&f, "p", "available"), 2);
    treq_free(a);
    treq_free(k);
    treq_free(w);
    treq_free(c);
    fx_free(&f);
}

TEST(lease_renew_keeps_it_past_its_first_ttl)
{
    fx_t f;
    treq_t *a, *t;
    char id[64];
    int tick = 0, st;

    fx_init(&f);
    fx_put(&f, "s", 1);
    /* The renewal must come before the first ttl ends: on a machine too busy for that, the
     * lease is gone (EEXPIRED, as it should be) and the case runs again with a longer one. */
    for (int64_t ttl = 80;; ttl *= 4) {
        a = treq_new(ENGINE_ACQUIRE, "s");
        a->r.weight = 1;
        a->r.ttl_ms = ttl;
        ASSERT_OK(fx_do(&f, a));
        snprintf(id, sizeof(id), "%s", lease_id(a));
        t = treq_new(ENGINE_LEASE_RENEW, id);
        t->r.ttl_ms = 5000 + 2 * ttl;
        st = fx_do(&f, t);
        treq_free(t);
        if (st == 0) {
            fx_run_until(&f, &tick, (int)ttl + 120); /* past the first ttl */
            ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_GET, id));
            treq_free(a);
            break;
        }
        ASSERT_EQ(st, SEMA_EEXPIRED);
        ASSERT(ttl < 20000);
        treq_free(a);
    }
    fx_free(&f);
}

/* pitfall: a lease that ends before the expires_at it was told lets its holder work on past
 * the moment the engine handed its units on. Its deadline must be counted from when it was
 * granted, not from when the event loop last read its clock: the loop does not run during
 * the pause below, as during one long turn of a busy server. */
TEST(a_lease_ends_no_sooner_than_the_expires_at_it_told)
{
    fx_t f;
    treq_t *a, *w;
    struct timespec pause = {0, 300 * 1000000L}, ts;
    int64_t expires_at;

    fx_init(&f);
    fx_put(&f, "s", 1);
    nanosleep(&pause, NULL);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.ttl_ms = 500;
    ASSERT_OK(fx_do(&f, a));
    expires_at = jint(a->res, "expires_at");
    w = fx_acquire(&f, "s", 1, -1);
    ASSERT(fx_run_until(&f, &w->done, FX_DO_MS));
    ASSERT_EQ(w->status, 0);
    clock_gettime(CLOCK_REALTIME, &ts);
    ASSERT_GE((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, expires_at);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

/* ---- keyed locks ---- */

static treq_t *lock_acquire(fx_t *f, const char *key, int mode, int64_t timeout_ms)
{
    treq_t *t = treq_new(ENGINE_LOCK_ACQUIRE, key);

    t->r.mode = mode;
    t->r.timeout_ms = timeout_ms;
    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_settle(f);
    return t;
}

TEST(lock_shared_exclusive_fifo_and_ephemeral_key)
{
    fx_t f;
    engine_config_t cfg;
    treq_t *r1, *r2, *w, *r3, *g;
    engine_stats_t st;

    engine_config_default(&cfg);
    cfg.lock_readers = 4;
    fx_init_cfg(&f, &cfg);
    ASSERT_EQ(fx_op(&f, ENGINE_LOCK_GET, "k", 0), SEMA_ENOENT);
    r1 = lock_acquire(&f, "k", ENGINE_MODE_SHARED, -1);
    r2 = lock_acquire(&f, "k", ENGINE_MODE_SHARED, -1);
    w = lock_acquire(&f, "k", ENGINE_MODE_EXCLUSIVE, -1);
    r3 = lock_acquire(&f, "k", ENGINE_MODE_SHARED, -1); /* behind the writer: no starvation */
    ASSERT_EQ(r1->status, 0);
    ASSERT_STREQ(jstr(r1->res, "mode"), "shared");
    ASSERT_STREQ(jstr(r1->res, "key"), "k");
    ASSERT_EQ(w->done, 0);
    ASSERT_EQ(r3->done, 0);
    g = treq_new(ENGINE_LOCK_GET, "k");
    ASSERT_OK(fx_do(&f, g));
    ASSERT_EQ(jint(g->res, "readers"), 2); /* the shared holders now */
    ASSERT_EQ(jint(g->res, "max_readers"), 4);
    ASSERT_EQ(json_array_size(json_object_get(g->res, "holders")), 2);
    ASSERT_EQ(json_array_size(json_object_get(g->res, "waiters")), 2);
    treq_free(g);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(r1)));
    ASSERT_EQ(w->done, 0);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(r2)));
    ASSERT_EQ(w->done, 1);
    ASSERT_STREQ(jstr(w->res, "mode"), "exclusive");
    ASSERT_EQ(r3->done, 0);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(w)));
    ASSERT_EQ(r3->done, 1);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(r3)));
    engine_stats(f.e, &st);
    ASSERT_EQ(st.locks, 0);
    ASSERT_EQ(fx_op(&f, ENGINE_LOCK_GET, "k", 0), SEMA_ENOENT);
    treq_free(r1);
    treq_free(r2);
    treq_free(w);
    treq_free(r3);
    fx_free(&f);
}

/* The "locks" of a page of lock keys. */
static json_t *lock_list(fx_t *f, const char *prefix, const char *cursor, uint64_t limit)
{
    json_t *res = list_of(f, ENGINE_LOCK_LIST, prefix, cursor, limit);
    json_t *locks = json_incref(json_object_get(res, "locks"));

    json_decref(res);
    return locks;
}

/* The keys held or awaited, by key, in pages; a key leaves the list when it leaves the
 * engine; semaphores are not in it. */
TEST(lock_list_shows_the_keys_held_or_awaited)
{
    fx_t f;
    engine_config_t cfg;
    treq_t *r1, *r2, *w, *x;
    json_t *arr;

    engine_config_default(&cfg);
    cfg.lock_readers = 4;
    fx_init_cfg(&f, &cfg);
    fx_put(&f, "doc/semaphore", 1);
    r1 = lock_acquire(&f, "doc/1", ENGINE_MODE_SHARED, -1);
    r2 = lock_acquire(&f, "doc/1", ENGINE_MODE_SHARED, -1);
    w = lock_acquire(&f, "doc/1", ENGINE_MODE_EXCLUSIVE, -1);
    x = lock_acquire(&f, "doc/0", ENGINE_MODE_EXCLUSIVE, -1);
    arr = lock_list(&f, "doc/", NULL, 0);
    ASSERT_EQ(json_array_size(arr), 2);
    ASSERT_STREQ(jstr(json_array_get(arr, 0), "key"), "doc/0");
    ASSERT(json_is_true(json_object_get(json_array_get(arr, 0), "exclusive")));
    ASSERT_STREQ(jstr(json_array_get(arr, 1), "key"), "doc/1");
    ASSERT_EQ(jint(json_array_get(arr, 1), "readers"), 2);
    ASSERT(json_is_false(json_object_get(json_array_get(arr, 1), "exclusive")));
    ASSERT_EQ(jint(json_array_get(arr, 1), "waiting"), 1);
    ASSERT(jint(json_array_get(arr, 1), "waiting_since") > 0);
    json_decref(arr);
    arr = lock_list(&f, NULL, "doc/0", 1); /* the page after doc/0 */
    ASSERT_EQ(json_array_size(arr), 1);
    ASSERT_STREQ(jstr(json_array_get(arr, 0), "key"), "doc/1");
    json_decref(arr);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(x)));
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(r1)));
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(r2)));
    ASSERT_EQ(w->done, 1);
    arr = lock_list(&f, NULL, NULL, 0);
    ASSERT_EQ(json_array_size(arr), 1);
    ASSERT(json_is_true(json_object_get(json_array_get(arr, 0), "exclusive")));
    json_decref(arr);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(w)));
    arr = lock_list(&f, NULL, NULL, 0);
    ASSERT_EQ(json_array_size(arr), 0);
    json_decref(arr);
    treq_free(r1);
    treq_free(r2);
    treq_free(w);
    treq_free(x);
    fx_free(&f);
}

TEST(lock_failed_try_and_bad_mode_leave_no_key)
{
    fx_t f;
    treq_t *x, *t, *b;
    engine_stats_t st;

    fx_init(&f);
    x = lock_acquire(&f, "k", ENGINE_MODE_EXCLUSIVE, -1);
    t = lock_acquire(&f, "k", ENGINE_MODE_SHARED, 0);
    ASSERT_EQ(t->status, SEMA_EBUSY);
    b = lock_acquire(&f, "k2", 7, -1);
    ASSERT_EQ(b->status, SEMA_EINVAL);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(x)));
    engine_stats(f.e, &st);
    ASSERT_EQ(st.locks, 0);
    treq_free(x);
    treq_free(t);
    treq_free(b);
    fx_free(&f);
}

/* ---- legacy ---- */

static int64_t legacy(fx_t *f, engine_op_t op, const char *name, int *status)
{
    treq_t *t = treq_new(op, name);
    int64_t v = INT64_MIN;

    *status = fx_do(f, t);
    if (*status == 0 && t->res != NULL)
        v = jint(t->res, "value");
    treq_free(t);
    return v;
}

TEST(legacy_ops_and_consistency_with_v1)
{
    fx_t f;
    int st;
    treq_t *w;

    fx_init(&f);
    ASSERT_OK(fx_op(&f, ENGINE_LEGACY_CREATE, "L", 1));
    ASSERT_EQ(fx_op(&f, ENGINE_LEGACY_CREATE, "L", 1), SEMA_EEXIST);
    ASSERT_EQ(legacy(&f, ENGINE_LEGACY_VALUE, "L", &st), 1);
    ASSERT_EQ(legacy(&f, ENGINE_LEGACY_DOWN, "L", &st), 0);
    legacy(&f, ENGINE_LEGACY_DOWN, "L", &st);
    ASSERT_EQ(st, SEMA_EBUSY);
    ASSERT_EQ(legacy(&f, ENGINE_LEGACY_UP, "L", &st), 1);
    ASSERT_EQ(legacy(&f, ENGINE_LEGACY_UP, "L", &st), 2); /* no upper bound */
    ASSERT_EQ(fx_state(&f, "L", "available"), 2);
    ASSERT_EQ(fx_state(&f, "L", "capacity"), 1);
    /* a v1 waiter blocks a legacy down (a try never jumps the queue) */
    w = fx_acquire(&f, "L", 1, -1);
    ASSERT_EQ(w->status, 0);
    ASSERT_EQ(legacy(&f, ENGINE_LEGACY_DOWN, "L", &st), 0);
    treq_t *q = fx_acquire(&f, "L", 1, -1);
    ASSERT_EQ(q->done, 0);
    legacy(&f, ENGINE_LEGACY_DOWN, "L", &st);
    ASSERT_EQ(st, SEMA_EBUSY);
    legacy(&f, ENGINE_LEGACY_UP, "L", &st); /* up re-runs admission */
    ASSERT_EQ(q->done, 1);
    ASSERT_OK(fx_op(&f, ENGINE_LEGACY_DELETE, "L", 0));
    legacy(&f, ENGINE_LEGACY_VALUE, "L", &st);
    ASSERT_EQ(st, SEMA_ENOENT);
    legacy(&f, ENGINE_LEGACY_UP, "L", &st);
    ASSERT_EQ(st, SEMA_ENOENT);
    /* value 0 is allowed */
    ASSERT_OK(fx_op(&f, ENGINE_LEGACY_CREATE, "Z", 0));
    legacy(&f, ENGINE_LEGACY_DOWN, "Z", &st);
    ASSERT_EQ(st, SEMA_EBUSY);
    treq_free(w);
    treq_free(q);
    fx_free(&f);
}

/* ---- cancel, shutdown, submit errors ---- */

TEST(submit_rejects_malformed)
{
    fx_t f;
    engine_req_t r;

    fx_init(&f);
    memset(&r, 0, sizeof(r));
    r.op = ENGINE_SEM_GET;
    r.name = "x";
    ASSERT_EQ(engine_submit(f.e, &r), SEMA_EINVAL); /* no callback */
    r.cb = t_cb;
    r.op = ENGINE_OP_COUNT;
    ASSERT_EQ(engine_submit(f.e, &r), SEMA_EINVAL);
    r.op = ENGINE_SEM_GET;
    r.name = NULL;
    ASSERT_EQ(engine_submit(f.e, &r), SEMA_EINVAL);
    r.op = ENGINE_LEASE_GET; /* an operation on an id needs the id, not a name */
    r.name = "x";
    ASSERT_EQ(engine_submit(f.e, &r), SEMA_EINVAL);
    fx_free(&f);
}

TEST(shutdown_fails_parked_with_eshutdown)
{
    fx_t f;
    treq_t *a, *w, *l;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    w = fx_acquire(&f, "s", 1, 10000);
    l = lock_acquire(&f, "k", ENGINE_MODE_EXCLUSIVE, -1);
    treq_t *l2 = lock_acquire(&f, "k", ENGINE_MODE_SHARED, -1);
    engine_shutdown(f.e);
    ASSERT_EQ(w->done, 1);
    ASSERT_EQ(w->status, SEMA_ESHUTDOWN);
    ASSERT_EQ(l2->status, SEMA_ESHUTDOWN);
    treq_t *late = treq_new(ENGINE_SEM_GET, "s");
    ASSERT_EQ(engine_submit(f.e, &late->r), SEMA_ESHUTDOWN);
    uv_run(&f.loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&f.loop));
    treq_free(a);
    treq_free(w);
    treq_free(l);
    treq_free(l2);
    treq_free(late);
}

TEST(stats_and_metrics)
{
    fx_t f;
    treq_t *a, *w, *m;
    struct strbuf b;
    engine_stats_t st;
    engine_config_t cfg;

    engine_config_default(&cfg);
    cfg.metrics_max_semaphores = 2;
    fx_init_cfg(&f, &cfg);
    fx_put(&f, "m1", 1);
    fx_put(&f, "m2", 1);
    fx_put(&f, "z\"3", 1);
    a = fx_acquire(&f, "m1", 1, -1);
    w = fx_acquire(&f, "m1", 1, 20);
    fx_run_until(&f, &w->done, 2000);
    ASSERT_EQ(w->status, SEMA_ETIMEDOUT);
    engine_stats(f.e, &st);
    ASSERT_EQ(st.semaphores, 3);
    ASSERT_EQ(st.leases, 1);
    ASSERT_EQ(st.parked, 0);
    strbuf_init(&b, 0);
    m = treq_new(ENGINE_METRICS, NULL);
    m->r.text = &b;
    ASSERT_OK(fx_do(&f, m));
    treq_free(m);
    ASSERT_NOT_NULL(strstr(b.data, "semad_grants_total 1\n"));
    ASSERT_NOT_NULL(strstr(b.data, "semad_timeouts_total 1\n"));
    ASSERT_NOT_NULL(strstr(b.data, "semad_parked_waiters 0\n"));
    ASSERT_NOT_NULL(strstr(b.data, "semad_wait_seconds_bucket{le=\"+Inf\"} 1\n"));
    ASSERT_NOT_NULL(strstr(b.data, "semad_semaphore_held{name=\"m1\"} 1\n"));
    ASSERT_NOT_NULL(strstr(b.data, "semad_semaphore_held{name=\"m2\"} 0\n"));
    ASSERT_NULL(strstr(b.data, "z\\\"3")); /* past the series cap */
    strbuf_free(&b);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

/* /metrics and a stream's open, withdrawn while the back end reads them (on Redis: before the
 * answer can have come): the callback never runs, and nothing is written to the text. */
TEST(metrics_and_events_open_withdrawn_while_read_never_answer)
{
    fx_t f;
    treq_t *m, *o, *g;
    struct strbuf b;
    int was_m, was_o;
    size_t len;

    fx_init(&f);
    fx_put(&f, "w", 1);
    strbuf_init(&b, 0);
    m = treq_new(ENGINE_METRICS, NULL);
    m->r.text = &b;
    o = treq_new(ENGINE_EVENTS_OPEN, "w");
    ASSERT_OK(engine_submit(f.e, &m->r));
    ASSERT_OK(engine_submit(f.e, &o->r));
    was_m = m->done; /* (the embedded back end answers at once) */
    was_o = o->done;
    if (!was_m)
        engine_cancel(f.e, &m->r);
    if (!was_o)
        engine_cancel(f.e, &o->r);
    len = b.len;
    g = treq_new(ENGINE_SEM_GET, "w"); /* answered after what was asked before it */
    ASSERT_EQ(fx_do(&f, g), 0);
    fx_settle(&f);
    ASSERT_EQ(m->done, was_m);
    ASSERT_EQ(o->done, was_o);
    ASSERT_EQ(b.len, len);
    strbuf_free(&b);
    treq_free(m);
    treq_free(o);
    treq_free(g);
    fx_free(&f);
}

/* ---- events ---- */

typedef struct {
    char types[16][16];
    char ids[16][48];
    int n;
} evlog_t;

static void on_event(void *arg, const char *id, const char *type, const char *data, size_t len)
{
    evlog_t *l = arg;
    json_t *j = json_loadb(data, len, 0, NULL);

    ASSERT_NOT_NULL(json_object_get(j, "name"));
    json_decref(j);
    if (l->n < 16) {
        snprintf(l->ids[l->n], 48, "%s", id);
        snprintf(l->types[l->n++], 16, "%s", type);
    }
}

/* An acquire that finds room: granted, however long the back end takes to answer (on a
 * starved machine, Redis's answer may come after fx_settle's bound). */
static treq_t *acquire_free(fx_t *f, const char *name)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE, name);

    t->r.weight = 1;
    t->r.timeout_ms = -1;
    ASSERT_OK(fx_do(f, t));
    return t;
}

TEST(events_granted_released_expired_revoked_resized_deleted)
{
    fx_t f;
    evlog_t log = {0};
    engine_sub_t *sub;
    treq_t *a, *b, *c;
    static const char *const want[] = {"granted", "released", "granted", "revoked",
                                       "granted", "expired",  "resized", "deleted"};

    fx_init(&f);
    ASSERT_EQ(fx_subscribe(&f, "ev", on_event, &log, &sub), SEMA_ENOENT);
    fx_put(&f, "ev", 1);
    ASSERT_OK(fx_subscribe(&f, "ev", on_event, &log, &sub));
    a = acquire_free(&f, "ev");
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    b = acquire_free(&f, "ev");
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_REVOKE, lease_id(b)));
    c = treq_new(ENGINE_ACQUIRE, "ev");
    c->r.weight = 1;
    c->r.ttl_ms = 10;
    ASSERT_OK(fx_do(&f, c));
    while (log.n < 6) {
        int never = 0;
        fx_run_until(&f, &never, 20);
    }
    ASSERT_OK(fx_op(&f, ENGINE_SEM_RESIZE, "ev", 2));
    ASSERT_OK(fx_op(&f, ENGINE_SEM_DELETE, "ev", 0));
    fx_put(&f, "ev", 1); /* a new semaphore: the finished subscription hears nothing */
    treq_t *d = acquire_free(&f, "ev");
    ASSERT_EQ(log.n, 8);
    for (int i = 0; i < 8; i++)
        ASSERT_STREQ(log.types[i], want[i]);
    engine_unsubscribe(f.e, sub);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    treq_free(d);
    fx_free(&f);
}

TEST(events_unsubscribe_stops_delivery)
{
    fx_t f;
    evlog_t log = {0};
    engine_sub_t *sub;
    treq_t *a;

    fx_init(&f);
    fx_put(&f, "ev", 1);
    ASSERT_OK(fx_subscribe(&f, "ev", on_event, &log, &sub));
    engine_unsubscribe(f.e, sub);
    a = fx_acquire(&f, "ev", 1, -1);
    ASSERT_EQ(log.n, 0);
    treq_free(a);
    fx_free(&f);
}

typedef struct {
    fx_t *f;
    engine_sub_t *sub;
    int calls;
} selfunsub_t;

static void unsubscribe_in_callback(void *arg, const char *id, const char *type, const char *data,
                                    size_t len)
{
    (void)id;
    selfunsub_t *u = arg;

    (void)type;
    (void)data;
    (void)len;
    u->calls++;
    engine_unsubscribe(u->f->e, u->sub); /* the SSE client went away mid-event */
}

TEST(events_unsubscribe_inside_the_callback)
{
    fx_t f;
    selfunsub_t u1 = {&f, NULL, 0}, u2 = {&f, NULL, 0};
    treq_t *a, *b;

    fx_init(&f);
    fx_put(&f, "ev", 2);
    ASSERT_OK(fx_subscribe(&f, "ev", unsubscribe_in_callback, &u1, &u1.sub));
    ASSERT_OK(fx_subscribe(&f, "ev", unsubscribe_in_callback, &u2, &u2.sub));
    a = fx_acquire(&f, "ev", 1, -1);
    b = fx_acquire(&f, "ev", 1, -1);
    ASSERT_EQ(u1.calls, 1);
    ASSERT_EQ(u2.calls, 1);
    treq_free(a);
    treq_free(b);
    fx_free(&f);
}

/* A capacity-1 semaphore `name` whose subscriber (logging into `live`) saw one grant and
 * left: returns the granted request. */
static treq_t *granted_then_left(fx_t *f, const char *name, evlog_t *live)
{
    engine_sub_t *sub;
    treq_t *a;

    fx_put(f, name, 1);
    ASSERT_OK(fx_subscribe(f, name, on_event, live, &sub));
    a = acquire_free(f, name);
    ASSERT_EQ(live->n, 1);
    engine_unsubscribe(f->e, sub);
    return a;
}

/* Subscribe to `name`, then resume after `last` into `into` (replayed events only). */
static engine_sub_t *resume(fx_t *f, const char *name, const char *last, evlog_t *live,
                            evlog_t *into)
{
    engine_sub_t *sub;

    ASSERT_OK(fx_subscribe_resume(f, name, on_event, live, &sub, last, on_event, into));
    return sub;
}

TEST(events_resume_replays_what_a_subscriber_missed)
{
    fx_t f;
    evlog_t first = {0}, live = {0}, replay = {0}, none = {0};
    engine_sub_t *sub;
    treq_t *a, *b;

    fx_init(&f);
    fx_put(&f, "rs", 1);
    ASSERT_OK(fx_subscribe(&f, "rs", on_event, &first, &sub));
    a = acquire_free(&f, "rs");
    ASSERT_EQ(first.n, 1);
    engine_unsubscribe(f.e, sub); /* the stream drops; the semaphore keeps recording */
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    b = acquire_free(&f, "rs");
    sub = resume(&f, "rs", first.ids[0], &live, &replay);
    ASSERT_EQ(replay.n, 2);
    ASSERT_STREQ(replay.types[0], "released");
    ASSERT_STREQ(replay.types[1], "granted");
    ASSERT(strcmp(replay.ids[0], first.ids[0]) != 0);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(b)));
    ASSERT_EQ(live.n, 1); /* live delivery goes on after the replay, nothing twice */
    ASSERT_STREQ(live.types[0], "released");
    engine_unsubscribe(f.e, sub);
    /* Resuming from the newest id replays nothing. */
    sub = resume(&f, "rs", live.ids[0], &live, &none);
    ASSERT_EQ(none.n, 0);
    engine_unsubscribe(f.e, sub);
    treq_free(a);
    treq_free(b);
    fx_free(&f);
}

TEST(events_resume_with_a_foreign_id_says_reset)
{
    fx_t f;
    evlog_t live = {0}, r1 = {0}, r2 = {0}, r3 = {0}, r4 = {0};
    engine_sub_t *sub;
    treq_t *a;
    char later[64];

    fx_init(&f);
    a = granted_then_left(&f, "rz", &live);
    snprintf(later, sizeof(later), "%s0", live.ids[0]); /* a number never sent */
    static const char *const bad[] = {"garbage", "1-1", "", NULL};
    evlog_t *logs[] = {&r1, &r2, &r3, &r4};
    for (int i = 0; i < 4; i++) {
        const char *last = bad[i] != NULL ? bad[i] : later;
        sub = resume(&f, "rz", last, &live, logs[i]);
        ASSERT_EQ(logs[i]->n, 1);
        ASSERT_STREQ(logs[i]->types[0], "reset");
        ASSERT_STREQ(logs[i]->ids[0], live.ids[0]); /* the current point: resume from here */
        engine_unsubscribe(f.e, sub);
    }
    treq_free(a);
    fx_free(&f);
}

TEST(events_resume_after_the_ring_moved_on_says_reset)
{
    fx_t f;
    evlog_t live = {0}, other = {0}, replay = {0};
    engine_sub_t *sub, *osub;
    treq_t *a;

    if (fx_on_redis())
        TEST_SKIP(
            "on Redis each semaphore has a log of its own (no shared ring); test_redis_events "
            "covers a trimmed log");

    fx_init(&f);
    fx_put(&f, "r1", 1);
    fx_put(&f, "busy", 1);
    ASSERT_OK(fx_subscribe(&f, "r1", on_event, &live, &sub));
    ASSERT_OK(fx_subscribe(&f, "busy", on_event, &other, &osub));
    a = fx_acquire(&f, "r1", 1, -1);
    engine_unsubscribe(f.e, sub);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(a)));
    treq_free(a);
    for (int i = 0; i < ENGINE_EVENTS_RECENT / 2 + 1; i++) { /* 2 events each */
        treq_t *b = fx_acquire(&f, "busy", 1, -1);
        ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(b)));
        treq_free(b);
    }
    sub = resume(&f, "r1", live.ids[0], &live, &replay);
    ASSERT_EQ(replay.n, 1);
    ASSERT_STREQ(replay.types[0], "reset");
    engine_unsubscribe(f.e, sub);
    engine_unsubscribe(f.e, osub);
    fx_free(&f);
}

/* Release a's lease (an event `live`'s subscriber missed), then resume from live's first
 * id: the engine must answer with one "reset". */
static void release_then_resume_resets(fx_t *f, const char *name, evlog_t *live, treq_t *a)
{
    evlog_t replay = {0};
    engine_sub_t *sub;

    ASSERT_OK(fx_lease_op(f, ENGINE_LEASE_RELEASE, lease_id(a)));
    sub = resume(f, name, live->ids[0], live, &replay);
    ASSERT_EQ(replay.n, 1);
    ASSERT_STREQ(replay.types[0], "reset");
    engine_unsubscribe(f->e, sub);
}

TEST(events_retention_ends_and_a_resume_then_says_reset)
{
    fx_t f;
    engine_config_t cfg;
    evlog_t live = {0};
    treq_t *a;
    int never = 0;

    if (fx_on_redis())
        TEST_SKIP(
            "on Redis the log runs while any instance renews its marker (up to a heartbeat past "
            "the retention, plus the marker's 6 s); test_redis_events covers an ended log");

    engine_config_default(&cfg);
    cfg.events_retain_ms = 30;
    fx_init_cfg(&f, &cfg);
    a = granted_then_left(&f, "rt", &live);
    fx_run_until(&f, &never, 60); /* past the retention: the next event is not recorded */
    release_then_resume_resets(&f, "rt", &live, a);
    treq_free(a);
    fx_free(&f);
}

TEST(events_idle_subscriptions_are_capped)
{
    fx_t f;
    evlog_t live = {0}, other = {0};
    engine_sub_t *sub;
    treq_t *a;
    char name[32];

    if (fx_on_redis())
        TEST_SKIP("on Redis the log is in Redis, not in the instance's idle subscriptions");

    fx_init(&f);
    a = granted_then_left(&f, "first", &live);
    for (int i = 0; i < ENGINE_EVENTS_IDLE_MAX; i++) { /* as many newer idle ones */
        snprintf(name, sizeof(name), "idle-%d", i);
        fx_put(&f, name, 1);
        ASSERT_OK(fx_subscribe(&f, name, on_event, &other, &sub));
        engine_unsubscribe(f.e, sub);
    }
    release_then_resume_resets(&f, "first", &live, a); /* the first one was dropped */
    treq_free(a);
    fx_free(&f);
}

TEST(events_after_a_delete_a_resume_is_refused)
{
    fx_t f;
    evlog_t live = {0}, replay = {0};
    engine_sub_t *sub;
    treq_t *a;

    fx_init(&f);
    fx_put(&f, "rd", 1);
    ASSERT_OK(fx_subscribe(&f, "rd", on_event, &live, &sub));
    a = fx_acquire(&f, "rd", 1, -1);
    ASSERT_OK(fx_op(&f, ENGINE_SEM_DELETE, "rd", 0));
    ASSERT_EQ(live.n, 2);
    ASSERT_STREQ(live.types[1], "deleted");
    engine_unsubscribe(f.e, sub);
    /* The name is gone: a reconnecting subscriber is refused (404 over HTTP), so it learns
     * of the delete even if it missed the event. */
    ASSERT_EQ(fx_subscribe(&f, "rd", on_event, &replay, &sub), SEMA_ENOENT);
    treq_free(a);
    fx_free(&f);
}

static fx_t *shutdown_fx;
static void shutdown_in_callback(engine_req_t *r)
{
    t_cb(r);
    engine_shutdown(shutdown_fx->e);
}

TEST(shutdown_from_inside_a_completion)
{
    fx_t f;
    treq_t *a, *w;

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = treq_new(ENGINE_ACQUIRE, "s");
    a->r.weight = 1;
    a->r.cb = shutdown_in_callback;
    shutdown_fx = &f;
    w = treq_new(ENGINE_ACQUIRE, "s");
    w->r.weight = 1;
    ASSERT_OK(engine_submit(f.e, &w->r)); /* granted */
    ASSERT_OK(engine_submit(f.e, &a->r)); /* parks */
    fx_settle(&f);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(w)));
    ASSERT_EQ(a->done, 1); /* granted; its callback shut the engine down */
    ASSERT_EQ(a->status, 0);
    uv_run(&f.loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&f.loop));
    treq_free(a);
    treq_free(w);
}

/* ---- limits ---- */

TEST(limits_semaphores_waiters_locks)
{
    fx_t f;
    engine_config_t cfg;
    treq_t *a, *w[3], *k1, *k2;

    engine_config_default(&cfg);
    cfg.max_semaphores = 2;
    cfg.max_waiters_per_sem = 2;
    cfg.max_waiters_total = 3;
    cfg.max_locks = 1;
    fx_init_cfg(&f, &cfg);
    fx_put(&f, "a", 1);
    fx_put(&f, "b", 1);
    ASSERT_EQ(fx_op(&f, ENGINE_SEM_PUT, "c", 1), SEMA_ELIMIT);
    ASSERT_EQ(fx_op(&f, ENGINE_LEGACY_CREATE, "c", 1), SEMA_ELIMIT);
    a = fx_acquire(&f, "a", 1, -1);
    w[0] = fx_acquire(&f, "a", 1, -1);
    w[1] = fx_acquire(&f, "a", 1, -1);
    w[2] = fx_acquire(&f, "a", 1, -1);
    ASSERT_EQ(w[0]->done, 0);
    ASSERT_EQ(w[1]->done, 0);
    ASSERT_EQ(w[2]->status, SEMA_ELIMIT); /* per semaphore */
    k1 = lock_acquire(&f, "k1", ENGINE_MODE_SHARED, -1);
    k2 = lock_acquire(&f, "k2", ENGINE_MODE_SHARED, -1);
    ASSERT_EQ(k1->status, 0);
    ASSERT_EQ(k2->status, SEMA_ELIMIT); /* lock keys */
    fx_free(&f);
    treq_free(a);
    for (int i = 0; i < 3; i++)
        treq_free(w[i]);
    treq_free(k1);
    treq_free(k2);
}

TEST(wait_idle_try_and_list_limit_cap)
{
    fx_t f;
    treq_t *a, *w;
    json_t *res;
    char name[16];

    fx_init(&f);
    fx_put(&f, "s", 1);
    a = fx_acquire(&f, "s", 1, -1);
    w = treq_new(ENGINE_WAIT_IDLE, "s");
    w->r.timeout_ms = 0;
    ASSERT_EQ(fx_do(&f, w), SEMA_EBUSY);
    for (int i = 0; i < 1100; i++) {
        snprintf(name, sizeof(name), "n%04d", i);
        fx_put(&f, name, 1);
    }
    res = list(&f, NULL, NULL, 5000);
    ASSERT_EQ(json_array_size(json_object_get(res, "semaphores")), 1000);
    ASSERT_STREQ(json_string_value(json_object_get(res, "next_cursor")), "n0999");
    json_decref(res);
    treq_free(a);
    treq_free(w);
    fx_free(&f);
}

TEST(pitfall13_lock_key_kept_while_held_or_awaited)
{
    fx_t f;
    treq_t *x, *w1, *w2;
    engine_stats_t st;

    fx_init(&f);
    x = lock_acquire(&f, "k", ENGINE_MODE_EXCLUSIVE, -1);
    w1 = lock_acquire(&f, "k", ENGINE_MODE_SHARED, -1);
    w2 = lock_acquire(&f, "k", ENGINE_MODE_SHARED, -1);
    engine_cancel(f.e, &w1->r); /* a waiter leaves: the key stays (held and awaited) */
    ASSERT_OK(fx_op(&f, ENGINE_LOCK_GET, "k", 0));
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(x)));
    ASSERT_EQ(w2->done, 1); /* the holder leaves: the waiter gets the same key */
    engine_stats(f.e, &st);
    ASSERT_EQ(st.locks, 1);
    ASSERT_OK(fx_lease_op(&f, ENGINE_LEASE_RELEASE, lease_id(w2)));
    engine_stats(f.e, &st);
    ASSERT_EQ(st.locks, 0);
    treq_free(x);
    treq_free(w1);
    treq_free(w2);
    fx_free(&f);
}
