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
#include "backends/redis/rs_proto.h"
#include "engine/backend.h"

#define RS_HEARTBEAT_MS 2000    /* a parked waiter's instance renews it this often */
#define RS_CMD_TIMEOUT_MS 2000  /* a command unanswered this long: the connection is dropped */
#define RS_BACKOFF_MAX_MS 2000  /* reconnect backoff ceiling */
#define RS_PENDING_MAX 100000   /* commands queued while Redis is unreachable */
#define RS_COLLECT_WIDS 4096    /* waiter ids in one heartbeat command */
#define RS_WAIT_TIMEOUT_MS 1000 /* strict: WAIT's own timeout */

enum { RS_DOWN, RS_CONNECTING, RS_READY };

/* A semaphore (or lock key) this instance has parked requests on or streams events of. */
typedef struct rsem {
    enode_t node;   /* in r->sems, keyed by stem */
    elist_t parked; /* rreq_t.plink */
    uint32_t nparked;
    uint8_t collecting, collect_again, watched, subscribed;
    uint8_t pt_ok, pt_gone;    /* pt_*: the log's point as the last rs__ev_watch read it */
    uint64_t pt_uid, pt_seq;   /* (redis_events.c) */
    uint64_t ev_uid, ev_seq;   /* the last event handed to the front (0: none yet) */
    uint64_t own_uid, own_seq; /* the last event this instance's own messages announced */
    size_t stem_len;
    size_t name_off; /* where the name starts in stem */
    char stem[];
} rsem_t;

/* RQ_CANCELLING: parked, its timeout came and its cancel is in flight; Redis decides whether it
 * timed out or was granted first, and the request is answered only then. */
/* RQ_WATCH: a ticket's long-poll (or stream) between two reads of it, in r->twatch by plink
 * (also while a read is in flight, then RQ_SENT) until it is answered. */
enum { RQ_SENT = 1, RQ_PARKED, RQ_READY, RQ_CANCELLING, RQ_WATCH };

/* The back end's side of one request. */
typedef struct rreq {
    elist_t link;      /* r->ready or r->held once complete */
    elist_t plink;     /* rsem->parked while parked */
    enode_t node;      /* r->waiters by wid while parked */
    eitem_t hi;        /* its timeout while parked (in r->theap); a watcher's next read */
    engine_req_t *req; /* NULL once cancelled */
    rsem_t *sem;
    struct rcmd *cancel; /* RQ_CANCELLING: its cancel command (whose rq points back) */
    uint64_t since_mono;
    uint8_t state, writes;
    uint8_t again; /* a watcher whose ticket changed while a read of it was in flight */
    char wid[40];
    char lid[ENGINE_LEASE_ID_MAX];
} rreq_t;

/* RC_MARK: the heartbeat's HSETNX of an event log's run (redis_events.c): 1 means the
 * marker had gone. */
enum { RC_OP = 1, RC_CANCEL, RC_COLLECT, RC_DROP, RC_SWEEP, RC_WAIT, RC_PLAIN, RC_MARK };

/* One command: its arguments are kept, so a retry after a lost connection sends the same
 * request id (which Redis answers from its cache if the first attempt ran). An FCALL is
 * formatted when sent, with the epoch known then. */
typedef struct rcmd {
    elist_t link; /* r->inflight, r->retry or r->pending */
    int argc;
    int script;   /* FCALL: argv[5] is the epoch */
    size_t *lens; /* argc lengths, then the bytes of every argument (one allocation) */
    uint64_t queued_mono, sent_mono;
    uint64_t gen; /* r->epoch_changes when first sent */
    uint8_t kind, writes;
    uint8_t timed; /* RC_CANCEL of a timeout (its outcome is the request's answer) */
    rreq_t *rq;    /* RC_OP */
    rsem_t *sem;   /* RC_COLLECT */
} rcmd_t;

