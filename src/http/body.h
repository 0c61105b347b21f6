/* SPDX-License-Identifier: MIT */
/* body.h - request bodies (JSON objects) for the routes: a strict parser for the flat objects
 * clients send on the hot path (acquire, renew, PUT), which hands each array or object member
 * (POST /v1/acquire's "semaphores") to jansson alone, falling back to jansson for the whole
 * body for anything else, with the same outcome either way. */
#ifndef SEMAD_BODY_H
#define SEMAD_BODY_H

#include <stddef.h>

#include <jansson.h>

/* BODY_NESTED_MAX: a value this short nests at most 2047 deep, so jansson's depth limit (2048)
 * cannot tell the value parsed alone from the value inside the whole body. */
enum { BODY_FIELDS_MAX = 8, BODY_ASKED_MAX = 8, BODY_ERR_MAX = 256, BODY_NESTED_MAX = 4095 };

/* What a body with a NUL byte is told (no JSON text holds one; jansson would take
 * {"weight":1<NUL>} as {"weight":1}). */
#define BODY_NUL_ERROR "a NUL byte is not allowed in JSON"

/* A field's value as the routes see it. BV_OTHER is a real, a boolean, an array or an
 * object (the routes take integers, strings and null, and arrays as jansson's). */
typedef enum { BV_ABSENT, BV_NULL, BV_INT, BV_STR, BV_OTHER } bv_type_t;

typedef struct {
    bv_type_t type;
    json_int_t i;  /* BV_INT */
    const char *s; /* BV_STR: the bytes (not NUL-terminated for flat bodies), borrowed */
    size_t len;    /* BV_STR */
    json_t *json;  /* the value as jansson's, borrowed from the body (NULL for a flat body's
                      scalars: only its arrays and objects are jansson's) */
} bval_t;

typedef struct {
    json_t *json;    /* the jansson form, or NULL when the flat parser took the body */
    size_t n;        /* flat fields */
    unsigned used;   /* flat fields body_get found: bit i for f[i] */
    unsigned nested; /* flat fields whose value jansson parsed (an array or an object, owned):
                        bit i for f[i] */
    size_t n_asked;  /* keys body_get was asked for ... */
    const char *asked[BODY_ASKED_MAX]; /* ... the first BODY_ASKED_MAX of them (borrowed) */
    struct {
        const char *key;
        size_t key_len;
        bval_t v;
    } f[BODY_FIELDS_MAX];
} body_t;

/* An empty body (no member), as a request without one reads; nothing to free. */
void body_init(body_t *b);

/* Parse `len` bytes (borrowed; the body keeps pointers into them) as one JSON object. Returns
 * 0, or -1 with the 400 message in err: "malformed JSON body: <jansson's text>" (or
 * BODY_NUL_ERROR) or "the body must be a JSON object". Free with body_free() after 0. Not
 * thread-safe per body_t. */
int body_parse(body_t *b, const char *data, size_t len, char *err, size_t errlen);

/* The same, always through jansson (the reference the flat parser is tested against). */
int body_parse_json(body_t *b, const char *data, size_t len, char *err, size_t errlen);

/* The strict flat parser alone: 1 when it fully understood the body (then *b holds it and
 * body_parse would give the same; free it with body_free()), 0 when the body needs jansson
 * (then *b holds nothing). Each array or object member is parsed by jansson alone (at most
 * BODY_NESTED_MAX bytes of the body from its start on, and no NUL byte). */
int body_parse_flat(body_t *b, const char *data, size_t len);

/* The value of `key` (BV_ABSENT when missing). The body remembers the keys it was asked for:
 * the fields a route reads are the fields it takes (body_unasked). */
bval_t body_get(body_t *b, const char *key);

/* Nonzero when body_get has found every member of a flat body: a key not asked for yet is
 * absent (and no member is left for body_unasked). */
static inline int body_all_found(const body_t *b)
{
    return b->json == NULL && b->used == (1u << b->n) - 1u;
}

/* The first member body_get was not asked for, its key's bytes in *key and *len (borrowed,
 * not NUL-terminated), or 0 when every member was asked for. Flat bodies are searched in
 * their order, jansson's in its (insertion) order. */
int body_unasked(const body_t *b, const char **key, size_t *len);

/* Release what body_parse took; the body_t can be parsed into again. */
void body_free(body_t *b);

#endif /* SEMAD_BODY_H */
