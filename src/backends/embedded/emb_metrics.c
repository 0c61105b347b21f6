/* SPDX-License-Identifier: MIT */
/* emb_metrics.c - the embedded back end's Prometheus series: its store commits, its
 * counts, and gauges for the first semaphores by name. */
#include "backends/embedded/emb_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"

/* A Prometheus label value: backslash, quote and newline escaped. */
static void put_label(jsonw_t *w, const char *s, size_t len)
{
    size_t run = 0;

    for (size_t i = 0; i < len; i++) {
        const char *esc = s[i] == '\\'   ? "\\\\"
                          : s[i] == '"'  ? "\\\""
                          : s[i] == '\n' ? "\\n"
                                         : NULL;
        if (esc == NULL)
            continue;
        jsonw_raw(w, s + run, i - run);
        jsonw_raw(w, esc, 2);
        run = i + 1;
    }
    jsonw_raw(w, s + run, len - run);
}

static int64_t gauge_value(const emb_sem_t *s, int k)
{
    switch (k) {
    case 0:
        return (int64_t)s->capacity;
    case 1:
        return s->available;
    case 2:
        return (int64_t)s->held;
    default:
        return (int64_t)s->nwaiters;
    }
}

static void put_sem_gauges(emb_t *eb, jsonw_t *w)
{
    static const char *const names[] = {"semad_semaphore_capacity", "semad_semaphore_available",
                                        "semad_semaphore_held", "semad_semaphore_waiters"};

    for (int k = 0; k < 4; k++) {
        uint64_t n = 0;
        jsonw_raw_str(w, "# TYPE ");
        jsonw_raw_str(w, names[k]);
        jsonw_raw_str(w, " gauge\n");
        for (emb_sem_t *s = emb__treap_after(eb->root, "", 0, 1);
             s != NULL && n < eb->cfg.metrics_max_semaphores;
             s = emb__treap_after(eb->root, s->name, s->name_len, 0), n++) {
            jsonw_raw_str(w, names[k]);
            jsonw_raw_str(w, "{name=\"");
            put_label(w, s->name, s->name_len);
            jsonw_raw_str(w, "\"} ");
            jsonw_raw_i64(w, gauge_value(s, k));
            jsonw_raw(w, "\n", 1);
        }
    }
}

/* ---- tenants: bounded series ---- */

static uint64_t tenant_units(const emb_tenant_t *t)
{
    return t->held + t->waiting;
}

