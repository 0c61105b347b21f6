/* SPDX-License-Identifier: MIT */
/* keyed.h - keyed reader/writer lock: per-key shared/exclusive locks, writer-fair, FIFO. */
#ifndef SEMA_KEYED_H
#define SEMA_KEYED_H

#include <stddef.h>
#include <stdint.h>

#include "sema/version.h"
#include "sema/cancel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lock modes. */
#define SEMA_SHARED 1
#define SEMA_EXCLUSIVE 2

/* The longest key, in bytes (longer keys: SEMA_ENAMETOOLONG). */
#define SEMA_KEYED_KEY_MAX 65536
/* The default and largest number of shared holders of one key (R). */
#define SEMA_KEYED_READERS_MAX UINT32_MAX

/* The semantics, per key (design: an ephemeral weighted semaphore of
 * capacity R per key; shared takes weight 1, exclusive weight R):
 * - requests are served strictly in arrival order: a request is granted only
 *   when every earlier request for the key has been granted (or gave up) and
 *   its weight fits. So shared requests overlap unless an earlier exclusive is
 *   queued; an exclusive waits for the holders before it and runs alone;
 *   exclusives run in request order; a shared request made after an exclusive
 *   queued waits until that exclusive is done (writer-fair: readers never
 *   starve writers). At most R shared holders at once.
 * - a try (timeout 0) never queues and never jumps the queue.
 * - a timed-out or cancelled waiter leaves the queue at once and the requests
 *   behind it are re-examined (a queued exclusive that gives up lets the
 *   readers behind it in).
 * - a key's state is allocated when it gets its first holder or waiter and
 *   freed as soon as it has neither (waiters count; freed under the lock).
 *   One allocation per key (about 100 bytes plus the key beyond 40 bytes);
 *   each of the 64 stripes keeps up to 8 freed small entries for reuse.
 *   max_keys caps the number of keys with state at once.
 * - not reentrant: locking a key you hold in a conflicting mode deadlocks
 *   (or times out); there is no owner tracking.
 * Keys are byte strings compared with memcmp; the empty key (key_len 0, key
 * may then be NULL) is a valid key like any other. The hash is seeded per
 * instance but is not a keyed cryptographic hash: with keys from untrusted
 * input, set max_keys. */
typedef struct sema_keyed sema_keyed_t;

typedef struct sema_keyed_opts {
    size_t max_keys;      /* most keys with holders or waiters at once; 0: no cap */
    uint64_t max_readers; /* R, 1..SEMA_KEYED_READERS_MAX; 0: SEMA_KEYED_READERS_MAX */
} sema_keyed_opts_t;

/* A held lock: caller-owned (lives on the stack or in the caller's struct),
 * filled by sema_keyed_lock(). Zero-initialised (SEMA_KEYED_LOCK_INIT) it is
 * "not held". Do not copy a held handle: unlock through the one that was
 * filled. The fields are private. */
typedef struct sema_keyed_lock {
    sema_keyed_t *keyed_; /* NULL when not held */
    void *entry_;
    uint64_t weight_;
} sema_keyed_lock_t;

#define SEMA_KEYED_LOCK_INIT                                                                       \
    {                                                                                              \
        NULL, NULL, 0                                                                              \
    }

typedef struct sema_keyed_key_stats {
    uint64_t held;    /* weight held: shared holders, or R for an exclusive */
    uint64_t holders; /* shared holders, or 1 for an exclusive */
    uint64_t waiters; /* queued requests */
} sema_keyed_key_stats_t;

/* A task run under a key's lock by sema_keyed_with(). */
typedef int (*sema_keyed_fn)(void *arg);

/* Make a keyed lock with default options (no key cap, R =
 * SEMA_KEYED_READERS_MAX) in *out. Returns 0, SEMA_EINVAL (out NULL) or
 * SEMA_ENOMEM. Allocates the table (64 stripes). Thread-safe. */
SEMA_EXTERN int sema_keyed_new(sema_keyed_t **out);

/* The same with options (NULL: defaults). SEMA_EINVAL for max_readers above
 * SEMA_KEYED_READERS_MAX. */
SEMA_EXTERN int sema_keyed_new_opts(sema_keyed_t **out, const sema_keyed_opts_t *opts);

/* Free a keyed lock. NULL is fine. It must have no holders and no waiters
 * (close it, then let every holder unlock); freeing one that has aborts with
 * a message rather than leave dangling waiters. Threads whose requests were
 * failed by close (or a timeout or cancel) may still be returning from
 * sema_keyed_lock(): free waits (briefly) until they are out. */
SEMA_EXTERN void sema_keyed_free(sema_keyed_t *keyed);

