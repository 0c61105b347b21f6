/* SPDX-License-Identifier: MIT */
/* test_auth.c - the token file parser, the Authorization header, the lookup and new tokens
 * (src/common/auth.c), without a server. */
#include "common/auth.h"
#include "sema/error.h"
#include "test.h"

#define H1 "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" /* "abc" */
#define H2 "sha256:ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" /* "a" */

static auth_table_t *parse_ok(const char *text)
{
    char err[256] = "";
    auth_table_t *t = NULL;
    if (auth_parse(text, strlen(text), &t, err, sizeof err) != 0)
        TEST_FAIL_("parse failed: %s", err);
    return t;
}

/* The message of a file that must not parse. */
static const char *parse_err(const char *text)
{
    static char err[256];
    auth_table_t *t = NULL;
    ASSERT_EQ(auth_parse(text, strlen(text), &t, err, sizeof err), SEMA_EINVAL);
    ASSERT(t == NULL);
    return err;
}

TEST(a_file_with_comments_rights_and_prefixes)
{
    auth_table_t *t = parse_ok("# tokens\n\n   \t\nops " H1 " admin\n"
                               "  ci\t" H2 "  read,acquire jobs/ batch-  \n");
    ASSERT_EQ(t->n, 2);
    ASSERT_STREQ(t->tokens[0].name, "ops");
    ASSERT_EQ(t->tokens[0].rights, AUTH_ADMIN);
    ASSERT_EQ(t->tokens[0].nprefixes, 0);
    ASSERT_STREQ(t->tokens[1].name, "ci");
    ASSERT_EQ(t->tokens[1].rights, AUTH_READ | AUTH_ACQUIRE);
    ASSERT_EQ(t->tokens[1].nprefixes, 2);
    ASSERT_STREQ(t->tokens[1].prefixes[1], "batch-");
    /* the lookup hashes the presented token */
    ASSERT(auth_find(t, "abc", 3) == &t->tokens[0]);
    ASSERT(auth_find(t, "a", 1) == &t->tokens[1]);
    ASSERT(auth_find(t, "ab", 2) == NULL);
    ASSERT(auth_find(t, "abcd", 4) == NULL);
    /* rights: admin has them all; the others only their own */
    ASSERT(auth_has(&t->tokens[0], AUTH_READ) && auth_has(&t->tokens[0], AUTH_ADMIN));
    ASSERT(auth_has(&t->tokens[1], AUTH_ACQUIRE) && !auth_has(&t->tokens[1], AUTH_ADMIN));
    /* prefixes */
    ASSERT(auth_name_allowed(&t->tokens[0], "anything", 8));
    ASSERT(auth_name_allowed(&t->tokens[1], "jobs/x", 6));
    ASSERT(auth_name_allowed(&t->tokens[1], "batch-", 6));
    ASSERT(!auth_name_allowed(&t->tokens[1], "jobs", 4));
    ASSERT(!auth_name_allowed(&t->tokens[1], "other", 5));
    auth_unref(t);
}

TEST(an_empty_file_has_no_tokens)
{
    auth_table_t *t = parse_ok("");
    ASSERT_EQ(t->n, 0);
    ASSERT(auth_find(t, "abc", 3) == NULL);
    auth_unref(t);
    t = parse_ok("ops " H1 " read"); /* no newline at the end */
    ASSERT_EQ(t->n, 1);
    auth_unref(t);
}

TEST(every_mistake_names_its_line)
{
    ASSERT_STREQ(parse_err("ops " H1 " admin\nx\n"),
                 "line 2: token 'x': no hash (expected NAME sha256:HASH RIGHTS [PREFIX...])");
    ASSERT(strstr(parse_err("\n\nx " H1 "\n"), "line 3: token 'x': no rights") != NULL);
    ASSERT(strstr(parse_err("x " H1 " write\n"), "line 1: token 'x': rights must be") != NULL);
    ASSERT(strstr(parse_err("x " H1 " read,\n"), "rights must be") != NULL);
    ASSERT(strstr(parse_err("x " H1 " read,read\n"), "rights must be") != NULL);
    ASSERT(strstr(parse_err("x sha256:abc read\n"), "the hash must be") != NULL);
    ASSERT(strstr(parse_err("x sha1:" H1 " read\n"), "the hash must be") != NULL);
    ASSERT(strstr(parse_err("x/y " H1 " read\n"), "line 1: the token name must be") != NULL);
    ASSERT(strstr(parse_err("x " H1 " read\r\n"), "carriage return") != NULL);
    ASSERT(strstr(parse_err("x " H1 " read\ny " H1 " admin\n"),
                  "line 2: the same hash as token 'x' on line 1") != NULL);
    ASSERT(strstr(parse_err("x " H1 " read\n#\nx " H2 " admin\n"),
                  "line 3: token name 'x' is already used on line 1") != NULL);
    ASSERT(strstr(parse_err("x " H1 " read a\x01"
                            "b\n"),
                  "control byte") != NULL);
    char many[600] = "x " H1 " read";
    for (int i = 0; i <= AUTH_PREFIXES_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), " p%d", i);
    ASSERT(strstr(parse_err(many), "more than 16 prefixes") != NULL);
    const char nul[] = "x " H1 " read\0\n";
    char err[256];
    auth_table_t *t = NULL;
    ASSERT_EQ(auth_parse(nul, sizeof nul - 1, &t, err, sizeof err), SEMA_EINVAL);
    ASSERT(strstr(err, "a NUL byte") != NULL);
}

