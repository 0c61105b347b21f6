// SPDX-License-Identifier: MIT
// Tickets: a place in the FIFO queue that answers at once, read back by id (also from
// another client, as after a page reload), long-polled, streamed until granted, left, and
// turned into a Permit once granted.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, SemaTicketEndedError, SemaNotFoundError, SemaInvalidRequestError } from "../src/index.js";
import { startSemad, startProxy, http } from "./semad.js";

test("a ticket waits in the same line as acquires and is granted in its turn", async () => {
  const semad = await startSemad({ args: ["--ticket-poll", "100ms"] });
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("tk-line", { capacity: 1 });
    const holder = await sem.acquire();
    const waiter = sem.acquire(); // a long-poll, ahead of the ticket
    await until(async () => (await sem.state()).waiting === 1);
    const t = await sem.takeTicket({ owner: "tab", keepaliveMs: 60000 });
    assert.equal(t.status, "waiting");
    assert.equal(t.position, 2);
    assert.equal(t.aheadWeight, 1);
    assert.equal(t.estimateMs, null);
    assert.ok(t.id.length >= 20);
    // state() types what semad says of each waiter: the head is 0, a ticket has its kind
    const kinds: Array<"wait_idle" | "ticket" | undefined> = (await sem.state()).waiters.map((x) => x.kind);
    assert.deepEqual(kinds, [undefined, "ticket"]);
    // another client (a reloaded page) reads the same place
    const other = createClient({ url: semad.url });
    assert.equal((await other.ticket(t.id)).position, 2);
    await holder.release();
    const w = await waiter;
    assert.equal((await other.ticket(t.id)).position, 1);
    // a long-poll answers the grant at once, whether it arrives before or after it
    const granting = client.ticket(t.id, { waitMs: 10000 });
    await w.release();
    const granted = await granting;
    assert.equal(granted.status, "granted");
    assert.equal(granted.position, null);
    const p = client.ticketPermit(granted);
    assert.equal(p.lease, granted.lease!.lease);
    assert.equal((await sem.state()).holders[0].lease, p.lease);
    await p.release();
    await assert.rejects(client.ticket(t.id), SemaTicketEndedError);
    await other.close();
    await client.close();
  } finally {
    await semad.stop();
  }
});

test("watchTicket streams positions until the grant; leaving frees the place", async () => {
  const semad = await startSemad({ args: ["--ticket-poll", "100ms"] });
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("tk-watch", { capacity: 1 });
    const holder = await sem.acquire();
    const ahead = await sem.takeTicket({ keepaliveMs: 60000 });
    const mine = await sem.takeTicket({ keepaliveMs: 60000 });
    const seen: number[] = [];
    let granted = false;
    const watching = (async () => {
      for await (const t of client.watchTicket(mine.id)) {
        if (t.status === "granted") {
          granted = true;
          client.ticketPermit(t);
        } else seen.push(t.position!);
      }
    })();
    await until(() => seen.length === 1);
    assert.deepEqual(seen, [2]);
    await client.leaveTicket(ahead.id);
    await client.leaveTicket(ahead.id); // already gone: resolves
    await until(() => seen.length === 2);
    assert.deepEqual(seen, [2, 1]);
    await holder.release();
    await watching;
    assert.ok(granted);
    await client.close(); // releases the ticket's permit
    assert.equal((await http(semad.url, "GET", "/v1/semaphores/tk-watch")).body.held, 0);
  } finally {
    await semad.stop();
  }
});

test("ticket errors are typed; a retry with one idempotency key is one ticket", async () => {
  const semad = await startSemad();
  try {
    const client = createClient({ url: semad.url });
    const sem = await client.semaphore("tk-err", { capacity: 2 });
    await assert.rejects(sem.takeTicket({ weight: 3 }), SemaInvalidRequestError);
    await assert.rejects(client.ticket("no-such-ticket"), SemaNotFoundError);
    await sem.acquire({ weight: 2 });
    const a = await sem.takeTicket({ idempotencyKey: "once" });
    const b = await sem.takeTicket({ idempotencyKey: "once" });
    assert.equal(a.id, b.id);
    assert.equal((await sem.state()).waiting, 1);
    await client.leaveTicket(a.id);
    await assert.rejects(client.ticket(a.id), SemaTicketEndedError);
    await client.close();
    await stringsNotUtf8(semad.url);
  } finally {
    await semad.stop();
  }
});

/**
 * A string that has no UTF-8 (a lone surrogate) as a name, key, owner, tenant or
 * idempotency key is a TypeError naming it before anything is sent, and a non-ASCII
 * idempotency key goes out as its UTF-8 (as from the C and Python clients).
 */
async function stringsNotUtf8(url: string): Promise<void> {
  const proxy = await startProxy(url);
  try {
    const client = createClient({ url: proxy.url });
    const sem = await client.semaphore("tk-utf8", { capacity: 1 });
    const cut = "caf\udcc3";
    const calls: Array<[string, () => unknown]> = [
      ["tenant", () => sem.acquire({ tenant: cut, timeoutMs: 0 })],
      ["owner", () => sem.acquire({ owner: cut, timeoutMs: 0 })],
      ["tenant", () => sem.takeTicket({ tenant: cut })],
      ["owner", () => sem.takeTicket({ owner: cut })],
      ["idempotencyKey", () => sem.takeTicket({ idempotencyKey: cut })],
      ["idempotencyKey", () => sem.takeTicket({ idempotencyKey: "a\tb" })],
      ["tenant", () => client.acquireAll({ "tk-utf8": 1, "tk-b": 1 }, { tenant: cut, timeoutMs: 0 })],
      ["name", () => client.acquireAll([{ name: "tk-utf8" }, { name: cut }], { timeoutMs: 0 })],
      ["owner", () => client.takeTicketAll({ "tk-utf8": 1, "tk-b": 1 }, { owner: cut })],
      ["name", () => client.takeTicketAll({ [cut]: 1 })],
      ["owner", () => client.lock("tk-k", { mode: "shared", owner: cut, timeoutMs: 0 })],
      ["key", () => client.lock(cut, { mode: "shared", timeoutMs: 0 })],
      ["name", () => client.semaphore(cut)],
      ["name", () => client.legacy.up(cut)],
      ["owner", () => createClient({ url: proxy.url, owner: cut })],
    ];
    for (const [what, call] of calls)
      await assert.rejects(
        async () => call(),
        (e: unknown) => e instanceof TypeError && new RegExp(`\\b${what} must be`).test(e.message),
        what,
      );
    assert.equal(proxy.requests.length, 0, "not one of them may reach semad");
    const t = await sem.takeTicket({ idempotencyKey: "clé", owner: "zoë", tenant: "ünï" });
    assert.equal(proxy.requests.at(-1)!.headers["idempotency-key"], Buffer.from("clé").toString("latin1"));
    assert.equal(t.tenant, "ünï");
    assert.equal((await sem.takeTicket({ idempotencyKey: "clé", owner: "zoë", tenant: "ünï" })).id, t.id);
    await client.leaveTicket(t.id);
    await client.close();
  } finally {
    await proxy.close();
  }
}

async function until(fn: () => boolean | Promise<boolean>, ms = 10000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 20));
  }
}
