/* SPDX-License-Identifier: MIT */
/* redis_cmd.c - the Redis back end's commands: their arguments, sending them on the
 * command connection, reading their replies, and sending again (with the same request id)
 * what a lost connection or a slow Redis left without an answer. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* ---- command arguments ---- */

void rs__arg(rs_args_t *a, const char *s, size_t len)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        const char **v = sema__realloc(a->v, (size_t)cap * sizeof(*v));
        size_t *l = v ? sema__realloc(a->l, (size_t)cap * sizeof(*l)) : NULL;
        if (v != NULL)
            a->v = v;
        if (v == NULL || l == NULL) {
            a->oom = 1;
            return;
        }
        a->l = l;
        a->cap = cap;
    }
    a->v[a->n] = s ? s : "";
    a->l[a->n++] = s ? len : 0;
}

void rs__arg_str(rs_args_t *a, const char *s)
{
    rs__arg(a, s, s ? strlen(s) : 0);
}

void rs__arg_i64(rs_args_t *a, int64_t v)
{
    char *b = a->nums[a->nn++];

    rs__arg(a, b, (size_t)snprintf(b, sizeof a->nums[0], "%lld", (long long)v));
}

void rs__args_free(rs_args_t *a)
{
    sema__free(a->v);
    sema__free(a->l);
}

/* FCALL sema 1 KEY and the head (RS_HEAD_MAP); `req` is NULL for semad's own commands (no
 * principal). The epoch and the flags are written again when the command is sent
 * (cmd_format). */
void rs__args_head(rs_t *r, rs_args_t *a, const char *key, size_t keylen, const char *op,
                   const char *rid, const engine_req_t *req)
{
    rs__arg_str(a, "FCALL");
    rs__arg_str(a, "sema");
    rs__arg_str(a, "1");
    rs__arg(a, key, keylen);
    rs__arg_str(a, op);
    rs__arg_str(a, r->epoch);
    /* (then 't' for a request naming a tenant: not packed; its acquire may still take the
     * short path of a semaphore with limits, sema.lua's SP.head) */
    if (req != NULL && req->tenant != NULL)
        rs__arg_str(a, req->principal_admin ? "1t" : "0t");
    else
        rs__arg_str(a, req != NULL && req->principal_admin ? "1" : "0");
    rs__arg_str(a, r->inst);
    rs__arg_str(a, rid);
    rs__arg_str(a, req != NULL ? req->principal : NULL);
}

/* ---- an acquire or a release in one argument (redis_proto.h: RS_PK_*) ---- */

static int arg_is(const char *s, size_t len, const char *lit)
{
    return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

/* RS_PK_ACQUIRE for an acquire naming no tenant and no Idempotency-Key (RS_PK_ACQUIRE_T: one
 * naming a tenant), RS_PK_RELEASE for a release, 0 for any other command. */
static uint8_t pk_kind(int argc, const char **v, const size_t *l)
{
    const int op = RS_FCALL_HEAD + RS_H_OP, at = RS_FCALL_HEAD + RS_HEAD_LEN;

    if ((argc == at + RS_AQ_TENANT || argc == at + RS_ACQ_LEN) &&
        arg_is(v[op], l[op], rs__op_name(RS_OP_ACQUIRE)) && l[at + RS_AQ_IDEM] == 0 &&
        l[at + RS_AQ_WAIT] == 1)
        return argc == at + RS_AQ_TENANT ? RS_PK_ACQUIRE : RS_PK_ACQUIRE_T;
    if (argc == at && arg_is(v[op], l[op], rs__op_name(RS_OP_LEASE_RELEASE)))
        return RS_PK_RELEASE;
    return 0;
}

static void pk_bytes(rs_pk_buf_t *b, const void *s, size_t n)
{
    if (b->p == NULL || (size_t)(b->end - b->p) < n) {
        b->p = NULL;
        return;
    }
    memcpy(b->p, s, n);
    b->p += n;
}

static void pk_double(rs_pk_buf_t *b, double d)
{
    unsigned char o[8];
    uint64_t u;

    memcpy(&u, &d, sizeof u);
    for (int i = 0; i < 8; i++)
        o[i] = (unsigned char)(u >> (8 * i));
    pk_bytes(b, o, sizeof o);
}

static void pk_str(rs_pk_buf_t *b, const char *s, size_t len)
{
    unsigned char h[2] = {(unsigned char)(len & 0xff), (unsigned char)(len >> 8)};

    if (len > 0xffff) {
        b->p = NULL;
        return;
    }
    pk_bytes(b, h, sizeof h);
    pk_bytes(b, s, len);
}

/* A decimal number as %llu writes it and below 2^53 (a double holds it exactly, and the script
 * writes it back the same): 0 and *out, or -1. */
static int pk_num(const char *s, size_t len, double *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 16 || (s[0] == '0' && len > 1))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v >= (uint64_t)1 << 53)
        return -1;
    *out = (double)v;
    return 0;
}

