/* SPDX-License-Identifier: MIT */
/* cmd_remote.c - the `sema` verbs that talk to semad: argument parsing, the verb table and
 * the simple request/print verbs (run, lock and watch live in remote_*.c). */
#include "cli/remote.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#define DEFAULT_SERVER "http://127.0.0.1:7070"

/* Options a verb accepts (bit set). --help and the global options (cli_global, taken out of
 * argv before the verb runs) are always accepted. */
enum {
    O_W = 1,
    O_T = 2,
    O_TTL = 4,
    O_C = 8,
    O_OWNER = 16,
    O_MODE = 32,
    O_GRACE = 64,
    O_CMD = 128,
    O_KEY = 256,
    O_RETRIES = 512,
    O_KEEPALIVE = 1024,
    O_FORCE = 2048,
    O_TENANT = 4096,
    O_LIMITS = 8192
};

typedef int (*verb_fn)(remote_opts_t *o);

typedef struct {
    const char *name;
    const char *args;    /* synopsis after the verb */
    const char *summary; /* one line */
    int min_pos, max_pos;
    int opts;
    verb_fn fn;
    const char *examples;
} verb_t;

static int v_create(remote_opts_t *o);
static int v_get(remote_opts_t *o);
static int v_ls(remote_opts_t *o);
static int v_resize(remote_opts_t *o);
static int v_rm(remote_opts_t *o);
static int v_acquire(remote_opts_t *o);
static int v_renew(remote_opts_t *o);
static int v_release(remote_opts_t *o);
static int v_lease(remote_opts_t *o);
static int v_revoke(remote_opts_t *o);
static int v_wait_idle(remote_opts_t *o);
static int v_up(remote_opts_t *o);
static int v_down(remote_opts_t *o);
static int v_value(remote_opts_t *o);

static const verb_t verbs[] = {
    {"create", "NAME CAPACITY [--tenant-max N] [--rate R [--burst B]]",
     "create a semaphore (no error if identical)", 1, 2, O_C | O_LIMITS, v_create,
     "sema create builds 4\nsema create builds -c 4\nsema --server http://ci:7070 create deploy 1\n"
     "sema create gpu 8 --tenant-max 4\nsema create llm-api 10 --rate 50 --burst 5"},
    {"get", "NAME", "show a semaphore: counters, holders, waiters", 1, 1, 0, v_get,
     "sema get builds\nsema get builds --json | jq .holders"},
    {"ls", "[PREFIX]", "list semaphores (by name)", 0, 1, 0, v_ls, "sema ls\nsema ls ci/"},
    {"resize", "NAME [CAPACITY] [--tenant-max N] [--rate R] [--burst B]",
     "change a semaphore's capacity or limits (never revokes)", 1, 2, O_C | O_LIMITS, v_resize,
     "sema resize builds 8\nsema resize llm-api --rate 100"},
    {"rm", "[-f] NAME...", "delete semaphores (waiters fail, leases end)", 1, 64, O_FORCE, v_rm,
     "sema rm builds\nsema rm -f builds deploy"},
    {"acquire", "NAME[:W][,NAME[:W]...] [-w W] [-t D] [--ttl D] [--owner O] [--key K] [--tenant T]",
     "take units (of several semaphores at once) and print the lease id", 1, 1,
     O_W | O_T | O_TTL | O_OWNER | O_KEY | O_TENANT, v_acquire,
     "lease=$(sema acquire builds -t 30s --ttl 5m) || exit\n... ; sema release \"$lease\"\n"
     "lease=$(sema acquire gpu:2,db:1 --tenant acme)"},
    {"renew", "LEASE [--ttl D]", "extend a lease", 1, 1, O_TTL, v_renew,
     "sema renew \"$lease\" --ttl 10m"},
    {"release", "LEASE", "give a lease's units back", 1, 1, 0, v_release,
     "sema release \"$lease\""},
    {"lease", "LEASE", "show a lease", 1, 1, 0, v_lease, "sema lease \"$lease\" --json"},
    {"revoke", "LEASE", "end someone's lease now (administrators)", 1, 1, 0, v_revoke,
     "sema revoke \"$lease\""},
    {"wait-idle", "NAME [-t D]", "wait until all units are back and earlier waiters granted", 1, 1,
     O_T, v_wait_idle, "sema wait-idle builds -t 10m"},
    {"run",
     "NAME[:W][,NAME[:W]...] [-w W] [-t D] [--ttl D] [-c CAPACITY] [--tenant T] [--owner O] "
     "[--grace D] -- CMD [ARGS...]",
     "hold units (of several semaphores at once) while CMD runs", 1, 1,
     O_W | O_T | O_TTL | O_C | O_OWNER | O_GRACE | O_CMD | O_TENANT, remote_run,
     "sema run builds -c 4 -- make -j8\nsema run deploy -t 10m --ttl 30s -- ./deploy.sh prod\n"
     "sema run gpu:2,db:1 --tenant acme -- ./train.sh"},
    {"lock", "KEY --shared|--exclusive [-t D] [--ttl D] [--owner O] [--grace D] -- CMD [ARGS...]",
     "hold a keyed reader/writer lock while CMD runs", 1, 1,
     O_T | O_TTL | O_OWNER | O_MODE | O_GRACE | O_CMD, remote_run,
     "sema lock db/schema --exclusive -- ./migrate.sh\nsema lock db/schema --shared -- "
     "./report.sh"},
    {"up", "NAME", "legacy API: add one unit", 1, 1, 0, v_up, "sema up printer"},
    {"down", "NAME", "legacy API: take one unit if available (no lease)", 1, 1, 0, v_down,
     "sema down printer || echo busy"},
    {"value", "NAME", "legacy API: print the value", 1, 1, 0, v_value, "sema value printer"},
    {"watch", "NAME [--max-retries N]", "live view of holders and waiters (reconnects)", 1, 1,
     O_RETRIES, remote_watch,
     "sema watch builds\nsema watch builds | tee events.log\nsema watch builds --max-retries 5"},
    {"ticket",
     "NAME[:W][,NAME[:W]...] [-w W] [--ttl D] [--keepalive D] [--owner O] [--key K] "
     "[--tenant T]",
     "take a place in line (of several semaphores at once) and print the ticket id", 1, 1,
     O_W | O_TTL | O_OWNER | O_KEY | O_KEEPALIVE | O_TENANT, remote_ticket,
     "ticket=$(sema ticket export --keepalive 5m)\nsema ticket-wait \"$ticket\" -t 1h\n"
     "ticket=$(sema ticket gpu:2,db:1 --tenant acme)"},
    {"ticket-show", "TICKET [-t D]", "show a ticket: its place in line, or its lease", 1, 1, O_T,
     remote_ticket_show,
     "sema ticket-show \"$ticket\"\nsema ticket-show \"$ticket\" -t 30s --json"},
    {"ticket-wait", "TICKET [-t D]", "wait for a ticket's turn and print its lease id", 1, 1, O_T,
     remote_ticket_wait,
     "lease=$(sema ticket-wait \"$ticket\" -t 1h) || exit\n... ; sema release \"$lease\""},
    {"ticket-leave", "TICKET", "leave the line (a granted ticket's lease is released)", 1, 1, 0,
     remote_ticket_leave, "sema ticket-leave \"$ticket\""},
};

