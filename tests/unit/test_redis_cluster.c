/* SPDX-License-Identifier: MIT */
/* test_redis_cluster.c - commands and sharded pub/sub on a real Redis Cluster of three
 * primaries and three replicas (redis_cluster.c), run beside one by
 * tests/support/with_redis_cluster.py, which also does the faults asked for on its control
 * socket (kill -9 of a primary, CLUSTER FAILOVER, a slot moved step by step, killed sharded
 * subscribers) while the loop here keeps its traffic going. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <uv.h>

#include "backends/redis/redis_cluster.h"
#include "test.h"

/* ---- the cluster and its faults ---- */

static int nseeds;
static rs_slot_addr_t seeds[RS_SLOT_SEEDS_MAX];

static void need_cluster(void)
{
    const char *s = getenv("SEMA_TEST_REDIS_CLUSTER");

    if (s == NULL || *s == '\0')
        TEST_SKIP("no Redis Cluster: run under tests/support/with_redis_cluster.py");
    nseeds = rs__slot_addrs(s, strlen(s), 6379, seeds);
    ASSERT_GT(nseeds, 0);
}

static int num(const char *s)
{
    return (int)strtol(s, NULL, 10);
}

static int ctl_fd(void)
{
    const char *s = getenv("SEMA_TEST_CLUSTER_CTL");
    ASSERT_NOT_NULL(s);
    return num(s);
}

/* Ask the wrapper for a fault; the answer is read by ctl_answer (the loop runs meanwhile). */
static void ctl_ask(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    line[n++] = '\n';
    ASSERT_EQ(write(ctl_fd(), line, (size_t)n), n);
}

static char ctl_buf[1024];
static size_t ctl_len;

/* The answer's text (after "ok "), once it has come; NULL while it has not. */
static const char *ctl_answer(void)
{
    struct pollfd p = {.fd = ctl_fd(), .events = POLLIN};
    char *nl;

    while (memchr(ctl_buf, '\n', ctl_len) == NULL && poll(&p, 1, 0) == 1) {
        ssize_t n = read(ctl_fd(), ctl_buf + ctl_len, sizeof ctl_buf - 1 - ctl_len);
        ASSERT_GT(n, 0);
        ctl_len += (size_t)n;
    }
    if ((nl = memchr(ctl_buf, '\n', ctl_len)) == NULL)
        return NULL;
    *nl = '\0';
    ctl_len = 0;
    if (strncmp(ctl_buf, "ok", 2) != 0)
        TEST_FAIL_("the fault failed: %s", ctl_buf);
    return ctl_buf[2] ? ctl_buf + 3 : "";
}

/* ---- the loop ---- */

static uv_loop_t loop;
static rs_cluster_t *cl;

/* Run the loop until pred() holds; fail after timeout_ms. */
static void run_until(int (*pred)(void *), void *arg, uint64_t timeout_ms, const char *what)
{
    uint64_t end = uv_now(&loop) + timeout_ms;

    while (!pred(arg)) {
        if (uv_now(&loop) > end)
            TEST_FAIL_("timed out after %llu ms waiting for %s", (unsigned long long)timeout_ms,
                       what);
        uv_run(&loop, UV_RUN_ONCE);
    }
}

static int always_false(void *arg)
{
    (void)arg;
    return 0;
}

/* Let the loop run for ms (a bounded pause in which nothing is expected to happen). */
static void run_for(uint64_t ms)
{
    uint64_t end = uv_now(&loop) + ms;
    uv_timer_t t;

    uv_timer_init(&loop, &t);
    uv_timer_start(&t, (uv_timer_cb)(void (*)(void))always_false, ms, 0);
    while (uv_now(&loop) < end)
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
}

/* Messages and subscriptions heard. */
static int nmsgs, nsubscribed;
static char last_msg[128];

static void on_message(void *data, const char *chan, size_t clen, const char *msg, size_t mlen)
{
    (void)data;
    (void)chan;
    (void)clen;
    nmsgs++;
    snprintf(last_msg, sizeof last_msg, "%.*s", (int)mlen, msg);
}

static void on_subscribed(void *data, const char *chan, size_t clen)
{
    (void)data;
    (void)chan;
    (void)clen;
    nsubscribed++;
}

static int is_ready(void *arg)
{
    (void)arg;
    return rs__cluster_ready(cl);
}

static void open_cluster(uint64_t timeout_ms)
{
    rs_cluster_events_t ev = {.message = on_message, .subscribed = on_subscribed};

    need_cluster();
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rs__cluster_open(&loop, seeds, nseeds, "", "", timeout_ms, &ev, &cl));
    run_until(is_ready, NULL, 10000, "the slot map");
}

static void close_cluster(void)
{
    rs__cluster_close(cl);
    cl = NULL;
    while (uv_run(&loop, UV_RUN_DEFAULT) != 0) {
    }
    ASSERT_OK(uv_loop_close(&loop));
}

