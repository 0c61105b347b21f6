/* SPDX-License-Identifier: MIT */
/* access.c - who may do what (semad --auth): the bearer token of each request, the right
 * its route needs (router.c), the token's name prefixes, 401 and 403 replies, and the token
 * file's reload on SIGHUP (connections stay open; a bad file keeps the tokens in use). */
#include "http/server_internal.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <openssl/crypto.h>

#include "common/log.h"
#include "sema/error.h"

/* ---- the token file ---- */

/* Does the reloaded table still give the request's token (same name, same hash) the
 * route's right over the request's name? */
static int still_allowed(const auth_table_t *t, const route_ctx_t *c)
{
    const auth_token_t *old = c->token, *tk = NULL;
    for (size_t i = 0; i < t->n && tk == NULL; i++)
        if (strcmp(t->tokens[i].name, old->name) == 0 &&
            memcmp(t->tokens[i].hash, old->hash, AUTH_HASH_LEN) == 0)
            tk = &t->tokens[i];
    return tk != NULL && auth_has(tk, c->route->right) &&
           (!(c->route->flags & ROUTE_NAMED) || c->param == NULL ||
            auth_name_allowed(tk, c->param, c->param_len));
}

/* After a reload: close the connections whose event stream or parked request a token that
 * lost its right (or is gone) opened, so that revoking a token ends what it still holds
 * open. Requests that are answered at once finish as they are. */
static size_t cut_revoked(server_t *srv)
{
    size_t cut = 0;
    conn_t *next;
    for (conn_t *conn = srv->conns; conn != NULL; conn = next) {
        next = conn->next;
        const route_ctx_t *c = &conn->ctx;
        if (c->token != NULL && !conn->closing && (conn->stream || c->submitted) &&
            !still_allowed(srv->auth, c)) {
            conn_close(conn); /* a parked request is withdrawn there */
            cut++;
        }
    }
    return cut;
}

void server__auth_reload(server_t *srv)
{
    char err[512];
    auth_table_t *t = NULL;
    if (srv->auth == NULL)
        return;
    int rc = auth_load(srv->cfg->auth_file, &t, err, sizeof err);
    if (rc != 0) {
        log_warn("SIGHUP: keeping the %zu tokens loaded before: %s", srv->auth->n, err);
        return;
    }
    auth_unref(srv->auth); /* requests in flight keep the old table until they end */
    srv->auth = t;
    size_t cut = cut_revoked(srv);
    log_info("SIGHUP: %zu tokens loaded from %s", t->n, srv->cfg->auth_file);
    if (cut > 0)
        log_info("SIGHUP: closed %zu event streams and parked requests of tokens that lost "
                 "their right",
                 cut);
}

int server__auth_open(server_t *srv, char *errbuf, size_t errlen)
{
    char err[512];
    if (srv->cfg->auth_file == NULL)
        return 0;
    int rc = auth_load(srv->cfg->auth_file, &srv->auth, err, sizeof err);
    if (rc != 0) {
        snprintf(errbuf, errlen, "--auth: %s", err);
        return rc;
    }
    struct stat st;
    if (stat(srv->cfg->auth_file, &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)))
        log_warn("--auth %s can be written by other users, who could add tokens of their own "
                 "(chmod 600 it)",
                 srv->cfg->auth_file);
    if (srv->auth->n == 0)
        log_warn("--auth %s holds no token: every route but /healthz answers 401",
                 srv->cfg->auth_file);
    else
        log_info("%zu tokens loaded from %s", srv->auth->n, srv->cfg->auth_file);
    return 0;
}

void server__auth_free(server_t *srv)
{
    auth_unref(srv->auth);
    srv->auth = NULL;
}

/* ---- requests ---- */

static const char www_auth[] = "WWW-Authenticate: Bearer realm=\"sema\"\r\n";
static const char www_auth_bad[] =
    "WWW-Authenticate: Bearer realm=\"sema\", error=\"invalid_token\"\r\n";

