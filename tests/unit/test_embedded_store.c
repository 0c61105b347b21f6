/* SPDX-License-Identifier: MIT */
/* test_embedded_store.c - the embedded back end over the real SQLite store: write-ahead with
 * group commit, restart (leases, fences, legacy values), commit failures and their rollback, and
 * a cancel racing a grant that awaits its commit. */
#include <ftw.h>
#include <unistd.h>

#include "store/store.h"
#include "test_engine_util.h"

static char tmp_root[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup_tmp(void)
{
    if (tmp_root[0] != '\0')
        nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *data_dir(void)
{
    static char dir[128];

    snprintf(tmp_root, sizeof(tmp_root), "/tmp/sema-engine-XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(tmp_root));
    atexit(cleanup_tmp);
    snprintf(dir, sizeof(dir), "%s/data", tmp_root);
    return dir;
}

typedef struct {
    fx_t f;
    store_t *st;
    const char *dir;
    int strict; /* STORE_STRICT instead of STORE_RELAXED */
} sfx_t;

static void sfx_open(sfx_t *s)
{
    char err[512] = "";
    engine_config_t cfg;
    int rc = store_open(&s->st, s->dir, s->strict ? STORE_STRICT : STORE_RELAXED, err, sizeof(err));

    if (rc != 0)
        TEST_FAIL_("store_open: %d %s", rc, err);
    engine_config_default(&cfg);
    cfg.lock_readers = 8;
    cfg.embedded.store = s->st;
    fx_init_cfg(&s->f, &cfg);
}

static void sfx_close(sfx_t *s)
{
    fx_free(&s->f);
    store_close(s->st);
    s->st = NULL;
}

static void sfx_restart(sfx_t *s)
{
    sfx_close(s);
    sfx_open(s);
}

static int64_t legacy_value_of(fx_t *f, const char *name, int *status)
{
    treq_t *t = treq_new(ENGINE_LEGACY_VALUE, name);
    int64_t v = INT64_MIN;

    *status = fx_do(f, t);
    if (*status == 0)
        v = jint(t->res, "value");
    treq_free(t);
    return v;
}

TEST(store_replies_wait_for_the_group_commit)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *c[3];
    uint64_t commits0, commits1, fails;

    sfx_open(&s);
    store_stats(s.st, &commits0, &fails);
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "s%d", i);
        c[i] = treq_new(ENGINE_SEM_PUT, name);
        c[i]->r.capacity = 2;
        ASSERT_OK(engine_submit(s.f.e, &c[i]->r));
        ASSERT_EQ(c[i]->done, 0); /* not durable yet */
    }
    fx_run_until(&s.f, &c[2]->done, 2000);
    store_stats(s.st, &commits1, &fails);
    ASSERT_EQ(commits1 - commits0, 1); /* one transaction for the three */
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(c[i]->done, 1);
        ASSERT_EQ(c[i]->created, 1);
        treq_free(c[i]);
    }
    /* a read does not wait */
    treq_t *g = treq_new(ENGINE_SEM_GET, "s0");
    ASSERT_OK(engine_submit(s.f.e, &g->r));
    ASSERT_EQ(g->done, 1);
    treq_free(g);
    sfx_close(&s);
}

TEST(store_restart_keeps_semaphores_leases_fences_and_legacy_values)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b, *t;
    char id_a[64];
    int64_t fence_b, exp_a;
    int st;

    sfx_open(&s);
    fx_put(&s.f, "sem", 5);
    ASSERT_OK(fx_op(&s.f, ENGINE_LEGACY_CREATE, "leg", 2));
    t = treq_new(ENGINE_LEGACY_DOWN, "leg");
    ASSERT_OK(fx_do(&s.f, t));
    treq_free(t);
    a = treq_new(ENGINE_ACQUIRE, "sem");
    a->r.weight = 2;
    a->r.ttl_ms = 30000;
    a->r.owner = "me";
    ASSERT_OK(fx_do(&s.f, a));
    snprintf(id_a, sizeof(id_a), "%s", lease_id(a));
    exp_a = jint(a->res, "expires_at");
    b = treq_new(ENGINE_ACQUIRE, "sem");
    b->r.weight = 1;
    ASSERT_OK(fx_do(&s.f, b));
    fence_b = jint(b->res, "fence");
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, lease_id(b)));
    fx_settle(&s.f);
    sfx_restart(&s);

    ASSERT_EQ(fx_state(&s.f, "sem", "available"), 3);
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 2);
    t = treq_new(ENGINE_LEASE_GET, id_a);
    ASSERT_OK(fx_do(&s.f, t));
    ASSERT_STREQ(jstr(t->res, "owner"), "me");
    ASSERT_GE(jint(t->res, "expires_at"), exp_a); /* max(stored, restart + ttl) */
    treq_free(t);
    treq_t *c = fx_acquire(&s.f, "sem", 1, -1);
    ASSERT_GT(jint(c->res, "fence"), fence_b); /* fences never go backwards */
    treq_free(c);
    ASSERT_EQ(legacy_value_of(&s.f, "leg", &st), 1);
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, id_a));
    treq_free(a);
    treq_free(b);
    sfx_close(&s);
}

