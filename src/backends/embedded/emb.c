/* SPDX-License-Identifier: MIT */
/* emb.c - the engine's embedded back end ("embedded"): lifecycle, request completion,
 * FIFO admission, parking and the one timer behind every deadline. Its state is written to
 * the store (emb_store.c) by group commit. */
#include "backends/embedded/emb_internal.h"

#include <string.h>
#include <time.h>

/* ---- clocks ---- */

uint64_t emb__now(emb_t *eb)
{
    return uv_now(eb->loop);
}

int64_t emb__wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t emb__lease_deadline(int64_t ttl_ms)
{
    return uv_hrtime() / 1000000 + (uint64_t)ttl_ms + 1;
}

int64_t emb__wall_of(emb_t *eb, uint64_t mono)
{
    int64_t off = emb__wall_ms() - (int64_t)emb__now(eb);

    if (eb->wall_off == 0 || off - eb->wall_off > 1000 || eb->wall_off - off > 1000)
        eb->wall_off = off;
    return (int64_t)mono + eb->wall_off;
}

/* ---- semaphores ---- */

static int sem_eq(const enode_t *n, const void *key, size_t len)
{
    const emb_sem_t *s = ECONTAINER(n, emb_sem_t, node);
    return s->name_len == len && memcmp(s->name, key, len) == 0;
}

emb_sem_t *emb__sem_find(emb_t *eb, const char *name, size_t len)
{
    enode_t *n = etab_find(&eb->sems, etab_hash(name, len, 0), sem_eq, name, len);
    return n ? ECONTAINER(n, emb_sem_t, node) : NULL;
}

emb_sem_t *emb__lock_find(emb_t *eb, const char *key, size_t len)
{
    enode_t *n = etab_find(&eb->locks, etab_hash(key, len, 0), sem_eq, key, len);
    return n ? ECONTAINER(n, emb_sem_t, node) : NULL;
}

emb_sem_t *emb__sem_new(emb_t *eb, const char *name, size_t len, uint64_t capacity, int flags)
{
    emb_sem_t *s = sema__malloc(sizeof(*s) + len + 1);

    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->node.hash = etab_hash(name, len, 0);
    elist_init(&s->waiters);
    elist_init(&s->holders);
    s->capacity = capacity;
    s->available = (int64_t)capacity;
    s->created_at_ms = emb__wall_ms();
    s->name_len = (uint16_t)len;
    s->flags = (uint8_t)flags;
    memcpy(s->name, name, len);
    s->name[len] = '\0';
    etab_insert(flags & EMB_SEM_LOCK ? &eb->locks : &eb->sems, &s->node);
    emb__treap_insert(eb, s);
    return s;
}

/* Take the semaphore off the list of rows the next commit writes. */
static void undirty(emb_t *eb, emb_sem_t *s)
{
    if (s->dirty_at != 0) {
        eb->dirty[s->dirty_at - 1] = NULL;
        s->dirty_at = 0;
    }
}

/* Unlink and free a semaphore that has no holders and no waiters. */
void emb__sem_free(emb_t *eb, emb_sem_t *s)
{
    SEMA__CHECK(elist_empty(&s->waiters) && elist_empty(&s->holders));
    undirty(eb, s);
    emb__lim_clear(eb, s);
    for (size_t i = 0; i < eb->nadm; i++) /* no admission for it any more */
        if (eb->adm[i] == s)
            eb->adm[i] = NULL;
    etab_remove(s->flags & EMB_SEM_LOCK ? &eb->locks : &eb->sems, &s->node);
    if (!eb->clearing)
        emb__treap_remove(eb, s);
    sema__free(s);
}

void emb__maybe_free_lock(emb_t *eb, emb_sem_t *s)
{
    if ((s->flags & EMB_SEM_LOCK) && elist_empty(&s->holders) && elist_empty(&s->waiters))
        emb__sem_free(eb, s);
}

void emb__store_sem_now(emb_t *eb, emb_sem_t *s)
{
    store_sem_t rec;

    undirty(eb, s);
    rec.name = s->name;
    rec.capacity = s->capacity;
    rec.available = s->available;
    rec.fence = s->fence;
    rec.legacy = (s->flags & EMB_SEM_LEGACY) != 0;
    rec.created_at_ms = s->created_at_ms;
    emb__lim_get(s, &rec.tenant_max, &rec.rate_per_s, &rec.rate_burst);
    (void)store_put_sem(eb->store, &rec); /* an error fails the next commit */
    emb__mark_dirty(eb);
}

