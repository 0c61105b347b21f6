/* SPDX-License-Identifier: MIT */
/* test_client.c - the C client against a real semad (started here from $SEMAD): every
 * call, error mapping, idempotent retries, cancel, threads, and the lease keep-alive. */
#include "test.h"

#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "sema/client.h"

/* ---- a semad of our own -------------------------------------------------------------- */

static pid_t semad_pid;
static char semad_url[64];
static char semad_dir[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void stop_semad(void)
{
    if (semad_pid > 0) {
        kill(semad_pid, SIGKILL);
        waitpid(semad_pid, NULL, 0);
        semad_pid = 0;
        nftw(semad_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    }
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Find "listening on http://127.0.0.1:PORT" in semad's log. */
static int read_port(const char *log)
{
    char line[512];
    FILE *f = fopen(log, "r");
    int port = 0;

    while (f != NULL && port == 0 && fgets(line, sizeof line, f) != NULL) {
        char *p = strstr(line, "listening on http://127.0.0.1:");
        if (p != NULL)
            port = (int)strtol(p + strlen("listening on http://127.0.0.1:"), NULL, 10);
    }
    if (f != NULL)
        fclose(f);
    return port;
}

/* Start semad with `args` (NULL-terminated, at most 8) after --listen; NULL: a data
 * directory of its own, nothing kept. */
static void start_semad_with(const char *const *args)
{
    const char *bin = getenv("SEMAD");
    char log[96], data[96];

    if (bin == NULL || bin[0] == '\0')
        TEST_SKIP("SEMAD is not set");
    snprintf(semad_dir, sizeof semad_dir, "/tmp/sema-client-XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(semad_dir));
    snprintf(log, sizeof log, "%s/log", semad_dir);
    snprintf(data, sizeof data, "%s/data", semad_dir);
    semad_pid = fork();
    ASSERT(semad_pid >= 0);
    if (semad_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed (aborted) test takes semad with it */
        FILE *f = freopen(log, "w", stderr);
        FILE *g = freopen("/dev/null", "w", stdout);
        (void)f;
        (void)g;
        const char *dflt[] = {"--data", data, "--durability", "none", NULL};
        const char *argv[12] = {bin, "--listen", "127.0.0.1:0"};
        for (int i = 0; i < 8 && (args ? args : dflt)[i] != NULL; i++)
            argv[3 + i] = (args ? args : dflt)[i];
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    atexit(stop_semad);
    int port = 0;
    for (int64_t end = mono_ms() + 10000; port == 0 && mono_ms() < end;) {
        usleep(10000);
        port = read_port(log);
        ASSERT_EQ(waitpid(semad_pid, NULL, WNOHANG), 0);
    }
    ASSERT_GT(port, 0);
    snprintf(semad_url, sizeof semad_url, "http://127.0.0.1:%d", port);
}

static void start_semad(void)
{
    start_semad_with(NULL);
}

/* Sanitizer builds run several times slower: stretch ttls and time bounds. */
static int64_t slow(void)
{
    return test_scale(100) < 100 ? 4 : 1;
}

static sema_client_t *client(void)
{
    sema_client_t *c = NULL;
    if (semad_pid == 0)
        start_semad();
    ASSERT_OK(sema_client_new(&c, semad_url, NULL));
    return c;
}

static uint64_t held(sema_client_t *c, const char *name)
{
    sema_sem_info_t info;
    ASSERT_OK(sema_client_get(c, name, &info, NULL, NULL));
    return info.held;
}

/* ---- the calls ----------------------------------------------------------------------- */

TEST(semaphore_crud)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    sema_sem_info_t info;
    int created = -1;
    char *json = NULL;

    ASSERT_OK(sema_client_create(c, "crud/a b", 3, &created, &e));
    ASSERT_EQ(created, 1);
    ASSERT_OK(sema_client_create(c, "crud/a b", 3, &created, &e));
    ASSERT_EQ(created, 0);
    ASSERT_EQ(sema_client_create(c, "crud/a b", 4, NULL, &e), SEMA_EEXIST);
    ASSERT_EQ(e.code, SEMA_EEXIST);
    ASSERT_EQ(e.http_status, 409);
    ASSERT_STREQ(e.problem, "conflict");
    ASSERT(e.message[0] != '\0');
    ASSERT_OK(sema_client_get(c, "crud/a b", &info, &json, &e));
    ASSERT_EQ(info.capacity, 3);
    ASSERT_EQ(info.available, 3);
    ASSERT_NOT_NULL(strstr(json, "\"holders\""));
    sema_client_string_free(json);
    ASSERT_OK(sema_client_resize(c, "crud/a b", 5, &info, &e));
    ASSERT_EQ(info.capacity, 5);
    ASSERT_EQ(sema_client_get(c, "crud/none", NULL, NULL, &e), SEMA_ENOENT);
    ASSERT_EQ(e.http_status, 404);
    ASSERT_EQ(sema_client_create(c, "", 1, NULL, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_create(c, "x", 0, NULL, &e), SEMA_EINVAL);
    ASSERT_OK(sema_client_delete(c, "crud/a b", &e));
    ASSERT_EQ(sema_client_get(c, "crud/a b", NULL, NULL, &e), SEMA_ENOENT);
    sema_client_free(c);
}

static int count_cb(void *arg, const sema_sem_info_t *info)
{
    int *n = arg;
    ASSERT_EQ(strncmp(info->name, "list/", 5), 0);
    ASSERT_EQ(info->capacity, 2);
    (*n)++;
    return 0;
}

TEST(list_follows_cursor)
{
    sema_client_t *c = client();
    char name[32];
    int n = 0, want = (int)test_scale(1500);

    for (int i = 0; i < want; i++) {
        snprintf(name, sizeof name, "list/%05d", i);
        ASSERT_OK(sema_client_create(c, name, 2, NULL, NULL));
    }
    ASSERT_OK(sema_client_create(c, "other", 2, NULL, NULL));
    ASSERT_OK(sema_client_list(c, "list/", count_cb, &n, NULL));
    ASSERT_EQ(n, want);
    sema_client_free(c);
}

TEST(acquire_renew_release)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    sema_lease_t a, b, x;
    sema_acquire_opts_t o = {.weight = 2, .timeout_ms = 0, .ttl_ms = 30000, .owner = "t"};

    ASSERT_OK(sema_client_create(c, "acq", 3, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "acq", &o, &a, &e));
    ASSERT(strlen(a.id) >= 16);
    ASSERT_STREQ(a.name, "acq");
    ASSERT_EQ(a.weight, 2);
    ASSERT_EQ(a.ttl_ms, 30000);
    ASSERT_GT(a.expires_at_ms, 0);
    ASSERT_GT(a.local_deadline_ns, 0);
    ASSERT_EQ(sema_client_acquire(c, "acq", &o, &x, &e), SEMA_EBUSY); /* a failed try */
    ASSERT_STREQ(e.problem, "unavailable");
    ASSERT_EQ(x.id[0], '\0');
    o.timeout_ms = 200;
    ASSERT_EQ(sema_client_acquire(c, "acq", &o, &x, &e), SEMA_ETIMEDOUT);
    o.weight = 4;
    ASSERT_EQ(sema_client_acquire(c, "acq", &o, &x, &e), SEMA_EINVAL); /* above capacity */
    o.weight = 1;
    ASSERT_OK(sema_client_acquire(c, "acq", &o, &b, &e));
    ASSERT_GT(b.fence, a.fence);
    ASSERT_EQ(held(c, "acq"), 3);
    int64_t before = a.expires_at_ms;
    usleep(20000);
    ASSERT_OK(sema_client_renew(c, &a, 60000, &e));
    ASSERT_EQ(a.ttl_ms, 60000);
    ASSERT_GT(a.expires_at_ms, before);
    ASSERT_OK(sema_client_lease_get(c, a.id, &x, &e));
    ASSERT_EQ(x.weight, 2);
    ASSERT_OK(sema_client_release(c, a.id, &e));
    ASSERT_EQ(sema_client_release(c, a.id, &e), SEMA_ESTALE);
    ASSERT_EQ(sema_client_renew(c, &a, 0, &e), SEMA_ESTALE);
    ASSERT_EQ(sema_client_release(c, "no-such-lease-0000000000", &e), SEMA_ENOENT);
    ASSERT_OK(sema_client_revoke(c, b.id, &e));
    ASSERT_EQ(sema_client_renew(c, &b, 0, &e), SEMA_EREVOKED);
    ASSERT_EQ(held(c, "acq"), 0);
    ASSERT_EQ(sema_client_acquire(c, "acq-none", NULL, &x, &e), SEMA_ENOENT);
    sema_client_free(c);
}

TEST(several_semaphores_at_once_kept_alive_and_released_as_one)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    sema_multi_lease_t m, x;
    sema_keepalive_t *ka;
    sema_client_part_t parts[] = {{"all/gpu", 2}, {"all/db", 0}};
    /* (renewed every 200 ms: a stall of 400 ms, beside CPU hogs, still keeps it) */
    sema_acquire_opts_t o = {.timeout_ms = 0, .ttl_ms = 600 * slow(), .tenant = "acme"};

    ASSERT_OK(sema_client_create(c, "all/gpu", 2, NULL, NULL));
    ASSERT_OK(sema_client_create(c, "all/db", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire_all(c, parts, 2, &o, &m, &e));
    ASSERT_EQ(m.nparts, 2);
    ASSERT_STREQ(m.parts[0].name, "all/gpu");
    ASSERT_EQ(m.parts[0].weight, 2);
    ASSERT_STREQ(m.parts[1].name, "all/db");
    ASSERT_EQ(m.parts[1].weight, 1);
    ASSERT_GT(m.parts[1].fence, m.parts[0].fence);
    ASSERT_STREQ(m.lease.name, "all/gpu"); /* the lease stands for all its parts */
    ASSERT_EQ(held(c, "all/db"), 1);
    ASSERT_EQ(sema_client_acquire_all(c, parts, 2, &o, &x, &e), SEMA_EBUSY);
    ASSERT_EQ(x.nparts, 0);
    /* renewed by the keep-alive past several ttls, then released as one */
    ASSERT_OK(sema_lease_keepalive_start(&ka, c, &m.lease, NULL, NULL));
    usleep((useconds_t)(o.ttl_ms * 5 / 2 * 1000));
    ASSERT_OK(sema_lease_keepalive_status(ka));
    ASSERT_OK(sema_lease_keepalive_stop(ka, 1, &e));
    ASSERT_EQ(held(c, "all/gpu"), 0);
    ASSERT_EQ(held(c, "all/db"), 0);
    sema_client_part_t twice[] = {{"all/db", 1}, {"all/db", 1}};
    ASSERT_EQ(sema_client_acquire_all(c, twice, 2, NULL, &x, &e), SEMA_EINVAL);
    sema_client_part_t none[] = {{"all/db", 1}, {"all/none", 1}};
    ASSERT_EQ(sema_client_acquire_all(c, none, 2, NULL, &x, &e), SEMA_ENOENT);
    sema_client_free(c);
}

TEST(limits_configured_and_shown)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    sema_sem_info_t info;
    sema_lease_t a;
    sema_sem_config_t cfg = {.capacity = 4, .tenant_max = 2, .rate_per_s = 50, .rate_burst = 5};
    sema_acquire_opts_t o = {.weight = 2, .timeout_ms = 0, .tenant = "acme"};

    ASSERT_OK(sema_client_create_config(c, "lim", &cfg, NULL, &e));
    ASSERT_OK(sema_client_get(c, "lim", &info, NULL, &e));
    ASSERT_EQ(info.tenant_max, 2);
    ASSERT_EQ(info.rate_per_s, 50);
    ASSERT_EQ(info.rate_burst, 5);
    ASSERT_OK(sema_client_acquire(c, "lim", &o, &a, &e));
    o.weight = 1;
    ASSERT_EQ(sema_client_acquire(c, "lim", &o, &a, &e), SEMA_EBUSY); /* acme holds its 2 */
    cfg = (sema_sem_config_t){.tenant_max = 3, .set = SEMA_SET_TENANT_MAX};
    ASSERT_OK(sema_client_configure(c, "lim", &cfg, &info, &e));
    ASSERT_EQ(info.tenant_max, 3);
    ASSERT_EQ(info.capacity, 4);
    cfg = (sema_sem_config_t){.capacity = 4};
    ASSERT_EQ(sema_client_create_config(c, "lim", &cfg, NULL, &e), SEMA_EEXIST);
    ASSERT_OK(sema_client_delete(c, "lim", &e));
    sema_client_free(c);
}

TEST(expired_lease_fails_loudly)
{
    sema_client_t *c = client();
    sema_acquire_opts_t o = {.timeout_ms = 0, .ttl_ms = 100};
    sema_lease_t l;

    ASSERT_OK(sema_client_create(c, "exp", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "exp", &o, &l, NULL));
    /* the server expires it by itself (an active timer): poll the state, bounded */
    for (int64_t end = mono_ms() + 5000; held(c, "exp") != 0 && mono_ms() < end;)
        usleep(10000);
    ASSERT_EQ(held(c, "exp"), 0);
    ASSERT_EQ(sema_client_renew(c, &l, 0, NULL), SEMA_EEXPIRED);
    ASSERT_EQ(sema_client_release(c, l.id, NULL), SEMA_EEXPIRED);
    sema_client_free(c);
}

TEST(idempotency_key_never_grants_twice)
{
    sema_client_t *c = client();
    sema_acquire_opts_t o = {.weight = 1, .timeout_ms = 0, .idempotency_key = "job-42"};
    sema_lease_t a, b;

    ASSERT_OK(sema_client_create(c, "idem", 2, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "idem", &o, &a, NULL));
    ASSERT_OK(sema_client_acquire(c, "idem", &o, &b, NULL));
    ASSERT_STREQ(a.id, b.id);
    ASSERT_EQ(a.fence, b.fence);
    ASSERT_EQ(held(c, "idem"), 1);
    o.idempotency_key = "bad\nkey";
    ASSERT_EQ(sema_client_acquire(c, "idem", &o, &b, NULL), SEMA_EINVAL);
    ASSERT_OK(sema_client_release(c, a.id, NULL));
    sema_client_free(c);
}

typedef struct {
    sema_client_t *c;
    volatile int cancel;
    int rc;
    sema_lease_t lease;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    sema_acquire_opts_t o = {.timeout_ms = -1, .cancel = &w->cancel};
    w->rc = sema_client_acquire(w->c, "cancel", &o, &w->lease, NULL);
    return NULL;
}

static uint64_t waiting(sema_client_t *c, const char *name)
{
    sema_sem_info_t info;
    ASSERT_OK(sema_client_get(c, name, &info, NULL, NULL));
    return info.waiting;
}

TEST(cancel_leaves_nothing_behind)
{
    sema_client_t *c = client();
    waiter_t w = {.c = c};
    sema_lease_t l;
    pthread_t t;

    ASSERT_OK(sema_client_create(c, "cancel", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "cancel", NULL, &l, NULL));
    ASSERT_OK(pthread_create(&t, NULL, wait_thread, &w));
    for (int64_t end = mono_ms() + 5000; waiting(c, "cancel") == 0 && mono_ms() < end;)
        usleep(5000);
    ASSERT_EQ(waiting(c, "cancel"), 1);
    int64_t t0 = mono_ms();
    __atomic_store_n((int *)&w.cancel, 1, __ATOMIC_RELEASE);
    ASSERT_OK(pthread_join(t, NULL));
    ASSERT_EQ(w.rc, SEMA_ECANCELED);
    ASSERT_LT(mono_ms() - t0, 2000);
    ASSERT_EQ(w.lease.id[0], '\0');
    for (int64_t end = mono_ms() + 5000; waiting(c, "cancel") != 0 && mono_ms() < end;)
        usleep(5000);
    ASSERT_EQ(waiting(c, "cancel"), 0);
    ASSERT_OK(sema_client_release(c, l.id, NULL));
    ASSERT_EQ(held(c, "cancel"), 0);
    sema_client_free(c);
}

/* ---- threads share one client -------------------------------------------------------- */

static atomic_int inside, peak;
static atomic_int failures;

static void *worker(void *arg)
{
    sema_client_t *c = arg;
    long n = test_scale(40);

    for (long i = 0; i < n; i++) {
        sema_lease_t l;
        if (sema_client_acquire(c, "threads", NULL, &l, NULL) != 0) {
            atomic_fetch_add(&failures, 1);
            continue;
        }
        int now = atomic_fetch_add(&inside, 1) + 1;
        int p = atomic_load(&peak);
        while (now > p && !atomic_compare_exchange_weak(&peak, &p, now))
            ;
        atomic_fetch_sub(&inside, 1);
        if (sema_client_release(c, l.id, NULL) != 0)
            atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

TEST(threads_share_one_client)
{
    sema_client_t *c = client();
    pthread_t t[6];

    ASSERT_OK(sema_client_create(c, "threads", 2, NULL, NULL));
    for (int i = 0; i < 6; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, worker, c));
    for (int i = 0; i < 6; i++)
        ASSERT_OK(pthread_join(t[i], NULL));
    ASSERT_EQ(atomic_load(&failures), 0);
    ASSERT_LE(atomic_load(&peak), 2);
    ASSERT_GE(atomic_load(&peak), 1);
    ASSERT_EQ(held(c, "threads"), 0);
    sema_client_free(c);
}

/* ---- keyed locks, wait-idle, legacy, events ---------------------------------------- */

TEST(keyed_locks)
{
    sema_client_t *c = client();
    sema_acquire_opts_t o = {.timeout_ms = 0};
    sema_lease_t r1, r2, w;
    char *json = NULL;

    ASSERT_OK(sema_client_lock(c, "db/x", SEMA_LOCK_SHARED, &o, &r1, NULL));
    ASSERT_OK(sema_client_lock(c, "db/x", SEMA_LOCK_SHARED, &o, &r2, NULL));
    ASSERT_EQ(r1.mode, SEMA_LOCK_SHARED);
    ASSERT_STREQ(r1.name, "db/x");
    ASSERT_EQ(sema_client_lock(c, "db/x", SEMA_LOCK_EXCLUSIVE, &o, &w, NULL), SEMA_EBUSY);
    ASSERT_OK(sema_client_lock_get(c, "db/x", &json, NULL));
    ASSERT_NOT_NULL(strstr(json, "\"holders\""));
    sema_client_string_free(json);
    ASSERT_OK(sema_client_release(c, r1.id, NULL));
    ASSERT_OK(sema_client_release(c, r2.id, NULL));
    ASSERT_OK(sema_client_lock(c, "db/x", SEMA_LOCK_EXCLUSIVE, &o, &w, NULL));
    ASSERT_EQ(w.mode, SEMA_LOCK_EXCLUSIVE);
    ASSERT_EQ(sema_client_lock(c, "db/x", SEMA_LOCK_SHARED, &o, &r1, NULL), SEMA_EBUSY);
    ASSERT_OK(sema_client_release(c, w.id, NULL));
    ASSERT_EQ(sema_client_lock_get(c, "db/x", NULL, NULL), SEMA_ENOENT); /* freed when idle */
    ASSERT_EQ(sema_client_lock(c, "db/x", 7, &o, &w, NULL), SEMA_EINVAL);
    sema_client_free(c);
}

TEST(wait_idle)
{
    sema_client_t *c = client();
    sema_lease_t l;

    ASSERT_OK(sema_client_create(c, "idle", 2, NULL, NULL));
    ASSERT_OK(sema_client_wait_idle(c, "idle", 0, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "idle", NULL, &l, NULL));
    ASSERT_EQ(sema_client_wait_idle(c, "idle", 100, NULL, NULL), SEMA_ETIMEDOUT);
    ASSERT_OK(sema_client_release(c, l.id, NULL));
    ASSERT_OK(sema_client_wait_idle(c, "idle", 1000, NULL, NULL));
    sema_client_free(c);
}

TEST(legacy_api)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    int64_t v = -1;

    ASSERT_OK(sema_client_legacy_create(c, "old", 1, &e));
    ASSERT_EQ(sema_client_legacy_create(c, "old", 1, &e), SEMA_EEXIST);
    ASSERT_OK(sema_client_down(c, "old", &v, &e));
    ASSERT_EQ(v, 0);
    ASSERT_EQ(sema_client_down(c, "old", &v, &e), SEMA_EBUSY);
    ASSERT_NOT_NULL(strstr(e.message, "locked"));
    ASSERT_OK(sema_client_up(c, "old", &v, &e));
    ASSERT_OK(sema_client_up(c, "old", &v, &e));
    ASSERT_EQ(v, 2); /* legacy up has no upper bound */
    ASSERT_OK(sema_client_value(c, "old", &v, &e));
    ASSERT_EQ(v, 2);
    ASSERT_EQ(sema_client_up(c, "old-none", &v, &e), SEMA_ENOENT);
    ASSERT_OK(sema_client_legacy_delete(c, "old", &e));
    ASSERT_EQ(sema_client_value(c, "old", &v, &e), SEMA_ENOENT);
    sema_client_free(c);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int granted, released;
    sema_client_t *c;
    volatile int stop;
    int rc;
} events_t;

static int on_event(void *arg, const char *type, const char *data)
{
    events_t *ev = arg;
    pthread_mutex_lock(&ev->lock);
    if (strcmp(type, "granted") == 0)
        ev->granted++;
    if (strcmp(type, "released") == 0)
        ev->released++;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->lock);
    ASSERT(data != NULL);
    return 0;
}

static void *events_thread(void *arg)
{
    events_t *ev = arg;
    ev->rc = sema_client_events(ev->c, "events", on_event, ev, &ev->stop, NULL);
    return NULL;
}

static int wait_count(events_t *ev, int *field, int want)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&ev->lock);
    while (*field < want && pthread_cond_timedwait(&ev->cond, &ev->lock, &ts) == 0)
        ;
    int got = *field;
    pthread_mutex_unlock(&ev->lock);
    return got;
}

