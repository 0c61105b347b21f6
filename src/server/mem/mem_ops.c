/* SPDX-License-Identifier: MIT */
/* mem_ops.c - the in-memory back end's handler of each engine operation: look up, mutate,
 * complete or park. Inputs arrive checked against the limits (engine/front.c). */
#include "mem_internal.h"

#include <string.h>

#include "engine_limits.h"

static const char *const M_NOT_FOUND = "no such semaphore";
static const char *const M_LEASE_ENDED[] = {
    [ETOMB_RELEASED] = "the lease was already released",
    [ETOMB_EXPIRED] = "the lease expired",
    [ETOMB_REVOKED] = "the lease was revoked",
    [ETOMB_DELETED] = "the lease's semaphore was deleted",
};

static void fail(mem_t *e, ereq_t *er, int status, const char *msg)
{
    mem__finish(e, er, status, msg);
}

/* Find the semaphore; completes the request and returns NULL if there is none. */
static esem_t *find_sem(mem_t *e, ereq_t *er)
{
    esem_t *s = mem__sem_find(e, er->req->name, er->req->name_len);

    if (s == NULL)
        fail(e, er, SEMA_ENOENT, M_NOT_FOUND);
    return s;
}

/* ---- create, delete, resize ---- */

static esem_t *create_sem(mem_t *e, ereq_t *er, uint64_t capacity, int flags)
{
    engine_req_t *req = er->req;
    esem_t *s;

    if (e->cfg.max_semaphores && e->sems.count >= e->cfg.max_semaphores) {
        fail(e, er, SEMA_ELIMIT, "too many semaphores");
        return NULL;
    }
    s = mem__sem_new(e, req->name, req->name_len, capacity, flags);
    if (s == NULL) {
        fail(e, er, SEMA_ENOMEM, "out of memory creating the semaphore");
        return NULL;
    }
    /* A recreated name goes on counting: fences come from one sequence for all names,
     * which starts above every fence in the store (mem__store_load). */
    mem__store_sem(e, s);
    er->durable = 1;
    return s;
}

static void op_sem_put(mem_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    esem_t *s;

    s = mem__sem_find(e, req->name, req->name_len);
    /* An answer from what exists may rest on a create whose commit still runs. */
    er->durable = s != NULL;
    if (s != NULL && s->capacity != req->capacity)
        return fail(e, er, SEMA_EEXIST, "the semaphore exists with another capacity");
    if (s == NULL) {
        s = create_sem(e, er, req->capacity, 0);
        if (s == NULL)
            return;
        req->created = 1;
    }
    mem__finish_view(e, er, s, ENGINE_RES_SEM);
}

static void op_legacy_create(mem_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    esem_t *s;

    if (mem__sem_find(e, req->name, req->name_len) != NULL) {
        er->durable = 1; /* its create may still be on its way to disk */
        return fail(e, er, SEMA_EEXIST, "the semaphore already exists");
    }
    s = create_sem(e, er, req->capacity, ESEM_LEGACY);
    if (s != NULL)
        mem__finish_view(e, er, s, ENGINE_RES_LEGACY);
}

/* Fail every waiter (ECANCELED), void every lease, forget the semaphore. */
static void delete_sem(mem_t *e, esem_t *s)
{
    while (!elist_empty(&s->waiters)) {
        ereq_t *w = ECONTAINER(s->waiters.next, ereq_t, link);
        if (w->kind == EKIND_TICKET) {
            mem__ticket_refuse(e, ECONTAINER(w, eticket_t, q), ETOMB_TICKET_DELETED);
            continue;
        }
        mem__unpark(e, w);
        mem__finish(e, w, SEMA_ECANCELED, "the semaphore was deleted");
    }
    while (!elist_empty(&s->holders))
        mem__lease_end(e, ECONTAINER(s->holders.next, elease_t, link), ETOMB_DELETED);
    mem__event_sem(e, s, "deleted", 0);
    if (e->store != NULL) {
        if (s->dirty_at != 0) /* its retired fence is read from its row: write that first */
            mem__store_sem_now(e, s);
        (void)store_del_sem(e->store, s->name);
        mem__mark_dirty(e);
    }
    mem__sem_free(e, s);
}

