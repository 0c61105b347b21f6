/* SPDX-License-Identifier: MIT */
/* keyed.c - keyed reader/writer lock: a striped hash table of per-key FIFO weighted queues. */
#include "internal.h"
#include "cancel_internal.h"
#include "sema/keyed.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* Each key's state is a tiny weighted semaphore of capacity R guarded by its
 * stripe's mutex: no second lock per key, and the entry's lifetime (refs =
 * holders + waiters) is decided under the same lock that finds it. */

#define STRIPES 64
#define STRIPE_SHIFT 58 /* top 6 bits of the hash pick the stripe */
#define MIN_BUCKETS 16
#define SMALL_KEY 40 /* keys up to this length share one allocation size */
#define FREE_MAX 8   /* freed small entries kept per stripe */

enum { W_WAITING, W_GRANTED, W_CANCELED };

struct entry;
struct stripe;

/* A blocked request; lives on the waiting thread's stack. */
struct waiter {
    struct waiter *prev, *next;
    uint64_t weight;
    int state; /* W_*, under the stripe lock */
    pthread_cond_t cv;
    sema_keyed_t *k;
    struct entry *e;
    struct stripe *s;
    sema__cancel_reg_t reg;
};

struct entry {
    struct entry *next; /* bucket chain */
    uint64_t hash;
    uint64_t held;              /* weight held */
    struct waiter *head, *tail; /* FIFO of waiters */
    uint64_t holders;           /* lock holders: up to R = UINT32_MAX shared */
    uint64_t refs;              /* holders + waiters: freed at 0; past 2^32 with R holders */
    uint32_t key_len;
    unsigned char key[];
};

struct stripe {
    _Alignas(64) pthread_mutex_t mu;
    struct entry **buckets;
    size_t mask;          /* buckets - 1 */
    _Atomic size_t count; /* entries; written under mu */
    struct entry *free_list;
    unsigned nfree;
    size_t sleepers;         /* threads inside wait_queued(), under mu */
    int draining;            /* sema_keyed_free() waits for sleepers to leave */
    pthread_cond_t drain_cv; /* signalled when sleepers drops to 0 while draining */
};

struct sema_keyed {
    struct stripe stripes[STRIPES];
    uint64_t max_readers; /* R */
    size_t max_keys;      /* 0: no cap */
    _Atomic size_t total; /* entries, kept only with a cap */
    atomic_int closed;
    uint64_t seed;
    pthread_condattr_t cattr; /* CLOCK_MONOTONIC */
    void *raw;                /* the allocation, before alignment */
};

/* --- hashing ---------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}

static uint64_t hash_key(const unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
    uint64_t v;

    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&v, p, 8);
        h = (h ^ mix64(v)) * 0x9e3779b97f4a7c15ULL;
        h = (h << 29) | (h >> 35);
    }
    v = 0;
    if (n > 0)
        memcpy(&v, p, n);
    return mix64(h ^ mix64(v + n));
}

/* --- stripe table ----------------------------------------------------- */

static void slock(struct stripe *s)
{
    SEMA__CHECK(pthread_mutex_lock(&s->mu) == 0);
}

static void sunlock(struct stripe *s)
{
    SEMA__CHECK(pthread_mutex_unlock(&s->mu) == 0);
}

static struct entry *find(struct stripe *s, uint64_t h, const void *key, size_t len)
{
    struct entry *e = s->buckets[h & s->mask];

    for (; e != NULL; e = e->next)
        if (e->hash == h && e->key_len == len && (len == 0 || memcmp(e->key, key, len) == 0))
            return e;
    return NULL;
}

/* Move every entry into a table of `nb` buckets; keep the old one if the
 * allocation fails (lookups only get slower). */
static void resize(struct stripe *s, size_t nb)
{
    struct entry **nbk = sema__calloc(nb, sizeof(*nbk));

    if (nbk == NULL)
        return;
    for (size_t i = 0; i <= s->mask; i++) {
        struct entry *e = s->buckets[i], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            e->next = nbk[e->hash & (nb - 1)];
            nbk[e->hash & (nb - 1)] = e;
        }
    }
    sema__free(s->buckets);
    s->buckets = nbk;
    s->mask = nb - 1;
}

static size_t entry_size(size_t len)
{
    return sizeof(struct entry) + (len <= SMALL_KEY ? SMALL_KEY : len);
}

static struct entry *entry_alloc(struct stripe *s, size_t len)
{
    struct entry *e;

    if (len <= SMALL_KEY && s->free_list != NULL) {
        e = s->free_list;
        s->free_list = e->next;
        s->nfree--;
        return e;
    }
    return sema__malloc(entry_size(len));
}

