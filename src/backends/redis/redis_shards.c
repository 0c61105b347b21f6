/* SPDX-License-Identifier: MIT */
/* redis_shards.c - the Redis back end on a Redis Cluster (redis+cluster://): every command goes
 * to the primary of its key's slot (redis_cluster.c), and what one Redis has once is had once
 * per slot: the epoch (a hello the first time a slot is used, and again when the slot answers
 * with another epoch), this instance's heartbeat (a beat per slot where it has waiters), the
 * sweep of due times, the counts, and the wake-up channel (SSUBSCRIBE, per slot with waiters
 * here). The script library is loaded on a primary when one says it lacks it. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* One slot, as this instance knows it. */
typedef struct {
    uint64_t epoch;                  /* 0: not known yet (a hello goes first) */
    uint64_t old;                    /* the epoch it had when the slot answered with another one */
    uint64_t sweep_at;               /* loop ms of its earliest due time; UINT64_MAX: none */
    uint32_t nsems, nleases, nlocks; /* as its last answer told */
    uint32_t nparked;                /* requests parked here on its semaphores */
    uint32_t nwatch;                 /* ticket watchers here on its tickets */
    uint16_t node;                   /* 1 + the index in nodes of the primary that answered its
                                        last hello; 0: none yet */
    uint8_t hello, sweeping, beating, subscribed, tk_subscribed;
    uint8_t recheck; /* a sweep's answer was lost: its next answer checks the waiters here */
    uint8_t changed; /* its primary is another than `node`: the hello says "unproven" */
    uint8_t handed;  /* ...unless the new one has every write `node` acknowledged: a reshard,
                        or (strict) a replica of it when WAIT counted every replica */
    uint8_t probing; /* ...which its old and new primary are being asked (redis_handover.c):
                        its hello waits for the answer */
} rs_slot_t;

/* A primary the library was loaded on (or is being loaded on). */
typedef struct {
    rs_slot_addr_t addr;
    uint8_t loading;
} rs_lib_node_t;

/* A command on its way: the cluster's view of an rs_cmd_t, with its epoch and flags, and for
 * a script its key followed by '!': a key that never exists, so that while its slot migrates
 * the source answers ASK to every script (Redis runs a command whose named keys are there, and
 * a script touches more keys than it names), and the script waits for the slot to have moved
 * (no_ask) instead of running with part of its keys gone. The script drops the '!'. */
typedef struct {
    rs_ccmd_t cc;
    rs_t *r;
    rs_cmd_t *c;
    char epoch[24], flags[8];
    const char *v[]; /* argc pointers, then argc lengths */
} rs_out_t;

struct rs_shards {
    rs_cluster_t *cl;
    rs_slot_addr_t seeds[RS_SLOT_SEEDS_MAX];
    int nseeds, layout_said;
    unsigned probe;    /* the slot of the last beat sent without waiters (rs__sh_beat) */
    uint64_t sweep_at; /* no later than the earliest of the slots' */
    rs_lib_node_t libs[RS_SLOT_NODES_MAX];
    int nlibs;
    rs_slot_addr_t nodes[RS_SLOT_NODES_MAX]; /* the primaries slots' hellos were answered by */
    int nnodes;
    uint16_t said_from, said_to; /* the last change of primary logged (once, not per slot) */
    rs_handover_t ho;
    rs_sh_strict_t strict[RS_SLOT_NODES_MAX]; /* strict durability, per node of `nodes` */
    rs_slot_tags_t tags;
    rs_slot_t slot[RS_SLOTS];
};

static void on_message(void *data, const char *chan, size_t clen, const char *msg, size_t mlen);
static void on_subscribed(void *data, const char *chan, size_t clen);

int rs__sh_open(rs_t *r, char *errbuf, size_t errlen)
{
    rs_shards_t *sh = sema__calloc(1, sizeof(*sh));
    rs_cluster_events_t ev = {.data = r, .message = on_message, .subscribed = on_subscribed};

    if (sh == NULL)
        return SEMA_ENOMEM;
    sh->nseeds = rs__slot_addrs(r->host, strlen(r->host), 6379, sh->seeds);
    if (sh->nseeds <= 0) {
        snprintf(errbuf, errlen, "bad Redis Cluster seed list \"%s\"", r->host);
        sema__free(sh);
        return SEMA_EINVAL;
    }
    rs__slot_tags_make(&sh->tags);
    sh->sweep_at = UINT64_MAX;
    for (unsigned s = 0; s < RS_SLOTS; s++)
        sh->slot[s].sweep_at = UINT64_MAX;
    if (rs__cluster_open(r->loop, sh->seeds, sh->nseeds, r->user, r->pass, r->cmd_timeout_ms, &ev,
                         &sh->cl) != 0) {
        sema__free(sh);
        return SEMA_ENOMEM;
    }
    r->sh = sh;
    sh->ho.r = r;
    sh->probe = RS_SLOTS - RS_SLOTS / 3 - 1; /* (the first probe: slot 0) */
    return 0;
}

