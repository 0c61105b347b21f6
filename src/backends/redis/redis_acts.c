/* SPDX-License-Identifier: MIT */
/* redis_acts.c - reading a script's reply: its fields, the typed results (leases, views,
 * lists), and its acts (what the script did, in order: events and the outcomes of parked
 * requests). */
#include "backends/redis/redis_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- reading replies ----
 * A script's reply: RS_REPLY_MAP (redis_proto.h), then the op's result from RS_R_RESULT. The
 * acts and the counts come packed in one string each (reply_unpack). */

const char *rs__el_str(const redisReply *a, size_t i, size_t *len)
{
    const redisReply *e;

    if (a == NULL || a->type != REDIS_REPLY_ARRAY || i >= a->elements)
        goto none;
    e = a->element[i];
    if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS)
        goto none;
    if (len)
        *len = e->len;
    return e->str;
none:
    if (len)
        *len = 0;
    return "";
}

int64_t rs__el_i64(const redisReply *a, size_t i)
{
    const redisReply *e;

    if (a == NULL || a->type != REDIS_REPLY_ARRAY || i >= a->elements)
        return 0;
    e = a->element[i];
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    if (e->type == REDIS_REPLY_STRING)
        return strtoll(e->str, NULL, 10);
    return 0;
}

const redisReply *rs__el_arr(const redisReply *a, size_t i)
{
    if (a == NULL || a->type != REDIS_REPLY_ARRAY || i >= a->elements ||
        a->element[i]->type != REDIS_REPLY_ARRAY)
        return NULL;
    return a->element[i];
}

/* A lease from RS_LEASE_LEN fields at `at`: id, weight, fence, ttl, acquired, expires, owner,
 * mode ("m", then maybe more: a part of a lease on several semaphores), tenant. */
int rs__lease_from(engine_result_t *res, engine_lease_t *l, const redisReply *a, size_t at)
{
    size_t n;
    const char *id = rs__el_str(a, at + RS_L_ID, &n);
    const char *owner;

    memset(l, 0, sizeof(*l));
    if (n >= sizeof l->id)
        n = sizeof l->id - 1;
    memcpy(l->id, id, n);
    l->id[n] = '\0';
    l->weight = (uint64_t)rs__el_i64(a, at + RS_L_WEIGHT);
    l->fence = (uint64_t)rs__el_i64(a, at + RS_L_FENCE);
    l->ttl_ms = rs__el_i64(a, at + RS_L_TTL);
    l->acquired_at_ms = rs__el_i64(a, at + RS_L_ACQUIRED);
    l->expires_at_ms = rs__el_i64(a, at + RS_L_EXPIRES);
    owner = rs__el_str(a, at + RS_L_OWNER, &n);
    l->owner = NULL;
    if (n > 0 && (l->owner = engine_result_strdup(res, owner, n)) == NULL)
        return -1;
    l->multi = rs__el_str(a, at + RS_L_MODE, NULL)[0] == 'm';
    l->mode = l->multi ? 0 : (int)rs__el_i64(a, at + RS_L_MODE);
    if ((l->tenant = rs__el_dup(res, a, at + RS_L_TENANT)) == RS_NOMEM)
        return -1;
    return 0;
}

const char RS_NOMEM[1];

const char *rs__el_dup(engine_result_t *res, const redisReply *a, size_t i)
{
    size_t n;
    const char *s = rs__el_str(a, i, &n);
    char *d;

    if (n == 0)
        return NULL;
    d = engine_result_strdup(res, s, n);
    return d != NULL ? d : RS_NOMEM;
}

/* The parts of a lease on several semaphores: stem, weight and fence each, from `at` to the
 * reply's end; its name, weight and fence become its first part's. 0, or -1 when out of
 * memory. */
