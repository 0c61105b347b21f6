/* SPDX-License-Identifier: MIT */
/* engine.h - semad's state engine: every semaphore, lease, waiter and timer, behind an
 * asynchronous interface. The HTTP layer (routes_*.c) only talks to this; the in-memory
 * engine (engine_mem.c) implements it now, a Redis engine will later.
 *
 * Threading: everything runs on the one libuv loop given to engine_new(); no locks.
 *
 * Completion rule: engine_submit() either returns a negative code (the callback is never
 * called) or returns 0 and calls req->cb exactly once, later or before engine_submit()
 * returns (the in-memory engine without a durable store completes many requests at once).
 * A durable store defers every completion that mutated state until its group commit. */
#ifndef SEMAD_ENGINE_H
#define SEMAD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "sema/error.h"

typedef struct engine engine_t;
typedef struct engine_req engine_req_t;
typedef struct engine_sub engine_sub_t;
struct store; /* store.h */

/* The operations; the comment gives the inputs used and the success result. Results are
 * JSON objects in the wire format of docs/http-api.md, so the HTTP layer only serialises.
 * Timestamps in results are Unix epoch milliseconds (server wall clock); deadlines and
 * timers inside the engine use the monotonic clock (uv_now/uv_hrtime). */
typedef enum {
    ENGINE_SEM_PUT,       /* name, capacity -> state; created=1 if new, 0 if identical;
                             SEMA_EEXIST if it exists with another capacity */
    ENGINE_SEM_RESIZE,    /* name, capacity -> state */
    ENGINE_SEM_GET,       /* name -> {"name","capacity","available","held","fence",
                             "holders":[...],"waiters":[...]} */
    ENGINE_SEM_DELETE,    /* name -> null; parked waiters fail SEMA_ECANCELED, leases void */
    ENGINE_SEM_LIST,      /* prefix, limit, cursor -> {"semaphores":[...],"next_cursor"} */
    ENGINE_ACQUIRE,       /* name, weight, timeout_ms, ttl_ms, owner, idem_key ->
                             {"lease","name","weight","fence","ttl_ms","expires_at"} */
    ENGINE_WAIT_IDLE,     /* name, timeout_ms -> {"name","idle":true} */
    ENGINE_LEASE_GET,     /* name = lease id -> lease */
    ENGINE_LEASE_RENEW,   /* name = lease id, ttl_ms -> lease */
    ENGINE_LEASE_RELEASE, /* name = lease id -> null */
    ENGINE_LEASE_REVOKE,  /* name = lease id -> null (units back, fence bumped) */
    ENGINE_LOCK_ACQUIRE,  /* name = key, mode, timeout_ms, ttl_ms, owner, idem_key -> lease
                             with "key" and "mode" */
    ENGINE_LOCK_GET,      /* name = key -> {"key","readers","holders","waiters"} or ENOENT */
    ENGINE_LEGACY_CREATE, /* name, capacity = value -> {"name","value"}; SEMA_EEXIST */
    ENGINE_LEGACY_DELETE, /* name -> null */
    ENGINE_LEGACY_VALUE,  /* name -> {"name","value"} */
    ENGINE_LEGACY_UP,     /* name -> {"name","value"} */
    ENGINE_LEGACY_DOWN,   /* name -> {"name","value"}; SEMA_EBUSY when the value is 0 */
    ENGINE_OP_COUNT
} engine_op_t;

enum { ENGINE_MODE_SHARED = 1, ENGINE_MODE_EXCLUSIVE = 2 };

/* One request. The caller owns the struct and every input string; both must stay valid
 * until the callback has run or engine_cancel() has returned. */
struct engine_req {
    /* in */
    engine_op_t op;
    const char *name; /* semaphore name, lock key or lease id (NUL-terminated UTF-8) */
    size_t name_len;
    uint64_t capacity;    /* SEM_PUT, SEM_RESIZE, LEGACY_CREATE */
    uint64_t weight;      /* ACQUIRE */
    int64_t timeout_ms;   /* ACQUIRE, WAIT_IDLE, LOCK_ACQUIRE: 0 try, < 0 forever */
    int64_t ttl_ms;       /* ACQUIRE, LOCK_ACQUIRE, LEASE_RENEW: 0 = server default */
    int mode;             /* LOCK_ACQUIRE: ENGINE_MODE_* */
    const char *owner;    /* optional, may be NULL */
    const char *idem_key; /* optional Idempotency-Key, may be NULL */
    const char *prefix;   /* SEM_LIST, may be NULL */
    const char *cursor;   /* SEM_LIST, may be NULL */
    uint64_t limit;       /* SEM_LIST: 0 = default */

