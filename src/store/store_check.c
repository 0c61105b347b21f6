/* SPDX-License-Identifier: MIT */
/* store_check.c - `semad --check DIR`: verify an embedded store offline (format, SQLite
 * integrity, sema's invariants) and print a report, without taking the store over. */
#include "store/store.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "sema/error.h"
#include "store/store_journal.h"
#include "store/store_sqlite.h"

#define CHECK_MAX_LINES 10 /* problems printed per check; the rest are counted */

/* Each query returns one text column per problem found. Errors make the check fail;
 * notes are states the semantics allow but an operator may want to know about. */
static const struct {
    int error;
    const char *title;
    const char *sql;
} invariants[] = {
    /* A grant writes its fence into the fence floor, not its semaphore's row. */
    {1, "lease fence above the fences stored",
     "SELECT 'lease ' || l.id || ' of ' || l.sem || ': fence ' || l.fence ||"
     " ' > semaphore fence ' || s.fence || ' and fence floor ' ||"
     " coalesce((SELECT fence FROM retired WHERE name = ''), 0)"
     " FROM leases l JOIN semaphores s ON s.name = l.sem"
     " WHERE l.is_lock = 0 AND l.fence > max(s.fence,"
     " coalesce((SELECT fence FROM retired WHERE name = ''), 0))"},
    {1, "lease of a semaphore that does not exist",
     "SELECT 'lease ' || id || ' of ' || sem FROM leases"
     " WHERE is_lock = 0 AND sem NOT IN (SELECT name FROM semaphores)"},
    {1, "fence handed out twice",
     "SELECT (CASE is_lock WHEN 0 THEN 'semaphore ' ELSE 'lock ' END) || sem || ': fence ' ||"
     " fence || ' in ' || count(*) || ' leases' FROM leases GROUP BY is_lock != 0, sem, fence"
     " HAVING count(*) > 1"},
    {1, "lease with an impossible weight, ttl or expiry",
     "SELECT 'lease ' || id || ': weight ' || weight || ', ttl_ms ' || ttl_ms ||"
     " ', acquired_at ' || acquired_at || ', expires_at ' || expires_at FROM leases"
     " WHERE weight <= 0 OR ttl_ms <= 0 OR expires_at < acquired_at"},
    {1, "semaphore with an impossible capacity or fence",
     "SELECT 'semaphore ' || quote(name) || ': capacity ' || capacity || ', fence ' || fence"
     " FROM semaphores WHERE name = '' OR capacity < 0 OR fence < 0"},
    {1, "exclusive keyed lock held together with another lease",
     "SELECT 'lock ' || sem || ': ' || count(*) || ' leases, one of them exclusive'"
     " FROM leases WHERE is_lock != 0 GROUP BY sem"
     " HAVING count(*) > 1 AND (max(is_lock) = 2 OR max(weight) > 1)"},
    {0, "v1 semaphore holding more than its capacity (legal only after a shrink)",
     "SELECT 'semaphore ' || s.name || ': held ' || sum(l.weight) || ' > capacity ' ||"
     " s.capacity FROM semaphores s JOIN leases l ON l.sem = s.name AND l.is_lock = 0"
     " WHERE s.legacy = 0 GROUP BY s.name HAVING sum(l.weight) > s.capacity"},
};

/* Run a query returning text rows; print up to CHECK_MAX_LINES under `title`. Returns the
 * number of rows, or -1 if the query failed. */
static long report_rows(sqlite3 *db, const char *sql, const char *title, FILE *out)
{
    sqlite3_stmt *s;
    long n = 0;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

    if (rc != SQLITE_OK) {
        fprintf(out, "  %s: query failed: %s\n", title, sqlite3_errmsg(db));
        return -1;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == 0)
            fprintf(out, "  %s:\n", title);
        if (n < CHECK_MAX_LINES)
            fprintf(out, "    %s\n", (const char *)sqlite3_column_text(s, 0));
        n++;
    }
    if (n > CHECK_MAX_LINES)
        fprintf(out, "    ... and %ld more\n", n - CHECK_MAX_LINES);
    if (rc != SQLITE_DONE) {
        fprintf(out, "  %s: query failed: %s\n", title, sqlite3_errmsg(db));
        n = -1;
    }
    sqlite3_finalize(s);
    return n;
}

static int64_t count_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s;
    int64_t n = -1;

    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(s) == SQLITE_ROW)
        n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return n;
}

