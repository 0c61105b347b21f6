/* SPDX-License-Identifier: MIT */
/* redis.c - the engine's Redis back end ("redis://..."): every operation is one FCALL of the
 * Lua library sema.lua on Redis, which holds the state. This instance keeps its requests in
 * flight, its parked waiters (woken by PUBLISH, collected on a heartbeat as a fallback), a
 * timer for the earliest due time in Redis, and strict durability's WAIT. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "common/log.h"
#include "engine/engine_limits.h"

uint64_t rs__now(rs_t *r)
{
    return uv_now(r->loop);
}

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

/* "sema:{tag}K:name" in buf (cap bytes); returns its length, 0 if it does not fit. */
static size_t stem_make(char *buf, size_t cap, char kind, const char *name, size_t len)
{
    int n = snprintf(buf, cap, "sema:{%08x}%c:", tag_hash(kind, name, len), kind);

    if (n < 0 || (size_t)n + len + 1 > cap)
        return 0;
    memcpy(buf + n, name, len);
    buf[(size_t)n + len] = '\0';
    return (size_t)n + len;
}

#define STEM_HEAD RS_STEM_HEAD

size_t rs__stem(char *buf, size_t cap, char kind, const char *name, size_t len)
{
    return stem_make(buf, cap, kind, name, len);
}

/* ---- command arguments ---- */

typedef struct {
    const char **v;
    size_t *l;
    int n, cap, oom;
    char nums[16][24];
    int nn;
} rargs_t;

static void a_add(rargs_t *a, const char *s, size_t len)
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

static void a_str(rargs_t *a, const char *s)
{
    a_add(a, s, s ? strlen(s) : 0);
}

static void a_i64(rargs_t *a, int64_t v)
{
    char *b = a->nums[a->nn++];

    a_add(a, b, (size_t)snprintf(b, sizeof a->nums[0], "%lld", (long long)v));
}

static void a_free(rargs_t *a)
{
    sema__free(a->v);
    sema__free(a->l);
}

/* FCALL sema 1 KEY op epoch inst rid alive principal flags; `req` is NULL for semad's own
 * commands (no principal). flags: '1' when the principal is an admin, else '0'; then 'r' when
 * the command is sent again (cmd_format). */
static void a_head(rs_t *r, rargs_t *a, const char *key, size_t keylen, const char *op,
                   const char *rid, const engine_req_t *req)
{
    a_str(a, "FCALL");
    a_str(a, "sema");
    a_str(a, "1");
    a_add(a, key, keylen);
    a_str(a, op);
    a_str(a, r->epoch);
    a_str(a, r->inst);
    a_str(a, rid);
    a_i64(a, RS_ALIVE_MS);
    a_str(a, req != NULL ? req->principal : NULL);
    a_str(a, req != NULL && req->principal_admin ? "1" : "0");
}

rcmd_t *rs__cmd_new(rs_t *r, int kind, int argc, const char **argv, const size_t *argvlen)
{
    size_t bytes = (size_t)argc * sizeof(size_t);
    rcmd_t *c;
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
    c->script = argc > 5 && argvlen[0] == 5 && memcmp(argv[0], "FCALL", 5) == 0;
    c->kind = (uint8_t)kind;
    c->queued_mono = rs__now(r);
    elist_init(&c->link);
    return c;
}

void rs__cmd_free(rcmd_t *c)
{
    if (c == NULL)
        return;
    sema__free(c->lens);
    sema__free(c);
}

/* The command's bytes as Redis reads them, with today's SHA and epoch. -1 when out of memory. */
static int cmd_format(rs_t *r, const rcmd_t *c, char **out)
{
    const char *stackv[64],
        **v = c->argc <= 64 ? stackv : sema__malloc((size_t)c->argc * sizeof(*v));
    size_t stackl[64], *l = c->argc <= 64 ? stackl : sema__malloc((size_t)c->argc * sizeof(*l));
    const char *p = (const char *)(c->lens + c->argc);
    int n = -1;

    if (v != NULL && l != NULL) {
        for (int i = 0; i < c->argc; i++) {
            v[i] = p;
            l[i] = c->lens[i];
            p += c->lens[i];
        }
        if (c->script) {
            v[5] = r->epoch;
            l[5] = strlen(r->epoch);
            /* Sent before: the script looks for the answer it may have given (a first
             * attempt cannot have one, and skips that look-up). */
            if (c->sent_mono != 0 && c->argc > 10 && l[10] == 1) {
                v[10] = v[10][0] == '1' ? "1r" : "0r";
                l[10] = 2;
            }
        }
        n = redisFormatCommandArgv(out, c->argc, v, l);
    }
    if (v != stackv)
        sema__free(v);
    if (l != stackl)
        sema__free(l);
    return n;
}

/* A request id (and waiter id): this instance's id and a counter. */
static void next_id(rs_t *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%llu", r->inst, (unsigned long long)++r->seq);
}

/* ---- completion ---- */

static const char *const known_msgs[] = {
    "no such semaphore",
    "no such lease",
    "no such lock key (not held or awaited)",
    "the semaphore exists with another capacity",
    "the semaphore already exists",
    "too many semaphores",
    "too many parked requests",
    "weight must be between 1 and the capacity",
    "not available without waiting",
    "not idle",
    "Semaphore locked",
    "value would exceed 2^53",
    "the lease was already released",
    "the lease expired",
    "the lease was revoked",
    "the lease's semaphore was deleted",
    "this Idempotency-Key names a request of another weight (or lock mode); nothing was granted",
    "Redis lost its state; grants resume once every lease it held has run out",
    "too many lock keys",
    "the lease was taken by another token (only its token or an admin may end it)",
    "the Idempotency-Key names a request of another token",
    "no such ticket",
    "this Idempotency-Key names a ticket; nothing was granted",
    "the ticket belongs to another token",
    "this Idempotency-Key names another request (or a ticket of another weight)",
    "the ticket left the line",
    "the ticket was dropped: nobody read it for keepalive_ms",
    "the ticket's lease was released: nobody collected it within keepalive_ms",
    "the ticket's lease has ended",
    "the ticket's semaphore was deleted",
    "the ticket can no longer be granted (its weight is above the capacity now, or memory "
    "ran out)",
};

/* The script's message as static text (a request's message must outlive the reply). */
static const char *static_msg(const char *m)
{
    if (m == NULL || m[0] == '\0')
        return NULL;
    for (size_t i = 0; i < sizeof known_msgs / sizeof known_msgs[0]; i++)
        if (strcmp(known_msgs[i], m) == 0)
            return known_msgs[i];
    return "refused by the Redis back end";
}

static const char *fail_msg(int code)
{
    switch (code) {
    case SEMA_ECANCELED:
        return "the semaphore was deleted";
    case SEMA_EINVAL:
        return "weight is above the new capacity";
    case SEMA_ETIMEDOUT:
        return "not granted before timeout_ms";
    case SEMA_EREPLACED:
        return "replaced by a newer attempt with the same Idempotency-Key, which now waits in "
               "its place";
    default:
        return "the request failed";
    }
}

static void watch_off(rs_t *r, rreq_t *rq)
{
    if (rq->sem == NULL && !elist_empty(&rq->plink)) {
        elist_remove(&rq->plink);
        r->nwatch--;
    }
}

static void finish(rs_t *r, rreq_t *rq, int status, const char *msg, int hold)
{
    engine_req_t *req = rq->req;

    watch_off(r, rq);
    req->status = status;
    req->message = msg;
    rq->state = RQ_READY;
    if (hold && r->strict && r->replicas > 0) {
        elist_push_back(&r->held, &rq->link);
        r->wait_needed = 1;
    } else {
        elist_push_back(&r->ready, &rq->link);
    }
}

void rs__drain(rs_t *r)
{
    if (r->draining)
        return;
    r->draining = 1;
    for (;;) {
        if (!elist_empty(&r->ready)) {
            rreq_t *rq = ECONTAINER(r->ready.next, rreq_t, link);
            engine_req_t *req = rq->req;
            elist_remove(&rq->link);
            sema__free(rq);
            engine__complete(r->front, req);
        } else if (!engine__deliver_event(r->front)) {
            break;
        }
    }
    r->draining = 0;
}

/* ---- reading replies ----
 * A script's reply: status, message, Redis's clock (ms), the next due time (ms, 0: none),
 * acts, the stem, the counts (semaphores, leases, lock keys; then the earliest due time of
 * all and the lease horizon), then the op's result from RES. The acts and the counts come
 * packed in one string each (reply_unpack). */
enum { RES = 7 };

static const char *el_str(const redisReply *a, size_t i, size_t *len)
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

static int64_t el_i64(const redisReply *a, size_t i)
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

static const redisReply *el_arr(const redisReply *a, size_t i)
{
    if (a == NULL || a->type != REDIS_REPLY_ARRAY || i >= a->elements ||
        a->element[i]->type != REDIS_REPLY_ARRAY)
        return NULL;
    return a->element[i];
}

/* A lease from 8 fields at `at`: id, weight, fence, ttl, acquired, expires, owner, mode. */
static int lease_from(engine_result_t *res, engine_lease_t *l, const redisReply *a, size_t at)
{
    size_t n;
    const char *id = el_str(a, at, &n);
    const char *owner;

    memset(l, 0, sizeof(*l));
    if (n >= sizeof l->id)
        n = sizeof l->id - 1;
    memcpy(l->id, id, n);
    l->id[n] = '\0';
    l->weight = (uint64_t)el_i64(a, at + 1);
    l->fence = (uint64_t)el_i64(a, at + 2);
    l->ttl_ms = el_i64(a, at + 3);
    l->acquired_at_ms = el_i64(a, at + 4);
    l->expires_at_ms = el_i64(a, at + 5);
    owner = el_str(a, at + 6, &n);
    l->owner = NULL;
    if (n > 0 && (l->owner = engine_result_strdup(res, owner, n)) == NULL)
        return -1;
    l->mode = (int)el_i64(a, at + 7);
    return 0;
}

