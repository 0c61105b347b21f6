# SPDX-License-Identifier: MIT
"""test_durability.py - semad keeps its word across crashes: SIGKILL at random moments and
restart on the same data directory, a disk that fills up, stores it must refuse to start on.

Run one case: python3 test_durability.py <name>. Needs $SEMAD (CTest sets it)."""
import atexit
import errno
import http.client
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from semad_fixture import SLOW, semad_path

SEED = 20240504
SCALE = float(os.environ.get("SEMA_TEST_SCALE", "1") or "1")
SEMAD = semad_path()


def skip(why):
    print("skipped: " + why, file=sys.stderr)
    sys.exit(77)


RUNNING = []


@atexit.register
def kill_leftovers():
    """A failed case must not leave semad processes behind."""
    for srv in RUNNING:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()


class Semad:
    """One semad process on a given data directory (so it can be killed and restarted on
    it, or run under a command prefix such as `unshare`), with a small HTTP/JSON client.
    Like semad_fixture.Semad, it listens on port 0 and reads the port from semad's log."""

    def __init__(self, data, durability="strict", prefix=(), extra=()):
        self.data = data
        self.log = tempfile.NamedTemporaryFile(prefix="semad-", suffix=".log", delete=False)
        argv = list(prefix) + [SEMAD, "--listen", "127.0.0.1:0", "--data", data,
                               "--durability", durability] + list(extra)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        RUNNING.append(self)
        self.port = None

    def wait_ready(self, timeout=20.0):
        deadline = time.time() + timeout * SLOW
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("semad exited %d:\n%s" % (self.proc.returncode, self.output()))
            if self.port is None:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.output())
                self.port = int(m.group(1)) if m else None
            try:
                if self.port is not None and self.call("GET", "/healthz", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError("semad did not answer within %.0f s:\n%s" % (timeout, self.output()))

    def output(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def call(self, method, path, body=None, timeout=10):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout * SLOW)
        try:
            return request(conn, method, path, body)
        finally:
            conn.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=20)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20 * SLOW)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("semad did not stop on SIGTERM")
        os.unlink(self.log.name)


