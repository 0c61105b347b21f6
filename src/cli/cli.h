/* SPDX-License-Identifier: MIT */
/* cli.h - the sema command's pieces: the command table, exit codes, option and duration
 * parsing shared by every verb (local and remote). */
#ifndef SEMA_CLI_H
#define SEMA_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "common/suggest.h"

/* Exit codes of `sema` (docs/shm.md lists them for users). `sema run` otherwise exits
 * with its command's status. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,          /* the operation failed (message on stderr) */
    CLI_EXIT_USAGE = 2,         /* bad command line (as the remote verbs) */
    CLI_EXIT_UNAVAILABLE = 69,  /* the remote form needs a server it cannot use (EX_UNAVAILABLE) */
    CLI_EXIT_TIMEOUT = 75,      /* not acquired in time, or busy with -t 0 (EX_TEMPFAIL) */
    CLI_EXIT_LOST = 76,         /* remote verbs: the lease was lost */
    CLI_EXIT_NOEXEC = 126,      /* `run`: the command exists but cannot be executed */
    CLI_EXIT_NOTFOUND = 127,    /* `run`: the command was not found */
    CLI_EXIT_SIGNAL_BASE = 128, /* `run`: the command died of signal N: 128 + N */
};

/* Width of the verb column of `sema --help` (the longest verb is ticket-leave). */
#define CLI_VERB_COLUMN 12

/* The global options (global.c): accepted before or after any verb, taken out of argv
 * before the verb runs. Strings are borrowed from argv; NULL when not given. */
typedef struct {
    const char *server;   /* -s, --server URL (else $SEMA_SERVER) */
    const char *cacert;   /* --cacert FILE (else $SEMA_CACERT) */
    const char *cert;     /* --cert FILE (else $SEMA_CERT) */
    const char *cert_key; /* --cert-key FILE: the key of --cert (else $SEMA_CERT_KEY) */
    int json;             /* --json: machine-readable output */
    int local;            /* --local: this machine's shared-memory semaphores */
} cli_global_t;

/* The global options given so far (one process, one command line). */
extern cli_global_t cli_global;

/* Take the global options ("--server URL", "--server=URL", "-s URL", "--json", ...) out of
 * argv[first..*argc) into cli_global, up to a "--" (or, with `stop_at_word`, up to the first
 * argument that does not begin with '-': the verb). What is left keeps its order; argv stays
 * NULL-terminated. Returns 0, or CLI_EXIT_USAGE after printing "WHO: option '--server' needs
 * a value". Options it does not know stay where they are, for the verb's own parser. */
int cli_global_take(const char *who, int *argc, char **argv, int first, int stop_at_word);

/* Offer every global option's long name (without "--") to `s`, for "did you mean". */
void cli_global_suggest(suggest_t *s);

/* The global options' lines of a verb's --help. */
void cli_global_help(FILE *out);

/* A verb. argv[0] is the verb itself; the global options (`--local` among them, which
 * chooses `local` over `remote`) have been taken out of argv into cli_global. A NULL
 * handler means that form does not exist (yet). */
typedef struct {
    const char *name;
    int (*local)(int argc, char **argv);
    int (*remote)(int argc, char **argv);
    const char *summary; /* one line for `sema help` */
    const char *usage;   /* the text of `sema VERB --help` */
} cli_command_t;

/* One option of a verb: `-c VALUE`, `-cVALUE`, `--capacity VALUE`, `--capacity=VALUE`, or a
 * flag (`value` NULL, `flag` set to 1). */
typedef struct {
    char short_name; /* 0: long form only */
    const char *long_name;
    const char **value;
    int *flag;
} cli_opt_t;

/* Parse argv[1..argc) against `opts` (terminated by an entry with long_name NULL).
 * Positional arguments go to pos[0..*npos) (at most maxpos); parsing stops at "--", and
 * *rest gets the index after it (argc if there is none). Prints a message naming `verb`
 * and returns CLI_EXIT_USAGE on an unknown option, a missing value or too many
 * positionals; 0 otherwise. */
int cli_parse_opts(const char *verb, int argc, char **argv, const cli_opt_t *opts, char **pos,
                   int maxpos, int *npos, int *rest);

/* Durations, as semad reads them: "500ms", "10s", "2m", "1h", "1.5s"; a bare number other
 * than 0 is refused rather than guessed; "forever", "inf" or any negative value mean -1
 * (wait forever). Returns 0 and *ms, or -1 if `s` is
 * not a duration (or overflows). */
int cli_parse_duration_ms(const char *s, int64_t *ms);

/* A decimal unsigned integer in [min, max]. Returns 0 and *out, or -1. */
int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Print "sema VERB: message" for a usage error and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* `sema token` (cmd_token.c, in builds with semad): bearer tokens for semad --auth. */
int cmd_token(int argc, char **argv);

/* The local (shared-memory) verbs, in cmd_local.c. */
int cli_local_run(int argc, char **argv);
int cli_local_ls(int argc, char **argv);
int cli_local_rm(int argc, char **argv);

#endif /* SEMA_CLI_H */
