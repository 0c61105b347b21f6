/* SPDX-License-Identifier: MIT */
/* engine_internal.h - the in-memory engine's private structures, shared by engine_*.c. */
#ifndef SEMAD_ENGINE_INTERNAL_H
#define SEMAD_ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "internal.h"
#include "store/store.h"

#define ENGINE__CONTAINER(ptr, type, field) ((type *)(void *)((char *)(ptr)-offsetof(type, field)))

/* ---- intrusive circular doubly linked list (O(1) insert/remove) ---- */
typedef struct elist {
    struct elist *prev, *next;
} elist_t;

static inline void elist_init(elist_t *l)
{
    l->prev = l->next = l;
}
static inline int elist_empty(const elist_t *l)
{
    return l->next == l;
}
static inline void elist_push_back(elist_t *head, elist_t *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}
static inline void elist_remove(elist_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* Move every element of `from` to the end of `to`; `from` becomes empty. */
static inline void elist_splice(elist_t *to, elist_t *from)
{
    if (elist_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    elist_init(from);
}

/* ---- intrusive chained hash table ---- */
typedef struct enode {
    struct enode *next;
    uint64_t hash;
} enode_t;

typedef struct {
    enode_t **slots;
    size_t mask; /* slots - 1 (power of two) */
    size_t count;
} etab_t;

typedef int (*etab_eq_fn)(const enode_t *n, const void *key, size_t len);

uint64_t engine__hash(const void *data, size_t len, uint64_t seed);
int engine__tab_init(etab_t *t, size_t nslots);
void engine__tab_destroy(etab_t *t);
enode_t *engine__tab_find(const etab_t *t, uint64_t hash, etab_eq_fn eq, const void *key,
                          size_t len);
void engine__tab_insert(etab_t *t, enode_t *n); /* grows when it can; never fails */
void engine__tab_remove(etab_t *t, enode_t *n);
/* Iterate: call fn for every node; fn may remove the node it is given. */
void engine__tab_each(etab_t *t, void (*fn)(void *arg, enode_t *n), void *arg);

/* ---- min-heap of deadlines (lease expiry and waiter timeouts) under one uv_timer ---- */
enum { EHEAP_NONE = UINT32_MAX };
typedef struct {
    uint64_t deadline; /* uv_now() milliseconds (monotonic) */
    uint32_t idx;      /* position in the heap or EHEAP_NONE */
    uint8_t kind;      /* EITEM_LEASE or EITEM_WAITER */
} eitem_t;
enum { EITEM_LEASE = 1, EITEM_WAITER = 2 };

typedef struct {
    eitem_t **a;
    uint32_t n, cap;
} eheap_t;

int engine__heap_push(eheap_t *h, eitem_t *it); /* 0 or SEMA_ENOMEM */
void engine__heap_remove(eheap_t *h, eitem_t *it);
void engine__heap_update(eheap_t *h, eitem_t *it, uint64_t deadline);
static inline eitem_t *engine__heap_top(const eheap_t *h)
{
    return h->n ? h->a[0] : NULL;
}

/* ---- the objects ---- */
enum { ESEM_LEGACY = 1, ESEM_LOCK = 2, ESEM_DELETED = 4 };

struct esub_group;

/* A semaphore (or a keyed lock's ephemeral semaphore). About 128 bytes plus its name. */
typedef struct esem {
    enode_t node;            /* in e->sems (or e->locks), keyed by name */
    struct esem *tl, *tr;    /* name-ordered treap (priority = node.hash); not for locks */
    elist_t waiters;         /* ereq_t.link, FIFO */
    elist_t holders;         /* elease_t.link, grant order */
    struct esub_group *subs; /* event subscribers, or NULL */
    uint64_t capacity;
    int64_t available; /* may be < 0 after a shrink, > capacity after legacy up */
    uint64_t held;     /* sum of lease weights */
    uint64_t fence;    /* last fence handed out (or bumped by revoke) */
    uint64_t waiting;  /* total weight queued */
    int64_t created_at_ms;
    uint32_t nwaiters;
    uint32_t dirty_at; /* 1 + its index in e->dirty while its row awaits the next commit */
    uint16_t name_len;
    uint8_t flags; /* ESEM_* */
    char name[];
} esem_t;

typedef struct eidem eidem_t;
struct ereq;

/* A lease: one grant. */
typedef struct elease {
    enode_t node; /* in e->leases, keyed by id */
    eitem_t hi;   /* expiry */
    elist_t link; /* in sem->holders */
    esem_t *sem;
    uint64_t weight, fence;
    int64_t ttl_ms, acquired_at_ms, expires_at_ms; /* wall clock ms */
    uint64_t acquired_mono;                        /* for the hold-time histogram */
    char *owner;                                   /* owned, may be NULL */
    eidem_t *idem;                                 /* may be NULL */
    struct ereq *pending; /* the undelivered reply that owns it (its er->lease), or NULL */
    char id[28];
} elease_t;

enum { EREQ_NEW, EREQ_PARKED, EREQ_READY, EREQ_COMMIT };
enum { EKIND_ACQUIRE = 1, EKIND_WAIT_IDLE = 2 };

/* The engine's side of one accepted request; also the parked waiter. */
typedef struct ereq {
    elist_t link; /* sem->waiters while parked; e->ready / e->commit_wait when done */
    eitem_t hi;   /* timeout while parked */
    engine_req_t *req;
    esem_t *sem;     /* while parked */
    elease_t *lease; /* a grant not yet delivered (for cancel) */
    eidem_t *idem;   /* idempotency entry naming this waiter */
    uint64_t weight; /* 0 for wait-idle */
    int64_t since_ms;
    uint64_t since_mono;
    uint8_t state, kind, durable;
} ereq_t;

/* An Idempotency-Key of one semaphore: names the live lease or the parked waiter. */
struct eidem {
    enode_t node; /* in e->idems, hash of (sem, key) */
    esem_t *sem;
    elease_t *lease;
    ereq_t *waiter;
    size_t key_len;
    char key[];
};

/* A tombstone: why a lease id ended. */
enum { ETOMB_RELEASED = 1, ETOMB_EXPIRED, ETOMB_REVOKED, ETOMB_DELETED };
typedef struct {
    enode_t node;
    uint64_t ended_mono;
    int reason;
    char id[28];
} etomb_t;

/* Subscribers of one semaphore name. When the last one leaves, the group stays (idle) for
 * ENGINE_EVENTS_RETAIN_MS, still recording events, so a subscriber that reconnects with
 * Last-Event-ID gets what it missed. */
typedef struct esub_group {
    enode_t node; /* in e->subgroups, keyed by name */
    elist_t subs;
    elist_t idle_link;   /* in e->idle_groups while idle */
    uint64_t idle_since; /* engine__now() when it went idle */
    int idle;            /* in e->idle_groups: no subscriber and no queued event */
    uint64_t uid;        /* names the group in event ids: "<uid>-<seq>" */
    uint64_t seq;        /* the last event's number */
    uint32_t refs;       /* subs + queued events */
    int attached;        /* in e->subgroups (the semaphore exists) */
    size_t name_len;
    char name[];
} esub_group_t;

struct engine_sub {
    elist_t link;
    esub_group_t *grp;
    engine_event_cb cb;
    void *arg;
    uint64_t seen; /* the last event number this subscriber got (replayed ones included) */
    int finished;
};

typedef struct {
    elist_t link;
    esub_group_t *grp;
    uint64_t seq;
    const char *type;
    json_t *data;
} eevent_t;

/* The engine's most recent events, for replay: a ring of ENGINE_EVENTS_RECENT. */
typedef struct {
    uint64_t uid, seq;
    const char *type;
    json_t *data;
} erecent_t;

#define ENGINE_HIST_BUCKETS 12
typedef struct {
    uint64_t counts[ENGINE_HIST_BUCKETS + 1]; /* last = +Inf */
    double sum;
    uint64_t n;
} ehist_t;

typedef struct {
    uint64_t grants, releases, expirations, timeouts, cancellations, revocations;
    uint64_t ops[ENGINE_OP_COUNT];
    uint64_t commits, commit_failures;
    ehist_t wait_s, hold_s;
} emetrics_t;

/* The thread that writes and syncs group commits off the loop (engine_store.c). */
typedef struct ecommitter ecommitter_t;

struct engine {
    uv_loop_t *loop;
    engine_config_t cfg;
    store_t *store;
    etab_t sems, locks, leases, tombs, idems, subgroups;
    esem_t *root; /* treap of e->sems by name */
    eheap_t heap;
    uv_timer_t timer;
    uint64_t timer_due; /* deadline the timer is armed for, or UINT64_MAX */
    uv_check_t check;
    uv_idle_t idle;
    int commit_armed;
    elist_t ready;           /* completions to deliver now */
    elist_t commit_wait;     /* completions waiting for the next group commit */
    elist_t commit_fly;      /* completions whose mutations the running commit carries */
    int committing;          /* a commit runs (on the committer thread, or inline) */
    ecommitter_t *committer; /* NULL: commits run on the loop thread */
    esem_t **dirty;          /* semaphores whose rows the next commit writes (NULL: gone) */
    uint64_t fence_stored;   /* the fence floor the store has (or the next commit writes) */
    size_t ndirty, dirty_cap;
    elist_t events;      /* eevent_t to deliver */
    elist_t idle_groups; /* esub_group_t with no subscriber, oldest first */
    size_t nidle_groups;
    uint64_t group_uid; /* the last group's uid (random start: ids differ across runs) */
    erecent_t *recent;  /* ring of recent events (allocated at the first one) */
    size_t recent_head, recent_len;
    int draining;
    int shutting_down;
    int clearing; /* engine__state_clear runs: the treap is dropped whole */
    int handles_open;
    uint64_t fence_seq;
    uint64_t nparked, nsubs;
    etomb_t **tring; /* tombstones, oldest first (ring) */
    size_t tring_cap, tring_head, tring_len;
    uint8_t rnd[512];
    size_t rnd_pos;
    emetrics_t m;
    char errbuf[256];
};

/* engine_mem.c */
uint64_t engine__now(engine_t *e); /* monotonic ms */
void engine__random(engine_t *e, uint8_t *out, size_t n);
int64_t engine__wall_ms(void); /* Unix epoch ms */
esem_t *engine__sem_find(engine_t *e, const char *name, size_t len);
esem_t *engine__lock_find(engine_t *e, const char *key, size_t len);
esem_t *engine__sem_new(engine_t *e, const char *name, size_t len, uint64_t capacity, int flags);
void engine__sem_free(engine_t *e, esem_t *s);
void engine__admit(engine_t *e, esem_t *s);
void engine__finish(engine_t *e, ereq_t *er, int status, json_t *result, const char *msg);
/* Complete `er` successfully with lease `l` as its result: as text when the caller asked
 * for it (engine_req_t.want_text) and the lease allows, else as JSON. */
void engine__finish_lease(engine_t *e, ereq_t *er, const elease_t *l);
void engine__drain(engine_t *e);
void engine__mark_dirty(engine_t *e);
int engine__park(engine_t *e, ereq_t *er, esem_t *s, int64_t timeout_ms);
void engine__unpark(engine_t *e, ereq_t *er);
void engine__maybe_free_lock(engine_t *e, esem_t *s);
void engine__timer_rearm(engine_t *e);
/* The semaphore's row changed: it is written once, as it is then, when the next commit
 * starts (so many grants on one semaphore in a commit write its row once). */
void engine__store_sem(engine_t *e, esem_t *s);
/* er's reply carries lease l: er owns it until delivered (a cancel releases it); a later
 * owner (an idempotent retry) takes it over. engine__lease_disown when the link must go. */
void engine__lease_own(ereq_t *er, elease_t *l);
void engine__lease_disown(ereq_t *er);
/* Record the rows of every changed semaphore (when a commit starts), or of one now. */
void engine__store_sems_flush(engine_t *e);
void engine__store_sem_now(engine_t *e, esem_t *s);
uint64_t engine__idem_hash(const esem_t *s, const char *key, size_t len);
eidem_t *engine__idem_find(engine_t *e, const esem_t *s, const char *key, size_t len);
eidem_t *engine__idem_new(engine_t *e, esem_t *s, const char *key, size_t len);
void engine__idem_free(engine_t *e, eidem_t *d);
void engine__treap_insert(engine_t *e, esem_t *s);
void engine__treap_remove(engine_t *e, esem_t *s);
esem_t *engine__treap_after(engine_t *e, const char *key, size_t len, int inclusive);

/* engine_lease.c */
elease_t *engine__lease_find(engine_t *e, const char *id, size_t len);
etomb_t *engine__tomb_find(engine_t *e, const char *id, size_t len);
int engine__tomb_status(int reason);
elease_t *engine__grant(engine_t *e, esem_t *s, uint64_t weight, int64_t ttl_ms, const char *owner,
                        const char *idem_key, uint64_t since_mono);
void engine__lease_end(engine_t *e, elease_t *l, int reason);
void engine__lease_free(engine_t *e, elease_t *l);
void engine__lease_expire_due(engine_t *e, elease_t *l);
void engine__store_lease(engine_t *e, const elease_t *l);
void engine__tombs_clear(engine_t *e);
int engine__lease_load(engine_t *e, esem_t *s, const store_lease_t *rec);

/* engine_json.c */
json_t *engine__json_lease(const engine_t *e, const elease_t *l);
/* The lease as the JSON text engine__json_lease() would serialise to, in memory from
 * sema__malloc (*len bytes plus a NUL), or NULL when it needs the JSON form (bytes that need
 * escaping or validation, or out of memory). */
char *engine__text_lease(const elease_t *l, size_t *len);
json_t *engine__json_state(const engine_t *e, const esem_t *s);
json_t *engine__json_lock(const engine_t *e, const esem_t *s);
json_t *engine__json_legacy(const esem_t *s);
json_t *engine__json_list_item(const esem_t *s);

/* engine_metrics.c */
void engine__hist_observe(ehist_t *h, double seconds);
void engine__event(engine_t *e, esem_t *s, const char *type, json_t *data);
void engine__event_lease(engine_t *e, esem_t *s, const char *type, const elease_t *l);
void engine__events_deliver(engine_t *e);
void engine__subs_free_all(engine_t *e);
void engine__subs_reattach(engine_t *e);

/* engine_store.c */
int engine__store_load(engine_t *e, char *errbuf, size_t errlen);
void engine__commit_cb(uv_check_t *h);
/* Start the committer thread: 0, or a SEMA_E* code (commits then run on the loop thread);
 * either way when e->committer is set its uv handle is open. */
int engine__committer_start(engine_t *e);
void engine__committer_free(engine_t *e); /* after its handle closed */
/* Wait for the running commit, commit what is recorded, deliver, and stop the thread; its
 * uv handle is closed with `on_closed`. */
void engine__commit_flush(engine_t *e, uv_close_cb on_closed);
void engine__state_clear(engine_t *e, elist_t *keep_waiters);

/* engine_ops.c */
typedef void (*engine_op_fn)(engine_t *e, ereq_t *er);
extern const engine_op_fn engine__ops[ENGINE_OP_COUNT];

#endif /* SEMAD_ENGINE_INTERNAL_H */
