// SPDX-License-Identifier: MIT
// browser.test.mjs - the waiting room in a real browser (Debian's chromium, headless, driven
// by puppeteer-core) against a real semad: 20 visitors at once against a capacity of 2. Each
// page's position only goes down, every page reaches its turn, never more than 2 jobs run at
// once, a page reloaded mid-line keeps its place, and a page closed mid-line leaves the line
// within its keepalive. Writes the README's screenshot (a page showing its number and
// estimate). Run by test/run.sh (ctest example.waiting_room).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../../..");
const SEMAD = process.env.SEMAD || join(root, "build/bin/semad");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SCREENSHOT = process.env.SCREENSHOT || join(here, "../screenshot.png");
const PAGES = 20;
const CAPACITY = 2;
// Long enough that a page on a loaded machine still polls within it: with 21 pages opening
// on 2 busy cores, a page's first poll has come more than 6 s after it took its ticket, and
// the page lost its place. The closed page's departure is checked against it.
const KEEPALIVE_MS = 15000;
const JOB_MS = 500;
const POLL_MS = 1000;
// Each phase has its own bound: opening the pages and taking places (21 pages take 15-45 s
// to open on a loaded 2-core machine), closing one page and reloading another, then the line
// moving once the gate opens.
const SETUP_MS = 70_000;
const RELOAD_MS = 25_000;
const LINE_MS = 40_000;
// The gate (both units, held by the test until the line is set up) outlives the set-up and
// reload phases with room to spare: were it to expire, the line would move too early.
const GATE_TTL_MS = 3 * (SETUP_MS + RELOAD_MS);
let DEADLINE = Date.now() + SETUP_MS;

const children = [];
const tmp = mkdtempSync(join(tmpdir(), "waiting-room-"));

