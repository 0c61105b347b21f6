// SPDX-License-Identifier: MIT
// Semaphores and permits against a real semad: the TC39-style API, the seed-000 style
// (acquire(n)/release(n)/wait), FIFO across clients, cancellation, idempotent retries and
// typed errors.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  createClient,
  Permit,
  SemaClient,
  SemaConflictError,
  SemaDeletedError,
  SemaError,
  SemaInvalidRequestError,
  SemaNotFoundError,
  SemaOverflowError,
  SemaTimeoutError,
  SemaUnavailableError,
} from "../src/index.js";
import { startSemad, startProxy, http, until, sleep, type Semad } from "./semad.js";

let semad: Semad;
let client: SemaClient;

before(async () => {
  semad = await startSemad();
  client = createClient({ url: semad.url });
});
after(async () => {
  await client.close();
  await semad.stop();
});

const state = async (name: string) => (await http(semad.url, "GET", `/v1/semaphores/${encodeURIComponent(name)}`)).body;

test("createClient defaults to SEMA_SERVER, then 127.0.0.1:7070; host:port is http://; another scheme is a TypeError", () => {
  const saved = process.env.SEMA_SERVER;
  try {
    delete process.env.SEMA_SERVER;
    assert.equal(createClient().url, "http://127.0.0.1:7070");
    process.env.SEMA_SERVER = semad.url + "/";
    assert.equal(createClient().url, semad.url);
    // host:port without a scheme, as people type it (and as the sema command takes it)
    process.env.SEMA_SERVER = "127.0.0.1:7070";
    assert.equal(createClient().url, "http://127.0.0.1:7070");
    assert.equal(createClient({ url: "localhost:7070", transport: "fetch" }).url, "http://localhost:7070");
    process.env.SEMA_SERVER = "ftp://127.0.0.1:7070";
    assert.throws(() => createClient(), {
      name: "TypeError",
      message: 'createClient: bad server SEMA_SERVER "ftp://127.0.0.1:7070" (an http:// or https:// URL is needed, e.g. http://127.0.0.1:7070)',
    });
  } finally {
    if (saved === undefined) delete process.env.SEMA_SERVER;
    else process.env.SEMA_SERVER = saved;
  }
});

test("an empty or missing name is a TypeError before any request (not a 404 route, not \"undefined\")", async () => {
  const missing = (process.env as Record<string, string>)["SEMA_TEST_NO_SUCH_VARIABLE"]!;
  await assert.rejects(client.semaphore("", { capacity: 1 }), {
    name: "TypeError",
    message: 'semaphore(name): name must be a non-empty string, not ""',
  });
  await assert.rejects(client.semaphore(missing, { capacity: 1 }), {
    name: "TypeError",
    message: "semaphore(name): name must be a non-empty string, not undefined",
  });
  await assert.rejects(client.lock(""), { name: "TypeError", message: /^lock\(key\): key must be/ });
  await assert.rejects(client.lockState(""), { name: "TypeError", message: /^lockState\(key\): key must be/ });
  assert.throws(() => client.watch(""), { name: "TypeError", message: /^watch\(name\): name must be/ });
  assert.equal((await http(semad.url, "GET", "/v1/semaphores/undefined")).status, 404);
});

test("semaphore() sends nothing; with a capacity, the first use creates a missing one", async () => {
  const sem = await client.semaphore("create/1", { capacity: 3 });
  assert.equal(sem.capacity, 3);
  assert.equal(sem.name, "create/1");
  assert.equal((await http(semad.url, "GET", "/v1/semaphores/create%2F1")).status, 404, "nothing sent yet");
  await (await sem.acquire()).release();
  assert.equal((await state("create/1")).capacity, 3);
  // an existing one is used as it is, whatever capacity the handle was given
  const other = await client.semaphore("create/1", { capacity: 4 });
  await (await other.acquire(3)).release();
  assert.equal((await state("create/1")).capacity, 3);
  const found = await client.semaphore("create/1");
  assert.equal(found.capacity, undefined);
  await (await found.acquire()).release();
  // wait() and takeTicket() create a missing one as acquire() does
  const w = await client.semaphore("create/wait", { capacity: 2 });
  await w.wait();
  assert.equal((await state("create/wait")).capacity, 2);
  const t = await (await client.semaphore("create/ticket", { capacity: 1 })).takeTicket();
  assert.equal(t.status, "granted");
  await client.leaveTicket(t.id);
  assert.equal((await state("create/ticket")).capacity, 1);
  // without a capacity a missing one is SemaNotFoundError at its first use, and stays missing
  const missing = await client.semaphore("create/missing");
  await assert.rejects(missing.acquire(), SemaNotFoundError);
  await assert.rejects(missing.wait(), SemaNotFoundError);
  await assert.rejects(missing.takeTicket(), SemaNotFoundError);
  assert.equal((await http(semad.url, "GET", "/v1/semaphores/create%2Fmissing")).status, 404);
});

