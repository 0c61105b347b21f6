/* SPDX-License-Identifier: MIT */
/* store_internal.h - the embedded store's private structures, shared by store_sqlite.c (the
 * database: opening, loading, writing rows) and store_commit.c (recording mutations, the
 * journal, the checkpoint set, commits). Never included outside src/store. */
#ifndef SEMAD_STORE_INTERNAL_H
#define SEMAD_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "common/table.h"
#include "store/store.h"
#include "store/store_journal.h"
#include "store/store_sqlite.h"

#define STORE_BUSY_MS 200 /* wait this long for a backup reader's checkpoint lock */

/* A recorded mutation and copies of its strings. */
enum {
    OP_PUT_SEM,
    OP_DEL_SEM,
    OP_PUT_LEASE,
    OP_DEL_LEASE,
    OP_PUT_FLOOR,
    OP_PUT_TICKET,
    OP_DEL_TICKET
};

typedef struct store_op {
    struct store_op *next;
    int kind;
    /* In the checkpoint set only (see ck_add): */
    struct store_op *prev; /* the one before it in ck, or NULL */
    enode_t hn;            /* in ck_keys while it is the latest mutation of its key */
    uint8_t keyed;         /* in ck_keys */
    uint8_t fresh; /* a lease's grant, or its later writes: no row of it is in the database */
    union {
        store_sem_t sem;
        store_lease_t lease;
        store_ticket_t ticket;
        const char *name; /* OP_DEL_SEM: the semaphore; OP_DEL_LEASE, OP_DEL_TICKET: the id */
        uint64_t fence;   /* OP_PUT_FLOOR */
    } u;
    char strings[];
} store_op_t;

enum {
    Q_BEGIN,
    Q_COMMIT,
    Q_ROLLBACK,
    Q_PUT_SEM,
    Q_RETIRE_SEM,
    Q_DEL_SEM,
    Q_PUT_LEASE,
    Q_DEL_LEASE,
    Q_MAX_FENCE,
    Q_PUT_FLOOR,
    Q_PUT_TICKET,
    Q_DEL_TICKET,
    Q_COUNT
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT]; /* prepared once, reset after every use */
    char *path;               /* DIR/sema.db, for messages */
    int lock_fd;              /* DIR/LOCK, flock()ed for the store's lifetime */
    store_durability_t durability;
    /* Owned by the loop thread: */
    store_op_t *pend;       /* mutations recorded since the last commit started, in order */
    store_op_t **pend_tail; /* where the next one goes */
    int pend_failed;        /* one could not be recorded: the commit carrying them fails */
    uint64_t npend;         /* how many are recorded */
    int fly_busy;           /* a transaction was started and not finished */
    /* The started transaction: set by store_commit_start, read by store_commit_run (on
     * the committing thread), freed by store_commit_finish; nobody else touches them or
     * `db` meanwhile. */
    store_op_t *fly;
    int fly_failed;
    int fly_inject;       /* the injected failure code for this commit, or 0 */
    int fly_delay_ms;     /* the injected delay for this commit */
    int inject_left;      /* test hook: this many more commits fail */
    int inject_delay_ms;  /* test hook: the next commit first sleeps this long */
    int inject_code;      /* ... with this code */
    uint64_t commits;     /* successful commits, for metrics */
    uint64_t commit_fail; /* failed commits */
    /* The journal and the checkpoint set: touched by the committing thread during a commit,
     * by the loop thread otherwise (one commit at a time). */
    jnl_t *jnl;
    unsigned char *jbuf; /* a record being encoded */
    size_t jcap;
    store_op_t *ck;       /* what the journal holds and the database not yet, in order */
    store_op_t *ck_last;  /* the last one in ck, or NULL */
    store_op_t *ck_floor; /* the fence floor in ck, kept at its highest */
    etab_t ck_keys;       /* lease id, ticket id or semaphore name -> its latest op in ck */
    uint64_t ck_n;        /* ops added to ck since the last checkpoint, superseded ones included */
    uint64_t ck_at;       /* uv-independent monotonic ms of the last checkpoint */
    uint64_t checkpoints; /* successful checkpoints, for metrics */
    uint64_t ck_failures; /* failed ones */
    int ck_failing;       /* the last one failed: the next waits CK_MAX_MS */
    char ck_err[256];     /* ... and why */
    int opened;           /* store_open succeeded: the checkpoint set holds what the journal does */
    char *dir;            /* the data directory, for messages */
};

/* ---- store_sqlite.c: the database ---- */

int store__db_error(sqlite3 *db, int rc, const char *path, const char *doing, char *errbuf,
                    size_t errlen);
char *store__join_path(const char *dir, const char *name);
int store__map_rc(int rc, const char **what);
void store__msg(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int store__prepare_all(store_t *st, char *errbuf, size_t errlen);
void store__rollback(store_t *st);
int store__run_write(sqlite3_stmt *s);
int store__write_op(store_t *st, const store_op_t *op, const char **doing);

/* ---- store_record.c: journal records ---- */

/* The bytes store__enc_op writes at most for op; it writes them at `at` and returns the end. */
size_t store__enc_size(const store_op_t *op);
unsigned char *store__enc_op(unsigned char *at, const store_op_t *op);
/* jnl_replay's callback: write each mutation of a record to the database (in the open
 * transaction); 0, SEMA_ECORRUPT, SEMA_ENOMEM or SEMA_EIO. */
int store__replay_record(void *arg, const unsigned char *body, size_t len, uint32_t nops);

/* ---- store_commit.c: the journal and the checkpoint set ---- */

int store__checkpoint(store_t *st, char *errbuf, size_t errlen);
void store__ck_clear(store_t *st);
int store__recover(store_t *st, char *errbuf, size_t errlen);
int store__settle(store_t *st, int *overlay, char *errbuf, size_t errlen);
void store__unsettle(store_t *st, int overlay);

#endif /* SEMAD_STORE_INTERNAL_H */
