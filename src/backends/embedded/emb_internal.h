/* SPDX-License-Identifier: MIT */
/* emb_internal.h - the embedded back end's private structures, shared by emb*.c. */
#ifndef SEMAD_EMB_INTERNAL_H
#define SEMAD_EMB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/alloc.h"
#include "common/table.h"
#include "backends/be_estimate.h"
#include "backends/be_msg.h"
#include "engine/backend.h"
#include "engine/engine_limits.h"
#include "store/store.h"

/* ---- the objects ---- */
enum { EMB_SEM_LEGACY = 1, EMB_SEM_LOCK = 2, EMB_SEM_DELETED = 4 };

struct emb_req;
struct emb_limits;
struct emb_tenant;
struct emb_multi;

/* What a semaphore has measured for tickets' estimates (emb_ticket.c; the rule is
 * backends/be_estimate.c, shared with the Redis back end). */
typedef struct {
    be_est_t s;         /* the samples */
    uint64_t last_mono; /* the last grant from a queue still not empty, or 0 */
} emb_est_t;

/* A semaphore (or a keyed lock's ephemeral semaphore). About 200 bytes plus its name. */
typedef struct emb_sem {
    enode_t node;            /* in eb->sems (or eb->locks), keyed by name */
    struct emb_sem *tl, *tr; /* name-ordered treap (priority = node.hash): eb->root, or
                                eb->lock_root for a lock key */
    elist_t waiters;         /* emb_req_t.link, FIFO */
    elist_t holders;         /* emb_lease_t.link, grant order */
    uint64_t capacity;
    int64_t available; /* may be < 0 after a shrink, > capacity after legacy up */
    uint64_t held;     /* sum of lease weights */
    uint64_t fence;    /* last fence handed out (or bumped by revoke) */
    uint64_t grants;   /* leases granted since it was made or loaded (a counter for rates) */
    uint64_t waiting;  /* total weight queued */
    int64_t created_at_ms;
    uint32_t nwaiters;
    uint32_t dirty_at;      /* 1 + its index in eb->dirty while its row awaits the next commit */
    struct emb_req *qroot;  /* the waiters again, as a treap by place for positions */
    struct emb_limits *lim; /* tenants and a rate (emb_limits.c), or NULL: plain FIFO */
    uint64_t qremoved;      /* waiters that left the queue (positions behind them moved) */
    emb_est_t est;
    uint32_t ntickets; /* waiting tickets among its waiters */
    uint16_t name_len;
    uint8_t flags; /* EMB_SEM_* */
    char name[];
} emb_sem_t;

typedef struct emb_idem emb_idem_t;
struct emb_ticket;

/* A lease: one grant. */
/* What a lease on several semaphores or a tenant's lease has beside a plain lease: allocated
 * only for those, so the plain lease stays as small as it was (emb_lease_t.x).
 * A lease on several semaphores is its part on the first; each further part is a lease
 * object of its own in its semaphore's holders (not in eb->leases nor the heap: `main` names
 * the lease, which ends them all), chained from the lease by next_part. */
typedef struct emb_lease_x {
    struct emb_tenant *tenant;   /* whose units these are on a semaphore with tenants, or NULL */
    struct emb_lease *main;      /* a further part: the lease; NULL for the lease itself */
    struct emb_lease *next_part; /* the next part, or NULL */
} emb_lease_x_t;

typedef struct emb_lease {
    enode_t node; /* in eb->leases, keyed by id */
    eitem_t hi;   /* expiry */
    elist_t link; /* in sem->holders */
    emb_sem_t *sem;
    uint64_t weight, fence;
    int64_t ttl_ms, acquired_at_ms, expires_at_ms; /* wall clock ms */
    uint64_t acquired_mono;                        /* for the hold-time histogram */
    char *owner;                                   /* owned, may be NULL */
    char *principal;           /* the token that took it (semad --auth), owned, may be NULL */
    emb_idem_t *idem;          /* may be NULL */
    struct emb_req *pending;   /* the undelivered reply that owns it (its er->lease), or NULL */
    struct emb_ticket *ticket; /* the ticket it was granted to, or NULL */
    emb_lease_x_t *x;          /* a tenant's or on several semaphores, else NULL (owned) */
    char id[ENGINE_LEASE_ID_MAX];
    int mode; /* a keyed lock's ENGINE_MODE_*, as requested; 0 on a semaphore */
} emb_lease_t;

