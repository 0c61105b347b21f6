/* SPDX-License-Identifier: MIT */
/* shm_sync.c - acquire, release and cancel on a shared-memory semaphore: a lock-free fast
 * path on one shared word, and a queued slow path under the internal lock.
 *
 * The fast path and crashes. A handle's slot records what it holds. The fast path sets the
 * slot's `busy` flag, moves the shared word with one CAS, updates `held`, clears `busy`. A
 * process killed between the CAS and the `held` update leaves `busy` set: the reaper then
 * cannot know whether the CAS happened, so it drops the dead slot and recounts `available`
 * as capacity minus what the live slots hold (waiting for live slots to leave their own
 * windows first; the word is frozen by then). The CAS is a release operation that follows
 * the `busy` store, and the reaper's freeze is an RMW on the same word, so a reaper that
 * freezes after our CAS sees `busy` set, and a CAS after the freeze fails.
 *
 * The fast path reads no clock (it would cost more than the rest of the pair): a lock-free
 * grant leaves the holder's `since_ms` at 0 and the next process that takes the internal
 * lock and looks at the slot (stats, a queued acquire, a waiter's periodic wake) stamps it. */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm_internal.h"

/* Sleeping waiters wake this often to reclaim units of dead processes. */
#define PERIOD_NS INT64_C(250000000)

#define NOINLINE __attribute__((noinline))

/* Not NULL and not inherited through fork(). Every handle's open ran sema__shm_self(). */
static inline int usable(const sema_shm_t *h)
{
    return h != NULL && h->pid == atomic_load_explicit(&sema__shm_pid, memory_order_relaxed);
}

