# SPDX-License-Identifier: MIT
"""redis_fixture.py - real redis-server and redis-sentinel processes on ephemeral loopback
ports, and semad instances on them, for the tests of semad's Redis back end.

Stdlib only; Redis is spoken to with `redis-cli` (redis-tools, installed with
redis-server by scripts/deps.sh test). Every process is started in a session of its own
under `setpriv --pdeathsig KILL` (util-linux), so it dies with the test even when the test
is killed, and a test's own teardown kills each process group; an atexit hook kills
whatever a failed test left behind. Every wait is bounded (scaled by SLOW in sanitizer
builds).

- RedisServer(aof=False|True): one redis-server in a temp dir; aof=True is
  `--appendonly yes --appendfsync always`. restart() on the same port and dir, kill(),
  pause(), kill_pubsub(), info(), commandstats().
- Sentinels(): a primary, one replica and three redis-sentinel processes monitoring it;
  url() is the redis+sentinel:// URL, failover() and crash_primary() move the primary.
- Fleet(url, n): n semad instances with --engine URL; requests go round robin over them
  (request(), json(), raw(), conn()), or to instance i with fleet[i].
- SuiteFleet: what semad_fixture.Semad becomes when SEMA_TEST_REDIS=N is set: every
  Semad() of the HTTP suites is a fresh Redis with N instances on it.
- ClusterSuiteFleet: the same under SEMA_TEST_CLUSTER=N, on one Redis Cluster per test
  process (emptied for every Semad()) with --engine redis+cluster://.
- need_redis_engine(): raises Skip when this semad was built without the Redis back end.
"""
import atexit
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import semad_fixture as fx

SLOW = fx.SLOW
MASTER = "sema-primary"

_procs = []  # every process started here that may still run: killed at exit
_procs_lock = threading.Lock()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wrap():
    """The prefix that makes a child die with the test process (SIGKILL when it ends)."""
    exe = shutil.which("setpriv")
    return [exe, "--pdeathsig", "KILL"] if exe else []


def _spawn(cmd, log_path):
    log = open(log_path, "ab")
    try:
        p = subprocess.Popen(wrap() + cmd, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    with _procs_lock:
        _procs.append(p)
    return p


def _kill_group(p, sig=signal.SIGKILL):
    """Signal the process group of p (a session of its own) and reap p."""
    if p is None:
        return
    try:
        os.killpg(p.pid, signal.SIGCONT)  # a stopped group dies at once too
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(10 * SLOW)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    with _procs_lock:
        if p in _procs:
            _procs.remove(p)


@atexit.register
def _kill_leftovers():
    with _procs_lock:
        left = list(_procs)
    for p in left:
        _kill_group(p)
    for inst in list(_semads):
        inst.kill()


def cli(port, *args, timeout=10, check=True):
    """One command through redis-cli (raw output, stripped); an error reply raises unless
    check=False. `timeout` bounds the whole call."""
    r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--raw"]
                       + [str(a) for a in args], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout * SLOW)
    out = r.stdout.decode("utf-8", "replace").strip()
    if check and (r.returncode != 0 or re.match(r"^(ERR|WRONGTYPE|NOSCRIPT|LOADING|"
                                                  r"NOAUTH|BUSY|READONLY|NOREPLICAS)\b",
                                                  out)):
        raise AssertionError("redis-cli -p %s %s: %s %s" % (
            port, " ".join(map(str, args)), out, r.stderr.decode(errors="replace")))
    return out


def parse_info(text):
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def commandstat(info, command, field="calls"):
    """field (calls, or failed_calls: calls that answered an error) of command in INFO
    commandstats as parse_info reads it; 0 when the command has not run."""
    m = re.search(r"(?:^|,)%s=(\d+)" % field, info.get("cmdstat_" + command, ""))
    return int(m.group(1)) if m else 0


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        try:
            v = pred()
        except (AssertionError, subprocess.TimeoutExpired, OSError):
            v = None
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout * SLOW, what))
        time.sleep(0.02)


