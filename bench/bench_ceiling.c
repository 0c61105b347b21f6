/* SPDX-License-Identifier: MIT */
/* bench_ceiling.c - the ceiling for semad's request rate: a bare libuv + llhttp HTTP server on
 * one loop that answers semad's requests with constants (a lease for POST, 204 for DELETE, a
 * small JSON object otherwise). bench/semad_vs_peers.sh drives it with `sema bench`. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <llhttp.h>
#include <uv.h>

#define OUT_MAX 65536 /* answers queued per connection (pipelined requests) */

/* The same shapes semad answers with; the lease is a constant of the same length. */
static const char lease_body[] =
    "{\"lease\":\"AAAAAAAAAAAAAAAAAAAAAAAA\",\"name\":\"bench\",\"weight\":1,\"fence\":1,"
    "\"ttl_ms\":60000,\"expires_at\":1790000000000,\"acquired_at\":1790000000000,"
    "\"owner\":null}";
static char reply_lease[512]; /* headers + lease_body, built in main() */
static size_t reply_lease_len;
static const char reply_released[] = "HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n";
static const char reply_ok[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 15\r\n"
    "Connection: keep-alive\r\n\r\n{\"status\":\"ok\"}";

typedef struct {
    uv_tcp_t tcp;
    uv_write_t wreq;
    llhttp_t parser;
    char out[2][OUT_MAX]; /* out[wcur] is being written; out[wcur ^ 1] collects */
    size_t out_len[2];
    unsigned wcur;
    int writing;
    int close_after; /* the client asked for Connection: close */
} conn_t;

static llhttp_settings_t settings;
static uv_loop_t *loop;
static uv_tcp_t server;
static uv_signal_t sig_term, sig_int;
static uv_timer_t lifetime;
static uint64_t answered;

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

static void conn_close(conn_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void flush(conn_t *c);

static void on_written(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    c->writing = 0;
    c->out_len[c->wcur] = 0;
    if (status < 0) {
        conn_close(c);
        return;
    }
    c->wcur ^= 1u;
    flush(c);
}

/* Writes what has been collected: straight to the socket if it takes it all. */
static void flush(conn_t *c)
{
    unsigned q = c->writing ? c->wcur ^ 1u : c->wcur;
    if (c->writing || c->out_len[q] == 0 || uv_is_closing((uv_handle_t *)&c->tcp)) {
        if (!c->writing && c->close_after && c->out_len[q] == 0)
            conn_close(c);
        return;
    }
    uv_buf_t b = uv_buf_init(c->out[q], (unsigned)c->out_len[q]);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == (int)b.len) {
        c->out_len[q] = 0;
        if (c->close_after)
            conn_close(c);
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        conn_close(c);
        return;
    }
    if (n > 0) {
        memmove(c->out[q], c->out[q] + n, b.len - (size_t)n);
        c->out_len[q] -= (size_t)n;
    }
    c->wcur = q;
    c->writing = 1;
    c->wreq.data = c;
    b = uv_buf_init(c->out[q], (unsigned)c->out_len[q]);
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
        conn_close(c);
}

static int on_message_complete(llhttp_t *p)
{
    conn_t *c = p->data;
    const char *r = reply_ok;
    size_t len = sizeof(reply_ok) - 1;
    if (p->method == HTTP_POST)
        r = reply_lease, len = reply_lease_len;
    else if (p->method == HTTP_DELETE)
        r = reply_released, len = sizeof(reply_released) - 1;
    unsigned q = c->writing ? c->wcur ^ 1u : c->wcur;
    if (c->out_len[q] + len > OUT_MAX)
        return -1; /* a client that never reads: drop it */
    memcpy(c->out[q] + c->out_len[q], r, len);
    c->out_len[q] += len;
    if (!llhttp_should_keep_alive(p))
        c->close_after = 1;
    answered++;
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char rbuf[65536];
    *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    if (llhttp_execute(&c->parser, buf->base, (size_t)nread) != HPE_OK) {
        conn_close(c);
        return;
    }
    flush(c); /* one write for every answer this read produced */
}

static void on_connection(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &settings);
    c->parser.data = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_stop(uv_signal_t *s, int signum)
{
    uv_stop(loop);
}

static void on_lifetime(uv_timer_t *t)
{
    fprintf(stderr, "bench_ceiling: --max-seconds reached, stopping\n");
    uv_stop(loop);
}

static int listen_on(const char *hostport)
{
    char host[64];
    const char *colon = strrchr(hostport, ':');
    size_t hl = colon ? (size_t)(colon - hostport) : 0;
    if (!colon || hl == 0 || hl >= sizeof(host))
        return -1;
    memcpy(host, hostport, hl);
    host[hl] = '\0';
    struct sockaddr_in addr;
    if (uv_ip4_addr(host, (int)strtol(colon + 1, NULL, 10), &addr) != 0)
        return -1;
    uv_tcp_init(loop, &server);
    if (uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0) != 0 ||
        uv_listen((uv_stream_t *)&server, 4096, on_connection) != 0)
        return -1;
    struct sockaddr_in bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
    printf("listening %s:%d\n", host, ntohs(bound.sin_port));
    fflush(stdout);
    return 0;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    const char *listen_addr = NULL;
    double max_seconds = 600;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            listen_addr = argv[i + 1];
        else if (strcmp(argv[i], "--max-seconds") == 0)
            max_seconds = strtod(argv[i + 1], NULL);
    }
    if (!listen_addr) {
        printf("bench_ceiling: usage: bench_ceiling --listen 127.0.0.1:PORT [--max-seconds S]\n"
               "  (a constant-answer server; bench/semad_vs_peers.sh runs it beside semad)\n");
        return 0;
    }
    raise_nofile();
    reply_lease_len = (size_t)snprintf(reply_lease, sizeof(reply_lease),
                                       "HTTP/1.1 200 OK\r\nContent-Type: application/json; "
                                       "charset=utf-8\r\nContent-Length: %zu\r\n"
                                       "Connection: keep-alive\r\n\r\n%s",
                                       sizeof(lease_body) - 1, lease_body);
    loop = uv_default_loop();
    llhttp_settings_init(&settings);
    settings.on_message_complete = on_message_complete;
    if (listen_on(listen_addr) != 0) {
        fprintf(stderr, "bench_ceiling: cannot listen on %s\n", listen_addr);
        return 1;
    }
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_term, on_stop, SIGTERM);
    uv_signal_init(loop, &sig_int);
    uv_signal_start(&sig_int, on_stop, SIGINT);
    uv_timer_init(loop, &lifetime);
    uv_timer_start(&lifetime, on_lifetime, (uint64_t)(max_seconds * 1000.0), 0);
    uv_run(loop, UV_RUN_DEFAULT);
    fprintf(stderr, "bench_ceiling: answered %" PRIu64 " requests\n", answered);
    return 0;
}
