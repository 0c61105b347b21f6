// SPDX-License-Identifier: MIT
// overview.js - every semaphore and keyed lock, a page at a time: the list routes
// (GET /v1/semaphores, GET /v1/locks) read every few seconds (the tab's interval; not while
// the tab is hidden), searchable by name prefix, paged by cursor. Grants per second come from
// each item's grants counter, read twice; the oldest waiter's age from its waiting_since.
// One list request and one /healthz per interval is all the overview costs semad.

import { get, seg, serverNow } from "./api.js";
import { fill, fmtCount, fmtDuration, fmtRate, h, keyedRows, placeChildren, setText } from "./dom.js";

const PAGE_SIZES = [25, 50, 100, 250];

export class Overview {
  constructor(app) {
    this.app = app;
    this.kind = "semaphores";
    this.prefix = "";
    this.cursors = [null]; // the cursor of each page seen, for "previous"
    this.page = 0;
    this.limit = Number(localStorage.getItem("sema.pageSize")) || 50;
    this.items = [];
    this.more = false;
    this.rates = new Map(); // name -> {grants, at, rate}
    this.build();
  }

  build() {
    this.heading = h("h1", { id: "overview-title", tabindex: "-1" }, "Semaphores");
    this.tabs = {
      semaphores: h("a", { href: "#/", class: "tab" }, "Semaphores"),
      locks: h("a", { href: "#/locks", class: "tab" }, "Keyed locks"),
    };
    this.search = h("input", { id: "prefix", type: "search", autocomplete: "off",
      spellcheck: "false", placeholder: "jobs/" });
    this.size = h("select", { id: "page-size" },
      PAGE_SIZES.map((n) => h("option", { value: n, selected: n === this.limit }, String(n))));
    this.size.addEventListener("change", () => {
      this.limit = Number(this.size.value);
      localStorage.setItem("sema.pageSize", String(this.limit));
      this.restart();
    });
    const form = h("form", { class: "search", role: "search", onsubmit: (e) => {
      e.preventDefault();
      this.app.go(this.kind === "locks" ? "#/locks" : "#/", this.search.value);
    } },
    h("label", { for: "prefix" }, this.kind === "locks" ? "Keys starting with" : "Names starting with"),
    this.search, h("button", { type: "submit" }, "Search"),
    h("label", { for: "page-size" }, "Per page"), this.size);
    this.searchLabel = form.querySelector("label");
    this.totals = h("p", { class: "totals", id: "totals" });
    this.note = h("p", { class: "note", hidden: true });
    this.table = h("table", { class: "overview", "aria-labelledby": "overview-title" });
    this.body = h("tbody");
    this.prev = h("button", { type: "button", onclick: () => this.turn(-1) }, "Previous page");
    this.next = h("button", { type: "button", onclick: () => this.turn(1) }, "Next page");
    this.pageLabel = h("span", { class: "page-label" });
    this.empty = h("p", { class: "empty", hidden: true });
    this.el = h("section", { class: "view", "aria-labelledby": "overview-title" },
      h("nav", { class: "tabs", "aria-label": "What to list" }, this.tabs.semaphores, this.tabs.locks),
      this.heading, form, this.totals, this.note, this.table, this.empty,
      h("nav", { class: "pager", "aria-label": "Pages" }, this.prev, this.pageLabel, this.next));
    this.semRows = keyedRows((s) => s.name, (s) => this.semRow(s), (r, s) => this.updateSem(r, s));
    this.lockRows = keyedRows((l) => l.key, (l) => this.lockRow(l), (r, l) => this.updateLock(r, l));
  }

