/* SPDX-License-Identifier: MIT */
/* redis_cluster_sub.c - sharded subscriptions on a Redis Cluster: each channel SSUBSCRIBEd on
 * the subscriber connection of its slot's primary, and kept there through a killed
 * connection, a failover and a moved slot (the `subscribed` event says when it took effect
 * again, so the owner can look for what it missed). */
#include "backends/redis/redis_cluster_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "sema/error.h"

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
void rs__cluster_sub_send(rs_link_t *l, const char *verb, rs_chan_t *ch)
{
    const char *argv[2] = {verb, ch->name};
    size_t lens[2] = {strlen(verb), ch->len};
    rs_ccmd_t c = {.argc = 2, .argv = argv, .lens = lens};

    if (l->state != RS_CL_READY || rs__cluster_link_write(l, &c) != 0)
        return; /* a channel left unasked is asked again by the next tick */
    elist_remove(&c.link);
    ch->asked = verb[1] == 'S'; /* SSUBSCRIBE */
}

/* Put a channel on the subscriber connection of its slot's primary. */
void rs__cluster_sub_route(rs_cluster_t *cl, rs_chan_t *ch)
{
    const rs_slot_addr_t *a = rs__slotmap_owner(cl->map, ch->slot);
    rs_link_t *l = a ? rs__cluster_link_find(cl, a, 1, 1) : NULL;

    elist_remove(&ch->on);
    ch->confirmed = ch->asked = 0;
    if (l != ch->link && ch->link != NULL && ch->link->state == RS_CL_READY)
        rs__cluster_sub_send(ch->link, "SUNSUBSCRIBE", ch);
    ch->link = l;
    if (l == NULL) {
        elist_push_back(&cl->chan_wait, &ch->on);
        rs__cluster_refresh(cl);
        return;
    }
    elist_push_back(&l->chans, &ch->on);
    if (l->state == RS_CL_READY)
        rs__cluster_sub_send(l, "SSUBSCRIBE", ch);
    else if (l->state == RS_CL_DOWN && rs__cluster_now(cl) >= l->retry_at)
        rs__cluster_link_connect(l);
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
    rs__cluster_sub_route(cl, ch);
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
    if (ch->link != NULL && ch->link->state == RS_CL_READY)
        rs__cluster_sub_send(ch->link, "SUNSUBSCRIBE", ch);
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
        rs__cluster_link_drop(l, "subscription refused");
        return;
    }
    cl->st.moved++;
    if (rs__slotmap_moved(cl->map, &rd) < 0)
        rs__slotmap_clear(cl->map);
    rs__cluster_refresh(cl);
    for (elist_t *e = l->chans.next, *next; e != &l->chans; e = next) {
        rs_chan_t *ch = ECONTAINER(e, rs_chan_t, on);
        next = e->next;
        if (!ch->confirmed && rs__slotmap_owner(cl->map, ch->slot) != NULL &&
            !rs__cluster_same_addr(rs__slotmap_owner(cl->map, ch->slot), &l->addr))
            rs__cluster_sub_route(cl, ch);
    }
}

/* A frame on a subscriber connection: smessage, or a (un)subscription's confirmation. A
 * SUNSUBSCRIBE nobody asked for means the slot left this node: the channel follows it. */
void rs__cluster_sub_frame(rs_link_t *l, redisReply *rep)
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
            rs__cluster_refresh(cl);
        }
    }
}

/* Subscribe what a ready subscriber connection has not asked for yet: all of its channels
 * after a (re)connect, and one a failed write left out. */
void rs__cluster_sub_tick(rs_link_t *l)
{
    if (!l->sub || l->state != RS_CL_READY)
        return;
    for (elist_t *e = l->chans.next; e != &l->chans; e = e->next) {
        rs_chan_t *ch = ECONTAINER(e, rs_chan_t, on);
        if (!ch->asked)
            rs__cluster_sub_send(l, "SSUBSCRIBE", ch);
    }
}

static void free_chan(void *arg, enode_t *n)
{
    chan_free(arg, ECONTAINER(n, rs_chan_t, node));
}

void rs__cluster_sub_free_all(rs_cluster_t *cl)
{
    etab_each(&cl->chans, free_chan, cl);
}
