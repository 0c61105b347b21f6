/* SPDX-License-Identifier: MIT */
/* conn.c - semad's client connections: accept (and the per-address cap), read and parse,
 * dispatch to a route, the write queue, timeouts, linger and close; with TLS, the bytes go
 * through the connection's session (tls.c) on their way in and out. */
#include "http/server_internal.h"

#include <assert.h>
#include <sys/epoll.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "sema/error.h"

enum {
    LINGER_MS = 2000,            /* after the last reply, wait this long for the client's FIN */
    REPLY_QUEUE_MAX = 256 << 10, /* unsent reply bytes before pipelined requests wait */
    TLS_OUT_KEEP = 64 << 10,     /* keep the ciphertext scratch buffer up to this size */
    TLS_HANDSHAKE_RECORD = 0x16, /* the first byte of a TLS client's first record */
};

typedef struct {
    uv_write_t w;
    uv_buf_t buf;
    char *lease; /* a granted lease to release if the write fails */
    char data[]; /* the bytes the socket did not take at once */
} wreq_t;

static void schedule_drain(conn_t *conn);
static void on_idle(uv_idle_t *h);

/* ---- writing ---- */

/* The client does not read its replies: parse nothing more until it catches up. */
static int backlogged(conn_t *conn)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) > REPLY_QUEUE_MAX;
}

static void on_write(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    conn_t *conn = w->handle->data;
    if (status < 0 && wr->lease != NULL)
        server__release_lease(conn->srv, wr->lease);
    free(wr->lease);
    free(wr);
    if (status < 0)
        conn_close(conn);
    else if (conn->pending.len > 0 && !conn->busy && !backlogged(conn))
        schedule_drain(conn);
}

int conn_send_failed(conn_t *conn, const char *lease, int rc)
{
    if (lease != NULL)
        server__release_lease(conn->srv, lease);
    conn_close(conn);
    return rc;
}

/* The bytes as they go on the wire: what the socket takes now is written at once, the rest
 * is copied and queued in order. */
static int sock_send(conn_t *conn, const char *data, size_t len, const char *lease)
{
    if (conn->closing)
        return conn_send_failed(conn, lease, SEMA_EIO);
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
    if (n >= 0 && (size_t)n == len)
        return 0;
    if (n < 0 && n != UV_EAGAIN)
        return conn_send_failed(conn, lease, SEMA_EIO);
    size_t done = n > 0 ? (size_t)n : 0;
    wreq_t *wr = malloc(sizeof *wr + (len - done));
    if (wr == NULL)
        return conn_send_failed(conn, lease, SEMA_ENOMEM);
    memcpy(wr->data, data + done, len - done);
    wr->buf = uv_buf_init(wr->data, (unsigned)(len - done));
    wr->lease = lease != NULL ? strdup(lease) : NULL; /* NULL: the ttl is the fallback */
    if (uv_write(&wr->w, (uv_stream_t *)&conn->tcp, &wr->buf, 1, on_write) != 0) {
        free(wr->lease);
        free(wr);
        return conn_send_failed(conn, lease, SEMA_EIO);
    }
    return 0;
}

/* The ciphertext scratch buffer, taken for one call: a failed send closes the connection,
 * which can complete other connections' requests, whose replies are encrypted meanwhile. */
static struct strbuf take_out(server_t *srv)
{
    struct strbuf ct = srv->tls_out;
    strbuf_init(&srv->tls_out, 0);
    return ct;
}

static void give_back(server_t *srv, struct strbuf *ct)
{
    if (srv->tls_out.data == NULL && ct->cap <= TLS_OUT_KEEP) {
        strbuf_reset(ct);
        srv->tls_out = *ct;
    } else {
        strbuf_free(ct);
    }
}

