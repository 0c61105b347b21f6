/* SPDX-License-Identifier: MIT */
/* client_sem.c - semaphores, leases, keyed locks and wait-idle over semad's v1 API. */
#include "client/client_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Run one request whose path is "<prefix><escaped name><suffix>". */
static int call_named(sema_client_t *c, const char *method, const char *prefix, const char *name,
                      const char *suffix, json_t *body, int retry, json_t **json,
                      sema_client_error_t *err)
{
    int rc = client_check_name(name, err);
    if (rc != 0) {
        json_decref(body);
        return rc;
    }
    char *path = client_path(prefix, name, suffix);
    if (path == NULL) {
        json_decref(body);
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    }
    client_req_t req = {.method = method, .path = path, .body = body};
    rc = client_call(c, &req, retry, json, err);
    free(path);
    json_decref(body);
    return rc;
}

static int parse_info(json_t *doc, const char *name, sema_sem_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->name = name;
    if (!json_is_object(doc) || client_json_u64(doc, "capacity", &info->capacity) != 0 ||
        client_json_i64(doc, "available", &info->available) != 0)
        return SEMA_EPROTO;
    /* optional in some replies */
    client_json_u64(doc, "held", &info->held);
    client_json_u64(doc, "fence", &info->fence);
    client_json_u64(doc, "tenant_max", &info->tenant_max);
    client_json_u64(doc, "rate_per_s", &info->rate_per_s);
    client_json_u64(doc, "rate_burst", &info->rate_burst);
    client_json_u64(doc, "tokens", &info->tokens);
    if (client_json_u64(doc, "waiting", &info->waiting) != 0) {
        json_t *w = json_object_get(doc, "waiters");
        info->waiting = json_is_array(w) ? json_array_size(w) : 0;
    }
    return 0;
}

static int finish_state(json_t *doc, const char *name, sema_sem_info_t *info, char **json,
                        sema_client_error_t *err)
{
    int rc = 0;
    sema_sem_info_t tmp;

    if (parse_info(doc, name, info != NULL ? info : &tmp) != 0)
        rc = client_fail(err, SEMA_EPROTO, 200, "unexpected semaphore state from server");
    else if (json != NULL && (*json = json_dumps(doc, JSON_COMPACT)) == NULL)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    json_decref(doc);
    return rc;
}

/* PUT with a status we need to see (201 created, 200 identical), retried after network
 * errors: creating the same semaphore twice is harmless. */
static int put_semaphore(sema_client_t *c, const char *path, json_t *body, int *created,
                         sema_client_error_t *err)
{
    client_req_t req = {.method = "PUT", .path = path, .body = body};
    client_retry_t retry = {0};
    client_resp_t resp;
    int64_t wait;
    int rc;

    while ((rc = client_exchange(c, &req, &resp, err)) != 0 && client_retryable(rc) &&
           (wait = client_retry_wait(c, &retry, 0)) >= 0)
        client_sleep_ms(wait, NULL);
    if (rc != 0)
        return rc;
    if (resp.status == 200 || resp.status == 201) {
        if (created != NULL)
            *created = resp.status == 201;
        client_clear(err);
    } else {
        rc = client_reply_error(&resp, err);
    }
    client_resp_free(&resp);
    return rc;
}

int sema_client_create(sema_client_t *c, const char *name, uint64_t capacity, int *created,
                       sema_client_error_t *err)
{
    if (capacity == 0 || capacity > (1ull << 53))
        return client_fail(err, SEMA_EINVAL, 0, "capacity must be 1..2^53");
    int rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    json_t *body = json_pack("{s:I}", "capacity", (json_int_t)capacity);
    char *path = client_path("/v1/semaphores/", name, "");
    if (body == NULL || path == NULL)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    else
        rc = put_semaphore(c, path, body, created, err);
    json_decref(body);
    free(path);
    return rc;
}

/* A semaphore's configuration as a PUT or PATCH body: what `set` names (all for a PUT). */
static json_t *config_body(const sema_sem_config_t *cfg, unsigned set)
{
    json_t *body = json_object();

    if (body == NULL)
        return NULL;
    if (set & SEMA_SET_CAPACITY)
        json_object_set_new(body, "capacity", json_integer((json_int_t)cfg->capacity));
    if (set & SEMA_SET_TENANT_MAX)
        json_object_set_new(body, "tenant_max", json_integer((json_int_t)cfg->tenant_max));
    if (set & SEMA_SET_RATE)
        json_object_set_new(body, "rate_per_s", json_integer((json_int_t)cfg->rate_per_s));
    if ((set & SEMA_SET_BURST) && cfg->rate_burst > 0)
        json_object_set_new(body, "rate_burst", json_integer((json_int_t)cfg->rate_burst));
    return body;
}

