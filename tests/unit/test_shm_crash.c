/* SPDX-License-Identifier: MIT */
/* test_shm_crash.c - the shared-memory semaphore across real processes: dead holders and
 * waiters, PID reuse, a lock owner that dies, the fast-path window, concurrent creators,
 * and forked stress with a witness counter. Children only call libsema and _exit. */
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <grp.h>
#include <sys/resource.h>

#include "test_shm_util.h"

static char nbuf[64];

/* A child that opens `name`, takes `weight` (waiting up to timeout_ms), writes one byte to
 * `ready` (when it holds) and then sleeps until killed. */
static pid_t holder_child(const char *name, uint64_t weight, int64_t timeout_ms, int ready)
{
    pid_t pid = tshm_fork();
    if (pid == 0) {
        sema_shm_t *h = NULL;
        if (sema_shm_open(name, 0, SEMA_SHM_EXISTING, 0, &h) != 0 ||
            sema_shm_acquire(h, weight, timeout_ms) != 0)
            _exit(3);
        if (write(ready, "x", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    return pid;
}

static void read_byte(int fd)
{
    char c;
    ASSERT_EQ(read(fd, &c, 1), 1);
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    ASSERT_EQ(tshm_wait(pid, 5000), 128 + SIGKILL);
}

TEST(killed_holder_units_return_on_next_operation)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 3);
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t c = holder_child(n, 3, 0, p[1]);
    read_byte(p[0]);
    ASSERT_EQ(sema_shm_try_acquire(h, 1), SEMA_EBUSY);
    kill_and_reap(c);
    ASSERT_OK(sema_shm_try_acquire(h, 3)); /* no release was ever called */
    ASSERT_EQ(tshm_stats(h).reclaimed, 3);
    sema_shm_close(h);
    close(p[0]);
    close(p[1]);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Killed but not yet waited for: the pid still exists (a zombie) and holds nothing. */
TEST(zombie_holder_units_return_on_next_operation)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t c = holder_child(n, 2, 0, p[1]);
    read_byte(p[0]);
    kill(c, SIGKILL);
    siginfo_t info;
    ASSERT_OK(waitid(P_PID, (id_t)c, &info, WEXITED | WNOWAIT)); /* dead, left unreaped */
    ASSERT_OK(kill(c, 0));
    ASSERT_OK(sema_shm_try_acquire(h, 2));
    ASSERT_EQ(tshm_wait(c, 5000), 128 + SIGKILL);
    sema_shm_close(h);
    close(p[0]);
    close(p[1]);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(sleeping_waiter_gets_dead_holders_units_within_a_second)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t c = holder_child(n, 2, 0, p[1]);
    read_byte(p[0]);
    pid_t w = tshm_fork(); /* waits for both units */
    if (w == 0) {
        sema_shm_t *x = NULL;
        if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0)
            _exit(3);
        _exit(sema_shm_acquire(x, 2, 10000) == 0 ? 0 : 1);
    }
    ASSERT(TSHM_EVENTUALLY(tshm_stats(h).nwaiters == 1, 5000));
    kill(c, SIGKILL);
    int64_t t0 = tshm_now_ms();
    ASSERT_EQ(tshm_wait(w, 5000), 0);
    ASSERT_LT(tshm_now_ms() - t0, 1000);
    ASSERT_EQ(tshm_wait(c, 1000), 128 + SIGKILL);
    sema_shm_close(h);
    close(p[0]);
    close(p[1]);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(killed_waiter_leaves_the_queue)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2), *f = tshm_open(n, 2);
    int p[2];
    ASSERT_OK(pipe(p));
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    pid_t w = holder_child(n, 2, -1, p[1]); /* queued: wants 2, 1 is held */
    ASSERT(TSHM_EVENTUALLY(tshm_stats(h).nwaiters == 1, 5000));
    kill_and_reap(w);
    ASSERT_EQ(tshm_stats(h).nwaiters, 0);
    ASSERT_OK(sema_shm_try_acquire(f, 1)); /* nobody ahead any more */
    sema_shm_close(h);
    sema_shm_close(f);
    close(p[0]);
    close(p[1]);
    ASSERT_OK(sema_shm_unlink(n));
}