void emb__store_sem(emb_t *eb, emb_sem_t *s)
{
    if (eb->store == NULL || (s->flags & EMB_SEM_LOCK) || s->dirty_at != 0)
        return;
    if (eb->ndirty == eb->dirty_cap) {
        size_t cap = eb->dirty_cap ? eb->dirty_cap * 2 : 64;
        emb_sem_t **a = cap <= UINT32_MAX ? sema__realloc(eb->dirty, cap * sizeof(*a)) : NULL;
        if (a == NULL)
            return emb__store_sem_now(eb, s); /* no room to defer: record it now */
        eb->dirty = a;
        eb->dirty_cap = cap;
    }
    eb->dirty[eb->ndirty++] = s;
    s->dirty_at = (uint32_t)eb->ndirty;
    emb__mark_dirty(eb);
}

#define FENCE_RESERVE 1024u

void emb__store_sems_flush(emb_t *eb)
{
    if (eb->store != NULL && eb->fence_seq > eb->fence_stored) {
        /* Lock fences live only in lease rows, which go with the release: keep the top.
         * The floor is written ahead by a block of fences, so a commit rewrites it once per
         * FENCE_RESERVE grants rather than every time; a restart goes on above the block
         * (fences may have gaps, never repeats). */
        if (eb->fence_seq > UINT64_MAX - FENCE_RESERVE)
            eb->fence_stored = eb->fence_seq;
        else
            eb->fence_stored = eb->fence_seq + FENCE_RESERVE;
        (void)store_put_fence_floor(eb->store, eb->fence_stored);
    }
    for (size_t i = 0; i < eb->ndirty; i++) {
        emb_sem_t *s = eb->dirty[i];
        if (s != NULL)
            emb__store_sem_now(eb, s);
    }
    eb->ndirty = 0;
}

/* ---- idempotency keys ---- */

uint64_t emb__idem_hash(const emb_sem_t *s, const char *key, size_t len)
{
    return etab_hash(key, len, s != NULL ? s->node.hash : 0x6d756c7469);
}

static int idem_eq_sem(const enode_t *n, const void *key, size_t len)
{
    const emb_idem_t *d = ECONTAINER(n, emb_idem_t, node);
    const struct {
        const emb_sem_t *s;
        const char *k;
    } *q = key;
    return d->sem == q->s && d->key_len == len && memcmp(d->key, q->k, len) == 0;
}

emb_idem_t *emb__idem_find(emb_t *eb, const emb_sem_t *s, const char *key, size_t len)
{
    struct {
        const emb_sem_t *s;
        const char *k;
    } q = {s, key};
    enode_t *n = etab_find(&eb->idems, emb__idem_hash(s, key, len), idem_eq_sem, &q, len);
    return n ? ECONTAINER(n, emb_idem_t, node) : NULL;
}

emb_idem_t *emb__idem_new(emb_t *eb, emb_sem_t *s, const char *key, size_t len)
{
    emb_idem_t *d = sema__malloc(sizeof(*d) + len + 1);

    if (d == NULL)
        return NULL;
    memset(d, 0, sizeof(*d));
    d->node.hash = emb__idem_hash(s, key, len);
    d->sem = s;
    d->key_len = len;
    memcpy(d->key, key, len);
    d->key[len] = '\0';
    etab_insert(&eb->idems, &d->node);
    return d;
}

void emb__idem_free(emb_t *eb, emb_idem_t *d)
{
    if (d == NULL)
        return;
    if (d->lease != NULL)
        d->lease->idem = NULL;
    if (d->waiter != NULL)
        d->waiter->idem = NULL;
    if (d->ticket != NULL)
        d->ticket->idem = NULL;
    etab_remove(&eb->idems, &d->node);
    sema__free(d);
}

/* ---- the timer ---- */

static void timer_cb(uv_timer_t *t);

void emb__timer_rearm(emb_t *eb)
{
    eitem_t *top = eheap_top(&eb->heap);
    uint64_t now;

    if (top == NULL || eb->shutting_down) {
        if (eb->timer_due != UINT64_MAX)
            uv_timer_stop(&eb->timer);
        eb->timer_due = UINT64_MAX;
        return;
    }
    if (top->deadline == eb->timer_due)
        return;
    now = emb__now(eb);
    eb->timer_due = top->deadline;
    uv_timer_start(&eb->timer, timer_cb, top->deadline > now ? top->deadline - now : 0, 0);
}

