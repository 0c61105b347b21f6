# SPDX-License-Identifier: MIT
"""test_scenarios_http.py - the shared semantics suite (tests/cases/scenarios.txt) over
HTTP against the real semad. A queued request is a parked HTTP request on its own
connection; `cancel` closes that connection; `close` is DELETE; `release L` is DELETE of
L's lease. Scenarios with a line HTTP cannot express are skipped and named (behind the
validating proxy of SEMA_TEST_OPENAPI_PROXY also `cancel`: prism does not pass a client's
disconnect on to semad)."""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import semad_fixture as fx  # noqa: E402

SCENARIOS = os.path.join(os.environ.get("SEMA_SOURCE_DIR",
                                        os.path.join(os.path.dirname(__file__), "..", "..")),
                         "tests", "cases", "scenarios.txt")


def parse(path):
    """[(name, capacity, [(lineno, words, expected)])]"""
    out, cur = [], None
    with open(path) as f:
        for no, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            words, _, expect = line.partition("=>")
            words, expect = words.split(), expect.strip() or None
            if words[0] == "scenario":
                cur = (words[1], int(words[2]), [], limits_of(words[3:]))
                out.append(cur)
            elif words[0] == "end":
                cur = None
            else:
                cur[2].append((no, words, expect))
    return out


def limits_of(words):
    """tenant_max=T rate=R burst=B as the body fields of PUT and PATCH."""
    keys = {"tenant_max": "tenant_max", "rate": "rate_per_s", "burst": "rate_burst"}
    out = {}
    for w in words:
        k, _, v = w.partition("=")
        if k in keys and v:
            out[keys[k]] = int(v)
    return out


def opt(words, key):
    for w in words:
        if w.startswith(key + "="):
            return w.split("=", 1)[1]
    return None


LIMITS_VERBS = "semad's limits (several semaphores, tenants, rates)"


def uses_limits(words):
    return words[0] == "sem" or (words[0] in ("acquire", "try") and len(words) > 2 and (
        ":" in words[2] or opt(words[3:], "tenant"))) or \
        (words[0] == "resize" and limits_of(words[2:])) or \
        (words[0] == "state" and (opt(words[1:], "on") or opt(words[1:], "tenant")))


def expressible(words, limits=True, multi=True):
    if not limits and uses_limits(words):
        return LIMITS_VERBS + " are not served by this back end"
    if not multi and words[0] in ("acquire", "try") and len(words) > 2 and ":" in words[2]:
        return "requests on several semaphores are not served by this back end"
    if words[0] == "release" and len(words) > 2:
        return "partial release (release L W) has no HTTP route"
    if words[0] == "cancel" and fx.PROXY:
        return "a disconnect does not pass through the validating proxy"
    return None


class Request:
    """One labelled request on its own connection; the reply is read by a thread."""

    def __init__(self, s, path, body):
        self.sock = s.raw(timeout=30)
        self.f = self.sock.makefile("rb")
        self.closed = False
        self.reply = None
        self.done = threading.Event()
        self.sock.sendall(fx.raw_request("POST", path, body))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            st, _, data = fx.read_response(self.f)
            self.reply = (st, json.loads(data) if data else None)
        except (OSError, EOFError, ValueError):
            self.reply = ("closed", None)
        self.done.set()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # a real FIN now, even with a reader blocked
        except OSError:
            pass
        self.sock.close()


def outcome(req, waitidle=False):
    """The scenario word for a settled request."""
    if req.closed:
        return "canceled"
    st, body = req.reply
    code = body.get("code") if isinstance(body, dict) else None
    if st == 200:
        return "done" if waitidle else "granted"
    return {400: "invalid", 404: "canceled", 410: "canceled"}.get(
        st, {"timeout": "timedout", "unavailable": "busy"}.get(code, "http %s" % st))


