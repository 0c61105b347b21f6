/* SPDX-License-Identifier: MIT */
/* redis_conn.c - the Redis back end's connections: the address (redis:// or
 * redis+sentinel://), the start of a connection (AUTH, SELECT, the
 * library, the epoch), reconnects with backoff, the subscriber connection, Sentinel. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* ---- the address ---- */

/* HOST:PORT, [IPv6]:PORT, or HOST alone (and [IPv6]): the port is then `default_port`, as
 * for redis-cli (6379; 26379 for a Sentinel). */
static int parse_hostport(const char *s, size_t n, char *host, size_t hostcap, int *port,
                          int default_port)
{
    const char *h = s, *hend = s + n, *colon = NULL;
    char num[8];
    char *end;
    long p = default_port;

    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL || (close + 1 < s + n && close[1] != ':'))
            return -1;
        h = s + 1;
        hend = close;
        colon = close + 1 < s + n ? close + 1 : NULL;
    } else {
        for (size_t i = n; i > 0 && colon == NULL; i--)
            if (s[i - 1] == ':')
                colon = s + i - 1;
        hend = colon != NULL ? colon : s + n;
    }
    if (colon != NULL) {
        size_t k = (size_t)(s + n - colon - 1);
        if (k == 0 || k >= sizeof num)
            return -1;
        memcpy(num, colon + 1, k);
        num[k] = '\0';
        p = strtol(num, &end, 10);
        if (*end != '\0' || p < 1 || p > 65535)
            return -1;
    }
    if (hend == h || (size_t)(hend - h) >= hostcap)
        return -1;
    memcpy(host, h, (size_t)(hend - h));
    host[hend - h] = '\0';
    *port = (int)p;
    return 0;
}