void rs__sh_close(rs_t *r)
{
    if (r->sh != NULL)
        rs__handover_close(&r->sh->ho); /* (its slots are told no: no hello while closing) */
    if (r->sh != NULL && r->sh->cl != NULL) {
        rs_cluster_t *cl = r->sh->cl;
        r->sh->cl = NULL;
        rs__cluster_close(cl);
    }
}

void rs__sh_free(rs_t *r)
{
    sema__free(r->sh);
    r->sh = NULL;
}

/* ---- keys ---- */

uint32_t rs__sh_tag(const rs_t *r, uint32_t name_hash)
{
    uint32_t h = name_hash;

    /* (FNV-1a's low bits barely move between names that differ in their last bytes, "s1",
     * "s2": mixed first, as a hash table's finalizer does, so such names spread over slots) */
    h ^= h >> 16;
    h *= 0x45d9f3bu;
    h ^= h >> 16;
    return r->sh->tags.tag[h % RS_SLOTS];
}

size_t rs__home_key(const rs_t *r, unsigned slot, const char *what, char *buf, size_t cap)
{
    int n = r->sh != NULL
                ? snprintf(buf, cap, "sema:{%08x}%s", (unsigned)r->sh->tags.tag[slot], what)
                : snprintf(buf, cap, "sema:%s", what);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

void rs__id_mark(const rs_t *r, char *id, const char *stem, size_t len)
{
    if (r->sh != NULL)
        rs__slot_id_put(id, rs__slot_of(stem, len));
}

char *rs__id_key(const rs_t *r, const char *what, const char *id, size_t len, size_t *klen,
                 int *nomem)
{
    char home[32];
    int slot = r->sh != NULL ? rs__slot_id_get(id, len) : 0;
    char *k;

    *nomem = 0;
    if (slot < 0)
        return NULL; /* it names no slot: no lease or ticket has it */
    rs__home_key(r, (unsigned)slot, what, home, sizeof home);
    if ((k = rs__key_cat(home, id, len, "", klen)) == NULL)
        *nomem = 1;
    return k;
}

/* ---- sending ---- */

static void out_cb(rs_cluster_t *cl, rs_ccmd_t *cc, int how, redisReply *rep);

/* The key a command is routed by: an FCALL's, else its first argument. */
static const char *cmd_key(const rs_cmd_t *c, size_t *len)
{
    const char *p = (const char *)(c->lens + c->argc);
    int at = c->script ? RS_FCALL_HEAD - 1 : 1;

    if (c->argc <= at) {
        *len = 0;
        return "";
    }
    for (int i = 0; i < at; i++)
        p += c->lens[i];
    *len = c->lens[at];
    return p;
}

static void wait_for(rs_t *r, rs_cmd_t *c)
{
    elist_push_back(&r->pending, &c->link);
    r->npending++;
}

static void send_hello(rs_t *r, unsigned slot);

/* 1 + the index of a in nodes (added if new). A full table (as many primaries came and went
 * as a map can name) starts again, and every slot says hello again "unproven": a pause,
 * never a change missed. */
static uint16_t node_of(rs_shards_t *sh, const rs_slot_addr_t *a)
{
    for (int i = 0; i < sh->nnodes; i++)
        if (sh->nodes[i].port == a->port && strcmp(sh->nodes[i].host, a->host) == 0)
            return (uint16_t)(i + 1);
    if (sh->nnodes == RS_SLOT_NODES_MAX) {
        for (unsigned s = 0; s < RS_SLOTS; s++) {
            rs_slot_t *sl = &sh->slot[s];
            if (sl->node != 0) {
                sl->changed = 1;
                sl->handed = 0;
                sl->old = sl->epoch != 0 ? sl->epoch : sl->old;
                sl->epoch = 0;
                sl->node = 0;
            }
        }
        sh->nnodes = 0;
        memset(sh->strict, 0, sizeof sh->strict);
    }
    sh->strict[sh->nnodes] = (rs_sh_strict_t){.short_of_all = 1}; /* (nothing counted yet) */
    sh->nodes[sh->nnodes++] = *a;
    return (uint16_t)sh->nnodes;
}

/* The slot's primary is another than the one that answered its hello (a failover, or a slot
 * moved): with asynchronous replication it may lack grants the one before acknowledged, so
 * the slot says hello again, "unproven", before anything else runs there; unless the one
 * before handed the slot over (a reshard, or strict's every replica: redis_handover.c asks
 * the two primaries, and the hello waits for their answer), when the hello is proven. */
static void primary_changed(rs_t *r, rs_cmd_t *c)
{
    rs_shards_t *sh = r->sh;
    rs_slot_t *sl = &sh->slot[c->slot];
    unsigned slot = c->slot;
    const rs_slot_addr_t *now = rs__cluster_owner(sh->cl, slot);

    if (!sl->changed) { /* (once per change: the commands in flight come back MOVED each) */
        int v = sl->node != 0 && now != NULL
                    ? rs__handover_ask(r, &sh->ho, slot, sl->node, &sh->nodes[sl->node - 1], now)
                    : RS_HO_NO;
        sl->probing = v == RS_HO_ASKING;
        sl->handed = v == RS_HO_YES;
    }
    sl->changed = 1;
    if (sl->epoch != 0)
        sl->old = sl->epoch; /* (and if the new primary lost the slot's data, the hello says) */
    sl->epoch = 0;
    if (c->kind == RS_CMD_HELLO) {
        sl->hello = 0; /* a hello sent "proven" ended unrun: another one, "unproven" */
        rs__cmd_free(c);
    } else {
        wait_for(r, c);
    }
    send_hello(r, slot);
}

/* Whether the slot's primary, as the map says now, is not the one its hello was answered by. */
static int owner_changed(const rs_shards_t *sh, const rs_slot_t *sl, unsigned slot)
{
    const rs_slot_addr_t *a = rs__cluster_owner(sh->cl, slot), *was;

    if (sl->node == 0 || a == NULL)
        return 0;
    was = &sh->nodes[sl->node - 1];
    return a->port != was->port || strcmp(a->host, was->host) != 0;
}

/* A plain acquire or release (c->pk; v, l: as it goes) in one argument, packed into buf (cap
 * bytes) and put in place of its head: how many arguments it has now (as many as before when
 * it does not pack). */
static int pack(const rs_cmd_t *c, const char **v, size_t *l, char *buf, size_t cap)
{
    rs_pk_buf_t b = {buf, buf + cap};

    rs__cmd_pack(c, v, l, 1, &b);
    if (b.p == NULL)
        return c->argc;
    v[RS_FCALL_HEAD] = buf;
    l[RS_FCALL_HEAD] = (size_t)(b.p - buf);
    return RS_FCALL_HEAD + 1;
}

void rs__sh_send(rs_t *r, rs_cmd_t *c)
{
    rs_shards_t *sh = r->sh;
    size_t klen;
    const char *key = cmd_key(c, &klen), *p = (const char *)(c->lens + c->argc);
    rs_slot_t *sl;
    rs_out_t *o;
    size_t *l;
    int argc = c->argc;

    c->slot = rs__slot_of(key, klen);
    sl = &sh->slot[c->slot];
    if (sh->cl == NULL)
        return rs__cmd_fail(r, c, BE_MSG_REDIS_UNREACHABLE);
    if (c->script && c->kind != RS_CMD_HELLO && sl->epoch == 0) {
        wait_for(r, c); /* sent once its slot's hello is answered */
        send_hello(r, c->slot);
        return;
    }
    if (c->script && !sl->changed && owner_changed(sh, sl, c->slot))
        return primary_changed(r, c);
    size_t pk_cap = c->pk != 0 ? rs__cmd_pack_cap(c) : 0;
    o = sema__calloc(1, sizeof(*o) + (size_t)c->argc * (sizeof(char *) + sizeof(size_t)) + klen +
                            1 + pk_cap);
    if (o == NULL)
        return rs__cmd_fail(r, c, BE_MSG_NOMEM);
    l = (size_t *)(o->v + c->argc);
    for (int i = 0; i < c->argc; i++) {
        o->v[i] = p;
        l[i] = c->lens[i];
        p += c->lens[i];
    }
    if (c->script) {
        char *phantom = (char *)(l + c->argc);
        memcpy(phantom, key, klen);
        phantom[klen] = '!';
        o->v[RS_FCALL_HEAD - 1] = phantom;
        l[RS_FCALL_HEAD - 1] = klen + 1;
        o->cc.no_ask = 1;
        const size_t ep = RS_FCALL_HEAD + RS_H_EPOCH, fl = RS_FCALL_HEAD + RS_H_FLAGS;
        size_t n = 1;
        if (c->kind != RS_CMD_HELLO)
            snprintf(o->epoch, sizeof o->epoch, "%llu", (unsigned long long)sl->epoch);
        o->flags[0] = o->v[fl][0];
        if (c->lens[fl] > 1 && o->v[fl][1] == 't') /* (a request naming a tenant) */
            o->flags[n++] = 't';
        if (c->sent_mono != 0)
            o->flags[n++] = 'r';
        if (rs__paused(r))
            o->flags[n++] = 'p';
        o->flags[n++] = 'c';
        o->v[ep] = o->epoch;
        l[ep] = strlen(o->epoch);
        o->v[fl] = o->flags;
        l[fl] = n;
        if (n == 2) /* plain ('c' only): an acquire or a release goes packed, as on one Redis */
            argc = pack(c, o->v, l, phantom + klen + 1, pk_cap);
        if (sl->node != 0 && !sl->changed) { /* run only where its hello was answered */
            o->cc.pinned = 1;
            o->cc.pin = sh->nodes[sl->node - 1];
        }
    }
    o->r = r;
    o->c = c;
    o->cc.argc = argc;
    o->cc.argv = o->v;
    o->cc.lens = l;
    o->cc.key = key;
    o->cc.key_len = klen;
    o->cc.cb = out_cb;
    o->cc.data = o;
    c->sent_mono = rs__now(r);
    elist_push_back(&r->inflight, &c->link);
    r->commands++;
    if (rs__cluster_send(sh->cl, &o->cc) != 0) {
        elist_remove(&c->link);
        sema__free(o);
        rs__cmd_fail(r, c, BE_MSG_REDIS_BACKLOG);
    }
}

void rs__sh_flush(rs_t *r)
{
    elist_t list;

    if (r->sh == NULL || elist_empty(&r->pending))
        return;
    elist_init(&list);
    elist_splice(&list, &r->pending);
    r->npending = 0;
    while (!elist_empty(&list)) {
        rs_cmd_t *c = ECONTAINER(list.next, rs_cmd_t, link);
        elist_remove(&c->link);
        rs__sh_send(r, c);
    }
}

/* ---- a slot's hello ---- */

static void send_hello(rs_t *r, unsigned slot)
{
    rs_slot_t *sl = &r->sh->slot[slot];
    char key[32], known[24], maxttl[24], horizon[24], fresh[24];
    int unproven = sl->changed && !sl->handed;
    rs_args_t a = {0};
    uint64_t id;
    rs_cmd_t *c;

    if (sl->hello || sl->probing)
        return; /* (the commands wait: sent once it is answered) */
    rs__home_key(r, slot, "epoch", key, sizeof key);
    engine__random(r->front, &id, sizeof id); /* below 2^52: exact in the script's numbers */
    snprintf(fresh, sizeof fresh, "%llu", (unsigned long long)((id >> 12) | 1));
    if (sl->old != 0)
        snprintf(known, sizeof known, "%llu", (unsigned long long)sl->old);
    else
        known[0] = '\0';
    snprintf(maxttl, sizeof maxttl, "%lld", (long long)r->cfg.max_ttl_ms);
    /* a new primary: the latest expiry this instance heard of is no bound on the leases
     * others granted in the slot, nor on one whose write the new primary lacks: max ttl */
    snprintf(horizon, sizeof horizon, "%lld", unproven ? 0LL : (long long)r->horizon_ms);
    rs__args_head(r, &a, key, strlen(key), rs__op_name(RS_OP_HELLO), "", NULL);
    rs__arg_str(&a, fresh);
    rs__arg_str(&a, known);
    rs__arg_str(&a, maxttl);
    rs__arg_str(&a, horizon);
    rs__arg_str(&a, unproven ? "1" : "0");
    if ((c = rs__cmd_build(r, RS_CMD_HELLO, &a)) == NULL)
        return; /* out of memory: the next command of the slot asks again */
    sl->hello = 1;
    rs__sh_send(r, c);
}

void rs__sh_handed(rs_t *r, unsigned slot, int yes)
{
    rs_slot_t *sl = &r->sh->slot[slot];

    sl->probing = 0;
    if (!sl->changed)
        return;                        /* (a hello answered meanwhile: the change is behind it) */
    sl->handed = yes && sl->node != 0; /* (node 0: the nodes' table started again, unproven) */
    if (!r->closing)
        send_hello(r, slot);
}

void rs__sh_tick(rs_t *r, uint64_t now)
{
    rs__handover_tick(&r->sh->ho, now);
}

/* Say once per change of primary (not per slot) that the slots it served pause. */
static void say_changed(rs_t *r, const rs_slot_t *sl, uint16_t by, int64_t safe, int64_t now)
{
    rs_shards_t *sh = r->sh;

    if (sl->node == 0 || by == 0 || (sh->said_from == sl->node && sh->said_to == by))
        return;
    sh->said_from = sl->node;
    sh->said_to = by;
    log_warn("redis: the primary of slots served by %s:%d is %s:%d now, and nothing proves it "
             "has every acknowledged write: no grants on those slots' semaphores for %lld ms, "
             "until every lease granted before may have run out",
             sh->nodes[sl->node - 1].host, sh->nodes[sl->node - 1].port, sh->nodes[by - 1].host,
             sh->nodes[by - 1].port, (long long)(safe > now ? safe - now : 0));
}

/* Its answer: { epoch, safe_at, now }, or another layout's { '', '0', now, 'layout', n }; by:
 * the node that answered (1 + its index in nodes). */
static void hello_done(rs_t *r, const rs_cmd_t *c, const redisReply *rep, uint16_t by)
{
    rs_slot_t *sl = &r->sh->slot[c->slot];
    const char *e = rs__el_str(rep, 0, NULL);
    uint64_t epoch = strtoull(e, NULL, 10);
    int64_t safe = rs__el_i64(rep, 1);

    sl->hello = 0;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 || epoch == 0) {
        if (!r->sh->layout_said)
            log_error("redis: slot %u of the cluster answers its hello with %s: empty the "
                      "cluster (FLUSHALL on each primary) or run the semad that wrote it",
                      c->slot, rep->elements >= 5 ? "another layout of semad's keys" : "no epoch");
        r->sh->layout_said = 1;
        return; /* its commands wait, and fail when they have waited too long */
    }
    if (sl->old != 0 && sl->old != epoch) {
        r->epoch_changes++;
        log_warn("redis: slot %u lost its data (epoch %llu, now %llu): no grants there until "
                 "every lease it held has run out",
                 c->slot, (unsigned long long)sl->old, (unsigned long long)epoch);
        rs__waiters_gone_in(r, c->slot);
    }
    if (sl->changed && !sl->handed)
        say_changed(r, sl, by, safe, rs__el_i64(rep, 2));
    sl->changed = sl->handed = 0;
    if (by != 0)
        sl->node = by;
    sl->epoch = epoch;
    sl->old = 0;
    if (safe > r->safe_at_ms)
        r->safe_at_ms = safe; /* (one pause for every slot: only short paths wait for it) */
    r->clock_off = rs__el_i64(rep, 2) - (int64_t)rs__now(r);
}

