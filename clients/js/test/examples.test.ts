// SPDX-License-Identifier: MIT
// The README's examples (examples/*.ts, type-checked against the shipped .d.ts and compiled
// to dist-examples/) run against a real semad and exit 0.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startSemad, type Semad } from "./semad.js";

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

for (const file of examples) {
  test(`examples/${file.replace(/\.js$/, ".ts")} runs`, async () => {
    const { stdout } = await run(process.execPath, [join(dir, file)], {
      env: { ...process.env, SEMA_SERVER: semad.url },
      timeout: 15_000,
    });
    assert.ok(stdout.length > 0);
  });
}
