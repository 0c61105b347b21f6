/* SPDX-License-Identifier: MIT */
/* http.c - request parsing over llhttp with caps, and reply writing (see http.h). */
#include "http.h"

#include "jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sema/error.h"

enum { KEEP_BYTES = 4096 }; /* buffers above this are freed between requests */

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

static int on_url(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (p->header_bytes + len > p->limits->max_header_bytes)
        return fail(p, 414, "URI too long");
    p->header_bytes += len;
    if (strbuf_append(&p->req.url, at, len) != 0)
        return fail(p, 414, "URI too long");
    return 0;
}

/* Header names are matched case-insensitively; only a few matter to semad. */
static int on_header_field(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (count_header_bytes(p, len + 4) != 0)
        return HPE_USER;
    if (p->hstate == 1) { /* a new header begins */
        p->hname_len = 0;
        p->hname_long = 0;
        strbuf_reset(&p->hval);
        p->hstate = 0;
    }
    /* Only names starting like idempotency-key, expect or last-event-id can matter. */
    if (p->hname_len == 0 && len > 0 && (at[0] | 0x20) != 'i' && (at[0] | 0x20) != 'e' &&
        (at[0] | 0x20) != 'l')
        p->hname_long = 1;
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

static int interesting(const http_parser_t *p)
{
    return !p->hname_long &&
           (strcmp(p->hname, "idempotency-key") == 0 || strcmp(p->hname, "expect") == 0 ||
            strcmp(p->hname, "last-event-id") == 0);
}

static int on_header_value(llhttp_t *ll, const char *at, size_t len)
{
    http_parser_t *p = P(ll);
    if (count_header_bytes(p, len) != 0)
        return HPE_USER;
    p->hstate = 1;
    if (interesting(p) && strbuf_append(&p->hval, at, len) != 0)
        return fail(p, 400,
                    p->hname[0] == 'l' ? "Last-Event-ID longer than 255 bytes"
                                       : "Idempotency-Key longer than 255 bytes");
    return 0;
}

static int on_header_value_complete(llhttp_t *ll)
{
    http_parser_t *p = P(ll);
    p->hstate = 1;
    if (!interesting(p))
        return 0;
    const char *v = p->hval.len ? p->hval.data : "";
    if (strcmp(p->hname, "expect") == 0) {
        p->want_continue = strncasecmp(v, "100-continue", 12) == 0;
    } else if (p->hname[0] == 'l') {
        if (p->req.last_event_id != NULL)
            return fail(p, 400, "Last-Event-ID must be one value");
        p->req.last_event_id = strndup(v, p->hval.len);
        if (p->req.last_event_id == NULL)
            return fail(p, 503, "Out of memory");
    } else {
        if (p->hval.len == 0 || p->req.idem_key != NULL)
            return fail(p, 400, "Idempotency-Key must be one non-empty value");
        p->req.idem_key = strndup(v, p->hval.len);
        if (p->req.idem_key == NULL)
            return fail(p, 503, "Out of memory");
    }
    strbuf_reset(&p->hval);
    return 0;
}

static int on_headers_complete(llhttp_t *ll)
{
    http_parser_t *p = P(ll);
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
        s.on_url = on_url;
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
    p->hstate = 1;
}

void http_parser_free(http_parser_t *p)
{
    if (p == NULL)
        return;
    strbuf_free(&p->req.url);
    strbuf_free(&p->req.body);
    strbuf_free(&p->hval);
    free(p->req.idem_key);
    p->req.idem_key = NULL;
    free(p->req.last_event_id);
    p->req.last_event_id = NULL;
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
    free(p->req.idem_key);
    p->req.idem_key = NULL;
    free(p->req.last_event_id);
    p->req.last_event_id = NULL;
    p->req.keep_alive = 0;
    p->header_bytes = 0;
    p->hname_len = 0;
    p->hname_long = 0;
    p->hstate = 1;
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
    llhttp_errno_t err = llhttp_execute(&p->ll, data, len);
    if (err == HPE_OK)
        return HTTP_NEED_MORE;
    if ((err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) && p->complete) {
        const char *pos = llhttp_get_error_pos(&p->ll);
        *used = pos != NULL && pos >= data && pos <= data + len ? (size_t)(pos - data) : len;
        if (err == HPE_PAUSED_UPGRADE)
            p->req.keep_alive = 0; /* no protocol switch here: the exchange ends */
        return HTTP_MESSAGE;
    }
    if (p->error_status == 0) { /* not one of ours (callbacks set it before failing) */
        p->error_status = 400;
        p->error_reason = "Malformed HTTP request";
    }
    return HTTP_ERROR;
}

int http_parser_eof(http_parser_t *p)
{
    if (!p->started || p->complete)
        return HTTP_NEED_MORE;
    p->error_status = 400;
    p->error_reason = "Request cut short";
    return HTTP_ERROR;
}

int http_parser_started(const http_parser_t *p)
{
    return p->started;
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
    {400, "Bad Request"},
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
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
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
    if (status != 204 && status >= 200) {
        jsonw_raw(&w, "\r\nContent-Length: ", 18);
        jsonw_raw_u64(&w, len);
    }
    jsonw_raw_str(&w, keep_alive ? "\r\nConnection: keep-alive\r\n" : "\r\nConnection: close\r\n");
    if (extra != NULL)
        jsonw_raw_str(&w, extra);
    jsonw_raw(&w, "\r\n", 2);
    if (len > 0 && status != 204)
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

int http_pct_decode(const char *src, size_t len, int plus_space, char **out, size_t *out_len)
{
    char *d = malloc(len + 1);
    if (d == NULL)
        return SEMA_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
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
