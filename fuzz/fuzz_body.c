/* SPDX-License-Identifier: MIT */
/* fuzz_body.c - request bodies: body_parse (the routes' entry point) on arbitrary bytes must
 * give the same verdict, message and fields (arrays and objects included) as jansson alone
 * (body_parse_json). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "http/body.h"

/* Keys the routes read, looked up in both forms. */
static const char *const route_keys[] = {"weight",     "timeout_ms", "ttl_ms", "owner",
                                         "mode",       "capacity",   "name",   "value",
                                         "semaphores", "tenant"};

/* The same type and value; an array or an object (jansson's alone inside a flat body) equal
 * to the one jansson found in the whole body. */
static int same_value(bval_t x, bval_t y)
{
    if (x.type != y.type)
        return 0;
    if (x.type == BV_INT)
        return x.i == y.i;
    if (x.type == BV_STR)
        return x.len == y.len && memcmp(x.s, y.s, x.len) == 0;
    if (json_is_array(y.json) || json_is_object(y.json))
        return json_equal(x.json, y.json);
    return 1;
}

/* Every field the flat parser found is in jansson's object with the same value, and the two
 * hold as many fields. */
static void check_flat_fields(body_t *flat, body_t *ref)
{
    FUZZ_CHECK(flat->n <= BODY_FIELDS_MAX);
    FUZZ_CHECK(json_object_size(ref->json) == flat->n);
    for (size_t i = 0; i < flat->n; i++) {
        char key[BODY_ERR_MAX];
        size_t klen = flat->f[i].key_len;
        if (klen >= sizeof key)
            continue; /* a long key: compared by size above */
        memcpy(key, flat->f[i].key, klen);
        key[klen] = '\0';
        FUZZ_CHECK(strlen(key) == klen); /* flat keys never hold a NUL */
        FUZZ_CHECK(same_value(body_get(flat, key), body_get(ref, key)));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy: a read past the end is an ASan report, not luck. */
    char *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);

    body_t x, y;
    char ex[BODY_ERR_MAX] = "", ey[BODY_ERR_MAX] = "";
    int rx = body_parse(&x, buf, size, ex, sizeof ex);
    int ry = body_parse_json(&y, buf, size, ey, sizeof ey);
    FUZZ_CHECK(rx == 0 || rx == -1);
    FUZZ_CHECK(rx == ry);
    FUZZ_CHECK(strcmp(ex, ey) == 0);
    if (rx == 0) {
        FUZZ_CHECK(y.json != NULL && json_is_object(y.json));
        if (x.json == NULL)
            check_flat_fields(&x, &y);
        for (size_t i = 0; i < sizeof route_keys / sizeof route_keys[0]; i++)
            FUZZ_CHECK(same_value(body_get(&x, route_keys[i]), body_get(&y, route_keys[i])));
        /* the same first member a route that read these did not ask for */
        static const char *const acquire_fields[] = {"weight", "timeout_ms", "ttl_ms", "owner"};
        x.used = y.used = 0;
        x.n_asked = y.n_asked = 0;
        for (size_t i = 0; i < sizeof acquire_fields / sizeof acquire_fields[0]; i++) {
            (void)body_get(&x, acquire_fields[i]);
            (void)body_get(&y, acquire_fields[i]);
        }
        const char *kx = NULL, *ky = NULL;
        size_t lx = 0, ly = 0;
        int ux = body_unasked(&x, &kx, &lx);
        FUZZ_CHECK(ux == body_unasked(&y, &ky, &ly));
        FUZZ_CHECK(!ux || (lx == ly && memcmp(kx, ky, lx) == 0));
        body_free(&x);
        body_free(&y);
        /* The flat parser alone claims only what body_parse took without jansson. */
        body_t z;
        if (body_parse_flat(&z, buf, size)) {
            FUZZ_CHECK(z.json == NULL && z.n <= BODY_FIELDS_MAX);
            body_free(&z);
        }
    } else {
        FUZZ_CHECK(ex[0] != '\0');
        FUZZ_CHECK(x.json == NULL && y.json == NULL);
    }
    free(buf);
    return 0;
}
