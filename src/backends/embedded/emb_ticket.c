/* SPDX-License-Identifier: MIT */
/* emb_ticket.c - tickets: places in a semaphore's FIFO queue that no connection holds open.
 * A ticket waits among the other waiters, is read by polling, long-polling or a stream,
 * is granted a lease in its turn, and is dropped when nobody reads it for its keepalive.
 * Its position comes from the queue's treap (emb_treap.c) in O(log n); position updates to
 * watchers are checked once per poll interval; its estimate comes from what the semaphore
 * measured (grant gaps and hold times). */
#include "backends/embedded/emb_internal.h"

#include <string.h>

#define STATE_STATUS_SHIFT 56
#define ID_SEED 2 /* ticket ids hash apart from lease ids */

static void fail(emb_t *eb, emb_req_t *er, be_msg_t id)
{
    emb__fail(eb, er, id);
}

/* ---- lookup ---- */

static int id_eq(const enode_t *n, const void *key, size_t len)
{
    const emb_ticket_t *t = ECONTAINER(n, emb_ticket_t, node);
    return strlen(t->id) == len && memcmp(t->id, key, len) == 0;
}

static emb_ticket_t *ticket_find(emb_t *eb, const char *id, size_t len)
{
    enode_t *n;

    if (len >= ENGINE_LEASE_ID_MAX)
        return NULL;
    n = etab_find(&eb->tickets, etab_hash(id, len, ID_SEED), id_eq, id, len);
    return n ? ECONTAINER(n, emb_ticket_t, node) : NULL;
}

/* The ticket the request names, or NULL after completing it: 410 with why it ended, 404. */
static emb_ticket_t *find_ticket(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_ticket_t *t = ticket_find(eb, req->id, req->id_len);
    emb_tomb_t *tomb;

    if (t != NULL)
        return t;
    tomb = emb__tomb_find(eb, req->id, req->id_len);
    if (tomb != NULL && tomb->reason >= EMB_TOMB_TICKET_LEFT &&
        tomb->reason <= EMB_TOMB_TICKET_REFUSED)
        fail(eb, er, emb__tomb_msg(tomb->reason));
    else
        fail(eb, er, BE_MSG_NO_TICKET);
    return NULL;
}

int emb__ticket_allowed(const engine_req_t *req, const emb_ticket_t *t)
{
    if (req->principal == NULL || req->principal_admin)
        return 1;
    return t->principal != NULL && strcmp(t->principal, req->principal) == 0;
}

/* The ticket the request names when its token may use it, or NULL after completing it. */
static emb_ticket_t *find_own_ticket(emb_t *eb, emb_req_t *er)
{
    emb_ticket_t *t = find_ticket(eb, er);

    if (t != NULL && !emb__ticket_allowed(er->req, t)) {
        fail(eb, er, BE_MSG_TICKET_OTHER_TOKEN);
        return NULL;
    }
    return t;
}

/* ---- the store ---- */

/* The semaphores a ticket waits on or holds (out: room for ENGINE_PARTS_MAX). */
static size_t ticket_sems(const emb_ticket_t *t, emb_sem_t **out)
{
    if (t->lease != NULL)
        return emb__lease_sems(t->lease, out);
    if (t->q.multi != NULL)
        return emb__req_sems(&t->q, out);
    out[0] = t->sem;
    return 1;
}

/* A ticket on several semaphores: those after its first, with their weights and places. */
static size_t ticket_parts(const emb_ticket_t *t, store_part_t *parts)
{
    size_t n = 0;

    if (t->lease != NULL) {
        for (const emb_lease_t *p = emb__lease_next(t->lease); p != NULL; p = emb__lease_next(p))
            parts[n++] = (store_part_t){p->sem->name, p->weight, 0};
    } else if (t->q.multi != NULL) {
        for (uint32_t i = 1; i < t->q.multi->nparts; i++) {
            const emb_req_t *p = &t->q.multi->part[i];
            parts[n++] = (store_part_t){p->sem->name, p->weight, p->oseq};
        }
    }
    return n;
}

