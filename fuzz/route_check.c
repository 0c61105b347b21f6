/* SPDX-License-Identifier: MIT */
/* route_check.c - request-target checks shared by the fuzz targets (see route_check.h). */
#include "route_check.h"

#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "common/jsonw.h"
#include "fuzz.h"
#include "http/http.h"
#include "http/router.h"
#include "sema/error.h"

static const char *const query_keys[] = {"prefix", "cursor", "limit"};

int fuzz_pct_check(const char *src, size_t len, int plus_space)
{
    char *out = NULL;
    size_t n = 0;
    int rc = http_pct_decode(src, len, plus_space, &out, &n);
    FUZZ_CHECK(rc == 0 || rc == SEMA_EINVAL || rc == SEMA_ENOMEM);
    if (rc != 0)
        return rc;
    FUZZ_CHECK(out != NULL && n <= len);
    FUZZ_CHECK(strlen(out) == n);
    FUZZ_CHECK(jsonw_utf8_valid(out, n));
    if (memchr(src, '%', len) == NULL && !(plus_space && memchr(src, '+', len) != NULL))
        FUZZ_CHECK(n == len && memcmp(out, src, len) == 0); /* nothing to decode */
    free(out);
    return rc;
}

static void check_match(const char *method, const char *url, size_t plen)
{
    const route_t *r = NULL;
    const char *param = NULL;
    size_t param_len = 0;
    int rc = router_match(method, url, plen, &r, &param, &param_len);
    FUZZ_CHECK(rc == ROUTER_FOUND || rc == ROUTER_NOT_FOUND || rc == ROUTER_BAD_METHOD);
    if (rc != ROUTER_FOUND)
        return;
    FUZZ_CHECK(r != NULL && router_index(r) < router_count());
    FUZZ_CHECK(strcmp(r->method, method) == 0);
    if (strchr(r->pattern, '{') == NULL) {
        FUZZ_CHECK(param == NULL && param_len == 0);
        FUZZ_CHECK(strlen(r->pattern) == plen && memcmp(r->pattern, url, plen) == 0);
        return;
    }
    FUZZ_CHECK(param != NULL && param_len > 0);
    FUZZ_CHECK(param >= url && param + param_len <= url + plen);
    FUZZ_CHECK(memchr(param, '/', param_len) == NULL);
    fuzz_pct_check(param, param_len, 0);
}

void fuzz_route_check(const char *method, const char *url)
{
    const char *q = strchr(url, '?');
    size_t plen = q != NULL ? (size_t)(q - url) : strlen(url);
    check_match(method, url, plen);
    for (size_t i = 0; i < sizeof query_keys / sizeof query_keys[0]; i++) {
        char *out = NULL;
        int rc = http_query_get(q != NULL ? q + 1 : NULL, query_keys[i], &out);
        FUZZ_CHECK(rc == 1 || rc == 0 || rc == SEMA_EINVAL || rc == SEMA_ENOMEM);
        if (rc == 1) {
            FUZZ_CHECK(out != NULL && jsonw_utf8_valid(out, strlen(out)));
            free(out);
        }
    }
}
