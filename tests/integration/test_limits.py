# SPDX-License-Identifier: MIT
"""test_limits.py - semad's caps and connection handling against the real process: header,
body, name, semaphore and waiter caps, connection cap, slow and idle clients, keep-alive
and pipelining (also behind a parked request), disconnects while parked, SIGTERM."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402
from test_v1 import Parked, acquire, problem, put, waiting  # noqa: E402


def closed_by_server(sock, timeout=5):
    """True when the server closes the connection (EOF or reset) within `timeout`."""
    sock.settimeout(timeout * fx.SLOW)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_header_cap_431():
    with fx.Semad("--max-header-bytes", "1024") as s:
        st, hd, data = s.request("GET", "/healthz", headers={"X-Pad": "x" * 2000})
        assert st == 431, (st, data)
        assert s.request("GET", "/healthz", headers={"X-Pad": "x" * 500})[0] == 200
        st, hd, data = s.request("GET", "/v1/semaphores/" + "a" * 2000)
        assert st in (414, 431), st


def test_body_cap_413():
    with fx.Semad("--max-body-bytes", "100") as s:
        big = {"capacity": 1, "pad": "x" * 200}
        st, hd, data = s.request("PUT", "/v1/semaphores/b", big)
        assert st == 413 and hd["content-type"] == "application/problem+json", (st, hd)
        # chunked bodies are counted as they arrive (a proxy would wait for the whole body)
        sock = s.raw(direct=True)
        f = sock.makefile("rb")
        sock.sendall(b"PUT /v1/semaphores/b HTTP/1.1\r\nHost: t\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(5):
            try:
                sock.sendall(b"40\r\n" + b"x" * 64 + b"\r\n")
            except OSError:
                break
        st, hd, data = fx.read_response(f)
        assert st == 413, st
        sock.close()
        assert s.request("GET", "/v1/semaphores/b")[0] == 404  # nothing was created


def test_name_semaphore_and_waiter_caps():
    with fx.Semad("--max-name-bytes", "8", "--max-semaphores", "2",
                  "--max-waiters-per-semaphore", "1", "--max-waiters", "2") as s:
        assert problem(s, "PUT", "/v1/semaphores/abcdefghi", {"capacity": 1}) == \
            (400, "name_too_long")
        assert s.request("POST", "/semaphore", {"name": "abcdefghi", "value": 1})[0] == 400
        put(s, "a", 1)
        put(s, "b", 1)
        assert problem(s, "PUT", "/v1/semaphores/c", {"capacity": 1}) == (429, "limit_reached")
        acquire(s, "a")
        acquire(s, "b")
        p1 = Parked(s, "a", {})
        fx.wait_until(lambda: waiting(s, "a") == 1, what="park")
        assert problem(s, "POST", "/v1/semaphores/a/acquire", {}) == (429, "limit_reached")
        p2 = Parked(s, "b", {})
        fx.wait_until(lambda: waiting(s, "b") == 1, what="park")
        p1.close()
        p2.close()
        if not fx.PROXY:  # the proxy does not pass a client's disconnect on
            fx.wait_until(lambda: waiting(s, "a") == 0 and waiting(s, "b") == 0,
                          what="disconnected waiters to leave")


@fx.not_through_proxy("the cap counts semad's connections; the proxy keeps its own")
def test_connection_cap_503():
    with fx.Semad("--max-connections", "3") as s:
        held = [s.raw() for _ in range(3)]
        for h in held:  # make sure all three are accepted
            h.sendall(fx.raw_request("GET", "/healthz"))
            assert fx.read_response(h.makefile("rb"))[0] == 200
        extra = s.raw()
        st, hd, body = fx.read_response(extra.makefile("rb"))
        assert st == 503 and body == b"Too many connections", (st, body)
        assert closed_by_server(extra)
        held.pop().close()
        fx.wait_until(lambda: try_health(s), what="a free connection slot")
        for h in held:
            h.close()


def try_health(s):
    try:
        return s.request("GET", "/healthz", timeout=2)[0] == 200
    except OSError:
        return False


@fx.not_through_proxy("a slow client: the proxy reads a request whole before it forwards it")
def test_slow_header_timeout_408():
    with fx.Semad("--header-timeout", "300ms") as s:
        sock = s.raw()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        t0 = time.monotonic()
        st, hd, body = fx.read_response(sock.makefile("rb"))
        assert st == 408, st
        assert time.monotonic() - t0 < 5 * fx.SLOW
        assert closed_by_server(sock)
        # a slow body counts too
        sock = s.raw()
        sock.sendall(b"PUT /v1/semaphores/x HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\n{")
        assert fx.read_response(sock.makefile("rb"))[0] == 408
        sock.close()


@fx.not_through_proxy("a slow client: the proxy reads a request whole before it forwards it")
def test_drip_fed_request_cut_at_its_deadline_while_others_are_served():
    """A client sending one header byte a second does not push the deadline back: it gets
    408 --header-timeout after its first byte, and other clients are served meanwhile."""
    with fx.Semad("--header-timeout", "2500ms") as s:
        drip = s.raw()
        stop = threading.Event()
        sent = []

        def feed():
            for b in b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 60:
                try:
                    drip.sendall(bytes([b]))
                except OSError:
                    return
                sent.append(time.monotonic())
                if stop.wait(1.0):
                    return

        t = threading.Thread(target=feed, daemon=True)
        t0 = time.monotonic()
        t.start()
        served = 0
        while time.monotonic() - t0 < 2.0:  # others are served while it drips
            assert s.request("GET", "/healthz", timeout=5)[0] == 200
            served += 1
            time.sleep(0.2)
        st = fx.read_response(drip.makefile("rb"))[0]
        took = time.monotonic() - t0
        stop.set()
        assert st == 408, st
        assert served >= 3, served
        assert len(sent) >= 3, sent  # it kept sending until the cut
        assert 2.3 <= took < 2.5 + 4 * fx.SLOW, took
        assert closed_by_server(drip)
        t.join(5)
        st, _, body = s.request("GET", "/metrics")
        assert b"\nsemad_http_request_timeouts_total 1\n" in body


@fx.not_through_proxy("the cap counts semad's connections by address; the proxy has its own")
def test_connections_per_address_capped_503():
    with fx.Semad("--max-connections-per-ip", "2") as s:
        held = [s.raw() for _ in range(2)]
        for h in held:
            h.sendall(fx.raw_request("GET", "/healthz"))
            assert fx.read_response(h.makefile("rb"))[0] == 200
        extra = s.raw()
        st, hd, body = fx.read_response(extra.makefile("rb"))
        assert st == 503 and body == b"Too many connections from this address", (st, body)
        assert hd.get("retry-after") == "1"
        assert closed_by_server(extra)
        held.pop().close()
        fx.wait_until(lambda: try_health(s), what="a free slot for the address")
        held[0].close()
        st, _, body = s.request("GET", "/metrics")
        m = [l for l in body.decode().splitlines()
             if l.startswith("semad_http_connections_rejected_per_ip_total ")]
        assert m and int(m[0].split()[1]) >= 1, m
        assert b"\nsemad_http_connections_rejected_total 0\n" in body


@fx.not_through_proxy("keep-alive connections to semad are the proxy's")
def test_idle_keepalive_timeout():
    with fx.Semad("--idle-timeout", "300ms") as s:
        sock = s.raw()
        sock.sendall(fx.raw_request("GET", "/healthz"))
        assert fx.read_response(sock.makefile("rb"))[0] == 200
        assert closed_by_server(sock, timeout=5)
        # a parked request is not idle
        put(s, "p", 1)
        st, lease = acquire(s, "p")
        p = Parked(s, "p", {})
        time.sleep(0.8)
        assert not p.done.is_set()
        s.request("DELETE", "/v1/leases/" + lease["lease"])
        assert p.wait()[0] == 200
        p.close()


@fx.not_through_proxy("pipelining on one connection to semad")
def test_keepalive_and_pipelining_in_order():
    with fx.Semad() as s:
        sock = s.raw()
        f = sock.makefile("rb")
        batch = b"".join([
            fx.raw_request("PUT", "/v1/semaphores/q", {"capacity": 1}),
            fx.raw_request("GET", "/v1/semaphores/q"),
            fx.raw_request("POST", "/semaphore", {"name": "L", "value": 1}),
            fx.raw_request("GET", "/nope"),
            fx.raw_request("DELETE", "/v1/semaphores/q"),
            fx.raw_request("GET", "/semaphore/value/L"),
        ])
        sock.sendall(batch)
        got = [fx.read_response(f)[0] for _ in range(6)]
        assert got == [201, 200, 200, 404, 204, 200], got
        sock.close()


@fx.not_through_proxy("pipelining on one connection to semad")
def test_pipelined_requests_wait_behind_a_parked_one():
    with fx.Semad() as s:
        put(s, "pp", 1)
        st, lease = acquire(s, "pp")
        sock = s.raw()
        f = sock.makefile("rb")
        sock.sendall(fx.raw_request("POST", "/v1/semaphores/pp/acquire", {"owner": "p"}) +
                     fx.raw_request("GET", "/v1/semaphores/pp") +
                     fx.raw_request("GET", "/healthz"))
        fx.wait_until(lambda: waiting(s, "pp") == 1, what="park")
        s.request("DELETE", "/v1/leases/" + lease["lease"])
        st1, _, b1 = fx.read_response(f)
        st2, _, b2 = fx.read_response(f)
        st3, _, b3 = fx.read_response(f)
        assert (st1, st2, st3) == (200, 200, 200), (st1, st2, st3)
        assert json.loads(b1)["owner"] == "p"
        assert json.loads(b2)["held"] == 1  # answered after the grant, in order
        sock.close()


@fx.not_through_proxy("pipelining on one connection to semad")
def test_pipeline_overflow_closes_and_cancels():
    with fx.Semad("--max-pipeline-bytes", "1000") as s:
        put(s, "o", 1)
        acquire(s, "o")
        sock = s.raw()
        sock.sendall(fx.raw_request("POST", "/v1/semaphores/o/acquire", {}))
        fx.wait_until(lambda: waiting(s, "o") == 1, what="park")
        try:
            for _ in range(10):
                sock.sendall(fx.raw_request("GET", "/healthz") * 20)
        except OSError:
            pass
        assert closed_by_server(sock)
        fx.wait_until(lambda: waiting(s, "o") == 0, what="the waiter to be cancelled")


@fx.not_through_proxy("a client's disconnect (prism does not pass it on)")
def test_disconnect_while_parked_frees_the_slot_at_once():
    with fx.Semad() as s:
        put(s, "dc", 2)
        st, lease = acquire(s, "dc")
        heavy = Parked(s, "dc", {"weight": 2})  # head of the queue, blocks the follower
        fx.wait_until(lambda: waiting(s, "dc") == 1, what="park")
        follower = Parked(s, "dc", {"weight": 1})
        fx.wait_until(lambda: waiting(s, "dc") == 2, what="park 2")
        heavy.close()
        st, got = follower.wait()  # granted as soon as the head left
        assert st == 200 and got["weight"] == 1, got
        follower.close()


def waiters_leave_as_they_are_granted(durability):
    """n waiters park on a semaphore held whole by one lease; semad is stopped (SIGSTOP);
    the lease is released and then every waiter's client closes its connection; semad goes
    on. It reads the release first (its socket was ready first) and grants all n, so every
    grant is made for a client already gone, whose close semad has not read yet. Returns
    semad's count of undelivered grants for the caller to check."""
    n = 100
    with fx.Semad(durability=durability) as s:
        put(s, "fin", n)
        st, holder = acquire(s, "fin", weight=n, ttl_ms=600000)
        assert st == 200, holder
        waiters = []
        for _ in range(n):
            sock = s.raw(direct=True)
            sock.sendall(fx.raw_request("POST", "/v1/semaphores/fin/acquire",
                                        {"ttl_ms": 600000}))
            waiters.append(sock)
        fx.wait_until(lambda: waiting(s, "fin") == n, what="%d waiters to park" % n)
        rel = s.raw(direct=True)
        rf = rel.makefile("rb")
        rel.sendall(fx.raw_request("GET", "/healthz"))  # accepted and read before the stop
        assert fx.read_response(rf)[0] == 200
        os.kill(s.proc.pid, signal.SIGSTOP)
        try:
            rel.sendall(fx.raw_request("DELETE", "/v1/leases/" + holder["lease"]))
            for sock in reversed(waiters):  # the first granted close last
                sock.close()
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        assert fx.read_response(rf)[0] == 204
        rel.close()

        def settled():
            sem = s.json("GET", "/v1/semaphores/fin")[1]
            return sem["held"] == 0 and sem["waiting"] == 0 and sem
        sem = fx.wait_until(settled, timeout=10, what="every unit back (the ttl is 600 s)")
        assert sem["available"] == n, sem
        st, lease = acquire(s, "fin", weight=n, timeout_ms=0)
        assert st == 200, lease
        return fx.metric(s, "semad_http_undelivered_grants_total")


