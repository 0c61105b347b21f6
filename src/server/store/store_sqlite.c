/* SPDX-License-Identifier: MIT */
/* store_sqlite.c - semad's embedded durable store: one SQLite database in WAL mode per
 * data directory, behind a journal (store_journal.c) that every group commit appends to
 * ahead of its replies; checkpoints write the journal's coalesced changes to the database. */
#include "store/store.h"

#include <errno.h>
#include <time.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "engine/table.h"
#include "sema/error.h"
#include "store/store_journal.h"
#include "store/store_sqlite.h"

#define STORE_BUSY_MS 200 /* wait this long for a backup reader's checkpoint lock */

/* The schema of the oldest format; `migrations` brings it to STORE_FORMAT. */
static const char schema_sql[] =
    "CREATE TABLE semaphores("
    " name TEXT PRIMARY KEY NOT NULL,"
    " capacity INTEGER NOT NULL,"
    " available INTEGER NOT NULL,"
    " fence INTEGER NOT NULL,"
    " legacy INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE leases("
    " id TEXT PRIMARY KEY NOT NULL,"
    " sem TEXT NOT NULL,"
    " weight INTEGER NOT NULL,"
    " owner TEXT,"
    " idem_key TEXT,"
    " fence INTEGER NOT NULL,"
    " ttl_ms INTEGER NOT NULL,"
    " acquired_at INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL,"
    " is_lock INTEGER NOT NULL) WITHOUT ROWID;"
    /* The last fence of every deleted semaphore, so a recreated name can go on counting. */
    "CREATE TABLE retired(name TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL) WITHOUT ROWID;";

/* What each format adds to the one before: run in one transaction with the version. */
static const char *const migrations[STORE_FORMAT + 1] = {
    [2] = "ALTER TABLE leases ADD COLUMN principal TEXT;", /* the token that took it (--auth) */
    [3] = "CREATE TABLE tickets("
          " id TEXT PRIMARY KEY NOT NULL,"
          " sem TEXT NOT NULL,"
          " seq INTEGER NOT NULL,"
          " weight INTEGER NOT NULL,"
          " owner TEXT,"
          " idem_key TEXT,"
          " lease_id TEXT,"
          " ttl_ms INTEGER NOT NULL,"
          " keepalive_ms INTEGER NOT NULL,"
          " created_at INTEGER NOT NULL,"
          " collected INTEGER NOT NULL,"
          " principal TEXT) WITHOUT ROWID;", /* principal: the token that took it (--auth) */
};

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

static const char *const query_sql[Q_COUNT] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_PUT_SEM] = "INSERT INTO semaphores(name, capacity, available, fence, legacy, created_at)"
                  " VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(name) DO UPDATE SET"
                  " capacity = excluded.capacity, available = excluded.available,"
                  " fence = max(fence, excluded.fence), legacy = excluded.legacy",
    [Q_RETIRE_SEM] = "INSERT INTO retired(name, fence) SELECT name, fence FROM semaphores"
                     " WHERE name = ?1 ON CONFLICT(name) DO UPDATE SET"
                     " fence = max(fence, excluded.fence)",
    [Q_DEL_SEM] = "DELETE FROM semaphores WHERE name = ?1",
    [Q_PUT_LEASE] = "INSERT INTO leases(id, sem, weight, owner, idem_key, fence, ttl_ms,"
                    " acquired_at, expires_at, is_lock, principal) VALUES(?1, ?2, ?3, ?4, ?5,"
                    " ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT(id) DO UPDATE SET sem = excluded.sem,"
                    " weight = excluded.weight, owner = excluded.owner,"
                    " idem_key = excluded.idem_key, fence = excluded.fence,"
                    " ttl_ms = excluded.ttl_ms, acquired_at = excluded.acquired_at,"
                    " expires_at = excluded.expires_at, is_lock = excluded.is_lock,"
                    " principal = excluded.principal",
    [Q_DEL_LEASE] = "DELETE FROM leases WHERE id = ?1",
    [Q_MAX_FENCE] = "SELECT max(coalesce((SELECT max(fence) FROM semaphores), 0),"
                    " coalesce((SELECT max(fence) FROM retired), 0),"
                    " coalesce((SELECT max(fence) FROM leases), 0))",
    /* The fence floor: the row of the name '' (no semaphore has it) in `retired`. */
    [Q_PUT_FLOOR] = ("INSERT INTO retired(name, fence) VALUES('', ?1) ON CONFLICT(name)"
                     " DO UPDATE SET fence = max(fence, excluded.fence)"),
    [Q_PUT_TICKET] = "INSERT OR REPLACE INTO tickets(id, sem, seq, weight, owner, idem_key,"
                     " lease_id, ttl_ms, keepalive_ms, created_at, collected, principal)"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [Q_DEL_TICKET] = "DELETE FROM tickets WHERE id = ?1",
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

