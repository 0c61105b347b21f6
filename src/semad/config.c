/* SPDX-License-Identifier: MIT */
/* config.c - flags and SEMA_* environment variables, described by one table. */
#include "semad/config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/parse.h"
#include "common/suggest.h"
#include "sema/error.h"

typedef enum {
    OPT_STR,
    OPT_U64,
    OPT_SIZE,
    OPT_MS,
    OPT_DURABILITY,
    OPT_LOG_LEVEL,
    OPT_FLAG
} opt_type_t;

typedef struct {
    const char *flag; /* without the leading "--" */
    const char *env;
    opt_type_t type;
    size_t offset;
    const char *help;
} option_t;

#define F(field) offsetof(semad_config_t, field)
static const option_t options[] = {
    {"listen", "SEMA_LISTEN", OPT_STR, F(http.listen),
     "address to listen on, HOST:PORT (a name resolves; no HOST: every interface; port 0: any)"},
    {"engine", "SEMA_ENGINE", OPT_STR, F(engine.backend),
     "where the state lives: embedded (in memory, with the store in --data), or Redis: "
     "redis://[USER:PASSWORD@]HOST[:PORT][/DB] (port 6379 by default) or "
     "redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER (26379) (docs/redis.md)"},
    {"data", "SEMA_DATA", OPT_STR, F(data_dir), "directory of the durable store"},
    {"durability", "SEMA_DURABILITY", OPT_DURABILITY, F(durability), "strict, relaxed or none"},
    {"max-connections", "SEMA_MAX_CONNECTIONS", OPT_U64, F(http.max_connections),
     "open connections; more get 503 and are closed"},
    {"max-connections-per-ip", "SEMA_MAX_CONNECTIONS_PER_IP", OPT_U64,
     F(http.max_connections_per_ip),
     "open connections from one address (IPv6: one /64); more get 503 and are closed (0: no cap)"},
    {"max-header-bytes", "SEMA_MAX_HEADER_BYTES", OPT_U64, F(http.max_header_bytes),
     "request line + headers; more: 431"},
    {"max-body-bytes", "SEMA_MAX_BODY_BYTES", OPT_U64, F(http.max_body_bytes),
     "request body; more: 413"},
    {"max-pipeline-bytes", "SEMA_MAX_PIPELINE_BYTES", OPT_U64, F(http.max_pipeline_bytes),
     "bytes buffered behind a parked request; more: the connection closes"},
    {"max-stream-bytes", "SEMA_MAX_STREAM_BYTES", OPT_U64, F(http.max_stream_bytes),
     "unsent bytes one event stream may hold before it is cut"},
    {"max-stream-buffer-bytes", "SEMA_MAX_STREAM_BUFFER_BYTES", OPT_U64,
     F(http.max_stream_buffer_bytes),
     "unsent event-stream bytes of all streams together; past it the slowest are cut"},
    {"max-name-bytes", "SEMA_MAX_NAME_BYTES", OPT_SIZE, F(engine.max_name_len),
     "semaphore name / lock key length"},
    {"max-semaphores", "SEMA_MAX_SEMAPHORES", OPT_U64, F(engine.max_semaphores),
     "semaphores in all (0: unlimited)"},
    {"max-waiters-per-semaphore", "SEMA_MAX_WAITERS_PER_SEMAPHORE", OPT_U64,
     F(engine.max_waiters_per_sem), "parked requests on one semaphore"},
    {"max-waiters", "SEMA_MAX_WAITERS", OPT_U64, F(engine.max_waiters_total),
     "parked requests in all"},
    {"max-locks", "SEMA_MAX_LOCKS", OPT_U64, F(engine.max_locks), "lock keys held or awaited"},
    {"max-uncommitted", "SEMA_MAX_UNCOMMITTED", OPT_U64, F(engine.embedded.max_uncommitted),
     "changes recorded during a running commit before every reply waits for it"},
    {"lock-readers", "SEMA_LOCK_READERS", OPT_U64, F(engine.lock_readers),
     "keyed locks: most concurrent shared holders"},
    {"default-ttl", "SEMA_DEFAULT_TTL", OPT_MS, F(engine.default_ttl_ms),
     "lease ttl when a request gives none"},
    {"max-ttl", "SEMA_MAX_TTL", OPT_MS, F(engine.max_ttl_ms), "longest lease ttl"},
    {"ticket-keepalive", "SEMA_TICKET_KEEPALIVE", OPT_MS, F(engine.ticket_keepalive_ms),
     "a ticket unread this long is dropped (when it asks for no keepalive_ms)"},
    {"max-ticket-keepalive", "SEMA_MAX_TICKET_KEEPALIVE", OPT_MS, F(engine.max_ticket_keepalive_ms),
     "longest keepalive_ms a ticket may ask for"},
    {"ticket-poll", "SEMA_TICKET_POLL", OPT_MS, F(engine.ticket_poll_ms),
     "poll_after_ms of tickets; least time between two position updates to one watcher"},
    {"metrics-max-semaphores", "SEMA_METRICS_MAX_SEMAPHORES", OPT_U64,
     F(engine.metrics_max_semaphores), "per-semaphore metric series"},
    {"metrics-max-tenants", "SEMA_METRICS_MAX_TENANTS", OPT_U64, F(engine.metrics_max_tenants),
     "per-tenant metric series of each of those semaphores (the rest: tenant=\"_other\")"},
    {"header-timeout", "SEMA_HEADER_TIMEOUT", OPT_MS, F(http.header_timeout_ms),
     "a request must arrive whole within this of its first byte (408), a TLS handshake end "
     "within it"},
    {"idle-timeout", "SEMA_IDLE_TIMEOUT", OPT_MS, F(http.idle_timeout_ms),
     "idle keep-alive connections close after this"},
    {"shutdown-grace", "SEMA_SHUTDOWN_GRACE", OPT_MS, F(http.shutdown_grace_ms),
     "on SIGTERM, longest wait for in-flight replies"},
    {"sse-heartbeat", "SEMA_SSE_HEARTBEAT", OPT_MS, F(http.sse_heartbeat_ms),
     "comment line on idle event streams"},
    {"log-requests", "SEMA_LOG_REQUESTS", OPT_FLAG, F(http.log_requests),
     "log one line per request"},
    {"log-level", "SEMA_LOG_LEVEL", OPT_LOG_LEVEL, F(log_level),
     "the least important lines logged: debug, info, warn or error"},
    {"auth", "SEMA_AUTH", OPT_STR, F(http.auth_file),
     "token file: every route but /healthz needs a bearer token with the right for it "
     "(re-read on SIGHUP; docs/security.md)"},
    {"insecure", "SEMA_INSECURE", OPT_FLAG, F(http.insecure),
     "allow listening beyond loopback without --auth (anyone who reaches the port may do "
     "anything)"},
    {"tls-cert", "SEMA_TLS_CERT", OPT_STR, F(http.tls_cert),
     "PEM certificate (chain) file: serve HTTPS only, TLS 1.2+ (SIGHUP reloads it)"},
    {"tls-key", "SEMA_TLS_KEY", OPT_STR, F(http.tls_key), "PEM private key file of --tls-cert"},
    {"tls-client-ca", "SEMA_TLS_CLIENT_CA", OPT_STR, F(http.tls_client_ca),
     "PEM CA file: require client certificates signed by these CAs"},
    {"no-ui", "SEMA_NO_UI", OPT_FLAG, F(http.no_ui), "serve no dashboard at /ui"},
    {"ui-read-only", "SEMA_UI_READ_ONLY", OPT_FLAG, F(http.ui_read_only),
     "the dashboard at /ui only shows: no revoke, resize or delete, and browsers may not change "
     "state (docs/dashboard.md)"},
    {"check", "SEMA_CHECK", OPT_STR, F(check_dir), "verify the store in DIR and exit"},
    {"routes", NULL, OPT_FLAG, F(print_routes), "print the route table and exit"},
    {"help", NULL, OPT_FLAG, F(help), "show this help and exit"},
    {"version", NULL, OPT_FLAG, F(version), "show the version and exit"},
};
#undef F
enum { NOPTIONS = sizeof options / sizeof options[0] };

