/* SPDX-License-Identifier: MIT */
/* config.h - semad's settings: command-line flags, each also a SEMA_* environment variable. */
#ifndef SEMAD_CONFIG_H
#define SEMAD_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "store/store.h"

typedef struct {
    const char *listen;               /* HOST:PORT (port 0 = any free port) */
    const char *data_dir;             /* store directory */
    store_durability_t durability;    /* strict, relaxed or none */
    uint64_t max_connections;         /* open client connections; beyond: 503 and close */
    uint64_t max_connections_per_ip;  /* the same from one address (IPv6: one /64); 0 = no cap */
    uint64_t max_header_bytes;        /* request line + headers; beyond: 431 */
    uint64_t max_body_bytes;          /* request body; beyond: 413 */
    uint64_t max_pipeline_bytes;      /* bytes buffered behind a parked request */
    uint64_t max_stream_bytes;        /* unsent bytes one event stream holds before it is cut */
    uint64_t max_stream_buffer_bytes; /* the same for all streams together (slowest cut) */
    int64_t header_timeout_ms;        /* a request must arrive whole within this of its first
                                         byte (and a TLS handshake end within it) */
    int64_t idle_timeout_ms;          /* an idle keep-alive connection closes after this */
    int64_t shutdown_grace_ms;        /* on SIGTERM: longest wait for in-flight replies */
    int64_t sse_heartbeat_ms;         /* comment line on idle event streams */
    int log_requests;                 /* one log line per request */
    const char *auth_file;            /* --auth: the token file, or NULL (no tokens) */
    int insecure;                     /* listen beyond loopback without --auth */
    const char *tls_cert;             /* PEM certificate chain: serve HTTPS (with tls_key) */
    const char *tls_key;              /* PEM private key of tls_cert */
    const char *tls_client_ca;        /* PEM CA certificates: require client certificates */
    const char *check_dir;            /* --check DIR: verify a store and exit */
    int print_routes;                 /* --routes: print the route table and exit */
    int help, version;
    engine_config_t engine; /* caps and defaults handed to the engine */
} semad_config_t;

/* Fill `cfg` with the defaults (those `semad --help` shows). */
void config_default(semad_config_t *cfg);

/* Apply SEMA_* environment variables, then the flags in argv (flags win), and check that
 * they go together (--tls-cert with --tls-key). Strings point into argv/environ. Returns 0,
 * or SEMA_EINVAL with a message naming the flag in errbuf. */
int config_parse(semad_config_t *cfg, int argc, char **argv, char *errbuf, size_t errlen);

/* Print the usage text with every flag, its variable and default to `out`. */
void config_usage(FILE *out);

/* Parse a duration "250", "250ms", "10s", "5m", "1h" into milliseconds. Returns 0 or
 * SEMA_EINVAL. */
int config_parse_ms(const char *s, int64_t *out);

/* Parse a non-negative integer (decimal, at most 2^63). Returns 0 or SEMA_EINVAL. */
int config_parse_u64(const char *s, uint64_t *out);

#endif /* SEMAD_CONFIG_H */
