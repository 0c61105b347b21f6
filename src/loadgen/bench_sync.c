/* SPDX-License-Identifier: MIT */
/* bench_sync.c - blocking HTTP helpers for `sema bench`: set-up requests, and the hand-off
 * latency and parked-waiter memory modes, which measure one event at a time. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <llhttp.h>

#include "loadgen/bench.h"

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int bench_sync_connect(const bench_opts_t *opts)
{
    return bench_sync_connect_to(opts, 0);
}

int bench_sync_connect_to(const bench_opts_t *opts, unsigned i)
{
    i %= opts->servers ? opts->servers : 1;
    int fd = socket(opts->addr[i].ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)&opts->addr[i], opts->addr_len[i]) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

size_t bench_format_request(char *buf, size_t cap, const bench_opts_t *opts, const char *method,
                            const char *path, const char *body)
{
    return bench_format_request_h(buf, cap, opts, method, path, "", body);
}

size_t bench_format_request_h(char *buf, size_t cap, const bench_opts_t *opts, const char *method,
                              const char *path, const char *headers, const char *body)
{
    int n;
    if (body)
        n = snprintf(buf, cap,
                     "%s %s HTTP/1.1\r\nHost: %s\r\n%s%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, opts->host, opts->auth, headers, strlen(body), body);
    else
        n = snprintf(buf, cap, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n", method, path, opts->host,
                     opts->auth, headers);
    return (n < 0 || (size_t)n >= cap) ? 0 : (size_t)n;
}

size_t bench_json_str(const char *json, const char *key, char *out, size_t cap)
{
    char pat[64];
    int n = snprintf(pat, sizeof(pat), "\"%s\":", key);
    if (n < 0 || (size_t)n >= sizeof(pat))
        return 0;
    const char *p = strstr(json, pat);
    if (!p)
        return 0;
    p += n;
    while (*p == ' ')
        p++;
    if (*p != '"')
        return 0;
    const char *end = strchr(++p, '"');
    if (!end || (size_t)(end - p) >= cap || end == p)
        return 0;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return (size_t)(end - p);
}

int64_t bench_json_int(const char *json, const char *key)
{
    char pat[64];
    int n = snprintf(pat, sizeof(pat), "\"%s\":", key);
    if (n < 0 || (size_t)n >= sizeof(pat))
        return -1;
    const char *p = strstr(json, pat);
    if (!p)
        return -1;
    p += n;
    while (*p == ' ')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    return strtoll(p, NULL, 10);
}

void bench_sem_name(const bench_opts_t *opts, uint64_t i, char *out, size_t cap)
{
    if (opts->sems > 1 || opts->mode == BENCH_CREATE)
        snprintf(out, cap, "%s-%" PRIu64, opts->name, i);
    else
        snprintf(out, cap, "%s", opts->name);
}

size_t bench_acquire_request(const bench_opts_t *opts, unsigned i, char *out, size_t cap)
{
    char path[BENCH_NAME_MAX + 64], body[BENCH_ALL_MAX * (BENCH_NAME_MAX + 64) + 128];
    char name[BENCH_NAME_MAX + 24];
    size_t n = 0;
    body[0] = '\0';
    if (opts->all) {
        snprintf(path, sizeof(path), "/v1/acquire");
        n = (size_t)snprintf(body, sizeof(body), "{\"semaphores\":[");
        for (unsigned k = 0; k < opts->sems && k < BENCH_ALL_MAX; k++) {
            bench_sem_name(opts, k, name, sizeof(name));
            n += (size_t)snprintf(body + n, sizeof(body) - n,
                                  "%s{\"name\":\"%s\",\"weight\":%" PRIu64 "}", k ? "," : "", name,
                                  opts->weight);
        }
        n += (size_t)snprintf(body + n, sizeof(body) - n, "]");
    } else {
        bench_sem_name(opts, i % (opts->sems ? opts->sems : 1), name, sizeof(name));
        snprintf(path, sizeof(path), "/v1/semaphores/%s/acquire", name);
        n = (size_t)snprintf(body, sizeof(body), "{\"weight\":%" PRIu64, opts->weight);
    }
    n += (size_t)snprintf(body + n, sizeof(body) - n, ",\"ttl_ms\":%" PRId64, opts->ttl_ms);
    if (opts->tenants)
        n += (size_t)snprintf(body + n, sizeof(body) - n, ",\"tenant\":\"t%u\"", i % opts->tenants);
    snprintf(body + n, sizeof(body) - n, "}");
    return bench_format_request(out, cap, opts, "POST", path, body);
}

uint64_t bench_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    uint64_t kib = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kib;
}

/* ---- reading one answer with llhttp ---- */

