// The newWeighted/acquire(n)/release(n)/wait() style, and mapLimit.
import { createClient } from "@sema/client";

const client = createClient();
const sem = await client.semaphore("db-queries", { capacity: 10 });

const employees = [{ id: 1 }, { id: 2 }, { id: 3 }];
const insert = async (e: { id: number }) => void e;

const errs: unknown[] = [];
for (const emp of employees) {
  await sem.acquire(1);
  if (errs.length > 0) {
    void sem.release(1);
    break;
  }
  insert(emp)
    .catch((e) => errs.push(e))
    .finally(() => sem.release(1));
}
await sem.wait(); // POST wait-idle: everything queued before it is done, all units back
if (errs.length > 0) throw errs[0];

// mapLimit(items, limit, fn): at most 2 calls at once across every process sharing "thumbs"
const sizes = await client.mapLimit(["a.png", "b.png", "c.png"], 2, async (file, i) => `${i}:${file}`, { name: "thumbs" });
console.log(sizes); // input order

// or with the capacity of a semaphore you have
console.log(await sem.mapLimit([1, 2, 3], async (n) => n * 2));

// leave nothing behind (deleting takes the admin right)
await sem.delete();
await (await client.semaphore("thumbs")).delete();
