# SPDX-License-Identifier: MIT
"""semad_fixture.py - start the real semad on an ephemeral loopback port for a test.

Stdlib only. The program is $SEMAD (default build/bin/semad). Each Semad() gets its own
`mktemp -d` data directory, `--durability none` unless asked otherwise, waits for
/healthz, and is killed at the end (use it as a context manager).

With SEMA_TEST_OPENAPI_PROXY=1 every Semad() sits behind a validating proxy (prism, from
tests/openapi/, run as `prism proxy --errors`) that checks each reply against
docs/openapi.yaml: the tests get the proxy's address (port, url(), conn(), raw()), and a
reply that breaks the document fails the test (see check_reply and Semad.__exit__).
`direct=True` talks to semad itself, for what a proxy cannot carry; a test that checks the
connection itself is marked @not_through_proxy(why) and skipped there.

With SEMA_TEST_REDIS=N every Semad() is instead a fresh redis-server with N semad instances
on it (`--engine redis://...`), each request going to the next instance in turn (see
redis_fixture.py); the tests run unchanged, and skip when semad has no Redis back end.
Counters are per instance: metrics_text(s) is every instance's /metrics.
"""
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PROXY = os.environ.get("SEMA_TEST_OPENAPI_PROXY", "") not in ("", "0")
SCALE = float(os.environ.get("SEMA_TEST_SCALE", "1") or "1")
SLOW = 1.0 if SCALE >= 1 else 4.0  # sanitizer builds: allow more time