static void store_ticket(emb_t *eb, const emb_ticket_t *t)
{
    store_part_t parts[ENGINE_PARTS_MAX];
    store_ticket_t rec;

    if (eb->store == NULL)
        return;
    rec.id = t->id;
    rec.sem = t->sem->name;
    rec.seq = t->q.multi != NULL ? t->q.multi->part[0].oseq : t->q.oseq;
    rec.weight = t->q.multi != NULL ? t->q.multi->part[0].weight
                 : t->lease != NULL ? t->lease->weight
                                    : t->q.weight;
    rec.tenant = t->tenant;
    rec.nparts = ticket_parts(t, parts);
    rec.parts = parts;
    rec.owner = t->owner;
    rec.idem_key = t->idem != NULL ? t->idem->key : NULL;
    rec.lease_id = t->lease != NULL ? t->lease->id : NULL;
    rec.ttl_ms = t->ttl_ms;
    rec.keepalive_ms = t->keepalive_ms;
    rec.created_at_ms = t->created_at_ms;
    rec.collected = t->collected;
    rec.principal = t->principal;
    (void)store_put_ticket(eb->store, &rec); /* an error fails the next commit */
    emb__mark_dirty(eb);
}

/* ---- estimates ---- */

void emb__est_queue_grant(emb_t *eb, emb_sem_t *s, uint64_t weight, int queue_left)
{
    uint64_t now = uv_hrtime();

    (void)eb;
    if (s->est.last_mono != 0 && weight > 0) {
        double gap = (double)(now - s->est.last_mono) / 1e6 / (double)weight;
        be_est_fold(&s->est.s.gap_ms, &s->est.s.gap_var, gap, s->est.s.ngaps);
        if (s->est.s.ngaps < UINT32_MAX)
            s->est.s.ngaps++;
    }
    /* Only gaps while the queue stays non-empty measure the rate at which it moves. */
    s->est.last_mono = queue_left ? now : 0;
}

void emb__est_hold(emb_sem_t *s, uint64_t held_ms)
{
    be_est_fold(&s->est.s.hold_ms, NULL, (double)held_ms, s->est.s.nholds);
    if (s->est.s.nholds < UINT32_MAX)
        s->est.s.nholds++;
}

/* The wait until `units` more units have been granted (be_estimate); the oldest holder is
 * the first of s->holders, which are in grant order. */
static int estimate(emb_t *eb, const emb_sem_t *s, uint64_t units, int64_t *p50, int64_t *p90)
{
    double oldest_age_ms = -1;

    if (!elist_empty(&s->holders)) {
        const emb_lease_t *oldest = ECONTAINER(s->holders.next, emb_lease_t, link);
        oldest_age_ms = (double)(emb__now(eb) - oldest->acquired_mono);
    }
    return be_estimate(&s->est.s, s->capacity, units, oldest_age_ms, p50, p90);
}

/* ---- views ---- */

static uint64_t ticket_state(const emb_ticket_t *t, uint64_t position)
{
    return ((uint64_t)t->status << STATE_STATUS_SHIFT) | position;
}

/* Position (1 = next) and the weight ahead; 0 once granted. On several semaphores: in the
 * line where it stands furthest back (*in: that semaphore). */
static uint64_t ticket_position(const emb_ticket_t *t, uint64_t *ahead_weight, const emb_sem_t **in)
{
    uint64_t n, w;

    *ahead_weight = 0;
    *in = t->sem;
    if (t->status != EMB_TICKET_WAITING)
        return 0;
    if (t->q.multi == NULL) {
        emb__oq_rank(t->sem, &t->q, &n, ahead_weight);
        return n + 1;
    }
    n = 0;
    for (uint32_t i = 0; i < t->q.multi->nparts; i++) {
        const emb_req_t *p = &t->q.multi->part[i];
        uint64_t pn;
        emb__oq_rank(p->sem, p, &pn, &w);
        if (i == 0 || pn > n) {
            n = pn;
            *ahead_weight = w;
            *in = p->sem;
        }
    }
    return n + 1;
}

/* Waiters that left the lines a ticket waits in, so far (positions move only then). */
static uint64_t ticket_removed(const emb_ticket_t *t)
{
    uint64_t n = 0;

    if (t->q.multi == NULL)
        return t->sem->qremoved;
    for (uint32_t i = 0; i < t->q.multi->nparts; i++)
        n += t->q.multi->part[i].sem->qremoved;
    return n;
}

static uint64_t current_state(const emb_ticket_t *t)
{
    const emb_sem_t *in;
    uint64_t w;
    return ticket_state(t, ticket_position(t, &w, &in));
}

/* Every reply that shows a ticket is a read: it keeps a waiting ticket in line, and one that
 * shows the grant collects it (keepalive no longer applies). */
