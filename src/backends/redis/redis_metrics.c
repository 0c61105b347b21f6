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
    out->writes_pending = !elist_empty(&r->inflight) || !elist_empty(&r->held) || r->nbatch > 0 ||
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

/* The ticket counters as the epoch hash keeps them (summed over the slots on a cluster). */
static const char *const ticket_fields[RS_M_TICKET_FIELDS] = {
    "tickets", "t_created", "t_granted", "t_left", "t_abandoned", "t_uncollected"};

/* The ticket series: counts kept in Redis (the same on every instance), and this instance's
 * watchers. */
static void put_ticket_series(const rs_t *r, jsonw_t *w, const int64_t *sums)
{
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

    for (size_t i = 0; i < RS_M_TICKET_FIELDS; i++)
        jsonw_prom_series(w, names[i][0], names[i][1], names[i][2], (uint64_t)sums[i]);
    jsonw_prom_series(w, "semad_ticket_watchers",
                      "Long-polls and streams waiting on a ticket's change now.", "gauge",
                      r->nwatch);
    jsonw_prom_series(w, "semad_ticket_position_updates_total",
                      "Position updates sent to ticket watchers (long-polls and streams).",
                      "counter", r->ticket_updates);
}

/* Add the counters of one epoch hash's HMGET answer (a missing or negative one counts 0). */
static void add_sums(int64_t *sums, const redisReply *rep)
{
    for (size_t i = 0; i < RS_M_TICKET_FIELDS; i++)
        sums[i] += rs__el_i64(rep, i) > 0 ? rs__el_i64(rep, i) : 0;
}

/* ---- tenants: bounded series ---- */

/* Most units (held and waiting) first, then by name. */
static int by_units(const void *a, const void *b)
{
    const engine_tenant_t *x = a, *y = b;
    uint64_t ux = x->held + x->waiting_weight, uy = y->held + y->waiting_weight;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c;

    if (ux != uy)
        return ux > uy ? -1 : 1;
    c = n > 0 ? memcmp(x->name, y->name, n) : 0;
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static void tenant_line(jsonw_t *w, const char *metric, const char *sem, size_t slen,
                        const char *tenant, size_t len, uint64_t v)
{
    jsonw_raw_str(w, metric);
    jsonw_raw_str(w, "{name=\"");
    put_label(w, sem, slen);
    jsonw_raw_str(w, "\",tenant=\"");
    put_label(w, tenant, len);
    jsonw_raw_str(w, "\"} ");
    jsonw_raw_i64(w, (int64_t)v);
    jsonw_raw(w, "\n", 1);
}

/* One semaphore's tenants from its list item's limits (lim): the `max` with the most units by
 * name ("" for the requests naming none), the others summed as "_other". k: 0 held, 1 waiting
 * units. */
static void put_tenants(jsonw_t *w, const redisReply *lim, const char *sem, size_t slen, int k,
                        const char *metric, size_t max, engine_tenant_t *order)
{
    size_t n = (lim->elements - RS_VLIM_LEN) / RS_TENANT_LEN;
    uint64_t other = 0;

    n = n < ENGINE_TENANTS_PER_SEM_MAX ? n : ENGINE_TENANTS_PER_SEM_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t at = RS_VLIM_LEN + i * RS_TENANT_LEN;
        order[i].name = rs__el_str(lim, at + RS_TN_NAME, &order[i].name_len);
        order[i].held = (uint64_t)rs__el_i64(lim, at + RS_TN_HELD);
        order[i].waiting_weight = (uint64_t)rs__el_i64(lim, at + RS_TN_WAITING_WEIGHT);
    }
    qsort(order, n, sizeof(*order), by_units);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = k == 0 ? order[i].held : order[i].waiting_weight;
        if (i < max)
            tenant_line(w, metric, sem, slen, order[i].name, order[i].name_len, v);
        else
            other += v;
    }
    if (n > max)
        tenant_line(w, metric, sem, slen, "_other", 6, other);
}

/* semad_tenant_held and semad_tenant_waiting of the semaphores listed, and the tokens of those
 * with a rate: at most metrics_max_semaphores x (metrics_max_tenants + 1) series. */
