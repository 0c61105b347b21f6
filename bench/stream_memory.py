#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""stream_memory.py - what event streams cost semad: N idle subscribers of one semaphore
(resident memory per stream), then the same streams not reading while M events go out (the
growth, which the stream caps bound), then the memory after they close.

Usage: bench/stream_memory.py BUILD [N] [PAIRS]   (defaults: 10000 streams, 15000 pairs)
Prints: figure idle_event_streams ..., figure silent_event_streams ..."""
import os
import resource
import socket
import subprocess
import sys
import threading
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 15000
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


srv = subprocess.Popen([os.path.join(build, "bin", "semad"), "--listen", "127.0.0.1:0",
                        "--durability", "none", "--max-connections-per-ip", "0"], stderr=subprocess.PIPE, text=True)
line = srv.stderr.readline()
while "listening on" not in line:
    line = srv.stderr.readline()
addr = line.rsplit("http://", 1)[1].strip()
host, port = addr.rsplit(":", 1)
sema = os.path.join(build, "bin", "sema")


def bench(count):
    subprocess.run([sema, "bench", "-s", "http://" + addr, "-m", "pairs", "-n", str(count),
                    "-c", "8", "--name", "s", "-k", "1"], check=True, capture_output=True)


try:
    bench(500)  # creates s; warms the allocator
    time.sleep(0.2)
    idle = rss_kib(srv.pid)
    socks = []
    for _ in range(n):
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect((host, int(port)))
        c.sendall(b"GET /v1/semaphores/s/events HTTP/1.1\r\nHost: b\r\n\r\n")
        socks.append(c)
    time.sleep(1.0)
    subscribed = rss_kib(srv.pid)
    print("figure idle_event_streams count=%d rss_before_kib=%d rss_after_kib=%d "
          "bytes_per_stream=%.0f" % (n, idle, subscribed, (subscribed - idle) * 1024 / n))
    t0 = time.monotonic()
    peak, done = [subscribed], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(srv.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    bench(pairs)
    done.set()
    sampler.join()
    peak = peak[0]
    print("figure silent_event_streams count=%d events=%d rss_peak_above_subscribed_mib=%.1f "
          "rss_peak_above_idle_mib=%.1f seconds=%.1f"
          % (n, 2 * pairs, (peak - subscribed) / 1024, (peak - idle) / 1024,
             time.monotonic() - t0))
    for c in socks:
        c.close()
    time.sleep(1.0)
    print("figure event_streams_closed rss_above_idle_mib=%.1f" % ((rss_kib(srv.pid) - idle) / 1024))
finally:
    srv.terminate()
    srv.wait(10)
