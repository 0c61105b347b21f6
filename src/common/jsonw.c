/* SPDX-License-Identifier: MIT */
/* jsonw.c - semad's one output writer (jsonw.h): write-combined bytes, compact JSON, the
 * UTF-8 validator and the integer formatter. */
#include "common/jsonw.h"

#include <stdio.h>
#include <string.h>

#include "sema/error.h"

/* ---- bytes ---- */

void jsonw_init(jsonw_t *w, struct strbuf *out)
{
    w->out = out;
    w->n = 0;
    w->rc = 0;
    w->after_key = 0;
    w->depth = 0;
    w->empty = 0;
}

/* Replies are built from many short pieces: one strbuf_append per piece was a tenth of
 * semad's time per request, so they gather in w->buf first. */
static void flush(jsonw_t *w)
{
    if (w->n > 0 && w->rc == 0)
        w->rc = strbuf_append(w->out, w->buf, w->n);
    w->n = 0;
}

int jsonw_end(jsonw_t *w)
{
    flush(w);
    return w->rc;
}

void jsonw__raw_slow(jsonw_t *w, const char *s, size_t len)
{
    flush(w);
    if (len > sizeof w->buf) {
        if (w->rc == 0)
            w->rc = strbuf_append(w->out, s, len);
        return;
    }
    memcpy(w->buf, s, len);
    w->n = len;
}

void jsonw_raw_str(jsonw_t *w, const char *s)
{
    jsonw_raw(w, s, strlen(s));
}

char *jsonw_u64_digits(uint64_t v, char *end)
{
    /* Two digits per division: timestamps have thirteen. */
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "6263646566676869707172737475767778798081828384858687888990919293"
                                "949596979899";
    char *p = end;

    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = pairs[d + 1];
        *--p = pairs[d];
    }
    if (v >= 10) {
        *--p = pairs[v * 2 + 1];
        *--p = pairs[v * 2];
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

void jsonw_raw_u64(jsonw_t *w, uint64_t v)
{
    char num[24];
    char *p = jsonw_u64_digits(v, num + sizeof num);

    jsonw_raw(w, p, (size_t)(num + sizeof num - p));
}

void jsonw_raw_i64(jsonw_t *w, int64_t v)
{
    char num[24];
    char *p = jsonw_u64_digits(v < 0 ? 0 - (uint64_t)v : (uint64_t)v, num + sizeof num);

    if (v < 0)
        *--p = '-';
    jsonw_raw(w, p, (size_t)(num + sizeof num - p));
}

/* ---- JSON structure ---- */

/* Before a value or a key: the comma that separates it from the one before. */
static inline void sep(jsonw_t *w)
{
    uint64_t bit;

    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->depth == 0)
        return;
    bit = (uint64_t)1 << (w->depth - 1);
    if (w->empty & bit)
        w->empty &= ~bit;
    else
        jsonw_raw(w, ",", 1);
}

static void open_container(jsonw_t *w, char c)
{
    sep(w);
    if (w->depth >= JSONW_DEPTH_MAX) {
        w->rc = w->rc ? w->rc : SEMA_EINVAL;
        return;
    }
    jsonw_raw(w, &c, 1);
    w->empty |= (uint64_t)1 << w->depth;
    w->depth++;
}

static void close_container(jsonw_t *w, char c)
{
    if (w->depth > 0)
        w->depth--;
    jsonw_raw(w, &c, 1);
}

void jsonw_obj(jsonw_t *w)
{
    open_container(w, '{');
}

void jsonw_obj_end(jsonw_t *w)
{
    close_container(w, '}');
}

void jsonw_arr(jsonw_t *w)
{
    open_container(w, '[');
}

void jsonw_arr_end(jsonw_t *w)
{
    close_container(w, ']');
}

void jsonw__key(jsonw_t *w, const char *quoted, size_t len)
{
    sep(w);
    jsonw_raw(w, quoted, len);
    w->after_key = 1;
}

/* ---- JSON values ---- */

/* The escape of a byte below 0x20, '"' or '\' (as jansson writes it) into esc; its
 * length. */
static size_t escape(unsigned char c, char esc[6])
{
    static const char hex[] = "0123456789ABCDEF";
    static const char short_form[] = {['"'] = '"',  ['\\'] = '\\', ['\b'] = 'b', ['\f'] = 'f',
                                      ['\n'] = 'n', ['\r'] = 'r',  ['\t'] = 't'};

    esc[0] = '\\';
    if (c < sizeof short_form && short_form[c] != 0) {
        esc[1] = short_form[c];
        return 2;
    }
    memcpy(esc + 1, "u00", 3);
    esc[4] = hex[c >> 4];
    esc[5] = hex[c & 15];
    return 6;
}

