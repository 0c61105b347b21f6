/* SPDX-License-Identifier: MIT */
/* test_engine_util.h - drives semad's engine directly on a libuv loop for the engine tests
 * (through engine.h only, so they run against whichever back end engine_new is given:
 * SEMA_TEST_ENGINE names it, "embedded" by default):
 * a fixture (loop + engine), requests that record their completion, bounded loop runs. */
#ifndef SEMA_TEST_ENGINE_UTIL_H
#define SEMA_TEST_ENGINE_UTIL_H

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backends/backends.h"
#include "engine/engine.h"
#include "http/render.h"
#include "test.h"

typedef struct {
    uv_loop_t loop;
    engine_t *e;
    engine_config_t cfg;
} fx_t;

typedef struct {
    engine_req_t r; /* first: the callback casts back */
    int done;       /* times the callback ran */
    int status;
    int created;
    json_t *res; /* a reference taken in the callback */
    const char *msg;
    char name[128];
    char idem[64];
    void (*then)(engine_req_t *r); /* optional extra action inside the callback */
} treq_t;

static inline void t_cb(engine_req_t *r)
{
    treq_t *t = (treq_t *)r;

    t->done++;
    t->status = r->status;
    t->created = r->created;
    t->msg = r->message;
    json_decref(t->res);
    t->res = NULL;
    if (r->status == 0 && r->res.kind != ENGINE_RES_NONE) {
        /* The result as a client reads it: through the one renderer, parsed back. */
        struct strbuf sb;
        strbuf_init(&sb, 0);
        ASSERT_OK(render_result(&sb, &r->res));
        t->res = json_loadb(sb.data, sb.len, 0, NULL);
        ASSERT_NOT_NULL(t->res);
        strbuf_free(&sb);
    }
    if (t->then)
        t->then(r);
}

static inline void t_cb_noop(engine_req_t *r)
{
    (void)r;
}

/* engine_new with the back end cfg->backend names, rendering events as semad does. */
static inline int t_engine_new(engine_t **out, uv_loop_t *loop, engine_config_t *cfg, char *err,
                               size_t errlen)
{
    const engine_backend_t *be = backends_find(cfg->backend, err, errlen);

    if (be == NULL)
        return SEMA_EINVAL;
    if (cfg->render_event == NULL)
        cfg->render_event = render_event_data;
    return engine_new(out, loop, be, cfg, err, errlen);
}

static inline void fx_init_cfg(fx_t *f, const engine_config_t *cfg)
{
    char err[256] = "";

    memset(f, 0, sizeof(*f));
    ASSERT_OK(uv_loop_init(&f->loop));
    if (cfg != NULL)
        f->cfg = *cfg;
    else
        engine_config_default(&f->cfg);
    if (f->cfg.backend == NULL)
        f->cfg.backend = getenv("SEMA_TEST_ENGINE");
    int rc = t_engine_new(&f->e, &f->loop, &f->cfg, err, sizeof(err));
    if (rc != 0)
        TEST_FAIL_("engine_new: %d %s", rc, err);
}

/* The back end the tests run against keeps its state in Redis (SEMA_TEST_ENGINE=redis://...):
 * its answers take a round trip, so a case that checks an effect "before any loop turn" is
 * the embedded back end's alone. */
static inline int fx_on_redis(void)
{
    const char *e = getenv("SEMA_TEST_ENGINE");
    return e != NULL && strncmp(e, "redis", 5) == 0;
}

static inline void fx_init(fx_t *f)
{
    fx_init_cfg(f, NULL);
}

/* For a test of admission under load: on Redis a loaded machine can hold a script's answer
 * past the 2 s command timeout (the connection is then dropped and an outcome unknown: EIO),
 * so the back end waits up to 10 s for an answer. */
static inline void fx_init_patient(fx_t *f)
{
    static char url[256];
    const char *e = getenv("SEMA_TEST_ENGINE");
    engine_config_t cfg;

    if (!fx_on_redis() || strchr(e, '?') != NULL) {
        fx_init(f);
        return;
    }
    engine_config_default(&cfg);
    snprintf(url, sizeof url, "%s?timeout=10000", e);
    cfg.backend = url;
    fx_init_cfg(f, &cfg);
}

static inline void fx_free(fx_t *f)
{
    engine_shutdown(f->e);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&f->loop));
}

/* A request of `op` on `name`: a semaphore's name or lock key, or for the operations on a
 * lease or ticket (LEASE_*, TICKET_GET, TICKET_DELETE) its id. */
static inline treq_t *treq_new(engine_op_t op, const char *name)
{
    treq_t *t = calloc(1, sizeof(*t));
    int on_id = op == ENGINE_LEASE_GET || op == ENGINE_LEASE_RENEW || op == ENGINE_LEASE_RELEASE ||
                op == ENGINE_LEASE_REVOKE || op == ENGINE_TICKET_GET || op == ENGINE_TICKET_DELETE;

    ASSERT_NOT_NULL(t);
    t->r.op = op;
    if (name != NULL) {
        snprintf(t->name, sizeof(t->name), "%s", name);
        *(on_id ? &t->r.id : &t->r.name) = t->name;
        *(on_id ? &t->r.id_len : &t->r.name_len) = strlen(t->name);
    }
    t->r.timeout_ms = -1;
    t->r.cb = t_cb;
    t->r.data = t;
    return t;
}

static inline void treq_free(treq_t *t)
{
    if (t == NULL)
        return;
    json_decref(t->res);
    free(t);
}

static inline void guard_cb(uv_timer_t *h)
{
    *(int *)h->data = 1;
}

