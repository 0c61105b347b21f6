/* SPDX-License-Identifier: MIT */
/* cmd_bench.c - `sema bench`: a load generator for semad (acquire+release pairs, plain GETs,
 * creates, a mix of every kind of state), plus hand-off latency and parked-waiter memory
 * modes; options and the report. */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/cmd_bench.h"

const char cmd_bench_usage[] =
    "usage: sema bench [-m MODE] [-c N] [-d D | -n N] [OPTIONS...]\n"
    "\n"
    "measure a semad server: one event loop, N keep-alive connections, no pipelining.\n"
    "\n"
    "options:\n"
    "  -s, --server URL      semad to talk to (default $SEMA_SERVER or http://127.0.0.1:7070);\n"
    "                        an https:// one (TLS) for pairs, get and create with --no-create;\n"
    "                        given again (up to 8), instances sharing one state: connection\n"
    "                        i goes to server i % N, and handoff releases on the first and\n"
    "                        wakes its waiter on the second (then the other way round)\n"
    "      --cacert FILE     https://: PEM file of the CAs to trust (default $SEMA_CACERT)\n"
    "  -m, --mode MODE       pairs    acquire then release on the same connection (default)\n"
    "                        get      GET --path, for ceiling and wrk comparisons\n"
    "                        create   PUT NAME-0, NAME-1, ...: many idle semaphores\n"
    "                        handoff  release -> parked waiter latency, one round at a time\n"
    "                        park     every connection parks an acquire on a full semaphore\n"
    "                        mix      every kind of state at once, for soaks: pairs (40%),\n"
    "                                 renewals (10), idempotent retries (10), keyed locks on\n"
    "                                 new keys (12), leases left to expire (5), long-polls\n"
    "                                 that time out (8), tickets read once and abandoned (8),\n"
    "                                 event streams open 1 s (2), semaphores created and\n"
    "                                 deleted (5); on NAME, NAME-full (capacity 1), NAME-kN\n"
    "                                 and NAME-t0..999\n"
    "  -c, --connections N   concurrent connections (default 50)\n"
    "  -d, --duration D      run for D (500ms, 10s, 2m: with its unit; default 10s)\n"
    "  -n, --count N         run N pairs/requests/creates/rounds instead of a duration\n"
    "  -w, --weight W        acquire weight (default 1)\n"
    "      --capacity C      capacity of the semaphores created (default: enough for every\n"
    "                        connection, so nothing parks; 1 for create/handoff/park)\n"
    "  -k, --semaphores K    spread the connections over K semaphores NAME-0..NAME-K-1\n"
    "                        (pairs, K above -c N: connection i takes i, i+N... in turn)\n"
    "      --all             pairs: each acquire takes all K semaphores at once, one lease\n"
    "                        (POST /v1/acquire; K from 2 to 16)\n"
    "      --tenants N       pairs: connection i acquires as tenant t<i % N>\n"
    "      --tenant-max N    the semaphores created cap each tenant at N units\n"
    "      --sem-rate R      the semaphores created grant at most R units a second\n"
    "      --sem-burst B     ... and B at once after a pause (default R)\n"
    "      --name NAME       semaphore name or prefix (default bench)\n"
    "      --path PATH       path for the get mode (default /healthz)\n"
    "      --ttl D           lease ttl sent with each acquire (default 60s)\n"
    "      --rate R          start R operations per second (pairs, get, create, mix), not\n"
    "                        as many as answers allow; starts no connection is free for\n"
    "                        are counted as missed, and apart those owed while sema bench\n"
    "                        itself did not run (its own timer late: the machine)\n"
    "      --interval D      one JSON line per interval D on stdout (latency of its requests,\n"
    "                        operations, errors, missed starts, sema bench's own lateness),\n"
    "                        for pairs, get, create, mix\n"
    "  -P, --pipeline N      requests in flight per connection, get/create only (default 1)\n"
    "      --no-create       use existing semaphores as they are\n"
    "      --server-pid PID  report the server's RSS growth (park, create)\n"
    "      --progress        progress line on stderr (default: when stderr is a terminal)\n"
    "      --json            one JSON line instead of the text report\n"
    "\n"
    "A run deletes the semaphores it made (pairs, handoff) when it ends, and keeps those that\n"
    "existed before; park deletes its semaphore to answer the waiters; create leaves what it\n"
    "made (the idle semaphores it measures: remove them with sema rm).\n"
    "SEMA_TOKEN, if set, is sent as the bearer token of every request (semad --auth).\n"
    "\n"
    "examples:\n"
    "  sema bench -c 50 -d 10s                      acquire+release pairs for 10 s\n"
    "  sema bench -m get --path /healthz -c 50      the server's plain request rate\n"
    "  sema bench -m handoff -n 5000                release -> waiter latency\n"
    "  sema bench -k 2 --all -c 50                  pairs of 2-semaphore acquires\n"
    "  sema bench -m park -c 10000 --server-pid P   memory per parked waiter\n"
    "  sema bench -m create -n 1000000 -P 16 --server-pid P   memory per idle semaphore\n"
    "\n"
    "exit status: 0 done, 1 the run failed (set-up refused, nothing completed), 2 bad\n"
    "arguments, 69 the server cannot be reached\n";

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "loadgen/bench.h"

