/* SPDX-License-Identifier: MIT */
/* redis_cluster.c - commands on a Redis Cluster (redis_cluster.h): each sent to the primary
 * that serves its key's slot, redirects followed, the slot map kept, and the tick that ends
 * commands at their deadlines and reconnects. Connections are in redis_cluster_link.c,
 * sharded subscriptions in redis_cluster_sub.c. */
#include "backends/redis/redis_cluster_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "sema/error.h"

/* ---- ending a command ---- */

void rs__cluster_end(rs_cluster_t *cl, rs_ccmd_t *c, int how, redisReply *rep)
{
    if (how == RS_CL_UNKNOWN)
        cl->st.unknown++;
    c->cb(cl, c, how, rep);
}

/* Move every command of a list to a local one, then end each: a callback may send again. */
void rs__cluster_end_all(rs_cluster_t *cl, elist_t *from, int how, int counted)
{
    elist_t tmp;

    elist_init(&tmp);
    elist_splice(&tmp, from);
    while (!elist_empty(&tmp)) {
        rs_ccmd_t *c = ECONTAINER(tmp.next, rs_ccmd_t, link);
        elist_remove(&c->link);
        if (counted)
            cl->nqueued--;
        rs__cluster_end(cl, c, how, NULL);
    }
}

/* ---- routing ---- */

void rs__cluster_enqueue(rs_cluster_t *cl, elist_t *list, rs_ccmd_t *c)
{
    elist_push_back(list, &c->link);
    cl->nqueued++;
}

#define RS_ROUTE_MOVED 1 /* route(): pinned to a node that no longer serves its slot */

/* Send c where its slot is served (or where ASK said), or queue it until that is known or
 * connected; RS_ROUTE_MOVED for a pinned command whose slot another node serves. Never runs a
 * callback. */
static int route(rs_cluster_t *cl, rs_ccmd_t *c)
{
    const rs_slot_addr_t *a = c->ask ? &c->ask_to : rs__slotmap_owner(cl->map, c->slot);
    rs_link_t *l;

    if (a == NULL) {
        rs__cluster_enqueue(cl, &cl->waiting, c);
        rs__cluster_refresh(cl);
        return 0;
    }
    if (c->pinned && !c->ask && !rs__cluster_same_addr(a, &c->pin))
        return RS_ROUTE_MOVED;
    l = rs__cluster_link_find(cl, a, 0, 1);
    if (l == NULL)
        return SEMA_ENOMEM;
    if (l->state != RS_CL_READY) {
        rs__cluster_enqueue(cl, &l->queued, c);
        if (l->state == RS_CL_DOWN && rs__cluster_now(cl) >= l->retry_at)
            rs__cluster_link_connect(l);
        return 0;
    }
    return rs__cluster_link_write(l, c);
}

int rs__cluster_send(rs_cluster_t *cl, rs_ccmd_t *c)
{
    if (cl->closing)
        return SEMA_ESHUTDOWN;
    if (cl->nqueued >= RS_CL_QUEUED_MAX)
        return SEMA_EBUSY;
    c->slot = c->key != NULL ? rs__slot_of(c->key, c->key_len) : 0;
    c->deadline = rs__cluster_now(cl) + cl->timeout_ms;
    c->redirects = 0;
    c->ask = c->asking = 0;
    c->retry_at = 0;
    int rc = route(cl, c);
    if (rc == RS_ROUTE_MOVED) { /* ended at the next tick: never from inside this call */
        rs__cluster_enqueue(cl, &cl->retry, c);
        return 0;
    }
    return rc;
}