/* The journal's side of opening, reading and closing (defined with the journal below). */
static int recover(store_t *st, char *errbuf, size_t errlen);
static int settle(store_t *st, int *overlay, char *errbuf, size_t errlen);
static void unsettle(store_t *st, int overlay);
static int checkpoint(store_t *st, char *errbuf, size_t errlen);
static void ck_clear(store_t *st);

/* ---- messages and error codes ------------------------------------------------------- */

static void msg(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void msg(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (errbuf == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

/* SQLite primary result codes and what they mean for semad. */
static const struct {
    int rc;
    int code;
    const char *what;
} rc_table[] = {
    {SQLITE_NOTADB, SEMA_ECORRUPT, "not a database (corrupt or not a sema store)"},
    {SQLITE_CORRUPT, SEMA_ECORRUPT, "database is corrupt"},
    {SQLITE_FULL, SEMA_EIO, "disk full"},
    {SQLITE_IOERR, SEMA_EIO, "I/O error"},
    {SQLITE_READONLY, SEMA_EACCES, "read-only"},
    {SQLITE_PERM, SEMA_EACCES, "permission denied"},
    {SQLITE_AUTH, SEMA_EACCES, "permission denied"},
    {SQLITE_CANTOPEN, SEMA_EACCES, "cannot open"},
    {SQLITE_NOMEM, SEMA_ENOMEM, "out of memory"},
    {SQLITE_BUSY, SEMA_EIO, "locked by another process"},
    {SQLITE_LOCKED, SEMA_EIO, "locked"},
    {SQLITE_TOOBIG, SEMA_EINVAL, "value too big"},
    {SQLITE_CONSTRAINT, SEMA_EINVAL, "constraint failed"},
    {SQLITE_MISMATCH, SEMA_EINVAL, "type mismatch"},
};

static int map_rc(int rc, const char **what)
{
    for (size_t i = 0; i < sizeof rc_table / sizeof rc_table[0]; i++) {
        if (rc_table[i].rc == (rc & 0xff)) {
            *what = rc_table[i].what;
            return rc_table[i].code;
        }
    }
    *what = "database error";
    return SEMA_EIO;
}

/* Turn an SQLite failure into a SEMA_E* code and a message naming the file. */
static int db_error(sqlite3 *db, int rc, const char *path, const char *doing, char *errbuf,
                    size_t errlen)
{
    const char *what;
    int code = map_rc(rc, &what);
    int sys = db != NULL ? sqlite3_system_errno(db) : 0;

    msg(errbuf, errlen, "%s: %s: %s (%s%s%s)", path, doing, what,
        db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc), sys != 0 ? "; " : "",
        sys != 0 ? strerror(sys) : "");
    if (code == SEMA_EACCES && sys != 0 && sys != EACCES && sys != EPERM && sys != EROFS)
        code = SEMA_EIO;
    return code;
}

static int errno_code(int err)
{
    return err == EACCES || err == EPERM || err == EROFS ? SEMA_EACCES : SEMA_EIO;
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);

    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- the data directory and its lock file ------------------------------------------- */

/* mkdir -p with mode 0700 for the directories it creates. */
static int make_dir(const char *dir, char *errbuf, size_t errlen)
{
    char *p = strdup(dir);
    struct stat sb;
    int rc = 0;

    if (p == NULL)
        return SEMA_ENOMEM;
    for (char *s = p + 1; rc == 0; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            msg(errbuf, errlen, "%s: cannot create the data directory: %s", p, strerror(errno));
            rc = errno_code(errno);
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    if (rc == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        msg(errbuf, errlen, "%s: not a directory", dir);
        rc = SEMA_EIO;
    }
    return rc;
}

/* The pid written in a lock file, or 0. */
static long lock_holder(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);

    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

/* Take DIR/LOCK (flock, exclusive, never waiting) and write our pid into it. */
static int take_lock(const char *dir, int *out_fd, char *errbuf, size_t errlen)
{
    char *path = join_path(dir, STORE_LOCK_NAME);
    char pid[32];
    int fd, n, rc = 0;

    if (path == NULL)
        return SEMA_ENOMEM;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        msg(errbuf, errlen, "%s: cannot open the lock file: %s", path, strerror(errno));
        rc = errno_code(errno);
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            msg(errbuf, errlen,
                "%s: the data directory is in use by another semad (pid %ld); stop it or use "
                "another --data directory",
                path, lock_holder(fd));
            rc = SEMA_EBUSY;
        } else {
            msg(errbuf, errlen, "%s: cannot lock: %s", path, strerror(errno));
            rc = SEMA_EIO;
        }
    } else {
        n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
            msg(errbuf, errlen, "%s: cannot write the lock file: %s", path, strerror(errno));
            rc = errno_code(errno);
        }
    }
    if (rc != 0 && fd >= 0)
        close(fd);
    free(path);
    *out_fd = rc == 0 ? fd : -1;
    return rc;
}

/* ---- opening ------------------------------------------------------------------------- */

/* Run `sql` that returns one integer (a pragma, a count). */
static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
}

