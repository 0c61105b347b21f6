/* SPDX-License-Identifier: MIT */
/* client.h - the C client for semad (libsema-client): semaphores, leases, keyed locks,
 * wait-idle, the legacy API and a background lease keep-alive, over HTTP with libcurl.
 *
 * Conventions (the same for every function below):
 * - Returns 0 or a negative SEMA_E* code (sema/error.h). Server problems map by their
 *   `code` (see docs/client.md); a server that cannot be reached is SEMA_ECONNREFUSED (its
 *   host name not resolving, SEMA_ENOHOST), a reply that is not what the API documents is
 *   SEMA_EPROTO.
 * - `err` (may be NULL) is the caller's buffer for the detail: the code, the HTTP status
 *   and the server's message, like curl's CURLOPT_ERRORBUFFER. It is written on failure
 *   and cleared on success.
 * - Thread-safety: one sema_client_t may be used by any number of threads at once. Each
 *   call borrows a libcurl easy handle from the client's pool (a mutex-protected free
 *   list; a new handle when all are busy, at most `max_idle` are kept) and returns it
 *   afterwards, so a handle's keep-alive connection is reused by the next call. A blocking
 *   acquire holds its handle (and connection) while it waits.
 * - Blocking: every call blocks for one HTTP round trip; acquire, lock and wait-idle block
 *   until granted or their timeout (a long poll on the server, never polling).
 * - Strings handed in are borrowed for the call; strings handed out are owned by the
 *   caller and freed with sema_client_string_free(). Every string that is sent (names,
 *   keys, owners, tenants, idempotency keys, a list's prefix) must be valid UTF-8, and an
 *   idempotency key have no control characters: anything else fails with SEMA_EINVAL and
 *   a message naming it ("tenant must be valid UTF-8") before any request is sent.
 * - libcurl: sema_client_new() calls curl_global_init() once per process (pthread_once);
 *   programs that use libcurl themselves should call curl_global_init() before starting
 *   threads, as libcurl asks. */
#ifndef SEMA_CLIENT_H
#define SEMA_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "sema/error.h"
#include "sema/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sema_client sema_client_t;
typedef struct sema_keepalive sema_keepalive_t;

/* Limits of the fixed-size fields below (bytes, with the terminating NUL). A semaphore name
 * or lock key longer than SEMA_CLIENT_NAME_MAX - 1 bytes is refused with
 * SEMA_ENAMETOOLONG before anything is sent. */
#define SEMA_CLIENT_NAME_MAX 512
#define SEMA_LEASE_ID_MAX 128
/* A tenant's name: 1 to 128 bytes (semad's bound), with the terminating NUL. */
#define SEMA_CLIENT_TENANT_MAX 129

typedef struct {
    int code;          /* 0 or the SEMA_E* code the call returned */
    int http_status;   /* the reply's HTTP status, 0 when there was no reply */
    char problem[48];  /* the server's problem `code` ("timeout", ...), "" if none; for a
                          TLS failure (no reply), the client's own: "tls_untrusted" (semad's
                          certificate: give its CA, `cacert`), "tls_cacert" (that file),
                          "tls_client_certificate" (`cert` or `key` unusable),
                          "tls_certificate_required" (semad asked for a client certificate;
                          SEMA_EACCES), "tls_certificate_refused" (SEMA_EACCES) */
    char message[256]; /* the server's detail, or the client's own explanation */
} sema_client_error_t;

