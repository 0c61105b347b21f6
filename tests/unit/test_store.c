/* SPDX-License-Identifier: MIT */
/* test_store.c - semad's embedded store: round trips, group commit, write failures that
 * roll back, refusing to start on a bad, foreign, newer or locked store, the offline check. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "sema/error.h"
#include "store/store.h"

/* ---- helpers ------------------------------------------------------------------------- */

static char tmp_root[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup_tmp(void)
{
    char mnt[128];

    if (tmp_root[0] == '\0')
        return;
    snprintf(mnt, sizeof mnt, "%s/data", tmp_root);
    umount2(mnt, MNT_DETACH); /* the small tmpfs of the disk-full case, if mounted */
    nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory for this test case; removed at exit. Returns `DIR/data` (not created:
 * store_open creates it). */
static const char *data_dir(void)
{
    static char dir[128];

    snprintf(tmp_root, sizeof tmp_root, "/tmp/sema-store-XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(tmp_root));
    atexit(cleanup_tmp);
    snprintf(dir, sizeof dir, "%s/data", tmp_root);
    return dir;
}

static store_t *open_ok(const char *dir, store_durability_t d)
{
    char err[512] = "";
    store_t *st = NULL;
    int rc = store_open(&st, dir, d, err, sizeof err);

    if (rc != 0)
        fprintf(stderr, "store_open: %s\n", err);
    ASSERT_OK(rc);
    ASSERT_NOT_NULL(st);
    return st;
}

static void commit_ok(store_t *st)
{
    char err[512] = "";
    int rc = store_commit(st, err, sizeof err);

    if (rc != 0)
        fprintf(stderr, "store_commit: %s\n", err);
    ASSERT_OK(rc);
}

static store_sem_t sem_rec(const char *name, uint64_t cap, uint64_t fence)
{
    store_sem_t s = {.name = name,
                     .capacity = cap,
                     .available = (int64_t)cap,
                     .fence = fence,
                     .legacy = 0,
                     .created_at_ms = 1700000000000};
    return s;
}

static store_lease_t lease_rec(const char *id, const char *sem, uint64_t w, uint64_t fence)
{
    store_lease_t l = {.id = id,
                       .sem = sem,
                       .weight = w,
                       .owner = "worker-1",
                       .idem_key = NULL,
                       .fence = fence,
                       .ttl_ms = 30000,
                       .acquired_at_ms = 1700000001000,
                       .expires_at_ms = 1700000031000,
                       .is_lock = 0};
    return l;
}

/* What store_load delivered, copied. */
#define MAX_LOADED 64
struct loaded {
    int nsem, nlease;
    store_sem_t sem[MAX_LOADED];
    store_lease_t lease[MAX_LOADED];
    char text[MAX_LOADED * 6][96];
    int ntext;
};

static const char *keep(struct loaded *ld, const char *s)
{
    if (s == NULL)
        return NULL;
    ASSERT_LT(ld->ntext, MAX_LOADED * 6);
    snprintf(ld->text[ld->ntext], sizeof ld->text[0], "%s", s);
    return ld->text[ld->ntext++];
}

static void on_sem(void *arg, const store_sem_t *s)
{
    struct loaded *ld = arg;

    ASSERT_LT(ld->nsem, MAX_LOADED);
    ld->sem[ld->nsem] = *s;
    ld->sem[ld->nsem].name = keep(ld, s->name);
    ld->nsem++;
}

static void on_lease(void *arg, const store_lease_t *l)
{
    struct loaded *ld = arg;

    ASSERT_LT(ld->nlease, MAX_LOADED);
    ld->lease[ld->nlease] = *l;
    ld->lease[ld->nlease].id = keep(ld, l->id);
    ld->lease[ld->nlease].sem = keep(ld, l->sem);
    ld->lease[ld->nlease].owner = keep(ld, l->owner);
    ld->lease[ld->nlease].idem_key = keep(ld, l->idem_key);
    ld->lease[ld->nlease].principal = keep(ld, l->principal);
    ld->nlease++;
}

static void load_ok(store_t *st, struct loaded *ld)
{
    char err[512] = "";

    memset(ld, 0, sizeof *ld);
    ASSERT_OK(store_load(st, on_sem, on_lease, ld, err, sizeof err));
}

/* Reopen `dir` and load its semaphores only. */
static void reload_sems(const char *dir, struct loaded *ld)
{
    store_t *st = open_ok(dir, STORE_STRICT);
    char err[512] = "";

    memset(ld, 0, sizeof *ld);
    ASSERT_OK(store_load(st, on_sem, NULL, ld, err, sizeof err));
    store_close(st);
}

/* Reopen `dir` and load what is durable there. */
static void reload(const char *dir, struct loaded *ld)
{
    store_t *st = open_ok(dir, STORE_STRICT);

    load_ok(st, ld);
    store_close(st);
}

static void path_in(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* Run SQL on the store's file directly (to forge bad stores). */
static void raw_sql(const char *dir, const char *sql)
{
    char path[256];
    sqlite3 *db;

    path_in(path, sizeof path, dir, "sema.db");
    ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        TEST_FAIL_("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

static int open_fails(const char *dir, char *err, size_t len)
{
    store_t *st = NULL;
    int rc = store_open(&st, dir, STORE_STRICT, err, len);

    ASSERT_NULL(st);
    fprintf(stderr, "refused (%s): %s\n", sema_err_name(rc), err);
    return rc;
}

/* A store with two semaphores and one lease, committed and closed. */
static void make_store(const char *dir)
{
    store_t *st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 3), b = sem_rec("beta", 1, 0);
    store_lease_t l = lease_rec("L1", "alpha", 2, 3);

    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_OK(store_put_sem(st, &b));
    ASSERT_OK(store_put_lease(st, &l));
    commit_ok(st);
    store_close(st);
}

/* ---- round trips ---------------------------------------------------------------------- */

TEST(round_trip)
{
    const char *dir = data_dir();
    store_t *st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 7), g = sem_rec("legacy-g", 0, 0);
    store_lease_t l1 = lease_rec("L1", "alpha", 2, 6), l2 = lease_rec("L2", "alpha", 3, 7);
    store_lease_t k = lease_rec("K1", "lock/key", 1, 1);
    struct loaded ld;

    g.legacy = 1;
    g.available = 4; /* `up` raised it above capacity */
    l2.owner = NULL;
    l2.idem_key = "retry-17";
    l1.principal = "ci-runner"; /* the token that took it (semad --auth) */
    k.is_lock = 1;
    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_OK(store_put_sem(st, &g));
    ASSERT_OK(store_put_lease(st, &l2));
    ASSERT_OK(store_put_lease(st, &l1));
    ASSERT_OK(store_put_lease(st, &k));
    commit_ok(st);
    store_close(st);

    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_STREQ(ld.sem[0].name, "alpha");
    ASSERT_EQ(ld.sem[0].capacity, 5);
    ASSERT_EQ(ld.sem[0].fence, 7);
    ASSERT_EQ(ld.sem[0].legacy, 0);
    ASSERT_EQ(ld.sem[0].created_at_ms, 1700000000000);
    ASSERT_STREQ(ld.sem[1].name, "legacy-g");
    ASSERT_EQ(ld.sem[1].legacy, 1);
    ASSERT_EQ(ld.sem[1].available, 4);
    ASSERT_EQ(ld.nlease, 3);
    /* semaphore leases first, in fence (grant) order; then keyed-lock leases */
    ASSERT_STREQ(ld.lease[0].id, "L1");
    ASSERT_STREQ(ld.lease[1].id, "L2");
    ASSERT_NULL(ld.lease[1].owner);
    ASSERT_STREQ(ld.lease[1].idem_key, "retry-17");
    ASSERT_EQ(ld.lease[1].weight, 3);
    ASSERT_EQ(ld.lease[1].fence, 7);
    ASSERT_EQ(ld.lease[1].ttl_ms, 30000);
    ASSERT_EQ(ld.lease[1].acquired_at_ms, 1700000001000);
    ASSERT_EQ(ld.lease[1].expires_at_ms, 1700000031000);
    ASSERT_STREQ(ld.lease[2].id, "K1");
    ASSERT_EQ(ld.lease[2].is_lock, 1);
    ASSERT_STREQ(ld.lease[0].owner, "worker-1");
    ASSERT_STREQ(ld.lease[0].principal, "ci-runner");
    ASSERT_NULL(ld.lease[1].principal);
}

TEST(files_are_private_and_wal)
{
    const char *dir = data_dir();
    char path[256], mode[16] = "";
    struct stat sb;
    sqlite3 *db;
    sqlite3_stmt *s;

    make_store(dir);
    ASSERT_OK(stat(dir, &sb));
    ASSERT_EQ(sb.st_mode & 0777, 0700);
    path_in(path, sizeof path, dir, "sema.db");
    ASSERT_OK(stat(path, &sb));
    ASSERT_EQ(sb.st_mode & 0777, 0600);
    path_in(path, sizeof path, dir, "LOCK");
    ASSERT_OK(stat(path, &sb));
    ASSERT_EQ(sb.st_mode & 0777, 0600);
    path_in(path, sizeof path, dir, "sema.db");
    ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
    ASSERT_STREQ(mode, "wal");
}

TEST(group_commit_is_atomic)
{
    const char *dir = data_dir();
    store_t *st = open_ok(dir, STORE_RELAXED);
    char name[32];
    struct loaded ld;

    ASSERT_EQ(store_pending(st), 0);
    ASSERT_OK(store_commit(st, NULL, 0)); /* nothing to commit */
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "s%02d", i);
        store_sem_t s = sem_rec(name, (uint64_t)i + 1, 0);
        ASSERT_OK(store_put_sem(st, &s));
    }
    ASSERT_EQ(store_pending(st), 1);
    commit_ok(st);
    ASSERT_EQ(store_pending(st), 0);
    /* A tick whose commit never happened (the process died) leaves nothing behind. */
    store_sem_t lost = sem_rec("zz-never-committed", 1, 0);
    ASSERT_OK(store_put_sem(st, &lost));
    ASSERT_OK(store_del_sem(st, "s00"));
    store_close(st);

    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 20);
    ASSERT_STREQ(ld.sem[0].name, "s00");
    ASSERT_STREQ(ld.sem[19].name, "s19");
    ASSERT_EQ(ld.sem[19].capacity, 20);
}

TEST(delete_keeps_its_fence_and_a_lock_of_the_same_name)
{
    const char *dir = data_dir();
    store_t *st;
    store_sem_t a = sem_rec("alpha", 5, 9);
    store_lease_t l = lease_rec("L1", "alpha", 1, 9), k = lease_rec("K1", "alpha", 1, 4);
    struct loaded ld;
    uint64_t fence = 99;

    make_store(dir);
    st = open_ok(dir, STORE_STRICT);
    k.is_lock = 1; /* a keyed lock whose key happens to equal the semaphore's name */
    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_OK(store_put_lease(st, &l));
    ASSERT_OK(store_put_lease(st, &k));
    commit_ok(st);
    ASSERT_OK(store_del_lease(st, "L1")); /* the engine deletes a semaphore's leases first */
    ASSERT_OK(store_del_sem(st, "alpha"));
    commit_ok(st);
    ASSERT_OK(store_max_fence(st, &fence)); /* the deleted semaphore's fence is kept */
    ASSERT_EQ(fence, 9);
    ASSERT_OK(store_del_lease(st, "no-such-lease")); /* deleting nothing is fine */
    commit_ok(st);
    store_close(st);

    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 1);
    ASSERT_STREQ(ld.sem[0].name, "beta");
    ASSERT_EQ(ld.nlease, 1);
    ASSERT_STREQ(ld.lease[0].id, "K1");
}

