/* SPDX-License-Identifier: MIT */
/* server.h - semad's HTTP server on one libuv loop: listener, connections, limits,
 * timeouts, signals, and the per-request context the route handlers use. */
#ifndef SEMAD_SERVER_H
#define SEMAD_SERVER_H

#include <jansson.h>
#include <uv.h>

#include "common/auth.h"
#include "engine/engine.h"
#include "http/http.h"
#include "http/router.h"

/* The HTTP layer's settings (semad's flags of the same names, src/semad/config.c). */
typedef struct {
    const char *listen;               /* HOST:PORT (port 0 = any free port) */
    uint64_t max_connections;         /* open client connections; beyond: 503 and close */
    uint64_t max_connections_per_ip;  /* the same from one address (IPv6: one /64); 0 = no cap */
    uint64_t max_header_bytes;        /* request line + headers; beyond: 431 */
    uint64_t max_body_bytes;          /* request body; beyond: 413 */
    uint64_t max_pipeline_bytes;      /* bytes buffered behind a parked request */
    uint64_t max_stream_bytes;        /* unsent bytes one event stream holds before it is cut */
    uint64_t max_stream_buffer_bytes; /* the same for all streams together (slowest cut) */
    int64_t header_timeout_ms;        /* a request must arrive whole within this of its first
                                         byte (and a TLS handshake end within it) */
    int64_t idle_timeout_ms;          /* an idle keep-alive connection closes after this */
    int64_t shutdown_grace_ms;        /* on SIGTERM: longest wait for in-flight replies */
    int64_t sse_heartbeat_ms;         /* comment line on idle event streams */
    int log_requests;                 /* one log line per request */
    const char *auth_file;            /* --auth: the token file, or NULL (no tokens) */
    int insecure;                     /* listen beyond loopback without --auth */
    const char *tls_cert;             /* PEM certificate chain: serve HTTPS (with tls_key) */
    const char *tls_key;              /* PEM private key of tls_cert */
    const char *tls_client_ca;        /* PEM CA certificates: require client certificates */
    int no_ui;                        /* --no-ui: no dashboard at /ui (its routes answer 404) */
    int ui_read_only;                 /* --ui-read-only: the dashboard has no actions, and a
                                         browser may not change state */
} server_config_t;

typedef struct server server_t;
typedef struct conn conn_t;
typedef struct route_ctx route_ctx_t;

/* Continues a request after the engine answered (req == &ctx->ereq). */
typedef void (*route_done_fn)(route_ctx_t *ctx, engine_req_t *req);

/* The request being served on a connection (one at a time per connection). */
struct route_ctx {
    server_t *srv;
    conn_t *conn;
    const route_t *route;
    const http_request_t *req; /* the parsed request (borrowed from the parser) */
    const char *query;         /* text after '?' or NULL (inside req->url) */
    char *param;               /* decoded path parameter (owned) or NULL */
    size_t param_len;
    char *owner;          /* an owned copy of an input the engine borrows (so is ereq.tenant) */
    engine_part_t *parts; /* POST /v1/acquire, POST /v1/tickets: what the engine reads
                             (owned; the names point into `json`) */
    json_t *json;         /* a reference the request keeps: POST /semaphore's object (echoed on
                             303), the "semaphores" array of a request on several */
    /* Per-route state, owned, freed when the request ends. */
    struct {
        char *prefix;          /* decoded ?prefix= */
        char *cursor;          /* decoded ?cursor= */
    } list;                    /* GET /v1/semaphores */
    auth_table_t *auth;        /* with --auth: the tokens the request was checked against (a
                                  reference, so a reload cannot free them under it) */
    const auth_token_t *token; /* the request's token (in `auth`), or NULL without --auth */
    engine_req_t ereq;
    route_done_fn done;
    int submitted; /* the engine holds ereq */
    int replied;
};

/* Create the server on `loop`: bind and listen on cfg->listen (prints the bound address to
 * stderr as "semad: listening on http://HOST:PORT"), install SIGTERM/SIGINT handlers.
 * `engine` and `cfg` are borrowed. `engine` may be NULL, so that a port already taken is
 * found before anything else is made (semad's data store): then set it with
 * server_set_engine() before the loop runs, or server_stop() the server, run the loop and
 * server_free() it. Returns 0 or a SEMA_E* code with a message in errbuf (on failure, run
 * the loop once: the listener is closed on it). */
int server_new(server_t **out, uv_loop_t *loop, engine_t *engine, const server_config_t *cfg,
               char *errbuf, size_t errlen);

/* The engine of a server made without one (before the loop runs; borrowed). */
void server_set_engine(server_t *srv, engine_t *engine);

/* Start a graceful stop (what SIGTERM does): stop accepting, have the engine answer
 * parked requests 503, finish in-flight replies, close every connection. The loop ends
 * once everything has closed. */
void server_stop(server_t *srv);

/* Free the server after the loop has ended. NULL is fine. */
void server_free(server_t *srv);

/* For handlers. */
engine_t *server_engine(server_t *srv);

/* Replies; exactly one per request. Bodies are copied. */
void ctx_reply(route_ctx_t *c, int status, const char *ctype, const char *body, size_t len);
void ctx_reply_text(route_ctx_t *c, int status, const char *text); /* text/html */
void ctx_reply_json(route_ctx_t *c, int status, json_t *j);        /* steals j */
/* A problem+json reply for engine status `err` (or text for legacy routes), with the header
 * lines of its row in problem.c (Retry-After for store_unavailable and unavailable_retry). */
void ctx_reply_err(route_ctx_t *c, int err, const char *detail);
/* A problem+json reply with an explicit status and code. */
void ctx_reply_problem(route_ctx_t *c, int status, const char *code, const char *detail);
/* An engine result (borrowed) rendered in the wire format. */
void ctx_reply_result(route_ctx_t *c, int status, const engine_result_t *res);
/* Reply 200 to a granted acquire; if the reply cannot be delivered (client gone) the lease
 * is released. */
void ctx_reply_grant(route_ctx_t *c, const engine_lease_t *lease);

/* Submit c->ereq to the engine; `done` runs once with the outcome (also when the engine
 * refuses the request at once). */
void ctx_submit(route_ctx_t *c, route_done_fn done);

/* Default completion: 200 with the result (201 if created, 204 if there is none), or the
 * error via ctx_reply_err. */
void ctx_done_default(route_ctx_t *c, engine_req_t *req);

/* Event streams (stream.c, for sse.c): switch the connection to a stream and write to it. */
int ctx_stream_begin(route_ctx_t *c, engine_sub_t *sub);
int conn_stream_write(conn_t *conn, const char *data, size_t len);
/* An engine event on the stream: its frame is rendered once and shared with every other
 * stream that sends it. 0 or a SEMA_E* code (the stream is cut). */
int conn_stream_event(conn_t *conn, const char *id, const char *type, const char *data, size_t len);
/* "id: ID\nevent: TYPE\ndata: DATA\n\n" appended to out. 0 or SEMA_ENOMEM. */
int stream_format(struct strbuf *out, const char *id, const char *type, const char *data,
                  size_t len);
void conn_stream_end(conn_t *conn);

/* HTTP-level metrics and stats (Prometheus text), for /metrics and /healthz. */
int server_metrics(server_t *srv, struct strbuf *out);
uint64_t server_connections(server_t *srv);
int server_draining(server_t *srv);

#endif /* SEMAD_SERVER_H */