static void keepalive_touch(emb_t *eb, emb_ticket_t *t)
{
    uint64_t due = emb__now(eb) + (uint64_t)t->keepalive_ms;

    if (t->status == EMB_TICKET_GRANTED && t->collected) {
        eheap_remove(&eb->heap, &t->hi);
        return;
    }
    if (t->hi.idx != EHEAP_NONE) {
        eheap_update(&eb->heap, &t->hi, due);
    } else {
        t->hi.deadline = due;
        if (eheap_push(&eb->heap, &t->hi) != 0)
            return; /* no room in the heap: it stays without a keepalive */
    }
    if (eb->handles_open > 0) /* not while loading: the timer starts after */
        emb__timer_rearm(eb);
}

/* A ticket's parts (on several semaphores) in the result: from its lease once granted. */
static int view_parts(engine_result_t *r, engine_ticket_t *v, const emb_ticket_t *t)
{
    engine_part_t *parts;
    size_t n = 0;

    if (t->lease != NULL) {
        if (emb__lease_next(t->lease) == NULL && !t->multi)
            return 0;
        if (emb__view_lease_parts(r, &r->lease, t->lease, t->multi) != 0)
            return -1;
        v->parts = r->lease.parts;
        v->nparts = r->lease.nparts;
        return 0;
    }
    if (t->q.multi == NULL)
        return 0;
    parts = engine_result_alloc(r, t->q.multi->nparts * sizeof(*parts));
    if (parts == NULL)
        return -1;
    for (; n < t->q.multi->nparts; n++) {
        const emb_req_t *p = &t->q.multi->part[n];
        parts[n] = (engine_part_t){engine_result_strdup(r, p->sem->name, p->sem->name_len),
                                   p->sem->name_len, p->weight, 0};
        if (parts[n].name == NULL)
            return -1;
    }
    v->parts = parts;
    v->nparts = n;
    return 0;
}

static int ticket_view(emb_t *eb, engine_result_t *r, emb_ticket_t *t)
{
    engine_ticket_t *v = &r->ticket;
    emb_sem_t *s = t->sem;
    const emb_sem_t *in;

    memset(v, 0, sizeof(*v));
    memcpy(v->id, t->id, sizeof v->id);
    v->name = engine_result_strdup(r, s->name, s->name_len);
    if (v->name == NULL)
        return -1;
    v->name_len = s->name_len;
    v->status = t->status;
    v->weight = t->q.weight;
    v->poll_after_ms = eb->cfg.ticket_poll_ms;
    v->keepalive_ms = t->keepalive_ms;
    v->tenant = t->tenant != NULL ? engine_result_strdup(r, t->tenant, strlen(t->tenant)) : NULL;
    if ((t->tenant != NULL && v->tenant == NULL) || view_parts(r, v, t) != 0)
        return -1;
    v->position = ticket_position(t, &v->ahead_weight, &in);
    if (t->status == EMB_TICKET_WAITING) {
        int64_t avail = in->available > 0 ? in->available : 0;
        uint64_t weight = t->q.weight;
        for (uint32_t i = 0; t->q.multi != NULL && i < t->q.multi->nparts; i++)
            if (t->q.multi->part[i].sem == in)
                weight = t->q.multi->part[i].weight;
        uint64_t need = v->ahead_weight + weight;
        need = need > (uint64_t)avail ? need - (uint64_t)avail : 1;
        v->estimated = estimate(eb, in, need, &v->p50_ms, &v->p90_ms);
    } else {
        const engine_part_t *parts = r->lease.parts;
        size_t nparts = r->lease.nparts;
        emb__view_lease(&r->lease, t->lease);
        r->lease.parts = parts; /* view_parts filled them */
        r->lease.nparts = nparts;
        r->lease.tenant = v->tenant;
        r->lease.name = v->name;
        if (t->lease->owner != NULL) {
            r->lease.owner = engine_result_strdup(r, t->lease->owner, strlen(t->lease->owner));
            if (r->lease.owner == NULL)
                return -1;
        }
        if (!t->collected) {
            t->collected = 1;
            store_ticket(eb, t);
        }
    }
    v->state = ticket_state(t, v->position);
    r->kind = ENGINE_RES_TICKET;
    return 0;
}

static void finish_ticket(emb_t *eb, emb_req_t *er, emb_ticket_t *t)
{
    engine_result_t *r = &er->req->res;

    if (ticket_view(eb, r, t) != 0) {
        engine_result_clear(r);
        return fail(eb, er, BE_MSG_NOMEM_RESULT);
    }
    emb__finish(eb, er, 0, NULL);
}

/* ---- watchers: long-polls and streams ---- */

