/* SPDX-License-Identifier: MIT */
/* store_commit.c - the embedded store's commits: mutations recorded on the loop thread,
 * appended to the journal (store_journal.c) as one record per group commit, kept coalesced
 * in the checkpoint set, and written to the database (store_sqlite.c) by checkpoints; at
 * open, what a crash left in the journal is recovered first. */
#include "store/store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sema/error.h"

/* ---- writing ------------------------------------------------------------------------- */

/* Mutations are recorded on the loop thread (copied, so the engine's strings may go at
 * once) and appended to the journal by store_commit_run, possibly on another thread, as one
 * record. */
static store_op_t *op_new(int kind, size_t extra)
{
    store_op_t *op = malloc(sizeof *op + extra);

    if (op != NULL) {
        op->next = NULL;
        op->kind = kind;
        op->keyed = 0;
        op->fresh = 0;
    }
    return op;
}

/* Copy s (NULL stays NULL) to *at, advancing it. */
static const char *op_str(char **at, const char *s)
{
    char *d = *at;
    size_t n;

    if (s == NULL)
        return NULL;
    n = strlen(s) + 1;
    memcpy(d, s, n);
    *at += n;
    return d;
}

static size_t str_size(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* Room for a copy of n parts: the array (aligned) and their names. */
static size_t parts_size(const store_part_t *parts, size_t n)
{
    size_t len = n > 0 ? n * sizeof(*parts) + _Alignof(store_part_t) : 0;

    for (size_t i = 0; i < n; i++)
        len += str_size(parts[i].sem);
    return len;
}

/* Copy n parts to *at (aligned there first), advancing it. */
static const store_part_t *op_parts(char **at, const store_part_t *parts, size_t n)
{
    uintptr_t a =
        ((uintptr_t)*at + _Alignof(store_part_t) - 1) & ~(uintptr_t)(_Alignof(store_part_t) - 1);
    store_part_t *d = (store_part_t *)a;

    if (n == 0)
        return NULL;
    *at = (char *)(d + n);
    for (size_t i = 0; i < n; i++) {
        d[i] = parts[i];
        d[i].sem = op_str(at, parts[i].sem);
    }
    return d;
}

static int op_add(store_t *st, store_op_t *op)
{
    if (op == NULL) {
        st->pend_failed = 1; /* the next commit fails: a mutation is missing from it */
        return SEMA_ENOMEM;
    }
    *st->pend_tail = op;
    st->pend_tail = &op->next;
    st->npend++;
    return 0;
}

int store_put_sem(store_t *st, const store_sem_t *sem)
{
    store_op_t *op = op_new(OP_PUT_SEM, str_size(sem->name));

    if (op != NULL) {
        char *at = op->strings;
        op->u.sem = *sem;
        op->u.sem.name = op_str(&at, sem->name);
    }
    return op_add(st, op);
}

/* Record an op whose only argument is a name (a semaphore's or a lease id). */
static int add_named(store_t *st, int kind, const char *name)
{
    store_op_t *op = op_new(kind, str_size(name));

    if (op != NULL) {
        char *at = op->strings;
        op->u.name = op_str(&at, name);
    }
    return op_add(st, op);
}

int store_del_sem(store_t *st, const char *name)
{
    return add_named(st, OP_DEL_SEM, name);
}

int store_put_lease(store_t *st, const store_lease_t *l)
{
    store_op_t *op =
        op_new(OP_PUT_LEASE, str_size(l->id) + str_size(l->sem) + str_size(l->owner) +
                                 str_size(l->idem_key) + str_size(l->principal) +
                                 str_size(l->tenant) + parts_size(l->parts, l->nparts));

    if (op != NULL) {
        char *at = op->strings;
        op->u.lease = *l;
        op->u.lease.id = op_str(&at, l->id);
        op->u.lease.sem = op_str(&at, l->sem);
        op->u.lease.owner = op_str(&at, l->owner);
        op->u.lease.idem_key = op_str(&at, l->idem_key);
        op->u.lease.principal = op_str(&at, l->principal);
        op->u.lease.tenant = op_str(&at, l->tenant);
        op->u.lease.parts = op_parts(&at, l->parts, l->nparts);
    }
    return op_add(st, op);
}

int store_del_lease(store_t *st, const char *id)
{
    return add_named(st, OP_DEL_LEASE, id);
}

int store_put_ticket(store_t *st, const store_ticket_t *t)
{
    store_op_t *op = op_new(OP_PUT_TICKET, str_size(t->id) + str_size(t->sem) + str_size(t->owner) +
                                               str_size(t->idem_key) + str_size(t->lease_id) +
                                               str_size(t->principal) + str_size(t->tenant) +
                                               parts_size(t->parts, t->nparts));

    if (op != NULL) {
        char *at = op->strings;
        op->u.ticket = *t;
        op->u.ticket.id = op_str(&at, t->id);
        op->u.ticket.sem = op_str(&at, t->sem);
        op->u.ticket.owner = op_str(&at, t->owner);
        op->u.ticket.idem_key = op_str(&at, t->idem_key);
        op->u.ticket.lease_id = op_str(&at, t->lease_id);
        op->u.ticket.principal = op_str(&at, t->principal);
        op->u.ticket.tenant = op_str(&at, t->tenant);
        op->u.ticket.parts = op_parts(&at, t->parts, t->nparts);
    }
    return op_add(st, op);
}

int store_del_ticket(store_t *st, const char *id)
{
    return add_named(st, OP_DEL_TICKET, id);
}

int store_put_fence_floor(store_t *st, uint64_t fence)
{
    store_op_t *op = op_new(OP_PUT_FLOOR, 0);

    if (op != NULL)
        op->u.fence = fence;
    return op_add(st, op);
}

int store_pending(const store_t *st)
{
    return st != NULL && (st->pend != NULL || st->pend_failed);
}

uint64_t store_backlog(const store_t *st)
{
    return st != NULL ? st->npend : 0;
}

static void free_ops(store_op_t *op)
{
    while (op != NULL) {
        store_op_t *next = op->next;
        free(op);
        op = next;
    }
}

void store_discard_pending(store_t *st)
{
    free_ops(st->pend);
    st->pend = NULL;
    st->pend_tail = &st->pend;
    st->pend_failed = 0;
    st->npend = 0;
}

int store_commit_start(store_t *st)
{
    if (st->fly_busy)
        return 0; /* one transaction at a time; the caller starts the next after finish */
    if (!store_pending(st))
        return 0;
    st->fly = st->pend;
    st->fly_failed = st->pend_failed;
    st->fly_inject = 0;
    st->fly_delay_ms = st->inject_delay_ms;
    st->inject_delay_ms = 0;
    if (!st->fly_failed && st->inject_left > 0) {
        st->inject_left--;
        st->fly_inject = st->inject_code;
    }
    st->pend = NULL;
    st->pend_tail = &st->pend;
    st->pend_failed = 0;
    st->npend = 0;
    st->fly_busy = 1;
    return 1;
}

/* Step a bound write statement to completion. */
/* What the database would refuse (a missing name or id) fails the commit that carries it,
 * before anything is written: a checkpoint must never meet a row it cannot write. */
static const char *refused(const store_op_t *op)
{
    switch (op->kind) {
    case OP_PUT_SEM:
        return op->u.sem.name == NULL ? "cannot write a semaphore" : NULL;
    case OP_PUT_LEASE:
        return op->u.lease.id == NULL || op->u.lease.sem == NULL ? "cannot write a lease" : NULL;
    case OP_PUT_TICKET:
        return op->u.ticket.id == NULL || op->u.ticket.sem == NULL ? "cannot write a ticket" : NULL;
    case OP_PUT_FLOOR:
        return NULL;
    case OP_DEL_SEM:
        return op->u.name == NULL ? "cannot delete a semaphore" : NULL;
    case OP_DEL_TICKET:
        return op->u.name == NULL ? "cannot delete a ticket" : NULL;
    default:
        return op->u.name == NULL ? "cannot delete a lease" : NULL;
    }
}

/* Append the started transaction to the journal as one record (synced in strict). */
static int journal_commit(store_t *st, char *errbuf, size_t errlen)
{
    size_t need = JNL_RECORD_HEAD;
    uint32_t nops = 0;
    unsigned char *at;
    int err;

    for (const store_op_t *op = st->fly; op != NULL; op = op->next, nops++) {
        const char *why = refused(op);
        if (why != NULL) {
            store__msg(errbuf, errlen, "%s: %s: a required name or id is missing", st->path, why);
            return SEMA_EIO;
        }
        need += store__enc_size(op);
    }
    if (need > st->jcap) {
        size_t cap = need > 2 * st->jcap ? need : 2 * st->jcap;
        unsigned char *b = realloc(st->jbuf, cap);
        if (b == NULL) {
            store__msg(errbuf, errlen, "%s: out of memory writing the journal", st->path);
            return SEMA_EIO;
        }
        st->jbuf = b;
        st->jcap = cap;
    }
    at = st->jbuf + JNL_RECORD_HEAD;
    for (const store_op_t *op = st->fly; op != NULL; op = op->next)
        at = store__enc_op(at, op);
    err = jnl_append(st->jnl, st->jbuf, (size_t)(at - st->jbuf), nops,
                     st->durability == STORE_STRICT);
    if (err != 0) {
        store__msg(errbuf, errlen,
                   "%s/" STORE_JOURNAL_NAME
                   ": cannot write the journal (%s): the commit is rolled back",
                   st->dir,
                   err == ENOSPC || err == EDQUOT || err == EFBIG ? "disk full"
                   : err == EIO                                   ? "I/O error"
                                                                  : strerror(err));
        return SEMA_EIO;
    }
    return 0;
}

/* ---- the checkpoint set: what the journal holds, coalesced ----------------------------
 *
 * Only the last write of a lease or a ticket matters (a put writes the whole row, a delete
 * removes it), so a later one supersedes the earlier; a lease granted and ended between
 * two checkpoints is never written at all. Semaphores' puts supersede the put before them
 * only: a delete retires the name's fence and stays in its place. */
typedef struct {
    char cls; /* 'L' lease, 'T' ticket, 'S' semaphore */
    const char *name;
} ck_key_t;

static int op_key(const store_op_t *op, ck_key_t *k)
{
    switch (op->kind) {
    case OP_PUT_SEM:
        *k = (ck_key_t){'S', op->u.sem.name};
        return 1;
    case OP_DEL_SEM:
        *k = (ck_key_t){'S', op->u.name};
        return 1;
    case OP_PUT_LEASE:
        *k = (ck_key_t){'L', op->u.lease.id};
        return 1;
    case OP_DEL_LEASE:
        *k = (ck_key_t){'L', op->u.name};
        return 1;
    case OP_PUT_TICKET:
        *k = (ck_key_t){'T', op->u.ticket.id};
        return 1;
    case OP_DEL_TICKET:
        *k = (ck_key_t){'T', op->u.name};
        return 1;
    default:
        return 0;
    }
}

static int ck_eq(const enode_t *n, const void *key, size_t len)
{
    const store_op_t *op = ECONTAINER(n, store_op_t, hn);
    const ck_key_t *k = key;
    ck_key_t o;

    return op_key(op, &o) && o.cls == k->cls && strlen(o.name) == len &&
           memcmp(o.name, k->name, len) == 0;
}

static uint64_t ck_hash(const ck_key_t *k, size_t len)
{
    return etab_hash(k->name, len, (uint64_t)(unsigned char)k->cls);
}

static void ck_append(store_t *st, store_op_t *op)
{
    op->next = NULL;
    op->prev = st->ck_last;
    if (st->ck_last != NULL)
        st->ck_last->next = op;
    else
        st->ck = op;
    st->ck_last = op;
    st->ck_n++;
}

/* Take an op a later one superseded out of the set, and free it: no checkpoint would write
 * it. Freed now rather than at the checkpoint, so a lease's grant and release, the most
 * common pair, give their memory back within a commit or two. */
static void ck_drop(store_t *st, store_op_t *op)
{
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        st->ck = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    else
        st->ck_last = op->prev;
    free(op);
}

/* Add a committed op to the set (it takes the op). */
static void ck_add(store_t *st, store_op_t *op)
{
    ck_key_t k;
    size_t len;
    enode_t *n;

    if (op->kind == OP_PUT_FLOOR) {
        if (st->ck_floor != NULL) { /* fences only rise: keep the highest */
            if (op->u.fence > st->ck_floor->u.fence)
                st->ck_floor->u.fence = op->u.fence;
            free(op);
            return;
        }
        st->ck_floor = op;
        ck_append(st, op);
        return;
    }
    (void)op_key(op, &k);
    len = strlen(k.name);
    op->fresh = op->kind == OP_PUT_LEASE && op->u.lease.created;
    n = etab_find(&st->ck_keys, ck_hash(&k, len), ck_eq, &k, len);
    if (n != NULL) {
        store_op_t *prev = ECONTAINER(n, store_op_t, hn);
        /* A lease's or ticket's later op writes (or deletes) its whole row. A semaphore's
         * delete stays after the put before it, which carries the fence it retires. */
        int superseded = k.cls != 'S' || (prev->kind == OP_PUT_SEM && op->kind == OP_PUT_SEM);
        int ended_fresh = 0;
        etab_remove(&st->ck_keys, n);
        prev->keyed = 0;
        if (k.cls == 'S' && superseded && prev->u.sem.fence > op->u.sem.fence)
            op->u.sem.fence = prev->u.sem.fence; /* the row's fence only rises */
        if (k.cls == 'L' && prev->kind == OP_PUT_LEASE && prev->fresh) {
            ended_fresh = op->kind == OP_DEL_LEASE; /* granted and ended: neither is written */
            op->fresh = 1;
        }
        if (superseded)
            ck_drop(st, prev);
        if (ended_fresh) {
            free(op);
            return;
        }
    }
    op->hn.hash = ck_hash(&k, len);
    etab_insert(&st->ck_keys, &op->hn);
    op->keyed = 1;
    ck_append(st, op);
}

void store__ck_clear(store_t *st)
{
    store_op_t *op = st->ck;

    while (op != NULL) {
        store_op_t *next = op->next;
        if (op->keyed)
            etab_remove(&st->ck_keys, &op->hn);
        free(op);
        op = next;
    }
    st->ck = NULL;
    st->ck_last = NULL;
    st->ck_floor = NULL;
    st->ck_n = 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#define CK_MAX_OPS 32768u /* a checkpoint at least this often (ops, superseded included) */
#define CK_MAX_MS 1000u   /* ... and this often (ms) while the journal holds something */

static int checkpoint_due(const store_t *st)
{
    if (st->jnl == NULL || jnl_used(st->jnl) == 0)
        return 0;
    if (mono_ms() - st->ck_at >= CK_MAX_MS)
        return 1;
    /* After a failure, only the clock: the journal grows past its preallocation meanwhile. */
    return !st->ck_failing && (jnl_full(st->jnl) || st->ck_n >= CK_MAX_OPS);
}

/* Write the set to the database in one transaction (synced), then start the journal over.
 * On failure the set and the journal stay as they were, for the next try. */
int store__checkpoint(store_t *st, char *errbuf, size_t errlen)
{
    const char *doing = "cannot begin a checkpoint";
    int rc, err;

    st->ck_at = mono_ms();
    rc = store__run_write(st->q[Q_BEGIN]);
    for (const store_op_t *op = st->ck; rc == SQLITE_OK && op != NULL; op = op->next)
        rc = store__write_op(st, op, &doing);
    if (rc == SQLITE_OK) {
        doing = "checkpoint failed, rolled back";
        rc = store__run_write(st->q[Q_COMMIT]);
    }
    if (rc != SQLITE_OK) {
        (void)store__db_error(st->db, rc, st->path, doing, st->ck_err, sizeof st->ck_err);
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "%s", st->ck_err);
        store__rollback(st);
        st->ck_failures++;
        st->ck_failing = 1;
        return SEMA_EIO;
    }
    store__ck_clear(st);
    st->checkpoints++;
    st->ck_failing = 0;
    /* The database holds it all now; if the reset fails, the journal refuses records until
     * one succeeds (jnl_append), and a replay of what it holds changes nothing. */
    err = jnl_reset(st->jnl);
    if (err != 0) {
        store__msg(st->ck_err, sizeof st->ck_err,
                   "%s/" STORE_JOURNAL_NAME ": cannot start the journal over: %s", st->dir,
                   strerror(err));
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "%s", st->ck_err);
        return SEMA_EIO;
    }
    return 0;
}

