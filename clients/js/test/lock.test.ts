// SPDX-License-Identifier: MIT
// Keyed locks (seed 003), mapLimit (seed 000), watch() and the legacy API.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createClient, Lock, SemaClient, SemaNetworkError, SemaNotFoundError, SemaTimeoutError, type SemaEvent } from "../src/index.js";
import { startSemad, startProxy, http, until, sleep, type Semad } from "./semad.js";

let semad: Semad;
let client: SemaClient;

before(async () => {
  semad = await startSemad();
  client = createClient({ url: semad.url });
});
after(async () => {
  await client.close();
  await semad.stop();
});

test("lock: exclusive excludes, shared overlaps, unlock is idempotent", async () => {
  const w = await client.lock("doc/1");
  assert.ok(w instanceof Lock);
  assert.equal(w.key, "doc/1");
  assert.equal(w.mode, "exclusive");
  assert.ok(w.fence > 0);
  assert.equal(await client.tryLock("doc/1", { mode: "shared" }), null);
  await assert.rejects(client.lock("doc/1", { timeoutMs: 50 }), SemaTimeoutError);
  await w.unlock();
  await w.unlock();
  const r1 = await client.lock("doc/1", { mode: "shared" });
  const r2 = await client.lockShared("doc/1");
  assert.equal(r2.mode, "shared");
  const st = await client.lockState("doc/1");
  // typed as semad answers: each holder's mode, and the reader cap
  const modes: Array<"shared" | "exclusive"> = st.holders.map((h) => h.mode);
  assert.deepEqual(modes, ["shared", "shared"]);
  const cap: number = st.max_readers;
  assert.ok(cap >= 1);
  assert.equal(st.readers, 2);
  assert.equal(await client.tryLock("doc/1"), null);
  // A writer queued behind the readers holds back later readers (no writer starvation).
  const writer = client.lock("doc/1");
  await until(async () => (await client.lockState("doc/1")).waiters.length === 1, 3000, "writer queued");
  const late = client.lock("doc/1", { mode: "shared" });
  await until(async () => (await client.lockState("doc/1")).waiters.length === 2, 3000, "reader queued");
  await r1.unlock();
  await r2.unlock();
  const wl = await writer;
  assert.equal(wl.mode, "exclusive");
  await wl.unlock();
  await (await late).unlock();
  await assert.rejects(client.lockState("doc/1"), SemaNotFoundError);
});

test("lock: AbortSignal cancels, withLock scopes, await using unlocks", async () => {
  const held = await client.lock("k2");
  const ac = new AbortController();
  const waiting = client.lock("k2", { signal: ac.signal });
  await until(async () => (await client.lockState("k2")).waiters.length === 1, 3000, "queued");
  ac.abort();
  await assert.rejects(waiting, (e: unknown) => (e as Error).name === "AbortError");
  await until(async () => (await client.lockState("k2")).waiters.length === 0, 3000, "waiter gone");
  await held.unlock();

  const v = await client.withLock("k2", async (lock) => {
    assert.equal(lock.mode, "exclusive");
    return "done";
  });
  assert.equal(v, "done");
  await assert.rejects(
    client.withLock("k2", { mode: "shared" }, () => {
      throw new Error("x");
    }),
    /x/,
  );
  await assert.rejects(client.lockState("k2"), SemaNotFoundError);
  await assert.rejects(async () => {
    await using lock = await client.lock("k2");
    void lock;
    throw new Error("y");
  }, /y/);
  await assert.rejects(client.lockState("k2"), SemaNotFoundError);
});

test("mapLimit: at most limit at once across clients, results in input order", async () => {
  const c2 = createClient({ url: semad.url });
  let running = 0;
  let most = 0;
  const fn = async (x: number) => {
    running++;
    most = Math.max(most, running);
    await sleep(10 + ((x * 7) % 13));
    running--;
    return x * x;
  };
  const items = Array.from({ length: 12 }, (_, i) => i);
  const [a, b] = await Promise.all([
    client.mapLimit(items, 3, fn, { name: "map" }),
    c2.mapLimit(items, 3, fn, { name: "map" }),
  ]);
  assert.deepEqual(a, items.map((x) => x * x));
  assert.deepEqual(b, a);
  assert.equal(most, 3, "fleet-wide limit reached, never passed");
  const sem = await client.semaphore("map");
  assert.equal((await sem.state()).held, 0);
  // Semaphore.mapLimit: the capacity is the limit.
  assert.deepEqual(await sem.mapLimit([3, 1, 2], async (x, i) => `${i}:${x}`), ["0:3", "1:1", "2:2"]);
});

