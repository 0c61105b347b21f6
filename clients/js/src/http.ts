// SPDX-License-Identifier: MIT
// The client's two HTTP transports: node:http with a keep-alive Agent (the default on
// Node.js), and the platform's fetch (elsewhere, or when asked for). Both give the client the
// same three things: a request whose reply is read whole, a streaming GET (Server-Sent
// Events), and cancelling by AbortSignal, which closes the connection so that semad sees the
// disconnect (and drops a parked waiter).

import type * as NodeHttpModule from "node:http";
import type { Duplex } from "node:stream";

export type TransportKind = "node" | "fetch";

export interface HttpRequest {
  method: string;
  /** Path and query, appended to the base URL. */
  path: string;
  headers: Record<string, string>;
  body?: string | undefined;
  /** Aborts the request (the connection is closed); rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
  /** Once the reply's headers are in, read its body even if `signal` aborts. */
  keepReply?: boolean | undefined;
  /** The request may wait on semad (a blocking acquire, wait-idle): it holds its connection while it does. */
  wait?: boolean | undefined;
}

export interface HttpReply {
  status: number;
  text: string;
  /** An error reply's (4xx, 5xx) Retry-After header, if it had one. */
  retryAfter?: string | undefined;
}

export interface HttpStream {
  status: number;
  /** The whole body as text (for a reply that is not a stream). */
  text(): Promise<string>;
  /** The body as it arrives, or null when there is none. */
  body: AsyncIterable<Uint8Array> | null;
}

