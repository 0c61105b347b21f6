// SPDX-License-Identifier: MIT
// @sema/client: semad's semaphores, leases and keyed locks, shaped like the in-process
// semaphore APIs (TC39 Semaphore proposal, newWeighted/acquire(n)/release(n)/wait/mapLimit,
// keyed-mutex locks). No runtime dependencies: node:http with a keep-alive Agent on Node.js
// (the platform's fetch elsewhere, or when asked for), AbortSignal and timers.

import {
  SemaConflictError,
  SemaError,
  SemaLeaseLostError,
  SemaNetworkError,
  SemaNotFoundError,
  SemaTlsError,
  SemaUnavailableError,
  SemaInvalidRequestError,
  SemaOverflowError,
  errorFromReply,
  tlsError,
} from "./errors.js";
import { parseEventStream } from "./sse.js";
import { FetchHttp, NodeHttp, hasNodeHttp, type Http, type HttpStream, type TlsFiles, type TransportKind } from "./http.js";
import {
  ACQUIRE_ALL_OPTIONS,
  ACQUIRE_OPTIONS,
  CLIENT_OPTIONS,
  CONFIGURE_OPTIONS,
  LOCK_OPTIONS,
  MAP_LIMIT_OPTIONS,
  SEMAPHORE_OPTIONS,
  TICKET_ALL_OPTIONS,
  TICKET_OPTIONS,
  TICKET_READ_OPTIONS,
  WAIT_OPTIONS,
  WATCH_OPTIONS,
  checkOptions,
  checkText,
} from "./options.js";

export * from "./errors.js";
export type { TransportKind } from "./http.js";

// `await using` and `using` look the symbols up at run time: define them where the runtime
// lacks them (Node < 18.18 / < 20.4), before any permit is made.
const symbols = Symbol as unknown as { asyncDispose?: symbol; dispose?: symbol };
if (typeof symbols.asyncDispose !== "symbol") {
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("Symbol.asyncDispose") });
}
if (typeof symbols.dispose !== "symbol") {
  Object.defineProperty(Symbol, "dispose", { value: Symbol.for("Symbol.dispose") });
}

const DEFAULT_URL = "http://127.0.0.1:7070";

export interface ClientOptions {
  /** semad's base URL. Default: the `SEMA_SERVER` environment variable, else `http://127.0.0.1:7070`. */
  url?: string;
  /** Recorded as the holder's `owner` on every acquire (shown by `GET /v1/semaphores/{name}`). */
  owner?: string;
  /**
   * The bearer token sent with every request, for a semad run with `--auth` (made by
   * `sema token new`). Default: the `SEMA_TOKEN` environment variable, if set; `""` sends none.
   */
  token?: string;
  /** Lease ttl in ms when an acquire gives none. Default: the server's (`--default-ttl`, 60 s). */
  ttlMs?: number;
  /**
   * How long requests that are safe to repeat keep being retried after network errors; reads
   * (GET) and the ends of leases and tickets (`permit.release()`, `leaveTicket`) also after a
   * 503 (semad could not reach its store). Between tries: 50 ms doubling to 1 s, or what a
   * 503's Retry-After asks if longer (a Retry-After past the window ends the retries).
   * Default 5000 ms.
   */
  retryMs?: number;
  /**
   * How requests are sent: `"node"`, node:http with a keep-alive Agent (the default on
   * Node.js), or `"fetch"`, the platform's fetch (the default elsewhere, and when `fetch` is
   * given). Default: the `SEMA_TRANSPORT` environment variable, else as just said.
   */
  transport?: TransportKind;
  /** The fetch to use with the fetch transport (default: the global one). Giving one selects that transport. */
  fetch?: typeof fetch;
  /**
   * Transport `"node"`: at most this many connections to semad at once for requests that
   * may wait (blocking acquires, `wait()`, `watch()`), and as many for the others (releases,
   * renewals, reads), which have a pool of their own so that they never wait behind parked
   * acquires. Default: no limit. A waiting request holds its connection while it waits: with
   * a limit, acquires beyond it wait for a connection before they queue on semad.
   */
  maxSockets?: number;
  /**
   * https:// URLs, transport `"node"` (node:https): the CA certificates to trust instead of
   * Node's bundled ones (PEM text or Buffer, or an array of them), as node:https's `ca`.
   * `ca`, `cert` or `key` with an http:// URL is a TypeError (the token would go in clear).
   * Default: the PEM file named by the `SEMA_CACERT` environment variable, if set.
   */
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  /**
   * https://, transport `"node"`: a client certificate (PEM), for a semad started with
   * `--tls-client-ca`. Default: the PEM file named by `SEMA_CERT`, if set.
   */
  cert?: string | Uint8Array;
  /** The private key of `cert` (PEM). Default: the file named by `SEMA_CERT_KEY`, else the key in `SEMA_CERT`'s file. */
  key?: string | Uint8Array;
}

export interface AcquireOptions {
  /** Units to take (default 1). */
  weight?: number;
  /** Cancels the wait (the request is aborted and semad drops the waiter). */
  signal?: AbortSignal;
  /** Give up after this many ms with SemaTimeoutError. 0 = try once; negative (or absent) = wait as long as it takes, as in the C API. */
  timeoutMs?: number;
  /** Lease ttl; the client renews it every ttl/3 while held. */
  ttlMs?: number;
  owner?: string;
  /**
   * Whose share the units count to: on a semaphore whose requests name tenants, tenants take
   * turns by units (each in its own first-come order) and none holds more than the
   * semaphore's `tenantMax`.
   */
  tenant?: string;
}

/** Options of `client.acquireAll()`: as `acquire`, the weights given per semaphore. */
export type AcquireAllOptions = Omit<AcquireOptions, "weight">;

/** One semaphore of `client.acquireAll()`: its name and the units of it (default 1). */
export interface Part {
  name: string;
  weight?: number;
}

/** What a semaphore has beside its capacity (docs/semantics.md). */
export interface SemaphoreLimits {
  /** The most units one tenant may hold (0 or absent: no cap). */
  tenantMax?: number;
  /** Units granted per second at most, beside the capacity (0 or absent: no rate). */
  ratePerS?: number;
  /** The rate's bucket: units granted at once after a pause (default `ratePerS`). */
  rateBurst?: number;
}

/** `client.semaphore(name, opts)`, `client.createSemaphore(name, opts)`. */
export interface SemaphoreOptions extends SemaphoreLimits {
  capacity?: number;
}

/** `sem.configure(opts)`: what to change (a 0 limit removes it; the rest stays). */
export interface ConfigureOptions extends SemaphoreLimits {
  capacity?: number;
}

export interface LockOptions extends Omit<AcquireOptions, "weight" | "tenant"> {
  /** Default `exclusive`. */
  mode?: "shared" | "exclusive";
}

export interface WaitOptions {
  signal?: AbortSignal;
  /** Give up after this many ms with SemaTimeoutError. 0 = only if idle now; negative (or absent) = no limit. */
  timeoutMs?: number;
}

/** A holder in `state()`: times are epoch ms on semad's clock. */
export interface Holder {
  lease: string;
  weight: number;
  owner: string | null;
  acquired_at: number;
  expires_at: number;
  fence: number;
  /** Only for a tenant's lease. */
  tenant?: string;
  /** Only for a lease on several semaphores (this is its part here). */
  multi?: true;
}

/** A tenant of a semaphore in `state()`: null for the requests that named none. */
export interface TenantState {
  tenant: string | null;
  held: number;
  waiting: number;
  waiting_weight: number;
}

/** A waiter in `state()`, in queue order. */
export interface Waiter {
  /** 0 = the head (a ticket's own `position` counts from 1). */
  position: number;
  /** 0 for a `wait()`. */
  weight: number;
  owner: string | null;
  since: number;
  /** Only for a `wait()` (`wait_idle`) or a ticket. */
  kind?: "wait_idle" | "ticket";
  /** Only for a tenant's request. */
  tenant?: string;
  /** Only for a request on several semaphores (its place here). */
  multi?: true;
}

