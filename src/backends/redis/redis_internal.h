/* SPDX-License-Identifier: MIT */
/* redis_internal.h - the Redis back end's private structures, shared by redis*.c. The state
 * lives in Redis (sema.lua); this instance keeps only its own requests: those in flight, its
 * parked waiters, and the semaphores it has waiters on or watches. */
#ifndef SEMAD_REDIS_INTERNAL_H
#define SEMAD_REDIS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "common/alloc.h"
#include "common/table.h"
#include "backends/redis/redis_cluster.h"
#include "backends/redis/redis_proto.h"
#include "backends/redis/redis_resolve.h"
#include "engine/backend.h"

#define RS_HEARTBEAT_MS 2000    /* a parked waiter's instance renews it this often */
#define RS_CMD_TIMEOUT_MS 2000  /* a command unanswered this long: the connection is dropped */
#define RS_BACKOFF_MAX_MS 2000  /* reconnect backoff ceiling */
#define RS_PENDING_MAX 100000   /* commands queued while Redis is unreachable */
#define RS_COLLECT_WIDS 4096    /* waiter ids in one heartbeat command */
#define RS_WAIT_TIMEOUT_MS 1000 /* strict: WAIT's own timeout */

enum { RS_CONN_DOWN, RS_CONN_CONNECTING, RS_CONN_READY };

/* A semaphore (or lock key) this instance has parked requests on or streams events of. */
typedef struct rs_sem {
    enode_t node;   /* in r->sems, keyed by stem */
    elist_t parked; /* rs_req_t.plink */
    uint32_t nparked;
    uint8_t collecting, watched, subscribed; /* collecting: a check of its waiters is out */
    uint8_t pt_ok, pt_gone;                  /* pt_*: the log's point as the last follow read it */
    uint8_t filling;                         /* a read of the stream (a fill) is out */
    uint32_t reads;                          /* RS_CMD_READ commands about it not answered yet */
    uint64_t fill_uid, fill_to;              /* the run and last event to read from the stream */
    uint64_t fill_asked;                     /* ...and what the read out asks up to */
    uint64_t pt_uid, pt_seq;                 /* (redis_events.c) */
    uint64_t ev_uid, ev_seq;                 /* the last event handed to the front (0: none yet) */
    uint64_t own_uid, own_seq; /* the last event this instance's own messages announced */
    size_t stem_len;
    char stem[];
} rs_sem_t;

/* A request's states, and the only moves between them (each asserted where it is made):
 *   NEW -> SENT (its command goes) or READY (it failed before it was sent)
 *   SENT -> PARKED (it waits in the queue), WATCH (a ticket's long-poll waits for a change),
 *           READY (answered)
 *   PARKED -> CANCELLING (its timeout came: its cancel is in flight, and Redis decides whether
 *             it timed out or was granted first), or NEW again when it leaves the queue
 *   CANCELLING -> NEW again when the answer comes (then READY)
 *   WATCH -> SENT (read again) or READY (its deadline, or shutdown)
 *   READY -> freed once delivered (rs__drain), or cancelled
 * A WATCH request is in r->twatch by plink, and stays there while a read of it is SENT. */
enum { RS_REQ_NEW, RS_REQ_SENT, RS_REQ_PARKED, RS_REQ_READY, RS_REQ_CANCELLING, RS_REQ_WATCH };

/* The back end's side of one request. */
typedef struct rs_req {
    elist_t link;      /* r->ready or r->held once complete */
    elist_t plink;     /* sem->parked while parked; r->twatch while watching */
    enode_t node;      /* r->waiters by wid while parked */
    eitem_t hi;        /* its timeout while parked (in r->theap); a watcher's next read */
    engine_req_t *req; /* NULL once cancelled */
    rs_sem_t *sem;
    struct rs_cmd *cancel; /* RS_REQ_CANCELLING: its cancel command (whose rq points back) */
    uint64_t since_mono;
    uint8_t state, writes;
    uint8_t again;  /* a watcher whose ticket changed while a read of it was in flight */
    uint16_t tslot; /* Redis Cluster: a watcher's ticket's slot + 1 (its channel's), or 0 */
    uint16_t wnode; /* Redis Cluster, held: 1 + the primary whose WAIT it waits for (0: none) */
    uint16_t wslot; /* ...a slot that primary answered for, to route the WAIT by */
    int wconn;      /* ...and the connection that answered (rs_ccmd_t.by_conn) */
    char wid[40];
    char lid[ENGINE_LEASE_ID_MAX];
} rs_req_t;

/* RS_CMD_MARK: the heartbeat's HSETNX of an event log's run (redis_events.c): 1 means the
 * marker had gone. */
