// Keyed reader/writer locks.
import { createClient } from "@sema/client";

const client = createClient();

// handle style
const exclusive = await client.lock("user:42", { mode: "exclusive", timeoutMs: 5_000 });
try {
  console.log("writing with fence", exclusive.fence);
} finally {
  await exclusive.unlock(); // idempotent
}

const shared = await client.lockShared("user:42");
await shared.unlock();

// scoped style
const value = await client.withLock("user:42", { mode: "shared" }, async () => "read");
await client.withLock("user:42", async (lock) => console.log(lock.mode, value));

// await using
{
  await using lock = await client.lock("doc:1");
  console.log("holding", lock.key);
}

// try: a lock or null
const maybe = await client.tryLock("doc:1");
await maybe?.unlock();

// cancel a wait
const ac = new AbortController();
setTimeout(() => ac.abort(), 1_000);
await (await client.lock("doc:2", { signal: ac.signal })).unlock();
