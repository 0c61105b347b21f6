/* SPDX-License-Identifier: MIT */
/* alloc.h - how semad allocates, and its invariant check. semad links libsema statically and
 * shares its allocator hook (sema_set_allocator() in sema/alloc.h). The rule: the engine, the
 * back ends and the containers of common/table.c allocate with sema__malloc, sema__calloc,
 * sema__realloc or sema__strdup and free with sema__free, so an allocation-failure test can
 * fail any allocation a request makes in them; the HTTP layer and the store size every
 * buffer by a cap and use libc's malloc and free. A block never crosses from one family to
 * the other, and memory a library returns goes back to that library. */
#ifndef SEMAD_ALLOC_H
#define SEMAD_ALLOC_H

#include <stddef.h>

#include "sema/alloc.h"

void *sema__malloc(size_t size);
void *sema__calloc(size_t count, size_t size);
void *sema__realloc(void *ptr, size_t size);
void sema__free(void *ptr); /* NULL is fine */
char *sema__strdup(const char *s);

/* An impossible failure (a broken invariant): print where and abort. Never returns. */
_Noreturn void sema__abort(const char *file, int line, const char *msg);
#define SEMA__CHECK(cond)                                                                          \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0))                                                          \
            sema__abort(__FILE__, __LINE__, #cond);                                                \
    } while (0)

#endif /* SEMAD_ALLOC_H */