/* ---- commands ---- */

typedef struct {
    rs_ccmd_t c;
    const char *argv[4];
    size_t lens[4];
    char key[64], val[64];
    int done, how, type;
    char str[128];
} tcmd_t;

static void tcmd_cb(rs_cluster_t *c_, rs_ccmd_t *c, int how, redisReply *rep)
{
    tcmd_t *t = c->data;

    (void)c_;
    t->done = 1;
    t->how = how;
    t->type = rep ? rep->type : 0;
    t->str[0] = '\0';
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        snprintf(t->str, sizeof t->str, "%lld", rep->integer);
    else if (rep != NULL && rep->str != NULL)
        snprintf(t->str, sizeof t->str, "%.*s", (int)rep->len, rep->str);
}

/* Make `verb key [arg]`, routed by route's slot. */
static void tcmd_build(tcmd_t *t, const char *route, const char *verb, const char *key,
                       const char *arg)
{
    int n = 0;

    memset(t, 0, sizeof *t);
    snprintf(t->key, sizeof t->key, "%s", key);
    if (arg != NULL)
        snprintf(t->val, sizeof t->val, "%s", arg);
    t->argv[n++] = verb;
    t->argv[n++] = t->key;
    if (arg != NULL)
        t->argv[n++] = t->val;
    for (int i = 0; i < n; i++)
        t->lens[i] = strlen(t->argv[i]);
    t->c = (rs_ccmd_t){.argc = n,
                       .argv = t->argv,
                       .lens = t->lens,
                       .key = route,
                       .key_len = strlen(route),
                       .cb = tcmd_cb,
                       .data = t};
}

/* Send `verb key [arg]` to the primary of route's slot. */
static void tcmd_send_to(tcmd_t *t, const char *route, const char *verb, const char *key,
                         const char *arg)
{
    tcmd_build(t, route, verb, key, arg);
    ASSERT_OK(rs__cluster_send(cl, &t->c));
}

/* Send `verb key [arg]` routed by key. */
static void tcmd_send(tcmd_t *t, const char *verb, const char *key, const char *arg)
{
    tcmd_send_to(t, key, verb, key, arg);
}

static int tcmd_done(void *arg)
{
    return ((tcmd_t *)arg)->done;
}

/* One command, waited for; its reply's text. */
static const char *call(const char *verb, const char *key, const char *arg)
{
    static tcmd_t t;

    tcmd_send(&t, verb, key, arg);
    run_until(tcmd_done, &t, 10000, verb);
    if (t.how != RS_CL_REPLY)
        TEST_FAIL_("%s %s ended %d, not with a reply", verb, key, t.how);
    return t.str;
}

/* A key of slot's primary other than `not_port`'s... found by trying names. */
static void key_on(char *buf, size_t cap, const char *prefix, int port, int not_port)
{
    for (int i = 0; i < 100000; i++) {
        const rs_slot_addr_t *a;
        snprintf(buf, cap, "%s%d", prefix, i);
        a = rs__cluster_owner(cl, rs__slot_of(buf, strlen(buf)));
        if (a != NULL && (port == 0 || a->port == port) && (not_port == 0 || a->port != not_port))
            return;
    }
    TEST_FAIL_("no key found");
}

/* ---- traffic that goes on while a fault is done ---- */

#define PUMP_KEYS 3
typedef struct {
    tcmd_t t[PUMP_KEYS];
    char keys[PUMP_KEYS][32];
    int ok[PUMP_KEYS], bad[PUMP_KEYS], ok_after[PUMP_KEYS];
    int on, after; /* after: the fault is done */
    uint64_t seq;
} pump_t;

static pump_t pump;

static void pump_cb(rs_cluster_t *c_, rs_ccmd_t *c, int how, redisReply *rep);

static void pump_send(int i)
{
    char val[32];

    snprintf(val, sizeof val, "%llu", (unsigned long long)++pump.seq);
    tcmd_send(&pump.t[i], "SET", pump.keys[i], val);
    pump.t[i].c.cb = pump_cb;
    pump.t[i].c.data = &pump.t[i];
}

static void pump_cb(rs_cluster_t *c_, rs_ccmd_t *c, int how, redisReply *rep)
{
    tcmd_t *t = c->data;
    int i = (int)(t - pump.t);

    tcmd_cb(c_, c, how, rep);
    if (how == RS_CL_REPLY && strcmp(t->str, "OK") == 0) {
        pump.ok[i]++;
        pump.ok_after[i] += pump.after;
    } else {
        pump.bad[i]++;
    }
    if (pump.on)
        pump_send(i);
}

