/* SPDX-License-Identifier: MIT */
/* http.c - request parsing over llhttp with caps, and reply writing (see http.h). */
#include "http/http.h"

#include "common/jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sema/error.h"

enum {
    KEEP_BYTES = 4096,  /* buffers above this are freed between requests */
    HTTP_HOST_BIG = 255 /* http_parser_t.host_len: the Host is in host.big */
};

enum { HS_FIELD, HS_VALUE, HS_DONE }; /* http_parser_t.hstate */

/* The headers semad reads (http_parser_t.hkind); HK_UNSET until the name is known. */
enum {
    HK_UNSET,
    HK_OTHER,
    HK_IDEM,
    HK_EXPECT,
    HK_LEID,
    HK_HOST,
    HK_TE,
    HK_AUTH,
    HK_ORIGIN, /* Origin, Sec-Fetch-Site: the cross-site guard (access.c) */
    HK_FETCH_SITE,
    HK_INM /* If-None-Match: the dashboard's files (ui.c) */
};

static const char bad_line[] = "Malformed request line (one space between method, request "
                               "target and HTTP version)";

static http_parser_t *P(llhttp_t *ll)
{
    return (http_parser_t *)ll->data;
}

static int fail(http_parser_t *p, int status, const char *reason)
{
    p->error_status = status;
    p->error_reason = reason;
    return HPE_USER;
}

/* Where `at` (inside the bytes being fed) is in the connection's byte stream. */
static uint64_t pos(const http_parser_t *p, const char *at)
{
    return p->base + (uint64_t)(uintptr_t)at;
}

static int count_header_bytes(http_parser_t *p, size_t n)
{
    p->header_bytes += n;
    if (p->header_bytes > p->limits->max_header_bytes)
        return fail(p, 431, "Request header fields too large");
    return 0;
}

static int on_message_begin(llhttp_t *ll)
{
    P(ll)->started = 1;
    return 0;
}

/* The request line is method SP request-target SP HTTP-version (RFC 9112 §3) with single
 * spaces: llhttp skips extra ones, so the parts' offsets are checked here. */
static int on_method(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    p->mark = pos(p, at) + len + 1;
    return 0;
}

static int on_url(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (p->req.url.len == 0 && pos(p, at) != p->mark)
        return fail(p, 400, bad_line);
    p->mark = pos(p, at) + len + 6; /* " HTTP/" */
    if (p->header_bytes + len > p->limits->max_header_bytes)
        return fail(p, 414, "URI too long");
    p->header_bytes += len;
    if (strbuf_append(&p->req.url, at, len) != 0)
        return fail(p, 414, "URI too long");
    return 0;
}

static int on_version(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (pos(p, at) != p->mark) /* the first piece; later ones go on where it ended */
        return fail(p, 400, bad_line);
    p->mark += len;
    return 0;
}

/* "Host" in any case, in one piece: the one header every request has, so it skips the copy. */
static int is_host(const char *at, size_t len)
{
    return len == 4 && (at[0] | 0x20) == 'h' && (at[1] | 0x20) == 'o' && (at[2] | 0x20) == 's' &&
           (at[3] | 0x20) == 't';
}

/* Header names are matched case-insensitively; only a few matter to semad. */
static int on_header_field(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (count_header_bytes(p, len + 4) != 0)
        return HPE_USER;
    if (p->hstate != HS_FIELD) { /* a new header begins */
        p->hname_len = 0;
        p->hname_long = 0;
        p->hkind = HK_UNSET;
        strbuf_reset(&p->hval);
        p->hstate = HS_FIELD;
        if (is_host(at, len)) {
            p->hkind = HK_HOST;
            p->hname_long = 1;
            return 0;
        }
    } else if (p->hkind == HK_HOST && len > 0) {
        p->hkind = HK_OTHER; /* the name went on after "Host" in the next read */
    }
    /* Only names starting like idempotency-key, expect, last-event-id, host,
     * transfer-encoding, authorization, origin, sec-fetch-site or if-none-match can matter. */
    if (p->hname_len == 0 && len > 0) {
        char c = (char)(at[0] | 0x20);
        if (c != 'i' && c != 'e' && c != 'l' && c != 'h' && c != 't' && c != 'a' && c != 'o' &&
            c != 's')
            p->hname_long = 1;
    }
    if (p->hname_long)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if ((size_t)p->hname_len + 1 >= sizeof p->hname) {
            p->hname_long = 1;
            break;
        }
        char c = at[i];
        p->hname[p->hname_len++] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    p->hname[p->hname_len] = '\0';
    return 0;
}

