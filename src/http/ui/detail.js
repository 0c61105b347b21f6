// SPDX-License-Identifier: MIT
// detail.js - one semaphore, or one keyed lock: its holders (lease, owner, weight, fence, held
// for, expires in), its queue in order (tickets with their place), and for an admin revoke,
// resize and delete, each confirmed first.
//
// A semaphore is followed live through its event stream, the one stream the page opens: an
// event changes the holders at once and then asks for the semaphore's state (at most two
// reads a second, however fast events come), which brings the queue; the timeline keeps the
// recent events. A lock key has no event stream: it is read every interval, like the
// overview. The wait and hold time distributions are /metrics', read every 15 s.

import { get, request, seg, serverNow } from "./api.js";
import { ask } from "./dialogs.js";
import { announce, fmtCount, fmtDuration, fmtRate, fmtTime, h, keyedRows, perFrame,
  placeChildren, setText, shortId } from "./dom.js";
import { drawHistogram, histogram } from "./metrics.js";
import { drawBar } from "./overview.js";
import { follow } from "./sse.js";
import { VirtualTable } from "./table.js";

const REFRESH_MIN_MS = 500; // the least time between two reads of the state
const TIMELINE_MAX = 100;
const RATE_WINDOW_MS = 10000;
const METRICS_EVERY_MS = 15000;

const KIND = { ticket: "ticket", wait_idle: "wait-idle" };
const TENANTS_SHOWN = 5;

/** A holder's or a waiter's owner, with its tenant and whether it is one part of a request
 * on several semaphores. */
function who(x) {
  return (x.owner ?? "—") + (x.tenant ? ` · tenant ${x.tenant}` : "") +
    (x.multi ? " · with other semaphores" : "");
}

/** The summary's rows for a semaphore's limits and tenants (none for a plain one). */
function limitRows(s) {
  const rows = [];
  if (s.tenant_max) rows.push(["At most per tenant", fmtCount(s.tenant_max)]);
  if (s.rate_per_s) {
    rows.push(["Rate", `${fmtCount(s.rate_per_s)}/s, burst ${fmtCount(s.rate_burst)} ` +
      `(${fmtCount(s.tokens)} tokens now)`]);
  }
  const ts = s.tenants ?? [];
  if (ts.length) {
    const shown = ts.slice(0, TENANTS_SHOWN).map((t) =>
      `${t.tenant ?? "(none)"}: ${fmtCount(t.held)} held, ${fmtCount(t.waiting_weight)} waiting`);
    rows.push(["Tenants", shown.join("; ") + (ts.length > TENANTS_SHOWN ? "; …" : "")]);
  }
  return rows;
}

/** What one view of a semaphore or a lock shares: the header, the tables and the actions. */
class Detail {
  constructor(app, what) {
    this.app = app;
    this.what = what; // "semaphore" or "lock"
    this.timers = [];
  }

  /** The frame of the view: title, status line, actions, then `sections`. */
  frame(name, sections) {
    this.title = h("h1", { id: "detail-title", tabindex: "-1" }, name);
    this.status = h("p", { class: "detail-status", role: "status" });
    this.actions = h("div", { class: "actions" });
    this.summary = h("dl", { class: "summary" });
    this.bar = h("div", { class: "bar big", role: "img" }, h("span", { class: "held" }));
    this.el = h("section", { class: "view", "aria-labelledby": "detail-title" },
      h("p", { class: "back" }, h("a", { href: this.what === "lock" ? "#/locks" : "#/" },
        this.what === "lock" ? "← All keyed locks" : "← All semaphores")),
      h("header", { class: "detail-head" }, h("div", {},
        h("p", { class: "kind" }, this.what === "lock" ? "Keyed lock" : "Semaphore"), this.title),
      this.actions), this.status, this.bar, this.summary, sections);
    this.draw = perFrame(() => this.render());
  }