TEST(tickets)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    sema_ticket_t t1, t2, x;
    sema_multi_ticket_t m;
    sema_lease_t held_lease;
    sema_acquire_opts_t ao = {.timeout_ms = 0};

    ASSERT_OK(sema_client_create(c, "tk", 2, NULL, NULL));
    ao.weight = 2;
    ASSERT_OK(sema_client_acquire(c, "tk", &ao, &held_lease, NULL));
    sema_ticket_opts_t o = {.weight = 1, .ttl_ms = 20000, .keepalive_ms = 60000, .owner = "t1"};
    ASSERT_OK(sema_client_ticket_take(c, "tk", &o, &t1, &e));
    ASSERT_EQ(t1.status, SEMA_TICKET_WAITING);
    ASSERT_EQ(t1.position, 1);
    ASSERT_EQ(t1.ahead_weight, 0);
    ASSERT_EQ(t1.keepalive_ms, 60000);
    ASSERT_GT(t1.poll_after_ms, 0);
    ASSERT_EQ(t1.estimate_p50_ms, -1); /* no history yet */
    ASSERT_STREQ(t1.name, "tk");
    o.weight = 2;
    o.owner = "t2";
    o.idempotency_key = "tk-2";
    ASSERT_OK(sema_client_ticket_take(c, "tk", &o, &t2, &e));
    ASSERT_EQ(t2.position, 2);
    ASSERT_EQ(t2.ahead_weight, 1);
    ASSERT_OK(sema_client_ticket_take(c, "tk", &o, &x, &e)); /* the same key: the same place */
    ASSERT_STREQ(x.id, t2.id);
    ASSERT_EQ(x.position, 2);
    o.weight = 1;
    ASSERT_EQ(sema_client_ticket_take(c, "tk", &o, &x, &e), SEMA_EKEYMISMATCH);
    o.idempotency_key = NULL;
    o.weight = 3;
    ASSERT_EQ(sema_client_ticket_take(c, "tk", &o, &x, &e), SEMA_EINVAL); /* above capacity */
    ASSERT_EQ(sema_client_ticket_take(c, "tk-none", NULL, &x, &e), SEMA_ENOENT);

    /* a long poll with no change answers after its time, still in line */
    int64_t t0 = mono_ms();
    ASSERT_OK(sema_client_ticket_get(c, t2.id, 200, &x, &e));
    ASSERT(mono_ms() - t0 >= 150);
    ASSERT_EQ(x.status, SEMA_TICKET_WAITING);
    ASSERT_EQ(x.position, 2);

    /* the holder releases: the first ticket is granted (weight 1), the second waits for 2 */
    ASSERT_OK(sema_client_release(c, held_lease.id, NULL));
    ASSERT_OK(sema_client_ticket_get(c, t1.id, 5000 * slow(), &x, &e));
    ASSERT_EQ(x.status, SEMA_TICKET_GRANTED);
    ASSERT_EQ(x.position, 0);
    ASSERT_EQ(x.lease.weight, 1);
    ASSERT_EQ(x.lease.ttl_ms, 20000);
    ASSERT_GT(x.lease.fence, held_lease.fence);
    ASSERT_GT(x.lease.local_deadline_ns, 0);
    sema_lease_t granted = x.lease;
    ASSERT_OK(sema_client_renew(c, &granted, 30000, &e)); /* a lease like any other */
    ASSERT_EQ(granted.ttl_ms, 30000);
    ASSERT_OK(sema_client_ticket_get(c, t2.id, 0, &x, &e));
    ASSERT_EQ(x.position, 1);

    /* leaving a granted ticket releases its lease; the second one's turn comes */
    ASSERT_OK(sema_client_ticket_leave(c, t1.id, &e));
    ASSERT_EQ(sema_client_ticket_leave(c, t1.id, &e), SEMA_EGONE);
    ASSERT_EQ(e.http_status, 410);
    ASSERT_STREQ(e.problem, "ticket_ended");
    ASSERT_EQ(sema_client_renew(c, &granted, 0, &e), SEMA_ESTALE);
    ASSERT_OK(sema_client_ticket_get(c, t2.id, 5000 * slow(), &x, &e));
    ASSERT_EQ(x.status, SEMA_TICKET_GRANTED);
    ASSERT_EQ(held(c, "tk"), 2);
    ASSERT_OK(sema_client_release(c, x.lease.id, &e)); /* the ticket ends with its lease */
    ASSERT_EQ(sema_client_ticket_get(c, t2.id, 0, &x, &e), SEMA_EGONE);
    ASSERT_EQ(held(c, "tk"), 0);

    /* free units and nobody waiting: granted at once; read with its parts, it has one */
    ASSERT_OK(sema_client_ticket_take(c, "tk", NULL, &x, &e));
    ASSERT_EQ(x.status, SEMA_TICKET_GRANTED);
    ASSERT_STREQ(x.tenant, "");
    ASSERT_OK(sema_client_ticket_get_all(c, x.id, 0, &m, &e));
    ASSERT_EQ(m.nparts, 1);
    ASSERT_STREQ(m.parts[0].name, "tk");
    ASSERT_EQ(m.parts[0].fence, x.lease.fence);
    ASSERT_OK(sema_client_ticket_leave(c, x.id, &e));
    ASSERT_EQ(held(c, "tk"), 0);

    ASSERT_EQ(sema_client_ticket_get(c, "no-such-ticket-00000000", 0, &x, &e), SEMA_ENOENT);
    ASSERT_EQ(sema_client_ticket_get(c, "", 0, &x, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_ticket_get(c, t2.id, -1, &x, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_ticket_take(c, "tk", NULL, NULL, &e), SEMA_EINVAL);
    sema_client_free(c);
}

TEST(ticket_on_several_semaphores_granted_when_all_fit)
{
    sema_client_t *c = client();
    sema_client_error_t e;
    sema_multi_ticket_t t, x;
    sema_ticket_t one;
    sema_lease_t gpu, db;
    sema_acquire_opts_t ao = {.timeout_ms = 0};
    sema_client_part_t parts[] = {{"tm/gpu", 2}, {"tm/db", 0}};
    sema_ticket_opts_t o = {.keepalive_ms = 60000, .owner = "tab-3", .tenant = "acme"};

    ASSERT_OK(sema_client_create(c, "tm/gpu", 2, NULL, NULL));
    ASSERT_OK(sema_client_create(c, "tm/db", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "tm/gpu", &ao, &gpu, NULL)); /* 1 of 2 */
    ASSERT_OK(sema_client_acquire(c, "tm/db", &ao, &db, NULL));   /* 1 of 1 */
    ASSERT_OK(sema_client_ticket_take_all(c, parts, 2, &o, &t, &e));
    ASSERT_EQ(t.ticket.status, SEMA_TICKET_WAITING);
    ASSERT_EQ(t.ticket.position, 1);
    ASSERT_STREQ(t.ticket.tenant, "acme");
    ASSERT_STREQ(t.ticket.name, "tm/gpu"); /* the first part stands for it */
    ASSERT_EQ(t.ticket.weight, 2);
    ASSERT_EQ(t.nparts, 2);
    ASSERT_STREQ(t.parts[1].name, "tm/db");
    ASSERT_EQ(t.parts[1].weight, 1);
    ASSERT_EQ(t.parts[0].fence, 0);
    ASSERT_EQ(held(c, "tm/gpu"), 1); /* it holds nothing while it waits */
    /* one unit of each fits now, but not its 2 of tm/gpu: it keeps waiting */
    ASSERT_OK(sema_client_release(c, db.id, NULL));
    ASSERT_OK(sema_client_ticket_get_all(c, t.ticket.id, 0, &x, &e));
    ASSERT_EQ(x.ticket.status, SEMA_TICKET_WAITING);
    ASSERT_EQ(x.nparts, 2);
    ASSERT_EQ(held(c, "tm/db"), 0);
    ASSERT_OK(sema_client_ticket_get(c, t.ticket.id, 0, &one, &e)); /* read as its first part */
    ASSERT_STREQ(one.name, "tm/gpu");
    ASSERT_STREQ(one.tenant, "acme");
    /* a second one behind it leaves while waiting: its places go from both lines */
    ASSERT_OK(sema_client_ticket_take_all(c, parts, 2, NULL, &x, &e));
    ASSERT_EQ(waiting(c, "tm/db"), 2);
    ASSERT_OK(sema_client_ticket_leave(c, x.ticket.id, &e));
    ASSERT_EQ(waiting(c, "tm/db"), 1);
    ASSERT_EQ(waiting(c, "tm/gpu"), 1);
    /* both fit: granted one lease on both */
    ASSERT_OK(sema_client_release(c, gpu.id, NULL));
    ASSERT_OK(sema_client_ticket_get_all(c, t.ticket.id, 5000 * slow(), &x, &e));
    ASSERT_EQ(x.ticket.status, SEMA_TICKET_GRANTED);
    ASSERT_EQ(x.nparts, 2);
    ASSERT_GT(x.parts[0].fence, gpu.fence);
    ASSERT_GT(x.parts[1].fence, db.fence);
    ASSERT_EQ(x.ticket.lease.fence, x.parts[0].fence);
    ASSERT_EQ(held(c, "tm/gpu"), 2);
    ASSERT_EQ(held(c, "tm/db"), 1);
    ASSERT_OK(sema_client_ticket_leave(c, t.ticket.id, &e)); /* its lease goes with it */
    ASSERT_EQ(held(c, "tm/gpu"), 0);
    ASSERT_EQ(held(c, "tm/db"), 0);
    ASSERT_EQ(sema_client_ticket_get_all(c, t.ticket.id, 0, &x, &e), SEMA_EGONE);
    /* bad input: refused before anything is sent, or by semad, never queued */
    sema_client_part_t twice[] = {{"tm/db", 1}, {"tm/db", 1}};
    sema_client_part_t none[] = {{"tm/db", 1}, {"tm/none", 1}};
    sema_client_part_t heavy[] = {{"tm/db", 2}, {"tm/gpu", 1}};
    ASSERT_EQ(sema_client_ticket_take_all(c, twice, 2, NULL, &x, &e), SEMA_EINVAL);
    ASSERT_EQ(e.http_status, 400);
    ASSERT_EQ(sema_client_ticket_take_all(c, none, 2, NULL, &x, &e), SEMA_ENOENT);
    ASSERT_EQ(sema_client_ticket_take_all(c, heavy, 2, NULL, &x, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_ticket_take_all(c, parts, 0, NULL, &x, &e), SEMA_EINVAL);
    ASSERT_EQ(e.http_status, 0);
    ASSERT_EQ(sema_client_ticket_take_all(c, parts, 2, NULL, NULL, &e), SEMA_EINVAL);
    o.tenant = "\xff"; /* not UTF-8: refused, not sent without it */
    ASSERT_EQ(sema_client_ticket_take_all(c, parts, 2, &o, &x, &e), SEMA_EINVAL);
    ASSERT_EQ(e.http_status, 0);
    ASSERT_EQ(waiting(c, "tm/db"), 0);
    ASSERT_OK(sema_client_delete(c, "tm/gpu", NULL));
    ASSERT_OK(sema_client_delete(c, "tm/db", NULL));
    sema_client_free(c);
}

TEST(events_stream)
{
    sema_client_t *c = client();
    events_t ev = {.c = c};
    sema_lease_t l;
    pthread_t t;

    pthread_mutex_init(&ev.lock, NULL);
    pthread_cond_init(&ev.cond, NULL);
    ASSERT_OK(sema_client_create(c, "events", 1, NULL, NULL));
    ASSERT_OK(pthread_create(&t, NULL, events_thread, &ev));
    /* the subscription races our first grant: repeat until one is seen (bounded) */
    int got = 0;
    for (int i = 0; i < 50 && got == 0; i++) {
        int before = wait_count(&ev, &ev.granted, 0);
        ASSERT_OK(sema_client_acquire(c, "events", NULL, &l, NULL));
        ASSERT_OK(sema_client_release(c, l.id, NULL));
        /* a grant seen means the stream was up: its release must follow */
        if (wait_count(&ev, &ev.granted, before + 1) > before)
            got = wait_count(&ev, &ev.released, i + 1) >= 1;
    }
    ASSERT_EQ(got, 1);
    __atomic_store_n((int *)&ev.stop, 1, __ATOMIC_RELEASE);
    ASSERT_OK(pthread_join(t, NULL));
    ASSERT_OK(ev.rc);
    sema_client_free(c);
}

/* Resuming: a stream that stopped is opened again with its last event id, and what
 * happened in between comes first. */
typedef struct {
    sema_client_t *c;
    volatile int stop; /* the generator's */
    int rc;
} churn_t;

static void *churn_thread(void *arg)
{
    churn_t *ch = arg;
    while (!__atomic_load_n(&ch->stop, __ATOMIC_ACQUIRE)) {
        sema_lease_t l;
        if ((ch->rc = sema_client_acquire(ch->c, "resume", NULL, &l, NULL)) != 0 ||
            (ch->rc = sema_client_release(ch->c, l.id, NULL)) != 0)
            break;
        usleep(2000);
    }
    return NULL;
}

static int stop_at_first(void *arg, const char *type, const char *data)
{
    (void)data;
    if (arg != NULL)
        snprintf(arg, 16, "%s", type);
    return 1;
}

typedef struct {
    const char *lease; /* stop at this lease's "released" */
    int found, events;
} wanted_t;

static int until_released(void *arg, const char *type, const char *data)
{
    wanted_t *w = arg;
    w->events++;
    if (strcmp(type, "released") == 0 && strstr(data, w->lease) != NULL)
        return w->found = 1;
    return 0;
}

static void *cancel_after_10s(void *arg)
{
    volatile int *cancel = arg;
    for (int i = 0; i < 1000 && !__atomic_load_n(cancel, __ATOMIC_ACQUIRE); i++)
        usleep(10000);
    __atomic_store_n((int *)cancel, 1, __ATOMIC_RELEASE);
    return NULL;
}

TEST(events_resume_from_the_last_event_id)
{
    sema_client_t *c = client();
    sema_client_events_info_t info = {.retry_ms = -1, .last_event_id = ""};
    churn_t ch = {.c = c};
    pthread_t t;
    sema_lease_t l;

    ASSERT_OK(sema_client_create(c, "resume", 1, NULL, NULL));
    /* First stream: events come from the churn thread; stop at the first one. */
    ASSERT_OK(pthread_create(&t, NULL, churn_thread, &ch));
    ASSERT_OK(sema_client_events_ex(c, "resume", stop_at_first, NULL, NULL, &info, NULL));
    __atomic_store_n((int *)&ch.stop, 1, __ATOMIC_RELEASE);
    ASSERT_OK(pthread_join(t, NULL));
    ASSERT_OK(ch.rc);
    ASSERT(strchr(info.last_event_id, '-') != NULL);
    /* While no stream is open. */
    ASSERT_OK(sema_client_acquire(c, "resume", NULL, &l, NULL));
    ASSERT_OK(sema_client_release(c, l.id, NULL));
    /* Resumed: nothing happens any more, so that release can only come from the replay. */
    wanted_t w = {.lease = l.id};
    volatile int cancel = 0;
    ASSERT_OK(pthread_create(&t, NULL, cancel_after_10s, (void *)&cancel));
    ASSERT_OK(sema_client_events_ex(c, "resume", until_released, &w, &cancel, &info, NULL));
    __atomic_store_n((int *)&cancel, 1, __ATOMIC_RELEASE);
    ASSERT_OK(pthread_join(t, NULL));
    ASSERT_EQ(w.found, 1);
    ASSERT(w.events >= 2); /* its grant came first */
    /* A foreign id: one "reset". */
    char type[16] = "";
    snprintf(info.last_event_id, sizeof info.last_event_id, "1-1");
    ASSERT_OK(sema_client_events_ex(c, "resume", stop_at_first, type, NULL, &info, NULL));
    ASSERT_STREQ(type, "reset");
    ASSERT(strcmp(info.last_event_id, "1-1") != 0);
    sema_client_free(c);
}

/* ---- keep-alive ---------------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int reason;
    int calls;
} lost_t;

static void on_lost(void *arg, const sema_lease_t *lease, int reason)
{
    lost_t *l = arg;
    ASSERT(lease->id[0] != '\0');
    pthread_mutex_lock(&l->lock);
    l->reason = reason;
    l->calls++;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

static void lost_init(lost_t *l)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
}

static int lost_wait(lost_t *l, int seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += seconds;
    pthread_mutex_lock(&l->lock);
    while (l->calls == 0 && pthread_cond_timedwait(&l->cond, &l->lock, &ts) == 0)
        ;
    int r = l->reason;
    pthread_mutex_unlock(&l->lock);
    return r;
}

TEST(keepalive_renews_across_ttls)
{
    sema_client_t *c = client();
    /* renewed every ttl/3: a ttl of 600 ms keeps the lease through a stall of 400 ms of the
     * keep-alive's thread or of semad (300 ms failed beside CPU hogs, under ASan) */
    sema_acquire_opts_t o = {.ttl_ms = 600 * slow()};
    sema_keepalive_t *ka;
    sema_lease_t l, now;
    lost_t lost;

    lost_init(&lost);
    ASSERT_OK(sema_client_create(c, "ka", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "ka", &o, &l, NULL));
    ASSERT_OK(sema_lease_keepalive_start(&ka, c, &l, on_lost, &lost));
    /* three ttls: without renewals the server would have expired it twice over */
    int64_t end = mono_ms() + 3 * o.ttl_ms;
    while (mono_ms() < end) {
        usleep(50000);
        ASSERT_EQ(sema_lease_keepalive_status(ka), 0);
        ASSERT_EQ(held(c, "ka"), 1);
    }
    ASSERT_GE(sema_lease_keepalive_renewals(ka), 3);
    sema_lease_keepalive_lease(ka, &now);
    ASSERT_GT(now.expires_at_ms, l.expires_at_ms);
    ASSERT_OK(sema_client_lease_get(c, l.id, &now, NULL));
    ASSERT_OK(sema_lease_keepalive_stop(ka, 1, NULL));
    ASSERT_EQ(held(c, "ka"), 0);
    ASSERT_EQ(lost.calls, 0);
    sema_client_free(c);
}

TEST(keepalive_started_late_still_renews)
{
    sema_client_t *c = client();
    /* Handed over with a quarter of the ttl left, the first renewal is due a tenth of the ttl
     * before the deadline: that tenth is what a stall may take (240 ms; 120 ms failed beside
     * CPU hogs). Renewing a third of the ttl after the hand-over instead is too late. */
    sema_acquire_opts_t o = {.ttl_ms = slow() == 1 ? 2400 : 4800};
    sema_keepalive_t *ka;
    sema_lease_t l;
    lost_t lost;

    lost_init(&lost);
    ASSERT_OK(sema_client_create(c, "ka-late", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "ka-late", &o, &l, NULL));
    /* hand it over with less than ttl/3 left: the first renewal must come before that */
    while (mono_ms() < l.local_deadline_ns / 1000000 - o.ttl_ms / 4)
        usleep(5000);
    ASSERT_OK(sema_lease_keepalive_start(&ka, c, &l, on_lost, &lost));
    /* two renewals (the early one, then one a third of the ttl later), lost by none */
    int64_t end = mono_ms() + 2 * o.ttl_ms;
    while (sema_lease_keepalive_renewals(ka) < 2 && mono_ms() < end) {
        usleep(50000);
        ASSERT_EQ(sema_lease_keepalive_status(ka), 0);
    }
    ASSERT_GE(sema_lease_keepalive_renewals(ka), 2);
    ASSERT_EQ(sema_lease_keepalive_status(ka), 0);
    ASSERT_OK(sema_lease_keepalive_stop(ka, 1, NULL));
    ASSERT_EQ(held(c, "ka-late"), 0);
    sema_client_free(c);
}

TEST(keepalive_reports_revoke)
{
    sema_client_t *c = client();
    sema_acquire_opts_t o = {.ttl_ms = 600};
    sema_keepalive_t *ka;
    sema_lease_t l;
    lost_t lost;

    lost_init(&lost);
    ASSERT_OK(sema_client_create(c, "ka-revoke", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "ka-revoke", &o, &l, NULL));
    ASSERT_OK(sema_lease_keepalive_start(&ka, c, &l, on_lost, &lost));
    ASSERT_OK(sema_client_revoke(c, l.id, NULL));
    ASSERT_EQ(lost_wait(&lost, 10), SEMA_EREVOKED);
    ASSERT_EQ(sema_lease_keepalive_status(ka), SEMA_EREVOKED);
    ASSERT_EQ(sema_lease_keepalive_stop(ka, 1, NULL), SEMA_EREVOKED);
    ASSERT_EQ(lost.calls, 1);
    sema_client_free(c);
}

TEST(keepalive_reports_server_gone)
{
    sema_client_t *c = client();
    sema_acquire_opts_t o = {.ttl_ms = 600 * slow()};
    sema_keepalive_t *ka;
    sema_lease_t l;
    lost_t lost;

    lost_init(&lost);
    ASSERT_OK(sema_client_create(c, "ka-gone", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "ka-gone", &o, &l, NULL));
    ASSERT_OK(sema_lease_keepalive_start(&ka, c, &l, on_lost, &lost));
    stop_semad();
    int64_t t0 = mono_ms();
    int reason = lost_wait(&lost, 10);
    ASSERT(reason == SEMA_ECONNREFUSED || reason == SEMA_ETIMEDOUT);
    /* reported by the lease's local deadline (send time + ttl), not at a request's timeout
     * or never (lost_wait's 10 s); 2 s more is for a stalled thread on a loaded machine */
    ASSERT_LE(mono_ms() - t0, o.ttl_ms + 2000 * slow());
    ASSERT_EQ(sema_lease_keepalive_stop(ka, 1, NULL), reason);
    sema_client_free(c);
}

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    char *buf = arg;
    size_t have = strlen(buf), add = size * n;
    if (have + add < 65536) {
        memcpy(buf + have, data, add);
        buf[have + add] = '\0';
    }
    return add;
}

