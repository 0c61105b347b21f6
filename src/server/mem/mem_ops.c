/* SPDX-License-Identifier: MIT */
/* engine_ops.c - one handler per engine operation: validate, mutate, complete or park. */
#include "mem_internal.h"

#include <string.h>

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define OWNER_MAX 1024
#define IDEM_KEY_MAX 256
#define CAPACITY_MAX ((uint64_t)1 << 53) /* exact in JSON doubles, as the API requires */

static const char *const M_NOT_FOUND = "no such semaphore";
static const char *const M_LEASE_ENDED[] = {
    [ETOMB_RELEASED] = "the lease was already released",
    [ETOMB_EXPIRED] = "the lease expired",
    [ETOMB_REVOKED] = "the lease was revoked",
    [ETOMB_DELETED] = "the lease's semaphore was deleted",
};

static void fail(engine_t *e, ereq_t *er, int status, const char *msg)
{
    engine__finish(e, er, status, NULL, msg);
}

/* Check the name and find the semaphore; completes the request and returns NULL if not. */
static int check_name(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;

    if (req->name_len == 0) {
        fail(e, er, SEMA_EINVAL, "name must not be empty");
        return -1;
    }
    if (req->name_len > e->cfg.max_name_len) {
        fail(e, er, SEMA_ENAMETOOLONG, "name is longer than the configured maximum");
        return -1;
    }
    return 0;
}

static esem_t *find_sem(engine_t *e, ereq_t *er)
{
    esem_t *s;

    if (check_name(e, er) != 0)
        return NULL;
    s = engine__sem_find(e, er->req->name, er->req->name_len);
    if (s == NULL)
        fail(e, er, SEMA_ENOENT, M_NOT_FOUND);
    return s;
}

static int valid_utf8(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);

    json_decref(j);
    return j != NULL;
}

/* ---- create, delete, resize ---- */

static esem_t *create_sem(engine_t *e, ereq_t *er, uint64_t capacity, int flags)
{
    engine_req_t *req = er->req;
    esem_t *s;

    if (!valid_utf8(req->name, req->name_len)) {
        fail(e, er, SEMA_EINVAL, "name must be valid UTF-8");
        return NULL;
    }
    if (e->cfg.max_semaphores && e->sems.count >= e->cfg.max_semaphores) {
        fail(e, er, SEMA_ELIMIT, "too many semaphores");
        return NULL;
    }
    s = engine__sem_new(e, req->name, req->name_len, capacity, flags);
    if (s == NULL) {
        fail(e, er, SEMA_ENOMEM, "out of memory creating the semaphore");
        return NULL;
    }
    /* A recreated name goes on counting: fences come from one sequence for all names,
     * which starts above every fence in the store (engine__store_load). */
    engine__store_sem(e, s);
    er->durable = 1;
    return s;
}

static void op_sem_put(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    esem_t *s;

    if (check_name(e, er) != 0)
        return;
    if (req->capacity == 0 || req->capacity > CAPACITY_MAX)
        return fail(e, er, SEMA_EINVAL, "capacity must be between 1 and 2^53");
    s = engine__sem_find(e, req->name, req->name_len);
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
    engine__finish(e, er, 0, engine__json_state(e, s), NULL);
}

static void op_legacy_create(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    esem_t *s;

    if (check_name(e, er) != 0)
        return;
    if (req->capacity > CAPACITY_MAX)
        return fail(e, er, SEMA_EINVAL, "value must be at most 2^53");
    if (engine__sem_find(e, req->name, req->name_len) != NULL) {
        er->durable = 1; /* its create may still be on its way to disk */
        return fail(e, er, SEMA_EEXIST, "the semaphore already exists");
    }
    s = create_sem(e, er, req->capacity, ESEM_LEGACY);
    if (s != NULL)
        engine__finish(e, er, 0, engine__json_legacy(s), NULL);
}

/* Fail every waiter (ECANCELED), void every lease, forget the semaphore. */
static void delete_sem(engine_t *e, esem_t *s)
{
    while (!elist_empty(&s->waiters)) {
        ereq_t *w = ENGINE__CONTAINER(s->waiters.next, ereq_t, link);
        engine__unpark(e, w);
        engine__finish(e, w, SEMA_ECANCELED, NULL, "the semaphore was deleted");
    }
    while (!elist_empty(&s->holders))
        engine__lease_end(e, ENGINE__CONTAINER(s->holders.next, elease_t, link), ETOMB_DELETED);
    engine__event(e, s, "deleted", json_pack("{s:s%}", "name", s->name, (size_t)s->name_len));
    if (e->store != NULL) {
        if (s->dirty_at != 0) /* its retired fence is read from its row: write that first */
            engine__store_sem_now(e, s);
        (void)store_del_sem(e->store, s->name);
        engine__mark_dirty(e);
    }
    engine__sem_free(e, s);
}

