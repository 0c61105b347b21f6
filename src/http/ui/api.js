// SPDX-License-Identifier: MIT
// api.js - semad's v1 API as the page uses it: requests with the tab's token (kept in
// sessionStorage, so it lives as long as the tab and no longer), errors as ApiError with the
// problem document's code and detail, the connection's state (live or reconnecting) for the
// header, and semad's clock (ages are shown in it, whatever the browser's clock says).

const TOKEN_KEY = "sema.token";
const listeners = new Set();
let online = true;
let clockOffset = 0; // semad's clock minus the browser's, ms

export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** The tab's token, or "" (none). */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** Headers for a request: the token, if the tab has one. */
export function authHeaders(extra = {}) {
  const t = token();
  return t ? { ...extra, Authorization: `Bearer ${t}` } : { ...extra };
}

/** Whether semad answered the last request (false: reconnecting). */
export function isOnline() {
  return online;
}

/** `fn(online)` whenever that changes. */
export function onConnection(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Report how the last exchange with semad went (also from the event stream). */
export function reportConnection(ok) {
  if (ok === online) return;
  online = ok;
  for (const fn of listeners) fn(ok);
}

/** semad's clock now (Unix ms), as last measured. */
export function serverNow() {
  return Date.now() + clockOffset;
}

/** Measure semad's clock from its `now` (read at `sentAt`, answered at `gotAt`): the middle
 * of the round trip is the best guess of when it was read. */
export function setServerClock(now, sentAt, gotAt) {
  clockOffset = now - (sentAt + gotAt) / 2;
}

async function problemOf(r) {
  const type = r.headers.get("content-type") || "";
  if (type.includes("json")) {
    const p = await r.json().catch(() => null);
    if (p) return new ApiError(r.status, p.code, p.detail || p.title);
  }
  const text = await r.text().catch(() => "");
  return new ApiError(r.status, null, text.trim() || `HTTP ${r.status}`);
}

/** A request to semad: the parsed JSON reply (null for 204), or an ApiError. A request
 * that got no answer at all marks the connection down (and throws an ApiError of status 0). */
export async function request(method, path, body, signal) {
  const init = { method, headers: authHeaders(), cache: "no-store", signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let r;
  try {
    r = await fetch(path, init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    reportConnection(false);
    throw new ApiError(0, "unreachable", "semad did not answer");
  }
  reportConnection(true);
  if (!r.ok) throw await problemOf(r);
  if (r.status === 204) return null;
  const type = r.headers.get("content-type") || "";
  return type.includes("json") ? r.json() : r.text();
}

export const get = (path, signal) => request("GET", path, undefined, signal);

/** A semaphore name or lock key as a path segment ("/" is part of a name: %2F). */
export const seg = (name) => encodeURIComponent(name);
