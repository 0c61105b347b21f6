/* SPDX-License-Identifier: MIT */
/* fuzz.h - what every fuzz target shares: the libFuzzer entry point and a failing check. */
#ifndef SEMA_FUZZ_H
#define SEMA_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Run one input through the target. Returns 0. Aborts (with a message on stderr) when an
 * invariant of the code under test fails; sanitizers report crashes and leaks themselves.
 * `data` is borrowed. Not thread-safe (targets keep no state between calls, though). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test: abort with its text and place when it is false. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif /* SEMA_FUZZ_H */