static void arm_tick(emb_t *eb)
{
    if (eb->tick.idx != EHEAP_NONE || elist_empty(&eb->watched))
        return;
    eb->tick.deadline = emb__now(eb) + (uint64_t)eb->cfg.ticket_poll_ms;
    if (eheap_push(&eb->heap, &eb->tick) == 0)
        emb__timer_rearm(eb);
}

/* Take a watcher off its ticket (the caller completes it). A watcher names its ticket by id,
 * which lives while it has watchers (its end fails them first). */
static emb_ticket_t *watcher_off(emb_t *eb, emb_req_t *er)
{
    emb_ticket_t *t = ticket_find(eb, er->req->id, er->req->id_len);

    elist_remove(&er->link);
    eheap_remove(&eb->heap, &er->hi);
    er->state = EMB_REQ_NEW;
    eb->nwatchers--;
    if (elist_empty(&t->watchers))
        elist_remove(&t->watched);
    return t;
}

/* The status changed: every watcher hears it now. */
static void wake_watchers(emb_t *eb, emb_ticket_t *t)
{
    while (!elist_empty(&t->watchers)) {
        emb_req_t *er = ECONTAINER(t->watchers.next, emb_req_t, link);
        watcher_off(eb, er);
        finish_ticket(eb, er, t);
    }
}

static void fail_watchers(emb_t *eb, emb_ticket_t *t, be_msg_t why)
{
    while (!elist_empty(&t->watchers)) {
        emb_req_t *er = ECONTAINER(t->watchers.next, emb_req_t, link);
        watcher_off(eb, er);
        fail(eb, er, why);
    }
}

/* Once per poll interval: watchers of tickets whose position moved get it. A ticket whose
 * queue lost nobody since the last check is skipped without computing its position. */
void emb__ticket_tick(emb_t *eb)
{
    for (elist_t *x = eb->watched.next, *next; x != &eb->watched; x = next) {
        emb_ticket_t *t = ECONTAINER(x, emb_ticket_t, watched);
        uint64_t state;
        next = x->next;
        if (t->status != EMB_TICKET_WAITING || ticket_removed(t) == t->seen_removed)
            continue;
        t->seen_removed = ticket_removed(t);
        state = current_state(t);
        for (elist_t *y = t->watchers.next, *ynext; y != &t->watchers; y = ynext) {
            emb_req_t *er = ECONTAINER(y, emb_req_t, link);
            ynext = y->next;
            if (er->req->seen == state)
                continue;
            watcher_off(eb, er);
            eb->ticket_updates++;
            finish_ticket(eb, er, t);
        }
        keepalive_touch(eb, t);
    }
    arm_tick(eb);
}

void emb__ticket_watch_timeout(emb_t *eb, emb_req_t *er)
{
    emb_ticket_t *t = watcher_off(eb, er);

    finish_ticket(eb, er, t);
    keepalive_touch(eb, t);
}

void emb__ticket_watch_cancel(emb_t *eb, emb_req_t *er)
{
    emb_ticket_t *t = watcher_off(eb, er);

    keepalive_touch(eb, t); /* the time unread starts now */
}

/* ---- life and end ---- */

/* A copy of `s`, NULL for NULL or "" (*failed set when out of memory). */
static char *dup_opt(const char *s, int *failed)
{
    size_t n = s != NULL ? strlen(s) : 0;
    char *d;

    if (n == 0)
        return NULL;
    d = sema__malloc(n + 1);
    if (d == NULL)
        *failed = 1;
    else
        memcpy(d, s, n + 1);
    return d;
}

static void ticket_free_raw(emb_ticket_t *t)
{
    if (t->q.multi != NULL && t->q.state != EMB_REQ_PARKED)
        emb__multi_free(t->q.multi);
    sema__free(t->owner);
    sema__free(t->principal);
    sema__free(t->tenant);
    sema__free(t);
}

static emb_ticket_t *ticket_new(emb_t *eb, emb_sem_t *s, uint64_t weight, const char *owner,
                                const char *principal, const char *tenant)
{
    emb_ticket_t *t = sema__calloc(1, sizeof(*t));
    int failed = 0;

    if (t == NULL)
        return NULL;
    t->owner = dup_opt(owner, &failed);
    t->principal = dup_opt(principal, &failed);
    t->tenant = dup_opt(tenant, &failed);
    if (failed) {
        ticket_free_raw(t);
        return NULL;
    }
    t->sem = s;
    t->hi.kind = EITEM_TICKET;
    t->hi.idx = EHEAP_NONE;
    elist_init(&t->watchers);
    elist_init(&t->watched);
    elist_init(&t->q.link);
    t->q.hi.idx = EHEAP_NONE;
    t->q.kind = EMB_KIND_TICKET;
    t->q.weight = weight;
    t->status = EMB_TICKET_WAITING;
    t->seen_removed = s != NULL ? s->qremoved : 0;
    return t;
}

