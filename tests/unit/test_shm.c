/* SPDX-License-Identifier: MIT */
/* test_shm.c - the shared-memory semaphore's rules: open/create, format checks,
 * permissions, weights, FIFO, timeouts, release errors, stats, and the shared scenarios. */
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>

#include "scenario.h"
#include "test_shm_util.h"

static char nbuf[64];

TEST(create_then_reopen_same_capacity)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *a = tshm_open(n, 3), *b = tshm_open(n, 3);
    ASSERT_EQ(sema_shm_capacity(b), 3);
    ASSERT_OK(sema_shm_acquire(a, 2, 0));
    ASSERT_EQ(sema_shm_try_acquire(b, 2), SEMA_EBUSY);
    ASSERT_OK(sema_shm_try_acquire(b, 1));
    sema_shm_close(a);
    sema_shm_close(b);
    ASSERT_OK(sema_shm_unlink(n));
    ASSERT_EQ(sema_shm_unlink(n), SEMA_ENOENT);
}

TEST(other_capacity_is_eexist_unless_adopted)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *a = tshm_open(n, 3), *b = NULL;
    ASSERT_EQ(sema_shm_open(n, 4, 0, 0, &b), SEMA_EEXIST);
    ASSERT_NULL(b);
    ASSERT_OK(sema_shm_open(n, 4, SEMA_SHM_ADOPT, 0, &b));
    ASSERT_EQ(sema_shm_capacity(b), 3);
    sema_shm_close(b);
    ASSERT_OK(sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &b));
    ASSERT_EQ(sema_shm_capacity(b), 3);
    sema_shm_close(b);
    sema_shm_close(a);
    ASSERT_OK(sema_shm_unlink(n));
    ASSERT_EQ(sema_shm_open(n, 0, SEMA_SHM_EXISTING, 0, &b), SEMA_ENOENT);
}

