/* SPDX-License-Identifier: MIT */
/* redis_cluster_link.c - the connections of redis_cluster.c: one per primary for commands and
 * one for sharded subscriptions, each a libuv TCP handle that speaks RESP through hiredis's
 * reader and command formatter, rather than a hiredis asynchronous context: hiredis 0.14
 * (Debian 12) does not know SSUBSCRIBE, so a sharded message on one of its contexts finds no
 * callback and trips its assertion that an unasked reply only comes to a subscribed context.
 * Here a subscriber connection reads every reply as a pub/sub frame, and a command connection
 * keeps its own queue of commands in flight, with their deadlines. */
#include "backends/redis/redis_cluster_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "sema/error.h"

/* ---- connections ---- */

rs_link_t *rs__cluster_link_find(rs_cluster_t *cl, const rs_slot_addr_t *a, int sub, int create)
{
    rs_link_t *l;

    for (elist_t *e = cl->links.next; e != &cl->links; e = e->next) {
        l = ECONTAINER(e, rs_link_t, all);
        if (l->sub == sub && rs__cluster_same_addr(&l->addr, a))
            return l;
    }
    if (!create || cl->nlinks == RS_CL_LINKS_MAX || (l = sema__calloc(1, sizeof *l)) == NULL)
        return NULL;
    l->cl = cl;
    l->addr = *a;
    l->sub = sub;
    l->state = RS_CL_DOWN;
    elist_init(&l->queued);
    elist_init(&l->inflight);
    elist_init(&l->chans);
    elist_init(&l->dirty);
    elist_push_back(&cl->links, &l->all);
    cl->nlinks++;
    return l;
}

static void on_closed(uv_handle_t *h)
{
    rs_link_t *l = h->data;

    l->cl->handles--;
    l->state = RS_CL_DOWN;
}

static char asking[] = "*1\r\n$6\r\nASKING\r\n";

static void free_bufs(uv_buf_t *b, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (b[i].base != asking)
            redisFreeCommand(b[i].base);
    sema__free(b);
}

/* One write of a connection's formatted commands. */
typedef struct {
    uv_write_t w;
    uv_buf_t *bufs;
    unsigned n;
} wreq_t;

static void on_written(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    rs_link_t *l = w->data;

    free_bufs(wr->bufs, wr->n);
    sema__free(wr);
    if (status < 0 && status != UV_ECANCELED && l->state == RS_CL_READY)
        rs__cluster_link_drop(l, uv_strerror(status));
}

/* Room in out for two more buffers (ASKING and a command). */
static int out_room(rs_link_t *l)
{
    unsigned cap = l->out_cap ? l->out_cap * 2 : 16;
    uv_buf_t *b;

    if (l->out_cap - l->nout >= 2)
        return 0;
    if (cap > RS_CL_OUT_MAX)
        return SEMA_EBUSY;
    if ((b = sema__realloc(l->out, cap * sizeof *b)) == NULL)
        return SEMA_ENOMEM;
    l->out = b;
    l->out_cap = cap;
    return 0;
}

int rs__cluster_link_write(rs_link_t *l, rs_ccmd_t *c)
{
    char *cmd;
    int n, rc = out_room(l);

    if (rc != 0)
        return rc;
    if ((n = redisFormatCommandArgv(&cmd, c->argc, c->argv, c->lens)) < 0)
        return SEMA_ENOMEM;
    c->asking = c->ask;
    c->ask = 0;
    c->written = 0;
    if (c->asking)
        l->out[l->nout++] = uv_buf_init(asking, sizeof asking - 1);
    l->out[l->nout++] = uv_buf_init(cmd, (unsigned)n);
    elist_push_back(&l->inflight, &c->link);
    if (elist_empty(&l->dirty))
        elist_push_back(&l->cl->dirty, &l->dirty);
    l->cl->st.sent++;
    return 0;
}

static void write_out(rs_link_t *l)
{
    wreq_t *wr;

    elist_remove(&l->dirty);
    if (l->nout == 0 || l->state != RS_CL_READY)
        return;
    if ((wr = sema__malloc(sizeof *wr)) == NULL) {
        elist_push_back(&l->cl->dirty, &l->dirty); /* the next turn tries again */
        return;
    }
    l->cl->st.writes++;
    wr->bufs = l->out;
    wr->n = l->nout;
    wr->w.data = l;
    l->out = NULL;
    l->nout = l->out_cap = 0;
    /* what is in flight and was only formatted goes out now */
    for (elist_t *e = l->inflight.prev; e != &l->inflight; e = e->prev) {
        rs_ccmd_t *c = ECONTAINER(e, rs_ccmd_t, link);
        if (c->written)
            break;
        c->written = 1;
    }
    if (uv_write(&wr->w, (uv_stream_t *)&l->tcp, wr->bufs, wr->n, on_written) != 0) {
        free_bufs(wr->bufs, wr->n);
        sema__free(wr);
        rs__cluster_link_drop(l, "cannot write");
    }
}