static void ticket_insert(emb_t *eb, emb_ticket_t *t)
{
    t->node.hash = etab_hash(t->id, strlen(t->id), ID_SEED);
    etab_insert(&eb->tickets, &t->node);
}

static void ticket_free(emb_t *eb, emb_ticket_t *t)
{
    eheap_remove(&eb->heap, &t->hi);
    etab_remove(&eb->tickets, &t->node);
    elist_remove(&t->watched);
    if (t->idem != NULL)
        emb__idem_free(eb, t->idem);
    ticket_free_raw(t);
}

/* End a ticket: out of line, its lease (if any) released, its watchers told why, a
 * tombstone says why. The caller re-runs admission. */
static void ticket_end(emb_t *eb, emb_ticket_t *t, int reason)
{
    if (t->q.state == EMB_REQ_PARKED) {
        if (reason != EMB_TOMB_TICKET_DELETED) /* "deleted" says it for all */
            emb__event_waiter(eb, &t->q, "left");
        emb__unpark(eb, &t->q);
    }
    if (t->lease != NULL) {
        emb_lease_t *l = t->lease;
        l->ticket = NULL;
        t->lease = NULL;
        emb__lease_end(eb, l, EMB_TOMB_RELEASED);
    }
    fail_watchers(eb, t, emb__tomb_msg(reason));
    emb__tomb_add(eb, t->id, reason);
    if (eb->store != NULL) {
        (void)store_del_ticket(eb->store, t->id);
        emb__mark_dirty(eb);
    }
    ticket_free(eb, t);
}

void emb__ticket_refuse(emb_t *eb, emb_ticket_t *t, int reason)
{
    ticket_end(eb, t, reason);
}

/* End a ticket, then admission where it waited or held. */
static void ticket_end_admit(emb_t *eb, emb_ticket_t *t, int reason)
{
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    size_t n = ticket_sems(t, sems);

    ticket_end(eb, t, reason);
    emb__admit_all(eb, sems, n);
}

void emb__ticket_lease_gone(emb_t *eb, emb_ticket_t *t, int reason)
{
    ticket_end(eb, t, reason == EMB_TOMB_DELETED ? EMB_TOMB_TICKET_DELETED : EMB_TOMB_TICKET_DONE);
}

/* Its turn (the caller took it out of line): the lease is made, watchers hear it now, and
 * whoever holds the ticket has keepalive_ms to collect it. */
/* The ticket has its lease (or, NULL, could not have it): watchers hear it now, and whoever
 * holds the ticket has keepalive_ms to collect it. */
static void ticket_granted(emb_t *eb, emb_ticket_t *t, emb_lease_t *l)
{
    if (l == NULL) {
        ticket_end(eb, t, EMB_TOMB_TICKET_REFUSED);
        return;
    }
    l->ticket = t;
    t->lease = l;
    t->status = EMB_TICKET_GRANTED;
    t->collected = 0;
    eb->tickets_granted++;
    store_ticket(eb, t);
    wake_watchers(eb, t);
    keepalive_touch(eb, t);
}

void emb__ticket_grant(emb_t *eb, emb_ticket_t *t)
{
    const engine_req_t as = {.op = ENGINE_ACQUIRE,
                             .ttl_ms = t->ttl_ms,
                             .owner = t->owner,
                             .principal = t->principal,
                             .tenant = t->tenant};

    ticket_granted(eb, t, emb__grant(eb, t->sem, &as, t->q.weight, t->q.since_mono));
}

void emb__ticket_grant_multi(emb_t *eb, emb_ticket_t *t, emb_sem_t **sems, const uint64_t *w,
                             size_t n)
{
    const engine_req_t as = {.op = ENGINE_ACQUIRE_MULTI,
                             .ttl_ms = t->ttl_ms,
                             .owner = t->owner,
                             .principal = t->principal,
                             .tenant = t->tenant};

    ticket_granted(eb, t, emb__grant_multi(eb, sems, w, n, &as, t->tenant, t->q.since_mono));
}

void emb__ticket_due(emb_t *eb, emb_ticket_t *t)
{
    if (!elist_empty(&t->watchers)) { /* an open stream or long-poll reads it */
        keepalive_touch(eb, t);
        return;
    }
    if (t->status == EMB_TICKET_WAITING) {
        eb->tickets_abandoned++;
        ticket_end_admit(eb, t, EMB_TOMB_TICKET_ABANDONED);
    } else if (!t->collected) {
        eb->tickets_uncollected++;
        ticket_end_admit(eb, t, EMB_TOMB_TICKET_UNCOLLECTED);
    }
}

