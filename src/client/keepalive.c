/* SPDX-License-Identifier: MIT */
/* keepalive.c - a thread that renews one lease every ttl/3 and reports its loss. */
#include "client/client_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sema_keepalive {
    sema_client_t *c;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC; signalled by stop */
    sema_lease_t lease;  /* guarded by lock: the latest renewal */
    int stop;            /* guarded by lock */
    int lost;            /* 0 or the loss reason; atomic */
    uint64_t renewals;   /* atomic */
    sema_lease_lost_cb cb;
    void *arg;
    pthread_t thread;
};

/* Codes that mean the server has ended the lease: no retry can bring it back. */
static int lease_gone(int rc)
{
    return rc == SEMA_EEXPIRED || rc == SEMA_EREVOKED || rc == SEMA_ESTALE ||
           rc == SEMA_ECANCELED || rc == SEMA_ENOENT;
}

static void wait_until(sema_keepalive_t *ka, int64_t when_ns)
{
    struct timespec ts = {when_ns / 1000000000, when_ns % 1000000000};

    while (!ka->stop && client_now_ns() < when_ns)
        if (pthread_cond_timedwait(&ka->cond, &ka->lock, &ts) == ETIMEDOUT)
            break;
}

/* One renewal, bounded by the local deadline. Returns 0 or the failure. Called unlocked. */
static int renew_once(sema_keepalive_t *ka, sema_lease_t *copy)
{
    int64_t left_ms = (copy->local_deadline_ns - client_now_ns()) / 1000000;
    sema_client_error_t e;

    if (left_ms <= 0)
        return SEMA_ETIMEDOUT;
    return client_renew(ka->c, copy, copy->ttl_ms, left_ms, &e);
}

/* When to renew next: every ttl/3 while renewals succeed, and in any case a tenth of the ttl
 * before the local deadline (a lease handed over late still gets renewed in time); after a
 * failure, at the retry time only (no hot loop near the deadline). */
static int64_t renew_at(const sema_keepalive_t *ka, int64_t next, int failing)
{
    int64_t ttl_ns = ka->lease.ttl_ms * 1000000;
    int64_t early = ka->lease.local_deadline_ns - ttl_ns / 10;

    return failing || next < early ? next : early;
}

static void *keepalive_main(void *arg)
{
    sema_keepalive_t *ka = arg;
    int last = 0, reason = 0;
    int64_t next = client_now_ns() + ka->lease.ttl_ms * 1000000 / 3;

    pthread_mutex_lock(&ka->lock);
    while (!ka->stop && reason == 0) {
        int64_t deadline = ka->lease.local_deadline_ns, at = renew_at(ka, next, last != 0);
        wait_until(ka, at < deadline ? at : deadline);
        if (ka->stop)
            break;
        if (client_now_ns() >= deadline) {
            reason = last != 0 && !lease_gone(last) ? last : SEMA_EEXPIRED;
            break;
        }
        sema_lease_t copy = ka->lease;
        pthread_mutex_unlock(&ka->lock);
        last = renew_once(ka, &copy);
        pthread_mutex_lock(&ka->lock);
        int64_t now = client_now_ns(), ttl_ns = copy.ttl_ms * 1000000;
        if (last == 0) {
            ka->lease = copy;
            __atomic_add_fetch(&ka->renewals, 1, __ATOMIC_RELEASE);
            next = now + ttl_ns / 3;
        } else if (lease_gone(last)) {
            reason = last;
        } else {
            next = now + (ttl_ns / 10 > 50000000 ? ttl_ns / 10 : 50000000);
        }
    }
    sema_lease_t final = ka->lease;
    if (reason != 0 && !ka->stop)
        __atomic_store_n(&ka->lost, reason, __ATOMIC_RELEASE);
    else
        reason = 0;
    pthread_mutex_unlock(&ka->lock);
    if (reason != 0 && ka->cb != NULL)
        ka->cb(ka->arg, &final, reason);
    return NULL;
}

int sema_lease_keepalive_start(sema_keepalive_t **out, sema_client_t *c, const sema_lease_t *lease,
                               sema_lease_lost_cb lost, void *arg)
{
    pthread_condattr_t ca;
    sema_keepalive_t *ka;

    if (out == NULL || c == NULL || lease == NULL || lease->id[0] == '\0' || lease->ttl_ms <= 0)
        return SEMA_EINVAL;
    if ((ka = calloc(1, sizeof *ka)) == NULL)
        return SEMA_ENOMEM;
    ka->c = c;
    ka->lease = *lease;
    ka->cb = lost;
    ka->arg = arg;
    pthread_mutex_init(&ka->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ka->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&ka->thread, NULL, keepalive_main, ka) != 0) {
        pthread_cond_destroy(&ka->cond);
        pthread_mutex_destroy(&ka->lock);
        free(ka);
        return SEMA_EUNAVAIL;
    }
    *out = ka;
    return 0;
}

int sema_lease_keepalive_status(sema_keepalive_t *ka)
{
    return __atomic_load_n(&ka->lost, __ATOMIC_ACQUIRE);
}

uint64_t sema_lease_keepalive_renewals(sema_keepalive_t *ka)
{
    return __atomic_load_n(&ka->renewals, __ATOMIC_ACQUIRE);
}

void sema_lease_keepalive_lease(sema_keepalive_t *ka, sema_lease_t *out)
{
    pthread_mutex_lock(&ka->lock);
    *out = ka->lease;
    pthread_mutex_unlock(&ka->lock);
}

int sema_lease_keepalive_stop(sema_keepalive_t *ka, int release, sema_client_error_t *err)
{
    int rc;

    if (ka == NULL)
        return 0;
    pthread_mutex_lock(&ka->lock);
    ka->stop = 1;
    pthread_cond_signal(&ka->cond);
    pthread_mutex_unlock(&ka->lock);
    pthread_join(ka->thread, NULL);
    rc = sema_lease_keepalive_status(ka);
    if (rc != 0)
        client_fail(err, rc, 0, "lease %s was lost: %s", ka->lease.id, sema_strerror(rc));
    else if (release)
        rc = sema_client_release(ka->c, ka->lease.id, err);
    else
        client_clear(err);
    pthread_cond_destroy(&ka->cond);
    pthread_mutex_destroy(&ka->lock);
    free(ka);
    return rc;
}