static void unauthorized(route_ctx_t *c, const char *extra, const char *why)
{
    char detail[300];
    snprintf(detail, sizeof detail, "%s; %s %s needs a token with the '%s' right", why,
             c->route->method, c->route->pattern, auth_right_name(c->route->right));
    ctx__reply_problem_hdr(c, 401, "unauthorized", detail, extra);
}

/* "token 'NAME' may only use names that start with PREFIX, PREFIX, ...". */
static void outside_prefixes(route_ctx_t *c)
{
    char detail[512];
    const auth_token_t *tk = c->token;
    int n =
        snprintf(detail, sizeof detail,
                 "token '%s' may only use semaphore names and lock keys that start with", tk->name);
    for (size_t i = 0; i < tk->nprefixes && n > 0 && (size_t)n < sizeof detail; i++)
        n += snprintf(detail + n, sizeof detail - (size_t)n, "%s '%s'", i ? "," : "",
                      tk->prefixes[i]);
    ctx__reply_problem_hdr(c, 403, "forbidden", detail, NULL);
}

/* The Authorization value a connection last sent that named a token. */
struct conn_auth {
    auth_table_t *table;       /* a reference: the table `token` is in */
    const auth_token_t *token; /* the token it named (NULL: none, for from_cert) */
    int from_cert;             /* named by the client certificate's CN, not by a header */
    size_t len;
    char value[]; /* len bytes and a NUL */
};

void conn_auth_forget(conn_t *conn)
{
    struct conn_auth *a = conn->auth;
    if (a == NULL)
        return;
    OPENSSL_cleanse(a->value, a->len);
    auth_unref(a->table);
    free(a);
    conn->auth = NULL;
}

/* Without an Authorization header, on a connection whose client certificate was verified
 * (--tls-client-ca): the token named like the certificate's subject CN, looked up once per
 * connection and token table (remembered in conn->auth with from_cert set, which
 * find_token never takes for its own). NULL after a 401 reply. */
static const auth_token_t *cert_token(route_ctx_t *c)
{
    conn_t *conn = c->conn;
    server_t *srv = c->srv;
    const char *peer = srv->cfg->tls_client_ca != NULL ? conn_peer_name(conn) : NULL;
    if (peer == NULL) {
        unauthorized(c, www_auth, "no Authorization header");
        return NULL;
    }
    const auth_token_t *tk;
    struct conn_auth *a = conn->auth;
    if (a != NULL && a->from_cert && a->table == srv->auth) {
        tk = a->token;
    } else {
        tk = auth_find_name(srv->auth, peer);
        conn_auth_forget(conn);
        if ((a = malloc(sizeof *a + 1)) != NULL) { /* out of memory: looked up next time */
            a->table = auth_ref(srv->auth);
            a->token = tk;
            a->from_cert = 1;
            a->len = 0;
            a->value[0] = '\0';
            conn->auth = a;
        }
    }
    if (tk == NULL) {
        char why[200];
        snprintf(why, sizeof why,
                 "no Authorization header, and no token is named like the client "
                 "certificate's subject '%.64s'",
                 peer);
        unauthorized(c, www_auth, why);
    }
    return tk;
}

/* The token the header value `hv` names: the connection's last one when the bytes are the
 * same (compared in constant time) and the tokens were not reloaded since, else looked up
 * and remembered. NULL after a 401 reply. */
static const auth_token_t *find_token(route_ctx_t *c, const char *hv)
{
    conn_t *conn = c->conn;
    server_t *srv = c->srv;
    const char *tok, *why;
    size_t tok_len, len = strlen(hv);
    const struct conn_auth *last = conn->auth;
    if (last != NULL && !last->from_cert && last->table == srv->auth && last->len == len &&
        CRYPTO_memcmp(last->value, hv, len) == 0)
        return last->token;
    if (auth_bearer(hv, len, &tok, &tok_len, &why) != 0) {
        unauthorized(c, www_auth_bad, why);
        return NULL;
    }
    const auth_token_t *tk = auth_find(srv->auth, tok, tok_len);
    if (tk == NULL) {
        unauthorized(c, www_auth_bad, "unknown token");
        return NULL;
    }
    conn_auth_forget(conn);
    struct conn_auth *a = malloc(sizeof *a + len + 1);
    if (a != NULL) { /* out of memory: the next request hashes again */
        a->table = auth_ref(srv->auth);
        a->token = tk;
        a->from_cert = 0;
        a->len = len;
        memcpy(a->value, hv, len + 1);
        conn->auth = a;
    }
    return tk;
}

