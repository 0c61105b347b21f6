/* SPDX-License-Identifier: MIT */
/* mem_treap.c - the semaphores ordered by name, for listing by prefix and cursor: a treap
 * whose priority is the name's hash, so it needs no balancing state. */
#include "mem_internal.h"

#include <string.h>

/* ---- treap of semaphores by name (priority = the name's hash) ---- */

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static esem_t *treap_ins(esem_t *root, esem_t *n)
{
    if (root == NULL)
        return n;
    if (name_cmp(n->name, n->name_len, root->name, root->name_len) < 0) {
        root->tl = treap_ins(root->tl, n);
        if (root->tl->node.hash > root->node.hash) {
            esem_t *l = root->tl;
            root->tl = l->tr;
            l->tr = root;
            return l;
        }
    } else {
        root->tr = treap_ins(root->tr, n);
        if (root->tr->node.hash > root->node.hash) {
            esem_t *r = root->tr;
            root->tr = r->tl;
            r->tl = root;
            return r;
        }
    }
    return root;
}

static esem_t *treap_merge(esem_t *a, esem_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (a->node.hash > b->node.hash) {
        a->tr = treap_merge(a->tr, b);
        return a;
    }
    b->tl = treap_merge(a, b->tl);
    return b;
}

static esem_t *treap_del(esem_t *root, esem_t *n)
{
    if (root == NULL)
        return NULL;
    if (root == n)
        return treap_merge(n->tl, n->tr);
    if (name_cmp(n->name, n->name_len, root->name, root->name_len) < 0)
        root->tl = treap_del(root->tl, n);
    else
        root->tr = treap_del(root->tr, n);
    return root;
}

void mem__treap_insert(mem_t *e, esem_t *s)
{
    s->tl = s->tr = NULL;
    e->root = treap_ins(e->root, s);
}

void mem__treap_remove(mem_t *e, esem_t *s)
{
    e->root = treap_del(e->root, s);
    s->tl = s->tr = NULL;
}

esem_t *mem__treap_after(mem_t *e, const char *key, size_t len, int inclusive)
{
    esem_t *best = NULL;

    for (esem_t *x = e->root; x != NULL;) {
        int c = name_cmp(x->name, x->name_len, key, len);
        if (c > 0 || (c == 0 && inclusive)) {
            best = x;
            x = x->tl;
        } else {
            x = x->tr;
        }
    }
    return best;
}
