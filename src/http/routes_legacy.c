/* SPDX-License-Identifier: MIT */
/* routes_legacy.c - the original semaphore service's five endpoints, same statuses, bodies and
 * content types, with 400 and a clear message where the original hung or answered 500. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "http/body.h"
#include "http/server.h"

#include "sema/error.h"

#define MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact */

/* Parse the body as a JSON object; on failure reply 400 and return NULL. */
static json_t *legacy_body(route_ctx_t *c)
{
    const struct strbuf *b = &c->req->body;
    if (b->len == 0) {
        ctx_reply_text(c, 400, "Request body must be a JSON object");
        return NULL;
    }
    if (memchr(b->data, '\0', b->len) != NULL) {
        ctx_reply_text(c, 400, "Malformed JSON body: " BODY_NUL_ERROR);
        return NULL;
    }
    json_error_t e;
    json_t *j = json_loadb(b->data, b->len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &e);
    if (j == NULL) {
        char msg[256];
        snprintf(msg, sizeof msg, "Malformed JSON body: %s", e.text);
        ctx_reply_text(c, 400, msg);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        ctx_reply_text(c, 400, "Request body must be a JSON object");
        return NULL;
    }
    return j;
}

/* Take the body's "name" into c->param; on failure reply 400 and return -1. */
static int legacy_name(route_ctx_t *c, json_t *body)
{
    json_t *n = json_object_get(body, "name");
    const char *msg = NULL;
    if (n == NULL || json_is_null(n))
        msg = "name is required";
    else if (!json_is_string(n))
        msg = "name must be a string";
    else if (json_string_length(n) == 0)
        msg = "name must not be empty";
    if (msg != NULL) {
        ctx_reply_text(c, 400, msg);
        return -1;
    }
    c->param_len = json_string_length(n);
    c->param = strndup(json_string_value(n), c->param_len);
    if (c->param == NULL) {
        ctx_reply_err(c, SEMA_ENOMEM, NULL);
        return -1;
    }
    c->ereq.name = c->param;
    c->ereq.name_len = c->param_len;
    return 0;
}

/* The body's "value" as a number; on failure reply 400 and return -1. */
static int legacy_value_of(route_ctx_t *c, json_t *body, double *out)
{
    json_t *v = json_object_get(body, "value");
    const char *msg = NULL;
    double d = 0;
    if (v == NULL || json_is_null(v))
        msg = "value is required";
    else if (!json_is_number(v))
        msg = "value must be a number";
    else if (json_is_integer(v) && (json_integer_value(v) > (json_int_t)MAX_EXACT ||
                                    json_integer_value(v) < -(json_int_t)MAX_EXACT))
        msg = "value must be at most 2^53 (9007199254740992)";
    else if (!isfinite(d = json_number_value(v)) || fabs(d) > MAX_EXACT)
        msg = "value must be at most 2^53 (9007199254740992)";
    if (msg != NULL) {
        ctx_reply_text(c, 400, msg);
        return -1;
    }
    *out = d;
    return 0;
}

static void reply_value(route_ctx_t *c, engine_req_t *req, int missing_status, const char *missing)
{
    if (req->status == 0)
        ctx_reply_result(c, 200, &req->res);
    else if (req->status == SEMA_ENOENT)
        ctx_reply_text(c, missing_status, missing);
    else
        ctx_reply_err(c, req->status, req->message);
}

/* Existing names answer 303 with the request object echoed back, as the original did. */
static void reply_exists(route_ctx_t *c)
{
    json_t *echo = c->json;
    c->json = NULL;
    ctx_reply_json(c, 303, echo);
}

static void create_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status == SEMA_EEXIST)
        reply_exists(c);
    else
        reply_value(c, req, 404, "semaphore not found");
}

/* A negative value: the original checks for an existing name first (303), then 400. */
static void negative_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status == 0)
        reply_exists(c);
    else if (req->status == SEMA_ENOENT)
        ctx_reply_text(c, 400, "Value needs to be positive");
    else
        ctx_reply_err(c, req->status, req->message);
}

/* POST /semaphore  {"name":"<name>","value":<n>} */
void legacy_create(route_ctx_t *c)
{
    json_t *body = legacy_body(c);
    double value;
    if (body == NULL)
        return;
    c->json = body;
    if (legacy_name(c, body) != 0 || legacy_value_of(c, body, &value) != 0)
        return;
    if (value < 0) {
        c->ereq.op = ENGINE_LEGACY_VALUE;
        ctx_submit(c, negative_done);
        return;
    }
    c->ereq.op = ENGINE_LEGACY_CREATE;
    c->ereq.capacity = (uint64_t)trunc(value); /* like parseInt: 1.9 -> 1 */
    ctx_submit(c, create_done);
}

static void delete_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status == 0)
        ctx_reply_text(c, 200, "Deletion Successful");
    else if (req->status == SEMA_ENOENT)
        ctx_reply_text(c, 404, "Semaphore not found");
    else
        ctx_reply_err(c, req->status, req->message);
}

/* DELETE /semaphore/{name} */
void legacy_delete(route_ctx_t *c)
{
    c->ereq.op = ENGINE_LEGACY_DELETE;
    c->ereq.name = c->param;
    c->ereq.name_len = c->param_len;
    ctx_submit(c, delete_done);
}

static void value_done(route_ctx_t *c, engine_req_t *req)
{
    reply_value(c, req, 404, "semaphore not found");
}

/* GET /semaphore/value/{name} */
void legacy_value(route_ctx_t *c)
{
    c->ereq.op = ENGINE_LEGACY_VALUE;
    c->ereq.name = c->param;
    c->ereq.name_len = c->param_len;
    ctx_submit(c, value_done);
}

static void by_body_name(route_ctx_t *c, engine_op_t op, route_done_fn done)
{
    json_t *body = legacy_body(c);
    if (body == NULL)
        return;
    int rc = legacy_name(c, body);
    json_decref(body);
    if (rc != 0)
        return;
    c->ereq.op = op;
    ctx_submit(c, done);
}

/* POST /semaphore/up  {"name":"<name>"} */
void legacy_up(route_ctx_t *c)
{
    by_body_name(c, ENGINE_LEGACY_UP, value_done);
}

static void down_done(route_ctx_t *c, engine_req_t *req)
{
    if (req->status == SEMA_EBUSY)
        ctx_reply_text(c, 409, "Semaphore locked");
    else
        reply_value(c, req, 404, "semaphore not found");
}

/* POST /semaphore/down  {"name":"<name>"} */
void legacy_down(route_ctx_t *c)
{
    by_body_name(c, ENGINE_LEGACY_DOWN, down_done);
}
