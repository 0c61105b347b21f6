/* SPDX-License-Identifier: MIT */
/* redis_proto.h - the protocol between the Redis back end's C side and its script, sema.lua, in
 * one place: the script's operations, what its acts are, where each field of its replies
 * sits, the status codes and message ids it answers with, and the limits both sides use.
 * The C side includes it; the script's constants are generated from it when semad is built
 * (redis_luagen.c writes them in place of the line "-- @PROTO@" of sema.lua), so nothing here
 * is copied by hand into Lua. */
#ifndef SEMAD_REDIS_PROTO_H
#define SEMAD_REDIS_PROTO_H

#include "backends/be_estimate.h"
#include "backends/be_msg.h"
#include "engine/engine.h"
#include "engine/engine_limits.h"

/* The script's operations: X(ID, name in ARGV[1], writes). A write carries a request id, so
 * a command sent again after a lost answer is answered from its first run; the others can
 * run twice (a ticket's read renews its keepalive, which a second run does again). */
#define RS_OP_MAP(X)                                                                               \
    X(PUT, "put", 1)                                                                               \
    X(RESIZE, "resize", 1)                                                                         \
    X(GET, "get", 0)                                                                               \
    X(DELETE, "delete", 1)                                                                         \
    X(LIST, "list", 0)                                                                             \
    X(LOCK_LIST, "lock_list", 0)                                                                   \
    X(ACQUIRE, "acquire", 1)                                                                       \
    X(WAIT_IDLE, "wait_idle", 1)                                                                   \
    X(LEASE_GET, "lease_get", 0)                                                                   \
    X(LEASE_RENEW, "lease_renew", 1)                                                               \
    X(LEASE_RELEASE, "lease_release", 1)                                                           \
    X(LEASE_REVOKE, "lease_revoke", 1)                                                             \
    X(LOCK_ACQUIRE, "lock_acquire", 1)                                                             \
    X(LOCK_GET, "lock_get", 0)                                                                     \
    X(LEGACY_CREATE, "legacy_create", 1)                                                           \
    X(LEGACY_VALUE, "legacy_value", 0)                                                             \
    X(LEGACY_UP, "legacy_up", 1)                                                                   \
    X(LEGACY_DOWN, "legacy_down", 1)                                                               \
    X(TICKET_CREATE, "ticket_create", 1)                                                           \
    X(TICKET_GET, "ticket_get", 0)                                                                 \
    X(TICKET_DELETE, "ticket_delete", 1)                                                           \
    X(HELLO, "hello", 0)                                                                           \
    X(COLLECT, "collect", 0)                                                                       \
    X(CANCEL, "cancel", 1)                                                                         \
    X(DROP_LEASE, "drop_lease", 1)                                                                 \
    X(SWEEP, "sweep", 0)                                                                           \
    X(FOLLOW, "follow", 0)                                                                         \
    X(BEAT, "beat", 0)                                                                             \
    X(ACQUIRE_MULTI, "acquire_multi", 1)                                                           \
    X(TICKET_MULTI, "ticket_multi", 1)

typedef enum {
#define RS_OP__ENUM(id, name, writes) RS_OP_##id,
    RS_OP_MAP(RS_OP__ENUM)
#undef RS_OP__ENUM
        RS_OP_COUNT
} rs_op_t;

/* Every call: FCALL sema 1 KEY, then the head (X(ID): ARGV[1 + RS_H_ID] in Lua), then the
 * operation's own arguments from ARGV[A]. EPOCH is the epoch of Redis's data the instance
 * works on, a decimal number below 2^52. FLAGS is "0" or "1" (the principal is an admin),
 * then "t" when the request names a tenant (it takes no short path), "r" when the command is
 * sent again (it may have run: its answer may be kept), then
 * "p" while the instance knows of a pause in grants that has not ended (after lost data):
 * only a plain "0" or "1" may take a short path. On Redis Cluster the flags end with "c": KEY
 * is followed by '!' (a key that never exists: redis_shards.c says why), the keys a call
 * touches besides its semaphore's are under KEY's hash tag (the slot's, which every semaphore
 * of the slot shares), and it publishes with SPUBLISH on that slot. */
