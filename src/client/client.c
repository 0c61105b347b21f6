/* SPDX-License-Identifier: MIT */
/* client.c - the client handle, its pool of libcurl handles, one HTTP exchange, and the
 * mapping of replies to SEMA_E* codes. */
#include "client/client_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- small helpers ------------------------------------------------------------------- */

int64_t client_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int client_cancelled(const volatile int *cancel)
{
    return cancel != NULL && __atomic_load_n((const int *)cancel, __ATOMIC_ACQUIRE) != 0;
}

int client_sleep_ms(int64_t ms, const volatile int *cancel)
{
    int64_t end = client_now_ns() + ms * 1000000;

    while (!client_cancelled(cancel)) {
        int64_t left = end - client_now_ns();
        if (left <= 0)
            return 0;
        if (left > 20000000)
            left = 20000000;
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
    return 1;
}

void client_clear(sema_client_error_t *err)
{
    if (err != NULL)
        memset(err, 0, sizeof *err);
}

int client_fail(sema_client_error_t *err, int code, long status, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    err->http_status = (int)status;
    err->problem[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

/* 0 when `s` is UTF-8, SEMA_EINVAL when not, SEMA_ENOMEM when that could not be told:
 * jansson's own check, the one json_string() applies to every string the client sends. */
static int utf8_check(const char *s)
{
    json_t *j = json_string(s);
    int rc = 0;

    if (j == NULL) /* not UTF-8, or no memory: json_string_nocheck() fails for the latter only */
        rc = (j = json_string_nocheck(s)) != NULL ? SEMA_EINVAL : SEMA_ENOMEM;
    json_decref(j);
    return rc;
}

int client_check_text(const char *what, const char *s, sema_client_error_t *err)
{
    int rc = s != NULL ? utf8_check(s) : 0;

    if (rc == SEMA_EINVAL)
        return client_fail(err, rc, 0, "%s must be valid UTF-8", what);
    return rc != 0 ? client_fail(err, rc, 0, "out of memory") : 0;
}

int client_set_text(json_t *body, const char *key, const char *s, sema_client_error_t *err)
{
    int rc = client_check_text(key, s, err);

    if (rc == 0 && s != NULL && json_object_set_new(body, key, json_string(s)) != 0)
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    return rc;
}

int client_check_name(const char *name, sema_client_error_t *err)
{
    if (name == NULL || name[0] == '\0')
        return client_fail(err, SEMA_EINVAL, 0, "a name is required");
    if (strlen(name) >= SEMA_CLIENT_NAME_MAX)
        return client_fail(err, SEMA_ENAMETOOLONG, 0, "name longer than %d bytes",
                           SEMA_CLIENT_NAME_MAX - 1);
    return client_check_text("name", name, err);
}

int client_idem_key(const char *given, char *key, size_t len, sema_client_error_t *err)
{
    if (given == NULL)
        return client_random_key(key, len) != 0 ? client_fail(err, SEMA_EIO, 0, "getrandom failed")
                                                : 0;
    size_t n = strlen(given);
    int ctl = 0;
    for (size_t i = 0; i < n; i++)
        ctl |= (unsigned char)given[i] < 0x20 || given[i] == 0x7f;
    if (n == 0 || n >= len || ctl)
        return client_fail(err, SEMA_EINVAL, 0,
                           "idempotency key must be 1..%zu bytes, no control characters", len - 1);
    int rc = client_check_text("idempotency key", given, err);
    if (rc == 0)
        snprintf(key, len, "%s", given);
    return rc;
}

char *client_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *p = out;

    if (out == NULL)
        return NULL;
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        if ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ||
            *q == '-' || *q == '.' || *q == '_' || *q == '~') {
            *p++ = (char)*q;
        } else {
            *p++ = '%';
            *p++ = hex[*q >> 4];
            *p++ = hex[*q & 15];
        }
    }
    *p = '\0';
    return out;
}

char *client_path(const char *prefix, const char *name, const char *suffix)
{
    char *esc = client_escape(name);
    if (esc == NULL)
        return NULL;
    size_t len = strlen(prefix) + strlen(esc) + strlen(suffix) + 1;
    char *out = malloc(len);
    if (out != NULL)
        snprintf(out, len, "%s%s%s", prefix, esc, suffix);
    free(esc);
    return out;
}