static int check_config(const sema_sem_config_t *cfg, unsigned set, sema_client_error_t *err)
{
    if (cfg == NULL || set == 0)
        return client_fail(err, SEMA_EINVAL, 0, "no configuration");
    if ((set & SEMA_SET_CAPACITY) && (cfg->capacity == 0 || cfg->capacity > (1ull << 53)))
        return client_fail(err, SEMA_EINVAL, 0, "capacity must be 1..2^53");
    if (cfg->tenant_max > (1ull << 53) || cfg->rate_per_s > 1000000000u ||
        cfg->rate_burst > 1000000000u)
        return client_fail(err, SEMA_EINVAL, 0,
                           "tenant_max must be at most 2^53, rate_per_s and rate_burst 10^9");
    return 0;
}

int sema_client_create_config(sema_client_t *c, const char *name, const sema_sem_config_t *cfg,
                              int *created, sema_client_error_t *err)
{
    unsigned set = SEMA_SET_CAPACITY | (cfg != NULL && cfg->tenant_max ? SEMA_SET_TENANT_MAX : 0) |
                   (cfg != NULL && cfg->rate_per_s ? SEMA_SET_RATE | SEMA_SET_BURST : 0);
    int rc = check_config(cfg, set, err);
    if (rc == 0)
        rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    json_t *body = config_body(cfg, set);
    char *path = client_path("/v1/semaphores/", name, "");
    if (body == NULL || path == NULL)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    else
        rc = put_semaphore(c, path, body, created, err);
    json_decref(body);
    free(path);
    return rc;
}

