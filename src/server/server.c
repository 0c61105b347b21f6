/* SPDX-License-Identifier: MIT */
/* server.c - semad's listener and connections on one libuv loop: keep-alive, pipelining
 * behind parked requests, caps, timeouts, graceful stop, and the handlers' reply API. */
#include "server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "problem.h"
#include "sema/error.h"

enum {
    READ_BUF = 65536,            /* one shared read buffer: idle connections cost no buffer */
    LINGER_MS = 2000,            /* after the last reply, wait this long for the client's FIN */
    STREAM_QUEUE_MAX = 1 << 20,  /* unsent event-stream bytes before a slow reader is cut */
    REPLY_QUEUE_MAX = 256 << 10, /* unsent reply bytes before pipelined requests wait */
    SCRATCH_KEEP = 64 << 10,     /* larger scratch buffers are freed after use */
    BACKLOG = 1024,
};

static const int known_status[] = {200, 201, 204, 303, 400, 404, 405, 408,
                                   409, 410, 413, 414, 429, 431, 500, 503};
enum { NSTATUS = sizeof known_status / sizeof known_status[0] + 1 };

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    server_t *srv;
    conn_t *prev, *next; /* all open connections */
    conn_t *ready_next;  /* connections with pipelined bytes to parse */
    http_parser_t parser;
    route_ctx_t ctx;
    struct strbuf pending; /* bytes that arrived behind a request still being served */
    engine_sub_t *sub;     /* event stream subscription */
    uint8_t busy;          /* a request is being served */
    uint8_t in_process;    /* inside process(): replies do not re-enter it */
    uint8_t closing;
    uint8_t lingering; /* last reply queued; waiting for the client's FIN */
    uint8_t stream;    /* the connection carries an event stream */
    uint8_t on_ready;
    uint8_t rejected;   /* over max_connections: answered 503 */
    uint8_t handles;    /* handles still open */
    uint8_t in_submit;  /* inside engine_submit(): completions are synchronous */
    uint8_t async_done; /* the engine completed after engine_submit() returned */
    uint64_t deadline;  /* loop time (ms) the timer acts at, 0 = none (not for streams) */
    uint64_t timer_due; /* loop time the armed timer fires at */
};

struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigterm, sigint;
    uv_idle_t idle;
    uv_timer_t grace;
    engine_t *engine;
    const semad_config_t *cfg;
    http_limits_t limits;
    conn_t *conns;
    conn_t *ready;
    uint64_t nconns, accepted, rejected, timeouts, parse_errors, undelivered;
    uint64_t *counts; /* [(routes + 1) * NSTATUS] requests by route and status */
    int draining, stopped;
    struct strbuf scratch_body;  /* JSON of the reply being built */
    struct strbuf scratch_reply; /* the reply being built (sent or copied at once) */
    char readbuf[READ_BUF];
};

typedef struct {
    uv_write_t w;
    uv_buf_t buf;
    char *lease; /* a granted lease to release if the write fails */
    char data[]; /* the bytes the socket did not take at once */
} wreq_t;

static void conn_close(conn_t *conn);
static void on_idle(uv_idle_t *h);
static void process(conn_t *conn, const char *data, size_t len);
static void arm_timer(conn_t *conn);

/* ---- releasing grants nobody received ---- */

typedef struct {
    engine_req_t req;
    char id[];
} detached_t;

static void detached_done(engine_req_t *req)
{
    free(req->data);
}

static void release_lease(server_t *srv, const char *id)
{
    size_t n = strlen(id);
    detached_t *d = calloc(1, sizeof *d + n + 1);
    if (d == NULL)
        return; /* the lease's ttl reclaims it */
    memcpy(d->id, id, n + 1);
    d->req.op = ENGINE_LEASE_RELEASE;
    d->req.name = d->id;
    d->req.name_len = n;
    d->req.cb = detached_done;
    d->req.data = d;
    srv->undelivered++;
    log_info("releasing lease %s: its grant could not be delivered", id);
    if (engine_submit(srv->engine, &d->req) != 0)
        free(d);
}

/* ---- writing ---- */

static void start_linger(conn_t *conn);
static void schedule_drain(conn_t *conn);

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
        release_lease(conn->srv, wr->lease);
    free(wr->lease);
    free(wr);
    if (status < 0)
        conn_close(conn);
    else if (conn->pending.len > 0 && !conn->busy && !backlogged(conn))
        schedule_drain(conn);
}