TEST(bad_arguments_are_rejected)
{
    sema_shm_t *h = NULL;
    char longname[SEMA_SHM_NAME_MAX + 2];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    const char *bad[] = {"", ".hidden", "a/b", "a b", "..", "ü"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(sema_shm_open(bad[i], 1, 0, 0, &h), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_open(NULL, 1, 0, 0, &h), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_open(longname, 1, 0, 0, &h), SEMA_ENAMETOOLONG);
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    ASSERT_EQ(sema_shm_open(n, 0, 0, 0, &h), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_open(n, (UINT64_C(1) << 62) + 1, 0, 0, &h), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_open(n, 1, 0x100, 0, &h), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_open(n, 1, 0, 010000, &h), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_open(n, 1, 0, 0, NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_unlink("a/b"), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_acquire(NULL, 1, 0), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_release(NULL, 1), SEMA_EINVAL);
    sema_shm_close(NULL);
}

static unsigned file_mode(const char *name)
{
    char path[300];
    struct stat sb;
    snprintf(path, sizeof(path), "/dev/shm/sema.%s", name);
    ASSERT_OK(stat(path, &sb));
    return sb.st_mode & 07777;
}

TEST(permissions_default_0600_and_configurable)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 1);
    ASSERT_EQ(file_mode(n), 0600);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    mode_t old = umask(077);
    ASSERT_OK(sema_shm_open(n, 1, 0, 0664, &h));
    umask(old);
    ASSERT_EQ(file_mode(n), 0664);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Rewrite the file of `name` through a raw descriptor. */
static void poke_file(const char *name, off_t off, const void *data, size_t len, off_t trunc)
{
    char path[300];
    snprintf(path, sizeof(path), "/dev/shm/sema.%s", name);
    int fd = open(path, O_RDWR);
    ASSERT(fd >= 0);
    if (data != NULL)
        ASSERT_EQ(pwrite(fd, data, len, off), (ssize_t)len);
    if (trunc >= 0)
        ASSERT_OK(ftruncate(fd, trunc));
    close(fd);
}

TEST(other_version_truncated_or_foreign_file_refused)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    sema_shm_close(h);
    uint32_t v = 99;
    poke_file(n, offsetof(shm__state_t, version), &v, sizeof(v), -1);
    ASSERT_EQ(sema_shm_open(n, 2, 0, 0, &h), SEMA_EVERSION);
    poke_file(n, 0, NULL, 0, 4096); /* an old, shorter format */
    ASSERT_EQ(sema_shm_open(n, 2, 0, 0, &h), SEMA_EVERSION);
    v = SHM__VERSION;
    poke_file(n, offsetof(shm__state_t, version), &v, sizeof(v), -1);
    ASSERT_EQ(sema_shm_open(n, 2, 0, 0, &h), SEMA_ECORRUPT); /* truncated */
    poke_file(n, 0, NULL, 0, 10);
    ASSERT_EQ(sema_shm_open(n, 2, 0, 0, &h), SEMA_ECORRUPT);
    poke_file(n, 0, "not a semaphore at all!", 23, sizeof(shm__state_t));
    ASSERT_EQ(sema_shm_open(n, 2, 0, 0, &h), SEMA_ECORRUPT);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(weight_zero_or_above_capacity_invalid)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 3);
    ASSERT_EQ(sema_shm_acquire(h, 0, -1), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_acquire(h, 4, -1), SEMA_EINVAL);
    ASSERT_EQ(sema_shm_try_acquire(h, 4), SEMA_EINVAL);
    ASSERT_OK(sema_shm_acquire(h, 3, 0));
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(release_errors_and_partial_release)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 5), *o = tshm_open(n, 5);
    ASSERT_EQ(sema_shm_release(h, 1), SEMA_ESTALE);
    ASSERT_OK(sema_shm_acquire(h, 2, 0));
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    ASSERT_EQ(sema_shm_held(h), 3);
    ASSERT_EQ(sema_shm_release(h, 4), SEMA_EOVERFLOW);
    ASSERT_EQ(sema_shm_release(o, 1), SEMA_ESTALE); /* units belong to the handle */
    ASSERT_OK(sema_shm_release(h, 1));
    ASSERT_EQ(sema_shm_held(h), 2);
    ASSERT_OK(sema_shm_release(h, 0));
    ASSERT_EQ(sema_shm_release(h, 0), SEMA_ESTALE);
    ASSERT_EQ(tshm_stats(o).available, 5);
    sema_shm_close(h);
    sema_shm_close(o);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(close_returns_held_units)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 4), *o = tshm_open(n, 4);
    ASSERT_OK(sema_shm_acquire(h, 3, 0));
    ASSERT_EQ(tshm_stats(o).available, 1);
    sema_shm_close(h);
    ASSERT_EQ(tshm_stats(o).available, 4);
    sema_shm_close(o);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(unlink_keeps_open_handles_working)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 1);
    ASSERT_OK(sema_shm_unlink(n));
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    sema_shm_t *fresh = tshm_open(n, 1); /* a new object under the old name */
    ASSERT_OK(sema_shm_acquire(fresh, 1, 0));
    sema_shm_close(fresh);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(try_never_jumps_the_queue)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *a = tshm_open(n, 3), *b = tshm_open(n, 3), *t = tshm_open(n, 3);
    req_t rb;
    ASSERT_OK(sema_shm_acquire(a, 2, 0));
    req_start(&rb, b, 2, -1);
    ASSERT_EQ(sema_shm_try_acquire(t, 1), SEMA_EBUSY); /* 1 unit free, but b is first */
    ASSERT_EQ(sema_shm_acquire(t, 1, 30), SEMA_ETIMEDOUT);
    ASSERT_OK(sema_shm_release(a, 0));
    ASSERT_OK(req_join(&rb));
    ASSERT_OK(sema_shm_try_acquire(t, 1));
    sema_shm_close(a);
    sema_shm_close(b);
    sema_shm_close(t);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(timeout_dequeues_and_admits_followers)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *a = tshm_open(n, 2), *t = tshm_open(n, 2), *f = tshm_open(n, 2);
    req_t rt, rf;
    ASSERT_OK(sema_shm_acquire(a, 1, 0));
    int64_t t0 = tshm_now_ms();
    req_start(&rt, t, 2, 60);
    req_start(&rf, f, 1, -1);
    ASSERT_EQ(req_join(&rt), SEMA_ETIMEDOUT);
    ASSERT_GE(tshm_now_ms() - t0, 55);
    ASSERT_OK(req_join(&rf));
    sema_shm_stats_t st = tshm_stats(a);
    ASSERT_EQ(st.nwaiters, 0);
    ASSERT_EQ(st.available, 0);
    sema_shm_close(a);
    sema_shm_close(t);
    sema_shm_close(f);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(cancel_withdraws_and_admits_followers)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *a = tshm_open(n, 4), *hd = tshm_open(n, 4), *f = tshm_open(n, 4);
    req_t rh, rf;
    ASSERT_OK(sema_shm_acquire(a, 3, 0));
    req_start(&rh, hd, 3, -1);
    req_start(&rf, f, 1, -1);
    ASSERT_EQ(atomic_load(&rf.done), 0);
    ASSERT_OK(sema_shm_cancel(hd));
    ASSERT_EQ(req_join(&rh), SEMA_ECANCELED);
    ASSERT_OK(req_join(&rf));
    ASSERT_EQ(sema_shm_cancel(hd), SEMA_ENOENT);
    sema_shm_close(a);
    sema_shm_close(hd);
    sema_shm_close(f);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(stats_lists_holders_and_waiters_in_fifo_order)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *a = tshm_open(n, 5), *w1 = tshm_open(n, 5), *w2 = tshm_open(n, 5);
    req_t r1, r2;
    int64_t before = (int64_t)time(NULL) * 1000 - 10;
    ASSERT_OK(sema_shm_acquire(a, 4, 0));
    req_start(&r1, w1, 3, -1);
    req_start(&r2, w2, 1, -1);
    sema_shm_stats_t st = tshm_stats(a);
    ASSERT_EQ(st.capacity, 5);
    ASSERT_EQ(st.available, 1);
    ASSERT_EQ(st.held, 4);
    ASSERT_EQ(st.nholders, 1);
    ASSERT_EQ(st.holders[0].pid, getpid());
    ASSERT_EQ(st.holders[0].weight, 4);
    ASSERT_GE(st.holders[0].since_ms, before);
    ASSERT_EQ(st.nwaiters, 2);
    ASSERT_EQ(st.waiters[0].weight, 3);
    ASSERT_EQ(st.waiters[1].weight, 1);
    ASSERT_EQ(st.waiting, 4);
    ASSERT_OK(sema_shm_release(a, 0));
    ASSERT_OK(req_join(&r1));
    ASSERT_OK(req_join(&r2));
    sema_shm_close(a);
    sema_shm_close(w1);
    sema_shm_close(w2);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(slot_limit_is_elimit)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    static sema_shm_t *hs[SEMA_SHM_MAX_SLOTS + 1];
    for (int i = 0; i <= SEMA_SHM_MAX_SLOTS; i++)
        hs[i] = tshm_open(n, 1000);
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++)
        ASSERT_OK(sema_shm_acquire(hs[i], 1, 0));
    ASSERT_EQ(sema_shm_acquire(hs[SEMA_SHM_MAX_SLOTS], 1, 0), SEMA_ELIMIT);
    sema_shm_close(hs[0]);
    ASSERT_OK(sema_shm_acquire(hs[SEMA_SHM_MAX_SLOTS], 1, 0));
    for (int i = 1; i <= SEMA_SHM_MAX_SLOTS; i++)
        sema_shm_close(hs[i]);
    ASSERT_OK(sema_shm_unlink(n));
}

