/* SPDX-License-Identifier: MIT */
/* client_ticket.c - tickets over semad's v1 API: a place in a semaphore's queue (or in the
 * queues of several at once) that holds no connection, read now or by long poll, and left. */
#include "client/client_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICKET_MAX_WAIT_MS (5 * 60 * 1000) /* the server's longest ?wait= */

/* An estimate's bound: a number, or -1 when the server has none yet. */
static int64_t estimate_of(json_t *est, const char *key)
{
    json_t *v = json_object_get(est, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* The semaphore and weight a ticket shows: its own, or its first part's (a ticket on several
 * semaphores names "semaphores" instead). Returns 0 or SEMA_EPROTO. */
static int ticket_head(json_t *doc, sema_ticket_t *t)
{
    json_t *first = json_array_get(json_object_get(doc, "semaphores"), 0);
    json_t *from = first != NULL ? first : doc;
    const char *name = json_string_value(json_object_get(from, "name"));

    if (name == NULL || strlen(name) >= sizeof t->name ||
        client_json_u64(from, "weight", &t->weight))
        return SEMA_EPROTO;
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

/* The tenant a ticket named ("" for none). Returns 0 or SEMA_EPROTO. */
static int ticket_tenant(json_t *doc, sema_ticket_t *t)
{
    json_t *v = json_object_get(doc, "tenant");
    const char *tenant = json_string_value(v);

    if (v == NULL || json_is_null(v))
        return 0;
    if (tenant == NULL || strlen(tenant) >= sizeof t->tenant)
        return SEMA_EPROTO;
    snprintf(t->tenant, sizeof t->tenant, "%s", tenant);
    return 0;
}

/* A waiting ticket's place: position, the weight ahead, the estimate. */
static int ticket_place(json_t *doc, sema_ticket_t *t)
{
    if (client_json_u64(doc, "position", &t->position) ||
        client_json_u64(doc, "ahead_weight", &t->ahead_weight) || t->position == 0)
        return SEMA_EPROTO;
    t->status = SEMA_TICKET_WAITING;
    json_t *est = json_object_get(doc, "estimate_ms");
    if (json_is_object(est)) {
        t->estimate_p50_ms = estimate_of(est, "p50");
        t->estimate_p90_ms = estimate_of(est, "p90");
    }
    return 0;
}

/* Parse a ticket object into *t; `sent_ns` is when the request left (the lease's local
 * deadline). Returns 0 or SEMA_EPROTO. */
static int parse_ticket(json_t *doc, int64_t sent_ns, sema_ticket_t *t)
{
    const char *id = json_string_value(json_object_get(doc, "ticket"));
    const char *status = json_string_value(json_object_get(doc, "status"));

    memset(t, 0, sizeof *t);
    t->estimate_p50_ms = t->estimate_p90_ms = -1;
    if (id == NULL || id[0] == '\0' || strlen(id) >= sizeof t->id || status == NULL ||
        ticket_head(doc, t) || ticket_tenant(doc, t) ||
        client_json_i64(doc, "poll_after_ms", &t->poll_after_ms) ||
        client_json_i64(doc, "keepalive_ms", &t->keepalive_ms))
        return SEMA_EPROTO;
    snprintf(t->id, sizeof t->id, "%s", id);
    if (strcmp(status, "granted") == 0) {
        t->status = SEMA_TICKET_GRANTED;
        return client_parse_lease(json_object_get(doc, "lease"), sent_ns, &t->lease);
    }
    return strcmp(status, "waiting") == 0 ? ticket_place(doc, t) : SEMA_EPROTO;
}

/* m->parts of a ticket parsed into m->ticket: its semaphores (with the lease's fences once
 * granted), or its one semaphore. Returns 0 or SEMA_EPROTO. */
static int parse_ticket_parts(json_t *doc, sema_multi_ticket_t *m)
{
    const sema_ticket_t *t = &m->ticket;
    int granted = t->status == SEMA_TICKET_GRANTED, n;

    if (json_object_get(doc, "semaphores") == NULL) {
        m->nparts = 1;
        snprintf(m->parts[0].name, sizeof m->parts[0].name, "%s", t->name);
        m->parts[0].weight = t->weight;
        m->parts[0].fence = granted ? t->lease.fence : 0;
        return 0;
    }
    n = client_parse_parts(granted ? json_object_get(doc, "lease") : doc, granted, m->parts);
    if (n < 0)
        return SEMA_EPROTO;
    m->nparts = (size_t)n;
    return 0;
}

/* One request that answers a ticket, into *t, and into m->parts when m (whose ticket t is)
 * is not NULL; both zeroed on failure. */
static int ticket_call(sema_client_t *c, const client_req_t *req, sema_ticket_t *t,
                       sema_multi_ticket_t *m, sema_client_error_t *err)
{
    json_t *doc = NULL;
    int64_t sent = client_now_ns();
    int rc = client_call(c, req, 1, &doc, err);

    if (rc == 0 &&
        (parse_ticket(doc, sent, t) != 0 || (m != NULL && parse_ticket_parts(doc, m) != 0)))
        rc = client_fail(err, SEMA_EPROTO, 200, "unexpected ticket from server");
    if (rc != 0 && m != NULL)
        memset(m, 0, sizeof *m);
    else if (rc != 0)
        memset(t, 0, sizeof *t);
    json_decref(doc);
    if (rc == 0)
        client_clear(err);
    return rc;
}

static int check_ticket_id(const char *id, sema_client_error_t *err)
{
    if (id == NULL || id[0] == '\0' || strlen(id) >= SEMA_LEASE_ID_MAX)
        return client_fail(err, SEMA_EINVAL, 0, "not a ticket id");
    return 0;
}

/* Check a take's options, and put its idempotency key (the caller's, or a random one) into
 * key[len]. */
static int ticket_key(const sema_ticket_opts_t *o, char *key, size_t len, sema_client_error_t *err)
{
    if (o->ttl_ms < 0 || o->keepalive_ms < 0)
        return client_fail(err, SEMA_EINVAL, 0, "ttl_ms and keepalive_ms must be >= 0");
    return client_idem_key(o->idempotency_key, key, len, err);
}

/* Add what every take sends to `body`: owner, ttl, keepalive and tenant. Returns 0,
 * SEMA_EINVAL (an owner or tenant that is not UTF-8) or SEMA_ENOMEM, with err filled. */
static int ticket_fields(sema_client_t *c, json_t *body, const sema_ticket_opts_t *o,
                         sema_client_error_t *err)
{
    int rc = client_set_text(body, "owner", o->owner != NULL ? o->owner : c->owner, err);

    if (rc == 0)
        rc = client_set_text(body, "tenant", o->tenant, err);
    if (rc != 0)
        return rc;
    if (o->ttl_ms > 0)
        json_object_set_new(body, "ttl_ms", json_integer(o->ttl_ms));
    if (o->keepalive_ms > 0)
        json_object_set_new(body, "keepalive_ms", json_integer(o->keepalive_ms));
    return 0;
}

/* POST a take to `path` (NULL: out of memory) with `body` (stolen: its weight or semaphores
 * set, NULL: out of memory), the fields every take sends, and the idempotency key, which
 * makes a retry find the same place (or the same grant). */
static int ticket_post(sema_client_t *c, const char *path, json_t *body,
                       const sema_ticket_opts_t *o, sema_ticket_t *t, sema_multi_ticket_t *m,
                       sema_client_error_t *err)
{
    char key[80];
    int rc = ticket_key(o, key, sizeof key, err);

    if (rc == 0 && (body == NULL || path == NULL))
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    if (rc == 0)
        rc = ticket_fields(c, body, o, err);
    if (rc == 0) {
        client_req_t req = {.method = "POST", .path = path, .body = body, .idem_key = key};
        rc = ticket_call(c, &req, t, m, err);
    }
    json_decref(body);
    return rc;
}

int sema_client_ticket_take(sema_client_t *c, const char *name, const sema_ticket_opts_t *opts,
                            sema_ticket_t *t, sema_client_error_t *err)
{
    sema_ticket_opts_t dflt = {0};
    const sema_ticket_opts_t *o = opts != NULL ? opts : &dflt;
    uint64_t weight = o->weight > 0 ? o->weight : 1;
    int rc;

    if (t == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no ticket to fill");
    memset(t, 0, sizeof *t);
    if ((rc = client_check_name(name, err)) != 0)
        return rc;
    if (weight > (1ull << 53))
        return client_fail(err, SEMA_EINVAL, 0, "weight above 2^53");
    char *path = client_path("/v1/semaphores/", name, "/tickets");
    rc = ticket_post(c, path, json_pack("{s:I}", "weight", (json_int_t)weight), o, t, NULL, err);
    free(path);
    return rc;
}

int sema_client_ticket_take_all(sema_client_t *c, const sema_client_part_t *parts, size_t nparts,
                                const sema_ticket_opts_t *opts, sema_multi_ticket_t *t,
                                sema_client_error_t *err)
{
    sema_ticket_opts_t dflt = {0};
    json_t *arr;
    int rc;

    if (t == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no ticket to fill");
    memset(t, 0, sizeof *t);
    if ((rc = client_parts_body(parts, nparts, &arr, err)) != 0)
        return rc;
    json_t *body = json_object();
    if (body == NULL || json_object_set_new(body, "semaphores", arr) != 0) {
        json_decref(body);
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    }
    return ticket_post(c, "/v1/tickets", body, opts != NULL ? opts : &dflt, &t->ticket, t, err);
}

/* GET /v1/tickets/{id}[?wait=], into *t (and m->parts when m is not NULL). */
static int ticket_read(sema_client_t *c, const char *id, int64_t wait_ms, sema_ticket_t *t,
                       sema_multi_ticket_t *m, sema_client_error_t *err)
{
    char suffix[32] = "";
    int rc;

    if ((rc = check_ticket_id(id, err)) != 0)
        return rc;
    if (wait_ms < 0 || wait_ms > TICKET_MAX_WAIT_MS)
        return client_fail(err, SEMA_EINVAL, 0, "wait_ms must be 0..300000");
    if (wait_ms > 0)
        snprintf(suffix, sizeof suffix, "?wait=%lldms", (long long)wait_ms);
    char *path = client_path("/v1/tickets/", id, suffix);
    if (path == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    client_req_t req = {.method = "GET", .path = path, .wait_ms = wait_ms};
    rc = ticket_call(c, &req, t, m, err);
    free(path);
    return rc;
}

int sema_client_ticket_get(sema_client_t *c, const char *id, int64_t wait_ms, sema_ticket_t *t,
                           sema_client_error_t *err)
{
    if (t == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no ticket to fill");
    memset(t, 0, sizeof *t);
    return ticket_read(c, id, wait_ms, t, NULL, err);
}

int sema_client_ticket_get_all(sema_client_t *c, const char *id, int64_t wait_ms,
                               sema_multi_ticket_t *t, sema_client_error_t *err)
{
    if (t == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no ticket to fill");
    memset(t, 0, sizeof *t);
    return ticket_read(c, id, wait_ms, &t->ticket, t, err);
}

int sema_client_ticket_leave(sema_client_t *c, const char *id, sema_client_error_t *err)
{
    int rc = check_ticket_id(id, err);
    return rc != 0 ? rc : client_delete_retried(c, "/v1/tickets/", id, SEMA_EGONE, err);
}
