/* SPDX-License-Identifier: MIT */
/* server_internal.h - the server and connection structs and the functions server.c, conn.c,
 * reply.c and stream.c share. Route handlers use server.h only. Names: conn_ for a
 * connection, ctx__ for a request, server__ for the server. */
#ifndef SEMAD_SERVER_INTERNAL_H
#define SEMAD_SERVER_INTERNAL_H

#include <stdbool.h>

#include "http/ipcap.h"
#include "http/server.h"
#include "http/tls.h"

enum {
    READ_BUF = 65536, /* one shared read buffer: idle connections cost no buffer */
};

/* An event-stream frame ("id: ...\ndata: ...\n\n"), rendered once and shared by every
 * stream that sends it (stream.c). */
typedef struct sframe {
    uint32_t refs;
    uint32_t len;
    char data[];
} sframe_t;

/* A block of a stream's queue: fixed-size, so blocks one stream frees serve another's
 * growth and no queue is ever copied to grow. */
enum { STREAM_BLOCK_SLOTS = 62 };
typedef struct sblock {
    struct sblock *next;
    sframe_t *f[STREAM_BLOCK_SLOTS];
} sblock_t;

/* A connection's event stream: frames waiting to be written, oldest first. */
typedef struct {
    sblock_t *first, *last; /* the queue's blocks */
    uint32_t first_i;       /* the oldest entry's slot in `first` */
    uint32_t last_n;        /* slots used in `last` */
    size_t len;             /* entries queued */
    size_t held;            /* bytes of the queued frames, each counted whole */
    size_t inflight;        /* entries at the head handed to the running write */
    uv_write_t wr;
    char *sealed; /* TLS: the running write's records (the frames encrypted) */
    size_t sealed_len;
    conn_t *prev, *next; /* the server's streams */
    uint8_t ending;      /* end (linger) once the queue is written */
    uint8_t listed;      /* in the server's list */
    uint8_t cut;         /* cut: closes from its timer (never inside an event delivery) */
} sstream_t;

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
    /* One bit each (a parked waiter's connection is most of its memory): */
    bool busy : 1;       /* a request is being served */
    bool in_process : 1; /* inside process(): replies do not re-enter it */
    bool closing : 1;
    bool lingering : 1; /* last reply queued; waiting for the client's FIN */
    bool stream : 1;    /* the connection carries an event stream */
    bool on_ready : 1;
    bool rejected : 1;    /* over max_connections: answered 503 */
    bool in_submit : 1;   /* inside engine_submit(): completions are synchronous */
    bool async_done : 1;  /* the engine completed after engine_submit() returned */
    bool tls_seen : 1;    /* TLS: the first bytes were a TLS record */
    bool fin_watched : 1; /* in the server's FIN watch (srv->fin_epfd) */
    bool fin_seen : 1;    /* the FIN watch saw the client's FIN (or an error) */
    uint8_t handles;      /* handles still open */
    uint64_t started;     /* loop time (ms) the current request's first byte came (with TLS,
                             until the handshake is over: the accept) */
    uint64_t deadline;    /* loop time (ms) the timer acts at, 0 = none (not for streams) */
    sstream_t *st;        /* the event stream (allocated when the connection becomes one) */
    /* --auth: the last Authorization value this connection sent that named a token, so the
     * next request with the same bytes skips the hash (access.c) */
    struct conn_auth *auth; /* owned, or NULL (allocated only under --auth) */
    tls_sess_t *tls;        /* the TLS session (NULL: plain HTTP) */
    ipcap_entry_t *ip;      /* the count of the client's address (NULL: not counted) */
};

struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigterm, sigint;
    uv_signal_t sighup; /* reloads the token file (access.c) and the TLS certificate */
    auth_table_t *auth; /* the tokens of --auth, or NULL: every request is allowed */
    uv_idle_t idle;
    uv_timer_t grace;
    uv_timer_t watchdog; /* WATCHDOG=1 to the service manager, when it asks (notify.h) */
    uv_timer_t trim;     /* free heap memory back to the system (procmem_trim) */
    /* The FIN watch: every connection's socket in an epoll set of its own that reports only
     * a client's FIN or an error, so a grant made after the loop last read its sockets learns
     * whether its client left without a system call per grant (conn_peer_gone). */
    int fin_epfd;    /* -1: no watch (each check reads its socket) */
    uint64_t fin_at; /* uv_hrtime() of the last read of the watch */
    int fin_all;     /* that read was full: each check reads its socket until the next */
    engine_t *engine;
    const server_config_t *cfg;
    http_limits_t limits;
    conn_t *conns;
    conn_t *ready;
    uint64_t nconns, accepted, rejected, timeouts, parse_errors, undelivered;
    uint64_t rejected_per_ip; /* refused over --max-connections-per-ip */
    ipcap_t ipcap;            /* open connections by client address */
    /* TLS (tls.c), when --tls-cert is given */
    tls_t *tls;
    struct strbuf tls_out;      /* ciphertext of replies being made, written out at once */
    struct strbuf tls_read_out; /* what a session writes while it reads (handshake, alerts) */
    char *tls_plain;            /* TLS_RECORD bytes: plaintext of one record */
    uint64_t tls_handshakes;    /* handshakes completed */
    uint64_t tls_failed;        /* handshakes that failed or did not end in time */
    uint64_t tls_plain_refused; /* plain HTTP sent to the TLS port (400) */
    uint64_t *counts;           /* requests by route and status (see server__count) */
    int draining, stopped;
    struct strbuf scratch_body;  /* JSON of the reply being built */
    struct strbuf scratch_reply; /* the reply being built (sent or copied at once) */
    /* event streams (stream.c) */
    conn_t *streams; /* connections with an event stream */
    uint64_t nstreams;
    uint64_t stream_conns;  /* connections that had a stream and are not freed yet */
    size_t stream_mem;      /* frames alive (each once) and queue slots, in bytes */
    size_t stream_mem_mark; /* the highest stream_mem since memory was last given back */
    uint64_t streams_cut;   /* cut for not reading (total) */
    uint64_t cut_unlogged;  /* cut since the last log line */
    uint64_t cut_logged_at; /* loop time of that line */
    sframe_t *last_frame;   /* the last event's frame, for its other subscribers */
    char last_id[48];
    char readbuf[READ_BUF];
};

/* ---- conn.c ---- */

/* The listener's connection callback. */
void conn_accept(uv_stream_t *listener, int status);

/* Send `len` bytes (copied if needed): what the socket takes now is written at once, the
 * rest is queued in order. `lease` (borrowed, may be NULL) is released if the bytes cannot
 * be handed to the kernel. Returns 0 or a SEMA_E* code (then the connection is closing). */
int conn_send(conn_t *conn, const char *data, size_t len, const char *lease);
/* Send a strbuf's bytes (the caller keeps and frees the strbuf). */
int conn_write(conn_t *conn, struct strbuf *out, const char *lease);
/* Send a reply that ends the connection (no keep-alive; `extra` header lines may be NULL),
 * then linger. Returns 0 or a SEMA_E* code. */
int conn_send_last(conn_t *conn, int status, const char *ctype, const char *body, size_t len,
                   const char *extra);
/* TLS: encrypt `n` buffers into one new buffer (*out, free with free()) for a write the
 * caller makes. 0, or a SEMA_E* code. */
int conn_seal(conn_t *conn, const uv_buf_t *bufs, size_t n, uv_buf_t *out);
/* Sending failed: release `lease` (may be NULL), close the connection, return rc. */
int conn_send_failed(conn_t *conn, const char *lease, int rc);
/* True when the client has already closed its side (a FIN is waiting unread). */
int conn_peer_gone(conn_t *conn);

/* Arm the connection's timer for its state (linger, heartbeat, header or idle timeout). */
void conn_arm_timer(conn_t *conn);
/* The last reply is queued: send FIN after it, then wait briefly for the client's FIN. */
void conn_start_linger(conn_t *conn);
/* The request's reply is queued: free its state and go on to the next request. */
void conn_finish_request(conn_t *conn, int keep_alive);
/* Close the connection (cancelling a parked request, ending a subscription). Idempotent. */
void conn_close(conn_t *conn);

