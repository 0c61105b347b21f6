/* SPDX-License-Identifier: MIT */
/* test.h - sema's small test runner: TEST(name) cases and assertions that print both sides.
 *
 * Each test program is linked with tests/test_main.c. CMake finds every
 * `TEST(name)` line at configure time and registers `prog name` as its own
 * CTest test (with a timeout), so one case fails or passes on its own.
 * A case may call TEST_SKIP("why") to exit with 77 (CTest's "skipped"). */
#ifndef SEMA_TEST_H
#define SEMA_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
/* Scale factor for loop counts (env SEMA_TEST_SCALE, default 1.0; sanitizer
 * builds set it lower). Returns max(1, n * scale). */
long test_scale(long n);

#define TEST(name)                                                                                 \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void test_reg_##name(void)                                 \
    {                                                                                              \
        test_register(#name, test_##name);                                                         \
    }                                                                                              \
    static void test_##name(void)

#define TEST_FAIL_(...)                                                                            \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define TEST_SKIP(why)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "skipped: %s\n", (why));                                                   \
        exit(77);                                                                                  \
    } while (0)

#define ASSERT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            TEST_FAIL_("assertion failed: %s", #cond);                                             \
    } while (0)

#define ASSERT_CMP_(a, op, b)                                                                      \
    do {                                                                                           \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                                              \
        if (!(a_ op b_))                                                                           \
            TEST_FAIL_("%s %s %s: %" PRId64 " vs %" PRId64, #a, #op, #b, a_, b_);                  \
    } while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b)
#define ASSERT_OK(expr) ASSERT_EQ((expr), 0)

#define ASSERT_STREQ(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                                       \
            TEST_FAIL_("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)",                   \
                       b_ ? b_ : "(null)");                                                        \
    } while (0)

#define ASSERT_NULL(p) ASSERT((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT((p) != NULL)

#endif /* SEMA_TEST_H */
