/* SPDX-License-Identifier: MIT */
/* metrics.c - the engine's Prometheus metrics: the front's counters and histograms, then
 * the back end's own series, written with the one output writer. */
#include "engine/front.h"

#include <stdio.h>
#include <string.h>

#include "common/jsonw.h"

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

/* A real as printf's %g (a bucket bound) or %.6f (a sum) writes it. */
static void put_real(jsonw_t *w, int bound, double v)
{
    char num[64];
    int n = bound ? snprintf(num, sizeof num, "%g", v) : snprintf(num, sizeof num, "%.6f", v);

    jsonw_raw(w, num, n > 0 && (size_t)n < sizeof num ? (size_t)n : 0);
}

void engine__hist_write(jsonw_t *w, const char *name, const char *help, const ehist_t *h)
{
    uint64_t cum = 0;

    jsonw_prom_head(w, name, help, "histogram");
    for (int i = 0; i <= ENGINE_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        jsonw_raw_str(w, name);
        jsonw_raw_str(w, "_bucket{le=\"");
        if (i < ENGINE_HIST_BUCKETS)
            put_real(w, 1, hist_bounds[i]);
        else
            jsonw_raw_str(w, "+Inf");
        jsonw_raw_str(w, "\"} ");
        jsonw_raw_u64(w, cum);
        jsonw_raw(w, "\n", 1);
    }
    jsonw_raw_str(w, name);
    jsonw_raw_str(w, "_sum ");
    put_real(w, 0, h->sum);
    jsonw_raw(w, "\n", 1);
    jsonw_raw_str(w, name);
    jsonw_raw_str(w, "_count ");
    jsonw_raw_u64(w, h->n);
    jsonw_raw(w, "\n", 1);
}

int engine_metrics(engine_t *e, struct strbuf *b)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } counters[] = {
        {"semad_grants_total", "Leases granted.", offsetof(engine_counters_t, grants)},
        {"semad_releases_total", "Leases released.", offsetof(engine_counters_t, releases)},
        {"semad_expirations_total", "Leases expired.", offsetof(engine_counters_t, expirations)},
        {"semad_revocations_total", "Leases revoked.", offsetof(engine_counters_t, revocations)},
        {"semad_timeouts_total", "Parked requests that timed out.",
         offsetof(engine_counters_t, timeouts)},
        {"semad_cancellations_total", "Parked requests withdrawn (client gone).",
         offsetof(engine_counters_t, cancellations)},
    };
    jsonw_t w;
    int rc;

    jsonw_init(&w, b);
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        jsonw_prom_series(&w, counters[i].name, counters[i].help, "counter",
                          *(const uint64_t *)(const void *)((const char *)&e->m + counters[i].off));
    jsonw_prom_series(&w, "semad_event_streams", "Event subscriptions open now.", "gauge",
                      e->nsubs);
    jsonw_prom_series(&w, "semad_event_streams_kept",
                      "Semaphores with no subscriber still recording events for a resume.", "gauge",
                      e->nidle_groups);
    engine__hist_write(&w, "semad_wait_seconds", "Time from request to grant.", &e->m.wait_s);
    engine__hist_write(&w, "semad_hold_seconds", "Time from grant to end.", &e->m.hold_s);
    rc = jsonw_end(&w);
    return rc ? SEMA_ENOMEM : 0;
}