void config_default(semad_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->http.listen = "127.0.0.1:7070";
    cfg->data_dir = "./sema-data";
    cfg->durability = STORE_STRICT;
    cfg->log_level = LOG_INFO;
    cfg->http.max_connections = 16384;
    cfg->http.max_connections_per_ip = 1024;
    cfg->http.max_header_bytes = 8192;
    cfg->http.max_body_bytes = 65536;
    cfg->http.max_pipeline_bytes = 65536;
    cfg->http.max_stream_bytes = 1 << 20;
    cfg->http.max_stream_buffer_bytes = 64 << 20;
    cfg->http.header_timeout_ms = 10000;
    cfg->http.idle_timeout_ms = 60000;
    cfg->http.shutdown_grace_ms = 5000;
    cfg->http.sse_heartbeat_ms = 15000;
    engine_config_default(&cfg->engine);
    cfg->engine.backend = "embedded";
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

static int set_log_level(const char *v, log_level_t *l)
{
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++) {
        if (strcmp(v, level_names[i]) == 0) {
            *l = (log_level_t)i;
            return 0;
        }
    }
    return SEMA_EINVAL;
}

static int set_durability(const char *v, store_durability_t *d)
{
    static const char *const names[] = {"strict", "relaxed", "none"};
    static const store_durability_t vals[] = {STORE_STRICT, STORE_RELAXED, STORE_NONE};
    for (size_t i = 0; i < 3; i++) {
        if (strcmp(v, names[i]) == 0) {
            *d = vals[i];
            return 0;
        }
    }
    return SEMA_EINVAL;
}