static void op_sem_delete(engine_t *e, ereq_t *er)
{
    esem_t *s;

    er->durable = 1; /* a "not found" may rest on a delete whose commit still runs */
    s = find_sem(e, er);

    if (s == NULL)
        return;
    delete_sem(e, s);
    er->durable = 1;
    engine__finish(e, er, 0, NULL, NULL);
}

static void op_sem_resize(engine_t *e, ereq_t *er)
{
    uint64_t cap = er->req->capacity;
    esem_t *s = find_sem(e, er);

    if (s == NULL)
        return;
    if (cap == 0 || cap > CAPACITY_MAX)
        return fail(e, er, SEMA_EINVAL, "capacity must be between 1 and 2^53");
    s->available += (int64_t)cap - (int64_t)s->capacity;
    s->capacity = cap;
    /* Queued requests that can never fit any more fail now instead of blocking the queue. */
    for (elist_t *x = s->waiters.next, *next; x != &s->waiters; x = next) {
        ereq_t *w = ENGINE__CONTAINER(x, ereq_t, link);
        next = x->next;
        if (w->kind == EKIND_ACQUIRE && w->weight > cap) {
            engine__unpark(e, w);
            engine__finish(e, w, SEMA_EINVAL, NULL, "weight is above the new capacity");
        }
    }
    engine__store_sem(e, s);
    /* subscribers hear of the resize before the grants it causes */
    engine__event(
        e, s, "resized",
        json_pack("{s:s%,s:I}", "name", s->name, (size_t)s->name_len, "capacity", (json_int_t)cap));
    engine__admit(e, s);
    er->durable = 1;
    engine__finish(e, er, 0, engine__json_state(e, s), NULL);
}

/* ---- reads ---- */

static void op_sem_get(engine_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s != NULL)
        engine__finish(e, er, 0, engine__json_state(e, s), NULL);
}

static int has_prefix(const esem_t *s, const char *p, size_t plen)
{
    return s->name_len >= plen && memcmp(s->name, p, plen) == 0;
}

static void op_sem_list(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    const char *pfx = req->prefix ? req->prefix : "";
    size_t plen = strlen(pfx);
    uint64_t limit = req->limit == 0 ? LIST_LIMIT_DEFAULT : req->limit;
    json_t *arr = json_array(), *res;
    esem_t *s, *last = NULL;

    if (limit > LIST_LIMIT_MAX)
        limit = LIST_LIMIT_MAX;
    if (req->cursor != NULL && req->cursor[0] != '\0' &&
        strcmp(req->cursor, pfx) >= 0) /* resume strictly after the cursor */
        s = engine__treap_after(e, req->cursor, strlen(req->cursor), 0);
    else
        s = engine__treap_after(e, pfx, plen, 1);
    for (; s != NULL && has_prefix(s, pfx, plen) && json_array_size(arr) < limit;
         s = engine__treap_after(e, s->name, s->name_len, 0)) {
        json_array_append_new(arr, engine__json_list_item(s));
        last = s;
    }
    res = json_pack("{s:o,s:o}", "semaphores", arr, "next_cursor",
                    s != NULL && last != NULL && has_prefix(s, pfx, plen)
                        ? json_stringn(last->name, last->name_len)
                        : json_null());
    engine__finish(e, er, 0, res, NULL);
}

/* ---- acquire and wait-idle ---- */

static int check_ttl_owner(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;

    if (req->ttl_ms < 0 || req->ttl_ms > e->cfg.max_ttl_ms) {
        fail(e, er, SEMA_EINVAL, "ttl_ms must be between 1 and the configured maximum");
        return -1;
    }
    if (req->owner != NULL &&
        (strlen(req->owner) > OWNER_MAX || !valid_utf8(req->owner, strlen(req->owner)))) {
        fail(e, er, SEMA_EINVAL, "owner must be UTF-8 of at most 1024 bytes");
        return -1;
    }
    if (req->idem_key != NULL && strlen(req->idem_key) > IDEM_KEY_MAX) {
        fail(e, er, SEMA_EINVAL, "Idempotency-Key is longer than 256 bytes");
        return -1;
    }
    return 0;
}

/* The first attempt with this key is still parked: the retry takes its place in the queue
 * (same position, its own timeout) and the first attempt ends ECANCELED. Returns 1. */
