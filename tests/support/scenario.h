/* SPDX-License-Identifier: MIT */
/* scenario.h - runs tests/cases/scenarios.txt (the shared semantics suite) against one host.
 *
 * A host (the in-process semaphore, the shm semaphore, semad's engine, ...) describes itself
 * with the callbacks below; the runner parses the file, drives the host and compares. A host
 * that lacks a verb leaves its callback NULL; scenarios using that verb are skipped and
 * listed. Labels are small integers (0 .. SCEN_MAX_LABELS-1), fresh for every scenario. */
#ifndef SEMA_TEST_SCENARIO_H
#define SEMA_TEST_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include "sema/error.h"

#define SCEN_MAX_LABELS 64
/* A request that is waiting (neither granted nor failed yet). */
#define SCEN_QUEUED 1
/* A state field the host cannot report. */
#define SCEN_UNKNOWN INT64_MIN

typedef enum { SCEN_ACQUIRE, SCEN_TRY, SCEN_WAIT_IDLE } scen_kind_t;

typedef struct {
    int64_t capacity, available, held; /* SCEN_UNKNOWN if not known (each field) */
    int64_t waiting;                   /* requests queued */
    int64_t waiting_weight;            /* their total weight */
} scen_state_t;

/* What a semaphore has beyond its capacity (semad): those named in `set` (SCEN_LIM_*). */
enum { SCEN_LIM_TENANT_MAX = 1, SCEN_LIM_RATE = 2, SCEN_LIM_BURST = 4 };
typedef struct {
    uint64_t tenant_max, rate_per_s, rate_burst;
    unsigned set;
} scen_limits_t;

/* One semaphore of a request: its name (NULL: the scenario's own) and weight. */
typedef struct {
    const char *name;
    uint64_t weight;
} scen_part_t;

#define SCEN_MAX_PARTS 8

/* Scenarios run and skipped, and skipped for lack of one of the base verbs (resize, close,
 * cancel, state, waitidle) rather than of semad's limits (several semaphores, tenants,
 * rates). */
typedef struct {
    int run, failed, skipped, skipped_base;
} scen_counts_t;

typedef struct {
    const char *name; /* for messages, e.g. "in-process" */
    void *ctx;
    /* Start a fresh semaphore of `capacity` (every scenario starts with this). 0 or a code. */
    int (*create)(void *ctx, uint64_t capacity);
    /* Tear the scenario's semaphore down: cancel what waits, drop what is held. */
    void (*destroy)(void *ctx);
    /* Start request `label`: an acquire/try of `weight`, or a wait-idle (weight unused).
     * timeout_ms < 0: forever. Returns 0 (granted / idle now), SCEN_QUEUED, or a SEMA_E*
     * code (SEMA_EINVAL, SEMA_EBUSY, SEMA_ECANCELED, ...). */
    int (*request)(void *ctx, int label, scen_kind_t kind, uint64_t weight, int64_t timeout_ms);
    /* Give back `weight` units on label's behalf (0: exactly what label holds). Returns 0,
     * SEMA_EOVERFLOW, or SEMA_ESTALE (label holds nothing). */
    int (*release)(void *ctx, int label, uint64_t weight);
    /* Withdraw label's queued request; it then settles as SEMA_ECANCELED. */
    int (*cancel)(void *ctx, int label);
    int (*resize)(void *ctx, uint64_t capacity);
    int (*close)(void *ctx);
    int (*state)(void *ctx, scen_state_t *out);
    /* The settled result of label's request (0, SEMA_ECANCELED, SEMA_ETIMEDOUT, SEMA_EINVAL),
     * waiting up to wait_ms for it; SCEN_QUEUED if it is still waiting then. */
    int (*poll)(void *ctx, int label, int64_t wait_ms);

    /* Optional, semad's limits (a host without them skips the scenarios that use them): */
    /* Another semaphore `name` of `capacity` for this scenario (`sem` lines), or, name NULL,
     * limits for the scenario's own semaphore, just created. */
    int (*sem)(void *ctx, const char *name, uint64_t capacity, const scen_limits_t *lim);
    /* Resize the scenario's semaphore (capacity 0: unchanged) and set the limits named. */
    int (*relimit)(void *ctx, uint64_t capacity, const scen_limits_t *lim);
    /* An acquire or try of label on several semaphores (or one named), for `tenant` (may be
     * NULL); returns as request() does. */
    int (*request_parts)(void *ctx, int label, scen_kind_t kind, const scen_part_t *parts,
                         size_t nparts, const char *tenant, int64_t timeout_ms);
    /* The state of semaphore `name` (NULL: the scenario's own), or of one of its tenants
     * (`tenant` not NULL: held, waiting and waiting_weight are that tenant's). */
    int (*state_of)(void *ctx, const char *name, const char *tenant, scen_state_t *out);
    /* The host has a clock for rates (rate=, burst=): a model without one skips those. */
    int rates;
    /* request_parts serves one semaphore only (a tenant): a back end without requests on
     * several semaphores skips the scenarios that make them. */
    int one_sem_only;
} scen_host_t;

/* Run every scenario of `path` (NULL: the project's tests/cases/scenarios.txt) or only the
 * one named `only` (NULL: all). Prints one line per scenario to stderr. Returns the number
 * of failed scenarios; *counts (may be NULL) gets what ran and what was skipped. */
int scen_run_file(const char *path, const scen_host_t *host, const char *only,
                  scen_counts_t *counts);

#endif /* SEMA_TEST_SCENARIO_H */