static void put_limits_gauges(const rs_t *r, jsonw_t *w, const redisReply *items)
{
    static const char *const names[] = {"semad_tenant_held", "semad_tenant_waiting"};
    static engine_tenant_t order[ENGINE_TENANTS_PER_SEM_MAX]; /* (the loop's thread only) */

    for (int k = 0; k < 3; k++) {
        jsonw_raw_str(w, "# TYPE ");
        jsonw_raw_str(w, k < 2 ? names[k] : "semad_semaphore_tokens");
        jsonw_raw_str(w, " gauge\n");
        for (size_t i = 0; items != NULL && i + RS_ITEM_LEN <= items->elements; i += RS_ITEM_LEN) {
            const redisReply *lim = rs__el_arr(items, i + RS_ITEM_LIMITS);
            size_t nl;
            const char *name = rs__el_str(items, i, &nl);
            if (lim == NULL || lim->elements < RS_VLIM_LEN)
                continue;
            if (k < 2) {
                put_tenants(w, lim, name, nl, k, names[k], r->cfg.metrics_max_tenants, order);
            } else if (rs__el_i64(lim, RS_VL_RATE) != 0) {
                jsonw_raw_str(w, "semad_semaphore_tokens{name=\"");
                put_label(w, name, nl);
                jsonw_raw_str(w, "\"} ");
                jsonw_raw_i64(w, rs__el_i64(lim, RS_VL_TOKENS));
                jsonw_raw(w, "\n", 1);
            }
        }
    }
}

/* Gauges of the first semaphores by name: items is the list's answer (NULL: none). */
static void put_sem_gauges(const rs_t *r, jsonw_t *w, const redisReply *items)
{
    static const char *const names[] = {"semad_semaphore_capacity", "semad_semaphore_available",
                                        "semad_semaphore_held", "semad_semaphore_waiters"};
    static const int field[] = {RS_V_CAPACITY, RS_V_AVAILABLE, RS_V_HELD, RS_V_WAITING};

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
    put_limits_gauges(r, w, items);
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

/* The back end's series after the front's: the ticket counters summed in `sums`, the
 * per-semaphore gauges' text in `gauges` (written from the list's answer). */
static int put_all(rs_t *r, struct strbuf *out, const int64_t *sums, const struct strbuf *gauges)
{
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
    put_ticket_series(r, &w, sums);
    if (gauges->len > 0)
        jsonw_raw(&w, gauges->data, gauges->len);
    else
        put_sem_gauges(r, &w, NULL);
    return jsonw_end(&w);
}

/* ---- ENGINE_METRICS: what it reads from Redis ---- */

/* One /metrics request while it reads. */
typedef struct {
    rs_t *r;
    rs_req_t *rq; /* rq->req is NULL once the request was cancelled */
    int inflight; /* reads not answered yet */
    int nomem;    /* a read's answer could not be kept */
    int64_t sums[RS_M_TICKET_FIELDS];
    struct strbuf gauges; /* the per-semaphore gauges, written from the list's answer */
} rs_mreq_t;

/* On a cluster: the HMGET of one used slot's epoch hash. */
typedef struct {
    rs_ccmd_t cc;
    rs_mreq_t *m;
    const char *argv[2 + RS_M_TICKET_FIELDS];
    size_t lens[2 + RS_M_TICKET_FIELDS];
    char key[32];
} rs_mpart_t;

static void metrics_end(rs_mreq_t *m)
{
    rs_req_t *rq = m->rq;

    if (rq->req == NULL) {
        sema__free(rq); /* (cancelled while it read) */
    } else {
        int bad = m->nomem || put_all(m->r, rq->req->text, m->sums, &m->gauges) != 0;
        rs__finish(m->r, rq, bad ? SEMA_ENOMEM : 0, NULL, 0);
    }
    strbuf_free(&m->gauges);
    sema__free(m);
}

/* A read answered (or failed: what it would have added counts 0). */
static void read_done(rs_mreq_t *m)
{
    rs_t *r = m->r;

    if (--m->inflight > 0)
        return;
    metrics_end(m);
    rs__drain(r);
}

static void sums_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_mreq_t *m = priv;

    (void)ac;
    add_sums(m->sums, reply);
    read_done(m);
}

