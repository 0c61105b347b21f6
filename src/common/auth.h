/* SPDX-License-Identifier: MIT */
/* auth.h - semad's bearer tokens: the token file (names, SHA-256 hashes, rights, name
 * prefixes), its strict parser, the Authorization header and the lookup of a presented
 * token. Pure code (libcrypto only): semad, `sema token` and the fuzz target share it.
 *
 * The token file, one token a line (docs/security.md):
 *     # comment
 *     NAME  sha256:HEX64  RIGHTS  [PREFIX ...]
 * NAME is 1-64 of [A-Za-z0-9._@-]; RIGHTS is a comma list of read, acquire and admin;
 * each PREFIX limits the token to semaphore names and lock keys that start with it. */
#ifndef SEMAD_AUTH_H
#define SEMAD_AUTH_H

#include <stddef.h>
#include <stdint.h>

enum {
    AUTH_READ = 1,    /* GET of state, event streams, metrics */
    AUTH_ACQUIRE = 2, /* acquire, renew and release its own leases; keyed locks */
    AUTH_ADMIN = 4,   /* everything: create, resize, delete, revoke, others' leases */
    AUTH_ALL = AUTH_READ | AUTH_ACQUIRE | AUTH_ADMIN,
};

enum {
    AUTH_NAME_MAX = 64,         /* bytes of a token's name */
    AUTH_PREFIXES_MAX = 16,     /* prefixes of one token */
    AUTH_PREFIX_MAX = 256,      /* bytes of one prefix */
    AUTH_TOKEN_MAX = 200,       /* bytes of a presented token (the header is capped too) */
    AUTH_LINE_MAX = 8192,       /* bytes of one line of the file */
    AUTH_TOKENS_MAX = 100000,   /* tokens in one file */
    AUTH_FILE_MAX = 16 << 20,   /* bytes of the file */
    AUTH_HASH_LEN = 32,         /* SHA-256 */
    AUTH_SECRET_BYTES = 32,     /* random bytes of a new token */
    AUTH_NEW_TOKEN_LEN = 5 + 43 /* "sema_" and 32 bytes in base64url without padding */
};

typedef struct {
    char name[AUTH_NAME_MAX + 1];
    unsigned char hash[AUTH_HASH_LEN];
    unsigned rights;    /* AUTH_* bits; admin implies the others */
    size_t nprefixes;   /* 0: every name */
    char **prefixes;    /* owned, NUL-terminated */
    size_t *prefix_len; /* owned */
} auth_token_t;

/* A parsed file: immutable once built, shared by reference (a request in flight keeps the
 * table it was authorized with across a reload). */
typedef struct auth_table {
    unsigned refs;
    size_t n;
    auth_token_t *tokens;
    uint32_t *index;   /* open addressing by hash: token index + 1, 0 = empty */
    size_t index_mask; /* index size - 1 (a power of two, at least 2n) */
} auth_table_t;

/* Parse a token file's text (`len` bytes, need not be NUL-terminated). Returns 0 with a new
 * table (one reference) in *out, or SEMA_EINVAL with "line N: what is wrong" in errbuf
 * (SEMA_ENOMEM when out of memory). Never reads past len. */
int auth_parse(const char *text, size_t len, auth_table_t **out, char *errbuf, size_t errlen);

/* Read and parse the file at `path` (at most AUTH_FILE_MAX bytes). 0, or SEMA_EINVAL /
 * SEMA_EIO / SEMA_ENOMEM with "PATH: line N: ..." or the system's reason in errbuf. */
int auth_load(const char *path, auth_table_t **out, char *errbuf, size_t errlen);

/* Take or drop a reference; the last unref frees the table. NULL is fine. */
auth_table_t *auth_ref(auth_table_t *t);
void auth_unref(auth_table_t *t);

/* The token of an Authorization header value: "Bearer" (any case), one or more spaces, a
 * token68 (RFC 9110 §11.2) of at most AUTH_TOKEN_MAX bytes, optional trailing spaces.
 * Returns 0 with *tok and *tok_len pointing into `value`, or SEMA_EINVAL with a static reason
 * in *why. */
int auth_bearer(const char *value, size_t len, const char **tok, size_t *tok_len, const char **why);

/* The entry whose hash is SHA-256(tok), or NULL. The hash of the presented token is looked
 * up, and the candidate's stored hash compared with CRYPTO_memcmp (constant time). */
const auth_token_t *auth_find(const auth_table_t *t, const char *tok, size_t tok_len);

/* The entry named `name` (a NUL-terminated string), or NULL: a verified client certificate's
 * subject CN stands for the token of that name (semad --tls-client-ca). Linear in the
 * number of tokens; semad remembers the answer per connection. */
const auth_token_t *auth_find_name(const auth_table_t *t, const char *name);

/* 1 if `tk` may touch the name (`len` bytes): it has no prefixes, or one is a prefix of it. */
int auth_name_allowed(const auth_token_t *tk, const char *name, size_t len);

/* 1 if tk has every right in `need` (admin has them all). */
int auth_has(const auth_token_t *tk, unsigned need);

/* The name of one right ("read", "acquire", "admin"), "none" for 0. */
const char *auth_right_name(unsigned right);

/* Parse a comma list of rights ("read,acquire"). 0 or SEMA_EINVAL (unknown or repeated). */
int auth_rights_parse(const char *s, size_t len, unsigned *out);

/* 1 if `name` is a valid token name (1-64 of [A-Za-z0-9._@-]). */
int auth_name_valid(const char *name, size_t len);

/* 1 if `p` is a valid prefix (1-256 bytes, none of them a space, a control byte or '#'). */
int auth_prefix_valid(const char *p, size_t len);

/* SHA-256 of `len` bytes as 64 lower-case hex digits and a NUL in `hex`. */
void auth_hash_hex(const char *tok, size_t len, char hex[2 * AUTH_HASH_LEN + 1]);

/* A new token ("sema_" and 43 base64url characters from 32 bytes of getrandom()) and a NUL
 * in `out`. 0 or SEMA_EIO. */
int auth_new_token(char out[AUTH_NEW_TOKEN_LEN + 1]);

#endif /* SEMAD_AUTH_H */
