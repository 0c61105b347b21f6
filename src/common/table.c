/* SPDX-License-Identifier: MIT */
/* table.c - the engine's intrusive containers: a chained hash table and a deadline
 * min-heap (table.h). */
#include "common/table.h"

#include "common/alloc.h"
#include "sema/error.h"

#include <string.h>

/* ---- hashing ---- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t etab_hash(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ mix64(w)) * 0x100000001b3ULL;
    }
    for (; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return mix64(h ^ len);
}

/* ---- hash table ---- */

int etab_init(etab_t *t, size_t nslots)
{
    size_t n = 16;

    while (n < nslots)
        n <<= 1;
    t->slots = sema__calloc(n, sizeof(*t->slots));
    if (t->slots == NULL)
        return SEMA_ENOMEM;
    t->mask = n - 1;
    t->count = 0;
    return 0;
}

void etab_destroy(etab_t *t)
{
    sema__free(t->slots);
    t->slots = NULL;
    t->mask = 0;
    t->count = 0;
}

enode_t *etab_find(const etab_t *t, uint64_t hash, etab_eq_fn eq, const void *key, size_t len)
{
    for (enode_t *n = t->slots[hash & t->mask]; n != NULL; n = n->next)
        if (n->hash == hash && eq(n, key, len))
            return n;
    return NULL;
}

static void tab_grow(etab_t *t)
{
    size_t n = (t->mask + 1) * 2;
    enode_t **slots = sema__calloc(n, sizeof(*slots));

    if (slots == NULL)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i <= t->mask; i++) {
        enode_t *x = t->slots[i], *next;
        for (; x != NULL; x = next) {
            next = x->next;
            x->next = slots[x->hash & (n - 1)];
            slots[x->hash & (n - 1)] = x;
        }
    }
    sema__free(t->slots);
    t->slots = slots;
    t->mask = n - 1;
}

void etab_insert(etab_t *t, enode_t *n)
{
    if (t->count >= t->mask + 1)
        tab_grow(t);
    n->next = t->slots[n->hash & t->mask];
    t->slots[n->hash & t->mask] = n;
    t->count++;
}

void etab_remove(etab_t *t, enode_t *n)
{
    enode_t **pp = &t->slots[n->hash & t->mask];

    while (*pp != NULL && *pp != n)
        pp = &(*pp)->next;
    SEMA__CHECK(*pp == n);
    *pp = n->next;
    n->next = NULL;
    t->count--;
}

void etab_each(etab_t *t, void (*fn)(void *arg, enode_t *n), void *arg)
{
    if (t->slots == NULL)
        return;
    for (size_t i = 0; i <= t->mask; i++) {
        enode_t *x = t->slots[i], *next;
        for (; x != NULL; x = next) {
            next = x->next;
            fn(arg, x);
        }
    }
}

/* ---- min-heap ---- */

static void heap_set(eheap_t *h, uint32_t i, eitem_t *it)
{
    h->a[i] = it;
    it->idx = i;
}

static void heap_up(eheap_t *h, uint32_t i)
{
    eitem_t *it = h->a[i];

    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (h->a[p]->deadline <= it->deadline)
            break;
        heap_set(h, i, h->a[p]);
        i = p;
    }
    heap_set(h, i, it);
}

static void heap_down(eheap_t *h, uint32_t i)
{
    eitem_t *it = h->a[i];

    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->a[c + 1]->deadline < h->a[c]->deadline)
            c++;
        if (h->a[c]->deadline >= it->deadline)
            break;
        heap_set(h, i, h->a[c]);
        i = c;
    }
    heap_set(h, i, it);
}

int eheap_push(eheap_t *h, eitem_t *it)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 64;
        eitem_t **a = sema__realloc(h->a, (size_t)cap * sizeof(*a));
        if (a == NULL)
            return SEMA_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    h->a[h->n] = it;
    it->idx = h->n++;
    heap_up(h, it->idx);
    return 0;
}

void eheap_remove(eheap_t *h, eitem_t *it)
{
    uint32_t i = it->idx;

    if (i == EHEAP_NONE)
        return;
    it->idx = EHEAP_NONE;
    h->n--;
    if (i == h->n)
        return;
    heap_set(h, i, h->a[h->n]);
    heap_up(h, i);
    heap_down(h, h->a[i]->idx);
}

void eheap_update(eheap_t *h, eitem_t *it, uint64_t deadline)
{
    it->deadline = deadline;
    if (it->idx == EHEAP_NONE)
        return;
    heap_up(h, it->idx);
    heap_down(h, it->idx);
}
