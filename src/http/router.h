/* SPDX-License-Identifier: MIT */
/* router.h - semad's routes as one static table {method, pattern, handler, flags}. */
#ifndef SEMAD_ROUTER_H
#define SEMAD_ROUTER_H

#include <stddef.h>
#include <stdio.h>

struct route_ctx;
typedef void (*route_handler_fn)(struct route_ctx *ctx);

enum {
    ROUTE_LEGACY = 1, /* the legacy API: errors as text/html, not problem+json */
    ROUTE_STREAM = 2, /* the reply is an event stream (SSE) */
    ROUTE_NAMED = 4,  /* the path parameter is a semaphore name or lock key (token prefixes) */
    ROUTE_GLOBAL = 8, /* shows every semaphore: not for tokens limited to prefixes */
};

typedef struct {
    const char *method;  /* "GET", "POST", ... */
    const char *pattern; /* "/v1/semaphores/{name}/acquire"; at most one {param} */
    route_handler_fn handler;
    int flags;
    const char *summary; /* one line for --routes and the docs */
    unsigned char right; /* the AUTH_* right a token needs (auth.h); 0: open to all */
    /* For the matcher: the method as a number (router.c), and the lengths of the pattern's
     * parts: literal prefix, "{param}" (0 if none) and literal suffix. */
    unsigned char method_id, pre_len, param_len, suf_len;
} route_t;

enum { ROUTER_FOUND = 0, ROUTER_NOT_FOUND = 404, ROUTER_BAD_METHOD = 405 };

/* Match `method` and `path` (no query string, `len` bytes) against the table. On
 * ROUTER_FOUND sets *route and the raw (still percent-encoded) parameter segment
 * (*param, *param_len; NULL/0 if the pattern has none). Pure; thread-safe. */
int router_match(const char *method, const char *path, size_t len, const route_t **route,
                 const char **param, size_t *param_len);

/* The methods `path` has, as an HTTP Allow header line ("Allow: GET, HEAD, PUT\r\n": HEAD
 * after every GET but an event stream's) in buf;
 * returns its length (0 if no route has the path, or it does not fit). */
size_t router_allow_header(const char *path, size_t len, char *buf, size_t cap);

/* The table, for metrics, `semad --routes` and tests. */
size_t router_count(void);
const route_t *router_get(size_t i);
size_t router_index(const route_t *r);

/* Print "METHOD PATTERN  summary" per route to `out`. */
void router_print(FILE *out);

/* The handlers (routes_legacy.c, routes_v1.c, sse.c, server.c, ui.c). */
void legacy_create(struct route_ctx *c);
void legacy_delete(struct route_ctx *c);
void legacy_value(struct route_ctx *c);
void legacy_up(struct route_ctx *c);
void legacy_down(struct route_ctx *c);
void v1_sem_put(struct route_ctx *c);
void v1_sem_patch(struct route_ctx *c);
void v1_sem_get(struct route_ctx *c);
void v1_sem_delete(struct route_ctx *c);
void v1_sem_list(struct route_ctx *c);
void v1_acquire(struct route_ctx *c);
void v1_wait_idle(struct route_ctx *c);
void v1_lease_get(struct route_ctx *c);
void v1_lease_renew(struct route_ctx *c);
void v1_lease_release(struct route_ctx *c);
void v1_lease_revoke(struct route_ctx *c);
void v1_lock_acquire(struct route_ctx *c);
void v1_lock_get(struct route_ctx *c);
void v1_lock_list(struct route_ctx *c);
void v1_events(struct route_ctx *c);
void v1_ticket_create(struct route_ctx *c);
void v1_acquire_multi(struct route_ctx *c);
void v1_ticket_create_multi(struct route_ctx *c);
void v1_ticket_get(struct route_ctx *c);
void v1_ticket_delete(struct route_ctx *c);
void v1_ticket_events(struct route_ctx *c);
void v1_healthz(struct route_ctx *c);
void v1_metrics(struct route_ctx *c);
void ui_index(struct route_ctx *c);
void ui_config(struct route_ctx *c);
void ui_file(struct route_ctx *c);

#endif /* SEMAD_ROUTER_H */
