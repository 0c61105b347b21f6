/* SPDX-License-Identifier: MIT */
/* bench.h - the load generator's interface (the library behind `sema bench`): options,
 * results, the libuv load engine and the blocking helpers of the latency and memory modes. */
#ifndef SEMA_LOADGEN_BENCH_H
#define SEMA_LOADGEN_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "loadgen/bench_hist.h"

typedef enum {
    BENCH_PAIRS,   /* acquire then release on the same keep-alive connection */
    BENCH_GET,     /* a plain GET of --path (ceiling and wrk comparisons) */
    BENCH_CREATE,  /* PUT /v1/semaphores/<name>-<i>: many idle semaphores */
    BENCH_HANDOFF, /* release -> parked waiter hand-off latency */
    BENCH_PARK,    /* N connections each park an acquire on a full semaphore */
    BENCH_MIX,     /* every kind of state at once (bench_mix.c), for soaks */
    BENCH_MODE_COUNT
} bench_mode_t;

#define BENCH_PIPE_MAX 64    /* --pipeline cap */
#define BENCH_CONN_MAX 60000 /* --connections cap */
#define BENCH_NAME_MAX 200   /* semaphore name prefix cap */
#define BENCH_SERVERS_MAX 8  /* -s given more than once: instances sharing one state */
#define BENCH_ALL_MAX 16     /* --all: semaphores in one request (semad's own cap) */
#define BENCH_TENANTS_MAX 1000
#define BENCH_MIX_KINDS 9 /* the mix's kinds of operation (bench_mix.c) */

/* The names of the mix's kinds of operation, in the order of bench_result_t.mix_ops. */
extern const char *const bench_mix_kind_names[BENCH_MIX_KINDS];

typedef struct {
    bench_mode_t mode;
    struct sockaddr_storage addr[BENCH_SERVERS_MAX]; /* the servers, resolved once */
    socklen_t addr_len[BENCH_SERVERS_MAX];
    unsigned servers;          /* how many: connection i goes to server i % servers */
    char host[272];            /* Host header: host[:port] */
    char auth[256];            /* "Authorization: Bearer $SEMA_TOKEN\r\n", or "" */
    char url[300];             /* for the report */
    unsigned conns;            /* concurrent connections */
    double duration_s;         /* used when count == 0 */
    uint64_t count;            /* pairs / requests / rounds to run; 0 = use duration */
    uint64_t weight;           /* acquire weight */
    uint64_t capacity;         /* capacity of the semaphores created; 0 = automatic */
    unsigned sems;             /* spread over this many semaphores */
    bool all;                  /* pairs: each acquire takes every one of the sems at once */
    unsigned tenants;          /* pairs: connection i names tenant t<i % tenants>; 0 = none */
    uint64_t tenant_max;       /* limits of the semaphores created (0 = none) */
    uint64_t rate_per_s;       /* (0 = none) */
    uint64_t rate_burst;       /* (0 = semad's default) */
    char name[BENCH_NAME_MAX]; /* semaphore name (prefix when sems > 1) */
    char path[BENCH_NAME_MAX]; /* GET mode's path */
    int64_t ttl_ms;            /* lease ttl sent with acquire */
    unsigned pipeline;         /* requests in flight per connection (get/create) */
    bool progress;             /* progress line on stderr */
    bool json;                 /* one JSON line instead of the text report */
    bool no_setup;             /* do not PUT the semaphores first */
    pid_t server_pid;          /* for RSS figures (park/create); 0 = none */
    bool tls;                  /* https:// */
    char tls_name[256];        /* the server's name, checked in its certificate */
    const char *cacert;        /* --cacert / $SEMA_CACERT (NULL: the system's CAs) */
    double rate;               /* --rate: operations started per second; 0: as fast as answered */
    double interval_s;         /* --interval: a JSON line per interval on stdout; 0: none */
} bench_opts_t;

