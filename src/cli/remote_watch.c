/* SPDX-License-Identifier: MIT */
/* remote_watch.c - `sema watch NAME`: redraw holders and waiters on every server event. */
#include "cli/remote.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int watch_stop;

static void on_interrupt(int sig)
{
    (void)sig;
    __atomic_store_n((int *)&watch_stop, 1, __ATOMIC_RELEASE);
}

typedef struct {
    remote_opts_t *o;
    sema_client_t *c;
    int tty;
    int deleted;
    int reached; /* this attempt's state request was answered */
} watch_t;

/* Fetch and show the current state (a terminal: clear and redraw). `data` is the event's
 * JSON text (NULL for start/reconnected). */
static void redraw(watch_t *w, const char *type, const char *data)
{
    char *json = NULL;
    sema_client_error_t e;
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];

    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    if (sema_client_get(w->c, w->o->pos[0], NULL, &json, &e) != 0) {
        printf("%s %s (state: %s)\n", stamp, type, e.message);
        fflush(stdout);
        return;
    }
    if (w->tty) {
        printf("\033[H\033[2J%s  sema watch %s  (last event: %s)\n\n", stamp, w->o->pos[0], type);
        remote_print_state(json);
    } else if (w->o->json) {
        printf("{\"event\":\"%s\",\"data\":%s,\"state\":%s}\n", type,
               data != NULL && data[0] != '\0' ? data : "null", json);
    } else {
        remote_print_state(json);
        printf("\n");
    }
    fflush(stdout);
    sema_client_string_free(json);
}

static int on_event(void *arg, const char *type, const char *data)
{
    watch_t *w = arg;

    if (!w->tty && !w->o->json)
        printf("%s %s\n", type, data);
    if (strcmp(type, "deleted") == 0) {
        w->deleted = 1;
        if (w->o->json)
            printf("{\"event\":\"deleted\",\"data\":%s,\"state\":null}\n",
                   data[0] != '\0' ? data : "null");
        else
            printf("%s was deleted\n", w->o->pos[0]);
        fflush(stdout);
        return 1;
    }
    redraw(w, type, data);
    return 0;
}

/* ---- reconnecting ------------------------------------------------------------------ */

/* The first delay, the cap of our doubling, and the most a server's `retry:` may ask for. */
enum { WATCH_BACKOFF_MIN_MS = 500, WATCH_BACKOFF_MAX_MS = 30000, WATCH_RETRY_MAX_MS = 600000 };

/* A failure that retrying cannot fix: the server answered 4xx (unknown semaphore, bad name;
 * 408 and 429 are temporary), or the request itself is wrong. */
static int watch_permanent(int rc, const sema_client_error_t *e)
{
    long st = e->http_status;

    if (st >= 400 && st <= 499 && st != 408 && st != 429)
        return 1;
    return rc == SEMA_EINVAL || rc == SEMA_ENAMETOOLONG || rc == SEMA_ENOMEM;
}

/* The delay before reconnect number `attempt` (0, 1, ...): base * 2^attempt capped at 30 s,
 * then a random point in its upper half (jitter, so many watchers do not return at once). */
static int64_t watch_backoff_ms(int attempt, int64_t base_ms, unsigned *seed)
{
    if (base_ms > WATCH_RETRY_MAX_MS)
        base_ms = WATCH_RETRY_MAX_MS;
    int64_t d = base_ms > 0 ? base_ms : WATCH_BACKOFF_MIN_MS;

    for (int i = 0; i < attempt && d < WATCH_BACKOFF_MAX_MS; i++)
        d *= 2;
    if (d > WATCH_BACKOFF_MAX_MS)
        d = base_ms > WATCH_BACKOFF_MAX_MS ? base_ms : WATCH_BACKOFF_MAX_MS;
    return d / 2 + (int64_t)(rand_r(seed) % (unsigned)(d / 2 + 1));
}