int rs__parts_from(engine_result_t *res, engine_lease_t *l, const redisReply *a, size_t at)
{
    size_t n = a->elements > at ? (a->elements - at) / 3 : 0;
    engine_part_t *p;

    if (n == 0 || n > ENGINE_PARTS_MAX)
        return 0;
    if ((p = engine_result_alloc(res, n * sizeof(*p))) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t slen, nlen;
        char kind;
        const char *stem = rs__el_str(a, at + 3 * i, &slen);
        const char *name = rs__stem_name(stem, slen, &nlen, &kind);
        if ((p[i].name = engine_result_strdup(res, name, nlen)) == NULL)
            return -1;
        p[i].name_len = nlen;
        p[i].weight = (uint64_t)rs__el_i64(a, at + 3 * i + 1);
        p[i].fence = (uint64_t)rs__el_i64(a, at + 3 * i + 2);
    }
    l->parts = p;
    l->nparts = (uint16_t)n;
    l->name = p[0].name;
    l->name_len = p[0].name_len;
    l->weight = p[0].weight;
    l->fence = p[0].fence;
    return 0;
}

/* The parts of request req's lease on several semaphores, granted with these fences ("m",
 * then one per semaphore in the request's order, as an outcome's mode field has them). 0, or
 * -1 when out of memory. */
static int parts_of_request(engine_result_t *res, engine_lease_t *l, const engine_req_t *req,
                            const char *fences)
{
    engine_part_t *p = engine_result_alloc(res, req->nparts * sizeof(*p));
    const char *s = fences + (fences[0] == 'm');

    if (p == NULL)
        return -1;
    for (size_t i = 0; i < req->nparts; i++) {
        char *end;
        p[i] = req->parts[i];
        p[i].fence = strtoull(s, &end, 10);
        s = end;
    }
    l->parts = p;
    l->nparts = req->nparts;
    l->multi = 0; /* (the request's own lease: its parts say it) */
    l->name = p[0].name;
    l->name_len = p[0].name_len;
    return 0;
}

/* ---- acts: what a script did, in order ---- */

/* An act's type (RS_ACT_*), 0 for none. */
static int act_type(const redisReply *acts, size_t i)
{
    return (int)rs__el_i64(acts, i + RS_AF_TYPE);
}

/* The public event an act type is, as the static string the front keeps; NULL for none. */
static const char *event_type(int type)
{
    static const char *const types[] = {
#define RS_ACT__TYPE(id, num, type) [num] = type,
        RS_ACT_MAP(RS_ACT__TYPE)
#undef RS_ACT__TYPE
    };

    return rs_act_public(type) ? types[type] : NULL;
}

int rs__act_is_event(const redisReply *acts, size_t i)
{
    return event_type(act_type(acts, i)) != NULL;
}

/* A waiter's event (RS_ACT_QUEUED, RS_ACT_LEFT): the waiter as a view lists it (kind 3: the
 * part of a request on several semaphores), and the queue after it. */
static int waiter_event(const redisReply *acts, size_t i, engine_result_t *scratch,
                        engine_event_t *ev, engine_waiter_t *w)
{
    size_t olen;
    const char *owner = rs__el_str(acts, i + RS_AF_OWNER, &olen);
    int64_t kind = rs__el_i64(acts, i + RS_AF_EXPIRES);

    memset(w, 0, sizeof(*w));
    if (olen > 0 && (w->owner = engine_result_strdup(scratch, owner, olen)) == NULL)
        return -1;
    w->weight = (uint64_t)rs__el_i64(acts, i + RS_AF_WEIGHT);
    w->since_ms = rs__el_i64(acts, i + RS_AF_ACQUIRED);
    w->mode = (int)rs__el_i64(acts, i + RS_AF_EXTRA);
    if ((w->tenant = rs__el_dup(scratch, acts, i + RS_AF_TENANT)) == RS_NOMEM)
        return -1;
    w->wait_idle = kind == 1;
    w->ticket = kind == 2 || kind == 4; /* 4: a part of a ticket on several */
    w->multi = kind == 3 || kind == 4;
    ev->waiter = w;
    ev->waiting = (uint64_t)rs__el_i64(acts, i + RS_AF_FENCE);
    ev->waiting_weight = (uint64_t)rs__el_i64(acts, i + RS_AF_TTL);
    return 0;
}