static void list_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_mreq_t *m = priv;
    jsonw_t w;

    (void)ac;
    if (reply != NULL && m->rq->req != NULL) {
        jsonw_init(&w, &m->gauges);
        put_sem_gauges(m->r, &w, rs__el_arr(reply, RS_R_RESULT + 1));
        m->nomem |= jsonw_end(&w) != 0;
    }
    read_done(m);
}

/* One Redis: the epoch hash's counters and the first semaphores, on the command connection
 * (none while it is down: the series then say 0, and no gauges). */
static void read_one(rs_t *r, rs_mreq_t *m)
{
    redisAsyncContext *ac = r->cmd.ac;
    rs_args_t a = {0};
    char limit[24];

    if (r->cmd.state != RS_CONN_READY || ac == NULL)
        return;
    m->inflight +=
        redisAsyncCommand(ac, sums_cb, m, "HMGET sema:epoch %s %s %s %s %s %s", ticket_fields[0],
                          ticket_fields[1], ticket_fields[2], ticket_fields[3], ticket_fields[4],
                          ticket_fields[5]) == REDIS_OK;
    if (r->cfg.metrics_max_semaphores == 0)
        return;
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)r->cfg.metrics_max_semaphores);
    rs__args_head(r, &a, "sema:names", 10, "list", "", NULL);
    rs__arg_str(&a, "");
    rs__arg_str(&a, "");
    rs__arg_str(&a, limit);
    if (!a.oom)
        m->inflight += redisAsyncCommandArgv(ac, list_cb, m, a.n, a.v, a.l) == REDIS_OK;
    rs__args_free(&a);
}

static void part_cb(rs_cluster_t *cl, rs_ccmd_t *cc, int how, redisReply *rep)
{
    rs_mpart_t *p = cc->data;
    rs_mreq_t *m = p->m;

    (void)cl;
    if (how == RS_CL_REPLY)
        add_sums(m->sums, rep);
    sema__free(p);
    read_done(m);
}

/* A cluster: the counters of every slot this instance has used, one HMGET each, sent to the
 * slots' primaries at once (each primary's in one write). The per-semaphore gauges are left
 * out (docs/redis.md). */
static void read_slots(rs_t *r, rs_mreq_t *m)
{
    rs_cluster_t *cl = rs__sh_cluster(r);

    for (unsigned s = 0; cl != NULL && s < RS_SLOTS; s++) {
        rs_mpart_t *p;
        if (!rs__sh_slot_used(r, s) || rs__cluster_owner(cl, s) == NULL)
            continue;
        if ((p = sema__calloc(1, sizeof(*p))) == NULL) {
            m->nomem = 1;
            return;
        }
        p->m = m;
        p->argv[0] = "HMGET";
        p->argv[1] = p->key;
        p->lens[0] = 5;
        p->lens[1] = rs__home_key(r, s, "epoch", p->key, sizeof p->key);
        for (int i = 0; i < RS_M_TICKET_FIELDS; i++) {
            p->argv[2 + i] = ticket_fields[i];
            p->lens[2 + i] = strlen(ticket_fields[i]);
        }
        p->cc = (rs_ccmd_t){.argc = 2 + RS_M_TICKET_FIELDS,
                            .argv = p->argv,
                            .lens = p->lens,
                            .key = p->key,
                            .key_len = p->lens[1],
                            .cb = part_cb,
                            .data = p};
        m->inflight++;
        if (rs__cluster_send(cl, &p->cc) != 0) {
            m->inflight--;
            sema__free(p);
            return; /* (too many commands waiting: the rest count 0) */
        }
    }
}

void rs__metrics_send(rs_t *r, rs_req_t *rq)
{
    rs_mreq_t *m = sema__calloc(1, sizeof(*m));

    if (m == NULL) {
        rs__fail(r, rq, BE_MSG_NOMEM, 0);
        return;
    }
    m->r = r;
    m->rq = rq;
    m->inflight = 1; /* (until every read is sent: none ends it from inside) */
    strbuf_init(&m->gauges, 0);
    rq->state = RS_REQ_SENT;
    if (r->sh != NULL)
        read_slots(r, m);
    else
        read_one(r, m);
    if (--m->inflight == 0)
        metrics_end(m);
}
