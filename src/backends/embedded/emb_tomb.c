/* SPDX-License-Identifier: MIT */
/* emb_tomb.c - tombstones: why a lease or ticket id ended, kept for the most recent ids
 * (TOMB_MAX, TOMB_AGE_MS) in one array used as a ring, oldest first. One array rather than
 * an allocation per id: at a steady load the ring turns over every few seconds, and 100,000
 * small blocks freed and taken again in that order left the allocator's lists full of pieces
 * nobody asked for, so the heap grew by steps with nothing more in use (docs/operations.md,
 * "Memory and disk"). */
#include "backends/embedded/emb_internal.h"

#include <string.h>

#define TOMB_MAX 100000
#define TOMB_AGE_MS (10 * 60 * 1000)
#define TOMB_FIRST 1024 /* entries of the first array; it doubles up to TOMB_MAX */

emb_tomb_t *emb__tomb_find(emb_t *eb, const char *id, size_t len)
{
    enode_t *n =
        emb__id_find(&eb->tombs, offsetof(emb_tomb_t, id) - offsetof(emb_tomb_t, node), id, len);
    return n ? ECONTAINER(n, emb_tomb_t, node) : NULL;
}

be_msg_t emb__tomb_msg(int reason)
{
    static const be_msg_t msg[] = {
        [EMB_TOMB_RELEASED] = BE_MSG_LEASE_RELEASED,
        [EMB_TOMB_EXPIRED] = BE_MSG_LEASE_EXPIRED,
        [EMB_TOMB_REVOKED] = BE_MSG_LEASE_REVOKED,
        [EMB_TOMB_DELETED] = BE_MSG_LEASE_SEM_DELETED,
        [EMB_TOMB_TICKET_LEFT] = BE_MSG_TICKET_LEFT,
        [EMB_TOMB_TICKET_ABANDONED] = BE_MSG_TICKET_ABANDONED,
        [EMB_TOMB_TICKET_UNCOLLECTED] = BE_MSG_TICKET_UNCOLLECTED,
        [EMB_TOMB_TICKET_DONE] = BE_MSG_TICKET_DONE,
        [EMB_TOMB_TICKET_DELETED] = BE_MSG_TICKET_SEM_DELETED,
        [EMB_TOMB_TICKET_REFUSED] = BE_MSG_TICKET_REFUSED,
    };

    return reason > 0 && (size_t)reason < sizeof msg / sizeof msg[0] ? msg[reason]
                                                                     : BE_MSG_LEASE_RELEASED;
}

static void pop_oldest(emb_t *eb)
{
    etab_remove(&eb->tombs, &eb->tring[eb->tring_head].node);
    eb->tring_head = (eb->tring_head + 1) % eb->tring_cap;
    eb->tring_len--;
}

/* A larger array, the tombstones moved into it oldest first (their hash table nodes move
 * with them, so each is taken out of the table and put back). */
static int grow(emb_t *eb)
{
    size_t cap = eb->tring_cap ? eb->tring_cap * 2 : TOMB_FIRST;
    emb_tomb_t *ring;

    if (cap > TOMB_MAX)
        cap = TOMB_MAX;
    ring = sema__malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return SEMA_ENOMEM;
    for (size_t i = 0; i < eb->tring_len; i++) {
        emb_tomb_t *t = &eb->tring[(eb->tring_head + i) % eb->tring_cap];
        etab_remove(&eb->tombs, &t->node);
        ring[i] = *t;
        etab_insert(&eb->tombs, &ring[i].node);
    }
    sema__free(eb->tring);
    eb->tring = ring;
    eb->tring_cap = cap;
    eb->tring_head = 0;
    return 0;
}

void emb__tomb_add(emb_t *eb, const char *id, int reason)
{
    uint64_t now = emb__now(eb);
    emb_tomb_t *t;

    while (eb->tring_len > 0 && eb->tring[eb->tring_head].ended_mono + TOMB_AGE_MS < now)
        pop_oldest(eb);
    if (eb->tring_len == eb->tring_cap && (eb->tring_cap == TOMB_MAX || grow(eb) != 0)) {
        if (eb->tring_len == 0)
            return; /* no memory for a first array: the id then answers 404 instead of 410 */
        pop_oldest(eb);
    }
    t = &eb->tring[(eb->tring_head + eb->tring_len) % eb->tring_cap];
    t->ended_mono = now;
    t->reason = reason;
    memcpy(t->id, id, sizeof(t->id));
    t->node.hash = etab_hash(id, strlen(id), 1);
    etab_insert(&eb->tombs, &t->node);
    eb->tring_len++;
}

void emb__tombs_clear(emb_t *eb)
{
    while (eb->tring_len > 0)
        pop_oldest(eb);
}