int rs__act_to_event(const redisReply *acts, size_t i, const char *name, size_t nlen,
                     engine_result_t *scratch, engine_event_t *ev, rs_ev_room_t *room)
{
    int type = act_type(acts, i);
    engine_lease_t *l = &room->lease;

    memset(ev, 0, sizeof(*ev));
    if ((ev->type = event_type(type)) == NULL)
        return -1;
    ev->name = name;
    ev->name_len = nlen;
    if (type == RS_ACT_RESIZED) {
        ev->capacity = (uint64_t)rs__el_i64(acts, i + RS_AF_EXTRA);
    } else if (type == RS_ACT_QUEUED || type == RS_ACT_LEFT) {
        return waiter_event(acts, i, scratch, ev, &room->waiter);
    } else if (type != RS_ACT_DELETED) {
        if (rs__lease_from(scratch, l, acts, i + RS_AF_LID) != 0)
            return -1;
        l->name = name;
        l->name_len = nlen;
        ev->lease = l;
    }
    return 0;
}

static void count_act(rs_t *r, const redisReply *acts, size_t i, int64_t now_ms)
{
    double held_s = (double)(now_ms - rs__el_i64(acts, i + RS_AF_ACQUIRED)) / 1000.0;

    switch (act_type(acts, i)) {
    case RS_ACT_GRANTED:
        r->m->grants++;
        return;
    case RS_ACT_RELEASED:
        r->m->releases++;
        break;
    case RS_ACT_EXPIRED:
        r->m->expirations++;
        break;
    case RS_ACT_REVOKED:
        r->m->revocations++;
        break;
    default:
        return;
    }
    engine__hist_observe(&r->m->hold_s, held_s > 0 ? held_s : 0);
}

/* One of this instance's parked requests has its outcome: the act at acts[i]. */
static void waiter_done(rs_t *r, rs_req_t *rq, const redisReply *acts, size_t i)
{
    engine_req_t *req = rq->req;
    engine_result_t *res = &req->res;
    int type = act_type(acts, i);

    rs__unpark(r, rq);
    if (type > RS_ACT_COLLECTED)
        type -= RS_ACT_COLLECTED; /* the same outcome, kept under :g until now */
    switch (type) {
    case RS_ACT_GRANTED:
        if (rs__lease_from(res, &res->lease, acts, i + RS_AF_LID) != 0 ||
            (req->op == ENGINE_ACQUIRE_MULTI &&
             parts_of_request(res, &res->lease, req, rs__el_str(acts, i + RS_AF_EXTRA, NULL)) !=
                 0)) {
            rs__send_drop(r, rs__el_str(acts, i + RS_AF_LID, NULL));
            engine_result_clear(res);
            return rs__fail(r, rq, BE_MSG_NOMEM_RESULT, 0);
        }
        if (req->op != ENGINE_ACQUIRE_MULTI) {
            res->lease.name = req->name;
            res->lease.name_len = req->name_len;
        }
        res->lease.tenant = req->tenant;
        res->kind = ENGINE_RES_LEASE;
        engine__hist_observe(&r->m->wait_s, (double)(rs__now(r) - rq->since_mono) / 1000.0);
        return rs__finish(r, rq, 0, NULL, 1);
    case RS_ACT_IDLE:
        res->sem.name = req->name;
        res->sem.name_len = req->name_len;
        res->kind = ENGINE_RES_IDLE;
        return rs__finish(r, rq, 0, NULL, 1);
    case RS_ACT_FAIL: {
        be_msg_t why = (be_msg_t)rs__el_i64(acts, i + RS_AF_EXTRA);
        if (why == BE_MSG_WAITER_TIMED_OUT)
            r->m->timeouts++;
        return rs__fail(r, rq, why, 1);
    }
    default:
        r->gone++;
        return rs__fail(r, rq, BE_MSG_REDIS_WAITER_GONE, 0);
    }
}

