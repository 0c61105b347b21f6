/* SPDX-License-Identifier: MIT */
/* map_limit.h - bounded parallel map: run a function over items with at most `limit` at once. */
#ifndef SEMA_MAP_LIMIT_H
#define SEMA_MAP_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "sema/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most threads (and so the largest `limit`) one map may use. */
#define SEMA_MAP_LIMIT_MAX 1024
/* The largest reorder window (items started but not yet emitted). */
#define SEMA_MAP_LIMIT_MAX_WINDOW (1u << 20)
/* `pending` in the stats when the producer's length is not known. */
#define SEMA_MAP_LIMIT_UNKNOWN UINT64_MAX

/* Produce the next item: store it in *item and return 1, return 0 at the end
 * of the input, or a negative code to stop the map with that error (it is
 * reported as the error of the item that would have had the next index).
 * Items are pulled one at a time, only when a worker is free to start one, so
 * a huge input is never materialised. Called one call at a time with the
 * map's internal lock held: keep it quick (workers wait for it to start or
 * finish items); it may call sema_map_limit_cancel() and
 * sema_map_limit_stats() on its map, nothing else of it. Never called once the
 * map is stopped; an item produced while a cancel lands during this very call
 * is not started and not handed back (a producer whose items own memory can
 * check `stopped` in the stats, or keep its own list). */
typedef int (*sema_map_limit_next_fn)(void *ctx, void **item);

/* Process item number `index` (0-based, input order). Store the result in
 * *result (it starts as NULL) and return 0, or return a non-zero code: the map
 * then starts no new item, lets running ones finish and returns the error.
 * A failed call's *result is ignored; without emit every result is ignored
 * (store results yourself, by index). Called from up to `limit` threads at
 * once. */
typedef int (*sema_map_limit_fn)(void *ctx, uint64_t index, void *item, void **result);

/* Receive the result of item `index`, strictly in input order, one call at a
 * time, exactly once per successful item that precedes the first error.
 * Returning non-zero stops the map as if item `index` had failed. */
typedef int (*sema_map_limit_emit_fn)(void *ctx, uint64_t index, void *result);

/* Receive, exactly once, the result of an item that finished but will never be
 * emitted (it follows the first error, or the map was cancelled), so that owned
 * memory can be freed. Must not fail. */
typedef void (*sema_map_limit_discard_fn)(void *ctx, uint64_t index, void *result);

typedef struct sema_map_limit_opts {
    size_t limit;                      /* max fn calls at once, 1..SEMA_MAP_LIMIT_MAX */
    sema_map_limit_next_fn next;       /* required: the producer */
    sema_map_limit_fn fn;              /* required: the work */
    sema_map_limit_emit_fn emit;       /* optional: ordered results */
    sema_map_limit_discard_fn discard; /* optional: results that are not emitted */
    void *ctx;                         /* passed to every callback */
    size_t
        window; /* with emit: max items started but not yet emitted (0: 16 * limit, at least 256) */
    uint64_t total; /* number of items if known (for stats only; 0: unknown) */
} sema_map_limit_opts_t;

typedef struct sema_map_limit_stats {
    uint64_t active;    /* fn calls running now */
    uint64_t pending;   /* items not yet started (total - started), or SEMA_MAP_LIMIT_UNKNOWN */
    uint64_t started;   /* fn calls started so far */
    uint64_t completed; /* fn calls returned so far */
    uint64_t emitted;   /* results handed to emit so far */
    uint64_t threads;   /* worker threads created, the calling thread included */
    int stopped;        /* 1 once an error or a cancel stopped new starts */
} sema_map_limit_stats_t;

typedef struct sema_map_limit sema_map_limit_t;

/* Create a map from `opts` (copied). Returns 0, SEMA_EINVAL (NULL, limit 0 or
 * above SEMA_MAP_LIMIT_MAX, missing next/fn, window too large) or SEMA_ENOMEM.
 * Allocates the map and, with emit, a reorder ring of `window` slots; threads
 * are created lazily by sema_map_limit_run(). Thread-safe. */
SEMA_EXTERN int sema_map_limit_new(sema_map_limit_t **out, const sema_map_limit_opts_t *opts);

/* Free a map whose run has returned (or never started). NULL is fine. */
SEMA_EXTERN void sema_map_limit_free(sema_map_limit_t *map);

/* Run the map on the calling thread plus up to limit-1 worker threads, created
 * only while there is work for them. Blocks until every started item has
 * finished and every result is emitted or discarded, and all threads joined.
 * Items start in input order; after the first error no new item starts.
 * Returns 0, the error of the lowest-index failed item (fn, emit or producer
 * error; deterministic since every lower index had started), SEMA_ECANCELED
 * after sema_map_limit_cancel() when no item failed, SEMA_EINVAL for NULL or a
 * second run. If a worker thread cannot be created the map goes on with the
 * threads it has (the calling thread always works). Callbacks must not call
 * sema_map_limit_run/free on the same map. */
SEMA_EXTERN int sema_map_limit_run(sema_map_limit_t *map);

/* Stop the map: no new item starts, running ones finish, run() returns
 * SEMA_ECANCELED unless an item failed. Callable from any thread (including
 * inside fn) before, during or after run; idempotent. Never blocks long. */
SEMA_EXTERN void sema_map_limit_cancel(sema_map_limit_t *map);

/* A snapshot of the counters, readable from any thread while the map runs
 * (also from inside fn). Lock-free; the fields are each exact but read one by
 * one. NULL arguments are ignored. */
SEMA_EXTERN void sema_map_limit_stats(const sema_map_limit_t *map, sema_map_limit_stats_t *out);

/* One-shot: new + run + free. Returns what run returns, or new's error. */
SEMA_EXTERN int sema_map_limit(const sema_map_limit_opts_t *opts);

/* Convenience over an array: results[i] = fn(items[i]) with at most `limit`
 * at once, on min(limit, n) threads (the caller's included). Items start in
 * input order (claimed from one atomic counter: no lock per item); after the
 * first error no new item starts and running ones finish. Every item that
 * finished has its result in results[i] (others are NULL); the caller owns
 * them all. Returns 0 or the error of the lowest-index failed item, or
 * SEMA_EINVAL for a NULL fn, items or results (items/results may be NULL when
 * n is 0) or a bad limit. No cancel or stats: use sema_map_limit_new() for
 * those. Blocks until done. */
SEMA_EXTERN int sema_map_limit_array(void *const *items, size_t n, sema_map_limit_fn fn, void *ctx,
                                     void **results, size_t limit);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_MAP_LIMIT_H */
