/* SPDX-License-Identifier: MIT */
/* cancel.c - cancel tokens and the registration hook blocking libsema calls watch them with. */
#include "cancel_internal.h"

#include <pthread.h>

struct sema_cancel {
    pthread_mutex_t lock;
    pthread_cond_t done;         /* broadcast when a running fn returns */
    sema__cancel_reg_t *head;    /* registrations not yet fired, under lock */
    sema__cancel_reg_t *running; /* the registration whose fn runs now, under lock */
    int fired;                   /* atomic: 0, then 1 forever */
};

int sema_cancel_new(sema_cancel_t **out)
{
    sema_cancel_t *c;

    if (out == NULL)
        return SEMA_EINVAL;
    *out = NULL;
    c = sema__calloc(1, sizeof(*c));
    if (c == NULL)
        return SEMA_ENOMEM;
    SEMA__CHECK(pthread_mutex_init(&c->lock, NULL) == 0);
    SEMA__CHECK(pthread_cond_init(&c->done, NULL) == 0);
    *out = c;
    return 0;
}

void sema_cancel_free(sema_cancel_t *cancel)
{
    if (cancel == NULL)
        return;
    SEMA__CHECK(pthread_mutex_lock(&cancel->lock) == 0);
    if (cancel->head != NULL || cancel->running != NULL)
        SEMA__ABORT("sema_cancel_free: a call is still waiting on this token");
    SEMA__CHECK(pthread_mutex_unlock(&cancel->lock) == 0);
    pthread_cond_destroy(&cancel->done);
    pthread_mutex_destroy(&cancel->lock);
    sema__free(cancel);
}

static void unlink_reg(sema_cancel_t *c, sema__cancel_reg_t *reg)
{
    if (reg->prev != NULL)
        reg->prev->next = reg->next;
    else
        c->head = reg->next;
    if (reg->next != NULL)
        reg->next->prev = reg->prev;
    reg->prev = reg->next = NULL;
}

int sema_cancel_fire(sema_cancel_t *cancel)
{
    sema__cancel_reg_t *reg;

    if (cancel == NULL)
        return SEMA_EINVAL;
    SEMA__CHECK(pthread_mutex_lock(&cancel->lock) == 0);
    __atomic_store_n(&cancel->fired, 1, __ATOMIC_RELEASE);
    /* Pop one registration at a time and run it unlocked, so fn may take its owner's lock
     * and a callback it triggers may fire this token again without deadlock. */
    while ((reg = cancel->head) != NULL && cancel->running == NULL) {
        unlink_reg(cancel, reg);
        cancel->running = reg;
        SEMA__CHECK(pthread_mutex_unlock(&cancel->lock) == 0);
        reg->fn(reg);
        SEMA__CHECK(pthread_mutex_lock(&cancel->lock) == 0);
        cancel->running = NULL;
        SEMA__CHECK(pthread_cond_broadcast(&cancel->done) == 0);
    }
    SEMA__CHECK(pthread_mutex_unlock(&cancel->lock) == 0);
    return 0;
}

int sema_cancel_fired(const sema_cancel_t *cancel)
{
    return cancel != NULL && __atomic_load_n(&cancel->fired, __ATOMIC_ACQUIRE) != 0;
}

int sema__cancel_register(sema_cancel_t *cancel, sema__cancel_reg_t *reg, sema__cancel_fn fn,
                          void *arg)
{
    int rc = 0;

    reg->prev = reg->next = NULL;
    reg->fn = fn;
    reg->arg = arg;
    if (cancel == NULL)
        return 0;
    SEMA__CHECK(pthread_mutex_lock(&cancel->lock) == 0);
    if (cancel->fired) {
        rc = SEMA_ECANCELED;
    } else {
        reg->next = cancel->head;
        if (cancel->head != NULL)
            cancel->head->prev = reg;
        cancel->head = reg;
    }
    SEMA__CHECK(pthread_mutex_unlock(&cancel->lock) == 0);
    return rc;
}

static int is_linked(const sema_cancel_t *c, const sema__cancel_reg_t *reg)
{
    return reg->prev != NULL || c->head == reg;
}

void sema__cancel_unregister(sema_cancel_t *cancel, sema__cancel_reg_t *reg)
{
    if (cancel == NULL)
        return;
    SEMA__CHECK(pthread_mutex_lock(&cancel->lock) == 0);
    while (cancel->running == reg)
        SEMA__CHECK(pthread_cond_wait(&cancel->done, &cancel->lock) == 0);
    if (is_linked(cancel, reg))
        unlink_reg(cancel, reg);
    SEMA__CHECK(pthread_mutex_unlock(&cancel->lock) == 0);
}
