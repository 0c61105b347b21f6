/* SPDX-License-Identifier: MIT */
/* be_estimate.c - a ticket's wait estimate from its semaphore's samples (be_estimate.h). */
#include "backends/be_estimate.h"

#include <math.h>
#include <stddef.h>

#define BE_EST_Z90 1.2816 /* the standard normal's 90th percentile */

void be_est_fold(double *mean, double *var, double x, uint32_t n)
{
    double d;

    if (n == 0) {
        *mean = x;
        if (var != NULL)
            *var = 0;
        return;
    }
    d = x - *mean;
    *mean += BE_EST_ALPHA * d;
    if (var != NULL)
        *var = (1 - BE_EST_ALPHA) * (*var + BE_EST_ALPHA * d * d);
}

/* The wait is the sum of `units` per-unit gaps, whose mean and variance are units times the
 * gap's. Gaps are skewed (most short, a few long): the sum is taken as log-normal with that
 * mean and variance, so for a few units the median sits below the mean and the p90 well above
 * it, and for many units it tends to the normal of the central limit theorem. Without enough
 * gaps measured yet, holds in parallel give the gap: mean hold / capacity. */
int be_estimate(const be_est_t *e, uint64_t capacity, uint64_t units, double oldest_age_ms,
                int64_t *p50, int64_t *p90)
{
    double m, var, mean, cv2, sigma, median;

    if (e->ngaps >= BE_EST_MIN_SAMPLES) {
        m = e->gap_ms;
        var = e->gap_var;
    } else if (e->nholds >= BE_EST_MIN_SAMPLES && capacity > 0) {
        m = e->hold_ms / (double)capacity;
        var = m * m;
    } else {
        return 0;
    }
    mean = (double)units * m;
    /* Holders that started together (a crowd arriving at a free semaphore) free no unit for
     * a while: the first unit comes back no sooner than the oldest holder's expected rest
     * (mean hold - its age). */
    if (e->nholds >= BE_EST_MIN_SAMPLES && oldest_age_ms >= 0) {
        double first = e->hold_ms > oldest_age_ms ? e->hold_ms - oldest_age_ms : 0;
        if (first + (double)(units - 1) * m > mean)
            mean = first + (double)(units - 1) * m;
    }
    if (mean <= 0) {
        *p50 = *p90 = 0;
        return 1;
    }
    cv2 = (double)units * var / (mean * mean); /* squared coefficient of variation */
    sigma = sqrt(log1p(cv2));
    median = mean / sqrt(1 + cv2);
    *p50 = (int64_t)llround(median);
    *p90 = (int64_t)llround(median * exp(BE_EST_Z90 * sigma));
    return 1;
}