class Runner:
    def __init__(self, s, name, cap, limits):
        # (on Redis Cluster a request on several semaphores names one slot's: the scenario's
        # semaphores share a hash tag there)
        sem = ("{sc-%s}" if fx.CLUSTER else "sc-%s") % name
        self.s, self.sem, self.reqs, self.leases = s, sem, {}, {}
        self.kinds = {}
        self.others = []
        self.closed_sem = False
        body = dict(limits, capacity=cap)
        assert s.json("PUT", "/v1/semaphores/" + self.sem, body)[0] == 201

    def name(self, short):
        """A scenario's semaphore by its name in the file ("main": its own)."""
        return self.sem if short in (None, "main") else self.sem + "-" + short

    def state(self, short=None):
        st, sem = self.s.json("GET", "/v1/semaphores/" + self.name(short))
        return sem if st == 200 else None

    def nwaiters(self, short=None):
        sem = self.state(short)
        return sem["waiting"] if sem else 0

    def send(self, label, path, body, waitidle=False, watch=None):
        before = self.nwaiters(watch)
        t0 = time.monotonic()
        req = Request(self.s, path, body)
        self.reqs[label] = req
        self.kinds[label] = waitidle
        fx.wait_until(lambda: req.done.is_set() or self.nwaiters(watch) > before,
                      what="%s to settle or queue" % label)
        if not req.done.is_set():
            return "queued"
        res = outcome(req, waitidle)
        if res == "timedout" and time.monotonic() - t0 >= body.get("timeout_ms", 0) / 1000:
            # It waited its whole timeout, so it was queued: on a slow machine a short
            # timeout can run out before the queue was seen. `now` settles it.
            return "queued"
        if res == "granted":
            self.leases[label] = req.reply[1]["lease"]
        return res

    def acquire(self, words, try_):
        label = words[1]
        body = {"owner": label}
        if try_:
            body["timeout_ms"] = 0
        if opt(words[3:], "timeout") is not None:
            body["timeout_ms"] = int(opt(words[3:], "timeout"))
        if opt(words[3:], "tenant") is not None:
            body["tenant"] = opt(words[3:], "tenant")
        if ":" not in words[2]:
            body["weight"] = int(words[2])
            return self.send(label, "/v1/semaphores/%s/acquire" % self.sem, body)
        parts = []
        for p in words[2].split(","):
            n, _, w = p.partition(":")
            parts.append({"name": self.name(n), "weight": int(w or 1)})
        body["semaphores"] = parts
        first = words[2].split(",")[0].split(":")[0]
        return self.send(label, "/v1/acquire", body, watch=first)

    def settle(self, label):
        req = self.reqs[label]
        if not req.closed:
            assert req.done.wait(5 * fx.SLOW), "%s never settled" % label
        res = outcome(req, self.kinds[label])
        if res == "granted":
            self.leases[label] = req.reply[1]["lease"]
        return res

    def run(self, no, words, expect):
        verb = words[0]
        if verb in ("acquire", "try"):
            got = self.acquire(words, verb == "try")
        elif verb == "waitidle":
            body = {}
            for w in words[2:]:
                if w.startswith("timeout="):
                    body["timeout_ms"] = int(w.split("=")[1])
            got = self.send(words[1], "/v1/semaphores/%s/wait-idle" % self.sem, body, True)
        elif verb == "release":
            lease = self.leases.pop(words[1], None)
            if lease is None:
                got = "stale"
            else:
                st = self.s.request("DELETE", "/v1/leases/" + lease)[0]
                got = "ok" if st == 204 or (self.closed_sem and st in (404, 410)) else \
                    "stale" if st == 410 else "http %d" % st
                if st == 410:
                    self.leases[words[1] + "#released"] = lease
        elif verb == "cancel":
            self.reqs[words[1]].close()
            got = "ok"
        elif verb == "sem":
            name = self.name(words[1])
            self.s.request("DELETE", "/v1/semaphores/" + name)
            st = self.s.request("PUT", "/v1/semaphores/" + name,
                                dict(limits_of(words[3:]), capacity=int(words[2])))[0]
            self.others.append(name)
            assert st == 201, "line %d: PUT %s answered %d" % (no, name, st)
            return
        elif verb == "resize":
            st = self.s.request("PATCH", "/v1/semaphores/" + self.sem,
                                dict(limits_of(words[2:]), capacity=int(words[1])))[0]
            got = "ok" if st == 200 else "invalid" if st == 400 else "http %d" % st
        elif verb == "close":
            st = self.s.request("DELETE", "/v1/semaphores/" + self.sem)[0]
            self.closed_sem = True
            got = "ok" if st == 204 else "http %d" % st
        elif verb == "now":
            got = expect
            for label in words[1:]:
                res = self.settle(label)
                assert res == expect, "line %d: %s settled %s, want %s" % (no, label, res,
                                                                             expect)
        elif verb == "still":
            for label in words[1:]:
                assert not self.reqs[label].done.is_set(), "line %d: %s settled" % (no, label)
            return
        elif verb == "state":
            self.check_state(no, words[1:])
            return
        else:
            raise AssertionError("line %d: unknown verb %s" % (no, verb))
        assert got == expect, "line %d: %s => %s, want %s" % (no, " ".join(words), got, expect)

    def check_state(self, no, pairs):
        sem = self.state(opt(pairs, "on"))
        tenant = opt(pairs, "tenant")
        fields = ("capacity", "available", "held", "waiting", "waiting_weight")  # as the API's
        if tenant is not None:  # a tenant that neither holds nor waits is not listed: zeros
            t = next((t for t in sem.get("tenants", []) if t["tenant"] == tenant),
                     {"held": 0, "waiting": 0, "waiting_weight": 0})
            sem = dict(t, capacity=None, available=None)
        for kv in pairs:
            k, v = kv.split("=")
            if k in ("on", "tenant"):
                continue
            assert k in fields, "line %d: unknown state field %s" % (no, k)
            assert sem[k] == int(v), "line %d: %s=%s, want %s (%s)" % (no, k, sem[k], v, sem)

    def finish(self):
        for r in self.reqs.values():
            r.close()
        if not self.closed_sem:
            self.s.request("DELETE", "/v1/semaphores/" + self.sem)
        for name in self.others:
            self.s.request("DELETE", "/v1/semaphores/" + name)


