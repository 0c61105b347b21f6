/* SPDX-License-Identifier: MIT */
/* parse.h - the strict number and duration syntax of semad's flags and query parameters. */
#ifndef SEMAD_PARSE_H
#define SEMAD_PARSE_H

#include <stdint.h>

/* Parse a duration "0", "250ms", "10s", "5m", "1h" into milliseconds (a bare number other
 * than 0 is refused: which unit?). Returns 0 or SEMA_EINVAL. */
int parse_ms(const char *s, int64_t *out);

/* Parse a non-negative integer (decimal, at most 2^63). Returns 0 or SEMA_EINVAL. */
int parse_u64(const char *s, uint64_t *out);

#endif /* SEMAD_PARSE_H */
