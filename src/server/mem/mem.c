/* SPDX-License-Identifier: MIT */
/* engine_mem.c - semad's in-memory state engine: lifecycle, request completion, FIFO
 * admission, parking and the one timer behind every deadline. */
#include "mem_internal.h"

#include <string.h>
#include <time.h>

/* ---- clocks ---- */

uint64_t engine__now(engine_t *e)
{
    return uv_now(e->loop);
}

int64_t engine__wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- semaphores ---- */

static int sem_eq(const enode_t *n, const void *key, size_t len)
{
    const esem_t *s = ENGINE__CONTAINER(n, esem_t, node);
    return s->name_len == len && memcmp(s->name, key, len) == 0;
}

esem_t *engine__sem_find(engine_t *e, const char *name, size_t len)
{
    enode_t *n = engine__tab_find(&e->sems, engine__hash(name, len, 0), sem_eq, name, len);
    return n ? ENGINE__CONTAINER(n, esem_t, node) : NULL;
}

esem_t *engine__lock_find(engine_t *e, const char *key, size_t len)
{
    enode_t *n = engine__tab_find(&e->locks, engine__hash(key, len, 0), sem_eq, key, len);
    return n ? ENGINE__CONTAINER(n, esem_t, node) : NULL;
}

esem_t *engine__sem_new(engine_t *e, const char *name, size_t len, uint64_t capacity, int flags)
{
    esem_t *s = sema__malloc(sizeof(*s) + len + 1);

    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->node.hash = engine__hash(name, len, 0);
    elist_init(&s->waiters);
    elist_init(&s->holders);
    s->capacity = capacity;
    s->available = (int64_t)capacity;
    s->created_at_ms = engine__wall_ms();
    s->name_len = (uint16_t)len;
    s->flags = (uint8_t)flags;
    memcpy(s->name, name, len);
    s->name[len] = '\0';
    if (flags & ESEM_LOCK) {
        engine__tab_insert(&e->locks, &s->node);
    } else {
        engine__tab_insert(&e->sems, &s->node);
        engine__treap_insert(e, s);
    }
    return s;
}

/* Take the semaphore off the list of rows the next commit writes. */
static void undirty(engine_t *e, esem_t *s)
{
    if (s->dirty_at != 0) {
        e->dirty[s->dirty_at - 1] = NULL;
        s->dirty_at = 0;
    }
}

/* Unlink and free a semaphore that has no holders and no waiters. */
void engine__sem_free(engine_t *e, esem_t *s)
{
    SEMA__CHECK(elist_empty(&s->waiters) && elist_empty(&s->holders));
    undirty(e, s);
    if (s->flags & ESEM_LOCK) {
        engine__tab_remove(&e->locks, &s->node);
    } else {
        engine__tab_remove(&e->sems, &s->node);
        if (!e->clearing)
            engine__treap_remove(e, s);
    }
    s->subs = NULL;
    sema__free(s);
}

void engine__maybe_free_lock(engine_t *e, esem_t *s)
{
    if ((s->flags & ESEM_LOCK) && elist_empty(&s->holders) && elist_empty(&s->waiters))
        engine__sem_free(e, s);
}

void engine__store_sem_now(engine_t *e, esem_t *s)
{
    store_sem_t rec;

    undirty(e, s);
    rec.name = s->name;
    rec.capacity = s->capacity;
    rec.available = s->available;
    rec.fence = s->fence;
    rec.legacy = (s->flags & ESEM_LEGACY) != 0;
    rec.created_at_ms = s->created_at_ms;
    (void)store_put_sem(e->store, &rec); /* an error fails the next commit */
    engine__mark_dirty(e);
}

void engine__store_sem(engine_t *e, esem_t *s)
{
    if (e->store == NULL || (s->flags & ESEM_LOCK) || s->dirty_at != 0)
        return;
    if (e->ndirty == e->dirty_cap) {
        size_t cap = e->dirty_cap ? e->dirty_cap * 2 : 64;
        esem_t **a = cap <= UINT32_MAX ? sema__realloc(e->dirty, cap * sizeof(*a)) : NULL;
        if (a == NULL)
            return engine__store_sem_now(e, s); /* no room to defer: record it now */
        e->dirty = a;
        e->dirty_cap = cap;
    }
    e->dirty[e->ndirty++] = s;
    s->dirty_at = (uint32_t)e->ndirty;
    engine__mark_dirty(e);
}

