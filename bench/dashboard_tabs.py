#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""dashboard_tabs.py - the requests of N open dashboard tabs, as the page (src/http/ui) makes
them, for bench/dashboard_cost.sh to measure what they cost semad.

    dashboard_tabs.py HOST:PORT semaphore NAME TABS SECONDS
    dashboard_tabs.py HOST:PORT overview - TABS SECONDS

A semaphore tab follows NAME's event stream (GET /v1/semaphores/NAME/events, read and
dropped), reads the semaphore's state every 500 ms (the most the page does: at most two reads
a second, and only while events come) and /metrics every 15 s. An overview tab reads a page of
50 (GET /v1/semaphores?limit=50) and /healthz every 2 s (the page's default interval). Prints
one line: the requests made and the event-stream bytes read."""
import http.client
import socket
import sys
import threading
import time

LOCK = threading.Lock()


def stream(host, port, path, stop, counts):
    s = socket.create_connection((host, port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n\r\n"
               % (path, host, port)).encode())
    s.settimeout(0.5)
    while not stop.is_set():
        try:
            b = s.recv(1 << 16)
        except socket.timeout:
            continue
        if not b:
            break
        with LOCK:
            counts["stream_bytes"] += len(b)
    s.close()


def every(host, port, plan, stop, counts):
    """plan: [(path, seconds)]: read each path that often, on one keep-alive connection."""
    c = http.client.HTTPConnection(host, port, timeout=30)
    due = {p: 0.0 for p, _ in plan}
    while not stop.is_set():
        now = time.monotonic()
        for path, secs in plan:
            if now >= due[path]:
                c.request("GET", path)
                c.getresponse().read()
                with LOCK:
                    counts["requests"] += 1
                due[path] = now + secs
        stop.wait(max(0.0, min(due.values()) - time.monotonic()))
    c.close()


def main():
    addr, kind, name, tabs, secs = sys.argv[1:6]
    host, port = addr.rsplit(":", 1)
    port, tabs, secs = int(port), int(tabs), float(secs)
    stop = threading.Event()
    counts = {"requests": 0, "stream_bytes": 0}
    threads = []
    for _ in range(tabs):
        if kind == "semaphore":
            threads.append(threading.Thread(target=stream, args=(
                host, port, "/v1/semaphores/%s/events" % name, stop, counts)))
            plan = [("/v1/semaphores/" + name, 0.5), ("/metrics", 15)]
        else:
            plan = [("/v1/semaphores?limit=50", 2), ("/healthz", 2)]
        threads.append(threading.Thread(target=every, args=(host, port, plan, stop, counts)))
    for t in threads:
        t.start()
    time.sleep(secs)
    stop.set()
    for t in threads:
        t.join()
    print("tabs=%d kind=%s requests=%d stream_bytes=%d" % (tabs, kind, counts["requests"],
                                                           counts["stream_bytes"]))


if __name__ == "__main__":
    main()