/* Run `sql` that returns one text row; copy it into buf. */
static int query_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

    if (rc != SQLITE_OK)
        return rc;
    buf[0] = '\0';
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        snprintf(buf, len, "%s", t != NULL ? (const char *)t : "");
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
}

/* Create the schema in a new, empty database. */
static int create_schema(store_t *st, char *errbuf, size_t errlen)
{
    char sql[sizeof schema_sql + 2048];
    size_t n = (size_t)snprintf(sql, sizeof sql, "BEGIN; %s ", schema_sql);
    int rc;

    for (int v = STORE_FORMAT_OLDEST + 1; v <= STORE_FORMAT; v++)
        n += (size_t)snprintf(sql + n, sizeof sql - n, "%s ", migrations[v]);
    snprintf(sql + n, sizeof sql - n,
             "PRAGMA application_id = %d; PRAGMA user_version = %d; COMMIT;", STORE_APP_ID,
             STORE_FORMAT);
    rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        int code = db_error(st->db, rc, st->path, "cannot create the schema", errbuf, errlen);
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return code;
    }
    return 0;
}

/* Bring a store of an older format up to STORE_FORMAT, in one transaction. */
static int migrate(store_t *st, int64_t ver, char *errbuf, size_t errlen)
{
    char sql[2048];
    size_t n = (size_t)snprintf(sql, sizeof sql, "BEGIN; ");
    int rc;

    for (int64_t v = ver + 1; v <= STORE_FORMAT; v++)
        n += (size_t)snprintf(sql + n, sizeof sql - n, "%s ", migrations[v]);
    snprintf(sql + n, sizeof sql - n, "PRAGMA user_version = %d; COMMIT;", STORE_FORMAT);
    rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        int code =
            db_error(st->db, rc, st->path, "cannot upgrade the store format", errbuf, errlen);
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return code;
    }
    return 0;
}

/* Is this file ours and of our format? Creates the schema in an empty database, and
 * upgrades an older format. */
static int check_format(store_t *st, char *errbuf, size_t errlen)
{
    int64_t app = 0, ver = 0, objects = 0;
    int rc = query_int(st->db, "PRAGMA application_id", &app);

    if (rc == SQLITE_OK)
        rc = query_int(st->db, "PRAGMA user_version", &ver);
    if (rc == SQLITE_OK)
        rc = query_int(st->db, "SELECT count(*) FROM sqlite_master", &objects);
    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot read the header", errbuf, errlen);
    if (app == 0 && ver == 0 && objects == 0)
        return create_schema(st, errbuf, errlen);
    if (app != STORE_APP_ID) {
        msg(errbuf, errlen,
            "%s: an SQLite database but not a sema store (application_id %" PRId64 ")", st->path,
            app);
        return SEMA_ECORRUPT;
    }
    if (ver >= STORE_FORMAT_OLDEST && ver < STORE_FORMAT)
        return migrate(st, ver, errbuf, errlen);
    if (ver != STORE_FORMAT) {
        msg(errbuf, errlen,
            "%s: store format version %" PRId64 ", this semad reads version %d only%s", st->path,
            ver, STORE_FORMAT, ver > STORE_FORMAT ? " (written by a newer semad)" : "");
        return SEMA_EVERSION;
    }
    return 0;
}

/* PRAGMA quick_check: a cheap structural check before we trust the file. */
static int quick_check(store_t *st, char *errbuf, size_t errlen)
{
    char result[200];
    int rc = query_text(st->db, "PRAGMA quick_check(1)", result, sizeof result);

    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "integrity check failed", errbuf, errlen);
    if (strcmp(result, "ok") != 0) {
        for (char *c = result; *c != '\0'; c++)
            *c = *c == '\n' ? ' ' : *c;
        msg(errbuf, errlen, "%s: database is corrupt (quick_check: %s); see docs/durability.md",
            st->path, result);
        return SEMA_ECORRUPT;
    }
    return 0;
}

static int set_pragmas(store_t *st, char *errbuf, size_t errlen)
{
    char mode[16], sql[160];
    int rc = query_text(st->db, "PRAGMA journal_mode = WAL", mode, sizeof mode);

    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot switch to WAL mode", errbuf, errlen);
    if (strcmp(mode, "wal") != 0) {
        msg(errbuf, errlen, "%s: cannot switch to WAL mode (journal_mode is %s)", st->path, mode);
        return SEMA_EIO;
    }
    /* The database is written only by checkpoints (and the journal's replay), which must be
     * durable before the journal starts over: FULL, in both modes. */
    snprintf(sql, sizeof sql,
             "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = 67108864;"
             " PRAGMA cache_size = -32768; PRAGMA temp_store = MEMORY;");
    rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot configure", errbuf, errlen);
    sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
    return 0;
}

static int prepare_all(store_t *st, char *errbuf, size_t errlen)
{
    for (int i = 0; i < Q_COUNT; i++) {
        int rc = sqlite3_prepare_v3(st->db, query_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->q[i],
                                    NULL);
        if (rc != SQLITE_OK)
            return db_error(st->db, rc, st->path, "cannot prepare statements", errbuf, errlen);
    }
    return 0;
}

