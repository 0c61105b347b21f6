/* SPDX-License-Identifier: MIT */
/* sem_internal.h - the semaphore's layout, so other libsema modules can embed one; never installed.
 *
 * An embedded semaphore (its container must keep the 64-byte alignment of struct sema_sem)
 * is set up with sema__sem_init and torn down with sema__sem_destroy instead of
 * sema_sem_new/sema_sem_free; every public sema_sem_* call works on it (pass its address).
 * No allocation either way. */
#ifndef SEMA_SEM_INTERNAL_H
#define SEMA_SEM_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "sema/sem.h"
#include "internal.h"

/* The fast-path word: bit 63 SLOW, bits 56..62 the resize generation, bits 0..55 the
 * available units. While SLOW is clear the word is the truth and acquire/release are one
 * CAS on it; SLOW is set (under `lock`) whenever someone waits, the semaphore is closed or
 * available is negative, and then `avail` under `lock` is the truth. The generation changes
 * on every resize so that a fast release that read the old capacity cannot succeed (it
 * would have to stall between loading the word and its CAS across a multiple of 128
 * resizes, and find the same count, for the generation to come round again; even then only
 * an over-release could slip through: a correct release is right whatever the capacity). A fast CAS
 * never carries into the flag bits: an acquire subtracts at most the available count, a release
 * adds at most capacity - available. */
#define SEMA__SEM_SLOW (UINT64_C(1) << 63)
#define SEMA__SEM_GEN_SHIFT 56
#define SEMA__SEM_GEN_MASK UINT64_C(0x7f)
#define SEMA__SEM_AVAIL_MASK ((UINT64_C(1) << 56) - 1)

struct sema_sem {
    /* First cache line: everything a hand-off between two threads writes, so one line moves
     * between their cores per operation (the semaphore is allocated 64-byte aligned). */
    _Alignas(64) uint64_t word;     /* atomic; see above */
    uint32_t lock;                  /* atomic; 0 free, 1 held, 2 held with sleepers; guards
                                     * every field below */
    uint8_t gen;                    /* resize generation, 7 bits */
    uint8_t closed;                 /* 1 after sema_sem_close */
    int64_t avail;                  /* available units while SLOW (negative after a shrink) */
    sema_sem_waiter_t *head, *tail; /* the FIFO queue */
    uint64_t seq;                   /* numbers queue and settle events, for waiter.*_seq_ */
    uint64_t nwaiters;              /* queued requests, wait-idle included */
    uint64_t waiting;               /* total weight of queued acquires (wait-idle excluded), */
    /* Second line: read on the fast path or written only by rare operations. */
    uint64_t waiting_hi; /* ... its carries: the sum can pass 2^64 */
    uint64_t cap;        /* atomic loads on the fast path; written under lock */
    uint64_t nidle;      /* queued wait-idle requests */
    void *mem;           /* what sema_sem_new allocated; NULL if embedded */
};

/* Set up an embedded semaphore of `capacity` units. Returns 0 or SEMA_EINVAL. */
SEMA__HIDDEN int sema__sem_init(struct sema_sem *s, uint64_t capacity);

/* Tear down an embedded semaphore; nothing may be queued on it (aborts otherwise). */
SEMA__HIDDEN void sema__sem_destroy(struct sema_sem *s);

#endif /* SEMA_SEM_INTERNAL_H */