static int key_reserve(sema_keyed_t *k)
{
    if (k->max_keys == 0)
        return 0;
    if (atomic_fetch_add(&k->total, 1) >= k->max_keys) {
        atomic_fetch_sub(&k->total, 1);
        return SEMA_ELIMIT;
    }
    return 0;
}

static void key_unreserve(sema_keyed_t *k)
{
    if (k->max_keys != 0)
        atomic_fetch_sub(&k->total, 1);
}

/* Create the state of a new key. Under the stripe lock. */
static int insert(sema_keyed_t *k, struct stripe *s, uint64_t h, const void *key, size_t len,
                  struct entry **out)
{
    struct entry *e;
    size_t n = atomic_load_explicit(&s->count, memory_order_relaxed);

    if (key_reserve(k) != 0)
        return SEMA_ELIMIT;
    e = entry_alloc(s, len);
    if (e == NULL) {
        key_unreserve(k);
        return SEMA_ENOMEM;
    }
    memset(e, 0, sizeof(*e));
    e->hash = h;
    e->key_len = (uint32_t)len;
    if (len > 0)
        memcpy(e->key, key, len);
    if (n + 1 > s->mask + 1)
        resize(s, (s->mask + 1) * 2);
    e->next = s->buckets[h & s->mask];
    s->buckets[h & s->mask] = e;
    atomic_store_explicit(&s->count, n + 1, memory_order_relaxed);
    *out = e;
    return 0;
}

/* Free a key's state once nothing refers to it. Under the stripe lock. */
static void remove_entry(sema_keyed_t *k, struct stripe *s, struct entry *e, int may_shrink)
{
    struct entry **pp = &s->buckets[e->hash & s->mask];
    size_t n;

    if (e->refs != 0)
        return;
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    n = atomic_load_explicit(&s->count, memory_order_relaxed) - 1;
    atomic_store_explicit(&s->count, n, memory_order_relaxed);
    key_unreserve(k);
    if (e->key_len <= SMALL_KEY && s->nfree < FREE_MAX) {
        e->next = s->free_list;
        s->free_list = e;
        s->nfree++;
    } else {
        sema__free(e);
    }
    if (may_shrink && s->mask + 1 > MIN_BUCKETS && n < (s->mask + 1) / 8)
        resize(s, (s->mask + 1) / 2);
}

static void remove_if_idle(sema_keyed_t *k, struct stripe *s, struct entry *e)
{
    remove_entry(k, s, e, 1);
}

/* --- the per-key FIFO ------------------------------------------------- */

static void enqueue(struct entry *e, struct waiter *w)
{
    SEMA__QUEUE_PUSH(e, w, prev, next);
    e->refs++;
}

static void dequeue(struct entry *e, struct waiter *w)
{
    SEMA__QUEUE_REMOVE(e, w, prev, next);
}

/* Grant head requests while they fit (strict FIFO, head-of-line blocking).
 * The waiter's cv is signalled under the lock: its owner cannot leave (and
 * destroy the cv) before it gets the lock back. */
static void admit(sema_keyed_t *k, struct entry *e)
{
    while (e->head != NULL && e->held + e->head->weight <= k->max_readers) {
        struct waiter *w = e->head;

        dequeue(e, w);
        e->held += w->weight;
        e->holders++;
        w->state = W_GRANTED; /* refs: the waiter became a holder */
        SEMA__CHECK(pthread_cond_signal(&w->cv) == 0);
    }
}

/* Withdraw a waiting request (timeout, cancel, close). Under the lock. The
 * caller frees the entry if it became idle. */
static void withdraw(sema_keyed_t *k, struct entry *e, struct waiter *w, int state)
{
    dequeue(e, w);
    e->refs--;
    w->state = state;
    admit(k, e);
}

/* A cancel token fired: runs in the firing thread, no token lock held. */
static void on_cancel(sema__cancel_reg_t *reg)
{
    struct waiter *w = reg->arg;
    struct stripe *s = w->s;

    slock(s);
    if (w->state == W_WAITING) {
        struct entry *e = w->e;

        withdraw(w->k, e, w, W_CANCELED);
        remove_if_idle(w->k, s, e);
        SEMA__CHECK(pthread_cond_signal(&w->cv) == 0);
    }
    sunlock(s);
}

/* --- lock / unlock ---------------------------------------------------- */

static struct stripe *stripe_of(sema_keyed_t *k, uint64_t h)
{
    return &k->stripes[h >> STRIPE_SHIFT];
}