void rs__acts_process(rs_t *r, const redisReply *rep, int mine)
{
    const redisReply *acts = rs__el_arr(rep, RS_R_ACTS);
    size_t slen, nlen;
    const char *stem = rs__el_str(rep, RS_R_STEM, &slen);
    char kind;
    int64_t now_ms = rs__el_i64(rep, RS_R_NOW);

    if (acts == NULL)
        return;
    (void)rs__stem_name(stem, slen, &nlen, &kind);
    for (size_t i = 0; i + RS_ACT_LEN <= acts->elements; i += RS_ACT_LEN) {
        size_t wlen;
        const char *wid = rs__el_str(acts, i + RS_AF_WID, &wlen);
        const char *inst = rs__el_str(acts, i + RS_AF_INST, NULL);
        if (mine)
            count_act(r, acts, i, now_ms);
        if (wlen > 0 && strcmp(inst, r->inst) == 0) {
            rs_req_t *rq = rs__parked_find(r, wid, wlen);
            if (rq != NULL)
                waiter_done(r, rq, acts, i);
        }
    }
    if (kind == 's') { /* its events, numbered by the log (when anyone follows them) */
        const redisReply *n = rs__el_arr(rep, RS_R_COUNTS);
        rs__ev_batch(r, rs__sem_find(r, stem, slen), (uint64_t)rs__el_i64(n, RS_C_LOG_UID),
                     (uint64_t)rs__el_i64(n, RS_C_LOG_FIRST), acts);
    }
}

/* ---- replies to results ---- */

/* A view's limits (RS_VLIM_MAP), and its tenants (RS_TENANT_FIELD_MAP each) when `tenants`:
 * none when empty. */
static int limits_from(engine_result_t *res, engine_sem_view_t *v, const redisReply *a, int tenants)
{
    engine_sem_limits_t *l;
    size_t n = a != NULL && a->elements >= RS_VLIM_LEN && tenants
                   ? (a->elements - RS_VLIM_LEN) / RS_TENANT_LEN
                   : 0;

    if (a == NULL || a->elements < RS_VLIM_LEN)
        return 0;
    if ((l = engine_result_alloc(res, sizeof(*l))) == NULL)
        return -1;
    memset(l, 0, sizeof(*l));
    l->tenant_max = (uint64_t)rs__el_i64(a, RS_VL_TENANT_MAX);
    l->rate_per_s = (uint64_t)rs__el_i64(a, RS_VL_RATE);
    l->rate_burst = (uint64_t)rs__el_i64(a, RS_VL_BURST);
    l->tokens = (uint64_t)rs__el_i64(a, RS_VL_TOKENS);
    if (n > 0 && (l->tenants = engine_result_alloc(res, n * sizeof(*l->tenants))) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t at = RS_VLIM_LEN + i * RS_TENANT_LEN;
        engine_tenant_t *t = &l->tenants[i];
        if ((t->name = rs__el_dup(res, a, at + RS_TN_NAME)) == RS_NOMEM)
            return -1;
        t->name_len = t->name != NULL ? strlen(t->name) : 0;
        t->held = (uint64_t)rs__el_i64(a, at + RS_TN_HELD);
        t->waiting = (uint64_t)rs__el_i64(a, at + RS_TN_WAITING);
        t->waiting_weight = (uint64_t)rs__el_i64(a, at + RS_TN_WAITING_WEIGHT);
    }
    if (n > 0)
        qsort(l->tenants, n, sizeof(*l->tenants), engine__tenant_cmp);
    l->ntenants = n;
    v->limits = l;
    return 0;
}

