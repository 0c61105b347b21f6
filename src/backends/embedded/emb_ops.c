/* SPDX-License-Identifier: MIT */
/* emb_ops.c - the embedded back end's handler of each engine operation: look up, mutate,
 * complete or park. Inputs arrive checked against the limits (engine/front.c). */
#include "backends/embedded/emb_internal.h"

#include <string.h>

#include "engine/engine_limits.h"

static void fail(emb_t *eb, emb_req_t *er, be_msg_t id)
{
    emb__fail(eb, er, id);
}

/* Find the semaphore; completes the request and returns NULL if there is none. */
static emb_sem_t *find_sem(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = emb__sem_find(eb, er->req->name, er->req->name_len);

    if (s == NULL)
        fail(eb, er, BE_MSG_NO_SEM);
    return s;
}

/* ---- create, delete, resize ---- */

static emb_sem_t *create_sem(emb_t *eb, emb_req_t *er, uint64_t capacity, int flags)
{
    engine_req_t *req = er->req;
    emb_sem_t *s;

    if (eb->cfg.max_semaphores && eb->sems.count >= eb->cfg.max_semaphores) {
        fail(eb, er, BE_MSG_TOO_MANY_SEMS);
        return NULL;
    }
    s = emb__sem_new(eb, req->name, req->name_len, capacity, flags);
    if (s == NULL) {
        fail(eb, er, BE_MSG_NOMEM_SEM);
        return NULL;
    }
    /* A recreated name goes on counting: fences come from one sequence for all names,
     * which starts above every fence in the store (emb__store_load). */
    emb__store_sem(eb, s);
    er->durable = 1;
    return s;
}

/* The limits a PUT asks for (those it does not name: none). */
static void put_limits(const engine_req_t *req, uint64_t *tm, uint64_t *rate, uint64_t *burst)
{
    *tm = req->limits & ENGINE_LIMIT_TENANT_MAX ? req->tenant_max : 0;
    *rate = req->limits & ENGINE_LIMIT_RATE ? req->rate_per_s : 0;
    *burst = *rate != 0 && (req->limits & ENGINE_LIMIT_BURST) ? req->rate_burst : 0;
}

static void op_sem_put(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    uint64_t tm, rate, burst, htm, hrate, hburst;
    emb_sem_t *s;

    put_limits(req, &tm, &rate, &burst);
    s = emb__sem_find(eb, req->name, req->name_len);
    /* An answer from what exists may rest on a create whose commit still runs. */
    er->durable = s != NULL;
    if (s != NULL) {
        emb__lim_get(s, &htm, &hrate, &hburst);
        if (s->capacity != req->capacity)
            return fail(eb, er, BE_MSG_SEM_OTHER_CAPACITY);
        if (htm != tm || hrate != rate || hburst != burst)
            return fail(eb, er, BE_MSG_SEM_OTHER_LIMITS);
    }
    if (s == NULL) {
        s = create_sem(eb, er, req->capacity, 0);
        if (s == NULL)
            return;
        if (emb__lim_set(eb, s, tm, rate, burst) != 0) {
            emb__sem_free(eb, s);
            return fail(eb, er, BE_MSG_NOMEM_SEM);
        }
        req->created = 1;
    }
    emb__finish_view(eb, er, s, ENGINE_RES_SEM);
}

static void op_legacy_create(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_sem_t *s;

    if (emb__sem_find(eb, req->name, req->name_len) != NULL) {
        er->durable = 1; /* its create may still be on its way to disk */
        return fail(eb, er, BE_MSG_SEM_EXISTS);
    }
    s = create_sem(eb, er, req->capacity, EMB_SEM_LEGACY);
    if (s != NULL)
        emb__finish_view(eb, er, s, ENGINE_RES_LEGACY);
}

/* A waiter of s fails with `why` (a request on several semaphores leaves them all; a
 * ticket ends with `reason`); admission runs again where it was. */
static void drop_waiter(emb_t *eb, emb_req_t *w, be_msg_t why, int reason)
{
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    size_t n;

    if (w->kind == EMB_KIND_PART)
        w = w->multi->main;
    if (w->kind == EMB_KIND_TICKET) {
        emb_ticket_t *t = ECONTAINER(w, emb_ticket_t, q);
        n = emb__req_sems(w, sems);
        emb__ticket_refuse(eb, t, reason);
    } else {
        n = emb__req_sems(w, sems);
        if (reason != EMB_TOMB_TICKET_DELETED) /* "deleted" says it for all */
            emb__event_waiter(eb, w, "left");
        emb__unpark(eb, w);
        emb__fail(eb, w, why);
    }
    emb__admit_all(eb, sems, n);
}

