/* SPDX-License-Identifier: MIT */
/* bench_keyed.c - keyed lock/unlock over random keys: sema_keyed vs a table of pthread_rwlock_t. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sema/sema.h"

/* The peer: what programs usually write. A hash table from key to a
 * heap-allocated pthread_rwlock_t, created on first use and never freed,
 * with the same 64 mutex stripes for find-or-insert. glibc's default rwlock. */
#define PEER_STRIPES 64
#define NIMPL 4

struct peer_entry {
    struct peer_entry *next;
    uint64_t hash;
    size_t len;
    pthread_rwlock_t rw;
    char key[48];
};

struct peer_stripe {
    _Alignas(64) pthread_mutex_t mu;
    struct peer_entry **buckets;
    size_t mask, count;
};

struct peer {
    struct peer_stripe s[PEER_STRIPES];
};

struct op {
    uint32_t key; /* index into keys[] */
    uint8_t exclusive;
};

struct cfg {
    long keys, ops, rounds, threads_max;
};

static char (*keys)[32];
static size_t *key_lens;
static struct op *ops; /* threads_max * ops entries */
static uint64_t *hits; /* per key: exclusive sections counted without atomics */
static volatile uint64_t sink;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t peer_hash(const char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, v;

    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xd6e8feb86659fd93ULL;
        h ^= h >> 32;
    }
    v = 0;
    memcpy(&v, p, n);
    h = (h ^ v) * 0xd6e8feb86659fd93ULL;
    return h ^ (h >> 29);
}

static void peer_grow(struct peer_stripe *s)
{
    size_t nb = (s->mask + 1) * 2;
    struct peer_entry **b = calloc(nb, sizeof(*b));

    for (size_t i = 0; i <= s->mask; i++) {
        struct peer_entry *e = s->buckets[i], *next;

        for (; e != NULL; e = next) {
            next = e->next;
            e->next = b[(e->hash >> 6) & (nb - 1)];
            b[(e->hash >> 6) & (nb - 1)] = e;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->mask = nb - 1;
}

static pthread_rwlock_t *peer_get(struct peer *p, const char *key, size_t len)
{
    uint64_t h = peer_hash(key, len);
    struct peer_stripe *s = &p->s[h % PEER_STRIPES];
    struct peer_entry *e;

    pthread_mutex_lock(&s->mu);
    for (e = s->buckets[(h >> 6) & s->mask]; e != NULL; e = e->next)
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0)
            break;
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        e->hash = h;
        e->len = len;
        memcpy(e->key, key, len);
        pthread_rwlock_init(&e->rw, NULL);
        if (++s->count > s->mask + 1)
            peer_grow(s);
        e->next = s->buckets[(h >> 6) & s->mask];
        s->buckets[(h >> 6) & s->mask] = e;
    }
    pthread_mutex_unlock(&s->mu);
    return &e->rw;
}

static void peer_init(struct peer *p)
{
    for (int i = 0; i < PEER_STRIPES; i++) {
        pthread_mutex_init(&p->s[i].mu, NULL);
        p->s[i].buckets = calloc(16, sizeof(*p->s[i].buckets));
        p->s[i].mask = 15;
        p->s[i].count = 0;
    }
}

static size_t peer_free(struct peer *p)
{
    size_t n = 0;

    for (int i = 0; i < PEER_STRIPES; i++) {
        for (size_t b = 0; b <= p->s[i].mask; b++) {
            struct peer_entry *e = p->s[i].buckets[b], *next;

            for (; e != NULL; e = next, n++) {
                next = e->next;
                pthread_rwlock_destroy(&e->rw);
                free(e);
            }
        }
        free(p->s[i].buckets);
        pthread_mutex_destroy(&p->s[i].mu);
    }
    return n;
}

/* One thread's run over its slice of ops. */
struct job {
    int impl; /* 0: sema, 1: peer (locks made on first use), 2: peer (made beforehand),
                 3: rwlock array indexed by key number */
    sema_keyed_t *k;
    struct peer *p;
    const struct op *ops;
    long n;
    pthread_barrier_t *b;
};

