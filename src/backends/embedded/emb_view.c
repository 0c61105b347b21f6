/* SPDX-License-Identifier: MIT */
/* emb_view.c - the embedded back end's state as the engine's typed values: a result's views (its
 * strings copied into the result, so they outlive a later change) and events. */
#include "backends/embedded/emb_internal.h"

#include <string.h>

/* A view whose strings still point into the state (copy before the state changes). */
void emb__view_lease(engine_lease_t *v, const emb_lease_t *l)
{
    const emb_sem_t *s = l->sem;

    memcpy(v->id, l->id, sizeof v->id);
    v->name = s->name;
    v->name_len = s->name_len;
    v->owner = l->owner;
    v->weight = l->weight;
    v->fence = l->fence;
    v->ttl_ms = l->ttl_ms;
    v->acquired_at_ms = l->acquired_at_ms;
    v->expires_at_ms = l->expires_at_ms;
    v->mode = l->mode;
}

/* Copy the view's owner into the result; 0 or -1 when out of memory. */
static int keep_owner(engine_result_t *r, const char **owner)
{
    if (*owner == NULL)
        return 0;
    *owner = engine_result_strdup(r, *owner, strlen(*owner));
    return *owner != NULL ? 0 : -1;
}

static int view_lists(engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s)
{
    size_t nh = 0, nw = s->nwaiters < ENGINE_VIEW_LIST_MAX ? s->nwaiters : ENGINE_VIEW_LIST_MAX;
    int more_holders = 0;

    for (const elist_t *x = s->holders.next; x != &s->holders; x = x->next) {
        if (nh == ENGINE_VIEW_LIST_MAX) {
            more_holders = 1;
            break;
        }
        nh++;
    }
    v->truncated = more_holders || s->nwaiters > nw;
    v->holders = nh ? engine_result_alloc(r, nh * sizeof(*v->holders)) : NULL;
    v->waiters = nw ? engine_result_alloc(r, nw * sizeof(*v->waiters)) : NULL;
    if ((nh && v->holders == NULL) || (nw && v->waiters == NULL))
        return -1;
    for (const elist_t *x = s->holders.next; v->nholders < nh; x = x->next) {
        engine_lease_t *h = &v->holders[v->nholders++];
        emb__view_lease(h, ECONTAINER(x, emb_lease_t, link));
        if (keep_owner(r, &h->owner) != 0)
            return -1;
    }
    for (const elist_t *x = s->waiters.next; v->nwaiters < nw; x = x->next) {
        const emb_req_t *er = ECONTAINER(x, emb_req_t, link);
        engine_waiter_t *q = &v->waiters[v->nwaiters++];
        q->ticket = er->kind == EMB_KIND_TICKET;
        q->owner = q->ticket ? ECONTAINER(er, emb_ticket_t, q)->owner : er->req->owner;
        q->weight = er->weight;
        q->since_ms = er->since_ms;
        q->mode = er->kind == EMB_KIND_ACQUIRE ? emb__req_mode(er->req) : 0;
        q->wait_idle = er->kind == EMB_KIND_WAIT_IDLE;
        if (keep_owner(r, &q->owner) != 0)
            return -1;
    }
    return 0;
}

int emb__view_sem(engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s, int lists)
{
    memset(v, 0, sizeof(*v));
    v->name = engine_result_strdup(r, s->name, s->name_len);
    if (v->name == NULL)
        return -1;
    v->name_len = s->name_len;
    v->capacity = s->capacity;
    v->available = s->available;
    v->held = s->held;
    v->fence = s->fence;
    v->waiting = s->nwaiters;
    v->waiting_weight = s->waiting;
    v->legacy = (s->flags & EMB_SEM_LEGACY) != 0;
    v->lists = lists;
    for (const elist_t *x = s->holders.next; x != &s->holders; x = x->next)
        v->readers += ECONTAINER(x, emb_lease_t, link)->mode == ENGINE_MODE_SHARED;
    return lists ? view_lists(r, v, s) : 0;
}

int emb__view_item(engine_result_t *r, engine_list_item_t *it, const emb_sem_t *s)
{
    it->grants = s->grants;
    it->tickets = s->ntickets;
    it->waiting_since_ms =
        elist_empty(&s->waiters) ? 0 : ECONTAINER(s->waiters.next, emb_req_t, link)->since_ms;
    return emb__view_sem(r, &it->v, s, 0);
}

/* ---- events ---- */

void emb__event_lease(emb_t *eb, const emb_sem_t *s, const char *type, const emb_lease_t *l)
{
    engine_lease_t v;
    engine_event_t ev = {.type = type, .name = s->name, .name_len = s->name_len, .lease = &v};

    emb__view_lease(&v, l);
    engine__event(eb->front, &ev);
}

void emb__event_sem(emb_t *eb, const emb_sem_t *s, const char *type, uint64_t capacity)
{
    engine_event_t ev = {
        .type = type, .name = s->name, .name_len = s->name_len, .capacity = capacity};

    engine__event(eb->front, &ev);
}