/* Fail every waiter (ECANCELED), void every lease, forget the semaphore. A request or lease
 * on several semaphores goes from all of them. */
static void delete_sem(emb_t *eb, emb_sem_t *s)
{
    int was = emb__admit_hold(eb);

    s->flags |= EMB_SEM_DELETED;
    while (!elist_empty(&s->waiters))
        drop_waiter(eb, ECONTAINER(s->waiters.next, emb_req_t, link), BE_MSG_WAITER_SEM_DELETED,
                    EMB_TOMB_TICKET_DELETED);
    while (!elist_empty(&s->holders)) {
        emb_lease_t *l = ECONTAINER(s->holders.next, emb_lease_t, link);
        emb__lease_end_admit(eb, emb__lease_main(l) != NULL ? emb__lease_main(l) : l,
                             EMB_TOMB_DELETED);
    }
    emb__event_sem(eb, s, "deleted", 0);
    if (eb->store != NULL) {
        if (s->dirty_at != 0) /* its retired fence is read from its row: write that first */
            emb__store_sem_now(eb, s);
        (void)store_del_sem(eb->store, s->name);
        emb__mark_dirty(eb);
    }
    emb__sem_free(eb, s);
    emb__admit_release(eb, was);
}

static void op_sem_delete(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s;

    er->durable = 1; /* a "not found" may rest on a delete whose commit still runs */
    s = find_sem(eb, er);

    if (s == NULL)
        return;
    delete_sem(eb, s);
    er->durable = 1;
    emb__finish(eb, er, 0, NULL);
}

static void op_sem_resize(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    uint64_t cap, tm, rate, burst;
    emb_sem_t *s = find_sem(eb, er);
    be_msg_t why;
    int was;

    if (s == NULL)
        return;
    cap = req->capacity != 0 ? req->capacity : s->capacity;
    if ((why = emb__lim_wanted(s, req, &tm, &rate, &burst)) != BE_MSG_NONE)
        return fail(eb, er, why);
    if (emb__lim_set(eb, s, tm, rate, burst) != 0)
        return fail(eb, er, BE_MSG_NOMEM);
    s->available += (int64_t)cap - (int64_t)s->capacity;
    s->capacity = cap;
    was = emb__admit_hold(eb);
    /* Queued requests that can never fit any more fail now instead of blocking the queue. */
    for (elist_t *x = s->waiters.next, *next; x != &s->waiters; x = next) {
        emb_req_t *w = ECONTAINER(x, emb_req_t, link);
        next = x->next;
        if (w->kind == EMB_KIND_WAIT_IDLE)
            continue;
        why = w->weight > cap ? BE_MSG_WAITER_ABOVE_CAPACITY : emb__lim_too_heavy(s, w->weight);
        if (why != BE_MSG_NONE)
            drop_waiter(eb, w, why, EMB_TOMB_TICKET_REFUSED);
    }
    emb__store_sem(eb, s);
    /* subscribers hear of the resize before the grants it causes */
    emb__event_sem(eb, s, "resized", cap);
    emb__admit(eb, s);
    emb__admit_release(eb, was);
    er->durable = 1;
    emb__finish_view(eb, er, s, ENGINE_RES_SEM);
}

/* ---- reads ---- */

static void op_sem_get(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = find_sem(eb, er);

    if (s != NULL)
        emb__finish_view(eb, er, s, ENGINE_RES_SEM);
}

static int has_prefix(const emb_sem_t *s, const char *p, size_t plen)
{
    return s->name_len >= plen && memcmp(s->name, p, plen) == 0;
}

/* The first name of the page: strictly after the cursor, or the first with the prefix. */
static emb_sem_t *list_start(emb_sem_t *root, const engine_req_t *req, const char *pfx, size_t plen)
{
    if (req->cursor != NULL && req->cursor[0] != '\0' && strcmp(req->cursor, pfx) >= 0)
        return emb__treap_after(root, req->cursor, strlen(req->cursor), 0);
    return emb__treap_after(root, pfx, plen, 1);
}

