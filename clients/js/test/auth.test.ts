// SPDX-License-Identifier: MIT
// A semad run with --auth: the client sends its token (the `token` option or SEMA_TOKEN) on
// every request, event streams (a semaphore's, a ticket's) included, and 401/403 surface as
// SemaAuthError.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join, dirname, resolve } from "node:path";
import { createClient, SemaAuthError } from "../src/index.js";
import { startSemad, tempDir, SEMAD } from "./semad.js";

const SEMA = process.env.SEMA_BIN || resolve(dirname(SEMAD), "sema");

function newToken(file: string, name: string, rights: string, ...prefixes: string[]): string {
  const args = ["token", "new", name, "--rights", rights, "--file", file];
  for (const p of prefixes) args.push("--prefix", p);
  return execFileSync(SEMA, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
}

test("the token option and SEMA_TOKEN authorize requests; 401 and 403 are SemaAuthError", async () => {
  const dir = tempDir();
  const file = join(dir.path, "tokens");
  const admin = newToken(file, "ops", "admin");
  const worker = newToken(file, "worker", "acquire,read", "jobs/");
  const semad = await startSemad({ args: ["--auth", file] });
  const saved = process.env.SEMA_TOKEN;
  try {
    const ops = createClient({ url: semad.url, token: admin });
    await ops.createSemaphore("jobs/a", 1);
    await ops.createSemaphore("other", 1);

    process.env.SEMA_TOKEN = worker; // the default when no token option is given
    const w = createClient({ url: semad.url });
    const sem = await w.semaphore("jobs/a");
    const p = await sem.acquire({ timeoutMs: 0 });
    assert.equal((await sem.state()).held, 1);

    // an event stream carries the token too: watch sees the release
    const seen: string[] = [];
    const ac = new AbortController();
    const watching = (async () => {
      for await (const ev of sem.watch({ signal: ac.signal })) {
        seen.push(ev.type);
        if (ev.type === "released") ac.abort();
      }
    })().catch(() => {});
    await new Promise((r) => setTimeout(r, 200));
    await p.release();
    await watching;
    assert.ok(seen.includes("released"), `events: ${seen}`);

    // and so does a ticket's stream: watchTicket follows a ticket to its grant
    const busy = await sem.acquire({ timeoutMs: 0 });
    const ticket = await sem.takeTicket();
    assert.equal(ticket.status, "waiting");
    setTimeout(() => void busy.release(), 100);
    const states: string[] = [];
    for await (const t of w.watchTicket(ticket.id)) {
      states.push(t.status);
      if (t.status === "granted") await w.ticketPermit(t).release();
    }
    assert.deepEqual(states.slice(-1), ["granted"], `ticket states: ${states}`);

    await assert.rejects((await w.semaphore("other")).acquire(), (e: unknown) => {
      assert.ok(e instanceof SemaAuthError);
      assert.equal(e.status, 403);
      assert.match(String(e.detail), /jobs\//);
      return true;
    });
    await assert.rejects((await w.semaphore("jobs/new", { capacity: 2 })).acquire(), (e: unknown) => {
      assert.ok(e instanceof SemaAuthError);
      assert.match(String(e.detail), /'admin' right/);
      return true;
    });
    const anon = createClient({ url: semad.url, token: "" });
    await assert.rejects((await anon.semaphore("jobs/a")).acquire(), (e: unknown) => {
      assert.ok(e instanceof SemaAuthError);
      assert.equal(e.status, 401);
      assert.equal(e.code, "unauthorized");
      return true;
    });
    assert.throws(() => createClient({ url: semad.url, token: "a\r\nX-Evil: 1" }), TypeError);
  } finally {
    if (saved === undefined) delete process.env.SEMA_TOKEN;
    else process.env.SEMA_TOKEN = saved;
    await semad.stop();
    dir.remove();
  }
});

test("a worker whose token has only the acquire right does all of its work", async () => {
  // security.md: a worker that only takes and gives back needs `acquire` alone. Nothing the
  // client sends for that work may need `read` (a GET) or `admin` (a PUT).
  const dir = tempDir();
  const file = join(dir.path, "tokens");
  const admin = newToken(file, "ops", "admin");
  const worker = newToken(file, "worker", "acquire");
  const semad = await startSemad({ args: ["--auth", file, "--log-requests"] });
  try {
    const ops = createClient({ url: semad.url, token: admin });
    await ops.createSemaphore("jobs", 2);
    const w = createClient({ url: semad.url, token: worker });
    for (const sem of [await w.semaphore("jobs"), await w.semaphore("jobs", { capacity: 2 })]) {
      const p = await sem.acquire({ ttlMs: 3_000 });
      await p.renew();
      await p.release();
      assert.equal(await sem.with(async (q) => q.weight), 1);
      const exportOne = sem.wrap(async (n: number) => n * 2);
      assert.deepEqual(await Promise.all([1, 2].map(exportOne)), [2, 4]);
      await (await sem.tryAcquire())?.release();
      await sem.acquire(1);
      await sem.release(1);
      await sem.wait({ timeoutMs: 5_000 });
      assert.deepEqual(await sem.mapLimit([1, 2, 3], async (n) => n + 1, { limit: 2 }), [2, 3, 4]);
      const t = await sem.takeTicket();
      const seen = await w.ticket(t.id);
      if (seen.status === "granted") await w.ticketPermit(seen).release();
      else await w.leaveTicket(t.id);
    }
    assert.deepEqual(await w.mapLimit([1, 2], 2, async (n) => n, { name: "jobs" }), [1, 2]);
    await w.withLock("jobs-lock", async () => undefined);
    await (await w.tryLock("jobs-lock"))?.unlock();
    assert.equal(await w.legacy.down("jobs"), 1);
    assert.equal(await w.legacy.up("jobs"), 2);
    const refused = semad.log().split("\n").filter((l) => l.includes(" -> 403"));
    assert.deepEqual(refused, []);
    // and the token lacks the rest: reading, and creating a missing semaphore
    await assert.rejects((await w.semaphore("jobs")).state(), SemaAuthError);
    await assert.rejects((await w.semaphore("jobs-new", { capacity: 1 })).acquire(), (e: unknown) => {
      assert.ok(e instanceof SemaAuthError);
      assert.match(String(e.detail), /'admin' right/);
      return true;
    });
    w.close();
    ops.close();
  } finally {
    await semad.stop();
    dir.remove();
  }
});
