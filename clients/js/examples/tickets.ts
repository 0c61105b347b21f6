// A place in line that survives a reload: take a ticket, read it back by id, run in its turn.
import { createClient } from "@sema/client";

const client = createClient();
const sem = await client.semaphore("ticket-line", { capacity: 1 });
const running = await sem.acquire(); // somebody is already at it

const ticket = await sem.takeTicket({ owner: "tab-7", keepaliveMs: 30_000 });
console.log(ticket.status, ticket.position, ticket.estimateMs); // waiting 1 null

// Keep ticket.id (a cookie, say); any process can read it back, here as a stream.
setTimeout(() => void running.release(), 100);
for await (const t of client.watchTicket(ticket.id)) {
  if (t.status === "waiting") console.log(`you are number ${t.position}`);
  else {
    const permit = client.ticketPermit(t); // renewed in the background
    console.log("your turn, fence", permit.fence);
    await permit.release();
  }
}
await sem.delete(); // leave nothing behind (deleting takes the admin right)
