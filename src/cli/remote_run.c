/* SPDX-License-Identifier: MIT */
/* remote_run.c - `sema run` and `sema lock`: hold a lease while a command runs, renew it in
 * the background, forward signals, and stop the command if the lease is lost. */
#include "cli/remote.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/child.h"

static volatile int cancel_flag; /* a signal came while acquiring */
static int lost_reason;          /* atomic: set by the keep-alive thread */

static void on_lost(void *arg, const sema_lease_t *lease, int reason)
{
    (void)arg;
    (void)lease;
    __atomic_store_n(&lost_reason, reason, __ATOMIC_RELEASE);
    cli_child_stop();
}

/* Acquire (or lock); -c creates a missing semaphore and acquires again. Creating needs the
 * admin right where acquiring needs only acquire, so it is tried only when needed: a worker's
 * `sema run NAME -c N` works with an acquire token once NAME exists. */
static int acquire_or_create(remote_opts_t *o, sema_client_t *c, const sema_acquire_opts_t *ao,
                             sema_multi_lease_t *m, sema_client_error_t *e)
{
    sema_lease_t *lease = &m->lease;

    m->nparts = 0;
    if (o->mode != 0)
        return sema_client_lock(c, o->pos[0], o->mode, ao, lease, e);
    if (o->nparts > 0) /* all at once; the lease stands for every part */
        return sema_client_acquire_all(c, o->parts, o->nparts, ao, m, e);
    int rc = sema_client_acquire(c, o->pos[0], ao, lease, e);
    if (rc != SEMA_ENOENT || o->capacity == 0)
        return rc;
    rc = sema_client_create(c, o->pos[0], o->capacity, NULL, e);
    if (rc == 0 || rc == SEMA_EEXIST) /* EEXIST: made meanwhile, with another capacity */
        rc = sema_client_acquire(c, o->pos[0], ao, lease, e);
    return rc;
}

static int take_lease(remote_opts_t *o, sema_client_t *c, sema_multi_lease_t *lease)
{
    sema_acquire_opts_t ao = {.weight = o->weight,
                              .timeout_ms = o->timeout_ms,
                              .ttl_ms = o->ttl_ms,
                              .owner = o->owner,
                              .cancel = &cancel_flag,
                              .tenant = o->tenant};
    sema_client_error_t e;
    int rc = acquire_or_create(o, c, &ao, lease, &e);

    if (rc == SEMA_ECANCELED && __atomic_load_n((int *)&cancel_flag, __ATOMIC_ACQUIRE)) {
        int sig = cli_child_pending();
        return CLI_EXIT_SIGNAL_BASE + (sig ? sig : SIGINT);
    }
    if (rc == SEMA_ENOENT && o->nparts > 0)
        fprintf(stderr, "sema %s: %s: one of them does not exist (create it with `sema create`)\n",
                o->verb, o->pos[0]);
    else if (rc == SEMA_ENOENT && o->mode == 0 && o->capacity == 0)
        fprintf(stderr,
                "sema %s: %s: no such semaphore (create it with -c CAPACITY, or with `sema "
                "create %s CAPACITY`)\n",
                o->verb, o->pos[0], o->pos[0]);
    else if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    return rc == 0 ? 0 : CLI_EXIT_FAIL;
}

/* Whether "K=V" is one of the variables sema sets for its command. */
static int is_ours(const char *kv)
{
    static const char *const ours[] = {"SEMA_LEASE=", "SEMA_FENCE=", "SEMA_FENCES="};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (strncmp(kv, ours[i], strlen(ours[i])) == 0)
            return 1;
    return 0;
}

/* Writes `name` at s with '%', ',' and '=' percent-encoded (%25, %2C, %3D, as in a URL), so
 * that SEMA_FENCES splits at ',' and '=' alone. Returns the bytes written (at most 3 a byte
 * of the name); s has room. */
static size_t put_name(char *s, const char *name)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; *name != '\0'; name++) {
        unsigned char c = (unsigned char)*name;
        if (c == '%' || c == ',' || c == '=') {
            s[n++] = '%';
            s[n++] = hex[c >> 4];
            s[n++] = hex[c & 15];
        } else {
            s[n++] = (char)c;
        }
    }
    s[n] = '\0';
    return n;
}

/* "SEMA_FENCES=gpu=3,db=7" for a lease on several semaphores, else NULL. Malloc'd. */
static char *fences_var(const sema_multi_lease_t *m)
{
    if (m->nparts == 0)
        return NULL;
    size_t cap = sizeof "SEMA_FENCES=" + m->nparts * (3 * SEMA_CLIENT_NAME_MAX + 24), n;
    char *s = malloc(cap);
    if (s == NULL)
        return NULL;
    n = (size_t)snprintf(s, cap, "SEMA_FENCES=");
    for (size_t i = 0; i < m->nparts; i++) {
        n += (size_t)snprintf(s + n, cap - n, "%s", i ? "," : "");
        n += put_name(s + n, m->parts[i].name);
        n += (size_t)snprintf(s + n, cap - n, "=%" PRIu64, m->parts[i].fence);
    }
    return s;
}

