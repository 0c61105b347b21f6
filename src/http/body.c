/* SPDX-License-Identifier: MIT */
/* body.c - request bodies: a strict flat-object parser for the hot path, jansson otherwise.
 *
 * The flat parser only ever claims bodies it fully understands, and for those jansson gives
 * the same object: one object of at most BODY_FIELDS_MAX distinct keys, keys and string
 * values of printable ASCII without escapes, integers of at most 15 digits (below 2^53,
 * without leading zeros), true, false, null, JSON whitespace, and arrays and objects that
 * jansson parses where they stand (json_loadb of the rest of the body with
 * JSON_DISABLE_EOF_CHECK stops after the value and says where). So jansson reads only the
 * bytes of the arrays and objects, each once, and builds no object for the body itself.
 * Everything else (escapes, UTF-8, reals, big numbers, duplicates, any error) goes to
 * jansson for the whole body, which then decides, so errors and their messages are
 * jansson's. */
#include "http/body.h"

#include <stdio.h>
#include <string.h>

enum { FLAT_DIGITS_MAX = 15 }; /* 10^15 - 1 < 2^53: no range check needed */

typedef struct {
    const char *p, *end;
} cur_t;

static void skip_ws(cur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* A string without escapes or non-printable bytes; the cursor is on the opening quote. */
static int flat_str(cur_t *c, const char **s, size_t *len)
{
    const char *q = ++c->p;
    while (q < c->end && *q != '"') {
        unsigned char ch = (unsigned char)*q;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\')
            return 0;
        q++;
    }
    if (q == c->end)
        return 0;
    *s = c->p;
    *len = (size_t)(q - c->p);
    c->p = q + 1;
    return 1;
}

static int flat_word(cur_t *c, const char *w, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static int flat_int(cur_t *c, json_int_t *out)
{
    int neg = 0;
    size_t digits = 0;
    json_int_t v = 0;
    if (*c->p == '-') {
        neg = 1;
        c->p++;
    }
    if (c->p < c->end && *c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
        return 0; /* a leading zero: jansson's error */
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (++digits > FLAT_DIGITS_MAX)
            return 0;
        v = v * 10 + (*c->p++ - '0');
    }
    if (digits == 0)
        return 0;
    *out = neg ? -v : v;
    return 1;
}

/* An array or an object, parsed by jansson alone; the cursor is on its '[' or '{'. A NUL byte
 * could be skipped by jansson (after a number) rather than refused: such a body is left to
 * body_parse_json, which refuses it. */
static int flat_nested(cur_t *c, bval_t *v)
{
    json_error_t e;
    size_t left = (size_t)(c->end - c->p);
    if (left > BODY_NESTED_MAX || memchr(c->p, '\0', left) != NULL)
        return 0;
    v->type = BV_OTHER;
    v->json = json_loadb(c->p, left, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &e);
    if (v->json == NULL)
        return 0;
    if (e.position < 2 || (size_t)e.position > left) { /* never: "[]" is the shortest */
        json_decref(v->json);
        v->json = NULL;
        return 0;
    }
    c->p += (size_t)e.position; /* the first byte after the value */
    return 1;
}

static int flat_value(cur_t *c, bval_t *v)
{
    memset(v, 0, sizeof *v);
    if (c->p == c->end)
        return 0;
    switch (*c->p) {
    case '[':
    case '{':
        return flat_nested(c, v);
    case '"':
        v->type = BV_STR;
        return flat_str(c, &v->s, &v->len);
    case 't':
        v->type = BV_OTHER;
        return flat_word(c, "true", 4);
    case 'f':
        v->type = BV_OTHER;
        return flat_word(c, "false", 5);
    case 'n':
        v->type = BV_NULL;
        return flat_word(c, "null", 4);
    default:
        v->type = BV_INT;
        return (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) && flat_int(c, &v->i);
    }
}

static int flat_dup(const body_t *b, const char *key, size_t len)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->f[i].key_len == len && memcmp(b->f[i].key, key, len) == 0)
            return 1;
    return 0;
}