def request(conn, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = raw
    return resp.status, doc


def sem_state(srv, name):
    status, doc = srv.call("GET", "/v1/semaphores/" + name)
    assert status == 200, (name, status, doc)
    return doc


# ---- the crash test -------------------------------------------------------------------------

class Ledger:
    """What the clients know: grants received, releases sent and confirmed, and a checker
    that the weight surely held (granted, release not yet sent) never exceeds capacity."""

    def __init__(self, caps):
        self.lock = threading.Lock()
        self.caps = caps
        self.held = {name: 0 for name in caps}
        self.leases = {}          # id -> {"sem","weight","fence","state"}
        self.fences = {}          # (sem, fence) -> lease id
        self.errors = []

    def granted(self, lease):
        with self.lock:
            key = (lease["name"], lease["fence"])
            if key in self.fences and self.fences[key] != lease["lease"]:
                self.errors.append("fence %s reused: %s and %s" % (key, self.fences[key],
                                                                  lease["lease"]))
            self.fences[key] = lease["lease"]
            if lease["lease"] in self.leases:
                self.errors.append("lease id %s granted twice" % lease["lease"])
            self.leases[lease["lease"]] = {"sem": lease["name"], "weight": lease["weight"],
                                           "fence": lease["fence"], "state": "held",
                                           "ttl": lease["ttl_ms"]}
            self.held[lease["name"]] += lease["weight"]
            if self.held[lease["name"]] > self.caps[lease["name"]]:
                self.errors.append("%s: %d held > capacity %d" % (
                    lease["name"], self.held[lease["name"]], self.caps[lease["name"]]))

    def renewing(self, lid, ttl):
        """A renewal is sent: until its reply, the lease's ttl is either."""
        with self.lock:
            self.leases[lid]["renewing"] = ttl

    def renewed(self, lid, ttl, expires_at):
        with self.lock:
            rec = self.leases[lid]
            rec["expires_at"], rec["ttl"] = expires_at, ttl
            rec.pop("renewing", None)

    def releasing(self, lid):
        with self.lock:
            rec = self.leases[lid]
            rec["release_sent"] = time.monotonic()
            if rec["state"] == "held":
                self.held[rec["sem"]] -= rec["weight"]
            rec["state"] = "releasing"

    def released(self, lid):
        with self.lock:
            self.leases[lid]["state"] = "released"

    def unsent_releases(self, dead_since):
        """Releases sent to a dead semad did not happen: those leases are still held."""
        with self.lock:
            for rec in self.leases.values():
                if rec["state"] == "releasing" and rec["release_sent"] > dead_since:
                    rec["state"] = "held"
                    self.held[rec["sem"]] += rec["weight"]

    def forget(self, lid):
        """A lease the test itself released after a restart (unknown outcome before)."""
        with self.lock:
            rec = self.leases.get(lid)
            if rec is not None and rec["state"] == "held":
                self.held[rec["sem"]] -= rec["weight"]
            if rec is not None:
                rec["state"] = "released"


class Gate:
    """Lets the clients run rounds while open; close() waits until no client is inside a
    round. A client that read a grant just before the kill may be descheduled for a long
    while (a loaded machine, 50 threads on one GIL) before it writes it into the ledger:
    checking the restarted server before that would see a lease the ledger does not know,
    give it back, and the late entry would then claim a lease the server no longer has
    (false "granted before the kill is gone" or "held > capacity")."""

    def __init__(self):
        self.up = threading.Event()   # also read by Client.call: paused clients touch nothing
        self.cond = threading.Condition()
        self.busy = 0

    def enter(self, timeout):
        """True when the caller may run one round (then it must call leave())."""
        if not self.up.wait(timeout):
            return False
        with self.cond:
            if not self.up.is_set():
                return False
            self.busy += 1
            return True

    def leave(self):
        with self.cond:
            self.busy -= 1
            self.cond.notify_all()

    def open(self):
        self.up.set()

    def close(self, timeout):
        """Stop new rounds; wait (bounded) until the rounds under way have ended. With the
        server dead each fails at its next request, so this takes a hold's sleep at most."""
        with self.cond:
            self.up.clear()
            if not self.cond.wait_for(lambda: self.busy == 0, timeout * SLOW):
                raise AssertionError("%d clients still inside a round after %.0f s" % (
                    self.busy, timeout * SLOW))


class Client(threading.Thread):
    def __init__(self, idx, port_box, ledger, stop, gate, names):
        super().__init__(daemon=True)
        self.idx, self.port_box, self.ledger = idx, port_box, ledger
        self.stop, self.gate, self.up, self.names = stop, gate, gate.up, names
        self.rng = random.Random(SEED * 100 + idx)
        self.conn = None
        self.ops = 0

    def connect(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port_box[0], timeout=10)

    def call(self, method, path, body=None):
        if not self.up.is_set():  # the server is down or being checked: touch nothing
            raise ConnectionError("semad is down")
        if self.conn is None:
            self.connect()
        try:
            return request(self.conn, method, path, body)
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise

    def one_round(self):
        name = self.rng.choice(self.names)
        weight = min(self.rng.choice([1, 1, 2]), self.ledger.caps[name])
        status, doc = self.call("POST", "/v1/semaphores/%s/acquire" % name,
                                {"weight": weight, "timeout_ms": 100, "ttl_ms": 120000,
                                 "owner": "client-%d" % self.idx})
        if status != 200:
            assert status == 409, (status, doc)
            return
        assert doc["weight"] == weight and doc["name"] == name, doc
        self.ledger.granted(doc)
        lid = doc["lease"]
        for _ in range(self.rng.choice([0, 0, 1, 2])):
            # A longer ttl: if the renewal were lost, the restart would compute the expiry
            # from the grant's ttl, earlier than the one this reply promises. A shorter one:
            # the restart must give the ttl last acknowledged, not the grant's.
            ttl = self.rng.choice([60000, 120000, 600000])
            self.ledger.renewing(lid, ttl)
            status, doc = self.call("POST", "/v1/leases/%s/renew" % lid, {"ttl_ms": ttl})
            assert status == 200, (status, doc)
            assert doc["ttl_ms"] == ttl, doc
            self.ledger.renewed(lid, ttl, doc["expires_at"])
        # Most holds are short; some long enough that the kill finds many leases held.
        time.sleep(self.rng.random() * (0.3 if self.rng.random() < 0.3 else 0.01))
        self.ledger.releasing(lid)
        status, doc = self.call("DELETE", "/v1/leases/" + lid)
        assert status in (200, 204), (status, doc)
        self.ledger.released(lid)

    def run(self):
        while not self.stop.is_set():
            if not self.gate.enter(timeout=0.2):
                continue
            try:
                self.one_round()
                self.ops += 1
            except (OSError, http.client.HTTPException):
                time.sleep(0.02)  # the server went away; wait until it is back
            except AssertionError as exc:
                with self.ledger.lock:
                    self.ledger.errors.append("client %d: %r" % (self.idx, exc))
            finally:
                self.gate.leave()


def check_after_restart(srv, ledger, restart_ms, acked_changes=True):
    """Every semaphore with its capacity; every lease surely held is back with its fence,
    at most the semaphore's; held <= capacity; no holder loses time for the downtime. With
    `acked_changes` (strict): no acknowledged release is undone, no acknowledged renewal's
    expiry comes back earlier, and every lease has the ttl last acknowledged, its expiry no
    earlier than restart + that ttl. Then releases every holder: the clients abandoned them
    when the server died."""
    problems, verified = [], 0
    for name, cap in ledger.caps.items():
        st = sem_state(srv, name)
        if st["capacity"] != cap:
            problems.append("%s: capacity %s after restart, was %d" % (name, st["capacity"], cap))
        held = sum(h["weight"] for h in st["holders"])
        if held > cap:
            problems.append("%s: %d held > capacity %d after restart" % (name, held, cap))
        present = {h["lease"]: h for h in st["holders"]}
        with ledger.lock:
            mine = {lid: rec for lid, rec in ledger.leases.items() if rec["sem"] == name}
            top = max([r["fence"] for r in mine.values()], default=0)
        if st["fence"] < top:
            problems.append("%s: fence %d after restart < %d handed out" % (name, st["fence"], top))
        for lid, rec in mine.items():
            verified += rec["state"] == "held" and lid in present
            if rec["state"] == "held" and lid not in present:
                problems.append("%s: lease %s (fence %d) granted before the kill is gone" % (
                    name, lid, rec["fence"]))
            if acked_changes and rec["state"] == "released" and lid in present:
                problems.append("%s: lease %s was released (204) before the kill but is back" %
                                (name, lid))
            promised = rec.get("expires_at")
            # A renewal sent and not answered may have been made (with a shorter ttl, say).
            unsure = "renewing" in rec
            if acked_changes and lid in present and promised is not None and not unsure and \
                    present[lid]["expires_at"] < promised:
                problems.append("lease %s: expires at %d after restart, its renewal promised %d"
                                % (lid, present[lid]["expires_at"], promised))
            if lid in present:
                # The ttl last acknowledged (relaxed may lose renewals: any of them)
                ttls = {rec["ttl"], rec.get("renewing", rec["ttl"])}
                status, doc = srv.call("GET", "/v1/leases/" + lid)
                if status != 200 or (acked_changes and doc["ttl_ms"] not in ttls):
                    problems.append("lease %s: ttl %r after restart, acknowledged %s" % (
                        lid, doc, sorted(ttls)))
                elif present[lid]["expires_at"] < restart_ms + doc["ttl_ms"] - 1000:
                    problems.append("lease %s expires at %d, before restart + its ttl (%d)" % (
                        lid, present[lid]["expires_at"], restart_ms + doc["ttl_ms"]))
        for lid, h in present.items():
            rec = mine.get(lid)
            if rec is not None and h["fence"] != rec["fence"]:
                problems.append("lease %s: fence %s, was %d" % (lid, h["fence"], rec["fence"]))
            if rec is None and h["expires_at"] < restart_ms + 60000 - 1000:
                problems.append("lease %s expires at %d, before restart + the shortest ttl" % (
                    lid, h["expires_at"]))
            # The clients are paused and hold nothing in hand: whatever is still held was
            # abandoned by the kill (or its grant never reached a client). Give it back.
            status, doc = srv.call("DELETE", "/v1/leases/" + lid)
            if status not in (200, 204):
                problems.append("release of abandoned %s: %d %r" % (lid, status, doc))
            ledger.forget(lid)
    return problems, verified


def test_crash_restart():
    crash_restart("strict", max(2, int(5 * SCALE)))


def test_crash_restart_relaxed():
    # relaxed keeps every acknowledged grant when only the process dies; releases and
    # renewals it acknowledges before their commit (docs/durability.md)
    crash_restart("relaxed", 2)


def crash_restart(durability, rounds):
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    rng = random.Random(SEED)
    nclients = 50
    names = ["crash-%d" % i for i in range(6)]
    caps = {name: rng.randint(1, 8) for name in names}
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        srv = Semad(data, durability).wait_ready()
        for name, cap in caps.items():
            status, doc = srv.call("PUT", "/v1/semaphores/" + name, {"capacity": cap})
            assert status in (200, 201), (status, doc)
        ledger = Ledger(caps)
        stop, gate = threading.Event(), Gate()
        port_box = [srv.port]
        clients = [Client(i, port_box, ledger, stop, gate, names) for i in range(nclients)]
        for c in clients:
            c.start()
        try:
            for rnd in range(rounds):
                gate.open()
                time.sleep(0.3 + rng.random() * 1.2)  # a random moment to die
                srv.kill()
                dead_since = time.monotonic()  # a release sent after this never reached semad
                gate.close(timeout=30)  # every grant read before the kill is in the ledger
                ledger.unsent_releases(dead_since)
                assert not ledger.errors, ledger.errors[:10]
                restart_ms = int(time.time() * 1000)
                srv = Semad(data, durability)
                srv.wait_ready()
                problems, verified = check_after_restart(srv, ledger, restart_ms,
                                                         durability == "strict")
                assert not problems, "round %d:\n%s" % (rnd, "\n".join(problems[:20]))
                port_box[0] = srv.port
                with ledger.lock:
                    n = len(ledger.leases)
                print("round %d: killed and restarted; %d grants so far, %d leases held at "
                      "the kill found again" % (rnd, n, verified))
        finally:
            stop.set()
            gate.open()
            for c in clients:
                c.join(timeout=15)
        assert not ledger.errors, ledger.errors[:10]
        assert len(ledger.leases) >= rounds * 10, "too few grants: %d" % len(ledger.leases)
        srv.stop()
        check = subprocess.run([SEMAD, "--check", data], capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


def test_restart_keeps_legacy_locks_resizes_and_fences():
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        srv = Semad(data).wait_ready()
        assert srv.call("POST", "/semaphore", {"name": "L", "value": 2})[0] == 200
        for op in ("up", "up", "down"):
            assert srv.call("POST", "/semaphore/" + op, {"name": "L"})[0] == 200
        status, lock = srv.call("POST", "/v1/locks/k/acquire",
                                {"mode": "exclusive", "ttl_ms": 60000})
        assert status == 200, (status, lock)
        assert srv.call("PUT", "/v1/semaphores/r", {"capacity": 2})[0] == 201
        assert srv.call("PATCH", "/v1/semaphores/r", {"capacity": 7})[0] == 200
        assert srv.call("PUT", "/v1/semaphores/gone", {"capacity": 1})[0] == 201
        fences = []
        for _ in range(3):
            status, lease = srv.call("POST", "/v1/semaphores/gone/acquire", {"weight": 1})
            assert status == 200, (status, lease)
            fences.append(lease["fence"])
            assert srv.call("DELETE", "/v1/leases/" + lease["lease"])[0] in (200, 204)
        assert srv.call("DELETE", "/v1/semaphores/gone")[0] in (200, 204)
        srv.kill()

        srv = Semad(data).wait_ready()
        try:
            assert srv.call("GET", "/semaphore/value/L") == (200, {"name": "L", "value": 3})
            status, doc = srv.call("GET", "/v1/locks/k")
            assert status == 200 and [h["lease"] for h in doc["holders"]] == [lock["lease"]], doc
            status, doc = srv.call("POST", "/v1/locks/k/acquire",
                                   {"mode": "shared", "timeout_ms": 0})
            assert status == 409, "a shared lock was granted beside a restored exclusive one"
            assert sem_state(srv, "r")["capacity"] == 7
            assert srv.call("GET", "/v1/semaphores/gone")[0] == 404
            assert srv.call("PUT", "/v1/semaphores/gone", {"capacity": 1})[0] == 201
            status, lease = srv.call("POST", "/v1/semaphores/gone/acquire", {"weight": 1})
            assert status == 200, (status, lease)
            assert lease["fence"] > max(fences), "fence %d reused after delete, restart and " \
                "recreate (had %r)" % (lease["fence"], fences)
        finally:
            srv.stop()


def test_restart_keeps_legacy_up_down_on_a_v1_semaphore():
    # A v1 semaphore moved by legacy up/down keeps that value across a restart, with a
    # lease granted and another released around it.
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        srv = Semad(data).wait_ready()
        assert srv.call("PUT", "/v1/semaphores/v", {"capacity": 3})[0] == 201
        status, kept = srv.call("POST", "/v1/semaphores/v/acquire", {"weight": 1})
        assert status == 200, (status, kept)
        for op in ("down", "up", "up", "up"):
            assert srv.call("POST", "/semaphore/" + op, {"name": "v"})[0] == 200
        status, gone = srv.call("POST", "/v1/semaphores/v/acquire", {"weight": 2})
        assert status == 200, (status, gone)
        assert srv.call("DELETE", "/v1/leases/" + gone["lease"])[0] in (200, 204)
        before = srv.call("GET", "/semaphore/value/v")
        assert before == (200, {"name": "v", "value": 4}), before
        # A release is written lazily, with the next commit: a create's reply waits for one.
        assert srv.call("PUT", "/v1/semaphores/sync", {"capacity": 1})[0] == 201
        srv.kill()

        srv = Semad(data).wait_ready()
        try:
            assert srv.call("GET", "/semaphore/value/v") == before
            st = sem_state(srv, "v")
            assert (st["available"], st["held"]) == (4, 1), st
            assert [h["lease"] for h in st["holders"]] == [kept["lease"]], st
            assert srv.call("DELETE", "/v1/leases/" + kept["lease"])[0] in (200, 204)
            assert srv.call("GET", "/semaphore/value/v") == (200, {"name": "v", "value": 5})
        finally:
            srv.stop()


# ---- a disk that fills up -------------------------------------------------------------------

ROWS_SCRIPT = """
import json, sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True, timeout=5)
print(json.dumps([dict(db.execute("SELECT name, capacity FROM semaphores").fetchall()),
                  dict(db.execute("SELECT id, sem FROM leases").fetchall())]))
"""


def store_rows(pid, path):
    """The semaphores and leases in the store file, read in semad's mount namespace (SQLite
    resolves /proc/PID/root, so it has to run there)."""
    run = subprocess.run(["nsenter", "-t", str(pid), "-m", sys.executable, "-c", ROWS_SCRIPT,
                          path], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    sems, leases = json.loads(run.stdout)
    return sems, leases


def fill(path):
    """Fill the filesystem of `path` (unbuffered: a buffered file would raise ENOSPC again
    when it is closed with bytes it could not write)."""
    block = b"x" * 65536
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def test_disk_full():
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt && umount /mnt"],
                           capture_output=True)
    if probe.returncode != 0 or subprocess.run(["nsenter", "--version"],
                                               capture_output=True).returncode != 0:
        skip("cannot mount a small tmpfs in a private mount namespace (needs root)")
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        os.mkdir(data, 0o700)
        # semad runs in its own mount namespace on a 4 MiB tmpfs; we reach the files
        # through /proc/PID/root, which resolves paths in semad's namespace.
        wrapper = ["unshare", "-m", "sh", "-c",
                   'mount -t tmpfs -o size=4m,mode=0700 tmpfs "$0" && exec "$@"', data]
        srv = Semad(data, prefix=wrapper).wait_ready()
        inside = "/proc/%d/root%s" % (srv.proc.pid, data)
        try:
            disk_full_body(srv, inside)
        finally:
            srv.stop()


def checked_contents(srv):
    """`semad --check` in semad's mount namespace: the semaphores and leases the store holds
    (the database with the journal applied)."""
    check = subprocess.run(["nsenter", "-t", str(srv.proc.pid), "-m", SEMAD, "--check",
                            srv.data], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    m = re.search(r"contents: (\d+) semaphores, (\d+) leases", check.stdout)
    assert m, check.stdout
    return int(m.group(1)), int(m.group(2))


def disk_full_body(srv, inside):
    status, doc = srv.call("PUT", "/v1/semaphores/before", {"capacity": 3})
    assert status == 201, (status, doc)
    status, lease = srv.call("POST", "/v1/semaphores/before/acquire", {"weight": 1})
    assert status == 200, (status, lease)
    fill(inside + "/filler")
    # Commits go on into the journal's preallocated room; checkpoints into the full database
    # fail and are tried again; once the journal has to grow, commits fail too.
    created, refused = [], []
    for i in range(20000):
        name = "full-%05d-%s" % (i, "x" * 200)
        status, doc = srv.call("PUT", "/v1/semaphores/" + name, {"capacity": 2})
        if status == 503:
            assert doc["code"] == "store_unavailable", doc
            refused.append(name)
            if len(refused) >= 5:
                break
        else:
            assert status == 201, (status, doc)
            created.append(name)
    assert refused, "the store never reported the full disk"
    assert srv.proc.poll() is None, "semad died on a full disk"
    with open(srv.log.name) as f:
        log = f.read()
    assert "a checkpoint failed" in log and "disk full" in log, log[-2000:]
    # Reads keep working, and what semad serves equals what the store holds.
    status, doc = srv.call("GET", "/v1/semaphores/before")
    assert status == 200 and len(doc["holders"]) == 1, (status, doc)
    for name in refused:
        status, _ = srv.call("GET", "/v1/semaphores/" + name)
        assert status == 404, (name, status)
    nsems, nleases = checked_contents(srv)
    assert (nsems, nleases) == (1 + len(created), 1), (nsems, nleases, len(created))
    status, doc = srv.call("GET", "/v1/semaphores?limit=1000")
    assert status == 200, (status, doc)
    served = set(x["name"] for x in doc["semaphores"])
    while doc.get("next_cursor"):
        status, doc = srv.call("GET", "/v1/semaphores?limit=1000&cursor=" + doc["next_cursor"])
        assert status == 200, (status, doc)
        served |= set(x["name"] for x in doc["semaphores"])
    assert served == set(["before"] + created), "served state != store"
    print("disk full: %d creates committed, then %d refused with 503" % (len(created),
                                                                        len(refused)))
    # Room again: semad recovers by itself.
    os.unlink(inside + "/filler")
    status, doc = srv.call("PUT", "/v1/semaphores/after", {"capacity": 1})
    assert status == 201, (status, doc)
    status, doc = srv.call("DELETE", "/v1/leases/" + lease["lease"])
    assert status in (200, 204), (status, doc)
    assert checked_contents(srv) == (2 + len(created), 0)
    # Once commits pause, a checkpoint (about a second on) brings the database up to date.
    status, held = srv.call("POST", "/v1/semaphores/after/acquire", {})
    assert status == 200, (status, held)
    status, _ = srv.call("DELETE", "/v1/leases/" + held["lease"])
    assert status in (200, 204), status
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sems, leases = store_rows(srv.proc.pid, srv.data + "/sema.db")
        if set(sems) == set(["before", "after"] + created) and not leases:
            break
        time.sleep(0.2)
    assert set(sems) == set(["before", "after"] + created), (len(sems), len(created))
    assert not leases, leases


# ---- stores semad must refuse ---------------------------------------------------------------

def expect_refusal(data, *needles):
    run = subprocess.run([SEMAD, "--listen", "127.0.0.1:0", "--data", data],
                         capture_output=True, text=True, timeout=30)
    out = run.stdout + run.stderr
    assert run.returncode != 0, "semad started on a bad store:\n" + out
    for needle in needles:
        assert needle in out, "%r not in semad's message:\n%s" % (needle, out)
    return out


def make_store(data):
    srv = Semad(data).wait_ready()
    status, doc = srv.call("PUT", "/v1/semaphores/kept", {"capacity": 2})
    assert status == 201, (status, doc)
    srv.stop()


def test_refuse_corrupt():
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        os.mkdir(data, 0o700)
        db = os.path.join(data, "sema.db")
        with open(db, "w") as f:
            f.write("this is not a database\n" * 200)
        expect_refusal(data, db, "not a database")
        with open(db, "rb") as f:
            assert f.read(4) == b"this", "semad overwrote the file it refused"
        check = subprocess.run([SEMAD, "--check", data], capture_output=True, text=True,
                               timeout=30)
        assert check.returncode != 0, check.stdout


def test_refuse_other_version():
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        make_store(data)
        db = sqlite3.connect(os.path.join(data, "sema.db"))
        db.execute("PRAGMA user_version = 7")
        db.close()
        expect_refusal(data, os.path.join(data, "sema.db"), "version 7")


def test_refuse_locked_dir():
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        first = Semad(data).wait_ready()
        try:
            expect_refusal(data, "pid %d" % first.proc.pid, "LOCK")
            status, doc = first.call("GET", "/v1/semaphores")
            assert status == 200, "the first semad suffered from the second: %r" % doc
        finally:
            first.stop()
        make_store(data)  # the lock went with the first semad


def test_check_command():
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "data")
        make_store(data)
        check = subprocess.run([SEMAD, "--check", data], capture_output=True, text=True,
                               timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "1 semaphores" in check.stdout + check.stderr
        db = sqlite3.connect(os.path.join(data, "sema.db"))
        db.execute("INSERT INTO leases(id,sem,weight,fence,ttl_ms,acquired_at,expires_at,is_lock)"
                   " VALUES('forged','kept',1,99,1000,1,1001,0)")
        db.commit()
        db.close()
        check = subprocess.run([SEMAD, "--check", data], capture_output=True, text=True,
                               timeout=30)
        assert check.returncode != 0, check.stdout
        assert "forged" in check.stdout + check.stderr


def doc_blocks(heading, contains):
    """The ```sh blocks of docs/durability.md's section `heading` whose text has `contains`."""
    src = os.environ.get("SEMA_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(src, "docs", "durability.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## " + heading):]
    section = section[:section.index("\n## ", 1)]
    return [b for b in re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M) if contains in b]


def test_backup_steps_run_twice_and_check_leaves_nothing_behind():
    """The backup and verify steps of durability.md, as written, twice (a second backup, a
    verify directory already there), beside a running semad: the backups are 0600 as semad's
    files, and `semad --check` adds no file to the directory it checks."""
    if not os.access(SEMAD, os.X_OK):
        skip("no semad at %s (not built)" % SEMAD)
    blocks = doc_blocks("Backup and restore", "backups")
    assert len(blocks) == 3, blocks  # the backup, its verification, the removal of backups/
    backup, verify, remove = blocks
    assert remove.startswith("rm -r backups"), remove
    # the verification's last line removes the copy it checked: held back until it is seen
    verify, cleanup = verify.rstrip("\n").rsplit("\n", 1)
    assert cleanup.startswith("rm -r verify"), cleanup
    with tempfile.TemporaryDirectory(prefix="sema-dur-") as tmp:
        data = os.path.join(tmp, "sema-data")
        make_store(data)
        srv = Semad(data).wait_ready()
        try:
            env = dict(os.environ, PATH=os.path.dirname(SEMAD) + os.pathsep + os.environ["PATH"])
            for run in range(2):
                p = subprocess.run(["bash", "-e", "-c", backup + verify], cwd=tmp, env=env,
                                   capture_output=True, text=True, timeout=60 * SLOW)
                assert p.returncode == 0, "run %d:\n%s%s" % (run, p.stdout, p.stderr)
                assert "result: ok" in p.stdout, p.stdout
                assert sorted(os.listdir(os.path.join(tmp, "verify"))) == ["sema.db"], \
                    os.listdir(os.path.join(tmp, "verify"))
                subprocess.run(["bash", "-e", "-c", cleanup], cwd=tmp, check=True, timeout=30)
                assert not os.path.exists(os.path.join(tmp, "verify"))
                time.sleep(1.1)  # the next backup gets a name of its own (seconds in it)
        finally:
            srv.stop()
        backups = os.listdir(os.path.join(tmp, "backups"))
        assert len(backups) == 2, backups
        for name in backups:
            mode = os.stat(os.path.join(tmp, "backups", name)).st_mode & 0o777
            assert mode == 0o600, (name, oct(mode))
        subprocess.run(["bash", "-e", "-c", remove], cwd=tmp, check=True, timeout=30)
        assert not os.path.exists(os.path.join(tmp, "backups")), "the docs' last step removes them"
        before = sorted(os.listdir(data))
        check = subprocess.run([SEMAD, "--check", data], capture_output=True, text=True,
                               timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        assert sorted(os.listdir(data)) == before, "--check of a stopped store adds nothing"


if __name__ == "__main__":
    if len(sys.argv) != 2 or not callable(globals().get("test_" + sys.argv[1])):
        print("usage: test_durability.py <case>", file=sys.stderr)
        sys.exit(2)
    globals()["test_" + sys.argv[1]]()
    print("ok")
