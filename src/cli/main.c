/* SPDX-License-Identifier: MIT */
/* main.c - the sema command: global options, the verb table and dispatch between the local
 * (shared-memory) and remote (semad) forms of each verb. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/suggest.h"
#include "sema/sema.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int remote_verb(int argc, char **argv);
static int bench_verb(int argc, char **argv);

/* The remote verbs (cmd_remote.c, talking to semad), `sema token` and `sema bench` (the load
 * generator's library) are absent from a build without the server's libraries
 * (-DSEMA_BUILD_SERVER=OFF): their references are weak there, and NULL. */
#ifdef SEMA_CLI_REMOTE
#define REMOTE_PART
#define HAVE(fn) 1
#else
#define REMOTE_PART __attribute__((weak))
#define HAVE(fn) ((fn) != NULL)
#endif
int cmd_remote_has(const char *verb) REMOTE_PART;
int cmd_remote(int argc, char **argv) REMOTE_PART;
void cmd_remote_usage(FILE *out) REMOTE_PART;
void cmd_remote_suggest(suggest_t *s) REMOTE_PART;
int cmd_bench(int argc, char **argv) REMOTE_PART;
int cmd_token(int argc, char **argv) REMOTE_PART; /* declared in cli.h */
static int token_verb(int argc, char **argv);

#define EXIT_CODES_HELP                                                                            \
    "Exit codes: 0 ok; 1 the operation failed; 2 usage error; 69 no server to talk to,\n"          \
    "or one that cannot serve now (503); 75 timed out (or busy with -t 0); 76 lease lost\n"        \
    "(remote); run: the command's status, 126 not executable, 127 not found, 128+N\n"              \
    "killed by signal N.\n"

/* The local verbs' help has the shape of the remote verbs' (cmd_remote.c verb_help): usage,
 * what it does, options, exit status, examples. */
#define LOCAL_OPTION                                                                               \
    "  --local          a semaphore shared by the processes of this machine (/dev/shm)\n"