typedef struct {
    char *out;
    size_t cap, len;
    int done;
} sync_rx_t;

static int rx_on_body(llhttp_t *p, const char *at, size_t n)
{
    sync_rx_t *rx = p->data;
    size_t room = rx->cap > rx->len + 1 ? rx->cap - rx->len - 1 : 0;
    if (n > room)
        n = room;
    memcpy(rx->out + rx->len, at, n);
    rx->len += n;
    return 0;
}

static int rx_on_complete(llhttp_t *p)
{
    ((sync_rx_t *)p->data)->done = 1;
    return HPE_PAUSED;
}

int bench_sync_read(int fd, int *status, char *out, size_t cap, int timeout_ms)
{
    static llhttp_settings_t settings;
    static int settings_ready;
    if (!settings_ready) {
        llhttp_settings_init(&settings);
        settings.on_body = rx_on_body;
        settings.on_message_complete = rx_on_complete;
        settings_ready = 1;
    }
    char scratch[1];
    sync_rx_t rx = {out ? out : scratch, out ? cap : sizeof(scratch), 0, 0};
    llhttp_t parser;
    llhttp_init(&parser, HTTP_RESPONSE, &settings);
    parser.data = &rx;
    /* Read byte-exact up to the end of one answer: no pipelining here, so a small buffer and
     * MSG_PEEK are not needed; the server sends nothing unasked. */
    char buf[16384];
    while (!rx.done) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr <= 0)
            return -1;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return -1;
        llhttp_errno_t err = llhttp_execute(&parser, buf, (size_t)n);
        if (err != HPE_OK && err != HPE_PAUSED)
            return -1;
    }
    rx.out[rx.len] = '\0';
    *status = parser.status_code;
    return 0;
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int sync_send(int fd, const bench_opts_t *opts, const char *method, const char *path,
                     const char *body)
{
    char req[1024];
    size_t len = bench_format_request(req, sizeof(req), opts, method, path, body);
    return len ? send_all(fd, req, len) : -1;
}

int bench_sync_request(int fd, const bench_opts_t *opts, const char *method, const char *path,
                       const char *body, int *status, char *out, size_t cap, int timeout_ms)
{
    if (sync_send(fd, opts, method, path, body) != 0)
        return -1;
    return bench_sync_read(fd, status, out, cap, timeout_ms);
}

int bench_put_semaphore(int fd, const bench_opts_t *opts, const char *name, uint64_t capacity)
{
    char path[BENCH_NAME_MAX + 32], body[160], reply[512];
    int status = 0;
    snprintf(path, sizeof(path), "/v1/semaphores/%s", name);
    int n = snprintf(body, sizeof(body), "{\"capacity\":%" PRIu64, capacity);
    if (opts->tenant_max)
        n += snprintf(body + n, sizeof(body) - (size_t)n, ",\"tenant_max\":%" PRIu64,
                      opts->tenant_max);
    if (opts->rate_per_s)
        n += snprintf(body + n, sizeof(body) - (size_t)n, ",\"rate_per_s\":%" PRIu64,
                      opts->rate_per_s);
    if (opts->rate_burst)
        n += snprintf(body + n, sizeof(body) - (size_t)n, ",\"rate_burst\":%" PRIu64,
                      opts->rate_burst);
    snprintf(body + n, sizeof(body) - (size_t)n, "}");
    if (bench_sync_request(fd, opts, "PUT", path, body, &status, reply, sizeof(reply), 5000) != 0) {
        fprintf(stderr, "sema bench: PUT %s: no answer from %s\n", path, opts->url);
        return -1;
    }
    if (status == 200 || status == 201)
        return status == 201;
    fprintf(stderr, "sema bench: PUT %s answered %d: %s\n", path, status, reply);
    if (status == 409)
        fprintf(stderr, "sema bench: it exists with another capacity; pick another --name\n");
    return -1;
}

