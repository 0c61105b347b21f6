/* SPDX-License-Identifier: MIT */
/* test_error.c - status codes: messages, names, errno values, the allocator hook. */
#include <errno.h>

#include "internal.h"
#include "sema/sema.h"
#include "test.h"

TEST(every_code_has_a_message_and_a_name)
{
#define CHECK_CODE(name, num, msg)                                                                 \
    ASSERT_LT(SEMA_##name, 0);                                                                     \
    ASSERT_STREQ(sema_strerror(SEMA_##name), msg);                                                 \
    ASSERT_STREQ(sema_err_name(SEMA_##name), #name);
    SEMA_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
    ASSERT_STREQ(sema_strerror(0), "success");
    ASSERT_STREQ(sema_strerror(-99999), "unknown error");
    ASSERT_STREQ(sema_err_name(-99999), "UNKNOWN");
}

TEST(codes_equal_linux_errno)
{
    ASSERT_EQ(SEMA_EINVAL, -EINVAL);
    ASSERT_EQ(SEMA_EBUSY, -EBUSY);
    ASSERT_EQ(SEMA_ETIMEDOUT, -ETIMEDOUT);
    ASSERT_EQ(SEMA_ECANCELED, -ECANCELED);
    ASSERT_EQ(SEMA_EOVERFLOW, -EOVERFLOW);
    ASSERT_EQ(SEMA_ENOMEM, -ENOMEM);
    ASSERT_EQ(SEMA_EEXPIRED, -EKEYEXPIRED);
    ASSERT_EQ(SEMA_EREVOKED, -EKEYREVOKED);
    ASSERT_EQ(SEMA_ESTALE, -ESTALE);
}

static int fake_allocs;
static void *counting_malloc(size_t n)
{
    fake_allocs++;
    return malloc(n);
}

TEST(allocator_hook_is_used)
{
    ASSERT_EQ(sema_set_allocator(NULL, realloc, calloc, free), SEMA_EINVAL);
    ASSERT_OK(sema_set_allocator(counting_malloc, realloc, calloc, free));
    void *p = sema__malloc(16);
    ASSERT_NOT_NULL(p);
    ASSERT_EQ(fake_allocs, 1);
    sema__free(p);
    sema__free(NULL);
    ASSERT_OK(sema_set_allocator(malloc, realloc, calloc, free));
}

TEST(version_string)
{
    ASSERT_STREQ(sema_version(), SEMA_VERSION_STRING);
}
