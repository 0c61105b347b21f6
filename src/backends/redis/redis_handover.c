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
 * With strict durability a promoted replica may prove it too (redis_shards_strict.c), from the
 * same INFO. Anything else (no answer in RS_HO_ASK_MS, another answer) is taken for a
 * failover: the slot pauses, as it always did.
 *
 * The questions go on asynchronous connections on the loop, one per node at a time: the slots
 * that change while a node is being asked add their question to its connection (a failover
 * moves thousands of slots at once), and wait for the answers while every other request goes
 * on. A node that did not answer is not asked again for RS_HO_REMEMBER_MS, nor is an old
 * primary that refused (not a primary, or it sent a slot elsewhere); a new primary's INFO is
 * used that long for the slots after. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* what a slot being decided waits for, and has learnt */
#define HO_ASKED 1u  /* it is being decided */
#define HO_WAIT_W 2u /* the old primary's answer for the slot (ROLE, then EXISTS) */
#define HO_WAIT_N 4u /* the new primary's INFO replication */
#define HO_MOVED 8u  /* the old primary, a primary, sent the slot to the new one */
#define HO_B 16u     /* strict durability may prove it (rs__sh_strict_may) */

/* what an answer on a node's connection is for: in its privdata, with the node and the slot */
enum { Q_ROLE, Q_EXISTS, Q_INFO };

static void *q_priv(int q, int node, unsigned slot)
{
    return (void *)(uintptr_t)((unsigned)q << 24 | (unsigned)node << 16 | slot);
}

