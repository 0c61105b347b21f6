/* SPDX-License-Identifier: MIT */
/* sem.c - the weighted FIFO semaphore: a one-CAS fast path, a locked queue with direct hand-off. */
#include "sem_internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cancel_internal.h"

/* sema_sem_waiter_t.kind_ bits. */
#define KIND_CB 1u   /* settled by calling cb_ (else a blocked thread is woken) */
#define KIND_IDLE 2u /* a wait-idle request (weight_ unused) */

/* sema_sem_waiter_t.state_ of a blocked thread's waiter. */
#define ST_WAITING 0u
#define ST_SLEEPING 1u /* the thread is (about to be) in futex_wait */
#define ST_DONE 2u     /* status_ is final; the waker no longer touches the waiter */

/* A request's outcome before the queue is involved. */
#define NEED_WAIT 1

/* Settled waiters to notify once the lock is dropped, in FIFO order. */
typedef struct {
    sema_sem_waiter_t *head, *tail;
} notify_list_t;

/* A blocked thread's request. */
typedef struct {
    sema_sem_waiter_t w;
    sema__cancel_reg_t reg;
    struct sema_sem *sem;
} block_waiter_t;

/* ---- locking and the fast word ---------------------------------------------------------- */

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

/* Spinning. A futex sleep and its wake cost a few microseconds of CPU, so a blocked thread
 * first watches for a while no longer than that (SPIN_LIMIT pause instructions, ~3 µs on
 * current x86) before it sleeps: when the grant comes within it, as in a hand-off between
 * two running threads, neither side makes a system call; when it does not, the spin has
 * cost at most about what the sleep costs anyway. With a single CPU to run on, the thread
 * that would grant cannot run while we spin, so nobody spins then. */
#define SPIN_LIMIT 128

static int can_spin(void)
{
    static int ncpu; /* 0 until first asked */
    int n = __atomic_load_n(&ncpu, __ATOMIC_RELAXED);

    if (n == 0) {
        cpu_set_t set;

        /* The CPUs this process may run on (a cpuset or taskset may allow one), not the
         * machine's. */
        if (sched_getaffinity(0, sizeof(set), &set) == 0)
            n = CPU_COUNT(&set) > 1 ? 2 : 1;
        else
            n = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 2 : 1;
        __atomic_store_n(&ncpu, n, __ATOMIC_RELAXED);
    }
    return n > 1;
}

/* A blocked thread's spin: 1 if its request was settled meanwhile. */
static int spin_until_done(const uint32_t *state)
{
    if (!can_spin())
        return 0;
    for (int i = 0; i < SPIN_LIMIT; i++) {
        if (__atomic_load_n(state, __ATOMIC_ACQUIRE) == ST_DONE)
            return 1;
        SEMA__CPU_RELAX();
    }
    return 0;
}

/* The lock is a word in the semaphore's first cache line (a pthread mutex would need a
 * line of its own): 0 free, 1 held, 2 held and someone may sleep on it. It guards a few
 * dozen instructions, so a contender spins briefly before it sleeps. */
