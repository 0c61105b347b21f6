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
 * (`acquire: unknown option "timeout" (did you mean "timeoutMs"?); the options are: ...`).
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
