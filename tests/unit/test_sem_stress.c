/* SPDX-License-Identifier: MIT */
/* test_sem_stress.c - randomized stress of the semaphore: weights, timeouts, cancels, resizes,
 * close; checks the held weight against an atomic witness, that every request settles with its
 * own outcome, and that grants follow FIFO order. */
#include "test_sem_helpers.h"

#define CAP 8

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t witness;     /* units held according to the holders themselves */
static int64_t witness_max; /* the largest capacity the semaphore had */

static void witness_add(uint64_t w)
{
    int64_t now = __atomic_add_fetch(&witness, (int64_t)w, __ATOMIC_ACQ_REL);

    if (now > __atomic_load_n(&witness_max, __ATOMIC_ACQUIRE))
        TEST_FAIL_("held %lld units with capacity at most %lld", (long long)now,
                   (long long)witness_max);
}

static void witness_sub(uint64_t w)
{
    __atomic_sub_fetch(&witness, (int64_t)w, __ATOMIC_ACQ_REL);
}

/* ---- blocking threads ------------------------------------------------------------------- */

typedef struct {
    sema_sem_t *sem;
    pthread_mutex_t mu;   /* guards token */
    sema_cancel_t *token; /* the token this worker waits with now, or NULL */
    uint64_t seed;
    long iters;
    int stop_on_cancel; /* resize/close run: stop at the first ECANCELED without a token */
    long outcome[5];    /* granted, busy, timedout, canceled, invalid */
} worker_t;

/* Hold the units a little while: long enough for others to queue behind. */
static void hold(uint64_t w, uint64_t *seed)
{
    uint64_t r = rnd(seed);
    struct timespec ts = {0, r % 32 == 0 ? 2000000 : (long)(r % 100) * 1000};

    witness_add(w);
    if (ts.tv_nsec > 50000)
        nanosleep(&ts, NULL);
    witness_sub(w);
}

typedef struct {
    uint64_t weight;
    uint64_t *seed;
} hold_arg_t;

static int hold_fn(void *arg)
{
    hold_arg_t *h = arg;

    hold(h->weight, h->seed);
    return 0;
}

/* One random request: returns its code, checked against the mode it was made in. */
static int one_request(worker_t *wk, uint64_t weight, int mode)
{
    sema_cancel_t *tok = NULL;
    int rc, res = -1;

    switch (mode) {
    case 0:
        rc = sema_sem_try_acquire(wk->sem, weight);
        break;
    case 1:
        rc = sema_sem_acquire(wk->sem, weight, (int64_t)(rnd(&wk->seed) % 3));
        break;
    case 2:
        ASSERT_OK(sema_cancel_new(&tok));
        pthread_mutex_lock(&wk->mu);
        wk->token = tok;
        pthread_mutex_unlock(&wk->mu);
        rc = sema_sem_acquire_until(wk->sem, weight, SEMA_DEADLINE_NONE, tok);
        pthread_mutex_lock(&wk->mu);
        wk->token = NULL;
        pthread_mutex_unlock(&wk->mu);
        sema_cancel_free(tok);
        break;
    default: {
        hold_arg_t ha = {weight, &wk->seed};

        rc = sema_sem_with(wk->sem, weight, -1, hold_fn, &ha, &res);
        if (rc == 0)
            ASSERT_EQ(res, 0);
        return rc;
    }
    }
    if (rc == 0) {
        hold(weight, &wk->seed);
        ASSERT_OK(sema_sem_release(wk->sem, weight));
    }
    /* Each failure must be the request's own: busy only for a try, timed out only with a
     * timeout, canceled only by its token (or a close). */
    if (rc == SEMA_EBUSY)
        ASSERT(mode == 0 || mode == 1);
    if (rc == SEMA_ETIMEDOUT)
        ASSERT_EQ(mode, 1);
    if (rc == SEMA_ECANCELED && !wk->stop_on_cancel)
        ASSERT_EQ(mode, 2);
    return rc;
}