/* Its tenant, its lease (for a further part), its next part: NULL when it has none. */
static inline struct emb_tenant *emb__lease_tenant(const emb_lease_t *l)
{
    return l->x != NULL ? l->x->tenant : NULL;
}
static inline emb_lease_t *emb__lease_main(const emb_lease_t *l)
{
    return l->x != NULL ? l->x->main : NULL;
}
static inline emb_lease_t *emb__lease_next(const emb_lease_t *l)
{
    return l->x != NULL ? l->x->next_part : NULL;
}
/* l's emb_lease_x_t, made (zeroed) when it has none; NULL when out of memory. */
emb_lease_x_t *emb__lease_x(emb_lease_t *l);

enum { EMB_REQ_NEW, EMB_REQ_PARKED, EMB_REQ_READY, EMB_REQ_COMMIT, EMB_REQ_WATCH };
/* EMB_KIND_PART: the place in one semaphore's queue of a request on several (emb_multi_t). */
enum { EMB_KIND_ACQUIRE = 1, EMB_KIND_WAIT_IDLE = 2, EMB_KIND_TICKET = 3, EMB_KIND_PART = 4 };

/* An acquire's, a ticket's or a part's place in its tenant's own line (FIFO) on a semaphore
 * with limits (sem->lim), allocated while it waits there. */
typedef struct emb_tplace {
    elist_t link; /* in tenant->queue */
    struct emb_tenant *tenant;
    struct emb_req *er;
} emb_tplace_t;

/* The engine's side of one accepted request; also the parked waiter. */
typedef struct emb_req {
    elist_t link;      /* sem->waiters while parked; eb->ready / eb->commit_wait when done */
    eitem_t hi;        /* timeout while parked */
    engine_req_t *req; /* NULL for a ticket's place (EMB_KIND_TICKET) */
    emb_sem_t *sem;    /* while parked */
    struct emb_req *oleft, *oright; /* the queue's treap (emb_sem_t.qroot), by place */
    /* Its place: the arrival order across every semaphore (the parts of one request share
     * it; earlier waiters have lower ones), what breaks every cycle of waits between
     * semaphores; 0 while in no queue. */
    uint64_t oseq;
    uint64_t owsum;            /* weight of its treap subtree */
    emb_lease_t *lease;        /* a grant not yet delivered (for cancel) */
    emb_idem_t *idem;          /* idempotency entry naming this waiter */
    uint64_t weight;           /* 0 for wait-idle */
    uint64_t since_mono;       /* when it came (its wall clock time is derived from it) */
    struct emb_tplace *tplace; /* on a semaphore with limits: its place in its tenant's line */
    struct emb_multi *multi;   /* a request on several semaphores: its parts (on the request
                                  and on each part) */
    uint32_t osize;            /* waiters in its treap subtree */
    uint8_t state, kind, durable;
} emb_req_t;

/* A request on several semaphores: one place in each queue, granted all at once. */
typedef struct emb_multi {
    emb_req_t *main; /* the request (or a ticket's place) the parts belong to */
    uint32_t nparts;
    uint32_t nreserved; /* semaphores whose turn it holds (emb_limits_t.reserved) */
    emb_req_t part[];   /* kind EMB_KIND_PART, req the main's; parked in part[i].sem */
} emb_multi_t;

