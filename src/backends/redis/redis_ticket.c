/* SPDX-License-Identifier: MIT */
/* redis_ticket.c - tickets on Redis: their arguments and answers (with the estimate made
 * from the samples the script returns), and the long-polls and streams that read a ticket
 * again until it changes. */
#include "backends/redis/redis_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ---- tickets: long-polls and streams ----
 * A watcher is read again (one FCALL, which also renews the ticket's keepalive) every poll
 * interval (at most a third of the keepalive), and at once when a message on sema:tkt names
 * its ticket (its status changed, on any instance). It is answered when the state (status and
 * position) differs from what it saw, or at its deadline. */

void rs__watch_off(rs_t *r, rs_req_t *rq)
{
    if (rq->sem == NULL && !elist_empty(&rq->plink)) {
        elist_remove(&rq->plink);
        r->nwatch--;
        if (r->sh != NULL)
            rs__sh_watch(r, rq, -1);
    }
}

/* ticket_create: weight, ttl, owner, Idempotency-Key, ticket id, lease id, keepalive, max
 * waiters here, [tenant]; ticket_multi (several semaphores): the same without the weight, the
 * tenant always (its parts follow). The ids are made here, kept with the command (a retry
 * sends the same). */
void rs__ticket_args(rs_t *r, const engine_req_t *req, rs_args_t *a, char *tid, char *lid,
                     const char *stem, size_t stem_len)
{
    engine__lease_id(r->front, tid);
    engine__lease_id(r->front, lid);
    rs__id_mark(r, tid, stem, stem_len);
    rs__id_mark(r, lid, stem, stem_len);
    if (req->nparts == 0)
        rs__arg_i64(a, (int64_t)req->weight);
    rs__arg_i64(a, req->ttl_ms);
    rs__arg_str(a, req->owner ? req->owner : "");
    rs__arg_str(a, req->idem_key ? req->idem_key : "");
    rs__arg_str(a, tid);
    rs__arg_str(a, lid);
    rs__arg_i64(a, req->keepalive_ms);
    rs__arg_i64(a, (int64_t)r->cfg.max_waiters_per_sem);
    if (req->tenant != NULL || req->nparts > 0)
        rs__arg_str(a, req->tenant != NULL ? req->tenant : "");
}

static double el_double(const redisReply *a, size_t i)
{
    return strtod(rs__el_str(a, i, NULL), NULL);
}

/* A waiting ticket's estimate, from the samples its semaphore measured (be_estimate). */
static void ticket_estimate(engine_ticket_t *t, const redisReply *rep, size_t at)
{
    be_est_t e;
    int64_t ng = rs__el_i64(rep, at + RS_T_NGAPS), nh = rs__el_i64(rep, at + RS_T_NHOLDS);

    e.gap_ms = el_double(rep, at + RS_T_GAP_MS);
    e.gap_var = el_double(rep, at + RS_T_GAP_VAR);
    e.hold_ms = el_double(rep, at + RS_T_HOLD_MS);
    e.ngaps = ng < 0 ? 0 : ng > UINT32_MAX ? UINT32_MAX : (uint32_t)ng;
    e.nholds = nh < 0 ? 0 : nh > UINT32_MAX ? UINT32_MAX : (uint32_t)nh;
    t->estimated = be_estimate(&e, (uint64_t)rs__el_i64(rep, at + RS_T_CAPACITY),
                               (uint64_t)rs__el_i64(rep, at + RS_T_UNITS),
                               el_double(rep, at + RS_T_OLDEST_AGE_MS), &t->p50_ms, &t->p90_ms);
}

/* A ticket from the script's answer (RS_TICKET_FIELD_MAP at `at`, then its lease's fields
 * once granted). */
int rs__ticket_from(rs_t *r, engine_result_t *res, const redisReply *rep, size_t at,
                    const char *name, size_t nlen)
{
    engine_ticket_t *t = &res->ticket;
    size_t n;
    const char *id = rs__el_str(rep, at + RS_T_ID, &n);

    memset(t, 0, sizeof(*t));
    if (n >= sizeof t->id)
        n = sizeof t->id - 1;
    memcpy(t->id, id, n);
    t->id[n] = '\0';
    if ((t->name = engine_result_strdup(res, name, nlen)) == NULL)
        return -1;
    t->name_len = nlen;
    t->status = (int)rs__el_i64(rep, at + RS_T_STATUS);
    t->weight = (uint64_t)rs__el_i64(rep, at + RS_T_WEIGHT);
    t->position = (uint64_t)rs__el_i64(rep, at + RS_T_POSITION);
    t->ahead_weight = (uint64_t)rs__el_i64(rep, at + RS_T_AHEAD);
    t->keepalive_ms = rs__el_i64(rep, at + RS_T_KEEPALIVE);
    if ((t->tenant = rs__el_dup(res, rep, at + RS_T_TENANT)) == RS_NOMEM)
        return -1;
    t->poll_after_ms = r->cfg.ticket_poll_ms;
    t->state = ((uint64_t)t->status << 56) | t->position;
    if (t->status == ENGINE_TICKET_WAITING)
        ticket_estimate(t, rep, at);
    if (t->status == ENGINE_TICKET_GRANTED) {
        if (rep->elements < at + RS_TICKET_LEN + RS_LEASE_LEN ||
            rs__lease_from(res, &res->lease, rep, at + RS_TICKET_LEN) != 0)
            return -1;
        if (res->lease.multi) { /* on several semaphores: its parts follow */
            res->lease.multi = 0;
            if (rs__parts_from(res, &res->lease, rep, at + RS_TICKET_LEN + RS_LEASE_LEN) != 0)
                return -1;
            t->parts = res->lease.parts;
            t->nparts = res->lease.nparts;
        }
        res->lease.name = t->name;
        res->lease.name_len = nlen;
    } else if (rep->elements > at + RS_TICKET_LEN) { /* waiting on several: its parts */
        engine_lease_t l = {0};
        if (rs__parts_from(res, &l, rep, at + RS_TICKET_LEN) != 0)
            return -1;
        t->parts = l.parts;
        t->nparts = l.nparts;
    }
    res->kind = ENGINE_RES_TICKET;
    return 0;
}

static void tk_rearm(rs_t *r)
{
    uint64_t at = UINT64_MAX, now = rs__now(r);

    for (elist_t *x = r->twatch.next; x != &r->twatch; x = x->next) {
        rs_req_t *rq = ECONTAINER(x, rs_req_t, plink);
        if (rq->state == RS_REQ_WATCH && rq->hi.deadline < at)
            at = rq->hi.deadline;
    }
    if (at == UINT64_MAX || r->shutting_down)
        uv_timer_stop(&r->tk_timer);
    else
        uv_timer_start(&r->tk_timer, rs__ticket_timer_cb, at > now ? at - now : 0, 0);
}

/* The answer to a long-poll's read: 1 when it waits on (its state is the one it saw). */
int rs__ticket_wait(rs_t *r, rs_req_t *rq)
{
    engine_req_t *req = rq->req;
    const engine_ticket_t *t = &req->res.ticket;
    uint64_t now = rs__now(r), deadline = UINT64_MAX, every = (uint64_t)r->cfg.ticket_poll_ms;
    uint64_t next;

    if (r->shutting_down) {
        /* a read in flight when the back end stopped: answered as the watchers between
         * reads were (rs_shutdown), not with a state that looks like a change */
        engine_result_clear(&req->res);
        rs__fail(r, rq, BE_MSG_SHUTDOWN, 0);
        return 1;
    }
    if (t->keepalive_ms > 0 && every > (uint64_t)t->keepalive_ms / 3)
        every = (uint64_t)t->keepalive_ms / 3 > 10 ? (uint64_t)t->keepalive_ms / 3 : 10;
    if ((uint64_t)req->timeout_ms < UINT64_MAX / 2)
        deadline = rq->since_mono + (uint64_t)req->timeout_ms;
    next = now + every;
    if (req->seen != 0 ? req->seen != t->state : t->status == ENGINE_TICKET_GRANTED) {
        /* A stream's next look (it names the state it has) was made right after its last
         * answer, and its first read can find the line moved again since: a new position
         * waits for the poll after that answer, as on the embedded engine, so positions
         * reach a stream at most once per poll. A new status is answered at once. */
        if (req->seen == 0 || req->seen >> 56 != (uint64_t)t->status ||
            now >= rq->since_mono + every || now >= deadline) {
            if (req->seen != 0 && t->status == ENGINE_TICKET_WAITING)
                r->ticket_updates++;
            return 0;
        }
        next = rq->since_mono + every;
    } else if (now >= deadline) {
        return 0;
    }
    if (req->seen == 0)
        req->seen = t->state; /* the state it waits to change from */
    rq->hi.deadline = rq->again ? now : next < deadline ? next : deadline;
    rq->again = 0;
    engine_result_clear(&req->res);
    assert(rq->state == RS_REQ_SENT);
    rq->state = RS_REQ_WATCH;
    if (elist_empty(&rq->plink)) {
        elist_push_back(&r->twatch, &rq->plink);
        r->nwatch++;
        if (r->sh != NULL)
            rs__sh_watch(r, rq, 1);
    }
    tk_rearm(r);
    return 1;
}

void rs__ticket_timer_cb(uv_timer_t *h)
{
    rs_t *r = h->data;
    uint64_t now = rs__now(r);

    for (elist_t *x = r->twatch.next, *next; x != &r->twatch; x = next) {
        rs_req_t *rq = ECONTAINER(x, rs_req_t, plink);
        rs_cmd_t *c;
        int nomem;
        next = x->next;
        if (rq->state != RS_REQ_WATCH || rq->hi.deadline > now)
            continue;
        c = rs__op_cmd(r, rq, &nomem);
        if (c == NULL) {
            rs__fail(r, rq, nomem ? BE_MSG_NOMEM : BE_MSG_NO_TICKET, 0);
            continue;
        }
        rq->state = RS_REQ_SENT;
        rs__send(r, c);
    }
    tk_rearm(r);
    rs__drain(r);
}

/* sema:tkt: a ticket's status changed (granted, ended): its watchers read it now. */
void rs__ticket_message(rs_t *r, const char *tid, size_t len)
{
    int any = 0;

    for (elist_t *x = r->twatch.next; x != &r->twatch; x = x->next) {
        rs_req_t *rq = ECONTAINER(x, rs_req_t, plink);
        if (rq->req == NULL || rq->req->id_len != len || memcmp(rq->req->id, tid, len) != 0)
            continue;
        if (rq->state == RS_REQ_WATCH) {
            rq->hi.deadline = rs__now(r);
            any = 1;
        } else {
            rq->again = 1;
        }
    }
    if (any)
        tk_rearm(r);
}