void rs__cmd_pack(const rs_cmd_t *c, const char **v, const size_t *l, int cluster, rs_pk_buf_t *b)
{
    const char **h = v + RS_FCALL_HEAD, **a = h + RS_HEAD_LEN;
    const size_t *hl = l + RS_FCALL_HEAD, *al = hl + RS_HEAD_LEN;
    const unsigned char op[2] = {c->pk, (unsigned char)(h[RS_H_FLAGS][0] + (cluster ? 2 : 0))};
    double epoch, w, ttl;

    if (c->pk == 0 || pk_num(h[RS_H_EPOCH], hl[RS_H_EPOCH], &epoch) != 0) {
        b->p = NULL;
        return;
    }
    pk_bytes(b, op, sizeof op);
    pk_double(b, epoch);
    if (c->pk == RS_PK_RELEASE) {
        pk_str(b, h[RS_H_PRINCIPAL], hl[RS_H_PRINCIPAL]);
        pk_str(b, h[RS_H_RID], hl[RS_H_RID]);
        pk_str(b, h[RS_H_INST], hl[RS_H_INST]);
        return;
    }
    if (pk_num(a[RS_AQ_WEIGHT], al[RS_AQ_WEIGHT], &w) != 0 ||
        pk_num(a[RS_AQ_TTL], al[RS_AQ_TTL], &ttl) != 0) {
        b->p = NULL;
        return;
    }
    pk_double(b, w);
    pk_double(b, ttl);
    pk_bytes(b, a[RS_AQ_WAIT], 1);
    pk_str(b, a[RS_AQ_LID], al[RS_AQ_LID]);
    pk_str(b, a[RS_AQ_OWNER], al[RS_AQ_OWNER]);
    pk_str(b, h[RS_H_PRINCIPAL], hl[RS_H_PRINCIPAL]);
    pk_str(b, h[RS_H_INST], hl[RS_H_INST]);
    pk_str(b, h[RS_H_RID], hl[RS_H_RID]);
    pk_str(b, a[RS_AQ_LIMITS], al[RS_AQ_LIMITS]);
    if (c->pk == RS_PK_ACQUIRE_T)
        pk_str(b, a[RS_AQ_TENANT], al[RS_AQ_TENANT]);
}

int rs__cmd_plain(const rs_cmd_t *c, size_t flags_len)
{
    return flags_len == (c->pk == RS_PK_ACQUIRE_T ? 2u : 1u);
}

size_t rs__cmd_pack_cap(const rs_cmd_t *c)
{
    size_t cap = 64;

    for (int i = RS_FCALL_HEAD; i < c->argc; i++)
        cap += c->lens[i] + 2;
    return cap;
}

/* FCALL sema 1 KEY and c's head and arguments packed (v, l as sent): the command's length,
 * or -1 when they do not pack or out of memory (then it goes as it is). */
