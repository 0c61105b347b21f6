/* SPDX-License-Identifier: MIT */
/* redis_cluster_internal.h - what redis_cluster.c (routing, the slot map, the tick),
 * redis_cluster_link.c (connections) and redis_cluster_sub.c (sharded subscriptions) share. */
#ifndef SEMAD_REDIS_CLUSTER_INTERNAL_H
#define SEMAD_REDIS_CLUSTER_INTERNAL_H

#include <string.h>

#include "backends/redis/redis_cluster.h"
#include "backends/redis/redis_resolve.h"

#define RS_CL_TICK_MS 25  /* deadlines, retries and reconnects are looked at this often */
#define RS_CL_RETRY_MS 50 /* TRYAGAIN, CLUSTERDOWN: sent again this much later */
#define RS_CL_BACKOFF_MAX_MS 2000
#define RS_CL_LINKS_MAX (2 * RS_SLOT_NODES_MAX)
#define RS_CL_OUT_MAX 65536 /* commands formatted for one connection and not yet written */

/* a connection's state */
enum { RS_CL_DOWN, RS_CL_RESOLVING, RS_CL_CONNECTING, RS_CL_READY, RS_CL_CLOSING };

/* A connection to one node: for commands, or (sub) for its sharded subscriptions. */
typedef struct rs_link {
    elist_t all; /* cl->links */
    rs_cluster_t *cl;
    rs_slot_addr_t addr;
    int sub;   /* the sharded subscriber connection of this node */
    int state; /* RS_CL_* */
    int gen;   /* connection attempts: a late callback of an earlier one is ignored */
    uv_tcp_t tcp;
    uv_connect_t creq;
    rs_resolve_t rv; /* its host's resolution (rv.addr: the last one's address; "" before) */
    redisReader *rd;
    elist_t queued;   /* rs_ccmd_t waiting for the connection */
    elist_t inflight; /* rs_ccmd_t written, in order */
    elist_t chans;    /* rs_chan_t subscribed (or being subscribed) here */
    uint64_t backoff_ms, retry_at;
    uv_buf_t *out; /* formatted commands for the next write, in order */
    unsigned nout, out_cap;
    elist_t dirty; /* cl->dirty while out has something */
    rs_ccmd_t auth;
    const char *auth_argv[3];
    size_t auth_lens[3];
    char rbuf[16384];
} rs_link_t;

/* A sharded channel the owner subscribed to. */
typedef struct {
    enode_t node; /* cl->chans, by name */
    elist_t on;   /* its link's chans, or cl->chan_wait */
    rs_link_t *link;
    unsigned slot;
    uint8_t confirmed; /* its SSUBSCRIBE was confirmed on link */
    uint8_t asked;     /* its SSUBSCRIBE was written on link's current connection */
    size_t len;
    char name[];
} rs_chan_t;

struct rs_cluster {
    uv_loop_t *loop;
    rs_cluster_events_t ev;
    rs_slot_addr_t seeds[RS_SLOT_SEEDS_MAX];
    int nseeds;
    char user[128], pass[256];
    uint64_t timeout_ms;
    rs_slotmap_t *map;
    int have_map;
    elist_t links;
    int nlinks;
    elist_t waiting; /* commands waiting for the map */
    elist_t retry;   /* commands waiting for their retry_at */
    size_t nqueued;  /* commands waiting anywhere but in flight */
    etab_t chans;
    size_t nchans;
    elist_t chan_wait; /* channels whose slot has no known primary yet */
    /* the slot map's refresh */
    rs_ccmd_t refresh;
    const char *refresh_argv[2];
    size_t refresh_lens[2];
    rs_link_t *refresh_link;
    int refreshing, refresh_again, refresh_at, refresh_slots;
    uint64_t refresh_not_before;
    elist_t dirty;     /* connections with commands to write */
    uv_prepare_t prep; /* writes what the loop turn's timers asked for, before it polls */
    uv_check_t check;  /* writes what its I/O callbacks asked for */
    uv_timer_t tick;
    int handles, closing;
    rs_cluster_stats_t st;
};

static inline uint64_t rs__cluster_now(const rs_cluster_t *cl)
{
    return uv_now(cl->loop);
}

static inline int rs__cluster_same_addr(const rs_slot_addr_t *a, const rs_slot_addr_t *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* redis_cluster.c */
/* End a command: its callback runs (an unknown outcome is counted). */
void rs__cluster_end(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *rep);
/* End every command of a list (counted: they were counted in cl->nqueued). */
void rs__cluster_end_all(rs_cluster_t *cl, elist_t *from, int how, int counted);
/* Put a command on a waiting list (counted in cl->nqueued). */
void rs__cluster_enqueue(rs_cluster_t *cl, elist_t *list, rs_ccmd_t *c);
/* A reply on a connection: to the command at the head of its flight, or a pub/sub frame. */
void rs__cluster_reply(rs_link_t *l, redisReply *rep);

/* redis_cluster_link.c: connections */
/* The connection to a, for commands or (sub) sharded subscriptions; made (down) when create. */
rs_link_t *rs__cluster_link_find(rs_cluster_t *cl, const rs_slot_addr_t *a, int sub, int create);
/* Format c for a ready connection (after ASKING when c->ask); it goes in flight, and its
 * bytes out with the loop turn's write. 0, SEMA_ENOMEM, or SEMA_EBUSY (RS_CL_OUT_MAX). */
int rs__cluster_link_write(rs_link_t *l, rs_ccmd_t *c);
/* Write what waited for the connection. */
void rs__cluster_link_flush(rs_link_t *l);
/* Write every connection's formatted commands: one write (writev) per connection and loop
 * turn, so Redis reads a turn's commands in one go, as hiredis's own contexts send them. */
void rs__cluster_link_write_all(rs_cluster_t *cl);
void rs__cluster_link_connect(rs_link_t *l);
/* The connection is gone: see redis_cluster_link.c. */
void rs__cluster_link_drop(rs_link_t *l, const char *why);

/* redis_cluster_sub.c: sharded subscriptions */
void rs__cluster_sub_send(rs_link_t *l, const char *verb, rs_chan_t *ch);
/* Put a channel on the subscriber connection of its slot's primary. */
void rs__cluster_sub_route(rs_cluster_t *cl, rs_chan_t *ch);
/* A frame on a subscriber connection. */
void rs__cluster_sub_frame(rs_link_t *l, redisReply *rep);
/* Subscribe what a ready subscriber connection has not asked for yet. */
void rs__cluster_sub_tick(rs_link_t *l);
void rs__cluster_sub_free_all(rs_cluster_t *cl);

#endif /* SEMAD_REDIS_CLUSTER_INTERNAL_H */
