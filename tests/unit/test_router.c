/* SPDX-License-Identifier: MIT */
/* test_router.c - the route table: matching, parameters, methods, and its shape. */
#include <string.h>

#include "http/router.h"
#include "test.h"

static int match(const char *method, const char *path, const route_t **r, char *param, size_t cap)
{
    const char *p;
    size_t n;
    int rc = router_match(method, path, strlen(path), r, &p, &n);
    param[0] = '\0';
    if (rc == ROUTER_FOUND && p != NULL) {
        ASSERT_LT(n, cap);
        memcpy(param, p, n);
        param[n] = '\0';
    }
    return rc;
}

TEST(matches_exact_and_parameter_routes)
{
    const route_t *r;
    char param[128];
    ASSERT_EQ(match("POST", "/semaphore", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == legacy_create);
    ASSERT_EQ(match("POST", "/semaphore/up", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == legacy_up);
    ASSERT_EQ(match("DELETE", "/semaphore/up", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == legacy_delete);
    ASSERT_STREQ(param, "up");
    ASSERT_EQ(match("GET", "/semaphore/value/a%2Fb", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == legacy_value);
    ASSERT_STREQ(param, "a%2Fb"); /* raw: the server decodes exactly once */
    ASSERT_EQ(match("POST", "/v1/semaphores/x/acquire", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == v1_acquire);
    ASSERT_STREQ(param, "x");
    ASSERT_EQ(match("GET", "/v1/semaphores", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == v1_sem_list);
    ASSERT_EQ(match("POST", "/v1/leases/abc/renew", &r, param, sizeof param), ROUTER_FOUND);
    ASSERT(r->handler == v1_lease_renew);
    ASSERT_STREQ(param, "abc");
}

TEST(unknown_paths_and_methods)
{
    const route_t *r;
    char param[64];
    ASSERT_EQ(match("GET", "/nope", &r, param, sizeof param), ROUTER_NOT_FOUND);
    ASSERT_EQ(match("GET", "/semaphore/up", &r, param, sizeof param), ROUTER_BAD_METHOD);
    ASSERT_EQ(match("POST", "/v1/semaphores/x", &r, param, sizeof param), ROUTER_BAD_METHOD);
    ASSERT_EQ(match("PUT", "/v1/semaphores/", &r, param, sizeof param), ROUTER_NOT_FOUND);
    ASSERT_EQ(match("PUT", "/v1/semaphores//acquire", &r, param, sizeof param), ROUTER_NOT_FOUND);
    ASSERT_EQ(match("GET", "/v1/semaphores/a/b", &r, param, sizeof param), ROUTER_NOT_FOUND);
    ASSERT_EQ(match("GET", "/semaphore/value/", &r, param, sizeof param), ROUTER_NOT_FOUND);
    ASSERT_EQ(match("GET", "/healthz/", &r, param, sizeof param), ROUTER_NOT_FOUND);
}

TEST(table_is_well_formed)
{
    size_t n = router_count();
    ASSERT_GE(n, 21);
    for (size_t i = 0; i < n; i++) {
        const route_t *r = router_get(i);
        ASSERT_EQ(router_index(r), i);
        ASSERT_NOT_NULL(r->handler);
        ASSERT(r->pattern[0] == '/');
        const char *open = strchr(r->pattern, '{');
        if (open != NULL)
            ASSERT_NULL(strchr(open + 1, '{')); /* at most one parameter */
        /* the parts the matcher compares add up to the pattern */
        ASSERT_EQ(strlen(r->pattern), (size_t)r->pre_len + r->param_len + r->suf_len);
        ASSERT_EQ(open != NULL ? (size_t)(open - r->pattern) : strlen(r->pattern), r->pre_len);
        if (open != NULL)
            ASSERT_EQ(r->pattern[r->pre_len + r->param_len - 1], '}');
        for (size_t j = i + 1; j < n; j++)
            ASSERT(strcmp(r->method, router_get(j)->method) != 0 ||
                   strcmp(r->pattern, router_get(j)->pattern) != 0);
    }
    ASSERT_NULL(router_get(n));
}