static int view_from(engine_result_t *res, engine_sem_view_t *v, const redisReply *a, size_t at,
                     const char *name, size_t nlen, int lists)
{
    memset(v, 0, sizeof(*v));
    v->name = engine_result_strdup(res, name, nlen);
    if (v->name == NULL)
        return -1;
    v->name_len = nlen;
    v->capacity = (uint64_t)rs__el_i64(a, at + RS_V_CAPACITY);
    v->available = rs__el_i64(a, at + RS_V_AVAILABLE);
    v->held = (uint64_t)rs__el_i64(a, at + RS_V_HELD);
    v->fence = (uint64_t)rs__el_i64(a, at + RS_V_FENCE);
    v->waiting = (uint64_t)rs__el_i64(a, at + RS_V_WAITING);
    v->waiting_weight = (uint64_t)rs__el_i64(a, at + RS_V_WAITING_WEIGHT);
    v->legacy = rs__el_i64(a, at + RS_V_LEGACY) != 0;
    v->readers = (uint64_t)rs__el_i64(a, at + RS_V_READERS);
    v->lists = lists;
    if (!lists)
        return 0;
    const redisReply *hs = rs__el_arr(a, at + RS_V_HOLDERS), *ws = rs__el_arr(a, at + RS_V_WAITERS);
    size_t nh = hs ? hs->elements / RS_LEASE_LEN : 0, nw = ws ? ws->elements / RS_WAITER_LEN : 0;
    v->truncated = rs__el_i64(a, at + RS_V_TRUNCATED) != 0;
    if (limits_from(res, v, rs__el_arr(a, at + RS_V_LIMITS), 1) != 0)
        return -1;
    v->holders = nh ? engine_result_alloc(res, nh * sizeof(*v->holders)) : NULL;
    v->waiters = nw ? engine_result_alloc(res, nw * sizeof(*v->waiters)) : NULL;
    if ((nh && v->holders == NULL) || (nw && v->waiters == NULL))
        return -1;
    for (size_t i = 0; i < nh; i++, v->nholders++) {
        if (rs__lease_from(res, &v->holders[i], hs, i * RS_LEASE_LEN) != 0)
            return -1;
        v->holders[i].name = v->name;
        v->holders[i].name_len = nlen;
    }
    for (size_t i = 0; i < nw; i++, v->nwaiters++) {
        engine_waiter_t *q = &v->waiters[i];
        size_t olen;
        const char *owner = rs__el_str(ws, i * RS_WAITER_LEN + RS_W_OWNER, &olen);
        memset(q, 0, sizeof(*q));
        q->owner = olen ? engine_result_strdup(res, owner, olen) : NULL;
        if (olen && q->owner == NULL)
            return -1;
        if ((q->tenant = rs__el_dup(res, ws, i * RS_WAITER_LEN + RS_W_TENANT)) == RS_NOMEM)
            return -1;
        q->weight = (uint64_t)rs__el_i64(ws, i * RS_WAITER_LEN + RS_W_WEIGHT);
        q->since_ms = rs__el_i64(ws, i * RS_WAITER_LEN + RS_W_SINCE);
        q->mode = (int)rs__el_i64(ws, i * RS_WAITER_LEN + RS_W_MODE);
        q->wait_idle = rs__el_i64(ws, i * RS_WAITER_LEN + RS_W_KIND) == 1;
        int64_t kind = rs__el_i64(ws, i * RS_WAITER_LEN + RS_W_KIND);
        q->ticket = kind == 2 || kind == 4; /* 4: a part of a ticket on several */
        q->multi = kind == 3 || kind == 4;
    }
    return 0;
}

int rs__list_from(engine_result_t *res, const redisReply *rep, engine_list_item_t **out,
                  size_t *nout, int *more)
{
    const redisReply *items = rs__el_arr(rep, RS_R_RESULT + 1);
    size_t n = items ? items->elements / RS_ITEM_LEN : 0;
    engine_list_item_t *its = engine_result_alloc(res, (n ? n : 1) * sizeof(*its));

    if (its == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t nl, at = i * RS_ITEM_LEN;
        const char *name = rs__el_str(items, at, &nl);
        engine_list_item_t *it = &its[i];
        if (view_from(res, &it->v, items, at + 1, name, nl, 0) != 0)
            return -1;
        it->grants = (uint64_t)rs__el_i64(items, at + RS_ITEM_GRANTS);
        it->tickets = (uint64_t)rs__el_i64(items, at + RS_ITEM_TICKETS);
        it->waiting_since_ms = rs__el_i64(items, at + RS_ITEM_SINCE);
        if (limits_from(res, &it->v, rs__el_arr(items, at + RS_ITEM_LIMITS), 0) != 0)
            return -1;
    }
    *out = its;
    *nout = n;
    *more = rs__el_i64(rep, RS_R_RESULT) != 0;
    return 0;
}