/* Send c again after a redirect or a wait; it did not run, so it cannot end UNKNOWN here. */
static void reroute(rs_cluster_t *cl, rs_ccmd_t *c)
{
    int rc = route(cl, c);

    if (rc != 0)
        rs__cluster_end(cl, c, rc == RS_ROUTE_MOVED ? RS_CL_MOVED : RS_CL_UNSENT, NULL);
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

    c->by = l->addr;
    c->by_conn = l->gen;
    if (rep->type != REDIS_REPLY_ERROR || c->key == NULL) {
        rs__cluster_end(cl, c, RS_CL_REPLY, rep);
        return;
    }
    kind = rs__slot_redirect(rep->str, rep->len, l->addr.host, &rd);
    if (kind == RS_REDIR_ASK && c->no_ask)
        kind = RS_REDIR_NONE; /* waited out below, as TRYAGAIN is */
    if (kind != RS_REDIR_NONE && c->redirects < RS_CL_REDIRECTS_MAX) {
        c->redirects++;
        if (kind == RS_REDIR_MOVED) {
            cl->st.moved++;
            if (rs__slotmap_moved(cl->map, &rd) < 0)
                rs__slotmap_clear(cl->map); /* a map full of nodes: start it again */
            rs__cluster_refresh(cl);
        } else {
            cl->st.asks++;
            c->ask = 1;
            c->ask_to = rd.to;
        }
        reroute(cl, c);
        return;
    }
    if ((err_is(rep, "TRYAGAIN") || err_is(rep, "CLUSTERDOWN") ||
         (c->no_ask && err_is(rep, "ASK "))) &&
        rs__cluster_now(cl) + RS_CL_RETRY_MS < c->deadline) {
        cl->st.tryagain++;
        if (err_is(rep, "CLUSTERDOWN"))
            rs__cluster_refresh(cl);
        c->retry_at = rs__cluster_now(cl) + RS_CL_RETRY_MS;
        rs__cluster_enqueue(cl, &cl->retry, c);
        return;
    }
    rs__cluster_end(cl, c, RS_CL_REPLY, rep);
}

void rs__cluster_reply(rs_link_t *l, redisReply *rep)
{
    rs_ccmd_t *c;

    if (l->sub && (elist_empty(&l->inflight) || rep->type == REDIS_REPLY_ARRAY)) {
        rs__cluster_sub_frame(l, rep);
        return;
    }
    if (elist_empty(&l->inflight)) {
        rs__cluster_link_drop(l, "a reply nobody asked for");
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

/* The i-th node one may ask for the map: the seeds, then the nodes of the map. */
static const rs_slot_addr_t *candidate(const rs_cluster_t *cl, int i)
{
    return i < cl->nseeds ? &cl->seeds[i] : &cl->map->nodes[i - cl->nseeds];
}

/* Whom to ask for the map: the next seed or known node with a connection up, else the next
 * one (in turn, so a dead node is not asked twice in a row). */
static const rs_slot_addr_t *refresh_target(rs_cluster_t *cl)
{
    int n = cl->map->nnodes + cl->nseeds;

    for (int k = 0; k < n; k++) {
        int i = (cl->refresh_at + k) % n;
        rs_link_t *l = rs__cluster_link_find(cl, candidate(cl, i), 0, 0);
        if (l != NULL && l->state == RS_CL_READY) {
            cl->refresh_at = i + 1;
            return candidate(cl, i);
        }
    }
    return candidate(cl, cl->refresh_at++ % n);
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
            if (c->key != NULL && !c->ask && (a == NULL || !rs__cluster_same_addr(a, &l->addr))) {
                elist_remove(&c->link);
                rs__cluster_enqueue(cl, &cl->waiting, c);
            }
        }
        for (elist_t *q = l->chans.next, *next; q != &l->chans; q = next) {
            rs_chan_t *ch = ECONTAINER(q, rs_chan_t, on);
            const rs_slot_addr_t *a = rs__slotmap_owner(cl->map, ch->slot);
            next = q->next;
            if (a == NULL || !rs__cluster_same_addr(a, &l->addr))
                rs__cluster_sub_route(cl, ch);
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
        rs__cluster_sub_route(cl, ECONTAINER(tmp.next, rs_chan_t, on));
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
    cl->refresh_not_before = rs__cluster_now(cl) + RS_CL_TICK_MS;
    apply_map(cl);
}

/* Ask a node for the whole map (one request at a time; asked again at the next tick when
 * one is in flight, or too soon after the last). */
void rs__cluster_refresh(rs_cluster_t *cl)
{
    const rs_slot_addr_t *a;
    rs_link_t *l;

    if (cl->refreshing || cl->closing || rs__cluster_now(cl) < cl->refresh_not_before) {
        cl->refresh_again = 1;
        return;
    }
    cl->refresh_again = 0;
    a = refresh_target(cl);
    l = rs__cluster_link_find(cl, a, 0, 1);
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
                              .deadline = rs__cluster_now(cl) + cl->timeout_ms};
    cl->refreshing = 1;
    cl->refresh_link = l;
    if (l->state == RS_CL_READY) {
        if (rs__cluster_link_write(l, &cl->refresh) != 0) {
            cl->refreshing = 0;
            cl->refresh_again = 1;
        }
        return;
    }
    elist_push_back(&l->queued, &cl->refresh.link);
    cl->nqueued++;
    if (l->state == RS_CL_DOWN && rs__cluster_now(cl) >= l->retry_at) /* (else: the tick's) */
        rs__cluster_link_connect(l);
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
            rs__cluster_end(cl, c, how, NULL);
            next = list->next; /* a callback may have changed the list */
        }
    }
}

