/* SPDX-License-Identifier: MIT */
/* render.c - the engine's typed results, its events and problem details in the wire format
 * of docs/http-api.md. Member order is part of the format: tests compare bodies. */
#include "http/render.h"

#include <stdio.h>
#include <string.h>

#include "common/jsonw.h"

static const char *mode_name(int mode)
{
    return mode == ENGINE_MODE_EXCLUSIVE ? "exclusive" : "shared";
}

/* A member whose value is a string of `len` bytes, or an integer (key: a literal). */
#define name_member(w, key, name, len) (jsonw_key((w), key), jsonw_str((w), (name), (len)))
#define int_member(w, key, v) (jsonw_key((w), key), jsonw_int((w), (v)))

/* "semaphores":[{"name","weight","fence"},...],"fences":{"NAME":N,...} of a lease on
 * several semaphores. */
static void parts_members(jsonw_t *w, const engine_lease_t *l)
{
    jsonw_lit(w, ",\"semaphores\":[");
    for (size_t i = 0; i < l->nparts; i++) {
        if (i > 0)
            jsonw_lit(w, ",");
        jsonw_lit(w, "{\"name\":");
        jsonw_raw_string(w, l->parts[i].name, l->parts[i].name_len);
        jsonw_lit(w, ",\"weight\":");
        jsonw_raw_i64(w, (int64_t)l->parts[i].weight);
        jsonw_lit(w, ",\"fence\":");
        jsonw_raw_i64(w, (int64_t)l->parts[i].fence);
        jsonw_lit(w, "}");
    }
    jsonw_lit(w, "],\"fences\":{");
    for (size_t i = 0; i < l->nparts; i++) {
        if (i > 0)
            jsonw_lit(w, ",");
        jsonw_raw_string(w, l->parts[i].name, l->parts[i].name_len);
        jsonw_lit(w, ":");
        jsonw_raw_i64(w, (int64_t)l->parts[i].fence);
    }
    jsonw_lit(w, "}");
}

/* The lease: the acquire's hot path, so written as a template (no comma bookkeeping). A lease
 * on several semaphores names them in "semaphores" and "fences" instead of name, weight and
 * fence; a tenant's has "tenant" last. */
static void lease_body(jsonw_t *w, const engine_lease_t *l)
{
    jsonw_value_begin(w);
    jsonw_lit(w, "{\"lease\":");
    jsonw_raw_string(w, l->id, strlen(l->id));
    if (l->nparts > 0) {
        parts_members(w, l);
        goto times;
    }
    jsonw_lit(w, ",\"name\":");
    jsonw_raw_string(w, l->name, l->name_len);
    jsonw_lit(w, ",\"weight\":");
    jsonw_raw_i64(w, (int64_t)l->weight);
    jsonw_lit(w, ",\"fence\":");
    jsonw_raw_i64(w, (int64_t)l->fence);
times:
    jsonw_lit(w, ",\"ttl_ms\":");
    jsonw_raw_i64(w, l->ttl_ms);
    jsonw_lit(w, ",\"expires_at\":");
    jsonw_raw_i64(w, l->expires_at_ms);
    jsonw_lit(w, ",\"acquired_at\":");
    jsonw_raw_i64(w, l->acquired_at_ms);
    jsonw_lit(w, ",\"owner\":");
    if (l->owner != NULL)
        jsonw_raw_string(w, l->owner, strlen(l->owner));
    else
        jsonw_lit(w, "null");
    if (l->mode != 0) {
        jsonw_lit(w, ",\"key\":");
        jsonw_raw_string(w, l->name, l->name_len);
        if (l->mode == ENGINE_MODE_EXCLUSIVE)
            jsonw_lit(w, ",\"mode\":\"exclusive\"");
        else
            jsonw_lit(w, ",\"mode\":\"shared\"");
    }
    if (l->tenant != NULL) {
        jsonw_lit(w, ",\"tenant\":");
        jsonw_raw_string(w, l->tenant, strlen(l->tenant));
    }
    jsonw_lit(w, "}");
}

/* "tenant" and "multi" (a lease or a request on several semaphores), when they apply. */
static void tenant_multi_members(jsonw_t *w, const char *tenant, int multi)
{
    if (tenant != NULL) {
        jsonw_key(w, "tenant");
        jsonw_cstr(w, tenant);
    }
    if (multi) {
        jsonw_key(w, "multi");
        jsonw_bool(w, 1);
    }
}