/* The name in a stem "sema:{tag}K:name". */
static const char *stem_name(const char *stem, size_t len, size_t *nlen, char *kind)
{
    if (len < STEM_HEAD) {
        *nlen = 0;
        *kind = 0;
        return "";
    }
    *kind = stem[STEM_HEAD - 2];
    *nlen = len - STEM_HEAD;
    return stem + STEM_HEAD;
}

/* ---- local semaphores: where this instance has parked requests or event subscribers ---- */

static int rsem_eq(const enode_t *n, const void *key, size_t len)
{
    const rsem_t *s = ECONTAINER(n, rsem_t, node);
    return s->stem_len == len && memcmp(s->stem, key, len) == 0;
}

static rsem_t *rsem_find(rs_t *r, const char *stem, size_t len)
{
    enode_t *n = etab_find(&r->sems, etab_hash(stem, len, 7), rsem_eq, stem, len);
    return n ? ECONTAINER(n, rsem_t, node) : NULL;
}

static rsem_t *rsem_get(rs_t *r, const char *stem, size_t len)
{
    rsem_t *s = rsem_find(r, stem, len);

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

rsem_t *rs__sem_find(rs_t *r, const char *stem, size_t len)
{
    return rsem_find(r, stem, len);
}

static void rsem_maybe_free(rs_t *r, rsem_t *s)
{
    if (s->nparked > 0 || s->watched || s->collecting)
        return;
    etab_remove(&r->sems, &s->node);
    sema__free(s);
}

/* ---- timers: rsem due times and parked timeouts share one uv timer ---- */

static void due_cb(uv_timer_t *t);

static void due_rearm(rs_t *r)
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
    uv_timer_start(&r->due_timer, due_cb, d > now ? d - now : 0, 0);
}

/* The earliest due time in Redis (ms on its clock): the sweep timer fires then. */
static void sweep_set(rs_t *r, int64_t due_ms, int64_t redis_now)
{
    uint64_t at;

    if (due_ms <= 0)
        return;
    at = rs__now(r) + (uint64_t)(due_ms > redis_now ? due_ms - redis_now : 0) + 1;
    if (at >= r->sweep_at && r->sweep_at > rs__now(r))
        return;
    r->sweep_at = at;
    due_rearm(r);
}

/* ---- parked requests ---- */

static int wid_eq(const enode_t *n, const void *key, size_t len)
{
    const rreq_t *q = ECONTAINER(n, rreq_t, node);
    return strlen(q->wid) == len && memcmp(q->wid, key, len) == 0;
}

static rreq_t *parked_find(rs_t *r, const char *wid, size_t len)
{
    enode_t *n = etab_find(&r->waiters, etab_hash(wid, len, 3), wid_eq, wid, len);
    return n ? ECONTAINER(n, rreq_t, node) : NULL;
}

static void unpark(rs_t *r, rreq_t *rq)
{
    rsem_t *s = rq->sem;

    if (rq->cancel != NULL) {
        rq->cancel->rq = NULL; /* its timeout's cancel finds it answered */
        rq->cancel = NULL;
    }
    etab_remove(&r->waiters, &rq->node);
    elist_remove(&rq->plink);
    eheap_remove(&r->theap, &rq->hi);
    s->nparked--;
    r->nparked--;
    rq->sem = NULL;
    rq->state = 0;
    rsem_maybe_free(r, s);
}

static void send_cancel(rs_t *r, const char *stem, size_t stem_len, const rreq_t *rq);

static void park(rs_t *r, rreq_t *rq, const char *stem, size_t stem_len)
{
    engine_req_t *req = rq->req;
    rsem_t *s = rsem_get(r, stem, stem_len);

    if (s == NULL || (r->cfg.max_waiters_total && r->nparked >= r->cfg.max_waiters_total)) {
        send_cancel(r, stem, stem_len, rq);
        finish(r, rq, s == NULL ? SEMA_ENOMEM : SEMA_ELIMIT,
               s == NULL ? "out of memory" : "too many parked requests", 0);
        return;
    }
    rq->state = RQ_PARKED;
    rq->sem = s;
    rq->node.hash = etab_hash(rq->wid, strlen(rq->wid), 3);
    etab_insert(&r->waiters, &rq->node);
    elist_push_back(&s->parked, &rq->plink);
    s->nparked++;
    r->nparked++;
    rq->hi.idx = EHEAP_NONE;
    rq->hi.kind = EITEM_WAITER;
    if (req->timeout_ms > 0 && (uint64_t)req->timeout_ms < UINT64_MAX / 2) {
        rq->hi.deadline = rq->since_mono + (uint64_t)req->timeout_ms;
        if (eheap_push(&r->theap, &rq->hi) != 0)
            rq->hi.idx = EHEAP_NONE;
    }
    due_rearm(r);
}

/* ---- sending ---- */

static void fail_cmd(rs_t *r, rcmd_t *c, int status, const char *msg);

void rs__send(rs_t *r, rcmd_t *c)
{
    if (r->cmd.state != RS_READY || r->resyncing || r->cmd.ac == NULL) {
        elist_push_back(&r->pending, &c->link);
        r->npending++;
        return;
    }
    if (c->script && c->sent_mono != 0 && c->gen != r->epoch_changes) {
        /* sent before Redis lost its data: whatever it did went with it, and running it
         * again on the new data would be another request */
        return fail_cmd(r, c, SEMA_EUNAVAIL,
                        "Redis lost its state before answering (restarted without persistence, "
                        "or flushed): the request is void, nothing of it remains");
    }
    char *bytes = NULL;
    int n = cmd_format(r, c, &bytes);

    if (c->sent_mono == 0)
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

/* A script sends its acts and its counts as one string each, their fields NUL-separated:
 * Redis turns every element of a script's answer into a reply element, which costs it far
 * more than the script's one concatenation. They are read as arrays all the same: while the
 * reply is read, an array stands in for each string, its fields pointing into the string
 * (where each ends at a NUL). */
enum { UNPACK_STACK = 64 };
static const size_t packed_at[2] = {4, 6};

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
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < RES)
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

static void retry_after_resync(rs_t *r, rcmd_t *c);

void rs__cmd_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rconn_t *conn = ac->data;
    rs_t *r = conn->r;
    rcmd_t *c = priv;
    int script = c->script;
    unpack_t u;

    elist_remove(&c->link);
    if (reply == NULL) {
        rs__cmd_lost(r, c);
        return;
    }
    r->replies++;
    if (script && reply_unpack(reply, &u) < 0) {
        /* its answer cannot be read: asked again with its request id, it is told again */
        log_warn("redis: out of memory reading an answer; the command goes again");
        retry_after_resync(r, c);
        return;
    }
    rs__on_reply(r, c, reply); /* may free c */
    if (script)
        reply_repack(reply, &u);
    rs__drain(r);
}

/* A command from its arguments (copied; NULL when out of memory). */
static rcmd_t *cmd_build(rs_t *r, int kind, rargs_t *a)
{
    rcmd_t *c = a->oom ? NULL : rs__cmd_new(r, kind, a->n, a->v, a->l);

    a_free(a);
    return c;
}

static void send_plain(rs_t *r, rargs_t *a)
{
    rcmd_t *c = cmd_build(r, RC_PLAIN, a);

    if (c != NULL)
        rs__send(r, c);
}

/* cancel: "d" (the client left: a grant made for it goes back) needs no request id, it can
 * run twice; "t" (its timeout came: Redis decides between timed out and granted) has one, so
 * that a retry after a lost answer reads the first decision. */
static rcmd_t *cancel_cmd(rs_t *r, const char *stem, size_t stem_len, const rreq_t *rq,
                          const char *why, const char *rid)
{
    rargs_t a = {0};

    a_head(r, &a, stem, stem_len, "cancel", rid, NULL);
    a_str(&a, rq->wid);
    a_str(&a, why);
    a_str(&a, rq->lid);
    return cmd_build(r, RC_CANCEL, &a);
}

static void send_cancel(rs_t *r, const char *stem, size_t stem_len, const rreq_t *rq)
{
    rcmd_t *c = cancel_cmd(r, stem, stem_len, rq, "d", "");

    if (c != NULL)
        rs__send(r, c);
}

/* A grant this instance cannot deliver goes back. */
static void send_drop(rs_t *r, const char *name, size_t len, int lock, const char *lid)
{
    char stem[STEM_HEAD + 65536];
    size_t sl = stem_make(stem, sizeof stem, lock ? 'k' : 's', name, len);
    rargs_t a = {0};
    rcmd_t *c;

    if (sl == 0)
        return;
    a_head(r, &a, stem, sl, "drop_lease", "", NULL);
    a_str(&a, lid);
    c = cmd_build(r, RC_DROP, &a);
    if (c != NULL)
        rs__send(r, c);
}

static void collect(rs_t *r, rsem_t *s, int with_wids)
{
    rargs_t a = {0};
    char rid[64];
    rcmd_t *c;
    int n = 0;

    if (s->collecting) {
        s->collect_again = 1;
        return;
    }
    next_id(r, rid, sizeof rid);
    a_head(r, &a, s->stem, s->stem_len, "collect", rid, NULL);
    if (with_wids)
        for (elist_t *x = s->parked.next; x != &s->parked && n < RS_COLLECT_WIDS; x = x->next, n++)
            a_str(&a, ECONTAINER(x, rreq_t, plink)->wid);
    c = cmd_build(r, RC_COLLECT, &a);
    if (c == NULL)
        return;
    c->sem = s;
    s->collecting = 1;
    s->collect_again = 0;
    r->collects++;
    rs__send(r, c);
}

static void collect_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rsem_t *s = ECONTAINER(n, rsem_t, node);

    if (s->nparked > 0)
        collect(r, s, 1);
}

void rs__collect_all(rs_t *r)
{
    etab_each(&r->sems, collect_each, r);
}

/* ---- acts: what a script did, in order ---- */

enum { ACT_LEN = RS_ACT_LEN };