export interface Http {
  readonly kind: TransportKind;
  /** One request; rejects on no reply (or with the signal's reason when it aborts). */
  request(r: HttpRequest): Promise<HttpReply>;
  /** A GET whose body is read as it arrives; `signal` cancels it until the end. */
  stream(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<HttpStream>;
  /** Closes the idle keep-alive connections. */
  close(): void;
}

// ---- fetch ----

async function* readerChunks(body: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

export class FetchHttp implements Http {
  readonly kind = "fetch";
  readonly #url: string;
  readonly #fetch: typeof fetch;

  constructor(url: string, f: typeof fetch) {
    this.#url = url;
    this.#fetch = f;
  }

  async request(r: HttpRequest): Promise<HttpReply> {
    const outer = r.signal;
    // The fetch gets its own controller: the caller's signal aborts it until the reply's
    // headers are in (or to the end, without keepReply).
    const ac = outer ? new AbortController() : undefined;
    const onAbort = () => ac!.abort(outer!.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    try {
      const res = await this.#fetch(this.#url + r.path, {
        method: r.method,
        headers: r.headers,
        body: r.body,
        signal: ac?.signal,
        redirect: "manual",
      });
      if (r.keepReply) outer?.removeEventListener("abort", onAbort);
      const retryAfter = res.status >= 400 ? (res.headers.get("retry-after") ?? undefined) : undefined;
      return { status: res.status, text: await res.text(), retryAfter };
    } finally {
      outer?.removeEventListener("abort", onAbort);
    }
  }

  async stream(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<HttpStream> {
    const res = await this.#fetch(this.#url + path, { headers, signal });
    return { status: res.status, text: () => res.text(), body: res.body ? readerChunks(res.body) : null };
  }

  close(): void {}
}

// ---- node:http ----

/** node:https's options for the server's CA and a client certificate (PEM). */
export interface TlsOptions {
  ca?: string | Uint8Array | Array<string | Uint8Array> | undefined;
  cert?: string | Uint8Array | undefined;
  key?: string | Uint8Array | undefined;
}

/** PEM files standing in for TlsOptions not given (from SEMA_CACERT, SEMA_CERT, SEMA_CERT_KEY). */
export interface TlsFiles {
  ca?: string | undefined;
  cert?: string | undefined;
  /** The key of `cert`; none: in `cert`'s file. */
  key?: string | undefined;
}

/** An Error that says which TLS setting is unusable (`semaTls`: the SemaTlsError's code). */
function tlsSettingError(code: string, message: string, cause: unknown): Error {
  return Object.assign(new Error(message, { cause }), { semaTls: code });
}

/**
 * node:https's Agent options: `tls`, the files for what it leaves out, each checked here
 * so that an unusable CA or client certificate says so (and is not taken for an
 * unreachable semad).
 */
async function tlsAgentOptions(tls: TlsOptions, files: TlsFiles): Promise<Record<string, unknown>> {
  const { readFile } = await import("node:fs/promises");
  const { createSecureContext } = await import("node:tls");
  const opts: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(tls)) if (v !== undefined) opts[k] = v;
  const read = async (file: string, code: string, what: string) => {
    try {
      return await readFile(file);
    } catch (e) {
      throw tlsSettingError(code, `the ${what} ${file} cannot be used: ${(e as Error).message}`, e);
    }
  };
  if (opts["ca"] === undefined && files.ca) opts["ca"] = await read(files.ca, "tls_cacert", "CA file");
  if (opts["cert"] === undefined && files.cert) {
    opts["cert"] = await read(files.cert, "tls_client_certificate", "client certificate");
    if (opts["key"] === undefined)
      opts["key"] = files.key ? await read(files.key, "tls_client_certificate", "client certificate key") : opts["cert"];
  }
  const check = (code: string, what: string, o: Record<string, unknown>) => {
    try {
      createSecureContext(o);
    } catch (e) {
      throw tlsSettingError(code, `the ${what} cannot be used: ${(e as Error).message}`, e);
    }
  };
  if (opts["ca"] !== undefined) check("tls_cacert", `CA ${files.ca ?? "given as ca"}`, { ca: opts["ca"] });
  if (opts["cert"] !== undefined || opts["key"] !== undefined)
    check("tls_client_certificate", `client certificate ${files.cert ?? "given as cert"}`, { cert: opts["cert"], key: opts["key"] });
  return opts;
}

/** How long an idle keep-alive connection is kept (semad closes them after its --idle-timeout, 60 s by default). */
const IDLE_MS = 4000;

interface NodeSide {
  request: typeof NodeHttpModule.request;
  /** Requests that answer at once (releases, renewals, reads, tries). */
  agent: NodeHttpModule.Agent;
  /** Requests that may wait on semad (blocking acquires, wait-idle, event streams): a pool of their own, so that a release never waits for a connection behind parked acquires. */
  waitAgent: NodeHttpModule.Agent;
}

function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

export class NodeHttp implements Http {
  readonly kind = "node";
  readonly #https: boolean;
  readonly #host: string;
  readonly #port: number | undefined;
  readonly #prefix: string;
  readonly #maxSockets: number;
  readonly #tls: TlsOptions;
  readonly #files: TlsFiles;
  #side: NodeSide | undefined;
  #loading: Promise<NodeSide> | undefined;

  /** `tls` goes to node:https's Agent; `files` (PEM files, read on first use) stand in for what `tls` does not give. */
  constructor(url: string, maxSockets: number | undefined, tls: TlsOptions = {}, files: TlsFiles = {}) {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`unsupported URL scheme in ${url}`);
    this.#https = u.protocol === "https:";
    this.#host = u.hostname.replace(/^\[(.*)\]$/, "$1"); // IPv6 literals without brackets
    this.#port = u.port ? Number(u.port) : undefined;
    this.#prefix = u.pathname.replace(/\/+$/, "");
    this.#maxSockets = maxSockets ?? Infinity;
    this.#tls = tls;
    this.#files = files;
  }

