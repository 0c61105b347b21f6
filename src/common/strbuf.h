/* SPDX-License-Identifier: MIT */
/* strbuf.h - a growable byte string with a hard cap, for replies, metrics and logs. */
#ifndef SEMAD_STRBUF_H
#define SEMAD_STRBUF_H

#include <stddef.h>

struct strbuf {
    char *data;   /* NUL-terminated when len > 0 or after strbuf_init */
    size_t len;   /* bytes used, without the NUL */
    size_t cap;   /* bytes allocated */
    size_t limit; /* never grow past this many bytes (0 = 64 MiB) */
};

/* Start empty; allocates nothing until the first append. */
void strbuf_init(struct strbuf *sb, size_t limit);
/* Free the bytes; the strbuf can be reused after strbuf_init. NULL is fine. */
void strbuf_free(struct strbuf *sb);
/* Forget the contents, keep the allocation. */
void strbuf_reset(struct strbuf *sb);
/* Append; return 0 or SEMA_ENOMEM (allocation failed or `limit` would be passed). */
int strbuf_append(struct strbuf *sb, const void *data, size_t len);
/* Hand the bytes to the caller (free with free()); the strbuf is left empty. */
char *strbuf_steal(struct strbuf *sb, size_t *len);

#endif /* SEMAD_STRBUF_H */
