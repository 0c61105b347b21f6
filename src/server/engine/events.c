/* SPDX-License-Identifier: MIT */
/* engine_metrics.c - the engine's Prometheus metrics and its event subscriptions. */
#include "mem_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

#define MAX_SUBSCRIPTIONS 100000

/* Upper bounds (seconds) of the wait-time and hold-time histogram buckets. */
static const double hist_bounds[ENGINE_HIST_BUCKETS] = {0.0005, 0.001, 0.005, 0.01, 0.05, 0.1,
                                                        0.5,    1,     5,     10,   60,   300};

void engine__hist_observe(ehist_t *h, double seconds)
{
    int i = 0;

    while (i < ENGINE_HIST_BUCKETS && seconds > hist_bounds[i])
        i++;
    h->counts[i]++;
    h->sum += seconds;
    h->n++;
}

/* ---- events ---- */

static void group_detach(engine_t *e, esub_group_t *g)
{
    if (!g->attached)
        return;
    engine__tab_remove(&e->subgroups, &g->node);
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
    if (g->attached) {
        esem_t *s = engine__sem_find(e, g->name, g->name_len);
        if (s != NULL && s->subs == g)
            s->subs = NULL;
        group_detach(e, g);
    }
    sema__free(g);
}

static int group_expired(engine_t *e, const esub_group_t *g)
{
    return g->idle && g->refs == 0 &&
           engine__now(e) - g->idle_since >= (uint64_t)e->cfg.events_retain_ms;
}

/* Free idle groups past their retention, and the oldest beyond ENGINE_EVENTS_IDLE_MAX (the
 * list is oldest first). One with queued events (refs > 0) is skipped: the next sweep. */
