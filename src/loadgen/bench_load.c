/* SPDX-License-Identifier: MIT */
/* bench_load.c - `sema bench`'s load engine: one libuv loop, N keep-alive connections, raw
 * requests out, llhttp-parsed answers in; acquire+release pairs, plain GETs, creates or the
 * mix (bench_mix.c), as fast as answers come or started at a fixed rate (--rate), with a
 * report per interval (--interval) for soaks. With an https:// server each connection is a
 * TLS client (OpenSSL through memory BIOs): the same requests, encrypted, so plain and TLS
 * runs differ by TLS alone. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>

#include "loadgen/bench_load.h"

#define RECONNECT_MAX 1000
#define DRAIN_MS 3000                     /* after the deadline, in-flight requests get this long */
#define LAG_MAX_NS (1000ull * 1000000ull) /* --rate: starts later than this are given up */
#define PROBE_MS 10                       /* the stall probe's period */
#define STALL_NS (10ull * 1000000ull)     /* the probe this late: the generator was stalled */

static llhttp_settings_t settings;

static void conn_connect(conn_t *c);
static void issue(conn_t *c);
static void stop_issuing(load_t *ld);

/* ---- writing ---- */

static void on_written(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    c->out_len[c->wcur] = 0;
    c->writing = 0;
    if (status < 0) {
        c->ld->res->io_errors++;
        bench_load__close(c, BENCH_CLOSE_RECONNECT);
        return;
    }
    unsigned next = c->wcur ^ 1u;
    if (c->out_len[next] > 0 && c->open) {
        c->wcur = next;
        uv_buf_t b = uv_buf_init(c->out[next], (unsigned)c->out_len[next]);
        c->writing = 1;
        uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    }
}

/* Sends bytes: straight to the socket when nothing is queued, else behind the queue. */
static int sock_send(conn_t *c, const char *req, size_t len)
{
    if (!c->writing) {
        uv_buf_t b = uv_buf_init((char *)req, (unsigned)len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n == (int)len)
            return 0;
        if (n < 0 && n != UV_EAGAIN)
            return -1;
        size_t done = n > 0 ? (size_t)n : 0;
        memcpy(c->out[c->wcur], req + done, len - done);
        c->out_len[c->wcur] = len - done;
        b = uv_buf_init(c->out[c->wcur], (unsigned)(len - done));
        c->wreq.data = c;
        c->writing = 1;
        return uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) ? -1 : 0;
    }
    unsigned q = c->wcur ^ 1u;
    if (c->out_len[q] + len > BENCH_OUT_MAX)
        return -1;
    memcpy(c->out[q] + c->out_len[q], req, len);
    c->out_len[q] += len;
    return 0;
}

/* TLS: what OpenSSL wrote goes to the socket. */
static int tls_flush(conn_t *c)
{
    char buf[4096];
    int n;
    while ((n = BIO_read(c->wbio, buf, sizeof(buf))) > 0)
        if (sock_send(c, buf, (size_t)n) != 0)
            return -1;
    return 0;
}

/* Sends one request, encrypted first with TLS. */
static int conn_send(conn_t *c, const char *req, size_t len)
{
    if (c->ssl == NULL)
        return sock_send(c, req, len);
    if (SSL_write(c->ssl, req, (int)len) != (int)len)
        return -1;
    return tls_flush(c);
}

void bench_load__send(conn_t *c, const char *req, size_t len)
{
    if (len == 0 || c->inflight >= BENCH_PIPE_MAX) {
        c->ld->res->proto_errors++;
        bench_load__close(c, BENCH_CLOSE_FOR_GOOD);
        return;
    }
    c->sent_ns[(c->ring_head + c->inflight) % BENCH_PIPE_MAX] = uv_hrtime();
    c->inflight++;
    if (conn_send(c, req, len) != 0) {
        c->ld->res->io_errors++;
        bench_load__close(c, BENCH_CLOSE_RECONNECT);
    }
}

/* ---- the requests of each mode ---- */

static int budget_left(load_t *ld)
{
    if (ld->stopping)
        return 0;
    if (ld->o->count && ld->issued >= ld->o->count)
        return 0;
    ld->issued++;
    return 1;
}