static int cmd_format_packed(const rs_cmd_t *c, const char **v, const size_t *l, char **out)
{
    char stack[512], *buf = stack;
    size_t cap = rs__cmd_pack_cap(c);
    int n = -1;

    if (cap > sizeof stack && (buf = sema__malloc(cap)) == NULL)
        return -1;
    rs_pk_buf_t b = {buf, buf + cap};
    rs__cmd_pack(c, v, l, 0, &b);
    if (b.p != NULL) {
        const char *pv[RS_FCALL_HEAD + 1] = {v[0], v[1], v[2], v[3], buf};
        size_t pl[RS_FCALL_HEAD + 1] = {l[0], l[1], l[2], l[3], (size_t)(b.p - buf)};
        n = redisFormatCommandArgv(out, RS_FCALL_HEAD + 1, pv, pl);
    }
    if (buf != stack)
        sema__free(buf);
    return n;
}

rs_cmd_t *rs__cmd_new(rs_t *r, int kind, int argc, const char **argv, const size_t *argvlen)
{
    size_t bytes = (size_t)argc * sizeof(size_t);
    rs_cmd_t *c;
    char *p;

    for (int i = 0; i < argc; i++)
        bytes += argvlen[i];
    c = sema__calloc(1, sizeof(*c));
    if (c == NULL || (c->lens = sema__malloc(bytes ? bytes : 1)) == NULL) {
        sema__free(c);
        return NULL;
    }
    p = (char *)(c->lens + argc);
    for (int i = 0; i < argc; i++) {
        c->lens[i] = argvlen[i];
        memcpy(p, argv[i], argvlen[i]);
        p += argvlen[i];
    }
    c->argc = argc;
    c->script =
        argc > RS_FCALL_HEAD + RS_H_FLAGS && argvlen[0] == 5 && memcmp(argv[0], "FCALL", 5) == 0;
    c->pk = c->script && kind == RS_CMD_OP ? pk_kind(argc, argv, argvlen) : 0;
    c->kind = (uint8_t)kind;
    c->queued_mono = rs__now(r);
    elist_init(&c->link);
    return c;
}

void rs__cmd_free(rs_cmd_t *c)
{
    if (c == NULL)
        return;
    sema__free(c->lens);
    sema__free(c);
}

int rs__paused(const rs_t *r)
{
    return r->safe_at_ms > 0 && (int64_t)uv_now(r->loop) + r->clock_off < r->safe_at_ms;
}

void rs__cmd_argv(rs_t *r, const rs_cmd_t *c, const char **v, size_t *l, char *flags)
{
    const char *p = (const char *)(c->lens + c->argc);

    for (int i = 0; i < c->argc; i++) {
        v[i] = p;
        l[i] = c->lens[i];
        p += c->lens[i];
    }
    if (c->script && c->argc > RS_FCALL_HEAD + RS_HEAD_LEN - 1) {
        const size_t ep = RS_FCALL_HEAD + RS_H_EPOCH, fl = RS_FCALL_HEAD + RS_H_FLAGS;
        v[ep] = r->epoch;
        l[ep] = strlen(r->epoch);
        flags[0] = v[fl][0]; /* '0' or '1': the principal is an admin */
        l[fl] = 1;
        if (c->lens[fl] > 1 && v[fl][1] == 't') /* (a request naming a tenant) */
            flags[l[fl]++] = 't';
        /* Sent before: the script looks for the answer it may have given (a first
         * attempt cannot have one, and skips that look-up). */
        if (c->sent_mono != 0)
            flags[l[fl]++] = 'r';
        if (rs__paused(r))
            flags[l[fl]++] = 'p';
        v[fl] = flags;
    }
}

/* The command's bytes as Redis reads them, with today's epoch and flags. -1 when out of
 * memory. */
static int cmd_format(rs_t *r, const rs_cmd_t *c, char **out)
{
    const char *stackv[64],
        **v = c->argc <= 64 ? stackv : sema__malloc((size_t)c->argc * sizeof(*v));
    size_t stackl[64], *l = c->argc <= 64 ? stackl : sema__malloc((size_t)c->argc * sizeof(*l));
    char flags[8];
    int n = -1;

    if (v != NULL && l != NULL) {
        rs__cmd_argv(r, c, v, l, flags);
        if (c->pk != 0 && rs__cmd_plain(c, l[RS_FCALL_HEAD + RS_H_FLAGS]))
            n = cmd_format_packed(c, v, l, out);
        if (n < 0)
            n = redisFormatCommandArgv(out, c->argc, v, l);
    }
    if (v != stackv)
        sema__free(v);
    if (l != stackl)
        sema__free(l);
    return n;
}

