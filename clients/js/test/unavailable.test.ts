// SPDX-License-Identifier: MIT
// Replies 503: a release that semad on a real redis-server answers 503 while Redis is away is
// sent again within retryMs (and settles as the README says when Redis stays away), and a
// 503's Retry-After is waited out.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { createClient, SemaError } from "../src/index.js";
import { startSemad, startRedis, redisMissing, metric, http, until, type Redis, type Semad } from "./semad.js";

const skip = redisMissing();

const RELEASES_503 = 'semad_http_requests_total{method="DELETE",route="/v1/leases/{id}",status="503"}';

/** semad on a fresh redis-server, answering 503 within 300 ms of Redis going away (?timeout=). */
async function onRedis(fn: (semad: Semad, redis: Redis) => Promise<void>): Promise<void> {
  const redis = await startRedis();
  try {
    const semad = await startSemad({ engine: `${redis.url}?timeout=300` });
    try {
      await fn(semad, redis);
    } finally {
      await semad.stop();
    }
  } finally {
    await redis.close();
  }
}

test("a release answered 503 while Redis is away is sent again until Redis is back", { skip }, async () => {
  await onRedis(async (semad, redis) => {
    const client = createClient({ url: semad.url, retryMs: 15000 });
    const sem = await client.semaphore("r503", { capacity: 2 });
    const p = await sem.acquire({ weight: 2, ttlMs: 120000 });
    await redis.kill();
    let settled = false;
    const releasing = p.release().then(() => {
      settled = true;
    });
    // answered 503 ("Redis is unreachable"), and sent again
    await until(
      async () => {
        assert.equal(settled, false, "the release settled while Redis was away");
        return (await metric(semad.url, RELEASES_503)) >= 2;
      },
      10000,
      "the release to be answered 503 twice",
    );
    await redis.start();
    await releasing;
    // the units are back at once: a try of the whole capacity is granted
    const all = await sem.tryAcquire(2);
    assert.ok(all, "the release's units came back");
    await all.release();
    await client.close();
  });
});

test("a release whose retryMs runs out while Redis stays away resolves, and the lease holds", { skip }, async () => {
  await onRedis(async (semad, redis) => {
    // one retry, a second later as semad's Retry-After asks; a second one would start past 1.5 s
    const client = createClient({ url: semad.url, retryMs: 1500 });
    const sem = await client.semaphore("r503-out", { capacity: 1 });
    const p = await sem.acquire({ ttlMs: 120000 });
    await redis.kill();
    // until semad has seen the connection close: the release is then answered "Redis is
    // unreachable" and never sent (sent before, its outcome is unknown and semad sends it again
    // once Redis is back, when it happens)
    await until(async () => (await http(semad.url, "GET", "/healthz")).status === 503, 10000, "semad to see Redis gone");
    const t0 = Date.now();
    await p.release(); // never rejects
    assert.ok(Date.now() - t0 >= 1000, `sent again after ${Date.now() - t0} ms, before its Retry-After`);
    assert.equal(await metric(semad.url, RELEASES_503), 2, "sent again once after its 503");
    assert.equal(p.released, true);
    // it did not happen: once Redis is back, the lease still holds its unit (until its ttl)
    await redis.start();
    await until(async () => (await http(semad.url, "GET", "/healthz")).status === 200, 10000, "semad to reach Redis again");
    assert.equal((await http(semad.url, "GET", `/v1/leases/${p.lease}`)).status, 200);
    assert.equal((await http(semad.url, "DELETE", `/v1/leases/${p.lease}`)).status, 204);
    await client.close();
  });
});

/** A connection to semad with one request answered on it, kept open: with
 * --max-connections-per-ip 1, semad refuses any other from this address (503, Retry-After: 1). */
function holdConnection(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => s.write("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
    s.on("error", reject);
    s.once("data", (b: Buffer) => (b.toString("latin1").startsWith("HTTP/1.1 200") ? resolve(s) : reject(new Error(b.toString()))));
  });
}

test("a 503's Retry-After is waited out before a read is sent again", async () => {
  const semad = await startSemad({ args: ["--max-connections-per-ip", "1"] });
  try {
    const held = await holdConnection(semad.port);
    const client = createClient({ url: semad.url, retryMs: 1500 });
    const t0 = Date.now();
    await assert.rejects(client.lease("no-such-lease"), (e: unknown) => {
      assert.ok(e instanceof SemaError);
      assert.equal(e.status, 503);
      assert.equal(e.retryAfterMs, 1000);
      return true;
    });
    assert.ok(Date.now() - t0 >= 1000, `sent again after ${Date.now() - t0} ms, before its Retry-After`);
    held.destroy();
    // Refused twice: the first try, and one retry a second later (a third would wait past
    // retryMs). Reads here that semad refused, not yet having seen `held` go, do not count.
    let mine = 0;
    const refused = await until(async () => {
      const r = await http(semad.url, "GET", "/metrics");
      if (r.status !== 200) return void mine++;
      return (r.body as string).match(/\nsemad_http_connections_rejected_per_ip_total (\d+)/)?.[1];
    }, 5000, "semad to answer /metrics");
    assert.equal(Number(refused) - mine, 2);
  } finally {
    await semad.stop();
  }
});