static const verb_t *find_verb(const char *name)
{
    for (size_t i = 0; name != NULL && i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(verbs[i].name, name) == 0)
            return &verbs[i];
    return NULL;
}

int cmd_remote_has(const char *verb)
{
    return find_verb(verb) != NULL;
}

void cmd_remote_usage(FILE *out)
{
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(out, "  %-*s %s\n", CLI_VERB_COLUMN, verbs[i].name, verbs[i].summary);
}

void cmd_remote_suggest(suggest_t *s)
{
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        suggest_offer(s, verbs[i].name);
}

static void verb_help(const verb_t *v, FILE *out)
{
    /* The common options go before a `-- CMD`: everything after it is the command's. */
    const char *cmd = strstr(v->args, " -- ");
    int head = cmd != NULL ? (int)(cmd - v->args) : (int)strlen(v->args);
    fprintf(out, "usage: sema %s %.*s [--server URL] [--json]%s\n\n%s.\n\n", v->name, head, v->args,
            cmd != NULL ? cmd : "", v->summary);
    if (v->opts != 0)
        fprintf(out, "options:\n");
    if (v->opts & O_W)
        fprintf(out, "  -w, --weight W units to take (default 1)\n");
    if (v->opts & O_T)
        fprintf(out, "  -t, --timeout D  wait at most D (500ms, 10s, 2m; 0 = try once; "
                     "default forever)\n");
    if (v->opts & O_TTL)
        fprintf(out, "  --ttl D        lease time to live (default: the server's, 60s)\n");
    if ((v->opts & O_C) && (v->opts & O_CMD))
        fprintf(out, "  -c, --capacity N  create the semaphore with capacity N if it is missing "
                     "(an\n                 existing one is used whatever its capacity)\n");
    else if (v->opts & O_C)
        fprintf(out, "  -c, --capacity N  the capacity (or give it after NAME)\n");
    if (v->opts & O_FORCE)
        fprintf(out, "  -f, --force    no error if NAME does not exist\n");
    if (v->opts & O_OWNER)
        fprintf(out, "  --owner O      owner recorded with the lease (default host:pid)\n");
    if ((v->opts & O_KEY) && (v->opts & O_KEEPALIVE))
        fprintf(out, "  --key K        idempotency key: taking a ticket again with the same K "
                     "while it\n                 lives returns the same ticket (safe retries)\n");
    else if (v->opts & O_KEY)
        fprintf(out, "  --key K        idempotency key: acquiring again with the same K while "
                     "the lease\n                 lives returns the same lease (safe retries)\n");
    if (v->opts & O_KEEPALIVE)
        fprintf(out, "  --keepalive D  the ticket leaves the line if nobody reads it for D, and "
                     "a grant\n                 nobody collects within D is released (default: "
                     "the server's, 30s)\n");
    if (v->opts & O_TENANT)
        fprintf(out, "  --tenant T     whose share the units count to: tenants take turns, "
                     "and a\n                 semaphore's tenant_max caps each\n");
    if (v->opts & O_LIMITS)
        fprintf(out, "  --tenant-max N  the most units one tenant may hold (0: no cap)\n"
                     "  --rate R       grant at most R units a second (0: no rate)\n"
                     "  --burst B      ... and at most B at once after a pause (default R)\n");
    if ((v->opts & O_TENANT) && (v->opts & O_KEEPALIVE))
        fprintf(out, "  NAME:W,NAME:W  several semaphores at once, all or nothing: the ticket "
                     "has a place\n                 in each one's line, holds nothing until it "
                     "has them all, then\n                 one lease on them all\n");
    else if ((v->opts & O_TENANT) && (v->opts & O_W))
        fprintf(out, "  NAME:W,NAME:W  several semaphores at once, all or nothing: the request "
                     "waits in\n                 each one's line and holds nothing until it "
                     "has them all\n");
    if (v->opts & O_MODE)
        fprintf(out, "  --shared | --exclusive  lock mode (one is required)\n");
    if (v->opts & O_GRACE)
        fprintf(out, "  --grace D      after a lost lease, SIGKILL CMD D after SIGTERM "
                     "(default 5s)\n");
    if (v->opts & O_RETRIES)
        fprintf(out, "  --max-retries N  give up after N failed reconnects in a row (default: "
                     "retry until\n                 interrupted). A lost stream is retried "
                     "after 0.5s, doubling up to 30s,\n                 with jitter (or the "
                     "server's SSE retry: delay); after a reconnect the\n                 "
                     "state is shown again, then the events missed (or \"reset\"). A 4xx reply\n"
                     "                 (unknown semaphore, bad name) ends watch at once.\n");
    if (v->opts != 0)
        fprintf(out, "\n");
    cli_global_help(out);
    fprintf(out, "\nexit status: 0 ok, 1 refused by the server, 2 usage, 69 server "
                 "unreachable or unable to serve now (503), 75 timeout or busy, 76 lease lost");
    if (v->opts & O_CMD)
        fprintf(out, ";\notherwise CMD's own status (126 CMD not executable, 127 not found, "
                     "128+N killed by signal N)");
    fprintf(out, ".\n");
    fprintf(out, "\nexamples:\n");
    for (const char *p = v->examples; *p;) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(out, "  %.*s\n", n, p);
        p += n + (nl ? 1 : 0);
    }
}