TEST(fence_never_goes_backwards)
{
    const char *dir = data_dir();
    store_t *st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 40);
    struct loaded ld;

    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    a.fence = 12;
    a.capacity = 8; /* a resize carrying a stale fence must not lower it */
    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    load_ok(st, &ld);
    ASSERT_EQ(ld.sem[0].fence, 40);
    ASSERT_EQ(ld.sem[0].capacity, 8);
    store_close(st);
}

TEST(lease_update_and_release)
{
    const char *dir = data_dir();
    store_t *st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 2);
    store_lease_t l1 = lease_rec("L1", "alpha", 1, 1), l2 = lease_rec("L2", "alpha", 1, 2);
    struct loaded ld;

    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_OK(store_put_lease(st, &l1));
    ASSERT_OK(store_put_lease(st, &l2));
    commit_ok(st);
    l1.expires_at_ms += 60000; /* renew */
    ASSERT_OK(store_put_lease(st, &l1));
    ASSERT_OK(store_del_lease(st, "L2")); /* release */
    commit_ok(st);
    store_close(st);

    reload(dir, &ld);
    ASSERT_EQ(ld.nlease, 1);
    ASSERT_STREQ(ld.lease[0].id, "L1");
    ASSERT_EQ(ld.lease[0].expires_at_ms, 1700000031000 + 60000);
}