void engine__store_sems_flush(engine_t *e)
{
    if (e->store != NULL && e->fence_seq > e->fence_stored) {
        /* Lock fences live only in lease rows, which go with the release: keep the top. */
        (void)store_put_fence_floor(e->store, e->fence_seq);
        e->fence_stored = e->fence_seq;
    }
    for (size_t i = 0; i < e->ndirty; i++) {
        esem_t *s = e->dirty[i];
        if (s != NULL)
            engine__store_sem_now(e, s);
    }
    e->ndirty = 0;
}

/* ---- idempotency keys ---- */

uint64_t engine__idem_hash(const esem_t *s, const char *key, size_t len)
{
    return engine__hash(key, len, s->node.hash);
}

static int idem_eq_sem(const enode_t *n, const void *key, size_t len)
{
    const eidem_t *d = ENGINE__CONTAINER(n, eidem_t, node);
    const struct {
        const esem_t *s;
        const char *k;
    } *q = key;
    return d->sem == q->s && d->key_len == len && memcmp(d->key, q->k, len) == 0;
}

eidem_t *engine__idem_find(engine_t *e, const esem_t *s, const char *key, size_t len)
{
    struct {
        const esem_t *s;
        const char *k;
    } q = {s, key};
    enode_t *n = engine__tab_find(&e->idems, engine__idem_hash(s, key, len), idem_eq_sem, &q, len);
    return n ? ENGINE__CONTAINER(n, eidem_t, node) : NULL;
}

eidem_t *engine__idem_new(engine_t *e, esem_t *s, const char *key, size_t len)
{
    eidem_t *d = sema__malloc(sizeof(*d) + len + 1);

    if (d == NULL)
        return NULL;
    memset(d, 0, sizeof(*d));
    d->node.hash = engine__idem_hash(s, key, len);
    d->sem = s;
    d->key_len = len;
    memcpy(d->key, key, len);
    d->key[len] = '\0';
    engine__tab_insert(&e->idems, &d->node);
    return d;
}

void engine__idem_free(engine_t *e, eidem_t *d)
{
    if (d == NULL)
        return;
    if (d->lease != NULL)
        d->lease->idem = NULL;
    if (d->waiter != NULL)
        d->waiter->idem = NULL;
    engine__tab_remove(&e->idems, &d->node);
    sema__free(d);
}

/* ---- the timer ---- */

static void timer_cb(uv_timer_t *t);

void engine__timer_rearm(engine_t *e)
{
    eitem_t *top = engine__heap_top(&e->heap);
    uint64_t now;

    if (top == NULL || e->shutting_down) {
        if (e->timer_due != UINT64_MAX)
            uv_timer_stop(&e->timer);
        e->timer_due = UINT64_MAX;
        return;
    }
    if (top->deadline == e->timer_due)
        return;
    now = engine__now(e);
    e->timer_due = top->deadline;
    uv_timer_start(&e->timer, timer_cb, top->deadline > now ? top->deadline - now : 0, 0);
}

static void waiter_timeout(engine_t *e, ereq_t *er)
{
    esem_t *s = er->sem;

    engine__unpark(e, er);
    e->m.timeouts++;
    engine__finish(e, er, SEMA_ETIMEDOUT, NULL, "not granted before timeout_ms");
    engine__admit(e, s); /* the head may have left: those behind may fit now */
    engine__maybe_free_lock(e, s);
}

static void timer_cb(uv_timer_t *t)
{
    engine_t *e = t->data;
    uint64_t now = engine__now(e);
    eitem_t *top;

    e->timer_due = UINT64_MAX;
    while ((top = engine__heap_top(&e->heap)) != NULL && top->deadline <= now) {
        engine__heap_remove(&e->heap, top);
        if (top->kind == EITEM_LEASE)
            engine__lease_expire_due(e, ENGINE__CONTAINER(top, elease_t, hi));
        else
            waiter_timeout(e, ENGINE__CONTAINER(top, ereq_t, hi));
    }
    engine__timer_rearm(e);
    engine__drain(e);
}

/* ---- parking and admission ---- */

int engine__park(engine_t *e, ereq_t *er, esem_t *s, int64_t timeout_ms)
{
    uint64_t now = engine__now(e);

    if ((e->cfg.max_waiters_per_sem && s->nwaiters >= e->cfg.max_waiters_per_sem) ||
        (e->cfg.max_waiters_total && e->nparked >= e->cfg.max_waiters_total))
        return SEMA_ELIMIT;
    er->hi.idx = EHEAP_NONE;
    er->hi.kind = EITEM_WAITER;
    er->hi.deadline = UINT64_MAX; /* forever */
    if (timeout_ms > 0 && (uint64_t)timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = now + (uint64_t)timeout_ms;
        if (engine__heap_push(&e->heap, &er->hi) != 0)
            return SEMA_ENOMEM;
        engine__timer_rearm(e);
    }
    er->sem = s;
    er->state = EREQ_PARKED;
    er->since_ms = engine__wall_ms();
    er->since_mono = now;
    elist_push_back(&s->waiters, &er->link);
    s->nwaiters++;
    s->waiting += er->weight;
    e->nparked++;
    return 0;
}

