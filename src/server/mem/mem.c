/* SPDX-License-Identifier: MIT */
/* mem.c - the engine's in-memory back end ("embedded"): lifecycle, request completion,
 * FIFO admission, parking and the one timer behind every deadline. Its state is written to
 * the store (mem_store.c) by group commit. */
#include "mem_internal.h"

#include <string.h>
#include <time.h>

/* ---- clocks ---- */

uint64_t mem__now(mem_t *e)
{
    return uv_now(e->loop);
}

int64_t mem__wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- semaphores ---- */

static int sem_eq(const enode_t *n, const void *key, size_t len)
{
    const esem_t *s = ECONTAINER(n, esem_t, node);
    return s->name_len == len && memcmp(s->name, key, len) == 0;
}

esem_t *mem__sem_find(mem_t *e, const char *name, size_t len)
{
    enode_t *n = etab_find(&e->sems, etab_hash(name, len, 0), sem_eq, name, len);
    return n ? ECONTAINER(n, esem_t, node) : NULL;
}

esem_t *mem__lock_find(mem_t *e, const char *key, size_t len)
{
    enode_t *n = etab_find(&e->locks, etab_hash(key, len, 0), sem_eq, key, len);
    return n ? ECONTAINER(n, esem_t, node) : NULL;
}

esem_t *mem__sem_new(mem_t *e, const char *name, size_t len, uint64_t capacity, int flags)
{
    esem_t *s = sema__malloc(sizeof(*s) + len + 1);

    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->node.hash = etab_hash(name, len, 0);
    elist_init(&s->waiters);
    elist_init(&s->holders);
    s->capacity = capacity;
    s->available = (int64_t)capacity;
    s->created_at_ms = mem__wall_ms();
    s->name_len = (uint16_t)len;
    s->flags = (uint8_t)flags;
    memcpy(s->name, name, len);
    s->name[len] = '\0';
    if (flags & ESEM_LOCK) {
        etab_insert(&e->locks, &s->node);
    } else {
        etab_insert(&e->sems, &s->node);
        mem__treap_insert(e, s);
    }
    return s;
}

/* Take the semaphore off the list of rows the next commit writes. */
static void undirty(mem_t *e, esem_t *s)
{
    if (s->dirty_at != 0) {
        e->dirty[s->dirty_at - 1] = NULL;
        s->dirty_at = 0;
    }
}

/* Unlink and free a semaphore that has no holders and no waiters. */
void mem__sem_free(mem_t *e, esem_t *s)
{
    SEMA__CHECK(elist_empty(&s->waiters) && elist_empty(&s->holders));
    undirty(e, s);
    if (s->flags & ESEM_LOCK) {
        etab_remove(&e->locks, &s->node);
    } else {
        etab_remove(&e->sems, &s->node);
        if (!e->clearing)
            mem__treap_remove(e, s);
    }
    sema__free(s);
}

void mem__maybe_free_lock(mem_t *e, esem_t *s)
{
    if ((s->flags & ESEM_LOCK) && elist_empty(&s->holders) && elist_empty(&s->waiters))
        mem__sem_free(e, s);
}

void mem__store_sem_now(mem_t *e, esem_t *s)
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
    mem__mark_dirty(e);
}

void mem__store_sem(mem_t *e, esem_t *s)
{
    if (e->store == NULL || (s->flags & ESEM_LOCK) || s->dirty_at != 0)
        return;
    if (e->ndirty == e->dirty_cap) {
        size_t cap = e->dirty_cap ? e->dirty_cap * 2 : 64;
        esem_t **a = cap <= UINT32_MAX ? sema__realloc(e->dirty, cap * sizeof(*a)) : NULL;
        if (a == NULL)
            return mem__store_sem_now(e, s); /* no room to defer: record it now */
        e->dirty = a;
        e->dirty_cap = cap;
    }
    e->dirty[e->ndirty++] = s;
    s->dirty_at = (uint32_t)e->ndirty;
    mem__mark_dirty(e);
}