/* One key on each primary; key 0 on the primary of `port`. */
static void pump_start(int port)
{
    int used[PUMP_KEYS] = {0};

    memset(&pump, 0, sizeof pump);
    key_on(pump.keys[0], sizeof pump.keys[0], "pump-a-", port, 0);
    used[0] = rs__cluster_owner(cl, rs__slot_of(pump.keys[0], strlen(pump.keys[0])))->port;
    key_on(pump.keys[1], sizeof pump.keys[1], "pump-b-", 0, used[0]);
    used[1] = rs__cluster_owner(cl, rs__slot_of(pump.keys[1], strlen(pump.keys[1])))->port;
    for (int i = 0; i < 100000; i++) { /* the third primary */
        const rs_slot_addr_t *a;
        snprintf(pump.keys[2], sizeof pump.keys[2], "pump-c-%d", i);
        a = rs__cluster_owner(cl, rs__slot_of(pump.keys[2], strlen(pump.keys[2])));
        if (a->port != used[0] && a->port != used[1])
            break;
    }
    pump.on = 1;
    for (int i = 0; i < PUMP_KEYS; i++)
        pump_send(i);
}

static int all_done(void *arg)
{
    (void)arg;
    for (int i = 0; i < PUMP_KEYS; i++)
        if (!pump.t[i].done)
            return 0;
    return 1;
}

static void pump_stop(void)
{
    pump.on = 0;
    run_until(all_done, NULL, 10000, "the traffic to stop");
}

static int fault_done(void *arg)
{
    const char **out = arg;
    return (*out = ctl_answer()) != NULL;
}

/* Ask for a fault and keep the traffic going until it is done; its answer. */
static const char *fault(const char *line, int slot)
{
    const char *out = NULL;

    ctl_ask("%s %d", line, slot);
    run_until(fault_done, &out, 90000, line);
    pump.after = 1;
    return out;
}

static int ok_after_on_every_key(void *arg)
{
    (void)arg;
    for (int i = 0; i < PUMP_KEYS; i++)
        if (pump.ok_after[i] < 5)
            return 0;
    return 1;
}

/* ---- the cases ---- */

TEST(slots_are_redis_own_slots)
{
    redisContext *c;
    char key[64];
    unsigned expect[2000];
    uint64_t x = 88172645463325252ull;

    need_cluster();
    c = redisConnect(seeds[0].host, seeds[0].port);
    ASSERT(c != NULL && c->err == 0);
    for (int i = 0; i < 2000; i++) {
        size_t n = 1 + (size_t)(x % 20);
        for (size_t j = 0; j < n; j++) {
            static const char alphabet[] = "ab{}{}xyz0123:";
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            key[j] = alphabet[x % (sizeof alphabet - 1)];
        }
        key[n] = '\0';
        expect[i] = rs__slot_of(key, n);
        redisAppendCommand(c, "CLUSTER KEYSLOT %b", key, n);
    }
    for (int i = 0; i < 2000; i++) {
        redisReply *rep;
        ASSERT_EQ(redisGetReply(c, (void **)&rep), REDIS_OK);
        ASSERT_EQ(rep->type, REDIS_REPLY_INTEGER);
        if ((unsigned)rep->integer != expect[i])
            TEST_FAIL_("key %d: Redis says slot %lld, we say %u", i, rep->integer, expect[i]);
        freeReplyObject(rep);
    }
    redisFree(c);
}

TEST(commands_reach_every_primary_without_redirects)
{
    char key[32], val[32];
    int ports[3] = {0}, nports = 0;

    open_cluster(2000);
    for (int i = 0; i < 300; i++) {
        const rs_slot_addr_t *a;
        snprintf(key, sizeof key, "k%d", i);
        snprintf(val, sizeof val, "v%d", i);
        ASSERT_STREQ(call("SET", key, val), "OK");
        a = rs__cluster_owner(cl, rs__slot_of(key, strlen(key)));
        int seen = 0;
        for (int j = 0; j < nports; j++)
            seen |= ports[j] == a->port;
        if (!seen && nports < 3)
            ports[nports++] = a->port;
    }
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "k%d", i);
        snprintf(val, sizeof val, "v%d", i);
        ASSERT_STREQ(call("GET", key, NULL), val);
    }
    ASSERT_EQ(nports, 3);
    ASSERT_EQ(rs__cluster_stats(cl)->moved, 0);
    ASSERT_EQ(rs__cluster_stats(cl)->asks, 0);
    ASSERT_EQ(rs__cluster_stats(cl)->refreshes, 1);
    close_cluster();
}