/* A page of the names in `root` (the semaphores, or the lock keys) as a result of `kind`. */
static void list_page(emb_t *eb, emb_req_t *er, emb_sem_t *root, engine_res_kind_t kind)
{
    engine_req_t *req = er->req;
    engine_result_t *r = &req->res;
    const char *pfx = req->prefix ? req->prefix : "";
    size_t plen = strlen(pfx), n = 0;
    emb_sem_t *s, *last = NULL;

    r->items = engine_result_alloc(r, req->limit * sizeof(*r->items));
    if (r->items == NULL)
        return fail(eb, er, BE_MSG_NOMEM_RESULT);
    for (s = list_start(root, req, pfx, plen);
         s != NULL && has_prefix(s, pfx, plen) && n < req->limit;
         s = emb__treap_after(root, s->name, s->name_len, 0)) {
        if (emb__view_item(eb, r, &r->items[n++], s) != 0) {
            engine_result_clear(r);
            return fail(eb, er, BE_MSG_NOMEM_RESULT);
        }
        last = s;
    }
    r->nitems = n;
    if (s != NULL && last != NULL && has_prefix(s, pfx, plen)) {
        r->next_cursor = r->items[n - 1].v.name;
        r->next_cursor_len = r->items[n - 1].v.name_len;
    }
    r->kind = kind;
    emb__finish(eb, er, 0, NULL);
}

static void op_sem_list(emb_t *eb, emb_req_t *er)
{
    list_page(eb, er, eb->root, ENGINE_RES_LIST);
}

static void op_lock_list(emb_t *eb, emb_req_t *er)
{
    list_page(eb, er, eb->lock_root, ENGINE_RES_LOCK_LIST);
}

/* ---- acquire and wait-idle ---- */

