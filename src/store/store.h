/* SPDX-License-Identifier: MIT */
/* store.h - semad's durable store interface: the engine writes ahead through it and
 * loads from it at start. The embedded store is a journal (store_journal.c) that every
 * commit appends to, in front of an SQLite database in WAL mode (store_sqlite.c) that
 * checkpoints bring up to date.
 *
 * Threading: called from semad's loop thread, except store_commit_run, which may run on
 * another thread while the loop goes on recording mutations (nothing else may be called
 * with the same store between store_commit_start and store_commit_finish but the
 * store_put_*, store_del_*, store_pending and store_stats calls).
 *
 * Group commit: the engine calls the store_put_* and store_del_* functions as it mutates
 * state; they only record the mutation (copied). Then store_commit_start takes everything
 * recorded so far as one transaction, store_commit_run writes and syncs it (one sync), and
 * store_commit_finish ends it; only then does the engine send the replies of the requests
 * whose mutations it carried. While one transaction runs, the next one is recorded. If a
 * commit fails, nothing of that transaction is in the store; the engine drops what is
 * recorded after it (store_discard_pending) and restores its state from the store. */
#ifndef SEMAD_STORE_H
#define SEMAD_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

typedef enum {
    STORE_STRICT,  /* every commit syncs (fdatasync) before replies go out */
    STORE_RELAXED, /* commits are written but synced less often (see docs/durability.md) */
    STORE_NONE     /* no store: state only in memory (the engine gets store == NULL) */
} store_durability_t;

/* A semaphore as stored. `available` matters for legacy counters (up can raise it above
 * capacity); for v1 semaphores it is derived from the leases on load. */
typedef struct {
    const char *name;
    uint64_t capacity;
    int64_t available; /* legacy value; for v1 semaphores capacity - held */
    uint64_t fence;    /* last fencing token handed out; never goes backwards */
    int legacy;        /* created through POST /semaphore */
    int64_t created_at_ms;
    uint64_t tenant_max;             /* the most one tenant may hold; 0: no cap */
    uint64_t rate_per_s, rate_burst; /* units granted per second and the bucket; 0: none */
} store_sem_t;

/* One further semaphore of a lease or ticket on several: its name, weight, and the lease's
 * fence (a ticket's place) on it. */
typedef struct {
    const char *sem;
    uint64_t weight;
    uint64_t seq; /* a lease's fence, a ticket's place */
} store_part_t;

/* A lease as stored. Times are Unix epoch milliseconds (wall clock). */
typedef struct {
    const char *id;
    const char *sem; /* semaphore name, or lock key for keyed locks */
    uint64_t weight;
    const char *owner;    /* may be NULL */
    const char *idem_key; /* may be NULL */
    uint64_t fence;
    int64_t ttl_ms;
    int64_t acquired_at_ms;
    int64_t expires_at_ms;
    int is_lock;           /* 0 a semaphore's lease; a keyed lock's: 1 shared, 2 exclusive (stores
                              written before the mode was kept have 1 and an exclusive weight R > 1) */
    const char *principal; /* the token that took it (semad --auth), may be NULL */
    int created; /* this write is its grant: the store holds no row of it yet (so when it ends
                    before the next checkpoint, neither write reaches the database) */
    const char *tenant;        /* may be NULL */
    const store_part_t *parts; /* a lease on several semaphores: those after `sem` */
    size_t nparts;             /* (at most STORE_PARTS_MAX) */
} store_lease_t;

#define STORE_PARTS_MAX 64

/* A ticket as stored: its place in its semaphore's queue, or (lease_id set) the lease it was
 * granted. Times are Unix epoch milliseconds. */
typedef struct {
    const char *id;
    const char *sem;
    uint64_t seq; /* its place: tickets of a semaphore load in this order */
    uint64_t weight;
    const char *owner;    /* may be NULL */
    const char *idem_key; /* may be NULL */
    const char *lease_id; /* NULL while waiting */
    int64_t ttl_ms, keepalive_ms, created_at_ms;
    int collected;             /* a reply showed its grant */
    const char *principal;     /* the token that took it (semad --auth), may be NULL */
    const char *tenant;        /* may be NULL */
    const store_part_t *parts; /* a ticket on several semaphores: those after `sem` */
    size_t nparts;
} store_ticket_t;

/* Open (creating if needed) the store in directory `dir`, taking its lock file. On failure
 * returns a SEMA_E* code and writes a message naming the file and the problem into errbuf:
 * SEMA_EBUSY (another semad holds the lock; the message names its pid), SEMA_ECORRUPT,
 * SEMA_EVERSION (another format version), SEMA_EACCES, SEMA_EIO. */
int store_open(store_t **out, const char *dir, store_durability_t durability, char *errbuf,
               size_t errlen);

/* Close and release the lock file. NULL is fine. */
void store_close(store_t *st);

/* The mode the store was opened with. */
store_durability_t store_durability(const store_t *st);

