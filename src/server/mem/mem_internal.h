/* SPDX-License-Identifier: MIT */
/* mem_internal.h - the in-memory back end's private structures, shared by mem*.c. */
#ifndef SEMAD_MEM_INTERNAL_H
#define SEMAD_MEM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "table.h"
#include "internal.h"
#include "store/store.h"

/* ---- the objects ---- */
enum { ESEM_LEGACY = 1, ESEM_LOCK = 2, ESEM_DELETED = 4 };

struct ereq;

/* What a semaphore has measured for tickets' estimates (mem_ticket.c). */
typedef struct {
    double gap_ms, gap_var; /* per unit granted from the queue while it was not empty:
                               moving mean and variance */
    double hold_ms;         /* moving mean of hold times */
    uint64_t last_mono;     /* the last grant from a queue still not empty, or 0 */
    uint32_t ngaps, nholds; /* samples taken (saturating) */
} eest_t;

/* A semaphore (or a keyed lock's ephemeral semaphore). About 200 bytes plus its name. */
typedef struct esem {
    enode_t node;         /* in e->sems (or e->locks), keyed by name */
    struct esem *tl, *tr; /* name-ordered treap (priority = node.hash); not for locks */
    elist_t waiters;      /* ereq_t.link, FIFO */
    elist_t holders;      /* elease_t.link, grant order */
    uint64_t capacity;
    int64_t available; /* may be < 0 after a shrink, > capacity after legacy up */
    uint64_t held;     /* sum of lease weights */
    uint64_t fence;    /* last fence handed out (or bumped by revoke) */
    uint64_t waiting;  /* total weight queued */
    int64_t created_at_ms;
    uint32_t nwaiters;
    uint32_t dirty_at;  /* 1 + its index in e->dirty while its row awaits the next commit */
    struct ereq *qroot; /* the waiters again, as a treap by place for positions */
    uint64_t qseq;      /* the last place handed out in the queue */
    uint64_t qremoved;  /* waiters that left the queue (positions behind them moved) */
    eest_t est;
    uint16_t name_len;
    uint8_t flags; /* ESEM_* */
    char name[];
} esem_t;

typedef struct eidem eidem_t;
struct eticket;

/* A lease: one grant. */
typedef struct elease {
    enode_t node; /* in e->leases, keyed by id */
    eitem_t hi;   /* expiry */
    elist_t link; /* in sem->holders */
    esem_t *sem;
    uint64_t weight, fence;
    int mode; /* a keyed lock's ENGINE_MODE_*, as requested; 0 on a semaphore */
    int64_t ttl_ms, acquired_at_ms, expires_at_ms; /* wall clock ms */
    uint64_t acquired_mono;                        /* for the hold-time histogram */
    char *owner;                                   /* owned, may be NULL */
    char *principal;        /* the token that took it (semad --auth), owned, may be NULL */
    eidem_t *idem;          /* may be NULL */
    struct ereq *pending;   /* the undelivered reply that owns it (its er->lease), or NULL */
    struct eticket *ticket; /* the ticket it was granted to, or NULL */
    char id[ENGINE_LEASE_ID_MAX];
} elease_t;

enum { EREQ_NEW, EREQ_PARKED, EREQ_READY, EREQ_COMMIT, EREQ_WATCH };
enum { EKIND_ACQUIRE = 1, EKIND_WAIT_IDLE = 2, EKIND_TICKET = 3 };

/* The engine's side of one accepted request; also the parked waiter. */
typedef struct ereq {
    elist_t link;      /* sem->waiters while parked; e->ready / e->commit_wait when done */
    eitem_t hi;        /* timeout while parked */
    engine_req_t *req; /* NULL for a ticket's place (EKIND_TICKET) */
    esem_t *sem;       /* while parked */
    struct ereq *oleft, *oright; /* the queue's treap (esem_t.qroot), by place */
    uint64_t oseq;               /* its place: earlier waiters have lower ones */
    uint64_t owsum;              /* weight of its treap subtree */
    elease_t *lease;             /* a grant not yet delivered (for cancel) */
    eidem_t *idem;               /* idempotency entry naming this waiter */
    uint64_t weight;             /* 0 for wait-idle */
    int64_t since_ms;
    uint64_t since_mono;
    uint32_t osize; /* waiters in its treap subtree */
    uint8_t state, kind, durable;
} ereq_t;