static void idle_sweep(engine_t *e)
{
    for (elist_t *x = e->idle_groups.next, *next; x != &e->idle_groups; x = next) {
        esub_group_t *g = ENGINE__CONTAINER(x, esub_group_t, idle_link);
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
    g->idle_since = engine__now(e);
    elist_push_back(&e->idle_groups, &g->idle_link);
    e->nidle_groups++;
    idle_sweep(e);
}

/* Remember an event for resumes. Steals a reference to `data`. */
static void recent_push(engine_t *e, const esub_group_t *g, uint64_t seq, const char *type,
                        json_t *data)
{
    erecent_t *r;

    if (e->recent == NULL &&
        (e->recent = sema__calloc(ENGINE_EVENTS_RECENT, sizeof(*e->recent))) == NULL) {
        json_decref(data);
        return;
    }
    if (e->recent_len == ENGINE_EVENTS_RECENT) {
        r = &e->recent[e->recent_head];
        json_decref(r->data);
        e->recent_head = (e->recent_head + 1) % ENGINE_EVENTS_RECENT;
        e->recent_len--;
    }
    r = &e->recent[(e->recent_head + e->recent_len) % ENGINE_EVENTS_RECENT];
    *r = (erecent_t){.uid = g->uid, .seq = seq, .type = type, .data = data};
    e->recent_len++;
}

/* The data of a "reset" event: {"name","reason"}. */
static json_t *reset_data(const esub_group_t *g, const char *reason)
{
    return json_pack("{s:s%,s:s}", "name", g->name, g->name_len, "reason", reason);
}

/* Number an event of group g, queue it and remember it. Steals `data`; 0 or SEMA_ENOMEM. */
static int queue_event(engine_t *e, esub_group_t *g, const char *type, json_t *data)
{
    eevent_t *ev;

    if (data == NULL || (ev = sema__malloc(sizeof(*ev))) == NULL) {
        json_decref(data);
        return SEMA_ENOMEM;
    }
    ev->grp = g;
    g->refs++;
    ev->seq = ++g->seq;
    ev->type = type;
    ev->data = data;
    elist_push_back(&e->events, &ev->link);
    recent_push(e, g, ev->seq, type, json_incref(data));
    return 0;
}

/* Queue an event for the semaphore's subscribers (delivered by engine__drain, so a
 * subscriber's callback never runs inside a state change). Steals `data`. */
void engine__event(engine_t *e, esem_t *s, const char *type, json_t *data)
{
    esub_group_t *g = s->subs;

    if (g != NULL && group_expired(e, g)) {
        group_free(e, g); /* nobody came back for these events */
        g = NULL;
    }
    if (g == NULL) {
        json_decref(data);
        return;
    }
    if (queue_event(e, g, type, data) != 0)
        return;
    if (strcmp(type, "deleted") == 0) {
        s->subs = NULL; /* the subscription is finished: a new semaphore of the name is new */
        group_detach(e, g);
    }
}

void engine__event_lease(engine_t *e, esem_t *s, const char *type, const elease_t *l)
{
    if (s->subs == NULL)
        return;
    engine__event(e, s, type,
                  json_pack("{s:s%,s:s,s:I,s:I,s:o}", "name", s->name, (size_t)s->name_len, "lease",
                            l->id, "weight", (json_int_t)l->weight, "fence", (json_int_t)l->fence,
                            "owner", l->owner ? json_string(l->owner) : json_null()));
}

static void event_id(char *buf, size_t cap, uint64_t uid, uint64_t seq)
{
    snprintf(buf, cap, "%llu-%llu", (unsigned long long)uid, (unsigned long long)seq);
}

/* Deliver the oldest queued event to every live subscriber of its group that has not had
 * it yet (a resume may have replayed it already). */
void engine__events_deliver(engine_t *e)
{
    eevent_t *ev = ENGINE__CONTAINER(e->events.next, eevent_t, link);
    esub_group_t *g = ev->grp;
    int last = strcmp(ev->type, "deleted") == 0;
    char id[48];

    elist_remove(&ev->link);
    event_id(id, sizeof(id), g->uid, ev->seq);
    g->refs++; /* keep the group while callbacks unsubscribe */
    for (elist_t *x = g->subs.next, *next; x != &g->subs; x = next) {
        engine_sub_t *sub = ENGINE__CONTAINER(x, engine_sub_t, link);
        next = x->next;
        if (sub->finished || sub->seen >= ev->seq)
            continue;
        if (last)
            sub->finished = 1;
        sub->seen = ev->seq;
        sub->cb(sub->arg, id, ev->type, ev->data);
    }
    json_decref(ev->data);
    group_unref(e, g);
    group_unref(e, g);
    sema__free(ev);
}

int engine_subscribe(engine_t *e, const char *name, engine_event_cb cb, void *arg,
                     engine_sub_t **out)
{
    size_t len = name ? strlen(name) : 0;
    esem_t *s;
    engine_sub_t *sub;
    esub_group_t *g;

    *out = NULL;
    idle_sweep(e);
    s = name ? engine__sem_find(e, name, len) : NULL;
    if (s == NULL || cb == NULL)
        return SEMA_ENOENT;
    if (e->nsubs >= MAX_SUBSCRIPTIONS)
        return SEMA_ELIMIT;
    sub = sema__calloc(1, sizeof(*sub));
    if (sub == NULL)
        return SEMA_ENOMEM;
    g = s->subs; /* an idle group (even past its retention) still has every event */
    if (g == NULL) {
        g = sema__calloc(1, sizeof(*g) + len + 1);
        if (g == NULL) {
            sema__free(sub);
            return SEMA_ENOMEM;
        }
        if (e->group_uid == 0) {
            /* A random start, so ids from an earlier run of semad never match this one's. */
            engine__random(e, (uint8_t *)&e->group_uid, sizeof(e->group_uid));
            e->group_uid = (e->group_uid >> 12) | 1; /* room to count up, in 53 bits */
        }
        g->uid = ++e->group_uid;
        elist_init(&g->subs);
        g->name_len = len;
        memcpy(g->name, name, len + 1);
        g->node.hash = engine__hash(name, len, 2);
        g->attached = 1;
        engine__tab_insert(&e->subgroups, &g->node);
        s->subs = g;
    }
    group_unidle(e, g);
    g->refs++;
    sub->grp = g;
    sub->cb = cb;
    sub->arg = arg;
    elist_push_back(&g->subs, &sub->link);
    e->nsubs++;
    *out = sub;
    return 0;
}

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

static void sub_reset(engine_sub_t *sub, const char *reason, engine_event_cb cb, void *arg)
{
    esub_group_t *g = sub->grp;
    char id[48];
    json_t *data = reset_data(g, reason);

    event_id(id, sizeof(id), g->uid, g->seq);
    sub->seen = g->seq; /* what is queued now is older than the state the client reads */
    if (data != NULL)
        cb(arg, id, "reset", data);
    json_decref(data);
}

void engine_sub_resume(engine_t *e, engine_sub_t *sub, const char *last_id, engine_event_cb cb,
                       void *arg)
{
    esub_group_t *g = sub->grp;
    uint64_t uid, seq;
    size_t first = e->recent_len;

    if (sub->finished || last_id == NULL)
        return;
    if (parse_event_id(last_id, &uid, &seq) != 0 || uid != g->uid || seq > g->seq) {
        sub_reset(sub, "Last-Event-ID is not from this run of the semaphore's events", cb, arg);
        return;
    }
    if (seq == g->seq) {
        sub->seen = seq; /* nothing missed */
        return;
    }
    /* The ring drops the oldest first, so if seq + 1 is there, everything after it is. */
    for (size_t i = 0; i < e->recent_len; i++) {
        const erecent_t *r = &e->recent[(e->recent_head + i) % ENGINE_EVENTS_RECENT];
        if (r->uid == uid && r->seq == seq + 1) {
            first = i;
            break;
        }
    }
    if (first == e->recent_len) {
        sub_reset(sub, "the events since Last-Event-ID are no longer kept", cb, arg);
        return;
    }
    for (size_t i = first; i < e->recent_len && !sub->finished; i++) { /* FIFO: in order */
        const erecent_t *r = &e->recent[(e->recent_head + i) % ENGINE_EVENTS_RECENT];
        char id[48];
        if (r->uid != uid)
            continue;
        event_id(id, sizeof(id), r->uid, r->seq);
        sub->seen = r->seq;
        if (strcmp(r->type, "deleted") == 0)
            sub->finished = 1;
        cb(arg, id, r->type, r->data);
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

static void free_group(void *arg, enode_t *n)
{
    engine_t *e = arg;
    esub_group_t *g = ENGINE__CONTAINER(n, esub_group_t, node);

    while (!elist_empty(&g->subs)) {
        engine_sub_t *sub = ENGINE__CONTAINER(g->subs.next, engine_sub_t, link);
        elist_remove(&sub->link);
        sema__free(sub);
    }
    group_unidle(e, g);
    group_detach(e, g);
    sema__free(g);
}

/* At engine free: subscriptions the caller still holds are freed with it. */
void engine__subs_free_all(engine_t *e)
{
    while (!elist_empty(&e->events)) {
        eevent_t *ev = ENGINE__CONTAINER(e->events.next, eevent_t, link);
        esub_group_t *g = ev->grp;
        elist_remove(&ev->link);
        json_decref(ev->data);
        sema__free(ev);
        if (--g->refs == 0 && !g->attached)
            group_free(e, g); /* deleted, and only its queued events held it */
    }
    engine__tab_each(&e->subgroups, free_group, e);
    for (size_t i = 0; i < e->recent_len; i++)
        json_decref(e->recent[(e->recent_head + i) % ENGINE_EVENTS_RECENT].data);
    sema__free(e->recent);
    e->recent = NULL;
    e->recent_len = 0;
}

static void reattach_group(void *arg, enode_t *n)
{
    engine_t *e = arg;
    esub_group_t *g = ENGINE__CONTAINER(n, esub_group_t, node);
    esem_t *s = engine__sem_find(e, g->name, g->name_len);

    if (s != NULL) {
        /* Events already sent may describe changes that were just rolled back: a new uid
         * makes every earlier id resume with "reset", and live subscribers get one now. */
        s->subs = g;
        g->uid = ++e->group_uid;
        (void)queue_event(e, g, "reset",
                          reset_data(g, "changes that could not be stored were rolled back"));
        return;
    }
    /* The semaphore is gone after a reload: tell its subscribers. */
    group_detach(e, g);
    if (queue_event(e, g, "deleted", json_pack("{s:s%}", "name", g->name, g->name_len)) != 0 &&
        g->refs == 0)
        group_free(e, g); /* idle, and nothing queued holds it */
}

/* After the state was rebuilt from the store, point semaphores at their subscribers. */
void engine__subs_reattach(engine_t *e)
{
    engine__tab_each(&e->subgroups, reattach_group, e);
}

/* ---- Prometheus text ---- */

static int put_counter(struct strbuf *b, const char *name, const char *help, const char *type,
                       uint64_t v)
{
    return strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                         (unsigned long long)v);
}

static int put_hist(struct strbuf *b, const char *name, const char *help, const ehist_t *h)
{
    uint64_t cum = 0;
    int rc = strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);

    for (int i = 0; rc == 0 && i < ENGINE_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        rc = strbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, hist_bounds[i],
                           (unsigned long long)cum);
    }
    cum += h->counts[ENGINE_HIST_BUCKETS];
    if (rc == 0)
        rc = strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                           (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->n);
    return rc;
}