/* The public event types, as the static strings the front keeps. */
static const char *event_type(const char *t)
{
    static const char *const types[] = {"granted", "released", "expired",
                                        "revoked", "resized",  "deleted"};

    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i], t) == 0)
            return types[i];
    return NULL;
}

int rs__act_is_event(const char *type)
{
    return event_type(type) != NULL;
}

int rs__act_to_event(const redisReply *acts, size_t i, const char *name, size_t nlen,
                     engine_result_t *scratch, engine_event_t *ev, engine_lease_t *l)
{
    const char *type = event_type(el_str(acts, i, NULL));

    memset(ev, 0, sizeof(*ev));
    if (type == NULL)
        return -1;
    ev->type = type;
    ev->name = name;
    ev->name_len = nlen;
    if (strcmp(type, "resized") == 0) {
        ev->capacity = (uint64_t)el_i64(acts, i + 10);
    } else if (strcmp(type, "deleted") != 0) {
        if (lease_from(scratch, l, acts, i + 3) != 0)
            return -1;
        l->name = name;
        l->name_len = nlen;
        ev->lease = l;
    }
    return 0;
}

static void count_act(rs_t *r, const char *type, const redisReply *acts, size_t i, int64_t now_ms)
{
    double held_s = (double)(now_ms - el_i64(acts, i + 7)) / 1000.0;

    if (strcmp(type, "granted") == 0) {
        r->m->grants++;
        return;
    }
    if (strcmp(type, "released") == 0)
        r->m->releases++;
    else if (strcmp(type, "expired") == 0)
        r->m->expirations++;
    else if (strcmp(type, "revoked") == 0)
        r->m->revocations++;
    else
        return;
    engine__hist_observe(&r->m->hold_s, held_s > 0 ? held_s : 0);
}

/* One of this instance's parked requests has its outcome. */
static void waiter_done(rs_t *r, rreq_t *rq, const char *type, const redisReply *acts, size_t i)
{
    engine_req_t *req = rq->req;
    engine_result_t *res = &req->res;
    const char *t = type[0] == 'c' && strcmp(type, "cancel") != 0 ? type + 1 : type;

    unpark(r, rq);
    if (strcmp(t, "granted") == 0) {
        if (lease_from(res, &res->lease, acts, i + 3) != 0) {
            send_drop(r, req->name, req->name_len, req->op == ENGINE_LOCK_ACQUIRE,
                      el_str(acts, i + 3, NULL));
            engine_result_clear(res);
            return finish(r, rq, SEMA_ENOMEM, "out of memory building the result", 0);
        }
        res->lease.name = req->name;
        res->lease.name_len = req->name_len;
        res->kind = ENGINE_RES_LEASE;
        engine__hist_observe(&r->m->wait_s, (double)(rs__now(r) - rq->since_mono) / 1000.0);
        return finish(r, rq, 0, NULL, 1);
    }
    if (strcmp(t, "idle") == 0) {
        res->sem.name = req->name;
        res->sem.name_len = req->name_len;
        res->kind = ENGINE_RES_IDLE;
        return finish(r, rq, 0, NULL, 1);
    }
    if (strcmp(t, "fail") == 0) {
        int code = (int)el_i64(acts, i + 10);
        if (code == SEMA_ETIMEDOUT)
            r->m->timeouts++;
        return finish(r, rq, code, fail_msg(code), 1);
    }
    r->gone++;
    finish(r, rq, SEMA_EUNAVAIL,
           "Redis no longer knows this waiter (its state was lost, or this instance was "
           "taken for dead); nothing was granted",
           0);
}

static void process_acts(rs_t *r, const redisReply *rep, int mine)
{
    const redisReply *acts = el_arr(rep, 4);
    size_t slen, nlen;
    const char *stem = el_str(rep, 5, &slen);
    char kind;
    int64_t now_ms = el_i64(rep, 2);

    if (acts == NULL)
        return;
    (void)stem_name(stem, slen, &nlen, &kind);
    for (size_t i = 0; i + ACT_LEN <= acts->elements; i += ACT_LEN) {
        const char *type = el_str(acts, i, NULL);
        size_t wlen;
        const char *wid = el_str(acts, i + 1, &wlen);
        const char *inst = el_str(acts, i + 2, NULL);
        if (mine)
            count_act(r, type, acts, i, now_ms);
        if (wlen > 0 && strcmp(inst, r->inst) == 0) {
            rreq_t *rq = parked_find(r, wid, wlen);
            if (rq != NULL)
                waiter_done(r, rq, type, acts, i);
        }
    }
    if (kind == 's') { /* its events, numbered by the log (when anyone follows them) */
        const redisReply *n = el_arr(rep, 6);
        rs__ev_batch(r, rsem_find(r, stem, slen), (uint64_t)el_i64(n, 5), (uint64_t)el_i64(n, 6),
                     acts);
    }
}

/* ---- ops: requests to commands ---- */

static const char *const op_names[ENGINE_OP_COUNT] = {
    [ENGINE_SEM_PUT] = "put",
    [ENGINE_SEM_RESIZE] = "resize",
    [ENGINE_SEM_GET] = "get",
    [ENGINE_SEM_DELETE] = "delete",
    [ENGINE_SEM_LIST] = "list",
    [ENGINE_ACQUIRE] = "acquire",
    [ENGINE_WAIT_IDLE] = "wait_idle",
    [ENGINE_LEASE_GET] = "lease_get",
    [ENGINE_LEASE_RENEW] = "lease_renew",
    [ENGINE_LEASE_RELEASE] = "lease_release",
    [ENGINE_LEASE_REVOKE] = "lease_revoke",
    [ENGINE_LOCK_ACQUIRE] = "lock_acquire",
    [ENGINE_LOCK_GET] = "lock_get",
    [ENGINE_LEGACY_CREATE] = "legacy_create",
    [ENGINE_LEGACY_DELETE] = "delete",
    [ENGINE_LEGACY_VALUE] = "legacy_value",
    [ENGINE_LEGACY_UP] = "legacy_up",
    [ENGINE_LEGACY_DOWN] = "legacy_down",
    [ENGINE_TICKET_CREATE] = "ticket_create",
    [ENGINE_TICKET_GET] = "ticket_get",
    [ENGINE_TICKET_DELETE] = "ticket_delete",
    [ENGINE_LOCK_LIST] = "lock_list",
};

static int op_writes(engine_op_t op)
{
    /* a ticket's read renews its keepalive, which a second run does again: no request id */
    return op != ENGINE_SEM_GET && op != ENGINE_SEM_LIST && op != ENGINE_LEASE_GET &&
           op != ENGINE_LOCK_GET && op != ENGINE_LEGACY_VALUE && op != ENGINE_TICKET_GET &&
           op != ENGINE_LOCK_LIST;
}

static int is_lease_op(engine_op_t op)
{
    return op == ENGINE_LEASE_GET || op == ENGINE_LEASE_RENEW || op == ENGINE_LEASE_RELEASE ||
           op == ENGINE_LEASE_REVOKE;
}

static int is_ticket_id_op(engine_op_t op)
{
    return op == ENGINE_TICKET_GET || op == ENGINE_TICKET_DELETE;
}

/* ticket_create: weight, ttl, owner, Idempotency-Key, ticket id, lease id, keepalive, max
 * waiters here. The ids are made here, kept with the command (a retry sends the same). */
static void ticket_args(rs_t *r, const engine_req_t *req, rargs_t *a, char *tid, char *lid)
{
    engine__lease_id(r->front, tid);
    engine__lease_id(r->front, lid);
    a_i64(a, (int64_t)req->weight);
    a_i64(a, req->ttl_ms);
    a_str(a, req->owner ? req->owner : "");
    a_str(a, req->idem_key ? req->idem_key : "");
    a_str(a, tid);
    a_str(a, lid);
    a_i64(a, req->keepalive_ms);
    a_i64(a, (int64_t)r->cfg.max_waiters_per_sem);
}

static void op_args(rs_t *r, rreq_t *rq, rargs_t *a)
{
    engine_req_t *req = rq->req;
    int acq = req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE;

    switch (req->op) {
    case ENGINE_SEM_PUT:
    case ENGINE_LEGACY_CREATE:
        a_i64(a, (int64_t)req->capacity);
        a_i64(a, (int64_t)r->cfg.max_semaphores);
        break;
    case ENGINE_SEM_RESIZE:
        a_i64(a, (int64_t)req->capacity);
        break;
    case ENGINE_SEM_LIST:
    case ENGINE_LOCK_LIST:
        a_str(a, req->prefix);
        a_str(a, req->cursor);
        a_i64(a, (int64_t)req->limit);
        break;
    case ENGINE_LEASE_RENEW:
        a_i64(a, req->ttl_ms);
        break;
    case ENGINE_ACQUIRE:
    case ENGINE_LOCK_ACQUIRE:
    case ENGINE_WAIT_IDLE:
        if (req->op == ENGINE_LOCK_ACQUIRE)
            a_i64(a, req->mode == ENGINE_MODE_SHARED ? 1 : 0);
        else
            a_i64(a, acq ? (int64_t)req->weight : 0);
        a_str(a, req->timeout_ms == 0 ? "0" : "1");
        a_i64(a, acq ? req->ttl_ms : 0);
        a_str(a, acq && req->owner ? req->owner : "");
        a_str(a, acq && req->idem_key ? req->idem_key : "");
        a_str(a, rq->lid);
        a_str(a, rq->wid);
        a_i64(a, (int64_t)r->cfg.max_locks);
        a_i64(a, (int64_t)r->cfg.max_waiters_per_sem);
        a_i64(a, (int64_t)r->cfg.lock_readers);
        break;
    default:
        break;
    }
}