#define RS_HEAD_MAP(X) X(OP) X(EPOCH) X(FLAGS) X(INST) X(RID) X(PRINCIPAL)

enum {
#define RS_H__ENUM(id) RS_H_##id,
    RS_HEAD_MAP(RS_H__ENUM)
#undef RS_H__ENUM
        RS_HEAD_LEN
};
enum { RS_FCALL_HEAD = 4 }; /* FCALL sema 1 KEY: the head follows */

/* The arguments of acquire, lock_acquire and wait_idle (after the head): the weight (for a
 * lock: 1 shared, 0 exclusive), "1" when it may wait, the ttl, the lease id it is given (made by
 * the instance), the owner, the Idempotency-Key, and the limits that only a waiter or a new
 * lock key meets: "max_locks max_waiters lock_readers"; then, only when the request names one,
 * its tenant. The request id is the waiter id. */
#define RS_ACQ_MAP(X) X(WEIGHT) X(WAIT) X(TTL) X(LID) X(OWNER) X(IDEM) X(LIMITS) X(TENANT)

enum {
#define RS_AQ__ENUM(id) RS_AQ_##id,
    RS_ACQ_MAP(RS_AQ__ENUM)
#undef RS_AQ__ENUM
        RS_ACQ_LEN
};

/* The limits a PUT (after its capacity and the most semaphores) or a resize (after its
 * capacity, 0: as it is) names, only when it names some: which (ENGINE_LIMIT_* bits), then
 * tenant_max, rate_per_s and rate_burst (those it does not name: 0). */
#define RS_LIM_MAP(X) X(WHICH) X(TENANT_MAX) X(RATE) X(BURST)

/* An acquire or a release sent plain (flags "0" or "1": not sent again, no pause; "0t" or
 * "1t" for an acquire naming a tenant, on one Redis; an acquire with no Idempotency-Key; on
 * one Redis or a cluster) carries its head and its arguments in one argument after KEY, packed as
 * struct packs them (little-endian): the op (RS_PK_ACQUIRE or RS_PK_RELEASE) and the flag (its '0'
 * or '1'; on Redis Cluster '2' or '3', for the flags "0c" and "1c": KEY then ends with '!'), one
 * byte each; the epoch, a double; an acquire's weight and ttl, doubles, and its wait ('0' or '1'),
 * a byte; then strings, each a 2-byte length and its bytes: an acquire's lease id, owner,
 * principal, instance, request id and limits (RS_PK_ACQUIRE_T: then its tenant); a release's
 * principal, request id and instance. Redis makes a Lua string of every argument and a table of
 * them all: the short paths read what they need of one string, and a call they do not take has the
 * rest read back into the head and the arguments above. Numbers are packed only when exact (below
 * 2^53, written as %llu writes them); a command with any other is sent as above. */
enum { RS_PK_ACQUIRE = 'A', RS_PK_ACQUIRE_T = 'T', RS_PK_RELEASE = 'R' };

/* An acquire granted at once answers (the general path answers with the array of
 * RS_REPLY_MAP) with the fence, an integer, when it falls in Redis's current millisecond
 * counted in microseconds (the clock in ms is the fence / 1000); else with one short string:
 * RS_SHORT_GRANT, then the fence and Redis's clock (ms) as two little-endian doubles. The rest of
 * the lease is the request's. A release nobody waits for answers with an integer: the lease's
 * acquired time (ms). */
enum { RS_SHORT_GRANT = 'G' };

/* Several plain acquires and releases of one turn in one call (FCALL sema N, each one's KEY,
 * then each one's packed argument, in order) answer with an array: every one's answer, in
 * order, as it would be alone (a short path's, the general path's RS_REPLY_MAP run in its
 * place, or an error). At most RS_BATCH_MAX in one call; on one Redis only (on Redis Cluster
 * each goes by itself, to its slot's primary). */
enum { RS_BATCH_MAX = 64 };