/* ?replicas=N&timeout=MS */
static int parse_query(rs_t *r, const char *q)
{
    while (q != NULL && *q != '\0') {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        char *end;
        if (n > 9 && strncmp(q, "replicas=", 9) == 0) {
            long v = strtol(q + 9, &end, 10);
            if (end != q + n || v < 0 || v > 100)
                return -1;
            r->replicas = (int)v;
        } else if (n > 8 && strncmp(q, "timeout=", 8) == 0) {
            long v = strtol(q + 8, &end, 10);
            if (end != q + n || v < 100 || v > 10000)
                return -1;
            r->cmd_timeout_ms = (uint64_t)v;
        } else {
            return -1;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

/* user:password@ (either part may be empty; a password alone is "password@" or ":password@") */
static int parse_userinfo(rs_t *r, const char **p)
{
    const char *at = strchr(*p, '@');
    const char *slash = strchr(*p, '/');
    const char *colon;

    if (at == NULL || (slash != NULL && slash < at))
        return 0;
    colon = memchr(*p, ':', (size_t)(at - *p));
    if (colon == NULL)
        colon = *p - 1; /* "password@" */
    if ((size_t)(colon - *p) >= sizeof r->user && colon >= *p)
        return -1;
    if ((size_t)(at - colon - 1) >= sizeof r->pass)
        return -1;
    if (colon >= *p) {
        memcpy(r->user, *p, (size_t)(colon - *p));
        r->user[colon - *p] = '\0';
    }
    memcpy(r->pass, colon + 1, (size_t)(at - colon - 1));
    r->pass[at - colon - 1] = '\0';
    *p = at + 1;
    return 0;
}

static int parse_sentinels(rs_t *r, const char *p, size_t n)
{
    while (n > 0) {
        const char *comma = memchr(p, ',', n);
        size_t k = comma ? (size_t)(comma - p) : n;
        char host[256];
        int port;
        if (r->nsentinels == 8 || parse_hostport(p, k, host, sizeof host, &port, 26379) != 0)
            return -1;
        snprintf(r->sentinels[r->nsentinels++], sizeof r->sentinels[0], "%s:%d", host, port);
        p += k;
        n -= k;
        if (comma) {
            p++;
            n--;
        }
    }
    return r->nsentinels > 0 ? 0 : -1;
}

/* Whether the address asks for TLS: a rediss scheme, or a tls or ssl option. */
static int wants_tls(const char *url)
{
    const char *q = strchr(url, '?');

    if (strncmp(url, "rediss:", 7) == 0 || strncmp(url, "rediss+", 7) == 0)
        return 1;
    for (; q != NULL; q = strchr(q + 1, '&'))
        if (strncmp(q + 1, "tls", 3) == 0 || strncmp(q + 1, "ssl", 3) == 0)
            return 1;
    return 0;
}

int rs__parse_url(rs_t *r, const char *url, char *errbuf, size_t errlen)
{
    const char *p, *q, *slash;
    int sentinel = strncmp(url, "redis+sentinel://", 17) == 0;
    char path[160] = "";
    size_t hostlen;

    if (wants_tls(url)) {
        snprintf(errbuf, errlen,
                 "TLS to Redis (rediss://, tls or ssl options) is not supported: semad speaks to "
                 "Redis through hiredis %d.%d, Debian 12's, which has no TLS (hiredis_ssl came "
                 "with hiredis 1.0); use redis://, redis+sentinel:// or redis+cluster:// on a "
                 "network you trust",
                 HIREDIS_MAJOR, HIREDIS_MINOR);
        return SEMA_ENOTSUP;
    }

    r->cluster = strncmp(url, "redis+cluster://", 16) == 0;
    if (!sentinel && !r->cluster && strncmp(url, "redis://", 8) != 0)
        goto bad;
    p = url + (sentinel ? 17 : r->cluster ? 16 : 8);
    if (parse_userinfo(r, &p) != 0)
        goto bad;
    q = strchr(p, '?');
    slash = strchr(p, '/');
    if (slash != NULL && q != NULL && slash > q)
        slash = NULL;
    hostlen = slash ? (size_t)(slash - p) : q ? (size_t)(q - p) : strlen(p);
    if (slash != NULL) {
        size_t n = q ? (size_t)(q - slash - 1) : strlen(slash + 1);
        if (n >= sizeof path)
            goto bad;
        memcpy(path, slash + 1, n);
        path[n] = '\0';
    }
    if (q != NULL && parse_query(r, q + 1) != 0)
        goto bad;
    if (r->cluster) { /* the seed nodes, parsed by rs__sh_open */
        if (path[0] != '\0' || hostlen == 0 || hostlen >= sizeof r->host)
            goto bad;
        memcpy(r->host, p, hostlen);
        r->host[hostlen] = '\0';
        return 0;
    }
    if (sentinel) {
        if (parse_sentinels(r, p, hostlen) != 0 || path[0] == '\0' ||
            strlen(path) >= sizeof r->master)
            goto bad;
        memcpy(r->master, path, strlen(path) + 1); /* fits: checked above */
        return 0;
    }
    if (parse_hostport(p, hostlen, r->host, sizeof r->host, &r->port, 6379) != 0)
        goto bad;
    if (path[0] != '\0') {
        char *end;
        long db = strtol(path, &end, 10);
        if (*end != '\0' || db < 0 || db > 1000000)
            goto bad;
        r->db = (int)db;
    }
    return 0;
bad:
    snprintf(errbuf, errlen,
             "bad Redis address \"%s\" (redis://[user:password@]HOST[:PORT][/DB] or "
             "redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME, with optional "
             "?replicas=N&timeout=MS, MS from 100 to 10000; or "
             "redis+cluster://[user:password@]HOST[:PORT][,HOST[:PORT]...] with the same "
             "options)",
             url);
    return SEMA_EINVAL;
}

/* ---- connection lifecycle ---- */

static void schedule_reconnect(rs_t *r);

/* The connection is gone (refused, dropped, timed out): commands in flight were handed to
 * rs__cmd_lost by hiredis; reconnect after a backoff (a Sentinel that gave no primary: the
 * next one). */
static void conn_gone(rs_conn_t *c, const char *why)
{
    rs_t *r = c->r;

    if (c->state == RS_CONN_DOWN)
        return;
    if (c == &r->sent && c->state != RS_CONN_READY)
        r->sentinel_at = (r->sentinel_at + 1) % r->nsentinels;
    c->state = RS_CONN_DOWN;
    c->ac = NULL;
    c->since = 0;
    if (r->closing)
        return;
    if (c == &r->cmd) {
        if (r->down_since == 0 || (!r->conn_once && r->reconnects == 1))
            log_warn("redis: %s %s:%d (%s); trying again", r->conn_once ? "lost" : "cannot reach",
                     r->host, r->port, why ? why : "closed");
        if (r->down_since == 0)
            r->down_since = rs__now(r);
        r->resyncing = 0;
        rs__wait_lost(r);
    }
    schedule_reconnect(r);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    rs_conn_t *c = ac->data;

    if (status != REDIS_OK)
        conn_gone(c, ac->errstr);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rs_conn_t *c = ac->data;

    conn_gone(c, status == REDIS_OK ? NULL : ac->errstr);
}

void rs__async_auth(const rs_t *r, redisAsyncContext *ac, redisCallbackFn *fn, void *priv)
{
    if (r->pass[0] == '\0')
        return;
    if (r->user[0] != '\0')
        redisAsyncCommand(ac, fn, priv, "AUTH %s %s", r->user, r->pass);
    else
        redisAsyncCommand(ac, fn, priv, "AUTH %s", r->pass);
}

/* The resolution of a connection's host name (r->rv) answered. */
static void on_resolved(rs_resolve_t *v)
{
    rs_t *r = v->data;

    r->rv_done = 1;
    if (!r->closing && r->rv_again != NULL)
        r->rv_again(r);
    rs__handle_done(r);
}

/* The address to connect to for host: host itself when it is an address, else what its
 * resolution (r->rv, one at a time) found. NULL while it is resolved (then again(r) runs, once
 * it has: it asks again), or when it could not be (*why says why). */
static const char *address_for(rs_t *r, const char *host, void (*again)(rs_t *r), const char **why)
{
    rs_resolve_t *v = &r->rv;

    *why = NULL;
    if (rs__resolve_is_address(host))
        return host;
    r->rv_again = again;
    if (v->busy)
        return NULL;
    if (r->rv_done && strcmp(v->host, host) == 0) {
        r->rv_done = 0;
        *why = v->failed ? v->why : NULL;
        return v->failed ? NULL : v->addr;
    }
    r->rv_done = 0;
    if (rs__resolve_start(v, r->loop, host, on_resolved, r) != 0) {
        *why = v->why;
        return NULL;
    }
    r->handles_open++; /* (r is freed after its answer) */
    return NULL;
}

/* A connection to host:port (its name resolved first: NULL and *resolving, and `again` runs
 * later), or NULL when it cannot be made (said at warn). */
static redisAsyncContext *open_ctx(rs_t *r, rs_conn_t *c, const char *host, int port,
                                   void (*again)(rs_t *r), int *resolving)
{
    char why[128];
    const char *gai_why, *addr = address_for(r, host, again, &gai_why);
    redisAsyncContext *ac = NULL;

    *resolving = addr == NULL && gai_why == NULL;
    if (*resolving)
        return NULL;
    if (addr != NULL)
        ac = rs__async_open(r->loop, addr, port, why, sizeof why);
    if (ac == NULL) {
        log_warn("redis: cannot connect to %s:%d: %s", host, port, addr != NULL ? why : gai_why);
        return NULL;
    }
    ac->data = c;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->state = RS_CONN_CONNECTING;
    return ac;
}

/* Close c (in-flight commands come back lost, to be retried) and go on as for a lost
 * connection, said as `why` (not as hiredis's "closed"). */
static void conn_close(rs_conn_t *c, const char *why)
{
    redisAsyncContext *ac = c->ac;

    ac->onDisconnect = NULL;
    redisAsyncFree(ac);
    conn_gone(c, why);
}

/* The command connection goes, and the subscriber with it. */
static void drop_cmd(rs_t *r, const char *why)
{
    conn_close(&r->cmd, why);
    if (r->sub.ac != NULL)
        conn_close(&r->sub, why);
}

void rs__conn_drop(rs_t *r, const char *why)
{
    if (r->cmd.ac == NULL)
        return;
    log_warn("redis: dropping the connection: %s", why);
    drop_cmd(r, why);
}

/* What a start that has not answered waits for, in the log's words. */
static const char *start_phase(const rs_t *r, const rs_conn_t *c)
{
    if (!(c->ac->c.flags & REDIS_CONNECTED))
        return "the connect";
    if (c == &r->sent)
        return "SENTINEL get-master-addr-by-name";
    return r->resyncing ? "the library's reload (FUNCTION LOAD, hello)"
                        : "the setup (CONFIG GET, INFO, FUNCTION LOAD, hello)";
}

/* Whether connection c's start is past the command timeout (then `why` says so). */
static int start_overdue(const rs_t *r, const rs_conn_t *c, uint64_t now, char *why, size_t cap)
{
    if (c->ac == NULL || c->since == 0 || now - c->since < r->cmd_timeout_ms)
        return 0;
    snprintf(why, cap, "no answer in %llu ms", (unsigned long long)r->cmd_timeout_ms);
    return 1;
}

void rs__conn_tick(rs_t *r, uint64_t now)
{
    char why[64];

    if (start_overdue(r, &r->sent, now, why, sizeof why)) {
        if (!(r->sent_said & 1u << r->sentinel_at)) /* (once each, until one answers) */
            log_warn("redis: Sentinel %s did not answer %s in %llu ms; asking the next one",
                     r->sentinels[r->sentinel_at], start_phase(r, &r->sent),
                     (unsigned long long)r->cmd_timeout_ms);
        r->sent_said |= 1u << r->sentinel_at;
        conn_close(&r->sent, why);
    }
    if (start_overdue(r, &r->cmd, now, why, sizeof why)) {
        if (!r->stall_said) /* (once until it is ready again: the backoff retries it) */
            log_warn("redis: %s:%d did not answer %s in %llu ms; dropping the connection", r->host,
                     r->port, start_phase(r, &r->cmd), (unsigned long long)r->cmd_timeout_ms);
        r->stall_said = 1;
        r->cmd_timeouts++;
        drop_cmd(r, why);
    }
}

static int is_error(const redisReply *rep)
{
    return rep == NULL || rep->type == REDIS_REPLY_ERROR;
}

/* AUTH, SELECT, ROLE: a failure drops the connection (and says why). */
static void setup_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *c = ac->data;
    redisReply *rep = reply;
    const char *what = priv;

    if (rep == NULL)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        log_warn("redis: %s failed: %s", what, rep->str);
        redisAsyncFree(ac);
        conn_gone(c, what);
        return;
    }
    if (strcmp(what, "ROLE") == 0 && (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
                                      rep->element[0]->type != REDIS_REPLY_STRING ||
                                      strcmp(rep->element[0]->str, "master") != 0)) {
        log_warn("redis: %s:%d is not a primary; asking Sentinel again", c->r->host, c->r->port);
        redisAsyncFree(ac);
        conn_gone(c, "not a primary");
    }
}

static void send_setup(rs_t *r, redisAsyncContext *ac)
{
    rs__async_auth(r, ac, setup_cb, (void *)"AUTH");
    if (r->db != 0)
        redisAsyncCommand(ac, setup_cb, (void *)"SELECT", "SELECT %d", r->db);
}

/* strict durability on Redis rests on Redis's own fsync: say so when it is not "always". */
static void fsync_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_t *r = ((rs_conn_t *)ac->data)->r;
    redisReply *rep = reply;
    int warn = priv != NULL; /* strict, at the first connection: say what it cannot promise */

    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[1]->type != REDIS_REPLY_STRING) {
        r->aof_always = 0; /* CONFIG may be renamed away: nothing to say, nothing proven */
        return;
    }
    if (strcmp(rep->element[0]->str, "appendonly") == 0) {
        r->aof_always &= strcmp(rep->element[1]->str, "yes") == 0;
        if (warn && strcmp(rep->element[1]->str, "yes") != 0)
            log_warn("redis: --durability strict, but Redis does not write an append-only file "
                     "(appendonly no): a Redis restart loses what was acknowledged");
    }
    if (strcmp(rep->element[0]->str, "appendfsync") == 0) {
        r->aof_always &= strcmp(rep->element[1]->str, "always") == 0;
        if (warn && strcmp(rep->element[1]->str, "always") != 0)
            log_warn("redis: --durability strict, but Redis syncs its append-only file \"%s\", "
                     "not \"always\" (see docs/durability.md)",
                     rep->element[1]->str);
    }
}