/* GET `path` from semad on a connection of its own: the status, and the body (up to 64 KiB)
 * in buf. */
static long semad_get(const char *path, char buf[65536])
{
    char url[128];
    long status = 0;
    CURL *e = curl_easy_init();

    buf[0] = '\0';
    snprintf(url, sizeof url, "%s%s", semad_url, path);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, buf);
    ASSERT_EQ(curl_easy_perform(e), CURLE_OK);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    return status;
}

/* The value of one series (its name and labels as printed) in the /metrics text `buf`, -1
 * when it is not there. */
static long metric_in(const char *buf, const char *series)
{
    char line[256];

    snprintf(line, sizeof line, "\n%s ", series);
    const char *p = strstr(buf, line);
    return p != NULL ? strtol(p + strlen(line), NULL, 10) : -1;
}

static long metric(const char *series)
{
    static char buf[65536];

    ASSERT_EQ(semad_get("/metrics", buf), 200);
    return metric_in(buf, series);
}

/* semad's count of accepted connections. */
static long accepted_connections(void)
{
    long n = metric("semad_http_connections_accepted_total");
    if (n < 0)
        TEST_SKIP("semad has no semad_http_connections_accepted_total metric");
    return n;
}

/* Requests semad has answered, but for its /metrics (read here to count them). */
static long requests_answered(void)
{
    static const char series[] = "\nsemad_http_requests_total{";
    static char buf[65536];
    long n = 0;

    ASSERT_EQ(semad_get("/metrics", buf), 200);
    for (char *p = strstr(buf, series); p != NULL; p = strstr(p + 1, series)) {
        char *end = strchr(p + 1, '\n'), *val = strstr(p, "} ");
        ASSERT(end != NULL && val != NULL && val < end);
        *end = '\0';
        if (strstr(p, "route=\"/metrics\"") == NULL)
            n += strtol(val + 2, NULL, 10);
        *end = '\n';
    }
    return n;
}