/* A live process (a sleeping child) whose start time differs from the record's: the
 * record belongs to a dead process whose pid was recycled. */
TEST(pid_reuse_does_not_keep_a_dead_holder_alive)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 4);
    pid_t live = tshm_fork();
    if (live == 0) {
        for (;;)
            pause();
    }
    uint64_t start = 0;
    ASSERT(TSHM_EVENTUALLY(sema__shm_proc_start(live, &start) == 0 && start != 0, 2000));
    ASSERT_OK(sema__shm_test_forge(h, live, start + 1, 3)); /* recycled pid */
    ASSERT_OK(sema__shm_test_forge(h, live, start, 1));     /* the real owner */
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.nholders, 1);
    ASSERT_EQ(st.held, 1);
    ASSERT_EQ(st.available, 3);
    kill_and_reap(live);
    st = tshm_stats(h);
    ASSERT_EQ(st.nholders, 0);
    ASSERT_EQ(st.available, 4);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(recycled_pid_holder_reclaimed_by_next_try)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 3);
    pid_t live = tshm_fork();
    if (live == 0) {
        for (;;)
            pause();
    }
    uint64_t start = 0;
    ASSERT(TSHM_EVENTUALLY(sema__shm_proc_start(live, &start) == 0 && start != 0, 2000));
    ASSERT_OK(sema__shm_test_forge(h, live, start + 1, 3));
    ASSERT_OK(sema_shm_try_acquire(h, 3)); /* no stats call in between */
    kill_and_reap(live);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(own_pid_with_other_start_time_is_reclaimed)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    uint64_t start;
    int32_t me = sema__shm_self(&start);
    ASSERT_OK(sema__shm_test_forge(h, me, start + 7, 2));
    ASSERT_OK(sema_shm_try_acquire(h, 2));
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Children that die holding the internal lock, in two flavours. */
static void die_holding_lock(const char *name, uint64_t scribble, int use_sigkill)
{
    pid_t c = tshm_fork();
    if (c == 0) {
        sema_shm_t *h = NULL;
        if (sema_shm_open(name, 0, SEMA_SHM_EXISTING, 0, &h) != 0)
            _exit(3);
        int rc = scribble ? sema__shm_test_lock_scribble(h, scribble) : sema__shm_test_lock(h);
        if (rc != 0)
            _exit(4);
        if (use_sigkill)
            raise(SIGKILL);
        _exit(0);
    }
    int st = tshm_wait(c, 5000);
    ASSERT(st == 0 || st == 128 + SIGKILL);
}

TEST(lock_owner_killed_next_process_repairs)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 3);
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    die_holding_lock(n, 0, 1);
    ASSERT_OK(sema_shm_acquire(h, 2, 0)); /* the word is frozen: this goes through the lock */
    ASSERT_OK(sema_shm_release(h, 0));
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.available, 3);
    ASSERT_EQ(sema__shm_test_state(h)->repairs, 1);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(lock_owner_died_mid_update_state_is_recomputed)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 5);
    ASSERT_OK(sema_shm_acquire(h, 2, 0));
    die_holding_lock(n, 1000, 0); /* left `available` nonsensical */
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.available, 3);
    ASSERT_EQ(st.held, 2);
    ASSERT_EQ(sema_shm_try_acquire(h, 4), SEMA_EBUSY);
    ASSERT_OK(sema_shm_try_acquire(h, 3));
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* A releaser dies inside admission, after recording the grant to the head waiter but
 * before waking it: the repair completes the grant (it must not be lost, nor doubled). */