enum {
    RS_CMD_OP = 1,
    RS_CMD_CANCEL,
    RS_CMD_COLLECT,
    RS_CMD_DROP,
    RS_CMD_SWEEP,
    RS_CMD_WAIT,
    RS_CMD_PLAIN,
    RS_CMD_MARK,
    RS_CMD_HELLO, /* Redis Cluster: a slot's hello (redis_shards.c) */
    RS_CMD_READ,  /* a read whose answer goes to its `done` (redis_events.c) */
    RS_CMD_BATCH  /* several packed acquires and releases in one FCALL (redis_cmd.c) */
};

/* One command: its arguments are kept, so a retry after a lost connection sends the same
 * request id (which Redis answers from its cache if the first attempt ran). An FCALL is
 * formatted when sent, with the epoch known then. */
struct rs;
typedef struct rs_cmd {
    elist_t link; /* r->inflight, r->retry, r->pending, r->batch or a batch's members */
    int argc;
    int script;   /* FCALL: argv[5] is the epoch */
    size_t *lens; /* argc lengths, then the bytes of every argument (one allocation) */
    uint64_t queued_mono, sent_mono;
    uint64_t gen;    /* r->epoch_changes when last sent */
    uint8_t unknown; /* an answer of it was lost: it may have run */
    uint8_t kind, writes;
    uint8_t timed;   /* RS_CMD_CANCEL of a timeout (its outcome is the request's answer) */
    uint8_t pk;      /* RS_PK_ACQUIRE or RS_PK_RELEASE: sent packed when plain (0: never) */
    elist_t members; /* RS_CMD_BATCH: its commands, in the order they run */
    rs_req_t *rq;    /* RS_CMD_OP */
    rs_sem_t *sem;   /* RS_CMD_COLLECT, RS_CMD_READ */
    /* RS_CMD_READ: its answer (NULL: none, it failed), once; c is freed after it */
    void (*done)(struct rs *r, struct rs_cmd *c, const redisReply *rep);
    unsigned slot;  /* Redis Cluster: its key's slot, as last sent */
    uint16_t wnode; /* Redis Cluster, unconfirmed: as rs_req_t's */
    int wconn;
} rs_cmd_t;

typedef struct rs_conn {
    redisAsyncContext *ac;
    int state;
    int is_sub;
    struct rs *r;
    uint64_t since; /* loop ms: its start (the connect, its setup, a resync) began and has not
                       been answered yet (0: none); rs__conn_tick drops it past the timeout */
} rs_conn_t;

typedef struct rs_shards rs_shards_t;