    /* out: valid inside the callback */
    int status;          /* 0 or a SEMA_E* code (see the table in docs/http-api.md) */
    int created;         /* SEM_PUT: 1 when the semaphore was created */
    json_t *result;      /* success result (or error detail, may be NULL); the callback may
                            take it with json_incref, the engine decrefs it after the callback */
    const char *message; /* static text explaining a failure, or NULL */

    /* Optional pre-serialised result. When the caller sets want_text before submitting, a
     * successful lease result (ACQUIRE, LOCK_ACQUIRE, LEASE_GET, LEASE_RENEW) may come as
     * its JSON text instead: then `text` (text_len bytes, NUL-terminated, owned by the
     * engine, valid inside the callback) is set and `result` is NULL. Without want_text, or
     * when the engine chose the JSON form, `text` is NULL and `result` is as above. */
    int want_text;
    const char *text;
    size_t text_len;

    void (*cb)(engine_req_t *req);
    void *data; /* the caller's */

    /* engine private */
    void *priv;
};

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
    struct store *store;             /* durable store, or NULL for memory only */
    uint64_t max_uncommitted;        /* store: changes recorded while a commit runs before
                                        every reply waits for the commit (backpressure) */
    int64_t events_retain_ms;        /* an unwatched semaphore keeps its events this long for a
                                        resume (default ENGINE_EVENTS_RETAIN_MS) */
} engine_config_t;

/* Fill `cfg` with the defaults documented in `semad --help`. */
void engine_config_default(engine_config_t *cfg);

/* Create an engine on `loop` (borrowed). Loads the store's state if cfg->store is set.
 * Returns 0, SEMA_ENOMEM, or the store's error (with a message in errbuf). */
int engine_new(engine_t **out, uv_loop_t *loop, const engine_config_t *cfg, char *errbuf,
               size_t errlen);

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
 * "released", "expired", "revoked", "resized", "deleted", or "reset": see
 * engine_sub_resume) and a borrowed JSON object. After "deleted" the subscription is
 * finished (cb is not called again; still call engine_unsubscribe). Returns 0,
 * SEMA_ENOENT, SEMA_ELIMIT or SEMA_ENOMEM. */
typedef void (*engine_event_cb)(void *arg, const char *id, const char *type, json_t *data);
int engine_subscribe(engine_t *e, const char *name, engine_event_cb cb, void *arg,
                     engine_sub_t **out);
/* Resume `sub` after `last_id` (a client's Last-Event-ID): calls cb(arg, ...) at once with
 * every event since it, oldest first, if the engine still has them all; otherwise with one
 * "reset" event ({"name","reason"}: events in between are lost, read the state again). The
 * subscription's own callback then skips what was replayed. cb must not unsubscribe. */
void engine_sub_resume(engine_t *e, engine_sub_t *sub, const char *last_id, engine_event_cb cb,
                       void *arg);
void engine_unsubscribe(engine_t *e, engine_sub_t *sub);

/* A semaphore whose last subscriber left keeps recording events this long by default (a
 * resume within it misses nothing); idle subscriptions kept at most; recent events kept
 * for resumes (all semaphores together). */
#define ENGINE_EVENTS_RETAIN_MS 60000
#define ENGINE_EVENTS_IDLE_MAX 1024
#define ENGINE_EVENTS_RECENT 4096

/* Append the engine's Prometheus metrics (text format) to `buf` (a growable string the
 * caller owns; see http.h). Returns 0 or SEMA_ENOMEM. */
struct strbuf;
int engine_metrics(engine_t *e, struct strbuf *buf);

/* Counters for /healthz and logs. */
typedef struct {
    uint64_t semaphores, leases, parked, locks;
    int commit_busy; /* a group commit runs, or mutations or replies wait for one */
} engine_stats_t;
void engine_stats(engine_t *e, engine_stats_t *out);

#endif /* SEMAD_ENGINE_H */