TEST(lock_owner_died_mid_grant_the_grant_completes)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *w = tshm_open(n, 2);
    int up[2], down[2]; /* child -> parent, parent -> child */
    ASSERT_OK(pipe(up));
    ASSERT_OK(pipe(down));
    pid_t c = tshm_fork();
    if (c == 0) {
        sema_shm_t *x = NULL;
        char b;
        if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0 || sema_shm_acquire(x, 2, 0) != 0)
            _exit(3);
        if (write(up[1], "x", 1) != 1 || read(down[0], &b, 1) != 1) /* wait for the waiter */
            _exit(4);
        _exit(sema__shm_test_lock_half_grant(x) == 0 ? 0 : 5);
    }
    read_byte(up[0]);
    req_t r = {0};
    req_start(&r, w, 2, 5000);
    ASSERT_EQ(write(down[1], "g", 1), 1);
    ASSERT_EQ(tshm_wait(c, 5000), 0);
    ASSERT_OK(req_join(&r));
    ASSERT_EQ(sema_shm_held(w), 2);
    sema_shm_stats_t st = tshm_stats(w);
    ASSERT_EQ(st.available, 0);
    ASSERT_EQ(st.held, 2);
    ASSERT_EQ(st.nwaiters, 0);
    ASSERT_OK(sema_shm_release(w, 0));
    ASSERT_EQ(tshm_stats(w).available, 2);
    sema_shm_close(w);
    for (int i = 0; i < 2; i++) {
        close(up[i]);
        close(down[i]);
    }
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(killed_inside_fast_path_window_is_recounted)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 6);
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    pid_t c = tshm_fork();
    if (c == 0) {
        sema_shm_t *x = NULL;
        if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0 ||
            sema__shm_test_fast_window(x, 2) != 0)
            _exit(3);
        raise(SIGKILL);
    }
    ASSERT_EQ(tshm_wait(c, 5000), 128 + SIGKILL);
    /* The child held 2 (recorded) and took 2 more from the word without a record. */
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.available, 5);
    ASSERT_EQ(st.held, 1);
    ASSERT_OK(sema_shm_try_acquire(h, 5));
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(concurrent_creators_agree)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    enum { N = 8 };
    int go[2], res[2];
    ASSERT_OK(pipe(go));
    ASSERT_OK(pipe(res));
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = tshm_fork();
        if (kids[i] == 0) {
            char c;
            sema_shm_t *h = NULL;
            if (read(go[0], &c, 1) != 1 || sema_shm_open(n, N / 2, 0, 0, &h) != 0)
                _exit(3);
            c = sema_shm_try_acquire(h, 1) == 0 ? 'y' : 'n';
            if (write(res[1], &c, 1) != 1)
                _exit(4);
            for (;;)
                pause(); /* keep holding */
        }
    }
    char buf[N];
    memset(buf, 'y', sizeof(buf));
    ASSERT_EQ(write(go[1], buf, N), N); /* release all creators at once */
    int granted = 0;
    for (int i = 0; i < N; i++) {
        char c;
        ASSERT_EQ(read(res[0], &c, 1), 1);
        granted += c == 'y';
    }
    ASSERT_EQ(granted, N / 2); /* one object: exactly its capacity was handed out */
    for (int i = 0; i < N; i++)
        kill_and_reap(kids[i]);
    sema_shm_t *h = tshm_open(n, N / 2);
    ASSERT_EQ(tshm_stats(h).available, N / 2);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    for (int i = 0; i < 2; i++) {
        close(go[i]);
        close(res[i]);
    }
}

/* --- stress ------------------------------------------------------------------------ */

typedef struct {
    _Atomic int64_t held;     /* witness: units held right now, by the children's account */
    _Atomic int64_t max_held; /* the most ever seen */
    _Atomic int64_t grants, timeouts, errors;
    _Atomic int stop; /* children with iters < 0 loop until this is set */
} witness_t;

static void witness_enter(witness_t *w, int64_t weight, int64_t cap)
{
    int64_t now = atomic_fetch_add(&w->held, weight) + weight;
    int64_t m = atomic_load(&w->max_held);
    while (now > m && !atomic_compare_exchange_weak(&w->max_held, &m, now)) {
    }
    (void)cap;
}