static void fill(sema_keyed_lock_t *out, sema_keyed_t *k, struct entry *e, uint64_t weight)
{
    out->keyed_ = k;
    out->entry_ = e;
    out->weight_ = weight;
}

static int timed_wait(struct waiter *w, struct stripe *s, int64_t deadline_ns)
{
    struct timespec ts;

    if (deadline_ns == INT64_MAX) {
        SEMA__CHECK(pthread_cond_wait(&w->cv, &s->mu) == 0);
        return 0;
    }
    ts.tv_sec = deadline_ns / 1000000000;
    ts.tv_nsec = deadline_ns % 1000000000;
    return pthread_cond_timedwait(&w->cv, &s->mu, &ts);
}

/* Queue `w` on `e` and sleep until granted, withdrawn, or the deadline.
 * Entered and left with the stripe lock held; the caller has registered the
 * cancel token. Returns 0, SEMA_ETIMEDOUT or SEMA_ECANCELED. */
static int wait_turn(sema_keyed_t *k, struct stripe *s, struct entry *e, struct waiter *w,
                     int64_t deadline_ns)
{
    enqueue(e, w);
    while (w->state == W_WAITING) {
        int rc = timed_wait(w, s, deadline_ns);

        if (rc == ETIMEDOUT && w->state == W_WAITING) {
            withdraw(k, e, w, W_CANCELED);
            remove_if_idle(k, s, e);
            return SEMA_ETIMEDOUT;
        }
        SEMA__CHECK(rc == 0 || rc == ETIMEDOUT);
    }
    return w->state == W_GRANTED ? 0 : SEMA_ECANCELED;
}

/* Find the key or create its state. Under the stripe lock. */
static int find_or_insert(sema_keyed_t *k, struct stripe *s, uint64_t h, const void *key,
                          size_t len, struct entry **out)
{
    *out = find(s, h, key, len);
    if (*out != NULL)
        return 0;
    return insert(k, s, h, key, len, out);
}

/* Sleep in the key's queue, watching `cancel`. Under the stripe lock. */
static int wait_queued(sema_keyed_t *k, struct stripe *s, struct entry *e, uint64_t weight,
                       int64_t timeout_ms, sema_cancel_t *cancel, sema_keyed_lock_t *out)
{
    struct waiter w;
    int rc;

    s->sleepers++; /* free waits for us until we drop the stripe lock for good */
    memset(&w, 0, sizeof(w));
    w.weight = weight;
    w.state = W_WAITING;
    w.k = k;
    w.e = e;
    w.s = s;
    SEMA__CHECK(pthread_cond_init(&w.cv, &k->cattr) == 0);
    rc = sema__cancel_register(cancel, &w.reg, on_cancel, &w);
    if (rc == 0) {
        rc = wait_turn(k, s, e, &w, sema__deadline_ns(timeout_ms));
        if (rc == 0)
            fill(out, k, e, weight);
        if (cancel != NULL) {
            sunlock(s);
            sema__cancel_unregister(cancel, &w.reg); /* never under the stripe lock */
            slock(s);
        }
    } else {
        remove_if_idle(k, s, e);
    }
    SEMA__CHECK(pthread_cond_destroy(&w.cv) == 0);
    /* The caller's unlock of the stripe is this thread's last touch of k. */
    if (--s->sleepers == 0 && s->draining)
        SEMA__CHECK(pthread_cond_signal(&s->drain_cv) == 0);
    return rc;
}

/* With the stripe locked: take the key at once if nobody is queued and the
 * weight fits, else fail a try or queue. */
static int lock_locked(sema_keyed_t *k, struct stripe *s, uint64_t h, const void *key, size_t len,
                       uint64_t weight, int64_t timeout_ms, sema_cancel_t *cancel,
                       sema_keyed_lock_t *out)
{
    struct entry *e;
    int rc;

    if (atomic_load_explicit(&k->closed, memory_order_relaxed))
        return SEMA_ECANCELED;
    rc = find_or_insert(k, s, h, key, len, &e);
    if (rc != 0)
        return rc;
    if (e->head == NULL && e->held + weight <= k->max_readers) {
        e->held += weight;
        e->holders++;
        e->refs++;
        fill(out, k, e, weight);
        return 0;
    }
    if (timeout_ms == 0) {
        remove_if_idle(k, s, e);
        return SEMA_EBUSY;
    }
    return wait_queued(k, s, e, weight, timeout_ms, cancel, out);
}

