/* SPDX-License-Identifier: MIT */
/* map_limit.c - bounded parallel map over a producer, with ordered results and a lazy pool. */
#include "internal.h"
#include "sema/map_limit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define NO_ERROR UINT64_MAX

enum { SLOT_EMPTY, SLOT_DONE, SLOT_FAILED };

/* One reorder-ring slot: item i lives in ring[i % window] until emitted. */
struct slot {
    void *result;
    int state; /* SLOT_* */
};

struct sema_map_limit {
    sema_map_limit_opts_t o;
    pthread_mutex_t mu;
    pthread_cond_t wcv;     /* window has room again (half free), stop */
    pthread_cond_t done_cv; /* last worker thread left */
    struct slot *ring;      /* emit mode only: `window` slots */
    pthread_t *tids;        /* limit - 1 worker threads */
    unsigned char *tid_ok;  /* tids[k] was created and must be joined */

    /* Under mu. */
    uint64_t next_index; /* index of the next item to produce == items started */
    uint64_t emit_next;  /* next index to emit */
    uint64_t err_index;  /* lowest failed index, NO_ERROR if none */
    int err;             /* its code */
    size_t nthreads;     /* threads working or reserved, the caller included */
    size_t live;         /* worker threads (not the caller) not yet finished */
    size_t wwaiters;     /* threads blocked on wcv */
    int producer_done;   /* next() returned 0 */
    int emitting;        /* a thread is running the emit loop */
    int ran;             /* run() was called */

    /* Lock-free views for stats and cancel. */
    atomic_int cancelled;
    atomic_int stopped;
    _Atomic uint64_t active, started, completed, emitted, threads;
};

static void lock(sema_map_limit_t *m)
{
    SEMA__CHECK(pthread_mutex_lock(&m->mu) == 0);
}

static void unlock(sema_map_limit_t *m)
{
    SEMA__CHECK(pthread_mutex_unlock(&m->mu) == 0);
}

/* The map whose producer this thread is running (with mu held), so that a
 * cancel from inside next() does not lock mu again. */
static _Thread_local sema_map_limit_t *producing_map;

/* Window waiters sleep until half the window is free, not one slot: one
 * wake-up then lets them start a batch of items. */
static void wait_window(sema_map_limit_t *m)
{
    m->wwaiters++;
    SEMA__CHECK(pthread_cond_wait(&m->wcv, &m->mu) == 0);
    m->wwaiters--;
}

static void wake_window(sema_map_limit_t *m, int force)
{
    if (m->wwaiters > 0 && (force || m->next_index - m->emit_next <= m->o.window / 2))
        SEMA__CHECK(pthread_cond_broadcast(&m->wcv) == 0);
}

static void bump(_Atomic uint64_t *counter, int64_t delta)
{
    atomic_fetch_add_explicit(counter, (uint64_t)delta, memory_order_relaxed);
}

static int is_stopped(const sema_map_limit_t *m)
{
    return m->err_index != NO_ERROR || atomic_load(&m->cancelled);
}

/* Record that item `index` failed with `code`; the lowest index wins. */
static void record_error(sema_map_limit_t *m, uint64_t index, int code)
{
    if (index < m->err_index) {
        m->err_index = index;
        m->err = code;
    }
    atomic_store(&m->stopped, 1);
    wake_window(m, 1);
}

static int opts_valid(const sema_map_limit_opts_t *o)
{
    if (o == NULL || o->next == NULL || o->fn == NULL)
        return 0;
    if (o->limit == 0 || o->limit > SEMA_MAP_LIMIT_MAX)
        return 0;
    return o->window <= SEMA_MAP_LIMIT_MAX_WINDOW;
}

static int alloc_parts(sema_map_limit_t *m)
{
    size_t nworkers = m->o.limit - 1;

    if (m->o.emit != NULL) {
        if (m->o.window == 0)
            m->o.window = m->o.limit < 16 ? 256 : 16 * m->o.limit;
        m->ring = sema__calloc(m->o.window, sizeof(*m->ring));
        if (m->ring == NULL)
            return SEMA_ENOMEM;
    }
    if (nworkers > 0) {
        m->tids = sema__calloc(nworkers, sizeof(*m->tids));
        m->tid_ok = sema__calloc(nworkers, 1);
        if (m->tids == NULL || m->tid_ok == NULL)
            return SEMA_ENOMEM;
    }
    return 0;
}