/* More semaphores than connections (pairs, -k K > -c N): connection i takes semaphores i,
 * i + N, i + 2N... in turn, so that all K are in use. */
static void send_acquire_turn(conn_t *c)
{
    const bench_opts_t *o = c->ld->o;
    unsigned i = (unsigned)(c - c->ld->conns);
    unsigned mine = (o->sems - i + o->conns - 1) / o->conns; /* its share of the K */
    char req[BENCH_NAME_MAX + 1024];
    bench_load__send(c, req,
                     bench_acquire_request(o, i + o->conns * (c->turn++ % mine), req, sizeof(req)));
}

static void send_acquire(conn_t *c)
{
    load_t *ld = c->ld;
    c->step = STEP_ACQUIRE;
    c->pair_start_ns = uv_hrtime();
    if (ld->o->sems > ld->o->conns && !ld->o->all)
        send_acquire_turn(c);
    else if (c->acq != NULL)
        bench_load__send(c, c->acq, c->acq_len);
    else
        bench_load__send(c, ld->acq_req, ld->acq_len);
}

static void send_release(conn_t *c)
{
    char path[BENCH_ID_MAX + 16], req[512];
    snprintf(path, sizeof(path), "/v1/leases/%s", c->lease);
    c->step = STEP_RELEASE;
    bench_load__send(c, req,
                     bench_format_request(req, sizeof(req), c->ld->o, "DELETE", path, NULL));
}

static void send_create(conn_t *c)
{
    load_t *ld = c->ld;
    char name[BENCH_NAME_MAX + 24], path[BENCH_NAME_MAX + 64], body[64], req[1024];
    bench_sem_name(ld->o, ld->next_index++, name, sizeof(name));
    snprintf(path, sizeof(path), "/v1/semaphores/%s", name);
    snprintf(body, sizeof(body), "{\"capacity\":%" PRIu64 "}", ld->o->capacity);
    c->step = STEP_CREATE;
    bench_load__send(c, req, bench_format_request(req, sizeof(req), ld->o, "PUT", path, body));
}

/* ---- the generator's own stalls ---- */

/* The probe: how late it runs is how long the loop did not run. A lateness over STALL_NS is
 * remembered as a stall, from its due time to now. */
static void on_probe(uv_timer_t *t)
{
    load_t *ld = t->data;
    uint64_t now = uv_hrtime();
    uint64_t late = now > ld->probe_due_ns ? now - ld->probe_due_ns : 0;
    if (late > ld->ivl_lag_max_ns)
        ld->ivl_lag_max_ns = late;
    if (late > ld->res->lag_max_ns)
        ld->res->lag_max_ns = late;
    if (late > STALL_NS) {
        uint64_t *s = ld->stall[ld->stall_n++ % BENCH_STALLS];
        s[0] = ld->probe_due_ns;
        s[1] = now;
    }
    ld->probe_due_ns = now + PROBE_MS * 1000000ull;
    uv_timer_start(&ld->probe, on_probe, PROBE_MS, 0);
}

static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    uint64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* How much of [from, to) the generator spent stalled: the stalls remembered, and the one
 * under way when the probe is late now (its timer has not run yet in this loop turn). */
static uint64_t stalled_ns(const load_t *ld, uint64_t from, uint64_t to)
{
    uint64_t sum = 0;
    unsigned n = ld->stall_n < BENCH_STALLS ? ld->stall_n : BENCH_STALLS;
    for (unsigned i = 0; i < n; i++)
        sum += overlap(from, to, ld->stall[i][0], ld->stall[i][1]);
    if (ld->probe_due_ns && to > ld->probe_due_ns + STALL_NS)
        sum += overlap(from, to, ld->probe_due_ns, to);
    return sum < to - from ? sum : to - from;
}

/* The starts owed in [from, to) are given up: counted as missed, and those that fell while
 * the generator itself was stalled counted apart. */
static void pace_miss(load_t *ld, uint64_t from, uint64_t to)
{
    uint64_t n = (to - from) / ld->period_ns;
    uint64_t stalled = stalled_ns(ld, from, to) / ld->period_ns;
    ld->res->missed += n;
    ld->res->missed_stalled += stalled < n ? stalled : n;
}