/* Every verb of `sema`. To add a remote form, fill in `remote`; to add a verb, add a row. */
static const cli_command_t commands[] = {
    {"run", cli_local_run, remote_verb, "hold units of a semaphore while a command runs",
     "usage: sema run --local NAME [-c CAPACITY] [-w W] [-t D] [-m MODE] -- CMD [ARGS...]\n"
     "\n"
     "hold units of a semaphore of this machine while CMD runs: wait in FIFO order for W\n"
     "units of NAME, run CMD, give them back when CMD ends. sema itself holds the units: if\n"
     "sema dies they come back, even if CMD lives on. Signals sent to sema (INT, TERM, HUP,\n"
     "QUIT, USR1, USR2, WINCH) are forwarded to CMD.\n"
     "NAME is 1-200 characters of A-Z a-z 0-9 . _ - and does not start with '.'.\n"
     "\n"
     "options:\n" LOCAL_OPTION
     "  -c, --capacity N  create it with N units if it does not exist; an existing one\n"
     "                 must have N (without -c, NAME must exist: it is used whatever its\n"
     "                 capacity)\n"
     "  -w, --weight W units to hold (default 1)\n"
     "  -t, --timeout D  wait at most D (500ms, 10s, 2m; 0 = try once; default forever)\n"
     "  -m, --mode MODE  permissions when created, octal (default 600)\n"
     "\n"
     "exit status: 0 ok, 1 failed, 2 usage, 75 timeout or busy; otherwise CMD's own status\n"
     "(126 not executable, 127 not found, 128+N if killed by signal N).\n"
     "\n"
     "examples:\n"
     "  sema run --local gpu -c 2 -- ./train.sh\n"
     "  sema run --local gpu -w 2 -t 10m -- ./big-job.sh\n"},
    {"ls", cli_local_ls, remote_verb, "list semaphores with their holders and waiters",
     "usage: sema ls --local [NAME...]\n"
     "\n"
     "list the semaphores of this machine (or only NAME...): capacity, available units,\n"
     "holders (pid, weight, since) and waiters in queue order. Units of dead processes are\n"
     "reclaimed before listing.\n"
     "\n"
     "options:\n" LOCAL_OPTION
     "  --json         one JSON object a line: name, capacity, available, held, waiting,\n"
     "                 holders and waiters (pid, weight, since: Unix time in ms)\n"
     "\n"
     "exit status: 0 ok, 1 failed, 2 usage.\n"
     "\n"
     "examples:\n"
     "  sema ls --local\n"
     "  sema ls --local gpu --json\n"},
    {"rm", cli_local_rm, remote_verb, "remove semaphores",
     "usage: sema rm --local [-f] NAME...\n"
     "\n"
     "remove the semaphores NAME of this machine. Processes that have one open keep using\n"
     "it; later opens create a new one.\n"
     "\n"
     "options:\n" LOCAL_OPTION "  -f, --force    no error if NAME does not exist\n"
     "\n"
     "exit status: 0 ok, 1 failed (no such semaphore without -f), 2 usage.\n"
     "\n"
     "examples:\n"
     "  sema rm --local gpu\n"},
    {"help", cmd_help, cmd_help, "show help for sema or one of its verbs",
     "usage: sema help [VERB]\n"},
    {"version", cmd_version, cmd_version, "print the version", "usage: sema version\n"},
    {"bench", NULL, bench_verb, "measure a semad server (see `sema bench --help`)", NULL},
    {"token", token_verb, token_verb, "make a bearer token for semad --auth", NULL},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const cli_command_t *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* Without --local: the remote form, when this build has it. */
static int remote_verb(int argc, char **argv)
{
    if (HAVE(cmd_remote) && (!HAVE(cmd_remote_has) || cmd_remote_has(argv[0])))
        return cmd_remote(argc, argv);
    fprintf(stderr,
            "sema %s: the remote form talks to a semad server and is not available in this "
            "build;\nuse `sema %s --local ...` for a semaphore shared by the processes of this "
            "machine\n",
            argv[0], argv[0]);
    return CLI_EXIT_UNAVAILABLE;
}

static int bench_verb(int argc, char **argv)
{
    if (HAVE(cmd_bench))
        return cmd_bench(argc, argv);
    fprintf(stderr, "sema bench: not available in this build\n");
    return CLI_EXIT_UNAVAILABLE;
}

static int token_verb(int argc, char **argv)
{
    if (HAVE(cmd_token))
        return cmd_token(argc, argv);
    fprintf(stderr, "sema token: not available in this build\n");
    return CLI_EXIT_UNAVAILABLE;
}

static void print_overview(FILE *out)
{
    fprintf(out, "usage: sema [--version] [--help] [GLOBAL OPTIONS] VERB [ARGS...]\n\n"
                 "sema holds units of a semaphore around any command: of processes on this\n"
                 "machine (--local), or across machines (through semad). (Threads of one\n"
                 "program: libsema, <sema/sema.h>.)\n\n"
                 "Verbs (run, ls and rm act on this machine's semaphores with --local):\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-*s %s\n", CLI_VERB_COLUMN, commands[i].name, commands[i].summary);
    if (HAVE(cmd_remote_usage)) {
        fprintf(out, "\nVerbs that talk to semad (without --local):\n");
        cmd_remote_usage(out);
    }
    fprintf(out, "\n");
    cli_global_help(out);
    fprintf(out, "\nRun `sema VERB --help` for a verb's options.\n" EXIT_CODES_HELP);
}

static int dispatch(const cli_command_t *c, int argc, char **argv);
static int wants_help(int argc, char **argv);

/* "sema: unknown verb 'crate' (did you mean `sema create`? `sema --help` lists the verbs)" */
static int unknown_verb(const char *prefix, const char *verb)
{
    suggest_t s;

    suggest_init(&s, verb);
    for (size_t i = 0; i < NCOMMANDS; i++)
        suggest_offer(&s, commands[i].name);
    if (HAVE(cmd_remote_suggest))
        cmd_remote_suggest(&s);
    const char *best = suggest_best(&s);
    fprintf(stderr, "%s: unknown verb '%s' (", prefix, verb);
    if (best != NULL)
        fprintf(stderr, "did you mean `sema %s`? ", best);
    fprintf(stderr, "`sema --help` lists the verbs)\n");
    return CLI_EXIT_USAGE;
}

static int cmd_help(int argc, char **argv)
{
    /* `sema help VERB [--local]` prints exactly what `sema VERB [--local] --help` does. */
    if (argc < 2) {
        print_overview(stdout);
        return CLI_EXIT_OK;
    }
    char *av[] = {argv[1], "--help", NULL};
    const cli_command_t *c = find_command(argv[1]);
    if (c != NULL)
        return dispatch(c, 2, av);
    if (!cli_global.local && HAVE(cmd_remote) && HAVE(cmd_remote_has) && cmd_remote_has(argv[1]))
        return cmd_remote(2, av);
    return unknown_verb("sema help", argv[1]);
}

static int cmd_version(int argc, char **argv)
{
    printf("sema %s\n", sema_version());
    return CLI_EXIT_OK;
}

/* Is `--help`/`-h` among the verb's own options (before any "--")? */
static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

static int dispatch(const cli_command_t *c, int argc, char **argv)
{
    int local = cli_global.local;
    int (*fn)(int, char **) = local ? c->local : c->remote;
    int remote_help = !local && c->remote == remote_verb && HAVE(cmd_remote);
    if (wants_help(argc, argv) && c->usage != NULL && !remote_help) {
        fputs(c->usage, stdout);
        return CLI_EXIT_OK;
    }
    if (fn == NULL) {
        fprintf(stderr, "sema %s: there is no --local form of this verb\n", c->name);
        return CLI_EXIT_USAGE;
    }
    int rc = fn(argc, argv);
    if (remote_help && c->local != NULL && wants_help(argc, argv))
        printf("\nFor a semaphore of this machine: sema %s --local --help\n", c->name);
    return rc;
}

/* The first of argv[0..argc) that names a verb, or NULL. */
static const char *verb_among(int argc, char **argv)
{
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (find_command(argv[i]) != NULL ||
            (HAVE(cmd_remote_has) && argv[i][0] != '-' && cmd_remote_has(argv[i])))
            return argv[i];
    return NULL;
}

/* "sema: unknown option '--sever' (did you mean --server?)", before the verb; a verb's own
 * option given before it ("sema --weight 2 acquire x") is said to belong after it. */
static int unknown_option(int argc, char **argv)
{
    suggest_t s;
    char typed[64];
    const char *arg = argv[0];

    snprintf(typed, sizeof typed, "%.*s", (int)strcspn(arg, "="), arg);
    suggest_init(&s, strlen(typed) > 2 ? typed + 2 : "");
    if (typed[1] == '-')
        cli_global_suggest(&s);
    const char *best = typed[1] == '-' ? suggest_best(&s) : NULL;
    const char *verb = best == NULL ? verb_among(argc - 1, argv + 1) : NULL;
    if (verb != NULL) {
        fprintf(stderr,
                "sema: option '%s' belongs after the verb: sema %s %s ... (`sema %s --help` "
                "lists its options; before the verb go the global options alone)\n",
                typed, verb, typed, verb);
        return CLI_EXIT_USAGE;
    }
    fprintf(stderr, "sema: unknown option '%s' (", typed);
    if (best != NULL)
        fprintf(stderr, "did you mean --%s? ", best);
    fprintf(stderr, "`sema --help` lists the global options)\n");
    return CLI_EXIT_USAGE;
}

/* `sema bench` reads the global options it shares (--server, given more than once, --cacert,
 * --json) with its own parser after the verb; before it, they are its defaults. */
static int own_globals(const char *verb)
{
    return strcmp(verb, "bench") == 0;
}

int main(int argc, char **argv)
{
    int vc = argc - 1;
    char **vv = argv + 1;
    int rc = vc > 0 ? cli_global_take("sema", &vc, vv, 0, 1) : 0; /* before the verb */
    if (rc != 0)
        return rc;
    if (vc < 1) {
        print_overview(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(vv[0], "--version") == 0 || strcmp(vv[0], "-V") == 0)
        return cmd_version(vc, vv);
    if (strcmp(vv[0], "--help") == 0 || strcmp(vv[0], "-h") == 0) {
        print_overview(stdout);
        return CLI_EXIT_OK;
    }
    if (vv[0][0] == '-')
        return unknown_option(vc, vv);
    char who[64];
    snprintf(who, sizeof who, "sema %.40s", vv[0]);
    if (!own_globals(vv[0]) && (rc = cli_global_take(who, &vc, vv, 1, 0)) != 0)
        return rc;
    if (strcmp(vv[0], "help") == 0 && !wants_help(vc, vv))
        return cmd_help(vc, vv);
    const cli_command_t *c = find_command(vv[0]);
    if (c != NULL)
        return dispatch(c, vc, vv);
    if (HAVE(cmd_remote) && HAVE(cmd_remote_has) && cmd_remote_has(vv[0]))
        return cmd_remote(vc, vv); /* a verb only the remote side has */
    return unknown_verb("sema", vv[0]);
}
