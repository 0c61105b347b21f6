// SPDX-License-Identifier: MIT
// app.js - semad's dashboard: the frame of the page (its header: the connection, how fresh
// the view is, the refresh interval, the token), the routes (#/ and #/locks: the overview;
// #/s/NAME: a semaphore; #/l/KEY: a keyed lock), the poller every view that reads on an
// interval shares, and the token dialog of a semad with --auth.

import { get, isOnline, onConnection, setServerClock, setToken, token } from "./api.js";
import { ask } from "./dialogs.js";
import { announce, fmtDuration, h, setText } from "./dom.js";
import { LockView, SemaphoreView } from "./detail.js";
import { Overview } from "./overview.js";

const INTERVALS = [[1000, "1 s"], [2000, "2 s"], [5000, "5 s"], [10000, "10 s"], [30000, "30 s"],
  [0, "off"]];
const RETRY_MAX_MS = 5000;

/** Runs one read at the page's interval: not while the tab is hidden, again at once when it
 * shows, and after a failure again sooner (1, 2, 4, 5 s) until semad answers. */
class Poller {
  constructor(app) {
    this.app = app;
    this.fn = null;
    this.timer = null;
    this.failures = 0;
    this.interval = Number(localStorage.getItem("sema.interval") ?? 2000);
    if (!INTERVALS.some(([ms]) => ms === this.interval)) this.interval = 2000;
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) this.now();
    });
  }

  set(fn) {
    this.fn = fn;
    this.now();
  }

  stop() {
    this.fn = null;
    clearTimeout(this.timer);
  }

  setInterval(ms) {
    this.interval = ms;
    localStorage.setItem("sema.interval", String(ms));
    this.now();
  }

  now() {
    clearTimeout(this.timer);
    if (this.fn) this.run(this.fn);
  }

  async run(fn) {
    try {
      await fn();
      this.failures = 0;
      this.app.clearError();
      this.app.touch();
    } catch (e) {
      if (e.status === 401) this.app.needToken();
      else if (e.status) this.app.error(e.message);
      this.failures++;
    }
    if (fn !== this.fn || document.hidden) return;
    const ms = this.failures ? Math.min(1000 * 2 ** (this.failures - 1), RETRY_MAX_MS) : this.interval;
    if (ms > 0) this.timer = setTimeout(() => this.run(fn), ms);
  }
}

class App {
  constructor() {
    this.config = { read_only: true, auth: false, token: null, sse_heartbeat_ms: 15000 };
    this.poller = new Poller(this);
    this.view = null;
    this.overview = null;
    this.lastUpdate = 0;
    this.main = document.getElementById("main");
    this.buildHeader();
    onConnection((ok) => this.drawConnection(ok));
    window.addEventListener("hashchange", () => this.route());
    setInterval(() => this.tick(), 1000);
  }

  buildHeader() {
    this.conn = document.getElementById("conn");
    this.fresh = document.getElementById("fresh");
    this.who = document.getElementById("who");
    this.errorBox = document.getElementById("error");
    const sel = document.getElementById("interval");
    for (const [ms, label] of INTERVALS)
      sel.append(h("option", { value: ms, selected: ms === this.poller.interval }, label));
    sel.addEventListener("change", () => this.poller.setInterval(Number(sel.value)));
    document.getElementById("refresh").addEventListener("click", () => this.poller.now());
  }

  /** Read the settings (and what the tab's token may do); ask for a token when semad
   * needs one and the tab has none, or semad does not know it. */
  async boot() {
    try {
      await this.readConfig();
    } catch {
      setTimeout(() => this.boot(), 1000); // semad is not up yet
      this.drawConnection(false);
      return;
    }
    this.drawConnection(true);
    if (this.config.auth && !this.config.token) await this.askToken(token() !== "");
    this.route();
  }

  async readConfig() {
    const sent = Date.now();
    const c = await get("ui/config.json");
    setServerClock(c.now, sent, Date.now());
    this.config = c;
    document.body.classList.toggle("read-only", c.read_only);
    this.drawWho();
  }

  /** Revoke, resize and delete: for an admin (anyone without --auth), not --ui-read-only. */
  canAct() {
    const c = this.config;
    return !c.read_only && (!c.auth || (c.token?.rights ?? []).includes("admin"));
  }