TEST(store_commit_failure_fails_requests_eio_and_rolls_back)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *w, *c, *g;
    engine_stats_t st;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    a = fx_acquire(&s.f, "sem", 1, -1);
    w = fx_acquire(&s.f, "sem", 1, -1);
    ASSERT_EQ(w->done, 0);
    store_inject_commit_failures(s.st, 1, 0);
    c = treq_new(ENGINE_SEM_PUT, "new");
    c->r.capacity = 3;
    ASSERT_EQ(fx_do(&s.f, c), SEMA_EIO);
    ASSERT_EQ(c->created, 0);
    ASSERT_EQ(fx_op(&s.f, ENGINE_SEM_GET, "new", 0), SEMA_ENOENT); /* rolled back */
    ASSERT_EQ(w->done, 0);                                         /* still parked */
    engine_stats(s.f.e, &st);
    ASSERT_EQ(st.parked, 1);
    ASSERT_EQ(st.leases, 1);
    /* the store works again: the release hands the unit to the kept waiter */
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, lease_id(a)));
    ASSERT(fx_run_until(&s.f, &w->done, 2000));
    ASSERT_EQ(w->status, 0);
    g = treq_new(ENGINE_LEASE_GET, lease_id(w));
    ASSERT_OK(fx_do(&s.f, g));
    treq_free(g);
    treq_free(a);
    treq_free(w);
    treq_free(c);
    sfx_close(&s);
}

TEST(store_commit_failure_drops_the_undurable_grant)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a;

    sfx_open(&s);
    fx_put(&s.f, "sem", 2);
    store_inject_commit_failures(s.st, 1, 0);
    a = treq_new(ENGINE_ACQUIRE, "sem");
    a->r.weight = 2;
    ASSERT_EQ(fx_do(&s.f, a), SEMA_EIO);
    ASSERT_NULL(a->res);
    ASSERT_EQ(fx_state(&s.f, "sem", "available"), 2);
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 0);
    treq_free(a);
    sfx_close(&s);
}

/* Submit an acquire (ttl 0: the default; idem may be NULL) without waiting for anything. */
static treq_t *submit_acquire(fx_t *f, const char *name, uint64_t weight, int64_t ttl_ms,
                              const char *idem)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE, name);

    t->r.weight = weight;
    t->r.timeout_ms = -1;
    t->r.ttl_ms = ttl_ms;
    if (idem != NULL) {
        snprintf(t->idem, sizeof(t->idem), "%s", idem);
        t->r.idem_key = t->idem;
    }
    ASSERT_OK(engine_submit(f->e, &t->r));
    return t;
}

/* Run the loop for about `ms` (the committer works meanwhile). */
static void run_for(fx_t *f, int ms)
{
    int never = 0;

    fx_run_until(f, &never, ms);
}

TEST(store_loop_serves_while_a_slow_commit_runs)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b, *g;

    sfx_open(&s);
    fx_put(&s.f, "sem", 2);
    store_inject_commit_delay(s.st, 400); /* a slow disk */
    a = submit_acquire(&s.f, "sem", 1, 0, NULL);
    run_for(&s.f, 50); /* the commit carrying a's grant is running now */
    ASSERT_EQ(a->done, 0);
    g = treq_new(ENGINE_SEM_GET, "sem"); /* a read is answered at once, */
    ASSERT_OK(engine_submit(s.f.e, &g->r));
    ASSERT_EQ(g->done, 1);
    ASSERT_EQ(jint(g->res, "held"), 1);
    b = submit_acquire(&s.f, "sem", 1, 0,
                       NULL); /* a grant made meanwhile waits for the next commit */
    ASSERT_EQ(b->done, 0);
    ASSERT(fx_run_until(&s.f, &a->done, 2000));
    ASSERT_EQ(a->status, 0);
    ASSERT(fx_run_until(&s.f, &b->done, 2000));
    ASSERT_EQ(b->status, 0);
    ASSERT_GT(jint(b->res, "fence"), jint(a->res, "fence"));
    treq_free(g);
    treq_free(a);
    treq_free(b);
    sfx_restart(&s);
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 2); /* both grants are in the store */
    sfx_close(&s);
}