typedef struct rs {
    uv_loop_t *loop;
    engine_t *front;
    engine_counters_t *m;
    engine_config_t cfg;
    /* where Redis is */
    char host[256];
    int port, db;
    char user[128], pass[256];
    char master[128];       /* Sentinel: the primary's name ("" without Sentinel) */
    char sentinels[8][272]; /* host:port */
    int nsentinels, sentinel_at;
    int replicas;            /* strict: WAIT for this many replicas */
    int cluster;             /* redis+cluster://: host holds the seed nodes' list */
    rs_shards_t *sh;         /* Redis Cluster's state per slot (redis_shards.c); NULL else */
    uint64_t cmd_timeout_ms; /* a command unanswered this long: the connection is dropped */
    int strict;
    /* identity */
    char inst[24];      /* this instance's id */
    char epoch[40];     /* the epoch of Redis's data this instance works on ("" before hello) */
    int64_t safe_at_ms; /* no grant before this (Redis ms): the pause after lost data */
    int64_t horizon_ms; /* the latest lease expiry Redis told of (Redis ms) */
    int64_t clock_off;  /* Redis's clock less the loop's, as the last answer with a time said */
    /* the primary's history (INFO replication): its replication id when this instance last
     * said hello, and the new connection's, with the id it continues (a promoted replica's) and
     * whether it syncs its append-only file on every write (appendfsync always) */
    char replid[48], replid_new[48], replid2_new[48];
    int aof_always;
    /* strict with replicas: whether WAIT can have confirmed acknowledged writes on fewer
     * replicas than the primary has. The most replicas the current primary had (INFO
     * replication's connected_slaves, read after each WAIT, and the replicas Sentinel listed
     * for it); short_of_all: a WAIT confirmed writes while that number exceeded `replicas`
     * (or its count could not be read), so a promoted replica may lack them: the next primary
     * change pauses grants. short_had: that number then (for the log); count_due: a WAIT
     * confirmed writes and its INFO has not answered yet. */
    int repl_most, repl_sentinel, short_of_all, short_had, count_due;
    /* Redis Cluster: the answer being handled (out_cb): 1 + its primary's index, the slot, the
     * connection; what it completes is held for that primary's WAIT */
    uint16_t ans_node, ans_slot;
    int ans_conn;
    uint64_t seq;
    /* connections */
    rs_conn_t cmd, sub, sent;       /* commands; pub/sub; Sentinel */
    rs_resolve_t rv;                /* the host name of the connection being made, one at a time */
    uint8_t rv_done;                /* ...answered, and the connection it was for has not read it */
    void (*rv_again)(struct rs *r); /* ...which runs once it has answered */
    uv_timer_t reconnect_timer, tick_timer, hb_timer, due_timer;
    uv_check_t check;
    uv_prepare_t prep; /* before the loop waits: the turn's batch goes (rs__batch_flush) */
    elist_t batch;     /* the turn's packed acquires and releases, not sent yet */
    size_t nbatch;
    uint64_t backoff_ms, down_since;
    uint64_t contact_mono; /* when Redis last answered a command (loop ms; 0: never) */
    int conn_once;         /* the command connection was up before */
    int stall_said;        /* a start that did not answer was logged since the last ready */
    unsigned sent_said;    /* bit i: Sentinel i's silence, logged since one named the primary */
    int resyncing;         /* a SCRIPT LOAD or hello runs: commands wait in retry/pending */
    elist_t inflight, retry, pending;
    elist_t unconfirmed; /* strict: undo commands answered, until a WAIT confirms them */
    size_t npending;
    /* requests */
    elist_t ready, held;
    etab_t sems, waiters;
    eheap_t theap;  /* rs_req_t.hi */
    elist_t twatch; /* ticket watchers (rs_req_t.plink), read again on tk_timer */
    elist_t lists;  /* Redis Cluster: listings asked of every primary (redis_list.c) */
    uint64_t nwatch, ticket_updates;
    uv_timer_t tk_timer;
    uint64_t due_at;         /* the due timer's deadline: the first of theap and sweep_at */
    uint64_t sweep_at;       /* when the earliest due time in Redis comes (monotonic ms) */
    int sweeping;            /* a sweep is in flight */
    int beating, beat_again; /* a beat is in flight; another is asked for */
    uint64_t nparked;
    uint64_t nsems, nleases, nlocks; /* counts in Redis, as the last reply told */
    int wait_inflight;
    uint64_t wait_short_since; /* loop ms: WAIT came back short first (0: it is whole) */
    int draining, shutting_down, closing, handles_open;
    /* counters */
    uint64_t commands, replies, reconnects, cmd_timeouts, unknown_outcomes, wakes, collects, gone,
        epoch_changes, waits, waits_short, log_reads;
} rs_t;

/* ---- redis.c: the table, start and stop, requests ---- */
uint64_t rs__now(rs_t *r); /* the loop's clock, ms */
/* One of its handles or requests on the loop is done (closed, answered): the last frees r. */
void rs__handle_done(rs_t *r);
/* Complete rq with status and message (static text); `hold`: the reply rests on a write, so
 * strict durability holds it until a WAIT confirms it (redis_strict.c). */
void rs__finish(rs_t *r, rs_req_t *rq, int status, const char *msg, int hold);
void rs__fail(rs_t *r, rs_req_t *rq, be_msg_t id, int hold); /* with message `id` */
void rs__drain(rs_t *r); /* deliver the completed requests, then pending events */

/* ---- redis_conn.c: the address, the connections, Sentinel ---- */
int rs__parse_url(rs_t *r, const char *url, char *errbuf, size_t errlen);
void rs__connect(rs_t *r);
void rs__sub_connect(rs_t *r);
void rs__conn_drop(rs_t *r, const char *why);
void rs__sub_watch(rs_t *r, rs_sem_t *s, int on);
void rs__conns_close(rs_t *r);
void rs__resync(rs_t *r);
void rs__on_ready(rs_t *r);
/* Every 100 ms: a start of the command or Sentinel connection (the connect, the setup
 * commands, a resync) unanswered for the command timeout is dropped, said at warn, and goes
 * on as a lost connection (the next Sentinel, the backoff). */
void rs__conn_tick(rs_t *r, uint64_t now);
void rs__describe(void *be, char *buf, size_t cap); /* engine_describe: the address */
/* redis_uv.c: an asynchronous connection to host:port on loop (hiredis's: a host name would be
 * resolved before this returns, on the loop: give it an address); NULL, with why, when it cannot be
 * made. Its commands may be queued at once; the caller frees it (redisAsyncFree), unless the
 * connection fails first: hiredis then frees it itself, after running every pending callback with a
 * NULL reply. */
redisAsyncContext *rs__async_open(uv_loop_t *loop, const char *host, int port, char *why,
                                  size_t cap);
/* Queue AUTH on ac when the address has a password (fn may be NULL: its answer unread). */
void rs__async_auth(const rs_t *r, redisAsyncContext *ac, redisCallbackFn *fn, void *priv);
extern const char rs__lua[]; /* sema.lua with its constants (generated: redis_lua.c) */

