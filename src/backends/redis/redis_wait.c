/* SPDX-License-Identifier: MIT */
/* redis_wait.c - this instance's parked waiters and its timers: the semaphores it has
 * waiters on or follows, parking, timeouts (decided in Redis), the sweep of the earliest due
 * time, the heartbeat, and the messages that wake a waiter. */
#include "backends/redis/redis_internal.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* ---- local semaphores: where this instance has parked requests or event subscribers ---- */

static int sem_eq(const enode_t *n, const void *key, size_t len)
{
    const rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);
    return s->stem_len == len && memcmp(s->stem, key, len) == 0;
}

rs_sem_t *rs__sem_find(rs_t *r, const char *stem, size_t len)
{
    enode_t *n = etab_find(&r->sems, etab_hash(stem, len, 7), sem_eq, stem, len);
    return n ? ECONTAINER(n, rs_sem_t, node) : NULL;
}

rs_sem_t *rs__sem_get(rs_t *r, const char *stem, size_t len)
{
    rs_sem_t *s = rs__sem_find(r, stem, len);

    if (s != NULL)
        return s;
    s = sema__calloc(1, sizeof(*s) + len + 1);
    if (s == NULL)
        return NULL;
    s->node.hash = etab_hash(stem, len, 7);
    elist_init(&s->parked);
    s->stem_len = len;
    memcpy(s->stem, stem, len);
    etab_insert(&r->sems, &s->node);
    return s;
}

void rs__sem_maybe_free(rs_t *r, rs_sem_t *s)
{
    if (s->nparked > 0 || s->watched || s->collecting || s->reads > 0)
        return;
    etab_remove(&r->sems, &s->node);
    sema__free(s);
}

/* ---- timers: semaphore due times and parked timeouts share one uv timer ---- */

void rs__due_rearm(rs_t *r)
{
    eitem_t *b = eheap_top(&r->theap);
    uint64_t d = r->sweeping ? UINT64_MAX : r->sweep_at, now = rs__now(r);

    if (b != NULL && b->deadline < d)
        d = b->deadline;
    if (d == r->due_at)
        return;
    r->due_at = d;
    if (d == UINT64_MAX || r->shutting_down) {
        uv_timer_stop(&r->due_timer);
        return;
    }
    uv_timer_start(&r->due_timer, rs__due_cb, d > now ? d - now : 0, 0);
}

/* The earliest due time in Redis (ms on its clock): the sweep timer fires then. */
void rs__sweep_set(rs_t *r, int64_t due_ms, int64_t redis_now)
{
    /* (every answer that tells it tells the earliest of all, as Redis has it now: it may be
     * later than the one before, once that one was swept, or an instance beat again) */
    uint64_t at = due_ms <= 0
                      ? UINT64_MAX
                      : rs__now(r) + (uint64_t)(due_ms > redis_now ? due_ms - redis_now : 0) + 1;

    if (at == r->sweep_at)
        return;
    r->sweep_at = at;
    rs__due_rearm(r);
}

/* ---- parked requests ---- */

static int wid_eq(const enode_t *n, const void *key, size_t len)
{
    const rs_req_t *q = ECONTAINER(n, rs_req_t, node);
    return strlen(q->wid) == len && memcmp(q->wid, key, len) == 0;
}

rs_req_t *rs__parked_find(rs_t *r, const char *wid, size_t len)
{
    enode_t *n = etab_find(&r->waiters, etab_hash(wid, len, 3), wid_eq, wid, len);
    return n ? ECONTAINER(n, rs_req_t, node) : NULL;
}

void rs__unpark(rs_t *r, rs_req_t *rq)
{
    rs_sem_t *s = rq->sem;

    assert(rq->state == RS_REQ_PARKED || rq->state == RS_REQ_CANCELLING);
    if (rq->cancel != NULL) {
        rq->cancel->rq = NULL; /* its timeout's cancel finds it answered */
        rq->cancel = NULL;
    }
    etab_remove(&r->waiters, &rq->node);
    elist_remove(&rq->plink);
    eheap_remove(&r->theap, &rq->hi);
    s->nparked--;
    r->nparked--;
    if (r->sh != NULL)
        rs__sh_parked(r, s->stem, s->stem_len, -1);
    rq->sem = NULL;
    rq->state = RS_REQ_NEW;
    rs__sem_maybe_free(r, s);
}

