/* SPDX-License-Identifier: MIT */
/* reply.c - the handlers' reply API: replies, problem replies, grant delivery (a grant that
 * cannot be delivered has its lease released), and submitting requests to the engine. */
#include "server_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "problem.h"
#include "sema/error.h"

enum {
    SCRATCH_KEEP = 64 << 10, /* larger scratch buffers are freed after use */
};

/* ---- releasing grants nobody received ---- */

typedef struct {
    engine_req_t req;
    char id[];
} detached_t;

static void detached_done(engine_req_t *req)
{
    free(req->data);
}

void server__release_lease(server_t *srv, const char *id)
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

/* ---- replies ---- */

/* A reply with extra header lines (`extra`, each ending in CRLF; may be NULL). */
static void reply_raw_ex(route_ctx_t *c, int status, const char *ctype, const char *body,
                         size_t len, const char *lease, const char *extra)
{
    conn_t *conn = c->conn;
    server_t *srv = c->srv;
    if (c->replied || conn->closing) {
        if (lease != NULL)
            server__release_lease(srv, lease);
        return;
    }
    c->replied = 1;
    server__count(srv, c->route, status);
    int ka = conn->parser.req.keep_alive && !srv->draining;
    if (srv->cfg->log_requests)
        log_info("%s %s -> %d", http_method_name(conn->parser.req.method),
                 conn->parser.req.url.data, status);
    struct strbuf *out = &srv->scratch_reply;
    strbuf_reset(out);
    if (http_reply(out, status, ctype, body, len, ka, extra) != 0) {
        conn_send_failed(conn, lease, SEMA_ENOMEM);
        return;
    }
    int rc = conn_write(conn, out, lease);
    if (out->cap > SCRATCH_KEEP)
        strbuf_free(out);
    if (rc == 0)
        conn_finish_request(conn, ka);
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
            server__release_lease(c->srv, lease);
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

/* ---- requests no handler serves: no route matched, or the request did not parse ---- */

static int is_v1(const char *path)
{
    return strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0;
}

/* No route matched (`rc` from router_match): 405 or 404, problem+json under /v1. */
void ctx__reply_no_route(route_ctx_t *c, int rc, const char *method, const char *path, size_t plen)
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

/* The problem+json body of a reply to a request that could not be parsed, into `body`. */
static int fatal_problem(struct strbuf *body, int status, const char *reason)
{
    const char *code = status == 413   ? "body_too_large"
                       : status == 431 ? "headers_too_large"
                       : status == 414 ? "uri_too_long"
                                       : "bad_request";
    json_t *p = problem_json(status, code, http_status_text(status), reason);
    int rc = p != NULL ? http_json_append(body, p, 0) : SEMA_ENOMEM;
    json_decref(p);
    return rc;
}

/* A request that could not be parsed: the connection closes after this reply. */
void conn_reply_fatal(conn_t *conn, int status, const char *reason)
{
    static const char text[] = "text/plain; charset=utf-8", problem[] = "application/problem+json";
    server_t *srv = conn->srv;
    srv->parse_errors++;
    server__count(srv, NULL, status);
    const char *url = conn->parser.req.url.data;
    struct strbuf body;
    strbuf_init(&body, 0);
    int rc;
    if (url != NULL && is_v1(url)) {
        rc = fatal_problem(&body, status, reason);
        if (rc == 0)
            rc = conn_send_last(conn, status, problem, body.data, body.len, NULL);
    } else {
        rc = conn_send_last(conn, status, text, reason, strlen(reason), NULL);
    }
    strbuf_free(&body);
    if (rc != 0)
        conn_close(conn);
}

/* ---- grants ---- */

/* The client left while its grant was being made: give the units back now. Returns 1 if
 * so (the connection is closed), 0 to reply. */
static int grant_undeliverable(route_ctx_t *c, const char *id)
{
    if (!c->conn->async_done || !conn_peer_gone(c->conn))
        return 0;
    if (id != NULL)
        server__release_lease(c->srv, id);
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

/* ---- the engine ---- */

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
        conn_arm_timer(c->conn);
    }
}