typedef struct {
    int64_t connect_timeout_ms; /* TCP connect; 0: 3000 */
    int64_t request_timeout_ms; /* calls that do not wait for a permit; 0: 30000 */
    int max_retries;            /* a cap on a call's retries, besides retry_ms: retries after a
                                   network error (idempotent calls and acquires with their
                                   idempotency key), and for reads, releases and ticket leaves
                                   after a 503 too (docs/client.md, "Retries"); 0: no cap but
                                   retry_ms, < 0: no retries */
    int max_idle;               /* idle easy handles kept in the pool; 0: 8 */
    const char *owner;          /* default owner recorded with leases (borrowed for sema_client_new
                                   only: copied); NULL: "<hostname>:<pid>" */
    const char *token;          /* bearer token for a semad run with --auth, sent with every
                                   request (copied); NULL: $SEMA_TOKEN if set; "": none */
    /* https:// servers (each path copied by sema_client_new; NULL: the environment variable
     * named, if set): */
    const char *cacert; /* PEM file of the CAs to trust ($SEMA_CACERT; else the system's) */
    const char *cert;   /* PEM client certificate, for a semad with --tls-client-ca
                           ($SEMA_CERT) */
    const char *key;    /* PEM private key of `cert` ($SEMA_CERT_KEY; NULL: in `cert`'s file) */
    int64_t retry_ms;   /* the time budget of a call's retries: each starts within this of the
                           first failed try, waiting 100 ms doubling to 1 s, or longer when a
                           503's Retry-After asks (one asking past the budget ends the
                           retries); 0: SEMA_CLIENT_RETRY_MS, < 0: no retries. Last, since
                           libsema-client.so.3. */
} sema_client_opts_t;

/* The default of sema_client_opts_t.retry_ms, as the JS client's retryMs. */
#define SEMA_CLIENT_RETRY_MS 5000

/* A granted permit (or keyed lock). Plain data: copy it freely. */
typedef struct {
    char id[SEMA_LEASE_ID_MAX];      /* opaque lease id */
    char name[SEMA_CLIENT_NAME_MAX]; /* semaphore name, or the lock key */
    uint64_t weight;                 /* units held */
    uint64_t fence;                  /* fencing token: strictly increasing per semaphore */
    int64_t ttl_ms;                  /* the lease's time to live */
    int64_t expires_at_ms;           /* server wall clock, Unix epoch ms */
    int64_t acquired_at_ms;          /* server wall clock, Unix epoch ms (0 if not sent) */
    int64_t local_deadline_ns;       /* this host's monotonic clock (CLOCK_MONOTONIC): the
                                        request's send time + ttl, so never later than the
                                        server's expiry. Act before it. */
    int mode;                        /* 0 for a semaphore lease, else SEMA_LOCK_* */
} sema_lease_t;

enum { SEMA_LOCK_SHARED = 1, SEMA_LOCK_EXCLUSIVE = 2 };

typedef struct {
    uint64_t weight;             /* units to take; 0: 1 (ignored by locks) */
    int64_t timeout_ms;          /* < 0: wait forever; 0: try once; else wait this long */
    int64_t ttl_ms;              /* lease time to live; 0: the server's default (60 s) */
    const char *owner;           /* NULL: the client's owner */
    const char *idempotency_key; /* NULL: a random one is generated; it is reused when the
                                    request is retried after a network error, so a retried
                                    acquire never grants twice */
    const volatile int *cancel;  /* optional: set *cancel non-zero (from any thread or a
                                    signal handler) to give up waiting: the call returns
                                    SEMA_ECANCELED and releases a grant that raced it */
    const char *tenant;          /* NULL: none; else whose share the units count to
                                    (semaphores' tenants take turns, tenant_max caps each;
                                    ignored by locks). Last, since libsema-client.so.4 */
} sema_acquire_opts_t;

/* A semaphore's counters (GET /v1/semaphores/{name}, list entries). */
typedef struct {
    const char *name;  /* borrowed: valid during the call or callback that handed it out */
    uint64_t capacity; /* declared size */
    int64_t available; /* may be negative after a shrink, above capacity after legacy up */
    uint64_t held;     /* units held by leases */
    uint64_t fence;    /* last fence handed out (0 in list entries) */
    uint64_t waiting;  /* parked requests */
    /* Since libsema-client.so.4 (0 in list entries): */
    uint64_t tenant_max; /* the most units one tenant may hold; 0: no cap */
    uint64_t rate_per_s; /* units granted per second at most; 0: no rate */
    uint64_t rate_burst; /* the rate's bucket */
    uint64_t tokens;     /* units the bucket holds now */
} sema_sem_info_t;