test("mapLimit: the first error stops new work and is thrown", async () => {
  const started: number[] = [];
  const items = Array.from({ length: 20 }, (_, i) => i);
  await assert.rejects(
    client.mapLimit(
      items,
      2,
      async (x) => {
        started.push(x);
        await sleep(10);
        if (x === 3) throw new Error("item 3 failed");
        return x;
      },
      { name: "map-fail" },
    ),
    /item 3 failed/,
  );
  assert.ok(started.length <= 6, `started ${started.length} items`);
  assert.ok(!started.includes(19));
  const st = (await http(semad.url, "GET", "/v1/semaphores/map-fail")).body;
  assert.equal(st.held, 0);
  assert.equal(st.waiting, 0);
});

test("watch: events in order, resuming with Last-Event-ID after a drop", async () => {
  const sem = await client.createSemaphore("watched", 2);
  // Every event stream is cut after its first chunk that carries an event.
  const proxy = await startProxy(semad.url);
  proxy.onReply = (req, chunk, ctl) => {
    ctl.forward(chunk);
    if (req.path.endsWith("/events") && chunk.includes("data:")) ctl.cut();
  };
  const watcher = createClient({ url: proxy.url });
  const events: SemaEvent[] = [];
  const iter = watcher.watch("watched");
  const reading = (async () => {
    for await (const ev of iter) {
      events.push(ev);
      if (ev.type === "deleted") break;
    }
  })();
  await sleep(100);
  // Two events while a stream is down (they come back on the resume), then one at a time.
  const p = await sem.acquire();
  const q = await sem.acquire();
  await until(() => events.length === 2, 3000, "2 events");
  await p.release();
  await until(() => events.length === 3, 3000, "3 events");
  await q.release();
  await until(() => events.length === 4, 3000, "4 events");
  await sem.delete();
  await reading;
  assert.deepEqual(
    events.map((e) => e.type),
    ["granted", "granted", "released", "released", "deleted"],
  );
  assert.equal(events[0]!.data.lease, p.lease);
  assert.equal(events[1]!.data.lease, q.lease);
  const ids = events.map((e) => e.id!);
  assert.equal(new Set(ids).size, ids.length, "nothing twice");
  await proxy.close();
  const lastIds = proxy.requests.filter((r) => r.path.endsWith("/events")).map((r) => r.headers["last-event-id"] ?? null);
  assert.ok(lastIds.length >= 2, "reconnected");
  assert.equal(lastIds[0], null);
  assert.ok(lastIds.slice(1).every((id) => id !== null && ids.includes(id)), "resumed from a seen id");
});

test("watch: break ends the stream; a missing semaphore throws not_found", async () => {
  const sem = await client.createSemaphore("watched2", 1);
  const ac = new AbortController();
  const got: string[] = [];
  const reading = (async () => {
    for await (const ev of sem.watch({ signal: ac.signal })) {
      got.push(ev.type);
      if (got.length === 2) break;
    }
  })();
  await sleep(100);
  await (await sem.acquire()).release();
  await reading;
  assert.deepEqual(got, ["granted", "released"]);
  // an event's type is one of the seven: a misspelt one does not compile
  // @ts-expect-error "release" is not an event type ("released" is)
  const misspelt: SemaEvent["type"] = "release";
  void misspelt;
  const it = client.watch("no-such-semaphore");
  await assert.rejects(it.next(), SemaNotFoundError);
});

test("watch and watchTicket: no semad at the URL is a SemaNetworkError after retryMs, not a silent wait", async () => {
  const gone = await startSemad();
  await gone.stop(); // its port is closed now
  const c = createClient({ url: gone.url, retryMs: 300 });
  const bounded = <T>(p: Promise<T>) =>
    Promise.race([p, sleep(5000).then(() => Promise.reject(new Error("still waiting after 5 s")))]);
  const started = Date.now();
  await assert.rejects(bounded(c.watch("anything").next()), (e: unknown) => {
    assert.ok(e instanceof SemaNetworkError, String(e));
    assert.match(e.message, /^semad unreachable at http:\/\/127\.0\.0\.1:\d+: /);
    return true;
  });
  assert.ok(Date.now() - started >= 100, "tried again before giving up");
  await assert.rejects(bounded(c.watchTicket("some-ticket").next()), SemaNetworkError);
});

test("legacy: the five endpoints", async () => {
  const l = client.legacy;
  assert.deepEqual(await l.create("printer", 1), { name: "printer", value: 1, created: true });
  assert.deepEqual(await l.create("printer", 5), { name: "printer", value: 5, created: false });
  assert.equal(await l.value("printer"), 1);
  assert.equal(await l.down("printer"), 0);
  assert.equal(await l.down("printer"), null);
  assert.equal(await l.up("printer"), 1);
  assert.equal(await l.up("printer"), 2);
  assert.equal(await l.delete("printer"), true);
  assert.equal(await l.delete("printer"), false);
  await assert.rejects(l.value("printer"), SemaNotFoundError);
  await assert.rejects(l.create("bad", -1), (e: unknown) => (e as { status: number }).status === 400);
});