static rcmd_t *op_cmd(rs_t *r, rreq_t *rq)
{
    engine_req_t *req = rq->req;
    char key[STEM_HEAD + 65536];
    size_t klen;
    rargs_t a = {0};
    rcmd_t *c;
    char tid[ENGINE_LEASE_ID_MAX], lid[ENGINE_LEASE_ID_MAX];

    if (req->op == ENGINE_SEM_LIST || req->op == ENGINE_LOCK_LIST) {
        klen = (size_t)snprintf(key, sizeof key,
                                req->op == ENGINE_SEM_LIST ? "sema:names" : "sema:locks");
    } else if (is_ticket_id_op(req->op)) {
        if (req->id_len > 64)
            return NULL;
        klen = (size_t)snprintf(key, sizeof key, "sema:tk:%.*s", (int)req->id_len, req->id);
    } else if (is_lease_op(req->op)) {
        if (req->id_len > 64)
            return NULL;
        klen = (size_t)snprintf(key, sizeof key, "sema:id:%.*s", (int)req->id_len, req->id);
    } else {
        int lock = req->op == ENGINE_LOCK_ACQUIRE || req->op == ENGINE_LOCK_GET;
        klen = stem_make(key, sizeof key, lock ? 'k' : 's', req->name, req->name_len);
    }
    a_head(r, &a, key, klen, op_names[req->op], rq->writes ? rq->wid : "", req);
    if (req->op == ENGINE_TICKET_CREATE)
        ticket_args(r, req, &a, tid, lid);
    else
        op_args(r, rq, &a);
    c = cmd_build(r, RC_OP, &a);
    if (c != NULL)
        c->rq = rq;
    return c;
}

/* ---- replies to results ---- */

static int view_from(engine_result_t *res, engine_sem_view_t *v, const redisReply *a, size_t at,
                     const char *name, size_t nlen, int lists)
{
    memset(v, 0, sizeof(*v));
    v->name = engine_result_strdup(res, name, nlen);
    if (v->name == NULL)
        return -1;
    v->name_len = nlen;
    v->capacity = (uint64_t)el_i64(a, at);
    v->available = el_i64(a, at + 1);
    v->held = (uint64_t)el_i64(a, at + 2);
    v->fence = (uint64_t)el_i64(a, at + 3);
    v->waiting = (uint64_t)el_i64(a, at + 4);
    v->waiting_weight = (uint64_t)el_i64(a, at + 5);
    v->legacy = el_i64(a, at + 6) != 0;
    v->readers = (uint64_t)el_i64(a, at + 7);
    v->lists = lists;
    if (!lists)
        return 0;
    const redisReply *hs = el_arr(a, at + 8), *ws = el_arr(a, at + 9);
    size_t nh = hs ? hs->elements / 8 : 0, nw = ws ? ws->elements / 5 : 0;
    v->truncated = el_i64(a, at + 10) != 0;
    v->holders = nh ? engine_result_alloc(res, nh * sizeof(*v->holders)) : NULL;
    v->waiters = nw ? engine_result_alloc(res, nw * sizeof(*v->waiters)) : NULL;
    if ((nh && v->holders == NULL) || (nw && v->waiters == NULL))
        return -1;
    for (size_t i = 0; i < nh; i++, v->nholders++) {
        if (lease_from(res, &v->holders[i], hs, i * 8) != 0)
            return -1;
        v->holders[i].name = v->name;
        v->holders[i].name_len = nlen;
    }
    for (size_t i = 0; i < nw; i++, v->nwaiters++) {
        engine_waiter_t *q = &v->waiters[i];
        size_t olen;
        const char *owner = el_str(ws, i * 5, &olen);
        memset(q, 0, sizeof(*q));
        q->owner = olen ? engine_result_strdup(res, owner, olen) : NULL;
        if (olen && q->owner == NULL)
            return -1;
        q->weight = (uint64_t)el_i64(ws, i * 5 + 1);
        q->since_ms = el_i64(ws, i * 5 + 2);
        q->mode = (int)el_i64(ws, i * 5 + 3);
        q->wait_idle = el_i64(ws, i * 5 + 4) == 1;
        q->ticket = el_i64(ws, i * 5 + 4) == 2;
    }
    return 0;
}

/* A list item: its name, its view (8 fields), then grants, tickets waiting and when the
 * head of its queue came (list_counts in sema.lua). */
enum { LIST_ITEM = 12 };

static int list_from(engine_result_t *res, const redisReply *rep, engine_res_kind_t kind)
{
    const redisReply *items = el_arr(rep, RES + 1);
    size_t n = items ? items->elements / LIST_ITEM : 0;

    res->items = engine_result_alloc(res, (n ? n : 1) * sizeof(*res->items));
    if (res->items == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t nl, at = i * LIST_ITEM;
        const char *name = el_str(items, at, &nl);
        engine_list_item_t *it = &res->items[i];
        if (view_from(res, &it->v, items, at + 1, name, nl, 0) != 0)
            return -1;
        it->grants = (uint64_t)el_i64(items, at + 9);
        it->tickets = (uint64_t)el_i64(items, at + 10);
        it->waiting_since_ms = el_i64(items, at + 11);
    }
    res->nitems = n;
    if (el_i64(rep, RES) != 0 && n > 0) {
        res->next_cursor = res->items[n - 1].v.name;
        res->next_cursor_len = res->items[n - 1].v.name_len;
    }
    res->kind = kind;
    return 0;
}

/* A ticket from the script's answer: created, id, status, weight, position, ahead weight,
 * estimated, p50, p90, keepalive, then its lease's 8 fields once granted. */
static int ticket_from(rs_t *r, engine_result_t *res, const redisReply *rep, const char *name,
                       size_t nlen)
{
    engine_ticket_t *t = &res->ticket;
    size_t n;
    const char *id = el_str(rep, RES + 1, &n);

    memset(t, 0, sizeof(*t));
    if (n >= sizeof t->id)
        n = sizeof t->id - 1;
    memcpy(t->id, id, n);
    t->id[n] = '\0';
    if ((t->name = engine_result_strdup(res, name, nlen)) == NULL)
        return -1;
    t->name_len = nlen;
    t->status = (int)el_i64(rep, RES + 2);
    t->weight = (uint64_t)el_i64(rep, RES + 3);
    t->position = (uint64_t)el_i64(rep, RES + 4);
    t->ahead_weight = (uint64_t)el_i64(rep, RES + 5);
    t->estimated = el_i64(rep, RES + 6) != 0;
    t->p50_ms = el_i64(rep, RES + 7);
    t->p90_ms = el_i64(rep, RES + 8);
    t->keepalive_ms = el_i64(rep, RES + 9);
    t->poll_after_ms = r->cfg.ticket_poll_ms;
    t->state = ((uint64_t)t->status << 56) | t->position;
    if (t->status == ENGINE_TICKET_GRANTED) {
        if (rep->elements < RES + 18 || lease_from(res, &res->lease, rep, RES + 10) != 0)
            return -1;
        res->lease.name = t->name;
        res->lease.name_len = nlen;
    }
    res->kind = ENGINE_RES_TICKET;
    return 0;
}

