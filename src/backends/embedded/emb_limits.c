/* SPDX-License-Identifier: MIT */
/* emb_limits.c - what a semaphore has beyond plain FIFO: tenants served in turn (deficit round
 * robin by units, FIFO within a tenant, none above tenant_max), a token bucket beside the
 * capacity, and the admission that keeps both with requests on several semaphores.
 *
 * A semaphore gets its emb_limits_t when it is given a tenant_max or a rate, or when a request
 * naming a tenant reaches it; a semaphore without one keeps the plain path of emb.c.
 *
 * Who is next on a semaphore with limits (designate()):
 * 1. A wait-idle at the head of the queue; requests that came after a parked wait-idle wait.
 * 2. The part of a request on several semaphores that holds this semaphore's turn
 *    (lim->reserved).
 * 3. Else the round robin's choice (drr_choice): the tenants with waiters take turns in ring
 *    order; each visit adds one unit to a tenant's deficit, and a tenant's first waiter goes
 *    when its deficit covers its weight, which is then taken off. So over time each waiting
 *    tenant gets the same number of units, whatever the weights. A tenant is passed over
 *    while its first waiter would take it above tenant_max, came after a parked wait-idle,
 *    or is a request on several semaphores not yet first of its tenant on all of them.
 * 4. A request on several semaphores that holds the turn of another of its semaphores, is
 *    first of its tenant here and came before the round robin's choice, takes this
 *    semaphore's turn (and keeps it until it is granted or leaves).
 * The one chosen is granted when it fits (units and tokens); until then nobody else is.
 *
 * Why this cannot deadlock: every wait between requests points from a later arrival to an
 * earlier one (emb_req_t.oseq), so waits never close a cycle; docs/semantics.md has the
 * argument in full. */
#include "backends/embedded/emb_internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_limits.h"

#define NANO 1000000000ull      /* the bucket counts billionths of a unit */
#define DEFICIT_MAX (1ll << 60) /* deficits saturate here (either sign) */

/* ---- the limits object ---- */

static emb_limits_t *lim_new(emb_sem_t *s)
{
    emb_limits_t *lim = sema__calloc(1, sizeof(*lim));

    if (lim == NULL)
        return NULL;
    lim->sem = s;
    lim->rate_hi.idx = EHEAP_NONE;
    lim->rate_hi.kind = EITEM_RATE;
    elist_init(&lim->tenants);
    elist_init(&lim->ring);
    return lim;
}

static int lim_idle(const emb_limits_t *lim)
{
    return lim->tenant_max == 0 && lim->rate_per_s == 0 && lim->ntenants == 0 &&
           lim->reserved == NULL;
}

void emb__lim_free(emb_t *eb, emb_sem_t *s)
{
    emb_limits_t *lim = s->lim;

    if (lim == NULL)
        return;
    eheap_remove(&eb->heap, &lim->rate_hi);
    s->lim = NULL;
    sema__free(lim);
}

/* ---- tenants ---- */

typedef struct {
    const emb_sem_t *s;
    const char *name;
} tkey_t;

static uint64_t tenant_hash(const emb_sem_t *s, const char *name, size_t len)
{
    return etab_hash(name, len, s->node.hash ^ 0x7465);
}

static int tenant_eq(const enode_t *n, const void *key, size_t len)
{
    const emb_tenant_t *t = ECONTAINER(n, emb_tenant_t, node);
    const tkey_t *k = key;
    return t->sem == k->s && t->name_len == len && memcmp(t->name, k->name, len) == 0;
}

/* The tenant `name` (NULL: the requests naming none) of s, created when missing; NULL when
 * out of memory or when s has ENGINE_TENANTS_PER_SEM_MAX tenants already (*limit set). */
