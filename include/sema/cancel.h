/* SPDX-License-Identifier: MIT */
/* cancel.h - cancel tokens: one thread fires, every blocking libsema call waiting on it fails. */
#ifndef SEMA_CANCEL_H
#define SEMA_CANCEL_H

#include "sema/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cancel token. Any number of blocking calls (semaphore acquires, keyed-lock waits, ...)
 * may watch one token; firing it makes every one of them that is still waiting fail with
 * SEMA_ECANCELED at once, and every later call given the token fail the same way before it
 * waits. A token fires once and stays fired. */
typedef struct sema_cancel sema_cancel_t;

/* Make a new, unfired token in *out (owned by the caller; free with sema_cancel_free).
 * Returns 0, SEMA_EINVAL (out is NULL) or SEMA_ENOMEM. Thread-safe. */
SEMA_EXTERN int sema_cancel_new(sema_cancel_t **out);

/* Free a token. NULL is fine. No call given the token may still be in progress: a call
 * whose wait a fire ended is still returning (it detaches from the token on its way out)
 * after sema_cancel_fire has returned, so see every such call return before freeing. A call
 * still waiting on it aborts with a message (a use-after-free in the making). */
SEMA_EXTERN void sema_cancel_free(sema_cancel_t *cancel);

/* Fire the token: every call waiting on it is withdrawn here, in the calling thread, and
 * fails with SEMA_ECANCELED. Idempotent: firing again (or from two threads at once) is
 * fine; a fire made while another is still withdrawing waiters leaves the rest to that one
 * and may return first. Returns 0 or SEMA_EINVAL (NULL). Never allocates. Thread-safe; may be
 * called from any thread, including a callback of libsema. */
SEMA_EXTERN int sema_cancel_fire(sema_cancel_t *cancel);

/* 1 if the token has fired, 0 if not (or cancel is NULL). Never blocks. Thread-safe. */
SEMA_EXTERN int sema_cancel_fired(const sema_cancel_t *cancel);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_CANCEL_H */
