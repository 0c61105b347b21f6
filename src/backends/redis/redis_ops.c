/* SPDX-License-Identifier: MIT */
/* redis_ops.c - the engine's operations as script calls: the keys of a semaphore, the
 * FCALL arguments of each operation, and what its answer does to the request. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- keys ---- */

/* The hash tag of a name: 32-bit FNV-1a of kind and name, in hex. Every key of one semaphore
 * carries it, so they share a Redis Cluster slot. */
static uint32_t tag_hash(char kind, const char *name, size_t len)
{
    uint32_t h = 2166136261u;

    h = (h ^ (uint8_t)kind) * 16777619u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 16777619u;
    return h;
}

char *rs__key_cat(const char *prefix, const char *stem, size_t len, const char *suffix,
                  size_t *klen)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    char *k = sema__malloc(pl + len + sl + 1);

    if (k == NULL)
        return NULL;
    memcpy(k, prefix, pl);
    memcpy(k + pl, stem, len);
    memcpy(k + pl + len, suffix, sl + 1);
    *klen = pl + len + sl;
    return k;
}

/* The hash tag of a name, as Redis Cluster reads one in a key: the bytes between its first '{'
 * and the first '}' after it, when there are any; else the whole name. */
static const char *name_tag(const char *name, size_t len, size_t *tlen)
{
    const char *open = memchr(name, '{', len), *close;

    if (open != NULL && (close = memchr(open + 1, '}', len - (size_t)(open + 1 - name))) != NULL &&
        close > open + 1) {
        *tlen = (size_t)(close - open - 1);
        return open + 1;
    }
    *tlen = len;
    return name;
}

char *rs__key_new(const rs_t *r, char kind, const char *name, size_t len, const char *suffix,
                  size_t *klen)
{
    char head[RS_STEM_HEAD + 1];
    size_t tlen;
    /* (on Redis Cluster, names that share a hash tag share a slot: a request on several
     * semaphores touches one slot) */
    const char *t = r->sh != NULL ? name_tag(name, len, &tlen) : (tlen = len, name);
    uint32_t h = tag_hash(kind, t, tlen);

    snprintf(head, sizeof head, "sema:{%08x}%c:", r->sh != NULL ? rs__sh_tag(r, h) : h, kind);
    return rs__key_cat(head, name, len, suffix, klen);
}

/* The name in a stem "sema:{tag}K:name". */
const char *rs__stem_name(const char *stem, size_t len, size_t *nlen, char *kind)
{
    if (len < RS_STEM_HEAD) {
        *nlen = 0;
        *kind = 0;
        return "";
    }
    *kind = stem[RS_STEM_HEAD - 2];
    *nlen = len - RS_STEM_HEAD;
    return stem + RS_STEM_HEAD;
}

/* ---- operations: requests to commands ---- */

static const struct {
    const char *name;
    int writes;
} ops[RS_OP_COUNT] = {
#define RS_OP__ROW(id, name, writes) [RS_OP_##id] = {name, writes},
    RS_OP_MAP(RS_OP__ROW)
#undef RS_OP__ROW
};

/* The script's operation for an engine operation. */
static rs_op_t op_of(engine_op_t op)
{
    static const rs_op_t of[ENGINE_OP_COUNT] = {
        [ENGINE_SEM_PUT] = RS_OP_PUT,
        [ENGINE_SEM_RESIZE] = RS_OP_RESIZE,
        [ENGINE_SEM_GET] = RS_OP_GET,
        [ENGINE_SEM_DELETE] = RS_OP_DELETE,
        [ENGINE_SEM_LIST] = RS_OP_LIST,
        [ENGINE_LOCK_LIST] = RS_OP_LOCK_LIST,
        [ENGINE_ACQUIRE] = RS_OP_ACQUIRE,
        [ENGINE_WAIT_IDLE] = RS_OP_WAIT_IDLE,
        [ENGINE_LEASE_GET] = RS_OP_LEASE_GET,
        [ENGINE_LEASE_RENEW] = RS_OP_LEASE_RENEW,
        [ENGINE_LEASE_RELEASE] = RS_OP_LEASE_RELEASE,
        [ENGINE_LEASE_REVOKE] = RS_OP_LEASE_REVOKE,
        [ENGINE_LOCK_ACQUIRE] = RS_OP_LOCK_ACQUIRE,
        [ENGINE_LOCK_GET] = RS_OP_LOCK_GET,
        [ENGINE_LEGACY_CREATE] = RS_OP_LEGACY_CREATE,
        [ENGINE_LEGACY_DELETE] = RS_OP_DELETE,
        [ENGINE_LEGACY_VALUE] = RS_OP_LEGACY_VALUE,
        [ENGINE_LEGACY_UP] = RS_OP_LEGACY_UP,
        [ENGINE_LEGACY_DOWN] = RS_OP_LEGACY_DOWN,
        [ENGINE_TICKET_CREATE] = RS_OP_TICKET_CREATE,
        [ENGINE_TICKET_GET] = RS_OP_TICKET_GET,
        [ENGINE_TICKET_DELETE] = RS_OP_TICKET_DELETE,
        [ENGINE_ACQUIRE_MULTI] = RS_OP_ACQUIRE_MULTI,
    };

    return of[op];
}