/* ---- argument parsing -------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static int usage_error(const verb_t *v, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sema %s: ", v->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: sema %s %s (sema %s --help for more)\n", v->name, v->args, v->name);
    return CLI_EXIT_USAGE;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || v > (1ull << 53))
        return -1;
    *out = v;
    return 0;
}

static const struct option long_opts[] = {
    {"weight", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 't'},
    {"ttl", required_argument, NULL, 'L'},
    {"capacity", required_argument, NULL, 'c'},
    {"owner", required_argument, NULL, 'o'},
    {"shared", no_argument, NULL, 'S'},
    {"exclusive", no_argument, NULL, 'X'},
    {"grace", required_argument, NULL, 'g'},
    {"key", required_argument, NULL, 'k'},
    {"help", no_argument, NULL, 'h'},
    {"max-retries", required_argument, NULL, 'R'},
    {"keepalive", required_argument, NULL, 'K'},
    {"force", no_argument, NULL, 'f'},
    {"tenant", required_argument, NULL, 'T'},
    {"tenant-max", required_argument, NULL, 'M'},
    {"rate", required_argument, NULL, 'r'},
    {"burst", required_argument, NULL, 'b'},
    {NULL, 0, NULL, 0},
};

/* The option letter's bit (0: always allowed). */
static int opt_bit(int ch)
{
    static const struct {
        int ch, bit;
    } map[] = {{'w', O_W},      {'t', O_T},       {'L', O_TTL},       {'c', O_C},
               {'o', O_OWNER},  {'S', O_MODE},    {'X', O_MODE},      {'g', O_GRACE},
               {'k', O_KEY},    {'R', O_RETRIES}, {'K', O_KEEPALIVE}, {'f', O_FORCE},
               {'T', O_TENANT}, {'M', O_LIMITS},  {'r', O_LIMITS},    {'b', O_LIMITS}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].ch == ch)
            return map[i].bit;
    return 0;
}