static void stress_child(const char *name, witness_t *w, int64_t cap, unsigned seed, int iters)
{
    sema_shm_t *h = NULL;
    if (sema_shm_open(name, 0, SEMA_SHM_EXISTING, 0, &h) != 0)
        _exit(3);
    for (int i = 0; iters < 0 ? !atomic_load(&w->stop) : i < iters; i++) {
        uint64_t weight = 1 + (uint64_t)rand_r(&seed) % (uint64_t)cap;
        int kind = rand_r(&seed) % 4; /* try, forever, or a short timeout */
        int64_t timeout = kind == 0 ? 0 : kind == 1 ? -1 : rand_r(&seed) % 20;
        int rc = sema_shm_acquire(h, weight, timeout);
        if (rc == SEMA_EBUSY || rc == SEMA_ETIMEDOUT) {
            atomic_fetch_add(&w->timeouts, 1);
            continue;
        }
        if (rc != 0) {
            atomic_fetch_add(&w->errors, 1);
            continue;
        }
        atomic_fetch_add(&w->grants, 1);
        witness_enter(w, (int64_t)weight, cap);
        for (volatile int spin = rand_r(&seed) % 2000; spin > 0; spin--) {
        }
        atomic_fetch_sub(&w->held, (int64_t)weight);
        if (sema_shm_release(h, 0) != 0)
            atomic_fetch_add(&w->errors, 1);
    }
    sema_shm_close(h);
    _exit(0);
}

TEST(forked_stress_never_exceeds_capacity)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    enum { KIDS = 8 };
    const int64_t cap = 5;
    int iters = (int)test_scale(400);
    witness_t *w = tshm_shared(sizeof(*w));
    sema_shm_t *h = tshm_open(n, (uint64_t)cap);
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = tshm_fork();
        if (kids[i] == 0)
            stress_child(n, w, cap, 1234u + (unsigned)i, iters);
    }
    /* While they run: every snapshot must show a head waiter that does not fit (else it
     * would have been granted: nobody barges, a release admits at once), and held +
     * available == capacity. */
    long snapshots = 0, with_waiters = 0;
    for (int running = KIDS; running > 0;) {
        sema_shm_stats_t st = tshm_stats(h);
        snapshots++;
        ASSERT_EQ(st.held + st.available, (uint64_t)cap);
        if (st.nwaiters > 0) {
            with_waiters++;
            ASSERT_GT(st.waiters[0].weight, st.available);
        }
        running = 0;
        for (int i = 0; i < KIDS; i++) {
            int status = 0;
            if (kids[i] > 0 && waitpid(kids[i], &status, WNOHANG) == 0) {
                running++;
            } else if (kids[i] > 0) {
                ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                kids[i] = -1;
            }
        }
    }
    ASSERT_EQ(atomic_load(&w->errors), 0);
    ASSERT_LE(atomic_load(&w->max_held), cap);
    ASSERT_GT(atomic_load(&w->grants), 0);
    ASSERT_EQ(atomic_load(&w->held), 0);
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.available, (uint64_t)cap);
    ASSERT_EQ(st.nholders, 0);
    ASSERT_EQ(st.nwaiters, 0);
    fprintf(stderr,
            "grants %lld, timeouts %lld, max held %lld of %lld, %ld snapshots (%ld with waiters)\n",
            (long long)atomic_load(&w->grants), (long long)atomic_load(&w->timeouts),
            (long long)atomic_load(&w->max_held), (long long)cap, snapshots, with_waiters);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    munmap(w, sizeof(*w));
}

/* FIFO across processes: children queue one after another (each enqueued before the next
 * is forked) with random weights. Every snapshot must show the waiters as a suffix of the
 * queue order: nobody behind a waiter is holding or done. */
typedef struct {
    _Atomic int done[64];
} fifo_log_t;

static int index_of(const pid_t *kids, int n, pid_t pid)
{
    for (int i = 0; i < n; i++)
        if (kids[i] == pid)
            return i;
    return -1;
}

/* `done_before` was read before the snapshot was taken: a child done by then was granted
 * by then, so (FIFO) nobody ahead of it may still be waiting in the snapshot. */