TEST(store_failed_commit_also_fails_what_was_recorded_after_it)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b, *c;

    sfx_open(&s);
    fx_put(&s.f, "sem", 3);
    store_inject_commit_delay(s.st, 300);
    store_inject_commit_failures(s.st, 1, 0);
    a = submit_acquire(&s.f, "sem", 1, 0, NULL);
    run_for(&s.f, 50);
    ASSERT_EQ(a->done, 0);
    b = submit_acquire(&s.f, "sem", 1, 0, NULL); /* recorded on top of the commit that will fail */
    ASSERT_EQ(b->done, 0);
    ASSERT(fx_run_until(&s.f, &b->done, 2000));
    ASSERT_EQ(a->status, SEMA_EIO);
    ASSERT_EQ(b->status, SEMA_EIO);
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 0); /* rebuilt from the store */
    c = submit_acquire(&s.f, "sem", 3, 0, NULL); /* the store works again */
    ASSERT(fx_run_until(&s.f, &c->done, 2000));
    ASSERT_EQ(c->status, 0);
    treq_free(a);
    treq_free(b);
    treq_free(c);
    sfx_restart(&s);
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 3);
    sfx_close(&s);
}

TEST(store_cancel_racing_grant_awaiting_commit_releases_it)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b;
    engine_stats_t st;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    a = treq_new(ENGINE_ACQUIRE, "sem");
    a->r.weight = 1;
    ASSERT_OK(engine_submit(s.f.e, &a->r));
    ASSERT_EQ(a->done, 0); /* granted, awaiting the commit */
    engine_stats(s.f.e, &st);
    ASSERT_EQ(st.leases, 1);
    engine_cancel(s.f.e, &a->r); /* the client went away before the loop turned */
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 0);
    fx_settle(&s.f);
    ASSERT_EQ(a->done, 0);
    engine_stats(s.f.e, &st);
    ASSERT_EQ(st.leases, 0);
    b = fx_acquire(&s.f, "sem", 1, 0);
    ASSERT(fx_run_until(&s.f, &b->done, 2000));
    ASSERT_EQ(b->status, 0);
    sfx_restart(&s); /* and the store does not resurrect it */
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 1);
    treq_free(a);
    treq_free(b);
    sfx_close(&s);
}

TEST(store_recreated_name_never_reuses_a_fence)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b;
    int64_t f1;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    a = fx_acquire(&s.f, "sem", 1, -1);
    fx_run_until(&s.f, &a->done, 2000);
    f1 = jint(a->res, "fence");
    ASSERT_OK(fx_op(&s.f, ENGINE_SEM_DELETE, "sem", 0));
    sfx_restart(&s);
    fx_put(&s.f, "sem", 1);
    b = fx_acquire(&s.f, "sem", 1, -1);
    fx_run_until(&s.f, &b->done, 2000);
    ASSERT_GT(jint(b->res, "fence"), f1);
    treq_free(a);
    treq_free(b);
    sfx_close(&s);
}

/* Create, grant, release and delete inside one group commit: the semaphore's row is
 * written once per commit, so the delete must write it first or its fence is lost. */
