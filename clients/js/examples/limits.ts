// Several semaphores at once, a fair share per tenant, a rate beside the concurrency.
import { createClient } from "@sema/client";

const client = createClient();
const gpu = await client.createSemaphore("gpu", { capacity: 4, tenantMax: 3 });
const db = await client.createSemaphore("db", { capacity: 2, ratePerS: 50, rateBurst: 5 });

// 2 GPUs and a database connection, or nothing: one permit, one fence per semaphore.
const job = await client.acquireAll({ gpu: 2, db: 1 }, { tenant: "acme", timeoutMs: 5_000 });
console.log(job.fences.gpu, job.fences.db, job.parts.length); // e.g. 1 2 2
await job.release(); // every part at once

// Tenants take turns by units; none holds more than tenantMax.
const p = await gpu.acquire({ weight: 3, tenant: "acme" });
console.log((await gpu.state()).tenants); // [ { tenant: 'acme', held: 3, waiting: 0, ... } ]
await p.release();

// A place in both lines that holds no connection: granted one lease on both when both fit.
const ticket = await client.takeTicketAll({ gpu: 2, db: 1 }, { tenant: "acme" });
console.log(ticket.status, ticket.weights); // granted { gpu: 2, db: 1 }
if (ticket.status === "granted") await client.ticketPermit(ticket).release(); // a MultiPermit

await db.configure({ ratePerS: 100 }); // the rate changes, the capacity stays
await client.withAll([{ name: "gpu" }, { name: "db" }], {}, async (all) => all.fences);
await gpu.delete();
await db.delete(); // leave nothing behind (deleting takes the admin right)
