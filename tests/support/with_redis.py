#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""with_redis.py - run a command beside a real redis-server of its own.

    python3 with_redis.py PROGRAM [ARGS...]

Starts redis-server on a free loopback port with no persistence (--save '' --appendonly
no) in a temporary directory, runs PROGRAM with SEMA_TEST_ENGINE=redis://127.0.0.1:PORT
(the engine tests then run against the Redis back end: tests/unit/test_engine_util.h) and
SEMA_TEST_REDIS_PORT=PORT, stops Redis, and exits with PROGRAM's status. Exits 77 (skipped)
when redis-server is not installed."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start(tmp):
    """Start redis-server; returns (process, port). A port taken meanwhile: try another."""
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            if ping(port):
                return proc, port
            time.sleep(0.02)
        proc.kill()
        proc.wait()
    raise SystemExit("with_redis.py: redis-server did not start")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    if shutil.which("redis-server") is None:
        print("with_redis.py: redis-server is not installed (scripts/deps.sh test)")
        return 77
    tmp = tempfile.mkdtemp(prefix="sema-redis-")
    proc, port = start(tmp)
    env = dict(os.environ, SEMA_TEST_ENGINE="redis://127.0.0.1:%d" % port,
               SEMA_TEST_REDIS_PORT=str(port))
    try:
        return subprocess.call(sys.argv[1:], env=env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
