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

/* Write a lease ahead; `created` when this is its grant. */
void emb__store_lease(emb_t *eb, const emb_lease_t *l, int created)
{
    store_lease_t rec;

    if (eb->store == NULL)
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

/* Take `weight` units from `s` for a new lease (the caller checked they fit). Writes the
 * lease and the new fence ahead. Returns the lease, or NULL (nothing taken) on ENOMEM. */
emb_lease_t *emb__grant(emb_t *eb, emb_sem_t *s, const engine_req_t *req, uint64_t weight,
                        uint64_t since_mono)
{
    emb_lease_t *l = sema__calloc(1, sizeof(*l));
    uint64_t now = emb__now(eb);
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
        ttl_ms = eb->cfg.default_ttl_ms;
    l->hi.kind = EITEM_LEASE;
    l->hi.idx = EHEAP_NONE;
    l->hi.deadline = now + (uint64_t)ttl_ms;
    if (eheap_push(&eb->heap, &l->hi) != 0) {
        sema__free(l->owner);
        sema__free(l->principal);
        sema__free(l);
        return NULL;
    }
    engine__lease_id(eb->front, l->id);
    l->node.hash = etab_hash(l->id, strlen(l->id), 1);
    etab_insert(&eb->leases, &l->node);
    l->sem = s;
    l->weight = weight;
    l->mode = emb__req_mode(req);
    l->mode = emb__req_mode(req);
    l->fence = ++eb->fence_seq;
    s->fence = l->fence;
    s->grants++;
    l->ttl_ms = ttl_ms;
    l->acquired_at_ms = emb__wall_ms();
    l->expires_at_ms = l->acquired_at_ms + ttl_ms;
    l->acquired_mono = now;
    elist_push_back(&s->holders, &l->link);
    if (idem_key != NULL && idem_key[0] != '\0') {
        emb_idem_t *d = emb__idem_new(eb, s, idem_key, strlen(idem_key));
        if (d != NULL) {
            d->lease = l;
            l->idem = d;
        }
    }
    s->available -= (int64_t)weight;
    s->held += weight;
    eb->m->grants++;
    engine__hist_observe(&eb->m->wait_s, (double)(now - since_mono) / 1000.0);
    emb__timer_rearm(eb);
    emb__store_lease(eb, l, 1);
    /* The fence reaches the store through the fence floor the commit writes; the row
     * changes only for a legacy value, which is stored as it is. */
    if (s->flags & EMB_SEM_LEGACY)
        emb__store_sem(eb, s);
    emb__event_lease(eb, s, "granted", l);
    return l;
}

/* Unlink a lease from every index and free it, with no tombstone and no store write. */
void emb__lease_free(emb_t *eb, emb_lease_t *l)
{
    emb_sem_t *s = l->sem;

    if (l->pending != NULL)
        l->pending->lease = NULL; /* its reply still names it; nothing to release later */
    if (l->ticket != NULL)
        l->ticket->lease = NULL; /* the state is being cleared: the ticket goes too */
    elist_remove(&l->link);
    s->available += (int64_t)l->weight;
    s->held -= l->weight;
    eheap_remove(&eb->heap, &l->hi);
    etab_remove(&eb->leases, &l->node);
    if (l->idem != NULL)
        emb__idem_free(eb, l->idem);
    sema__free(l->owner);
    sema__free(l->principal);
    sema__free(l);
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

/* End a lease: its units go back (the caller re-runs admission), a tombstone keeps why. */
void emb__lease_end(emb_t *eb, emb_lease_t *l, int reason)
{
    emb_sem_t *s = l->sem;
    uint64_t held_ms = emb__now(eb) - l->acquired_mono;

    engine__hist_observe(&eb->m->hold_s, (double)held_ms / 1000.0);
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
    if (end_event[reason] != NULL)
        emb__event_lease(eb, s, end_event[reason], l);
    emb__tomb_add(eb, l->id, reason);
    if (eb->store != NULL) {
        (void)store_del_lease(eb->store, l->id);
        emb__mark_dirty(eb);
    }
    emb__lease_free(eb, l);
    if (reason != EMB_TOMB_DELETED && (s->flags & EMB_SEM_LEGACY))
        emb__store_sem(eb, s);
}

/* The timer found the lease past its expiry: the units come back at once. */
void emb__lease_expire_due(emb_t *eb, emb_lease_t *l)
{
    emb_sem_t *s = l->sem;

    emb__lease_end(eb, l, EMB_TOMB_EXPIRED);
    emb__admit(eb, s);
    emb__maybe_free_lock(eb, s);
}

/* Rebuild one stored lease (engine start or reload). Its expiry is never earlier than
 * now + its ttl, so no holder loses its lease to the restart. 0 or SEMA_ENOMEM. */
int emb__lease_load(emb_t *eb, emb_sem_t *s, const store_lease_t *rec)
{
    int64_t wall = emb__wall_ms();
    size_t idlen = strlen(rec->id);
    emb_lease_t *l;

    /* A stored lease always comes back: skipping one would hand its units out twice. An id
     * this engine cannot hold means the store was not written by semad. */
    if (idlen == 0 || idlen >= sizeof(l->id) || emb__lease_find(eb, rec->id, idlen))
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
    l->ttl_ms = rec->ttl_ms > 0 ? rec->ttl_ms : eb->cfg.default_ttl_ms;
    l->acquired_at_ms = rec->acquired_at_ms;
    l->expires_at_ms =
        rec->expires_at_ms > wall + l->ttl_ms ? rec->expires_at_ms : wall + l->ttl_ms;
    l->acquired_mono = emb__now(eb);
    l->hi.kind = EITEM_LEASE;
    l->hi.idx = EHEAP_NONE;
    l->hi.deadline = emb__now(eb) + (uint64_t)(l->expires_at_ms - wall);
    if (eheap_push(&eb->heap, &l->hi) != 0) {
        sema__free(l->owner);
        sema__free(l->principal);
        sema__free(l);
        return SEMA_ENOMEM;
    }
    l->node.hash = etab_hash(l->id, idlen, 1);
    etab_insert(&eb->leases, &l->node);
    elist_push_back(&s->holders, &l->link);
    s->held += l->weight;
    if (!(s->flags & EMB_SEM_LEGACY))
        s->available -= (int64_t)l->weight; /* a legacy value is stored as it was */
    if (rec->fence > s->fence)
        s->fence = rec->fence;
    if (rec->fence > eb->fence_seq)
        eb->fence_seq = rec->fence;
    if (rec->idem_key != NULL && rec->idem_key[0] != '\0') {
        l->idem = emb__idem_new(eb, s, rec->idem_key, strlen(rec->idem_key));
        if (l->idem != NULL)
            l->idem->lease = l;
    }
    return 0;
}