static emb_tenant_t *tenant_get(emb_t *eb, emb_sem_t *s, const char *name, int *limit)
{
    emb_limits_t *lim = s->lim;
    size_t len = name != NULL ? strlen(name) : 0;
    tkey_t k = {s, name != NULL ? name : ""};
    enode_t *n;
    emb_tenant_t *t;

    if (len == 0 && lim->dflt != NULL)
        return lim->dflt;
    n = etab_find(&eb->tenants, tenant_hash(s, k.name, len), tenant_eq, &k, len);
    if (n != NULL)
        return ECONTAINER(n, emb_tenant_t, node);
    if (lim->ntenants >= ENGINE_TENANTS_PER_SEM_MAX) {
        *limit = 1;
        return NULL;
    }
    t = sema__calloc(1, sizeof(*t) + len + 1);
    if (t == NULL)
        return NULL;
    t->sem = s;
    t->name_len = (uint16_t)len;
    memcpy(t->name, k.name, len);
    elist_init(&t->queue);
    elist_init(&t->ring);
    t->node.hash = tenant_hash(s, k.name, len);
    etab_insert(&eb->tenants, &t->node);
    elist_push_back(&lim->tenants, &t->all);
    lim->ntenants++;
    if (len == 0)
        lim->dflt = t;
    return t;
}

/* A tenant that neither holds nor waits goes. */
static void tenant_maybe_free(emb_t *eb, emb_tenant_t *t)
{
    emb_limits_t *lim = t->sem->lim;

    if (t->nwaiters != 0 || t->nleases != 0)
        return;
    SEMA__CHECK(elist_empty(&t->ring) && lim->last != t);
    etab_remove(&eb->tenants, &t->node);
    elist_remove(&t->all);
    lim->ntenants--;
    if (lim->dflt == t)
        lim->dflt = NULL;
    sema__free(t);
}

/* The name a request gave for its tenant, or NULL. */
const char *emb__req_tenant(const emb_req_t *er)
{
    if (er->kind == EMB_KIND_PART)
        er = er->multi->main;
    if (er->kind == EMB_KIND_TICKET)
        return ECONTAINER(er, emb_ticket_t, q)->tenant;
    return er->req != NULL ? er->req->tenant : NULL;
}

static emb_req_t *tenant_head(const emb_tenant_t *t)
{
    return elist_empty(&t->queue) ? NULL : ECONTAINER(t->queue.next, emb_tplace_t, link)->er;
}

/* Put t in the ring: it is visited at the end of the round under way. */
static void ring_join(emb_limits_t *lim, emb_tenant_t *t)
{
    t->deficit = 0;
    elist_push_back(lim->last != NULL ? &lim->last->ring : &lim->ring, &t->ring);
}

static void ring_leave(emb_limits_t *lim, emb_tenant_t *t)
{
    if (lim->last == t) {
        /* the next visit goes to the tenant after it */
        elist_t *prev = t->ring.prev == &lim->ring ? lim->ring.prev : t->ring.prev;
        lim->last = prev == &t->ring ? NULL : ECONTAINER(prev, emb_tenant_t, ring);
        lim->in_turn = 0;
    }
    elist_remove(&t->ring);
    elist_init(&t->ring);
    t->deficit = 0;
}

int emb__tenant_join(emb_t *eb, emb_sem_t *s, emb_req_t *er)
{
    int limit = 0;
    emb_tenant_t *t;
    emb_tplace_t *pl;

    er->tplace = NULL;
    if (er->kind == EMB_KIND_WAIT_IDLE) {
        s->lim->nidle++;
        return 0;
    }
    if ((pl = sema__malloc(sizeof(*pl))) == NULL)
        return SEMA_ENOMEM;
    t = tenant_get(eb, s, emb__req_tenant(er), &limit);
    if (t == NULL) {
        sema__free(pl);
        return limit ? SEMA_ELIMIT : SEMA_ENOMEM;
    }
    if (elist_empty(&t->queue))
        ring_join(s->lim, t);
    pl->tenant = t;
    pl->er = er;
    elist_push_back(&t->queue, &pl->link);
    s->lim->nmulti += er->kind == EMB_KIND_PART;
    t->nwaiters++;
    t->waiting += er->weight;
    er->tplace = pl;
    return 0;
}

void emb__tenant_leave(emb_t *eb, emb_sem_t *s, emb_req_t *er)
{
    emb_tplace_t *pl = er->tplace;
    emb_tenant_t *t = pl != NULL ? pl->tenant : NULL;
    emb_limits_t *lim = s->lim;

    if (er->kind == EMB_KIND_WAIT_IDLE) {
        lim->nidle--;
        return;
    }
    if (lim->reserved == er) {
        lim->reserved = NULL;
        er->multi->nreserved--;
    }
    elist_remove(&pl->link);
    sema__free(pl);
    er->tplace = NULL;
    lim->nmulti -= er->kind == EMB_KIND_PART;
    t->nwaiters--;
    t->waiting -= er->weight;
    if (elist_empty(&t->queue))
        ring_leave(lim, t);
    tenant_maybe_free(eb, t);
}

