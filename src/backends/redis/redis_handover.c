/* SPDX-License-Identifier: MIT */
/* redis_handover.c - on a Redis Cluster, whether a slot whose primary changed was handed over
 * (a reshard: its keys moved, every write acknowledged there with them) rather than taken
 * over by a promoted replica, which may lack writes the old primary acknowledged.
 *
 * A slot migration ends with the old primary, still a primary, giving the slot to a node that
 * was a primary already: MIGRATE moved each key whole, and a key is gone from the source only
 * once the target has it. A failover leaves the old primary dead, unreachable, a replica (a
 * graceful CLUSTER FAILOVER), or a primary that still calls the slot its own (a partition);
 * and the new primary is a replica promoted since it started. So the change is proven a
 * handover only when, asked now, the old primary is a primary and sends the slot's epoch key
 * to the new one (MOVED, or ASK while it has not been told the move ended), and the new one
 * is a primary never promoted since it started (INFO replication: second_repl_offset -1).
 * Anything else (no answer in 250 ms, another answer) is taken for a failover: the slot
 * pauses, as it always did. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define RS_HANDOVER_DOWN_MS 1000 /* a node found down is not asked again this long */

static int same(const rs_slot_addr_t *a, const rs_slot_addr_t *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* INFO replication of the node at a: its role and second_repl_offset, into role and off ("" when
 * it does not answer). */
static void repl_of(const rs_t *r, const rs_slot_addr_t *a, char *role, char *off, size_t cap)
{
    redisContext *c = rs__sync_open(r, a->host, a->port);
    redisReply *rep = c != NULL ? redisCommand(c, "INFO replication") : NULL;

    role[0] = off[0] = '\0';
    if (rep != NULL && rep->type == REDIS_REPLY_STRING) {
        rs__info_field(rep->str, "role", role, cap);
        rs__info_field(rep->str, "second_repl_offset", off, cap);
    }
    freeReplyObject(rep);
    redisFree(c);
}

/* Whether the node at was, a primary, sends a key of slot to `to` (MOVED, or ASK). */
static int moved_to(const rs_t *r, const rs_slot_addr_t *was, unsigned slot, const char *key,
                    const rs_slot_addr_t *to)
{
    redisContext *c = rs__sync_open(r, was->host, was->port);
    redisReply *role = c != NULL ? redisCommand(c, "ROLE") : NULL;
    redisReply *rep = NULL;
    rs_redirect_t rd;
    int yes = 0;

    if (role != NULL && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
        role->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(role->element[0]->str, "master") == 0)
        rep = redisCommand(c, "EXISTS %s", key);
    /* (ASK: the old primary has not been told the end of the move yet, and the slot's epoch,
     * which moves with its keys, is at the target already) */
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR &&
        rs__slot_redirect(rep->str, rep->len, was->host, &rd) != RS_REDIR_NONE)
        yes = rd.slot == slot && same(&rd.to, to);
    freeReplyObject(rep);
    freeReplyObject(role);
    redisFree(c);
    return yes;
}

int rs__handover_proven(rs_t *r, rs_handover_t *h, unsigned slot, const rs_slot_addr_t *was,
                        const rs_slot_addr_t *now)
{
    char key[32], role[32], off[32];
    uint64_t t = rs__now(r);

    if (h->down_until > t && same(&h->down, was))
        return 0;
    rs__home_key(r, slot, "epoch", key, sizeof key);
    if (!moved_to(r, was, slot, key, now)) {
        h->down = *was; /* (dead, a replica, or not handing slots over: not asked again soon) */
        h->down_until = t + RS_HANDOVER_DOWN_MS;
        return 0;
    }
    repl_of(r, now, role, off, sizeof role);
    if (strcmp(role, "master") != 0 || strcmp(off, "-1") != 0)
        return 0;
    if (!same(&h->said_from, was) || !same(&h->said_to, now))
        log_info("redis: slots move from %s:%d to %s:%d, a primary never promoted: a reshard, "
                 "which carries every write: their grants go on",
                 was->host, was->port, now->host, now->port);
    h->said_from = *was;
    h->said_to = *now;
    return 1;
}