static int apply_opt(const verb_t *v, remote_opts_t *o, int ch, const char *arg)
{
    switch (ch) {
    case 'w':
        if (parse_u64(arg, &o->weight) != 0 || o->weight == 0)
            return usage_error(v, "bad weight '%s' (a whole number >= 1)", arg);
        return 0;
    case 't':
        o->timeout_arg = arg;
        if (cli_parse_duration_ms(arg, &o->timeout_ms) != 0)
            return usage_error(
                v, "bad timeout '%s' (a duration with its unit, e.g. 500ms, 10s, 2m; 0 = try once)",
                arg);
        return 0;
    case 'L':
        o->ttl_arg = arg;
        if (cli_parse_duration_ms(arg, &o->ttl_ms) != 0 || o->ttl_ms <= 0)
            return usage_error(v, "bad ttl '%s' (a duration with its unit, e.g. 30s, 5m)", arg);
        return 0;
    case 'g':
        if (cli_parse_duration_ms(arg, &o->grace_ms) != 0 || o->grace_ms < 0)
            return usage_error(v, "bad grace period '%s' (a duration with its unit, e.g. 5s)", arg);
        return 0;
    case 'c':
        if (parse_u64(arg, &o->capacity) != 0 || o->capacity == 0)
            return usage_error(v, "bad capacity '%s' (a whole number >= 1)", arg);
        return 0;
    case 'o':
        o->owner = arg;
        return 0;
    case 'f':
        o->force = 1;
        return 0;
    case 'R':
        if (parse_u64(arg, &o->max_retries) != 0)
            return usage_error(v, "bad --max-retries '%s' (a whole number >= 0)", arg);
        o->has_max_retries = 1;
        return 0;
    case 'k':
        o->key = arg;
        return 0;
    case 'T':
        o->tenant = arg;
        return 0;
    case 'M':
    case 'r':
    case 'b': {
        static const unsigned bits[] = {SEMA_SET_TENANT_MAX, SEMA_SET_RATE, SEMA_SET_BURST};
        int k = ch == 'M' ? 0 : ch == 'r' ? 1 : 2;
        uint64_t *to[] = {&o->limits.tenant_max, &o->limits.rate_per_s, &o->limits.rate_burst};
        if (parse_u64(arg, to[k]) != 0 || (k == 2 && *to[k] == 0))
            return usage_error(v, "bad %s '%s' (a whole number%s)",
                               k == 0   ? "--tenant-max"
                               : k == 1 ? "--rate"
                                        : "--burst",
                               arg, k == 2 ? " >= 1" : "; 0 removes it");
        o->limits.set |= bits[k];
        return 0;
    }
    case 'K':
        o->keepalive_arg = arg;
        if (cli_parse_duration_ms(arg, &o->keepalive_ms) != 0 || o->keepalive_ms <= 0)
            return usage_error(v, "bad keepalive '%s' (a duration with its unit, e.g. 30s, 5m)",
                               arg);
        return 0;
    case 'S':
    case 'X':
        if (o->mode != 0)
            return usage_error(v, "%s", "give one of --shared and --exclusive");
        o->mode = ch == 'S' ? SEMA_LOCK_SHARED : SEMA_LOCK_EXCLUSIVE;
        return 0;
    default:
        return usage_error(v, "%s", "unknown option");
    }
}

/* Lease and ticket ids are base64url and may begin with '-'. A long argument that is not one of our
 * long options is a lease id, not an option cluster. */
static int looks_like_lease(const verb_t *v, const char *arg)
{
    if ((strstr(v->args, "LEASE") == NULL && strstr(v->args, "TICKET") == NULL) || arg[0] != '-' ||
        strlen(arg) < 20)
        return 0;
    for (const struct option *lo = long_opts; lo->name != NULL; lo++) {
        size_t n = strlen(lo->name);
        if (strncmp(arg, "--", 2) == 0 && strncmp(arg + 2, lo->name, n) == 0 &&
            (arg[2 + n] == '\0' || arg[2 + n] == '='))
            return 0;
    }
    return 1;
}

/* Move lease-id-looking arguments behind the options (before "--" at index *dash). */
static void shelter_leases(const verb_t *v, int argc, char **argv, int dash, char **lease,
                           int *nlease, int *newdash)
{
    int out = 1;

    *nlease = 0;
    for (int i = 1; i < dash; i++) {
        if (*nlease < 1 && looks_like_lease(v, argv[i]))
            lease[(*nlease)++] = argv[i];
        else
            argv[out++] = argv[i];
    }
    *newdash = out;
    for (int i = dash; i < argc; i++)
        argv[out++] = argv[i];
}

/* An option getopt did not know: "unknown option '--tll' (did you mean --ttl?)". */
static int unknown_option(const verb_t *v, const char *arg)
{
    suggest_t s;
    char typed[64];

    snprintf(typed, sizeof typed, "%.*s", (int)strcspn(arg, "="), arg);
    suggest_init(&s, typed + (typed[0] == '-' && typed[1] == '-' ? 2 : 0));
    for (const struct option *lo = long_opts; typed[1] == '-' && lo->name != NULL; lo++) {
        int bit = opt_bit(lo->val);
        if (bit == 0 || (v->opts & bit))
            suggest_offer(&s, lo->name);
    }
    if (typed[1] == '-')
        cli_global_suggest(&s);
    const char *best = suggest_best(&s);
    if (best != NULL)
        return usage_error(v, "unknown option '%s' (did you mean --%s?)", typed, best);
    return usage_error(v, "unknown option '%s'", typed);
}