TEST(moved_is_followed_and_updates_the_map)
{
    const char *key = "{moving}k";
    unsigned slot;
    int to;

    open_cluster(2000);
    slot = rs__slot_of(key, strlen(key));
    ASSERT_STREQ(call("SET", key, "v1"), "OK");
    ctl_ask("reshard %u", slot);
    {
        const char *out = NULL;
        run_until(fault_done, &out, 60000, "the reshard");
        to = num(out);
    }
    ASSERT_NE(rs__cluster_owner(cl, slot)->port, to); /* the map is behind... */
    {
        /* ...so a command pinned to the old owner is MOVED, and ends so, unrun */
        static tcmd_t t;
        tcmd_build(&t, key, "SET", key, "pinned");
        t.c.pinned = 1;
        t.c.pin = *rs__cluster_owner(cl, slot);
        ASSERT_OK(rs__cluster_send(cl, &t.c));
        run_until(tcmd_done, &t, 10000, "the pinned SET");
        ASSERT_EQ(t.how, RS_CL_MOVED);
        ASSERT_EQ(rs__cluster_stats(cl)->moved, 1);
        ASSERT_EQ(rs__cluster_owner(cl, slot)->port, to);
    }
    ASSERT_STREQ(call("GET", key, NULL), "v1"); /* (it did not run) */
    ASSERT_EQ(rs__cluster_stats(cl)->moved, 1);
    ASSERT_STREQ(call("SET", key, "v2"), "OK");
    ASSERT_EQ(rs__cluster_stats(cl)->moved, 1); /* the map knows now */
    close_cluster();
}

TEST(ask_is_honoured_while_a_slot_migrates)
{
    const char *keys[] = {"{mig}a", "{mig}b", "{mig}c"};
    unsigned slot = rs__slot_of("mig", 3);
    const char *out = NULL;
    int src;

    open_cluster(2000);
    src = rs__cluster_owner(cl, slot)->port;
    ASSERT_STREQ(call("SET", keys[0], "A"), "OK");
    ASSERT_STREQ(call("SET", keys[1], "B"), "OK");
    ctl_ask("begin %u", slot);
    run_until(fault_done, &out, 60000, "the migration's start");
    ctl_ask("move %u 1", slot); /* one of the two keys goes to the target */
    run_until(fault_done, &out, 60000, "one key moved");
    ASSERT_STREQ(out, "1");
    /* one is still at the source, the other answered through ASK */
    ASSERT_STREQ(call("GET", keys[0], NULL), "A");
    ASSERT_STREQ(call("GET", keys[1], NULL), "B");
    ASSERT_EQ(rs__cluster_stats(cl)->asks, 1);
    /* a new key of a migrating slot is made at the target */
    ASSERT_STREQ(call("SET", keys[2], "C"), "OK");
    ASSERT_EQ(rs__cluster_stats(cl)->asks, 2);
    ASSERT_EQ(rs__cluster_stats(cl)->moved, 0);
    ASSERT_EQ(rs__cluster_owner(cl, slot)->port, src); /* ASK leaves the map alone */
    ctl_ask("finish %u", slot);
    run_until(fault_done, &out, 60000, "the migration's end");
    ASSERT_STREQ(call("GET", keys[0], NULL), "A");
    ASSERT_STREQ(call("GET", keys[1], NULL), "B");
    ASSERT_STREQ(call("GET", keys[2], NULL), "C");
    ASSERT_EQ(rs__cluster_stats(cl)->moved, 1);
    ASSERT_NE(rs__cluster_owner(cl, slot)->port, src);
    close_cluster();
}

/* A command that must see its whole slot (no_ask) waits while the slot migrates: the ASK that
 * would send it to the target (where part of the slot is) is waited out until the slot's
 * migration has ended, and it runs there then. */
TEST(a_command_that_asks_so_waits_out_a_migration)
{
    unsigned slot = rs__slot_of("nask", 4);
    const char *out = NULL;
    tcmd_t t;
    int src;

    open_cluster(60000);
    src = rs__cluster_owner(cl, slot)->port;
    ASSERT_STREQ(call("SET", "{nask}a", "A"), "OK");
    ctl_ask("begin %u", slot);
    run_until(fault_done, &out, 60000, "the migration's start");
    tcmd_send(&t, "GET", "{nask}missing", NULL); /* the source answers ASK: not there */
    t.c.no_ask = 1;
    /* (set before the loop runs: the command is written at the end of the loop's turn) */
    ctl_ask("move %u 1", slot);
    run_until(fault_done, &out, 60000, "one key moved");
    ASSERT_STREQ(call("GET", "{nask}a", NULL), "A"); /* (followed: the key moved) */
    ASSERT_EQ(t.done, 0);
    ASSERT_GT(rs__cluster_stats(cl)->tryagain, 0);
    ctl_ask("finish %u", slot);
    run_until(fault_done, &out, 60000, "the migration's end");
    run_until(tcmd_done, &t, 10000, "the waiting command");
    ASSERT_EQ(t.how, RS_CL_REPLY);
    ASSERT_EQ(t.type, REDIS_REPLY_NIL);
    ASSERT_NE(rs__cluster_owner(cl, slot)->port, src);
    close_cluster();
}

/* A command in flight when its connection is dropped for a timeout ends RS_CL_UNKNOWN and is
 * not sent again: it ran once (Redis had it when the connection went), and only its sender
 * may decide to send it again. */
