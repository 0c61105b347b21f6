/* SPDX-License-Identifier: MIT */
/* events.c - the event fan-out: subscriptions grouped by semaphore name, each event
 * rendered once and shared by every subscriber, and a ring of recent events from which a
 * subscriber that reconnects with Last-Event-ID gets what it missed. */
#include "engine/front.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/strbuf.h"

#define MAX_SUBSCRIPTIONS 100000
#define GROUP_HASH_SEED 2

int engine__events_init(engine_t *e)
{
    elist_init(&e->events);
    elist_init(&e->idle_groups);
    return etab_init(&e->subgroups, 16);
}

/* ---- shared event text ---- */

/* The event's data rendered once; NULL when out of memory. */
static etext_t *text_new(const engine_t *e, const engine_event_t *ev, const char *reason)
{
    struct strbuf sb;
    etext_t *t = NULL;

    strbuf_init(&sb, 0);
    if (e->cfg.render_event(&sb, ev, reason) == 0 && (t = sema__malloc(sizeof(*t) + sb.len + 1))) {
        t->refs = 1;
        t->len = sb.len;
        memcpy(t->data, sb.data, sb.len);
        t->data[sb.len] = '\0';
    }
    strbuf_free(&sb);
    return t;
}

static etext_t *text_ref(etext_t *t)
{
    t->refs++;
    return t;
}

static void text_unref(etext_t *t)
{
    if (t != NULL && --t->refs == 0)
        sema__free(t);
}

/* ---- groups ---- */

static int group_eq(const enode_t *n, const void *key, size_t len)
{
    const esub_group_t *g = ECONTAINER(n, esub_group_t, node);
    return g->name_len == len && memcmp(g->name, key, len) == 0;
}

static esub_group_t *group_find(engine_t *e, const char *name, size_t len)
{
    enode_t *n =
        etab_find(&e->subgroups, etab_hash(name, len, GROUP_HASH_SEED), group_eq, name, len);
    return n ? ECONTAINER(n, esub_group_t, node) : NULL;
}

static void group_detach(engine_t *e, esub_group_t *g)
{
    if (!g->attached)
        return;
    etab_remove(&e->subgroups, &g->node);
    g->attached = 0;
}

static void group_unidle(engine_t *e, esub_group_t *g)
{
    if (!g->idle)
        return;
    elist_remove(&g->idle_link);
    e->nidle_groups--;
    g->idle = 0;
}

/* Free a group nobody references (refs == 0); its semaphore stops paying for events. */
static void group_free(engine_t *e, esub_group_t *g)
{
    group_unidle(e, g);
    group_detach(e, g);
    sema__free(g);
}

static int group_expired(engine_t *e, const esub_group_t *g)
{
    return g->idle && g->refs == 0 &&
           uv_now(e->loop) - g->idle_since >= (uint64_t)e->cfg.events_retain_ms;
}

/* Free idle groups past their retention, and the oldest beyond ENGINE_EVENTS_IDLE_MAX (the
 * list is oldest first). One with queued events (refs > 0) is skipped: the next sweep. */
static void idle_sweep(engine_t *e)
{
    for (elist_t *x = e->idle_groups.next, *next; x != &e->idle_groups; x = next) {
        esub_group_t *g = ECONTAINER(x, esub_group_t, idle_link);
        next = x->next;
        if (g->refs > 0)
            continue;
        if (e->nidle_groups <= ENGINE_EVENTS_IDLE_MAX && !group_expired(e, g))
            break;
        group_free(e, g);
    }
}

/* Drop a reference. With none left the group is freed if its semaphore is gone, and
 * otherwise goes idle (or stays idle: its retention runs from when the last subscriber
 * left, not from its last event). */
static void group_unref(engine_t *e, esub_group_t *g)
{
    if (--g->refs > 0)
        return;
    if (!g->attached) {
        group_free(e, g);
        return;
    }
    if (g->idle)
        return;
    /* The semaphore exists: keep recording its events for a subscriber's return. */
    g->idle = 1;
    g->idle_since = uv_now(e->loop);
    elist_push_back(&e->idle_groups, &g->idle_link);
    e->nidle_groups++;
    idle_sweep(e);
}

