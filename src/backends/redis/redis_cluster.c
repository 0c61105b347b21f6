/* SPDX-License-Identifier: MIT */
/* redis_cluster.c - commands and sharded pub/sub on a Redis Cluster (redis_cluster.h).
 *
 * Connections are libuv TCP handles that speak RESP through hiredis's reader and command
 * formatter, rather than hiredis's asynchronous contexts: hiredis 0.14 (Debian 12) does not
 * know SSUBSCRIBE, so a sharded message on one of its contexts finds no callback and trips
 * its assertion that an unasked reply only comes to a subscribed context; here the subscriber
 * connection reads every reply as a pub/sub frame, and a command connection keeps its own
 * queue of commands in flight, with their deadlines. */
#include "backends/redis/redis_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "sema/error.h"

#define TICK_MS 25  /* deadlines, retries and reconnects are looked at this often */
#define RETRY_MS 50 /* TRYAGAIN, CLUSTERDOWN: sent again this much later */
#define BACKOFF_MAX_MS 2000
#define LINKS_MAX (2 * RS_SLOT_NODES_MAX)

enum { L_DOWN, L_RESOLVING, L_CONNECTING, L_READY, L_CLOSING };

typedef struct rs_link {
    elist_t all; /* cl->links */
    rs_cluster_t *cl;
    rs_slot_addr_t addr;
    int sub;   /* the sharded subscriber connection of this node */
    int state; /* L_* */
    int gen;   /* connection attempts: a late callback of an earlier one is ignored */
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_getaddrinfo_t gai;
    redisReader *rd;
    elist_t queued;   /* rs_ccmd_t waiting for the connection */
    elist_t inflight; /* rs_ccmd_t written, in order */
    elist_t chans;    /* rs_chan_t subscribed (or being subscribed) here */
    uint64_t backoff_ms, retry_at;
    rs_ccmd_t auth;
    const char *auth_argv[3];
    size_t auth_lens[3];
    char rbuf[16384];
} rs_link_t;

typedef struct {
    enode_t node; /* cl->chans, by name */
    elist_t on;   /* its link's chans, or cl->chan_wait */
    rs_link_t *link;
    unsigned slot;
    uint8_t confirmed; /* its SSUBSCRIBE was confirmed on link */
    uint8_t asked;     /* its SSUBSCRIBE was written on link's current connection */
    size_t len;
    char name[];
} rs_chan_t;

struct rs_cluster {
    uv_loop_t *loop;
    rs_cluster_events_t ev;
    rs_slot_addr_t seeds[RS_CL_SEEDS_MAX];
    int nseeds;
    char user[128], pass[256];
    uint64_t timeout_ms;
    rs_slotmap_t *map;
    int have_map;
    elist_t links;
    int nlinks;
    elist_t waiting; /* commands waiting for the map */
    elist_t retry;   /* commands waiting for their retry_at */
    size_t nqueued;  /* commands waiting anywhere but in flight */
    etab_t chans;
    size_t nchans;
    elist_t chan_wait; /* channels whose slot has no known primary yet */
    /* the slot map's refresh */
    rs_ccmd_t refresh;
    const char *refresh_argv[2];
    size_t refresh_lens[2];
    rs_link_t *refresh_link;
    int refreshing, refresh_again, refresh_at, refresh_slots;
    uint64_t refresh_not_before;
    uv_timer_t tick;
    int handles, closing;
    rs_cluster_stats_t st;
};

static void link_drop(rs_link_t *l, const char *why);
static int route(rs_cluster_t *cl, rs_ccmd_t *c);
static void refresh_map(rs_cluster_t *cl);
static void chan_route(rs_cluster_t *cl, rs_chan_t *ch);

static uint64_t now_ms(const rs_cluster_t *cl)
{
    return uv_now(cl->loop);
}