TEST(an_unknown_outcome_is_handed_back_never_sent_again)
{
    const char *key = "{once}n";
    tcmd_t sleep_cmd, incr;
    redisContext *c;
    redisReply *rep;
    const rs_slot_addr_t *a;

    open_cluster(300);
    a = rs__cluster_owner(cl, rs__slot_of(key, strlen(key)));
    /* Redis busy for 1 s on the same connection, then the INCR, which the timeout of 300 ms
     * makes unknown */
    tcmd_send_to(&sleep_cmd, key, "DEBUG", "SLEEP", "1");
    tcmd_send(&incr, "INCR", key, NULL);
    run_until(tcmd_done, &incr, 5000, "the INCR");
    ASSERT_EQ(incr.how, RS_CL_UNKNOWN);
    ASSERT_EQ(sleep_cmd.how, RS_CL_UNKNOWN);
    ASSERT_GE(rs__cluster_stats(cl)->timeouts, 1);
    run_for(1500); /* Redis wakes up and runs what it had; the connection comes back */
    c = redisConnect(a->host, a->port);
    ASSERT(c != NULL && c->err == 0);
    rep = redisCommand(c, "GET %s", key);
    ASSERT_NOT_NULL(rep);
    ASSERT_STREQ(rep->str, "1"); /* it ran, once */
    freeReplyObject(rep);
    redisFree(c);
    ASSERT_STREQ(call("INCR", key, NULL), "2");
    close_cluster();
}

TEST(kill_9_of_one_primary_leaves_the_others_alone)
{
    const char *out;
    int victim;

    open_cluster(2000);
    victim = seeds[0].port;
    pump_start(victim);
    run_for(200);
    out = fault("kill_primary", (int)rs__slot_of(pump.keys[0], strlen(pump.keys[0])));
    run_until(ok_after_on_every_key, NULL, 20000, "writes on every primary after the failover");
    pump_stop();
    for (int i = 1; i < PUMP_KEYS; i++) {
        if (pump.bad[i] != 0)
            TEST_FAIL_("key %s on a healthy primary failed %d times", pump.keys[i], pump.bad[i]);
        ASSERT_GT(pump.ok[i], 10);
    }
    ASSERT_EQ(rs__cluster_owner(cl, rs__slot_of(pump.keys[0], strlen(pump.keys[0])))->port,
              num(out));
    close_cluster();
}

TEST(cluster_failover_is_followed_without_a_failed_command)
{
    open_cluster(2000);
    pump_start(0);
    run_for(200);
    fault("failover", (int)rs__slot_of(pump.keys[0], strlen(pump.keys[0])));
    run_until(ok_after_on_every_key, NULL, 20000, "writes on every primary after the failover");
    pump_stop();
    for (int i = 0; i < PUMP_KEYS; i++)
        if (pump.bad[i] != 0)
            TEST_FAIL_("key %s failed %d times", pump.keys[i], pump.bad[i]);
    ASSERT_GE(rs__cluster_stats(cl)->moved, 1);
    close_cluster();
}

TEST(writes_go_on_while_their_slot_is_resharded)
{
    const char *out;
    int slot;

    open_cluster(2000);
    pump_start(0);
    slot = (int)rs__slot_of(pump.keys[0], strlen(pump.keys[0]));
    run_for(100);
    ctl_ask("begin %d", slot);
    run_until(fault_done, &out, 60000, "the migration's start");
    run_for(200); /* writes meet a MIGRATING slot */
    ctl_ask("move %d 100", slot);
    run_until(fault_done, &out, 60000, "its keys moved");
    run_for(200); /* ...whose key is at the target now: ASK */
    ctl_ask("finish %d", slot);
    run_until(fault_done, &out, 60000, "the migration's end");
    pump.after = 1;
    run_until(ok_after_on_every_key, NULL, 20000, "writes after the move");
    pump_stop();
    for (int i = 0; i < PUMP_KEYS; i++)
        if (pump.bad[i] != 0)
            TEST_FAIL_("key %s failed %d times", pump.keys[i], pump.bad[i]);
    ASSERT_GE(rs__cluster_stats(cl)->asks + rs__cluster_stats(cl)->moved, 1);
    close_cluster();
}

/* ---- sharded pub/sub ---- */

static int subscribed_at_least(void *arg)
{
    return nsubscribed >= *(int *)arg;
}

static int msgs_at_least(void *arg)
{
    return nmsgs >= *(int *)arg;
}

/* Whether nobody is subscribed to the channel on its primary (PUBSUB SHARDNUMSUB), asked on
 * a connection of its own while the loop runs. */
