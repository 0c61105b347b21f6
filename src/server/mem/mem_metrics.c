/* SPDX-License-Identifier: MIT */
/* mem_metrics.c - the in-memory back end's Prometheus series: its store commits, its
 * counts, and gauges for the first semaphores by name. */
#include "mem_internal.h"

#include "jsonw.h"

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

static int64_t gauge_value(const esem_t *s, int k)
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

static void put_sem_gauges(mem_t *e, jsonw_t *w)
{
    static const char *const names[] = {"semad_semaphore_capacity", "semad_semaphore_available",
                                        "semad_semaphore_held", "semad_semaphore_waiters"};

    for (int k = 0; k < 4; k++) {
        uint64_t n = 0;
        jsonw_raw_str(w, "# TYPE ");
        jsonw_raw_str(w, names[k]);
        jsonw_raw_str(w, " gauge\n");
        for (esem_t *s = mem__treap_after(e, "", 0, 1);
             s != NULL && n < e->cfg.metrics_max_semaphores;
             s = mem__treap_after(e, s->name, s->name_len, 0), n++) {
            jsonw_raw_str(w, names[k]);
            jsonw_raw_str(w, "{name=\"");
            put_label(w, s->name, s->name_len);
            jsonw_raw_str(w, "\"} ");
            jsonw_raw_i64(w, gauge_value(s, k));
            jsonw_raw(w, "\n", 1);
        }
    }
}

int mem__metrics(void *be, struct strbuf *out)
{
    mem_t *e = be;
    jsonw_t w;

    jsonw_init(&w, out);
    jsonw_prom_series(&w, "semad_store_commits_total", "Group commits.", "counter", e->commits);
    jsonw_prom_series(&w, "semad_store_commit_failures_total", "Failed group commits.", "counter",
                      e->commit_failures);
    engine__hist_write(&w, "semad_store_commit_seconds",
                       "Group commits: the time to write and sync each (the journal append, and a "
                       "checkpoint when one is due with it).",
                       &e->commit_s);
    jsonw_prom_series(&w, "semad_store_checkpoints_total",
                      "Checkpoints: the journal's changes written to the database.", "counter",
                      e->checkpoints);
    jsonw_prom_series(&w, "semad_store_checkpoint_failures_total",
                      "Failed checkpoints (the journal keeps the changes; tried again).", "counter",
                      e->checkpoint_failures);
    jsonw_prom_series(&w, "semad_parked_waiters", "Requests parked now.", "gauge", e->nparked);
    jsonw_prom_series(&w, "semad_semaphores", "Semaphores.", "gauge", e->sems.count);
    jsonw_prom_series(&w, "semad_leases", "Live leases.", "gauge", e->leases.count);
    jsonw_prom_series(&w, "semad_lock_keys", "Keyed locks held or awaited.", "gauge",
                      e->locks.count);
    jsonw_prom_series(&w, "semad_tickets", "Tickets waiting or granted.", "gauge",
                      e->tickets.count);
    jsonw_prom_series(&w, "semad_tickets_created_total", "Tickets taken.", "counter",
                      e->tickets_created);
    jsonw_prom_series(&w, "semad_tickets_granted_total", "Tickets granted their lease.", "counter",
                      e->tickets_granted);
    jsonw_prom_series(&w, "semad_tickets_left_total", "Tickets deleted by their holder.", "counter",
                      e->tickets_left);
    jsonw_prom_series(&w, "semad_tickets_abandoned_total",
                      "Waiting tickets dropped: unread for keepalive_ms.", "counter",
                      e->tickets_abandoned);
    jsonw_prom_series(&w, "semad_tickets_uncollected_total",
                      "Granted tickets whose lease was released: not collected within "
                      "keepalive_ms.",
                      "counter", e->tickets_uncollected);
    jsonw_prom_series(&w, "semad_ticket_watchers",
                      "Long-polls and streams waiting on a ticket's change now.", "gauge",
                      e->nwatchers);
    jsonw_prom_series(&w, "semad_ticket_position_updates_total",
                      "Position updates sent to ticket watchers (long-polls and streams).",
                      "counter", e->ticket_updates);
    put_sem_gauges(e, &w);
    return jsonw_end(&w);
}
