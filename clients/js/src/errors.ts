// SPDX-License-Identifier: MIT
// Typed errors. Every error semad answers is an RFC 9457 problem document whose `code`
// names the case (docs/http-api.md, "Errors"); each code maps to one class below.

/** The problem+json document semad answers errors with. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  code?: string;
  detail?: string;
  [field: string]: unknown;
}

export interface SemaErrorInit {
  code: string;
  status?: number;
  detail?: string;
  problem?: Problem;
  retryAfterMs?: number | undefined;
  cause?: unknown;
}

/** Base class of every error this package throws (except aborts, which reject with the signal's reason). */
export class SemaError extends Error {
  /** semad's problem code (`timeout`, `unavailable`, `not_found`, ...) or a client-side one (`network`, `unreachable`). */
  readonly code: string;
  /** HTTP status of the reply, 0 when there was no reply. */
  readonly status: number;
  readonly detail: string | undefined;
  readonly problem: Problem | undefined;
  /** The wait in ms that the reply's `Retry-After` header asked for; undefined without one. */
  readonly retryAfterMs: number | undefined;
  constructor(message: string, init: SemaErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = init.status ?? 0;
    this.detail = init.detail;
    this.problem = init.problem;
    this.retryAfterMs = init.retryAfterMs;
  }
}

/** 409 `timeout`: not granted within `timeoutMs`. */
export class SemaTimeoutError extends SemaError {}
/** 409 `unavailable`: a try that could not be granted at once (also a legacy `down` on 0). */
export class SemaUnavailableError extends SemaError {}
/** A lease ended while held: `lease_expired`, `lease_revoked`, `lease_released`, `deleted`, or `unreachable` (no renewal got through before the ttl ran out). */
export class SemaLeaseLostError extends SemaError {}
/** 404 `not_found`. */
export class SemaNotFoundError extends SemaError {}
/** 409 `conflict`: the semaphore exists with another capacity. */
export class SemaConflictError extends SemaError {}
/** 410 `deleted`: the semaphore was deleted while the request waited. */
export class SemaDeletedError extends SemaError {}
/** 409 `overflow`: released more than is held. */
export class SemaOverflowError extends SemaError {}
/** 400 `invalid_request`, `name_too_long`, `bad_request`, 409 `idempotency_key_mismatch` / `idempotency_key_replaced`, and any other 4xx without a class of its own (405, 413, 414, 431). */
export class SemaInvalidRequestError extends SemaError {}
/** 429 `limit_reached`. */
export class SemaLimitError extends SemaError {}
/** 503 `shutting_down`, `store_unavailable`, `out_of_memory`, and other server-side failures. */
export class SemaServerError extends SemaError {}
/**
 * `unauthorized` (401: semad runs with `--auth` and the request has no token, or an unknown
 * one) and `forbidden` (403: the token lacks the right, the name is outside its prefixes, or
 * the lease is another token's). The detail says which.
 */
export class SemaAuthError extends SemaError {}
/** 410 `ticket_ended`: the ticket left the line (deleted, dropped unread after its keepalive, its semaphore deleted) or its lease ended. */
export class SemaTicketEndedError extends SemaError {}
/** 501 `not_supported`: semad's engine back end does not serve this (tickets on a back end without them). */
export class SemaNotSupportedError extends SemaError {}
/** `network`: no reply (connection refused or dropped). Retried where that is safe before it surfaces. */
export class SemaNetworkError extends SemaError {}
/**
 * No reply because TLS failed, which sending again would not fix: never retried. `code` says
 * why, as in the C and Python clients: `tls_untrusted` (semad's certificate: give its CA,
 * `ca` or SEMA_CACERT), `tls_cacert` (that file), `tls_client_certificate` (`cert`/`key`, or
 * SEMA_CERT/SEMA_CERT_KEY, unusable), `tls_certificate_required` (semad asked for a client
 * certificate and none was given), `tls_certificate_refused`, `tls` (another). A
 * SemaNetworkError, so code that catches those catches it too.
 */
export class SemaTlsError extends SemaNetworkError {}

/** A Node.js TLS verification code: semad's certificate is not trusted. */
const UNTRUSTED = /^(UNABLE_TO_|SELF_SIGNED_CERT|DEPTH_ZERO_SELF_SIGNED|CERT_|ERR_TLS_CERT_ALTNAME|HOSTNAME_MISMATCH|INVALID_CA)/;

