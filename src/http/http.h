/* SPDX-License-Identifier: MIT */
/* http.h - semad's small HTTP/1.1 interface over llhttp: incremental request parsing with
 * caps, keep-alive and pipelining (one request at a time), and reply writing. */
#ifndef SEMAD_HTTP_H
#define SEMAD_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <llhttp.h>

#include "common/strbuf.h"
#include "engine/engine_limits.h" /* ENGINE_IDEM_KEY_MAX caps the Idempotency-Key header */

typedef struct {
    size_t max_header_bytes; /* request line + headers; beyond: 431 (URL alone: 414) */
    size_t max_body_bytes;   /* beyond: 413 */
} http_limits_t;

/* Sec-Fetch-Site, as a browser sends it (http_browser_t.fetch_site). */
enum {
    HTTP_FETCH_ABSENT = 0,
    HTTP_FETCH_SAME_ORIGIN,
    HTTP_FETCH_SAME_SITE,
    HTTP_FETCH_CROSS_SITE,
    HTTP_FETCH_NONE, /* the user's own navigation (typed, a bookmark) */
    HTTP_FETCH_OTHER /* an unknown value, or more than one */
};

/* What a browser sends beside its request: allocated for a request with any of these
 * headers, so a client's request (and a parked one) costs nothing for them. */
typedef struct {
    char *origin;        /* Origin (owned) or NULL */
    char *if_none_match; /* If-None-Match (owned) or NULL */
    uint8_t fetch_site;  /* Sec-Fetch-Site: HTTP_FETCH_* */
} http_browser_t;

/* One parsed request; valid between HTTP_MESSAGE and http_parser_next(). */
typedef struct {
    uint8_t method;          /* llhttp_method_t */
    int keep_alive;          /* the connection may carry another request */
    struct strbuf url;       /* the raw request target, NUL-terminated */
    struct strbuf body;      /* the body bytes (NUL-terminated when non-empty) */
    char *idem_key;          /* Idempotency-Key header value (owned) or NULL */
    char *last_event_id;     /* Last-Event-ID header value (owned) or NULL */
    char *authorization;     /* Authorization header value (owned) or NULL */
    http_browser_t *browser; /* Origin, Sec-Fetch-Site, If-None-Match (owned), or NULL */
} http_request_t;

static inline const char *http_origin(const http_request_t *r)
{
    return r->browser != NULL ? r->browser->origin : NULL;
}

static inline int http_fetch_site(const http_request_t *r)
{
    return r->browser != NULL ? r->browser->fetch_site : HTTP_FETCH_ABSENT;
}

static inline const char *http_if_none_match(const http_request_t *r)
{
    return r->browser != NULL ? r->browser->if_none_match : NULL;
}

typedef struct http_parser {
    llhttp_t ll;
    http_request_t req;
    const http_limits_t *limits; /* borrowed */
    size_t header_bytes;         /* bytes of the request line and headers so far */
    struct strbuf hval;          /* value of the header being collected */
    /* Offsets in the connection's byte stream, for the checks llhttp leaves to us. Between
     * feeds `base` is the offset of the next byte; during one it is that minus the address
     * of the bytes fed, so a byte's offset is base + its address (http.c pos()). `mark` is
     * where the next piece must start: the request target one SP after the method, the
     * HTTP-version after " HTTP/", and the rest of a header value (else it was folded). */
    uint64_t base, mark;
    /* The last Host value found valid: a connection sends the same one each time, so it is
     * checked and copied once; host.small (host_len bytes), or, once one did not fit
     * (host_len == HTTP_HOST_BIG in http.c), host.big (malloc'd): most connections allocate
     * nothing for it. */
    union {
        char small[16];
        struct {
            char *data;
            uint16_t cap, len;
        } big;
    } host;
    char hname[18];           /* name of the header being read (lower case, truncated) */
    uint8_t host_len;         /* see host */
    uint8_t hname_len;        /* bytes in hname */
    uint8_t hname_long;       /* the name did not fit in hname: uninteresting */
    uint8_t hstate;           /* 0 field, 1 value, 2 value complete */
    uint8_t hkind;            /* what the header is (HK_* in http.c) */
    uint8_t hosts;            /* Host header lines seen */
    uint8_t te;               /* Transfer-Encoding: 1 seen, 2 not exactly "chunked" */
    uint8_t started;          /* bytes of a message have been seen */
    uint8_t complete;         /* a full message is waiting in req */
    uint8_t want_continue;    /* Expect: 100-continue: 1 seen, 2 answer due, 3 answered */
    int error_status;         /* HTTP status to answer after HTTP_ERROR */
    const char *error_reason; /* static text for that answer */
} http_parser_t;

enum { HTTP_NEED_MORE = 0, HTTP_MESSAGE = 1, HTTP_ERROR = -1 };

/* Prepare a parser for requests; `limits` is borrowed and must outlive it. */
void http_parser_init(http_parser_t *p, const http_limits_t *limits);

/* Free what the parser holds. NULL is fine. */
void http_parser_free(http_parser_t *p);

/* Feed bytes. Returns HTTP_NEED_MORE (all `len` bytes used), HTTP_MESSAGE (a full request
 * is in p->req; *used bytes were consumed, the rest belongs to later requests) or
 * HTTP_ERROR (p->error_status and p->error_reason say what to answer; the connection
 * must close). After HTTP_MESSAGE, call http_parser_next() before feeding again. */
int http_parser_feed(http_parser_t *p, const char *data, size_t len, size_t *used);

/* The client closed its side: returns HTTP_ERROR if a request was cut short, else
 * HTTP_NEED_MORE. */
int http_parser_eof(http_parser_t *p);

/* Drop the finished request and get ready for the next one. Keeps allocations small:
 * buffers above a few KiB are freed. */
void http_parser_next(http_parser_t *p);

/* The current request's Host value (*len bytes, not NUL-terminated), or NULL when it has
 * none (HTTP/1.0). Valid until http_parser_next(). */
const char *http_request_host(const http_parser_t *p, size_t *len);

/* True once any byte of the current request has arrived (for the header timeout). */
static inline int http_parser_started(const http_parser_t *p)
{
    return p->started;
}

/* The reason phrase for `status` ("Unknown" if not known). */
const char *http_status_text(int status);

/* The method's name ("GET"). */
const char *http_method_name(uint8_t method);

/* Append a whole response to `out`: status line, Content-Type (if not NULL),
 * Content-Length, Connection, `extra` header lines (each ending in CRLF, may be NULL),
 * then the body. Returns 0 or SEMA_ENOMEM. */
int http_reply(struct strbuf *out, int status, const char *content_type, const char *body,
               size_t len, int keep_alive, const char *extra);

/* Percent-decode `len` bytes of `src` exactly once into a new NUL-terminated string
 * (*out, free with free(), *out_len bytes). With `plus_space`, '+' becomes ' ' (query
 * strings). Returns 0, SEMA_EINVAL (bad escape, a NUL byte, or invalid UTF-8) or
 * SEMA_ENOMEM. */
int http_pct_decode(const char *src, size_t len, int plus_space, char **out, size_t *out_len);

/* Find query parameter `key` in `query` (the text after '?', may be NULL) and decode it
 * into *out (new string). Returns 1 found, 0 absent, or SEMA_EINVAL/SEMA_ENOMEM. */
int http_query_get(const char *query, const char *key, char **out);

#endif /* SEMAD_HTTP_H */
