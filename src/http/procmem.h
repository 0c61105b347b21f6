/* SPDX-License-Identifier: MIT */
/* procmem.h - what semad's process holds: resident memory, open descriptors and the
 * allocator's own statistics, as Prometheus series for /metrics. */
#ifndef SEMAD_PROCMEM_H
#define SEMAD_PROCMEM_H

struct strbuf;

/* Appends process_resident_memory_bytes, process_open_fds and the semad_heap_* series (glibc's
 * mallinfo2(): bytes in use, free inside the heap, obtained from the system, in mmap'd
 * blocks). A figure the system cannot give is left out. 0 or SEMA_ENOMEM. Loop thread;
 * reads /proc and walks the allocator's arenas (under their locks): a few microseconds. */
int procmem_metrics(struct strbuf *out);

#endif /* SEMAD_PROCMEM_H */
