/* SPDX-License-Identifier: MIT */
/* problem.c - engine status -> HTTP status and problem+json code (docs/http-api.md). */
#include "http/problem.h"

#include <stdio.h>
#include <string.h>

#include "http/http.h"
#include "sema/error.h"

/* A store that could not be reached (Redis away, a failed durable write) or a grant held
 * back (Redis lost its state) is worth asking again soon: one second is the smallest
 * Retry-After above "now", about what semad's reconnect to Redis takes (50 ms doubling to
 * 2 s), and leaves a client with the default 5 s budget four or five tries. */
#define RETRY_AFTER "Retry-After: 1\r\n"

static const problem_row_t rows[] = {
    {0, 200, "", "OK", NULL},
    {SEMA_EINVAL, 400, "invalid_request", "Invalid request", NULL},
    {SEMA_ENAMETOOLONG, 400, "name_too_long", "Name too long", NULL},
    {SEMA_ENOENT, 404, "not_found", "Not found", NULL},
    {SEMA_EEXIST, 409, "conflict", "Exists with other settings", NULL},
    {SEMA_EBUSY, 409, "unavailable", "Not available without waiting", NULL},
    {SEMA_ETIMEDOUT, 409, "timeout", "Timed out", NULL},
    {SEMA_EOVERFLOW, 409, "overflow", "Released more than is held", NULL},
    {SEMA_ECANCELED, 410, "deleted", "Semaphore deleted", NULL},
    {SEMA_EREPLACED, 409, "idempotency_key_replaced", "Replaced by a newer attempt", NULL},
    {SEMA_EKEYMISMATCH, 409, "idempotency_key_mismatch", "Idempotency-Key used for another request",
     NULL},
    {SEMA_EEXPIRED, 410, "lease_expired", "Lease expired", NULL},
    {SEMA_EREVOKED, 410, "lease_revoked", "Lease revoked", NULL},
    {SEMA_ESTALE, 410, "lease_released", "Lease already released", NULL},
    {SEMA_ELIMIT, 429, "limit_reached", "A configured limit was reached", NULL},
    {SEMA_ESHUTDOWN, 503, "shutting_down", "Shutting down", NULL},
    {SEMA_EIO, 503, "store_unavailable", "Store unavailable", RETRY_AFTER},
    {SEMA_ENOMEM, 503, "out_of_memory", "Out of memory", NULL},
    {SEMA_EUNAVAIL, 503, "unavailable_retry", "Temporarily unavailable", RETRY_AFTER},
    {SEMA_EACCES, 403, "forbidden", "Permission denied", NULL},
    {SEMA_EPROTO, 400, "protocol_error", "Protocol error", NULL},
    {SEMA_ECONNREFUSED, 502, "upstream_unreachable", "Upstream unreachable", NULL},
    {SEMA_ENOHOST, 502, "upstream_host_unknown", "Upstream host name does not resolve", NULL},
    {SEMA_ECORRUPT, 500, "store_corrupt", "Stored state is corrupt", NULL},
    {SEMA_EVERSION, 500, "store_version", "Unsupported store version", NULL},
    {SEMA_ENOTSUP, 501, "not_supported", "Not supported by this engine", NULL},
    {SEMA_EGONE, 410, "ticket_ended", "Ticket ended", NULL},
};

static const problem_row_t internal_row = {1, 500, "internal", "Internal error", NULL};

const problem_row_t *problem_lookup(int err)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].err == err)
            return &rows[i];
    return &internal_row;
}

const char *problem_title(const char *code, int status)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strcmp(rows[i].code, code) == 0)
            return rows[i].title;
    return http_status_text(status);
}

size_t problem_count(void)
{
    return sizeof rows / sizeof rows[0];
}

const problem_row_t *problem_row(size_t i)
{
    return i < problem_count() ? &rows[i] : NULL;
}