static void check_fifo_snapshot(const sema_shm_stats_t *st, const pid_t *kids, int n,
                                const int *done_before)
{
    int prev = -1;
    for (uint32_t k = 0; k < st->nwaiters; k++) {
        int i = index_of(kids, n, st->waiters[k].pid);
        ASSERT_GT(i, prev); /* waiters listed in queue order */
        prev = i;
    }
    if (st->nwaiters == 0)
        return;
    int first = index_of(kids, n, st->waiters[0].pid);
    for (int i = first + 1; i < n; i++)
        ASSERT_EQ(done_before[i], 0);
    for (uint32_t k = 0; k < st->nholders; k++)
        if (st->holders[k].pid != getpid())
            ASSERT_LT(index_of(kids, n, st->holders[k].pid), first);
}

TEST(fifo_order_holds_across_processes)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    enum { KIDS = 12 };
    const uint64_t cap = 4;
    fifo_log_t *log = tshm_shared(sizeof(*log));
    sema_shm_t *h = tshm_open(n, cap);
    pid_t kids[KIDS];
    unsigned seed = 42;
    ASSERT_OK(sema_shm_acquire(h, cap, 0));
    for (int i = 0; i < KIDS; i++) {
        uint64_t weight = 1 + (uint64_t)rand_r(&seed) % cap;
        kids[i] = tshm_fork();
        if (kids[i] == 0) {
            sema_shm_t *x = NULL;
            if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0 ||
                sema_shm_acquire(x, weight, 20000) != 0)
                _exit(3);
            tshm_sleep_ms(5);
            atomic_store(&log->done[i], 1);
            _exit(sema_shm_release(x, 0) == 0 ? 0 : 4);
        }
        ASSERT(TSHM_EVENTUALLY(tshm_stats(h).nwaiters == (uint32_t)i + 1, 5000));
    }
    ASSERT_OK(sema_shm_release(h, 0));
    sema_shm_stats_t st;
    int done_before[KIDS];
    do {
        for (int i = 0; i < KIDS; i++)
            done_before[i] = atomic_load(&log->done[i]);
        ASSERT_OK(sema_shm_stats(h, &st));
        check_fifo_snapshot(&st, kids, KIDS, done_before);
    } while (st.nwaiters > 0);
    for (int i = 0; i < KIDS; i++)
        ASSERT_EQ(tshm_wait(kids[i], 20000), 0);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    munmap(log, sizeof(*log));
}

/* Children acquire and hold at random; the parent SIGKILLs random ones (holders and
 * waiters alike). Afterwards every unit is back and every survivor finished. */
TEST(sigkill_random_holders_and_waiters)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    enum { KIDS = 10 };
    const int64_t cap = 3;
    witness_t *w = tshm_shared(sizeof(*w));
    sema_shm_t *h = tshm_open(n, (uint64_t)cap);
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = tshm_fork();
        if (kids[i] == 0)
            stress_child(n, w, cap, 99u + (unsigned)i, -1);
    }
    unsigned seed = 7;
    int killed = 0;
    for (int k = 0; k < KIDS / 2; k++) {
        tshm_sleep_ms(5 + rand_r(&seed) % 30);
        int victim = rand_r(&seed) % KIDS;
        if (kids[victim] > 0) {
            kill_and_reap(kids[victim]);
            kids[victim] = -1;
            killed++;
        }
    }
    tshm_sleep_ms(50);
    atomic_store(&w->stop, 1); /* survivors finish: nobody may hang on a dead holder */
    for (int i = 0; i < KIDS; i++)
        if (kids[i] > 0)
            ASSERT_EQ(tshm_wait(kids[i], 20000), 0);
    ASSERT_GT(killed, 0);
    ASSERT_GT(atomic_load(&w->grants), 0);
    ASSERT_EQ(atomic_load(&w->errors), 0);
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.available, (uint64_t)cap);
    ASSERT_EQ(st.nholders, 0);
    ASSERT_EQ(st.nwaiters, 0);
    ASSERT_OK(sema_shm_acquire(h, (uint64_t)cap, 1000));
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    munmap(w, sizeof(*w));
}

/* --- review: liveness checks that must never call a live process dead ----------------- */