static int idem_take_over(engine_t *e, ereq_t *er, eidem_t *d)
{
    ereq_t *old = d->waiter;
    int64_t timeout_ms = er->req->timeout_ms;

    if (old->weight != er->weight) {
        fail(e, er, SEMA_EINVAL, "Idempotency-Key reused for a request of another weight");
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
    engine__heap_remove(&e->heap, &old->hi);
    er->hi.kind = EITEM_WAITER;
    er->hi.idx = EHEAP_NONE;
    if (timeout_ms > 0 && (uint64_t)timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = engine__now(e) + (uint64_t)timeout_ms;
        if (engine__heap_push(&e->heap, &er->hi) != 0)
            er->hi.idx = EHEAP_NONE; /* waits without a timeout rather than failing */
    }
    engine__timer_rearm(e);
    old->idem = NULL;
    old->sem = NULL;
    engine__finish(e, old, SEMA_ECANCELED, NULL,
                   "replaced by a retry with the same Idempotency-Key");
    return 1;
}

/* A retry with a known Idempotency-Key: returns 1 if it was answered or took over. */
static int idem_retry(engine_t *e, ereq_t *er, esem_t *s)
{
    const char *key = er->req->idem_key;
    eidem_t *d;

    if (key == NULL || key[0] == '\0')
        return 0;
    d = engine__idem_find(e, s, key, strlen(key));
    if (d == NULL)
        return 0;
    if (d->lease != NULL) {
        /* The grant may still be on its way to disk: this reply waits for it too, and owns
         * the lease from now on (the first attempt's connection may be gone). */
        er->durable = 1;
        engine__lease_own(er, d->lease);
        engine__finish_lease(e, er, d->lease);
        return 1;
    }
    if (d->waiter != NULL)
        return idem_take_over(e, er, d);
    return 0;
}

static void acquire_on(engine_t *e, ereq_t *er, esem_t *s, uint64_t weight)
{
    engine_req_t *req = er->req;
    int rc;

    er->weight = weight;
    er->kind = EKIND_ACQUIRE;
    if (weight == 0 || weight > s->capacity)
        return fail(e, er, SEMA_EINVAL, "weight must be between 1 and the capacity");
    if (check_ttl_owner(e, er) != 0 || idem_retry(e, er, s))
        return;
    if (elist_empty(&s->waiters) && (int64_t)weight <= s->available) {
        er->since_mono = engine__now(e);
        elease_t *l =
            engine__grant(e, s, weight, req->ttl_ms, req->owner, req->idem_key, er->since_mono);
        if (l == NULL)
            return fail(e, er, SEMA_ENOMEM, "out of memory granting the lease");
        engine__lease_own(er, l);
        er->durable = 1;
        return engine__finish_lease(e, er, l);
    }
    if (req->timeout_ms == 0)
        return fail(e, er, SEMA_EBUSY, "not available without waiting");
    rc = engine__park(e, er, s, req->timeout_ms);
    if (rc != 0)
        return fail(e, er, rc, rc == SEMA_ELIMIT ? "too many parked requests" : "out of memory");
    if (req->idem_key != NULL && req->idem_key[0] != '\0') {
        er->idem = engine__idem_new(e, s, req->idem_key, strlen(req->idem_key));
        if (er->idem != NULL)
            er->idem->waiter = er;
    }
}

static void op_acquire(engine_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s != NULL)
        acquire_on(e, er, s, er->req->weight);
}

static void op_wait_idle(engine_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);
    int rc;

    if (s == NULL)
        return;
    er->kind = EKIND_WAIT_IDLE;
    if (elist_empty(&s->waiters) && s->available >= (int64_t)s->capacity)
        return engine__finish(
            e, er, 0, json_pack("{s:s%,s:b}", "name", s->name, (size_t)s->name_len, "idle", 1),
            NULL);
    if (er->req->timeout_ms == 0)
        return fail(e, er, SEMA_EBUSY, "not idle");
    rc = engine__park(e, er, s, er->req->timeout_ms);
    if (rc != 0)
        fail(e, er, rc, rc == SEMA_ELIMIT ? "too many parked requests" : "out of memory");
}

/* ---- keyed locks ---- */

static void op_lock_acquire(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    uint64_t r = e->cfg.lock_readers;
    esem_t *s;

    if (check_name(e, er) != 0)
        return;
    if (req->mode != ENGINE_MODE_SHARED && req->mode != ENGINE_MODE_EXCLUSIVE)
        return fail(e, er, SEMA_EINVAL, "mode must be \"shared\" or \"exclusive\"");
    s = engine__lock_find(e, req->name, req->name_len);
    if (s == NULL) {
        if (!valid_utf8(req->name, req->name_len))
            return fail(e, er, SEMA_EINVAL, "key must be valid UTF-8");
        if (e->cfg.max_locks && e->locks.count >= e->cfg.max_locks)
            return fail(e, er, SEMA_ELIMIT, "too many lock keys");
        s = engine__sem_new(e, req->name, req->name_len, r, ESEM_LOCK);
        if (s == NULL)
            return fail(e, er, SEMA_ENOMEM, "out of memory creating the lock");
    }
    acquire_on(e, er, s, req->mode == ENGINE_MODE_SHARED ? 1 : s->capacity);
    engine__maybe_free_lock(e, s); /* a failed try must not leave the key behind */
}

