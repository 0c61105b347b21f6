/* SPDX-License-Identifier: MIT */
/* soak_fault.c - a leak and a slowdown for bench/soak's own test, preloaded into semad
 * (LD_PRELOAD) and never linked into sema: every answer semad writes (uv_try_write) first
 * leaks SEMA_FAULT_LEAK_BYTES bytes, and burns SEMA_FAULT_SLOW_US_PER_MIN microseconds of
 * CPU for every minute semad has run, so that the soak can be shown to fail on both. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

typedef int (*try_write_fn)(uv_stream_t *, const uv_buf_t[], unsigned);

static try_write_fn real_try_write;
static size_t leak_bytes;      /* leaked per answer, written so that it is resident */
static double slow_us_per_min; /* CPU burnt per answer, per minute since the start */
static double start_s;         /* CLOCK_MONOTONIC at load */
static void *leaked;           /* the last block leaked; each holds the one before */

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((constructor)) static void fault_init(void)
{
    const char *leak = getenv("SEMA_FAULT_LEAK_BYTES");
    const char *slow = getenv("SEMA_FAULT_SLOW_US_PER_MIN");
    leak_bytes = leak ? strtoul(leak, NULL, 10) : 0;
    slow_us_per_min = slow ? strtod(slow, NULL) : 0.0;
    start_s = clock_s(CLOCK_MONOTONIC);
    real_try_write = (try_write_fn)dlsym(RTLD_NEXT, "uv_try_write");
}

/* Spins until this thread has used `us` more microseconds of CPU (not of the wall clock: a
 * busy machine makes the spin longer, as it would real work). */
static void burn(double us)
{
    double until = clock_s(CLOCK_THREAD_CPUTIME_ID) + us / 1e6;
    while (clock_s(CLOCK_THREAD_CPUTIME_ID) < until)
        ;
}

int uv_try_write(uv_stream_t *handle, const uv_buf_t bufs[], unsigned nbufs)
{
    if (leak_bytes > 0) {
        void **p = malloc(leak_bytes < sizeof(void *) ? sizeof(void *) : leak_bytes);
        if (p != NULL) {
            memset(p, 0xa5, leak_bytes);
            *p = leaked;
            leaked = p;
        }
    }
    if (slow_us_per_min > 0)
        burn(slow_us_per_min * (clock_s(CLOCK_MONOTONIC) - start_s) / 60.0);
    return real_try_write(handle, bufs, nbufs);
}
