/* SPDX-License-Identifier: MIT */
/* bench_store.c - semad's embedded store: grants/s with strict and relaxed durability at 1
 * and 50 grants per commit (why group commit matters), and recovery time of a large store.
 *
 * usage: bench_store [--seconds S] [--sems N] [--leases M] [--dir DIR]
 * Prints one line per figure: `bench_store <figure> <value> <unit>`, then the ratios. */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sema/error.h"
#include "store/store.h"

struct opts {
    double seconds;    /* per commit-rate figure */
    long sems, leases; /* size of the recovery store */
    char dir[256];     /* a directory on the disk to measure (default: under /tmp) */
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc, const char *err)
{
    fprintf(stderr, "bench_store: %s: %s: %s\n", what, sema_err_name(rc), err);
    exit(1);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static store_t *open_fresh(const char *dir, store_durability_t d)
{
    char err[512] = "";
    store_t *st;
    int rc;

    rm_tree(dir);
    rc = store_open(&st, dir, d, err, sizeof err);
    if (rc != 0)
        die("store_open", rc, err);
    return st;
}

static void commit(store_t *st)
{
    char err[512] = "";
    int rc = store_commit(st, err, sizeof err);

    if (rc != 0)
        die("store_commit", rc, err);
}

/* One grant as the engine writes it: the semaphore's new fence and the lease; the lease
 * granted 100 grants ago is released in the same tick so the table stays small. */
static void grant(store_t *st, uint64_t i)
{
    char id[32], old[32];
    store_sem_t s = {.name = "bench", .capacity = 1000, .available = 900, .fence = i + 1};
    store_lease_t l = {.id = id,
                       .sem = "bench",
                       .weight = 1,
                       .owner = "bench-worker",
                       .fence = i + 1,
                       .ttl_ms = 60000,
                       .acquired_at_ms = 1700000000000 + (int64_t)i,
                       .expires_at_ms = 1700000060000 + (int64_t)i};

    snprintf(id, sizeof id, "lease-%016" PRIx64, i);
    if (store_put_sem(st, &s) != 0 || store_put_lease(st, &l) != 0)
        die("store_put", SEMA_EIO, id);
    if (i >= 100) {
        snprintf(old, sizeof old, "lease-%016" PRIx64, i - 100);
        if (store_del_lease(st, old) != 0)
            die("store_del_lease", SEMA_EIO, old);
    }
}

/* Grants per second with `batch` grants per commit; checks every grant is in the store. */
/* Commit latencies: 10 us buckets up to 100 ms (checkpoints show up in the tail). */
#define LAT_US 10
#define LAT_N 10000
struct latency {
    uint64_t n;
    uint64_t bucket[LAT_N];
    double max_s;
};

static void lat_add(struct latency *l, double s)
{
    long b = (long)(s * 1e6 / LAT_US);

    l->bucket[b < 0 ? 0 : b >= LAT_N ? LAT_N - 1 : b]++;
    l->n++;
    if (s > l->max_s)
        l->max_s = s;
}

static double lat_pct_ms(const struct latency *l, double p)
{
    uint64_t want = (uint64_t)((double)l->n * p), seen = 0;

    for (int i = 0; i < LAT_N; i++) {
        seen += l->bucket[i];
        if (seen > want)
            return (double)(i + 1) * LAT_US / 1000.0;
    }
    return (double)LAT_N * LAT_US / 1000.0;
}

/* Grants per second with `batch` grants per commit; checks every grant is in the store. */
static double grant_rate(const struct opts *o, store_durability_t d, int batch, struct latency *lat)
{
    store_t *st = open_fresh(o->dir, d);
    double start = now_s(), elapsed;
    uint64_t n = 0;

    do {
        for (int b = 0; b < batch; b++)
            grant(st, n++);
        double t = now_s();
        commit(st);
        lat_add(lat, now_s() - t);
        elapsed = now_s() - start;
    } while (elapsed < o->seconds);
    uint64_t commits, failed, fence = 0;
    store_stats(st, &commits, &failed);
    if (store_max_fence(st, &fence) != 0 || fence != n || failed != 0 ||
        commits != n / (uint64_t)batch) {
        fprintf(stderr, "bench_store: wrong result: fence %" PRIu64 " of %" PRIu64 "\n", fence, n);
        exit(1);
    }
    store_close(st);
    return (double)n / elapsed;
}

/* Build a store of o->sems semaphores and o->leases leases (relaxed, big batches). */
static void build_large(const struct opts *o)
{
    store_t *st = open_fresh(o->dir, STORE_RELAXED);
    char name[32], id[48];

    for (long i = 0; i < o->sems; i++) {
        snprintf(name, sizeof name, "sem-%08ld", i);
        store_sem_t s = {.name = name,
                         .capacity = 10,
                         .available = 10,
                         .fence = 1,
                         .created_at_ms = 1700000000000};
        if (store_put_sem(st, &s) != 0)
            die("store_put_sem", SEMA_EIO, name);
        if (i % 20000 == 19999)
            commit(st);
    }
    commit(st);
    for (long i = 0; i < o->leases; i++) {
        snprintf(name, sizeof name, "sem-%08ld", i % o->sems);
        snprintf(id, sizeof id, "lease-%016lx-recovery", i);
        store_lease_t l = {.id = id,
                           .sem = name,
                           .weight = 1,
                           .owner = "bench-worker",
                           .fence = 1,
                           .ttl_ms = 60000,
                           .acquired_at_ms = 1700000000000,
                           .expires_at_ms = 1700000060000};
        if (store_put_lease(st, &l) != 0)
            die("store_put_lease", SEMA_EIO, id);
        if (i % 20000 == 19999)
            commit(st);
    }
    commit(st);
    store_close(st);
}

struct counts {
    long sems, leases;
    uint64_t weight;
};

static void count_sem(void *arg, const store_sem_t *s)
{
    struct counts *c = arg;

    c->sems += s->name != NULL;
}

static void count_lease(void *arg, const store_lease_t *l)
{
    struct counts *c = arg;

    c->leases++;
    c->weight += l->weight;
}

static void recovery(const struct opts *o)
{
    char err[512] = "";
    struct counts c = {0, 0, 0};
    store_t *st;
    double t0 = now_s(), t1, t2, t3;
    int rc;

    build_large(o);
    t1 = now_s();
    rc = store_open(&st, o->dir, STORE_STRICT, err, sizeof err);
    if (rc != 0)
        die("store_open", rc, err);
    t2 = now_s();
    rc = store_load(st, count_sem, count_lease, &c, err, sizeof err);
    if (rc != 0)
        die("store_load", rc, err);
    t3 = now_s();
    store_close(st);
    if (c.sems != o->sems || c.leases != o->leases || c.weight != (uint64_t)o->leases) {
        fprintf(stderr, "bench_store: loaded %ld semaphores and %ld leases, wrote %ld and %ld\n",
                c.sems, c.leases, o->sems, o->leases);
        exit(1);
    }
    printf("bench_store build_s %.3f s (%ld semaphores, %ld leases)\n", t1 - t0, o->sems,
           o->leases);
    printf("bench_store recovery_open_s %.3f s (lock, format and quick_check)\n", t2 - t1);
    printf("bench_store recovery_load_s %.3f s\n", t3 - t2);
    printf("bench_store recovery_total_s %.3f s\n", t3 - t1);
    printf("bench_store ratio recovery_total_vs_goal_5s %.3f\n", (t3 - t1) / 5.0);
}

static void parse(int argc, char **argv, struct opts *o)
{
    o->seconds = 1.5;
    o->sems = 1000000;
    o->leases = 100000;
    snprintf(o->dir, sizeof o->dir, "/tmp/bench_store-%ld", (long)getpid());
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            o->seconds = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--sems") == 0)
            o->sems = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--leases") == 0)
            o->leases = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0)
            snprintf(o->dir, sizeof o->dir, "%s/bench_store-%ld", argv[i + 1], (long)getpid());
        else {
            fprintf(stderr, "usage: bench_store [--seconds S] [--sems N] [--leases M] [--dir D]\n");
            exit(2);
        }
    }
    if (o->seconds <= 0 || o->sems < 1 || o->leases < 0) {
        fprintf(stderr, "bench_store: bad arguments\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        store_durability_t d;
        int batch;
    } cases[] = {
        {"strict_batch1", STORE_STRICT, 1},
        {"strict_batch50", STORE_STRICT, 50},
        {"relaxed_batch1", STORE_RELAXED, 1},
        {"relaxed_batch50", STORE_RELAXED, 50},
    };
    double rate[4];
    struct opts o;

    parse(argc, argv, &o);
    for (int i = 0; i < 4; i++) {
        static struct latency lat;
        memset(&lat, 0, sizeof lat);
        rate[i] = grant_rate(&o, cases[i].d, cases[i].batch, &lat);
        printf("bench_store %s_grants_per_s %.0f grants/s (%.0f commits/s)\n", cases[i].name,
               rate[i], rate[i] / cases[i].batch);
        printf("bench_store %s_commit_p50_ms %.3f ms\n", cases[i].name, lat_pct_ms(&lat, 0.5));
        printf("bench_store %s_commit_p99_ms %.3f ms\n", cases[i].name, lat_pct_ms(&lat, 0.99));
        printf("bench_store %s_commit_max_ms %.3f ms\n", cases[i].name, lat.max_s * 1000);
    }
    printf("bench_store ratio strict_batch50_vs_batch1 %.2f\n", rate[1] / rate[0]);
    printf("bench_store ratio relaxed_batch1_vs_strict_batch1 %.2f\n", rate[2] / rate[0]);
    printf("bench_store ratio strict_batch50_vs_relaxed_batch50 %.2f\n", rate[1] / rate[3]);
    recovery(&o);
    rm_tree(o.dir);
    return 0;
}