TEST(store_delete_in_the_commit_of_its_grants_keeps_the_fence)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *p, *a[3], *d, *b;
    engine_stats_t st;

    sfx_open(&s);
    p = treq_new(ENGINE_SEM_PUT, "sem");
    p->r.capacity = 3;
    ASSERT_OK(engine_submit(s.f.e, &p->r));
    for (int i = 0; i < 3; i++) {
        a[i] = submit_acquire(&s.f, "sem", 1, 0, NULL); /* fences 1..3, awaiting the commit */
        ASSERT_EQ(a[i]->done, 0);
        engine_cancel(s.f.e, &a[i]->r); /* gone before the commit: the grant is released */
    }
    d = treq_new(ENGINE_SEM_DELETE, "sem");
    ASSERT_OK(engine_submit(s.f.e, &d->r));
    engine_stats(s.f.e, &st);
    ASSERT_EQ(st.semaphores, 0);
    fx_settle(&s.f); /* one commit carries all of it */
    sfx_restart(&s);
    fx_put(&s.f, "sem", 1);
    b = fx_acquire(&s.f, "sem", 1, -1);
    ASSERT(fx_run_until(&s.f, &b->done, 2000));
    ASSERT_GT(jint(b->res, "fence"), 3);
    treq_free(p);
    for (int i = 0; i < 3; i++)
        treq_free(a[i]);
    treq_free(d);
    treq_free(b);
    sfx_close(&s);
}

/* Backpressure: while a slow commit runs, renewals (whose replies do not wait) pile up
 * only to the cap; past it they wait for the commit too. */
TEST(store_changes_recorded_during_a_slow_commit_are_capped)
{
    sfx_t s = {.dir = data_dir()};
    engine_config_t cfg;
    treq_t *a, *r[12];
    char id[64];
    char err[512] = "";
    int done_early = 0;

    ASSERT_OK(store_open(&s.st, s.dir, STORE_RELAXED, err, sizeof(err)));
    engine_config_default(&cfg);
    cfg.embedded.store = s.st;
    cfg.embedded.max_uncommitted = 5;
    fx_init_cfg(&s.f, &cfg);
    fx_put(&s.f, "sem", 1);
    a = fx_acquire(&s.f, "sem", 1, -1);
    ASSERT(fx_run_until(&s.f, &a->done, 2000));
    snprintf(id, sizeof(id), "%s", lease_id(a));
    store_inject_commit_delay(s.st, 400);
    r[0] = treq_new(ENGINE_LEASE_RENEW, id); /* its change starts the slow commit */
    ASSERT_OK(engine_submit(s.f.e, &r[0]->r));
    ASSERT(fx_run_until(&s.f, &r[0]->done, 2000)); /* a renewal's reply does not wait */
    run_for(&s.f, 50);
    for (int i = 1; i < 12; i++) {
        r[i] = treq_new(ENGINE_LEASE_RENEW, id);
        ASSERT_OK(engine_submit(s.f.e, &r[i]->r));
        done_early += r[i]->done;
    }
    ASSERT_EQ(done_early, 4); /* the fifth change reaches the cap: it and the rest wait */
    fx_settle(&s.f);
    for (int i = 0; i < 12; i++) {
        ASSERT_EQ(r[i]->done, 1);
        ASSERT_EQ(r[i]->status, 0);
        treq_free(r[i]);
    }
    treq_free(a);
    sfx_close(&s);
}

TEST(store_restart_restores_lock_leases)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *x, *g;

    sfx_open(&s);
    x = treq_new(ENGINE_LOCK_ACQUIRE, "k");
    x->r.mode = ENGINE_MODE_EXCLUSIVE;
    ASSERT_OK(fx_do(&s.f, x));
    sfx_restart(&s);
    g = treq_new(ENGINE_LOCK_GET, "k");
    ASSERT_OK(fx_do(&s.f, g));
    ASSERT_EQ(json_array_size(json_object_get(g->res, "holders")), 1);
    treq_free(g);
    g = treq_new(ENGINE_LOCK_ACQUIRE, "k");
    g->r.mode = ENGINE_MODE_SHARED;
    g->r.timeout_ms = 0;
    ASSERT_EQ(fx_do(&s.f, g), SEMA_EBUSY);
    treq_free(g);
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, lease_id(x)));
    fx_settle(&s.f);
    sfx_restart(&s);
    ASSERT_EQ(fx_op(&s.f, ENGINE_LOCK_GET, "k", 0), SEMA_ENOENT);
    treq_free(x);
    sfx_close(&s);
}

typedef struct {
    int granted, deleted, reset;
    char last_id[48], granted_id[48];
} evcount_t;

static void count_event(void *arg, const char *id, const char *type, const char *data, size_t len)
{
    evcount_t *c = arg;

    (void)data;
    (void)len;
    c->granted += strcmp(type, "granted") == 0;
    c->deleted += strcmp(type, "deleted") == 0;
    c->reset += strcmp(type, "reset") == 0;
    snprintf(c->last_id, sizeof(c->last_id), "%s", id);
    if (strcmp(type, "granted") == 0)
        snprintf(c->granted_id, sizeof(c->granted_id), "%s", id);
}

