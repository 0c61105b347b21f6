/* SPDX-License-Identifier: MIT */
/* test_engine_scenarios.c - runs the shared scenario suite against semad's engine (no HTTP).
 *
 * A queued request is an engine_req_t whose callback has not run; `now` runs the loop until
 * it settles. `close` is SEM_DELETE. The engine speaks in leases, so three mappings apply:
 * `release L W` with W above the lease's weight answers overflow here (a lease can only be
 * released whole; the engine has no partial release to ask), W below it is not expressible
 * (EINVAL, and no scenario uses it); after `close`, an acquire's 404 (the name is gone)
 * counts as `canceled`, and releasing a lease the delete voided counts as `ok` (on the
 * server, deleting voids the leases; in-process the holder keeps its units). */
#include "scenario.h"
#include "test_engine_util.h"

typedef struct {
    fx_t f;
    int live, closed;
    treq_t *req[SCEN_MAX_LABELS];
    int cancelled[SCEN_MAX_LABELS];
    char lease[SCEN_MAX_LABELS][40];
    uint64_t weight[SCEN_MAX_LABELS];
} host_t;

static host_t H;

static void clear_labels(host_t *h)
{
    for (int i = 0; i < SCEN_MAX_LABELS; i++) {
        treq_free(h->req[i]);
        h->req[i] = NULL;
        h->cancelled[i] = 0;
        h->lease[i][0] = '\0';
        h->weight[i] = 0;
    }
}

static int h_create(void *ctx, uint64_t capacity)
{
    host_t *h = ctx;

    fx_init(&h->f);
    h->live = 1;
    h->closed = 0;
    clear_labels(h);
    (void)fx_op(&h->f, ENGINE_SEM_DELETE, "scenario", 0); /* a shared back end remembers it */
    return fx_op(&h->f, ENGINE_SEM_PUT, "scenario", capacity);
}

static void h_destroy(void *ctx)
{
    host_t *h = ctx;

    if (!h->live)
        return;
    fx_free(&h->f);
    clear_labels(h);
    h->live = 0;
}

/* Translate a settled request; remembers a granted lease. */
static int settled(host_t *h, int label)
{
    treq_t *t = h->req[label];

    if (h->cancelled[label])
        return SEMA_ECANCELED;
    if (t->status == 0 && t->r.op == ENGINE_ACQUIRE)
        snprintf(h->lease[label], sizeof(h->lease[label]), "%s", jstr(t->res, "lease"));
    if (t->status == SEMA_ENOENT && h->closed)
        return SEMA_ECANCELED;
    return t->status;
}

static int h_request(void *ctx, int label, scen_kind_t kind, uint64_t weight, int64_t timeout_ms)
{
    host_t *h = ctx;
    treq_t *t = treq_new(kind == SCEN_WAIT_IDLE ? ENGINE_WAIT_IDLE : ENGINE_ACQUIRE, "scenario");

    treq_free(h->req[label]);
    h->req[label] = t;
    h->cancelled[label] = 0;
    h->weight[label] = weight;
    t->r.weight = weight;
    t->r.timeout_ms = kind == SCEN_TRY ? 0 : timeout_ms;
    ASSERT_OK(engine_submit(h->f.e, &t->r));
    fx_settle(&h->f); /* a back end on Redis answers after a round trip */
    return t->done ? settled(h, label) : SCEN_QUEUED;
}

static int h_release(void *ctx, int label, uint64_t weight)
{
    host_t *h = ctx;
    int st;

    if (h->lease[label][0] == '\0')
        return SEMA_ESTALE;
    if (weight != 0 && weight > h->weight[label])
        return SEMA_EOVERFLOW; /* see the file comment */
    if (weight != 0 && weight < h->weight[label])
        return SEMA_EINVAL;
    st = fx_lease_op(&h->f, ENGINE_LEASE_RELEASE, h->lease[label]);
    if (st == SEMA_ECANCELED && h->closed)
        st = 0;
    return st;
}

static int h_cancel(void *ctx, int label)
{
    host_t *h = ctx;

    if (h->req[label] == NULL || h->req[label]->done)
        return SEMA_EINVAL;
    engine_cancel(h->f.e, &h->req[label]->r);
    h->cancelled[label] = 1;
    return 0;
}

static int h_resize(void *ctx, uint64_t capacity)
{
    return fx_op(&((host_t *)ctx)->f, ENGINE_SEM_RESIZE, "scenario", capacity);
}

static int h_close(void *ctx)
{
    host_t *h = ctx;

    h->closed = 1;
    return fx_op(&h->f, ENGINE_SEM_DELETE, "scenario", 0);
}

static int h_state(void *ctx, scen_state_t *out)
{
    host_t *h = ctx;
    treq_t *t = treq_new(ENGINE_SEM_GET, "scenario");
    int st = fx_do(&h->f, t);

    if (st == 0) {
        out->capacity = jint(t->res, "capacity");
        out->available = jint(t->res, "available");
        out->held = jint(t->res, "held");
        out->waiting = jint(t->res, "waiting");
        out->waiting_weight = jint(t->res, "waiting_weight");
    }
    treq_free(t);
    return st;
}

static int h_poll(void *ctx, int label, int64_t wait_ms)
{
    host_t *h = ctx;
    treq_t *t = h->req[label];

    if (t == NULL)
        return SEMA_EINVAL;
    if (!h->cancelled[label])
        fx_run_until(&h->f, &t->done, (int)wait_ms);
    if (!t->done && !h->cancelled[label])
        return SCEN_QUEUED;
    return settled(h, label);
}

static const scen_host_t engine_host = {
    .name = "semad engine",
    .ctx = &H,
    .create = h_create,
    .destroy = h_destroy,
    .request = h_request,
    .release = h_release,
    .cancel = h_cancel,
    .resize = h_resize,
    .close = h_close,
    .state = h_state,
    .poll = h_poll,
};

TEST(scenarios_all)
{
    int skipped = -1;

    ASSERT_EQ(scen_run_file(NULL, &engine_host, NULL, &skipped), 0);
    ASSERT_EQ(skipped, 0); /* the engine has every verb */
}