static void op_sem_delete(mem_t *e, ereq_t *er)
{
    esem_t *s;

    er->durable = 1; /* a "not found" may rest on a delete whose commit still runs */
    s = find_sem(e, er);

    if (s == NULL)
        return;
    delete_sem(e, s);
    er->durable = 1;
    mem__finish(e, er, 0, NULL);
}

static void op_sem_resize(mem_t *e, ereq_t *er)
{
    uint64_t cap = er->req->capacity;
    esem_t *s = find_sem(e, er);

    if (s == NULL)
        return;
    s->available += (int64_t)cap - (int64_t)s->capacity;
    s->capacity = cap;
    /* Queued requests that can never fit any more fail now instead of blocking the queue. */
    for (elist_t *x = s->waiters.next, *next; x != &s->waiters; x = next) {
        ereq_t *w = ECONTAINER(x, ereq_t, link);
        next = x->next;
        if (w->kind == EKIND_TICKET && w->weight > cap) {
            mem__ticket_refuse(e, ECONTAINER(w, eticket_t, q), ETOMB_TICKET_REFUSED);
        } else if (w->kind == EKIND_ACQUIRE && w->weight > cap) {
            mem__unpark(e, w);
            mem__finish(e, w, SEMA_EINVAL, "weight is above the new capacity");
        }
    }
    mem__store_sem(e, s);
    /* subscribers hear of the resize before the grants it causes */
    mem__event_sem(e, s, "resized", cap);
    mem__admit(e, s);
    er->durable = 1;
    mem__finish_view(e, er, s, ENGINE_RES_SEM);
}

/* ---- reads ---- */

static void op_sem_get(mem_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s != NULL)
        mem__finish_view(e, er, s, ENGINE_RES_SEM);
}

static int has_prefix(const esem_t *s, const char *p, size_t plen)
{
    return s->name_len >= plen && memcmp(s->name, p, plen) == 0;
}

/* The first semaphore of the page: strictly after the cursor, or the first with the
 * prefix. */
static esem_t *list_start(mem_t *e, const engine_req_t *req, const char *pfx, size_t plen)
{
    if (req->cursor != NULL && req->cursor[0] != '\0' && strcmp(req->cursor, pfx) >= 0)
        return mem__treap_after(e, req->cursor, strlen(req->cursor), 0);
    return mem__treap_after(e, pfx, plen, 1);
}

static void op_sem_list(mem_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    engine_result_t *r = &req->res;
    const char *pfx = req->prefix ? req->prefix : "";
    size_t plen = strlen(pfx), n = 0;
    esem_t *s, *last = NULL;

    r->items = engine_result_alloc(r, req->limit * sizeof(*r->items));
    if (r->items == NULL)
        return fail(e, er, SEMA_ENOMEM, "out of memory building the result");
    for (s = list_start(e, req, pfx, plen); s != NULL && has_prefix(s, pfx, plen) && n < req->limit;
         s = mem__treap_after(e, s->name, s->name_len, 0)) {
        if (mem__view_sem(r, &r->items[n++], s, 0) != 0) {
            engine_result_clear(r);
            return fail(e, er, SEMA_ENOMEM, "out of memory building the result");
        }
        last = s;
    }
    r->nitems = n;
    if (s != NULL && last != NULL && has_prefix(s, pfx, plen)) {
        r->next_cursor = r->items[n - 1].name;
        r->next_cursor_len = r->items[n - 1].name_len;
    }
    r->kind = ENGINE_RES_LIST;
    mem__finish(e, er, 0, NULL);
}

/* ---- acquire and wait-idle ---- */

static const char M_KEY_MISMATCH[] = "this Idempotency-Key names a request of another weight "
                                     "(or lock mode); nothing was granted";

/* The first attempt with this key is still parked: the retry takes its place in the queue
 * (same position, its own timeout) and the first attempt ends EREPLACED. A retry of another
 * weight fails EKEYMISMATCH and the first attempt waits on. Returns 1. */