/**
 * The SemaTlsError of a request that got no reply because of TLS, or undefined when `e` is
 * not about TLS. `url` is semad's; `hasCert` whether a client certificate was given.
 */
export function tlsError(url: string, e: unknown, hasCert: boolean): SemaTlsError | undefined {
  const err = e as { code?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown }; semaTls?: string };
  const make = (code: string, message: string) => new SemaTlsError(message, { code, detail: message, cause: e });
  if (typeof err?.semaTls === "string") return make(err.semaTls, String(err.message));
  const code = String(err?.code ?? err?.cause?.code ?? "");
  const why = String(err?.cause?.message ?? err?.message ?? e);
  if (UNTRUSTED.test(code))
    return make("tls_untrusted", `the TLS certificate of ${url} is not trusted: ${why} (give semad's CA with the \`ca\` option or SEMA_CACERT)`);
  if (/^ERR_SSL_.*ALERT/.test(code) && !hasCert)
    return make("tls_certificate_required",
      `${url} asked for a client certificate and none was given (the \`cert\` and \`key\` options, or SEMA_CERT and SEMA_CERT_KEY; TLS: ${why})`);
  if (/^ERR_SSL_.*ALERT/.test(code)) return make("tls_certificate_refused", `${url} refused the client certificate (TLS: ${why})`);
  if (/^(ERR_SSL_|ERR_OSSL_|ERR_TLS_)/.test(code)) return make("tls", `TLS to semad at ${url} failed: ${why}`);
  return undefined;
}

const LEASE_ENDED = new Set(["lease_expired", "lease_revoked", "lease_released", "deleted"]);

/**
 * The error for a reply with a non-success status. `body` is the reply text (a problem
 * document, or plain text from the legacy routes). `lease` is true for requests on a
 * held lease (renew, release), where a 410 means the lease was lost. `retryAfter` is the
 * reply's Retry-After header, if it had one.
 */
export function errorFromReply(status: number, body: string, lease = false, retryAfter?: string): SemaError {
  let problem: Problem | undefined;
  try {
    const parsed: unknown = JSON.parse(body);
    if (parsed && typeof parsed === "object" && typeof (parsed as Problem).code === "string") {
      problem = parsed as Problem;
    }
  } catch {
    /* plain text */
  }
  const code = problem?.code ?? codeForStatus(status);
  const detail = problem?.detail ?? (body.trim() || undefined);
  const message = `semad: ${status} ${code}${detail ? `: ${detail}` : ""}`;
  const init: SemaErrorInit = { code, status, detail, problem, retryAfterMs: retryAfterMs(retryAfter) };
  if (lease && LEASE_ENDED.has(code)) return new SemaLeaseLostError(message, init);
  switch (code) {
    case "timeout":
      return new SemaTimeoutError(message, init);
    case "unavailable":
      return new SemaUnavailableError(message, init);
    case "not_found":
      return new SemaNotFoundError(message, init);
    case "conflict":
      return new SemaConflictError(message, init);
    case "deleted":
      return new SemaDeletedError(message, init);
    case "lease_expired":
    case "lease_revoked":
    case "lease_released":
      return new SemaLeaseLostError(message, init);
    case "overflow":
      return new SemaOverflowError(message, init);
    case "limit_reached":
      return new SemaLimitError(message, init);
    case "unauthorized":
    case "forbidden":
      return new SemaAuthError(message, init);
    case "ticket_ended":
      return new SemaTicketEndedError(message, init);
    case "not_supported":
      return new SemaNotSupportedError(message, init);
  }
  if (status >= 500) return new SemaServerError(message, init);
  if (status >= 400 && status < 500 && status !== 408) return new SemaInvalidRequestError(message, init);
  return new SemaError(message, init);
}

/** A Retry-After header (delay-seconds or an HTTP-date, RFC 9110) in ms from now; undefined when absent or unreadable. */
function retryAfterMs(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (/^\s*\d+\s*$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function codeForStatus(status: number): string {
  switch (status) {
    case 400:
      return "invalid_request";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
      return "request_timeout";
    case 409:
      return "conflict";
    case 413:
      return "body_too_large";
    case 414:
      return "uri_too_long";
    case 429:
      return "limit_reached";
    case 431:
      return "headers_too_large";
    case 503:
      return "server_unavailable";
    default:
      return `http_${status}`;
  }
}