void rs__park(rs_t *r, rs_req_t *rq, const char *stem, size_t stem_len)
{
    engine_req_t *req = rq->req;
    rs_sem_t *s = rs__sem_get(r, stem, stem_len);

    if (s == NULL || (r->cfg.max_waiters_total && r->nparked >= r->cfg.max_waiters_total)) {
        rs__send_cancel(r, stem, stem_len, rq);
        rs__fail(r, rq, s == NULL ? BE_MSG_NOMEM : BE_MSG_TOO_MANY_WAITERS, 0);
        return;
    }
    assert(rq->state == RS_REQ_SENT);
    rq->state = RS_REQ_PARKED;
    rq->sem = s;
    rq->node.hash = etab_hash(rq->wid, strlen(rq->wid), 3);
    etab_insert(&r->waiters, &rq->node);
    elist_push_back(&s->parked, &rq->plink);
    s->nparked++;
    r->nparked++;
    if (r->sh != NULL)
        rs__sh_parked(r, stem, stem_len, 1);
    rq->hi.idx = EHEAP_NONE;
    rq->hi.kind = EITEM_WAITER;
    if (req->timeout_ms > 0 && (uint64_t)req->timeout_ms < UINT64_MAX / 2) {
        rq->hi.deadline = rq->since_mono + (uint64_t)req->timeout_ms;
        if (eheap_push(&r->theap, &rq->hi) != 0)
            rq->hi.idx = EHEAP_NONE;
    }
    rs__due_rearm(r);
}

/* The check of this instance's waiters parked on s, each with the lease id it is to get: a
 * grant whose answer went with the connection comes back as collected, and those Redis no
 * longer knows come back "gone" (503). O(waiters): sent after the command connection came
 * back (a failover may have promoted a replica without them), never in steady state. */
static void check_waiters(rs_t *r, rs_sem_t *s)
{
    rs_args_t a = {0};
    rs_cmd_t *c;
    int n = 0;

    if (s->collecting)
        return; /* its answer comes */
    rs__args_head(r, &a, s->stem, s->stem_len, rs__op_name(RS_OP_COLLECT), "", NULL);
    for (elist_t *x = s->parked.next; x != &s->parked && n < RS_COLLECT_WIDS; x = x->next, n++) {
        const rs_req_t *rq = ECONTAINER(x, rs_req_t, plink);
        rs__arg_str(&a, rq->wid);
        rs__arg_str(&a, rq->lid);
    }
    if ((c = rs__cmd_build(r, RS_CMD_COLLECT, &a)) == NULL)
        return;
    c->sem = s;
    s->collecting = 1;
    r->collects++;
    rs__send(r, c);
}

static void check_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    if (s->nparked > 0)
        check_waiters(r, s);
}

void rs__check_all(rs_t *r)
{
    etab_each(&r->sems, check_each, r);
}

void rs__beat(rs_t *r)
{
    rs_args_t a = {0};
    char rid[64];
    rs_cmd_t *c;

    if (r->sh != NULL)
        return rs__sh_beat(r, -1); /* one per slot with waiters here */
    if (r->beating) {
        r->beat_again = 1;
        return;
    }
    rs__next_id(r, rid, sizeof rid); /* (it hands outcomes over: a retry reads its answer) */
    rs__args_head(r, &a, "sema:inst", 9, rs__op_name(RS_OP_BEAT), rid, NULL);
    if ((c = rs__cmd_build(r, RS_CMD_COLLECT, &a)) == NULL)
        return;
    r->beating = 1;
    r->beat_again = 0;
    r->collects++;
    rs__send(r, c);
}

/* Every parked request of this instance is gone from Redis (it lost its data, or took this
 * instance for dead): each is answered 503, never queued again silently. */
static void gone_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    s->watched++; /* (keeps s while its last waiter leaves) */
    while (!elist_empty(&s->parked)) {
        rs_req_t *rq = ECONTAINER(s->parked.next, rs_req_t, plink);
        rs__unpark(r, rq);
        r->gone++;
        rs__fail(r, rq, BE_MSG_REDIS_WAITER_GONE, 0);
    }
    s->watched--;
    rs__sem_maybe_free(r, s);
}

void rs__waiters_gone(rs_t *r)
{
    etab_each(&r->sems, gone_each, r);
}

typedef struct {
    rs_t *r;
    unsigned slot;
    void (*fn)(void *, enode_t *);
} in_slot_t;

static void in_slot_each(void *arg, enode_t *n)
{
    in_slot_t *g = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    if (rs__slot_of(s->stem, s->stem_len) == g->slot)
        g->fn(g->r, n);
}

void rs__waiters_gone_in(rs_t *r, unsigned slot)
{
    in_slot_t g = {r, slot, gone_each};

    etab_each(&r->sems, in_slot_each, &g);
}