/* ---- loading the library on a primary that lacks it ---- */

typedef struct {
    rs_ccmd_t cc;
    rs_t *r;
    int lib;
    char route[16];
    const char *v[4];
    size_t l[4];
} rs_load_t;

static void load_cb(rs_cluster_t *cl, rs_ccmd_t *cc, int how, redisReply *rep)
{
    rs_load_t *ld = cc->data;
    rs_t *r = ld->r;

    (void)cl;
    r->sh->libs[ld->lib].loading = 0;
    if (how != RS_CL_REPLY || rep->type != REDIS_REPLY_STRING)
        log_warn("redis: FUNCTION LOAD failed on %s:%d (semad needs Redis 7 or later): %s",
                 r->sh->libs[ld->lib].addr.host, r->sh->libs[ld->lib].addr.port,
                 how == RS_CL_REPLY && rep->type == REDIS_REPLY_ERROR ? rep->str : "no answer");
    sema__free(ld);
    rs__sh_flush(r); /* (those that still find no library load it again) */
    rs__drain(r);
}

/* Load the library on the primary of slot, once at a time per primary. */
void rs__sh_load_library(rs_t *r, unsigned slot)
{
    rs_shards_t *sh = r->sh;
    const rs_slot_addr_t *a = rs__cluster_owner(sh->cl, slot);
    rs_load_t *ld;
    int i;

    if (a == NULL)
        return;
    for (i = 0; i < sh->nlibs; i++)
        if (sh->libs[i].addr.port == a->port && strcmp(sh->libs[i].addr.host, a->host) == 0)
            break;
    if (i == sh->nlibs) {
        if (sh->nlibs == RS_SLOT_NODES_MAX)
            return;
        sh->libs[sh->nlibs++].addr = *a;
    }
    if (sh->libs[i].loading || (ld = sema__calloc(1, sizeof(*ld))) == NULL)
        return;
    sh->libs[i].loading = 1;
    ld->r = r;
    ld->lib = i;
    snprintf(ld->route, sizeof ld->route, "{%08x}", (unsigned)sh->tags.tag[slot]);
    ld->v[0] = "FUNCTION", ld->v[1] = "LOAD", ld->v[2] = "REPLACE", ld->v[3] = rs__lua;
    for (int k = 0; k < 4; k++)
        ld->l[k] = strlen(ld->v[k]);
    ld->cc = (rs_ccmd_t){.argc = 4,
                         .argv = ld->v,
                         .lens = ld->l,
                         .key = ld->route,
                         .key_len = strlen(ld->route),
                         .cb = load_cb,
                         .data = ld};
    if (rs__cluster_send(sh->cl, &ld->cc) != 0) {
        sh->libs[i].loading = 0;
        sema__free(ld);
    }
}