/* ---- a fixed rate (--rate) ---- */

static void on_pace(uv_timer_t *t);

/* Waits for the next start: c joins the end of the idle queue (so every connection takes its
 * turn, and none sits idle long enough for the server to close it), and the pace timer runs
 * at the start. */
static void pace_wait(conn_t *c, uint64_t now)
{
    load_t *ld = c->ld;
    c->idle = 1;
    c->next_idle = NULL;
    if (ld->idle == NULL)
        ld->idle = c;
    else
        ld->idle_tail->next_idle = c;
    ld->idle_tail = c;
    uint64_t ms = (ld->next_ns - now + 999999) / 1000000;
    if (!uv_is_active((uv_handle_t *)&ld->pace) || uv_timer_get_due_in(&ld->pace) > ms)
        uv_timer_start(&ld->pace, on_pace, ms, 0);
}

/* 1 when c may start an operation now; else it waits for its turn (0). A start later than
 * LAG_MAX_NS, because no connection was free (or the generator did not run), is given up
 * and counted as missed. */
static int pace_take(conn_t *c)
{
    load_t *ld = c->ld;
    if (ld->period_ns == 0)
        return 1;
    if (c->idle)
        return 0;
    uint64_t now = uv_hrtime();
    if (now < ld->next_ns) {
        pace_wait(c, now);
        return 0;
    }
    if (now - ld->next_ns > LAG_MAX_NS) {
        pace_miss(ld, ld->next_ns, now);
        ld->next_ns = now;
    }
    ld->next_ns += ld->period_ns;
    return 1;
}

/* The next start is due: the connections waiting for it start, as many as are due. */
static void on_pace(uv_timer_t *t)
{
    load_t *ld = t->data;
    uint64_t now = uv_hrtime();
    while (ld->idle != NULL && ld->next_ns <= now) {
        conn_t *c = ld->idle;
        ld->idle = c->next_idle;
        c->idle = 0;
        if (c->open)
            issue(c);
    }
    if (ld->idle != NULL && !ld->stopping)
        uv_timer_start(&ld->pace, on_pace, (ld->next_ns - now + 999999) / 1000000, 0);
}

/* Starts the next operation(s) on an idle connection, up to the pipeline depth. */
static void issue(conn_t *c)
{
    load_t *ld = c->ld;
    unsigned depth = ld->o->mode == BENCH_PAIRS || ld->o->mode == BENCH_MIX ? 1 : ld->o->pipeline;
    while (c->open && c->inflight < depth && pace_take(c) && budget_left(ld)) {
        if (ld->o->mode == BENCH_MIX)
            bench_mix_start(c);
        else if (ld->o->mode == BENCH_PAIRS)
            send_acquire(c);
        else if (ld->o->mode == BENCH_CREATE)
            send_create(c);
        else {
            c->step = STEP_GET;
            bench_load__send(c, ld->get_req, ld->get_len);
        }
    }
    int done = ld->stopping || (ld->o->count && ld->issued >= ld->o->count);
    if (c->open && c->inflight == 0 && done)
        bench_load__close(c, BENCH_CLOSE_FOR_GOOD);
}

/* ---- answers ---- */

void bench_load__op_done(load_t *ld, uint64_t now, uint64_t started)
{
    ld->res->ops++;
    ld->last_ns = now;
    bench_hist_record(&ld->res->op, now - started);
}

uint64_t bench_load__answered(conn_t *c, int status, uint64_t now)
{
    load_t *ld = c->ld;
    uint64_t sent = c->sent_ns[c->ring_head];
    c->ring_head = (c->ring_head + 1) % BENCH_PIPE_MAX;
    c->inflight--;
    ld->res->requests++;
    ld->res->status[status >= 0 && status < 600 ? status : 0]++;
    if (!c->untimed) {
        bench_hist_record(&ld->res->req, now - sent);
        bench_hist_record(&ld->ivl, now - sent);
    }
    return sent;
}

/* An acquire answered 404: the semaphore is missing (--no-create, or deleted meanwhile), and
 * every further request would be one more 404. Stop the run and say so. */
