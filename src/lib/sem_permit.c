/* SPDX-License-Identifier: MIT */
/* sem_permit.c - permits, run-under-the-semaphore (with) and bound functions (wrap). */
#include "sem_internal.h"

/* permit->magic_ while the permit holds units ("semaperm"). */
#define PERMIT_HELD UINT64_C(0x73656d617065726d)
/* permit->magic_ once released. */
#define PERMIT_DONE UINT64_C(0x73656d61646f6e65)

static void permit_empty(sema_permit_t *p)
{
    p->sem_ = NULL;
    p->weight_ = 0;
    p->magic_ = 0;
}

int sema_permit_adopt(sema_permit_t *permit, sema_sem_t *sem, uint64_t weight)
{
    if (permit == NULL || sem == NULL || weight == 0)
        return SEMA_EINVAL;
    permit->weight_ = weight;
    permit->magic_ = PERMIT_HELD;
    __atomic_store_n(&permit->sem_, sem, __ATOMIC_RELEASE);
    return 0;
}

int sema_sem_acquire_permit(sema_sem_t *sem, uint64_t weight, int64_t timeout_ms,
                            sema_permit_t *permit)
{
    int rc;

    if (permit == NULL)
        return SEMA_EINVAL;
    permit_empty(permit);
    rc = sema_sem_acquire(sem, weight, timeout_ms);
    if (rc == 0)
        sema_permit_adopt(permit, sem, weight);
    return rc;
}

int sema_permit_release(sema_permit_t *permit)
{
    sema_sem_t *sem;

    if (permit == NULL)
        return SEMA_EINVAL;
    if (__atomic_load_n(&permit->magic_, __ATOMIC_ACQUIRE) != PERMIT_HELD)
        return SEMA_ESTALE;
    /* Whoever swaps the semaphore out owns the release: two racing releases give one 0. */
    sem = __atomic_exchange_n(&permit->sem_, NULL, __ATOMIC_ACQ_REL);
    if (sem == NULL)
        return SEMA_ESTALE;
    __atomic_store_n(&permit->magic_, PERMIT_DONE, __ATOMIC_RELEASE);
    return sema_sem_release(sem, permit->weight_);
}

int sema_permit_held(const sema_permit_t *permit)
{
    return permit != NULL && __atomic_load_n(&permit->magic_, __ATOMIC_ACQUIRE) == PERMIT_HELD &&
           __atomic_load_n(&permit->sem_, __ATOMIC_ACQUIRE) != NULL;
}

void sema_permit_cleanup(sema_permit_t *permit)
{
    if (sema_permit_held(permit))
        (void)sema_permit_release(permit);
}

int sema_sem_with(sema_sem_t *sem, uint64_t weight, int64_t timeout_ms, sema_sem_fn fn, void *arg,
                  int *fn_result)
{
    int rc, res;

    if (fn == NULL)
        return SEMA_EINVAL;
    rc = sema_sem_acquire(sem, weight, timeout_ms);
    if (rc != 0)
        return rc;
    res = fn(arg);
    if (fn_result != NULL)
        *fn_result = res;
    /* Fails only if fn itself released units it did not hold: report it, never abort. */
    return sema_sem_release(sem, weight);
}

int sema_sem_wrap(sema_sem_wrapped_t *out, sema_sem_t *sem, uint64_t weight, int64_t timeout_ms,
                  sema_sem_fn fn)
{
    sema_sem_stats_t st;

    if (out == NULL || sem == NULL || fn == NULL || weight == 0)
        return SEMA_EINVAL;
    if (sema_sem_stats(sem, &st) != 0 || weight > st.capacity)
        return SEMA_EINVAL;
    out->sem = sem;
    out->weight = weight;
    out->timeout_ms = timeout_ms;
    out->fn = fn;
    return 0;
}

int sema_sem_call(const sema_sem_wrapped_t *wrapped, void *arg, int *fn_result)
{
    if (wrapped == NULL)
        return SEMA_EINVAL;
    return sema_sem_with(wrapped->sem, wrapped->weight, wrapped->timeout_ms, wrapped->fn, arg,
                         fn_result);
}