void rs__info_field(const char *info, const char *name, char *buf, size_t cap)
{
    const char *p = strstr(info, name);
    size_t n = 0, len = strlen(name);

    buf[0] = '\0';
    if (p == NULL || p[len] != ':')
        return;
    p += len + 1;
    while (p[n] != '\0' && p[n] != '\r' && p[n] != '\n' && n + 1 < cap)
        n++;
    memcpy(buf, p, n);
    buf[n] = '\0';
}

/* INFO replication: which history of writes this primary carries. */
static void repl_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_t *r = ((rs_conn_t *)ac->data)->r;
    redisReply *rep = reply;
    char n[24];

    (void)priv;
    r->replid_new[0] = r->replid2_new[0] = '\0';
    if (rep == NULL || rep->type != REDIS_REPLY_STRING)
        return;
    rs__info_field(rep->str, "master_replid", r->replid_new, sizeof r->replid_new);
    rs__info_field(rep->str, "master_replid2", r->replid2_new, sizeof r->replid2_new);
    rs__info_field(rep->str, "connected_slaves", n, sizeof n);
    r->repl_most = (int)strtol(n, NULL, 10); /* this primary's: WAITs are held to it from now */
}

/* Whether this primary is not the one (the same history) this instance last said hello to. */
static int primary_changed(const rs_t *r)
{
    return r->replid[0] != '\0' && r->replid_new[0] != '\0' &&
           strcmp(r->replid, r->replid_new) != 0;
}