TEST(store_rollback_keeps_subscriptions_of_surviving_semaphores)
{
    sfx_t s = {.dir = data_dir()};
    evcount_t old_ev = {0}, new_ev = {0};
    engine_sub_t *old_sub, *new_sub;
    treq_t *c, *a;

    sfx_open(&s);
    fx_put(&s.f, "old", 1);
    ASSERT_OK(fx_subscribe(&s.f, "old", count_event, &old_ev, &old_sub));
    store_inject_commit_failures(s.st, 1, 0);
    c = treq_new(ENGINE_SEM_PUT, "new");
    c->r.capacity = 1;
    ASSERT_OK(engine_submit(s.f.e, &c->r));
    ASSERT_OK(fx_subscribe(&s.f, "new", count_event, &new_ev, &new_sub));
    fx_run_until(&s.f, &c->done, 2000);
    ASSERT_EQ(c->status, SEMA_EIO);
    fx_settle(&s.f);
    ASSERT_EQ(new_ev.deleted, 1); /* its semaphore is gone after the rollback */
    ASSERT_EQ(old_ev.reset, 1);   /* events it heard may describe rolled-back changes */
    a = fx_acquire(&s.f, "old", 1, -1);
    fx_run_until(&s.f, &a->done, 2000);
    ASSERT_EQ(a->status, 0);
    ASSERT_EQ(old_ev.granted, 1); /* the survivor's subscribers still hear it */
    ASSERT_EQ(old_ev.deleted, 0);
    engine_unsubscribe(s.f.e, old_sub);
    engine_unsubscribe(s.f.e, new_sub);
    treq_free(c);
    treq_free(a);
    sfx_close(&s);
}

/* A grant that was announced and then rolled back: resuming from its event id must not
 * claim nothing was missed. */
TEST(store_rollback_makes_a_resume_reset)
{
    sfx_t s = {.dir = data_dir()};
    evcount_t ev = {0}, live = {0}, replay = {0}, none = {0};
    engine_sub_t *sub;
    treq_t *a;

    sfx_open(&s);
    fx_put(&s.f, "rb", 1);
    ASSERT_OK(fx_subscribe(&s.f, "rb", count_event, &ev, &sub));
    store_inject_commit_failures(s.st, 1, 0);
    a = treq_new(ENGINE_ACQUIRE, "rb");
    a->r.weight = 1;
    ASSERT_OK(engine_submit(s.f.e, &a->r));
    fx_run_until(&s.f, &a->done, 2000);
    ASSERT_EQ(a->status, SEMA_EIO);
    fx_settle(&s.f);
    ASSERT_EQ(ev.granted, 1); /* announced before its commit failed */
    ASSERT_EQ(ev.reset, 1);
    engine_unsubscribe(s.f.e, sub);
    /* From the rolled-back grant's id: "reset", never a claim that nothing was missed. */
    ASSERT_OK(fx_subscribe_resume(&s.f, "rb", count_event, &live, &sub, ev.granted_id, count_event,
                                  &replay));
    ASSERT_EQ(replay.reset, 1);
    ASSERT_EQ(replay.granted, 0);
    engine_unsubscribe(s.f.e, sub);
    /* From the reset's own id: nothing more to say. */
    ASSERT_OK(
        fx_subscribe_resume(&s.f, "rb", count_event, &live, &sub, ev.last_id, count_event, &none));
    ASSERT_EQ(none.reset + none.granted, 0);
    engine_unsubscribe(s.f.e, sub);
    treq_free(a);
    sfx_close(&s);
}

/* A stored lease the engine cannot restore must stop the start: skipping it would hand
 * its units out a second time. */