/* fsync the directory holding `path`, so a file just created there stays after a crash. */
static int sync_parent(const char *path, char *errbuf, size_t errlen)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int fd, rc = 0;

    snprintf(dir, sizeof dir, "%.*s", slash != NULL ? (int)(slash - path) : 1,
             slash != NULL ? path : ".");
    fd = open(dir[0] != '\0' ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        msg(errbuf, errlen, "%s: cannot sync the directory: %s", dir, strerror(errno));
        rc = SEMA_EIO;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Create DIR/sema.db with mode 0600 if it does not exist (SQLite would use 0644). */
static int touch_db(const char *path, char *errbuf, size_t errlen)
{
    char wal[PATH_MAX];
    struct stat db, log;
    int fd;

    /* A write-ahead log without its database is a store that lost its main file: SQLite
     * would replay the log into a new, empty file and start with part of the state. */
    snprintf(wal, sizeof wal, "%s-wal", path);
    if ((stat(path, &db) != 0 || db.st_size == 0) && stat(wal, &log) == 0 && log.st_size > 0) {
        msg(errbuf, errlen,
            "%s: missing or empty, but its write-ahead log %s exists: restore the database "
            "file (see docs/durability.md) or move the log away to start empty",
            path, wal);
        return SEMA_ECORRUPT;
    }
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        return sync_parent(path, errbuf, errlen); /* the new name survives a power loss */
    }
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        msg(errbuf, errlen, "%s: cannot open: %s", path, strerror(errno));
        return errno_code(errno);
    }
    close(fd);
    return 0;
}

/* Stores written before the lease index was dropped have it: every grant and release paid
 * for its upkeep, and nothing reads it (a semaphore's leases are deleted by id). */
static int drop_old_index(store_t *st, char *errbuf, size_t errlen)
{
    int rc = sqlite3_exec(st->db, "DROP INDEX IF EXISTS leases_by_sem", NULL, NULL, NULL);

    return rc == SQLITE_OK ? 0
                           : db_error(st->db, rc, st->path, "cannot drop an index", errbuf, errlen);
}

static int open_db(store_t *st, char *errbuf, size_t errlen)
{
    int rc = touch_db(st->path, errbuf, errlen);

    if (rc != 0)
        return rc;
    rc = sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot open", errbuf, errlen);
    sqlite3_extended_result_codes(st->db, 1);
    rc = check_format(st, errbuf, errlen);
    if (rc == 0)
        rc = quick_check(st, errbuf, errlen);
    if (rc == 0)
        rc = set_pragmas(st, errbuf, errlen);
    if (rc == 0)
        rc = drop_old_index(st, errbuf, errlen);
    if (rc == 0)
        rc = prepare_all(st, errbuf, errlen);
    return rc;
}

int store_open(store_t **out, const char *dir, store_durability_t durability, char *errbuf,
               size_t errlen)
{
    store_t *st;
    int rc;

    *out = NULL;
    if (dir == NULL || dir[0] == '\0' || durability == STORE_NONE) {
        msg(errbuf, errlen, "store_open: a data directory and strict or relaxed durability");
        return SEMA_EINVAL;
    }
    st = calloc(1, sizeof *st);
    if (st == NULL)
        return SEMA_ENOMEM;
    st->lock_fd = -1;
    st->durability = durability;
    st->pend_tail = &st->pend;
    st->path = join_path(dir, STORE_DB_NAME);
    st->dir = strdup(dir);
    rc = st->path != NULL && st->dir != NULL && etab_init(&st->ck_keys, 64) == 0
             ? make_dir(dir, errbuf, errlen)
             : SEMA_ENOMEM;
    if (rc == 0)
        rc = take_lock(dir, &st->lock_fd, errbuf, errlen);
    if (rc == 0)
        rc = open_db(st, errbuf, errlen);
    if (rc == 0)
        rc = jnl_open(&st->jnl, dir, errbuf, errlen);
    if (rc == 0)
        rc = recover(st, errbuf, errlen);
    if (rc != 0) {
        store_close(st);
        return rc;
    }
    st->opened = 1;
    *out = st;
    return 0;
}

store_durability_t store_durability(const store_t *st)
{
    return st->durability;
}

static void rollback(store_t *st)
{
    /* After SQLITE_FULL or an I/O error SQLite may have rolled back already. */
    if (!sqlite3_get_autocommit(st->db)) {
        sqlite3_step(st->q[Q_ROLLBACK]);
        sqlite3_reset(st->q[Q_ROLLBACK]);
    }
}