/* A grant on s counts for the tenant of the request (or the ticket) that took it. */
int emb__tenant_hold(emb_t *eb, emb_sem_t *s, emb_lease_t *l, const char *name)
{
    int limit = 0;
    emb_tenant_t *t;

    if (s->lim == NULL)
        return 0;
    if (emb__lease_x(l) == NULL)
        return SEMA_ENOMEM;
    t = tenant_get(eb, s, name, &limit);
    if (t == NULL)
        return limit ? SEMA_ELIMIT : SEMA_ENOMEM;
    t->held += l->weight;
    t->nleases++;
    l->x->tenant = t;
    return 0;
}

void emb__tenant_unhold(emb_t *eb, emb_lease_t *l)
{
    emb_tenant_t *t = emb__lease_tenant(l);

    if (t == NULL)
        return;
    l->x->tenant = NULL;
    t->held -= l->weight;
    t->nleases--;
    tenant_maybe_free(eb, t);
}

const char *emb__tenant_name(const emb_tenant_t *t, size_t *len)
{
    *len = t != NULL ? t->name_len : 0;
    return t != NULL && t->name_len > 0 ? t->name : NULL;
}

/* Give s its limits object: its waiters and holders so far become the default tenant's (in
 * their order). 0, SEMA_ENOMEM. */
int emb__lim_ensure(emb_t *eb, emb_sem_t *s)
{
    emb_limits_t *lim;
    int rc = 0;

    if (s->lim != NULL)
        return 0;
    if ((lim = lim_new(s)) == NULL)
        return SEMA_ENOMEM;
    lim->tokens_ms = emb__now(eb);
    s->lim = lim;
    for (elist_t *x = s->waiters.next; x != &s->waiters && rc == 0; x = x->next)
        rc = emb__tenant_join(eb, s, ECONTAINER(x, emb_req_t, link));
    for (elist_t *x = s->holders.next; x != &s->holders && rc == 0; x = x->next)
        rc = emb__tenant_hold(eb, s, ECONTAINER(x, emb_lease_t, link), NULL);
    if (rc != 0) { /* undo: back to plain FIFO */
        for (elist_t *x = s->waiters.next; x != &s->waiters; x = x->next) {
            emb_req_t *er = ECONTAINER(x, emb_req_t, link);
            if (er->tplace != NULL || er->kind == EMB_KIND_WAIT_IDLE)
                emb__tenant_leave(eb, s, er);
        }
        for (elist_t *x = s->holders.next; x != &s->holders; x = x->next)
            emb__tenant_unhold(eb, ECONTAINER(x, emb_lease_t, link));
        emb__lim_free(eb, s);
        return SEMA_ENOMEM;
    }
    return 0;
}

/* ---- the token bucket ---- */

static uint64_t bucket_cap(const emb_limits_t *lim)
{
    return lim->rate_burst * NANO;
}

/* The bucket as of `now` (ms), without changing it. */
static uint64_t tokens_at(const emb_limits_t *lim, uint64_t now)
{
    uint64_t cap = bucket_cap(lim), per_ms = lim->rate_per_s * 1000000ull, el;

    if (now <= lim->tokens_ms)
        return lim->tokens_n;
    el = now - lim->tokens_ms;
    if (el > cap / per_ms)
        return cap;
    return lim->tokens_n + el * per_ms >= cap ? cap : lim->tokens_n + el * per_ms;
}

static void refill(emb_t *eb, emb_limits_t *lim)
{
    uint64_t now = emb__now(eb);

    if (lim->rate_per_s == 0)
        return;
    lim->tokens_n = tokens_at(lim, now);
    lim->tokens_ms = now;
}

uint64_t emb__tokens(emb_t *eb, const emb_sem_t *s)
{
    const emb_limits_t *lim = s->lim;

    if (lim == NULL || lim->rate_per_s == 0)
        return 0;
    return tokens_at(lim, emb__now(eb)) / NANO;
}

static int has_tokens(const emb_limits_t *lim, uint64_t w)
{
    return lim == NULL || lim->rate_per_s == 0 || lim->tokens_n >= w * NANO;
}

