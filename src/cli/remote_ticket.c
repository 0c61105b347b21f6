/* SPDX-License-Identifier: MIT */
/* remote_ticket.c - `sema ticket`, `ticket-show`, `ticket-wait` and `ticket-leave`: a place
 * in a semaphore's line (or in the lines of several at once) that holds no connection, from
 * a shell. */
#include "cli/remote.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#define LONG_POLL_MS 60000 /* one long poll of ticket-wait (the server allows 5 minutes) */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *lease_json(const sema_multi_ticket_t *m)
{
    const sema_lease_t *l = &m->ticket.lease;

    if (m->nparts > 1)
        return remote_multi_lease_json(l, m->parts, m->nparts);
    return json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "lease", l->id, "name", l->name, "weight",
                     (json_int_t)l->weight, "fence", (json_int_t)l->fence, "ttl_ms",
                     (json_int_t)l->ttl_ms, "expires_at", (json_int_t)l->expires_at_ms,
                     "acquired_at", (json_int_t)l->acquired_at_ms);
}

/* The ticket as semad shows it: its semaphores (a ticket on one: its name and weight), and
 * its lease once granted, else its place in line. */
static json_t *ticket_json(const sema_multi_ticket_t *m)
{
    const sema_ticket_t *t = &m->ticket;
    json_t *j =
        json_pack("{s:s,s:s,s:I,s:I}", "ticket", t->id, "status",
                  t->status == SEMA_TICKET_GRANTED ? "granted" : "waiting", "poll_after_ms",
                  (json_int_t)t->poll_after_ms, "keepalive_ms", (json_int_t)t->keepalive_ms);
    if (j == NULL)
        return NULL;
    if (m->nparts > 1) {
        json_object_set_new(j, "semaphores", remote_parts_json(m->parts, m->nparts, 0));
    } else {
        json_object_set_new(j, "name", json_string(t->name));
        json_object_set_new(j, "weight", json_integer((json_int_t)t->weight));
    }
    if (t->tenant[0] != '\0')
        json_object_set_new(j, "tenant", json_string(t->tenant));
    if (t->status == SEMA_TICKET_GRANTED) {
        json_object_set_new(j, "lease", lease_json(m));
        return j;
    }
    json_object_set_new(j, "position", json_integer((json_int_t)t->position));
    json_object_set_new(j, "ahead_weight", json_integer((json_int_t)t->ahead_weight));
    if (t->estimate_p50_ms >= 0)
        json_object_set_new(j, "estimate_ms",
                            json_pack("{s:I,s:I}", "p50", (json_int_t)t->estimate_p50_ms, "p90",
                                      (json_int_t)t->estimate_p90_ms));
    else
        json_object_set_new(j, "estimate_ms", json_null());
    return j;
}