/* A request id (and waiter id): this instance's id and a counter. */
void rs__next_id(rs_t *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%llu", r->inst, (unsigned long long)++r->seq);
}

/* ---- sending ---- */

void rs__send_one(rs_t *r, rs_cmd_t *c)
{
    if (r->cmd.state != RS_CONN_READY || r->resyncing || r->cmd.ac == NULL) {
        elist_push_back(&r->pending, &c->link);
        r->npending++;
        return;
    }
    if (c->script && c->unknown && c->gen != r->epoch_changes) {
        /* its answer was lost, and Redis lost its data since: whatever it did went with it,
         * and running it again on the new data would be another request (one answered
         * RS_ST_EPOCH did not run, and goes again) */
        return rs__cmd_fail(r, c, BE_MSG_REDIS_LOST_BEFORE_ANSWER);
    }
    char *bytes = NULL;
    int n = cmd_format(r, c, &bytes);

    c->gen = r->epoch_changes;
    c->sent_mono = rs__now(r);
    elist_push_back(&r->inflight, &c->link);
    r->commands++;
    if (n < 0 ||
        redisAsyncFormattedCommand(r->cmd.ac, rs__cmd_cb, c, bytes, (size_t)n) != REDIS_OK) {
        elist_remove(&c->link);
        elist_push_back(&r->pending, &c->link);
        r->npending++;
    }
    redisFreeCommand(bytes);
}

/* An acquire or a release that may share an FCALL with others of the turn: a first attempt,
 * packed, plain (no pause), on one Redis (on a cluster, calls go by slot). */
static int batchable(const rs_t *r, const rs_cmd_t *c)
{
    return c->pk != 0 && c->sent_mono == 0 && r->sh == NULL &&
           rs__cmd_plain(c, c->lens[RS_FCALL_HEAD + RS_H_FLAGS]) && !rs__paused(r);
}

void rs__send(rs_t *r, rs_cmd_t *c)
{
    if (r->sh != NULL)
        return rs__sh_send(r, c);
    if (batchable(r, c)) { /* (sent before the loop waits again: rs__prep_cb) */
        elist_push_back(&r->batch, &c->link);
        if (++r->nbatch >= RS_BATCH_MAX)
            rs__batch_flush(r);
        return;
    }
    rs__batch_flush(r); /* (what came first goes first) */
    rs__send_one(r, c);
}

/* A script sends its acts and its counts as one string each, their fields NUL-separated:
 * Redis turns every element of a script's answer into a reply element, which costs it far
 * more than the script's one concatenation. They are read as arrays all the same: while the
 * reply is read, an array stands in for each string, its fields pointing into the string
 * (where each ends at a NUL). */
enum { UNPACK_STACK = 64 };
static const size_t packed_at[2] = {RS_R_ACTS, RS_R_COUNTS};

typedef struct {
    redisReply *orig[2];
    redisReply arr[2];
    redisReply *els_stack[UNPACK_STACK];
    redisReply cells_stack[UNPACK_STACK];
    redisReply **els;
    redisReply *cells;
} unpack_t;

static size_t packed_fields(const redisReply *e)
{
    size_t n = 1;

    if (e->len == 0)
        return 0;
    for (const char *p = e->str, *end = e->str + e->len;
         (p = memchr(p, '\0', (size_t)(end - p))) != NULL; p++)
        n++;
    return n;
}

/* 1 when the reply's packed elements now read as arrays, 0 when it has none, -1 when out of
 * memory. */