/* ---- redis_cmd.c: commands, sending, replies, retries ---- */
typedef struct {
    const char **v;
    size_t *l;
    int n, cap, oom;
    char nums[16][24];
    int nn;
    char text[72]; /* one composed argument (an acquire's limits) */
} rs_args_t;       /* a command's arguments while they are put together (borrowed strings) */
void rs__arg(rs_args_t *a, const char *s, size_t len);
void rs__arg_str(rs_args_t *a, const char *s);
void rs__arg_i64(rs_args_t *a, int64_t v);
void rs__args_free(rs_args_t *a);
/* FCALL sema 1 KEY op epoch inst rid alive principal flags ("0"/"1": the principal is an
 * admin; "r" is added when the command is sent again). req: NULL for semad's own commands. */
void rs__args_head(rs_t *r, rs_args_t *a, const char *key, size_t keylen, const char *op,
                   const char *rid, const engine_req_t *req);
rs_cmd_t *rs__cmd_new(rs_t *r, int kind, int argc, const char **argv, const size_t *argvlen);
rs_cmd_t *rs__cmd_build(rs_t *r, int kind, rs_args_t *a); /* frees a; NULL when out of memory */
void rs__cmd_free(rs_cmd_t *c);
void rs__cmd_fail(rs_t *r, rs_cmd_t *c, be_msg_t why); /* its request fails; c is freed */
void rs__cmd_cb(redisAsyncContext *ac, void *reply, void *priv);
void rs__cmd_reply(rs_t *r, rs_cmd_t *c, redisReply *reply); /* its answer came */
void rs__cmd_lost(rs_t *r, rs_cmd_t *c);
/* Send c, or queue it until the connection is ready; a plain acquire or release waits for
 * the turn's end to go in one call with the turn's others (redis_batch.c). */
void rs__send(rs_t *r, rs_cmd_t *c);
void rs__send_one(rs_t *r, rs_cmd_t *c);    /* rs__send, never in a batch */
void rs__send_plain(rs_t *r, rs_args_t *a); /* a command whose answer nobody reads */
/* c's arguments as sent now (v and l: c->argc each), with today's epoch and the flags,
 * written in `flags` (8 bytes). */
void rs__cmd_argv(rs_t *r, const rs_cmd_t *c, const char **v, size_t *l, char *flags);
typedef struct {
    char *p, *end; /* p NULL once something did not fit */
} rs_pk_buf_t;
/* A plain acquire or release (c->pk) in one argument (redis_proto.h: RS_PK_*): its head and
 * arguments as sent (v, l: as rs__cmd_argv gives them, or on Redis Cluster as redis_shards.c
 * does, with the epoch and the plain flag they go with) appended to b; cluster: for Redis
 * Cluster (its flag byte says so). b->p is NULL when they do not pack (c goes as it is); at
 * most rs__cmd_pack_cap(c) bytes are written. */
void rs__cmd_pack(const rs_cmd_t *c, const char **v, const size_t *l, int cluster, rs_pk_buf_t *b);
size_t rs__cmd_pack_cap(const rs_cmd_t *c);
/* Are an acquire's or a release's flags (flags_len bytes: '0' or '1', then 't' for one naming a
 * tenant, 'r', 'p') those of a call that goes packed (sent once, no pause)? */
int rs__cmd_plain(const rs_cmd_t *c, size_t flags_len);
int rs__reply_is(const redisReply *rep, const char *prefix); /* an error starting so */
/* A short path's answer (redis_proto.h: RS_SHORT_GRANT, or an integer to a packed call). */
int rs__reply_short(const rs_cmd_t *c, const redisReply *rep);

/* ---- redis_batch.c: the plain acquires and releases of a turn in one call ---- */
/* Send the acquires and releases rs__send kept back this turn: one FCALL for two or more, in
 * their order (the script runs each one's short path, or else its general path, in its place:
 * none goes again by itself, so nothing sent after the batch runs before any of them). */
void rs__batch_flush(rs_t *r);
void rs__prep_cb(uv_prepare_t *h); /* rs__batch_flush before the loop waits */
/* A batch's answer (NULL: its connection went); the batch is freed. */
void rs__batch_reply(rs_t *r, rs_cmd_t *b, redisReply *rep);

void rs__next_id(rs_t *r, char *buf, size_t cap); /* a request (and waiter) id */
/* A pause in grants after lost data has not ended, by Redis's clock as this instance reckons
 * it: commands say so ("p"), so the script takes no short path. */
int rs__paused(const rs_t *r);
/* An undo older than the longest ttl and a second need not be kept (the lease it ends has
 * expired everywhere). */
