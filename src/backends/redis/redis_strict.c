/* SPDX-License-Identifier: MIT */
/* redis_strict.c - strict durability on Redis: replies are held until one WAIT per loop
 * turn says the replicas have every write before it; a short WAIT answers them "outcome
 * unknown" and undoes or sends again what they did. */
#include "backends/redis/redis_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* A client's release (or revoke) that a WAIT did not confirm: a failover may promote a
 * replica without it, and the lease would hold its units until its ttl. It goes again, by
 * lease id and without a request id (where it already ran, the lease is gone and nothing
 * changes), and is kept like the undoing commands until a WAIT confirms it. */
static void send_lease_end_again(rs_t *r, const engine_req_t *req)
{
    rs_args_t a = {0};
    size_t klen;
    int nomem;
    char *key = req->id_len > 0 && req->id_len < ENGINE_LEASE_ID_MAX
                    ? rs__id_key(r, "id:", req->id, req->id_len, &klen, &nomem)
                    : NULL; /* (on a cluster, the key of the slot the id names) */
    rs_cmd_t *c;

    if (key == NULL)
        return;
    rs__args_head(
        r, &a, key, klen,
        rs__op_name(req->op == ENGINE_LEASE_RELEASE ? RS_OP_LEASE_RELEASE : RS_OP_LEASE_REVOKE), "",
        req);
    c = rs__cmd_build(r, RS_CMD_DROP, &a); /* (copies the key: the arguments are borrowed) */
    sema__free(key);
    if (c != NULL)
        rs__send(r, c);
}

static int is_wait(const engine_req_t *req)
{
    return rs__is_acquire(req->op) || req->op == ENGINE_WAIT_IDLE;
}

/* A held reply that a WAIT did not confirm: its client gets "outcome unknown", and what it
 * did is undone (a grant goes back, a waiter's end takes it out of the queue for good) or
 * sent again (a release). */
static void unconfirmed(rs_t *r, rs_req_t *rq)
{
    engine_req_t *req = rq->req;

    if (req->status != 0 && rq->wid[0] != '\0' && is_wait(req)) {
        /* a waiter's end (a timeout, say) that may be undone */
        size_t sl;
        size_t nl;
        const char *name = rs__req_name(req, &nl);
        char *stem = rs__key_new(r, rs__req_kind(req), name, nl, "", &sl);
        if (stem != NULL)
            rs__send_cancel(r, stem, sl, rq);
        sema__free(stem);
    } else if (req->status == 0) {
        if (req->res.kind == ENGINE_RES_LEASE && rs__is_acquire(req->op))
            rs__send_drop(r, req->res.lease.id);
        if (req->op == ENGINE_LEASE_RELEASE || req->op == ENGINE_LEASE_REVOKE)
            send_lease_end_again(r, req);
        engine_result_clear(&req->res);
    } else {
        return; /* a refusal: nothing was done */
    }
    req->status = be_msg_code(BE_MSG_REDIS_NOT_CONFIRMED);
    req->message = be_msg_text(BE_MSG_REDIS_NOT_CONFIRMED);
}

/* A WAIT answered (ok: the replicas have every write before it) or came back short: send
 * the held replies, or answer them "outcome unknown" and undo or send again what they did.
 * node -1: every one (one Redis); else those of that primary (1 + its index; 0: none known),
 * ok only for those answered on the connection `conn` the WAIT went on (a WAIT speaks for its
 * own connection). */
void rs__strict_settle(rs_t *r, int node, int conn, int ok)
{
    uint64_t now = rs__now(r);
    elist_t undo;

    elist_init(&undo);
    for (elist_t *e = r->unconfirmed.next, *next; e != &r->unconfirmed; e = next) {
        rs_cmd_t *c = ECONTAINER(e, rs_cmd_t, link);
        next = e->next;
        if (node >= 0 && c->wnode != node)
            continue;
        elist_remove(&c->link);
        if ((ok && (node < 0 || c->wconn == conn)) || rs__undo_moot(r, c, now))
            rs__cmd_free(c); /* confirmed, or moot (see rs__undo_moot) */
        else
            elist_push_back(&undo, &c->link);
    }
    for (elist_t *e = r->held.next, *next; e != &r->held; e = next) {
        rs_req_t *rq = ECONTAINER(e, rs_req_t, link);
        next = e->next;
        assert(rq->state == RS_REQ_READY);
        if (node >= 0 && rq->wnode != node)
            continue;
        elist_remove(&rq->link);
        if (!ok || (node >= 0 && rq->wconn != conn))
            unconfirmed(r, rq);
        elist_push_back(&r->ready, &rq->link);
    }
    while (!elist_empty(&undo)) { /* (sent again: after the loops, as a send may answer) */
        rs_cmd_t *c = ECONTAINER(undo.next, rs_cmd_t, link);
        elist_remove(&c->link);
        rs__send(r, c);
    }
    rs__drain(r);
}