static int same_addr(const rs_slot_addr_t *a, const rs_slot_addr_t *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* ---- the address ---- */

int rs__cluster_seeds(const char *s, size_t n, rs_slot_addr_t *seeds)
{
    int k = 0;

    while (n > 0) {
        const char *comma = memchr(s, ',', n);
        size_t len = comma ? (size_t)(comma - s) : n;
        char buf[RS_HOST_MAX + 8], err[RS_HOST_MAX + 24];
        rs_redirect_t rd;
        int has_port = 0;

        if (k == RS_CL_SEEDS_MAX || len == 0 || len >= RS_HOST_MAX)
            return -1;
        /* HOST:PORT as a redirect reads it; a bare HOST gets 6379 */
        for (size_t i = len; i > 0 && !has_port; i--)
            if (s[i - 1] == ':' || s[i - 1] == ']')
                has_port = s[i - 1] == ':' && !(s[0] != '[' && memchr(s, ':', i - 1) != NULL);
        if (s[0] == '[' && s[len - 1] == ']')
            has_port = 0;
        snprintf(buf, sizeof buf, "%.*s%s", (int)len, s, has_port ? "" : ":6379");
        snprintf(err, sizeof err, "MOVED 0 %s", buf);
        if (rs__slot_redirect(err, strlen(err), NULL, &rd) != RS_REDIR_MOVED)
            return -1;
        seeds[k++] = rd.to;
        s += len;
        n -= len;
        if (comma != NULL) {
            if (n == 1)
                return -1; /* a trailing comma */
            s++;
            n--;
        }
    }
    return k > 0 ? k : -1;
}

/* ---- ending a command ---- */

static void cmd_end(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *rep)
{
    if (how == RS_CL_UNKNOWN)
        cl->st.unknown++;
    c->cb(cl, c, how, rep);
}

/* Move every command of a list to a local one, then end each: a callback may send again. */
static void end_all(rs_cluster_t *cl, elist_t *from, int how, int counted)
{
    elist_t tmp;

    elist_init(&tmp);
    elist_splice(&tmp, from);
    while (!elist_empty(&tmp)) {
        rs_ccmd_t *c = ECONTAINER(tmp.next, rs_ccmd_t, link);
        elist_remove(&c->link);
        if (counted)
            cl->nqueued--;
        cmd_end(cl, c, how, NULL);
    }
}

/* ---- connections ---- */

static rs_link_t *link_find(rs_cluster_t *cl, const rs_slot_addr_t *a, int sub, int create)
{
    rs_link_t *l;

    for (elist_t *e = cl->links.next; e != &cl->links; e = e->next) {
        l = ECONTAINER(e, rs_link_t, all);
        if (l->sub == sub && same_addr(&l->addr, a))
            return l;
    }
    if (!create || cl->nlinks == LINKS_MAX || (l = sema__calloc(1, sizeof *l)) == NULL)
        return NULL;
    l->cl = cl;
    l->addr = *a;
    l->sub = sub;
    l->state = L_DOWN;
    elist_init(&l->queued);
    elist_init(&l->inflight);
    elist_init(&l->chans);
    elist_push_back(&cl->links, &l->all);
    cl->nlinks++;
    return l;
}

static void on_closed(uv_handle_t *h)
{
    rs_link_t *l = h->data;

    l->cl->handles--;
    l->state = L_DOWN;
}

typedef struct {
    uv_write_t w;
    char *cmd;
} wreq_t;

static void on_written(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    rs_link_t *l = w->data;

    redisFreeCommand(wr->cmd);
    sema__free(wr);
    if (status < 0 && status != UV_ECANCELED && l->state == L_READY)
        link_drop(l, uv_strerror(status));
}

/* Write one command (after ASKING when c->ask) on a ready connection; it goes in flight. */
static int link_write(rs_link_t *l, rs_ccmd_t *c)
{
    static char asking[] = "*1\r\n$6\r\nASKING\r\n";
    wreq_t *wr = sema__malloc(sizeof *wr);
    uv_buf_t bufs[2];
    int n, nb = 0;

    if (wr == NULL)
        return SEMA_ENOMEM;
    n = redisFormatCommandArgv(&wr->cmd, c->argc, c->argv, c->lens);
    if (n < 0) {
        sema__free(wr);
        return SEMA_ENOMEM;
    }
    c->asking = c->ask;
    c->ask = 0;
    if (c->asking)
        bufs[nb++] = uv_buf_init(asking, sizeof asking - 1);
    bufs[nb++] = uv_buf_init(wr->cmd, (unsigned)n);
    wr->w.data = l;
    if (uv_write(&wr->w, (uv_stream_t *)&l->tcp, bufs, (unsigned)nb, on_written) != 0) {
        redisFreeCommand(wr->cmd);
        sema__free(wr);
        return SEMA_EIO;
    }
    elist_push_back(&l->inflight, &c->link);
    l->cl->st.sent++;
    return 0;
}

static void link_flush(rs_link_t *l)
{
    while (l->state == L_READY && !elist_empty(&l->queued)) {
        rs_ccmd_t *c = ECONTAINER(l->queued.next, rs_ccmd_t, link);
        elist_remove(&c->link);
        l->cl->nqueued--;
        if (link_write(l, c) != 0) {
            cmd_end(l->cl, c, RS_CL_UNSENT, NULL);
            return;
        }
    }
}

static void chan_send(rs_link_t *l, const char *verb, rs_chan_t *ch);

static void auth_cb(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *rep)
{
    rs_link_t *l = c->data;

    (void)cl;
    if (how == RS_CL_REPLY && rep->type == REDIS_REPLY_ERROR) {
        log_warn("redis cluster: AUTH on %s:%d failed: %s", l->addr.host, l->addr.port, rep->str);
        link_drop(l, "AUTH failed");
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    rs_link_t *l = h->data;

    (void)hint;
    *buf = uv_buf_init(l->rbuf, sizeof l->rbuf);
}

static void on_reply(rs_link_t *l, redisReply *rep);

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    rs_link_t *l = s->data;
    int gen = l->gen;

    if (n < 0) {
        link_drop(l, n == UV_EOF ? "closed by Redis" : uv_strerror((int)n));
        return;
    }
    if (n == 0)
        return;
    if (redisReaderFeed(l->rd, buf->base, (size_t)n) != REDIS_OK) {
        link_drop(l, "unreadable reply");
        return;
    }
    while (l->state == L_READY && l->gen == gen) {
        void *rep = NULL;
        if (redisReaderGetReply(l->rd, &rep) != REDIS_OK) {
            link_drop(l, "unreadable reply");
            return;
        }
        if (rep == NULL)
            return;
        on_reply(l, rep);
        freeReplyObject(rep);
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    rs_link_t *l = req->data;
    rs_cluster_t *cl = l->cl;

    if (l->state != L_CONNECTING)
        return;
    if (status < 0) {
        link_drop(l, uv_strerror(status));
        return;
    }
    l->rd = redisReaderCreate();
    if (l->rd == NULL || uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read) != 0) {
        link_drop(l, "out of memory");
        return;
    }
    uv_tcp_nodelay(&l->tcp, 1);
    l->state = L_READY;
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
                              .deadline = now_ms(cl) + cl->timeout_ms};
        if (link_write(l, &l->auth) != 0) {
            link_drop(l, "out of memory");
            return;
        }
    }
    if (l->sub) {
        for (elist_t *e = l->chans.next; e != &l->chans; e = e->next)
            chan_send(l, "SSUBSCRIBE", ECONTAINER(e, rs_chan_t, on));
    }
    link_flush(l);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    rs_link_t *l = g->data;

    l->cl->handles--;
    if (l->state != L_RESOLVING || l->cl->closing) {
        uv_freeaddrinfo(res);
        if (l->state == L_RESOLVING)
            l->state = L_DOWN;
        return;
    }
    if (status < 0 || uv_tcp_init(l->cl->loop, &l->tcp) != 0) {
        uv_freeaddrinfo(res);
        log_warn("redis cluster: cannot resolve %s: %s", l->addr.host,
                 status < 0 ? uv_strerror(status) : "no socket");
        l->state = L_DOWN;
        link_drop(l, "cannot resolve");
        return;
    }
    l->cl->handles++;
    l->tcp.data = l;
    l->creq.data = l;
    l->state = L_CONNECTING;
    status = uv_tcp_connect(&l->creq, &l->tcp, res->ai_addr, on_connect);
    uv_freeaddrinfo(res);
    if (status != 0)
        link_drop(l, uv_strerror(status));
}

