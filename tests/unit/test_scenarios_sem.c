/* SPDX-License-Identifier: MIT */
/* test_scenarios_sem.c - runs the shared scenario suite against the in-process semaphore.
 *
 * Queued requests are callback acquires (sema_sem_acquire_async / _wait_idle_async); a
 * request with a timeout gets a timer thread that withdraws it at its deadline, as an event
 * loop's timer would. Granted units are held in a permit per label. */
#include <pthread.h>

#include "scenario.h"
#include "test_sem_helpers.h"

typedef struct host host_t;

typedef struct {
    host_t *host;
    int used;
    int settled; /* under host->mu */
    int result;  /* settled result, under host->mu */
    uint64_t weight;
    sema_sem_waiter_t waiter;
    sema_permit_t permit; /* what the label holds */
    int has_timer;
    int64_t deadline_ns;
    pthread_t timer;
} label_t;

struct host {
    sema_sem_t *sem;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast when a label settles or the scenario ends */
    int ending;
    label_t labels[SCEN_MAX_LABELS];
};

static void settle_label(label_t *l, int result)
{
    pthread_mutex_lock(&l->host->mu);
    l->settled = 1;
    l->result = result;
    pthread_cond_broadcast(&l->host->cv);
    pthread_mutex_unlock(&l->host->mu);
}

static void on_settled(sema_sem_waiter_t *w, int status, void *arg)
{
    label_t *l = arg;

    (void)w;
    if (status == 0 && l->weight != 0)
        ASSERT_OK(sema_permit_adopt(&l->permit, l->host->sem, l->weight));
    settle_label(l, status);
}

static struct timespec abs_ts(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};

    return ts;
}

/* The label's timer: at the deadline, withdraw the request if it is still queued. */
static void *timer_main(void *arg)
{
    label_t *l = arg;
    host_t *h = l->host;
    struct timespec ts = abs_ts(l->deadline_ns);
    int fire = 0;

    pthread_mutex_lock(&h->mu);
    while (!l->settled && !h->ending)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) != 0) {
            fire = !l->settled;
            break;
        }
    pthread_mutex_unlock(&h->mu);
    if (fire && sema_sem_cancel_async(h->sem, &l->waiter) == 0)
        settle_label(l, SEMA_ETIMEDOUT);
    return NULL;
}

static int host_create(void *ctx, uint64_t capacity)
{
    host_t *h = ctx;
    pthread_condattr_t ca;

    memset(h->labels, 0, sizeof(h->labels));
    h->ending = 0;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    return sema_sem_new(&h->sem, capacity);
}

static void host_destroy(void *ctx)
{
    host_t *h = ctx;

    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (h->labels[i].used && sema_sem_cancel_async(h->sem, &h->labels[i].waiter) == 0)
            settle_label(&h->labels[i], SEMA_ECANCELED);
    pthread_mutex_lock(&h->mu);
    h->ending = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < SCEN_MAX_LABELS; i++) {
        if (h->labels[i].has_timer)
            pthread_join(h->labels[i].timer, NULL);
        sema_permit_cleanup(&h->labels[i].permit);
    }
    sema_sem_free(h->sem);
    h->sem = NULL;
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}

/* A request settled at once (granted, busy, invalid, ...). */
static int settled_now(label_t *l, int rc)
{
    if (rc == 0 && l->weight != 0)
        ASSERT_OK(sema_permit_adopt(&l->permit, l->host->sem, l->weight));
    settle_label(l, rc);
    return rc;
}

static int host_request(void *ctx, int label, scen_kind_t kind, uint64_t weight, int64_t timeout_ms)
{
    host_t *h = ctx;
    label_t *l = &h->labels[label];
    int rc;

    memset(l, 0, sizeof(*l));
    l->host = h;
    l->used = 1;
    l->weight = kind == SCEN_WAIT_IDLE ? 0 : weight;
    if (kind == SCEN_TRY || timeout_ms == 0)
        return settled_now(l, kind == SCEN_WAIT_IDLE ? sema_sem_wait_idle(h->sem, 0)
                                                     : sema_sem_try_acquire(h->sem, weight));
    rc = kind == SCEN_WAIT_IDLE ? sema_sem_wait_idle_async(h->sem, &l->waiter, on_settled, l)
                                : sema_sem_acquire_async(h->sem, weight, &l->waiter, on_settled, l);
    if (rc != SEMA_SEM_QUEUED)
        return settled_now(l, rc);
    if (timeout_ms > 0) {
        l->deadline_ns = sema_sem_now_ns() + timeout_ms * 1000000;
        l->has_timer = 1;
        ASSERT_OK(pthread_create(&l->timer, NULL, timer_main, l));
    }
    return SCEN_QUEUED;
}

static int host_release(void *ctx, int label, uint64_t weight)
{
    host_t *h = ctx;
    label_t *l = &h->labels[label];
    int rc;

    if (weight == 0 || (sema_permit_held(&l->permit) && weight == l->weight))
        return sema_permit_release(&l->permit);
    rc = sema_sem_release(h->sem, weight);
    if (rc == 0 && sema_permit_held(&l->permit)) {
        uint64_t left = weight < l->weight ? l->weight - weight : 0;

        l->permit = (sema_permit_t)SEMA_PERMIT_INIT;
        l->weight = left;
        if (left != 0)
            ASSERT_OK(sema_permit_adopt(&l->permit, h->sem, left));
    }
    return rc;
}

static int host_cancel(void *ctx, int label)
{
    host_t *h = ctx;
    int rc = sema_sem_cancel_async(h->sem, &h->labels[label].waiter);

    if (rc == 0)
        settle_label(&h->labels[label], SEMA_ECANCELED);
    return rc;
}

static int host_resize(void *ctx, uint64_t capacity)
{
    return sema_sem_set_capacity(((host_t *)ctx)->sem, capacity);
}

static int host_close(void *ctx)
{
    return sema_sem_close(((host_t *)ctx)->sem);
}

static int host_state(void *ctx, scen_state_t *out)
{
    sema_sem_stats_t st;
    int rc = sema_sem_stats(((host_t *)ctx)->sem, &st);

    out->capacity = (int64_t)st.capacity;
    out->available = st.available;
    out->held = (int64_t)st.held;
    out->waiting = (int64_t)st.waiters;
    out->waiting_weight = (int64_t)st.waiting;
    return rc;
}

static int host_poll(void *ctx, int label, int64_t wait_ms)
{
    host_t *h = ctx;
    label_t *l = &h->labels[label];
    struct timespec ts = abs_ts(sema_sem_now_ns() + wait_ms * 1000000);
    int rc;

    pthread_mutex_lock(&h->mu);
    while (!l->settled)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) != 0)
            break;
    rc = l->settled ? l->result : SCEN_QUEUED;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static host_t host;

static const scen_host_t sem_host = {
    .name = "in-process",
    .ctx = &host,
    .create = host_create,
    .destroy = host_destroy,
    .request = host_request,
    .release = host_release,
    .cancel = host_cancel,
    .resize = host_resize,
    .close = host_close,
    .state = host_state,
    .poll = host_poll,
};

TEST(all_scenarios)
{
    scen_counts_t n;

    ASSERT_EQ(scen_run_file(NULL, &sem_host, NULL, &n), 0);
    ASSERT_EQ(n.skipped_base, 0); /* every verb but semad's limits */
}