void emb__waiter_retimed(emb_t *eb, emb_req_t *er, emb_req_t *old, int64_t timeout_ms)
{
    eheap_remove(&eb->heap, &old->hi);
    er->hi.kind = EITEM_WAITER;
    er->hi.idx = EHEAP_NONE;
    if (timeout_ms > 0 && (uint64_t)timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = emb__now(eb) + (uint64_t)timeout_ms;
        if (eheap_push(&eb->heap, &er->hi) != 0)
            er->hi.idx = EHEAP_NONE; /* waits without a timeout rather than failing */
    }
    emb__timer_rearm(eb);
}

static void waiter_timeout(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    size_t n;

    if (er->state == EMB_REQ_WATCH)
        return emb__ticket_watch_timeout(eb, er);
    n = emb__req_sems(er, sems);
    emb__event_waiter(eb, er, "left");
    emb__unpark(eb, er);
    eb->m->timeouts++;
    emb__fail(eb, er, BE_MSG_WAITER_TIMED_OUT);
    emb__admit_all(eb, sems, n); /* the head may have left: those behind may fit now */
}

static void timer_cb(uv_timer_t *t)
{
    emb_t *eb = t->data;
    uint64_t now = emb__now(eb);
    eitem_t *top;

    eb->timer_due = UINT64_MAX;
    while ((top = eheap_top(&eb->heap)) != NULL && top->deadline <= now) {
        eheap_remove(&eb->heap, top);
        if (top->kind == EITEM_LEASE)
            emb__lease_expire_due(eb, ECONTAINER(top, emb_lease_t, hi));
        else if (top->kind == EITEM_TICKET)
            emb__ticket_due(eb, ECONTAINER(top, emb_ticket_t, hi));
        else if (top->kind == EITEM_TICK)
            emb__ticket_tick(eb);
        else if (top->kind == EITEM_RATE)
            emb__rate_due(eb, ECONTAINER(top, emb_limits_t, rate_hi));
        else
            waiter_timeout(eb, ECONTAINER(top, emb_req_t, hi));
    }
    emb__timer_rearm(eb);
    emb__drain(eb);
}

/* A ticket's place in s's queue (a ticket on several semaphores has one in each). */
static int is_ticket_place(const emb_req_t *er)
{
    return er->kind == EMB_KIND_TICKET ||
           (er->kind == EMB_KIND_PART && er->multi->main->kind == EMB_KIND_TICKET);
}

/* ---- parking and admission ---- */

int emb__park(emb_t *eb, emb_req_t *er, emb_sem_t *s, int64_t timeout_ms)
{
    uint64_t now = emb__now(eb);
    int rc;

    if ((eb->cfg.max_waiters_per_sem && s->nwaiters >= eb->cfg.max_waiters_per_sem) ||
        (eb->cfg.max_waiters_total && eb->nparked >= eb->cfg.max_waiters_total))
        return SEMA_ELIMIT;
    /* Its place: the arrival order across every semaphore (a ticket loaded from the store
     * comes with its own). */
    if (er->oseq == 0)
        er->oseq = ++eb->gseq;
    else if (er->oseq > eb->gseq)
        eb->gseq = er->oseq;
    if (s->lim != NULL && (rc = emb__tenant_join(eb, s, er)) != 0)
        return rc;
    er->hi.idx = EHEAP_NONE;
    er->hi.kind = EITEM_WAITER;
    er->hi.deadline = UINT64_MAX; /* forever */
    if (timeout_ms > 0 && (uint64_t)timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = now + (uint64_t)timeout_ms;
        if (eheap_push(&eb->heap, &er->hi) != 0) {
            if (s->lim != NULL)
                emb__tenant_leave(eb, s, er);
            return SEMA_ENOMEM;
        }
        emb__timer_rearm(eb);
    }
    er->sem = s;
    er->state = EMB_REQ_PARKED;
    er->since_mono = now;
    if (elist_empty(&s->waiters))
        s->est.last_mono = 0; /* the time it stood empty is no grant gap */
    elist_push_back(&s->waiters, &er->link);
    emb__oq_insert(s, er);
    s->nwaiters++;
    s->ntickets += is_ticket_place(er);
    s->waiting += er->weight;
    eb->nparked++;
    return 0;
}

