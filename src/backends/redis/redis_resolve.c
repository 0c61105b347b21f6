/* SPDX-License-Identifier: MIT */
/* redis_resolve.c - the host name of a Redis connection (redis://, a Sentinel), resolved off
 * the loop. hiredis resolves a name inside redisAsyncConnect, with getaddrinfo on the loop's
 * thread, where a slow DNS server would stall every request: the name is resolved first with
 * uv_getaddrinfo (on libuv's threads), anew for each connection, and hiredis is given the
 * address; the logs keep the name. (A cluster's links do the same: redis_cluster_link.c.) */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <string.h>

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    rs_t *r = g->data;
    rs_resolve_t *v = &r->rv;

    v->busy = 0;
    v->done = 1;
    v->failed = status != 0 || res == NULL || uv_ip_name(res->ai_addr, v->addr, sizeof v->addr);
    if (v->failed)
        snprintf(v->why, sizeof v->why, "cannot resolve it: %s",
                 status != 0 ? uv_strerror(status) : "no address");
    uv_freeaddrinfo(res);
    if (!r->closing && v->again != NULL)
        v->again(r);
    rs__handle_done(r);
}

const char *rs__address_for(rs_t *r, const char *host, void (*again)(rs_t *r), const char **why)
{
    rs_resolve_t *v = &r->rv;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    unsigned char bin[sizeof(struct in6_addr)];
    int rc;

    *why = NULL;
    if (uv_inet_pton(AF_INET, host, bin) == 0 || uv_inet_pton(AF_INET6, host, bin) == 0)
        return host;
    v->again = again;
    if (v->busy)
        return NULL;
    if (v->done && strcmp(v->host, host) == 0) {
        v->done = 0;
        *why = v->failed ? v->why : NULL;
        return v->failed ? NULL : v->addr;
    }
    snprintf(v->host, sizeof v->host, "%s", host);
    v->done = 0;
    v->gai.data = r;
    if ((rc = uv_getaddrinfo(r->loop, &v->gai, on_resolved, v->host, NULL, &hints)) != 0) {
        snprintf(v->why, sizeof v->why, "cannot resolve it: %s", uv_strerror(rc));
        *why = v->why;
        return NULL;
    }
    v->busy = 1;
    r->handles_open++; /* (r is freed after its answer) */
    return NULL;
}