/* The script's operation for a request (a ticket on several semaphores is ticket_multi). */
static rs_op_t script_op(const engine_req_t *req)
{
    return req->op == ENGINE_TICKET_CREATE && req->nparts > 0 ? RS_OP_TICKET_MULTI : op_of(req->op);
}

const char *rs__op_name(rs_op_t op)
{
    return ops[op].name;
}

int rs__op_writes(engine_op_t op)
{
    return ops[op_of(op)].writes;
}

int rs__is_lease_op(engine_op_t op)
{
    return op == ENGINE_LEASE_GET || op == ENGINE_LEASE_RENEW || op == ENGINE_LEASE_RELEASE ||
           op == ENGINE_LEASE_REVOKE;
}

int rs__is_ticket_id_op(engine_op_t op)
{
    return op == ENGINE_TICKET_GET || op == ENGINE_TICKET_DELETE;
}

/* RS_ACQ_MAP: acquire, lock_acquire and wait_idle. */
static void acquire_args(rs_t *r, const rs_req_t *rq, rs_args_t *a)
{
    const engine_req_t *req = rq->req;
    int acq = req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE;

    if (req->op == ENGINE_LOCK_ACQUIRE)
        rs__arg_i64(a, req->mode == ENGINE_MODE_SHARED ? 1 : 0);
    else
        rs__arg_i64(a, acq ? (int64_t)req->weight : 0);
    rs__arg_str(a, req->timeout_ms == 0 ? "0" : "1");
    rs__arg_i64(a, acq ? req->ttl_ms : 0);
    rs__arg_str(a, rq->lid);
    rs__arg_str(a, acq && req->owner ? req->owner : "");
    rs__arg_str(a, acq && req->idem_key ? req->idem_key : "");
    rs__arg(a, a->text,
            (size_t)snprintf(a->text, sizeof a->text, "%llu %llu %llu",
                             (unsigned long long)r->cfg.max_locks,
                             (unsigned long long)r->cfg.max_waiters_per_sem,
                             (unsigned long long)r->cfg.lock_readers));
    if (acq && req->tenant != NULL)
        rs__arg_str(a, req->tenant);
}

/* The strings of an acquire_multi's arguments beyond rs_args_t's own: each semaphore's stem
 * (new strings, freed by multi_free) and weight. */
typedef struct {
    char *stem[ENGINE_PARTS_MAX];
    char w[ENGINE_PARTS_MAX][24];
} multi_strs_t;

static void multi_free(multi_strs_t *m)
{
    for (size_t i = 0; i < ENGINE_PARTS_MAX; i++)
        sema__free(m->stem[i]);
}

/* Each semaphore's stem and weight, the end of acquire_multi's and ticket_multi's arguments. */
static void parts_args(rs_t *r, const engine_req_t *req, rs_args_t *a, multi_strs_t *m)
{
    for (size_t i = 0; i < req->nparts && i < ENGINE_PARTS_MAX; i++) {
        size_t klen;
        m->stem[i] = rs__key_new(r, 's', req->parts[i].name, req->parts[i].name_len, "", &klen);
        if (m->stem[i] == NULL) {
            a->oom = 1;
            return;
        }
        rs__arg(a, m->stem[i], klen);
        rs__arg(a, m->w[i],
                (size_t)snprintf(m->w[i], sizeof m->w[i], "%llu",
                                 (unsigned long long)req->parts[i].weight));
    }
}

