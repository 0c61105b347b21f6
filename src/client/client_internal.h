/* SPDX-License-Identifier: MIT */
/* client_internal.h - what the client's source files share: the handle, one HTTP exchange,
 * error mapping and small JSON helpers; never installed. */
#ifndef SEMA_CLIENT_INTERNAL_H
#define SEMA_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "sema/client.h"

/* A reply body is read into memory up to this size; more is a protocol error. */
#define CLIENT_MAX_BODY (8u << 20)
/* One server-sent event (its data lines together) may not exceed this. */
#define CLIENT_MAX_EVENT (256u << 10)

typedef struct client_conn {
    CURL *easy;
    CURLM *multi; /* owns the connection cache, so the next request on this slot reuses it */
    struct client_conn *next;
} client_conn_t;

struct sema_client {
    char *url; /* without a trailing '/' */
    char *owner;
    char *auth_header;         /* "Authorization: Bearer TOKEN", or NULL */
    char *cacert, *cert, *key; /* TLS files (NULL: libcurl's defaults) */
    int64_t connect_timeout_ms;
    int64_t request_timeout_ms;
    int max_retries;  /* a cap on a call's retries (INT_MAX: none but retry_ms) */
    int64_t retry_ms; /* a call's retries start within this of its first failure (0: none) */
    int max_idle;
    pthread_mutex_t lock; /* guards idle and nidle */
    client_conn_t *idle;
    int nidle;
};

/* Receives streamed body bytes instead of the buffer (server-sent events). Return 0 to go
 * on, non-zero to stop the transfer (the request then ends with status 0). */
typedef int (*client_sink_fn)(void *arg, const char *data, size_t len);

typedef struct {
    const char *method;         /* "GET", "PUT", "PATCH", "POST", "DELETE" */
    const char *path;           /* encoded, starting with '/' (query included) */
    json_t *body;               /* borrowed, may be NULL */
    const char *idem_key;       /* Idempotency-Key header, may be NULL */
    const char *last_event_id;  /* Last-Event-ID header, may be NULL */
    int64_t wait_ms;            /* how long the server may take beyond a round trip: the
                                   call's own timeout_ms (< 0: forever) */
    const volatile int *cancel; /* may be NULL */
    int64_t max_ms;             /* > 0: the whole exchange must end within this */
    client_sink_fn sink;        /* may be NULL: the body is buffered in resp */
    void *sink_arg;
    int gone; /* client_call: a retry answered this SEMA_E* code ("already ended") counts
                 as done, since an earlier try got through; 0: none */
} client_req_t;

typedef struct {
    long status; /* HTTP status, 0 when there was no reply */
    char *body;  /* NUL-terminated (free with free()), NULL when streamed or empty */
    size_t len;
    int problem;            /* the body is application/problem+json */
    int64_t retry_after_ms; /* the wait the reply's Retry-After asks for, 0 without one */
} client_resp_t;

/* One exchange (no retries). Returns 0 when an HTTP reply arrived (any status; see
 * resp->status), SEMA_ECANCELED when *cancel stopped it, or the transport error
 * (SEMA_ECONNREFUSED, SEMA_ETIMEDOUT, SEMA_EPROTO, SEMA_ENOMEM) with err filled. */
int client_exchange(sema_client_t *c, const client_req_t *req, client_resp_t *resp,
                    sema_client_error_t *err);

/* client_exchange(), then the status turned into a code: 2xx -> 0, else the problem code's
 * SEMA_E* with err filled. With `retry` set it is sent again after a network error, and a
 * GET or DELETE (which may run twice) after a 503 too, as client_retry_wait() allows. On 0
 * *json (may be NULL) receives the parsed body (NULL for an empty one). */
int client_call(sema_client_t *c, const client_req_t *req, int retry, json_t **json,
                sema_client_error_t *err);

/* Map a reply's status and body to a SEMA_E* code and fill err. */
int client_reply_error(const client_resp_t *resp, sema_client_error_t *err);

/* A call's run of retries ({0} before the first try). */
typedef struct {
    int64_t until_ms; /* monotonic ms by which a retry must start; 0: no try failed yet */
    int tries;        /* retries allowed so far */
} client_retry_t;

