/* SPDX-License-Identifier: MIT */
/* bench_durability.c - semad end to end with --durability none, relaxed and strict in one
 * run: acquire/release pairs per second and p99 pair latency at N connections, and the
 * ratios to `none` (goal: strict keeps >= 50% of none's pairs/s thanks to group commit).
 *
 * Then semad's whole recovery time on a store of 1,000,000 semaphores and 100,000 leases.
 *
 * usage: bench_durability [--semad PATH] [--seconds S] [--rounds R] [--conns N] [--sems N]
 *                         [--leases M] [--dir DIR]
 * The three servers run at once; each gets S seconds of load in R alternating segments.
 * PATH defaults to $SEMAD, then `semad` beside this program. Prints one line per figure:
 * `bench_durability <figure> <value> <unit>`. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sema/client.h"
#include "sema/error.h"
#include "store/store.h"

#define HIST_US 10   /* histogram bucket width, microseconds */
#define HIST_N 20000 /* buckets: up to 200 ms; slower pairs land in the last one */
#define MAX_CONNS 1000

struct opts {
    char semad[PATH_MAX];
    char dir[PATH_MAX];
    double seconds; /* per mode, split into `rounds` alternating segments */
    int rounds;
    int conns;
    long sems, leases; /* size of the store for the recovery figure (0 sems: skip it) */
};

