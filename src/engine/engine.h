/* SPDX-License-Identifier: MIT */
/* engine.h - semad's engine: every semaphore, lease, waiter and timer, behind an
 * asynchronous interface. The HTTP layer (routes_*.c) only talks to this.
 *
 * The engine is a front over a back end. The front (engine/front.c, events.c, metrics.c)
 * owns what every back end shares: the limits and the one check of a request's inputs, lease
 * ids, op counters and latency histograms, and the event fan-out with its resume ring. The
 * back end (engine/backend.h: the table of functions it implements) owns the state: the
 * embedded one (backends/embedded/) with its SQLite store, or Redis (backends/redis/). See
 * docs/architecture.md.
 *
 * Threading: everything runs on the one libuv loop given to engine_new(); no locks.
 *
 * Completion rule: engine_submit() either returns a negative code (the callback is never
 * called) or returns 0 and calls req->cb exactly once, later or before engine_submit()
 * returns (a request that fails its input checks, or that the embedded back end answers
 * without a durable store, completes at once). A durable store defers every completion that
 * mutated state until its group commit. */
#ifndef SEMAD_ENGINE_H
#define SEMAD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "sema/error.h"

typedef struct engine engine_t;
typedef struct engine_req engine_req_t;
typedef struct engine_sub engine_sub_t;
struct store;  /* store.h */
struct strbuf; /* common/strbuf.h */

/* The operations; the comment gives the inputs used and the success result (req->res, a
 * typed value: see engine_result_t; render.c writes it in the wire format of
 * docs/http-api.md). Timestamps in results are Unix epoch milliseconds (server wall clock);
 * deadlines and timers inside the engine use the monotonic clock (uv_now/uv_hrtime). */
typedef enum {
    ENGINE_SEM_PUT,       /* name, capacity, limits -> SEM; created=1 if new, 0 if identical;
                             SEMA_EEXIST if it exists with another capacity or limits */
    ENGINE_SEM_RESIZE,    /* name, capacity (0: unchanged), limits -> SEM */
    ENGINE_SEM_GET,       /* name -> SEM (with holders and waiters) */
    ENGINE_SEM_DELETE,    /* name -> NONE; parked waiters fail SEMA_ECANCELED, leases void */
    ENGINE_SEM_LIST,      /* prefix, limit, cursor -> LIST */
    ENGINE_ACQUIRE,       /* name, weight, timeout_ms, ttl_ms, owner, idem_key, tenant -> LEASE */
    ENGINE_WAIT_IDLE,     /* name, timeout_ms -> IDLE */
    ENGINE_LEASE_GET,     /* id -> LEASE */
    ENGINE_LEASE_RENEW,   /* id, ttl_ms -> LEASE */
    ENGINE_LEASE_RELEASE, /* id -> NONE */
    ENGINE_LEASE_REVOKE,  /* id -> NONE (units back, fence bumped) */
    ENGINE_LOCK_ACQUIRE,  /* name = key, mode, timeout_ms, ttl_ms, owner, idem_key -> LEASE
                             (with its mode) */
    ENGINE_LOCK_GET,      /* name = key -> LOCK, or SEMA_ENOENT when nobody holds or awaits it */
    ENGINE_LEGACY_CREATE, /* name, capacity = value -> LEGACY; SEMA_EEXIST */
    ENGINE_LEGACY_DELETE, /* name -> NONE */
    ENGINE_LEGACY_VALUE,  /* name -> LEGACY */
    ENGINE_LEGACY_UP,     /* name -> LEGACY */
    ENGINE_LEGACY_DOWN,   /* name -> LEGACY; SEMA_EBUSY when the value is 0 */
    /* Tickets: a place in a semaphore's FIFO queue that does not hold a connection open.
     * A back end may not serve them (engine_backend_t.tickets): then SEMA_ENOTSUP. */
    ENGINE_TICKET_CREATE, /* name, weight (or parts, name NULL: several semaphores), tenant,
                             ttl_ms, owner, idem_key, keepalive_ms -> TICKET (created=1 if
                             new, 0 for a retry with its Idempotency-Key) */
    ENGINE_TICKET_GET,    /* id (the ticket's), timeout_ms (0: now; > 0: wait up to that long
                             until its state differs from `seen`, or from the state at
                             arrival when seen is 0) -> TICKET; SEMA_EGONE once ended */
    ENGINE_TICKET_DELETE, /* id -> NONE (leaves the line; a granted ticket's
                             lease is released) */
    ENGINE_LOCK_LIST,     /* prefix, limit, cursor -> LOCK_LIST: the keys held or awaited */
    /* Several semaphores at once: all or nothing (engine_backend_t.multi). */
    ENGINE_ACQUIRE_MULTI, /* parts, timeout_ms, ttl_ms, owner, idem_key, tenant -> LEASE
                             (with its parts: one lease, a fence per semaphore) */
    ENGINE_METRICS,       /* text -> NONE: the engine's Prometheus metrics appended to text (a
                             back end that reads some from its store answers once it has) */
    ENGINE_EVENTS_OPEN,   /* name, id (a client's Last-Event-ID, may be NULL) -> NONE, or
                             SEMA_ENOENT: what a subscription to the semaphore's events needs
                             is ready; engine_subscribe and engine_sub_resume take it from
                             inside the callback (neither then waits for a store) */
    ENGINE_OP_COUNT
} engine_op_t;