/* acquire_multi: wait, ttl, lease id, owner, idem, the limits (as an acquire's), tenant, then
 * each semaphore's stem and weight. */
static void multi_args(rs_t *r, const rs_req_t *rq, rs_args_t *a, multi_strs_t *m)
{
    const engine_req_t *req = rq->req;

    rs__arg_str(a, req->timeout_ms == 0 ? "0" : "1");
    rs__arg_i64(a, req->ttl_ms);
    rs__arg_str(a, rq->lid);
    rs__arg_str(a, req->owner ? req->owner : "");
    rs__arg_str(a, req->idem_key ? req->idem_key : "");
    rs__arg(a, a->text,
            (size_t)snprintf(a->text, sizeof a->text, "%llu %llu %llu",
                             (unsigned long long)r->cfg.max_locks,
                             (unsigned long long)r->cfg.max_waiters_per_sem,
                             (unsigned long long)r->cfg.lock_readers));
    rs__arg_str(a, req->tenant ? req->tenant : "");
    parts_args(r, req, a, m);
}

/* RS_LIM_MAP, when a PUT or a resize names limits. */
static void limit_args(const engine_req_t *req, rs_args_t *a)
{
    if (req->limits == 0)
        return;
    rs__arg_i64(a, req->limits);
    rs__arg_i64(a, (int64_t)(req->limits & ENGINE_LIMIT_TENANT_MAX ? req->tenant_max : 0));
    rs__arg_i64(a, (int64_t)(req->limits & ENGINE_LIMIT_RATE ? req->rate_per_s : 0));
    rs__arg_i64(a, (int64_t)(req->limits & ENGINE_LIMIT_BURST ? req->rate_burst : 0));
}

static void op_args(rs_t *r, rs_req_t *rq, rs_args_t *a)
{
    engine_req_t *req = rq->req;

    switch (req->op) {
    case ENGINE_SEM_PUT:
    case ENGINE_LEGACY_CREATE:
        rs__arg_i64(a, (int64_t)req->capacity);
        rs__arg_i64(a, (int64_t)r->cfg.max_semaphores);
        limit_args(req, a);
        break;
    case ENGINE_SEM_RESIZE:
        rs__arg_i64(a, (int64_t)req->capacity);
        limit_args(req, a);
        break;
    case ENGINE_SEM_LIST:
    case ENGINE_LOCK_LIST:
        rs__arg_str(a, req->prefix);
        rs__arg_str(a, req->cursor);
        rs__arg_i64(a, (int64_t)req->limit);
        break;
    case ENGINE_LEASE_RENEW:
        rs__arg_i64(a, req->ttl_ms);
        break;
    case ENGINE_ACQUIRE:
    case ENGINE_LOCK_ACQUIRE:
    case ENGINE_WAIT_IDLE:
        acquire_args(r, rq, a);
        break;
    default:
        break;
    }
}

/* The key an operation names: the name index, a ticket's or a lease's id key (an id is at
 * most ENGINE_LEASE_ID_MAX bytes: a longer one names nothing), or the stem. A new string, or
 * NULL (*nomem set when out of memory). */
static char *op_key(const rs_t *r, const engine_req_t *req, size_t *klen, int *nomem)
{
    char *k;

    *nomem = 0;
    if (req->op == ENGINE_SEM_LIST || req->op == ENGINE_LOCK_LIST)
        k = rs__key_cat(req->op == ENGINE_SEM_LIST ? "sema:names" : "sema:locks", "", 0, "", klen);
    else if ((rs__is_ticket_id_op(req->op) || rs__is_lease_op(req->op)) &&
             req->id_len >= ENGINE_LEASE_ID_MAX)
        return NULL;
    else if (rs__is_ticket_id_op(req->op) || rs__is_lease_op(req->op))
        return rs__id_key(r, rs__is_lease_op(req->op) ? "id:" : "tk:", req->id, req->id_len, klen,
                          nomem);
    else {
        size_t nl;
        const char *name = rs__req_name(req, &nl);
        k = rs__key_new(r, rs__req_kind(req), name, nl, "", klen);
    }
    *nomem = k == NULL;
    return k;
}

