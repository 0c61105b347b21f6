/* SPDX-License-Identifier: MIT */
/* redis_resolve.c - a Redis host name resolved off the loop with uv_getaddrinfo: the one
 * resolver of a Redis or Sentinel connection and of a cluster's links (redis_resolve.h). */
#include "backends/redis/redis_resolve.h"

#include <stdio.h>
#include <string.h>

int rs__resolve_is_address(const char *host)
{
    unsigned char bin[sizeof(struct in6_addr)];

    return uv_inet_pton(AF_INET, host, bin) == 0 || uv_inet_pton(AF_INET6, host, bin) == 0;
}

static void fail(rs_resolve_t *v, const char *why)
{
    v->failed = 1;
    snprintf(v->why, sizeof v->why, "cannot resolve it: %s", why);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    rs_resolve_t *v = g->data;
    char addr[RS_RESOLVE_ADDR_MAX];

    v->busy = 0;
    v->failed = 0;
    if (status != 0)
        fail(v, uv_strerror(status));
    else if (res == NULL || uv_ip_name(res->ai_addr, addr, sizeof addr) != 0)
        fail(v, "no address");
    else
        memcpy(v->addr, addr, sizeof addr);
    uv_freeaddrinfo(res);
    v->cb(v);
}

int rs__resolve_start(rs_resolve_t *v, uv_loop_t *loop, const char *host,
                      void (*cb)(rs_resolve_t *v), void *data)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    int rc;

    if (v->busy || strlen(host) >= sizeof v->host) {
        fail(v, v->busy ? "another resolution is under way" : "name too long");
        return -1;
    }
    memcpy(v->host, host, strlen(host) + 1);
    v->cb = cb;
    v->data = data;
    v->gai.data = v;
    if ((rc = uv_getaddrinfo(loop, &v->gai, on_resolved, v->host, NULL, &hints)) != 0) {
        fail(v, uv_strerror(rc));
        return -1;
    }
    v->busy = 1;
    return 0;
}

void rs__resolve_cancel(rs_resolve_t *v)
{
    if (v->busy)
        uv_cancel((uv_req_t *)&v->gai);
}
