/* SPDX-License-Identifier: MIT */
/* test_problem.c - the status table: every SEMA_E* code has a row, rows match the contract. */
#include "http/problem.h"
#include "sema/error.h"
#include "test.h"

TEST(every_code_has_a_row)
{
#define CHECK_ROW(name, num, msg)                                                                  \
    do {                                                                                           \
        const problem_row_t *r = problem_lookup(SEMA_##name);                                      \
        if (r->err != SEMA_##name)                                                                 \
            TEST_FAIL_("SEMA_%s has no row in the problem table", #name);                          \
        ASSERT_GE(r->status, 400);                                                                 \
        ASSERT_LT(r->status, 600);                                                                 \
        ASSERT(r->code[0] != '\0');                                                                \
    } while (0);
    SEMA_ERRNO_MAP(CHECK_ROW)
#undef CHECK_ROW
}

TEST(rows_are_unique_and_codes_distinct)
{
    size_t n = problem_count();
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            ASSERT_NE(problem_row(i)->err, problem_row(j)->err);
            ASSERT(strcmp(problem_row(i)->code, problem_row(j)->code) != 0);
        }
    ASSERT_NULL(problem_row(n));
}

TEST(contract_table)
{
    static const struct {
        int err, status;
        const char *code;
    } want[] = {
        {SEMA_EINVAL, 400, "invalid_request"},
        {SEMA_ENAMETOOLONG, 400, "name_too_long"},
        {SEMA_ENOENT, 404, "not_found"},
        {SEMA_EEXIST, 409, "conflict"},
        {SEMA_EBUSY, 409, "unavailable"},
        {SEMA_ETIMEDOUT, 409, "timeout"},
        {SEMA_EOVERFLOW, 409, "overflow"},
        {SEMA_ECANCELED, 410, "deleted"},
        {SEMA_EEXPIRED, 410, "lease_expired"},
        {SEMA_EREVOKED, 410, "lease_revoked"},
        {SEMA_ESTALE, 410, "lease_released"},
        {SEMA_ELIMIT, 429, "limit_reached"},
        {SEMA_ESHUTDOWN, 503, "shutting_down"},
        {SEMA_EIO, 503, "store_unavailable"},
        {SEMA_ENOMEM, 503, "out_of_memory"},
        {SEMA_EREPLACED, 409, "idempotency_key_replaced"},
        {SEMA_EKEYMISMATCH, 409, "idempotency_key_mismatch"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const problem_row_t *r = problem_lookup(want[i].err);
        ASSERT_EQ(r->status, want[i].status);
        ASSERT_STREQ(r->code, want[i].code);
    }
    ASSERT_EQ(problem_lookup(0)->status, 200);
    ASSERT_EQ(problem_lookup(-424242)->status, 500);
}

TEST(retry_after_goes_only_with_the_503s_worth_asking_again)
{
    for (size_t i = 0; i < problem_count(); i++) {
        const problem_row_t *r = problem_row(i);
        if (r->err == SEMA_EIO || r->err == SEMA_EUNAVAIL)
            ASSERT_STREQ(r->headers, "Retry-After: 1\r\n");
        else
            ASSERT_NULL(r->headers);
    }
    ASSERT_NULL(problem_lookup(-424242)->headers);
}