static int idem_take_over(mem_t *e, ereq_t *er, eidem_t *d)
{
    ereq_t *old = d->waiter;
    int64_t timeout_ms = er->req->timeout_ms;

    if (old->weight != er->weight || mem__req_mode(old->req) != mem__req_mode(er->req)) {
        fail(e, er, SEMA_EKEYMISMATCH, M_KEY_MISMATCH);
        return 1;
    }
    if (timeout_ms == 0) {
        fail(e, er, SEMA_EBUSY, "not available without waiting");
        return 1;
    }
    er->kind = old->kind;
    er->sem = old->sem;
    er->state = EREQ_PARKED;
    er->since_ms = old->since_ms;
    er->since_mono = old->since_mono;
    er->idem = d;
    d->waiter = er;
    elist_push_back(&old->link, &er->link); /* just before old, which then leaves */
    elist_remove(&old->link);
    mem__oq_remove(er->sem, old);
    er->weight = old->weight;
    er->oseq = old->oseq;
    mem__oq_insert(er->sem, er);
    eheap_remove(&e->heap, &old->hi);
    er->hi.kind = EITEM_WAITER;
    er->hi.idx = EHEAP_NONE;
    if (timeout_ms > 0 && (uint64_t)timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = mem__now(e) + (uint64_t)timeout_ms;
        if (eheap_push(&e->heap, &er->hi) != 0)
            er->hi.idx = EHEAP_NONE; /* waits without a timeout rather than failing */
    }
    mem__timer_rearm(e);
    old->idem = NULL;
    old->sem = NULL;
    mem__finish(e, old, SEMA_EREPLACED,
                "replaced by a newer attempt with the same Idempotency-Key, which now waits "
                "in its place");
    return 1;
}

int mem__waiter_allowed(const engine_req_t *req, const engine_req_t *parked)
{
    if (req->principal == NULL || req->principal_admin)
        return 1;
    return parked->principal != NULL && strcmp(parked->principal, req->principal) == 0;
}

int mem__idem_of(mem_t *e, const engine_req_t *req, const esem_t *s, eidem_t **out)
{
    const char *key = req->idem_key;
    eidem_t *d = NULL;

    if (key != NULL && key[0] != '\0')
        d = mem__idem_find(e, s, key, strlen(key));
    *out = d;
    if (d != NULL && ((d->lease != NULL && !mem__lease_allowed(req, d->lease)) ||
                      (d->waiter != NULL && !mem__waiter_allowed(req, d->waiter->req)) ||
                      (d->ticket != NULL && !mem__ticket_allowed(req, d->ticket))))
        return SEMA_EACCES;
    return 0;
}

/* A retry with a known Idempotency-Key: returns 1 if it was answered or took over. The key
 * names one request: a retry of another weight gets EKEYMISMATCH, never a second grant nor
 * the first one's lease. */
static int idem_retry(mem_t *e, ereq_t *er, esem_t *s)
{
    eidem_t *d;

    if (mem__idem_of(e, er->req, s, &d) != 0) {
        fail(e, er, SEMA_EACCES, "the Idempotency-Key names a request of another token");
        return 1;
    }
    if (d == NULL)
        return 0;
    if (d->ticket != NULL) {
        fail(e, er, SEMA_EKEYMISMATCH, "this Idempotency-Key names a ticket; nothing was granted");
        return 1;
    }
    if (d->lease != NULL &&
        (d->lease->weight != er->weight || d->lease->mode != mem__req_mode(er->req))) {
        fail(e, er, SEMA_EKEYMISMATCH, M_KEY_MISMATCH);
        return 1;
    }
    if (d->lease != NULL) {
        /* The grant may still be on its way to disk: this reply waits for it too, and owns
         * the lease from now on (the first attempt's connection may be gone). */
        er->durable = 1;
        mem__lease_own(er, d->lease);
        mem__finish_lease(e, er, d->lease);
        return 1;
    }
    if (d->waiter != NULL)
        return idem_take_over(e, er, d);
    return 0;
}

