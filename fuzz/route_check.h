/* SPDX-License-Identifier: MIT */
/* route_check.h - the checks fuzz_http and fuzz_path share: a request target taken apart the
 * way semad's dispatch does it (router, percent-decoding, query parameters). */
#ifndef SEMA_FUZZ_ROUTE_CHECK_H
#define SEMA_FUZZ_ROUTE_CHECK_H

#include <stddef.h>

/* Match `url` (NUL-terminated request target, borrowed) for `method` as dispatch() does,
 * decode the route parameter and the query parameters the routes read, and check every
 * result's invariants (aborting on a failure). Allocates only temporarily. */
void fuzz_route_check(const char *method, const char *url);

/* Percent-decode `len` bytes and check the result: exactly once, no NUL, valid UTF-8, no
 * longer than the input. Returns http_pct_decode's code. */
int fuzz_pct_check(const char *src, size_t len, int plus_space);

#endif /* SEMA_FUZZ_ROUTE_CHECK_H */