/* A semaphore's tenant: one that holds units or waits there (it goes when neither). */
typedef struct emb_tenant {
    enode_t node;  /* in eb->tenants, hash of (semaphore, name) */
    elist_t all;   /* in lim->tenants */
    elist_t ring;  /* in lim->ring while it waits */
    elist_t queue; /* its waiters here, FIFO (emb_tplace_t.link) */
    struct emb_sem *sem;
    uint64_t held;    /* units its leases hold here */
    uint64_t waiting; /* units its waiters ask for */
    int64_t deficit;  /* deficit round robin: units it may take before its turn passes */
    uint32_t nwaiters, nleases;
    uint16_t name_len; /* 0: the requests that named no tenant */
    char name[];
} emb_tenant_t;

/* What a semaphore has beyond plain FIFO: tenants served in turn (deficit round robin by
 * units, each tenant FIFO, none above tenant_max) and a token bucket (emb_limits.c). */
typedef struct emb_limits {
    struct emb_sem *sem;
    uint64_t tenant_max;             /* 0: no cap */
    uint64_t rate_per_s, rate_burst; /* 0: no rate */
    uint64_t tokens_n;               /* the bucket in billionths of a unit, as of tokens_ms */
    uint64_t tokens_ms;              /* loop time (ms) of that */
    eitem_t rate_hi;                 /* EITEM_RATE: when the head has its tokens */
    elist_t tenants;                 /* every tenant (emb_tenant_t.all) */
    elist_t ring;                    /* tenants with waiters, in turn order */
    emb_tenant_t *last;              /* the tenant served last by its turn, or NULL */
    emb_tenant_t *dflt;              /* the requests that named no tenant, or NULL */
    emb_req_t *reserved;             /* the part of a request on several semaphores that holds
                                        this one's turn (emb_limits.c), or NULL */
    uint32_t ntenants;
    uint32_t nidle;  /* wait-idles parked */
    uint32_t nmulti; /* parts of requests on several semaphores parked */
    uint8_t in_turn; /* `last` goes on while its deficit covers its next head */
} emb_limits_t;

/* An Idempotency-Key of one semaphore: names the live lease or the parked waiter. */
struct emb_idem {
    enode_t node; /* in eb->idems, hash of (sem, key) */
    emb_sem_t *sem;
    emb_lease_t *lease;
    emb_req_t *waiter;
    struct emb_ticket *ticket;
    size_t key_len;
    char key[];
};

/* A ticket: a place in a semaphore's queue that no connection holds, then its lease. */
enum { EMB_TICKET_WAITING = ENGINE_TICKET_WAITING, EMB_TICKET_GRANTED = ENGINE_TICKET_GRANTED };
typedef struct emb_ticket {
    enode_t node;     /* in eb->tickets, keyed by id */
    emb_req_t q;      /* its place in line while waiting (kind EMB_KIND_TICKET, req NULL) */
    eitem_t hi;       /* keepalive: dropped (or its grant released) when unread past it */
    elist_t watchers; /* long-polls and streams reading it (emb_req_t.link, EMB_REQ_WATCH) */
    elist_t watched;  /* in eb->watched while it has watchers */
    emb_sem_t *sem;
    emb_lease_t *lease; /* once granted */
    emb_idem_t *idem;   /* may be NULL */
    char *owner;        /* owned, may be NULL */
    char *principal;    /* the token that took it (semad --auth), owned, may be NULL */
    char *tenant;       /* owned, may be NULL */
    int64_t ttl_ms, keepalive_ms, created_at_ms;
    uint64_t seen_removed; /* sem->qremoved when its watchers' positions were last checked */
    uint8_t status;        /* EMB_TICKET_* */
    uint8_t collected;     /* a reply showed the grant: keepalive no longer applies */
    uint8_t multi;         /* taken for several semaphores (POST /v1/tickets) */
    char id[ENGINE_LEASE_ID_MAX];
} emb_ticket_t;

