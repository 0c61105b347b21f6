/* SPDX-License-Identifier: MIT */
/* reply.c - the handlers' reply API: replies, problem replies, grant delivery (a grant that
 * cannot be delivered has its lease released), and submitting requests to the engine. */
#include "http/server_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "common/log.h"
#include "http/problem.h"
#include "http/render.h"
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
    d->req.id = d->id;
    d->req.id_len = n;
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
    assert(conn->busy && !conn->stream && !c->submitted); /* the engine is done with it */
    server__count(srv, c->route, status);
    int ka = conn->parser.req.keep_alive && !srv->draining;
    if (srv->cfg->log_requests) {
        const char *peer = conn_peer_name(conn); /* a verified client certificate's CN */
        log_info("%s %s -> %d%s%s", http_method_name(conn->parser.req.method),
                 conn->parser.req.url.data, status, peer != NULL ? " client=" : "",
                 peer != NULL ? peer : "");
    }
    struct strbuf *out = &srv->scratch_reply;
    strbuf_reset(out);
    if (http_reply(out, status, ctype, body, len, ka, extra) != 0) {
        conn_send_failed(conn, lease, SEMA_ENOMEM);
        return;
    }
    /* HEAD: the GET reply's head, Content-Length included, without the body (which
     * http_reply wrote last; RFC 9110 §9.3.2). */
    if (conn->parser.req.method == HTTP_HEAD && status != 204 && status >= 200)
        out->len -= len;
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

void ctx__reply_hdr(route_ctx_t *c, int status, const char *ctype, const char *body, size_t len,
                    const char *extra)
{
    reply_raw_ex(c, status, ctype, body, len, NULL, extra);
}

void ctx_reply(route_ctx_t *c, int status, const char *ctype, const char *body, size_t len)
{
    reply_raw(c, status, ctype, body, len, NULL);
}

void ctx_reply_text(route_ctx_t *c, int status, const char *text)
{
    ctx_reply(c, status, "text/html; charset=utf-8", text, strlen(text));
}

static const char json_ct[] = "application/json; charset=utf-8";

/* The server's scratch buffer for a reply body, empty. */
static struct strbuf *scratch_body(route_ctx_t *c)
{
    strbuf_reset(&c->srv->scratch_body);
    return &c->srv->scratch_body;
}

static int is_legacy(const route_ctx_t *c)
{
    return c->route != NULL && (c->route->flags & ROUTE_LEGACY);
}

/* The v1 API's JSON bodies end with a newline (curl's output then ends its line); the legacy
 * API's bytes stay those of the original. */
static int end_line(struct strbuf *body)
{
    if (body->len + 1 < body->cap) {
        body->data[body->len++] = '\n';
        body->data[body->len] = '\0';
        return 0;
    }
    return strbuf_append(body, "\n", 1);
}

/* Send the body rendered into scratch_body (`rc`: how the rendering went; on a failure the
 * client gets 503 and the grant `lease`, if any, goes back). */
static void reply_scratch(route_ctx_t *c, int status, const char *ctype, int rc, const char *lease,
                          const char *extra)
{
    struct strbuf *body = &c->srv->scratch_body;
    int legacy = is_legacy(c);
    if (rc == 0 && !legacy)
        rc = end_line(body);
    if (rc != 0) {
        /* A whole problem document, written out: rendering one is what just failed. */
        static const char oom[] = "{\"type\":\"urn:sema:problem:out_of_memory\",\"title\":"
                                  "\"Out of memory\",\"status\":503,\"code\":\"out_of_memory\","
                                  "\"detail\":\"out of memory writing the reply\"}\n";
        if (lease != NULL)
            server__release_lease(c->srv, lease);
        reply_raw(c, 503, "application/problem+json", oom, sizeof oom - 1 - (size_t)legacy, NULL);
    } else {
        reply_raw_ex(c, status, ctype, body->data, body->len, lease, extra);
    }
    if (body->cap > SCRATCH_KEEP)
        strbuf_free(body);
}

void ctx_reply_json(route_ctx_t *c, int status, json_t *j)
{
    jsonw_t w;
    jsonw_init(&w, scratch_body(c));
    jsonw_value(&w, j);
    reply_scratch(c, status, json_ct, jsonw_end(&w), NULL, NULL);
    json_decref(j);
}

void ctx_reply_result(route_ctx_t *c, int status, const engine_result_t *res)
{
    reply_scratch(c, status, json_ct, render_result(scratch_body(c), res), NULL, NULL);
}

/* A problem reply with extra header lines (may be NULL). */
static void reply_problem_ex(route_ctx_t *c, int status, const char *code, const char *title,
                             const char *detail, const char *extra)
{
    int rc = render_problem(scratch_body(c), status, code, title, detail);
    reply_scratch(c, status, "application/problem+json", rc, NULL, extra);
}

void ctx__reply_problem_hdr(route_ctx_t *c, int status, const char *code, const char *detail,
                            const char *extra)
{
    reply_problem_ex(c, status, code, problem_title(code, status), detail, extra);
}

