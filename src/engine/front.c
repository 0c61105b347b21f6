/* SPDX-License-Identifier: MIT */
/* front.c - the engine front: starts its back end, checks every request's inputs against
 * the limits in one place, counts operations, hands out lease ids, and delivers completed
 * requests with their typed results. */
#include "engine/front.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/alloc.h"
#include "common/jsonw.h"
#include "engine/engine_limits.h"

#define LEASE_ID_BYTES 18 /* 24 base64url characters */

/* ---- configuration and lifecycle ---- */

void engine_config_default(engine_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_semaphores = 10000000;
    cfg->max_waiters_per_sem = 100000;
    cfg->max_waiters_total = 1000000;
    cfg->max_name_len = 256;
    cfg->default_ttl_ms = 60000;
    cfg->max_ttl_ms = 86400000;
    cfg->lock_readers = 1048576;
    cfg->max_locks = 1000000;
    cfg->metrics_max_semaphores = 100;
    cfg->metrics_max_tenants = 20;
    cfg->events_retain_ms = ENGINE_EVENTS_RETAIN_MS;
    cfg->ticket_keepalive_ms = 30000;
    cfg->max_ticket_keepalive_ms = 3600000;
    cfg->ticket_poll_ms = 1000;
    cfg->backend = NULL;
    cfg->embedded.store = NULL;
    cfg->embedded.max_uncommitted = 65536;
}

/* Out-of-range settings fall back to what the API can represent. */
static void config_normalize(engine_config_t *c)
{
    if (c->max_name_len == 0 || c->max_name_len > ENGINE_NAME_MAX)
        c->max_name_len = ENGINE_NAME_MAX;
    if (c->default_ttl_ms <= 0)
        c->default_ttl_ms = 60000;
    if (c->max_ttl_ms < c->default_ttl_ms)
        c->max_ttl_ms = c->default_ttl_ms;
    if (c->events_retain_ms <= 0)
        c->events_retain_ms = ENGINE_EVENTS_RETAIN_MS;
    if (c->lock_readers == 0 || c->lock_readers > ENGINE_CAPACITY_MAX)
        c->lock_readers = 1048576;
    if (c->ticket_keepalive_ms <= 0)
        c->ticket_keepalive_ms = 30000;
    if (c->max_ticket_keepalive_ms < c->ticket_keepalive_ms)
        c->max_ticket_keepalive_ms = c->ticket_keepalive_ms;
    if (c->ticket_poll_ms <= 0)
        c->ticket_poll_ms = 1000;
}

static void front_free(engine_t *e)
{
    engine__events_free(e);
    sema__free(e);
}

/* "ttl_ms must be between 1 and 86400000 (24h, the configured maximum)": the maximum in ms
 * as the field is, and in the largest unit that says it exactly, as the flag takes it. */
static void range_message(char *buf, size_t len, const char *field, int64_t max_ms)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    size_t u = 0;
    while (u + 1 < sizeof units / sizeof units[0] && (max_ms % units[u].ms) != 0)
        u++;
    snprintf(buf, len, "%s must be between 1 and %lld (%lld%s, the configured maximum)", field,
             (long long)max_ms, (long long)(max_ms / units[u].ms), units[u].unit);
}