  holderTable(modeColumn) {
    const cols = [
      { label: "Lease", className: "mono", cell: (l) => l.lease },
      { label: "Owner", className: "name", cell: who },
      modeColumn
        ? { label: "Mode", cell: (l) => l.mode ?? "—" }
        : { label: "Weight", className: "num", cell: (l) => fmtCount(l.weight) },
      { label: "Fence", className: "num", cell: (l) => fmtCount(l.fence) },
      { label: "Held for", className: "num", cell: (l) => fmtDuration(serverNow() - l.acquired_at) },
      { label: "Expires in", className: "num", cell: (l) => fmtDuration(l.expires_at - serverNow()) },
    ];
    if (this.app.canAct()) cols.push({ label: "Actions", className: "act", cell: (l) => this.revokeButton(l) });
    return new VirtualTable({ caption: "Holders", columns: cols, key: (l) => l.lease,
      empty: "Nobody holds it." });
  }

  waiterTable(modeColumn) {
    return new VirtualTable({
      caption: "Queue, in order", key: (w) => `${w.position}:${w.since}:${w.owner}`,
      empty: "Nobody waits.",
      columns: [
        { label: "Place", className: "num", cell: (w) => `#${w.position + 1}` },
        { label: "Kind", cell: (w) => modeColumn ? w.mode ?? "—" : KIND[w.kind] ?? "acquire" },
        { label: "Owner", className: "name", cell: who },
        { label: "Weight", className: "num", cell: (w) => fmtCount(w.weight) },
        { label: "Waiting for", className: "num", cell: (w) => fmtDuration(serverNow() - w.since) },
      ],
    });
  }

  /** The revoke button of lease `l`, made once per lease (so it keeps its focus). */
  revokeButton(l) {
    this.buttons ??= new Map();
    let b = this.buttons.get(l.lease);
    if (!b) {
      b = h("button", { type: "button", class: "danger small",
        "aria-label": `Revoke lease ${l.lease}${l.owner ? ` of ${l.owner}` : ""}`,
        onclick: () => this.revoke(l) }, "Revoke");
      this.buttons.set(l.lease, b);
    }
    return b;
  }

  async revoke(l) {
    const done = await ask({
      title: "Revoke this lease?", confirm: "Revoke", danger: true,
      body: [h("p", {}, `Lease ${l.lease}${l.owner ? ` of ${l.owner}` : ""} (weight ${l.weight ?? 1}, ` +
        `fence ${l.fence}) ends now: its units come back and the fence moves on. Its holder's ` +
        "next renew gets 410 lease_revoked.")],
      run: () => request("POST", `v1/leases/${seg(l.lease)}/revoke`),
    });
    if (done) announce(`Lease ${shortId(l.lease)} revoked`);
  }

  setStatus(text, cls) {
    setText(this.status, text);
    this.status.className = `detail-status ${cls || ""}`;
  }

  every(ms, fn) {
    this.timers.push(setInterval(fn, ms));
  }

  hide() {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.closed = true;
  }

  /** /metrics' wait and hold histograms, now and every METRICS_EVERY_MS. */
  followMetrics() {
    this.waitFig = h("figure", { class: "dist" });
    this.holdFig = h("figure", { class: "dist" });
    this.distNote = h("p", { class: "note" }, "Of every semaphore of this semad instance since it " +
      "started (/metrics).");
    const read = async () => {
      try {
        const text = await get("metrics");
        drawHistogram(this.waitFig, "Wait: request to grant", histogram(text, "semad_wait_seconds"));
        drawHistogram(this.holdFig, "Hold: grant to end", histogram(text, "semad_hold_seconds"));
      } catch (e) {
        if (e.status === 403) setText(this.distNote, "This token may not read /metrics (it is " +
          "limited to name prefixes, and /metrics names every semaphore).");
      }
    };
    read();
    this.every(METRICS_EVERY_MS, read);
    return h("section", { "aria-labelledby": "dist-title" },
      h("h2", { id: "dist-title" }, "Wait and hold times"), this.distNote,
      h("div", { class: "dists" }, this.waitFig, this.holdFig));
  }

  /** The summary: `pairs` of [term, value]. */
  drawSummary(pairs) {
    if (!this.summaryCells) {
      this.summaryCells = pairs.map(([t]) => {
        const dd = h("dd");
        this.summary.append(h("div", {}, h("dt", {}, t), dd));
        return dd;
      });
    }
    pairs.forEach(([, v], i) => setText(this.summaryCells[i], v));
  }
}