/* ---- requests from web browsers ----
 *
 * A web page can make its visitor's browser send requests to semad (a form's POST needs no
 * CORS): semad refuses those that change state unless they come from its own pages, by the
 * browser's own word (Sec-Fetch-Site, which a page cannot set), or, from a browser that does
 * not send it, by Origin against Host. Requests that carry neither header are not a
 * browser's and pass. Without --auth, a page could also reach the loopback semad through a
 * name of its own that resolves to 127.0.0.1 (DNS rebinding): browsers are then answered
 * only at a loopback address or localhost. */

/* "localhost", 127.0.0.0/8 or [::1], with or without a port. */
static int host_is_loopback(const char *h, size_t len)
{
    char name[64];
    size_t n = len;
    const char *colon = memrchr(h, ':', len);
    if (len > 0 && h[0] == '[')
        return len >= 5 && memcmp(h, "[::1]", 5) == 0 && (len == 5 || h[5] == ':');
    if (colon != NULL)
        n = (size_t)(colon - h);
    if (n == 0 || n >= sizeof name)
        return 0;
    memcpy(name, h, n);
    name[n] = '\0';
    struct in_addr a;
    if (inet_pton(AF_INET, name, &a) == 1)
        return (ntohl(a.s_addr) >> 24) == 127;
    return strcasecmp(name, "localhost") == 0;
}

/* Origin is "http(s)://" and the Host this request was sent to. */
static int origin_is_host(const route_ctx_t *c, const char *host, size_t hlen)
{
    const char *o = http_origin(c->req);
    const char *scheme = c->conn->tls != NULL ? "https://" : "http://";
    size_t sl = strlen(scheme);
    return host != NULL && strncasecmp(o, scheme, sl) == 0 && strlen(o + sl) == hlen &&
           strncasecmp(o + sl, host, hlen) == 0;
}

static void refuse_browser(route_ctx_t *c, const char *why)
{
    char detail[400];
    snprintf(detail, sizeof detail, "%s (docs/security.md#browsers)", why);
    ctx__reply_problem_hdr(c, 403, "forbidden", detail, NULL);
}

int ctx__browser_check(route_ctx_t *c)
{
    const http_request_t *r = c->req;
    const server_config_t *cfg = c->srv->cfg;
    size_t hlen;
    int site = http_fetch_site(r);
    if (r->browser == NULL || (site == HTTP_FETCH_ABSENT && http_origin(r) == NULL))
        return 0; /* not a browser's (a request with only If-None-Match is not one either) */
    const char *host = http_request_host(&c->conn->parser, &hlen);
    if (c->srv->auth == NULL && !cfg->insecure && (host == NULL || !host_is_loopback(host, hlen))) {
        refuse_browser(c, "without --auth, semad answers a browser only at a loopback address "
                          "or localhost, not through another name");
        return -1;
    }
    if (strcmp(c->route->method, "GET") == 0)
        return 0;
    if (cfg->ui_read_only) {
        refuse_browser(c, "semad runs with --ui-read-only: a browser may not change state");
        return -1;
    }
    if (site == HTTP_FETCH_SAME_ORIGIN || site == HTTP_FETCH_NONE)
        return 0;
    if (site != HTTP_FETCH_ABSENT)
        refuse_browser(c, "a cross-site request may not change state: the browser says it comes "
                          "from another site's page (Sec-Fetch-Site)");
    else if (!origin_is_host(c, host, hlen))
        refuse_browser(c, "a cross-site request may not change state: its Origin is not the "
                          "address it was sent to");
    else
        return 0;
    return -1;
}

