/* SPDX-License-Identifier: MIT */
/* backend.h - what a back end of the engine implements (a table of functions), and the
 * front's services it calls. The front (front.c) has checked every request's inputs against
 * the limits before a back end sees it; the back end keeps the state and the semantics of
 * docs/semantics.md: FIFO admission, leases, fences, timeouts, durability.
 *
 * Everything runs on the engine's loop thread. Not installed; not for the HTTP layer. The
 * back ends themselves are in src/backends/, listed by backends.h. */
#ifndef SEMAD_BACKEND_H
#define SEMAD_BACKEND_H

#include "common/table.h"
#include "engine/engine.h"

/* How the read of an event log after an id went (ENGINE_EVENTS_OPEN's log_rc). */
enum {
    ENGINE_LOG_OK = 0,  /* replayed (maybe nothing: the id was the current point) */
    ENGINE_LOG_FOREIGN, /* the id is not from the log as it runs now */
    ENGINE_LOG_GONE,    /* some events after the id are no longer kept */
    ENGINE_LOG_UNKNOWN  /* the log could not be read */
};

typedef struct engine_backend {
    const char *name; /* what `semad --engine` names it */

    /* Start on `loop` with `cfg` (the front keeps both alive); *out is the back end's
     * handle. Returns 0 or a SEMA_E* code with a message in errbuf. */
    int (*open)(void **out, engine_t *front, uv_loop_t *loop, const engine_config_t *cfg,
                char *errbuf, size_t errlen);
    /* Serve a request whose inputs the front checked: fill req->status, req->message and
     * req->res, then hand it to engine__complete() exactly once (now or later). For
     * ENGINE_METRICS, the front has written its own series to req->text: the back end
     * appends its own (0 or SEMA_ENOMEM in req->status); one that reads them from its store
     * does so without blocking the loop, and writes nothing once the request is cancelled. A
     * request may arrive failed already (req->status != 0: its inputs failed the checks): it is
     * completed as it is, in order with the others. Returns 0, or SEMA_ENOMEM when it
     * cannot take the request at all (then it never completes it). */
    int (*submit)(void *be, engine_req_t *req);
    /* Forget a request not yet completed (engine_cancel's contract); a grant made for it
     * goes back to the pool. */
    void (*cancel)(void *be, engine_req_t *req);
    /* Fail parked requests with SEMA_ESHUTDOWN, finish what is in flight, close; call
     * engine__backend_closed() once nothing of it runs any more (it is then freed). */
    void (*shutdown)(void *be);
    /* Optional: does the semaphore exist now? (asked after a store rollback, which only a
     * back end with such a store makes: engine__events_rollback) */
    int (*exists)(void *be, const char *name, size_t len);
    void (*stats)(void *be, engine_stats_t *out);
    /* 1: it numbers events itself, in a log shared by every instance of one store (Redis);
     * the front then keeps no resume ring for it, and it answers ENGINE_EVENTS_OPEN with
     * where the log stands and, with an id, the events after it (the result's log_*,
     * replay, nreplay). */
    int event_log;
    /* Optional: where its state lives (engine_describe); without it, its name. */
    void (*describe)(void *be, char *buf, size_t cap);
    /* Optional operations. A back end that leaves `tickets` 0 never sees ENGINE_TICKET_*:
     * the front fails them with SEMA_ENOTSUP (HTTP 501, code not_supported). Likewise
     * `multi` (ENGINE_ACQUIRE_MULTI, a ticket on several semaphores), `tenants` (a request
     * naming a tenant, a semaphore's tenant_max) and `rates` (rate_per_s, rate_burst). */
    int tickets;
    int multi, tenants, rates;
    /* 1: its store answers later than open() (Redis): it calls engine__backend_ready() when
     * it first has; 0: it is ready once open() returned. */
    int ready_later;
} engine_backend_t;

/* ---- the front's counters, which back ends update ---- */

#define ENGINE_HIST_BUCKETS 12
typedef struct {
    uint64_t counts[ENGINE_HIST_BUCKETS + 1]; /* last = +Inf */
    double sum;
    uint64_t n;
} ehist_t;

typedef struct {
    uint64_t grants, releases, expirations, timeouts, cancellations, revocations;
    uint64_t ops[ENGINE_OP_COUNT];
    ehist_t wait_s, hold_s; /* request to grant; grant to end */
} engine_counters_t;

engine_counters_t *engine__counters(engine_t *e);
void engine__hist_observe(ehist_t *h, double seconds);
/* Write h as a Prometheus histogram `name` (its buckets, _sum and _count). */
struct jsonw;
void engine__hist_write(struct jsonw *w, const char *name, const char *help, const ehist_t *h);

/* ---- services of the front ---- */

/* Deliver a completed request: its callback runs, then its result is freed. */
void engine__complete(engine_t *e, engine_req_t *req);
/* Deliver the oldest queued event; returns 0 when none is queued. A back end delivers
 * events after the completions it has ready, so a subscriber hears of a grant after its
 * requester; a callback that submits more work only queues it, so nothing recurses. */
int engine__deliver_event(engine_t *e);
void engine__backend_closed(engine_t *e);
/* The store answered for the first time (a back end with ready_later): engine_when_ready's
 * callback runs now. Later calls do nothing. */
void engine__backend_ready(engine_t *e);

/* The order of a view's tenants (qsort over engine_tenant_t): the requests that named none
 * first, then by name. */
int engine__tenant_cmp(const void *a, const void *b);

/* A new, unguessable lease id (24 base64url characters from the kernel's CSPRNG). */
void engine__lease_id(engine_t *e, char id[ENGINE_LEASE_ID_MAX]);
void engine__random(engine_t *e, void *out, size_t n);

/* Publish an event to the semaphore's subscribers (engine_event_t in engine.h); cheap when
 * nobody watches. A back end with an event log (event_log) numbers its events: `uid`
 * and `seq` are the event's id, and it may send "reset" (with `reason`) to every
 * subscriber, numbered with the log's point. */
void engine__event(engine_t *e, const engine_event_t *ev);
/* The back end's state was rebuilt (a store rollback): every subscription whose semaphore
 * still exists gets "reset" (events already sent may describe undone changes), the others
 * "deleted". */
void engine__events_rollback(engine_t *e);
/* Does anyone on this instance watch the semaphore's events (or may resume them)? */
int engine__watched(engine_t *e, const char *name, size_t len);
/* Does anyone on this instance watch any semaphore's events? When not, a back end need not
 * build its events (engine__event would drop them). One test. */
int engine__watching(const engine_t *e);

#endif /* SEMAD_BACKEND_H */
