# SPDX-License-Identifier: MIT
"""safety_checker.py - random load through several semad instances and a checker over what
the clients saw, for semad on a shared back end (Redis).

Client threads acquire (try, short and long timeouts, weights 1..capacity), hold, renew,
release, wait for idle, "crash" (a short-ttl lease never released) and disconnect while
parked; every request goes to an instance picked at random, so an acquire made on one
instance is renewed and released on others. A monitor reads each semaphore's queue and
holders from random instances.

Why each check is sound (it cannot fail on a correct server, whatever the scheduling):
- Capacity. A lease is surely held from the moment its client RECEIVED the grant until the
  moment it SENT the release (whatever the release answered, or if it never answered), or,
  for a lease never released, until its request was SENT plus its ttl minus a margin:
  expiry runs on Redis's clock, and the grant came after the request left. Renewals
  answered 200 extend that the same way. If the weights of the surely-held intervals of
  one semaphore overlapping at some instant exceed its capacity, the server admitted too
  much. Outcomes the client could not see (a dropped connection) are left out, which can
  only under-count.
- Fences. Per semaphore every fence is new (no two grants share one), and if a grant was
  received before another request was sent, its fence is smaller: fences strictly increase
  in the order grants happen. Fence order and Redis's clock agree: a larger fence never has
  an earlier acquired_at. expires_at - acquired_at is the ttl asked for.
- FIFO. Whenever the monitor saw A queued ahead of B (each request has a unique owner),
  and both were granted, fence(A) < fence(B): only the queue head is granted, so a later
  waiter cannot pass an earlier one, and fences record the grant order.
- Timeouts. A request with timeout T is answered (granted, or 409 timeout/unavailable)
  within T plus a bound, not counting the stalls it overlapped; a try (T = 0) likewise. A
  stall is a gap longer than STALL_S between two answers the monitor got: a loaded
  machine's (or a paused process's) stall delays every answer alike, and is not a timeout
  decided late. A server that answers the monitor while it decides a timeout late fails.
- Wait-idle. A wait-idle that answered 200 between sending at t0 and receiving at t1 saw an
  idle moment: no surely-held interval covers all of [t0, t1].
- Monitor. In every view, held equals the sum of the holders' weights and is at most the
  capacity, and the queue positions are 0, 1, 2...
- Rest. At the end, every instance reports every semaphore with nothing held and nobody
  waiting, once the short ttls have run out.
With `multi` some requests take several semaphores at once (POST /v1/acquire): each part is
a grant of its semaphore for the checks above (one lease, a fence per semaphore), and FIFO
is checked per semaphore. With `tenants` requests name a tenant, and a semaphore given a
`tenant_max` is also checked per tenant: the surely-held intervals of one tenant never add up
above its cap.
"""
import http.client
import json
import random
import socket
import threading
import time

import semad_fixture as fx

OK_BUSY = {(409, "timeout"), (409, "unavailable")}
STALL_S = 0.2  # a gap this long between the monitor's answers is a stall (Timeouts, above)