int rs__undo_moot(const rs_t *r, const rs_cmd_t *c, uint64_t now);
void rs__tick_cb(uv_timer_t *t); /* every 100 ms: command timeouts */

/* ---- redis_shards.c: the back end on a Redis Cluster (r->sh) ---- */
/* Start on the seed nodes in r->host: 0, or SEMA_ENOMEM/SEMA_EINVAL with errbuf. */
int rs__sh_open(rs_t *r, char *errbuf, size_t errlen);
void rs__sh_close(rs_t *r); /* what is in flight ends from inside (r->closing is set) */
void rs__sh_free(rs_t *r);
void rs__sh_send(rs_t *r, rs_cmd_t *c);
void rs__sh_flush(rs_t *r); /* send what waited for a slot's hello or a library, if it can */
/* The tag every semaphore of a name's slot shares. */
uint32_t rs__sh_tag(const rs_t *r, uint32_t name_hash);
/* "sema:{tag}what" of slot, or "sema:what" on one Redis, into buf; its length. */
size_t rs__home_key(const rs_t *r, unsigned slot, const char *what, char *buf, size_t cap);
/* A lease or ticket id made for the semaphore at stem names its slot (Redis Cluster). */
void rs__id_mark(const rs_t *r, char *id, const char *stem, size_t len);
/* The key of a lease ("id:") or ticket ("tk:") id, a new string; NULL when the id names no
 * slot, or (*nomem set) when out of memory. */
char *rs__id_key(const rs_t *r, const char *what, const char *id, size_t len, size_t *klen,
                 int *nomem);
void rs__sh_told(rs_t *r, const rs_cmd_t *c, const redisReply *counts, int64_t redis_now);
void rs__sh_beat(rs_t *r, int slot); /* the slots with waiters here (slot -1), or one */
void rs__sh_beat_done(rs_t *r, const rs_cmd_t *c);
void rs__sh_gone(rs_t *r, unsigned slot); /* taken for dead in slot: its waiters, hello */
void rs__sh_parked(rs_t *r, const char *stem, size_t len, int d);
void rs__sh_sweep(rs_t *r, uint64_t now);
/* A slot's sweep that failed (its primary unreachable): that slot is swept again soon. */
void rs__sh_sweep_failed(rs_t *r, const rs_cmd_t *c);
/* A slot's sweep whose answer went with its connection (it carries no request id, so nothing
 * reads that answer again): the slot's next answer sends the check of this instance's waiters
 * there (rs__check_in), which finds a grant it made by the waiter's lease id. */
void rs__sh_sweep_lost(rs_t *r, const rs_cmd_t *c);
int rs__sh_subscribe(rs_t *r, const char *chan, size_t len, int on);
/* A ticket watcher comes (d 1: rq->tslot is set) or goes (-1): its slot's ticket channel is
 * subscribed while it has watchers here. */
void rs__sh_watch(rs_t *r, rs_req_t *rq, int d);
/* Whether this instance has used slot (said hello there, and the epoch stands). */
int rs__sh_slot_used(const rs_t *r, unsigned slot);
rs_cluster_t *rs__sh_cluster(const rs_t *r);            /* NULL once closing */
void rs__sh_load_library(rs_t *r, unsigned slot);       /* on slot's primary, once at a time */
uint32_t rs__sh_slot_tag(const rs_t *r, unsigned slot); /* the tag of slot's keys */

/* ---- redis_shards_strict.c: strict durability on a Redis Cluster, a WAIT per primary ---- */
/* What strict durability knows of one primary (redis_shards.c keeps one per node). */
typedef struct {
    uint8_t inflight;     /* a WAIT is out */
    uint8_t short_of_all; /* a WAIT confirmed writes while it had more replicas than `replicas`,
                             or their count is not known yet (as rs_t's, per primary) */
    uint8_t count_due;    /* a WAIT confirmed writes and its INFO has not answered yet */
    uint8_t counted;      /* an INFO answered: repl_most is known */
    int repl_most;        /* the most replicas it was seen with */
    char replid[48];      /* its replication id, from that INFO */
    rs_slot_addr_t said;  /* the replica of it last said to carry on at once (logged once) */
} rs_sh_strict_t;
/* Each primary with held replies or unconfirmed undos and no WAIT out gets one (the loop
 * turn's check); held replies whose connection went are settled short. */
void rs__sh_strict_check(rs_t *r);
/* Whether every write acknowledged on the primary `was` (1 + its index) reached every replica
 * it had, as far as its WAITs and INFO tell: then a replica of it promoted has them all. */
int rs__sh_strict_may(rs_t *r, uint16_t was);
/* ...and whether `now`, whose INFO replication gave master_replid2 `replid2`, is such a replica
 * (it continues was's history): 1, said once per node at warn. */