/* The head waits for tokens: one timer item per semaphore, set to when it has them. */
static void rate_wait(emb_t *eb, emb_limits_t *lim, uint64_t w)
{
    uint64_t per_ms = lim->rate_per_s * 1000000ull;
    uint64_t need = w * NANO - lim->tokens_n;
    uint64_t due = lim->tokens_ms + (need + per_ms - 1) / per_ms;

    if (lim->rate_hi.idx != EHEAP_NONE) {
        if (lim->rate_hi.deadline != due)
            eheap_update(&eb->heap, &lim->rate_hi, due);
    } else {
        lim->rate_hi.deadline = due;
        if (eheap_push(&eb->heap, &lim->rate_hi) != 0)
            return; /* no room: the next release or arrival looks again */
    }
    emb__timer_rearm(eb);
}

void emb__rate_due(emb_t *eb, emb_limits_t *lim)
{
    emb__admit(eb, lim->sem);
}

/* ---- who is next ---- */

/* The arrival of the first wait-idle parked on s, or 0. */
static uint64_t idle_oseq(const emb_sem_t *s)
{
    if (s->lim == NULL || s->lim->nidle == 0)
        return 0;
    for (const elist_t *x = s->waiters.next; x != &s->waiters; x = x->next) {
        const emb_req_t *er = ECONTAINER(x, emb_req_t, link);
        if (er->kind == EMB_KIND_WAIT_IDLE)
            return er->oseq;
    }
    return 0;
}

/* Is part p first in line on its semaphore: first of its tenant there, and before any
 * wait-idle (with limits), or the queue's head (without)? */
static int part_first(const emb_req_t *p)
{
    const emb_sem_t *s = p->sem;
    uint64_t idle;

    if (s->lim == NULL)
        return s->waiters.next == &p->link;
    if (p->tplace->tenant->queue.next != &p->tplace->link)
        return 0;
    idle = idle_oseq(s);
    return idle == 0 || p->oseq < idle;
}

/* A request on several semaphores is ready once it is first in line on every one. */
int emb__multi_ready(const emb_multi_t *m)
{
    for (uint32_t i = 0; i < m->nparts; i++)
        if (!part_first(&m->part[i]))
            return 0;
    return 1;
}

static int capped(const emb_limits_t *lim, const emb_tenant_t *t, const emb_req_t *h)
{
    return lim->tenant_max != 0 && t->held + h->weight > lim->tenant_max;
}

static int eligible(const emb_limits_t *lim, const emb_tenant_t *t, const emb_req_t *h,
                    uint64_t idle)
{
    if (h == NULL || (idle != 0 && h->oseq > idle) || capped(lim, t, h))
        return 0;
    return h->multi == NULL || emb__multi_ready(h->multi);
}

typedef struct {
    emb_tenant_t *t;      /* the tenant chosen */
    unsigned __int128 at; /* its visit: 0 when the tenant served last goes on */
    uint64_t k;           /* tenants visited per round */
} drr_pick_t;

/* Each tenant of the ring after lim->last in turn order (lim->last itself last); with no
 * last, from the ring's start. */
#define RING_NEXT(lim, x) ((x)->next == &(lim)->ring ? (lim)->ring.next : (x)->next)

static elist_t *ring_start(const emb_limits_t *lim)
{
    return lim->last != NULL ? &lim->last->ring : lim->ring.prev;
}

static int64_t sat_add(int64_t a, unsigned __int128 b)
{
    unsigned __int128 room = (unsigned __int128)(DEFICIT_MAX - a);
    return b >= room ? DEFICIT_MAX : a + (int64_t)b;
}

/* The round robin's choice among the tenants' first waiters: the first whose deficit covers
 * its weight in the sequence of visits to come (each visit adds one unit). */
