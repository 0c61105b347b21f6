// SPDX-License-Identifier: MIT
// Test support: a real semad on an ephemeral port (in memory, or on a real redis-server of
// the tests' own), a TCP proxy in front of it that can lose replies and cut connections, and
// a few raw HTTP helpers.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createServer, connect, type Socket } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// Compiled to dist-test/test/: clients/js is two levels up.
export const SEMAD = process.env.SEMAD || resolve(here, "../../../../build/bin/semad");

/** The transport the suite runs on (test/run.sh runs it once per transport). */
export const TRANSPORT = process.env.SEMA_TRANSPORT || "node";

export interface Semad {
  url: string;
  port: number;
  proc: ChildProcess;
  log(): string;
  stop(): Promise<void>;
  kill(): Promise<void>;
}

export interface StartOptions {
  port?: number;
  data?: string;
  /** semad's --engine: a redis:// URL (see startRedis). */
  engine?: string;
  args?: string[];
}

/**
 * Starts semad; resolves with { url, port, proc, stop(), kill() } once it prints its address.
 * opts.port reuses a port (a restart), opts.data a data directory (strict durability),
 * opts.engine a Redis to keep the state in.
 */
export function startSemad(opts: StartOptions = {}): Promise<Semad> {
  const args = ["--listen", `127.0.0.1:${opts.port ?? 0}`];
  if (opts.engine) args.push("--engine", opts.engine, "--durability", "relaxed");
  else if (opts.data) args.push("--data", opts.data, "--durability", "strict");
  else args.push("--durability", "none");
  args.push(...(opts.args ?? []));
  const proc = spawn(SEMAD, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  return new Promise<Semad>((resolveStart, reject) => {
    const timer = setTimeout(() => reject(new Error(`semad did not start:\n${log}`)), 10000);
    proc.on("error", (e: Error) => {
      clearTimeout(timer);
      reject(e);
    });
    proc.on("exit", (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`semad exited (${code}):\n${log}`));
    });
    proc.stderr!.setEncoding("utf8");
    proc.stderr!.on("data", (chunk: string) => {
      log += chunk;
      const m = /listening on (https?:\/\/[^\s]+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        const url = m[1];
        const exited = new Promise<void>((r) => proc.once("exit", () => r()));
        resolveStart({
          url,
          port: Number(new URL(url).port),
          proc,
          log: () => log,
          async stop() {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
            await exited;
          },
          async kill() {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
            await exited;
          },
        });
      }
    });
  });
}

export function tempDir() {
  const d = mkdtempSync(join(tmpdir(), "sema-js-"));
  return { path: d, remove: () => rmSync(d, { recursive: true, force: true }) };
}

/** Raw HTTP against semad: { status, body } (body parsed as JSON when it is). */
export async function http(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url + path, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, body: parsed };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One series of semad's /metrics (its name and labels as printed); 0 when semad prints none. */
export async function metric(url: string, series: string): Promise<number> {
  const text = (await http(url, "GET", "/metrics")).body as string;
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

/** Why the tests of semad on Redis cannot run here, or undefined when they can. */
export function redisMissing(): string | undefined {
  if (spawnSync("redis-server", ["--version"]).error) return "redis-server is not installed (scripts/deps.sh test)";
  const help = spawnSync(SEMAD, ["--help"], { encoding: "utf8" });
  if (!`${help.stdout}${help.stderr}`.includes("redis://")) return "this semad has no Redis back end";
  return undefined;
}

/** A redis-server of the test's own; every write is in its append-only file before the reply. */
export interface Redis {
  port: number;
  url: string;
  /** kill -9: it answers nothing more. */
  kill(): Promise<void>;
  /** Starts it again on the same port and directory: it loads back what it had. */
  start(): Promise<void>;
  close(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolvePort(port));
    });
  });
}