static void acquire_on(mem_t *e, ereq_t *er, esem_t *s, uint64_t weight)
{
    engine_req_t *req = er->req;
    int rc;

    er->weight = weight;
    er->kind = EKIND_ACQUIRE;
    if (weight == 0 || weight > s->capacity)
        return fail(e, er, SEMA_EINVAL, "weight must be between 1 and the capacity");
    if (idem_retry(e, er, s))
        return;
    if (elist_empty(&s->waiters) && (int64_t)weight <= s->available) {
        er->since_mono = mem__now(e);
        elease_t *l = mem__grant(e, s, req, weight, er->since_mono);
        if (l == NULL)
            return fail(e, er, SEMA_ENOMEM, "out of memory granting the lease");
        mem__lease_own(er, l);
        er->durable = 1;
        return mem__finish_lease(e, er, l);
    }
    if (req->timeout_ms == 0)
        return fail(e, er, SEMA_EBUSY, "not available without waiting");
    rc = mem__park(e, er, s, req->timeout_ms);
    if (rc != 0)
        return fail(e, er, rc, rc == SEMA_ELIMIT ? "too many parked requests" : "out of memory");
    if (req->idem_key != NULL && req->idem_key[0] != '\0') {
        er->idem = mem__idem_new(e, s, req->idem_key, strlen(req->idem_key));
        if (er->idem != NULL)
            er->idem->waiter = er;
    }
}

static void op_acquire(mem_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s != NULL)
        acquire_on(e, er, s, er->req->weight);
}

static void op_wait_idle(mem_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);
    int rc;

    if (s == NULL)
        return;
    er->kind = EKIND_WAIT_IDLE;
    if (elist_empty(&s->waiters) && s->available >= (int64_t)s->capacity)
        return mem__finish_view(e, er, s, ENGINE_RES_IDLE);
    if (er->req->timeout_ms == 0)
        return fail(e, er, SEMA_EBUSY, "not idle");
    rc = mem__park(e, er, s, er->req->timeout_ms);
    if (rc != 0)
        fail(e, er, rc, rc == SEMA_ELIMIT ? "too many parked requests" : "out of memory");
}

/* ---- keyed locks ---- */

static void op_lock_acquire(mem_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    uint64_t r = e->cfg.lock_readers;
    esem_t *s;

    s = mem__lock_find(e, req->name, req->name_len);
    if (s == NULL) {
        if (e->cfg.max_locks && e->locks.count >= e->cfg.max_locks)
            return fail(e, er, SEMA_ELIMIT, "too many lock keys");
        s = mem__sem_new(e, req->name, req->name_len, r, ESEM_LOCK);
        if (s == NULL)
            return fail(e, er, SEMA_ENOMEM, "out of memory creating the lock");
    }
    acquire_on(e, er, s, req->mode == ENGINE_MODE_SHARED ? 1 : s->capacity);
    mem__maybe_free_lock(e, s); /* a failed try must not leave the key behind */
}

static void op_lock_get(mem_t *e, ereq_t *er)
{
    esem_t *s = mem__lock_find(e, er->req->name, er->req->name_len);

    if (s == NULL)
        return fail(e, er, SEMA_ENOENT, "no such lock key (not held or awaited)");
    mem__finish_view(e, er, s, ENGINE_RES_LOCK);
}

/* ---- leases ---- */

/* Find a live lease, or complete the request with the tombstone's reason or ENOENT. */
static elease_t *find_lease(mem_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    elease_t *l = mem__lease_find(e, req->name, req->name_len);
    etomb_t *t;

    if (l != NULL)
        return l;
    t = mem__tomb_find(e, req->name, req->name_len);
    if (t != NULL && t->reason <= ETOMB_DELETED)
        fail(e, er, mem__tomb_status(t->reason), M_LEASE_ENDED[t->reason]);
    else
        fail(e, er, SEMA_ENOENT, "no such lease");
    return NULL;
}

static void op_lease_get(mem_t *e, ereq_t *er)
{
    elease_t *l = find_lease(e, er);

    if (l != NULL)
        mem__finish_lease(e, er, l);
}

/* Find a live lease the request may renew or release (with --auth: its token's own). */
static elease_t *find_own_lease(mem_t *e, ereq_t *er)
{
    elease_t *l = find_lease(e, er);

    if (l != NULL && !mem__lease_allowed(er->req, l)) {
        fail(e, er, SEMA_EACCES,
             "the lease was taken by another token (only its token or an admin may end it)");
        return NULL;
    }
    return l;
}

static void op_lease_renew(mem_t *e, ereq_t *er)
{
    int64_t ttl = er->req->ttl_ms;
    elease_t *l = find_own_lease(e, er);

    if (l == NULL)
        return;
    l->ttl_ms = ttl;
    l->expires_at_ms = mem__wall_ms() + ttl;
    eheap_update(&e->heap, &l->hi, mem__now(e) + (uint64_t)ttl);
    mem__timer_rearm(e);
    mem__store_lease(e, l, 0);
    er->durable = e->strict; /* relaxed: rides the next commit, the reply does not wait */
    mem__finish_lease(e, er, l);
}