static void op_lock_get(engine_t *e, ereq_t *er)
{
    esem_t *s;

    if (check_name(e, er) != 0)
        return;
    s = engine__lock_find(e, er->req->name, er->req->name_len);
    if (s == NULL)
        return fail(e, er, SEMA_ENOENT, "no such lock key (not held or awaited)");
    engine__finish(e, er, 0, engine__json_lock(e, s), NULL);
}

/* ---- leases ---- */

/* Find a live lease, or complete the request with the tombstone's reason or ENOENT. */
static elease_t *find_lease(engine_t *e, ereq_t *er)
{
    engine_req_t *req = er->req;
    elease_t *l = engine__lease_find(e, req->name, req->name_len);
    etomb_t *t;

    if (l != NULL)
        return l;
    t = engine__tomb_find(e, req->name, req->name_len);
    if (t != NULL)
        fail(e, er, engine__tomb_status(t->reason), M_LEASE_ENDED[t->reason]);
    else
        fail(e, er, SEMA_ENOENT, "no such lease");
    return NULL;
}

static void op_lease_get(engine_t *e, ereq_t *er)
{
    elease_t *l = find_lease(e, er);

    if (l != NULL)
        engine__finish_lease(e, er, l);
}

static void op_lease_renew(engine_t *e, ereq_t *er)
{
    int64_t ttl = er->req->ttl_ms;
    elease_t *l = find_lease(e, er);

    if (l == NULL)
        return;
    if (ttl < 0 || ttl > e->cfg.max_ttl_ms)
        return fail(e, er, SEMA_EINVAL, "ttl_ms must be between 1 and the configured maximum");
    if (ttl == 0)
        ttl = e->cfg.default_ttl_ms;
    l->ttl_ms = ttl;
    l->expires_at_ms = engine__wall_ms() + ttl;
    engine__heap_update(&e->heap, &l->hi, engine__now(e) + (uint64_t)ttl);
    engine__timer_rearm(e);
    engine__store_lease(e, l); /* rides the next commit; the reply does not wait */
    engine__finish_lease(e, er, l);
}

static void end_lease_op(engine_t *e, ereq_t *er, int reason)
{
    elease_t *l = find_lease(e, er);
    esem_t *s;

    if (l == NULL)
        return;
    s = l->sem;
    engine__lease_end(e, l, reason);
    if (reason == ETOMB_REVOKED) {
        s->fence = ++e->fence_seq; /* a fenced write with the old token now loses */
        engine__store_sem(e, s);
        er->durable = 1;
    }
    engine__admit(e, s);
    engine__maybe_free_lock(e, s);
    engine__finish(e, er, 0, NULL, NULL);
}

static void op_lease_release(engine_t *e, ereq_t *er)
{
    end_lease_op(e, er, ETOMB_RELEASED);
}

static void op_lease_revoke(engine_t *e, ereq_t *er)
{
    end_lease_op(e, er, ETOMB_REVOKED);
}

/* ---- legacy ---- */

/* Up and down move a semaphore's value with no lease, so once either has touched a v1
 * semaphore it becomes a legacy counter (GET shows "legacy": true): its value is stored as
 * is at every grant and release, instead of being recomputed from its leases at a restart. */

static void op_legacy_delete(engine_t *e, ereq_t *er)
{
    op_sem_delete(e, er);
}

static void op_legacy_value(engine_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s != NULL)
        engine__finish(e, er, 0, engine__json_legacy(s), NULL);
}

static void op_legacy_up(engine_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s == NULL)
        return;
    if (s->available >= (int64_t)CAPACITY_MAX)
        return fail(e, er, SEMA_EOVERFLOW, "value would exceed 2^53");
    s->available++;
    s->flags |= ESEM_LEGACY; /* its value is a counter now: stored as is (see below) */
    engine__store_sem(e, s);
    engine__admit(e, s);
    er->durable = 1;
    engine__finish(e, er, 0, engine__json_legacy(s), NULL);
}

static void op_legacy_down(engine_t *e, ereq_t *er)
{
    esem_t *s = find_sem(e, er);

    if (s == NULL)
        return;
    if (s->available < 1 || !elist_empty(&s->waiters)) /* a try never jumps the queue */
        return fail(e, er, SEMA_EBUSY, "Semaphore locked");
    s->available--;
    s->flags |= ESEM_LEGACY;
    engine__store_sem(e, s);
    er->durable = 1;
    engine__finish(e, er, 0, engine__json_legacy(s), NULL);
}

const engine_op_fn engine__ops[ENGINE_OP_COUNT] = {
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
};