#define FENCE_RESERVE 1024u

void mem__store_sems_flush(mem_t *e)
{
    if (e->store != NULL && e->fence_seq > e->fence_stored) {
        /* Lock fences live only in lease rows, which go with the release: keep the top.
         * The floor is written ahead by a block of fences, so a commit rewrites it once per
         * FENCE_RESERVE grants rather than every time; a restart goes on above the block
         * (fences may have gaps, never repeats). */
        if (e->fence_seq > UINT64_MAX - FENCE_RESERVE)
            e->fence_stored = e->fence_seq;
        else
            e->fence_stored = e->fence_seq + FENCE_RESERVE;
        (void)store_put_fence_floor(e->store, e->fence_stored);
    }
    for (size_t i = 0; i < e->ndirty; i++) {
        esem_t *s = e->dirty[i];
        if (s != NULL)
            mem__store_sem_now(e, s);
    }
    e->ndirty = 0;
}

/* ---- idempotency keys ---- */

uint64_t mem__idem_hash(const esem_t *s, const char *key, size_t len)
{
    return etab_hash(key, len, s->node.hash);
}

static int idem_eq_sem(const enode_t *n, const void *key, size_t len)
{
    const eidem_t *d = ECONTAINER(n, eidem_t, node);
    const struct {
        const esem_t *s;
        const char *k;
    } *q = key;
    return d->sem == q->s && d->key_len == len && memcmp(d->key, q->k, len) == 0;
}

eidem_t *mem__idem_find(mem_t *e, const esem_t *s, const char *key, size_t len)
{
    struct {
        const esem_t *s;
        const char *k;
    } q = {s, key};
    enode_t *n = etab_find(&e->idems, mem__idem_hash(s, key, len), idem_eq_sem, &q, len);
    return n ? ECONTAINER(n, eidem_t, node) : NULL;
}

eidem_t *mem__idem_new(mem_t *e, esem_t *s, const char *key, size_t len)
{
    eidem_t *d = sema__malloc(sizeof(*d) + len + 1);

    if (d == NULL)
        return NULL;
    memset(d, 0, sizeof(*d));
    d->node.hash = mem__idem_hash(s, key, len);
    d->sem = s;
    d->key_len = len;
    memcpy(d->key, key, len);
    d->key[len] = '\0';
    etab_insert(&e->idems, &d->node);
    return d;
}

void mem__idem_free(mem_t *e, eidem_t *d)
{
    if (d == NULL)
        return;
    if (d->lease != NULL)
        d->lease->idem = NULL;
    if (d->waiter != NULL)
        d->waiter->idem = NULL;
    if (d->ticket != NULL)
        d->ticket->idem = NULL;
    etab_remove(&e->idems, &d->node);
    sema__free(d);
}

/* ---- the timer ---- */

static void timer_cb(uv_timer_t *t);

void mem__timer_rearm(mem_t *e)
{
    eitem_t *top = eheap_top(&e->heap);
    uint64_t now;

    if (top == NULL || e->shutting_down) {
        if (e->timer_due != UINT64_MAX)
            uv_timer_stop(&e->timer);
        e->timer_due = UINT64_MAX;
        return;
    }
    if (top->deadline == e->timer_due)
        return;
    now = mem__now(e);
    e->timer_due = top->deadline;
    uv_timer_start(&e->timer, timer_cb, top->deadline > now ? top->deadline - now : 0, 0);
}

static void waiter_timeout(mem_t *e, ereq_t *er)
{
    esem_t *s = er->sem;

    if (er->state == EREQ_WATCH)
        return mem__ticket_watch_timeout(e, er);
    mem__unpark(e, er);
    e->m->timeouts++;
    mem__finish(e, er, SEMA_ETIMEDOUT, "not granted before timeout_ms");
    mem__admit(e, s); /* the head may have left: those behind may fit now */
    mem__maybe_free_lock(e, s);
}

