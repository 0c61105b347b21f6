/* SPDX-License-Identifier: MIT */
/* bench_durability.c - semad end to end with --durability none, relaxed and strict in one
 * run: acquire/release pairs per second and p99 pair latency at N connections, and the
 * ratios to `none` (goal: strict keeps >= 50% of none's pairs/s thanks to group commit).
 *
 * usage: bench_durability [--semad PATH] [--seconds S] [--conns N] [--dir DIR]
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

#define HIST_US 10   /* histogram bucket width, microseconds */
#define HIST_N 20000 /* buckets: up to 200 ms; slower pairs land in the last one */
#define MAX_CONNS 1000

struct opts {
    char semad[PATH_MAX];
    char dir[PATH_MAX];
    double seconds;
    int conns;
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

struct result {
    double pairs_per_s;
    double p99_ms;
    double p50_ms;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

/* Run the workers against one semad; check the server agrees on the count. */
static struct result drive(const struct opts *o, const char *url, sema_client_t *admin)
{
    static struct worker w[MAX_CONNS];
    static uint64_t hist[HIST_N];
    sema_client_opts_t co = {.max_idle = 1, .owner = "bench"};
    sema_client_error_t err;
    sema_sem_info_t info;
    volatile int stop = 0;
    uint64_t pairs = 0, errors = 0;
    struct result r;
    double t0, t1;

    memset(w, 0, sizeof w);
    memset(hist, 0, sizeof hist);
    for (int i = 0; i < o->conns; i++) {
        if (sema_client_new(&w[i].client, url, &co) != 0)
            die("sema_client_new failed for %s", url);
        w[i].stop = &stop;
    }
    t0 = now_s();
    for (int i = 0; i < o->conns; i++)
        pthread_create(&w[i].tid, NULL, work, &w[i]);
    usleep((useconds_t)(o->seconds * 1e6));
    stop = 1;
    for (int i = 0; i < o->conns; i++) {
        pthread_join(w[i].tid, NULL);
        pairs += w[i].pairs;
        errors += w[i].errors;
        for (int b = 0; b < HIST_N; b++)
            hist[b] += w[i].hist[b];
        if (w[i].errors != 0 && errors == w[i].errors)
            fprintf(stderr, "bench_durability: first error: %s\n", w[i].first_error);
        sema_client_free(w[i].client);
    }
    t1 = now_s();
    if (sema_client_get(admin, "bench", &info, NULL, &err) != 0 || info.held != 0 ||
        info.fence < pairs || errors != 0) {
        fprintf(stderr,
                "bench_durability: wrong result: %" PRIu64 " pairs, %" PRIu64
                " errors, server fence %" PRIu64 ", held %" PRIu64 "\n",
                pairs, errors, info.fence, info.held);
        exit(1);
    }
    r.pairs_per_s = (double)pairs / (t1 - t0);
    r.p50_ms = percentile(hist, pairs, 0.50);
    r.p99_ms = percentile(hist, pairs, 0.99);
    return r;
}

static struct result run_mode(const struct opts *o, const char *mode)
{
    char data[PATH_MAX + 32], url[64];
    int port = free_port(), status;
    sema_client_t *admin;
    struct result r;
    pid_t pid;

    snprintf(data, sizeof data, "%s/%s", o->dir, mode);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    pid = start_semad(o, mode, data, port);
    if (sema_client_new(&admin, url, NULL) != 0)
        die("sema_client_new failed for %s", url);
    wait_ready(admin, pid, o->conns);
    r = drive(o, url, admin);
    sema_client_free(admin);
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    printf("bench_durability %s_pairs_per_s %.0f pairs/s (%d connections)\n", mode, r.pairs_per_s,
           o->conns);
    printf("bench_durability %s_p50_ms %.2f ms\n", mode, r.p50_ms);
    printf("bench_durability %s_p99_ms %.2f ms\n", mode, r.p99_ms);
    fflush(stdout);
    return r;
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

    o->seconds = 3;
    o->conns = 50;
    find_semad(o, argv[0]);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--semad") == 0)
            snprintf(o->semad, sizeof o->semad, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            o->seconds = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--conns") == 0)
            o->conns = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0)
            base = argv[i + 1];
        else
            die("unknown flag %s (see the usage at the top of bench_durability.c)", argv[i]);
    }
    if (o->seconds <= 0 || o->conns < 1 || o->conns > MAX_CONNS)
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
    struct result none, relaxed, strict;

    signal(SIGPIPE, SIG_IGN);
    parse(argc, argv, &o);
    none = run_mode(&o, "none");
    relaxed = run_mode(&o, "relaxed");
    strict = run_mode(&o, "strict");
    printf("bench_durability ratio relaxed_vs_none %.2f\n", relaxed.pairs_per_s / none.pairs_per_s);
    printf("bench_durability ratio strict_vs_none %.2f (goal >= 0.50)\n",
           strict.pairs_per_s / none.pairs_per_s);
    nftw(o.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