static int apply(semad_config_t *cfg, const option_t *o, const char *v)
{
    char *field = (char *)cfg + o->offset;
    uint64_t u;
    switch (o->type) {
    case OPT_STR:
        if (v == NULL || *v == '\0')
            return SEMA_EINVAL;
        *(const char **)field = v;
        return 0;
    case OPT_U64:
        return parse_u64(v, (uint64_t *)field);
    case OPT_SIZE:
        if (parse_u64(v, &u) != 0)
            return SEMA_EINVAL;
        *(size_t *)field = (size_t)u;
        return 0;
    case OPT_MS:
        return parse_ms(v, (int64_t *)field);
    case OPT_DURABILITY:
        return set_durability(v, (store_durability_t *)field);
    case OPT_LOG_LEVEL:
        return v == NULL ? SEMA_EINVAL : set_log_level(v, (log_level_t *)field);
    case OPT_FLAG:
        if (v == NULL || strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
            *(int *)field = 1;
        else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0)
            *(int *)field = 0;
        else
            return SEMA_EINVAL;
        return 0;
    }
    return SEMA_EINVAL;
}

static const option_t *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (strlen(options[i].flag) == len && strncmp(options[i].flag, name, len) == 0)
            return &options[i];
    return NULL;
}

/* What a flag of this type accepts, for "bad value" errors ("" for a free string). */
static const char *accepted(opt_type_t type)
{
    switch (type) {
    case OPT_U64:
    case OPT_SIZE:
        return " (a whole number)";
    case OPT_MS:
        return " (a duration with its unit: 500ms, 10s, 5m, 1h)";
    case OPT_DURABILITY:
        return " (one of strict, relaxed, none)";
    case OPT_LOG_LEVEL:
        return " (one of debug, info, warn, error)";
    case OPT_FLAG:
        return " (one of 1, true, 0, false)";
    case OPT_STR:
        return " (not empty)";
    }
    return "";
}

static int parse_env(semad_config_t *cfg, char *errbuf, size_t errlen)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *v = options[i].env ? getenv(options[i].env) : NULL;
        if (v != NULL && apply(cfg, &options[i], v) != 0) {
            snprintf(errbuf, errlen, "bad value for %s: '%s'%s", options[i].env, v,
                     accepted(options[i].type));
            return SEMA_EINVAL;
        }
    }
    return 0;
}

/* "unknown flag '--lsten' (did you mean --listen? see --help)" */
static int unknown_flag(const char *arg, const char *name, size_t len, char *errbuf, size_t errlen)
{
    char typed[64];
    suggest_t s;

    snprintf(typed, sizeof typed, "%.*s", (int)(len < sizeof typed ? len : sizeof typed - 1), name);
    suggest_init(&s, typed);
    for (size_t i = 0; i < NOPTIONS; i++)
        suggest_offer(&s, options[i].flag);
    const char *best = suggest_best(&s);
    static const char *const address_flags[] = {"port", "host", "bind", "address", "addr"};
    for (size_t i = 0; i < sizeof address_flags / sizeof address_flags[0]; i++)
        if (strcmp(typed, address_flags[i]) == 0) {
            snprintf(errbuf, errlen,
                     "unknown flag '%s': semad takes the address and the port together, "
                     "--listen HOST:PORT (default 127.0.0.1:7070; e.g. --listen 127.0.0.1:7071)",
                     arg);
            return SEMA_EINVAL;
        }
    if (best != NULL)
        snprintf(errbuf, errlen, "unknown flag '%s' (did you mean --%s? see --help)", arg, best);
    else
        snprintf(errbuf, errlen, "unknown flag '%s' (see --help)", arg);
    return SEMA_EINVAL;
}

