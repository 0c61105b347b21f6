/* SPDX-License-Identifier: MIT */
/* mem_lease.c - leases: grants, ends (release, expiry, revoke, delete) and the
 * bounded tombstones that let an ended lease answer with its reason. */
#include "mem_internal.h"

#include <string.h>

#define TOMB_MAX 100000
#define TOMB_AGE_MS (10 * 60 * 1000)

/* ---- lookup ---- */

/* Leases and tombstones are both found by id: `off` is where the id lies after the node. */
typedef struct {
    const char *id;
    size_t off;
} idkey_t;

static int id_eq(const enode_t *n, const void *key, size_t len)
{
    const idkey_t *k = key;
    const char *id = (const char *)n + k->off;
    return strlen(id) == len && memcmp(id, k->id, len) == 0;
}

static enode_t *find_id(const etab_t *t, size_t off, const char *id, size_t len)
{
    idkey_t k = {id, off};

    if (len >= ENGINE_LEASE_ID_MAX)
        return NULL;
    return etab_find(t, etab_hash(id, len, 1), id_eq, &k, len);
}

elease_t *mem__lease_find(mem_t *e, const char *id, size_t len)
{
    enode_t *n = find_id(&e->leases, offsetof(elease_t, id) - offsetof(elease_t, node), id, len);
    return n ? ECONTAINER(n, elease_t, node) : NULL;
}

etomb_t *mem__tomb_find(mem_t *e, const char *id, size_t len)
{
    enode_t *n = find_id(&e->tombs, offsetof(etomb_t, id) - offsetof(etomb_t, node), id, len);
    return n ? ECONTAINER(n, etomb_t, node) : NULL;
}

int mem__tomb_status(int reason)
{
    switch (reason) {
    case ETOMB_EXPIRED:
        return SEMA_EEXPIRED;
    case ETOMB_REVOKED:
        return SEMA_EREVOKED;
    case ETOMB_DELETED:
        return SEMA_ECANCELED;
    default:
        return SEMA_ESTALE;
    }
}

/* ---- tombstones: a ring, oldest first, bounded by count and age ---- */

static void tomb_pop_oldest(mem_t *e)
{
    etomb_t *t = e->tring[e->tring_head];

    etab_remove(&e->tombs, &t->node);
    sema__free(t);
    e->tring_head = (e->tring_head + 1) % e->tring_cap;
    e->tring_len--;
}

static int tomb_ring_grow(mem_t *e)
{
    size_t cap = e->tring_cap ? e->tring_cap * 2 : 1024;
    etomb_t **ring;

    if (cap > TOMB_MAX)
        cap = TOMB_MAX;
    ring = sema__malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return SEMA_ENOMEM;
    for (size_t i = 0; i < e->tring_len; i++)
        ring[i] = e->tring[(e->tring_head + i) % e->tring_cap];
    sema__free(e->tring);
    e->tring = ring;
    e->tring_cap = cap;
    e->tring_head = 0;
    return 0;
}

void mem__tomb_add(mem_t *e, const char *id, int reason)
{
    uint64_t now = mem__now(e);
    etomb_t *t;

    while (e->tring_len > 0 && e->tring[e->tring_head]->ended_mono + TOMB_AGE_MS < now)
        tomb_pop_oldest(e);
    if (e->tring_len == e->tring_cap && (e->tring_cap == TOMB_MAX || tomb_ring_grow(e) != 0)) {
        if (e->tring_len == 0)
            return;
        tomb_pop_oldest(e);
    }
    t = sema__malloc(sizeof(*t));
    if (t == NULL)
        return; /* the id then answers 404 instead of 410: no state is lost */
    t->ended_mono = now;
    t->reason = reason;
    memcpy(t->id, id, sizeof(t->id));
    t->node.hash = etab_hash(id, strlen(id), 1);
    etab_insert(&e->tombs, &t->node);
    e->tring[(e->tring_head + e->tring_len) % e->tring_cap] = t;
    e->tring_len++;
}

void mem__tombs_clear(mem_t *e)
{
    while (e->tring_len > 0)
        tomb_pop_oldest(e);
}

/* ---- grants and ends ---- */

/* Write a lease ahead; `created` when this is its grant. */
void mem__store_lease(mem_t *e, const elease_t *l, int created)
{
    store_lease_t rec;

    if (e->store == NULL)
        return;
    rec.id = l->id;
    rec.sem = l->sem->name;
    rec.weight = l->weight;
    rec.owner = l->owner;
    rec.principal = l->principal;
    rec.idem_key = l->idem ? l->idem->key : NULL;
    rec.fence = l->fence;
    rec.ttl_ms = l->ttl_ms;
    rec.acquired_at_ms = l->acquired_at_ms;
    rec.expires_at_ms = l->expires_at_ms;
    rec.is_lock = l->mode;
    rec.created = created;
    (void)store_put_lease(e->store, &rec);
    mem__mark_dirty(e);
}