def refill_s(limits, lines, upto):
    """The soonest a token comes back to one of the scenario's semaphores with a rate set by
    line `upto` (1/R s), or None without one: before it, the answers do not depend on time."""
    rates = [limits.get("rate_per_s", 0)] + [
        limits_of(w).get("rate_per_s", 0) for no, w, _ in lines
        if no <= upto and w[0] in ("sem", "resize")]
    return 1.0 / max(rates) if max(rates) > 0 else None


def run_scenario(s, name, cap, lines, limits, tries=5):
    """Runs one scenario on a fresh semaphore. A scenario with a rate whose run outlasted
    its first token's refill (a busy machine between two lines) may have seen a token the
    file does not expect: a failure then runs it again, up to `tries` times; a failure in a
    run shorter than the refill fails at once."""
    for t in range(tries):
        t0 = time.monotonic()  # (the bucket is full from the PUT on)
        r = Runner(s, name, cap, limits)
        no = 0
        try:
            for no, words, expect in lines:
                r.run(no, words, expect)
            return
        except AssertionError as e:
            took = time.monotonic() - t0
            window = refill_s(limits, lines, no)
            if window is None or took < window or t == tries - 1:
                raise AssertionError("scenario %s: %s (after %.2f s)" % (name, e, took))
            print("scenario %s took %.2f s, past its rate's refill (%.2f s), and saw %s: "
                  "again" % (name, took, window, e))
        finally:
            r.finish()


def test_scenarios():
    scenarios = parse(SCENARIOS)
    assert scenarios, "no scenarios"
    ran, skipped = 0, []
    with fx.Semad() as s:
        # A back end without the limits answers 501: their scenarios are skipped, named.
        served = s.request("PUT", "/v1/semaphores/sc-probe", {"capacity": 1,
                                                             "tenant_max": 1})[0] != 501
        # (and one without requests on several semaphores skips those)
        multi = served and s.request("POST", "/v1/acquire", {
            "semaphores": [{"name": "sc-probe", "weight": 1}], "timeout_ms": 0})[0] != 501
        s.request("DELETE", "/v1/semaphores/sc-probe")
        for name, cap, lines, limits in scenarios:
            if limits and not served:
                skipped.append("%s (%s are not served by this back end)" % (name, LIMITS_VERBS))
                continue
            why = next((expressible(w, served, multi) for _, w, _ in lines
                        if expressible(w, served, multi)), None)
            if why:
                skipped.append("%s (%s)" % (name, why))
                continue
            run_scenario(s, name, cap, lines, limits)
            ran += 1
    for sk in skipped:
        print("skipped scenario " + sk)
    print("%d scenarios passed over HTTP, %d skipped" % (ran, len(skipped)))
    limited = 0 if served else sum(1 for _, _, lines, lim in scenarios
                                   if lim or any(uses_limits(w) for _, w, _ in lines))
    if served and not multi:
        limited = sum(1 for _, _, lines, _ in scenarios
                      if any(expressible(w, True, False) for _, w, _ in lines))
    assert ran >= len(scenarios) - limited - (4 if fx.PROXY else 2)


if __name__ == "__main__":
    fx.main(globals())