static int check_together(const semad_config_t *cfg, char *errbuf, size_t errlen)
{
    if ((cfg->http.tls_cert == NULL) != (cfg->http.tls_key == NULL)) {
        snprintf(errbuf, errlen, "--tls-cert and --tls-key go together");
        return SEMA_EINVAL;
    }
    if (cfg->http.tls_client_ca != NULL && cfg->http.tls_cert == NULL) {
        snprintf(errbuf, errlen, "--tls-client-ca needs --tls-cert and --tls-key");
        return SEMA_EINVAL;
    }
    return 0;
}

int config_parse(semad_config_t *cfg, int argc, char **argv, char *errbuf, size_t errlen)
{
    if (parse_env(cfg, errbuf, errlen) != 0)
        return SEMA_EINVAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0) { /* as sema -h */
            cfg->help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(errbuf, errlen, "unexpected argument '%s' (see --help)", a);
            return SEMA_EINVAL;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const option_t *o = find_flag(name, len);
        if (o == NULL)
            return unknown_flag(a, name, len, errbuf, errlen);
        const char *v = eq ? eq + 1 : NULL;
        if (v == NULL && o->type != OPT_FLAG) {
            if (i + 1 >= argc) {
                snprintf(errbuf, errlen, "flag --%s needs a value", o->flag);
                return SEMA_EINVAL;
            }
            v = argv[++i];
        }
        if (apply(cfg, o, v) != 0) {
            snprintf(errbuf, errlen, "bad value for --%s: '%s'%s", o->flag, v ? v : "",
                     accepted(o->type));
            return SEMA_EINVAL;
        }
    }
    return check_together(cfg, errbuf, errlen);
}

static void print_default(FILE *out, const semad_config_t *d, const option_t *o)
{
    const char *field = (const char *)d + o->offset;
    static const char *const dur[] = {"strict", "relaxed", "none"};
    switch (o->type) {
    case OPT_STR:
        if (*(const char *const *)field != NULL)
            fprintf(out, "; default %s", *(const char *const *)field);
        break;
    case OPT_U64:
        fprintf(out, "; default %llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case OPT_SIZE:
        fprintf(out, "; default %zu", *(const size_t *)field);
        break;
    case OPT_MS: { /* as the docs write it: 24h, 60s, 500ms */
        long long ms = (long long)*(const int64_t *)field;
        if (ms > 0 && ms % 3600000 == 0)
            fprintf(out, "; default %lldh", ms / 3600000);
        else if (ms > 0 && ms % 1000 == 0)
            fprintf(out, "; default %llds", ms / 1000);
        else
            fprintf(out, "; default %lldms", ms);
        break;
    }
    case OPT_DURABILITY:
        fprintf(out, "; default %s", dur[*(const store_durability_t *)field]);
        break;
    case OPT_LOG_LEVEL:
        fprintf(out, "; default %s", level_names[*(const log_level_t *)field]);
        break;
    case OPT_FLAG:
        break;
    }
}

void config_usage(FILE *out)
{
    semad_config_t d;
    config_default(&d);
    fputs("usage: semad [--flag VALUE]...\n"
          "semad serves semaphores, leases and keyed locks over HTTP/1.1 (JSON).\n"
          "Durations take a unit: ms, s, m or h (500ms, 10s, 5m, 1h). Every flag is also an "
          "environment\n"
          "variable (flags win).\n\n",
          out);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const option_t *o = &options[i];
        fprintf(out, "  --%-28s %s", o->flag, o->help);
        print_default(out, &d, o);
        if (o->env != NULL)
            fprintf(out, " [%s]", o->env);
        fputc('\n', out);
    }
    fputs("\nDurability (--durability; details and figures in docs/durability.md):\n"
          "  strict   every change (create, delete, resize, grant, release, renewal,\n"
          "           revoke, expiry a client can see, legacy up/down) is in the journal\n"
          "           and synced to disk (fdatasync) before any reply that shows it; one\n"
          "           sync per group commit, shared by the requests that came in meanwhile.\n"
          "           Nothing acknowledged is lost, even by a power cut.\n"
          "  relaxed  the same journal, written without a sync; the database is synced at\n"
          "           checkpoints, about every second. A crash of semad loses no\n"
          "           acknowledged grant, but a release or renewal answered just before it\n"
          "           can be undone (the lease then holds until its ttl); an OS crash or\n"
          "           power cut can lose the last second of changes, grants included.\n"
          "  none     state only in memory: a restart forgets every semaphore and lease.\n"
          "With --engine redis://..., Redis keeps the state and its durability is Redis's\n"
          "(docs/durability.md, \"On Redis\").\n",
          out);
}
