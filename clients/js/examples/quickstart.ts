// Quick start: a fleet-wide semaphore, TC39 style.
import { createClient } from "@sema/client";

const client = createClient(); // SEMA_SERVER, else http://127.0.0.1:7070
const sem = await client.semaphore("exports", { capacity: 3 }); // created if missing

// acquire / release
const permit = await sem.acquire({ weight: 1, timeoutMs: 5_000, ttlMs: 30_000 });
console.log(permit.lease, permit.weight, permit.fence, new Date(permit.expiresAt));
await permit.release();
await permit.release(); // idempotent

// await using: released at the end of the block, also when it throws
{
  await using p = await sem.acquire();
  console.log("holding", p.lease);
}

// with / wrap
const rows = await sem.with(async (p) => `exported with fence ${p.fence}`);
const exportOne = sem.wrap(async (id: number) => `export ${id}`);
console.log(rows, await Promise.all([1, 2, 3, 4, 5].map(exportOne)));

// tryAcquire: a permit or null, never queues
const maybe = await sem.tryAcquire();
if (maybe) await maybe.release();

// available() is a method: every call is a fresh read from semad
console.log("available now:", await sem.available());
await sem.delete(); // leave nothing behind (deleting takes the admin right)