static int reply_unpack(redisReply *rep, unpack_t *u)
{
    size_t need = 0, used = 0;

    u->orig[0] = u->orig[1] = NULL;
    u->els = u->els_stack;
    u->cells = u->cells_stack;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < RS_R_RESULT)
        return 0;
    for (int k = 0; k < 2; k++) {
        if (rep->element[packed_at[k]]->type != REDIS_REPLY_STRING)
            return 0;
        need += packed_fields(rep->element[packed_at[k]]);
    }
    if (need > UNPACK_STACK) {
        u->els = sema__malloc(need * sizeof(*u->els));
        u->cells = sema__calloc(need, sizeof(*u->cells));
        if (u->els == NULL || u->cells == NULL) {
            sema__free(u->els);
            sema__free(u->cells);
            u->els = NULL;
            u->cells = NULL;
            return -1;
        }
    }
    for (int k = 0; k < 2; k++) {
        redisReply *e = rep->element[packed_at[k]], *a = &u->arr[k];
        size_t n = packed_fields(e);
        const char *p = e->str, *end = e->str + e->len;

        memset(a, 0, sizeof(*a));
        a->type = REDIS_REPLY_ARRAY;
        a->elements = n;
        a->element = u->els + used;
        for (size_t i = 0; i < n; i++) {
            const char *z = memchr(p, '\0', (size_t)(end - p));
            redisReply *cell = &u->cells[used];

            memset(cell, 0, sizeof(*cell));
            cell->type = REDIS_REPLY_STRING;
            cell->str = (char *)p;
            cell->len = (size_t)((z != NULL ? z : end) - p);
            u->els[used++] = cell;
            p += cell->len + 1;
        }
        u->orig[k] = e;
        rep->element[packed_at[k]] = a;
    }
    return 1;
}

static void reply_repack(redisReply *rep, unpack_t *u)
{
    for (int k = 0; k < 2; k++)
        if (u->orig[k] != NULL)
            rep->element[packed_at[k]] = u->orig[k];
    if (u->els != u->els_stack) {
        sema__free(u->els);
        sema__free(u->cells);
    }
}

rs_cmd_t *rs__cmd_build(rs_t *r, int kind, rs_args_t *a)
{
    rs_cmd_t *c = a->oom ? NULL : rs__cmd_new(r, kind, a->n, a->v, a->l);

    rs__args_free(a);
    return c;
}

void rs__send_plain(rs_t *r, rs_args_t *a)
{
    rs_cmd_t *c = rs__cmd_build(r, RS_CMD_PLAIN, a);

    if (c != NULL)
        rs__send(r, c);
}

int rs__reply_is(const redisReply *rep, const char *prefix)
{
    return rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, prefix, strlen(prefix)) == 0;
}

/* A command that must go again after the script is loaded or the epoch read again. */
static void retry_after_resync(rs_t *r, rs_cmd_t *c)
{
    elist_push_back(&r->retry, &c->link);
    rs__resync(r);
}

void rs__cmd_fail(rs_t *r, rs_cmd_t *c, be_msg_t why)
{
    rs_req_t *rq = c->rq;

    if (c->kind == RS_CMD_SWEEP && r->sh != NULL) {
        rs__sh_sweep_failed(r, c); /* (its slot's, again soon) */
    } else if (c->kind == RS_CMD_SWEEP) {
        r->sweeping = 0;
        r->sweep_at = rs__now(r) + 100; /* try again soon */
    }
    if (c->kind == RS_CMD_COLLECT && c->sem != NULL) {
        c->sem->collecting = 0;
        rs__sem_maybe_free(r, c->sem);
    } else if (c->kind == RS_CMD_COLLECT && r->sh != NULL) {
        rs__sh_beat_done(r, c); /* its slot beats again at the next heartbeat */
    } else if (c->kind == RS_CMD_COLLECT) {
        r->beating = 0; /* the next heartbeat beats again */
    }
    if (c->kind == RS_CMD_CANCEL && rq != NULL) {
        rs__unpark(r, rq);
        rs__fail(r, rq, why, 0);
    }
    if (c->kind == RS_CMD_READ) {
        c->done(r, c, NULL);
    } else if (c->kind == RS_CMD_OP && rq != NULL) {
        if (rq->req == NULL) {
            sema__free(rq);
        } else {
            engine_result_clear(&rq->req->res);
            rs__fail(r, rq, why, 0);
        }
    }
    rs__cmd_free(c);
}

