/* SPDX-License-Identifier: MIT */
/* bench_map_limit.c - map_limit's cost per item vs a plain pthread pool doing the same work. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sema/sema.h"

struct cfg {
    long items, limit, rounds, work;
};

static struct cfg cfg;
static void **items, **results;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The work of one item: `cfg.work` rounds of a cheap mix. */
static uintptr_t compute(uintptr_t v)
{
    uint64_t x = v + 1;

    for (long i = 0; i < cfg.work; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return (uintptr_t)(x | 1);
}

static int map_fn(void *ctx, uint64_t index, void *item, void **result)
{
    (void)ctx;
    (void)index;
    *result = (void *)compute((uintptr_t)item);
    return 0;
}

/* The ordered-emit form: producer over items[], emit writes results[]. */
struct emit_ctx {
    long pos;
};

static int emit_next(void *ctx, void **item)
{
    struct emit_ctx *e = ctx;

    if (e->pos == cfg.items)
        return 0;
    *item = items[e->pos++];
    return 1;
}

/* The producer engine without emit: fn stores by index itself. */
static int engine_fn(void *ctx, uint64_t index, void *item, void **result)
{
    (void)ctx;
    (void)result;
    results[index] = (void *)compute((uintptr_t)item);
    return 0;
}

static int emit_store(void *ctx, uint64_t index, void *result)
{
    (void)ctx;
    results[index] = result;
    return 0;
}

/* The peer: `limit` threads take the next index from one atomic counter. */
static atomic_long peer_next;

static void *peer_main(void *arg)
{
    (void)arg;
    for (;;) {
        long i = atomic_fetch_add_explicit(&peer_next, 1, memory_order_relaxed);

        if (i >= cfg.items)
            return NULL;
        results[i] = (void *)compute((uintptr_t)items[i]);
    }
}

static void run_peer(void)
{
    pthread_t t[SEMA_MAP_LIMIT_MAX];

    atomic_store(&peer_next, 0);
    for (long i = 0; i < cfg.limit; i++)
        pthread_create(&t[i], NULL, peer_main, NULL);
    for (long i = 0; i < cfg.limit; i++)
        pthread_join(t[i], NULL);
}

static void run_array(void)
{
    if (sema_map_limit_array(items, (size_t)cfg.items, map_fn, NULL, results, (size_t)cfg.limit) !=
        0)
        abort();
}

static void run_engine(void)
{
    struct emit_ctx e = {0};
    sema_map_limit_opts_t o = {0};

    o.limit = (size_t)cfg.limit;
    o.next = emit_next;
    o.fn = engine_fn;
    o.ctx = &e;
    o.total = (uint64_t)cfg.items;
    if (sema_map_limit(&o) != 0)
        abort();
}

static void run_emit(void)
{
    struct emit_ctx e = {0};
    sema_map_limit_opts_t o = {0};

    o.limit = (size_t)cfg.limit;
    o.next = emit_next;
    o.fn = map_fn;
    o.emit = emit_store;
    o.ctx = &e;
    if (sema_map_limit(&o) != 0)
        abort();
}

static void check(const char *name)
{
    for (long i = 0; i < cfg.items; i++)
        if (results[i] != (void *)compute((uintptr_t)items[i])) {
            fprintf(stderr, "bench_map_limit: %s: wrong result at %ld\n", name, i);
            exit(1);
        }
}

static double best_of(void (*run)(void), const char *name)
{
    double best = 1e30;

    for (long r = 0; r < cfg.rounds; r++) {
        double t0, t;

        memset(results, 0, sizeof(*results) * (size_t)cfg.items);
        t0 = now_s();
        run();
        t = now_s() - t0;
        check(name);
        best = t < best ? t : best;
    }
    return best;
}

static long arg_long(int argc, char **argv, const char *name, long def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return strtol(argv[i + 1], NULL, 10);
    return def;
}

int main(int argc, char **argv)
{
    static const long works[] = {0, 200};
    uint64_t seed = 0x5eed5eedULL;

    cfg.items = arg_long(argc, argv, "--items", 1000000);
    cfg.limit = arg_long(argc, argv, "--limit", 2);
    cfg.rounds = arg_long(argc, argv, "--rounds", 3);
    if (cfg.items < 1 || cfg.limit < 1 || cfg.limit > SEMA_MAP_LIMIT_MAX || cfg.rounds < 1) {
        fprintf(stderr, "usage: bench_map_limit [--items N] [--limit N] [--rounds N]\n");
        return 2;
    }
    items = calloc((size_t)cfg.items, sizeof(*items));
    results = calloc((size_t)cfg.items, sizeof(*results));
    if (items == NULL || results == NULL)
        return 1;
    for (long i = 0; i < cfg.items; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items[i] = (void *)(uintptr_t)seed;
    }
    printf("# map over %ld items, limit %ld, best of %ld; peer: %ld threads on one atomic "
           "index\n",
           cfg.items, cfg.limit, cfg.rounds, cfg.limit);
    for (size_t w = 0; w < sizeof(works) / sizeof(works[0]); w++) {
        double peer, arr, engine, emit;

        cfg.work = works[w];
        peer = best_of(run_peer, "pthread_pool");
        arr = best_of(run_array, "map_limit_array");
        engine = best_of(run_engine, "map_limit_producer");
        emit = best_of(run_emit, "map_limit_emit");
        printf("bench_map_limit impl=pthread_pool work=%ld ns_per_item=%.1f\n", cfg.work,
               peer * 1e9 / (double)cfg.items);
        printf("bench_map_limit impl=map_limit_array work=%ld ns_per_item=%.1f "
               "overhead_ns_per_item=%.1f ratio_time_vs_pool=%.2f\n",
               cfg.work, arr * 1e9 / (double)cfg.items, (arr - peer) * 1e9 / (double)cfg.items,
               arr / peer);
        printf("bench_map_limit impl=map_limit_producer work=%ld ns_per_item=%.1f "
               "overhead_ns_per_item=%.1f ratio_time_vs_pool=%.2f\n",
               cfg.work, engine * 1e9 / (double)cfg.items,
               (engine - peer) * 1e9 / (double)cfg.items, engine / peer);
        printf("bench_map_limit impl=map_limit_emit work=%ld ns_per_item=%.1f "
               "overhead_ns_per_item=%.1f ratio_time_vs_pool=%.2f\n",
               cfg.work, emit * 1e9 / (double)cfg.items, (emit - peer) * 1e9 / (double)cfg.items,
               emit / peer);
    }
    free(items);
    free(results);
    return 0;
}
