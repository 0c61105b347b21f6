/* SPDX-License-Identifier: MIT */
/* stream.c - the event-stream side of a connection: switch it to a stream, write to it
 * (cutting a client that does not read), end it. */
#include "server_internal.h"

#include "log.h"
#include "sema/error.h"

enum {
    STREAM_QUEUE_MAX = 1 << 20, /* unsent event-stream bytes before a slow reader is cut */
};

int ctx_stream_begin(route_ctx_t *c, engine_sub_t *sub)
{
    conn_t *conn = c->conn;
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\n"
                               "Connection: close\r\n\r\n"
                               ": subscribed\n\n";
    c->replied = 1;
    server__count(c->srv, c->route, 200);
    conn->sub = sub;
    conn->stream = 1;
    if (conn_stream_write(conn, head, sizeof head - 1) != 0)
        return SEMA_EIO;
    conn_arm_timer(conn);
    return 0;
}

int conn_stream_write(conn_t *conn, const char *data, size_t len)
{
    if (conn->closing || conn->lingering)
        return SEMA_EIO;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) > STREAM_QUEUE_MAX) {
        log_warn("closing an event stream: the client does not read");
        conn_close(conn);
        return SEMA_EIO;
    }
    return conn_send(conn, data, len, NULL);
}

void conn_stream_end(conn_t *conn)
{
    if (conn->closing)
        return;
    conn->stream = 0; /* the subscription ends when the connection closes */
    conn->busy = 1;
    conn_start_linger(conn);
}
