/* SPDX-License-Identifier: MIT */
/* cmd_token.c - `sema token new`: make a bearer token for semad --auth, add its hash to the
 * token file, and print the token once (the file never holds it). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/auth.h"

#define TOKEN_USAGE                                                                                \
    "usage: sema token new NAME --rights RIGHTS [--prefix PREFIX]... --file FILE\n\n"              \
    "Make a new bearer token for semad --auth: add a line with NAME, the token's SHA-256,\n"       \
    "its rights and prefixes to FILE (created, mode 600, if missing), and print the token\n"       \
    "on stdout. It is shown only this once: FILE holds only its hash. Then send semad a\n"         \
    "SIGHUP (kill -HUP PID) to load it; clients send it as SEMA_TOKEN.\n"                          \
    "  --rights RIGHTS  comma list of read (GET, events, metrics), acquire (acquire, renew\n"      \
    "                   and release its own leases, locks) and admin (everything)\n"               \
    "  --prefix PREFIX  limit the token to semaphore names and lock keys starting with\n"          \
    "                   PREFIX (repeat for several; default: every name)\n"                        \
    "  --file FILE      the token file (semad --auth FILE)\n"                                      \
    "To revoke a token, delete its line and send semad a SIGHUP.\n"                                \
    "Exit codes: 0 ok; 1 the file could not be read or written; 2 usage error.\n"

typedef struct {
    const char *name, *rights, *file;
    const char *prefixes[AUTH_PREFIXES_MAX];
    size_t nprefixes;
} token_args_t;

/* "unknown option '--rigths' (did you mean --rights?)" */
static int unknown_option(const char *arg)
{
    static const char *const known[] = {"rights", "prefix", "file", "help"};
    suggest_t s;
    suggest_init(&s, arg + (arg[1] == '-' ? 2 : 1));
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        suggest_offer(&s, known[i]);
    const char *best = suggest_best(&s);
    if (best != NULL)
        return cli_usage_error("token", "unknown option '%s' (did you mean --%s?)", arg, best);
    return cli_usage_error("token", "unknown option '%s'", arg);
}

static int parse_args(int argc, char **argv, token_args_t *a)
{
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        const char **slot = strcmp(o, "--rights") == 0 ? &a->rights
                            : strcmp(o, "--file") == 0 ? &a->file
                                                       : NULL;
        int prefix = strcmp(o, "--prefix") == 0;
        if (slot == NULL && !prefix) {
            if (o[0] == '-')
                return unknown_option(o);
            if (a->name != NULL)
                return cli_usage_error("token", "unexpected argument '%s'", o);
            a->name = o;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("token", "%s needs a value", o);
        if (prefix) {
            if (a->nprefixes == AUTH_PREFIXES_MAX)
                return cli_usage_error("token", "at most %d prefixes", AUTH_PREFIXES_MAX);
            a->prefixes[a->nprefixes++] = argv[++i];
        } else {
            *slot = argv[++i];
        }
    }
    if (a->name == NULL || a->rights == NULL || a->file == NULL)
        return cli_usage_error("token", "NAME, --rights and --file are needed");
    unsigned rights;
    if (!auth_name_valid(a->name, strlen(a->name)))
        return cli_usage_error("token", "NAME must be 1-%d of A-Z a-z 0-9 . _ @ -", AUTH_NAME_MAX);
    if (auth_rights_parse(a->rights, strlen(a->rights), &rights) != 0)
        return cli_usage_error("token", "--rights: a comma list of read, acquire, admin");
    for (size_t i = 0; i < a->nprefixes; i++)
        if (!auth_prefix_valid(a->prefixes[i], strlen(a->prefixes[i])))
            return cli_usage_error("token",
                                   "--prefix '%s': 1-%d bytes, no space, control byte or '#'",
                                   a->prefixes[i], AUTH_PREFIX_MAX);
    return 0;
}