static esub_group_t *group_new(engine_t *e, const char *name, size_t len)
{
    esub_group_t *g = sema__calloc(1, sizeof(*g) + len + 1);

    if (g == NULL)
        return NULL;
    if (e->group_uid == 0) {
        /* A random start, so ids from an earlier run of semad never match this one's. */
        engine__random(e, &e->group_uid, sizeof(e->group_uid));
        e->group_uid = (e->group_uid >> 12) | 1; /* room to count up, in 53 bits */
    }
    g->uid = ++e->group_uid;
    elist_init(&g->subs);
    g->name_len = len;
    memcpy(g->name, name, len);
    g->name[len] = '\0';
    g->node.hash = etab_hash(name, len, GROUP_HASH_SEED);
    g->attached = 1;
    etab_insert(&e->subgroups, &g->node);
    return g;
}

/* ---- queueing ---- */

/* Remember an event for resumes; takes a reference to `t`. */
static void recent_push(engine_t *e, const esub_group_t *g, uint64_t seq, const char *type,
                        etext_t *t)
{
    erecent_t *r;

    if (e->recent == NULL &&
        (e->recent = sema__calloc(ENGINE_EVENTS_RECENT, sizeof(*e->recent))) == NULL)
        return;
    if (e->recent_len == ENGINE_EVENTS_RECENT) {
        text_unref(e->recent[e->recent_head].text);
        e->recent_head = (e->recent_head + 1) % ENGINE_EVENTS_RECENT;
        e->recent_len--;
    }
    r = &e->recent[(e->recent_head + e->recent_len) % ENGINE_EVENTS_RECENT];
    *r = (erecent_t){.uid = g->uid, .seq = seq, .type = type, .text = text_ref(t)};
    e->recent_len++;
}

/* Queue an event of group g: numbered by the back end (uid != 0: its log keeps it for
 * resumes), or numbered here and remembered in the ring. Steals `t`; 0 or SEMA_ENOMEM. */
static int queue_event(engine_t *e, esub_group_t *g, const char *type, etext_t *t, uint64_t uid,
                       uint64_t seq)
{
    eevent_t *ev;

    if (t == NULL || (ev = sema__malloc(sizeof(*ev))) == NULL) {
        text_unref(t);
        return SEMA_ENOMEM;
    }
    ev->grp = g;
    g->refs++;
    ev->type = type;
    ev->text = t;
    elist_push_back(&e->events, &ev->link);
    if (uid != 0) {
        ev->uid = g->uid = uid;
        ev->seq = g->seq = seq;
        ev->force = strcmp(type, "reset") == 0;
        return 0;
    }
    ev->uid = g->uid;
    ev->seq = ++g->seq;
    ev->force = 0;
    recent_push(e, g, ev->seq, type, t);
    return 0;
}

void engine__event(engine_t *e, const engine_event_t *ev)
{
    esub_group_t *g;

    if (e->subgroups.count == 0)
        return; /* nobody watches anything: the common case costs one test */
    g = group_find(e, ev->name, ev->name_len);
    if (g == NULL)
        return;
    if (group_expired(e, g)) {
        group_free(e, g); /* nobody came back for these events */
        return;
    }
    if (queue_event(e, g, ev->type, text_new(e, ev, ev->reason), ev->uid, ev->seq) != 0)
        return;
    if (strcmp(ev->type, "deleted") == 0)
        group_detach(e, g); /* finished: a new semaphore of the name is new */
}

int engine__watching(const engine_t *e)
{
    return e->subgroups.count != 0;
}

int engine__watched(engine_t *e, const char *name, size_t len)
{
    const esub_group_t *g = e->subgroups.count != 0 ? group_find(e, name, len) : NULL;

    return g != NULL && !group_expired(e, g);
}

static void event_id(char *buf, size_t cap, uint64_t uid, uint64_t seq)
{
    snprintf(buf, cap, "%llu-%llu", (unsigned long long)uid, (unsigned long long)seq);
}

static etext_t *group_text(const engine_t *e, const esub_group_t *g, const char *type,
                           const char *reason);

#define REASON_NEW_RUN                                                                             \
    "the semaphore's events started a new run: some may have been lost (read the state again)"