TEST(the_authorization_header)
{
    const char *tok, *why;
    size_t n;
    ASSERT_EQ(auth_bearer("Bearer abc", 10, &tok, &n, &why), 0);
    ASSERT(n == 3 && memcmp(tok, "abc", 3) == 0);
    ASSERT_EQ(auth_bearer("bEaReR   a-b.c_d~e+f/g==  ", 26, &tok, &n, &why), 0);
    ASSERT(n == 15 && memcmp(tok, "a-b.c_d~e+f/g==", 15) == 0);
    static const char *const bad[] = {"",          "Bearer",         "Bearer ",    "Basic abc",
                                      "Bearerabc", "Bearer\tabc",    "Bearer a b", "Bearer a=b",
                                      "Bearer ==", "Bearer \"abc\"", "Bearer a,b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        if (auth_bearer(bad[i], strlen(bad[i]), &tok, &n, &why) != SEMA_EINVAL)
            TEST_FAIL_("accepted \"%s\"", bad[i]);
        ASSERT(why != NULL);
    }
    char longest[8 + AUTH_TOKEN_MAX + 2] = "Bearer ";
    memset(longest + 7, 'a', AUTH_TOKEN_MAX);
    ASSERT_EQ(auth_bearer(longest, 7 + AUTH_TOKEN_MAX, &tok, &n, &why), 0);
    longest[7 + AUTH_TOKEN_MAX] = 'a';
    ASSERT_EQ(auth_bearer(longest, 8 + AUTH_TOKEN_MAX, &tok, &n, &why), SEMA_EINVAL);
}

TEST(new_tokens_are_random_and_their_hash_finds_them)
{
    char a[AUTH_NEW_TOKEN_LEN + 1], b[AUTH_NEW_TOKEN_LEN + 1], hex[2 * AUTH_HASH_LEN + 1];
    char line[200];
    ASSERT_EQ(auth_new_token(a), 0);
    ASSERT_EQ(auth_new_token(b), 0);
    ASSERT_EQ(strlen(a), AUTH_NEW_TOKEN_LEN);
    ASSERT(strncmp(a, "sema_", 5) == 0 && strcmp(a, b) != 0);
    for (size_t i = 5; i < AUTH_NEW_TOKEN_LEN; i++)
        ASSERT(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a[i]));
    auth_hash_hex("abc", 3, hex);
    ASSERT_STREQ(hex, H1 + 7);
    auth_hash_hex(a, strlen(a), hex);
    snprintf(line, sizeof line, "new sha256:%s acquire\n", hex);
    auth_table_t *t = parse_ok(line);
    ASSERT(auth_find(t, a, strlen(a)) == &t->tokens[0]);
    ASSERT(auth_find(t, b, strlen(b)) == NULL);
    auth_unref(t);
}

TEST(many_tokens_are_each_found)
{
    enum { N = 2000 };
    size_t cap = N * 100, len = 0;
    char *text = malloc(cap), tok[32], hex[2 * AUTH_HASH_LEN + 1];
    ASSERT(text != NULL);
    for (int i = 0; i < N; i++) {
        snprintf(tok, sizeof tok, "token-%d", i);
        auth_hash_hex(tok, strlen(tok), hex);
        len += (size_t)snprintf(text + len, cap - len, "t%d sha256:%s read\n", i, hex);
    }
    auth_table_t *t = NULL;
    char err[256];
    ASSERT_EQ(auth_parse(text, len, &t, err, sizeof err), 0);
    ASSERT_EQ(t->n, N);
    for (int i = 0; i < N; i++) {
        snprintf(tok, sizeof tok, "token-%d", i);
        const auth_token_t *tk = auth_find(t, tok, strlen(tok));
        ASSERT(tk != NULL);
        ASSERT_EQ(strtol(tk->name + 1, NULL, 10), i);
    }
    ASSERT(auth_find(t, "token-x", 7) == NULL);
    auth_unref(t);
    free(text);
}