void rs__cluster_link_write_all(rs_cluster_t *cl)
{
    elist_t tmp;

    elist_init(&tmp);
    elist_splice(&tmp, &cl->dirty);
    while (!elist_empty(&tmp))
        write_out(ECONTAINER(tmp.next, rs_link_t, dirty));
}

/* A dropped connection's commands that never left their buffer go back to the head of its
 * queue, in order (they did not run), and the buffer is freed. */
static void unwritten_back(rs_link_t *l)
{
    elist_t back, *e = l->inflight.prev;

    /* they are the tail of the flight: write_out marks what it writes from the tail back */
    while (e != &l->inflight && !ECONTAINER(e, rs_ccmd_t, link)->written)
        e = e->prev;
    elist_init(&back);
    for (elist_t *q = e->next, *next; q != &l->inflight; q = next) {
        rs_ccmd_t *c = ECONTAINER(q, rs_ccmd_t, link);
        next = q->next;
        if (c->key == NULL)
            continue; /* the layer's own (AUTH, a refresh): it ends with the others */
        elist_remove(q);
        elist_push_back(&back, q);
        l->cl->nqueued++;
    }
    elist_splice(&back, &l->queued);
    elist_splice(&l->queued, &back);
    free_bufs(l->out, l->nout);
    l->out = NULL;
    l->nout = l->out_cap = 0;
    elist_remove(&l->dirty);
}

void rs__cluster_link_flush(rs_link_t *l)
{
    while (l->state == RS_CL_READY && !elist_empty(&l->queued)) {
        rs_ccmd_t *c = ECONTAINER(l->queued.next, rs_ccmd_t, link);
        elist_remove(&c->link);
        l->cl->nqueued--;
        if (rs__cluster_link_write(l, c) != 0) {
            rs__cluster_end(l->cl, c, RS_CL_UNSENT, NULL);
            return;
        }
    }
}