static int check_args(const sema_keyed_t *k, const void *key, size_t len, int mode,
                      const sema_keyed_lock_t *out)
{
    if (k == NULL || out == NULL || (key == NULL && len > 0))
        return SEMA_EINVAL;
    if (mode != SEMA_SHARED && mode != SEMA_EXCLUSIVE)
        return SEMA_EINVAL;
    return len > SEMA_KEYED_KEY_MAX ? SEMA_ENAMETOOLONG : 0;
}

int sema_keyed_lock_cancel(sema_keyed_t *k, const void *key, size_t len, int mode,
                           int64_t timeout_ms, sema_cancel_t *cancel, sema_keyed_lock_t *out)
{
    uint64_t h;
    struct stripe *s;
    int rc = check_args(k, key, len, mode, out);

    if (out != NULL)
        fill(out, NULL, NULL, 0);
    if (rc != 0)
        return rc;
    if (sema_cancel_fired(cancel))
        return SEMA_ECANCELED;
    h = hash_key(key, len, k->seed);
    s = stripe_of(k, h);
    slock(s);
    rc = lock_locked(k, s, h, key, len, mode == SEMA_SHARED ? 1 : k->max_readers, timeout_ms,
                     cancel, out);
    sunlock(s);
    return rc;
}

int sema_keyed_lock(sema_keyed_t *k, const void *key, size_t len, int mode, int64_t timeout_ms,
                    sema_keyed_lock_t *out)
{
    return sema_keyed_lock_cancel(k, key, len, mode, timeout_ms, NULL, out);
}

int sema_keyed_trylock(sema_keyed_t *k, const void *key, size_t len, int mode,
                       sema_keyed_lock_t *out)
{
    return sema_keyed_lock_cancel(k, key, len, mode, 0, NULL, out);
}

void sema_keyed_unlock(sema_keyed_lock_t *lock)
{
    sema_keyed_t *k;
    struct entry *e;
    struct stripe *s;
    uint64_t weight;

    if (lock == NULL || lock->keyed_ == NULL)
        return;
    k = lock->keyed_;
    e = lock->entry_;
    weight = lock->weight_;
    /* Clear the handle first: once the key is handed over, the next holder
     * may free the memory the handle lives in (a use after free glibc and musl once shipped). */
    fill(lock, NULL, NULL, 0);
    s = stripe_of(k, e->hash); /* immutable while we hold a ref */
    slock(s);
    e->held -= weight;
    e->holders--;
    e->refs--;
    admit(k, e);
    remove_if_idle(k, s, e);
    sunlock(s); /* the last touch: k may be freed by a waiter from here on */
}

int sema_keyed_held(const sema_keyed_lock_t *lock)
{
    return lock != NULL && lock->keyed_ != NULL;
}

int sema_keyed_with(sema_keyed_t *k, const void *key, size_t len, int mode, int64_t timeout_ms,
                    sema_keyed_fn fn, void *arg, int *fn_result)
{
    sema_keyed_lock_t lock = SEMA_KEYED_LOCK_INIT;
    int rc;

    if (fn == NULL)
        return SEMA_EINVAL;
    rc = sema_keyed_lock(k, key, len, mode, timeout_ms, &lock);
    if (rc != 0)
        return rc;
    rc = fn(arg);
    sema_keyed_unlock(&lock);
    if (fn_result != NULL)
        *fn_result = rc;
    return 0;
}

void sema_keyed_cleanup(sema_keyed_lock_t *lock)
{
    sema_keyed_unlock(lock);
}

/* --- lifetime and introspection --------------------------------------- */

static int stripe_init(struct stripe *s)
{
    s->buckets = sema__calloc(MIN_BUCKETS, sizeof(*s->buckets));
    if (s->buckets == NULL)
        return SEMA_ENOMEM;
    s->mask = MIN_BUCKETS - 1;
    SEMA__CHECK(pthread_mutex_init(&s->mu, NULL) == 0);
    SEMA__CHECK(pthread_cond_init(&s->drain_cv, NULL) == 0);
    return 0;
}

static void stripe_destroy(struct stripe *s)
{
    while (s->free_list != NULL) {
        struct entry *e = s->free_list;

        s->free_list = e->next;
        sema__free(e);
    }
    sema__free(s->buckets);
    SEMA__CHECK(pthread_cond_destroy(&s->drain_cv) == 0);
    SEMA__CHECK(pthread_mutex_destroy(&s->mu) == 0);
}

static void keyed_destroy(sema_keyed_t *k, int nstripes)
{
    for (int i = 0; i < nstripes; i++)
        stripe_destroy(&k->stripes[i]);
    SEMA__CHECK(pthread_condattr_destroy(&k->cattr) == 0);
    sema__free(k->raw);
}

