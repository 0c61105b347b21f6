/* SPDX-License-Identifier: MIT */
/* procmem.h - what semad's process holds: resident memory, open descriptors and the
 * allocator's own statistics, as Prometheus series for /metrics. */
#ifndef SEMAD_PROCMEM_H
#define SEMAD_PROCMEM_H

struct strbuf;

/* Appends process_resident_memory_bytes, process_open_fds and the semad_heap_* series (glibc's
 * mallinfo2(): bytes in use, free inside the heap, obtained from the system, in mmap'd
 * blocks; and the trims procmem_trim made). A figure the system cannot give is left out. 0 or
 * SEMA_ENOMEM. Loop thread; reads /proc and walks the allocator's arenas (under their locks): a few
 * microseconds. */
int procmem_metrics(struct strbuf *out);

/* Gives the allocator's free memory back to the system (glibc's malloc_trim(0): the whole
 * free pages inside its arenas, not only those at the top) once at least PROCMEM_TRIM_MIN
 * more of it is free than after the last trim, as after a burst of connections or requests
 * that are gone. semad calls it every PROCMEM_TRIM_EVERY_MS. Returns 1 when it trimmed.
 * Loop thread; a check costs a walk of the allocator's free lists (microseconds), a trim a
 * millisecond or so per 10 MiB free. */
int procmem_trim(void);

#define PROCMEM_TRIM_MIN (1u << 20)
#define PROCMEM_TRIM_EVERY_MS 10000

#endif /* SEMAD_PROCMEM_H */