/* ---- operations ---- */

static int same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Is ticket t what `req` asks for: its semaphores, weights and tenant? */
static int ticket_matches(const emb_ticket_t *t, const engine_req_t *req)
{
    store_part_t parts[ENGINE_PARTS_MAX];
    size_t n;

    if (!same_str(t->tenant, req->tenant))
        return 0;
    if (req->nparts == 0)
        return t->q.multi == NULL && (t->lease == NULL || emb__lease_next(t->lease) == NULL) &&
               (t->lease != NULL ? t->lease->weight : t->q.weight) == req->weight;
    n = ticket_parts(t, parts);
    if (n + 1 != req->nparts || t->sem->name_len != req->parts[0].name_len ||
        memcmp(t->sem->name, req->parts[0].name, t->sem->name_len) != 0 ||
        (t->q.multi != NULL ? t->q.multi->part[0].weight : t->lease->weight) !=
            req->parts[0].weight)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(parts[i].sem) != req->parts[i + 1].name_len ||
            memcmp(parts[i].sem, req->parts[i + 1].name, req->parts[i + 1].name_len) != 0 ||
            parts[i].weight != req->parts[i + 1].weight)
            return 0;
    return 1;
}

/* A retry with the Idempotency-Key of a ticket gets that ticket; 1 if answered. A key of a
 * ticket on several semaphores is looked up apart from any one semaphore's (s NULL). */
static int idem_retry(emb_t *eb, emb_req_t *er, emb_sem_t *s)
{
    emb_idem_t *d;

    if (emb__idem_of(eb, er->req, s, &d) != 0) {
        fail(eb, er, BE_MSG_KEY_OTHER_TOKEN);
        return 1;
    }
    if (d == NULL)
        return 0;
    if (d->ticket == NULL || !ticket_matches(d->ticket, er->req)) {
        fail(eb, er, BE_MSG_KEY_OTHER_TICKET);
        return 1;
    }
    er->durable = 1; /* its creation may still be on its way to disk */
    keepalive_touch(eb, d->ticket);
    finish_ticket(eb, er, d->ticket);
    return 1;
}

static void ticket_key(emb_t *eb, emb_ticket_t *t, const char *key, int multi)
{
    if (key == NULL || key[0] == '\0')
        return;
    t->idem = emb__idem_new(eb, multi ? NULL : t->sem, key, strlen(key));
    if (t->idem != NULL)
        t->idem->ticket = t;
}

/* Its place in line: on its semaphore, or on each of several. On a semaphore with limits (or
 * for a tenant) it goes through admission as it joins, and may be granted at once. */
static int ticket_park(emb_t *eb, emb_ticket_t *t)
{
    int rc;

    if (t->q.multi != NULL)
        return emb__multi_park(eb, t->q.multi);
    if (t->tenant != NULL && (rc = emb__lim_ensure(eb, t->sem)) != 0)
        return rc;
    return emb__park(eb, &t->q, t->sem, -1);
}

/* A new ticket: its semaphore(s) checked, made, not yet in line. NULL after failing er. */
static emb_ticket_t *ticket_make(emb_t *eb, emb_req_t *er, emb_sem_t *s)
{
    engine_req_t *req = er->req;
    be_msg_t why = BE_MSG_NONE;
    emb_ticket_t *t = ticket_new(eb, s, req->weight, req->owner, req->principal, req->tenant);

    if (t == NULL) {
        fail(eb, er, BE_MSG_NOMEM_TICKET);
        return NULL;
    }
    if (req->nparts > 0) {
        t->multi = 1;
        t->q.multi = emb__multi_new(eb, &t->q, req->parts, req->nparts, &why);
        if (t->q.multi != NULL) {
            t->sem = t->q.multi->part[0].sem;
            t->seen_removed = t->sem->qremoved;
        }
    } else {
        why = emb__lim_too_heavy(s, req->weight);
    }
    if (why != BE_MSG_NONE) {
        ticket_free_raw(t);
        fail(eb, er, why);
        return NULL;
    }
    engine__lease_id(eb->front, t->id);
    t->ttl_ms = req->ttl_ms;
    t->keepalive_ms = req->keepalive_ms;
    t->created_at_ms = emb__wall_ms();
    return t;
}

/* POST /v1/semaphores/{name}/tickets (or /v1/tickets on several): in line at once, or
 * granted when it fits now. */