/* Split the arguments: options, positionals, and (run/lock) the command after "--". */
static int parse_args(const verb_t *v, int argc, char **argv, remote_opts_t *o)
{
    int dash = argc;
    char *lease[1];
    int nlease;

    /* run and lock: "--" starts the command; elsewhere getopt's own "--" (end of options)
     * lets names and lease ids begin with '-' */
    for (int i = 1; (v->opts & O_CMD) && i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            dash = i;
            break;
        }
    shelter_leases(v, argc, argv, dash, lease, &nlease, &dash);
    argc -= nlease;
    optind = 0;
    opterr = 0;
    int ch, li = -1;
    while ((ch = getopt_long(dash, argv, ":w:t:c:fh", long_opts, &li)) != -1) {
        if (ch == 'h') {
            verb_help(v, stdout);
            return -1;
        }
        if (ch == ':')
            return usage_error(v, "option '%s' needs a value", argv[optind - 1]);
        if (ch == '?')
            return unknown_option(v, argv[optind - 1]);
        int bit = opt_bit(ch);
        if (bit != 0 && !(v->opts & bit)) {
            char name[40]; /* the option as typed, not its value */
            if (li >= 0)
                snprintf(name, sizeof name, "--%s", long_opts[li].name);
            else
                snprintf(name, sizeof name, "-%c", ch);
            return usage_error(v, "option '%s' does not apply to %s%s", name, v->name,
                               ch == 'k' ? " (it is an idempotency key; the key of a client "
                                           "certificate is --cert-key FILE)"
                                         : "");
        }
        li = -1;
        int rc = apply_opt(v, o, ch, optarg);
        if (rc != 0)
            return rc;
    }
    if (nlease > 0) { /* put it back among the positionals, first */
        memmove(argv + optind + 1, argv + optind, (size_t)(argc - optind) * sizeof *argv);
        argv[optind] = lease[0];
        dash++;
        argc++;
    }
    o->pos = argv + optind;
    o->npos = dash - optind;
    if (dash < argc) {
        o->cmd = argv + dash + 1;
        o->ncmd = argc - dash - 1;
    }
    return 0;
}

/* Whether `path` names a readable file that begins as PEM does. */
static int is_pem_file(const char *path)
{
    char head[11] = "";
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = '\0';
    return strcmp(head, "-----BEGIN") == 0;
}

static int check_args(const verb_t *v, remote_opts_t *o)
{
    /* `--cert worker.pem --key worker.key`, as curl spells it: --key is the idempotency key */
    if (o->key != NULL && is_pem_file(o->key))
        return usage_error(v,
                           "--key is an idempotency key, and '%s' is a PEM file: the key of a "
                           "client certificate is --cert-key FILE (or SEMA_CERT_KEY)",
                           o->key);
    if (o->npos < v->min_pos)
        return usage_error(v, "%s", "missing arguments");
    if (o->npos > v->max_pos)
        return usage_error(v, "unexpected argument '%s'", o->pos[v->max_pos]);
    if ((v->opts & O_CMD) && o->ncmd == 0)
        return usage_error(v, "%s", "no command given after --");
    if (!(v->opts & O_CMD) && o->ncmd > 0)
        return usage_error(v, "%s", "this verb takes no command");
    if ((v->opts & O_MODE) && o->mode == 0)
        return usage_error(v, "%s", "give --shared or --exclusive");
    if (o->local)
        return usage_error(v, "%s", "--local is not available for this verb");
    return 0;
}

int cmd_remote(int argc, char **argv)
{
    const verb_t *v = find_verb(argc > 0 ? argv[0] : NULL);
    remote_opts_t o = {.timeout_ms = -1, .grace_ms = 5000};

    if (v == NULL) {
        fprintf(stderr, "sema: unknown command '%s'\n", argc > 0 ? argv[0] : "");
        return CLI_EXIT_USAGE;
    }
    o.verb = v->name;
    o.server = cli_global.server != NULL ? cli_global.server : getenv("SEMA_SERVER");
    if (o.server == NULL || o.server[0] == '\0')
        o.server = DEFAULT_SERVER;
    o.cacert = cli_global.cacert;
    o.cert = cli_global.cert;
    o.cert_key = cli_global.cert_key;
    o.json = cli_global.json;
    o.local = cli_global.local;
    int rc = parse_args(v, argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = check_args(v, &o)) != 0 || (rc = remote_check_tls(&o)) != 0)
        return rc;
    return v->fn(&o);
}

/* ---- shared helpers ---------------------------------------------------------------- */

static const struct {
    int err, status;
} exit_codes[] = {
    {SEMA_ECONNREFUSED, CLI_EXIT_UNAVAILABLE},
    {SEMA_ENOHOST, CLI_EXIT_UNAVAILABLE},
    {SEMA_ETIMEDOUT, CLI_EXIT_TIMEOUT},
    {SEMA_EBUSY, CLI_EXIT_TIMEOUT},
    {SEMA_EEXPIRED, CLI_EXIT_LOST},
    {SEMA_EREVOKED, CLI_EXIT_LOST},
};

int remote_exit_code(int rc, const sema_client_error_t *e)
{
    if (rc == 0)
        return CLI_EXIT_OK;
    /* every 503 (Redis away, shutting down, too many connections) asks to come back: the
     * server cannot serve now, whatever the verb; the client retried it for its budget */
    if ((e != NULL && e->http_status == 503) || rc == SEMA_EUNAVAIL || rc == SEMA_ESHUTDOWN)
        return CLI_EXIT_UNAVAILABLE;
    for (size_t i = 0; i < sizeof exit_codes / sizeof exit_codes[0]; i++)
        if (exit_codes[i].err == rc)
            return exit_codes[i].status;
    return CLI_EXIT_FAIL;
}

