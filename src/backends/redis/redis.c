/* SPDX-License-Identifier: MIT */
/* redis.c - the engine's Redis back end ("redis://..."): its table of functions, its
 * start and its stop, and the requests it takes and completes. Every operation is one FCALL
 * of the Lua library sema.lua on Redis, which holds the state (redis_internal.h says which
 * file does what). */
#include "backends/redis/redis_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

uint64_t rs__now(rs_t *r)
{
    return uv_now(r->loop);
}

/* ---- completion ---- */

void rs__finish(rs_t *r, rs_req_t *rq, int status, const char *msg, int hold)
{
    engine_req_t *req = rq->req;

    assert(rq->state == RS_REQ_NEW || rq->state == RS_REQ_SENT || rq->state == RS_REQ_WATCH);
    rs__watch_off(r, rq);
    req->status = status;
    req->message = msg;
    rq->state = RS_REQ_READY;
    if (hold && r->strict && r->replicas > 0) {
        rq->wnode = r->ans_node; /* (on a cluster: that primary's WAIT confirms it) */
        rq->wslot = r->ans_slot;
        rq->wconn = r->ans_conn;
        elist_push_back(&r->held, &rq->link);
    } else {
        elist_push_back(&r->ready, &rq->link);
    }
}

/* Complete rq with message `id` (be_msg.h: its status and text). */
void rs__fail(rs_t *r, rs_req_t *rq, be_msg_t id, int hold)
{
    rs__finish(r, rq, be_msg_code(id), be_msg_text(id), hold);
}

void rs__drain(rs_t *r)
{
    if (r->draining)
        return;
    r->draining = 1;
    for (;;) {
        if (!elist_empty(&r->ready)) {
            rs_req_t *rq = ECONTAINER(r->ready.next, rs_req_t, link);
            engine_req_t *req = rq->req;
            assert(rq->state == RS_REQ_READY);
            elist_remove(&rq->link);
            sema__free(rq);
            engine__complete(r->front, req);
        } else if (!engine__deliver_event(r->front)) {
            break;
        }
    }
    r->draining = 0;
}

/* ---- the back end's table ---- */

/* Why a request cannot be sent now (BE_MSG_NONE: it can). */
static be_msg_t cannot_send(rs_t *r, const engine_req_t *req)
{
    if ((req->op == ENGINE_SEM_LIST || req->op == ENGINE_LOCK_LIST) && req->cursor != NULL &&
        strlen(req->cursor) > ENGINE_NAME_MAX)
        return BE_MSG_CURSOR_TOO_LONG;
    if (r->cmd.state != RS_CONN_READY && r->down_since != 0 &&
        r->down_since + r->cmd_timeout_ms <= rs__now(r))
        return BE_MSG_REDIS_UNREACHABLE;
    if (r->npending >= RS_PENDING_MAX)
        return BE_MSG_REDIS_BACKLOG;
    return BE_MSG_NONE;
}

/* On Redis Cluster the semaphores of a request on several share a slot: their names share a
 * hash tag. NULL, or the 400's message (kept in req's result) naming two that do not. */
