// SPDX-License-Identifier: MIT
// The transports: which one a client uses, connections kept alive, maxSockets, and a custom
// fetch. The rest of the suite runs on the transport in SEMA_TRANSPORT (test/run.sh runs it
// once with "node" and once with "fetch").
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "../src/index.js";
import { startSemad, startProxy, until, sleep, TRANSPORT, type Semad } from "./semad.js";

let semad: Semad;

before(async () => {
  semad = await startSemad();
});
after(async () => {
  await semad.stop();
});

test("the transport: SEMA_TRANSPORT, else node on Node.js; fetch when a fetch is given", () => {
  assert.equal(createClient({ url: semad.url }).transport, TRANSPORT);
  const saved = process.env.SEMA_TRANSPORT;
  try {
    delete process.env.SEMA_TRANSPORT;
    assert.equal(createClient({ url: semad.url }).transport, "node");
    assert.equal(createClient({ url: semad.url, fetch }).transport, "fetch");
    process.env.SEMA_TRANSPORT = "fetch";
    assert.equal(createClient({ url: semad.url }).transport, "fetch");
    assert.equal(createClient({ url: semad.url, transport: "node" }).transport, "node");
    process.env.SEMA_TRANSPORT = "carrier-pigeon";
    assert.throws(() => createClient({ url: semad.url }), TypeError);
  } finally {
    if (saved === undefined) delete process.env.SEMA_TRANSPORT;
    else process.env.SEMA_TRANSPORT = saved;
  }
  assert.throws(() => createClient({ url: semad.url, transport: "node", fetch }), TypeError);
});

test("requests one after another reuse one connection", async () => {
  const proxy = await startProxy(semad.url);
  try {
    const c = createClient({ url: proxy.url });
    const sem = await c.createSemaphore("keep-alive", 2);
    for (let i = 0; i < 10; i++) await (await sem.acquire()).release();
    assert.equal(await sem.available(), 2);
    assert.equal(proxy.requests.length, 22);
    // node: one pool for the acquires, one for the rest; undici may open a second connection.
    assert.ok(proxy.connections <= 2 + (TRANSPORT === "fetch" ? 1 : 0), `${proxy.connections} connections`);
    await c.close();
  } finally {
    await proxy.close();
  }
});

test("node transport: maxSockets caps the connections; waiters beyond it wait for one, releases do not", { skip: TRANSPORT !== "node" }, async () => {
  const proxy = await startProxy(semad.url);
  try {
    const holder = createClient({ url: semad.url });
    const hsem = await holder.createSemaphore("capped", 1);
    const held = await hsem.acquire();
    const c = createClient({ url: proxy.url, maxSockets: 2 });
    const sem = await c.semaphore("capped");
    const waiting = [sem.acquire(), sem.acquire(), sem.acquire()];
    await until(async () => (await hsem.state()).waiting === 2, 3000, "two parked");
    await sleep(200);
    assert.equal((await hsem.state()).waiting, 2, "the third waits for a connection");
    await held.release();
    for (const w of waiting) await (await w).release();
    const acquiring = new Set(proxy.requests.filter((r) => r.path.endsWith("/acquire")).map((r) => r.conn));
    assert.equal(acquiring.size, 2, "the acquires on two connections");
    assert.ok(proxy.connections <= 4, `${proxy.connections} connections (the releases on their own)`);
    await c.close();
    await holder.close();
  } finally {
    await proxy.close();
  }
});

test("a custom fetch is used for every request", async () => {
  const seen: string[] = [];
  const counting: typeof fetch = async (input, init) => {
    seen.push(`${init?.method ?? "GET"} ${new URL(String(input)).pathname}`);
    return fetch(input, init);
  };
  const c = createClient({ url: semad.url, fetch: counting });
  // the first acquire finds the semaphore missing (404) and creates it (PUT), then takes it
  const sem = await c.semaphore("custom-fetch", { capacity: 1 });
  await (await sem.acquire()).release();
  const ac = new AbortController();
  const got: string[] = [];
  const reading = (async () => {
    for await (const ev of sem.watch({ signal: ac.signal })) got.push(ev.type);
  })();
  await until(() => seen.some((s) => s.endsWith("/events")), 3000, "the stream opened");
  await (await sem.acquire()).release();
  await until(() => got.length === 2, 3000, "two events");
  ac.abort();
  await reading;
  const acq = "POST /v1/semaphores/custom-fetch/acquire";
  assert.deepEqual(seen.slice(0, 4), [acq, "PUT /v1/semaphores/custom-fetch", acq, "DELETE " + seen[3]!.slice(7)]);
  assert.ok(seen[3]!.startsWith("DELETE /v1/leases/"));
  assert.deepEqual(got, ["granted", "released"]);
});