/* The result of a successful op (status 0). 0, or -1 when out of memory. */
static int result_from(rs_t *r, rreq_t *rq, const redisReply *rep)
{
    engine_req_t *req = rq->req;
    engine_result_t *res = &req->res;
    size_t slen, nlen;
    const char *stem = el_str(rep, 5, &slen);
    char kind;
    const char *name = stem_name(stem, slen, &nlen, &kind);

    (void)r;
    switch (req->op) {
    case ENGINE_SEM_PUT:
    case ENGINE_SEM_RESIZE:
    case ENGINE_SEM_GET:
    case ENGINE_LOCK_GET:
        req->created = el_i64(rep, RES) != 0;
        res->kind = req->op == ENGINE_LOCK_GET ? ENGINE_RES_LOCK : ENGINE_RES_SEM;
        return view_from(res, &res->sem, rep, RES + 1, req->name, req->name_len, 1);
    case ENGINE_LEGACY_CREATE:
    case ENGINE_LEGACY_VALUE:
    case ENGINE_LEGACY_UP:
    case ENGINE_LEGACY_DOWN:
        res->kind = ENGINE_RES_LEGACY;
        return view_from(res, &res->sem, rep, RES + 1, req->name, req->name_len, 0);
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
    case ENGINE_LEASE_GET:
    case ENGINE_LEASE_RENEW:
        if (lease_from(res, &res->lease, rep, RES) != 0)
            return -1;
        if (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE) {
            res->lease.name = req->name;
            res->lease.name_len = req->name_len;
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
        req->created = el_i64(rep, RES) != 0;
        return ticket_from(r, res, rep, name, nlen);
    default:
        res->kind = ENGINE_RES_NONE;
        return 0;
    }
}

/* A request whose client left before its reply came: what Redis did for it goes back. */
static void orphan_reply(rs_t *r, rreq_t *rq, const redisReply *rep, const char *stem, size_t slen)
{
    int64_t st = el_i64(rep, 0);

    if (st == 1) {
        send_cancel(r, stem, slen, rq);
    } else if (st == 0 && el_arr(rep, 4) != NULL && rq->lid[0] != '\0') {
        size_t nlen;
        char kind;
        const char *name = stem_name(stem, slen, &nlen, &kind);
        send_drop(r, name, nlen, kind == 'k', el_str(rep, RES, NULL));
    }
    sema__free(rq);
}

/* ---- tickets: long-polls and streams ----
 * A watcher is read again (one FCALL, which also renews the ticket's keepalive) every poll
 * interval (at most a third of the keepalive), and at once when a message on sema:tkt names
 * its ticket (its status changed, on any instance). It is answered when the state (status and
 * position) differs from what it saw, or at its deadline. */

static void tk_cb(uv_timer_t *h);

static void tk_rearm(rs_t *r)
{
    uint64_t at = UINT64_MAX, now = rs__now(r);

    for (elist_t *x = r->twatch.next; x != &r->twatch; x = x->next) {
        rreq_t *rq = ECONTAINER(x, rreq_t, plink);
        if (rq->state == RQ_WATCH && rq->hi.deadline < at)
            at = rq->hi.deadline;
    }
    if (at == UINT64_MAX || r->shutting_down)
        uv_timer_stop(&r->tk_timer);
    else
        uv_timer_start(&r->tk_timer, tk_cb, at > now ? at - now : 0, 0);
}

/* The answer to a long-poll's read: 1 when it waits on (its state is the one it saw). */
static int ticket_wait(rs_t *r, rreq_t *rq)
{
    engine_req_t *req = rq->req;
    const engine_ticket_t *t = &req->res.ticket;
    uint64_t now = rs__now(r), deadline = UINT64_MAX, every = (uint64_t)r->cfg.ticket_poll_ms;
    uint64_t next;

    if (r->shutting_down)
        return 0; /* answered now: a parked watcher would outlive the back end */
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
    rq->state = RQ_WATCH;
    if (elist_empty(&rq->plink)) {
        elist_push_back(&r->twatch, &rq->plink);
        r->nwatch++;
    }
    tk_rearm(r);
    return 1;
}

static void tk_cb(uv_timer_t *h)
{
    rs_t *r = h->data;
    uint64_t now = rs__now(r);

    for (elist_t *x = r->twatch.next, *next; x != &r->twatch; x = next) {
        rreq_t *rq = ECONTAINER(x, rreq_t, plink);
        rcmd_t *c;
        next = x->next;
        if (rq->state != RQ_WATCH || rq->hi.deadline > now)
            continue;
        c = op_cmd(r, rq);
        if (c == NULL) {
            finish(r, rq, SEMA_ENOMEM, "out of memory", 0);
            continue;
        }
        rq->state = RQ_SENT;
        rs__send(r, c);
    }
    tk_rearm(r);
    rs__drain(r);
}

/* sema:tkt: a ticket's status changed (granted, ended): its watchers read it now. */
static void ticket_message(rs_t *r, const char *tid, size_t len)
{
    int any = 0;

    for (elist_t *x = r->twatch.next; x != &r->twatch; x = x->next) {
        rreq_t *rq = ECONTAINER(x, rreq_t, plink);
        if (rq->req == NULL || rq->req->id_len != len || memcmp(rq->req->id, tid, len) != 0)
            continue;
        if (rq->state == RQ_WATCH) {
            rq->hi.deadline = rs__now(r);
            any = 1;
        } else {
            rq->again = 1;
        }
    }
    if (any)
        tk_rearm(r);
}

static void op_reply(rs_t *r, rcmd_t *c, const redisReply *rep)
{
    rreq_t *rq = c->rq;
    size_t slen;
    const char *stem = el_str(rep, 5, &slen);
    int64_t st = el_i64(rep, 0);

    process_acts(r, rep, 1);
    if (rq->req == NULL)
        return orphan_reply(r, rq, rep, stem, slen);
    if (st == 1) {
        park(r, rq, stem, slen);
    } else if (st != 0) {
        engine_result_clear(&rq->req->res);
        finish(r, rq, (int)st, static_msg(el_str(rep, 1, NULL)), 1);
    } else if (result_from(r, rq, rep) != 0) {
        if (rq->req->op == ENGINE_ACQUIRE || rq->req->op == ENGINE_LOCK_ACQUIRE)
            send_drop(r, rq->req->name, rq->req->name_len, rq->req->op == ENGINE_LOCK_ACQUIRE,
                      rq->lid);
        engine_result_clear(&rq->req->res);
        finish(r, rq, SEMA_ENOMEM, "out of memory building the result", 0);
    } else if (rq->req->op != ENGINE_TICKET_GET || rq->req->timeout_ms <= 0 ||
               !ticket_wait(r, rq)) {
        finish(r, rq, 0, NULL, 1);
    }
    due_rearm(r);
}

static int reply_is(const redisReply *rep, const char *prefix)
{
    return rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, prefix, strlen(prefix)) == 0;
}

/* A command that must go again after the script is loaded or the epoch read again. */
static void retry_after_resync(rs_t *r, rcmd_t *c)
{
    elist_push_back(&r->retry, &c->link);
    rs__resync(r);
}

static void timeout_cancel_done(rs_t *r, rcmd_t *c);

static void fail_cmd(rs_t *r, rcmd_t *c, int status, const char *msg)
{
    rreq_t *rq = c->rq;

    if (c->kind == RC_SWEEP) {
        r->sweeping = 0;
        r->sweep_at = rs__now(r) + 100; /* try again soon */
    }
    if (c->kind == RC_COLLECT && c->sem != NULL) {
        c->sem->collecting = 0;
        rsem_maybe_free(r, c->sem);
    }
    if (c->kind == RC_CANCEL && rq != NULL) {
        unpark(r, rq);
        finish(r, rq, status, msg, 0);
    }
    if (c->kind == RC_OP && rq != NULL) {
        if (rq->req == NULL) {
            sema__free(rq);
        } else {
            engine_result_clear(&rq->req->res);
            finish(r, rq, status, msg, 0);
        }
    }
    rs__cmd_free(c);
}

