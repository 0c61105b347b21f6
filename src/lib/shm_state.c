/* SPDX-License-Identifier: MIT */
/* shm_state.c - the shared-memory semaphore's internal lock, crash recovery (dead
 * participants, a dead lock owner) and FIFO admission. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm_internal.h"

/* --- the calling process ------------------------------------------------------------ */

_Atomic int32_t sema__shm_pid; /* 0 until the first sema__shm_self() */
static _Atomic uint64_t self_start;

int sema__shm_proc_start(int32_t pid, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    *start = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ESRCH)) /* gone, or hidden (hidepid=2)? */
        return kill(pid, 0) != 0 && errno == ESRCH ? -1 : 0;
    if (fd < 0)
        return 0; /* no /proc: start unknown */
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n == 0 ? -1 : 0;
    buf[n] = '\0';
    /* "pid (comm) S ppid ...": comm may hold spaces and ')', so parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return 0;
    p += 2;
    char state = *p;
    long threads = 0;
    for (int field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p, ' ');
        if (p != NULL && *++p != '\0' && field + 1 == 20)
            threads = strtol(p, NULL, 10); /* num_threads */
    }
    /* A zombie holds nothing, unless only its main thread exited (pthread_exit()): the
     * leader then shows 'Z' while the other threads run on (num_threads > 1). */
    if (state == 'X' || (state == 'Z' && threads <= 1))
        return -1;
    if (p != NULL)
        *start = strtoull(p, NULL, 10);
    return 0;
}

/* In a fork child only async-signal-safe work: the start time is read on first use. */
static void self_after_fork(void)
{
    atomic_store(&self_start, 0);
    atomic_store(&sema__shm_pid, (int32_t)getpid());
}

static void self_init(void)
{
    self_after_fork();
    (void)pthread_atfork(NULL, NULL, self_after_fork);
}

int32_t sema__shm_self(uint64_t *start)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    int32_t pid = atomic_load_explicit(&sema__shm_pid, memory_order_relaxed);
    if (SEMA__UNLIKELY(pid == 0)) {
        (void)pthread_once(&once, self_init);
        pid = atomic_load(&sema__shm_pid);
    }
    if (start != NULL) {
        uint64_t st = atomic_load_explicit(&self_start, memory_order_relaxed);
        if (st == 0) { /* racing threads compute the same value */
            (void)sema__shm_proc_start(pid, &st);
            atomic_store(&self_start, st);
        }
        *start = st;
    }
    return pid;
}

