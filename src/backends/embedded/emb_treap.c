/* SPDX-License-Identifier: MIT */
/* emb_treap.c - the back end's treaps (priorities are hashes, so they need no balancing
 * state): the semaphores, and the lock keys, ordered by name, for listing by prefix and
 * cursor; and each semaphore's queue ordered by place with subtree counts, for tickets'
 * positions. */
#include "backends/embedded/emb_internal.h"

#include <string.h>

/* ---- treap of semaphores by name (priority = the name's hash) ---- */

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static emb_sem_t *treap_ins(emb_sem_t *root, emb_sem_t *n)
{
    if (root == NULL)
        return n;
    if (name_cmp(n->name, n->name_len, root->name, root->name_len) < 0) {
        root->tl = treap_ins(root->tl, n);
        if (root->tl->node.hash > root->node.hash) {
            emb_sem_t *l = root->tl;
            root->tl = l->tr;
            l->tr = root;
            return l;
        }
    } else {
        root->tr = treap_ins(root->tr, n);
        if (root->tr->node.hash > root->node.hash) {
            emb_sem_t *r = root->tr;
            root->tr = r->tl;
            r->tl = root;
            return r;
        }
    }
    return root;
}

static emb_sem_t *treap_merge(emb_sem_t *a, emb_sem_t *b)
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

static emb_sem_t *treap_del(emb_sem_t *root, emb_sem_t *n)
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

/* The treap `s` is in: the semaphores', or the lock keys'. */
static emb_sem_t **root_of(emb_t *eb, const emb_sem_t *s)
{
    return (s->flags & EMB_SEM_LOCK) ? &eb->lock_root : &eb->root;
}

void emb__treap_insert(emb_t *eb, emb_sem_t *s)
{
    emb_sem_t **root = root_of(eb, s);

    s->tl = s->tr = NULL;
    *root = treap_ins(*root, s);
}

void emb__treap_remove(emb_t *eb, emb_sem_t *s)
{
    emb_sem_t **root = root_of(eb, s);

    *root = treap_del(*root, s);
    s->tl = s->tr = NULL;
}

emb_sem_t *emb__treap_after(emb_sem_t *root, const char *key, size_t len, int inclusive)
{
    emb_sem_t *best = NULL;

    for (emb_sem_t *x = root; x != NULL;) {
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

/* ---- the queue by place, with subtree counts and weights ----
 *
 * Every parked waiter of a semaphore (acquire, wait-idle, ticket) is also in a treap keyed by
 * its place in line (oseq, increasing), each node holding its subtree's size and weight, so
 * a ticket's position and the weight ahead of it are read in O(log n) however many waiters
 * before it have left; nothing walks the queue. */

static uint32_t osize(const emb_req_t *x)
{
    return x != NULL ? x->osize : 0;
}

static uint64_t owsum(const emb_req_t *x)
{
    return x != NULL ? x->owsum : 0;
}

/* The treap priority of a place: a hash of it (splitmix64's finaliser), so none is stored. */
static uint64_t oprio(const emb_req_t *x)
{
    uint64_t z = x->oseq + 0x9e3779b97f4a7c15ULL;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void opull(emb_req_t *x)
{
    x->osize = 1 + osize(x->oleft) + osize(x->oright);
    x->owsum = x->weight + owsum(x->oleft) + owsum(x->oright);
}

/* Split `t` into the places below `key` (*l) and the others (*r). */
static void osplit(emb_req_t *t, uint64_t key, emb_req_t **l, emb_req_t **r)
{
    if (t == NULL) {
        *l = *r = NULL;
    } else if (t->oseq < key) {
        osplit(t->oright, key, &t->oright, r);
        opull(t);
        *l = t;
    } else {
        osplit(t->oleft, key, l, &t->oleft);
        opull(t);
        *r = t;
    }
}

static emb_req_t *omerge(emb_req_t *a, emb_req_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (oprio(a) > oprio(b)) {
        a->oright = omerge(a->oright, b);
        opull(a);
        return a;
    }
    b->oleft = omerge(a, b->oleft);
    opull(b);
    return b;
}

static emb_req_t *oins(emb_req_t *t, emb_req_t *n)
{
    if (t == NULL)
        return n;
    if (oprio(n) > oprio(t)) {
        osplit(t, n->oseq, &n->oleft, &n->oright);
        opull(n);
        return n;
    }
    if (n->oseq < t->oseq)
        t->oleft = oins(t->oleft, n);
    else
        t->oright = oins(t->oright, n);
    opull(t);
    return t;
}

static emb_req_t *odel(emb_req_t *t, const emb_req_t *n)
{
    if (t == NULL)
        return NULL;
    if (t == n)
        return omerge(t->oleft, t->oright);
    if (n->oseq < t->oseq)
        t->oleft = odel(t->oleft, n);
    else
        t->oright = odel(t->oright, n);
    opull(t);
    return t;
}

void emb__oq_insert(emb_sem_t *s, emb_req_t *er)
{
    er->oleft = er->oright = NULL;
    opull(er);
    s->qroot = oins(s->qroot, er);
}

void emb__oq_remove(emb_sem_t *s, emb_req_t *er)
{
    s->qroot = odel(s->qroot, er);
    er->oleft = er->oright = NULL;
}

void emb__oq_rank(const emb_sem_t *s, const emb_req_t *er, uint64_t *ahead, uint64_t *ahead_weight)
{
    uint64_t n = 0, w = 0;

    for (const emb_req_t *x = s->qroot; x != NULL;) {
        if (er->oseq < x->oseq) {
            x = x->oleft;
        } else if (er->oseq > x->oseq) {
            n += osize(x->oleft) + 1;
            w += owsum(x->oleft) + x->weight;
            x = x->oright;
        } else {
            n += osize(x->oleft);
            w += owsum(x->oleft);
            break;
        }
    }
    *ahead = n;
    *ahead_weight = w;
}