static char *dup_str(const char *s)
{
    size_t n;
    char *d;

    if (s == NULL || s[0] == '\0')
        return NULL;
    n = strlen(s);
    d = sema__malloc(n + 1);
    if (d != NULL)
        memcpy(d, s, n + 1);
    return d;
}

/* Take `weight` units from `s` for a new lease (the caller checked they fit). Writes the
 * lease and the new fence ahead. Returns the lease, or NULL (nothing taken) on ENOMEM. */
elease_t *mem__grant(mem_t *e, esem_t *s, const engine_req_t *req, uint64_t weight,
                     uint64_t since_mono)
{
    elease_t *l = sema__calloc(1, sizeof(*l));
    uint64_t now = mem__now(e);
    int64_t ttl_ms = req->ttl_ms;
    const char *idem_key = req->idem_key;

    if (l == NULL)
        return NULL;
    l->owner = dup_str(req->owner);
    l->principal = dup_str(req->principal);
    if ((req->owner != NULL && req->owner[0] != '\0' && l->owner == NULL) ||
        (req->principal != NULL && req->principal[0] != '\0' && l->principal == NULL)) {
        sema__free(l->owner);
        sema__free(l->principal);
        sema__free(l);
        return NULL;
    }
    if (ttl_ms <= 0)
        ttl_ms = e->cfg.default_ttl_ms;
    l->hi.kind = EITEM_LEASE;
    l->hi.idx = EHEAP_NONE;
    l->hi.deadline = now + (uint64_t)ttl_ms;
    if (eheap_push(&e->heap, &l->hi) != 0) {
        sema__free(l->owner);
        sema__free(l->principal);
        sema__free(l);
        return NULL;
    }
    engine__lease_id(e->front, l->id);
    l->node.hash = etab_hash(l->id, strlen(l->id), 1);
    etab_insert(&e->leases, &l->node);
    l->sem = s;
    l->weight = weight;
    l->mode = mem__req_mode(req);
    l->mode = mem__req_mode(req);
    l->fence = ++e->fence_seq;
    s->fence = l->fence;
    l->ttl_ms = ttl_ms;
    l->acquired_at_ms = mem__wall_ms();
    l->expires_at_ms = l->acquired_at_ms + ttl_ms;
    l->acquired_mono = now;
    elist_push_back(&s->holders, &l->link);
    if (idem_key != NULL && idem_key[0] != '\0') {
        eidem_t *d = mem__idem_new(e, s, idem_key, strlen(idem_key));
        if (d != NULL) {
            d->lease = l;
            l->idem = d;
        }
    }
    s->available -= (int64_t)weight;
    s->held += weight;
    e->m->grants++;
    engine__hist_observe(&e->m->wait_s, (double)(now - since_mono) / 1000.0);
    mem__timer_rearm(e);
    mem__store_lease(e, l, 1);
    /* The fence reaches the store through the fence floor the commit writes; the row
     * changes only for a legacy value, which is stored as it is. */
    if (s->flags & ESEM_LEGACY)
        mem__store_sem(e, s);
    mem__event_lease(e, s, "granted", l);
    return l;
}

/* Unlink a lease from every index and free it, with no tombstone and no store write. */
void mem__lease_free(mem_t *e, elease_t *l)
{
    esem_t *s = l->sem;

    if (l->pending != NULL)
        l->pending->lease = NULL; /* its reply still names it; nothing to release later */
    if (l->ticket != NULL)
        l->ticket->lease = NULL; /* the state is being cleared: the ticket goes too */
    elist_remove(&l->link);
    s->available += (int64_t)l->weight;
    s->held -= l->weight;
    eheap_remove(&e->heap, &l->hi);
    etab_remove(&e->leases, &l->node);
    if (l->idem != NULL)
        mem__idem_free(e, l->idem);
    sema__free(l->owner);
    sema__free(l->principal);
    sema__free(l);
}

int mem__lease_allowed(const engine_req_t *req, const elease_t *l)
{
    if (req->principal == NULL || req->principal_admin)
        return 1;
    return l->principal != NULL && strcmp(l->principal, req->principal) == 0;
}

static const char *const end_event[] = {
    [ETOMB_RELEASED] = "released",
    [ETOMB_EXPIRED] = "expired",
    [ETOMB_REVOKED] = "revoked",
    [ETOMB_DELETED] = NULL,
};

