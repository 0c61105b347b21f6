// SPDX-License-Identifier: MIT
// Test support: a real semad on an ephemeral port, and a few raw HTTP helpers.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// Compiled to dist-test/test/: clients/js is two levels up.
export const SEMAD = process.env.SEMAD || resolve(here, "../../../../build/bin/semad");

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
  args?: string[];
}

/**
 * Starts semad; resolves with { url, port, proc, stop(), kill() } once it prints its address.
 * opts.port reuses a port (a restart), opts.data a data directory (strict durability).
 */
export function startSemad(opts: StartOptions = {}): Promise<Semad> {
  const args = ["--listen", `127.0.0.1:${opts.port ?? 0}`];
  if (opts.data) args.push("--data", opts.data, "--durability", "strict");
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
      const m = /listening on (http:\/\/[^\s]+)/.exec(log);
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