static void timer_cb(uv_timer_t *t)
{
    mem_t *e = t->data;
    uint64_t now = mem__now(e);
    eitem_t *top;

    e->timer_due = UINT64_MAX;
    while ((top = eheap_top(&e->heap)) != NULL && top->deadline <= now) {
        eheap_remove(&e->heap, top);
        if (top->kind == EITEM_LEASE)
            mem__lease_expire_due(e, ECONTAINER(top, elease_t, hi));
        else if (top->kind == EITEM_TICKET)
            mem__ticket_due(e, ECONTAINER(top, eticket_t, hi));
        else if (top->kind == EITEM_TICK)
            mem__ticket_tick(e);
        else
            waiter_timeout(e, ECONTAINER(top, ereq_t, hi));
    }
    mem__timer_rearm(e);
    mem__drain(e);
}

/* ---- parking and admission ---- */

int mem__park(mem_t *e, ereq_t *er, esem_t *s, int64_t timeout_ms)
{
    uint64_t now = mem__now(e);

    if ((e->cfg.max_waiters_per_sem && s->nwaiters >= e->cfg.max_waiters_per_sem) ||
        (e->cfg.max_waiters_total && e->nparked >= e->cfg.max_waiters_total))
        return SEMA_ELIMIT;
    er->hi.idx = EHEAP_NONE;
    er->hi.kind = EITEM_WAITER;
    er->hi.deadline = UINT64_MAX; /* forever */
    if (timeout_ms > 0 && (uint64_t)timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = now + (uint64_t)timeout_ms;
        if (eheap_push(&e->heap, &er->hi) != 0)
            return SEMA_ENOMEM;
        mem__timer_rearm(e);
    }
    er->sem = s;
    er->state = EREQ_PARKED;
    er->since_ms = mem__wall_ms();
    er->since_mono = now;
    if (elist_empty(&s->waiters))
        s->est.last_mono = 0; /* the time it stood empty is no grant gap */
    elist_push_back(&s->waiters, &er->link);
    if (er->oseq == 0)
        er->oseq = ++s->qseq;
    else if (er->oseq > s->qseq)
        s->qseq = er->oseq; /* a ticket loaded with its place */
    mem__oq_insert(s, er);
    s->nwaiters++;
    s->waiting += er->weight;
    e->nparked++;
    return 0;
}

/* Take a parked request off its queue and timer; the caller completes it. */
void mem__unpark(mem_t *e, ereq_t *er)
{
    esem_t *s = er->sem;

    elist_remove(&er->link);
    eheap_remove(&e->heap, &er->hi);
    mem__oq_remove(s, er);
    er->oseq = 0;
    s->qremoved++;
    s->nwaiters--;
    s->waiting -= er->weight;
    e->nparked--;
    er->sem = NULL;
    er->state = EREQ_NEW;
    if (er->idem != NULL)
        mem__idem_free(e, er->idem);
}

static void admit_one_grant(mem_t *e, esem_t *s, ereq_t *er)
{
    engine_req_t *req = er->req;
    elease_t *l = mem__grant(e, s, req, er->weight, er->since_mono);

    if (l == NULL) {
        mem__finish(e, er, SEMA_ENOMEM, "out of memory granting the lease");
        return;
    }
    mem__lease_own(er, l);
    er->durable = 1;
    mem__finish_lease(e, er, l);
}

/* Grant the head `er` of s's queue (it fits). */
static void admit_head(mem_t *e, esem_t *s, ereq_t *er)
{
    uint64_t w = er->weight;

    mem__unpark(e, er);
    mem__est_queue_grant(e, s, w, !elist_empty(&s->waiters));
    if (er->kind == EKIND_TICKET)
        mem__ticket_grant(e, ECONTAINER(er, eticket_t, q));
    else
        admit_one_grant(e, s, er);
}

void mem__lease_own(ereq_t *er, elease_t *l)
{
    mem__lease_disown(er);
    if (l->pending != NULL)
        l->pending->lease = NULL;
    er->lease = l;
    l->pending = er;
}

void mem__lease_disown(ereq_t *er)
{
    if (er->lease != NULL) {
        er->lease->pending = NULL;
        er->lease = NULL;
    }
}

