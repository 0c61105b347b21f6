/* SPDX-License-Identifier: MIT */
/* redis_batch.c - the plain acquires and releases of one turn of the loop as one FCALL: one
 * call, one clock and one collector step for all of them, each answered as if alone. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* A batch's FCALL: FCALL sema N, each member's key, then each one's packed head and
 * arguments (RS_PK_*), written into `buf` (`cap` bytes); the command's length, or -1 when one
 * does not pack or out of memory. */
static int batch_format(rs_t *r, rs_cmd_t *b, size_t n, char *buf, size_t cap, char **out)
{
    const char **v = sema__malloc((3 + 2 * n) * sizeof(*v));
    size_t *l = sema__malloc((3 + 2 * n) * sizeof(*l)), k = 0;
    char num[24];
    rs_pk_buf_t pb = {buf, buf + cap};
    int len = -1;

    if (v == NULL || l == NULL)
        goto done;
    v[0] = "FCALL", l[0] = 5, v[1] = "sema", l[1] = 4;
    v[2] = num, l[2] = (size_t)snprintf(num, sizeof num, "%zu", n);
    for (elist_t *x = b->members.next; x != &b->members; x = x->next, k++) {
        const rs_cmd_t *m = ECONTAINER(x, rs_cmd_t, link);
        const char *mv[RS_FCALL_HEAD + RS_HEAD_LEN + RS_ACQ_LEN];
        size_t ml[RS_FCALL_HEAD + RS_HEAD_LEN + RS_ACQ_LEN];
        char flags[8], *at = pb.p;
        if (m->argc > (int)(sizeof ml / sizeof ml[0]))
            goto done;
        rs__cmd_argv(r, m, mv, ml, flags);
        if (!rs__cmd_plain(m, ml[RS_FCALL_HEAD + RS_H_FLAGS])) /* (a pause learnt since) */
            goto done;
        rs__cmd_pack(m, mv, ml, 0, &pb);
        if (pb.p == NULL)
            goto done;
        v[3 + k] = mv[RS_FCALL_HEAD - 1], l[3 + k] = ml[RS_FCALL_HEAD - 1]; /* (in m's own) */
        v[3 + n + k] = at, l[3 + n + k] = (size_t)(pb.p - at);
    }
    len = redisFormatCommandArgv(out, (int)(3 + 2 * n), v, l);
done:
    sema__free(v);
    sema__free(l);
    return len;
}

/* The members of b as one FCALL; each goes by itself when that cannot be made. */
static void batch_send(rs_t *r, rs_cmd_t *b, size_t n)
{
    size_t cap = 64;
    char *buf = NULL, *bytes = NULL;
    int len = -1;

    for (elist_t *x = b->members.next; x != &b->members; x = x->next)
        cap += rs__cmd_pack_cap(ECONTAINER(x, rs_cmd_t, link));
    if ((buf = sema__malloc(cap)) != NULL)
        len = batch_format(r, b, n, buf, cap, &bytes);
    sema__free(buf);
    b->sent_mono = b->queued_mono = rs__now(r);
    b->gen = r->epoch_changes;
    if (len >= 0) {
        elist_push_back(&r->inflight, &b->link);
        r->commands++;
        if (redisAsyncFormattedCommand(r->cmd.ac, rs__cmd_cb, b, bytes, (size_t)len) == REDIS_OK) {
            for (elist_t *x = b->members.next; x != &b->members; x = x->next) {
                rs_cmd_t *m = ECONTAINER(x, rs_cmd_t, link);
                m->gen = r->epoch_changes;
                m->sent_mono = b->sent_mono;
            }
            redisFreeCommand(bytes);
            return;
        }
        elist_remove(&b->link);
        r->commands--;
    }
    redisFreeCommand(bytes);
    while (!elist_empty(&b->members)) { /* (in their order, nothing sent between) */
        rs_cmd_t *m = ECONTAINER(b->members.next, rs_cmd_t, link);
        elist_remove(&m->link);
        rs__send_one(r, m);
    }
    rs__cmd_free(b);
}