/* Whether every write acknowledged on the primary before is on every replica it had: strict,
 * and every WAIT that confirmed them asked for at least as many replicas as it had (whichever
 * replica Sentinel promotes then has them). A WAIT for fewer proves nothing: the replicas that
 * answered it need not be the one promoted. */
static int on_every_replica(const rs_t *r)
{
    return r->strict && r->replicas > 0 && !r->short_of_all;
}

/* Whether this primary may lack writes acknowledged on the one before: it is not the primary
 * this instance last said hello to, and nothing proves it has them. Every replica having them
 * does (above); so does a restart of the same Redis that syncs every write to its append-only
 * file. */
static int unproven(const rs_t *r)
{
    int restarted = strcmp(r->replid2_new, r->replid) != 0; /* not a promoted replica of it */

    if (!primary_changed(r) || on_every_replica(r))
        return 0; /* the first hello, the same history, or every replica had every write */
    return !(restarted && r->aof_always);
}

static void hello_cb(redisAsyncContext *ac, void *reply, void *priv);

/* hello: the head, then a new epoch id (used if there is none: a random number below 2^52),
 * the epoch it knew ("" at its start), its max ttl, the latest lease expiry it heard of, and
 * "1" when this primary may lack acknowledged writes (unproven): grants then pause as after
 * lost data. */
