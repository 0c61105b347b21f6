// SPDX-License-Identifier: MIT
// Tickets: a place in the FIFO queue that answers at once, read back by id (also from
// another client, as after a page reload), long-polled, streamed until granted, left, and
// turned into a Permit once granted.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, SemaTicketEndedError, SemaNotFoundError, SemaInvalidRequestError } from "../src/index.js";
import { startSemad, http } from "./semad.js";

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
  } finally {
    await semad.stop();
  }
});

async function until(fn: () => boolean | Promise<boolean>, ms = 10000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 20));
  }
}