/* A tombstone: why a lease id (or a ticket id) ended. */
enum {
    EMB_TOMB_RELEASED = 1,
    EMB_TOMB_EXPIRED,
    EMB_TOMB_REVOKED,
    EMB_TOMB_DELETED,
    EMB_TOMB_TICKET_LEFT,        /* DELETE /v1/tickets/{id} */
    EMB_TOMB_TICKET_ABANDONED,   /* waiting, unread for keepalive_ms */
    EMB_TOMB_TICKET_UNCOLLECTED, /* granted, nobody came for the lease within keepalive_ms */
    EMB_TOMB_TICKET_DONE,        /* its lease ended */
    EMB_TOMB_TICKET_DELETED,     /* its semaphore was deleted */
    EMB_TOMB_TICKET_REFUSED,     /* it can no longer fit (resize), or no memory to grant it */
};
typedef struct {
    enode_t node;
    uint64_t ended_mono;
    int reason;
    char id[ENGINE_LEASE_ID_MAX];
} emb_tomb_t;

/* The thread that writes and syncs group commits off the loop (emb_store.c). */
typedef struct emb_committer emb_committer_t;

typedef struct emb emb_t;
typedef void (*emb_op_fn)(emb_t *eb, emb_req_t *er);

struct emb {
    uv_loop_t *loop;
    engine_t *front;      /* whose counters, ids and event fan-out this back end uses */
    engine_counters_t *m; /* the front's counters */
    engine_config_t cfg;
    store_t *store;
    int strict; /* the store is strict: every reply that rests on a change waits for it */
    etab_t sems, locks, leases, tombs, idems, tickets, tenants;
    elist_t watched; /* tickets with watchers (emb_ticket_t.watched) */
    eitem_t tick;    /* the next check of watched tickets' positions (EITEM_TICK) */
    uint64_t tickets_created, tickets_granted, tickets_left, tickets_abandoned, tickets_uncollected,
        ticket_updates;
    uint64_t nwatchers;   /* long-polls and streams parked on tickets now */
    emb_sem_t *root;      /* treap of eb->sems by name */
    emb_sem_t *lock_root; /* treap of eb->locks by key */
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
    uv_timer_t ck_timer;   /* a checkpoint once commits pause (emb_store.c) */
    uint64_t checkpoints, checkpoint_failures; /* the store's, read while no commit runs */
    ehist_t commit_s;                          /* how long each commit took to write and sync */
    emb_committer_t *committer;                /* NULL: commits run on the loop thread */
    emb_sem_t **dirty;     /* semaphores whose rows the next commit writes (NULL: gone) */
    uint64_t fence_stored; /* the fence floor the store has (or the next commit writes) */
    size_t ndirty, dirty_cap;
    int draining;
    int shutting_down;
    uint64_t gseq;   /* the last arrival handed out (emb_req_t.oseq) */
    int admitting;   /* admission runs: emb__admit queues the semaphore in adm */
    emb_sem_t **adm; /* semaphores whose admission waits for the running one */
    size_t nadm, adm_cap;
    int clearing; /* emb__state_clear runs: the treap is dropped whole */
    int handles_open;
    uint64_t fence_seq;
    uint64_t nparked;
    int64_t wall_off; /* wall clock minus monotonic clock, ms, as emb__wall_of keeps it */
    uint64_t commits, commit_failures;
    emb_tomb_t *tring; /* tombstones, a ring in one array, oldest first (emb_tomb.c) */
    size_t tring_cap, tring_head, tring_len;
    char errbuf[256];
};

/* emb.c */
uint64_t emb__now(emb_t *eb); /* monotonic ms */
int64_t emb__wall_ms(void);   /* Unix epoch ms */
/* The deadline on the loop's monotonic clock of a lease told it ends at wall + ttl_ms, the
 * wall clock just read: from the monotonic clock read now, not the loop's time (as old as
 * its turn), and one millisecond for what the clocks' truncation to milliseconds can lose,
 * so the lease never ends before the expires_at it was told. The loop's time itself is not
 * moved: every other rule of the turn (the rate's bucket) keeps one clock. */
