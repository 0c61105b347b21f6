/* SPDX-License-Identifier: MIT */
/* bench_redis_peer.c - the Redis/Lua semaphore semad is measured against: holders in a sorted
 * set scored by expiry, one EVALSHA per acquire (which first reclaims expired holders by Redis
 * TIME) and one per release, driven by hiredis async clients on one libuv loop. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/bench_hist.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <uv.h>

/* KEYS[1] the holders' sorted set; ARGV capacity, ttl_ms, holder id. 1 granted, 0 full. */
static const char acquire_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
    "if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then\n"
    "  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";
/* KEYS[1] the holders' sorted set; ARGV holder id. 1 released, 0 not a holder. */
static const char release_lua[] = "return redis.call('ZREM', KEYS[1], ARGV[1])\n";

typedef struct {
    const char *host;
    int port;
    unsigned conns, sems;
    double duration_s;
    uint64_t count, capacity, ttl_ms;
    int json;
} opts_t;

typedef struct {
    redisAsyncContext *ac;
    unsigned id, sem;
    uint64_t seq; /* holder ids: c<id>:<seq> */
    char holder[48];
    char key[64];
    uint64_t sent_ns, pair_ns;
    int connected;
} conn_t;

static opts_t o = {"127.0.0.1", 6379, 50, 1, 10.0, 0, 0, 60000, 0};
static uv_loop_t *loop;
static uv_timer_t deadline;
static conn_t *conns;
static char sha_acq[48], sha_rel[48];
static bench_hist_t req_hist, pair_hist;
static uint64_t pairs, requests, pairs_at_stop, requests_at_stop, full_replies, errors, issued;
static uint64_t start_ns, stop_ns, last_ns;
static unsigned connected, live;
static int started, stopping;

static void send_acquire(conn_t *c);

static void stop_all(void)
{
    if (stopping)
        return;
    stopping = 1;
    stop_ns = uv_hrtime();
    pairs_at_stop = pairs;
    requests_at_stop = requests;
    uv_timer_stop(&deadline);
    uv_close((uv_handle_t *)&deadline, NULL);
}

static void conn_done(conn_t *c)
{
    if (c->ac) {
        redisAsyncContext *ac = c->ac;
        c->ac = NULL;
        redisAsyncDisconnect(ac);
    }
}

/* Starts the next pair, or ends this connection when the run is over. */
static void next(conn_t *c)
{
    if (stopping || (o.count && issued >= o.count)) {
        conn_done(c);
        return;
    }
    issued++;
    send_acquire(c);
}

static void on_release(redisAsyncContext *ac, void *r, void *priv)
{
    conn_t *c = priv;
    redisReply *reply = r;
    uint64_t now = uv_hrtime();
    if (!reply) /* disconnected */
        return;
    requests++;
    bench_hist_record(&req_hist, now - c->sent_ns);
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) {
        pairs++;
        last_ns = now;
        bench_hist_record(&pair_hist, now - c->pair_ns);
    } else {
        errors++;
    }
    next(c);
}

static void on_acquire(redisAsyncContext *ac, void *r, void *priv)
{
    conn_t *c = priv;
    redisReply *reply = r;
    uint64_t now = uv_hrtime();
    if (!reply)
        return;
    requests++;
    bench_hist_record(&req_hist, now - c->sent_ns);
    if (reply->type != REDIS_REPLY_INTEGER) {
        errors++;
        next(c);
        return;
    }
    if (reply->integer == 0) { /* full: a Redis semaphore can only try again */
        full_replies++;
        c->sent_ns = now;
        redisAsyncCommand(c->ac, on_acquire, c, "EVALSHA %s 1 %s %" PRIu64 " %" PRIu64 " %s",
                          sha_acq, c->key, o.capacity, o.ttl_ms, c->holder);
        return;
    }
    c->sent_ns = now;
    redisAsyncCommand(c->ac, on_release, c, "EVALSHA %s 1 %s %s", sha_rel, c->key, c->holder);
}

