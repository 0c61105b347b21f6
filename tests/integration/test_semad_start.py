#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_semad_start.py - what semad does with its flags before it serves: a port that is
taken leaves no data store behind, flags of other servers (--port) point at --listen, and a
Redis address without a port takes Redis's (6379, 26379 for a Sentinel)."""
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402


def semad(*args, timeout=30):
    return subprocess.run([fx.semad_path()] + list(args), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout * fx.SLOW)


@fx.not_through_proxy("no HTTP request")
def test_a_taken_port_leaves_no_data_store():
    with socket.socket() as taken, tempfile.TemporaryDirectory() as tmp:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        data = os.path.join(tmp, "sema-data")
        for durability in ("strict", "relaxed"):
            p = semad("--listen", "127.0.0.1:%d" % taken.getsockname()[1], "--data", data,
                      "--durability", durability)
            assert p.returncode == 1 and "address already in use" in p.stderr, p
            assert not os.path.exists(data), os.listdir(data)
        # and one that can listen makes it, as before
        with fx.Semad(durability="strict", data=data):
            assert {"sema.db", "LOCK"} <= set(os.listdir(data)), os.listdir(data)


@fx.not_through_proxy("no HTTP request")
def test_flags_of_other_servers_point_at_listen():
    for flag in (["--port", "7071"], ["--port=7071"], ["--host", "0.0.0.0"], ["--bind", "x"]):
        p = semad(*flag)
        assert p.returncode == 2, (flag, p)
        assert "--listen HOST:PORT" in p.stderr, (flag, p.stderr)
    p = semad("--lsten", "x")
    assert p.returncode == 2 and "did you mean --listen?" in p.stderr, p.stderr


def first_log_line_with(args, text, timeout=10):
    """Start semad with `args`, return its first stderr line that holds `text` (or fail)."""
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen([fx.semad_path(), "--listen", "127.0.0.1:0", "--data", tmp] + args,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + timeout * fx.SLOW
            seen = []
            for line in p.stderr:
                seen.append(line)
                if text in line:
                    return line
                if time.monotonic() > deadline:
                    break
            raise AssertionError("no line with %r in %s" % (text, seen))
        finally:
            p.kill()
            p.wait()
            p.stderr.close()


@fx.not_through_proxy("no HTTP request")
def test_a_redis_address_without_a_port_takes_redis_s():
    if not rf.redis_engine_built():
        raise fx.Skip("this semad was built without the Redis back end")
    # a host that never resolves (RFC 6761): the log names the address semad tries
    line = first_log_line_with(["--engine", "redis://no-such-host.invalid"],
                               "no-such-host.invalid:")
    assert "no-such-host.invalid:6379" in line, line
    line = first_log_line_with(["--engine", "redis+sentinel://no-such-host.invalid/main"],
                               "no-such-host.invalid:")
    assert "no-such-host.invalid:26379" in line, line
    for bad in ("redis://[::1", "redis://host:", "redis://host:0", "redis://:6379"):
        p = semad("--listen", "127.0.0.1:0", "--engine", bad)
        assert p.returncode != 0 and "bad Redis address" in p.stderr, (bad, p)
        assert "HOST[:PORT]" in p.stderr, p.stderr


@fx.not_through_proxy("no HTTP request")
def test_tls_to_redis_is_refused_naming_the_reason():
    if not rf.redis_engine_built():
        raise fx.Skip("this semad was built without the Redis back end")
    for url in ("rediss://127.0.0.1", "rediss+cluster://127.0.0.1:7000",
                "redis://127.0.0.1?tls=1", "redis+sentinel://127.0.0.1/m?ssl=true"):
        p = semad("--listen", "127.0.0.1:0", "--engine", url)
        assert p.returncode != 0, (url, p)
        assert "TLS to Redis" in p.stderr and "hiredis 0.14" in p.stderr, (url, p.stderr)
        assert "no TLS" in p.stderr, (url, p.stderr)


def make_run(port, tmp, timeout=20):
    """scripts/run.sh (what `make run` starts) on 127.0.0.1:port: the process, stderr piped."""
    build = os.path.dirname(os.path.dirname(fx.semad_path()))
    env = dict(os.environ, SEMA_LISTEN="127.0.0.1:%d" % port, SEMA_DATA=os.path.join(tmp, "d"))
    return subprocess.Popen(["bash", os.path.join(fx.source_dir(), "scripts", "run.sh"), build],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def test_make_run_says_how_to_change_the_port_once_semad_listens():
    tmp = tempfile.mkdtemp(prefix="sema-run-")
    with socket.socket() as taken:  # a port in use: semad's reason, and no banner
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        p = make_run(taken.getsockname()[1], tmp)
        err = p.communicate(timeout=20 * fx.SLOW)[1]
        assert p.returncode == 1 and "cannot listen" in err, (p.returncode, err)
        assert "serving" not in err and "Ctrl-C" not in err, err
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    p = make_run(port, tmp)
    lines = []
    try:
        while not any("SEMA_LISTEN" in x for x in lines):
            line = p.stderr.readline()
            assert line, "run.sh ended: %s" % "".join(lines)
            lines.append(line)
        text = "".join(lines)
        assert text.index(" ready ") < text.index("serving http://127.0.0.1:%d/" % port), text
        assert "SEMA_LISTEN=127.0.0.1:7080 make run" in text, text
    finally:
        p.send_signal(2)  # Ctrl-C
        rest = p.communicate(timeout=20 * fx.SLOW)[1]
    assert p.returncode == 0 and "stopped" in rest, (p.returncode, rest)


if __name__ == "__main__":
    fx.main(globals())