uint64_t emb__lease_deadline(int64_t ttl_ms);
/* The wall clock time (Unix epoch ms) of monotonic time `mono`, by an offset kept until the
 * wall clock moves more than a second against the monotonic one: every view of one instant
 * (a waiter's `since` in a view, in a list item, in an event) says the same millisecond. */
int64_t emb__wall_of(emb_t *eb, uint64_t mono);
emb_sem_t *emb__sem_find(emb_t *eb, const char *name, size_t len);
emb_sem_t *emb__lock_find(emb_t *eb, const char *key, size_t len);
emb_sem_t *emb__sem_new(emb_t *eb, const char *name, size_t len, uint64_t capacity, int flags);
void emb__sem_free(emb_t *eb, emb_sem_t *s);
/* Grant who is next on s while they fit. Inside another admission it runs after that one
 * (emb__admit_hold/release bracket a change of several semaphores). */
void emb__admit(emb_t *eb, emb_sem_t *s);
int emb__admit_hold(emb_t *eb);
void emb__admit_release(emb_t *eb, int was);
/* The semaphores a parked request waits on: out has room for ENGINE_PARTS_MAX. */
size_t emb__req_sems(const emb_req_t *er, emb_sem_t **out);
/* Grant `er`, who is next on s and fits (its part of the bucket and turn already taken). */
void emb__admit_head(emb_t *eb, emb_sem_t *s, emb_req_t *er);
/* Complete `er` with `status` (its result, if any, is in er->req->res already). */
void emb__finish(emb_t *eb, emb_req_t *er, int status, const char *msg);
/* Complete `er` with message `id` (be_msg.h: its status and its text). */
void emb__fail(emb_t *eb, emb_req_t *er, be_msg_t id);
/* Complete `er` successfully with lease `l` as its result. */
void emb__finish_lease(emb_t *eb, emb_req_t *er, const emb_lease_t *l);
/* Complete `er` successfully with a view of `s` of result kind `kind` (SEM, LOCK, LEGACY,
 * IDLE). */
void emb__finish_view(emb_t *eb, emb_req_t *er, const emb_sem_t *s, engine_res_kind_t kind);
void emb__drain(emb_t *eb);
void emb__mark_dirty(emb_t *eb);
int emb__park(emb_t *eb, emb_req_t *er, emb_sem_t *s, int64_t timeout_ms);
void emb__unpark(emb_t *eb, emb_req_t *er);
void emb__maybe_free_lock(emb_t *eb, emb_sem_t *s);
/* Admission on each of `sems` (a request or lease on several), and free idle lock keys. */
static inline void emb__admit_all(emb_t *eb, emb_sem_t **sems, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        emb__admit(eb, sems[i]);
        emb__maybe_free_lock(eb, sems[i]);
    }
}
void emb__timer_rearm(emb_t *eb);
/* A retry `er` waits in old's place: old's timeout goes, er's own (timeout_ms > 0) comes. */
void emb__waiter_retimed(emb_t *eb, emb_req_t *er, emb_req_t *old, int64_t timeout_ms);
/* The semaphore's row changed: it is written once, as it is then, when the next commit
 * starts (so many grants on one semaphore in a commit write its row once). */
void emb__store_sem(emb_t *eb, emb_sem_t *s);
/* er's reply carries lease l: er owns it until delivered (a cancel releases it); a later
 * owner (an idempotent retry) takes it over. emb__lease_disown when the link must go. */
void emb__lease_own(emb_req_t *er, emb_lease_t *l);
void emb__lease_disown(emb_req_t *er);
/* Record the rows of every changed semaphore (when a commit starts), or of one now. */
void emb__store_sems_flush(emb_t *eb);
void emb__store_sem_now(emb_t *eb, emb_sem_t *s);
uint64_t emb__idem_hash(const emb_sem_t *s, const char *key, size_t len);
emb_idem_t *emb__idem_find(emb_t *eb, const emb_sem_t *s, const char *key, size_t len);
/* The record of req's Idempotency-Key on `s` in *out (NULL: no key, or a new one). Returns
 * SEMA_EACCES when it names a request of another token (emb_ops.c). */