/* Before reading the database: bring everything the journal holds into it. If that
 * checkpoint fails (a full disk, say), apply it in a transaction that the reader rolls back
 * (unsettle): *overlay is then 1. */
int store__settle(store_t *st, int *overlay, char *errbuf, size_t errlen)
{
    const char *doing = "cannot read the journal's changes";
    int rc;

    *overlay = 0;
    if (st->jnl == NULL || jnl_used(st->jnl) == 0 || store__checkpoint(st, errbuf, errlen) == 0)
        return 0;
    rc = store__run_write(st->q[Q_BEGIN]);
    for (const store_op_t *op = st->ck; rc == SQLITE_OK && op != NULL; op = op->next)
        rc = store__write_op(st, op, &doing);
    if (rc != SQLITE_OK) {
        store__rollback(st);
        return SEMA_EIO; /* with the checkpoint's message */
    }
    *overlay = 1;
    return 0;
}

void store__unsettle(store_t *st, int overlay)
{
    if (overlay)
        store__rollback(st);
}

int store_journal_apply(sqlite3 *db, const char *dir, uint64_t *records, uint64_t *ops,
                        uint64_t *gen, char *errbuf, size_t errlen)
{
    store_t *st = calloc(1, sizeof *st);
    int rc;

    *records = *ops = 0;
    if (st == NULL)
        return SEMA_ENOMEM;
    st->db = db;
    st->path = store__join_path(dir, STORE_DB_NAME);
    rc = st->path != NULL ? store__prepare_all(st, errbuf, errlen) : SEMA_ENOMEM;
    if (rc == 0 && (rc = store__run_write(st->q[Q_BEGIN])) != SQLITE_OK)
        rc = store__db_error(db, rc, st->path, "cannot begin", errbuf, errlen);
    if (rc == 0) {
        rc = jnl_scan(dir, store__replay_record, st, records, ops, gen, errbuf, errlen);
        if (rc == SEMA_ECORRUPT)
            store__msg(errbuf, errlen, "%s/" STORE_JOURNAL_NAME ": a record cannot be read", dir);
        if (rc == 0 && (rc = store__run_write(st->q[Q_COMMIT])) != SQLITE_OK)
            rc = store__db_error(db, rc, st->path, "cannot apply the journal", errbuf, errlen);
        if (rc != 0)
            store__rollback(st);
    }
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(st->q[i]);
    free(st->path);
    free(st);
    return rc;
}

