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
    /* a request on several semaphores: its parts and their names, alive until it settles */
    engine_part_t parts[SCEN_MAX_LABELS][SCEN_MAX_PARTS];
    char names[SCEN_MAX_LABELS][SCEN_MAX_PARTS][32];
    char tenant[SCEN_MAX_LABELS][32];
    char others[8][32]; /* the scenario's other semaphores (`sem`) */
    int nothers;
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
    for (int i = 0; i < h->nothers; i++)
        (void)fx_op(&h->f, ENGINE_SEM_DELETE, h->others[i], 0);
    h->nothers = 0;
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
    if (t->status == 0 && (t->r.op == ENGINE_ACQUIRE || t->r.op == ENGINE_ACQUIRE_MULTI))
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

/* PUT (name given) or a resize of the scenario's semaphore (capacity 0: unchanged), with
 * limits. */
static int put_limits(host_t *h, engine_op_t op, const char *name, uint64_t cap,
                      const scen_limits_t *lim)
{
    treq_t *t = treq_new(op, name);
    int st;

    t->r.capacity = cap;
    t->r.tenant_max = lim->tenant_max;
    t->r.rate_per_s = lim->rate_per_s;
    t->r.rate_burst = lim->rate_burst;
    t->r.limits = (lim->set & SCEN_LIM_TENANT_MAX ? ENGINE_LIMIT_TENANT_MAX : 0) |
                  (lim->set & SCEN_LIM_RATE ? ENGINE_LIMIT_RATE : 0) |
                  (lim->set & SCEN_LIM_BURST ? ENGINE_LIMIT_BURST : 0);
    st = fx_do(&h->f, t);
    treq_free(t);
    return st;
}

static int h_sem(void *ctx, const char *name, uint64_t capacity, const scen_limits_t *lim)
{
    host_t *h = ctx;

    if (name == NULL)
        return put_limits(h, ENGINE_SEM_RESIZE, "scenario", 0, lim);
    if (h->nothers == 8)
        return SEMA_ELIMIT;
    snprintf(h->others[h->nothers++], sizeof h->others[0], "%s", name);
    (void)fx_op(&h->f, ENGINE_SEM_DELETE, name, 0); /* a shared back end remembers it */
    return put_limits(h, ENGINE_SEM_PUT, name, capacity, lim);
}

static int h_relimit(void *ctx, uint64_t capacity, const scen_limits_t *lim)
{
    return put_limits(ctx, ENGINE_SEM_RESIZE, "scenario", capacity, lim);
}

static int h_request_parts(void *ctx, int label, scen_kind_t kind, const scen_part_t *parts,
                           size_t n, const char *tenant, int64_t timeout_ms)
{
    host_t *h = ctx;
    int one = n == 1 && parts[0].name == NULL;
    treq_t *t = treq_new(one ? ENGINE_ACQUIRE : ENGINE_ACQUIRE_MULTI, one ? "scenario" : NULL);

    treq_free(h->req[label]);
    h->req[label] = t;
    h->cancelled[label] = 0;
    h->weight[label] = parts[0].weight;
    for (size_t i = 0; i < n && !one; i++) {
        snprintf(h->names[label][i], sizeof h->names[label][i], "%s",
                 parts[i].name != NULL ? parts[i].name : "scenario");
        h->parts[label][i] =
            (engine_part_t){h->names[label][i], strlen(h->names[label][i]), parts[i].weight, 0};
    }
    t->r.parts = one ? NULL : h->parts[label];
    t->r.nparts = one ? 0 : n;
    t->r.weight = parts[0].weight;
    if (tenant != NULL) {
        snprintf(h->tenant[label], sizeof h->tenant[label], "%s", tenant);
        t->r.tenant = h->tenant[label];
    }
    t->r.timeout_ms = kind == SCEN_TRY ? 0 : timeout_ms;
    ASSERT_OK(engine_submit(h->f.e, &t->r));
    fx_settle(&h->f);
    return t->done ? settled(h, label) : SCEN_QUEUED;
}

static int h_state_of(void *ctx, const char *name, const char *tenant, scen_state_t *out)
{
    host_t *h = ctx;
    treq_t *t = treq_new(ENGINE_SEM_GET, name != NULL ? name : "scenario");
    int st = fx_do(&h->f, t);

    if (st == 0 && tenant == NULL) {
        out->capacity = jint(t->res, "capacity");
        out->available = jint(t->res, "available");
        out->held = jint(t->res, "held");
        out->waiting = jint(t->res, "waiting");
        out->waiting_weight = jint(t->res, "waiting_weight");
    } else if (st == 0) { /* a tenant that neither holds nor waits is not listed: zeros */
        json_t *ts = json_object_get(t->res, "tenants"), *x;
        size_t i;
        *out = (scen_state_t){SCEN_UNKNOWN, SCEN_UNKNOWN, 0, 0, 0};
        json_array_foreach(ts, i, x)
        {
            const char *n = json_string_value(json_object_get(x, "tenant"));
            if (n != NULL && strcmp(n, tenant) == 0) {
                out->held = jint(x, "held");
                out->waiting = jint(x, "waiting");
                out->waiting_weight = jint(x, "waiting_weight");
            }
        }
    }
    treq_free(t);
    return st;
}

static scen_host_t engine_host = {
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
    .sem = h_sem,
    .relimit = h_relimit,
    .request_parts = h_request_parts,
    .state_of = h_state_of,
    .rates = 1,
};

TEST(scenarios_all)
{
    scen_counts_t n;
    scen_limits_t lim = {.tenant_max = 1, .set = SCEN_LIM_TENANT_MAX};
    scen_part_t parts[2] = {{"scenario", 1}, {"probe", 1}};
    int served, multi;

    /* A back end without semad's limits answers SEMA_ENOTSUP: their scenarios are skipped;
     * so are those on several semaphores at once on a back end without them. */
    h_create(&H, 1);
    served = h_sem(&H, "probe", 1, &lim) != SEMA_ENOTSUP;
    multi = served && h_request_parts(&H, 0, SCEN_TRY, parts, 2, NULL, 0) != SEMA_ENOTSUP;
    h_destroy(&H);
    if (served && !multi) {
        fprintf(stderr, "this back end does not serve requests on several semaphores: their "
                        "scenarios are skipped\n");
        engine_host.one_sem_only = 1;
    }
    if (!served) {
        fprintf(stderr, "this back end does not serve several semaphores, tenants or rates: "
                        "their scenarios are skipped\n");
        engine_host.sem = NULL;
        engine_host.relimit = NULL;
        engine_host.request_parts = NULL;
        engine_host.state_of = NULL;
        engine_host.rates = 0;
    }
    ASSERT_EQ(scen_run_file(NULL, &engine_host, NULL, &n), 0);
    if (multi || !served)
        ASSERT_EQ(served ? n.skipped : n.skipped_base, 0); /* the engine has every verb */
}