static emb_req_t *drr_choice(const emb_limits_t *lim, uint64_t idle, drr_pick_t *pk)
{
    const elist_t *start = ring_start(lim), *x;
    emb_req_t *best = NULL;
    uint64_t k = 0, i = 0;

    pk->t = NULL;
    if (elist_empty(&lim->ring))
        return NULL;
    if (lim->last != NULL && lim->in_turn) {
        emb_req_t *h = tenant_head(lim->last);
        if (eligible(lim, lim->last, h, idle) && lim->last->deficit >= (int64_t)h->weight) {
            *pk = (drr_pick_t){lim->last, 0, 0};
            return h;
        }
    }
    x = start;
    do {
        x = RING_NEXT(lim, x);
        emb_tenant_t *t = ECONTAINER(x, emb_tenant_t, ring);
        k += eligible(lim, t, tenant_head(t), idle);
    } while (x != start);
    x = start;
    do {
        x = RING_NEXT(lim, x);
        emb_tenant_t *t = ECONTAINER(x, emb_tenant_t, ring);
        emb_req_t *h = tenant_head(t);
        if (!eligible(lim, t, h, idle))
            continue;
        i++;
        int64_t short_by = (int64_t)h->weight - t->deficit; /* both within +-2^60 */
        unsigned __int128 visits = short_by > 1 ? (unsigned __int128)short_by : 1;
        unsigned __int128 at = (visits - 1) * k + i;
        if (best == NULL || at < pk->at) {
            best = h;
            *pk = (drr_pick_t){t, at, k};
        }
    } while (x != start);
    return best;
}

/* The grant of h on s by the round robin (pk): every tenant visited on the way gets its units
 * of deficit, h's tenant pays its weight, and its turn may go on. */
static void drr_commit(emb_limits_t *lim, const drr_pick_t *pk, const emb_req_t *h, uint64_t idle)
{
    const elist_t *start = ring_start(lim), *x;
    uint64_t i = 0;

    if (pk->at != 0) {
        x = start;
        do {
            x = RING_NEXT(lim, x);
            emb_tenant_t *t = ECONTAINER(x, emb_tenant_t, ring);
            if (!eligible(lim, t, tenant_head(t), idle))
                continue;
            i++;
            if (pk->at >= i)
                t->deficit = sat_add(t->deficit, (pk->at - i) / pk->k + 1);
        } while (x != start);
    }
    pk->t->deficit -= (int64_t)h->weight;
    lim->last = pk->t;
    lim->in_turn = 1;
}

/* A grant of h on s out of the round robin's turn (a request on several semaphores that
 * holds s's turn): its tenant pays for it all the same. */
static void drr_charge(emb_limits_t *lim, const emb_req_t *h)
{
    emb_tenant_t *t = h->tplace->tenant;

    t->deficit -= (int64_t)h->weight;
    if (t->deficit < -DEFICIT_MAX)
        t->deficit = -DEFICIT_MAX;
    (void)lim;
}

/* The earliest part among the tenants' first waiters here whose request holds the turn of
 * another of its semaphores (and may take this one's), or NULL. */
static emb_req_t *earliest_reserving(const emb_limits_t *lim, uint64_t idle)
{
    emb_req_t *best = NULL;

    if (lim->nmulti == 0)
        return NULL;
    for (const elist_t *x = lim->ring.next; x != &lim->ring; x = x->next) {
        emb_tenant_t *t = ECONTAINER(x, emb_tenant_t, ring);
        emb_req_t *h = tenant_head(t);
        if (h->multi != NULL && h->multi->nreserved > 0 && (best == NULL || h->oseq < best->oseq) &&
            eligible(lim, t, h, idle))
            best = h;
    }
    return best;
}

/* Part p takes the turn of its semaphore. A request that now holds its first turn may take
 * those of its other semaphores: their admission runs again (after this one). */
static void reserve(emb_t *eb, emb_limits_t *lim, emb_req_t *p)
{
    emb_multi_t *m = p->multi;

    if (lim->reserved == p)
        return;
    if (lim->reserved != NULL)
        lim->reserved->multi->nreserved--;
    lim->reserved = p;
    if (m->nreserved++ == 0)
        for (uint32_t i = 0; i < m->nparts; i++)
            if (&m->part[i] != p)
                emb__admit(eb, m->part[i].sem);
}

static const emb_req_t *earliest(const emb_req_t *a, const emb_req_t *b)
{
    return a == NULL || (b != NULL && b->oseq < a->oseq) ? b : a;
}

/* Who is next on s with limits (see the file's comment): the earliest of the part holding
 * s's turn, the earliest part of a request holding another turn, and the round robin's
 * choice (*pk, when it is the one). NULL: nobody can be served now. */