int rs__sh_strict_proven(rs_t *r, uint16_t was, const rs_slot_addr_t *now, const char *replid2);
rs_sh_strict_t *rs__sh_strict_of(rs_t *r, uint16_t node); /* 1 + index; NULL when none */
const rs_slot_addr_t *rs__sh_node(const rs_t *r, uint16_t node);
/* redis_strict.c: settle the held replies and unconfirmed undos of one primary (1 + its index;
 * -1: all, on one Redis) answered on connection conn: ok, or short (and those of other
 * connections of that primary short too). */
void rs__strict_settle(rs_t *r, int node, int conn, int ok);

/* ---- redis_handover.c: a slot handed over by a reshard, or taken over by a failover ---- */
#define RS_HO_NODES_MAX 16 /* nodes asked at once, or whose answers are remembered */
#define RS_HO_ASK_MS 1000  /* a node's answers are awaited this long (its connection included) */
#define RS_HO_REMEMBER_MS 1000 /* an answer (or none) stands this long for the slots after */
/* A node asked about slots whose primary changed, on one asynchronous connection at a time. */
typedef struct {
    rs_slot_addr_t addr;
    redisAsyncContext *ac; /* the questions in flight (NULL: none) */
    uint64_t deadline;     /* loop ms: ac is dropped then, unanswered questions failed */
    uint32_t users;        /* slots waiting on it (it is kept while they wait) */
    uint16_t waiting;      /* answers awaited on ac */
    uint8_t asked_role, asked_info, failed; /* on ac; failed: it went before every answer */
    int8_t master;                       /* ROLE's answer on ac: 1 a primary, 0 not, -1 none yet */
    uint64_t info_at;                    /* loop ms of its last INFO replication answer (0: none) */
    char role[16], off[24], replid2[48]; /* ...role, second_repl_offset, master_replid2 */
    uint64_t quiet_until;                /* it did not answer: not asked again before this */
    uint64_t refused_until; /* not a primary, or sent a slot elsewhere: no move away from it is
                               taken for a reshard before this */
} rs_ho_node_t;
typedef struct {
    rs_t *r; /* (set by rs__sh_open) */
    rs_ho_node_t node[RS_HO_NODES_MAX];
    /* a slot being decided: its old and new primary (1 + their index in node), its old one
     * in the shards' nodes (strict durability's records), and what is awaited and known
     * (redis_handover.c's HO_* flags; 0: not being decided) */
    uint8_t from[RS_SLOTS], to[RS_SLOTS], flags[RS_SLOTS];
    uint16_t was[RS_SLOTS];
    rs_slot_addr_t said_from, said_to; /* the last handover logged (once per pair of nodes) */
} rs_handover_t;
enum { RS_HO_NO, RS_HO_YES, RS_HO_ASKING };
/* Whether slot, whose primary was `from` (1 + its index in the shards' nodes: `was`) and is
 * `to`, was handed over with every write acknowledged on `from`: a reshard (`from` is a
 * primary that answers MOVED or ASK for the slot to `to`, a primary never promoted since it
 * started), or, with strict durability, a promoted replica that had every such write
 * (rs__sh_strict_proven). RS_HO_NO or RS_HO_YES when that is known at once (nothing to ask,
 * or the nodes answered less than RS_HO_REMEMBER_MS ago), else RS_HO_ASKING: both nodes are
 * asked on asynchronous connections (one per node, shared by every slot that waits on it, no
 * answer in RS_HO_ASK_MS is a no), and rs__sh_handed(r, slot, yes) runs later, once, from the
 * loop: never from inside this call, and with a no when the probe is closed. */
int rs__handover_ask(rs_t *r, rs_handover_t *h, unsigned slot, uint16_t was,
                     const rs_slot_addr_t *from, const rs_slot_addr_t *to);
void rs__handover_tick(rs_handover_t *h, uint64_t now); /* drops what is past its deadline */
void rs__handover_close(rs_handover_t *h); /* every connection freed, every slot told no */
/* redis_shards.c: the answer of rs__handover_ask for slot (its hello goes then). */
void rs__sh_handed(rs_t *r, unsigned slot, int yes);
void rs__sh_tick(rs_t *r, uint64_t now); /* the 100 ms tick's share of the shards */

/* ---- redis_list.c: listing on a Redis Cluster, every primary asked ---- */
typedef struct rs_list rs_list_t;
/* Ask every primary for rq's page (ENGINE_SEM_LIST or ENGINE_LOCK_LIST), merged in name
 * order; rq is completed later (or at once, when it cannot be sent). */
void rs__list_send(rs_t *r, rs_req_t *rq);
/* Ask again, where the map says now, the slots whose primary answered that it does not
 * serve them (or end the listing once answered, failed, or past the command timeout). */