static int no_subscriber(void *arg)
{
    const char *chan = arg;
    const rs_slot_addr_t *a = rs__cluster_owner(cl, rs__slot_of(chan, strlen(chan)));
    redisContext *c = redisConnect(a->host, a->port);
    redisReply *rep;
    int none;

    ASSERT(c != NULL && c->err == 0);
    rep = redisCommand(c, "PUBSUB SHARDNUMSUB %s", chan);
    ASSERT(rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
    none = rep->element[1]->integer == 0;
    freeReplyObject(rep);
    redisFree(c);
    return none;
}

/* SPUBLISH on every channel through the cluster; wait for the messages. */
static void publish_all(char chans[][32], int n, const char *msg)
{
    int want = nmsgs + n;

    for (int i = 0; i < n; i++)
        ASSERT_STREQ(call("SPUBLISH", chans[i], msg), "1");
    run_until(msgs_at_least, &want, 5000, "the messages");
    ASSERT_STREQ(last_msg, msg);
}

TEST(sharded_subscriptions_survive_killed_connections_and_moved_slots)
{
    char chans[3][32];
    int want, ports[3];
    const char *out;

    open_cluster(2000);
    nmsgs = nsubscribed = 0;
    for (int i = 0; i < 3; i++) { /* a channel on each primary */
        char name[32];
        for (int j = 0;; j++) {
            snprintf(name, sizeof name, "sema:w:{%d}", j);
            ports[i] = rs__cluster_owner(cl, rs__slot_of(name, strlen(name)))->port;
            if ((i < 1 || ports[i] != ports[0]) && (i < 2 || ports[i] != ports[1]))
                break;
        }
        memcpy(chans[i], name, sizeof name);
        ASSERT_OK(rs__cluster_subscribe(cl, chans[i], strlen(chans[i])));
    }
    want = 3;
    run_until(subscribed_at_least, &want, 5000, "three subscriptions");
    publish_all(chans, 3, "one");
    /* every sharded subscriber connection killed: each is made again and subscribes again */
    ctl_ask("kill_sharded_subscribers");
    run_until(fault_done, &out, 60000, "the kill");
    ASSERT_EQ(num(out), 3);
    want = 6;
    run_until(subscribed_at_least, &want, 5000, "the subscriptions again");
    publish_all(chans, 3, "two");
    /* a channel whose slot moves follows it to the new primary */
    ctl_ask("reshard %u", rs__slot_of(chans[0], strlen(chans[0])));
    run_until(fault_done, &out, 60000, "the reshard");
    want = 7;
    run_until(subscribed_at_least, &want, 10000, "the moved channel's subscription");
    publish_all(chans, 3, "three");
    /* and a channel left is left on its primary */
    rs__cluster_unsubscribe(cl, chans[1], strlen(chans[1]));
    run_until(no_subscriber, chans[1], 5000, "the channel to be left");
    ASSERT_STREQ(call("SPUBLISH", chans[1], "four"), "0");
    close_cluster();
}

/* ---- batching ---- */

static int all_of_done(void *arg)
{
    tcmd_t *t = arg;
    for (int i = 0; i < 1000; i++)
        if (!t[i].done)
            return 0;
    return 1;
}

/* The commands of one loop turn go to their primary in one write (a writev), as hiredis's own
 * contexts send them, so Redis reads them together. */
TEST(a_loop_turn_s_commands_go_out_in_one_write)
{
    static tcmd_t t[1000];
    uint64_t before;
    char key[32];

    open_cluster(2000);
    ASSERT_STREQ(call("SET", "{batch}warm", "1"), "OK"); /* the connection is up */
    before = rs__cluster_stats(cl)->writes;
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "{batch}%d", i);
        tcmd_send(&t[i], "INCR", key, NULL);
    }
    run_until(all_of_done, t, 10000, "1,000 commands");
    for (int i = 0; i < 1000; i++)
        ASSERT_STREQ(t[i].str, "1");
    ASSERT_EQ(rs__cluster_stats(cl)->writes - before, 1);
    close_cluster();
}

/* ---- sema.lua on the cluster: every key a call touches in its semaphore's slot ---- */

extern const char rs__lua[]; /* the script library semad loads (redis_lua.c) */

/* One call's reply, as much of it as the cases read. */
typedef struct {
    rs_ccmd_t c;
    int done, how, type;
    size_t n;      /* an array's elements */
    char s[4][96]; /* its first four elements (or a string's or an error's text) */
} fcall_t;

static void fcall_cb(rs_cluster_t *c_, rs_ccmd_t *c, int how, redisReply *rep)
{
    fcall_t *f = c->data;

    (void)c_;
    f->done = 1;
    f->how = how;
    f->type = rep != NULL ? rep->type : 0;
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY) {
        f->n = rep->elements;
        for (size_t i = 0; i < rep->elements && i < 4; i++)
            if (rep->element[i]->str != NULL)
                snprintf(f->s[i], sizeof f->s[i], "%.*s", (int)rep->element[i]->len,
                         rep->element[i]->str);
    } else if (rep != NULL && rep->str != NULL) {
        snprintf(f->s[0], sizeof f->s[0], "%.*s", (int)rep->len, rep->str);
    }
}

static int fcall_done(void *arg)
{
    return ((fcall_t *)arg)->done;
}

/* argv[0..argc) sent to the primary of argv[3] (FCALL's key, or `route` when not NULL),
 * waited for; the reply. */