TEST(store_unrestorable_lease_refuses_to_start)
{
    char err[512] = "";
    const char *dir = data_dir();
    store_t *st;
    engine_t *e = NULL;
    engine_config_t cfg;
    uv_loop_t loop;
    store_sem_t sem = {.name = "gpu", .capacity = 2, .available = 2, .fence = 1};
    store_lease_t lease = {.id = "an-id-far-longer-than-any-id-semad-hands-out",
                           .sem = "gpu",
                           .weight = 2,
                           .fence = 1,
                           .ttl_ms = 60000,
                           .acquired_at_ms = 1,
                           .expires_at_ms = 2};

    ASSERT_OK(store_open(&st, dir, STORE_RELAXED, err, sizeof(err)));
    ASSERT_OK(store_put_sem(st, &sem));
    ASSERT_OK(store_put_lease(st, &lease));
    ASSERT_OK(store_commit(st, err, sizeof(err)));
    ASSERT_OK(uv_loop_init(&loop));
    engine_config_default(&cfg);
    cfg.embedded.store = st;
    ASSERT_EQ(t_engine_new(&e, &loop, &cfg, err, sizeof(err)), SEMA_ECORRUPT);
    ASSERT_NULL(e);
    ASSERT(strstr(err, lease.id) != NULL);
    store_close(st);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&loop));
}

/* A grant whose reply waits for its commit can lose its lease meanwhile (the semaphore is
 * deleted, the ttl runs out); a client that then goes away must not release it again. */
TEST(store_cancel_after_semaphore_deleted_while_grant_awaits_commit)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *d;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    store_inject_commit_delay(s.st, 300); /* a slow disk */
    a = submit_acquire(&s.f, "sem", 1, 0, NULL);
    run_for(&s.f, 50); /* a's grant rides the running commit (commit_fly) */
    ASSERT_EQ(a->done, 0);
    d = treq_new(ENGINE_SEM_DELETE, "sem");
    ASSERT_OK(engine_submit(s.f.e, &d->r)); /* frees a's lease and the semaphore */
    engine_cancel(s.f.e, &a->r);            /* a's client goes away: cancel_done(freed lease) */
    ASSERT(fx_run_until(&s.f, &d->done, 2000));
    ASSERT_EQ(d->status, 0);
    fx_settle(&s.f);
    treq_free(a);
    treq_free(d);
    sfx_close(&s);
}

TEST(store_cancel_after_lease_expired_while_grant_awaits_commit)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    store_inject_commit_delay(s.st, 300);
    a = submit_acquire(&s.f, "sem", 1, 20, NULL); /* ttl shorter than the commit */
    run_for(&s.f, 100);                           /* the lease expired meanwhile: freed */
    ASSERT_EQ(a->done, 0);
    b = submit_acquire(&s.f, "sem", 1, 60000, NULL); /* the unit is free again */
    engine_cancel(s.f.e, &a->r);                     /* cancel_done(freed lease) */
    ASSERT(fx_run_until(&s.f, &b->done, 2000));
    ASSERT_EQ(b->status, 0);
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 1);
    fx_settle(&s.f);
    treq_free(a);
    treq_free(b);
    sfx_close(&s);
}

/* An Idempotency-Key retry that finds the lease awaiting its commit takes the lease over:
 * the first attempt's connection closing (the usual reason for a retry) must not release
 * the lease the retry's reply hands out. */
TEST(store_idem_retry_reply_names_a_lease_its_first_attempt_gave_back)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *r, *c, *g;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    store_inject_commit_delay(s.st, 300);
    a = submit_acquire(&s.f, "sem", 1, 60000, "k1");
    run_for(&s.f, 50);
    ASSERT_EQ(a->done, 0);
    r = submit_acquire(&s.f, "sem", 1, 60000, "k1"); /* the retry: waits for the commit */
    ASSERT_EQ(r->done, 0);
    engine_cancel(s.f.e, &a->r); /* the first attempt's connection closes */
    ASSERT(fx_run_until(&s.f, &r->done, 2000));
    ASSERT_EQ(r->status, 0); /* the retry was told it holds this lease */
    g = treq_new(ENGINE_LEASE_GET, jstr(r->res, "lease"));
    ASSERT_EQ(fx_do(&s.f, g), 0); /* ... so it must be live */
    c = treq_new(ENGINE_ACQUIRE, "sem");
    c->r.weight = 1;
    c->r.timeout_ms = 0;
    ASSERT_EQ(fx_do(&s.f, c), SEMA_EBUSY); /* and nobody else gets the unit */
    fx_settle(&s.f);
    treq_free(a);
    treq_free(r);
    treq_free(c);
    treq_free(g);
    sfx_close(&s);
}

/* A PUT of a semaphore whose create is still being committed is answered after that
 * commit: if the commit fails, the retry must not have been told it exists. */
