/* SPDX-License-Identifier: MIT */
/* store_record.c - the embedded store's journal records: a commit's mutations as bytes (what
 * store_commit.c appends to the journal) and back (what a replay writes to the database). */
#include "store/store_internal.h"

#include <stdlib.h>
#include <string.h>

#include "sema/error.h"

static size_t str_size(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* A record's body is its mutations one after the other: a kind byte, then the fields in a
 * fixed order per kind; integers as 8 bytes, strings as a 4-byte length plus one (0 for
 * NULL) and their bytes. Since format 4 a semaphore, lease or ticket is written with the
 * kinds J_*4, which add the limits, the tenant and the parts (a count, then each part's
 * name, weight and fence or place); the older kinds are still read. */
enum { J_PUT_SEM4 = 16, J_PUT_LEASE4 = 17, J_PUT_TICKET4 = 18 };
typedef struct {
    unsigned char *p;
} enc_t;

static void enc_u64(enc_t *w, uint64_t v)
{
    memcpy(w->p, &v, sizeof v);
    w->p += sizeof v;
}

static void enc_str(enc_t *w, const char *s)
{
    uint32_t n = s != NULL ? (uint32_t)strlen(s) + 1 : 0;

    memcpy(w->p, &n, sizeof n);
    w->p += sizeof n;
    if (n > 1)
        memcpy(w->p, s, n - 1);
    w->p += n > 0 ? n - 1 : 0;
}

static size_t enc_parts_size(const store_part_t *parts, size_t n)
{
    size_t len = 8;

    for (size_t i = 0; i < n; i++)
        len += 4 + str_size(parts[i].sem) + 16;
    return len;
}

static void enc_parts(enc_t *w, const store_part_t *parts, size_t n)
{
    enc_u64(w, n);
    for (size_t i = 0; i < n; i++) {
        enc_str(w, parts[i].sem);
        enc_u64(w, parts[i].weight);
        enc_u64(w, parts[i].seq);
    }
}

/* The bytes enc_op writes at most for op (strings' lengths plus a bound for the rest). */
size_t store__enc_size(const store_op_t *op)
{
    size_t n = 1 + 12 * 8 + 6 * 4;

    switch (op->kind) {
    case OP_PUT_SEM:
        return n + str_size(op->u.sem.name);
    case OP_PUT_LEASE:
        return n + str_size(op->u.lease.id) + str_size(op->u.lease.sem) +
               str_size(op->u.lease.owner) + str_size(op->u.lease.idem_key) +
               str_size(op->u.lease.principal) + str_size(op->u.lease.tenant) + 4 +
               enc_parts_size(op->u.lease.parts, op->u.lease.nparts);
    case OP_PUT_TICKET:
        return n + str_size(op->u.ticket.id) + str_size(op->u.ticket.sem) +
               str_size(op->u.ticket.owner) + str_size(op->u.ticket.idem_key) +
               str_size(op->u.ticket.lease_id) + str_size(op->u.ticket.principal) +
               str_size(op->u.ticket.tenant) + 4 +
               enc_parts_size(op->u.ticket.parts, op->u.ticket.nparts);
    case OP_PUT_FLOOR:
        return n;
    default:
        return n + str_size(op->u.name);
    }
}

static void enc_op(enc_t *w, const store_op_t *op)
{
    static const unsigned char jkind[] = {
        [OP_PUT_SEM] = J_PUT_SEM4,      [OP_DEL_SEM] = OP_DEL_SEM,
        [OP_PUT_LEASE] = J_PUT_LEASE4,  [OP_DEL_LEASE] = OP_DEL_LEASE,
        [OP_PUT_FLOOR] = OP_PUT_FLOOR,  [OP_PUT_TICKET] = J_PUT_TICKET4,
        [OP_DEL_TICKET] = OP_DEL_TICKET};

    *w->p++ = jkind[op->kind];
    switch (op->kind) {
    case OP_PUT_SEM:
        enc_str(w, op->u.sem.name);
        enc_u64(w, op->u.sem.capacity);
        enc_u64(w, (uint64_t)op->u.sem.available);
        enc_u64(w, op->u.sem.fence);
        enc_u64(w, (uint64_t)op->u.sem.legacy);
        enc_u64(w, (uint64_t)op->u.sem.created_at_ms);
        enc_u64(w, op->u.sem.tenant_max);
        enc_u64(w, op->u.sem.rate_per_s);
        enc_u64(w, op->u.sem.rate_burst);
        break;
    case OP_PUT_LEASE:
        enc_str(w, op->u.lease.id);
        enc_str(w, op->u.lease.sem);
        enc_u64(w, op->u.lease.weight);
        enc_str(w, op->u.lease.owner);
        enc_str(w, op->u.lease.idem_key);
        enc_u64(w, op->u.lease.fence);
        enc_u64(w, (uint64_t)op->u.lease.ttl_ms);
        enc_u64(w, (uint64_t)op->u.lease.acquired_at_ms);
        enc_u64(w, (uint64_t)op->u.lease.expires_at_ms);
        enc_u64(w, (uint64_t)op->u.lease.is_lock);
        enc_str(w, op->u.lease.principal);
        enc_str(w, op->u.lease.tenant);
        enc_parts(w, op->u.lease.parts, op->u.lease.nparts);
        break;
    case OP_PUT_TICKET:
        enc_str(w, op->u.ticket.id);
        enc_str(w, op->u.ticket.sem);
        enc_u64(w, op->u.ticket.seq);
        enc_u64(w, op->u.ticket.weight);
        enc_str(w, op->u.ticket.owner);
        enc_str(w, op->u.ticket.idem_key);
        enc_str(w, op->u.ticket.lease_id);
        enc_u64(w, (uint64_t)op->u.ticket.ttl_ms);
        enc_u64(w, (uint64_t)op->u.ticket.keepalive_ms);
        enc_u64(w, (uint64_t)op->u.ticket.created_at_ms);
        enc_u64(w, (uint64_t)op->u.ticket.collected);
        enc_str(w, op->u.ticket.principal);
        enc_str(w, op->u.ticket.tenant);
        enc_parts(w, op->u.ticket.parts, op->u.ticket.nparts);
        break;
    case OP_PUT_FLOOR:
        enc_u64(w, op->u.fence);
        break;
    default: /* OP_DEL_SEM, OP_DEL_LEASE, OP_DEL_TICKET */
        enc_str(w, op->u.name);
        break;
    }
}

unsigned char *store__enc_op(unsigned char *at, const store_op_t *op)
{
    enc_t w = {at};

    enc_op(&w, op);
    return w.p;
}

/* Decoding checks every length against the body: a record passed its checksum, so a
 * failure here means a bug or a journal of another build, and the store refuses it. */
typedef struct {
    const unsigned char *p, *end;
    int bad;
} dec_t;

static uint64_t dec_u64(dec_t *r)
{
    uint64_t v = 0;

    if (r->bad || (size_t)(r->end - r->p) < sizeof v) {
        r->bad = 1;
        return 0;
    }
    memcpy(&v, r->p, sizeof v);
    r->p += sizeof v;
    return v;
}

/* A string decoded into `to` (NUL-terminated), allocated from *heap (the record's copy). */
static const char *dec_str(dec_t *r, char **heap, const char *heap_end)
{
    uint32_t n;
    char *d;

    if (r->bad || (size_t)(r->end - r->p) < sizeof n) {
        r->bad = 1;
        return NULL;
    }
    memcpy(&n, r->p, sizeof n);
    r->p += sizeof n;
    if (n == 0)
        return NULL;
    if ((size_t)(r->end - r->p) < n - 1 || (size_t)(heap_end - *heap) < n ||
        memchr(r->p, '\0', n - 1) != NULL) {
        r->bad = 1;
        return NULL;
    }
    d = *heap;
    memcpy(d, r->p, n - 1);
    d[n - 1] = '\0';
    r->p += n - 1;
    *heap += n;
    return d;
}

/* Parts decoded into `parts` (room for STORE_PARTS_MAX); how many. */
static size_t dec_parts(dec_t *r, char **heap, const char *heap_end, store_part_t *parts)
{
    uint64_t n = dec_u64(r);

    if (n > STORE_PARTS_MAX) {
        r->bad = 1;
        return 0;
    }
    for (uint64_t i = 0; i < n && !r->bad; i++) {
        parts[i].sem = dec_str(r, heap, heap_end);
        parts[i].weight = dec_u64(r);
        parts[i].seq = dec_u64(r);
        r->bad |= parts[i].sem == NULL;
    }
    return r->bad ? 0 : (size_t)n;
}

/* jnl_replay's callback: write each mutation of a record to the database (in the open
 * transaction). */
int store__replay_record(void *arg, const unsigned char *body, size_t len, uint32_t nops)
{
    store_t *st = arg;
    dec_t r = {body, body + len, 0};
    /* Strings are copied out with their NULs: never more bytes than the body. */
    char *heap = malloc(len + 1);
    store_op_t op;
    store_part_t parts[STORE_PARTS_MAX];
    const char *doing;
    int rc = SQLITE_OK;

    if (heap == NULL)
        return SEMA_ENOMEM;
    for (uint32_t i = 0; i < nops && rc == SQLITE_OK && !r.bad; i++) {
        char *h = heap, *he = heap + len + 1;
        if (r.p >= r.end) {
            r.bad = 1;
            break;
        }
        memset(&op, 0, sizeof op);
        int jk = *r.p++;
        op.kind = jk == J_PUT_SEM4      ? OP_PUT_SEM
                  : jk == J_PUT_LEASE4  ? OP_PUT_LEASE
                  : jk == J_PUT_TICKET4 ? OP_PUT_TICKET
                                        : jk;
        switch (op.kind) {
        case OP_PUT_SEM:
            op.u.sem.name = dec_str(&r, &h, he);
            op.u.sem.capacity = dec_u64(&r);
            op.u.sem.available = (int64_t)dec_u64(&r);
            op.u.sem.fence = dec_u64(&r);
            op.u.sem.legacy = (int)dec_u64(&r);
            op.u.sem.created_at_ms = (int64_t)dec_u64(&r);
            if (jk == J_PUT_SEM4) {
                op.u.sem.tenant_max = dec_u64(&r);
                op.u.sem.rate_per_s = dec_u64(&r);
                op.u.sem.rate_burst = dec_u64(&r);
            }
            r.bad |= op.u.sem.name == NULL;
            break;
        case OP_PUT_LEASE:
            op.u.lease.id = dec_str(&r, &h, he);
            op.u.lease.sem = dec_str(&r, &h, he);
            op.u.lease.weight = dec_u64(&r);
            op.u.lease.owner = dec_str(&r, &h, he);
            op.u.lease.idem_key = dec_str(&r, &h, he);
            op.u.lease.fence = dec_u64(&r);
            op.u.lease.ttl_ms = (int64_t)dec_u64(&r);
            op.u.lease.acquired_at_ms = (int64_t)dec_u64(&r);
            op.u.lease.expires_at_ms = (int64_t)dec_u64(&r);
            op.u.lease.is_lock = (int)dec_u64(&r);
            op.u.lease.principal = dec_str(&r, &h, he);
            if (jk == J_PUT_LEASE4) {
                op.u.lease.tenant = dec_str(&r, &h, he);
                op.u.lease.nparts = dec_parts(&r, &h, he, parts);
                op.u.lease.parts = parts;
            }
            r.bad |= op.u.lease.id == NULL || op.u.lease.sem == NULL;
            break;
        case OP_PUT_TICKET:
            op.u.ticket.id = dec_str(&r, &h, he);
            op.u.ticket.sem = dec_str(&r, &h, he);
            op.u.ticket.seq = dec_u64(&r);
            op.u.ticket.weight = dec_u64(&r);
            op.u.ticket.owner = dec_str(&r, &h, he);
            op.u.ticket.idem_key = dec_str(&r, &h, he);
            op.u.ticket.lease_id = dec_str(&r, &h, he);
            op.u.ticket.ttl_ms = (int64_t)dec_u64(&r);
            op.u.ticket.keepalive_ms = (int64_t)dec_u64(&r);
            op.u.ticket.created_at_ms = (int64_t)dec_u64(&r);
            op.u.ticket.collected = (int)dec_u64(&r);
            op.u.ticket.principal = dec_str(&r, &h, he);
            if (jk == J_PUT_TICKET4) {
                op.u.ticket.tenant = dec_str(&r, &h, he);
                op.u.ticket.nparts = dec_parts(&r, &h, he, parts);
                op.u.ticket.parts = parts;
            }
            r.bad |= op.u.ticket.id == NULL || op.u.ticket.sem == NULL;
            break;
        case OP_PUT_FLOOR:
            op.u.fence = dec_u64(&r);
            break;
        case OP_DEL_SEM:
        case OP_DEL_LEASE:
        case OP_DEL_TICKET:
            op.u.name = dec_str(&r, &h, he);
            r.bad |= op.u.name == NULL;
            break;
        default:
            r.bad = 1;
        }
        if (!r.bad)
            rc = store__write_op(st, &op, &doing);
    }
    free(heap);
    if (r.bad || r.p != r.end)
        return SEMA_ECORRUPT;
    return rc == SQLITE_OK ? 0 : SEMA_EIO;
}