/* ---- answers ---- */

static int is_err(const redisReply *rep, const char *prefix)
{
    return rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, prefix, strlen(prefix)) == 0;
}

static void on_answer(rs_t *r, rs_cmd_t *c, redisReply *rep, uint16_t by)
{
    rs_slot_t *sl = &r->sh->slot[c->slot];
    int64_t st = rep->type == REDIS_REPLY_ARRAY ? rs__el_i64(rep, RS_R_STATUS) : 0;

    r->replies++;
    if (is_err(rep, "ERR Function not found") || is_err(rep, "NOSCRIPT")) {
        wait_for(r, c);
        rs__sh_load_library(r, c->slot);
        return;
    }
    if (is_err(rep, "READONLY") || is_err(rep, "LOADING") || is_err(rep, "MASTERDOWN")) {
        wait_for(r, c); /* it did not run: sent again at the next tick */
        return;
    }
    if (c->kind == RS_CMD_HELLO) {
        hello_done(r, c, rep, by);
        rs__cmd_free(c);
        rs__sh_flush(r);
        return;
    }
    if (c->script && st == RS_ST_EPOCH) {
        /* the slot's data is not what this instance said hello to: it did not run */
        if (sl->epoch != 0)
            sl->old = sl->epoch;
        sl->epoch = 0;
        wait_for(r, c);
        send_hello(r, c->slot);
        return;
    }
    if (c->kind == RS_CMD_OP && st == RS_ST_GONE && c->rq != NULL && c->rq->req != NULL) {
        /* it would have parked, and this instance is not alive in the slot (it has said hello
         * there, then had no waiters there a while): it did not park; hello, and again */
        c->sent_mono = 0;
        sl->epoch = 0;
        wait_for(r, c);
        send_hello(r, c->slot);
        return;
    }
    rs__cmd_reply(r, c, rep);
}