/* Prometheus label value: escape backslash, quote and newline. */
static int put_label(struct strbuf *b, const char *s, size_t len)
{
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < len; i++) {
        if (s[i] == '\\')
            rc = strbuf_puts(b, "\\\\");
        else if (s[i] == '"')
            rc = strbuf_puts(b, "\\\"");
        else if (s[i] == '\n')
            rc = strbuf_puts(b, "\\n");
        else
            rc = strbuf_append(b, &s[i], 1);
    }
    return rc;
}

static int put_sem_gauges(engine_t *e, struct strbuf *b)
{
    static const char *const names[] = {"semad_semaphore_capacity", "semad_semaphore_available",
                                        "semad_semaphore_held", "semad_semaphore_waiters"};
    int rc = 0;

    for (int k = 0; rc == 0 && k < 4; k++) {
        uint64_t n = 0;
        rc = strbuf_printf(b, "# TYPE %s gauge\n", names[k]);
        for (esem_t *s = engine__treap_after(e, "", 0, 1);
             rc == 0 && s != NULL && n < e->cfg.metrics_max_semaphores;
             s = engine__treap_after(e, s->name, s->name_len, 0), n++) {
            int64_t v = k == 0   ? (int64_t)s->capacity
                        : k == 1 ? s->available
                        : k == 2 ? (int64_t)s->held
                                 : (int64_t)s->nwaiters;
            rc = strbuf_printf(b, "%s{name=\"", names[k]);
            if (rc == 0)
                rc = put_label(b, s->name, s->name_len);
            if (rc == 0)
                rc = strbuf_printf(b, "\"} %lld\n", (long long)v);
        }
    }
    return rc;
}

