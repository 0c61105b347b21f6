/* SPDX-License-Identifier: MIT */
/* routes_v1.c - the v1 API: request validation (types and ranges; the engine checks
 * meaning), engine requests, and replies in the wire format of docs/http-api.md. */
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "common/parse.h"
#include "common/suggest.h"
#include "engine/engine_limits.h"
#include "http/body.h"
#include "http/server.h"

#include "sema/error.h"

#define MAX_EXACT ((json_int_t)1 << 53) /* larger numbers are rejected, never rounded */

/* Reply 400 "<field> <what>". */
static void bad(route_ctx_t *c, const char *field, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s %s", field, what);
    ctx_reply_problem(c, 400, "invalid_request", msg);
}

enum { SHOWN_KEY_MAX = 64 }; /* longer keys are cut (at a UTF-8 boundary) in the message */

/* Reply 400 `unknown field "ttl" (did you mean "ttl_ms"?); the fields are: ...`, the fields
 * being those the route read. */
static void unknown_field(route_ctx_t *c, const body_t *body, const char *key, size_t len)
{
    char shown[SHOWN_KEY_MAX + 1], list[160], msg[BODY_ERR_MAX + 64];
    size_t n = len;
    if (n > SHOWN_KEY_MAX) {
        n = SHOWN_KEY_MAX;
        while (n > 0 && ((unsigned char)key[n] & 0xC0) == 0x80)
            n--; /* not inside a UTF-8 sequence */
    }
    memcpy(shown, key, n);
    shown[n] = '\0';
    suggest_t sg;
    suggest_init(&sg, shown);
    size_t used = 0;
    list[0] = '\0';
    const char *unit = NULL; /* "ttl" for "ttl_ms": the unit left out */
    for (size_t i = 0; i < body->n_asked; i++) {
        const char *k = body->asked[i];
        suggest_offer(&sg, k);
        if (strlen(k) == n + 3 && memcmp(k, shown, n) == 0 && strcmp(k + n, "_ms") == 0)
            unit = k;
        int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", k);
        if (w > 0 && (size_t)w < sizeof list - used)
            used += (size_t)w;
    }
    const char *best = n < len ? NULL : unit != NULL ? unit : suggest_best(&sg);
    snprintf(msg, sizeof msg, "unknown field \"%s%s\"%s%s%s; the fields are: %s", shown,
             n < len ? "..." : "", best ? " (did you mean \"" : "", best ? best : "",
             best ? "\"?)" : "", list);
    ctx_reply_problem(c, 400, "invalid_request", msg);
}

/* The body as a JSON object ({} when empty and `required` is 0) into *body; returns 0, or
 * -1 after a 400. The route reads its fields, then ends with v1_body_end(). */
static int v1_body(route_ctx_t *c, int required, body_t *body)
{
    const struct strbuf *b = &c->req->body;
    if (b->len == 0) {
        body_init(body);
        if (!required)
            return 0;
        ctx_reply_problem(c, 400, "invalid_request", "a JSON object body is required");
        return -1;
    }
    char msg[BODY_ERR_MAX];
    if (body_parse(body, b->data, b->len, msg, sizeof msg) != 0) {
        ctx_reply_problem(c, 400, "invalid_request", msg);
        return -1;
    }
    return 0;
}

/* Frees the body. When its fields were good (`rc` >= 0), a field the route did not read is
 * refused: a typo ("ttl" for "ttl_ms") is a 400 naming it, never a default silently taken.
 * Returns rc, or -1 after a 400. */
static int v1_body_end(route_ctx_t *c, body_t *body, int rc)
{
    const char *key;
    size_t len;
    if (rc >= 0 && body_unasked(body, &key, &len)) {
        unknown_field(c, body, key, len);
        rc = -1;
    }
    body_free(body);
    return rc;
}

/* An integer field in [min, 2^53]. Returns 1 given, 0 absent or null, -1 after a 400. A route
 * asks for each field once (so a body whose every member was found has no more). */
static int field_int(route_ctx_t *c, body_t *o, const char *key, json_int_t min, json_int_t *out)
{
    if (body_all_found(o))
        return 0;
    bval_t v = body_get(o, key);
    if (v.type == BV_ABSENT || v.type == BV_NULL)
        return 0;
    if (v.type != BV_INT) {
        bad(c, key, "must be an integer");
        return -1;
    }
    json_int_t n = v.i;
    if (n > MAX_EXACT) {
        bad(c, key, "must be at most 2^53");
        return -1;
    }
    if (n < min) {
        bad(c, key, min == 0 ? "must not be negative" : "must be at least 1");
        return -1;
    }
    *out = n;
    return 1;
}

