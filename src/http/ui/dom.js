// SPDX-License-Identifier: MIT
// dom.js - the page's few DOM helpers: elements built from data (every string becomes a text
// node, never markup, so a name like <img src=x onerror=...> shows as the text it is), rows
// kept by key across updates (a focused button stays focused), one render per animation
// frame, the live region, and the formats of counts, ages and times.

/** An element: `attrs` are attributes (on* are listeners, `class`, `text`, `data-*`,
 * `aria-*`; false/null/undefined ones are left out); children are nodes or strings. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Set a node's text only when it differs (no layout work for an unchanged cell). */
export function setText(el, text) {
  const t = String(text);
  if (el.textContent !== t) el.textContent = t;
}

/** Make `parent`'s children the nodes `nodes`, in order, moving as few as it can: nodes
 * already in place stay (with their focus), missing ones are inserted, the rest removed. */
export function placeChildren(parent, nodes) {
  const keep = new Set(nodes);
  for (const c of [...parent.childNodes]) if (!keep.has(c)) c.remove();
  let at = parent.firstChild;
  for (const n of nodes) {
    if (n === at) {
      at = at.nextSibling;
      continue;
    }
    parent.insertBefore(n, at);
  }
}

/** Rows kept by key: `rows(items)` returns the row of each item, making a row with
 * `make(item)` the first time a key is seen and calling `update(row, item)` each time;
 * rows of keys no longer given are dropped. */
export function keyedRows(keyOf, make, update) {
  let byKey = new Map();
  return (items) => {
    const next = new Map();
    const out = items.map((item) => {
      const k = keyOf(item);
      let row = byKey.get(k) ?? next.get(k);
      if (!row) row = make(item);
      update(row, item);
      next.set(k, row);
      return row;
    });
    byKey = next;
    return out;
  };
}

/** `fn` at most once per animation frame, however often it is asked for. */
export function perFrame(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      fn();
    });
  };
}

let liveTimer = null;
let liveQueue = [];
/** Say `msg` in the live region (screen readers read it). Messages that come within a
 * second are said together, so a burst of changes is one announcement. */
export function announce(msg) {
  liveQueue.push(msg);
  if (liveTimer) return;
  liveTimer = setTimeout(() => {
    const region = document.getElementById("live");
    const text = liveQueue.length > 4
      ? `${liveQueue.slice(0, 3).join(". ")}. And ${liveQueue.length - 3} more changes.`
      : liveQueue.join(". ");
    liveQueue = [];
    liveTimer = null;
    if (region) region.textContent = text;
  }, 1000);
}

const count = new Intl.NumberFormat(undefined);
/** A count with the reader's digit grouping. */
export function fmtCount(n) {
  return n === null || n === undefined ? "—" : count.format(n);
}

/** A rate: one decimal below 10, whole above. */
export function fmtRate(r) {
  if (r === null || r === undefined || !Number.isFinite(r)) return "—";
  return r < 10 ? r.toFixed(1) : count.format(Math.round(r));
}

/** A duration in ms as people read it: "850 ms", "12 s", "4 min 5 s", "3 h 20 min". */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr} h ${m % 60} min`;
  return `${Math.floor(hr / 24)} d ${hr % 24} h`;
}

/** A wall-clock time of day (the reader's zone). */
export function fmtTime(ms) {
  return new Date(ms).toLocaleTimeString(undefined, { hour12: false });
}

/** The start of a lease or ticket id, enough to tell them apart (the whole id is in the
 * row's accessible name and title). */
export function shortId(id) {
  return id && id.length > 10 ? `${id.slice(0, 8)}…` : id ?? "";
}