static void print_json(const sema_multi_ticket_t *m)
{
    json_t *j = ticket_json(m);
    if (j != NULL)
        json_dumpf(j, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(j);
}

/* "position 3 (2 units ahead), about 5.2s (p90 8.9s)" */
static void where(const sema_ticket_t *t, FILE *out)
{
    fprintf(out, "position %" PRIu64 " (%" PRIu64 " unit%s ahead)", t->position, t->ahead_weight,
            t->ahead_weight == 1 ? "" : "s");
    if (t->estimate_p50_ms >= 0)
        fprintf(out, ", about %.1fs (p90 %.1fs)", (double)t->estimate_p50_ms / 1000.0,
                (double)t->estimate_p90_ms / 1000.0);
    fprintf(out, "\n");
}

/* Take a place in the line of NAME, or of each of "gpu:2,db:1" at once (one lease on them all
 * once granted): the ticket id on stdout, where it stands on stderr. */
int remote_ticket(remote_opts_t *o)
{
    sema_ticket_opts_t to = {.weight = o->weight,
                             .ttl_ms = o->ttl_ms,
                             .keepalive_ms = o->keepalive_ms,
                             .owner = o->owner,
                             .idempotency_key = o->key,
                             .tenant = o->tenant};
    sema_client_error_t e;
    sema_multi_ticket_t m = {0};
    sema_ticket_t *t = &m.ticket;
    int rc = remote_parse_parts(o);

    if (rc != 0)
        return rc;
    sema_client_t *c = remote_client(o);
    if (c == NULL)
        return CLI_EXIT_USAGE;
    if (o->nparts > 0) /* all at once */
        rc = sema_client_ticket_take_all(c, o->parts, o->nparts, &to, &m, &e);
    else
        rc = sema_client_ticket_take(c, o->pos[0], &to, t, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json) {
        print_json(&m);
    } else {
        printf("%s\n", t->id);
        if (t->status == SEMA_TICKET_GRANTED)
            fprintf(stderr, "granted at once: lease %s\n", t->lease.id);
        else
            where(t, stderr);
    }
    return CLI_EXIT_OK;
}

/* "gpu:2,db:1" (with fences: "gpu=23,db=24") of a ticket on several semaphores. */
static void print_parts(const sema_multi_ticket_t *m, int fences)
{
    for (size_t i = 0; i < m->nparts; i++)
        printf("%s%s%c%" PRIu64, i ? "," : "", m->parts[i].name, fences ? '=' : ':',
               fences ? m->parts[i].fence : m->parts[i].weight);
    printf("\n");
}

static void print_human(const sema_multi_ticket_t *m)
{
    const sema_ticket_t *t = &m->ticket;
    int granted = t->status == SEMA_TICKET_GRANTED;

    printf("ticket     %s\n", t->id);
    if (m->nparts > 1) {
        printf("semaphores ");
        print_parts(m, 0);
    } else {
        printf("name       %s\nweight     %" PRIu64 "\n", t->name, t->weight);
    }
    if (t->tenant[0] != '\0')
        printf("tenant     %s\n", t->tenant);
    printf("status     %s\n", granted ? "granted" : "waiting");
    if (!granted) {
        where(t, stdout);
        return;
    }
    printf("lease      %s\n", t->lease.id);
    if (m->nparts > 1) {
        printf("fences     ");
        print_parts(m, 1);
    } else {
        printf("fence      %" PRIu64 "\n", t->lease.fence);
    }
}

int remote_ticket_show(remote_opts_t *o)
{
    sema_client_error_t e;
    sema_multi_ticket_t m;

    sema_client_t *c = remote_client(o);
    if (c == NULL)
        return CLI_EXIT_USAGE;
    int rc =
        sema_client_ticket_get_all(c, o->pos[0], o->timeout_ms > 0 ? o->timeout_ms : 0, &m, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json)
        print_json(&m);
    else
        print_human(&m);
    return CLI_EXIT_OK;
}

/* Long-poll until the turn comes: the lease id on stdout (the ticket as JSON with --json),
 * position changes on stderr. */
int remote_ticket_wait(remote_opts_t *o)
{
    sema_client_error_t e;
    sema_multi_ticket_t m;
    sema_ticket_t *t = &m.ticket;
    int64_t deadline = o->timeout_ms < 0 ? INT64_MAX : mono_ms() + o->timeout_ms;
    uint64_t shown = 0;
    int rc;

    sema_client_t *c = remote_client(o);
    if (c == NULL)
        return CLI_EXIT_USAGE;
    for (int first = 1;; first = 0) {
        /* the first read answers at once: where the ticket stands now */
        int64_t left = first ? 0 : deadline == INT64_MAX ? LONG_POLL_MS : deadline - mono_ms();
        if (left > LONG_POLL_MS)
            left = LONG_POLL_MS;
        if (left < 0)
            left = 0;
        rc = sema_client_ticket_get_all(c, o->pos[0], left, &m, &e);
        if (rc != 0 || t->status == SEMA_TICKET_GRANTED)
            break;
        if (!o->json && t->position != shown) {
            where(t, stderr);
            shown = t->position;
        }
        if (mono_ms() >= deadline) {
            rc = e.code = SEMA_ETIMEDOUT;
            snprintf(e.message, sizeof e.message,
                     "still waiting at position %" PRIu64
                     " (the ticket keeps its place while read)",
                     t->position);
            break;
        }
    }
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json)
        print_json(&m);
    else
        printf("%s\n", t->lease.id);
    return CLI_EXIT_OK;
}

int remote_ticket_leave(remote_opts_t *o)
{
    sema_client_error_t e;

    sema_client_t *c = remote_client(o);
    if (c == NULL)
        return CLI_EXIT_USAGE;
    int rc = sema_client_ticket_leave(c, o->pos[0], &e);
    sema_client_free(c);
    return rc != 0 ? remote_fail(o, o->pos[0], rc, &e) : CLI_EXIT_OK;
}