/* What a script did, in order (an act's first field): X(ID, number, event type or NULL).
 * The first six, QUEUED and LEFT are the public events (rs_act_public); an outcome collected
 * from :g (another instance's grant, kept for this one) is its type plus RS_ACT_COLLECTED, so
 * it is not an event again. QUEUED and LEFT (a waiter joined the queue, or left it without a
 * grant) carry no waiter id: WEIGHT is the waiter's, FENCE and TTL the queue's count and
 * weight after it, ACQUIRED its since, EXPIRES its kind (0 acquire, 1 wait-idle, 2 ticket, 3 and 4
 * a part of a request or of a ticket on several), OWNER its owner, EXTRA its mode. */
#define RS_ACT_MAP(X)                                                                              \
    X(GRANTED, 1, "granted")                                                                       \
    X(RELEASED, 2, "released")                                                                     \
    X(EXPIRED, 3, "expired")                                                                       \
    X(REVOKED, 4, "revoked")                                                                       \
    X(RESIZED, 5, "resized")                                                                       \
    X(DELETED, 6, "deleted")                                                                       \
    X(IDLE, 7, NULL)                                                                               \
    X(FAIL, 8, NULL)                                                                               \
    X(GONE, 9, NULL)                                                                               \
    X(QUEUED, 10, "queued")                                                                        \
    X(LEFT, 11, "left")

enum {
#define RS_ACT__ENUM(id, num, type) RS_ACT_##id = num,
    RS_ACT_MAP(RS_ACT__ENUM)
#undef RS_ACT__ENUM
        RS_ACT_PUBLIC_MAX = 6, /* acts up to this one are public events */
    RS_ACT_COLLECTED = 16
};

/* Whether an act of this type is a public event. */
static inline int rs_act_public(int type)
{
    return (type > 0 && type <= RS_ACT_PUBLIC_MAX) || type == RS_ACT_QUEUED || type == RS_ACT_LEFT;
}

/* The fields of an act: X(ID). A lease's fields are zero and empty when the act has none;
 * EXTRA is the lease's mode, a resize's capacity, or a failed waiter's message id; TENANT the
 * lease's or the waiter's tenant ('' for none). From LID on, an act's fields are a lease's
 * (RS_LEASE_FIELD_MAP), which rs__lease_from reads there. */
#define RS_ACT_FIELD_MAP(X)                                                                        \
    X(TYPE)                                                                                        \
    X(WID)                                                                                         \
    X(INST) X(LID) X(WEIGHT) X(FENCE) X(TTL) X(ACQUIRED) X(EXPIRES) X(OWNER) X(EXTRA) X(TENANT)

enum {
#define RS_AF__ENUM(id) RS_AF_##id,
    RS_ACT_FIELD_MAP(RS_AF__ENUM)
#undef RS_AF__ENUM
        RS_ACT_LEN
};

/* A script's reply: X(ID), then the operation's result from RS_R_RESULT. ACTS and COUNTS are
 * one string each, their fields NUL-separated (RS_COUNT_MAP). STATUS is 0 (done), RS_ST_PARKED,
 * RS_ST_EPOCH (the epoch is not the one sent: the reply's second field is Redis's),
 * RS_ST_GONE (this instance is not in sema:inst: it was taken for dead, its waiters pruned) or a
 * negative SEMA_E*, whose text is the message MSG names (be_msg.h). */
#define RS_REPLY_MAP(X) X(STATUS) X(MSG) X(NOW) X(DUE) X(ACTS) X(STEM) X(COUNTS)

enum {
#define RS_R__ENUM(id) RS_R_##id,
    RS_REPLY_MAP(RS_R__ENUM)
#undef RS_R__ENUM
        RS_R_RESULT
};
enum { RS_ST_PARKED = 1, RS_ST_EPOCH = 2, RS_ST_GONE = 3 };

#define RS_COUNT_MAP(X) X(SEMS) X(LEASES) X(LOCKS) X(DUE_HEAD) X(HORIZON) X(LOG_UID) X(LOG_FIRST)

enum {
#define RS_C__ENUM(id) RS_C_##id,
    RS_COUNT_MAP(RS_C__ENUM)
#undef RS_C__ENUM
        RS_COUNT_LEN
};

/* Results: a lease (RS_LEASE_LEN fields), a view, a list item (a name, then a view without its
 * lists), a waiter in a view, a ticket (then its lease's fields once granted). */