int client_random_key(char *buf, size_t len)
{
    unsigned char raw[16];
    static const char hex[] = "0123456789abcdef";

    if (len < 2 * sizeof raw + 1 || getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return SEMA_EIO;
    for (size_t i = 0; i < sizeof raw; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[2 * sizeof raw] = '\0';
    return 0;
}

int client_json_u64(json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return SEMA_EPROTO;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int client_json_i64(json_t *obj, const char *key, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return SEMA_EPROTO;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

void sema_client_string_free(char *s)
{
    free(s);
}

/* ---- the handle ---------------------------------------------------------------------- */

static char *default_owner(void)
{
    char host[256] = "host", buf[300];

    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    snprintf(buf, sizeof buf, "%s:%ld", host, (long)getpid());
    return strdup(buf);
}

/* The Authorization header line for `token` (NULL or "": none). A token is one line of
 * visible ASCII: anything else would let it inject headers. */
static int auth_header(sema_client_t *c, const char *token)
{
    static const char pre[] = "Authorization: Bearer ";
    if (token == NULL || token[0] == '\0')
        return 0;
    size_t n = strlen(token);
    for (size_t i = 0; i < n; i++)
        if (token[i] <= ' ' || token[i] >= 0x7f)
            return SEMA_EINVAL;
    if ((c->auth_header = malloc(sizeof pre + n)) == NULL)
        return SEMA_ENOMEM;
    memcpy(c->auth_header, pre, sizeof pre - 1);
    memcpy(c->auth_header + sizeof pre - 1, token, n + 1);
    return 0;
}

/* A copy of `v`, else of $env; *fail set when a copy could not be made. */
static char *opt_path(const char *v, const char *env, int *fail)
{
    char *copy;
    if (v == NULL)
        v = getenv(env);
    if (v == NULL || *v == '\0')
        return NULL;
    if ((copy = strdup(v)) == NULL)
        *fail = 1;
    return copy;
}

/* 1 if `rest` (a URL after its scheme) names a host and holds no space or control byte: "not
 * a url" or "http://" is a mistake to report at once, not a host to try. */
static int url_text_ok(const char *rest)
{
    if (rest[0] == '\0' || rest[0] == '/')
        return 0;
    for (const unsigned char *p = (const unsigned char *)rest; *p != '\0'; p++)
        if (*p <= ' ' || *p == 0x7f)
            return 0;
    return 1;
}

/* The base URL to use: `url`, else $SEMA_SERVER, else SEMA_CLIENT_DEFAULT_URL (NULL and ""
 * mean not given); a bare "host:port" is http://, as for curl and the sema command. A new
 * string, or NULL with *rc set (SEMA_EINVAL for another scheme, no host, or
 * a space or control byte; SEMA_ENOMEM). */
static char *base_url(const char *url, int *rc)
{
    if (url == NULL || url[0] == '\0')
        url = getenv("SEMA_SERVER");
    if (url == NULL || url[0] == '\0')
        url = SEMA_CLIENT_DEFAULT_URL;
    const char *sep = strstr(url, "://");
    int bare = sep == NULL;
    if ((!bare && strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
        !url_text_ok(bare ? url : sep + 3)) {
        *rc = SEMA_EINVAL;
        return NULL;
    }
    size_t n = strlen(url) + sizeof "http://";
    char *copy = malloc(n);
    if (copy == NULL) {
        *rc = SEMA_ENOMEM;
        return NULL;
    }
    snprintf(copy, n, "%s%s", bare ? "http://" : "", url);
    for (size_t k = strlen(copy); k > 0 && copy[k - 1] == '/'; k--)
        copy[k - 1] = '\0';
    return copy;
}

/* 1 if `opts` gives a TLS file for an http:// `url`: unused there, and the token would go in
 * clear. $SEMA_CACERT and the others are defaults for https:// only, and do not count. */
static int tls_on_http(const char *url, const sema_client_opts_t *opts)
{
    const char *given[] = {opts->cacert, opts->cert, opts->key};
    if (url == NULL || strncmp(url, "http://", 7) != 0)
        return 0;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (given[i] != NULL && given[i][0] != '\0')
            return 1;
    return 0;
}

static void client_strings_free(sema_client_t *c)
{
    free(c->url);
    free(c->owner);
    free(c->cacert);
    free(c->cert);
    free(c->key);
    free(c->auth_header);
}

int sema_client_new(sema_client_t **out, const char *url, const sema_client_opts_t *opts)
{
    int fail = 0;
    sema_client_opts_t none = {0};
    sema_client_t *c;

    if (out == NULL)
        return SEMA_EINVAL;
    if (opts == NULL)
        opts = &none;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return SEMA_EIO;
    if ((c = calloc(1, sizeof *c)) == NULL)
        return SEMA_ENOMEM;
    int rc = 0;
    c->url = base_url(url, &rc);
    c->owner = opts->owner != NULL ? strdup(opts->owner) : default_owner();
    c->cacert = opt_path(opts->cacert, "SEMA_CACERT", &fail);
    c->cert = opt_path(opts->cert, "SEMA_CERT", &fail);
    c->key = opt_path(opts->key, "SEMA_CERT_KEY", &fail);
    if (rc == 0 && tls_on_http(c->url, opts))
        rc = SEMA_EINVAL;
    if (rc == 0 && c->owner != NULL) /* sent with every acquire: refused now, not each time */
        rc = client_check_text("owner", c->owner, NULL);
    if (rc == 0)
        rc = auth_header(c, opts->token != NULL ? opts->token : getenv("SEMA_TOKEN"));
    if (c->url == NULL || c->owner == NULL || fail || rc != 0) {
        client_strings_free(c);
        free(c);
        return rc != 0 ? rc : SEMA_ENOMEM;
    }
    c->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 3000;
    c->request_timeout_ms = opts->request_timeout_ms > 0 ? opts->request_timeout_ms : 30000;
    c->max_retries = opts->max_retries < 0   ? 0
                     : opts->max_retries > 0 ? opts->max_retries
                                             : INT_MAX;
    c->retry_ms = opts->retry_ms < 0    ? 0
                  : opts->retry_ms == 0 ? SEMA_CLIENT_RETRY_MS
                                        : opts->retry_ms;
    if (c->retry_ms > INT64_MAX / 2) /* "forever": the deadline stays representable */
        c->retry_ms = INT64_MAX / 2;
    c->max_idle = opts->max_idle > 0 ? opts->max_idle : 8;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

static void conn_free(client_conn_t *k)
{
    if (k == NULL)
        return;
    curl_multi_cleanup(k->multi);
    curl_easy_cleanup(k->easy);
    free(k);
}

void sema_client_free(sema_client_t *c)
{
    if (c == NULL)
        return;
    while (c->idle != NULL) {
        client_conn_t *k = c->idle;
        c->idle = k->next;
        conn_free(k);
    }
    pthread_mutex_destroy(&c->lock);
    client_strings_free(c);
    free(c);
}

const char *sema_client_url(const sema_client_t *c)
{
    return c->url;
}

/* Borrow a pooled connection, or make one. NULL on ENOMEM. */
static client_conn_t *conn_get(sema_client_t *c)
{
    pthread_mutex_lock(&c->lock);
    client_conn_t *k = c->idle;
    if (k != NULL) {
        c->idle = k->next;
        c->nidle--;
    }
    pthread_mutex_unlock(&c->lock);
    if (k != NULL)
        return k;
    if ((k = calloc(1, sizeof *k)) == NULL)
        return NULL;
    k->easy = curl_easy_init();
    k->multi = curl_multi_init();
    if (k->easy == NULL || k->multi == NULL) {
        conn_free(k);
        return NULL;
    }
    return k;
}

/* Return a connection to the pool; `broken` ones (cancelled mid-transfer) are closed. */
static void conn_put(sema_client_t *c, client_conn_t *k, int broken)
{
    if (!broken) {
        pthread_mutex_lock(&c->lock);
        if (c->nidle < c->max_idle) {
            k->next = c->idle;
            c->idle = k;
            c->nidle++;
            k = NULL;
        }
        pthread_mutex_unlock(&c->lock);
    }
    conn_free(k);
}

/* ---- one exchange -------------------------------------------------------------------- */

typedef struct {
    const client_req_t *req;
    client_resp_t *resp;
    size_t cap;
    int too_big;
    int stopped; /* the sink asked to stop */
    CURL *easy;
} xfer_t;

/* Stream to the sink only a successful reply; errors are buffered like any other. */
static int to_sink(xfer_t *x)
{
    long status = 0;

    if (x->req->sink == NULL)
        return 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    return status >= 200 && status <= 299;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    xfer_t *x = arg;
    size_t n = size * nmemb;

    if (to_sink(x)) {
        if (x->req->sink(x->req->sink_arg, data, n) != 0) {
            x->stopped = 1;
            return 0;
        }
        return n;
    }
    client_resp_t *r = x->resp;
    if (r->len + n + 1 > CLIENT_MAX_BODY) {
        x->too_big = 1;
        return 0;
    }
    if (r->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 1024;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *b = realloc(r->body, cap);
        if (b == NULL)
            return 0;
        r->body = b;
        x->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

/* A Retry-After value (delay-seconds or an HTTP-date, RFC 9110; not NUL-terminated) in ms
 * from now: 0 when it is past or unreadable. */
static int64_t retry_after_ms(const char *v, size_t len)
{
    char buf[64], *end;

    while (len > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
        len--;
    if (len == 0 || len >= sizeof buf)
        return 0;
    memcpy(buf, v, len);
    buf[len] = '\0';
    if (buf[0] >= '0' && buf[0] <= '9') {
        long long s = strtoll(buf, &end, 10);
        if (*end != '\0')
            return 0;
        return s < 86400 ? s * 1000 : 86400000; /* a day ends any client's retries anyway */
    }
    time_t at = curl_getdate(buf, NULL), now = time(NULL);
    return at > now ? (int64_t)(at - now) * 1000 : 0;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    xfer_t *x = arg;
    size_t n = size * nmemb;
    static const char ct[] = "content-type:", ra[] = "retry-after:";

    if (n > sizeof ct && strncasecmp(data, ct, sizeof ct - 1) == 0)
        x->resp->problem = strstr(data, "problem+json") != NULL;
    else if (n > sizeof ra && strncasecmp(data, ra, sizeof ra - 1) == 0)
        x->resp->retry_after_ms = retry_after_ms(data + sizeof ra - 1, n - (sizeof ra - 1));
    return n;
}

static int64_t transfer_timeout_ms(const sema_client_t *c, const client_req_t *req)
{
    int64_t t = req->wait_ms + c->request_timeout_ms;

    if (req->sink != NULL || req->wait_ms < 0)
        t = 0; /* streams and waits without end: no limit (TCP keep-alive still on) */
    if (req->max_ms > 0 && (t == 0 || req->max_ms < t))
        t = req->max_ms;
    return t;
}

static struct curl_slist *build_headers(const sema_client_t *c, const client_req_t *req, int *oom)
{
    struct curl_slist *h = NULL, *t;
    char line[200];

    *oom = 1;
    if ((t = curl_slist_append(h, "Accept: application/json")) == NULL)
        return NULL;
    h = t;
    if (req->body != NULL) {
        if ((t = curl_slist_append(h, "Content-Type: application/json")) == NULL)
            goto fail;
        h = t;
    }
    if (req->idem_key != NULL) {
        snprintf(line, sizeof line, "Idempotency-Key: %s", req->idem_key);
        if ((t = curl_slist_append(h, line)) == NULL)
            goto fail;
        h = t;
    }
    if (req->last_event_id != NULL) {
        snprintf(line, sizeof line, "Last-Event-ID: %s", req->last_event_id);
        if ((t = curl_slist_append(h, line)) == NULL)
            goto fail;
        h = t;
    }
    if (c->auth_header != NULL) {
        if ((t = curl_slist_append(h, c->auth_header)) == NULL)
            goto fail;
        h = t;
    }
    if ((t = curl_slist_append(h, "Expect:")) == NULL)
        goto fail;
    *oom = 0;
    return t;
fail:
    curl_slist_free_all(h);
    return NULL;
}

static void setup_easy(sema_client_t *c, CURL *e, const client_req_t *req, const char *url,
                       const char *body, struct curl_slist *hdrs, xfer_t *x, char *ebuf)
{
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    int64_t ct = c->connect_timeout_ms;
    if (req->max_ms > 0 && req->max_ms < ct)
        ct = req->max_ms;
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)ct);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)transfer_timeout_ms(c, req));
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "sema-client/" SEMA_VERSION_STRING);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
    if (c->cacert != NULL)
        curl_easy_setopt(e, CURLOPT_CAINFO, c->cacert);
    if (c->cert != NULL)
        curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert);
    if (c->key != NULL)
        curl_easy_setopt(e, CURLOPT_SSLKEY, c->key);
    if (strcmp(req->method, "GET") == 0)
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (body != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
}

/* Drive the transfer on the slot's multi handle, checking *cancel every 50 ms.
 * Returns the CURLcode, or -1 when cancelled. */
static int run_transfer(client_conn_t *k, const volatile int *cancel)
{
    int running = 1, rc = CURLE_OK;

    if (curl_multi_add_handle(k->multi, k->easy) != CURLM_OK)
        return CURLE_OUT_OF_MEMORY;
    for (;;) {
        if (curl_multi_perform(k->multi, &running) != CURLM_OK) {
            rc = CURLE_OUT_OF_MEMORY;
            break;
        }
        if (running == 0) {
            int left;
            CURLMsg *m = curl_multi_info_read(k->multi, &left);
            rc = (m != NULL && m->msg == CURLMSG_DONE) ? (int)m->data.result : CURLE_OK;
            break;
        }
        if (client_cancelled(cancel)) {
            rc = -1;
            break;
        }
        curl_multi_poll(k->multi, NULL, 0, cancel != NULL ? 50 : 1000, NULL);
    }
    curl_multi_remove_handle(k->multi, k->easy);
    return rc;
}

/* A failure of TLS, told apart from an unreachable server: the problem `tls_*` says which
 * (client.h), and nothing here is retried. -1 when `rc` is not one. */
static int tls_error(int rc, const char *why, const sema_client_t *c, sema_client_error_t *err)
{
    const char *problem = NULL;
    int code = SEMA_EPROTO;

    if (rc == CURLE_PEER_FAILED_VERIFICATION) {
        problem = "tls_untrusted";
        rc = client_fail(err, code, 0, "the TLS certificate of %s is not trusted: %s", c->url, why);
    } else if (rc == CURLE_SSL_CACERT_BADFILE) {
        problem = "tls_cacert";
        rc = client_fail(err, code, 0, "the CA file %s cannot be used: %s",
                         c->cacert ? c->cacert : "", why);
    } else if (rc == CURLE_SSL_CERTPROBLEM) {
        problem = "tls_client_certificate";
        rc = client_fail(err, code, 0, "the client certificate %s cannot be used: %s",
                         c->cert ? c->cert : "", why);
    } else if (strstr(why, " alert ") != NULL && c->cert == NULL) {
        problem = "tls_certificate_required"; /* the server's TLS alert, on the first read */
        rc = client_fail(err, SEMA_EACCES, 0,
                         "%s asked for a client certificate and none was given (TLS: %s)", c->url,
                         why);
    } else if (strstr(why, " alert ") != NULL) {
        problem = "tls_certificate_refused";
        rc = client_fail(err, SEMA_EACCES, 0, "%s refused the client certificate %s (TLS: %s)",
                         c->url, c->cert, why);
    } else {
        return -1;
    }
    if (err != NULL)
        snprintf(err->problem, sizeof err->problem, "%s", problem);
    return rc;
}

static int transport_error(int rc, const xfer_t *x, const char *ebuf, sema_client_t *c,
                           sema_client_error_t *err)
{
    const char *why = ebuf[0] ? ebuf : curl_easy_strerror(rc);
    int tls = strncmp(c->url, "https://", 8) == 0 ? tls_error(rc, why, c, err) : -1;
    if (tls != -1)
        return tls;
    if (x->too_big)
        return client_fail(err, SEMA_EPROTO, 0, "reply larger than %u bytes", CLIENT_MAX_BODY);
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
        return client_fail(err, SEMA_ENOHOST, 0, "cannot resolve the host of %s: %s", c->url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
        return client_fail(err, SEMA_ECONNREFUSED, 0, "cannot reach %s: %s", c->url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    case CURLE_OPERATION_TIMEDOUT:
        return client_fail(err, SEMA_ETIMEDOUT, 0, "no reply from %s in time: %s", c->url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    case CURLE_OUT_OF_MEMORY:
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    default:
        return client_fail(err, SEMA_EPROTO, 0, "talking to %s: %s", c->url,
                           ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
}

int client_exchange(sema_client_t *c, const client_req_t *req, client_resp_t *resp,
                    sema_client_error_t *err)
{
    char ebuf[CURL_ERROR_SIZE] = "", *body = NULL, *url;
    xfer_t x = {.req = req, .resp = resp};
    int oom, rc;

    memset(resp, 0, sizeof *resp);
    size_t ulen = strlen(c->url) + strlen(req->path) + 1;
    if ((url = malloc(ulen)) == NULL)
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    snprintf(url, ulen, "%s%s", c->url, req->path);
    if (req->body != NULL && (body = json_dumps(req->body, JSON_COMPACT)) == NULL) {
        free(url);
        return client_fail(err, SEMA_ENOMEM, 0, "out of memory");
    }
    struct curl_slist *hdrs = build_headers(c, req, &oom);
    client_conn_t *k = oom ? NULL : conn_get(c);
    if (k == NULL) {
        rc = client_fail(err, SEMA_ENOMEM, 0, "out of memory");
        goto out;
    }
    x.easy = k->easy;
    setup_easy(c, k->easy, req, url, body, hdrs, &x, ebuf);
    int crc = run_transfer(k, req->cancel);
    long status = 0;
    curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
    resp->status = status;
    conn_put(c, k, crc != CURLE_OK);
    if (crc == -1)
        rc = client_fail(err, SEMA_ECANCELED, 0, "cancelled");
    else if (crc == CURLE_OK || (x.stopped && crc == CURLE_WRITE_ERROR))
        rc = 0;
    else
        rc = transport_error(crc, &x, ebuf, c, err);
out:
    if (rc != 0)
        client_resp_free(resp);
    curl_slist_free_all(hdrs);
    free(body);
    free(url);
    return rc;
}

void client_resp_free(client_resp_t *resp)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
}

int client_retryable(int rc)
{
    /* A resolver can fail for a moment too; a name that does not exist costs the budget. */
    return rc == SEMA_ECONNREFUSED || rc == SEMA_ENOHOST;
}

/* ---- replies to codes ---------------------------------------------------------------- */

static const struct {
    const char *code;
    int err;
} problem_codes[] = {
    {"invalid_request", SEMA_EINVAL},
    {"name_too_long", SEMA_ENAMETOOLONG},
    {"not_found", SEMA_ENOENT},
    {"conflict", SEMA_EEXIST},
    {"unavailable", SEMA_EBUSY},
    {"timeout", SEMA_ETIMEDOUT},
    {"overflow", SEMA_EOVERFLOW},
    {"deleted", SEMA_ECANCELED},
    {"lease_expired", SEMA_EEXPIRED},
    {"lease_revoked", SEMA_EREVOKED},
    {"lease_released", SEMA_ESTALE},
    {"limit_reached", SEMA_ELIMIT},
    {"shutting_down", SEMA_ESHUTDOWN},
    {"store_unavailable", SEMA_EIO},
    {"out_of_memory", SEMA_ENOMEM},
    {"forbidden", SEMA_EACCES},
    {"unauthorized", SEMA_EACCES},
    {"idempotency_key_replaced", SEMA_EREPLACED},
    {"idempotency_key_mismatch", SEMA_EKEYMISMATCH},
    {"not_supported", SEMA_ENOTSUP},
    {"ticket_ended", SEMA_EGONE},
};

/* Statuses without a known problem code (and the legacy API's plain replies). */
static const struct {
    long status;
    int err;
} status_codes[] = {
    {303, SEMA_EEXIST}, {400, SEMA_EINVAL}, {401, SEMA_EACCES}, {403, SEMA_EACCES},
    {404, SEMA_ENOENT}, {409, SEMA_EBUSY},  {410, SEMA_ESTALE}, {413, SEMA_ELIMIT},
    {414, SEMA_ELIMIT}, {429, SEMA_ELIMIT}, {431, SEMA_ELIMIT}, {503, SEMA_EUNAVAIL},
};

static int code_from_status(long status)
{
    for (size_t i = 0; i < sizeof status_codes / sizeof status_codes[0]; i++)
        if (status_codes[i].status == status)
            return status_codes[i].err;
    return SEMA_EPROTO;
}

static void copy_text(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
    for (char *p = dst; *p; p++) /* one line: plain-text bodies end with newlines */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

int client_reply_error(const client_resp_t *resp, sema_client_error_t *err)
{
    int code = code_from_status(resp->status);
    json_t *doc = NULL;
    const char *pcode = NULL, *detail = NULL;

    if (resp->body != NULL && resp->len > 0)
        doc = json_loadb(resp->body, resp->len, 0, NULL);
    if (json_is_object(doc)) {
        pcode = json_string_value(json_object_get(doc, "code"));
        detail = json_string_value(json_object_get(doc, "detail"));
        if (detail == NULL)
            detail = json_string_value(json_object_get(doc, "title"));
    }
    for (size_t i = 0; pcode != NULL && i < sizeof problem_codes / sizeof problem_codes[0]; i++)
        if (strcmp(problem_codes[i].code, pcode) == 0)
            code = problem_codes[i].err;
    if (err != NULL) {
        err->code = code;
        err->http_status = (int)resp->status;
        copy_text(err->problem, sizeof err->problem, pcode ? pcode : "");
        if (detail != NULL)
            copy_text(err->message, sizeof err->message, detail);
        else if (doc == NULL && resp->body != NULL && resp->len > 0)
            copy_text(err->message, sizeof err->message, resp->body);
        else
            snprintf(err->message, sizeof err->message, "HTTP %ld: %s", resp->status,
                     sema_strerror(code));
    }
    json_decref(doc);
    return code;
}

/* The backoff before retry `n` (0: the first): 100 ms doubling, at most 1 s (the JS
 * client's cap), so that a long budget keeps asking about once a second. */
static int64_t backoff_ms(int n)
{
    return n < 4 ? (int64_t)100 << n : 1000;
}

int64_t client_retry_wait(const sema_client_t *c, client_retry_t *r, int64_t retry_after_ms)
{
    int64_t now_ms = client_now_ns() / 1000000;
    int64_t wait = backoff_ms(r->tries);

    if (r->until_ms == 0) /* the first failure starts the budget */
        r->until_ms = now_ms + c->retry_ms;
    if (retry_after_ms > wait)
        wait = retry_after_ms; /* never sooner than the server asks */
    if (r->tries >= c->max_retries || wait > r->until_ms - now_ms)
        return -1;
    r->tries++;
    return wait;
}

/* Requests that may run twice, so that a 503 (semad could not reach its store, or a proxy in
 * front of it is busy) is sent again like a network error: reads, and the end of a lease or
 * a ticket (ended twice, it answers 404 or 410). Never an acquire, a take or a legacy up. */
static int again_after_503(const client_req_t *req)
{
    return strcmp(req->method, "GET") == 0 || strcmp(req->method, "DELETE") == 0;
}

/* client_exchange(), sent again as client_call() says; *retries receives how many times. On
 * 0 resp holds the reply (a 503 too, once the retries are spent). */
static int exchange_retried(sema_client_t *c, const client_req_t *req, int retry,
                            client_resp_t *resp, int *retries, sema_client_error_t *err)
{
    client_retry_t r = {0};

    for (;;) {
        int rc = client_exchange(c, req, resp, err);
        *retries = r.tries;
        if (rc == 0 && (resp->status != 503 || !again_after_503(req)))
            return 0;
        if (rc != 0 && !client_retryable(rc))
            return rc;
        int64_t wait = retry ? client_retry_wait(c, &r, rc == 0 ? resp->retry_after_ms : 0) : -1;
        if (wait < 0)
            return rc;
        if (rc == 0)
            client_resp_free(resp);
        if (client_sleep_ms(wait, req->cancel))
            return client_fail(err, SEMA_ECANCELED, 0, "cancelled");
    }
}

int client_call(sema_client_t *c, const client_req_t *req, int retry, json_t **json,
                sema_client_error_t *err)
{
    client_resp_t resp;
    int retries = 0;

    if (json != NULL)
        *json = NULL;
    int rc = exchange_retried(c, req, retry, &resp, &retries, err);
    if (rc != 0)
        return rc;
    if (resp.status < 200 || resp.status > 299) {
        rc = client_reply_error(&resp, err);
        client_resp_free(&resp);
        if (retries > 0 && req->gone != 0 && rc == req->gone) { /* an earlier try got through */
            client_clear(err);
            rc = 0;
        }
        return rc;
    }
    if (json != NULL && resp.len > 0) {
        json_error_t jerr;
        *json = json_loadb(resp.body, resp.len, 0, &jerr);
        if (*json == NULL)
            rc = client_fail(err, SEMA_EPROTO, resp.status, "bad JSON from server: %s", jerr.text);
    }
    client_resp_free(&resp);
    if (rc == 0)
        client_clear(err);
    return rc;
}