test("createSemaphore() creates now, and checks the capacity of an existing one", async () => {
  const sem = await client.createSemaphore("create/2", 2);
  assert.equal(sem.capacity, 2);
  assert.equal((await state("create/2")).capacity, 2);
  assert.equal((await client.createSemaphore("create/2", 2)).capacity, 2);
  await assert.rejects(client.createSemaphore("create/2", 4), (e: unknown) => {
    assert.ok(e instanceof SemaConflictError);
    assert.equal(e.code, "conflict");
    assert.equal(e.status, 409);
    return true;
  });
  await assert.rejects(client.createSemaphore("", 1), { name: "TypeError", message: /^createSemaphore\(name\): name must be/ });
});

test("acquire gives a permit with lease, weight, fence, expiresAt; release is idempotent", async () => {
  const sem = await client.semaphore("permit", { capacity: 3 });
  const before = Date.now();
  const a = await sem.acquire({ weight: 2, ttlMs: 10_000 });
  assert.ok(a instanceof Permit);
  assert.equal(typeof a.lease, "string");
  assert.equal(a.weight, 2);
  assert.equal(a.name, "permit");
  assert.ok(a.fence > 0);
  assert.ok(a.expiresAt >= before + 9_000);
  assert.equal(a.signal.aborted, false);
  const b = await sem.acquire();
  assert.ok(b.fence > a.fence, "fences increase");
  assert.equal(await sem.available(), 0);
  const st = await state("permit");
  assert.deepEqual(st.holders.map((h: { lease: string }) => h.lease).sort(), [a.lease, b.lease].sort());
  await a.release();
  await a.release();
  void a.release();
  assert.equal(a.released, true);
  assert.equal(await sem.available(), 2);
  await b.release();
  assert.equal(await sem.available(), 3);
  assert.equal((await state("permit")).held, 0);
});

test("tryAcquire: a permit when free, null when not; never queues", async () => {
  const sem = await client.semaphore("try", { capacity: 2 });
  const p = await sem.tryAcquire(2);
  assert.ok(p);
  assert.equal(await sem.tryAcquire(), null);
  assert.equal((await state("try")).waiting, 0);
  await p.release();
  const q = await sem.tryAcquire({ weight: 1 });
  assert.ok(q);
  await q.release();
});

test("with() runs holding a unit and releases on return and on throw; wrap() limits a function", async () => {
  const sem = await client.semaphore("with", { capacity: 1 });
  const v = await sem.with(async (permit) => {
    assert.equal(await sem.available(), 0);
    assert.equal(permit.weight, 1);
    return 42;
  });
  assert.equal(v, 42);
  assert.equal(await sem.available(), 1);
  await assert.rejects(
    sem.with({ weight: 1 }, async () => {
      throw new Error("boom");
    }),
    /boom/,
  );
  assert.equal(await sem.available(), 1);

  let running = 0;
  let most = 0;
  const work = sem.wrap(async (x: number) => {
    running++;
    most = Math.max(most, running);
    await sleep(20);
    running--;
    return x * 2;
  });
  assert.deepEqual(await Promise.all([1, 2, 3, 4].map((x) => work(x))), [2, 4, 6, 8]);
  assert.equal(most, 1);
  assert.equal(await sem.available(), 1);
});

test("await using releases the permit when the block throws", async () => {
  const sem = await client.semaphore("using", { capacity: 2 });
  let lease = "";
  await assert.rejects(async () => {
    await using permit = await sem.acquire({ weight: 2 });
    lease = permit.lease;
    assert.equal(await sem.available(), 0);
    throw new Error("inside");
  }, /inside/);
  assert.equal(await sem.available(), 2);
  assert.equal((await http(semad.url, "GET", `/v1/leases/${lease}`)).body.code, "lease_released");
  {
    await using p = await sem.acquire();
    assert.equal(await sem.available(), 1);
    void p;
  }
  assert.equal(await sem.available(), 2);
});