enum { ENGINE_MODE_SHARED = 1, ENGINE_MODE_EXCLUSIVE = 2 };

/* engine_req_t.limits: which of a semaphore's limits a PUT or a resize sets. */
enum { ENGINE_LIMIT_TENANT_MAX = 1, ENGINE_LIMIT_RATE = 2, ENGINE_LIMIT_BURST = 4 };

/* ---- typed results ---- */

enum { ENGINE_LEASE_ID_MAX = 28 }; /* bytes of a lease id with its NUL */

/* One semaphore of a request or a lease on several: its name (name_len bytes; a request's
 * is NUL-terminated), its weight, and a lease's fence on it. */
typedef struct {
    const char *name;
    size_t name_len;
    uint64_t weight;
    uint64_t fence; /* a lease's; 0 in a request */
} engine_part_t;

/* A lease: the result of a grant, and a holder in a semaphore's view. A lease on several
 * semaphores (ENGINE_ACQUIRE_MULTI) has nparts > 0 and its parts in `parts` (name, weight
 * and fence describe parts[0] then); a holder in a view shows the part of its semaphore. */
typedef struct {
    char id[ENGINE_LEASE_ID_MAX];
    uint8_t mode;     /* 0 for a semaphore's lease, ENGINE_MODE_* for a lock's */
    uint8_t multi;    /* a holder in a view: its lease is on several semaphores */
    uint16_t nparts;  /* a lease on several semaphores: its parts (in the result), else 0 */
    const char *name; /* the semaphore's name or the lock's key (name_len bytes) */
    size_t name_len;
    const char *owner;  /* NUL-terminated, or NULL */
    const char *tenant; /* NUL-terminated, or NULL */
    uint64_t weight, fence;
    int64_t ttl_ms, acquired_at_ms, expires_at_ms;
    const engine_part_t *parts;
} engine_lease_t;

/* A parked request in a semaphore's view; its position is its index (0 = head). */
typedef struct {
    const char *owner;  /* NUL-terminated, or NULL */
    const char *tenant; /* NUL-terminated, or NULL */
    uint64_t weight;
    int64_t since_ms;
    int mode;      /* as in engine_lease_t */
    int wait_idle; /* a wait-idle, not an acquire */
    int ticket;    /* a ticket, not a request holding a connection */
    int multi;     /* a request on several semaphores (this is its part here) */
} engine_waiter_t;

/* A tenant of a semaphore (one that holds or waits there): name NULL for the requests that
 * named none. */
typedef struct {
    const char *name;
    size_t name_len;
    uint64_t held;           /* units its leases hold */
    uint64_t waiting;        /* its parked requests */
    uint64_t waiting_weight; /* and the units they ask for */
} engine_tenant_t;

/* A semaphore's limits and tenants in its view (engine_sem_view_t.limits). */
typedef struct {
    uint64_t tenant_max;             /* the most one tenant may hold, 0: no cap */
    uint64_t rate_per_s, rate_burst; /* units granted per second and the bucket; 0: none */
    uint64_t tokens;                 /* units the bucket holds now (whole) */
    size_t ntenants;
    engine_tenant_t *tenants; /* SEM with lists, when requests named tenants (by name) */
} engine_sem_limits_t;

enum { ENGINE_TICKET_WAITING = 1, ENGINE_TICKET_GRANTED = 2 };

/* A ticket. While waiting: its place and estimate; once granted: the lease (in the
 * result's `lease`). */