static void holder_body(jsonw_t *w, const engine_lease_t *l)
{
    jsonw_obj(w);
    jsonw_key(w, "lease");
    jsonw_cstr(w, l->id);
    int_member(w, "weight", (int64_t)l->weight);
    jsonw_key(w, "owner");
    jsonw_cstr(w, l->owner);
    int_member(w, "acquired_at", l->acquired_at_ms);
    int_member(w, "expires_at", l->expires_at_ms);
    int_member(w, "fence", (int64_t)l->fence);
    if (l->mode != 0) {
        jsonw_key(w, "mode");
        jsonw_cstr(w, mode_name(l->mode));
    }
    tenant_multi_members(w, l->tenant, l->multi);
    jsonw_obj_end(w);
}

/* A waiter's members after its position: weight, owner, since, kind, mode. */
static void waiter_members(jsonw_t *w, const engine_waiter_t *q)
{
    int_member(w, "weight", (int64_t)q->weight);
    jsonw_key(w, "owner");
    jsonw_cstr(w, q->owner != NULL && q->owner[0] != '\0' ? q->owner : NULL);
    int_member(w, "since", q->since_ms);
    if (q->wait_idle || q->ticket) {
        jsonw_key(w, "kind");
        jsonw_cstr(w, q->ticket ? "ticket" : "wait_idle");
    }
    if (q->mode != 0) {
        jsonw_key(w, "mode");
        jsonw_cstr(w, mode_name(q->mode));
    }
    tenant_multi_members(w, q->tenant, q->multi);
}

static void waiter_body(jsonw_t *w, const engine_waiter_t *q, size_t position)
{
    jsonw_obj(w);
    int_member(w, "position", (int64_t)position);
    waiter_members(w, q);
    jsonw_obj_end(w);
}

/* "tenants":[{"tenant","held","waiting","waiting_weight"}...] (the requests that named none:
 * tenant null). */
