// SPDX-License-Identifier: MIT
// https:// semad (--tls-cert, --tls-client-ca) on the node transport (node:https): the `ca`
// option and SEMA_CACERT, an untrusted server refused, client certificates. The files are
// made by the `openssl` command; without it the tests are skipped.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createClient, SemaNetworkError, SemaTlsError } from "../src/index.js";
import { startSemad, tempDir } from "./semad.js";

let dir: ReturnType<typeof tempDir>;
let haveOpenssl = true;

function openssl(...args: string[]) {
  execFileSync("openssl", args, { cwd: dir.path, stdio: ["ignore", "ignore", "pipe"] });
}

function issue(name: string, ca: string, cn: string, ext: string) {
  writeFileSync(join(dir.path, `${name}.ext`), ext + "\n");
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`,
    "-out", `${name}.csr`, "-subj", `/CN=${cn}`);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.pem`, "-CAkey", `${ca}.key`, "-CAcreateserial",
    "-out", `${name}.pem`, "-days", "2", "-extfile", `${name}.ext`);
}

const file = (name: string) => join(dir.path, name);
const pem = (name: string) => readFileSync(file(name));

before(() => {
  dir = tempDir();
  try {
    for (const ca of ["ca", "clients"])
      openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
        `${ca}.key`, "-out", `${ca}.pem`, "-days", "2", "-subj", `/CN=${ca}`);
    issue("srv", "ca", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1");
    issue("worker", "clients", "worker-1", "extendedKeyUsage=clientAuth");
    writeFileSync(file("worker-both.pem"), Buffer.concat([pem("worker.pem"), pem("worker.key")]));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    haveOpenssl = false;
  }
});
after(() => dir.remove());

/** Runs `fn` with the environment variables `vars` set, then as they were. */
async function withEnv(vars: Record<string, string>, fn: () => Promise<void>) {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

const serverArgs = () => ["--tls-cert", file("srv.pem"), "--tls-key", file("srv.key")];

test("an https:// semad with the `ca` option, SEMA_CACERT, and without either", async (t) => {
  if (!haveOpenssl) return t.skip("no openssl command");
  const semad = await startSemad({ args: serverArgs() });
  try {
    assert.match(semad.url, /^https:\/\//);
    const client = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem") });
    const sem = await client.semaphore("tls", { capacity: 1 });
    const p = await sem.acquire();
    assert.equal((await sem.state()).held, 1);
    await p.release();
    client.close();

    const saved = process.env.SEMA_CACERT;
    process.env.SEMA_CACERT = file("ca.pem");
    try {
      const viaEnv = createClient({ url: semad.url, transport: "node" });
      assert.equal((await (await viaEnv.semaphore("tls")).state()).name, "tls");
      viaEnv.close();
    } finally {
      if (saved === undefined) delete process.env.SEMA_CACERT;
      else process.env.SEMA_CACERT = saved;
    }

    // not trusted: at once (with the default retries), typed, saying what to give
    const untrusted = createClient({ url: semad.url, transport: "node" });
    const t0 = Date.now();
    await assert.rejects((await untrusted.semaphore("tls")).state(), (e: unknown) =>
      e instanceof SemaTlsError && e instanceof SemaNetworkError && e.code === "tls_untrusted" &&
      /not trusted/.test(e.message) && /SEMA_CACERT/.test(e.message) && e.detail === e.message);
    await assert.rejects(untrusted.semaphore("tls").then((s) => s.acquire()), SemaTlsError);
    const events = untrusted.watch("tls")[Symbol.asyncIterator]();
    await assert.rejects(events.next(), SemaTlsError);
    assert.ok(Date.now() - t0 < 2000, `TLS failures are not retried (${Date.now() - t0} ms)`);
    untrusted.close();
    await withEnv({ SEMA_CACERT: file("missing.pem") }, async () => {
      const c = createClient({ url: semad.url, transport: "node" });
      await assert.rejects((await c.semaphore("tls")).state(), (e: unknown) =>
        e instanceof SemaTlsError && e.code === "tls_cacert" && /missing\.pem/.test(e.message));
      c.close();
    });
    assert.throws(() => createClient({ url: semad.url, transport: "fetch", ca: pem("ca.pem") }), TypeError);
  } finally {
    await semad.stop();
  }
});

test("`ca`, `cert` and `key` with an http:// URL are a TypeError; SEMA_CACERT and the others are not", async () => {
  const message = /^createClient: `ca`, `cert` and `key` are for an https:\/\/ URL; url is http:\/\/127\.0\.0\.1:1$/;
  for (const transport of ["node", "fetch"] as const)
    for (const tls of [{ ca: "x" }, { cert: "x" }, { key: "x" }, { ca: "x", cert: "x", key: "x" }]) {
      assert.throws(() => createClient({ url: "http://127.0.0.1:1", transport, ...tls }), { name: "TypeError", message });
      assert.throws(() => createClient({ url: "127.0.0.1:1", transport, ...tls }), { name: "TypeError", message });
    }
  const semad = await startSemad();
  try {
    await withEnv({ SEMA_CACERT: "/nonexistent/ca.pem", SEMA_CERT: "/nonexistent/w.pem", SEMA_CERT_KEY: "/nonexistent/w.key" }, async () => {
      const client = createClient({ url: semad.url });
      await client.createSemaphore("plain", 1);
      assert.equal((await (await client.semaphore("plain")).state()).name, "plain");
      client.close();
    });
  } finally {
    await semad.stop();
  }
});

test("a semad that requires client certificates: `cert` and `key`", async (t) => {
  if (!haveOpenssl) return t.skip("no openssl command");
  const semad = await startSemad({ args: [...serverArgs(), "--tls-client-ca", file("clients.pem")] });
  try {
    const good = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem"), cert: pem("worker.pem"), key: pem("worker.key") });
    const sem = await good.semaphore("cc", { capacity: 2 });
    await (await sem.acquire()).release();
    good.close();
    // SEMA_CERT and SEMA_CERT_KEY, as for sema and the C and Python clients
    await withEnv({ SEMA_CERT: file("worker.pem"), SEMA_CERT_KEY: file("worker.key") }, async () => {
      const viaEnv = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem") });
      await (await (await viaEnv.semaphore("cc")).acquire()).release();
      viaEnv.close();
    });
    await withEnv({ SEMA_CERT: file("worker-both.pem") }, async () => { // the key in the same file
      const viaEnv = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem") });
      assert.equal((await (await viaEnv.semaphore("cc")).state()).held, 0);
      viaEnv.close();
    });
    await withEnv({ SEMA_CERT: file("ca.key") }, async () => {
      const c = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem") });
      await assert.rejects((await c.semaphore("cc")).state(), (e: unknown) =>
        e instanceof SemaTlsError && e.code === "tls_client_certificate");
      c.close();
    });
    // none: at once, saying to give one
    const anonymous = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem") });
    const t0 = Date.now();
    await assert.rejects((await anonymous.semaphore("cc")).state(), (e: unknown) =>
      e instanceof SemaTlsError && e.code === "tls_certificate_required" && /SEMA_CERT/.test(e.message));
    assert.ok(Date.now() - t0 < 2000, `TLS failures are not retried (${Date.now() - t0} ms)`);
    anonymous.close();
    // one signed by another CA: refused
    const stranger = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem"), cert: pem("srv.pem"), key: pem("srv.key") });
    await assert.rejects((await stranger.semaphore("cc")).state(), (e: unknown) =>
      e instanceof SemaTlsError && e.code === "tls_certificate_refused");
    stranger.close();
  } finally {
    await semad.stop();
  }
});