/* Deliver the oldest queued event to every live subscriber of its group that has not had
 * it yet (a resume may have replayed it already). A subscriber that followed another run of
 * the events (a back end's log that started again) gets "reset" in its place, with its id. */
int engine__deliver_event(engine_t *e)
{
    eevent_t *ev;
    esub_group_t *g;
    etext_t *gap = NULL;
    int last, reset;
    char id[48];

    if (elist_empty(&e->events))
        return 0;
    ev = ECONTAINER(e->events.next, eevent_t, link);
    g = ev->grp;
    last = strcmp(ev->type, "deleted") == 0;
    reset = strcmp(ev->type, "reset") == 0;
    elist_remove(&ev->link);
    event_id(id, sizeof(id), ev->uid, ev->seq);
    g->refs++; /* keep the group while callbacks unsubscribe */
    for (elist_t *x = g->subs.next, *next; x != &g->subs; x = next) {
        engine_sub_t *sub = ECONTAINER(x, engine_sub_t, link);
        const char *type = ev->type;
        etext_t *text = ev->text;
        next = x->next;
        if (sub->finished || (!ev->force && sub->uid == ev->uid && sub->seen >= ev->seq))
            continue;
        if (sub->uid != 0 && sub->uid != ev->uid && !reset && !last) {
            if (gap == NULL && (gap = group_text(e, g, "reset", REASON_NEW_RUN)) == NULL)
                continue;
            type = "reset";
            text = gap;
        }
        if (last)
            sub->finished = 1;
        if (sub->uid != ev->uid || sub->seen < ev->seq)
            sub->seen = ev->seq;
        sub->uid = ev->uid;
        sub->cb(sub->arg, id, type, text->data, text->len);
    }
    text_unref(gap);
    text_unref(ev->text);
    group_unref(e, g);
    group_unref(e, g);
    sema__free(ev);
    return 1;
}

/* ---- subscriptions ---- */

/* "<uid>-<seq>" -> 0, or -1 if it is not one. */
static int parse_event_id(const char *s, uint64_t *uid, uint64_t *seq)
{
    char *end;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *uid = strtoull(s, &end, 10);
    if (errno != 0 || *end != '-' || end[1] < '0' || end[1] > '9')
        return -1;
    *seq = strtoull(end + 1, &end, 10);
    return errno != 0 || *end != '\0' ? -1 : 0;
}

int engine__events_open(engine_t *e, engine_req_t *req)
{
    (void)e;
    req->from_uid = req->from_seq = req->res.log_uid = req->res.log_seq = 0;
    req->res.replay = NULL;
    req->res.nreplay = 0;
    req->res.log_rc = ENGINE_LOG_UNKNOWN;
    if (req->id != NULL && parse_event_id(req->id, &req->from_uid, &req->from_seq) != 0)
        req->from_uid = req->from_seq = 0; /* matches no log: the back end answers its point */
    return 0;
}

int engine_subscribe(engine_t *e, const engine_req_t *open, engine_event_cb cb, void *arg,
                     engine_sub_t **out)
{
    const char *name = open->name;
    size_t len = open->name_len;
    engine_sub_t *sub;
    esub_group_t *g;

    *out = NULL;
    idle_sweep(e);
    if (open->op != ENGINE_EVENTS_OPEN || open->status != 0 || name == NULL || cb == NULL)
        return SEMA_ENOENT;
    if (e->nsubs >= MAX_SUBSCRIPTIONS)
        return SEMA_ELIMIT;
    sub = sema__calloc(1, sizeof(*sub));
    if (sub == NULL)
        return SEMA_ENOMEM;
    g = group_find(e, name, len); /* an idle group (even past its retention) has every event */
    if (g == NULL && (g = group_new(e, name, len)) == NULL) {
        sema__free(sub);
        return SEMA_ENOMEM;
    }
    group_unidle(e, g);
    g->refs++;
    sub->grp = g;
    sub->cb = cb;
    sub->arg = arg;
    sub->uid = g->uid;
    if (e->ops->event_log) { /* (log_uid 0: unknown, it follows the first event's run) */
        sub->uid = open->res.log_uid;
        sub->seen = open->res.log_seq;
    }
    elist_push_back(&g->subs, &sub->link);
    e->nsubs++;
    *out = sub;
    return 0;
}