int sema_client_configure(sema_client_t *c, const char *name, const sema_sem_config_t *cfg,
                          sema_sem_info_t *info, sema_client_error_t *err)
{
    json_t *doc;
    int rc = check_config(cfg, cfg != NULL ? cfg->set : 0, err);
    if (rc != 0)
        return rc;
    json_t *body = config_body(cfg, cfg->set);
    if (body == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    rc = call_named(c, "PATCH", "/v1/semaphores/", name, "", body, 1, &doc, err);
    return rc != 0 ? rc : finish_state(doc, name, info, NULL, err);
}

int sema_client_get(sema_client_t *c, const char *name, sema_sem_info_t *info, char **json,
                    sema_client_error_t *err)
{
    json_t *doc;
    if (json != NULL)
        *json = NULL;
    int rc = call_named(c, "GET", "/v1/semaphores/", name, "", NULL, 1, &doc, err);
    return rc != 0 ? rc : finish_state(doc, name, info, json, err);
}

int sema_client_resize(sema_client_t *c, const char *name, uint64_t capacity, sema_sem_info_t *info,
                       sema_client_error_t *err)
{
    json_t *doc;
    if (capacity == 0 || capacity > (1ull << 53))
        return client_fail(err, SEMA_EINVAL, 0, "capacity must be 1..2^53");
    json_t *body = json_pack("{s:I}", "capacity", (json_int_t)capacity);
    if (body == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    int rc = call_named(c, "PATCH", "/v1/semaphores/", name, "", body, 1, &doc, err);
    return rc != 0 ? rc : finish_state(doc, name, info, NULL, err);
}

int sema_client_delete(sema_client_t *c, const char *name, sema_client_error_t *err)
{
    return call_named(c, "DELETE", "/v1/semaphores/", name, "", NULL, 0, NULL, err);
}

/* One page of GET /v1/semaphores; *next receives the cursor (or NULL). */
static int list_page(sema_client_t *c, const char *prefix, const char *cursor,
                     sema_client_list_cb cb, void *arg, char **next, int *stop,
                     sema_client_error_t *err)
{
    char *ep = client_escape(prefix), *ec = client_escape(cursor ? cursor : "");
    char path[3 * 2 * SEMA_CLIENT_NAME_MAX + 128];
    json_t *doc = NULL;
    int rc;

    *next = NULL;
    if (ep == NULL || ec == NULL) {
        free(ep);
        free(ec);
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    }
    snprintf(path, sizeof path, "/v1/semaphores?limit=1000&prefix=%s%s%s", ep,
             cursor ? "&cursor=" : "", ec);
    free(ep);
    free(ec);
    client_req_t req = {.method = "GET", .path = path};
    if ((rc = client_call(c, &req, 1, &doc, err)) != 0)
        return rc;
    json_t *arr = json_object_get(doc, "semaphores"), *item;
    size_t i;
    if (!json_is_array(arr)) {
        json_decref(doc);
        return client_fail(err, SEMA_EPROTO, 200, "unexpected list reply from server");
    }
    json_array_foreach(arr, i, item)
    {
        sema_sem_info_t info;
        const char *name = json_string_value(json_object_get(item, "name"));
        if (name == NULL || parse_info(item, name, &info) != 0) {
            json_decref(doc);
            return client_fail(err, SEMA_EPROTO, 200, "unexpected list entry from server");
        }
        if (cb(arg, &info) != 0) {
            *stop = 1;
            break;
        }
    }
    const char *nc = json_string_value(json_object_get(doc, "next_cursor"));
    if (!*stop && nc != NULL && json_array_size(arr) > 0 && strlen(nc) < SEMA_CLIENT_NAME_MAX &&
        (*next = strdup(nc)) == NULL)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    json_decref(doc);
    return rc;
}

int sema_client_list(sema_client_t *c, const char *prefix, sema_client_list_cb cb, void *arg,
                     sema_client_error_t *err)
{
    char *cursor = NULL, *next;
    int stop = 0, rc;

    if (cb == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no callback");
    if (prefix != NULL && strlen(prefix) >= SEMA_CLIENT_NAME_MAX)
        return client_fail(err, SEMA_ENAMETOOLONG, 0, "prefix too long");
    if ((rc = client_check_text("prefix", prefix, err)) != 0)
        return rc;
    do {
        rc = list_page(c, prefix ? prefix : "", cursor, cb, arg, &next, &stop, err);
        free(cursor);
        cursor = next;
    } while (rc == 0 && cursor != NULL);
    free(cursor);
    if (rc == 0)
        client_clear(err);
    return rc;
}

/* ---- leases ------------------------------------------------------------------------ */

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

int client_parse_parts(json_t *obj, int fenced, sema_lease_part_t *parts)
{
    json_t *a = json_object_get(obj, "semaphores"), *p;
    size_t i;

    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > SEMA_CLIENT_PARTS_MAX)
        return -1;
    json_array_foreach(a, i, p)
    {
        const char *name = json_string_value(json_object_get(p, "name"));
        parts[i].fence = 0;
        if (name == NULL || strlen(name) >= SEMA_CLIENT_NAME_MAX ||
            client_json_u64(p, "weight", &parts[i].weight) ||
            (fenced && client_json_u64(p, "fence", &parts[i].fence)))
            return -1;
        copy_str(parts[i].name, sizeof parts[i].name, name);
    }
    return (int)json_array_size(a);
}

int client_parts_body(const sema_client_part_t *parts, size_t nparts, json_t **arr,
                      sema_client_error_t *err)
{
    int rc = 0;

    *arr = NULL;
    if (parts == NULL || nparts == 0 || nparts > SEMA_CLIENT_PARTS_MAX)
        return client_fail(err, SEMA_EINVAL, 0, "name 1 to %d semaphores", SEMA_CLIENT_PARTS_MAX);
    for (size_t i = 0; i < nparts && rc == 0; i++)
        if ((rc = client_check_name(parts[i].name, err)) == 0 && parts[i].weight > (1ull << 53))
            rc = client_fail(err, SEMA_EINVAL, 0, "weight above 2^53");
    if (rc != 0)
        return rc;
    *arr = json_array();
    for (size_t i = 0; *arr != NULL && i < nparts; i++) {
        uint64_t w = parts[i].weight > 0 ? parts[i].weight : 1;
        json_t *p = json_pack("{s:s, s:I}", "name", parts[i].name, "weight", (json_int_t)w);
        if (json_array_append_new(*arr, p) != 0) {
            json_decref(*arr);
            *arr = NULL;
        }
    }
    return *arr != NULL ? 0 : client_fail(err, SEMA_ENOMEM, 0, "out of memory");
}

int client_parse_lease(json_t *obj, int64_t sent_ns, sema_lease_t *lease)
{
    const char *id = json_string_value(json_object_get(obj, "lease"));
    const char *name = json_string_value(json_object_get(obj, "name"));
    const char *key = json_string_value(json_object_get(obj, "key"));
    const char *mode = json_string_value(json_object_get(obj, "mode"));
    sema_lease_part_t first;

    memset(lease, 0, sizeof *lease);
    if (key != NULL)
        name = key;
    /* a lease on several semaphores: its first part stands for it */
    if (name == NULL && json_object_get(obj, "semaphores") != NULL) {
        json_t *p = json_array_get(json_object_get(obj, "semaphores"), 0);
        name = json_string_value(json_object_get(p, "name"));
        if (name == NULL || client_json_u64(p, "weight", &first.weight) ||
            client_json_u64(p, "fence", &first.fence))
            return SEMA_EPROTO;
        json_object_set_new(obj, "weight", json_integer((json_int_t)first.weight));
        json_object_set_new(obj, "fence", json_integer((json_int_t)first.fence));
    }
    if (id == NULL || id[0] == '\0' || strlen(id) >= SEMA_LEASE_ID_MAX || name == NULL ||
        strlen(name) >= SEMA_CLIENT_NAME_MAX || client_json_u64(obj, "weight", &lease->weight) ||
        client_json_u64(obj, "fence", &lease->fence) ||
        client_json_i64(obj, "ttl_ms", &lease->ttl_ms) ||
        client_json_i64(obj, "expires_at", &lease->expires_at_ms) || lease->ttl_ms <= 0)
        return SEMA_EPROTO;
    copy_str(lease->id, sizeof lease->id, id);
    copy_str(lease->name, sizeof lease->name, name);
    client_json_i64(obj, "acquired_at", &lease->acquired_at_ms);
    if (mode != NULL)
        lease->mode = strcmp(mode, "exclusive") == 0 ? SEMA_LOCK_EXCLUSIVE : SEMA_LOCK_SHARED;
    lease->local_deadline_ns = sent_ns + lease->ttl_ms * 1000000;
    return 0;
}

typedef struct acq acq_t;
static int acquire_attempts(sema_client_t *c, acq_t *a, sema_lease_t *lease,
                            sema_client_error_t *err);

struct acq {
    const char *path;
    json_t *body; /* its timeout_ms is rewritten per attempt */
    char key[80];
    const sema_acquire_opts_t *o;
    int dropped;               /* a grant named in an unusable reply was released already */
    sema_multi_lease_t *multi; /* POST /v1/acquire: its parts too, or NULL */
};

/* A grant we cannot hand to the caller: find it again by the idempotency key (a try
 * that returns the same lease while it lives) and release it. Best effort: one try, as the
 * JS client's, since the acquire's own retries have spent the budget (a call against a
 * semad that is down would otherwise take twice retry_ms); a grant not found ends with its
 * ttl. */
static void drop_grant(sema_client_t *c, acq_t *a, const char *known_id)
{
    json_t *doc = NULL;
    char id[SEMA_LEASE_ID_MAX] = "";

    if (known_id != NULL) {
        copy_str(id, sizeof id, known_id);
    } else {
        json_object_set_new(a->body, "timeout_ms", json_integer(0));
        client_req_t req = {
            .method = "POST", .path = a->path, .body = a->body, .idem_key = a->key, .wait_ms = 0};
        if (client_call(c, &req, 0, &doc, NULL) == 0)
            copy_str(id, sizeof id, json_string_value(json_object_get(doc, "lease")));
        json_decref(doc);
    }
    if (id[0] != '\0')
        sema_client_release(c, id, NULL);
}

static int acquire_loop(sema_client_t *c, acq_t *a, sema_lease_t *lease, sema_client_error_t *err)
{
    sema_client_error_t e = {0};
    int rc = acquire_attempts(c, a, lease, &e);

    /* Cancelled mid-wait, the connection broke or stayed silent (no HTTP reply), or a reply
     * we could not read: the server may have granted anyway. (A reply that parsed but was
     * not a lease already released the id it named.) */
    int silent = e.http_status == 0 && (client_retryable(rc) || rc == SEMA_ETIMEDOUT ||
                                        rc == SEMA_ECANCELED || rc == SEMA_EPROTO);
    if (rc != 0 && (silent || (rc == SEMA_EPROTO && !a->dropped)))
        drop_grant(c, a, NULL);
    if (err != NULL)
        *err = e;
    return rc;
}

static int acquire_attempts(sema_client_t *c, acq_t *a, sema_lease_t *lease,
                            sema_client_error_t *err)
{
    const sema_acquire_opts_t *o = a->o;
    int64_t deadline = o->timeout_ms < 0 ? INT64_MAX : client_now_ns() + o->timeout_ms * 1000000;
    json_t *doc = NULL;
    client_retry_t retry = {0};
    int rc;

    for (;;) {
        int64_t left = o->timeout_ms < 0 ? -1 : (deadline - client_now_ns()) / 1000000;
        if (o->timeout_ms >= 0 && left < 0)
            left = 0;
        json_object_set_new(a->body, "timeout_ms", json_integer(left));
        if (left < 0)
            json_object_del(a->body, "timeout_ms");
        client_req_t req = {.method = "POST",
                            .path = a->path,
                            .body = a->body,
                            .idem_key = a->key,
                            .wait_ms = left,
                            .cancel = o->cancel};
        int64_t sent = client_now_ns();
        rc = client_call(c, &req, 0, &doc, err);
        if (rc == 0) {
            int np = a->multi != NULL ? client_parse_parts(doc, 1, a->multi->parts) : 0;
            if (a->multi != NULL && np > 0)
                a->multi->nparts = (size_t)np;
            if (client_parse_lease(doc, sent, lease) != 0 || np < 0) {
                const char *id = json_string_value(json_object_get(doc, "lease"));
                if (id != NULL && id[0] != '\0' && strlen(id) < SEMA_LEASE_ID_MAX) {
                    drop_grant(c, a, id);
                    a->dropped = 1;
                }
                memset(lease, 0, sizeof *lease);
                rc = client_fail(err, SEMA_EPROTO, 200, "unexpected lease from server");
            }
            json_decref(doc);
            return rc;
        }
        int64_t wait = client_retryable(rc) ? client_retry_wait(c, &retry, 0) : -1;
        if (wait < 0)
            break;
        if (client_sleep_ms(wait, o->cancel)) {
            rc = client_fail(err, SEMA_ECANCELED, 0, "cancelled");
            break;
        }
    }
    return rc;
}

/* An acquire with its idempotency key (the caller's, or a random one), ttl and tenant. */
static int acquire_keyed(sema_client_t *c, acq_t *a, sema_lease_t *lease, sema_client_error_t *err)
{
    const sema_acquire_opts_t *o = a->o;
    int rc = 0;

    if (o->ttl_ms < 0)
        rc = client_fail(err, SEMA_EINVAL, 0, "ttl_ms must be >= 0");
    else
        rc = client_idem_key(o->idempotency_key, a->key, sizeof a->key, err);
    if (rc == 0 && o->ttl_ms > 0)
        json_object_set_new(a->body, "ttl_ms", json_integer(o->ttl_ms));
    if (rc == 0 && strstr(a->path, "/v1/locks/") != a->path) /* locks have no tenants */
        rc = client_set_text(a->body, "tenant", o->tenant, err);
    if (rc == 0)
        rc = acquire_loop(c, a, lease, err);
    if (rc == 0)
        client_clear(err);
    return rc;
}

static int acquire_generic(sema_client_t *c, const char *path, json_t *body,
                           const sema_acquire_opts_t *opts, sema_lease_t *lease,
                           sema_client_error_t *err)
{
    sema_acquire_opts_t dflt = {.weight = 1, .timeout_ms = -1};
    acq_t a = {.path = path, .body = body, .o = opts ? opts : &dflt};

    return acquire_keyed(c, &a, lease, err);
}

static int acquire_prepare(const char *name, const sema_acquire_opts_t *opts, sema_lease_t *lease,
                           sema_client_error_t *err)
{
    if (lease == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no lease to fill");
    memset(lease, 0, sizeof *lease);
    return client_check_name(name, err);
}

/* A new request body into *body with the owner (the caller's, or the client's). Returns 0,
 * SEMA_EINVAL (an owner that is not UTF-8) or SEMA_ENOMEM, with err filled. */
static int owner_body(sema_client_t *c, const sema_acquire_opts_t *opts, json_t **body,
                      sema_client_error_t *err)
{
    const char *owner = opts != NULL && opts->owner != NULL ? opts->owner : c->owner;
    int rc;

    if ((*body = json_object()) == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    if ((rc = client_set_text(*body, "owner", owner, err)) != 0) {
        json_decref(*body);
        *body = NULL;
    }
    return rc;
}

/* POST <prefix><name>/acquire with `body` (stolen). */
static int acquire_at(sema_client_t *c, const char *prefix, const char *name, json_t *body,
                      const sema_acquire_opts_t *opts, sema_lease_t *lease,
                      sema_client_error_t *err)
{
    char *path = client_path(prefix, name, "/acquire");
    int rc;

    if (path == NULL)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    else
        rc = acquire_generic(c, path, body, opts, lease, err);
    free(path);
    json_decref(body);
    return rc;
}

int sema_client_acquire(sema_client_t *c, const char *name, const sema_acquire_opts_t *opts,
                        sema_lease_t *lease, sema_client_error_t *err)
{
    int rc = acquire_prepare(name, opts, lease, err);
    if (rc != 0)
        return rc;
    uint64_t weight = opts != NULL && opts->weight > 0 ? opts->weight : 1;
    if (weight > (1ull << 53))
        return client_fail(err, SEMA_EINVAL, 0, "weight above 2^53");
    json_t *body;
    if ((rc = owner_body(c, opts, &body, err)) != 0)
        return rc;
    json_object_set_new(body, "weight", json_integer((json_int_t)weight));
    return acquire_at(c, "/v1/semaphores/", name, body, opts, lease, err);
}

int sema_client_acquire_all(sema_client_t *c, const sema_client_part_t *parts, size_t nparts,
                            const sema_acquire_opts_t *opts, sema_multi_lease_t *lease,
                            sema_client_error_t *err)
{
    json_t *body, *arr;
    int rc;

    if (lease == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no lease to fill");
    memset(lease, 0, sizeof *lease);
    if ((rc = client_parts_body(parts, nparts, &arr, err)) != 0)
        return rc;
    if ((rc = owner_body(c, opts, &body, err)) != 0) {
        json_decref(arr);
        return rc;
    }
    json_object_set_new(body, "semaphores", arr);
    sema_acquire_opts_t dflt = {.timeout_ms = -1};
    const sema_acquire_opts_t *o = opts ? opts : &dflt;
    acq_t a = {.path = "/v1/acquire", .body = body, .o = o, .multi = lease};
    rc = acquire_keyed(c, &a, &lease->lease, err);
    json_decref(body);
    if (rc != 0)
        memset(lease, 0, sizeof *lease);
    return rc;
}

int sema_client_lock(sema_client_t *c, const char *key, int mode, const sema_acquire_opts_t *opts,
                     sema_lease_t *lease, sema_client_error_t *err)
{
    int rc = acquire_prepare(key, opts, lease, err);
    if (rc != 0)
        return rc;
    if (mode != SEMA_LOCK_SHARED && mode != SEMA_LOCK_EXCLUSIVE)
        return client_fail(err, SEMA_EINVAL, 0, "mode must be shared or exclusive");
    json_t *body;
    if ((rc = owner_body(c, opts, &body, err)) != 0)
        return rc;
    json_object_set_new(body, "mode",
                        json_string(mode == SEMA_LOCK_SHARED ? "shared" : "exclusive"));
    return acquire_at(c, "/v1/locks/", key, body, opts, lease, err);
}

static int check_id(const char *id, sema_client_error_t *err)
{
    if (id == NULL || id[0] == '\0' || strlen(id) >= SEMA_LEASE_ID_MAX)
        return client_fail(err, SEMA_EINVAL, 0, "not a lease id");
    return 0;
}

int client_renew(sema_client_t *c, sema_lease_t *lease, int64_t ttl_ms, int64_t max_ms,
                 sema_client_error_t *err)
{
    json_t *doc = NULL;
    sema_lease_t fresh;
    int rc;

    if (lease == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no lease");
    if ((rc = check_id(lease->id, err)) != 0)
        return rc;
    if (ttl_ms < 0)
        return client_fail(err, SEMA_EINVAL, 0, "ttl_ms must be >= 0");
    char *path = client_path("/v1/leases/", lease->id, "/renew");
    int64_t ttl = ttl_ms > 0 ? ttl_ms : lease->ttl_ms; /* 0: leave it to the server */
    json_t *body = ttl > 0 ? json_pack("{s:I}", "ttl_ms", (json_int_t)ttl) : json_object();
    int64_t sent = client_now_ns();
    if (path == NULL || body == NULL) {
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    } else {
        client_req_t req = {.method = "POST", .path = path, .body = body, .max_ms = max_ms};
        rc = client_call(c, &req, max_ms == 0, &doc, err);
    }
    if (rc == 0 && client_parse_lease(doc, sent, &fresh) != 0)
        rc = client_fail(err, SEMA_EPROTO, 200, "unexpected lease from server");
    if (rc == 0)
        *lease = fresh; /* the lease as the server has it now (all of it, for a caller that
                           knew only the id) */
    json_decref(doc);
    json_decref(body);
    free(path);
    return rc;
}

int sema_client_renew(sema_client_t *c, sema_lease_t *lease, int64_t ttl_ms,
                      sema_client_error_t *err)
{
    return client_renew(c, lease, ttl_ms, 0, err);
}

int client_delete_retried(sema_client_t *c, const char *prefix, const char *id, int gone,
                          sema_client_error_t *err)
{
    char *path = client_path(prefix, id, "");
    int rc;

    if (path == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    client_req_t req = {.method = "DELETE", .path = path, .gone = gone};
    rc = client_call(c, &req, 1, NULL, err);
    free(path);
    return rc;
}

int sema_client_release(sema_client_t *c, const char *lease_id, sema_client_error_t *err)
{
    int rc = check_id(lease_id, err);
    return rc != 0 ? rc : client_delete_retried(c, "/v1/leases/", lease_id, SEMA_ESTALE, err);
}

int sema_client_lease_get(sema_client_t *c, const char *lease_id, sema_lease_t *lease,
                          sema_client_error_t *err)
{
    json_t *doc = NULL;
    int rc = check_id(lease_id, err);
    if (rc != 0 || lease == NULL)
        return rc != 0 ? rc : client_fail(err, SEMA_EINVAL, 0, "no lease to fill");
    int64_t sent = client_now_ns();
    rc = call_named(c, "GET", "/v1/leases/", lease_id, "", NULL, 1, &doc, err);
    if (rc == 0 && client_parse_lease(doc, sent, lease) != 0)
        rc = client_fail(err, SEMA_EPROTO, 200, "unexpected lease from server");
    if (rc == 0) { /* what is left of the ttl, by this host's wall clock (never more) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t left = lease->expires_at_ms - ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        if (left < lease->ttl_ms)
            lease->local_deadline_ns = sent + (left > 0 ? left : 0) * 1000000;
    }
    json_decref(doc);
    return rc;
}

int sema_client_revoke(sema_client_t *c, const char *lease_id, sema_client_error_t *err)
{
    int rc = check_id(lease_id, err);
    return rc != 0 ? rc
                   : call_named(c, "POST", "/v1/leases/", lease_id, "/revoke", NULL, 0, NULL, err);
}

int sema_client_wait_idle(sema_client_t *c, const char *name, int64_t timeout_ms,
                          const volatile int *cancel, sema_client_error_t *err)
{
    int rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    char *path = client_path("/v1/semaphores/", name, "/wait-idle");
    json_t *body =
        timeout_ms >= 0 ? json_pack("{s:I}", "timeout_ms", (json_int_t)timeout_ms) : json_object();
    if (path == NULL || body == NULL) {
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    } else {
        client_req_t req = {
            .method = "POST", .path = path, .body = body, .wait_ms = timeout_ms, .cancel = cancel};
        rc = client_call(c, &req, 1, NULL, err);
    }
    free(path);
    json_decref(body);
    return rc;
}

int sema_client_lock_get(sema_client_t *c, const char *key, char **json, sema_client_error_t *err)
{
    json_t *doc = NULL;
    if (json != NULL)
        *json = NULL;
    int rc = call_named(c, "GET", "/v1/locks/", key, "", NULL, 1, &doc, err);
    if (rc == 0 && json != NULL && (*json = json_dumps(doc, JSON_COMPACT)) == NULL)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    json_decref(doc);
    return rc;
}
