/* SPDX-License-Identifier: MIT */
/* sse.c - GET /v1/semaphores/{name}/events: the engine's events as Server-Sent Events (a
 * client that reconnects with Last-Event-ID gets the events it missed first); and
 * GET /v1/tickets/{id}/events: a ticket's state as it changes. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_limits.h"
#include "http/problem.h"
#include "http/render.h"
#include "http/server_internal.h"

#include "sema/error.h"

/* One live engine event. After "deleted" the stream ends. */
static void on_event(void *arg, const char *id, const char *type, const char *data, size_t len)
{
    conn_t *conn = arg;
    conn_stream_event(conn, id, type, data, len);
    if (strcmp(type, "deleted") == 0)
        conn_stream_end(conn);
}

typedef struct {
    struct strbuf out;
    int failed, deleted;
} replay_t;

/* A replayed event: collected, written at once after the resume. */
static void on_replay(void *arg, const char *id, const char *type, const char *data, size_t len)
{
    replay_t *r = arg;
    if (r->failed || stream_format(&r->out, id, type, data, len) != 0)
        r->failed = 1;
    if (strcmp(type, "deleted") == 0)
        r->deleted = 1;
}

static void events_open_done(route_ctx_t *c, engine_req_t *req)
{
    engine_t *e = server_engine(c->srv);
    engine_sub_t *sub = NULL;
    conn_t *conn = c->conn;
    int rc = req->status != 0 ? req->status : engine_subscribe(e, req, on_event, conn, &sub);
    if (rc != 0) {
        ctx_reply_err(c, rc, rc == SEMA_ENOENT ? "no such semaphore" : NULL);
        return;
    }
    if (ctx_stream_begin(c, sub) != 0 || req->id == NULL)
        return;
    replay_t r = {.failed = 0, .deleted = 0};
    strbuf_init(&r.out, 0);
    engine_sub_resume(e, sub, req, on_replay, &r);
    if (r.failed)
        conn_stream_end(conn); /* out of memory: the client reconnects and asks again */
    else if (r.out.len > 0 && conn_stream_write(conn, r.out.data, r.out.len) == 0 && r.deleted)
        conn_stream_end(conn);
    strbuf_free(&r.out);
}

/* GET /v1/semaphores/{name}/events: the engine gets ready (on Redis: it follows the
 * semaphore's log, and reads what followed Last-Event-ID) without blocking the loop, then
 * the stream starts */
void v1_events(route_ctx_t *c)
{
    const char *last = c->req->last_event_id;
    c->ereq.op = ENGINE_EVENTS_OPEN;
    c->ereq.name = c->param;
    c->ereq.name_len = c->param_len;
    c->ereq.id = last != NULL && last[0] != '\0' ? last : NULL;
    c->ereq.id_len = 0;
    ctx_submit(c, events_open_done);
}

/* ---- GET /v1/tickets/{id}/events ----
 *
 * A ticket's state as a stream: the connection keeps one long-poll of the ticket parked in
 * the engine (which keeps the ticket alive), writes each answer as an event and parks the
 * next. The engine answers at once when the status changes and at most once per
 * poll_after_ms when only the position does, so updates are coalesced. Each event's id is
 * the ticket's state: a client that reconnects with Last-Event-ID gets the current state
 * only if it differs from the last it saw. The stream ends with an "ended" event (the
 * problem document) when the ticket ends. */

static void ticket_next_done(route_ctx_t *c, engine_req_t *req);

/* Write one event; 0, or -1 when the stream was cut. */
static int ticket_event(route_ctx_t *c, const char *type, uint64_t state, const char *data,
                        size_t len)
{
    char id[24];
    struct strbuf out;
    int rc;
    snprintf(id, sizeof id, "%llu", (unsigned long long)state);
    strbuf_init(&out, 0);
    rc = stream_format(&out, id, type, data, len);
    if (rc == 0)
        rc = conn_stream_write(c->conn, out.data, out.len);
    strbuf_free(&out);
    return rc == 0 ? 0 : -1;
}

static int ticket_state_event(route_ctx_t *c, const engine_req_t *req)
{
    struct strbuf data;
    int rc;
    strbuf_init(&data, 0);
    rc = render_ticket(&data, &req->res);
    if (rc == 0)
        rc =
            ticket_event(c, req->res.ticket.status == ENGINE_TICKET_GRANTED ? "granted" : "waiting",
                         req->res.ticket.state, data.data, data.len);
    else
        conn_stream_end(c->conn);
    strbuf_free(&data);
    return rc;
}

static void ticket_park(route_ctx_t *c, uint64_t seen)
{
    c->ereq.op = ENGINE_TICKET_GET;
    c->ereq.id = c->param;
    c->ereq.id_len = c->param_len;
    c->ereq.timeout_ms = ENGINE_TICKET_WAIT_MAX_MS; /* each look of the stream is a long-poll */
    c->ereq.seen = seen;
    ctx_submit(c, ticket_next_done);
}

static void ticket_next_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status != 0) {
        const problem_row_t *row = problem_lookup(req->status);
        struct strbuf data;
        strbuf_init(&data, 0);
        if (render_problem(&data, row->status, row->code, row->title,
                           req->message != NULL ? req->message : sema_strerror(req->status)) == 0)
            (void)ticket_event(c, "ended", 0, data.data, data.len);
        strbuf_free(&data);
        conn_stream_end(c->conn);
        return;
    }
    if (req->res.ticket.state != c->ereq.seen && ticket_state_event(c, req) != 0)
        return;
    ticket_park(c, req->res.ticket.state);
}

static void ticket_first_done(route_ctx_t *c, engine_req_t *req)
{
    const char *last = c->req->last_event_id;
    uint64_t seen = 0;
    if (req->status != 0 || !ctx__name_visible(c, req->res.ticket.name, req->res.ticket.name_len)) {
        if (req->status != 0)
            ctx_done_default(c, req);
        return;
    }
    if (ctx_stream_begin(c, NULL) != 0)
        return;
    if (last != NULL && last[0] != '\0') {
        char *end;
        unsigned long long v = strtoull(last, &end, 10);
        seen = *end == '\0' ? (uint64_t)v : 0;
    }
    if (seen != req->res.ticket.state && ticket_state_event(c, req) != 0)
        return;
    ticket_park(c, req->res.ticket.state);
}

/* GET /v1/tickets/{id}/events */
void v1_ticket_events(route_ctx_t *c)
{
    c->ereq.op = ENGINE_TICKET_GET;
    c->ereq.id = c->param;
    c->ereq.id_len = c->param_len;
    c->ereq.timeout_ms = 0;
    c->ereq.seen = 0;
    ctx_submit(c, ticket_first_done);
}