static int tls_send(conn_t *conn, const char *data, size_t len, const char *lease)
{
    server_t *srv = conn->srv;
    struct strbuf ct = take_out(srv);
    int rc;
    if (conn->closing) {
        rc = conn_send_failed(conn, lease, SEMA_EIO);
    } else if (tls_write(srv->tls, conn->tls, data, len, &ct) != 0) {
        log_debug("TLS: cannot encrypt a reply: %s", tls_sess_error(conn->tls));
        rc = conn_send_failed(conn, lease, SEMA_EIO);
    } else {
        rc = sock_send(conn, ct.data, ct.len, lease);
    }
    give_back(srv, &ct);
    return rc;
}

/* Send `len` bytes (copied if needed): what the socket takes now is written at once, the
 * rest is queued in order. `lease` (borrowed, may be NULL) is released if the bytes cannot
 * be handed to the kernel. Returns 0 or a SEMA_E* code (then the connection is closing). */
int conn_send(conn_t *conn, const char *data, size_t len, const char *lease)
{
    if (conn->tls != NULL)
        return tls_send(conn, data, len, lease);
    return sock_send(conn, data, len, lease);
}

int conn_seal(conn_t *conn, const uv_buf_t *bufs, size_t n, uv_buf_t *out)
{
    struct strbuf ct;
    size_t len;
    strbuf_init(&ct, 0);
    for (size_t i = 0; i < n; i++) {
        if (tls_write(conn->srv->tls, conn->tls, bufs[i].base, bufs[i].len, &ct) != 0) {
            strbuf_free(&ct);
            return SEMA_EIO;
        }
    }
    out->base = strbuf_steal(&ct, &len);
    out->len = len;
    return out->base != NULL ? 0 : SEMA_ENOMEM;
}

const char *conn_peer_name(const conn_t *conn)
{
    return conn->tls != NULL ? tls_sess_peer_name(conn->tls) : NULL;
}

/* Send a strbuf's bytes (the caller keeps and frees the strbuf). */
int conn_write(conn_t *conn, struct strbuf *out, const char *lease)
{
    return conn_send(conn, out->data, out->len, lease);
}

/* Send a reply that ends the connection (no keep-alive; `extra` header lines may be NULL),
 * then linger. Returns 0 or a SEMA_E* code. */
int conn_send_last(conn_t *conn, int status, const char *ctype, const char *body, size_t len,
                   const char *extra)
{
    struct strbuf out;
    strbuf_init(&out, 0);
    int rc = http_reply(&out, status, ctype, body, len, 0, extra);
    if (rc == 0)
        rc = conn_write(conn, &out, NULL);
    if (rc == 0)
        conn_start_linger(conn);
    strbuf_free(&out);
    return rc;
}

#define FIN_WATCH_FRESH_NS 100000u /* a read of the FIN watch serves the checks this long */

/* Read the FIN watch: mark the connections whose client sent its FIN, or whose socket
 * failed (the watch reports nothing else). */
static void fin_watch_read(server_t *srv, uint64_t now)
{
    struct epoll_event ev[64];
    int n;

    srv->fin_at = now;
    do
        n = epoll_wait(srv->fin_epfd, ev, 64, 0);
    while (n < 0 && errno == EINTR);
    srv->fin_all = n < 0 || n == 64; /* more may be ready: read each socket instead */
    for (int i = 0; i < n; i++)
        ((conn_t *)ev[i].data.ptr)->fin_seen = 1;
}

/* Take the socket out of the FIN watch before it closes. Closing it would do that too, but
 * only once no other descriptor refers to the socket: removing it here means the watch can
 * never name a connection that is gone. */
static void fin_watch_remove(conn_t *conn)
{
    uv_os_fd_t fd;

    if (conn->fin_watched && uv_fileno((uv_handle_t *)&conn->tcp, &fd) == 0)
        (void)epoll_ctl(conn->srv->fin_epfd, EPOLL_CTL_DEL, fd, NULL);
    conn->fin_watched = 0;
}

