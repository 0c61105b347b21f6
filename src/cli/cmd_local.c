/* SPDX-License-Identifier: MIT */
/* cmd_local.c - the sema command's local verbs (`run`, `ls`, `rm` with --local), on the
 * crash-safe shared-memory semaphores of libsema. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/child.h"
#include "cli/cli.h"
#include "sema/sema.h"

/* What a name must be, for the message of one that is not: semad's names may hold '/' and
 * more, so a name moved over from the remote form is the usual way to get here. */
#define NAME_RULE                                                                                  \
    "a shared-memory name is 1-200 characters of A-Z a-z 0-9 . _ - and does not start with "       \
    "'.'"

/* A usage error for NAME if `rc` (of sema_shm_open or sema_shm_unlink) says the name is bad;
 * 0 otherwise. */
static int bad_name(const char *verb, const char *name, int rc)
{
    if (rc != SEMA_EINVAL && rc != SEMA_ENAMETOOLONG)
        return 0;
    return cli_usage_error(verb, "bad name '%s': " NAME_RULE, name);
}

/* --- run ---------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    uint64_t capacity; /* 0: not given (use an existing one as it is) */
    uint64_t weight;
    int64_t timeout_ms;
    unsigned mode;
    char **cmd;
} run_args_t;

static int parse_run(int argc, char **argv, run_args_t *a)
{
    const char *cap = NULL, *weight = NULL, *timeout = NULL, *mode = NULL;
    const cli_opt_t opts[] = {{'c', "capacity", &cap, NULL},
                              {'w', "weight", &weight, NULL},
                              {'t', "timeout", &timeout, NULL},
                              {'m', "mode", &mode, NULL},
                              {0, NULL, NULL, NULL}};
    char *pos[1];
    int npos, rest, rc = cli_parse_opts("run --local", argc, argv, opts, pos, 1, &npos, &rest);
    if (rc != 0)
        return rc;
    if (npos != 1)
        return cli_usage_error("run --local", "needs a semaphore NAME");
    if (rest >= argc)
        return cli_usage_error("run --local", "needs a command after `--`");
    uint64_t m = 0600;
    char *end = NULL;
    *a = (run_args_t){pos[0], 0, 1, -1, 0600, argv + rest};
    if (cap != NULL && cli_parse_u64(cap, 1, UINT64_C(1) << 62, &a->capacity) != 0)
        return cli_usage_error("run --local", "bad capacity '%s' (a whole number from 1)", cap);
    if (weight != NULL && cli_parse_u64(weight, 1, UINT64_C(1) << 62, &a->weight) != 0)
        return cli_usage_error("run --local", "bad weight '%s' (a whole number from 1)", weight);
    if (timeout != NULL && cli_parse_duration_ms(timeout, &a->timeout_ms) != 0)
        return cli_usage_error(
            "run --local",
            "bad timeout '%s' (a duration with its unit, e.g. 500ms, 10s, 2m; 0 = try once)",
            timeout);
    if (mode != NULL) {
        m = strtoul(mode, &end, 8);
        if (*mode == '\0' || *end != '\0' || m > 0777)
            return cli_usage_error("run --local", "bad mode '%s' (octal, e.g. 660)", mode);
    }
    a->mode = (unsigned)m;
    return 0;
}

/* Returns 0, or the exit status: CLI_EXIT_USAGE for a bad name (parse_run checked the
 * capacity and the mode, so that is what SEMA_EINVAL means here), else CLI_EXIT_FAIL. */
static int open_for_run(const run_args_t *a, sema_shm_t **h)
{
    /* Without -c the semaphore must exist, as in the remote form: a mistyped NAME must not
     * become a new semaphore of its own. */
    int flags = a->capacity ? 0 : SEMA_SHM_EXISTING;
    int rc = sema_shm_open(a->name, a->capacity ? a->capacity : 1, flags, a->mode, h);
    if (rc == 0)
        return 0;
    if (bad_name("run --local", a->name, rc) != 0)
        return CLI_EXIT_USAGE;
    if (rc == SEMA_ENOENT) {
        fprintf(stderr,
                "sema run: no shared-memory semaphore '%s': create it with -c CAPACITY (sema run "
                "--local %s -c CAPACITY -- CMD), or check the name (sema ls --local)\n",
                a->name, a->name);
    } else if (rc == SEMA_EEXIST) {
        sema_shm_t *other = NULL;
        uint64_t cap = 0;
        if (sema_shm_open(a->name, 0, SEMA_SHM_EXISTING, 0, &other) == 0)
            cap = sema_shm_capacity(other);
        sema_shm_close(other);
        fprintf(stderr, "sema run: %s exists with capacity %llu, not %llu\n", a->name,
                (unsigned long long)cap, (unsigned long long)a->capacity);
    } else {
        fprintf(stderr, "sema run: %s: %s\n", a->name, sema_strerror(rc));
    }
    return CLI_EXIT_FAIL;
}

