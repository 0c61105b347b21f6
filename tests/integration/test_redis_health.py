# SPDX-License-Identifier: MIT
"""test_redis_health.py - what semad on Redis says of its health: no "ready" before Redis
answered, /healthz answering 503 with a code while Redis was never reached, is gone or is
silent past the documented bound, a start (or a reload of the library) left unanswered
dropped past the command timeout,
counts that are those of the last answer (this instance's own changes at once, another's
within the bound), and a warning in the log for each loss.

Each case starts its own redis-server and semad instances on ephemeral loopback ports, and
skips when semad has no Redis back end. The bound is docs/redis.md's: /healthz says ok only
while Redis answered the instance within the last CONTACT_MAX_S."""
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_fixture as rf  # noqa: E402
import semad_fixture as fx  # noqa: E402

SLOW = fx.SLOW
CONTACT_MAX_S = 3.0  # ENGINE_CONTACT_MAX_MS: a heartbeat every 2 s and the command timeout


def health(s):
    st, body = s.json("GET", "/healthz")
    return st, body


def lines_with(s, text):
    return [line for line in s.log() if text in line]


def test_nothing_listening_is_not_ready_and_healthz_says_why():
    """semad started on a Redis address where nothing listens: its start line names the
    address, it warns that it cannot reach it, it never says "ready", and /healthz answers 503
    "starting" with code store_never_answered. Once a redis-server listens there, it says
    "ready" (naming the address) and /healthz answers 200."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r:
        r.kill()  # its port, with nothing listening
        addr = "127.0.0.1:%d" % r.port
        s = fx.Semad("--engine", r.url(), healthy=False, wrap=rf.wrap())
        with s:
            fx.wait_until(lambda: lines_with(s, "cannot reach " + addr), 10,
                          "the warning that Redis cannot be reached")
            start = lines_with(s, " starting (")
            assert start and ("engine redis " + addr) in start[0], s.log()
            st, body = health(s)
            assert st == 503 and body["status"] == "starting" and \
                body["code"] == "store_never_answered", (st, body)
            assert "contact_age_ms" not in body, body
            assert not lines_with(s, " ready ("), ("ready before Redis answered", s.log())
            r.start()
            fx.wait_until(lambda: health(s)[0] == 200, 10, "/healthz 200 once Redis answers")
            # the log is read from semad's stderr as it comes: the line may follow the answer
            ready = fx.wait_until(lambda: lines_with(s, " ready ("), 10, "the ready line")
            assert len(ready) == 1 and ("engine redis " + addr) in ready[0], s.log()
            assert s.log().index(ready[0]) > s.log().index(start[0])
            st, body = health(s)
            assert body["status"] == "ok" and 0 <= body["contact_age_ms"] <= \
                CONTACT_MAX_S * 1000, body


def test_a_host_name_is_resolved_off_the_loop_and_named_in_the_log():
    """redis://localhost:PORT: semad resolves the name (uv_getaddrinfo: hiredis would on the
    event loop), connects to its address, serves, and its start and ready lines name the
    address as it was given."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r:
        addr = "localhost:%d" % r.port
        s = fx.Semad("--engine", "redis://" + addr, wrap=rf.wrap())
        with s:
            assert health(s)[0] == 200
            st, body = s.json("PUT", "/v1/semaphores/h", {"capacity": 1})
            assert st == 201, (st, body)
            st, lease = s.json("POST", "/v1/semaphores/h/acquire", {})
            assert st == 200, (st, lease)
            ready = fx.wait_until(lambda: lines_with(s, " ready ("), 10, "the ready line")
            assert ("engine redis " + addr) in ready[0], s.log()