uint64_t sema__shm_pidns(void)
{
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

int64_t sema__shm_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- the available count ------------------------------------------------------------- */

uint64_t sema__shm_avail(const shm__state_t *st)
{
    return atomic_load_explicit(&st->word, memory_order_relaxed) >> 1;
}

/* Under the lock only: SLOW stays set until sema__shm_unlock(). */
void sema__shm_set_avail(shm__state_t *st, uint64_t avail)
{
    atomic_store_explicit(&st->word, avail << 1 | SHM__SLOW, memory_order_relaxed);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    (void)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* --- liveness and reclaiming ------------------------------------------------------------ */

/* Is the owner of `s` still the process that claimed it? `full` compares start times
 * (reads /proc); otherwise only asks whether the pid exists. */
static int slot_alive(const shm__slot_t *s, int full)
{
    uint64_t my_start, start = atomic_load(&s->start), now;
    int32_t pid = atomic_load(&s->pid), me = sema__shm_self(&my_start);
    if (pid == me) /* a start time of 0 is unknown (unreadable then), as for others below */
        return start == my_start || start == 0 || my_start == 0;
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    if (!full)
        return 1;
    if (sema__shm_proc_start(pid, &now) != 0)
        return 0;
    return now == 0 || start == 0 || now == start;
}

void sema__shm_drop_slot(shm__state_t *st, int i)
{
    shm__slot_t *s = &st->slots[i];
    uint64_t held = atomic_load(&s->held);
    if (atomic_load(&s->wstate) == SHM__WAITING && st->nwaiting > 0)
        st->nwaiting--;
    uint64_t avail = sema__shm_avail(st) + held;
    sema__shm_set_avail(st, avail > st->capacity ? st->capacity : avail);
    atomic_store(&s->held, 0);
    atomic_store(&s->since_ms, 0);
    atomic_store(&s->busy, 0);
    atomic_store(&s->redo_held, 0);
    s->want = 0;
    s->ticket = 0;
    atomic_store(&s->wstate, SHM__IDLE);
    atomic_store(&s->start, 0);
    atomic_store_explicit(&s->pid, 0, memory_order_release);
}

/* Wait until the live owner of slot i leaves its fast-path window (a few instructions,
 * unless it is descheduled or stopped). If its owner dies meanwhile, drops the slot without
 * crediting anything and returns 1: `available` must then be recomputed. */
static int wait_not_busy(shm__state_t *st, int i, uint64_t *reclaimed)
{
    shm__slot_t *s = &st->slots[i];
    for (unsigned spins = 0; atomic_load_explicit(&s->busy, memory_order_acquire); spins++) {
        if (spins % 1024 == 1023 && !slot_alive(s, 1)) {
            *reclaimed += atomic_load(&s->held);
            atomic_store(&s->held, 0);
            sema__shm_drop_slot(st, i);
            return 1;
        }
        if (spins < 4096) {
            sched_yield();
        } else {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    return 0;
}

static void recompute_avail(shm__state_t *st);

void sema__shm_settle(shm__state_t *st)
{
    uint64_t reclaimed = 0;
    int dropped = 0;
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++)
        if (atomic_load(&st->slots[i].pid) != 0)
            dropped |= wait_not_busy(st, i, &reclaimed);
    st->reclaimed += reclaimed;
    if (dropped)
        recompute_avail(st);
}

/* available = capacity - what the live slots hold. Needed when a process died inside the
 * fast path (its slot was busy: its CAS on the word may or may not have happened) or inside
 * the lock. The word is frozen (SLOW), so only in-flight fast paths can still move it. */
static void recompute_avail(shm__state_t *st)
{
    uint64_t held = 0, reclaimed = 0;
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++) {
        if (atomic_load(&st->slots[i].pid) == 0)
            continue;
        (void)wait_not_busy(st, i, &reclaimed);
        uint64_t h = atomic_load(&st->slots[i].held); /* capped: a sum cannot wrap */
        held = h > st->capacity - held ? st->capacity : held + h;
    }
    st->reclaimed += reclaimed;
    sema__shm_set_avail(st, held >= st->capacity ? 0 : st->capacity - held);
}

/* Under the lock: slot i's owner is dead; take back what it holds and free the slot. */
static void reclaim_dead(shm__state_t *st, int i, int *recompute)
{
    shm__slot_t *s = &st->slots[i];
    if (atomic_load(&s->busy) != 0) {
        *recompute = 1; /* died in the fast path: its count is unknowable, recount */
        atomic_store(&s->held, 0);
    }
    st->reclaimed += atomic_load(&s->held);
    sema__shm_drop_slot(st, i);
}

static int head_waiter(const shm__state_t *st);

void sema__shm_reap(shm__state_t *st, int full)
{
    int recompute = 0;
    int64_t now_ms = 0;
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++) {
        shm__slot_t *s = &st->slots[i];
        if (atomic_load(&s->pid) == 0)
            continue;
        uint64_t held = atomic_load(&s->held);
        if (!full && held == 0 && atomic_load(&s->wstate) != SHM__WAITING)
            continue;
        /* Holders always get the start-time check: their units are what is missing. */
        if (slot_alive(s, full || held != 0)) {
            if (atomic_load(&s->held) != 0 && atomic_load(&s->since_ms) == 0) {
                now_ms = now_ms ? now_ms : sema__shm_wall_ms();
                atomic_store(&s->since_ms, now_ms); /* a lock-free grant, first seen now */
            }
            continue;
        }
        reclaim_dead(st, i, &recompute);
    }
    /* The head waiter is what blocks everyone behind it: it gets the full check too (a
     * zombie or a recycled pid passes the pid-only one), and so does each next head. */
    for (int h; !full && (h = head_waiter(st)) >= 0 && !slot_alive(&st->slots[h], 1);)
        reclaim_dead(st, h, &recompute);
    if (recompute)
        recompute_avail(st);
    if (full)
        st->last_reap_ns = sema__now_ns();
}

/* --- FIFO admission -------------------------------------------------------------------- */

/* The waiting slot with the smallest ticket, or -1. Scans only below the high-water mark:
 * this runs on every hand-off. */
static int head_waiter(const shm__state_t *st)
{
    int best = -1;
    int end = st->hiwater < SEMA_SHM_MAX_SLOTS ? (int)st->hiwater : SEMA_SHM_MAX_SLOTS;
    if (st->nwaiting == 0)
        return -1;
    for (int i = 0; i < end; i++) {
        const shm__slot_t *s = &st->slots[i];
        if (atomic_load_explicit(&s->wstate, memory_order_relaxed) != SHM__WAITING)
            continue;
        if (best < 0 || s->ticket < st->slots[best].ticket)
            best = i;
    }
    return best;
}

/* Granting is two steps so that a lock owner dying between them is repairable: first the
 * redo record (one atomic store: the target `held`) and `held` itself... */
static void begin_grant(shm__slot_t *s)
{
    uint64_t held = atomic_load(&s->held);
    atomic_store(&s->redo_held, held + s->want);
    if (held == 0)
        atomic_store(&s->since_ms, sema__shm_wall_ms());
    atomic_store(&s->held, held + s->want);
}

/* ...then the queue bookkeeping, the waiter's wake-up and, last, the record's removal.
 * Re-applied by repair() when the record is still there. */
static void finish_grant(shm__state_t *st, shm__slot_t *s)
{
    atomic_store(&s->held, atomic_load(&s->redo_held));
    if (atomic_load(&s->wstate) == SHM__WAITING) {
        s->want = 0;
        if (st->nwaiting > 0)
            st->nwaiting--;
        atomic_store_explicit(&s->wstate, SHM__GRANTED, memory_order_release);
        futex_wake_all(&s->wstate);
    }
    atomic_store(&s->redo_held, 0);
}

void sema__shm_admit(shm__state_t *st)
{
    uint64_t avail = sema__shm_avail(st);
    for (int h; (h = head_waiter(st)) >= 0;) {
        shm__slot_t *s = &st->slots[h];
        if (s->want > avail)
            break;
        avail -= s->want;
        begin_grant(s);
        finish_grant(st, s);
    }
    sema__shm_set_avail(st, avail);
}

/* --- the lock and its repair ------------------------------------------------------------- */

/* Make one slot's fields plausible; returns 1 if it had to be cleared. */
static int validate_slot(shm__state_t *st, int i)
{
    shm__slot_t *s = &st->slots[i];
    uint32_t ws = atomic_load(&s->wstate);
    if (atomic_load(&s->pid) < 0 || ws > SHM__CANCELED || atomic_load(&s->held) > st->capacity) {
        atomic_store(&s->held, 0);
        atomic_store(&s->wstate, SHM__IDLE);
        sema__shm_drop_slot(st, i);
        return 1;
    }
    if (ws == SHM__WAITING && (s->want == 0 || s->want > st->capacity)) {
        s->want = 0;
        atomic_store(&s->wstate, SHM__CANCELED);
        futex_wake_all(&s->wstate);
    }
    return 0;
}

/* The previous owner of the lock died inside it: any field it was writing may be half
 * done. Rebuild every derived field from the slot table before the state is marked
 * consistent again. */
static void repair(shm__state_t *st)
{
    uint32_t nwaiting = 0;
    uint64_t max_ticket = 0;
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++) {
        shm__slot_t *s = &st->slots[i];
        if (atomic_load(&s->pid) != 0 && atomic_load(&s->redo_held) != 0 &&
            atomic_load(&s->redo_held) <= st->capacity)
            finish_grant(st, s); /* a grant cut short: complete it */
        atomic_store(&s->redo_held, 0);
    }
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++) {
        if (atomic_load(&st->slots[i].pid) == 0 || validate_slot(st, i))
            continue;
        if (atomic_load(&st->slots[i].wstate) == SHM__WAITING) {
            nwaiting++;
            if (st->slots[i].ticket > max_ticket)
                max_ticket = st->slots[i].ticket;
        }
    }
    st->nwaiting = nwaiting;
    st->hiwater = SEMA_SHM_MAX_SLOTS; /* recomputed below from the live slots */
    for (int i = SEMA_SHM_MAX_SLOTS; i > 0 && atomic_load(&st->slots[i - 1].pid) == 0; i--)
        st->hiwater = (uint32_t)(i - 1);
    if (st->next_ticket <= max_ticket)
        st->next_ticket = max_ticket + 1;
    sema__shm_reap(st, 1);
    recompute_avail(st);
    st->repairs++;
}

