/* SPDX-License-Identifier: MIT */
/* redis_metrics.c - what the Redis back end tells /healthz and /metrics: its counts, its
 * connection and command counters, and the gauges it reads from Redis. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <string.h>

#include "common/jsonw.h"

void rs__stats(void *be, engine_stats_t *out)
{
    rs_t *r = be;

    uint64_t now = rs__now(r);

    /* READY: the library is loaded and the epoch checked (hello answered) on this connection */
    out->store = r->contact_mono == 0                            ? ENGINE_STORE_STARTING
                 : r->cmd.state != RS_CONN_READY                 ? ENGINE_STORE_UNREACHABLE
                 : now - r->contact_mono > ENGINE_CONTACT_MAX_MS ? ENGINE_STORE_SILENT
                                                                 : ENGINE_STORE_OK;
    out->contact_age_ms = r->contact_mono == 0 ? -1 : (int64_t)(now - r->contact_mono);
    out->semaphores = r->nsems;
    out->leases = r->nleases;
    out->locks = r->nlocks;
    out->parked = r->nparked;
    /* A request whose command is in flight: tests and shutdown wait for them. */
    out->writes_pending = !elist_empty(&r->inflight) || !elist_empty(&r->held) ||
                          (!elist_empty(&r->pending) && r->cmd.state != RS_CONN_DOWN) ||
                          r->cmd.state == RS_CONN_CONNECTING;
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void put_label(jsonw_t *w, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        const char *esc = s[i] == '\\'   ? "\\\\"
                          : s[i] == '"'  ? "\\\""
                          : s[i] == '\n' ? "\\n"
                                         : NULL;
        if (esc != NULL)
            jsonw_raw(w, esc, 2);
        else
            jsonw_raw(w, s + i, 1);
    }
}

/* The ticket series: counts kept in Redis (the same on every instance), and this instance's
 * watchers. */
static void put_ticket_series(rs_t *r, jsonw_t *w)
{
    static const char *const fields[] = {"tickets", "t_created",   "t_granted",
                                         "t_left",  "t_abandoned", "t_uncollected"};
    static const char *const names[][3] = {
        {"semad_tickets", "Tickets waiting or granted.", "gauge"},
        {"semad_tickets_created_total", "Tickets taken.", "counter"},
        {"semad_tickets_granted_total", "Tickets granted their lease.", "counter"},
        {"semad_tickets_left_total", "Tickets deleted by their holder.", "counter"},
        {"semad_tickets_abandoned_total", "Waiting tickets dropped: unread for keepalive_ms.",
         "counter"},
        {"semad_tickets_uncollected_total",
         "Granted tickets whose lease was released: not collected within keepalive_ms.", "counter"},
    };
    redisContext *c = rs__sync(r);
    redisReply *rep = NULL;
    int64_t sums[6] = {0};

    if (r->sh != NULL) /* (on a cluster: summed over the slots this instance has used) */
        rs__sh_epoch_sums(r, fields, 6, sums);
    else if (c != NULL)
        rep = redisCommand(c, "HMGET sema:epoch %s %s %s %s %s %s", fields[0], fields[1], fields[2],
                           fields[3], fields[4], fields[5]);
    for (size_t i = 0; i < 6; i++)
        jsonw_prom_series(w, names[i][0], names[i][1], names[i][2],
                          (uint64_t)(r->sh != NULL            ? sums[i]
                                     : rs__el_i64(rep, i) > 0 ? rs__el_i64(rep, i)
                                                              : 0));
    freeReplyObject(rep);
    jsonw_prom_series(w, "semad_ticket_watchers",
                      "Long-polls and streams waiting on a ticket's change now.", "gauge",
                      r->nwatch);
    jsonw_prom_series(w, "semad_ticket_position_updates_total",
                      "Position updates sent to ticket watchers (long-polls and streams).",
                      "counter", r->ticket_updates);
}