/* A beat answered (c->sem NULL), or the check of one semaphore's waiters. */
static void collect_done(rs_t *r, rs_cmd_t *c, redisReply *rep)
{
    rs_sem_t *s = c->sem;

    if (rs__el_i64(rep, RS_R_STATUS) == RS_ST_GONE && r->sh != NULL) {
        rs__sh_gone(r, c->slot);
    } else if (rs__el_i64(rep, RS_R_STATUS) == RS_ST_GONE) {
        /* taken for dead (paused past the alive bound): its waiters were pruned */
        log_warn("redis: this instance was taken for dead: its parked requests are answered "
                 "503 and it says hello again");
        rs__waiters_gone(r);
        rs__resync(r);
    } else {
        rs__acts_process(r, rep, 1);
    }
    if (s == NULL && r->sh != NULL) {
        rs__sh_beat_done(r, c);
    } else if (s == NULL) {
        r->beating = 0;
        if (r->beat_again)
            rs__beat(r);
    } else {
        s->collecting = 0;
        rs__sem_maybe_free(r, s);
    }
    rs__due_rearm(r);
}

int rs__reply_short(const rs_cmd_t *c, const redisReply *rep)
{
    return (rep->type == REDIS_REPLY_STRING && rep->len == 17 && rep->str[0] == RS_SHORT_GRANT) ||
           (rep->type == REDIS_REPLY_INTEGER && c->pk != 0);
}

static void on_reply(rs_t *r, rs_cmd_t *c, redisReply *rep)
{
    if (rs__reply_is(rep, "NOSCRIPT") || rs__reply_is(rep, "ERR Function not found") ||
        (rep->type == REDIS_REPLY_ARRAY && rs__el_i64(rep, RS_R_STATUS) == RS_ST_EPOCH)) {
        /* the library or the epoch changed: the resync's hello tells what */
        return retry_after_resync(r, c);
    }
    if (rs__reply_is(rep, "READONLY") || rs__reply_is(rep, "LOADING") ||
        rs__reply_is(rep, "MASTERDOWN")) {
        /* a demoted primary, or one that is starting: ask again (Sentinel) and retry */
        elist_push_back(&r->retry, &c->link);
        rs__conn_drop(r, rep->str);
        return;
    }
    if (c->kind == RS_CMD_OP && rs__reply_short(c, rep)) {
        rs__op_short(r, c, rep); /* an uncontended acquire or release */
        rs__cmd_free(c);
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR ||
        (rep->type != REDIS_REPLY_ARRAY && c->kind != RS_CMD_PLAIN && c->kind != RS_CMD_MARK &&
         c->kind != RS_CMD_READ)) {
        log_warn("redis: a command failed: %s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        return rs__cmd_fail(r, c, BE_MSG_REDIS_REFUSED);
    }
    if (c->kind != RS_CMD_PLAIN && c->kind != RS_CMD_MARK && c->kind != RS_CMD_READ) {
        const redisReply *n = rs__el_arr(rep, RS_R_COUNTS);
        if (r->sh != NULL) {
            rs__sh_told(r, c, n, rs__el_i64(rep, RS_R_NOW)); /* (of its slot) */
        } else {
            r->nsems = (uint64_t)rs__el_i64(n, RS_C_SEMS);
            r->nleases = (uint64_t)rs__el_i64(n, RS_C_LEASES);
            r->nlocks = (uint64_t)rs__el_i64(n, RS_C_LOCKS);
            if (c->kind == RS_CMD_SWEEP)
                r->sweeping = 0;
            rs__sweep_set(r, rs__el_i64(n, RS_C_DUE_HEAD), rs__el_i64(rep, RS_R_NOW));
        }
        if (rs__el_i64(rep, RS_R_NOW) > 0)
            r->clock_off = rs__el_i64(rep, RS_R_NOW) - (int64_t)rs__now(r);
        if (rs__el_i64(n, RS_C_HORIZON) > r->horizon_ms)
            r->horizon_ms = rs__el_i64(n, RS_C_HORIZON);
    }
    switch (c->kind) {
    case RS_CMD_PLAIN:
        break;
    case RS_CMD_MARK:
        rs__ev_marked(r, c, rep);
        break;
    case RS_CMD_READ:
        c->done(r, c, rep);
        break;
    case RS_CMD_OP:
        rs__op_reply(r, c, rep);
        break;
    case RS_CMD_COLLECT:
        collect_done(r, c, rep);
        break;
    case RS_CMD_CANCEL:
    case RS_CMD_DROP:
        rs__acts_process(r, rep, 1);
        if (c->kind == RS_CMD_CANCEL)
            rs__timeout_cancel_done(r, c);
        rs__due_rearm(r);
        if (r->strict && r->replicas > 0 && !c->timed) {
            /* an undo holds until a WAIT confirms it, and goes again if one comes back short
             * (a primary that lost its replicas may be demoted, and its writes with it) */
            c->wnode = r->ans_node; /* (on a cluster: that primary's WAIT confirms it) */
            c->wconn = r->ans_conn;
            elist_push_back(&r->unconfirmed, &c->link);
            return;
        }
        break;
    default:
        rs__acts_process(r, rep, 1);
        break;
    }
    rs__cmd_free(c);
}

void rs__cmd_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *conn = ac->data;
    rs_t *r = conn->r;
    rs_cmd_t *c = priv;

    elist_remove(&c->link);
    if (c->kind == RS_CMD_BATCH)
        return rs__batch_reply(r, c, reply);
    if (reply == NULL) {
        rs__cmd_lost(r, c);
        return;
    }
    r->replies++;
    rs__cmd_reply(r, c, reply);
}