void emb__op_ticket_create(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_sem_t *s = NULL;
    emb_ticket_t *t;
    int rc;

    if (req->nparts == 0) {
        s = emb__sem_find(eb, req->name, req->name_len);
        if (s == NULL)
            return fail(eb, er, BE_MSG_NO_SEM);
        if (req->weight == 0 || req->weight > s->capacity)
            return fail(eb, er, BE_MSG_BAD_WEIGHT);
    }
    if (idem_retry(eb, er, s))
        return;
    if ((t = ticket_make(eb, er, s)) == NULL)
        return;
    if (s != NULL && s->lim == NULL && req->tenant == NULL && elist_empty(&s->waiters) &&
        (int64_t)req->weight <= s->available) {
        ticket_insert(eb, t);
        ticket_key(eb, t, req->idem_key, 0);
        t->q.since_mono = emb__now(eb);
        emb__ticket_grant(eb, t);
        if (t->lease == NULL) /* ended: out of memory */
            return fail(eb, er, BE_MSG_NOMEM_GRANT);
    } else {
        emb_sem_t *sems[ENGINE_PARTS_MAX];
        char id[ENGINE_LEASE_ID_MAX];
        int was = emb__admit_hold(eb);
        memcpy(id, t->id, sizeof id);
        if ((rc = ticket_park(eb, t)) != 0) {
            emb__admit_release(eb, was);
            ticket_free_raw(t);
            return fail(eb, er,
                        rc == SEMA_ELIMIT ? BE_MSG_TOO_MANY_WAITERS_OR_TENANTS : BE_MSG_NOMEM);
        }
        ticket_insert(eb, t);
        ticket_key(eb, t, req->idem_key, req->nparts > 0);
        store_ticket(eb, t);
        keepalive_touch(eb, t);
        emb__event_waiter(eb, &t->q, "queued");
        emb__admit_all(eb, sems, ticket_sems(t, sems));
        emb__admit_release(eb, was);                       /* may grant it at once */
        if ((t = ticket_find(eb, id, strlen(id))) == NULL) /* ended: out of memory */
            return fail(eb, er, BE_MSG_NOMEM_GRANT);
    }
    eb->tickets_created++;
    req->created = 1;
    er->durable = 1;
    finish_ticket(eb, er, t);
}

/* GET /v1/tickets/{id}[?wait=]: now, or once its state differs from what the caller saw. */
void emb__op_ticket_get(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_ticket_t *t = find_own_ticket(eb, er);
    uint64_t state;

    if (t == NULL)
        return;
    state = current_state(t);
    /* A long-poll waits while the ticket waits; a granted one answers at once (a stream,
     * which names the state it has, waits on for the end). */
    if (req->timeout_ms <= 0 || (req->seen != 0 && req->seen != state) ||
        (req->seen == 0 && t->status == EMB_TICKET_GRANTED)) {
        finish_ticket(eb, er, t);
        return keepalive_touch(eb, t);
    }
    req->seen = state; /* the state it waits to change from */
    er->hi.kind = EITEM_WAITER;
    er->hi.deadline = emb__now(eb) + (uint64_t)req->timeout_ms;
    if ((uint64_t)req->timeout_ms >= UINT64_MAX / 2 || eheap_push(&eb->heap, &er->hi) != 0) {
        finish_ticket(eb, er, t);
        return keepalive_touch(eb, t);
    }
    emb__timer_rearm(eb);
    er->state = EMB_REQ_WATCH;
    eb->nwatchers++;
    if (elist_empty(&t->watchers))
        elist_push_back(&eb->watched, &t->watched);
    elist_push_back(&t->watchers, &er->link);
    arm_tick(eb);
    keepalive_touch(eb, t);
}

/* DELETE /v1/tickets/{id}: out of line (and a granted ticket's lease released). */
void emb__op_ticket_delete(emb_t *eb, emb_req_t *er)
{
    emb_ticket_t *t = find_own_ticket(eb, er);

    if (t == NULL)
        return;
    eb->tickets_left++;
    ticket_end_admit(eb, t, EMB_TOMB_TICKET_LEFT);
    er->durable = eb->strict;
    emb__finish(eb, er, 0, NULL);
}

/* ---- loading and clearing ---- */

/* A waiting ticket on several semaphores back in its places; 1 when one of them is gone (or
 * cannot take it: the ticket ended while semad was down), or an error. */