struct worker {
    pthread_t tid;
    sema_client_t *client;
    const volatile int *stop;
    uint64_t pairs;
    uint64_t errors;
    char first_error[300];
    uint32_t hist[HIST_N];
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static pid_t running[4]; /* killed by die() so a failed run leaves nothing behind */
static int running_semads;

static void die(const char *fmt, const char *what) __attribute__((format(printf, 1, 0)));

/* Print "bench_durability: " and fmt with its one %s argument, and exit 1. */
static void die(const char *fmt, const char *what)
{
    fprintf(stderr, "bench_durability: ");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    fprintf(stderr, fmt, what);
#pragma GCC diagnostic pop
    fputc('\n', stderr);
    for (int i = 0; i < running_semads; i++)
        kill(running[i], SIGKILL);
    exit(1);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        die("cannot find a free port: %s", strerror(errno));
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Start semad on a fresh data directory; returns its pid. */
static pid_t start_semad(const struct opts *o, const char *mode, const char *data, int port)
{
    char listen[64];
    pid_t pid;

    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        char logpath[PATH_MAX + 48];
        snprintf(logpath, sizeof logpath, "%s.log", data);
        int log = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (log >= 0) {
            dup2(log, STDOUT_FILENO);
            dup2(log, STDERR_FILENO);
            close(log);
        }
        execl(o->semad, o->semad, "--listen", listen, "--data", data, "--durability", mode,
              (char *)NULL);
        fprintf(stderr, "bench_durability: cannot run %s: %s\n", o->semad, strerror(errno));
        _exit(127);
    }
    running[running_semads++ % 4] = pid;
    return pid;
}

/* Wait until semad answers, then create the semaphore. */
static void wait_ready(sema_client_t *c, pid_t pid, int conns)
{
    sema_client_error_t err;
    int created, status;

    for (int i = 0; i < 400; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            die("semad exited at start (%s)", "its log is DIR/<mode>.log under --dir");
        if (sema_client_create(c, "bench", (uint64_t)conns, &created, &err) == 0)
            return;
        usleep(25000);
    }
    die("semad did not answer: %s", err.message);
}

static void record(struct worker *w, double seconds)
{
    long b = (long)(seconds * 1e6 / HIST_US);

    w->hist[b < 0 ? 0 : b >= HIST_N ? HIST_N - 1 : b]++;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    sema_acquire_opts_t ao = {.weight = 1, .timeout_ms = -1, .ttl_ms = 60000};
    sema_client_error_t err;
    sema_lease_t lease;

    while (!*w->stop) {
        double t0 = now_s();
        int rc = sema_client_acquire(w->client, "bench", &ao, &lease, &err);
        if (rc == 0)
            rc = sema_client_release(w->client, lease.id, &err);
        if (rc != 0) {
            if (w->errors++ == 0)
                snprintf(w->first_error, sizeof w->first_error, "%s (HTTP %d): %s",
                         sema_err_name(rc), err.http_status, err.message);
            continue;
        }
        record(w, now_s() - t0);
        w->pairs++;
    }
    return NULL;
}

static double percentile(const uint64_t *hist, uint64_t total, double p)
{
    uint64_t want = (uint64_t)((double)total * p), seen = 0;

    for (int i = 0; i < HIST_N; i++) {
        seen += hist[i];
        if (seen > want)
            return (double)(i + 1) * HIST_US / 1000.0;
    }
    return (double)HIST_N * HIST_US / 1000.0;
}

/* One semad under test and what its segments measured. */
struct server {
    const char *mode;
    pid_t pid;
    char url[64];
    sema_client_t *admin;
    uint64_t pairs; /* over all its segments */
    double seconds; /* the same */
    uint64_t hist[HIST_N];
};

/* One segment: the workers against `srv` for `seconds`; the server must agree on the count
 * (its fence counted every grant, nothing left held). */
static void drive(const struct opts *o, struct server *srv, double seconds)
{
    static struct worker w[MAX_CONNS];
    sema_client_opts_t co = {.max_idle = 1, .owner = "bench"};
    sema_client_error_t err;
    sema_sem_info_t info;
    volatile int stop = 0;
    uint64_t errors = 0;
    double t0;

    memset(w, 0, sizeof w);
    for (int i = 0; i < o->conns; i++) {
        if (sema_client_new(&w[i].client, srv->url, &co) != 0)
            die("sema_client_new failed for %s", srv->url);
        w[i].stop = &stop;
    }
    t0 = now_s();
    for (int i = 0; i < o->conns; i++)
        pthread_create(&w[i].tid, NULL, work, &w[i]);
    usleep((useconds_t)(seconds * 1e6));
    stop = 1;
    for (int i = 0; i < o->conns; i++) {
        pthread_join(w[i].tid, NULL);
        srv->pairs += w[i].pairs;
        errors += w[i].errors;
        for (int b = 0; b < HIST_N; b++)
            srv->hist[b] += w[i].hist[b];
        if (w[i].errors != 0 && errors == w[i].errors)
            fprintf(stderr, "bench_durability: first error: %s\n", w[i].first_error);
        sema_client_free(w[i].client);
    }
    srv->seconds += now_s() - t0;
    if (sema_client_get(srv->admin, "bench", &info, NULL, &err) != 0 || info.held != 0 ||
        info.fence < srv->pairs || errors != 0) {
        fprintf(stderr,
                "bench_durability: wrong result: %" PRIu64 " pairs, %" PRIu64
                " errors, server fence %" PRIu64 ", held %" PRIu64 "\n",
                srv->pairs, errors, info.fence, info.held);
        die("%s: results do not add up", srv->mode);
    }
}

static void start_server(const struct opts *o, struct server *srv, const char *mode)
{
    char data[PATH_MAX + 32];
    int port = free_port();

    srv->mode = mode;
    snprintf(data, sizeof data, "%s/%s", o->dir, mode);
    snprintf(srv->url, sizeof srv->url, "http://127.0.0.1:%d", port);
    srv->pid = start_semad(o, mode, data, port);
    if (sema_client_new(&srv->admin, srv->url, NULL) != 0)
        die("sema_client_new failed for %s", srv->url);
    wait_ready(srv->admin, srv->pid, o->conns);
}

static double report(const struct opts *o, struct server *srv)
{
    double rate = (double)srv->pairs / srv->seconds;
    int status;

    sema_client_free(srv->admin);
    kill(srv->pid, SIGTERM);
    waitpid(srv->pid, &status, 0);
    printf("bench_durability %s_pairs_per_s %.0f pairs/s (%d connections)\n", srv->mode, rate,
           o->conns);
    printf("bench_durability %s_p50_ms %.2f ms\n", srv->mode,
           percentile(srv->hist, srv->pairs, 0.50));
    printf("bench_durability %s_p99_ms %.2f ms\n", srv->mode,
           percentile(srv->hist, srv->pairs, 0.99));
    return rate;
}

/* The three modes run side by side, in alternating segments, so a change in the machine's
 * load during the run weighs on all three alike. */
static void run_modes(const struct opts *o)
{
    static struct server srv[3];
    static const char *const modes[3] = {"none", "relaxed", "strict"};
    double rate[3];

    for (int m = 0; m < 3; m++)
        start_server(o, &srv[m], modes[m]);
    for (int r = 0; r < o->rounds; r++)
        for (int m = 0; m < 3; m++)
            drive(o, &srv[m], o->seconds / o->rounds);
    for (int m = 0; m < 3; m++)
        rate[m] = report(o, &srv[m]);
    running_semads = 0;
    printf("bench_durability ratio relaxed_vs_none %.2f\n", rate[1] / rate[0]);
    printf("bench_durability ratio strict_vs_none %.2f (goal >= 0.50)\n", rate[2] / rate[0]);
    fflush(stdout);
}

/* A store of `sems` semaphores and `leases` leases (one per semaphore, expiring in an hour),
 * written through the store API as semad would have written it. */
static void build_store(const char *data, long sems, long leases)
{
    char err[512] = "", name[32], id[48];
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    store_t *st;

    if (store_open(&st, data, STORE_RELAXED, err, sizeof err) != 0)
        die("store_open: %s", err);
    for (long i = 0; i < sems; i++) {
        snprintf(name, sizeof name, "sem-%08ld", i);
        store_sem_t s = {
            .name = name, .capacity = 10, .available = 10, .fence = 1, .created_at_ms = now_ms};
        store_put_sem(st, &s);
        if (i < leases) {
            snprintf(id, sizeof id, "rl-%016lx", i); /* semad ids are under 28 bytes */
            store_lease_t l = {.id = id,
                               .sem = name,
                               .weight = 1,
                               .owner = "bench",
                               .fence = 1,
                               .ttl_ms = 3600000,
                               .acquired_at_ms = now_ms,
                               .expires_at_ms = now_ms + 3600000};
            store_put_lease(st, &l);
        }
        if (i % 20000 == 19999 && store_commit(st, err, sizeof err) != 0)
            die("store_commit: %s", err);
    }
    if (store_commit(st, err, sizeof err) != 0)
        die("store_commit: %s", err);
    store_close(st);
}

/* semad's whole recovery: start on a large store until it answers, then check a lease. */
static void run_recovery(const struct opts *o)
{
    char data[PATH_MAX + 32], url[64];
    int port = free_port(), status;
    sema_client_t *c;
    sema_client_error_t err;
    sema_sem_info_t info;
    double t0;
    pid_t pid;

    snprintf(data, sizeof data, "%s/recovery", o->dir);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    build_store(data, o->sems, o->leases);
    if (sema_client_new(&c, url, NULL) != 0)
        die("sema_client_new failed for %s", url);
    t0 = now_s();
    pid = start_semad(o, "strict", data, port);
    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            die("semad exited while loading (%s)", "its log is DIR/strict.log");
        if (sema_client_get(c, "sem-00000000", &info, NULL, &err) == 0)
            break;
        if (now_s() - t0 > 60)
            die("semad did not answer within 60 s: %s", err.message);
        usleep(10000);
    }
    printf("bench_durability semad_recovery_s %.3f s (%ld semaphores, %ld leases; goal <= 5)\n",
           now_s() - t0, o->sems, o->leases);
    if (info.capacity != 10 || info.held != (o->leases > 0 ? 1u : 0u))
        die("wrong state after recovery: %s", "a stored lease is not held");
    sema_client_free(c);
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    running_semads = 0;
}

