/* SPDX-License-Identifier: MIT */
/* fuzz_http.c - the request parser as semad's read loop drives it. The first byte picks the
 * caps (bits 0-3) and how the rest is split into reads (bits 4-7: 0 means one read); every
 * request that comes out must respect the caps and go through the router's checks and the
 * body parser. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "http/body.h"
#include "http/http.h"
#include "route_check.h"

static const size_t header_caps[] = {8192, 256, 40, 1};
static const size_t body_caps[] = {65536, 64, 5, 0};

/* The statuses http.c answers a bad request with. */
static const int error_statuses[] = {400, 413, 414, 431, 501, 503, 505};

typedef struct {
    http_parser_t p;
    http_limits_t lim;
    size_t messages; /* requests parsed so far */
    size_t size;     /* bytes of the whole input */
    int done;        /* the connection would be closed now */
    uint32_t rng;    /* read sizes; 0: one read */
} run_t;

static size_t next_read(run_t *r, size_t left)
{
    if (r->rng == 0)
        return left;
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 17;
    r->rng ^= r->rng << 5;
    size_t n = 1 + r->rng % 24;
    return n < left ? n : left;
}

static void check_request(const run_t *r)
{
    const http_request_t *q = &r->p.req;
    FUZZ_CHECK(r->p.complete);
    FUZZ_CHECK(q->url.len >= 1 && q->url.len <= r->lim.max_header_bytes);
    FUZZ_CHECK(q->url.data[q->url.len] == '\0');
    FUZZ_CHECK(q->body.len <= r->lim.max_body_bytes);
    FUZZ_CHECK(q->body.len == 0 || q->body.data[q->body.len] == '\0');
    FUZZ_CHECK(r->p.header_bytes <= r->lim.max_header_bytes);
    if (q->idem_key != NULL)
        FUZZ_CHECK(strlen(q->idem_key) >= 1 && strlen(q->idem_key) <= ENGINE_IDEM_KEY_MAX);
    const char *method = http_method_name(q->method);
    FUZZ_CHECK(method != NULL);
    fuzz_route_check(method, q->url.data);
    if (q->body.len > 0) { /* as routes_v1.c reads it */
        body_t b;
        char err[BODY_ERR_MAX] = "";
        if (body_parse(&b, q->body.data, q->body.len, err, sizeof err) == 0)
            body_free(&b);
        else
            FUZZ_CHECK(err[0] != '\0');
    }
}

static void check_error(const run_t *r)
{
    int known = 0;
    for (size_t i = 0; i < sizeof error_statuses / sizeof error_statuses[0]; i++)
        known |= r->p.error_status == error_statuses[i];
    FUZZ_CHECK(known);
    FUZZ_CHECK(r->p.error_reason != NULL && r->p.error_reason[0] != '\0');
    FUZZ_CHECK(strcmp(http_status_text(r->p.error_status), "Unknown") != 0);
}

/* One read, handled as semad's process() does; a request is answered at once. */
static void feed(run_t *r, const char *data, size_t len)
{
    while (len > 0 && !r->done) {
        size_t used = 0;
        int rc = http_parser_feed(&r->p, data, len, &used);
        FUZZ_CHECK(used <= len);
        data += used;
        len -= used;
        if (rc == HTTP_NEED_MORE) {
            FUZZ_CHECK(len == 0);
            if (r->p.want_continue == 2)
                r->p.want_continue = 3; /* "100 Continue" sent */
            return;
        }
        if (rc == HTTP_ERROR) {
            check_error(r);
            r->done = 1;
            return;
        }
        FUZZ_CHECK(rc == HTTP_MESSAGE);
        check_request(r);
        /* Every request takes some bytes: more requests than bytes would be a loop. */
        FUZZ_CHECK(++r->messages <= r->size);
        if (!r->p.req.keep_alive)
            r->done = 1; /* the reply ends the exchange */
        http_parser_next(&r->p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    run_t r;
    memset(&r, 0, sizeof r);
    r.lim.max_header_bytes = header_caps[data[0] & 3];
    r.lim.max_body_bytes = body_caps[(data[0] >> 2) & 3];
    r.rng = data[0] >> 4;
    r.size = size;
    http_parser_init(&r.p, &r.lim);
    const char *in = (const char *)data + 1;
    size_t left = size - 1;
    while (left > 0 && !r.done) {
        size_t n = next_read(&r, left);
        char *chunk = malloc(n); /* an exact-size read: overreads are ASan reports */
        if (chunk == NULL)
            break;
        memcpy(chunk, in, n);
        feed(&r, chunk, n);
        free(chunk);
        in += n;
        left -= n;
    }
    if (!r.done && http_parser_eof(&r.p) == HTTP_ERROR)
        FUZZ_CHECK(r.p.error_status == 400);
    http_parser_free(&r.p);
    return 0;
}
