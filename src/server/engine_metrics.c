/* SPDX-License-Identifier: MIT */
/* engine_metrics.c - the engine's Prometheus metrics and its event subscriptions. */
#include "engine_internal.h"

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

static void group_unref(engine_t *e, esub_group_t *g)
{
    if (--g->refs > 0)
        return;
    if (g->attached) {
        esem_t *s = engine__sem_find(e, g->name, g->name_len);
        if (s != NULL && s->subs == g)
            s->subs = NULL; /* the semaphore stops paying for events */
        group_detach(e, g);
    }
    sema__free(g);
}

/* Queue an event for the semaphore's subscribers (delivered by engine__drain, so a
 * subscriber's callback never runs inside a state change). Steals `data`. */
void engine__event(engine_t *e, esem_t *s, const char *type, json_t *data)
{
    eevent_t *ev;

    if (s->subs == NULL || data == NULL || (ev = sema__malloc(sizeof(*ev))) == NULL) {
        json_decref(data);
        return;
    }
    ev->grp = s->subs;
    ev->grp->refs++;
    ev->type = type;
    ev->data = data;
    elist_push_back(&e->events, &ev->link);
    if (strcmp(type, "deleted") == 0) {
        s->subs = NULL; /* the subscription is finished: a new semaphore of the name is new */
        group_detach(e, ev->grp);
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

/* Deliver the oldest queued event to every live subscriber of its group. */
void engine__events_deliver(engine_t *e)
{
    eevent_t *ev = ENGINE__CONTAINER(e->events.next, eevent_t, link);
    esub_group_t *g = ev->grp;
    int last = strcmp(ev->type, "deleted") == 0;

    elist_remove(&ev->link);
    g->refs++; /* keep the group while callbacks unsubscribe */
    for (elist_t *x = g->subs.next, *next; x != &g->subs; x = next) {
        engine_sub_t *sub = ENGINE__CONTAINER(x, engine_sub_t, link);
        next = x->next;
        if (sub->finished)
            continue;
        if (last)
            sub->finished = 1;
        sub->cb(sub->arg, ev->type, ev->data);
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
    esem_t *s = name ? engine__sem_find(e, name, len) : NULL;
    engine_sub_t *sub;
    esub_group_t *g;

    *out = NULL;
    if (s == NULL || cb == NULL)
        return SEMA_ENOENT;
    if (e->nsubs >= MAX_SUBSCRIPTIONS)
        return SEMA_ELIMIT;
    sub = sema__calloc(1, sizeof(*sub));
    if (sub == NULL)
        return SEMA_ENOMEM;
    g = s->subs;
    if (g == NULL) {
        g = sema__malloc(sizeof(*g) + len + 1);
        if (g == NULL) {
            sema__free(sub);
            return SEMA_ENOMEM;
        }
        elist_init(&g->subs);
        g->refs = 0;
        g->name_len = len;
        memcpy(g->name, name, len + 1);
        g->node.hash = engine__hash(name, len, 2);
        g->attached = 1;
        engine__tab_insert(&e->subgroups, &g->node);
        s->subs = g;
    }
    g->refs++;
    sub->grp = g;
    sub->cb = cb;
    sub->arg = arg;
    elist_push_back(&g->subs, &sub->link);
    e->nsubs++;
    *out = sub;
    return 0;
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
    group_detach(e, g);
    sema__free(g);
}

/* At engine free: subscriptions the caller still holds are freed with it. */
void engine__subs_free_all(engine_t *e)
{
    while (!elist_empty(&e->events)) {
        eevent_t *ev = ENGINE__CONTAINER(e->events.next, eevent_t, link);
        elist_remove(&ev->link);
        json_decref(ev->data);
        ev->grp->refs--;
        sema__free(ev);
    }
    engine__tab_each(&e->subgroups, free_group, e);
}

static void reattach_group(void *arg, enode_t *n)
{
    engine_t *e = arg;
    esub_group_t *g = ENGINE__CONTAINER(n, esub_group_t, node);
    esem_t *s = engine__sem_find(e, g->name, g->name_len);

    if (s != NULL) {
        s->subs = g;
        return;
    }
    /* The semaphore is gone after a reload: tell its subscribers. */
    eevent_t *ev = sema__malloc(sizeof(*ev));
    group_detach(e, g);
    if (ev == NULL)
        return;
    ev->grp = g;
    g->refs++;
    ev->type = "deleted";
    ev->data = json_pack("{s:s%}", "name", g->name, g->name_len);
    elist_push_back(&e->events, &ev->link);
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