void rs__check_in(rs_t *r, unsigned slot)
{
    in_slot_t g = {r, slot, check_each};

    etab_each(&r->sems, in_slot_each, &g);
}

/* ---- the timers of parked requests and semaphores ---- */

/* Its timeout came: it stays parked (a grant collected meanwhile is delivered) until Redis
 * answers its cancel, which either takes it out of the queue (timed out) or hands over the
 * grant made first. The cancel is retried with its request id until its answer comes. */
static void waiter_timeout(rs_t *r, rs_req_t *rq)
{
    rs_sem_t *s = rq->sem;
    char rid[64];
    rs_cmd_t *c;

    assert(rq->state == RS_REQ_PARKED);
    rs__next_id(r, rid, sizeof rid);
    c = rs__cancel_cmd(r, s->stem, s->stem_len, rq, "t", rid);
    if (c == NULL) { /* out of memory: the client leaves, the grant if any goes back */
        rs__send_cancel(r, s->stem, s->stem_len, rq);
        rs__unpark(r, rq);
        return rs__fail(r, rq, BE_MSG_NOMEM, 0);
    }
    c->rq = rq;
    c->timed = 1;
    rq->cancel = c;
    rq->state = RS_REQ_CANCELLING;
    rs__send(r, c);
}

/* The answer to a timeout's cancel: its acts delivered the outcome, or (nothing of it left in
 * Redis) it timed out. */
void rs__timeout_cancel_done(rs_t *r, rs_cmd_t *c)
{
    rs_req_t *rq = c->rq;

    if (rq == NULL)
        return;
    rs__unpark(r, rq);
    r->m->timeouts++;
    rs__fail(r, rq, BE_MSG_WAITER_TIMED_OUT, 1);
}

void rs__due_cb(uv_timer_t *t)
{
    rs_t *r = t->data;
    uint64_t now = rs__now(r);
    eitem_t *top;

    r->due_at = UINT64_MAX;
    while ((top = eheap_top(&r->theap)) != NULL && top->deadline <= now) {
        eheap_remove(&r->theap, top);
        waiter_timeout(r, ECONTAINER(top, rs_req_t, hi));
    }
    if (r->sh != NULL) {
        rs__sh_sweep(r, now);
    } else if (!r->sweeping && r->sweep_at <= now) {
        rs_args_t a = {0};
        rs_cmd_t *c;
        r->sweep_at = UINT64_MAX;
        rs__args_head(r, &a, "sema:due", 8, rs__op_name(RS_OP_SWEEP), "", NULL);
        c = rs__cmd_build(r, RS_CMD_SWEEP, &a);
        if (c != NULL) {
            r->sweeping = 1;
            rs__send(r, c);
        }
    }
    rs__due_rearm(r);
    rs__drain(r);
}

/* The heartbeat of a semaphore this instance follows: its event log's marker is renewed. */
static void hb_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    if (s->watched)
        rs__ev_renew(r, s);
}

void rs__hb_cb(uv_timer_t *t)
{
    rs_t *r = t->data;
    uint32_t jitter;

    rs__beat(r); /* O(1), whatever the number of waiters */
    etab_each(&r->sems, hb_each, r);
    engine__random(r->front, &jitter, sizeof jitter);
    uv_timer_start(&r->hb_timer, rs__hb_cb,
                   RS_HEARTBEAT_MS * 4 / 5 + jitter % (RS_HEARTBEAT_MS / 5), 0);
    rs__drain(r);
}

/* ---- messages ---- */

/* "sema:wake:<inst>" with a stem: something was granted to a waiter here. "sema:ev:<stem>"
 * with "<inst>\0" and acts: events another instance made. */
void rs__on_message(rs_t *r, redisReply *msg)
{
    size_t clen, plen;
    const char *chan = rs__el_str(msg, 1, &clen);
    const char *pay = rs__el_str(msg, 2, &plen);

    if (clen > 10 && strncmp(chan, "sema:wake:", 10) == 0) {
        r->wakes++;
        if (r->nparked > 0)
            rs__beat(r); /* it hands over what was kept for this instance */
        return;
    }
    if (clen > 8 && strncmp(chan, "sema:ev:", 8) == 0) {
        rs__ev_message(r, chan + 8, clen - 8, pay, plen);
        rs__drain(r);
    } else if (clen == 8 && memcmp(chan, "sema:tkt", 8) == 0) {
        rs__ticket_message(r, pay, plen);
    }
}
