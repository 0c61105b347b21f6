/* SPDX-License-Identifier: MIT */
/* auth.c - the token file's strict parser, the Authorization header, and the constant-time
 * lookup of a presented token by its SHA-256 (see auth.h). */
#include "common/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "sema/error.h"

/* ---- hashing ---- */

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static _Thread_local EVP_MD_CTX *sha256_ctx; /* one per thread, reused (semad: the loop's) */

/* Fetched once: an implicit fetch on every digest costs more than the digest itself. */
static void sha256_init(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* A context kept and re-initialized halves the cost of a token's digest (a new one per
 * call allocates and sets up the provider's state each time). */
static void hash_token(const char *tok, size_t len, unsigned char out[AUTH_HASH_LEN])
{
    unsigned int n = 0;
    pthread_once(&sha256_once, sha256_init);
    if (sha256_ctx == NULL)
        sha256_ctx = EVP_MD_CTX_new();
    if (sha256_md == NULL || sha256_ctx == NULL ||
        !EVP_DigestInit_ex2(sha256_ctx, sha256_md, NULL) ||
        !EVP_DigestUpdate(sha256_ctx, tok, len) || !EVP_DigestFinal_ex(sha256_ctx, out, &n) ||
        n != AUTH_HASH_LEN)
        abort(); /* libcrypto without SHA-256, or out of memory at the first token */
}

void auth_hash_hex(const char *tok, size_t len, char hex[2 * AUTH_HASH_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char h[AUTH_HASH_LEN];
    hash_token(tok, len, h);
    for (size_t i = 0; i < AUTH_HASH_LEN; i++) {
        hex[2 * i] = digits[h[i] >> 4];
        hex[2 * i + 1] = digits[h[i] & 15];
    }
    hex[2 * AUTH_HASH_LEN] = '\0';
}

int auth_new_token(char out[AUTH_NEW_TOKEN_LEN + 1])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char r[AUTH_SECRET_BYTES + 1] = {0}; /* one zero byte pads the last group */
    size_t got = 0;
    while (got < AUTH_SECRET_BYTES) {
        ssize_t n = getrandom(r + got, AUTH_SECRET_BYTES - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return SEMA_EIO;
        got += (size_t)n;
    }
    memcpy(out, "sema_", 5);
    size_t o = 5;
    for (size_t i = 0; i < AUTH_SECRET_BYTES; i += 3) {
        uint32_t v = (uint32_t)r[i] << 16 | (uint32_t)r[i + 1] << 8 |
                     (i + 2 < AUTH_SECRET_BYTES + 1 ? r[i + 2] : 0);
        size_t chars = AUTH_SECRET_BYTES - i >= 3 ? 4 : (AUTH_SECRET_BYTES - i) + 1;
        for (size_t k = 0; k < chars; k++)
            out[o++] = b64[(v >> (18 - 6 * k)) & 63];
    }
    out[o] = '\0';
    explicit_bzero(r, sizeof r);
    return o == AUTH_NEW_TOKEN_LEN ? 0 : SEMA_EIO;
}

/* ---- small checks ---- */

int auth_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > AUTH_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '@' || c == '-'))
            return 0;
    }
    return 1;
}

int auth_prefix_valid(const char *p, size_t len)
{
    if (len == 0 || len > AUTH_PREFIX_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c == 0x7f || c == '#')
            return 0;
    }
    return 1;
}

static const struct {
    const char *name;
    unsigned bit;
} rights[] = {{"read", AUTH_READ}, {"acquire", AUTH_ACQUIRE}, {"admin", AUTH_ADMIN}};

const char *auth_right_name(unsigned right)
{
    for (size_t i = 0; i < sizeof rights / sizeof rights[0]; i++)
        if (rights[i].bit == right)
            return rights[i].name;
    return "none";
}

