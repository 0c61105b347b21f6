// SPDX-License-Identifier: MIT
// The README's examples (examples/*.ts, type-checked against the shipped .d.ts and compiled
// to dist-examples/) run against a real semad and exit 0.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { http, startSemad, type Semad } from "./semad.js";

const run = promisify(execFile);
const dir = resolve(dirname(fileURLToPath(import.meta.url)), "../../dist-examples");
let semad: Semad;

before(async () => {
  semad = await startSemad();
});
after(async () => {
  await semad.stop();
});

const examples = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".js")) : [];

test("the examples were built (npm run typecheck:examples)", () => {
  assert.ok(examples.length >= 7, `examples in ${dir}: ${examples.join(", ")}`);
});

test("the README shows each example file as it is", () => {
  const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  const shown = [...readme.matchAll(/\(\[examples\/(\w+\.ts)\]\(examples\/\w+\.ts\)\)\n\n```ts\n([\s\S]*?)```/g)];
  assert.ok(shown.length >= 7, `${shown.length} examples shown`);
  for (const [, file, code] of shown) {
    const source = readFileSync(join(pkg, "examples", file!), "utf8").replace(/^\/\/[^\n]*\n/, "");
    assert.equal(code, source, `README block for examples/${file}`);
  }
});

for (const file of examples) {
  test(`examples/${file.replace(/\.js$/, ".ts")} runs`, async () => {
    const { stdout } = await run(process.execPath, [join(dir, file)], {
      env: { ...process.env, SEMA_SERVER: semad.url },
      timeout: 15_000,
    });
    assert.ok(stdout.length > 0);
    // an example leaves nothing on the user's server
    const left = (await http(semad.url, "GET", "/v1/semaphores")).body as { semaphores: Array<{ name: string }> };
    assert.deepEqual(left.semaphores.map((x) => x.name), []);
  });
}

test("npm pack makes a tarball that installs and runs", async () => {
  const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
  const tmp = mkdtempSync(join(tmpdir(), "sema-js-pack-"));
  try {
    // dist/ is built already (test/run.sh): skip prepack's rebuild.
    await run("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", tmp], { cwd: pkg });
    const tarball = readdirSync(tmp).find((f) => f.endsWith(".tgz"));
    assert.ok(tarball, "a .tgz");
    const app = join(tmp, "app");
    await run("mkdir", [app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module" }));
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--silent", join(tmp, tarball)], { cwd: app });
    writeFileSync(
      join(app, "main.js"),
      `import { createClient } from "@sema/client";
const sem = await createClient().semaphore("packed", { capacity: 1 });
const p = await sem.acquire();
console.log(p.weight);
await p.release();
`,
    );
    const { stdout } = await run(process.execPath, ["main.js"], { cwd: app, env: { ...process.env, SEMA_SERVER: semad.url } });
    assert.equal(stdout.trim(), "1");
    assert.ok(existsSync(join(app, "node_modules/@sema/client/dist/index.d.ts")));
    assert.ok(existsSync(join(app, "node_modules/@sema/client/README.md")));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