void rs__list_step(rs_t *r, rs_list_t *ls, uint64_t now);
void rs__list_tick(rs_t *r, uint64_t now); /* every listing's step */
void rs__list_close(rs_t *r);              /* shutdown: every listing fails */

/* ---- redis_ops.c: operations as script calls ---- */
#define RS_STEM_HEAD 17 /* strlen("sema:{01234567}s:") */
/* "sema:{tag}K:name" followed by `suffix` ("" or a key's suffix), as a new string (sema__free
 * it) of length *len; NULL when out of memory. On Redis Cluster the tag is its slot's. */
char *rs__key_new(const rs_t *r, char kind, const char *name, size_t len, const char *suffix,
                  size_t *klen);
/* stem followed by suffix, as a new string, the same way. */
char *rs__key_cat(const char *prefix, const char *stem, size_t len, const char *suffix,
                  size_t *klen);
const char *rs__stem_name(const char *stem, size_t len, size_t *nlen, char *kind);
int rs__op_writes(engine_op_t op);
int rs__is_lease_op(engine_op_t op);
int rs__is_ticket_id_op(engine_op_t op);
const char *rs__op_name(rs_op_t op);
/* The command of rq's operation; NULL when its key names nothing (a lease or ticket id too
 * long to be one) or, with *nomem set, when out of memory. */
rs_cmd_t *rs__op_cmd(rs_t *r, rs_req_t *rq, int *nomem);
void rs__op_reply(rs_t *r, rs_cmd_t *c, const redisReply *rep);
void rs__op_short(rs_t *r, rs_cmd_t *c, const redisReply *rep); /* the short paths' answers */
rs_cmd_t *rs__cancel_cmd(rs_t *r, const char *stem, size_t stem_len, const rs_req_t *rq,
                         const char *why, const char *rid);
void rs__send_cancel(rs_t *r, const char *stem, size_t stem_len, const rs_req_t *rq);
void rs__send_drop(rs_t *r, const char *lid); /* a grant that cannot be delivered goes back */
/* 'k' for a lock key's operations, 's' for a semaphore's */
static inline char rs__req_kind(const engine_req_t *req)
{
    return req->op == ENGINE_LOCK_ACQUIRE || req->op == ENGINE_LOCK_GET ? 'k' : 's';
}
/* An operation that grants a lease (on a semaphore, a lock key, or several semaphores). */
static inline int rs__is_acquire(engine_op_t op)
{
    return op == ENGINE_ACQUIRE || op == ENGINE_LOCK_ACQUIRE || op == ENGINE_ACQUIRE_MULTI;
}
/* The name a request's key is made of: its own, or its first semaphore's (several). */
static inline const char *rs__req_name(const engine_req_t *req, size_t *len)
{
    if (req->op == ENGINE_ACQUIRE_MULTI || (req->op == ENGINE_TICKET_CREATE && req->nparts > 0)) {
        *len = req->parts[0].name_len;
        return req->parts[0].name;
    }
    *len = req->name_len;
    return req->name;
}

/* ---- redis_acts.c: replies, results and acts ---- */
/* The parts of a lease on several semaphores: stem, weight and fence each, from `at` to the
 * reply's end (none: l unchanged); its name, weight and fence become its first part's. 0, or
 * -1 when out of memory. */
int rs__parts_from(engine_result_t *res, engine_lease_t *l, const redisReply *a, size_t at);
const char *rs__el_str(const redisReply *a, size_t i, size_t *len);
/* Element i as a string of res (NUL-terminated), NULL when empty, RS_NOMEM when out of
 * memory. */
extern const char RS_NOMEM[1];
const char *rs__el_dup(engine_result_t *res, const redisReply *a, size_t i);
int64_t rs__el_i64(const redisReply *a, size_t i);
const redisReply *rs__el_arr(const redisReply *a, size_t i);
int rs__lease_from(engine_result_t *res, engine_lease_t *l, const redisReply *a, size_t at);
int rs__result_from(rs_t *r, rs_req_t *rq, const redisReply *rep); /* 0, or -1: no memory */
/* The items of a list's answer (kept by res) and whether more follow: 0, or -1: no memory. */
int rs__list_from(engine_result_t *res, const redisReply *rep, engine_list_item_t **out,
                  size_t *nout, int *more);
void rs__acts_process(rs_t *r, const redisReply *rep, int mine);
int rs__act_is_event(const redisReply *acts, size_t i); /* the act at acts[i] is an event */
/* Where an event's lease or waiter lives while it is handed over. */
typedef struct {
    engine_lease_t lease;
    engine_waiter_t waiter;
} rs_ev_room_t;
/* The public event of the act at acts[i] (type, then its fields); 0, or -1 when it is none or
 * out of memory (scratch holds its strings: engine_result_clear it after). */