static int list_from(engine_result_t *res, const redisReply *rep, engine_res_kind_t kind)
{
    int more;

    if (rs__list_from(res, rep, &res->items, &res->nitems, &more) != 0)
        return -1;
    if (more && res->nitems > 0) {
        res->next_cursor = res->items[res->nitems - 1].v.name;
        res->next_cursor_len = res->items[res->nitems - 1].v.name_len;
    }
    res->kind = kind;
    return 0;
}

/* The result of a successful op (status 0). 0, or -1 when out of memory. */
int rs__result_from(rs_t *r, rs_req_t *rq, const redisReply *rep)
{
    engine_req_t *req = rq->req;
    engine_result_t *res = &req->res;
    size_t slen, nlen;
    const char *stem = rs__el_str(rep, RS_R_STEM, &slen);
    char kind;
    const char *name = rs__stem_name(stem, slen, &nlen, &kind);

    (void)r;
    switch (req->op) {
    case ENGINE_SEM_PUT:
    case ENGINE_SEM_RESIZE:
    case ENGINE_SEM_GET:
    case ENGINE_LOCK_GET:
        req->created = rs__el_i64(rep, RS_R_RESULT) != 0;
        res->kind = req->op == ENGINE_LOCK_GET ? ENGINE_RES_LOCK : ENGINE_RES_SEM;
        return view_from(res, &res->sem, rep, RS_R_RESULT + 1, req->name, req->name_len, 1);
    case ENGINE_LEGACY_CREATE:
    case ENGINE_LEGACY_VALUE:
    case ENGINE_LEGACY_UP:
    case ENGINE_LEGACY_DOWN:
        res->kind = ENGINE_RES_LEGACY;
        return view_from(res, &res->sem, rep, RS_R_RESULT + 1, req->name, req->name_len, 0);
    case ENGINE_SEM_LIST:
        return list_from(res, rep, ENGINE_RES_LIST);
    case ENGINE_LOCK_LIST:
        return list_from(res, rep, ENGINE_RES_LOCK_LIST);
    case ENGINE_WAIT_IDLE:
        res->kind = ENGINE_RES_IDLE;
        res->sem.name = req->name;
        res->sem.name_len = req->name_len;
        return 0;
    case ENGINE_ACQUIRE:
    case ENGINE_LOCK_ACQUIRE:
    case ENGINE_ACQUIRE_MULTI:
    case ENGINE_LEASE_GET:
    case ENGINE_LEASE_RENEW:
        if (rs__lease_from(res, &res->lease, rep, RS_R_RESULT) != 0)
            return -1;
        if (res->lease.multi) { /* a lease on several semaphores: its parts follow */
            res->lease.multi = 0;
            if (rs__parts_from(res, &res->lease, rep, RS_R_RESULT + RS_LEASE_LEN) != 0)
                return -1;
            if (req->op == ENGINE_ACQUIRE_MULTI) {
                res->lease.tenant = req->tenant;
                engine__hist_observe(&r->m->wait_s, (double)(rs__now(r) - rq->since_mono) / 1000.0);
            }
        } else if (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE) {
            res->lease.name = req->name;
            res->lease.name_len = req->name_len;
            res->lease.tenant = req->tenant;
            engine__hist_observe(&r->m->wait_s, (double)(rs__now(r) - rq->since_mono) / 1000.0);
        } else if ((res->lease.name = engine_result_strdup(res, name, nlen)) == NULL) {
            return -1;
        } else {
            res->lease.name_len = nlen;
        }
        res->kind = ENGINE_RES_LEASE;
        return 0;
    case ENGINE_TICKET_CREATE:
    case ENGINE_TICKET_GET:
        req->created = rs__el_i64(rep, RS_R_RESULT + RS_T_CREATED) != 0;
        return rs__ticket_from(r, res, rep, RS_R_RESULT, name, nlen);
    default:
        res->kind = ENGINE_RES_NONE;
        return 0;
    }
}