int engine_new(engine_t **out, uv_loop_t *loop, const engine_backend_t *ops,
               const engine_config_t *cfg, char *errbuf, size_t errlen)
{
    engine_t *e;
    int rc;

    *out = NULL;
    if (ops == NULL || cfg->render_event == NULL) {
        snprintf(errbuf, errlen, "no back end or no event renderer");
        return SEMA_EINVAL;
    }
    if ((e = sema__calloc(1, sizeof(*e))) == NULL)
        return SEMA_ENOMEM;
    e->loop = loop;
    e->cfg = *cfg;
    config_normalize(&e->cfg);
    snprintf(e->name_too_long, sizeof e->name_too_long,
             "name is longer than the configured maximum of %zu bytes", e->cfg.max_name_len);
    range_message(e->bad_ttl, sizeof e->bad_ttl, "ttl_ms", e->cfg.max_ttl_ms);
    range_message(e->bad_keepalive, sizeof e->bad_keepalive, "keepalive_ms",
                  e->cfg.max_ticket_keepalive_ms);
    e->ops = ops;
    e->rnd_pos = sizeof(e->rnd);
    rc = engine__events_init(e);
    if (rc == 0)
        rc = ops->open(&e->be, e, loop, &e->cfg, errbuf, errlen);
    if (rc != 0) {
        front_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void engine_shutdown(engine_t *e)
{
    if (e == NULL || e->shutting_down)
        return;
    e->shutting_down = 1;
    e->ops->shutdown(e->be);
}

void engine__backend_closed(engine_t *e)
{
    front_free(e);
}

/* ---- the one check of a request's inputs ---- */

/* The operations on a lease's or ticket's id (req->id) rather than on a name. */
static int on_id(engine_op_t op)
{
    return op == ENGINE_LEASE_GET || op == ENGINE_LEASE_RENEW || op == ENGINE_LEASE_RELEASE ||
           op == ENGINE_LEASE_REVOKE || op == ENGINE_TICKET_GET || op == ENGINE_TICKET_DELETE;
}

static int is_ticket_op(engine_op_t op)
{
    return op == ENGINE_TICKET_CREATE || op == ENGINE_TICKET_GET || op == ENGINE_TICKET_DELETE;
}

static int is_list_op(engine_op_t op)
{
    return op == ENGINE_SEM_LIST || op == ENGINE_LOCK_LIST;
}

static int creates_name(engine_op_t op)
{
    return op == ENGINE_SEM_PUT || op == ENGINE_LEGACY_CREATE || op == ENGINE_LOCK_ACQUIRE;
}

/* A request on several semaphores: how many, their names and weights, each named once. */
static int check_parts(const engine_t *e, const engine_req_t *req, const char **msg)
{
    if (req->nparts == 0 || req->nparts > ENGINE_PARTS_MAX || req->parts == NULL) {
        *msg = "semaphores must name 1 to 16 semaphores";
        return SEMA_EINVAL;
    }
    for (size_t i = 0; i < req->nparts; i++) {
        const engine_part_t *p = &req->parts[i];
        if (p->name == NULL || p->name_len == 0) {
            *msg = "a semaphore's name must not be empty";
            return SEMA_EINVAL;
        }
        if (p->name_len > e->cfg.max_name_len) {
            *msg = e->name_too_long;
            return SEMA_ENAMETOOLONG;
        }
        if (p->weight == 0) {
            *msg = "weight must be between 1 and the capacity";
            return SEMA_EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (req->parts[j].name_len == p->name_len &&
                memcmp(req->parts[j].name, p->name, p->name_len) == 0) {
                *msg = "a semaphore may be named only once in one request";
                return SEMA_EINVAL;
            }
        }
    }
    return 0;
}

/* Several semaphores named in `parts` rather than one in `name`. */
static int on_parts(const engine_req_t *req)
{
    return req->op == ENGINE_ACQUIRE_MULTI || (req->op == ENGINE_TICKET_CREATE && req->nparts > 0);
}

/* A semaphore name or a lock key (an id is looked up as it is). */
static int check_name(const engine_t *e, const engine_req_t *req, const char **msg)
{
    if (on_parts(req))
        return check_parts(e, req, msg);
    if (is_list_op(req->op) || on_id(req->op))
        return 0;
    if (req->name_len == 0) {
        *msg = "name must not be empty";
        return SEMA_EINVAL;
    }
    if (req->name_len > e->cfg.max_name_len) {
        *msg = e->name_too_long;
        return SEMA_ENAMETOOLONG;
    }
    /* A name that is created must be UTF-8 (it goes out in every reply and event); one
     * that is only looked up and is not UTF-8 simply finds nothing. */
    if (creates_name(req->op) && !jsonw_utf8_valid(req->name, req->name_len)) {
        *msg =
            req->op == ENGINE_LOCK_ACQUIRE ? "key must be valid UTF-8" : "name must be valid UTF-8";
        return SEMA_EINVAL;
    }
    return 0;
}

int engine__tenant_cmp(const void *a, const void *b)
{
    const engine_tenant_t *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c;

    if (x->name == NULL || y->name == NULL)
        return (x->name != NULL) - (y->name != NULL);
    c = memcmp(x->name, y->name, n);
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* What the back end must serve for this request: SEMA_ENOTSUP when it does not. */
static int check_supported(const engine_t *e, const engine_req_t *req, const char **msg)
{
    int sem_op = req->op == ENGINE_SEM_PUT || req->op == ENGINE_SEM_RESIZE;

    if (!e->ops->multi &&
        (req->op == ENGINE_ACQUIRE_MULTI || (req->op == ENGINE_TICKET_CREATE && req->nparts > 0))) {
        *msg = "this engine does not serve requests on several semaphores";
        return SEMA_ENOTSUP;
    }
    if (!e->ops->tenants &&
        (req->tenant != NULL || (sem_op && (req->limits & ENGINE_LIMIT_TENANT_MAX)))) {
        *msg = "this engine does not serve tenants";
        return SEMA_ENOTSUP;
    }
    if (!e->ops->rates && sem_op && (req->limits & (ENGINE_LIMIT_RATE | ENGINE_LIMIT_BURST))) {
        *msg = "this engine does not serve rates";
        return SEMA_ENOTSUP;
    }
    return 0;
}

/* tenant_max, rate_per_s and rate_burst of a PUT or a resize. A PUT's burst defaults to its
 * rate. */
static int check_limits(engine_req_t *req, const char **msg)
{
    if (req->op != ENGINE_SEM_PUT && req->op != ENGINE_SEM_RESIZE)
        return 0;
    if (req->tenant_max > ENGINE_CAPACITY_MAX) {
        *msg = "tenant_max must be at most 2^53";
        return SEMA_EINVAL;
    }
    if (req->rate_per_s > ENGINE_RATE_MAX || req->rate_burst > ENGINE_RATE_MAX) {
        *msg = "rate_per_s and rate_burst must be at most 1000000000";
        return SEMA_EINVAL;
    }
    if ((req->limits & ENGINE_LIMIT_BURST) && req->rate_burst == 0) {
        *msg = "rate_burst must be at least 1 (remove the rate with rate_per_s 0)";
        return SEMA_EINVAL;
    }
    if (req->op == ENGINE_SEM_PUT && (req->limits & ENGINE_LIMIT_BURST) &&
        !(req->limits & ENGINE_LIMIT_RATE && req->rate_per_s > 0)) {
        *msg = "rate_burst needs rate_per_s";
        return SEMA_EINVAL;
    }
    if (req->op == ENGINE_SEM_PUT && (req->limits & ENGINE_LIMIT_RATE) &&
        !(req->limits & ENGINE_LIMIT_BURST)) {
        req->rate_burst = req->rate_per_s;
        if (req->rate_per_s > 0)
            req->limits |= ENGINE_LIMIT_BURST;
    }
    return 0;
}

static int check_tenant(const engine_req_t *req, const char **msg)
{
    size_t n;

    if (req->tenant == NULL)
        return 0;
    n = strlen(req->tenant);
    if (n == 0 || n > ENGINE_TENANT_MAX || !jsonw_utf8_valid(req->tenant, n)) {
        *msg = "tenant must be 1 to 128 bytes of UTF-8";
        return SEMA_EINVAL;
    }
    return 0;
}

/* Several semaphores, tenants and limits: what the back end serves, and their values. A
 * request with none of them passes with one test. */
static int check_new_inputs(const engine_t *e, engine_req_t *req, const char **msg)
{
    int rc;

    if (req->nparts == 0 && req->tenant == NULL && req->limits == 0)
        return 0; /* (an ACQUIRE_MULTI without parts fails check_parts) */
    rc = check_supported(e, req, msg);
    if (rc == 0)
        rc = check_limits(req, msg);
    if (rc == 0)
        rc = check_tenant(req, msg);
    return rc;
}

static int check_capacity(const engine_req_t *req, const char **msg)
{
    if (req->op == ENGINE_LEGACY_CREATE && req->capacity > ENGINE_CAPACITY_MAX) {
        *msg = "value must be at most 2^53";
        return SEMA_EINVAL;
    }
    if ((req->op == ENGINE_SEM_PUT || req->op == ENGINE_SEM_RESIZE) &&
        ((req->capacity == 0 && req->op == ENGINE_SEM_PUT) ||
         req->capacity > ENGINE_CAPACITY_MAX)) {
        *msg = "capacity must be between 1 and 2^53";
        return SEMA_EINVAL;
    }
    if (req->op == ENGINE_SEM_RESIZE && req->capacity == 0 && req->limits == 0) {
        *msg = "capacity, tenant_max, rate_per_s or rate_burst is required";
        return SEMA_EINVAL;
    }
    return 0;
}

/* ttl_ms (0: the server's default, set here), owner, Idempotency-Key and lock mode. */
static int check_lease_inputs(const engine_t *e, engine_req_t *req, const char **msg)
{
    int acquires = req->op == ENGINE_ACQUIRE || req->op == ENGINE_LOCK_ACQUIRE ||
                   req->op == ENGINE_TICKET_CREATE || req->op == ENGINE_ACQUIRE_MULTI;

    if (!acquires && req->op != ENGINE_LEASE_RENEW)
        return 0;
    if (req->ttl_ms < 0 || req->ttl_ms > e->cfg.max_ttl_ms) {
        *msg = e->bad_ttl;
        return SEMA_EINVAL;
    }
    if (req->ttl_ms == 0)
        req->ttl_ms = e->cfg.default_ttl_ms;
    if (!acquires)
        return 0;
    if (req->op == ENGINE_LOCK_ACQUIRE && req->mode != ENGINE_MODE_SHARED &&
        req->mode != ENGINE_MODE_EXCLUSIVE) {
        *msg = "mode must be \"shared\" or \"exclusive\"";
        return SEMA_EINVAL;
    }
    if (req->owner != NULL && (strlen(req->owner) > ENGINE_OWNER_MAX ||
                               !jsonw_utf8_valid(req->owner, strlen(req->owner)))) {
        *msg = "owner must be UTF-8 of at most 256 bytes";
        return SEMA_EINVAL;
    }
    if (req->idem_key != NULL && strlen(req->idem_key) > ENGINE_IDEM_KEY_MAX) {
        *msg = "Idempotency-Key is longer than 255 bytes";
        return SEMA_EINVAL;
    }
    return 0;
}

/* keepalive_ms of a new ticket (0: the server's default, set here). */
static int check_ticket_inputs(const engine_t *e, engine_req_t *req, const char **msg)
{
    if (!e->ops->tickets && is_ticket_op(req->op)) {
        *msg = "this engine does not serve tickets";
        return SEMA_ENOTSUP;
    }
    if (req->op != ENGINE_TICKET_CREATE)
        return 0;
    if (req->keepalive_ms < 0 || req->keepalive_ms > e->cfg.max_ticket_keepalive_ms) {
        *msg = e->bad_keepalive;
        return SEMA_EINVAL;
    }
    if (req->keepalive_ms == 0)
        req->keepalive_ms = e->cfg.ticket_keepalive_ms;
    return 0;
}

static int check_inputs(const engine_t *e, engine_req_t *req, const char **msg)
{
    int rc = check_ticket_inputs(e, req, msg);

    if (rc == 0)
        rc = check_new_inputs(e, req, msg);
    if (rc == 0)
        rc = check_name(e, req, msg);
    if (rc == 0)
        rc = check_capacity(req, msg);
    if (rc == 0)
        rc = check_lease_inputs(e, req, msg);
    if (is_list_op(req->op)) {
        if (req->limit == 0)
            req->limit = ENGINE_LIST_LIMIT_DEFAULT;
        if (req->limit > ENGINE_LIST_LIMIT_MAX)
            req->limit = ENGINE_LIST_LIMIT_MAX;
    }
    return rc;
}

/* ---- requests ---- */

int engine_submit(engine_t *e, engine_req_t *req)
{
    const char *msg = NULL;

    if (e == NULL || req == NULL || req->cb == NULL || (unsigned)req->op >= ENGINE_OP_COUNT)
        return SEMA_EINVAL;
    if (e->shutting_down)
        return SEMA_ESHUTDOWN;
    if (req->op == ENGINE_METRICS ? req->text == NULL
        : on_id(req->op)          ? req->id == NULL
        : on_parts(req)           ? req->parts == NULL
                                  : !is_list_op(req->op) && req->name == NULL)
        return SEMA_EINVAL;
    if (req->name != NULL && req->name_len == 0)
        req->name_len = strlen(req->name);
    if (req->id != NULL && req->id_len == 0)
        req->id_len = strlen(req->id);
    req->created = 0;
    req->res.kind = ENGINE_RES_NONE;
    req->res.blocks = NULL;
    req->res.small_used = 0;
    req->priv = NULL;
    e->m.ops[req->op]++;
    if (req->op == ENGINE_METRICS) /* the front's series, then the back end's */
        req->status = engine_metrics(e, req->text);
    else if (req->op == ENGINE_EVENTS_OPEN) /* (a name that cannot be one names nothing) */
        req->status = engine__events_open(e, req);
    else
        req->status = check_inputs(e, req, &msg);
    req->message = msg;
    /* A request that failed its checks still goes through the back end, which completes it
     * in order with the others (never inside another request's callback). */
    return e->ops->submit(e->be, req);
}

void engine_cancel(engine_t *e, engine_req_t *req)
{
    if (e == NULL || req == NULL || req->priv == NULL)
        return;
    e->ops->cancel(e->be, req);
}

struct engine_block {
    struct engine_block *next;
    size_t cap, used;
    _Alignas(8) char data[];
};

void engine__complete(engine_t *e, engine_req_t *req)
{
    struct engine_block *b = req->res.blocks; /* the callback may reuse req */

    (void)e;
    req->priv = NULL;
    req->cb(req);
    while (b != NULL) {
        struct engine_block *next = b->next;
        sema__free(b);
        b = next;
    }
}

void engine_stats(engine_t *e, engine_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->contact_age_ms = -1;
    e->ops->stats(e->be, out);
}

void engine_when_ready(engine_t *e, void (*cb)(void *arg), void *arg)
{
    if (e->ready || !e->ops->ready_later) {
        e->ready = 1;
        cb(arg);
        return;
    }
    e->ready_cb = cb;
    e->ready_arg = arg;
}

void engine__backend_ready(engine_t *e)
{
    void (*cb)(void *arg) = e->ready_cb;

    if (e->ready)
        return;
    e->ready = 1;
    e->ready_cb = NULL;
    if (cb != NULL)
        cb(e->ready_arg);
}

void engine_describe(engine_t *e, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    buf[0] = '\0';
    if (e->ops->describe != NULL)
        e->ops->describe(e->be, buf, cap);
    else
        snprintf(buf, cap, "%s", e->ops->name);
}

engine_counters_t *engine__counters(engine_t *e)
{
    return &e->m;
}

/* ---- results ---- */

void *engine_result_alloc(engine_result_t *r, size_t n)
{
    struct engine_block *b = r->blocks;
    void *p;

    n = (n + 7) & ~(size_t)7;
    if (n <= sizeof r->small - r->small_used) {
        p = r->small + r->small_used;
        r->small_used += n;
        return p;
    }
    if (b == NULL || n > b->cap - b->used) {
        size_t cap = n > 4096 ? n : 4096;
        if ((b = sema__malloc(sizeof(*b) + cap)) == NULL)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = r->blocks;
        r->blocks = b;
    }
    p = b->data + b->used;
    b->used += n;
    return p;
}

char *engine_result_strdup(engine_result_t *r, const char *s, size_t len)
{
    char *d = s != NULL ? engine_result_alloc(r, len + 1) : NULL;

    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

void engine_result_clear(engine_result_t *r)
{
    while (r->blocks != NULL) {
        struct engine_block *next = r->blocks->next;
        sema__free(r->blocks);
        r->blocks = next;
    }
    r->small_used = 0;
    r->kind = ENGINE_RES_NONE;
}

/* ---- ids ---- */

void engine__random(engine_t *e, void *out, size_t n)
{
    uint8_t *o = out;

    while (n > 0) {
        if (e->rnd_pos == sizeof(e->rnd)) {
            size_t got = 0;
            while (got < sizeof(e->rnd)) {
                ssize_t r = getrandom(e->rnd + got, sizeof(e->rnd) - got, 0);
                SEMA__CHECK(r > 0); /* the kernel's CSPRNG does not fail once seeded */
                got += (size_t)r;
            }
            e->rnd_pos = 0;
        }
        size_t k = sizeof(e->rnd) - e->rnd_pos;
        if (k > n)
            k = n;
        memcpy(o, e->rnd + e->rnd_pos, k);
        e->rnd_pos += k;
        o += k;
        n -= k;
    }
}

void engine__lease_id(engine_t *e, char id[ENGINE_LEASE_ID_MAX])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t raw[LEASE_ID_BYTES];
    size_t o = 0;

    engine__random(e, raw, sizeof(raw));
    for (size_t i = 0; i < sizeof(raw); i += 3) {
        uint32_t v = ((uint32_t)raw[i] << 16) | ((uint32_t)raw[i + 1] << 8) | raw[i + 2];
        /* The first character is a letter or digit, so an id never looks like a
         * command-line option ("-x") to the tools people paste it into. */
        id[o++] = i == 0 ? b64[((v >> 18) & 63) % 62] : b64[(v >> 18) & 63];
        id[o++] = b64[(v >> 12) & 63];
        id[o++] = b64[(v >> 6) & 63];
        id[o++] = b64[v & 63];
    }
    id[o] = '\0';
}