static void missing_semaphore(conn_t *c)
{
    load_t *ld = c->ld;
    char name[BENCH_NAME_MAX + 24];
    if (ld->res->fatal == NULL) {
        bench_sem_name(ld->o, c->sem, name, sizeof(name));
        snprintf(ld->res->fatal_text, sizeof(ld->res->fatal_text), "no such semaphore '%s'%s", name,
                 ld->o->no_setup ? ": --no-create uses existing semaphores (make it first with "
                                   "`sema create NAME CAPACITY`, or leave --no-create out)"
                                 : " (deleted during the run?)");
        ld->res->fatal = ld->res->fatal_text;
    }
    stop_issuing(ld);
}

/* One complete answer to the oldest request in flight on c. */
static void on_answer(conn_t *c, int status, uint64_t now)
{
    load_t *ld = c->ld;
    bench_result_t *res = ld->res;
    uint64_t sent = bench_load__answered(c, status, now);
    c->body[c->body_len < BENCH_BODY_MAX ? c->body_len : BENCH_BODY_MAX - 1] = '\0';
    if (c->step == STEP_MIX || c->step == STEP_STREAM) {
        if (bench_mix_answer(c, status, now))
            return;
    } else if (c->step == STEP_ACQUIRE && status == 404) {
        missing_semaphore(c);
    } else if (c->step == STEP_ACQUIRE && status == 200) {
        if (bench_json_str(c->body, "lease", c->lease, sizeof(c->lease)) > 0) {
            send_release(c);
            return;
        }
        res->proto_errors++;
    } else if (c->step == STEP_RELEASE && (status == 204 || status == 200)) {
        bench_load__op_done(ld, now, c->pair_start_ns);
    } else if (c->step == STEP_GET && status >= 200 && status < 300) {
        bench_load__op_done(ld, now, sent);
    } else if (c->step == STEP_CREATE && (status == 201 || status == 200)) {
        bench_load__op_done(ld, now, sent);
    }
    issue(c);
}

static int on_message_begin(llhttp_t *p)
{
    ((conn_t *)p->data)->body_len = 0;
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    conn_t *c = p->data;
    size_t room = BENCH_BODY_MAX - 1 - c->body_len;
    if (n > room)
        n = room;
    memcpy(c->body + c->body_len, at, n);
    c->body_len += n;
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    return HPE_PAUSED; /* handled in on_read, one answer at a time */
}