def semad_path():
    p = os.environ.get("SEMAD")
    if p:
        return p
    src = os.environ.get("SEMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    return os.path.join(src, "build", "bin", "semad")


def temp_dir(prefix):
    """A new directory under the system's temp dir, removed when the test process exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


def source_dir():
    return os.environ.get("SEMA_SOURCE_DIR",
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class Skip(Exception):
    """Raised by a test that does not apply here; main() reports it and exits 77."""


def _skipped_when(active, why):
    """A test mark: the test is skipped, saying why, while active() holds."""
    def mark(fn):
        def run():
            if active():
                raise Skip(why)
            return fn()
        run.__name__, run.__doc__ = fn.__name__, fn.__doc__
        return run
    return mark


def not_through_proxy(why):
    """Mark a test that checks what a proxy hides or changes (the connection itself, a
    client's disconnect, event streams, raw HTTP): with SEMA_TEST_OPENAPI_PROXY it is
    skipped, saying why."""
    return _skipped_when(lambda: PROXY, "not through the validating proxy: " + why)


# On a Redis Cluster (SEMA_TEST_CLUSTER): /healthz counts only the slots an instance has used
ON_CLUSTER = os.environ.get("SEMA_TEST_CLUSTER", "") not in ("", "0")


class Semad:
    """One semad process. `args` are extra flags; `env` extra environment; `wrap` a
    command prefix (such as `setpriv --pdeathsig KILL`) that execs semad. With `tls` (an
    ssl.SSLContext for the client side), semad serves HTTPS (the caller passes --tls-cert and
    --tls-key) and conn()/request() speak it. healthy=False: return once it listens, without
    waiting for /healthz to answer 200 (nor a validating proxy)."""

    def __init__(self, *args, durability="none", env=None, data=None, tls=None, wrap=None,
                 healthy=True):
        self.tls = tls
        self.tmp = tempfile.mkdtemp(prefix="semad-test-")
        self.data = data or os.path.join(self.tmp, "data")
        cmd = list(wrap or []) + [semad_path(), "--listen", "127.0.0.1:0", "--data", self.data,
                                  "--durability", durability] + list(args)
        e = dict(os.environ)
        e.update(env or {})
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=e)
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()
        self.semad_port = self._wait_port(10 * SLOW)
        self.port = self.semad_port  # what the tests talk to: semad, or the proxy before it
        self.host = "127.0.0.1"
        self.proxy = None
        if not healthy:
            return
        if PROXY:
            self._wait_healthy(10 * SLOW, direct=True)
            try:
                self.proxy = Proxy.take(self.host, self.semad_port)
            except BaseException:
                self.kill()
                raise
            self.port = self.proxy.port
        self._wait_healthy(10 * SLOW)

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.lock:
                self.lines.append(line)

    def log(self):
        """The lines read so far; after wait_exit() returned, every line semad wrote."""
        with self.lock:
            return list(self.lines)

    def wait_exit(self, timeout=10):
        """Wait (bounded, scaled) until semad exits and its stderr is read to the end, so
        log() holds its last words; returns the exit status. The reader thread runs on its
        own schedule: right after the process exits it may not have read the final lines."""
        deadline = time.monotonic() + timeout * SLOW
        rc = self.proc.wait(timeout * SLOW)
        self.reader.join(max(0.0, deadline - time.monotonic()) + 5 * SLOW)
        if self.reader.is_alive():
            raise AssertionError("semad exited %s but its log never reached EOF" % rc)
        return rc

    def _wait_port(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log():
                m = re.search(r"listening on https?://127\.0\.0\.1:(\d+)", line)
                if m:
                    return int(m.group(1))
            if self.proc.poll() is not None:
                self.reader.join(5 * SLOW)  # its last words say why
                break
            time.sleep(0.01)
        self.kill()
        raise RuntimeError("semad did not start: " + "\n".join(self.log()))

    def _wait_healthy(self, timeout, direct=False):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/healthz", direct=direct)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("semad never became healthy")

    # ---- requests ----
    # direct=True: to semad itself, also in proxy mode (a request the proxy would answer
    # itself, such as one for no route of the document, or a connection-level check).
    def _port(self, direct):
        return self.semad_port if direct else self.port

    def conn(self, timeout=30, direct=False):
        if self.tls is not None:
            return http.client.HTTPSConnection(self.host, self._port(direct),
                                               timeout=timeout * SLOW, context=self.tls)
        return http.client.HTTPConnection(self.host, self._port(direct), timeout=timeout * SLOW)

    def request(self, method, path, body=None, headers=None, timeout=30, direct=False):
        """One request on a fresh connection: (status, headers dict lower-case, body bytes)."""
        c = self.conn(timeout, direct)
        try:
            return do_request(c, method, path, body, headers)
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, timeout=30, direct=False):
        st, hd, data = self.request(method, path, body, headers, timeout, direct)
        return st, (json.loads(data) if data else None)

    def url(self, path):
        return "%s://%s:%d%s" % ("https" if self.tls else "http", self.host, self.port, path)

    def raw(self, timeout=10, direct=False):
        s = socket.create_connection((self.host, self._port(direct)), timeout=timeout * SLOW)
        return s

    # ---- lifecycle ----
    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("semad did not stop within %ss" % timeout)
        return self.wait_exit(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        try:
            self.stop()
        finally:
            self.kill()
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._proxy_done()

    def _proxy_done(self):
        """Hand the proxy back; raise if it saw a reply that breaks docs/openapi.yaml (also
        one no test read, such as the reply to a request whose client had left)."""
        p, self.proxy = self.proxy, None
        if p is not None:
            p.give_back()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        rc = self.proc.poll()
        try:
            rc = self.stop() if rc is None else self.wait_exit()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if exc[0] is None:
                self._proxy_done()
            elif self.proxy is not None:
                self.proxy.close()
                self.proxy = None
        if exc[0] is None and rc not in (0, None):
            raise AssertionError("semad exited with %s:\n%s" % (rc, "\n".join(self.log()[-30:])))
        return False


SemadProcess = Semad  # one semad process, also when SEMA_TEST_REDIS makes Semad a fleet


def do_request(c, method, path, body=None, headers=None):
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if body is not None and "Content-Type" not in h:
        # Behind the proxy a body is labelled text: prism parses a JSON body and sends
        # semad its own serialisation (a duplicate key, 1e400 or 2^53+1 would arrive as
        # another request); text it passes on as is. semad reads the body whatever its type.
        h["Content-Type"] = "text/plain; charset=utf-8" if PROXY else "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    check_reply(method + " " + path, r.status, hd, data)
    return r.status, hd, data


def read_response(sock_file):
    """Read one HTTP/1.1 response from a socket's makefile('rb'): (status, headers, body)."""
    line = sock_file.readline()
    if not line:
        raise EOFError("connection closed")
    status = int(line.split()[1])
    headers = {}
    while True:
        line = sock_file.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    body = sock_file.read(n) if n else b""
    check_reply("a raw request", status, headers, body)
    return status, headers, body


def raw_request(method, path, body=b"", headers=None):
    """The bytes of one request."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    h = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
    return ("%s %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n"
            % (method, path, h, len(body))).encode() + body


def one_instance(s):
    """One semad behind `s`: s itself, or the next instance of a fleet (SEMA_TEST_REDIS)."""
    return s.next() if hasattr(s, "next") else s


def metric(s, name):
    """The value of the unlabelled series `name` in semad's /metrics, or None without it."""
    st, _, body = s.request("GET", "/metrics")
    assert st == 200, st
    m = re.search(r"^%s (\d+)$" % re.escape(name), body.decode(), re.M)
    return int(m.group(1)) if m else None


def metrics_text(s):
    """The /metrics text of every instance behind `s` (one for a plain Semad)."""
    if hasattr(s, "metrics_text"):
        return s.metrics_text()
    return s.request("GET", "/metrics")[2].decode()


def wait_until(pred, timeout=5, what="condition"):
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def main(ns):
    """Run test_<argv[1]> (or every test) from the module namespace `ns`. Exits 77 (CTest's
    skip) when every test it ran was skipped."""
    names = sys.argv[1:] or sorted(k[5:] for k in ns if k.startswith("test_"))
    skipped = 0
    try:
        for n in names:
            fn = ns.get("test_" + n)
            if fn is None:
                print("no such test: " + n)
                sys.exit(2)
            t0 = time.monotonic()
            try:
                fn()
            except Skip as e:
                skipped += 1
                print("skip %s: %s" % (n, e))
                continue
            print("ok %s (%.2fs)" % (n, time.monotonic() - t0))
    finally:
        Proxy.close_all()
    if skipped == len(names):
        sys.exit(77)


# ---- the validating proxy (SEMA_TEST_OPENAPI_PROXY) ----

def prism_path():
    return os.path.join(source_dir(), "tests", "openapi", "node_modules", ".bin", "prism")


def check_reply(what, status, headers, body):
    """Behind the proxy: fail on a reply that breaks docs/openapi.yaml (prism's
    sl-violations header, warnings included: an undocumented status is only a warning),
    and on a reply prism made itself instead of semad (its problem types)."""
    if not PROXY:
        return
    v = headers.get("sl-violations")
    if v:
        raise AssertionError("%s: %d breaks docs/openapi.yaml: %s" % (what, status, v))
    if b"stoplight.io/prism/errors#" in body[:200]:
        raise AssertionError("%s: the validating proxy answered %d itself: %s"
                             % (what, status, body[:2000].decode("utf-8", "replace")))


try:  # resolved here: the child of a fork must not import
    import ctypes
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (ImportError, OSError, AttributeError):
    _prctl = None


def _die_with_parent():
    """In the child: end when the test process ends, even if it is killed (Linux)."""
    if _prctl is not None:
        _prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Relay:
    """A loopback TCP relay to one semad after another: prism's upstream, so that one prism
    serves every semad a test starts (prism takes seconds to start, semad milliseconds).
    Each accepted connection is joined to the current target."""

    def __init__(self):
        self.target = None
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=10)
                u.settimeout(None)
            except (OSError, TypeError):
                c.close()
                continue
            self._join(c, u)

    def _join(self, c, u):
        """Join the client `c` to the target `u`: a thread pumps each way."""
        ends = [2]
        lock = threading.Lock()
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=self._pump, args=(a, b, c, u, ends, lock),
                             daemon=True).start()

    @staticmethod
    def _pump(src, dst, c, u, ends, lock):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)  # pass the end on, as a half-close
        except OSError:
            pass
        with lock:
            ends[0] -= 1
            last = ends[0] == 0
        if last:
            c.close()
            u.close()

    def close(self):
        self.lsock.close()