static const fcall_t *fcall_v(const char *route, int argc, const char **argv)
{
    static fcall_t f;
    static size_t lens[32];

    ASSERT_LE(argc, 32);
    memset(&f, 0, sizeof f);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    route = route != NULL ? route : argv[3];
    f.c = (rs_ccmd_t){.argc = argc,
                      .argv = argv,
                      .lens = lens,
                      .key = route,
                      .key_len = strlen(route),
                      .cb = fcall_cb,
                      .data = &f};
    ASSERT_OK(rs__cluster_send(cl, &f.c));
    run_until(fcall_done, &f, 10000, argv[0]);
    ASSERT_EQ(f.how, RS_CL_REPLY);
    return &f;
}

static const char *call_inst = "inst-t"; /* the instance a call says it comes from */

/* FCALL sema 1 key op epoch flags inst rid '' args... (at most 8 args); the reply, which must
 * not be an error. */
static const fcall_t *sema_call(const char *key, const char *op, const char *epoch,
                                const char *flags, const char *rid, int nargs, ...)
{
    static char named[128]; /* the key followed by '!' on a cluster (redis_shards.c) */
    const char *argv[18] = {"FCALL", "sema", "1", named, op, epoch, flags, call_inst, rid, ""};
    const fcall_t *f;
    va_list ap;

    snprintf(named, sizeof named, "%s%s", key, strchr(flags, 'c') != NULL ? "!" : "");
    va_start(ap, nargs);
    for (int i = 0; i < nargs; i++)
        argv[10 + i] = va_arg(ap, const char *);
    va_end(ap);
    f = fcall_v(NULL, 10 + nargs, argv);
    if (f->type == REDIS_REPLY_ERROR)
        TEST_FAIL_("%s on %s: %s", op, key, f->s[0]);
    return f;
}

static int nwake;
static char wake_chan[64];

static void on_wake(void *data, const char *chan, size_t clen, const char *msg, size_t mlen)
{
    (void)data;
    (void)msg;
    (void)mlen;
    nwake += clen == strlen(wake_chan) && memcmp(chan, wake_chan, clen) == 0;
}

static int woken(void *arg)
{
    (void)arg;
    return nwake > 0;
}

static int wake_subscribed(void *arg)
{
    (void)arg;
    return nsubscribed > 0;
}

/* Every operation of one semaphore, in the slot of tag `tag`, on the primary that serves it:
 * hello, put, the short and the general acquire, a lease by its id, a waiter woken by SPUBLISH
 * on the slot's channel when a release grants it, beat, sweep and the slot's name list. */
static void semaphore_in_its_slot(unsigned slot, uint32_t tag)
{
    char home[32], stem[64], hkey[3][48], lid[3][32], epoch[96], lkey[96];
    const fcall_t *f;

    snprintf(home, sizeof home, "sema:{%08x}", (unsigned)tag);
    snprintf(stem, sizeof stem, "%ss:sem-%u", home, slot);
    snprintf(hkey[0], sizeof hkey[0], "%sepoch", home);
    snprintf(hkey[1], sizeof hkey[1], "%sinst", home);
    snprintf(hkey[2], sizeof hkey[2], "%sdue", home);
    for (int i = 0; i < 3; i++) {
        snprintf(lid[i], sizeof lid[i], "xxxlease%dofslot%05u", i, slot);
        rs__slot_id_put(lid[i], slot);
        ASSERT_EQ(rs__slot_id_get(lid[i], strlen(lid[i])), (int)slot);
    }
    f = sema_call(hkey[0], "hello", "", "0c", "", 5, "4242", "", "60000", "0", "0");
    snprintf(epoch, sizeof epoch, "%s", f->s[0]);
    ASSERT_STREQ(epoch, "4242");
    f = sema_call(stem, "put", epoch, "0c", "rid-put", 2, "2", "0");
    ASSERT_STREQ(f->s[0], "0");
    /* the general path ('r': it may have run), then the short one (a plain flag): a lease
     * that ends no sooner than the first and within the horizon the first one set (a second
     * past it; tried again, a few times, should a second go by between the two) */
    for (int i = 0;; i++) {
        char rid[2][32];
        snprintf(rid[0], sizeof rid[0], "rid-a1-%d", i);
        snprintf(rid[1], sizeof rid[1], "rid-a0-%d", i);
        f = sema_call(stem, "acquire", epoch, "0rc", rid[0], 7, "1", "0", "30000", lid[1], "", "",
                      "0 0 0");
        ASSERT_STREQ(f->s[0], "0");
        f = sema_call(stem, "acquire", epoch, "0c", rid[1], 7, "1", "0", "30000", lid[0], "", "",
                      "0 0 0");
        if (f->type == REDIS_REPLY_STRING) {
            ASSERT_EQ(f->s[0][0], 'G');
            break;
        }
        ASSERT_LT(i, 5);
        ASSERT_STREQ(f->s[0], "0");
        for (int j = 0; j < 2; j++) {
            snprintf(lkey, sizeof lkey, "%sid:%s", home, lid[j]);
            snprintf(rid[j], sizeof rid[j], "rid-r%d-%d", j, i);
            ASSERT_STREQ(sema_call(lkey, "lease_release", epoch, "0rc", rid[j], 0)->s[0], "0");
        }
    }
    snprintf(lkey, sizeof lkey, "%sid:%s", home, lid[0]);
    f = sema_call(lkey, "lease_get", epoch, "0c", "", 0);
    ASSERT_STREQ(f->s[0], "0");
    /* a third waits; the release of the first grants it and wakes this instance on the
     * slot's own channel */
    snprintf(wake_chan, sizeof wake_chan, "%swake:inst-t", home);
    nwake = nsubscribed = 0;
    ASSERT_OK(rs__cluster_subscribe(cl, wake_chan, strlen(wake_chan)));
    run_until(wake_subscribed, NULL, 10000, "the wake channel's subscription");
    f = sema_call(stem, "acquire", epoch, "0c", "rid-a2", 7, "1", "1", "30000", lid[2], "", "",
                  "0 0 0");
    ASSERT_STREQ(f->s[0], "1"); /* RS_ST_PARKED */
    call_inst = "inst-u";       /* (a grant to a waiter of the caller's own is in its reply) */
    f = sema_call(lkey, "lease_release", epoch, "0rc", "rid-r0", 0);
    call_inst = "inst-t";
    ASSERT_STREQ(f->s[0], "0");
    run_until(woken, NULL, 10000, "the waiter's wake-up");
    rs__cluster_unsubscribe(cl, wake_chan, strlen(wake_chan));
    f = sema_call(hkey[1], "beat", epoch, "0c", "rid-b", 0);
    ASSERT_STREQ(f->s[0], "0");
    f = sema_call(hkey[2], "sweep", epoch, "0c", "", 0);
    ASSERT_STREQ(f->s[0], "0");
}