int rs__act_to_event(const redisReply *acts, size_t i, const char *name, size_t nlen,
                     engine_result_t *scratch, engine_event_t *ev, rs_ev_room_t *room);

/* ---- redis_ticket.c: tickets, their long-polls and streams ---- */
void rs__ticket_args(rs_t *r, const engine_req_t *req, rs_args_t *a, char *tid, char *lid,
                     const char *stem, size_t stem_len);
int rs__ticket_from(rs_t *r, engine_result_t *res, const redisReply *rep, size_t at,
                    const char *name, size_t nlen);
int rs__ticket_wait(rs_t *r, rs_req_t *rq); /* 0: answer now; 1: waits on, or failed (stop) */
void rs__ticket_message(rs_t *r, const char *tid, size_t len);
void rs__watch_off(rs_t *r, rs_req_t *rq);
void rs__ticket_timer_cb(uv_timer_t *h);

/* ---- redis_wait.c: parked waiters, timers, the heartbeat, messages ---- */
rs_sem_t *rs__sem_find(rs_t *r, const char *stem, size_t len);
rs_sem_t *rs__sem_get(rs_t *r, const char *stem, size_t len); /* NULL: no memory */
void rs__sem_maybe_free(rs_t *r, rs_sem_t *s);
rs_req_t *rs__parked_find(rs_t *r, const char *wid, size_t len);
void rs__park(rs_t *r, rs_req_t *rq, const char *stem, size_t stem_len);
void rs__unpark(rs_t *r, rs_req_t *rq);
void rs__beat(rs_t *r);         /* this instance's heartbeat: O(1) in Redis */
void rs__check_all(rs_t *r);    /* ask after every parked waiter (after a reconnect) */
void rs__waiters_gone(rs_t *r); /* Redis lost them all: each gets 503 */
void rs__waiters_gone_in(rs_t *r, unsigned slot); /* those on semaphores of one slot */
void rs__check_in(rs_t *r, unsigned slot);        /* rs__check_all, on one slot's */
void rs__timeout_cancel_done(rs_t *r, rs_cmd_t *c);
void rs__due_rearm(rs_t *r);
void rs__sweep_set(rs_t *r, int64_t due_ms, int64_t redis_now);
void rs__due_cb(uv_timer_t *t);
void rs__hb_cb(uv_timer_t *t);
void rs__on_message(rs_t *r, redisReply *msg);

/* ---- redis_strict.c: strict durability's WAIT ---- */
/* A field of INFO's text ("name:value\r\n") into buf; "" when it is not there. */
void rs__info_field(const char *info, const char *name, char *buf, size_t cap);
/* connected_slaves of INFO replication's text, or -1 when it is not there. */
int rs__info_replicas(const char *info);
void rs__check_cb(uv_check_t *h);
void rs__wait_lost(rs_t *r);

/* ---- redis_metrics.c ---- */
#define RS_M_TICKET_FIELDS 6 /* the ticket counters of an epoch hash */
void rs__stats(void *be, engine_stats_t *out);
/* ENGINE_METRICS: the series after the front's, once what they need is read from Redis (on
 * the command connection, or of every primary with slots this instance used, never on a
 * blocking connection); rq is completed then, or at once when nothing is to be read. */
void rs__metrics_send(rs_t *r, rs_req_t *rq);

/* ---- redis_events.c: event ids shared by every instance, from the log in Redis ---- */
typedef struct {
    redisReply arr; /* an array of the fields, as a reply would be */
    redisReply **els;
    redisReply *cells;
    char *buf;
} rs_split_t;
int rs__split(rs_split_t *sp, const char *p, size_t n);
void rs__split_free(rs_split_t *sp);
void rs__ev_batch(rs_t *r, rs_sem_t *s, uint64_t uid, uint64_t first, const redisReply *acts);
void rs__ev_message(rs_t *r, const char *stem, size_t slen, const char *pay, size_t plen);
void rs__ev_catch_up(rs_t *r, const char *stem, size_t len);
void rs__ev_catch_up_all(rs_t *r);
void rs__ev_marked(rs_t *r, const rs_cmd_t *c, const redisReply *rep);
void rs__ev_renew(rs_t *r, rs_sem_t *s); /* the heartbeat of a semaphore it follows */
/* ENGINE_EVENTS_OPEN: does the semaphore exist (no answer counts as "it may"), then this
 * instance follows its events, and with an id, the stream after it is read; rq is completed
 * then (later, or at once when Redis is known to be down). */
void rs__ev_open(rs_t *r, rs_req_t *rq);

#endif /* SEMAD_REDIS_INTERNAL_H */