/* An event stream's head: it is answered (its body goes on until the stream is closed). */
static int on_headers_complete(llhttp_t *p)
{
    conn_t *c = p->data;
    if (c->step == STEP_STREAM && p->status_code == 200 && c->inflight == 1)
        bench_mix_stream_open(c, uv_hrtime());
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char rbuf[65536]; /* one loop, one read at a time: a shared buffer */
    *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

/* Answers' bytes (decrypted, with TLS). */
static void parse(conn_t *c, const char *at, size_t left)
{
    while (left > 0 && c->open) {
        llhttp_errno_t err = llhttp_execute(&c->parser, at, left);
        if (err == HPE_OK)
            return;
        if (err != HPE_PAUSED || c->inflight == 0) {
            c->ld->res->io_errors++;
            bench_load__close(c, BENCH_CLOSE_RECONNECT);
            return;
        }
        const char *pos = llhttp_get_error_pos(&c->parser);
        left -= (size_t)(pos - at);
        at = pos;
        int keep = llhttp_should_keep_alive(&c->parser);
        llhttp_resume(&c->parser);
        on_answer(c, c->parser.status_code, uv_hrtime());
        if (!keep && c->open)
            bench_load__close(c, BENCH_CLOSE_RECONNECT);
    }
}

static void conn_ready(conn_t *c);

/* TLS: hand the ciphertext to OpenSSL; finish the handshake, then parse what it decrypts. */
static void read_tls(conn_t *c, const char *data, size_t len)
{
    static char plain[16384];
    BIO_write(c->rbio, data, (int)len);
    if (!c->tls_ready) {
        int r = SSL_do_handshake(c->ssl);
        if (tls_flush(c) != 0 || (r != 1 && SSL_get_error(c->ssl, r) != SSL_ERROR_WANT_READ)) {
            char why[200];
            ERR_error_string_n(ERR_get_error(), why, sizeof(why));
            if (!c->ld->started)
                fprintf(stderr, "sema bench: TLS handshake failed: %s\n", why);
            c->ld->res->connect_errors++;
            bench_load__close(c, c->ld->started ? BENCH_CLOSE_RECONNECT : BENCH_CLOSE_FOR_GOOD);
            if (!c->ld->started) {
                c->ld->res->fatal = "TLS handshake failed";
                stop_issuing(c->ld);
            }
            return;
        }
        if (r != 1)
            return;
        c->tls_ready = 1;
        conn_ready(c);
    }
    int n;
    while (c->open && (n = SSL_read(c->ssl, plain, sizeof(plain))) > 0)
        parse(c, plain, (size_t)n);
    if (c->open && tls_flush(c) != 0)
        bench_load__close(c, BENCH_CLOSE_RECONNECT);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    if (nread < 0) {
        /* A keep-alive connection the server closed while nothing was asked on it (its idle
         * timeout) is connected again, as clients do; anything else is an error. */
        int idle_close = c->inflight == 0 && c->step != STEP_STREAM;
        if ((!c->ld->stopping || c->inflight) && !idle_close)
            c->ld->res->io_errors++;
        bench_load__close(c, idle_close ? BENCH_CLOSE_PLANNED : BENCH_CLOSE_RECONNECT);
        return;
    }
    if (c->ssl != NULL)
        read_tls(c, buf->base, (size_t)nread);
    else
        parse(c, buf->base, (size_t)nread);
}

/* ---- connections ---- */

static void all_closed(load_t *ld);

static void on_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    load_t *ld = c->ld;
    if (c->reconnect == BENCH_CLOSE_PLANNED && !ld->stopping &&
        !(ld->o->count && ld->issued >= ld->o->count)) {
        conn_connect(c);
        return;
    }
    if (c->reconnect == BENCH_CLOSE_RECONNECT && !ld->stopping &&
        ld->reconnects++ < RECONNECT_MAX) {
        conn_connect(c);
        return;
    }
    if (--ld->live == 0)
        all_closed(ld);
}