static void section(const struct op *o)
{
    if (o->exclusive)
        hits[o->key]++; /* a lost update shows a broken exclusion */
    else
        sink = hits[o->key];
}

static void run_sema(struct job *j)
{
    for (long i = 0; i < j->n; i++) {
        const struct op *o = &j->ops[i];
        sema_keyed_lock_t l = SEMA_KEYED_LOCK_INIT;

        if (sema_keyed_lock(j->k, keys[o->key], key_lens[o->key],
                            o->exclusive ? SEMA_EXCLUSIVE : SEMA_SHARED, -1, &l) != 0)
            abort();
        section(o);
        sema_keyed_unlock(&l);
    }
}

static void run_peer(struct job *j)
{
    for (long i = 0; i < j->n; i++) {
        const struct op *o = &j->ops[i];
        pthread_rwlock_t *rw = peer_get(j->p, keys[o->key], key_lens[o->key]);

        if (o->exclusive)
            pthread_rwlock_wrlock(rw);
        else
            pthread_rwlock_rdlock(rw);
        section(o);
        pthread_rwlock_unlock(rw);
    }
}

/* Not a keyed lock: the key's number is known in advance and indexes a
 * preallocated array, no key bytes are looked at. The floor for comparison. */
static pthread_rwlock_t *direct;

static void run_direct(struct job *j)
{
    for (long i = 0; i < j->n; i++) {
        const struct op *o = &j->ops[i];
        pthread_rwlock_t *rw = &direct[o->key];

        if (o->exclusive)
            pthread_rwlock_wrlock(rw);
        else
            pthread_rwlock_rdlock(rw);
        section(o);
        pthread_rwlock_unlock(rw);
    }
}

static void *job_main(void *arg)
{
    struct job *j = arg;

    pthread_barrier_wait(j->b);
    if (j->impl == 0)
        run_sema(j);
    else if (j->impl == 3)
        run_direct(j);
    else
        run_peer(j);
    return NULL;
}

/* Returns seconds for `threads` threads doing cfg->ops ops each. */
static double run_once(const struct cfg *c, int impl, int threads, size_t *left)
{
    struct job j[8];
    pthread_t t[8];
    pthread_barrier_t b;
    sema_keyed_t *k = NULL;
    struct peer *p = NULL;
    uint64_t excl = 0, sum = 0;
    double t0, t1;

    memset(hits, 0, sizeof(*hits) * (size_t)c->keys);
    if (impl == 0) {
        if (sema_keyed_new(&k) != 0)
            abort();
    } else if (impl == 3) {
        direct = calloc((size_t)c->keys, sizeof(*direct));
        for (long i = 0; i < c->keys; i++)
            pthread_rwlock_init(&direct[i], NULL);
    } else {
        p = calloc(1, sizeof(*p));
        peer_init(p);
        for (long i = 0; impl == 2 && i < c->keys; i++)
            peer_get(p, keys[i], key_lens[i]); /* warm: every lock exists before timing */
    }
    pthread_barrier_init(&b, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        j[i] = (struct job){impl, k, p, ops + (size_t)i * (size_t)c->ops, c->ops, &b};
        pthread_create(&t[i], NULL, job_main, &j[i]);
    }
    pthread_barrier_wait(&b);
    t0 = now_s();
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    t1 = now_s();
    for (int i = 0; i < threads; i++)
        for (long n = 0; n < j[i].n; n++)
            excl += j[i].ops[n].exclusive;
    for (long i = 0; i < c->keys; i++)
        sum += hits[i];
    if (sum != excl) {
        fprintf(stderr, "bench_keyed: exclusion broken: %" PRIu64 " vs %" PRIu64 "\n", sum, excl);
        exit(1);
    }
    if (impl == 0) {
        *left = sema_keyed_count(k);
        sema_keyed_free(k);
    } else if (impl == 3) {
        for (long i = 0; i < c->keys; i++)
            pthread_rwlock_destroy(&direct[i]);
        free(direct);
        *left = (size_t)c->keys;
    } else {
        *left = peer_free(p);
        free(p);
    }
    pthread_barrier_destroy(&b);
    return t1 - t0;
}