static const char *const mode_names[BENCH_MODE_COUNT] = {"pairs",   "get",  "create",
                                                         "handoff", "park", "mix"};
static const char *const op_names[BENCH_MODE_COUNT] = {"pairs",     "requests", "creates",
                                                       "hand-offs", "waiters",  "operations"};

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* TLS options that nothing would use are refused, as the other verbs refuse them: --cacert
 * (`given`: not $SEMA_CACERT, a default for https:// servers) with a plain-HTTP `url`, and
 * --cert or --cert-key, as sema bench presents no client certificate. */
static int check_tls_options(const bench_opts_t *o, const char *url, int given)
{
    if (cli_global.cert != NULL || cli_global.cert_key != NULL) {
        fprintf(stderr, "sema bench: --cert and --cert-key are not taken: sema bench presents "
                        "no client certificate\n");
        return -1;
    }
    if (given && !o->tls) {
        fprintf(stderr, "sema bench: --cacert is for an https:// server, and %s%s is plain HTTP\n",
                strstr(url, "://") == NULL ? "http://" : "", url);
        return -1;
    }
    return 0;
}

/* http[s]://host[:port][/] -> the resolved address and the Host header. */
static int parse_server(const char *url, bench_opts_t *o)
{
    o->tls = strncmp(url, "https://", 8) == 0;
    const char *p = o->tls ? url + 8 : strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    char host[256], port[8] = "7070";
    size_t hl = strcspn(p, "/");
    if (hl == 0 || hl >= sizeof(host) || o->servers >= BENCH_SERVERS_MAX)
        return -1;
    memcpy(host, p, hl);
    host[hl] = '\0';
    if (o->servers == 0) { /* the Host header and the report name the first */
        snprintf(o->host, sizeof(o->host), "%s", host);
        snprintf(o->url, sizeof(o->url), "%s://%s", o->tls ? "https" : "http", host);
    }
    char *colon = strrchr(host, ':');
    if (colon && !strchr(colon, ']')) {
        snprintf(port, sizeof(port), "%s", colon + 1);
        *colon = '\0';
    }
    char *h = host;
    if (h[0] == '[') {
        h++;
        h[strcspn(h, "]")] = '\0';
    }
    snprintf(o->tls_name, sizeof(o->tls_name), "%s", h);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(h, port, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(&o->addr[o->servers], ai->ai_addr, ai->ai_addrlen);
    o->addr_len[o->servers] = ai->ai_addrlen;
    o->servers++;
    freeaddrinfo(ai);
    return 0;
}

static int parse_mode(const char *s, bench_mode_t *mode)
{
    for (int i = 0; i < BENCH_MODE_COUNT; i++)
        if (strcmp(s, mode_names[i]) == 0) {
            *mode = (bench_mode_t)i;
            return 0;
        }
    return -1;
}

enum {
    OPT_CAPACITY = 256,
    OPT_NAME,
    OPT_PATH,
    OPT_TTL,
    OPT_NO_CREATE,
    OPT_PID,
    OPT_PROGRESS,
    OPT_JSON,
    OPT_CACERT,
    OPT_RATE,
    OPT_INTERVAL,
    OPT_ALL,
    OPT_TENANTS,
    OPT_TENANT_MAX,
    OPT_SEM_RATE,
    OPT_SEM_BURST
};

static const struct option long_opts[] = {{"server", required_argument, NULL, 's'},
                                          {"mode", required_argument, NULL, 'm'},
                                          {"connections", required_argument, NULL, 'c'},
                                          {"duration", required_argument, NULL, 'd'},
                                          {"count", required_argument, NULL, 'n'},
                                          {"weight", required_argument, NULL, 'w'},
                                          {"capacity", required_argument, NULL, OPT_CAPACITY},
                                          {"semaphores", required_argument, NULL, 'k'},
                                          {"name", required_argument, NULL, OPT_NAME},
                                          {"path", required_argument, NULL, OPT_PATH},
                                          {"ttl", required_argument, NULL, OPT_TTL},
                                          {"pipeline", required_argument, NULL, 'P'},
                                          {"no-create", no_argument, NULL, OPT_NO_CREATE},
                                          {"server-pid", required_argument, NULL, OPT_PID},
                                          {"progress", no_argument, NULL, OPT_PROGRESS},
                                          {"json", no_argument, NULL, OPT_JSON},
                                          {"cacert", required_argument, NULL, OPT_CACERT},
                                          {"all", no_argument, NULL, OPT_ALL},
                                          {"tenants", required_argument, NULL, OPT_TENANTS},
                                          {"tenant-max", required_argument, NULL, OPT_TENANT_MAX},
                                          {"sem-rate", required_argument, NULL, OPT_SEM_RATE},
                                          {"sem-burst", required_argument, NULL, OPT_SEM_BURST},
                                          {"rate", required_argument, NULL, OPT_RATE},
                                          {"interval", required_argument, NULL, OPT_INTERVAL},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};

/* Applies one option; 0, 1 for --help, or -1 with a message. */
static int apply_opt(int ch, const char *arg, bench_opts_t *o, const char **server,
                     unsigned *nserver)
{
    uint64_t v = 0;
    int64_t ms = 0;
    int bad = 0;
    switch (ch) {
    case 's':
        bad = *nserver >= BENCH_SERVERS_MAX;
        server[bad ? 0 : (*nserver)++] = arg;
        break;
    case 'm':
        bad = parse_mode(arg, &o->mode);
        break;
    case 'c':
        bad = parse_u64(arg, 1, BENCH_CONN_MAX, &v);
        o->conns = (unsigned)v;
        break;
    case 'd': /* the duration syntax of every sema verb */
        bad = cli_parse_duration_ms(arg, &ms) != 0 || !(ms > 0 && ms < 86400000);
        o->duration_s = (double)ms / 1000.0;
        break;
    case 'n':
        bad = parse_u64(arg, 1, UINT64_MAX / 2, &o->count);
        break;
    case 'w':
        bad = parse_u64(arg, 1, UINT64_MAX / 2, &o->weight);
        break;
    case OPT_CAPACITY:
        bad = parse_u64(arg, 1, (1ull << 53), &o->capacity);
        break;
    case 'k':
        bad = parse_u64(arg, 1, 1000000, &v);
        o->sems = (unsigned)v;
        break;
    case OPT_NAME:
        bad = strlen(arg) >= 100 || !*arg || strcspn(arg, "/?#% ") != strlen(arg);
        snprintf(o->name, sizeof(o->name), "%s", arg);
        break;
    case OPT_PATH:
        bad = arg[0] != '/' || strlen(arg) >= sizeof(o->path);
        snprintf(o->path, sizeof(o->path), "%s", arg);
        break;
    case OPT_TTL:
        bad = cli_parse_duration_ms(arg, &ms) != 0 || !(ms > 0 && ms <= 86400000);
        o->ttl_ms = ms;
        break;
    case 'P':
        bad = parse_u64(arg, 1, BENCH_PIPE_MAX, &v);
        o->pipeline = (unsigned)v;
        break;
    case OPT_NO_CREATE:
        o->no_setup = true;
        break;
    case OPT_PID:
        bad = parse_u64(arg, 1, 1u << 30, &v);
        o->server_pid = (pid_t)v;
        break;
    case OPT_PROGRESS:
        o->progress = true;
        break;
    case OPT_JSON:
        o->json = true;
        break;
    case OPT_CACERT:
        o->cacert = arg;
        break;
    case OPT_ALL:
        o->all = true;
        break;
    case OPT_TENANTS:
        bad = parse_u64(arg, 1, BENCH_TENANTS_MAX, &v);
        o->tenants = (unsigned)v;
        break;
    case OPT_TENANT_MAX:
        bad = parse_u64(arg, 1, (1ull << 53), &o->tenant_max);
        break;
    case OPT_SEM_RATE:
        bad = parse_u64(arg, 1, 1000000000, &o->rate_per_s);
        break;
    case OPT_SEM_BURST:
        bad = parse_u64(arg, 1, 1000000000, &o->rate_burst);
        break;
    case OPT_RATE:
        bad = parse_u64(arg, 1, 10000000, &v);
        o->rate = (double)v;
        break;
    case OPT_INTERVAL:
        bad = cli_parse_duration_ms(arg, &ms) != 0 || !(ms >= 100 && ms < 86400000);
        o->interval_s = (double)ms / 1000.0;
        break;
    case 'h':
        return 1;
    default:
        return -1;
    }
    if (bad)
        fprintf(stderr, "sema bench: bad value for -%c%s: %s\n", ch < 256 ? ch : '-',
                ch < 256 ? "" : " (see --help)", arg ? arg : "");
    return bad ? -1 : 0;
}

static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    /* the global options given before the verb are the defaults (main.c) */
    const char *server[BENCH_SERVERS_MAX] = {cli_global.server ? cli_global.server
                                                               : getenv("SEMA_SERVER")};
    unsigned nserver = 0;
    *o = (bench_opts_t){.mode = BENCH_PAIRS,
                        .conns = 50,
                        .duration_s = 10.0,
                        .weight = 1,
                        .sems = 1,
                        .ttl_ms = 60000,
                        .pipeline = 1};
    snprintf(o->name, sizeof(o->name), "bench");
    snprintf(o->path, sizeof(o->path), "/healthz");
    const char *token = getenv("SEMA_TOKEN"); /* semad --auth: sent with every request */
    if (token != NULL && token[0] != '\0' && strlen(token) < sizeof(o->auth) - 32 &&
        strpbrk(token, " \t\r\n") == NULL)
        snprintf(o->auth, sizeof(o->auth), "Authorization: Bearer %s\r\n", token);
    o->cacert = cli_global.cacert ? cli_global.cacert : getenv("SEMA_CACERT");
    if (o->cacert != NULL && *o->cacert == '\0')
        o->cacert = NULL;
    const char *env_cacert = cli_global.cacert ? NULL : o->cacert; /* a default, not an ask */
    o->json = cli_global.json;
    o->progress = isatty(STDERR_FILENO);
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "s:m:c:d:n:w:k:P:h", long_opts, NULL)) != -1) {
        int rc = apply_opt(ch, optarg, o, server, &nserver);
        if (rc != 0)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "sema bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    for (unsigned i = 0; i < (nserver ? nserver : 1); i++) {
        const char *url = server[i] && *server[i] ? server[i] : "http://127.0.0.1:7070";
        if (parse_server(url, o) != 0) {
            fprintf(stderr, "sema bench: cannot resolve the server '%s'\n", url);
            return -1;
        }
        if (check_tls_options(o, url, o->cacert != NULL && o->cacert != env_cacert) != 0)
            return -1;
    }
    if (o->all && (o->mode != BENCH_PAIRS || o->sems < 2 || o->sems > BENCH_ALL_MAX)) {
        fprintf(stderr, "sema bench: --all is for pairs, with -k from 2 to %d\n", BENCH_ALL_MAX);
        return -1;
    }
    if (o->rate_burst && !o->rate_per_s) {
        fprintf(stderr, "sema bench: --sem-burst needs --sem-rate\n");
        return -1;
    }
    if (o->tls && (o->mode == BENCH_HANDOFF || o->mode == BENCH_PARK || !o->no_setup)) {
        fprintf(stderr, "sema bench: https:// servers: modes pairs, get and create, with "
                        "--no-create (create the semaphores first, with sema create)\n");
        return -1;
    }
    return 0;
}