/* An Idempotency-Key of one semaphore: names the live lease or the parked waiter. */
struct eidem {
    enode_t node; /* in e->idems, hash of (sem, key) */
    esem_t *sem;
    elease_t *lease;
    ereq_t *waiter;
    struct eticket *ticket;
    size_t key_len;
    char key[];
};

/* A ticket: a place in a semaphore's queue that no connection holds, then its lease. */
enum { ETICKET_WAITING = ENGINE_TICKET_WAITING, ETICKET_GRANTED = ENGINE_TICKET_GRANTED };
typedef struct eticket {
    enode_t node;     /* in e->tickets, keyed by id */
    ereq_t q;         /* its place in line while waiting (kind EKIND_TICKET, req NULL) */
    eitem_t hi;       /* keepalive: dropped (or its grant released) when unread past it */
    elist_t watchers; /* long-polls and streams reading it (ereq_t.link, EREQ_WATCH) */
    elist_t watched;  /* in e->watched while it has watchers */
    esem_t *sem;
    elease_t *lease; /* once granted */
    eidem_t *idem;   /* may be NULL */
    char *owner;     /* owned, may be NULL */
    char *principal; /* the token that took it (semad --auth), owned, may be NULL */
    int64_t ttl_ms, keepalive_ms, created_at_ms;
    uint64_t seen_removed; /* sem->qremoved when its watchers' positions were last checked */
    uint8_t status;        /* ETICKET_* */
    uint8_t collected;     /* a reply showed the grant: keepalive no longer applies */
    char id[ENGINE_LEASE_ID_MAX];
} eticket_t;

/* A tombstone: why a lease id (or a ticket id) ended. */
enum {
    ETOMB_RELEASED = 1,
    ETOMB_EXPIRED,
    ETOMB_REVOKED,
    ETOMB_DELETED,
    ETOMB_TICKET_LEFT,        /* DELETE /v1/tickets/{id} */
    ETOMB_TICKET_ABANDONED,   /* waiting, unread for keepalive_ms */
    ETOMB_TICKET_UNCOLLECTED, /* granted, nobody came for the lease within keepalive_ms */
    ETOMB_TICKET_DONE,        /* its lease ended */
    ETOMB_TICKET_DELETED,     /* its semaphore was deleted */
    ETOMB_TICKET_REFUSED,     /* it can no longer fit (resize), or no memory to grant it */
};
typedef struct {
    enode_t node;
    uint64_t ended_mono;
    int reason;
    char id[ENGINE_LEASE_ID_MAX];
} etomb_t;

/* The thread that writes and syncs group commits off the loop (engine_store.c). */
typedef struct ecommitter ecommitter_t;

typedef struct mem mem_t;
typedef void (*mem_op_fn)(mem_t *e, ereq_t *er);

struct mem {
    uv_loop_t *loop;
    engine_t *front;      /* whose counters, ids and event fan-out this back end uses */
    engine_counters_t *m; /* the front's counters */
    engine_config_t cfg;
    store_t *store;
    int strict; /* the store is strict: every reply that rests on a change waits for it */
    etab_t sems, locks, leases, tombs, idems, tickets;
    elist_t watched; /* tickets with watchers (eticket_t.watched) */
    eitem_t tick;    /* the next check of watched tickets' positions (EITEM_TICK) */
    uint64_t tickets_created, tickets_granted, tickets_left, tickets_abandoned, tickets_uncollected,
        ticket_updates;
    uint64_t nwatchers; /* long-polls and streams parked on tickets now */
    esem_t *root;       /* treap of e->sems by name */
    eheap_t heap;
    uv_timer_t timer;
    uint64_t timer_due; /* deadline the timer is armed for, or UINT64_MAX */
    uv_check_t check;
    uv_idle_t idle;
    int commit_armed;
    elist_t ready;         /* completions to deliver now */
    elist_t commit_wait;   /* completions waiting for the next group commit */
    elist_t commit_fly;    /* completions whose mutations the running commit carries */
    int committing;        /* a commit runs (on the committer thread, or inline) */
    uint64_t nwait;        /* completions put on commit_wait since the last commit started */
    uint64_t nfly;         /* ... that the running (or last) commit carried */
    uint64_t gather_want;  /* gathering: start the next commit once nwait reaches this */
    uint64_t gather_until; /* ... or at this uv_hrtime() (0: not gathering) */
    uint64_t last_run_ns;  /* how long the last commit took (on the loop or the committer) */
    int commit_inline;     /* the running (or last) commit runs on the loop */
    uv_timer_t ck_timer;   /* a checkpoint once commits pause (mem_store.c) */
    uint64_t checkpoints, checkpoint_failures; /* the store's, read while no commit runs */
    ehist_t commit_s;                          /* how long each commit took to write and sync */
    ecommitter_t *committer;                   /* NULL: commits run on the loop thread */
    esem_t **dirty;        /* semaphores whose rows the next commit writes (NULL: gone) */
    uint64_t fence_stored; /* the fence floor the store has (or the next commit writes) */
    size_t ndirty, dirty_cap;
    int draining;
    int shutting_down;
    int clearing; /* mem__state_clear runs: the treap is dropped whole */
    int handles_open;
    uint64_t fence_seq;
    uint64_t nparked;
    uint64_t commits, commit_failures;
    etomb_t **tring; /* tombstones, oldest first (ring) */
    size_t tring_cap, tring_head, tring_len;
    char errbuf[256];
};