/* Sleep ms in short slices; returns non-zero when interrupted. */
static int watch_sleep(int64_t ms)
{
    while (ms > 0 && !__atomic_load_n(&watch_stop, __ATOMIC_ACQUIRE)) {
        int64_t slice = ms < 50 ? ms : 50;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = slice * 1000000L};
        nanosleep(&ts, NULL);
        ms -= slice;
    }
    return __atomic_load_n(&watch_stop, __ATOMIC_ACQUIRE);
}

/* One connection: fetch and show the state, then follow the events until the stream ends
 * (after a loss, resuming from info->last_event_id). Returns 0 when watching is over
 * (deleted, interrupted), or the error that ended it. */
static int watch_once(watch_t *w, int reconnect, sema_client_events_info_t *info,
                      sema_client_error_t *e)
{
    w->reached = 0;
    info->opened = 0; /* a failed get must not count as the stream the last try opened */
    int rc = sema_client_get(w->c, w->o->pos[0], NULL, NULL, e);
    if (rc != 0)
        return rc;
    w->reached = 1;
    if (reconnect) {
        fprintf(stderr,
                "sema watch: %s: reconnected to %s (state shown again; the events missed "
                "follow, or \"reset\" if the server no longer has them)\n",
                w->o->pos[0], w->o->server);
        fflush(stderr);
    }
    redraw(w, reconnect ? "reconnected" : "start", NULL);
    rc = sema_client_events_ex(w->c, w->o->pos[0], on_event, w, &watch_stop, info, e);
    if (rc == 0 && !w->deleted && !__atomic_load_n(&watch_stop, __ATOMIC_ACQUIRE)) {
        rc = e->code = SEMA_ECONNREFUSED; /* a loss like any other: retried */
        e->http_status = 0;
        snprintf(e->message, sizeof e->message, "the server ended the stream");
    }
    return rc;
}

/* Follow the semaphore, reconnecting after every loss until interrupted, deleted, a
 * permanent error, or --max-retries failed attempts in a row. */
static int watch_loop(watch_t *w)
{
    remote_opts_t *o = w->o;
    sema_client_events_info_t info = {.retry_ms = -1, .last_event_id = ""};
    sema_client_error_t e;
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    int64_t server_retry_ms = -1;
    uint64_t failed = 0;
    int lost = 0;

    for (;;) {
        int rc = watch_once(w, lost, &info, &e);
        if (rc == 0 || __atomic_load_n(&watch_stop, __ATOMIC_ACQUIRE))
            return CLI_EXIT_OK;
        if (watch_permanent(rc, &e))
            return remote_fail(o, o->pos[0], rc, &e);
        if (info.retry_ms >= 0)
            server_retry_ms = info.retry_ms;
        if (info.opened)
            failed = 0;
        if (o->has_max_retries && failed >= o->max_retries) {
            fprintf(stderr, "sema watch: %s: giving up after %llu failed reconnects\n", o->pos[0],
                    (unsigned long long)failed);
            return remote_fail(o, o->pos[0], rc, &e);
        }
        int64_t ms = watch_backoff_ms(failed > 30 ? 30 : (int)failed, server_retry_ms, &seed);
        fprintf(stderr, "sema watch: %s: %s: %s; reconnecting in %.1fs\n", o->pos[0],
                w->reached ? "connection lost"
                : lost     ? "reconnect failed"
                           : "cannot connect",
                e.message[0] ? e.message : sema_strerror(rc), (double)ms / 1000.0);
        fflush(stderr);
        lost = 1;
        failed++;
        if (watch_sleep(ms))
            return CLI_EXIT_OK;
    }
}

int remote_watch(remote_opts_t *o)
{
    watch_t w = {.o = o, .tty = isatty(STDOUT_FILENO) && !o->json};
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if ((w.c = remote_client(o)) == NULL)
        return CLI_EXIT_USAGE;
    int rc = watch_loop(&w);
    sema_client_free(w.c);
    return rc;
}
