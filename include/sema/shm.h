/* SPDX-License-Identifier: MIT */
/* shm.h - crash-safe weighted FIFO semaphores shared by the processes of one machine. */
#ifndef SEMA_SHM_H
#define SEMA_SHM_H

#include <stdint.h>

#include "sema/error.h"
#include "sema/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A semaphore lives in /dev/shm/sema.NAME. Every process opens it by name and gets its own
 * handle. A handle is one participant: it holds units, and it waits for at most one request
 * at a time. Use a handle from one thread at a time (open one handle per thread; handles are
 * cheap), except sema_shm_cancel(), which may be called from any thread. A handle does not
 * survive fork(): in the child every call but sema_shm_close() returns SEMA_EINVAL.
 *
 * Units held through a handle whose process dies (SIGKILL included) come back without a
 * release; see docs/shm.md for exactly when. Units belong to the process until it exits
 * (exec() included) or releases them. No call is async-signal-safe. */
typedef struct sema_shm sema_shm_t;

/* Longest NAME (characters [A-Za-z0-9._-], not starting with '.'). */
#define SEMA_SHM_NAME_MAX 200
/* Handles (participants) per semaphore. Past it, acquire fails SEMA_ELIMIT. Every holder
 * and every waiter is one handle, so this also caps holders and waiters. */
#define SEMA_SHM_MAX_SLOTS 128

/* sema_shm_open() flags. */
enum {
    /* Accept an existing semaphore whatever its capacity (else a different capacity is
     * SEMA_EEXIST). */
    SEMA_SHM_ADOPT = 1,
    /* Open only an existing semaphore (SEMA_ENOENT if none); implies SEMA_SHM_ADOPT and
     * ignores `capacity`. */
    SEMA_SHM_EXISTING = 2,
};

/* Open the semaphore NAME, creating it with `capacity` units if it does not exist.
 * `mode` is the file's permission bits when created (0: 0600); it is applied exactly,
 * ignoring the umask. Two processes creating the same name at once agree on one object.
 * Returns 0 and a new handle in *out (free it with sema_shm_close()), or SEMA_EINVAL
 * (bad name, capacity 0 or > 2^62), SEMA_ENAMETOOLONG, SEMA_ENOENT, SEMA_EEXIST (other
 * capacity), SEMA_EACCES (permissions, or a semaphore created in another PID namespace:
 * liveness checks go by pid), SEMA_EVERSION (made by another sema format), SEMA_ECORRUPT
 * (truncated or not a sema file), SEMA_ENOMEM or SEMA_EIO. Allocates; may block briefly. */
SEMA_EXTERN int sema_shm_open(const char *name, uint64_t capacity, int flags, unsigned mode,
                              sema_shm_t **out);

/* Release what the handle holds, withdraw it, unmap and free it. NULL is a no-op.
 * Never blocks for long (takes the internal lock). */
SEMA_EXTERN void sema_shm_close(sema_shm_t *h);

/* Remove NAME from /dev/shm. Open handles keep working on the old object; later opens
 * create a new one. Returns 0, SEMA_ENOENT, SEMA_EINVAL/ENAMETOOLONG (bad name) or
 * SEMA_EACCES. */
SEMA_EXTERN int sema_shm_unlink(const char *name);

/* Take `weight` units, waiting up to `timeout_ms` (0: never wait, <0: forever) in strict
 * FIFO order with every process. Returns 0, SEMA_EBUSY (timeout 0 and not grantable now,
 * including when others are queued), SEMA_ETIMEDOUT, SEMA_ECANCELED (sema_shm_cancel()),
 * SEMA_EINVAL (weight 0, weight > capacity, a handle after fork), SEMA_ELIMIT (no free
 * slot) or SEMA_ECORRUPT. Uncontended, it is a few atomic operations and no system call.
 * Never allocates. */
SEMA_EXTERN int sema_shm_acquire(sema_shm_t *h, uint64_t weight, int64_t timeout_ms);

/* sema_shm_acquire(h, weight, 0). */
SEMA_EXTERN int sema_shm_try_acquire(sema_shm_t *h, uint64_t weight);

/* Give back `weight` of the units this handle holds (0: all of them). Returns 0,
 * SEMA_ESTALE (holds nothing), SEMA_EOVERFLOW (more than held; nothing released) or
 * SEMA_EINVAL. Wakes the waiters that now fit. Never blocks for long; never allocates. */
SEMA_EXTERN int sema_shm_release(sema_shm_t *h, uint64_t weight);

/* Withdraw the request this handle is waiting on; meant to be called from another thread
 * (not from a signal handler: it takes the internal lock). The waiting call returns
 * SEMA_ECANCELED unless it was granted first. Returns 0, or SEMA_ENOENT if nothing is
 * queued. */
SEMA_EXTERN int sema_shm_cancel(sema_shm_t *h);

/* Units held through this handle (read without locking). */
SEMA_EXTERN uint64_t sema_shm_held(const sema_shm_t *h);
/* The semaphore's capacity. */
SEMA_EXTERN uint64_t sema_shm_capacity(const sema_shm_t *h);

typedef struct {
    int32_t pid;      /* the holding (or waiting) process */
    uint64_t weight;  /* units held (or wanted) */
    int64_t since_ms; /* Unix time in ms when it started holding (or waiting); ~4 ms grain */
} sema_shm_entry_t;

typedef struct {
    uint64_t capacity;
    uint64_t available;
    uint64_t held;      /* sum of holders[].weight */
    uint64_t waiting;   /* sum of waiters[].weight (UINT64_MAX if it does not fit) */
    uint32_t nholders;  /* entries used in holders[] */
    uint32_t nwaiters;  /* entries used in waiters[], in FIFO order (head first) */
    uint64_t reclaimed; /* units returned from dead processes since creation */
    sema_shm_entry_t holders[SEMA_SHM_MAX_SLOTS];
    sema_shm_entry_t waiters[SEMA_SHM_MAX_SLOTS];
} sema_shm_stats_t;

/* A consistent snapshot. Reclaims dead holders and waiters first (so it is also a way to
 * force crash recovery). Returns 0 or SEMA_ECORRUPT. Takes the internal lock. */
SEMA_EXTERN int sema_shm_stats(sema_shm_t *h, sema_shm_stats_t *out);

/* Call fn(name, ud) for every semaphore in /dev/shm, in no particular order, until it
 * returns nonzero (that value is returned). Returns 0 when done, or SEMA_EIO/SEMA_EACCES if
 * /dev/shm cannot be read. */
SEMA_EXTERN int sema_shm_foreach(int (*fn)(const char *name, void *ud), void *ud);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_SHM_H */