test("seed 000 style: acquire(n), release(n), wait()", async () => {
  const sem = await client.semaphore("seed0", { capacity: 10 });
  const done: number[] = [];
  const tasks: Promise<void>[] = [];
  for (const id of [1, 2, 3, 4]) {
    await sem.acquire(4);
    tasks.push(
      sleep(30 * id)
        .then(() => void done.push(id))
        .finally(() => sem.release(4)),
    );
  }
  await sem.wait();
  assert.deepEqual(done.sort(), [1, 2, 3, 4]);
  assert.equal(await sem.available(), 10);
  assert.throws(() => sem.release(1), SemaOverflowError);
  await Promise.all(tasks);

  // wait() queues behind earlier waiters and times out like an acquire.
  const p = await sem.acquire(1);
  await assert.rejects(sem.wait({ timeoutMs: 50 }), SemaTimeoutError);
  await sem.release(1);
  void p;
  await sem.wait({ timeoutMs: 1000 });
});

test("a negative timeoutMs waits as long as it takes, as in the C API (not a try, not a 400)", async () => {
  const sem = await client.semaphore("negative-timeout", { capacity: 1 });
  const holder = await sem.acquire();
  let settled = "";
  const waiting = sem.acquire({ timeoutMs: -1 }).then(
    (p) => ((settled = "granted"), p),
    (e: unknown) => ((settled = `rejected: ${(e as Error).message}`), Promise.reject(e)),
  );
  const idle = sem.wait({ timeoutMs: -1 }).then(
    () => undefined,
    (e: unknown) => ((settled ||= `wait rejected: ${(e as Error).message}`), Promise.reject(e)),
  );
  await until(async () => (await state("negative-timeout")).waiting === 2 || settled !== "", 3000, "both parked");
  assert.equal(settled, "");
  await holder.release();
  await (await waiting).release();
  await idle;
});

test("an unknown option is a TypeError naming it, with the likely one; nothing is sent", async () => {
  // Plain JavaScript (or an object built elsewhere) escapes TypeScript's check: `timeout`
  // for `timeoutMs` must not become "wait forever".
  const loose = (o: Record<string, unknown>) => o as never;
  await client.createSemaphore("opts", 1);
  const sem = await client.semaphore("opts");
  const cases: Array<[() => unknown, RegExp]> = [
    [() => sem.acquire(loose({ timeout: 100 })), /^acquire: unknown option "timeout" \(did you mean "timeoutMs"\?\); the options are: weight, signal, timeoutMs, ttlMs, owner, tenant$/],
    [() => sem.tryAcquire(loose({ wieght: 1 })), /^acquire: unknown option "wieght" \(did you mean "weight"\?\)/],
    [() => sem.with(loose({ ttl_ms: 5000 }), () => 1), /^acquire: unknown option "ttl_ms" \(did you mean "ttlMs"\?\)/],
    [() => sem.wait(loose({ timeout: 0 })), /^wait: unknown option "timeout" \(did you mean "timeoutMs"\?\)/],
    [() => sem.takeTicket(loose({ keepalive: 500 })), /^takeTicket: unknown option "keepalive" \(did you mean "keepaliveMs"\?\)/],
    [() => client.semaphore("opts", loose({ capacity: 1, cap: 1 })), /^semaphore: unknown option "cap"; the options are: capacity, tenantMax, ratePerS, rateBurst$/],
    [() => client.lock("opts-k", loose({ mode: "shared", shared: true })), /^lock: unknown option "shared"/],
    [() => client.lockShared("opts-k", loose({ timeout: 5 })), /^lock: unknown option "timeout" \(did you mean "timeoutMs"\?\)/],
    [() => client.ticket("t", loose({ wait: 5 })), /^ticket: unknown option "wait" \(did you mean "waitMs"\?\)/],
    [() => client.watch("opts", loose({ lastEventID: "1" })), /^watch: unknown option "lastEventID" \(did you mean "lastEventId"\?\)/],
    [() => client.watchTicket("t", loose({ since: "1" })), /^watchTicket: unknown option "since"; the options are: signal, lastEventId$/],
    [() => client.mapLimit([1], 1, async (x) => x, loose({ name: "opts-m", limit: 1 })), /^mapLimit: unknown option "limit"/],
    [() => createClient(loose({ url: semad.url, timeout: 5 })), /^createClient: unknown option "timeout"; the options are: url, owner, token/],
    [() => createClient(loose({ url: semad.url, retry: 5 })), /^createClient: unknown option "retry" \(did you mean "retryMs"\?\)/],
  ];
  for (const [call, message] of cases) {
    let err: unknown;
    try {
      await call();
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof TypeError, `${message}: ${String(err)}`);
    assert.match((err as Error).message, message);
  }
  // nothing above reached semad: no lease, no ticket, no lock key, no new semaphore
  const st = await state("opts");
  assert.equal(st.held, 0);
  assert.equal(st.waiting, 0);
  assert.equal((await http(semad.url, "GET", "/v1/locks/opts-k")).status, 404);
  assert.equal((await http(semad.url, "GET", "/v1/semaphores/opts-m")).status, 404);
  // a number still stands for the weight, and every listed option is taken
  const p = await sem.acquire({ weight: 1, timeoutMs: 1000, ttlMs: 5000, owner: "o", signal: undefined });
  await p.release();
  (await sem.acquire(1)).release();
});

