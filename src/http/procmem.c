/* SPDX-License-Identifier: MIT */
/* procmem.c - the process's memory and descriptors as /metrics series: what an operator
 * watches to tell a leak from an allocator keeping freed memory. */
#include "http/procmem.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/jsonw.h"
#include "sema/error.h"

/* Resident bytes from /proc/self/statm (its second field, in pages); 0 when unknown. */
static uint64_t resident_bytes(void)
{
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Open descriptors (the one the count itself opens excluded); -1 when unknown. */
static int64_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int64_t n = -1; /* the directory's own descriptor */

    if (d == NULL)
        return -1;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;)
        n += ent->d_name[0] != '.';
    closedir(d);
    return n;
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
#define HAVE_MALLINFO2 1
#endif

static uint64_t trims;   /* procmem_trim's trims (the heap is the process's: one count) */
static size_t free_mark; /* free bytes after the last trim, or the least seen since */

static void put_heap(jsonw_t *w)
{
#ifdef HAVE_MALLINFO2
    struct mallinfo2 mi = mallinfo2();

    jsonw_prom_series(w, "semad_heap_in_use_bytes",
                      "Bytes the allocator has handed out and not got back (mmap'd blocks "
                      "included).",
                      "gauge", mi.uordblks + mi.hblkhd);
    jsonw_prom_series(w, "semad_heap_free_bytes",
                      "Freed bytes the allocator keeps inside its arenas (fragmentation, or "
                      "reuse ahead).",
                      "gauge", mi.fordblks);
    jsonw_prom_series(w, "semad_heap_arena_bytes",
                      "Bytes of the allocator's arenas (in use and free; mmap'd blocks apart).",
                      "gauge", mi.arena);
    jsonw_prom_series(w, "semad_heap_mmap_bytes", "Bytes in blocks mmap'd one by one.", "gauge",
                      mi.hblkhd);
    jsonw_prom_series(w, "semad_heap_trims_total",
                      "Free heap memory given back to the system (malloc_trim).", "counter", trims);
#else
    (void)w;
#endif
}

int procmem_metrics(struct strbuf *out)
{
    jsonw_t w;
    uint64_t rss = resident_bytes();
    int64_t fds = open_fds();

    jsonw_init(&w, out);
    if (rss > 0)
        jsonw_prom_series(&w, "process_resident_memory_bytes", "Resident memory size in bytes.",
                          "gauge", rss);
    if (fds >= 0)
        jsonw_prom_series(&w, "process_open_fds", "Number of open file descriptors.", "gauge",
                          (uint64_t)fds);
    put_heap(&w);
    return jsonw_end(&w) != 0 ? SEMA_ENOMEM : 0;
}

int procmem_trim(void)
{
#ifdef HAVE_MALLINFO2
    size_t free_now = mallinfo2().fordblks;

    if (free_now < free_mark)
        free_mark = free_now; /* reused since: what is freed from here on counts again */
    if (free_now - free_mark < PROCMEM_TRIM_MIN)
        return 0;
    malloc_trim(0);
    trims++;
    free_mark = free_now; /* trimmed pages stay counted as free: the mark is the new floor */
    return 1;
#else
    return 0;
#endif
}
