/* SPDX-License-Identifier: MIT */
/* redis_cluster.h - commands and sharded pub/sub on a Redis Cluster, on the libuv loop: one
 * connection per primary for commands and one for sharded subscriptions, each command sent
 * to the primary that serves its key's slot (redis_slots.h), MOVED followed (the map is
 * updated and asked again), ASK honoured (ASKING, then the command, at the target, once),
 * TRYAGAIN and CLUSTERDOWN waited out until the command's deadline.
 *
 * What it never does is send a command again whose outcome is unknown: a command in flight
 * when its connection went or its deadline passed ends RS_CL_UNKNOWN, and only its sender,
 * who knows whether it carries a request id that Redis answers from its record, may send it
 * again. A redirect, by contrast, says the command did not run, so it is followed here.
 *
 * Single-threaded: every function runs on the loop's thread. */
#ifndef SEMAD_REDIS_CLUSTER_H
#define SEMAD_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>
#include <uv.h>

#include "backends/redis/redis_slots.h"
#include "common/table.h"

#define RS_CL_REDIRECTS_MAX 8     /* MOVED/ASK followed for one command before it fails */
#define RS_CL_CHANNELS_MAX 100000 /* sharded channels subscribed at once */
#define RS_CL_QUEUED_MAX 100000   /* commands waiting for a map or a connection */

typedef struct rs_cluster rs_cluster_t;
typedef struct rs_ccmd rs_ccmd_t;

/* How a command ended. */
enum {
    RS_CL_REPLY = 1, /* Redis answered (an error other than a redirect is an answer too) */
    RS_CL_UNSENT,    /* it never reached Redis (no primary reachable for its slot by its
                        deadline, or the cluster was closed): sending it again is safe */
    RS_CL_UNKNOWN,   /* it was sent, then its connection went or its deadline passed: it may
                        or may not have run */
    RS_CL_MOVED      /* pinned, and its slot is served by another node now: it did not run */
};

/* Runs once per rs__cluster_send(): `reply` (RS_CL_REPLY only) is hiredis's, freed after the
 * call. The command is the caller's again (it may send it again from here). */
typedef void (*rs_ccmd_cb)(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *reply);

/* One command. The caller owns it and its arguments until its callback runs; fill argc, argv,
 * lens, key/key_len (what the slot is computed from: a key of the command), cb and data;
 * no_ask for a command that must see every key of its slot at once (a script that touches
 * keys it does not name): an ASK is then waited out, the command sent again to the slot's
 * owner until its migration has ended (MOVED), never run on a slot half moved; pinned (with
 * pin) for a command that must run on that node only: it ends RS_CL_MOVED, unrun, when a MOVED
 * or a new map names another primary for its slot. */
struct rs_ccmd {
    int argc;
    const char **argv;
    const size_t *lens;
    const char *key;
    size_t key_len;
    rs_ccmd_cb cb;
    void *data;
    uint8_t no_ask;
    uint8_t pinned;     /* run only on `pin`: RS_CL_MOVED when the slot's primary is another */
    rs_slot_addr_t pin; /* (a slot whose new primary may lack writes the old one acknowledged) */
    rs_slot_addr_t by;  /* RS_CL_REPLY: the node that answered */
    int by_conn;        /* ...and its connection (rs__cluster_conn: a WAIT speaks for it alone) */
    /* the cluster's own */
    elist_t link;      /* a connection's queue or in-flight list, or the map's wait list */
    uint64_t deadline; /* loop ms: RS_CL_UNSENT/UNKNOWN after this */
    uint64_t retry_at; /* TRYAGAIN or CLUSTERDOWN: not before this (loop ms) */
    unsigned slot;
    uint8_t redirects; /* MOVED and ASK followed */
    uint8_t asking;    /* sent after ASKING: the reply to ASKING comes first */
    uint8_t ask;       /* the next send goes to ask_to, after ASKING */
    uint8_t written;   /* its bytes were handed to the socket (else: still in a buffer) */
    rs_slot_addr_t ask_to;
};

/* What the owner hears of. */
typedef struct {
    void *data;
    /* a message on a sharded channel */
    void (*message)(void *data, const char *chan, size_t clen, const char *msg, size_t mlen);
    /* a channel's subscription took effect (again): messages published before may have been
     * missed, while it was not subscribed */
    void (*subscribed)(void *data, const char *chan, size_t clen);
} rs_cluster_events_t;

/* Counters, for /metrics and the tests. */
typedef struct {
    uint64_t sent, writes, moved, asks, tryagain, refreshes, connects, drops, unknown, timeouts;
} rs_cluster_stats_t;

/* Start on the loop with these seeds (copied; rs__slot_addrs parses an address's list), the AUTH
 * credentials (user may be "", pass "" for none) and the command timeout. Returns 0 and *out, or
 * SEMA_ENOMEM/SEMA_EINVAL. The slot map is asked for at once; commands sent before it arrives wait
 * for it. */
int rs__cluster_open(uv_loop_t *loop, const rs_slot_addr_t *seeds, int nseeds, const char *user,
                     const char *pass, uint64_t timeout_ms, const rs_cluster_events_t *ev,
                     rs_cluster_t **out);

/* Send a command to the primary that serves its key's slot. Its callback runs exactly once,
 * later (never from inside this call). Returns 0, or SEMA_ENOMEM/SEMA_EBUSY (too many
 * commands waiting) when it cannot take it: the callback then never runs. */
int rs__cluster_send(rs_cluster_t *cl, rs_ccmd_t *c);

/* Subscribe to a sharded channel (SSUBSCRIBE on its slot's primary), or leave it. Kept across
 * reconnects, failovers and slot moves: the `subscribed` event says when it took effect.
 * Returns 0, SEMA_ENOMEM or SEMA_EBUSY (RS_CL_CHANNELS_MAX reached). */
int rs__cluster_subscribe(rs_cluster_t *cl, const char *chan, size_t len);
void rs__cluster_unsubscribe(rs_cluster_t *cl, const char *chan, size_t len);

/* Ask for the whole slot map again (at once, or at the next tick): a node said a slot is
 * not (or not wholly) its own in a way no redirect told the map (a script's error). */
void rs__cluster_refresh(rs_cluster_t *cl);

/* Whether the slot map is known and covers every slot. */
int rs__cluster_ready(const rs_cluster_t *cl);
/* The node that serves slot now, or NULL. */
const rs_slot_addr_t *rs__cluster_owner(const rs_cluster_t *cl, unsigned slot);
const rs_cluster_stats_t *rs__cluster_stats(const rs_cluster_t *cl);
/* Which connection to the node at a is up now (as rs_ccmd_t.by_conn says), or 0: none. */
int rs__cluster_conn(rs_cluster_t *cl, const rs_slot_addr_t *a);

/* The address (text) to reach the node at a by: its host when that is an address, else what
 * the resolution of its name for this cluster's connection to it gave (off the loop); NULL
 * when none has yet. Borrowed: valid until the next call into the cluster. */
const char *rs__cluster_address(rs_cluster_t *cl, const rs_slot_addr_t *a);

/* Close every connection: commands not yet answered end RS_CL_UNSENT or RS_CL_UNKNOWN (from
 * inside this call), and the cluster is freed once libuv has closed its handles. */
void rs__cluster_close(rs_cluster_t *cl);

#endif /* SEMAD_REDIS_CLUSTER_H */