class RedisServer:
    """One redis-server on 127.0.0.1, its data and log in a temp dir of its own.
    aof=True: every write is in the append-only file, fsynced before the reply."""

    def __init__(self, *flags, aof=False, replicaof=None, name="redis"):
        self.tmp = tempfile.mkdtemp(prefix="sema-%s-" % name)
        self.aof = aof
        self.extra = list(flags)
        if replicaof is not None:
            self.extra += ["--replicaof", "127.0.0.1", str(replicaof)]
        self.proc = None
        self.port = None
        try:
            self._start(fresh_port=True)
        except BaseException:
            self.close()
            raise

    def log_path(self):
        return os.path.join(self.tmp, "redis.log")

    def log(self):
        try:
            with open(self.log_path(), "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _cmd(self):
        persist = ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else \
            ["--appendonly", "no"]
        return ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.tmp, "--save", "", "--daemonize", "no",
                "--logfile", "", "--protected-mode", "no"] + persist + self.extra

    def _start(self, fresh_port):
        for attempt in range(5):
            if fresh_port:
                self.port = free_port()
            mark = len(self.log())
            self.proc = _spawn(self._cmd(), self.log_path())
            deadline = time.monotonic() + 15 * SLOW
            while time.monotonic() < deadline:
                text = self.log()[mark:]
                if "Ready to accept connections" in text:
                    return
                if self.proc.poll() is not None:
                    break
                time.sleep(0.01)
            _kill_group(self.proc)
            self.proc = None
            if "Address already in use" in self.log()[mark:] and fresh_port:
                continue  # another process took the port between bind() and redis-server
            break
        raise RuntimeError("redis-server did not start:\n" + self.log()[-3000:])

    def url(self, db=None, auth=None):
        u = "redis://%s127.0.0.1:%d" % (auth + "@" if auth else "", self.port)
        return u + ("/%d" % db if db is not None else "")

    def cli(self, *args, **kw):
        return cli(self.port, *args, **kw)

    def info(self, section="all"):
        return parse_info(self.cli("INFO", section))

    def commandstats(self, field="calls"):
        """{command: field} from INFO commandstats (calls, or failed_calls: calls that answered
        an error)."""
        info = self.info("commandstats")
        return {k[len("cmdstat_"):]: commandstat(info, k[len("cmdstat_"):], field)
                for k in info if k.startswith("cmdstat_")}

    def pause(self, ms, mode="ALL"):
        """CLIENT PAUSE: Redis answers no client for ms milliseconds (WRITE: no writes)."""
        self.cli("CLIENT", "PAUSE", ms, mode)

    def kill_pubsub(self):
        """Cut every subscriber connection (CLIENT KILL TYPE pubsub); the number killed."""
        return int(self.cli("CLIENT", "KILL", "TYPE", "pubsub") or 0)

    def clients(self, kind=None):
        """The client list as dicts (CLIENT LIST [TYPE kind])."""
        args = ["CLIENT", "LIST"] + (["TYPE", kind] if kind else [])
        rows = []
        for line in self.cli(*args).splitlines():
            rows.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
        return rows

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL):
        """Crash it (SIGKILL by default): nothing more is written."""
        _kill_group(self.proc, sig)
        self.proc = None

    def start(self):
        """Start it again after kill(), on the same port and dir."""
        self._start(fresh_port=False)

    def restart(self, down_s=0.0):
        """kill -9, stay down for down_s seconds, start again on the same port and dir (the
        AOF, if any, is loaded back)."""
        self.kill()
        if down_s:
            time.sleep(down_s)
        self._start(fresh_port=False)

    def close(self):
        self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# An acquire or a release sent plain comes packed in one argument, its first byte saying
# which (redis_proto.h: RS_PK_*; "T": an acquire naming a tenant), then the flag '0' or '1'.
PACKED_OPS = {"A": "acquire", "T": "acquire", "R": "lease_release"}


def fcall_op(line, packed=False):
    """The op of a MONITOR line's FCALL sema, or None for another command (with packed, for
    any but an acquire or a release in one argument)."""
    args = line.split('"')[1::2]  # FCALL sema 1 KEY OP ... (MONITOR quotes each argument)
    if len(args) < 5 or args[0].upper() != "FCALL" or args[1] != "sema":
        return None
    op = args[4]
    if op[:1] in PACKED_OPS and op[1:2] in ("0", "1"):
        return PACKED_OPS[op[0]]
    return None if packed else op