rs_cmd_t *rs__op_cmd(rs_t *r, rs_req_t *rq, int *nomem)
{
    engine_req_t *req = rq->req;
    size_t klen;
    char *key = op_key(r, req, &klen, nomem);
    rs_args_t a = {0};
    rs_cmd_t *c;
    char tid[ENGINE_LEASE_ID_MAX], lid[ENGINE_LEASE_ID_MAX];
    multi_strs_t ms = {0};

    if (key == NULL)
        return NULL;
    if (rs__is_acquire(req->op))
        rs__id_mark(r, rq->lid, key, klen);
    rs__args_head(r, &a, key, klen, rs__op_name(script_op(req)), rq->writes ? rq->wid : "", req);
    /* (an acquire's waiter id is its request id: reads have none, and wait-idle writes) */
    if (req->op == ENGINE_TICKET_CREATE) {
        rs__ticket_args(r, req, &a, tid, lid, key, klen);
        if (req->nparts > 0)
            parts_args(r, req, &a, &ms);
    } else if (req->op == ENGINE_ACQUIRE_MULTI)
        multi_args(r, rq, &a, &ms);
    else
        op_args(r, rq, &a);
    c = rs__cmd_build(r, RS_CMD_OP, &a);
    multi_free(&ms);
    sema__free(key);
    if (c != NULL)
        c->rq = rq;
    *nomem = c == NULL;
    return c;
}

/* cancel: "d" (the client left: a grant made for it goes back) needs no request id, it can
 * run twice; "t" (its timeout came: Redis decides between timed out and granted) has one, so
 * that a retry after a lost answer reads the first decision. */
rs_cmd_t *rs__cancel_cmd(rs_t *r, const char *stem, size_t stem_len, const rs_req_t *rq,
                         const char *why, const char *rid)
{
    rs_args_t a = {0};

    rs__args_head(r, &a, stem, stem_len, rs__op_name(RS_OP_CANCEL), rid, NULL);
    rs__arg_str(&a, rq->wid);
    rs__arg_str(&a, why);
    rs__arg_str(&a, rq->lid);
    return rs__cmd_build(r, RS_CMD_CANCEL, &a);
}

void rs__send_cancel(rs_t *r, const char *stem, size_t stem_len, const rs_req_t *rq)
{
    rs_cmd_t *c = rs__cancel_cmd(r, stem, stem_len, rq, "d", "");

    if (c != NULL)
        rs__send(r, c);
}

/* A grant this instance cannot deliver goes back (drop_lease, by the lease's id key). */
void rs__send_drop(rs_t *r, const char *lid)
{
    size_t klen;
    int nomem;
    char *key = lid[0] != '\0' ? rs__id_key(r, "id:", lid, strlen(lid), &klen, &nomem) : NULL;
    rs_args_t a = {0};
    rs_cmd_t *c;

    if (key == NULL)
        return;
    rs__args_head(r, &a, key, klen, rs__op_name(RS_OP_DROP_LEASE), "", NULL);
    c = rs__cmd_build(r, RS_CMD_DROP, &a); /* (copies the key: the arguments are borrowed) */
    sema__free(key);
    if (c != NULL)
        rs__send(r, c);
}

/* A request whose client left before its reply came: what Redis did for it goes back. */
static void orphan_reply(rs_t *r, rs_req_t *rq, const redisReply *rep, const char *stem,
                         size_t slen)
{
    int64_t st = rs__el_i64(rep, RS_R_STATUS);

    if (st == RS_ST_PARKED) {
        rs__send_cancel(r, stem, slen, rq);
    } else if (st == 0 && rs__el_arr(rep, RS_R_ACTS) != NULL && rq->lid[0] != '\0') {
        rs__send_drop(r, rs__el_str(rep, RS_R_RESULT + RS_L_ID, NULL));
    }
    sema__free(rq);
}

