/* SPDX-License-Identifier: MIT */
/* engine_limits.h - the fixed limits of a request's inputs, in one table. The engine front
 * checks them (front.c) for every back end; the HTTP layer uses the same constants where it
 * must cap a buffer before the engine sees the value. The configurable limits (name length,
 * ttl, waiters, semaphores) are in engine_config_t. */
#ifndef SEMAD_ENGINE_LIMITS_H
#define SEMAD_ENGINE_LIMITS_H

#include <stdint.h>

#define ENGINE_CAPACITY_MAX ((uint64_t)1 << 53) /* exact in a JSON double, as the API needs */
/* The longest name or key, whatever --max-name-bytes says (its own default is 256). */
#define ENGINE_NAME_MAX 65535
#define ENGINE_OWNER_MAX 256          /* bytes of an owner label (UTF-8) */
#define ENGINE_IDEM_KEY_MAX 255       /* bytes of an Idempotency-Key */
#define ENGINE_LIST_LIMIT_DEFAULT 100 /* semaphores in a list page by default */
#define ENGINE_LIST_LIMIT_MAX 1000    /* and at most */

#define ENGINE_PARTS_MAX 16        /* semaphores of one request on several */
#define ENGINE_TENANT_MAX 128      /* bytes of a tenant's name (UTF-8) */
#define ENGINE_RATE_MAX 1000000000 /* rate_per_s and rate_burst at most */
/* Tenants holding or waiting on one semaphore at once (past it: SEMA_ELIMIT). The round robin
 * across them costs a walk of those waiting per grant. */
#define ENGINE_TENANTS_PER_SEM_MAX 1024

/* The longest ?wait= of GET /v1/tickets/{id}. */
#define ENGINE_TICKET_WAIT_MAX_MS 300000

#endif /* SEMAD_ENGINE_LIMITS_H */