static void tick_link(rs_cluster_t *cl, rs_link_t *l, uint64_t now)
{
    if (l->state == RS_CL_READY && !elist_empty(&l->inflight) &&
        ECONTAINER(l->inflight.next, rs_ccmd_t, link)->deadline <= now) {
        cl->st.timeouts++;
        rs__cluster_link_drop(l, "Redis did not answer in time");
    }
    expire_list(cl, &l->queued, RS_CL_UNSENT, now);
    if (l->state == RS_CL_DOWN && now >= l->retry_at &&
        (!elist_empty(&l->queued) || !elist_empty(&l->chans)))
        rs__cluster_link_connect(l);
    rs__cluster_sub_tick(l);
}

static void on_tick(uv_timer_t *t)
{
    rs_cluster_t *cl = t->data;
    uint64_t now = rs__cluster_now(cl);
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
        rs__cluster_refresh(cl);
}

/* ---- lifecycle ---- */

static void on_prepare(uv_prepare_t *h)
{
    rs__cluster_link_write_all(h->data);
}

static void on_check(uv_check_t *h)
{
    rs__cluster_link_write_all(h->data);
}

static void on_closed(uv_handle_t *h)
{
    rs_cluster_t *cl = h->data;

    cl->handles--;
}

int rs__cluster_open(uv_loop_t *loop, const rs_slot_addr_t *seeds, int nseeds, const char *user,
                     const char *pass, uint64_t timeout_ms, const rs_cluster_events_t *ev,
                     rs_cluster_t **out)
{
    rs_cluster_t *cl;

    if (nseeds < 1 || nseeds > RS_SLOT_SEEDS_MAX || strlen(user) >= sizeof cl->user ||
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
    elist_init(&cl->dirty);
    uv_timer_init(loop, &cl->tick);
    uv_prepare_init(loop, &cl->prep);
    uv_check_init(loop, &cl->check);
    cl->tick.data = cl->prep.data = cl->check.data = cl;
    cl->handles = 3;
    uv_timer_start(&cl->tick, on_tick, RS_CL_TICK_MS, RS_CL_TICK_MS);
    uv_prepare_start(&cl->prep, on_prepare);
    uv_check_start(&cl->check, on_check);
    rs__cluster_refresh(cl);
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

int rs__cluster_conn(rs_cluster_t *cl, const rs_slot_addr_t *a)
{
    rs_link_t *l = rs__cluster_link_find(cl, a, 0, 0);

    return l != NULL && l->state == RS_CL_READY ? l->gen : 0;
}

const rs_cluster_stats_t *rs__cluster_stats(const rs_cluster_t *cl)
{
    return &cl->st;
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
    rs__cluster_sub_free_all(cl); /* first: a channel is on its connection's list */
    etab_destroy(&cl->chans);
    while (!elist_empty(&cl->links)) {
        rs_link_t *l = ECONTAINER(cl->links.next, rs_link_t, all);
        elist_remove(&l->all);
        sema__free(l);
    }
    sema__free(cl->map);
    sema__free(cl);
}

void rs__cluster_close(rs_cluster_t *cl)
{
    cl->closing = 1;
    for (elist_t *e = cl->links.next; e != &cl->links; e = e->next) {
        rs_link_t *l = ECONTAINER(e, rs_link_t, all);
        if (l->state == RS_CL_RESOLVING)
            rs__resolve_cancel(&l->rv);
        rs__cluster_link_drop(l, "closing");
        expire_list(cl, &l->queued, RS_CL_UNSENT, UINT64_MAX);
    }
    expire_list(cl, &cl->waiting, RS_CL_UNSENT, UINT64_MAX);
    expire_list(cl, &cl->retry, RS_CL_UNSENT, UINT64_MAX);
    uv_close((uv_handle_t *)&cl->prep, on_closed);
    uv_close((uv_handle_t *)&cl->check, on_closed);
    uv_timer_stop(&cl->tick);
    uv_close((uv_handle_t *)&cl->tick, free_when_closed);
}
