/* SPDX-License-Identifier: MIT */
/* cancel_internal.h - how a blocking libsema call watches a cancel token; never installed.
 *
 * A blocking call embeds a sema__cancel_reg_t in its waiter, registers it before it waits
 * and unregisters it before it returns:
 *
 *     lock(my_lock);
 *     if (sema__cancel_register(token, &w.reg, on_cancel, &w) != 0) -> fail ECANCELED
 *     enqueue(&w);                       // still under my_lock: no window for a lost cancel
 *     unlock(my_lock);
 *     ... wait ...
 *     sema__cancel_unregister(token, &w.reg);   // without my_lock held
 *
 * on_cancel(reg) runs in the firing thread, at most once, with no token lock held; it may
 * take my_lock and withdraw the waiter. Lock order: my_lock may be held while registering
 * (the token's lock is a leaf there), never while unregistering (unregister waits for a
 * running on_cancel, which takes my_lock). */
#ifndef SEMA_CANCEL_INTERNAL_H
#define SEMA_CANCEL_INTERNAL_H

#include "sema/cancel.h"
#include "internal.h"

typedef struct sema__cancel_reg sema__cancel_reg_t;
typedef void (*sema__cancel_fn)(sema__cancel_reg_t *reg);

struct sema__cancel_reg {
    sema__cancel_reg_t *prev, *next; /* the token's list, under its lock */
    sema__cancel_fn fn;              /* called once when the token fires */
    void *arg;                       /* for fn */
};

/* Watch `cancel` with `reg` (caller-owned memory that stays valid until unregistered):
 * when the token fires, fn(reg) runs once in the firing thread. Returns 0, or
 * SEMA_ECANCELED if the token has already fired (then fn never runs and reg is not
 * linked: nothing to unregister). A NULL token is never fired: returns 0, links nothing.
 * Never allocates. */
SEMA__HIDDEN int sema__cancel_register(sema_cancel_t *cancel, sema__cancel_reg_t *reg,
                                       sema__cancel_fn fn, void *arg);

/* Stop watching. After it returns, reg's fn is not running and never will. Waits for a
 * running fn to finish, so never call it with a lock fn takes, nor from inside fn. A NULL
 * token, or a reg the token already dropped, is fine. */
SEMA__HIDDEN void sema__cancel_unregister(sema_cancel_t *cancel, sema__cancel_reg_t *reg);

#endif /* SEMA_CANCEL_INTERNAL_H */
