# SPDX-License-Identifier: MIT
"""test_bench.py - `sema bench` and the bench peers against real servers: every mode completes
exactly what it was asked, leaves no lease behind (nor a semaphore it made), and reports what
the server saw."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import semad_fixture as fx  # noqa: E402

BUILD = os.environ.get("SEMA_BUILD_DIR") or os.path.join(
    os.environ.get("SEMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
    "build")
SEMA = os.environ.get("SEMA_BIN") or os.path.join(BUILD, "bin", "sema")


def sema_bench(server, *args, timeout=60, expect=0):
    """Runs `sema bench --json` and returns its parsed report."""
    p = subprocess.run([SEMA, "bench", "--json", "-s", server] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=timeout * fx.SLOW)
    assert p.returncode == expect, (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout) if expect == 0 else p


def state(s, name):
    st, body = s.json("GET", "/v1/semaphores/" + name)
    assert st == 200, (st, body)
    return body


def make(s, name, capacity):
    """A semaphore made before the run, which bench keeps (the tests read it after)."""
    assert s.request("PUT", "/v1/semaphores/" + name, {"capacity": capacity})[0] == 201


def names(s):
    st, body = s.json("GET", "/v1/semaphores")
    assert st == 200, (st, body)
    return [x["name"] for x in body["semaphores"]]


def test_pairs_count():
    """-n N runs exactly N acquire+release pairs and gives every unit back."""
    with fx.Semad() as s:
        make(s, "p", 20)
        r = sema_bench(s.url(""), "-c", 20, "-n", 2000, "--name", "p")
        assert r["ops"] == 2000, r
        assert r["errors"] == 0, r
        assert r["status"] == {"200": 2000, "204": 2000}, r
        st = state(s, "p")
        assert st["capacity"] == 20 and st["held"] == 0 and st["available"] == 20, st
        assert st["fence"] == 2000, st


def test_pairs_contended_parks_and_completes():
    """More connections than units: acquires park, and every pair still completes."""
    with fx.Semad() as s:
        make(s, "q-0", 3)
        make(s, "q-1", 3)
        r = sema_bench(s.url(""), "-c", 12, "--capacity", 3, "-n", 600, "--name", "q", "-k", 2)
        assert r["ops"] == 600 and r["errors"] == 0, r
        for name in ("q-0", "q-1"):
            st = state(s, name)
            assert st["capacity"] == 3 and st["held"] == 0 and st["waiting"] == 0, st


def test_pairs_on_several_semaphores_tenants_and_a_rate():
    """--all takes every semaphore in one request (a fence on each per pair), --tenants names
    a tenant per connection, --tenant-max/--sem-rate give the semaphores made their limits;
    every unit comes back, and the semaphores made are deleted."""
    with fx.Semad() as s:
        make(s, "m-0", 8)
        make(s, "m-1", 8)
        r = sema_bench(s.url(""), "-c", 8, "-n", 400, "--name", "m", "-k", 2, "--all",
                       "--tenants", 3)
        assert r["ops"] == 400 and r["errors"] == 0, r
        assert r["status"] == {"200": 400, "204": 400}, r
        for name in ("m-0", "m-1"):
            st = state(s, name)
            assert st["held"] == 0 and st["fence"] >= 400, st
        # contended (capacity 2 for 6 connections), with a cap per tenant and a rate that binds
        r = sema_bench(s.url(""), "-c", 6, "-n", 60, "--name", "t", "--capacity", 2,
                       "--tenants", 3, "--tenant-max", 1, "--sem-rate", 200, "--sem-burst", 2)
        assert r["ops"] == 60 and r["errors"] == 0, r
        # 60 grants at most 2 + 200/s: 0.29 s, less the millisecond semad's loop clock rounds to
        # and the report's three decimals
        assert r["seconds"] >= 58 / 200 - 0.002, r
        assert "t" not in names(s)
        p = sema_bench(s.url(""), "-k", 1, "--all", expect=2)
        assert "--all is for pairs, with -k from 2 to 16" in p.stderr, p.stderr


def test_duration_releases_in_flight_leases():
    """A timed run stops issuing at the deadline and still releases what it holds."""
    with fx.Semad() as s:
        make(s, "d", 16)
        r = sema_bench(s.url(""), "-c", 8, "-d", "500ms", "-w", 2, "--name", "d")
        assert r["ops"] > 0 and r["errors"] == 0, r
        assert 0.4 < r["seconds"] < 5, r
        st = state(s, "d")
        assert st["capacity"] == 16 and st["held"] == 0, st


def test_mix_touches_every_kind_of_state_and_leaves_none():
    """-m mix runs every kind of operation, each answer as its step expects; once the run
    is over and its short ttls and keepalives have passed, nothing it made is left."""
    with fx.Semad() as s:
        r = sema_bench(s.url(""), "-m", "mix", "-c", 10, "-n", 1500, "--name", "m")
        assert r["errors"] == 0 and r["ops"] == 1500, r
        assert set(r["mix"]) == {"pair", "renew", "retry", "lock", "expire", "poll", "ticket",
                                 "stream", "churn"}, r
        assert all(n > 0 for n in r["mix"].values()) and sum(r["mix"].values()) == 1500, r
        assert r["status"].get("409", 0) > 0, r  # long-polls that timed out
        for name in ("semad_leases", "semad_tickets", "semad_lock_keys", "semad_event_streams",
                     "semad_parked_waiters"):
            fx.wait_until(lambda: fx.metric(s, name) == 0, timeout=10, what=name + " at 0")
        # m and m-full, which it made, are deleted at the end; the churn's as it goes
        assert s.json("GET", "/v1/semaphores")[1]["semaphores"] == []
        for name in ("semad_expirations_total", "semad_timeouts_total",
                     "semad_tickets_created_total"):
            assert fx.metric(s, name) > 0, name


def test_rate_paces_starts_and_reports_intervals():
    """--rate R starts R operations a second whatever the answers allow; --interval prints
    one JSON line per interval before the report."""
    with fx.Semad() as s:
        p = subprocess.run([SEMA, "bench", "--json", "-s", s.url(""), "-c", "4", "-d", "2s",
                            "--rate", "200", "--interval", "500ms", "--name", "r"],
                           capture_output=True, text=True, timeout=60 * fx.SLOW)
    assert p.returncode == 0, (p.stdout, p.stderr)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    ticks, report = lines[:-1], lines[-1]
    assert 3 <= len(ticks) <= 4 and all("interval" in t for t in ticks), lines
    assert [t["interval"] for t in ticks] == list(range(1, len(ticks) + 1)), ticks
    assert all(t["errors"] == 0 and t["p99_us"] > 0 for t in ticks), ticks
    # 200 starts a second for as long as the run lasted (its deadline fires late on a busy
    # machine); those a stalled machine could not make are counted as missed
    due = 200 * report["seconds"]
    assert 0.9 * due <= report["ops"] + report["missed"] <= due + 2, report
    assert report["ops"] <= due + 2, report
    assert report["errors"] == 0, report


def stalled_run(stop_pid_of):
    """A --rate run whose process `stop_pid_of(semad, bench)` names is stopped (SIGSTOP) for
    1.5 s after the first interval, longer than a start may be late: its intervals and
    report."""
    with fx.Semad() as s:
        p = subprocess.Popen([SEMA, "bench", "--json", "-s", s.url(""), "-c", "4", "-d", "4s",
                              "--rate", "200", "--interval", "500ms", "--name", "st"],
                             stdout=subprocess.PIPE, text=True)
        try:
            lines = [json.loads(p.stdout.readline())]
            pid = stop_pid_of(s, p)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(1.5)  # the stall itself: nothing runs in the stopped process
            finally:
                os.kill(pid, signal.SIGCONT)
            lines += [json.loads(line) for line in p.stdout]
            rc = p.wait(60 * fx.SLOW)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert rc == 0, lines
    return lines[:-1], lines[-1]


def test_rate_counts_the_starts_missed_while_the_generator_itself_stalled():
    """Starts owed while sema bench did not run are missed_stalled (the machine's), and its
    own timer's lateness is reported; those owed while the server did not answer are not."""
    ticks, report = stalled_run(lambda s, bench: bench.pid)
    assert report["missed"] >= 200, report  # 1.5 s at 200/s, once the second of grace is over
    assert report["missed_stalled"] >= 0.8 * report["missed"], report
    assert report["lag_max_us"] >= 1.4e6, report
    assert max(t["lag_max_us"] for t in ticks) >= 1.4e6, ticks
    # (the starts still owed at the deadline count after the last interval)
    assert 0 <= report["missed_stalled"] - sum(t["missed_stalled"] for t in ticks) <= 2, ticks

    ticks, report = stalled_run(lambda s, bench: s.proc.pid)
    assert report["missed"] >= 200, report
    # (a loaded machine keeps sema bench from running now and then, for some ms: those count)
    assert report["missed_stalled"] <= 0.5 * report["missed"], report
    assert 0 <= report["missed"] - sum(t["missed"] for t in ticks) <= 2, (ticks, report)


def test_tls_options_it_would_not_use_are_refused():
    """--cacert with an http:// server is refused, before the verb or after it, as the other
    verbs refuse it (SEMA_CACERT stays a default for https:// servers); so are --cert and
    --cert-key, as sema bench presents no client certificate. Nothing is sent."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("SEMA_")}
    for args in (["bench", "-s", "http://127.0.0.1:1", "--cacert", "ca.pem"],
                 ["--cacert", "ca.pem", "bench", "-s", "127.0.0.1:1"],
                 ["bench", "-s", "https://127.0.0.1:1", "-s", "http://127.0.0.1:2",
                  "--cacert", "ca.pem", "--no-create"]):
        p = subprocess.run([SEMA] + args + ["-d", "1s"], env=e, capture_output=True, text=True,
                           timeout=30 * fx.SLOW)
        assert p.returncode == 2, (args, p)
        assert "--cacert is for an https:// server, and http://127.0.0.1:" in p.stderr, p.stderr
    for opt in ("--cert", "--cert-key"):
        p = subprocess.run([SEMA, opt, "w.pem", "bench", "-d", "1s"], env=e,
                           capture_output=True, text=True, timeout=30 * fx.SLOW)
        assert p.returncode == 2 and "presents no client certificate" in p.stderr, p
    e["SEMA_CACERT"] = "ca.pem"  # a default: the run goes on, and finds no server
    p = subprocess.run([SEMA, "bench", "-s", "http://127.0.0.1:1", "-d", "1s"], env=e,
                       capture_output=True, text=True, timeout=30 * fx.SLOW)
    assert p.returncode != 2 and "cannot connect" in p.stderr, p


def test_get_mode_and_pipelining():
    with fx.Semad() as s:
        r = sema_bench(s.url(""), "-m", "get", "--path", "/healthz", "-c", 4, "-n", 500)
        assert r["ops"] == 500 and r["status"] == {"200": 500}, r
        r = sema_bench(s.url(""), "-m", "get", "--path", "/healthz", "-c", 2, "-P", 8, "-n", 400)
        assert r["ops"] == 400 and r["status"] == {"200": 400}, r


def test_create_mode():
    """-m create makes NAME-0 .. NAME-(n-1), each once."""
    with fx.Semad() as s:
        r = sema_bench(s.url(""), "-m", "create", "-n", 300, "-c", 3, "-P", 4, "--name", "cr",
                       "--server-pid", s.proc.pid)
        assert r["ops"] == 300 and r["status"] == {"201": 300}, r
        assert r["rss_after_kib"] > 0, r
        names = []
        cursor = None
        while True:
            path = "/v1/semaphores?prefix=cr-&limit=1000" + ("&cursor=" + cursor if cursor else "")
            st, body = s.json("GET", path)
            assert st == 200, (st, body)
            names += [x["name"] for x in body["semaphores"]]
            cursor = body["next_cursor"]
            if not cursor:
                break
        assert sorted(names) == sorted("cr-%d" % i for i in range(300))


def test_handoff_mode():
    with fx.Semad() as s:
        make(s, "h", 1)
        r = sema_bench(s.url(""), "-m", "handoff", "-n", 60, "--name", "h")
        assert r["ops"] == 60 and r["errors"] == 0, r
        assert r["status"] == {"200": 60, "204": 60}, r
        assert 0 < r["p50_us"] <= r["max_us"], r
        st = state(s, "h")
        assert st["held"] == 1 and st["waiting"] == 0, st  # the last grant is still held


def test_park_mode():
    """Every connection parks; deleting the semaphore answers each one 410."""
    with fx.Semad() as s:
        n = 64
        r = sema_bench(s.url(""), "-m", "park", "-c", n, "--name", "pk", "--server-pid",
                       s.proc.pid)
        assert r["ops"] == n and r["errors"] == 0, r
        assert r["status"] == {"410": n}, r
        assert r["rss_after_kib"] > 0 and r["rss_before_kib"] > 0, r
        assert s.request("GET", "/v1/semaphores/pk")[0] == 404


def test_a_run_deletes_the_semaphores_it_made_and_keeps_the_others():
    with fx.Semad() as s:
        sema_bench(s.url(""), "-c", 4, "-n", 100)  # the default name, "bench"
        assert names(s) == [], names(s)
        make(s, "k-1", 4)
        r = sema_bench(s.url(""), "-c", 4, "--capacity", 4, "-n", 100, "--name", "k", "-k", 3)
        assert r["ops"] == 100 and names(s) == ["k-1"], (r, names(s))
        assert state(s, "k-1")["fence"] > 0, "it was used"
        r = sema_bench(s.url(""), "-m", "handoff", "-n", 20, "--name", "hd")
        assert r["ops"] == 20 and names(s) == ["k-1"], (r, names(s))
        # a set-up that fails half-way deletes what it made before
        make(s, "f-1", 9)
        sema_bench(s.url(""), "-c", 4, "--capacity", 4, "-n", 10, "--name", "f", "-k", 2,
                   expect=1)
        assert names(s) == ["f-1", "k-1"], names(s)


def test_park_refused_by_the_server_fails_fast():
    """Acquires the server refuses (over --max-connections) end the park run with their
    answers counted, instead of waiting for waiters that will never park."""
    with fx.Semad("--max-connections", "20") as s:
        p = sema_bench(s.url(""), "-m", "park", "-c", 40, "--name", "pr", expect=1, timeout=30)
        r = json.loads(p.stdout)
        assert r["ops"] == 0 and r["status"].get("503", 0) > 0, r
        assert r["status"].get("503", 0) + r["status"].get("410", 0) == 40, r
        assert "max-connections" in p.stderr, p.stderr


def test_bad_arguments_and_no_server():
    with fx.Semad() as s:
        for bad in (["-c", "0"], ["-m", "nope"], ["-n", "x"], ["--path", "healthz"],
                    ["--name", "a/b"], ["extra"]):
            p = sema_bench(s.url(""), *bad, expect=2)
            assert "sema bench" in p.stderr, (bad, p.stderr)
    port = free_port()
    p = sema_bench("http://127.0.0.1:%d" % port, "-n", 1, expect=69)
    assert "cannot connect" in p.stderr, p.stderr


def test_conflicting_semaphore_is_refused():
    """An existing semaphore with another capacity stops the run before it starts."""
    with fx.Semad() as s:
        assert s.request("PUT", "/v1/semaphores/c", {"capacity": 7})[0] == 201
        p = sema_bench(s.url(""), "-c", 4, "-n", 10, "--name", "c", expect=1)
        assert "409" in p.stderr and "--name" in p.stderr, p.stderr
        assert state(s, "c")["fence"] == 0


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ceiling_server():
    """The ceiling answers semad's requests with constants; the generator runs against it."""
    ceiling = os.path.join(BUILD, "bin", "bench_ceiling")
    if not os.path.exists(ceiling):
        sys.exit(77)
    p = subprocess.Popen([ceiling, "--listen", "127.0.0.1:0", "--max-seconds", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        addr = p.stdout.readline().split()[1]
        r = sema_bench("http://" + addr, "-c", 10, "-n", 1000, "--no-create")
        assert r["ops"] == 1000 and r["status"] == {"200": 1000, "204": 1000}, r
        r = sema_bench("http://" + addr, "-m", "get", "-c", 2, "-P", 16, "-n", 1000)
        assert r["ops"] == 1000, r
    finally:
        p.terminate()
        p.wait(10)


def test_redis_peer():
    """The Redis/Lua peer runs exactly -n pairs and leaves no holder in Redis."""
    peer = os.path.join(BUILD, "bin", "bench_redis_peer")
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if not (os.path.exists(peer) and server and cli):
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="sema-redis-")
    port = free_port()
    rs = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", tmp],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        fx.wait_until(lambda: subprocess.run([cli, "-p", str(port), "ping"],
                                             capture_output=True, text=True).stdout.strip()
                      == "PONG", timeout=10, what="redis-server")
        p = subprocess.run([peer, "--redis", "127.0.0.1:%d" % port, "-c", "10", "-n", "1000",
                            "--json"], capture_output=True, text=True, timeout=60 * fx.SLOW)
        assert p.returncode == 0, (p.stdout, p.stderr)
        r = json.loads(p.stdout)
        assert r["pairs"] == 1000 and r["errors"] == 0, r
        z = subprocess.run([cli, "-p", str(port), "zcard", "{bench-0}:holders"],
                           capture_output=True, text=True).stdout.strip()
        assert z == "0", z
    finally:
        rs.terminate()
        rs.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def test_no_create_on_a_missing_semaphore_stops_at_once_and_says_why():
    """--no-create against a semaphore that does not exist: not a run of 404s, but a stop at
    the first answer, with the reason."""
    with fx.Semad() as s:
        t0 = time.monotonic()
        p = sema_bench(s.url(""), "--no-create", "--name", "nothere", "-c", 8, "-d", "10s",
                       expect=1)
        assert time.monotonic() - t0 < 5 * fx.SLOW, "stopped at the first 404"
        assert "no such semaphore 'nothere'" in p.stderr and "--no-create" in p.stderr, p.stderr
        report = json.loads(p.stdout)
        assert report["status"].get("404", 0) <= 8, report  # one per connection at most
        assert names(s) == [], "nothing made"


if __name__ == "__main__":
    fx.main(globals())