typedef struct {
    char id[ENGINE_LEASE_ID_MAX];
    uint8_t status;    /* ENGINE_TICKET_* */
    uint8_t estimated; /* waiting: p50_ms and p90_ms are set */
    uint16_t nparts;   /* 0 on one semaphore */
    const char *name;  /* its semaphore (name_len bytes); its first on several */
    size_t name_len;
    const char *tenant;         /* NUL-terminated, or NULL */
    const engine_part_t *parts; /* a ticket on several semaphores: its nparts parts (position
                                   and ahead_weight: in its longest line) */
    uint64_t weight;            /* units it asks for */
    uint64_t position;          /* waiting: 1 = next in line */
    uint64_t ahead_weight;      /* waiting: units asked for by those ahead */
    int64_t p50_ms, p90_ms;     /* estimated wait from now (when `estimated`) */
    int64_t poll_after_ms;      /* read again after this long */
    int64_t keepalive_ms;       /* unread this long, it is dropped (or its grant) */
    uint64_t state;             /* differs whenever status or position does */
} engine_ticket_t;

/* A semaphore (or a lock key) as it stood when the request completed. */
typedef struct {
    const char *name;
    size_t name_len;
    uint64_t capacity; /* a lock's most shared holders (--lock-readers) */
    uint64_t readers;  /* a lock's shared holders now */
    int64_t available; /* may be < 0 after a shrink, > capacity after legacy up */
    uint64_t held, fence;
    uint64_t waiting, waiting_weight; /* parked requests and their total weight */
    uint8_t legacy;                   /* legacy up/down made its value a counter */
    uint8_t lists;                    /* holders and waiters are filled (SEM, LOCK) */
    uint8_t truncated;                /* the lists stop at ENGINE_VIEW_LIST_MAX */
    size_t nholders, nwaiters;
    engine_lease_t *holders;
    engine_waiter_t *waiters;
    engine_sem_limits_t *limits; /* NULL when it has neither limits nor tenants */
} engine_sem_view_t;

enum { ENGINE_VIEW_LIST_MAX = 1000 }; /* longest holders/waiters list in a view */

/* An item of a list (ENGINE_SEM_LIST, ENGINE_LOCK_LIST): its view without lists, and what
 * an overview shows beside it. (Apart from the view, which every request's result holds.) */
typedef struct {
    engine_sem_view_t v;
    uint64_t grants;          /* leases granted on it: a counter for rates, which may start
                                 over (the embedded back end counts from its start, Redis
                                 from the script library's last load) */
    uint64_t tickets;         /* tickets waiting in its queue */
    int64_t waiting_since_ms; /* when the head of its queue came; 0 when nobody waits */
} engine_list_item_t;

typedef enum {
    ENGINE_RES_NONE,      /* no body (a delete, a release) */
    ENGINE_RES_LEASE,     /* res.lease */
    ENGINE_RES_SEM,       /* res.sem, with its lists */
    ENGINE_RES_LOCK,      /* res.sem, with its lists (name = key, capacity = readers) */
    ENGINE_RES_LIST,      /* res.items[0..nitems), res.next_cursor */
    ENGINE_RES_LOCK_LIST, /* the same, of lock keys (name = key, capacity = readers) */
    ENGINE_RES_LEGACY,    /* res.sem.name and res.sem.available (the value) */
    ENGINE_RES_IDLE,      /* res.sem.name: the semaphore is idle */
    ENGINE_RES_TICKET,    /* res.ticket, and res.lease when it is granted */
} engine_res_kind_t;

/* A request's result. Its strings and arrays live in storage the result owns (the small
 * buffer, then blocks from engine_result_alloc), freed after the callback. */
typedef struct engine_result {
    engine_res_kind_t kind;
    engine_lease_t lease;
    union {                     /* a result is one or the other (by kind) */
        engine_sem_view_t sem;  /* SEM, LOCK, LEGACY, IDLE */
        engine_ticket_t ticket; /* TICKET */
        /* NONE of an EVENTS_OPEN (here, not in the request: a parked request stays small),
         * from a back end that keeps an event log (engine_backend_t.event_log): where the
         * log stood (log_uid 0: unknown) and, with an id, its events after it (in the
         * result's memory) and how their read went */
        struct {
            uint64_t log_uid, log_seq;
            const struct engine_event *replay;
            size_t nreplay;
            int log_rc; /* ENGINE_LOG_* (backend.h) */
        };
    };
    engine_list_item_t *items; /* LIST, LOCK_LIST */
    size_t nitems;
    const char *next_cursor; /* LIST: the last name of the page when more follow, or NULL */
    size_t next_cursor_len;
    struct engine_block *blocks; /* storage beyond `small` */
    size_t small_used;
    _Alignas(8) char small[64]; /* a lease reply's name and owner, typically */
} engine_result_t;