  drawWho() {
    const c = this.config;
    const parts = [];
    if (c.read_only) parts.push(h("span", { class: "badge" }, "read-only"));
    if (c.auth) {
      if (c.token) {
        parts.push(`Token ${c.token.name} (${c.token.rights.join(", ")}` +
          (c.token.prefixes.length ? `; names starting with ${c.token.prefixes.join(", ")}` : "") + ")");
        parts.push(h("button", { type: "button", class: "small", onclick: () => this.signOut() }, "Forget token"));
      } else {
        parts.push(h("button", { type: "button", class: "small", onclick: () => this.needToken() }, "Enter a token"));
      }
    }
    this.who.replaceChildren(...parts.flatMap((p, i) => (i ? [" ", p] : [p])));
  }

  async askToken(wrong) {
    const body = [h("p", {}, "This semad runs with --auth: every request needs a token " +
      "(made by `sema token new`). It is kept in this tab only, until the tab closes.")];
    if (wrong) body.push(h("p", { class: "error" }, "semad does not know the token this tab had."));
    await ask({
      title: "Token", body, confirm: "Use this token",
      field: { label: "Token", type: "password", autocomplete: "off" },
      run: async (t) => {
        setToken(t);
        await this.readConfig();
        if (!this.config.token) throw new Error("semad does not know this token.");
      },
    });
  }

  /** A request got 401: ask for a token (once at a time). */
  async needToken() {
    if (this.asking) return;
    this.asking = true;
    try {
      await this.askToken(token() !== "");
    } finally {
      this.asking = false;
    }
    this.route(true);
  }

  signOut() {
    setToken("");
    this.config.token = null;
    this.drawWho();
    this.needToken();
  }

  /** Go to `hash` (the overview's `prefix` with it). */
  go(hash, prefix = "") {
    const q = prefix ? `?prefix=${encodeURIComponent(prefix)}` : "";
    const target = hash + q;
    if (location.hash === target) this.route(true);
    else location.hash = target;
  }

  route(again = false) {
    const m = /^#(\/[^?]*)?(?:\?(.*))?$/.exec(location.hash || "#/") || [];
    const path = m[1] || "/";
    const prefix = new URLSearchParams(m[2] || "").get("prefix") || "";
    const key = `${path}?${prefix}`;
    if (key === this.routeKey && !again) return;
    this.routeKey = key;
    this.clearError();
    let s;
    if ((s = /^\/s\/(.+)$/.exec(path))) this.showDetail(new SemaphoreView(this, decode(s[1])));
    else if ((s = /^\/l\/(.+)$/.exec(path))) this.showDetail(new LockView(this, decode(s[1])));
    else this.showOverview(path === "/locks" ? "locks" : "semaphores", prefix);
  }

  showOverview(kind, prefix) {
    this.leaveDetail();
    this.overview ??= new Overview(this);
    if (!this.overview.el.isConnected) this.main.replaceChildren(this.overview.el);
    this.overview.show(kind, prefix);
    document.title = `${kind === "locks" ? "Keyed locks" : "Semaphores"} — sema`;
    this.overview.heading.focus({ preventScroll: true });
  }

  showDetail(view) {
    this.leaveDetail();
    this.poller.stop();
    this.view = view;
    this.main.replaceChildren(view.el);
    document.title = `${view.title.textContent} — sema`;
    view.title.focus({ preventScroll: true });
  }

  leaveDetail() {
    this.view?.hide();
    this.view = null;
  }

  /** The view has news from semad: the "last update" starts again. */
  touch() {
    this.lastUpdate = Date.now();
    this.tick();
  }

  tick() {
    if (this.lastUpdate) {
      const age = Date.now() - this.lastUpdate;
      setText(this.fresh, age < 1500 ? "Updated just now" : `Updated ${fmtDuration(age)} ago`);
      const stale = !isOnline() || (this.poller.interval > 0 && !this.view && age > 3 * this.poller.interval + 2000);
      this.fresh.classList.toggle("stale", stale);
    }
    this.overview?.tick();
  }

  drawConnection(ok) {
    const was = this.conn.textContent;
    setText(this.conn, ok ? "Connected" : "Reconnecting…");
    this.conn.className = ok ? "conn ok" : "conn down";
    if (was !== this.conn.textContent && (!ok || this.lostAt))
      announce(ok ? "Connected to semad again" : "Lost the connection to semad; reconnecting");
    if (ok && this.lostAt) this.readConfig().catch(() => {}); // a restarted semad: its clock
    this.lostAt = ok ? 0 : Date.now();
  }

  error(msg) {
    this.errorBox.hidden = false;
    setText(this.errorBox, msg);
  }

  clearError() {
    this.errorBox.hidden = true;
  }
}

function decode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

new App().boot();