int cli_local_run(int argc, char **argv)
{
    run_args_t a;
    sema_shm_t *h = NULL;
    int rc = parse_run(argc, argv, &a);
    if (rc != 0)
        return rc;
    rc = open_for_run(&a, &h);
    if (rc != 0)
        return rc;
    rc = sema_shm_acquire(h, a.weight, a.timeout_ms);
    if (rc != 0) {
        if (rc == SEMA_EINVAL)
            fprintf(stderr, "sema run: weight %llu exceeds %s's capacity %llu\n",
                    (unsigned long long)a.weight, a.name, (unsigned long long)sema_shm_capacity(h));
        else
            fprintf(stderr, "sema run: %s: %s\n", a.name,
                    rc == SEMA_EBUSY ? "busy" : sema_strerror(rc));
        sema_shm_close(h);
        return rc == SEMA_EBUSY || rc == SEMA_ETIMEDOUT ? CLI_EXIT_TIMEOUT : CLI_EXIT_FAIL;
    }
    /* A lock-free grant is time-stamped by its first observer: observe it now, so that
     * `sema ls` shows how long this run has held. */
    sema_shm_stats_t *st = malloc(sizeof(*st));
    if (st != NULL)
        (void)sema_shm_stats(h, st);
    free(st);
    int status = CLI_EXIT_FAIL;
    pid_t pid = cli_child_catch(NULL) == 0 ? cli_child_start("run", a.cmd, NULL) : -1;
    if (pid < 0)
        fprintf(stderr, "sema run: cannot start %s: %s\n", a.cmd[0], strerror(errno));
    else
        status = cli_child_wait("run", pid, 0, NULL, NULL);
    sema_shm_close(h); /* gives the units back */
    return status;
}

/* --- ls ------------------------------------------------------------------------------ */

static void print_entries(const char *what, const sema_shm_entry_t *e, uint32_t n, int64_t now_ms)
{
    for (uint32_t i = 0; i < n; i++) {
        double age = e[i].since_ms > 0 ? (double)(now_ms - e[i].since_ms) / 1000.0 : 0.0;
        printf("  %s pid %d weight %llu for %.1fs\n", what, (int)e[i].pid,
               (unsigned long long)e[i].weight, age < 0 ? 0.0 : age);
    }
}

/* `sema ls --local`: the NAME column is as wide as the longest name shown (24 at least);
 * with --json, one object a line instead of the table. */
typedef struct {
    int width;
    int failures;
    int json;
} ls_t;