/* An optional string field, copied into *out (the engine checks its length). */
static int field_str(route_ctx_t *c, body_t *o, const char *key, char **out)
{
    if (body_all_found(o))
        return 0;
    bval_t v = body_get(o, key);
    if (v.type == BV_ABSENT || v.type == BV_NULL)
        return 0;
    if (v.type != BV_STR) {
        bad(c, key, "must be a string");
        return -1;
    }
    *out = strndup(v.s, v.len);
    if (*out == NULL) {
        ctx_reply_err(c, SEMA_ENOMEM, NULL);
        return -1;
    }
    return 1;
}

/* The path's parameter: a semaphore name or lock key (a ROUTE_NAMED route), else an id. */
static void use_param(route_ctx_t *c, engine_op_t op)
{
    c->ereq.op = op;
    if (c->route->flags & ROUTE_NAMED) {
        c->ereq.name = c->param;
        c->ereq.name_len = c->param_len;
    } else {
        c->ereq.id = c->param;
        c->ereq.id_len = c->param_len;
    }
}

/* tenant_max, rate_per_s and rate_burst: each sets its ENGINE_LIMIT_* when given. Returns 0,
 * or -1 after a 400. */
static int take_limits(route_ctx_t *c, body_t *body)
{
    static const struct {
        const char *key;
        unsigned bit;
    } fields[] = {{"tenant_max", ENGINE_LIMIT_TENANT_MAX},
                  {"rate_per_s", ENGINE_LIMIT_RATE},
                  {"rate_burst", ENGINE_LIMIT_BURST}};
    uint64_t *to[] = {&c->ereq.tenant_max, &c->ereq.rate_per_s, &c->ereq.rate_burst};

    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        json_int_t v;
        int rc = field_int(c, body, fields[i].key, 0, &v);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            *to[i] = (uint64_t)v;
            c->ereq.limits |= fields[i].bit;
        }
    }
    return 0;
}

/* {"capacity":N,"tenant_max":T,"rate_per_s":R,"rate_burst":B} for PUT (capacity required) and
 * PATCH (any of them). */
static void put_or_patch(route_ctx_t *c, engine_op_t op)
{
    body_t body;
    json_int_t cap = 0;
    if (v1_body(c, 1, &body) != 0)
        return;
    int rc = field_int(c, &body, "capacity", 0, &cap);
    if (rc >= 0 && take_limits(c, &body) != 0)
        rc = -1;
    rc = v1_body_end(c, &body, rc);
    if (rc < 0)
        return;
    if (rc == 0 && op == ENGINE_SEM_PUT) {
        ctx_reply_problem(c, 400, "invalid_request", "capacity is required");
        return;
    }
    unsigned limits = c->ereq.limits;
    use_param(c, op);
    c->ereq.limits = limits;
    c->ereq.capacity = (uint64_t)cap;
    ctx_submit(c, ctx_done_default);
}

/* PUT /v1/semaphores/{name}  {"capacity":N,"tenant_max":T,"rate_per_s":R,"rate_burst":B} */
void v1_sem_put(route_ctx_t *c)
{
    put_or_patch(c, ENGINE_SEM_PUT);
}

/* PATCH /v1/semaphores/{name}  {"capacity":N,"tenant_max":T,"rate_per_s":R,"rate_burst":B} */
void v1_sem_patch(route_ctx_t *c)
{
    put_or_patch(c, ENGINE_SEM_RESIZE);
}

/* GET /v1/semaphores/{name} */
void v1_sem_get(route_ctx_t *c)
{
    use_param(c, ENGINE_SEM_GET);
    ctx_submit(c, ctx_done_default);
}

/* DELETE /v1/semaphores/{name} */
void v1_sem_delete(route_ctx_t *c)
{
    use_param(c, ENGINE_SEM_DELETE);
    ctx_submit(c, ctx_done_default);
}