/* The calls that send a name, an owner, a tenant and an idempotency key. */
enum { BAD_ACQUIRE, BAD_ACQUIRE_ALL, BAD_LOCK, BAD_TICKET, BAD_TICKET_ALL, BAD_CALLS };

/* The strings of one call, one of them bad, and the start of the message that says so. */
typedef struct {
    const char *name, *owner, *tenant, *key;
    const char *says;
} bad_string_t;

static int bad_string_call(sema_client_t *c, int call, const bad_string_t *b,
                           sema_client_error_t *e)
{
    sema_acquire_opts_t ao = {
        .timeout_ms = 0, .owner = b->owner, .tenant = b->tenant, .idempotency_key = b->key};
    sema_ticket_opts_t to = {.owner = b->owner, .tenant = b->tenant, .idempotency_key = b->key};
    sema_client_part_t parts[] = {{"u8/b", 1}, {b->name, 1}};
    sema_lease_t l;
    sema_multi_lease_t ml;
    sema_ticket_t t;
    sema_multi_ticket_t mt;

    switch (call) {
    case BAD_ACQUIRE:
        return sema_client_acquire(c, b->name, &ao, &l, e);
    case BAD_ACQUIRE_ALL:
        return sema_client_acquire_all(c, parts, 2, &ao, &ml, e);
    case BAD_LOCK:
        return sema_client_lock(c, b->name, SEMA_LOCK_SHARED, &ao, &l, e);
    case BAD_TICKET:
        return sema_client_ticket_take(c, b->name, &to, &t, e);
    default:
        return sema_client_ticket_take_all(c, parts, 2, &to, &mt, e);
    }
}

