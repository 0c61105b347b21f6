# SPDX-License-Identifier: MIT
"""test_hostile.py - the catalog of hostile and malformed requests, sent as raw bytes to the
real semad: each gets the status RFC 9112 asks for, the connection closes where the framing
is in doubt (request smuggling's building blocks), and semad stays healthy after each
(GET /healthz 200 on a new connection). Also the conformance cases around them: HEAD,
absolute-form targets, the escaped 404 and bodies with a NUL byte. The sanitizer builds run
the same catalog."""
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


def run_catalog(cases):
    failures = []
    with fx.Semad() as s:
        assert s.request("PUT", "/v1/semaphores/c", {"capacity": 5})[0] == 201
        assert s.request("POST", "/semaphore", {"name": "L", "value": 1})[0] == 200
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