static emb_req_t *designate_lim(emb_t *eb, emb_sem_t *s, drr_pick_t *pk)
{
    emb_limits_t *lim = s->lim;
    uint64_t idle = idle_oseq(s);
    emb_req_t *head, *d, *best;

    pk->t = NULL;
    if (elist_empty(&s->waiters))
        return NULL;
    head = ECONTAINER(s->waiters.next, emb_req_t, link);
    if (head->kind == EMB_KIND_WAIT_IDLE)
        return head;
    d = drr_choice(lim, idle, pk);
    best = (emb_req_t *)earliest(earliest(lim->reserved, earliest_reserving(lim, idle)), d);
    if (best != d)
        pk->t = NULL;
    if (best != NULL && best->multi != NULL)
        reserve(eb, lim, best);
    return best;
}

emb_req_t *emb__designate(emb_t *eb, emb_sem_t *s)
{
    drr_pick_t pk;

    if (s->flags & EMB_SEM_DELETED)
        return NULL;
    if (s->lim == NULL)
        return elist_empty(&s->waiters) ? NULL : ECONTAINER(s->waiters.next, emb_req_t, link);
    refill(eb, s->lim);
    return designate_lim(eb, s, &pk);
}

/* Do w units fit s now: capacity, and tokens? Arms the rate timer when only tokens lack. */
int emb__fits(emb_t *eb, emb_sem_t *s, uint64_t w)
{
    emb_limits_t *lim = s->lim;

    if ((int64_t)w > s->available)
        return 0;
    if (has_tokens(lim, w))
        return 1;
    rate_wait(eb, lim, w);
    return 0;
}

/* The request h designated on s is granted: the round robin and the bucket account for it.
 * (Called before h leaves its tenant's line.) */
void emb__take(emb_t *eb, emb_sem_t *s, emb_req_t *h)
{
    emb_limits_t *lim = s->lim;
    drr_pick_t pk;
    uint64_t idle;

    if (lim == NULL)
        return;
    if (lim->rate_per_s != 0)
        lim->tokens_n -= h->weight * NANO;
    if (h->kind == EMB_KIND_WAIT_IDLE)
        return;
    idle = idle_oseq(s);
    if (drr_choice(lim, idle, &pk) == h)
        drr_commit(lim, &pk, h, idle);
    else
        drr_charge(lim, h);
    (void)eb;
}

/* Admission on a semaphore with limits: grant who is next while it fits. */
void emb__admit_lim(emb_t *eb, emb_sem_t *s)
{
    drr_pick_t pk;

    while (s->lim != NULL && !(s->flags & EMB_SEM_DELETED)) {
        refill(eb, s->lim);
        emb_req_t *er = designate_lim(eb, s, &pk);
        if (er == NULL)
            break;
        if (er->kind == EMB_KIND_WAIT_IDLE) {
            if (s->available < (int64_t)s->capacity)
                break;
            emb__unpark(eb, er);
            emb__finish_view(eb, er, s, ENGINE_RES_IDLE);
            continue;
        }
        if (er->kind == EMB_KIND_PART) {
            if (!emb__multi_try(eb, er->multi))
                break;
            continue;
        }
        if (!emb__fits(eb, s, er->weight))
            break;
        emb__take(eb, s, er);
        emb__admit_head(eb, s, er);
    }
    if (s->lim != NULL && lim_idle(s->lim) && s->lim->rate_hi.idx == EHEAP_NONE)
        emb__lim_free(eb, s);
}

/* ---- a semaphore's limits: set, checked, shown ---- */

be_msg_t emb__lim_too_heavy(const emb_sem_t *s, uint64_t w)
{
    const emb_limits_t *lim = s->lim;

    if (lim == NULL)
        return BE_MSG_NONE;
    if (lim->tenant_max != 0 && w > lim->tenant_max)
        return BE_MSG_ABOVE_TENANT_MAX;
    if (lim->rate_per_s != 0 && w > lim->rate_burst)
        return BE_MSG_ABOVE_RATE_BURST;
    return BE_MSG_NONE;
}

void emb__lim_get(const emb_sem_t *s, uint64_t *tenant_max, uint64_t *rate, uint64_t *burst)
{
    const emb_limits_t *lim = s->lim;

    *tenant_max = lim != NULL ? lim->tenant_max : 0;
    *rate = lim != NULL ? lim->rate_per_s : 0;
    *burst = lim != NULL && lim->rate_per_s != 0 ? lim->rate_burst : 0;
}

