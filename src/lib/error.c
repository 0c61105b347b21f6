/* SPDX-License-Identifier: MIT */
/* error.c - messages and names for sema's status codes. */
#include "internal.h"

#include <time.h>

#include "sema/version.h"

const char *sema_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define SEMA__ERR_MSG(name, num, msg)                                                              \
    case SEMA_##name:                                                                              \
        return msg;
        SEMA_ERRNO_MAP(SEMA__ERR_MSG)
#undef SEMA__ERR_MSG
    default:
        return "unknown error";
    }
}

const char *sema_err_name(int err)
{
    switch (err) {
    case 0:
        return "OK";
#define SEMA__ERR_NAME(name, num, msg)                                                             \
    case SEMA_##name:                                                                              \
        return #name;
        SEMA_ERRNO_MAP(SEMA__ERR_NAME)
#undef SEMA__ERR_NAME
    default:
        return "UNKNOWN";
    }
}

const char *sema_version(void)
{
    return SEMA_VERSION_STRING;
}

void sema__abort(const char *file, int line, const char *msg)
{
    fprintf(stderr, "sema: fatal: %s:%d: %s\n", file, line, msg);
    abort();
}

int64_t sema__now_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        SEMA__ABORT("clock_gettime(CLOCK_MONOTONIC)");
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t sema__deadline_ns(int64_t timeout_ms)
{
    int64_t now = sema__now_ns();

    if (timeout_ms < 0 || timeout_ms > (INT64_MAX - now) / 1000000)
        return INT64_MAX;
    return now + timeout_ms * 1000000;
}