void bench_load__close(conn_t *c, int how)
{
    if (!c->open && uv_is_closing((uv_handle_t *)&c->tcp))
        return;
    c->open = 0;
    c->reconnect = how;
    /* An op cut short by a closed connection is lost; give its budget back. */
    if (c->inflight && c->ld->o->count && c->ld->issued > 0)
        c->ld->issued--;
    c->inflight = 0;
    c->writing = 0;
    c->out_len[0] = c->out_len[1] = 0;
    SSL_free(c->ssl);
    c->ssl = NULL;
    c->tls_ready = 0;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void begin(load_t *ld);
static void on_connected(uv_connect_t *req, int status)
{
    conn_t *c = req->data;
    load_t *ld = c->ld;
    if (status == UV_ECANCELED)
        return; /* closed while connecting: on_closed does the rest */
    if (status < 0) {
        ld->res->connect_errors++;
        if (!ld->started) {
            ld->res->fatal = "cannot connect to the server";
            stop_issuing(ld);
        }
        bench_load__close(c, BENCH_CLOSE_RECONNECT);
        return;
    }
    c->open = 1;
    if (ld->stopping) {
        bench_load__close(c, BENCH_CLOSE_FOR_GOOD);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_RESPONSE, &settings);
    c->parser.data = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (ld->tls == NULL) {
        conn_ready(c);
        return;
    }
    /* TLS: the client hello now; conn_ready once the handshake is over. */
    if ((c->ssl = SSL_new(ld->tls)) == NULL || (c->rbio = BIO_new(BIO_s_mem())) == NULL ||
        (c->wbio = BIO_new(BIO_s_mem())) == NULL) {
        ld->res->fatal = "out of memory";
        stop_issuing(ld);
        bench_load__close(c, BENCH_CLOSE_FOR_GOOD);
        return;
    }
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_connect_state(c->ssl);
    SSL_set_tlsext_host_name(c->ssl, ld->o->tls_name);
    SSL_set1_host(c->ssl, ld->o->tls_name);
    SSL_do_handshake(c->ssl);
    if (tls_flush(c) != 0)
        bench_load__close(c, BENCH_CLOSE_RECONNECT);
}

/* Connected (and with TLS, the handshake over): start, or go on issuing. */
static void conn_ready(conn_t *c)
{
    load_t *ld = c->ld;
    if (ld->started)
        issue(c);
    else if (++ld->connected == ld->o->conns)
        begin(ld);
}

static void conn_connect(conn_t *c)
{
    uv_tcp_init(&c->ld->loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    c->inflight = 0;
    c->ring_head = 0;
    c->wcur = 0;
    int rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&c->ld->o->addr[c->server],
                            on_connected);
    if (rc < 0) {
        c->ld->res->connect_errors++;
        if (!c->ld->started)
            c->ld->res->fatal = "cannot connect to the server (raise ulimit -n?)";
        c->ld->stopping = 1;
        c->open = 0;
        c->reconnect = BENCH_CLOSE_FOR_GOOD;
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    }
}

/* ---- timers and the run ---- */

static void on_drain(uv_timer_t *t)
{
    all_closed(t->data);
}

static void stop_issuing(load_t *ld)
{
    if (ld->stopping && ld->stop_ns)
        return;
    ld->stopping = 1;
    ld->stop_ns = uv_hrtime();
    if (ld->period_ns && ld->started && ld->stop_ns > ld->next_ns) /* starts still owed */
        pace_miss(ld, ld->next_ns, ld->stop_ns);
    ld->ops_at_stop = ld->res->ops;
    ld->requests_at_stop = ld->res->requests;
    uv_timer_start(&ld->drain, on_drain, DRAIN_MS, 0);
    for (unsigned i = 0; i < ld->o->conns; i++)
        if (ld->conns[i].open && ld->conns[i].inflight == 0)
            bench_load__close(&ld->conns[i], BENCH_CLOSE_FOR_GOOD);
}

static void on_deadline(uv_timer_t *t)
{
    stop_issuing(t->data);
}

static void on_sigint(uv_signal_t *s, int signum)
{
    stop_issuing(s->data);
}

/* Failed requests so far: in the mix every answer has its expected statuses (a long-poll's
 * 409 is one), elsewhere every answer but a 2xx is a failure. */
static uint64_t errors_now(const load_t *ld)
{
    const bench_result_t *r = ld->res;
    uint64_t n = r->io_errors + r->connect_errors + r->proto_errors;
    for (unsigned s = 0; s < 600 && ld->o->mode != BENCH_MIX; s++)
        n += (s < 200 || s >= 300) ? r->status[s] : 0;
    return n;
}

static void on_progress(uv_timer_t *t)
{
    load_t *ld = t->data;
    double secs = (double)(uv_hrtime() - ld->start_ns) / 1e9;
    uint64_t ops = ld->res->ops;
    uint64_t errs = errors_now(ld);
    fprintf(stderr, "\r[%6.1fs] %" PRIu64 " ops  %8.0f/s  errors %" PRIu64 "   ", secs, ops,
            (double)(ops - ld->last_progress_ops), errs);
    ld->last_progress_ops = ops;
}

/* --interval: one JSON line on stdout for the interval that ends, then the next begins. */
static void on_tick(uv_timer_t *t)
{
    load_t *ld = t->data;
    bench_result_t *r = ld->res;
    uint64_t now = uv_hrtime(), errs = errors_now(ld);
    double secs = (double)(now - ld->ivl_start_ns) / 1e9;
    const bench_hist_t *h = &ld->ivl;
    printf("{\"interval\":%" PRIu64 ",\"t_s\":%.3f,\"seconds\":%.3f,\"ops\":%" PRIu64
           ",\"ops_per_s\":%.1f,\"requests\":%" PRIu64 ",\"p50_us\":%.1f,\"p90_us\":%.1f,"
           "\"p99_us\":%.1f,\"max_us\":%.1f,\"errors\":%" PRIu64 ",\"missed\":%" PRIu64
           ",\"missed_stalled\":%" PRIu64 ",\"lag_max_us\":%.1f}\n",
           ++ld->ivl_n, (double)(now - ld->start_ns) / 1e9, secs, r->ops - ld->ivl_ops,
           secs > 0 ? (double)(r->ops - ld->ivl_ops) / secs : 0.0, r->requests - ld->ivl_requests,
           (double)bench_hist_percentile(h, 50) / 1e3, (double)bench_hist_percentile(h, 90) / 1e3,
           (double)bench_hist_percentile(h, 99) / 1e3, (double)h->max_ns / 1e3,
           errs - ld->ivl_errors, r->missed - ld->ivl_missed,
           r->missed_stalled - ld->ivl_missed_stalled, (double)ld->ivl_lag_max_ns / 1e3);
    fflush(stdout);
    bench_hist_init(&ld->ivl);
    ld->ivl_ops = r->ops;
    ld->ivl_requests = r->requests;
    ld->ivl_errors = errs;
    ld->ivl_missed = r->missed;
    ld->ivl_missed_stalled = r->missed_stalled;
    ld->ivl_lag_max_ns = 0;
    ld->ivl_start_ns = now;
}

static void begin(load_t *ld)
{
    ld->started = 1;
    ld->start_ns = uv_hrtime();
    if (ld->o->count == 0)
        uv_timer_start(&ld->deadline, on_deadline, (uint64_t)(ld->o->duration_s * 1000.0), 0);
    if (ld->o->progress)
        uv_timer_start(&ld->progress, on_progress, 1000, 1000);
    ld->next_ns = ld->ivl_start_ns = ld->start_ns;
    if (ld->o->interval_s > 0) {
        uint64_t ms = (uint64_t)(ld->o->interval_s * 1000.0);
        uv_timer_start(&ld->tick, on_tick, ms, ms);
    }
    if (ld->period_ns || ld->o->interval_s > 0) {
        ld->probe_due_ns = ld->start_ns + PROBE_MS * 1000000ull;
        uv_timer_start(&ld->probe, on_probe, PROBE_MS, 0);
    }
    for (unsigned i = 0; i < ld->o->conns; i++)
        issue(&ld->conns[i]);
}

/* Every connection is closed (or the drain time ran out): close the rest and let the loop end. */
static void all_closed(load_t *ld)
{
    if (ld->finished)
        return;
    ld->finished = 1;
    if (!ld->stop_ns) {
        ld->stop_ns = uv_hrtime();
        ld->ops_at_stop = ld->res->ops;
    }
    ld->stopping = 1;
    for (unsigned i = 0; i < ld->o->conns; i++)
        if (!uv_is_closing((uv_handle_t *)&ld->conns[i].tcp))
            bench_load__close(&ld->conns[i], BENCH_CLOSE_FOR_GOOD);
    uv_handle_t *timers[] = {(uv_handle_t *)&ld->deadline, (uv_handle_t *)&ld->progress,
                             (uv_handle_t *)&ld->drain,    (uv_handle_t *)&ld->pace,
                             (uv_handle_t *)&ld->tick,     (uv_handle_t *)&ld->probe,
                             (uv_handle_t *)&ld->sigint};
    for (size_t i = 0; i < sizeof(timers) / sizeof(timers[0]); i++)
        uv_close(timers[i], NULL);
    if (ld->o->mode == BENCH_MIX)
        bench_mix_close(ld);
}

/* The client context: TLS 1.2+, the server's certificate verified against --cacert (else
 * the system's CAs) and its name. */
static int tls_init(load_t *ld)
{
    const bench_opts_t *o = ld->o;
    if ((ld->tls = SSL_CTX_new(TLS_client_method())) == NULL)
        return -1;
    SSL_CTX_set_min_proto_version(ld->tls, TLS1_2_VERSION);
    SSL_CTX_set_verify(ld->tls, SSL_VERIFY_PEER, NULL);
    int ok = o->cacert != NULL ? SSL_CTX_load_verify_locations(ld->tls, o->cacert, NULL)
                               : SSL_CTX_set_default_verify_paths(ld->tls);
    if (ok != 1) {
        fprintf(stderr, "sema bench: cannot read the CA file %s\n", o->cacert);
        SSL_CTX_free(ld->tls);
        ld->tls = NULL;
        return -1;
    }
    return 0;
}

/* Pairs whose connections differ (several semaphores, --all, tenants): each connection's
 * acquire, formatted once. 0, or -1 when out of memory or one does not fit. */
static int conn_requests(load_t *ld)
{
    const bench_opts_t *o = ld->o;
    if (o->mode != BENCH_PAIRS || (o->sems <= 1 && !o->all && !o->tenants))
        return 0;
    char req[BENCH_ALL_MAX * (BENCH_NAME_MAX + 64) + 1024];
    for (unsigned i = 0; i < o->conns; i++) {
        size_t n = bench_acquire_request(o, i, req, sizeof(req));
        conn_t *c = &ld->conns[i];
        if (n == 0 || (c->acq = malloc(n)) == NULL)
            return -1;
        memcpy(c->acq, req, n);
        c->acq_len = n;
    }
    return 0;
}

static void conns_free(load_t *ld)
{
    for (unsigned i = 0; ld->conns != NULL && i < ld->o->conns; i++)
        free(ld->conns[i].acq);
    free(ld->conns);
}

static int load_init(load_t *ld, const bench_opts_t *o, bench_result_t *res)
{
    memset(ld, 0, sizeof(*ld));
    ld->o = o;
    ld->res = res;
    ld->conns = calloc(o->conns, sizeof(conn_t));
    if (!ld->conns || conn_requests(ld) != 0 || uv_loop_init(&ld->loop) != 0) {
        conns_free(ld);
        return -1;
    }
    if (o->tls && tls_init(ld) != 0) {
        uv_loop_close(&ld->loop);
        conns_free(ld);
        return -1;
    }
    llhttp_settings_init(&settings);
    settings.on_message_begin = on_message_begin;
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    settings.on_headers_complete = on_headers_complete;
    ld->acq_len = bench_acquire_request(o, 0, ld->acq_req, sizeof(ld->acq_req));
    ld->get_len = bench_format_request(ld->get_req, sizeof(ld->get_req), o, "GET", o->path, NULL);
    uv_timer_t *timers[] = {&ld->deadline, &ld->progress, &ld->drain,
                            &ld->pace,     &ld->tick,     &ld->probe};
    for (size_t i = 0; i < sizeof(timers) / sizeof(timers[0]); i++) {
        uv_timer_init(&ld->loop, timers[i]);
        timers[i]->data = ld;
    }
    bench_hist_init(&ld->ivl);
    if (o->rate > 0)
        ld->period_ns = (uint64_t)(1e9 / o->rate);
    if (o->mode == BENCH_MIX)
        bench_mix_init(ld);
    uv_signal_init(&ld->loop, &ld->sigint);
    ld->sigint.data = ld;
    uv_signal_start_oneshot(&ld->sigint, on_sigint, SIGINT);
    return 0;
}

int bench_load_run(const bench_opts_t *o, bench_result_t *res)
{
    load_t *ld = malloc(sizeof(*ld));
    if (!ld || load_init(ld, o, res) != 0) {
        free(ld);
        res->fatal = "out of memory";
        return -1;
    }
    uint64_t rss0 = o->server_pid ? bench_rss_kib(o->server_pid) : 0;
    ld->live = o->conns;
    for (unsigned i = 0; i < o->conns; i++) {
        ld->conns[i].ld = ld;
        ld->conns[i].server = i % (o->servers ? o->servers : 1);
        ld->conns[i].sem = i % (o->sems ? o->sems : 1);
        conn_connect(&ld->conns[i]);
    }
    uv_run(&ld->loop, UV_RUN_DEFAULT);
    if (o->progress)
        fputc('\n', stderr);
    uint64_t end = o->count ? (ld->last_ns ? ld->last_ns : ld->stop_ns) : ld->stop_ns;
    res->elapsed_s = ld->started ? (double)(end - ld->start_ns) / 1e9 : 0.0;
    if (o->count == 0) {
        res->ops = ld->ops_at_stop;
        res->requests = ld->requests_at_stop;
    }
    if (o->server_pid) {
        res->rss_before_kib = rss0;
        res->rss_after_kib = bench_rss_kib(o->server_pid);
    }
    uv_loop_close(&ld->loop);
    SSL_CTX_free(ld->tls);
    conns_free(ld);
    free(ld);
    return res->fatal ? -1 : 0;
}