static void send_hello(rs_t *r)
{
    char maxttl[24], horizon[24], fresh[24];
    const char *argv[] = {"FCALL", "sema",   "1",     "sema:epoch", "hello",
                          "",      "0",      r->inst, "",           "",
                          fresh,   r->epoch, maxttl,  horizon,      unproven(r) ? "1" : "0"};
    size_t lens[sizeof argv / sizeof argv[0]];
    uint64_t id;

    engine__random(r->front, &id, sizeof id); /* below 2^52: exact in the script's numbers */
    snprintf(fresh, sizeof fresh, "%llu", (unsigned long long)((id >> 12) | 1));
    snprintf(maxttl, sizeof maxttl, "%lld", (long long)r->cfg.max_ttl_ms);
    snprintf(horizon, sizeof horizon, "%lld", (long long)r->horizon_ms);
    for (size_t i = 0; i < sizeof argv / sizeof argv[0]; i++)
        lens[i] = strlen(argv[i]);
    redisAsyncCommandArgv(r->cmd.ac, hello_cb, NULL, (int)(sizeof argv / sizeof argv[0]), argv,
                          lens);
}

static void load_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *c = ac->data;
    rs_t *r = c->r;
    redisReply *rep = reply;

    (void)priv;
    if (rep == NULL)
        return;
    if (rep->type != REDIS_REPLY_STRING) {
        log_warn("redis: FUNCTION LOAD failed (semad needs Redis 7 or later): %s",
                 is_error(rep) ? rep->str : "bad reply");
        redisAsyncFree(ac);
        conn_gone(c, "FUNCTION LOAD failed");
        return;
    }
    send_hello(r);
}

/* Say why grants pause, or go on, after the primary changed (at warn: an operator wants
 * both). */
static void log_primary_change(const rs_t *r, int lost)
{
    char had[24];

    snprintf(had, sizeof had, r->short_had > 0 ? "%d" : "an unknown number of", r->short_had);
    if (unproven(r) && r->strict && r->replicas > 0)
        log_warn("redis: the primary changed (%s:%d carries replication id %s, not %s), and the "
                 "one before had %s replicas while WAIT asked for %d: the replica promoted may "
                 "lack writes the others confirmed. No grants until every lease granted before "
                 "may have run out (?replicas=N, N the number of replicas, resumes at once)",
                 r->host, r->port, r->replid_new, r->replid, had, r->replicas);
    else if (unproven(r))
        log_warn("redis: the primary changed (%s:%d carries replication id %s, not %s) and "
                 "nothing proves it has every acknowledged write: no grants until every lease "
                 "granted before may have run out",
                 r->host, r->port, r->replid_new, r->replid);
    else if (!lost && primary_changed(r))
        log_warn("redis: %s (%s:%d carries replication id %s, not %s), and %s: grants go on",
                 strcmp(r->replid2_new, r->replid) == 0 ? "a replica became the primary"
                                                        : "the primary restarted or changed",
                 r->host, r->port, r->replid_new, r->replid,
                 on_every_replica(r)
                     ? "every acknowledged write was on every replica (WAIT counted them all)"
                     : "it syncs every write to its append-only file");
}

static void hello_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *c = ac->data;
    rs_t *r = c->r;
    redisReply *rep = reply;

    (void)priv;
    if (rep == NULL)
        return;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 5 &&
        strcmp(rs__el_str(rep, 3, NULL), "layout") == 0) {
        log_error("redis: %s:%d holds semad data of another layout (%s; this semad reads and "
                  "writes layout %d): empty it (FLUSHDB) or run the semad that wrote it",
                  r->host, r->port, rs__el_str(rep, 4, NULL), RS_LAYOUT);
        redisAsyncFree(ac);
        conn_gone(c, "another layout of semad's keys");
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[0]->len >= sizeof r->epoch) {
        log_warn("redis: the epoch check failed: %s", is_error(rep) ? rep->str : "bad reply");
        redisAsyncFree(ac);
        conn_gone(c, "epoch check failed");
        return;
    }
    int lost = r->epoch[0] != '\0' && strcmp(r->epoch, rep->element[0]->str) != 0;

    if (lost) {
        r->epoch_changes++;
        log_warn("redis: Redis lost its data (epoch %s, now %s): no grants until every lease "
                 "it held has run out",
                 r->epoch, rep->element[0]->str);
        rs__waiters_gone(r); /* their records went with it */
    }
    memcpy(r->epoch, rep->element[0]->str, rep->element[0]->len);
    r->epoch[rep->element[0]->len] = '\0';
    r->contact_mono = rs__now(r);
    log_primary_change(r, lost);
    if (primary_changed(r)) /* a new primary's replicas: what it lacks, they may lack too */
        r->short_of_all = unproven(r);
    if (r->replid_new[0] != '\0')
        memcpy(r->replid, r->replid_new, sizeof r->replid);
    r->safe_at_ms = strtoll(rep->element[1]->str, NULL, 10);
    r->clock_off = rs__el_i64(rep, 2) - (int64_t)rs__now(r);
    rs__on_ready(r);
    if (lost) { /* the event logs went with the data: streams get "reset" */
        rs__ev_catch_up_all(r);
        rs__drain(r);
    }
}