static void make_input(const struct cfg *c)
{
    uint64_t seed = 0x5eed1234abcdULL;
    size_t total = (size_t)c->ops * (size_t)c->threads_max;

    keys = calloc((size_t)c->keys, sizeof(*keys));
    key_lens = calloc((size_t)c->keys, sizeof(*key_lens));
    hits = calloc((size_t)c->keys, sizeof(*hits));
    ops = calloc(total, sizeof(*ops));
    if (keys == NULL || key_lens == NULL || hits == NULL || ops == NULL)
        abort();
    for (long i = 0; i < c->keys; i++)
        key_lens[i] = (size_t)snprintf(keys[i], sizeof(keys[i]), "obj:%016" PRIx64, rnd(&seed));
    for (size_t i = 0; i < total; i++) {
        uint64_t r = rnd(&seed);

        ops[i].key = (uint32_t)(r % (uint64_t)c->keys);
        ops[i].exclusive = (r >> 40) % 2 == 0;
    }
}

static long arg_long(int argc, char **argv, const char *name, long def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return strtol(argv[i + 1], NULL, 10);
    return def;
}

int main(int argc, char **argv)
{
    struct cfg c;

    c.keys = arg_long(argc, argv, "--keys", 100000);
    c.ops = arg_long(argc, argv, "--ops", 1000000);
    c.rounds = arg_long(argc, argv, "--rounds", 3);
    c.threads_max = 2;
    if (c.keys < 1 || c.keys > UINT32_MAX || c.ops < 1 || c.rounds < 1) {
        fprintf(stderr, "usage: bench_keyed [--keys N] [--ops N per thread] [--rounds N]\n");
        return 2;
    }
    make_input(&c);
    printf("# keyed lock+unlock, %ld random keys, 50%% exclusive, %ld ops per thread, best of "
           "%ld\n",
           c.keys, c.ops, c.rounds);
    for (int threads = 1; threads <= c.threads_max; threads++) {
        static const char *names[NIMPL] = {"sema_keyed", "rwlock_table", "rwlock_table_warm",
                                           "rwlock_array_direct"};
        double best[NIMPL] = {1e30, 1e30, 1e30, 1e30};
        size_t left[NIMPL] = {0, 0, 0, 0};

        for (long r = 0; r < c.rounds; r++)
            for (int impl = 0; impl < NIMPL; impl++) {
                double s = run_once(&c, impl, threads, &left[impl]);

                best[impl] = s < best[impl] ? s : best[impl];
            }
        for (int impl = 0; impl < NIMPL; impl++) {
            double total = (double)c.ops * threads;

            printf("bench_keyed impl=%s threads=%d ops=%.0f ns_per_op=%.1f ops_per_s=%.0f "
                   "entries_left=%zu\n",
                   names[impl], threads, total, best[impl] * 1e9 / total, total / best[impl],
                   left[impl]);
        }
        printf("bench_keyed ratio threads=%d throughput_sema_over_rwlock_table=%.2f goal>=1.00 "
               "sema_entries_left=%zu\n",
               threads, best[1] / best[0], left[0]);
        printf("bench_keyed ratio threads=%d throughput_sema_over_rwlock_table_warm=%.2f "
               "(peer keeps %zu entries)\n",
               threads, best[2] / best[0], left[2]);
        printf("bench_keyed ratio threads=%d throughput_sema_over_rwlock_array_direct=%.2f "
               "(no key lookup: a floor, not a keyed lock)\n",
               threads, best[3] / best[0]);
        if (left[0] != 0) {
            fprintf(stderr, "bench_keyed: %zu keys left in sema_keyed\n", left[0]);
            return 1;
        }
    }
    return 0;
}