static void *park_main(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* Pitfall 18: a process whose main thread called pthread_exit() shows as a zombie ('Z') in
 * /proc/PID/stat while its other threads run on: it is alive and keeps what it holds. */
TEST(pitfall_18_zombie_leader_with_live_threads_keeps_its_units)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t c = tshm_fork();
    if (c == 0) {
        sema_shm_t *x = NULL;
        pthread_t th;
        if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0 || sema_shm_acquire(x, 2, 0) != 0)
            _exit(3);
        if (pthread_create(&th, NULL, park_main, NULL) != 0 || write(p[1], "x", 1) != 1)
            _exit(4);
        pthread_exit(NULL); /* the process lives on in `th`, holding 2 */
    }
    read_byte(p[0]);
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)c);
    int zombie_leader = TSHM_EVENTUALLY(({
                                            int fd = open(path, O_RDONLY);
                                            ssize_t k =
                                                fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
                                            if (fd >= 0)
                                                close(fd);
                                            buf[k > 0 ? k : 0] = '\0';
                                            strstr(buf, ") Z ") != NULL;
                                        }),
                                        5000);
    ASSERT(zombie_leader);
    ASSERT_EQ(sema_shm_try_acquire(h, 1), SEMA_EBUSY);
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.nholders, 1);
    ASSERT_EQ(st.available, 0);
    kill_and_reap(c);
    ASSERT_OK(sema_shm_try_acquire(h, 2));
    sema_shm_close(h);
    close(p[0]);
    close(p[1]);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Pitfall 18: the start time of the calling process could not be read when its slot was
 * claimed (no free descriptor for /proc): the slot records 0 ("unknown"). Its own process
 * must not later call it dead once the start time becomes readable. */
TEST(pitfall_18_own_slot_with_unknown_start_time_is_kept)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    pid_t c = tshm_fork();
    if (c == 0) {
        sema_shm_t *x = NULL, *y = NULL;
        if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0 ||
            sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &y) != 0)
            _exit(3);
        struct rlimit old, low;
        if (getrlimit(RLIMIT_NOFILE, &old) != 0)
            _exit(4);
        low = old;
        low.rlim_cur = 64;
        int fill[64], nfill = 0;
        if (setrlimit(RLIMIT_NOFILE, &low) != 0)
            _exit(5);
        for (int fd; nfill < 64 && (fd = dup(0)) >= 0;)
            fill[nfill++] = fd;
        int rc = sema_shm_acquire(x, 2, 0); /* claims the slot: /proc cannot be opened */
        while (nfill > 0)
            close(fill[--nfill]);
        if (rc != 0 || setrlimit(RLIMIT_NOFILE, &old) != 0)
            _exit(6);
        /* Another handle of the same process misses units: the reaper looks at x's slot. */
        _exit(sema_shm_try_acquire(y, 1) == SEMA_EBUSY && sema_shm_held(x) == 2 ? 0 : 7);
    }
    ASSERT_EQ(tshm_wait(c, 5000), 0);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Pitfall 18 (zombies): a queued waiter killed and not yet waited for must leave the queue on
 * the next operation, as a dead holder does; here a try-acquire finds it at the head. */
TEST(pitfall_18_zombie_waiter_at_head_does_not_block_try)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2), *t = tshm_open(n, 2);
    int p[2];
    ASSERT_OK(pipe(p));
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    pid_t w = holder_child(n, 2, -1, p[1]); /* queued: wants 2, 1 is held */
    ASSERT(TSHM_EVENTUALLY(tshm_stats(h).nwaiters == 1, 5000));
    kill(w, SIGKILL);
    siginfo_t info;
    ASSERT_OK(waitid(P_PID, (id_t)w, &info, WEXITED | WNOWAIT)); /* dead, left unreaped */
    ASSERT_OK(sema_shm_try_acquire(t, 1));                       /* no stats call in between */
    ASSERT_EQ(tshm_wait(w, 5000), 128 + SIGKILL);
    sema_shm_close(h);
    sema_shm_close(t);
    close(p[0]);
    close(p[1]);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Pitfall 12: the stats' `waiting` is a sum of up to 128 weights of up to 2^62 each. */