static int same(const rs_slot_addr_t *a, const rs_slot_addr_t *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* The node at a (1 + its index): found, or an unused one taken over; 0 when every one is in
 * use (its question then goes unasked: a no). */
static int node_at(rs_handover_t *h, const rs_slot_addr_t *a)
{
    int spare = -1;
    uint64_t oldest = UINT64_MAX;

    for (int i = 0; i < RS_HO_NODES_MAX; i++) {
        const rs_ho_node_t *n = &h->node[i];
        uint64_t seen = n->info_at > n->quiet_until ? n->info_at : n->quiet_until;
        seen = seen > n->refused_until ? seen : n->refused_until;
        if (n->addr.host[0] != '\0' && same(&n->addr, a))
            return i + 1;
        if (n->ac == NULL && n->users == 0 && seen <= oldest) {
            spare = i;
            oldest = seen;
        }
    }
    if (spare < 0)
        return 0;
    h->node[spare] = (rs_ho_node_t){.addr = *a, .master = -1};
    return spare + 1;
}

static int info_fresh(const rs_ho_node_t *n, uint64_t now)
{
    return n->info_at != 0 && now < n->info_at + RS_HO_REMEMBER_MS;
}

/* ---- the verdict ---- */

/* Whether the slot's change is proven, from what its nodes answered. */
static int verdict(rs_handover_t *h, unsigned slot)
{
    rs_t *r = h->r;
    uint8_t f = h->flags[slot];
    const rs_ho_node_t *n = &h->node[h->to[slot] - 1];
    rs_cluster_t *cl = rs__sh_cluster(r);
    const rs_slot_addr_t *owner = cl != NULL ? rs__cluster_owner(cl, slot) : NULL;

    if (owner == NULL || !same(owner, &n->addr) || !info_fresh(n, rs__now(r)))
        return 0; /* (moved on again meanwhile, or the new primary did not answer) */
    if ((f & HO_MOVED) && strcmp(n->role, "master") == 0 && strcmp(n->off, "-1") == 0) {
        const rs_slot_addr_t *from = &h->node[h->from[slot] - 1].addr;
        if (!same(&h->said_from, from) || !same(&h->said_to, &n->addr))
            log_info("redis: slots move from %s:%d to %s:%d, a primary never promoted: a "
                     "reshard, which carries every write: their grants go on",
                     from->host, from->port, n->addr.host, n->addr.port);
        h->said_from = *from;
        h->said_to = n->addr;
        return 1;
    }
    return (f & HO_B) && rs__sh_strict_proven(r, h->was[slot], &n->addr, n->replid2);
}

/* The slot is decided: its nodes are let go. */
static int settle(rs_handover_t *h, unsigned slot)
{
    int yes = verdict(h, slot);

    if (h->from[slot] != 0)
        h->node[h->from[slot] - 1].users--;
    h->node[h->to[slot] - 1].users--;
    h->from[slot] = h->to[slot] = h->flags[slot] = 0;
    return yes;
}

/* Decide the slot if nothing it waits for is left. */
static void maybe_done(rs_handover_t *h, unsigned slot)
{
    if (h->flags[slot] != 0 && !(h->flags[slot] & (HO_WAIT_W | HO_WAIT_N)))
        rs__sh_handed(h->r, slot, settle(h, slot));
}

/* ---- a node's connection ---- */

/* Its questions are all answered, or it went: the slots that waited for its INFO are decided
 * (those that waited for its answer on their own slot were, with that answer). */
static void round_end(rs_handover_t *h, int i)
{
    rs_ho_node_t *n = &h->node[i];
    redisAsyncContext *ac = n->ac;
    uint64_t now = rs__now(h->r);

    n->ac = NULL;
    if (ac != NULL)
        redisAsyncFree(ac); /* (from inside its last callback: hiredis frees it after) */
    if (n->failed)
        n->quiet_until = now + RS_HO_REMEMBER_MS;
    n->failed = 0;
    for (unsigned s = 0; s < RS_SLOTS; s++)
        if ((h->flags[s] & HO_WAIT_N) && h->to[s] == i + 1) {
            h->flags[s] &= (uint8_t)~HO_WAIT_N;
            maybe_done(h, s);
        }
}

static int is_master(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
           rep->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(rep->element[0]->str, "master") == 0;
}

/* EXISTS of the slot's epoch key on its old primary: MOVED or ASK to the new one, after ROLE
 * said it is a primary, is what a reshard answers. */
static void exists_answer(rs_handover_t *h, rs_ho_node_t *n, unsigned slot, const redisReply *rep)
{
    rs_redirect_t rd;
    int moved = 0;

    if (!(h->flags[slot] & HO_WAIT_W))
        return;
    h->flags[slot] &= (uint8_t)~HO_WAIT_W;
    if (rep == NULL)
        return; /* (no answer: the connection's end marks the node quiet) */
    if (n->master == 1 && rep->type == REDIS_REPLY_ERROR &&
        rs__slot_redirect(rep->str, rep->len, n->addr.host, &rd) != RS_REDIR_NONE)
        moved = rd.slot == slot && same(&rd.to, &h->node[h->to[slot] - 1].addr);
    if (moved)
        h->flags[slot] |= HO_MOVED;
    else /* (a replica, or not handing slots over: not asked about a move again soon) */
        n->refused_until = rs__now(h->r) + RS_HO_REMEMBER_MS;
}

static void info_answer(rs_t *r, rs_ho_node_t *n, const redisReply *rep)
{
    n->role[0] = n->off[0] = n->replid2[0] = '\0';
    if (rep->type == REDIS_REPLY_STRING) {
        rs__info_field(rep->str, "role", n->role, sizeof n->role);
        rs__info_field(rep->str, "second_repl_offset", n->off, sizeof n->off);
        rs__info_field(rep->str, "master_replid2", n->replid2, sizeof n->replid2);
    }
    n->info_at = rs__now(r); /* (an error answer too: nothing proven, and not asked again) */
}

/* An answer on a node's connection, or NULL: the connection went (failed, dropped at its
 * deadline, or closed) and hiredis runs every callback left with NULL as it frees it. */
static void on_answer(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_handover_t *h = ac->data;
    uintptr_t p = (uintptr_t)priv;
    int i = (int)(p >> 16 & 0xff);
    rs_ho_node_t *n = &h->node[i];
    const redisReply *rep = reply;

    if (rep == NULL) {
        n->ac = NULL; /* (being freed: never freed again here) */
        n->failed = 1;
    }
    switch (p >> 24) {
    case Q_ROLE:
        n->master = rep != NULL && is_master(rep);
        if (rep != NULL && !n->master)
            n->refused_until = rs__now(h->r) + RS_HO_REMEMBER_MS;
        break;
    case Q_EXISTS:
        exists_answer(h, n, (unsigned)(p & 0xffff), rep);
        maybe_done(h, (unsigned)(p & 0xffff));
        break;
    default:
        if (rep != NULL)
            info_answer(h->r, n, rep);
        break;
    }
    if (--n->waiting == 0)
        round_end(h, i);
}

/* Node i's connection, opened when none is in flight: 0, or -1 (the node is then quiet a
 * while: its questions go unasked). */
static int open_round(rs_handover_t *h, int i)
{
    rs_ho_node_t *n = &h->node[i];
    rs_t *r = h->r;
    rs_cluster_t *cl = rs__sh_cluster(r);
    const char *addr = cl != NULL ? rs__cluster_address(cl, &n->addr) : NULL;
    char why[128];

    if (n->ac != NULL)
        return 0;
    /* (a name never resolved for the cluster's own connection is not resolved here, on the
     * loop: the node goes unasked, as one that does not answer) */
    if (addr == NULL ||
        (n->ac = rs__async_open(r->loop, addr, n->addr.port, why, sizeof why)) == NULL) {
        n->quiet_until = rs__now(r) + RS_HO_REMEMBER_MS;
        return -1;
    }
    n->ac->data = h;
    n->deadline = rs__now(r) + RS_HO_ASK_MS;
    n->waiting = 0;
    n->asked_role = n->asked_info = n->failed = 0;
    n->master = -1;
    rs__async_auth(r, n->ac, NULL, NULL); /* (refused: the questions after say so) */
    return 0;
}

/* Queue one question on node i's open connection (key: EXISTS's): 0, or -1. */
static int queue(rs_handover_t *h, int i, int q, unsigned slot, const char *key)
{
    static const char *const fmt[] = {"ROLE", "EXISTS %s", "INFO replication"};
    rs_ho_node_t *n = &h->node[i];

    if (redisAsyncCommand(n->ac, on_answer, q_priv(q, i, slot), fmt[q], key) != REDIS_OK)
        return -1;
    n->waiting++;
    return 0;
}

/* Ask the old primary about the slot: ROLE (once per connection), then EXISTS of its key. */
static int ask_move(rs_handover_t *h, int i, unsigned slot)
{
    rs_ho_node_t *n = &h->node[i];
    char key[32];

    if (open_round(h, i) != 0)
        return -1;
    if (!n->asked_role && queue(h, i, Q_ROLE, 0, NULL) == 0)
        n->asked_role = 1; /* (unasked, it answers no move: master stays -1) */
    rs__home_key(h->r, slot, "epoch", key, sizeof key);
    return queue(h, i, Q_EXISTS, slot, key);
}

/* Ask the new primary for INFO replication (once per connection). */
static int ask_info(rs_handover_t *h, int i)
{
    rs_ho_node_t *n = &h->node[i];

    if (n->ac != NULL && n->asked_info)
        return 0; /* (its answer is on the way) */
    if (open_round(h, i) != 0 || queue(h, i, Q_INFO, 0, NULL) != 0)
        return -1;
    n->asked_info = 1;
    return 0;
}

/* A connection just opened whose questions could not be queued is freed at once (no
 * callback of it runs: AUTH's has none). */
static void close_idle(rs_handover_t *h, int i)
{
    rs_ho_node_t *n = &h->node[i];
    redisAsyncContext *ac = n->ac;

    if (ac == NULL || n->waiting > 0)
        return;
    n->ac = NULL;
    redisAsyncFree(ac);
}

/* Drop node i's connection (its deadline, or the end): what it has not answered fails. */
static void drop(rs_handover_t *h, int i)
{
    rs_ho_node_t *n = &h->node[i];
    redisAsyncContext *ac = n->ac;

    if (ac == NULL)
        return;
    n->ac = NULL;
    n->failed = 1;
    if (n->waiting == 0) {
        redisAsyncFree(ac);
        round_end(h, i);
        return;
    }
    redisAsyncFree(ac); /* (each callback left runs with NULL; the last ends the round) */
}

/* ---- the interface ---- */

int rs__handover_ask(rs_t *r, rs_handover_t *h, unsigned slot, uint16_t was,
                     const rs_slot_addr_t *from, const rs_slot_addr_t *to)
{
    uint64_t now = rs__now(r);
    uint8_t f = HO_ASKED;
    int w, n, move;

    if (h->flags[slot] != 0)
        return RS_HO_ASKING; /* (already asked: one question per change) */
    if ((w = node_at(h, from)) != 0)
        h->node[w - 1].users++; /* (kept: the look-up below may take an unused one over) */
    if ((n = node_at(h, to)) == 0) {
        if (w != 0)
            h->node[w - 1].users--;
        return RS_HO_NO; /* (every node in use: not asked, a pause) */
    }
    h->node[n - 1].users++;
    h->from[slot] = (uint8_t)w;
    h->to[slot] = (uint8_t)n;
    h->was[slot] = was;
    if (rs__sh_strict_may(r, was))
        f |= HO_B;
    move = w != 0 && h->node[w - 1].quiet_until <= now && h->node[w - 1].refused_until <= now;
    if (move && ask_move(h, w - 1, slot) == 0)
        f |= HO_WAIT_W;
    if (((f & HO_WAIT_W) || (f & HO_B)) && !info_fresh(&h->node[n - 1], now) &&
        h->node[n - 1].quiet_until <= now && ask_info(h, n - 1) == 0)
        f |= HO_WAIT_N;
    if (w != 0)
        close_idle(h, w - 1);
    close_idle(h, n - 1);
    h->flags[slot] = f;
    if (f & (HO_WAIT_W | HO_WAIT_N))
        return RS_HO_ASKING;
    return settle(h, slot) ? RS_HO_YES : RS_HO_NO;
}

void rs__handover_tick(rs_handover_t *h, uint64_t now)
{
    for (int i = 0; i < RS_HO_NODES_MAX; i++)
        if (h->node[i].ac != NULL && h->node[i].deadline <= now)
            drop(h, i);
}

void rs__handover_close(rs_handover_t *h)
{
    for (int i = 0; i < RS_HO_NODES_MAX; i++)
        drop(h, i);
}
