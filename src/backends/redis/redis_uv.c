/* SPDX-License-Identifier: MIT */
/* redis_uv.c - hiredis's asynchronous connections on semad's libuv loop. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Like hiredis's adapters/libuv.h, with one difference that matters here: when libuv reports
 * a polling error (a refused connection reports POLLERR), hiredis is told to read and write
 * so it finds the error itself, instead of the connection hanging unnoticed. */

typedef struct {
    redisAsyncContext *ac;
    uv_poll_t poll;
    int events;
} rsev_t;

static void ev_poll_cb(uv_poll_t *h, int status, int events)
{
    rsev_t *p = h->data;

    if (status < 0)
        events = UV_READABLE | UV_WRITABLE;
    if (p->ac != NULL && (events & UV_READABLE))
        redisAsyncHandleRead(p->ac);
    if (p->ac != NULL && (events & UV_WRITABLE))
        redisAsyncHandleWrite(p->ac);
}

static void ev_update(rsev_t *p, int add, int mask)
{
    p->events = add ? p->events | mask : p->events & ~mask;
    if (p->events)
        uv_poll_start(&p->poll, p->events, ev_poll_cb);
    else
        uv_poll_stop(&p->poll);
}

static void ev_add_read(void *d)
{
    ev_update(d, 1, UV_READABLE);
}
static void ev_del_read(void *d)
{
    ev_update(d, 0, UV_READABLE);
}
static void ev_add_write(void *d)
{
    ev_update(d, 1, UV_WRITABLE);
}
static void ev_del_write(void *d)
{
    ev_update(d, 0, UV_WRITABLE);
}

static void ev_closed(uv_handle_t *h)
{
    free(h->data);
}

static void ev_cleanup(void *d)
{
    rsev_t *p = d;

    p->ac = NULL;
    uv_close((uv_handle_t *)&p->poll, ev_closed);
}

static int ev_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
    rsev_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return -1;
    if (uv_poll_init(loop, &p->poll, ac->c.fd) != 0) {
        free(p);
        return -1;
    }
    p->ac = ac;
    p->poll.data = p;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    ac->ev.data = p;
    return 0;
}

redisAsyncContext *rs__async_open(uv_loop_t *loop, const char *host, int port, char *why,
                                  size_t cap)
{
    redisAsyncContext *ac = redisAsyncConnect(host, port);

    if (ac == NULL || ac->err || ev_attach(ac, loop) != 0) {
        snprintf(why, cap, "%s", ac == NULL ? "out of memory" : ac->err ? ac->errstr : "no poll");
        if (ac != NULL)
            redisAsyncFree(ac);
        return NULL;
    }
    return ac;
}