static void send_acquire(conn_t *c)
{
    snprintf(c->holder, sizeof(c->holder), "c%u:%" PRIu64, c->id, c->seq++);
    c->pair_ns = c->sent_ns = uv_hrtime();
    redisAsyncCommand(c->ac, on_acquire, c, "EVALSHA %s 1 %s %" PRIu64 " %" PRIu64 " %s", sha_acq,
                      c->key, o.capacity, o.ttl_ms, c->holder);
}

static void on_deadline(uv_timer_t *t)
{
    stop_all();
}

static void begin(void)
{
    started = 1;
    start_ns = uv_hrtime();
    if (o.count == 0)
        uv_timer_start(&deadline, on_deadline, (uint64_t)(o.duration_s * 1000.0), 0);
    for (unsigned i = 0; i < o.conns; i++)
        next(&conns[i]);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    conn_t *c = ac->data;
    if (status != REDIS_OK) {
        fprintf(stderr, "bench_redis_peer: connect: %s\n", ac->errstr);
        c->ac = NULL; /* hiredis frees it */
        errors++;
        if (!started)
            stop_all();
        if (--live == 0 && !uv_is_closing((uv_handle_t *)&deadline))
            uv_close((uv_handle_t *)&deadline, NULL);
        return;
    }
    c->connected = 1;
    if (stopping)
        conn_done(c);
    else if (++connected == o.conns)
        begin();
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    conn_t *c = ac->data;
    c->ac = NULL;
    if (status != REDIS_OK && !stopping)
        errors++;
    if (--live == 0 && !stopping)
        stop_all();
}

/* Loads the scripts and clears the keys with a blocking connection. */
static int prepare(void)
{
    redisContext *rc = redisConnect(o.host, o.port);
    if (!rc || rc->err) {
        fprintf(stderr, "bench_redis_peer: cannot connect to %s:%d\n", o.host, o.port);
        redisFree(rc);
        return -1;
    }
    const char *src[2] = {acquire_lua, release_lua};
    char *sha[2] = {sha_acq, sha_rel};
    int ok = 1;
    for (int i = 0; i < 2 && ok; i++) {
        redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", src[i]);
        ok = r && r->type == REDIS_REPLY_STRING && r->len < 48;
        if (ok)
            snprintf(sha[i], 48, "%s", r->str);
        freeReplyObject(r);
    }
    for (unsigned s = 0; s < o.sems && ok; s++)
        freeReplyObject(redisCommand(rc, "DEL {bench-%u}:holders", s));
    redisFree(rc);
    return ok ? 0 : -1;
}

/* Self-check after the run: every pair released its holder, so every set is empty. */
static uint64_t leftover_holders(void)
{
    redisContext *rc = redisConnect(o.host, o.port);
    uint64_t left = 0;
    for (unsigned s = 0; rc && !rc->err && s < o.sems; s++) {
        redisReply *r = redisCommand(rc, "ZCARD {bench-%u}:holders", s);
        if (r && r->type == REDIS_REPLY_INTEGER)
            left += (uint64_t)r->integer;
        freeReplyObject(r);
    }
    redisFree(rc);
    if (left)
        fprintf(stderr, "bench_redis_peer: %" PRIu64 " holders left after the run\n", left);
    return left;
}

static int open_conns(void)
{
    conns = calloc(o.conns, sizeof(conn_t));
    if (!conns)
        return -1;
    live = o.conns;
    for (unsigned i = 0; i < o.conns; i++) {
        conn_t *c = &conns[i];
        c->id = i;
        c->sem = i % o.sems;
        snprintf(c->key, sizeof(c->key), "{bench-%u}:holders", c->sem);
        c->ac = redisAsyncConnect(o.host, o.port);
        if (!c->ac || c->ac->err)
            return -1;
        c->ac->data = c;
        redisLibuvAttach(c->ac, loop);
        redisAsyncSetConnectCallback(c->ac, on_connect);
        redisAsyncSetDisconnectCallback(c->ac, on_disconnect);
    }
    return 0;
}

