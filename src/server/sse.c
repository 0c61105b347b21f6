/* SPDX-License-Identifier: MIT */
/* sse.c - GET /v1/semaphores/{name}/events: the engine's events as Server-Sent Events. A
 * client that reconnects with Last-Event-ID gets the events it missed first. */
#include <stdlib.h>
#include <string.h>

#include "server.h"

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

/* GET /v1/semaphores/{name}/events */
void v1_events(route_ctx_t *c)
{
    engine_t *e = server_engine(c->srv);
    engine_sub_t *sub = NULL;
    conn_t *conn = c->conn;
    int rc = engine_subscribe(e, c->param, on_event, conn, &sub);
    if (rc != 0) {
        ctx_reply_err(c, rc, rc == SEMA_ENOENT ? "no such semaphore" : NULL);
        return;
    }
    if (ctx_stream_begin(c, sub) != 0 || c->req->last_event_id == NULL ||
        c->req->last_event_id[0] == '\0')
        return;
    replay_t r = {.failed = 0, .deleted = 0};
    strbuf_init(&r.out, 0);
    engine_sub_resume(e, sub, c->req->last_event_id, on_replay, &r);
    if (r.failed)
        conn_stream_end(conn); /* out of memory: the client reconnects and asks again */
    else if (r.out.len > 0 && conn_stream_write(conn, r.out.data, r.out.len) == 0 && r.deleted)
        conn_stream_end(conn);
    strbuf_free(&r.out);
}