static void link_connect(rs_link_t *l)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    char port[8];

    if (l->state != L_DOWN || l->cl->closing)
        return;
    snprintf(port, sizeof port, "%d", l->addr.port);
    l->gen++;
    l->gai.data = l;
    l->state = L_RESOLVING;
    if (uv_getaddrinfo(l->cl->loop, &l->gai, on_resolved, l->addr.host, port, &hints) != 0) {
        l->state = L_DOWN;
        link_drop(l, "cannot resolve");
        return;
    }
    l->cl->handles++;
}

/* The connection is gone: what was in flight ends RS_CL_UNKNOWN (its sender decides), what
 * waited for it stays queued for the next connection (re-routed when the map moves the slot),
 * the channels it carried are subscribed again, and the map is asked again: the node may
 * have failed over. */
static void link_drop(rs_link_t *l, const char *why)
{
    rs_cluster_t *cl = l->cl;
    uint64_t jitter = uv_hrtime() / 1000; /* instances do not reconnect in step */

    if (l->state == L_READY || l->state == L_CONNECTING) {
        if (!cl->closing)
            log_warn("redis cluster: %s %s:%d: %s", l->state == L_READY ? "lost" : "cannot reach",
                     l->addr.host, l->addr.port, why);
        cl->st.drops++;
        l->state = L_CLOSING;
        l->gen++;
        uv_close((uv_handle_t *)&l->tcp, on_closed);
    } else if (l->state != L_CLOSING) {
        l->state = L_DOWN;
    }
    if (l->rd != NULL) {
        redisReaderFree(l->rd);
        l->rd = NULL;
    }
    l->backoff_ms = l->backoff_ms == 0 ? 50 : l->backoff_ms * 2;
    if (l->backoff_ms > BACKOFF_MAX_MS)
        l->backoff_ms = BACKOFF_MAX_MS;
    l->retry_at = now_ms(cl) + l->backoff_ms / 2 + jitter % l->backoff_ms;
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
    end_all(cl, &l->inflight, RS_CL_UNKNOWN, 0);
    if (!cl->closing)
        refresh_map(cl);
}

