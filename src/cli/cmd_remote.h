/* SPDX-License-Identifier: MIT */
/* cmd_remote.h - the `sema` verbs that talk to semad (create, get, ls, resize, rm, acquire,
 * renew, release, lease, revoke, wait-idle, run, lock, up, down, value, watch, ticket,
 * ticket-show, ticket-wait, ticket-leave). */
#ifndef SEMA_CLI_CMD_REMOTE_H
#define SEMA_CLI_CMD_REMOTE_H

#include <stdio.h>

#include "common/suggest.h"

/* Exit codes: CLI_EXIT_* in cli.h (0 ok, 1 refused, 2 usage, 69 server unreachable,
 * 75 timeout or busy, 76 lease lost; run and lock: the command's own status). */

/* Whether `verb` is one of the remote verbs. */
int cmd_remote_has(const char *verb);

/* Run the remote verb argv[0] with its arguments; returns the exit status above. Accepts
 * --server URL (else $SEMA_SERVER, else http://127.0.0.1:7070), --json and --help anywhere
 * among the verb's options. Blocks; may fork (run, lock). Not thread-safe (getopt). */
int cmd_remote(int argc, char **argv);

/* One line per remote verb ("  create NAME CAPACITY   create a semaphore"), for
 * `sema --help`. */
void cmd_remote_usage(FILE *out);

/* Offer every remote verb's name to `s` (an unknown verb's "did you mean"). */
void cmd_remote_suggest(suggest_t *s);

#endif /* SEMA_CLI_CMD_REMOTE_H */
