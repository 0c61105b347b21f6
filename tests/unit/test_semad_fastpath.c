/* SPDX-License-Identifier: MIT */
/* test_semad_fastpath.c - semad's hot-path shortcuts give byte for byte what the general
 * path gives: lease results as pre-serialised text against the JSON tree as serialised. */
#include "test_engine_util.h"

#include "http.h"
#include "strbuf.h"

typedef struct {
    treq_t t; /* first: t_cb casts back */
    char text[2048];
    size_t text_len;
    int had_text;
} xreq_t;

static void keep_text(engine_req_t *r)
{
    xreq_t *x = (xreq_t *)r;

    x->had_text = r->text != NULL;
    x->text_len = 0;
    if (r->text != NULL) {
        ASSERT(r->text_len < sizeof x->text);
        ASSERT_EQ(r->result, NULL);
        memcpy(x->text, r->text, r->text_len);
        x->text_len = r->text_len;
    }
}

static xreq_t *xreq_new(engine_op_t op, const char *name, const char *owner)
{
    xreq_t *x = calloc(1, sizeof(*x));
    treq_t *t = treq_new(op, name);

    ASSERT_NOT_NULL(x);
    x->t = *t;
    free(t);
    if (name != NULL)
        x->t.r.name = x->t.name; /* it pointed into the copied-from struct */
    x->t.r.data = &x->t;
    x->t.r.owner = owner;
    x->t.r.want_text = 1;
    x->t.then = keep_text;
    return x;
}

/* The lease `id` as the general path serialises it (LEASE_GET without want_text). */
static void json_of_lease(fx_t *f, const char *id, struct strbuf *out)
{
    treq_t *g = treq_new(ENGINE_LEASE_GET, id);

    ASSERT_OK(fx_do(f, g));
    ASSERT_NOT_NULL(g->res);
    strbuf_reset(out);
    ASSERT_OK(http_json_append(out, g->res, 0));
    treq_free(g);
}

/* Text when given equals the JSON form; plain ASCII strings must take the text path. */
static void check_same(fx_t *f, xreq_t *x, int plain)
{
    struct strbuf js;
    char id[64];

    ASSERT_EQ(x->t.done, 1);
    ASSERT_EQ(x->t.status, 0);
    if (plain)
        ASSERT_EQ(x->had_text, 1);
    if (!x->had_text) {
        ASSERT_NOT_NULL(x->t.res);
        return;
    }
    x->text[x->text_len] = '\0';
    ASSERT_EQ(strncmp(x->text, "{\"lease\":\"", 10), 0);
    size_t n = strcspn(x->text + 10, "\"");
    ASSERT(n > 0 && n < sizeof id);
    memcpy(id, x->text + 10, n);
    id[n] = '\0';
    strbuf_init(&js, 0);
    json_of_lease(f, id, &js);
    ASSERT_STREQ(x->text, js.data);
    strbuf_free(&js);
}

static const char *const names[] = {"a", "bench-0", "x y", "n\xc3\xbc", "q\"q", "b\\s"};
static const char *const owners[] = {
    NULL, "", "worker-1", "with \"quote\"", "tab\there", "\xc3\xbcnicode", "del\x7f", "ctl\x01"};

static int is_plain(const char *s)
{
    for (; s != NULL && *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f || *s == '"' || *s == '\\')
            return 0;
    return 1;
}

TEST(lease_text_matches_json_for_acquire_and_renew)
{
    fx_t f;

    fx_init(&f);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fx_put(&f, names[i], 1000);
        for (size_t k = 0; k < sizeof owners / sizeof owners[0]; k++) {
            int plain = is_plain(names[i]) && is_plain(owners[k]);
            xreq_t *x = xreq_new(ENGINE_ACQUIRE, names[i], owners[k]);
            x->t.r.weight = 1 + k;
            x->t.r.ttl_ms = (int64_t)(k * 1000);
            fx_do(&f, &x->t);
            check_same(&f, x, plain);
            if (x->had_text) {
                char id[64];
                size_t n = strcspn(x->text + 10, "\"");
                memcpy(id, x->text + 10, n);
                id[n] = '\0';
                xreq_t *r = xreq_new(ENGINE_LEASE_RENEW, id, NULL);
                r->t.r.ttl_ms = 12345;
                fx_do(&f, &r->t);
                check_same(&f, r, plain);
                xreq_t *g = xreq_new(ENGINE_LEASE_GET, id, NULL);
                fx_do(&f, &g->t);
                check_same(&f, g, plain);
                treq_free(&r->t);
                treq_free(&g->t);
            }
            treq_free(&x->t);
        }
    }
    fx_free(&f);
}

