/* SPDX-License-Identifier: MIT */
/* emb_multi.c - requests on several semaphores at once, all or nothing: one place in each
 * semaphore's queue (a part), granted together when the request is next on every one and
 * fits in every one, as one lease with a part (and a fence) on each semaphore. Until then it
 * holds nothing. Who is next on each semaphore is emb_limits.c's (or the queue's head). */
#include "backends/embedded/emb_internal.h"

#include <string.h>

static void fail(emb_t *eb, emb_req_t *er, be_msg_t id)
{
    emb__fail(eb, er, id);
}

void emb__multi_free(emb_multi_t *m)
{
    sema__free(m);
}

emb_multi_t *emb__multi_new(emb_t *eb, emb_req_t *main, const engine_part_t *parts, size_t n,
                            be_msg_t *why)
{
    emb_multi_t *m = sema__calloc(1, sizeof(*m) + n * sizeof(m->part[0]));

    if (m == NULL) {
        *why = BE_MSG_NOMEM;
        return NULL;
    }
    m->main = main;
    m->nparts = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        emb_req_t *p = &m->part[i];
        emb_sem_t *s = emb__sem_find(eb, parts[i].name, parts[i].name_len);
        *why = s == NULL                       ? BE_MSG_NO_SEM_OF_SEVERAL
               : parts[i].weight > s->capacity ? BE_MSG_BAD_WEIGHT
                                               : emb__lim_too_heavy(s, parts[i].weight);
        if (*why != BE_MSG_NONE) {
            sema__free(m);
            return NULL;
        }
        elist_init(&p->link);
        p->hi.idx = EHEAP_NONE;
        p->kind = EMB_KIND_PART;
        p->req = main->req;
        p->multi = m;
        p->sem = s;
        p->weight = parts[i].weight;
    }
    return m;
}

int emb__multi_park(emb_t *eb, emb_multi_t *m)
{
    emb_req_t *main = m->main;
    const char *tenant = emb__req_tenant(main);
    /* one arrival for all its places (a ticket loaded from the store comes with its own) */
    uint64_t g = m->part[0].oseq != 0 ? m->part[0].oseq : ++eb->gseq;
    int rc = 0;
    uint32_t i;

    for (i = 0; i < m->nparts && rc == 0; i++) {
        emb_req_t *p = &m->part[i];
        emb_sem_t *s = p->sem;
        p->oseq = g;
        if (tenant != NULL && s->lim == NULL)
            rc = emb__lim_ensure(eb, s);
        if (rc == 0)
            rc = emb__park(eb, p, s, -1);
    }
    if (rc != 0) {
        for (uint32_t j = 0; j + 1 < i; j++)
            emb__unpark(eb, &m->part[j]);
        for (uint32_t j = 0; j < m->nparts; j++)
            m->part[j].sem = NULL;
        return rc;
    }
    main->oseq = g; /* (it is in no queue itself) */
    main->multi = m;
    main->state = EMB_REQ_PARKED;
    main->since_mono = m->part[0].since_mono;
    return 0;
}

void emb__multi_unpark(emb_t *eb, emb_req_t *main)
{
    emb_multi_t *m = main->multi;

    for (uint32_t i = 0; i < m->nparts; i++)
        if (m->part[i].state == EMB_REQ_PARKED)
            emb__unpark(eb, &m->part[i]);
    eheap_remove(&eb->heap, &main->hi);
    main->state = EMB_REQ_NEW;
    main->multi = NULL;
    if (main->idem != NULL)
        emb__idem_free(eb, main->idem);
    emb__multi_free(m);
}

/* Every part is next and fits: take the turns and the tokens, leave every line, and grant
 * one lease (or the ticket's); then the semaphores' admission goes on. */
static void multi_grant(emb_t *eb, emb_multi_t *m)
{
    emb_req_t *main = m->main;
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    uint64_t w[ENGINE_PARTS_MAX];
    size_t n = m->nparts;

    for (size_t i = 0; i < n; i++) {
        sems[i] = m->part[i].sem;
        w[i] = m->part[i].weight;
        emb__take(eb, sems[i], &m->part[i]);
    }
    emb__unpark(eb, main); /* frees m */
    for (size_t i = 0; i < n; i++)
        emb__est_queue_grant(eb, sems[i], w[i], !elist_empty(&sems[i]->waiters));
    if (main->kind == EMB_KIND_TICKET) {
        emb__ticket_grant_multi(eb, ECONTAINER(main, emb_ticket_t, q), sems, w, n);
    } else {
        emb_lease_t *l =
            emb__grant_multi(eb, sems, w, n, main->req, main->req->tenant, main->since_mono);
        if (l == NULL) {
            fail(eb, main, BE_MSG_NOMEM_GRANT);
        } else {
            emb__lease_own(main, l);
            main->durable = 1;
            emb__finish_lease(eb, main, l);
        }
    }
    for (size_t i = 0; i < n; i++)
        emb__admit(eb, sems[i]);
}

int emb__multi_try(emb_t *eb, emb_multi_t *m)
{
    SEMA__CHECK(eb->admitting);
    for (uint32_t i = 0; i < m->nparts; i++)
        if (emb__designate(eb, m->part[i].sem) != &m->part[i])
            return 0;
    for (uint32_t i = 0; i < m->nparts; i++)
        if (!emb__fits(eb, m->part[i].sem, m->part[i].weight))
            return 0;
    multi_grant(eb, m);
    return 1;
}

/* ---- idempotency: a key names one request on several semaphores ---- */