/* Load the library and check the epoch again (after "Function not found", or an epoch
 * that changed). */
void rs__resync(rs_t *r)
{
    const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", rs__lua};
    size_t lens[] = {8, 4, 7, strlen(rs__lua)};

    if (r->resyncing || r->cmd.state != RS_CONN_READY)
        return;
    r->resyncing = 1;
    r->cmd.since = rs__now(r);
    redisAsyncCommandArgv(r->cmd.ac, load_cb, NULL, 4, argv, lens);
}

/* Before a connection to the primary (the same or another): had the one before more replicas
 * than `replicas`, writes other instances acknowledged there may be missing on the one
 * promoted, whether or not this one wrote since: it takes the primary for unproven too, as
 * they do. The count starts again with the new connection's INFO. */
static void held_to_every_replica(rs_t *r)
{
    if (r->repl_sentinel > r->repl_most)
        r->repl_most = r->repl_sentinel;
    if (r->strict && r->replicas > 0 && r->repl_most > r->replicas) {
        r->short_of_all = 1;
        r->short_had = r->repl_most;
    }
    r->repl_most = r->count_due = 0;
}

static void connect_primary(rs_t *r)
{
    int resolving;
    redisAsyncContext *ac;
    const char *argv[] = {"FUNCTION", "LOAD", "REPLACE", rs__lua};
    size_t lens[] = {8, 4, 7, strlen(rs__lua)};

    r->cmd.since = rs__now(r); /* (until hello answers: rs__on_ready) */
    ac = open_ctx(r, &r->cmd, r->host, r->port, connect_primary, &resolving);
    if (resolving)
        return;
    if (ac == NULL) {
        r->cmd.state = RS_CONN_DOWN;
        schedule_reconnect(r);
        return;
    }
    send_setup(r, ac);
    r->aof_always = 1; /* (until CONFIG says otherwise, or cannot be read) */
    redisAsyncCommand(ac, fsync_cb, r->strict && !r->conn_once ? (void *)"warn" : NULL,
                      "CONFIG GET appendonly");
    redisAsyncCommand(ac, fsync_cb, r->strict && !r->conn_once ? (void *)"warn" : NULL,
                      "CONFIG GET appendfsync");
    held_to_every_replica(r);
    redisAsyncCommand(ac, repl_cb, NULL, "INFO replication");
    if (r->master[0] != '\0')
        redisAsyncCommand(ac, setup_cb, (void *)"ROLE", "ROLE");
    redisAsyncCommandArgv(ac, load_cb, NULL, 4, argv, lens);
}

/* ---- Sentinel: ask for the primary's address, then listen for +switch-master ---- */

static void sentinel_next(rs_t *r);
static void reconnect_cb(uv_timer_t *t);

static void sentinel_msg_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *c = ac->data;
    rs_t *r = c->r;
    redisReply *rep = reply;

    (void)priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING || strcmp(rep->element[0]->str, "message") != 0)
        return;
    /* "<master> <old ip> <old port> <new ip> <new port>" */
    if (rep->element[2]->type == REDIS_REPLY_STRING &&
        strncmp(rep->element[2]->str, r->master, strlen(r->master)) == 0 &&
        rep->element[2]->str[strlen(r->master)] == ' ') {
        log_warn("redis: Sentinel switched the primary of %s: %s", r->master, rep->element[2]->str);
        rs__conn_drop(r, "the primary changed");
        /* ask again now: while the old primary was away the backoff grew (up to 3 s) */
        r->backoff_ms = 0;
        uv_timer_start(&r->reconnect_timer, reconnect_cb, 0, 0);
    }
}

/* The replicas Sentinel knows for the primary, whatever their state: any of them may be
 * promoted, so WAIT is held to at least that many (one that went away still counts). */
static void sentinel_replicas_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_t *r = ((rs_conn_t *)ac->data)->r;
    redisReply *rep = reply;

    (void)priv;
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements < 1000)
        r->repl_sentinel = (int)rep->elements;
}