static const char *cluster_apart(rs_t *r, engine_req_t *req)
{
    unsigned slot0 = 0;
    char msg[256];

    if (req->nparts == 0 || r->sh == NULL)
        return NULL;
    for (size_t i = 0; i < req->nparts; i++) {
        size_t kl;
        const engine_part_t *p = &req->parts[i];
        char *k = rs__key_new(r, 's', p->name, p->name_len, "", &kl);
        unsigned slot = k != NULL ? rs__slot_of(k, kl) : 0;
        sema__free(k);
        if (i == 0) {
            slot0 = slot;
        } else if (slot != slot0) {
            int n =
                snprintf(msg, sizeof msg,
                         "on Redis Cluster the semaphores of one request must share a hash "
                         "tag: \"%.*s\" and \"%.*s\" do not (name them {job}gpu, {job}db, "
                         "...: the part in braces alike)",
                         (int)(req->parts[0].name_len > 60 ? 60 : req->parts[0].name_len),
                         req->parts[0].name, (int)(p->name_len > 60 ? 60 : p->name_len), p->name);
            const char *m = engine_result_strdup(
                &req->res, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
            return m != NULL ? m
                             : "on Redis Cluster the semaphores of one request must share "
                               "a hash tag ({job}gpu, {job}db, ...)";
        }
    }
    return NULL;
}

/* The request failed before it was sent: its answer comes now. */
static int failed_at_once(rs_t *r, rs_req_t *rq, int status, const char *msg)
{
    rs__finish(r, rq, status, msg, 0);
    rs__drain(r);
    return 0;
}

static int rs_submit(void *be, engine_req_t *req)
{
    rs_t *r = be;
    rs_req_t *rq = sema__calloc(1, sizeof(*rq));
    rs_cmd_t *c;
    be_msg_t why;
    const char *msg;
    int nomem;

    if (rq == NULL)
        return SEMA_ENOMEM;
    elist_init(&rq->link);
    elist_init(&rq->plink);
    rq->hi.idx = EHEAP_NONE;
    rq->req = req;
    rq->since_mono = rs__now(r);
    req->priv = rq;
    if (req->status != 0) /* failed the front's checks */
        return failed_at_once(r, rq, req->status, req->message);
    if (req->op == ENGINE_METRICS || req->op == ENGINE_EVENTS_OPEN) {
        /* (answered even while Redis is unreachable, as they were) */
        if (req->op == ENGINE_METRICS)
            rs__metrics_send(r, rq);
        else
            rs__ev_open(r, rq);
        rs__drain(r);
        return 0;
    }
    if ((why = cannot_send(r, req)) != BE_MSG_NONE)
        return failed_at_once(r, rq, be_msg_code(why), be_msg_text(why));
    if ((msg = cluster_apart(r, req)) != NULL)
        return failed_at_once(r, rq, SEMA_EINVAL, msg);
    if ((req->op == ENGINE_SEM_LIST || req->op == ENGINE_LOCK_LIST) && r->sh != NULL) {
        rs__list_send(r, rq); /* (each slot keeps its names: every primary is asked) */
        rs__drain(r);
        return 0;
    }
    rs__next_id(r, rq->wid, sizeof rq->wid);
    rq->writes = (uint8_t)rs__op_writes(req->op);
    if (rs__is_acquire(req->op))
        engine__lease_id(r->front, rq->lid);
    if ((c = rs__op_cmd(r, rq, &nomem)) == NULL) {
        why = nomem ? BE_MSG_NOMEM : rs__is_lease_op(req->op) ? BE_MSG_NO_LEASE : BE_MSG_NO_TICKET;
        return failed_at_once(r, rq, be_msg_code(why), be_msg_text(why));
    }
    rq->state = RS_REQ_SENT;
    rs__send(r, c);
    return 0;
}

static void rs_cancel(void *be, engine_req_t *req)
{
    rs_t *r = be;
    rs_req_t *rq = req->priv;

    req->priv = NULL;
    rs__watch_off(r, rq);
    if (rq->state == RS_REQ_SENT) {
        rq->req = NULL; /* its reply is undone when it comes */
        return;
    }
    if (rq->state == RS_REQ_PARKED || rq->state == RS_REQ_CANCELLING) {
        rs_sem_t *s = rq->sem;
        rs__send_cancel(r, s->stem, s->stem_len, rq);
        rs__unpark(r, rq);
        r->m->cancellations++;
    } else if (rq->state == RS_REQ_READY) {
        elist_remove(&rq->link);
        if (req->status == 0 && req->res.kind == ENGINE_RES_LEASE && rs__is_acquire(req->op))
            rs__send_drop(r, req->res.lease.id);
        engine_result_clear(&req->res);
    }
    sema__free(rq);
    rs__drain(r);
}

static void rs_free(rs_t *r)
{
    engine_t *front = r->front;

    while (!elist_empty(&r->retry) || !elist_empty(&r->pending) || !elist_empty(&r->unconfirmed)) {
        elist_t *l = !elist_empty(&r->retry)     ? &r->retry
                     : !elist_empty(&r->pending) ? &r->pending
                                                 : &r->unconfirmed;
        rs_cmd_t *c = ECONTAINER(l->next, rs_cmd_t, link);
        elist_remove(&c->link);
        rs__cmd_fail(r, c, BE_MSG_SHUTDOWN);
    }
    rs__drain(r);
    etab_destroy(&r->sems);
    etab_destroy(&r->waiters);
    sema__free(r->theap.a);
    rs__sh_free(r);
    sema__free(r);
    if (front != NULL)
        engine__backend_closed(front);
}

void rs__handle_done(rs_t *r)
{
    if (--r->handles_open == 0)
        rs_free(r);
}

static void handle_closed(uv_handle_t *h)
{
    rs__handle_done(h->data);
}

static void sem_free_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    etab_remove(&r->sems, &s->node);
    sema__free(s);
}