/* At open: write what a crash left in the journal to the database, then start it over. */
int store__recover(store_t *st, char *errbuf, size_t errlen)
{
    int rc = store__run_write(st->q[Q_BEGIN]);

    if (rc != SQLITE_OK)
        return store__db_error(st->db, rc, st->path, "cannot begin the journal's replay", errbuf,
                               errlen);
    rc = jnl_replay(st->jnl, store__replay_record, st, errbuf, errlen);
    if (rc == SEMA_ECORRUPT)
        store__msg(errbuf, errlen,
                   "%s/" STORE_JOURNAL_NAME ": a record passed its checksum but cannot be read "
                   "(written by another build?): refusing to start rather than lose it",
                   st->dir);
    else if (rc == SEMA_EIO && !sqlite3_get_autocommit(st->db))
        (void)store__db_error(st->db, sqlite3_errcode(st->db), st->path,
                              "cannot replay the journal", errbuf, errlen);
    if (rc == 0) {
        rc = store__run_write(st->q[Q_COMMIT]);
        if (rc != SQLITE_OK)
            return store__db_error(st->db, rc, st->path, "cannot commit the journal's replay",
                                   errbuf, errlen);
    } else {
        store__rollback(st);
        return rc;
    }
    if (jnl_used(st->jnl) > 0) {
        int err = jnl_reset(st->jnl);
        if (err != 0) {
            store__msg(errbuf, errlen,
                       "%s/" STORE_JOURNAL_NAME ": cannot start the journal over: %s", st->dir,
                       strerror(err));
            return SEMA_EIO;
        }
    }
    st->ck_at = mono_ms();
    return 0;
}