static void find_semad(struct opts *o, const char *argv0)
{
    const char *env = getenv("SEMAD");
    const char *slash = strrchr(argv0, '/');

    if (env != NULL && env[0] != '\0')
        snprintf(o->semad, sizeof o->semad, "%s", env);
    else if (slash != NULL)
        snprintf(o->semad, sizeof o->semad, "%.*s/semad", (int)(slash - argv0), argv0);
    else
        snprintf(o->semad, sizeof o->semad, "semad");
}

static void parse(int argc, char **argv, struct opts *o)
{
    const char *base = "/tmp";

    o->seconds = 2;
    o->rounds = 3;
    o->conns = 50;
    o->sems = 1000000;
    o->leases = 100000;
    find_semad(o, argv[0]);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--semad") == 0)
            snprintf(o->semad, sizeof o->semad, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            o->seconds = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--rounds") == 0)
            o->rounds = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--conns") == 0)
            o->conns = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--sems") == 0)
            o->sems = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--leases") == 0)
            o->leases = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0)
            base = argv[i + 1];
        else
            die("unknown flag %s (see the usage at the top of bench_durability.c)", argv[i]);
    }
    if (o->seconds <= 0 || o->rounds < 1 || o->conns < 1 || o->conns > MAX_CONNS || o->sems < 0 ||
        o->leases < 0 || o->leases > o->sems)
        die("bad %s", "--seconds or --conns");
    if (access(o->semad, X_OK) != 0)
        die("no semad at %s (give --semad PATH or set SEMAD)", o->semad);
    snprintf(o->dir, sizeof o->dir, "%s/bench_durability-XXXXXX", base);
    if (mkdtemp(o->dir) == NULL)
        die("mkdtemp: %s", strerror(errno));
}

int main(int argc, char **argv)
{
    struct opts o;

    signal(SIGPIPE, SIG_IGN);
    parse(argc, argv, &o);
    run_modes(&o);
    if (o.sems > 0)
        run_recovery(&o);
    nftw(o.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
