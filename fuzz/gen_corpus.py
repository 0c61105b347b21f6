#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# gen_corpus.py - writes the hand-made seed inputs of fuzz/corpus/<target>/ (seed-*.bin);
# inputs libFuzzer found are kept beside them under their own names. Run from anywhere.
import os

HERE = os.path.dirname(os.path.abspath(__file__))

BODIES = [
    b'{}', b' { } ', b'{"weight":1,"ttl_ms":60000}', b'{"capacity":100}',
    b'{"mode":"shared","timeout_ms":0,"owner":"w-1"}', b'{"name":"a","value":3}',
    b'{"weight":-0}', b'{"weight":123456789012345}', b'{"weight":1234567890123456}',
    b'{"weight":9007199254740993}', b'{"weight":01}', b'{"weight":1.5e3}',
    b'{"weight":1,"weight":2}', b'{"owner":"a\\"b"}', b'{"owner":"\\u0000"}',
    b'{"owner":"\xc3\xa9"}', b'{"owner":"\xff"}', b'{"a":[1,{"b":null}]}', b'[]', b'1',
    b'{"weight":1,}', b'{"weight":1} x', b'{"weight":tru}', b'{"x":true,"y":false,"z":null}',
    b'{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}', b'{"we\\u0069ght":2}',
    b'{"k\x00":1}', b'', b'{', b'{"', b'{"a"', b'{"a":', b'{"a":-', b'\x0c{}',
    b'{"semaphores":[{"name":"gpu","weight":2},{"name":"db"}],"ttl_ms":30000,"tenant":"t1"}',
    b'{"semaphores":[{"name":"a","name":"b"}]}', b'{"semaphores":[{"w":1\x00}]}',
    b'{"a":[1]\x00}', b'{"a":[1],"b":1.5}', b'{"a":[1,]}', b'{"a":{"b":[]}} ',
    b'{"a":' + b'[' * 2048 + b']' * 2048 + b'}',
]

def req(head, body=b'', host=True):
    """CRLF line ends; an HTTP/1.1 request gets a Host header unless it has one or
    host=False (a request without one is refused)."""
    line, sep, rest = head.partition(b'\n')
    fields = (sep + rest).split(b'\n\n')[0].lower()  # the first request's header lines
    if host and line.endswith(b'HTTP/1.1') and b'\nhost:' not in fields:
        head = line + sep + b'Host: x\n' + rest
    return head.replace(b'\n', b'\r\n') + body

REQUESTS = [
    req(b'GET /healthz HTTP/1.1\nHost: x\n\n'),
    req(b'PUT /v1/semaphores/db HTTP/1.1\nContent-Length: 16\n\n', b'{"capacity":100}'),
    req(b'POST /v1/semaphores/a%2Fb/acquire HTTP/1.1\nContent-Length: 12\n'
        b'Idempotency-Key: k-1\n\n', b'{"weight":1}'),
    req(b'GET /v1/semaphores?prefix=a+b&limit=10&cursor=%C3%A9 HTTP/1.1\n\n'),
    req(b'POST /semaphore HTTP/1.1\nTransfer-Encoding: chunked\n\n', b'5\r\n{"nam\r\n0\r\n\r\n'),
    req(b'POST /v1/leases/1/renew HTTP/1.1\nExpect: 100-continue\nContent-Length: 2\n\n', b'{}'),
    req(b'GET /healthz HTTP/1.1\n\nGET /metrics HTTP/1.1\nHost: x\n\n'
        b'DELETE /v1/leases/9 HTTP/1.1\nHost: x\n\n'),
    req(b'GET /healthz HTTP/1.0\n\n'),
    req(b'GET /healthz HTTP/1.1\nConnection: close\n\nGET /metrics HTTP/1.1\nHost: x\n\n'),
    req(b'POST /v1/x HTTP/1.1\nContent-Length: 99999999\n\n'),
    req(b'POST /v1/x HTTP/1.1\nIdempotency-Key: a\nIdempotency-Key: b\n\n'),
    req(b'POST /v1/x HTTP/1.1\nIdempotency-Key:\n\n'),
    req(b'POST /v1/x HTTP/1.1\nIdempotency-Key: ' + b'k' * 300 + b'\n\n'),
    req(b'GET /' + b'a' * 300 + b' HTTP/1.1\n\n'),
    req(b'GET / HTTP/1.1\nX-Long: ' + b'v' * 300 + b'\n\n'),
    req(b'GET /v1/semaphores/%00 HTTP/1.1\n\n'),
    req(b'GET /v1/semaphores/%C0%AF HTTP/1.1\n\n'),
    req(b'GET /v1/semaphores/%ED%A0%80 HTTP/1.1\n\n'),
    req(b'GET /v1/semaphores/%zz HTTP/1.1\n\n'),
    req(b'GET /x HTTP/1.1\nUpgrade: websocket\nConnection: upgrade\n\n'),
    req(b'GET /x HTTP/1.1\nContent-Length: 1\nContent-Length: 2\n\n'),
    req(b'GET /x HTTP/1.1\nTransfer-Encoding: chunked\nContent-Length: 3\n\n'),
    req(b'POST /semaphore HTTP/1.1\nTransfer-Encoding: chunked\n\n', b'zz\r\n'),
    req(b'GARBAGE\n\n'),
    req(b'GET /healthz HTTP/1.1\nHost: x'),
    req(b'CONNECT host:443 HTTP/1.1\n\n'),
    b'GET /healthz HTTP/1.1\n\n',
    b'GET /healthz HTTP/1.1\r\nHost:\x00x\r\n\r\n',
    # strict HTTP/1.1 (each refused): see tests/integration/test_hostile.py
    req(b'GET /healthz HTTP/1.1\nHost : x\n\n'),
    req(b'GET  /healthz HTTP/1.1\n\n'),
    req(b'GET /healthz  HTTP/1.1\n\n'),
    req(b'GET /heal\thz HTTP/1.1\n\n'),
    req(b'GET /healthz HTTP/1.1\n\n', host=False),
    req(b'GET /healthz HTTP/1.1\nHost: a\nHost: b\n\n'),
    req(b'GET /healthz HTTP/1.1\nHost: a b\n\n'),
    req(b'PUT /v1/semaphores/t HTTP/1.1\nTransfer-Encoding: gzip, chunked\n\n',
        b'e\r\n{"capacity":1}\r\n0\r\n\r\n'),
    req(b'PUT /v1/semaphores/t HTTP/1.1\nTransfer-Encoding: chunked\n\n',
        b'e\r\n{"capacity":1}XX0\r\n\r\n'),
    req(b'PUT /v1/semaphores/t HTTP/1.0\nTransfer-Encoding: chunked\n\n', b'0\r\n\r\n'),
    req(b'POST /v1/semaphores/t/acquire HTTP/1.1\nContent-Length: 13\n\n', b'{"weight":1\x00}'),
    req(b'POST /semaphore HTTP/1.1\nContent-Length: 23\n\n', b'{"name":"l","value":1\x00}'),
    req(b'GET /healthz HTTP/1.1\nX-A: b\n c\n\n'),
    req(b'GET /healthz\n\n'),
    req(b'GET /healthz HTTP/2.0\n\n'),
    req(b'GET http://h:1/v1/semaphores/a?limit=1 HTTP/1.1\nHost: h:1\n\n'),
    req(b'GET http:/// HTTP/1.1\n\n'),
    req(b'HEAD /v1/semaphores/a HTTP/1.1\n\nGET /<script>alert(1)</script> HTTP/1.1\n'
        b'Host: x\n\n'),
]