TEST(store_put_of_an_uncommitted_semaphore_waits_for_its_create)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b;

    sfx_open(&s);
    store_inject_commit_delay(s.st, 300);
    store_inject_commit_failures(s.st, 1, 0);
    a = treq_new(ENGINE_SEM_PUT, "sem");
    a->r.capacity = 1;
    ASSERT_OK(engine_submit(s.f.e, &a->r));
    run_for(&s.f, 50); /* the create's commit runs (and will fail) */
    ASSERT_EQ(a->done, 0);
    b = treq_new(ENGINE_SEM_PUT, "sem");
    b->r.capacity = 1;
    ASSERT_OK(engine_submit(s.f.e, &b->r));
    ASSERT(fx_run_until(&s.f, &a->done, 2000));
    fx_run_until(&s.f, &b->done, 2000);
    ASSERT_EQ(a->status, SEMA_EIO);
    ASSERT_EQ(b->done, 1);
    ASSERT_EQ(b->status, SEMA_EIO); /* it waited for the create, and failed with it */
    ASSERT_EQ(fx_op(&s.f, ENGINE_SEM_GET, "sem", 0), SEMA_ENOENT);
    treq_free(a);
    treq_free(b);
    sfx_close(&s);
}

/* The delete side: a retried DELETE whose first attempt is still being committed is
 * answered after that commit; if it fails, the retry must not have been told 404. */
TEST(store_delete_retry_waits_for_the_first_delete)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *b;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    store_inject_commit_delay(s.st, 300);
    store_inject_commit_failures(s.st, 1, 0);
    a = treq_new(ENGINE_SEM_DELETE, "sem");
    ASSERT_OK(engine_submit(s.f.e, &a->r));
    run_for(&s.f, 50); /* the delete's commit runs (and will fail) */
    ASSERT_EQ(a->done, 0);
    b = treq_new(ENGINE_SEM_DELETE, "sem"); /* the client timed out and retries */
    ASSERT_OK(engine_submit(s.f.e, &b->r));
    ASSERT(fx_run_until(&s.f, &a->done, 2000));
    fx_run_until(&s.f, &b->done, 2000);
    ASSERT_EQ(a->status, SEMA_EIO);
    ASSERT_EQ(b->done, 1);
    ASSERT_EQ(b->status, SEMA_EIO); /* it waited for the delete, and failed with it */
    ASSERT_EQ(fx_op(&s.f, ENGINE_SEM_GET, "sem", 0), 0); /* the semaphore is back */
    treq_free(a);
    treq_free(b);
    sfx_close(&s);
}

/* A keyed lock's fence lives only in its lease row, gone with the release: the store keeps
 * a fence floor so a restart never hands the same fence out again. */
TEST(store_lock_fence_never_reused_after_restart)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *x, *y;
    int64_t f1;

    sfx_open(&s);
    x = treq_new(ENGINE_LOCK_ACQUIRE, "k");
    x->r.mode = ENGINE_MODE_EXCLUSIVE;
    ASSERT_OK(fx_do(&s.f, x));
    f1 = jint(x->res, "fence");
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, lease_id(x)));
    fx_settle(&s.f);
    sfx_restart(&s);
    y = treq_new(ENGINE_LOCK_ACQUIRE, "k");
    y->r.mode = ENGINE_MODE_EXCLUSIVE;
    ASSERT_OK(fx_do(&s.f, y));
    ASSERT_GT(jint(y->res, "fence"), f1);
    treq_free(x);
    treq_free(y);
    sfx_close(&s);
}

static treq_t *store_ticket(fx_t *f, const char *name)
{
    treq_t *t = treq_new(ENGINE_TICKET_CREATE, name);

    t->r.weight = 1;
    t->r.keepalive_ms = 3600000;
    if (fx_do(f, t) == SEMA_ENOTSUP)
        TEST_SKIP("this back end does not serve tickets");
    return t;
}

static int64_t ticket_position(fx_t *f, const char *id)
{
    treq_t *g = treq_new(ENGINE_TICKET_GET, id);
    int64_t pos;

    g->r.timeout_ms = 0;
    ASSERT_OK(fx_do(f, g));
    pos = jint(g->res, "position");
    treq_free(g);
    return pos;
}

/* A failed commit rebuilds the state from the store: committed tickets come back in their
 * places, the uncommitted one is gone (its creator got EIO), and a parked acquire queued
 * among them goes back behind them with an exact position for everybody. */