TEST(strings_that_are_not_utf8_fail_before_anything_is_sent)
{
#define CUT "caf\xc3" /* cut inside a UTF-8 sequence */
    static const bad_string_t bad[] = {
        {CUT, NULL, NULL, NULL, "name must be valid UTF-8"},
        {"u8/a", CUT, NULL, NULL, "owner must be valid UTF-8"},
        {"u8/a", NULL, CUT, NULL, "tenant must be valid UTF-8"},
        {"u8/a", NULL, NULL, CUT, "idempotency key must be valid UTF-8"},
        {"u8/a", NULL, NULL, "a\tb", "idempotency key must be 1..79 bytes"},
    };
    sema_client_opts_t opts = {.owner = CUT};
    sema_client_t *c = client(), *other = NULL;
    sema_client_error_t e;
    sema_acquire_opts_t ao = {
        .timeout_ms = 0, .owner = "zoë", .tenant = "ünï", .idempotency_key = "clé"};
    sema_lease_t l, again;
    char *json = NULL;

    ASSERT_OK(sema_client_create(c, "u8/a", 1, NULL, NULL));
    ASSERT_OK(sema_client_create(c, "u8/b", 1, NULL, NULL));
    long before = requests_answered();
    for (int call = 0; call < BAD_CALLS; call++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            if (call == BAD_LOCK && bad[i].tenant != NULL)
                continue; /* locks have no tenants: never sent */
            memset(&e, 0, sizeof e);
            ASSERT_EQ(bad_string_call(c, call, &bad[i], &e), SEMA_EINVAL);
            ASSERT_EQ(e.code, SEMA_EINVAL);
            ASSERT_EQ(e.http_status, 0);
            if (strncmp(e.message, bad[i].says, strlen(bad[i].says)) != 0)
                TEST_FAIL_("call %d, string %zu: \"%s\", want \"%s...\"", call, i, e.message,
                           bad[i].says);
        }
    ASSERT_EQ(sema_client_create(c, CUT, 1, NULL, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_get(c, CUT, NULL, NULL, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_legacy_create(c, CUT, 1, &e), SEMA_EINVAL);
    ASSERT_EQ(sema_client_list(c, CUT, count_cb, NULL, &e), SEMA_EINVAL);
    ASSERT_STREQ(e.message, "prefix must be valid UTF-8");
    ASSERT_EQ(sema_client_new(&other, semad_url, &opts), SEMA_EINVAL);
    ASSERT_NULL(other);
    ASSERT_EQ(requests_answered(), before); /* not one of them reached semad */
    /* UTF-8 beyond ASCII goes through, each string where it belongs */
    ASSERT_OK(sema_client_acquire(c, "u8/a", &ao, &l, &e));
    ASSERT_OK(sema_client_acquire(c, "u8/a", &ao, &again, &e)); /* the same key: the same lease */
    ASSERT_STREQ(again.id, l.id);
    ASSERT_OK(sema_client_get(c, "u8/a", NULL, &json, &e));
    ASSERT_NOT_NULL(strstr(json, "\"owner\":\"zoë\""));
    ASSERT_NOT_NULL(strstr(json, "\"tenant\":\"ünï\""));
    sema_client_string_free(json);
    ASSERT_OK(sema_client_release(c, l.id, &e));
    sema_client_free(c);
#undef CUT
}

TEST(connections_are_reused)
{
    sema_client_t *c = client();
    sema_lease_t l;

    ASSERT_OK(sema_client_create(c, "reuse", 1, NULL, NULL));
    long before = accepted_connections();
    for (int i = 0; i < 50; i++) {
        ASSERT_OK(sema_client_acquire(c, "reuse", NULL, &l, NULL));
        ASSERT_OK(sema_client_release(c, l.id, NULL));
    }
    long after = accepted_connections();
    /* one connection for the 100 calls (pooled), one for the second /metrics read */
    ASSERT_LE(after - before, 2);
    sema_client_free(c);
}

TEST(unreachable_server)
{
    sema_client_t *c = NULL;
    sema_client_opts_t opts = {.max_retries = 1};
    sema_client_error_t e;
    sema_lease_t l;

    /* a port nobody listens on: bind one, close it */
    ASSERT_OK(sema_client_new(&c, "http://127.0.0.1:1", &opts));
    ASSERT_EQ(sema_client_get(c, "x", NULL, NULL, &e), SEMA_ECONNREFUSED);
    ASSERT_EQ(e.http_status, 0);
    ASSERT_NOT_NULL(strstr(e.message, "127.0.0.1:1"));
    ASSERT_EQ(sema_client_acquire(c, "x", NULL, &l, &e), SEMA_ECONNREFUSED);
    sema_client_free(c);
    ASSERT_EQ(sema_client_new(&c, "ftp://x", NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_client_new(&c, "not a url", NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_client_new(&c, "http://", NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_client_new(&c, "http://host\tname:7070", NULL), SEMA_EINVAL);
    ASSERT_EQ(sema_client_new(NULL, NULL, NULL), SEMA_EINVAL);
    sema_client_free(NULL);
}

TEST(tls_files_with_an_http_url_are_refused_but_not_from_the_environment)
{
    sema_client_t *c = NULL;
    const sema_client_opts_t given[] = {{.cacert = "ca.pem"}, {.cert = "w.pem"}, {.key = "w.key"}};

    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        ASSERT_EQ(sema_client_new(&c, "http://127.0.0.1:1", &given[i]), SEMA_EINVAL);
        ASSERT_EQ(sema_client_new(&c, "127.0.0.1:1", &given[i]), SEMA_EINVAL);
        ASSERT_OK(sema_client_new(&c, "https://127.0.0.1:1", &given[i]));
        sema_client_free(c);
    }
    setenv("SEMA_CACERT", "/nonexistent/ca.pem", 1);
    setenv("SEMA_CERT", "/nonexistent/w.pem", 1);
    int rc = sema_client_new(&c, "http://127.0.0.1:1", NULL);
    unsetenv("SEMA_CACERT");
    unsetenv("SEMA_CERT");
    ASSERT_OK(rc);
    sema_client_free(c);
}

/* A client made with no URL talks to `want` (and works there). */
static void check_default_url(const char *url, const char *want)
{
    sema_client_t *c = NULL;
    ASSERT_OK(sema_client_new(&c, url, NULL));
    ASSERT_STREQ(sema_client_url(c), want);
    if (strcmp(want, semad_url) == 0) {
        ASSERT_OK(sema_client_create(c, "from-the-environment", 1, NULL, NULL));
        ASSERT_OK(sema_client_delete(c, "from-the-environment", NULL));
    }
    sema_client_free(c);
}

TEST(url_and_options_default_to_the_environment)
{
    sema_client_t *c = NULL;
    sema_client_error_t e;
    char bare[80];

    start_semad();
    snprintf(bare, sizeof bare, "%s/", semad_url + strlen("http://"));
    unsetenv("SEMA_SERVER");
    check_default_url(NULL, SEMA_CLIENT_DEFAULT_URL);
    check_default_url("", "http://127.0.0.1:7070");
    setenv("SEMA_SERVER", semad_url, 1);
    check_default_url(NULL, semad_url);
    check_default_url("", semad_url);
    check_default_url("http://127.0.0.1:1/", "http://127.0.0.1:1"); /* the argument wins */
    setenv("SEMA_SERVER", bare, 1); /* host:port/ is http://host:port */
    check_default_url(NULL, semad_url);
    setenv("SEMA_SERVER", "ftp://x", 1);
    ASSERT_EQ(sema_client_new(&c, NULL, NULL), SEMA_EINVAL);
    /* and the token: one that could inject a header is refused, another is sent */
    setenv("SEMA_SERVER", semad_url, 1);
    setenv("SEMA_TOKEN", "has space", 1);
    ASSERT_EQ(sema_client_new(&c, NULL, NULL), SEMA_EINVAL);
    setenv("SEMA_TOKEN", "fine", 1);
    ASSERT_OK(sema_client_new(&c, NULL, NULL));
    ASSERT_EQ(sema_client_get(c, "nothing-here", NULL, NULL, &e), SEMA_ENOENT);
    sema_client_free(c);
    unsetenv("SEMA_TOKEN");
    unsetenv("SEMA_SERVER");
}

/* ---- 503 replies ----------------------------------------------------------------------- */

/* A connection to semad with one request answered on it, kept open: with
 * --max-connections-per-ip 1, semad refuses any other from this address (503, Retry-After: 1). */
static int hold_connection(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port =
                                htons((uint16_t)strtol(strrchr(semad_url, ':') + 1, NULL, 10)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    char buf[512] = "";
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ASSERT(fd >= 0);
    ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof a));
    ASSERT_EQ(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    ASSERT_GT(read(fd, buf, sizeof buf - 1), 0);
    ASSERT_EQ(strncmp(buf, "HTTP/1.1 200", 12), 0);
    return fd;
}

/* Connections semad refused for --max-connections-per-ip, less the reads here it refused
 * while it had not yet seen a closed connection go. */
static long refused_connections(void)
{
    static char buf[65536];
    long mine = 0;

    for (int64_t end = mono_ms() + 5000 * slow(); semad_get("/metrics", buf) != 200; mine++) {
        ASSERT_LT(mono_ms(), end);
        usleep(10000);
    }
    return metric_in(buf, "semad_http_connections_rejected_per_ip_total") - mine;
}

TEST(release_waits_out_a_503s_retry_after)
{
    const char *args[] = {"--durability", "none", "--max-connections-per-ip", "1", NULL};
    sema_client_opts_t opts = {.retry_ms = 1500};
    sema_client_t *c = NULL;
    sema_client_error_t e;

    start_semad_with(args);
    int held = hold_connection();
    ASSERT_OK(sema_client_new(&c, semad_url, &opts));
    int64_t t0 = mono_ms();
    ASSERT_EQ(sema_client_release(c, "no-such-lease-0000000000", &e), SEMA_EUNAVAIL);
    ASSERT_GE(mono_ms() - t0, 1000);
    ASSERT_EQ(e.http_status, 503);
    close(held);
    /* the first try, and one retry a second later; a third would wait past the 1.5 s */
    ASSERT_EQ(refused_connections(), 2);
    sema_client_free(c);
}

/* ---- semad on a redis-server of our own ---------------------------------------------- */

static pid_t redis_pid;
static int redis_port;
static char redis_dir[64];

static void stop_redis(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = 0;
    }
}

static void remove_redis(void)
{
    stop_redis();
    nftw(redis_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ASSERT(fd >= 0);
    ASSERT_OK(bind(fd, (struct sockaddr *)&a, sizeof a));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&a, &len));
    close(fd);
    return ntohs(a.sin_port);
}

static int redis_pong(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)redis_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char buf[16] = "";
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;

    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, "PING\r\n", 6) == 6 && read(fd, buf, sizeof buf - 1) > 0)
        ok = strncmp(buf, "+PONG", 5) == 0; /* "-LOADING" while it reads its file back */
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Start redis-server (on a free port the first time, then on the same one) with every write
 * in its append-only file before the reply, so a restart loads every lease back. */
