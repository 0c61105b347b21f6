// SPDX-License-Identifier: MIT
// Leases: background renewal, permit.signal on loss (revoked, deleted, expired,
// unreachable), and a strict semad killed and restarted mid-hold.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, SemaLeaseLostError } from "../src/index.js";
import { startSemad, tempDir, http, until, sleep } from "./semad.js";

const TTL = 900;

test("the client renews a held lease past its ttl", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("renew", { capacity: 1 });
    const p = await sem.acquire({ ttlMs: TTL });
    const first = p.expiresAt;
    await sleep(TTL * 2);
    assert.equal(p.lost, false);
    assert.ok(p.expiresAt > first, "expiresAt moved on");
    const lease = await http(semad.url, "GET", `/v1/leases/${p.lease}`);
    assert.equal(lease.status, 200);
    assert.equal((await sem.state()).held, 1);
    await p.release();
    assert.equal((await sem.state()).held, 0);
  } finally {
    await semad.stop();
  }
});

test("a permit granted after a wait longer than its ttl is not lost", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("long-wait", { capacity: 1 });
    const holder = await sem.acquire({ ttlMs: TTL });
    const waiting = sem.acquire({ ttlMs: TTL / 2 });
    await sleep(TTL);
    await holder.release();
    const p = await waiting;
    await sleep(TTL);
    assert.equal(p.lost, false, String(p.signal.reason));
    assert.equal((await sem.state()).holders[0].lease, p.lease);
    await p.release();
  } finally {
    await semad.stop();
  }
});

test("revoked from outside: permit.signal fires at the next renewal, before the ttl could run out", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("revoke", { capacity: 2 });
    const p = await sem.acquire({ ttlMs: TTL });
    const fired = new Promise<number>((resolve) => p.signal.addEventListener("abort", () => resolve(Date.now())));
    const revokedAt = Date.now();
    assert.equal((await http(semad.url, "POST", `/v1/leases/${p.lease}/revoke`)).status, 204);
    const at = await fired;
    // The renewal every third of the ttl hears the 410; a busy machine may delay it by a
    // few hundred ms, but never to the ttl, by when an expiry could not be told from it.
    assert.ok(at - revokedAt < TTL, `noticed after ${at - revokedAt} ms`);
    assert.ok(p.signal.reason instanceof SemaLeaseLostError);
    assert.equal(p.signal.reason.code, "lease_revoked");
    assert.equal(p.lost, true);
    // Releasing a lost permit is a no-op that resolves.
    await p.release();
    // client.revoke does the same.
    const q = await sem.acquire({ ttlMs: TTL });
    await client.revoke(q.lease);
    await until(() => q.lost, TTL, "q lost");
    assert.equal((q.signal.reason as SemaLeaseLostError).code, "lease_revoked");
  } finally {
    await semad.stop();
  }
});

test("semad unreachable past the ttl: the signal fires with code unreachable", async () => {
  const semad = await startSemad();
  const client = createClient({ url: semad.url, retryMs: 200 });
  const sem = await client.semaphore("gone", { capacity: 1 });
  const p = await sem.acquire({ ttlMs: TTL });
  const start = Date.now();
  await semad.kill();
  await until(() => p.lost, TTL * 2, "the permit lost");
  const elapsed = Date.now() - start;
  assert.ok(elapsed <= TTL + TTL / 3 + 300, `noticed after ${elapsed} ms`);
  assert.equal((p.signal.reason as SemaLeaseLostError).code, "unreachable");
  await p.release(); // never rejects
});

test("a strict semad killed and restarted on the same port mid-hold: the lease survives", async () => {
  const dir = tempDir();
  let semad = await startSemad({ data: dir.path });
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("restart", { capacity: 2 });
    const p = await sem.acquire({ ttlMs: 3000 });
    const fence = p.fence;
    await semad.kill();
    await sleep(300);
    semad = await startSemad({ data: dir.path, port: semad.port });
    // Renewals get through again; the permit was never lost.
    const before = p.expiresAt;
    await until(() => p.expiresAt > before, 3000, "a renewal after the restart");
    assert.equal(p.lost, false);
    const st = await sem.state();
    assert.equal(st.held, 1);
    assert.equal(st.holders[0].lease, p.lease);
    // New grants after the restart get higher fences.
    const q = await sem.acquire({ ttlMs: 3000 });
    assert.ok(q.fence > fence);
    await q.release();
    await p.release();
    assert.equal((await sem.state()).held, 0);
  } finally {
    await semad.stop();
    dir.remove();
  }
});

test("an acquire sent while semad restarts is retried with its key and holds once", async () => {
  const dir = tempDir();
  let semad = await startSemad({ data: dir.path });
  try {
    const client = createClient({ url: semad.url, retryMs: 5000 });
    const sem = await client.semaphore("restart-acquire", { capacity: 1 });
    await semad.kill();
    const pending = sem.acquire({ ttlMs: 3000 });
    await sleep(200);
    semad = await startSemad({ data: dir.path, port: semad.port });
    const p = await pending;
    const st = await sem.state();
    assert.equal(st.held, 1);
    assert.equal(st.holders[0].lease, p.lease);
    await p.release();
  } finally {
    await semad.stop();
    dir.remove();
  }
});