int auth_rights_parse(const char *s, size_t len, unsigned *out)
{
    unsigned set = 0;
    size_t i = 0;
    if (len == 0)
        return SEMA_EINVAL;
    while (i <= len) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        unsigned bit = 0;
        for (size_t k = 0; k < sizeof rights / sizeof rights[0]; k++)
            if (strlen(rights[k].name) == j - i && memcmp(rights[k].name, s + i, j - i) == 0)
                bit = rights[k].bit;
        if (bit == 0 || (set & bit))
            return SEMA_EINVAL;
        set |= bit;
        i = j + 1;
    }
    *out = set;
    return 0;
}

int auth_has(const auth_token_t *tk, unsigned need)
{
    return (tk->rights & AUTH_ADMIN) || (tk->rights & need) == need;
}

int auth_name_allowed(const auth_token_t *tk, const char *name, size_t len)
{
    if (tk->nprefixes == 0)
        return 1;
    for (size_t i = 0; i < tk->nprefixes; i++)
        if (len >= tk->prefix_len[i] && memcmp(name, tk->prefixes[i], tk->prefix_len[i]) == 0)
            return 1;
    return 0;
}

/* ---- the Authorization header ---- */

static int token68_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

int auth_bearer(const char *value, size_t len, const char **tok, size_t *tok_len, const char **why)
{
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len < 7 || strncasecmp(value, "bearer", 6) != 0 || value[6] != ' ') {
        *why = "the Authorization header is not \"Bearer TOKEN\"";
        return SEMA_EINVAL;
    }
    size_t i = 6;
    while (i < len && value[i] == ' ')
        i++;
    size_t start = i;
    while (i < len && token68_char(value[i]))
        i++;
    size_t chars = i - start;
    while (i < len && value[i] == '=')
        i++;
    if (chars == 0 || i != len) {
        *why = "the bearer token is empty or has characters a token cannot have";
        return SEMA_EINVAL;
    }
    if (i - start > AUTH_TOKEN_MAX) {
        *why = "the bearer token is too long";
        return SEMA_EINVAL;
    }
    *tok = value + start;
    *tok_len = i - start;
    return 0;
}

/* ---- tables ---- */

static void token_free(auth_token_t *tk)
{
    for (size_t i = 0; i < tk->nprefixes; i++)
        free(tk->prefixes[i]);
    free(tk->prefixes);
    free(tk->prefix_len);
}

auth_table_t *auth_ref(auth_table_t *t)
{
    if (t != NULL)
        t->refs++;
    return t;
}

void auth_unref(auth_table_t *t)
{
    if (t == NULL || --t->refs > 0)
        return;
    for (size_t i = 0; i < t->n; i++)
        token_free(&t->tokens[i]);
    OPENSSL_cleanse(t->tokens, t->n * sizeof *t->tokens);
    free(t->tokens);
    free(t->index);
    free(t);
}

static size_t slot_of(const unsigned char *h, size_t mask)
{
    uint64_t v;
    memcpy(&v, h, sizeof v);
    return (size_t)v & mask;
}

const auth_token_t *auth_find(const auth_table_t *t, const char *tok, size_t tok_len)
{
    unsigned char h[AUTH_HASH_LEN];
    const auth_token_t *found = NULL;
    if (t == NULL || t->n == 0)
        return NULL;
    hash_token(tok, tok_len, h);
    for (size_t s = slot_of(h, t->index_mask); t->index[s] != 0; s = (s + 1) & t->index_mask) {
        const auth_token_t *tk = &t->tokens[t->index[s] - 1];
        if (CRYPTO_memcmp(tk->hash, h, AUTH_HASH_LEN) == 0)
            found = tk;
    }
    return found;
}

const auth_token_t *auth_find_name(const auth_table_t *t, const char *name)
{
    if (t == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->tokens[i].name, name) == 0)
            return &t->tokens[i];
    return NULL;
}

/* ---- the parser ---- */

typedef struct {
    auth_table_t *t;
    size_t cap;
    size_t lineno;
    size_t *lines; /* the line each token came from, for duplicate messages */
    char *err;
    size_t errlen;
} parse_t;