/* Take a parked request off its queue and timer; the caller completes it. */
void engine__unpark(engine_t *e, ereq_t *er)
{
    esem_t *s = er->sem;

    elist_remove(&er->link);
    engine__heap_remove(&e->heap, &er->hi);
    s->nwaiters--;
    s->waiting -= er->weight;
    e->nparked--;
    er->sem = NULL;
    er->state = EREQ_NEW;
    if (er->idem != NULL)
        engine__idem_free(e, er->idem);
}

static void admit_one_grant(engine_t *e, esem_t *s, ereq_t *er)
{
    engine_req_t *req = er->req;
    elease_t *l =
        engine__grant(e, s, er->weight, req->ttl_ms, req->owner, req->idem_key, er->since_mono);

    if (l == NULL) {
        engine__finish(e, er, SEMA_ENOMEM, NULL, "out of memory granting the lease");
        return;
    }
    engine__lease_own(er, l);
    er->durable = 1;
    engine__finish_lease(e, er, l);
}

void engine__lease_own(ereq_t *er, elease_t *l)
{
    engine__lease_disown(er);
    if (l->pending != NULL)
        l->pending->lease = NULL;
    er->lease = l;
    l->pending = er;
}

void engine__lease_disown(ereq_t *er)
{
    if (er->lease != NULL) {
        er->lease->pending = NULL;
        er->lease = NULL;
    }
}

/* Strict FIFO with head-of-line blocking: grant heads while they fit. */
void engine__admit(engine_t *e, esem_t *s)
{
    while (!elist_empty(&s->waiters)) {
        ereq_t *er = ENGINE__CONTAINER(s->waiters.next, ereq_t, link);
        if (er->kind == EKIND_WAIT_IDLE) {
            if (s->available < (int64_t)s->capacity)
                return;
            engine__unpark(e, er);
            engine__finish(e, er, 0,
                           json_pack("{s:s%,s:b}", "name", s->name, (size_t)s->name_len, "idle", 1),
                           NULL);
            continue;
        }
        if ((int64_t)er->weight > s->available)
            return;
        engine__unpark(e, er);
        admit_one_grant(e, s, er);
    }
}

/* ---- completion ---- */

/* The idle handle only keeps the loop from blocking in poll while a commit is pending. */
static void idle_noop(uv_idle_t *h)
{
    (void)h;
}

void engine__mark_dirty(engine_t *e)
{
    if (e->store == NULL || e->commit_armed)
        return;
    e->commit_armed = 1;
    uv_check_start(&e->check, engine__commit_cb);
    uv_idle_start(&e->idle, idle_noop);
}

/* Queue a finished request for delivery (after the group commit when it mutated state). */
static void finish_queue(engine_t *e, ereq_t *er, int status)
{
    /* A durable reply (a change, or an answer that rests on one: even a "not found" or an
     * "exists") waits for the commit. While a slow commit runs, changes pile up in memory:
     * past the cap every reply waits for it, so each connection stops sending until the
     * disk catches up. */
    if (e->store != NULL && (er->durable || (status == 0 && e->committing &&
                                             store_backlog(e->store) >= e->cfg.max_uncommitted))) {
        er->state = EREQ_COMMIT;
        elist_push_back(&e->commit_wait, &er->link);
        engine__mark_dirty(e);
    } else {
        er->state = EREQ_READY;
        elist_push_back(&e->ready, &er->link);
    }
}

void engine__finish(engine_t *e, ereq_t *er, int status, json_t *result, const char *msg)
{
    engine_req_t *req = er->req;

    req->status = status;
    if (status == 0 && result == NULL && req->op != ENGINE_SEM_DELETE &&
        req->op != ENGINE_LEGACY_DELETE && req->op != ENGINE_LEASE_RELEASE &&
        req->op != ENGINE_LEASE_REVOKE) {
        req->status = SEMA_ENOMEM; /* building the JSON failed */
        msg = "out of memory building the result";
    }
    req->result = result;
    req->message = msg;
    finish_queue(e, er, status);
}