/* Lock `key` (key_len bytes, copied) in `mode`, waiting up to `timeout_ms`
 * (0: try once, never queue; <0: forever; monotonic clock). On success fills
 * *out and returns 0; otherwise *out is "not held" and the return is
 * SEMA_EBUSY (try failed), SEMA_ETIMEDOUT, SEMA_ECANCELED (closed),
 * SEMA_ELIMIT (a new key would pass max_keys), SEMA_ENOMEM (a new key could
 * not be allocated), SEMA_ENAMETOOLONG, or SEMA_EINVAL (NULL keyed/out, NULL
 * key with key_len > 0, bad mode). A grant that lands just as the timeout
 * expires wins: the caller holds the lock. Allocates only for a key that has
 * no state yet. Blocks. Thread-safe. */
SEMA_EXTERN int sema_keyed_lock(sema_keyed_t *keyed, const void *key, size_t key_len, int mode,
                                int64_t timeout_ms, sema_keyed_lock_t *out);

/* sema_keyed_lock() that also gives up with SEMA_ECANCELED when `cancel`
 * fires (NULL: no token). A token that has already fired fails the call
 * before it looks at the key, even if the lock is free. */
SEMA_EXTERN int sema_keyed_lock_cancel(sema_keyed_t *keyed, const void *key, size_t key_len,
                                       int mode, int64_t timeout_ms, sema_cancel_t *cancel,
                                       sema_keyed_lock_t *out);

/* sema_keyed_lock() with timeout 0: never blocks, never queues. */
SEMA_EXTERN int sema_keyed_trylock(sema_keyed_t *keyed, const void *key, size_t key_len, int mode,
                                   sema_keyed_lock_t *out);

/* Release a lock and hand the key to the next requests that fit. Idempotent:
 * unlocking a handle that is not held (already unlocked, zeroed, or NULL) does
 * nothing. Never fails and never blocks for long; may free the key's state,
 * and may then move its stripe to a smaller table (an allocation: if it fails
 * the larger table is kept, and a later unlock tries again).
 * Once the key is handed to a waiter, neither the handle nor the keyed lock is
 * touched again (the new holder may free the handle's memory, or the keyed
 * lock). Thread-safe for different handles; one handle must not be unlocked
 * from two threads at once. */
SEMA_EXTERN void sema_keyed_unlock(sema_keyed_lock_t *lock);

/* 1 if the handle holds a lock, 0 if not (or NULL). */
SEMA_EXTERN int sema_keyed_held(const sema_keyed_lock_t *lock);

/* Run fn(arg) while holding `key` in `mode` (task style), then release the
 * lock whatever fn returned. Returns the lock's error if it was not obtained
 * (fn did not run), else 0 with fn's return value in *fn_result (may be
 * NULL) - the same shape as sema_sem_with(). SEMA_EINVAL for a NULL fn.
 * Blocks. */
SEMA_EXTERN int sema_keyed_with(sema_keyed_t *keyed, const void *key, size_t key_len, int mode,
                                int64_t timeout_ms, sema_keyed_fn fn, void *arg, int *fn_result);

/* For SEMA_KEYED_SCOPED: sema_keyed_unlock() under the name the cleanup
 * attribute wants. */
SEMA_EXTERN void sema_keyed_cleanup(sema_keyed_lock_t *lock);

/* A lock handle released automatically when the enclosing block ends (the C
 * form of a `using` declaration in JavaScript or C#):
 *
 *     {
 *         SEMA_KEYED_SCOPED(l);
 *         if (sema_keyed_lock(keyed, "doc:1", 5, SEMA_EXCLUSIVE, -1, &l) != 0)
 *             return;
 *         ... any return or the block's end unlocks ...
 *     }
 */
#define SEMA_KEYED_SCOPED(name)                                                                    \
    __attribute__((cleanup(sema_keyed_cleanup))) sema_keyed_lock_t name = SEMA_KEYED_LOCK_INIT

/* Close: every waiter fails now with SEMA_ECANCELED, and every later lock
 * call fails the same way. Holders keep their locks and unlock as usual.
 * Idempotent. NULL is fine. Thread-safe. */
SEMA_EXTERN void sema_keyed_close(sema_keyed_t *keyed);

/* The number of keys with holders or waiters. Lock-free snapshot (each
 * stripe's count is exact, the sum may be mid-change). 0 for NULL. */
SEMA_EXTERN size_t sema_keyed_count(const sema_keyed_t *keyed);

/* Counters of one key into *out. Returns 0, SEMA_ENOENT (the key has no
 * state: no holders, no waiters), or SEMA_EINVAL. Thread-safe. */
SEMA_EXTERN int sema_keyed_key_stats(sema_keyed_t *keyed, const void *key, size_t key_len,
                                     sema_keyed_key_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_KEYED_H */