static void end_lease_op(mem_t *e, ereq_t *er, int reason)
{
    elease_t *l = find_own_lease(e, er);
    esem_t *s;

    if (l == NULL)
        return;
    s = l->sem;
    mem__lease_end(e, l, reason);
    er->durable = e->strict; /* relaxed answers a release before its commit */
    if (reason == ETOMB_REVOKED) {
        s->fence = ++e->fence_seq; /* a fenced write with the old token now loses */
        mem__store_sem(e, s);
        er->durable = 1;
    }
    mem__admit(e, s);
    mem__maybe_free_lock(e, s);
    mem__finish(e, er, 0, NULL);
}

static void op_lease_release(mem_t *e, ereq_t *er)
{
    end_lease_op(e, er, ETOMB_RELEASED);
}

static void op_lease_revoke(mem_t *e, ereq_t *er)
{
    end_lease_op(e, er, ETOMB_REVOKED);
}

/* ---- legacy ---- */

/* Up and down move a semaphore's value with no lease, so once either has touched a v1
 * semaphore it becomes a legacy counter (GET shows "legacy": true): its value is stored as
 * is at every grant and release, instead of being recomputed from its leases at a restart. */

static void op_legacy_delete(mem_t *e, ereq_t *er)
{
    op_sem_delete(e, er);
}

static void op_legacy_value(mem_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s != NULL)
        mem__finish_view(e, er, s, ENGINE_RES_LEGACY);
}

static void op_legacy_up(mem_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s == NULL)
        return;
    if (s->available >= (int64_t)ENGINE_CAPACITY_MAX)
        return fail(e, er, SEMA_EOVERFLOW, "value would exceed 2^53");
    s->available++;
    s->flags |= ESEM_LEGACY; /* its value is a counter now: stored as is (see below) */
    mem__store_sem(e, s);
    mem__admit(e, s);
    er->durable = 1;
    mem__finish_view(e, er, s, ENGINE_RES_LEGACY);
}

static void op_legacy_down(mem_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s == NULL)
        return;
    if (s->available < 1 || !elist_empty(&s->waiters)) /* a try never jumps the queue */
        return fail(e, er, SEMA_EBUSY, "Semaphore locked");
    s->available--;
    s->flags |= ESEM_LEGACY;
    mem__store_sem(e, s);
    er->durable = 1;
    mem__finish_view(e, er, s, ENGINE_RES_LEGACY);
}

const mem_op_fn mem__ops[ENGINE_OP_COUNT] = {
    [ENGINE_SEM_PUT] = op_sem_put,
    [ENGINE_SEM_RESIZE] = op_sem_resize,
    [ENGINE_SEM_GET] = op_sem_get,
    [ENGINE_SEM_DELETE] = op_sem_delete,
    [ENGINE_SEM_LIST] = op_sem_list,
    [ENGINE_ACQUIRE] = op_acquire,
    [ENGINE_WAIT_IDLE] = op_wait_idle,
    [ENGINE_LEASE_GET] = op_lease_get,
    [ENGINE_LEASE_RENEW] = op_lease_renew,
    [ENGINE_LEASE_RELEASE] = op_lease_release,
    [ENGINE_LEASE_REVOKE] = op_lease_revoke,
    [ENGINE_LOCK_ACQUIRE] = op_lock_acquire,
    [ENGINE_LOCK_GET] = op_lock_get,
    [ENGINE_LEGACY_CREATE] = op_legacy_create,
    [ENGINE_LEGACY_DELETE] = op_legacy_delete,
    [ENGINE_LEGACY_VALUE] = op_legacy_value,
    [ENGINE_LEGACY_UP] = op_legacy_up,
    [ENGINE_LEGACY_DOWN] = op_legacy_down,
    [ENGINE_TICKET_CREATE] = mem__op_ticket_create,
    [ENGINE_TICKET_GET] = mem__op_ticket_get,
    [ENGINE_TICKET_DELETE] = mem__op_ticket_delete,
};