/* ---- write failures ------------------------------------------------------------------ */

TEST(injected_commit_failure_rolls_back_and_recovers)
{
    const char *dir = data_dir();
    store_t *st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 1), b = sem_rec("beta", 2, 0);
    store_lease_t l = lease_rec("L1", "alpha", 1, 1);
    char err[512] = "";
    struct loaded ld;
    uint64_t ok, failed;

    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    store_inject_commit_failures(st, 2, 0);
    ASSERT_OK(store_put_sem(st, &b));
    ASSERT_OK(store_put_lease(st, &l));
    ASSERT_EQ(store_commit(st, err, sizeof err), SEMA_EIO);
    ASSERT(strstr(err, "sema.db") != NULL);
    ASSERT_EQ(store_pending(st), 0);
    load_ok(st, &ld); /* the store holds exactly what was committed before */
    ASSERT_EQ(ld.nsem, 1);
    ASSERT_EQ(ld.nlease, 0);
    ASSERT_OK(store_del_sem(st, "alpha"));
    ASSERT_EQ(store_commit(st, err, sizeof err), SEMA_EIO);
    ASSERT_OK(store_put_sem(st, &b)); /* the failures are over: writes work again */
    commit_ok(st);
    store_stats(st, &ok, &failed);
    ASSERT_EQ(ok, 2);
    ASSERT_EQ(failed, 2);
    store_close(st);

    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_STREQ(ld.sem[0].name, "alpha");
    ASSERT_STREQ(ld.sem[1].name, "beta");
}

TEST(failed_put_fails_the_commit)
{
    const char *dir = data_dir();
    store_t *st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 1), bad = sem_rec(NULL, 1, 0);
    char err[512] = "";
    struct loaded ld;

    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_OK(store_put_sem(st, &bad)); /* recorded; the NOT NULL name fails at the commit */
    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_EQ(store_pending(st), 1);
    ASSERT_EQ(store_commit(st, err, sizeof err), SEMA_EIO);
    ASSERT(strstr(err, "cannot write a semaphore") != NULL);
    load_ok(st, &ld);
    ASSERT_EQ(ld.nsem, 0); /* alpha went with the rest of its transaction */
    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    store_close(st);
    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 1);
}

/* Real write failures without root: SQLite's unix VFS lets a program replace the system
 * calls it makes; these fail every write with `write_errno` while it is set. */
static int write_errno;
static size_t write_errno_min; /* ... only writes of at least this many bytes (a page) */
static sqlite3_syscall_ptr real_write, real_pwrite, real_pwrite64;

static ssize_t fake_write(int fd, const void *buf, size_t n)
{
    if (write_errno != 0 && n >= write_errno_min) {
        errno = write_errno;
        return -1;
    }
    return ((ssize_t(*)(int, const void *, size_t))real_write)(fd, buf, n);
}

static ssize_t fake_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (write_errno != 0 && n >= write_errno_min) {
        errno = write_errno;
        return -1;
    }
    return ((ssize_t(*)(int, const void *, size_t, off_t))real_pwrite)(fd, buf, n, off);
}

static ssize_t fake_pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (write_errno != 0 && n >= write_errno_min) {
        errno = write_errno;
        return -1;
    }
    return ((ssize_t(*)(int, const void *, size_t, off_t))real_pwrite64)(fd, buf, n, off);
}