/** GET /v1/semaphores/{name} (`sem.state()`). */
export interface SemaphoreState {
  name: string;
  capacity: number;
  /** Below 0 after a shrink, above the capacity after a legacy `up`. */
  available: number;
  held: number;
  /** The last fence handed out. */
  fence: number;
  waiting: number;
  waiting_weight: number;
  /** Only once a legacy `up` or `down` moved the value. */
  legacy?: boolean;
  /** Only when set: the most units one tenant may hold. */
  tenant_max?: number;
  /** Only with a rate: units granted per second, the bucket, and the units it holds now. */
  rate_per_s?: number;
  rate_burst?: number;
  tokens?: number;
  /** Only when `holders` or `waiters` were cut at 1000. */
  truncated?: boolean;
  holders: Holder[];
  waiters: Waiter[];
  /** Only when requests named tenants: each that holds or waits, by name. */
  tenants?: TenantState[];
}

/** GET /v1/locks/{key} (`client.lockState(key)`). */
export interface LockState {
  key: string;
  /** Shared holders now. */
  readers: number;
  /** The most shared holders at once (semad's `--lock-readers`). */
  max_readers: number;
  /** Only when `holders` or `waiters` were cut at 1000. */
  truncated?: boolean;
  holders: Array<Holder & { mode: "shared" | "exclusive" }>;
  waiters: Array<Omit<Waiter, "kind"> & { mode: "shared" | "exclusive" }>;
}

/** The types of the events of `client.watch(name)` (`reset`: semad no longer had what was missed;
 * `queued` and `left`: a waiter joined the queue or left it without a grant). */
export type SemaEventType =
  | "granted" | "released" | "expired" | "revoked" | "resized" | "queued" | "left" | "deleted" | "reset";

/** One event of `client.watch(name)`. */
export interface SemaEvent {
  /** `<uid>-<seq>`; resume point (sent back as `Last-Event-ID`). */
  id: string | undefined;
  type: SemaEventType;
  data: Record<string, unknown>;
}

export interface WatchOptions {
  signal?: AbortSignal;
  /** Resume after this event id. */
  lastEventId?: string;
}

export interface TicketOptions {
  /** Units the ticket asks for (default 1). */
  weight?: number;
  /** The lease's ttl once granted (default: the client's, else semad's). */
  ttlMs?: number;
  owner?: string;
  /** Unread this long, semad drops the waiting ticket (or releases its uncollected grant). Default 30 s. */
  keepaliveMs?: number;
  /** Idempotency-Key of the request (default: a fresh random key, reused by the client's own retries). */
  idempotencyKey?: string;
  signal?: AbortSignal;
  /** Whose share the units count to (as for `acquire`). */
  tenant?: string;
}

/** Options of `client.takeTicketAll()`: as `takeTicket`, the weights given per semaphore. */
export type TicketAllOptions = Omit<TicketOptions, "weight">;

/** One semaphore of a ticket on several: its name and the units asked for there. */
export interface TicketPart {
  name: string;
  weight: number;
}

/** A ticket: a place in a semaphore's FIFO queue that no request holds open (docs/http-api.md). */
export interface Ticket {
  /** The ticket id: unguessable, safe to keep in a cookie. */
  id: string;
  /** The semaphore (a ticket on several: its first part's). */
  name: string;
  status: "waiting" | "granted";
  /** The units asked for (a ticket on several: on its first part). */
  weight: number;
  /** A ticket on several semaphores (`client.takeTicketAll`): each one and its weight, in the order asked; null for a ticket on one. */
  parts: ReadonlyArray<TicketPart> | null;
  /** The units asked for on each semaphore, by name (`{ gpu: 2, db: 1 }`; a ticket on one: `{ [name]: weight }`). */
  weights: Readonly<Record<string, number>>;
  /** The tenant the ticket named; null for none. */
  tenant: string | null;
  /** Waiting: 1 = next in line (a ticket on several: in the line where it stands furthest back); null once granted. */
  position: number | null;
  /** Waiting: units asked for by the waiters ahead (in that line); null once granted. */
  aheadWeight: number | null;
  /** Waiting: the estimated wait from now, null until semad has enough history (or once granted). */
  estimateMs: { p50: number; p90: number } | null;
  /** Read again after this long. */
  pollAfterMs: number;
  keepaliveMs: number;
  /** Granted: the lease, as an acquire returns it (turn it into a Permit with `client.ticketPermit`). */
  lease: LeaseReply | null;
  /** The stream event id of this state (watchTicket), for resuming. */
  eventId?: string;
}

/** A ticket on several semaphores (`client.takeTicketAll`): a Ticket whose `parts` are there. */
export interface MultiTicket extends Ticket {
  parts: ReadonlyArray<TicketPart>;
}

export interface TicketReadOptions {
  /** Long-poll: answer when the status or position changes, or after this many ms (at most 300000). */
  waitMs?: number;
  signal?: AbortSignal;
}

interface TicketReply {
  ticket: string;
  /** A ticket on one semaphore: its name and weight; on several: `semaphores` instead. */
  name?: string;
  weight?: number;
  semaphores?: TicketPart[];
  status: "waiting" | "granted";
  tenant?: string;
  position?: number;
  ahead_weight?: number;
  estimate_ms?: { p50: number; p90: number } | null;
  poll_after_ms: number;
  keepalive_ms: number;
  lease?: LeaseReply;
}

function toTicket(r: TicketReply, eventId?: string): Ticket {
  const parts = r.semaphores?.map((p) => ({ name: p.name, weight: p.weight })) ?? null;
  // a ticket on several semaphores: its first part stands for it, as for a lease
  const name = parts?.[0]?.name ?? r.name ?? "";
  const weight = parts?.[0]?.weight ?? r.weight ?? 0;
  return {
    id: r.ticket,
    name,
    status: r.status,
    weight,
    parts,
    weights: Object.fromEntries((parts ?? [{ name, weight }]).map((p) => [p.name, p.weight])),
    tenant: r.tenant ?? null,
    position: r.position ?? null,
    aheadWeight: r.ahead_weight ?? null,
    estimateMs: r.estimate_ms ?? null,
    pollAfterMs: r.poll_after_ms,
    keepaliveMs: r.keepalive_ms,
    lease: r.lease ?? null,
    ...(eventId !== undefined ? { eventId } : {}),
  };
}

/** The lease reply of an acquire. A lease on several semaphores has `semaphores` and `fences` instead of name, weight and fence. */
export interface LeaseReply {
  lease: string;
  name: string;
  weight: number;
  fence: number;
  ttl_ms: number;
  expires_at: number;
  acquired_at: number;
  owner: string | null;
  key?: string;
  mode?: "shared" | "exclusive";
  tenant?: string;
  semaphores?: Array<{ name: string; weight: number; fence: number }>;
  fences?: Record<string, number>;
}

interface Reply {
  status: number;
  text: string;
  retryAfter?: string | undefined;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function unref(t: unknown): void {
  (t as { unref?: () => void } | undefined)?.unref?.();
}

function randomKey(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  let s = "";
  for (let i = 0; i < 4; i++) s += Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, "0");
  return s;
}

/**
 * A header value as the bytes of its UTF-8, one character each (node:http and fetch send a
 * character below 256 as one byte, and refuse any above): a non-ASCII Idempotency-Key goes
 * out as the C and Python clients send it.
 */
function utf8Header(s: string): string {
  return String.fromCharCode(...new TextEncoder().encode(s));
}

function seg(name: string): string {
  return encodeURIComponent(name);
}

/**
 * A semaphore name or lock key as a path segment. An empty one, or none (an unset variable
 * in plain JavaScript), is a TypeError here: on the wire it would be a 404 "no such route",
 * or a semaphore named "undefined".
 */
function nameSeg(what: string, name: string): string {
  checkName(what, name);
  return encodeURIComponent(name);
}

/** As nameSeg, for a name that goes in a body: a non-empty string with UTF-8 (checkText). */
function checkName(what: string, name: string): void {
  if (typeof name !== "string" || name === "")
    throw new TypeError(`${what} must be a non-empty string, not ${name === "" ? '""' : String(name)}`);
  checkText(what, name);
}

function env(name: string): string | undefined {
  return (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];
}

function parses(url: string): boolean {
  try {
    new URL(url);
    return true;
  } catch {
    return false;
  }
}

/**
 * The base URL without its trailing slashes. One without http:// or https:// (a bare
 * `127.0.0.1:7070`) is a TypeError naming where it came from, as the sema command says it.
 */
