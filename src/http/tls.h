/* SPDX-License-Identifier: MIT */
/* tls.h - semad's TLS (OpenSSL) without sockets: the server's context (certificate, key,
 * optional client CA; reloaded on SIGHUP) and a session per connection, driven through
 * memory. conn.c hands in the ciphertext it read and gets plaintext back; it hands in the
 * plaintext of a reply and gets the ciphertext to write. Nothing is buffered here between
 * calls but what OpenSSL keeps of a partial record. Loop thread only. */
#ifndef SEMAD_TLS_H
#define SEMAD_TLS_H

#include <stddef.h>

#include "common/strbuf.h"

typedef struct tls tls_t;           /* the server's */
typedef struct tls_sess tls_sess_t; /* one connection's */

enum {
    TLS_WANT = 0,      /* tls_read: every byte handed in is used; more are needed */
    TLS_CLOSED = -1,   /* tls_read: the peer ended the session (close_notify) */
    TLS_FAILED = -2,   /* a protocol error, a refused certificate: close the connection */
    TLS_RECORD = 16384 /* the most plaintext one tls_read returns */
};

/* Load the certificate chain `cert` and the private key `key` (PEM files), and with
 * `client_ca` (may be NULL) require every client to present a certificate signed by one of
 * the CAs in that PEM file. TLS 1.2 and 1.3 only, forward-secret AEAD ciphers. The paths
 * are borrowed and must outlive the context (they are read again by tls_reload). Returns 0
 * or SEMA_EINVAL/SEMA_ENOMEM with the reason in errbuf. */
int tls_new(tls_t **out, const char *cert, const char *key, const char *client_ca, char *errbuf,
            size_t errlen);

/* Read the files again. On success new sessions use them (sessions already made keep what
 * they had); on failure the old ones stay and errbuf says why. Returns 0 or a SEMA_E* code. */
int tls_reload(tls_t *t, char *errbuf, size_t errlen);

/* Free the context; sessions still open keep their own reference. NULL is fine. */
void tls_free(tls_t *t);

/* A server-side session for one connection, or NULL when out of memory. */
tls_sess_t *tls_sess_new(tls_t *t);
void tls_sess_free(tls_sess_t *s); /* NULL is fine */

/* Hand in `len` bytes read from the socket (borrowed until the tls_read that returns
 * TLS_WANT, TLS_CLOSED or TLS_FAILED, or the next tls_input); what the session writes
 * meanwhile (handshake messages, alerts, tickets) is appended to `out`. tls_input(t, s, NULL,
 * 0, NULL) forgets what was handed in. */
void tls_input(tls_t *t, tls_sess_t *s, const char *data, size_t len, struct strbuf *out);
/* Decrypt into buf (at least TLS_RECORD bytes): returns the number of plaintext bytes (> 0),
 * TLS_WANT, TLS_CLOSED or TLS_FAILED. Call it until it returns <= 0: only then is all the
 * input used. */
int tls_read(tls_t *t, tls_sess_t *s, char *buf, size_t cap);
/* Encrypt `len` bytes; the records are appended to `out`. 0 or TLS_FAILED. May be called
 * between the tls_read calls of one input. */
int tls_write(tls_t *t, tls_sess_t *s, const char *data, size_t len, struct strbuf *out);
/* Append the close_notify alert to `out` (best effort). */
void tls_close_notify(tls_t *t, tls_sess_t *s, struct strbuf *out);

/* True once the handshake is over (and the client's certificate, when one is required, was
 * verified). */
int tls_sess_ready(const tls_sess_t *s);
/* The subject common name of the client's verified certificate (control bytes replaced by
 * '?'), or NULL when no certificate was asked for or it has no CN. Borrowed from the
 * session. */
const char *tls_sess_peer_name(const tls_sess_t *s);
/* Why the last call on `s` failed (OpenSSL's reason), for the log. */
const char *tls_sess_error(const tls_sess_t *s);

#endif /* SEMAD_TLS_H */