/* What a semaphore has beside its capacity (docs/semantics.md): sema_client_create_config()
 * and sema_client_configure(). */
enum { SEMA_SET_CAPACITY = 1, SEMA_SET_TENANT_MAX = 2, SEMA_SET_RATE = 4, SEMA_SET_BURST = 8 };
typedef struct {
    uint64_t capacity;   /* >= 1 */
    uint64_t tenant_max; /* the most units one tenant may hold; 0: no cap */
    uint64_t rate_per_s; /* units granted per second at most; 0: no rate */
    uint64_t rate_burst; /* units granted at once after a pause; 0: rate_per_s */
    unsigned set;        /* configure: SEMA_SET_* of the fields to change (create: unused) */
} sema_sem_config_t;

/* ---- the handle -------------------------------------------------------------------- */

/* The server of a client made with no URL and no $SEMA_SERVER. */
#define SEMA_CLIENT_DEFAULT_URL "http://127.0.0.1:7070"

/* Create a client for the semad at `url` ("https://sema.internal:7443"; a trailing '/' is
 * ignored; a bare "host:port" is http://). NULL or "": $SEMA_SERVER, else
 * SEMA_CLIENT_DEFAULT_URL, as the sema command and the JS and Python clients do; `opts`
 * fields left NULL take $SEMA_TOKEN, $SEMA_CACERT, $SEMA_CERT and $SEMA_CERT_KEY the same
 * way. `opts` may be NULL (defaults). Sends nothing. Returns 0 and *out, SEMA_EINVAL (a
 * scheme other than http:// or https://, a token with a space or control byte, an owner
 * that is not UTF-8, or `cacert`, `cert` or `key` given for an http:// URL, where the
 * environment's pass as defaults),
 * SEMA_ENOMEM or SEMA_EIO (libcurl failed to start). Thread-safe (reads the environment). */
SEMA_EXTERN int sema_client_new(sema_client_t **out, const char *url,
                                const sema_client_opts_t *opts);

/* Free the client and its pooled connections. NULL is fine. Every other call on it must
 * have returned and every keep-alive on it stopped. */
SEMA_EXTERN void sema_client_free(sema_client_t *c);

/* The server URL without a trailing '/'. Borrowed from `c`. */
SEMA_EXTERN const char *sema_client_url(const sema_client_t *c);

/* Free a string returned by this library. NULL is fine. */
SEMA_EXTERN void sema_client_string_free(char *s);

/* ---- semaphores -------------------------------------------------------------------- */

/* PUT /v1/semaphores/{name}: create with `capacity` (>= 1). *created (may be NULL) is 1 when
 * it was created, 0 when an identical one existed. SEMA_EEXIST: it exists with another
 * capacity. */
SEMA_EXTERN int sema_client_create(sema_client_t *c, const char *name, uint64_t capacity,
                                   int *created, sema_client_error_t *err);

/* GET /v1/semaphores/{name}. `info` (may be NULL) receives the counters (info->name is set
 * to `name`). `json` (may be NULL) receives the full state document (holders, waiters),
 * owned by the caller. */
SEMA_EXTERN int sema_client_get(sema_client_t *c, const char *name, sema_sem_info_t *info,
                                char **json, sema_client_error_t *err);

/* PATCH /v1/semaphores/{name}: change the capacity (never revokes; see docs/http-api.md).
 * `info` may be NULL. */
SEMA_EXTERN int sema_client_resize(sema_client_t *c, const char *name, uint64_t capacity,
                                   sema_sem_info_t *info, sema_client_error_t *err);

/* PUT /v1/semaphores/{name} with a capacity and limits (cfg->set unused): as
 * sema_client_create(); SEMA_EEXIST when it exists with another capacity or limits,
 * SEMA_ENOTSUP when the server's back end has no tenants or rates. */