static void hook_writes(void)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);

    ASSERT_NOT_NULL(vfs);
    ASSERT(vfs->iVersion >= 3 && vfs->xSetSystemCall != NULL);
    real_write = vfs->xGetSystemCall(vfs, "write");
    real_pwrite = vfs->xGetSystemCall(vfs, "pwrite");
    real_pwrite64 = vfs->xGetSystemCall(vfs, "pwrite64");
    ASSERT_EQ(vfs->xSetSystemCall(vfs, "write", (sqlite3_syscall_ptr)fake_write), SQLITE_OK);
    if (real_pwrite != NULL)
        vfs->xSetSystemCall(vfs, "pwrite", (sqlite3_syscall_ptr)fake_pwrite);
    if (real_pwrite64 != NULL)
        vfs->xSetSystemCall(vfs, "pwrite64", (sqlite3_syscall_ptr)fake_pwrite64);
}

/* Commits fail while writes fail with `err_no`; the store then works again. */
static void write_failure_case(int err_no, const char *what)
{
    const char *dir = data_dir();
    store_t *st;
    char err[512] = "";
    struct loaded ld;

    hook_writes();
    st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 1), b = sem_rec("beta", 2, 0);
    store_lease_t l = lease_rec("L1", "alpha", 1, 1);
    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    write_errno = err_no; /* the database's writes and the journal's */
    store_inject_journal_errno(err_no, 0);
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(store_put_sem(st, &b));
        ASSERT_OK(store_put_lease(st, &l));
        ASSERT_EQ(store_commit(st, err, sizeof err), SEMA_EIO);
        fprintf(stderr, "commit failed as it should: %s\n", err);
        ASSERT(strstr(err, what) != NULL);
        ASSERT(strstr(err, "rolled back") != NULL);
        ASSERT_EQ(store_pending(st), 0);
    }
    write_errno = 0;
    store_inject_journal_errno(0, 0);
    load_ok(st, &ld);
    ASSERT_EQ(ld.nsem, 1);
    ASSERT_EQ(ld.nlease, 0);
    ASSERT_OK(store_put_sem(st, &b));
    ASSERT_OK(store_put_lease(st, &l));
    commit_ok(st);
    store_close(st);
    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 1);
    ASSERT_EQ(store_check(dir, stderr), 0);
}

/* The database cannot be written but the journal can: commits succeed (the journal holds
 * them), checkpoints fail and are tried again, and nothing is lost, with or without a
 * clean close. */
TEST(failed_checkpoint_keeps_commits_in_the_journal)
{
    const char *dir = data_dir();
    store_t *st;
    char err[512] = "";
    struct loaded ld;
    uint64_t cks, ck_fails;

    hook_writes();
    st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 5, 1), b = sem_rec("beta", 2, 0);
    store_lease_t l = lease_rec("L1", "alpha", 1, 1);
    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    write_errno = EIO;
    ASSERT_OK(store_put_sem(st, &b));
    ASSERT_OK(store_put_lease(st, &l));
    commit_ok(st); /* durable in the journal */
    ASSERT_EQ(store_checkpoint(st, err, sizeof err), SEMA_EIO);
    fprintf(stderr, "checkpoint failed as it should: %s\n", err);
    store_checkpoint_stats(st, &cks, &ck_fails);
    ASSERT_GT(ck_fails, 0);
    load_ok(st, &ld); /* read with the journal's changes, in a transaction rolled back */
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 1);
    store_close(st); /* its last checkpoint fails too: the journal keeps it all */
    write_errno = 0;
    reload(dir, &ld); /* replayed at open */
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 1);
    ASSERT_EQ(store_check(dir, stderr), 0);
}

TEST(write_error_rolls_back_and_recovers)
{
    write_failure_case(EIO, "I/O error");
}

TEST(no_space_rolls_back_and_recovers)
{
    write_failure_case(ENOSPC, "disk full");
}

/* Mount a small tmpfs at `dir` in a private mount namespace (gone when the test exits).
 * Skips when the system does not allow it (not root, no user namespaces). */