TEST(handle_is_unusable_after_fork)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 2);
    ASSERT_OK(sema_shm_acquire(h, 1, 0));
    pid_t pid = tshm_fork();
    if (pid == 0) {
        int ok = sema_shm_acquire(h, 1, 0) == SEMA_EINVAL && sema_shm_release(h, 1) == SEMA_EINVAL;
        _exit(ok ? 0 : 1);
    }
    ASSERT_EQ(tshm_wait(pid, 5000), 0);
    ASSERT_EQ(sema_shm_held(h), 1);
    ASSERT_EQ(tshm_stats(h).available, 1);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

/* Strict seccomp allows only read, write, exit and sigreturn: any other system call in the
 * uncontended path kills the child. */
TEST(uncontended_acquire_release_makes_no_system_call)
{
    const char *san = getenv("SEMA_SANITIZE");
    if (san != NULL && san[0] != '\0')
        TEST_SKIP("sanitizer runtimes make their own system calls");
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    sema_shm_t *h = tshm_open(n, 3);
    ASSERT_OK(sema_shm_acquire(h, 1, 0)); /* the first call claims the slot (slow path) */
    ASSERT_OK(sema_shm_release(h, 1));
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t pid = tshm_fork();
    if (pid == 0) {
        sema_shm_t *x = NULL;
        if (sema_shm_open(n, 3, 0, 0, &x) != 0 || sema_shm_acquire(x, 1, 0) != 0 ||
            sema_shm_release(x, 1) != 0)
            _exit(3);
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0)
            _exit(4);
        char ok = 'y';
        for (int i = 0; i < 1000 && ok == 'y'; i++)
            if (sema_shm_acquire(x, 1 + (uint64_t)(i % 3), -1) != 0 || sema_shm_release(x, 0) != 0)
                ok = 'n';
        if (write(p[1], &ok, 1) != 1)
            syscall(SYS_exit, 5);
        syscall(SYS_exit, 0); /* exit_group is not allowed in strict mode */
    }
    char c = 0;
    close(p[1]); /* a killed child means end of file here */
    ASSERT_EQ(read(p[0], &c, 1), 1);
    ASSERT_EQ(c, 'y');
    ASSERT_EQ(tshm_wait(pid, 5000), 0);
    close(p[0]);
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
}

