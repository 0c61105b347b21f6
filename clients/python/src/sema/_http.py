# SPDX-License-Identifier: MIT
"""_http.py - the synchronous client's connections: keep-alive http.client connections in a
pool shared by the client's threads, event streams on connections of their own, and
``Cancel``, which interrupts a waiting request by shutting its socket down (semad sees the
client leave and drops the waiter)."""
from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ._flows import OpenStream, Reply, Request, Stream, StreamTimeout
from ._options import FRESH, IDLE, MAX_BODY, MAX_LINE, Options, network_error
from .errors import Cancelled, ProtocolError, retry_after_seconds

Connection = Union[http.client.HTTPConnection, http.client.HTTPSConnection]


class Cancel(threading.Event):
    """An Event that also interrupts the client's calls waiting on it: pass it as
    ``cancel=`` to ``acquire``, ``wait_idle``, ``wait_turn`` or ``watch``; ``set()`` (from
    any thread) makes them raise ``sema.Cancelled`` at once, holding nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._hooks_lock = threading.Lock()
        self._hooks: Dict[int, Callable[[], None]] = {}
        self._next = 0

    def set(self) -> None:
        super().set()
        with self._hooks_lock:
            hooks, self._hooks = list(self._hooks.values()), {}
        for fn in hooks:
            fn()

    def _hook(self, fn: Callable[[], None]) -> int:
        """Run ``fn`` when set (at once if it is); returns the id for ``_unhook``."""
        with self._hooks_lock:
            if not self.is_set():
                self._next += 1
                self._hooks[self._next] = fn
                return self._next
        fn()
        return 0

    def _unhook(self, hook: int) -> None:
        with self._hooks_lock:
            self._hooks.pop(hook, None)


def _abort(sock: socket.socket) -> None:
    """Interrupt a read blocked on ``sock`` from another thread: the reader sees the end.
    (The socket itself, not the connection's: http.client hands a connection that will
    close over to its response, and the connection forgets the socket.)"""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _dropped(sock: Any) -> bool:
    """Whether an idle keep-alive socket was closed by semad (or holds stray bytes): one
    look that never waits, so that a request is never sent on a dead connection."""
    try:
        p = select.poll()
        p.register(sock, select.POLLIN)
        if not p.poll(0):
            return False
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(0)
            try:
                sock.recv(1)
            except ssl.SSLWantReadError:  # a TLS record without data (a session ticket)
                return False
        return True
    except (OSError, ValueError):
        return True


class _Pool:
    """Idle keep-alive connections, the last returned first out (the busiest stay warm), at
    most ``cap`` of them, none idle longer than IDLE."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lock = threading.Lock()
        self.idle: List[Tuple[Connection, float]] = []
        self.closed = False
        # each thread's last connection, kept aside from the shared list: a thread doing
        # request after request takes no lock (fifty threads would queue on it)
        self.mine = threading.local()

    def take(self) -> Optional[Connection]:
        while True:
            got: Optional[Tuple[Connection, float]] = getattr(self.mine, "conn", None)
            if got is not None:
                self.mine.conn = None
                if self.closed:
                    got[0].close()
                    return None
            else:
                with self.lock:
                    if not self.idle:
                        return None
                    got = self.idle.pop()
            conn, used = got
            idle = time.monotonic() - used
            # one that rested a while is looked at first: semad may have closed it
            if conn.sock is not None and (idle < FRESH or idle < IDLE and
                                          not _dropped(conn.sock)):
                return conn
            conn.close()

    def give(self, conn: Connection) -> None:
        if not self.closed and getattr(self.mine, "conn", None) is None:
            self.mine.conn = (conn, time.monotonic())
            return
        with self.lock:
            if not self.closed and len(self.idle) < self.cap:
                self.idle.append((conn, time.monotonic()))
                return
        conn.close()

    def close(self) -> None:
        """Closes the shared idle connections and this thread's; another thread's closes
        when it next makes a request."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        mine = getattr(self.mine, "conn", None)
        if mine is not None:
            self.mine.conn = None
            idle.append(mine)
        for conn, _ in idle:
            conn.close()


class SyncHttp:
    """Requests on pooled keep-alive connections: one pool for requests that may wait (a
    long poll, no read timeout of its own) and one for the others (read timeout
    ``request_timeout``), so that a connection's timeout rarely changes. Thread-safe."""

    def __init__(self, o: Options) -> None:
        self.o = o
        self._quick = _Pool(o.max_idle)
        self._waits = _Pool(o.max_idle)

    def _new(self) -> Connection:
        o = self.o
        if o.https:
            return http.client.HTTPSConnection(o.host, o.port, timeout=o.connect_timeout,
                                               context=o.ssl)
        return http.client.HTTPConnection(o.host, o.port, timeout=o.connect_timeout)

    def request(self, req: Request, cancel: Optional[Cancel]) -> Reply:
        """One exchange. Raises NetworkError without a reply, Cancelled when ``cancel``
        fired while it waited."""
        pool = self._waits if req.wait else self._quick
        conn = pool.take() or self._new()
        hook = 0
        sent = False  # a timeout before this is the connect's, after it the reply's
        try:
            if conn.sock is None:
                conn.connect()
            assert conn.sock is not None
            sock: socket.socket = conn.sock
            if sock.gettimeout() != req.timeout:
                sock.settimeout(req.timeout)
            if cancel is not None:
                hook = cancel._hook(lambda: _abort(sock))
            headers: Dict[str, Any] = self.o.headers
            if req.body is not None or req.key is not None:
                headers = dict(headers)
                if req.body is not None:
                    headers["Content-Type"] = "application/json"
                if req.key is not None:  # UTF-8, as the asyncio transport and the C client
                    headers["Idempotency-Key"] = req.key.encode()  # (not http.client's latin-1)
            conn.request(req.method, self.o.prefix + req.path, req.body, headers)
            sent = True
            resp = conn.getresponse()
            body = _read_body(resp)
            status = resp.status
            retry_after = retry_after_seconds(resp.getheader("Retry-After")) \
                if status >= 400 else None
            reuse = not resp.will_close
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled", code="cancelled") from None
            raise network_error(self.o, e, sent and isinstance(e, socket.timeout),
                                req.timeout) from e
        except BaseException:
            conn.close()
            raise
        finally:
            if hook and cancel is not None:
                cancel._unhook(hook)
        if reuse:
            pool.give(conn)
        else:
            conn.close()
        return Reply(status, body, retry_after)

    def open_stream(self, op: OpenStream, cancel: Optional[Cancel]) -> Stream:
        """A GET read a line at a time, on a connection of its own (no read timeout: semad
        sends a heartbeat on idle streams, and TCP keep-alive notices a silent peer)."""
        conn = self._new()
        hook = 0
        try:
            conn.connect()
            assert conn.sock is not None
            sock: socket.socket = conn.sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.settimeout(None)
            if cancel is not None:
                hook = cancel._hook(lambda: _abort(sock))
            headers = dict(self.o.headers, Accept="text/event-stream")
            if op.last_event_id:
                headers["Last-Event-ID"] = op.last_event_id
            conn.request("GET", self.o.prefix + op.path, None, headers)
            resp = conn.getresponse()
            if not 200 <= resp.status < 300:
                body = _read_body(resp)
                conn.close()
                return Stream(resp.status, body, None)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled", code="cancelled") from None
            raise network_error(self.o, e, False, None) from e
        except BaseException:
            conn.close()
            raise
        finally:
            if hook and cancel is not None:
                cancel._unhook(hook)
        return Stream(resp.status, b"", (conn, resp, sock))

    def read_line(self, stream: Stream, cancel: Optional[Cancel],
                  timeout: Optional[float] = None) -> bytes:
        _, resp, sock = stream.handle
        hook = cancel._hook(lambda: _abort(sock)) if cancel is not None else 0
        try:
            if sock.gettimeout() != timeout:
                sock.settimeout(timeout)
            line: bytes = resp.readline(MAX_LINE + 1)
        except socket.timeout:
            self.close_stream(stream)
            raise StreamTimeout() from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.close_stream(stream)
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled", code="cancelled") from None
            raise network_error(self.o, e, False, None) from e
        finally:
            if hook and cancel is not None:
                cancel._unhook(hook)
        if cancel is not None and cancel.is_set():
            self.close_stream(stream)
            raise Cancelled("cancelled", code="cancelled")
        if len(line) > MAX_LINE:
            self.close_stream(stream)
            raise ProtocolError("an event stream line longer than %d bytes" % MAX_LINE,
                                code="protocol")
        return line

    @staticmethod
    def close_stream(stream: Stream) -> None:
        if stream.handle is not None:
            conn, resp, sock = stream.handle
            resp.close()
            conn.close()
            sock.close()

    def close(self) -> None:
        """Closes the idle connections (those in use close when their request ends)."""
        self._quick.close()
        self._waits.close()


def _read_body(resp: http.client.HTTPResponse) -> bytes:
    """The whole reply body, refusing one above MAX_BODY."""
    if resp.length is not None and resp.length > MAX_BODY:
        raise ProtocolError("a reply of %d bytes (the most read is %d)"
                            % (resp.length, MAX_BODY), code="protocol")
    if resp.length is not None:
        return resp.read()
    chunks: List[bytes] = []
    total = 0
    while True:
        piece = resp.read(65536)
        if not piece:
            return b"".join(chunks)
        total += len(piece)
        if total > MAX_BODY:
            raise ProtocolError("a reply longer than %d bytes" % MAX_BODY, code="protocol")
        chunks.append(piece)