/* Most units (held and waiting) first, then by name. */
static int by_units(const void *a, const void *b)
{
    const emb_tenant_t *x = *(emb_tenant_t *const *)a, *y = *(emb_tenant_t *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c;

    if (tenant_units(x) != tenant_units(y))
        return tenant_units(x) > tenant_units(y) ? -1 : 1;
    c = memcmp(x->name, y->name, n);
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static void tenant_line(jsonw_t *w, const char *metric, const emb_sem_t *s, const char *tenant,
                        size_t len, uint64_t v)
{
    jsonw_raw_str(w, metric);
    jsonw_raw_str(w, "{name=\"");
    put_label(w, s->name, s->name_len);
    jsonw_raw_str(w, "\",tenant=\"");
    put_label(w, tenant, len);
    jsonw_raw_str(w, "\"} ");
    jsonw_raw_i64(w, (int64_t)v);
    jsonw_raw(w, "\n", 1);
}

/* One semaphore's tenants: the `max` with the most units by name ("" for the requests naming
 * none), the others summed as "_other". k: 0 held, 1 waiting units. */
static void put_tenants(jsonw_t *w, const emb_sem_t *s, int k, const char *metric, size_t max,
                        emb_tenant_t **order)
{
    uint64_t other = 0;
    size_t n = 0;

    for (const elist_t *x = s->lim->tenants.next; x != &s->lim->tenants; x = x->next)
        order[n++] = ECONTAINER(x, emb_tenant_t, all);
    qsort(order, n, sizeof(*order), by_units);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = k == 0 ? order[i]->held : order[i]->waiting;
        if (i < max)
            tenant_line(w, metric, s, order[i]->name, order[i]->name_len, v);
        else
            other += v;
    }
    if (n > max)
        tenant_line(w, metric, s, "_other", 6, other);
}

/* semad_tenant_held and semad_tenant_waiting of the semaphores with gauges, and the tokens of
 * those with a rate: at most metrics_max_semaphores x (metrics_max_tenants + 1) series. */
static void put_limits_gauges(emb_t *eb, jsonw_t *w)
{
    static const char *const names[] = {"semad_tenant_held", "semad_tenant_waiting"};
    emb_tenant_t *order[ENGINE_TENANTS_PER_SEM_MAX];

    for (int k = 0; k < 2; k++) {
        uint64_t n = 0;
        jsonw_raw_str(w, "# TYPE ");
        jsonw_raw_str(w, names[k]);
        jsonw_raw_str(w, " gauge\n");
        for (emb_sem_t *s = emb__treap_after(eb->root, "", 0, 1);
             s != NULL && n < eb->cfg.metrics_max_semaphores;
             s = emb__treap_after(eb->root, s->name, s->name_len, 0), n++)
            if (s->lim != NULL && s->lim->ntenants > 0)
                put_tenants(w, s, k, names[k], eb->cfg.metrics_max_tenants, order);
    }
    uint64_t n = 0;
    jsonw_raw_str(w, "# TYPE semad_semaphore_tokens gauge\n");
    for (emb_sem_t *s = emb__treap_after(eb->root, "", 0, 1);
         s != NULL && n < eb->cfg.metrics_max_semaphores;
         s = emb__treap_after(eb->root, s->name, s->name_len, 0), n++) {
        if (s->lim == NULL || s->lim->rate_per_s == 0)
            continue;
        jsonw_raw_str(w, "semad_semaphore_tokens{name=\"");
        put_label(w, s->name, s->name_len);
        jsonw_raw_str(w, "\"} ");
        jsonw_raw_i64(w, (int64_t)emb__tokens(eb, s));
        jsonw_raw(w, "\n", 1);
    }
}

int emb__metrics(void *be, struct strbuf *out)
{
    emb_t *eb = be;
    jsonw_t w;

    jsonw_init(&w, out);
    jsonw_prom_series(&w, "semad_store_commits_total", "Group commits.", "counter", eb->commits);
    jsonw_prom_series(&w, "semad_store_commit_failures_total", "Failed group commits.", "counter",
                      eb->commit_failures);
    engine__hist_write(&w, "semad_store_commit_seconds",
                       "Group commits: the time to write and sync each (the journal append, and a "
                       "checkpoint when one is due with it).",
                       &eb->commit_s);
    jsonw_prom_series(&w, "semad_store_checkpoints_total",
                      "Checkpoints: the journal's changes written to the database.", "counter",
                      eb->checkpoints);
    jsonw_prom_series(&w, "semad_store_checkpoint_failures_total",
                      "Failed checkpoints (the journal keeps the changes; tried again).", "counter",
                      eb->checkpoint_failures);
    jsonw_prom_series(&w, "semad_parked_waiters", "Requests parked now.", "gauge", eb->nparked);
    jsonw_prom_series(&w, "semad_semaphores", "Semaphores.", "gauge", eb->sems.count);
    jsonw_prom_series(&w, "semad_leases", "Live leases.", "gauge", eb->leases.count);
    jsonw_prom_series(&w, "semad_lock_keys", "Keyed locks held or awaited.", "gauge",
                      eb->locks.count);
    jsonw_prom_series(&w, "semad_tickets", "Tickets waiting or granted.", "gauge",
                      eb->tickets.count);
    jsonw_prom_series(&w, "semad_tickets_created_total", "Tickets taken.", "counter",
                      eb->tickets_created);
    jsonw_prom_series(&w, "semad_tickets_granted_total", "Tickets granted their lease.", "counter",
                      eb->tickets_granted);
    jsonw_prom_series(&w, "semad_tickets_left_total", "Tickets deleted by their holder.", "counter",
                      eb->tickets_left);
    jsonw_prom_series(&w, "semad_tickets_abandoned_total",
                      "Waiting tickets dropped: unread for keepalive_ms.", "counter",
                      eb->tickets_abandoned);
    jsonw_prom_series(&w, "semad_tickets_uncollected_total",
                      "Granted tickets whose lease was released: not collected within "
                      "keepalive_ms.",
                      "counter", eb->tickets_uncollected);
    jsonw_prom_series(&w, "semad_ticket_watchers",
                      "Long-polls and streams waiting on a ticket's change now.", "gauge",
                      eb->nwatchers);
    jsonw_prom_series(&w, "semad_ticket_position_updates_total",
                      "Position updates sent to ticket watchers (long-polls and streams).",
                      "counter", eb->ticket_updates);
    put_sem_gauges(eb, &w);
    put_limits_gauges(eb, &w);
    return jsonw_end(&w);
}