static int same_tenant(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int part_is(const emb_sem_t *s, uint64_t w, const engine_part_t *want)
{
    return w == want->weight && s->name_len == want->name_len &&
           memcmp(s->name, want->name, want->name_len) == 0;
}

static int lease_matches(const emb_lease_t *l, const engine_req_t *req)
{
    size_t i = 0;

    if (!same_tenant(emb__tenant_name(emb__lease_tenant(l), &(size_t){0}), req->tenant))
        return 0;
    for (const emb_lease_t *p = l; p != NULL; p = emb__lease_next(p), i++)
        if (i == req->nparts || !part_is(p->sem, p->weight, &req->parts[i]))
            return 0;
    return i == req->nparts;
}

static int waiter_matches(const emb_req_t *w, const engine_req_t *req)
{
    const emb_multi_t *m = w->multi;

    if (m == NULL || m->nparts != req->nparts || !same_tenant(w->req->tenant, req->tenant))
        return 0;
    for (uint32_t i = 0; i < m->nparts; i++)
        if (!part_is(m->part[i].sem, m->part[i].weight, &req->parts[i]))
            return 0;
    return 1;
}

/* The first attempt still waits: the retry takes its places in every line, with its own
 * timeout; the first ends EREPLACED. */
static void take_over(emb_t *eb, emb_req_t *er, emb_idem_t *d)
{
    emb_req_t *old = d->waiter;
    emb_multi_t *m = old->multi;
    int64_t timeout_ms = er->req->timeout_ms;

    er->kind = old->kind;
    er->state = EMB_REQ_PARKED;
    er->since_mono = old->since_mono;
    er->oseq = old->oseq;
    er->multi = m;
    m->main = er;
    for (uint32_t i = 0; i < m->nparts; i++)
        m->part[i].req = er->req;
    er->idem = d;
    d->waiter = er;
    emb__waiter_retimed(eb, er, old, timeout_ms);
    old->multi = NULL;
    old->idem = NULL;
    old->state = EMB_REQ_NEW;
    fail(eb, old, BE_MSG_WAITER_REPLACED);
}

/* A retry with a known key: 1 when it was answered or took over. */
static int idem_retry(emb_t *eb, emb_req_t *er)
{
    const engine_req_t *req = er->req;
    emb_idem_t *d;

    if (emb__idem_of(eb, req, NULL, &d) != 0) {
        fail(eb, er, BE_MSG_KEY_OTHER_TOKEN);
        return 1;
    }
    if (d == NULL)
        return 0;
    if (d->ticket != NULL || (d->lease != NULL && !lease_matches(d->lease, req)) ||
        (d->waiter != NULL && !waiter_matches(d->waiter, req))) {
        fail(eb, er, BE_MSG_KEY_OTHER_PARTS);
        return 1;
    }
    if (d->lease != NULL) {
        er->durable = 1; /* the grant may still be on its way to disk */
        emb__lease_own(er, d->lease);
        emb__finish_lease(eb, er, d->lease);
        return 1;
    }
    if (d->waiter == NULL)
        return 0;
    if (req->timeout_ms == 0)
        fail(eb, er, BE_MSG_NOT_AVAILABLE);
    else
        take_over(eb, er, d);
    return 1;
}

/* Its timeout, and its key while it waits. 0 or SEMA_ENOMEM. */
static int wait_setup(emb_t *eb, emb_req_t *er)
{
    const engine_req_t *req = er->req;

    er->hi.kind = EITEM_WAITER;
    er->hi.idx = EHEAP_NONE;
    if (req->timeout_ms > 0 && (uint64_t)req->timeout_ms < UINT64_MAX / 2) {
        er->hi.deadline = emb__now(eb) + (uint64_t)req->timeout_ms;
        if (eheap_push(&eb->heap, &er->hi) != 0)
            return SEMA_ENOMEM;
        emb__timer_rearm(eb);
    }
    if (req->idem_key != NULL && req->idem_key[0] != '\0') {
        er->idem = emb__idem_new(eb, NULL, req->idem_key, strlen(req->idem_key));
        if (er->idem != NULL)
            er->idem->waiter = er;
    }
    return 0;
}

/* Out of every line again, then admission where it was (a try that could not be granted,
 * or a wait that could not be set up). */
static void leave(emb_t *eb, emb_req_t *er, be_msg_t why)
{
    emb_sem_t *sems[ENGINE_PARTS_MAX];
    size_t n = emb__req_sems(er, sems);

    emb__unpark(eb, er);
    fail(eb, er, why);
    emb__admit_all(eb, sems, n);
}

/* POST /v1/acquire: one place in each semaphore's line; granted at once when the request is
 * next and fits on every one. */
void emb__op_acquire_multi(emb_t *eb, emb_req_t *er)
{
    const engine_req_t *req = er->req;
    be_msg_t why = BE_MSG_NONE;
    int status, was;
    emb_multi_t *m;

    er->kind = EMB_KIND_ACQUIRE;
    m = emb__multi_new(eb, er, req->parts, req->nparts, &why);
    if (m == NULL)
        return fail(eb, er, why);
    if (idem_retry(eb, er)) {
        emb__multi_free(m);
        return;
    }
    was = emb__admit_hold(eb);
    status = emb__multi_park(eb, m);
    if (status != 0) {
        emb__multi_free(m);
        fail(eb, er, status == SEMA_ELIMIT ? BE_MSG_TOO_MANY_WAITERS_OR_TENANTS : BE_MSG_NOMEM);
    } else if (!emb__multi_try(eb, m)) {
        if (req->timeout_ms == 0)
            leave(eb, er, BE_MSG_NOT_AVAILABLE);
        else if (wait_setup(eb, er) != 0)
            leave(eb, er, BE_MSG_NOMEM);
        else
            emb__event_waiter(eb, er, "queued");
    }
    emb__admit_release(eb, was);
}