static int same_tenant(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The first attempt with this key is still parked: the retry takes its place in the queue
 * (same position, its own timeout) and the first attempt ends EREPLACED. A retry of another
 * weight fails EKEYMISMATCH and the first attempt waits on. Returns 1. */
static int idem_take_over(emb_t *eb, emb_req_t *er, emb_idem_t *d)
{
    emb_req_t *old = d->waiter;
    int64_t timeout_ms = er->req->timeout_ms;

    if (old->weight != er->weight || emb__req_mode(old->req) != emb__req_mode(er->req)) {
        fail(eb, er, BE_MSG_KEY_OTHER_WEIGHT);
        return 1;
    }
    if (!same_tenant(old->req->tenant, er->req->tenant)) {
        fail(eb, er, BE_MSG_KEY_OTHER_TENANT);
        return 1;
    }
    if (timeout_ms == 0) {
        fail(eb, er, BE_MSG_NOT_AVAILABLE);
        return 1;
    }
    er->kind = old->kind;
    er->sem = old->sem;
    er->state = EMB_REQ_PARKED;
    er->since_mono = old->since_mono;
    er->idem = d;
    d->waiter = er;
    elist_push_back(&old->link, &er->link); /* just before old, which then leaves */
    elist_remove(&old->link);
    if (old->tplace != NULL) { /* and its place in its tenant's line */
        er->tplace = old->tplace;
        er->tplace->er = er;
        old->tplace = NULL;
    }
    emb__oq_remove(er->sem, old);
    er->weight = old->weight;
    er->oseq = old->oseq;
    emb__oq_insert(er->sem, er);
    emb__waiter_retimed(eb, er, old, timeout_ms);
    old->idem = NULL;
    old->sem = NULL;
    emb__fail(eb, old, BE_MSG_WAITER_REPLACED);
    return 1;
}

int emb__waiter_allowed(const engine_req_t *req, const engine_req_t *parked)
{
    if (req->principal == NULL || req->principal_admin)
        return 1;
    return parked->principal != NULL && strcmp(parked->principal, req->principal) == 0;
}

int emb__idem_of(emb_t *eb, const engine_req_t *req, const emb_sem_t *s, emb_idem_t **out)
{
    const char *key = req->idem_key;
    emb_idem_t *d = NULL;

    if (key != NULL && key[0] != '\0')
        d = emb__idem_find(eb, s, key, strlen(key));
    *out = d;
    if (d != NULL && ((d->lease != NULL && !emb__lease_allowed(req, d->lease)) ||
                      (d->waiter != NULL && !emb__waiter_allowed(req, d->waiter->req)) ||
                      (d->ticket != NULL && !emb__ticket_allowed(req, d->ticket))))
        return SEMA_EACCES;
    return 0;
}

/* A retry with a known Idempotency-Key: returns 1 if it was answered or took over. The key
 * names one request: a retry of another weight gets EKEYMISMATCH, never a second grant nor
 * the first one's lease. */
static int idem_retry(emb_t *eb, emb_req_t *er, emb_sem_t *s)
{
    emb_idem_t *d;

    if (emb__idem_of(eb, er->req, s, &d) != 0) {
        fail(eb, er, BE_MSG_KEY_OTHER_TOKEN);
        return 1;
    }
    if (d == NULL)
        return 0;
    if (d->ticket != NULL) {
        fail(eb, er, BE_MSG_KEY_NAMES_TICKET);
        return 1;
    }
    if (d->lease != NULL &&
        (d->lease->weight != er->weight || d->lease->mode != emb__req_mode(er->req))) {
        fail(eb, er, BE_MSG_KEY_OTHER_WEIGHT);
        return 1;
    }
    if (d->lease != NULL &&
        !same_tenant(emb__tenant_name(emb__lease_tenant(d->lease), &(size_t){0}),
                     er->req->tenant)) {
        fail(eb, er, BE_MSG_KEY_OTHER_TENANT);
        return 1;
    }
    if (d->lease != NULL) {
        /* The grant may still be on its way to disk: this reply waits for it too, and owns
         * the lease from now on (the first attempt's connection may be gone). */
        er->durable = 1;
        emb__lease_own(er, d->lease);
        emb__finish_lease(eb, er, d->lease);
        return 1;
    }
    if (d->waiter != NULL)
        return idem_take_over(eb, er, d);
    return 0;
}

/* Its Idempotency-Key names this waiter. */
static void idem_waiter(emb_t *eb, emb_req_t *er, emb_sem_t *s)
{
    const char *key = er->req->idem_key;

    if (key != NULL && key[0] != '\0') {
        er->idem = emb__idem_new(eb, s, key, strlen(key));
        if (er->idem != NULL)
            er->idem->waiter = er;
    }
}

/* An acquire on a semaphore with tenants or a rate (or naming a tenant): it joins the line,
 * and admission says whether it goes at once; a try that does not leaves without a trace. */
static void acquire_lim(emb_t *eb, emb_req_t *er, emb_sem_t *s)
{
    engine_req_t *req = er->req;
    be_msg_t heavy;
    int rc;

    if (s->lim == NULL && emb__lim_ensure(eb, s) != 0)
        return fail(eb, er, BE_MSG_NOMEM);
    if ((heavy = emb__lim_too_heavy(s, er->weight)) != BE_MSG_NONE)
        return fail(eb, er, heavy);
    rc = emb__park(eb, er, s, req->timeout_ms);
    if (rc != 0)
        return fail(eb, er, rc == SEMA_ELIMIT ? BE_MSG_TOO_MANY_WAITERS_OR_TENANTS : BE_MSG_NOMEM);
    emb__admit(eb, s);
    if (er->state != EMB_REQ_PARKED)
        return; /* granted */
    if (req->timeout_ms != 0) {
        emb__event_waiter(eb, er, "queued");
        return idem_waiter(eb, er, s);
    }
    emb__unpark(eb, er);
    fail(eb, er, BE_MSG_NOT_AVAILABLE);
    emb__admit(eb, s);
}

static void acquire_on(emb_t *eb, emb_req_t *er, emb_sem_t *s, uint64_t weight)
{
    engine_req_t *req = er->req;
    int rc;

    er->weight = weight;
    er->kind = EMB_KIND_ACQUIRE;
    if (weight == 0 || weight > s->capacity)
        return fail(eb, er, BE_MSG_BAD_WEIGHT);
    if (idem_retry(eb, er, s))
        return;
    if (s->lim != NULL || req->tenant != NULL)
        return acquire_lim(eb, er, s);
    if (elist_empty(&s->waiters) && (int64_t)weight <= s->available) {
        er->since_mono = emb__now(eb);
        emb_lease_t *l = emb__grant(eb, s, req, weight, er->since_mono);
        if (l == NULL)
            return fail(eb, er, BE_MSG_NOMEM_GRANT);
        emb__lease_own(er, l);
        er->durable = 1;
        return emb__finish_lease(eb, er, l);
    }
    if (req->timeout_ms == 0)
        return fail(eb, er, BE_MSG_NOT_AVAILABLE);
    rc = emb__park(eb, er, s, req->timeout_ms);
    if (rc != 0)
        return fail(eb, er, rc == SEMA_ELIMIT ? BE_MSG_TOO_MANY_WAITERS : BE_MSG_NOMEM);
    emb__event_waiter(eb, er, "queued");
    idem_waiter(eb, er, s);
}

static void op_acquire(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = find_sem(eb, er);

    if (s != NULL)
        acquire_on(eb, er, s, er->req->weight);
}

static void op_wait_idle(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = find_sem(eb, er);
    int rc;

    if (s == NULL)
        return;
    er->kind = EMB_KIND_WAIT_IDLE;
    if (elist_empty(&s->waiters) && s->available >= (int64_t)s->capacity)
        return emb__finish_view(eb, er, s, ENGINE_RES_IDLE);
    if (er->req->timeout_ms == 0)
        return fail(eb, er, BE_MSG_NOT_IDLE);
    rc = emb__park(eb, er, s, er->req->timeout_ms);
    if (rc != 0)
        return fail(eb, er, rc == SEMA_ELIMIT ? BE_MSG_TOO_MANY_WAITERS : BE_MSG_NOMEM);
    emb__event_waiter(eb, er, "queued");
}

/* ---- keyed locks ---- */

static void op_lock_acquire(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    uint64_t r = eb->cfg.lock_readers;
    emb_sem_t *s;

    s = emb__lock_find(eb, req->name, req->name_len);
    if (s == NULL) {
        if (eb->cfg.max_locks && eb->locks.count >= eb->cfg.max_locks)
            return fail(eb, er, BE_MSG_TOO_MANY_LOCKS);
        s = emb__sem_new(eb, req->name, req->name_len, r, EMB_SEM_LOCK);
        if (s == NULL)
            return fail(eb, er, BE_MSG_NOMEM_LOCK);
    }
    acquire_on(eb, er, s, req->mode == ENGINE_MODE_SHARED ? 1 : s->capacity);
    emb__maybe_free_lock(eb, s); /* a failed try must not leave the key behind */
}

static void op_lock_get(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = emb__lock_find(eb, er->req->name, er->req->name_len);

    if (s == NULL)
        return fail(eb, er, BE_MSG_NO_LOCK);
    emb__finish_view(eb, er, s, ENGINE_RES_LOCK);
}

/* ---- leases ---- */

/* Find a live lease, or complete the request with the tombstone's reason or ENOENT. */
static emb_lease_t *find_lease(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_lease_t *l = emb__lease_find(eb, req->id, req->id_len);
    emb_tomb_t *t;

    if (l != NULL)
        return l;
    t = emb__tomb_find(eb, req->id, req->id_len);
    if (t != NULL && t->reason <= EMB_TOMB_DELETED)
        fail(eb, er, emb__tomb_msg(t->reason));
    else
        fail(eb, er, BE_MSG_NO_LEASE);
    return NULL;
}

static void op_lease_get(emb_t *eb, emb_req_t *er)
{
    emb_lease_t *l = find_lease(eb, er);

    if (l != NULL)
        emb__finish_lease(eb, er, l);
}

/* Find a live lease the request may renew or release (with --auth: its token's own). */
static emb_lease_t *find_own_lease(emb_t *eb, emb_req_t *er)
{
    emb_lease_t *l = find_lease(eb, er);

    if (l != NULL && !emb__lease_allowed(er->req, l)) {
        fail(eb, er, BE_MSG_LEASE_OTHER_TOKEN);
        return NULL;
    }
    return l;
}

static void op_lease_renew(emb_t *eb, emb_req_t *er)
{
    int64_t ttl = er->req->ttl_ms;
    emb_lease_t *l = find_own_lease(eb, er);

    if (l == NULL)
        return;
    l->ttl_ms = ttl;
    l->expires_at_ms = emb__wall_ms() + ttl;
    /* the wall clock first, then the deadline (emb__lease_deadline) */
    for (emb_lease_t *p = emb__lease_next(l); p != NULL; p = emb__lease_next(p)) {
        p->ttl_ms = l->ttl_ms;
        p->expires_at_ms = l->expires_at_ms;
    }
    eheap_update(&eb->heap, &l->hi, emb__lease_deadline(ttl));
    emb__timer_rearm(eb);
    emb__store_lease(eb, l, 0);
    er->durable = eb->strict; /* relaxed: rides the next commit, the reply does not wait */
    emb__finish_lease(eb, er, l);
}

static void end_lease_op(emb_t *eb, emb_req_t *er, int reason)
{
    emb_lease_t *l = find_own_lease(eb, er);
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    size_t n;

    if (l == NULL)
        return;
    n = emb__lease_sems(l, sems);
    emb__lease_end(eb, l, reason);
    er->durable = eb->strict; /* relaxed answers a release before its commit */
    for (size_t i = 0; i < n && reason == EMB_TOMB_REVOKED; i++) {
        sems[i]->fence = ++eb->fence_seq; /* a fenced write with the old token now loses */
        emb__store_sem(eb, sems[i]);
        er->durable = 1;
    }
    emb__admit_all(eb, sems, n);
    emb__finish(eb, er, 0, NULL);
}

static void op_lease_release(emb_t *eb, emb_req_t *er)
{
    end_lease_op(eb, er, EMB_TOMB_RELEASED);
}

static void op_lease_revoke(emb_t *eb, emb_req_t *er)
{
    end_lease_op(eb, er, EMB_TOMB_REVOKED);
}

/* ---- legacy ---- */

/* Up and down move a semaphore's value with no lease, so once either has touched a v1
 * semaphore it becomes a legacy counter (GET shows "legacy": true): its value is stored as
 * is at every grant and release, instead of being recomputed from its leases at a restart. */

static void op_legacy_delete(emb_t *eb, emb_req_t *er)
{
    op_sem_delete(eb, er);
}

static void op_legacy_value(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = find_sem(eb, er);

    if (s != NULL)
        emb__finish_view(eb, er, s, ENGINE_RES_LEGACY);
}

static void op_legacy_up(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = find_sem(eb, er);

    if (s == NULL)
        return;
    if (s->available >= (int64_t)ENGINE_CAPACITY_MAX)
        return fail(eb, er, BE_MSG_LEGACY_OVERFLOW);
    s->available++;
    s->flags |= EMB_SEM_LEGACY; /* its value is a counter now: stored as is (see below) */
    emb__store_sem(eb, s);
    emb__admit(eb, s);
    er->durable = 1;
    emb__finish_view(eb, er, s, ENGINE_RES_LEGACY);
}

static void op_legacy_down(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = find_sem(eb, er);

    if (s == NULL)
        return;
    if (s->available < 1 || !elist_empty(&s->waiters)) /* a try never jumps the queue */
        return fail(eb, er, BE_MSG_LEGACY_LOCKED);
    s->available--;
    s->flags |= EMB_SEM_LEGACY;
    emb__store_sem(eb, s);
    er->durable = 1;
    emb__finish_view(eb, er, s, ENGINE_RES_LEGACY);
}

/* The embedded back end's series after the front's (all in memory: at once). */
static void op_metrics(emb_t *eb, emb_req_t *er)
{
    int rc = emb__metrics(eb, er->req->text) != 0 ? SEMA_ENOMEM : 0;

    emb__finish(eb, er, rc, NULL);
}

/* A subscription to a semaphore that exists (its events live in the front's ring). */
static void op_events_open(emb_t *eb, emb_req_t *er)
{
    if (emb__sem_find(eb, er->req->name, er->req->name_len) != NULL)
        emb__finish(eb, er, 0, NULL);
    else
        emb__finish(eb, er, SEMA_ENOENT, NULL);
}

const emb_op_fn emb__ops[ENGINE_OP_COUNT] = {
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
    [ENGINE_LOCK_LIST] = op_lock_list,
    [ENGINE_LEGACY_CREATE] = op_legacy_create,
    [ENGINE_LEGACY_DELETE] = op_legacy_delete,
    [ENGINE_LEGACY_VALUE] = op_legacy_value,
    [ENGINE_LEGACY_UP] = op_legacy_up,
    [ENGINE_LEGACY_DOWN] = op_legacy_down,
    [ENGINE_TICKET_CREATE] = emb__op_ticket_create,
    [ENGINE_TICKET_GET] = emb__op_ticket_get,
    [ENGINE_TICKET_DELETE] = emb__op_ticket_delete,
    [ENGINE_ACQUIRE_MULTI] = emb__op_acquire_multi,
    [ENGINE_METRICS] = op_metrics,
    [ENGINE_EVENTS_OPEN] = op_events_open,
};