/* Call on_sem for every semaphore (by name), then on_lease for every lease (by semaphore,
 * then fence: grant order) with borrowed records, valid during the call. Records are as
 * stored: the engine applies expires_at = max(stored, now + ttl_ms) itself. Returns 0 or a
 * SEMA_E* code with a message in errbuf. */
int store_load(store_t *st, void (*on_sem)(void *arg, const store_sem_t *sem),
               void (*on_lease)(void *arg, const store_lease_t *lease), void *arg, char *errbuf,
               size_t errlen);

/* Call on_ticket for every ticket, by semaphore then place (borrowed record). After
 * store_load. Returns 0 or a SEMA_E* code with a message in errbuf. */
int store_load_tickets(store_t *st, void (*on_ticket)(void *arg, const store_ticket_t *t),
                       void *arg, char *errbuf, size_t errlen);

/* Record a mutation for the next transaction. Return 0 or SEMA_ENOMEM; an error here makes
 * the commit carrying it fail too. */
int store_put_sem(store_t *st, const store_sem_t *sem);
int store_del_sem(store_t *st, const char *name); /* delete its leases first */
int store_put_lease(store_t *st, const store_lease_t *lease);
int store_del_lease(store_t *st, const char *id);
int store_put_ticket(store_t *st, const store_ticket_t *t);
int store_del_ticket(store_t *st, const char *id);
/* No fence at or below `fence` may be handed out again (kept as the max with what is
 * stored; store_max_fence includes it). For fences whose lease rows go
 * away with no semaphore row to carry them (keyed locks). */
int store_put_fence_floor(store_t *st, uint64_t fence);

/* True when recorded mutations wait for a commit. */
int store_pending(const store_t *st);

/* How many mutations are recorded and not yet started. */
uint64_t store_backlog(const store_t *st);

/* Take every recorded mutation as the next transaction. Returns 1 if it did, 0 if nothing
 * is recorded or a transaction is still running (one at a time). */
int store_commit_start(store_t *st);

/* Whether the started transaction will take long: a checkpoint is due with it, or a test
 * injected a delay. The engine runs a quick one on its loop and a slow one on a thread. */
int store_commit_slow(const store_t *st);

/* Write and commit the started transaction (one sync in STRICT); any thread. Returns 0, or
 * SEMA_EIO (disk full, read-only, I/O error, or a mutation could not be recorded) with the
 * whole transaction rolled back and a message naming the file and the cause in errbuf. The
 * store stays usable: later commits succeed once the cause is gone. */
int store_commit_run(store_t *st, char *errbuf, size_t errlen);

/* End the started transaction with store_commit_run's result (loop thread). */
void store_commit_finish(store_t *st, int rc);

/* Drop the mutations recorded and not yet started (after a failed commit). */
void store_discard_pending(store_t *st);

/* store_commit_start, store_commit_run and store_commit_finish in one call: 0 when nothing
 * is recorded. */
int store_commit(store_t *st, char *errbuf, size_t errlen);

/* The highest fence the store knows: of live and deleted semaphores, of leases, and the
 * fence floor (so fences handed out after a restart are above every one before). Reads
 * what is committed: not while a transaction runs. Returns 0 or SEMA_EIO/SEMA_ENOMEM. */
int store_max_fence(store_t *st, uint64_t *fence);

/* Successful and failed commits since store_open(), for metrics. */
void store_stats(const store_t *st, uint64_t *commits, uint64_t *commit_failures);

/* Whether the journal holds changes the database does not have yet. */
int store_checkpoint_pending(const store_t *st);

/* Write what the journal holds to the database and start the journal over (no commit may
 * run meanwhile). The engine calls it when commits pause, so the database alone (a backup
 * of it, say) is never much behind. Returns 0 or SEMA_EIO with a message. */
int store_checkpoint(store_t *st, char *errbuf, size_t errlen);

/* Checkpoints since store_open(): those that wrote the journal's content to the database,
 * and those that failed (the journal keeps it; the next one tries again). */
void store_checkpoint_stats(const store_t *st, uint64_t *checkpoints, uint64_t *failures);

/* Why the last failed checkpoint failed (a message naming the file), or "". */
const char *store_checkpoint_error(const store_t *st);

/* Testing: make the next `n` store_commit() calls fail with `code` (SEMA_EIO when 0),
 * rolled back exactly like a real write failure. */
void store_inject_commit_failures(store_t *st, int n, int code);

/* Testing: after `after` more writes to the journal, every one fails with errno `err` (0:
 * they work again), as a failing disk would make them. For the whole process. */
void store_inject_journal_errno(int err, int after);

/* Testing: the next commit sleeps `ms` before it writes (a slow disk). */
void store_inject_commit_delay(store_t *st, int ms);

/* Verify a store offline (integrity, version, invariants) without taking it over.
 * Writes a report to `out` (a FILE*), returns 0 if sound. Used by `semad --check DIR`. */
#include <stdio.h>
int store_check(const char *dir, FILE *out);

#endif /* SEMAD_STORE_H */