static void out_cb(rs_cluster_t *cl, rs_ccmd_t *cc, int how, redisReply *rep)
{
    rs_out_t *o = cc->data;
    rs_t *r = o->r;
    rs_cmd_t *c = o->c;
    uint16_t by = how == RS_CL_REPLY && c->kind == RS_CMD_HELLO ? node_of(r->sh, &cc->by) : 0;
    int strict = how == RS_CL_REPLY && r->strict && r->replicas > 0;
    uint16_t ans = strict ? (by != 0 ? by : node_of(r->sh, &cc->by)) : 0;
    int conn = cc->by_conn;

    (void)cl;
    sema__free(o);
    elist_remove(&c->link);
    if (how == RS_CL_REPLY) {
        r->contact_mono = rs__now(r); /* (/healthz: a primary answered) */
        r->ans_node = ans; /* (strict: what it completes waits for that primary's WAIT) */
        r->ans_slot = (uint16_t)c->slot;
        r->ans_conn = conn;
        on_answer(r, c, rep, by);
        r->ans_node = 0;
    } else if (how == RS_CL_MOVED && !r->closing) {
        primary_changed(r, c); /* it did not run */
    } else if (c->kind == RS_CMD_HELLO) {
        r->sh->slot[c->slot].hello = 0; /* its commands wait, and ask again at the next tick */
        rs__cmd_free(c);
    } else if (how == RS_CL_UNKNOWN && !r->closing) {
        rs__cmd_lost(r, c); /* sent again with its request id (rs__sh_flush) */
    } else {
        rs__cmd_fail(r, c,
                     how == RS_CL_UNKNOWN ? BE_MSG_REDIS_LOST_ANSWER : BE_MSG_REDIS_UNREACHABLE);
    }
    rs__drain(r);
}

