/* SPDX-License-Identifier: MIT */
/* test_backends.c - what both back ends share (src/backends): the table of their messages,
 * and the one rule that makes a ticket's wait estimate from a semaphore's samples. */
#include <math.h>
#include <string.h>

#include "backends/be_estimate.h"
#include "backends/be_msg.h"
#include "test.h"

TEST(every_message_has_a_text_and_a_code)
{
    ASSERT_NULL(be_msg_text(BE_MSG_NONE));
    ASSERT_EQ(be_msg_code(BE_MSG_NONE), 0);
    for (int id = 1; id < BE_MSG_COUNT; id++) {
        const char *t = be_msg_text(id);
        ASSERT_NOT_NULL(t);
        ASSERT(t[0] != '\0');
        ASSERT_LT(be_msg_code(id), 0);
        ASSERT(strcmp(sema_err_name(be_msg_code(id)), "UNKNOWN") != 0);
        for (int j = 1; j < id; j++)
            if (strcmp(be_msg_text(j), t) == 0)
                TEST_FAIL_("messages %d and %d say the same: %s", j, id, t);
    }
    /* an id from a script of another build: a clear failure, never a crash */
    ASSERT_NULL(be_msg_text(BE_MSG_COUNT));
    ASSERT_NULL(be_msg_text(-1));
    ASSERT_EQ(be_msg_code(BE_MSG_COUNT), SEMA_EIO);
}

TEST(messages_keep_their_codes)
{
    ASSERT_EQ(be_msg_code(BE_MSG_NO_SEM), SEMA_ENOENT);
    ASSERT_STREQ(be_msg_text(BE_MSG_NO_SEM), "no such semaphore");
    ASSERT_EQ(be_msg_code(BE_MSG_LEASE_EXPIRED), SEMA_EEXPIRED);
    ASSERT_EQ(be_msg_code(BE_MSG_TICKET_LEFT), SEMA_EGONE);
    ASSERT_EQ(be_msg_code(BE_MSG_WAITER_TIMED_OUT), SEMA_ETIMEDOUT);
    ASSERT_EQ(be_msg_code(BE_MSG_REDIS_STATE_LOST), SEMA_EUNAVAIL);
}

TEST(no_estimate_before_enough_samples)
{
    be_est_t e = {0};
    int64_t p50 = -1, p90 = -1;

    e.ngaps = BE_EST_MIN_SAMPLES - 1;
    e.nholds = BE_EST_MIN_SAMPLES - 1;
    e.gap_ms = 10;
    e.hold_ms = 100;
    ASSERT_EQ(be_estimate(&e, 4, 3, -1, &p50, &p90), 0);
    ASSERT_EQ(p50, -1);
}

TEST(estimate_from_gaps_is_a_log_normal_of_their_sum)
{
    be_est_t e = {.gap_ms = 10, .gap_var = 100, .ngaps = BE_EST_MIN_SAMPLES};
    int64_t p50, p90;
    /* 4 units: mean 40, variance 400, cv2 0.25 */
    double median = 40 / sqrt(1.25), sigma = sqrt(log(1.25));

    ASSERT_EQ(be_estimate(&e, 2, 4, -1, &p50, &p90), 1);
    ASSERT_EQ(p50, llround(median));
    ASSERT_EQ(p90, llround(median * exp(1.2816 * sigma)));
    ASSERT_LT(p50, 40);
    ASSERT_GT(p90, 40);
}

TEST(estimate_from_holds_when_no_gap_was_measured)
{
    be_est_t e = {.hold_ms = 400, .nholds = BE_EST_MIN_SAMPLES};
    int64_t p50, p90;

    /* capacity 4: a unit every 100 ms, with the variance of its mean */
    ASSERT_EQ(be_estimate(&e, 4, 1, -1, &p50, &p90), 1);
    ASSERT_EQ(p50, llround(100 / sqrt(2.0)));
    ASSERT_EQ(be_estimate(&e, 0, 1, -1, &p50, &p90), 0); /* no capacity: no rate */
}

TEST(the_oldest_holder_frees_no_unit_before_its_expected_rest)
{
    be_est_t e = {.gap_ms = 1,
                  .gap_var = 0,
                  .ngaps = BE_EST_MIN_SAMPLES,
                  .hold_ms = 500,
                  .nholds = BE_EST_MIN_SAMPLES};
    int64_t p50, p90;

    ASSERT_EQ(be_estimate(&e, 1, 1, 100, &p50, &p90), 1); /* held 100 ms of a 500 ms mean */
    ASSERT_EQ(p50, 400);
    ASSERT_EQ(p90, 400);
    ASSERT_EQ(be_estimate(&e, 1, 1, 900, &p50, &p90), 1); /* past its mean: the gaps decide */
    ASSERT_EQ(p50, 1);
    ASSERT_EQ(be_estimate(&e, 1, 1, -1, &p50, &p90), 1); /* no holder */
    ASSERT_EQ(p50, 1);
}

TEST(fold_is_a_moving_mean_and_variance)
{
    double m = 0, v = 0;

    be_est_fold(&m, &v, 10, 0);
    ASSERT(m == 10 && v == 0);
    be_est_fold(&m, &v, 20, 1);
    ASSERT(fabs(m - 11) < 1e-12);
    ASSERT(fabs(v - 0.9 * (0 + 0.1 * 100)) < 1e-12);
    be_est_fold(&m, NULL, 0, 2);
    ASSERT(fabs(m - 9.9) < 1e-12);
}
