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
    await ops.semaphore("jobs/a", { capacity: 1 });
    await ops.semaphore("other", { capacity: 1 });

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

    await assert.rejects(w.semaphore("other"), (e: unknown) => {
      assert.ok(e instanceof SemaAuthError);
      assert.equal(e.status, 403);
      assert.match(String(e.detail), /jobs\//);
      return true;
    });
    await assert.rejects(w.semaphore("jobs/new", { capacity: 2 }), (e: unknown) => {
      assert.ok(e instanceof SemaAuthError);
      assert.match(String(e.detail), /'admin' right/);
      return true;
    });
    const anon = createClient({ url: semad.url, token: "" });
    await assert.rejects(anon.semaphore("jobs/a"), (e: unknown) => {
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