/* `n` bytes (8-aligned) that live as long as the result, or NULL when out of memory. */
void *engine_result_alloc(engine_result_t *r, size_t n);
/* A NUL-terminated copy of `len` bytes of `s` kept by the result, or NULL (out of memory,
 * or s is NULL). */
char *engine_result_strdup(engine_result_t *r, const char *s, size_t len);
/* Forget the result and free its storage. */
void engine_result_clear(engine_result_t *r);

/* One request. The caller owns the struct and every input string; both must stay valid
 * until the callback has run or engine_cancel() has returned. */
struct engine_req {
    /* in */
    engine_op_t op;
    int mode;         /* LOCK_ACQUIRE: ENGINE_MODE_* */
    const char *name; /* semaphore name or lock key (NUL-terminated UTF-8); NULL for the
                         operations on an id, and for SEM_LIST */
    size_t name_len;
    const char *id; /* LEASE_*, TICKET_GET, TICKET_DELETE: the lease's or ticket's id */
    size_t id_len;
    uint64_t capacity; /* SEM_PUT, SEM_RESIZE, LEGACY_CREATE */
    uint64_t weight;   /* ACQUIRE, TICKET_CREATE */
    /* What only some operations read, in one place (a parked request is as small as it
     * can be): each is read only for the operations named. */
    union {
        struct {
            const char *prefix; /* SEM_LIST, LOCK_LIST, may be NULL */
            const char *cursor; /* SEM_LIST, LOCK_LIST, may be NULL */
            uint64_t limit;     /* SEM_LIST, LOCK_LIST: 0 = default */
        };
        /* SEM_PUT, SEM_RESIZE: the limits beside the capacity, those named in `limits`
         * (ENGINE_LIMIT_*; a resize leaves the others as they are; 0 removes one) */
        struct {
            uint64_t tenant_max, rate_per_s, rate_burst;
        };
        /* ACQUIRE_MULTI, and TICKET_CREATE on several semaphores (name NULL): the
         * semaphores with their weights, each named once (nparts, at most
         * ENGINE_PARTS_MAX) */
        const engine_part_t *parts;
        /* METRICS: where the text goes (a growable string the caller owns until the
         * callback; see common/strbuf.h) */
        struct strbuf *text;
        /* EVENTS_OPEN, set by the engine: id as the front parsed it (0: not an id; what the
         * back end found is in res) */
        struct {
            uint64_t from_uid, from_seq;
        };
    };
    const char *tenant;   /* ACQUIRE, ACQUIRE_MULTI, TICKET_CREATE: optional, may be NULL */
    int64_t timeout_ms;   /* ACQUIRE, WAIT_IDLE, LOCK_ACQUIRE: 0 try, < 0 forever */
    int64_t ttl_ms;       /* ACQUIRE, LOCK_ACQUIRE, LEASE_RENEW: 0 = server default */
    const char *owner;    /* optional, may be NULL */
    const char *idem_key; /* optional Idempotency-Key, may be NULL */
    /* With semad --auth: the name of the token that sent the request (NULL without --auth,
     * and for semad's own requests). A grant remembers it; renewing or releasing a lease
     * another token took fails with SEMA_EACCES unless `principal_admin` is set. */
    const char *principal;
    int principal_admin;
    /* out (beside principal_admin, so the struct has no holes) */
    int status;           /* 0 or a SEMA_E* code (see the table in docs/http-api.md) */
    int created;          /* SEM_PUT: 1 when the semaphore was created */
    uint16_t nparts;      /* in: parts' count (0 for every other request) */
    uint8_t limits;       /* in: SEM_PUT, SEM_RESIZE: ENGINE_LIMIT_* */
    int64_t keepalive_ms; /* TICKET_CREATE: 0 = server default */
    uint64_t seen;        /* TICKET_GET: the state the caller last saw (0: none; a wait
                             then sets it to the state at arrival) */

    /* out: valid inside the callback (and status, created above) */
    const char *message; /* static text explaining a failure, or NULL */
    engine_result_t res; /* on success; freed after the callback */

    void (*cb)(engine_req_t *req);
    void *data; /* the caller's */