SEMA_EXTERN int sema_client_create_config(sema_client_t *c, const char *name,
                                          const sema_sem_config_t *cfg, int *created,
                                          sema_client_error_t *err);

/* PATCH /v1/semaphores/{name}: change what cfg->set names (a 0 limit removes it). `info` may
 * be NULL. SEMA_EINVAL (nothing set, a burst without a rate), SEMA_ENOENT, SEMA_ENOTSUP. */
SEMA_EXTERN int sema_client_configure(sema_client_t *c, const char *name,
                                      const sema_sem_config_t *cfg, sema_sem_info_t *info,
                                      sema_client_error_t *err);

/* DELETE /v1/semaphores/{name}: waiters fail, leases become void. */
SEMA_EXTERN int sema_client_delete(sema_client_t *c, const char *name, sema_client_error_t *err);

/* Called once per semaphore by sema_client_list(), in name order; `info` is borrowed for the
 * call. Return 0 to go on, anything else to stop (sema_client_list then returns 0). */
typedef int (*sema_client_list_cb)(void *arg, const sema_sem_info_t *info);

/* GET /v1/semaphores?prefix=: every semaphore whose name starts with `prefix` (NULL or "":
 * all), following the cursor page by page. */
SEMA_EXTERN int sema_client_list(sema_client_t *c, const char *prefix, sema_client_list_cb cb,
                                 void *arg, sema_client_error_t *err);

/* ---- leases -------------------------------------------------------------------------- */

/* POST /v1/semaphores/{name}/acquire: take `opts->weight` units, waiting up to
 * `opts->timeout_ms` (opts may be NULL: weight 1, forever, the default ttl). On 0, *lease is
 * the grant; on failure *lease is zeroed and no lease is left behind: a reply that arrives
 * but cannot be used, a cancel that races a grant, or a retry after a network error are all
 * resolved by the idempotency key (the grant is found again and released). Returns 0,
 * SEMA_ETIMEDOUT, SEMA_EBUSY (a failed try), SEMA_EINVAL (weight 0 or above capacity),
 * SEMA_ENOENT, SEMA_ECANCELED (deleted while waiting, or cancelled by the caller),
 * SEMA_ELIMIT, SEMA_ECONNREFUSED, ... */
SEMA_EXTERN int sema_client_acquire(sema_client_t *c, const char *name,
                                    const sema_acquire_opts_t *opts, sema_lease_t *lease,
                                    sema_client_error_t *err);

/* Several semaphores at once, all or nothing (POST /v1/acquire). */
#define SEMA_CLIENT_PARTS_MAX 16
typedef struct {
    const char *name; /* a semaphore */
    uint64_t weight;  /* units of it; 0: 1 */
} sema_client_part_t;

typedef struct {
    char name[SEMA_CLIENT_NAME_MAX];
    uint64_t weight; /* units held */
    uint64_t fence;  /* its fencing token: strictly increasing per semaphore */
} sema_lease_part_t;

/* A lease on several semaphores. `lease` is the lease (its id, ttl and expiry; its name,
 * weight and fence those of the first part): renew it, keep it alive and release it as any
 * lease, and it goes for all its parts. Plain data. */
typedef struct {
    sema_lease_t lease;
    size_t nparts;
    sema_lease_part_t parts[SEMA_CLIENT_PARTS_MAX];
} sema_multi_lease_t;

/* POST /v1/acquire: the units of every one of `parts` (1 to SEMA_CLIENT_PARTS_MAX, each named
 * once) at once, or nothing: the request waits in the line of each semaphore (opts as for
 * sema_client_acquire(): timeout, ttl, owner, tenant, idempotency key, cancel; its weight is
 * unused) and holds nothing until it has them all. Same returns and guarantees as
 * sema_client_acquire(); SEMA_EINVAL also for a semaphore named twice, SEMA_ENOENT when one of
 * them does not exist, SEMA_ENOTSUP from a back end without it. */