void engine__finish_lease(engine_t *e, ereq_t *er, const elease_t *l)
{
    engine_req_t *req = er->req;
    char *text = req->want_text ? engine__text_lease(l, &req->text_len) : NULL;

    if (text == NULL) {
        engine__finish(e, er, 0, engine__json_lease(e, l), NULL);
        return;
    }
    req->status = 0;
    req->result = NULL;
    req->message = NULL;
    req->text = text;
    finish_queue(e, er, 0);
}

/* Deliver queued completions and events; a callback that submits more work only appends to
 * the queue, so nothing recurses. */
void engine__drain(engine_t *e)
{
    if (e->draining)
        return;
    e->draining = 1;
    for (;;) {
        if (!elist_empty(&e->ready)) {
            ereq_t *er = ENGINE__CONTAINER(e->ready.next, ereq_t, link);
            engine_req_t *req = er->req;
            json_t *result = req->result;
            char *text = (char *)req->text;
            elist_remove(&er->link);
            req->priv = NULL;
            engine__lease_disown(er);
            sema__free(er); /* a delivered grant belongs to the caller now */
            req->cb(req);
            json_decref(result);
            sema__free(text);
        } else if (!elist_empty(&e->events)) {
            engine__events_deliver(e);
        } else {
            break;
        }
    }
    e->draining = 0;
}

/* ---- public API ---- */

void engine_config_default(engine_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_semaphores = 10000000;
    cfg->max_waiters_per_sem = 100000;
    cfg->max_waiters_total = 1000000;
    cfg->max_name_len = 256;
    cfg->default_ttl_ms = 60000;
    cfg->max_ttl_ms = 86400000;
    cfg->lock_readers = 1048576;
    cfg->max_locks = 1000000;
    cfg->metrics_max_semaphores = 100;
    cfg->store = NULL;
    cfg->max_uncommitted = 65536;
    cfg->events_retain_ms = ENGINE_EVENTS_RETAIN_MS;
}

static int engine_tables_init(engine_t *e)
{
    if (engine__tab_init(&e->sems, 64) || engine__tab_init(&e->locks, 16) ||
        engine__tab_init(&e->leases, 64) || engine__tab_init(&e->tombs, 64) ||
        engine__tab_init(&e->idems, 16) || engine__tab_init(&e->subgroups, 16))
        return SEMA_ENOMEM;
    return 0;
}

static void engine_free_mem(engine_t *e)
{
    engine__committer_free(e);
    engine__state_clear(e, NULL);
    sema__free(e->dirty); /* after the semaphores: freeing one clears its entry */
    engine__tombs_clear(e);
    engine__subs_free_all(e);
    engine__tab_destroy(&e->sems);
    engine__tab_destroy(&e->locks);
    engine__tab_destroy(&e->leases);
    engine__tab_destroy(&e->tombs);
    engine__tab_destroy(&e->idems);
    engine__tab_destroy(&e->subgroups);
    sema__free(e->heap.a);
    sema__free(e->tring);
    sema__free(e);
}

int engine_new(engine_t **out, uv_loop_t *loop, const engine_config_t *cfg, char *errbuf,
               size_t errlen)
{
    engine_t *e = sema__calloc(1, sizeof(*e));
    int rc;

    *out = NULL;
    if (e == NULL)
        return SEMA_ENOMEM;
    e->loop = loop;
    e->cfg = *cfg;
    if (e->cfg.max_name_len == 0 || e->cfg.max_name_len > 65535)
        e->cfg.max_name_len = 65535;
    if (e->cfg.default_ttl_ms <= 0)
        e->cfg.default_ttl_ms = 60000;
    if (e->cfg.max_ttl_ms < e->cfg.default_ttl_ms)
        e->cfg.max_ttl_ms = e->cfg.default_ttl_ms;
    if (e->cfg.events_retain_ms <= 0)
        e->cfg.events_retain_ms = ENGINE_EVENTS_RETAIN_MS;
    if (e->cfg.lock_readers == 0 || e->cfg.lock_readers > ((uint64_t)1 << 53))
        e->cfg.lock_readers = 1048576;
    e->store = cfg->store;
    e->timer_due = UINT64_MAX;
    e->rnd_pos = sizeof(e->rnd);
    elist_init(&e->ready);
    elist_init(&e->commit_wait);
    elist_init(&e->commit_fly);
    elist_init(&e->events);
    elist_init(&e->idle_groups);
    rc = engine_tables_init(e);
    if (rc == 0 && e->store != NULL)
        rc = engine__store_load(e, errbuf, errlen);
    if (rc != 0) {
        engine_free_mem(e);
        return rc;
    }
    uv_timer_init(loop, &e->timer);
    uv_check_init(loop, &e->check);
    uv_idle_init(loop, &e->idle);
    e->timer.data = e->check.data = e->idle.data = e;
    e->handles_open = 3;
    if (e->store != NULL) {
        (void)engine__committer_start(e); /* if it cannot start, commits run here */
        if (e->committer != NULL)
            e->handles_open++;
    }
    engine__timer_rearm(e);
    *out = e;
    return 0;
}