/* Capacity defaults and the limits each mode needs. */
static void settle_opts(bench_opts_t *o)
{
    if (o->mode == BENCH_HANDOFF || o->mode == BENCH_PARK)
        o->capacity = 1, o->weight = 1, o->sems = 1;
    if (o->mode == BENCH_MIX)
        o->weight = 1, o->sems = 1;
    if (o->mode == BENCH_MIX && o->capacity == 0)
        o->capacity = 1000000; /* nothing parks, leases left to expire included */
    if (o->capacity == 0) {
        uint64_t per_sem = o->all ? o->conns : (o->conns + o->sems - 1) / o->sems;
        o->capacity = o->mode == BENCH_CREATE ? 1 : per_sem * o->weight;
    }
    if (o->mode == BENCH_PAIRS || o->mode == BENCH_MIX)
        o->pipeline = 1;
    /* park opens a connection per waiter (and handoff a few): raise the descriptor limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* pairs and mix: PUT the semaphores; made[i] is set for those that did not exist before,
 * which cleanup_semaphores deletes when the run is over (the mix's NAME-full is made[sems]).
 * (handoff and park make and delete theirs themselves; create's are what it measures.) */
static int setup_semaphores(const bench_opts_t *o, unsigned char *made)
{
    if (o->no_setup || (o->mode != BENCH_PAIRS && o->mode != BENCH_MIX))
        return 0;
    int fd = bench_sync_connect(o);
    if (fd < 0) {
        fprintf(stderr, "sema bench: cannot connect to %s\n", o->url);
        return -1;
    }
    char name[BENCH_NAME_MAX + 24];
    int rc = 0;
    for (unsigned i = 0; i < o->sems && rc >= 0; i++) {
        bench_sem_name(o, i, name, sizeof(name));
        rc = bench_put_semaphore(fd, o, name, o->capacity);
        made[i] = rc > 0;
    }
    if (o->mode == BENCH_MIX && rc >= 0) { /* the long-polls' and tickets' semaphore */
        snprintf(name, sizeof(name), "%s-full", o->name);
        rc = bench_put_semaphore(fd, o, name, 1);
        made[o->sems] = rc > 0;
    }
    close(fd);
    return rc < 0 ? -1 : 0;
}

static void cleanup_semaphores(const bench_opts_t *o, const unsigned char *made)
{
    int fd = -1;
    char name[BENCH_NAME_MAX + 24];
    for (unsigned i = 0; i < o->sems + (o->mode == BENCH_MIX); i++) {
        if (!made[i] || (fd < 0 && (fd = bench_sync_connect(o)) < 0))
            continue;
        if (i < o->sems)
            bench_sem_name(o, i, name, sizeof(name));
        else
            snprintf(name, sizeof(name), "%s-full", o->name);
        if (bench_delete_semaphore(fd, o, name) != 0)
            fprintf(stderr, "sema bench: could not delete %s, which it made\n", name);
    }
    if (fd >= 0)
        close(fd);
}

/* ---- the report ---- */

/* Failed requests; park's waiters are meant to end with 410 (the semaphore is deleted); the
 * mix checks each answer against its step (its unexpected answers are unusable ones). */
static uint64_t count_errors(const bench_opts_t *o, const bench_result_t *r)
{
    uint64_t n = r->io_errors + r->connect_errors + r->proto_errors;
    for (unsigned s = 0; s < 600 && o->mode != BENCH_MIX; s++)
        if ((s < 200 || s >= 300) && !(o->mode == BENCH_PARK && s == 410))
            n += r->status[s];
    return n;
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

static void print_hist_text(const char *what, const bench_hist_t *h)
{
    if (h->count == 0)
        return;
    printf("  %-16s p50 %.1f us  p90 %.1f us  p99 %.1f us  max %.1f us  (%" PRIu64 " samples)\n",
           what, us(bench_hist_percentile(h, 50)), us(bench_hist_percentile(h, 90)),
           us(bench_hist_percentile(h, 99)), us(h->max_ns), h->count);
}

static void print_text(const bench_opts_t *o, const bench_result_t *r)
{
    double secs = r->elapsed_s > 0 ? r->elapsed_s : INFINITY; /* no rate without a run */
    printf("sema bench: mode %s against %s, %u connections, capacity %" PRIu64 ", weight %" PRIu64
           ", %u semaphore(s) '%s'\n",
           mode_names[o->mode], o->url, o->conns, o->capacity, o->weight, o->sems, o->name);
    printf("  %.2f s: %" PRIu64 " %s (%.0f/s), %" PRIu64 " requests (%.0f/s)\n", secs, r->ops,
           op_names[o->mode], (double)r->ops / secs, r->requests, (double)r->requests / secs);
    print_hist_text("request latency", &r->req);
    print_hist_text(o->mode == BENCH_HANDOFF ? "hand-off" : "op latency", &r->op);
    if (r->rss_after_kib)
        printf("  server RSS %" PRIu64 " KiB -> %" PRIu64 " KiB: %.0f bytes per %s\n",
               r->rss_before_kib, r->rss_after_kib,
               r->ops ? (double)(r->rss_after_kib - r->rss_before_kib) * 1024.0 / (double)r->ops
                      : 0.0,
               o->mode == BENCH_PARK ? "parked waiter" : "semaphore");
    if (o->mode == BENCH_PARK)
        printf("  all %" PRIu64 " waiters answered %.3f s after the DELETE\n", r->ops, r->drain_s);
    if (o->mode == BENCH_MIX) {
        printf("  operations:");
        for (unsigned k = 0; k < BENCH_MIX_KINDS; k++)
            printf(" %s %" PRIu64, bench_mix_kind_names[k], r->mix_ops[k]);
        printf("\n");
    }
    if (o->rate > 0)
        printf("  offered %.0f/s; starts missed (no connection free): %" PRIu64 " (%" PRIu64
               " while sema bench itself was stalled, at most %.1f ms)\n",
               o->rate, r->missed, r->missed_stalled, (double)r->lag_max_ns / 1e6);
    printf("  answers:");
    for (unsigned s = 0; s < 600; s++)
        if (r->status[s])
            printf(" %u: %" PRIu64, s, r->status[s]);
    printf("\n  errors: %" PRIu64 " (io %" PRIu64 ", connect %" PRIu64 ", unusable %" PRIu64 ")\n",
           count_errors(o, r), r->io_errors, r->connect_errors, r->proto_errors);
}

static void print_json(const bench_opts_t *o, const bench_result_t *r)
{
    double secs = r->elapsed_s > 0 ? r->elapsed_s : INFINITY; /* no rate without a run */
    const bench_hist_t *h = o->mode == BENCH_HANDOFF ? &r->op : &r->req;
    printf("{\"mode\":\"%s\",\"connections\":%u,\"seconds\":%.3f,\"ops\":%" PRIu64
           ",\"ops_per_s\":%.1f,\"requests\":%" PRIu64 ",\"requests_per_s\":%.1f,"
           "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,"
           "\"op_p50_us\":%.1f,\"op_p99_us\":%.1f,\"errors\":%" PRIu64
           ",\"rss_before_kib\":%" PRIu64 ",\"rss_after_kib\":%" PRIu64 ",\"drain_s\":%.3f,"
           "\"missed\":%" PRIu64 ",\"missed_stalled\":%" PRIu64 ",\"lag_max_us\":%.1f,"
           "\"status\":{",
           mode_names[o->mode], o->conns, r->elapsed_s, r->ops, (double)r->ops / secs, r->requests,
           (double)r->requests / secs, us(bench_hist_percentile(h, 50)),
           us(bench_hist_percentile(h, 90)), us(bench_hist_percentile(h, 99)), us(h->max_ns),
           us(bench_hist_percentile(&r->op, 50)), us(bench_hist_percentile(&r->op, 99)),
           count_errors(o, r), r->rss_before_kib, r->rss_after_kib, r->drain_s, r->missed,
           r->missed_stalled, us(r->lag_max_ns));
    const char *sep = "";
    for (unsigned s = 0; s < 600; s++)
        if (r->status[s]) {
            printf("%s\"%u\":%" PRIu64, sep, s, r->status[s]);
            sep = ",";
        }
    printf("}");
    if (o->mode == BENCH_MIX)
        for (unsigned k = 0; k < BENCH_MIX_KINDS; k++)
            printf("%s\"%s\":%" PRIu64, k ? "," : ",\"mix\":{", bench_mix_kind_names[k],
                   r->mix_ops[k]);
    printf("%s}\n", o->mode == BENCH_MIX ? "}" : "");
}

typedef int (*run_fn)(const bench_opts_t *, bench_result_t *);

static const run_fn runners[BENCH_MODE_COUNT] = {bench_load_run,    bench_load_run, bench_load_run,
                                                 bench_handoff_run, bench_park_run, bench_load_run};

int cmd_bench(int argc, char **argv)
{
    bench_opts_t opts;
    int rc = parse_args(argc, argv, &opts);
    if (rc != 0) {
        fputs(rc > 0 ? cmd_bench_usage : "", rc > 0 ? stdout : stderr);
        return rc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
    settle_opts(&opts);
    int fd = bench_sync_connect(&opts);
    if (fd < 0) {
        fprintf(stderr, "sema bench: cannot connect to %s: %s\n", opts.url, strerror(-fd));
        return CLI_EXIT_UNAVAILABLE;
    }
    close(fd);
    bench_result_t *res = calloc(1, sizeof(*res));
    unsigned char *made = calloc((opts.sems ? opts.sems : 1) + 1, 1); /* + the mix's -full */
    if (!res || !made) {
        fprintf(stderr, "sema bench: out of memory\n");
        free(res);
        free(made);
        return CLI_EXIT_FAIL;
    }
    if (setup_semaphores(&opts, made) != 0) {
        cleanup_semaphores(&opts, made);
        free(res);
        free(made);
        return CLI_EXIT_FAIL;
    }
    bench_hist_init(&res->req);
    bench_hist_init(&res->op);
    rc = runners[opts.mode](&opts, res);
    cleanup_semaphores(&opts, made);
    free(made);
    if (rc != 0 && res->fatal)
        fprintf(stderr, "sema bench: %s (%s)\n", res->fatal, opts.url);
    if (opts.json)
        print_json(&opts, res);
    else
        print_text(&opts, res);
    rc = rc != 0 || res->ops == 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    free(res);
    return rc;
}