static void mount_small_fs(const char *dir, const char *size)
{
    if (unshare(CLONE_NEWNS) != 0)
        TEST_SKIP("cannot create a mount namespace (needs CAP_SYS_ADMIN)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        TEST_SKIP("cannot make mounts private");
    ASSERT_OK(mkdir(dir, 0700));
    if (mount("tmpfs", dir, "tmpfs", 0, size) != 0)
        TEST_SKIP("cannot mount a tmpfs");
}

/* Fill the filesystem with a file but for `spare` bytes; returns its path (remove it to
 * free the space). */
static void fill_fs(const char *dir, char *path, size_t len, off_t spare)
{
    char block[4096];
    off_t size;
    int fd;

    path_in(path, len, dir, "filler");
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT(fd >= 0);
    memset(block, 'x', sizeof block);
    while (write(fd, block, sizeof block) > 0)
        ;
    ASSERT_EQ(errno, ENOSPC);
    size = lseek(fd, 0, SEEK_END);
    ASSERT_OK(ftruncate(fd, size > spare ? size - spare : 0));
    close(fd);
}

/* Count the leases store_load delivers, and keep the id of the one with the highest fence. */
struct counted {
    int n;
    uint64_t top;
    char top_id[32];
};

static void count_lease(void *arg, const store_lease_t *l)
{
    struct counted *c = arg;

    c->n++;
    if (l->fence >= c->top) {
        c->top = l->fence;
        snprintf(c->top_id, sizeof c->top_id, "%s", l->id);
    }
}

TEST(full_disk_rolls_back_and_recovers)
{
    const char *dir = data_dir();
    char filler[256], err[512] = "", owner[2048];
    store_t *st;
    struct loaded ld;
    int rc = 0, i;

    mount_small_fs(dir, "size=4m");
    st = open_ok(dir, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 100, 0);
    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    fill_fs(dir, filler, sizeof filler, 98304);

    memset(owner, 'o', sizeof owner - 1);
    owner[sizeof owner - 1] = '\0';
    /* Commit until the disk refuses: first into the journal's preallocated room (the
     * checkpoints into the database fail meanwhile), then the journal has to grow. Each
     * commit is all or nothing. */
    for (i = 0; i < 5000 && rc == 0; i++) {
        char id[32];
        snprintf(id, sizeof id, "L%03d", i);
        store_lease_t l = lease_rec(id, "alpha", 1, (uint64_t)i + 1);
        l.owner = owner;
        a.fence = (uint64_t)i + 1;
        rc = store_put_sem(st, &a);
        if (rc == 0)
            rc = store_put_lease(st, &l);
        int crc = store_commit(st, err, sizeof err);
        rc = rc != 0 ? rc : crc;
    }
    fprintf(stderr, "commit %d failed: %s: %s\n", i, sema_err_name(rc), err);
    ASSERT_EQ(rc, SEMA_EIO);
    ASSERT(strstr(err, "disk full") != NULL);
    ASSERT_GT(i, 2); /* some commits fitted in the spare room */
    ASSERT_EQ(store_pending(st), 0);
    int committed = i - 1;

    ASSERT_OK(unlink(filler)); /* room again: the same store goes on working */
    store_lease_t last = lease_rec("after", "alpha", 1, 1000);
    a.fence = 1000;
    ASSERT_OK(store_put_sem(st, &a));
    ASSERT_OK(store_put_lease(st, &last));
    commit_ok(st);
    struct counted c = {0};
    memset(&ld, 0, sizeof ld);
    ASSERT_OK(store_load(st, NULL, count_lease, &c, err, sizeof err));
    store_close(st);
    ASSERT_EQ(c.n, committed + 1); /* every acknowledged commit, and the one after */
    ASSERT_STREQ(c.top_id, "after");
    reload_sems(dir, &ld);
    ASSERT_EQ(ld.nsem, 1);
    ASSERT_EQ(ld.sem[0].fence, 1000);
    ASSERT_EQ(store_check(dir, stderr), 0);
}

/* ---- refusing to start ----------------------------------------------------------------- */

TEST(refuses_garbage_file)
{
    const char *dir = data_dir();
    char path[256], err[512] = "";
    int fd;

    ASSERT_OK(mkdir(dir, 0700));
    path_in(path, sizeof path, dir, "sema.db");
    fd = open(path, O_WRONLY | O_CREAT, 0600);
    ASSERT(fd >= 0);
    for (int i = 0; i < 64; i++)
        ASSERT_EQ(write(fd, "this is not a database, it is a text file.\n", 43), 43);
    close(fd);
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_ECORRUPT);
    ASSERT(strstr(err, path) != NULL);
    ASSERT(strstr(err, "not a database") != NULL);
}

TEST(refuses_damaged_database)
{
    const char *dir = data_dir();
    char path[256], err[512] = "", junk[4096];
    store_t *st = open_ok(dir, STORE_STRICT);
    int fd;

    /* Enough rows for several b-tree pages, then a checkpoint into the main file. */
    for (int i = 0; i < 2000; i++) {
        char name[32];
        snprintf(name, sizeof name, "sem-%05d", i);
        store_sem_t s = sem_rec(name, 3, 0);
        ASSERT_OK(store_put_sem(st, &s));
    }
    commit_ok(st);
    store_close(st);
    path_in(path, sizeof path, dir, "sema.db");
    raw_sql(dir, "PRAGMA wal_checkpoint(TRUNCATE)");
    memset(junk, 0x5a, sizeof junk);
    fd = open(path, O_WRONLY);
    ASSERT(fd >= 0);
    ASSERT_EQ(pwrite(fd, junk, sizeof junk, 4096 * 3), (ssize_t)sizeof junk);
    close(fd);
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_ECORRUPT);
    ASSERT(strstr(err, path) != NULL);
    ASSERT_NE(store_check(dir, stderr), 0);
}

TEST(refuses_log_without_database)
{
    const char *dir = data_dir();
    char err[512] = "", db[256], wal[256];
    int fd;

    make_store(dir);
    path_in(db, sizeof db, dir, "sema.db");
    path_in(wal, sizeof wal, dir, "sema.db-wal");
    ASSERT_OK(unlink(db));
    fd = open(wal, O_WRONLY | O_CREAT, 0600);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "frames", 6), 6);
    close(fd);
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_ECORRUPT);
    ASSERT(strstr(err, "write-ahead log") != NULL);
    ASSERT(access(db, F_OK) != 0); /* refused without creating an empty store */
}

TEST(refuses_other_format_version)
{
    const char *dir = data_dir();
    char err[512] = "";

    make_store(dir);
    raw_sql(dir, "PRAGMA user_version = 99");
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_EVERSION);
    ASSERT(strstr(err, "sema.db") != NULL);
    ASSERT(strstr(err, "version 99") != NULL);
    ASSERT_EQ(store_check(dir, stderr), SEMA_EVERSION);
}

static int check_output(const char *dir, char *buf, size_t len);

/* A store of format 1 (before leases remembered their token) is upgraded in place when it
 * is opened: its leases load, with no token, and the file is of the current format. */
