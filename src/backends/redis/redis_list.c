/* SPDX-License-Identifier: MIT */
/* redis_list.c - listing semaphores and lock keys on a Redis Cluster: every slot keeps its own
 * name index, so a page asks each primary that serves slots for the page over all its slots
 * (one sema_list call each), and merges the answers in name order, as one Redis gives them.
 *
 * The cursor is the last name of a page, as on one Redis: a page is the first names after it,
 * whichever primaries serve them now, so a slot that moved or a primary that failed over
 * between two pages skips nothing and repeats nothing. A slot asked of a primary that no
 * longer serves it whole (the map was old, or the slot is migrating) fails that primary's
 * call unrun; its slots are asked again, where the map then says, until the command timeout. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define RS_LIST_RETRY_MS 50 /* a part whose slots moved: asked again this much later */
/* FCALL sema_list 1 KEY, the head, then prefix, cursor, limit and the mode: 'r' and the slots'
 * ranges follow, or 't' and their tags */
#define RS_LIST_ARGS (RS_FCALL_HEAD + RS_HEAD_LEN + 4)

/* One listing request. */
struct rs_list {
    elist_t link; /* r->lists */
    rs_t *r;
    rs_req_t *rq;
    uint64_t deadline, retry_at; /* loop ms */
    int inflight;                /* parts not answered yet */
    int failed;                  /* BE_MSG_* of a part that cannot be asked again, or 0 */
    engine_list_item_t *items;   /* what the parts answered (strings in the request's result) */
    size_t nitems, cap;
    int more;
    uint8_t again[RS_SLOTS]; /* slots to ask again */
};

/* One primary's part of a page: the FCALL over its slots (ascending). First by ranges of
 * slots: the primary finds their indexes with one SCAN of its keys; then, if it answers
 * "probe" (it holds many keys, or migrates a slot away), by each slot's tag: one look-up each. */
typedef struct {
    rs_ccmd_t cc;
    rs_list_t *ls;
    int nslots;
    uint16_t *slots;
    const char **v;
    size_t *l;
    rs_slot_addr_t node;
    char key[32];
    char lim[24];
    char words[][16]; /* a range ("lo-hi") or a slot's tag (eight hex digits) */
} rs_lpart_t;

static void ask_slots(rs_list_t *ls);
static void part_args(rs_lpart_t *p, int by_tag);

static void part_free(rs_lpart_t *p)
{
    sema__free(p->slots);
    sema__free(p->v);
    sema__free(p->l);
    sema__free(p);
}

/* Keep a part's items (appended to the request's). -1 when out of memory. */
static int keep_items(rs_list_t *ls, const redisReply *rep)
{
    engine_req_t *req = ls->rq->req;
    engine_list_item_t *got;
    size_t n;
    int more;

    if (rs__list_from(&req->res, rep, &got, &n, &more) != 0)
        return -1;
    if (ls->nitems + n > ls->cap) {
        size_t cap = ls->nitems + n + 16;
        engine_list_item_t *it = sema__realloc(ls->items, cap * sizeof(*it));
        if (it == NULL)
            return -1;
        ls->items = it;
        ls->cap = cap;
    }
    memcpy(ls->items + ls->nitems, got, n * sizeof(*got));
    ls->nitems += n;
    ls->more |= more;
    return 0;
}

/* Whether an error says the part did not run because a slot is not (or not wholly) served
 * there: its slots go again. */
static int moved_away(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR &&
           (strstr(rep->str, "non local key") != NULL || strncmp(rep->str, "ASK ", 4) == 0 ||
            strncmp(rep->str, "MOVED ", 6) == 0 || strncmp(rep->str, "TRYAGAIN", 8) == 0 ||
            strncmp(rep->str, "CLUSTERDOWN", 11) == 0);
}

/* A primary that never ran a command of this instance may lack the library: loaded, and
 * asked again. */
static int lacks_library(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "ERR Function not found", 22) == 0;
}

