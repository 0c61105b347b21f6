#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// pairs.mjs - acquire+release pairs/s and latency from one Node process with N concurrent
// holders: @sema/client (sem.acquire() + permit.release()) against raw requests on the same
// transport doing the same two requests (POST .../acquire with the same body and an
// Idempotency-Key, DELETE /v1/leases/{id}): with --transport node (the client's default),
// node:http through a keep-alive Agent; with --transport fetch, the platform's fetch.
// Rounds alternate raw, client, raw, client, ... against one semad; the figures are the
// medians over rounds, and the ratio raw/client is the client's overhead by rate. CPU per
// pair is this process's user+system time (semad runs beside it).
//
// Usage: node bench/js/pairs.mjs [--semad build/bin/semad] [--holders 50] [--seconds 3]
//                                [--rounds 3] [--transport node|fetch]
//                                [--url http://...]   (url: use a running semad)
// Needs clients/js built (cd clients/js && npm ci && npm run build).
import { spawn } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";
import http from "node:http";

const here = dirname(fileURLToPath(import.meta.url));
const { createClient } = await import(resolve(here, "../../clients/js/dist/index.js"));

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const holders = Number(args.holders ?? 50);
const seconds = Number(args.seconds ?? 3);
const rounds = Number(args.rounds ?? 3);
const semadPath = args.semad ?? resolve(here, "../../build/bin/semad");
const transport = args.transport ?? "node";
if (transport !== "node" && transport !== "fetch") throw new Error("--transport is node or fetch");

async function startSemad() {
  const proc = spawn(semadPath, ["--listen", "127.0.0.1:0", "--durability", "none"], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const url = await new Promise((res, rej) => {
    proc.on("exit", (c) => rej(new Error(`semad exited ${c}: ${log}`)));
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (d) => {
      log += d;
      const m = /listening on (http:\/\/\S+)/.exec(log);
      if (m) res(m[1]);
    });
  });
  return { url, stop: () => proc.kill("SIGTERM") };
}

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function round(label, pair) {
  const lat = [];
  let pairs = 0;
  const end = performance.now() + seconds * 1000;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: holders }, async () => {
      while (performance.now() < end) {
        const s = performance.now();
        await pair();
        lat.push(performance.now() - s);
        pairs++;
      }
    }),
  );
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  return {
    label,
    rate: pairs / wall,
    p50: pct(lat, 50),
    p99: pct(lat, 99),
    cpuUsPerPair: (cpu.user + cpu.system) / pairs,
  };
}

const server = args.url ? { url: args.url, stop() {} } : await startSemad();
const name = `bench-js-${process.pid}`;
const client = createClient({ url: server.url, transport });
const sem = await client.createSemaphore(name, holders);
const acquireUrl = `${server.url}/v1/semaphores/${name}/acquire`;
const body = JSON.stringify({ weight: 1, ttl_ms: 60000 });

const rawFetch = async () => {
  const r = await fetch(acquireUrl, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": randomUUID() },
    body,
  });
  if (r.status !== 200) throw new Error(`acquire ${r.status}`);
  const { lease } = await r.json();
  const d = await fetch(`${server.url}/v1/leases/${lease}`, { method: "DELETE" });
  await d.text();
  if (d.status !== 204) throw new Error(`release ${d.status}`);
};
// node:http as plainly as it goes: one keep-alive Agent, the reply read whole.
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const { hostname, port } = new URL(server.url);
const request = (method, path, headers, payload) =>
  new Promise((resolveReq, reject) => {
    const req = http.request({ host: hostname, port, path, method, headers, agent }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => resolveReq({ status: res.statusCode, text }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(payload);
  });
const acquirePath = `/v1/semaphores/${name}/acquire`;
const rawNode = async () => {
  const r = await request(
    "POST",
    acquirePath,
    { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), "idempotency-key": randomUUID() },
    body,
  );
  if (r.status !== 200) throw new Error(`acquire ${r.status}`);
  const { lease } = JSON.parse(r.text);
  const d = await request("DELETE", `/v1/leases/${lease}`, {});
  if (d.status !== 204) throw new Error(`release ${d.status}`);
};
const raw = transport === "node" ? rawNode : rawFetch;
const viaClient = async () => {
  const p = await sem.acquire({ ttlMs: 60000 });
  await p.release();
};

// Warm up both paths (connections, JIT).
await round("warm-raw", raw);
await round("warm-client", viaClient);

const results = { raw: [], client: [] };
for (let i = 0; i < rounds; i++) {
  results.raw.push(await round("raw", raw));
  results.client.push(await round("client", viaClient));
}
const st = await sem.state();
if (st.held !== 0 || st.waiting !== 0) throw new Error(`left behind: held ${st.held}, waiting ${st.waiting}`);
await sem.delete();
server.stop();
agent.destroy();

const med = (xs, k) => xs.map((x) => x[k]).sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (r) =>
  `${Math.round(med(r, "rate")).toLocaleString("en")} pairs/s, p50 ${med(r, "p50").toFixed(2)} ms, p99 ${med(r, "p99").toFixed(2)} ms, ${med(r, "cpuUsPerPair").toFixed(1)} µs CPU/pair`;
console.log(`node ${process.version}, ${holders} holders, ${rounds} rounds of ${seconds} s each, semad --durability none, transport ${transport}`);
console.log(`${transport === "node" ? "raw node:http " : "raw fetch     "} : ${fmt(results.raw)}`);
console.log(`@sema/client   : ${fmt(results.client)}`);
for (let i = 0; i < rounds; i++) {
  console.log(
    `  round ${i + 1}: raw ${Math.round(results.raw[i].rate)} client ${Math.round(results.client[i].rate)} pairs/s`,
  );
}
const ratio = med(results.raw, "rate") / med(results.client, "rate");
const cpuRatio = med(results.client, "cpuUsPerPair") / med(results.raw, "cpuUsPerPair");
console.log(`overhead: ${ratio.toFixed(3)}x by rate (raw/client), ${cpuRatio.toFixed(3)}x by client-process CPU per pair (goal <= 1.2)`);