TEST(store_rollback_keeps_committed_tickets_in_place)
{
    sfx_t s = {.dir = data_dir()};
    treq_t *a, *t1, *w, *t2, *t3;

    sfx_open(&s);
    fx_put(&s.f, "sem", 1);
    a = fx_acquire(&s.f, "sem", 1, -1);
    t1 = store_ticket(&s.f, "sem");
    ASSERT_OK(t1->status);
    w = fx_acquire(&s.f, "sem", 1, -1);
    ASSERT_EQ(w->done, 0);
    t2 = store_ticket(&s.f, "sem");
    ASSERT_OK(t2->status);
    store_inject_commit_failures(s.st, 1, 0);
    t3 = store_ticket(&s.f, "sem");
    ASSERT_EQ(t3->status, SEMA_EIO);
    ASSERT_EQ(w->done, 0); /* still parked, now behind the tickets put back */
    ASSERT_EQ(ticket_position(&s.f, jstr(t1->res, "ticket")), 1);
    ASSERT_EQ(ticket_position(&s.f, jstr(t2->res, "ticket")), 2);
    ASSERT_EQ(fx_state(&s.f, "sem", "waiting"), 3);
    treq_t *t4 = store_ticket(&s.f, "sem"); /* behind the acquire put back */
    ASSERT_OK(t4->status);
    ASSERT_EQ(jint(t4->res, "position"), 4);
    ASSERT_EQ(jint(t4->res, "ahead_weight"), 3);
    treq_free(t4);
    /* the line moves in that order */
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, lease_id(a)));
    fx_settle(&s.f);
    ASSERT_EQ(ticket_position(&s.f, jstr(t2->res, "ticket")), 1);
    ASSERT_EQ(w->done, 0);
    engine_cancel(s.f.e, &w->r);
    treq_free(a);
    treq_free(t1);
    treq_free(w);
    treq_free(t2);
    treq_free(t3);
    sfx_close(&s);
}

/* After a commit answers two clients, the next one waits for both to come back (at most
 * as long as that commit took, 1 ms at most): when only one does, its release must still
 * be committed and answered, not left waiting for the other. `delay_ms` makes the first
 * commit slow, so that it and the next run on the committer thread, which ticks the loop;
 * with 0 they run on the loop, where a timer ends the wait. */
static void gathering_ends_case(int delay_ms)
{
    sfx_t s = {.dir = data_dir(), .strict = 1};
    treq_t *a, *b, *r;
    uint64_t c0, c1, fails;

    sfx_open(&s);
    fx_put(&s.f, "sem", 4);
    if (delay_ms > 0)
        store_inject_commit_delay(s.st, delay_ms);
    a = submit_acquire(&s.f, "sem", 1, 0, NULL);
    b = submit_acquire(&s.f, "sem", 1, 0, NULL);
    ASSERT(fx_run_until(&s.f, &b->done, 2000));
    ASSERT_EQ(a->done, 1); /* both in one commit: the next one waits for two */
    store_stats(s.st, &c0, &fails);
    r = treq_new(ENGINE_LEASE_RELEASE, lease_id(a));
    ASSERT_OK(engine_submit(s.f.e, &r->r));
    ASSERT_EQ(r->done, 0); /* strict: waits for its commit */
    uint64_t t0 = uv_hrtime();
    ASSERT(fx_run_until(&s.f, &r->done, 2000));
    ASSERT_EQ(r->status, 0);
    ASSERT_LT((uv_hrtime() - t0) / 1000000u, 1000); /* a tick away, not a timeout */
    store_stats(s.st, &c1, &fails);
    ASSERT_EQ(c1 - c0, 1);
    ASSERT_OK(fx_lease_op(&s.f, ENGINE_LEASE_RELEASE, lease_id(b)));
    ASSERT_EQ(fx_state(&s.f, "sem", "held"), 0);
    treq_free(a);
    treq_free(b);
    treq_free(r);
    sfx_close(&s);
}

TEST(store_gathering_ends_when_an_answered_client_does_not_come_back)
{
    gathering_ends_case(30); /* the next commit takes >= 30 ms: on the thread, gather 1 ms */
}

TEST(store_gathering_on_the_loop_ends_when_an_answered_client_does_not_come_back)
{
    gathering_ends_case(0);
}
