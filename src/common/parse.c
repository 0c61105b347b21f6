/* SPDX-License-Identifier: MIT */
/* parse.c - the strict number and duration syntax of semad's flags and query parameters. */
#include "common/parse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sema/error.h"

int parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return SEMA_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > (unsigned long long)INT64_MAX)
        return SEMA_EINVAL;
    *out = v;
    return 0;
}

static const struct {
    const char *suffix;
    int64_t ms;
} units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};

int parse_ms(const char *s, int64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return SEMA_EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0)
        return SEMA_EINVAL;
    if (*end == '\0') /* a bare number: only 0 needs no unit (sema reads seconds there) */
        return v == 0 ? (*out = 0, 0) : SEMA_EINVAL;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v > INT64_MAX / units[i].ms)
                return SEMA_EINVAL;
            *out = v * units[i].ms;
            return 0;
        }
    }
    return SEMA_EINVAL;
}