SEMA_EXTERN int sema_client_acquire_all(sema_client_t *c, const sema_client_part_t *parts,
                                        size_t nparts, const sema_acquire_opts_t *opts,
                                        sema_multi_lease_t *lease, sema_client_error_t *err);

/* POST /v1/locks/{key}/acquire: a keyed reader/writer lock, `mode` SEMA_LOCK_SHARED or
 * SEMA_LOCK_EXCLUSIVE (opts->weight is ignored). Released, renewed and kept alive like any
 * lease. Same returns and guarantees as sema_client_acquire(). */
SEMA_EXTERN int sema_client_lock(sema_client_t *c, const char *key, int mode,
                                 const sema_acquire_opts_t *opts, sema_lease_t *lease,
                                 sema_client_error_t *err);

/* POST /v1/leases/{id}/renew: extend by `ttl_ms` (0: the lease's own lease->ttl_ms; when
 * that is 0 too, as in a lease of which only the id is known, the server's default ttl)
 * from now on the server's clock; *lease becomes the lease as the reply has it (name,
 * weight, fence, ttl_ms, expires_at_ms, local_deadline_ns). Needs only the acquire right
 * (of the token that took the lease) on a semad run with --auth. A lease that
 * is gone fails loudly: SEMA_EEXPIRED, SEMA_EREVOKED, SEMA_ESTALE (released), SEMA_ECANCELED
 * (its semaphore was deleted) or SEMA_ENOENT (never seen). */
SEMA_EXTERN int sema_client_renew(sema_client_t *c, sema_lease_t *lease, int64_t ttl_ms,
                                  sema_client_error_t *err);

/* DELETE /v1/leases/{id}: give the units back. The same 410 codes as renew when the lease
 * had already ended. Retried after a network error or a 503 (semad could not reach its
 * store) for up to opts.retry_ms (and at most opts.max_retries times), never sooner than a
 * Retry-After asks; a repeated release answers SEMA_ESTALE, which a retry treats as done.
 * When the retries run out the error is returned (SEMA_EIO for the store, http_status 503)
 * and the lease holds until its ttl. */
SEMA_EXTERN int sema_client_release(sema_client_t *c, const char *lease_id,
                                    sema_client_error_t *err);

/* GET /v1/leases/{id}: the lease as the server sees it now. lease->local_deadline_ns is an
 * estimate here: the remaining time by this host's wall clock (at most the ttl). */
SEMA_EXTERN int sema_client_lease_get(sema_client_t *c, const char *lease_id, sema_lease_t *lease,
                                      sema_client_error_t *err);

/* POST /v1/leases/{id}/revoke (administrators): end someone's lease now; its units return and
 * the fence moves on. */
SEMA_EXTERN int sema_client_revoke(sema_client_t *c, const char *lease_id,
                                   sema_client_error_t *err);

/* ---- wait-idle, locks' state, events ------------------------------------------------- */

/* POST /v1/semaphores/{name}/wait-idle: block until every request queued before this one
 * was granted and all units are back (takes nothing). `timeout_ms` as for acquire;
 * `cancel` may be NULL. */
SEMA_EXTERN int sema_client_wait_idle(sema_client_t *c, const char *name, int64_t timeout_ms,
                                      const volatile int *cancel, sema_client_error_t *err);

/* GET /v1/locks/{key}: the key's state document into *json (caller frees). SEMA_ENOENT when
 * nobody holds or awaits the key. */
SEMA_EXTERN int sema_client_lock_get(sema_client_t *c, const char *key, char **json,
                                     sema_client_error_t *err);

/* Called for every server-sent event: `type` ("granted", "released", "expired", "revoked",
 * "resized", "deleted"; "reset" after a resume that could not replay everything missed:
 * read the state again) and its JSON `data`, both borrowed. Return non-zero to stop. */
typedef int (*sema_client_event_cb)(void *arg, const char *type, const char *data);