/* A list's query (prefix, limit, cursor) into c->ereq for `op`, then the engine. */
static void list_query(route_ctx_t *c, engine_op_t op)
{
    char *limit = NULL;
    if (http_query_get(c->query, "prefix", &c->list.prefix) < 0 ||
        http_query_get(c->query, "cursor", &c->list.cursor) < 0 ||
        http_query_get(c->query, "limit", &limit) < 0) {
        free(limit);
        ctx_reply_problem(c, 400, "invalid_request", "bad percent-encoding in the query");
        return;
    }
    uint64_t n = 0;
    if (limit != NULL && (parse_u64(limit, &n) != 0 || n == 0 || n > ENGINE_LIST_LIMIT_MAX)) {
        free(limit);
        ctx_reply_problem(c, 400, "invalid_request", "limit must be an integer in 1..1000");
        return;
    }
    free(limit);
    c->ereq.op = op;
    c->ereq.prefix = c->list.prefix;
    c->ereq.cursor = c->list.cursor != NULL && c->list.cursor[0] != '\0' ? c->list.cursor : NULL;
    c->ereq.limit = n;
    ctx_submit(c, ctx_done_default);
}

/* GET /v1/semaphores?prefix=&limit=&cursor= */
void v1_sem_list(route_ctx_t *c)
{
    list_query(c, ENGINE_SEM_LIST);
}

/* GET /v1/locks?prefix=&limit=&cursor= */
void v1_lock_list(route_ctx_t *c)
{
    list_query(c, ENGINE_LOCK_LIST);
}

/* timeout_ms: absent or null = wait forever, 0 = try once, > 0 = wait that long. */
static int take_timeout(route_ctx_t *c, body_t *body)
{
    json_int_t t;
    int rc = field_int(c, body, "timeout_ms", 0, &t);
    c->ereq.timeout_ms = rc == 1 ? (int64_t)t : -1;
    return rc < 0 ? -1 : 0;
}

/* ttl_ms (>= 1, absent = server default) and owner, shared by the acquire routes. */
static int take_lease_fields(route_ctx_t *c, body_t *body)
{
    json_int_t ttl = 0;
    if (take_timeout(c, body) != 0 || field_int(c, body, "ttl_ms", 1, &ttl) < 0 ||
        field_str(c, body, "owner", &c->owner) < 0)
        return -1;
    c->ereq.ttl_ms = (int64_t)ttl;
    c->ereq.owner = c->owner;
    c->ereq.idem_key = c->req->idem_key;
    return 0;
}

/* "tenant": optional (the engine checks its length and UTF-8). */
static int take_tenant(route_ctx_t *c, body_t *body)
{
    char *tenant = NULL;

    if (field_str(c, body, "tenant", &tenant) < 0)
        return -1;
    c->ereq.tenant = tenant; /* owned: freed with the request (ctx_cleanup) */
    return 0;
}

/* One object of "semaphores": {"name":N,"weight":W} (weight 1 when absent), its members
 * read in one walk. */
static int take_part(route_ctx_t *c, json_t *o, engine_part_t *p)
{
    const char *k;
    json_t *v, *name = NULL, *w = NULL;

    json_object_foreach(o, k, v)
    {
        if (strcmp(k, "name") == 0) {
            name = v;
        } else if (strcmp(k, "weight") == 0) {
            w = v;
        } else {
            bad(c, "semaphores", "entries take only \"name\" and \"weight\"");
            return -1;
        }
    }
    if (!json_is_string(name) || json_string_length(name) == 0 ||
        memchr(json_string_value(name), '\0', json_string_length(name)) != NULL) {
        bad(c, "semaphores", "entries need a \"name\": a non-empty string");
        return -1;
    }
    if (w != NULL && !json_is_null(w) &&
        (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > MAX_EXACT)) {
        bad(c, "semaphores", "entries' \"weight\" must be an integer in 1..2^53");
        return -1;
    }
    p->name = json_string_value(name);
    p->name_len = json_string_length(name);
    p->weight = w != NULL && json_is_integer(w) ? (uint64_t)json_integer_value(w) : 1;
    return 0;
}