/* The length of the valid UTF-8 sequence at s (a lead byte >= 0x80), or 0. */
static size_t utf8_seq(const unsigned char *u, size_t avail)
{
    unsigned c = u[0], min, cp;
    size_t n;

    if ((c & 0xE0) == 0xC0)
        n = 1, min = 0x80, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
        n = 2, min = 0x800, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
        n = 3, min = 0x10000, cp = c & 0x07;
    else
        return 0;
    if (n >= avail)
        return 0;
    for (size_t k = 1; k <= n; k++) {
        if ((u[k] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (u[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n + 1;
}

/* A quoted, escaped string in one pass that also checks the UTF-8; -1 if it is not. */
static int put_string(jsonw_t *w, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0, i = 0;

    jsonw_raw(w, "\"", 1);
    while (i < len) {
        unsigned char c = u[i];
        char esc[6];
        size_t n;
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        if (c >= 0x80) {
            if ((n = utf8_seq(u + i, len - i)) == 0)
                return -1;
            i += n;
            continue;
        }
        jsonw_raw(w, s + run, i - run);
        jsonw_raw(w, esc, escape(c, esc));
        run = ++i;
    }
    jsonw_raw(w, s + run, len - run);
    jsonw_raw(w, "\"", 1);
    return 0;
}

void jsonw_raw_string(jsonw_t *w, const char *s, size_t len)
{
    if (put_string(w, s, len) != 0 && w->rc == 0)
        w->rc = SEMA_EINVAL;
}

void jsonw_str(jsonw_t *w, const char *s, size_t len)
{
    sep(w);
    jsonw_raw_string(w, s, len);
}

void jsonw_value_begin(jsonw_t *w)
{
    sep(w);
}

void jsonw_cstr(jsonw_t *w, const char *s)
{
    if (s == NULL)
        jsonw_null(w);
    else
        jsonw_str(w, s, strlen(s));
}

void jsonw_int(jsonw_t *w, int64_t v)
{
    sep(w);
    jsonw_raw_i64(w, v);
}

void jsonw_bool(jsonw_t *w, int v)
{
    sep(w);
    if (v)
        jsonw_raw(w, "true", 4);
    else
        jsonw_raw(w, "false", 5);
}

void jsonw_null(jsonw_t *w)
{
    sep(w);
    jsonw_raw(w, "null", 4);
}

/* A real as jansson writes it: %.17g, ".0" when it would read as an integer, and the
 * exponent without '+' or leading zeros (1e300, 1e-05 -> 1e-5). */
static void put_real(jsonw_t *w, double value)
{
    char buf[40];
    int n = snprintf(buf, sizeof buf - 2, "%.17g", value);

    if (n < 0 || (size_t)n >= sizeof buf - 2) {
        w->rc = w->rc ? w->rc : SEMA_EINVAL;
        return;
    }
    if (strpbrk(buf, ".eE") == NULL && strpbrk(buf, "ni") == NULL) {
        memcpy(buf + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(buf, 'e');
    if (e != NULL) {
        char *d = e + 1, *src = e + 1;
        if (*src == '+')
            src++;
        else if (*src == '-')
            *d++ = *src++;
        while (*src == '0' && src[1] != '\0')
            src++;
        memmove(d, src, strlen(src) + 1);
        n = (int)strlen(buf);
    }
    jsonw_raw(w, buf, (size_t)n);
}

static void put_container(jsonw_t *w, const json_t *j)
{
    const char *key;
    json_t *v;

    if (json_is_array(j)) {
        jsonw_arr(w);
        for (size_t i = 0; i < json_array_size(j); i++)
            jsonw_value(w, json_array_get(j, i));
        jsonw_arr_end(w);
        return;
    }
    jsonw_obj(w);
    json_object_foreach((json_t *)j, key, v)
    {
        sep(w);
        (void)put_string(w, key, strlen(key)); /* jansson holds only valid UTF-8 */
        jsonw_raw(w, ":", 1);
        w->after_key = 1;
        jsonw_value(w, v);
    }
    jsonw_obj_end(w);
}

void jsonw_value(jsonw_t *w, const json_t *j)
{
    if (j == NULL) {
        w->rc = w->rc ? w->rc : SEMA_EINVAL;
        return;
    }
    switch (json_typeof(j)) {
    case JSON_OBJECT:
    case JSON_ARRAY:
        put_container(w, j);
        return;
    case JSON_STRING:
        jsonw_str(w, json_string_value(j), json_string_length(j));
        return;
    case JSON_INTEGER:
        jsonw_int(w, (int64_t)json_integer_value(j));
        return;
    case JSON_REAL:
        sep(w);
        put_real(w, json_real_value(j));
        return;
    case JSON_TRUE:
    case JSON_FALSE:
        jsonw_bool(w, json_is_true(j));
        return;
    case JSON_NULL:
        jsonw_null(w);
        return;
    }
}

/* ---- Prometheus ---- */

void jsonw_prom_head(jsonw_t *w, const char *name, const char *help, const char *type)
{
    jsonw_raw_str(w, "# HELP ");
    jsonw_raw_str(w, name);
    jsonw_raw(w, " ", 1);
    jsonw_raw_str(w, help);
    jsonw_raw_str(w, "\n# TYPE ");
    jsonw_raw_str(w, name);
    jsonw_raw(w, " ", 1);
    jsonw_raw_str(w, type);
    jsonw_raw(w, "\n", 1);
}

void jsonw_prom_series(jsonw_t *w, const char *name, const char *help, const char *type, uint64_t v)
{
    jsonw_prom_head(w, name, help, type);
    jsonw_raw_str(w, name);
    jsonw_raw(w, " ", 1);
    jsonw_raw_u64(w, v);
    jsonw_raw(w, "\n", 1);
}

/* ---- UTF-8 ---- */

int jsonw_utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, n;

    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        if ((n = utf8_seq(u + i, len - i)) == 0)
            return 0;
        i += n;
    }
    return 1;
}