/* The file's current text (the caller frees it), or NULL with a message printed. */
static char *read_all(int fd, const char *path, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size > AUTH_FILE_MAX) {
        fprintf(stderr, "sema token: %s: %s\n", path,
                st.st_size > AUTH_FILE_MAX ? "too large" : strerror(errno));
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf != NULL && got < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            break;
        if (n > 0)
            got += (size_t)n;
    }
    if (buf == NULL || got != (size_t)st.st_size) {
        fprintf(stderr, "sema token: %s: cannot read it\n", path);
        free(buf);
        return NULL;
    }
    *len = got;
    return buf;
}

/* The new line: "NAME sha256:HEX RIGHTS PREFIX...\n" (with a newline before it when the
 * file does not end with one, `newline_first` 1, or a comment saying what the file is when
 * it is new, 2). */
static int format_line(char *line, size_t cap, const token_args_t *a, const char *token,
                       int newline_first)
{
    char hex[2 * AUTH_HASH_LEN + 1];
    auth_hash_hex(token, strlen(token), hex);
    static const char header[] = "# semad --auth tokens: NAME sha256:HASH RIGHTS [PREFIX...] "
                                 "(docs/security.md)\n";
    int n = snprintf(line, cap, "%s%s sha256:%s %s",
                     newline_first == 2 ? header
                     : newline_first    ? "\n"
                                        : "",
                     a->name, hex, a->rights);
    for (size_t i = 0; i < a->nprefixes && n > 0 && (size_t)n < cap; i++)
        n += snprintf(line + n, cap - (size_t)n, " %s", a->prefixes[i]);
    if (n < 0 || (size_t)n + 2 > cap)
        return -1;
    line[n++] = '\n';
    line[n] = '\0';
    return n;
}

/* Check the file as it is (it must parse, and not hold NAME yet), then append the line. */
static int add_token(int fd, const token_args_t *a, const char *token)
{
    char err[512], line[AUTH_LINE_MAX];
    size_t len = 0;
    auth_table_t *t = NULL;
    char *text = read_all(fd, a->file, &len);
    if (text == NULL)
        return CLI_EXIT_FAIL;
    if (auth_parse(text, len, &t, err, sizeof err) != 0) {
        fprintf(stderr, "sema token: %s: %s (fix it first)\n", a->file, err);
        free(text);
        return CLI_EXIT_FAIL;
    }
    int taken = 0;
    for (size_t i = 0; i < t->n; i++)
        taken |= strcmp(t->tokens[i].name, a->name) == 0;
    auth_unref(t);
    int newline_first = len == 0 ? 2 : text[len - 1] != '\n'; /* 2: a new file's header */
    free(text);
    if (taken) {
        fprintf(stderr, "sema token: %s already has a token named '%s'\n", a->file, a->name);
        return CLI_EXIT_FAIL;
    }
    int n = format_line(line, sizeof line, a, token, newline_first);
    if (n < 0 || write(fd, line, (size_t)n) != n || fsync(fd) != 0) {
        fprintf(stderr, "sema token: cannot write %s: %s\n", a->file,
                n < 0 ? "line too long" : strerror(errno));
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

static int token_new(int argc, char **argv)
{
    token_args_t a = {0};
    char token[AUTH_NEW_TOKEN_LEN + 1];
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc;
    if (auth_new_token(token) != 0) {
        fprintf(stderr, "sema token: the system's random source failed\n");
        return CLI_EXIT_FAIL;
    }
    int fd = open(a.file, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) { /* two `sema token new` at once: one by one */
        fprintf(stderr, "sema token: %s: %s\n", a.file, strerror(errno));
        if (fd >= 0)
            close(fd);
        return CLI_EXIT_FAIL;
    }
    rc = add_token(fd, &a, token);
    close(fd);
    if (rc == CLI_EXIT_OK) {
        printf("%s\n", token);
        fprintf(stderr,
                "sema token: '%s' added to %s (shown only this once; send semad a SIGHUP to "
                "load it)\n",
                a.name, a.file);
    }
    explicit_bzero(token, sizeof token);
    return rc;
}

int cmd_token(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(TOKEN_USAGE, stdout);
            return CLI_EXIT_OK;
        }
    }
    if (argc < 2 || strcmp(argv[1], "new") != 0)
        return cli_usage_error("token", "expected `sema token new NAME ...`");
    return token_new(argc, argv);
}
