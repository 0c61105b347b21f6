/* SPDX-License-Identifier: MIT */
/* alloc.h - one hook for every allocation libsema makes. */
#ifndef SEMA_ALLOC_H
#define SEMA_ALLOC_H

#include <stddef.h>

#include "sema/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *(*sema_malloc_fn)(size_t size);
typedef void *(*sema_realloc_fn)(void *ptr, size_t size);
typedef void *(*sema_calloc_fn)(size_t count, size_t size);
typedef void (*sema_free_fn)(void *ptr);

/* Replace the allocator libsema uses. Call it before any other sema function,
 * while no sema object exists; all four must be given. Returns 0 or
 * SEMA_EINVAL. Not thread-safe. */
SEMA_EXTERN int sema_set_allocator(sema_malloc_fn malloc_fn, sema_realloc_fn realloc_fn,
                                   sema_calloc_fn calloc_fn, sema_free_fn free_fn);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_ALLOC_H */
