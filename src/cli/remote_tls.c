/* SPDX-License-Identifier: MIT */
/* remote_tls.c - the remote verbs' TLS options checked before any connection: refused with an
 * http:// server, and a client certificate's halves given together. */
#include "cli/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* --cacert, --cert or --cert-key given with an http:// server (a bare host:port is http://):
 * a usage error, as nothing would use them and the token would go in clear. $SEMA_CACERT and
 * the others are defaults for https:// servers and pass. */
static int check_tls_scheme(const remote_opts_t *o)
{
    if (o->cacert == NULL && o->cert == NULL && o->cert_key == NULL)
        return 0;
    if (strncasecmp(o->server, "https://", 8) == 0 ||
        (strstr(o->server, "://") != NULL && strncasecmp(o->server, "http://", 7) != 0))
        return 0; /* https://, or another scheme, which the client refuses itself */
    const char *bare = strstr(o->server, "://") == NULL ? "http://" : "";
    const char *env = getenv("SEMA_SERVER");
    const char *from = cli_global.server != NULL       ? "--server"
                       : env != NULL && env[0] != '\0' ? "$SEMA_SERVER"
                                                       : "the default server";
    fprintf(stderr,
            "sema %s: --cacert, --cert and --cert-key are for an https:// server; %s is %s%s\n",
            o->verb, from, bare, o->server);
    return CLI_EXIT_USAGE;
}

/* $NAME, or NULL when it is unset or empty. */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Whether the file at `path` holds a private key (0 or 1; -1: unreadable, which the client
 * library reports itself). Reads at most 64 KiB: a certificate chain and its key. */
static int holds_private_key(const char *path)
{
    static char text[65536];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return strstr(text, "PRIVATE KEY-----") != NULL;
}

/* A client certificate's halves for an https:// server: --cert-key with no certificate, or
 * a certificate file without its key and no key given (which could never be used), is a
 * usage error that names the half missing, rather than the TLS library's words once
 * connected. $SEMA_CERT_KEY alone stays a default, as for a server that asks for none. */
static int check_cert_pair(const remote_opts_t *o)
{
    if (strncasecmp(o->server, "https://", 8) != 0)
        return 0;
    const char *cert = o->cert != NULL ? o->cert : env_value("SEMA_CERT");
    const char *key = o->cert_key != NULL ? o->cert_key : env_value("SEMA_CERT_KEY");
    if (o->cert_key != NULL && cert == NULL) {
        fprintf(stderr,
                "sema %s: --cert-key is the key of a client certificate, and no certificate is "
                "given: add --cert FILE (or set SEMA_CERT)\n",
                o->verb);
        return CLI_EXIT_USAGE;
    }
    if (cert != NULL && key == NULL && holds_private_key(cert) == 0) {
        fprintf(stderr,
                "sema %s: the client certificate %s holds no private key, and no key is given: "
                "add --cert-key FILE (or set SEMA_CERT_KEY)\n",
                o->verb, cert);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

int remote_check_tls(const remote_opts_t *o)
{
    int rc = check_tls_scheme(o);
    return rc != 0 ? rc : check_cert_pair(o);
}