/* Run the loop until *flag is non-zero or `ms` passed. Returns *flag. */
static inline int fx_run_until(fx_t *f, const int *flag, int ms)
{
    uv_timer_t guard;
    int expired = 0;

    uv_timer_init(&f->loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, guard_cb, (uint64_t)ms, 0);
    while (!*flag && !expired)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    return *flag;
}

/* Let pending work settle: a few loop turns, then until no group commit runs or waits
 * (commits run on a thread of their own; bounded at 2 s). */
static inline void fx_settle(fx_t *f)
{
    engine_stats_t st;
    uv_timer_t guard;
    int expired = 0;

    for (int i = 0; i < 4; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    engine_stats(f->e, &st);
    if (!st.writes_pending)
        return;
    uv_timer_init(&f->loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, guard_cb, 2000, 0);
    for (; st.writes_pending && !expired; engine_stats(f->e, &st))
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&guard, NULL);
    for (int i = 0; i < 4; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
}

/* How long fx_do waits for a request to complete. What it tells apart is done from never
 * done (a lost completion), so the bound is far from any loaded machine's time: 2 s was
 * passed once beside CPU hogs, by a first lock acquire on Redis. */
#define FX_DO_MS 10000

/* Submit and let the loop finish it (bounded). Returns the status; asserts it completed. */
static inline int fx_do(fx_t *f, treq_t *t)
{
    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_run_until(f, &t->done, FX_DO_MS);
    ASSERT_EQ(t->done, 1);
    return t->status;
}

/* A subscription as GET /v1/semaphores/{name}/events makes one: an ENGINE_EVENTS_OPEN
 * request (with last_id, may be NULL), then inside its callback engine_subscribe (events to
 * cb) and, with last_id, engine_sub_resume (what followed it to rcb). Runs the loop until it
 * is done (bounded); returns the status (*out set on 0). */
typedef struct {
    treq_t t;
    engine_t *e;
    engine_event_cb cb, rcb;
    void *arg, *rarg;
    engine_sub_t **out;
    int rc;
} tsub_t;

static inline void tsub_opened(engine_req_t *r)
{
    tsub_t *s = (tsub_t *)r;

    s->rc = r->status != 0 ? r->status : engine_subscribe(s->e, r, s->cb, s->arg, s->out);
    if (s->rc == 0 && r->id != NULL)
        engine_sub_resume(s->e, *s->out, r, s->rcb, s->rarg);
}

static inline int fx_subscribe_resume(fx_t *f, const char *name, engine_event_cb cb, void *arg,
                                      engine_sub_t **out, const char *last_id, engine_event_cb rcb,
                                      void *rarg)
{
    tsub_t *s = calloc(1, sizeof(*s));
    treq_t *t = treq_new(ENGINE_EVENTS_OPEN, name);
    int rc;

    ASSERT_NOT_NULL(s);
    memcpy(&s->t, t, sizeof *t);
    treq_free(t);
    s->t.r.name = s->t.name;
    s->t.r.data = &s->t;
    s->t.r.id = last_id;
    s->t.then = tsub_opened;
    s->e = f->e;
    s->cb = cb;
    s->arg = arg;
    s->rcb = rcb;
    s->rarg = rarg;
    s->out = out;
    *out = NULL;
    fx_do(f, &s->t);
    rc = s->rc;
    json_decref(s->t.res);
    free(s);
    return rc;
}

static inline int fx_subscribe(fx_t *f, const char *name, engine_event_cb cb, void *arg,
                               engine_sub_t **out)
{
    return fx_subscribe_resume(f, name, cb, arg, out, NULL, NULL, NULL);
}

static inline int64_t jint(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_integer(v))
        TEST_FAIL_("no integer \"%s\" in result", key);
    return (int64_t)json_integer_value(v);
}

static inline const char *jstr(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_string(v))
        TEST_FAIL_("no string \"%s\" in result", key);
    return json_string_value(v);
}

/* One-shot helpers. */
static inline int fx_op(fx_t *f, engine_op_t op, const char *name, uint64_t capacity)
{
    treq_t *t = treq_new(op, name);
    int st;

    t->r.capacity = capacity;
    st = fx_do(f, t);
    treq_free(t);
    return st;
}

static inline void fx_put(fx_t *f, const char *name, uint64_t capacity)
{
    ASSERT_OK(fx_op(f, ENGINE_SEM_PUT, name, capacity));
}

/* Start an acquire; it may complete at once or park. The caller frees it. */
static inline treq_t *fx_acquire(fx_t *f, const char *name, uint64_t weight, int64_t timeout_ms)
{
    treq_t *t = treq_new(ENGINE_ACQUIRE, name);

    t->r.weight = weight;
    t->r.timeout_ms = timeout_ms;
    ASSERT_OK(engine_submit(f->e, &t->r));
    fx_settle(f);
    return t;
}

static inline int fx_lease_op(fx_t *f, engine_op_t op, const char *lease_id)
{
    return fx_op(f, op, lease_id, 0);
}

static inline const char *lease_id(const treq_t *t)
{
    ASSERT_EQ(t->done, 1);
    ASSERT_EQ(t->status, 0);
    return jstr(t->res, "lease");
}

/* Semaphore state fields. */
static inline int64_t fx_state(fx_t *f, const char *name, const char *field)
{
    treq_t *t = treq_new(ENGINE_SEM_GET, name);
    int64_t v;

    ASSERT_OK(fx_do(f, t));
    v = jint(t->res, field);
    treq_free(t);
    return v;
}

#endif /* SEMA_TEST_ENGINE_UTIL_H */