/* Take a parked request off its queue and timer (a request on several semaphores off every
 * one); the caller completes it. */
void emb__unpark(emb_t *eb, emb_req_t *er)
{
    emb_sem_t *s = er->sem;

    if (er->multi != NULL && er->kind != EMB_KIND_PART)
        return emb__multi_unpark(eb, er);
    if (s->lim != NULL)
        emb__tenant_leave(eb, s, er);
    elist_remove(&er->link);
    eheap_remove(&eb->heap, &er->hi);
    emb__oq_remove(s, er);
    er->oseq = 0;
    s->qremoved++;
    s->nwaiters--;
    s->ntickets -= is_ticket_place(er);
    s->waiting -= er->weight;
    eb->nparked--;
    er->sem = NULL;
    er->state = EMB_REQ_NEW;
    if (er->idem != NULL)
        emb__idem_free(eb, er->idem);
}

size_t emb__req_sems(const emb_req_t *er, emb_sem_t **out)
{
    const emb_multi_t *m = er->multi;

    if (m == NULL) {
        out[0] = er->sem;
        return 1;
    }
    for (uint32_t i = 0; i < m->nparts; i++)
        out[i] = m->part[i].sem;
    return m->nparts;
}

static void admit_one_grant(emb_t *eb, emb_sem_t *s, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_lease_t *l = emb__grant(eb, s, req, er->weight, er->since_mono);

    if (l == NULL) {
        emb__fail(eb, er, BE_MSG_NOMEM_GRANT);
        return;
    }
    emb__lease_own(er, l);
    er->durable = 1;
    emb__finish_lease(eb, er, l);
}

/* Grant `er`, who is next on s (it fits). */
void emb__admit_head(emb_t *eb, emb_sem_t *s, emb_req_t *er)
{
    uint64_t w = er->weight;

    emb__unpark(eb, er);
    emb__est_queue_grant(eb, s, w, !elist_empty(&s->waiters));
    if (er->kind == EMB_KIND_TICKET)
        emb__ticket_grant(eb, ECONTAINER(er, emb_ticket_t, q));
    else
        admit_one_grant(eb, s, er);
}

void emb__lease_own(emb_req_t *er, emb_lease_t *l)
{
    emb__lease_disown(er);
    if (l->pending != NULL)
        l->pending->lease = NULL;
    er->lease = l;
    l->pending = er;
}

void emb__lease_disown(emb_req_t *er)
{
    if (er->lease != NULL) {
        er->lease->pending = NULL;
        er->lease = NULL;
    }
}

/* Strict FIFO with head-of-line blocking: grant heads while they fit. A head that is part of
 * a request on several semaphores is granted with the others, when it is first on all. */
static void admit_one(emb_t *eb, emb_sem_t *s)
{
    if (s->lim != NULL)
        return emb__admit_lim(eb, s);
    while (!elist_empty(&s->waiters)) {
        emb_req_t *er = ECONTAINER(s->waiters.next, emb_req_t, link);
        if (er->kind == EMB_KIND_WAIT_IDLE) {
            if (s->available < (int64_t)s->capacity)
                return;
            emb__event_waiter(eb, er, "left"); /* done: it takes nothing */
            emb__unpark(eb, er);
            emb__finish_view(eb, er, s, ENGINE_RES_IDLE);
            continue;
        }
        if (er->kind == EMB_KIND_PART) {
            if (!emb__multi_try(eb, er->multi))
                return;
            if (s->lim != NULL)
                return emb__admit_lim(eb, s);
            continue;
        }
        if ((int64_t)er->weight > s->available)
            return;
        emb__admit_head(eb, s, er);
    }
}

/* A semaphore whose admission must run after the one running (a grant on several semaphores
 * changes the heads of them all); without room to note it, it runs now. */
static void admit_later(emb_t *eb, emb_sem_t *s)
{
    for (size_t i = 0; i < eb->nadm; i++)
        if (eb->adm[i] == s)
            return;
    if (eb->nadm == eb->adm_cap) {
        size_t cap = eb->adm_cap ? eb->adm_cap * 2 : 16;
        emb_sem_t **a = sema__realloc(eb->adm, cap * sizeof(*a));
        if (a == NULL)
            return admit_one(eb, s);
        eb->adm = a;
        eb->adm_cap = cap;
    }
    eb->adm[eb->nadm++] = s;
}