int bench_delete_semaphore(int fd, const bench_opts_t *opts, const char *name)
{
    char path[BENCH_NAME_MAX + 32];
    int status = 0;
    snprintf(path, sizeof(path), "/v1/semaphores/%s", name);
    if (bench_sync_request(fd, opts, "DELETE", path, NULL, &status, NULL, 0, 5000) != 0)
        return -1;
    return status == 204 || status == 404 ? 0 : -1;
}

/* ---- hand-off latency ---- */

/* Acquires `name` on fd (a try: the semaphore is free); the lease id goes to lease. */
static int take(int fd, const bench_opts_t *opts, const char *path, char *lease, size_t cap)
{
    char body[96], reply[1024];
    int status = 0;
    snprintf(body, sizeof(body), "{\"weight\":1,\"timeout_ms\":0,\"ttl_ms\":%" PRId64 "}",
             opts->ttl_ms);
    if (bench_sync_request(fd, opts, "POST", path, body, &status, reply, sizeof(reply), 5000) !=
            0 ||
        status != 200)
        return -1;
    return bench_json_str(reply, "lease", lease, cap) ? 0 : -1;
}

/* Polls the list endpoint on fd until `name` has at least `want` waiters. */
static int wait_parked(int fd, const bench_opts_t *opts, const char *name, int64_t want,
                       int timeout_ms)
{
    char path[BENCH_NAME_MAX + 64], reply[1024];
    snprintf(path, sizeof(path), "/v1/semaphores?prefix=%s&limit=1", name);
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (bench_now_ns() < deadline) {
        int status = 0;
        if (bench_sync_request(fd, opts, "GET", path, NULL, &status, reply, sizeof(reply), 5000) !=
                0 ||
            status != 200)
            return -1;
        if (bench_json_int(reply, "waiting") >= want)
            return 0;
        if (want > 100)
            usleep(20000); /* only the big park mode waits long; hand-off spins */
    }
    return -1;
}

/* One round: `waiter` parks, `holder` releases; returns the hand-off time or 0 on error. */
static uint64_t handoff_round(int holder, int waiter, const bench_opts_t *opts, char *lease,
                              size_t cap, bench_result_t *res)
{
    char acq[BENCH_NAME_MAX + 32], rel[160], body[96], reply[1024];
    snprintf(acq, sizeof(acq), "/v1/semaphores/%s/acquire", opts->name);
    snprintf(body, sizeof(body), "{\"weight\":1,\"ttl_ms\":%" PRId64 "}", opts->ttl_ms);
    if (sync_send(waiter, opts, "POST", acq, body) != 0)
        return 0;
    if (wait_parked(holder, opts, opts->name, 1, 5000) != 0)
        return 0;
    snprintf(rel, sizeof(rel), "/v1/leases/%s", lease);
    uint64_t t0 = bench_now_ns();
    int status = 0, rstatus = 0;
    if (sync_send(holder, opts, "DELETE", rel, NULL) != 0 ||
        bench_sync_read(waiter, &status, reply, sizeof(reply), 5000) != 0)
        return 0;
    uint64_t dt = bench_now_ns() - t0;
    if (bench_sync_read(holder, &rstatus, NULL, 0, 5000) != 0)
        return 0;
    res->status[status % 600]++;
    res->status[rstatus % 600]++;
    res->requests += 2;
    if (status != 200 || bench_json_str(reply, "lease", lease, cap) == 0)
        return 0;
    return dt ? dt : 1;
}