/* ---- routing ---- */

static void enqueue(rs_cluster_t *cl, elist_t *list, rs_ccmd_t *c)
{
    elist_push_back(list, &c->link);
    cl->nqueued++;
}

/* Send c where its slot is served (or where ASK said), or queue it until that is known or
 * connected. Never runs a callback. */
static int route(rs_cluster_t *cl, rs_ccmd_t *c)
{
    const rs_slot_addr_t *a = c->ask ? &c->ask_to : rs__slotmap_owner(cl->map, c->slot);
    rs_link_t *l;

    if (a == NULL) {
        enqueue(cl, &cl->waiting, c);
        refresh_map(cl);
        return 0;
    }
    l = link_find(cl, a, 0, 1);
    if (l == NULL)
        return SEMA_ENOMEM;
    if (l->state != L_READY) {
        enqueue(cl, &l->queued, c);
        if (l->state == L_DOWN && now_ms(cl) >= l->retry_at)
            link_connect(l);
        return 0;
    }
    return link_write(l, c);
}

int rs__cluster_send(rs_cluster_t *cl, rs_ccmd_t *c)
{
    if (cl->closing)
        return SEMA_ESHUTDOWN;
    if (cl->nqueued >= RS_CL_QUEUED_MAX)
        return SEMA_EBUSY;
    c->slot = c->key != NULL ? rs__slot_of(c->key, c->key_len) : 0;
    c->deadline = now_ms(cl) + cl->timeout_ms;
    c->redirects = 0;
    c->ask = c->asking = 0;
    c->retry_at = 0;
    return route(cl, c);
}

/* Send c again after a redirect or a wait; it did not run, so it cannot end UNKNOWN here. */
static void reroute(rs_cluster_t *cl, rs_ccmd_t *c)
{
    if (route(cl, c) != 0)
        cmd_end(cl, c, RS_CL_UNSENT, NULL);
}

static int err_is(const redisReply *rep, const char *prefix)
{
    size_t n = strlen(prefix);
    return rep->len >= n && memcmp(rep->str, prefix, n) == 0;
}

/* A command's reply: follow a redirect, wait out TRYAGAIN and CLUSTERDOWN, or hand it over. */
static void cmd_reply(rs_link_t *l, rs_ccmd_t *c, redisReply *rep)
{
    rs_cluster_t *cl = l->cl;
    rs_redirect_t rd;
    int kind;

    if (rep->type != REDIS_REPLY_ERROR || c->key == NULL) {
        cmd_end(cl, c, RS_CL_REPLY, rep);
        return;
    }
    kind = rs__slot_redirect(rep->str, rep->len, l->addr.host, &rd);
    if (kind != RS_REDIR_NONE && c->redirects < RS_CL_REDIRECTS_MAX) {
        c->redirects++;
        if (kind == RS_REDIR_MOVED) {
            cl->st.moved++;
            if (rs__slotmap_moved(cl->map, &rd) < 0)
                rs__slotmap_clear(cl->map); /* a map full of nodes: start it again */
            refresh_map(cl);
        } else {
            cl->st.asks++;
            c->ask = 1;
            c->ask_to = rd.to;
        }
        reroute(cl, c);
        return;
    }
    if ((err_is(rep, "TRYAGAIN") || err_is(rep, "CLUSTERDOWN")) &&
        now_ms(cl) + RETRY_MS < c->deadline) {
        cl->st.tryagain++;
        if (err_is(rep, "CLUSTERDOWN"))
            refresh_map(cl);
        c->retry_at = now_ms(cl) + RETRY_MS;
        enqueue(cl, &cl->retry, c);
        return;
    }
    cmd_end(cl, c, RS_CL_REPLY, rep);
}

/* ---- sharded pub/sub ---- */

static int chan_eq(const enode_t *n, const void *key, size_t len)
{
    const rs_chan_t *ch = ECONTAINER(n, rs_chan_t, node);
    return ch->len == len && memcmp(ch->name, key, len) == 0;
}

