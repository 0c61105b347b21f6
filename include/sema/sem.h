/* SPDX-License-Identifier: MIT */
/* sem.h - the in-process weighted semaphore: strict FIFO, timeouts, cancellation, permits. */
#ifndef SEMA_SEM_H
#define SEMA_SEM_H

#include <stdint.h>

#include "sema/version.h"
#include "sema/error.h"
#include "sema/cancel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weighted semaphore of `capacity` units shared by the threads of one process.
 *
 * Admission is strict FIFO with head-of-line blocking: a request is granted only when it is
 * at the head of the queue and its weight fits; a release grants as many head requests as
 * now fit, in order, and hands the units straight to them. A try (timeout 0, or a deadline
 * that has already passed) never waits and never jumps the queue: it succeeds only if nobody
 * is queued and the weight fits now. Weight 0 or above the capacity fails with SEMA_EINVAL
 * at once. docs/semantics.md has the whole contract.
 *
 * Capacities and weights are 64-bit, up to SEMA_SEM_MAX_CAPACITY. Acquire and release never
 * allocate. Uncontended acquire and release are one atomic compare-and-swap each (no lock,
 * no system call); waiting threads spin for about 3 µs, then sleep on a futex of their own.
 * Every function is thread-safe. */
typedef struct sema_sem sema_sem_t;

/* The largest capacity (2^56 - 1): the fast path packs the count, a flag and a resize
 * generation in one 64-bit word. */
#define SEMA_SEM_MAX_CAPACITY ((UINT64_C(1) << 56) - 1)

/* A deadline that never comes (for the *_until calls). */
#define SEMA_DEADLINE_NONE INT64_MAX

/* Returned (positive) by the callback acquires when the request was queued. */
#define SEMA_SEM_QUEUED 1

/* Make a semaphore with `capacity` units, all available. *out is owned by the caller (free
 * with sema_sem_free). Returns 0, SEMA_EINVAL (out NULL, capacity 0 or above
 * SEMA_SEM_MAX_CAPACITY) or SEMA_ENOMEM. */
SEMA_EXTERN int sema_sem_new(sema_sem_t **out, uint64_t capacity);

/* Free a semaphore. NULL is fine. Nothing may be waiting on it (that aborts with a message);
 * units still held are simply forgotten. */
SEMA_EXTERN void sema_sem_free(sema_sem_t *sem);

/* Take `weight` units, waiting up to `timeout_ms` (0: try once, never wait; < 0: forever).
 * Returns 0 (the caller holds the units), SEMA_EBUSY (timeout 0 and not grantable now),
 * SEMA_ETIMEDOUT, SEMA_ECANCELED (closed) or SEMA_EINVAL (NULL, weight 0, weight above the
 * capacity). Blocks; never allocates. */
SEMA_EXTERN int sema_sem_acquire(sema_sem_t *sem, uint64_t weight, int64_t timeout_ms);

/* sema_sem_acquire with timeout 0: never blocks. Same returns. */
SEMA_EXTERN int sema_sem_try_acquire(sema_sem_t *sem, uint64_t weight);

/* Take `weight` units, waiting until `deadline_ns` on the monotonic clock (see
 * sema_sem_now_ns; SEMA_DEADLINE_NONE: no deadline) or until `cancel` fires (NULL: no
 * token). A deadline already passed makes it a try: granted only if nobody is queued and the
 * weight fits, else SEMA_EBUSY (never SEMA_ETIMEDOUT without waiting). A token that already
 * fired fails SEMA_ECANCELED at once. Returns 0, SEMA_EBUSY, SEMA_ETIMEDOUT, SEMA_ECANCELED
 * (token fired or semaphore closed) or SEMA_EINVAL. The token is borrowed for the call.
 * Blocks; never allocates. */
SEMA_EXTERN int sema_sem_acquire_until(sema_sem_t *sem, uint64_t weight, int64_t deadline_ns,
                                       sema_cancel_t *cancel);

/* Give back `weight` units. Waiters now at the head whose weight fits are granted in FIFO
 * order and woken (callback waiters' callbacks run in this thread before it returns, or
 * right after the callback it is called from). Returns 0, SEMA_EINVAL (NULL, weight 0) or
 * SEMA_EOVERFLOW (more than is held, i.e. than capacity - available; nothing changes).
 * Works after sema_sem_close. Never blocks (beyond a short internal lock), never allocates,
 * and does not touch the semaphore after a waiter it woke could have freed it. */
SEMA_EXTERN int sema_sem_release(sema_sem_t *sem, uint64_t weight);

/* The monotonic clock the deadlines use, in nanoseconds (CLOCK_MONOTONIC). */
SEMA_EXTERN int64_t sema_sem_now_ns(void);

/* ---- Callback acquire, for event loops ------------------------------------------------ */

typedef struct sema_sem_waiter sema_sem_waiter_t;

