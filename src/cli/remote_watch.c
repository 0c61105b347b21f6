/* SPDX-License-Identifier: MIT */
/* remote_watch.c - `sema watch NAME`: redraw holders and waiters on every server event. */
#include "remote.h"

#include <signal.h>
#include <stdio.h>
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
} watch_t;

/* Fetch and show the current state (a terminal: clear and redraw). */
static void redraw(watch_t *w, const char *type)
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
        printf("{\"event\":\"%s\",\"state\":%s}\n", type, json);
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
        printf("%s was deleted\n", w->o->pos[0]);
        fflush(stdout);
        return 1;
    }
    redraw(w, type);
    return 0;
}

int remote_watch(remote_opts_t *o)
{
    watch_t w = {.o = o, .tty = isatty(STDOUT_FILENO) && !o->json};
    sema_client_error_t e;
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if ((w.c = remote_client(o)) == NULL)
        return CLI_EXIT_USAGE;
    int rc = sema_client_get(w.c, o->pos[0], NULL, NULL, &e);
    if (rc != 0) {
        sema_client_free(w.c);
        return remote_fail(o, o->pos[0], rc, &e);
    }
    redraw(&w, "start");
    rc = sema_client_events(w.c, o->pos[0], on_event, &w, &watch_stop, &e);
    sema_client_free(w.c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    return CLI_EXIT_OK;
}
