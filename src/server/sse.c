/* SPDX-License-Identifier: MIT */
/* sse.c - GET /v1/semaphores/{name}/events: the engine's events as Server-Sent Events. */
#include <stdlib.h>
#include <string.h>

#include "server.h"

#include "sema/error.h"

/* One engine event -> "event: <type>\ndata: <json>\n\n". After "deleted" the stream ends. */
static void on_event(void *arg, const char *type, json_t *data)
{
    conn_t *conn = arg;
    char *s = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
    struct strbuf out;
    strbuf_init(&out, 0);
    int rc = strbuf_printf(&out, "event: %s\ndata: %s\n\n", type, s != NULL ? s : "{}");
    free(s);
    if (rc == 0)
        conn_stream_write(conn, out.data, out.len);
    strbuf_free(&out);
    if (strcmp(type, "deleted") == 0)
        conn_stream_end(conn);
}

/* GET /v1/semaphores/{name}/events */
void v1_events(route_ctx_t *c)
{
    engine_sub_t *sub = NULL;
    int rc = engine_subscribe(server_engine(c->srv), c->param, on_event, c->conn, &sub);
    if (rc != 0) {
        ctx_reply_err(c, rc, NULL);
        return;
    }
    ctx_stream_begin(c, sub);
}