def test_silent_redis_at_the_start_is_dropped_past_the_timeout():
    """semad started on a Redis that accepts the connection but answers nothing (SIGSTOPped:
    the kernel still completes the handshake): /healthz answers 503 "starting"
    (store_never_answered); past the command timeout (?timeout=500) semad warns, once, that
    the address did not answer its setup, drops the connection and connects again after its
    backoff, each attempt a command timeout more. Once Redis runs again (SIGCONT) it says
    "ready" within a timeout and a backoff, and /healthz answers 200."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r:
        os.kill(r.proc.pid, signal.SIGSTOP)
        try:
            addr = "127.0.0.1:%d" % r.port
            s = fx.Semad("--engine", r.url() + "?timeout=500", healthy=False, wrap=rf.wrap())
            with s:
                said = addr + " did not answer the setup ("
                fx.wait_until(lambda: lines_with(s, said), 5, "the warning of the silent setup")
                st, body = health(s)
                assert st == 503 and body["code"] == "store_never_answered", (st, body)
                fx.wait_until(lambda: fx.metric(s, "semad_redis_command_timeouts_total") >= 2,
                              10, "a second attempt dropped past the timeout")
                assert len(lines_with(s, said)) == 1, s.log()  # (once until ready)
                assert not lines_with(s, " ready ("), s.log()
                t0 = time.monotonic()
                os.kill(r.proc.pid, signal.SIGCONT)
                # at most a timeout (the attempt under way) and a backoff (2 s and its jitter)
                fx.wait_until(lambda: health(s)[0] == 200, 0.5 + 3 + 2, "/healthz 200")
                took = time.monotonic() - t0
                fx.wait_until(lambda: lines_with(s, " ready ("), 10, "the ready line")
                print("ready %.2fs after Redis answered again" % took)
        finally:
            os.kill(r.proc.pid, signal.SIGCONT)


class SwallowingRelay(fx.Relay):
    """A relay to Redis that, while `swallow` is set, passes nothing more from semad on a
    connection once semad sent FUNCTION on it: a Redis that stops answering just as the
    library is loaded."""

    swallow = False

    class Gate:
        """Redis's end of one connection, as semad's bytes see it."""

        def __init__(self, relay, u):
            self.relay, self.u, self.silent = relay, u, False

        def sendall(self, data):
            self.silent = self.silent or (self.relay.swallow and b"FUNCTION" in data)
            if not self.silent:
                self.u.sendall(data)

        def shutdown(self, how):
            self.u.shutdown(how)

    def _join(self, c, u):
        ends, lock = [2], threading.Lock()
        for a, b in ((c, self.Gate(self, u)), (u, c)):
            threading.Thread(target=self._pump, args=(a, b, c, u, ends, lock),
                             daemon=True).start()


def test_silent_reload_of_the_library_is_dropped_past_the_timeout():
    """The library gone from Redis (FUNCTION FLUSH), semad loads it again when a call says
    so; a Redis that does not answer that reload (nor, after, the setup of the connections
    that follow) is dropped past the command timeout (?timeout=500), with a warning naming
    the reload, and /healthz says 503; once Redis answers again semad is back (200) and
    grants."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    relay = SwallowingRelay()
    relay.target = ("127.0.0.1", r.port)
    try:
        with r, rf.Fleet("redis://127.0.0.1:%d?timeout=500" % relay.port, 1) as fl:
            s = fl[0]
            assert s.request("PUT", "/v1/semaphores/l", {"capacity": 1})[0] == 201
            relay.swallow = True
            r.cli("FUNCTION", "FLUSH")
            s.json("POST", "/v1/semaphores/l/acquire", {"timeout_ms": 0})  # (a 503 likely)
            fx.wait_until(lambda: lines_with(s, "127.0.0.1:%d did not answer the library's "
                                                "reload (FUNCTION LOAD, hello) in 500 ms"
                                             % relay.port), 5, "the warning of the reload")
            fx.wait_until(lambda: health(s)[0] == 503, 3, "/healthz 503")
            relay.swallow = False
            fx.wait_until(lambda: health(s)[0] == 200, 0.5 + 3 + 2, "/healthz 200 again")
            st, lease = s.json("POST", "/v1/semaphores/l/acquire", {"ttl_ms": 60000})
            assert st == 200, (st, lease)
    finally:
        relay.close()


