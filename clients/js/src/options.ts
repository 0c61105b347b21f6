// SPDX-License-Identifier: MIT
// options.ts - an options object may carry only the keys its method documents: a misspelt one
// (`timeout` for `timeoutMs`) is a TypeError naming it, never a default silently taken. In
// TypeScript an object literal with an unknown key does not compile; plain JavaScript, or an
// object built elsewhere, gets here.

/** Edit distance (insert, delete, replace, swap of neighbours), stopping above `max`. */
function distance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  const d: number[][] = [];
  for (let i = 0; i <= a.length; i++) d.push([i]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/** The known key the unknown one most likely meant, or undefined. */
function likely(key: string, known: readonly string[]): string | undefined {
  // the unit left out ("timeout" for "timeoutMs"), or another case ("ttl_ms", "TTLms")
  const plain = key.replace(/_/g, "").toLowerCase();
  const unit = known.find((k) => k === `${key}Ms` || k.toLowerCase() === plain || k.toLowerCase() === `${plain}ms`);
  if (unit) return unit;
  const max = key.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestD = max + 1;
  for (const k of known) {
    const d = distance(key, k, max);
    if (d < bestD) [best, bestD] = [k, d];
  }
  return best;
}

/**
 * Throws a TypeError naming the first key of `opts` that is not in `known`
 * (`acquire: unknown option "timeout" (did you mean "timeoutMs"?); the options are: ...`),
 * or a string option semad could not take (checkText(), checkKey()): before any request.
 * `undefined` and `null` pass (no options); so does a number where the method takes one.
 */
export function checkOptions(where: string, opts: unknown, known: readonly string[]): void {
  if (opts === null || typeof opts !== "object") return;
  for (const key in opts) {
    if (known.includes(key)) continue;
    const hint = likely(key, known);
    throw new TypeError(
      `${where}: unknown option ${JSON.stringify(key)}${hint ? ` (did you mean ${JSON.stringify(hint)}?)` : ""}; ` +
        `the options are: ${known.join(", ")}`,
    );
  }
  const o = opts as { owner?: unknown; tenant?: unknown; idempotencyKey?: unknown };
  checkText(`${where}: owner`, o.owner);
  checkText(`${where}: tenant`, o.tenant);
  checkKey(`${where}: idempotencyKey`, o.idempotencyKey);
}

/**
 * Throws a TypeError naming `what` ("acquire: tenant") when `s`, a string sent to semad, is
 * not a string or holds a lone surrogate: it has no UTF-8, so semad would refuse it after
 * the request went out (or encodeURIComponent throw a URIError naming nothing).
 * `undefined` and `null` pass (not sent).
 */
export function checkText(what: string, s: unknown): void {
  if (s === undefined || s === null) return;
  if (typeof s !== "string") throw new TypeError(`${what} must be a string, not ${typeof s}`);
  const i = s.search(/\p{Cs}/u); // a lone surrogate: a UTF-16 unit that has no UTF-8
  if (i >= 0) throw new TypeError(`${what} must be valid UTF-8 text, not a string with a lone surrogate (at ${i})`);
}

/** checkText() for an Idempotency-Key, which also must be non-empty and hold no control character (a header cannot carry one). */
export function checkKey(what: string, key: unknown): void {
  checkText(what, key);
  if (typeof key === "string" && (key === "" || /[\x00-\x1f\x7f]/.test(key)))
    throw new TypeError(`${what} must be a non-empty string without control characters`);
}

export const CLIENT_OPTIONS = ["url", "owner", "token", "ttlMs", "retryMs", "transport", "fetch", "maxSockets", "ca", "cert", "key"] as const;
export const ACQUIRE_OPTIONS = ["weight", "signal", "timeoutMs", "ttlMs", "owner", "tenant"] as const;
export const ACQUIRE_ALL_OPTIONS = ["signal", "timeoutMs", "ttlMs", "owner", "tenant"] as const;
export const LOCK_OPTIONS = ["mode", "signal", "timeoutMs", "ttlMs", "owner"] as const;
export const WAIT_OPTIONS = ["signal", "timeoutMs"] as const;
export const TICKET_OPTIONS = ["weight", "ttlMs", "owner", "keepaliveMs", "idempotencyKey", "signal", "tenant"] as const;
export const TICKET_ALL_OPTIONS = ["ttlMs", "owner", "keepaliveMs", "idempotencyKey", "signal", "tenant"] as const;
export const TICKET_READ_OPTIONS = ["waitMs", "signal"] as const;
export const WATCH_OPTIONS = ["signal", "lastEventId"] as const;
export const SEMAPHORE_OPTIONS = ["capacity", "tenantMax", "ratePerS", "rateBurst"] as const;
export const CONFIGURE_OPTIONS = ["capacity", "tenantMax", "ratePerS", "rateBurst"] as const;
export const MAP_LIMIT_OPTIONS = ["name", "signal"] as const;