/* GET /v1/semaphores/{name}/events: stream events into `cb` until it returns non-zero, the
 * server ends the stream (e.g. after "deleted"), or *cancel (may be NULL) becomes non-zero.
 * Returns 0 in those three cases. Blocks; holds one connection. */
SEMA_EXTERN int sema_client_events(sema_client_t *c, const char *name, sema_client_event_cb cb,
                                   void *arg, const volatile int *cancel, sema_client_error_t *err);

/* What sema_client_events_ex() learnt about the stream, for a caller that reconnects. */
typedef struct {
    int64_t retry_ms; /* the last SSE `retry:` field (ms) the server sent, -1 if none */
    int opened;       /* 1 once the server accepted the subscription (a 2xx reply began) */
    /* In and out: if not empty on the call, sent as Last-Event-ID, so the server first
     * replays the events since it (or sends "reset" if it no longer has them all); on
     * return, the id of the last event received (unchanged if none came). Start with "". */
    char last_event_id[64];
} sema_client_events_info_t;

/* sema_client_events() that also fills *info (may be NULL) before it returns, whatever the
 * outcome. The stream does not reconnect by itself: a return of 0 that neither `cb` nor
 * *cancel caused means the server ended the stream, and a transport error (e.g.
 * SEMA_ECONNREFUSED, SEMA_EPROTO with http_status 0) means it was lost; resubscribe after
 * info->retry_ms (or your own backoff), passing the same *info back: semad replays what
 * was missed (a "reset" event if it cannot). Blocks; thread-safe like the rest. */
SEMA_EXTERN int sema_client_events_ex(sema_client_t *c, const char *name, sema_client_event_cb cb,
                                      void *arg, const volatile int *cancel,
                                      sema_client_events_info_t *info, sema_client_error_t *err);

/* ---- tickets ------------------------------------------------------------------------- */

/* A ticket: a place in a semaphore's FIFO queue that holds no connection open (for a
 * person, or a program, that should see where it stands; see docs/http-api.md). It queues
 * with every other waiter in arrival order; once granted it carries a lease, renewed and
 * released as any other. Plain data. */
enum { SEMA_TICKET_WAITING = 1, SEMA_TICKET_GRANTED = 2 };

typedef struct {
    char id[SEMA_LEASE_ID_MAX];      /* opaque ticket id (safe to keep, e.g. in a cookie) */
    char name[SEMA_CLIENT_NAME_MAX]; /* the semaphore (a ticket on several: its first) */
    int status;                      /* SEMA_TICKET_WAITING or SEMA_TICKET_GRANTED */
    uint64_t weight;                 /* units it asks for (there) */
    uint64_t position;               /* waiting: 1 is next in line; 0 once granted */
    uint64_t ahead_weight;           /* waiting: the units the waiters ahead ask for */
    int64_t estimate_p50_ms;         /* waiting: estimated wait from now (median), -1 while the
                                        semaphore has too little history to tell */
    int64_t estimate_p90_ms;         /* ... and the 90th percentile, -1 likewise */
    int64_t poll_after_ms;           /* how long to wait before reading it again */
    int64_t keepalive_ms;            /* a waiting ticket nobody reads for this long leaves the
                                        line; a grant nobody collects within it is released */
    sema_lease_t lease;              /* granted: the lease (zeroed while waiting) */
    /* The tenant it named, "" for none. Last, since libsema-client.so.5. */
    char tenant[SEMA_CLIENT_TENANT_MAX];
} sema_ticket_t;

typedef struct {
    uint64_t weight;             /* units to ask for; 0: 1 */
    int64_t ttl_ms;              /* the lease's ttl once granted; 0: the server's default */
    int64_t keepalive_ms;        /* 0: the server's default (semad --ticket-keepalive) */
    const char *owner;           /* NULL: the client's owner */
    const char *idempotency_key; /* NULL: a random one, reused if the request is retried
                                    after a network error, so a retry never takes two places */
    const char *tenant;          /* NULL: none. Last, since libsema-client.so.4 */
} sema_ticket_opts_t;