function serverUrl(opts: ClientOptions): string {
  const given = opts.url ?? env("SEMA_SERVER");
  // "127.0.0.1:7070" is http://127.0.0.1:7070, as for the sema command and curl
  const bare = given && !given.includes("://") ? `http://${given}` : given;
  const url = (bare || DEFAULT_URL).replace(/\/+$/, "");
  if (!/^https?:\/\/[^/]/i.test(url) || !parses(url)) {
    const from = opts.url !== undefined ? "url" : "SEMA_SERVER";
    throw new TypeError(`createClient: bad server ${from} ${JSON.stringify(given)} (an http:// or https:// URL is needed, e.g. ${DEFAULT_URL})`);
  }
  return url;
}

function makeHttp(url: string, opts: ClientOptions): Http {
  let kind = opts.transport;
  if (kind === undefined) {
    const fromEnv = opts.fetch ? undefined : env("SEMA_TRANSPORT");
    if (fromEnv === "node" || fromEnv === "fetch") kind = fromEnv;
    else if (fromEnv) throw new TypeError(`SEMA_TRANSPORT must be "node" or "fetch", not ${JSON.stringify(fromEnv)}`);
    else kind = opts.fetch || !hasNodeHttp() ? "fetch" : "node";
  }
  const tls = { ca: opts.ca, cert: opts.cert, key: opts.key };
  // given for an http:// URL they would go unused and the token in clear; the environment's
  // SEMA_CACERT and the others are defaults for https:// only, and pass
  if (/^http:/i.test(url) && (opts.ca !== undefined || opts.cert !== undefined || opts.key !== undefined))
    throw new TypeError(`createClient: \`ca\`, \`cert\` and \`key\` are for an https:// URL; url is ${url}`);
  if (kind === "node") {
    if (opts.fetch) throw new TypeError('createClient: `fetch` is for transport "fetch"');
    return new NodeHttp(url, opts.maxSockets, tls, tlsFiles(opts));
  }
  if (opts.ca !== undefined || opts.cert !== undefined || opts.key !== undefined)
    throw new TypeError('createClient: `ca`, `cert` and `key` need transport "node" (fetch takes no TLS options)');
  if (kind !== "fetch") throw new TypeError(`createClient: transport must be "node" or "fetch", not ${JSON.stringify(kind)}`);
  const f = opts.fetch ?? globalThis.fetch;
  if (typeof f !== "function") throw new TypeError("createClient: no fetch in this runtime; pass one");
  return new FetchHttp(url, opts.fetch ?? globalThis.fetch.bind(globalThis));
}

/** The PEM files of the environment for the TLS options not given (the node transport's). */
function tlsFiles(opts: ClientOptions): TlsFiles {
  return {
    ca: opts.ca === undefined ? env("SEMA_CACERT") || undefined : undefined,
    cert: opts.cert === undefined ? env("SEMA_CERT") || undefined : undefined,
    key: opts.key === undefined ? env("SEMA_CERT_KEY") || undefined : undefined,
  };
}

/** The error of a request that got no reply: a SemaTlsError when TLS failed, else a SemaNetworkError. */
function unreachable(t: { url: string; hasCert: boolean }, e: unknown): SemaNetworkError {
  return tlsError(t.url, e, t.hasCert) ?? new SemaNetworkError(`semad unreachable at ${t.url}: ${(e as Error)?.message ?? e}`, { code: "network", cause: e });
}

/** Whether sending again may help: no reply, but not because of TLS. */
function retryable(e: unknown): e is SemaNetworkError {
  return e instanceof SemaNetworkError && !(e instanceof SemaTlsError);
}

const SAFE = new Set(["GET", "PUT", "PATCH"]);
/**
 * Requests that may run twice, so `retrying` sends them again after a 503 too (semad could not
 * reach its store): reads, and the end of a lease or a ticket (ended twice, it answers 404 or
 * 410). Never an acquire, a take or a legacy up.
 */
const SAFE_AFTER_503 = new Set(["GET", "DELETE"]);

/** The HTTP side of the client, shared by its semaphores, permits and locks. */
class Transport {
  readonly url: string;
  readonly owner: string | undefined;
  readonly ttlMs: number | undefined;
  readonly retryMs: number;
  readonly http: Http;
  /** "Bearer TOKEN", or undefined when semad needs no token. */
  readonly authorization: string | undefined;
  /** Whether a client certificate is given (its absence explains a TLS alert). */
  readonly hasCert: boolean;
  readonly permits = new Set<Permit>();

  constructor(opts: ClientOptions) {
    checkOptions("createClient", opts, CLIENT_OPTIONS);
    this.url = serverUrl(opts);
    this.owner = opts.owner;
    this.ttlMs = opts.ttlMs;
    this.retryMs = opts.retryMs ?? 5000;
    this.http = makeHttp(this.url, opts);
    this.hasCert = opts.cert !== undefined || (this.http.kind === "node" && !!env("SEMA_CERT"));
    const token = opts.token ?? env("SEMA_TOKEN");
    // A token is one line of visible ASCII: anything else could inject headers.
    if (token && !/^[\x21-\x7e]+$/.test(token)) throw new TypeError("createClient: the token holds a space or a control byte");
    this.authorization = token ? `Bearer ${token}` : undefined;
  }

  /**
   * One request. Resolves with any reply whose status is 2xx or listed in `accept`; throws
   * the typed error of other replies, SemaNetworkError when there was none, and the
   * signal's reason when aborted.
   */
  async send(
    method: string,
    path: string,
    opts: {
      body?: unknown;
      headers?: Record<string, string>;
      signal?: AbortSignal;
      accept?: number[];
      lease?: boolean;
      /** Once the reply's headers are in, read its body even if `signal` aborts (an acquire's grant must not be lost). */
      keepReply?: boolean;
      /** The request may wait on semad (a blocking acquire, wait-idle). */
      wait?: boolean;
    } = {},
  ): Promise<Reply> {
    // Callers pass a fresh object (or none): add to it rather than copy it (a spread copy of
    // the headers cost ~15 µs per request in bench/js/pairs.mjs).
    const headers: Record<string, string> = opts.headers ?? {};
    if (opts.body !== undefined) headers["content-type"] = "application/json";
    if (this.authorization !== undefined) headers.authorization = this.authorization;
    const outer = opts.signal;
    outer?.throwIfAborted();
    let res: Reply;
    try {
      res = await this.http.request({
        method,
        path,
        headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        signal: outer,
        keepReply: opts.keepReply,
        wait: opts.wait,
      });
    } catch (e) {
      if (outer?.aborted) throw outer.reason;
      throw unreachable(this, e);
    }
    if ((res.status >= 200 && res.status < 300) || opts.accept?.includes(res.status)) return res;
    throw errorFromReply(res.status, res.text, opts.lease, res.retryAfter);
  }

  /** The reply's JSON. Requests safe to repeat (GET, PUT, PATCH) are retried after network errors (GET after a 503 too). */
  async json<T>(method: string, path: string, opts: Parameters<Transport["send"]>[2] = {}): Promise<T> {
    const r = SAFE.has(method) ? await this.retrying(method, path, opts) : await this.send(method, path, opts);
    return (r.text ? JSON.parse(r.text) : undefined) as T;
  }