static void wait_settle(rs_t *r, int ok)
{
    r->wait_inflight = 0;
    rs__strict_settle(r, -1, 0, ok);
}

/* Say when WAIT starts coming back short (writes are then answered "not confirmed"), and when
 * it is whole again: once each. A WAIT lost with its connection says nothing of replicas. */
static void wait_log(rs_t *r, const redisReply *rep, int ok)
{
    uint64_t now = rs__now(r);

    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER || ok == (r->wait_short_since == 0))
        return; /* (no change) */
    if (!ok) {
        log_warn("redis: WAIT confirmed writes on %lld of the %d replicas asked for in %d ms: "
                 "writes are answered 503 \"not confirmed\" until it confirms them all again",
                 (long long)rep->integer, r->replicas, RS_WAIT_TIMEOUT_MS);
        r->wait_short_since = now | 1; /* (never 0) */
        return;
    }
    log_warn("redis: WAIT confirms writes on the %d replicas asked for again, after %.1f s short",
             r->replicas, (double)(now - r->wait_short_since) / 1000.0);
    r->wait_short_since = 0;
}

static void wait_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *conn = ac->data;
    rs_t *r = conn->r;
    redisReply *rep = reply;
    int ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer >= r->replicas;

    (void)priv;
    r->waits++;
    if (!ok)
        r->waits_short++;
    wait_log(r, rep, ok);
    if (ok) /* until the INFO sent after this WAIT tells how many replicas there were */
        r->short_of_all = r->count_due = 1;
    wait_settle(r, ok);
}

int rs__info_replicas(const char *info)
{
    char n[24];
    long had;

    rs__info_field(info, "connected_slaves", n, sizeof n);
    had = n[0] != '\0' ? strtol(n, NULL, 10) : -1;
    return had >= 0 && had < 1000 ? (int)had : -1;
}

/* INFO replication, read right after a WAIT: how many replicas the primary had when that WAIT
 * confirmed writes. Replication keeps the order of writes, so a WAIT that every replica
 * confirmed covers every write before it; one that fewer confirmed leaves the writes it
 * confirmed missing on some replica a failover may promote. */
static void repl_count_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_t *r = ((rs_conn_t *)ac->data)->r;
    redisReply *rep = reply;
    int had;

    (void)priv;
    if (rep == NULL || rep->type != REDIS_REPLY_STRING || (had = rs__info_replicas(rep->str)) < 0)
        return; /* short_of_all stays as the WAIT left it */
    if (had > r->repl_most)
        r->repl_most = had;
    if (r->repl_sentinel > r->repl_most)
        r->repl_most = r->repl_sentinel;
    if (!r->count_due)
        return; /* a short WAIT confirmed nothing */
    r->count_due = 0;
    r->short_of_all = r->repl_most > r->replicas;
    r->short_had = r->repl_most;
}

/* The command connection went while replies were held and before their WAIT was sent (a
 * READONLY after them in the same read, say: a demoted primary). A WAIT on the next
 * connection would count another primary's replicas, which need not have these writes: they
 * are settled as a short WAIT would settle them. (A WAIT in flight comes back short by
 * itself.) */
void rs__wait_lost(rs_t *r)
{
    if (r->strict && !r->wait_inflight && (!elist_empty(&r->held) || !elist_empty(&r->unconfirmed)))
        wait_settle(r, 0);
}

void rs__check_cb(uv_check_t *h)
{
    rs_t *r = h->data;
    char n[24], to[24];

    rs__batch_flush(r); /* (a WAIT confirms what went before it) */
    if (r->sh != NULL && r->strict && r->replicas > 0)
        return rs__sh_strict_check(r);
    if (!r->strict || r->wait_inflight || (elist_empty(&r->held) && elist_empty(&r->unconfirmed)) ||
        r->cmd.state != RS_CONN_READY)
        return;
    snprintf(n, sizeof n, "%d", r->replicas);
    snprintf(to, sizeof to, "%d", RS_WAIT_TIMEOUT_MS);
    const char *argv[] = {"WAIT", n, to};
    size_t lens[] = {4, strlen(n), strlen(to)};
    if (redisAsyncCommandArgv(r->cmd.ac, wait_cb, NULL, 3, argv, lens) != REDIS_OK)
        return;
    r->wait_inflight = 1;
    if (r->replicas > 0) /* (it runs once the WAIT has answered) */
        redisAsyncCommand(r->cmd.ac, repl_count_cb, NULL, "INFO replication");
}
