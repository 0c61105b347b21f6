/* SPDX-License-Identifier: MIT */
/* tls.c - semad's TLS with OpenSSL, through a BIO of our own: it reads from the bytes conn.c
 * hands in (borrowed, never copied into a per-connection buffer) and writes into the strbuf
 * conn.c drains at once, so an idle session holds no buffer (SSL_MODE_RELEASE_BUFFERS). */
#include "http/tls.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "sema/error.h"

enum { PEER_NAME_MAX = 256 /* bytes of a subject CN kept (X.509's ub-common-name is 64 chars) */ };

/* TLS 1.2: ECDHE key exchange and AEAD ciphers only (TLS 1.3's suites are all of that kind). */
static const char CIPHERS_12[] = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!SHA1";

/* The one I/O window the BIOs of every session use (one loop thread, one call at a time). */
typedef struct {
    const char *in; /* ciphertext handed in, not yet read by OpenSSL */
    size_t in_len;
    struct strbuf *out; /* where ciphertext goes */
    int out_failed;     /* `out` refused bytes (its cap, or out of memory) */
} tls_io_t;

struct tls {
    SSL_CTX *ctx; /* the current certificate; sessions hold their own reference */
    const char *cert, *key, *client_ca;
    BIO_METHOD *method;
    tls_io_t io;
};

struct tls_sess {
    SSL *ssl;
    tls_t *t;
    int ready;
    char *peer; /* subject CN of the verified client certificate, or NULL */
    char err[160];
};

/* ---- the BIO ---- */

static int io_write(BIO *b, const char *data, int len)
{
    tls_io_t *io = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0)
        return 0;
    if (io->out == NULL || strbuf_append(io->out, data, (size_t)len) != 0) {
        io->out_failed = 1;
        return -1;
    }
    return len;
}

static int io_read(BIO *b, char *buf, int len)
{
    tls_io_t *io = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0)
        return 0;
    if (io->in_len == 0) {
        BIO_set_retry_read(b); /* not the end: the socket may bring more */
        return -1;
    }
    size_t n = io->in_len < (size_t)len ? io->in_len : (size_t)len;
    memcpy(buf, io->in, n);
    io->in += n;
    io->in_len -= n;
    return (int)n;
}

static long io_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* written bytes are in `out` at once */
}

static int io_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *io_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "semad-conn");
    if (m == NULL)
        return NULL;
    if (!BIO_meth_set_write(m, io_write) || !BIO_meth_set_read(m, io_read) ||
        !BIO_meth_set_ctrl(m, io_ctrl) || !BIO_meth_set_create(m, io_create)) {
        BIO_meth_free(m);
        return NULL;
    }
    return m;
}

/* ---- the context ---- */

/* OpenSSL's reason for the last failure, after `what`. */
static void ssl_reason(char *errbuf, size_t errlen, const char *what, const char *file)
{
    unsigned long e = ERR_peek_last_error();
    char reason[200] = "unknown error";
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    snprintf(errbuf, errlen, "%s%s%s: %s", what, file ? " " : "", file ? file : "", reason);
}

static int ctx_limits(SSL_CTX *ctx)
{
    static const unsigned char sid_ctx[] = "semad";
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    /* Resumption by tickets only (their keys are the context's, so a reload also ends the
     * sessions of the old certificate): no server-side cache to grow. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 1);
    return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) &&
           SSL_CTX_set_cipher_list(ctx, CIPHERS_12) &&
           SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
}

static int ctx_client_ca(SSL_CTX *ctx, const char *ca, char *errbuf, size_t errlen)
{
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        ssl_reason(errbuf, errlen, "cannot read the client CA file", ca);
        return SEMA_EINVAL;
    }
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
    if (names == NULL) {
        ssl_reason(errbuf, errlen, "no CA certificate in", ca);
        return SEMA_EINVAL;
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return 0;
}

static int ctx_build(const tls_t *t, SSL_CTX **out, char *errbuf, size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        ssl_reason(errbuf, errlen, "cannot make a TLS context", NULL);
        return SEMA_ENOMEM;
    }
    int rc = SEMA_EINVAL;
    if (!ctx_limits(ctx))
        ssl_reason(errbuf, errlen, "cannot set the TLS versions and ciphers", NULL);
    else if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1)
        ssl_reason(errbuf, errlen, "cannot read the certificate", t->cert);
    else if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1)
        ssl_reason(errbuf, errlen, "cannot read the private key", t->key);
    else if (SSL_CTX_check_private_key(ctx) != 1)
        ssl_reason(errbuf, errlen, "the key does not match the certificate", t->cert);
    else if (t->client_ca == NULL || ctx_client_ca(ctx, t->client_ca, errbuf, errlen) == 0)
        rc = 0;
    if (rc != 0) {
        SSL_CTX_free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

int tls_new(tls_t **out, const char *cert, const char *key, const char *client_ca, char *errbuf,
            size_t errlen)
{
    tls_t *t = calloc(1, sizeof *t);
    if (t == NULL || (t->method = io_method()) == NULL) {
        free(t);
        snprintf(errbuf, errlen, "out of memory");
        return SEMA_ENOMEM;
    }
    t->cert = cert;
    t->key = key;
    t->client_ca = client_ca;
    int rc = ctx_build(t, &t->ctx, errbuf, errlen);
    if (rc != 0) {
        tls_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tls_reload(tls_t *t, char *errbuf, size_t errlen)
{
    SSL_CTX *ctx;
    int rc = ctx_build(t, &ctx, errbuf, errlen);
    if (rc != 0)
        return rc;
    SSL_CTX_free(t->ctx); /* sessions made with it hold their own reference */
    t->ctx = ctx;
    return 0;
}