static int count_name(const char *name, void *ud)
{
    const char *want = ((const char **)ud)[0];
    if (strcmp(name, want) == 0)
        ((const char **)ud)[1] = "found";
    return 0;
}

TEST(foreach_lists_semaphores)
{
    const char *n = tshm_name(nbuf, sizeof(nbuf));
    const char *ud[2] = {n, NULL};
    sema_shm_t *h = tshm_open(n, 1);
    ASSERT_OK(sema_shm_foreach(count_name, ud));
    ASSERT_STREQ(ud[1], "found");
    sema_shm_close(h);
    ASSERT_OK(sema_shm_unlink(n));
    ud[1] = NULL;
    ASSERT_OK(sema_shm_foreach(count_name, ud));
    ASSERT_NULL(ud[1]);
}

/* --- the shared scenario suite -------------------------------------------------------- */

typedef struct {
    char name[64];
    uint64_t capacity;
    sema_shm_t *admin;
    sema_shm_t *h[SCEN_MAX_LABELS];
    req_t req[SCEN_MAX_LABELS];
    int started[SCEN_MAX_LABELS];
} host_t;

static host_t host;

static int h_create(void *ctx, uint64_t capacity)
{
    memset(&host, 0, sizeof(host));
    tshm_name(host.name, sizeof(host.name));
    host.capacity = capacity;
    return sema_shm_open(host.name, capacity, 0, 0, &host.admin);
}

static void settle(int l)
{
    if (host.started[l]) {
        req_join(&host.req[l]);
        host.started[l] = 0;
    }
}

static void h_destroy(void *ctx)
{
    for (int l = 0; l < SCEN_MAX_LABELS; l++) {
        if (host.started[l])
            sema_shm_cancel(host.h[l]);
        settle(l);
        sema_shm_close(host.h[l]);
    }
    sema_shm_close(host.admin);
    sema_shm_unlink(host.name);
}

static void *idle_main(void *arg)
{
    req_t *r = arg;
    r->rc = sema_shm_acquire(r->h, r->weight, r->timeout_ms);
    if (r->rc == 0)
        sema_shm_release(r->h, 0);
    atomic_store(&r->done, 1);
    return NULL;
}