static rs_chan_t *chan_find(rs_cluster_t *cl, const char *name, size_t len)
{
    enode_t *n = etab_find(&cl->chans, etab_hash(name, len, 11), chan_eq, name, len);
    return n ? ECONTAINER(n, rs_chan_t, node) : NULL;
}

/* SSUBSCRIBE or SUNSUBSCRIBE on a subscriber connection, written at once when it is up
 * (on_connect subscribes a connection's channels). Its replies come as pub/sub frames, so
 * it is not kept in flight. */
static void chan_send(rs_link_t *l, const char *verb, rs_chan_t *ch)
{
    const char *argv[2] = {verb, ch->name};
    size_t lens[2] = {strlen(verb), ch->len};
    rs_ccmd_t c = {.argc = 2, .argv = argv, .lens = lens};

    if (l->state != L_READY || link_write(l, &c) != 0)
        return; /* a channel left unasked is asked again by the next tick */
    elist_remove(&c.link);
    ch->asked = verb[1] == 'S'; /* SSUBSCRIBE */
}

/* Put a channel on the subscriber connection of its slot's primary. */
static void chan_route(rs_cluster_t *cl, rs_chan_t *ch)
{
    const rs_slot_addr_t *a = rs__slotmap_owner(cl->map, ch->slot);
    rs_link_t *l = a ? link_find(cl, a, 1, 1) : NULL;

    elist_remove(&ch->on);
    ch->confirmed = ch->asked = 0;
    if (l != ch->link && ch->link != NULL && ch->link->state == L_READY)
        chan_send(ch->link, "SUNSUBSCRIBE", ch);
    ch->link = l;
    if (l == NULL) {
        elist_push_back(&cl->chan_wait, &ch->on);
        refresh_map(cl);
        return;
    }
    elist_push_back(&l->chans, &ch->on);
    if (l->state == L_READY)
        chan_send(l, "SSUBSCRIBE", ch);
    else if (l->state == L_DOWN && now_ms(cl) >= l->retry_at)
        link_connect(l);
}

int rs__cluster_subscribe(rs_cluster_t *cl, const char *chan, size_t len)
{
    rs_chan_t *ch;

    if (chan_find(cl, chan, len) != NULL)
        return 0;
    if (cl->nchans >= RS_CL_CHANNELS_MAX)
        return SEMA_EBUSY;
    if ((ch = sema__calloc(1, sizeof *ch + len + 1)) == NULL)
        return SEMA_ENOMEM;
    memcpy(ch->name, chan, len);
    ch->len = len;
    ch->slot = rs__slot_of(chan, len);
    ch->node.hash = etab_hash(chan, len, 11);
    elist_init(&ch->on);
    etab_insert(&cl->chans, &ch->node);
    cl->nchans++;
    chan_route(cl, ch);
    return 0;
}

static void chan_free(rs_cluster_t *cl, rs_chan_t *ch)
{
    etab_remove(&cl->chans, &ch->node);
    elist_remove(&ch->on);
    cl->nchans--;
    sema__free(ch);
}

void rs__cluster_unsubscribe(rs_cluster_t *cl, const char *chan, size_t len)
{
    rs_chan_t *ch = chan_find(cl, chan, len);

    if (ch == NULL)
        return;
    if (ch->link != NULL && ch->link->state == L_READY)
        chan_send(ch->link, "SUNSUBSCRIBE", ch);
    chan_free(cl, ch);
}

/* An error on a subscriber connection: a MOVED (the map was behind) sends its unconfirmed
 * channels where the map now says; anything else drops the connection. */
static void sub_refused(rs_link_t *l, const redisReply *rep)
{
    rs_cluster_t *cl = l->cl;
    rs_redirect_t rd;

    if (rs__slot_redirect(rep->str, rep->len, l->addr.host, &rd) != RS_REDIR_MOVED) {
        log_warn("redis cluster: %s:%d refused a subscription: %s", l->addr.host, l->addr.port,
                 rep->str);
        link_drop(l, "subscription refused");
        return;
    }
    cl->st.moved++;
    if (rs__slotmap_moved(cl->map, &rd) < 0)
        rs__slotmap_clear(cl->map);
    refresh_map(cl);
    for (elist_t *e = l->chans.next, *next; e != &l->chans; e = next) {
        rs_chan_t *ch = ECONTAINER(e, rs_chan_t, on);
        next = e->next;
        if (!ch->confirmed && rs__slotmap_owner(cl->map, ch->slot) != NULL &&
            !same_addr(rs__slotmap_owner(cl->map, ch->slot), &l->addr))
            chan_route(cl, ch);
    }
}

/* A frame on a subscriber connection: smessage, or a (un)subscription's confirmation. A
 * SUNSUBSCRIBE nobody asked for means the slot left this node: the channel follows it. */