/* Gauges of the first semaphores by name (asked on the blocking connection). */
static void put_sem_gauges(rs_t *r, jsonw_t *w)
{
    static const char *const names[] = {"semad_semaphore_capacity", "semad_semaphore_available",
                                        "semad_semaphore_held", "semad_semaphore_waiters"};
    static const int field[] = {RS_V_CAPACITY, RS_V_AVAILABLE, RS_V_HELD, RS_V_WAITING};
    redisContext *c = rs__sync(r);
    redisReply *rep = NULL;
    const redisReply *items;
    char limit[24];

    snprintf(limit, sizeof limit, "%llu", (unsigned long long)r->cfg.metrics_max_semaphores);
    if (c != NULL && r->cfg.metrics_max_semaphores > 0) {
        rs_args_t a = {0};
        rs__args_head(r, &a, "sema:names", 10, "list", "", NULL);
        rs__arg_str(&a, "");
        rs__arg_str(&a, "");
        rs__arg_str(&a, limit);
        if (!a.oom)
            rep = redisCommandArgv(c, a.n, a.v, a.l);
        rs__args_free(&a);
    }
    items = rs__el_arr(rep, RS_R_RESULT + 1);
    for (int k = 0; k < 4; k++) {
        jsonw_raw_str(w, "# TYPE ");
        jsonw_raw_str(w, names[k]);
        jsonw_raw_str(w, " gauge\n");
        for (size_t i = 0; items != NULL && i + RS_ITEM_LEN <= items->elements; i += RS_ITEM_LEN) {
            size_t nl;
            const char *name = rs__el_str(items, i, &nl);
            jsonw_raw_str(w, names[k]);
            jsonw_raw_str(w, "{name=\"");
            put_label(w, name, nl);
            jsonw_raw_str(w, "\"} ");
            jsonw_raw_i64(w, rs__el_i64(items, i + 1 + (size_t)field[k]));
            jsonw_raw(w, "\n", 1);
        }
    }
    freeReplyObject(rep);
}

/* Undo commands (RS_CMD_DROP, RS_CMD_CANCEL) not yet answered or, in strict, not yet confirmed. */
static uint64_t count_undo(const rs_t *r)
{
    const elist_t *lists[] = {&r->unconfirmed, &r->pending, &r->retry, &r->inflight};
    uint64_t n = 0;

    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        for (const elist_t *x = lists[i]->next; x != lists[i]; x = x->next) {
            const rs_cmd_t *c = ECONTAINER(x, rs_cmd_t, link);
            n += c->kind == RS_CMD_DROP || c->kind == RS_CMD_CANCEL;
        }
    return n;
}

int rs__metrics(void *be, struct strbuf *out)
{
    rs_t *r = be;
    jsonw_t w;

    jsonw_init(&w, out);
    jsonw_prom_series(&w, "semad_redis_connected", "1 while the Redis connection is up.", "gauge",
                      r->cmd.state == RS_CONN_READY && !r->resyncing);
    jsonw_prom_series(&w, "semad_redis_subscriber_connected",
                      "1 while the Redis subscriber connection is up.", "gauge",
                      r->sub.state == RS_CONN_READY);
    jsonw_prom_series(&w, "semad_redis_commands_total", "Commands sent to Redis.", "counter",
                      r->commands);
    jsonw_prom_series(&w, "semad_redis_reconnects_total", "Connection attempts to Redis.",
                      "counter", r->reconnects);
    jsonw_prom_series(&w, "semad_redis_command_timeouts_total",
                      "Connections dropped because a command got no answer in time.", "counter",
                      r->cmd_timeouts);
    jsonw_prom_series(&w, "semad_redis_unknown_outcomes_total",
                      "Commands whose connection went before their answer (retried).", "counter",
                      r->unknown_outcomes);
    jsonw_prom_series(&w, "semad_redis_wakeups_total", "Wake-up messages received.", "counter",
                      r->wakes);
    jsonw_prom_series(&w, "semad_redis_event_log_reads_total",
                      "Reads of a semaphore's event log in Redis (resumes, and events that "
                      "reached this instance out of order or not at all).",
                      "counter", r->log_reads);
    jsonw_prom_series(&w, "semad_redis_collects_total",
                      "Collections of grants for parked requests (wake-ups, heartbeats).",
                      "counter", r->collects);
    jsonw_prom_series(&w, "semad_redis_waiters_lost_total",
                      "Parked requests Redis no longer knew (answered 503).", "counter", r->gone);
    jsonw_prom_series(&w, "semad_redis_epoch_changes_total",
                      "Times Redis was found to have lost its data.", "counter", r->epoch_changes);
    jsonw_prom_series(&w, "semad_redis_waits_total", "WAIT commands (strict durability).",
                      "counter", r->waits);
    jsonw_prom_series(&w, "semad_redis_waits_short_total",
                      "WAIT commands that returned fewer replicas than asked.", "counter",
                      r->waits_short);
    jsonw_prom_series(&w, "semad_redis_undo_pending",
                      "Commands that end a lease or a wait on a client's behalf (an undo, a "
                      "release sent again) not yet answered or, in strict, confirmed by WAIT.",
                      "gauge", count_undo(r));
    jsonw_prom_series(&w, "semad_parked_waiters", "Requests parked now.", "gauge", r->nparked);
    jsonw_prom_series(&w, "semad_semaphores", "Semaphores.", "gauge", r->nsems);
    jsonw_prom_series(&w, "semad_leases", "Live leases.", "gauge", r->nleases);
    jsonw_prom_series(&w, "semad_lock_keys", "Keyed locks held or awaited.", "gauge", r->nlocks);
    put_ticket_series(r, &w);
    put_sem_gauges(r, &w);
    return jsonw_end(&w);
}
