/* SPDX-License-Identifier: MIT */
/* main.c - the sema command: global options, the verb table and dispatch between the local
 * (shared-memory) and remote (semad) forms of each verb. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sema/sema.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int remote_verb(int argc, char **argv);
static int bench_verb(int argc, char **argv);

/* The remote verbs (cmd_remote.c, talking to semad) and `sema bench` live in their own
 * files and may be absent from a build: weak references are NULL then. */
int cmd_remote_has(const char *verb) __attribute__((weak));
int cmd_remote(int argc, char **argv) __attribute__((weak));
void cmd_remote_usage(FILE *out) __attribute__((weak));
int cmd_bench(int argc, char **argv) __attribute__((weak));

#define EXIT_CODES_HELP                                                                            \
    "Exit codes: 0 ok; 1 the operation failed; 2 usage error; 69 no server to talk to;\n"          \
    "75 timed out (or busy with -t 0); 76 lease lost (remote); run: the command's\n"               \
    "status, 126 not executable, 127 not found, 128+N killed by signal N.\n"

/* Every verb of `sema`. To add a remote form, fill in `remote`; to add a verb, add a row. */
static const cli_command_t commands[] = {
    {"run", cli_local_run, remote_verb, "hold units of a semaphore while a command runs",
     "usage: sema run --local NAME [-c CAPACITY] [-w WEIGHT] [-t D] [-m MODE] -- CMD "
     "[ARGS...]\n"
     "Wait in FIFO order for WEIGHT units (default 1) of the semaphore NAME, run CMD while\n"
     "holding them, give them back when CMD ends, and exit with CMD's status. sema itself\n"
     "holds the units: if sema dies they come back, even if CMD lives on. Signals sent to\n"
     "sema (INT, TERM, HUP, QUIT, USR1, USR2, WINCH) are forwarded to CMD.\n"
     "  --local          a semaphore shared by the processes of this machine (/dev/shm)\n"
     "  -c, --capacity N create it with N units (default 1); an existing one must match\n"
     "                   (without -c, an existing one is used whatever its capacity)\n"
     "  -w, --weight N   units to hold (default 1)\n"
     "  -t, --timeout D  give up after D (500ms, 10s, 2m, 1h; 0 = do not wait; default\n"
     "                   forever) and exit 75\n"
     "  -m, --mode MODE  permissions when created, octal (default 600)\n" EXIT_CODES_HELP},
    {"ls", cli_local_ls, remote_verb, "list semaphores with their holders and waiters",
     "usage: sema ls --local [NAME...]\n"
     "List the semaphores of this machine (or only NAME...): capacity, available units,\n"
     "holders (pid, weight, since) and waiters in queue order. Units of dead processes are\n"
     "reclaimed before listing.\n" EXIT_CODES_HELP},
    {"rm", cli_local_rm, remote_verb, "remove semaphores",
     "usage: sema rm --local [-f] NAME...\n"
     "Remove the semaphores NAME. Processes that have one open keep using it; later opens\n"
     "create a new one.\n"
     "  -f, --force  no error if NAME does not exist\n" EXIT_CODES_HELP},
    {"help", cmd_help, cmd_help, "show help for sema or one of its verbs",
     "usage: sema help [VERB]\n"},
    {"version", cmd_version, cmd_version, "print the version", "usage: sema version\n"},
    {"bench", NULL, bench_verb, "measure a semad server (see `sema bench --help`)", NULL},
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
    if (cmd_remote != NULL && (cmd_remote_has == NULL || cmd_remote_has(argv[0])))
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
    if (cmd_bench != NULL)
        return cmd_bench(argc, argv);
    fprintf(stderr, "sema bench: not available in this build\n");
    return CLI_EXIT_UNAVAILABLE;
}

static void print_overview(FILE *out)
{
    fprintf(out, "usage: sema [--version] [--help] VERB [--local] [ARGS...]\n\n"
                 "sema limits concurrency: of threads, of processes on this machine (--local),\n"
                 "and across machines (through semad).\n\n"
                 "Verbs (run, ls and rm act on this machine's semaphores with --local):\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    if (cmd_remote_usage != NULL) {
        fprintf(out, "\nVerbs that talk to semad (without --local):\n");
        cmd_remote_usage(out);
    }
    fprintf(out, "\nRun `sema VERB --help` for a verb's options.\n" EXIT_CODES_HELP);
}

static int dispatch(const cli_command_t *c, int argc, char **argv);
static int wants_help(int argc, char **argv);

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stdout);
        return CLI_EXIT_OK;
    }
    /* `sema help VERB [--local]` prints exactly what `sema VERB [--local] --help` does. */
    int local = argc > 2 && strcmp(argv[2], "--local") == 0;
    char *av[] = {argv[1], local ? "--local" : "--help", local ? "--help" : NULL, NULL};
    const cli_command_t *c = find_command(argv[1]);
    if (c != NULL)
        return dispatch(c, local ? 3 : 2, av);
    if (!local && cmd_remote != NULL && cmd_remote_has != NULL && cmd_remote_has(argv[1]))
        return cmd_remote(2, av);
    return cli_usage_error("help", "unknown verb '%s'", argv[1]);
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

/* Remove `--local` (before any "--") from argv; returns 1 if it was there. */
static int take_local(int *argc, char **argv)
{
    int found = 0, out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            for (; i < *argc; i++)
                argv[out++] = argv[i];
            break;
        }
        if (strcmp(argv[i], "--local") == 0 && !found)
            found = 1;
        else
            argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
    return found;
}

static int dispatch(const cli_command_t *c, int argc, char **argv)
{
    int local = take_local(&argc, argv);
    int (*fn)(int, char **) = local ? c->local : c->remote;
    int remote_help = !local && c->remote == remote_verb && cmd_remote != NULL;
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

/* `sema --server URL VERB ...`: the options a remote verb also reads from the environment,
 * given before the verb; the variable each sets, or NULL. */
static const char *global_option(const char *arg)
{
    static const char *const opts[][2] = {
        {"--server", "SEMA_SERVER"}, {"--cacert", "SEMA_CACERT"}, {"--cert", "SEMA_CERT"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (strcmp(arg, opts[i][0]) == 0)
            return opts[i][1];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
        return cmd_version(argc - 1, argv + 1);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_overview(stdout);
        return CLI_EXIT_OK;
    }
    /* Connection options before the verb: remote verbs read them from the environment. */
    for (const char *var; argc > 3 && (var = global_option(argv[1])) != NULL;) {
        setenv(var, argv[2], 1);
        argc -= 2;
        argv += 2;
    }
    if (strcmp(argv[1], "help") == 0 && !wants_help(argc - 1, argv + 1))
        return cmd_help(argc - 1, argv + 1); /* it reads --local itself */
    const cli_command_t *c = find_command(argv[1]);
    if (c != NULL)
        return dispatch(c, argc - 1, argv + 1);
    if (cmd_remote != NULL && cmd_remote_has != NULL && cmd_remote_has(argv[1]))
        return cmd_remote(argc - 1, argv + 1); /* a verb only the remote side has */
    fprintf(stderr, "sema: unknown verb '%s' (see `sema help`)\n", argv[1]);
    return CLI_EXIT_USAGE;
}
