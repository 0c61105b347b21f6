/* SPDX-License-Identifier: MIT */
/* router.c - the route table and its matcher (see router.h). */
#include "http/router.h"

#include <string.h>

#include "common/auth.h"

/* A route: method, the pattern as its literal prefix, "{param}" (or "") and literal suffix,
 * handler, flags, the right a token needs (semad --auth), summary. The parts' lengths are
 * counted here, once. */
#define R(method, pre, param, suf, handler, flags, right, summary)                                 \
    {                                                                                              \
#method, pre param suf, handler, flags, summary, right, M_##method, sizeof pre - 1,        \
            sizeof param - 1, sizeof suf - 1                                                       \
    }

/* The routes' methods as numbers, so the table is scanned without string compares. */
enum { M_OTHER, M_GET, M_PUT, M_POST, M_PATCH, M_DELETE };

enum {
    NAMED = ROUTE_NAMED,
    LEGACY = ROUTE_LEGACY,
    READ = AUTH_READ,
    ACQ = AUTH_ACQUIRE,
    ADMIN = AUTH_ADMIN
};

static const route_t routes[] = {
    /* the legacy API (the original semaphore service's five routes): up and down move a counter
       without leases, so they need acquire */
    R(POST, "/semaphore", "", "", legacy_create, LEGACY, ADMIN, "legacy: create {name,value}"),
    R(POST, "/semaphore/up", "", "", legacy_up, LEGACY, ACQ, "legacy: add one unit {name}"),
    R(POST, "/semaphore/down", "", "", legacy_down, LEGACY, ACQ, "legacy: take one unit {name}"),
    R(GET, "/semaphore/value/", "{name}", "", legacy_value, LEGACY | NAMED, READ,
      "legacy: current value"),
    R(DELETE, "/semaphore/", "{name}", "", legacy_delete, LEGACY | NAMED, ADMIN, "legacy: delete"),
    /* v1 */
    R(GET, "/v1/semaphores", "", "", v1_sem_list, 0, READ,
      "list semaphores (prefix, limit, cursor)"),
    R(PUT, "/v1/semaphores/", "{name}", "", v1_sem_put, NAMED, ADMIN, "create {capacity}"),
    R(PATCH, "/v1/semaphores/", "{name}", "", v1_sem_patch, NAMED, ADMIN, "resize {capacity}"),
    R(GET, "/v1/semaphores/", "{name}", "", v1_sem_get, NAMED, READ, "full state"),
    R(DELETE, "/v1/semaphores/", "{name}", "", v1_sem_delete, NAMED, ADMIN, "delete"),
    R(POST, "/v1/semaphores/", "{name}", "/acquire", v1_acquire, NAMED, ACQ,
      "acquire {weight,timeout_ms,ttl_ms,owner}; parks until granted"),
    R(POST, "/v1/semaphores/", "{name}", "/wait-idle", v1_wait_idle, NAMED, ACQ,
      "wait until idle {timeout_ms}"),
    R(GET, "/v1/semaphores/", "{name}", "/events", v1_events, ROUTE_STREAM | NAMED, READ,
      "server-sent events"),
    R(POST, "/v1/semaphores/", "{name}", "/tickets", v1_ticket_create, NAMED, ACQ,
      "take a ticket {weight,ttl_ms,owner,keepalive_ms}; answers at once"),
    R(GET, "/v1/tickets/", "{id}", "", v1_ticket_get, 0, ACQ, "ticket state (?wait=DURATION)"),
    R(DELETE, "/v1/tickets/", "{id}", "", v1_ticket_delete, 0, ACQ, "leave the line"),
    R(GET, "/v1/tickets/", "{id}", "/events", v1_ticket_events, ROUTE_STREAM, ACQ,
      "ticket updates as server-sent events"),
    R(GET, "/v1/leases/", "{id}", "", v1_lease_get, 0, READ, "lease state"),
    R(DELETE, "/v1/leases/", "{id}", "", v1_lease_release, 0, ACQ, "release"),
    R(POST, "/v1/leases/", "{id}", "/renew", v1_lease_renew, 0, ACQ, "renew {ttl_ms}"),
    R(POST, "/v1/leases/", "{id}", "/revoke", v1_lease_revoke, 0, ADMIN, "admin revoke"),
    R(POST, "/v1/locks/", "{key}", "/acquire", v1_lock_acquire, NAMED, ACQ,
      "keyed lock {mode,timeout_ms,ttl_ms,owner}"),
    R(GET, "/v1/locks/", "{key}", "", v1_lock_get, NAMED, READ, "keyed lock state"),
    R(GET, "/v1/locks", "", "", v1_lock_list, 0, READ,
      "list the keys held or awaited (prefix, limit, cursor)"),
    R(GET, "/healthz", "", "", v1_healthz, 0, 0, "health"),
    R(GET, "/metrics", "", "", v1_metrics, ROUTE_GLOBAL, READ, "Prometheus metrics"),
    /* after the plain path's routes, which then do not scan past them */
    R(POST, "/v1/acquire", "", "", v1_acquire_multi, 0, ACQ,
      "acquire several semaphores at once {semaphores:[{name,weight}],timeout_ms,ttl_ms}"),
    R(POST, "/v1/tickets", "", "", v1_ticket_create_multi, 0, ACQ,
      "take a place in several lines at once {semaphores:[{name,weight}],keepalive_ms}"),
    /* the dashboard (ui.c): open, as it holds no data (its page reads the API with the
       visitor's token); --no-ui answers 404 */
    R(GET, "/ui", "", "", ui_index, 0, 0, "the dashboard's page"),
    R(GET, "/ui/config.json", "", "", ui_config, 0, 0, "the dashboard's settings"),
    R(GET, "/ui/", "{file}", "", ui_file, 0, 0, "the dashboard's scripts, styles and images"),
};
enum { NROUTES = sizeof routes / sizeof routes[0] };