@fx.not_through_proxy("a client's disconnect (prism does not pass it on)")
def test_grants_to_clients_that_left_are_given_back_at_once():
    """Without a store, each grant's reply is written as the release is applied: each looks
    for its client's close first (the FIN watch) and gives the units back at once, not
    after the ttl. 100 closes are more than one read of the FIN watch reports (64), and the
    first granted closed last, so the looks fall back to reading each socket too."""
    undelivered = waiters_leave_as_they_are_granted("none")
    assert undelivered == 100, undelivered


@fx.not_through_proxy("a client's disconnect (prism does not pass it on)")
def test_grants_waiting_for_their_commit_are_given_back_when_their_clients_leave():
    """With the strict store the grants wait for their group commit, and semad reads the
    closes meanwhile: each close cancels its grant, which gives the units back."""
    waiters_leave_as_they_are_granted("strict")


@fx.not_through_proxy("malformed HTTP (the proxy answers it itself)")
def test_malformed_request_400_and_close():
    with fx.Semad() as s:
        sock = s.raw()
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        st, hd, body = fx.read_response(sock.makefile("rb"))
        assert st == 400, st
        assert closed_by_server(sock)
        assert s.request("GET", "/healthz")[0] == 200


@fx.not_through_proxy("Expect: 100-continue is answered by the proxy")
def test_expect_100_continue():
    with fx.Semad() as s:
        sock = s.raw()
        f = sock.makefile("rb")
        body = json.dumps({"capacity": 2}).encode()
        sock.sendall(b"PUT /v1/semaphores/e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        assert f.readline().startswith(b"HTTP/1.1 100")
        assert f.readline() == b"\r\n"
        sock.sendall(body)
        assert fx.read_response(f)[0] == 201
        sock.close()


def test_sigterm_answers_parked_503_and_exits_0():
    s = fx.Semad()
    try:
        put(s, "t", 1)
        acquire(s, "t")
        parked = [Parked(s, "t", {}) for _ in range(3)]
        fx.wait_until(lambda: waiting(s, "t") == 3, what="three parked")
        idle = s.raw(direct=True)  # semad's own connection: it closes it
        s.proc.send_signal(signal.SIGTERM)
        for p in parked:
            st, body = p.wait()
            assert st == 503 and body["code"] == "shutting_down", (st, body)
        assert closed_by_server(idle)
        assert s.wait_exit(10) == 0  # also reads the log to its end
        assert any("SIGTERM" in line for line in s.log()), s.log()
    finally:
        s.close()


def test_cli_help_version_env_and_bad_flags():
    exe = fx.semad_path()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.startswith("semad "), out
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for var in ("SEMA_LISTEN", "SEMA_DATA", "SEMA_DURABILITY", "SEMA_MAX_CONNECTIONS",
                "SEMA_MAX_HEADER_BYTES", "SEMA_MAX_BODY_BYTES", "SEMA_MAX_NAME_BYTES",
                "SEMA_MAX_SEMAPHORES", "SEMA_MAX_WAITERS_PER_SEMAPHORE", "SEMA_MAX_WAITERS",
                "SEMA_HEADER_TIMEOUT", "SEMA_IDLE_TIMEOUT", "SEMA_DEFAULT_TTL", "SEMA_MAX_TTL",
                "SEMA_LOCK_READERS"):
        assert var in out.stdout, var
    assert "default 127.0.0.1:7070" in out.stdout
    out = subprocess.run([exe, "--max-connections", "lots"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2 and "--max-connections" in out.stderr, out
    out = subprocess.run([exe, "--listen", "0.0.0.0:99999"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode != 0 and "port" in out.stderr, out
    # every flag is also a variable: the body cap from SEMA_MAX_BODY_BYTES
    with fx.Semad(env={"SEMA_MAX_BODY_BYTES": "50"}) as s:
        assert s.request("PUT", "/v1/semaphores/e", {"capacity": 1, "p": "x" * 80})[0] == 413


@fx.not_through_proxy("semad answers no HTTP request here")
def test_bad_flags_say_what_is_accepted():
    exe = fx.semad_path()

    def semad(*args, env=None):
        return subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=10,
                              env=dict(os.environ, **(env or {})))
    out = semad("--durability", "fast")
    assert out.returncode == 2 and "strict, relaxed, none" in out.stderr, out
    out = semad(env={"SEMA_LOG_REQUESTS": "yes"})
    assert out.returncode == 2 and "1, true, 0, false" in out.stderr, out
    out = semad("--lsten", "127.0.0.1:0")
    assert out.returncode == 2 and "did you mean --listen?" in out.stderr, out
    out = semad("--bogus-thing")
    assert out.returncode == 2 and "did you mean" not in out.stderr, out
    out = semad("-h")
    assert out.returncode == 0 and out.stdout == semad("--help").stdout, out


@fx.not_through_proxy("semad answers no HTTP request here")
def test_store_failure_exits_nonzero_naming_the_problem():
    tmp = tempfile.mkdtemp(prefix="semad-test-")
    try:
        blocker = os.path.join(tmp, "not-a-dir")
        with open(blocker, "w") as f:
            f.write("x")
        out = subprocess.run([fx.semad_path(), "--listen", "127.0.0.1:0", "--data", blocker,
                              "--durability", "strict"], capture_output=True, text=True,
                             timeout=30 * fx.SLOW)
        assert out.returncode != 0, out
        assert "not-a-dir" in out.stderr, out.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_strict_store_survives_restart_and_checks_clean():
    tmp = tempfile.mkdtemp(prefix="semad-test-")
    data = os.path.join(tmp, "data")
    try:
        with fx.Semad(durability="strict", data=data) as s:
            put(s, "kept", 3)
            assert s.request("POST", "/semaphore", {"name": "legacy", "value": 2})[0] == 200
            st, lease = acquire(s, "kept", ttl_ms=60000)
            assert st == 200
        out = subprocess.run([fx.semad_path(), "--check", data], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out
        with fx.Semad(durability="strict", data=data) as s:
            st, sem = s.json("GET", "/v1/semaphores/kept")
            assert st == 200 and sem["capacity"] == 3 and sem["held"] == 1, sem
            assert s.json("GET", "/v1/leases/" + lease["lease"])[0] == 200
            assert s.json("GET", "/semaphore/value/legacy") == (200, {"name": "legacy",
                                                                     "value": 2})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@fx.not_through_proxy("a client's disconnect (prism does not pass it on)")
def test_grant_to_a_departed_client_is_released_not_leaked():
    """Race a release against the parked client's disconnect: whichever semad sees first,
    the units must come back at once (cancel, or release of the undelivered grant), long
    before the lease's 60 s ttl."""
    with fx.Semad() as s:
        put(s, "g", 1)
        holder = s.raw()
        hf = holder.makefile("rb")
        for i in range(20):
            holder.sendall(fx.raw_request("POST", "/v1/semaphores/g/acquire", {"ttl_ms": 60000}))
            st, _, data = fx.read_response(hf)
            assert st == 200, data
            lease = json.loads(data)["lease"]
            p = Parked(s, "g", {"ttl_ms": 60000})
            fx.wait_until(lambda: waiting(s, "g") == 1, what="park")
            release = fx.raw_request("DELETE", "/v1/leases/" + lease)
            p.close()
            holder.sendall(release)
            assert fx.read_response(hf)[0] == 204
            fx.wait_until(lambda: s.json("GET", "/v1/semaphores/g")[1]["held"] == 0,
                          timeout=5, what="the departed client's units to come back")
        holder.close()
        print("undelivered grants released: %s"
              % fx.metric(s, "semad_http_undelivered_grants_total"))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@fx.not_through_proxy("a client that never reads: the proxy buffers for it")
def test_client_that_never_reads_replies_is_bounded():
    """Pipelined requests from a client that never reads: semad stops parsing once its reply
    backlog is full, buffers up to --max-pipeline-bytes more, then closes the connection."""
    with fx.Semad("--max-pipeline-bytes", "65536") as s:
        put(s, "big", 1)
        sock = s.raw()
        sock.settimeout(10 * fx.SLOW)
        req = fx.raw_request("GET", "/metrics") * 100
        sent, closed = 0, False
        try:
            while sent < 64 << 20:
                sock.sendall(req)
                sent += len(req)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        except socket.timeout:
            closed = closed_by_server(sock, timeout=5)
        assert closed, "semad kept accepting %d bytes from a client that never reads" % sent
        assert rss_kib(s.proc.pid) < 64 * 1024, rss_kib(s.proc.pid)
        assert s.request("GET", "/healthz")[0] == 200


def park(s, socks, total):
    """Parks waiters on "m" (each on its own connection, kept in socks) until total are parked,
    and waits until semad reports them all parked."""
    for i in range(len(socks), total):
        k = s.raw()
        k.sendall(fx.raw_request("POST", "/v1/semaphores/m/acquire", {"owner": "w%d" % i}))
        socks.append(k)
    fx.wait_until(lambda: s.json("GET", "/healthz")[1]["parked"] == total, timeout=30,
                  what="%d parked waiters" % total)


@fx.not_through_proxy("semad's memory per connection")
def test_parked_waiters_cost_at_most_2_kib_each():
    """Goal from issue 3: 10,000 parked waiters at <= 2 KiB each (semad's resident memory,
    connection + parser + request + engine waiter). Measured with 3,000 here."""
    if os.environ.get("SEMA_SANITIZE"):
        sys.exit(77)  # sanitizers change every allocation's size
    import resource
    n, warm = 3000, 300
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < warm + n + 100:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, warm + n + 200), hard))
        except ValueError:
            sys.exit(77)
    with fx.Semad("--max-connections-per-ip", "0") as s:  # every waiter comes from 127.0.0.1
        put(s, "m", 1)
        acquire(s, "m")
        socks = []
        try:
            # The cost per waiter is the growth between two counts of parked waiters, each
            # sampled once semad reports them all parked, so what semad does once (the first
            # waiter's code paths, the /healthz and /metrics replies) is in both samples. The
            # bound is on the bytes the allocator handed out (semad_heap_in_use_bytes, chunk
            # headers included): how busy the machine is moves only how semad's reads and
            # replies interleave, and with it where freed chunks lie in the arena and how many
            # pages that touches (resident growth seen from 2,041 to 2,056 B a waiter). The
            # resident growth is held to the bound plus that layout's share.
            park(s, socks, warm)
            before = (fx.metric(s, "semad_heap_in_use_bytes"), rss_kib(s.proc.pid))
            park(s, socks, warm + n)
            after = (fx.metric(s, "semad_heap_in_use_bytes"), rss_kib(s.proc.pid))
            resident = (after[1] - before[1]) * 1024.0 / n
            if before[0] is None:  # (an allocator without mallinfo2: resident only)
                print("%.0f bytes per parked waiter (resident)" % resident)
                assert resident <= 2048, "%.0f bytes per parked waiter" % resident
                return
            heap = (after[0] - before[0]) / float(n)
            print("%.1f bytes per parked waiter (%.0f resident)" % (heap, resident))
            assert heap <= 2048, "%.0f bytes per parked waiter" % heap
            assert resident <= 2048 + 64, "%.0f resident bytes per parked waiter" % resident
        finally:
            for k in socks:
                k.close()


@fx.not_through_proxy("connections to semad itself")
def test_memory_of_a_burst_of_connections_goes_back_once_they_are_gone():
    """1,000 connections, a request each, then closed: the allocator keeps what they freed
    (in the middle of its heap, where it cannot shrink), until the periodic trim (10 s) gives
    it back to the system."""
    if os.environ.get("SEMA_SANITIZE"):
        sys.exit(77)  # a sanitizer's allocator keeps freed memory its own way, and no trim runs
    with fx.Semad() as s:
        s.request("GET", "/healthz")
        time.sleep(0.2)
        before = rss_kib(s.proc.pid)
        socks = [s.raw() for _ in range(1000)]
        for k in socks:
            k.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        for k in socks:
            assert fx.read_response(k.makefile("rb"))[0] == 200
        peak = rss_kib(s.proc.pid)
        for k in socks:
            k.close()
        fx.wait_until(lambda: fx.metric(s, "semad_http_connections") == 1, timeout=10,
                      what="the burst's connections closed")
        assert peak - before >= 1024, (before, peak)  # else there is nothing to give back
        # within three trim periods the memory is back (a trim, or the allocator's own return
        # of what it had mapped apart), or what is kept is below the trim's threshold: semad
        # trims once 1 MiB more is free, and on a busy machine a burst may free less than that
        def back():
            free = fx.metric(s, "semad_heap_free_bytes") or 0
            return rss_kib(s.proc.pid) - before < 512 or free < 1 << 20
        try:
            fx.wait_until(back, timeout=30, what="the burst's memory back")
        except AssertionError:
            raise AssertionError((before, peak, rss_kib(s.proc.pid),
                                  fx.metric(s, "semad_heap_trims_total"),
                                  fx.metric(s, "semad_heap_free_bytes")))


@fx.not_through_proxy("the connection's end (the proxy answers HTTP/1.0 and Connection: close itself)")
def test_http10_and_connection_close_end_the_connection():
    with fx.Semad() as s:
        for head in (b"GET /healthz HTTP/1.0\r\n\r\n",
                     b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"):
            sock = s.raw()
            sock.sendall(head)
            st, hd, body = fx.read_response(sock.makefile("rb"))
            assert st == 200 and hd["connection"] == "close", (st, hd)
            assert closed_by_server(sock)
            sock.close()


@fx.not_through_proxy("an event stream")
def test_event_stream_heartbeat():
    with fx.Semad("--sse-heartbeat", "100ms") as s:
        put(s, "hb", 1)
        sock = s.raw()
        f = sock.makefile("rb")
        sock.sendall(b"GET /v1/semaphores/hb/events HTTP/1.1\r\nHost: t\r\n\r\n")
        lines = [f.readline() for _ in range(12)]
        assert b": ping\n" in lines, lines
        sock.close()


@fx.not_through_proxy("reads semad's own log about a connection the proxy would hold")
def test_log_level_debug_shows_a_client_that_left_mid_request():
    # The same half request to two semads: only --log-level debug logs the client's exit;
    # the default (info) drops debug lines.
    line = "client closed in the middle of a request"
    for level, logged in (("debug", True), (None, False)):
        args = ("--log-level", level) if level else ()
        with fx.Semad(*args) as d:
            with socket.create_connection(("127.0.0.1", d.port)) as s:
                s.sendall(b"GET /v1/semaphores HTTP/1.1\r\nHost: x\r\n")
            # a whole request after it: its reply means semad has read the close before it
            assert d.request("GET", "/healthz", direct=True)[0] == 200
            if logged:
                fx.wait_until(lambda: any(line in x for x in d.log()), 5 * fx.SLOW, "the line")
            else:
                assert not any(line in x for x in d.log()), d.log()
    out = subprocess.run([fx.semad_path(), "--log-level", "loud"], capture_output=True,
                         text=True, timeout=10 * fx.SLOW)
    assert out.returncode == 2 and "one of debug, info, warn, error" in out.stderr, out.stderr


if __name__ == "__main__":
    fx.main(globals())