/* The command's environment: sema's, less any SEMA_LEASE, SEMA_FENCE and SEMA_FENCES of its
 * own, plus the lease's (vars[0..2], malloc'd, freed by the caller). NULL on ENOMEM. */
static char **child_env(const sema_multi_lease_t *m, char *vars[3])
{
    size_t n = 0, k = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 4, sizeof *env);
    size_t idlen = sizeof "SEMA_LEASE=" + strlen(m->lease.id), flen = sizeof "SEMA_FENCE=" + 20;
    vars[0] = malloc(idlen);
    vars[1] = malloc(flen);
    vars[2] = fences_var(m);
    if (env == NULL || vars[0] == NULL || vars[1] == NULL || (m->nparts > 0 && vars[2] == NULL)) {
        free(env);
        return NULL;
    }
    snprintf(vars[0], idlen, "SEMA_LEASE=%s", m->lease.id);
    snprintf(vars[1], flen, "SEMA_FENCE=%" PRIu64, m->lease.fence);
    for (size_t i = 0; i < n; i++)
        if (!is_ours(environ[i]))
            env[k++] = environ[i];
    for (size_t i = 0; i < 3; i++)
        if (vars[i] != NULL)
            env[k++] = vars[i];
    return env;
}

/* Start the command with its lease and fence in its environment. */
static pid_t start_command(const remote_opts_t *o, const sema_multi_lease_t *m)
{
    char *vars[3] = {NULL, NULL, NULL};
    char **env = child_env(m, vars);
    pid_t pid = env != NULL ? cli_child_start(o->verb, o->cmd, env) : -1;

    free(env); /* the child has its copy */
    for (size_t i = 0; i < 3; i++)
        free(vars[i]);
    return pid;
}

/* The lease was lost: say so as the command is stopped. */
static void say_lost(void *arg)
{
    const remote_opts_t *o = ((void **)arg)[0];
    const sema_lease_t *lease = ((void **)arg)[1];
    int why = __atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE);

    fprintf(stderr, "sema %s: lease %s on %s lost (%s): stopping the command\n", o->verb, lease->id,
            lease->name, sema_strerror(why));
}

/* Stop renewing and release; a lease that ended early turns the result into "lost". */
static int finish(remote_opts_t *o, sema_keepalive_t *ka, int cmd_status)
{
    sema_client_error_t e;
    int rc = sema_lease_keepalive_stop(ka, 1, &e);

    if (rc == 0)
        return cmd_status;
    if (__atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE) != 0)
        return CLI_EXIT_LOST; /* already reported */
    if (rc == SEMA_EEXPIRED || rc == SEMA_EREVOKED || rc == SEMA_ESTALE || rc == SEMA_ECANCELED ||
        rc == SEMA_ENOENT || __atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE) != 0) {
        fprintf(stderr, "sema %s: the lease ended before the command did: %s\n", o->verb,
                e.message);
        return CLI_EXIT_LOST;
    }
    fprintf(stderr, "sema %s: warning: could not release the lease (%s); it expires by itself\n",
            o->verb, e.message);
    return cmd_status;
}

int remote_run(remote_opts_t *o)
{
    sema_multi_lease_t m;
    sema_lease_t *lease = &m.lease;
    sema_keepalive_t *ka = NULL;

    if (cli_child_catch(&cancel_flag) != 0) {
        perror("sema: pipe");
        return CLI_EXIT_FAIL;
    }
    int rc = o->mode == 0 ? remote_parse_parts(o) : 0;
    if (rc != 0)
        return rc;
    sema_client_t *c = remote_client(o);
    if (c == NULL)
        return CLI_EXIT_USAGE;
    rc = take_lease(o, c, &m);
    if (rc == 0 && (rc = sema_lease_keepalive_start(&ka, c, lease, on_lost, NULL)) != 0) {
        fprintf(stderr, "sema %s: cannot start the keep-alive: %s\n", o->verb, sema_strerror(rc));
        sema_client_release(c, lease->id, NULL);
        rc = CLI_EXIT_FAIL;
    }
    if (rc != 0) {
        sema_client_free(c);
        return rc;
    }
    pid_t pid = start_command(o, &m);
    int status;
    if (pid < 0) {
        perror("sema: fork");
        status = CLI_EXIT_FAIL;
    } else {
        void *arg[2] = {o, lease};
        status = cli_child_wait(o->verb, pid, o->grace_ms, say_lost, arg);
    }
    int lost = __atomic_load_n(&lost_reason, __ATOMIC_ACQUIRE) != 0;
    rc = finish(o, ka, status);
    sema_client_free(c);
    return lost ? CLI_EXIT_LOST : rc;
}