void rs__op_reply(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_req_t *rq = c->rq;
    size_t slen;
    const char *stem = rs__el_str(rep, RS_R_STEM, &slen);
    int64_t st = rs__el_i64(rep, RS_R_STATUS);

    rs__acts_process(r, rep, 1);
    if (rq->req == NULL)
        return orphan_reply(r, rq, rep, stem, slen);
    if (st == RS_ST_GONE) { /* this instance was taken for dead: its waiters are gone */
        rs__fail(r, rq, BE_MSG_REDIS_WAITER_GONE, 0);
        rs__waiters_gone(r);
        rs__resync(r);
    } else if (st == RS_ST_PARKED) {
        rs__park(r, rq, stem, slen);
    } else if (st != 0) {
        engine_result_clear(&rq->req->res);
        rs__fail(r, rq, (be_msg_t)rs__el_i64(rep, RS_R_MSG), 1);
    } else if (rs__result_from(r, rq, rep) != 0) {
        if (rs__is_acquire(rq->req->op))
            rs__send_drop(r, rq->lid);
        engine_result_clear(&rq->req->res);
        rs__fail(r, rq, BE_MSG_NOMEM_RESULT, 0);
    } else if (rq->req->op != ENGINE_TICKET_GET || rq->req->timeout_ms <= 0 ||
               !rs__ticket_wait(r, rq)) {
        rs__finish(r, rq, 0, NULL, 1);
    }
    rs__due_rearm(r);
}

/* A little-endian double of the script's (struct '<d'). */
static double le_double(const char *p)
{
    uint64_t u = 0;
    double d;

    for (int i = 7; i >= 0; i--)
        u = u << 8 | (uint8_t)p[i];
    memcpy(&d, &u, sizeof d);
    return d;
}

/* A short path's answer (redis_proto.h: RS_SHORT_GRANT): the grant's lease is the request's,
 * with the fence and the time Redis gave. */
void rs__op_short(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_req_t *rq = c->rq;
    engine_req_t *req = rq->req;
    int64_t now = (int64_t)rs__now(r) + r->clock_off;

    if (rep->type == REDIS_REPLY_STRING || c->pk == RS_PK_ACQUIRE || c->pk == RS_PK_ACQUIRE_T) {
        uint64_t fence;
        if (rep->type == REDIS_REPLY_STRING) { /* RS_SHORT_GRANT */
            fence = (uint64_t)le_double(rep->str + 1);
            now = (int64_t)le_double(rep->str + 9);
        } else { /* the fence is in Redis's millisecond, in microseconds */
            fence = (uint64_t)rep->integer;
            now = rep->integer / 1000;
        }
        r->clock_off = now - (int64_t)rs__now(r);
        r->m->grants++;
        r->nleases++;      /* (/healthz: this instance's own change, before the next count) */
        if (req == NULL) { /* the client left: the grant goes back */
            rs__send_drop(r, rq->lid);
            sema__free(rq);
            return;
        }
        engine_lease_t *l = &req->res.lease;
        memset(l, 0, sizeof(*l));
        memcpy(l->id, rq->lid, sizeof l->id);
        l->name = req->name;
        l->name_len = req->name_len;
        l->owner = req->owner != NULL && req->owner[0] != '\0' ? req->owner : NULL;
        l->tenant = req->tenant; /* (a semaphore with limits has a short path too) */
        l->weight = req->weight;
        l->fence = fence;
        l->ttl_ms = req->ttl_ms;
        l->acquired_at_ms = now;
        l->expires_at_ms = now + req->ttl_ms;
        /* (the short path may have moved the horizon for it: its answer does not say so) */
        if (l->expires_at_ms > r->horizon_ms)
            r->horizon_ms = l->expires_at_ms;
        req->res.kind = ENGINE_RES_LEASE;
        engine__hist_observe(&r->m->wait_s, (double)(rs__now(r) - rq->since_mono) / 1000.0);
    } else {
        double held_s = (double)(now - (int64_t)rep->integer) / 1000.0;
        r->m->releases++;
        r->nleases -= r->nleases > 0;
        engine__hist_observe(&r->m->hold_s, held_s > 0 ? held_s : 0);
        if (req == NULL) {
            sema__free(rq);
            return;
        }
        req->res.kind = ENGINE_RES_NONE;
    }
    rs__finish(r, rq, 0, NULL, 1);
}