/* mem.c */
uint64_t mem__now(mem_t *e); /* monotonic ms */
int64_t mem__wall_ms(void);  /* Unix epoch ms */
esem_t *mem__sem_find(mem_t *e, const char *name, size_t len);
esem_t *mem__lock_find(mem_t *e, const char *key, size_t len);
esem_t *mem__sem_new(mem_t *e, const char *name, size_t len, uint64_t capacity, int flags);
void mem__sem_free(mem_t *e, esem_t *s);
void mem__admit(mem_t *e, esem_t *s);
/* Complete `er` with `status` (its result, if any, is in er->req->res already). */
void mem__finish(mem_t *e, ereq_t *er, int status, const char *msg);
/* Complete `er` successfully with lease `l` as its result. */
void mem__finish_lease(mem_t *e, ereq_t *er, const elease_t *l);
/* Complete `er` successfully with a view of `s` of result kind `kind` (SEM, LOCK, LEGACY,
 * IDLE). */
void mem__finish_view(mem_t *e, ereq_t *er, const esem_t *s, engine_res_kind_t kind);
void mem__drain(mem_t *e);
void mem__mark_dirty(mem_t *e);
int mem__park(mem_t *e, ereq_t *er, esem_t *s, int64_t timeout_ms);
void mem__unpark(mem_t *e, ereq_t *er);
void mem__maybe_free_lock(mem_t *e, esem_t *s);
void mem__timer_rearm(mem_t *e);
/* The semaphore's row changed: it is written once, as it is then, when the next commit
 * starts (so many grants on one semaphore in a commit write its row once). */
void mem__store_sem(mem_t *e, esem_t *s);
/* er's reply carries lease l: er owns it until delivered (a cancel releases it); a later
 * owner (an idempotent retry) takes it over. mem__lease_disown when the link must go. */
void mem__lease_own(ereq_t *er, elease_t *l);
void mem__lease_disown(ereq_t *er);
/* Record the rows of every changed semaphore (when a commit starts), or of one now. */
void mem__store_sems_flush(mem_t *e);
void mem__store_sem_now(mem_t *e, esem_t *s);
uint64_t mem__idem_hash(const esem_t *s, const char *key, size_t len);
eidem_t *mem__idem_find(mem_t *e, const esem_t *s, const char *key, size_t len);
/* The record of req's Idempotency-Key on `s` in *out (NULL: no key, or a new one). Returns
 * SEMA_EACCES when it names a request of another token (mem_ops.c). */
int mem__idem_of(mem_t *e, const engine_req_t *req, const esem_t *s, eidem_t **out);
eidem_t *mem__idem_new(mem_t *e, esem_t *s, const char *key, size_t len);
void mem__idem_free(mem_t *e, eidem_t *d);
void mem__treap_insert(mem_t *e, esem_t *s);
void mem__treap_remove(mem_t *e, esem_t *s);
esem_t *mem__treap_after(mem_t *e, const char *key, size_t len, int inclusive);

/* The lock mode a request asks for: ENGINE_MODE_* for a keyed lock, 0 for a semaphore. The
 * mode is kept apart from the weight: with --lock-readers 1 both modes weigh 1. */
static inline int mem__req_mode(const engine_req_t *req)
{
    return req->op == ENGINE_LOCK_ACQUIRE ? req->mode : 0;
}