static int send_failed(conn_t *conn, const char *lease, int rc)
{
    if (lease != NULL)
        release_lease(conn->srv, lease);
    conn_close(conn);
    return rc;
}

/* Send `len` bytes (copied if needed): what the socket takes now is written at once, the
 * rest is queued in order. `lease` (borrowed, may be NULL) is released if the bytes cannot
 * be handed to the kernel. Returns 0 or a SEMA_E* code (then the connection is closing). */
static int conn_send(conn_t *conn, const char *data, size_t len, const char *lease)
{
    if (conn->closing)
        return send_failed(conn, lease, SEMA_EIO);
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
    if (n >= 0 && (size_t)n == len)
        return 0;
    if (n < 0 && n != UV_EAGAIN)
        return send_failed(conn, lease, SEMA_EIO);
    size_t done = n > 0 ? (size_t)n : 0;
    wreq_t *wr = malloc(sizeof *wr + (len - done));
    if (wr == NULL)
        return send_failed(conn, lease, SEMA_ENOMEM);
    memcpy(wr->data, data + done, len - done);
    wr->buf = uv_buf_init(wr->data, (unsigned)(len - done));
    wr->lease = lease != NULL ? strdup(lease) : NULL; /* NULL: the ttl is the fallback */
    if (uv_write(&wr->w, (uv_stream_t *)&conn->tcp, &wr->buf, 1, on_write) != 0) {
        free(wr->lease);
        free(wr);
        return send_failed(conn, lease, SEMA_EIO);
    }
    return 0;
}

/* Send a strbuf's bytes (the caller keeps and frees the strbuf). */
static int conn_write(conn_t *conn, struct strbuf *out, const char *lease)
{
    return conn_send(conn, out->data, out->len, lease);
}

/* True when the client has already closed its side (a FIN is waiting unread). */
static int peer_gone(conn_t *conn)
{
    uv_os_fd_t fd;
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

static void maybe_finish_stop(server_t *srv)
{
    if (!srv->draining || srv->stopped || srv->conns != NULL)
        return;
    srv->stopped = 1;
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->idle, NULL);
    uv_close((uv_handle_t *)&srv->grace, NULL);
    log_info("all connections closed");
}

static void on_handle_close(uv_handle_t *h)
{
    conn_t *conn = h->data;
    if (--conn->handles > 0)
        return;
    server_t *srv = conn->srv;
    http_parser_free(&conn->parser);
    strbuf_free(&conn->pending);
    free(conn);
    maybe_finish_stop(srv);
}

static void ctx_cleanup(route_ctx_t *c)
{
    free(c->param);
    free(c->owner);
    free(c->list.prefix);
    free(c->list.cursor);
    json_decref(c->legacy_create.echo);
    c->param = c->owner = c->list.prefix = c->list.cursor = NULL;
    c->legacy_create.echo = NULL;
}

static void conn_close(conn_t *conn)
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
static void start_linger(conn_t *conn)
{
    if (conn->closing || conn->lingering)
        return;
    conn->lingering = 1;
    uv_shutdown_t *req = malloc(sizeof *req);
    if (req == NULL || uv_shutdown(req, (uv_stream_t *)&conn->tcp, on_shutdown) != 0) {
        free(req);
        conn_close(conn);
        return;
    }
    arm_timer(conn);
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
        /* Re-armed later since: wait for the rest (see arm_timer). */
        conn->timer_due = conn->deadline;
        uv_timer_start(&conn->timer, on_timer, conn->deadline - now, 0);
        return;
    }
    conn->deadline = 0;
    if (conn->lingering || conn->busy || !http_parser_started(&conn->parser)) {
        conn_close(conn); /* linger over, or idle keep-alive timeout */
        return;
    }
    conn->srv->timeouts++;
    struct strbuf out;
    strbuf_init(&out, 0);
    static const char msg[] = "Request timeout";
    if (http_reply(&out, 408, "text/plain; charset=utf-8", msg, sizeof msg - 1, 0, NULL) == 0 &&
        conn_write(conn, &out, NULL) == 0)
        start_linger(conn);
    strbuf_free(&out);
}