static int classify(const http_parser_t *p)
{
    static const struct {
        const char *name;
        int kind;
    } known[] = {
        {"idempotency-key", HK_IDEM}, {"expect", HK_EXPECT},
        {"last-event-id", HK_LEID},   {"host", HK_HOST},
        {"transfer-encoding", HK_TE}, {"authorization", HK_AUTH},
        {"origin", HK_ORIGIN},        {"sec-fetch-site", HK_FETCH_SITE},
        {"if-none-match", HK_INM},
    };
    if (p->hname_long)
        return p->hkind != HK_UNSET ? p->hkind : HK_OTHER;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (p->hname[0] == known[i].name[0] && strcmp(p->hname, known[i].name) == 0)
            return known[i].kind;
    return HK_OTHER;
}

/* The Host value kept (*len bytes). */
static const char *host_of(const http_parser_t *p, size_t *len)
{
    int big = p->host_len == HTTP_HOST_BIG;
    *len = big ? p->host.big.len : p->host_len;
    return big ? p->host.big.data : p->host.small;
}

/* Keep `len` bytes of Host after the first `keep` bytes of the one kept. 0, or -1 past
 * --max-header-bytes (or out of memory). */
static int host_keep(http_parser_t *p, size_t keep, const char *s, size_t len)
{
    size_t need = keep + len;
    char *b;
    if (p->host_len != HTTP_HOST_BIG && need <= sizeof p->host.small) {
        memcpy(p->host.small + keep, s, len);
        p->host_len = (uint8_t)need;
        return 0;
    }
    if (need > p->limits->max_header_bytes || need > UINT16_MAX)
        return -1;
    if (p->host_len != HTTP_HOST_BIG) {
        if ((b = malloc(need)) == NULL)
            return -1;
        memcpy(b, p->host.small, keep);
        p->host.big.cap = (uint16_t)need;
    } else if (need > p->host.big.cap) {
        if ((b = realloc(p->host.big.data, need)) == NULL)
            return -1;
        p->host.big.cap = (uint16_t)need;
    } else {
        b = p->host.big.data;
    }
    memcpy(b + keep, s, len);
    p->host.big.data = b;
    p->host.big.len = (uint16_t)need;
    p->host_len = HTTP_HOST_BIG;
    return 0;
}

/* A Host value is RFC 3986 host [":" port] (RFC 9112 §3.2): unreserved, pct-encoded,
 * sub-delims, ':' and the brackets of an IP literal. A connection sends the same value each
 * time: the last valid one is kept (host_of), and a value equal to it needs no check. A
 * value that arrives in pieces (`first`: this is its first) is checked and kept piece by
 * piece. */