static int fast_acquire(sema_shm_t *h, uint64_t w)
{
    shm__slot_t *s = &h->st->slots[h->slot];
    _Atomic uint64_t *word = &h->st->word;
    int ok = 0;
    atomic_store_explicit(&s->busy, 1, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit(word, memory_order_relaxed);
    while (!(cur & SHM__SLOW) && (cur >> 1) >= w) {
        if (atomic_compare_exchange_weak_explicit(word, &cur, cur - (w << 1), memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            ok = 1;
            break;
        }
    }
    if (ok) {
        uint64_t held = atomic_load_explicit(&s->held, memory_order_relaxed);
        if (held == 0) /* stamped by the next observer: a clock read costs ~40% here */
            atomic_store_explicit(&s->since_ms, 0, memory_order_relaxed);
        atomic_store_explicit(&s->held, held + w, memory_order_relaxed);
    }
    atomic_store_explicit(&s->busy, 0, memory_order_release);
    return ok;
}

static int fast_release(sema_shm_t *h, uint64_t w, uint64_t held)
{
    shm__slot_t *s = &h->st->slots[h->slot];
    _Atomic uint64_t *word = &h->st->word;
    int ok = 0;
    atomic_store_explicit(&s->busy, 1, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit(word, memory_order_relaxed);
    while (!(cur & SHM__SLOW)) {
        if (atomic_compare_exchange_weak_explicit(word, &cur, cur + (w << 1), memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            ok = 1;
            break;
        }
    }
    if (ok)
        atomic_store_explicit(&s->held, held - w, memory_order_relaxed);
    atomic_store_explicit(&s->busy, 0, memory_order_release);
    return ok;
}

/* Under the lock: give this handle a slot. */
static int claim_slot(sema_shm_t *h)
{
    shm__state_t *st = h->st;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++) {
            shm__slot_t *s = &st->slots[i];
            if (atomic_load(&s->pid) != 0)
                continue;
            uint64_t start;
            int32_t pid = sema__shm_self(&start);
            atomic_store(&s->start, start);
            atomic_store(&s->held, 0);
            atomic_store(&s->busy, 0);
            atomic_store(&s->wstate, SHM__IDLE);
            atomic_store_explicit(&s->pid, pid, memory_order_release);
            if (st->hiwater < (uint32_t)i + 1)
                st->hiwater = (uint32_t)i + 1;
            h->slot = i;
            return 0;
        }
        sema__shm_reap(st, 1); /* the table is full: free the slots of dead processes */
    }
    return SEMA_ELIMIT;
}

/* Under the lock: grant at once if nobody is queued and it fits. */
static int grant_now(shm__state_t *st, shm__slot_t *s, uint64_t w)
{
    uint64_t avail = sema__shm_avail(st);
    if (st->nwaiting != 0 || avail < w)
        return 0;
    sema__shm_set_avail(st, avail - w);
    uint64_t held = atomic_load(&s->held);
    if (held == 0)
        atomic_store(&s->since_ms, sema__shm_wall_ms());
    atomic_store(&s->held, held + w);
    return 1;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    (void)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* If the request settled, put its result in *rc, make the slot idle and return 1. */
static int settled(shm__slot_t *s, int *rc)
{
    uint32_t ws = atomic_load_explicit(&s->wstate, memory_order_acquire);
    if (ws == SHM__WAITING)
        return 0;
    *rc = ws == SHM__GRANTED ? 0 : SEMA_ECANCELED;
    atomic_store(&s->wstate, SHM__IDLE);
    return 1;
}

/* The deadline passed: leave the queue (unless granted meanwhile) and let followers in. */
static int give_up(sema_shm_t *h)
{
    shm__state_t *st = h->st;
    shm__slot_t *s = &st->slots[h->slot];
    int rc = sema__shm_lock(st);
    if (rc != 0)
        return rc;
    if (!settled(s, &rc)) {
        s->want = 0;
        st->nwaiting--;
        atomic_store(&s->wstate, SHM__IDLE);
        sema__shm_admit(st);
        rc = SEMA_ETIMEDOUT;
    }
    sema__shm_unlock(st);
    return rc;
}

/* A periodic wake: reclaim what dead processes hold (at most every PERIOD across all
 * waiters) and admit. Also covers a wake-up lost with a dying lock owner. */
static void periodic(shm__state_t *st)
{
    if (sema__shm_lock(st) != 0)
        return;
    if (sema__now_ns() - st->last_reap_ns >= PERIOD_NS)
        sema__shm_reap(st, 1);
    sema__shm_admit(st);
    sema__shm_unlock(st);
}

static int wait_loop(sema_shm_t *h, int64_t deadline)
{
    shm__slot_t *s = &h->st->slots[h->slot];
    int64_t next_tick = sema__now_ns() + PERIOD_NS;
    for (int rc;;) {
        if (settled(s, &rc))
            return rc;
        int64_t now = sema__now_ns();
        if (now >= deadline)
            return give_up(h);
        if (now >= next_tick) {
            periodic(h->st);
            next_tick = now + PERIOD_NS;
            continue;
        }
        int64_t until = deadline < next_tick ? deadline : next_tick;
        futex_wait(&s->wstate, SHM__WAITING, until - now);
    }
}

static NOINLINE int slow_acquire(sema_shm_t *h, uint64_t w, int64_t timeout_ms)
{
    shm__state_t *st = h->st;
    int64_t deadline = sema__deadline_ns(timeout_ms);
    int rc = sema__shm_lock(st);
    if (rc != 0)
        return rc;
    if (h->slot < 0 && (rc = claim_slot(h)) != 0)
        goto out;
    shm__slot_t *s = &st->slots[h->slot];
    if (grant_now(st, s, w))
        goto out;
    /* Not grantable: units of dead holders may be what is missing. */
    sema__shm_reap(st, 0);
    sema__shm_admit(st);
    if (grant_now(st, s, w))
        goto out;
    if (timeout_ms == 0) {
        rc = SEMA_EBUSY;
        goto out;
    }
    s->want = w;
    s->ticket = st->next_ticket++;
    s->wsince_ms = sema__shm_wall_ms();
    st->nwaiting++;
    atomic_store(&s->wstate, SHM__WAITING);
    sema__shm_unlock(st);
    return wait_loop(h, deadline);
out:
    sema__shm_unlock(st);
    return rc;
}

int sema_shm_acquire(sema_shm_t *h, uint64_t weight, int64_t timeout_ms)
{
    if (!usable(h) || weight == 0 || weight > h->capacity)
        return SEMA_EINVAL;
    if (h->slot >= 0 && fast_acquire(h, weight))
        return 0;
    return slow_acquire(h, weight, timeout_ms);
}

int sema_shm_try_acquire(sema_shm_t *h, uint64_t weight)
{
    return sema_shm_acquire(h, weight, 0);
}

static NOINLINE int slow_release(sema_shm_t *h, uint64_t w)
{
    shm__state_t *st = h->st;
    shm__slot_t *s = &st->slots[h->slot];
    int rc = sema__shm_lock(st);
    if (rc != 0)
        return rc;
    uint64_t held = atomic_load(&s->held);
    if (held == 0) {
        rc = SEMA_ESTALE;
    } else if (w > held) {
        rc = SEMA_EOVERFLOW;
    } else {
        atomic_store(&s->held, held - (w ? w : held));
        sema__shm_set_avail(st, sema__shm_avail(st) + (w ? w : held));
        sema__shm_admit(st);
    }
    sema__shm_unlock(st);
    return rc;
}

int sema_shm_release(sema_shm_t *h, uint64_t weight)
{
    if (!usable(h))
        return SEMA_EINVAL;
    if (h->slot < 0)
        return SEMA_ESTALE;
    uint64_t held = atomic_load_explicit(&h->st->slots[h->slot].held, memory_order_relaxed);
    if (held == 0)
        return SEMA_ESTALE;
    if (weight > held)
        return SEMA_EOVERFLOW;
    if (fast_release(h, weight ? weight : held, held))
        return 0;
    return slow_release(h, weight);
}

int sema_shm_cancel(sema_shm_t *h)
{
    if (!usable(h))
        return SEMA_EINVAL;
    shm__state_t *st = h->st;
    int rc = sema__shm_lock(st);
    if (rc != 0)
        return rc;
    /* h->slot is read under the lock: the waiting thread set it under the lock. */
    shm__slot_t *s = h->slot >= 0 ? &st->slots[h->slot] : NULL;
    if (s != NULL && atomic_load(&s->wstate) == SHM__WAITING) {
        s->want = 0;
        st->nwaiting--;
        atomic_store_explicit(&s->wstate, SHM__CANCELED, memory_order_release);
        (void)syscall(SYS_futex, (uint32_t *)&s->wstate, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
        sema__shm_admit(st);
    } else {
        rc = SEMA_ENOENT;
    }
    sema__shm_unlock(st);
    return rc;
}

uint64_t sema_shm_held(const sema_shm_t *h)
{
    if (h == NULL || h->slot < 0)
        return 0;
    return atomic_load_explicit(&h->st->slots[h->slot].held, memory_order_relaxed);
}

uint64_t sema_shm_capacity(const sema_shm_t *h)
{
    return h == NULL ? 0 : h->capacity;
}