static void start_redis(void)
{
    char port[16];

    if (redis_dir[0] == '\0') {
        if (system("command -v redis-server >/dev/null") != 0)
            TEST_SKIP("redis-server is not installed (scripts/deps.sh test)");
        if (system("\"$SEMAD\" --help 2>&1 | grep -q 'redis://'") != 0)
            TEST_SKIP("this semad has no Redis back end");
        snprintf(redis_dir, sizeof redis_dir, "/tmp/sema-client-redis-XXXXXX");
        ASSERT_NOT_NULL(mkdtemp(redis_dir));
        atexit(remove_redis);
        redis_port = free_port();
    }
    snprintf(port, sizeof port, "%d", redis_port);
    redis_pid = fork();
    ASSERT(redis_pid >= 0);
    if (redis_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen("/dev/null", "w", stdout);
        (void)f;
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--dir",
               redis_dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
               (char *)NULL);
        _exit(127);
    }
    for (int64_t end = mono_ms() + 10000; !redis_pong() && mono_ms() < end;) {
        usleep(10000);
        ASSERT_EQ(waitpid(redis_pid, NULL, WNOHANG), 0);
    }
    ASSERT(redis_pong());
}

/* Until semad's /healthz answers `status`, bounded. After stop_redis, 503 says semad has
 * seen the connection close: a request is then answered "Redis is unreachable" and never
 * sent (one sent before has an unknown outcome, and semad sends it again once Redis is
 * back: a release then happens). */
