/* SPDX-License-Identifier: MIT */
/* test_semad_body.c - semad's flat request-body parser against jansson: over many generated
 * and mutated bodies both give the same outcome, the same 400 message and the same fields
 * (arrays and objects, which jansson parses alone inside a flat body, equal to jansson's). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "http/body.h"
#include "test.h"

static const char *const keys[] = {"weight", "timeout_ms", "ttl_ms",        "owner",
                                   "mode",   "capacity",   "semaphores",    "x",
                                   "",       "a b",        "w\xc3\xa9ight", "we\\u0069ght"};
/* Keys looked up after a parse (the escaped one is "weight" to jansson). */
static const char *const lookups[] = {"weight", "timeout_ms", "ttl_ms",        "owner",
                                      "mode",   "capacity",   "semaphores",    "x",
                                      "",       "a b",        "w\xc3\xa9ight", "y"};
/* Field lists as the routes read them. */
static const char *const acquire_fields[] = {"weight", "timeout_ms", "ttl_ms", "owner", NULL};
static const char *const capacity_fields[] = {"capacity", NULL};
static const char *const no_fields[] = {NULL};
static const char *const *const known_sets[] = {acquire_fields, capacity_fields, no_fields};
static const char *const values[] = {"1",
                                     "0",
                                     "-0",
                                     "-1",
                                     "7",
                                     "01",
                                     "-01",
                                     "1.0",
                                     "1e3",
                                     "1E3",
                                     "2.",
                                     "60000",
                                     "123456789012345",
                                     "-123456789012345",
                                     "1234567890123456",
                                     "9007199254740992",
                                     "9007199254740993",
                                     "99999999999999999999",
                                     "-9223372036854775809",
                                     "9223372036854775807",
                                     "true",
                                     "false",
                                     "null",
                                     "tru",
                                     "nul",
                                     "truex",
                                     "\"shared\"",
                                     "\"exclusive\"",
                                     "\"\"",
                                     "\"w-1\"",
                                     "\"a\\\"b\"",
                                     "\"\\u0000\"",
                                     "\"shared\\u0000x\"",
                                     "\"\xc3\xa9\"",
                                     "\"\xff\"",
                                     "[]",
                                     "{}",
                                     "[1]",
                                     "{\"a\":1}",
                                     "[{\"name\":\"gpu\",\"weight\":2},{\"name\":\"db\"}]",
                                     "[{\"name\":\"a\",\"name\":\"b\"}]",
                                     "[{\"name\":\"\\u00e9\"} ,{}]",
                                     "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}",
                                     "[1,]",
                                     "[1,2",
                                     "[1]]",
                                     "{\"a\"}",
                                     "-",
                                     "\"unterminated",
                                     "\"tab\there\"",
                                     "\"del\x7f\"",
                                     "+1",
                                     "0x10"};
static const char *const spaces[] = {"", "", "", " ", "\t", "\n", "\r\n", "  ", "\f"};
static const char mut_chars[] = "{}[]\":,-0123456789 \tetrunlfa\\\x7f\xc3\x01";

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

#define PICK(a) (a)[rnd(sizeof(a) / sizeof((a)[0]))]

typedef struct {
    char d[1024];
    size_t n;
} buf_t;

static void put(buf_t *b, const char *s)
{
    size_t l = strlen(s);
    if (b->n + l < sizeof b->d) {
        memcpy(b->d + b->n, s, l);
        b->n += l;
    }
}

static void gen_object(buf_t *b)
{
    unsigned members = rnd(11);
    b->n = 0;
    put(b, PICK(spaces));
    put(b, "{");
    for (unsigned i = 0; i < members; i++) {
        put(b, PICK(spaces));
        put(b, "\"");
        put(b, rnd(3) == 0 ? PICK(keys) : keys[rnd(6)]);
        put(b, "\"");
        put(b, PICK(spaces));
        put(b, ":");
        put(b, PICK(spaces));
        put(b, PICK(values));
        put(b, PICK(spaces));
        if (i + 1 < members)
            put(b, ",");
    }
    put(b, "}");
    put(b, PICK(spaces));
}

