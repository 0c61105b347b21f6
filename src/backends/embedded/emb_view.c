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
    v->tenant = NULL;
    v->multi = 0;
    if (l->x != NULL) {
        v->tenant = emb__tenant_name(l->x->tenant, &(size_t){0});
        v->multi = l->x->main != NULL || l->x->next_part != NULL;
    }
    v->nparts = 0;
    v->parts = NULL;
}

/* A NUL-terminated copy of len bytes in the result (s may be NULL); 0 or -1. */
static int keep_str(engine_result_t *r, const char **s, size_t len)
{
    if (*s == NULL)
        return 0;
    *s = engine_result_strdup(r, *s, len);
    return *s != NULL ? 0 : -1;
}

int emb__view_lease_parts(engine_result_t *r, engine_lease_t *v, const emb_lease_t *l, int multi)
{
    size_t n = 0;
    engine_part_t *parts;

    if (keep_str(r, &v->tenant, v->tenant != NULL ? strlen(v->tenant) : 0) != 0)
        return -1;
    if (emb__lease_next(l) == NULL && !multi)
        return 0;
    for (const emb_lease_t *p = l; p != NULL; p = emb__lease_next(p))
        n++;
    parts = engine_result_alloc(r, n * sizeof(*parts));
    if (parts == NULL)
        return -1;
    n = 0;
    for (const emb_lease_t *p = l; p != NULL; p = emb__lease_next(p), n++) {
        parts[n].name = engine_result_strdup(r, p->sem->name, p->sem->name_len);
        parts[n].name_len = p->sem->name_len;
        parts[n].weight = p->weight;
        parts[n].fence = p->fence;
        if (parts[n].name == NULL)
            return -1;
    }
    v->parts = parts;
    v->nparts = n;
    return 0;
}

/* Copy the view's owner into the result; 0 or -1 when out of memory. */
static int keep_owner(engine_result_t *r, const char **owner)
{
    if (*owner == NULL)
        return 0;
    *owner = engine_result_strdup(r, *owner, strlen(*owner));
    return *owner != NULL ? 0 : -1;
}

/* A parked request as a view shows it (its owner and tenant borrowed); `wall_off` is
 * emb__wall_of(eb, 0), read once for a whole list. */
static void view_waiter(engine_waiter_t *q, const emb_req_t *er, int64_t wall_off)
{
    const emb_req_t *main = er->kind == EMB_KIND_PART ? er->multi->main : er;

    q->ticket = main->kind == EMB_KIND_TICKET;
    q->owner = q->ticket ? ECONTAINER(main, const emb_ticket_t, q)->owner : main->req->owner;
    q->tenant = er->tplace != NULL ? emb__tenant_name(er->tplace->tenant, &(size_t){0}) : NULL;
    q->multi = er->kind == EMB_KIND_PART;
    q->weight = er->weight;
    q->since_ms = (int64_t)er->since_mono + wall_off;
    q->mode = er->kind == EMB_KIND_ACQUIRE ? emb__req_mode(er->req) : 0;
    q->wait_idle = er->kind == EMB_KIND_WAIT_IDLE;
}

static int view_lists(emb_t *eb, engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s)
{
    int64_t wall_off = emb__wall_of(eb, 0);
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
        if (keep_owner(r, &h->owner) != 0 ||
            keep_str(r, &h->tenant, h->tenant != NULL ? strlen(h->tenant) : 0) != 0)
            return -1;
    }
    for (const elist_t *x = s->waiters.next; v->nwaiters < nw; x = x->next) {
        engine_waiter_t *q = &v->waiters[v->nwaiters++];
        view_waiter(q, ECONTAINER(x, emb_req_t, link), wall_off);
        if (keep_owner(r, &q->owner) != 0 ||
            keep_str(r, &q->tenant, q->tenant != NULL ? strlen(q->tenant) : 0) != 0)
            return -1;
    }
    return emb__view_tenants(r, v, s);
}

int emb__view_sem(emb_t *eb, engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s,
                  int lists)
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
    if (s->lim != NULL) {
        engine_sem_limits_t *l = engine_result_alloc(r, sizeof(*l));
        if (l == NULL)
            return -1;
        memset(l, 0, sizeof(*l));
        emb__lim_get(s, &l->tenant_max, &l->rate_per_s, &l->rate_burst);
        l->tokens = emb__tokens(eb, s);
        v->limits = l;
    }
    for (const elist_t *x = s->holders.next; x != &s->holders; x = x->next)
        v->readers += ECONTAINER(x, emb_lease_t, link)->mode == ENGINE_MODE_SHARED;
    return lists ? view_lists(eb, r, v, s) : 0;
}

int emb__view_item(emb_t *eb, engine_result_t *r, engine_list_item_t *it, const emb_sem_t *s)
{
    it->grants = s->grants;
    it->tickets = s->ntickets;
    it->waiting_since_ms = 0;
    if (!elist_empty(&s->waiters)) {
        const emb_req_t *head = ECONTAINER(s->waiters.next, emb_req_t, link);
        it->waiting_since_ms = emb__wall_of(eb, head->since_mono);
    }
    return emb__view_sem(eb, r, &it->v, s, 0);
}

/* ---- events ---- */

void emb__event_lease(emb_t *eb, const emb_sem_t *s, const char *type, const emb_lease_t *l)
{
    if (!engine__watching(eb->front))
        return; /* the common case: nobody to tell */
    engine_lease_t v;
    engine_event_t ev = {.type = type, .name = s->name, .name_len = s->name_len, .lease = &v};
    emb__view_lease(&v, l);
    engine__event(eb->front, &ev);
}

void emb__event_waiter(emb_t *eb, const emb_req_t *er, const char *type)
{
    const emb_sem_t *s = er->sem;
    int left = strcmp(type, "left") == 0;
    engine_waiter_t q;

    if (er->multi != NULL && er->kind != EMB_KIND_PART) { /* its place on each semaphore */
        for (uint32_t i = 0; i < er->multi->nparts; i++)
            if (er->multi->part[i].state == EMB_REQ_PARKED)
                emb__event_waiter(eb, &er->multi->part[i], type);
        return;
    }
    if (s == NULL || (s->flags & EMB_SEM_LOCK) || !engine__watched(eb->front, s->name, s->name_len))
        return; /* not parked; a lock key has no event stream; nobody follows it */
    engine_event_t ev = {.type = type,
                         .name = s->name,
                         .name_len = s->name_len,
                         .waiter = &q,
                         .waiting = s->nwaiters - (left ? 1 : 0),
                         .waiting_weight = s->waiting - (left ? er->weight : 0)};
    view_waiter(&q, er, emb__wall_of(eb, 0));
    engine__event(eb->front, &ev);
}

void emb__event_sem(emb_t *eb, const emb_sem_t *s, const char *type, uint64_t capacity)
{
    engine_event_t ev = {
        .type = type, .name = s->name, .name_len = s->name_len, .capacity = capacity};

    engine__event(eb->front, &ev);
}
