/* SPDX-License-Identifier: MIT */
/* store_sqlite.c - semad's embedded durable store: one SQLite database in WAL mode per
 * data directory, behind a journal (store_journal.c) that every group commit appends to
 * ahead of its replies (store_commit.c); checkpoints write the journal's coalesced changes
 * to the database. This file: the data directory and its lock, opening (schema, format,
 * pragmas), loading at start, and writing rows. */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sema/error.h"

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
    [4] = "ALTER TABLE semaphores ADD COLUMN tenant_max INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE semaphores ADD COLUMN rate_per_s INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE semaphores ADD COLUMN rate_burst INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE leases ADD COLUMN tenant TEXT;"
          "ALTER TABLE leases ADD COLUMN parts BLOB;" /* the semaphores after `sem` */
          "ALTER TABLE tickets ADD COLUMN tenant TEXT;"
          "ALTER TABLE tickets ADD COLUMN parts BLOB;",
};

static const char *const query_sql[Q_COUNT] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_PUT_SEM] = "INSERT INTO semaphores(name, capacity, available, fence, legacy, created_at,"
                  " tenant_max, rate_per_s, rate_burst)"
                  " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT(name) DO UPDATE SET"
                  " capacity = excluded.capacity, available = excluded.available,"
                  " fence = max(fence, excluded.fence), legacy = excluded.legacy,"
                  " tenant_max = excluded.tenant_max, rate_per_s = excluded.rate_per_s,"
                  " rate_burst = excluded.rate_burst",
    [Q_RETIRE_SEM] = "INSERT INTO retired(name, fence) SELECT name, fence FROM semaphores"
                     " WHERE name = ?1 ON CONFLICT(name) DO UPDATE SET"
                     " fence = max(fence, excluded.fence)",
    [Q_DEL_SEM] = "DELETE FROM semaphores WHERE name = ?1",
    [Q_PUT_LEASE] = "INSERT INTO leases(id, sem, weight, owner, idem_key, fence, ttl_ms,"
                    " acquired_at, expires_at, is_lock, principal, tenant, parts) VALUES(?1, ?2,"
                    " ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT(id) DO UPDATE"
                    " SET sem = excluded.sem,"
                    " weight = excluded.weight, owner = excluded.owner,"
                    " idem_key = excluded.idem_key, fence = excluded.fence,"
                    " ttl_ms = excluded.ttl_ms, acquired_at = excluded.acquired_at,"
                    " expires_at = excluded.expires_at, is_lock = excluded.is_lock,"
                    " principal = excluded.principal, tenant = excluded.tenant,"
                    " parts = excluded.parts",
    [Q_DEL_LEASE] = "DELETE FROM leases WHERE id = ?1",
    [Q_MAX_FENCE] = "SELECT max(coalesce((SELECT max(fence) FROM semaphores), 0),"
                    " coalesce((SELECT max(fence) FROM retired), 0),"
                    " coalesce((SELECT max(fence) FROM leases), 0))",
    /* The fence floor: the row of the name '' (no semaphore has it) in `retired`. */
    [Q_PUT_FLOOR] = ("INSERT INTO retired(name, fence) VALUES('', ?1) ON CONFLICT(name)"
                     " DO UPDATE SET fence = max(fence, excluded.fence)"),
    [Q_PUT_TICKET] = "INSERT OR REPLACE INTO tickets(id, sem, seq, weight, owner, idem_key,"
                     " lease_id, ttl_ms, keepalive_ms, created_at, collected, principal, tenant,"
                     " parts) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    [Q_DEL_TICKET] = "DELETE FROM tickets WHERE id = ?1",
};

/* ---- messages and error codes ------------------------------------------------------- */