  /**
   * `send`, repeated for up to `retryMs` (for requests safe to repeat) after network errors,
   * and after a 503 for the methods of SAFE_AFTER_503, never sooner than its Retry-After asks.
   */
  async retrying(method: string, path: string, opts: Parameters<Transport["send"]>[2] = {}): Promise<Reply> {
    const deadline = Date.now() + this.retryMs;
    const after503 = SAFE_AFTER_503.has(method);
    for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
      try {
        return await this.send(method, path, opts);
      } catch (e) {
        if (!(retryable(e) || (after503 && e instanceof SemaError && e.status === 503))) throw e;
        const wait = Math.max(delay, e.retryAfterMs ?? 0);
        if (Date.now() + wait > deadline) throw e;
        await sleep(wait, opts.signal);
      }
    }
  }

  /**
   * A blocking acquire: one long-poll request carrying an Idempotency-Key. After a network
   * error it is sent again with the same key (semad returns the lease it granted, or joins
   * the parked request), so a retry never holds twice. When the caller aborts or the
   * retries run out, a grant whose reply was lost is looked up with the same key and
   * released.
   */
  async acquire(path: string, body: Record<string, unknown>, opts: AcquireOptions, make: (r: LeaseReply, sentAt: number) => Permit): Promise<Permit> {
    const signal = opts.signal;
    signal?.throwIfAborted();
    const key = randomKey();
    const ttl = opts.ttlMs ?? this.ttlMs;
    const owner = opts.owner ?? this.owner;
    // A negative timeout waits as long as it takes, as in libsema and the C client.
    const timeout = opts.timeoutMs;
    const waitUntil = timeout === undefined || timeout === null || timeout < 0 ? undefined : Date.now() + timeout;
    // Retries go on for retryMs from the first of a run of network errors (a long wait that
    // ends in one gets the full window too).
    let retryUntil = 0;
    // `body` is the caller's fresh object: the request is built on it, not on a copy (a
    // spread copy here cost ~10 µs per acquire in bench/js/pairs.mjs).
    const req: Record<string, unknown> = body;
    if (ttl !== undefined) req.ttl_ms = ttl;
    if (owner !== undefined) req.owner = owner;
    if (opts.tenant !== undefined) req.tenant = opts.tenant;
    for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
      if (waitUntil !== undefined) req.timeout_ms = timeout === 0 ? 0 : Math.max(0, waitUntil - Date.now());
      const sentAt = Date.now();
      let reply: LeaseReply;
      try {
        const r = await this.send("POST", path, {
          body: req,
          headers: { "idempotency-key": key },
          signal,
          keepReply: true,
          wait: req.timeout_ms !== 0,
        });
        reply = JSON.parse(r.text) as LeaseReply;
      } catch (e) {
        if (retryable(e) && retryUntil === 0) retryUntil = Date.now() + this.retryMs;
        if (retryable(e) && !signal?.aborted && Date.now() + delay < retryUntil) {
          try {
            await sleep(delay, signal);
            continue;
          } catch {
            /* aborted while waiting to retry */
          }
        }
        // No reply: semad may have granted it all the same (the reply was in flight).
        if (retryable(e) || signal?.aborted) await this.releaseLostGrant(path, req, key);
        if (signal?.aborted) throw signal.reason;
        throw e;
      }
      if (signal?.aborted) {
        // Granted, but the caller gave up meanwhile: give it back.
        await this.send("DELETE", `/v1/leases/${seg(reply.lease)}`, { signal: AbortSignal.timeout(2000) }).catch(() => {});
        throw signal.reason;
      }
      return make(reply, sentAt);
    }
  }

  /** A take's body: `body` (its weight or semaphores) with the options' ttl, owner, keepalive and tenant. */
  ticketBody(body: Record<string, unknown>, opts: TicketAllOptions): Record<string, unknown> {
    const ttl = opts.ttlMs ?? this.ttlMs;
    const owner = opts.owner ?? this.owner;
    if (ttl !== undefined) body.ttl_ms = ttl;
    if (owner !== undefined) body.owner = owner;
    if (opts.keepaliveMs !== undefined) body.keepalive_ms = opts.keepaliveMs;
    if (opts.tenant !== undefined) body.tenant = opts.tenant;
    return body;
  }

  /** POSTs a take, retried after network errors with one Idempotency-Key, so a retry never takes a second place. */
  async takeTicket(path: string, body: Record<string, unknown>, opts: TicketAllOptions): Promise<Ticket> {
    const r = await this.retrying("POST", path, {
      body,
      headers: { "idempotency-key": utf8Header(opts.idempotencyKey ?? randomKey()) },
      signal: opts.signal,
    });
    return toTicket(JSON.parse(r.text) as TicketReply);
  }

  /** After an acquire ended without its reply: if semad granted it, release that lease. */
  private async releaseLostGrant(path: string, req: Record<string, unknown>, key: string): Promise<void> {
    try {
      const r = await this.send("POST", path, {
        body: { ...req, timeout_ms: 0 },
        headers: { "idempotency-key": key },
        signal: AbortSignal.timeout(2000),
      });
      const lease = (JSON.parse(r.text) as LeaseReply).lease;
      await this.send("DELETE", `/v1/leases/${seg(lease)}`, { signal: AbortSignal.timeout(2000) });
    } catch {
      /* nothing granted (409 unavailable), or semad is gone: the ttl reclaims it */
    }
  }
}

/**
 * A held lease: `weight` units of a semaphore (or a lock on a key) until `release()`. The
 * client renews it in the background every ttl/3; `signal` fires (with a
 * SemaLeaseLostError) when it is lost: expired, revoked, its semaphore deleted, or semad
 * unreachable until the ttl ran out.
 */
export class Permit {
  /** The lease id. */
  readonly lease: string;
  readonly name: string;
  readonly weight: number;
  /** Strictly increasing per semaphore: hand it to fenced resources. */
  readonly fence: number;
  readonly ttlMs: number;
  readonly acquiredAt: number;
  readonly owner: string | null;
  /** The lease's expiry on the server's clock (epoch ms), moved on by every renewal. */
  expiresAt: number;

  readonly #t: Transport;
  /** Made on the first read of `signal` (most permits are released without anyone reading it). */
  #lostCtl: AbortController | undefined;
  #lostReason: SemaLeaseLostError | undefined;
  #released: Promise<void> | undefined;
  #renewTimer: unknown;
  #deadlineTimer: unknown;
  /** Local deadline: when the last successful acquire/renew was made, plus the ttl. */
  #deadline = 0;
  #onRelease: ((p: Permit) => void) | undefined;

  /** @internal */
  constructor(t: Transport, r: LeaseReply, sentAt: number, onRelease?: (p: Permit) => void) {
    this.#t = t;
    this.lease = r.lease;
    // a lease on several semaphores: its first part stands for it here (see MultiPermit)
    this.name = r.semaphores?.[0]?.name ?? r.name;
    this.weight = r.semaphores?.[0]?.weight ?? r.weight;
    this.fence = r.semaphores?.[0]?.fence ?? r.fence;
    this.ttlMs = r.ttl_ms;
    this.acquiredAt = r.acquired_at;
    this.owner = r.owner;
    this.expiresAt = r.expires_at;
    this.#onRelease = onRelease;
    t.permits.add(this);
    this.#extend(sentAt);
    this.#scheduleRenew(this.ttlMs / 3);
  }

  /** True once release() was called. */
  get released(): boolean {
    return this.#released !== undefined;
  }