/** A semaphore, live. */
export class SemaphoreView extends Detail {
  constructor(app, name) {
    super(app, "semaphore");
    this.name = name;
    this.state = null;
    this.holders = new Map();
    this.grants = []; // the times (performance.now) of the granted events of the window
    this.opened = performance.now();
    this.events = [];
    this.holdersTable = this.holderTable(false);
    this.waitersTable = this.waiterTable(false);
    this.timeline = h("ol", { class: "timeline", tabindex: "0", "aria-labelledby": "timeline-title" });
    this.timelineRows = keyedRows((e) => e.key, (e) => timelineItem(e), () => {});
    this.frame(name, [
      h("section", { "aria-labelledby": "holders-title" },
        h("h2", { id: "holders-title" }, "Holders"), this.holdersTable.el),
      h("section", { "aria-labelledby": "queue-title" },
        h("h2", { id: "queue-title" }, "Queue"), this.truncNote = h("p", { class: "note", hidden: true },
          "The queue is longer than the 1,000 waiters semad shows."), this.waitersTable.el),
      h("section", { "aria-labelledby": "timeline-title" },
        h("h2", { id: "timeline-title" }, "Recent events"), this.timeline),
      this.followMetrics(),
    ]);
    if (app.canAct()) {
      this.actions.append(
        h("button", { type: "button", onclick: () => this.resize() }, "Resize"),
        h("button", { type: "button", class: "danger", onclick: () => this.remove() }, "Delete"));
    }
    this.refreshAt = 0;
    this.news = []; // what happened since the last announcement: [type, words]
    this.every(1000, () => {
      this.draw();
      this.tellNews();
    });
    this.setStatus("Connecting…");
    this.stream = follow(`v1/semaphores/${seg(name)}/events`, {
      heartbeatMs: app.config.sse_heartbeat_ms,
      onEvent: (ev) => this.onEvent(ev),
      onState: (st, detail) => this.onStream(st, detail),
    });
  }

  hide() {
    super.hide();
    this.stream.close();
    clearTimeout(this.refreshTimer);
  }

  onStream(st, detail) {
    if (st === "live") {
      this.setStatus("Live", "live");
      this.refresh(true);
    } else if (st === "reconnecting") {
      this.setStatus("Reconnecting to semad…", "warn");
    } else if (st === "gone") {
      if (detail?.status === 401) this.app.needToken();
      this.gone(detail?.status === 404 ? "No such semaphore (it was deleted, or never made)."
        : detail?.message || "semad refused to show this semaphore.");
    }
  }

  gone(text) {
    this.deleted = true;
    this.setStatus(text, "warn");
    this.holders.clear();
    this.state = this.state && { ...this.state, holders: [], waiters: [], waiting: 0, held: 0 };
    for (const b of this.actions.querySelectorAll("button")) b.disabled = true;
    this.draw();
  }

  onEvent(ev) {
    const d = ev.data;
    const at = Date.now();
    this.app.touch();
    if (["granted", "released", "expired", "revoked"].includes(ev.type)) {
      if (ev.type === "granted") {
        const l = { lease: d.lease, weight: d.weight, owner: d.owner, fence: d.fence,
          acquired_at: d.acquired_at, expires_at: d.expires_at, tenant: d.tenant, multi: d.multi };
        this.holders.set(d.lease, l);
        this.flight?.granted.set(d.lease, l);
        this.grants.push(performance.now());
      } else {
        this.holders.delete(d.lease);
        this.flight?.ended.add(d.lease);
      }
    }
    if (ev.type === "resized" && this.state) this.state.capacity = d.capacity;
    this.events.unshift({ key: ev.id || `${at}-${Math.random()}`, type: ev.type, data: d, at });
    this.events.length = Math.min(this.events.length, TIMELINE_MAX);
    this.news.push([ev.type, describe(ev.type, d, this.name)]);
    if (ev.type === "deleted") {
      this.gone("This semaphore was deleted.");
      return;
    }
    this.refresh(ev.type === "reset");
    this.draw();
  }