static void json_entries(const char *key, const sema_shm_entry_t *e, uint32_t n)
{
    printf(",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        printf("%s{\"pid\":%d,\"weight\":%llu,\"since\":%lld}", i ? "," : "", (int)e[i].pid,
               (unsigned long long)e[i].weight, (long long)e[i].since_ms);
    printf("]");
}

/* A name that opened is one of NAME_RULE's characters only: nothing to escape. */
static void show_json(const char *name, const sema_shm_stats_t *st)
{
    printf("{\"name\":\"%s\",\"capacity\":%llu,\"available\":%llu,\"held\":%llu,"
           "\"waiting\":%llu",
           name, (unsigned long long)st->capacity, (unsigned long long)st->available,
           (unsigned long long)st->held, (unsigned long long)st->waiting);
    json_entries("holders", st->holders, st->nholders);
    json_entries("waiters", st->waiters, st->nwaiters);
    printf("}\n");
}

/* A NAME of the command line that cannot be shown: a row of the table, or (--json) a line
 * on stderr, so that stdout stays JSON. */
static void show_error(const ls_t *l, const char *name, const char *why)
{
    if (l->json)
        fprintf(stderr, "sema ls: %s: %s\n", name, why);
    else
        printf("%-*s error: %s\n", l->width, name, why);
}

static int widen(const char *name, void *ud)
{
    ls_t *l = ud;
    size_t n = strlen(name);
    if (n > (size_t)l->width)
        l->width = n > 255 ? 255 : (int)n;
    return 0;
}

static int show_one(const char *name, void *ud)
{
    ls_t *l = ud;
    int w = l->width;
    sema_shm_t *h = NULL;
    sema_shm_stats_t *st = malloc(sizeof(*st));
    int rc = st == NULL ? SEMA_ENOMEM : sema_shm_open(name, 0, SEMA_SHM_EXISTING, 0, &h);
    if (rc == 0)
        rc = sema_shm_stats(h, st);
    if (rc == SEMA_ENOENT) {
        show_error(l, name, "no such shared-memory semaphore");
        l->failures++;
    } else if (rc == SEMA_EINVAL || rc == SEMA_ENAMETOOLONG) {
        show_error(l, name, "bad name: " NAME_RULE);
        l->failures++;
    } else if (rc != 0) {
        show_error(l, name, sema_strerror(rc));
        l->failures++;
    } else if (l->json) {
        show_json(name, st);
    } else {
        printf("%-*s %10llu %10llu %8u %8u\n", w, name, (unsigned long long)st->capacity,
               (unsigned long long)st->available, st->nholders, st->nwaiters);
        int64_t now_ms = (int64_t)time(NULL) * 1000;
        print_entries("holder", st->holders, st->nholders, now_ms);
        print_entries("waiter", st->waiters, st->nwaiters, now_ms);
    }
    sema_shm_close(h);
    free(st);
    return 0;
}

int cli_local_ls(int argc, char **argv)
{
    const cli_opt_t opts[] = {{0, NULL, NULL, NULL}};
    char *pos[64];
    int npos, rest;
    ls_t l = {24, 0, cli_global.json};
    int rc = cli_parse_opts("ls --local", argc, argv, opts, pos, 64, &npos, &rest);
    if (rc != 0)
        return rc;
    /* a first pass for the column's width (a name made between the passes may stick out) */
    rc = npos == 0 ? sema_shm_foreach(widen, &l) : 0;
    for (int i = 0; i < npos; i++)
        widen(pos[i], &l);
    if (rc == 0) {
        if (!l.json)
            printf("%-*s %10s %10s %8s %8s\n", l.width, "NAME", "CAPACITY", "AVAILABLE", "HOLDERS",
                   "WAITERS");
        if (npos == 0)
            rc = sema_shm_foreach(show_one, &l);
    }
    if (rc != 0) {
        fprintf(stderr, "sema ls: /dev/shm: %s\n", sema_strerror(rc));
        return CLI_EXIT_FAIL;
    }
    for (int i = 0; i < npos; i++)
        show_one(pos[i], &l);
    return l.failures ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* --- rm ------------------------------------------------------------------------------ */

int cli_local_rm(int argc, char **argv)
{
    int force = 0, failures = 0, usage = 0;
    const cli_opt_t opts[] = {{'f', "force", NULL, &force}, {0, NULL, NULL, NULL}};
    char *pos[64];
    int npos, rest;
    int rc = cli_parse_opts("rm --local", argc, argv, opts, pos, 64, &npos, &rest);
    if (rc != 0)
        return rc;
    if (npos == 0)
        return cli_usage_error("rm --local", "needs at least one NAME");
    for (int i = 0; i < npos; i++) {
        rc = sema_shm_unlink(pos[i]);
        if (bad_name("rm --local", pos[i], rc) != 0) {
            usage = 1;
        } else if (rc == SEMA_ENOENT && !force) {
            fprintf(stderr, "sema rm: no such shared-memory semaphore '%s' (-f: no error)\n",
                    pos[i]);
            failures++;
        } else if (rc != 0 && rc != SEMA_ENOENT) {
            fprintf(stderr, "sema rm: %s: %s\n", pos[i], sema_strerror(rc));
            failures++;
        }
    }
    if (usage)
        return CLI_EXIT_USAGE;
    return failures ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
