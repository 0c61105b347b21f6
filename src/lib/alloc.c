/* SPDX-License-Identifier: MIT */
/* alloc.c - the allocator hook behind every libsema allocation. */
#include <string.h>

#include "internal.h"

static sema_malloc_fn hook_malloc = malloc;
static sema_realloc_fn hook_realloc = realloc;
static sema_calloc_fn hook_calloc = calloc;
static sema_free_fn hook_free = free;

int sema_set_allocator(sema_malloc_fn malloc_fn, sema_realloc_fn realloc_fn,
                       sema_calloc_fn calloc_fn, sema_free_fn free_fn)
{
    if (malloc_fn == NULL || realloc_fn == NULL || calloc_fn == NULL || free_fn == NULL)
        return SEMA_EINVAL;
    hook_malloc = malloc_fn;
    hook_realloc = realloc_fn;
    hook_calloc = calloc_fn;
    hook_free = free_fn;
    return 0;
}

void *sema__malloc(size_t size)
{
    return hook_malloc(size);
}

/* Below this, a zeroed block is malloc'ed and cleared: glibc's calloc bypasses its
 * per-thread cache and costs several times a cached malloc, on every request's ereq.
 * Larger blocks keep calloc, which gets fresh pages already zero. */
#define CALLOC_BY_MALLOC_MAX 4096u

void *sema__calloc(size_t count, size_t size)
{
    if (hook_calloc == calloc && count != 0 && size <= CALLOC_BY_MALLOC_MAX / count) {
        void *p = hook_malloc(count * size);
        if (p != NULL)
            memset(p, 0, count * size);
        return p;
    }
    return hook_calloc(count, size);
}

void *sema__realloc(void *ptr, size_t size)
{
    return hook_realloc(ptr, size);
}

char *sema__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = sema__malloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

void sema__free(void *ptr)
{
    if (ptr != NULL)
        hook_free(ptr);
}