int sema__shm_lock(shm__state_t *st)
{
    int rc = pthread_mutex_lock(&st->lock);
    if (rc == ENOTRECOVERABLE)
        return SEMA_ECORRUPT;
    if (rc != 0 && rc != EOWNERDEAD)
        SEMA__ABORT("pthread_mutex_lock on the shared state failed");
    /* Freeze the word: from here no fast path can move it. */
    atomic_fetch_or(&st->word, SHM__SLOW);
    if (rc == EOWNERDEAD) {
        repair(st);
        SEMA__CHECK(pthread_mutex_consistent(&st->lock) == 0);
        sema__shm_admit(st);
    }
    return 0;
}

void sema__shm_unlock(shm__state_t *st)
{
    if (st->nwaiting == 0)
        atomic_store_explicit(&st->word, sema__shm_avail(st) << 1, memory_order_release);
    SEMA__CHECK(pthread_mutex_unlock(&st->lock) == 0);
}

int sema__shm_test_lock_half_grant(sema_shm_t *h)
{
    int rc = sema__shm_lock(h->st);
    if (rc != 0)
        return rc;
    int head = head_waiter(h->st);
    if (head < 0)
        return SEMA_ENOENT; /* (returns holding the lock: the caller dies) */
    if (h->slot >= 0)       /* the releasing half: this handle gives everything back */
        atomic_store(&h->st->slots[h->slot].held, 0);
    begin_grant(&h->st->slots[head]);
    return 0;
}