/* End a lease: its units go back (the caller re-runs admission), a tombstone keeps why. */
void mem__lease_end(mem_t *e, elease_t *l, int reason)
{
    esem_t *s = l->sem;
    uint64_t held_ms = mem__now(e) - l->acquired_mono;

    engine__hist_observe(&e->m->hold_s, (double)held_ms / 1000.0);
    mem__est_hold(s, held_ms);
    if (l->ticket != NULL) {
        eticket_t *t = l->ticket;
        l->ticket = NULL;
        t->lease = NULL;
        mem__ticket_lease_gone(e, t, reason);
    }
    if (reason == ETOMB_RELEASED)
        e->m->releases++;
    else if (reason == ETOMB_EXPIRED)
        e->m->expirations++;
    else if (reason == ETOMB_REVOKED)
        e->m->revocations++;
    if (end_event[reason] != NULL)
        mem__event_lease(e, s, end_event[reason], l);
    mem__tomb_add(e, l->id, reason);
    if (e->store != NULL) {
        (void)store_del_lease(e->store, l->id);
        mem__mark_dirty(e);
    }
    mem__lease_free(e, l);
    if (reason != ETOMB_DELETED && (s->flags & ESEM_LEGACY))
        mem__store_sem(e, s);
}

/* The timer found the lease past its expiry: the units come back at once. */
void mem__lease_expire_due(mem_t *e, elease_t *l)
{
    esem_t *s = l->sem;

    mem__lease_end(e, l, ETOMB_EXPIRED);
    mem__admit(e, s);
    mem__maybe_free_lock(e, s);
}

/* Rebuild one stored lease (engine start or reload). Its expiry is never earlier than
 * now + its ttl, so no holder loses its lease to the restart. 0 or SEMA_ENOMEM. */
int mem__lease_load(mem_t *e, esem_t *s, const store_lease_t *rec)
{
    int64_t wall = mem__wall_ms();
    size_t idlen = strlen(rec->id);
    elease_t *l;

    /* A stored lease always comes back: skipping one would hand its units out twice. An id
     * this engine cannot hold means the store was not written by semad. */
    if (idlen == 0 || idlen >= sizeof(l->id) || mem__lease_find(e, rec->id, idlen))
        return SEMA_ECORRUPT;
    l = sema__calloc(1, sizeof(*l));
    if (l == NULL)
        return SEMA_ENOMEM;
    memcpy(l->id, rec->id, idlen + 1);
    l->owner = dup_str(rec->owner);
    l->principal = dup_str(rec->principal);
    l->sem = s;
    /* A lock's weight follows this run's --lock-readers. Stores before the mode was kept
     * wrote 1 for every lock lease and said exclusive by a weight above 1. */
    l->mode = rec->is_lock == ENGINE_MODE_EXCLUSIVE || (rec->is_lock && rec->weight > 1)
                  ? ENGINE_MODE_EXCLUSIVE
              : rec->is_lock ? ENGINE_MODE_SHARED
                             : 0;
    l->weight = l->mode == ENGINE_MODE_SHARED ? 1 : l->mode ? s->capacity : rec->weight;
    l->fence = rec->fence;
    l->ttl_ms = rec->ttl_ms > 0 ? rec->ttl_ms : e->cfg.default_ttl_ms;
    l->acquired_at_ms = rec->acquired_at_ms;
    l->expires_at_ms =
        rec->expires_at_ms > wall + l->ttl_ms ? rec->expires_at_ms : wall + l->ttl_ms;
    l->acquired_mono = mem__now(e);
    l->hi.kind = EITEM_LEASE;
    l->hi.idx = EHEAP_NONE;
    l->hi.deadline = mem__now(e) + (uint64_t)(l->expires_at_ms - wall);
    if (eheap_push(&e->heap, &l->hi) != 0) {
        sema__free(l->owner);
        sema__free(l->principal);
        sema__free(l);
        return SEMA_ENOMEM;
    }
    l->node.hash = etab_hash(l->id, idlen, 1);
    etab_insert(&e->leases, &l->node);
    elist_push_back(&s->holders, &l->link);
    s->held += l->weight;
    if (!(s->flags & ESEM_LEGACY))
        s->available -= (int64_t)l->weight; /* a legacy value is stored as it was */
    if (rec->fence > s->fence)
        s->fence = rec->fence;
    if (rec->fence > e->fence_seq)
        e->fence_seq = rec->fence;
    if (rec->idem_key != NULL && rec->idem_key[0] != '\0') {
        l->idem = mem__idem_new(e, s, rec->idem_key, strlen(rec->idem_key));
        if (l->idem != NULL)
            l->idem->lease = l;
    }
    return 0;
}