/* Say whether a semad holds DIR/LOCK (a shared probe, released at once). */
static void report_lock(const char *dir, FILE *out)
{
    char path[4096], buf[32] = "";
    int fd;
    ssize_t n;

    snprintf(path, sizeof path, "%s/%s", dir, STORE_LOCK_NAME);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(out, "lock: %s absent (no semad has used this directory)\n", path);
        return;
    }
    n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    if (flock(fd, LOCK_SH | LOCK_NB) != 0)
        fprintf(out, "lock: held by a running semad (pid %ld); checking a live snapshot\n",
                strtol(buf, NULL, 10));
    else
        fprintf(out, "lock: free (no semad running on this directory)\n");
    close(fd);
}

/* Format and version. Returns 0, SEMA_ECORRUPT or SEMA_EVERSION. */
static int check_header(sqlite3 *db, const char *path, FILE *out)
{
    int64_t app = count_of(db, "PRAGMA application_id");
    int64_t ver = count_of(db, "PRAGMA user_version");

    if (app != STORE_APP_ID) {
        fprintf(out, "FAIL %s: not a sema store (%s)\n", path,
                app < 0 ? sqlite3_errmsg(db) : "application_id does not match");
        return SEMA_ECORRUPT;
    }
    fprintf(out, "format: version %" PRId64 "\n", ver);
    if (ver >= STORE_FORMAT_OLDEST && ver < STORE_FORMAT) {
        fprintf(out, "note: format version %" PRId64 " is upgraded to %d when semad opens it\n",
                ver, STORE_FORMAT);
        return 0;
    }
    if (ver != STORE_FORMAT) {
        fprintf(out, "FAIL %s: format version %" PRId64 ", this semad reads version %d\n", path,
                ver, STORE_FORMAT);
        return SEMA_EVERSION;
    }
    return 0;
}

/* SQLite's full integrity check; prints what it finds. */
static int check_integrity(sqlite3 *db, FILE *out)
{
    sqlite3_stmt *s;
    int bad = 0, rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(20)", -1, &s, NULL);

    if (rc != SQLITE_OK) {
        fprintf(out, "FAIL integrity: %s\n", sqlite3_errmsg(db));
        return SEMA_ECORRUPT;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        if (t != NULL && strcmp(t, "ok") == 0)
            continue;
        if (!bad)
            fprintf(out, "FAIL integrity:\n");
        fprintf(out, "    %s\n", t != NULL ? t : "(null)");
        bad = 1;
    }
    if (rc != SQLITE_DONE) {
        fprintf(out, "FAIL integrity: %s\n", sqlite3_errmsg(db));
        bad = 1;
    }
    sqlite3_finalize(s);
    if (!bad)
        fprintf(out, "integrity: ok\n");
    return bad ? SEMA_ECORRUPT : 0;
}

static int check_invariants(sqlite3 *db, FILE *out)
{
    long errors = 0, notes = 0;

    fprintf(
        out, "contents: %" PRId64 " semaphores, %" PRId64 " leases, %" PRId64 " retired names\n",
        count_of(db, "SELECT count(*) FROM semaphores"),
        count_of(db, "SELECT count(*) FROM leases"), count_of(db, "SELECT count(*) FROM retired"));
    for (size_t i = 0; i < sizeof invariants / sizeof invariants[0]; i++) {
        long n = report_rows(db, invariants[i].sql, invariants[i].title, out);
        if (n < 0 || (n > 0 && invariants[i].error))
            errors += n < 0 ? 1 : n;
        else
            notes += n;
    }
    fprintf(out, "invariants: %s (%ld problems, %ld notes)\n", errors ? "FAIL" : "ok", errors,
            notes);
    return errors ? SEMA_ECORRUPT : 0;
}

/* Whether SQLite's files beside the database (-wal, -shm) are absent: a store no semad has
 * open (one stopped cleanly, a backup). */
static int no_side_files(const char *path)
{
    char side[4200];
    static const char *const suffix[] = {"-wal", "-shm"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(side, sizeof side, "%s%s", path, suffix[i]);
        if (access(side, F_OK) == 0 || errno != ENOENT)
            return 0;
    }
    return 1;
}

/* Open `path` as immutable (an SQLite URI: every byte but the unreserved ones escaped), so
 * that SQLite creates no -wal and -shm beside it. */
static int open_immutable(const char *path, sqlite3 **db)
{
    char uri[3 * 4096 + 32] = "file:";
    size_t n = strlen(uri);
    for (const unsigned char *p = (const unsigned char *)path; *p && n + 4 < sizeof uri; p++)
        n += (size_t)snprintf(uri + n, sizeof uri - n,
                              strchr("/-._~", *p) || isalnum(*p) ? "%c" : "%%%02X", *p);
    snprintf(uri + n, sizeof uri - n, "?immutable=1");
    return sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
}