/* The server's timeout detail names its JSON field ("timeout_ms"); say it in the words the
 * user typed: "not granted within 1s (-t)". NULL when it is not such a timeout. */
static const char *timeout_message(const remote_opts_t *o, int rc, const sema_client_error_t *e,
                                   char *buf, size_t len)
{
    if (rc != SEMA_ETIMEDOUT || o->timeout_arg == NULL || e == NULL ||
        strcmp(e->problem, "timeout") != 0)
        return NULL;
    snprintf(buf, len, "%s within %s (-t)",
             strcmp(o->verb, "wait-idle") == 0 ? "not idle" : "not granted", o->timeout_arg);
    return buf;
}

/* The server's message, in the words of the command line where it speaks of JSON fields:
 * "not granted within 1s (-t)", "--ttl 48h: ttl_ms must be between 1 and ...". */
static const char *cli_message(const remote_opts_t *o, int rc, const sema_client_error_t *e,
                               char *buf, size_t len)
{
    const char *msg = timeout_message(o, rc, e, buf, len);
    if (msg != NULL)
        return msg;
    if (e == NULL || e->message[0] == '\0')
        return sema_strerror(rc);
    if (rc == SEMA_ENOENT && e->problem[0] == '\0' && e->http_status == 404)
        return "no such semaphore"; /* the legacy routes' plain "semaphore not found" */
    const char *field = strncmp(e->message, "ttl_ms ", 7) == 0          ? "--ttl"
                        : strncmp(e->message, "keepalive_ms ", 13) == 0 ? "--keepalive"
                                                                        : NULL;
    const char *typed = field == NULL ? NULL : field[2] == 't' ? o->ttl_arg : o->keepalive_arg;
    if (rc == SEMA_EINVAL && typed != NULL) {
        snprintf(buf, len, "%s %s: %s", field, typed, e->message);
        return buf;
    }
    return e->message;
}

/* What to do about a failure the server's words alone leave open: a hint line, or NULL. */
static const char *hint(int rc, const sema_client_error_t *e)
{
    const char *problem = e != NULL ? e->problem : "";
    const char *token = getenv("SEMA_TOKEN");
    if (rc == SEMA_ECONNREFUSED && (e == NULL || e->http_status == 0))
        return "is semad running? Start it with `semad` (or `make run` in the source tree), or "
               "point --server or SEMA_SERVER at it";
    if (rc == SEMA_ENOHOST)
        return "check the host name in --server or SEMA_SERVER";
    if (e != NULL && e->http_status == 401 && (token == NULL || token[0] == '\0'))
        return "this semad runs with --auth: set SEMA_TOKEN to a token made for you with `sema "
               "token new`";
    if (e != NULL && e->http_status == 401)
        return "this semad does not know the token in SEMA_TOKEN";
    if (strcmp(problem, "tls_untrusted") == 0)
        return "give the CA that signed semad's certificate with --cacert FILE (or "
               "SEMA_CACERT)";
    if (strcmp(problem, "tls_certificate_required") == 0)
        return "this semad wants a client certificate: --cert FILE (its key in the same file, "
               "or --cert-key FILE; or SEMA_CERT and SEMA_CERT_KEY)";
    if (strcmp(problem, "tls_client_certificate") == 0)
        return "give the certificate's key with --cert-key FILE (or SEMA_CERT_KEY) unless it is "
               "in the certificate's file";
    if (strcmp(problem, "tls_cacert") == 0)
        return "--cacert (or SEMA_CACERT) must name a PEM file of CA certificates";
    if (strcmp(problem, "tls_certificate_refused") == 0)
        return "semad takes certificates signed by a CA of its --tls-client-ca";
    return NULL;
}

int remote_fail(const remote_opts_t *o, const char *what, int rc, const sema_client_error_t *e)
{
    char buf[320];
    const char *msg = cli_message(o, rc, e, buf, sizeof buf), *h = hint(rc, e);
    if (what != NULL)
        fprintf(stderr, "sema %s: %s: %s (%s)\n", o->verb, what, msg, sema_err_name(rc));
    else
        fprintf(stderr, "sema %s: %s (%s)\n", o->verb, msg, sema_err_name(rc));
    if (h != NULL)
        fprintf(stderr, "sema %s: %s\n", o->verb, h);
    return remote_exit_code(rc, e);
}

#define CLI_RETRY_MS 1500

sema_client_t *remote_client(const remote_opts_t *o)
{
    sema_client_t *c = NULL;
    /* A command someone waits at: ride out a restart of about a second (and one
     * Retry-After: 1), not the library's 5 s, before saying semad cannot be reached. */
    sema_client_opts_t opts = {
        .cacert = o->cacert, .cert = o->cert, .key = o->cert_key, .retry_ms = CLI_RETRY_MS};
    /* "127.0.0.1:7070" is http://127.0.0.1:7070, as for curl (the client's rule) */
    int rc = sema_client_new(&c, o->server, &opts);
    if (rc == SEMA_EINVAL)
        fprintf(stderr, "sema %s: bad server '%s': an http:// or https:// URL is needed\n", o->verb,
                o->server);
    else if (rc != 0)
        fprintf(stderr, "sema %s: %s\n", o->verb, sema_strerror(rc));
    return c;
}

