/* SPDX-License-Identifier: MIT */
/* test_render.c - the one renderer: results, events and problems come out as compact JSON
 * byte for byte as jansson would write the same document, with the members in the order
 * docs/http-api.md shows. */
#include "common/jsonw.h"
#include "http/render.h"
#include "test_engine_util.h"

/* `text` equals jansson's compact dump of itself parsed. */
static void assert_canonical(const char *text, size_t len)
{
    json_error_t err;
    json_t *j = json_loadb(text, len, 0, &err);
    char *again;

    if (j == NULL)
        TEST_FAIL_("not JSON (%s): %.*s", err.text, (int)len, text);
    again = json_dumps(j, JSON_COMPACT);
    ASSERT_STREQ(again, text);
    free(again);
    json_decref(j);
}

static void render_req(const engine_req_t *r, struct strbuf *out)
{
    strbuf_reset(out);
    ASSERT_OK(render_result(out, &r->res));
    assert_canonical(out->data, out->len);
}

static void keep_rendered(engine_req_t *r)
{
    treq_t *t = (treq_t *)r;
    struct strbuf sb;

    strbuf_init(&sb, 0);
    if (r->status == 0)
        render_req(r, &sb);
    snprintf(t->idem, sizeof t->idem, "%.60s", sb.len ? sb.data : "");
    strbuf_free(&sb);
}

TEST(lease_member_order_and_escapes)
{
    fx_t f;
    treq_t *a;
    engine_lease_t l = {.id = "abc",
                        .name = "q\"\\\n\xc3\xa9",
                        .name_len = 6,
                        .owner = "w\t1",
                        .weight = 2,
                        .fence = 9,
                        .ttl_ms = 5,
                        .acquired_at_ms = 10,
                        .expires_at_ms = 15};
    struct strbuf sb;

    strbuf_init(&sb, 0);
    ASSERT_OK(render_lease(&sb, &l));
    ASSERT_STREQ(sb.data, "{\"lease\":\"abc\",\"name\":\"q\\\"\\\\\\n\xc3\xa9\",\"weight\":2,"
                          "\"fence\":9,\"ttl_ms\":5,\"expires_at\":15,\"acquired_at\":10,"
                          "\"owner\":\"w\\t1\"}");
    assert_canonical(sb.data, sb.len);
    l.mode = ENGINE_MODE_EXCLUSIVE;
    l.owner = NULL;
    strbuf_reset(&sb);
    ASSERT_OK(render_lease(&sb, &l));
    assert_canonical(sb.data, sb.len);
    ASSERT(strstr(sb.data, "\"owner\":null,\"key\":\"q") != NULL);
    ASSERT(strstr(sb.data, "\"mode\":\"exclusive\"}") != NULL);
    l.name = "\xff";
    l.name_len = 1;
    strbuf_reset(&sb);
    ASSERT_EQ(render_lease(&sb, &l), SEMA_EINVAL); /* never invalid UTF-8 on the wire */
    strbuf_free(&sb);

    fx_init(&f);
    fx_put(&f, "s", 3);
    a = fx_acquire(&f, "s", 1, 0);
    a->r.owner = "x";
    ASSERT_EQ(a->status, 0);
    ASSERT_EQ(json_object_size(a->res), 8);
    treq_free(a);
    fx_free(&f);
}

TEST(state_with_lists_is_canonical)
{
    fx_t f;
    treq_t *a, *b, *w, *g;

    fx_init(&f);
    fx_put(&f, "s", 2);
    a = fx_acquire(&f, "s", 2, 0);
    w = fx_acquire(&f, "s", 1, -1);
    b = treq_new(ENGINE_WAIT_IDLE, "s");
    ASSERT_OK(engine_submit(f.e, &b->r));
    g = treq_new(ENGINE_SEM_GET, "s");
    g->then = keep_rendered;
    ASSERT_OK(fx_do(&f, g));
    static const char head[] = "{\"name\":\"s\",\"capacity\":2,\"available\":0,\"held\":2,";
    ASSERT(strncmp(g->idem, head, sizeof head - 1) == 0);
    ASSERT_EQ(json_array_size(json_object_get(g->res, "holders")), 1);
    ASSERT_EQ(json_array_size(json_object_get(g->res, "waiters")), 2);
    ASSERT_STREQ(jstr(json_array_get(json_object_get(g->res, "waiters"), 1), "kind"), "wait_idle");
    fx_free(&f); /* fails the parked ones first: they must outlive it */
    treq_free(a);
    treq_free(b);
    treq_free(w);
    treq_free(g);
}

TEST(problem_is_rfc9457)
{
    struct strbuf sb;

    strbuf_init(&sb, 0);
    ASSERT_OK(render_problem(&sb, 409, "timeout", "Timed out", "waited 50 ms"));
    ASSERT_STREQ(sb.data, "{\"type\":\"urn:sema:problem:timeout\",\"title\":\"Timed out\","
                          "\"status\":409,\"code\":\"timeout\",\"detail\":\"waited 50 ms\"}");
    strbuf_reset(&sb);
    ASSERT_OK(render_problem(&sb, 400, "invalid_request", "Invalid request", "bad \xff"));
    ASSERT(strstr(sb.data, "detail") == NULL); /* a detail that is not UTF-8 is left out */
    strbuf_free(&sb);
}