#define RS_LEASE_FIELD_MAP(X)                                                                      \
    X(ID) X(WEIGHT) X(FENCE) X(TTL) X(ACQUIRED) X(EXPIRES) X(OWNER) X(MODE) X(TENANT)
#define RS_VIEW_FIELD_MAP(X)                                                                       \
    X(CAPACITY)                                                                                    \
    X(AVAILABLE)                                                                                   \
    X(HELD)                                                                                        \
    X(FENCE)                                                                                       \
    X(WAITING)                                                                                     \
    X(WAITING_WEIGHT) X(LEGACY) X(READERS) X(HOLDERS) X(WAITERS) X(TRUNCATED) X(LIMITS)
#define RS_WAITER_FIELD_MAP(X) X(OWNER) X(WEIGHT) X(SINCE) X(MODE) X(KIND) X(TENANT)
/* A view's LIMITS: empty, or these, then RS_TENANT_LEN fields per tenant (its name: '' for the
 * requests that named none). */
#define RS_VLIM_MAP(X) X(TENANT_MAX) X(RATE) X(BURST) X(TOKENS)
#define RS_TENANT_FIELD_MAP(X) X(NAME) X(HELD) X(WAITING) X(WAITING_WEIGHT)
#define RS_TICKET_FIELD_MAP(X)                                                                     \
    X(CREATED)                                                                                     \
    X(ID)                                                                                          \
    X(STATUS)                                                                                      \
    X(WEIGHT)                                                                                      \
    X(POSITION)                                                                                    \
    X(AHEAD)                                                                                       \
    X(KEEPALIVE)                                                                                   \
    X(UNITS)                                                                                       \
    X(CAPACITY) X(GAP_MS) X(GAP_VAR) X(NGAPS) X(HOLD_MS) X(NHOLDS) X(OLDEST_AGE_MS) X(TENANT)

enum {
#define RS_L__ENUM(id) RS_L_##id,
    RS_LEASE_FIELD_MAP(RS_L__ENUM)
#undef RS_L__ENUM
        RS_LEASE_LEN
};
_Static_assert(RS_AF_LID + RS_LEASE_LEN == RS_ACT_LEN, "an act ends with a lease's fields");
enum {
#define RS_V__ENUM(id) RS_V_##id,
    RS_VIEW_FIELD_MAP(RS_V__ENUM)
#undef RS_V__ENUM
        RS_VIEW_LEN,
    RS_VIEW_SHORT = RS_V_HOLDERS /* a view without its lists (legacy answers, list items) */
};
enum {
#define RS_VL__ENUM(id) RS_VL_##id,
    RS_VLIM_MAP(RS_VL__ENUM)
#undef RS_VL__ENUM
        RS_VLIM_LEN
};
enum {
#define RS_TN__ENUM(id) RS_TN_##id,
    RS_TENANT_FIELD_MAP(RS_TN__ENUM)
#undef RS_TN__ENUM
        RS_TENANT_LEN
};
enum {
#define RS_W__ENUM(id) RS_W_##id,
    RS_WAITER_FIELD_MAP(RS_W__ENUM)
#undef RS_W__ENUM
        RS_WAITER_LEN
};
enum {
#define RS_T__ENUM(id) RS_T_##id,
    RS_TICKET_FIELD_MAP(RS_T__ENUM)
#undef RS_T__ENUM
        RS_TICKET_LEN
};
/* A list item: its name, its short view, then leases granted, tickets waiting, when the
 * head of its queue came (list_counts in sema.lua) and its limits (as a view's LIMITS). */
enum {
    RS_ITEM_GRANTS = 1 + RS_VIEW_SHORT,
    RS_ITEM_TICKETS,
    RS_ITEM_SINCE,
    RS_ITEM_LIMITS,
    RS_ITEM_LEN
};