class Load:
    """Random clients over `pick()` (a function returning an instance to send the next
    request to: a semad_fixture.Semad or one instance of a redis_fixture.Fleet).
    `unavailable_ok`: 503 answers (Redis down, state lost) are expected and counted, not
    errors. `gone_ok`: a renew or release answered 404 or 410 (a lease that ran out while its
    primary failed over, or was lost with it) is counted, its owner kept in `gone`, not an
    error. `answer_slack_s`: how late past its timeout a request may be answered."""

    def __init__(self, pick, sems, threads=16, seed=1, ttl_ms=20000, crash_ttl_ms=500,
                 unavailable_ok=False, answer_slack_s=3.0, disconnects=True,
                 instances=None, multi=0.0, tenants=(), tenant_max=None, gone_ok=False):
        self.pick, self.sems = pick, dict(sems)
        self.threads, self.seed = threads, seed
        self.ttl_ms, self.crash_ttl_ms = ttl_ms, crash_ttl_ms
        self.unavailable_ok, self.answer_slack = unavailable_ok, answer_slack_s * fx.SLOW
        self.gone_ok = gone_ok
        self.disconnects = disconnects
        self.instances = instances  # function: every live instance (for the monitor)
        self.multi = multi              # the share of requests on several semaphores
        self.tenants = tuple(tenants)   # tenants the requests name (and none)
        self.tenant_max = dict(tenant_max or {})  # sem -> cap
        self.stop_evt = threading.Event()
        self.watch_evt = threading.Event()  # the monitor stops (after the clients)
        self.lock = threading.Lock()
        self.grants = []     # dict per lease seen by a client
        self.sends = []      # (sem, t_send, owner): every acquire request that left
        self.idle_ok = []    # (sem, t0, t1) of wait-idles answered 200
        self.maybe_late = []  # (what, budget s, t_send, t_recv): answered past T + slack
        self.stalls = []     # (t0, t1): no answer to the monitor in between (STALL_S)
        self.t_start = time.monotonic()
        self.errors = []     # unexpected answers
        self.unavailable = 0
        self.unknown = 0     # outcomes lost with a connection
        self.counts = {}
        self.ahead = set()   # (sem, owner A, owner B): A seen queued ahead of B on sem
        self.views = 0
        self.acquire_503 = set()  # owners whose acquire was answered 503 (outcome unknown)
        self.release_503 = set()  # owners whose release was answered 503
        self.gone = set()         # owners whose renew or release found no lease (gone_ok)
        self.said = {}            # owner -> what its acquire (and release) were answered
        self._threads = []
        self._watcher = None

    # ---- running ----
    def start(self):
        self.t_start = time.monotonic()
        start = threading.Event()
        for i in range(self.threads):
            t = threading.Thread(target=self._client, args=(i, start), daemon=True)
            t.start()
            self._threads.append(t)
        if self.instances is not None:
            t = self._watcher = threading.Thread(target=self._monitor, daemon=True)
            t.start()
            self._threads.append(t)  # (the last: it watches until the clients are done)
        start.set()
        return self

    def run_for(self, seconds):
        self.start()
        time.sleep(seconds)  # the load runs meanwhile; joined (bounded) below
        self.stop()

    def stop(self, timeout=60):
        self.stop_evt.set()
        deadline = time.monotonic() + timeout * fx.SLOW
        for t in self._threads:
            if t is self._watcher:
                self.watch_evt.set()  # it saw every answer the clients waited for
            t.join(max(0.1, deadline - time.monotonic()))
            if t.is_alive():
                raise AssertionError("a client thread never finished (a request unanswered)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Stops the clients (a test that failed midway must not leave them running into
        the teardown)."""
        self.stop_evt.set()
        self.watch_evt.set()
        for t in self._threads:
            t.join(30 * fx.SLOW)
        return False

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def _client(self, idx, start):
        rng = random.Random(self.seed * 1000 + idx)
        conns = {}
        start.wait()
        n = 0
        try:
            while not self.stop_evt.is_set():
                n += 1
                self._one(rng, conns, "c%d-%d-%d" % (self.seed, idx, n))
        except Exception as e:  # reported by check()
            with self.lock:
                self.errors.append("client %d: %r" % (idx, e))
        for c in conns.values():
            c.close()

    def _http(self, conns, method, path, body, timeout):
        """One request to a random instance: (status, json body or None), or None if the
        connection failed (the outcome is unknown)."""
        inst = self.pick()
        key = (inst.host, inst.port)
        c = conns.get(key)
        if c is None:
            c = conns[key] = http.client.HTTPConnection(inst.host, inst.port, timeout=timeout)
        c.timeout = timeout
        if c.sock is not None:
            c.sock.settimeout(timeout)
        try:
            st, _, data = fx.do_request(c, method, path, body)
        except (OSError, http.client.HTTPException):
            c.close()
            del conns[key]
            with self.lock:
                self.unknown += 1
            return None
        try:
            return st, (json.loads(data) if data else None)
        except ValueError:
            return st, {"raw": data[:200].decode(errors="replace")}

    def _answered(self, what, budget, t_send, t_recv):
        """A request with `budget` s to answer was answered at t_recv: past the budget and the
        slack, it is judged by check() (once every stall is known)."""
        if t_recv - t_send > budget + self.answer_slack:
            with self.lock:
                self.maybe_late.append((what, budget, t_send, t_recv))

    def _bad(self, what, res, owner=None):
        st, body = res
        if st == 503 and self.unavailable_ok:
            with self.lock:
                self.unavailable += 1
            return
        if st in (404, 410) and self.gone_ok and owner is not None:
            with self.lock:
                self.gone.add(owner)
            return self.count("gone")
        with self.lock:
            self.errors.append("%s answered %s %s" % (what, st, body))

    def _weight(self, rng, sem):
        cap = self.sems[sem]
        return rng.randint(1, min(cap, self.tenant_max.get(sem, cap)))

    def _one(self, rng, conns, owner):
        sem = rng.choice(sorted(self.sems))
        cap = self.sems[sem]
        r = rng.random()
        if r < 0.05 and self.disconnects:
            return self._disconnect(rng, sem, cap)
        if r < 0.08:
            return self._wait_idle(rng, conns, sem)
        if self.multi and rng.random() < self.multi:
            return self._one_multi(rng, conns, owner)
        weight = self._weight(rng, sem)
        crash = rng.random() < 0.05
        ttl = self.crash_ttl_ms if crash else self.ttl_ms
        body = {"weight": weight, "ttl_ms": ttl, "owner": owner}
        tenant = rng.choice(self.tenants + (None,)) if self.tenants else None
        if tenant is not None:
            body["tenant"] = tenant
        tmo = rng.choice([0, 0, 20, 100, 300, 1500])
        body["timeout_ms"] = tmo
        t_send = time.monotonic()
        with self.lock:
            self.sends.append((sem, t_send, owner))
        res = self._http(conns, "POST", "/v1/semaphores/%s/acquire" % sem, body,
                         tmo / 1000 + 30 * fx.SLOW)
        t_recv = time.monotonic()
        self.said[owner] = "acquire (timeout %d ms): %s" % (
            tmo, "no answer (connection lost)" if res is None else
            "%s %s" % (res[0], (res[1] or {}).get("code", "")))
        if res is None:
            return
        self._answered("%s: timeout %d ms" % (owner, tmo), tmo / 1000, t_send, t_recv)
        st, lease = res
        if st != 200:
            if (st, (lease or {}).get("code")) in OK_BUSY:
                self.count("busy")
            else:
                if st == 503:
                    with self.lock:
                        self.acquire_503.add(owner)
                self._bad("acquire " + owner, res)
            return
        self.count("granted")
        g = dict(sem=sem, owner=owner, weight=weight, ttl=ttl, send=t_send, recv=t_recv,
                 lease=lease["lease"], fence=lease["fence"], acquired_at=lease["acquired_at"],
                 expires_at=lease["expires_at"], end=None, expiry=t_send + ttl / 1000,
                 tenant=tenant)
        with self.lock:
            self.grants.append(g)
        if lease.get("weight") != weight or lease.get("owner") != owner or \
                lease["expires_at"] - lease["acquired_at"] != ttl or \
                lease.get("tenant") != tenant:
            with self.lock:
                self.errors.append("lease does not match its request: %s %s" % (body, lease))
        if crash:
            self.count("crashed")
            return  # never released: it comes back at its ttl
        self._hold_renew_release(rng, conns, owner, lease, [g])

    def _one_multi(self, rng, conns, owner):
        """An acquire on 2 or 3 semaphores at once: each part a grant of its semaphore."""
        names = rng.sample(sorted(self.sems), min(len(self.sems), rng.randint(2, 3)))
        parts = [{"name": n, "weight": self._weight(rng, n)} for n in names]
        crash = rng.random() < 0.05
        ttl = self.crash_ttl_ms if crash else self.ttl_ms
        tmo = rng.choice([0, 20, 100, 300, 1500, 3000])
        body = {"semaphores": parts, "ttl_ms": ttl, "owner": owner, "timeout_ms": tmo}
        tenant = rng.choice(self.tenants + (None,)) if self.tenants else None
        if tenant is not None:
            body["tenant"] = tenant
        t_send = time.monotonic()
        with self.lock:
            for n in names:
                self.sends.append((n, t_send, owner))
        res = self._http(conns, "POST", "/v1/acquire", body, tmo / 1000 + 30 * fx.SLOW)
        t_recv = time.monotonic()
        self.said[owner] = "acquire of %s (timeout %d ms): %s" % (names, tmo, (
            "no answer" if res is None else "%s %s" % (res[0], (res[1] or {}).get("code", ""))))
        if res is None:
            return
        self._answered("%s: timeout %d ms" % (owner, tmo), tmo / 1000, t_send, t_recv)
        st, lease = res
        if st != 200:
            if (st, (lease or {}).get("code")) in OK_BUSY:
                self.count("busy")
            else:
                self._bad("acquire " + owner, res)
            return
        self.count("granted_multi")
        got = {p["name"]: p for p in lease.get("semaphores", [])}
        gs = []
        for p in parts:
            part = got.get(p["name"], {})
            if part.get("weight") != p["weight"] or lease["fences"].get(p["name"]) != \
                    part.get("fence"):
                with self.lock:
                    self.errors.append("lease does not match its request: %s %s" % (body, lease))
            gs.append(dict(sem=p["name"], owner=owner, weight=p["weight"], ttl=ttl, send=t_send,
                           recv=t_recv, lease=lease["lease"], fence=part.get("fence", 0),
                           acquired_at=lease["acquired_at"], expires_at=lease["expires_at"],
                           end=None, expiry=t_send + ttl / 1000, tenant=tenant))
        with self.lock:
            self.grants.extend(gs)
        if set(got) != set(names) or lease.get("tenant") != tenant:
            with self.lock:
                self.errors.append("lease does not match its request: %s %s" % (body, lease))
        if crash:
            self.count("crashed")
            return
        self._hold_renew_release(rng, conns, owner, lease, gs)

    def _hold_renew_release(self, rng, conns, owner, lease, gs):
        """Hold a while, maybe renew, then release: the grants `gs` end together."""
        time.sleep(rng.random() * 0.03)
        if rng.random() < 0.2:
            t_ren = time.monotonic()
            res = self._http(conns, "POST", "/v1/leases/%s/renew" % lease["lease"],
                             {"ttl_ms": self.ttl_ms}, 30 * fx.SLOW)
            if res is not None and res[0] == 200:
                for g in gs:
                    g["expiry"] = max(g["expiry"], t_ren + self.ttl_ms / 1000)
                self.count("renewed")
            elif res is not None:
                self._bad("renew " + owner, res, owner)
            time.sleep(rng.random() * 0.01)
        end = time.monotonic()  # the release leaves now
        for g in gs:
            g["end"] = end
        res = self._http(conns, "DELETE", "/v1/leases/" + lease["lease"], None, 30 * fx.SLOW)
        self.said[owner] += "; release: %s" % (
            "no answer" if res is None else
            "%d %s" % (res[0], (res[1] or {}).get("detail", "")) if res[0] == 503 else res[0])
        if res is not None:
            if res[0] == 204:
                self.count("released")
            else:
                if res[0] == 503:
                    with self.lock:
                        self.release_503.add(owner)
                self._bad("release " + owner, res, owner)

    def _wait_idle(self, rng, conns, sem):
        t0 = time.monotonic()
        res = self._http(conns, "POST", "/v1/semaphores/%s/wait-idle" % sem,
                         {"timeout_ms": 200}, 30 * fx.SLOW)
        t1 = time.monotonic()
        if res is None:
            return
        self._answered("wait-idle 200 ms", 0.2, t0, t1)
        if res[0] == 200:
            self.count("idle")
            with self.lock:
                self.idle_ok.append((sem, t0, t1))
        elif (res[0], (res[1] or {}).get("code")) in OK_BUSY:
            self.count("idle_timeout")
        else:
            self._bad("wait-idle", res)

    def _disconnect(self, rng, sem, cap):
        """Park (or try to) and go away without reading the answer."""
        inst = self.pick()
        try:
            sock = socket.create_connection((inst.host, inst.port), timeout=5)
            sock.sendall(fx.raw_request("POST", "/v1/semaphores/%s/acquire" % sem,
                                        {"weight": rng.randint(1, cap), "ttl_ms": 2000}))
            time.sleep(rng.random() * 0.05)
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            self.count("disconnected")
        except OSError:
            pass

    def _monitor(self):
        """Views of every semaphore in turn until the load stops; an exception is reported by
        check() (a monitor gone silently would check no view, and see no stall)."""
        conns = {}
        try:
            self._watch(conns)
        except Exception as e:  # reported by check()
            with self.lock:
                self.errors.append("monitor: %r" % e)
        for c in conns.values():
            c.close()

    def _watch(self, conns):
        last = time.monotonic()  # the monitor's last answer (or its start)
        while not self.watch_evt.is_set():
            for sem, cap in sorted(self.sems.items()):
                res = self._http(conns, "GET", "/v1/semaphores/" + sem, None, 30 * fx.SLOW)
                now = time.monotonic()
                if now - last > STALL_S:
                    with self.lock:
                        self.stalls.append((last, now))
                last = now
                if res is None:
                    continue
                st, v = res
                if st != 200:
                    if not (st == 503 and self.unavailable_ok):
                        with self.lock:
                            self.errors.append("monitor: GET %s answered %s %s" % (sem, st, v))
                    continue
                self.check_view(sem, cap, v)
            time.sleep(0.005)

    def check_view(self, sem, cap, v):
        held = sum(h["weight"] for h in v["holders"])
        bad = []
        if v["capacity"] != cap:
            bad.append("capacity %s" % v["capacity"])
        if held != v["held"] or v["held"] > cap:
            bad.append("held %s, holders weigh %d, capacity %d" % (v["held"], held, cap))
        if [w["position"] for w in v["waiters"]] != list(range(len(v["waiters"]))):
            bad.append("queue positions %s" % [w["position"] for w in v["waiters"]])
        # With tenants a line is FIFO within each tenant only: pairs of one tenant.
        queue = [(w["owner"], w.get("tenant")) for w in v["waiters"] if w.get("owner")]
        with self.lock:
            self.views += 1
            if bad:
                self.errors.append("view of %s: %s: %s" % (sem, "; ".join(bad), v))
            for i, (a, ta) in enumerate(queue):
                for b, tb in queue[i + 1:]:
                    if not self.tenants or ta == tb:
                        self.ahead.add((sem, a, b))

    # ---- checking ----
    def check(self, min_grants=30, expect_contention=True):
        """Every check of the module docstring but rest (see wait_rest). Returns a summary."""
        assert not self.errors, "unexpected answers:\n  " + "\n  ".join(self.errors[:20])
        late = self.late()
        assert not late, "answered after their timeout:\n  " + "\n  ".join(late[:20])
        grants = self.grants
        assert len(grants) >= min_grants, "too few grants to say anything: %d" % len(grants)
        ids = [(g["lease"], g["sem"]) for g in grants]  # a lease on several: a part on each
        assert len(set(ids)) == len(ids), "one lease id granted twice"
        peaks = {}
        for sem, cap in self.sems.items():
            mine = [g for g in grants if g["sem"] == sem]
            peaks[sem] = self._check_capacity(sem, cap, mine)
            self._check_fences(sem, mine)
        pairs = self._check_fifo()
        self._check_idle()
        for sem, cap in self.tenant_max.items():
            self._check_tenant_max(sem, cap)
        if expect_contention:
            assert any(peaks[s] == c for s, c in self.sems.items()), \
                ("no semaphore was ever surely full: no contention to check", peaks)
        return dict(grants=len(grants), peaks=peaks, fifo_pairs=pairs, views=self.views,
                    unknown=self.unknown, unavailable=self.unavailable,
                    stalls=len(self.stalls), longest_stall_s=round(max(
                        [b - a for a, b in self.stalls] or [0]), 2), **self.counts)

    def late(self):
        """The requests answered past their timeout plus the slack, the stalls they overlapped
        left out: what each was, and how long it took."""
        out = []
        for what, budget, t0, t1 in self.maybe_late:
            stalled = sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in self.stalls)
            if t1 - t0 - stalled > budget + self.answer_slack:
                out.append("%s sent at %.3f s answered after %.0f ms (%.0f ms of it stalled)"
                           % (what, t0 - self.t_start, (t1 - t0) * 1000, stalled * 1000))
        if out:
            out.append("stalls (s from the start): %s" % ", ".join(
                "%.3f-%.3f" % (a - self.t_start, b - self.t_start) for a, b in self.stalls))
        return out

    def held_intervals(self, sem, tenant=False):
        """Surely-held (t0, t1, weight, owner) of sem (of one tenant when `tenant` is not
        False)."""
        out = []
        for g in self.grants:
            if g["sem"] != sem or (tenant is not False and g.get("tenant") != tenant):
                continue
            end = g["end"] if g["end"] is not None else g["expiry"] - 0.05
            end = min(end, g["expiry"] - 0.05)  # a margin for the two clocks' rates
            if end > g["recv"]:
                out.append((g["recv"], end, g["weight"], g["owner"]))
        return out

    def _check_capacity(self, sem, cap, mine):
        ev = []
        for t0, t1, w, owner in self.held_intervals(sem):
            ev.append((t0, 1, w, owner))
            ev.append((t1, 0, -w, owner))  # at a tie, an end counts first
        ev.sort()
        held = peak = 0
        live = {}
        for t, _, w, owner in ev:
            held += w
            if w > 0:
                live[owner] = w
            else:
                live.pop(owner, None)
            peak = max(peak, held)
            assert held <= cap, "%s: %d units surely held at t=%.4f, capacity %d: %s" % (
                sem, held, t, cap, live)
        return peak

    def _check_tenant_max(self, sem, cap):
        for tenant in self.tenants + (None,):
            ev = []
            for t0, t1, w, owner in self.held_intervals(sem, tenant):
                ev.append((t0, 1, w))
                ev.append((t1, 0, -w))
            ev.sort()
            held = 0
            for t, _, w in ev:
                held += w
                assert held <= cap, "%s: tenant %s surely held %d at t=%.4f, tenant_max %d" % (
                    sem, tenant, held, t, cap)

    def _check_fences(self, sem, mine):
        by_fence = sorted(mine, key=lambda g: g["fence"])
        for a, b in zip(by_fence, by_fence[1:]):
            assert a["fence"] < b["fence"], "%s: fence %d granted twice (%s, %s)" % (
                sem, a["fence"], a["owner"], b["owner"])
            assert a["acquired_at"] <= b["acquired_at"], (
                "%s: fence %d acquired at %d, the later fence %d at %d (Redis TIME order)"
                % (sem, a["fence"], a["acquired_at"], b["fence"], b["acquired_at"]))
        # happened-before: received before the other request was sent => smaller fence
        sends = sorted((t, o) for s, t, o in self.sends if s == sem)
        fence_of = {g["owner"]: g["fence"] for g in mine}
        by_recv = sorted(mine, key=lambda g: g["recv"])
        i, best = 0, None  # best: the largest fence received so far (before t)
        for t, owner in sends:
            while i < len(by_recv) and by_recv[i]["recv"] < t:
                g = by_recv[i]
                if best is None or g["fence"] > best[0]:
                    best = (g["fence"], g["owner"])
                i += 1
            f = fence_of.get(owner)
            if f is not None and best is not None:
                assert f > best[0], ("%s: %s was granted fence %d after %s's fence %d had "
                                     "been received" % (sem, owner, f, best[1], best[0]))

    def _check_fifo(self):
        fence = {(g["owner"], g["sem"]): g["fence"] for g in self.grants}
        pairs = 0
        for sem, a, b in self.ahead:
            if (a, sem) in fence and (b, sem) in fence:
                pairs += 1
                assert fence[(a, sem)] < fence[(b, sem)], (
                    "%s: %s was queued ahead of %s but granted after it (fences %d, %d)"
                    % (sem, a, b, fence[(a, sem)], fence[(b, sem)]))
        return pairs

    def _check_idle(self):
        for sem, t0, t1 in self.idle_ok:
            for h0, h1, w, owner in self.held_intervals(sem):
                assert not (h0 <= t0 and h1 >= t1), (
                    "%s: wait-idle answered idle while %s surely held %d units throughout"
                    % (sem, owner, w))


def wait_rest(instances, sems, timeout=20, load=None):
    """Every instance reports every semaphore at rest (nothing held, nobody waiting) within
    `timeout` s. With `load`, a failure says which of what is left had its acquire or its
    release answered 503 (an outcome the client could not know, which semad must settle)."""
    def rest():
        for s in instances:
            for name, cap in sems.items():
                st, v = s.json("GET", "/v1/semaphores/" + name)
                if st != 200 or v["held"] != 0 or v["waiting"] != 0 or \
                        v["available"] != cap or v["holders"] or v["waiters"]:
                    return False
        return True
    try:
        fx.wait_until(rest, timeout, "every unit back at rest on every instance")
    except AssertionError:
        raise AssertionError("not at rest after %ss: %s" % (timeout,
                                                           describe(instances[0], sems, load)))


def describe(s, sems, load=None):
    """The semaphores as `s` sees them, and for each holder and waiter what the load's client
    was answered (its acquire, its release)."""
    views = {n: s.json("GET", "/v1/semaphores/" + n)[1] for n in sems}
    why = []
    if load is not None:
        for n, v in views.items():
            for kind in ("holders", "waiters"):
                for h in (v or {}).get(kind, []):
                    o = h.get("owner")
                    why.append("%s %s %s: %s" % (n, kind[:-1], o, load.said.get(
                        o, "not a request of the load")))
    return "%s %s" % (why, views)
