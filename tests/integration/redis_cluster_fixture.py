# SPDX-License-Identifier: MIT
"""redis_cluster_fixture.py - a real Redis Cluster on loopback for the tests: primaries and
their replicas as `redis-server --cluster-enabled yes` processes, joined by
`redis-cli --cluster create`, and the faults a cluster has.

Stdlib only, on redis_fixture.py's processes (each dies with the test; every wait is bounded
and scaled by SLOW). Structured replies (CLUSTER SHARDS, MIGRATE of binary keys) go through
Resp, a small RESP2 client on a socket; one-line commands through redis-cli.

- Cluster(primaries=3, replicas=1): started, created (by hand for fewer than three
  primaries, which `redis-cli --cluster create` refuses) and waited for (cluster_state:ok on every
  node, every slot covered, every replica attached, every node agreeing on who owns what).
  The nodes run with `cluster-require-full-coverage no`, so a failing primary stops only its
  own slots, `cluster-replica-validity-factor 0`, so a replica may always take over, and
  DEBUG allowed from loopback (DEBUG SLEEP makes a node busy on purpose).
  seeds() is "host:port,..." of the primaries; primaries(), replicas(), owner(slot),
  keyslot(key) (asked of a node: Redis's own answer), slot_map(); for figures, cpu_seconds()
  and counts((command, field), ...) per primary (INFO commandstats, of one moment).
- Faults: kill_primary(node) (kill -9; returns the replica once promoted), failover(replica)
  (CLUSTER FAILOVER; returns once it is the primary), reshard(slots, to) or Migration
  (the SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE steps one by one, so traffic can
  run between them), kill_sharded_subscribers() (CLIENT KILL of every client with a sharded
  subscription), restart(node) (a crashed node back on its port and nodes.conf: it rejoins
  as a replica of whoever took its slots).
"""
import os
import random
import shutil
import socket
import subprocess
import time

import redis_fixture as rf

SLOTS = 16384
SLOW = rf.SLOW


class RespError(Exception):
    """An error reply (its text, as Redis wrote it)."""