def test_killed_redis_turns_healthz_503_at_once_and_the_log_says_so():
    """Two instances on one Redis: an acquire on A shows in A's /healthz at once and in B's
    within the bound. kill -9 of Redis: both answer 503 store_unreachable (the closed connection
    is seen at once; the bound leaves room for a busy machine) and warn "lost". Redis started
    again without its data: both say 200 again, and warn that Redis lost its data."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r, rf.Fleet(r.url(), 2) as fl:
        a, b = fl[0], fl[1]
        assert a.request("PUT", "/v1/semaphores/h", {"capacity": 2})[0] == 201
        st, lease = a.json("POST", "/v1/semaphores/h/acquire", {"ttl_ms": 60000})
        assert st == 200, (st, lease)
        st, body = health(a)
        assert st == 200 and body["leases"] == 1 and body["semaphores"] == 1, body
        fx.wait_until(lambda: health(b)[1]["leases"] == 1, CONTACT_MAX_S + 2,
                      "B's count of leases within the bound")
        assert b.request("DELETE", "/v1/leases/" + lease["lease"])[0] == 204
        st, body = health(b)
        assert st == 200 and body["leases"] == 0, body
        r.kill()
        t0 = time.monotonic()
        for s in (a, b):
            fx.wait_until(lambda: health(s)[0] == 503, CONTACT_MAX_S, "/healthz 503")
            st, body = health(s)
            assert body["status"] == "unavailable" and body["code"] == "store_unreachable", body
        took = time.monotonic() - t0
        addr = "127.0.0.1:%d" % r.port
        for s in (a, b):
            fx.wait_until(lambda: lines_with(s, "redis: lost " + addr), 5, "the warning")
            assert [ln for ln in lines_with(s, "redis: lost ") if " warn: " in ln], s.log()
        r.start()
        for s in (a, b):
            fx.wait_until(lambda: health(s)[0] == 200, 20, "/healthz 200 again")
            fx.wait_until(lambda: lines_with(s, "Redis lost its data"), 10,
                          "the warning of the data lost")
        print("503 on both instances %.3fs after kill -9 of Redis" % took)


def test_paused_redis_turns_healthz_503_within_the_bound():
    """Redis that answers nothing (CLIENT PAUSE) while the connection stays up: /healthz
    answers 503 (store_not_answering, or store_unreachable once the command timeout drops the
    connection) within the bound, and 200 again once Redis answers."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r, rf.Fleet(r.url(), 1) as fl:
        s = fl[0]
        fx.wait_until(lambda: health(s)[0] == 200, 10, "healthy")
        t0 = time.monotonic()
        r.pause(int((CONTACT_MAX_S + 4) * 1000 * SLOW))
        fx.wait_until(lambda: health(s)[0] == 503, CONTACT_MAX_S + 1.0, "/healthz 503")
        took = time.monotonic() - t0
        st, body = health(s)
        assert body.get("code") in ("store_not_answering", "store_unreachable"), body
        assert took <= (CONTACT_MAX_S + 1.0) * SLOW, took
        fx.wait_until(lambda: health(s)[0] == 200, CONTACT_MAX_S + 20, "/healthz 200 again")
        print("503 %.2fs after Redis stopped answering" % took)


def _reload_library_if_counts_pending(port):
    """In one transaction: read the epoch hash's `lq` (set while the library's Lua state holds
    short-path changes to the count of leases not yet in the hash) and load the library again
    (FUNCTION LOAD REPLACE, as an instance's connect does), which drops that state. Returns
    whether `lq` was set, so the reload dropped changes the next call must count again."""
    code = rf.cli(port, "FUNCTION", "LIST", "LIBRARYNAME", "sema", "WITHCODE")
    code = code[code.index("#!lua"):].rstrip("\n")
    cmds = [["MULTI"], ["HGET", "sema:epoch", "lq"], ["FUNCTION", "LOAD", "REPLACE", code],
            ["EXEC"], ["QUIT"]]
    out = b""
    for c in cmds:
        out += b"*%d\r\n" % len(c)
        for a in c:
            a = a.encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sk:
        sk.sendall(out)
        got = b""
        while True:
            b = sk.recv(65536)
            if not b:
                break
            got += b
    m = re.search(rb"\*2\r\n(\$-1|\$\d+\r\n[^\r]*)\r\n\$4\r\nsema\r\n", got)
    assert m, got
    return m.group(1) != b"$-1"