static void auth_cb(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *rep)
{
    rs_link_t *l = c->data;

    (void)cl;
    if (how == RS_CL_REPLY && rep->type == REDIS_REPLY_ERROR) {
        log_warn("redis cluster: AUTH on %s:%d failed: %s", l->addr.host, l->addr.port, rep->str);
        rs__cluster_link_drop(l, "AUTH failed");
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    rs_link_t *l = h->data;

    (void)hint;
    *buf = uv_buf_init(l->rbuf, sizeof l->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    rs_link_t *l = s->data;
    int gen = l->gen;

    if (n < 0) {
        rs__cluster_link_drop(l, n == UV_EOF ? "closed by Redis" : uv_strerror((int)n));
        return;
    }
    if (n == 0)
        return;
    if (redisReaderFeed(l->rd, buf->base, (size_t)n) != REDIS_OK) {
        rs__cluster_link_drop(l, "unreadable reply");
        return;
    }
    while (l->state == RS_CL_READY && l->gen == gen) {
        void *rep = NULL;
        if (redisReaderGetReply(l->rd, &rep) != REDIS_OK) {
            rs__cluster_link_drop(l, "unreadable reply");
            return;
        }
        if (rep == NULL)
            return;
        rs__cluster_reply(l, rep);
        freeReplyObject(rep);
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    rs_link_t *l = req->data;
    rs_cluster_t *cl = l->cl;

    if (l->state != RS_CL_CONNECTING)
        return;
    if (status < 0) {
        rs__cluster_link_drop(l, uv_strerror(status));
        return;
    }
    l->rd = redisReaderCreate();
    if (l->rd == NULL || uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read) != 0) {
        rs__cluster_link_drop(l, "out of memory");
        return;
    }
    uv_tcp_nodelay(&l->tcp, 1);
    l->state = RS_CL_READY;
    l->backoff_ms = 0;
    cl->st.connects++;
    if (cl->pass[0] != '\0') {
        int k = 0;
        l->auth_argv[k++] = "AUTH";
        if (cl->user[0] != '\0')
            l->auth_argv[k++] = cl->user;
        l->auth_argv[k++] = cl->pass;
        for (int i = 0; i < k; i++)
            l->auth_lens[i] = strlen(l->auth_argv[i]);
        l->auth = (rs_ccmd_t){.argc = k,
                              .argv = l->auth_argv,
                              .lens = l->auth_lens,
                              .cb = auth_cb,
                              .data = l,
                              .deadline = rs__cluster_now(cl) + cl->timeout_ms};
        if (rs__cluster_link_write(l, &l->auth) != 0) {
            rs__cluster_link_drop(l, "out of memory");
            return;
        }
    }
    if (l->sub)
        rs__cluster_sub_tick(l);
    rs__cluster_link_flush(l);
}

/* Connect to the node at ip (its address, as text). */
static void connect_to(rs_link_t *l, const char *ip)
{
    struct sockaddr_storage sa;
    int rc;

    if ((uv_ip4_addr(ip, l->addr.port, (struct sockaddr_in *)&sa) != 0 &&
         uv_ip6_addr(ip, l->addr.port, (struct sockaddr_in6 *)&sa) != 0) ||
        uv_tcp_init(l->cl->loop, &l->tcp) != 0) {
        log_warn("redis cluster: cannot connect to %s:%d: no socket for %s", l->addr.host,
                 l->addr.port, ip);
        l->state = RS_CL_DOWN;
        rs__cluster_link_drop(l, "no socket");
        return;
    }
    l->cl->handles++;
    l->tcp.data = l;
    l->creq.data = l;
    l->state = RS_CL_CONNECTING;
    if ((rc = uv_tcp_connect(&l->creq, &l->tcp, (const struct sockaddr *)&sa, on_connect)) != 0)
        rs__cluster_link_drop(l, uv_strerror(rc));
}

static void on_resolved(rs_resolve_t *v)
{
    rs_link_t *l = v->data;

    l->cl->handles--;
    if (l->state != RS_CL_RESOLVING || l->cl->closing) {
        if (l->state == RS_CL_RESOLVING)
            l->state = RS_CL_DOWN;
        return;
    }
    if (v->failed) {
        log_warn("redis cluster: cannot connect to %s:%d: %s", l->addr.host, l->addr.port, v->why);
        l->state = RS_CL_DOWN;
        rs__cluster_link_drop(l, "cannot resolve");
        return;
    }
    connect_to(l, v->addr);
}

void rs__cluster_link_connect(rs_link_t *l)
{
    if (l->state != RS_CL_DOWN || l->cl->closing)
        return;
    l->gen++;
    l->state = RS_CL_RESOLVING; /* (an address too: its connect then starts from the loop) */
    if (rs__resolve_start(&l->rv, l->cl->loop, l->addr.host, on_resolved, l) != 0) {
        log_warn("redis cluster: cannot connect to %s:%d: %s", l->addr.host, l->addr.port,
                 l->rv.why);
        l->state = RS_CL_DOWN;
        rs__cluster_link_drop(l, "cannot resolve");
        return;
    }
    l->cl->handles++;
}

/* The connection is gone: what was in flight ends RS_CL_UNKNOWN (its sender decides), what
 * waited for it stays queued for the next connection (re-routed when the map moves the slot),
 * the channels it carried are subscribed again, and the map is asked again: the node may
 * have failed over. */
void rs__cluster_link_drop(rs_link_t *l, const char *why)
{
    rs_cluster_t *cl = l->cl;
    uint64_t jitter = uv_hrtime() / 1000; /* instances do not reconnect in step */

    if (l->state == RS_CL_READY || l->state == RS_CL_CONNECTING) {
        if (!cl->closing)
            log_warn("redis cluster: %s %s:%d: %s",
                     l->state == RS_CL_READY ? "lost" : "cannot reach", l->addr.host, l->addr.port,
                     why);
        cl->st.drops++;
        l->state = RS_CL_CLOSING;
        l->gen++;
        uv_close((uv_handle_t *)&l->tcp, on_closed);
    } else if (l->state != RS_CL_CLOSING) {
        l->state = RS_CL_DOWN;
    }
    if (l->rd != NULL) {
        redisReaderFree(l->rd);
        l->rd = NULL;
    }
    l->backoff_ms = l->backoff_ms == 0 ? 50 : l->backoff_ms * 2;
    if (l->backoff_ms > RS_CL_BACKOFF_MAX_MS)
        l->backoff_ms = RS_CL_BACKOFF_MAX_MS;
    l->retry_at = rs__cluster_now(cl) + l->backoff_ms / 2 + jitter % l->backoff_ms;
    for (elist_t *e = l->chans.next; e != &l->chans; e = e->next)
        ECONTAINER(e, rs_chan_t, on)->confirmed = ECONTAINER(e, rs_chan_t, on)->asked = 0;
    if (l == cl->refresh_link) {
        /* a refresh waiting for this connection asks another node at the next tick; one in
         * flight ends with the other in-flight commands below */
        cl->refresh_link = NULL;
        for (elist_t *e = l->queued.next; e != &l->queued; e = e->next)
            if (e == &cl->refresh.link) {
                elist_remove(e);
                cl->nqueued--;
                cl->refreshing = 0;
                cl->refresh_again = 1;
                break;
            }
    }
    unwritten_back(l);
    rs__cluster_end_all(cl, &l->inflight, RS_CL_UNKNOWN, 0);
    if (!cl->closing)
        rs__cluster_refresh(cl);
}

const char *rs__cluster_address(rs_cluster_t *cl, const rs_slot_addr_t *a)
{
    rs_link_t *l;

    if (rs__resolve_is_address(a->host))
        return a->host;
    l = rs__cluster_link_find(cl, a, 0, 0);
    return l != NULL && l->rv.addr[0] != '\0' ? l->rv.addr : NULL;
}