/* ---- what each answer tells of its slot ---- */

void rs__sh_told(rs_t *r, const rs_cmd_t *c, const redisReply *n, int64_t redis_now)
{
    rs_shards_t *sh = r->sh;
    rs_slot_t *sl = &sh->slot[c->slot];
    int64_t due = rs__el_i64(n, RS_C_DUE_HEAD);
    uint32_t v[3] = {(uint32_t)rs__el_i64(n, RS_C_SEMS), (uint32_t)rs__el_i64(n, RS_C_LEASES),
                     (uint32_t)rs__el_i64(n, RS_C_LOCKS)};

    r->nsems += (uint64_t)v[0] - sl->nsems;
    r->nleases += (uint64_t)v[1] - sl->nleases;
    r->nlocks += (uint64_t)v[2] - sl->nlocks;
    sl->nsems = v[0], sl->nleases = v[1], sl->nlocks = v[2];
    if (sl->recheck) {
        sl->recheck = 0;
        rs__check_in(r, c->slot);
    }
    if (c->kind == RS_CMD_SWEEP)
        sl->sweeping = 0;
    sl->sweep_at =
        due <= 0 ? UINT64_MAX : rs__now(r) + (uint64_t)(due > redis_now ? due - redis_now : 0) + 1;
    if (sl->sweep_at < sh->sweep_at) {
        sh->sweep_at = sl->sweep_at;
        r->sweep_at = sh->sweep_at;
        rs__due_rearm(r);
    }
}

