/* SPDX-License-Identifier: MIT */
/* parse.c - option, number and duration parsing shared by the sema command's verbs. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/suggest.h"

int cli_usage_error(const char *verb, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sema %s: ", verb);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see `sema %s --help`)\n", verb);
    return CLI_EXIT_USAGE;
}

int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static const struct {
    const char *suffix;
    double ms;
} units[] = {{"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}};

int cli_parse_duration_ms(const char *s, int64_t *ms)
{
    if (s == NULL || *s == '\0')
        return -1;
    if (strcmp(s, "forever") == 0 || strcmp(s, "inf") == 0) {
        *ms = -1;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || !(v == v) || strchr("+-.0123456789", *s) == NULL)
        return -1;
    if (*end == '\0' && v <= 0) { /* a bare number is 0 or negative: no unit needed */
        *ms = v < 0 ? -1 : 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].suffix) != 0)
            continue;
        if (v < 0) {
            *ms = -1;
            return 0;
        }
        double total = v * units[i].ms;
        if (total > 9.2e15) /* keep well inside int64 after the ns conversion */
            return -1;
        *ms = (int64_t)total + ((double)(int64_t)total < total); /* round up */
        return 0;
    }
    return -1;
}

static const cli_opt_t *find_opt(const cli_opt_t *opts, char short_name, const char *long_name,
                                 size_t long_len)
{
    for (const cli_opt_t *o = opts; o->long_name != NULL; o++) {
        if (short_name != 0 && o->short_name == short_name)
            return o;
        if (long_name != NULL && strlen(o->long_name) == long_len &&
            strncmp(o->long_name, long_name, long_len) == 0)
            return o;
    }
    return NULL;
}

/* Apply one option; `inline_value` is the text glued to it ("-c3", "--capacity=3") or NULL.
 * Returns how many extra argv entries were used (0 or 1), or -1 on a usage error. */
static int apply_opt(const char *verb, const cli_opt_t *o, const char *shown,
                     const char *inline_value, int i, int argc, char **argv)
{
    if (o->value == NULL) {
        if (inline_value != NULL)
            return cli_usage_error(verb, "option %s takes no value", shown), -1;
        *o->flag = 1;
        return 0;
    }
    if (inline_value != NULL) {
        *o->value = inline_value;
        return 0;
    }
    if (i + 1 >= argc || strcmp(argv[i + 1], "--") == 0)
        return cli_usage_error(verb, "option %s needs a value", shown), -1;
    *o->value = argv[i + 1];
    return 1;
}

/* "unknown option '--capcity' (did you mean --capacity?)" */
static int unknown_option(const char *verb, const cli_opt_t *opts, const char *arg)
{
    suggest_t s;
    char typed[64];

    snprintf(typed, sizeof typed, "%.*s", (int)strcspn(arg, "="), arg);
    suggest_init(&s, typed + 2);
    for (const cli_opt_t *o = opts; typed[1] == '-' && o->long_name != NULL; o++)
        suggest_offer(&s, o->long_name);
    if (typed[1] == '-')
        cli_global_suggest(&s);
    const char *best = typed[1] == '-' ? suggest_best(&s) : NULL;
    if (best != NULL)
        return cli_usage_error(verb, "unknown option '%s' (did you mean --%s?)", typed, best);
    return cli_usage_error(verb, "unknown option '%s'", arg);
}

int cli_parse_opts(const char *verb, int argc, char **argv, const cli_opt_t *opts, char **pos,
                   int maxpos, int *npos, int *rest)
{
    *npos = 0;
    *rest = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const cli_opt_t *o = NULL;
        const char *inline_value = NULL;
        if (strcmp(a, "--") == 0) {
            *rest = i + 1;
            return 0;
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            o = find_opt(opts, 0, a + 2, len);
            inline_value = eq ? eq + 1 : NULL;
        } else if (a[0] == '-' && a[1] != '\0' && (a[1] < '0' || a[1] > '9')) {
            o = find_opt(opts, a[1], NULL, 0);
            inline_value = a[2] != '\0' ? a + 2 : NULL;
        } else {
            if (*npos == maxpos)
                return cli_usage_error(verb, "unexpected argument '%s'", a);
            pos[(*npos)++] = argv[i];
            continue;
        }
        if (o == NULL)
            return unknown_option(verb, opts, a);
        int used = apply_opt(verb, o, a, inline_value, i, argc, argv);
        if (used < 0)
            return CLI_EXIT_USAGE;
        i += used;
    }
    return 0;
}