  /** Say what happened in the last second: one event in words, more as counts by type (a
   * busy semaphore is one sentence a second, not hundreds). */
  tellNews() {
    const news = this.news;
    this.news = [];
    if (news.length === 1) announce(news[0][1]);
    if (news.length < 2) return;
    const counts = new Map();
    for (const [type] of news) counts.set(type, (counts.get(type) ?? 0) + 1);
    announce(`${this.name}: ${[...counts].map(([t, n]) => `${fmtCount(n)} ${t}`).join(", ")}`);
  }

  /** Read the state, at most every REFRESH_MIN_MS (`now`: as soon as possible). */
  refresh(now) {
    if (this.deleted || this.closed) return;
    if (this.reading) {
      this.again = true;
      return;
    }
    const wait = now ? 0 : Math.max(0, this.refreshAt + REFRESH_MIN_MS - performance.now());
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.read(), wait);
  }

  /** Read the state. Its reply and the events travel on two connections, so the state may
   * be older than events already shown: a lease that ended since the read was sent stays
   * gone, one granted since stays. */
  async read() {
    this.reading = true;
    this.again = false;
    this.refreshAt = performance.now();
    const flight = (this.flight = { granted: new Map(), ended: new Set() });
    try {
      const s = await get(`v1/semaphores/${seg(this.name)}`);
      if (this.closed) return;
      this.state = s;
      this.holders = new Map(s.holders.filter((l) => !flight.ended.has(l.lease)).map((l) => [l.lease, l]));
      for (const [id, l] of flight.granted) if (!flight.ended.has(id)) this.holders.set(id, l);
      this.app.touch();
      this.draw();
    } catch (e) {
      if (e.status === 404) this.gone("No such semaphore (it was deleted, or never made).");
      else if (e.status === 401) this.app.needToken();
    } finally {
      this.reading = false;
      this.flight = null;
      if (this.again) this.refresh(false);
    }
  }

  /** Grants per second over the last RATE_WINDOW_MS (or since the view opened). */
  rate() {
    const now = performance.now();
    while (this.grants.length && this.grants[0] < now - RATE_WINDOW_MS) this.grants.shift();
    const span = Math.min(RATE_WINDOW_MS, now - this.opened);
    return span >= 1000 ? (this.grants.length * 1000) / span : null;
  }

  render() {
    const s = this.state;
    if (!s) return;
    const holders = [...this.holders.values()].sort((a, b) => a.fence - b.fence);
    const held = holders.reduce((n, l) => n + l.weight, 0);
    drawBar(this.bar, held, s.capacity, s.waiting);
    const oldest = s.waiters.length ? serverNow() - s.waiters[0].since : null;
    const tickets = s.waiters.filter((w) => w.kind === "ticket").length;
    this.drawSummary([
      ["Capacity", fmtCount(s.capacity)],
      ["Held", fmtCount(held)],
      ["Available", fmtCount(s.capacity - held)],
      ["Waiting", `${fmtCount(s.waiting)} (weight ${fmtCount(s.waiting_weight)})`],
      ["Tickets waiting", fmtCount(tickets) + (s.truncated ? "+" : "")],
      ["Oldest waiter", oldest === null ? "—" : fmtDuration(oldest)],
      ["Grants/s (last 10 s)", fmtRate(this.rate())],
      ["Fence", fmtCount(s.fence)],
      ...limitRows(s),
    ]);
    this.holdersTable.setItems(holders);
    this.waitersTable.setItems(s.waiters);
    this.truncNote.hidden = !s.truncated;
    placeChildren(this.timeline, this.events.length ? this.timelineRows(this.events)
      : [h("li", { class: "empty" }, "No event since the page opened.")]);
  }

  async resize() {
    const s = this.state;
    const v = await ask({
      title: `Resize ${this.name}?`, confirm: "Resize",
      body: [h("p", {}, `Now ${fmtCount(s?.capacity)} units, ${fmtCount(s?.held)} held. Growing ` +
        "admits waiters; shrinking takes nothing back from holders (available may go below " +
        "zero) and fails queued requests heavier than the new capacity.")],
      field: { label: "New capacity", type: "number", value: s?.capacity ?? "", min: 1 },
      run: (cap) => request("PATCH", `v1/semaphores/${seg(this.name)}`, { capacity: Number(cap) }),
    });
    if (v !== null) {
      announce(`${this.name} resized to ${v}`);
      this.refresh(true);
    }
  }

  async remove() {
    const v = await ask({
      title: `Delete ${this.name}?`, confirm: "Delete", danger: true,
      body: [h("p", {}, "Its waiters get 410 deleted and every lease of it becomes void. This " +
        "cannot be undone.")],
      field: { label: "Type the name to confirm", mustEqual: this.name },
      run: () => request("DELETE", `v1/semaphores/${seg(this.name)}`),
    });
    if (v !== null) {
      announce(`${this.name} deleted`);
      this.app.go("#/", "");
    }
  }
}