class Monitor:
    """redis-cli MONITOR in the background: every command Redis runs, with its time and
    whether a script ran it ("lua") or a client sent it."""

    def __init__(self, port):
        self.lines = []
        self.p = subprocess.Popen(wrap() + ["redis-cli", "-p", str(port), "monitor"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  stdin=subprocess.DEVNULL)
        first = self.p.stdout.readline()
        if not first.startswith(b"OK"):
            raise RuntimeError("MONITOR: %r" % first)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            self.lines.append(raw)

    def count(self, t0, t1):
        """{command: n} sent by clients between t0 and t1 (wall clock), and by scripts."""
        clients, scripts = {}, {}
        for raw in list(self.lines):
            parts = raw.decode("utf-8", "replace").split(" ", 3)
            if len(parts) < 4:
                continue
            try:
                ts = float(parts[0])
            except ValueError:
                continue
            if not t0 <= ts <= t1:
                continue
            src = parts[2].rstrip("]")
            cmd = parts[3].split('"')[1].lower() if '"' in parts[3] else "?"
            d = scripts if src == "lua" else clients
            d[cmd] = d.get(cmd, 0) + 1
        return clients, scripts

    def fcalls(self, t0=0.0, packed=False):
        """{op: n} of the FCALL sema commands clients sent from t0 (wall clock) on (with
        packed, of the acquires and releases sent in one argument)."""
        ops = {}
        for raw in list(self.lines):
            parts = raw.decode("utf-8", "replace").split(" ", 3)
            try:
                if len(parts) < 4 or float(parts[0]) < t0 or parts[2].rstrip("]") == "lua":
                    continue
            except ValueError:
                continue
            op = fcall_op(parts[3], packed)
            if op is not None:
                ops[op] = ops.get(op, 0) + 1
        return ops

    def close(self):
        self.p.kill()
        self.p.wait()


def _without_replicaof(flags):
    """flags without a "--replicaof HOST PORT"."""
    out, i = [], 0
    while i < len(flags):
        if flags[i] == "--replicaof":
            i += 3
            continue
        out.append(flags[i])
        i += 1
    return out


class Sentinels:
    """A primary, `replicas` replicas (one by default) and three redis-sentinel processes
    (quorum 2) on loopback. `flags` go to every data node (say, "--min-replicas-to-write",
    "1"). With two replicas the new primary keeps one after a failover: what lets strict
    durability's WAIT answer at once."""

    def __init__(self, *flags, aof=False, down_after_ms=1000, failover_timeout_ms=5000,
                 replicas=1):
        self.primary = self.replica = None
        self.others = []  # the replicas after the first
        self.sentinels = []  # (port, proc, dir)
        self.tmp = tempfile.mkdtemp(prefix="sema-sentinel-")
        try:
            # A full sync starts at once (not after the default 5 s of diskless delay).
            flags = ("--repl-diskless-sync-delay", "0") + flags
            self.primary = RedisServer(*flags, aof=aof, name="primary")
            self.replica = RedisServer(*flags, aof=aof, replicaof=self.primary.port,
                                       name="replica")
            for i in range(1, replicas):
                self.others.append(RedisServer(*flags, aof=aof, replicaof=self.primary.port,
                                               name="replica%d" % (i + 1)))
            for rep in self.nodes()[1:]:
                wait_until(lambda rep=rep: rep.info("replication").get("master_link_status")
                           == "up", 15, "the replicas to sync")
            # Each sentinel is told its own id and the others' (and the replica) up front,
            # so the set is complete at once instead of after rounds of hello messages.
            self._ids = ["%040x" % (0x5e4a0000 + i) for i in range(3)]
            self._sports = [free_port() for _ in range(3)]
            for i in range(3):
                self._start_sentinel(i, down_after_ms, failover_timeout_ms)
            for port, _, _ in self.sentinels:
                wait_until(lambda: self._sees_all(port), 20,
                           "sentinel %d to see the replica and the other sentinels" % port)
        except BaseException:
            self.close()
            raise

    def _start_sentinel(self, i, down_after_ms, failover_timeout_ms):
        d = os.path.join(self.tmp, "s%d" % i)
        os.mkdir(d)
        for attempt in range(5):
            port = self._sports[i] if attempt == 0 else free_port()
            self._sports[i] = port
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
                        "dir %s\nlogfile \"\"\nsentinel myid %s\n"
                        "sentinel monitor %s 127.0.0.1 %d 2\n"
                        "sentinel down-after-milliseconds %s %d\n"
                        "sentinel failover-timeout %s %d\n"
                        "sentinel parallel-syncs %s 1\n"
                        % (port, d, self._ids[i], MASTER, self.primary.port, MASTER,
                           down_after_ms, MASTER, failover_timeout_ms, MASTER))
                for rep in self.nodes()[1:]:
                    f.write("sentinel known-replica %s 127.0.0.1 %d\n" % (MASTER, rep.port))
                for j in range(3):
                    if j != i:
                        f.write("sentinel known-sentinel %s 127.0.0.1 %d %s\n"
                                % (MASTER, self._sports[j], self._ids[j]))
            logp = os.path.join(d, "sentinel.log")
            p = _spawn([sentinel_program(), conf] + (["--sentinel"] if sentinel_program()
                                                     .endswith("redis-server") else []), logp)
            try:
                wait_until(lambda: cli(port, "PING", timeout=2) == "PONG" or p.poll() is not None,
                           15, "redis-sentinel on %d" % port)
            except AssertionError:
                pass
            if p.poll() is None and cli(port, "PING", timeout=2, check=False) == "PONG":
                self.sentinels.append((port, p, d))
                return
            _kill_group(p)
        raise RuntimeError("redis-sentinel did not start:\n" + open(logp).read()[-2000:])

    def _sees_all(self, port):
        m = self.master_info(port)
        return (m.get("num-slaves") == str(len(self.nodes()) - 1)
                and m.get("num-other-sentinels") == "2" and "s_down" not in m.get("flags", ""))

    def nodes(self):
        """The data nodes: the first primary, its first replica, the other replicas."""
        return [r for r in [self.primary, self.replica] + self.others if r is not None]

    def master_info(self, port):
        out = cli(port, "SENTINEL", "MASTER", MASTER, timeout=3).splitlines()
        return dict(zip(out[0::2], out[1::2]))

    def ports(self):
        return [p for p, _, _ in self.sentinels]

    def url(self):
        return "redis+sentinel://%s/%s" % (",".join("127.0.0.1:%d" % p for p in self.ports()),
                                           MASTER)

    def master_port(self, sentinel_port=None):
        out = cli(sentinel_port or self.ports()[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                  MASTER, timeout=3).split()
        return int(out[1])

    def by_port(self, port):
        return next(r for r in self.nodes() if r.port == port)

    def current(self):
        """The RedisServer that the sentinels name as primary."""
        return self.by_port(self.master_port())

    def _wait_switch(self, old_port, timeout):
        """Every sentinel names one primary other than old_port, which says it is one."""
        def switched():
            ports = {self.master_port(p) for p in self.ports()}
            return len(ports) == 1 and old_port not in ports
        wait_until(switched, timeout, "every sentinel to name a primary other than %d" % old_port)
        self.switched_at = time.monotonic()
        new = self.by_port(self.master_port())
        wait_until(lambda: new.info("replication").get("role") == "master", timeout,
                   "%d to become a primary" % new.port)
        return new

    def failover(self, timeout=30):
        """A graceful SENTINEL FAILOVER; returns the new primary once every sentinel names it
        and it says it is one."""
        old = self.current()
        cli(self.ports()[0], "SENTINEL", "FAILOVER", MASTER)
        return self._wait_switch(old.port, timeout)

    def crash_primary(self, timeout=30, rejoin=True):
        """kill -9 the primary; returns the new one once the sentinels promoted it. With
        rejoin, the crashed node is then started again (empty: the data nodes keep nothing
        on disk) as the new primary's replica, as an operator would."""
        old = self.current()
        old.kill()
        new = self._wait_switch(old.port, timeout)
        if rejoin:
            # Back as the new primary's replica from its first moment, as an operator brings
            # back a node that kept nothing (Redis's docs: never let a primary without
            # persistence restart as a primary): started as one, it would be an empty
            # primary at the old address until the sentinels converted it, and an instance
            # that reached it meanwhile would (rightly) find the data lost.
            old.extra = _without_replicaof(old.extra) + ["--replicaof", "127.0.0.1",
                                                         str(new.port)]
            old.start()

            def joined():
                # every replica online (a replica in its first full copy is counted connected,
                # but WAIT cannot count it yet)
                rep = new.info("replication")
                n = len(self.nodes()) - 1
                return (rep.get("connected_slaves") == str(n)
                        and all("state=online" in rep.get("slave%d" % i, "") for i in range(n))
                        and old.info("replication").get("master_link_status") == "up")
            try:
                wait_until(joined, 10, "the sentinels to make the crashed node a replica")
            except AssertionError:
                # the sentinels convert a returning old primary only once they notice it,
                # which can take longer on a loaded machine: do what an operator would
                cli(old.port, "REPLICAOF", "127.0.0.1", str(new.port))
                wait_until(joined, timeout, "the crashed node to rejoin as a replica")
        return new

    def close(self):
        for _, p, _ in self.sentinels:
            _kill_group(p)
        self.sentinels = []
        for r in self.nodes():
            r.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def sentinel_program():
    return shutil.which("redis-sentinel") or "redis-server"


# ---- semad on Redis ----

_engine_built = None


def redis_engine_built():
    """Whether this semad has the Redis back end: its --help names redis:// for --engine,
    or an --engine redis://... start is not refused as an unknown engine."""
    global _engine_built
    if _engine_built is None:
        exe = fx.semad_path()
        h = subprocess.run([exe, "--help"], capture_output=True, timeout=10)
        text = (h.stdout + h.stderr).decode(errors="replace")
        if "redis://" in text:
            _engine_built = True
        else:
            # Without one it exits at once saying so; with one it starts (and keeps trying
            # to reach that Redis): its first line says which.
            tmp = tempfile.mkdtemp(prefix="sema-probe-")
            p = subprocess.Popen([exe, "--engine", "redis://127.0.0.1:1", "--listen",
                                  "127.0.0.1:0", "--data", tmp], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                first = p.stderr.readline()
                _engine_built = b"unknown engine" not in first and bool(first)
            finally:
                p.kill()
                p.wait()
                p.stderr.close()
                shutil.rmtree(tmp, ignore_errors=True)
    return _engine_built


def need_redis_engine():
    if not shutil.which("redis-server"):
        raise AssertionError("redis-server is missing: scripts/deps.sh test installs it")
    if not redis_engine_built():
        raise fx.Skip("this semad was built without the Redis back end "
                      "(--engine redis://... is an unknown engine)")


def durability_on_redis(d):
    """The --durability a test asks for, on Redis: `none` (no local store) is `relaxed`,
    answered when the script returns."""
    return "relaxed" if d == "none" else d


_semads = []  # instances that may still run: killed at exit


class Fleet:
    """n semad instances with `--engine url`, on one Redis. Requests go round robin (each
    request(), json(), raw() and conn() to the next instance); fleet[i] is instance i (a
    semad_fixture.Semad). Instances stopped on purpose (kill9, or stop) are not checked
    for a clean exit at the end."""

    def __init__(self, url, n=3, *args, durability="relaxed", env=None):
        need_redis_engine()
        self.url_engine = url
        self.args = list(args)
        self.durability = durability_on_redis(durability)
        self.env = env
        self.instances = []
        self.gone = set()  # indices killed or stopped by the test
        self.before_close = []  # called first by close() (say, stopping a load's clients)
        self._rr = itertools.count()
        try:
            for _ in range(n):
                self.add()
        except BaseException:
            self.close()
            raise
        self.host = "127.0.0.1"

    def add(self):
        """Start one more instance on the same Redis; returns its index."""
        inst = fx.SemadProcess("--engine", self.url_engine, *self.args, durability=self.durability,
                        env=self.env, wrap=wrap())
        self.instances.append(inst)
        _semads.append(inst)
        return len(self.instances) - 1

    def __getitem__(self, i):
        return self.instances[i]

    def __len__(self):
        return len(self.instances)

    def live(self):
        return [s for i, s in enumerate(self.instances) if i not in self.gone]

    def next(self):
        live = self.live()
        return live[next(self._rr) % len(live)]

    # the semad_fixture.Semad interface, round robin
    @property
    def port(self):
        return self.live()[0].port

    @property
    def semad_port(self):
        return self.live()[0].semad_port

    @property
    def proc(self):
        return self.live()[0].proc

    def request(self, *a, **kw):
        return self.next().request(*a, **kw)

    def json(self, *a, **kw):
        return self.next().json(*a, **kw)

    def raw(self, *a, **kw):
        return self.next().raw(*a, **kw)

    def conn(self, *a, **kw):
        return self.next().conn(*a, **kw)

    def url(self, path):
        return self.next().url(path)

    def log(self):
        out = []
        for i, s in enumerate(self.instances):
            out += ["[%d] %s" % (i, line) for line in s.log()]
        return out

    def metrics_text(self):
        """Every live instance's /metrics, one after the other (counters are per instance)."""
        return "".join(s.request("GET", "/metrics")[2].decode() for s in self.live())

    def kill9(self, i):
        """kill -9 instance i: it answers nothing more and renews nothing."""
        self.gone.add(i)
        self.instances[i].kill()

    def stop_signal(self, i, sig):
        os.kill(self.instances[i].proc.pid, sig)

    def close(self, check=True):
        errors = []
        for fn in self.before_close:
            fn()
        self.before_close = []
        for i, s in enumerate(self.instances):
            try:
                os.kill(s.proc.pid, signal.SIGCONT)  # one the test stopped can exit
            except ProcessLookupError:
                pass
            try:
                rc = s.stop() if s.proc.poll() is None else s.wait_exit()
                if check and i not in self.gone and rc != 0:
                    errors.append("instance %d exited with %s:\n%s"
                                  % (i, rc, "\n".join(s.log()[-30:])))
            except AssertionError as e:
                errors.append("instance %d: %s" % (i, e))
            finally:
                s.kill()
                shutil.rmtree(s.tmp, ignore_errors=True)
                if s in _semads:
                    _semads.remove(s)
        self.instances = []
        if errors:
            raise AssertionError("\n".join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(check=exc[0] is None)
        return False


# The HTTP suites on Redis check semad's semantics, not what it does when Redis answers
# late: their instances give Redis the longest command timeout (docs/redis.md, `?timeout`),
# so that a busy machine starving redis-server for over the default 2 s is not answered 503
# midway through a case (test_redis_faults.py checks that answer).
SUITE_QUERY = "?timeout=10000"


class SuiteFleet(Fleet):
    """semad_fixture.Semad under SEMA_TEST_REDIS=N: a fresh redis-server and N semad
    instances on it for every Semad() the HTTP suites make (SUITE_QUERY); same
    constructor."""

    instances_per_redis = 1

    def __init__(self, *args, durability="none", env=None, data=None):
        need_redis_engine()
        if data is not None:
            raise fx.Skip("a data directory is the embedded engine's; on Redis the state "
                          "is in Redis")
        self.redis = RedisServer()
        try:
            Fleet.__init__(self, self.redis.url() + SUITE_QUERY, self.instances_per_redis,
                           *args, durability=durability, env=env)
        except BaseException:
            self.redis.close()
            raise

    def close(self, check=True):
        try:
            Fleet.close(self, check)
        finally:
            self.redis.close()


def suite_fleet(n):
    """The class semad_fixture.Semad becomes under SEMA_TEST_REDIS=n."""
    return type("SuiteFleet%d" % n, (SuiteFleet,), {"instances_per_redis": n})


_cluster = None  # the one Redis Cluster of a test process (SEMA_TEST_CLUSTER)
_cluster_ports = []  # its primaries (the suites move no slot)


def _close_cluster():
    global _cluster
    if _cluster is not None:
        _cluster.close()
        _cluster = None


class ClusterSuiteFleet(Fleet):
    """semad_fixture.Semad under SEMA_TEST_CLUSTER=N: N semad instances on a Redis Cluster of
    three primaries and their replicas (redis_cluster_fixture.py), with
    --engine redis+cluster://...SUITE_QUERY; same constructor. The cluster is made once per test process
    and emptied (FLUSHALL on every primary) for every Semad()."""

    instances_per_redis = 1

    def __init__(self, *args, durability="none", env=None, data=None):
        global _cluster
        need_redis_engine()
        import redis_cluster_fixture as cf
        cf.need_cluster_tools()
        if data is not None:
            raise fx.Skip("a data directory is the embedded engine's; on Redis the state "
                          "is in Redis")
        if _cluster is None:
            _cluster = cf.Cluster()
            atexit.register(_close_cluster)
            _cluster_ports[:] = [n.port for n in _cluster.primaries()]
        for port in _cluster_ports:
            cf.command(port, "FLUSHALL")
        Fleet.__init__(self, "redis+cluster://" + _cluster.seeds() + SUITE_QUERY,
                       self.instances_per_redis, *args, durability=durability, env=env)


def cluster_suite_fleet(n):
    """The class semad_fixture.Semad becomes under SEMA_TEST_CLUSTER=n."""
    return type("ClusterSuiteFleet%d" % n, (ClusterSuiteFleet,), {"instances_per_redis": n})