/* One "key":value member into b->f[b->n]. */
static int flat_member(cur_t *c, body_t *b)
{
    const char *key;
    size_t klen;
    if (b->n == BODY_FIELDS_MAX || c->p == c->end || *c->p != '"' || !flat_str(c, &key, &klen) ||
        flat_dup(b, key, klen))
        return 0;
    skip_ws(c);
    if (c->p == c->end || *c->p != ':')
        return 0;
    c->p++;
    skip_ws(c);
    if (!flat_value(c, &b->f[b->n].v))
        return 0;
    if (b->f[b->n].v.json != NULL)
        b->nested |= 1u << b->n;
    b->f[b->n].key = key;
    b->f[b->n].key_len = klen;
    b->n++;
    skip_ws(c);
    return 1;
}

void body_init(body_t *b)
{
    b->json = NULL;
    b->n = 0;
    b->used = 0;
    b->nested = 0;
    b->n_asked = 0;
}

/* The members between the braces; the cursor is after the '{'. */
static int flat_members(cur_t *c, body_t *b)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        if (!flat_member(c, b) || c->p == c->end)
            return 0;
        if (*c->p == '}') {
            c->p++;
            return 1;
        }
        if (*c->p++ != ',')
            return 0;
        skip_ws(c);
    }
}

int body_parse_flat(body_t *b, const char *data, size_t len)
{
    cur_t c = {data, data + len};
    body_init(b);
    skip_ws(&c);
    if (c.p < c.end && *c.p++ == '{' && flat_members(&c, b)) {
        skip_ws(&c);
        if (c.p == c.end)
            return 1;
    }
    body_free(b); /* the arrays and objects jansson parsed before the body failed */
    return 0;
}

int body_parse_json(body_t *b, const char *data, size_t len, char *err, size_t errlen)
{
    json_error_t e;
    body_init(b);
    if (memchr(data, '\0', len) != NULL) { /* jansson would end a number there */
        snprintf(err, errlen, "malformed JSON body: %s", BODY_NUL_ERROR);
        return -1;
    }
    b->json = json_loadb(data, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &e);
    if (b->json == NULL) {
        snprintf(err, errlen, "malformed JSON body: %s", e.text);
        return -1;
    }
    if (!json_is_object(b->json)) {
        json_decref(b->json);
        b->json = NULL;
        snprintf(err, errlen, "the body must be a JSON object");
        return -1;
    }
    return 0;
}

int body_parse(body_t *b, const char *data, size_t len, char *err, size_t errlen)
{
    if (body_parse_flat(b, data, len))
        return 0;
    return body_parse_json(b, data, len, err, errlen);
}

static bval_t from_json(json_t *j)
{
    bval_t v = {.type = BV_OTHER, .json = j};
    if (j == NULL) {
        v.type = BV_ABSENT;
    } else if (json_is_null(j)) {
        v.type = BV_NULL;
    } else if (json_is_integer(j)) {
        v.type = BV_INT;
        v.i = json_integer_value(j);
    } else if (json_is_string(j)) {
        v.type = BV_STR;
        v.s = json_string_value(j);
        v.len = json_string_length(j);
    }
    return v;
}

bval_t body_get(body_t *b, const char *key)
{
    if (b->n_asked < BODY_ASKED_MAX)
        b->asked[b->n_asked++] = key;
    if (b->json != NULL)
        return from_json(json_object_get(b->json, key));
    size_t len = strlen(key);
    for (size_t i = 0; i < b->n; i++)
        if (b->f[i].key_len == len && memcmp(b->f[i].key, key, len) == 0) {
            b->used |= 1u << i;
            return b->f[i].v;
        }
    return (bval_t){.type = BV_ABSENT};
}

int body_unasked(const body_t *b, const char **key, size_t *len)
{
    if (b->json != NULL) {
        const char *k;
        json_t *v;
        json_object_foreach(b->json, k, v)
        {
            size_t i = 0;
            while (i < b->n_asked && strcmp(b->asked[i], k) != 0)
                i++;
            if (i == b->n_asked) {
                *key = k;
                *len = strlen(k); /* no NUL inside: jansson refuses "\u0000" in a key */
                return 1;
            }
        }
        return 0;
    }
    for (size_t i = 0; i < b->n; i++)
        if (!(b->used & 1u << i)) {
            *key = b->f[i].key;
            *len = b->f[i].key_len;
            return 1;
        }
    return 0;
}

void body_free(body_t *b)
{
    json_decref(b->json);
    for (size_t i = 0; b->nested != 0 && i < b->n; i++)
        if (b->nested & 1u << i)
            json_decref(b->f[i].v.json);
    body_init(b);
}