/* Strict FIFO with head-of-line blocking: grant heads while they fit. */
void mem__admit(mem_t *e, esem_t *s)
{
    while (!elist_empty(&s->waiters)) {
        ereq_t *er = ECONTAINER(s->waiters.next, ereq_t, link);
        if (er->kind == EKIND_WAIT_IDLE) {
            if (s->available < (int64_t)s->capacity)
                return;
            mem__unpark(e, er);
            mem__finish_view(e, er, s, ENGINE_RES_IDLE);
            continue;
        }
        if ((int64_t)er->weight > s->available)
            return;
        admit_head(e, s, er);
    }
}

/* ---- completion ---- */

/* The idle handle only keeps the loop from blocking in poll while a commit is pending. */
static void idle_noop(uv_idle_t *h)
{
    (void)h;
}

void mem__mark_dirty(mem_t *e)
{
    if (e->store == NULL || e->commit_armed)
        return;
    e->commit_armed = 1;
    uv_check_start(&e->check, mem__commit_cb);
    uv_idle_start(&e->idle, idle_noop);
}

/* Queue a finished request for delivery (after the group commit when it mutated state). */
/* Changes recorded or being committed that are not durable yet. */
static int uncommitted(const mem_t *e)
{
    return e->committing || e->ndirty != 0 || store_pending(e->store);
}

static void finish_queue(mem_t *e, ereq_t *er, int status)
{
    /* A durable reply (a change, or an answer that rests on one: even a "not found" or an
     * "exists") waits for the commit. With a strict store, so does any reply while changes
     * are not yet durable: what it shows may rest on them (a read that sees a lease gone by
     * expiry, say), and strict acknowledges nothing a crash could undo. While a slow commit
     * runs, changes pile up in memory: past the cap every reply waits for it, so each
     * connection stops sending until the disk catches up. */
    if (e->store != NULL && (er->durable || (e->strict && uncommitted(e)) ||
                             (status == 0 && e->committing &&
                              store_backlog(e->store) >= e->cfg.embedded.max_uncommitted))) {
        er->state = EREQ_COMMIT;
        elist_push_back(&e->commit_wait, &er->link);
        e->nwait++;
        mem__mark_dirty(e);
    } else {
        er->state = EREQ_READY;
        elist_push_back(&e->ready, &er->link);
    }
}

void mem__finish(mem_t *e, ereq_t *er, int status, const char *msg)
{
    engine_req_t *req = er->req;

    req->status = status;
    req->message = msg;
    finish_queue(e, er, status);
}

void mem__finish_lease(mem_t *e, ereq_t *er, const elease_t *l)
{
    engine_result_t *r = &er->req->res;

    mem__view_lease(&r->lease, l);
    r->lease.name = er->req->op == ENGINE_ACQUIRE || er->req->op == ENGINE_LOCK_ACQUIRE
                        ? er->req->name /* the caller's: alive until its callback */
                        : engine_result_strdup(r, l->sem->name, l->sem->name_len);
    if (r->lease.owner != NULL)
        r->lease.owner = engine_result_strdup(r, l->owner, strlen(l->owner));
    if (r->lease.name == NULL || (l->owner != NULL && r->lease.owner == NULL)) {
        engine_result_clear(r);
        mem__finish(e, er, SEMA_ENOMEM, "out of memory building the result");
        return;
    }
    r->kind = ENGINE_RES_LEASE;
    mem__finish(e, er, 0, NULL);
}

void mem__finish_view(mem_t *e, ereq_t *er, const esem_t *s, engine_res_kind_t kind)
{
    engine_result_t *r = &er->req->res;

    if (mem__view_sem(r, &r->sem, s, kind == ENGINE_RES_SEM || kind == ENGINE_RES_LOCK) != 0) {
        engine_result_clear(r);
        mem__finish(e, er, SEMA_ENOMEM, "out of memory building the result");
        return;
    }
    r->kind = kind;
    mem__finish(e, er, 0, NULL);
}

