/* SPDX-License-Identifier: MIT */
/* server.c - semad's listener on one libuv loop: start, signals, graceful stop, the
 * handlers' accessors and the HTTP-level metrics. */
#include "http/server_internal.h"

#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "common/log.h"
#include "common/parse.h"
#include "http/notify.h"
#include "http/procmem.h"
#include "sema/error.h"

enum { BACKLOG = 1024 };

static const int known_status[] = {200, 201, 204, 303, 400, 401, 403, 404, 405,
                                   408, 409, 410, 413, 414, 429, 431, 500, 503};
enum { NSTATUS = sizeof known_status / sizeof known_status[0] + 1 };

/* ---- start and stop ---- */

/* HOST:PORT: a numeric IPv4 address, [IPv6], a host name (resolved once, its first
 * address), or nothing for every interface (":7070", as most servers take it). */
static int parse_listen(const char *spec, struct sockaddr_storage *ss, char *errbuf, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || (size_t)(colon - spec) >= sizeof host) {
        snprintf(errbuf, errlen, "--listen '%s': expected HOST:PORT", spec);
        return SEMA_EINVAL;
    }
    uint64_t port;
    if (parse_u64(colon + 1, &port) != 0 || port > 65535) {
        snprintf(errbuf, errlen, "--listen '%s': bad port", spec);
        return SEMA_EINVAL;
    }
    size_t hl = (size_t)(colon - spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)ss) == 0)
            return 0;
        snprintf(errbuf, errlen, "--listen '%s': not an IPv6 address", spec);
        return SEMA_EINVAL;
    }
    if (uv_ip4_addr(hl == 0 ? "0.0.0.0" : host, (int)port, (struct sockaddr_in *)ss) == 0)
        return 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(errbuf, errlen, "--listen '%s': cannot resolve '%s' (%s)", spec, host,
                 rc != 0 ? gai_strerror(rc) : "no address");
        return SEMA_EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
    server_t *srv = h->data;
    const char *name = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (srv->draining) { /* a second signal: do not wait for the grace period */
        log_info("received %s again: closing every connection now", name);
        while (srv->conns != NULL)
            conn_close(srv->conns);
        return;
    }
    log_info("received %s: stopping", name);
    notify_send("STOPPING=1");
    server_stop(srv);
}

/* SIGHUP: read the TLS certificate, key and client CA again. New connections get them;
 * open ones keep theirs. A file that does not load leaves the running ones in place. */
static void on_sighup(uv_signal_t *h, int signum)
{
    server_t *srv = h->data;
    char err[512], state[64];
    (void)signum;
    /* A service manager that sent the signal (Type=notify-reload) waits for READY=1. */
    snprintf(state, sizeof state, "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)(uv_hrtime() / 1000u));
    notify_send(state);
    if (srv->tls == NULL && srv->auth == NULL)
        log_info("received SIGHUP: nothing to reload");
    else
        server__auth_reload(srv);
    if (srv->tls != NULL) {
        if (tls_reload(srv->tls, err, sizeof err) != 0)
            log_warn("received SIGHUP: keeping the current TLS certificate: %s", err);
        else
            log_info("received SIGHUP: TLS certificate reloaded from %s", srv->cfg->tls_cert);
    }
    notify_send("READY=1");
}

/* The loop is alive: tell the service manager, which restarts semad when these stop. */
static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    notify_send("WATCHDOG=1");
}

static void on_trim(uv_timer_t *t)
{
    (void)t;
    (void)procmem_trim();
}

static void on_grace(uv_timer_t *t)
{
    server_t *srv = t->data;
    log_warn("shutdown grace period over: closing the remaining connections");
    while (srv->conns != NULL)
        conn_close(srv->conns);
}

static void log_bound(server_t *srv)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    log_info("listening on %s://%s%s%s:%d", srv->tls != NULL ? "https" : "http",
             ss.ss_family == AF_INET6 ? "[" : "", ip, ss.ss_family == AF_INET6 ? "]" : "", port);
}