void tls_free(tls_t *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    BIO_meth_free(t->method);
    free(t);
}

/* ---- sessions ---- */

tls_sess_t *tls_sess_new(tls_t *t)
{
    tls_sess_t *s = calloc(1, sizeof *s);
    BIO *bio = NULL;
    if (s == NULL || (s->ssl = SSL_new(t->ctx)) == NULL || (bio = BIO_new(t->method)) == NULL) {
        if (s != NULL)
            SSL_free(s->ssl);
        free(s);
        ERR_clear_error();
        return NULL;
    }
    BIO_set_data(bio, &t->io);
    SSL_set_bio(s->ssl, bio, bio); /* one BIO both ways: the session owns it */
    SSL_set_accept_state(s->ssl);
    s->t = t;
    return s;
}

void tls_sess_free(tls_sess_t *s)
{
    if (s == NULL)
        return;
    SSL_free(s->ssl);
    free(s->peer);
    free(s);
}

/* The subject CN of the verified client certificate, printable. */
static char *peer_name(SSL *ssl)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    X509 *cert = SSL_get1_peer_certificate(ssl);
#else
    X509 *cert = SSL_get_peer_certificate(ssl);
#endif
    if (cert == NULL)
        return NULL;
    char *name = NULL;
    X509_NAME *subj = X509_get_subject_name(cert);
    int i = subj != NULL ? X509_NAME_get_index_by_NID(subj, NID_commonName, -1) : -1;
    unsigned char *utf8 = NULL;
    int n = i >= 0
                ? ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i)))
                : -1;
    if (n > 0 && n < PEER_NAME_MAX && (name = malloc((size_t)n + 1)) != NULL) {
        for (int k = 0; k < n; k++)
            name[k] = utf8[k] < 0x20 || utf8[k] == 0x7f ? '?' : (char)utf8[k];
        name[n] = '\0';
    }
    OPENSSL_free(utf8);
    X509_free(cert);
    return name;
}

static void sess_error(tls_sess_t *s, int ret)
{
    int e = SSL_get_error(s->ssl, ret);
    unsigned long code = ERR_peek_last_error();
    if (code != 0)
        ERR_error_string_n(code, s->err, sizeof s->err);
    else
        snprintf(s->err, sizeof s->err, "TLS error %d", e);
    ERR_clear_error();
}

void tls_input(tls_t *t, tls_sess_t *s, const char *data, size_t len, struct strbuf *out)
{
    (void)s;
    t->io.in = data;
    t->io.in_len = len;
    t->io.out = out;
    t->io.out_failed = 0;
}

static void io_done(tls_t *t)
{
    t->io.in = NULL;
    t->io.in_len = 0;
    t->io.out = NULL;
}

int tls_read(tls_t *t, tls_sess_t *s, char *buf, size_t cap)
{
    ERR_clear_error();
    int n = SSL_read(s->ssl, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
    if (!s->ready && SSL_is_init_finished(s->ssl)) {
        s->ready = 1;
        s->peer = peer_name(s->ssl);
    }
    if (n > 0 && !t->io.out_failed)
        return n;
    int e = SSL_get_error(s->ssl, n);
    if (!t->io.out_failed && e == SSL_ERROR_WANT_READ) {
        io_done(t);
        return TLS_WANT;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        io_done(t);
        return TLS_CLOSED;
    }
    if (t->io.out_failed)
        snprintf(s->err, sizeof s->err, "out of memory for TLS output");
    else
        sess_error(s, n);
    io_done(t);
    return TLS_FAILED;
}

/* Writes happen while a read may be half-way through its input (a request it decrypted is
 * answered at once): they use a window of their own and give the read's back. */
int tls_write(tls_t *t, tls_sess_t *s, const char *data, size_t len, struct strbuf *out)
{
    tls_io_t saved = t->io;
    int rc = 0;
    t->io = (tls_io_t){.out = out};
    ERR_clear_error();
    while (len > 0) {
        int chunk = len > INT32_MAX ? INT32_MAX : (int)len;
        int n = SSL_write(s->ssl, data, chunk);
        if (n <= 0 || t->io.out_failed) {
            if (t->io.out_failed)
                snprintf(s->err, sizeof s->err, "out of memory for TLS output");
            else
                sess_error(s, n);
            rc = TLS_FAILED;
            break;
        }
        data += n;
        len -= (size_t)n;
    }
    t->io = saved;
    return rc;
}

void tls_close_notify(tls_t *t, tls_sess_t *s, struct strbuf *out)
{
    if (!s->ready)
        return;
    tls_io_t saved = t->io;
    t->io = (tls_io_t){.out = out};
    ERR_clear_error();
    (void)SSL_shutdown(s->ssl);
    ERR_clear_error();
    t->io = saved;
}

int tls_sess_ready(const tls_sess_t *s)
{
    return s->ready;
}

const char *tls_sess_peer_name(const tls_sess_t *s)
{
    return s->peer;
}

const char *tls_sess_error(const tls_sess_t *s)
{
    return s->err[0] ? s->err : "TLS error";
}