/* POST /v1/semaphores/{name}/tickets: take a place in line (opts may be NULL). On 0, *t is
 * the ticket: waiting with its position, or already granted with its lease when the units
 * were free and nobody waited. SEMA_EINVAL (weight 0 or above the capacity, keepalive above
 * the server's maximum), SEMA_ENOENT, SEMA_ELIMIT (too many parked), SEMA_EKEYMISMATCH,
 * SEMA_ENOTSUP (a server whose back end has no tickets), ... */
SEMA_EXTERN int sema_client_ticket_take(sema_client_t *c, const char *name,
                                        const sema_ticket_opts_t *opts, sema_ticket_t *t,
                                        sema_client_error_t *err);

/* A ticket on several semaphores (sema_client_ticket_take_all). `ticket` is the ticket: its
 * name and weight are those of the first part, its position, ahead_weight and estimate
 * those of the line where it stands furthest back, and once granted its lease is the one
 * lease on all the parts (renewed, kept alive and released as any lease). `parts` are its
 * semaphores in the order asked, each with its weight; their fences are 0 while it waits
 * and the lease's fences once granted. Plain data. */
typedef struct {
    sema_ticket_t ticket;
    size_t nparts;
    sema_lease_part_t parts[SEMA_CLIENT_PARTS_MAX];
} sema_multi_ticket_t;

/* POST /v1/tickets: a place in the line of every one of `parts` (1 to SEMA_CLIENT_PARTS_MAX,
 * each named once; a weight of 0 is 1) at once, holding nothing until it is granted on all
 * of them in one lease, as sema_client_acquire_all() is; opts as for
 * sema_client_ticket_take() (its weight is unused; may be NULL). On 0, *t is the ticket,
 * waiting or granted already. Read it with sema_client_ticket_get_all() (or
 * sema_client_ticket_get(), which shows its first part), leave it with
 * sema_client_ticket_leave(). The returns of sema_client_ticket_take(); SEMA_EINVAL also for
 * no parts, too many, or a semaphore named twice, SEMA_ENOENT when one of them does not
 * exist, SEMA_ENOTSUP from a back end without it. */
SEMA_EXTERN int sema_client_ticket_take_all(sema_client_t *c, const sema_client_part_t *parts,
                                            size_t nparts, const sema_ticket_opts_t *opts,
                                            sema_multi_ticket_t *t, sema_client_error_t *err);

/* GET /v1/tickets/{id}: the ticket now (wait_ms 0), or a long poll (wait_ms > 0, at most 5
 * minutes) that answers when its status changes, when its position changes (checked once
 * per poll interval), or after wait_ms. Every read keeps a waiting ticket in line, and the
 * first read that shows a grant collects it. SEMA_EGONE once the ticket has ended (it left
 * the line, its keepalive passed, its semaphore went away, or its lease ended: the message
 * says which), SEMA_ENOENT for an id never seen. A ticket on several semaphores reads as its
 * first part (sema_client_ticket_get_all() has them all). */
SEMA_EXTERN int sema_client_ticket_get(sema_client_t *c, const char *id, int64_t wait_ms,
                                       sema_ticket_t *t, sema_client_error_t *err);

/* sema_client_ticket_get() into a ticket with its parts: those of a ticket on several
 * semaphores, or the one semaphore of any other ticket (nparts 1). Same returns. */
SEMA_EXTERN int sema_client_ticket_get_all(sema_client_t *c, const char *id, int64_t wait_ms,
                                           sema_multi_ticket_t *t, sema_client_error_t *err);

/* DELETE /v1/tickets/{id}: leave the line (those behind move up); a granted ticket's lease
 * is released. Retried after a network error or a 503, as a release is (a repeat that finds
 * it ended counts as done). SEMA_EGONE when it had ended already, SEMA_ENOENT. */