static void mutate(buf_t *b)
{
    for (unsigned k = 1 + rnd(3); k > 0; k--) {
        size_t at = b->n ? rnd((uint32_t)b->n + 1) : 0;
        switch (rnd(5)) {
        case 0: /* delete */
            if (at < b->n) {
                memmove(b->d + at, b->d + at + 1, b->n - at - 1);
                b->n--;
            }
            break;
        case 1: /* insert */
            if (b->n + 1 < sizeof b->d) {
                memmove(b->d + at + 1, b->d + at, b->n - at);
                b->d[at] = mut_chars[rnd(sizeof mut_chars - 1)];
                b->n++;
            }
            break;
        case 2: /* replace */
            if (at < b->n)
                b->d[at] = mut_chars[rnd(sizeof mut_chars - 1)];
            break;
        case 3: /* truncate */
            b->n = at;
            break;
        default: /* a NUL byte */
            if (at < b->n)
                b->d[at] = '\0';
        }
    }
}

/* The same value: type, integer, string, and jansson's value where jansson's body has an
 * array or an object (a flat body holds those as jansson parsed them alone). */
static int same_value(bval_t x, bval_t y)
{
    if (x.type != y.type || (x.type == BV_INT && x.i != y.i))
        return 0;
    if (x.type == BV_STR && (x.len != y.len || memcmp(x.s, y.s, x.len) != 0))
        return 0;
    if (json_is_array(y.json) || json_is_object(y.json))
        return json_equal(x.json, y.json);
    return 1;
}

/* Both parsers on the same bytes; returns 1 when the flat parser took the body. */
static int compare(const buf_t *b)
{
    body_t x, y;
    char ex[BODY_ERR_MAX] = "", ey[BODY_ERR_MAX] = "";
    int rx = body_parse(&x, b->d, b->n, ex, sizeof ex);
    int ry = body_parse_json(&y, b->d, b->n, ey, sizeof ey);
    int flat = rx == 0 && x.json == NULL;

    if (rx != ry || strcmp(ex, ey) != 0)
        TEST_FAIL_("body [%.*s]: flat %d \"%s\", jansson %d \"%s\"", (int)b->n, b->d, rx, ex, ry,
                   ey);
    if (rx == 0) {
        for (size_t i = 0; i < sizeof lookups / sizeof lookups[0]; i++) {
            bval_t vx = body_get(&x, lookups[i]), vy = body_get(&y, lookups[i]);
            if (!same_value(vx, vy))
                TEST_FAIL_("body [%.*s] field %s: type %d/%d", (int)b->n, b->d, lookups[i],
                           (int)vx.type, (int)vy.type);
        }
        /* The same first member nobody asked for, as the routes refuse it (flat bodies
         * keep the text's order, jansson its insertion order). */
        for (size_t k = 0; k < sizeof known_sets / sizeof known_sets[0]; k++) {
            const char *kx = NULL, *ky = NULL;
            size_t lx = 0, ly = 0;
            x.used = 0;
            x.n_asked = 0;
            y.used = 0;
            y.n_asked = 0;
            for (const char *const *f = known_sets[k]; *f != NULL; f++) {
                (void)body_get(&x, *f);
                (void)body_get(&y, *f);
            }
            int ux = body_unasked(&x, &kx, &lx), uy = body_unasked(&y, &ky, &ly);
            if (ux != uy || (ux && (lx != ly || memcmp(kx, ky, lx) != 0)))
                TEST_FAIL_("body [%.*s] known set %zu: unasked %d [%.*s] / %d [%.*s]", (int)b->n,
                           b->d, k, ux, (int)lx, ux ? kx : "", uy, (int)ly, uy ? ky : "");
        }
        body_free(&x);
        body_free(&y);
    }
    return flat;
}

