/* SPDX-License-Identifier: MIT */
/* bench_engine.c - semad's engine on the embedded back end, without HTTP: leased
 * acquire+release pairs/s against the engine's lease-free legacy down+up on the same loop
 * (the cost of leases, ids, fences and JSON), release->parked-waiter hand-off latency, and
 * memory per idle semaphore and per parked waiter. Fixed work, checks its own results, one
 * line per figure.
 *
 * Usage: bench_engine [pairs (default 200000)] [semaphores (default 1000000)] */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "engine/engine.h"
#include "http/render.h"

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    engine_req_t r;
    int done, status;
    int64_t at_ns;
    char lease[40];
} breq_t;

static void on_done(engine_req_t *r)
{
    breq_t *b = (breq_t *)r;

    b->done++;
    b->status = r->status;
    b->at_ns = now_ns();
    if (r->status == 0 && r->res.kind == ENGINE_RES_LEASE)
        snprintf(b->lease, sizeof(b->lease), "%s", r->res.lease.id);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_engine: %s failed: %d\n", what, rc);
    exit(1);
}

/* Submit a request that completes at once (no store); returns its status. */
static int run(engine_t *e, breq_t *b, engine_op_t op, const char *name, uint64_t n)
{
    memset(&b->r, 0, sizeof(b->r));
    b->done = 0;
    b->r.op = op;
    b->r.name = name;
    b->r.capacity = n;
    b->r.weight = n;
    b->r.timeout_ms = -1;
    b->r.cb = on_done;
    if (engine_submit(e, &b->r) != 0 || b->done != 1)
        die("submit", b->status);
    return b->status;
}

static double pairs_per_s(engine_t *e, long n, int leased)
{
    breq_t b;
    int64_t t0 = now_ns();

    for (long i = 0; i < n; i++) {
        if (leased) {
            if (run(e, &b, ENGINE_ACQUIRE, "bench", 1) != 0)
                die("acquire", b.status);
            if (run(e, &b, ENGINE_LEASE_RELEASE, b.lease, 0) != 0)
                die("release", b.status);
        } else {
            if (run(e, &b, ENGINE_LEGACY_DOWN, "bench", 0) != 0)
                die("down", b.status);
            if (run(e, &b, ENGINE_LEGACY_UP, "bench", 0) != 0)
                die("up", b.status);
        }
    }
    return (double)n * 1e9 / (double)(now_ns() - t0);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Median ns from submitting a release to the parked waiter's completion. */
static int64_t handoff_ns(engine_t *e, long n)
{
    int64_t *lat = malloc((size_t)n * sizeof(*lat));
    breq_t hold, w, rel;

    if (lat == NULL || run(e, &hold, ENGINE_ACQUIRE, "bench", 1) != 0)
        die("handoff setup", hold.status);
    for (long i = 0; i < n; i++) {
        memset(&w, 0, sizeof(w));
        w.r.op = ENGINE_ACQUIRE;
        w.r.name = "bench";
        w.r.weight = 1;
        w.r.timeout_ms = -1;
        w.r.cb = on_done;
        if (engine_submit(e, &w.r) != 0 || w.done != 0)
            die("park", w.status);
        int64_t t0 = now_ns();
        if (run(e, &rel, ENGINE_LEASE_RELEASE, hold.lease, 0) != 0 || w.done != 1 || w.status)
            die("hand-off", w.status);
        lat[i] = w.at_ns - t0;
        hold = w;
    }
    qsort(lat, (size_t)n, sizeof(*lat), cmp_i64);
    int64_t med = lat[n / 2];
    free(lat);
    return med;
}

static double bytes_per_semaphore(engine_t *e, long n)
{
    struct mallinfo2 a = mallinfo2(), b;
    char name[32];
    breq_t r;

    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "idle-%07ld", i);
        if (run(e, &r, ENGINE_SEM_PUT, name, 4) != 0)
            die("create", r.status);
    }
    b = mallinfo2();
    return (double)(b.uordblks - a.uordblks) / (double)n;
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
    long nsem = argc > 2 ? strtol(argv[2], NULL, 10) : 1000000;
    engine_config_t cfg;
    uv_loop_t loop;
    engine_t *e;
    char err[256];
    breq_t b;

    if (pairs < 1 || nsem < 1)
        die("arguments", 0);
    uv_loop_init(&loop);
    engine_config_default(&cfg);
    cfg.max_semaphores = 0;
    cfg.render_event = render_event_data;
    if (engine_new(&e, &loop, &engine_backend_embedded, &cfg, err, sizeof(err)) != 0)
        die("engine_new", 0);
    if (run(e, &b, ENGINE_LEGACY_CREATE, "bench", 1) != 0)
        die("create", b.status);

    double leased = pairs_per_s(e, pairs, 1);
    double legacy = pairs_per_s(e, pairs, 0);
    printf("engine_leased_pairs_per_s %.0f\n", leased);
    printf("engine_legacy_pairs_per_s %.0f\n", legacy);
    printf("engine_leased_vs_legacy_ratio %.3f\n", leased / legacy);
    printf("engine_handoff_median_ns %lld\n", (long long)handoff_ns(e, pairs / 10 + 1));
    printf("engine_bytes_per_idle_semaphore %.1f (n=%ld)\n", bytes_per_semaphore(e, nsem), nsem);

    engine_shutdown(e);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 0;
}