int sema_map_limit_new(sema_map_limit_t **out, const sema_map_limit_opts_t *opts)
{
    sema_map_limit_t *m;

    if (out == NULL)
        return SEMA_EINVAL;
    *out = NULL;
    if (!opts_valid(opts))
        return SEMA_EINVAL;
    m = sema__calloc(1, sizeof(*m));
    if (m == NULL)
        return SEMA_ENOMEM;
    m->o = *opts;
    m->err_index = NO_ERROR;
    if (alloc_parts(m) != 0) {
        sema__free(m->ring);
        sema__free(m->tids);
        sema__free(m->tid_ok);
        sema__free(m);
        return SEMA_ENOMEM;
    }
    SEMA__CHECK(pthread_mutex_init(&m->mu, NULL) == 0);
    SEMA__CHECK(pthread_cond_init(&m->wcv, NULL) == 0);
    SEMA__CHECK(pthread_cond_init(&m->done_cv, NULL) == 0);
    *out = m;
    return 0;
}

void sema_map_limit_free(sema_map_limit_t *m)
{
    if (m == NULL)
        return;
    SEMA__CHECK(pthread_cond_destroy(&m->done_cv) == 0);
    SEMA__CHECK(pthread_cond_destroy(&m->wcv) == 0);
    SEMA__CHECK(pthread_mutex_destroy(&m->mu) == 0);
    sema__free(m->ring);
    sema__free(m->tids);
    sema__free(m->tid_ok);
    sema__free(m);
}

/* Call the producer. Under mu: producer calls are serialised anyway, and
 * keeping the lock saves two lock round trips per item. Returns 1 with an
 * item, 0 at the end or on error. */
static int produce(sema_map_limit_t *m, void **item)
{
    sema_map_limit_t *outer = producing_map; /* next() may itself run a map */
    int rc;

    producing_map = m;
    rc = m->o.next(m->o.ctx, item);
    producing_map = outer;
    if (rc == 1)
        return 1;
    if (rc == 0)
        m->producer_done = 1;
    else
        record_error(m, m->next_index, rc < 0 ? rc : SEMA_EINVAL);
    return 0;
}

/* Wait for a startable item and claim it. Under mu. Returns 1 with *item and
 * *index set, 0 when this thread should stop. */
static int take(sema_map_limit_t *m, void **item, uint64_t *index)
{
    for (;;) {
        if (is_stopped(m) || m->producer_done)
            return 0;
        if (m->ring != NULL && m->next_index - m->emit_next >= m->o.window) {
            wait_window(m);
            continue;
        }
        if (!produce(m, item))
            return 0;
        if (is_stopped(m)) {
            /* Cancelled from inside next(): the item never starts. */
            return 0;
        }
        *index = m->next_index++;
        bump(&m->started, 1);
        bump(&m->active, 1);
        return 1;
    }
}

#define EMIT_BATCH 32

/* Take up to EMIT_BATCH consecutive ready results off the ring. Under mu. */
static size_t take_ready(sema_map_limit_t *m, void **batch)
{
    size_t n = 0;

    while (n < EMIT_BATCH && m->emit_next + n < m->err_index && m->emit_next + n < m->next_index) {
        struct slot *s = &m->ring[(m->emit_next + n) % m->o.window];

        if (s->state != SLOT_DONE)
            break;
        batch[n++] = s->result;
        s->state = SLOT_EMPTY;
        s->result = NULL;
    }
    return n;
}

/* Emit a batch in order, without the lock; after a failed emit or a cancel,
 * the rest of the batch is discarded. Returns the number emitted; *rc is the
 * failed emit's code (0 if none). */
static size_t emit_batch(sema_map_limit_t *m, uint64_t first, void **batch, size_t n, int *rc)
{
    size_t i = 0;

    *rc = 0;
    for (; i < n && *rc == 0 && !atomic_load(&m->cancelled); i++)
        *rc = m->o.emit(m->o.ctx, first + i, batch[i]);
    for (size_t j = i; j < n; j++)
        if (m->o.discard != NULL)
            m->o.discard(m->o.ctx, first + j, batch[j]);
    return i;
}

/* Hand ready results to emit, in order, one call at a time, from a loop
 * (never by recursion), a batch per lock round trip. Under mu; drops it
 * around the emit calls. */