/* The subject CN of the client's verified certificate, or NULL. */
const char *conn_peer_name(const conn_t *conn);

/* ---- reply.c ---- */

/* No route matched (`rc` from router_match): 405 or 404, problem+json under /v1. */
void ctx__reply_no_route(route_ctx_t *c, int rc, const char *method, const char *path, size_t plen);
/* A request that could not be parsed: the connection closes after this reply. */
void conn_reply_fatal(conn_t *conn, int status, const char *reason);
/* Release a granted lease whose grant could not be delivered (counted as undelivered). */
void server__release_lease(server_t *srv, const char *id);

/* A reply with extra header lines (`extra`, each ending in CRLF; may be NULL). */
void ctx__reply_hdr(route_ctx_t *c, int status, const char *ctype, const char *body, size_t len,
                    const char *extra);
/* A problem+json reply with extra header lines (may be NULL), on every route. */
void ctx__reply_problem_hdr(route_ctx_t *c, int status, const char *code, const char *detail,
                            const char *extra);

/* ---- access.c ---- */

/* Load --auth's file. 0, or a SEMA_E* code with a message in errbuf. */
int server__auth_open(server_t *srv, char *errbuf, size_t errlen);
/* Re-read it (SIGHUP); a bad file keeps the tokens loaded before. No-op without --auth. */
void server__auth_reload(server_t *srv);
/* Free the tokens (server_free). */
void server__auth_free(server_t *srv);
/* Forget the connection's remembered Authorization value (at its free). */
void conn_auth_forget(conn_t *conn);
/* Before the handler, for a request from a web browser (Sec-Fetch-Site or Origin): a change
 * of state only from semad's own pages (not with --ui-read-only), and without --auth only at
 * a loopback address or localhost. 0 to go on, -1 after a 403 reply. (ctx__authorize calls
 * it first.) */
int ctx__browser_check(route_ctx_t *c);
/* Before the handler: the browser check, the token and the right the route needs, and the
 * prefix of a name in the path. 0 to go on, -1 after a 401 or 403 reply. */
int ctx__authorize(route_ctx_t *c);
/* The token the request names (its Authorization header, else under --tls-client-ca the
 * verified client certificate's CN), without replying: NULL when it names none, an unknown
 * one, or semad runs without --auth. Borrowed from srv->auth: use it before returning. */
const auth_token_t *ctx__token_peek(route_ctx_t *c);
/* Before the engine: stamp the token's name on c->ereq, check the prefix of the name it
 * carries (also one from a body). 0 to go on, -1 after a 403 reply. */
int ctx__authorize_submit(route_ctx_t *c);
/* A lease result is shown only to tokens whose prefixes cover its semaphore: 1, or 0 after
 * a 403 reply. */
int ctx__lease_visible(route_ctx_t *c, const engine_lease_t *l);
/* The same for any result naming semaphore `name` (a ticket's). */
int ctx__name_visible(route_ctx_t *c, const char *name, size_t len);

/* ---- stream.c ---- */

/* Queue a frame (a new reference is taken) on the connection's stream. 0 or SEMA_EIO (the
 * stream was cut: it holds too much, or all streams together do). */
int conn_stream_push(conn_t *conn, sframe_t *f);
/* At conn_close: drop what the stream holds (what a running write holds goes when the write
 * is cancelled). */
void conn_stream_release(conn_t *conn);
/* At the connection's free; when the last stream connection is freed, memory goes back to
 * the system. */
void conn_stream_free(conn_t *conn);
/* Release the cached frame (server free). */
void server__streams_free(server_t *srv);

/* ---- server.c ---- */

/* Count a reply by route (NULL: none matched) and status for /metrics. */
void server__count(server_t *srv, const route_t *r, int status);
/* The stop is complete once every connection has closed: close the server's handles. */
void server__finish_stop(server_t *srv);

#endif /* SEMAD_SERVER_INTERNAL_H */