/* A semaphore's row (its :m key): these numbers in this order, each a little-endian double
 * (exact up to 2^53), packed by the script with struct (sema.lua, ROW_FMT). The short paths
 * read the row whole and write back AVAIL, HELD and FENCE in place (SETRANGE; an acquire that
 * moved the horizon writes from AVAIL to HZ), so those three stay side by side. DUE: the first
 * time something is due here (0: nothing); NT: live tickets; EV: 0 when nobody follows its
 * events (no log to write: sema.lua's follow and publish), 1 when someone may; EP: the epoch
 * the general path last wrote the row in (a short path runs only in it); PA: the end of the
 * pause after lost data that was running then (0: none); HZ: the lease horizon in Redis when
 * a call last wrote it here (a short path granting a lease past it reads the epoch's); WQ: the
 * weight waiting; SEQ: the last place handed out in the queue. */
#define RS_ROW_MAP(X)                                                                              \
    X(CAP)                                                                                         \
    X(AVAIL)                                                                                       \
    X(HELD) X(FENCE) X(NQ) X(DUE) X(NT) X(EV) X(EP) X(PA) X(HZ) X(LEGACY) X(CREATED) X(SEQ) X(WQ)

enum {
#define RS_ROW__ENUM(id) RS_ROW_##id,
    RS_ROW_MAP(RS_ROW__ENUM)
#undef RS_ROW__ENUM
        RS_ROW_LEN
};

/* Limits and times both sides use. */
#define RS_HK_MAX 1000         /* lease expiries and grants per housekeeping */
#define RS_ALIVE_MS 8000       /* the waiters of an instance silent this long leave */
#define RS_RESULT_TTL_MS 15000 /* a write's answer is kept this long for its retry */
#define RS_TOMB_TTL_MS 600000  /* an ended lease's or ticket's tombstone */
#define RS_LOG_MAX 1000        /* events kept in a semaphore's log (XADD MAXLEN ~) */
#define RS_LOG_TTL_MS 6000     /* a log's marker lives this long unrenewed */
#define RS_KEYSETS_MAX 1000    /* stems whose key names the script keeps */

/* The layout of semad's keys in Redis (docs/redis.md), kept in sema:epoch. A semad finding
 * another one there refuses to use that Redis: 1 was the layout before rows were packed. */
#define RS_LAYOUT 2

/* What the script gets as constants: X(NAME, value), integers and then doubles. */
#define RS_INT_MAP(X)                                                                              \
    X(CAP_MAX, ENGINE_CAPACITY_MAX)                                                                \
    X(VIEW_MAX, ENGINE_VIEW_LIST_MAX)                                                              \
    X(HK_MAX, RS_HK_MAX)                                                                           \
    X(ALIVE_MS, RS_ALIVE_MS)                                                                       \
    X(RESULT_TTL_MS, RS_RESULT_TTL_MS)                                                             \
    X(TOMB_TTL_MS, RS_TOMB_TTL_MS)                                                                 \
    X(LOG_MAX, RS_LOG_MAX)                                                                         \
    X(LOG_TTL_MS, RS_LOG_TTL_MS)                                                                   \
    X(KEYSETS_MAX, RS_KEYSETS_MAX)                                                                 \
    X(TENANTS_MAX, ENGINE_TENANTS_PER_SEM_MAX)                                                     \
    X(ST_PARKED, RS_ST_PARKED)                                                                     \
    X(ST_EPOCH, RS_ST_EPOCH)                                                                       \
    X(ST_GONE, RS_ST_GONE)                                                                         \
    X(ACT_LEN, RS_ACT_LEN)                                                                         \
    X(ACT_COLLECTED, RS_ACT_COLLECTED)                                                             \
    X(ACT_PUBLIC_MAX, RS_ACT_PUBLIC_MAX)                                                           \
    X(A, RS_HEAD_LEN + 1) /* ARGV[A]: the operation's first argument */                            \
    X(PK_ACQUIRE, RS_PK_ACQUIRE)                                                                   \
    X(PK_ACQUIRE_T, RS_PK_ACQUIRE_T)                                                               \
    X(PK_RELEASE, RS_PK_RELEASE)                                                                   \
    X(LAYOUT, RS_LAYOUT)
#define RS_DOUBLE_MAP(X) X(EST_ALPHA, BE_EST_ALPHA)

#endif /* SEMAD_REDIS_PROTO_H */