static void wait_healthz(long status)
{
    static char buf[65536];
    for (int64_t end = mono_ms() + 10000 * slow(); semad_get("/healthz", buf) != status;) {
        ASSERT_LT(mono_ms(), end);
        usleep(10000);
    }
}

/* A client of a semad on a fresh redis-server that answers a request 503 within 300 ms of
 * Redis going away (?timeout=). */
static sema_client_t *client_on_redis(const sema_client_opts_t *opts)
{
    char engine[80];
    sema_client_t *c = NULL;

    start_redis();
    snprintf(engine, sizeof engine, "redis://127.0.0.1:%d?timeout=300", redis_port);
    const char *args[] = {"--engine", engine, "--durability", "relaxed", NULL};
    start_semad_with(args);
    wait_healthz(200); /* (its setup on Redis may take longer than the 300 ms) */
    ASSERT_OK(sema_client_new(&c, semad_url, opts));
    return c;
}

/* Releases semad has answered 503. */
static long releases_answered_503(void)
{
    long n = metric("semad_http_requests_total{method=\"DELETE\",route=\"/v1/leases/{id}\","
                    "status=\"503\"}");
    return n > 0 ? n : 0;
}

typedef struct {
    sema_client_t *c;
    const char *id;
    int rc;
    sema_client_error_t err;
    atomic_int done;
} release_call_t;