TEST(upgrades_format_1)
{
    const char *dir = data_dir();
    struct loaded ld;
    char out[4096];

    make_store(dir);
    raw_sql(dir, "ALTER TABLE leases DROP COLUMN parts; ALTER TABLE leases DROP COLUMN tenant;"
                 "ALTER TABLE semaphores DROP COLUMN tenant_max;"
                 "ALTER TABLE semaphores DROP COLUMN rate_per_s;"
                 "ALTER TABLE semaphores DROP COLUMN rate_burst;"
                 "ALTER TABLE leases DROP COLUMN principal; DROP TABLE tickets;"
                 "INSERT INTO leases VALUES('old','alpha',1,NULL,NULL,2,1000,1,1001,0);"
                 "PRAGMA user_version = 1;");
    ASSERT_EQ(check_output(dir, out, sizeof out), 0);
    ASSERT(strstr(out, "format version 1 is upgraded to 4") != NULL);
    reload(dir, &ld);
    ASSERT_EQ(ld.nlease, 2);
    ASSERT_NULL(ld.lease[0].principal);
    raw_sql(dir, "INSERT INTO leases(id, sem, weight, owner, idem_key, fence, ttl_ms, acquired_at,"
                 " expires_at, is_lock, principal) VALUES('new','alpha',1,NULL,NULL,3,1000,1,"
                 "1001,0,'ops')");
    reload(dir, &ld);
    ASSERT_EQ(ld.nlease, 3);
    ASSERT_STREQ(ld.lease[2].principal, "ops");
}

TEST(refuses_foreign_database)
{
    const char *dir = data_dir();
    char err[512] = "";

    ASSERT_OK(mkdir(dir, 0700));
    raw_sql(dir, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_ECORRUPT);
    ASSERT(strstr(err, "not a sema store") != NULL);
}

TEST(refuses_locked_dir)
{
    const char *dir = data_dir();
    char err[512] = "", pid[32];
    store_t *st = open_ok(dir, STORE_STRICT);
    pid_t child;
    int status;

    /* A second handle in this process: flock is per open file description. */
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_EBUSY);
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    ASSERT(strstr(err, pid) != NULL);
    ASSERT(strstr(err, "LOCK") != NULL);
    /* Another process. */
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        store_t *st2 = NULL;
        int rc = store_open(&st2, dir, STORE_STRICT, err, sizeof err);
        _exit(rc == SEMA_EBUSY && strstr(err, pid) != NULL ? 0 : 1);
    }
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    /* Released on close: the next semad starts. */
    store_close(st);
    st = open_ok(dir, STORE_STRICT);
    store_close(st);
}

TEST(refuses_unusable_dir)
{
    const char *dir = data_dir();
    char err[512] = "", file[256], below[300];
    int fd;

    /* A data directory path that runs through a regular file. */
    ASSERT_OK(mkdir(dir, 0700));
    path_in(file, sizeof file, dir, "plain-file");
    fd = open(file, O_WRONLY | O_CREAT, 0600);
    ASSERT(fd >= 0);
    close(fd);
    snprintf(below, sizeof below, "%s/sub", file);
    ASSERT_NE(open_fails(below, err, sizeof err), 0);
    ASSERT(strstr(err, "plain-file") != NULL);
    ASSERT_EQ(open_fails(file, err, sizeof err), SEMA_EIO);
    ASSERT(strstr(err, "not a directory") != NULL);
}

TEST(refuses_unwritable_dir)
{
    const char *dir = data_dir();
    char err[512] = "", sub[300];

    if (geteuid() == 0)
        TEST_SKIP("root ignores directory permissions (refuses_read_only_dir covers EACCES)");
    ASSERT_OK(mkdir(dir, 0500));
    snprintf(sub, sizeof sub, "%s/nope", dir);
    ASSERT_EQ(open_fails(sub, err, sizeof err), SEMA_EACCES);
    ASSERT(strstr(err, "Permission denied") != NULL);
    ASSERT_EQ(open_fails(dir, err, sizeof err), SEMA_EACCES); /* cannot create LOCK */
    ASSERT_OK(chmod(dir, 0700));
}

TEST(refuses_read_only_dir)
{
    const char *dir = data_dir();
    char err[512] = "", sub[300];
    store_t *st;

    mount_small_fs(dir, "size=4m");
    snprintf(sub, sizeof sub, "%s/store", dir);
    st = open_ok(sub, STORE_STRICT);
    store_sem_t a = sem_rec("alpha", 1, 0);
    ASSERT_OK(store_put_sem(st, &a));
    commit_ok(st);
    store_close(st);
    if (mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0)
        TEST_SKIP("cannot remount read-only");
    /* An existing store on a read-only filesystem, and a directory that cannot be made. */
    ASSERT_EQ(open_fails(sub, err, sizeof err), SEMA_EACCES);
    ASSERT(strstr(err, "Read-only file system") != NULL);
    snprintf(sub, sizeof sub, "%s/new", dir);
    ASSERT_EQ(open_fails(sub, err, sizeof err), SEMA_EACCES);
    ASSERT(strstr(err, sub) != NULL);
}

TEST(none_durability_is_not_a_store)
{
    const char *dir = data_dir();
    char err[512] = "";
    store_t *st = NULL;

    ASSERT_EQ(store_open(&st, dir, STORE_NONE, err, sizeof err), SEMA_EINVAL);
    ASSERT_NULL(st);
    store_close(NULL);
}

/* ---- the offline check ----------------------------------------------------------------- */

static int check_output(const char *dir, char *buf, size_t len)
{
    FILE *f = fmemopen(buf, len, "w");
    int rc;

    ASSERT_NOT_NULL(f);
    rc = store_check(dir, f);
    fclose(f);
    fprintf(stderr, "%s", buf);
    return rc;
}