/* 127.0.0.0/8, ::1, or ::ffff:127.x.y.z. */
static int is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* Protected mode: without tokens, anyone who reaches the port may do anything, so semad
 * listens on loopback only unless told --insecure. */
static int check_protected(server_t *srv, const struct sockaddr_storage *ss, char *errbuf,
                           size_t errlen)
{
    const server_config_t *cfg = srv->cfg;
    if (cfg->auth_file != NULL || cfg->insecure || is_loopback(ss))
        return 0;
    snprintf(errbuf, errlen,
             "refusing to listen on %s: it is not a loopback address and semad runs without "
             "--auth, so anyone who can reach the port could create, delete, take and release "
             "every semaphore. Give --auth FILE (tokens: `sema token new`), listen on "
             "127.0.0.1, or add --insecure if every client on that network is trusted "
             "(docs/security.md)",
             cfg->listen);
    return SEMA_EACCES;
}

static int server_listen(server_t *srv, char *errbuf, size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    int rc = parse_listen(srv->cfg->listen, &ss, errbuf, errlen);
    if (rc == 0)
        rc = check_protected(srv, &ss, errbuf, errlen);
    if (rc != 0)
        return rc;
    uv_tcp_init(srv->loop, &srv->listener);
    srv->listener.data = srv;
    rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, BACKLOG, conn_accept);
    if (rc != 0) {
        snprintf(errbuf, errlen, "cannot listen on %s: %s", srv->cfg->listen, uv_strerror(rc));
        return SEMA_EIO; /* server_new closes the listener, then frees srv */
    }
    log_bound(srv);
    return 0;
}

/* --tls-cert: the context, and one record's plaintext buffer all connections share. */
static int server_tls(server_t *srv, char *errbuf, size_t errlen)
{
    const server_config_t *cfg = srv->cfg;
    if (cfg->tls_cert == NULL)
        return 0;
    int rc = tls_new(&srv->tls, cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca, errbuf, errlen);
    if (rc != 0)
        return rc;
    if ((srv->tls_plain = malloc(TLS_RECORD)) == NULL) {
        snprintf(errbuf, errlen, "out of memory");
        return SEMA_ENOMEM;
    }
    log_info("TLS: certificate %s%s%s", cfg->tls_cert,
             cfg->tls_client_ca != NULL ? ", client certificates required, CAs in " : "",
             cfg->tls_client_ca != NULL ? cfg->tls_client_ca : "");
    return 0;
}

static void server_release(server_t *srv)
{
    server__auth_free(srv);
    tls_free(srv->tls);
    free(srv->tls_plain);
    strbuf_free(&srv->tls_out);
    strbuf_free(&srv->tls_read_out);
    ipcap_destroy(&srv->ipcap);
    free(srv->counts);
    if (srv->fin_epfd >= 0)
        close(srv->fin_epfd);
    free(srv);
}

/* A listener that could not listen is closed on the loop (the caller runs it to stop the
 * engine), and only then is the server freed. */
static void on_listener_failed(uv_handle_t *h)
{
    server_release(h->data);
}