static void sub_frame(rs_link_t *l, redisReply *rep)
{
    rs_cluster_t *cl = l->cl;
    const redisReply *kind, *name;
    rs_chan_t *ch;

    if (rep->type == REDIS_REPLY_ERROR) {
        sub_refused(l, rep);
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_STRING)
        return; /* AUTH's +OK */
    kind = rep->element[0];
    name = rep->element[1];
    ch = chan_find(cl, name->str, name->len);
    if (strcmp(kind->str, "smessage") == 0) {
        if (rep->element[2]->type == REDIS_REPLY_STRING && cl->ev.message != NULL)
            cl->ev.message(cl->ev.data, name->str, name->len, rep->element[2]->str,
                           rep->element[2]->len);
    } else if (strcmp(kind->str, "ssubscribe") == 0) {
        if (ch != NULL && ch->link == l && !ch->confirmed) {
            ch->confirmed = 1;
            if (cl->ev.subscribed != NULL)
                cl->ev.subscribed(cl->ev.data, ch->name, ch->len);
        }
    } else if (strcmp(kind->str, "sunsubscribe") == 0) {
        if (ch != NULL && ch->link == l && ch->confirmed) {
            ch->confirmed = 0;
            ch->link = NULL;
            elist_remove(&ch->on);
            elist_push_back(&cl->chan_wait, &ch->on);
            refresh_map(cl);
        }
    }
}

static void on_reply(rs_link_t *l, redisReply *rep)
{
    rs_ccmd_t *c;

    if (l->sub && (elist_empty(&l->inflight) || rep->type == REDIS_REPLY_ARRAY)) {
        sub_frame(l, rep);
        return;
    }
    if (elist_empty(&l->inflight)) {
        link_drop(l, "a reply nobody asked for");
        return;
    }
    c = ECONTAINER(l->inflight.next, rs_ccmd_t, link);
    if (c->asking) { /* ASKING's +OK (or its error: the command's own reply says more) */
        c->asking = 0;
        return;
    }
    elist_remove(&c->link);
    cmd_reply(l, c, rep);
}

/* ---- the slot map ---- */

/* Whom to ask for the map: the next seed or known node with a connection up, else the next
 * one (in turn, so a dead node is not asked twice in a row). */
static const rs_slot_addr_t *refresh_target(rs_cluster_t *cl)
{
    int n = cl->map->nnodes + cl->nseeds;

    for (int k = 0; k < n; k++) {
        int i = (cl->refresh_at + k) % n;
        const rs_slot_addr_t *a = i < cl->nseeds ? &cl->seeds[i] : &cl->map->nodes[i - cl->nseeds];
        rs_link_t *l = link_find(cl, a, 0, 0);
        if (l != NULL && l->state == L_READY) {
            cl->refresh_at = i + 1;
            return a;
        }
    }
    {
        int i = cl->refresh_at++ % n;
        return i < cl->nseeds ? &cl->seeds[i] : &cl->map->nodes[i - cl->nseeds];
    }
}

static void apply_map(rs_cluster_t *cl)
{
    elist_t tmp;

    cl->have_map = cl->map->covered > 0;
    /* commands queued for a connection whose node no longer serves their slot move */
    for (elist_t *e = cl->links.next; e != &cl->links; e = e->next) {
        rs_link_t *l = ECONTAINER(e, rs_link_t, all);
        for (elist_t *q = l->queued.next, *next; q != &l->queued; q = next) {
            rs_ccmd_t *c = ECONTAINER(q, rs_ccmd_t, link);
            const rs_slot_addr_t *a = rs__slotmap_owner(cl->map, c->slot);
            next = q->next;
            if (c->key != NULL && !c->ask && (a == NULL || !same_addr(a, &l->addr))) {
                elist_remove(&c->link);
                enqueue(cl, &cl->waiting, c);
            }
        }
        for (elist_t *q = l->chans.next, *next; q != &l->chans; q = next) {
            rs_chan_t *ch = ECONTAINER(q, rs_chan_t, on);
            const rs_slot_addr_t *a = rs__slotmap_owner(cl->map, ch->slot);
            next = q->next;
            if (a == NULL || !same_addr(a, &l->addr))
                chan_route(cl, ch);
        }
    }
    elist_init(&tmp);
    elist_splice(&tmp, &cl->waiting);
    while (!elist_empty(&tmp)) {
        rs_ccmd_t *c = ECONTAINER(tmp.next, rs_ccmd_t, link);
        elist_remove(&c->link);
        cl->nqueued--;
        reroute(cl, c);
    }
    elist_splice(&tmp, &cl->chan_wait);
    while (!elist_empty(&tmp))
        chan_route(cl, ECONTAINER(tmp.next, rs_chan_t, on));
}