static void arm_timer(conn_t *conn)
{
    const semad_config_t *cfg = conn->srv->cfg;
    int64_t ms;
    if (conn->closing)
        return;
    if (conn->lingering)
        ms = LINGER_MS;
    else if (conn->stream)
        ms = cfg->sse_heartbeat_ms;
    else if (conn->busy)
        ms = 0;
    else if (http_parser_started(&conn->parser))
        ms = cfg->header_timeout_ms;
    else
        ms = cfg->idle_timeout_ms;
    if (conn->stream) {
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
    if (ms <= 0) {
        conn->deadline = 0;
        return;
    }
    uint64_t due = uv_now(conn->srv->loop) + (uint64_t)ms;
    conn->deadline = due;
    if (uv_is_active((uv_handle_t *)&conn->timer) && conn->timer_due <= due)
        return;
    conn->timer_due = due;
    uv_timer_start(&conn->timer, on_timer, (uint64_t)ms, 0);
}

/* ---- metrics ---- */

static size_t status_index(int status)
{
    for (size_t i = 0; i < NSTATUS - 1; i++)
        if (known_status[i] == status)
            return i;
    return NSTATUS - 1;
}

static void count(server_t *srv, const route_t *r, int status)
{
    if (srv->counts != NULL)
        srv->counts[router_index(r) * NSTATUS + status_index(status)]++;
}

/* ---- replies ---- */

static void finish_request(conn_t *conn, int keep_alive)
{
    conn->busy = 0;
    ctx_cleanup(&conn->ctx);
    http_parser_next(&conn->parser);
    if (!keep_alive) {
        start_linger(conn);
        return;
    }
    if (!conn->in_process && conn->pending.len > 0)
        schedule_drain(conn);
    if (!conn->in_process)
        arm_timer(conn);
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

/* A reply with extra header lines (`extra`, each ending in CRLF; may be NULL). */
static void reply_raw_ex(route_ctx_t *c, int status, const char *ctype, const char *body,
                         size_t len, const char *lease, const char *extra)
{
    conn_t *conn = c->conn;
    server_t *srv = c->srv;
    if (c->replied || conn->closing) {
        if (lease != NULL)
            release_lease(srv, lease);
        return;
    }
    c->replied = 1;
    count(srv, c->route, status);
    int ka = conn->parser.req.keep_alive && !srv->draining;
    if (srv->cfg->log_requests)
        log_info("%s %s -> %d", http_method_name(conn->parser.req.method),
                 conn->parser.req.url.data, status);
    struct strbuf *out = &srv->scratch_reply;
    strbuf_reset(out);
    if (http_reply(out, status, ctype, body, len, ka, extra) != 0) {
        send_failed(conn, lease, SEMA_ENOMEM);
        return;
    }
    int rc = conn_write(conn, out, lease);
    if (out->cap > SCRATCH_KEEP)
        strbuf_free(out);
    if (rc == 0)
        finish_request(conn, ka);
}

static void reply_raw(route_ctx_t *c, int status, const char *ctype, const char *body, size_t len,
                      const char *lease)
{
    reply_raw_ex(c, status, ctype, body, len, lease, NULL);
}

void ctx_reply(route_ctx_t *c, int status, const char *ctype, const char *body, size_t len)
{
    reply_raw(c, status, ctype, body, len, NULL);
}

void ctx_reply_text(route_ctx_t *c, int status, const char *text)
{
    ctx_reply(c, status, "text/html; charset=utf-8", text, strlen(text));
}

/* Serialise `j` (borrowed) into the server's scratch buffer and send it. */
static void reply_json_obj(route_ctx_t *c, int status, const char *ctype, const json_t *j,
                           const char *lease, const char *extra)
{
    struct strbuf *body = &c->srv->scratch_body;
    strbuf_reset(body);
    if (j == NULL || http_json_append(body, j, 0) != 0) {
        static const char oom[] = "{\"status\":503,\"code\":\"out_of_memory\"}";
        if (lease != NULL)
            release_lease(c->srv, lease);
        reply_raw(c, 503, "application/problem+json", oom, sizeof oom - 1, NULL);
        return;
    }
    reply_raw_ex(c, status, ctype, body->data, body->len, lease, extra);
    if (body->cap > SCRATCH_KEEP)
        strbuf_free(body);
}

void ctx_reply_json(route_ctx_t *c, int status, json_t *j)
{
    reply_json_obj(c, status, "application/json; charset=utf-8", j, NULL, NULL);
    json_decref(j);
}

/* A problem reply with extra header lines (may be NULL). */
static void reply_problem_ex(route_ctx_t *c, int status, const char *code, const char *detail,
                             const char *extra)
{
    json_t *p = problem_json(status, code, problem_title(code, status), detail);
    reply_json_obj(c, status, "application/problem+json", p, NULL, extra);
    json_decref(p);
}

void ctx_reply_problem(route_ctx_t *c, int status, const char *code, const char *detail)
{
    reply_problem_ex(c, status, code, detail, NULL);
}

void ctx_reply_err(route_ctx_t *c, int err, const char *detail)
{
    const problem_row_t *row = problem_lookup(err);
    if (detail == NULL)
        detail = sema_strerror(err);
    if (c->route != NULL && (c->route->flags & ROUTE_LEGACY)) {
        ctx_reply_text(c, row->status, detail);
        return;
    }
    json_t *p = problem_json(row->status, row->code, row->title, detail);
    reply_json_obj(c, row->status, "application/problem+json", p, NULL, NULL);
    json_decref(p);
}

/* The client left while its grant was being made: give the units back now. Returns 1 if
 * so (the connection is closed), 0 to reply. */
static int grant_undeliverable(route_ctx_t *c, const char *id)
{
    if (!c->conn->async_done || !peer_gone(c->conn))
        return 0;
    if (id != NULL)
        release_lease(c->srv, id);
    c->replied = 1;
    conn_close(c->conn);
    return 1;
}

void ctx_reply_grant(route_ctx_t *c, json_t *lease)
{
    const char *id = json_string_value(json_object_get(lease, "lease"));
    if (!grant_undeliverable(c, id))
        reply_json_obj(c, 200, "application/json; charset=utf-8", lease, id, NULL);
}

/* The lease id at the start of a lease's JSON text ({"lease":"<id>",...}), into buf. */
static const char *text_lease_id(const char *text, size_t len, char *buf, size_t cap)
{
    static const char head[] = "{\"lease\":\"";
    size_t h = sizeof head - 1, n = 0;
    if (len <= h || memcmp(text, head, h) != 0)
        return NULL;
    while (h + n < len && text[h + n] != '"' && n + 1 < cap) {
        buf[n] = text[h + n];
        n++;
    }
    buf[n] = '\0';
    return n > 0 ? buf : NULL;
}

void ctx_reply_grant_text(route_ctx_t *c, const char *text, size_t len)
{
    char buf[64];
    const char *id = text_lease_id(text, len, buf, sizeof buf);
    if (!grant_undeliverable(c, id))
        reply_raw(c, 200, "application/json; charset=utf-8", text, len, id);
}

void ctx_done_default(route_ctx_t *c, engine_req_t *req)
{
    if (req->status != 0) {
        ctx_reply_err(c, req->status, req->message);
        return;
    }
    if (req->text != NULL) {
        ctx_reply(c, req->created ? 201 : 200, "application/json; charset=utf-8", req->text,
                  req->text_len);
        return;
    }
    if (req->result == NULL || json_is_null(req->result)) {
        ctx_reply(c, 204, NULL, NULL, 0);
        return;
    }
    ctx_reply_json(c, req->created ? 201 : 200, json_incref(req->result));
}

static void on_engine_done(engine_req_t *req)
{
    route_ctx_t *c = req->data;
    c->submitted = 0;
    c->conn->async_done = !c->conn->in_submit;
    c->done(c, req);
}

void ctx_submit(route_ctx_t *c, route_done_fn done)
{
    c->done = done;
    c->ereq.cb = on_engine_done;
    c->ereq.data = c;
    c->ereq.status = 0;
    c->ereq.result = NULL;
    c->ereq.message = NULL;
    c->ereq.text = NULL;
    c->submitted = 1;
    c->conn->in_submit = 1;
    c->conn->async_done = 0;
    int rc = engine_submit(c->srv->engine, &c->ereq);
    c->conn->in_submit = 0;
    if (rc != 0) {
        c->submitted = 0;
        c->ereq.status = rc;
        c->ereq.result = NULL;
        c->ereq.message = NULL;
        done(c, &c->ereq);
        return;
    }
    if (c->submitted) {
        /* Parked: no header/idle timeout while the engine decides, and the body (already
         * parsed into ereq) is dropped so a parked request costs little memory. */
        strbuf_free(&c->conn->parser.req.body);
        arm_timer(c->conn);
    }
}

/* ---- dispatch ---- */

static int is_v1(const char *path)
{
    return strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0;
}

static void reply_no_route(route_ctx_t *c, int rc, const char *method, const char *path,
                           size_t plen)
{
    if (is_v1(path)) {
        char allow[160];
        if (rc == ROUTER_BAD_METHOD)
            reply_problem_ex(c, 405, "method_not_allowed",
                             "this method is not allowed here (see the Allow header)",
                             router_allow_header(path, plen, allow, sizeof allow) > 0 ? allow
                                                                                      : NULL);
        else
            ctx_reply_problem(c, 404, "not_found", "no such route");
        return;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "Cannot %s %.100s", method, path);
    ctx_reply_text(c, 404, msg);
}

static void dispatch(conn_t *conn)
{
    route_ctx_t *c = &conn->ctx;
    memset(c, 0, sizeof *c);
    c->srv = conn->srv;
    c->conn = conn;
    c->req = &conn->parser.req;
    conn->busy = 1;
    char *url = conn->parser.req.url.data;
    char *q = strchr(url, '?');
    size_t plen = q != NULL ? (size_t)(q - url) : strlen(url);
    c->query = q != NULL ? q + 1 : NULL;
    const char *method = http_method_name(conn->parser.req.method);
    const char *param = NULL;
    size_t param_len = 0;
    int rc = router_match(method, url, plen, &c->route, &param, &param_len);
    if (rc != ROUTER_FOUND) {
        if (q != NULL)
            *q = '\0';
        reply_no_route(c, rc, method, url, plen);
        return;
    }
    if (param != NULL && http_pct_decode(param, param_len, 0, &c->param, &c->param_len) != 0) {
        ctx_reply_err(c, SEMA_EINVAL,
                      "the name in the URL is not valid percent-encoded UTF-8 (or holds %00)");
        return;
    }
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

static void reply_fatal(conn_t *conn, int status, const char *reason)
{
    server_t *srv = conn->srv;
    srv->parse_errors++;
    count(srv, NULL, status);
    const char *url = conn->parser.req.url.data;
    struct strbuf out;
    strbuf_init(&out, 0);
    int rc;
    if (url != NULL && is_v1(url)) {
        json_t *p = problem_json(status,
                                 status == 413   ? "body_too_large"
                                 : status == 431 ? "headers_too_large"
                                 : status == 414 ? "uri_too_long"
                                                 : "bad_request",
                                 http_status_text(status), reason);
        struct strbuf body;
        strbuf_init(&body, 0);
        rc = p != NULL ? http_json_append(&body, p, 0) : SEMA_ENOMEM;
        json_decref(p);
        if (rc == 0)
            rc = http_reply(&out, status, "application/problem+json", body.data, body.len, 0, NULL);
        strbuf_free(&body);
    } else {
        rc = http_reply(&out, status, "text/plain; charset=utf-8", reason, strlen(reason), 0, NULL);
    }
    if (rc == 0 && conn_write(conn, &out, NULL) == 0)
        start_linger(conn);
    else
        conn_close(conn);
    strbuf_free(&out);
}

static void send_continue(conn_t *conn)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    conn_send(conn, cont, sizeof cont - 1, NULL);
    conn->parser.want_continue = 3;
}

static void process(conn_t *conn, const char *data, size_t len)
{
    conn->in_process = 1;
    while (len > 0 && !conn->closing && !conn->lingering && !conn->busy && !conn->stream &&
           !backlogged(conn)) {
        size_t used;
        int rc = http_parser_feed(&conn->parser, data, len, &used);
        data += used;
        len -= used;
        if (rc == HTTP_NEED_MORE) {
            if (conn->parser.want_continue == 2)
                send_continue(conn);
            break;
        }
        if (rc == HTTP_ERROR) {
            reply_fatal(conn, conn->parser.error_status, conn->parser.error_reason);
            break;
        }
        dispatch(conn);
    }
    if (len > 0 && !conn->closing && !conn->lingering && !conn->stream)
        stash(conn, data, len); /* behind a parked request or an unread reply backlog */
    conn->in_process = 0;
    arm_timer(conn);
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

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *conn = h->data;
    buf->base = conn->srv->readbuf;
    buf->len = READ_BUF;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    conn_t *conn = s->data;
    if (n < 0) {
        if (!conn->busy && !conn->lingering && http_parser_eof(&conn->parser) == HTTP_ERROR)
            log_debug("client closed in the middle of a request");
        conn_close(conn); /* a parked request is cancelled there */
        return;
    }
    if (n == 0 || conn->closing || conn->lingering || conn->stream)
        return;
    if (conn->busy || conn->pending.len > 0 || backlogged(conn)) {
        stash(conn, buf->base, (size_t)n);
        return;
    }
    process(conn, buf->base, (size_t)n);
}

/* ---- accepting ---- */

static void reject(conn_t *conn)
{
    static const char body[] = "Too many connections";
    conn->srv->rejected++;
    struct strbuf out;
    strbuf_init(&out, 0);
    if (http_reply(&out, 503, "text/plain; charset=utf-8", body, sizeof body - 1, 0,
                   "Retry-After: 1\r\n") == 0 &&
        conn_write(conn, &out, NULL) == 0)
        start_linger(conn);
    strbuf_free(&out);
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

static void on_connection(uv_stream_t *listener, int status)
{
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
    conn->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = conn;
    srv->conns = conn;
    uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
    if (srv->nconns >= srv->cfg->max_connections || srv->draining) {
        conn->rejected = 1;
        reject(conn);
        return;
    }
    srv->nconns++;
    srv->accepted++;
    arm_timer(conn);
}

/* ---- start and stop ---- */

static int parse_listen(const char *spec, struct sockaddr_storage *ss, char *errbuf, size_t errlen)
{
    char host[128];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || (size_t)(colon - spec) >= sizeof host) {
        snprintf(errbuf, errlen, "--listen '%s': expected HOST:PORT", spec);
        return SEMA_EINVAL;
    }
    uint64_t port;
    if (config_parse_u64(colon + 1, &port) != 0 || port > 65535) {
        snprintf(errbuf, errlen, "--listen '%s': bad port", spec);
        return SEMA_EINVAL;
    }
    size_t hl = (size_t)(colon - spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)ss) == 0)
            return 0;
    } else if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0) {
        return 0;
    }
    snprintf(errbuf, errlen, "--listen '%s': not a numeric IPv4 or [IPv6] address", spec);
    return SEMA_EINVAL;
}