int emb__idem_of(emb_t *eb, const engine_req_t *req, const emb_sem_t *s, emb_idem_t **out);
emb_idem_t *emb__idem_new(emb_t *eb, emb_sem_t *s, const char *key, size_t len);
void emb__idem_free(emb_t *eb, emb_idem_t *d);
/* The semaphores by name (eb->root), and the lock keys (eb->lock_root): `s` goes in, or
 * out of, the one its flags say. */
void emb__treap_insert(emb_t *eb, emb_sem_t *s);
void emb__treap_remove(emb_t *eb, emb_sem_t *s);
/* In the treap `root`: the first name after `key` (or equal to it, when `inclusive`). */
emb_sem_t *emb__treap_after(emb_sem_t *root, const char *key, size_t len, int inclusive);

/* The lock mode a request asks for: ENGINE_MODE_* for a keyed lock, 0 for a semaphore. The
 * mode is kept apart from the weight: with --lock-readers 1 both modes weigh 1. */
static inline int emb__req_mode(const engine_req_t *req)
{
    return req->op == ENGINE_LOCK_ACQUIRE ? req->mode : 0;
}

/* emb_lease.c */
/* The node of table t whose id (a NUL-terminated string `off` bytes after the node) is
 * id[0..len), or NULL. */
enode_t *emb__id_find(const etab_t *t, size_t off, const char *id, size_t len);
emb_lease_t *emb__lease_find(emb_t *eb, const char *id, size_t len);
emb_lease_t *emb__grant(emb_t *eb, emb_sem_t *s, const engine_req_t *req, uint64_t weight,
                        uint64_t since_mono);
/* The name of a request's tenant as a grant must record it (a ticket's, a part's request's). */
const char *emb__req_tenant(const emb_req_t *er);
/* 1 if `req` may renew or release lease `l`: without --auth, by the token that took it, or
 * by a token with the admin right. */
int emb__lease_allowed(const engine_req_t *req, const emb_lease_t *l);
/* With --auth, a parked request and a ticket are their token's too: only it (or an admin)
 * may take them over, read, watch or delete them. 1 when `req` may. */
int emb__waiter_allowed(const engine_req_t *req, const engine_req_t *parked);
int emb__ticket_allowed(const engine_req_t *req, const emb_ticket_t *t);
/* End a lease (all its parts): its units go back; the caller runs admission. */
void emb__lease_end(emb_t *eb, emb_lease_t *l, int reason);
/* The same, then admission on every semaphore it held. */
void emb__lease_end_admit(emb_t *eb, emb_lease_t *l, int reason);
/* The semaphores of a lease (its parts'): out has room for ENGINE_PARTS_MAX. */
static inline size_t emb__lease_sems(const emb_lease_t *l, emb_sem_t **out)
{
    size_t n = 0;

    for (const emb_lease_t *p = l; p != NULL && n < ENGINE_PARTS_MAX; p = emb__lease_next(p))
        out[n++] = p->sem;
    return n;
}
/* A lease on several semaphores: the lease on sems[0] with weights[0], a part on each other;
 * written ahead once, "granted" on each. NULL (nothing taken) when out of memory. */
emb_lease_t *emb__grant_multi(emb_t *eb, emb_sem_t **sems, const uint64_t *weights, size_t n,
                              const engine_req_t *req, const char *tenant, uint64_t since_mono);
void emb__lease_free(emb_t *eb, emb_lease_t *l);
void emb__lease_expire_due(emb_t *eb, emb_lease_t *l);
void emb__store_lease(emb_t *eb, const emb_lease_t *l, int created);
int emb__lease_load(emb_t *eb, emb_sem_t *s, const store_lease_t *rec);