TEST(check_sound_store)
{
    const char *dir = data_dir();
    static char out[8192];
    char path[256];
    struct stat sb;

    ASSERT_EQ(check_output(dir, out, sizeof out), SEMA_ENOENT);
    ASSERT_NE(stat(dir, &sb), 0); /* checking never creates a store */
    make_store(dir);
    ASSERT_EQ(check_output(dir, out, sizeof out), 0);
    ASSERT(strstr(out, "2 semaphores, 1 leases") != NULL);
    ASSERT(strstr(out, "result: ok") != NULL);
    ASSERT(strstr(out, "lock: free") != NULL);
    /* While a semad holds it, the check reads a snapshot and says so. */
    store_t *st = open_ok(dir, STORE_STRICT);
    ASSERT_EQ(check_output(dir, out, sizeof out), 0);
    ASSERT(strstr(out, "held by a running semad") != NULL);
    store_close(st);
    path_in(path, sizeof path, dir, "sema.db");
    ASSERT_OK(stat(path, &sb));
}

TEST(check_after_a_crash_reads_the_journal_and_changes_nothing)
{
    const char *dir = data_dir();
    static char out[8192];
    char jnl[256], db[256];
    struct stat db_before, db_after;
    struct stat before, after;
    pid_t child;
    int status;

    /* A semad that commits and dies without closing: its commits are only in the journal. */
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        char err[512];
        store_t *st = NULL;
        store_sem_t a = sem_rec("alpha", 5, 3), b = sem_rec("beta", 1, 0);
        store_lease_t l = lease_rec("L1", "alpha", 2, 3);
        int rc = store_open(&st, dir, STORE_STRICT, err, sizeof err);
        rc = rc ? rc : store_put_sem(st, &a);
        rc = rc ? rc : store_put_sem(st, &b);
        rc = rc ? rc : store_put_lease(st, &l);
        rc = rc ? rc : store_commit(st, err, sizeof err);
        _exit(rc == 0 ? 0 : 1); /* no store_close: like SIGKILL */
    }
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    path_in(jnl, sizeof jnl, dir, "sema.journal");
    path_in(db, sizeof db, dir, "sema.db");
    ASSERT_OK(stat(jnl, &before));
    ASSERT_OK(stat(db, &db_before));
    ASSERT_EQ(check_output(dir, out, sizeof out), 0);
    ASSERT(strstr(out, "journal: 1 commits (3 changes) not yet in sema.db") != NULL);
    ASSERT(strstr(out, "2 semaphores, 1 leases") != NULL); /* checked with them applied */
    ASSERT(strstr(out, "lock: free") != NULL);
    ASSERT_OK(stat(jnl, &after)); /* neither file written */
    ASSERT_OK(stat(db, &db_after));
    ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
    ASSERT_EQ(db_after.st_size, db_before.st_size);
    ASSERT_EQ(db_after.st_mtim.tv_nsec, db_before.st_mtim.tv_nsec);
    struct loaded ld;
    reload(dir, &ld); /* and the next semad finds everything */
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 1);
}

/* A checkpoint that wrote the database but could not start the journal over (the first
 * record's place zeroed, the new header not written): the journal takes no record until a
 * reset succeeds (the next commit's first step), so nothing is written where a replay would
 * not find it. Checked after a crash. */
TEST(journal_reset_failure_blocks_records_until_a_reset_succeeds)
{
    const char *dir = data_dir();
    pid_t child = fork();
    int status;
    struct loaded ld;

    ASSERT(child >= 0);
    if (child == 0) {
        char err[512];
        store_t *st = NULL;
        store_sem_t a = sem_rec("alpha", 5, 1), b = sem_rec("beta", 2, 0);
        int rc = store_open(&st, dir, STORE_STRICT, err, sizeof err);
        rc = rc ? rc : store_put_sem(st, &a);
        rc = rc ? rc : store_commit(st, err, sizeof err);
        if (rc == 0) {
            store_inject_journal_errno(EIO, 1); /* the reset's first write only */
            rc = store_checkpoint(st, err, sizeof err) == SEMA_EIO ? 0 : 1; /* db written */
            rc = rc ? rc : store_put_sem(st, &b);
            rc = rc ? rc : (store_commit(st, err, sizeof err) == SEMA_EIO ? 0 : 2);
            store_inject_journal_errno(0, 0);
        }
        rc = rc ? rc : store_put_sem(st, &b);
        rc = rc ? rc : store_commit(st, err, sizeof err); /* resets, then appends */
        _exit(rc == 0 ? 0 : 10 + rc);
    }
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_STREQ(ld.sem[0].name, "alpha");
    ASSERT_STREQ(ld.sem[1].name, "beta");
}

/* Commits in a child that dies without closing (like SIGKILL): `n` semaphores "s0".. in
 * commits of their own, each with a lease ("L0"..) granted, then (`end`) the lease of
 * every even one released in a later commit. */
static void crash_after_commits(const char *dir, int n, int end)
{
    pid_t child = fork();
    int status;

    ASSERT(child >= 0);
    if (child == 0) {
        char err[512], name[16], id[16];
        store_t *st = NULL;
        int rc = store_open(&st, dir, STORE_STRICT, err, sizeof err);
        for (int i = 0; rc == 0 && i < n; i++) {
            snprintf(name, sizeof name, "s%d", i);
            snprintf(id, sizeof id, "L%d", i);
            store_sem_t s = sem_rec(name, 3, (uint64_t)i + 1);
            store_lease_t l = lease_rec(id, name, 1, (uint64_t)i + 1);
            l.created = 1;
            rc = store_put_sem(st, &s);
            rc = rc ? rc : store_put_lease(st, &l);
            rc = rc ? rc : store_commit(st, err, sizeof err);
        }
        for (int i = 0; rc == 0 && end && i < n; i += 2) {
            snprintf(id, sizeof id, "L%d", i);
            rc = store_del_lease(st, id);
            rc = rc ? rc : store_commit(st, err, sizeof err);
        }
        _exit(rc == 0 ? 0 : 1);
    }
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The database cannot be written when a start replays the journal: the start fails, and
 * the journal stays as it was for the next one, which finds everything. */
TEST(failed_replay_at_open_keeps_the_journal)
{
    const char *dir = data_dir();
    char err[512] = "";
    store_t *st = NULL;
    struct loaded ld;

    crash_after_commits(dir, 2, 0);
    hook_writes();
    write_errno = EIO;
    write_errno_min = 4096; /* the pages the replay writes, not what opening writes */
    ASSERT_NE(store_open(&st, dir, STORE_STRICT, err, sizeof err), 0);
    fprintf(stderr, "the start failed as it should: %s\n", err);
    ASSERT(strstr(err, "journal") != NULL); /* in the replay, not before it */
    write_errno = 0;
    write_errno_min = 0;
    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 2);
}