static void on_signal(uv_signal_t *h, int signum)
{
    server_t *srv = h->data;
    const char *name = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (srv->draining) { /* a second signal: do not wait for the grace period */
        log_info("received %s again: closing every connection now", name);
        while (srv->conns != NULL)
            conn_close(srv->conns);
        return;
    }
    log_info("received %s: stopping", name);
    server_stop(srv);
}

static void on_grace(uv_timer_t *t)
{
    server_t *srv = t->data;
    log_warn("shutdown grace period over: closing the remaining connections");
    while (srv->conns != NULL)
        conn_close(srv->conns);
}

static void log_bound(server_t *srv)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    log_info("listening on http://%s%s%s:%d", ss.ss_family == AF_INET6 ? "[" : "", ip,
             ss.ss_family == AF_INET6 ? "]" : "", port);
}

static int server_listen(server_t *srv, char *errbuf, size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    int rc = parse_listen(srv->cfg->listen, &ss, errbuf, errlen);
    if (rc != 0)
        return rc;
    uv_tcp_init(srv->loop, &srv->listener);
    srv->listener.data = srv;
    rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, BACKLOG, on_connection);
    if (rc != 0) {
        snprintf(errbuf, errlen, "cannot listen on %s: %s", srv->cfg->listen, uv_strerror(rc));
        uv_close((uv_handle_t *)&srv->listener, NULL);
        return SEMA_EIO;
    }
    log_bound(srv);
    return 0;
}