/* After a failed try (whose 503 asked for `retry_after_ms` by its Retry-After; 0: nothing):
 * the ms to wait before the next try, or -1 when there is none. The wait is the backoff
 * (100 ms doubling, at most 1 s) or the server's ask if longer; there is none past
 * c->max_retries or when it would end more than c->retry_ms after the first failure. */
int64_t client_retry_wait(const sema_client_t *c, client_retry_t *r, int64_t retry_after_ms);

/* Whether a transport error may be retried (the request may not have been processed). */
int client_retryable(int rc);

void client_resp_free(client_resp_t *resp);

/* Fill err (if not NULL) with a code and a printf-style message; returns `code`. */
int client_fail(sema_client_error_t *err, int code, long status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void client_clear(sema_client_error_t *err);

/* Build "<prefix><escaped name><suffix>" into a new string (free()); NULL on ENOMEM. */
char *client_path(const char *prefix, const char *name, const char *suffix);

/* Percent-encode `s` (all but RFC 3986 unreserved bytes) into a new string. */
char *client_escape(const char *s);

/* Every string the client sends (in a body, a path or a header) is checked before anything
 * is sent, so that a bad one fails with SEMA_EINVAL and a message naming it: */

/* Check a name or key: non-NULL, non-empty, shorter than SEMA_CLIENT_NAME_MAX, UTF-8. */
int client_check_name(const char *name, sema_client_error_t *err);

/* Check `s` (NULL: not sent, fine) is UTF-8. Returns 0, SEMA_EINVAL ("<what> must be valid
 * UTF-8") or SEMA_ENOMEM, with err filled. */
int client_check_text(const char *what, const char *s, sema_client_error_t *err);

/* body[key] = the string `s`, checked as client_check_text() does (NULL: nothing set). */
int client_set_text(json_t *body, const char *key, const char *s, sema_client_error_t *err);

/* The Idempotency-Key of a request into key[len]: `given` (1 to len - 1 bytes of UTF-8, no
 * control characters), or a random one when `given` is NULL. Returns 0, SEMA_EINVAL, SEMA_EIO
 * (getrandom failed) or SEMA_ENOMEM, with err filled. */
int client_idem_key(const char *given, char *key, size_t len, sema_client_error_t *err);

/* Monotonic now in ns; sleep for ms unless *cancel becomes set (returns non-zero then). */
int64_t client_now_ns(void);
int client_sleep_ms(int64_t ms, const volatile int *cancel);
int client_cancelled(const volatile int *cancel);

/* JSON number fields: 0 when present and an integer, SEMA_EPROTO otherwise. */
int client_json_u64(json_t *obj, const char *key, uint64_t *out);
int client_json_i64(json_t *obj, const char *key, int64_t *out);

/* Parse a lease object into *lease; `sent_ns` is when the request left (for the local
 * deadline). Returns 0 or SEMA_EPROTO. */
int client_parse_lease(json_t *obj, int64_t sent_ns, sema_lease_t *lease);

/* A lease's (or ticket's) "semaphores" into parts (room for SEMA_CLIENT_PARTS_MAX), each
 * with its name and weight, and its fence when `fenced`: how many, or -1 when malformed. */
int client_parse_parts(json_t *obj, int fenced, sema_lease_part_t *parts);

/* The "semaphores" array of a request on several semaphores into *arr (new): 1 to
 * SEMA_CLIENT_PARTS_MAX parts, each name checked, a weight of 0 sent as 1. Returns 0,
 * SEMA_EINVAL, SEMA_ENAMETOOLONG or SEMA_ENOMEM, with err filled. */
int client_parts_body(const sema_client_part_t *parts, size_t nparts, json_t **arr,
                      sema_client_error_t *err);

/* sema_client_renew() whose exchange ends within `max_ms` (> 0; 0: no bound beyond the
 * client's request timeout). */
int client_renew(sema_client_t *c, sema_lease_t *lease, int64_t ttl_ms, int64_t max_ms,
                 sema_client_error_t *err);

/* DELETE <prefix><escaped id>, retried after a network error or a 503 (client_call); a
 * retry answered `gone` (the code of "already ended") counts as done: an earlier try got
 * through. */
int client_delete_retried(sema_client_t *c, const char *prefix, const char *id, int gone,
                          sema_client_error_t *err);

/* 32 hex characters of getrandom() into buf[33]. Returns 0 or SEMA_EIO. */
int client_random_key(char *buf, size_t len);

#endif /* SEMA_CLIENT_INTERNAL_H */