PATHS = [
    b'/healthz', b'/metrics', b'/semaphore', b'/semaphore/up', b'/semaphore/value/db',
    b'/v1/semaphores', b'/v1/semaphores/db', b'/v1/semaphores/db/acquire',
    b'/v1/semaphores/db/wait-idle', b'/v1/semaphores/db/events', b'/v1/leases/42',
    b'/v1/leases/42/renew', b'/v1/leases/42/revoke', b'/v1/locks/k/acquire', b'/v1/locks/k',
    b'/v1/semaphores/', b'/v1/semaphores//acquire', b'/v1/semaphores/a%2Fb',
    b'/v1/semaphores/%e2%82%ac', b'/v1/semaphores/%F4%90%80%80', b'/v1/semaphores/%',
    b'/v1/semaphores/%4', b'/v1/semaphores/a+b?prefix=a+b&cursor=%41&limit',
    b'/v1/semaphores?prefix&limit=&cursor=%zz', b'/v1/semaphores?limit=10&&prefix=%00',
    b'*', b'', b'/v1', b'/v1/semaphores/x/y/z', b'/v1/semaphores/\xc3\xa9',
]

H = b'sha256:' + b'ab' * 32
AUTH = [
    b'Bearer a', b'bearer sema_x', b'Bearer    sema_x   ', b'Bearer', b'Bearer ', b'Basic abc',
    b'Bearer a==', b'Bearer a=b', b'Bearer \x00', b'Bearer ' + b'A' * 201, b'Bearer\ta',
    b'# tokens\nops ' + H + b' admin\n',
    b'ci ' + H + b' read,acquire jobs/ batch-\n\n  # indented comment\n',
    b'x ' + H + b' read\ny ' + H + b' admin\n', b'x ' + H + b' read\nx ' + H[:-1] + b'c admin\n',
    b'x ' + H + b' write\n', b'x ' + H + b' read,read\n', b'x/y ' + H + b' read\n',
    b'x ' + H + b' read\r\n', b'x sha256:12 read\n', b'x\n', b'x ' + H + b'\n',
    b'x ' + H + b' admin ' + b' '.join(b'p%d' % i for i in range(17)) + b'\n',
    b'x ' + H + b' admin a\x01b\n', b'x ' + H + b' admin #p\n', b'\t\t\n\n',
    b'x ' + H + b' admin', b'x ' + H + b' read\x00\n',
]


def write(target, inputs, prefix=b''):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    for i, data in enumerate(inputs):
        with open(os.path.join(d, 'seed-%03d.bin' % i), 'wb') as f:
            f.write(prefix(i) + data if callable(prefix) else prefix + data)

# fuzz_http's first byte: caps in bits 0-3, read sizes in bits 4-7 (0: one read).
HTTP_CTL = [0x00, 0x10, 0x35, 0xf0, 0x0a, 0x21, 0x03, 0x7c]
# fuzz_path's first byte: the method (low bits) and '+' as space (bit 7).
PATH_CTL = [0x00, 0x01, 0x02, 0x83, 0x04, 0x85, 0x0b]

write('body', BODIES)
write('auth', AUTH)
write('http', REQUESTS, lambda i: bytes([HTTP_CTL[i % len(HTTP_CTL)]]))
write('path', PATHS, lambda i: bytes([PATH_CTL[i % len(PATH_CTL)]]))
