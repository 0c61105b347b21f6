// SPDX-License-Identifier: MIT
// Several semaphores at once (acquireAll: one permit, a fence each, nothing held until all;
// takeTicketAll: a place in every line, granted when all fit), tenants (tenant on acquire and tickets, tenantMax), a rate beside the capacity, and the
// options of each checked by name.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  createClient,
  MultiPermit,
  SemaInvalidRequestError,
  SemaNotFoundError,
  SemaTicketEndedError,
  SemaTimeoutError,
  SemaUnavailableError,
} from "../src/index.js";
import { startSemad, until } from "./semad.js";

test("acquireAll takes every semaphore at once, holds nothing meanwhile, releases as one", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const gpu = await client.createSemaphore("gpu", 2);
    const db = await client.createSemaphore("db", 1);
    const p = await client.acquireAll([{ name: "gpu", weight: 2 }, { name: "db" }], { tenant: "acme", ttlMs: 30000 });
    assert.deepEqual(p.parts.map((x) => [x.name, x.weight]), [["gpu", 2], ["db", 1]]);
    assert.ok(p.fences.db > p.fences.gpu);
    assert.equal(p.tenant, "acme");
    assert.equal((await gpu.state()).holders[0].multi, true);
    assert.equal((await db.state()).holders[0].tenant, "acme");
    await assert.rejects(client.acquireAll({ gpu: 1, db: 1 }, { timeoutMs: 0 }), SemaUnavailableError);
    const waiting = client.acquireAll({ gpu: 1, db: 1 }, { timeoutMs: 30000 });
    await until(async () => (await db.state()).waiting === 1);
    assert.equal((await gpu.state()).held, 2); // it holds none of gpu while it waits
    await p.release();
    const q = await waiting;
    assert.equal((await gpu.state()).held, 1);
    await q.release();
    assert.equal((await db.state()).held, 0);
    await assert.rejects(client.acquireAll({ gpu: 1, nope: 1 }), SemaNotFoundError);
    await assert.rejects(client.acquireAll({ gpu: 1 }, { timeout: 5 } as never), /unknown option "timeout" \(did you mean "timeoutMs"\?\)/);
    await assert.rejects(client.acquireAll({ gpu: 1, db: 1 }, { timeoutMs: 50 }).then(async (x) => {
      await x.release();
      return client.acquireAll({ gpu: 3 }, { timeoutMs: 50 });
    }), /weight/);
    const r = await client.withAll({ gpu: 1, db: 1 }, {}, async (x) => x.parts.length);
    assert.equal(r, 2);
  } finally {
    await semad.stop();
  }
});

test("takeTicketAll keeps a place in every line and is granted one lease once all fit", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const gpu = await client.createSemaphore("tk-gpu", 2);
    const db = await client.createSemaphore("tk-db", 1);
    const g = await gpu.acquire(); // 1 of 2
    const d = await db.acquire(); // 1 of 1
    const t = await client.takeTicketAll({ "tk-gpu": 2, "tk-db": 1 }, { tenant: "acme", keepaliveMs: 60000 });
    assert.equal(t.status, "waiting");
    assert.deepEqual(t.parts, [{ name: "tk-gpu", weight: 2 }, { name: "tk-db", weight: 1 }]);
    assert.deepEqual([t.name, t.weight, t.weights, t.tenant, t.position], ["tk-gpu", 2, { "tk-gpu": 2, "tk-db": 1 }, "acme", 1]);
    assert.equal((await gpu.state()).held, 1); // it holds nothing while it waits
    assert.deepEqual((await db.state()).waiters.map((w) => [w.kind, w.multi]), [["ticket", true]]);
    await d.release(); // db fits now, gpu not yet: still waiting
    const again = await client.ticket(t.id);
    assert.deepEqual([again.status, again.parts, again.tenant], ["waiting", t.parts, "acme"]);
    // a second ticket behind it leaves while waiting: its places go from both lines
    const behind = await client.takeTicketAll([{ name: "tk-db" }, { name: "tk-gpu" }]);
    assert.equal(behind.tenant, null);
    await client.leaveTicket(behind.id);
    assert.equal((await gpu.state()).waiting, 1);
    const granting = client.ticket(t.id, { waitMs: 10000 });
    await g.release();
    const granted = await granting;
    assert.equal(granted.status, "granted");
    const p = client.ticketPermit(granted); // a lease on several semaphores: a MultiPermit
    assert.ok(p instanceof MultiPermit);
    assert.ok(p.fences["tk-db"] > d.fence && p.fences["tk-gpu"] > g.fence);
    assert.deepEqual([p.tenant, p.parts.map((x) => x.weight)], ["acme", [2, 1]]);
    assert.deepEqual([(await gpu.state()).held, (await db.state()).held], [2, 1]);
    await p.release(); // the ticket ends with its lease
    await assert.rejects(client.ticket(t.id), SemaTicketEndedError);
    assert.deepEqual([(await gpu.state()).held, (await db.state()).held], [0, 0]);
    // bad input: a clear error, nothing queued
    await assert.rejects(client.takeTicketAll({ "tk-gpu": 1, "tk-none": 1 }), SemaNotFoundError);
    await assert.rejects(client.takeTicketAll({ "tk-db": 2 }), SemaInvalidRequestError);
    await assert.rejects(client.takeTicketAll([{ name: "tk-db" }, { name: "tk-db" }]), SemaInvalidRequestError);
    await assert.rejects(client.takeTicketAll({}), /takeTicketAll: name at least one semaphore/);
    await assert.rejects(client.takeTicketAll({ "tk-db": 1 }, { weight: 1 } as never), /takeTicketAll: unknown option "weight"/);
    assert.equal((await db.state()).waiting, 0);
    await client.close();
  } finally {
    await semad.stop();
  }
});

test("tenantMax caps one tenant; a tenant's ticket and acquire carry it", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.createSemaphore("pool", { capacity: 4, tenantMax: 2 });
    const a = await sem.acquire({ weight: 2, tenant: "acme" });
    await assert.rejects(sem.acquire({ weight: 1, tenant: "acme", timeoutMs: 100 }), SemaTimeoutError);
    const b = await sem.acquire({ weight: 2, tenant: "bolt" });
    const st = await sem.state();
    assert.equal(st.tenant_max, 2);
    assert.deepEqual(st.tenants?.map((t) => [t.tenant, t.held]), [["acme", 2], ["bolt", 2]]);
    const t = await sem.takeTicket({ tenant: "core" });
    assert.equal(t.status, "waiting");
    await a.release();
    await until(async () => (await client.ticket(t.id)).status === "granted");
    await client.leaveTicket(t.id);
    await b.release();
  } finally {
    await semad.stop();
  }
});

test("a rate beside the capacity, changed by configure", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const api = await client.semaphore("api", { capacity: 10, ratePerS: 1, rateBurst: 1 });
    const p = await api.acquire(); // created with its rate, the bucket full
    assert.equal(await api.tryAcquire(), null); // no token for a second
    const st = await api.configure({ ratePerS: 1000 });
    assert.equal(st.rate_per_s, 1000);
    const q = await api.acquire({ timeoutMs: 2000 });
    await p.release();
    await q.release();
    assert.throws(() => api.configure({ rate: 5 } as never), /unknown option "rate" \(did you mean "rateBurst"\?\)|unknown option "rate"/);
  } finally {
    await semad.stop();
  }
});