/* The slots whose due time came are swept; the next due time is the earliest of the rest. */
void rs__sh_sweep(rs_t *r, uint64_t now)
{
    rs_shards_t *sh = r->sh;
    uint64_t next = UINT64_MAX;
    char key[32];

    r->sweep_at = sh->sweep_at; /* (never a time gone by: the due timer would spin) */
    if (sh->sweep_at > now)
        return;
    for (unsigned s = 0; s < RS_SLOTS; s++) {
        rs_slot_t *sl = &sh->slot[s];
        if (sl->sweep_at > now || sl->sweeping) {
            if (sl->sweep_at < next && !sl->sweeping)
                next = sl->sweep_at;
            continue;
        }
        rs_args_t a = {0};
        rs_cmd_t *c;
        sl->sweep_at = UINT64_MAX;
        rs__home_key(r, s, "due", key, sizeof key);
        rs__args_head(r, &a, key, strlen(key), rs__op_name(RS_OP_SWEEP), "", NULL);
        if ((c = rs__cmd_build(r, RS_CMD_SWEEP, &a)) != NULL) {
            sl->sweeping = 1;
            rs__sh_send(r, c);
        }
    }
    sh->sweep_at = next;
    r->sweep_at = next;
}

void rs__sh_sweep_lost(rs_t *r, const rs_cmd_t *c)
{
    r->sh->slot[c->slot].recheck = 1;
}

void rs__sh_sweep_failed(rs_t *r, const rs_cmd_t *c)
{
    rs_shards_t *sh = r->sh;
    rs_slot_t *sl = &sh->slot[c->slot];

    sl->sweeping = 0;
    sl->sweep_at = rs__now(r) + 100;
    if (sl->sweep_at < sh->sweep_at)
        sh->sweep_at = sl->sweep_at;
    r->sweep_at = sh->sweep_at;
    rs__due_rearm(r);
}

/* ---- beats and waiters, per slot ---- */

static void beat_slot(rs_t *r, unsigned s)
{
    rs_slot_t *sl = &r->sh->slot[s];
    char key[32], rid[64];
    rs_args_t a = {0};
    rs_cmd_t *c;

    if (sl->beating)
        return;
    rs__next_id(r, rid, sizeof rid); /* (it hands outcomes over: a retry reads its answer) */
    rs__home_key(r, s, "inst", key, sizeof key);
    rs__args_head(r, &a, key, strlen(key), rs__op_name(RS_OP_BEAT), rid, NULL);
    if ((c = rs__cmd_build(r, RS_CMD_COLLECT, &a)) == NULL)
        return;
    sl->beating = 1;
    r->collects++;
    rs__sh_send(r, c);
}

void rs__sh_beat(rs_t *r, int slot)
{
    int any = 0;

    if (slot >= 0) {
        if (r->sh->slot[slot].nparked > 0)
            beat_slot(r, (unsigned)slot);
        return;
    }
    for (unsigned s = 0; s < RS_SLOTS; s++)
        if (r->sh->slot[s].nparked > 0) {
            beat_slot(r, s);
            any = 1;
        }
    /* Without waiters, one beat all the same, on the primaries in turn (slot 0, then one a
     * third of the way on, ...): /healthz says whether the cluster answers. */
    if (!any) {
        r->sh->probe = (r->sh->probe + RS_SLOTS / 3 + 1) % RS_SLOTS;
        beat_slot(r, r->sh->probe);
    }
}

void rs__sh_beat_done(rs_t *r, const rs_cmd_t *c)
{
    r->sh->slot[c->slot].beating = 0;
}

void rs__sh_gone(rs_t *r, unsigned slot)
{
    if (r->sh->slot[slot].nparked == 0) { /* (a probe's slot, unused a while: nothing lost) */
        r->sh->slot[slot].epoch = 0;
        return;
    }
    log_warn("redis: this instance was taken for dead in slot %u: its requests parked there are "
             "answered 503 and it says hello there again",
             slot);
    rs__waiters_gone_in(r, slot);
    r->sh->slot[slot].epoch = 0; /* the next command of the slot says hello first */
}

static void wake_chan(const rs_t *r, unsigned slot, char *buf, size_t cap, size_t *len)
{
    char what[40];

    snprintf(what, sizeof what, "wake:%s", r->inst);
    *len = rs__home_key(r, slot, what, buf, cap);
}