static void *worker_main(void *arg)
{
    worker_t *wk = arg;

    for (long i = 0; i < wk->iters; i++) {
        uint64_t weight = 1 + rnd(&wk->seed) % (rnd(&wk->seed) % 4 == 0 ? CAP : CAP / 2);
        int mode = (int)(rnd(&wk->seed) % 4);
        int rc = one_request(wk, weight, mode);
        static const int codes[5] = {0, SEMA_EBUSY, SEMA_ETIMEDOUT, SEMA_ECANCELED, SEMA_EINVAL};
        int k;

        for (k = 0; k < 5 && codes[k] != rc; k++)
            ;
        if (k == 5)
            TEST_FAIL_("unexpected %s", sema_err_name(rc));
        wk->outcome[k]++;
        if (rc == SEMA_ECANCELED && wk->stop_on_cancel && mode != 2)
            break;
    }
    return NULL;
}

typedef struct {
    worker_t *workers;
    int n;
    int stop; /* atomic */
    uint64_t seed;
    int resize;
} chaos_t;

/* Fires random workers' tokens; optionally resizes between CAP/2 and CAP. */
static void *chaos_main(void *arg)
{
    chaos_t *c = arg;

    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        worker_t *wk = &c->workers[rnd(&c->seed) % (uint64_t)c->n];

        pthread_mutex_lock(&wk->mu);
        if (wk->token != NULL && rnd(&c->seed) % 2 == 0)
            ASSERT_OK(sema_cancel_fire(wk->token));
        pthread_mutex_unlock(&wk->mu);
        if (c->resize)
            ASSERT_OK(sema_sem_set_capacity(wk->sem, CAP / 2 + rnd(&c->seed) % (CAP / 2 + 1)));
        sched_yield();
    }
    return NULL;
}

static void run_blocking(int resize_and_close)
{
    enum { T = 6 };
    worker_t wk[T];
    pthread_t t[T], ct;
    chaos_t chaos;
    sema_sem_t *sem;
    sema_sem_stats_t st;
    long total[5] = {0};

    witness = 0;
    witness_max = CAP;
    ASSERT_OK(sema_sem_new(&sem, CAP));
    for (int i = 0; i < T; i++) {
        memset(&wk[i], 0, sizeof(wk[i]));
        wk[i].sem = sem;
        wk[i].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        wk[i].iters = resize_and_close ? 1000000 : test_scale(2000);
        wk[i].stop_on_cancel = resize_and_close;
        pthread_mutex_init(&wk[i].mu, NULL);
    }
    chaos = (chaos_t){wk, T, 0, 12345, resize_and_close};
    for (int i = 0; i < T; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, worker_main, &wk[i]));
    ASSERT_OK(pthread_create(&ct, NULL, chaos_main, &chaos));
    if (resize_and_close) {
        sleep_ms((int)test_scale(1500));
        __atomic_store_n(&chaos.stop, 1, __ATOMIC_RELEASE);
        pthread_join(ct, NULL);
        ASSERT_OK(sema_sem_close(sem)); /* every worker must now settle and stop */
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        for (int k = 0; k < 5; k++)
            total[k] += wk[i].outcome[k];
    }
    if (!resize_and_close) {
        __atomic_store_n(&chaos.stop, 1, __ATOMIC_RELEASE);
        pthread_join(ct, NULL);
        ASSERT_EQ(total[4], 0);
    }
    fprintf(stderr, "granted %ld busy %ld timedout %ld canceled %ld invalid %ld\n", total[0],
            total[1], total[2], total[3], total[4]);
    ASSERT_GT(total[0], 0);
    ASSERT_OK(sema_sem_stats(sem, &st));
    ASSERT_EQ(st.held, 0);
    ASSERT_EQ(st.waiters, 0);
    ASSERT_EQ(st.available, (int64_t)st.capacity);
    ASSERT_EQ(witness, 0);
    for (int i = 0; i < T; i++)
        pthread_mutex_destroy(&wk[i].mu);
    sema_sem_free(sem);
}

TEST(stress_blocking_weights_timeouts_cancels)
{
    run_blocking(0);
}

TEST(stress_blocking_with_resizes_then_close)
{
    run_blocking(1);
}

/* ---- callback requests: FIFO order ------------------------------------------------------- */

typedef struct {
    sema_sem_waiter_t w;
    uint64_t weight;
    int queued;  /* acquire_async returned SEMA_SEM_QUEUED */
    int granted; /* atomic */
    int canceled;
    int failed; /* atomic: the error it settled with (callback or at once) */
} req_t;

typedef struct {
    sema_sem_t *sem;
    req_t *req;
    long n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long *held; /* stack of granted requests waiting for a releaser */
    long nheld;
    long settled; /* granted-and-released, canceled or failed */
    uint64_t seed;
    int chaos;     /* resizes and a final close run alongside */
    int producing; /* atomic: the producer is still queueing */
    long produced; /* atomic: requests made so far */
} fifo_t;