void store_close(store_t *st)
{
    if (st == NULL)
        return;
    store_discard_pending(st); /* uncommitted mutations were never acknowledged */
    /* A last checkpoint, once opened: before that (a replay that failed, say) the journal
     * holds what the checkpoint set does not, and must stay for the next start. If it
     * fails, the next start replays the journal. */
    if (st->opened && jnl_used(st->jnl) > 0)
        (void)checkpoint(st, NULL, 0);
    ck_clear(st);
    if (st->ck_keys.slots != NULL)
        etab_destroy(&st->ck_keys);
    jnl_close(st->jnl);
    free(st->jbuf);
    free(st->dir);
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(st->q[i]);
    sqlite3_close(st->db);
    if (st->lock_fd >= 0)
        close(st->lock_fd); /* releases the flock */
    free(st->path);
    free(st);
}

/* ---- loading ------------------------------------------------------------------------- */

static const char *col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

static int load_sems(store_t *st, void (*on_sem)(void *, const store_sem_t *), void *arg)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT name, capacity, available, fence, legacy, created_at"
                                " FROM semaphores ORDER BY name",
                                -1, &s, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        store_sem_t sem = {
            .name = col_text(s, 0),
            .capacity = (uint64_t)sqlite3_column_int64(s, 1),
            .available = sqlite3_column_int64(s, 2),
            .fence = (uint64_t)sqlite3_column_int64(s, 3),
            .legacy = sqlite3_column_int(s, 4),
            .created_at_ms = sqlite3_column_int64(s, 5),
        };
        if (sem.name != NULL && on_sem != NULL)
            on_sem(arg, &sem);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int load_leases(store_t *st, void (*on_lease)(void *, const store_lease_t *), void *arg)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT id, sem, weight, owner, idem_key, fence, ttl_ms,"
                                " acquired_at, expires_at, is_lock, principal FROM leases"
                                " ORDER BY is_lock, sem, fence",
                                -1, &s, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        store_lease_t l = {
            .id = col_text(s, 0),
            .sem = col_text(s, 1),
            .weight = (uint64_t)sqlite3_column_int64(s, 2),
            .owner = col_text(s, 3),
            .idem_key = col_text(s, 4),
            .fence = (uint64_t)sqlite3_column_int64(s, 5),
            .ttl_ms = sqlite3_column_int64(s, 6),
            .acquired_at_ms = sqlite3_column_int64(s, 7),
            .expires_at_ms = sqlite3_column_int64(s, 8),
            .is_lock = sqlite3_column_int(s, 9),
            .principal = col_text(s, 10),
        };
        if (l.id != NULL && l.sem != NULL && on_lease != NULL)
            on_lease(arg, &l);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_load(store_t *st, void (*on_sem)(void *arg, const store_sem_t *sem),
               void (*on_lease)(void *arg, const store_lease_t *lease), void *arg, char *errbuf,
               size_t errlen)
{
    int overlay, rc = settle(st, &overlay, errbuf, errlen);

    if (rc != 0)
        return rc;
    rc = load_sems(st, on_sem, arg);
    if (rc == SQLITE_OK)
        rc = load_leases(st, on_lease, arg);
    unsettle(st, overlay);
    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot load", errbuf, errlen);
    return 0;
}

static int load_tickets(store_t *st, void (*on_ticket)(void *, const store_ticket_t *), void *arg)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT id, sem, seq, weight, owner, idem_key, lease_id, ttl_ms,"
                                " keepalive_ms, created_at, collected, principal FROM tickets"
                                " ORDER BY sem, seq",
                                -1, &s, NULL);

    if (rc != SQLITE_OK)
        return rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        store_ticket_t t = {
            .id = col_text(s, 0),
            .sem = col_text(s, 1),
            .seq = (uint64_t)sqlite3_column_int64(s, 2),
            .weight = (uint64_t)sqlite3_column_int64(s, 3),
            .owner = col_text(s, 4),
            .idem_key = col_text(s, 5),
            .lease_id = col_text(s, 6),
            .ttl_ms = sqlite3_column_int64(s, 7),
            .keepalive_ms = sqlite3_column_int64(s, 8),
            .created_at_ms = sqlite3_column_int64(s, 9),
            .collected = sqlite3_column_int(s, 10),
            .principal = col_text(s, 11),
        };
        if (t.id != NULL && t.sem != NULL && on_ticket != NULL)
            on_ticket(arg, &t);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_load_tickets(store_t *st, void (*on_ticket)(void *arg, const store_ticket_t *t),
                       void *arg, char *errbuf, size_t errlen)
{
    int overlay, rc = settle(st, &overlay, errbuf, errlen);

    if (rc != 0)
        return rc;
    rc = load_tickets(st, on_ticket, arg);
    unsettle(st, overlay);
    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot load the tickets", errbuf, errlen);
    return 0;
}

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
    store_op_t *op = op_new(OP_PUT_LEASE, str_size(l->id) + str_size(l->sem) + str_size(l->owner) +
                                              str_size(l->idem_key) + str_size(l->principal));

    if (op != NULL) {
        char *at = op->strings;
        op->u.lease = *l;
        op->u.lease.id = op_str(&at, l->id);
        op->u.lease.sem = op_str(&at, l->sem);
        op->u.lease.owner = op_str(&at, l->owner);
        op->u.lease.idem_key = op_str(&at, l->idem_key);
        op->u.lease.principal = op_str(&at, l->principal);
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
                                               str_size(t->principal));

    if (op != NULL) {
        char *at = op->strings;
        op->u.ticket = *t;
        op->u.ticket.id = op_str(&at, t->id);
        op->u.ticket.sem = op_str(&at, t->sem);
        op->u.ticket.owner = op_str(&at, t->owner);
        op->u.ticket.idem_key = op_str(&at, t->idem_key);
        op->u.ticket.lease_id = op_str(&at, t->lease_id);
        op->u.ticket.principal = op_str(&at, t->principal);
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
static int run_write(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);

    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void bind_text(sqlite3_stmt *s, int i, const char *t)
{
    if (t != NULL)
        sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

static int write_sem(store_t *st, const store_sem_t *sem)
{
    sqlite3_stmt *s = st->q[Q_PUT_SEM];

    bind_text(s, 1, sem->name);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)sem->capacity);
    sqlite3_bind_int64(s, 3, sem->available);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)sem->fence);
    sqlite3_bind_int(s, 5, sem->legacy != 0);
    sqlite3_bind_int64(s, 6, sem->created_at_ms);
    return run_write(s);
}

