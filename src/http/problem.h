/* SPDX-License-Identifier: MIT */
/* problem.h - the one table from engine status codes to HTTP statuses and problem codes. */
#ifndef SEMAD_PROBLEM_H
#define SEMAD_PROBLEM_H

#include <stddef.h>

#include <jansson.h>

typedef struct {
    int err;             /* 0 or a SEMA_E* code */
    int status;          /* HTTP status */
    const char *code;    /* stable machine-readable problem code ("" for success) */
    const char *title;   /* short human title */
    const char *headers; /* header lines sent with the reply (each ending in CRLF), or NULL:
                            "Retry-After: 1" for the 503s worth asking again soon */
} problem_row_t;

/* The row for `err` (a SEMA_E* code). Codes without a row of their own map to
 * 500 "internal". Never NULL. Pure, thread-safe. */
const problem_row_t *problem_lookup(int err);

/* The number of rows and the i-th row (for tests and docs). */
size_t problem_count(void);
const problem_row_t *problem_row(size_t i);

/* The title of `code` (one title per code), or the status text if the table lacks it. */
const char *problem_title(const char *code, int status);

#endif /* SEMAD_PROBLEM_H */
