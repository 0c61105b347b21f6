# SPDX-License-Identifier: MIT
"""_ahttp.py - the asyncio client's connections: a minimal HTTP/1.1 client on asyncio
streams (keep-alive, Content-Length, chunked and close-delimited bodies) with a pool of
idle connections. A cancelled request closes its connection, so semad drops its waiter."""
from __future__ import annotations

import asyncio
import ssl
import time
from typing import Dict, List, Optional, Set, Tuple

from ._flows import OpenStream, Reply, Request, Stream, StreamTimeout
from ._options import IDLE, MAX_BODY, MAX_LINE, Options, network_error
from .errors import ProtocolError, retry_after_seconds

WATCH = 0.25  # seconds between two looks at the deadlines of the requests in flight


class _Conn:
    """One connection: when it was last used, when its request in flight must have its
    reply by, and whether it ran out of time."""

    __slots__ = ("reader", "writer", "used", "deadline", "timed_out")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = 0.0
        self.deadline = 0.0
        self.timed_out = False

    def abort(self) -> None:
        self.writer.transport.abort()

    def expire(self) -> None:
        self.timed_out = True
        self.abort()


async def _read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[bytes, bytes], bool]:
    """A reply's status line and headers (1xx replies skipped); whether the connection
    may be kept."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError("not an HTTP/1.x reply: %.100r" % lines[0], code="protocol")
        status = int(parts[1])
        headers: Dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if status >= 200:
            conn = headers.get(b"connection", b"").lower()
            keep = parts[0] == b"HTTP/1.1" and b"close" not in conn
            return status, headers, keep


class _Body:
    """A reply body as it arrives: by Content-Length, chunked, or up to the close."""

    def __init__(self, reader: asyncio.StreamReader, headers: Dict[bytes, bytes]) -> None:
        self.reader = reader
        self.chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        length = headers.get(b"content-length")
        if not self.chunked and length is not None and not length.isdigit():
            raise ProtocolError("a bad Content-Length: %.40r" % length, code="protocol")
        self.left = None if self.chunked or length is None else int(length)
        self.done = self.left == 0
        self.buf = b""

    async def piece(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        if self.done:
            return b""
        if self.chunked:
            size_line = await self.reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                while (await self.reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                self.done = True
                return b""
            data = await self.reader.readexactly(size + 2)
            return data[:-2]
        if self.left is not None:
            data = await self.reader.read(min(self.left, 65536))
            if not data:
                raise asyncio.IncompleteReadError(b"", self.left)
            self.left -= len(data)
            self.done = self.left == 0
            return data
        data = await self.reader.read(65536)
        self.done = not data
        return data

    async def whole(self) -> bytes:
        if self.left is not None:
            if self.left > MAX_BODY:
                raise ProtocolError("a reply of %d bytes (the most read is %d)"
                                    % (self.left, MAX_BODY), code="protocol")
            data = await self.reader.readexactly(self.left)
            self.left, self.done = 0, True
            return data
        chunks: List[bytes] = []
        total = 0
        while True:
            piece = await self.piece()
            if not piece:
                return b"".join(chunks)
            total += len(piece)
            if total > MAX_BODY:
                raise ProtocolError("a reply longer than %d bytes" % MAX_BODY, code="protocol")
            chunks.append(piece)

    async def line(self) -> bytes:
        """The next line, its newline included; b"" at the end."""
        if not self.chunked and self.left is None and not self.buf:
            return await self.reader.readline()  # close-delimited, as semad sends streams
        while b"\n" not in self.buf:
            piece = await self.piece()
            if not piece:
                line, self.buf = self.buf, b""
                return line
            self.buf += piece
            if len(self.buf) > MAX_LINE:
                raise ProtocolError("an event stream line longer than %d bytes" % MAX_LINE,
                                    code="protocol")
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


class AsyncHttp:
    """Requests on pooled keep-alive connections (at most ``max_idle`` kept idle, none idle
    longer than IDLE); event streams on connections of their own. One event loop."""

    def __init__(self, o: Options) -> None:
        self.o = o
        self._idle: List[_Conn] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # Requests in flight with a deadline, and the one timer that looks at them every
        # WATCH seconds (a timer per request would cost more than the rest of it).
        self._busy: Set[_Conn] = set()
        self._watch: Optional[asyncio.TimerHandle] = None
        host = o.host if ":" not in o.host else "[%s]" % o.host
        default = 443 if o.https else 80
        self._host = host if o.port == default else "%s:%d" % (host, o.port)
        static = "".join("%s: %s\r\n" % kv for kv in o.headers.items())
        self._static = ("Host: %s\r\n%s" % (self._host, static))

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop: the old one's connections are unusable
            self._idle = []
            self._busy = set()
            self._watch = None
            self._loop = loop
        return loop

    def _watch_deadlines(self) -> None:
        """Aborts the requests whose reply is overdue (they fail with code timeout)."""
        now = time.monotonic()
        for conn in [c for c in self._busy if c.deadline <= now]:
            self._busy.discard(conn)
            conn.expire()
        self._watch = None
        if self._busy and self._loop is not None:
            self._watch = self._loop.call_later(WATCH, self._watch_deadlines)

    async def _connect(self) -> _Conn:
        o = self.o
        coro = asyncio.open_connection(o.host, o.port, ssl=o.ssl, limit=MAX_LINE + 1024,
                                       server_hostname=o.host if o.ssl else None)
        reader, writer = await asyncio.wait_for(coro, o.connect_timeout)
        return _Conn(reader, writer)

    def _take(self) -> Optional[_Conn]:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.used < IDLE and not conn.reader.at_eof() and \
                    not conn.writer.transport.is_closing():
                return conn
            conn.abort()
        return None

    def _give(self, conn: _Conn) -> None:
        if len(self._idle) < self.o.max_idle:
            conn.used = time.monotonic()
            self._idle.append(conn)
        else:
            conn.writer.close()

    def _head(self, method: str, path: str, body: Optional[bytes], key: Optional[str],
              extra: str = "") -> bytes:
        h = "%s %s%s HTTP/1.1\r\n%s%s" % (method, self.o.prefix, path, self._static, extra)
        if key is not None:
            h += "Idempotency-Key: %s\r\n" % key
        if body is not None:
            h += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        return (h + "\r\n").encode()

    async def request(self, req: Request) -> Reply:
        """One exchange. Raises NetworkError without a reply; on cancellation the
        connection is closed (semad drops a parked waiter) and CancelledError goes on."""
        loop = self._check_loop()
        conn: Optional[_Conn] = None
        try:
            conn = self._take() or await self._connect()
            head = self._head(req.method, req.path, req.body, req.key)
            conn.writer.write(head + req.body if req.body is not None else head)
            if req.timeout is not None:
                conn.deadline = time.monotonic() + req.timeout
                self._busy.add(conn)
                if self._watch is None:
                    self._watch = loop.call_later(WATCH, self._watch_deadlines)
            status, headers, keep = await _read_head(conn.reader)
            length = headers.get(b"content-length")
            if req.method == "HEAD" or status in (204, 304):
                body = b""  # no body, whatever the headers say
            elif length is not None and length.isdigit() and int(length) <= MAX_BODY and \
                    b"transfer-encoding" not in headers:
                body = await conn.reader.readexactly(int(length))  # semad's replies
            else:
                body = await _Body(conn.reader, headers).whole()
                if length is None and b"transfer-encoding" not in headers:
                    keep = False  # the body ran to the close
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError, ValueError) as e:
            if conn is not None:
                conn.abort()
            timed_out = conn is not None and conn.timed_out
            raise network_error(self.o, e, timed_out, req.timeout) from e
        except BaseException:
            if conn is not None:
                conn.abort()
            raise
        finally:
            if conn is not None:
                self._busy.discard(conn)
        retry_after = None
        if status >= 400:
            ra = headers.get(b"retry-after")
            retry_after = retry_after_seconds(ra.decode("latin-1")) if ra else None
        if keep:
            self._give(conn)
        else:
            conn.abort()
        return Reply(status, body, retry_after)

    async def open_stream(self, op: OpenStream) -> Stream:
        self._check_loop()
        conn: Optional[_Conn] = None
        try:
            conn = await self._connect()
            extra = "Accept: text/event-stream\r\n"
            if op.last_event_id:
                extra += "Last-Event-ID: %s\r\n" % op.last_event_id
            conn.writer.write(self._head("GET", op.path, None, None, extra))
            status, headers, _ = await _read_head(conn.reader)
            body = _Body(conn.reader, headers)
            if not 200 <= status < 300:
                data = await body.whole()
                conn.abort()
                return Stream(status, data, None)
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError, ValueError) as e:
            if conn is not None:
                conn.abort()
            raise network_error(self.o, e, False, None) from e
        except BaseException:
            if conn is not None:
                conn.abort()
            raise
        return Stream(status, b"", (conn, body))

    async def read_line(self, stream: Stream, timeout: Optional[float] = None) -> bytes:
        conn, body = stream.handle
        try:
            if timeout is None:
                line: bytes = await body.line()
            else:
                line = await asyncio.wait_for(body.line(), timeout)
        except asyncio.TimeoutError:
            conn.abort()
            raise StreamTimeout() from None
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as e:
            conn.abort()
            if isinstance(e, ValueError):  # StreamReader's line limit
                raise ProtocolError("an event stream line longer than %d bytes" % MAX_LINE,
                                    code="protocol") from None
            raise network_error(self.o, e, False, None) from e
        except BaseException:
            conn.abort()
            raise
        return line

    @staticmethod
    def close_stream(stream: Stream) -> None:
        if stream.handle is not None:
            stream.handle[0].abort()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.writer.close()
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

