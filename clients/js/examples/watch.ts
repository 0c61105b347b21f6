// The event stream of a semaphore, resumed with Last-Event-ID after a drop.
import { createClient } from "@sema/client";

const client = createClient();
const sem = await client.createSemaphore("watched", 1); // now: watch wants it to exist

const ac = new AbortController();
const reading = (async () => {
  for await (const event of client.watch("watched", { signal: ac.signal })) {
    console.log(event.id, event.type, event.data);
    if (event.type === "released") break; // or ac.abort()
  }
})();
await new Promise((r) => setTimeout(r, 100));
await (await sem.acquire()).release();
await reading;
await sem.delete(); // leave nothing behind (deleting takes the admin right)