TEST(lease_text_matches_json_for_keyed_locks)
{
    fx_t f;
    static const int modes[] = {ENGINE_MODE_SHARED, ENGINE_MODE_EXCLUSIVE};

    fx_init(&f);
    for (size_t m = 0; m < 2; m++) {
        for (size_t k = 0; k < sizeof owners / sizeof owners[0]; k++) {
            char key[32];
            snprintf(key, sizeof key, "key-%zu-%zu", m, k);
            xreq_t *x = xreq_new(ENGINE_LOCK_ACQUIRE, key, owners[k]);
            x->t.r.mode = modes[m];
            fx_do(&f, &x->t);
            check_same(&f, x, is_plain(owners[k]));
            treq_free(&x->t);
        }
    }
    fx_free(&f);
}

TEST(lease_text_only_when_asked)
{
    fx_t f;

    fx_init(&f);
    fx_put(&f, "a", 2);
    xreq_t *x = xreq_new(ENGINE_ACQUIRE, "a", NULL);
    x->t.r.want_text = 0;
    x->t.r.weight = 1;
    fx_do(&f, &x->t);
    ASSERT_EQ(x->had_text, 0);
    ASSERT_NOT_NULL(x->t.res);
    treq_free(&x->t);
    fx_free(&f);
}

/* The header shortcut skips names that cannot be Idempotency-Key or Expect, in any case and
 * however the bytes arrive. */
TEST(interesting_headers_found_among_skipped_ones)
{
    static const http_limits_t lim = {.max_header_bytes = 1024, .max_body_bytes = 64};
    const char *req = "POST /x HTTP/1.1\r\nHost: h\r\nIf-Match: *\r\nEx: 1\r\n"
                      "IDEMPOTENCY-key: k-7\r\nExpectation: no\r\nidempotency-keys: z\r\n"
                      "Content-Length: 0\r\n\r\n";
    size_t n = strlen(req);
    for (size_t step = 1; step <= n; step += step < 4 ? 1 : 7) {
        http_parser_t p;
        size_t used, off = 0;
        int rc = HTTP_NEED_MORE;
        http_parser_init(&p, &lim);
        while (rc == HTTP_NEED_MORE && off < n) {
            size_t k = n - off < step ? n - off : step;
            rc = http_parser_feed(&p, req + off, k, &used);
            off += used;
        }
        ASSERT_EQ(rc, HTTP_MESSAGE);
        ASSERT_STREQ(p.req.idem_key, "k-7");
        http_parser_free(&p);
    }
}

/* The precomputed 200/204 keep-alive replies equal the general writer's (which an empty
 * `extra` header block selects). */
TEST(hot_reply_headers_match_the_general_path)
{
    static const char *const ctypes[] = {"application/json; charset=utf-8", NULL,
                                         "application/problem+json", "text/plain"};
    static const int statuses[] = {200, 201, 204, 400};
    static const char body[] = "{\"lease\":\"x\"}";
    for (size_t s = 0; s < 4; s++)
        for (size_t t = 0; t < 4; t++)
            for (size_t n = 0; n <= sizeof body - 1; n += 7)
                for (int ka = 0; ka < 2; ka++) {
                    struct strbuf a, b;
                    strbuf_init(&a, 0);
                    strbuf_init(&b, 0);
                    ASSERT_OK(http_reply(&a, statuses[s], ctypes[t], n ? body : NULL, n, ka, NULL));
                    ASSERT_OK(http_reply(&b, statuses[s], ctypes[t], n ? body : NULL, n, ka, ""));
                    ASSERT_EQ(a.len, b.len);
                    ASSERT(memcmp(a.data, b.data, a.len) == 0);
                    strbuf_free(&a);
                    strbuf_free(&b);
                }
}