static int write_del_sem(store_t *st, const char *name)
{
    /* Its leases were deleted one by one before (the engine records each). */
    static const int steps[] = {Q_RETIRE_SEM, Q_DEL_SEM};
    int rc = SQLITE_OK;

    for (size_t i = 0; rc == SQLITE_OK && i < sizeof steps / sizeof steps[0]; i++) {
        bind_text(st->q[steps[i]], 1, name);
        rc = run_write(st->q[steps[i]]);
    }
    return rc;
}

static int write_lease(store_t *st, const store_lease_t *l)
{
    sqlite3_stmt *s = st->q[Q_PUT_LEASE];

    bind_text(s, 1, l->id);
    bind_text(s, 2, l->sem);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)l->weight);
    bind_text(s, 4, l->owner);
    bind_text(s, 5, l->idem_key);
    sqlite3_bind_int64(s, 6, (sqlite3_int64)l->fence);
    sqlite3_bind_int64(s, 7, l->ttl_ms);
    sqlite3_bind_int64(s, 8, l->acquired_at_ms);
    sqlite3_bind_int64(s, 9, l->expires_at_ms);
    sqlite3_bind_int(s, 10, l->is_lock);
    bind_text(s, 11, l->principal);
    return run_write(s);
}

static int write_ticket(store_t *st, const store_ticket_t *t)
{
    sqlite3_stmt *s = st->q[Q_PUT_TICKET];

    bind_text(s, 1, t->id);
    bind_text(s, 2, t->sem);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)t->seq);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)t->weight);
    bind_text(s, 5, t->owner);
    bind_text(s, 6, t->idem_key);
    bind_text(s, 7, t->lease_id);
    sqlite3_bind_int64(s, 8, t->ttl_ms);
    sqlite3_bind_int64(s, 9, t->keepalive_ms);
    sqlite3_bind_int64(s, 10, t->created_at_ms);
    sqlite3_bind_int(s, 11, t->collected != 0);
    bind_text(s, 12, t->principal);
    return run_write(s);
}

static int write_op(store_t *st, const store_op_t *op, const char **doing)
{
    switch (op->kind) {
    case OP_PUT_TICKET:
        *doing = "cannot write a ticket";
        return write_ticket(st, &op->u.ticket);
    case OP_DEL_TICKET:
        *doing = "cannot delete a ticket";
        bind_text(st->q[Q_DEL_TICKET], 1, op->u.name);
        return run_write(st->q[Q_DEL_TICKET]);
    case OP_PUT_SEM:
        *doing = "cannot write a semaphore";
        return write_sem(st, &op->u.sem);
    case OP_DEL_SEM:
        *doing = "cannot delete a semaphore";
        return write_del_sem(st, op->u.name);
    case OP_PUT_LEASE:
        *doing = "cannot write a lease";
        return write_lease(st, &op->u.lease);
    case OP_PUT_FLOOR:
        *doing = "cannot write the fence floor";
        sqlite3_bind_int64(st->q[Q_PUT_FLOOR], 1, (sqlite3_int64)op->u.fence);
        return run_write(st->q[Q_PUT_FLOOR]);
    default:
        *doing = "cannot delete a lease";
        bind_text(st->q[Q_DEL_LEASE], 1, op->u.name);
        return run_write(st->q[Q_DEL_LEASE]);
    }
}

/* ---- the journal: encoding a commit's mutations ------------------------------------- */

/* A record's body is its mutations one after the other: a kind byte, then the fields in a
 * fixed order per kind; integers as 8 bytes, strings as a 4-byte length plus one (0 for
 * NULL) and their bytes. */
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