static void emit_ready(sema_map_limit_t *m)
{
    void *batch[EMIT_BATCH];

    if (m->ring == NULL || m->emitting)
        return;
    m->emitting = 1;
    while (!atomic_load(&m->cancelled)) {
        uint64_t first = m->emit_next;
        size_t n = take_ready(m, batch), done;
        int rc;

        if (n == 0)
            break;
        m->emit_next += n; /* the slots are free: the window moves on */
        unlock(m);
        done = emit_batch(m, first, batch, n, &rc);
        lock(m);
        bump(&m->emitted, (int64_t)done);
        if (rc != 0)
            record_error(m, first + done - 1, rc);
        wake_window(m, 0);
    }
    m->emitting = 0;
}

/* Item `index` returned `rc`. Under mu. */
static void finish(sema_map_limit_t *m, uint64_t index, int rc, void *result)
{
    bump(&m->active, -1);
    bump(&m->completed, 1);
    if (m->ring != NULL) {
        struct slot *s = &m->ring[index % m->o.window];

        s->state = rc == 0 ? SLOT_DONE : SLOT_FAILED;
        s->result = result;
    }
    if (rc != 0)
        record_error(m, index, rc);
    emit_ready(m);
}

/* Reserve a new worker if every thread is busy and more work may come. Under
 * mu. Returns the tids slot to create, or -1. */
static long want_thread(sema_map_limit_t *m)
{
    if (m->nthreads >= m->o.limit || m->producer_done || is_stopped(m))
        return -1;
    if (atomic_load_explicit(&m->active, memory_order_relaxed) < m->nthreads)
        return -1;
    m->live += 2; /* one for the creating step, one for the thread */
    return (long)(m->nthreads++ - 1);
}

static void *worker_main(void *arg);

static void leave(sema_map_limit_t *m, size_t n)
{
    m->live -= n;
    if (m->live == 0)
        SEMA__CHECK(pthread_cond_signal(&m->done_cv) == 0);
}

static void spawn(sema_map_limit_t *m, long k)
{
    pthread_t tid;
    int ok = pthread_create(&tid, NULL, worker_main, m) == 0;

    lock(m);
    if (ok) {
        m->tids[k] = tid;
        m->tid_ok[k] = 1;
        bump(&m->threads, 1);
        leave(m, 1);
    } else {
        /* No thread (its slot stays used): the map goes on with the ones it has. */
        leave(m, 2);
    }
    unlock(m);
}

static void work(sema_map_limit_t *m)
{
    void *item;
    uint64_t index;

    lock(m);
    while (take(m, &item, &index)) {
        long k = want_thread(m);
        void *result = NULL;
        int rc;

        unlock(m);
        if (k >= 0)
            spawn(m, k);
        rc = m->o.fn(m->o.ctx, index, item, &result);
        lock(m);
        finish(m, index, rc, result);
    }
    unlock(m);
}

static void *worker_main(void *arg)
{
    sema_map_limit_t *m = arg;

    work(m);
    lock(m);
    leave(m, 1);
    unlock(m);
    return NULL;
}

/* After every thread is gone: results that will never be emitted. */
static void drain(sema_map_limit_t *m)
{
    if (m->ring == NULL)
        return;
    for (uint64_t i = m->emit_next; i < m->next_index; i++) {
        struct slot *s = &m->ring[i % m->o.window];

        if (s->state == SLOT_DONE && m->o.discard != NULL)
            m->o.discard(m->o.ctx, i, s->result);
        s->state = SLOT_EMPTY;
        s->result = NULL;
    }
}

static void join_all(sema_map_limit_t *m)
{
    lock(m);
    while (m->live > 0)
        SEMA__CHECK(pthread_cond_wait(&m->done_cv, &m->mu) == 0);
    unlock(m);
    for (size_t k = 0; k + 1 < m->o.limit; k++)
        if (m->tid_ok[k])
            SEMA__CHECK(pthread_join(m->tids[k], NULL) == 0);
}

int sema_map_limit_run(sema_map_limit_t *m)
{
    int rc;

    if (m == NULL)
        return SEMA_EINVAL;
    lock(m);
    if (m->ran) {
        unlock(m);
        return SEMA_EINVAL;
    }
    m->ran = 1;
    m->nthreads = 1;
    bump(&m->threads, 1);
    unlock(m);
    if (!atomic_load(&m->cancelled))
        work(m);
    join_all(m);
    drain(m);
    if (m->err_index != NO_ERROR)
        rc = m->err;
    else
        rc = atomic_load(&m->cancelled) ? SEMA_ECANCELED : 0;
    return rc;
}