int emb__admit_hold(emb_t *eb)
{
    int was = eb->admitting;

    eb->admitting = 1;
    return was;
}

void emb__admit_release(emb_t *eb, int was)
{
    if (was)
        return;
    while (eb->nadm > 0) {
        emb_sem_t *s = eb->adm[--eb->nadm];
        if (s != NULL) {
            admit_one(eb, s);
            emb__maybe_free_lock(eb, s);
        }
    }
    eb->admitting = 0;
}

void emb__admit(emb_t *eb, emb_sem_t *s)
{
    if (s->lim == NULL && elist_empty(&s->waiters))
        return; /* nobody to admit (the common case of a release) */
    if (eb->admitting)
        return admit_later(eb, s);
    eb->admitting = 1;
    admit_one(eb, s);
    emb__admit_release(eb, 0);
}

/* ---- completion ---- */

/* The idle handle only keeps the loop from blocking in poll while a commit is pending. */
static void idle_noop(uv_idle_t *h)
{
    (void)h;
}

void emb__mark_dirty(emb_t *eb)
{
    if (eb->store == NULL || eb->commit_armed)
        return;
    eb->commit_armed = 1;
    uv_check_start(&eb->check, emb__commit_cb);
    uv_idle_start(&eb->idle, idle_noop);
}

/* Queue a finished request for delivery (after the group commit when it mutated state). */
/* Changes recorded or being committed that are not durable yet. */
static int uncommitted(const emb_t *eb)
{
    return eb->committing || eb->ndirty != 0 || store_pending(eb->store);
}

static void finish_queue(emb_t *eb, emb_req_t *er, int status)
{
    /* A durable reply (a change, or an answer that rests on one: even a "not found" or an
     * "exists") waits for the commit. With a strict store, so does any reply while changes
     * are not yet durable: what it shows may rest on them (a read that sees a lease gone by
     * expiry, say), and strict acknowledges nothing a crash could undo. While a slow commit
     * runs, changes pile up in memory: past the cap every reply waits for it, so each
     * connection stops sending until the disk catches up. */
    if (eb->store != NULL && (er->durable || (eb->strict && uncommitted(eb)) ||
                              (status == 0 && eb->committing &&
                               store_backlog(eb->store) >= eb->cfg.embedded.max_uncommitted))) {
        er->state = EMB_REQ_COMMIT;
        elist_push_back(&eb->commit_wait, &er->link);
        eb->nwait++;
        emb__mark_dirty(eb);
    } else {
        er->state = EMB_REQ_READY;
        elist_push_back(&eb->ready, &er->link);
    }
}

void emb__finish(emb_t *eb, emb_req_t *er, int status, const char *msg)
{
    engine_req_t *req = er->req;

    req->status = status;
    req->message = msg;
    finish_queue(eb, er, status);
}

void emb__fail(emb_t *eb, emb_req_t *er, be_msg_t id)
{
    emb__finish(eb, er, be_msg_code(id), be_msg_text(id));
}

void emb__finish_lease(emb_t *eb, emb_req_t *er, const emb_lease_t *l)
{
    engine_result_t *r = &er->req->res;

    emb__view_lease(&r->lease, l);
    r->lease.name = er->req->op == ENGINE_ACQUIRE || er->req->op == ENGINE_LOCK_ACQUIRE
                        ? er->req->name /* the caller's: alive until its callback */
                        : engine_result_strdup(r, l->sem->name, l->sem->name_len);
    if (r->lease.owner != NULL)
        r->lease.owner = engine_result_strdup(r, l->owner, strlen(l->owner));
    int multi = er->req->op == ENGINE_ACQUIRE_MULTI;
    if (r->lease.name == NULL || (l->owner != NULL && r->lease.owner == NULL) ||
        ((l->x != NULL || multi) && emb__view_lease_parts(r, &r->lease, l, multi) != 0)) {
        engine_result_clear(r);
        emb__fail(eb, er, BE_MSG_NOMEM_RESULT);
        return;
    }
    r->kind = ENGINE_RES_LEASE;
    emb__finish(eb, er, 0, NULL);
}

void emb__finish_view(emb_t *eb, emb_req_t *er, const emb_sem_t *s, engine_res_kind_t kind)
{
    engine_result_t *r = &er->req->res;

    if (emb__view_sem(eb, r, &r->sem, s, kind == ENGINE_RES_SEM || kind == ENGINE_RES_LOCK) != 0) {
        engine_result_clear(r);
        emb__fail(eb, er, BE_MSG_NOMEM_RESULT);
        return;
    }
    r->kind = kind;
    emb__finish(eb, er, 0, NULL);
}

