/* SPDX-License-Identifier: MIT */
/* jsonw.h - semad's one output writer: a small write-combining buffer in front of a strbuf,
 * with the JSON grammar on top. Every reply body, reply head, event and metric goes
 * through it; so do the one UTF-8 validator and the one integer formatter.
 *
 * Errors are sticky: the first one (SEMA_ENOMEM when the strbuf's cap is reached,
 * SEMA_EINVAL for invalid UTF-8 or too deep a jansson value) is kept and everything after
 * it is ignored; jsonw_end() returns it. No function allocates beyond the strbuf. */
#ifndef SEMAD_JSONW_H
#define SEMAD_JSONW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "common/strbuf.h"

enum { JSONW_DEPTH_MAX = 64 };

typedef struct jsonw {
    struct strbuf *out;
    size_t n;       /* bytes waiting in buf */
    int rc;         /* the first error, or 0 */
    int after_key;  /* a key was written: the next value needs no comma */
    uint32_t depth; /* open objects and arrays */
    uint64_t empty; /* bit d: the container at depth d has no member yet */
    char buf[1024];
} jsonw_t;

/* Start writing at the end of `out` (borrowed). */
void jsonw_init(jsonw_t *w, struct strbuf *out);
/* Flush and return the first error, or 0. */
int jsonw_end(jsonw_t *w);

/* Bytes as they are (HTTP heads, SSE framing, Prometheus text). Inline: a reply is many
 * short pieces, and a call per piece showed in the profile. */
void jsonw__raw_slow(jsonw_t *w, const char *s, size_t len);
static inline void jsonw_raw(jsonw_t *w, const char *s, size_t len)
{
    if (len <= sizeof w->buf - w->n) {
        memcpy(w->buf + w->n, s, len);
        w->n += len;
    } else {
        jsonw__raw_slow(w, s, len);
    }
}
void jsonw_raw_str(jsonw_t *w, const char *s); /* NUL-terminated */
void jsonw_raw_u64(jsonw_t *w, uint64_t v);
void jsonw_raw_i64(jsonw_t *w, int64_t v);
#define jsonw_lit(w, lit) jsonw_raw((w), lit, sizeof(lit) - 1) /* a string literal */

/* A value written as a template (literal keys and punctuation with jsonw_lit, strings with
 * jsonw_raw_string, numbers with jsonw_raw_i64), for the hot path: jsonw_value_begin()
 * writes the comma a value needs where it stands, and the template closes what it opens. */
void jsonw_value_begin(jsonw_t *w);
void jsonw_raw_string(jsonw_t *w, const char *s, size_t len); /* quoted, escaped, UTF-8 */

/* JSON, compact, byte for byte what jansson's json_dumps(JSON_COMPACT) writes. */
void jsonw_obj(jsonw_t *w);
void jsonw_obj_end(jsonw_t *w);
void jsonw_arr(jsonw_t *w);
void jsonw_arr_end(jsonw_t *w);
/* A member's key: a string literal of printable ASCII that needs no escaping (the quotes
 * and the colon are joined to it at compile time). */
#define jsonw_key(w, lit) jsonw__key((w), "\"" lit "\":", sizeof("\"" lit "\":") - 1)
void jsonw__key(jsonw_t *w, const char *quoted, size_t len);
void jsonw_str(jsonw_t *w, const char *s, size_t len); /* escaped; must be UTF-8 */
void jsonw_cstr(jsonw_t *w, const char *s);            /* NUL-terminated, NULL: null */
void jsonw_int(jsonw_t *w, int64_t v);
void jsonw_bool(jsonw_t *w, int v);
void jsonw_null(jsonw_t *w);
void jsonw_value(jsonw_t *w, const json_t *j); /* any jansson value, nested 64 deep at most */

/* A Prometheus metric's HELP and TYPE lines. */
void jsonw_prom_head(jsonw_t *w, const char *name, const char *help, const char *type);
/* One Prometheus series: its HELP and TYPE lines and its value. */
void jsonw_prom_series(jsonw_t *w, const char *name, const char *help, const char *type,
                       uint64_t v);

/* True when `s[0..len)` is valid UTF-8 (no overlongs, no surrogates, nothing past
 * U+10FFFF). */
int jsonw_utf8_valid(const char *s, size_t len);

/* The decimal digits of `v`, written to end at `end` (room for 20 before it); returns the
 * first digit. */
char *jsonw_u64_digits(uint64_t v, char *end);

#endif /* SEMAD_JSONW_H */