SEMA_EXTERN int sema_client_ticket_leave(sema_client_t *c, const char *id,
                                         sema_client_error_t *err);

/* ---- the legacy API (the original semaphore service's five routes) --------------------- */

/* POST /semaphore {"name","value"}: create a legacy semaphore (capacity = value >= 0).
 * SEMA_EEXIST when the name exists. */
SEMA_EXTERN int sema_client_legacy_create(sema_client_t *c, const char *name, int64_t value,
                                          sema_client_error_t *err);

/* POST /semaphore/up, POST /semaphore/down, GET /semaphore/value/{name}: *value (may be
 * NULL) receives the value after the call. down fails with SEMA_EBUSY when the value is 0
 * (or v1 waiters are queued); all three SEMA_ENOENT for an unknown name. */
SEMA_EXTERN int sema_client_up(sema_client_t *c, const char *name, int64_t *value,
                               sema_client_error_t *err);
SEMA_EXTERN int sema_client_down(sema_client_t *c, const char *name, int64_t *value,
                                 sema_client_error_t *err);
SEMA_EXTERN int sema_client_value(sema_client_t *c, const char *name, int64_t *value,
                                  sema_client_error_t *err);

/* DELETE /semaphore/{name}. */
SEMA_EXTERN int sema_client_legacy_delete(sema_client_t *c, const char *name,
                                          sema_client_error_t *err);

/* ---- keep-alive ---------------------------------------------------------------------- */

/* Called once, from the keep-alive thread, when the lease is lost: `reason` is
 * SEMA_EEXPIRED, SEMA_EREVOKED, SEMA_ESTALE, SEMA_ECANCELED, SEMA_ENOENT (what the server
 * said), or, when renewals kept failing until the lease's local deadline, the last failure
 * (SEMA_ECONNREFUSED: unreachable; SEMA_ETIMEDOUT: no reply; SEMA_ESHUTDOWN, SEMA_EUNAVAIL,
 * SEMA_EIO: the server could not renew). `lease` is the last known state, borrowed. The callback
 * must not call sema_lease_keepalive_stop() on its own keep-alive; it may signal another thread. */
typedef void (*sema_lease_lost_cb)(void *arg, const sema_lease_t *lease, int reason);

/* Renew `lease` (copied) in a background thread every ttl/3 (and at the latest ttl/10 before
 * its local deadline); after a failed renew it retries every ttl/10 (at least 50 ms) until
 * the local deadline, then reports the loss.
 * `c` is borrowed and must outlive the keep-alive. `lost` may be NULL. Returns 0, SEMA_EINVAL
 * (no id or ttl_ms <= 0), SEMA_ENOMEM or SEMA_EUNAVAIL (thread creation failed). */
SEMA_EXTERN int sema_lease_keepalive_start(sema_keepalive_t **out, sema_client_t *c,
                                           const sema_lease_t *lease, sema_lease_lost_cb lost,
                                           void *arg);

/* 0 while the lease is alive, else the loss reason. Thread-safe, never blocks. */
SEMA_EXTERN int sema_lease_keepalive_status(sema_keepalive_t *ka);

/* The number of successful renewals so far. Thread-safe, never blocks. */
SEMA_EXTERN uint64_t sema_lease_keepalive_renewals(sema_keepalive_t *ka);

/* Copy the latest lease state (after renewals) into *out. Thread-safe. */
SEMA_EXTERN void sema_lease_keepalive_lease(sema_keepalive_t *ka, sema_lease_t *out);

/* Stop renewing, join the thread, and, when `release` is non-zero and the lease was not
 * lost, release the lease. Frees `ka` (NULL is fine: returns 0). Returns 0, the loss reason
 * when the lease had been lost, or the release's error. Blocks for at most one request. */
SEMA_EXTERN int sema_lease_keepalive_stop(sema_keepalive_t *ka, int release,
                                          sema_client_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_CLIENT_H */