/* A crash in the middle of writing a commit leaves a torn record at the journal's end:
 * the commits before it come back, that one does not (it was never acknowledged). */
TEST(torn_journal_tail_loses_only_the_unacknowledged_commit)
{
    const char *dir = data_dir();
    char jnl[256];
    unsigned char buf[65536];
    struct loaded ld;
    ssize_t n, last = -1;
    int fd;

    crash_after_commits(dir, 3, 0);
    path_in(jnl, sizeof jnl, dir, "sema.journal");
    fd = open(jnl, O_RDWR);
    ASSERT(fd >= 0);
    n = pread(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 4096);
    for (ssize_t i = 4096; i < n; i++)
        if (buf[i] != 0)
            last = i;
    ASSERT_GT(last, 4096);
    buf[last] ^= 0xFF; /* the third commit's last byte never reached the disk */
    ASSERT_EQ(pwrite(fd, buf + last, 1, last), 1);
    close(fd);
    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 2);
    ASSERT_STREQ(ld.sem[0].name, "s0");
    ASSERT_STREQ(ld.sem[1].name, "s1");
    reload(dir, &ld); /* the replay is durable: the same again */
    ASSERT_EQ(ld.nsem, 2);
    ASSERT_EQ(ld.nlease, 2);
}

/* Between two checkpoints a lease's writes are coalesced: one granted and released is
 * written neither way, one released after a checkpoint wrote it is deleted, and a renewal
 * keeps its last expiry. The same after a crash (replayed from the journal) and after a
 * clean close (checkpointed). */
TEST(leases_ended_between_checkpoints_stay_ended)
{
    const char *dir = data_dir();
    struct loaded ld;
    store_t *st;

    crash_after_commits(dir, 6, 1);
    reload(dir, &ld);
    ASSERT_EQ(ld.nsem, 6);
    ASSERT_EQ(ld.nlease, 3);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(ld.lease[i].id[1] % 2, 1); /* L1, L3, L5 */

    st = open_ok(dir, STORE_STRICT);
    store_lease_t l1 = lease_rec("L1", "s1", 1, 2), g = lease_rec("G", "s0", 1, 50);
    l1.expires_at_ms += 60000; /* renewed: not created */
    g.created = 1;
    ASSERT_OK(store_put_lease(st, &l1));
    commit_ok(st);
    ASSERT_OK(store_put_lease(st, &g));
    commit_ok(st);
    l1.expires_at_ms += 60000;
    ASSERT_OK(store_put_lease(st, &l1));
    commit_ok(st);
    ASSERT_OK(store_del_lease(st, "G"));
    ASSERT_OK(store_del_lease(st, "L3")); /* written by the replay's checkpoint */
    commit_ok(st);
    load_ok(st, &ld); /* a checkpoint first */
    ASSERT_EQ(ld.nlease, 2);
    ASSERT_STREQ(ld.lease[0].id, "L1");
    ASSERT_EQ(ld.lease[0].expires_at_ms, l1.expires_at_ms);
    ASSERT_OK(store_del_lease(st, "L1")); /* after the checkpoint wrote its row */
    commit_ok(st);
    store_close(st);
    reload(dir, &ld);
    ASSERT_EQ(ld.nlease, 1);
    ASSERT_STREQ(ld.lease[0].id, "L5");
}

TEST(check_finds_broken_invariants)
{
    const char *dir = data_dir();
    static char out[8192];

    make_store(dir);
    /* alpha's fence is 3: a lease with fence 8, a reused fence, a lease of no semaphore. */
    raw_sql(dir, "INSERT INTO leases(id, sem, weight, owner, idem_key, fence, ttl_ms, acquired_at,"
                 " expires_at, is_lock) VALUES('bad1','alpha',1,NULL,NULL,8,1000,1,1001,0),"
                 "('bad2','alpha',1,NULL,NULL,3,1000,1,1001,0),"
                 "('bad3','ghost',1,NULL,NULL,1,1000,1,1001,0);");
    ASSERT_EQ(check_output(dir, out, sizeof out), SEMA_ECORRUPT);
    ASSERT(strstr(out, "lease bad1 of alpha: fence 8 > semaphore fence 3") != NULL);
    ASSERT(strstr(out, "semaphore alpha: fence 3 in 2 leases") != NULL);
    ASSERT(strstr(out, "lease bad3 of ghost") != NULL);
    ASSERT(strstr(out, "result: FAILED") != NULL);
}

TEST(check_notes_shrunk_semaphore)
{
    const char *dir = data_dir();
    static char out[8192];

    make_store(dir);
    raw_sql(dir, "UPDATE semaphores SET capacity = 1 WHERE name = 'alpha'");
    ASSERT_EQ(check_output(dir, out, sizeof out), 0);
    ASSERT(strstr(out, "held 2 > capacity 1") != NULL);
    ASSERT(strstr(out, "1 notes") != NULL);
}