static void refresh_cb(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *rep)
{
    rs_slotmap_t *m = cl->map;
    int ok;

    (void)c;
    cl->refreshing = 0;
    cl->refresh_link = NULL;
    if (how != RS_CL_REPLY || cl->closing) {
        cl->refresh_again = 1; /* the next tick asks another node */
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR && !cl->refresh_slots) {
        cl->refresh_slots = 1; /* a Redis before 7: CLUSTER SLOTS */
        cl->refresh_again = 1;
        return;
    }
    ok = cl->refresh_slots ? rs__slotmap_from_slots(m, rep, cl->refresh.ask_to.host)
                           : rs__slotmap_from_shards(m, rep, cl->refresh.ask_to.host);
    if (ok != 0 || m->covered == 0) {
        log_warn("redis cluster: %s:%d gave no usable slot map", cl->refresh.ask_to.host,
                 cl->refresh.ask_to.port);
        cl->refresh_again = 1;
        return;
    }
    cl->st.refreshes++;
    cl->refresh_not_before = now_ms(cl) + TICK_MS;
    apply_map(cl);
}

/* Ask a node for the whole map (one request at a time; asked again at the next tick when
 * one is in flight, or too soon after the last). */
static void refresh_map(rs_cluster_t *cl)
{
    const rs_slot_addr_t *a;
    rs_link_t *l;

    if (cl->refreshing || cl->closing || now_ms(cl) < cl->refresh_not_before) {
        cl->refresh_again = 1;
        return;
    }
    cl->refresh_again = 0;
    a = refresh_target(cl);
    l = link_find(cl, a, 0, 1);
    if (l == NULL)
        return;
    cl->refresh_argv[0] = "CLUSTER";
    cl->refresh_argv[1] = cl->refresh_slots ? "SLOTS" : "SHARDS";
    cl->refresh_lens[0] = 7;
    cl->refresh_lens[1] = strlen(cl->refresh_argv[1]);
    /* (ask_to only remembers whom it asked: the command goes to that node's connection) */
    cl->refresh = (rs_ccmd_t){.argc = 2,
                              .argv = cl->refresh_argv,
                              .lens = cl->refresh_lens,
                              .cb = refresh_cb,
                              .ask_to = *a,
                              .deadline = now_ms(cl) + cl->timeout_ms};
    cl->refreshing = 1;
    cl->refresh_link = l;
    if (l->state == L_READY) {
        if (link_write(l, &cl->refresh) != 0) {
            cl->refreshing = 0;
            cl->refresh_again = 1;
        }
        return;
    }
    elist_push_back(&l->queued, &cl->refresh.link);
    cl->nqueued++;
    if (l->state == L_DOWN)
        link_connect(l);
}

/* ---- the tick: deadlines, retries, reconnects ---- */

static void expire_list(rs_cluster_t *cl, elist_t *list, int how, uint64_t now)
{
    for (elist_t *e = list->next, *next; e != list; e = next) {
        rs_ccmd_t *c = ECONTAINER(e, rs_ccmd_t, link);
        next = e->next;
        if (c->deadline <= now) {
            elist_remove(&c->link);
            cl->nqueued--;
            cmd_end(cl, c, how, NULL);
            next = list->next; /* a callback may have changed the list */
        }
    }
}

static void tick_link(rs_cluster_t *cl, rs_link_t *l, uint64_t now)
{
    if (l->state == L_READY && !elist_empty(&l->inflight) &&
        ECONTAINER(l->inflight.next, rs_ccmd_t, link)->deadline <= now) {
        cl->st.timeouts++;
        link_drop(l, "Redis did not answer in time");
    }
    expire_list(cl, &l->queued, RS_CL_UNSENT, now);
    if (l->state == L_DOWN && now >= l->retry_at &&
        (!elist_empty(&l->queued) || !elist_empty(&l->chans)))
        link_connect(l);
    if (l->sub && l->state == L_READY) {
        for (elist_t *e = l->chans.next; e != &l->chans; e = e->next) {
            rs_chan_t *ch = ECONTAINER(e, rs_chan_t, on);
            if (!ch->asked)
                chan_send(l, "SSUBSCRIBE", ch); /* one a failed write left out */
        }
    }
}