/* Wait-idle = an acquire of the whole capacity, queued in FIFO, given back at once. */
static int h_request(void *ctx, int l, scen_kind_t kind, uint64_t w, int64_t timeout_ms)
{
    if (host.h[l] == NULL && sema_shm_open(host.name, 0, SEMA_SHM_EXISTING, 0, &host.h[l]) != 0)
        return SEMA_EIO;
    int idle = kind == SCEN_WAIT_IDLE;
    if (idle)
        w = host.capacity;
    int rc = sema_shm_acquire(host.h[l], w, 0);
    if (rc == 0 && idle)
        sema_shm_release(host.h[l], 0);
    if (rc != SEMA_EBUSY || kind == SCEN_TRY || timeout_ms == 0)
        return rc;
    req_t *r = &host.req[l];
    r->h = host.h[l];
    r->weight = w;
    r->timeout_ms = timeout_ms;
    atomic_store(&r->done, 0);
    ASSERT_OK(pthread_create(&r->th, NULL, idle ? idle_main : req_main, r));
    host.started[l] = 1;
    ASSERT(TSHM_EVENTUALLY(sema__shm_test_waiting(r->h) || atomic_load(&r->done), 5000));
    return atomic_load(&r->done) ? r->rc : SCEN_QUEUED;
}

static int h_release(void *ctx, int l, uint64_t w)
{
    if (host.started[l] && atomic_load(&host.req[l].done))
        settle(l);
    return host.h[l] == NULL ? SEMA_ESTALE : sema_shm_release(host.h[l], w);
}

static int h_cancel(void *ctx, int l)
{
    return host.h[l] == NULL ? SEMA_ENOENT : sema_shm_cancel(host.h[l]);
}

static int h_state(void *ctx, scen_state_t *out)
{
    sema_shm_stats_t st;
    int rc = sema_shm_stats(host.admin, &st);
    if (rc != 0)
        return rc;
    out->capacity = (int64_t)st.capacity;
    out->available = (int64_t)st.available;
    out->held = (int64_t)st.held;
    out->waiting = st.nwaiters;
    out->waiting_weight = (int64_t)st.waiting;
    return 0;
}

static int h_poll(void *ctx, int l, int64_t wait_ms)
{
    if (!host.started[l])
        return SEMA_EINVAL;
    req_t *r = &host.req[l];
    if (!TSHM_EVENTUALLY(atomic_load(&r->done), wait_ms))
        return SCEN_QUEUED;
    return r->rc;
}

TEST(shared_scenarios)
{
    scen_host_t h = {.name = "shm",
                     .create = h_create,
                     .destroy = h_destroy,
                     .request = h_request,
                     .release = h_release,
                     .cancel = h_cancel,
                     .state = h_state,
                     .poll = h_poll};
    scen_counts_t n;
    ASSERT_EQ(scen_run_file(NULL, &h, NULL, &n), 0);
    fprintf(stderr, "shm host: %d scenarios skipped (no resize/close on shm, no semad limits)\n",
            n.skipped);
}

/* Pitfall 18 (PID reuse): a creator killed between making its private temporary file and
 * linking it leaves /dev/shm/.sema-tmp.PID.N behind. A later process that gets the same pid
 * must still be able to create semaphores. */
TEST(pitfall_18_stale_temp_file_of_a_recycled_pid_does_not_fail_create)
{
    enum { STALE = 8 };
    const char *name2 = tshm_name(nbuf, sizeof(nbuf));
    int go[2];
    ASSERT_OK(pipe(go));
    pid_t c = tshm_fork();
    if (c == 0) {
        char b;
        sema_shm_t *x = NULL;
        if (read(go[0], &b, 1) != 1)
            _exit(3);
        int rc = sema_shm_open(name2, 1, 0, 0, &x);
        sema_shm_close(x);
        sema_shm_unlink(name2);
        _exit(rc == 0 ? 0 : 4);
    }
    /* The child's temporary names are .sema-tmp.<its pid>.<counter>, the counter inherited
     * from this process (a few creates so far): leave the first STALE of them behind. */
    char path[128];
    for (int k = 0; k < STALE; k++) {
        snprintf(path, sizeof(path), "/dev/shm/.sema-tmp.%d.%d", (int)c, k);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        ASSERT(fd >= 0);
        close(fd);
    }
    ASSERT_EQ(write(go[1], "g", 1), 1);
    int rc = tshm_wait(c, 5000);
    for (int k = 0; k < STALE; k++) {
        snprintf(path, sizeof(path), "/dev/shm/.sema-tmp.%d.%d", (int)c, k);
        unlink(path);
    }
    close(go[0]);
    close(go[1]);
    ASSERT_EQ(rc, 0);
}