void rs__sh_parked(rs_t *r, const char *stem, size_t len, int d)
{
    unsigned s = rs__slot_of(stem, len);
    rs_slot_t *sl = &r->sh->slot[s];
    char chan[64];
    size_t clen;

    sl->nparked = (uint32_t)((int64_t)sl->nparked + d);
    if ((sl->nparked > 0) == (sl->subscribed != 0) || r->sh->cl == NULL)
        return;
    wake_chan(r, s, chan, sizeof chan, &clen);
    if (sl->nparked > 0) {
        if (rs__cluster_subscribe(r->sh->cl, chan, clen) == 0)
            sl->subscribed = 1;
    } else {
        rs__cluster_unsubscribe(r->sh->cl, chan, clen);
        sl->subscribed = 0;
    }
}

void rs__sh_watch(rs_t *r, rs_req_t *rq, int d)
{
    int slot = d > 0 ? rs__slot_id_get(rq->req->id, rq->req->id_len) : (int)rq->tslot - 1;
    rs_slot_t *sl;
    char chan[32];
    size_t clen;

    if (slot < 0 || r->sh->cl == NULL)
        return;
    rq->tslot = d > 0 ? (uint16_t)(slot + 1) : 0;
    sl = &r->sh->slot[slot];
    sl->nwatch = (uint32_t)((int64_t)sl->nwatch + d);
    if ((sl->nwatch > 0) == (sl->tk_subscribed != 0))
        return;
    clen = rs__home_key(r, (unsigned)slot, "tkt", chan, sizeof chan);
    if (sl->nwatch > 0) {
        sl->tk_subscribed = rs__cluster_subscribe(r->sh->cl, chan, clen) == 0;
    } else {
        rs__cluster_unsubscribe(r->sh->cl, chan, clen);
        sl->tk_subscribed = 0;
    }
}

int rs__sh_subscribe(rs_t *r, const char *chan, size_t len, int on)
{
    if (r->sh->cl == NULL)
        return -1;
    if (!on) {
        rs__cluster_unsubscribe(r->sh->cl, chan, len);
        return 0;
    }
    return rs__cluster_subscribe(r->sh->cl, chan, len) == 0 ? 0 : -1;
}

/* "sema:{tag}wake:<inst>": a waiter here was granted in that slot; "sema:ev:<stem>": events
 * another instance made; "sema:{tag}tkt": a ticket of the slot changed (its id). */
static int is_wake(const char *chan, size_t clen)
{
    return clen > 21 && memcmp(chan, "sema:{", 6) == 0 && memcmp(chan + 15, "wake:", 5) == 0;
}

static void on_message(void *data, const char *chan, size_t clen, const char *msg, size_t mlen)
{
    rs_t *r = data;

    if (is_wake(chan, clen)) {
        r->wakes++;
        rs__sh_beat(r, (int)rs__slot_of(chan, clen));
    } else if (clen > 8 && memcmp(chan, "sema:ev:", 8) == 0) {
        rs__ev_message(r, chan + 8, clen - 8, msg, mlen);
    } else if (clen == 18 && memcmp(chan + 15, "tkt", 3) == 0) {
        rs__ticket_message(r, msg, mlen);
    }
    rs__drain(r);
}

static void on_subscribed(void *data, const char *chan, size_t clen)
{
    rs_t *r = data;

    /* what a message lost meanwhile would have said is collected, or read from the log */
    if (is_wake(chan, clen))
        rs__sh_beat(r, (int)rs__slot_of(chan, clen));
    else if (clen > 8 && memcmp(chan, "sema:ev:", 8) == 0)
        rs__ev_catch_up(r, chan + 8, clen - 8);
    rs__drain(r);
}

int rs__sh_slot_used(const rs_t *r, unsigned slot)
{
    return r->sh != NULL && slot < RS_SLOTS && r->sh->slot[slot].epoch != 0;
}

rs_sh_strict_t *rs__sh_strict_of(rs_t *r, uint16_t node)
{
    return r->sh != NULL && node >= 1 && node <= r->sh->nnodes ? &r->sh->strict[node - 1] : NULL;
}

const rs_slot_addr_t *rs__sh_node(const rs_t *r, uint16_t node)
{
    return r->sh != NULL && node >= 1 && node <= r->sh->nnodes ? &r->sh->nodes[node - 1] : NULL;
}

rs_cluster_t *rs__sh_cluster(const rs_t *r)
{
    return r->sh != NULL ? r->sh->cl : NULL;
}

uint32_t rs__sh_slot_tag(const rs_t *r, unsigned slot)
{
    return r->sh->tags.tag[slot];
}
