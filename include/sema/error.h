/* SPDX-License-Identifier: MIT */
/* error.h - sema's status codes, shared by libsema, semad, the client and the CLI. */
#ifndef SEMA_ERROR_H
#define SEMA_ERROR_H

#include "sema/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every sema function that can fail returns 0 or one of these negative codes.
 * Where Linux has an errno of the same meaning the code is its negation
 * (SEMA_EBUSY == -EBUSY); codes without one are below -1000. The numbers are part of the
 * ABI and never change.
 *
 * XX(name, number, message) */
#define SEMA_ERRNO_MAP(XX)                                                                         \
    XX(EINVAL, -22, "invalid argument")                                                            \
    XX(ENOMEM, -12, "out of memory")                                                               \
    XX(EBUSY, -16, "not available without waiting")                                                \
    XX(ETIMEDOUT, -110, "timed out")                                                               \
    XX(ECANCELED, -125, "cancelled or closed")                                                     \
    XX(EOVERFLOW, -75, "released more than is held")                                               \
    XX(ENOENT, -2, "no such semaphore, lease or key")                                              \
    XX(EEXIST, -17, "already exists with other settings")                                          \
    XX(ESTALE, -116, "permit or lock already released")                                            \
    XX(EEXPIRED, -127, "lease expired")                                                            \
    XX(EREVOKED, -128, "lease revoked")                                                            \
    XX(ELIMIT, -122, "a configured limit was reached")                                             \
    XX(EACCES, -13, "permission denied")                                                           \
    XX(EIO, -5, "input/output error")                                                              \
    XX(ESHUTDOWN, -108, "shutting down")                                                           \
    XX(ECONNREFUSED, -111, "cannot reach the server")                                              \
    XX(EPROTO, -71, "protocol error")                                                              \
    XX(ECORRUPT, -117, "state is corrupt")                                                         \
    XX(EVERSION, -95, "unsupported format version")                                                \
    XX(ENAMETOOLONG, -36, "name too long")                                                         \
    XX(EUNAVAIL, -11, "temporarily unavailable, try again")                                        \
    XX(EREPLACED, -1001, "replaced by a newer attempt with the same idempotency key")              \
    XX(EKEYMISMATCH, -1002, "idempotency key reused for a request of another weight or mode")      \
    XX(ENOTSUP, -1003, "not supported by this engine")                                             \
    XX(EGONE, -1004, "the ticket has left the line or its turn has ended")                         \
    XX(ENOHOST, -1005, "the server's host name does not resolve")

typedef enum {
#define SEMA__ERR_ENUM(name, num, msg) SEMA_##name = (num),
    SEMA_ERRNO_MAP(SEMA__ERR_ENUM)
#undef SEMA__ERR_ENUM
} sema_errno_t;

/* A static, human-readable message for `err` ("unknown error" for codes that
 * are not sema's). Never NULL. Thread-safe. */
SEMA_EXTERN const char *sema_strerror(int err);

/* The code's name without the SEMA_ prefix ("EBUSY"), or "UNKNOWN". Never NULL. */
SEMA_EXTERN const char *sema_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_ERROR_H */
