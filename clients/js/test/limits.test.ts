// SPDX-License-Identifier: MIT
// Several semaphores at once (acquireAll: one permit, a fence each, nothing held until all),
// tenants (tenant on acquire and tickets, tenantMax), a rate beside the capacity, and the
// options of each checked by name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, SemaNotFoundError, SemaTimeoutError, SemaUnavailableError } from "../src/index.js";
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