static void report(void)
{
    uint64_t end = o.count ? last_ns : stop_ns;
    double secs = started && end > start_ns ? (double)(end - start_ns) / 1e9 : 1e-9;
    uint64_t p = o.count ? pairs : pairs_at_stop, r = o.count ? requests : requests_at_stop;
    double us = 1000.0;
    if (o.json) {
        printf("{\"peer\":\"redis-lua\",\"connections\":%u,\"seconds\":%.3f,\"pairs\":%" PRIu64
               ",\"pairs_per_s\":%.1f,\"requests\":%" PRIu64 ",\"requests_per_s\":%.1f,"
               "\"p50_us\":%.1f,\"p99_us\":%.1f,"
               "\"pair_p50_us\":%.1f,\"pair_p99_us\":%.1f,\"full_replies\":%" PRIu64
               ",\"errors\":%" PRIu64 "}\n",
               o.conns, secs, p, (double)p / secs, r, (double)r / secs,
               bench_hist_percentile(&req_hist, 50) / us, bench_hist_percentile(&req_hist, 99) / us,
               bench_hist_percentile(&pair_hist, 50) / us,
               bench_hist_percentile(&pair_hist, 99) / us, full_replies, errors);
        return;
    }
    printf("redis-lua semaphore at %s:%d, %u connections, capacity %" PRIu64 "\n", o.host, o.port,
           o.conns, o.capacity);
    printf("  %.2f s: %" PRIu64 " pairs (%.0f/s), %.0f requests/s\n", secs, p, (double)p / secs,
           (double)r / secs);
    printf("  request p50 %.1f us  p99 %.1f us;  pair p50 %.1f us  p99 %.1f us\n",
           bench_hist_percentile(&req_hist, 50) / us, bench_hist_percentile(&req_hist, 99) / us,
           bench_hist_percentile(&pair_hist, 50) / us, bench_hist_percentile(&pair_hist, 99) / us);
    printf("  full replies (retried) %" PRIu64 ", errors %" PRIu64 "\n", full_replies, errors);
}

/* A duration as sema and semad write it (500ms, 2s, 1.5s, 1m), in seconds; -1 if it has no
 * unit or is not one. */
static double duration_s(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v)
        return -1;
    if (strcmp(end, "ms") == 0)
        return x / 1000;
    if (strcmp(end, "s") == 0)
        return x;
    if (strcmp(end, "m") == 0)
        return x * 60;
    return -1;
}

static int parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o.json = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (strcmp(a, "--redis") == 0) {
            static char host[64];
            const char *colon = strrchr(v, ':');
            if (!colon || (size_t)(colon - v) >= sizeof(host))
                return -1;
            memcpy(host, v, (size_t)(colon - v));
            host[colon - v] = '\0';
            o.host = host;
            o.port = (int)strtol(colon + 1, NULL, 10);
        } else if (strcmp(a, "-c") == 0)
            o.conns = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "-d") == 0)
            o.duration_s = duration_s(v);
        else if (strcmp(a, "-n") == 0)
            o.count = strtoull(v, NULL, 10);
        else if (strcmp(a, "-k") == 0)
            o.sems = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--capacity") == 0)
            o.capacity = strtoull(v, NULL, 10);
        else
            return -1;
    }
    if (o.conns == 0 || o.conns > 10000 || o.sems == 0 || o.sems > o.conns ||
        !(o.duration_s > 0 && o.duration_s < 86400))
        return -1;
    if (o.capacity == 0)
        o.capacity = (o.conns + o.sems - 1) / o.sems;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("bench_redis_peer: usage: bench_redis_peer --redis HOST:PORT [-c 50] [-d D | -n "
               "PAIRS] [-k SEMS] [--capacity C] [--json]\n"
               "  (bench/semad_vs_peers.sh runs it against a redis-server of its own)\n");
        return 0;
    }
    if (parse(argc, argv) != 0) {
        fprintf(stderr, "bench_redis_peer: bad arguments (run without any for usage)\n");
        return 2;
    }
    bench_hist_init(&req_hist);
    bench_hist_init(&pair_hist);
    loop = uv_default_loop();
    uv_timer_init(loop, &deadline);
    if (prepare() != 0 || open_conns() != 0) {
        fprintf(stderr, "bench_redis_peer: set-up failed\n");
        return 1;
    }
    uv_run(loop, UV_RUN_DEFAULT);
    errors += leftover_holders();
    report();
    free(conns);
    return pairs > 0 && errors == 0 ? 0 : 1;
}