int ctx__authorize(route_ctx_t *c)
{
    server_t *srv = c->srv;
    if (c->req->browser != NULL && ctx__browser_check(c) != 0)
        return -1;
    if (srv->auth == NULL || c->route->right == 0)
        return 0;
    const char *hv = c->req->authorization;
    const auth_token_t *tk = hv != NULL ? find_token(c, hv) : cert_token(c);
    if (tk == NULL)
        return -1;
    c->auth = auth_ref(srv->auth);
    c->token = tk;
    if (!auth_has(tk, c->route->right)) {
        char detail[300];
        snprintf(detail, sizeof detail, "token '%s' lacks the '%s' right that %s %s needs",
                 tk->name, auth_right_name(c->route->right), c->route->method, c->route->pattern);
        ctx__reply_problem_hdr(c, 403, "forbidden", detail, NULL);
        return -1;
    }
    if ((c->route->flags & ROUTE_NAMED) && c->param != NULL &&
        !auth_name_allowed(tk, c->param, c->param_len)) {
        outside_prefixes(c);
        return -1;
    }
    if ((c->route->flags & ROUTE_GLOBAL) && tk->nprefixes > 0) {
        char detail[200];
        snprintf(detail, sizeof detail,
                 "%s names every semaphore: token '%s' is limited to name prefixes",
                 c->route->pattern, tk->name);
        ctx__reply_problem_hdr(c, 403, "forbidden", detail, NULL);
        return -1;
    }
    return 0;
}

const auth_token_t *ctx__token_peek(route_ctx_t *c)
{
    server_t *srv = c->srv;
    const char *hv = c->req->authorization, *tok, *why;
    size_t len;
    if (srv->auth == NULL)
        return NULL;
    if (hv != NULL)
        return auth_bearer(hv, strlen(hv), &tok, &len, &why) == 0 ? auth_find(srv->auth, tok, len)
                                                                  : NULL;
    if (srv->cfg->tls_client_ca != NULL && conn_peer_name(c->conn) != NULL)
        return auth_find_name(srv->auth, conn_peer_name(c->conn));
    return NULL;
}

int ctx__authorize_submit(route_ctx_t *c)
{
    engine_req_t *r = &c->ereq;
    const auth_token_t *tk = c->token;
    if (tk == NULL)
        return 0;
    r->principal = tk->name;
    r->principal_admin = (tk->rights & AUTH_ADMIN) != 0;
    const char *name = r->name;
    size_t len = r->name_len;
    switch (r->op) {
    case ENGINE_LEASE_GET:
    case ENGINE_LEASE_RENEW:
    case ENGINE_LEASE_RELEASE:
    case ENGINE_LEASE_REVOKE:
    case ENGINE_TICKET_GET:
    case ENGINE_TICKET_DELETE:
        return 0; /* a lease or ticket id: the engine checks whose it is */
    case ENGINE_METRICS:
        return 0; /* no name: the route's right decides (route_t) */
    case ENGINE_SEM_LIST:
    case ENGINE_LOCK_LIST:
        name = r->prefix != NULL ? r->prefix : "";
        len = strlen(name);
        break;
    default:
        break;
    }
    if (r->nparts > 0) { /* a request on several semaphores: every one within the prefixes */
        size_t i = 0;
        while (i < r->nparts && auth_name_allowed(tk, r->parts[i].name, r->parts[i].name_len))
            i++;
        if (i == r->nparts)
            return 0;
        outside_prefixes(c);
        return -1;
    }
    if (name != NULL && auth_name_allowed(tk, name, len))
        return 0;
    outside_prefixes(c);
    return -1;
}

int ctx__name_visible(route_ctx_t *c, const char *name, size_t len)
{
    if (c->token == NULL || auth_name_allowed(c->token, name, len))
        return 1;
    outside_prefixes(c);
    return 0;
}

int ctx__lease_visible(route_ctx_t *c, const engine_lease_t *l)
{
    return ctx__name_visible(c, l->name, l->name_len);
}
