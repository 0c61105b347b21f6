// SPDX-License-Identifier: MIT
// https:// semad (--tls-cert, --tls-client-ca) on the node transport (node:https): the `ca`
// option and SEMA_CACERT, an untrusted server refused, client certificates. The files are
// made by the `openssl` command; without it the tests are skipped.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createClient, SemaNetworkError } from "../src/index.js";
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
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    haveOpenssl = false;
  }
});
after(() => dir.remove());

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

    const untrusted = createClient({ url: semad.url, transport: "node", retryMs: 0 });
    await assert.rejects((await untrusted.semaphore("tls")).state(), (e: unknown) =>
      e instanceof SemaNetworkError && /certificate/i.test((e as Error).message));
    untrusted.close();
    assert.throws(() => createClient({ url: semad.url, transport: "fetch", ca: pem("ca.pem") }), TypeError);
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
    const anonymous = createClient({ url: semad.url, transport: "node", ca: pem("ca.pem"), retryMs: 0 });
    await assert.rejects((await anonymous.semaphore("cc")).state(), SemaNetworkError);
    anonymous.close();
  } finally {
    await semad.stop();
  }
});