    /* engine private */
    void *priv;
};

/* An event of a semaphore, as a back end publishes it and the HTTP layer renders it. `lease`
 * for granted, released, expired and revoked; `capacity` for resized; `reason` for reset;
 * `waiter` for queued and left (a waiter joined its queue, or left it without a grant: timed
 * out, gone, refused, or a wait-idle done), with `waiting` and `waiting_weight` the queue's
 * count and weight after it. */
typedef struct engine_event {
    const char *type;
    const char *name;
    size_t name_len;
    const engine_lease_t *lease;
    const engine_waiter_t *waiter;
    uint64_t waiting, waiting_weight;
    uint64_t capacity;
    uint64_t uid, seq; /* its id in a back end's event log; 0: the front numbers it */
    const char *reason;
} engine_event_t;

struct strbuf;

typedef struct {
    uint64_t max_semaphores;         /* 0 = unlimited */
    uint64_t max_waiters_per_sem;    /* parked requests on one semaphore */
    uint64_t max_waiters_total;      /* parked requests in all */
    size_t max_name_len;             /* bytes */
    int64_t default_ttl_ms;          /* lease ttl when a request gives none */
    int64_t max_ttl_ms;              /* longest ttl a request may ask for */
    uint64_t lock_readers;           /* keyed locks: max concurrent shared holders (R) */
    uint64_t max_locks;              /* keyed locks: max keys held or awaited at once */
    uint64_t metrics_max_semaphores; /* per-semaphore metric series cap */
    uint64_t metrics_max_tenants;    /* per-tenant series of each of those semaphores; the
                                        other tenants are summed as tenant="_other" */
    int64_t events_retain_ms;        /* an unwatched semaphore keeps its events this long for a
                                        resume (default ENGINE_EVENTS_RETAIN_MS) */
    int64_t ticket_keepalive_ms;     /* a ticket's keepalive when it asks for none */
    int64_t max_ticket_keepalive_ms; /* longest keepalive a ticket may ask for */
    int64_t ticket_poll_ms;          /* poll_after_ms, and the least time between two position
                                        updates to one watcher (long-poll or stream) */
    const char *backend;             /* "embedded" (the default when NULL), or a Redis address:
                                        redis://... or redis+sentinel://... (docs/redis.md) */
    struct {                         /* the embedded back end's settings */
        struct store *store;         /* durable store, or NULL for memory only */
        uint64_t max_uncommitted;    /* changes recorded while a commit runs before every
                                        reply waits for the commit (backpressure) */
    } embedded;
    struct {        /* the Redis back end's settings */
        int strict; /* hold replies until WAIT says the replicas have the writes */
    } redis;
    /* The wire format of an event's data (the HTTP layer's render_event_data): the engine
     * renders each event once through it and shares the text with every subscriber and
     * the resume ring. Appends to `out`; 0, SEMA_ENOMEM or SEMA_EINVAL. */
    int (*render_event)(struct strbuf *out, const engine_event_t *ev, const char *reason);
} engine_config_t;

/* Fill `cfg` with the defaults documented in `semad --help`. */
void engine_config_default(engine_config_t *cfg);

/* Create an engine on `loop` (borrowed) served by the back end `be` (static; backends_find()
 * in src/backends/backends.h finds the one cfg->backend names). The embedded back end loads
 * the store's state if cfg->embedded.store is set. Returns 0, SEMA_EINVAL (no back end or
 * no cfg->render_event), SEMA_ENOMEM, or the back end's error (with a message in errbuf). */
struct engine_backend;
int engine_new(engine_t **out, uv_loop_t *loop, const struct engine_backend *be,
               const engine_config_t *cfg, char *errbuf, size_t errlen);

/* Fail every parked request with SEMA_ESHUTDOWN, stop timers and close handles; the
 * engine is freed once its handles have closed (run the loop until it returns). */
void engine_shutdown(engine_t *e);

/* Start `req`. Returns 0 (req->cb will run exactly once) or a negative code (SEMA_EINVAL
 * for a malformed request, SEMA_ESHUTDOWN after engine_shutdown); then req->cb never runs. */
int engine_submit(engine_t *e, engine_req_t *req);

/* Withdraw a request whose callback has not run yet (the client went away). After it
 * returns, req->cb never runs and the engine holds no pointer to req. A grant already
 * made for req (e.g. awaiting its group commit) is released, never leaked. */
void engine_cancel(engine_t *e, engine_req_t *req);