/* Commands about a semaphore that wait to be sent end now, while it is there to be told. */
static void fail_sem_cmds(rs_t *r)
{
    elist_t *lists[] = {&r->retry, &r->pending};

    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        for (elist_t *x = lists[i]->next, *next; x != lists[i]; x = next) {
            rs_cmd_t *c = ECONTAINER(x, rs_cmd_t, link);
            next = x->next;
            if (c->sem == NULL)
                continue;
            elist_remove(&c->link);
            r->npending -= lists[i] == &r->pending;
            rs__cmd_fail(r, c, BE_MSG_SHUTDOWN);
            next = lists[i]->next; /* (what its end did may have changed the list) */
        }
}

static void close_all(rs_t *r)
{
    uv_timer_t *ts[] = {&r->reconnect_timer, &r->tick_timer, &r->hb_timer, &r->due_timer,
                        &r->tk_timer};

    rs__batch_flush(r); /* (sent, then lost with the connections) */
    rs__conns_close(r); /* in-flight commands come back lost: their requests fail */
    fail_sem_cmds(r);
    etab_each(&r->sems, sem_free_each, r);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uv_timer_stop(ts[i]);
        uv_close((uv_handle_t *)ts[i], handle_closed);
    }
    uv_check_stop(&r->check);
    uv_close((uv_handle_t *)&r->check, handle_closed);
    uv_prepare_stop(&r->prep);
    uv_close((uv_handle_t *)&r->prep, handle_closed);
}

/* Shutdown waits for what is in flight (the cancels of parked requests among it), bounded by
 * the command timeout. */
static void shutdown_tick(uv_timer_t *t)
{
    rs_t *r = t->data;

    if (!elist_empty(&r->inflight) && rs__now(r) < r->down_since + r->cmd_timeout_ms &&
        r->cmd.state == RS_CONN_READY)
        return;
    uv_timer_stop(t);
    close_all(r);
}

static void fail_parked_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    s->watched = 1; /* keeps s while its last waiter leaves */
    while (!elist_empty(&s->parked)) {
        rs_req_t *rq = ECONTAINER(s->parked.next, rs_req_t, plink);
        rs__send_cancel(r, s->stem, s->stem_len, rq);
        rs__unpark(r, rq);
        rs__fail(r, rq, BE_MSG_SHUTDOWN, 0);
    }
    s->watched = 0;
    rs__sem_maybe_free(r, s);
}

static void rs_shutdown(void *be)
{
    rs_t *r = be;

    r->shutting_down = 1;
    etab_each(&r->sems, fail_parked_each, r);
    for (elist_t *x = r->twatch.next, *next; x != &r->twatch; x = next) {
        rs_req_t *rq = ECONTAINER(x, rs_req_t, plink);
        next = x->next;
        if (rq->state == RS_REQ_WATCH)
            rs__fail(r, rq, BE_MSG_SHUTDOWN, 0);
    }
    uv_timer_stop(&r->tk_timer);
    rs__list_close(r);
    rs__drain(r);
    uv_timer_stop(&r->hb_timer);
    uv_timer_stop(&r->due_timer);
    uv_timer_stop(&r->reconnect_timer);
    if (r->cmd.state != RS_CONN_READY) {
        close_all(r);
        return;
    }
    r->down_since = rs__now(r);
    uv_timer_start(&r->tick_timer, shutdown_tick, 10, 10);
}