int server_new(server_t **out, uv_loop_t *loop, engine_t *engine, const server_config_t *cfg,
               char *errbuf, size_t errlen)
{
    server_t *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return SEMA_ENOMEM;
    srv->loop = loop;
    srv->engine = engine;
    srv->cfg = cfg;
    srv->fin_epfd = -1;
    srv->limits.max_header_bytes = cfg->max_header_bytes ? cfg->max_header_bytes : 1;
    srv->limits.max_body_bytes = cfg->max_body_bytes;
    strbuf_init(&srv->scratch_body, 0);
    strbuf_init(&srv->scratch_reply, 0);
    strbuf_init(&srv->tls_out, 0);
    strbuf_init(&srv->tls_read_out, 0);
    srv->counts = calloc((router_count() + 1) * NSTATUS, sizeof *srv->counts);
    if (srv->counts == NULL || ipcap_init(&srv->ipcap) != 0) {
        server_release(srv);
        snprintf(errbuf, errlen, "out of memory");
        return SEMA_ENOMEM;
    }
    int rc = server__auth_open(srv, errbuf, errlen);
    if (rc == 0)
        rc = server_tls(srv, errbuf, errlen);
    if (rc == 0)
        rc = server_listen(srv, errbuf, errlen);
    if (rc != 0 && srv->listener.loop != NULL)                       /* uv_tcp_init ran */
        uv_close((uv_handle_t *)&srv->listener, on_listener_failed); /* frees srv, on the loop */
    else if (rc != 0)
        server_release(srv);
    if (rc != 0)
        return rc;
    uv_idle_init(loop, &srv->idle);
    srv->idle.data = srv;
    srv->fin_epfd = epoll_create1(EPOLL_CLOEXEC); /* without it, conn_peer_gone reads sockets */
    uv_timer_init(loop, &srv->grace);
    srv->grace.data = srv;
    uv_timer_init(loop, &srv->watchdog);
    uint64_t wd_ms = notify_watchdog_usec() / 2000u; /* twice per interval, as systemd asks */
    if (wd_ms > 0) {
        uv_timer_start(&srv->watchdog, on_watchdog, wd_ms, wd_ms);
        uv_unref((uv_handle_t *)&srv->watchdog);
    }
    uv_timer_init(loop, &srv->trim);
    uv_timer_start(&srv->trim, on_trim, PROCMEM_TRIM_EVERY_MS, PROCMEM_TRIM_EVERY_MS);
    uv_unref((uv_handle_t *)&srv->trim);
    uv_signal_init(loop, &srv->sigterm);
    uv_signal_init(loop, &srv->sigint);
    uv_signal_init(loop, &srv->sighup);
    srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv;
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    uv_signal_start(&srv->sighup, on_sighup, SIGHUP);
    *out = srv;
    return 0;
}

void server__finish_stop(server_t *srv)
{
    if (!srv->draining || srv->stopped || srv->conns != NULL)
        return;
    srv->stopped = 1;
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sighup, NULL);
    uv_close((uv_handle_t *)&srv->idle, NULL);
    uv_close((uv_handle_t *)&srv->grace, NULL);
    uv_close((uv_handle_t *)&srv->watchdog, NULL);
    uv_close((uv_handle_t *)&srv->trim, NULL);
    log_info("all connections closed");
}

void server_stop(server_t *srv)
{
    if (srv->draining)
        return;
    srv->draining = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    if (srv->engine != NULL)
        engine_shutdown(srv->engine); /* parked requests are answered 503 now */
    conn_t *next;
    for (conn_t *conn = srv->conns; conn != NULL; conn = next) {
        next = conn->next;
        int flushed = uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) == 0;
        if (!conn->busy || conn->stream || (conn->lingering && flushed))
            conn_close(conn); /* parked ones close once their 503 is out */
    }
    uv_timer_start(&srv->grace, on_grace, (uint64_t)srv->cfg->shutdown_grace_ms, 0);
    uv_unref((uv_handle_t *)&srv->grace);
    server__finish_stop(srv);
}

void server_free(server_t *srv)
{
    if (srv == NULL)
        return;
    server__streams_free(srv);
    strbuf_free(&srv->scratch_body);
    strbuf_free(&srv->scratch_reply);
    server_release(srv);
}

void server_set_engine(server_t *srv, engine_t *engine)
{
    srv->engine = engine;
}

engine_t *server_engine(server_t *srv)
{
    return srv->engine;
}

uint64_t server_connections(server_t *srv)
{
    return srv->nconns;
}

int server_draining(server_t *srv)
{
    return srv->draining;
}

/* ---- metrics ---- */

