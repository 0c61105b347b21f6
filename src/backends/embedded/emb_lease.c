/* SPDX-License-Identifier: MIT */
/* emb_lease.c - leases: grants and ends (release, expiry, revoke, delete); an ended lease
 * leaves a tombstone (emb_tomb.c) so its id answers with the reason. */
#include "backends/embedded/emb_internal.h"

#include <string.h>

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

enode_t *emb__id_find(const etab_t *t, size_t off, const char *id, size_t len)
{
    idkey_t k = {id, off};

    if (len >= ENGINE_LEASE_ID_MAX)
        return NULL;
    return etab_find(t, etab_hash(id, len, 1), id_eq, &k, len);
}

emb_lease_t *emb__lease_find(emb_t *eb, const char *id, size_t len)
{
    enode_t *n =
        emb__id_find(&eb->leases, offsetof(emb_lease_t, id) - offsetof(emb_lease_t, node), id, len);
    return n ? ECONTAINER(n, emb_lease_t, node) : NULL;
}

/* ---- grants and ends ---- */

/* Write a lease ahead (with its parts); `created` when this is its grant. */
void emb__store_lease(emb_t *eb, const emb_lease_t *l, int created)
{
    store_part_t parts[ENGINE_PARTS_MAX];
    store_lease_t rec;
    size_t n = 0;

    if (eb->store == NULL)
        return;
    for (const emb_lease_t *p = emb__lease_next(l); p != NULL && n < ENGINE_PARTS_MAX;
         p = emb__lease_next(p))
        parts[n++] = (store_part_t){p->sem->name, p->weight, p->fence};
    rec.parts = parts;
    rec.nparts = n;
    rec.tenant = emb__tenant_name(emb__lease_tenant(l), &(size_t){0});
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
    (void)store_put_lease(eb->store, &rec);
    emb__mark_dirty(eb);
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

static void lease_free_raw(emb_lease_t *l)
{
    if (emb__lease_main(l) == NULL) { /* a part borrows the lease's strings */
        sema__free(l->owner);
        sema__free(l->principal);
    }
    if (l->x != NULL)
        sema__free(l->x);
    sema__free(l);
}

emb_lease_x_t *emb__lease_x(emb_lease_t *l)
{
    if (l->x == NULL)
        l->x = sema__calloc(1, sizeof(*l->x));
    return l->x;
}

/* A further part of lease l (weight units, not yet taken): the lease's id, times and strings.
 * NULL when out of memory. */
static emb_lease_t *part_new(emb_lease_t *l, uint64_t weight)
{
    emb_lease_t *p = sema__calloc(1, sizeof(*p));

    if (p == NULL || emb__lease_x(p) == NULL) {
        sema__free(p);
        return NULL;
    }
    p->x->main = l;
    p->weight = weight;
    p->hi.idx = EHEAP_NONE;
    memcpy(p->id, l->id, sizeof p->id);
    p->owner = l->owner;
    p->principal = l->principal;
    p->ttl_ms = l->ttl_ms;
    p->acquired_at_ms = l->acquired_at_ms;
    p->expires_at_ms = l->expires_at_ms;
    p->acquired_mono = l->acquired_mono;
    return p;
}

/* Take the units of a part on s (held by its tenant there). */
static int take_units(emb_t *eb, emb_sem_t *s, emb_lease_t *l, const char *tenant)
{
    if (s->lim != NULL && emb__tenant_hold(eb, s, l, tenant) != 0)
        return SEMA_ENOMEM;
    l->sem = s;
    l->fence = ++eb->fence_seq;
    s->fence = l->fence;
    s->grants++;
    elist_push_back(&s->holders, &l->link);
    s->available -= (int64_t)l->weight;
    s->held += l->weight;
    return 0;
}

/* Take `weight` units from `s` for a new lease (the caller checked they fit), not yet written
 * ahead nor published. NULL (nothing taken) on ENOMEM. */
static emb_lease_t *lease_make(emb_t *eb, emb_sem_t *s, const engine_req_t *req, uint64_t weight,
                               const char *tenant, const char *idem_key)
{
    emb_lease_t *l = sema__calloc(1, sizeof(*l));
    int64_t wall = emb__wall_ms();
    int64_t ttl_ms = req->ttl_ms;

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
        ttl_ms = eb->cfg.default_ttl_ms;
    l->hi.kind = EITEM_LEASE;
    l->hi.idx = EHEAP_NONE;
    l->hi.deadline = emb__lease_deadline(ttl_ms);
    l->weight = weight;
    if (eheap_push(&eb->heap, &l->hi) != 0) {
        lease_free_raw(l);
        return NULL;
    }
    if (take_units(eb, s, l, tenant) != 0) {
        eheap_remove(&eb->heap, &l->hi);
        lease_free_raw(l);
        return NULL;
    }
    engine__lease_id(eb->front, l->id);
    l->node.hash = etab_hash(l->id, strlen(l->id), 1);
    etab_insert(&eb->leases, &l->node);
    l->mode = emb__req_mode(req);
    l->ttl_ms = ttl_ms;
    l->acquired_at_ms = wall;
    l->expires_at_ms = wall + ttl_ms;
    l->acquired_mono = emb__now(eb);
    if (idem_key != NULL && idem_key[0] != '\0') {
        emb_idem_t *d = emb__idem_new(eb, req->op == ENGINE_ACQUIRE_MULTI ? NULL : s, idem_key,
                                      strlen(idem_key));
        if (d != NULL) {
            d->lease = l;
            l->idem = d;
        }
    }
    return l;
}

/* The lease is granted: counted, written ahead, published on each of its semaphores. */
static void lease_publish(emb_t *eb, emb_lease_t *l, uint64_t since_mono)
{
    eb->m->grants++;
    engine__hist_observe(&eb->m->wait_s, (double)(l->acquired_mono - since_mono) / 1000.0);
    emb__timer_rearm(eb);
    emb__store_lease(eb, l, 1);
    for (emb_lease_t *p = l; p != NULL; p = emb__lease_next(p)) {
        /* The fence reaches the store through the fence floor the commit writes; the row
         * changes only for a legacy value, which is stored as it is. */
        if (p->sem->flags & EMB_SEM_LEGACY)
            emb__store_sem(eb, p->sem);
        emb__event_lease(eb, p->sem, "granted", p);
    }
}

/* A further part of lease l on s: the lease's id, times and strings, its own units and fence. */
static emb_lease_t *part_make(emb_t *eb, emb_lease_t *l, emb_sem_t *s, uint64_t weight,
                              const char *tenant)
{
    emb_lease_t *p = part_new(l, weight);

    if (p != NULL && take_units(eb, s, p, tenant) != 0) {
        lease_free_raw(p);
        return NULL;
    }
    return p;
}

emb_lease_t *emb__grant_multi(emb_t *eb, emb_sem_t **sems, const uint64_t *weights, size_t n,
                              const engine_req_t *req, const char *tenant, uint64_t since_mono)
{
    emb_lease_t *l = lease_make(eb, sems[0], req, weights[0], tenant, req->idem_key);
    emb_lease_t **tail;

    if (l == NULL)
        return NULL;
    if (n > 1 && emb__lease_x(l) == NULL) {
        emb__lease_free(eb, l);
        return NULL;
    }
    tail = n > 1 ? &l->x->next_part : NULL;
    for (size_t i = 1; i < n; i++) {
        emb_lease_t *p = part_make(eb, l, sems[i], weights[i], tenant);
        if (p == NULL) {
            emb__lease_free(eb, l); /* and the parts made so far */
            return NULL;
        }
        *tail = p;
        tail = &p->x->next_part;
    }
    lease_publish(eb, l, since_mono);
    return l;
}

/* Take `weight` units from `s` for a new lease (the caller checked they fit). Writes the
 * lease and the new fence ahead. Returns the lease, or NULL (nothing taken) on ENOMEM. */
emb_lease_t *emb__grant(emb_t *eb, emb_sem_t *s, const engine_req_t *req, uint64_t weight,
                        uint64_t since_mono)
{
    return emb__grant_multi(eb, &s, &weight, 1, req, req->tenant, since_mono);
}

/* Give back the units of one part. */
static void give_units(emb_t *eb, emb_lease_t *l)
{
    emb_sem_t *s = l->sem;

    if (l->x != NULL)
        emb__tenant_unhold(eb, l);
    elist_remove(&l->link);
    s->available += (int64_t)l->weight;
    s->held -= l->weight;
}

/* Unlink a lease (with its parts) from every index and free it, with no tombstone and no
 * store write. */
void emb__lease_free(emb_t *eb, emb_lease_t *l)
{
    while (emb__lease_next(l) != NULL) {
        emb_lease_t *p = l->x->next_part;
        l->x->next_part = emb__lease_next(p);
        give_units(eb, p);
        lease_free_raw(p);
    }
    if (l->pending != NULL)
        l->pending->lease = NULL; /* its reply still names it; nothing to release later */
    if (l->ticket != NULL)
        l->ticket->lease = NULL; /* the state is being cleared: the ticket goes too */
    give_units(eb, l);
    eheap_remove(&eb->heap, &l->hi);
    etab_remove(&eb->leases, &l->node);
    if (l->idem != NULL)
        emb__idem_free(eb, l->idem);
    lease_free_raw(l);
}

int emb__lease_allowed(const engine_req_t *req, const emb_lease_t *l)
{
    if (req->principal == NULL || req->principal_admin)
        return 1;
    return l->principal != NULL && strcmp(l->principal, req->principal) == 0;
}

static const char *const end_event[] = {
    [EMB_TOMB_RELEASED] = "released",
    [EMB_TOMB_EXPIRED] = "expired",
    [EMB_TOMB_REVOKED] = "revoked",
    [EMB_TOMB_DELETED] = NULL,
};

/* The event of a lease's end on s: a lease on several semaphores that one of them voided
 * (deleted) is revoked on the others. */
static const char *end_type(int reason, const emb_sem_t *s)
{
    if (reason == EMB_TOMB_DELETED)
        return s->flags & EMB_SEM_DELETED ? NULL : "revoked";
    return end_event[reason];
}

/* End a lease: its units go back (the caller re-runs admission), a tombstone keeps why. */
void emb__lease_end(emb_t *eb, emb_lease_t *l, int reason)
{
    emb_sem_t *s = l->sem;
    uint64_t held_ms = emb__now(eb) - l->acquired_mono;

    engine__hist_observe(&eb->m->hold_s, (double)held_ms / 1000.0);
    for (emb_lease_t *p = emb__lease_next(l); p != NULL; p = emb__lease_next(p)) {
        emb__est_hold(p->sem, held_ms);
        if (end_type(reason, p->sem) != NULL)
            emb__event_lease(eb, p->sem, end_type(reason, p->sem), p);
        if (reason != EMB_TOMB_DELETED && (p->sem->flags & EMB_SEM_LEGACY))
            emb__store_sem(eb, p->sem);
    }
    emb__est_hold(s, held_ms);
    if (l->ticket != NULL) {
        emb_ticket_t *t = l->ticket;
        l->ticket = NULL;
        t->lease = NULL;
        emb__ticket_lease_gone(eb, t, reason);
    }
    if (reason == EMB_TOMB_RELEASED)
        eb->m->releases++;
    else if (reason == EMB_TOMB_EXPIRED)
        eb->m->expirations++;
    else if (reason == EMB_TOMB_REVOKED)
        eb->m->revocations++;
    if (end_type(reason, s) != NULL)
        emb__event_lease(eb, s, end_type(reason, s), l);
    emb__tomb_add(eb, l->id, reason);
    if (eb->store != NULL) {
        (void)store_del_lease(eb->store, l->id);
        emb__mark_dirty(eb);
    }
    emb__lease_free(eb, l);
    if (reason != EMB_TOMB_DELETED && (s->flags & EMB_SEM_LEGACY))
        emb__store_sem(eb, s);
}

void emb__lease_end_admit(emb_t *eb, emb_lease_t *l, int reason)
{
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    size_t n = emb__lease_sems(l, sems);

    emb__lease_end(eb, l, reason);
    emb__admit_all(eb, sems, n);
}

/* The timer found the lease past its expiry: the units come back at once. */
void emb__lease_expire_due(emb_t *eb, emb_lease_t *l)
{
    emb__lease_end_admit(eb, l, EMB_TOMB_EXPIRED);
}

/* Hold a loaded part's units on s: counted for its tenant, its fence kept. */
static int load_units(emb_t *eb, emb_sem_t *s, emb_lease_t *l, const char *tenant, uint64_t fence)
{
    if (tenant != NULL && emb__lim_ensure(eb, s) != 0)
        return SEMA_ENOMEM;
    if (emb__tenant_hold(eb, s, l, tenant) != 0)
        return SEMA_ENOMEM;
    l->sem = s;
    l->fence = fence;
    elist_push_back(&s->holders, &l->link);
    s->held += l->weight;
    if (!(s->flags & EMB_SEM_LEGACY))
        s->available -= (int64_t)l->weight; /* a legacy value is stored as it was */
    if (fence > s->fence)
        s->fence = fence;
    if (fence > eb->fence_seq)
        eb->fence_seq = fence;
    return 0;
}

/* The further parts of a loaded lease, each on its semaphore. */
static int load_parts(emb_t *eb, emb_lease_t *l, const store_lease_t *rec, emb_sem_t **sems)
{
    emb_lease_t **tail;

    if (rec->nparts == 0)
        return 0;
    if (emb__lease_x(l) == NULL)
        return SEMA_ENOMEM;
    tail = &l->x->next_part;
    for (size_t i = 0; i < rec->nparts; i++) {
        emb_lease_t *p = part_new(l, rec->parts[i].weight);
        if (p == NULL)
            return SEMA_ENOMEM;
        if (load_units(eb, sems[i], p, rec->tenant, rec->parts[i].seq) != 0) {
            lease_free_raw(p);
            return SEMA_ENOMEM;
        }
        *tail = p;
        tail = &p->x->next_part;
    }
    return 0;
}

/* Rebuild one stored lease (engine start or reload). Its expiry is never earlier than
 * now + its ttl, so no holder loses its lease to the restart. 0 or SEMA_ENOMEM. A lease on
 * several semaphores one of which is gone was voided with it: it is not loaded. */
int emb__lease_load(emb_t *eb, emb_sem_t *s, const store_lease_t *rec)
{
    int64_t wall = emb__wall_ms();
    size_t idlen = strlen(rec->id);
    emb_sem_t *sems[STORE_PARTS_MAX];
    emb_lease_t *l;

    /* A stored lease always comes back: skipping one would hand its units out twice. An id
     * this engine cannot hold means the store was not written by semad. */
    if (idlen == 0 || idlen >= sizeof(l->id) || emb__lease_find(eb, rec->id, idlen) ||
        rec->nparts > STORE_PARTS_MAX || (rec->nparts > 0 && rec->is_lock))
        return SEMA_ECORRUPT;
    for (size_t i = 0; i < rec->nparts; i++) {
        const char *name = rec->parts[i].sem;
        sems[i] = name != NULL ? emb__sem_find(eb, name, strlen(name)) : NULL;
        if (sems[i] == NULL || sems[i] == s || rec->parts[i].weight == 0)
            return 0;
    }
    l = sema__calloc(1, sizeof(*l));
    if (l == NULL)
        return SEMA_ENOMEM;
    memcpy(l->id, rec->id, idlen + 1);
    l->owner = dup_str(rec->owner);
    l->principal = dup_str(rec->principal);
    /* A lock's weight follows this run's --lock-readers. Stores before the mode was kept
     * wrote 1 for every lock lease and said exclusive by a weight above 1. */
    l->mode = rec->is_lock == ENGINE_MODE_EXCLUSIVE || (rec->is_lock && rec->weight > 1)
                  ? ENGINE_MODE_EXCLUSIVE
              : rec->is_lock ? ENGINE_MODE_SHARED
                             : 0;
    l->weight = l->mode == ENGINE_MODE_SHARED ? 1 : l->mode ? s->capacity : rec->weight;
    l->ttl_ms = rec->ttl_ms > 0 ? rec->ttl_ms : eb->cfg.default_ttl_ms;
    l->acquired_at_ms = rec->acquired_at_ms;
    l->expires_at_ms =
        rec->expires_at_ms > wall + l->ttl_ms ? rec->expires_at_ms : wall + l->ttl_ms;
    l->acquired_mono = emb__now(eb);
    l->hi.kind = EITEM_LEASE;
    l->hi.idx = EHEAP_NONE;
    l->hi.deadline = emb__lease_deadline(l->expires_at_ms - wall);
    if (eheap_push(&eb->heap, &l->hi) != 0) {
        lease_free_raw(l);
        return SEMA_ENOMEM;
    }
    l->node.hash = etab_hash(l->id, idlen, 1);
    etab_insert(&eb->leases, &l->node);
    elist_init(&l->link);
    if (load_units(eb, s, l, rec->tenant, rec->fence) != 0 || load_parts(eb, l, rec, sems) != 0) {
        if (l->sem == NULL) { /* its own units were not taken */
            l->sem = s;
            elist_push_back(&s->holders, &l->link);
            s->held += l->weight;
            s->available -= (int64_t)l->weight;
        }
        emb__lease_free(eb, l);
        return SEMA_ENOMEM;
    }
    if (rec->idem_key != NULL && rec->idem_key[0] != '\0') {
        l->idem =
            emb__idem_new(eb, rec->nparts > 0 ? NULL : s, rec->idem_key, strlen(rec->idem_key));
        if (l->idem != NULL)
            l->idem->lease = l;
    }
    return 0;
}