def test_count_of_leases_survives_a_library_reload():
    """The short acquire and release keep their changes to the count of leases in the
    library's Lua state until a heartbeat writes them. Loading the library again (an
    instance's connect does) drops that state: the next call counts the leases again from
    the semaphores, so /healthz still says the right number (a lock key's lease included),
    and goes on counting the short paths' changes from there."""
    rf.need_redis_engine()
    r = rf.RedisServer()
    with r, rf.Fleet(r.url(), 1) as fl:
        a = fl[0]
        assert a.request("PUT", "/v1/semaphores/c", {"capacity": 50})[0] == 201
        assert a.json("POST", "/v1/locks/k/acquire", {"ttl_ms": 60000})[0] == 200
        live = []
        dropped = False
        for _ in range(40):  # (a heartbeat may write the changes just before the reload)
            for _ in range(3):
                st, lease = a.json("POST", "/v1/semaphores/c/acquire", {"ttl_ms": 60000})
                assert st == 200, (st, lease)
                live.append(lease["lease"])
            assert a.request("DELETE", "/v1/leases/" + live.pop(0))[0] == 204
            if _reload_library_if_counts_pending(r.port):
                dropped = True
                break
        assert dropped, "no reload found the short paths' changes pending"
        want = len(live) + 1
        # (the instance's own changes show at once: the count from Redis comes with the
        # heartbeat after the reload, which counts again and writes the hash)
        fx.wait_until(lambda: r.cli("HGET", "sema:epoch", "leases").strip() == str(want),
                      CONTACT_MAX_S + 2, "the count of leases in Redis after the reload")
        assert health(a)[1]["leases"] == want
        for lid in live[:2]:
            assert a.request("DELETE", "/v1/leases/" + lid)[0] == 204
        st, body = health(a)
        assert st == 200 and body["leases"] == want - 2, body
        fx.wait_until(lambda: r.cli("HGET", "sema:epoch", "leases").strip() == str(want - 2),
                      CONTACT_MAX_S + 2, "the heartbeat writing the count")


SILENT_DNS_TIMEOUT_S = 2  # resolv.conf's `timeout` for the name server that never answers


def in_silent_dns_namespace():
    """Inside the test's own user, mount and network namespace (SEMA_TEST_SILENT_DNS set): the
    loopback up, /etc/resolv.conf naming a name server on 127.0.0.1 that never answers, one
    attempt of SILENT_DNS_TIMEOUT_S. Returns its UDP socket: bound, never read."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    conf = os.path.join(os.environ["SEMA_TEST_SILENT_DNS"], "resolv.conf")
    with open(conf, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:%d attempts:1\n" % SILENT_DNS_TIMEOUT_S)
    subprocess.run(["mount", "--bind", conf, "/etc/resolv.conf"], check=True)
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    return dns


def test_a_name_server_that_never_answers_stalls_nothing():
    """A Redis host name (redis://, and a cluster's seed) whose name server never answers:
    semad's loop goes on meanwhile (/healthz answers 503 "starting" before the resolution has
    given up, which the log would say first were the name resolved on the loop), then it warns
    that it cannot resolve the name, naming it, and stops cleanly with another resolution under
    way. The name server is a UDP socket the test binds and never reads, in a network namespace
    of its own (an unprivileged user namespace: `unshare -rmn`), where /etc/resolv.conf is
    bound over with one naming it; skipped where user namespaces are not allowed."""
    rf.need_redis_engine()
    if "SEMA_TEST_SILENT_DNS" not in os.environ:
        unshare = shutil.which("unshare")
        if unshare is None or shutil.which("ip") is None or \
                subprocess.run([unshare, "-rmn", "true"], capture_output=True).returncode != 0:
            raise fx.Skip("no unprivileged user, mount and network namespaces here")
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run(rf.wrap() + [unshare, "-rmn", sys.executable,
                                            os.path.abspath(__file__),
                                            "a_name_server_that_never_answers_stalls_nothing"],
                               env=dict(os.environ, SEMA_TEST_SILENT_DNS=d),
                               capture_output=True, text=True, timeout=60 * SLOW)
        print(p.stdout + p.stderr)
        assert p.returncode == 0, "the case in its namespace failed (above)"
        return
    dns = in_silent_dns_namespace()
    name = "redis.sema-test-silent-dns"
    engines = (("redis://%s:6390?timeout=500" % name,
                "redis: cannot connect to %s:6390: cannot resolve it" % name),
               ("redis+cluster://%s:7390?timeout=500" % name,
                "redis cluster: cannot connect to %s:7390: cannot resolve it" % name))
    started = []
    try:
        for engine, said in engines:
            s = fx.Semad("--engine", engine, healthy=False, wrap=rf.wrap())
            started.append(s)
            st, body = health(s)
            assert st == 503 and body["status"] == "starting", (st, body)
            assert not lines_with(s, "cannot connect to"), \
                ("the resolution gave up before /healthz was answered", s.log())
        for s, (engine, said) in zip(started, engines):
            fx.wait_until(lambda: lines_with(s, said), SILENT_DNS_TIMEOUT_S * 3 + 5,
                          "the warning that the name cannot be resolved")
            assert health(s)[0] == 503
        for s in started:  # (another resolution may be under way: it is waited for)
            assert s.stop() == 0, s.log()
    finally:
        for s in started:
            s.close()
        dns.close()


if __name__ == "__main__":
    fx.main(globals())