/* Events for GET /v1/semaphores/{name}/events. `cb` gets the event's id ("<uid>-<seq>",
 * increasing within one run of a semaphore's subscriptions), its type ("granted",
 * "released", "expired", "revoked", "resized", "queued", "left", "deleted", or "reset": see
 * engine_sub_resume) and its data: a JSON object's text (len bytes, NUL-terminated,
 * borrowed: rendered once for every subscriber). After "deleted" the subscription is
 * finished (cb is not called again; still call engine_unsubscribe). Returns 0,
 * SEMA_ENOENT, SEMA_ELIMIT or SEMA_ENOMEM. */
typedef void (*engine_event_cb)(void *arg, const char *id, const char *type, const char *data,
                                size_t len);
/* `open` is an ENGINE_EVENTS_OPEN request that succeeded, in its callback (borrowed): the
 * subscription is to its semaphore. */
int engine_subscribe(engine_t *e, const engine_req_t *open, engine_event_cb cb, void *arg,
                     engine_sub_t **out);
/* Resume `sub` after open->id (a client's Last-Event-ID; nothing without one), in the same
 * callback: calls cb(arg, ...) at once with every event since it, oldest first, if the engine
 * still has them all; otherwise with one "reset" event ({"name","reason"}: events in between
 * are lost, read the state again). The subscription's own callback then skips what was
 * replayed. cb must not unsubscribe. */
void engine_sub_resume(engine_t *e, engine_sub_t *sub, const engine_req_t *open, engine_event_cb cb,
                       void *arg);
void engine_unsubscribe(engine_t *e, engine_sub_t *sub);

/* A semaphore whose last subscriber left keeps recording events this long by default (a
 * resume within it misses nothing); idle subscriptions kept at most; recent events kept
 * for resumes (all semaphores together). */
#define ENGINE_EVENTS_RETAIN_MS 60000
#define ENGINE_EVENTS_IDLE_MAX 1024
#define ENGINE_EVENTS_RECENT 4096

/* Append the front's own Prometheus metrics (text format: its counters and histograms) to
 * `buf` (a growable string the caller owns; see common/strbuf.h). Returns 0 or SEMA_ENOMEM.
 * The whole engine's, the back end's series after these, come with an ENGINE_METRICS
 * request, which never blocks the loop on a store. */
int engine_metrics(engine_t *e, struct strbuf *buf);

/* Whether the engine's store answers (engine_stats_t.store). */
typedef enum {
    ENGINE_STORE_OK = 0,      /* it answers (on Redis: it answered within ENGINE_CONTACT_MAX_MS) */
    ENGINE_STORE_STARTING,    /* it has never answered yet (semad is not ready) */
    ENGINE_STORE_UNREACHABLE, /* the connection to it is down (lost, refused, reconnecting) */
    ENGINE_STORE_SILENT       /* connected, but no answer for more than ENGINE_CONTACT_MAX_MS */
} engine_store_t;

/* A store in another process (Redis) answers at least this often while it is healthy (a
 * heartbeat every 2 s, and the command timeout): longer without an answer is not ok. */
#define ENGINE_CONTACT_MAX_MS 3000

/* Counters for /healthz and logs. On Redis the counts are those of the last answer Redis
 * gave this instance (contact_age_ms ago), with this instance's own grants and releases
 * since. */
typedef struct {
    uint64_t semaphores, leases, parked, locks;
    int writes_pending;     /* the back end is writing changes (a group commit runs, or
                               mutations or replies wait for one; on Redis: commands are in
                               flight) */
    engine_store_t store;   /* does its store answer now */
    int64_t contact_age_ms; /* ms since the store last answered; -1: the store is in-process */
} engine_stats_t;
void engine_stats(engine_t *e, engine_stats_t *out);

/* Call cb(arg) once, when the engine's store has answered for the first time: before
 * returning for a store in this process, later on Redis (after its first connection, the
 * library's load and the epoch check). semad says "ready" only then. cb must not free e. */
void engine_when_ready(engine_t *e, void (*cb)(void *arg), void *arg);
/* Where the engine keeps its state, for the start log, in buf (NUL-terminated, cut at cap):
 * "embedded", "redis 127.0.0.1:6379", "redis mymaster via Sentinels h1:26379,h2:26379
 * (primary 10.0.0.5:6379)"; never a password. */
void engine_describe(engine_t *e, char *buf, size_t cap);

#endif /* SEMAD_ENGINE_H */