/* "semaphores":[{"name":N,"weight":W},...] (required): 1..ENGINE_PARTS_MAX entries. */
static int take_parts(route_ctx_t *c, body_t *body)
{
    bval_t v = body_get(body, "semaphores");
    json_t *a = v.json;
    size_t n = json_is_array(a) ? json_array_size(a) : 0;

    if (v.type == BV_ABSENT) {
        ctx_reply_problem(c, 400, "invalid_request", "semaphores is required");
        return -1;
    }
    if (n == 0 || n > ENGINE_PARTS_MAX) {
        bad(c, "semaphores", "must be an array of 1 to 16 objects {\"name\",\"weight\"}");
        return -1;
    }
    c->parts = calloc(n, sizeof(*c->parts));
    if (c->parts == NULL) {
        ctx_reply_err(c, SEMA_ENOMEM, NULL);
        return -1;
    }
    c->json = json_incref(a);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(a, i);
        if (!json_is_object(o)) {
            bad(c, "semaphores", "must be an array of objects {\"name\",\"weight\"}");
            return -1;
        }
        if (take_part(c, o, &c->parts[i]) != 0)
            return -1;
    }
    c->ereq.parts = c->parts;
    c->ereq.nparts = n;
    return 0;
}

static void grant_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status == 0 && req->res.kind == ENGINE_RES_LEASE)
        ctx_reply_grant(c, &req->res.lease);
    else
        ctx_done_default(c, req);
}

/* POST /v1/semaphores/{name}/acquire  {"weight":1,"timeout_ms":T,"ttl_ms":L,"owner":"..."}
 * with an optional Idempotency-Key header. Parks until granted, timed out or cancelled. */
void v1_acquire(route_ctx_t *c)
{
    body_t body;
    json_int_t w = 1;
    if (v1_body(c, 0, &body) != 0)
        return;
    int rc = field_int(c, &body, "weight", 0, &w) < 0 || take_lease_fields(c, &body) != 0 ||
                     take_tenant(c, &body) != 0
                 ? -1
                 : 0;
    rc = v1_body_end(c, &body, rc);
    if (rc != 0)
        return;
    use_param(c, ENGINE_ACQUIRE);
    c->ereq.weight = (uint64_t)w;
    ctx_submit(c, grant_done);
}

/* POST /v1/acquire  {"semaphores":[{"name":"gpu","weight":2},{"name":"db"}],"timeout_ms":T,
 * "ttl_ms":L,"owner":"...","tenant":"..."} with an optional Idempotency-Key: all of them at
 * once, or nothing (one lease with a fence per semaphore). */
void v1_acquire_multi(route_ctx_t *c)
{
    body_t body;
    if (v1_body(c, 1, &body) != 0)
        return;
    int rc =
        take_parts(c, &body) != 0 || take_lease_fields(c, &body) != 0 || take_tenant(c, &body) != 0
            ? -1
            : 0;
    rc = v1_body_end(c, &body, rc);
    if (rc != 0)
        return;
    c->ereq.op = ENGINE_ACQUIRE_MULTI;
    ctx_submit(c, grant_done);
}

/* POST /v1/semaphores/{name}/wait-idle  {"timeout_ms":T} */
void v1_wait_idle(route_ctx_t *c)
{
    body_t body;
    if (v1_body(c, 0, &body) != 0)
        return;
    int rc = take_timeout(c, &body);
    rc = v1_body_end(c, &body, rc);
    if (rc != 0)
        return;
    use_param(c, ENGINE_WAIT_IDLE);
    ctx_submit(c, ctx_done_default);
}

/* ttl_ms, keepalive_ms, owner and tenant of a new ticket, and its Idempotency-Key. */
static int take_ticket_fields(route_ctx_t *c, body_t *body)
{
    json_int_t ttl = 0, keepalive = 0;
    if (field_int(c, body, "ttl_ms", 1, &ttl) < 0 ||
        field_int(c, body, "keepalive_ms", 1, &keepalive) < 0 ||
        field_str(c, body, "owner", &c->owner) < 0 || take_tenant(c, body) != 0)
        return -1;
    c->ereq.ttl_ms = (int64_t)ttl;
    c->ereq.keepalive_ms = (int64_t)keepalive;
    c->ereq.owner = c->owner;
    c->ereq.idem_key = c->req->idem_key;
    return 0;
}

/* POST /v1/semaphores/{name}/tickets  {"weight":1,"ttl_ms":L,"owner":"...","keepalive_ms":K}
 * with an optional Idempotency-Key header. Answers at once: waiting, or granted. */