static __attribute__((noinline)) void lock_contended(struct sema_sem *s)
{
    int spins = can_spin() ? SPIN_LIMIT : 0;
    uint32_t c;

    for (int i = 0; i < spins; i++) {
        c = 0;
        if (__atomic_load_n(&s->lock, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&s->lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        SEMA__CPU_RELAX();
    }
    while (__atomic_exchange_n(&s->lock, 2, __ATOMIC_ACQUIRE) != 0)
        futex(&s->lock, FUTEX_WAIT_BITSET_PRIVATE, 2, NULL);
}

static void lock(struct sema_sem *s)
{
    uint32_t c = 0;

    if (!__atomic_compare_exchange_n(&s->lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        lock_contended(s);
}

static void unlock(struct sema_sem *s)
{
    /* Only the address is used after the exchange, which the kernel tolerates even if the
     * memory was freed meanwhile (as for the waiter's futex). */
    if (__atomic_exchange_n(&s->lock, 0, __ATOMIC_RELEASE) == 2)
        futex(&s->lock, FUTEX_WAKE_PRIVATE, 1, NULL);
}

/* Under the lock: make `avail` the truth (set SLOW, keeping every other bit as it was). */
static void enter_slow(struct sema_sem *s)
{
    uint64_t w;

    /* Only lock holders set or clear SLOW: if it is set, avail is already the truth and
     * the read-modify-write can be skipped (the common case while anyone waits). */
    if (__atomic_load_n(&s->word, __ATOMIC_RELAXED) & SEMA__SEM_SLOW)
        return;
    w = __atomic_fetch_or(&s->word, SEMA__SEM_SLOW, __ATOMIC_ACQ_REL);
    if (!(w & SEMA__SEM_SLOW))
        s->avail = (int64_t)(w & SEMA__SEM_AVAIL_MASK);
}

/* Under the lock: hand the state back to the fast word when nothing needs the lock. */
static void leave_slow(struct sema_sem *s)
{
    uint64_t w;

    if (s->closed || s->head != NULL || s->avail < 0)
        return;
    w = ((uint64_t)s->gen << SEMA__SEM_GEN_SHIFT) | (uint64_t)s->avail;
    __atomic_store_n(&s->word, w, __ATOMIC_RELEASE);
}

static int fast_acquire(struct sema_sem *s, uint64_t weight)
{
    uint64_t w = __atomic_load_n(&s->word, __ATOMIC_RELAXED);

    while (!(w & SEMA__SEM_SLOW) && (w & SEMA__SEM_AVAIL_MASK) >= weight) {
        if (__atomic_compare_exchange_n(&s->word, &w, w - weight, 1, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

/* 1 if released on the fast word; 0 if the locked path must decide (SLOW, or it would
 * overflow: the lock gives the definitive answer). */
static int fast_release(struct sema_sem *s, uint64_t weight)
{
    uint64_t w = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);

    for (;;) {
        /* Loaded after w: at least as new as the generation in w. */
        uint64_t cap = __atomic_load_n(&s->cap, __ATOMIC_RELAXED);
        uint64_t avail = w & SEMA__SEM_AVAIL_MASK;

        if ((w & SEMA__SEM_SLOW) || avail > cap || weight > cap - avail)
            return 0;
        if (__atomic_compare_exchange_n(&s->word, &w, w + weight, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_ACQUIRE))
            return 1;
    }
}

/* ---- the queue -------------------------------------------------------------------------- */

static void enqueue(struct sema_sem *s, sema_sem_waiter_t *n)
{
    SEMA__QUEUE_PUSH(s, n, prev_, next_);
    n->queued_ = 1;
    n->enq_seq_ = ++s->seq;
    s->nwaiters++;
    if (n->kind_ & KIND_IDLE)
        s->nidle++;
    else {
        s->waiting += n->weight_;
        if (s->waiting < n->weight_) /* a carry (tested, not added: the line stays clean) */
            s->waiting_hi++;
    }
}

static void dequeue(struct sema_sem *s, sema_sem_waiter_t *n)
{
    SEMA__QUEUE_REMOVE(s, n, prev_, next_);
    n->queued_ = 0;
    s->nwaiters--;
    if (n->kind_ & KIND_IDLE)
        s->nidle--;
    else {
        if (s->waiting < n->weight_) /* a borrow */
            s->waiting_hi--;
        s->waiting -= n->weight_;
    }
}

/* Under the lock: take n out of the queue with its final status, to be notified. */
static void settle(struct sema_sem *s, sema_sem_waiter_t *n, int status, notify_list_t *out)
{
    dequeue(s, n);
    n->status_ = status;
    n->settle_seq_ = ++s->seq;
    if (out->tail != NULL)
        out->tail->next_ = n;
    else
        out->head = n;
    out->tail = n;
}

/* Under the lock: grant head requests while they fit (strict FIFO, head-of-line blocking). */
static void admit(struct sema_sem *s, notify_list_t *out)
{
    sema_sem_waiter_t *n;

    while ((n = s->head) != NULL) {
        if (n->kind_ & KIND_IDLE) {
            if (s->avail != (int64_t)s->cap)
                break;
        } else {
            if (s->avail < (int64_t)n->weight_)
                break;
            s->avail -= (int64_t)n->weight_;
        }
        settle(s, n, 0, out);
    }
}

/* ---- notification, outside the lock ----------------------------------------------------- */

static void wake_blocked(sema_sem_waiter_t *n)
{
    /* After this exchange the waiter may return and its memory go away: only the futex
     * address is used afterwards, which the kernel tolerates. */
    uint32_t old = __atomic_exchange_n(&n->state_, ST_DONE, __ATOMIC_ACQ_REL);

    if (old == ST_SLEEPING)
        futex(&n->state_, FUTEX_WAKE_PRIVATE, 1, NULL);
}

/* Callbacks queued by this thread, run one after another by the outermost runner so a
 * callback that releases (and so grants another callback) never recurses (no stack overflow). */
static _Thread_local struct {
    sema_sem_waiter_t *head, *tail;
    int running;
} tl_cbs;

static void run_callbacks(void)
{
    sema_sem_waiter_t *n;

    if (tl_cbs.running)
        return;
    tl_cbs.running = 1;
    while ((n = tl_cbs.head) != NULL) {
        tl_cbs.head = n->next_;
        if (tl_cbs.head == NULL)
            tl_cbs.tail = NULL;
        n->next_ = NULL;
        n->cb_(n, n->status_, n->arg_);
    }
    tl_cbs.running = 0;
}

/* Wake or call back every settled waiter. Touches no semaphore. */
static void notify(notify_list_t *list)
{
    sema_sem_waiter_t *n = list->head, *next;

    for (; n != NULL; n = next) {
        next = n->next_;
        if (n->kind_ & KIND_CB) {
            n->next_ = NULL;
            if (tl_cbs.tail != NULL)
                tl_cbs.tail->next_ = n;
            else
                tl_cbs.head = n;
            tl_cbs.tail = n;
        } else {
            wake_blocked(n);
        }
    }
    run_callbacks();
}

/* ---- life cycle ------------------------------------------------------------------------- */

int sema__sem_init(struct sema_sem *s, uint64_t capacity)
{
    if (s == NULL || capacity == 0 || capacity > SEMA_SEM_MAX_CAPACITY)
        return SEMA_EINVAL;
    memset(s, 0, sizeof(*s));
    s->cap = capacity;
    s->avail = (int64_t)capacity;
    s->word = capacity;
    return 0;
}

void sema__sem_destroy(struct sema_sem *s)
{
    lock(s);
    if (s->head != NULL)
        SEMA__ABORT("semaphore destroyed while requests are queued on it");
    unlock(s);
}

int sema_sem_new(sema_sem_t **out, uint64_t capacity)
{
    struct sema_sem *s;
    void *mem;
    int rc;

    if (out == NULL)
        return SEMA_EINVAL;
    *out = NULL;
    if (capacity == 0 || capacity > SEMA_SEM_MAX_CAPACITY)
        return SEMA_EINVAL;
    /* 64-byte aligned through the allocator hook, which promises only malloc's alignment. */
    mem = sema__malloc(sizeof(*s) + _Alignof(struct sema_sem) - 1);
    if (mem == NULL)
        return SEMA_ENOMEM;
    s = (struct sema_sem *)(((uintptr_t)mem + _Alignof(struct sema_sem) - 1) &
                            ~(uintptr_t)(_Alignof(struct sema_sem) - 1));
    rc = sema__sem_init(s, capacity);
    if (rc != 0) {
        sema__free(mem);
        return rc;
    }
    s->mem = mem;
    *out = s;
    return 0;
}

void sema_sem_free(sema_sem_t *sem)
{
    if (sem == NULL)
        return;
    sema__sem_destroy(sem);
    sema__free(sem->mem); /* NULL for an embedded one: its memory is not ours */
}

int64_t sema_sem_now_ns(void)
{
    return sema__now_ns();
}

/* ---- acquiring -------------------------------------------------------------------------- */

/* Under the lock, in slow mode: decide a new request without queueing it. Returns 0
 * (granted now; for an acquire the units are taken), a SEMA_E* code, or NEED_WAIT. */
static int admit_now(struct sema_sem *s, uint64_t weight, int idle)
{
    if (s->closed)
        return SEMA_ECANCELED;
    if (!idle && weight > s->cap)
        return SEMA_EINVAL;
    if (s->head != NULL)
        return NEED_WAIT;
    if (idle)
        return s->avail == (int64_t)s->cap ? 0 : NEED_WAIT;
    if (s->avail < (int64_t)weight)
        return NEED_WAIT;
    s->avail -= (int64_t)weight;
    return 0;
}

static void init_waiter(sema_sem_waiter_t *n, uint64_t weight, unsigned kind)
{
    n->weight_ = weight;
    n->kind_ = kind;
    n->state_ = ST_WAITING;
    n->status_ = 0;
    n->settle_seq_ = 0;
    n->cb_ = NULL;
    n->arg_ = NULL;
    n->reserved_[0] = n->reserved_[1] = NULL;
}

/* Under the lock: take a still-queued waiter out without notifying it (its owner is the
 * caller); those behind it may now fit: nobody is left waiting behind a gap. */
static void withdraw(struct sema_sem *s, sema_sem_waiter_t *n, notify_list_t *out)
{
    dequeue(s, n);
    n->settle_seq_ = ++s->seq;
    admit(s, out);
    leave_slow(s);
}

/* A cancel token fired: withdraw the blocked waiter if it is still queued. */
static void on_cancel(sema__cancel_reg_t *reg)
{
    block_waiter_t *bw = reg->arg;
    struct sema_sem *s = bw->sem;
    notify_list_t out = {NULL, NULL};

    lock(s);
    if (bw->w.queued_) {
        settle(s, &bw->w, SEMA_ECANCELED, &out);
        admit(s, &out);
        leave_slow(s);
    }
    unlock(s);
    notify(&out);
}

static void wait_done(uint32_t *state)
{
    for (;;) {
        uint32_t st = ST_WAITING;

        if (__atomic_load_n(state, __ATOMIC_ACQUIRE) == ST_DONE)
            return;
        if (!__atomic_compare_exchange_n(state, &st, ST_SLEEPING, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE) &&
            st == ST_DONE)
            return;
        futex(state, FUTEX_WAIT_BITSET_PRIVATE, ST_SLEEPING, NULL);
    }
}

/* Sleep until settled or the deadline; 1 if settled, 0 on timeout. */
static int sleep_until(uint32_t *state, int64_t deadline_ns)
{
    struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
    const struct timespec *tp = deadline_ns == SEMA_DEADLINE_NONE ? NULL : &ts;

    if (spin_until_done(state))
        return 1;
    for (;;) {
        uint32_t st = ST_WAITING;

        if (!__atomic_compare_exchange_n(state, &st, ST_SLEEPING, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE) &&
            st == ST_DONE)
            return 1;
        if (futex(state, FUTEX_WAIT_BITSET_PRIVATE, ST_SLEEPING, tp) != 0 && errno == ETIMEDOUT)
            return __atomic_load_n(state, __ATOMIC_ACQUIRE) == ST_DONE;
    }
}

/* The blocked half of an acquire or wait-idle: bw is queued; returns its final status. */
static int block(struct sema_sem *s, block_waiter_t *bw, int64_t deadline_ns, sema_cancel_t *cancel)
{
    int timed_out = 0;

    if (!sleep_until(&bw->w.state_, deadline_ns)) {
        notify_list_t out = {NULL, NULL};

        lock(s);
        if (bw->w.queued_) {
            withdraw(s, &bw->w, &out);
            timed_out = 1;
        }
        unlock(s);
        notify(&out);
        if (!timed_out)
            wait_done(&bw->w.state_); /* settled meanwhile: the settler's hand-off wins */
    }
    sema__cancel_unregister(cancel, &bw->reg);
    return timed_out ? SEMA_ETIMEDOUT : bw->w.status_;
}

/* The deadline of a relative timeout (0: a try; < 0: none, without reading the clock). */
static int64_t deadline_of(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return SEMA_DEADLINE_NONE;
    return timeout_ms == 0 ? 0 : sema__deadline_ns(timeout_ms);
}

static int deadline_passed(int64_t deadline_ns)
{
    return deadline_ns != SEMA_DEADLINE_NONE && sema__now_ns() >= deadline_ns;
}

/* The slow path shared by acquire and wait-idle. */
static int acquire_slow(struct sema_sem *s, uint64_t weight, int idle, int64_t deadline_ns,
                        sema_cancel_t *cancel)
{
    _Alignas(64) block_waiter_t bw; /* one cache line moves to the waker, not two */
    int rc;

    lock(s);
    enter_slow(s);
    rc = admit_now(s, weight, idle);
    if (rc == NEED_WAIT && deadline_passed(deadline_ns))
        rc = SEMA_EBUSY;
    if (rc == NEED_WAIT) {
        init_waiter(&bw.w, weight, idle ? KIND_IDLE : 0);
        bw.sem = s;
        /* Registered under our lock, queued before it is dropped: a fire in between
         * runs on_cancel after we unlock and finds the waiter queued (no stale waiter is left to
         * swallow a unit). */
        rc = sema__cancel_register(cancel, &bw.reg, on_cancel, &bw);
        if (rc == 0) {
            enqueue(s, &bw.w);
            unlock(s);
            return block(s, &bw, deadline_ns, cancel);
        }
    }
    leave_slow(s);
    unlock(s);
    return rc;
}

int sema_sem_acquire_until(sema_sem_t *sem, uint64_t weight, int64_t deadline_ns,
                           sema_cancel_t *cancel)
{
    if (sem == NULL || weight == 0)
        return SEMA_EINVAL;
    if (sema_cancel_fired(cancel))
        return SEMA_ECANCELED;
    if (SEMA__LIKELY(fast_acquire(sem, weight)))
        return 0;
    return acquire_slow(sem, weight, 0, deadline_ns, cancel);
}

/* Kept out of line so the fast path needs no stack frame. */
static __attribute__((noinline)) int acquire_timeout_slow(struct sema_sem *s, uint64_t weight,
                                                          int64_t timeout_ms)
{
    return acquire_slow(s, weight, 0, deadline_of(timeout_ms), NULL);
}

int sema_sem_acquire(sema_sem_t *sem, uint64_t weight, int64_t timeout_ms)
{
    if (sem == NULL || weight == 0)
        return SEMA_EINVAL;
    if (SEMA__LIKELY(fast_acquire(sem, weight)))
        return 0;
    return acquire_timeout_slow(sem, weight, timeout_ms);
}

int sema_sem_try_acquire(sema_sem_t *sem, uint64_t weight)
{
    return sema_sem_acquire(sem, weight, 0);
}

int sema_sem_wait_idle_until(sema_sem_t *sem, int64_t deadline_ns, sema_cancel_t *cancel)
{
    if (sem == NULL)
        return SEMA_EINVAL;
    if (sema_cancel_fired(cancel))
        return SEMA_ECANCELED;
    return acquire_slow(sem, 0, 1, deadline_ns, cancel);
}

int sema_sem_wait_idle(sema_sem_t *sem, int64_t timeout_ms)
{
    return sema_sem_wait_idle_until(sem, deadline_of(timeout_ms), NULL);
}

/* ---- callback requests ------------------------------------------------------------------ */

static int queue_async(struct sema_sem *s, uint64_t weight, int idle, sema_sem_waiter_t *n,
                       sema_sem_cb cb, void *arg)
{
    int rc;

    lock(s);
    enter_slow(s);
    if (n->queued_ == 1 && n->reserved_[0] == s)
        rc = SEMA_EINVAL; /* still queued here: queueing it twice would corrupt the queue */
    else
        rc = admit_now(s, weight, idle);
    if (rc == NEED_WAIT) {
        init_waiter(n, weight, KIND_CB | (idle ? KIND_IDLE : 0));
        n->cb_ = cb;
        n->arg_ = arg;
        n->reserved_[0] = s; /* lets cancel_async refuse a waiter of another semaphore */
        enqueue(s, n);
        rc = SEMA_SEM_QUEUED;
    }
    leave_slow(s);
    unlock(s);
    return rc;
}

int sema_sem_acquire_async(sema_sem_t *sem, uint64_t weight, sema_sem_waiter_t *waiter,
                           sema_sem_cb cb, void *arg)
{
    if (sem == NULL || weight == 0 || waiter == NULL || cb == NULL)
        return SEMA_EINVAL;
    if (fast_acquire(sem, weight))
        return 0;
    return queue_async(sem, weight, 0, waiter, cb, arg);
}

int sema_sem_wait_idle_async(sema_sem_t *sem, sema_sem_waiter_t *waiter, sema_sem_cb cb, void *arg)
{
    if (sem == NULL || waiter == NULL || cb == NULL)
        return SEMA_EINVAL;
    return queue_async(sem, 0, 1, waiter, cb, arg);
}

int sema_sem_cancel_async(sema_sem_t *sem, sema_sem_waiter_t *waiter)
{
    notify_list_t out = {NULL, NULL};
    int rc = SEMA_ENOENT;

    if (sem == NULL || waiter == NULL)
        return SEMA_EINVAL;
    lock(sem);
    if (waiter->queued_ && (waiter->kind_ & KIND_CB) && waiter->reserved_[0] == sem) {
        withdraw(sem, waiter, &out);
        rc = 0;
    }
    unlock(sem);
    notify(&out);
    return rc;
}

/* ---- releasing and whole-semaphore operations ------------------------------------------- */

static __attribute__((noinline)) int release_slow(struct sema_sem *s, uint64_t weight)
{
    notify_list_t out = {NULL, NULL};
    int rc = 0;

    lock(s);
    enter_slow(s);
    if (weight > (uint64_t)((int64_t)s->cap - s->avail)) {
        rc = SEMA_EOVERFLOW;
    } else {
        s->avail += (int64_t)weight;
        admit(s, &out);
    }
    leave_slow(s);
    unlock(s);
    notify(&out); /* s is not touched from here on: a woken waiter may free it */
    return rc;
}

int sema_sem_release(sema_sem_t *sem, uint64_t weight)
{
    if (sem == NULL || weight == 0)
        return SEMA_EINVAL;
    if (SEMA__LIKELY(fast_release(sem, weight)))
        return 0;
    return release_slow(sem, weight);
}

int sema_sem_close(sema_sem_t *sem)
{
    notify_list_t out = {NULL, NULL};

    if (sem == NULL)
        return SEMA_EINVAL;
    lock(sem);
    enter_slow(sem);
    sem->closed = 1;
    while (sem->head != NULL)
        settle(sem, sem->head, SEMA_ECANCELED, &out);
    unlock(sem);
    notify(&out);
    return 0;
}

int sema_sem_set_capacity(sema_sem_t *sem, uint64_t capacity)
{
    notify_list_t out = {NULL, NULL};
    sema_sem_waiter_t *n, *next;

    if (sem == NULL || capacity == 0 || capacity > SEMA_SEM_MAX_CAPACITY)
        return SEMA_EINVAL;
    lock(sem);
    enter_slow(sem);
    sem->avail += (int64_t)capacity - (int64_t)sem->cap;
    __atomic_store_n(&sem->cap, capacity, __ATOMIC_RELAXED);
    sem->gen = (sem->gen + 1) & SEMA__SEM_GEN_MASK;
    for (n = sem->head; n != NULL; n = next) {
        next = n->next_;
        if (!(n->kind_ & KIND_IDLE) && n->weight_ > capacity)
            settle(sem, n, SEMA_EINVAL, &out);
    }
    admit(sem, &out);
    leave_slow(sem);
    unlock(sem);
    notify(&out);
    return 0;
}

/* Under the lock: the total weight queued, a wait-idle counting as the capacity; saturates
 * at UINT64_MAX (300 requests of the largest weight already pass 2^64). */
static uint64_t waiting_total(const struct sema_sem *s)
{
    uint64_t idle, sum;

    if (s->waiting_hi != 0 || __builtin_mul_overflow(s->nidle, s->cap, &idle) ||
        __builtin_add_overflow(s->waiting, idle, &sum))
        return UINT64_MAX;
    return sum;
}

int sema_sem_stats(sema_sem_t *sem, sema_sem_stats_t *out)
{
    uint64_t w;

    if (sem == NULL || out == NULL)
        return SEMA_EINVAL;
    lock(sem);
    w = __atomic_load_n(&sem->word, __ATOMIC_ACQUIRE);
    out->capacity = sem->cap;
    out->available = (w & SEMA__SEM_SLOW) ? sem->avail : (int64_t)(w & SEMA__SEM_AVAIL_MASK);
    out->held = (uint64_t)((int64_t)sem->cap - out->available);
    out->waiters = sem->nwaiters;
    out->waiting = waiting_total(sem);
    out->closed = sem->closed;
    unlock(sem);
    return 0;
}