/* The library on every primary, loaded through a slot each one serves. */
static void load_library(const rs_slot_tags_t *t)
{
    int done[RS_SLOT_NODES_MAX] = {0};

    for (unsigned s = 0; s < RS_SLOTS; s++) {
        const rs_slot_addr_t *a = rs__cluster_owner(cl, s);
        char route[16];
        const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", rs__lua};
        int seen = 0;
        ASSERT_NOT_NULL(a);
        for (int i = 0; i < RS_SLOT_NODES_MAX && done[i] != 0; i++)
            seen |= done[i] == a->port;
        if (seen)
            continue;
        for (int i = 0; i < RS_SLOT_NODES_MAX; i++)
            if (done[i] == 0) {
                done[i] = a->port;
                break;
            }
        snprintf(route, sizeof route, "{%08x}", (unsigned)t->tag[s]);
        ASSERT_STREQ(fcall_v(route, 4, argv)->s[0], "sema");
    }
}

TEST(sema_lua_keeps_every_call_in_its_semaphore_s_slot)
{
    rs_slot_tags_t *t = malloc(sizeof *t);
    rs_cluster_events_t ev = {.message = on_wake, .subscribed = on_subscribed};
    int ports[3] = {0}, n = 0;
    const fcall_t *f;
    char stem[48];

    ASSERT_NOT_NULL(t);
    rs__slot_tags_make(t);
    need_cluster();
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rs__cluster_open(&loop, seeds, nseeds, "", "", 2000, &ev, &cl));
    run_until(is_ready, NULL, 10000, "the slot map");
    load_library(t);
    /* a semaphore on each primary */
    for (unsigned s = 0; s < RS_SLOTS && n < 3; s += 997) {
        int port = rs__cluster_owner(cl, s)->port;
        if ((n > 0 && port == ports[0]) || (n > 1 && port == ports[1]))
            continue;
        ports[n++] = port;
        semaphore_in_its_slot(s, t->tag[s]);
    }
    ASSERT_EQ(n, 3);
    ASSERT_EQ(rs__cluster_stats(cl)->moved, 0);
    ASSERT_EQ(rs__cluster_stats(cl)->asks, 0);
    /* the same call without 'c' reaches for the keys of one Redis (sema:epoch), in another
     * slot: the cluster refuses it, so the cases above show what 'c' changes */
    snprintf(stem, sizeof stem, "sema:{%08x}s:sem-0", (unsigned)t->tag[0]);
    {
        const char *argv[] = {"FCALL", "sema", "1", stem, "get", "1", "0", "inst-t", "", ""};
        f = fcall_v(NULL, 10, argv);
        ASSERT_EQ(f->type, REDIS_REPLY_ERROR);
        if (strstr(f->s[0], "slot") == NULL && strstr(f->s[0], "local key") == NULL)
            TEST_FAIL_("not a cross-slot refusal: %s", f->s[0]);
    }
    free(t);
    close_cluster();
}