static void on_tick(uv_timer_t *t)
{
    rs_cluster_t *cl = t->data;
    uint64_t now = now_ms(cl);
    elist_t due;

    for (elist_t *e = cl->links.next; e != &cl->links; e = e->next)
        tick_link(cl, ECONTAINER(e, rs_link_t, all), now);
    expire_list(cl, &cl->waiting, RS_CL_UNSENT, now);
    elist_init(&due);
    for (elist_t *e = cl->retry.next, *next; e != &cl->retry; e = next) {
        rs_ccmd_t *c = ECONTAINER(e, rs_ccmd_t, link);
        next = e->next;
        if (c->retry_at <= now) {
            elist_remove(&c->link);
            elist_push_back(&due, &c->link);
        }
    }
    while (!elist_empty(&due)) {
        rs_ccmd_t *c = ECONTAINER(due.next, rs_ccmd_t, link);
        elist_remove(&c->link);
        cl->nqueued--;
        reroute(cl, c);
    }
    if (cl->refresh_again && !cl->refreshing)
        refresh_map(cl);
}

/* ---- lifecycle ---- */

int rs__cluster_open(uv_loop_t *loop, const rs_slot_addr_t *seeds, int nseeds, const char *user,
                     const char *pass, uint64_t timeout_ms, const rs_cluster_events_t *ev,
                     rs_cluster_t **out)
{
    rs_cluster_t *cl;

    if (nseeds < 1 || nseeds > RS_CL_SEEDS_MAX || strlen(user) >= sizeof cl->user ||
        strlen(pass) >= sizeof cl->pass)
        return SEMA_EINVAL;
    if ((cl = sema__calloc(1, sizeof *cl)) == NULL)
        return SEMA_ENOMEM;
    if ((cl->map = sema__malloc(sizeof *cl->map)) == NULL || etab_init(&cl->chans, 64) != 0) {
        sema__free(cl->map);
        sema__free(cl);
        return SEMA_ENOMEM;
    }
    cl->loop = loop;
    cl->ev = *ev;
    memcpy(cl->seeds, seeds, (size_t)nseeds * sizeof *seeds);
    cl->nseeds = nseeds;
    memcpy(cl->user, user, strlen(user) + 1);
    memcpy(cl->pass, pass, strlen(pass) + 1);
    cl->timeout_ms = timeout_ms;
    rs__slotmap_clear(cl->map);
    elist_init(&cl->links);
    elist_init(&cl->waiting);
    elist_init(&cl->retry);
    elist_init(&cl->chan_wait);
    uv_timer_init(loop, &cl->tick);
    cl->tick.data = cl;
    cl->handles = 1;
    uv_timer_start(&cl->tick, on_tick, TICK_MS, TICK_MS);
    refresh_map(cl);
    *out = cl;
    return 0;
}

int rs__cluster_ready(const rs_cluster_t *cl)
{
    return cl->have_map && cl->map->covered == RS_SLOTS;
}

const rs_slot_addr_t *rs__cluster_owner(const rs_cluster_t *cl, unsigned slot)
{
    return rs__slotmap_owner(cl->map, slot);
}

const rs_cluster_stats_t *rs__cluster_stats(const rs_cluster_t *cl)
{
    return &cl->st;
}

static void free_chan(void *arg, enode_t *n)
{
    chan_free(arg, ECONTAINER(n, rs_chan_t, node));
}

static void free_when_closed(uv_handle_t *h)
{
    rs_cluster_t *cl = h->data;

    if (--cl->handles > 0) {
        /* links still closing: look again on the next loop turn */
        uv_timer_init(cl->loop, &cl->tick);
        cl->tick.data = cl;
        cl->handles++;
        uv_close((uv_handle_t *)&cl->tick, free_when_closed);
        return;
    }
    while (!elist_empty(&cl->links)) {
        rs_link_t *l = ECONTAINER(cl->links.next, rs_link_t, all);
        elist_remove(&l->all);
        sema__free(l);
    }
    etab_each(&cl->chans, free_chan, cl);
    etab_destroy(&cl->chans);
    sema__free(cl->map);
    sema__free(cl);
}

void rs__cluster_close(rs_cluster_t *cl)
{
    cl->closing = 1;
    for (elist_t *e = cl->links.next; e != &cl->links; e = e->next) {
        rs_link_t *l = ECONTAINER(e, rs_link_t, all);
        if (l->state == L_RESOLVING)
            uv_cancel((uv_req_t *)&l->gai);
        link_drop(l, "closing");
        expire_list(cl, &l->queued, RS_CL_UNSENT, UINT64_MAX);
    }
    expire_list(cl, &cl->waiting, RS_CL_UNSENT, UINT64_MAX);
    expire_list(cl, &cl->retry, RS_CL_UNSENT, UINT64_MAX);
    uv_timer_stop(&cl->tick);
    uv_close((uv_handle_t *)&cl->tick, free_when_closed);
}