test("FIFO order across two client instances", async () => {
  const c1 = createClient({ url: semad.url });
  const c2 = createClient({ url: semad.url });
  const s1 = await c1.semaphore("fifo", { capacity: 1 });
  const s2 = await c2.semaphore("fifo", { capacity: 1 });
  const holder = await s1.acquire();
  const order: string[] = [];
  const queue = async (who: string, sem: typeof s1) => {
    const p = await sem.acquire();
    order.push(who);
    await sleep(5);
    await p.release();
  };
  const all: Promise<void>[] = [];
  const seq: Array<[string, typeof s1]> = [
    ["c1-a", s1],
    ["c2-a", s2],
    ["c1-b", s1],
    ["c2-b", s2],
    ["c2-c", s2],
  ];
  for (const [i, [who, sem]] of seq.entries()) {
    all.push(queue(who, sem));
    await until(async () => (await state("fifo")).waiting === i + 1, 3000, `${who} queued`);
  }
  await holder.release();
  await Promise.all(all);
  assert.deepEqual(order, ["c1-a", "c2-a", "c1-b", "c2-b", "c2-c"]);
});

test("AbortSignal cancels a blocking acquire and semad drops the waiter", async () => {
  const sem = await client.semaphore("abort", { capacity: 1 });
  const holder = await sem.acquire();
  const ac = new AbortController();
  const waiting = sem.acquire({ signal: ac.signal });
  await until(async () => (await state("abort")).waiting === 1, 3000, "the waiter parked");
  ac.abort();
  await assert.rejects(waiting, (e: unknown) => (e as Error).name === "AbortError");
  await until(async () => (await state("abort")).waiting === 0, 3000, "the waiter gone");
  assert.deepEqual((await state("abort")).waiters, []);
  // An already aborted signal never sends.
  await assert.rejects(sem.acquire({ signal: AbortSignal.abort() }), (e: unknown) => (e as Error).name === "AbortError");
  await holder.release();
  await until(async () => (await state("abort")).held === 0, 3000, "nothing held");
});

test("every acquire carries an Idempotency-Key: a retry after a lost reply holds once", async () => {
  const proxy = await startProxy(semad.url);
  let cut = 0;
  proxy.onReply = (req, chunk, ctl) => {
    // The first acquire is granted by semad, then its connection drops before the reply.
    if (req.path.endsWith("/acquire") && cut++ === 0) return ctl.cut();
    ctl.forward(chunk);
  };
  try {
    const c = createClient({ url: proxy.url });
    const sem = await c.createSemaphore("idem", 2);
    const p = await sem.acquire();
    const keys = proxy.requests.filter((r) => r.path.endsWith("/acquire")).map((r) => r.headers["idempotency-key"]);
    assert.equal(keys.length, 2);
    assert.ok(keys[0]!.length > 0);
    assert.equal(keys[0], keys[1], "the retry reuses the key");
    const st = await state("idem");
    assert.equal(st.held, 1, "held once");
    assert.equal(st.holders[0].lease, p.lease);
    await p.release();
    // A second acquire gets a new key.
    const q = await sem.acquire();
    assert.notEqual(proxy.requests.filter((r) => r.path.endsWith("/acquire")).at(-1)!.headers["idempotency-key"], keys[0]);
    await q.release();
    await c.close();
  } finally {
    await proxy.close();
  }
});

