/* SPDX-License-Identifier: MIT */
/* bench_load.h - the load engine's connections and run, shared by bench_load.c (connections,
 * requests and answers, the pace of a fixed rate, the reports per interval) and bench_mix.c
 * (the operations of the mix mode). Never installed. */
#ifndef SEMA_LOADGEN_BENCH_LOAD_H
#define SEMA_LOADGEN_BENCH_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "loadgen/bench.h"

#define BENCH_OUT_MAX 8192  /* queued request bytes per connection */
#define BENCH_BODY_MAX 1024 /* answer body bytes kept (enough for a lease or a ticket) */
#define BENCH_ID_MAX 128    /* lease and ticket id bytes */
#define BENCH_STALLS 64     /* the generator's own stalls remembered (a ring) */

typedef enum { STEP_ACQUIRE, STEP_RELEASE, STEP_GET, STEP_CREATE, STEP_MIX, STEP_STREAM } step_t;

/* How a connection is closed: for good, to connect again after an error, or on purpose (an
 * event stream's time is up, the server's idle timeout), which the reconnect budget does
 * not count. */
enum { BENCH_CLOSE_FOR_GOOD, BENCH_CLOSE_RECONNECT, BENCH_CLOSE_PLANNED };

typedef struct load load_t;

typedef struct conn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    llhttp_t parser;
    load_t *ld;
    unsigned sem; /* semaphore index (pairs) */
    char *acq;    /* pairs: this connection's acquire (NULL: ld's) */
    size_t acq_len;
    unsigned turn;                    /* pairs, more semaphores than connections: the next */
    unsigned server;                  /* which of the servers (-s) it connects to */
    step_t step;                      /* what the oldest request in flight is */
    unsigned inflight;                /* requests sent, not answered */
    uint64_t sent_ns[BENCH_PIPE_MAX]; /* send times, a ring of `inflight` entries */
    unsigned ring_head;
    uint64_t pair_start_ns;
    char lease[BENCH_ID_MAX];
    char body[BENCH_BODY_MAX];
    size_t body_len;
    char out[2][BENCH_OUT_MAX]; /* out[wcur] is being written, out[wcur^1] waits */
    size_t out_len[2];
    unsigned wcur;
    int writing;
    int open;      /* connected and not closing */
    int reconnect; /* BENCH_CLOSE_*: what to do once closed */
    SSL *ssl;      /* https://: the session (NULL: plain HTTP) */
    BIO *rbio;     /* ciphertext read, for OpenSSL (owned by ssl) */
    BIO *wbio;     /* ciphertext OpenSSL wrote, to send (owned by ssl) */
    int tls_ready; /* the handshake is over */
    /* a fixed rate (--rate) */
    struct conn *next_idle; /* in ld->idle while it waits for its next start */
    int idle;               /* in ld->idle */
    /* the mix mode (bench_mix.c) */
    unsigned kind;  /* the operation running */
    unsigned mstep; /* its step: requests answered so far */
    uint64_t mseq;  /* its sequence number (keys, names) */
    int untimed;    /* the request in flight is a long-poll: not a latency sample */
    char ticket[BENCH_ID_MAX];
    uv_timer_t hold; /* an event stream's time open */
} conn_t;

struct load {
    const bench_opts_t *o;
    bench_result_t *res;
    uv_loop_t loop;
    uv_timer_t deadline, progress, drain, pace, tick;
    uv_signal_t sigint;
    conn_t *conns;
    unsigned connected, live; /* connected once; handles not yet closed */
    uint64_t issued;          /* ops started (count mode budget) */
    uint64_t next_index;      /* create mode's next name */
    uint64_t start_ns, stop_ns, last_ns;
    uint64_t ops_at_stop, requests_at_stop, reconnects;
    uint64_t last_progress_ops;
    int started, stopping, finished;
    char acq_req[1024], get_req[1024]; /* pre-formatted constant requests */
    size_t acq_len, get_len;
    SSL_CTX *tls; /* https:// */
    /* a fixed rate */
    uint64_t period_ns; /* between two starts; 0: each connection starts its next op at once */
    uint64_t next_ns;   /* uv_hrtime() of the next start */
    /* the generator's own stalls: a timer every PROBE_MS; when it runs late, the loop did not
     * run (the machine gave it no core, or it was busy) from its due time to then */
    uv_timer_t probe;
    uint64_t probe_due_ns;           /* when it should run next */
    uint64_t stall[BENCH_STALLS][2]; /* [from, to) of the last stalls, a ring */
    unsigned stall_n;                /* stalls recorded (stall[stall_n % BENCH_STALLS]) */
    uint64_t ivl_lag_max_ns;         /* the interval's largest lateness */
    conn_t *idle, *idle_tail;        /* connections waiting for a start (a queue) */
    /* reports per interval */
    bench_hist_t ivl; /* latency samples of the interval */
    uint64_t ivl_n;   /* intervals reported */
    uint64_t ivl_ops, ivl_requests, ivl_errors, ivl_missed, ivl_start_ns; /* at its start */
    uint64_t ivl_missed_stalled;
    uint64_t mix_seq;    /* mix: operations started */
    unsigned complaints; /* mix: unexpected answers described on stderr */
};

/* Sends one request on c (its send time is the latency's start). A request that does not fit
 * counts as unusable and closes c for good. */
void bench_load__send(conn_t *c, const char *req, size_t len);

/* Closes c; `how` is BENCH_CLOSE_*. */
void bench_load__close(conn_t *c, int how);

/* The oldest request in flight on c is answered: counted, its latency recorded (unless
 * c->untimed). Returns its send time. */
uint64_t bench_load__answered(conn_t *c, int status, uint64_t now);

/* An operation finished: counted, its latency from `started` recorded. */
void bench_load__op_done(load_t *ld, uint64_t now, uint64_t started);

/* bench_mix.c */

/* Initialises every connection's hold timer on ld->loop. */
void bench_mix_init(load_t *ld);

/* Starts c's next operation: picks its kind and sends its first request. */
void bench_mix_start(conn_t *c);

/* The answer (status, c->body) to c's request: sends the operation's next request and
 * returns 1, or returns 0 when the operation is over (the caller issues the next). */
int bench_mix_answer(conn_t *c, int status, uint64_t now);

/* An event stream's head arrived with 200: it stays open for its time, then closes. */
void bench_mix_stream_open(conn_t *c, uint64_t now);

/* Closes every connection's hold timer (the run is over). */
void bench_mix_close(load_t *ld);

#endif /* SEMA_LOADGEN_BENCH_LOAD_H */