/* The data of a "reset" or "deleted" event of group g. */
static etext_t *group_text(const engine_t *e, const esub_group_t *g, const char *type,
                           const char *reason)
{
    engine_event_t ev = {.type = type, .name = g->name, .name_len = g->name_len};

    return text_new(e, &ev, reason);
}

static void sub_reset(const engine_t *e, engine_sub_t *sub, const char *reason, engine_event_cb cb,
                      void *arg)
{
    esub_group_t *g = sub->grp;
    char id[48];
    etext_t *t = group_text(e, g, "reset", reason);

    event_id(id, sizeof(id), g->uid, g->seq);
    sub->uid = g->uid;
    sub->seen = g->seq; /* what is queued now is older than the state the client reads */
    if (t != NULL)
        cb(arg, id, "reset", t->data, t->len);
    text_unref(t);
}

/* The index in the ring of event seq of group uid, or e->recent_len. */
static size_t recent_find(const engine_t *e, uint64_t uid, uint64_t seq)
{
    for (size_t i = 0; i < e->recent_len; i++) {
        const erecent_t *r = &e->recent[(e->recent_head + i) % ENGINE_EVENTS_RECENT];
        if (r->uid == uid && r->seq == seq)
            return i;
    }
    return e->recent_len;
}

/* ---- resuming from a back end's log ---- */

typedef struct {
    const engine_t *e;
    engine_sub_t *sub;
    engine_event_cb cb;
    void *arg;
} replay_ctx_t;

static void replay_each(void *arg, const engine_event_t *ev)
{
    replay_ctx_t *c = arg;
    engine_sub_t *sub = c->sub;
    etext_t *t;
    char id[48];

    if (sub->finished || (t = text_new(c->e, ev, ev->reason)) == NULL)
        return;
    event_id(id, sizeof(id), ev->uid, ev->seq);
    sub->uid = ev->uid;
    sub->seen = ev->seq;
    if (strcmp(ev->type, "deleted") == 0)
        sub->finished = 1;
    c->cb(c->arg, id, ev->type, t->data, t->len);
    text_unref(t);
}

static void log_reset(const engine_t *e, engine_sub_t *sub, uint64_t uid, uint64_t seq,
                      const char *reason, engine_event_cb cb, void *arg)
{
    esub_group_t *g = sub->grp;
    char id[48];
    etext_t *t = group_text(e, g, "reset", reason);

    sub->uid = uid;
    sub->seen = seq; /* live events up to the point are older than the state the client reads */
    event_id(id, sizeof(id), uid, seq);
    if (t != NULL)
        cb(arg, id, "reset", t->data, t->len);
    text_unref(t);
}

/* The back end keeps the events (a log shared by every instance on Redis): the open request
 * read them, or says why it could not, which makes the same "reset" as the ring's. */
static void resume_from_log(engine_t *e, engine_sub_t *sub, const engine_req_t *open,
                            engine_event_cb cb, void *arg)
{
    replay_ctx_t c = {e, sub, cb, arg};
    uint64_t cu = open->res.log_uid, cs = open->res.log_seq;

    sub->uid = open->from_uid; /* what the client has seen; the replay takes it to the point */
    sub->seen = open->from_seq;
    for (size_t i = 0; i < open->res.nreplay; i++)
        replay_each(&c, &open->res.replay[i]);
    switch (open->res.log_rc) {
    case ENGINE_LOG_OK:
        if (!sub->finished && (sub->uid != cu || sub->seen < cs)) {
            sub->uid = cu;
            sub->seen = cs;
        }
        return;
    case ENGINE_LOG_FOREIGN:
        log_reset(e, sub, cu, cs, "Last-Event-ID is not from this run of the semaphore's events",
                  cb, arg);
        return;
    case ENGINE_LOG_GONE:
        log_reset(e, sub, cu, cs, "the events since Last-Event-ID are no longer kept", cb, arg);
        return;
    default:
        log_reset(e, sub, cu, cs, "the semaphore's events could not be read from the store", cb,
                  arg);
        return;
    }
}

