/* SPDX-License-Identifier: MIT */
/* redis_resolve.h - a Redis host name resolved off the loop, for a connection to one Redis or
 * a Sentinel (redis_conn.c) and a cluster's links (redis_cluster_link.c). hiredis resolves a
 * name inside its connect, with getaddrinfo on the loop's thread, where a slow DNS server
 * would stall every request: the name is resolved first with uv_getaddrinfo (on libuv's
 * threads), anew for each connection, and the connection is made to the address it gives; the
 * logs keep the name. How long a resolution may take is the system resolver's (resolv.conf's
 * timeout and attempts): the connection's own timeout starts with its connect.
 *
 * Single-threaded: every function runs on the loop's thread. */
#ifndef SEMAD_REDIS_RESOLVE_H
#define SEMAD_REDIS_RESOLVE_H

#include <stdint.h>

#include <uv.h>

#define RS_RESOLVE_HOST_MAX 256 /* a host name, with its NUL */
#define RS_RESOLVE_ADDR_MAX 64  /* an address as text (IPv6 at most 46), with its NUL */

typedef struct rs_resolve rs_resolve_t;

/* One resolution at a time of one caller's host names. The caller owns it (zeroed first) and
 * keeps it, unmoved, until its callback has run. */
struct rs_resolve {
    uv_getaddrinfo_t gai;
    uint8_t busy;                   /* uv_getaddrinfo is out: the callback is to come */
    uint8_t failed;                 /* the last one answered without an address (why) */
    char host[RS_RESOLVE_HOST_MAX]; /* the name last asked for */
    char addr[RS_RESOLVE_ADDR_MAX]; /* the address the last one that found one gave ("": none) */
    char why[96];                   /* "cannot resolve it: ..." */
    void (*cb)(rs_resolve_t *v);    /* runs once per start, from the loop (data: the caller's) */
    void *data;
};

/* 1 when host is an IPv4 or IPv6 address (to connect to as it is), else 0. */
int rs__resolve_is_address(const char *host);

/* Resolve host (copied; at most RS_RESOLVE_HOST_MAX - 1 bytes) on libuv's threads: 0, and
 * v->cb runs once, later, with v->busy back at 0 and v->addr (the first address found, for a
 * TCP connection) or v->failed and v->why; or -1 when it cannot start (v->failed, v->why; the
 * callback then never runs), among them while one is busy. */
int rs__resolve_start(rs_resolve_t *v, uv_loop_t *loop, const char *host,
                      void (*cb)(rs_resolve_t *v), void *data);

/* The resolution under way, if any, asked to stop: its callback still runs (soon, failed, or
 * with what it found had it already done), for the caller to let go of what it keeps alive. */
void rs__resolve_cancel(rs_resolve_t *v);

#endif /* SEMAD_REDIS_RESOLVE_H */