/* A part's one-word answer ("probe", "moved"), or "". */
static const char *word(int how, const redisReply *rep)
{
    if (how != RS_CL_REPLY || rep->type != REDIS_REPLY_ARRAY || rep->elements != 1 ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return "";
    return rep->element[0]->str;
}

static void part_cb(rs_cluster_t *cl, rs_ccmd_t *cc, int how, redisReply *rep)
{
    rs_lpart_t *p = cc->data;
    rs_list_t *ls = p->ls;
    rs_t *r = ls->r;
    int again = how == RS_CL_MOVED || (how == RS_CL_REPLY && moved_away(rep)) ||
                strcmp(word(how, rep), "moved") == 0;

    if (strcmp(word(how, rep), "probe") == 0 && ls->rq->req != NULL && !ls->failed) {
        part_args(p, 1); /* (the same slots, each looked up) */
        if (rs__cluster_send(cl, &p->cc) == 0)
            return;
        again = 1;
    }
    ls->inflight--;
    if (ls->rq->req == NULL || ls->failed) {
        /* (the client left, or another part failed: the answer is not needed) */
    } else if (again || (how == RS_CL_REPLY && lacks_library(rep))) {
        for (int i = 0; i < p->nslots; i++)
            ls->again[p->slots[i]] = 1;
        if (again)
            rs__cluster_refresh(cl);
        else
            rs__sh_load_library(r, p->slots[0]);
    } else if (how != RS_CL_REPLY) {
        ls->failed = how == RS_CL_UNKNOWN ? BE_MSG_REDIS_NO_ANSWER : BE_MSG_REDIS_UNREACHABLE;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        log_warn("redis: listing on %s:%d: %s", cc->by.host, cc->by.port, rep->str);
        ls->failed = BE_MSG_REDIS_REFUSED;
    } else if (keep_items(ls, rep) != 0) {
        ls->failed = BE_MSG_NOMEM_RESULT;
    }
    part_free(p);
    if (ls->inflight == 0)
        rs__list_step(r, ls, rs__now(r)); /* (ls may be gone after it) */
    rs__drain(r);
}

/* Name order, byte by byte (as ZRANGEBYLEX orders an index). */
static int by_name(const void *a, const void *b)
{
    const engine_list_item_t *x = a, *y = b;
    size_t n = x->v.name_len < y->v.name_len ? x->v.name_len : y->v.name_len;
    int c = memcmp(x->v.name, y->v.name, n);

    return c != 0 ? c : (x->v.name_len > y->v.name_len) - (x->v.name_len < y->v.name_len);
}

/* Every part answered: the first `limit` names of them all are the page. */
static int merge(rs_list_t *ls)
{
    engine_req_t *req = ls->rq->req;
    engine_result_t *res = &req->res;
    size_t n = ls->nitems < (size_t)req->limit ? ls->nitems : (size_t)req->limit;

    if (ls->nitems > 1)
        qsort(ls->items, ls->nitems, sizeof(*ls->items), by_name);
    res->items = engine_result_alloc(res, (n ? n : 1) * sizeof(*res->items));
    if (res->items == NULL)
        return -1;
    memcpy(res->items, ls->items, n * sizeof(*res->items));
    res->nitems = n;
    res->kind = req->op == ENGINE_SEM_LIST ? ENGINE_RES_LIST : ENGINE_RES_LOCK_LIST;
    if ((ls->more || ls->nitems > n) && n > 0) {
        res->next_cursor = res->items[n - 1].v.name;
        res->next_cursor_len = res->items[n - 1].v.name_len;
    }
    return 0;
}

static void list_free(rs_list_t *ls)
{
    elist_remove(&ls->link);
    sema__free(ls->items);
    sema__free(ls);
}

static void list_end(rs_list_t *ls, be_msg_t why)
{
    rs_t *r = ls->r;
    rs_req_t *rq = ls->rq;

    if (rq->req == NULL) {
        sema__free(rq); /* (cancelled while it was asked) */
    } else if (why == BE_MSG_NONE && merge(ls) == 0) {
        rs__finish(r, rq, 0, NULL, 0);
    } else {
        engine_result_clear(&rq->req->res);
        rs__fail(r, rq, why == BE_MSG_NONE ? BE_MSG_NOMEM_RESULT : why, 0);
    }
    list_free(ls);
}

void rs__list_step(rs_t *r, rs_list_t *ls, uint64_t now)
{
    int again = 0;

    (void)r;
    if (ls->inflight > 0)
        return;
    if (ls->rq->req == NULL || ls->failed)
        return list_end(ls, (be_msg_t)ls->failed);
    for (unsigned s = 0; s < RS_SLOTS && !again; s++)
        again = ls->again[s];
    if (!again)
        return list_end(ls, BE_MSG_NONE);
    if (now >= ls->deadline)
        return list_end(ls, BE_MSG_REDIS_UNREACHABLE);
    if (ls->retry_at == 0)
        ls->retry_at = now + RS_LIST_RETRY_MS; /* (the tick asks again: rs__list_tick) */
    else if (now >= ls->retry_at)
        ask_slots(ls);
}

void rs__list_tick(rs_t *r, uint64_t now)
{
    for (elist_t *e = r->lists.next, *next; e != &r->lists; e = next) {
        next = e->next;
        rs__list_step(r, ECONTAINER(e, rs_list_t, link), now);
    }
}

/* The part's arguments: its slots by ranges, or (by_tag) each slot's tag. */
static void part_args(rs_lpart_t *p, int by_tag)
{
    rs_t *r = p->ls->r;
    engine_req_t *req = p->ls->rq->req;
    const char *head[RS_LIST_ARGS] = {
        "FCALL",
        "sema_list",
        "1",
        p->key,
        rs__op_name(req->op == ENGINE_SEM_LIST ? RS_OP_LIST : RS_OP_LOCK_LIST),
        "",
        "c",
        r->inst,
        "",
        "",
        req->prefix ? req->prefix : "",
        req->cursor ? req->cursor : "",
        p->lim,
        by_tag ? "t" : "r"};
    int k = 0, n = 0;

    for (; k < RS_LIST_ARGS; k++) {
        p->v[k] = head[k];
        p->l[k] = strlen(head[k]);
    }
    for (int i = 0; i < p->nslots; i = n) {
        unsigned s = p->slots[i];
        for (n = i + 1; !by_tag && n < p->nslots && p->slots[n] == p->slots[n - 1] + 1;)
            n++;
        if (by_tag)
            snprintf(p->words[k - RS_LIST_ARGS], sizeof p->words[0], "%08x",
                     (unsigned)rs__sh_slot_tag(r, s));
        else
            snprintf(p->words[k - RS_LIST_ARGS], sizeof p->words[0], "%u-%u", s,
                     (unsigned)p->slots[n - 1]);
        p->v[k] = p->words[k - RS_LIST_ARGS];
        p->l[k] = strlen(p->v[k]);
        k++;
    }
    p->cc = (rs_ccmd_t){.argc = k,
                        .argv = p->v,
                        .lens = p->l,
                        .key = p->key,
                        .key_len = strlen(p->key),
                        .cb = part_cb,
                        .data = p,
                        .no_ask = 1,
                        .pinned = 1,
                        .pin = p->node};
}

/* The part of the primary `a` (slots from `first` on that it serves, and are to be asked). */
static rs_lpart_t *part_new(rs_list_t *ls, rs_cluster_t *cl, const rs_slot_addr_t *a,
                            unsigned first, uint8_t *taken)
{
    engine_req_t *req = ls->rq->req;
    rs_lpart_t *p;
    int n = 0, argc;

    for (unsigned s = first; s < RS_SLOTS; s++)
        n += ls->again[s] && !taken[s] && rs__cluster_owner(cl, s) == a;
    argc = RS_LIST_ARGS + n;
    p = sema__calloc(1, sizeof(*p) + (size_t)n * sizeof(p->words[0]));
    if (p == NULL || (p->slots = sema__malloc((size_t)n * sizeof(*p->slots))) == NULL ||
        (p->v = sema__malloc((size_t)argc * sizeof(*p->v))) == NULL ||
        (p->l = sema__malloc((size_t)argc * sizeof(*p->l))) == NULL) {
        if (p != NULL)
            part_free(p);
        return NULL;
    }
    for (unsigned s = first; s < RS_SLOTS; s++)
        if (ls->again[s] && !taken[s] && rs__cluster_owner(cl, s) == a) {
            taken[s] = 1;
            p->slots[p->nslots++] = (uint16_t)s;
        }
    p->ls = ls;
    p->node = *a;
    rs__home_key(ls->r, first, req->op == ENGINE_SEM_LIST ? "names" : "locks", p->key,
                 sizeof p->key);
    snprintf(p->lim, sizeof p->lim, "%u", (unsigned)req->limit);
    part_args(p, 0);
    return p;
}

/* Ask every primary for the page over its slots still to be asked. */
static void ask_slots(rs_list_t *ls)
{
    rs_cluster_t *cl = rs__sh_cluster(ls->r);
    uint8_t *taken = sema__calloc(RS_SLOTS, 1);

    ls->retry_at = 0;
    if (cl == NULL || taken == NULL) {
        ls->failed = cl == NULL ? BE_MSG_REDIS_UNREACHABLE : BE_MSG_NOMEM;
        sema__free(taken);
        return rs__list_step(ls->r, ls, rs__now(ls->r));
    }
    for (unsigned s = 0; s < RS_SLOTS; s++) {
        const rs_slot_addr_t *a = rs__cluster_owner(cl, s);
        rs_lpart_t *p;
        if (!ls->again[s] || taken[s] || a == NULL)
            continue; /* (a slot without a primary now: asked again at the next step) */
        if ((p = part_new(ls, cl, a, s, taken)) == NULL) {
            ls->failed = BE_MSG_NOMEM;
            break;
        }
        for (int i = 0; i < p->nslots; i++)
            ls->again[p->slots[i]] = 0;
        ls->inflight++;
        if (rs__cluster_send(cl, &p->cc) != 0) {
            ls->inflight--;
            for (int i = 0; i < p->nslots; i++)
                ls->again[p->slots[i]] = 1;
            part_free(p);
            ls->failed = BE_MSG_REDIS_BACKLOG;
            break;
        }
    }
    sema__free(taken);
    if (ls->inflight == 0)
        rs__list_step(ls->r, ls, rs__now(ls->r));
}

void rs__list_send(rs_t *r, rs_req_t *rq)
{
    rs_list_t *ls = sema__calloc(1, sizeof(*ls));

    if (ls == NULL) {
        rs__fail(r, rq, BE_MSG_NOMEM, 0);
        return;
    }
    ls->r = r;
    ls->rq = rq;
    ls->deadline = rs__now(r) + r->cmd_timeout_ms;
    memset(ls->again, 1, sizeof ls->again);
    elist_push_back(&r->lists, &ls->link);
    rq->state = RS_REQ_SENT;
    ask_slots(ls);
}

void rs__list_close(rs_t *r)
{
    for (elist_t *e = r->lists.next, *next; e != &r->lists; e = next) {
        rs_list_t *ls = ECONTAINER(e, rs_list_t, link);
        next = e->next;
        if (ls->inflight == 0)
            list_end(ls, BE_MSG_SHUTDOWN);
        else
            ls->failed = BE_MSG_SHUTDOWN;
    }
}