class Resp:
    """A blocking RESP2 connection to one node: command(*args) returns bytes, int, None or a
    list, and raises RespError on an error reply."""

    def __init__(self, port, host="127.0.0.1", timeout=10):
        self.sock = socket.create_connection((host, port), timeout=timeout * SLOW)
        self.f = self.sock.makefile("rb")

    def command(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError("bad reply %r" % line)

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass


def command(port, *args):
    """One command on a connection of its own."""
    c = Resp(port)
    try:
        return c.command(*args)
    finally:
        c.close()


def _pairs(lst):
    """A RESP map sent as a flat list (CLUSTER SHARDS) as a dict with str keys."""
    return {k.decode(): v for k, v in zip(lst[0::2], lst[1::2])}


def cluster_port():
    """A free loopback port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        port = random.randrange(15000, 30000)
        socks = []
        try:
            for p in (port, port + 10000):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free pair of ports for a cluster node")


class Node(rf.RedisServer):
    """One cluster node: a RedisServer whose port leaves its bus port (+10000) free."""

    def __init__(self, *flags, aof=False, name="node"):
        rf.RedisServer.__init__(self, "--cluster-enabled", "yes", "--cluster-config-file",
                                "nodes.conf", *flags, aof=aof, name=name)

    def _start(self, fresh_port):
        if not fresh_port:
            return rf.RedisServer._start(self, False)
        for _ in range(5):
            self.port = cluster_port()
            try:
                return rf.RedisServer._start(self, False)
            except RuntimeError:
                if "Address already in use" not in self.log():
                    raise
        raise RuntimeError("no port for a cluster node:\n" + self.log()[-2000:])

    def node_id(self):
        return self.cli("CLUSTER", "MYID")

    def role(self):
        return self.cli("ROLE").splitlines()[0]

    def cluster_info(self):
        return rf.parse_info(self.cli("CLUSTER", "INFO", timeout=3))


class Cluster:
    """`primaries` primaries with `replicas` replicas each, on loopback; `flags` go to every
    node. Use it as a context manager."""

    def __init__(self, primaries=3, replicas=1, *flags, node_timeout_ms=1000, aof=False):
        self.nreplicas = replicas
        self.nodes = []
        flags = ("--cluster-node-timeout", str(node_timeout_ms),
                 "--cluster-require-full-coverage", "no",
                 "--cluster-replica-validity-factor", "0",
                 "--repl-diskless-sync-delay", "0",
                 "--enable-debug-command", "local") + flags
        try:
            for i in range(primaries * (1 + replicas)):
                self.nodes.append(Node(*flags, aof=aof, name="cluster%d" % i))
            self._create(replicas)
            self.wait_ok(full=True)
        except BaseException:
            self.close()
            raise

    def _create(self, replicas):
        if len(self.nodes) // (1 + replicas) < 3:
            return self._create_by_hand(len(self.nodes) // (1 + replicas), replicas)
        addrs = ["127.0.0.1:%d" % n.port for n in self.nodes]
        r = subprocess.run(["redis-cli", "--cluster", "create"] + addrs
                           + ["--cluster-replicas", str(replicas), "--cluster-yes"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60 * SLOW)
        out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
        if r.returncode != 0 or "All 16384 slots covered" not in out:
            raise RuntimeError("redis-cli --cluster create failed:\n" + out[-3000:])

    def _create_by_hand(self, primaries, replicas):
        """What `redis-cli --cluster create` does, for fewer than the three primaries it
        insists on: slots split evenly, every node met, each replica given its primary."""
        ps, rs = self.nodes[:primaries], self.nodes[primaries:]
        for i, p in enumerate(ps):
            lo, hi = SLOTS * i // primaries, SLOTS * (i + 1) // primaries - 1
            command(p.port, "CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for n in self.nodes[1:]:
            command(self.nodes[0].port, "CLUSTER", "MEET", "127.0.0.1", n.port)
        rf.wait_until(lambda: all(n.cluster_info().get("cluster_known_nodes")
                                  == str(len(self.nodes)) for n in self.nodes),
                      30, "every node to know the others")
        for i, r in enumerate(rs):
            pid = ps[i % primaries].node_id()
            # a node met a moment ago may still be a handshake under another id
            rf.wait_until(lambda: pid in r.cli("CLUSTER", "NODES"), 30,
                          "node %d to know its primary" % r.port)
            command(r.port, "CLUSTER", "REPLICATE", pid)

    # ---- what the cluster looks like ----

    def live(self):
        return [n for n in self.nodes if n.running()]

    def nodes_view(self, node):
        """CLUSTER NODES as node asks it: {port: (id, flags, primary id, [slot ranges])}."""
        out = {}
        for line in node.cli("CLUSTER", "NODES", timeout=3).splitlines():
            f = line.split()
            if len(f) < 8:
                continue
            port = int(f[1].split("@")[0].rsplit(":", 1)[1])
            out[port] = (f[0], f[2].split(","), f[3], f[8:])
        return out

    def primaries(self):
        """The live nodes that are primaries and own slots."""
        return [n for n in self.live() if n.role() == "master" and self._owns_slots(n)]

    def replicas(self, of=None):
        """The live replicas (of the primary `of`, if given)."""
        out = []
        for n in self.live():
            if n.role() != "slave":
                continue
            if of is None or n.info("replication").get("master_port") == str(of.port):
                out.append(n)
        return out

    def _owns_slots(self, node):
        view = self.nodes_view(node)
        me = [v for v in view.values() if "myself" in v[1]]
        return bool(me and me[0][3])

    def slot_map(self, node=None):
        """{slot: port of its primary} as node (by default the first live one) sees it;
        slots being migrated count for their current owner."""
        node = node or self.live()[0]
        out = {}
        for port, (_, flags, _, ranges) in self.nodes_view(node).items():
            if "master" not in flags or "fail" in flags:
                continue
            for r in ranges:
                if r.startswith("["):
                    continue  # "[slot->-id]": a migration under way
                lo, _, hi = r.partition("-")
                for s in range(int(lo), int(hi or lo) + 1):
                    out[s] = port
        return out

    def node_at(self, port):
        return next(n for n in self.nodes if n.port == port)

    def owner(self, slot):
        """The node that owns slot now."""
        return self.node_at(self.slot_map()[slot])

    def keyslot(self, key):
        """The slot of key, as Redis computes it (CLUSTER KEYSLOT)."""
        return int(command(self.live()[0].port, "CLUSTER", "KEYSLOT", key))

    def seeds(self, n=None):
        """"127.0.0.1:PORT,..." of the primaries (the first n)."""
        ps = self.primaries()[:n] if n else self.primaries()
        return ",".join("127.0.0.1:%d" % p.port for p in ps)

    def cpu_seconds(self):
        """{port: user + system CPU seconds} of every live primary (INFO cpu), for figures
        of how the Redis work spreads over the primaries."""
        out = {}
        for n in self.primaries():
            info = n.info("cpu")
            out[n.port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return out

    def counts(self, *stats):
        """{port: [count, ...]} on every live primary, one count per (command, field) of
        stats, INFO commandstats' (field calls, or failed_calls: calls that answered an error),
        all from one INFO reply of the primary: counts of one moment. (Read one after the
        other, a call that runs between the reads is in one and not the other: semad's own
        calls run meanwhile, its hellos, heartbeats and sweeps.)"""
        out = {}
        for n in self.primaries():
            info = n.info("commandstats")
            out[n.port] = [rf.commandstat(info, cmd, field) for cmd, field in stats]
        return out

    # ---- waiting ----

    def _ok(self, full):
        live = self.live()
        maps = []
        for n in live:
            info = n.cluster_info()
            if (info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS)
                    or info.get("cluster_known_nodes") != str(len(self.nodes))):
                return False
            maps.append(self.slot_map(n))
        if any(m != maps[0] for m in maps) or len(maps[0]) != SLOTS:
            return False
        primaries = set(maps[0].values())
        for r in self.replicas():
            repl = r.info("replication")
            if repl.get("master_link_status") != "up" or int(repl["master_port"]) not in primaries:
                return False
        if full:
            return all(len(self.replicas(of=self.node_at(p))) == self.nreplicas
                       for p in primaries)
        return True

    def wait_ok(self, timeout=30, full=False):
        """Wait until every live node says cluster_state:ok with all slots served, they agree
        on the owner of every slot, and every live replica is attached to a primary (with
        full, each primary has all its replicas)."""
        rf.wait_until(lambda: self._ok(full), timeout, "the cluster to be ok on every node")

    # ---- faults ----

    def kill_primary(self, node, timeout=30):
        """kill -9 a primary; returns its replica once the cluster has promoted it and the
        other nodes agree (the killed node stays down: restart() brings it back)."""
        reps = self.replicas(of=node)
        if not reps:
            raise AssertionError("primary %d has no replica to promote" % node.port)
        slots = [s for s, p in self.slot_map().items() if p == node.port]
        node.kill()

        def promoted():
            m = self.slot_map(reps[0])
            owner = m.get(slots[0])
            return owner if owner != node.port and owner in [r.port for r in reps] else None
        port = rf.wait_until(promoted, timeout, "a replica of %d to take its slots" % node.port)
        rf.wait_until(lambda: all(self.slot_map(n).get(slots[0]) == port for n in self.live())
                      and all(n.cluster_info().get("cluster_state") == "ok"
                              for n in self.live()),
                      timeout, "every node to see the promotion")
        return self.node_at(port)

    def restart(self, node, timeout=30):
        """Start a killed node again on its port and nodes.conf; it rejoins the cluster (a
        primary whose slots were taken comes back as a replica)."""
        node.start()
        rf.wait_until(lambda: node.cluster_info().get("cluster_state") == "ok", timeout,
                      "node %d to rejoin" % node.port)
        self.wait_ok(timeout)
        return node

    def failover(self, replica, timeout=30):
        """CLUSTER FAILOVER on a replica (the graceful hand-over: its primary stops writes,
        the replica catches up and takes the slots); returns once every node agrees."""
        old = self.node_at(int(replica.info("replication")["master_port"]))
        replica.cli("CLUSTER", "FAILOVER")
        rf.wait_until(lambda: replica.role() == "master" and self._owns_slots(replica),
                      timeout, "replica %d to become the primary" % replica.port)
        rf.wait_until(lambda: old.role() == "slave", timeout,
                      "the old primary %d to become a replica" % old.port)
        self.wait_ok(timeout)
        return replica

    def kill_sharded_subscribers(self):
        """CLIENT KILL of every client with a sharded subscription (ssub > 0), on every live
        node; returns how many were killed."""
        killed = 0
        for n in self.live():
            for c in n.clients():
                if int(c.get("ssub", "0")) > 0:
                    try:
                        n.cli("CLIENT", "KILL", "ID", c["id"])
                        killed += 1
                    except AssertionError:
                        pass  # it left on its own meanwhile
        return killed

    def reshard(self, slots, to, batch=100):
        """Move every slot in `slots` to the primary `to`, keys and all, step by step."""
        for s in slots:
            m = Migration(self, s, to)
            m.begin()
            while m.move_keys(batch):
                pass
            m.finish()

    def close(self):
        for n in self.nodes:
            n.close()
        self.nodes = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Migration:
    """One slot's move to another primary, as `redis-cli --cluster reshard` does it, one step
    at a time: begin() marks it IMPORTING on the target and MIGRATING on the source (from
    then on the source answers ASK for keys it no longer has), move_keys(n) MIGRATEs up to n
    keys (returns how many it moved), finish() gives the slot to the target on every node."""

    def __init__(self, cluster, slot, to):
        self.c = cluster
        self.slot = slot
        self.src = cluster.owner(slot)
        self.dst = to
        self.src_id = self.src.node_id()
        self.dst_id = to.node_id()

    def begin(self):
        if self.src is self.dst:
            return
        command(self.dst.port, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.src_id)
        command(self.src.port, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.dst_id)

    def move_keys(self, n=100):
        if self.src is self.dst:
            return 0
        keys = command(self.src.port, "CLUSTER", "GETKEYSINSLOT", self.slot, n)
        if keys:
            command(self.src.port, "MIGRATE", "127.0.0.1", self.dst.port, "", 0,
                    int(5000 * SLOW), "KEYS", *keys)
        return len(keys)

    def finish(self, timeout=30):
        if self.src is self.dst:
            return
        while self.move_keys(1000):
            pass
        command(self.dst.port, "CLUSTER", "SETSLOT", self.slot, "NODE", self.dst_id)
        command(self.src.port, "CLUSTER", "SETSLOT", self.slot, "NODE", self.dst_id)
        for n in self.c.primaries():
            if n is not self.src and n is not self.dst:
                command(n.port, "CLUSTER", "SETSLOT", self.slot, "NODE", self.dst_id)
        rf.wait_until(lambda: all(self.c.slot_map(n).get(self.slot) == self.dst.port
                                  for n in self.c.live()),
                      timeout, "every node to see slot %d on %d" % (self.slot, self.dst.port))


def need_cluster_tools():
    """Raise AssertionError when the programs a cluster needs are missing."""
    for exe in ("redis-server", "redis-cli"):
        if not shutil.which(exe):
            raise AssertionError("%s is missing: scripts/deps.sh test installs it" % exe)


if __name__ == "__main__":
    # A quick look by hand: start a cluster, print its map, stop it.
    t0 = time.monotonic()
    with Cluster() as c:
        print("ready in %.1fs: %s" % (time.monotonic() - t0, c.seeds()))
        print(os.linesep.join(c.nodes[0].cli("CLUSTER", "NODES").splitlines()))
