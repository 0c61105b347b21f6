# SPDX-License-Identifier: MIT
# test_cli_local.py - `sema run/ls/rm --local` as real processes: mutual exclusion with a
# witness log, capacity, timeouts, exit statuses, signal forwarding, crash recovery.
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SEMA = os.environ.get("SEMA_BIN") or os.path.join(
    os.environ.get("SEMA_BUILD_DIR", "build"), "bin", "sema")
_counter = [0]


def name():
    _counter[0] += 1
    n = "it-%d-%d" % (os.getpid(), _counter[0])
    subprocess.run([SEMA, "rm", "--local", "-f", n], check=True)
    return n


def sema(*args, timeout=30, **kw):
    return subprocess.run([SEMA] + list(args), capture_output=True, text=True,
                          timeout=timeout, **kw)


def eventually(cond, secs=10.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def ls(n):
    r = sema("ls", "--local", n)
    assert r.returncode == 0, r
    return r.stdout


def row_of(n):
    out = ls(n)
    return [line for line in out.splitlines() if line.startswith(n + " ")][0].split()


def max_overlap(log):
    cur = peak = 0
    with open(log) as f:
        for line in f:
            cur += 1 if line.startswith("s") else -1
            assert cur >= 0
            peak = max(peak, cur)
    assert cur == 0
    return peak


def run_many(n, cap, count, hold):
    """Start `count` concurrent `sema run` that each log start/end around a sleep."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "witness")
        script = 'echo s >> "$0"; sleep %s; echo e >> "$0"' % hold
        procs = [subprocess.Popen([SEMA, "run", "--local", n, "-c", str(cap), "--",
                                   "sh", "-c", script, log]) for _ in range(count)]
        for p in procs:
            assert p.wait(timeout=60) == 0
        return max_overlap(log)


def test_capacity_one_never_overlaps():
    n = name()
    assert run_many(n, 1, 8, "0.05") == 1
    assert row_of(n)[1:] == ["1", "1", "0", "0"]  # capacity, available, holders, waiters
    sema("rm", "--local", n)


def test_capacity_three_admits_exactly_three():
    n = name()
    assert run_many(n, 3, 7, "1") == 3
    sema("rm", "--local", n)


def test_exit_status_propagates():
    n = name()
    assert sema("run", "--local", n, "-c", "1", "--", "sh", "-c", "exit 7").returncode == 7
    assert sema("run", "--local", n, "--", "true").returncode == 0
    assert sema("run", "--local", n, "--", "sh", "-c", "kill -KILL $$").returncode == 128 + 9
    assert sema("run", "--local", n, "--", "/nonexistent/cmd").returncode == 127
    assert sema("run", "--local", n, "--", "/dev/null").returncode == 126
    sema("rm", "--local", n)


def hold_in_background(n, cap="1", weight="1"):
    """A `sema run` that holds until killed; returns it once it holds."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        ready = f.name
    os.unlink(ready)
    p = subprocess.Popen([SEMA, "run", "--local", n, "-c", cap, "-w", weight, "--", "sh", "-c",
                          'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 60', ready])
    assert eventually(lambda: os.path.exists(ready)), "holder never started"
    with open(ready) as f:
        p.cmd_pid = int(f.read())
    os.unlink(ready)
    return p


def test_timeout_exit_code():
    n = name()
    h = hold_in_background(n)
    t0 = time.monotonic()
    r = sema("run", "--local", n, "-t", "200ms", "--", "true")
    assert r.returncode == 75, r
    assert time.monotonic() - t0 >= 0.19
    assert sema("run", "--local", n, "-t", "0", "--", "true").returncode == 75
    h.send_signal(signal.SIGTERM)  # forwarded to sleep, which dies of it
    assert h.wait(timeout=10) == 128 + signal.SIGTERM
    assert sema("run", "--local", n, "-t", "0", "--", "true").returncode == 0
    sema("rm", "--local", n)


def test_signals_are_forwarded():
    n = name()
    with tempfile.TemporaryDirectory() as d:
        ready = os.path.join(d, "ready")
        script = 'trap "exit 42" USR1; touch "$0"; while :; do sleep 0.02; done'
        p = subprocess.Popen([SEMA, "run", "--local", n, "-c", "1", "--", "sh", "-c", script, ready])
        assert eventually(lambda: os.path.exists(ready))
        p.send_signal(signal.SIGUSR1)
        assert p.wait(timeout=10) == 42
    sema("rm", "--local", n)


def test_killed_sema_gives_units_back():
    n = name()
    h = hold_in_background(n)
    r = sema("run", "--local", n, "-t", "0", "--", "true")
    assert r.returncode == 75
    h.kill()  # SIGKILL: no release ever happens; sleep lives on as an orphan
    h.wait(timeout=10)
    r = sema("run", "--local", n, "-t", "2s", "--", "true")
    assert r.returncode == 0, r
    os.kill(h.cmd_pid, signal.SIGKILL)  # the orphaned command, by its pid
    sema("rm", "--local", n)


def test_ls_shows_holders_and_waiters():
    n = name()
    h = hold_in_background(n, cap="3", weight="2")
    w = subprocess.Popen([SEMA, "run", "--local", n, "-w", "3", "--", "true"])
    assert eventually(lambda: "waiter pid %d weight 3" % w.pid in ls(n)), ls(n)
    out = ls(n)
    assert "holder pid %d weight 2" % h.pid in out, out
    assert row_of(n)[1:] == ["3", "1", "1", "1"], out
    h.send_signal(signal.SIGTERM)
    h.wait(timeout=10)
    assert w.wait(timeout=10) == 0
    sema("rm", "--local", n)


def test_ls_columns_stay_in_line_with_a_long_name():
    short, long = name(), name() + "-" + "x" * 40
    for n in (short, long):
        assert sema("run", "--local", n, "-c", "2", "--", "true").returncode == 0
    try:
        for args in (["ls", "--local", short, long], ["ls", "--local"]):
            out = sema(*args).stdout.splitlines()
            rows = [out[0]] + [line for line in out if line.split()[0] in (short, long)]
            assert len(rows) == 3, out
            # every column ends where the header's does
            ends = [m.end() for m in re.finditer(r"\S+", rows[0])]
            for row in rows[1:]:
                assert [m.end() for m in re.finditer(r"\S+", row)][1:] == ends[1:], out
    finally:
        sema("rm", "--local", short, long)


def test_rm_and_errors():
    n = name()
    assert sema("run", "--local", n, "-c", "2", "--", "true").returncode == 0
    r = sema("run", "--local", n, "-c", "3", "--", "true")
    assert r.returncode == 1 and "capacity 2" in r.stderr, r
    assert sema("run", "--local", n, "-w", "3", "--", "true").returncode == 1
    assert sema("rm", "--local", n).returncode == 0
    assert sema("rm", "--local", n).returncode == 1
    assert sema("rm", "--local", "-f", n).returncode == 0
    for bad in (["run", "--local", n], ["run", "--local", "--", "true"],
                ["run", "--local", n, "-t", "soon", "--", "true"],
                ["run", "--local", n, "-t", "5", "--", "true"],
                ["run", "--local", n, "-w", "0", "--", "true"], ["rm", "--local"],
                ["run", "--local", n, "--bogus", "--", "true"], ["nosuchverb"]):
        r = sema(*bad)
        assert r.returncode == 2, (bad, r)


def test_without_capacity_a_missing_name_creates_nothing():
    # as the remote form: a mistyped NAME must not become a semaphore of its own (of
    # capacity 1); the message says how to create it
    n = name()
    for args in (["run", "--local", n, "--", "true"],
                 ["run", "--local", n, "-w", "2", "--", "true"]):
        r = sema(*args)
        assert r.returncode == 1, (args, r)
        assert ("no shared-memory semaphore '%s': create it with -c CAPACITY (sema run --local "
                "%s -c CAPACITY -- CMD)" % (n, n)) in r.stderr, r.stderr
        assert sema("rm", "--local", n).returncode == 1, "nothing was created"
    assert sema("run", "--local", n, "-c", "2", "-w", "2", "--", "true").returncode == 0
    assert sema("run", "--local", n, "-w", "2", "--", "true").returncode == 0  # exists now
    assert sema("run", "--local", n, "--", "true").returncode == 0
    assert sema("rm", "--local", n).returncode == 0


def test_ls_json_before_or_after_the_verb():
    n = name()
    holder = hold_in_background(n, cap="3", weight="2")
    try:
        for args in (["ls", "--local", "--json", n], ["--json", "ls", "--local", n],
                     ["--local", "--json", "ls", n], ["ls", n, "--json", "--local"]):
            r = sema(*args)
            assert r.returncode == 0, (args, r)
            docs = [json.loads(line) for line in r.stdout.splitlines()]
            assert len(docs) == 1, (args, r.stdout)
            d = docs[0]
            assert (d["name"], d["capacity"], d["available"], d["held"]) == (n, 3, 1, 2), d
            assert d["waiting"] == 0 and d["waiters"] == [], d
            h = d["holders"]
            assert len(h) == 1 and h[0]["weight"] == 2 and h[0]["pid"] > 0, d
            assert abs(h[0]["since"] / 1000 - time.time()) < 600, d
        r = sema("ls", "--local", "--json")  # every semaphore: one JSON object a line
        assert r.returncode == 0 and n in [json.loads(x)["name"] for x in r.stdout.splitlines()]
        # a NAME that cannot be shown goes to stderr, so that stdout stays JSON
        missing = name()
        r = sema("ls", "--local", "--json", n, missing)
        assert r.returncode == 1, r
        assert [json.loads(x)["name"] for x in r.stdout.splitlines()] == [n], r.stdout
        assert "sema ls: %s: no such shared-memory semaphore" % missing in r.stderr, r.stderr
    finally:
        holder.kill()
        holder.wait()
        os.kill(holder.cmd_pid, signal.SIGKILL)  # else the orphaned sleep keeps ctest's pipe open
        sema("rm", "--local", n)


def test_a_bad_name_says_what_a_local_name_is():
    # a name carried over from semad's (which may hold '/') is a usage error that says what
    # a shared-memory name may be, not "invalid argument"
    rule = ("a shared-memory name is 1-200 characters of A-Z a-z 0-9 . _ - "
            "and does not start with '.'")
    for bad in ("jobs/gpu", ".hidden", "x" * 201):
        r = sema("run", "--local", bad, "--", "true")
        assert r.returncode == 2, (bad, r)
        assert r.stderr.startswith("sema run --local: bad name '%s': %s" % (bad, rule)), r.stderr
        r = sema("rm", "--local", bad)
        assert r.returncode == 2 and ("bad name '%s': %s" % (bad, rule)) in r.stderr, r
        r = sema("ls", "--local", bad)
        assert r.returncode == 1 and ("error: bad name: " + rule) in r.stdout, r


def test_rm_of_a_missing_name_says_shared_memory():
    n = name()
    r = sema("rm", "--local", n)
    assert r.returncode == 1, r
    assert "no such shared-memory semaphore '%s'" % n in r.stderr, r.stderr
    r = sema("ls", "--local", n)
    assert r.returncode == 1 and "no such shared-memory semaphore" in r.stdout, r


def test_local_before_the_verb():
    n = name()
    assert sema("--local", "run", n, "-c", "2", "--", "true").returncode == 0
    r = sema("--local", "ls", n)
    assert r.returncode == 0 and r.stdout.startswith("NAME") and n in r.stdout, r
    assert sema("--local", "help", "rm").stdout == sema("rm", "--local", "--help").stdout
    assert sema("--local", "rm", n).returncode == 0
    assert sema("--local", "rm", n).returncode == 1


def test_mistyped_option_gets_a_suggestion():
    r = sema("run", "--local", "x", "--capcity", "2", "--", "true")
    assert r.returncode == 2 and "did you mean --capacity?" in r.stderr, r
    # a global option, mistyped before or after the verb
    for args in (["ls", "--local", "--jsn"], ["--jsn", "ls", "--local"],
                 ["--local", "--jsn", "ls"]):
        r = sema(*args)
        assert r.returncode == 2 and "did you mean --json?" in r.stderr, (args, r)


def test_a_usage_error_points_at_the_local_help():
    # the remote form's help has other options (--ttl, --server): point at the local one
    for args, verb in ((["run", "--local", "x", "-t", "30", "--", "true"], "run"),
                       (["run", "--local", "x", "--bogus", "--", "true"], "run"),
                       (["--local", "run", "x", "-w", "0", "--", "true"], "run"),
                       (["rm", "--local"], "rm"), (["ls", "--local", "--bogus"], "ls")):
        r = sema(*args)
        assert r.returncode == 2, (args, r)
        assert r.stderr.startswith("sema %s --local: " % verb), (args, r.stderr)
        hint = "(see `sema %s --local --help`)" % verb
        assert r.stderr.rstrip().endswith(hint), (args, r.stderr)
        help_text = sema(verb, "--local", "--help")
        assert help_text.returncode == 0 and "--local" in help_text.stdout.splitlines()[0]


def test_durations():
    n = name()
    for good in ("100ms", "1.5s", "2m", "1h", "0", "0.0", "forever", "inf", "-1"):
        r = sema("run", "--local", n, "-c", "1", "-t", good, "--", "true")
        assert r.returncode == 0, (good, r)
    # a bare number other than 0 is refused, as semad refuses it: seconds or milliseconds?
    for bad in ("5q", "", "ms", "s10", "1e999", "nan", "1 s", "--", "3", "0.25"):
        r = sema("run", "--local", n, "-t", bad, "--", "true")
        assert r.returncode == 2, (bad, r)
    sema("rm", "--local", n)


def test_help_version_and_remote_form():
    assert sema("--version").stdout.startswith("sema ")
    for args in (["help"], ["--help"], ["run", "--local", "--help"], ["ls", "--local", "-h"],
                 ["help", "rm"]):
        r = sema(*args)
        assert r.returncode == 0 and "usage" in r.stdout, (args, r)
    # Without --local the verbs need a server: none listens on this port.
    env = dict(os.environ, SEMA_SERVER="http://127.0.0.1:9")
    r = sema("run", "x", "--", "true", env=env)
    assert r.returncode == 69, r


if __name__ == "__main__":
    if not os.path.exists(SEMA):
        print("skipped: no sema binary at %s" % SEMA)
        sys.exit(77)
    globals()["test_" + sys.argv[1]]()