/** Start a process; resolve with the first match of `re` in its output. */
function start(cmd, args, env, re) {
  const p = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(p);
  let out = "";
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${cmd} did not start:\n${out}`)), 15_000);
    const on = (chunk) => {
      out += chunk;
      const m = re.exec(out);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    };
    p.stdout.setEncoding("utf8").on("data", on);
    p.stderr.setEncoding("utf8").on("data", on);
    p.on("exit", (code) => fail(new Error(`${cmd} exited ${code}:\n${out}`)));
  });
}

async function until(what, fn, ms = DEADLINE - Date.now()) {
  const started = Date.now();
  const end = Math.min(DEADLINE, started + ms);
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (${Date.now() - started} ms)`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function getJson(url) {
  const r = await fetch(url);
  return { status: r.status, body: await r.json().catch(() => null) };
}

const seen = (page) => page.evaluate(() => ({
  ...window.seen, state: document.body.dataset.state ?? "",
  status: document.getElementById("status")?.textContent ?? "",
}));

let browser;
try {
  // SEMAD_ENGINE=redis://HOST:PORT (or SEMA_TEST_ENGINE, as tests/support/with_redis.py
  // sets it): the same on semad's Redis back end (an empty Redis)
  const url = process.env.SEMAD_ENGINE || process.env.SEMA_TEST_ENGINE || "";
  const engine = url.startsWith("redis") ? ["--engine", url] : [];
  if (engine.length) console.log(`# semad --engine ${url}`);
  const semad = await start(SEMAD, ["--listen", "127.0.0.1:0", "--durability",
    engine.length ? "relaxed" : "none", "--ticket-poll", "200ms", ...engine], {},
    /listening on (http:\/\/\S+)/);
  const app = await start(process.execPath, [join(here, "../server.mjs")], {
    SEMA_SERVER: semad, PORT: "0", CAPACITY: String(CAPACITY), JOB_MS: String(JOB_MS),
    KEEPALIVE_MS: String(KEEPALIVE_MS), POLL_MS: String(POLL_MS), ROOM: "images",
  }, /waiting room on (http:\/\/\S+)/);

  // The test holds both units while the visitors arrive, so they all line up (in arrival
  // order) and the line is long enough to close and reload pages in it.
  const gate = await fetch(`${semad}/v1/semaphores/images/acquire`, {
    method: "POST",
    body: JSON.stringify({ weight: CAPACITY, timeout_ms: 0, ttl_ms: GATE_TTL_MS }),
  }).then((r) => r.json());
  assert.ok(gate.lease, JSON.stringify(gate));
  const t0 = Date.now();
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: join(tmp, "profile"),
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  // One browser context per visitor: its own cookies, so its own ticket. One more visitor
  // who will close the page while in line.
  const visitors = await Promise.all(Array.from({ length: PAGES + 1 }, async () => {
    const ctx = await browser.createBrowserContext();
    const page = await ctx.newPage();
    await page.setViewport({ width: 640, height: 360 });
    return { ctx, page, history: [], closed: false };
  }));
  console.log(`# browser and ${PAGES + 1} pages open after ${Date.now() - t0} ms`);
  await Promise.all(visitors.map((v) => v.page.goto(app, { waitUntil: "domcontentloaded" })));
  await until("every page to have a ticket", async () =>
    (await Promise.all(visitors.map((v) => seen(v.page)))).every((s) => s.ticket));
  console.log(`# ${PAGES + 1} pages in line after ${Date.now() - t0} ms`);

  // Sample every page's view as the line moves; screenshot one showing its number and estimate.
  let shot = false;
  const sample = async () => {
    for (const v of visitors) {
      if (v.closed) continue;
      const s = await seen(v.page);
      v.last = s;
      if (!shot && s.state === "waiting" && s.positions.at(-1) >= 3) {
        const shown = await v.page.evaluate(() => document.querySelector(".card").innerText);
        if (/number\s+\d+\s+about \d+ s/.test(shown)) {
          await v.page.screenshot({ path: SCREENSHOT });
          shot = true;
        }
      }
    }
  };
  await sample();

  // The visitor furthest back closes the page: its ticket is unread from then on and must leave
  // the line within the keepalive (plus the server's long-poll and the timer's slack). The
  // gate stays shut until it has: once granted, an unread ticket is "uncollected", not gone.
  const byPos = visitors.filter((v) => v.last.state === "waiting")
    .sort((a, b) => b.last.positions.at(-1) - a.last.positions.at(-1));
  assert.equal(byPos.length, PAGES + 1, "every visitor waits behind the gate");
  const leaver = byPos[0];
  const leaverTicket = leaver.last.ticket;
  leaver.closed = true;
  const closedAt = Date.now();
  // Watch for its departure from now on, on its own (the steps below take seconds on a loaded
  // machine): reading the ticket would keep it alive, so watch the metric instead.
  let leaverGoneAt = 0;
  const watchEnd = closedAt + KEEPALIVE_MS + POLL_MS + 10_000;
  const leaverWatch = (async () => {
    while (!leaverGoneAt && Date.now() < watchEnd) {
      if (/^semad_tickets_abandoned_total 1$/m.test(await (await fetch(`${semad}/metrics`)).text()))
        leaverGoneAt = Date.now();
      else
        await new Promise((r) => setTimeout(r, 100));
    }
  })();
  DEADLINE = Date.now() + RELOAD_MS;
  await leaver.ctx.close();
  // Another visitor reloads mid-line: same ticket, a place no further back.
  const reloader = byPos[3];
  const before = await seen(reloader.page);
  reloader.history.push(...before.positions);
  await reloader.page.reload({ waitUntil: "domcontentloaded" });
  await until("the reloaded page to read its ticket", async () => (await seen(reloader.page)).ticket);
  assert.equal((await seen(reloader.page)).ticket, before.ticket, "a reload keeps the ticket");
  await leaverWatch;
  assert.equal((await getJson(`${semad}/v1/tickets/${leaverTicket}`)).status, 410);
  // The closed page left within its keepalive (from the end of the server's last long-poll,
  // at most POLL_MS after the close; plus slack for a loaded machine: the browser closing the
  // page and the app noticing it take seconds there).
  assert.ok(leaverGoneAt > 0, "the closed page's ticket left the line");
  assert.ok(leaverGoneAt - closedAt <= KEEPALIVE_MS + POLL_MS + 4000, `left after ${leaverGoneAt - closedAt} ms`);
  // Open the gate: the line moves.
  assert.equal((await fetch(`${semad}/v1/leases/${gate.lease}`, { method: "DELETE" })).status, 204);

  DEADLINE = Date.now() + LINE_MS;
  await until("every page to reach its turn and finish", async () => {
    if (Date.now() > DEADLINE - 1000)
      console.log("# not done:", JSON.stringify(visitors.filter((v) => !v.closed && v.last.state !== "done")
        .map((v) => ({ state: v.last.state, status: v.last.status, positions: v.last.positions.slice(-3),
          longestGapMs: v.last.longestGap, expired: v.last.expired }))));
    await sample();
    const lost = visitors.filter((v) => !v.closed && v.last.expired);
    if (lost.length)
      throw new Error(`a page lost its place: ${JSON.stringify(lost.map((v) => ({
        positions: v.last.positions, longestGapMs: v.last.longestGap, expired: v.last.expired })))}`);
    return visitors.every((v) => v.closed || v.last.state === "done");
  });
  const metrics = await (await fetch(`${semad}/metrics`)).text();
  assert.match(metrics, /^semad_tickets_abandoned_total 1$/m);

  // Every page reached its turn; positions only went down (across the reload too).
  for (const v of visitors) {
    if (v.closed) continue;
    const pos = [...v.history, ...v.last.positions];
    for (let i = 1; i < pos.length; i++) assert.ok(pos[i] <= pos[i - 1], `positions went up: ${pos}`);
    assert.equal(v.last.state, "done");
    assert.ok(v.last.states.includes("running") || v.last.states.includes("done"));
  }
  // Never more than CAPACITY jobs at once: by the server's count and by the jobs' intervals.
  const stats = (await getJson(`${app}api/stats`)).body;
  assert.equal(stats.done, PAGES);
  assert.ok(stats.maxRunning <= CAPACITY, `max running ${stats.maxRunning}`);
  const edges = stats.log.flatMap((j) => [[j.started, 1], [j.ended, -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0, most = 0;
  for (const [, d] of edges) most = Math.max(most, (now += d));
  assert.ok(most <= CAPACITY, `jobs overlapping: ${most}`);
  assert.ok(most === CAPACITY, "the capacity was used");
  // Pages in line showed their number with an estimate (each page records the furthest place
  // at which it did; a loaded machine samples too seldom to always catch one on screen).
  const estimatedAt = Math.max(...visitors.filter((v) => !v.closed).map((v) => v.last.estimatedAt ?? 0));
  assert.ok(estimatedAt >= 3, `the furthest place shown with an estimate: ${estimatedAt}`);
  if (!shot) console.log("# no page was caught showing its number and estimate: no screenshot");
  console.log(`ok: ${PAGES} pages, max ${stats.maxRunning} running, closed page left after ${leaverGoneAt - closedAt} ms`);
} finally {
  await browser?.close().catch(() => {});
  for (const p of children) p.kill("SIGTERM");
  rmSync(tmp, { recursive: true, force: true });
}