/* Put the connection's socket in the FIN watch (0), or leave it to be read when checked. */
static void fin_watch_add(conn_t *conn)
{
    uv_os_fd_t fd;
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = conn};

    if (conn->srv->fin_epfd >= 0 && uv_fileno((uv_handle_t *)&conn->tcp, &fd) == 0 &&
        epoll_ctl(conn->srv->fin_epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        conn->fin_watched = 1;
}

/* True when the client has already closed its side (a FIN is waiting unread). The loop reads
 * every socket each iteration and closes the connections whose client left, so only a FIN
 * that came since then is in question: the FIN watch, read at most every
 * FIN_WATCH_FRESH_NS, tells which sockets have one, and only those are read here. A FIN that
 * comes within that time goes unseen, as one that comes just after the reply would. */
int conn_peer_gone(conn_t *conn)
{
    server_t *srv = conn->srv;
    uv_os_fd_t fd;

    if (conn->fin_watched) {
        uint64_t now = uv_hrtime();
        if (now - srv->fin_at >= FIN_WATCH_FRESH_NS)
            fin_watch_read(srv, now);
        if (!conn->fin_seen && !srv->fin_all)
            return 0;
    }
    if (uv_fileno((uv_handle_t *)&conn->tcp, &fd) != 0)
        return 1;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- connection lifecycle ---- */

static void ready_remove(server_t *srv, conn_t *conn)
{
    for (conn_t **pp = &srv->ready; *pp != NULL; pp = &(*pp)->ready_next) {
        if (*pp == conn) {
            *pp = conn->ready_next;
            break;
        }
    }
    conn->on_ready = 0;
}

static void on_handle_close(uv_handle_t *h)
{
    conn_t *conn = h->data;
    assert(conn->closing && conn->handles > 0);
    if (--conn->handles > 0)
        return;
    server_t *srv = conn->srv;
    http_parser_free(&conn->parser);
    strbuf_free(&conn->pending);
    conn_auth_forget(conn);
    conn_stream_free(conn);
    tls_sess_free(conn->tls);
    free(conn);
    server__finish_stop(srv);
}

static void ctx_cleanup(route_ctx_t *c)
{
    free(c->param);
    free(c->owner);
    if (c->ereq.tenant != NULL) /* take_tenant's copy */
        free((char *)c->ereq.tenant);
    free(c->parts);
    free(c->list.prefix);
    free(c->list.cursor);
    if (c->ereq.op == ENGINE_METRICS && c->ereq.text != NULL) { /* v1_metrics's text */
        strbuf_free(c->ereq.text);
        free(c->ereq.text);
        c->ereq.text = NULL;
    }
    json_decref(c->json);
    auth_unref(c->auth);
    c->auth = NULL;
    c->token = NULL;
    c->param = c->owner = c->list.prefix = c->list.cursor = NULL;
    c->ereq.tenant = NULL;
    c->json = NULL;
    c->parts = NULL;
}

void conn_close(conn_t *conn)
{
    if (conn->closing)
        return;
    server_t *srv = conn->srv;
    conn->closing = 1;
    if (conn->ctx.submitted) {
        engine_cancel(srv->engine, &conn->ctx.ereq);
        conn->ctx.submitted = 0;
    }
    if (conn->sub != NULL) {
        engine_unsubscribe(srv->engine, conn->sub);
        conn->sub = NULL;
    }
    conn_stream_release(conn);
    ctx_cleanup(&conn->ctx);
    if (conn->on_ready)
        ready_remove(srv, conn);
    if (conn->prev != NULL)
        conn->prev->next = conn->next;
    else if (srv->conns == conn)
        srv->conns = conn->next;
    if (conn->next != NULL)
        conn->next->prev = conn->prev;
    conn->prev = conn->next = NULL;
    if (!conn->rejected)
        srv->nconns--;
    ipcap_leave(&srv->ipcap, conn->ip);
    conn->ip = NULL;
    fin_watch_remove(conn);
    uv_close((uv_handle_t *)&conn->timer, on_handle_close);
    uv_close((uv_handle_t *)&conn->tcp, on_handle_close);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn_t *conn = req->handle->data;
    free(req);
    if (status < 0)
        conn_close(conn);
}

/* The last reply is queued: send FIN after it, then wait briefly for the client's FIN so
 * that unread request bytes do not turn our close into a reset that eats the reply. */
void conn_start_linger(conn_t *conn)
{
    if (conn->closing || conn->lingering)
        return;
    if (conn->tls != NULL) {
        struct strbuf ct = take_out(conn->srv);
        tls_close_notify(conn->srv->tls, conn->tls, &ct);
        if (ct.len > 0)
            sock_send(conn, ct.data, ct.len, NULL);
        give_back(conn->srv, &ct);
        if (conn->closing)
            return;
    }
    conn->lingering = 1;
    uv_shutdown_t *req = malloc(sizeof *req);
    if (req == NULL || uv_shutdown(req, (uv_stream_t *)&conn->tcp, on_shutdown) != 0) {
        free(req);
        conn_close(conn);
        return;
    }
    conn_arm_timer(conn);
}

/* ---- timers ---- */

static void on_timer(uv_timer_t *t)
{
    conn_t *conn = t->data;
    if (conn->closing)
        return;
    if (conn->stream) {
        conn_stream_write(conn, ": ping\n\n", 8);
        return;
    }
    uint64_t now = uv_now(conn->srv->loop);
    if (conn->deadline == 0)
        return; /* disarmed since */
    if (now < conn->deadline) {
        /* Re-armed later since: wait for the rest (see conn_arm_timer). */
        uv_timer_start(&conn->timer, on_timer, conn->deadline - now, 0);
        return;
    }
    conn->deadline = 0;
    if (conn->tls != NULL && !tls_sess_ready(conn->tls) && !conn->lingering) {
        conn->srv->tls_failed++; /* the handshake did not end in time */
        conn_close(conn);
        return;
    }
    if (conn->lingering || conn->busy || !http_parser_started(&conn->parser)) {
        conn_close(conn); /* linger over, or idle keep-alive timeout */
        return;
    }
    static const char msg[] = "Request timeout";
    conn->srv->timeouts++;
    conn_send_last(conn, 408, "text/plain; charset=utf-8", msg, sizeof msg - 1, NULL);
}

/* The loop time a connection that is not a stream acts at, 0 for never. A started request
 * (and a TLS handshake) has --header-timeout from its first byte (the accept) to arrive
 * whole: later bytes do not push the deadline back, so a client sending one byte a second
 * is cut like a silent one. */
static uint64_t due_time(conn_t *conn, uint64_t now)
{
    const server_config_t *cfg = conn->srv->cfg;
    if (conn->lingering)
        return now + LINGER_MS;
    if (conn->busy)
        return 0;
    if (http_parser_started(&conn->parser) || (conn->tls != NULL && !tls_sess_ready(conn->tls)))
        return cfg->header_timeout_ms > 0 ? conn->started + (uint64_t)cfg->header_timeout_ms : 0;
    return cfg->idle_timeout_ms > 0 ? now + (uint64_t)cfg->idle_timeout_ms : 0;
}

void conn_arm_timer(conn_t *conn)
{
    if (conn->closing)
        return;
    uint64_t now = uv_now(conn->srv->loop);
    if (conn->stream) {
        int64_t ms = conn->srv->cfg->sse_heartbeat_ms;
        conn->deadline = 0;
        if (ms <= 0)
            uv_timer_stop(&conn->timer);
        else
            uv_timer_start(&conn->timer, on_timer, (uint64_t)ms, (uint64_t)ms);
        return;
    }
    /* Lazy: requests re-arm several times each, so only record the deadline; the timer is
     * restarted only when it would fire too late, and on_timer waits out the rest when it
     * fires early. A disarmed timer that fires does nothing. */
    uint64_t due = due_time(conn, now);
    conn->deadline = due;
    if (due == 0)
        return;
    if (uv_is_active((uv_handle_t *)&conn->timer) && now + uv_timer_get_due_in(&conn->timer) <= due)
        return;
    uv_timer_start(&conn->timer, on_timer, due > now ? due - now : 0, 0);
}

/* ---- after a reply ---- */

void conn_finish_request(conn_t *conn, int keep_alive)
{
    assert(conn->busy && !conn->stream && !conn->ctx.submitted); /* one reply, then the next */
    conn->busy = 0;
    ctx_cleanup(&conn->ctx);
    http_parser_next(&conn->parser);
    if (!keep_alive) {
        conn_start_linger(conn);
        return;
    }
    if (!conn->in_process && conn->pending.len > 0)
        schedule_drain(conn);
    if (!conn->in_process)
        conn_arm_timer(conn);
}

/* Parse the connection's buffered bytes soon (from the idle handle, never from inside an
 * engine callback, which may still be using the request struct). */
static void schedule_drain(conn_t *conn)
{
    server_t *srv = conn->srv;
    if (conn->on_ready || conn->closing || conn->in_process)
        return;
    conn->on_ready = 1;
    conn->ready_next = srv->ready;
    srv->ready = conn;
    uv_idle_start(&srv->idle, on_idle);
}

/* ---- dispatch ---- */

static void dispatch(conn_t *conn)
{
    route_ctx_t *c = &conn->ctx;
    /* one request at a time, on a connection that is still an HTTP one */
    assert(!conn->busy && !conn->closing && !conn->lingering && !conn->stream);
    memset(c, 0, sizeof *c);
    c->srv = conn->srv;
    c->conn = conn;
    c->req = &conn->parser.req;
    conn->busy = 1;
    char *url = conn->parser.req.url.data;
    char *q = strchr(url, '?');
    size_t plen = q != NULL ? (size_t)(q - url) : strlen(url);
    c->query = q != NULL ? q + 1 : NULL;
    /* HEAD is served by the GET route (reply.c drops the body), except the event stream's. */
    int head = conn->parser.req.method == HTTP_HEAD;
    const char *method = head ? "GET" : http_method_name(conn->parser.req.method);
    const char *param = NULL;
    size_t param_len = 0;
    int rc = router_match(method, url, plen, &c->route, &param, &param_len);
    if (head && rc == ROUTER_FOUND && (c->route->flags & ROUTE_STREAM)) {
        c->route = NULL;
        rc = ROUTER_BAD_METHOD;
    }
    if (rc != ROUTER_FOUND) {
        if (q != NULL)
            *q = '\0';
        ctx__reply_no_route(c, rc, method, url, plen);
        return;
    }
    if (param != NULL && http_pct_decode(param, param_len, 0, &c->param, &c->param_len) != 0) {
        ctx_reply_err(c, SEMA_EINVAL,
                      "the name in the URL is not valid percent-encoded UTF-8 (or holds %00)");
        return;
    }
    if (ctx__authorize(c) != 0)
        return;
    c->route->handler(c);
}

/* ---- reading ---- */

static int stash(conn_t *conn, const char *data, size_t len)
{
    if (strbuf_append(&conn->pending, data, len) != 0) {
        log_warn("closing a connection: more than %llu pipelined bytes behind a parked request",
                 (unsigned long long)conn->srv->cfg->max_pipeline_bytes);
        conn_close(conn);
        return -1;
    }
    return 0;
}

static void send_continue(conn_t *conn)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    conn_send(conn, cont, sizeof cont - 1, NULL);
    conn->parser.want_continue = 3;
}

static void process(conn_t *conn, const char *data, size_t len)
{
    uint64_t now = uv_now(conn->srv->loop);
    conn->in_process = 1;
    while (len > 0 && !conn->closing && !conn->lingering && !conn->busy && !conn->stream &&
           !backlogged(conn)) {
        size_t used;
        if (!http_parser_started(&conn->parser))
            conn->started = now; /* the request's deadline counts from here */
        int rc = http_parser_feed(&conn->parser, data, len, &used);
        data += used;
        len -= used;
        if (rc == HTTP_NEED_MORE) {
            if (conn->parser.want_continue == 2)
                send_continue(conn);
            break;
        }
        if (rc == HTTP_ERROR) {
            conn_reply_fatal(conn, conn->parser.error_status, conn->parser.error_reason);
            break;
        }
        dispatch(conn);
    }
    if (len > 0 && !conn->closing && !conn->lingering && !conn->stream)
        stash(conn, data, len); /* behind a parked request or an unread reply backlog */
    conn->in_process = 0;
    conn_arm_timer(conn);
}

static void drain(conn_t *conn)
{
    if (conn->closing || conn->busy || conn->lingering || conn->stream || conn->pending.len == 0)
        return;
    struct strbuf tmp = conn->pending;
    strbuf_init(&conn->pending, conn->srv->cfg->max_pipeline_bytes);
    process(conn, tmp.data, tmp.len);
    strbuf_free(&tmp);
}

static void on_idle(uv_idle_t *h)
{
    server_t *srv = h->data;
    while (srv->ready != NULL) {
        conn_t *conn = srv->ready;
        srv->ready = conn->ready_next;
        conn->on_ready = 0;
        drain(conn);
    }
    uv_idle_stop(&srv->idle);
}

/* The client closed its side (or the socket failed). */
static void deliver_eof(conn_t *conn)
{
    if (!conn->busy && !conn->lingering && http_parser_eof(&conn->parser) == HTTP_ERROR)
        log_debug("client closed in the middle of a request");
    conn_close(conn); /* a parked request is cancelled there */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *conn = h->data;
    buf->base = conn->srv->readbuf;
    buf->len = READ_BUF;
}

/* Request bytes as the client sent them (decrypted, with TLS). */
static void deliver(conn_t *conn, const char *data, size_t len)
{
    if (conn->closing || conn->lingering || conn->stream)
        return;
    if (conn->busy || conn->pending.len > 0 || backlogged(conn)) {
        stash(conn, data, len);
        return;
    }
    process(conn, data, len);
}

/* Plain HTTP on the TLS port: say so in plain text, which is what the person trying it with
 * curl can read, then close. */
static void refuse_plain(conn_t *conn)
{
    static const char msg[] = "This port speaks HTTPS (TLS): use an https:// URL.\n";
    conn->srv->tls_plain_refused++;
    tls_sess_free(conn->tls);
    conn->tls = NULL;
    conn_send_last(conn, 400, "text/plain; charset=utf-8", msg, sizeof msg - 1, NULL);
}

static void tls_done_handshake(conn_t *conn)
{
    const char *peer = tls_sess_peer_name(conn->tls);
    conn->srv->tls_handshakes++;
    if (peer != NULL)
        log_debug("TLS client certificate: %s", peer);
    conn_arm_timer(conn); /* from the handshake's deadline to the idle one */
}

static void tls_end(conn_t *conn, int rc)
{
    if (rc == TLS_CLOSED) {
        deliver_eof(conn);
        return;
    }
    if (tls_sess_ready(conn->tls)) {
        log_debug("TLS: closing a connection: %s", tls_sess_error(conn->tls));
        conn_close(conn);
        return;
    }
    conn->srv->tls_failed++;
    log_debug("TLS handshake failed: %s", tls_sess_error(conn->tls));
    conn_start_linger(conn); /* the alert OpenSSL wrote goes out first */
}

/* Ciphertext from a TLS client: decrypt record by record; what the session has to send
 * (handshake, tickets) goes out before the replies to what it decrypted. */
static void read_tls(conn_t *conn, const char *data, size_t len)
{
    server_t *srv = conn->srv;
    if (!conn->tls_seen) {
        if ((unsigned char)data[0] != TLS_HANDSHAKE_RECORD) {
            if (data[0] >= 'A' && data[0] <= 'Z') {
                refuse_plain(conn);
            } else {
                srv->tls_failed++;
                conn_close(conn);
            }
            return;
        }
        conn->tls_seen = 1;
    }
    int ready = tls_sess_ready(conn->tls);
    struct strbuf *ct = &srv->tls_read_out; /* reads do not nest: no need to take it */
    tls_input(srv->tls, conn->tls, data, len, ct);
    for (;;) {
        int n = tls_read(srv->tls, conn->tls, srv->tls_plain, TLS_RECORD);
        if (ct->len > 0) {
            int rc = sock_send(conn, ct->data, ct->len, NULL);
            strbuf_reset(ct);
            if (rc != 0)
                break;
        }
        if (!ready && tls_sess_ready(conn->tls)) {
            ready = 1;
            tls_done_handshake(conn);
        }
        if (n == TLS_WANT)
            break;
        if (n < 0) {
            tls_end(conn, n);
            break;
        }
        deliver(conn, srv->tls_plain, (size_t)n);
        if (conn->closing)
            break;
    }
    tls_input(srv->tls, conn->tls, NULL, 0, NULL);
    if (ct->cap > TLS_OUT_KEEP)
        strbuf_free(ct);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    conn_t *conn = s->data;
    if (n < 0) {
        deliver_eof(conn);
        return;
    }
    if (n == 0 || conn->closing || conn->lingering || conn->stream)
        return;
    if (conn->tls != NULL) {
        read_tls(conn, buf->base, (size_t)n);
        return;
    }
    deliver(conn, buf->base, (size_t)n);
}

/* ---- accepting ---- */

static void refuse(conn_t *conn, const char *why, size_t len)
{
    conn->rejected = 1;
    if (conn->srv->tls != NULL) {
        conn_close(conn); /* no handshake for a connection that cannot be served */
        return;
    }
    conn_send_last(conn, 503, "text/plain; charset=utf-8", why, len, "Retry-After: 1\r\n");
}

/* Count the connection for its client's address; 0, or non-zero when it is at its cap. */
static int admit_address(conn_t *conn)
{
    server_t *srv = conn->srv;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (srv->cfg->max_connections_per_ip == 0)
        return 0;
    if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    return ipcap_enter(&srv->ipcap, (struct sockaddr *)&ss, srv->cfg->max_connections_per_ip,
                       &conn->ip);
}

static conn_t *conn_new(server_t *srv)
{
    conn_t *conn = calloc(1, sizeof *conn);
    if (conn == NULL)
        return NULL;
    conn->srv = srv;
    uv_tcp_init(srv->loop, &conn->tcp);
    uv_timer_init(srv->loop, &conn->timer);
    conn->tcp.data = conn;
    conn->timer.data = conn;
    conn->handles = 2;
    http_parser_init(&conn->parser, &srv->limits);
    strbuf_init(&conn->pending, srv->cfg->max_pipeline_bytes);
    return conn;
}

void conn_accept(uv_stream_t *listener, int status)
{
    static const char too_many[] = "Too many connections";
    static const char too_many_ip[] = "Too many connections from this address";
    server_t *srv = listener->data;
    if (status < 0) {
        log_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    conn_t *conn = conn_new(srv);
    if (conn == NULL)
        return;
    if (uv_accept(listener, (uv_stream_t *)&conn->tcp) != 0) {
        conn->rejected = 1;
        conn_close(conn);
        return;
    }
    uv_tcp_nodelay(&conn->tcp, 1);
    fin_watch_add(conn);
    conn->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = conn;
    srv->conns = conn;
    uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
    if (srv->nconns >= srv->cfg->max_connections || srv->draining) {
        srv->rejected++;
        refuse(conn, too_many, sizeof too_many - 1);
        return;
    }
    if (admit_address(conn) != 0) {
        srv->rejected_per_ip++;
        refuse(conn, too_many_ip, sizeof too_many_ip - 1);
        return;
    }
    srv->nconns++;
    srv->accepted++;
    conn->started = uv_now(srv->loop); /* the TLS handshake's deadline counts from here */
    if (srv->tls != NULL && (conn->tls = tls_sess_new(srv->tls)) == NULL) {
        log_warn("out of memory for a TLS session: closing the connection");
        conn_close(conn);
        return;
    }
    conn_arm_timer(conn);
}