/* Deliver queued completions and events; a callback that submits more work only appends to
 * the queue, so nothing recurses. */
void mem__drain(mem_t *e)
{
    if (e->draining)
        return;
    e->draining = 1;
    for (;;) {
        if (!elist_empty(&e->ready)) {
            ereq_t *er = ECONTAINER(e->ready.next, ereq_t, link);
            engine_req_t *req = er->req;
            elist_remove(&er->link);
            mem__lease_disown(er);
            sema__free(er); /* a delivered grant belongs to the caller now */
            engine__complete(e->front, req);
        } else if (!engine__deliver_event(e->front)) {
            break;
        }
    }
    e->draining = 0;
}

/* ---- the back end's table ---- */

static int mem_tables_init(mem_t *e)
{
    elist_init(&e->watched);
    e->tick.idx = EHEAP_NONE;
    e->tick.kind = EITEM_TICK;
    if (etab_init(&e->sems, 64) || etab_init(&e->locks, 16) || etab_init(&e->leases, 64) ||
        etab_init(&e->tombs, 64) || etab_init(&e->idems, 16) || etab_init(&e->tickets, 16))
        return SEMA_ENOMEM;
    return 0;
}

static void mem_free(mem_t *e)
{
    engine_t *front = e->front;

    mem__committer_free(e);
    if (e->tickets.slots != NULL)
        mem__tickets_clear(e, SEMA_ESHUTDOWN, "the server is shutting down");
    mem__state_clear(e, NULL);
    sema__free(e->dirty); /* after the semaphores: freeing one clears its entry */
    mem__tombs_clear(e);
    etab_destroy(&e->sems);
    etab_destroy(&e->locks);
    etab_destroy(&e->leases);
    etab_destroy(&e->tombs);
    etab_destroy(&e->idems);
    etab_destroy(&e->tickets);
    sema__free(e->heap.a);
    sema__free(e->tring);
    sema__free(e);
    if (front != NULL)
        engine__backend_closed(front);
}

static int mem_open(void **out, engine_t *front, uv_loop_t *loop, const engine_config_t *cfg,
                    char *errbuf, size_t errlen)
{
    mem_t *e = sema__calloc(1, sizeof(*e));
    int rc;

    *out = NULL;
    if (e == NULL)
        return SEMA_ENOMEM;
    e->loop = loop;
    e->m = engine__counters(front);
    e->cfg = *cfg;
    e->store = cfg->embedded.store;
    e->strict = e->store != NULL && store_durability(e->store) == STORE_STRICT;
    e->timer_due = UINT64_MAX;
    elist_init(&e->ready);
    elist_init(&e->commit_wait);
    elist_init(&e->commit_fly);
    rc = mem_tables_init(e);
    e->front = front; /* the front is freed by its caller if the open fails */
    if (rc == 0 && e->store != NULL)
        rc = mem__store_load(e, errbuf, errlen);
    if (rc != 0) {
        e->front = NULL;
        mem_free(e);
        return rc;
    }
    uv_timer_init(loop, &e->timer);
    uv_timer_init(loop, &e->ck_timer);
    uv_check_init(loop, &e->check);
    uv_idle_init(loop, &e->idle);
    e->timer.data = e->ck_timer.data = e->check.data = e->idle.data = e;
    e->handles_open = 4;
    if (e->store != NULL) {
        (void)mem__committer_start(e); /* if it cannot start, commits run here */
        if (e->committer != NULL)
            e->handles_open += mem__committer_handles(e);
    }
    mem__timer_rearm(e);
    if (e->store != NULL && store_pending(e->store))
        mem__mark_dirty(e); /* rows of tickets that ended while semad was down */
    *out = e;
    return 0;
}

static void handle_closed(uv_handle_t *h)
{
    mem_t *e = h->data;

    if (--e->handles_open == 0)
        mem_free(e);
}