test("a grant whose reply was lost to an abort is released, not leaked", async () => {
  const proxy = await startProxy(semad.url);
  const ac = new AbortController();
  proxy.onReply = (req, chunk, ctl) => {
    // The grant is made on semad; the caller gives up before any of the reply arrives.
    if (req.path.endsWith("/acquire") && !ac.signal.aborted) return ac.abort();
    ctl.forward(chunk);
  };
  try {
    const c = createClient({ url: proxy.url });
    const sem = await c.createSemaphore("lost-grant", 1);
    await assert.rejects(sem.acquire({ signal: ac.signal, ttlMs: 60_000 }), (e: unknown) => (e as Error).name === "AbortError");
    await until(async () => (await state("lost-grant")).held === 0, 3000, "the lost grant released");
    await c.close();
  } finally {
    await proxy.close();
  }
});

test("a grant whose headers arrived before an abort is read and released", async () => {
  const proxy = await startProxy(semad.url);
  const ac = new AbortController();
  let held: Buffer[] | undefined;
  proxy.onReply = (req, chunk, ctl) => {
    if (!req.path.endsWith("/acquire") || ac.signal.aborted) return ctl.forward(chunk);
    if (held) return void held.push(chunk);
    // The head now, the abort once it is in, the body after that.
    const end = chunk.indexOf("\r\n\r\n") + 4;
    ctl.forward(chunk.subarray(0, end));
    held = [chunk.subarray(end)];
    setTimeout(() => ac.abort(), 100);
    setTimeout(() => ctl.forward(Buffer.concat(held!)), 200);
  };
  try {
    const c = createClient({ url: proxy.url });
    const sem = await c.createSemaphore("late-abort", 1);
    await assert.rejects(sem.acquire({ signal: ac.signal, ttlMs: 60_000 }), (e: unknown) => (e as Error).name === "AbortError");
    await until(async () => (await state("late-abort")).held === 0, 3000, "the grant released");
    // It was read, not asked for again: one acquire went by.
    assert.equal(proxy.requests.filter((r) => r.path.endsWith("/acquire")).length, 1);
    await c.close();
  } finally {
    await proxy.close();
  }
});

test("typed errors carry the server's code", async () => {
  const sem = await client.semaphore("errors", { capacity: 2 });
  const held = await sem.acquire({ weight: 2, ttlMs: 900 });
  await assert.rejects(sem.acquire({ timeoutMs: 50 }), (e: unknown) => {
    assert.ok(e instanceof SemaTimeoutError);
    assert.ok(e instanceof SemaError);
    assert.equal(e.code, "timeout");
    assert.equal(e.status, 409);
    assert.equal(e.problem?.type, "urn:sema:problem:timeout");
    return true;
  });
  await assert.rejects(sem.acquire({ timeoutMs: 0 }), (e: unknown) => e instanceof SemaUnavailableError && e.code === "unavailable");
  await assert.rejects(sem.acquire({ weight: 3 }), (e: unknown) => e instanceof SemaInvalidRequestError && e.code === "invalid_request");
  const long = await client.semaphore("x".repeat(300), { capacity: 1 });
  await assert.rejects(long.acquire(), (e: unknown) => e instanceof SemaInvalidRequestError && e.code === "name_too_long");
  const waiting = sem.acquire().then(
    () => null,
    (e: unknown) => e,
  );
  await until(async () => (await state("errors")).waiting === 1, 3000, "parked");
  await sem.delete();
  const e = await waiting;
  assert.ok(e instanceof SemaDeletedError && e.code === "deleted" && e.status === 410);
  await until(() => held.lost, 900 / 3 + 500, "the held permit lost");
  assert.equal((held.signal.reason as SemaError).code, "deleted");
  await assert.rejects(sem.state(), SemaNotFoundError);
});

test("resize and state", async () => {
  const sem = await client.semaphore("resize", { capacity: 1 });
  const p = await sem.acquire();
  const waiting = sem.acquire();
  await until(async () => (await sem.state()).waiting === 1, 3000, "parked");
  const st = await sem.resize(2);
  assert.equal(st.capacity, 2);
  const q = await waiting;
  assert.equal((await sem.state()).held, 2);
  await Promise.all([p.release(), q.release()]);
});