static void settled_one(fifo_t *f)
{
    pthread_mutex_lock(&f->mu);
    __atomic_add_fetch(&f->settled, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void push_held(fifo_t *f, long i)
{
    pthread_mutex_lock(&f->mu);
    f->held[f->nheld++] = i;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void fifo_cb(sema_sem_waiter_t *w, int status, void *arg)
{
    fifo_t *f = arg;
    req_t *r = (req_t *)w;

    if (status != 0) {
        ASSERT(f->chaos && (status == SEMA_ECANCELED || status == SEMA_EINVAL));
        ASSERT_EQ(__atomic_exchange_n(&r->failed, status, __ATOMIC_ACQ_REL), 0);
        settled_one(f);
        return;
    }
    ASSERT_EQ(__atomic_add_fetch(&r->granted, 1, __ATOMIC_ACQ_REL), 1);
    witness_add(r->weight);
    push_held(f, r - f->req);
}

static void *fifo_producer(void *arg)
{
    fifo_t *f = arg;
    uint64_t seed = 0x2545f4914f6cdd1dull;

    for (long i = 0; i < f->n; i++) {
        req_t *r = &f->req[i];
        int rc;

        r->weight = 1 + rnd(&seed) % CAP;
        /* Keep about 64 requests outstanding, so releases, cancels and resizes interleave
         * with new requests all along. */
        while (i - __atomic_load_n(&f->settled, __ATOMIC_ACQUIRE) > 64)
            sched_yield();
        if (i % 8 == 0)
            sched_yield();
        rc = sema_sem_acquire_async(f->sem, r->weight, &r->w, fifo_cb, f);
        if (rc == 0) {
            __atomic_store_n(&r->granted, 1, __ATOMIC_RELEASE);
            witness_add(r->weight);
            push_held(f, i);
        } else if (rc == SEMA_SEM_QUEUED) {
            __atomic_store_n(&r->queued, 1, __ATOMIC_RELEASE);
        } else {
            ASSERT(f->chaos && rc == SEMA_EINVAL); /* heavier than a shrunk capacity */
            __atomic_store_n(&r->failed, rc, __ATOMIC_RELEASE);
            settled_one(f);
        }
        __atomic_store_n(&f->produced, i + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&f->producing, 0, __ATOMIC_RELEASE);
    return NULL;
}

static void *fifo_releaser(void *arg)
{
    fifo_t *f = arg;

    pthread_mutex_lock(&f->mu);
    while (__atomic_load_n(&f->settled, __ATOMIC_ACQUIRE) < f->n) {
        long i;

        if (f->nheld == 0) {
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        i = f->held[--f->nheld];
        pthread_mutex_unlock(&f->mu);
        witness_sub(f->req[i].weight);
        ASSERT_OK(sema_sem_release(f->sem, f->req[i].weight));
        pthread_mutex_lock(&f->mu);
        __atomic_add_fetch(&f->settled, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&f->cv);
    }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Withdraws random queued requests while the producer runs. */
static void *fifo_canceller(void *arg)
{
    fifo_t *f = arg;

    while (__atomic_load_n(&f->producing, __ATOMIC_ACQUIRE)) {
        long hi = __atomic_load_n(&f->produced, __ATOMIC_ACQUIRE);
        req_t *r;

        if (hi == 0) {
            sched_yield();
            continue;
        }
        /* Among the latest requests: the older ones have mostly settled. */
        r = &f->req[hi - 1 - (long)(rnd(&f->seed) % (uint64_t)(hi < 64 ? hi : 64))];
        if (!__atomic_load_n(&r->queued, __ATOMIC_ACQUIRE) || r->canceled)
            continue;
        if (sema_sem_cancel_async(f->sem, &r->w) == 0) {
            r->canceled = 1;
            settled_one(f);
        }
    }
    return NULL;
}

static int by_enq(const void *a, const void *b)
{
    const req_t *x = *(req_t *const *)a, *y = *(req_t *const *)b;

    return x->w.enq_seq_ < y->w.enq_seq_ ? -1 : x->w.enq_seq_ > y->w.enq_seq_;
}

/* Every queued request granted at settle-time g had nobody queued before it still waiting:
 * all earlier-queued requests settled (granted or withdrawn) before g. */
static void check_fifo(fifo_t *f)
{
    req_t **q = calloc((size_t)(unsigned)f->n, sizeof(*q));
    long nq = 0;
    uint64_t prefix_max = 0;

    ASSERT_NOT_NULL(q);
    for (long i = 0; i < f->n; i++)
        if (f->req[i].queued)
            q[nq++] = &f->req[i];
    qsort(q, (size_t)nq, sizeof(*q), by_enq);
    for (long i = 0; i < nq; i++) {
        if (q[i]->granted && q[i]->w.settle_seq_ < prefix_max)
            TEST_FAIL_("request queued at %llu was granted before an earlier one settled",
                       (unsigned long long)q[i]->w.enq_seq_);
        if (q[i]->w.settle_seq_ > prefix_max)
            prefix_max = q[i]->w.settle_seq_;
    }
    fprintf(stderr, "%ld requests, %ld queued\n", f->n, nq);
    ASSERT_GT(nq, 0);
    free(q);
}

/* Resizes between CAP/2 and CAP while the producer runs. */
static void *fifo_resizer(void *arg)
{
    fifo_t *f = arg;
    uint64_t seed = 99;

    while (__atomic_load_n(&f->producing, __ATOMIC_ACQUIRE)) {
        ASSERT_OK(sema_sem_set_capacity(f->sem, CAP / 2 + rnd(&seed) % (CAP / 2 + 1)));
        sched_yield();
    }
    ASSERT_OK(sema_sem_set_capacity(f->sem, CAP));
    return NULL;
}

static void run_callbacks_stress(int chaos)
{
    fifo_t f;
    pthread_t prod, rel[2], can, rsz;
    sema_sem_stats_t st;

    witness = 0;
    witness_max = CAP;
    memset(&f, 0, sizeof(f));
    f.n = test_scale(20000);
    f.req = calloc((size_t)(unsigned)f.n, sizeof(*f.req));
    f.held = calloc((size_t)(unsigned)f.n, sizeof(*f.held));
    f.seed = 77;
    f.chaos = chaos;
    f.producing = 1;
    ASSERT_NOT_NULL(f.req);
    ASSERT_NOT_NULL(f.held);
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    ASSERT_OK(sema_sem_new(&f.sem, CAP));
    ASSERT_OK(pthread_create(&prod, NULL, fifo_producer, &f));
    for (int i = 0; i < 2; i++)
        ASSERT_OK(pthread_create(&rel[i], NULL, fifo_releaser, &f));
    ASSERT_OK(pthread_create(&can, NULL, fifo_canceller, &f));
    if (chaos)
        ASSERT_OK(pthread_create(&rsz, NULL, fifo_resizer, &f));
    pthread_join(prod, NULL);
    pthread_join(can, NULL);
    if (chaos) {
        pthread_join(rsz, NULL);
        ASSERT_OK(sema_sem_close(f.sem)); /* whatever still waits settles ECANCELED */
    }
    for (int i = 0; i < 2; i++)
        pthread_join(rel[i], NULL);
    long ngranted = 0, ncanceled = 0, nclosed = 0, ninvalid = 0;

    for (long i = 0; i < f.n; i++) { /* each request settled exactly one way */
        ASSERT_EQ(f.req[i].granted + f.req[i].canceled + (f.req[i].failed != 0), 1);
        ngranted += f.req[i].granted;
        ncanceled += f.req[i].canceled;
        nclosed += f.req[i].failed == SEMA_ECANCELED;
        ninvalid += f.req[i].failed == SEMA_EINVAL;
    }
    fprintf(stderr, "granted %ld, withdrawn %ld, closed %ld, invalid %ld\n", ngranted, ncanceled,
            nclosed, ninvalid);
    ASSERT_GT(ngranted, 0); /* (withdrawals depend on scheduling: counted, not required) */
    check_fifo(&f);
    ASSERT_OK(sema_sem_stats(f.sem, &st));
    ASSERT_EQ(st.held, 0);
    ASSERT_EQ(st.waiters, 0);
    ASSERT_EQ(witness, 0);
    sema_sem_free(f.sem);
    pthread_cond_destroy(&f.cv);
    pthread_mutex_destroy(&f.mu);
    free(f.req);
    free(f.held);
}

TEST(stress_callbacks_fifo_order)
{
    run_callbacks_stress(0);
}

TEST(stress_callbacks_with_resizes_then_close)
{
    run_callbacks_stress(1);
}
