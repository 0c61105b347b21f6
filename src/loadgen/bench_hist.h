/* SPDX-License-Identifier: MIT */
/* bench_hist.h - a fixed-size log-bucket latency histogram (HDR-style) for the load generators.
 *
 * Values are nanoseconds. Values below 128 have their own bucket; above, every power of two is
 * split into 64 linear sub-buckets, so a reported percentile is within 1.6% of the true value.
 * The histogram never allocates: 3,776 64-bit counters (30 KiB) cover 0 ns .. 2^63 ns.
 * Header-only (static functions) so both `sema bench` and the bench/ programs can use it.
 * Not thread-safe: one histogram per thread, merge with bench_hist_merge(). */
#ifndef SEMA_BENCH_HIST_H
#define SEMA_BENCH_HIST_H

#include <stdint.h>
#include <string.h>

#define BENCH_HIST_SUB_BITS 6
#define BENCH_HIST_SUB (1u << BENCH_HIST_SUB_BITS) /* sub-buckets per power of two */
#define BENCH_HIST_LINEAR (2u * BENCH_HIST_SUB)    /* values with their own bucket */
#define BENCH_HIST_BUCKETS (BENCH_HIST_LINEAR + (64u - 7u) * BENCH_HIST_SUB)

typedef struct {
    uint64_t count;  /* samples recorded */
    uint64_t max_ns; /* exact largest sample */
    uint64_t min_ns; /* exact smallest sample (UINT64_MAX when empty) */
    uint64_t sum_ns; /* for the mean; saturates instead of wrapping */
    uint64_t bucket[BENCH_HIST_BUCKETS];
} bench_hist_t;

static inline void bench_hist_init(bench_hist_t *h)
{
    memset(h, 0, sizeof(*h));
    h->min_ns = UINT64_MAX;
}

/* Index of the bucket holding `v`. */
static inline unsigned bench_hist_index(uint64_t v)
{
    if (v < BENCH_HIST_LINEAR)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v); /* >= 7 */
    unsigned shift = msb - BENCH_HIST_SUB_BITS;
    return BENCH_HIST_LINEAR + (msb - 7u) * BENCH_HIST_SUB +
           (unsigned)((v >> shift) & (BENCH_HIST_SUB - 1u));
}

/* The middle of bucket `i` (the value reported for samples in it). */
static inline uint64_t bench_hist_value(unsigned i)
{
    if (i < BENCH_HIST_LINEAR)
        return i;
    unsigned j = i - BENCH_HIST_LINEAR;
    unsigned msb = 7u + j / BENCH_HIST_SUB;
    unsigned shift = msb - BENCH_HIST_SUB_BITS;
    uint64_t low = ((uint64_t)(BENCH_HIST_SUB + j % BENCH_HIST_SUB)) << shift;
    return low + ((1ull << shift) >> 1);
}

static inline void bench_hist_record(bench_hist_t *h, uint64_t ns)
{
    h->bucket[bench_hist_index(ns)]++;
    h->count++;
    h->sum_ns = (h->sum_ns + ns < h->sum_ns) ? UINT64_MAX : h->sum_ns + ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
    if (ns < h->min_ns)
        h->min_ns = ns;
}

static inline void bench_hist_merge(bench_hist_t *into, const bench_hist_t *from)
{
    for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++)
        into->bucket[i] += from->bucket[i];
    into->count += from->count;
    into->sum_ns =
        (into->sum_ns + from->sum_ns < into->sum_ns) ? UINT64_MAX : into->sum_ns + from->sum_ns;
    if (from->max_ns > into->max_ns)
        into->max_ns = from->max_ns;
    if (from->min_ns < into->min_ns)
        into->min_ns = from->min_ns;
}

/* The value at percentile `p` (0..100]; 0 when empty. The top percentile is the exact max. */
static inline uint64_t bench_hist_percentile(const bench_hist_t *h, double p)
{
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)((p / 100.0) * (double)h->count + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank >= h->count)
        return h->max_ns;
    uint64_t seen = 0;
    for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += h->bucket[i];
        if (seen >= rank) {
            uint64_t v = bench_hist_value(i);
            return v > h->max_ns ? h->max_ns : v;
        }
    }
    return h->max_ns;
}

#endif /* SEMA_BENCH_HIST_H */