static int load_multi(emb_t *eb, emb_ticket_t *t, const store_ticket_t *rec)
{
    engine_part_t parts[ENGINE_PARTS_MAX];
    be_msg_t why = BE_MSG_NONE;

    if (rec->nparts + 1 > ENGINE_PARTS_MAX)
        return 1;
    parts[0] = (engine_part_t){rec->sem, strlen(rec->sem), rec->weight, 0};
    for (size_t i = 0; i < rec->nparts; i++) {
        const char *n = rec->parts[i].sem != NULL ? rec->parts[i].sem : "";
        parts[i + 1] = (engine_part_t){n, strlen(n), rec->parts[i].weight, 0};
    }
    t->q.multi = emb__multi_new(eb, &t->q, parts, rec->nparts + 1, &why);
    if (t->q.multi == NULL)
        return be_msg_code(why) == SEMA_ENOMEM ? SEMA_ENOMEM : 1;
    t->q.multi->part[0].oseq = rec->seq;
    return emb__multi_park(eb, t->q.multi) != 0 ? SEMA_ENOMEM : 0;
}

/* Rebuild a stored ticket: a waiting one in its place(s), a granted one with its lease. A
 * ticket whose semaphore or lease is gone ended while semad was down: its row goes. */
int emb__ticket_load(emb_t *eb, const store_ticket_t *rec)
{
    size_t idlen = strlen(rec->id);
    emb_sem_t *s = emb__sem_find(eb, rec->sem, strlen(rec->sem));
    emb_lease_t *l = NULL;
    emb_ticket_t *t;
    int rc = 0;

    if (idlen == 0 || idlen >= ENGINE_LEASE_ID_MAX || ticket_find(eb, rec->id, idlen) != NULL)
        return SEMA_ECORRUPT;
    if (rec->lease_id != NULL)
        l = emb__lease_find(eb, rec->lease_id, strlen(rec->lease_id));
    if (s == NULL || rec->weight == 0 || rec->weight > s->capacity ||
        (rec->lease_id == NULL && rec->seq == 0) ||
        (rec->lease_id != NULL && (l == NULL || l->ticket != NULL)))
        goto gone;
    t = ticket_new(eb, s, rec->weight, rec->owner, rec->principal, rec->tenant);
    if (t == NULL)
        return SEMA_ENOMEM;
    memcpy(t->id, rec->id, idlen + 1);
    t->ttl_ms = rec->ttl_ms > 0 ? rec->ttl_ms : eb->cfg.default_ttl_ms;
    t->keepalive_ms = rec->keepalive_ms > 0 ? rec->keepalive_ms : eb->cfg.ticket_keepalive_ms;
    t->created_at_ms = rec->created_at_ms;
    if (l != NULL) {
        t->status = EMB_TICKET_GRANTED;
        t->lease = l;
        t->collected = rec->collected != 0;
        t->multi = emb__lease_next(l) != NULL;
        l->ticket = t;
    } else if (rec->nparts > 0) {
        t->multi = 1;
        rc = load_multi(eb, t, rec);
    } else if (emb__lim_too_heavy(s, rec->weight) != BE_MSG_NONE) {
        rc = 1;
    } else {
        t->q.oseq = rec->seq;
        rc = ticket_park(eb, t) != 0 ? SEMA_ENOMEM : 0;
    }
    if (rc != 0) {
        ticket_free_raw(t);
        if (rc == 1)
            goto gone;
        return rc;
    }
    ticket_insert(eb, t);
    ticket_key(eb, t, rec->idem_key, rec->nparts > 0);
    keepalive_touch(eb, t);
    return 0;
gone:
    (void)store_del_ticket(eb->store, rec->id); /* committed with the next change */
    return 0;
}

static void clear_one(void *arg, enode_t *n)
{
    void **a = arg;
    emb_t *eb = a[0];
    emb_ticket_t *t = ECONTAINER(n, emb_ticket_t, node);

    fail_watchers(eb, t, *(be_msg_t *)a[1]);
    if (t->q.state == EMB_REQ_PARKED)
        emb__unpark(eb, &t->q);
    if (t->lease != NULL)
        t->lease->ticket = NULL;
    ticket_free(eb, t);
}

void emb__tickets_clear(emb_t *eb, be_msg_t why)
{
    void *a[2] = {eb, &why};

    etab_each(&eb->tickets, clear_one, a);
    eheap_remove(&eb->heap, &eb->tick);
}

void emb__tickets_fail_watchers(emb_t *eb, be_msg_t why)
{
    while (!elist_empty(&eb->watched))
        fail_watchers(eb, ECONTAINER(eb->watched.next, emb_ticket_t, watched), why);
}