/* The database, read only. A store no semad has open is read as immutable, so the check
 * leaves nothing behind; one in use (its -wal there) is read through SQLite's locks, a
 * consistent snapshot beside the running semad, whose files are already there. */
static sqlite3 *open_for_check(const char *path, FILE *out, int *code)
{
    sqlite3 *db = NULL;
    int rc = no_side_files(path) ? open_immutable(path, &db)
                                 : sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

    if (rc != SQLITE_OK) {
        sqlite3_close(db);
        db = NULL;
        rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    }
    if (rc != SQLITE_OK) {
        fprintf(out, "FAIL %s: cannot open: %s\n", path, sqlite3_errstr(rc));
        sqlite3_close(db);
        *code = SEMA_EIO;
        return NULL;
    }
    /* Leave the files as they were: no checkpoint when we close. */
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    sqlite3_busy_timeout(db, 2000);
    return db;
}

/* The journal: what it holds that the database does not have yet. With records, the
 * invariants are checked on a copy of the database in memory with them applied (the state
 * the next start loads); the files are left as they are. Sets *mem to that copy, or NULL.
 * `gen0` is the journal's generation read before the database's snapshot: while a semad
 * runs, a journal of the same generation holds exactly what the snapshot may lack (a
 * checkpoint since then is replayed over harmlessly); another one means a checkpoint started
 * it over in between, and the database is then checked alone. */
static int check_journal(sqlite3 *db, const char *dir, uint64_t gen0, uint64_t nrec0, FILE *out,
                         sqlite3 **mem)
{
    uint64_t records = 0, ops = 0, gen = 0;
    char err[512] = "";
    sqlite3_backup *b;
    int rc;

    *mem = NULL;
    if (nrec0 == 0) { /* nothing to apply (and an older format's tables need not match) */
        fprintf(out, "journal: empty (everything is in %s)\n", STORE_DB_NAME);
        return 0;
    }
    if (sqlite3_open(":memory:", mem) != SQLITE_OK) {
        sqlite3_close(*mem);
        *mem = NULL;
        return SEMA_ENOMEM;
    }
    b = sqlite3_backup_init(*mem, "main", db, "main");
    rc = b != NULL && sqlite3_backup_step(b, -1) == SQLITE_DONE ? 0 : SEMA_EIO;
    sqlite3_backup_finish(b);
    if (rc == 0)
        rc = store_journal_apply(*mem, dir, &records, &ops, &gen, err, sizeof err);
    if (rc != 0) {
        fprintf(out, "FAIL journal: %s\n", err[0] ? err : sqlite3_errmsg(*mem));
    } else if (records == 0) {
        fprintf(out, "journal: empty (everything is in %s)\n", STORE_DB_NAME);
    } else if (gen != gen0) {
        fprintf(out, "journal: started over during the check (a checkpoint of the running semad); "
                     "checked without it\n");
    } else {
        fprintf(out,
                "journal: %" PRIu64 " commits (%" PRIu64 " changes) not yet in %s; the next "
                "start applies them (checked with them applied)\n",
                records, ops, STORE_DB_NAME);
        return 0;
    }
    sqlite3_close(*mem);
    *mem = NULL;
    return rc;
}

int store_check(const char *dir, FILE *out)
{
    sqlite3 *mem = NULL;
    char path[4096];
    struct stat sb;
    sqlite3 *db;
    int code = 0;

    snprintf(path, sizeof path, "%s/%s", dir, STORE_DB_NAME);
    if (stat(path, &sb) != 0) {
        fprintf(out, "FAIL %s: %s\n", path, strerror(errno));
        return errno == ENOENT ? SEMA_ENOENT : SEMA_EIO;
    }
    fprintf(out, "store: %s (%lld bytes)\n", path, (long long)sb.st_size);
    report_lock(dir, out);
    db = open_for_check(path, out, &code);
    if (db == NULL)
        return code;
    uint64_t gen0 = 0, nrec = 0, nops = 0;
    char err[512];
    if (jnl_scan(dir, NULL, NULL, &nrec, &nops, &gen0, err, sizeof err) != 0) {
        fprintf(out, "FAIL journal: %s\n", err);
        sqlite3_close(db);
        fprintf(out, "result: FAILED\n");
        return SEMA_EIO;
    }
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL); /* one snapshot for every check */
    code = check_header(db, path, out);
    if (code == 0)
        code = check_integrity(db, out);
    if (code == 0)
        code = check_journal(db, dir, gen0, nrec, out, &mem);
    if (code == 0)
        code = check_invariants(mem != NULL ? mem : db, out);
    sqlite3_close(mem);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(db);
    fprintf(out, "result: %s\n", code == 0 ? "ok" : "FAILED");
    return code;
}