# prism's start-up: a few seconds of Node.js, stretched past a minute on a machine whose two
# cores are shared many times over (the openapi.* cases have 300 s: cmake/SemaTests.cmake)
PRISM_START_S = 180


class Proxy:
    """`prism proxy --errors` for docs/openapi.yaml in front of a Relay. Request validation
    is off (--validate-request=false): the tests send bad requests on purpose, and prism
    would answer those itself; every reply is checked."""

    idle = []   # proxies whose semad stopped, ready for the next one
    every = []

    def __init__(self):
        self.relay = Relay()
        self.lines = []
        self.lock = threading.Lock()
        spec = os.path.join(source_dir(), "docs", "openapi.yaml")
        exe = prism_path()
        if not os.path.exists(exe):
            raise RuntimeError("%s is missing: scripts/deps.sh test installs it (npm ci in "
                               "tests/openapi)" % exe)
        cmd = [exe, "proxy", "--errors", "--validate-request=false", "--host", "127.0.0.1",
               "--port", "0", spec, "http://127.0.0.1:%d" % self.relay.port]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                     env=dict(os.environ, NO_COLOR="1", FORCE_COLOR="0"))
        Proxy.every.append(self)
        threading.Thread(target=self._read, daemon=True).start()
        self.port = self._wait_port(PRISM_START_S * SLOW)
        self.mark = 0

    def _read(self):
        for raw in self.proc.stdout:
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def log(self, since=0):
        with self.lock:
            return self.lines[since:]

    def _wait_port(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log():
                m = re.search(r"Prism is listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.close()
        raise RuntimeError("prism did not start:\n" + "\n".join(self.log()[-40:]))

    @classmethod
    def take(cls, host, port):
        p = cls.idle.pop() if cls.idle else cls()
        p.relay.target = (host, port)
        with p.lock:
            p.mark = len(p.lines)
        return p

    def settle(self, quiet=0.1, longest=3):
        """Wait until prism's log has been quiet for `quiet` s: it has checked and logged
        the last replies semad sent."""
        deadline = time.monotonic() + longest * SLOW
        n = len(self.log())
        while time.monotonic() < deadline:
            time.sleep(quiet)
            m = len(self.log())
            if m == n:
                return
            n = m

    def give_back(self):
        """Back to the pool; raises if prism saw a violation (or answered a request itself)
        since take()."""
        self.relay.target = None
        self.settle()
        bad = [l for l in self.log(self.mark)
               if "Violation" in l or "stoplight.io/prism/errors#" in l]
        if self.proc.poll() is not None:
            bad.append("prism exited with %s" % self.proc.returncode)
        if bad:
            self.close()
            raise AssertionError("replies that break docs/openapi.yaml (prism's log):\n  "
                                 + "\n  ".join(bad[:40]))
        Proxy.idle.append(self)

    def close(self):
        if self in Proxy.idle:
            Proxy.idle.remove(self)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.relay.close()

    @classmethod
    def close_all(cls):
        for p in list(cls.every):
            p.close()
        cls.every, cls.idle = [], []


atexit.register(Proxy.close_all)

REDIS = os.environ.get("SEMA_TEST_REDIS", "")
if REDIS not in ("", "0"):  # the suites on semad's Redis back end: see redis_fixture.py
    if PROXY:
        raise SystemExit("SEMA_TEST_REDIS and SEMA_TEST_OPENAPI_PROXY do not go together")
    import redis_fixture  # noqa: E402  (it imports this module, complete by now)
    Semad = redis_fixture.suite_fleet(int(REDIS))
CLUSTER = os.environ.get("SEMA_TEST_CLUSTER", "")
if CLUSTER not in ("", "0"):  # the suites on a Redis Cluster: see redis_fixture.py
    if PROXY or REDIS not in ("", "0"):
        raise SystemExit("SEMA_TEST_CLUSTER goes with neither SEMA_TEST_REDIS nor the proxy")
    import redis_fixture  # noqa: E402,F811
    Semad = redis_fixture.cluster_suite_fleet(int(CLUSTER))