/* Deliver queued completions and events; a callback that submits more work only appends to
 * the queue, so nothing recurses. */
void emb__drain(emb_t *eb)
{
    if (eb->draining)
        return;
    eb->draining = 1;
    for (;;) {
        if (!elist_empty(&eb->ready)) {
            emb_req_t *er = ECONTAINER(eb->ready.next, emb_req_t, link);
            engine_req_t *req = er->req;
            elist_remove(&er->link);
            emb__lease_disown(er);
            sema__free(er); /* a delivered grant belongs to the caller now */
            engine__complete(eb->front, req);
        } else if (!engine__deliver_event(eb->front)) {
            break;
        }
    }
    eb->draining = 0;
}

/* ---- the back end's table ---- */

static int emb_tables_init(emb_t *eb)
{
    elist_init(&eb->watched);
    eb->tick.idx = EHEAP_NONE;
    eb->tick.kind = EITEM_TICK;
    if (etab_init(&eb->sems, 64) || etab_init(&eb->locks, 16) || etab_init(&eb->leases, 64) ||
        etab_init(&eb->tombs, 64) || etab_init(&eb->idems, 16) || etab_init(&eb->tickets, 16) ||
        etab_init(&eb->tenants, 16))
        return SEMA_ENOMEM;
    return 0;
}

static void emb_free(emb_t *eb)
{
    engine_t *front = eb->front;

    emb__committer_free(eb);
    if (eb->tickets.slots != NULL)
        emb__tickets_clear(eb, BE_MSG_SHUTDOWN);
    emb__state_clear(eb, NULL);
    sema__free(eb->dirty); /* after the semaphores: freeing one clears its entry */
    emb__tombs_clear(eb);
    etab_destroy(&eb->sems);
    etab_destroy(&eb->locks);
    etab_destroy(&eb->leases);
    etab_destroy(&eb->tombs);
    etab_destroy(&eb->idems);
    etab_destroy(&eb->tickets);
    etab_destroy(&eb->tenants);
    sema__free(eb->adm);
    sema__free(eb->heap.a);
    sema__free(eb->tring);
    sema__free(eb);
    if (front != NULL)
        engine__backend_closed(front);
}

static int emb_open(void **out, engine_t *front, uv_loop_t *loop, const engine_config_t *cfg,
                    char *errbuf, size_t errlen)
{
    emb_t *eb = sema__calloc(1, sizeof(*eb));
    int rc;

    *out = NULL;
    if (eb == NULL)
        return SEMA_ENOMEM;
    eb->loop = loop;
    eb->m = engine__counters(front);
    eb->cfg = *cfg;
    eb->store = cfg->embedded.store;
    eb->strict = eb->store != NULL && store_durability(eb->store) == STORE_STRICT;
    eb->timer_due = UINT64_MAX;
    elist_init(&eb->ready);
    elist_init(&eb->commit_wait);
    elist_init(&eb->commit_fly);
    rc = emb_tables_init(eb);
    eb->front = front; /* the front is freed by its caller if the open fails */
    if (rc == 0 && eb->store != NULL)
        rc = emb__store_load(eb, errbuf, errlen);
    if (rc != 0) {
        eb->front = NULL;
        emb_free(eb);
        return rc;
    }
    uv_timer_init(loop, &eb->timer);
    uv_timer_init(loop, &eb->ck_timer);
    uv_check_init(loop, &eb->check);
    uv_idle_init(loop, &eb->idle);
    eb->timer.data = eb->ck_timer.data = eb->check.data = eb->idle.data = eb;
    eb->handles_open = 4;
    if (eb->store != NULL) {
        (void)emb__committer_start(eb); /* if it cannot start, commits run here */
        if (eb->committer != NULL)
            eb->handles_open += emb__committer_handles(eb);
    }
    emb__timer_rearm(eb);
    if (eb->store != NULL && store_pending(eb->store))
        emb__mark_dirty(eb); /* rows of tickets that ended while semad was down */
    *out = eb;
    return 0;
}

static void handle_closed(uv_handle_t *h)
{
    emb_t *eb = h->data;

    if (--eb->handles_open == 0)
        emb_free(eb);
}

