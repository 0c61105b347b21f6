#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""with_redis_cluster.py - run a command beside a Redis Cluster of its own.

    python3 with_redis_cluster.py [--primaries N] PROGRAM [ARGS...]

Starts a cluster of N primaries (3 by default), each with one replica, on free loopback ports
(tests/integration/redis_cluster_fixture.py), runs PROGRAM with SEMA_TEST_REDIS_CLUSTER set
to its seed nodes ("127.0.0.1:PORT,..."), stops the cluster and exits with PROGRAM's status.
Exits 77 (skipped) when redis-server or redis-cli is not installed.

PROGRAM can ask for the cluster's faults while it runs, through a socket whose descriptor is
in SEMA_TEST_CLUSTER_CTL: it writes one line, the wrapper does it and answers one line,
"ok [RESULT]" or "err WHY". Lines:
    owner SLOT                  -> ok PORT (the primary that owns SLOT)
    kill_primary SLOT           -> ok PORT (kill -9 of SLOT's primary; the promoted replica)
    failover SLOT               -> ok PORT (CLUSTER FAILOVER by a replica of SLOT's primary)
    restart PORT                -> ok (a killed node back; it rejoins as a replica)
    begin SLOT                  -> ok PORT (SLOT starts moving to the next primary: IMPORTING
                                   and MIGRATING set; the target's port)
    move SLOT N                 -> ok MOVED (MIGRATE up to N keys of the moving slot)
    finish SLOT                 -> ok (the slot belongs to the target on every node)
    reshard SLOT                -> ok PORT (begin, move everything, finish)
    kill_sharded_subscribers    -> ok KILLED
Since the program keeps running while a fault is done, its traffic goes on meanwhile.
"""
import os
import shutil
import socket
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))


def next_primary(c, node):
    ps = sorted(c.primaries(), key=lambda n: n.port)
    return ps[(ps.index(node) + 1) % len(ps)]


class Control:
    """The fault requests of one program, served on a thread."""

    def __init__(self, cluster, sock):
        self.c = cluster
        self.sock = sock
        self.moving = {}  # slot -> Migration

    def do(self, words):
        import redis_cluster_fixture as cf
        c, verb, args = self.c, words[0], words[1:]
        if verb == "owner":
            return str(c.owner(int(args[0])).port)
        if verb == "kill_primary":
            return str(c.kill_primary(c.owner(int(args[0]))).port)
        if verb == "failover":
            return str(c.failover(c.replicas(of=c.owner(int(args[0])))[0]).port)
        if verb == "restart":
            c.restart(c.node_at(int(args[0])))
            return ""
        if verb in ("begin", "reshard"):
            slot = int(args[0])
            src = c.owner(slot)
            m = cf.Migration(c, slot, next_primary(c, src))
            m.begin()
            if verb == "reshard":
                m.finish()
            else:
                self.moving[slot] = m
            return str(m.dst.port)
        if verb == "move":
            return str(self.moving[int(args[0])].move_keys(int(args[1])))
        if verb == "finish":
            self.moving.pop(int(args[0])).finish()
            return ""
        if verb == "kill_sharded_subscribers":
            return str(c.kill_sharded_subscribers())
        raise ValueError("unknown request %r" % verb)

    def serve(self):
        f = self.sock.makefile("rwb", buffering=0)
        for line in f:
            words = line.decode().split()
            if not words:
                continue
            try:
                out = "ok " + self.do(words)
            except Exception as e:  # the program gets the reason and decides
                out = "err %s: %s" % (type(e).__name__, str(e).replace("\n", " ")[:500])
            try:
                f.write(out.rstrip().encode() + b"\n")
            except OSError:
                return


def main():
    args = sys.argv[1:]
    primaries = 3
    if args[:1] == ["--primaries"]:
        primaries, args = int(args[1]), args[2:]
    if not args:
        raise SystemExit(__doc__)
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        print("with_redis_cluster.py: redis-server or redis-cli is not installed "
              "(scripts/deps.sh test)")
        return 77
    import redis_cluster_fixture as cf
    with cf.Cluster(primaries, 1) as c:
        mine, theirs = socket.socketpair()
        threading.Thread(target=Control(c, mine).serve, daemon=True).start()
        env = dict(os.environ, SEMA_TEST_REDIS_CLUSTER=c.seeds(),
                   SEMA_TEST_CLUSTER_CTL=str(theirs.fileno()))
        try:
            return subprocess.call(args, env=env, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
            mine.close()


if __name__ == "__main__":
    sys.exit(main())