static void *release_thread(void *arg)
{
    release_call_t *r = arg;
    r->rc = sema_client_release(r->c, r->id, &r->err);
    atomic_store(&r->done, 1);
    return NULL;
}

TEST(release_answered_503_is_sent_again_for_its_time_budget_until_redis_is_back)
{
    /* Retries a second apart (semad's Retry-After: 1) for 30 s: semad itself may take up to
     * 3 s more to reconnect to a Redis that is back (50 ms doubling to 2 s, jittered by
     * half), and a loaded machine takes seconds more to start Redis again. */
    sema_client_opts_t opts = {.retry_ms = 30000};
    sema_client_t *c = client_on_redis(&opts);
    sema_acquire_opts_t o = {.weight = 2, .timeout_ms = 0, .ttl_ms = 120000};
    sema_lease_t l, all;
    pthread_t t;

    ASSERT_OK(sema_client_create(c, "r503", 2, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "r503", &o, &l, NULL));
    stop_redis();
    int64_t t0 = mono_ms();
    release_call_t r = {.c = c, .id = l.id};
    ASSERT_OK(pthread_create(&t, NULL, release_thread, &r));
    /* Redis is away for 1.5 s: far longer than a budget of 2 retries, and the release
     * keeps being answered 503 ("Redis is unreachable") and sent again meanwhile */
    while (mono_ms() - t0 < 1500 || releases_answered_503() < 2) {
        ASSERT(!atomic_load(&r.done));
        ASSERT_LT(mono_ms() - t0, 5000 * slow());
        usleep(10000);
    }
    start_redis();
    pthread_join(t, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.err.code, 0);
    /* the units are back at once: a try of the whole capacity is granted */
    ASSERT_OK(sema_client_acquire(c, "r503", &o, &all, NULL));
    ASSERT_OK(sema_client_release(c, all.id, NULL));
    sema_client_free(c);
}

TEST(release_answered_503_fails_once_its_time_budget_is_spent)
{
    sema_client_opts_t opts = {.retry_ms = 1500}; /* a retry a second later, not a second one */
    sema_client_t *c = client_on_redis(&opts);
    sema_acquire_opts_t o = {.weight = 1, .timeout_ms = 0, .ttl_ms = 120000};
    sema_client_error_t e;
    sema_lease_t l;

    ASSERT_OK(sema_client_create(c, "r503-budget", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "r503-budget", &o, &l, NULL));
    stop_redis();
    wait_healthz(503);
    int64_t t0 = mono_ms();
    ASSERT_EQ(sema_client_release(c, l.id, &e), SEMA_EIO);
    int64_t took = mono_ms() - t0;
    ASSERT_EQ(e.http_status, 503);
    ASSERT_STREQ(e.problem, "store_unavailable");
    /* the first try, and one retry after the Retry-After's second when the first answer came
     * within the first half second (on a busy machine it may not have: then no retry may
     * start past the 1.5 s); never a third, and no waiting for Redis to come back */
    long tries = releases_answered_503();
    ASSERT_GE(tries, 1);
    ASSERT_LE(tries, 2);
    if (tries == 2)
        ASSERT_GE(took, 1000);
    ASSERT_LT(took, 10000 * slow());
    start_redis();
    wait_healthz(200);
    ASSERT_OK(sema_client_release(c, l.id, NULL));
    sema_client_free(c);
}

TEST(release_answered_503_fails_once_its_retries_run_out)
{
    sema_client_opts_t opts = {.max_retries = 2}; /* a cap within the time budget: retries
                                                     after 1 and 2 s (semad's Retry-After) */
    sema_client_t *c = client_on_redis(&opts);
    sema_acquire_opts_t o = {.weight = 1, .timeout_ms = 0, .ttl_ms = 120000};
    sema_client_error_t e;
    sema_lease_t l;

    ASSERT_OK(sema_client_create(c, "r503-out", 1, NULL, NULL));
    ASSERT_OK(sema_client_acquire(c, "r503-out", &o, &l, NULL));
    stop_redis();
    wait_healthz(503);
    ASSERT_EQ(sema_client_release(c, l.id, &e), SEMA_EIO);
    ASSERT_EQ(e.http_status, 503);
    ASSERT_STREQ(e.problem, "store_unavailable");
    ASSERT_EQ(releases_answered_503(), 3); /* the first try and both retries */
    /* it did not happen: the lease holds its unit until its ttl */
    start_redis();
    wait_healthz(200);
    sema_lease_t still;
    ASSERT_OK(sema_client_lease_get(c, l.id, &still, NULL));
    ASSERT_OK(sema_client_release(c, l.id, NULL));
    sema_client_free(c);
}