/* The bytes enc_op writes at most for op (strings' lengths plus a bound for the rest). */
static size_t enc_size(const store_op_t *op)
{
    size_t n = 1 + 12 * 8 + 6 * 4;

    switch (op->kind) {
    case OP_PUT_SEM:
        return n + str_size(op->u.sem.name);
    case OP_PUT_LEASE:
        return n + str_size(op->u.lease.id) + str_size(op->u.lease.sem) +
               str_size(op->u.lease.owner) + str_size(op->u.lease.idem_key) +
               str_size(op->u.lease.principal);
    case OP_PUT_TICKET:
        return n + str_size(op->u.ticket.id) + str_size(op->u.ticket.sem) +
               str_size(op->u.ticket.owner) + str_size(op->u.ticket.idem_key) +
               str_size(op->u.ticket.lease_id) + str_size(op->u.ticket.principal);
    case OP_PUT_FLOOR:
        return n;
    default:
        return n + str_size(op->u.name);
    }
}

static void enc_op(enc_t *w, const store_op_t *op)
{
    *w->p++ = (unsigned char)op->kind;
    switch (op->kind) {
    case OP_PUT_SEM:
        enc_str(w, op->u.sem.name);
        enc_u64(w, op->u.sem.capacity);
        enc_u64(w, (uint64_t)op->u.sem.available);
        enc_u64(w, op->u.sem.fence);
        enc_u64(w, (uint64_t)op->u.sem.legacy);
        enc_u64(w, (uint64_t)op->u.sem.created_at_ms);
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
        break;
    case OP_PUT_FLOOR:
        enc_u64(w, op->u.fence);
        break;
    default: /* OP_DEL_SEM, OP_DEL_LEASE, OP_DEL_TICKET */
        enc_str(w, op->u.name);
        break;
    }
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

static int write_op(store_t *st, const store_op_t *op, const char **doing);

/* jnl_replay's callback: write each mutation of a record to the database (in the open
 * transaction). */
static int replay_record(void *arg, const unsigned char *body, size_t len, uint32_t nops)
{
    store_t *st = arg;
    dec_t r = {body, body + len, 0};
    /* Strings are copied out with their NULs: never more bytes than the body. */
    char *heap = malloc(len + 1);
    store_op_t op;
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
        op.kind = *r.p++;
        switch (op.kind) {
        case OP_PUT_SEM:
            op.u.sem.name = dec_str(&r, &h, he);
            op.u.sem.capacity = dec_u64(&r);
            op.u.sem.available = (int64_t)dec_u64(&r);
            op.u.sem.fence = dec_u64(&r);
            op.u.sem.legacy = (int)dec_u64(&r);
            op.u.sem.created_at_ms = (int64_t)dec_u64(&r);
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
            rc = write_op(st, &op, &doing);
    }
    free(heap);
    if (r.bad || r.p != r.end)
        return SEMA_ECORRUPT;
    return rc == SQLITE_OK ? 0 : SEMA_EIO;
}

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
    enc_t w;
    int err;

    for (const store_op_t *op = st->fly; op != NULL; op = op->next, nops++) {
        const char *why = refused(op);
        if (why != NULL) {
            msg(errbuf, errlen, "%s: %s: a required name or id is missing", st->path, why);
            return SEMA_EIO;
        }
        need += enc_size(op);
    }
    if (need > st->jcap) {
        size_t cap = need > 2 * st->jcap ? need : 2 * st->jcap;
        unsigned char *b = realloc(st->jbuf, cap);
        if (b == NULL) {
            msg(errbuf, errlen, "%s: out of memory writing the journal", st->path);
            return SEMA_EIO;
        }
        st->jbuf = b;
        st->jcap = cap;
    }
    w.p = st->jbuf + JNL_RECORD_HEAD;
    for (const store_op_t *op = st->fly; op != NULL; op = op->next)
        enc_op(&w, op);
    err = jnl_append(st->jnl, st->jbuf, (size_t)(w.p - st->jbuf), nops,
                     st->durability == STORE_STRICT);
    if (err != 0) {
        msg(errbuf, errlen,
            "%s/" STORE_JOURNAL_NAME ": cannot write the journal (%s): the commit is rolled back",
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

static void ck_clear(store_t *st)
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
static int checkpoint(store_t *st, char *errbuf, size_t errlen)
{
    const char *doing = "cannot begin a checkpoint";
    int rc, err;

    st->ck_at = mono_ms();
    rc = run_write(st->q[Q_BEGIN]);
    for (const store_op_t *op = st->ck; rc == SQLITE_OK && op != NULL; op = op->next)
        rc = write_op(st, op, &doing);
    if (rc == SQLITE_OK) {
        doing = "checkpoint failed, rolled back";
        rc = run_write(st->q[Q_COMMIT]);
    }
    if (rc != SQLITE_OK) {
        (void)db_error(st->db, rc, st->path, doing, st->ck_err, sizeof st->ck_err);
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "%s", st->ck_err);
        rollback(st);
        st->ck_failures++;
        st->ck_failing = 1;
        return SEMA_EIO;
    }
    ck_clear(st);
    st->checkpoints++;
    st->ck_failing = 0;
    /* The database holds it all now; if the reset fails, the journal refuses records until
     * one succeeds (jnl_append), and a replay of what it holds changes nothing. */
    err = jnl_reset(st->jnl);
    if (err != 0) {
        msg(st->ck_err, sizeof st->ck_err,
            "%s/" STORE_JOURNAL_NAME ": cannot start the journal over: %s", st->dir, strerror(err));
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "%s", st->ck_err);
        return SEMA_EIO;
    }
    return 0;
}

/* Before reading the database: bring everything the journal holds into it. If that
 * checkpoint fails (a full disk, say), apply it in a transaction that the reader rolls back
 * (unsettle): *overlay is then 1. */
static int settle(store_t *st, int *overlay, char *errbuf, size_t errlen)
{
    const char *doing = "cannot read the journal's changes";
    int rc;

    *overlay = 0;
    if (st->jnl == NULL || jnl_used(st->jnl) == 0 || checkpoint(st, errbuf, errlen) == 0)
        return 0;
    rc = run_write(st->q[Q_BEGIN]);
    for (const store_op_t *op = st->ck; rc == SQLITE_OK && op != NULL; op = op->next)
        rc = write_op(st, op, &doing);
    if (rc != SQLITE_OK) {
        rollback(st);
        return SEMA_EIO; /* with the checkpoint's message */
    }
    *overlay = 1;
    return 0;
}

static void unsettle(store_t *st, int overlay)
{
    if (overlay)
        rollback(st);
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
    st->path = join_path(dir, STORE_DB_NAME);
    rc = st->path != NULL ? prepare_all(st, errbuf, errlen) : SEMA_ENOMEM;
    if (rc == 0 && (rc = run_write(st->q[Q_BEGIN])) != SQLITE_OK)
        rc = db_error(db, rc, st->path, "cannot begin", errbuf, errlen);
    if (rc == 0) {
        rc = jnl_scan(dir, replay_record, st, records, ops, gen, errbuf, errlen);
        if (rc == SEMA_ECORRUPT)
            msg(errbuf, errlen, "%s/" STORE_JOURNAL_NAME ": a record cannot be read", dir);
        if (rc == 0 && (rc = run_write(st->q[Q_COMMIT])) != SQLITE_OK)
            rc = db_error(db, rc, st->path, "cannot apply the journal", errbuf, errlen);
        if (rc != 0)
            rollback(st);
    }
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(st->q[i]);
    free(st->path);
    free(st);
    return rc;
}

/* At open: write what a crash left in the journal to the database, then start it over. */
static int recover(store_t *st, char *errbuf, size_t errlen)
{
    int rc = run_write(st->q[Q_BEGIN]);

    if (rc != SQLITE_OK)
        return db_error(st->db, rc, st->path, "cannot begin the journal's replay", errbuf, errlen);
    rc = jnl_replay(st->jnl, replay_record, st, errbuf, errlen);
    if (rc == SEMA_ECORRUPT)
        msg(errbuf, errlen,
            "%s/" STORE_JOURNAL_NAME ": a record passed its checksum but cannot be read "
            "(written by another build?): refusing to start rather than lose it",
            st->dir);
    else if (rc == SEMA_EIO && !sqlite3_get_autocommit(st->db))
        (void)db_error(st->db, sqlite3_errcode(st->db), st->path, "cannot replay the journal",
                       errbuf, errlen);
    if (rc == 0) {
        rc = run_write(st->q[Q_COMMIT]);
        if (rc != SQLITE_OK)
            return db_error(st->db, rc, st->path, "cannot commit the journal's replay", errbuf,
                            errlen);
    } else {
        rollback(st);
        return rc;
    }
    if (jnl_used(st->jnl) > 0) {
        int err = jnl_reset(st->jnl);
        if (err != 0) {
            msg(errbuf, errlen, "%s/" STORE_JOURNAL_NAME ": cannot start the journal over: %s",
                st->dir, strerror(err));
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
        msg(errbuf, errlen, "%s: commit failed (injected for a test)", st->path);
        return st->fly_inject;
    }
    /* Whatever failed (read-only, I/O error, disk full, even a record the store refused),
     * the engine sees one code: 503 store_unavailable; the message has the detail. */
    if (st->fly_failed) {
        msg(errbuf, errlen, "%s: out of memory recording a change", st->path);
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
        (void)checkpoint(st, NULL, 0);
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
    if (settle(st, &overlay, ignored, sizeof ignored) != 0)
        return SEMA_EIO;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *fence = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    unsettle(st, overlay);
    return rc == SQLITE_ROW ? 0 : map_rc(rc, &(const char *){NULL});
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
    return store_checkpoint_pending(st) ? checkpoint(st, errbuf, errlen) : 0;
}

const char *store_checkpoint_error(const store_t *st)
{
    return st != NULL ? st->ck_err : "";
}
