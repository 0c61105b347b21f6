/* SPDX-License-Identifier: MIT */
/* alloc.h - how semad allocates, and its invariant check. semad links libsema statically and
 * allocates through libsema's one allocator hook (sema_set_allocator() in sema/alloc.h), so
 * one call reaches every allocation of both and an allocation-failure test can fail any of
 * them. The rule: every block semad's own code allocates comes from sema__malloc,
 * sema__calloc, sema__realloc or sema__strdup and goes back through sema__free; libc's
 * malloc and free only for memory a library allocates or frees itself (OpenSSL, SQLite,
 * hiredis and jansson results). */
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