  /** node:http (or node:https) and the Agent, loaded on first use (the module imports nothing Node-only). */
  #load(): Promise<NodeSide> {
    this.#loading ??= (async () => {
      // node:https's request and Agent take the same options as node:http's.
      const mod = (this.#https ? await import("node:https") : await import("node:http")) as unknown as typeof NodeHttpModule;
      // Idle connections close after IDLE_MS; a connection in use has no timeout at all (a
      // long-poll waits as long as it takes).
      class Agent extends mod.Agent {
        override keepSocketAlive(socket: Duplex): boolean {
          const keep = (super.keepSocketAlive as (s: Duplex) => boolean)(socket);
          (socket as Duplex & { setTimeout(ms: number): void }).setTimeout(IDLE_MS);
          return keep;
        }
        override reuseSocket(socket: Duplex, req: NodeHttpModule.ClientRequest): void {
          (socket as Duplex & { setTimeout(ms: number): void }).setTimeout(0);
          super.reuseSocket(socket, req);
        }
      }
      const opts: Record<string, unknown> = { keepAlive: true, maxSockets: this.#maxSockets };
      if (this.#https) Object.assign(opts, await tlsAgentOptions(this.#tls, this.#files));
      this.#side = { request: mod.request, agent: new Agent(opts), waitAgent: new Agent(opts) };
      return this.#side;
    })();
    return this.#loading;
  }

  request(r: HttpRequest): Promise<HttpReply> {
    const side = this.#side;
    if (!side) return this.#load().then(() => this.request(r));
    return new Promise<HttpReply>((resolve, reject) => {
      if (r.signal?.aborted) return reject(r.signal.reason);
      const headers = r.headers;
      // A Buffer, not the string: node:http would write a string body with the header block
      // as one UTF-8 string, re-encoding a header's characters above 127 (fetch, and node:http
      // without a body, send them as one byte each).
      const body = r.body === undefined ? undefined : Buffer.from(r.body);
      if (body !== undefined) headers["content-length"] = String(body.length);
      const req = side.request({
        host: this.#host,
        port: this.#port,
        path: this.#prefix + r.path,
        method: r.method,
        headers,
        agent: r.wait ? side.waitAgent : side.agent,
      });
      const signal = r.signal;
      const onAbort = () => req.destroy(asError(signal!.reason));
      const detach = () => signal?.removeEventListener("abort", onAbort);
      const fail = (e: unknown) => {
        detach();
        reject(e);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      req.on("error", fail);
      req.on("response", (res) => {
        if (r.keepReply) detach();
        res.setEncoding("utf8");
        let text = "";
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => {
          detach();
          const status = res.statusCode ?? 0;
          resolve({ status, text, retryAfter: status >= 400 ? res.headers["retry-after"] : undefined });
        });
        res.on("error", fail);
        res.on("close", () => {
          if (!res.complete) fail(new Error("the connection closed before the reply ended"));
        });
      });
      req.end(body);
    });
  }

  async stream(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<HttpStream> {
    const side = this.#side ?? (await this.#load());
    signal.throwIfAborted();
    return new Promise<HttpStream>((resolve, reject) => {
      const req = side.request({ host: this.#host, port: this.#port, path: this.#prefix + path, method: "GET", headers, agent: side.waitAgent });
      // The signal cancels the stream to its end (the caller aborts it when done).
      signal.addEventListener("abort", () => req.destroy(asError(signal.reason)), { once: true });
      req.on("error", reject);
      req.on("response", (res) => {
        resolve({
          status: res.statusCode ?? 0,
          body: res,
          text: () =>
            new Promise<string>((done, failed) => {
              let text = "";
              res.setEncoding("utf8");
              res.on("data", (c: string) => (text += c));
              res.on("end", () => done(text));
              res.on("error", failed);
            }),
        });
      });
      req.end();
    });
  }

  close(): void {
    for (const agent of this.#side ? [this.#side.agent, this.#side.waitAgent] : []) {
      for (const list of Object.values(agent.freeSockets)) for (const s of list ?? []) s.destroy();
    }
  }
}

/** Whether this runtime has node:http (Node.js, and runtimes that provide its modules). */
export function hasNodeHttp(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === "string";
}