void ctx_reply_problem(route_ctx_t *c, int status, const char *code, const char *detail)
{
    reply_problem_ex(c, status, code, problem_title(code, status), detail, NULL);
}

void ctx_reply_err(route_ctx_t *c, int err, const char *detail)
{
    const problem_row_t *row = problem_lookup(err);
    if (detail == NULL)
        detail = sema_strerror(err);
    if (is_legacy(c)) {
        reply_raw_ex(c, row->status, "text/html; charset=utf-8", detail, strlen(detail), NULL,
                     row->headers);
        return;
    }
    reply_problem_ex(c, row->status, row->code, row->title, detail, row->headers);
}

/* ---- requests no handler serves: no route matched, or the request did not parse ---- */

static int is_v1(const char *path)
{
    return strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0;
}

/* `len` bytes of `s` into `out` (NUL-terminated; room for 6 bytes each) with &, <, >, " and '
 * escaped for HTML: the text/html 404 names the path it could not find. */
static void html_escape(char *out, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 7 <= cap; i++) {
        const char *e;
        switch (s[i]) {
        case '&':
            e = "&amp;";
            break;
        case '<':
            e = "&lt;";
            break;
        case '>':
            e = "&gt;";
            break;
        case '"':
            e = "&quot;";
            break;
        case '\'':
            e = "&#39;";
            break;
        default:
            out[n++] = s[i];
            continue;
        }
        size_t el = strlen(e);
        memcpy(out + n, e, el);
        n += el;
    }
    out[n] = '\0';
}

/* No route matched (`rc` from router_match): 405 or 404, problem+json under /v1. */
void ctx__reply_no_route(route_ctx_t *c, int rc, const char *method, const char *path, size_t plen)
{
    if (is_v1(path)) {
        char allow[160];
        if (rc == ROUTER_BAD_METHOD)
            reply_problem_ex(c, 405, "method_not_allowed", problem_title("method_not_allowed", 405),
                             "this method is not allowed here (see the Allow header)",
                             router_allow_header(path, plen, allow, sizeof allow) > 0 ? allow
                                                                                      : NULL);
        else
            ctx_reply_problem(c, 404, "not_found", "no such route");
        return;
    }
    char msg[32 + 100 * 6];
    int n = snprintf(msg, sizeof msg, "Cannot %.15s ", method);
    html_escape(msg + n, sizeof msg - (size_t)n, path, plen < 100 ? plen : 100);
    ctx_reply_text(c, 404, msg);
}

/* The problem+json body of a reply to a request that could not be parsed, into `body`. */
static int fatal_problem(struct strbuf *body, int status, const char *reason)
{
    const char *code = status == 413   ? "body_too_large"
                       : status == 431 ? "headers_too_large"
                       : status == 414 ? "uri_too_long"
                       : status == 501 ? "not_implemented"
                       : status == 505 ? "http_version_not_supported"
                                       : "bad_request";
    int rc = render_problem(body, status, code, http_status_text(status), reason);
    return rc == 0 ? end_line(body) : rc;
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
    server__release_lease(c->srv, id);
    c->replied = 1;
    conn_close(c->conn);
    return 1;
}

void ctx_reply_grant(route_ctx_t *c, const engine_lease_t *lease)
{
    if (!grant_undeliverable(c, lease->id))
        reply_scratch(c, 200, json_ct, render_lease(scratch_body(c), lease), lease->id, NULL);
}

/* ---- the engine ---- */

void ctx_done_default(route_ctx_t *c, engine_req_t *req)
{
    if (req->status != 0)
        ctx_reply_err(c, req->status, req->message);
    else if (req->res.kind == ENGINE_RES_NONE)
        ctx_reply(c, 204, NULL, NULL, 0);
    else if (req->res.kind == ENGINE_RES_LEASE && !ctx__lease_visible(c, &req->res.lease))
        return;
    else if (req->res.kind == ENGINE_RES_TICKET &&
             !ctx__name_visible(c, req->res.ticket.name, req->res.ticket.name_len))
        return;
    else
        ctx_reply_result(c, req->created ? 201 : 200, &req->res);
}

static void on_engine_done(engine_req_t *req)
{
    route_ctx_t *c = req->data;
    assert(c->submitted); /* the engine runs each callback once */
    c->submitted = 0;
    c->conn->async_done = !c->conn->in_submit;
    c->done(c, req);
}

void ctx_submit(route_ctx_t *c, route_done_fn done)
{
    if (ctx__authorize_submit(c) != 0)
        return;
    assert(!c->submitted); /* one engine request at a time per connection */
    c->done = done;
    c->ereq.cb = on_engine_done;
    c->ereq.data = c;
    c->ereq.status = 0;
    c->ereq.message = NULL;
    c->ereq.res.kind = ENGINE_RES_NONE;
    c->submitted = 1;
    c->conn->in_submit = 1;
    c->conn->async_done = 0;
    int rc = engine_submit(c->srv->engine, &c->ereq);
    c->conn->in_submit = 0;
    if (rc != 0) {
        c->submitted = 0;
        c->ereq.status = rc;
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