static void tenants_member(jsonw_t *w, const engine_sem_limits_t *l)
{
    jsonw_key(w, "tenants");
    jsonw_arr(w);
    for (size_t i = 0; i < l->ntenants; i++) {
        const engine_tenant_t *t = &l->tenants[i];
        jsonw_obj(w);
        jsonw_key(w, "tenant");
        if (t->name != NULL)
            jsonw_str(w, t->name, t->name_len);
        else
            jsonw_null(w);
        int_member(w, "held", (int64_t)t->held);
        int_member(w, "waiting", (int64_t)t->waiting);
        int_member(w, "waiting_weight", (int64_t)t->waiting_weight);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
}

/* tenant_max, rate_per_s, rate_burst and tokens, when the semaphore has them. */
static void limits_members(jsonw_t *w, const engine_sem_view_t *v)
{
    const engine_sem_limits_t *l = v->limits;

    if (l == NULL)
        return;
    if (l->tenant_max != 0)
        int_member(w, "tenant_max", (int64_t)l->tenant_max);
    if (l->rate_per_s != 0) {
        int_member(w, "rate_per_s", (int64_t)l->rate_per_s);
        int_member(w, "rate_burst", (int64_t)l->rate_burst);
        int_member(w, "tokens", (int64_t)l->tokens);
    }
}

/* "holders":[...],"waiters":[...] and "truncated" when they stop short. */
static void lists_members(jsonw_t *w, const engine_sem_view_t *v)
{
    jsonw_key(w, "holders");
    jsonw_arr(w);
    for (size_t i = 0; i < v->nholders; i++)
        holder_body(w, &v->holders[i]);
    jsonw_arr_end(w);
    jsonw_key(w, "waiters");
    jsonw_arr(w);
    for (size_t i = 0; i < v->nwaiters; i++)
        waiter_body(w, &v->waiters[i], i);
    jsonw_arr_end(w);
    if (v->truncated) {
        jsonw_key(w, "truncated");
        jsonw_bool(w, 1);
    }
    if (v->limits != NULL && v->limits->ntenants > 0)
        tenants_member(w, v->limits);
}

static void sem_body(jsonw_t *w, const engine_sem_view_t *v)
{
    jsonw_obj(w);
    name_member(w, "name", v->name, v->name_len);
    int_member(w, "capacity", (int64_t)v->capacity);
    int_member(w, "available", v->available);
    int_member(w, "held", (int64_t)v->held);
    int_member(w, "fence", (int64_t)v->fence);
    int_member(w, "waiting", (int64_t)v->waiting);
    int_member(w, "waiting_weight", (int64_t)v->waiting_weight);
    if (v->legacy) {
        jsonw_key(w, "legacy");
        jsonw_bool(w, 1);
    }
    limits_members(w, v);
    lists_members(w, v);
    jsonw_obj_end(w);
}

static void lock_body(jsonw_t *w, const engine_sem_view_t *v)
{
    jsonw_obj(w);
    name_member(w, "key", v->name, v->name_len);
    int_member(w, "readers", (int64_t)v->readers);
    int_member(w, "max_readers", (int64_t)v->capacity);
    lists_members(w, v);
    jsonw_obj_end(w);
}

/* "waiting_since": when the head of the queue came, or null. */
static void waiting_since(jsonw_t *w, const engine_list_item_t *it)
{
    jsonw_key(w, "waiting_since");
    if (it->waiting_since_ms != 0)
        jsonw_int(w, it->waiting_since_ms);
    else
        jsonw_null(w);
}

static void sem_item(jsonw_t *w, const engine_list_item_t *it)
{
    const engine_sem_view_t *v = &it->v;

    jsonw_obj(w);
    name_member(w, "name", v->name, v->name_len);
    int_member(w, "capacity", (int64_t)v->capacity);
    int_member(w, "available", v->available);
    int_member(w, "held", (int64_t)v->held);
    int_member(w, "waiting", (int64_t)v->waiting);
    int_member(w, "tickets", (int64_t)it->tickets);
    waiting_since(w, it);
    int_member(w, "grants", (int64_t)it->grants);
    jsonw_obj_end(w);
}

/* A lock key: its shared holders, whether an exclusive one holds it (a shared holder weighs
 * 1, so the rest of what is held is the exclusive holder's), its queue. */
static void lock_item(jsonw_t *w, const engine_list_item_t *it)
{
    const engine_sem_view_t *v = &it->v;

    jsonw_obj(w);
    name_member(w, "key", v->name, v->name_len);
    int_member(w, "readers", (int64_t)v->readers);
    jsonw_key(w, "exclusive");
    jsonw_bool(w, v->held > v->readers);
    int_member(w, "waiting", (int64_t)v->waiting);
    waiting_since(w, it);
    jsonw_obj_end(w);
}

/* {"semaphores":[...],"next_cursor"}, or {"locks":[...],"next_cursor"} */
static void list_body(jsonw_t *w, const engine_result_t *r)
{
    int locks = r->kind == ENGINE_RES_LOCK_LIST;

    jsonw_obj(w);
    if (locks)
        jsonw_key(w, "locks");
    else
        jsonw_key(w, "semaphores");
    jsonw_arr(w);
    for (size_t i = 0; i < r->nitems; i++) {
        if (locks)
            lock_item(w, &r->items[i]);
        else
            sem_item(w, &r->items[i]);
    }
    jsonw_arr_end(w);
    jsonw_key(w, "next_cursor");
    if (r->next_cursor != NULL)
        jsonw_str(w, r->next_cursor, r->next_cursor_len);
    else
        jsonw_null(w);
    jsonw_obj_end(w);
}

/* A ticket: its place and estimate while waiting, its lease once granted. */
static void ticket_body(jsonw_t *w, const engine_result_t *r)
{
    const engine_ticket_t *t = &r->ticket;

    jsonw_obj(w);
    jsonw_key(w, "ticket");
    jsonw_cstr(w, t->id);
    if (t->nparts > 0) {
        jsonw_key(w, "semaphores");
        jsonw_arr(w);
        for (size_t i = 0; i < t->nparts; i++) {
            jsonw_obj(w);
            name_member(w, "name", t->parts[i].name, t->parts[i].name_len);
            int_member(w, "weight", (int64_t)t->parts[i].weight);
            jsonw_obj_end(w);
        }
        jsonw_arr_end(w);
    } else {
        name_member(w, "name", t->name, t->name_len);
    }
    jsonw_key(w, "status");
    jsonw_cstr(w, t->status == ENGINE_TICKET_GRANTED ? "granted" : "waiting");
    if (t->nparts == 0)
        int_member(w, "weight", (int64_t)t->weight);
    if (t->tenant != NULL) {
        jsonw_key(w, "tenant");
        jsonw_cstr(w, t->tenant);
    }
    if (t->status == ENGINE_TICKET_GRANTED) {
        jsonw_key(w, "lease");
        lease_body(w, &r->lease);
    } else {
        int_member(w, "position", (int64_t)t->position);
        int_member(w, "ahead_weight", (int64_t)t->ahead_weight);
        jsonw_key(w, "estimate_ms");
        if (t->estimated) {
            jsonw_obj(w);
            int_member(w, "p50", t->p50_ms);
            int_member(w, "p90", t->p90_ms);
            jsonw_obj_end(w);
        } else {
            jsonw_null(w);
        }
    }
    int_member(w, "poll_after_ms", t->poll_after_ms);
    int_member(w, "keepalive_ms", t->keepalive_ms);
    jsonw_obj_end(w);
}

int render_ticket(struct strbuf *out, const engine_result_t *res)
{
    jsonw_t w;

    jsonw_init(&w, out);
    ticket_body(&w, res);
    return jsonw_end(&w);
}

int render_result(struct strbuf *out, const engine_result_t *res)
{
    jsonw_t w;

    jsonw_init(&w, out);
    switch (res->kind) {
    case ENGINE_RES_NONE:
        break;
    case ENGINE_RES_LEASE:
        lease_body(&w, &res->lease);
        break;
    case ENGINE_RES_SEM:
        sem_body(&w, &res->sem);
        break;
    case ENGINE_RES_LOCK:
        lock_body(&w, &res->sem);
        break;
    case ENGINE_RES_LIST:
    case ENGINE_RES_LOCK_LIST:
        list_body(&w, res);
        break;
    case ENGINE_RES_LEGACY:
        jsonw_obj(&w);
        name_member(&w, "name", res->sem.name, res->sem.name_len);
        int_member(&w, "value", res->sem.available);
        jsonw_obj_end(&w);
        break;
    case ENGINE_RES_TICKET:
        ticket_body(&w, res);
        break;
    case ENGINE_RES_IDLE:
        jsonw_obj(&w);
        name_member(&w, "name", res->sem.name, res->sem.name_len);
        jsonw_key(&w, "idle");
        jsonw_bool(&w, 1);
        jsonw_obj_end(&w);
        break;
    }
    return jsonw_end(&w);
}

int render_lease(struct strbuf *out, const engine_lease_t *l)
{
    jsonw_t w;

    jsonw_init(&w, out);
    lease_body(&w, l);
    return jsonw_end(&w);
}

int render_event_data(struct strbuf *out, const engine_event_t *ev, const char *reason)
{
    jsonw_t w;

    jsonw_init(&w, out);
    jsonw_obj(&w);
    name_member(&w, "name", ev->name, ev->name_len);
    if (ev->lease != NULL) {
        jsonw_key(&w, "lease");
        jsonw_cstr(&w, ev->lease->id);
        int_member(&w, "weight", (int64_t)ev->lease->weight);
        int_member(&w, "fence", (int64_t)ev->lease->fence);
        jsonw_key(&w, "owner");
        jsonw_cstr(&w, ev->lease->owner);
        int_member(&w, "acquired_at", ev->lease->acquired_at_ms);
        int_member(&w, "expires_at", ev->lease->expires_at_ms);
        tenant_multi_members(&w, ev->lease->tenant, ev->lease->multi);
    } else if (ev->waiter != NULL) {
        waiter_members(&w, ev->waiter);
        int_member(&w, "waiting", (int64_t)ev->waiting);
        int_member(&w, "waiting_weight", (int64_t)ev->waiting_weight);
    } else if (reason != NULL) {
        jsonw_key(&w, "reason");
        jsonw_cstr(&w, reason);
    } else if (ev->capacity != 0) {
        int_member(&w, "capacity", (int64_t)ev->capacity);
    }
    jsonw_obj_end(&w);
    return jsonw_end(&w);
}

int render_problem(struct strbuf *out, int status, const char *code, const char *title,
                   const char *detail)
{
    char type[128];
    jsonw_t w;

    snprintf(type, sizeof type, "urn:sema:problem:%s", code);
    jsonw_init(&w, out);
    jsonw_obj(&w);
    jsonw_key(&w, "type");
    jsonw_cstr(&w, type);
    jsonw_key(&w, "title");
    jsonw_cstr(&w, title);
    int_member(&w, "status", status);
    jsonw_key(&w, "code");
    jsonw_cstr(&w, code);
    if (detail != NULL && jsonw_utf8_valid(detail, strlen(detail))) {
        jsonw_key(&w, "detail");
        jsonw_cstr(&w, detail);
    }
    jsonw_obj_end(&w);
    return jsonw_end(&w);
}
