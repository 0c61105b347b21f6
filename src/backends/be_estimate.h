/* SPDX-License-Identifier: MIT */
/* be_estimate.h - a ticket's wait estimate, from what its semaphore measured: the one rule
 * both back ends use (the embedded back end measures in its memory, the Redis back end's
 * script in Redis; either hands its samples here). */
#ifndef SEMAD_BE_ESTIMATE_H
#define SEMAD_BE_ESTIMATE_H

#include <stdint.h>

#define BE_EST_MIN_SAMPLES 8 /* samples of a kind before they are used */
#define BE_EST_ALPHA 0.1     /* weight of a new sample in the moving mean and variance */

/* What a semaphore measured: per unit granted from its queue while the queue stayed
 * non-empty, the moving mean and variance of the gap between grants (ms, ms^2); the moving
 * mean of hold times (ms); and how many samples of each were taken (saturating). */
typedef struct {
    double gap_ms, gap_var;
    double hold_ms;
    uint32_t ngaps, nholds;
} be_est_t;

/* Fold sample x into a moving mean (and variance, when var is not NULL) of which n samples
 * were taken before it (the first sets the mean). The Redis back end's script does the same
 * with BE_EST_ALPHA, which it gets as a generated constant. */
void be_est_fold(double *mean, double *var, double x, uint32_t n);

/* The wait until `units` more units have been granted from the queue of a semaphore of
 * `capacity`, as p50 and p90 in ms. oldest_age_ms: how long its oldest holder has held its
 * lease (< 0: no holder). Returns 1 with *p50 and *p90 set, or 0 without enough samples. */
int be_estimate(const be_est_t *e, uint64_t capacity, uint64_t units, double oldest_age_ms,
                int64_t *p50, int64_t *p90);

#endif /* SEMAD_BE_ESTIMATE_H */