/* emb_view.c: a result's typed views of the state (strings copied into the result) */
void emb__view_lease(engine_lease_t *v, const emb_lease_t *l);
int emb__view_sem(emb_t *eb, engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s,
                  int lists);
/* A list's item of `s`: its view and its counts. 0, or -1 when out of memory. */
int emb__view_item(emb_t *eb, engine_result_t *r, engine_list_item_t *it, const emb_sem_t *s);
/* The lease's tenant and parts (a lease on several semaphores, or `multi`: the reply to a
 * request on several, one of them perhaps) copied into the result. */
int emb__view_lease_parts(engine_result_t *r, engine_lease_t *v, const emb_lease_t *l, int multi);
/* An event of a lease (granted, released, expired, revoked) or of a semaphore. */
void emb__event_lease(emb_t *eb, const emb_sem_t *s, const char *type, const emb_lease_t *l);
void emb__event_sem(emb_t *eb, const emb_sem_t *s, const char *type, uint64_t capacity);
/* A waiter's event on each semaphore it waits on: "queued" once it is parked, "left" just
 * before it is unparked without a grant (the counts said are the queue's after it). */
void emb__event_waiter(emb_t *eb, const emb_req_t *er, const char *type);

/* emb_metrics.c */
int emb__metrics(void *be, struct strbuf *out);

/* emb_store.c */
int emb__store_load(emb_t *eb, char *errbuf, size_t errlen);
void emb__commit_cb(uv_check_t *h);
/* Start the committer thread: 0, or a SEMA_E* code (commits then run on the loop thread);
 * either way when eb->committer is set its uv handle is open. */
int emb__committer_start(emb_t *eb);
void emb__committer_free(emb_t *eb);
int emb__committer_handles(const emb_t *eb);
/* the libuv handles it closes at the end */ /* after its handle closed */
/* Wait for the running commit, commit what is recorded, deliver, and stop the thread; its
 * uv handle is closed with `on_closed`. */
void emb__commit_flush(emb_t *eb, uv_close_cb on_closed);
void emb__state_clear(emb_t *eb, elist_t *keep_waiters);

/* emb_treap.c: the queue's order statistics */
void emb__oq_insert(emb_sem_t *s, emb_req_t *er); /* er->oseq set: its place */
void emb__oq_remove(emb_sem_t *s, emb_req_t *er);
/* Waiters ahead of er and their total weight: O(log n). */
void emb__oq_rank(const emb_sem_t *s, const emb_req_t *er, uint64_t *ahead, uint64_t *ahead_weight);

/* emb_ticket.c */
void emb__op_ticket_create(emb_t *eb, emb_req_t *er);
void emb__op_ticket_get(emb_t *eb, emb_req_t *er);
void emb__op_ticket_delete(emb_t *eb, emb_req_t *er);
void emb__ticket_grant(emb_t *eb, emb_ticket_t *t); /* its turn: the head fits */
/* Its turn on each of several semaphores: the lease on all of them. */
void emb__ticket_grant_multi(emb_t *eb, emb_ticket_t *t, emb_sem_t **sems, const uint64_t *w,
                             size_t n);
void emb__ticket_refuse(emb_t *eb, emb_ticket_t *t, int reason);     /* a waiting ticket must go */
void emb__ticket_lease_gone(emb_t *eb, emb_ticket_t *t, int reason); /* its lease ended */
void emb__ticket_due(emb_t *eb, emb_ticket_t *t);                    /* keepalive passed */
void emb__ticket_tick(emb_t *eb); /* position updates to watchers */
void emb__ticket_watch_timeout(emb_t *eb, emb_req_t *er);
void emb__ticket_watch_cancel(emb_t *eb, emb_req_t *er);
void emb__tickets_clear(emb_t *eb, be_msg_t why); /* free all, fail watchers */
void emb__tickets_fail_watchers(emb_t *eb, be_msg_t why);
void emb__est_queue_grant(emb_t *eb, emb_sem_t *s, uint64_t weight, int queue_left);
void emb__est_hold(emb_sem_t *s, uint64_t held_ms);
int emb__ticket_load(emb_t *eb, const store_ticket_t *rec);