TEST(flat_parser_agrees_with_jansson_on_generated_and_mutated_bodies)
{
    int n = test_scale(40000), flat = 0, mutated_flat = 0;
    buf_t b;

    for (int i = 0; i < n; i++) {
        gen_object(&b);
        flat += compare(&b);
        mutate(&b);
        mutated_flat += compare(&b);
    }
    /* The shortcut is really taken (else this test would compare jansson with itself). */
    ASSERT(flat > n / 20);
    ASSERT(mutated_flat > 0);
}

TEST(flat_parser_takes_the_hot_bodies)
{
    static const char *const hot[] = {
        "{\"weight\":1,\"ttl_ms\":60000}",
        "{\"capacity\":100}",
        "{\"ttl_ms\":5000}",
        "{\"mode\":\"shared\",\"timeout_ms\":0,\"owner\":\"w-1\"}",
        " { } ",
        "{\"semaphores\":[{\"name\":\"gpu\",\"weight\":2},{\"name\":\"db\"}],\"ttl_ms\":5000}",
    };
    for (size_t i = 0; i < sizeof hot / sizeof hot[0]; i++) {
        body_t b;
        ASSERT_EQ(body_parse_flat(&b, hot[i], strlen(hot[i])), 1);
        body_free(&b);
    }
}

/* An array or an object member is jansson's, parsed where it stands and nowhere else: the
 * body itself stays flat, and the value equals the one jansson finds in the whole body. */
TEST(nested_members_are_parsed_by_jansson_alone)
{
    static const char *const bodies[] = {
        "{\"semaphores\":[{\"name\":\"gpu\",\"weight\":2},{\"name\":\"db\"}],\"ttl_ms\":5000}",
        " {\"ttl_ms\":1, \"a\" : {\"b\":[1,{\"c\":null}]} , \"semaphores\":[]} ",
        "{\"semaphores\":[{\"name\":\"\\u00e9t\\u00e9\"}]}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        body_t x, y;
        char err[BODY_ERR_MAX];
        ASSERT_EQ(body_parse(&x, bodies[i], strlen(bodies[i]), err, sizeof err), 0);
        ASSERT_EQ(body_parse_json(&y, bodies[i], strlen(bodies[i]), err, sizeof err), 0);
        ASSERT(x.json == NULL);
        ASSERT(x.nested != 0);
        bval_t vx = body_get(&x, "semaphores"), vy = body_get(&y, "semaphores");
        ASSERT_EQ(vx.type, BV_OTHER);
        ASSERT(json_is_array(vx.json));
        ASSERT(json_equal(vx.json, vy.json));
        ASSERT(same_value(body_get(&x, "a"), body_get(&y, "a")));
        ASSERT(same_value(body_get(&x, "ttl_ms"), body_get(&y, "ttl_ms")));
        body_free(&x);
        body_free(&y);
    }
}

/* jansson stops nesting at 2048 levels: a value 2047 deep inside the body (2048 with the
 * body) parses, one level more does not, whether the flat parser is in front or not. */
TEST(nesting_depth_is_jansson_s_for_the_whole_body)
{
    static char text[2 + 6 + 2 * 2049 + 2];
    for (int depth = 2046; depth <= 2049; depth++) {
        size_t n = 0;
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"a\":");
        memset(text + n, '[', (size_t)depth);
        n += (size_t)depth;
        memset(text + n, ']', (size_t)depth);
        n += (size_t)depth;
        text[n++] = '}';
        body_t x, y;
        char ex[BODY_ERR_MAX] = "", ey[BODY_ERR_MAX] = "";
        int rx = body_parse(&x, text, n, ex, sizeof ex);
        int ry = body_parse_json(&y, text, n, ey, sizeof ey);
        ASSERT_EQ(rx, ry);
        ASSERT_STREQ(ex, ey);
        ASSERT_EQ(rx, depth < 2048 ? 0 : -1);
        if (rx == 0) {
            body_free(&x);
            body_free(&y);
        }
    }
}