void rs__on_reply(rs_t *r, rcmd_t *c, redisReply *rep)
{
    if (reply_is(rep, "NOSCRIPT") || reply_is(rep, "ERR Function not found") ||
        (rep->type == REDIS_REPLY_ARRAY && strcmp(el_str(rep, 0, NULL), "E") == 0)) {
        /* the library or the epoch changed: the resync's hello tells what */
        return retry_after_resync(r, c);
    }
    if (reply_is(rep, "READONLY") || reply_is(rep, "LOADING") || reply_is(rep, "MASTERDOWN")) {
        /* a demoted primary, or one that is starting: ask again (Sentinel) and retry */
        elist_push_back(&r->retry, &c->link);
        rs__conn_drop(r, rep->str);
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR ||
        (rep->type != REDIS_REPLY_ARRAY && c->kind != RC_PLAIN && c->kind != RC_MARK)) {
        log_warn("redis: a command failed: %s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        return fail_cmd(r, c, SEMA_EIO, "Redis refused the command (see semad's log)");
    }
    if (c->kind != RC_PLAIN && c->kind != RC_MARK) {
        const redisReply *n = el_arr(rep, 6);
        r->nsems = (uint64_t)el_i64(n, 0);
        r->nleases = (uint64_t)el_i64(n, 1);
        r->nlocks = (uint64_t)el_i64(n, 2);
        if (c->kind == RC_SWEEP)
            r->sweeping = 0;
        sweep_set(r, el_i64(n, 3), el_i64(rep, 2));
        if (el_i64(n, 4) > r->horizon_ms)
            r->horizon_ms = el_i64(n, 4);
    }
    switch (c->kind) {
    case RC_PLAIN:
        break;
    case RC_MARK:
        rs__ev_marked(r, c, rep);
        break;
    case RC_OP:
        op_reply(r, c, rep);
        break;
    case RC_COLLECT: {
        rsem_t *s = c->sem;
        process_acts(r, rep, 1);
        s->collecting = 0;
        if (s->collect_again)
            collect(r, s, 0);
        rsem_maybe_free(r, s);
        due_rearm(r);
        break;
    }
    case RC_CANCEL:
    case RC_DROP:
        process_acts(r, rep, 1);
        if (c->kind == RC_CANCEL)
            timeout_cancel_done(r, c);
        due_rearm(r);
        if (r->strict && r->replicas > 0 && !c->timed) {
            /* an undo holds until a WAIT confirms it, and goes again if one comes back short
             * (a primary that lost its replicas may be demoted, and its writes with it) */
            elist_push_back(&r->unconfirmed, &c->link);
            r->wait_needed = 1;
            return;
        }
        break;
    default:
        process_acts(r, rep, 1);
        break;
    }
    rs__cmd_free(c);
}

/* The connection went with `c` unanswered: it goes again, with the same request id, once
 * the connection is back (the tick fails it if that takes too long). */
void rs__cmd_lost(rs_t *r, rcmd_t *c)
{
    if (r->closing || c->kind == RC_WAIT) {
        if (c->kind == RC_WAIT)
            r->wait_inflight = 0;
        return fail_cmd(r, c, SEMA_EIO, "Redis is unreachable: the outcome is unknown");
    }
    if (c->kind == RC_COLLECT) {
        c->sem->collecting = 0; /* collected again once the connection is back */
        rs__cmd_free(c);
        return;
    }
    r->unknown_outcomes += c->kind == RC_OP;
    elist_push_back(&r->retry, &c->link);
}

/* A request that may wait (an acquire with a timeout, a wait-idle): while Redis does not
 * answer, it waits as a parked request does. */
static int may_wait(const engine_req_t *req)
{
    return (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE ||
            req->op == ENGINE_WAIT_IDLE) &&
           req->timeout_ms != 0;
}

/* What must go until its outcome is known, however long Redis takes: the cancels and drops
 * that undo, and every write that was sent (its reply is undone or dropped when it comes, see
 * orphan_reply). */
static int keep_cmd(const rcmd_t *c)
{
    if (c->kind == RC_CANCEL || c->kind == RC_DROP)
        return 1;
    return c->kind == RC_OP && c->sent_mono != 0 && c->rq != NULL && c->rq->writes;
}

/* Answer the client of a sent write whose outcome is unknown (503), and keep its command going
 * without it: a copy of its ids stands in for the request. 0, or -1 when out of memory. */
static int detach(rs_t *r, rcmd_t *c)
{
    rreq_t *rq = c->rq, *o = sema__calloc(1, sizeof(*o));

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
    finish(r, rq, SEMA_EIO,
           "Redis did not answer in time: the outcome is unknown (semad retries it until "
           "Redis answers)",
           0);
    return 0;
}

/* A lease's end sent again (an undone grant, a client's release) older than the longest ttl
 * and a second: the lease has expired on every replica by then, so the command need not be
 * kept while Redis or its replicas stay away. Bounds what such commands hold to a max ttl's
 * worth. (A waiter's cancel is kept: nothing expires a waiter whose instance lives.) */
static int undo_moot(const rs_t *r, const rcmd_t *c, uint64_t now)
{
    return c->kind == RC_DROP && c->queued_mono + (uint64_t)r->cfg.max_ttl_ms + 1000u <= now;
}

/* While Redis is unreachable: answer what was queued too long (503), except what may wait,
 * and keep going what must (keep_cmd). */
static void fail_old(rs_t *r, elist_t *list, uint64_t now)
{
    for (elist_t *x = list->next, *next; x != list; x = next) {
        rcmd_t *c = ECONTAINER(x, rcmd_t, link);
        next = x->next;
        if (c->queued_mono + r->cmd_timeout_ms > now && !r->closing)
            continue;
        if (!r->closing && keep_cmd(c) && !undo_moot(r, c, now)) {
            if (c->kind == RC_OP && c->rq->req != NULL && !may_wait(c->rq->req) &&
                detach(r, c) != 0)
                goto fail;
            continue;
        }
    fail:
        elist_remove(&c->link);
        if (list == &r->pending && r->npending > 0)
            r->npending--;
        fail_cmd(r, c, SEMA_EIO,
                 c->sent_mono != 0 ? "Redis did not answer in time: the outcome is unknown"
                                   : "Redis is unreachable");
    }
}

static void tick_cb(uv_timer_t *t)
{
    rs_t *r = t->data;
    uint64_t now = rs__now(r);

    if (!elist_empty(&r->inflight)) {
        rcmd_t *c = ECONTAINER(r->inflight.next, rcmd_t, link);
        if (c->sent_mono + r->cmd_timeout_ms <= now) {
            r->cmd_timeouts++;
            rs__conn_drop(r, "a command got no answer in time");
        }
    }
    if (r->cmd.state != RS_READY || r->resyncing) {
        fail_old(r, &r->retry, now);
        fail_old(r, &r->pending, now);
    }
    rs__drain(r);
}

/* ---- the timers of parked requests and semaphores ---- */

/* Its timeout came: it stays parked (a grant collected meanwhile is delivered) until Redis
 * answers its cancel, which either takes it out of the queue (timed out) or hands over the
 * grant made first. The cancel is retried with its request id until its answer comes. */
static void waiter_timeout(rs_t *r, rreq_t *rq)
{
    rsem_t *s = rq->sem;
    char rid[64];
    rcmd_t *c;

    next_id(r, rid, sizeof rid);
    c = cancel_cmd(r, s->stem, s->stem_len, rq, "t", rid);
    if (c == NULL) { /* out of memory: the client leaves, the grant if any goes back */
        send_cancel(r, s->stem, s->stem_len, rq);
        unpark(r, rq);
        return finish(r, rq, SEMA_ENOMEM, "out of memory", 0);
    }
    c->rq = rq;
    c->timed = 1;
    rq->cancel = c;
    rq->state = RQ_CANCELLING;
    rs__send(r, c);
}

/* The answer to a timeout's cancel: its acts delivered the outcome, or (nothing of it left in
 * Redis) it timed out. */
static void timeout_cancel_done(rs_t *r, rcmd_t *c)
{
    rreq_t *rq = c->rq;

    if (rq == NULL)
        return;
    unpark(r, rq);
    r->m->timeouts++;
    finish(r, rq, SEMA_ETIMEDOUT, "not granted before timeout_ms", 1);
}

static void due_cb(uv_timer_t *t)
{
    rs_t *r = t->data;
    uint64_t now = rs__now(r);
    eitem_t *top;

    r->due_at = UINT64_MAX;
    while ((top = eheap_top(&r->theap)) != NULL && top->deadline <= now) {
        eheap_remove(&r->theap, top);
        waiter_timeout(r, ECONTAINER(top, rreq_t, hi));
    }
    if (!r->sweeping && r->sweep_at <= now) {
        rargs_t a = {0};
        rcmd_t *c;
        r->sweep_at = UINT64_MAX;
        a_head(r, &a, "sema:due", 8, "sweep", "", NULL);
        c = cmd_build(r, RC_SWEEP, &a);
        if (c != NULL) {
            r->sweeping = 1;
            rs__send(r, c);
        }
    }
    due_rearm(r);
    rs__drain(r);
}

static void hb_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rsem_t *s = ECONTAINER(n, rsem_t, node);
    size_t nlen;
    char kind;
    const char *name = stem_name(s->stem, s->stem_len, &nlen, &kind);

    if (s->nparked > 0)
        collect(r, s, 1);
    if (s->watched) {
        rargs_t a = {0};
        char key[STEM_HEAD + 65600];
        memcpy(key, s->stem, s->stem_len);
        memcpy(key + s->stem_len, ":s", 2);
        if (engine__watched(r->front, name, nlen)) {
            uint64_t uid;
            rcmd_t *c;
            char fresh[48];
            engine__random(r->front, &uid, sizeof uid);
            snprintf(fresh, sizeof fresh, "%llu-0", (unsigned long long)((uid >> 12) | 1));
            a_str(&a, "HSETNX"); /* a marker that expired comes back with a new run */
            a_add(&a, key, s->stem_len + 2);
            a_str(&a, "log");
            a_str(&a, fresh);
            if ((c = cmd_build(r, RC_MARK, &a)) != NULL)
                rs__send(r, c);
            a = (rargs_t){0};
            a_str(&a, "HSET");
            a_add(&a, key, s->stem_len + 2);
            a_str(&a, r->inst);
            a_i64(&a, 1);
            send_plain(r, &a);
            a = (rargs_t){0};
            a_str(&a, "PEXPIRE");
            a_add(&a, key, s->stem_len + 2);
            a_i64(&a, 3 * RS_HEARTBEAT_MS);
            send_plain(r, &a);
            a = (rargs_t){0};
            memcpy(key + s->stem_len, ":e", 2); /* the log lives as long as the marker */
            a_str(&a, "PEXPIRE");
            a_add(&a, key, s->stem_len + 2);
            a_i64(&a, 3 * RS_HEARTBEAT_MS);
            send_plain(r, &a);
            rs__ev_heartbeat(r, s);
        } else {
            rs__sub_watch(r, s, 0);
            s->watched = 0;
            s->ev_uid = s->ev_seq = 0;
            a_str(&a, "HDEL");
            a_add(&a, key, s->stem_len + 2);
            a_str(&a, r->inst);
            send_plain(r, &a);
        }
    }
}

static void hb_cb(uv_timer_t *t)
{
    rs_t *r = t->data;
    uint32_t jitter;

    etab_each(&r->sems, hb_each, r);
    engine__random(r->front, &jitter, sizeof jitter);
    uv_timer_start(&r->hb_timer, hb_cb, RS_HEARTBEAT_MS * 4 / 5 + jitter % (RS_HEARTBEAT_MS / 5),
                   0);
    rs__drain(r);
}

/* ---- strict durability: one WAIT per loop turn, for every reply that turn held ---- */

/* A client's release (or revoke) that a WAIT did not confirm: a failover may promote a
 * replica without it, and the lease would hold its units until its ttl. It goes again, by
 * lease id and without a request id (where it already ran, the lease is gone and nothing
 * changes), and is kept like the undoing commands until a WAIT confirms it. */
static void send_lease_end_again(rs_t *r, const engine_req_t *req)
{
    char key[80];
    rargs_t a = {0};
    rcmd_t *c;
    int klen;

    if (req->id_len == 0 || req->id_len > 64)
        return;
    klen = snprintf(key, sizeof key, "sema:id:%.*s", (int)req->id_len, req->id);
    a_head(r, &a, key, (size_t)klen, op_names[req->op], "", req);
    c = cmd_build(r, RC_DROP, &a);
    if (c != NULL)
        rs__send(r, c);
}

/* A WAIT answered (ok: the replicas have every write before it) or came back short: send
 * the held replies, or answer them "outcome unknown" and undo or send again what they did. */
static void wait_settle(rs_t *r, int ok)
{
    uint64_t now = rs__now(r);

    r->wait_inflight = 0;
    while (!elist_empty(&r->unconfirmed)) {
        rcmd_t *c = ECONTAINER(r->unconfirmed.next, rcmd_t, link);
        elist_remove(&c->link);
        if (ok || undo_moot(r, c, now)) /* confirmed, or moot (see undo_moot) */
            rs__cmd_free(c);
        else
            rs__send(r, c);
    }
    while (!elist_empty(&r->held)) {
        rreq_t *rq = ECONTAINER(r->held.next, rreq_t, link);
        engine_req_t *req = rq->req;
        elist_remove(&rq->link);
        if (!ok && req->status != 0 && rq->wid[0] != '\0' &&
            (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE ||
             req->op == ENGINE_WAIT_IDLE)) {
            /* a waiter's end (a timeout, say) that may be undone: it leaves the queue for
             * good, and a grant made for it goes back */
            char stem[STEM_HEAD + 65536];
            size_t sl = stem_make(stem, sizeof stem, req->op == ENGINE_LOCK_ACQUIRE ? 'k' : 's',
                                  req->name, req->name_len);
            if (sl)
                send_cancel(r, stem, sl, rq);
            req->status = SEMA_EIO;
            req->message = "not confirmed by the Redis replicas that strict durability waits "
                           "for: the outcome is unknown";
        }
        if (!ok && req->status == 0) {
            if (req->res.kind == ENGINE_RES_LEASE &&
                (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE))
                send_drop(r, req->name, req->name_len, req->op == ENGINE_LOCK_ACQUIRE,
                          req->res.lease.id);
            if (req->op == ENGINE_LEASE_RELEASE || req->op == ENGINE_LEASE_REVOKE)
                send_lease_end_again(r, req);
            engine_result_clear(&req->res);
            req->status = SEMA_EIO;
            req->message = "not confirmed by the Redis replicas that strict durability waits "
                           "for: the outcome is unknown";
        }
        elist_push_back(&r->ready, &rq->link);
    }
    rs__drain(r);
}

static void wait_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rconn_t *conn = ac->data;
    rs_t *r = conn->r;
    redisReply *rep = reply;
    int ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer >= r->replicas;

    (void)priv;
    r->waits++;
    if (!ok)
        r->waits_short++;
    wait_settle(r, ok);
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

static void check_cb(uv_check_t *h)
{
    rs_t *r = h->data;
    char n[24], to[24];

    if (!r->strict || r->wait_inflight || (elist_empty(&r->held) && elist_empty(&r->unconfirmed)) ||
        r->cmd.state != RS_READY)
        return;
    snprintf(n, sizeof n, "%d", r->replicas);
    snprintf(to, sizeof to, "%d", RS_WAIT_TIMEOUT_MS);
    const char *argv[] = {"WAIT", n, to};
    size_t lens[] = {4, strlen(n), strlen(to)};
    if (redisAsyncCommandArgv(r->cmd.ac, wait_cb, NULL, 3, argv, lens) == REDIS_OK)
        r->wait_inflight = 1;
}

/* ---- messages ---- */

/* "sema:wake:<inst>" with a stem: something was granted to a waiter here. "sema:ev:<stem>"
 * with "<inst>\0" and acts: events another instance made. */
void rs__on_message(rs_t *r, redisReply *msg)
{
    size_t clen, plen;
    const char *chan = el_str(msg, 1, &clen);
    const char *pay = el_str(msg, 2, &plen);
    rsem_t *s;

    if (clen > 10 && strncmp(chan, "sema:wake:", 10) == 0) {
        r->wakes++;
        if ((s = rsem_find(r, pay, plen)) != NULL && s->nparked > 0)
            collect(r, s, 0);
        return;
    }
    if (clen > 8 && strncmp(chan, "sema:ev:", 8) == 0) {
        rs__ev_message(r, chan + 8, clen - 8, pay, plen);
        rs__drain(r);
    } else if (clen == 8 && memcmp(chan, "sema:tkt", 8) == 0) {
        ticket_message(r, pay, plen);
    }
}

/* ---- the back end's table ---- */

static int rs_submit(void *be, engine_req_t *req)
{
    rs_t *r = be;
    rreq_t *rq = sema__calloc(1, sizeof(*rq));
    rcmd_t *c;

    if (rq == NULL)
        return SEMA_ENOMEM;
    elist_init(&rq->link);
    elist_init(&rq->plink);
    rq->hi.idx = EHEAP_NONE;
    rq->req = req;
    rq->since_mono = rs__now(r);
    req->priv = rq;
    if (req->status != 0) {
        finish(r, rq, req->status, req->message, 0); /* failed the front's checks */
        rs__drain(r);
        return 0;
    }
    next_id(r, rq->wid, sizeof rq->wid);
    rq->writes = (uint8_t)op_writes(req->op);
    if (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE)
        engine__lease_id(r->front, rq->lid);
    if ((req->op == ENGINE_SEM_LIST || req->op == ENGINE_LOCK_LIST) && req->cursor != NULL &&
        strlen(req->cursor) > 65536) {
        finish(r, rq, SEMA_EINVAL, "cursor is too long", 0);
        rs__drain(r);
        return 0;
    }
    c = op_cmd(r, rq);
    if (c == NULL) {
        finish(r, rq, is_lease_op(req->op) || is_ticket_id_op(req->op) ? SEMA_ENOENT : SEMA_ENOMEM,
               is_lease_op(req->op)       ? "no such lease"
               : is_ticket_id_op(req->op) ? "no such ticket"
                                          : "out of memory",
               0);
        rs__drain(r);
        return 0;
    }
    if (r->cmd.state != RS_READY && r->down_since != 0 &&
        r->down_since + r->cmd_timeout_ms <= rs__now(r)) {
        rs__cmd_free(c);
        finish(r, rq, SEMA_EIO, "Redis is unreachable", 0);
        rs__drain(r);
        return 0;
    }
    if (r->npending >= RS_PENDING_MAX) {
        rs__cmd_free(c);
        finish(r, rq, SEMA_EIO, "Redis is unreachable (too many commands wait for it)", 0);
        rs__drain(r);
        return 0;
    }
    rq->state = RQ_SENT;
    rs__send(r, c);
    return 0;
}

static void rs_cancel(void *be, engine_req_t *req)
{
    rs_t *r = be;
    rreq_t *rq = req->priv;

    req->priv = NULL;
    watch_off(r, rq);
    if (rq->state == RQ_SENT) {
        rq->req = NULL; /* its reply is undone when it comes */
        return;
    }
    if (rq->state == RQ_PARKED || rq->state == RQ_CANCELLING) {
        rsem_t *s = rq->sem;
        send_cancel(r, s->stem, s->stem_len, rq);
        unpark(r, rq);
        r->m->cancellations++;
    } else if (rq->state == RQ_READY) {
        elist_remove(&rq->link);
        if (req->status == 0 && req->res.kind == ENGINE_RES_LEASE &&
            (req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE))
            send_drop(r, req->name, req->name_len, req->op == ENGINE_LOCK_ACQUIRE,
                      req->res.lease.id);
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
        rcmd_t *c = ECONTAINER(l->next, rcmd_t, link);
        elist_remove(&c->link);
        fail_cmd(r, c, SEMA_ESHUTDOWN, "the server is shutting down");
    }
    rs__drain(r);
    etab_destroy(&r->sems);
    etab_destroy(&r->waiters);
    sema__free(r->theap.a);
    sema__free(r);
    if (front != NULL)
        engine__backend_closed(front);
}

static void handle_closed(uv_handle_t *h)
{
    rs_t *r = h->data;

    if (--r->handles_open == 0)
        rs_free(r);
}

static void rsem_free_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rsem_t *s = ECONTAINER(n, rsem_t, node);

    etab_remove(&r->sems, &s->node);
    sema__free(s);
}