void rs__batch_flush(rs_t *r)
{
    size_t n = r->nbatch;
    rs_cmd_t *b = n > 1 ? sema__calloc(1, sizeof(*b)) : NULL;

    if (n == 0)
        return;
    r->nbatch = 0;
    if (b == NULL || r->cmd.state != RS_CONN_READY || r->resyncing || r->cmd.ac == NULL) {
        sema__free(b); /* (one, or no connection: each as rs__send would) */
        while (!elist_empty(&r->batch)) {
            rs_cmd_t *c = ECONTAINER(r->batch.next, rs_cmd_t, link);
            elist_remove(&c->link);
            rs__send_one(r, c);
        }
        return;
    }
    b->kind = RS_CMD_BATCH;
    elist_init(&b->link);
    elist_init(&b->members);
    elist_splice(&b->members, &r->batch);
    batch_send(r, b, n);
}

void rs__prep_cb(uv_prepare_t *h)
{
    rs__batch_flush(h->data);
}

/* A batch that failed whole: its connection lost (rep NULL), or an error before it ran
 * (pcall in the script answers any error of a member in that member's place). Redis refused
 * it unrun for the library or the epoch to load again, or as a primary that is no longer one:
 * each member goes again, in order, as a refused command does. Any other error fails each
 * member as it fails a command alone; after a lost connection each goes again with its
 * request id, in order, as every command does. */
static void batch_failed(rs_t *r, rs_cmd_t *b, const redisReply *rep)
{
    int reload = rep != NULL &&
                 (rs__reply_is(rep, "NOSCRIPT") || rs__reply_is(rep, "ERR Function not found"));
    int drop = rep != NULL && (rs__reply_is(rep, "READONLY") || rs__reply_is(rep, "LOADING") ||
                               rs__reply_is(rep, "MASTERDOWN"));

    if (rep != NULL && !reload && !drop)
        log_warn("redis: a call of several operations failed: %s",
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
    while (!elist_empty(&b->members)) {
        rs_cmd_t *m = ECONTAINER(b->members.next, rs_cmd_t, link);
        elist_remove(&m->link);
        if (rep == NULL)
            rs__cmd_lost(r, m);
        else if (reload || drop)
            elist_push_back(&r->retry, &m->link);
        else
            rs__cmd_fail(r, m, BE_MSG_REDIS_REFUSED);
    }
    if (drop)
        rs__conn_drop(r, rep->str);
    else if (reload)
        rs__resync(r); /* (the retries go once it is done) */
}

/* A batch's answer: every member's, in order, each read as its answer alone would be (a short
 * path's, a general path's array, or an error). None goes again from here: each ran in its
 * place. */
void rs__batch_reply(rs_t *r, rs_cmd_t *b, redisReply *rep)
{
    size_t i = 0;

    if (rep != NULL) {
        r->replies++;
        r->contact_mono = rs__now(r);
    }
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        batch_failed(r, b, rep);
        rs__cmd_free(b);
        rs__drain(r);
        return;
    }
    while (!elist_empty(&b->members)) {
        rs_cmd_t *m = ECONTAINER(b->members.next, rs_cmd_t, link);
        redisReply *e = i < rep->elements ? rep->element[i++] : NULL;
        elist_remove(&m->link);
        if (e != NULL && rs__reply_short(m, e)) {
            rs__op_short(r, m, e);
            rs__cmd_free(m);
        } else if (e != NULL) { /* the general path's answer, or its error */
            rs__cmd_reply(r, m, e);
        } else { /* (the script answers every member: cannot happen) */
            log_warn("redis: a call of several operations answered %zu of them", rep->elements);
            rs__cmd_fail(r, m, BE_MSG_REDIS_REFUSED);
        }
    }
    rs__cmd_free(b);
    rs__drain(r);
}