int store_commit_run(store_t *st, char *errbuf, size_t errlen)
{
    int rc;

    if (st->fly_delay_ms > 0) {
        struct timespec ts = {st->fly_delay_ms / 1000, (long)(st->fly_delay_ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (st->fly_inject != 0) {
        store__msg(errbuf, errlen, "%s: commit failed (injected for a test)", st->path);
        return st->fly_inject;
    }
    /* Whatever failed (read-only, I/O error, disk full, even a record the store refused),
     * the engine sees one code: 503 store_unavailable; the message has the detail. */
    if (st->fly_failed) {
        store__msg(errbuf, errlen, "%s: out of memory recording a change", st->path);
        return SEMA_EIO;
    }
    rc = journal_commit(st, errbuf, errlen);
    if (rc != 0)
        return rc;
    /* Durable (strict) or written (relaxed): the database gets it at a checkpoint. */
    while (st->fly != NULL) {
        store_op_t *op = st->fly;
        st->fly = op->next;
        ck_add(st, op);
    }
    if (checkpoint_due(st)) /* if it fails, the journal holds it all and the next one tries */
        (void)store__checkpoint(st, NULL, 0);
    return 0;
}

int store_commit_slow(const store_t *st)
{
    return st->fly_delay_ms > 0 || checkpoint_due(st);
}

void store_commit_finish(store_t *st, int rc)
{
    free_ops(st->fly);
    st->fly = NULL;
    st->fly_busy = 0;
    if (rc == 0)
        st->commits++;
    else
        st->commit_fail++;
}

int store_commit(store_t *st, char *errbuf, size_t errlen)
{
    int rc;

    if (!store_commit_start(st))
        return 0;
    rc = store_commit_run(st, errbuf, errlen);
    store_commit_finish(st, rc);
    return rc;
}

int store_max_fence(store_t *st, uint64_t *fence)
{
    sqlite3_stmt *s = st->q[Q_MAX_FENCE];
    char ignored[256];
    int overlay, rc;

    *fence = 0;
    if (store__settle(st, &overlay, ignored, sizeof ignored) != 0)
        return SEMA_EIO;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *fence = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    store__unsettle(st, overlay);
    return rc == SQLITE_ROW ? 0 : store__map_rc(rc, &(const char *){NULL});
}

void store_inject_commit_delay(store_t *st, int ms)
{
    st->inject_delay_ms = ms;
}

void store_inject_commit_failures(store_t *st, int n, int code)
{
    st->inject_left = n;
    st->inject_code = code != 0 ? code : SEMA_EIO;
}

void store_stats(const store_t *st, uint64_t *commits, uint64_t *commit_failures)
{
    *commits = st != NULL ? st->commits : 0;
    *commit_failures = st != NULL ? st->commit_fail : 0;
}

void store_checkpoint_stats(const store_t *st, uint64_t *checkpoints, uint64_t *failures)
{
    *checkpoints = st != NULL ? st->checkpoints : 0;
    *failures = st != NULL ? st->ck_failures : 0;
}

int store_checkpoint_pending(const store_t *st)
{
    return st != NULL && st->jnl != NULL && jnl_used(st->jnl) > 0;
}

int store_checkpoint(store_t *st, char *errbuf, size_t errlen)
{
    return store_checkpoint_pending(st) ? store__checkpoint(st, errbuf, errlen) : 0;
}

const char *store_checkpoint_error(const store_t *st)
{
    return st != NULL ? st->ck_err : "";
}