static void sentinel_addr_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *c = ac->data;
    rs_t *r = c->r;
    redisReply *rep = reply;
    long port;

    (void)priv;
    if (rep == NULL)
        return;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[0]->len >= sizeof r->host ||
        rep->element[1]->type != REDIS_REPLY_STRING ||
        (port = strtol(rep->element[1]->str, NULL, 10)) <= 0 || port > 65535) {
        log_warn("redis: Sentinel %s does not know a primary named %s",
                 r->sentinels[r->sentinel_at], r->master);
        conn_close(c, "no primary"); /* (the next Sentinel) */
        return;
    }
    if (r->host[0] != '\0' &&
        (strlen(r->host) != rep->element[0]->len ||
         memcmp(r->host, rep->element[0]->str, rep->element[0]->len) != 0 || r->port != (int)port))
        log_warn("redis: Sentinel %s names %s:%s the primary of %s (it was %s:%d)",
                 r->sentinels[r->sentinel_at], rep->element[0]->str, rep->element[1]->str,
                 r->master, r->host, r->port);
    memcpy(r->host, rep->element[0]->str, rep->element[0]->len);
    r->host[rep->element[0]->len] = '\0';
    r->port = (int)port;
    c->state = RS_CONN_READY;
    c->since = 0;
    r->sent_said = 0;
    redisAsyncCommand(ac, sentinel_replicas_cb, NULL, "SENTINEL REPLICAS %s", r->master);
    redisAsyncCommand(ac, sentinel_msg_cb, NULL, "SUBSCRIBE +switch-master");
    connect_primary(r);
}

static void sentinel_next(rs_t *r)
{
    char host[256];
    int port, resolving;
    const char *hp = r->sentinels[r->sentinel_at];

    if (r->repl_sentinel > r->repl_most) /* (what the Sentinel before listed still counts) */
        r->repl_most = r->repl_sentinel;
    r->repl_sentinel = 0; /* (until this Sentinel lists them) */
    if (r->sent.ac != NULL) {
        redisAsyncContext *ac = r->sent.ac; /* (down first: not a Sentinel that gave none) */
        r->sent.ac = NULL;
        r->sent.state = RS_CONN_DOWN;
        redisAsyncFree(ac);
    }
    r->sent.since = rs__now(r); /* (until it names the primary: sentinel_addr_cb) */
    if (parse_hostport(hp, strlen(hp), host, sizeof host, &port, 26379) == 0 &&
        open_ctx(r, &r->sent, host, port, sentinel_next, &resolving) == NULL && resolving)
        return;
    if (r->sent.ac == NULL) {
        r->sentinel_at = (r->sentinel_at + 1) % r->nsentinels;
        schedule_reconnect(r);
        return;
    }
    redisAsyncCommand(r->sent.ac, sentinel_addr_cb, NULL, "SENTINEL get-master-addr-by-name %s",
                      r->master);
}

/* ---- reconnects ---- */

static void reconnect_cb(uv_timer_t *t)
{
    rs_t *r = t->data;

    if (r->closing)
        return;
    if (r->cmd.state == RS_CONN_DOWN)
        rs__connect(r);
    else if (r->sub.state == RS_CONN_DOWN && r->cmd.state == RS_CONN_READY)
        rs__sub_connect(r);
}

static void schedule_reconnect(rs_t *r)
{
    uint64_t jitter;

    if (r->closing)
        return;
    r->backoff_ms = r->backoff_ms == 0 ? 50 : r->backoff_ms * 2;
    if (r->backoff_ms > RS_BACKOFF_MAX_MS)
        r->backoff_ms = RS_BACKOFF_MAX_MS;
    engine__random(r->front, &jitter, sizeof jitter);
    uv_timer_start(&r->reconnect_timer, reconnect_cb, r->backoff_ms / 2 + jitter % r->backoff_ms,
                   0);
}

void rs__connect(rs_t *r)
{
    if (r->cmd.state != RS_CONN_DOWN)
        return;
    r->reconnects++;
    if (r->master[0] != '\0') {
        sentinel_next(r);
    } else {
        connect_primary(r);
    }
}

void rs__on_ready(rs_t *r)
{
    int first = r->cmd.state != RS_CONN_READY;
    int again = first && r->conn_once; /* back after the connection went */

    r->cmd.state = RS_CONN_READY;
    r->cmd.since = 0;
    r->stall_said = 0;
    r->resyncing = 0;
    r->backoff_ms = 0;
    if (r->down_since != 0 && r->conn_once)
        log_info("redis: connected to %s:%d again", r->host, r->port);
    r->conn_once = 1;
    r->down_since = 0;
    engine__backend_ready(r->front); /* (the first time: semad says "ready") */
    /* commands that were in flight when the connection went go first, in their order */
    elist_splice(&r->retry, &r->pending);
    elist_splice(&r->pending, &r->retry);
    r->npending = 0;
    while (!elist_empty(&r->pending)) {
        rs_cmd_t *c = ECONTAINER(r->pending.next, rs_cmd_t, link);
        elist_remove(&c->link);
        rs__send(r, c);
    }
    if (first && r->sub.state == RS_CONN_DOWN)
        rs__sub_connect(r);
    if (again)
        rs__check_all(r); /* this Redis may lack some of them (a failover) */
    rs__beat(r);
    rs__drain(r); /* requests answered on the way (rs__send) */
}