/* emb_tomb.c: why an id ended, for the most recent ids */
emb_tomb_t *emb__tomb_find(emb_t *eb, const char *id, size_t len);
be_msg_t emb__tomb_msg(int reason); /* what a request meets at a tombstone */
void emb__tomb_add(emb_t *eb, const char *id, int reason);
void emb__tombs_clear(emb_t *eb);

/* emb_ops.c */
extern const emb_op_fn emb__ops[ENGINE_OP_COUNT];

/* emb_limits.c: tenants, the round robin, the token bucket, admission with them */
int emb__lim_ensure(emb_t *eb, emb_sem_t *s);
void emb__lim_free(emb_t *eb, emb_sem_t *s);
void emb__lim_clear(emb_t *eb, emb_sem_t *s); /* the semaphore goes: its tenants too */
void emb__lim_get(const emb_sem_t *s, uint64_t *tenant_max, uint64_t *rate, uint64_t *burst);
/* What `req` (a PUT or a resize) asks the limits of s to become, in *tm, *rate, *burst,
 * from what they are: BE_MSG_NONE, or why they cannot be. */
be_msg_t emb__lim_wanted(const emb_sem_t *s, const engine_req_t *req, uint64_t *tm, uint64_t *rate,
                         uint64_t *burst);
int emb__lim_set(emb_t *eb, emb_sem_t *s, uint64_t tm, uint64_t rate, uint64_t burst);
void emb__lim_loaded(emb_t *eb, emb_sem_t *s);
/* Why weight w can never be granted on s (above tenant_max or the bucket), or BE_MSG_NONE. */
be_msg_t emb__lim_too_heavy(const emb_sem_t *s, uint64_t w);
int emb__tenant_join(emb_t *eb, emb_sem_t *s, emb_req_t *er);
void emb__tenant_leave(emb_t *eb, emb_sem_t *s, emb_req_t *er);
int emb__tenant_hold(emb_t *eb, emb_sem_t *s, emb_lease_t *l, const char *name);
void emb__tenant_unhold(emb_t *eb, emb_lease_t *l);
const char *emb__tenant_name(const emb_tenant_t *t, size_t *len);
uint64_t emb__tokens(emb_t *eb, const emb_sem_t *s);
void emb__rate_due(emb_t *eb, emb_limits_t *lim);
int emb__multi_ready(const emb_multi_t *m);
emb_req_t *emb__designate(emb_t *eb, emb_sem_t *s);
int emb__fits(emb_t *eb, emb_sem_t *s, uint64_t w);
void emb__take(emb_t *eb, emb_sem_t *s, emb_req_t *h);
void emb__admit_lim(emb_t *eb, emb_sem_t *s);
int emb__view_tenants(engine_result_t *r, engine_sem_view_t *v, const emb_sem_t *s);

/* emb_multi.c: requests on several semaphores */
void emb__op_acquire_multi(emb_t *eb, emb_req_t *er);
/* Grant the request if it is next and fits on every semaphore: 1 when it left the lines
 * (granted, or failed for memory), 0 when it waits. */
int emb__multi_try(emb_t *eb, emb_multi_t *m);
void emb__multi_unpark(emb_t *eb, emb_req_t *main);
/* Build the parts of a request on `parts` (each semaphore found, each weight possible);
 * NULL with why in *why. */
emb_multi_t *emb__multi_new(emb_t *eb, emb_req_t *main, const engine_part_t *parts, size_t n,
                            be_msg_t *why);
/* Park every part (on semaphores made to have limits when the request names a tenant);
 * 0, or an error with nothing parked. */
int emb__multi_park(emb_t *eb, emb_multi_t *m);
void emb__multi_free(emb_multi_t *m);

#endif /* SEMAD_EMB_INTERNAL_H */