/* Match one route; on success the parameter segment (if any) is returned: the path is the
 * prefix, a non-empty segment without '/', then the suffix. */
static int match_route(const route_t *r, const char *path, size_t len, const char **param,
                       size_t *plen)
{
    size_t pre = r->pre_len, suf = r->suf_len;
    *param = NULL;
    *plen = 0;
    if (r->param_len == 0)
        return len == pre && memcmp(path, r->pattern, len) == 0;
    /* Every pattern starts with '/' and a letter: that letter sorts out most routes. */
    if (len <= pre + suf || path[1] != r->pattern[1] || memcmp(path, r->pattern, pre) != 0 ||
        memcmp(path + len - suf, r->pattern + pre + r->param_len, suf) != 0 ||
        memchr(path + pre, '/', len - pre - suf) != NULL)
        return 0;
    *param = path + pre;
    *plen = len - pre - suf;
    return 1;
}

static int method_id(const char *m)
{
    static const char *const names[] = {"", "GET", "PUT", "POST", "PATCH", "DELETE"};
    int id = m[0] == 'G'   ? M_GET
             : m[0] == 'D' ? M_DELETE
             : m[0] != 'P' ? M_OTHER
             : m[1] == 'O' ? M_POST
             : m[1] == 'U' ? M_PUT
             : m[1] == 'A' ? M_PATCH
                           : M_OTHER;
    return id != M_OTHER && strcmp(m, names[id]) == 0 ? id : M_OTHER;
}

int router_match(const char *method, const char *path, size_t len, const route_t **route,
                 const char **param, size_t *param_len)
{
    const char *p;
    size_t pl;
    int id = method_id(method);
    /* The method first: it rejects most routes cheaply. */
    for (size_t r = 0; id != M_OTHER && r < NROUTES; r++) {
        if (routes[r].method_id != id || !match_route(&routes[r], path, len, &p, &pl))
            continue;
        *route = &routes[r];
        *param = p;
        *param_len = pl;
        return ROUTER_FOUND;
    }
    for (size_t r = 0; r < NROUTES; r++)
        if (match_route(&routes[r], path, len, &p, &pl))
            return ROUTER_BAD_METHOD;
    return ROUTER_NOT_FOUND;
}

size_t router_allow_header(const char *path, size_t len, char *buf, size_t cap)
{
    const char *p;
    size_t pl, n = 0;
    int any = 0;

    for (size_t r = 0; r < NROUTES; r++) {
        if (!match_route(&routes[r], path, len, &p, &pl))
            continue;
        /* Every GET route but the event stream's answers HEAD too (conn.c's dispatch). */
        int head = strcmp(routes[r].method, "GET") == 0 && !(routes[r].flags & ROUTE_STREAM);
        int w = snprintf(buf + n, cap - n, "%s%s%s", any ? ", " : "Allow: ", routes[r].method,
                         head ? ", HEAD" : "");
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
        fprintf(out, "%-6s %-36s %-7s %s\n", routes[r].method, routes[r].pattern,
                routes[r].right ? auth_right_name(routes[r].right) : "open", routes[r].summary);
}
