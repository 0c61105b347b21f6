# SPDX-License-Identifier: MIT
"""test_hostile.py - the catalog of hostile and malformed requests, sent as raw bytes to the
real semad: each gets the status RFC 9112 asks for, the connection closes where the framing
is in doubt (request smuggling's building blocks), and semad stays healthy after each
(GET /healthz 200 on a new connection). The classes: the request line, headers, message
framing (smuggling), bodies that are too big or too deep and every wrong JSON type, odd names
and queries, semantic abuse (what cannot be), and Authorization abuse against a semad run
with --auth; at least 100 of them answered 4xx. Also the conformance cases around them: HEAD,
absolute-form targets, the escaped 404 and bodies with a NUL byte. The sanitizer builds run
the same catalog (every integration test runs against the build's own semad)."""
import hashlib
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

CLOSE, KEEP = True, False


def chunked(method, path, te, chunks, version=b"HTTP/1.1", host=b"Host: t\r\n"):
    return (b"%s %s %s\r\n%sTransfer-Encoding: %s\r\n\r\n%s"
            % (method, path, version, host, te, chunks))


def with_body(method, path, body):
    return (b"%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s"
            % (method, path, len(body), body))


# (name, request bytes, status, the connection closes after the reply, body check or None)
REQUEST_LINE = [
    ("two spaces before the target", b"GET  /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("two spaces before the version", b"GET /healthz  HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("a TAB between the parts", b"GET\t/healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("a raw TAB in the path", b"GET /heal\thz HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("a raw TAB in a name", b"GET /v1/semaphores/a\tb HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("a raw space in the path", b"GET /a b HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("raw non-ASCII in the path", "GET /v1/semaphores/é HTTP/1.1\r\nHost: t\r\n\r\n".encode(),
     400, CLOSE),
    ("a NUL in the path", b"GET /heal\x00thz HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("no HTTP version (HTTP/0.9)", b"GET /healthz\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("HTTP/2.0 in a request line", b"GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n", 505, CLOSE),
    ("HTTP/1.2", b"GET /healthz HTTP/1.2\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("a space before the CRLF", b"GET /healthz HTTP/1.1 \r\nHost: t\r\n\r\n", 400, CLOSE),
    ("LF line endings", b"GET /healthz HTTP/1.1\nHost: t\n\n", 400, CLOSE),
    ("a bare CR in the request line", b"GET /healthz HTTP/1.1\rHost: t\r\n\r\n", 400, CLOSE),
    ("not HTTP at all", b"THIS IS NOT HTTP\r\n\r\n", 400, CLOSE),
]

HEADERS = [
    ("a space before the colon", b"GET /healthz HTTP/1.1\r\nHost : t\r\n\r\n", 400, CLOSE),
    ("a TAB before the colon", b"GET /healthz HTTP/1.1\r\nHost\t: t\r\n\r\n", 400, CLOSE),
    ("no Host in HTTP/1.1", b"GET /healthz HTTP/1.1\r\n\r\n", 400, CLOSE),
    ("no Host, v1 path", b"GET /v1/semaphores HTTP/1.1\r\n\r\n", 400, CLOSE),
    ("two Host headers", b"GET /healthz HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n", 400, CLOSE),
    ("a Host with a space", b"GET /healthz HTTP/1.1\r\nHost: t u\r\n\r\n", 400, CLOSE),
    ("a Host with userinfo", b"GET /healthz HTTP/1.1\r\nHost: me@t\r\n\r\n", 400, CLOSE),
    ("a Host with a path", b"GET /healthz HTTP/1.1\r\nHost: t/x\r\n\r\n", 400, CLOSE),
    ("obs-fold (a folded header)", b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: b\r\n c\r\n\r\n",
     400, CLOSE),
    ("a folded Host", b"GET /healthz HTTP/1.1\r\nHost: t\r\n u\r\n\r\n", 400, CLOSE),
    ("a NUL in a header name", b"GET /healthz HTTP/1.1\r\nHost: t\r\nX\x00A: b\r\n\r\n", 400,
     CLOSE),
    ("a control byte in a value", b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n",
     400, CLOSE),
    ("a bare CR ending the headers", b"GET /healthz HTTP/1.1\r\nHost: t\r\n\rX", 400, CLOSE),
    ("two Idempotency-Keys",
     b"GET /healthz HTTP/1.1\r\nHost: t\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n\r\n",
     400, CLOSE),
    ("HTTP/1.0 without Host (allowed)", b"GET /healthz HTTP/1.0\r\n\r\n", 200, CLOSE),
    ("an empty Host (allowed)", b"GET /healthz HTTP/1.1\r\nHost:\r\n\r\n", 200, KEEP),
    ("Host with a port and IPv6 (allowed)", b"GET /healthz HTTP/1.1\r\nHost: [::1]:7070\r\n\r\n",
     200, KEEP),
]

BODY = b'{"capacity":1}'
CHUNK = b"e\r\n" + BODY + b"\r\n0\r\n\r\n"
FRAMING = [
    ("Transfer-Encoding: gzip, chunked",
     chunked(b"PUT", b"/v1/semaphores/f", b"gzip, chunked", CHUNK), 501, CLOSE),
    ("Transfer-Encoding gzip, then chunked",
     b"PUT /v1/semaphores/f HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n" + CHUNK, 501, CLOSE),
    ("Transfer-Encoding: chunked, gzip",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked, gzip", CHUNK), 400, CLOSE),
    ("Transfer-Encoding: gzip", chunked(b"PUT", b"/v1/semaphores/f", b"gzip", BODY), 400, CLOSE),
    ("Transfer-Encoding: chunked twice",
     b"PUT /v1/semaphores/f HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n" + CHUNK, 400, CLOSE),
    ("Transfer-Encoding: xchunked", chunked(b"PUT", b"/v1/semaphores/f", b"xchunked", CHUNK),
     400, CLOSE),
    ("Transfer-Encoding in HTTP/1.0",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked", CHUNK, b"HTTP/1.0", b""), 400, CLOSE),
    ("Transfer-Encoding and Content-Length",
     b"PUT /v1/semaphores/f HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n" + CHUNK, 400, CLOSE),
    ("two Content-Lengths",
     b"PUT /v1/semaphores/f HTTP/1.1\r\nHost: t\r\nContent-Length: 14\r\n"
     b"Content-Length: 14\r\n\r\n" + BODY, 400, CLOSE),
    ("a signed Content-Length",
     b"PUT /v1/semaphores/f HTTP/1.1\r\nHost: t\r\nContent-Length: +14\r\n\r\n" + BODY, 400,
     CLOSE),
    ("chunk data not followed by CRLF",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked", b"e\r\n" + BODY + b"XX0\r\n\r\n"), 400,
     CLOSE),
    ("chunk data followed by LF alone",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked", b"e\r\n" + BODY + b"\n0\r\n\r\n"), 400,
     CLOSE),
    ("a bare CR after the chunk size",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked", b"e\rX" + BODY + b"\r\n0\r\n\r\n"), 400,
     CLOSE),
    ("a space after the chunk size",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked", b"e \r\n" + BODY + b"\r\n0\r\n\r\n"), 400,
     CLOSE),
    ("chunked, well formed (allowed)",
     chunked(b"PUT", b"/v1/semaphores/f", b"chunked", CHUNK), 201, KEEP),
    ("Transfer-Encoding: Chunked with OWS (allowed)",
     chunked(b"PUT", b"/v1/semaphores/g", b"Chunked ", CHUNK), 201, KEEP),
]

# Requests whose framing is fine: answered on a connection that stays open.
CONTENT = [
    ("a NUL in a v1 body (acquire)",
     with_body(b"POST", b"/v1/semaphores/c/acquire", b'{"weight":1\x00}'), 400, KEEP),
    ("a NUL in a v1 body (PUT)", with_body(b"PUT", b"/v1/semaphores/c", b'{"capacity":1\x00}'),
     400, KEEP),
    ("a NUL after a v1 body", with_body(b"PUT", b"/v1/semaphores/c", b'{"capacity":1}\x00'),
     400, KEEP),
    ("a NUL in a legacy body",
     with_body(b"POST", b"/semaphore", b'{"name":"n","value":1\x00}'), 400, KEEP),
    ("a NUL in a legacy up", with_body(b"POST", b"/semaphore/up", b'{"name":"c"\x00}'), 400,
     KEEP),
    ("markup in a 404 path", b"GET /<script>alert('x&y\")</script> HTTP/1.1\r\nHost: t\r\n\r\n",
     404, KEEP),
    ("absolute-form target", b"GET http://t/healthz HTTP/1.1\r\nHost: t\r\n\r\n", 200, KEEP),
    ("absolute-form v1 target",
     b"GET http://t:7070/v1/semaphores/c HTTP/1.1\r\nHost: t:7070\r\n\r\n", 200, KEEP),
    ("absolute-form without Host", b"GET http://t/healthz HTTP/1.1\r\n\r\n", 400, CLOSE),
    ("HEAD /healthz", b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 200, KEEP),
    ("HEAD /v1/semaphores/c", b"HEAD /v1/semaphores/c HTTP/1.1\r\nHost: t\r\n\r\n", 200, KEEP),
    ("HEAD /metrics", b"HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n", 200, KEEP),
    ("HEAD of an event stream", b"HEAD /v1/semaphores/c/events HTTP/1.1\r\nHost: t\r\n\r\n", 405,
     KEEP),
]


def v1(method, path, body=None, extra=b""):
    """A well-framed request with an optional JSON body (bytes or str) and header lines."""
    if body is None:
        return b"%s %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (method, path, extra)
    if isinstance(body, str):
        body = body.encode()
    return (b"%s %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n%s"
            % (method, path, extra, len(body), body))


ACQ = b"/v1/semaphores/c/acquire"
# Bodies that are too big or too deep, and every wrong JSON type semad must refuse with 400.
BODIES_AND_TYPES = [
    ("a body over --max-body-bytes", v1(b"PUT", b"/v1/semaphores/big", b"{" + b" " * 70000 + b"}"),
     413, CLOSE),
    ("a Content-Length over the cap, no body sent",
     b"PUT /v1/semaphores/big HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n",
     413, CLOSE),
    ("JSON nested 10000 deep", v1(b"PUT", b"/v1/semaphores/deep", "[" * 10000 + "]" * 10000),
     400, KEEP),
    ("an object nested 5000 deep", v1(b"POST", ACQ, '{"a":' * 5000 + "1" + "}" * 5000), 400,
     KEEP),
    ("6000 keys, then a bad weight",
     v1(b"POST", ACQ, "{" + ",".join('"k%d":1' % i for i in range(6000)) + ',"weight":"x"}'),
     400, KEEP),
    ("a JSON array body", v1(b"PUT", b"/v1/semaphores/t", "[1]"), 400, KEEP),
    ("a JSON string body", v1(b"PUT", b"/v1/semaphores/t", '"x"'), 400, KEEP),
    ("a JSON number body", v1(b"PUT", b"/v1/semaphores/t", "5"), 400, KEEP),
    ("a JSON null body", v1(b"PUT", b"/v1/semaphores/t", "null"), 400, KEEP),
    ("truncated JSON", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":'), 400, KEEP),
    ("two JSON documents", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":1}{}'), 400, KEEP),
    ("invalid UTF-8 in a string", v1(b"POST", ACQ, b'{"owner":"\xc3\x28"}'), 400, KEEP),
    ("a lone surrogate escape", v1(b"POST", ACQ, '{"owner":"\\ud800"}'), 400, KEEP),
    ("capacity as a string", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":"5"}'), 400, KEEP),
    ("capacity as an array", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":[5]}'), 400, KEEP),
    ("capacity true", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":true}'), 400, KEEP),
    ("capacity null", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":null}'), 400, KEEP),
    ("capacity 1.5", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":1.5}'), 400, KEEP),
    ("capacity -1", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":-1}'), 400, KEEP),
    ("capacity 0", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":0}'), 400, KEEP),
    ("capacity 2^53+1", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":9007199254740993}'), 400,
     KEEP),
    ("capacity 1e400", v1(b"PUT", b"/v1/semaphores/t", '{"capacity":1e400}'), 400, KEEP),
    ("no capacity", v1(b"PUT", b"/v1/semaphores/t", "{}"), 400, KEEP),
    ("weight as a string", v1(b"POST", ACQ, '{"weight":"1"}'), 400, KEEP),
    ("weight 0", v1(b"POST", ACQ, '{"weight":0}'), 400, KEEP),
    ("weight above the capacity", v1(b"POST", ACQ, '{"weight":6}'), 400, KEEP),
    ("weight -1", v1(b"POST", ACQ, '{"weight":-1}'), 400, KEEP),
    ("timeout_ms as a string", v1(b"POST", ACQ, '{"timeout_ms":"10"}'), 400, KEEP),
    ("timeout_ms 1.5", v1(b"POST", ACQ, '{"timeout_ms":1.5}'), 400, KEEP),
    ("ttl_ms as an object", v1(b"POST", ACQ, '{"ttl_ms":{}}'), 400, KEEP),
    ("ttl_ms negative", v1(b"POST", ACQ, '{"ttl_ms":-5}'), 400, KEEP),
    ("ttl_ms above --max-ttl", v1(b"POST", ACQ, '{"ttl_ms":999999999999}'), 400, KEEP),
    ("owner as a number", v1(b"POST", ACQ, '{"owner":5}'), 400, KEEP),
    ("owner of 2000 bytes", v1(b"POST", ACQ, '{"owner":"%s"}' % ("o" * 2000)), 400, KEEP),
    ("weight nested in an object", v1(b"POST", ACQ, '{"weight":{"weight":1}}'), 400, KEEP),
    ("a duplicate key", v1(b"POST", ACQ, '{"weight":1,"weight":2}'), 400, KEEP),
    ("lock mode unknown", v1(b"POST", b"/v1/locks/k/acquire", '{"mode":"both"}'), 400, KEEP),
    ("lock mode as a number", v1(b"POST", b"/v1/locks/k/acquire", '{"mode":1}'), 400, KEEP),
    ("renew ttl_ms as a string", v1(b"POST", b"/v1/leases/AAAA/renew", '{"ttl_ms":"1"}'), 400,
     KEEP),
    ("legacy value as a string", v1(b"POST", b"/semaphore", '{"name":"x","value":"1"}'), 400,
     KEEP),
    ("legacy name as a number", v1(b"POST", b"/semaphore", '{"name":5,"value":1}'), 400, KEEP),
    ("legacy up without a name", v1(b"POST", b"/semaphore/up", "{}"), 400, KEEP),
    ("legacy down with a null name", v1(b"POST", b"/semaphore/down", '{"name":null}'), 400,
     KEEP),
]

# Names and queries a client should not be able to slip through.
NAMES = [
    ("%00 in a name", v1(b"GET", b"/v1/semaphores/a%00b"), 400, KEEP),
    ("invalid UTF-8 in a name", v1(b"GET", b"/v1/semaphores/%C3%28"), 400, KEEP),
    ("a bad percent escape", v1(b"GET", b"/v1/semaphores/a%zz"), 400, KEEP),
    ("a truncated percent escape", v1(b"GET", b"/v1/semaphores/a%4"), 400, KEEP),
    ("a name over --max-name-bytes", v1(b"GET", b"/v1/semaphores/" + b"n" * 1100), 400, KEEP),
    ("an encoded overlong UTF-8 slash", v1(b"GET", b"/v1/semaphores/%C0%AF"), 400, KEEP),
    ("a raw slash makes another path", v1(b"GET", b"/v1/semaphores/a/b"), 404, KEEP),
    ("dot segments", v1(b"GET", b"/v1/semaphores/../healthz"), 404, KEEP),
    ("an empty name", v1(b"PUT", b"/v1/semaphores/", '{"capacity":1}'), 404, KEEP),
    ("a lease id of 300 bytes", v1(b"GET", b"/v1/leases/" + b"x" * 300), 404, KEEP),
    ("a lock key with %00", v1(b"GET", b"/v1/locks/k%00"), 400, KEEP),
    ("list limit 0", v1(b"GET", b"/v1/semaphores?limit=0"), 400, KEEP),
    ("list limit 10^30", v1(b"GET", b"/v1/semaphores?limit=" + b"9" * 30), 400, KEEP),
    ("list limit -1", v1(b"GET", b"/v1/semaphores?limit=-1"), 400, KEEP),
    ("list prefix with %00", v1(b"GET", b"/v1/semaphores?prefix=a%00"), 400, KEEP),
    ("a legacy name of 2000 bytes",
     v1(b"POST", b"/semaphore", '{"name":"%s","value":1}' % ("n" * 2000)), 400, KEEP),
    ("an unknown method", b"BREW /v1/semaphores/c HTTP/1.1\r\nHost: t\r\n\r\n", 400, CLOSE),
    ("a method not allowed", v1(b"PATCH", b"/v1/leases/x", "{}"), 405, KEEP),
]

# Requests that are well formed but ask for what cannot be.
SEMANTIC = [
    ("release a lease that never was", v1(b"DELETE", b"/v1/leases/AAAAAAAAAAAAAAAAAAAAAAAA"),
     404, KEEP),
    ("renew a lease that never was",
     v1(b"POST", b"/v1/leases/AAAAAAAAAAAAAAAAAAAAAAAA/renew", "{}"), 404, KEEP),
    ("revoke a lease that never was",
     v1(b"POST", b"/v1/leases/AAAAAAAAAAAAAAAAAAAAAAAA/revoke"), 404, KEEP),
    ("acquire on no semaphore", v1(b"POST", b"/v1/semaphores/nosuch/acquire", "{}"), 404, KEEP),
    ("wait-idle on no semaphore", v1(b"POST", b"/v1/semaphores/nosuch/wait-idle", "{}"), 404,
     KEEP),
    ("events of no semaphore", v1(b"GET", b"/v1/semaphores/nosuch/events"), 404, KEEP),
    ("delete no semaphore", v1(b"DELETE", b"/v1/semaphores/nosuch"), 404, KEEP),
    ("resize no semaphore", v1(b"PATCH", b"/v1/semaphores/nosuch", '{"capacity":2}'), 404,
     KEEP),
    ("create again with another capacity", v1(b"PUT", b"/v1/semaphores/c", '{"capacity":9}'),
     409, KEEP),
    ("a try on a full semaphore", v1(b"POST", b"/v1/semaphores/full/acquire",
                                     '{"timeout_ms":0}'), 409, KEEP),
    ("a lock nobody holds", v1(b"GET", b"/v1/locks/nobody"), 404, KEEP),
    ("legacy down at 0", v1(b"POST", b"/semaphore/down", '{"name":"Z"}'), 409, KEEP),
    ("legacy value of no semaphore", v1(b"GET", b"/semaphore/value/nosuch"), 404, KEEP),
    ("legacy create of a v1 name", v1(b"POST", b"/semaphore", '{"name":"c","value":1}'), 303,
     KEEP),
    ("an Idempotency-Key reused with another weight",
     v1(b"POST", b"/v1/semaphores/c/acquire", '{"weight":2,"timeout_ms":0}',
        b"Idempotency-Key: k-used\r\n"), 409, KEEP),
    ("an Idempotency-Key of 300 bytes",
     v1(b"POST", ACQ, "{}", b"Idempotency-Key: " + b"k" * 300 + b"\r\n"), 400, CLOSE),
    ("a Last-Event-ID of 300 bytes",
     v1(b"GET", b"/v1/semaphores/c/events", None, b"Last-Event-ID: " + b"1" * 300 + b"\r\n"),
     400, CLOSE),
]

# Authorization abuse, against a semad run with --auth (the token `good` has every right).
GOOD = b"sema_hostilecatalogtoken0123456789abcdefghijklmno"


def authz(value, path=b"/v1/semaphores/c", method=b"GET"):
    return v1(method, path, None, b"Authorization: " + value + b"\r\n")


AUTH = [
    ("no Authorization", v1(b"GET", b"/v1/semaphores/c"), 401, KEEP),
    ("an empty Authorization", authz(b""), 401, KEEP),
    ("Basic credentials", authz(b"Basic dXNlcjpwYXNz"), 401, KEEP),
    ("Bearer without a token", authz(b"Bearer"), 401, KEEP),
    ("Bearer and spaces", authz(b"Bearer    "), 401, KEEP),
    ("an unknown token", authz(b"Bearer sema_nosuchtoken"), 401, KEEP),
    ("the token with one byte more", authz(b"Bearer " + GOOD + b"x"), 401, KEEP),
    ("the token with one byte less", authz(b"Bearer " + GOOD[:-1]), 401, KEEP),
    ("the token's hash as the token",
     authz(b"Bearer 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"), 401,
     KEEP),
    ("the token twice", authz(b"Bearer " + GOOD + b" " + GOOD), 401, KEEP),
    ("a comma list of tokens", authz(b"Bearer " + GOOD + b", Bearer " + GOOD), 401, KEEP),
    ("a quoted token", authz(b'Bearer "' + GOOD + b'"'), 401, KEEP),
    ("a TAB before the token", authz(b"Bearer\t" + GOOD), 401, KEEP),
    ("non-ASCII in the token", authz(b"Bearer sema_\xc3\xa9t\xc3\xa9"), 401, KEEP),
    ("a percent-encoded token", authz(b"Bearer sema%5Fabc"), 401, KEEP),
    ("two Authorization headers",
     v1(b"GET", b"/v1/semaphores/c", None,
        b"Authorization: Bearer " + GOOD + b"\r\nAuthorization: Bearer x\r\n"), 400, CLOSE),
    ("an Authorization of 300 bytes", authz(b"Bearer " + b"a" * 300), 400, CLOSE),
    ("a control byte in Authorization", authz(b"Bearer a\x01b"), 400, CLOSE),
    ("a bare CR in Authorization", authz(b"Bearer a\rb"), 400, CLOSE),
    ("a folded Authorization", authz(b"Bearer\r\n " + GOOD), 400, CLOSE),
    ("the token in the query string", v1(b"GET", b"/v1/semaphores/c?access_token=" + GOOD),
     401, KEEP),
    ("the token in a cookie", v1(b"GET", b"/v1/semaphores/c", None,
                                 b"Cookie: token=" + GOOD + b"\r\n"), 401, KEEP),
    ("a legacy route without a token", v1(b"POST", b"/semaphore/up", '{"name":"L"}'), 401, KEEP),
    ("metrics without a token", v1(b"GET", b"/metrics"), 401, KEEP),
    ("an event stream without a token", v1(b"GET", b"/v1/semaphores/c/events"), 401, KEEP),
    ("an unknown route with a bad token", authz(b"Bearer x", b"/v1/nowhere"), 404, KEEP),
    ("a read-only token deleting", v1(b"DELETE", b"/v1/semaphores/c", None,
                                      b"Authorization: Bearer sema_readonlyhostiletoken\r\n"),
     403, KEEP),
    ("a read-only token acquiring", v1(b"POST", ACQ, "{}",
                                       b"Authorization: Bearer sema_readonlyhostiletoken\r\n"),
     403, KEEP),
    ("the good token (allowed)", authz(b"Bearer " + GOOD), 200, KEEP),
    ("healthz without a token (allowed)", v1(b"GET", b"/healthz"), 200, KEEP),
]

# What some replies must say besides their status.
BODIES = {
    "markup in a 404 path": b"Cannot GET /&lt;script&gt;alert(&#39;x&amp;y&quot;)&lt;/script&gt;",
    "a NUL in a legacy body": b"Malformed JSON body: a NUL byte is not allowed in JSON",
}


def read_reply(f, head_only):
    """(status, headers, body) of one reply; a HEAD reply has no body to read."""
    line = f.readline()
    if not line:
        raise EOFError("closed without a reply")
    status = int(line.split()[1])
    headers = {}
    for line in iter(f.readline, b"\r\n"):
        if not line:
            raise EOFError("closed in the reply's head")
        k, v = line.decode("latin-1").split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    return status, headers, (b"" if head_only else f.read(n))


def closed_by_server(sock, timeout=5):
    sock.settimeout(timeout * fx.SLOW)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def token_file():
    """A --auth file: GOOD with every right, and a read-only token."""
    d = fx.temp_dir(prefix="sema-hostile-")
    path = os.path.join(d, "tokens")
    with open(path, "w") as f:
        f.write("good sha256:%s admin\n" % hashlib.sha256(GOOD).hexdigest())
        f.write("ro sha256:%s read\n" % hashlib.sha256(b"sema_readonlyhostiletoken").hexdigest())
    return path


def setup(s, token):
    """The state the cases refer to: c (5 units, an acquire with Idempotency-Key k-used),
    full (1 unit, held), the legacy counters L (1) and Z (0)."""
    h = {"Authorization": "Bearer " + token.decode()} if token else {}
    assert s.request("PUT", "/v1/semaphores/c", {"capacity": 5}, h)[0] == 201
    assert s.request("PUT", "/v1/semaphores/full", {"capacity": 1}, h)[0] == 201
    assert s.request("POST", "/v1/semaphores/full/acquire", {"timeout_ms": 0}, h)[0] == 200
    assert s.request("POST", "/v1/semaphores/c/acquire", {"timeout_ms": 0},
                     dict(h, **{"Idempotency-Key": "k-used"}))[0] == 200
    assert s.request("POST", "/semaphore", {"name": "L", "value": 1}, h)[0] == 200
    assert s.request("POST", "/semaphore", {"name": "Z", "value": 0}, h)[0] == 200


def run_catalog(cases, auth=False):
    failures = []
    args = ("--auth", token_file()) if auth else ()
    with fx.Semad(*args) as s:
        setup(s, GOOD if auth else None)
        for name, raw, want, closes in cases:
            sock = s.raw()
            f = sock.makefile("rb")
            try:
                sock.sendall(raw)
                st, hd, body = read_reply(f, raw.startswith(b"HEAD "))
                closed = hd.get("connection") == "close"
                if st != want:
                    failures.append("%s: %d, want %d (%r)" % (name, st, want, body[:200]))
                elif closed != closes:
                    failures.append("%s: Connection: %s" % (name, hd.get("connection")))
                elif closes and not closed_by_server(sock):
                    failures.append("%s: the connection stayed open" % name)
                elif name in BODIES and body != BODIES[name]:
                    failures.append("%s: body %r" % (name, body))
                elif raw.startswith(b"HEAD ") and st == 200 and int(hd["content-length"]) == 0:
                    failures.append("%s: no Content-Length of the GET body" % name)
                elif not closes:  # the connection goes on after the reply
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                    if read_reply(f, False)[0] != 200:
                        failures.append("%s: the next request on the connection failed" % name)
            except (OSError, EOFError, ValueError) as e:
                failures.append("%s: %s" % (name, e))
            finally:
                f.close()
                sock.close()
            # semad stays healthy after each
            if s.request("GET", "/healthz")[0] != 200:
                failures.append("%s: /healthz did not answer 200 after it" % name)
    assert not failures, "hostile requests:\n  " + "\n  ".join(failures)
    print("%d hostile requests answered as they should" % len(cases))


def test_request_line():
    run_catalog(REQUEST_LINE)


def test_headers():
    run_catalog(HEADERS)


def test_message_framing():
    run_catalog(FRAMING)


def test_content_and_conformance():
    run_catalog(CONTENT)


def test_bodies_and_wrong_json_types():
    run_catalog(BODIES_AND_TYPES)


def test_odd_names_and_queries():
    run_catalog(NAMES)


def test_semantic_abuse():
    run_catalog(SEMANTIC)


def test_authorization_abuse():
    run_catalog(AUTH, auth=True)


def test_catalog_holds_at_least_100_hostile_requests():
    """Every case but the few marked allowed is an attack answered 4xx."""
    cases = REQUEST_LINE + HEADERS + FRAMING + CONTENT + BODIES_AND_TYPES + NAMES + SEMANTIC + AUTH
    hostile = [c for c in cases if 400 <= c[2] < 500]
    assert len(hostile) >= 100, len(hostile)
    assert len({c[0] for c in cases}) == len(cases), "two cases share a name"
    print("%d hostile requests in the catalog" % len(hostile))


def test_each_case_split_into_small_reads():
    """The checks on offsets (single spaces, obs-fold) hold when the bytes arrive in
    pieces: every case again, a few bytes per send."""
    import time
    cases = [c for c in REQUEST_LINE + HEADERS + FRAMING if c[3] == CLOSE]
    failures = []
    with fx.Semad() as s:
        for name, raw, want, _ in cases:
            sock = s.raw()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            f = sock.makefile("rb")
            try:
                try:
                    for i in range(0, len(raw), 3):
                        sock.sendall(raw[i:i + 3])
                        time.sleep(0.001)
                except OSError:
                    pass  # refused before the last piece: its reply is waiting
                st = read_reply(f, False)[0]
                if st != want:
                    failures.append("%s: %d, want %d" % (name, st, want))
            except OSError as e:  # the server may close before the last piece
                failures.append("%s: %s" % (name, e))
            finally:
                f.close()
                sock.close()
        assert s.request("GET", "/healthz")[0] == 200
    assert not failures, "split hostile requests:\n  " + "\n  ".join(failures)


if __name__ == "__main__":
    fx.main(globals())