void rs__cmd_reply(rs_t *r, rs_cmd_t *c, redisReply *reply)
{
    int script = c->script;
    unpack_t u;

    r->contact_mono = rs__now(r);
    if (script && reply_unpack(reply, &u) < 0) {
        /* its answer cannot be read: asked again with its request id, it is told again */
        log_warn("redis: out of memory reading an answer; the command goes again");
        retry_after_resync(r, c);
        return;
    }
    on_reply(r, c, reply); /* may free c */
    if (script)
        reply_repack(reply, &u);
    rs__drain(r);
}

/* A command from its arguments (copied; NULL when out of memory). */
/* The connection went with `c` unanswered: it goes again, with the same request id, once
 * the connection is back (the tick fails it if that takes too long). */
void rs__cmd_lost(rs_t *r, rs_cmd_t *c)
{
    if (r->closing || c->kind == RS_CMD_WAIT) {
        if (c->kind == RS_CMD_WAIT)
            r->wait_inflight = 0;
        return rs__cmd_fail(r, c, BE_MSG_REDIS_LOST_ANSWER);
    }
    if (c->kind == RS_CMD_COLLECT && c->sem != NULL) {
        c->sem->collecting = 0; /* checked again once the connection is back */
        rs__cmd_free(c);
        return;
    }
    /* (a beat goes again with its request id: what it handed over is in its kept answer) */
    r->unknown_outcomes += c->kind == RS_CMD_OP;
    c->unknown = 1;
    if (r->sh != NULL) { /* (sent again at the next tick, rs__sh_flush) */
        if (c->kind == RS_CMD_SWEEP)
            rs__sh_sweep_lost(r, c); /* (one node's connection: no reconnect checks them all) */
        elist_push_back(&r->pending, &c->link);
        r->npending++;
        return;
    }
    elist_push_back(&r->retry, &c->link);
}

/* A request that may wait (an acquire with a timeout, a wait-idle): while Redis does not
 * answer, it waits as a parked request does. */
static int may_wait(const engine_req_t *req)
{
    return (rs__is_acquire(req->op) || req->op == ENGINE_WAIT_IDLE) && req->timeout_ms != 0;
}