int server_new(server_t **out, uv_loop_t *loop, engine_t *engine, const semad_config_t *cfg,
               char *errbuf, size_t errlen)
{
    server_t *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return SEMA_ENOMEM;
    srv->loop = loop;
    srv->engine = engine;
    srv->cfg = cfg;
    srv->limits.max_header_bytes = cfg->max_header_bytes ? cfg->max_header_bytes : 1;
    srv->limits.max_body_bytes = cfg->max_body_bytes;
    strbuf_init(&srv->scratch_body, 0);
    strbuf_init(&srv->scratch_reply, 0);
    srv->counts = calloc((router_count() + 1) * NSTATUS, sizeof *srv->counts);
    if (srv->counts == NULL) {
        free(srv);
        return SEMA_ENOMEM;
    }
    int rc = server_listen(srv, errbuf, errlen);
    if (rc != 0) {
        free(srv->counts);
        free(srv);
        return rc;
    }
    uv_idle_init(loop, &srv->idle);
    srv->idle.data = srv;
    uv_timer_init(loop, &srv->grace);
    srv->grace.data = srv;
    uv_signal_init(loop, &srv->sigterm);
    uv_signal_init(loop, &srv->sigint);
    srv->sigterm.data = srv->sigint.data = srv;
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    *out = srv;
    return 0;
}

