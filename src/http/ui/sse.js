// SPDX-License-Identifier: MIT
// sse.js - one semaphore's event stream, read with fetch rather than EventSource so that it
// can carry the tab's token (EventSource sends no Authorization header). It does what
// EventSource does: it reconnects after a drop, with Last-Event-ID, so semad sends the events
// it missed first (or "reset" when it no longer has them); and one thing more: a stream that
// stays silent past two heartbeats is taken for dead and opened again.

import { authHeaders, reportConnection } from "./api.js";

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 5000;

/** Parse SSE text as it arrives: `feed(chunk)` calls `onEvent({id, event, data})` for each
 * complete event and `onAny()` for every line (pings included). */
export function sseParser(onEvent, onAny) {
  let buf = "";
  let ev = { id: undefined, event: "message", data: [] };
  function line(l) {
    onAny();
    if (l === "") {
      if (ev.data.length > 0) onEvent({ id: ev.id, event: ev.event, data: ev.data.join("\n") });
      ev = { id: ev.id, event: "message", data: [] };
      return;
    }
    if (l.startsWith(":")) return;
    const i = l.indexOf(":");
    const field = i < 0 ? l : l.slice(0, i);
    const value = i < 0 ? "" : l.slice(i + 1).replace(/^ /, "");
    if (field === "id") ev.id = value;
    else if (field === "event") ev.event = value;
    else if (field === "data") ev.data.push(value);
  }
  return {
    feed(chunk) {
      buf += chunk;
      let m;
      while ((m = /\r\n|\r|\n/.exec(buf)) !== null) {
        if (m[0] === "\r" && m.index === buf.length - 1) break; // a CRLF cut in two
        line(buf.slice(0, m.index));
        buf = buf.slice(m.index + m[0].length);
      }
    },
  };
}

/** Follow `path` (an event stream). `onEvent(ev)` gets each event (its data parsed);
 * `onState(state, detail)` hears "live" once connected, "reconnecting" after a drop (with
 * the error), "gone" when semad says the stream cannot be (404, 403: `detail` is the
 * ApiError-like {status, message}), "ended" when it ended by itself (after "deleted").
 * `heartbeatMs` is semad's --sse-heartbeat. Returns { close() }. */
export function follow(path, { onEvent, onState, heartbeatMs = 15000 }) {
  const ctl = { closed: false, abort: null, lastId: undefined, retryMs: RETRY_MIN_MS };
  run(path, ctl, onEvent, onState, heartbeatMs);
  return {
    close() {
      ctl.closed = true;
      ctl.abort?.abort();
    },
  };
}

async function run(path, ctl, onEvent, onState, heartbeatMs) {
  while (!ctl.closed) {
    let outcome;
    try {
      outcome = await once(path, ctl, onEvent, onState, heartbeatMs);
    } catch (e) {
      if (ctl.closed) return;
      outcome = { retry: true, error: e };
    }
    if (ctl.closed) return;
    if (!outcome.retry) {
      onState(outcome.state, outcome.detail);
      return;
    }
    reportConnection(outcome.reached === true);
    onState("reconnecting", outcome.error);
    await new Promise((r) => setTimeout(r, ctl.retryMs));
    ctl.retryMs = Math.min(ctl.retryMs * 2, RETRY_MAX_MS);
  }
}

/** One connection: resolves with what to do next. */
async function once(path, ctl, onEvent, onState, heartbeatMs) {
  const abort = new AbortController();
  ctl.abort = abort;
  const headers = authHeaders({ Accept: "text/event-stream" });
  if (ctl.lastId) headers["Last-Event-ID"] = ctl.lastId;
  const r = await fetch(path, { headers, cache: "no-store", signal: abort.signal });
  if (r.status === 404 || r.status === 401 || r.status === 403) {
    const p = await r.json().catch(() => ({}));
    return { retry: false, state: "gone", detail: { status: r.status, message: p.detail || "" } };
  }
  if (!r.ok || !r.body) return { retry: true, reached: true, error: new Error(`HTTP ${r.status}`) };
  reportConnection(true);
  ctl.retryMs = RETRY_MIN_MS;
  onState("live");
  let deleted = false;
  // two heartbeats without a byte: the connection is gone, though no FIN came
  let watchdog = null;
  const arm = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => abort.abort(), 2 * heartbeatMs + 1000);
  };
  const parser = sseParser((ev) => {
    if (ev.id) ctl.lastId = ev.id;
    let data = {};
    try {
      data = JSON.parse(ev.data);
    } catch {
      // not JSON: passed on empty
    }
    if (ev.event === "deleted") deleted = true;
    onEvent({ id: ev.id, type: ev.event, data });
  }, arm);
  arm();
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(value);
    }
  } finally {
    clearTimeout(watchdog);
  }
  return deleted ? { retry: false, state: "ended" } : { retry: true, reached: true,
    error: new Error("the stream closed") };
}