static int rs_open(void **out, engine_t *front, uv_loop_t *loop, const engine_config_t *cfg,
                   char *errbuf, size_t errlen)
{
    rs_t *r = sema__calloc(1, sizeof(*r));
    uint8_t id[8];
    int rc;

    *out = NULL;
    if (r == NULL)
        return SEMA_ENOMEM;
    r->loop = loop;
    r->front = front;
    r->m = engine__counters(front);
    r->cfg = *cfg;
    r->strict = cfg->redis.strict;
    r->replicas = 0;
    r->cmd_timeout_ms = RS_CMD_TIMEOUT_MS;
    r->due_at = UINT64_MAX;
    r->sweep_at = UINT64_MAX;
    r->cmd.r = r->sub.r = r->sent.r = r;
    r->sub.is_sub = 1;
    elist_init(&r->inflight);
    elist_init(&r->batch);
    elist_init(&r->retry);
    elist_init(&r->pending);
    elist_init(&r->ready);
    elist_init(&r->held);
    elist_init(&r->unconfirmed);
    elist_init(&r->twatch);
    elist_init(&r->lists);
    rc = rs__parse_url(r, cfg->backend, errbuf, errlen);
    if (rc == 0 && (etab_init(&r->sems, 16) || etab_init(&r->waiters, 64)))
        rc = SEMA_ENOMEM;
    if (rc == 0 && r->cluster)
        rc = rs__sh_open(r, errbuf, errlen);
    if (rc != 0) {
        etab_destroy(&r->sems);
        etab_destroy(&r->waiters);
        sema__free(r);
        return rc;
    }
    engine__random(front, id, sizeof id);
    for (int i = 0; i < 8; i++)
        snprintf(r->inst + 2 * i, 3, "%02x", id[i]);
    uv_timer_init(loop, &r->reconnect_timer);
    uv_timer_init(loop, &r->tick_timer);
    uv_timer_init(loop, &r->hb_timer);
    uv_timer_init(loop, &r->due_timer);
    uv_timer_init(loop, &r->tk_timer);
    uv_check_init(loop, &r->check);
    uv_prepare_init(loop, &r->prep);
    r->reconnect_timer.data = r->tick_timer.data = r->hb_timer.data = r->due_timer.data = r;
    r->tk_timer.data = r;
    r->check.data = r->prep.data = r;
    r->handles_open = 7;
    uv_timer_start(&r->tick_timer, rs__tick_cb, 100, 100);
    uv_timer_start(&r->hb_timer, rs__hb_cb, RS_HEARTBEAT_MS, 0);
    uv_check_start(&r->check, rs__check_cb);
    uv_prepare_start(&r->prep, rs__prep_cb);
    uv_unref((uv_handle_t *)&r->tick_timer);
    uv_unref((uv_handle_t *)&r->hb_timer);
    if (r->sh != NULL) { /* (commands wait in the cluster's queue for its slot map) */
        r->cmd.state = r->sub.state = RS_CONN_READY;
        r->conn_once = 1;
        rs__beat(r); /* (/healthz: whether the cluster answers; it waits for the slot map) */
    } else {
        r->down_since = rs__now(r);
        rs__connect(r);
    }
    *out = r;
    return 0;
}

const engine_backend_t engine_backend_redis = {
    .name = "redis",
    .open = rs_open,
    .submit = rs_submit,
    .cancel = rs_cancel,
    .shutdown = rs_shutdown,
    .stats = rs__stats,
    .event_log = 1,
    .describe = rs__describe,
    .tickets = 1,
    .multi = 1,
    .tenants = 1,
    .rates = 1,
    .ready_later = 1,
};