/* Run `fn` with a fresh client; frees it after. */
#define WITH_CLIENT(o, c)                                                                          \
    sema_client_t *c = remote_client(o);                                                           \
    if (c == NULL)                                                                                 \
        return CLI_EXIT_USAGE;

/* ---- verbs ------------------------------------------------------------------------- */

/* The capacity of create and resize: after NAME, or -c (not two different ones). */
static int capacity_arg(remote_opts_t *o, uint64_t *cap)
{
    const verb_t *v = find_verb(o->verb);
    if (o->npos > 1 && (parse_u64(o->pos[1], cap) != 0 || *cap == 0))
        return usage_error(v, "bad capacity '%s' (a whole number >= 1)", o->pos[1]);
    if (o->npos > 1 && o->capacity != 0 && o->capacity != *cap)
        return usage_error(v, "two capacities: %s and -c %" PRIu64, o->pos[1], o->capacity);
    if (o->npos < 2 && o->capacity == 0)
        return usage_error(v, "%s", "missing CAPACITY (after NAME, or -c CAPACITY)");
    if (o->npos < 2)
        *cap = o->capacity;
    return 0;
}

static int v_create(remote_opts_t *o)
{
    uint64_t cap;
    sema_client_error_t e;
    int created = 0;
    int rc = capacity_arg(o, &cap);

    if (rc != 0)
        return rc;
    WITH_CLIENT(o, c);
    o->limits.capacity = cap;
    if (o->limits.set != 0)
        rc = sema_client_create_config(c, o->pos[0], &o->limits, &created, &e);
    else
        rc = sema_client_create(c, o->pos[0], cap, &created, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json) {
        json_t *j = json_pack("{s:s,s:I,s:b}", "name", o->pos[0], "capacity", (json_int_t)cap,
                              "created", created);
        if (j != NULL)
            json_dumpf(j, stdout, JSON_COMPACT);
        printf("\n");
        json_decref(j);
    } else
        printf("%s %s (capacity %" PRIu64 ")\n", created ? "created" : "exists", o->pos[0], cap);
    return CLI_EXIT_OK;
}

static int v_get(remote_opts_t *o)
{
    sema_client_error_t e;
    char *json = NULL;

    WITH_CLIENT(o, c);
    int rc = sema_client_get(c, o->pos[0], NULL, &json, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json)
        printf("%s\n", json);
    else
        remote_print_state(json);
    sema_client_string_free(json);
    return CLI_EXIT_OK;
}

static void ls_header(remote_opts_t *o);

static int ls_one(void *arg, const sema_sem_info_t *s)
{
    remote_opts_t *o = arg;
    ls_header(o);
    if (o->json) {
        json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:I}", "name", s->name, "capacity",
                              (json_int_t)s->capacity, "available", (json_int_t)s->available,
                              "held", (json_int_t)s->held, "waiting", (json_int_t)s->waiting);
        if (j != NULL)
            json_dumpf(j, stdout, JSON_COMPACT);
        printf("\n");
        json_decref(j);
    } else {
        printf("%-32s %10" PRIu64 " %10" PRId64 " %10" PRIu64 " %8" PRIu64 "\n", s->name,
               s->capacity, s->available, s->held, s->waiting);
    }
    return 0;
}

/* The table's header, once, before the first row (nothing on stdout when ls fails). */
static void ls_header(remote_opts_t *o)
{
    if (o->json || o->header_done)
        return;
    o->header_done = 1;
    printf("%-32s %10s %10s %10s %8s\n", "NAME", "CAPACITY", "AVAILABLE", "HELD", "WAITING");
}

static int v_ls(remote_opts_t *o)
{
    sema_client_error_t e;

    WITH_CLIENT(o, c);
    int rc = sema_client_list(c, o->npos > 0 ? o->pos[0] : NULL, ls_one, o, &e);
    sema_client_free(c);
    if (rc != 0) {
        int st = remote_fail(o, NULL, rc, &e);
        /* a token limited to name prefixes lists only under one of them (semad's 403 names them) */
        if (rc == SEMA_EACCES && e.http_status == 403 && strstr(e.message, "start with") != NULL)
            fprintf(stderr, "sema ls: list under one of them: sema ls PREFIX\n");
        return st;
    }
    ls_header(o); /* an empty table still has its header */
    return CLI_EXIT_OK;
}

