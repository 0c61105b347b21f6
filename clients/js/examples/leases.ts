// A permit is a lease: renewed in the background, permit.signal fires if it is lost.
import { createClient, SemaLeaseLostError } from "@sema/client";

const client = createClient();
const sem = await client.semaphore("leader", { capacity: 1 });

const permit = await sem.acquire({ ttlMs: 3_000 }); // renewed every second while held
permit.signal.addEventListener("abort", () => {
  const e = permit.signal.reason as SemaLeaseLostError;
  console.log("lost the lease:", e.code); // lease_revoked, lease_expired, lease_released, deleted, unreachable
});

// Hand the fence to a fenced resource; pass the signal to work that must stop on loss.
async function work(fence: number, signal: AbortSignal) {
  signal.throwIfAborted();
  console.log("writing as fence", fence, "until", new Date(permit.expiresAt));
}
await work(permit.fence, permit.signal);
await permit.renew(); // by hand (the client does it by itself)
await permit.release();
await sem.delete(); // leave nothing behind (deleting takes the admin right)