static void handle_closed(uv_handle_t *h)
{
    engine_t *e = h->data;

    if (--e->handles_open == 0)
        engine_free_mem(e);
}

static void shutdown_fail_parked(void *arg, enode_t *n)
{
    engine_t *e = arg;
    esem_t *s = ENGINE__CONTAINER(n, esem_t, node);

    while (!elist_empty(&s->waiters)) {
        ereq_t *er = ENGINE__CONTAINER(s->waiters.next, ereq_t, link);
        engine__unpark(e, er);
        engine__finish(e, er, SEMA_ESHUTDOWN, NULL, "the server is shutting down");
    }
}

void engine_shutdown(engine_t *e)
{
    if (e == NULL || e->shutting_down)
        return;
    engine__tab_each(&e->sems, shutdown_fail_parked, e);
    engine__tab_each(&e->locks, shutdown_fail_parked, e);
    if (e->store != NULL)
        engine__commit_flush(e, handle_closed); /* the last group commits, then the thread */
    e->shutting_down = 1;
    engine__drain(e);
    uv_timer_stop(&e->timer);
    uv_check_stop(&e->check);
    uv_idle_stop(&e->idle);
    uv_close((uv_handle_t *)&e->timer, handle_closed);
    uv_close((uv_handle_t *)&e->check, handle_closed);
    uv_close((uv_handle_t *)&e->idle, handle_closed);
}

static int needs_name(engine_op_t op)
{
    return op != ENGINE_SEM_LIST;
}

int engine_submit(engine_t *e, engine_req_t *req)
{
    ereq_t *er;

    if (e == NULL || req == NULL || req->cb == NULL || (unsigned)req->op >= ENGINE_OP_COUNT)
        return SEMA_EINVAL;
    if (e->shutting_down)
        return SEMA_ESHUTDOWN;
    if (needs_name(req->op) && req->name == NULL)
        return SEMA_EINVAL;
    if (req->name != NULL && req->name_len == 0)
        req->name_len = strlen(req->name);
    er = sema__calloc(1, sizeof(*er));
    if (er == NULL)
        return SEMA_ENOMEM;
    elist_init(&er->link);
    er->hi.idx = EHEAP_NONE;
    er->req = req;
    req->priv = er;
    req->status = 0;
    req->created = 0;
    req->result = NULL;
    req->message = NULL;
    req->text = NULL;
    req->text_len = 0;
    e->m.ops[req->op]++;
    engine__ops[req->op](e, er);
    engine__drain(e);
    return 0;
}

/* A grant made for a request that will never be delivered goes back to the pool. */
static void cancel_done(engine_t *e, ereq_t *er)
{
    elease_t *l = er->lease;

    engine__lease_disown(er);
    elist_remove(&er->link);
    json_decref(er->req->result);
    er->req->result = NULL;
    sema__free((char *)er->req->text);
    er->req->text = NULL;
    if (l != NULL) {
        esem_t *s = l->sem;
        engine__lease_end(e, l, ETOMB_RELEASED);
        engine__admit(e, s);
        engine__maybe_free_lock(e, s);
    }
}

void engine_cancel(engine_t *e, engine_req_t *req)
{
    ereq_t *er = req != NULL ? req->priv : NULL;

    if (e == NULL || er == NULL)
        return;
    if (er->state == EREQ_PARKED) {
        esem_t *s = er->sem;
        engine__unpark(e, er);
        e->m.cancellations++;
        engine__admit(e, s);
        engine__maybe_free_lock(e, s);
    } else if (er->state == EREQ_READY || er->state == EREQ_COMMIT) {
        cancel_done(e, er);
    }
    req->priv = NULL;
    sema__free(er);
    engine__drain(e);
}

void engine_stats(engine_t *e, engine_stats_t *out)
{
    out->semaphores = e->sems.count;
    out->leases = e->leases.count;
    out->parked = e->nparked;
    out->locks = e->locks.count;
    out->commit_busy =
        e->store != NULL && (e->committing || e->ndirty != 0 || store_pending(e->store) ||
                             !elist_empty(&e->commit_wait));
}