typedef struct rconn {
    redisAsyncContext *ac;
    int state;
    int is_sub;
    struct rs *r;
} rconn_t;

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
    uint64_t cmd_timeout_ms; /* a command unanswered this long: the connection is dropped */
    int strict;
    /* identity */
    char inst[24];  /* this instance's id */
    char epoch[40]; /* the epoch of Redis's data this instance works on ("" before hello) */
    int64_t safe_at_ms;
    int64_t horizon_ms; /* the latest lease expiry Redis told of (Redis ms) */
    uint64_t seq;
    /* connections */
    rconn_t cmd, sub, sent; /* commands; pub/sub; Sentinel */
    redisContext *sync;     /* blocking, for exists() and /metrics (rs__sync) */
    uv_timer_t reconnect_timer, tick_timer, hb_timer, due_timer;
    uv_check_t check;
    uint64_t backoff_ms, down_since;
    int conn_once; /* the command connection was up before */
    int resyncing; /* a SCRIPT LOAD or hello runs: commands wait in retry/pending */
    elist_t inflight, retry, pending;
    elist_t unconfirmed; /* strict: undo commands answered, until a WAIT confirms them */
    size_t npending;
    /* requests */
    elist_t ready, held;
    etab_t sems, waiters;
    eheap_t theap;  /* rreq_t.hi */
    elist_t twatch; /* ticket watchers (rreq_t.plink), read again on tk_timer */
    uint64_t nwatch, ticket_updates;
    uv_timer_t tk_timer;
    uint64_t due_at;   /* the due timer's deadline: the first of theap and sweep_at */
    uint64_t sweep_at; /* when the earliest due time in Redis comes (monotonic ms) */
    int sweeping;      /* a sweep is in flight */
    uint64_t nparked;
    uint64_t nsems, nleases, nlocks; /* counts in Redis, as the last reply told */
    int wait_inflight, wait_needed;
    int draining, shutting_down, closing, handles_open;
    /* counters */
    uint64_t commands, replies, reconnects, cmd_timeouts, unknown_outcomes, wakes, collects, gone,
        epoch_changes, waits, waits_short, log_reads;
    char errbuf[256];
} rs_t;

/* redis_conn.c */
int rs__parse_url(rs_t *r, const char *url, char *errbuf, size_t errlen);
void rs__connect(rs_t *r);
void rs__sub_connect(rs_t *r);
void rs__send(rs_t *r, rcmd_t *c);
void rs__conn_drop(rs_t *r, const char *why);
void rs__sub_watch(rs_t *r, rsem_t *s, int on);
void rs__conns_close(rs_t *r);
void rs__resync(rs_t *r);
void rs__on_ready(rs_t *r);
extern const char rs__lua[];

/* redis.c */
#define RS_STEM_HEAD 17 /* strlen("sema:{01234567}s:") */
uint64_t rs__now(rs_t *r);
size_t rs__stem(char *buf, size_t cap, char kind, const char *name, size_t len);
rsem_t *rs__sem_find(rs_t *r, const char *stem, size_t len);
redisContext *rs__sync(rs_t *r);
int rs__act_is_event(const redisReply *acts, size_t i); /* the act at acts[i] is an event */
/* The public event of the act at acts[i] (type, then its fields); 0, or -1 when it is none or
 * out of memory (scratch holds its strings: engine_result_clear it after). */
int rs__act_to_event(const redisReply *acts, size_t i, const char *name, size_t nlen,
                     engine_result_t *scratch, engine_event_t *ev, engine_lease_t *l);
rcmd_t *rs__cmd_new(rs_t *r, int kind, int argc, const char **argv, const size_t *argvlen);
void rs__cmd_free(rcmd_t *c);
void rs__cmd_cb(redisAsyncContext *ac, void *reply, void *priv);
void rs__on_reply(rs_t *r, rcmd_t *c, redisReply *reply);
void rs__cmd_lost(rs_t *r, rcmd_t *c);
void rs__wait_lost(rs_t *r);
void rs__on_message(rs_t *r, redisReply *msg);
void rs__collect_all(rs_t *r);
void rs__drain(rs_t *r);

/* redis_events.c: event ids shared by every instance, from the log in Redis */
typedef struct {
    redisReply arr; /* an array of the fields, as a reply would be */
    redisReply **els;
    redisReply *cells;
    char *buf;
} rsplit_t;
int rs__split(rsplit_t *sp, const char *p, size_t n);
void rs__split_free(rsplit_t *sp);
int rs__ev_watch(rs_t *r, rsem_t *s);
void rs__ev_start(rs_t *r, rsem_t *s, int was_watched);
void rs__ev_batch(rs_t *r, rsem_t *s, uint64_t uid, uint64_t first, const redisReply *acts);
void rs__ev_message(rs_t *r, const char *stem, size_t slen, const char *pay, size_t plen);
void rs__ev_catch_up(rs_t *r, const char *stem, size_t len);
void rs__ev_catch_up_all(rs_t *r);
void rs__ev_marked(rs_t *r, const rcmd_t *c, const redisReply *rep);
void rs__ev_heartbeat(rs_t *r, rsem_t *s);
int rs__events_point(void *be, const char *name, size_t len, uint64_t *uid, uint64_t *seq);
int rs__events_replay(void *be, const char *name, size_t len, uint64_t uid, uint64_t seq,
                      void (*each)(void *ctx, const engine_event_t *ev), void *ctx,
                      uint64_t *cur_uid, uint64_t *cur_seq);

#endif /* SEMAD_REDIS_INTERNAL_H */
