/* SPDX-License-Identifier: MIT */
/* be_msg.h - every message a back end answers a request with, in one table: its id, its status
 * code and its text. Both back ends fail a request by id; the Redis back end's script
 * (sema.lua) returns the id, never the text, and C renders it (the ids reach the script as
 * generated constants, redis/redis_proto.h). */
#ifndef SEMAD_BE_MSG_H
#define SEMAD_BE_MSG_H

#include "sema/error.h"

/* X(ID, code without SEMA_, text). The ids are numbered in this order from 1; a script and
 * the semad that loaded it always come from one build, so the numbers may change between
 * versions. */
#define BE_MSG_MAP(X)                                                                              \
    X(NO_SEM, ENOENT, "no such semaphore")                                                         \
    X(NO_LEASE, ENOENT, "no such lease")                                                           \
    X(NO_LOCK, ENOENT, "no such lock key (not held or awaited)")                                   \
    X(NO_TICKET, ENOENT, "no such ticket")                                                         \
    X(SEM_OTHER_CAPACITY, EEXIST, "the semaphore exists with another capacity")                    \
    X(SEM_EXISTS, EEXIST, "the semaphore already exists")                                          \
    X(TOO_MANY_SEMS, ELIMIT, "too many semaphores")                                                \
    X(TOO_MANY_WAITERS, ELIMIT, "too many parked requests")                                        \
    X(TOO_MANY_LOCKS, ELIMIT, "too many lock keys")                                                \
    X(BAD_WEIGHT, EINVAL, "weight must be between 1 and the capacity")                             \
    X(NOT_AVAILABLE, EBUSY, "not available without waiting")                                       \
    X(NOT_IDLE, EBUSY, "not idle")                                                                 \
    X(LEGACY_LOCKED, EBUSY, "Semaphore locked")                                                    \
    X(LEGACY_OVERFLOW, EOVERFLOW, "value would exceed 2^53")                                       \
    X(LEASE_RELEASED, ESTALE, "the lease was already released")                                    \
    X(LEASE_EXPIRED, EEXPIRED, "the lease expired")                                                \
    X(LEASE_REVOKED, EREVOKED, "the lease was revoked")                                            \
    X(LEASE_SEM_DELETED, ECANCELED, "the lease's semaphore was deleted")                           \
    X(LEASE_OTHER_TOKEN, EACCES,                                                                   \
      "the lease was taken by another token (only its token or an admin may end it)")              \
    X(KEY_OTHER_TOKEN, EACCES, "the Idempotency-Key names a request of another token")             \
    X(KEY_OTHER_WEIGHT, EKEYMISMATCH,                                                              \
      "this Idempotency-Key names a request of another weight (or lock mode); nothing was "        \
      "granted")                                                                                   \
    X(KEY_NAMES_TICKET, EKEYMISMATCH, "this Idempotency-Key names a ticket; nothing was granted")  \
    X(KEY_OTHER_REQUEST, EKEYMISMATCH,                                                             \
      "this Idempotency-Key names another request (or a ticket of another weight)")                \
    X(TICKET_OTHER_TOKEN, EACCES, "the ticket belongs to another token")                           \
    X(TICKET_LEFT, EGONE, "the ticket left the line")                                              \
    X(TICKET_ABANDONED, EGONE, "the ticket was dropped: nobody read it for keepalive_ms")          \
    X(TICKET_UNCOLLECTED, EGONE,                                                                   \
      "the ticket's lease was released: nobody collected it within keepalive_ms")                  \
    X(TICKET_DONE, EGONE, "the ticket's lease has ended")                                          \
    X(TICKET_SEM_DELETED, EGONE, "the ticket's semaphore was deleted")                             \
    X(TICKET_REFUSED, EGONE,                                                                       \
      "the ticket can no longer be granted (its weight is above the capacity now, or memory "      \
      "ran out)")                                                                                  \
    X(WAITER_SEM_DELETED, ECANCELED, "the semaphore was deleted")                                  \
    X(WAITER_ABOVE_CAPACITY, EINVAL, "weight is above the new capacity")                           \
    X(WAITER_TIMED_OUT, ETIMEDOUT, "not granted before timeout_ms")                                \
    X(WAITER_REPLACED, EREPLACED,                                                                  \
      "replaced by a newer attempt with the same Idempotency-Key, which now waits in its place")   \
    X(SHUTDOWN, ESHUTDOWN, "the server is shutting down")                                          \
    X(NOMEM, ENOMEM, "out of memory")                                                              \
    X(NOMEM_RESULT, ENOMEM, "out of memory building the result")                                   \
    X(NOMEM_GRANT, ENOMEM, "out of memory granting the lease")                                     \
    X(NOMEM_SEM, ENOMEM, "out of memory creating the semaphore")                                   \
    X(NOMEM_LOCK, ENOMEM, "out of memory creating the lock")                                       \
    X(NOMEM_TICKET, ENOMEM, "out of memory creating the ticket")                                   \
    X(STORE_ROLLED_BACK, EIO, "the durable store failed; the change was rolled back")              \
    X(STORE_SEM_GONE, EIO, "the store failed and the semaphore is gone after the rollback")        \
    X(STORE_TICKET_AGAIN, EIO, "the durable store failed; read the ticket again")                  \
    X(CURSOR_TOO_LONG, EINVAL, "cursor is too long")                                               \
    X(NO_SEM_OF_SEVERAL, ENOENT, "no such semaphore (one of those named)")                         \
    X(SEM_OTHER_LIMITS, EEXIST,                                                                    \
      "the semaphore exists with other limits (tenant_max, rate_per_s or rate_burst)")             \
    X(ABOVE_TENANT_MAX, EINVAL, "weight is above the semaphore's tenant_max")                      \
    X(ABOVE_RATE_BURST, EINVAL, "weight is above the semaphore's rate_burst")                      \
    X(BURST_NEEDS_RATE, EINVAL, "rate_burst needs rate_per_s")                                     \
    X(KEY_OTHER_TENANT, EKEYMISMATCH,                                                              \
      "this Idempotency-Key names a request of another weight (or lock mode, or tenant); nothing " \
      "was granted")                                                                               \
    X(KEY_OTHER_PARTS, EKEYMISMATCH,                                                               \
      "this Idempotency-Key names a request on other semaphores (or weights, or tenant); nothing " \
      "was granted")                                                                               \
    X(KEY_OTHER_TICKET, EKEYMISMATCH,                                                              \
      "this Idempotency-Key names another request (or a ticket of another weight or tenant)")      \
    X(TOO_MANY_WAITERS_OR_TENANTS, ELIMIT, "too many parked requests (or tenants)")                \
    X(REDIS_STATE_LOST, EUNAVAIL,                                                                  \
      "Redis lost its state, or may have (a replica without its latest writes took over); "        \
      "grants resume once every lease it held has run out")                                        \
    X(REDIS_LOST_BEFORE_ANSWER, EUNAVAIL,                                                          \
      "Redis lost its state before answering (restarted without persistence, or flushed): the "    \
      "request is void, nothing of it remains")                                                    \
    X(REDIS_WAITER_GONE, EUNAVAIL,                                                                 \
      "Redis no longer knows this waiter (its state was lost, or this instance was taken for "     \
      "dead); nothing was granted")                                                                \
    X(REDIS_UNREACHABLE, EIO, "Redis is unreachable")                                              \
    X(REDIS_BACKLOG, EIO, "Redis is unreachable (too many commands wait for it)")                  \
    X(REDIS_LOST_ANSWER, EIO, "Redis is unreachable: the outcome is unknown")                      \
    X(REDIS_NO_ANSWER, EIO, "Redis did not answer in time: the outcome is unknown")                \
    X(REDIS_NO_ANSWER_RETRIED, EIO,                                                                \
      "Redis did not answer in time: the outcome is unknown (semad retries it until Redis "        \
      "answers)")                                                                                  \
    X(REDIS_REFUSED, EIO, "Redis refused the command (see semad's log)")                           \
    X(REDIS_NOT_CONFIRMED, EIO,                                                                    \
      "not confirmed by the Redis replicas that strict durability waits for: the outcome is "      \
      "unknown")

typedef enum {
    BE_MSG_NONE = 0,
#define BE_MSG__ENUM(id, code, text) BE_MSG_##id,
    BE_MSG_MAP(BE_MSG__ENUM)
#undef BE_MSG__ENUM
        BE_MSG_COUNT
} be_msg_t;

/* The text of message `id` (static); NULL for BE_MSG_NONE or an id out of range. */
const char *be_msg_text(int id);

/* The status code of message `id` (a negative SEMA_E*); SEMA_EIO for an id out of range,
 * 0 for BE_MSG_NONE. */
int be_msg_code(int id);

#endif /* SEMAD_BE_MSG_H */
