/* SPDX-License-Identifier: MIT */
/* bench_sem.c - the in-process semaphore against glibc's sem_t: uncontended pairs and hand-off.
 *
 * Figures (one line each, then the ratio sema/glibc; lower is better, goal <= 1.0):
 *   uncontended: acquire(1)+release(1) on a free semaphore vs sem_wait+sem_post, one thread;
 *   handoff: two threads ping-pong through two capacity-1 semaphores vs two sem_t;
 *   handoff_sleeping: the same, but the partner works 20 µs before each release, so the main
 *     thread outwaits its spin and sleeps: the cost of the sleeping path (and of the spin).
 * Each figure is the median of --reps interleaved trials (default 15, at most 100), as wall
 * time and as CPU time (user + system of all threads) per operation. Usage:
 *   bench_sem [--pairs N] [--rounds N] [--reps N] [--impl sema|glibc]
 * (--impl runs one side only, e.g. under strace -c or perf stat; no ratio then.) */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sema/sema.h"

#define MAX_REPS 101

static long pairs = 2000000;
static long rounds = 10000;
static int reps = 15;
static const char *only_impl = NULL; /* "sema" or "glibc": run one side (for strace/perf) */

/* CPU time (user + system, all threads) of the last trial, in ns per operation: less
 * sensitive than wall time to a loaded machine, where a woken thread may wait for a CPU. */
static double last_cpu_ns;
static double cpu0;

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_sem: %s failed: %d\n", what, rc);
    exit(1);
}

/* ---- uncontended ---- */

static double uncontended_sema(void)
{
    sema_sem_t *sem;
    sema_sem_stats_t st;
    double t0, t;
    long ok = 0;

    if (sema_sem_new(&sem, 1) != 0)
        die("sema_sem_new", -1);
    cpu0 = cpu_s();
    t0 = now_s();
    for (long i = 0; i < pairs; i++) {
        ok += sema_sem_acquire(sem, 1, -1) == 0;
        ok += sema_sem_release(sem, 1) == 0;
    }
    t = now_s() - t0;
    last_cpu_ns = (cpu_s() - cpu0) * 1e9 / (double)pairs;
    sema_sem_stats(sem, &st);
    if (ok != 2 * pairs || st.available != 1)
        die("sema uncontended check", (int)st.available);
    sema_sem_free(sem);
    return t * 1e9 / (double)pairs;
}

static double uncontended_glibc(void)
{
    sem_t sem;
    double t0, t;
    long ok = 0;
    int v;

    sem_init(&sem, 0, 1);
    cpu0 = cpu_s();
    t0 = now_s();
    for (long i = 0; i < pairs; i++) {
        ok += sem_wait(&sem) == 0;
        ok += sem_post(&sem) == 0;
    }
    t = now_s() - t0;
    last_cpu_ns = (cpu_s() - cpu0) * 1e9 / (double)pairs;
    sem_getvalue(&sem, &v);
    if (ok != 2 * pairs || v != 1)
        die("glibc uncontended check", v);
    sem_destroy(&sem);
    return t * 1e9 / (double)pairs;
}

/* ---- hand-off ---- */

static double work_s; /* the partner's busy work before each release, in seconds */

static void work(void)
{
    double end;

    if (work_s <= 0)
        return;
    for (end = now_s() + work_s; now_s() < end;)
        ;
}

typedef struct {
    sema_sem_t *ping, *pong; /* capacity 1, both start held */
    sem_t gping, gpong;      /* start at 0 */
    long done;
} pp_t;

static void *sema_partner(void *arg)
{
    pp_t *p = arg;

    for (long i = 0; i < rounds; i++) {
        if (sema_sem_acquire(p->ping, 1, -1) != 0)
            die("sema partner", -1);
        work();
        if (sema_sem_release(p->pong, 1) != 0)
            die("sema partner", -1);
        p->done++;
    }
    return NULL;
}