void server_stop(server_t *srv)
{
    if (srv->draining)
        return;
    srv->draining = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    engine_shutdown(srv->engine); /* parked requests are answered 503 now */
    conn_t *next;
    for (conn_t *conn = srv->conns; conn != NULL; conn = next) {
        next = conn->next;
        int flushed = uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) == 0;
        if (!conn->busy || conn->stream || (conn->lingering && flushed))
            conn_close(conn); /* parked ones close once their 503 is out */
    }
    uv_timer_start(&srv->grace, on_grace, (uint64_t)srv->cfg->shutdown_grace_ms, 0);
    uv_unref((uv_handle_t *)&srv->grace);
    maybe_finish_stop(srv);
}

void server_free(server_t *srv)
{
    if (srv == NULL)
        return;
    strbuf_free(&srv->scratch_body);
    strbuf_free(&srv->scratch_reply);
    free(srv->counts);
    free(srv);
}

engine_t *server_engine(server_t *srv)
{
    return srv->engine;
}

const semad_config_t *server_config(server_t *srv)
{
    return srv->cfg;
}

uint64_t server_connections(server_t *srv)
{
    return srv->nconns;
}

int server_draining(server_t *srv)
{
    return srv->draining;
}

/* ---- event streams ---- */

int ctx_stream_begin(route_ctx_t *c, engine_sub_t *sub)
{
    conn_t *conn = c->conn;
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\n"
                               "Connection: close\r\n\r\n"
                               ": subscribed\n\n";
    c->replied = 1;
    count(c->srv, c->route, 200);
    conn->sub = sub;
    conn->stream = 1;
    if (conn_stream_write(conn, head, sizeof head - 1) != 0)
        return SEMA_EIO;
    arm_timer(conn);
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
    start_linger(conn);
}

