/* SPDX-License-Identifier: MIT */
/* redis_shards_strict.c - strict durability on a Redis Cluster: a reply held for a write waits
 * for a WAIT on the primary that ran it (one per primary and loop turn, on the connection the
 * reply came on: a WAIT speaks for its own connection only), and INFO replication after each
 * WAIT tells how many replicas that primary had. A slot whose primary changed resumes at once
 * only when its new primary is a replica of the old one and every WAIT that confirmed writes
 * there counted every replica the old one had (as after a Sentinel failover, redis_conn.c). */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* A WAIT, or the INFO replication sent right behind it. */
typedef struct {
    rs_ccmd_t cc;
    rs_t *r;
    uint16_t node;
    uint8_t info;
    const char *v[3];
    size_t l[3];
    char n[24], to[24], key[32];
} rs_wait_t;

static void info_done(rs_t *r, rs_sh_strict_t *st, int how, const redisReply *rep)
{
    int had;

    if (st == NULL || how != RS_CL_REPLY || rep->type != REDIS_REPLY_STRING ||
        (had = rs__info_replicas(rep->str)) < 0)
        return; /* short_of_all stays as the WAIT left it */
    if (had > st->repl_most)
        st->repl_most = had;
    rs__info_field(rep->str, "master_replid", st->replid, sizeof st->replid);
    st->counted = 1;
    if (!st->count_due)
        return; /* a short WAIT confirmed nothing */
    st->count_due = 0;
    st->short_of_all = st->repl_most > r->replicas;
}

static void wait_cb(rs_cluster_t *cl, rs_ccmd_t *cc, int how, redisReply *rep)
{
    rs_wait_t *w = cc->data;
    rs_t *r = w->r;
    rs_sh_strict_t *st = rs__sh_strict_of(r, w->node);
    int ok = how == RS_CL_REPLY && rep->type == REDIS_REPLY_INTEGER && rep->integer >= r->replicas;

    (void)cl;
    if (w->info) {
        info_done(r, st, how, rep);
        sema__free(w);
        return;
    }
    r->waits++;
    if (!ok)
        r->waits_short++;
    if (st != NULL) {
        st->inflight = 0;
        if (ok) /* until the INFO behind this WAIT tells how many replicas there were */
            st->short_of_all = st->count_due = 1;
    }
    rs__strict_settle(r, w->node, how == RS_CL_REPLY ? cc->by_conn : -1, ok);
    sema__free(w);
}

/* Send WAIT (or, info, INFO replication) to the primary `node`, routed by a key of `slot`. */
static int send_wait(rs_t *r, uint16_t node, unsigned slot, int info)
{
    rs_wait_t *w = sema__calloc(1, sizeof(*w));
    const rs_slot_addr_t *a = rs__sh_node(r, node);
    rs_cluster_t *cl = rs__sh_cluster(r);
    int argc = info ? 2 : 3;

    if (w == NULL || a == NULL || cl == NULL) {
        sema__free(w);
        return -1;
    }
    w->r = r;
    w->node = node;
    w->info = (uint8_t)info;
    snprintf(w->n, sizeof w->n, "%d", r->replicas);
    snprintf(w->to, sizeof w->to, "%d", RS_WAIT_TIMEOUT_MS);
    w->v[0] = info ? "INFO" : "WAIT";
    w->v[1] = info ? "replication" : w->n;
    w->v[2] = w->to;
    for (int i = 0; i < argc; i++)
        w->l[i] = strlen(w->v[i]);
    rs__home_key(r, slot, "epoch", w->key, sizeof w->key);
    w->cc = (rs_ccmd_t){.argc = argc,
                        .argv = w->v,
                        .lens = w->l,
                        .key = w->key,
                        .key_len = strlen(w->key),
                        .cb = wait_cb,
                        .data = w,
                        .pinned = 1,
                        .pin = *a};
    if (rs__cluster_send(cl, &w->cc) != 0) {
        sema__free(w);
        return -1;
    }
    return 0;
}

void rs__sh_strict_check(rs_t *r)
{
    uint16_t slot_of[RS_SLOT_NODES_MAX + 1] = {0};
    uint8_t want[RS_SLOT_NODES_MAX + 1] = {0};

    if (elist_empty(&r->held) && elist_empty(&r->unconfirmed))
        return; /* (every loop turn: nothing to do, at once) */
    for (elist_t *e = r->held.next; e != &r->held; e = e->next) {
        rs_req_t *rq = ECONTAINER(e, rs_req_t, link);
        want[rq->wnode] = 1;
        slot_of[rq->wnode] = rq->wslot;
    }
    for (elist_t *e = r->unconfirmed.next; e != &r->unconfirmed; e = e->next) {
        rs_cmd_t *c = ECONTAINER(e, rs_cmd_t, link);
        want[c->wnode] = 1;
        slot_of[c->wnode] = (uint16_t)c->slot;
    }
    if (want[0]) /* (held outside an answer: nothing proves them) */
        rs__strict_settle(r, 0, -1, 0);
    for (uint16_t k = 1; k <= RS_SLOT_NODES_MAX; k++) {
        rs_sh_strict_t *st = rs__sh_strict_of(r, k);
        if (!want[k] || st == NULL || st->inflight)
            continue;
        if (send_wait(r, k, slot_of[k], 0) != 0) {
            rs__strict_settle(r, k, -1, 0); /* (cannot be asked: short) */
            continue;
        }
        st->inflight = 1;
        send_wait(r, k, slot_of[k], 1); /* (behind it on the same connection) */
    }
}

int rs__sh_strict_may(rs_t *r, uint16_t was)
{
    const rs_sh_strict_t *st = rs__sh_strict_of(r, was);

    return r->strict && r->replicas > 0 && st != NULL && st->counted && !st->short_of_all &&
           st->replid[0] != '\0';
}

int rs__sh_strict_proven(rs_t *r, uint16_t was, const rs_slot_addr_t *now, const char *replid2)
{
    rs_sh_strict_t *st = rs__sh_strict_of(r, was);

    if (!rs__sh_strict_may(r, was) || strcmp(replid2, st->replid) != 0)
        return 0; /* not a promoted replica of it */
    if (st->said.port != now->port || strcmp(st->said.host, now->host) != 0)
        log_warn("redis: %s:%d, a replica of %s:%d, is its slots' primary now, and every "
                 "acknowledged write was on every replica (WAIT counted them all): grants go on",
                 now->host, now->port, rs__sh_node(r, was)->host, rs__sh_node(r, was)->port);
    st->said = *now;
    return 1;
}
