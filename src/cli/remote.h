/* SPDX-License-Identifier: MIT */
/* remote.h - what the remote verbs' files share: parsed options, the client, output. */
#ifndef SEMA_CLI_REMOTE_H
#define SEMA_CLI_REMOTE_H

#include <stdint.h>

#include "cli/cli.h"
#include "cli/cmd_remote.h"
#include <jansson.h>

#include "sema/client.h"

typedef struct {
    const char *verb;
    const char *server;
    const char *cacert;   /* --cacert: CAs to trust for https:// (NULL: $SEMA_CACERT) */
    const char *cert;     /* --cert: client certificate (NULL: $SEMA_CERT) */
    const char *cert_key; /* --cert-key: the certificate's key (NULL: $SEMA_CERT_KEY) */
    int json;
    uint64_t weight;         /* -w */
    int64_t timeout_ms;      /* -t; -1 forever */
    const char *timeout_arg; /* -t as typed ("1s"), for messages; NULL if not given */
    int64_t ttl_ms;          /* --ttl; 0 server default */
    const char *ttl_arg;     /* --ttl as typed, for messages; NULL if not given */
    uint64_t capacity;       /* -c */
    const char *owner;       /* --owner */
    const char *key;         /* --key: idempotency key */
    int mode;                /* --shared / --exclusive */
    int64_t grace_ms;        /* run/lock: SIGTERM -> SIGKILL */
    int local;               /* --local given (the shared-memory verbs live elsewhere) */
    uint64_t max_retries;    /* watch --max-retries (valid when has_max_retries) */
    int has_max_retries;
    int force;                 /* rm -f: no error for a NAME that does not exist */
    int64_t keepalive_ms;      /* ticket --keepalive; 0 server default */
    const char *keepalive_arg; /* --keepalive as typed, for messages */
    int header_done;           /* ls: the table's header is out */
    const char *tenant;        /* --tenant */
    sema_sem_config_t limits;  /* create, resize: --tenant-max, --rate, --burst (limits.set) */
    /* NAME as several semaphores ("gpu:2,db:1"; remote_parse_parts), nparts 0 otherwise */
    sema_client_part_t parts[SEMA_CLIENT_PARTS_MAX];
    size_t nparts;
    char parts_buf[1024];
    char **pos; /* positional arguments (before a CMD) */
    int npos;
    char **cmd; /* run/lock: the command after "--" (NULL-terminated) */
    int ncmd;
} remote_opts_t;

/* Exit status for a client error code and its detail `e` (may be NULL): see cmd_remote.h; a
 * 503, whatever its code, is CLI_EXIT_UNAVAILABLE. */
int remote_exit_code(int rc, const sema_client_error_t *e);

/* Print "sema VERB: <what>: <message>" to stderr and return the exit status for rc. */
int remote_fail(const remote_opts_t *o, const char *what, int rc, const sema_client_error_t *e);

/* A client for o->server; prints the error and returns NULL on failure. */
sema_client_t *remote_client(const remote_opts_t *o);

/* Unix epoch ms now (wall clock), to show how long until an expiry. */
int64_t remote_epoch_ms(void);

/* Print a lease (human or JSON) on stdout. */
void remote_print_lease(const remote_opts_t *o, const sema_lease_t *l);

/* Print a semaphore's state document (JSON text) human-readable on stdout. */
void remote_print_state(const char *json);

/* NAME as several semaphores, or one with its weight: "gpu:2,db:1" (a name without :W
 * weighs 1), "gpu:2". Fills o->parts (nparts > 1), or for one semaphore sets o->pos[0] to
 * its name and o->weight (when -w was not given). Returns 0 or a usage exit status. */
int remote_parse_parts(remote_opts_t *o);

/* The "semaphores" of a lease or ticket on several: [{"name","weight"[,"fence"]},...]. New;
 * NULL on ENOMEM. */
json_t *remote_parts_json(const sema_lease_part_t *parts, size_t n, int fenced);

/* A lease on several semaphores as JSON, as semad shows it: "lease", "semaphores" (with
 * their fences), "fences" ({"name":fence,...}), "ttl_ms", "expires_at", "acquired_at". New;
 * NULL on ENOMEM. */
json_t *remote_multi_lease_json(const sema_lease_t *l, const sema_lease_part_t *parts, size_t n);

/* sema acquire on several semaphores: print the lease id (or the lease with --json). */
int remote_acquire_parts(remote_opts_t *o, sema_client_t *c, const sema_acquire_opts_t *ao);

/* sema get: the limits and tenants of a state document, after its counters. */
void remote_print_limits(json_t *doc);

/* --cacert, --cert and --cert-key with an http:// server, or a client certificate missing its
 * other half: prints why and returns CLI_EXIT_USAGE; 0 when the options can be used. */
int remote_check_tls(const remote_opts_t *o);

/* sema run / sema lock. */
int remote_run(remote_opts_t *o);

/* sema watch. */
int remote_watch(remote_opts_t *o);

/* sema ticket, ticket-show, ticket-wait, ticket-leave. */
int remote_ticket(remote_opts_t *o);
int remote_ticket_show(remote_opts_t *o);
int remote_ticket_wait(remote_opts_t *o);
int remote_ticket_leave(remote_opts_t *o);

#endif /* SEMA_CLI_REMOTE_H */