function timelineItem(e) {
  return h("li", { class: `ev ${e.type}` }, h("time", {}, fmtTime(e.at)), " ",
    h("span", { class: "evtype" }, e.type), " ", describe(e.type, e.data));
}

/** An event in words. */
function describe(type, d, name) {
  const who = d.owner ? `${d.owner}` : "a holder";
  const units = `${fmtCount(d.weight)} unit${d.weight === 1 ? "" : "s"}`;
  const of = name ? `${name}: ` : "";
  switch (type) {
    case "granted": return `${of}${who} was granted ${units} (fence ${d.fence}, lease ${shortId(d.lease)})`;
    case "released": return `${of}${who} released ${units}`;
    case "expired": return `${of}the lease of ${who} expired (${units})`;
    case "revoked": return `${of}the lease of ${who} was revoked (${units})`;
    case "resized": return `${of}capacity set to ${fmtCount(d.capacity)}`;
    case "queued": return `${of}${d.owner || "a waiter"} joined the queue for ${units} (${fmtCount(d.waiting)} waiting)`;
    case "left": return `${of}${d.owner || "a waiter"} left the queue (${fmtCount(d.waiting)} waiting)`;
    case "deleted": return `${of}deleted`;
    case "reset": return `${of}events were missed: the state was read again`;
    default: return `${of}${type}`;
  }
}

/** A keyed lock: read every interval (lock keys have no event stream). */
export class LockView extends Detail {
  constructor(app, key) {
    super(app, "lock");
    this.key = key;
    this.holdersTable = this.holderTable(true);
    this.waitersTable = this.waiterTable(true);
    this.frame(key, [
      h("section", { "aria-labelledby": "holders-title" },
        h("h2", { id: "holders-title" }, "Holders"), this.holdersTable.el),
      h("section", { "aria-labelledby": "queue-title" },
        h("h2", { id: "queue-title" }, "Queue"), this.waitersTable.el),
      h("p", { class: "note" }, "A lock key has no event stream: it is read at the page's " +
        "refresh interval. Shared holders overlap; an exclusive holder is alone."),
    ]);
    this.bar.hidden = true;
    this.every(1000, () => this.draw());
    app.poller.set(() => this.read());
  }

  async read() {
    try {
      this.state = await get(`v1/locks/${seg(this.key)}`);
      this.setStatus("");
    } catch (e) {
      if (e.status !== 404) throw e;
      this.state = { key: this.key, readers: 0, max_readers: null, holders: [], waiters: [] };
      this.setStatus("Nobody holds or awaits this key now: it exists only while someone does.");
    }
    this.draw();
  }

  render() {
    const s = this.state;
    if (!s) return;
    const exclusive = s.holders.some((l) => l.mode === "exclusive");
    this.drawSummary([
      ["Held", exclusive ? "exclusive" : s.holders.length ? `${fmtCount(s.readers)} shared` : "no"],
      ["Most shared holders", fmtCount(s.max_readers)],
      ["Waiting", fmtCount(s.waiters.length) + (s.truncated ? "+" : "")],
      ["Oldest waiter", s.waiters.length ? fmtDuration(serverNow() - s.waiters[0].since) : "—"],
    ]);
    this.holdersTable.setItems([...s.holders].sort((a, b) => a.fence - b.fence));
    this.waitersTable.setItems(s.waiters);
  }
}