/* Called once per queued request: status 0 (granted: the callee now holds the units),
 * SEMA_ECANCELED (the semaphore was closed) or SEMA_EINVAL (a shrink left the weight above
 * the capacity). It runs in the thread that settled the request (a releaser, a closer, a
 * resizer, a canceller), with no libsema lock held: it may call any sema_sem_* function,
 * including on the same semaphore, but should not block (callbacks queued behind it in that
 * thread wait for it). Callbacks triggered from inside a callback run after it
 * returns, in the same thread (no recursion, so no stack overflow however long the chain). */
typedef void (*sema_sem_cb)(sema_sem_waiter_t *waiter, int status, void *arg);

/* A queued request's storage, owned by the caller (embed it anywhere). Its fields are
 * private. It must stay valid from the call that queues it until its callback has started,
 * or until sema_sem_cancel_async returned 0 for it. */
struct sema_sem_waiter {
    /* What a releaser touches comes first (one cache line when the waiter is aligned). */
    struct sema_sem_waiter *prev_, *next_;
    uint64_t weight_;
    uint64_t enq_seq_;    /* order of queueing (per semaphore) */
    uint64_t settle_seq_; /* order of settling, same counter (tests check FIFO with these) */
    uint32_t state_;
    int32_t status_;
    uint32_t kind_;
    uint32_t queued_;
    sema_sem_cb cb_;
    void *arg_;
    void *reserved_[2];
};

/* Ask for `weight` units without blocking. Returns 0 (granted now: the caller holds the
 * units and cb will not run), SEMA_SEM_QUEUED (queued: cb(waiter, status, arg) runs exactly
 * once later, unless sema_sem_cancel_async withdraws it first), or SEMA_EINVAL (NULL sem,
 * waiter or cb, weight 0 or above capacity) / SEMA_ECANCELED (closed) — and then cb never
 * runs (SEMA_EINVAL also when `waiter` is still queued on this semaphore). Never allocates. */
SEMA_EXTERN int sema_sem_acquire_async(sema_sem_t *sem, uint64_t weight, sema_sem_waiter_t *waiter,
                                       sema_sem_cb cb, void *arg);

/* Withdraw a request queued by sema_sem_acquire_async or sema_sem_wait_idle_async, and
 * re-run admission for the requests behind it. Returns 0 (withdrawn: its callback never
 * runs and it got no units; the waiter's memory is the caller's again) or SEMA_ENOENT (too
 * late: it was already settled — its callback has run, runs now or is about to run exactly
 * once, and if granted the callback owns the units — or it was never queued on this
 * semaphore). SEMA_EINVAL for NULL. Never blocks. */
SEMA_EXTERN int sema_sem_cancel_async(sema_sem_t *sem, sema_sem_waiter_t *waiter);

/* ---- Permits ---------------------------------------------------------------------------- */

/* Units held, as an object: release it once; later releases are detected. Treat the fields
 * as private and do not copy a held permit (copies are not tracked). */
typedef struct sema_permit {
    sema_sem_t *sem_; /* NULL once released */
    uint64_t weight_; /* units held */
    uint64_t magic_;  /* SEMA__PERMIT_HELD while held */
} sema_permit_t;

#define SEMA_PERMIT_INIT                                                                           \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

/* Acquire as sema_sem_acquire, into *permit (caller's memory). On failure *permit is
 * empty (releasing it gives SEMA_ESTALE). Same returns as sema_sem_acquire. */
SEMA_EXTERN int sema_sem_acquire_permit(sema_sem_t *sem, uint64_t weight, int64_t timeout_ms,
                                        sema_permit_t *permit);

/* Wrap `weight` units the caller already holds on `sem` in *permit (e.g. after a callback
 * grant). Returns 0 or SEMA_EINVAL. Never fails otherwise. */
SEMA_EXTERN int sema_permit_adopt(sema_permit_t *permit, sema_sem_t *sem, uint64_t weight);

/* Give a permit's units back. Returns 0 the first time; SEMA_ESTALE if it was already
 * released or never held anything (nothing changes); SEMA_EINVAL for NULL. Safe when two
 * threads race to release the same permit: exactly one gets 0. Never blocks long. */
SEMA_EXTERN int sema_permit_release(sema_permit_t *permit);

/* 1 if the permit holds units, else 0. */
SEMA_EXTERN int sema_permit_held(const sema_permit_t *permit);

/* For SEMA_PERMIT_SCOPED: releases the permit if it is held, ignores it otherwise. */
SEMA_EXTERN void sema_permit_cleanup(sema_permit_t *permit);

/* A permit released automatically when the enclosing block ends (GCC/Clang cleanup
 * attribute, the C form of `using`):
 *
 *     {
 *         SEMA_PERMIT_SCOPED(p);
 *         if (sema_sem_acquire_permit(sem, 2, -1, &p) != 0)
 *             return;
 *         ... work under 2 units; any return or the block's end releases them ...
 *     }
 */