static void close_all(rs_t *r)
{
    uv_timer_t *ts[] = {&r->reconnect_timer, &r->tick_timer, &r->hb_timer, &r->due_timer,
                        &r->tk_timer};

    rs__conns_close(r); /* in-flight commands come back lost: their requests fail */
    redisFree(r->sync);
    r->sync = NULL;
    etab_each(&r->sems, rsem_free_each, r);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uv_timer_stop(ts[i]);
        uv_close((uv_handle_t *)ts[i], handle_closed);
    }
    uv_check_stop(&r->check);
    uv_close((uv_handle_t *)&r->check, handle_closed);
}

/* Shutdown waits for what is in flight (the cancels of parked requests among it), bounded by
 * the command timeout. */
static void shutdown_tick(uv_timer_t *t)
{
    rs_t *r = t->data;

    if (!elist_empty(&r->inflight) && rs__now(r) < r->down_since + r->cmd_timeout_ms &&
        r->cmd.state == RS_READY)
        return;
    uv_timer_stop(t);
    close_all(r);
}

static void fail_parked_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rsem_t *s = ECONTAINER(n, rsem_t, node);

    s->watched = 1; /* keeps s while its last waiter leaves */
    while (!elist_empty(&s->parked)) {
        rreq_t *rq = ECONTAINER(s->parked.next, rreq_t, plink);
        send_cancel(r, s->stem, s->stem_len, rq);
        unpark(r, rq);
        finish(r, rq, SEMA_ESHUTDOWN, "the server is shutting down", 0);
    }
    s->watched = 0;
    rsem_maybe_free(r, s);
}

static void rs_shutdown(void *be)
{
    rs_t *r = be;

    r->shutting_down = 1;
    etab_each(&r->sems, fail_parked_each, r);
    for (elist_t *x = r->twatch.next, *next; x != &r->twatch; x = next) {
        rreq_t *rq = ECONTAINER(x, rreq_t, plink);
        next = x->next;
        if (rq->state == RQ_WATCH)
            finish(r, rq, SEMA_ESHUTDOWN, "the server is shutting down", 0);
    }
    uv_timer_stop(&r->tk_timer);
    rs__drain(r);
    uv_timer_stop(&r->hb_timer);
    uv_timer_stop(&r->due_timer);
    uv_timer_stop(&r->reconnect_timer);
    if (r->cmd.state != RS_READY) {
        close_all(r);
        return;
    }
    r->down_since = rs__now(r);
    uv_timer_start(&r->tick_timer, shutdown_tick, 10, 10);
}

/* A blocking connection for the engine's synchronous questions (does a semaphore exist, the
 * per-semaphore gauges of /metrics): rare, and bounded by a 250 ms timeout. NULL when Redis
 * does not answer. */
