# SPDX-License-Identifier: MIT
"""semad_fixture.py - start the real semad on an ephemeral loopback port for a test.

Stdlib only. The program is $SEMAD (default build/bin/semad). Each Semad() gets its own
`mktemp -d` data directory, `--durability none` unless asked otherwise, waits for
/healthz, and is killed at the end (use it as a context manager).
"""
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

SCALE = float(os.environ.get("SEMA_TEST_SCALE", "1") or "1")
SLOW = 1.0 if SCALE >= 1 else 4.0  # sanitizer builds: allow more time


def semad_path():
    p = os.environ.get("SEMAD")
    if p:
        return p
    src = os.environ.get("SEMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    return os.path.join(src, "build", "bin", "semad")


class Semad:
    """One semad process. `args` are extra flags; `env` extra environment."""

    def __init__(self, *args, durability="none", env=None, data=None):
        self.tmp = tempfile.mkdtemp(prefix="semad-test-")
        self.data = data or os.path.join(self.tmp, "data")
        cmd = [semad_path(), "--listen", "127.0.0.1:0", "--data", self.data,
               "--durability", durability] + list(args)
        e = dict(os.environ)
        e.update(env or {})
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=e)
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()
        self.port = self._wait_port(10 * SLOW)
        self.host = "127.0.0.1"
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
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    return int(m.group(1))
            if self.proc.poll() is not None:
                self.reader.join(5 * SLOW)  # its last words say why
                break
            time.sleep(0.01)
        self.kill()
        raise RuntimeError("semad did not start: " + "\n".join(self.log()))

    def _wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("semad never became healthy")

    # ---- requests ----
    def conn(self, timeout=30):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout * SLOW)

    def request(self, method, path, body=None, headers=None, timeout=30):
        """One request on a fresh connection: (status, headers dict lower-case, body bytes)."""
        c = self.conn(timeout)
        try:
            return do_request(c, method, path, body, headers)
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, timeout=30):
        st, hd, data = self.request(method, path, body, headers, timeout)
        return st, (json.loads(data) if data else None)

    def url(self, path):
        return "http://%s:%d%s" % (self.host, self.port, path)

    def raw(self, timeout=10):
        s = socket.create_connection((self.host, self.port), timeout=timeout * SLOW)
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        rc = self.proc.poll()
        rc = self.stop() if rc is None else self.wait_exit()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if exc[0] is None and rc not in (0, None):
            raise AssertionError("semad exited with %s:\n%s" % (rc, "\n".join(self.log()[-30:])))
        return False


def do_request(c, method, path, body=None, headers=None):
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if body is not None and "Content-Type" not in h:
        h["Content-Type"] = "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


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


def wait_until(pred, timeout=5, what="condition"):
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def main(ns):
    """Run test_<argv[1]> (or every test) from the module namespace `ns`."""
    names = sys.argv[1:] or sorted(k[5:] for k in ns if k.startswith("test_"))
    for n in names:
        fn = ns.get("test_" + n)
        if fn is None:
            print("no such test: " + n)
            sys.exit(2)
        t0 = time.monotonic()
        fn()
        print("ok %s (%.2fs)" % (n, time.monotonic() - t0))