/* With two servers (instances on one shared state), the two connections go one to each: every
 * round releases on one instance and wakes the waiter parked on the other. */
int bench_handoff_run(const bench_opts_t *opts, bench_result_t *res)
{
    int fd[2] = {bench_sync_connect_to(opts, 0), bench_sync_connect_to(opts, 1)};
    char lease[128], acq[BENCH_NAME_MAX + 32];
    int rc = -1, made = 0; /* made: the semaphore is ours to delete when done */
    if (fd[0] < 0 || fd[1] < 0) {
        res->fatal = "cannot connect to the server";
        goto out;
    }
    snprintf(acq, sizeof(acq), "/v1/semaphores/%s/acquire", opts->name);
    made = opts->no_setup ? 0 : bench_put_semaphore(fd[0], opts, opts->name, 1);
    if (made < 0 || take(fd[0], opts, acq, lease, sizeof(lease)) != 0) {
        res->fatal = "set-up failed (is the semaphore free, with capacity 1?)";
        goto out;
    }
    uint64_t rounds = opts->count ? opts->count : 2000;
    uint64_t start = bench_now_ns();
    uint64_t limit = start + (uint64_t)(opts->duration_s * 1e9);
    for (uint64_t i = 0; i < rounds && bench_now_ns() < limit; i++) {
        uint64_t dt = handoff_round(fd[i & 1], fd[(i & 1) ^ 1], opts, lease, sizeof(lease), res);
        if (dt == 0) {
            res->proto_errors++;
            res->fatal = "a hand-off round failed";
            goto out;
        }
        bench_hist_record(&res->op, dt);
        res->ops++;
    }
    res->elapsed_s = (double)(bench_now_ns() - start) / 1e9;
    rc = 0;
out:
    if (made > 0)
        (void)bench_delete_semaphore(fd[0], opts, opts->name);
    for (int i = 0; i < 2; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    return rc;
}

/* ---- parked waiters' memory ---- */

/* Opens n connections, each sending one parked acquire. Returns how many were sent. */
static unsigned park_open(const bench_opts_t *opts, int *fds, unsigned n, bench_result_t *res)
{
    char acq[BENCH_NAME_MAX + 32], body[96], req[1024];
    snprintf(acq, sizeof(acq), "/v1/semaphores/%s/acquire", opts->name);
    snprintf(body, sizeof(body), "{\"weight\":1,\"ttl_ms\":%" PRId64 "}", opts->ttl_ms);
    size_t len = bench_format_request(req, sizeof(req), opts, "POST", acq, body);
    unsigned i;
    for (i = 0; i < n; i++) {
        fds[i] = bench_sync_connect_to(opts, i);
        if (fds[i] < 0) {
            res->connect_errors++;
            break;
        }
        if (send_all(fds[i], req, len) != 0) {
            res->io_errors++;
            close(fds[i]);
            break;
        }
    }
    return i;
}

/* Reads the answers that came early: the server refused those acquires (503 over
 * --max-connections, 429 over --max-waiters). Their fds are closed and set to -1.
 * Returns how many were refused in this call. */
static unsigned park_refused(int *fds, unsigned n, bench_result_t *res)
{
    struct pollfd *p = calloc(n ? n : 1, sizeof(*p));
    unsigned refused = 0;
    if (!p)
        return 0;
    for (unsigned i = 0; i < n; i++)
        p[i] = (struct pollfd){fds[i], POLLIN, 0}; /* fd -1 is skipped by poll */
    if (poll(p, n, 0) > 0)
        for (unsigned i = 0; i < n; i++) {
            if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int status = 0;
            if (bench_sync_read(fds[i], &status, NULL, 0, 1000) == 0) {
                res->status[status % 600]++;
                res->requests++;
            } else {
                res->io_errors++;
            }
            close(fds[i]);
            fds[i] = -1;
            refused++;
        }
    free(p);
    return refused;
}

/* Waits until every acquire still open is parked; 0, or -1 when some were refused or the
 * server did not get there within timeout_ms. */
static int park_settle(int ctl, const bench_opts_t *opts, int *fds, unsigned n, bench_result_t *res,
                       int timeout_ms)
{
    unsigned refused = 0;
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (bench_now_ns() < deadline) {
        refused += park_refused(fds, n, res);
        if (wait_parked(ctl, opts, opts->name, (int64_t)(n - refused), 100) == 0)
            break;
    }
    refused += park_refused(fds, n, res);
    return refused == 0 && wait_parked(ctl, opts, opts->name, (int64_t)n, 100) == 0 ? 0 : -1;
}

/* Deletes the semaphore and reads every parked waiter's answer (410). */
static void park_drain(int ctl, const bench_opts_t *opts, int *fds, unsigned n, bench_result_t *res)
{
    char path[BENCH_NAME_MAX + 32];
    int status = 0;
    snprintf(path, sizeof(path), "/v1/semaphores/%s", opts->name);
    uint64_t t0 = bench_now_ns();
    if (bench_sync_request(ctl, opts, "DELETE", path, NULL, &status, NULL, 0, 30000) != 0)
        res->io_errors++;
    for (unsigned i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        if (bench_sync_read(fds[i], &status, NULL, 0, 30000) != 0) {
            res->io_errors++;
            continue;
        }
        res->status[status % 600]++;
        res->requests++;
    }
    res->drain_s = (double)(bench_now_ns() - t0) / 1e9;
}

int bench_park_run(const bench_opts_t *opts, bench_result_t *res)
{
    unsigned n = opts->conns, opened = 0;
    int *fds = calloc(n ? n : 1, sizeof(int));
    int ctl = bench_sync_connect(opts), rc = -1;
    char lease[128], acq[BENCH_NAME_MAX + 32];
    if (!fds || ctl < 0) {
        res->fatal = !fds ? "out of memory" : "cannot connect to the server";
        goto out;
    }
    snprintf(acq, sizeof(acq), "/v1/semaphores/%s/acquire", opts->name);
    if ((!opts->no_setup && bench_put_semaphore(ctl, opts, opts->name, 1) < 0) ||
        take(ctl, opts, acq, lease, sizeof(lease)) != 0) {
        res->fatal = "set-up failed (is the semaphore free, with capacity 1?)";
        goto out;
    }
    usleep(200000); /* let the server settle before the baseline */
    res->rss_before_kib = opts->server_pid ? bench_rss_kib(opts->server_pid) : 0;
    uint64_t t0 = bench_now_ns();
    opened = park_open(opts, fds, n, res);
    if (park_settle(ctl, opts, fds, opened, res, 60000) != 0) {
        res->fatal = "the server did not park every acquire (see the answers: 503 = over "
                     "its --max-connections, 429 = over --max-waiters)";
        park_drain(ctl, opts, fds, opened, res);
        goto out;
    }
    res->elapsed_s = (double)(bench_now_ns() - t0) / 1e9;
    res->ops = opened;
    usleep(200000);
    res->rss_after_kib = opts->server_pid ? bench_rss_kib(opts->server_pid) : 0;
    park_drain(ctl, opts, fds, opened, res);
    rc = opened == n ? 0 : -1;
    if (rc != 0)
        res->fatal = "could not open every connection (raise ulimit -n or --max-connections)";
out:
    for (unsigned i = 0; i < opened; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (ctl >= 0)
        close(ctl);
    free(fds);
    return rc;
}