  /** Fires when the lease is lost; its reason is a SemaLeaseLostError. Not fired by release(). */
  get signal(): AbortSignal {
    if (!this.#lostCtl) {
      this.#lostCtl = new AbortController();
      if (this.#lostReason) this.#lostCtl.abort(this.#lostReason);
    }
    return this.#lostCtl.signal;
  }

  /** True once the lease was lost (see `signal`). */
  get lost(): boolean {
    return this.#lostReason !== undefined;
  }

  /**
   * Gives the units back. Idempotent; never rejects. Sent again after a network error or a 503
   * for up to `retryMs`; a release that never gets through leaves the lease to its ttl. Await
   * it to know the units are back.
   */
  release(): Promise<void> {
    if (this.#released) return this.#released;
    this.#stop();
    this.#onRelease?.(this);
    const lostCode = this.#lostReason?.code;
    this.#released =
      lostCode !== undefined && lostCode !== "unreachable"
        ? Promise.resolve()
        : this.#t
            .retrying("DELETE", `/v1/leases/${seg(this.lease)}`, { lease: true })
            .then(() => undefined)
            .catch(() => undefined);
    return this.#released;
  }

  /** Renews now (the background renewal does this by itself). Throws SemaLeaseLostError if the lease is gone. */
  async renew(ttlMs: number = this.ttlMs): Promise<void> {
    const sentAt = Date.now();
    try {
      const r = await this.#t.json<LeaseReply>("POST", `/v1/leases/${seg(this.lease)}/renew`, {
        body: { ttl_ms: ttlMs },
        lease: true,
        signal: AbortSignal.timeout(Math.max(1000, this.ttlMs / 3)),
      });
      this.expiresAt = r.expires_at;
      if (!this.#released && !this.lost) this.#extend(sentAt, r.ttl_ms);
    } catch (e) {
      if (e instanceof SemaLeaseLostError || e instanceof SemaNotFoundError) this.#lose(e);
      throw e;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  [Symbol.dispose](): void {
    void this.release();
  }

  #extend(sentAt: number, ttl: number = this.ttlMs): void {
    // The ttl runs from the grant (or renewal), which happened between the send and now. A
    // long-poll may have waited long before it: take the grant to be at most a quarter of
    // the ttl (and 1 s) before its reply arrived.
    this.#deadline = Math.max(sentAt, Date.now() - Math.min(1000, ttl / 4)) + ttl;
    clearTimeout(this.#deadlineTimer as number);
    this.#deadlineTimer = setTimeout(() => {
      this.#lose(
        new SemaLeaseLostError(`lease ${this.lease}: no renewal reached semad before the ttl ran out`, { code: "unreachable" }),
      );
    }, Math.max(0, this.#deadline - Date.now()));
    unref(this.#deadlineTimer);
  }

  #scheduleRenew(ms: number): void {
    clearTimeout(this.#renewTimer as number);
    this.#renewTimer = setTimeout(() => {
      this.renew().then(
        () => this.#scheduleRenew(this.ttlMs / 3),
        (e) => {
          if (this.#released || this.lost) return;
          // No reply (or a transient 5xx): try again soon, until the deadline timer gives up.
          this.#scheduleRenew(Math.min(this.ttlMs / 6, 1000));
          void e;
        },
      );
    }, ms);
    unref(this.#renewTimer);
  }

  #lose(reason: SemaError): void {
    if (this.#released || this.lost) return;
    this.#stop();
    this.#lostReason =
      reason instanceof SemaLeaseLostError
        ? reason
        : new SemaLeaseLostError(reason.message, { code: reason.code, status: reason.status, problem: reason.problem });
    this.#lostCtl?.abort(this.#lostReason);
  }

  #stop(): void {
    clearTimeout(this.#renewTimer as number);
    clearTimeout(this.#deadlineTimer as number);
    this.#t.permits.delete(this);
  }
}

/**
 * A held lease on several semaphores (`client.acquireAll`): renewed, released and lost as
 * one. `fences` has each semaphore's fencing token; `parts` each one's units.
 */
export class MultiPermit extends Permit {
  readonly parts: ReadonlyArray<{ name: string; weight: number; fence: number }>;
  readonly fences: Readonly<Record<string, number>>;
  readonly tenant: string | undefined;
  /** @internal */
  constructor(t: Transport, r: LeaseReply, sentAt: number) {
    super(t, r, sentAt);
    this.parts = r.semaphores ?? [{ name: r.name, weight: r.weight, fence: r.fence }];
    this.fences = r.fences ?? { [r.name]: r.fence };
    this.tenant = r.tenant;
  }
}

/** A held keyed lock: a Permit with its `key` and `mode`; `unlock()` is `release()`. */
export class Lock extends Permit {
  readonly key: string;
  readonly mode: "shared" | "exclusive";
  /** @internal */
  constructor(t: Transport, r: LeaseReply, sentAt: number) {
    super(t, r, sentAt);
    this.key = r.key ?? r.name;
    this.mode = r.mode ?? "exclusive";
  }
  /** Idempotent, never rejects. */
  unlock(): Promise<void> {
    return this.release();
  }
}

// Each list of options.ts names every key of its options type and no other: a compile error
// otherwise, so the lists cannot fall behind the types.
type Same<L extends readonly string[], T> = [Exclude<keyof T, L[number]>, Exclude<L[number], keyof T>] extends [never, never] ? true : false;
const optionListsMatch: [
  Same<typeof CLIENT_OPTIONS, ClientOptions>,
  Same<typeof ACQUIRE_OPTIONS, AcquireOptions>,
  Same<typeof ACQUIRE_ALL_OPTIONS, AcquireAllOptions>,
  Same<typeof SEMAPHORE_OPTIONS, SemaphoreOptions>,
  Same<typeof CONFIGURE_OPTIONS, ConfigureOptions>,
  Same<typeof LOCK_OPTIONS, LockOptions>,
  Same<typeof WAIT_OPTIONS, WaitOptions>,
  Same<typeof TICKET_OPTIONS, TicketOptions>,
  Same<typeof TICKET_ALL_OPTIONS, TicketAllOptions>,
  Same<typeof TICKET_READ_OPTIONS, TicketReadOptions>,
  Same<typeof WATCH_OPTIONS, WatchOptions>,
] = [true, true, true, true, true, true, true, true, true, true, true];
void optionListsMatch;

/** tenantMax, ratePerS and rateBurst as the fields of a PUT or PATCH body. */
function limitsBody(l: SemaphoreLimits): Record<string, number> {
  const b: Record<string, number> = {};
  if (l.tenantMax !== undefined) b.tenant_max = l.tenantMax;
  if (l.ratePerS !== undefined) b.rate_per_s = l.ratePerS;
  if (l.rateBurst !== undefined) b.rate_burst = l.rateBurst;
  return b;
}

/** The semaphores of `acquireAll` and `takeTicketAll` (`where`): a list of parts, or `{ gpu: 2, db: 1 }`. */
function partsBody(where: string, parts: readonly Part[] | Readonly<Record<string, number>>): Array<{ name: string; weight: number }> {
  const list = Array.isArray(parts) ? (parts as readonly Part[]) : Object.entries(parts ?? {}).map(([name, weight]) => ({ name, weight }));
  if (list.length === 0) throw new TypeError(`${where}: name at least one semaphore`);
  for (const p of list) checkName(`${where}: a semaphore's name`, p.name);
  return list.map((p) => ({ name: p.name, weight: p.weight ?? 1 }));
}

function acquireOpts(o: number | AcquireOptions | undefined): AcquireOptions {
  checkOptions("acquire", o, ACQUIRE_OPTIONS);
  return typeof o === "number" ? { weight: o } : (o ?? {});
}

/**
 * A semaphore on semad. Get one with `client.semaphore(name, { capacity })` (which sends
 * nothing) or `client.createSemaphore(name, capacity)`.
 */
export class Semaphore {
  readonly name: string;
  /**
   * The capacity given to `semaphore()` (created with it if missing), or the one
   * `createSemaphore()` made; undefined when none was given. `state()` reads the current one.
   */
  readonly capacity: number | undefined;
  readonly #t: Transport;
  readonly #client: SemaClient;
  /** Permits taken through this handle, oldest first (for release(n)). */
  readonly #held: Permit[] = [];

  readonly #limits: Record<string, number>;

  /** @internal */
  constructor(t: Transport, client: SemaClient, name: string, capacity: number | undefined, limits: SemaphoreLimits = {}) {
    this.#t = t;
    this.#client = client;
    this.name = name;
    this.capacity = capacity;
    this.#limits = limitsBody(limits);
  }

  get #path(): string {
    return `/v1/semaphores/${seg(this.name)}`;
  }

  /**
   * `op()`; when semad answers that the semaphore does not exist and this handle has a
   * capacity, creates it (PUT: the admin right) and runs `op()` once more. Only the first
   * user of a missing semaphore needs more than the right of `op` itself.
   */
  #orCreate<T>(op: () => Promise<T>): Promise<T> {
    if (this.capacity === undefined) return op();
    return op().catch(async (e: unknown) => {
      if (!(e instanceof SemaNotFoundError)) throw e;
      try {
        await this.#t.json("PUT", this.#path, { body: { capacity: this.capacity, ...this.#limits } });
      } catch (c) {
        if (!(c instanceof SemaConflictError)) throw c; // made meanwhile with another capacity
      }
      return op();
    });
  }

  /**
   * Waits for `weight` units (one long-poll request) and returns the permit.
   * `acquire(n)` is `acquire({ weight: n })`.
   * Throws SemaTimeoutError after `timeoutMs`, SemaDeletedError if the semaphore is deleted
   * meanwhile, and the signal's reason when aborted.
   */
  acquire(opts?: number | AcquireOptions): Promise<Permit> {
    const o = acquireOpts(opts);
    const make = (r: LeaseReply, sentAt: number) => {
      const p = new Permit(this.#t, r, sentAt, (q) => {
        const i = this.#held.indexOf(q);
        if (i >= 0) this.#held.splice(i, 1);
      });
      this.#held.push(p);
      return p;
    };
    return this.#orCreate(() => this.#t.acquire(`${this.#path}/acquire`, { weight: o.weight ?? 1 }, o, make));
  }

  /** Takes `weight` units if they are free now (never queues): the permit, or null. */
  async tryAcquire(opts?: number | Omit<AcquireOptions, "timeoutMs">): Promise<Permit | null> {
    try {
      return await this.acquire({ ...acquireOpts(opts), timeoutMs: 0 });
    } catch (e) {
      if (e instanceof SemaUnavailableError) return null;
      throw e;
    }
  }

  /**
   * Weighted-semaphore style: gives back the oldest permit of weight `n` taken with `acquire(n)`
   * through this handle. Throws SemaOverflowError (synchronously) if there is none.
   * Never rejects.
   */
  release(n = 1): Promise<void> {
    const p = this.#held.find((q) => q.weight === n);
    if (!p) {
      throw new SemaOverflowError(`no permit of weight ${n} held through this handle of ${this.name}`, { code: "overflow" });
    }
    return p.release();
  }

  /** Runs `fn(permit)` holding `weight` units; releases when it settles (also on throw). */
  with<T>(fn: (permit: Permit) => T | PromiseLike<T>): Promise<T>;
  with<T>(opts: number | AcquireOptions, fn: (permit: Permit) => T | PromiseLike<T>): Promise<T>;
  async with<T>(a: unknown, b?: unknown): Promise<T> {
    const [opts, fn] = (typeof a === "function" ? [undefined, a] : [a, b]) as [
      number | AcquireOptions | undefined,
      (permit: Permit) => T | PromiseLike<T>,
    ];
    const permit = await this.acquire(opts);
    try {
      return await fn(permit);
    } finally {
      await permit.release();
    }
  }

  /** Wraps `fn` so that each call runs holding `weight` units (TC39 `wrap`). */
  wrap<A extends unknown[], T>(fn: (...args: A) => T | PromiseLike<T>, opts?: number | AcquireOptions): (...args: A) => Promise<T> {
    return (...args: A) => this.with(opts ?? {}, () => fn(...args));
  }

  /** Waits until everything queued before it was granted and all units are back (POST wait-idle). Takes nothing. */
  async wait(opts: WaitOptions = {}): Promise<void> {
    checkOptions("wait", opts, WAIT_OPTIONS);
    const body: Record<string, unknown> = {};
    if (opts.timeoutMs !== undefined && opts.timeoutMs >= 0) body.timeout_ms = opts.timeoutMs;
    // wait-idle takes nothing: safe to send again after a network error.
    await this.#orCreate(() => this.#t.retrying("POST", `${this.#path}/wait-idle`, { body, signal: opts.signal, wait: opts.timeoutMs !== 0 }));
  }

  /** A method, not a getter: a fresh read of the free units (may be negative after a shrink). */
  async available(): Promise<number> {
    return (await this.state()).available;
  }

  /** The semaphore's state now: holders, waiters, capacity (GET /v1/semaphores/{name}). */
  state(): Promise<SemaphoreState> {
    return this.#t.json<SemaphoreState>("GET", this.#path);
  }

  /** Changes the capacity (PATCH): growing admits waiters, shrinking never revokes. */
  resize(capacity: number): Promise<SemaphoreState> {
    return this.#t.json<SemaphoreState>("PATCH", this.#path, { body: { capacity } });
  }

  /**
   * Changes what `opts` names (PATCH): the capacity, `tenantMax`, `ratePerS`, `rateBurst` (a 0
   * limit removes it). Never revokes; waiters that can never be granted now fail.
   */
  configure(opts: ConfigureOptions): Promise<SemaphoreState> {
    checkOptions("configure", opts, CONFIGURE_OPTIONS);
    return this.#t.json<SemaphoreState>("PATCH", this.#path, { body: { ...limitsBody(opts), ...(opts.capacity !== undefined ? { capacity: opts.capacity } : {}) } });
  }

  /** Deletes the semaphore: waiters get SemaDeletedError, held permits are lost. */
  async delete(): Promise<void> {
    await this.#t.send("DELETE", this.#path);
  }

  /**
   * `mapLimit` with at most `capacity` calls running fleet-wide (each holds one unit), or
   * `limit` if lower. A handle made without a capacity and called without a `limit` reads
   * the semaphore's (`state()`: the read right).
   */
  async mapLimit<T, R>(items: Iterable<T> | AsyncIterable<T>, fn: MapFn<T, R>, opts?: { limit?: number; signal?: AbortSignal }): Promise<R[]> {
    const capacity = this.capacity ?? (opts?.limit === undefined ? (await this.state()).capacity : Infinity);
    return mapLimitWith(this, items, Math.min(opts?.limit ?? capacity, capacity), fn, opts?.signal);
  }

  /** The semaphore's event stream (see `client.watch`). */
  watch(opts?: WatchOptions): AsyncIterableIterator<SemaEvent> {
    return this.#client.watch(this.name, opts);
  }

  /**
   * Takes a ticket: a place in this semaphore's FIFO queue (the same queue as `acquire`)
   * that answers at once, waiting or granted. Read it back with `client.ticket(id)`,
   * `client.watchTicket(id)`, within its keepalive. Retried after network errors with one
   * Idempotency-Key, so a retry never takes a second place.
   */
  async takeTicket(opts: TicketOptions = {}): Promise<Ticket> {
    checkOptions("takeTicket", opts, TICKET_OPTIONS);
    const body = this.#t.ticketBody({ weight: opts.weight ?? 1 }, opts);
    const key = opts.idempotencyKey ?? randomKey();
    return this.#orCreate(() => this.#t.takeTicket(`${this.#path}/tickets`, body, { ...opts, idempotencyKey: key }));
  }
}

export type MapFn<T, R> = (item: T, index: number, signal: AbortSignal) => R | PromiseLike<R>;

async function mapLimitWith<T, R>(
  sem: Semaphore,
  items: Iterable<T> | AsyncIterable<T>,
  limit: number,
  fn: MapFn<T, R>,
  signal?: AbortSignal,
): Promise<R[]> {
  if (!(limit >= 1)) throw new RangeError("mapLimit: limit must be at least 1");
  const results: R[] = [];
  const stop = new AbortController();
  const onAbort = () => stop.abort(signal!.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  let failed = false;
  let error: unknown;
  const fail = (e: unknown) => {
    if (failed) return;
    failed = true;
    error = e;
    stop.abort(e);
  };
  const running = new Set<Promise<void>>();
  let n = 0;
  try {
    for await (const item of items) {
      if (failed) break;
      while (running.size >= limit) await Promise.race(running);
      if (failed) break;
      let permit: Permit;
      try {
        // One acquire at a time: items start in input order.
        permit = await sem.acquire({ weight: 1, signal: stop.signal });
      } catch (e) {
        fail(e);
        break;
      }
      if (failed) {
        await permit.release();
        break;
      }
      const i = n++;
      const task = (async () => {
        try {
          results[i] = await fn(item, i, permit.signal);
        } catch (e) {
          fail(e);
        } finally {
          await permit.release();
        }
      })();
      running.add(task);
      void task.then(() => running.delete(task));
    }
  } catch (e) {
    fail(e); // the iterable itself threw
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
  await Promise.all(running);
  if (failed) throw error;
  results.length = n;
  return results;
}

interface LegacyReply {
  name: string;
  value: number;
}

/** The five routes of the original Node-RED flow (the legacy API). */
export interface LegacyApi {
  /** POST /semaphore: `created` is false when the name existed (303; nothing changed). */
  create(name: string, value: number): Promise<{ name: string; value: number; created: boolean }>;
  /** DELETE /semaphore/{name}: false when there was no such name. */
  delete(name: string): Promise<boolean>;
  /** GET /semaphore/value/{name}: the available units. Throws SemaNotFoundError. */
  value(name: string): Promise<number>;
  /** POST /semaphore/up: adds one unit; the new value. */
  up(name: string): Promise<number>;
  /** POST /semaphore/down: takes one unit without a lease: the new value, or null when locked. */
  down(name: string): Promise<number | null>;
}

function legacyApi(t: Transport): LegacyApi {
  return {
    async create(name, value) {
      checkName("legacy.create(name): name", name);
      const r = await t.send("POST", "/semaphore", { body: { name, value }, accept: [303] });
      const v = JSON.parse(r.text) as LegacyReply;
      return { name: v.name, value: v.value, created: r.status !== 303 };
    },
    async delete(name) {
      const r = await t.send("DELETE", `/semaphore/${nameSeg("legacy.delete(name): name", name)}`, { accept: [404] });
      return r.status !== 404;
    },
    async value(name) {
      return (await t.json<LegacyReply>("GET", `/semaphore/value/${nameSeg("legacy.value(name): name", name)}`)).value;
    },
    async up(name) {
      checkName("legacy.up(name): name", name);
      return (await t.json<LegacyReply>("POST", "/semaphore/up", { body: { name } })).value;
    },
    async down(name) {
      checkName("legacy.down(name): name", name);
      const r = await t.send("POST", "/semaphore/down", { body: { name }, accept: [409] });
      return r.status === 409 ? null : (JSON.parse(r.text) as LegacyReply).value;
    },
  };
}

/** A connection to one semad. Make one with `createClient()`. */
export class SemaClient {
  readonly url: string;
  /** How this client sends its requests: `"node"` (node:http) or `"fetch"`. */
  readonly transport: TransportKind;
  /** The legacy five-endpoint API. */
  readonly legacy: LegacyApi;
  readonly #t: Transport;

  constructor(opts: ClientOptions = {}) {
    this.#t = new Transport(opts);
    this.url = this.#t.url;
    this.transport = this.#t.http.kind;
    this.legacy = legacyApi(this.#t);
  }

  /**
   * A handle on semaphore `name`, for work that needs only the acquire right: it sends
   * nothing. Its first acquire (or `wait()`, or ticket) finds out whether the semaphore
   * exists: without `capacity`, one that does not is SemaNotFoundError; with `capacity`, it
   * is created then (PUT, which needs the admin right) and the request sent again. An
   * existing semaphore is used whatever its capacity (`state()` tells it, with the read
   * right; `createSemaphore()` checks it).
   */
  async semaphore(name: string, opts: SemaphoreOptions = {}): Promise<Semaphore> {
    checkOptions("semaphore", opts, SEMAPHORE_OPTIONS);
    nameSeg("semaphore(name): name", name);
    return new Semaphore(this.#t, this, name, opts.capacity, opts);
  }

  /**
   * Creates semaphore `name` with `capacity` now (PUT: the admin right) and returns a handle
   * on it; `opts` may also give its limits (`tenantMax`, `ratePerS`, `rateBurst`). One that
   * exists with this capacity and limits is fine; with others, SemaConflictError.
   */
  async createSemaphore(name: string, capacity: number | SemaphoreOptions): Promise<Semaphore> {
    const o: SemaphoreOptions = typeof capacity === "number" ? { capacity } : capacity;
    checkOptions("createSemaphore", o, SEMAPHORE_OPTIONS);
    const path = `/v1/semaphores/${nameSeg("createSemaphore(name): name", name)}`;
    const st = await this.#t.json<SemaphoreState>("PUT", path, { body: { capacity: o.capacity, ...limitsBody(o) } });
    return new Semaphore(this.#t, this, name, st.capacity, o);
  }

  /**
   * Takes units of several semaphores at once, or nothing (POST /v1/acquire): the request
   * waits in each one's line (one long poll), holds nothing until it has them all, and comes
   * back as one permit with a fence per semaphore, renewed and released as one. `parts` is a
   * list of `{ name, weight }` or `{ gpu: 2, db: 1 }`. Throws as `sem.acquire` does, and
   * SemaNotFoundError when one of the semaphores does not exist.
   */
  async acquireAll(parts: readonly Part[] | Readonly<Record<string, number>>, opts: AcquireAllOptions = {}): Promise<MultiPermit> {
    checkOptions("acquireAll", opts, ACQUIRE_ALL_OPTIONS);
    const body = { semaphores: partsBody("acquireAll", parts) };
    return (await this.#t.acquire("/v1/acquire", body, opts, (r, sentAt) => new MultiPermit(this.#t, r, sentAt))) as MultiPermit;
  }

  /**
   * Takes a ticket on several semaphores at once (POST /v1/tickets): a place in each one's
   * line, answered at once, that holds nothing until it is granted one lease on them all,
   * as `acquireAll` is. `parts` as for `acquireAll`. Read, watch and leave it as any ticket
   * (its `position` is that of the line where it stands furthest back); `ticketPermit` of
   * the granted ticket is a MultiPermit. Throws as `sem.takeTicket` does, and
   * SemaNotFoundError when one of the semaphores does not exist.
   */
  async takeTicketAll(parts: readonly Part[] | Readonly<Record<string, number>>, opts: TicketAllOptions = {}): Promise<MultiTicket> {
    checkOptions("takeTicketAll", opts, TICKET_ALL_OPTIONS);
    const body = this.#t.ticketBody({ semaphores: partsBody("takeTicketAll", parts) }, opts);
    return (await this.#t.takeTicket("/v1/tickets", body, opts)) as MultiTicket;
  }

  /** Runs `fn(permit)` holding the units of several semaphores at once; releases when it settles. */
  async withAll<T>(parts: readonly Part[] | Readonly<Record<string, number>>, opts: AcquireAllOptions, fn: (permit: MultiPermit) => T | PromiseLike<T>): Promise<T> {
    const permit = await this.acquireAll(parts, opts);
    try {
      return await fn(permit);
    } finally {
      await permit.release();
    }
  }

  /** Takes the lock on `key` (keyed-mutex `lock`/`lockShared`); one long-poll request. */
  async lock(key: string, opts: LockOptions = {}): Promise<Lock> {
    checkOptions("lock", opts, LOCK_OPTIONS);
    return (await this.#t.acquire(
      `/v1/locks/${nameSeg("lock(key): key", key)}/acquire`,
      { mode: opts.mode ?? "exclusive" },
      opts,
      (r, sentAt) => new Lock(this.#t, r, sentAt),
    )) as Lock;
  }

  /** `lock(key, { ...opts, mode: "shared" })`. */
  lockShared(key: string, opts: Omit<LockOptions, "mode"> = {}): Promise<Lock> {
    return this.lock(key, { ...opts, mode: "shared" });
  }

  /** Takes the lock if it is free now (never queues): the lock, or null. */
  async tryLock(key: string, opts: Omit<LockOptions, "timeoutMs"> = {}): Promise<Lock | null> {
    try {
      return await this.lock(key, { ...opts, timeoutMs: 0 });
    } catch (e) {
      if (e instanceof SemaUnavailableError) return null;
      throw e;
    }
  }

  /** Runs `fn(lock)` holding the lock on `key`; unlocks when it settles (also on throw). */
  withLock<T>(key: string, fn: (lock: Lock) => T | PromiseLike<T>): Promise<T>;
  withLock<T>(key: string, opts: LockOptions, fn: (lock: Lock) => T | PromiseLike<T>): Promise<T>;
  async withLock<T>(key: string, a: unknown, b?: unknown): Promise<T> {
    const [opts, fn] = (typeof a === "function" ? [{}, a] : [a, b]) as [LockOptions, (lock: Lock) => T | PromiseLike<T>];
    const lock = await this.lock(key, opts);
    try {
      return await fn(lock);
    } finally {
      await lock.unlock();
    }
  }

  /** The state of the lock on `key`; throws SemaNotFoundError when nobody holds or awaits it. */
  async lockState(key: string): Promise<LockState> {
    return this.#t.json<LockState>("GET", `/v1/locks/${nameSeg("lockState(key): key", key)}`);
  }

  /**
   * `mapLimit(items, limit, fn)` of the async libraries, fleet-wide: every call holds one unit of
   * semaphore `name` (created with capacity `limit` if missing), so at most `limit` run at
   * once across all processes. Results come back in input order; the first error stops new
   * work (calls already running finish, their `signal` argument is not fired) and is thrown.
   */
  async mapLimit<T, R>(
    items: Iterable<T> | AsyncIterable<T>,
    limit: number,
    fn: MapFn<T, R>,
    opts: { name: string; signal?: AbortSignal },
  ): Promise<R[]> {
    checkOptions("mapLimit", opts, MAP_LIMIT_OPTIONS);
    if (!opts?.name) throw new SemaInvalidRequestError("mapLimit needs { name }: the semaphore shared by the fleet", { code: "invalid_request" });
    const sem = await this.semaphore(opts.name, { capacity: limit });
    return mapLimitWith(sem, items, limit, fn, opts.signal);
  }

  /** A lease by id (GET /v1/leases/{id}). Throws SemaLeaseLostError once it ended. */
  lease(id: string): Promise<LeaseReply> {
    return this.#t.json("GET", `/v1/leases/${seg(id)}`, { lease: true });
  }

  /**
   * A ticket by id (GET /v1/tickets/{id}); with `waitMs`, a long-poll that answers when its
   * status or position changes. Throws SemaTicketEndedError once it left the line or its
   * lease ended, SemaNotFoundError for an unknown id.
   */
  async ticket(id: string, opts: TicketReadOptions = {}): Promise<Ticket> {
    checkOptions("ticket", opts, TICKET_READ_OPTIONS);
    const q = opts.waitMs !== undefined ? `?wait=${Math.max(0, Math.floor(opts.waitMs))}ms` : "";
    const r = await this.#t.retrying("GET", `/v1/tickets/${seg(id)}${q}`, {
      signal: opts.signal,
      wait: opts.waitMs !== undefined,
    });
    return toTicket(JSON.parse(r.text) as TicketReply);
  }

  /** Leaves the line (DELETE /v1/tickets/{id}); a granted ticket's lease is released. Resolves if it had already ended. */
  async leaveTicket(id: string): Promise<void> {
    await this.#t.retrying("DELETE", `/v1/tickets/${seg(id)}`, { accept: [404, 410] });
  }

  /**
   * The ticket's updates as an async iterator (GET /v1/tickets/{id}/events): its state now,
   * then each change (positions at most once per poll_after_ms), reconnecting with
   * `Last-Event-ID` after a dropped connection. Ends after the ticket is granted (with that
   * state) or on `break`/`signal`; throws SemaTicketEndedError if it ends while waiting, and
   * SemaNetworkError if the first connection gets no reply for `retryMs`.
   */
  watchTicket(id: string, opts: WatchOptions = {}): AsyncIterableIterator<Ticket> {
    checkOptions("watchTicket", opts, WATCH_OPTIONS);
    return watchTicketEvents(this.#t, id, opts);
  }

  /**
   * A Permit for a granted ticket's lease: renewed in the background, released like any
   * other. A lease on several semaphores (a ticket of `takeTicketAll`) is a MultiPermit.
   */
  ticketPermit(ticket: MultiTicket): MultiPermit;
  ticketPermit(ticket: Ticket): Permit;
  ticketPermit(ticket: Ticket): Permit {
    if (ticket.status !== "granted" || !ticket.lease) throw new TypeError("ticketPermit: the ticket is not granted");
    if (ticket.lease.semaphores) return new MultiPermit(this.#t, ticket.lease, Date.now());
    return new Permit(this.#t, ticket.lease, Date.now());
  }

  /** Admin revoke of any lease: its holder's `permit.signal` fires at its next renewal. */
  async revoke(id: string): Promise<void> {
    await this.#t.send("POST", `/v1/leases/${seg(id)}/revoke`, { lease: true });
  }

  /**
   * The semaphore's Server-Sent Events as an async iterator. After a dropped connection it
   * reconnects with `Last-Event-ID` (nothing missed, nothing twice; a `reset` event when
   * semad no longer has what was missed; a `deleted` event with `data.missed: true` when the
   * semaphore was deleted while the stream was down). Ends after `deleted`, on `break`, or when
   * `signal` aborts (quietly). Throws SemaNotFoundError if the semaphore does not exist, and
   * SemaNetworkError if the first connection gets no reply for `retryMs`.
   */
  watch(name: string, opts: WatchOptions = {}): AsyncIterableIterator<SemaEvent> {
    checkOptions("watch", opts, WATCH_OPTIONS);
    nameSeg("watch(name): name", name);
    return watchEvents(this.#t, name, opts);
  }

  /** Releases every permit and lock this client still holds, then closes its idle connections. */
  async close(): Promise<void> {
    await Promise.all([...this.#t.permits].map((p) => p.release()));
    this.#t.http.close();
  }
}

async function* watchEvents(t: Transport, name: string, opts: WatchOptions): AsyncGenerator<SemaEvent> {
  let last = opts.lastEventId;
  let connected = false;
  const outer = opts.signal;
  // Until the first connection, no reply for retryMs is a SemaNetworkError (a wrong URL, or
  // semad not started, must not look like a quiet semaphore); after it, a drop is resumed.
  const giveUp = Date.now() + t.retryMs;
  for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
    if (outer?.aborted) return;
    const ac = new AbortController();
    const onAbort = () => ac.abort(outer!.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    try {
      let res: HttpStream;
      try {
        res = await t.http.stream(
          `/v1/semaphores/${seg(name)}/events`,
          {
            accept: "text/event-stream",
            ...(last ? { "last-event-id": last } : {}),
            ...(t.authorization ? { authorization: t.authorization } : {}),
          },
          ac.signal,
        );
      } catch (e) {
        if (outer?.aborted) return;
        const err = unreachable(t, e);
        if (!retryable(err) || (!connected && Date.now() + delay > giveUp)) throw err;
        await sleep(delay, outer).catch(() => {});
        continue;
      }
      if (res.status === 404 && connected) {
        // It was deleted while the stream was down (the `deleted` event was missed).
        yield { id: undefined, type: "deleted", data: { name, missed: true } };
        return;
      }
      if (res.status < 200 || res.status >= 300 || !res.body) throw errorFromReply(res.status, await res.text());
      connected = true;
      delay = 100;
      try {
        for await (const raw of parseEventStream(res.body)) {
          if (raw.id) last = raw.id;
          let data: Record<string, unknown>;
          try {
            data = JSON.parse(raw.data) as Record<string, unknown>;
          } catch {
            data = { raw: raw.data };
          }
          yield { id: raw.id, type: raw.event as SemaEventType, data };
          if (raw.event === "deleted") return;
        }
      } catch {
        /* the connection dropped: resume below */
      }
      if (outer?.aborted) return;
    } finally {
      outer?.removeEventListener("abort", onAbort);
      ac.abort();
    }
    await sleep(delay, outer).catch(() => {});
  }
}

async function* watchTicketEvents(t: Transport, id: string, opts: WatchOptions): AsyncGenerator<Ticket> {
  let last = opts.lastEventId;
  let connected = false;
  const outer = opts.signal;
  const giveUp = Date.now() + t.retryMs; // as in watchEvents
  for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
    if (outer?.aborted) return;
    const ac = new AbortController();
    const onAbort = () => ac.abort(outer!.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    try {
      let res: HttpStream;
      try {
        res = await t.http.stream(
          `/v1/tickets/${seg(id)}/events`,
          {
            accept: "text/event-stream",
            ...(last ? { "last-event-id": last } : {}),
            ...(t.authorization ? { authorization: t.authorization } : {}),
          },
          ac.signal,
        );
      } catch (e) {
        if (outer?.aborted) return;
        const err = unreachable(t, e);
        if (!retryable(err) || (!connected && Date.now() + delay > giveUp)) throw err;
        await sleep(delay, outer).catch(() => {});
        continue;
      }
      if (res.status < 200 || res.status >= 300 || !res.body) throw errorFromReply(res.status, await res.text());
      connected = true;
      delay = 100;
      try {
        for await (const raw of parseEventStream(res.body)) {
          if (raw.event === "ended") throw errorFromReply(410, raw.data);
          if (raw.id) last = raw.id;
          const tk = toTicket(JSON.parse(raw.data) as TicketReply, raw.id);
          yield tk;
          if (tk.status === "granted") return;
        }
      } catch (e) {
        if (e instanceof SemaError) throw e;
        /* the connection dropped: resume below */
      }
      if (outer?.aborted) return;
    } finally {
      outer?.removeEventListener("abort", onAbort);
      ac.abort();
    }
    await sleep(delay, outer).catch(() => {});
  }
}

/** A client for the semad at `url` (default `SEMA_SERVER` or `http://127.0.0.1:7070`). */
export function createClient(opts: ClientOptions = {}): SemaClient {
  return new SemaClient(opts);
}
