/* SPDX-License-Identifier: MIT */
/* shm_internal.h - the mapped layout of a shared-memory semaphore and the helpers its
 * source files share; never installed. */
#ifndef SEMA_SHM_INTERNAL_H
#define SEMA_SHM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"
#include "sema/shm.h"

#define SHM__MAGIC UINT64_C(0x314d4853414d4553) /* "SEMASHM1" little-endian */
#define SHM__VERSION 1u
#define SHM__DIR "/dev/shm/"
#define SHM__PREFIX "sema."
#define SHM__MAX_CAPACITY (UINT64_C(1) << 62)

/* word = available << 1 | SHM__SLOW. While SLOW is set the lock-free fast path stays off:
 * someone is queued, or a process holds the internal lock. */
#define SHM__SLOW UINT64_C(1)

/* A slot's waiting state; the 32-bit futex word waiters sleep on. */
enum { SHM__IDLE = 0, SHM__WAITING = 1, SHM__GRANTED = 2, SHM__CANCELED = 3 };

/* One participant (one open handle of one process). Owned by that handle; written by
 * others only under the internal lock, and then only while the owner is not in the fast
 * path (it waits, or it is dead). 128 bytes, two cache lines. */
typedef struct {
    _Atomic int32_t pid;      /* owner process; 0 = free slot */
    _Atomic uint32_t wstate;  /* SHM__IDLE/WAITING/GRANTED/CANCELED (futex word) */
    _Atomic uint64_t start;   /* owner's start time (/proc/PID/stat field 22, clock ticks) */
    _Atomic uint64_t held;    /* units held through this slot */
    _Atomic int64_t since_ms; /* realtime ms when held went from 0 to >0 */
    _Atomic uint32_t busy;    /* nonzero while the owner is inside the lock-free fast path */
    uint32_t pad_;
    uint64_t want;     /* units wanted while WAITING (under the lock) */
    uint64_t ticket;   /* FIFO position while WAITING (under the lock) */
    int64_t wsince_ms; /* realtime ms when it started waiting (under the lock) */
    /* A grant in progress: the `held` it leads to. Written first and cleared last, so a lock
     * owner that dies half-way leaves a record the repair re-applies (redo, idempotent). */
    _Atomic uint64_t redo_held;
    char pad2_[56];
} shm__slot_t;

/* The mapped state: fixed-width fields, no pointers. */
typedef struct {
    uint64_t magic;        /* SHM__MAGIC */
    uint32_t version;      /* SHM__VERSION */
    uint32_t nslots;       /* SEMA_SHM_MAX_SLOTS */
    uint64_t size;         /* sizeof(shm__state_t), i.e. the file size */
    uint64_t capacity;     /* fixed at creation */
    _Atomic uint64_t word; /* available << 1 | SHM__SLOW */
    uint64_t next_ticket;  /* FIFO order of waiters (under the lock) */
    uint32_t nwaiting;     /* slots in SHM__WAITING (under the lock) */
    uint32_t hiwater;      /* every claimed slot has an index below this (under the lock) */
    int64_t last_reap_ns;  /* monotonic ns of the last full liveness check (under the lock) */
    uint64_t reclaimed;    /* units taken back from dead processes (under the lock) */
    uint64_t repairs;      /* EOWNERDEAD repairs (under the lock) */
    pthread_mutex_t lock;  /* process-shared, robust */
    uint64_t pidns;        /* the creator's PID namespace (sema__shm_pidns()); 0: unknown */
    char pad2_[56];
    shm__slot_t slots[SEMA_SHM_MAX_SLOTS];
} shm__state_t;

struct sema_shm {
    shm__state_t *st;
    int32_t pid; /* the process that opened it (a forked child must not use it) */
    int slot;    /* index into st->slots, -1 until the first acquire */
    uint64_t capacity;
};

/* The calling process's pid once sema__shm_self() ran (refreshed after fork), else 0. */
SEMA__HIDDEN extern _Atomic int32_t sema__shm_pid;
/* The calling process's pid and start time (cached; refreshed after fork). */
SEMA__HIDDEN int32_t sema__shm_self(uint64_t *start);
/* Start time of `pid` from /proc, 0 if unknown (no /proc, or hidden by hidepid while the
 * pid exists). Returns 0, or -1 if the process is gone or a zombie. */
SEMA__HIDDEN int sema__shm_proc_start(int32_t pid, uint64_t *start);
/* The calling process's PID namespace: the inode of /proc/self/ns/pid, 0 if unknown.
 * Pids, and so liveness checks, mean something only inside one namespace. */
SEMA__HIDDEN uint64_t sema__shm_pidns(void);
/* Realtime ms, coarse (no system call). */
SEMA__HIDDEN int64_t sema__shm_wall_ms(void);

/* The internal lock (repairs after a dead owner) and its release (re-enables the fast
 * path when nobody waits). lock returns 0 or SEMA_ECORRUPT. */
SEMA__HIDDEN int sema__shm_lock(shm__state_t *st);
SEMA__HIDDEN void sema__shm_unlock(shm__state_t *st);
/* Under the lock: drop dead participants. full: every slot, pid and start time; else
 * only the slots that hold (pid and start time) or wait (pid only). */
SEMA__HIDDEN void sema__shm_reap(shm__state_t *st, int full);
SEMA__HIDDEN void sema__shm_admit(shm__state_t *st);
/* Under the lock: wait until no live slot is inside its fast-path window, so that the slots'
 * `held` and the word agree (a snapshot's held + available == capacity). */
SEMA__HIDDEN void sema__shm_settle(shm__state_t *st);
/* Under the lock: give back everything slot `i` holds or waits for and free it. */
SEMA__HIDDEN void sema__shm_drop_slot(shm__state_t *st, int i);
SEMA__HIDDEN uint64_t sema__shm_avail(const shm__state_t *st);
SEMA__HIDDEN void sema__shm_set_avail(shm__state_t *st, uint64_t avail);

/* Test hooks (tests/unit/test_shm*.c only). */
/* Take the internal lock and return holding it (the caller then dies). */
SEMA__HIDDEN int sema__shm_test_lock(sema_shm_t *h);
/* Take the internal lock, scribble `avail` into the available count, return holding it. */
SEMA__HIDDEN int sema__shm_test_lock_scribble(sema_shm_t *h, uint64_t avail);
/* Take the internal lock and do the first half of granting the head waiter (the redo
 * record and `held`), as a releaser killed inside admission leaves it. */
SEMA__HIDDEN int sema__shm_test_lock_half_grant(sema_shm_t *h);
/* Record a holder of `weight` units for (pid, start) as if that process held them. */
SEMA__HIDDEN int sema__shm_test_forge(sema_shm_t *h, int32_t pid, uint64_t start, uint64_t weight);
/* Enter the fast path's window (busy set, units taken from the word, holder record not
 * yet written) and return there, as a process killed at that instant would leave it. */
SEMA__HIDDEN int sema__shm_test_fast_window(sema_shm_t *h, uint64_t weight);
/* 1 if the handle's request is queued right now (takes the lock). */
SEMA__HIDDEN int sema__shm_test_waiting(sema_shm_t *h);
/* The raw mapped state (tests corrupt files through it). */
SEMA__HIDDEN shm__state_t *sema__shm_test_state(sema_shm_t *h);

#endif /* SEMA_SHM_INTERNAL_H */
