/* SPDX-License-Identifier: MIT */
/* internal.h - helpers shared by libsema's source files; never installed. */
#ifndef SEMA_INTERNAL_H
#define SEMA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sema/alloc.h"
#include "sema/error.h"

#if defined(__GNUC__)
#define SEMA__HIDDEN __attribute__((visibility("hidden")))
#define SEMA__LIKELY(x) __builtin_expect(!!(x), 1)
#define SEMA__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SEMA__HIDDEN
#define SEMA__LIKELY(x) (x)
#define SEMA__UNLIKELY(x) (x)
#endif

/* A spin-wait hint to the CPU. */
#if defined(__x86_64__) || defined(__i386__)
#define SEMA__CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define SEMA__CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define SEMA__CPU_RELAX() ((void)0)
#endif

/* Allocation through the hook set by sema_set_allocator(). */
SEMA__HIDDEN void *sema__malloc(size_t size);
SEMA__HIDDEN void *sema__calloc(size_t count, size_t size);
SEMA__HIDDEN void *sema__realloc(void *ptr, size_t size);
SEMA__HIDDEN void sema__free(void *ptr);
SEMA__HIDDEN char *sema__strdup(const char *s);

/* An impossible failure (a pthread call on a valid object, a broken
 * invariant): print where and abort. Never returns. */
#define SEMA__ABORT(msg) sema__abort(__FILE__, __LINE__, (msg))
#define SEMA__CHECK(cond)                                                                          \
    do {                                                                                           \
        if (SEMA__UNLIKELY(!(cond)))                                                               \
            sema__abort(__FILE__, __LINE__, #cond);                                                \
    } while (0)
SEMA__HIDDEN _Noreturn void sema__abort(const char *file, int line, const char *msg);

/* Monotonic clock in nanoseconds, and the absolute deadline `timeout_ms` from
 * now (INT64_MAX for a negative timeout, i.e. forever). */
SEMA__HIDDEN int64_t sema__now_ns(void);
SEMA__HIDDEN int64_t sema__deadline_ns(int64_t timeout_ms);

/* A FIFO queue as a doubly linked list: `q` has `head` and `tail`, a node has links named
 * `prev` and `next` (the names differ between sem.c and keyed.c, hence macros). */
#define SEMA__QUEUE_PUSH(q, n, prev, next)                                                         \
    do {                                                                                           \
        (n)->next = NULL;                                                                          \
        (n)->prev = (q)->tail;                                                                     \
        if ((q)->tail != NULL)                                                                     \
            (q)->tail->next = (n);                                                                 \
        else                                                                                       \
            (q)->head = (n);                                                                       \
        (q)->tail = (n);                                                                           \
    } while (0)
#define SEMA__QUEUE_REMOVE(q, n, prev, next)                                                       \
    do {                                                                                           \
        if ((n)->prev != NULL)                                                                     \
            (n)->prev->next = (n)->next;                                                           \
        else                                                                                       \
            (q)->head = (n)->next;                                                                 \
        if ((n)->next != NULL)                                                                     \
            (n)->next->prev = (n)->prev;                                                           \
        else                                                                                       \
            (q)->tail = (n)->prev;                                                                 \
        (n)->prev = (n)->next = NULL;                                                              \
    } while (0)

#endif /* SEMA_INTERNAL_H */
