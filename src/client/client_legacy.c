/* SPDX-License-Identifier: MIT */
/* client_legacy.c - the legacy semaphore API (the original semaphore service's five routes) and the
 * server-sent event stream. */
#include "client/client_internal.h"

#include <stdlib.h>
#include <string.h>

/* One legacy request; on 200 *value (may be NULL) receives the reply's "value". */
static int legacy_call(sema_client_t *c, const char *method, const char *path, json_t *body,
                       int retry, int64_t *value, sema_client_error_t *err)
{
    client_req_t req = {.method = method, .path = path, .body = body};
    json_t *doc = NULL;
    int rc = client_call(c, &req, retry, value != NULL ? &doc : NULL, err);

    if (rc == 0 && value != NULL && client_json_i64(doc, "value", value) != 0)
        rc = client_fail(err, SEMA_EPROTO, 200, "unexpected legacy reply from server");
    json_decref(doc);
    return rc;
}

int sema_client_legacy_create(sema_client_t *c, const char *name, int64_t value,
                              sema_client_error_t *err)
{
    int rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    if (value < 0 || value > (INT64_C(1) << 53))
        return client_fail(err, SEMA_EINVAL, 0, "value must be 0..2^53");
    json_t *body = json_pack("{s:s,s:I}", "name", name, "value", (json_int_t)value);
    if (body == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    rc = legacy_call(c, "POST", "/semaphore", body, 0, NULL, err);
    json_decref(body);
    return rc;
}

static int legacy_named_post(sema_client_t *c, const char *path, const char *name, int64_t *value,
                             sema_client_error_t *err)
{
    int rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    json_t *body = json_pack("{s:s}", "name", name);
    if (body == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    /* never retried: up and down are not idempotent */
    rc = legacy_call(c, "POST", path, body, 0, value, err);
    json_decref(body);
    return rc;
}

int sema_client_up(sema_client_t *c, const char *name, int64_t *value, sema_client_error_t *err)
{
    return legacy_named_post(c, "/semaphore/up", name, value, err);
}

int sema_client_down(sema_client_t *c, const char *name, int64_t *value, sema_client_error_t *err)
{
    return legacy_named_post(c, "/semaphore/down", name, value, err);
}

static int legacy_named(sema_client_t *c, const char *method, const char *prefix, const char *name,
                        int retry, int64_t *value, sema_client_error_t *err)
{
    int rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    char *path = client_path(prefix, name, "");
    if (path == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    rc = legacy_call(c, method, path, NULL, retry, value, err);
    free(path);
    return rc;
}

int sema_client_value(sema_client_t *c, const char *name, int64_t *value, sema_client_error_t *err)
{
    int64_t v;
    return legacy_named(c, "GET", "/semaphore/value/", name, 1, value ? value : &v, err);
}

int sema_client_legacy_delete(sema_client_t *c, const char *name, sema_client_error_t *err)
{
    return legacy_named(c, "DELETE", "/semaphore/", name, 0, NULL, err);
}

/* ---- server-sent events -------------------------------------------------------------- */

typedef struct {
    sema_client_event_cb cb;
    void *arg;
    char line[CLIENT_MAX_EVENT];
    size_t line_len;
    char type[64];
    char id[64]; /* the SSE last event ID buffer */
    char data[CLIENT_MAX_EVENT];
    size_t data_len;
    int overflow;
    sema_client_events_info_t *info; /* may be NULL */
} sse_t;

/* "retry: <digits>": the reconnection delay the server asks for (other values are ignored,
 * as the SSE specification says). */
static void sse_retry(sse_t *s, const char *v)
{
    int64_t ms = 0;

    if (s->info == NULL || *v == '\0')
        return;
    for (; *v != '\0'; v++) {
        if (*v < '0' || *v > '9' || ms > INT64_MAX / 10 - 9)
            return;
        ms = ms * 10 + (*v - '0');
    }
    s->info->retry_ms = ms;
}

/* A complete line (without its end of line): a field, or the blank line that ends an event. */
static int sse_line(sse_t *s)
{
    const char *l = s->line;
    size_t n = s->line_len;

    if (n == 0) {
        int stop = 0;
        if (s->data_len > 0 || s->type[0] != '\0') {
            if (s->info != NULL)
                memcpy(s->info->last_event_id, s->id, sizeof s->id);
            stop = s->cb(s->arg, s->type[0] ? s->type : "message", s->data);
        }
        s->type[0] = '\0';
        s->data_len = 0;
        s->data[0] = '\0';
        return stop;
    }
    if (strncmp(l, "event:", 6) == 0) {
        const char *v = l[6] == ' ' ? l + 7 : l + 6;
        snprintf(s->type, sizeof s->type, "%s", v);
    } else if (strncmp(l, "data:", 5) == 0) {
        const char *v = l[5] == ' ' ? l + 6 : l + 5;
        size_t vn = strlen(v);
        if (s->data_len + vn + 2 > sizeof s->data)
            return s->overflow = 1;
        if (s->data_len > 0)
            s->data[s->data_len++] = '\n';
        memcpy(s->data + s->data_len, v, vn + 1);
        s->data_len += vn;
    } else if (strncmp(l, "id:", 3) == 0) {
        const char *v = l[3] == ' ' ? l + 4 : l + 3;
        if (strlen(v) < sizeof s->id) /* longer than any id of semad's: ignored */
            snprintf(s->id, sizeof s->id, "%s", v);
    } else if (strncmp(l, "retry:", 6) == 0) {
        sse_retry(s, l[6] == ' ' ? l + 7 : l + 6);
    }
    return 0; /* comments (":...") and other fields are ignored */
}

static int sse_sink(void *arg, const char *data, size_t len)
{
    sse_t *s = arg;

    if (s->info != NULL)
        s->info->opened = 1; /* only a 2xx reply's body reaches the sink */
    for (size_t i = 0; i < len; i++) {
        char ch = data[i];
        if (ch == '\r')
            continue;
        if (ch != '\n') {
            if (s->line_len + 1 >= sizeof s->line)
                return s->overflow = 1;
            s->line[s->line_len++] = ch;
            continue;
        }
        s->line[s->line_len] = '\0';
        int stop = sse_line(s);
        s->line_len = 0;
        if (stop)
            return 1;
    }
    return 0;
}

int sema_client_events(sema_client_t *c, const char *name, sema_client_event_cb cb, void *arg,
                       const volatile int *cancel, sema_client_error_t *err)
{
    return sema_client_events_ex(c, name, cb, arg, cancel, NULL, err);
}

int sema_client_events_ex(sema_client_t *c, const char *name, sema_client_event_cb cb, void *arg,
                          const volatile int *cancel, sema_client_events_info_t *info,
                          sema_client_error_t *err)
{
    char last[sizeof info->last_event_id] = "";
    if (info != NULL) {
        memcpy(last, info->last_event_id, sizeof last);
        last[sizeof last - 1] = '\0';
        *info = (sema_client_events_info_t){.retry_ms = -1, .opened = 0};
        memcpy(info->last_event_id, last, sizeof last);
    }
    int rc = client_check_name(name, err);
    if (rc != 0)
        return rc;
    if (cb == NULL)
        return client_fail(err, SEMA_EINVAL, 0, "no callback");
    sse_t *s = calloc(1, sizeof *s);
    char *path = client_path("/v1/semaphores/", name, "/events");
    if (s == NULL || path == NULL) {
        free(s);
        free(path);
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    }
    s->cb = cb;
    s->arg = arg;
    s->info = info;
    memcpy(s->id, last, sizeof s->id); /* the buffer carries over, as in EventSource */
    client_req_t req = {.method = "GET",
                        .path = path,
                        .wait_ms = -1,
                        .cancel = cancel,
                        .last_event_id =
                            last[0] != '\0' && strpbrk(last, "\r\n") == NULL ? last : NULL,
                        .sink = sse_sink,
                        .sink_arg = s};
    client_resp_t resp;
    rc = client_exchange(c, &req, &resp, err);
    if (rc == SEMA_ECANCELED && client_cancelled(cancel))
        rc = 0;
    else if (rc == 0 && s->overflow)
        rc = client_fail(err, SEMA_EPROTO, resp.status, "event larger than %u bytes",
                         CLIENT_MAX_EVENT);
    else if (rc == 0 && (resp.status < 200 || resp.status > 299))
        rc = client_reply_error(&resp, err);
    client_resp_free(&resp); /* safe after any outcome: the exchange zeroed it first */
    if (rc == 0)
        client_clear(err);
    free(s);
    free(path);
    return rc;
}