  /** Show the list of `kind` ("semaphores" or "locks") under `prefix` (a token limited to
   * name prefixes may only list under one of them: its first, when none is asked for). */
  show(kind, prefix) {
    const own = this.app.config.token?.prefixes ?? [];
    if (!prefix && own.length) prefix = own[0];
    const changed = kind !== this.kind || prefix !== this.prefix;
    this.kind = kind;
    this.prefix = prefix;
    this.search.value = prefix;
    for (const [k, a] of Object.entries(this.tabs)) {
      if (k === kind) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    setText(this.heading, kind === "locks" ? "Keyed locks" : "Semaphores");
    setText(this.searchLabel, kind === "locks" ? "Keys starting with" : "Names starting with");
    if (changed) {
      this.items = [];
      this.rates.clear();
      this.cursors = [null];
      this.page = 0;
      this.draw();
    }
    this.app.poller.set(() => this.load());
  }

  restart() {
    this.cursors = [null];
    this.page = 0;
    this.app.poller.now();
  }

  turn(d) {
    if (d > 0 && !this.more) return;
    if (d < 0 && this.page === 0) return;
    this.page += d;
    this.app.poller.now();
    this.heading.focus();
  }

  /** One read of the page and the totals (the poller calls it). */
  async load() {
    const path = this.kind === "locks" ? "v1/locks" : "v1/semaphores";
    const q = new URLSearchParams({ limit: String(this.limit) });
    if (this.prefix) q.set("prefix", this.prefix);
    const cursor = this.cursors[this.page];
    if (cursor) q.set("cursor", cursor);
    const [page, health] = await Promise.all([get(`${path}?${q}`),
      get("healthz").catch(() => null)]);
    const items = page[this.kind];
    this.more = page.next_cursor !== null;
    this.cursors[this.page + 1] = page.next_cursor;
    this.cursors.length = this.page + 2;
    if (this.kind === "semaphores") this.measureRates(items);
    this.items = items;
    this.health = health;
    this.draw();
  }

  /** Grants per second of each item: its counter's rise since the last read, per second.
   * A counter that went down started over (semad restarted): no rate until the next read. */
  measureRates(items) {
    const now = performance.now();
    const next = new Map();
    for (const s of items) {
      const was = this.rates.get(s.name);
      let rate = was?.rate ?? null;
      if (was && now - was.at >= 500) {
        rate = s.grants >= was.grants ? ((s.grants - was.grants) * 1000) / (now - was.at) : null;
        next.set(s.name, { grants: s.grants, at: now, rate });
      } else {
        next.set(s.name, was ?? { grants: s.grants, at: now, rate: null });
      }
    }
    this.rates = next;
  }

  draw() {
    const locks = this.kind === "locks";
    if (!this.table.tHead || this.table.dataset.kind !== this.kind) {
      this.table.dataset.kind = this.kind;
      const cols = locks
        ? ["Key", "Holders", "Waiting", "Oldest waiter"]
        : ["Name", "Use", "Held", "Capacity", "Available", "Waiting", "Tickets", "Oldest waiter",
          "Grants/s"];
      fill(this.table, h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col",
        class: c === "Name" || c === "Key" ? "name" : c === "Use" ? "use" : "num" }, c)))), this.body);
    }
    const rows = locks ? this.lockRows(this.items) : this.semRows(this.items);
    placeChildren(this.body, rows);
    this.table.hidden = this.items.length === 0;
    this.empty.hidden = this.items.length > 0;
    setText(this.empty, this.prefix ? `No ${locks ? "key held or awaited" : "semaphore"} starts with “${this.prefix}”.`
      : locks ? "No key is held or awaited now." : "No semaphore yet.");
    // /healthz counts them all: a total only when the list is not narrowed by a prefix
    const total = this.health && !this.prefix ? (locks ? this.health.locks : this.health.semaphores) : null;
    const first = this.page * this.limit;
    const what = locks ? "keys" : "semaphores";
    setText(this.totals, this.items.length === 0 ? (total !== null ? `${fmtCount(total)} in all.` : "")
      : `${fmtCount(first + 1)}–${fmtCount(first + this.items.length)}` +
        (total !== null ? ` of ${fmtCount(total)} ${what}` : ` ${what}`) +
        (this.prefix ? ` starting with “${this.prefix}”` : "") + (this.more ? ", more on the next page." : "."));
    this.prev.disabled = this.page === 0;
    this.next.disabled = !this.more;
    setText(this.pageLabel, `Page ${this.page + 1}`);
  }

  /** Ages move on between reads. */
  tick() {
    if (!this.el.hidden) for (const r of this.body.rows) r.tick_?.();
  }

  semRow(s) {
    const link = h("a", { href: `#/s/${seg(s.name)}`, class: "name" });
    const bar = h("div", { class: "bar", role: "img" }, h("span", { class: "held" }));
    const cells = {
      held: h("td", { class: "num" }), capacity: h("td", { class: "num" }),
      available: h("td", { class: "num" }), waiting: h("td", { class: "num" }),
      tickets: h("td", { class: "num" }), oldest: h("td", { class: "num" }),
      rate: h("td", { class: "num" }),
    };
    const row = h("tr", {}, h("th", { scope: "row", class: "name" }, link),
      h("td", { class: "use" }, bar), Object.values(cells));
    for (const [k, td] of Object.entries(cells)) td.dataset.label = LABELS[k];
    Object.assign(row, { link_: link, bar_: bar, cells_: cells });
    return row;
  }

  updateSem(row, s) {
    const c = row.cells_;
    setText(row.link_, s.name);
    drawBar(row.bar_, s.held, s.capacity, s.waiting);
    setText(c.held, fmtCount(s.held));
    setText(c.capacity, fmtCount(s.capacity));
    setText(c.available, fmtCount(s.available));
    setText(c.waiting, fmtCount(s.waiting));
    setText(c.tickets, fmtCount(s.tickets));
    setText(c.rate, fmtRate(this.rates.get(s.name)?.rate));
    row.classList.toggle("queued", s.waiting > 0);
    row.tick_ = () => setText(c.oldest, s.waiting_since ? fmtDuration(serverNow() - s.waiting_since) : "—");
    row.tick_();
  }

  lockRow(l) {
    const link = h("a", { href: `#/l/${seg(l.key)}`, class: "name" });
    const cells = { holders: h("td", { class: "num" }), waiting: h("td", { class: "num" }),
      oldest: h("td", { class: "num" }) };
    for (const [k, td] of Object.entries(cells)) td.dataset.label = LABELS[k];
    const row = h("tr", {}, h("th", { scope: "row", class: "name" }, link), Object.values(cells));
    Object.assign(row, { link_: link, cells_: cells });
    return row;
  }

  updateLock(row, l) {
    const c = row.cells_;
    setText(row.link_, l.key);
    setText(c.holders, l.exclusive ? "1 exclusive" + (l.readers ? ` + ${l.readers} shared` : "")
      : `${fmtCount(l.readers)} shared`);
    setText(c.waiting, fmtCount(l.waiting));
    row.classList.toggle("queued", l.waiting > 0);
    row.tick_ = () => setText(c.oldest, l.waiting_since ? fmtDuration(serverNow() - l.waiting_since) : "—");
    row.tick_();
  }
}

const LABELS = { held: "Held", capacity: "Capacity", available: "Available", waiting: "Waiting",
  tickets: "Tickets", oldest: "Oldest waiter", rate: "Grants/s", holders: "Holders" };

/** A bar of `capacity` units: the held part filled (past the end when over), the waiting
 * count beside it; its accessible name says the same in words. */
export function drawBar(bar, held, capacity, waiting) {
  const frac = capacity > 0 ? Math.min(1, held / capacity) : held > 0 ? 1 : 0;
  bar.firstChild.style.setProperty("--frac", String(frac));
  bar.classList.toggle("full", held >= capacity && capacity > 0);
  bar.classList.toggle("over", held > capacity);
  bar.dataset.waiting = waiting > 0 ? `+${fmtCount(waiting)} waiting` : "";
  bar.setAttribute("aria-label", `${fmtCount(held)} of ${fmtCount(capacity)} units held` +
    (waiting > 0 ? `, ${fmtCount(waiting)} waiting` : ""));
}