/** Whether Redis on `port` answers PING (not while it loads its file back). */
function pong(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = connect(port, "127.0.0.1");
    const finish = (ok: boolean) => {
      s.destroy();
      done(ok);
    };
    s.setTimeout(1000, () => finish(false));
    s.on("error", () => finish(false));
    s.on("connect", () => s.write("PING\r\n"));
    s.on("data", (b: Buffer) => finish(b.toString("latin1").startsWith("+PONG")));
  });
}

/** Starts redis-server on a free loopback port, in a temporary directory. */
export async function startRedis(): Promise<Redis> {
  const dir = tempDir();
  const port = await freePort();
  let proc: ChildProcess | undefined;
  const kill = async () => {
    const p = proc;
    proc = undefined;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once("exit", () => r()));
    p.kill("SIGKILL");
    await exited;
  };
  const start = async () => {
    const args = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir.path, "--save", ""];
    proc = spawn("redis-server", [...args, "--appendonly", "yes", "--appendfsync", "always"], { stdio: "ignore" });
    await until(() => pong(port), 10000, `redis-server on ${port}`);
  };
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    kill,
    start,
    async close() {
      await kill();
      dir.remove();
    },
  };
}

/** Polls `fn` until it returns a truthy value (or throws after `ms`). */
export async function until<T>(fn: () => T | Promise<T>, ms = 3000, what = "condition"): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A request as the proxy saw it go by. */
export interface ProxiedRequest {
  method: string;
  path: string;
  /** Lower-case names. */
  headers: Record<string, string>;
  /** The proxy connection it came on (1, 2, ...). */
  conn: number;
}

/** What a reply hook can do with a chunk of semad's reply. */
export interface ReplyControl {
  /** Pass bytes on to the client. */
  forward(bytes: Buffer): void;
  /** Close the client's connection (after what was forwarded) and semad's. */
  cut(): void;
}

export interface Proxy {
  url: string;
  /** Connections accepted from clients so far. */
  connections: number;
  /** Every request seen, in order. */
  requests: ProxiedRequest[];
  /**
   * Called with each chunk semad sends, and the request it answers (the last one on that
   * connection). Default: forward it. Set it to lose replies or cut streams.
   */
  onReply: ((req: ProxiedRequest, chunk: Buffer, ctl: ReplyControl) => void) | undefined;
  close(): Promise<void>;
}

/** A TCP proxy in front of `target` (semad's URL): the transport under test goes through it unchanged. */
export function startProxy(target: string): Promise<Proxy> {
  const t = new URL(target);
  const sockets = new Set<Socket>();
  const proxy: Proxy = {
    url: "",
    connections: 0,
    requests: [],
    onReply: undefined,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
  const server = createServer((client) => {
    const conn = ++proxy.connections;
    const upstream = connect(Number(t.port), t.hostname);
    sockets.add(client).add(upstream);
    let last: ProxiedRequest | undefined;
    const ctl: ReplyControl = {
      forward: (b) => void (client.writable && client.write(b)),
      cut: () => {
        client.end();
        upstream.destroy();
      },
    };
    client.on("data", (b: Buffer) => {
      const m = /^([A-Z]+) (\S+) HTTP\/1\.1\r\n([\s\S]*?)\r\n\r\n/.exec(b.toString("latin1"));
      if (m) {
        const headers: Record<string, string> = {};
        for (const line of m[3]!.split("\r\n")) {
          const i = line.indexOf(":");
          if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
        }
        last = { method: m[1]!, path: m[2]!, headers, conn };
        proxy.requests.push(last);
      }
      upstream.write(b);
    });
    upstream.on("data", (b: Buffer) => {
      if (proxy.onReply && last) proxy.onReply(last, b, ctl);
      else ctl.forward(b);
    });
    // A client that goes away takes its semad connection with it (semad sees the disconnect);
    // semad's end of a connection reaches the client after what it sent.
    const gone = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", gone).on("error", gone);
    upstream.on("close", () => client.end()).on("error", () => client.end());
  });
  return new Promise((r) =>
    server.listen(0, "127.0.0.1", () => {
      const a = server.address() as { port: number };
      proxy.url = `http://127.0.0.1:${a.port}`;
      r(proxy);
    }),
  );
}