void sema_map_limit_cancel(sema_map_limit_t *m)
{
    if (m == NULL)
        return;
    atomic_store(&m->cancelled, 1);
    atomic_store(&m->stopped, 1);
    if (producing_map == m) {
        /* From inside next(): this thread holds mu already. */
        wake_window(m, 1);
        return;
    }
    lock(m);
    wake_window(m, 1);
    unlock(m);
}

void sema_map_limit_stats(const sema_map_limit_t *m, sema_map_limit_stats_t *out)
{
    uint64_t started;

    if (m == NULL || out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    started = atomic_load_explicit(&m->started, memory_order_relaxed);
    out->active = atomic_load_explicit(&m->active, memory_order_relaxed);
    out->started = started;
    out->completed = atomic_load_explicit(&m->completed, memory_order_relaxed);
    out->emitted = atomic_load_explicit(&m->emitted, memory_order_relaxed);
    out->threads = atomic_load_explicit(&m->threads, memory_order_relaxed);
    out->stopped = atomic_load(&m->stopped);
    if (m->o.total == 0)
        out->pending = SEMA_MAP_LIMIT_UNKNOWN;
    else
        out->pending = started >= m->o.total ? 0 : m->o.total - started;
}

int sema_map_limit(const sema_map_limit_opts_t *opts)
{
    sema_map_limit_t *m;
    int rc = sema_map_limit_new(&m, opts);

    if (rc != 0)
        return rc;
    rc = sema_map_limit_run(m);
    sema_map_limit_free(m);
    return rc;
}

/* The array form. Items are random-access, so the general engine (producer,
 * lock per item) is not needed: workers claim the next index from one
 * atomic counter, in input order, and the error path alone takes a lock.
 * Every claimed index runs, and indices are claimed in order, so when one
 * fails every lower index has started: the lowest failed index is exact. */
struct array_run {
    void *const *items;
    size_t n;
    sema_map_limit_fn fn;
    void *ctx;
    void **results;
    _Atomic size_t next; /* next index to claim */
    atomic_int stop;     /* an item failed: claim nothing more */
    pthread_mutex_t mu;  /* guards err_index, err */
    size_t err_index;
    int err;
};

static void array_failed(struct array_run *a, size_t index, int rc)
{
    SEMA__CHECK(pthread_mutex_lock(&a->mu) == 0);
    if (index < a->err_index) {
        a->err_index = index;
        a->err = rc;
    }
    SEMA__CHECK(pthread_mutex_unlock(&a->mu) == 0);
    atomic_store(&a->stop, 1);
}

static void *array_worker(void *arg)
{
    struct array_run *a = arg;

    while (!atomic_load(&a->stop)) {
        size_t i = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        int rc;

        if (i >= a->n)
            break;
        rc = a->fn(a->ctx, i, a->items[i], &a->results[i]);
        if (rc != 0)
            array_failed(a, i, rc);
    }
    return NULL;
}

/* The caller's thread plus up to limit-1 others; fewer if some cannot be
 * created. */
static void array_run_threads(struct array_run *a, size_t nthreads)
{
    pthread_t *tids = NULL;
    size_t made = 0;

    if (nthreads > 1)
        tids = sema__calloc(nthreads - 1, sizeof(*tids));
    for (; tids != NULL && made + 1 < nthreads; made++)
        if (pthread_create(&tids[made], NULL, array_worker, a) != 0)
            break;
    array_worker(a);
    for (size_t i = 0; i < made; i++)
        SEMA__CHECK(pthread_join(tids[i], NULL) == 0);
    sema__free(tids);
}

int sema_map_limit_array(void *const *items, size_t n, sema_map_limit_fn fn, void *ctx,
                         void **results, size_t limit)
{
    struct array_run a;

    if (fn == NULL || (n > 0 && (items == NULL || results == NULL)))
        return SEMA_EINVAL;
    if (limit == 0 || limit > SEMA_MAP_LIMIT_MAX)
        return SEMA_EINVAL;
    for (size_t i = 0; i < n; i++)
        results[i] = NULL;
    memset(&a, 0, sizeof(a));
    a.items = items;
    a.n = n;
    a.fn = fn;
    a.ctx = ctx;
    a.results = results;
    a.err_index = SIZE_MAX;
    SEMA__CHECK(pthread_mutex_init(&a.mu, NULL) == 0);
    array_run_threads(&a, n < limit ? n : limit);
    SEMA__CHECK(pthread_mutex_destroy(&a.mu) == 0);
    return a.err_index == SIZE_MAX ? 0 : a.err;
}
