/* SPDX-License-Identifier: MIT */
/* table.h - the engine's intrusive containers: a circular list, a chained hash table and a
 * deadline min-heap. Intrusive, so an object in them costs no extra allocation. Used by the
 * engine front (event groups) and the embedded back end (semaphores, leases, timers). */
#ifndef SEMAD_TABLE_H
#define SEMAD_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define ECONTAINER(ptr, type, field) ((type *)(void *)((char *)(ptr)-offsetof(type, field)))

/* ---- intrusive circular doubly linked list (O(1) insert/remove) ---- */
typedef struct elist {
    struct elist *prev, *next;
} elist_t;

static inline void elist_init(elist_t *l)
{
    l->prev = l->next = l;
}
static inline int elist_empty(const elist_t *l)
{
    return l->next == l;
}
static inline void elist_push_back(elist_t *head, elist_t *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}
static inline void elist_remove(elist_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* Move every element of `from` to the end of `to`; `from` becomes empty. */
static inline void elist_splice(elist_t *to, elist_t *from)
{
    if (elist_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    elist_init(from);
}

/* ---- intrusive chained hash table ---- */
typedef struct enode {
    struct enode *next;
    uint64_t hash;
} enode_t;

typedef struct {
    enode_t **slots;
    size_t mask; /* slots - 1 (power of two) */
    size_t count;
} etab_t;

typedef int (*etab_eq_fn)(const enode_t *n, const void *key, size_t len);

uint64_t etab_hash(const void *data, size_t len, uint64_t seed);
int etab_init(etab_t *t, size_t nslots);
void etab_destroy(etab_t *t);
enode_t *etab_find(const etab_t *t, uint64_t hash, etab_eq_fn eq, const void *key, size_t len);
void etab_insert(etab_t *t, enode_t *n); /* grows when it can; never fails */
void etab_remove(etab_t *t, enode_t *n);
/* Iterate: call fn for every node; fn may remove the node it is given. */
void etab_each(etab_t *t, void (*fn)(void *arg, enode_t *n), void *arg);

/* ---- min-heap of deadlines (lease expiry and waiter timeouts) under one uv_timer ---- */
enum { EHEAP_NONE = UINT32_MAX };
typedef struct {
    uint64_t deadline; /* uv_now() milliseconds (monotonic) */
    uint32_t idx;      /* position in the heap or EHEAP_NONE */
    uint8_t kind;      /* EITEM_* */
} eitem_t;
enum { EITEM_LEASE = 1, EITEM_WAITER = 2, EITEM_TICKET = 3, EITEM_TICK = 4, EITEM_RATE = 5 };

typedef struct {
    eitem_t **a;
    uint32_t n, cap;
} eheap_t;

int eheap_push(eheap_t *h, eitem_t *it); /* 0 or SEMA_ENOMEM */
void eheap_remove(eheap_t *h, eitem_t *it);
void eheap_update(eheap_t *h, eitem_t *it, uint64_t deadline);
static inline eitem_t *eheap_top(const eheap_t *h)
{
    return h->n ? h->a[0] : NULL;
}

#endif /* SEMAD_TABLE_H */