void rs__describe(void *be, char *buf, size_t cap)
{
    const rs_t *r = be;
    size_t n;

    if (r->master[0] == '\0') {
        snprintf(buf, cap, r->db != 0 ? "redis %s:%d db %d" : "redis %s:%d", r->host, r->port,
                 r->db);
        return;
    }
    n = (size_t)snprintf(buf, cap, "redis %s via Sentinels", r->master);
    for (int i = 0; i < r->nsentinels && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : " ", r->sentinels[i]);
    if (r->host[0] != '\0' && n < cap)
        snprintf(buf + n, cap - n, " (primary %s:%d)", r->host, r->port);
}

/* ---- the subscriber connection ---- */

static void sub_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    rs_conn_t *c = ac->data;
    rs_t *r = c->r;
    redisReply *rep = reply;

    (void)priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(rep->element[0]->str, "message") == 0) {
        rs__on_message(r, rep);
    } else if (strcmp(rep->element[0]->str, "subscribe") == 0) {
        const redisReply *ch = rep->element[1];
        if (c->state != RS_CONN_READY) {
            /* (re)subscribed: what a lost message would have said is collected now */
            c->state = RS_CONN_READY;
            rs__beat(r);
        }
        /* a semaphore's events: those published before this took effect are in its log */
        if (ch->type == REDIS_REPLY_STRING && ch->len > 8 && strncmp(ch->str, "sema:ev:", 8) == 0)
            rs__ev_catch_up(r, ch->str + 8, ch->len - 8);
        rs__drain(r);
    }
}

static void sub_send(rs_t *r, const char *verb, const char *chan, size_t len)
{
    const char *argv[] = {verb, chan};
    size_t lens[] = {strlen(verb), len};

    redisAsyncCommandArgv(r->sub.ac, sub_cb, NULL, 2, argv, lens);
}

static void sub_watch_each(void *arg, enode_t *n)
{
    rs_t *r = arg;
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    s->subscribed = 0;
    if (s->watched)
        rs__sub_watch(r, s, 1);
}

void rs__sub_connect(rs_t *r)
{
    char chan[64];
    int n, resolving;

    if (open_ctx(r, &r->sub, r->host, r->port, rs__sub_connect, &resolving) == NULL && resolving)
        return;
    if (r->sub.ac == NULL) {
        r->sub.state = RS_CONN_DOWN;
        schedule_reconnect(r);
        return;
    }
    send_setup(r, r->sub.ac);
    n = snprintf(chan, sizeof chan, "sema:wake:%s", r->inst);
    sub_send(r, "SUBSCRIBE", chan, (size_t)n);
    sub_send(r, "SUBSCRIBE", "sema:tkt", 8); /* tickets whose status changed */
    etab_each(&r->sems, sub_watch_each, r);
}

/* Subscribe to (or leave) the event channel of a semaphore. */
void rs__sub_watch(rs_t *r, rs_sem_t *s, int on)
{
    size_t len;
    char *chan;

    if ((r->sub.ac == NULL && r->sh == NULL) || (on != 0) == (s->subscribed != 0))
        return;
    if ((chan = rs__key_cat("sema:ev:", s->stem, s->stem_len, "", &len)) == NULL)
        return; /* out of memory: the heartbeat's marker keeps the log; messages wait */
    if (r->sh != NULL && rs__sh_subscribe(r, chan, len, on) != 0)
        on = 0; /* (too many channels: the heartbeat's marker keeps the log) */
    else if (r->sh == NULL)
        sub_send(r, on ? "SUBSCRIBE" : "UNSUBSCRIBE", chan, len);
    sema__free(chan);
    s->subscribed = (uint8_t)on;
}

void rs__conns_close(rs_t *r)
{
    rs_conn_t *cs[] = {&r->cmd, &r->sub, &r->sent};

    r->closing = 1;
    rs__resolve_cancel(&r->rv); /* (its answer still comes, and frees r if last) */
    rs__sh_close(r);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        redisAsyncContext *ac = cs[i]->ac;
        cs[i]->ac = NULL;
        cs[i]->state = RS_CONN_DOWN;
        if (ac != NULL)
            redisAsyncFree(ac);
    }
}