typedef struct {
    uint64_t ops;         /* pairs, requests, semaphores created, rounds, waiters parked */
    uint64_t requests;    /* HTTP requests answered */
    double elapsed_s;     /* measuring window */
    bench_hist_t req;     /* per-request latency */
    bench_hist_t op;      /* per-op latency (pair, hand-off) */
    uint64_t status[600]; /* answers by HTTP status */
    uint64_t io_errors;   /* resets, unexpected closes, parse errors */
    uint64_t connect_errors;
    uint64_t proto_errors;   /* answers we could not use (a 200 without a lease id) */
    uint64_t rss_before_kib; /* server RSS around the park/create phase (0 = not measured) */
    uint64_t rss_after_kib;
    double drain_s;          /* park: time for every parked waiter to be answered */
    uint64_t missed;         /* --rate: starts no connection was free for (the rate was not met) */
    uint64_t missed_stalled; /* of `missed`: those owed while sema bench itself did not run
                              * (its own timer late: the machine, not the server) */
    uint64_t lag_max_ns;     /* --rate, --interval: the most sema bench's own timer was late */
    uint64_t mix_ops[BENCH_MIX_KINDS]; /* mix: operations done, by kind */
    const char *fatal; /* set when the run could not be done; static text, or fatal_text */
    char fatal_text[BENCH_NAME_MAX + 192]; /* a fatal message naming something */
} bench_result_t;

/* Runs a throughput mode (pairs, get, create) on one libuv loop with opts->conns keep-alive
 * connections. Fills `res`; returns 0, or -1 with res->fatal set. Blocks for the run. */
int bench_load_run(const bench_opts_t *opts, bench_result_t *res);

/* Runs the hand-off latency mode with blocking sockets. Same contract as bench_load_run. */
int bench_handoff_run(const bench_opts_t *opts, bench_result_t *res);

/* Runs the parked-waiters memory mode with blocking sockets. Same contract. */
int bench_park_run(const bench_opts_t *opts, bench_result_t *res);

/* Blocking HTTP helpers (bench_sync.c). A connected socket or a negative errno: to the
 * first server, or to server i % servers. */
int bench_sync_connect(const bench_opts_t *opts);
int bench_sync_connect_to(const bench_opts_t *opts, unsigned i);

/* Sends one request (`body` may be NULL) and reads its answer within timeout_ms. Writes the
 * status to *status and up to cap-1 bytes of the body (NUL-terminated) into `out`.
 * Returns 0 or -1 on an I/O error, timeout or unparsable answer. */
int bench_sync_request(int fd, const bench_opts_t *opts, const char *method, const char *path,
                       const char *body, int *status, char *out, size_t cap, int timeout_ms);

/* Reads one answer on `fd` (same contract as bench_sync_request, without sending). */
int bench_sync_read(int fd, int *status, char *out, size_t cap, int timeout_ms);

/* Formats a request into buf; returns its length, or 0 when it does not fit. */
size_t bench_format_request(char *buf, size_t cap, const bench_opts_t *opts, const char *method,
                            const char *path, const char *body);

/* The same with more header lines (`headers`: each ending in "\r\n"; "" for none). */
size_t bench_format_request_h(char *buf, size_t cap, const bench_opts_t *opts, const char *method,
                              const char *path, const char *headers, const char *body);

/* Copies the string value of "key" in a JSON text into out (cap bytes, NUL-terminated).
 * Returns its length, or 0 when absent or too long. Enough for server-generated ids. */
size_t bench_json_str(const char *json, const char *key, char *out, size_t cap);

/* The integer value of "key" in a JSON text, or -1 when absent. */
int64_t bench_json_int(const char *json, const char *key);

/* Creates (PUT) the semaphore `name` with `capacity` and opts' limits (tenant_max, rate):
 * 1 when it was created, 0 when it existed with these, or -1 with a message on stderr. */
int bench_put_semaphore(int fd, const bench_opts_t *opts, const char *name, uint64_t capacity);

/* Deletes (DELETE) the semaphore `name`: 0 (also when it was gone), or -1. */
int bench_delete_semaphore(int fd, const bench_opts_t *opts, const char *name);

/* The semaphore name for index i: opts->name, or "<name>-<i>" when opts->sems > 1. */
void bench_sem_name(const bench_opts_t *opts, uint64_t i, char *out, size_t cap);

/* The acquire request of pairs mode's connection i (its semaphore i % sems, or all of them
 * with opts->all; its tenant i % tenants): its length, or 0 when it does not fit in cap. */
size_t bench_acquire_request(const bench_opts_t *opts, unsigned i, char *out, size_t cap);

/* VmRSS of `pid` in KiB, or 0 when unknown. */
uint64_t bench_rss_kib(pid_t pid);

/* Monotonic nanoseconds. */
uint64_t bench_now_ns(void);

#endif /* SEMA_LOADGEN_BENCH_H */