static int v_resize(remote_opts_t *o)
{
    uint64_t cap = 0;
    sema_client_error_t e;
    sema_sem_info_t info;
    int rc = o->limits.set != 0 && o->npos < 2 && o->capacity == 0 ? 0 : capacity_arg(o, &cap);

    if (rc != 0)
        return rc;
    WITH_CLIENT(o, c);
    o->limits.capacity = cap;
    o->limits.set |= cap != 0 ? SEMA_SET_CAPACITY : 0;
    if (o->limits.set != SEMA_SET_CAPACITY)
        rc = sema_client_configure(c, o->pos[0], &o->limits, &info, &e);
    else
        rc = sema_client_resize(c, o->pos[0], cap, &info, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    return ls_one(o, &info); /* the same table as ls, one row */
}

/* Every NAME, as `sema rm --local a b` does: the first failure does not stop the others. */
static int v_rm(remote_opts_t *o)
{
    sema_client_error_t e;
    int status = CLI_EXIT_OK;

    WITH_CLIENT(o, c);
    for (int i = 0; i < o->npos; i++) {
        int rc = sema_client_delete(c, o->pos[i], &e);
        if (rc != 0 && !(rc == SEMA_ENOENT && o->force)) {
            int st = remote_fail(o, o->pos[i], rc, &e);
            status = status == CLI_EXIT_OK ? st : status;
            if (st == CLI_EXIT_UNAVAILABLE)
                break; /* the next NAME would not get through either */
        }
    }
    sema_client_free(c);
    return status;
}

static int v_acquire(remote_opts_t *o)
{
    sema_client_error_t e;
    sema_lease_t lease;
    int rc = remote_parse_parts(o);

    if (rc != 0)
        return rc;
    sema_acquire_opts_t ao = {.weight = o->weight,
                              .timeout_ms = o->timeout_ms,
                              .ttl_ms = o->ttl_ms,
                              .owner = o->owner,
                              .idempotency_key = o->key,
                              .tenant = o->tenant};
    WITH_CLIENT(o, c);
    if (o->nparts > 0) {
        rc = remote_acquire_parts(o, c, &ao);
        sema_client_free(c);
        return rc;
    }
    rc = sema_client_acquire(c, o->pos[0], &ao, &lease, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    remote_print_lease(o, &lease);
    return CLI_EXIT_OK;
}

static int v_renew(remote_opts_t *o)
{
    sema_client_error_t e;
    sema_lease_t lease = {0};

    /* Only the id: without --ttl the server's default ttl (reading the lease's own would
     * need the read right, where renewing needs only acquire). */
    snprintf(lease.id, sizeof lease.id, "%s", o->pos[0]);
    WITH_CLIENT(o, c);
    int rc = sema_client_renew(c, &lease, o->ttl_ms, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json)
        remote_print_lease(o, &lease);
    else
        printf("%s renewed for %.1fs\n", lease.id, (double)lease.ttl_ms / 1000.0);
    return CLI_EXIT_OK;
}

/* A call that ends the lease named by the first argument (release, revoke). */
static int end_lease(remote_opts_t *o,
                     int (*call)(sema_client_t *, const char *, sema_client_error_t *))
{
    sema_client_error_t e;

    WITH_CLIENT(o, c);
    int rc = call(c, o->pos[0], &e);
    sema_client_free(c);
    return rc != 0 ? remote_fail(o, o->pos[0], rc, &e) : CLI_EXIT_OK;
}

static int v_release(remote_opts_t *o)
{
    return end_lease(o, sema_client_release);
}

static int v_lease(remote_opts_t *o)
{
    sema_client_error_t e;
    sema_lease_t lease;

    WITH_CLIENT(o, c);
    int rc = sema_client_lease_get(c, o->pos[0], &lease, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json) {
        remote_print_lease(o, &lease);
    } else {
        printf("lease      %s\nname       %s\nweight     %" PRIu64 "\nfence      %" PRIu64
               "\nexpires in %.1fs\n",
               lease.id, lease.name, lease.weight, lease.fence,
               (double)(lease.expires_at_ms - remote_epoch_ms()) / 1000.0);
    }
    return CLI_EXIT_OK;
}

static int v_revoke(remote_opts_t *o)
{
    return end_lease(o, sema_client_revoke);
}

static int v_wait_idle(remote_opts_t *o)
{
    sema_client_error_t e;

    WITH_CLIENT(o, c);
    int rc = sema_client_wait_idle(c, o->pos[0], o->timeout_ms, NULL, &e);
    sema_client_free(c);
    return rc != 0 ? remote_fail(o, o->pos[0], rc, &e) : CLI_EXIT_OK;
}

typedef int (*legacy_fn)(sema_client_t *, const char *, int64_t *, sema_client_error_t *);

static int legacy(remote_opts_t *o, legacy_fn fn)
{
    sema_client_error_t e;
    int64_t value = 0;

    WITH_CLIENT(o, c);
    int rc = fn(c, o->pos[0], &value, &e);
    sema_client_free(c);
    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    if (o->json) {
        json_t *j = json_pack("{s:s,s:I}", "name", o->pos[0], "value", (json_int_t)value);
        if (j != NULL)
            json_dumpf(j, stdout, JSON_COMPACT);
        json_decref(j);
        printf("\n");
    } else {
        printf("%" PRId64 "\n", value);
    }
    return CLI_EXIT_OK;
}

static int v_up(remote_opts_t *o)
{
    return legacy(o, sema_client_up);
}

static int v_down(remote_opts_t *o)
{
    return legacy(o, sema_client_down);
}

static int v_value(remote_opts_t *o)
{
    return legacy(o, sema_client_value);
}
