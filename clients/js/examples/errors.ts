// Typed errors with the server's problem code.
import { createClient, SemaError, SemaTimeoutError, SemaUnavailableError } from "@sema/client";

const client = createClient();
const sem = await client.semaphore("busy", { capacity: 1 });
const held = await sem.acquire();
try {
  await sem.acquire({ timeoutMs: 100 });
} catch (e) {
  if (e instanceof SemaTimeoutError) console.log("timed out:", e.code, e.status); // timeout 409
}
try {
  await sem.acquire({ timeoutMs: 0 });
} catch (e) {
  if (e instanceof SemaUnavailableError) console.log("busy:", e.code); // unavailable
}
try {
  await client.createSemaphore("busy", 2);
} catch (e) {
  if (e instanceof SemaError) console.log(e.name, e.code, e.detail); // SemaConflictError conflict
}
await held.release();
await sem.delete(); // leave nothing behind (deleting takes the admin right)
