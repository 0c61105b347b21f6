/* SPDX-License-Identifier: MIT */
/* global.c - the options every verb of `sema` takes, before or after the verb (the man page's
 * GLOBAL OPTIONS): one table, read in one place, for every verb. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

cli_global_t cli_global;

#define VALUE(field) offsetof(cli_global_t, field), 1
#define FLAG(field) offsetof(cli_global_t, field), 0

/* No glued short form ("-sURL"): a lease or ticket id may begin with "-s". */
static const struct {
    char short_name; /* 0: long form only */
    const char *name;
    size_t field; /* offset in cli_global_t: a const char * or an int */
    int takes_value;
} options[] = {
    {'s', "server", VALUE(server)},   {0, "cacert", VALUE(cacert)}, {0, "cert", VALUE(cert)},
    {0, "cert-key", VALUE(cert_key)}, {0, "json", FLAG(json)},      {0, "local", FLAG(local)},
};
#define NOPTIONS (sizeof options / sizeof options[0])

/* The option `arg` names ("--server", "--server=URL", "-s"), or -1; *value is the text after
 * '=' or NULL. */
static int find(const char *arg, const char **value)
{
    *value = NULL;
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (arg[0] == '-' && arg[1] != '\0' && arg[1] == options[i].short_name && arg[2] == '\0')
            return (int)i;
        size_t n = strlen(options[i].name);
        if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, options[i].name, n) != 0)
            continue;
        if (arg[2 + n] == '\0')
            return (int)i;
        if (arg[2 + n] == '=' && options[i].takes_value) {
            *value = arg + 3 + n;
            return (int)i;
        }
    }
    return -1;
}

int cli_global_take(const char *who, int *argc, char **argv, int first, int stop_at_word)
{
    int out = first, i = first;
    for (; i < *argc; i++) {
        const char *a = argv[i], *value;
        if (strcmp(a, "--") == 0 || (stop_at_word && a[0] != '-'))
            break;
        int k = find(a, &value);
        if (k < 0) {
            argv[out++] = argv[i];
            continue;
        }
        char *slot = (char *)&cli_global + options[k].field;
        if (!options[k].takes_value) {
            *(int *)slot = 1;
            continue;
        }
        if (value == NULL && (i + 1 >= *argc || strcmp(argv[i + 1], "--") == 0)) {
            fprintf(stderr, "%s: option '%s' needs a value (see `sema --help`)\n", who, a);
            return CLI_EXIT_USAGE;
        }
        *(const char **)slot = value != NULL ? value : argv[++i];
    }
    while (i < *argc)
        argv[out++] = argv[i++];
    *argc = out;
    argv[out] = NULL;
    return 0;
}

void cli_global_suggest(suggest_t *s)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        suggest_offer(s, options[i].name);
}

void cli_global_help(FILE *out)
{
    fprintf(out, "global options (before or after the verb):\n"
                 "  -s, --server URL  semad to talk to (default $SEMA_SERVER or "
                 "http://127.0.0.1:7070;\n"
                 "                 a URL without a scheme is http://)\n"
                 "  --cacert FILE  https://: PEM file of the CAs to trust (default $SEMA_CACERT,\n"
                 "                 else the system's)\n"
                 "  --cert FILE    https://: PEM client certificate (default $SEMA_CERT)\n"
                 "  --cert-key FILE  its private key, if not in the certificate's file (default\n"
                 "                 $SEMA_CERT_KEY)\n"
                 "  --json         machine-readable output\n"
                 "  --local        this machine's shared-memory semaphores (run, ls, rm)\n"
                 "  (a semad run with --auth wants a token: set $SEMA_TOKEN)\n");
}