/* What must go until its outcome is known, however long Redis takes: the cancels and drops
 * that undo, and every write that was sent (its reply is undone or dropped when it comes, see
 * orphan_reply). */
static int keep_cmd(const rs_cmd_t *c)
{
    if (c->kind == RS_CMD_CANCEL || c->kind == RS_CMD_DROP)
        return 1;
    return c->kind == RS_CMD_OP && c->sent_mono != 0 && c->rq != NULL && c->rq->writes;
}

/* Answer the client of a sent write whose outcome is unknown (503), and keep its command going
 * without it: a copy of its ids stands in for the request. 0, or -1 when out of memory. */
static int detach(rs_t *r, rs_cmd_t *c)
{
    rs_req_t *rq = c->rq, *o = sema__calloc(1, sizeof(*o));

    if (o == NULL)
        return -1;
    elist_init(&o->link);
    elist_init(&o->plink);
    o->hi.idx = EHEAP_NONE;
    o->writes = rq->writes;
    memcpy(o->wid, rq->wid, sizeof o->wid);
    memcpy(o->lid, rq->lid, sizeof o->lid);
    c->rq = o;
    engine_result_clear(&rq->req->res);
    rs__fail(r, rq, BE_MSG_REDIS_NO_ANSWER_RETRIED, 0);
    return 0;
}

/* A lease's end sent again (an undone grant, a client's release) older than the longest ttl
 * and a second: the lease has expired on every replica by then, so the command need not be
 * kept while Redis or its replicas stay away. Bounds what such commands hold to a max ttl's
 * worth. (A waiter's cancel is kept: nothing expires a waiter whose instance lives.) */
int rs__undo_moot(const rs_t *r, const rs_cmd_t *c, uint64_t now)
{
    return c->kind == RS_CMD_DROP && c->queued_mono + (uint64_t)r->cfg.max_ttl_ms + 1000u <= now;
}

/* While Redis is unreachable: answer what was queued too long (503), except what may wait,
 * and keep going what must (keep_cmd). */
static void fail_old(rs_t *r, elist_t *list, uint64_t now)
{
    for (elist_t *x = list->next, *next; x != list; x = next) {
        rs_cmd_t *c = ECONTAINER(x, rs_cmd_t, link);
        next = x->next;
        if (c->queued_mono + r->cmd_timeout_ms > now && !r->closing)
            continue;
        if (!r->closing && keep_cmd(c) && !rs__undo_moot(r, c, now)) {
            if (c->kind == RS_CMD_OP && c->rq->req != NULL && !may_wait(c->rq->req) &&
                detach(r, c) != 0)
                goto fail;
            continue;
        }
    fail:
        elist_remove(&c->link);
        if (list == &r->pending && r->npending > 0)
            r->npending--;
        rs__cmd_fail(r, c, c->sent_mono != 0 ? BE_MSG_REDIS_NO_ANSWER : BE_MSG_REDIS_UNREACHABLE);
    }
}

void rs__tick_cb(uv_timer_t *t)
{
    rs_t *r = t->data;
    uint64_t now = rs__now(r);

    if (r->sh != NULL) { /* (the cluster keeps each command's deadline) */
        fail_old(r, &r->pending, now);
        rs__sh_tick(r, now); /* (a handover's questions past their deadline) */
        rs__sh_flush(r);
        rs__list_tick(r, now);
        rs__drain(r);
        return;
    }
    rs__conn_tick(r, now);
    if (!elist_empty(&r->inflight)) {
        rs_cmd_t *c = ECONTAINER(r->inflight.next, rs_cmd_t, link);
        if (c->sent_mono + r->cmd_timeout_ms <= now) {
            r->cmd_timeouts++;
            rs__conn_drop(r, "a command got no answer in time");
        }
    }
    if (r->cmd.state != RS_CONN_READY || r->resyncing) {
        fail_old(r, &r->retry, now);
        fail_old(r, &r->pending, now);
    }
    rs__drain(r);
}