#define SEMA_PERMIT_SCOPED(name)                                                                   \
    __attribute__((cleanup(sema_permit_cleanup))) sema_permit_t name = SEMA_PERMIT_INIT

/* ---- Run under the semaphore ------------------------------------------------------------ */

typedef int (*sema_sem_fn)(void *arg);

/* Acquire `weight` units (as sema_sem_acquire with timeout_ms), run fn(arg), release them
 * (even though fn's result is an error). Returns the acquire's code if it failed (fn did not
 * run), else 0 with fn's return value in *fn_result (may be NULL); SEMA_EOVERFLOW (with
 * *fn_result set) if fn itself gave back units it did not hold. Blocks. */
SEMA_EXTERN int sema_sem_with(sema_sem_t *sem, uint64_t weight, int64_t timeout_ms, sema_sem_fn fn,
                              void *arg, int *fn_result);

/* A function bound to a semaphore, a weight and a timeout, to be called later under it
 * (the `wrap` of the TypeScript semaphore libraries). Plain data: copy it freely; it
 * borrows the semaphore. */
typedef struct sema_sem_wrapped {
    sema_sem_t *sem;
    uint64_t weight;
    int64_t timeout_ms;
    sema_sem_fn fn;
} sema_sem_wrapped_t;

/* Fill *out. Returns 0 or SEMA_EINVAL (NULL out/sem/fn, weight 0 or above capacity). */
SEMA_EXTERN int sema_sem_wrap(sema_sem_wrapped_t *out, sema_sem_t *sem, uint64_t weight,
                              int64_t timeout_ms, sema_sem_fn fn);

/* Call a wrapped function: sema_sem_with(w->sem, w->weight, w->timeout_ms, w->fn, arg,
 * fn_result). */
SEMA_EXTERN int sema_sem_call(const sema_sem_wrapped_t *wrapped, void *arg, int *fn_result);

/* ---- Whole-semaphore operations --------------------------------------------------------- */

/* Wait until the semaphore is idle (`wait()` of the TypeScript weighted semaphore): queues
 * in FIFO like an acquire of the whole capacity and returns once every request queued before
 * it was granted and all units are back; it then holds nothing (the units stay in the pool).
 * Timeout as sema_sem_acquire (0: SEMA_EBUSY unless idle now with nobody queued). Returns 0,
 * SEMA_EBUSY, SEMA_ETIMEDOUT, SEMA_ECANCELED (closed) or SEMA_EINVAL. Blocks. */
SEMA_EXTERN int sema_sem_wait_idle(sema_sem_t *sem, int64_t timeout_ms);

/* sema_sem_wait_idle with an absolute deadline and a cancel token, as
 * sema_sem_acquire_until. */
SEMA_EXTERN int sema_sem_wait_idle_until(sema_sem_t *sem, int64_t deadline_ns,
                                         sema_cancel_t *cancel);

/* sema_sem_wait_idle for event loops: returns 0 (idle now; cb will not run),
 * SEMA_SEM_QUEUED (cb runs once with status 0 when idle, or SEMA_ECANCELED if closed) or
 * SEMA_EINVAL / SEMA_ECANCELED (cb never runs). Withdraw with sema_sem_cancel_async. */
SEMA_EXTERN int sema_sem_wait_idle_async(sema_sem_t *sem, sema_sem_waiter_t *waiter, sema_sem_cb cb,
                                         void *arg);

/* Close: every queued request fails with SEMA_ECANCELED now, and every later acquire, try
 * and wait-idle too. Holders keep their units; releases keep working. Idempotent.
 * Returns 0 or SEMA_EINVAL. */
SEMA_EXTERN int sema_sem_close(sema_sem_t *sem);

/* Change the capacity. Growing adds the difference to the available units and grants the
 * queued requests that now fit. Shrinking never takes units from holders: available drops
 * (it may go negative, and requests wait until enough comes back), and every queued request
 * whose weight is now above the capacity fails with SEMA_EINVAL (the requests behind it are
 * then considered). Returns 0 or SEMA_EINVAL (NULL, capacity 0 or above
 * SEMA_SEM_MAX_CAPACITY). Never allocates. */
SEMA_EXTERN int sema_sem_set_capacity(sema_sem_t *sem, uint64_t capacity);

/* A consistent snapshot of a semaphore's counters. */
typedef struct sema_sem_stats {
    uint64_t capacity; /* declared size */
    int64_t available; /* capacity - held; negative after a shrink below what is held */
    uint64_t held;     /* units granted and not yet released */
    uint64_t waiters;  /* queued requests (wait-idle included) */
    uint64_t waiting;  /* total weight queued (a wait-idle counts as the capacity);
                          UINT64_MAX if that is 2^64 or more */
    int closed;        /* 1 after sema_sem_close */
} sema_sem_stats_t;

/* Fill *out. Returns 0 or SEMA_EINVAL. Takes the internal lock briefly. */
SEMA_EXTERN int sema_sem_stats(sema_sem_t *sem, sema_sem_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_SEM_H */