TEST(flat_parser_leaves_the_rest_to_jansson)
{
    static const char *const cold[] = {
        "{\"weight\":1,\"weight\":2}",
        "{\"weight\":9007199254740993}",
        "{\"weight\":1.0}",
        "{\"owner\":\"a\\\"b\"}",
        "{\"a\":[1],\"a\":[1]}",
        "{\"a\":[1],\"b\":1.5}",
        "{\"a\":[{\"b\":1,\"b\":2}]}",
        "{\"a\":[1,]}",
        "{\"a\":[1]]}",
        "[]",
        "{\"weight\":01}",
        "{\"weight\":1,}",
        "{\"weight\":1} x",
    };
    for (size_t i = 0; i < sizeof cold / sizeof cold[0]; i++) {
        body_t b;
        ASSERT_EQ(body_parse_flat(&b, cold[i], strlen(cold[i])), 0);
    }
}

/* No JSON text holds a NUL byte: jansson alone would read {"weight":1<NUL>} as
 * {"weight":1}. Both parsers refuse it, with the same message. */
TEST(nul_byte_is_malformed)
{
    static const char *const bodies[] = {
        "{\"weight\":1\0}",     "{\"weight\":1}\0",      "\0{}",
        "{\"owner\":\"a\0b\"}", "{\"a\":[{\"w\":1\0}]}", "{\"a\":[1]\0}"};
    static const size_t lens[] = {13, 13, 3, 15, 16, 10};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        body_t b;
        char err[BODY_ERR_MAX] = "", err2[BODY_ERR_MAX] = "";
        ASSERT_EQ(body_parse(&b, bodies[i], lens[i], err, sizeof err), -1);
        ASSERT_EQ(body_parse_json(&b, bodies[i], lens[i], err2, sizeof err2), -1);
        ASSERT_STREQ(err, "malformed JSON body: " BODY_NUL_ERROR);
        ASSERT_STREQ(err2, err);
    }
}

/* A member the route did not ask for is found by both parsers, the first in the text's
 * order; an escaped key is compared as it decodes ("we\\u0069ght" is "weight"). */
TEST(unasked_member_is_the_first_the_route_did_not_read)
{
    static const struct {
        const char *body, *unasked;
    } cases[] = {
        {"{\"weight\":1,\"ttl_ms\":5}", NULL},
        {"{}", NULL},
        {"{\"weight\":1,\"ttl\":5,\"color\":\"red\"}", "ttl"},
        {"{\"weight\":1.5,\"ttl\":5}", "ttl"},         /* jansson's path */
        {"{\"we\\u0069ght\":1,\"a\\u0062\":1}", "ab"}, /* escapes: jansson's path */
        {"{\"ttl_ms\":1,\"\":1}", ""},
        {"{\"ttl_msx\":1}", "ttl_msx"},
        {"{\"ttl_m\":1}", "ttl_m"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        body_t b;
        char err[BODY_ERR_MAX];
        const char *key = NULL;
        size_t len = 0;
        ASSERT_EQ(body_parse(&b, cases[i].body, strlen(cases[i].body), err, sizeof err), 0);
        /* before any read, every member is unasked */
        size_t members = b.json != NULL ? json_object_size(b.json) : b.n;
        ASSERT_EQ(body_unasked(&b, &key, &len), members > 0);
        for (const char *const *f = acquire_fields; *f != NULL; f++)
            (void)body_get(&b, *f);
        ASSERT_EQ(b.n_asked, (size_t)4);
        int u = body_unasked(&b, &key, &len);
        if (cases[i].unasked == NULL) {
            ASSERT_EQ(u, 0);
        } else {
            ASSERT_EQ(u, 1);
            ASSERT_EQ(len, strlen(cases[i].unasked));
            ASSERT(memcmp(key, cases[i].unasked, len) == 0);
        }
        body_free(&b);
    }
}
