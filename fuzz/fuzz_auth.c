/* SPDX-License-Identifier: MIT */
/* fuzz_auth.c - semad --auth's untrusted text: every input is both an Authorization header
 * value (auth_bearer, then the lookup of its token) and a token file (auth_parse), whose
 * verdicts are checked against the rules of auth.h. */
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "fuzz.h"
#include "sema/error.h"

/* A fixed table the header's token is looked up in (tokens "a" and "sema_x"). */
static const char table_text[] =
    "a sha256:ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb admin\n"
    "x sha256:24b31c8316f270eaef4b909ef4d75a4fb80be3135d1ca2dd408e8da276bb694f read p/ q\n";

static int token68(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("-._~+/=", c) != NULL;
}

static void check_header(const char *v, size_t len, const auth_table_t *t)
{
    const char *tok = NULL, *why = NULL;
    size_t tl = 0;
    if (auth_bearer(v, len, &tok, &tl, &why) != 0) {
        FUZZ_CHECK(why != NULL && why[0] != '\0');
        return;
    }
    FUZZ_CHECK(tok > v && tok + tl <= v + len && tl >= 1 && tl <= AUTH_TOKEN_MAX);
    for (size_t i = 0; i < tl; i++)
        FUZZ_CHECK(token68(tok[i]));
    /* exactly the table's two tokens are found, each as its own entry */
    const auth_token_t *tk = auth_find(t, tok, tl);
    int is_a = tl == 1 && tok[0] == 'a', is_x = tl == 6 && memcmp(tok, "sema_x", 6) == 0;
    FUZZ_CHECK((tk != NULL) == (is_a || is_x));
    FUZZ_CHECK(tk == NULL || strcmp(tk->name, is_a ? "a" : "x") == 0);
}

static void check_token(const auth_table_t *t, size_t i, size_t nlines)
{
    const auth_token_t *tk = &t->tokens[i];
    FUZZ_CHECK(auth_name_valid(tk->name, strlen(tk->name)));
    FUZZ_CHECK(tk->rights != 0 && (tk->rights & ~(unsigned)AUTH_ALL) == 0);
    FUZZ_CHECK(tk->nprefixes <= AUTH_PREFIXES_MAX && t->n <= nlines);
    for (size_t p = 0; p < tk->nprefixes; p++) {
        FUZZ_CHECK(auth_prefix_valid(tk->prefixes[p], tk->prefix_len[p]));
        FUZZ_CHECK(auth_name_allowed(tk, tk->prefixes[p], tk->prefix_len[p]));
    }
    for (size_t j = 0; j < i; j++) {
        FUZZ_CHECK(strcmp(t->tokens[j].name, tk->name) != 0);
        FUZZ_CHECK(memcmp(t->tokens[j].hash, tk->hash, AUTH_HASH_LEN) != 0);
    }
}

static void check_file(const char *text, size_t len)
{
    char err[256];
    auth_table_t *t = NULL;
    size_t nlines = 1;
    for (size_t i = 0; i < len; i++)
        nlines += text[i] == '\n';
    memset(err, 'x', sizeof err);
    int rc = auth_parse(text, len, &t, err, sizeof err);
    if (rc != 0) {
        FUZZ_CHECK(rc == SEMA_EINVAL && t == NULL);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
        FUZZ_CHECK(strncmp(err, "line ", 5) == 0 && strtoul(err + 5, NULL, 10) <= nlines);
        return;
    }
    FUZZ_CHECK(t != NULL && t->refs == 1);
    for (size_t i = 0; i < t->n; i++)
        check_token(t, i, nlines);
    auth_unref(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static auth_table_t *table;
    char err[256];
    if (table == NULL && auth_parse(table_text, sizeof table_text - 1, &table, err, sizeof err))
        abort();
    char *copy = malloc(size + 1); /* the header value as http.c hands it: NUL-terminated */
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    check_header(copy, size, table);
    check_file((const char *)data, size);
    free(copy);
    return 0;
}