/* ---- metrics ---- */

static int metrics_requests(server_t *srv, struct strbuf *out)
{
    int rc = strbuf_puts(out, "# HELP semad_http_requests_total HTTP requests by route and "
                              "status.\n# TYPE semad_http_requests_total counter\n");
    for (size_t r = 0; r <= router_count() && rc == 0; r++) {
        const route_t *route = router_get(r);
        for (size_t s = 0; s < NSTATUS && rc == 0; s++) {
            uint64_t n = srv->counts[r * NSTATUS + s];
            if (n == 0)
                continue;
            char st[8];
            if (s < NSTATUS - 1)
                snprintf(st, sizeof st, "%d", known_status[s]);
            else
                snprintf(st, sizeof st, "other");
            rc = strbuf_printf(out,
                               "semad_http_requests_total{method=\"%s\",route=\"%s\","
                               "status=\"%s\"} %llu\n",
                               route ? route->method : "", route ? route->pattern : "(none)", st,
                               (unsigned long long)n);
        }
    }
    return rc;
}

int server_metrics(server_t *srv, struct strbuf *out)
{
    int rc = metrics_requests(srv, out);
    if (rc == 0)
        rc = strbuf_printf(
            out,
            "# TYPE semad_http_connections gauge\nsemad_http_connections %llu\n"
            "# TYPE semad_http_connections_accepted_total counter\n"
            "semad_http_connections_accepted_total %llu\n"
            "# TYPE semad_http_connections_rejected_total counter\n"
            "semad_http_connections_rejected_total %llu\n"
            "# TYPE semad_http_request_timeouts_total counter\n"
            "semad_http_request_timeouts_total %llu\n"
            "# TYPE semad_http_bad_requests_total counter\nsemad_http_bad_requests_total %llu\n"
            "# TYPE semad_http_undelivered_grants_total counter\n"
            "semad_http_undelivered_grants_total %llu\n",
            (unsigned long long)srv->nconns, (unsigned long long)srv->accepted,
            (unsigned long long)srv->rejected, (unsigned long long)srv->timeouts,
            (unsigned long long)srv->parse_errors, (unsigned long long)srv->undelivered);
    return rc;
}