static void shutdown_fail_parked(void *arg, enode_t *n)
{
    emb_t *eb = arg;
    emb_sem_t *s = ECONTAINER(n, emb_sem_t, node);

    /* Tickets stay in line (a durable store keeps them for the next start). */
    for (elist_t *x = s->waiters.next, *next; x != &s->waiters; x = next) {
        emb_req_t *er = ECONTAINER(x, emb_req_t, link);
        next = x->next;
        if (er->kind == EMB_KIND_PART)
            er = er->multi->main;
        if (er->kind == EMB_KIND_TICKET)
            continue;
        emb__unpark(eb, er);
        emb__fail(eb, er, BE_MSG_SHUTDOWN);
    }
}

static void emb_shutdown(void *be)
{
    emb_t *eb = be;

    etab_each(&eb->sems, shutdown_fail_parked, eb);
    etab_each(&eb->locks, shutdown_fail_parked, eb);
    emb__tickets_fail_watchers(eb, BE_MSG_SHUTDOWN);
    if (eb->store != NULL)
        emb__commit_flush(eb, handle_closed); /* the last group commits, then the thread */
    eb->shutting_down = 1;
    emb__drain(eb);
    uv_timer_stop(&eb->timer);
    uv_timer_stop(&eb->ck_timer);
    uv_check_stop(&eb->check);
    uv_idle_stop(&eb->idle);
    uv_close((uv_handle_t *)&eb->timer, handle_closed);
    uv_close((uv_handle_t *)&eb->ck_timer, handle_closed);
    uv_close((uv_handle_t *)&eb->check, handle_closed);
    uv_close((uv_handle_t *)&eb->idle, handle_closed);
}

static int emb_submit(void *be, engine_req_t *req)
{
    emb_t *eb = be;
    emb_req_t *er = sema__calloc(1, sizeof(*er));

    if (er == NULL)
        return SEMA_ENOMEM;
    elist_init(&er->link);
    er->hi.idx = EHEAP_NONE;
    er->req = req;
    req->priv = er;
    if (req->status != 0)
        emb__finish(eb, er, req->status, req->message); /* failed the front's checks */
    else
        emb__ops[req->op](eb, er);
    emb__drain(eb);
    return 0;
}

/* A grant made for a request that will never be delivered goes back to the pool. */
static void cancel_done(emb_t *eb, emb_req_t *er)
{
    emb_lease_t *l = er->lease;

    emb__lease_disown(er);
    elist_remove(&er->link);
    engine_result_clear(&er->req->res);
    if (l != NULL)
        emb__lease_end_admit(eb, l, EMB_TOMB_RELEASED);
}

static void emb_cancel(void *be, engine_req_t *req)
{
    emb_t *eb = be;
    emb_req_t *er = req->priv;

    if (er->state == EMB_REQ_WATCH) {
        emb__ticket_watch_cancel(eb, er);
    } else if (er->state == EMB_REQ_PARKED) {
        emb_sem_t *sems[ENGINE_PARTS_MAX];
        size_t n = emb__req_sems(er, sems);
        emb__event_waiter(eb, er, "left");
        emb__unpark(eb, er);
        eb->m->cancellations++;
        emb__admit_all(eb, sems, n);
    } else if (er->state == EMB_REQ_READY || er->state == EMB_REQ_COMMIT) {
        cancel_done(eb, er);
    }
    req->priv = NULL;
    sema__free(er);
    emb__drain(eb);
}

static int emb_exists(void *be, const char *name, size_t len)
{
    return emb__sem_find(be, name, len) != NULL;
}

static void emb_stats(void *be, engine_stats_t *out)
{
    emb_t *eb = be;

    out->semaphores = eb->sems.count;
    out->leases = eb->leases.count;
    out->parked = eb->nparked;
    out->locks = eb->locks.count;
    out->writes_pending =
        eb->store != NULL && (eb->committing || eb->ndirty != 0 || store_pending(eb->store) ||
                              !elist_empty(&eb->commit_wait));
}

const engine_backend_t engine_backend_embedded = {
    .name = "embedded",
    .open = emb_open,
    .submit = emb_submit,
    .cancel = emb_cancel,
    .shutdown = emb_shutdown,
    .exists = emb_exists,
    .stats = emb_stats,
    .tickets = 1,
    .multi = 1,
    .tenants = 1,
    .rates = 1,
};