static size_t status_index(int status)
{
    for (size_t i = 0; i < NSTATUS - 1; i++)
        if (known_status[i] == status)
            return i;
    return NSTATUS - 1;
}

void server__count(server_t *srv, const route_t *r, int status)
{
    if (srv->counts != NULL)
        srv->counts[router_index(r) * NSTATUS + status_index(status)]++;
}

static int metrics_requests(server_t *srv, struct strbuf *out)
{
    jsonw_t w;
    jsonw_init(&w, out);
    jsonw_lit(&w, "# HELP semad_http_requests_total HTTP requests by route and status.\n"
                  "# TYPE semad_http_requests_total counter\n");
    for (size_t r = 0; r <= router_count(); r++) {
        const route_t *route = router_get(r);
        for (size_t s = 0; s < NSTATUS; s++) {
            uint64_t n = srv->counts[r * NSTATUS + s];
            if (n == 0)
                continue;
            jsonw_lit(&w, "semad_http_requests_total{method=\"");
            jsonw_raw_str(&w, route ? route->method : "");
            jsonw_lit(&w, "\",route=\"");
            jsonw_raw_str(&w, route ? route->pattern : "(none)");
            jsonw_lit(&w, "\",status=\"");
            if (s < NSTATUS - 1)
                jsonw_raw_u64(&w, (uint64_t)known_status[s]);
            else
                jsonw_lit(&w, "other");
            jsonw_lit(&w, "\"} ");
            jsonw_raw_u64(&w, n);
            jsonw_lit(&w, "\n");
        }
    }
    return jsonw_end(&w);
}

int server_metrics(server_t *srv, struct strbuf *out)
{
    jsonw_t w;
    int rc = metrics_requests(srv, out);
    if (rc != 0)
        return rc;
    jsonw_init(&w, out);
    jsonw_prom_series(&w, "semad_http_connections", "Open client connections.", "gauge",
                      srv->nconns);
    jsonw_prom_series(&w, "semad_http_connections_accepted_total", "Connections accepted.",
                      "counter", srv->accepted);
    jsonw_prom_series(&w, "semad_http_connections_rejected_total",
                      "Connections refused over --max-connections.", "counter", srv->rejected);
    jsonw_prom_series(&w, "semad_http_connections_rejected_per_ip_total",
                      "Connections refused over --max-connections-per-ip.", "counter",
                      srv->rejected_per_ip);
    jsonw_prom_series(&w, "semad_http_request_timeouts_total",
                      "Requests that did not arrive whole in time (408).", "counter",
                      srv->timeouts);
    jsonw_prom_series(&w, "semad_http_bad_requests_total", "Requests that could not be parsed.",
                      "counter", srv->parse_errors);
    jsonw_prom_series(&w, "semad_http_undelivered_grants_total",
                      "Grants whose client had left, released.", "counter", srv->undelivered);
    jsonw_prom_series(&w, "semad_event_stream_buffer_bytes",
                      "Unsent event-stream bytes held, all streams together (shared once).",
                      "gauge", srv->stream_mem);
    jsonw_prom_series(&w, "semad_event_streams_cut_total",
                      "Event streams cut because their client did not read.", "counter",
                      srv->streams_cut);
    if (srv->tls != NULL) {
        jsonw_prom_series(&w, "semad_tls_handshakes_total", "TLS handshakes completed.", "counter",
                          srv->tls_handshakes);
        jsonw_prom_series(&w, "semad_tls_handshake_failures_total",
                          "TLS handshakes that failed (a refused client certificate, a protocol "
                          "error) or did not end within --header-timeout.",
                          "counter", srv->tls_failed);
        jsonw_prom_series(&w, "semad_tls_plain_http_refused_total",
                          "Plain HTTP requests sent to the TLS port (answered 400).", "counter",
                          srv->tls_plain_refused);
    }
    rc = jsonw_end(&w);
    return rc != 0 ? rc : procmem_metrics(out);
}