TEST(pitfall_12_stats_waiting_sum_does_not_wrap)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    const uint64_t cap = UINT64_C(1) << 62;
    enum { W = 4 };
    sema_shm_t *h = tshm_open(n, cap), *ws[W];
    req_t r[W];
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    for (int i = 0; i < W; i++) {
        ws[i] = tshm_open(n, cap);
        req_start(&r[i], ws[i], cap, -1);
    }
    sema_shm_stats_t st = tshm_stats(h);
    ASSERT_EQ(st.nwaiters, W);
    ASSERT_EQ(st.waiting, UINT64_MAX); /* saturated, not 4 * 2^62 mod 2^64 == 0 */
    for (int i = 0; i < W; i++)
        ASSERT_OK(sema_shm_cancel(ws[i]));
    for (int i = 0; i < W; i++) {
        ASSERT_EQ(req_join(&r[i]), SEMA_ECANCELED);
        sema_shm_close(ws[i]);
    }
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Pitfall 18 (PID namespaces): in another PID namespace (a container sharing /dev/shm) a
 * pid means nothing here, or names another process, so liveness by pid would take a live
 * holder for dead and hand its units out twice. A process of another PID namespace than the
 * semaphore's creator is refused at open. */
TEST(pitfall_18_other_pid_namespace_is_refused_at_open)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t c = tshm_fork();
    if (c == 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0)
            _exit(77);
        pid_t g = fork(); /* pid 1 of the new namespace */
        if (g < 0)
            _exit(4);
        if (g == 0) {
            sema_shm_t *x = NULL;
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the child killed below */
            /* A container's own /proc: here pid 1 is this process. */
            if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
                _exit(77);
            int rc[2] = {sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x), 1};
            if (rc[0] == 0)
                rc[1] = sema_shm_acquire(x, 2, 0); /* (before the fix: granted, and lost) */
            if (write(p[1], rc, sizeof(rc)) != (ssize_t)sizeof(rc))
                _exit(5);
            for (;;)
                pause();
        }
        int status;
        waitpid(g, &status, 0);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 0);
    }
    close(p[1]);
    int rc[2];
    if (read(p[0], rc, sizeof(rc)) != (ssize_t)sizeof(rc)) {
        int st = tshm_wait(c, 5000);
        sema_shm_close(h);
        sema_shm_unlink(n);
        if (st == 77)
            TEST_SKIP("no PID namespaces here");
        TEST_FAIL_("the child in a new PID namespace failed (%d)", st);
    }
    ASSERT_EQ(rc[0], SEMA_EACCES);
    ASSERT_OK(sema_shm_try_acquire(h, 2)); /* nothing was taken from here */
    kill_and_reap(c);                      /* and with it (death signal) pid 1 of the namespace */
    close(p[0]);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Pitfall 18 (hidepid): with /proc mounted hidepid=2 a process cannot read the /proc entries
 * of other users' processes; a semaphore shared by a group (mode 0660) then has holders
 * whose start time is unreadable. Hidden is not dead: their units must not be handed out. */
TEST(pitfall_18_holder_hidden_by_hidepid_is_not_reclaimed)
{
    if (geteuid() != 0)
        TEST_SKIP("needs root to mount a private /proc and switch users");
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = NULL;
    ASSERT_OK(sema_shm_open(n, 1, 0, 0666, &h));
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t c = holder_child(n, 1, 0, p[1]); /* root holds the only unit */
    read_byte(p[0]);
    pid_t o = tshm_fork();
    if (o == 0) {
        sema_shm_t *x = NULL;
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0)
            _exit(77);
        if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
            setresuid(65534, 65534, 65534) != 0)
            _exit(77);
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)c);
        if (access(path, F_OK) == 0)
            _exit(77); /* hidepid not in effect */
        if (sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &x) != 0)
            _exit(3);
        _exit(sema_shm_try_acquire(x, 1) == SEMA_EBUSY ? 0 : 4);
    }
    int rc = tshm_wait(o, 5000);
    kill_and_reap(c);
    close(p[0]);
    close(p[1]);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    if (rc == 77)
        TEST_SKIP("cannot mount /proc with hidepid=2 here");
    ASSERT_EQ(rc, 0);
}