void v1_ticket_create(route_ctx_t *c)
{
    body_t body;
    json_int_t w = 1;
    if (v1_body(c, 0, &body) != 0)
        return;
    int rc = field_int(c, &body, "weight", 0, &w) < 0 || take_ticket_fields(c, &body) != 0 ? -1 : 0;
    rc = v1_body_end(c, &body, rc);
    if (rc != 0)
        return;
    use_param(c, ENGINE_TICKET_CREATE);
    c->ereq.weight = (uint64_t)w;
    ctx_submit(c, ctx_done_default);
}

/* POST /v1/tickets  {"semaphores":[{"name","weight"},...],"ttl_ms":L,"owner":"...",
 * "keepalive_ms":K,"tenant":"..."} with an optional Idempotency-Key: a place in each line,
 * granted all at once. */
void v1_ticket_create_multi(route_ctx_t *c)
{
    body_t body;
    if (v1_body(c, 1, &body) != 0)
        return;
    int rc = take_parts(c, &body) != 0 || take_ticket_fields(c, &body) != 0 ? -1 : 0;
    rc = v1_body_end(c, &body, rc);
    if (rc != 0)
        return;
    c->ereq.op = ENGINE_TICKET_CREATE;
    ctx_submit(c, ctx_done_default);
}

/* GET /v1/tickets/{id}?wait=DURATION: with wait, a long-poll that answers when the status or
 * the position changes (position changes at most once per poll_after_ms). */
void v1_ticket_get(route_ctx_t *c)
{
    char *wait = NULL;
    int64_t ms = 0;
    if (http_query_get(c->query, "wait", &wait) < 0 ||
        (wait != NULL && (parse_ms(wait, &ms) != 0 || ms < 0 || ms > ENGINE_TICKET_WAIT_MAX_MS))) {
        free(wait);
        ctx_reply_problem(c, 400, "invalid_request",
                          "wait must be a duration between 0 and 5m (e.g. 500ms, 30s)");
        return;
    }
    free(wait);
    use_param(c, ENGINE_TICKET_GET);
    c->ereq.timeout_ms = ms;
    c->ereq.seen = 0;
    ctx_submit(c, ctx_done_default);
}

/* DELETE /v1/tickets/{id} */
void v1_ticket_delete(route_ctx_t *c)
{
    use_param(c, ENGINE_TICKET_DELETE);
    ctx_submit(c, ctx_done_default);
}

/* GET /v1/leases/{id} */
void v1_lease_get(route_ctx_t *c)
{
    use_param(c, ENGINE_LEASE_GET);
    ctx_submit(c, ctx_done_default);
}

/* POST /v1/leases/{id}/renew  {"ttl_ms":L} */
void v1_lease_renew(route_ctx_t *c)
{
    body_t body;
    json_int_t ttl = 0;
    if (v1_body(c, 0, &body) != 0)
        return;
    int rc = field_int(c, &body, "ttl_ms", 1, &ttl);
    rc = v1_body_end(c, &body, rc);
    if (rc < 0)
        return;
    use_param(c, ENGINE_LEASE_RENEW);
    c->ereq.ttl_ms = (int64_t)ttl;
    ctx_submit(c, ctx_done_default);
}

/* DELETE /v1/leases/{id} */
void v1_lease_release(route_ctx_t *c)
{
    use_param(c, ENGINE_LEASE_RELEASE);
    ctx_submit(c, ctx_done_default);
}

/* POST /v1/leases/{id}/revoke */
void v1_lease_revoke(route_ctx_t *c)
{
    use_param(c, ENGINE_LEASE_REVOKE);
    ctx_submit(c, ctx_done_default);
}

/* Equal as C strings (a string with a NUL byte compares up to it, as strcmp did). */
static int bv_streq(bval_t v, const char *lit)
{
    if (v.type != BV_STR)
        return 0;
    size_t n = strnlen(v.s, v.len);
    return n == strlen(lit) && memcmp(v.s, lit, n) == 0;
}

static int take_mode(route_ctx_t *c, body_t *body)
{
    bval_t m = body_get(body, "mode");
    if (m.type == BV_STR && bv_streq(m, "shared"))
        c->ereq.mode = ENGINE_MODE_SHARED;
    else if (m.type == BV_STR && bv_streq(m, "exclusive"))
        c->ereq.mode = ENGINE_MODE_EXCLUSIVE;
    else if (m.type == BV_ABSENT || m.type == BV_NULL) /* null is absent, as for every field */
        c->ereq.mode = ENGINE_MODE_EXCLUSIVE;
    else {
        ctx_reply_problem(c, 400, "invalid_request", "mode must be \"shared\" or \"exclusive\"");
        return -1;
    }
    return 0;
}