void engine_sub_resume(engine_t *e, engine_sub_t *sub, const engine_req_t *open, engine_event_cb cb,
                       void *arg)
{
    esub_group_t *g = sub->grp;
    const char *last_id = open->id;
    uint64_t uid, seq;
    size_t first;

    if (sub->finished || last_id == NULL)
        return;
    if (e->ops->event_log) {
        resume_from_log(e, sub, open, cb, arg);
        return;
    }
    if (parse_event_id(last_id, &uid, &seq) != 0 || uid != g->uid || seq > g->seq) {
        sub_reset(e, sub, "Last-Event-ID is not from this run of the semaphore's events", cb, arg);
        return;
    }
    if (seq == g->seq) {
        sub->seen = seq; /* nothing missed */
        return;
    }
    /* The ring drops the oldest first, so if seq + 1 is there, everything after it is. */
    first = recent_find(e, uid, seq + 1);
    if (first == e->recent_len) {
        sub_reset(e, sub, "the events since Last-Event-ID are no longer kept", cb, arg);
        return;
    }
    for (size_t i = first; i < e->recent_len && !sub->finished; i++) { /* FIFO: in order */
        const erecent_t *r = &e->recent[(e->recent_head + i) % ENGINE_EVENTS_RECENT];
        char id[48];
        if (r->uid != uid)
            continue;
        event_id(id, sizeof(id), r->uid, r->seq);
        sub->uid = r->uid;
        sub->seen = r->seq;
        if (strcmp(r->type, "deleted") == 0)
            sub->finished = 1;
        cb(arg, id, r->type, r->text->data, r->text->len);
    }
}

void engine_unsubscribe(engine_t *e, engine_sub_t *sub)
{
    esub_group_t *g;

    if (e == NULL || sub == NULL)
        return;
    g = sub->grp;
    elist_remove(&sub->link);
    e->nsubs--;
    group_unref(e, g);
    sema__free(sub);
}

/* ---- a rebuilt state ---- */

static void rollback_group(void *arg, enode_t *n)
{
    engine_t *e = arg;
    esub_group_t *g = ECONTAINER(n, esub_group_t, node);

    if (e->ops->exists != NULL && e->ops->exists(e->be, g->name, g->name_len)) {
        /* Events already sent may describe changes that were just rolled back: a new uid
         * makes every earlier id resume with "reset", and live subscribers get one now. */
        g->uid = ++e->group_uid;
        (void)queue_event(
            e, g, "reset",
            group_text(e, g, "reset", "changes that could not be stored were rolled back"), 0, 0);
        return;
    }
    /* The semaphore is gone after a reload: tell its subscribers. */
    group_detach(e, g);
    if (queue_event(e, g, "deleted", group_text(e, g, "deleted", NULL), 0, 0) != 0 && g->refs == 0)
        group_free(e, g); /* idle, and nothing queued holds it */
}

void engine__events_rollback(engine_t *e)
{
    etab_each(&e->subgroups, rollback_group, e);
}

/* ---- freeing ---- */

static void free_group(void *arg, enode_t *n)
{
    engine_t *e = arg;
    esub_group_t *g = ECONTAINER(n, esub_group_t, node);

    while (!elist_empty(&g->subs)) {
        engine_sub_t *sub = ECONTAINER(g->subs.next, engine_sub_t, link);
        elist_remove(&sub->link);
        sema__free(sub);
    }
    group_unidle(e, g);
    group_detach(e, g);
    sema__free(g);
}

/* At engine free: subscriptions the caller still holds are freed with it. */
void engine__events_free(engine_t *e)
{
    while (!elist_empty(&e->events)) {
        eevent_t *ev = ECONTAINER(e->events.next, eevent_t, link);
        esub_group_t *g = ev->grp;
        elist_remove(&ev->link);
        text_unref(ev->text);
        sema__free(ev);
        if (--g->refs == 0 && !g->attached)
            group_free(e, g); /* deleted, and only its queued events held it */
    }
    etab_each(&e->subgroups, free_group, e);
    etab_destroy(&e->subgroups);
    for (size_t i = 0; i < e->recent_len; i++)
        text_unref(e->recent[(e->recent_head + i) % ENGINE_EVENTS_RECENT].text);
    sema__free(e->recent);
    e->recent = NULL;
    e->recent_len = 0;
}