void store__msg(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void store__msg(char *errbuf, size_t errlen, const char *fmt, ...)
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

int store__map_rc(int rc, const char **what)
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
int store__db_error(sqlite3 *db, int rc, const char *path, const char *doing, char *errbuf,
                    size_t errlen)
{
    const char *what;
    int code = store__map_rc(rc, &what);
    int sys = db != NULL ? sqlite3_system_errno(db) : 0;

    store__msg(errbuf, errlen, "%s: %s: %s (%s%s%s)", path, doing, what,
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

char *store__join_path(const char *dir, const char *name)
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
            store__msg(errbuf, errlen, "%s: cannot create the data directory: %s", p,
                       strerror(errno));
            rc = errno_code(errno);
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    if (rc == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        store__msg(errbuf, errlen, "%s: not a directory", dir);
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
    char *path = store__join_path(dir, STORE_LOCK_NAME);
    char pid[32];
    int fd, n, rc = 0;

    if (path == NULL)
        return SEMA_ENOMEM;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        store__msg(errbuf, errlen, "%s: cannot open the lock file: %s", path, strerror(errno));
        rc = errno_code(errno);
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            store__msg(
                errbuf, errlen,
                "%s: the data directory is in use by another semad (pid %ld); stop it or use "
                "another --data directory",
                path, lock_holder(fd));
            rc = SEMA_EBUSY;
        } else {
            store__msg(errbuf, errlen, "%s: cannot lock: %s", path, strerror(errno));
            rc = SEMA_EIO;
        }
    } else {
        n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
            store__msg(errbuf, errlen, "%s: cannot write the lock file: %s", path, strerror(errno));
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
        int code =
            store__db_error(st->db, rc, st->path, "cannot create the schema", errbuf, errlen);
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
        int code = store__db_error(st->db, rc, st->path, "cannot upgrade the store format", errbuf,
                                   errlen);
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
        return store__db_error(st->db, rc, st->path, "cannot read the header", errbuf, errlen);
    if (app == 0 && ver == 0 && objects == 0)
        return create_schema(st, errbuf, errlen);
    if (app != STORE_APP_ID) {
        store__msg(errbuf, errlen,
                   "%s: an SQLite database but not a sema store (application_id %" PRId64 ")",
                   st->path, app);
        return SEMA_ECORRUPT;
    }
    if (ver >= STORE_FORMAT_OLDEST && ver < STORE_FORMAT)
        return migrate(st, ver, errbuf, errlen);
    if (ver != STORE_FORMAT) {
        store__msg(errbuf, errlen,
                   "%s: store format version %" PRId64 ", this semad reads version %d only%s",
                   st->path, ver, STORE_FORMAT,
                   ver > STORE_FORMAT ? " (written by a newer semad)" : "");
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
        return store__db_error(st->db, rc, st->path, "integrity check failed", errbuf, errlen);
    if (strcmp(result, "ok") != 0) {
        for (char *c = result; *c != '\0'; c++)
            *c = *c == '\n' ? ' ' : *c;
        store__msg(errbuf, errlen,
                   "%s: database is corrupt (quick_check: %s); see docs/durability.md", st->path,
                   result);
        return SEMA_ECORRUPT;
    }
    return 0;
}

static int set_pragmas(store_t *st, char *errbuf, size_t errlen)
{
    char mode[16], sql[160];
    int rc = query_text(st->db, "PRAGMA journal_mode = WAL", mode, sizeof mode);

    if (rc != SQLITE_OK)
        return store__db_error(st->db, rc, st->path, "cannot switch to WAL mode", errbuf, errlen);
    if (strcmp(mode, "wal") != 0) {
        store__msg(errbuf, errlen, "%s: cannot switch to WAL mode (journal_mode is %s)", st->path,
                   mode);
        return SEMA_EIO;
    }
    /* The database is written only by checkpoints (and the journal's replay), which must be
     * durable before the journal starts over: FULL, in both modes. */
    snprintf(sql, sizeof sql,
             "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = 67108864;"
             " PRAGMA cache_size = -32768; PRAGMA temp_store = MEMORY;");
    rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return store__db_error(st->db, rc, st->path, "cannot configure", errbuf, errlen);
    sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
    return 0;
}

int store__prepare_all(store_t *st, char *errbuf, size_t errlen)
{
    for (int i = 0; i < Q_COUNT; i++) {
        int rc = sqlite3_prepare_v3(st->db, query_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->q[i],
                                    NULL);
        if (rc != SQLITE_OK)
            return store__db_error(st->db, rc, st->path, "cannot prepare statements", errbuf,
                                   errlen);
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
        store__msg(errbuf, errlen, "%s: cannot sync the directory: %s", dir, strerror(errno));
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
        store__msg(errbuf, errlen,
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
        store__msg(errbuf, errlen, "%s: cannot open: %s", path, strerror(errno));
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

    return rc == SQLITE_OK
               ? 0
               : store__db_error(st->db, rc, st->path, "cannot drop an index", errbuf, errlen);
}

static int open_db(store_t *st, char *errbuf, size_t errlen)
{
    int rc = touch_db(st->path, errbuf, errlen);

    if (rc != 0)
        return rc;
    rc = sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        return store__db_error(st->db, rc, st->path, "cannot open", errbuf, errlen);
    sqlite3_extended_result_codes(st->db, 1);
    rc = check_format(st, errbuf, errlen);
    if (rc == 0)
        rc = quick_check(st, errbuf, errlen);
    if (rc == 0)
        rc = set_pragmas(st, errbuf, errlen);
    if (rc == 0)
        rc = drop_old_index(st, errbuf, errlen);
    if (rc == 0)
        rc = store__prepare_all(st, errbuf, errlen);
    return rc;
}

int store_open(store_t **out, const char *dir, store_durability_t durability, char *errbuf,
               size_t errlen)
{
    store_t *st;
    int rc;

    *out = NULL;
    if (dir == NULL || dir[0] == '\0' || durability == STORE_NONE) {
        store__msg(errbuf, errlen, "store_open: a data directory and strict or relaxed durability");
        return SEMA_EINVAL;
    }
    st = calloc(1, sizeof *st);
    if (st == NULL)
        return SEMA_ENOMEM;
    st->lock_fd = -1;
    st->durability = durability;
    st->pend_tail = &st->pend;
    st->path = store__join_path(dir, STORE_DB_NAME);
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
        rc = store__recover(st, errbuf, errlen);
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

void store__rollback(store_t *st)
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
        (void)store__checkpoint(st, NULL, 0);
    store__ck_clear(st);
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

/* ---- the parts BLOB ---- */

size_t store_parts_size(const store_part_t *parts, size_t n)
{
    size_t len = 0;

    for (size_t i = 0; i < n; i++)
        len += 8 + 8 + 4 + strlen(parts[i].sem) + 1;
    return len;
}

void store_parts_encode(const store_part_t *parts, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)strlen(parts[i].sem);
        memcpy(out, &parts[i].weight, 8);
        memcpy(out + 8, &parts[i].seq, 8);
        memcpy(out + 16, &len, 4);
        memcpy(out + 20, parts[i].sem, (size_t)len + 1);
        out += 20 + (size_t)len + 1;
    }
}

int store_parts_decode(const void *blob, size_t len, store_part_t *parts, size_t max)
{
    const unsigned char *p = blob, *end = p + len;
    size_t n = 0;

    while (p < end) {
        uint32_t nl;
        if (n == max || (size_t)(end - p) < 20)
            return -1;
        memcpy(&parts[n].weight, p, 8);
        memcpy(&parts[n].seq, p + 8, 8);
        memcpy(&nl, p + 16, 4);
        if ((size_t)(end - p) - 20 < (size_t)nl + 1 || p[20 + nl] != '\0' ||
            memchr(p + 20, '\0', nl) != NULL)
            return -1;
        parts[n++].sem = (const char *)p + 20;
        p += 20 + (size_t)nl + 1;
    }
    return (int)n;
}

/* Column i as parts: how many (0 for NULL), or -1 when malformed. */
static int col_parts(sqlite3_stmt *s, int i, store_part_t *parts)
{
    const void *blob = sqlite3_column_blob(s, i);

    if (blob == NULL)
        return 0;
    return store_parts_decode(blob, (size_t)sqlite3_column_bytes(s, i), parts, STORE_PARTS_MAX);
}

static int load_sems(store_t *st, void (*on_sem)(void *, const store_sem_t *), void *arg)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT name, capacity, available, fence, legacy, created_at,"
                                " tenant_max, rate_per_s, rate_burst FROM semaphores"
                                " ORDER BY name",
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
            .tenant_max = (uint64_t)sqlite3_column_int64(s, 6),
            .rate_per_s = (uint64_t)sqlite3_column_int64(s, 7),
            .rate_burst = (uint64_t)sqlite3_column_int64(s, 8),
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
                                " acquired_at, expires_at, is_lock, principal, tenant, parts"
                                " FROM leases ORDER BY is_lock, sem, fence",
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
            .tenant = col_text(s, 11),
        };
        store_part_t parts[STORE_PARTS_MAX];
        int np = col_parts(s, 12, parts);
        l.parts = parts;
        l.nparts = np > 0 ? (size_t)np : 0;
        if (np < 0)
            l.sem = NULL; /* a malformed row: refused like one without a semaphore */
        if (l.id != NULL && on_lease != NULL && (l.sem != NULL || np < 0))
            on_lease(arg, &l);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_load(store_t *st, void (*on_sem)(void *arg, const store_sem_t *sem),
               void (*on_lease)(void *arg, const store_lease_t *lease), void *arg, char *errbuf,
               size_t errlen)
{
    int overlay, rc = store__settle(st, &overlay, errbuf, errlen);

    if (rc != 0)
        return rc;
    rc = load_sems(st, on_sem, arg);
    if (rc == SQLITE_OK)
        rc = load_leases(st, on_lease, arg);
    store__unsettle(st, overlay);
    if (rc != SQLITE_OK)
        return store__db_error(st->db, rc, st->path, "cannot load", errbuf, errlen);
    return 0;
}

static int load_tickets(store_t *st, void (*on_ticket)(void *, const store_ticket_t *), void *arg)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT id, sem, seq, weight, owner, idem_key, lease_id, ttl_ms,"
                                " keepalive_ms, created_at, collected, principal, tenant, parts"
                                " FROM tickets ORDER BY seq, sem",
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
            .tenant = col_text(s, 12),
        };
        store_part_t parts[STORE_PARTS_MAX];
        int np = col_parts(s, 13, parts);
        t.parts = parts;
        t.nparts = np > 0 ? (size_t)np : 0;
        if (np < 0)
            t.weight = 0; /* a malformed row: dropped like one of a gone semaphore */
        if (t.id != NULL && t.sem != NULL && on_ticket != NULL)
            on_ticket(arg, &t);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_load_tickets(store_t *st, void (*on_ticket)(void *arg, const store_ticket_t *t),
                       void *arg, char *errbuf, size_t errlen)
{
    int overlay, rc = store__settle(st, &overlay, errbuf, errlen);

    if (rc != 0)
        return rc;
    rc = load_tickets(st, on_ticket, arg);
    store__unsettle(st, overlay);
    if (rc != SQLITE_OK)
        return store__db_error(st->db, rc, st->path, "cannot load the tickets", errbuf, errlen);
    return 0;
}

int store__run_write(sqlite3_stmt *s)
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
    sqlite3_bind_int64(s, 7, (sqlite3_int64)sem->tenant_max);
    sqlite3_bind_int64(s, 8, (sqlite3_int64)sem->rate_per_s);
    sqlite3_bind_int64(s, 9, (sqlite3_int64)sem->rate_burst);
    return store__run_write(s);
}

static int write_del_sem(store_t *st, const char *name)
{
    /* Its leases were deleted one by one before (the engine records each). */
    static const int steps[] = {Q_RETIRE_SEM, Q_DEL_SEM};
    int rc = SQLITE_OK;

    for (size_t i = 0; rc == SQLITE_OK && i < sizeof steps / sizeof steps[0]; i++) {
        bind_text(st->q[steps[i]], 1, name);
        rc = store__run_write(st->q[steps[i]]);
    }
    return rc;
}

/* Bind parts as a BLOB (NULL when there are none); the buffer is freed by SQLite. */
static int bind_parts(sqlite3_stmt *s, int i, const store_part_t *parts, size_t n)
{
    size_t len = store_parts_size(parts, n);
    unsigned char *b;

    if (n == 0)
        return sqlite3_bind_null(s, i);
    if ((b = malloc(len)) == NULL)
        return SQLITE_NOMEM;
    store_parts_encode(parts, n, b);
    return sqlite3_bind_blob(s, i, b, (int)len, free);
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
    bind_text(s, 12, l->tenant);
    if (bind_parts(s, 13, l->parts, l->nparts) != SQLITE_OK) {
        sqlite3_clear_bindings(s);
        return SQLITE_NOMEM;
    }
    return store__run_write(s);
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
    bind_text(s, 13, t->tenant);
    if (bind_parts(s, 14, t->parts, t->nparts) != SQLITE_OK) {
        sqlite3_clear_bindings(s);
        return SQLITE_NOMEM;
    }
    return store__run_write(s);
}

int store__write_op(store_t *st, const store_op_t *op, const char **doing)
{
    switch (op->kind) {
    case OP_PUT_TICKET:
        *doing = "cannot write a ticket";
        return write_ticket(st, &op->u.ticket);
    case OP_DEL_TICKET:
        *doing = "cannot delete a ticket";
        bind_text(st->q[Q_DEL_TICKET], 1, op->u.name);
        return store__run_write(st->q[Q_DEL_TICKET]);
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
        return store__run_write(st->q[Q_PUT_FLOOR]);
    default:
        *doing = "cannot delete a lease";
        bind_text(st->q[Q_DEL_LEASE], 1, op->u.name);
        return store__run_write(st->q[Q_DEL_LEASE]);
    }
}