/* POST /v1/locks/{key}/acquire  {"mode":"shared"|"exclusive","timeout_ms","ttl_ms","owner"} */
void v1_lock_acquire(route_ctx_t *c)
{
    body_t body;
    if (v1_body(c, 0, &body) != 0)
        return;
    int rc = take_mode(c, &body) != 0 ? -1 : take_lease_fields(c, &body);
    rc = v1_body_end(c, &body, rc);
    if (rc != 0)
        return;
    int mode = c->ereq.mode;
    use_param(c, ENGINE_LOCK_ACQUIRE);
    c->ereq.mode = mode;
    ctx_submit(c, grant_done);
}

/* GET /v1/locks/{key} */
void v1_lock_get(route_ctx_t *c)
{
    use_param(c, ENGINE_LOCK_GET);
    ctx_submit(c, ctx_done_default);
}

/* GET /healthz: {"status"[,"code"],"semaphores","leases","parked","locks","connections"
 * [,"contact_age_ms"]}, written directly (it is the plain-request benchmark's route). 503
 * while stopping, and while the store does not answer (Redis: never yet, lost, or silent for
 * more than ENGINE_CONTACT_MAX_MS), with a code saying which. */
void v1_healthz(route_ctx_t *c)
{
    static const char *const heads[] = {
        [ENGINE_STORE_OK] = "{\"status\":\"ok\"",
        [ENGINE_STORE_STARTING] = "{\"status\":\"starting\",\"code\":\"store_never_answered\"",
        [ENGINE_STORE_UNREACHABLE] = "{\"status\":\"unavailable\",\"code\":\"store_unreachable\"",
        [ENGINE_STORE_SILENT] = "{\"status\":\"unavailable\",\"code\":\"store_not_answering\""};
    static const char *const keys[] = {
        ",\"semaphores\":", ",\"leases\":",      ",\"parked\":",
        ",\"locks\":",      ",\"connections\":", ",\"contact_age_ms\":"};
    engine_stats_t st;
    int draining = server_draining(c->srv);
    engine_stats(server_engine(c->srv), &st);
    const uint64_t v[] = {st.semaphores,
                          st.leases,
                          st.parked,
                          st.locks,
                          server_connections(c->srv),
                          (uint64_t)st.contact_age_ms};
    size_t nv = sizeof v / sizeof v[0] - (st.contact_age_ms < 0);
    char body[320], *p = body;
    const char *head = draining ? "{\"status\":\"stopping\"" : heads[st.store];
    size_t hn = strlen(head);
    memcpy(p, head, hn);
    p += hn;
    for (size_t i = 0; i < nv; i++) {
        size_t kn = strlen(keys[i]);
        memcpy(p, keys[i], kn);
        char num[24], *d = jsonw_u64_digits(v[i], num + sizeof num);
        memcpy(p + kn, d, (size_t)(num + sizeof num - d));
        p += kn + (size_t)(num + sizeof num - d);
    }
    *p++ = '}';
    *p++ = '\n';
    ctx_reply(c, draining || st.store != ENGINE_STORE_OK ? 503 : 200,
              "application/json; charset=utf-8", body, (size_t)(p - body));
}

static void metrics_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status != 0)
        ctx_reply_err(c, req->status, NULL);
    else
        ctx_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", req->text->data,
                  req->text->len);
}

/* GET /metrics  (Prometheus text format): the server's series, then the engine's (which may
 * read some from its store: the reply waits for them, the loop does not). The text is the
 * request's (ereq.text, freed with it: a parked request carries no field for it). */
void v1_metrics(route_ctx_t *c)
{
    int rc;

    c->ereq.op = ENGINE_METRICS;
    rc = (c->ereq.text = malloc(sizeof *c->ereq.text)) == NULL ? SEMA_ENOMEM : 0;
    if (rc == 0) {
        strbuf_init(c->ereq.text, 0);
        rc = server_metrics(c->srv, c->ereq.text);
    }
    if (rc != 0) {
        ctx_reply_err(c, rc, NULL);
        return;
    }
    ctx_submit(c, metrics_done);
}