static int perr(parse_t *p, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(p->err, p->errlen, "line %zu: ", p->lineno);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < p->errlen)
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return SEMA_EINVAL;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int parse_hash(const char *s, size_t len, unsigned char *out)
{
    if (len != 7 + 2 * AUTH_HASH_LEN || memcmp(s, "sha256:", 7) != 0)
        return -1;
    for (size_t i = 0; i < AUTH_HASH_LEN; i++) {
        int hi = hexval(s[7 + 2 * i]), lo = hexval(s[8 + 2 * i]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* The next field of a line: skips spaces and tabs; 0 when none is left. */
static size_t next_field(const char *line, size_t len, size_t *pos, const char **f)
{
    size_t i = *pos;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    size_t start = i;
    while (i < len && line[i] != ' ' && line[i] != '\t')
        i++;
    *pos = i;
    *f = line + start;
    return i - start;
}

static int add_prefix(parse_t *p, auth_token_t *tk, const char *f, size_t n)
{
    if (!auth_prefix_valid(f, n))
        return perr(p, "prefix %zu is longer than %d bytes or holds a control byte or '#'",
                    tk->nprefixes + 1, AUTH_PREFIX_MAX);
    if (tk->nprefixes == AUTH_PREFIXES_MAX)
        return perr(p, "more than %d prefixes", AUTH_PREFIXES_MAX);
    if (tk->prefixes == NULL) {
        tk->prefixes = calloc(AUTH_PREFIXES_MAX, sizeof *tk->prefixes);
        tk->prefix_len = calloc(AUTH_PREFIXES_MAX, sizeof *tk->prefix_len);
        if (tk->prefixes == NULL || tk->prefix_len == NULL)
            return SEMA_ENOMEM;
    }
    char *c = strndup(f, n);
    if (c == NULL)
        return SEMA_ENOMEM;
    tk->prefixes[tk->nprefixes] = c;
    tk->prefix_len[tk->nprefixes++] = n;
    return 0;
}

static int check_unique(parse_t *p, const auth_token_t *tk)
{
    for (size_t i = 0; i < p->t->n; i++) {
        if (strcmp(p->t->tokens[i].name, tk->name) == 0)
            return perr(p, "token name '%s' is already used on line %zu", tk->name, p->lines[i]);
        if (memcmp(p->t->tokens[i].hash, tk->hash, AUTH_HASH_LEN) == 0)
            return perr(p, "the same hash as token '%s' on line %zu", p->t->tokens[i].name,
                        p->lines[i]);
    }
    return 0;
}

static int grow(parse_t *p)
{
    if (p->t->n < p->cap)
        return 0;
    if (p->t->n >= AUTH_TOKENS_MAX)
        return perr(p, "more than %d tokens", AUTH_TOKENS_MAX);
    size_t cap = p->cap ? p->cap * 2 : 16;
    auth_token_t *tokens = realloc(p->t->tokens, cap * sizeof *tokens);
    if (tokens == NULL)
        return SEMA_ENOMEM;
    p->t->tokens = tokens;
    size_t *lines = realloc(p->lines, cap * sizeof *lines);
    if (lines == NULL)
        return SEMA_ENOMEM;
    p->lines = lines;
    p->cap = cap;
    return 0;
}

static int parse_fields(parse_t *p, auth_token_t *tk, const char *line, size_t len)
{
    const char *f;
    size_t pos = 0, n = next_field(line, len, &pos, &f);
    if (!auth_name_valid(f, n))
        return perr(p, "the token name must be 1-%d of A-Z a-z 0-9 . _ @ -", AUTH_NAME_MAX);
    memcpy(tk->name, f, n);
    tk->name[n] = '\0';
    n = next_field(line, len, &pos, &f);
    if (n == 0)
        return perr(p, "token '%s': no hash (expected NAME sha256:HASH RIGHTS [PREFIX...])",
                    tk->name);
    if (parse_hash(f, n, tk->hash) != 0)
        return perr(p, "token '%s': the hash must be \"sha256:\" and 64 lower-case hex digits",
                    tk->name);
    n = next_field(line, len, &pos, &f);
    if (n == 0)
        return perr(p, "token '%s': no rights (read, acquire, admin, comma-separated)", tk->name);
    if (auth_rights_parse(f, n, &tk->rights) != 0)
        return perr(p,
                    "token '%s': rights must be read, acquire or admin, comma-separated, "
                    "each once",
                    tk->name);
    while ((n = next_field(line, len, &pos, &f)) > 0) {
        int rc = add_prefix(p, tk, f, n);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int parse_line(parse_t *p, const char *line, size_t len)
{
    size_t i = 0;
    if (len > AUTH_LINE_MAX)
        return perr(p, "longer than %d bytes", AUTH_LINE_MAX);
    if (memchr(line, '\0', len) != NULL)
        return perr(p, "a NUL byte");
    if (memchr(line, '\r', len) != NULL)
        return perr(p, "a carriage return (write the file with Unix line endings)");
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len || line[i] == '#')
        return 0; /* blank or a comment */
    int rc = grow(p);
    if (rc != 0)
        return rc;
    auth_token_t *tk = &p->t->tokens[p->t->n];
    memset(tk, 0, sizeof *tk);
    rc = parse_fields(p, tk, line, len);
    if (rc == 0)
        rc = check_unique(p, tk);
    if (rc != 0) {
        token_free(tk);
        return rc;
    }
    p->lines[p->t->n++] = p->lineno;
    return 0;
}

static int build_index(auth_table_t *t)
{
    size_t size = 4;
    while (size < 2 * t->n)
        size *= 2;
    t->index = calloc(size, sizeof *t->index);
    if (t->index == NULL)
        return SEMA_ENOMEM;
    t->index_mask = size - 1;
    for (size_t i = 0; i < t->n; i++) {
        size_t s = slot_of(t->tokens[i].hash, t->index_mask);
        while (t->index[s] != 0)
            s = (s + 1) & t->index_mask;
        t->index[s] = (uint32_t)(i + 1);
    }
    return 0;
}

int auth_parse(const char *text, size_t len, auth_table_t **out, char *errbuf, size_t errlen)
{
    parse_t p = {.err = errbuf, .errlen = errlen};
    int rc = 0;
    p.t = calloc(1, sizeof *p.t);
    if (p.t == NULL)
        return SEMA_ENOMEM;
    p.t->refs = 1;
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        p.lineno++;
        rc = parse_line(&p, text + at, end - at);
        at = end + 1;
    }
    if (rc == 0)
        rc = build_index(p.t);
    free(p.lines);
    if (rc != 0) {
        if (rc == SEMA_ENOMEM)
            snprintf(errbuf, errlen, "out of memory");
        auth_unref(p.t);
        return rc;
    }
    *out = p.t;
    return 0;
}

int auth_load(const char *path, auth_table_t **out, char *errbuf, size_t errlen)
{
    char err[300];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return SEMA_EIO;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > AUTH_FILE_MAX) {
        snprintf(errbuf, errlen, "%s: not a regular file of at most %d bytes", path, AUTH_FILE_MAX);
        close(fd);
        return SEMA_EINVAL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf != NULL && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (buf == NULL || got != (size_t)st.st_size) {
        snprintf(errbuf, errlen, "%s: %s", path, buf == NULL ? "out of memory" : "short read");
        free(buf);
        return buf == NULL ? SEMA_ENOMEM : SEMA_EIO;
    }
    int rc = auth_parse(buf, got, out, err, sizeof err);
    OPENSSL_cleanse(buf, got);
    free(buf);
    if (rc != 0)
        snprintf(errbuf, errlen, "%s: %s", path, err);
    return rc;
}