int sema_keyed_new_opts(sema_keyed_t **out, const sema_keyed_opts_t *opts)
{
    sema_keyed_opts_t o = {0, 0};
    void *raw;
    sema_keyed_t *k;

    if (out == NULL)
        return SEMA_EINVAL;
    *out = NULL;
    if (opts != NULL)
        o = *opts;
    if (o.max_readers > SEMA_KEYED_READERS_MAX)
        return SEMA_EINVAL;
    raw = sema__calloc(1, sizeof(*k) + 64);
    if (raw == NULL)
        return SEMA_ENOMEM;
    k = (sema_keyed_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    k->raw = raw;
    k->max_keys = o.max_keys;
    k->max_readers = o.max_readers == 0 ? SEMA_KEYED_READERS_MAX : o.max_readers;
    k->seed = mix64((uint64_t)(uintptr_t)k ^ (uint64_t)sema__now_ns());
    SEMA__CHECK(pthread_condattr_init(&k->cattr) == 0);
    SEMA__CHECK(pthread_condattr_setclock(&k->cattr, CLOCK_MONOTONIC) == 0);
    for (int i = 0; i < STRIPES; i++) {
        if (stripe_init(&k->stripes[i]) != 0) {
            keyed_destroy(k, i);
            return SEMA_ENOMEM;
        }
    }
    *out = k;
    return 0;
}

int sema_keyed_new(sema_keyed_t **out)
{
    return sema_keyed_new_opts(out, NULL);
}

/* Wait until the threads whose requests were withdrawn (by close, timeout
 * or cancel) have left the stripe: they still take its lock once more. */
static void drain_stripe(struct stripe *s)
{
    slock(s);
    if (atomic_load_explicit(&s->count, memory_order_relaxed) != 0)
        SEMA__ABORT("sema_keyed_free: keys still have holders or waiters");
    s->draining = 1;
    while (s->sleepers > 0)
        SEMA__CHECK(pthread_cond_wait(&s->drain_cv, &s->mu) == 0);
    sunlock(s);
}

void sema_keyed_free(sema_keyed_t *k)
{
    if (k == NULL)
        return;
    if (sema_keyed_count(k) != 0)
        SEMA__ABORT("sema_keyed_free: keys still have holders or waiters");
    for (int i = 0; i < STRIPES; i++)
        drain_stripe(&k->stripes[i]);
    keyed_destroy(k, STRIPES);
}

/* Fail every waiter of one stripe. Under its lock. No admission runs: the
 * queue is emptied, so nothing behind a withdrawn waiter is granted. */
static void close_stripe(sema_keyed_t *k, struct stripe *s)
{
    for (size_t b = 0; b <= s->mask; b++) {
        struct entry *e = s->buckets[b], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            while (e->head != NULL) {
                struct waiter *w = e->head;

                dequeue(e, w);
                e->refs--;
                w->state = W_CANCELED;
                SEMA__CHECK(pthread_cond_signal(&w->cv) == 0);
            }
            if (e->refs == 0)
                remove_entry(k, s, e, 0);
        }
    }
}

void sema_keyed_close(sema_keyed_t *k)
{
    if (k == NULL)
        return;
    atomic_store(&k->closed, 1);
    for (int i = 0; i < STRIPES; i++) {
        slock(&k->stripes[i]);
        close_stripe(k, &k->stripes[i]);
        sunlock(&k->stripes[i]);
    }
}

size_t sema_keyed_count(const sema_keyed_t *k)
{
    size_t n = 0;

    if (k == NULL)
        return 0;
    for (int i = 0; i < STRIPES; i++)
        n += atomic_load_explicit((_Atomic size_t *)&k->stripes[i].count, memory_order_relaxed);
    return n;
}

int sema_keyed_key_stats(sema_keyed_t *k, const void *key, size_t len, sema_keyed_key_stats_t *out)
{
    uint64_t h;
    struct stripe *s;
    struct entry *e;

    if (k == NULL || out == NULL || (key == NULL && len > 0) || len > SEMA_KEYED_KEY_MAX)
        return SEMA_EINVAL;
    memset(out, 0, sizeof(*out));
    h = hash_key(key, len, k->seed);
    s = stripe_of(k, h);
    slock(s);
    e = find(s, h, key, len);
    if (e != NULL) {
        out->held = e->held;
        out->holders = e->holders;
        out->waiters = e->refs - e->holders;
    }
    sunlock(s);
    return e != NULL ? 0 : SEMA_ENOENT;
}
