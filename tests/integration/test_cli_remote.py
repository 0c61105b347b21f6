#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_cli_remote.py - the `sema` command's remote verbs against a real semad.

Each test starts its own semad (semad_fixture.Semad) on an ephemeral loopback port and runs
the real `sema` ($SEMA_BIN) as separate processes, as a shell script would.
"""
import json
import shutil
import re
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture  # noqa: E402
from semad_fixture import SLOW, Semad, wait_until  # noqa: E402

EXIT_FAIL, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_LOST = 1, 2, 69, 75, 76


def sema_bin():
    p = os.environ.get("SEMA_BIN")
    if p:
        return p
    src = os.environ.get("SEMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    return os.path.join(src, "build", "bin", "sema")


def env_for(d):
    e = dict(os.environ)
    e["SEMA_SERVER"] = d.url("")
    return e


def sema(d, *args, timeout=30, check=None):
    """Run sema to completion: (exit status, stdout, stderr)."""
    p = subprocess.run([sema_bin()] + list(args), env=env_for(d), capture_output=True,
                       text=True, timeout=timeout * SLOW)
    if check is not None and p.returncode != check:
        raise AssertionError("sema %s: exit %d, want %d\nstdout: %s\nstderr: %s"
                             % (" ".join(args), p.returncode, check, p.stdout, p.stderr))
    return p.returncode, p.stdout, p.stderr


def spawn(d, *args, **kw):
    return subprocess.Popen([sema_bin()] + list(args), env=env_for(d), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def state(d, name):
    st, doc = d.json("GET", "/v1/semaphores/" + name)
    assert st == 200, (st, doc)
    return doc


def max_overlap(lines):
    """Witness lines 's ID' / 'e ID': the most IDs between their s and e at once."""
    inside, peak = set(), 0
    for ln in lines:
        kind, ident = ln.split()
        if kind == "s":
            inside.add(ident)
            peak = max(peak, len(inside))
        else:
            assert ident in inside, ("end without start", ident, lines)
            inside.remove(ident)
    assert not inside, ("never ended", inside)
    return peak


def run_many(d, name, capacity, count, script, witness):
    procs = [spawn(d, "run", name, "-c", str(capacity), "--", "sh", "-c", script, "sh", witness)
             for _ in range(count)]
    for p in procs:
        out, err = p.communicate(timeout=60 * SLOW)
        assert p.returncode == 0, (p.returncode, err)
    with open(witness) as f:
        return [ln for ln in f.read().splitlines() if ln]


# Append "s PID", stay a while, append "e PID" (O_APPEND lines do not interleave).
HOLD = 'echo "s $$" >> "$1"; sleep 0.15; echo "e $$" >> "$1"'
# Append "s PID", stay until 3 have started (bounded: 10 s), append "e PID".
UNTIL_3 = ('echo "s $$" >> "$1"; n=0; while [ "$(grep -c "^s" "$1")" -lt 3 ] && [ $n -lt 200 ];'
           ' do sleep 0.05; n=$((n+1)); done; echo "e $$" >> "$1"')


def test_run_capacity_1_never_overlaps():
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        w = os.path.join(tmp, "witness")
        lines = run_many(d, "one", 1, 5, HOLD, w)
        assert len(lines) == 10, lines
        assert max_overlap(lines) == 1, lines
        assert state(d, "one")["held"] == 0


def test_run_capacity_3_runs_exactly_3():
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        w = os.path.join(tmp, "witness")
        lines = run_many(d, "three", 3, 6, UNTIL_3, w)
        assert len(lines) == 12, lines
        assert max_overlap(lines) == 3, lines
        assert state(d, "three")["held"] == 0


def test_run_and_acquire_several_semaphores_at_once_with_a_tenant():
    """`sema run gpu:2,db:1 -- cmd` holds both while cmd runs (one lease, a fence each, the
    tenant's units), waits for both while one is busy (holding nothing), and gives both back;
    `sema acquire` takes the same list and prints one lease id."""
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        sema(d, "create", "gpu", "2", "--tenant-max", "2", check=0)
        sema(d, "create", "db", "1", check=0)
        assert state(d, "gpu")["tenant_max"] == 2
        mark = os.path.join(tmp, "up")
        script = 'touch %s; while [ ! -e %s.stop ]; do sleep 0.02; done' % (mark, mark)
        p = spawn(d, "run", "gpu:2,db:1", "--tenant", "acme", "--", "sh", "-c", script)
        wait_until(lambda: os.path.exists(mark), 10, "the command to start")
        gpu, db = state(d, "gpu"), state(d, "db")
        assert gpu["held"] == 2 and db["held"] == 1, (gpu, db)
        assert gpu["holders"][0]["lease"] == db["holders"][0]["lease"], (gpu, db)
        assert gpu["holders"][0]["tenant"] == "acme" and gpu["holders"][0]["multi"], gpu
        st, _, err = sema(d, "acquire", "gpu:1,db:1", "-t", "0")
        assert st == EXIT_TIMEOUT, err
        q = spawn(d, "acquire", "gpu,db", "--tenant", "bolt", "-t", "30s")
        wait_until(lambda: state(d, "db")["waiting"] == 1, 10, "the second to wait in db's line")
        assert state(d, "gpu")["waiting"] == 1  # in gpu's line too, holding nothing
        open(mark + ".stop", "w").close()
        assert p.wait(30 * SLOW) == 0, p.stderr.read()
        out, err = q.communicate(timeout=30 * SLOW)
        assert q.returncode == 0, err
        lease = out.strip()
        st, doc = d.json("GET", "/v1/leases/" + lease)
        assert st == 200 and sorted(doc["fences"]) == ["db", "gpu"], doc
        assert doc["tenant"] == "bolt", doc
        sema(d, "release", lease, check=0)
        assert state(d, "gpu")["held"] == 0 and state(d, "db")["held"] == 0
        st, _, err = sema(d, "run", "gpu:1,nope:1", "--", "true")
        assert st == EXIT_FAIL and "does not exist" in err, err
        st, _, err = sema(d, "acquire", "gpu:1,db:1", "-w", "2")
        assert st == EXIT_USAGE, err


def test_run_hands_the_command_its_lease_and_fence():
    """`sema run` (and `sema lock`) give the command SEMA_LEASE and SEMA_FENCE, the lease and
    fence the server shows; several semaphores add SEMA_FENCES (name=fence,...), SEMA_FENCE
    being the first's. Values inherited from sema's own environment are replaced or unset."""
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        sema(d, "create", "gpu", "3", check=0)
        sema(d, "create", "db", "1", check=0)
        sema(d, "acquire", "gpu", check=0)  # the fence moves on: 1 would pass by chance
        out = os.path.join(tmp, "env")
        script = ('echo "$SEMA_LEASE ${SEMA_FENCE-unset} ${SEMA_FENCES-unset}" > %s.tmp; '
                  'mv %s.tmp %s; while [ ! -e %s.stop ]; do sleep 0.02; done'
                  % (out, out, out, out))

        def run_and_read(*args):
            if os.path.exists(out + ".stop"):
                os.remove(out + ".stop")
            e = env_for(d)
            e.update(SEMA_LEASE="stale", SEMA_FENCE="0", SEMA_FENCES="stale=0")
            p = subprocess.Popen([sema_bin()] + list(args) + ["--", "sh", "-c", script], env=e,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_until(lambda: os.path.exists(out), 10, "the command to start")
            with open(out) as f:
                lease, fence, fences = f.read().split()
            st, doc = d.json("GET", "/v1/leases/" + lease)
            assert st == 200, (st, doc)
            open(out + ".stop", "w").close()
            assert p.wait(30 * SLOW) == 0, p.stderr.read()
            os.remove(out)
            return doc, fence, fences

        doc, fence, fences = run_and_read("run", "gpu")
        assert fence == str(doc["fence"]) == "2" and fences == "unset", (doc, fence, fences)
        doc, fence, fences = run_and_read("run", "gpu:2,db:1")
        want = "gpu=%d,db=%d" % (doc["fences"]["gpu"], doc["fences"]["db"])
        assert fences == want and fence == str(doc["fences"]["gpu"]), (doc, fence, fences)
        doc, fence, fences = run_and_read("lock", "k", "--exclusive")
        assert fence == str(doc["fence"]) and fences == "unset", (doc, fence, fences)
        # '%', ',' and '=' of a name are percent-encoded: the value splits at ',' and '='
        sema(d, "create", "a=b", "2", check=0)
        sema(d, "create", "p%q", "2", check=0)
        doc, fence, fences = run_and_read("run", "a=b:1,p%q:1,db")
        want = "a%%3Db=%d,p%%25q=%d,db=%d" % (doc["fences"]["a=b"], doc["fences"]["p%q"],
                                              doc["fences"]["db"])
        assert fences == want, (doc, fences)
        parsed = {urllib.parse.unquote(k): int(v)
                  for k, v in (part.split("=") for part in fences.split(","))}
        assert parsed == doc["fences"], (parsed, doc)


def test_create_and_resize_with_limits_and_get_shows_them():
    with Semad() as d:
        sema(d, "create", "api", "10", "--rate", "50", "--burst", "5", check=0)
        doc = state(d, "api")
        assert (doc["rate_per_s"], doc["rate_burst"]) == (50, 5), doc
        st, out, _ = sema(d, "get", "api", check=0)
        assert re.search(r"^rate_per_s\s+50$", out, re.M), out
        sema(d, "resize", "api", "--rate", "100", "--tenant-max", "4", check=0)
        doc = state(d, "api")
        assert (doc["capacity"], doc["rate_per_s"], doc["tenant_max"]) == (10, 100, 4), doc
        sema(d, "resize", "api", "--rate", "0", check=0)
        assert "rate_per_s" not in state(d, "api")
        st, _, err = sema(d, "create", "api", "10", "--burst", "0")
        assert st == EXIT_USAGE, err


def start_holder(d, name, tmp, ttl="1s"):
    """sema run with a command that records SIGTERM and otherwise sleeps; waits for the grant."""
    mark = os.path.join(tmp, "term")
    script = 'trap "echo term > %s; exit 0" TERM; touch %s.up; while :; do sleep 0.05; done' % (
        mark, mark)
    p = spawn(d, "run", name, "-c", "1", "--ttl", ttl, "--grace", "3s", "--", "sh", "-c", script)
    wait_until(lambda: os.path.exists(mark + ".up"), 10, "the command to start")
    return p, mark


def test_lost_lease_revoked_stops_command():
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        # a ttl of 3 s: its keep-alive holds it through a stall of 2 s of `sema run` (1 s lost
        # it beside CPU hogs, before the revoke this case is about)
        p, mark = start_holder(d, "rv", tmp, ttl="3s")
        # the keep-alive renews (a third of the ttl later): waited for, not slept past a ttl
        first = state(d, "rv")["holders"][0]["expires_at"]
        wait_until(lambda: state(d, "rv")["holders"][0]["expires_at"] > first, 10 * SLOW,
                   "the keep-alive to renew")
        assert p.poll() is None, p.communicate()
        holders = state(d, "rv")["holders"]
        assert len(holders) == 1
        st, _ = d.json("POST", "/v1/leases/%s/revoke" % holders[0]["lease"])
        assert st in (200, 204), st
        out, err = p.communicate(timeout=10 * SLOW)
        assert p.returncode == EXIT_LOST, (p.returncode, err)
        assert "lost" in err and "revoked" in err, err
        assert os.path.exists(mark), "the command was not sent SIGTERM"


def test_lost_lease_server_stopped_stops_command():
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        p, mark = start_holder(d, "gone", tmp)
        assert d.stop() == 0  # SIGTERM: semad exits, its port closes
        t0 = time.monotonic()
        out, err = p.communicate(timeout=10 * SLOW)
        assert p.returncode == EXIT_LOST, (p.returncode, err)
        assert time.monotonic() - t0 < 5 * SLOW  # about one ttl, not forever
        assert "lost" in err, err
        assert os.path.exists(mark), "the command was not sent SIGTERM"


def test_run_kills_command_that_ignores_sigterm():
    with Semad() as d:
        script = 'trap "" TERM; touch "$0.up"; while :; do sleep 0.05; done'
        with tempfile.TemporaryDirectory() as tmp:
            up = os.path.join(tmp, "x")
            p = spawn(d, "run", "stubborn", "-c", "1", "--ttl", "1s", "--grace", "300ms", "--",
                      "sh", "-c", script, up)
            wait_until(lambda: os.path.exists(up + ".up"), 10, "the command to start")
            lease = state(d, "stubborn")["holders"][0]["lease"]
            d.json("POST", "/v1/leases/%s/revoke" % lease)
            out, err = p.communicate(timeout=10 * SLOW)
            assert p.returncode == EXIT_LOST, (p.returncode, err)
            assert "SIGKILL" in err, err


def test_run_exit_status_and_release():
    with Semad() as d:
        assert sema(d, "run", "st", "-c", "2", "--", "sh", "-c", "exit 3")[0] == 3
        assert sema(d, "run", "st", "--", "sh", "-c", "kill -9 $$")[0] == 128 + 9
        rc, _, err = sema(d, "run", "st", "--", "/nonexistent/program")
        assert rc == 127 and "nonexistent" in err, (rc, err)
        assert state(d, "st")["held"] == 0
        rc, _, err = sema(d, "run", "missing", "--", "true")
        assert rc == EXIT_FAIL and "no such semaphore" in err, (rc, err)


def test_run_forwards_signals():
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        mark = os.path.join(tmp, "got")
        script = ('trap "echo usr1 >> %s" USR1; trap "echo term >> %s; exit 7" TERM; '
                  'touch %s.up; while :; do sleep 0.05; done' % (mark, mark, mark))
        p = spawn(d, "run", "sig", "-c", "1", "--", "sh", "-c", script)
        wait_until(lambda: os.path.exists(mark + ".up"), 10, "the command to start")
        p.send_signal(signal.SIGUSR1)
        wait_until(lambda: os.path.exists(mark), 5, "USR1 to reach the command")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10 * SLOW)
        assert p.returncode == 7, (p.returncode, err)
        with open(mark) as f:
            assert f.read().split() == ["usr1", "term"]
        assert state(d, "sig")["held"] == 0


def test_timeouts():
    with Semad() as d:
        sema(d, "create", "busy", "1", check=0)
        rc, lease, _ = sema(d, "acquire", "busy", check=0)
        t0 = time.monotonic()
        rc, out, err = sema(d, "acquire", "busy", "-t", "300ms")
        assert rc == EXIT_TIMEOUT and "not granted within 300ms (-t)" in err, (rc, err)
        assert time.monotonic() - t0 >= 0.3
        rc, out, err = sema(d, "acquire", "busy", "-t", "0")
        assert rc == EXIT_TIMEOUT and err, (rc, err)
        rc, out, err = sema(d, "run", "busy", "-t", "200ms", "--", "true")
        assert rc == EXIT_TIMEOUT and err, (rc, err)
        assert state(d, "busy")["held"] == 1 and state(d, "busy")["waiting"] == 0
        sema(d, "release", lease.strip(), check=0)


def test_bad_arguments():
    with Semad() as d:
        cases = [["acquire"], ["acquire", "x", "-w", "abc"], ["acquire", "x", "-w", "0"],
                 ["acquire", "x", "-t", "soon"], ["acquire", "x", "--ttl", "0"],
                 ["acquire", "x", "-t", "30"], ["acquire", "x", "--ttl", "30"],
                 ["run", "x"], ["run", "x", "-c", "-1", "--", "true"], ["create", "x", "0"],
                 ["create", "x"], ["get", "x", "y"], ["get", "x", "--bogus"],
                 ["lock", "k", "--", "true"], ["lock", "k", "--shared", "--exclusive", "--",
                                                  "true"], ["release"], ["ls", "a", "b"]]
        for args in cases:
            rc, out, err = sema(d, *args)
            assert rc == EXIT_USAGE, (args, rc, err)
            assert err.startswith("sema ") and "usage" in err, (args, err)
            assert out == "", (args, out)


def test_unreachable_server():
    with Semad() as d:
        pass  # started and stopped: its port is now closed
    e = dict(os.environ)
    for args in (["--server", d.url(""), "get", "x"], ["get", "x"], ["acquire", "x"],
                 ["run", "x", "--", "true"]):
        e["SEMA_SERVER"] = d.url("")
        p = subprocess.run([sema_bin()] + args, env=e, capture_output=True, text=True,
                           timeout=30 * SLOW)
        assert p.returncode == EXIT_UNAVAILABLE, (args, p.returncode, p.stderr)
        assert "cannot reach" in p.stderr, p.stderr
    rc = subprocess.run([sema_bin(), "get", "x", "--server", "ftp://not-a-url"],
                        capture_output=True, text=True).returncode
    assert rc == EXIT_USAGE


def test_tls_options_with_an_http_server_are_refused():
    """--cacert, --cert and --cert-key given with an http:// server are a usage error, never
    silently dropped (the token would go in clear); SEMA_CACERT and friends in the
    environment stay defaults for https:// and are not an error."""
    with Semad() as d:
        for opts in (["--cacert", "/nonexistent/ca.pem"], ["--cert", "/nonexistent/w.pem"],
                     ["--cert-key", "/nonexistent/w.key"],
                     ["--cacert", "ca.pem", "--cert", "w.pem", "--cert-key", "w.key"]):
            for args in (["--server", d.url("")] + opts + ["ls"],
                         ["ls"] + opts, opts + ["run", "x", "--", "true"]):
                rc, out, err = sema(d, *args)
                assert rc == EXIT_USAGE, (args, rc, err)
                assert "--cacert, --cert and --cert-key are for an https:// server" in err, err
                assert "http://" in err and out == "", (args, err, out)
        rc, out, err = sema(d, "--server", d.url("").replace("http://", ""), "--cacert", "c", "ls")
        assert rc == EXIT_USAGE and "are for an https:// server" in err, (rc, err)
        e = env_for(d)
        e.update(SEMA_CACERT="/nonexistent/ca.pem", SEMA_CERT="/nonexistent/w.pem",
                 SEMA_CERT_KEY="/nonexistent/w.key")
        p = subprocess.run([sema_bin(), "ls"], env=e, capture_output=True, text=True,
                           timeout=30 * SLOW)
        assert p.returncode == 0, (p.returncode, p.stderr)


def run_sema(args, **env):
    """sema with `args`, no server needed (it stops before talking to one): the process."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("SEMA_")}
    e.update(env)
    return subprocess.run([sema_bin()] + args, env=e, capture_output=True, text=True,
                          timeout=30 * SLOW)


def test_a_client_certificate_missing_a_half_says_which():
    """--cert-key without a certificate, or a certificate file without its key and no
    --cert-key, is a usage error naming the option missing; a file holding both, or both
    given, goes on (here to a server that is not there)."""
    tmp = tempfile.mkdtemp(prefix="sema-cert-")
    cert, both = os.path.join(tmp, "w.pem"), os.path.join(tmp, "both.pem")
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    with open(cert, "w") as f:
        f.write(pem)
    with open(both, "w") as f:
        f.write(pem + "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n")
    try:
        url = "https://127.0.0.1:1"
        for args, env in ((["-s", url, "--cert-key", cert, "ls"], {}),
                          (["ls", "-s", url, "--cert-key", cert], {}),
                          (["ls", "--cert-key", cert], {"SEMA_SERVER": url})):
            p = run_sema(args, **env)
            assert p.returncode == EXIT_USAGE, (args, p)
            assert "--cert-key is the key of a client certificate, and no certificate is " \
                   "given: add --cert FILE (or set SEMA_CERT)" in p.stderr, p.stderr
        for args, env in ((["-s", url, "--cert", cert, "ls"], {}),
                          (["-s", url, "ls"], {"SEMA_CERT": cert})):
            p = run_sema(args, **env)
            assert p.returncode == EXIT_USAGE, (args, p)
            assert "the client certificate %s holds no private key, and no key is given: add " \
                   "--cert-key FILE (or set SEMA_CERT_KEY)" % cert in p.stderr, p.stderr
        for args, env in ((["-s", url, "--cert", both, "ls"], {}),
                          (["-s", url, "--cert", cert, "--cert-key", both, "ls"], {}),
                          (["-s", url, "ls"], {"SEMA_CERT_KEY": both})):
            p = run_sema(args, **env)
            assert p.returncode == EXIT_UNAVAILABLE, (args, p)
            assert "cannot reach" in p.stderr, p.stderr
    finally:
        shutil.rmtree(tmp)


def test_a_verbs_option_before_the_verb_is_said_to_belong_after_it():
    for args, typed, verb in ((["--weight", "2", "acquire", "x"], "--weight", "acquire"),
                              (["--ttl=5s", "run", "x", "--", "true"], "--ttl", "run"),
                              (["-s", "http://127.0.0.1:1", "--capacity", "3", "create", "c"],
                               "--capacity", "create")):
        p = run_sema(args)
        assert p.returncode == EXIT_USAGE, (args, p)
        assert "sema: option '%s' belongs after the verb: sema %s %s ..." % (typed, verb, typed) \
            in p.stderr, (args, p.stderr)
    p = run_sema(["--weight", "2"])  # no verb to name
    assert p.returncode == EXIT_USAGE and "unknown option '--weight'" in p.stderr, p.stderr


def test_too_long_name_says_the_maximum():
    with Semad() as d:
        rc, _, err = sema(d, "create", "n" * 300, "1")
        assert rc == EXIT_FAIL and "maximum of 256 bytes" in err, (rc, err)


def test_get_numbers_waiters_from_1_as_tickets_do():
    with Semad() as d:
        sema(d, "create", "q1", "1", check=0)
        lease = sema(d, "acquire", "q1", check=0)[1].strip()
        rc, tid, err = sema(d, "ticket", "q1")
        assert rc == 0 and "position 1" in err, (rc, err)
        out = sema(d, "get", "q1", check=0)[1]
        waiters = [x for x in out.splitlines() if x.strip().startswith("#")]
        assert len(waiters) == 1 and waiters[0].strip().startswith("#1 "), out
        assert waiters[0].rstrip().endswith("ticket"), out
        sema(d, "release", lease, check=0)


def test_a_host_that_does_not_resolve_is_named_as_such():
    # .invalid never resolves (RFC 6761)
    p = subprocess.run([sema_bin(), "--server", "http://no-such-host.invalid:7070", "get", "x"],
                       capture_output=True, text=True, timeout=30 * SLOW)
    assert p.returncode == EXIT_UNAVAILABLE, (p.returncode, p.stderr)
    assert "cannot resolve the host" in p.stderr and "(ENOHOST)" in p.stderr, p.stderr
    assert "check the host name in --server or SEMA_SERVER" in p.stderr, p.stderr
    assert "is semad running" not in p.stderr, p.stderr


def test_unreachable_server_says_what_to_do_and_prints_no_table():
    with Semad() as d:
        pass  # started and stopped: its port is now closed
    e = dict(os.environ, SEMA_SERVER=d.url(""))
    for args in (["ls"], ["ls", "--json"], ["get", "x"]):
        p = subprocess.run([sema_bin()] + args, env=e, capture_output=True, text=True,
                           timeout=30 * SLOW)
        assert p.returncode == EXIT_UNAVAILABLE, (args, p.returncode, p.stderr)
        assert "is semad running?" in p.stderr and "SEMA_SERVER" in p.stderr, (args, p.stderr)
        assert p.stdout == "", (args, p.stdout)


def test_timeout_messages_speak_of_t_not_timeout_ms():
    with Semad() as d:
        sema(d, "create", "full", "1", check=0)
        lease = sema(d, "acquire", "full", check=0)[1].strip()
        for args, want in ((["run", "full", "-t", "300ms", "--", "true"],
                            "not granted within 300ms (-t)"),
                           (["acquire", "full", "-t", "0.2s"], "not granted within 0.2s (-t)"),
                           (["wait-idle", "full", "-t", "100ms"], "not idle within 100ms (-t)")):
            rc, out, err = sema(d, *args)
            assert rc == EXIT_TIMEOUT and want in err, (args, rc, err)
            assert "timeout_ms" not in err, (args, err)
        sema(d, "release", lease, check=0)


def test_command_not_found_reads_as_in_the_local_form():
    with Semad() as d:
        rc, _, err = sema(d, "run", "nf", "-c", "1", "--", "no-such-command-here")
        assert rc == 127 and err.startswith("sema run: no-such-command-here: "), (rc, err)
        rc, _, err = sema(d, "lock", "nf", "--exclusive", "--", "no-such-command-here")
        assert rc == 127 and err.startswith("sema lock: no-such-command-here: "), (rc, err)
        assert state(d, "nf")["held"] == 0


def test_mistyped_verbs_and_options_get_a_suggestion():
    with Semad() as d:
        rc, _, err = sema(d, "crate", "x", "1")
        assert rc == EXIT_USAGE and "did you mean `sema create`?" in err, err
        rc, _, err = sema(d, "help", "nosuch")
        assert rc == EXIT_USAGE and "`sema --help`" in err, err
        assert "sema help --help" not in err, err
        rc, _, err = sema(d, "help", "ticket-laeve")
        assert rc == EXIT_USAGE and "did you mean `sema ticket-leave`?" in err, err
        rc, _, err = sema(d, "acquire", "x", "--tll", "1s")
        assert rc == EXIT_USAGE and "did you mean --ttl?" in err, err
        rc, _, err = sema(d, "acquire", "x", "--bogus")
        assert rc == EXIT_USAGE and "did you mean" not in err, err


def test_admin_verbs_and_json():
    with Semad() as d:
        rc, out, _ = sema(d, "create", "adm", "2", "--json", check=0)
        assert json.loads(out) == {"name": "adm", "capacity": 2, "created": True}
        assert "exists" in sema(d, "create", "adm", "2", check=0)[1]
        rc, _, err = sema(d, "create", "adm", "3")
        assert rc == EXIT_FAIL and "EEXIST" in err, (rc, err)
        rc, out, _ = sema(d, "acquire", "adm", "-w", "2", "--ttl", "30s", "--owner", "me",
                          "--json", check=0)
        lease = json.loads(out)
        assert lease["weight"] == 2 and lease["ttl_ms"] == 30000 and lease["name"] == "adm"
        doc = json.loads(sema(d, "get", "adm", "--json", check=0)[1])
        assert doc["held"] == 2 and doc["holders"][0]["owner"] == "me"
        human = sema(d, "get", "adm", check=0)[1]
        assert "holders    1" in human and lease["lease"] in human
        rc, out, _ = sema(d, "renew", lease["lease"], "--ttl", "1m", "--json", check=0)
        assert json.loads(out)["ttl_ms"] == 60000
        sema(d, "release", lease["lease"], check=0)
        k1 = sema(d, "acquire", "adm", "--key", "job-7", check=0)[1]
        k2 = sema(d, "acquire", "adm", "--key", "job-7", check=0)[1]
        assert k1 == k2 and state(d, "adm")["held"] == 1, (k1, k2)
        sema(d, "release", k1.strip(), check=0)
        rc, _, err = sema(d, "release", lease["lease"])
        assert rc == EXIT_FAIL and "released" in err, (rc, err)
        sema(d, "create", "adm2", "1", check=0)
        lines = sema(d, "ls", "adm", "--json", check=0)[1].splitlines()
        assert [json.loads(x)["name"] for x in lines] == ["adm", "adm2"]
        assert "adm2" in sema(d, "ls", check=0)[1]
        out = sema(d, "resize", "adm", "5", check=0)[1].splitlines()
        assert out[0].split()[:2] == ["NAME", "CAPACITY"] and out[1].split()[:2] == ["adm", "5"]
        assert state(d, "adm")["capacity"] == 5
        sema(d, "create", "--", "-dash", "1", check=0)  # names may begin with '-'
        lease2 = sema(d, "acquire", "--", "-dash", check=0)[1].strip()
        sema(d, "release", "--", lease2, check=0)
        # an id that looks like an option cluster is taken as an id (unknown: 404 -> 1, not 2)
        assert sema(d, "release", "-" + "x" * 23)[0] == EXIT_FAIL
        sema(d, "rm", "adm", check=0)
        rc, _, err = sema(d, "get", "adm")
        assert rc == EXIT_FAIL and "ENOENT" in err


def run_env(args, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sema_bin()] + list(args), env=e, capture_output=True, text=True,
                          timeout=30 * SLOW)


def test_global_options_before_or_after_the_verb():
    with Semad() as d:
        sema(d, "create", "g1", "2", check=0)
        url, port = d.url(""), d.url("").rsplit(":", 1)[1].rstrip("/")
        want = sema(d, "ls", "--json", check=0)[1]
        assert [json.loads(x)["name"] for x in want.splitlines()] == ["g1"], want
        nowhere = "http://127.0.0.1:9"  # the options, not the environment, must name semad
        for args in (["--json", "ls"], ["ls", "--json"], ["-s", url, "ls", "--json"],
                     ["--server=" + url, "--json", "ls"], ["ls", "-s", url, "--json"],
                     ["--json", "ls", "--server", url], ["--json", "--server", url, "ls"]):
            p = run_env(args, SEMA_SERVER=url if url not in args and "--server=" + url
                        not in args else nowhere)
            assert (p.returncode, p.stdout) == (0, want), (args, p)
        # a server without a scheme is http://, in SEMA_SERVER and in --server
        p = run_env(["ls", "--json"], SEMA_SERVER="127.0.0.1:" + port)
        assert (p.returncode, p.stdout) == (0, want), p
        p = run_env(["-s", "127.0.0.1:" + port, "ls", "--json"], SEMA_SERVER=nowhere)
        assert (p.returncode, p.stdout) == (0, want), p
        get = sema(d, "get", "g1", "--json", check=0)[1]
        assert run_env(["--json", "get", "g1"], SEMA_SERVER=url).stdout == get
        # the same "did you mean" for a typo before or after the verb
        for args, typed, meant in ((["--sever", url, "ls"], "--sever", "--server"),
                                   (["ls", "--sever", url], "--sever", "--server"),
                                   (["--jsn", "ls"], "--jsn", "--json"),
                                   (["ls", "--jsn"], "--jsn", "--json"),
                                   (["--cacrt", "x", "ls"], "--cacrt", "--cacert"),
                                   (["ls", "--cacrt", "x"], "--cacrt", "--cacert")):
            p = run_env(args, SEMA_SERVER=url)
            assert p.returncode == EXIT_USAGE, (args, p)
            assert "unknown option '%s' (did you mean %s?" % (typed, meant) in p.stderr, \
                (args, p.stderr)
        p = run_env(["ls", "--server"], SEMA_SERVER=url)
        assert p.returncode == EXIT_USAGE and "'--server' needs a value" in p.stderr, p


def test_create_rm_and_run_as_the_local_form():
    with Semad() as d:
        # create takes -c as run does
        rc, out, _ = sema(d, "create", "c1", "-c", "3", check=0)
        assert out == "created c1 (capacity 3)\n" and state(d, "c1")["capacity"] == 3, out
        assert sema(d, "create", "c1", "3", check=0)[1] == "exists c1 (capacity 3)\n"
        rc, _, err = sema(d, "create", "c2", "3", "-c", "4")
        assert rc == EXIT_USAGE and "two capacities" in err, err
        rc, _, err = sema(d, "create", "c2")
        assert rc == EXIT_USAGE and "missing CAPACITY" in err, err
        rc, out, _ = sema(d, "resize", "c1", "-c", "5", "--json", check=0)
        assert json.loads(out)["capacity"] == 5, out
        # rm takes every NAME, as rm --local does; a missing one fails, the others go
        sema(d, "create", "c2", "1", check=0)
        sema(d, "create", "c3", "1", check=0)
        rc, _, err = sema(d, "rm", "c1", "nosuch", "c2")
        assert rc == EXIT_FAIL and "sema rm: nosuch: no such semaphore" in err, (rc, err)
        assert d.json("GET", "/v1/semaphores/c1")[0] == 404
        assert d.json("GET", "/v1/semaphores/c2")[0] == 404
        sema(d, "rm", "-f", "c3", "nosuch", check=0)
        assert d.json("GET", "/v1/semaphores/c3")[0] == 404
        # run without -c refuses a missing NAME and says how to create it (as run --local)
        rc, _, err = sema(d, "run", "newsem", "--", "true")
        assert rc == EXIT_FAIL and "create it with -c CAPACITY" in err, (rc, err)
        assert d.json("GET", "/v1/semaphores/newsem")[0] == 404


def test_messages_say_what_happened_in_the_words_of_the_command():
    with Semad("--max-ttl", "90s") as d:
        sema(d, "create", "m1", "1", check=0)
        # the legacy verbs say "no such semaphore" as the others do
        for verb in ("up", "down", "value", "get"):
            rc, _, err = sema(d, verb, "nosuch")
            assert rc == EXIT_FAIL and err == "sema %s: nosuch: no such semaphore (ENOENT)\n" \
                % verb, (verb, err)
        # a ttl above the maximum names the maximum, in the option's words
        rc, _, err = sema(d, "acquire", "m1", "--ttl", "48h")
        assert rc == EXIT_FAIL, err
        assert ("--ttl 48h: ttl_ms must be between 1 and 90000 (90s, the configured maximum)"
                in err), err
    with Semad() as d:
        pass  # started and stopped: nobody listens there now
    rc, out, err = sema(d, "ls")
    assert rc == EXIT_UNAVAILABLE and err.startswith("sema ls: cannot reach "), err
    assert "list:" not in err, err


def test_renew_and_release_of_an_expired_lease_exit_76_as_the_man_page_says():
    with Semad() as d:
        sema(d, "create", "ex", "1", check=0)
        lease = sema(d, "acquire", "ex", "--ttl", "100ms", check=0)[1].strip()
        wait_until(lambda: state(d, "ex")["held"] == 0, 5, "the lease to expire")
        for verb in ("renew", "release"):
            rc, _, err = sema(d, verb, lease)
            assert rc == EXIT_LOST and "expired" in err, (verb, rc, err)
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "man", "sema.1")) as f:
        man = f.read()
    entry = man[man.index(".B 76\n"):man.index(".TP", man.index(".B 76\n"))]
    assert "renew" in entry and "release" in entry, entry


def test_lock_verbs():
    with Semad() as d, tempfile.TemporaryDirectory() as tmp:
        w = os.path.join(tmp, "witness")
        procs = [spawn(d, "lock", "db", "--exclusive", "--", "sh", "-c", HOLD, "sh", w)
                 for _ in range(3)]
        for p in procs:
            p.communicate(timeout=60 * SLOW)
            assert p.returncode == 0
        with open(w) as f:
            assert max_overlap(f.read().split("\n")[:-1]) == 1
        w2 = os.path.join(tmp, "witness2")
        procs = [spawn(d, "lock", "db", "--shared", "--", "sh", "-c", UNTIL_3, "sh", w2)
                 for _ in range(3)]
        for p in procs:
            p.communicate(timeout=60 * SLOW)
            assert p.returncode == 0
        with open(w2) as f:
            assert max_overlap(f.read().split("\n")[:-1]) == 3
        assert d.request("GET", "/v1/locks/db")[0] == 404  # freed when idle


def test_ticket_verbs():
    with Semad() as d:
        sema(d, "create", "line", "1", check=0)
        held = sema(d, "acquire", "line", check=0)[1].strip()
        rc, first, err = sema(d, "ticket", "line", "--owner", "tab-1", check=0)
        first = first.strip()
        assert "position 1 (0 units ahead)" in err, err
        rc, out, _ = sema(d, "ticket", "line", "--owner", "tab-2", "--keepalive", "1m",
                          "--ttl", "30s", "--key", "tab-2", "--json", check=0)
        t = json.loads(out)
        assert (t["status"], t["position"], t["ahead_weight"], t["keepalive_ms"]) == \
            ("waiting", 2, 1, 60000), t
        again = json.loads(sema(d, "ticket", "line", "--key", "tab-2", "--json", check=0)[1])
        assert again["ticket"] == t["ticket"] and again["position"] == 2, again  # same place
        human = sema(d, "ticket-show", t["ticket"], check=0)[1]
        assert "status     waiting" in human and "position 2 (1 unit ahead)" in human, human
        assert json.loads(sema(d, "ticket-show", t["ticket"], "--json", check=0)[1]) == t
        # a long-poll that sees no change answers after its duration, still waiting
        t0 = time.monotonic()
        assert json.loads(sema(d, "ticket-show", t["ticket"], "-t", "300ms", "--json",
                               check=0)[1])["position"] == 2
        assert time.monotonic() - t0 >= 0.3
        # ticket-wait times out in line (75) and the ticket keeps its place
        rc, _, err = sema(d, "ticket-wait", t["ticket"], "-t", "300ms")
        assert rc == EXIT_TIMEOUT and "position 2" in err, (rc, err)
        # the first ticket leaves, the holder releases: the second one's turn
        waiter = spawn(d, "ticket-wait", t["ticket"], "-t", "30s")
        sema(d, "ticket-leave", first, check=0)
        sema(d, "release", held, check=0)
        out, err = waiter.communicate(timeout=30 * SLOW)
        assert waiter.returncode == 0, (waiter.returncode, err)
        lease = out.strip()
        doc = state(d, "line")
        assert [h["lease"] for h in doc["holders"]] == [lease], doc
        assert doc["holders"][0]["owner"] == "tab-2"
        granted = json.loads(sema(d, "ticket-show", t["ticket"], "--json", check=0)[1])
        assert granted["status"] == "granted" and granted["lease"]["lease"] == lease
        assert granted["lease"]["ttl_ms"] == 30000, granted
        # leaving a granted ticket releases its lease; then the ticket is gone (exit 1)
        sema(d, "ticket-leave", t["ticket"], check=0)
        assert state(d, "line")["held"] == 0
        rc, _, err = sema(d, "ticket-leave", t["ticket"])
        assert rc == EXIT_FAIL and "EGONE" in err, (rc, err)
        rc, _, err = sema(d, "ticket-show", first)
        assert rc == EXIT_FAIL and "left the line" in err, (rc, err)
        assert sema(d, "ticket-show", "no-such-ticket")[0] == EXIT_FAIL
        # a full line: weight above the capacity is refused, a bad keepalive is a usage error
        rc, _, err = sema(d, "ticket", "line", "-w", "2")
        assert rc == EXIT_FAIL and "EINVAL" in err, (rc, err)
        assert sema(d, "ticket", "line", "--keepalive", "5")[0] == EXIT_USAGE
        assert sema(d, "ticket-show", t["ticket"], "--keepalive", "5s")[0] == EXIT_USAGE
        # granted at once when the units are free and nobody waits
        rc, out, err = sema(d, "ticket", "line", "--json", check=0)
        assert json.loads(out)["status"] == "granted" and "granted at once" not in out


def ticket_on_several(d, tenant):
    """`sema ticket gpu:2,db:1` waits in both lines holding nothing, is shown with its parts,
    and once both fit is granted one lease on both, which ticket-leave gives back."""
    sema(d, "create", "gpu", "2", check=0)
    sema(d, "create", "db", "1", check=0)
    held = sema(d, "acquire", "db", check=0)[1].strip()
    who = ["--tenant", tenant] if tenant else []
    t = json.loads(sema(d, "ticket", "gpu:2,db", "--owner", "tab-1", "--json", *who,
                        check=0)[1])
    assert t["status"] == "waiting" and t["position"] == 1, t
    assert t["semaphores"] == [{"name": "gpu", "weight": 2}, {"name": "db", "weight": 1}], t
    assert t.get("tenant") == tenant and "name" not in t, t
    assert state(d, "gpu")["held"] == 0 and state(d, "gpu")["waiting"] == 1  # holds nothing
    assert json.loads(sema(d, "ticket-show", t["ticket"], "--json", check=0)[1]) == t
    human = sema(d, "ticket-show", t["ticket"], check=0)[1]
    assert "semaphores gpu:2,db:1" in human and "status     waiting" in human, human
    assert ("tenant     %s" % tenant in human) == bool(tenant), human
    waiter = spawn(d, "ticket-wait", t["ticket"], "-t", "30s")
    sema(d, "release", held, check=0)
    out, err = waiter.communicate(timeout=30 * SLOW)
    assert waiter.returncode == 0, (waiter.returncode, err)
    lease = out.strip()
    gpu, db = state(d, "gpu"), state(d, "db")
    assert gpu["held"] == 2 and db["held"] == 1, (gpu, db)
    assert [h["lease"] for h in gpu["holders"]] == [h["lease"] for h in db["holders"]] == [lease]
    assert gpu["holders"][0]["owner"] == "tab-1" and gpu["holders"][0].get("tenant") == tenant
    g = json.loads(sema(d, "ticket-show", t["ticket"], "--json", check=0)[1])
    assert g["status"] == "granted" and g["lease"]["lease"] == lease, g
    assert sorted(g["lease"]["fences"]) == ["db", "gpu"], g
    assert [p["fence"] for p in g["lease"]["semaphores"]] == \
        [g["lease"]["fences"]["gpu"], g["lease"]["fences"]["db"]], g
    human = sema(d, "ticket-show", t["ticket"], check=0)[1]
    assert "fences     gpu=%d,db=%d" % (g["lease"]["fences"]["gpu"],
                                       g["lease"]["fences"]["db"]) in human, human
    sema(d, "ticket-leave", t["ticket"], check=0)  # its one lease goes for both
    assert state(d, "gpu")["held"] == 0 and state(d, "db")["held"] == 0
    # free and nobody waiting: granted at once
    rc, out, err = sema(d, "ticket", "gpu,db", *who, check=0)
    assert "granted at once" in err, err
    sema(d, "ticket-leave", out.strip(), check=0)
    # refused: a semaphore that does not exist or named twice, -w beside NAME:W
    rc, _, err = sema(d, "ticket", "gpu:1,nope:1")
    assert rc == EXIT_FAIL and "ENOENT" in err, (rc, err)
    rc, _, err = sema(d, "ticket", "gpu,gpu")
    assert rc == EXIT_FAIL and "EINVAL" in err, (rc, err)
    rc, _, err = sema(d, "ticket", "gpu:1,db:1", "-w", "2")
    assert rc == EXIT_USAGE, (rc, err)
    assert state(d, "gpu")["waiting"] == 0 and state(d, "db")["waiting"] == 0


def test_ticket_on_several_semaphores_with_a_tenant():
    with Semad() as d:
        ticket_on_several(d, "acme")
        # a tenant, owner or key that is not UTF-8 is refused before anything is sent
        for opt in ("--tenant", "--owner", "--key"):
            rc, _, err = sema(d, "ticket", "gpu,db", opt, "caf\udcc3")
            assert rc == EXIT_FAIL and "must be valid UTF-8" in err, (opt, rc, err)
        assert state(d, "gpu")["waiting"] == 0


def test_ticket_on_several_semaphores_on_redis():
    """The same on semad's Redis back end, with a tenant too."""
    import redis_fixture as rf
    rf.need_redis_engine()
    r = rf.RedisServer()
    try:
        with rf.Fleet(r.url(), 1) as fl:
            ticket_on_several(fl[0], "acme")
    finally:
        r.close()


def test_retried_ticket_takes_one_place():
    with Semad() as d:
        sema(d, "create", "rt", "1", check=0)
        sema(d, "acquire", "rt", check=0)
        proxy = DroppingProxy(d)
        e = env_for(d)
        e["SEMA_SERVER"] = "http://127.0.0.1:%d" % proxy.port
        p = subprocess.run([sema_bin(), "ticket", "rt"], env=e, capture_output=True,
                           text=True, timeout=30 * SLOW)
        assert p.returncode == 0 and proxy.dropped == 1, (p.returncode, p.stderr)
        takes = [r for r in proxy.requests if b"/tickets" in r.split(b"\r\n", 1)[0]]
        keys = [ln for r in takes for ln in r.split(b"\r\n")
                if ln.lower().startswith(b"idempotency-key:")]
        assert len(takes) == 2 and len(keys) == 2 and keys[0] == keys[1], takes
        doc = state(d, "rt")
        assert doc["waiting"] == 1, doc  # one place in line, not two
        assert "position 1" in p.stderr, p.stderr


def test_legacy_up_down():
    with Semad() as d:
        st, _ = d.json("POST", "/semaphore", {"name": "lg", "value": 1})
        assert st == 200
        assert sema(d, "down", "lg", check=0)[1].strip() == "0"
        rc, _, err = sema(d, "down", "lg")
        assert rc == EXIT_TIMEOUT and "locked" in err, (rc, err)
        assert sema(d, "up", "lg", check=0)[1].strip() == "1"
        assert json.loads(sema(d, "value", "lg", "--json", check=0)[1])["value"] == 1
        assert sema(d, "up", "nope")[0] == EXIT_FAIL


def test_watch_plain_output():
    with Semad() as d:
        rc, out, err = sema(d, "watch", "nosuch")
        assert rc == EXIT_FAIL and "ENOENT" in err and out == "", (rc, out, err)
        sema(d, "create", "wt", "1", check=0)
        p = spawn(d, "watch", "wt")
        first = p.stdout.readline()
        assert first.startswith("name"), first
        lease = None
        seen = []
        deadline = time.monotonic() + 10 * SLOW
        # the stream may start after the first grant: repeat until a grant is seen (bounded)
        while time.monotonic() < deadline and not any(x.startswith("granted") for x in seen):
            lease = sema(d, "acquire", "wt", check=0)[1].strip()
            sema(d, "release", lease, check=0)
            line = p.stdout.readline()
            while line and not line.startswith(("granted", "released")):
                line = p.stdout.readline()
            seen.append(line)
        assert any(x.startswith("granted") for x in seen), seen
        sema(d, "rm", "wt", check=0)
        out, err = p.communicate(timeout=10 * SLOW)
        assert p.returncode == 0, (p.returncode, err)
        assert "deleted" in out, out


def test_watch_json_lines():
    with Semad() as d:
        sema(d, "create", "wj", "1", check=0)
        p, out, err = watch_proc(d, "wj", "--json")
        wait_until(lambda: len(out.get()) >= 1, 10, "the first line")
        first = json.loads(out.get()[0])
        assert first["event"] == "start" and first["data"] is None, first
        assert first["state"]["name"] == "wj", first
        deadline = time.monotonic() + 15 * SLOW
        lease = None
        while time.monotonic() < deadline and lease is None:
            got = sema(d, "acquire", "wj", check=0)[1].strip()
            sema(d, "release", got, check=0)
            time.sleep(0.05)
            for line in out.get()[1:]:
                ev = json.loads(line)  # every line is one JSON object
                if ev["event"] == "granted" and ev["data"]["lease"] == got:
                    lease = got
        assert lease is not None, out.text()
        sema(d, "rm", "wj", check=0)
        assert p.wait(10 * SLOW) == 0, err.text()
        wait_until(lambda: '"deleted"' in out.text(), 10, "the deleted line")
        last = json.loads(out.get()[-1])
        assert last["event"] == "deleted" and last["state"] is None, last
        assert last["data"]["name"] == "wj", last


def test_watch_shows_the_queue_live():
    # a waiter joining and leaving the queue is an event ("queued", "left"): the watch shows
    # the queue as it grows and shrinks, not only when a holder changes
    with Semad() as d:
        sema(d, "create", "wq", "1", check=0)
        p, out, err = watch_proc(d, "wq", "--json")
        wait_until(lambda: len(out.get()) >= 1, 10, "the first line")

        def events(kind):
            return [ev for ev in map(json.loads, out.get()) if ev["event"] == kind]
        # the stream opens after the first state is shown: take and give back until it hears
        deadline = time.monotonic() + 15 * SLOW
        while time.monotonic() < deadline and not events("granted"):
            sema(d, "release", sema(d, "acquire", "wq", check=0)[1].strip(), check=0)
            time.sleep(0.05)
        assert events("granted"), out.text()
        holder = sema(d, "acquire", "wq", "--owner", "holder", check=0)[1].strip()
        # a waiter parks: "queued", and the state shown with it has it in the queue
        w = spawn(d, "acquire", "wq", "-t", "60s", "--owner", "parked")
        wait_until(lambda: events("queued"), 10, "a queued event")
        q = events("queued")[0]
        assert q["data"]["owner"] == "parked" and q["data"]["weight"] == 1, q
        assert q["data"]["waiting"] == 1 and q["data"]["waiting_weight"] == 1, q
        assert [x["owner"] for x in q["state"]["waiters"]] == ["parked"], q
        # a ticket joins behind it, then leaves
        t = sema(d, "ticket", "wq", "--owner", "ticket-1", check=0)[1].strip()
        wait_until(lambda: len(events("queued")) == 2, 10, "the ticket's queued event")
        q = events("queued")[1]
        assert q["data"]["kind"] == "ticket" and q["data"]["waiting"] == 2, q
        assert len(q["state"]["waiters"]) == 2, q
        sema(d, "ticket-leave", t, check=0)
        wait_until(lambda: events("left"), 10, "the ticket's left event")
        left = events("left")[0]
        assert left["data"]["owner"] == "ticket-1" and left["data"]["waiting"] == 1, left
        assert [x["owner"] for x in left["state"]["waiters"]] == ["parked"], left
        # the waiter goes away (its connection closed): "left", the queue is empty
        w.kill()
        w.wait(10 * SLOW)
        wait_until(lambda: len(events("left")) == 2, 10, "the waiter's left event")
        left = events("left")[1]
        assert left["data"]["owner"] == "parked" and left["data"]["waiting"] == 0, left
        assert left["state"]["waiters"] == [], left
        # one that times out leaves too; one granted from the queue is "granted" (no "left")
        rc, _, _ = sema(d, "acquire", "wq", "-t", "200ms")
        assert rc == EXIT_TIMEOUT
        wait_until(lambda: len(events("left")) == 3, 10, "the timed-out waiter's left event")
        w = spawn(d, "acquire", "wq", "-t", "60s", "--owner", "next")
        wait_until(lambda: len(events("queued")) == 4, 10, "the next waiter's queued event")
        sema(d, "release", holder, check=0)
        assert w.wait(10 * SLOW) == 0
        holder = w.stdout.read().strip()  # "next" holds the unit now
        wait_until(lambda: any(ev["data"].get("owner") == "next" for ev in events("granted")),
                   10, "the next waiter's grant")
        assert len(events("left")) == 3, out.text()
        # a request on several semaphores waits in each line: its place here is "queued" (as
        # a part of it), and "left" when it goes
        sema(d, "create", "wq2", "1", check=0)
        w = spawn(d, "run", "wq:1,wq2:1", "-t", "60s", "--owner", "both", "--", "true")
        wait_until(lambda: len(events("queued")) == 5, 10, "the request on two's queued event")
        q = events("queued")[4]
        assert q["data"]["owner"] == "both" and q["data"].get("multi") is True, q
        assert q["data"]["waiting"] == 1, q
        w.kill()
        w.wait(10 * SLOW)
        wait_until(lambda: len(events("left")) == 4, 10, "the request on two's left event")
        assert events("left")[3]["data"]["waiting"] == 0, events("left")[3]
        sema(d, "release", holder, check=0)
        sema(d, "rm", "wq", "wq2", check=0)
        assert p.wait(10 * SLOW) == 0, err.text()


def test_watch_terminal_redraws():
    import pty
    import select
    with Semad() as d:
        sema(d, "create", "wtt", "1", check=0)
        master, slave = pty.openpty()
        p = subprocess.Popen([sema_bin(), "watch", "wtt"], env=env_for(d), stdout=slave,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        os.close(slave)
        buf = [b""]

        def screen():
            if select.select([master], [], [], 0.05)[0]:
                try:
                    buf[0] += os.read(master, 65536)
                except OSError:
                    pass
            return buf[0]

        clear = b"\x1b[H\x1b[2J"
        wait_until(lambda: clear in screen() and b"capacity" in screen(), 10, "first screen")
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline and b"last event: granted" not in screen():
            lease = sema(d, "acquire", "wtt", check=0)[1].strip()
            sema(d, "release", lease, check=0)
        assert b"last event: granted" in screen(), buf[0][-500:]
        assert screen().count(clear) >= 2  # redrawn, not appended
        sema(d, "rm", "wtt", check=0)
        p.wait(timeout=10 * SLOW)
        assert p.returncode == 0, p.stderr.read()
        os.close(master)


class Lines:
    """Collects a pipe's lines on a thread, so a test can poll them until a deadline."""

    def __init__(self, pipe):
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe):
        for line in pipe:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def get(self):
        with self.lock:
            return list(self.lines)

    def ended(self, timeout=10 * SLOW):
        """Wait until the pipe is read to its end (the process exited and its last line is
        in), and return the lines."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the pipe did not end in %ss" % timeout
        return self.get()

    def text(self):
        return "\n".join(self.get())


def watch_proc(d, *args):
    p = spawn(d, "watch", *args)
    return p, Lines(p.stdout), Lines(p.stderr)


def watch_then_stop(d, name):
    """Start `sema watch NAME` on d, stop d once the state is shown, wait for the loss line."""
    sema(d, "create", name, "1", check=0)
    p, out, err = watch_proc(d, name)
    wait_until(lambda: any(x.startswith("name") for x in out.get()), 10, "the first state")
    assert d.stop() == 0
    wait_until(lambda: "lost" in err.text(), 10, "watch to report the loss")
    assert p.poll() is None, (p.returncode, err.text())
    return p, out, err


def test_watch_reconnects_after_semad_restart():
    # relaxed keeps the semaphore across the restart (none would start empty: a 404)
    d1 = Semad(durability="relaxed")
    port, data = d1.port, d1.data
    d2 = None
    try:
        p, out, err = watch_then_stop(d1, "wr")
        d2 = Semad("--listen", "127.0.0.1:%d" % port, durability="relaxed", data=data)
        wait_until(lambda: "reconnected" in err.text(), 30, "watch to reconnect")
        # the stream opens right after the reconnect line: repeat until a grant is seen
        deadline = time.monotonic() + 15 * SLOW
        while time.monotonic() < deadline and not any(
                x.startswith("granted") for x in out.get()):
            lease = sema(d2, "acquire", "wr", check=0)[1].strip()
            sema(d2, "release", lease, check=0)
            wait_until(lambda: any(x.startswith(("granted", "released")) for x in out.get()),
                       5, "an event after the reconnect")
        assert any(x.startswith("granted") for x in out.get()), out.text()
        losses = [x for x in err.get() if "connection lost" in x]
        assert len(losses) == 1 and "reconnecting in" in losses[0], err.text()
        assert p.poll() is None, (p.returncode, err.text())
        p.send_signal(signal.SIGINT)
        assert p.wait(10 * SLOW) == 0, err.text()
    finally:
        if d2 is not None:
            d2.close()
        d1.close()


class Proxy:
    """A TCP relay to semad on 127.0.0.1 that a test can cut: cut() drops every connection
    and closes new ones at once until restore(), while semad itself keeps running."""

    def __init__(self, target_port):
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.down = False
        self.socks = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                if self.down:
                    c.close()
                    continue
                u = socket.create_connection(("127.0.0.1", self.target))
                self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            self.down = True
            for x in self.socks:
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()
            self.socks = []

    def restore(self):
        with self.lock:
            self.down = False

    def close(self):
        self.cut()
        self.lsock.close()


def test_watch_resumes_and_shows_what_it_missed():
    with Semad() as d:
        sema(d, "create", "wm", "1", check=0)
        proxy = Proxy(d.port)
        try:
            p, out, err = watch_proc(proxy, "wm")
            wait_until(lambda: any(x.startswith("name") for x in out.get()), 10, "the state")
            # an event seen on the stream gives the watch an id to resume from
            deadline = time.monotonic() + 15 * SLOW
            lease = None
            while time.monotonic() < deadline and not any(
                    x.startswith("granted") for x in out.get()):
                if lease is not None:
                    sema(d, "release", lease, check=0)
                lease = sema(d, "acquire", "wm", check=0)[1].strip()
                time.sleep(0.02)
            assert any(x.startswith("granted") for x in out.get()), out.text()
            proxy.cut()
            wait_until(lambda: "connection lost" in err.text(), 10, "the loss")
            # while the watch is away: a release and a grant it has not seen
            sema(d, "release", lease, check=0)
            missed = sema(d, "acquire", "wm", "--owner", "while-away", check=0)[1].strip()
            proxy.restore()
            wait_until(lambda: "reconnected" in err.text(), 30, "the reconnect")
            wait_until(lambda: any(missed in x and x.startswith("granted") for x in out.get()),
                       10, "the missed grant, replayed")
            assert not any(x.startswith("reset") for x in out.get()), out.text()
            p.send_signal(signal.SIGINT)
            assert p.wait(10 * SLOW) == 0, err.text()
        finally:
            proxy.close()


def test_watch_permanent_errors_exit_promptly():
    with Semad() as d:
        for args, want in ((["nosuch"], "ENOENT"), (["x" * 600], "ENAMETOOLONG")):
            t0 = time.monotonic()
            rc, out, err = sema(d, "watch", *args, timeout=10)
            assert rc == EXIT_FAIL and want in err and out == "", (args, rc, out, err)
            assert "reconnecting" not in err, err
            assert time.monotonic() - t0 < 10 * SLOW
        # --max-retries does not keep a watch alive past the "deleted" event: it ends with 0
        sema(d, "create", "gone", "1", check=0)
        p, out, err = watch_proc(d, "gone", "--max-retries", "3")
        wait_until(lambda: any(x.startswith("name") for x in out.get()), 10, "the first state")
        sema(d, "rm", "gone", check=0)
        assert p.wait(10 * SLOW) == 0, err.text()


def test_watch_ends_when_restarted_semad_lacks_the_semaphore():
    d1 = Semad()
    port = d1.port
    d2 = None
    try:
        p, out, err = watch_then_stop(d1, "wg")
        # the same address, but no store: semad starts empty and answers 404 for "wg"
        d2 = Semad("--listen", "127.0.0.1:%d" % port)
        assert p.wait(30 * SLOW) == EXIT_FAIL, err.text()
        assert "ENOENT" in err.ended()[-1] and "reconnected" not in err.text(), err.text()
    finally:
        if d2 is not None:
            d2.close()
        d1.close()


def test_watch_max_retries_gives_up():
    with Semad() as d:
        pass  # started and stopped: its port is now closed
    p = subprocess.run([sema_bin(), "watch", "x", "--max-retries", "2"], env=env_for(d),
                       capture_output=True, text=True, timeout=30 * SLOW)
    assert p.returncode == EXIT_UNAVAILABLE, (p.returncode, p.stderr)
    tries = [x for x in p.stderr.splitlines() if "reconnecting in" in x]
    assert len(tries) == 2, p.stderr
    assert "giving up after 2 failed reconnects" in p.stderr, p.stderr
    rc, _, err = sema(d, "watch", "x", "--max-retries", "lots")
    assert rc == EXIT_USAGE and "max-retries" in err, err


def test_watch_max_retries_counts_after_a_lost_connection():
    # Connected first, then semad goes: the loss resets the count, each failed reconnect
    # after it counts, and the delays double as they do before a first connection.
    with Semad() as d:
        sema(d, "create", "wm", "1", check=0)
        p, out, err = watch_proc(d, "wm", "--max-retries", "2")
        wait_until(lambda: any(x.startswith("name") for x in out.get()), 10, "the first state")
        assert d.stop() == 0
        assert p.wait(30 * SLOW) == EXIT_UNAVAILABLE, err.text()
    tries = [x for x in err.ended() if "reconnecting in" in x]
    assert len(tries) == 2 and "connection lost" in tries[0] and "reconnect failed" in tries[1], \
        err.text()
    # the first wait is 0.25-0.5 s, the second 0.5-1 s (each a random point in the upper half
    # of 0.5 s doubling), printed to a tenth of a second
    delays = [float(re.search(r"reconnecting in ([0-9.]+)s", x).group(1)) for x in tries]
    assert delays[0] <= 0.5 <= delays[1], delays
    assert "giving up after 2 failed reconnects" in err.text(), err.text()


class FakeEvents:
    """A stand-in server whose event stream says `retry: 3000`, sends one event and ends:
    what an SSE server that asks for a reconnection delay looks like."""

    STATE = {"name": "x", "capacity": 1, "available": 1, "held": 0, "waiting": 0, "fence": 0,
             "holders": [], "waiters": []}

    def __init__(self):
        import http.server

        fake = self
        self.streams = 0

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.endswith("/events"):
                    fake.streams += 1
                    body = b": hi\nretry: 3000\n\nevent: granted\ndata: {\"n\":1}\n\n"
                    ctype = "text/event-stream"
                else:
                    body, ctype = json.dumps(fake.STATE).encode(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_watch_honours_sse_retry_field():
    fake = FakeEvents()
    try:
        e = dict(os.environ)
        e["SEMA_SERVER"] = fake.url
        p = subprocess.Popen([sema_bin(), "watch", "x"], env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        out, err = Lines(p.stdout), Lines(p.stderr)
        wait_until(lambda: "reconnecting in" in err.text(), 10, "the end of the first stream")
        assert any(x.startswith("granted") for x in out.get()), out.text()
        line = [x for x in err.get() if "reconnecting in" in x][0]
        delay = float(line.rsplit("reconnecting in ", 1)[1].rstrip("s"))
        assert 1.5 <= delay <= 3.0, line  # the server's 3 s with jitter, not the 0.5 s default
        p.send_signal(signal.SIGINT)  # interrupts the wait promptly
        assert p.wait(10 * SLOW) == 0, err.text()
        assert fake.streams == 1
    finally:
        fake.close()


def test_help_everywhere():
    with Semad() as d:
        verbs = ["create", "get", "ls", "resize", "rm", "acquire", "renew", "release", "lease",
                 "revoke", "wait-idle", "run", "lock", "up", "down", "value", "watch", "ticket",
                 "ticket-show", "ticket-wait", "ticket-leave"]
        top = sema(d, "--help", check=0)[1]
        for v in verbs:
            assert v in top, v
            out = sema(d, v, "--help", check=0)[1]
            assert out.startswith("usage: sema " + v) and "examples:" in out, (v, out)
            assert "76 lease lost" in out, (v, out)


def read_request(f):
    """One HTTP/1.1 request from a socket file: its bytes, or None at end of stream."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = f.readline()
        if not line:
            return None
        head += line
    n = 0
    for ln in head.split(b"\r\n"):
        if ln.lower().startswith(b"content-length:"):
            n = int(ln.split(b":", 1)[1])
    return head + (f.read(n) if n else b"")


class DroppingProxy:
    """Forwards HTTP to semad, but swallows the reply to the first request and closes that
    connection: the request took effect on the server, the client saw a network error.
    With `mangle`, the first reply's body is replaced by mangle(body) instead."""

    def __init__(self, d, mangle=None):
        self.d = d
        self.mangle = mangle
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.dropped = 0
        self.requests = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        up = socket.create_connection(("127.0.0.1", self.d.port), timeout=30)
        uf = up.makefile("rb")
        try:
            while True:
                req = read_request(f)
                if req is None:
                    return
                self.requests.append(req)
                up.sendall(req)
                st, hd, body = semad_fixture.read_response(uf)
                if self.dropped == 0:
                    self.dropped = 1
                    if self.mangle is None:
                        return  # the grant happened; its reply is lost
                    body = self.mangle(body)
                    hd["content-length"] = str(len(body))
                head = "HTTP/1.1 %d X\r\n" % st + "".join(
                    "%s: %s\r\n" % kv for kv in hd.items() if kv[0] != "connection")
                c.sendall(head.encode() + b"\r\n" + body)
        finally:
            up.close()
            c.close()


def test_retried_acquire_never_grants_twice():
    with Semad() as d:
        sema(d, "create", "retry", "2", check=0)
        proxy = DroppingProxy(d)
        e = env_for(d)
        e["SEMA_SERVER"] = "http://127.0.0.1:%d" % proxy.port
        p = subprocess.run([sema_bin(), "acquire", "retry", "--ttl", "1m"], env=e,
                           capture_output=True, text=True, timeout=30 * SLOW)
        assert p.returncode == 0, (p.returncode, p.stderr)
        assert proxy.dropped == 1
        acquires = [r for r in proxy.requests if b"/acquire" in r.split(b"\r\n", 1)[0]]
        assert len(acquires) == 2, acquires  # the first, and its retry
        keys = [ln for r in acquires for ln in r.split(b"\r\n")
                if ln.lower().startswith(b"idempotency-key:")]
        assert len(keys) == 2 and keys[0] == keys[1], keys
        doc = state(d, "retry")
        assert doc["held"] == 1, doc  # one grant, not two
        assert [h["lease"] for h in doc["holders"]] == [p.stdout.strip()]


def acquire_through(d, proxy):
    e = env_for(d)
    e["SEMA_SERVER"] = "http://127.0.0.1:%d" % proxy.port
    return subprocess.run([sema_bin(), "acquire", "bad", "--ttl", "1m"], env=e,
                          capture_output=True, text=True, timeout=30 * SLOW)


def test_unusable_acquire_reply_releases_the_grant():
    with Semad() as d:
        sema(d, "create", "bad", "1", check=0)
        # a reply that is not JSON at all: the lease id is unknown, found again by its key
        p = acquire_through(d, DroppingProxy(d, mangle=lambda b: b[: len(b) // 2]))
        assert p.returncode == EXIT_FAIL and "EPROTO" in p.stderr, (p.returncode, p.stderr)
        wait_until(lambda: state(d, "bad")["held"] == 0, 5, "the grant to be released")
        # JSON with the id but not the rest: released by its id
        strip = lambda b: json.dumps({"lease": json.loads(b)["lease"]}).encode()  # noqa: E731
        p = acquire_through(d, DroppingProxy(d, mangle=strip))
        assert p.returncode == EXIT_FAIL and "EPROTO" in p.stderr, (p.returncode, p.stderr)
        wait_until(lambda: state(d, "bad")["held"] == 0, 5, "the grant to be released")
        assert sema(d, "acquire", "bad", "-t", "0")[0] == 0  # the unit is really back


def test_signal_while_waiting_leaves_queue():
    with Semad() as d:
        sema(d, "create", "q", "1", check=0)
        lease = sema(d, "acquire", "q", check=0)[1].strip()
        p = spawn(d, "run", "q", "--", "true")
        wait_until(lambda: state(d, "q")["waiting"] == 1, 10, "sema run to queue")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10 * SLOW)
        assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
        wait_until(lambda: state(d, "q")["waiting"] == 0, 5, "the waiter to leave")
        doc = state(d, "q")
        assert doc["held"] == 1 and doc["holders"][0]["lease"] == lease, doc


# Every verb, with the arguments it needs (LEASE and TICKET stand for an id).
VERBS_503 = [["get", "s5"], ["ls"], ["create", "s5", "1"], ["resize", "s5", "2"], ["rm", "s5"],
             ["acquire", "s5", "-t", "0"], ["release", "LEASE"], ["renew", "LEASE"],
             ["lease", "LEASE"], ["revoke", "LEASE"], ["wait-idle", "s5", "-t", "1s"],
             ["run", "s5", "--", "true"], ["lock", "k5", "--exclusive", "--", "true"],
             ["up", "s5"], ["down", "s5"], ["value", "s5"], ["ticket", "s5"],
             ["ticket-show", "TICKET"], ["ticket-wait", "TICKET", "-t", "1s"],
             ["ticket-leave", "TICKET"], ["watch", "s5", "--max-retries", "1"]]


def every_verb_exits_69(d, lease, ticket):
    """Each verb of VERBS_503, run at once (each rides out its retries): all exit 69."""
    procs = [(v, spawn(d, *[lease if a == "LEASE" else ticket if a == "TICKET" else a
                             for a in v])) for v in VERBS_503]
    bad = []
    for v, p in procs:
        out, err = p.communicate(timeout=60 * SLOW)
        if p.returncode != EXIT_UNAVAILABLE:
            bad.append("sema %s: exit %d\n%s" % (" ".join(v), p.returncode, err))
    assert not bad, "a 503 must exit 69 (man sema):\n" + "\n".join(bad)


def test_a_503_exits_69_for_every_verb():
    """A semad that answers 503 (here: too many connections from this address, Retry-After:
    1) asks to come back: every verb exits 69, as man sema says, after its retries."""
    with Semad("--max-connections-per-ip", "1") as d:
        sema(d, "create", "s5", "1", check=0)
        lease = sema(d, "acquire", "s5", check=0)[1].strip()
        ticket = sema(d, "ticket", "s5", check=0)[1].strip()
        hold = socket.create_connection((d.host, d.port))
        try:
            hold.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert hold.recv(4096).startswith(b"HTTP/1.1 200"), "the one connection allowed"
            st = d.request("GET", "/healthz")[0]
            assert st == 503, st
            every_verb_exits_69(d, lease, ticket)
        finally:
            hold.close()


def test_redis_away_exits_69_for_every_verb():
    """On the Redis back end with Redis gone, semad answers 503 store_unavailable: every verb
    exits 69 (`sema release` said 1)."""
    import redis_fixture as rf
    rf.need_redis_engine()
    r = rf.RedisServer()
    try:
        with rf.Fleet(r.url(), 1) as fl:
            d = fl[0]
            sema(d, "create", "s5", "1", check=0)
            lease = sema(d, "acquire", "s5", check=0)[1].strip()
            ticket = sema(d, "ticket", "s5", check=0)[1].strip()
            r.kill()
            every_verb_exits_69(d, lease, ticket)
    finally:
        r.close()


if __name__ == "__main__":
    semad_fixture.main(globals())