static void shutdown_fail_parked(void *arg, enode_t *n)
{
    mem_t *e = arg;
    esem_t *s = ECONTAINER(n, esem_t, node);

    /* Tickets stay in line (a durable store keeps them for the next start). */
    for (elist_t *x = s->waiters.next, *next; x != &s->waiters; x = next) {
        ereq_t *er = ECONTAINER(x, ereq_t, link);
        next = x->next;
        if (er->kind == EKIND_TICKET)
            continue;
        mem__unpark(e, er);
        mem__finish(e, er, SEMA_ESHUTDOWN, "the server is shutting down");
    }
}

static void mem_shutdown(void *be)
{
    mem_t *e = be;

    etab_each(&e->sems, shutdown_fail_parked, e);
    etab_each(&e->locks, shutdown_fail_parked, e);
    mem__tickets_fail_watchers(e, SEMA_ESHUTDOWN, "the server is shutting down");
    if (e->store != NULL)
        mem__commit_flush(e, handle_closed); /* the last group commits, then the thread */
    e->shutting_down = 1;
    mem__drain(e);
    uv_timer_stop(&e->timer);
    uv_timer_stop(&e->ck_timer);
    uv_check_stop(&e->check);
    uv_idle_stop(&e->idle);
    uv_close((uv_handle_t *)&e->timer, handle_closed);
    uv_close((uv_handle_t *)&e->ck_timer, handle_closed);
    uv_close((uv_handle_t *)&e->check, handle_closed);
    uv_close((uv_handle_t *)&e->idle, handle_closed);
}

static int mem_submit(void *be, engine_req_t *req)
{
    mem_t *e = be;
    ereq_t *er = sema__calloc(1, sizeof(*er));

    if (er == NULL)
        return SEMA_ENOMEM;
    elist_init(&er->link);
    er->hi.idx = EHEAP_NONE;
    er->req = req;
    req->priv = er;
    if (req->status != 0)
        mem__finish(e, er, req->status, req->message); /* failed the front's checks */
    else
        mem__ops[req->op](e, er);
    mem__drain(e);
    return 0;
}

/* A grant made for a request that will never be delivered goes back to the pool. */
static void cancel_done(mem_t *e, ereq_t *er)
{
    elease_t *l = er->lease;

    mem__lease_disown(er);
    elist_remove(&er->link);
    engine_result_clear(&er->req->res);
    if (l != NULL) {
        esem_t *s = l->sem;
        mem__lease_end(e, l, ETOMB_RELEASED);
        mem__admit(e, s);
        mem__maybe_free_lock(e, s);
    }
}

static void mem_cancel(void *be, engine_req_t *req)
{
    mem_t *e = be;
    ereq_t *er = req->priv;

    if (er->state == EREQ_WATCH) {
        mem__ticket_watch_cancel(e, er);
    } else if (er->state == EREQ_PARKED) {
        esem_t *s = er->sem;
        mem__unpark(e, er);
        e->m->cancellations++;
        mem__admit(e, s);
        mem__maybe_free_lock(e, s);
    } else if (er->state == EREQ_READY || er->state == EREQ_COMMIT) {
        cancel_done(e, er);
    }
    req->priv = NULL;
    sema__free(er);
    mem__drain(e);
}

static int mem_exists(void *be, const char *name, size_t len)
{
    return mem__sem_find(be, name, len) != NULL;
}

static void mem_stats(void *be, engine_stats_t *out)
{
    mem_t *e = be;

    out->semaphores = e->sems.count;
    out->leases = e->leases.count;
    out->parked = e->nparked;
    out->locks = e->locks.count;
    out->writes_pending =
        e->store != NULL && (e->committing || e->ndirty != 0 || store_pending(e->store) ||
                             !elist_empty(&e->commit_wait));
}

const engine_backend_t engine_backend_embedded = {
    .name = "embedded",
    .open = mem_open,
    .submit = mem_submit,
    .cancel = mem_cancel,
    .shutdown = mem_shutdown,
    .exists = mem_exists,
    .stats = mem_stats,
    .metrics = mem__metrics,
    .tickets = 1,
};