redisContext *rs__sync(rs_t *r)
{
    struct timeval tv = {0, 250000};
    redisContext *c = r->sync;

    if (c != NULL && !c->err)
        return c;
    redisFree(c);
    r->sync = NULL;
    if (r->host[0] == '\0' || (r->conn_once && r->cmd.state != RS_READY))
        return NULL; /* known to be down: do not block the loop on it */
    c = redisConnectWithTimeout(r->host, r->port, tv);
    if (c == NULL || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    if (r->pass[0] != '\0')
        freeReplyObject(r->user[0] ? redisCommand(c, "AUTH %s %s", r->user, r->pass)
                                   : redisCommand(c, "AUTH %s", r->pass));
    if (r->db != 0)
        freeReplyObject(redisCommand(c, "SELECT %d", r->db));
    r->sync = c;
    return c;
}

/* Whether the semaphore exists (a Redis that does not answer counts as "it may exist").
 * Also starts the semaphore's event channel. */
static int rs_exists(void *be, const char *name, size_t len)
{
    rs_t *r = be;
    char stem[STEM_HEAD + 65536], key[STEM_HEAD + 65540];
    size_t sl = stem_make(stem, sizeof stem, 's', name, len);
    redisContext *c = rs__sync(r);
    redisReply *rep;
    int exists = 1;

    if (sl == 0)
        return 0;
    memcpy(key, stem, sl);
    memcpy(key + sl, ":m", 3);
    if (c != NULL) {
        rep = redisCommand(c, "EXISTS %b", key, sl + 2);
        if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
            exists = rep->integer != 0;
        freeReplyObject(rep);
    }
    if (exists && !r->shutting_down) {
        rsem_t *s = rsem_get(r, stem, sl);
        if (s != NULL) {
            int was = s->watched;
            /* the marker, done before the stream's answer: every change made once the
             * client has it is logged and published (rs__ev_watch) */
            s->pt_ok = rs__ev_watch(r, s) == 0;
            s->watched = 1;
            rs__ev_start(r, s, was);
            if (!was) {
                rs__sub_watch(r, s, 1);
                if (r->sub.ac != NULL && s->subscribed)
                    redisAsyncHandleWrite(r->sub.ac);
            }
        }
    }
    return exists;
}

static void rs_stats(void *be, engine_stats_t *out)
{
    rs_t *r = be;

    out->unavailable = r->cmd.state != RS_READY && r->down_since != 0 &&
                       r->down_since + r->cmd_timeout_ms <= rs__now(r);
    out->semaphores = r->nsems;
    out->leases = r->nleases;
    out->locks = r->nlocks;
    out->parked = r->nparked;
    /* A request whose command is in flight: tests and shutdown wait for them. */
    out->writes_pending = !elist_empty(&r->inflight) || !elist_empty(&r->held) ||
                          (!elist_empty(&r->pending) && r->cmd.state != RS_DOWN) ||
                          r->cmd.state == RS_CONNECTING;
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void put_label(jsonw_t *w, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        const char *esc = s[i] == '\\'   ? "\\\\"
                          : s[i] == '"'  ? "\\\""
                          : s[i] == '\n' ? "\\n"
                                         : NULL;
        if (esc != NULL)
            jsonw_raw(w, esc, 2);
        else
            jsonw_raw(w, s + i, 1);
    }
}

/* The ticket series: counts kept in Redis (the same on every instance), and this instance's
 * watchers. */
static void put_ticket_series(rs_t *r, jsonw_t *w)
{
    static const char *const fields[] = {"tickets", "t_created",   "t_granted",
                                         "t_left",  "t_abandoned", "t_uncollected"};
    static const char *const names[][3] = {
        {"semad_tickets", "Tickets waiting or granted.", "gauge"},
        {"semad_tickets_created_total", "Tickets taken.", "counter"},
        {"semad_tickets_granted_total", "Tickets granted their lease.", "counter"},
        {"semad_tickets_left_total", "Tickets deleted by their holder.", "counter"},
        {"semad_tickets_abandoned_total", "Waiting tickets dropped: unread for keepalive_ms.",
         "counter"},
        {"semad_tickets_uncollected_total",
         "Granted tickets whose lease was released: not collected within keepalive_ms.", "counter"},
    };
    redisContext *c = rs__sync(r);
    redisReply *rep = NULL;

    if (c != NULL)
        rep = redisCommand(c, "HMGET sema:epoch %s %s %s %s %s %s", fields[0], fields[1], fields[2],
                           fields[3], fields[4], fields[5]);
    for (size_t i = 0; i < 6; i++)
        jsonw_prom_series(w, names[i][0], names[i][1], names[i][2],
                          (uint64_t)(el_i64(rep, i) > 0 ? el_i64(rep, i) : 0));
    freeReplyObject(rep);
    jsonw_prom_series(w, "semad_ticket_watchers",
                      "Long-polls and streams waiting on a ticket's change now.", "gauge",
                      r->nwatch);
    jsonw_prom_series(w, "semad_ticket_position_updates_total",
                      "Position updates sent to ticket watchers (long-polls and streams).",
                      "counter", r->ticket_updates);
}

/* Gauges of the first semaphores by name (asked on the blocking connection). */
static void put_sem_gauges(rs_t *r, jsonw_t *w)
{
    static const char *const names[] = {"semad_semaphore_capacity", "semad_semaphore_available",
                                        "semad_semaphore_held", "semad_semaphore_waiters"};
    static const int field[] = {0, 1, 2, 4};
    redisContext *c = rs__sync(r);
    redisReply *rep = NULL;
    const redisReply *items;
    char limit[24];

    snprintf(limit, sizeof limit, "%llu", (unsigned long long)r->cfg.metrics_max_semaphores);
    if (c != NULL && r->cfg.metrics_max_semaphores > 0) {
        rargs_t a = {0};
        a_head(r, &a, "sema:names", 10, "list", "", NULL);
        a_str(&a, "");
        a_str(&a, "");
        a_str(&a, limit);
        if (!a.oom)
            rep = redisCommandArgv(c, a.n, a.v, a.l);
        a_free(&a);
    }
    items = el_arr(rep, RES + 1);
    for (int k = 0; k < 4; k++) {
        jsonw_raw_str(w, "# TYPE ");
        jsonw_raw_str(w, names[k]);
        jsonw_raw_str(w, " gauge\n");
        for (size_t i = 0; items != NULL && i + LIST_ITEM <= items->elements; i += LIST_ITEM) {
            size_t nl;
            const char *name = el_str(items, i, &nl);
            jsonw_raw_str(w, names[k]);
            jsonw_raw_str(w, "{name=\"");
            put_label(w, name, nl);
            jsonw_raw_str(w, "\"} ");
            jsonw_raw_i64(w, el_i64(items, i + 1 + (size_t)field[k]));
            jsonw_raw(w, "\n", 1);
        }
    }
    freeReplyObject(rep);
}

/* Undo commands (RC_DROP, RC_CANCEL) not yet answered or, in strict, not yet confirmed. */
static uint64_t count_undo(const rs_t *r)
{
    const elist_t *lists[] = {&r->unconfirmed, &r->pending, &r->retry, &r->inflight};
    uint64_t n = 0;

    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        for (const elist_t *x = lists[i]->next; x != lists[i]; x = x->next) {
            const rcmd_t *c = ECONTAINER(x, rcmd_t, link);
            n += c->kind == RC_DROP || c->kind == RC_CANCEL;
        }
    return n;
}

static int rs_metrics(void *be, struct strbuf *out)
{
    rs_t *r = be;
    jsonw_t w;

    jsonw_init(&w, out);
    jsonw_prom_series(&w, "semad_redis_connected", "1 while the Redis connection is up.", "gauge",
                      r->cmd.state == RS_READY && !r->resyncing);
    jsonw_prom_series(&w, "semad_redis_subscriber_connected",
                      "1 while the Redis subscriber connection is up.", "gauge",
                      r->sub.state == RS_READY);
    jsonw_prom_series(&w, "semad_redis_commands_total", "Commands sent to Redis.", "counter",
                      r->commands);
    jsonw_prom_series(&w, "semad_redis_reconnects_total", "Connection attempts to Redis.",
                      "counter", r->reconnects);
    jsonw_prom_series(&w, "semad_redis_command_timeouts_total",
                      "Connections dropped because a command got no answer in time.", "counter",
                      r->cmd_timeouts);
    jsonw_prom_series(&w, "semad_redis_unknown_outcomes_total",
                      "Commands whose connection went before their answer (retried).", "counter",
                      r->unknown_outcomes);
    jsonw_prom_series(&w, "semad_redis_wakeups_total", "Wake-up messages received.", "counter",
                      r->wakes);
    jsonw_prom_series(&w, "semad_redis_event_log_reads_total",
                      "Reads of a semaphore's event log in Redis (resumes, and events that "
                      "reached this instance out of order or not at all).",
                      "counter", r->log_reads);
    jsonw_prom_series(&w, "semad_redis_collects_total",
                      "Collections of grants for parked requests (wake-ups, heartbeats).",
                      "counter", r->collects);
    jsonw_prom_series(&w, "semad_redis_waiters_lost_total",
                      "Parked requests Redis no longer knew (answered 503).", "counter", r->gone);
    jsonw_prom_series(&w, "semad_redis_epoch_changes_total",
                      "Times Redis was found to have lost its data.", "counter", r->epoch_changes);
    jsonw_prom_series(&w, "semad_redis_waits_total", "WAIT commands (strict durability).",
                      "counter", r->waits);
    jsonw_prom_series(&w, "semad_redis_waits_short_total",
                      "WAIT commands that returned fewer replicas than asked.", "counter",
                      r->waits_short);
    jsonw_prom_series(&w, "semad_redis_undo_pending",
                      "Commands that end a lease or a wait on a client's behalf (an undo, a "
                      "release sent again) not yet answered or, in strict, confirmed by WAIT.",
                      "gauge", count_undo(r));
    jsonw_prom_series(&w, "semad_parked_waiters", "Requests parked now.", "gauge", r->nparked);
    jsonw_prom_series(&w, "semad_semaphores", "Semaphores.", "gauge", r->nsems);
    jsonw_prom_series(&w, "semad_leases", "Live leases.", "gauge", r->nleases);
    jsonw_prom_series(&w, "semad_lock_keys", "Keyed locks held or awaited.", "gauge", r->nlocks);
    put_ticket_series(r, &w);
    put_sem_gauges(r, &w);
    return jsonw_end(&w);
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
    elist_init(&r->retry);
    elist_init(&r->pending);
    elist_init(&r->ready);
    elist_init(&r->held);
    elist_init(&r->unconfirmed);
    elist_init(&r->twatch);
    rc = rs__parse_url(r, cfg->backend, errbuf, errlen);
    if (rc == 0 && (etab_init(&r->sems, 16) || etab_init(&r->waiters, 64)))
        rc = SEMA_ENOMEM;
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
    r->reconnect_timer.data = r->tick_timer.data = r->hb_timer.data = r->due_timer.data = r;
    r->tk_timer.data = r;
    r->check.data = r;
    r->handles_open = 6;
    uv_timer_start(&r->tick_timer, tick_cb, 100, 100);
    uv_timer_start(&r->hb_timer, hb_cb, RS_HEARTBEAT_MS, 0);
    uv_check_start(&r->check, check_cb);
    uv_unref((uv_handle_t *)&r->tick_timer);
    uv_unref((uv_handle_t *)&r->hb_timer);
    r->down_since = rs__now(r);
    rs__connect(r);
    *out = r;
    return 0;
}

const engine_backend_t engine_backend_redis = {
    .name = "redis",
    .open = rs_open,
    .submit = rs_submit,
    .cancel = rs_cancel,
    .shutdown = rs_shutdown,
    .exists = rs_exists,
    .stats = rs_stats,
    .metrics = rs_metrics,
    .events_point = rs__events_point,
    .events_replay = rs__events_replay,
    .tickets = 1,
};
