/* SPDX-License-Identifier: MIT */
/* router.c - the route table and its matcher (see router.h). */
#include "router.h"

#include <string.h>

static const route_t routes[] = {
    /* seed 001's legacy API */
    {"POST", "/semaphore", legacy_create, ROUTE_LEGACY, "legacy: create {name,value}"},
    {"POST", "/semaphore/up", legacy_up, ROUTE_LEGACY, "legacy: add one unit {name}"},
    {"POST", "/semaphore/down", legacy_down, ROUTE_LEGACY, "legacy: take one unit {name}"},
    {"GET", "/semaphore/value/{name}", legacy_value, ROUTE_LEGACY, "legacy: current value"},
    {"DELETE", "/semaphore/{name}", legacy_delete, ROUTE_LEGACY, "legacy: delete"},
    /* v1 */
    {"GET", "/v1/semaphores", v1_sem_list, 0, "list semaphores (prefix, limit, cursor)"},
    {"PUT", "/v1/semaphores/{name}", v1_sem_put, 0, "create {capacity}"},
    {"PATCH", "/v1/semaphores/{name}", v1_sem_patch, 0, "resize {capacity}"},
    {"GET", "/v1/semaphores/{name}", v1_sem_get, 0, "full state"},
    {"DELETE", "/v1/semaphores/{name}", v1_sem_delete, 0, "delete"},
    {"POST", "/v1/semaphores/{name}/acquire", v1_acquire, 0,
     "acquire {weight,timeout_ms,ttl_ms,owner}; parks until granted"},
    {"POST", "/v1/semaphores/{name}/wait-idle", v1_wait_idle, 0, "wait until idle {timeout_ms}"},
    {"GET", "/v1/semaphores/{name}/events", v1_events, ROUTE_STREAM, "server-sent events"},
    {"GET", "/v1/leases/{id}", v1_lease_get, 0, "lease state"},
    {"DELETE", "/v1/leases/{id}", v1_lease_release, 0, "release"},
    {"POST", "/v1/leases/{id}/renew", v1_lease_renew, 0, "renew {ttl_ms}"},
    {"POST", "/v1/leases/{id}/revoke", v1_lease_revoke, 0, "admin revoke"},
    {"POST", "/v1/locks/{key}/acquire", v1_lock_acquire, 0,
     "keyed lock {mode,timeout_ms,ttl_ms,owner}"},
    {"GET", "/v1/locks/{key}", v1_lock_get, 0, "keyed lock state"},
    {"GET", "/healthz", v1_healthz, 0, "health"},
    {"GET", "/metrics", v1_metrics, 0, "Prometheus metrics"},
};
enum { NROUTES = sizeof routes / sizeof routes[0] };

/* Match one pattern; on success the parameter segment (if any) is returned. */
static int match_pattern(const char *pat, const char *path, size_t len, const char **param,
                         size_t *plen)
{
    size_t i = 0;
    *param = NULL;
    *plen = 0;
    while (*pat != '\0') {
        if (*pat == '{') {
            const char *close = strchr(pat, '}');
            size_t start = i;
            while (i < len && path[i] != '/')
                i++;
            if (i == start)
                return 0; /* an empty segment never names anything */
            *param = path + start;
            *plen = i - start;
            pat = close + 1;
            continue;
        }
        if (i >= len || path[i] != *pat)
            return 0;
        i++;
        pat++;
    }
    return i == len;
}

int router_match(const char *method, const char *path, size_t len, const route_t **route,
                 const char **param, size_t *param_len)
{
    const char *p;
    size_t pl;
    /* The method first (its first byte, then the rest): it rejects most routes cheaply. */
    for (size_t r = 0; r < NROUTES; r++) {
        if (routes[r].method[0] != method[0] || strcmp(routes[r].method, method) != 0 ||
            !match_pattern(routes[r].pattern, path, len, &p, &pl))
            continue;
        *route = &routes[r];
        *param = p;
        *param_len = pl;
        return ROUTER_FOUND;
    }
    for (size_t r = 0; r < NROUTES; r++)
        if (match_pattern(routes[r].pattern, path, len, &p, &pl))
            return ROUTER_BAD_METHOD;
    return ROUTER_NOT_FOUND;
}

size_t router_allow_header(const char *path, size_t len, char *buf, size_t cap)
{
    const char *p;
    size_t pl, n = 0;
    int any = 0;

    for (size_t r = 0; r < NROUTES; r++) {
        if (!match_pattern(routes[r].pattern, path, len, &p, &pl))
            continue;
        int w = snprintf(buf + n, cap - n, "%s%s", any ? ", " : "Allow: ", routes[r].method);
        if (w < 0 || (size_t)w >= cap - n)
            return 0;
        n += (size_t)w;
        any = 1;
    }
    if (!any || n + 3 > cap)
        return 0;
    memcpy(buf + n, "\r\n", 3);
    return n + 2;
}

size_t router_count(void)
{
    return NROUTES;
}

const route_t *router_get(size_t i)
{
    return i < NROUTES ? &routes[i] : NULL;
}

size_t router_index(const route_t *r)
{
    return r != NULL ? (size_t)(r - routes) : NROUTES;
}

void router_print(FILE *out)
{
    for (size_t r = 0; r < NROUTES; r++)
        fprintf(out, "%-6s %-36s %s\n", routes[r].method, routes[r].pattern, routes[r].summary);
}