static int host_valid(http_parser_t *p, const char *s, size_t len, int first)
{
    static const char ok[128] = {
        ['!'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1, [')'] = 1, ['*'] = 1,
        ['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1, [':'] = 1,  [';'] = 1, ['='] = 1, ['['] = 1,
        [']'] = 1, ['_'] = 1, ['~'] = 1, ['0'] = 1, ['1'] = 1,  ['2'] = 1, ['3'] = 1, ['4'] = 1,
        ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,  ['A'] = 1, ['B'] = 1, ['C'] = 1,
        ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,  ['I'] = 1, ['J'] = 1, ['K'] = 1,
        ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,  ['Q'] = 1, ['R'] = 1, ['S'] = 1,
        ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,  ['Y'] = 1, ['Z'] = 1, ['a'] = 1,
        ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,  ['g'] = 1, ['h'] = 1, ['i'] = 1,
        ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,  ['o'] = 1, ['p'] = 1, ['q'] = 1,
        ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1,  ['w'] = 1, ['x'] = 1, ['y'] = 1,
        ['z'] = 1,
    };
    size_t kept;
    const char *h = host_of(p, &kept);
    if (first && len == kept && (len == 0 || memcmp(s, h, len) == 0))
        return 1;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 128 || !ok[(unsigned char)s[i]])
            return 0;
    return host_keep(p, first ? 0 : kept, s, len) == 0;
}

static const char *too_long(int kind)
{
    return kind == HK_LEID         ? "Last-Event-ID longer than 255 bytes"
           : kind == HK_EXPECT     ? "Expect longer than 255 bytes"
           : kind == HK_AUTH       ? "Authorization longer than 255 bytes"
           : kind == HK_ORIGIN     ? "Origin longer than 255 bytes"
           : kind == HK_FETCH_SITE ? "Sec-Fetch-Site longer than 255 bytes"
           : kind == HK_INM        ? "If-None-Match longer than 255 bytes"
                                   : "Idempotency-Key longer than 255 bytes";
}

static int on_header_value(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (count_header_bytes(p, len) != 0)
        return HPE_USER;
    uint64_t here = pos(p, at);
    int first = p->hstate == HS_FIELD;
    if (first) {
        p->hstate = HS_VALUE;
        p->hkind = (uint8_t)classify(p);
    } else if (here != p->mark) { /* the value goes on after a line break */
        return fail(p, 400, "Obsolete line folding in a header value");
    }
    p->mark = here + len;
    switch (p->hkind) {
    case HK_OTHER:
        return 0;
    case HK_HOST:
        return host_valid(p, at, len, first) ? 0 : fail(p, 400, "Invalid Host header");
    case HK_TE:
        if (strbuf_append(&p->hval, at, len) != 0)
            p->te |= 2; /* too long to be "chunked" */
        return 0;
    default:
        if (strbuf_append(&p->hval, at, len) != 0)
            return fail(p, 400, too_long(p->hkind));
        return 0;
    }
}

/* Sec-Fetch-Site's value (Fetch Metadata); a second one makes it HTTP_FETCH_OTHER. */
static void fetch_site(http_parser_t *p, const char *v, size_t n)
{
    static const char *const names[] = {"", "same-origin", "same-site", "cross-site", "none"};
    uint8_t site = HTTP_FETCH_OTHER;
    for (uint8_t i = 1; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && strncasecmp(v, names[i], n) == 0)
            site = i;
    p->req.browser->fetch_site =
        p->req.browser->fetch_site == HTTP_FETCH_ABSENT ? site : HTTP_FETCH_OTHER;
}

/* Origin, Sec-Fetch-Site or If-None-Match (p->hkind) into the request's browser headers:
 * 0, or fail()'s HPE_USER. */
static int browser_header(http_parser_t *p, const char *v)
{
    http_browser_t *b = p->req.browser;
    char **slot;
    if (b == NULL && (b = p->req.browser = calloc(1, sizeof *b)) == NULL)
        return fail(p, 503, "Out of memory");
    if (p->hkind == HK_FETCH_SITE) {
        fetch_site(p, v, p->hval.len);
        return 0;
    }
    slot = p->hkind == HK_ORIGIN ? &b->origin : &b->if_none_match;
    if (*slot != NULL && p->hkind == HK_ORIGIN)
        return fail(p, 400, "Origin must be one value");
    free(*slot); /* If-None-Match, a cache validator: the last one counts */
    if ((*slot = strndup(v, p->hval.len)) == NULL)
        return fail(p, 503, "Out of memory");
    return 0;
}

/* Transfer-Encoding: semad implements chunked alone (RFC 9112 §6.1, §7). */
static void transfer_coding(http_parser_t *p, const char *v, size_t n)
{
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    p->te |= 1;
    if (n != 7 || strncasecmp(v, "chunked", 7) != 0)
        p->te |= 2;
}

static int on_header_value_complete(llhttp_t *ll)
{
    http_parser_t *p = P(ll);
    int empty = p->hstate == HS_FIELD;
    if (empty)
        p->hkind = (uint8_t)classify(p);
    p->hstate = HS_DONE;
    if (p->hkind == HK_OTHER)
        return 0;
    if (p->hkind == HK_HOST) {
        if (empty)
            (void)host_keep(p, 0, "", 0);
        return ++p->hosts > 1 ? fail(p, 400, "More than one Host header") : 0;
    }
    const char *v = p->hval.len ? p->hval.data : "";
    switch (p->hkind) {
    case HK_TE:
        if (!(p->te & 2))
            transfer_coding(p, v, p->hval.len);
        break;
    case HK_EXPECT:
        p->want_continue = strncasecmp(v, "100-continue", 12) == 0;
        break;
    case HK_AUTH:
        if (p->req.authorization != NULL)
            return fail(p, 400, "Authorization must be one value");
        p->req.authorization = strndup(v, p->hval.len);
        if (p->req.authorization == NULL)
            return fail(p, 503, "Out of memory");
        break;
    case HK_ORIGIN:
    case HK_FETCH_SITE:
    case HK_INM:
        if (browser_header(p, v) != 0)
            return HPE_USER;
        break;
    case HK_LEID:
        if (p->req.last_event_id != NULL)
            return fail(p, 400, "Last-Event-ID must be one value");
        p->req.last_event_id = strndup(v, p->hval.len);
        if (p->req.last_event_id == NULL)
            return fail(p, 503, "Out of memory");
        break;
    default:
        if (p->hval.len == 0 || p->req.idem_key != NULL)
            return fail(p, 400, "Idempotency-Key must be one non-empty value");
        p->req.idem_key = strndup(v, p->hval.len);
        if (p->req.idem_key == NULL)
            return fail(p, 503, "Out of memory");
    }
    strbuf_reset(&p->hval);
    return 0;
}

/* An absolute-form target ("http://host:port/path?query", RFC 9112 §3.2.2) becomes the
 * origin form the routes read ("/path?query"). Returns 0, or -1 when it has no host. */
static int origin_form(struct strbuf *url)
{
    char *u = url->data;
    size_t skip;
    if (url->len > 7 && strncasecmp(u, "http://", 7) == 0)
        skip = 7;
    else if (url->len > 8 && strncasecmp(u, "https://", 8) == 0)
        skip = 8;
    else
        return 0; /* "*", or a form llhttp takes that no route has */
    size_t i = skip + strcspn(u + skip, "/?");
    if (i == skip)
        return -1;
    size_t rest = url->len - i;
    if (rest > 0 && u[i] == '/') {
        memmove(u, u + i, rest + 1);
        url->len = rest;
    } else { /* "http://host" or "http://host?query": the path is "/" */
        memmove(u + 1, u + i, rest + 1);
        u[0] = '/';
        url->len = rest + 1;
    }
    return 0;
}

static int on_headers_complete(llhttp_t *ll)
{
    http_parser_t *p = P(ll);
    if (p->req.url.len > 0 && p->req.url.data[0] != '/' && origin_form(&p->req.url) != 0)
        return fail(p, 400, "Malformed request target");
    if (ll->http_major != 1)
        return ll->http_major == 0 ? fail(p, 400, bad_line)
                                   : fail(p, 505, "HTTP version not supported");
    if (p->te != 0) {
        if (ll->http_minor == 0)
            return fail(p, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (!(ll->flags & F_CHUNKED))
            return fail(p, 400, "Transfer-Encoding must end with chunked");
        if (p->te & 2)
            return fail(p, 501, "Only the chunked transfer coding is implemented");
    }
    if (p->hosts == 0 && ll->http_minor != 0)
        return fail(p, 400, "Host header required");
    if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length > p->limits->max_body_bytes)
        return fail(p, 413, "Request body too large");
    if (p->want_continue == 1)
        p->want_continue = 2; /* the server owes a "100 Continue" now */
    return 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (p->req.body.len + len > p->limits->max_body_bytes ||
        strbuf_append(&p->req.body, at, len) != 0)
        return fail(p, 413, "Request body too large");
    return 0;
}

static int on_message_complete(llhttp_t *ll)
{
    http_parser_t *p = P(ll);
    p->req.method = (uint8_t)llhttp_get_method(ll);
    p->req.keep_alive = llhttp_should_keep_alive(ll);
    if (p->req.url.len == 0 && strbuf_append(&p->req.url, "/", 1) != 0)
        return fail(p, 503, "Out of memory");
    p->complete = 1;
    return HPE_PAUSED;
}

static const llhttp_settings_t *settings(void)
{
    static llhttp_settings_t s;
    static int ready;
    if (!ready) {
        llhttp_settings_init(&s);
        s.on_message_begin = on_message_begin;
        s.on_method = on_method;
        s.on_url = on_url;
        s.on_version = on_version;
        s.on_header_field = on_header_field;
        s.on_header_value = on_header_value;
        s.on_header_value_complete = on_header_value_complete;
        s.on_headers_complete = on_headers_complete;
        s.on_body = on_body;
        s.on_message_complete = on_message_complete;
        ready = 1;
    }
    return &s;
}

void http_parser_init(http_parser_t *p, const http_limits_t *limits)
{
    memset(p, 0, sizeof *p);
    p->limits = limits;
    llhttp_init(&p->ll, HTTP_REQUEST, settings());
    p->ll.data = p;
    strbuf_init(&p->req.url, limits->max_header_bytes + 1);
    strbuf_init(&p->req.body, limits->max_body_bytes + 1);
    strbuf_init(&p->hval, ENGINE_IDEM_KEY_MAX); /* content bytes; the NUL is extra */
    p->hstate = HS_DONE;
}

/* The owned header values of one request (most requests have none: no call then). */
static void free_values(http_request_t *r)
{
    if (r->idem_key != NULL || r->last_event_id != NULL || r->authorization != NULL ||
        r->browser != NULL) {
        free(r->idem_key);
        free(r->last_event_id);
        free(r->authorization);
        if (r->browser != NULL) {
            free(r->browser->origin);
            free(r->browser->if_none_match);
            free(r->browser);
        }
        r->idem_key = r->last_event_id = r->authorization = NULL;
        r->browser = NULL;
    }
}

void http_parser_free(http_parser_t *p)
{
    if (p == NULL)
        return;
    strbuf_free(&p->req.url);
    strbuf_free(&p->req.body);
    strbuf_free(&p->hval);
    if (p->host_len == HTTP_HOST_BIG)
        free(p->host.big.data);
    p->host_len = 0;
    free_values(&p->req);
}

static void shrink(struct strbuf *sb)
{
    if (sb->cap > KEEP_BYTES)
        strbuf_free(sb);
    else
        strbuf_reset(sb);
}

void http_parser_next(http_parser_t *p)
{
    shrink(&p->req.url);
    shrink(&p->req.body);
    strbuf_free(&p->hval);
    free_values(&p->req);
    p->req.keep_alive = 0;
    p->header_bytes = 0;
    p->hname_len = 0;
    p->hname_long = 0;
    p->hstate = HS_DONE;
    p->hosts = 0;
    p->te = 0;
    p->started = 0;
    p->complete = 0;
    p->want_continue = 0;
    if (llhttp_get_errno(&p->ll) == HPE_PAUSED)
        llhttp_resume(&p->ll);
}

int http_parser_feed(http_parser_t *p, const char *data, size_t len, size_t *used)
{
    *used = len;
    if (len == 0)
        return HTTP_NEED_MORE;
    p->base -= (uint64_t)(uintptr_t)data; /* see http.h */
    llhttp_errno_t err = llhttp_execute(&p->ll, data, len);
    if (err == HPE_OK) {
        p->base += (uint64_t)(uintptr_t)(data + len);
        return HTTP_NEED_MORE;
    }
    if ((err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) && p->complete) {
        const char *end = llhttp_get_error_pos(&p->ll);
        *used = end != NULL && end >= data && end <= data + len ? (size_t)(end - data) : len;
        p->base += (uint64_t)(uintptr_t)(data + *used);
        if (err == HPE_PAUSED_UPGRADE)
            p->req.keep_alive = 0; /* no protocol switch here: the exchange ends */
        return HTTP_MESSAGE;
    }
    p->base += (uint64_t)(uintptr_t)(data + len);
    if (p->error_status == 0) { /* not one of ours (callbacks set it before failing) */
        p->error_status = 400;
        p->error_reason = "Malformed HTTP request";
    }
    return HTTP_ERROR;
}

const char *http_request_host(const http_parser_t *p, size_t *len)
{
    const char *h = host_of(p, len);
    if (p->hosts > 0)
        return h;
    *len = 0;
    return NULL;
}

int http_parser_eof(http_parser_t *p)
{
    if (!p->started || p->complete)
        return HTTP_NEED_MORE;
    p->error_status = 400;
    p->error_reason = "Request cut short";
    return HTTP_ERROR;
}

static const struct {
    int status;
    const char *text;
} status_texts[] = {
    {100, "Continue"},
    {200, "OK"},
    {201, "Created"},
    {204, "No Content"},
    {303, "See Other"},
    {304, "Not Modified"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {505, "HTTP Version Not Supported"},
};

const char *http_status_text(int status)
{
    for (size_t i = 0; i < sizeof status_texts / sizeof status_texts[0]; i++)
        if (status_texts[i].status == status)
            return status_texts[i].text;
    return "Unknown";
}

const char *http_method_name(uint8_t method)
{
    return llhttp_method_name((llhttp_method_t)method);
}

int http_reply(struct strbuf *out, int status, const char *content_type, const char *body,
               size_t len, int keep_alive, const char *extra)
{
    /* No printf here: this runs once per reply and dominated the profile. */
    jsonw_t w;
    jsonw_init(&w, out);
    static const char json_ct[] = "application/json; charset=utf-8";
    static const char ok_json[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json; "
                                  "charset=utf-8\r\nContent-Length: ";
    static const char ka_end[] = "\r\nConnection: keep-alive\r\n\r\n";
    static const char no_content[] = "HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n";
    if (keep_alive && extra == NULL) { /* the hot replies, byte for byte as below */
        if (status == 200 && content_type != NULL && strcmp(content_type, json_ct) == 0) {
            jsonw_raw(&w, ok_json, sizeof ok_json - 1);
            jsonw_raw_u64(&w, len);
            jsonw_raw(&w, ka_end, sizeof ka_end - 1);
            if (len > 0)
                jsonw_raw(&w, body, len);
            return jsonw_end(&w);
        }
        if (status == 204 && content_type == NULL) {
            jsonw_raw(&w, no_content, sizeof no_content - 1);
            return jsonw_end(&w);
        }
    }
    jsonw_raw(&w, "HTTP/1.1 ", 9);
    jsonw_raw_u64(&w, (uint64_t)(status > 0 ? status : 500));
    jsonw_raw(&w, " ", 1);
    jsonw_raw_str(&w, http_status_text(status));
    if (content_type != NULL) {
        jsonw_raw(&w, "\r\nContent-Type: ", 16);
        jsonw_raw_str(&w, content_type);
    }
    if (status != 204 && status != 304 && status >= 200) { /* neither has content */
        jsonw_raw(&w, "\r\nContent-Length: ", 18);
        jsonw_raw_u64(&w, len);
    }
    jsonw_raw_str(&w, keep_alive ? "\r\nConnection: keep-alive\r\n" : "\r\nConnection: close\r\n");
    if (extra != NULL)
        jsonw_raw_str(&w, extra);
    jsonw_raw(&w, "\r\n", 2);
    if (len > 0 && status != 204 && status != 304)
        jsonw_raw(&w, body, len);
    return jsonw_end(&w);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte escaped at src[i] ('%' at i), or -1 for a bad escape or a NUL byte. */
static int escaped(const char *src, size_t len, size_t i)
{
    if (i + 2 >= len)
        return -1;
    int hi = hexval(src[i + 1]), lo = hexval(src[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
        return -1;
    return hi * 16 + lo;
}

/* Whether none of the 8 bytes in x is 0, '%', '+' or above 0x7f: (v - ones) & ~v has the
 * high bit set in some byte exactly when v has a zero byte. */
static int plain8(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    uint64_t pct = x ^ (ones * '%'), plus = x ^ (ones * '+');
    uint64_t z = ((x - ones) & ~x) | ((pct - ones) & ~pct) | ((plus - ones) & ~plus) | x;
    return (z & high) == 0;
}

int http_pct_decode(const char *src, size_t len, int plus_space, char **out, size_t *out_len)
{
    char *d = malloc(len + 1);
    if (d == NULL)
        return SEMA_ENOMEM;
    /* Names and ids are mostly plain ASCII: copied as they are, nothing else to check.
     * Eight bytes at a time while none of them needs a look. */
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t x;
        memcpy(&x, src + i, 8);
        if (!plain8(x))
            break;
        memcpy(d + i, &x, 8);
    }
    for (; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%' || c == '+' || c == '\0' || c >= 0x80)
            break;
        d[i] = (char)c;
    }
    if (i == len) {
        d[len] = '\0';
        *out = d;
        *out_len = len;
        return 0;
    }
    size_t n = i;
    for (; i < len; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            c = escaped(src, len, i);
            i += 2;
        } else if (plus_space && c == '+') {
            c = ' ';
        }
        if (c <= 0) {
            free(d);
            return SEMA_EINVAL;
        }
        d[n++] = (char)c;
    }
    d[n] = '\0';
    if (!jsonw_utf8_valid(d, n)) {
        free(d);
        return SEMA_EINVAL;
    }
    *out = d;
    *out_len = n;
    return 0;
}

int http_query_get(const char *query, const char *key, char **out)
{
    size_t klen = strlen(key);
    const char *q = query;
    while (q != NULL && *q != '\0') {
        const char *end = strchr(q, '&');
        size_t plen = end != NULL ? (size_t)(end - q) : strlen(q);
        if (plen > klen && strncmp(q, key, klen) == 0 && q[klen] == '=') {
            size_t n;
            return http_pct_decode(q + klen + 1, plen - klen - 1, 1, out, &n) == 0 ? 1
                                                                                   : SEMA_EINVAL;
        }
        if (plen == klen && strncmp(q, key, klen) == 0)
            return http_pct_decode("", 0, 1, out, &plen) == 0 ? 1 : SEMA_ENOMEM;
        q = end != NULL ? end + 1 : NULL;
    }
    return 0;
}