be_msg_t emb__lim_wanted(const emb_sem_t *s, const engine_req_t *req, uint64_t *tm, uint64_t *rate,
                         uint64_t *burst)
{
    uint64_t old_rate;

    emb__lim_get(s, tm, rate, burst);
    old_rate = *rate;
    if (req->limits & ENGINE_LIMIT_TENANT_MAX)
        *tm = req->tenant_max;
    if (req->limits & ENGINE_LIMIT_RATE) {
        *rate = req->rate_per_s;
        if (*rate == 0)
            *burst = 0;
        else if (old_rate == 0 && !(req->limits & ENGINE_LIMIT_BURST))
            *burst = *rate;
    }
    if (req->limits & ENGINE_LIMIT_BURST) {
        if (*rate == 0)
            return BE_MSG_BURST_NEEDS_RATE;
        *burst = req->rate_burst;
    }
    return BE_MSG_NONE;
}

/* Set the limits of s (0: none); a new rate starts with a full bucket. 0 or SEMA_ENOMEM. */
int emb__lim_set(emb_t *eb, emb_sem_t *s, uint64_t tm, uint64_t rate, uint64_t burst)
{
    emb_limits_t *lim;
    int had_rate;

    if (s->lim == NULL && tm == 0 && rate == 0)
        return 0;
    if (emb__lim_ensure(eb, s) != 0)
        return SEMA_ENOMEM;
    lim = s->lim;
    had_rate = lim->rate_per_s != 0;
    refill(eb, lim);
    lim->tenant_max = tm;
    lim->rate_per_s = rate;
    lim->rate_burst = rate != 0 ? burst : 0;
    if (rate == 0) {
        lim->tokens_n = 0;
        eheap_remove(&eb->heap, &lim->rate_hi);
    } else if (!had_rate || lim->tokens_n > bucket_cap(lim)) {
        lim->tokens_n = bucket_cap(lim);
    }
    lim->tokens_ms = emb__now(eb);
    if (lim->reserved != NULL) { /* its tenant may be capped now: the turn is chosen again */
        lim->reserved->multi->nreserved--;
        lim->reserved = NULL;
    }
    return 0;
}

/* After a restart the bucket starts empty: a burst is never let through twice. */
void emb__lim_loaded(emb_t *eb, emb_sem_t *s)
{
    if (s->lim != NULL && s->lim->rate_per_s != 0) {
        s->lim->tokens_n = 0;
        s->lim->tokens_ms = emb__now(eb);
    }
}

void emb__lim_clear(emb_t *eb, emb_sem_t *s)
{
    emb_limits_t *lim = s->lim;

    if (lim == NULL)
        return;
    while (!elist_empty(&lim->tenants)) {
        emb_tenant_t *t = ECONTAINER(lim->tenants.next, emb_tenant_t, all);
        etab_remove(&eb->tenants, &t->node);
        elist_remove(&t->all);
        sema__free(t);
    }
    emb__lim_free(eb, s);
}

/* The tenants of s in a view (the default first, then by name). */
int emb__view_tenants(engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s)
{
    const emb_limits_t *lim = s->lim;
    size_t n = 0;

    if (lim == NULL || lim->ntenants == 0 || v->limits == NULL)
        return 0;
    engine_tenant_t *list = engine_result_alloc(r, lim->ntenants * sizeof(*list));
    if (list == NULL)
        return -1;
    for (const elist_t *x = lim->tenants.next; x != &lim->tenants; x = x->next) {
        const emb_tenant_t *t = ECONTAINER(x, emb_tenant_t, all);
        engine_tenant_t *o = &list[n++];
        o->name = t->name_len > 0 ? engine_result_strdup(r, t->name, t->name_len) : NULL;
        o->name_len = t->name_len;
        o->held = t->held;
        o->waiting = t->nwaiters;
        o->waiting_weight = t->waiting;
        if (t->name_len > 0 && o->name == NULL)
            return -1;
    }
    qsort(list, n, sizeof(*list), engine__tenant_cmp);
    v->limits->tenants = list;
    v->limits->ntenants = n;
    return 0;
}