/* mem_lease.c */
elease_t *mem__lease_find(mem_t *e, const char *id, size_t len);
etomb_t *mem__tomb_find(mem_t *e, const char *id, size_t len);
int mem__tomb_status(int reason);
elease_t *mem__grant(mem_t *e, esem_t *s, const engine_req_t *req, uint64_t weight,
                     uint64_t since_mono);
/* 1 if `req` may renew or release lease `l`: without --auth, by the token that took it, or
 * by a token with the admin right. */
int mem__lease_allowed(const engine_req_t *req, const elease_t *l);
/* With --auth, a parked request and a ticket are their token's too: only it (or an admin)
 * may take them over, read, watch or delete them. 1 when `req` may. */
int mem__waiter_allowed(const engine_req_t *req, const engine_req_t *parked);
int mem__ticket_allowed(const engine_req_t *req, const eticket_t *t);
void mem__lease_end(mem_t *e, elease_t *l, int reason);
void mem__lease_free(mem_t *e, elease_t *l);
void mem__lease_expire_due(mem_t *e, elease_t *l);
void mem__store_lease(mem_t *e, const elease_t *l, int created);
void mem__tombs_clear(mem_t *e);
int mem__lease_load(mem_t *e, esem_t *s, const store_lease_t *rec);

/* mem_view.c: a result's typed views of the state (strings copied into the result) */
void mem__view_lease(engine_lease_t *v, const elease_t *l);
int mem__view_sem(engine_result_t *r, engine_sem_view_t *v, const esem_t *s, int lists);
/* An event of a lease (granted, released, expired, revoked) or of a semaphore. */
void mem__event_lease(mem_t *e, const esem_t *s, const char *type, const elease_t *l);
void mem__event_sem(mem_t *e, const esem_t *s, const char *type, uint64_t capacity);

/* mem_metrics.c */
int mem__metrics(void *be, struct strbuf *out);

/* mem_store.c */
int mem__store_load(mem_t *e, char *errbuf, size_t errlen);
void mem__commit_cb(uv_check_t *h);
/* Start the committer thread: 0, or a SEMA_E* code (commits then run on the loop thread);
 * either way when e->committer is set its uv handle is open. */
int mem__committer_start(mem_t *e);
void mem__committer_free(mem_t *e);
int mem__committer_handles(const mem_t *e);
/* the libuv handles it closes at the end */ /* after its handle closed */
/* Wait for the running commit, commit what is recorded, deliver, and stop the thread; its
 * uv handle is closed with `on_closed`. */
void mem__commit_flush(mem_t *e, uv_close_cb on_closed);
void mem__state_clear(mem_t *e, elist_t *keep_waiters);

/* mem_treap.c: the queue's order statistics */
void mem__oq_insert(esem_t *s, ereq_t *er); /* er->oseq set: its place */
void mem__oq_remove(esem_t *s, ereq_t *er);
/* Waiters ahead of er and their total weight: O(log n). */
void mem__oq_rank(const esem_t *s, const ereq_t *er, uint64_t *ahead, uint64_t *ahead_weight);

/* mem_ticket.c */
void mem__op_ticket_create(mem_t *e, ereq_t *er);
void mem__op_ticket_get(mem_t *e, ereq_t *er);
void mem__op_ticket_delete(mem_t *e, ereq_t *er);
void mem__ticket_grant(mem_t *e, eticket_t *t);                  /* its turn: the head fits */
void mem__ticket_refuse(mem_t *e, eticket_t *t, int reason);     /* a waiting ticket must go */
void mem__ticket_lease_gone(mem_t *e, eticket_t *t, int reason); /* its lease ended */
void mem__ticket_due(mem_t *e, eticket_t *t);                    /* keepalive passed */
void mem__ticket_tick(mem_t *e);                                 /* position updates to watchers */
void mem__ticket_watch_timeout(mem_t *e, ereq_t *er);
void mem__ticket_watch_cancel(mem_t *e, ereq_t *er);
void mem__tickets_clear(mem_t *e, int status, const char *msg); /* free all, fail watchers */
void mem__tickets_fail_watchers(mem_t *e, int status, const char *msg);
void mem__est_queue_grant(mem_t *e, esem_t *s, uint64_t weight, int queue_left);
void mem__est_hold(esem_t *s, uint64_t held_ms);
int mem__ticket_load(mem_t *e, const store_ticket_t *rec);
void mem__tomb_add(mem_t *e, const char *id, int reason);

/* mem_ops.c */
extern const mem_op_fn mem__ops[ENGINE_OP_COUNT];

#endif /* SEMAD_MEM_INTERNAL_H */