static double handoff_sema(void)
{
    pp_t p = {0};
    pthread_t t;
    double t0, el;

    if (sema_sem_new(&p.ping, 1) != 0 || sema_sem_new(&p.pong, 1) != 0)
        die("sema_sem_new", -1);
    sema_sem_acquire(p.ping, 1, 0);
    sema_sem_acquire(p.pong, 1, 0);
    pthread_create(&t, NULL, sema_partner, &p);
    cpu0 = cpu_s();
    t0 = now_s();
    for (long i = 0; i < rounds; i++) {
        if (sema_sem_release(p.ping, 1) != 0 || sema_sem_acquire(p.pong, 1, -1) != 0)
            die("sema main", -1);
    }
    el = now_s() - t0;
    last_cpu_ns = (cpu_s() - cpu0) * 1e9 / (double)(2 * rounds);
    pthread_join(t, NULL);
    if (p.done != rounds)
        die("sema hand-off check", (int)p.done);
    sema_sem_free(p.ping);
    sema_sem_free(p.pong);
    return el * 1e9 / (double)(2 * rounds); /* two hand-offs per round */
}

static void *glibc_partner(void *arg)
{
    pp_t *p = arg;

    for (long i = 0; i < rounds; i++) {
        while (sem_wait(&p->gping) != 0)
            ;
        work();
        sem_post(&p->gpong);
        p->done++;
    }
    return NULL;
}

static double handoff_glibc(void)
{
    pp_t p = {0};
    pthread_t t;
    double t0, el;

    sem_init(&p.gping, 0, 0);
    sem_init(&p.gpong, 0, 0);
    pthread_create(&t, NULL, glibc_partner, &p);
    cpu0 = cpu_s();
    t0 = now_s();
    for (long i = 0; i < rounds; i++) {
        sem_post(&p.gping);
        while (sem_wait(&p.gpong) != 0)
            ;
    }
    el = now_s() - t0;
    last_cpu_ns = (cpu_s() - cpu0) * 1e9 / (double)(2 * rounds);
    pthread_join(t, NULL);
    if (p.done != rounds)
        die("glibc hand-off check", (int)p.done);
    sem_destroy(&p.gping);
    sem_destroy(&p.gpong);
    return el * 1e9 / (double)(2 * rounds);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return a < b ? -1 : a > b;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void figure(const char *name, double (*ours)(void), double (*peer)(void))
{
    /* Many short trials, interleaved, so machine noise hits both alike; report medians. */
    double a[MAX_REPS], b[MAX_REPS], ca[MAX_REPS], cb[MAX_REPS], ma, mb, mca, mcb;

    for (int i = 0; i < reps; i++) {
        a[i] = ca[i] = b[i] = cb[i] = 1;
        if (only_impl == NULL || strcmp(only_impl, "sema") == 0) {
            a[i] = ours();
            ca[i] = last_cpu_ns;
        }
        if (only_impl == NULL || strcmp(only_impl, "glibc") == 0) {
            b[i] = peer();
            cb[i] = last_cpu_ns;
        }
    }
    ma = median(a, reps);
    mb = median(b, reps);
    mca = median(ca, reps);
    mcb = median(cb, reps);
    printf("bench=sem figure=%s impl=sema ns_per_op=%.2f cpu_ns_per_op=%.2f\n", name, ma, mca);
    printf("bench=sem figure=%s impl=glibc_sem_t ns_per_op=%.2f cpu_ns_per_op=%.2f\n", name, mb,
           mcb);
    printf("bench=sem figure=%s ratio=%.3f cpu_ratio=%.3f goal=1.0 %s\n", name, ma / mb, mca / mcb,
           ma / mb <= 1.0 ? "ok" : "over");
}

static long arg_long(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (*end != '\0' || v <= 0) {
        fprintf(stderr, "bench_sem: bad number %s\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--pairs") == 0)
            pairs = arg_long(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = arg_long(argv[i + 1]);
        else if (strcmp(argv[i], "--impl") == 0)
            only_impl = argv[i + 1];
        else if (strcmp(argv[i], "--reps") == 0)
            reps = (int)(arg_long(argv[i + 1]) < MAX_REPS ? arg_long(argv[i + 1]) : MAX_REPS);
        else {
            fprintf(stderr,
                    "usage: bench_sem [--pairs N] [--rounds N] [--reps N] [--impl sema|glibc]\n");
            return 2;
        }
    }
    printf("bench=sem pairs=%ld rounds=%ld reps=%d\n", pairs, rounds, reps);
    figure("uncontended_pair", uncontended_sema, uncontended_glibc);
    figure("handoff", handoff_sema, handoff_glibc);
    work_s = 20e-6;
    rounds = rounds / 2 > 0 ? rounds / 2 : 1;
    figure("handoff_sleeping", handoff_sema, handoff_glibc);
    return 0;
}