int engine_metrics(engine_t *e, struct strbuf *b)
{
    const emetrics_t *m = &e->m;
    int rc = put_counter(b, "semad_grants_total", "Leases granted.", "counter", m->grants);

    rc = rc ? rc
            : put_counter(b, "semad_releases_total", "Leases released.", "counter", m->releases);
    rc = rc ? rc
            : put_counter(b, "semad_expirations_total", "Leases expired.", "counter",
                          m->expirations);
    rc = rc ? rc
            : put_counter(b, "semad_revocations_total", "Leases revoked.", "counter",
                          m->revocations);
    rc = rc ? rc
            : put_counter(b, "semad_timeouts_total", "Parked requests that timed out.", "counter",
                          m->timeouts);
    rc = rc ? rc
            : put_counter(b, "semad_cancellations_total",
                          "Parked requests withdrawn (client gone).", "counter", m->cancellations);
    rc = rc ? rc
            : put_counter(b, "semad_store_commits_total", "Group commits.", "counter", m->commits);
    rc = rc ? rc
            : put_counter(b, "semad_store_commit_failures_total", "Failed group commits.",
                          "counter", m->commit_failures);
    rc = rc ? rc
            : put_counter(b, "semad_parked_waiters", "Requests parked now.", "gauge", e->nparked);
    rc = rc ? rc
            : put_counter(b, "semad_event_streams", "Event subscriptions open now.", "gauge",
                          e->nsubs);
    rc = rc ? rc
            : put_counter(b, "semad_event_streams_kept",
                          "Semaphores with no subscriber still recording events for a resume.",
                          "gauge", e->nidle_groups);
    rc = rc ? rc : put_counter(b, "semad_semaphores", "Semaphores.", "gauge", e->sems.count);
    rc = rc ? rc : put_counter(b, "semad_leases", "Live leases.", "gauge", e->leases.count);
    rc = rc ? rc
            : put_counter(b, "semad_lock_keys", "Keyed locks held or awaited.", "gauge",
                          e->locks.count);
    rc = rc ? rc : put_hist(b, "semad_wait_seconds", "Time from request to grant.", &m->wait_s);
    rc = rc ? rc : put_hist(b, "semad_hold_seconds", "Time from grant to end.", &m->hold_s);
    rc = rc ? rc : put_sem_gauges(e, b);
    return rc ? SEMA_ENOMEM : 0;
}
