// SPDX-License-Identifier: MIT
// dashboard.test.mjs - semad's dashboard (/ui) in a real browser: Debian's chromium, headless,
// driven by puppeteer-core, against real semad processes (embedded, or on Redis when
// SEMA_TEST_ENGINE names one). In order, each step with a bound of its own:
//   1. the overview lists the semaphores and lock keys made through the API, every name as
//      text (a semaphore named <img src=x onerror=...> runs nothing);
//   2. a grant made through the API shows on the open semaphore's page by its event stream (the
//      page's poll off), no reload;
//   3. revoke, from the keyboard, confirmed: the holder's next renew gets 410; resize; delete
//      wants the name typed;
//   4. a cross-site page cannot take a unit (semad refuses the browser's request);
//   5. 10,000 semaphores and a queue of 1,000: pages, search, the queue drawn in a window of
//      rows; screenshots of the overview and of a semaphore under load;
//   6. axe-core finds no serious or critical violation (light, dark, a phone's width);
//   7. the page survives a semad restart: "Reconnecting…", then live again, stream resumed;
//   8. with --auth: a token is asked for; a read token gets no revoke, resize or delete, an
//      admin token does; with --ui-read-only nobody does, and the page cannot change state.
// Screenshots go to $SCREENSHOTS (CTest: the build tree), else to docs/ (the README's).
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { connect, createServer as createTcpServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const SEMAD = process.env.SEMAD || join(root, "build/bin/semad");
const SEMA = process.env.SEMA_BIN || join(root, "build/bin/sema");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.SCREENSHOTS || join(root, "docs");
const ENGINE = process.env.SEMAD_ENGINE || process.env.SEMA_TEST_ENGINE || "";
const REDIS = ENGINE.startsWith("redis");
const AXE = readFileSync(join(here, "node_modules/axe-core/axe.min.js"), "utf8");
const XSS = `<img src=x onerror="window.__xss=1">`;
const BULK = 10_000;
const QUEUE = 1_000;

const tmp = mkdtempSync(join(tmpdir(), "sema-dashboard-"));
mkdirSync(SHOTS, { recursive: true });
const children = new Set();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Start semad with `args`; resolves with { url, port, proc, stop() } once it listens. */
function semad(args, data) {
  // relaxed: what a restart must keep is kept, and 10,000 creates take seconds, not tens
  const engine = REDIS ? ["--engine", ENGINE] : [];
  engine.push("--durability", "relaxed");
  const p = spawn(SEMAD, ["--data", data, "--max-ticket-keepalive", "1h", ...engine, ...args],
    { stdio: ["ignore", "ignore", "pipe"] });
  children.add(p);
  let log = "";
  p.stderr.setEncoding("utf8").on("data", (c) => { log += c; });
  const exited = new Promise((r) => p.on("exit", (code) => { children.delete(p); r(code); }));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`semad did not start:\n${log}`)), 20_000);
    const look = setInterval(() => {
      const m = /listening on (http:\/\/127\.0\.0\.1:(\d+))/.exec(log);
      if (!m) return;
      clearInterval(look);
      clearTimeout(timer);
      ok({ url: m[1], port: Number(m[2]), proc: p, log: () => log,
        async stop() { p.kill("SIGTERM"); return exited; } });
    }, 20);
    exited.then((code) => { clearInterval(look); clearTimeout(timer); fail(new Error(`semad exited ${code}:\n${log}`)); });
  });
}

/** One request: { status, body } (body parsed when JSON). */
async function api(base, method, path, body, { token, headers = {} } = {}) {
  const h = { ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  const r = await fetch(base + path, { method, headers: h,
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let parsed = text;
  try { parsed = text ? JSON.parse(text) : null; } catch { /* text */ }
  return { status: r.status, body: parsed };
}

/** `fn` over 0..n-1, `width` at a time. */
async function pool(n, width, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) await fn(next++);
  }));
}

/** Wait (bounded) until `fn` returns something true; it. */
async function until(what, fn, ms = 15_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => false);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** A step with a bound of its own. */
async function step(name, ms, fn) {
  const t0 = Date.now();
  console.log(`# ${name}`);
  let timer;
  await Promise.race([fn(), new Promise((_, fail) => {
    timer = setTimeout(() => fail(new Error(`${name}: not done within ${ms} ms`)), ms);
  })]).finally(() => clearTimeout(timer));
  console.log(`ok ${name} (${Date.now() - t0} ms)`);
}

/** A TCP relay to semad at `port` whose connections the test can cut, and refuse while it is
 * down: a network that drops. */
async function relay(port) {
  const socks = new Set();
  let down = false;
  const srv = createTcpServer((c) => {
    if (down) return c.destroy();
    const u = connect(port, "127.0.0.1");
    socks.add(c).add(u);
    const end = () => { c.destroy(); u.destroy(); socks.delete(c); socks.delete(u); };
    c.on("error", end).on("close", end);
    u.on("error", end).on("close", end);
    c.pipe(u).pipe(c);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    cut() { down = true; for (const s of socks) s.destroy(); },
    mend() { down = false; },
    close() { this.cut(); srv.close(); },
  };
}

const pageErrors = [];
/** A page in its own context (its own sessionStorage), watched for errors and CSP
 * violations. */
async function newPage(browser, width = 1280, height = 800) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  await page.setViewport({ width, height });
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.evaluateOnNewDocument(() => {
    window.__csp = [];
    document.addEventListener("securitypolicyviolation",
      (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return page;
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
const rowNames = (page) => page.$$eval("table.overview tbody th a", (as) => as.map((a) => a.textContent));

/** Serious and critical axe-core violations of the page as it is. */
async function axeScan(page, label) {
  await page.evaluate(AXE);
  const res = await page.evaluate(() => window.axe.run(document, {
    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] },
  }));
  const bad = res.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  for (const v of bad)
    console.log(`axe ${label}: ${v.id} (${v.impact}): ${v.help}: ${v.nodes.map((n) => n.target.join(" ")).join("; ")}`);
  assert.equal(bad.length, 0, `${label}: ${bad.length} serious or critical accessibility violations`);
  return res.violations.length;
}

async function gotoUi(page, base, hash = "#/") {
  await page.goto(`${base}/ui${hash}`, { waitUntil: "domcontentloaded" });
}

let browser;
const stopLoad = { stop: false };
try {
  let A = await semad(["--listen", "127.0.0.1:0"], join(tmp, "a"));
  const base = () => A.url;
  browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true, userDataDir: join(tmp, "profile"),
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  if (REDIS) console.log(`# semad --engine ${ENGINE}`);

  const names = ["db/primary", "exports", "gpu", "render-farm", XSS];
  await step("the overview lists what the API made, every name as text", 30_000, async () => {
    for (const [n, cap] of [[names[0], 10], [names[1], 3], [names[2], 2], [names[3], 8], [names[4], 1]])
      assert.equal((await api(base(), "PUT", `/v1/semaphores/${encodeURIComponent(n)}`, { capacity: cap })).status, 201);
    const held = await api(base(), "POST", "/v1/locks/doc%2F17/acquire", { mode: "shared", owner: "<b>editor</b>" });
    assert.equal(held.status, 200, JSON.stringify(held.body));
    const page = await newPage(browser);
    await gotoUi(page, base());
    await until("the five semaphores", async () => (await rowNames(page)).length === 5);
    assert.deepEqual(await rowNames(page), [...names].sort());
    // the name is the text of a link, and nothing of it became an element
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.equal(await page.$$eval("main img", (x) => x.length), 0);
    assert.equal(await text(page, "#conn"), "Connected");
    await page.click('a[href="#/locks"]');
    await until("the lock key", async () => (await rowNames(page)).join() === "doc/17");
    await page.click('a[href="#/l/doc%2F17"]');
    await until("the lock's holder, its owner as text", async () =>
      (await page.$$eval("td.name", (t) => t.map((x) => x.textContent))).includes("<b>editor</b>"));
    assert.equal((await api(base(), "DELETE", `/v1/leases/${held.body.lease}`)).status, 204);
    await page.close();
  });

  const page = await newPage(browser);
  await step("a grant made through the API shows by the event stream, no reload", 30_000, async () => {
    // The page's poll off (read when the page loads): only the stream can bring the grant.
    // (A bound of 1 s with the poll on, every 2 s, told neither from the other, and a loaded
    // machine's browser could pass it.) An event's state read comes at most twice a second.
    await gotoUi(page, base(), `#/s/${encodeURIComponent("db/primary")}`);
    await page.evaluate(() => localStorage.setItem("sema.interval", "0"));
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.waitForSelector(".detail-status.live", { timeout: 15_000 });
    await until("the first state", async () => (await page.$$eval(".summary dd", (d) => d.length)) > 0);
    assert.equal(await page.$eval("#interval", (s) => s.value), "0");
    const t0 = Date.now();
    const g = await api(base(), "POST", "/v1/semaphores/db%2Fprimary/acquire",
      { weight: 2, ttl_ms: 60_000, owner: "<script>alert(1)</script>" });
    assert.equal(g.status, 200);
    await page.waitForSelector(`tr[data-key="${g.body.lease}"]`, { timeout: 5000 });
    console.log(`# the grant was on the page ${Date.now() - t0} ms after the acquire was sent`);
    await page.select("#interval", "2000"); // the default again, for the steps that follow
    const cells = await page.$$eval(`tr[data-key="${g.body.lease}"] td`, (t) => t.map((x) => x.textContent));
    assert.equal(cells[1], "<script>alert(1)</script>");
    assert.equal(cells[2], "2");
    await until("the timeline's grant", async () => (await text(page, ".timeline")).includes("was granted 2 units"));
  });

  await step("a dropped stream resumes with Last-Event-ID: what it missed comes first", 30_000, async () => {
    const net = await relay(A.port);
    const p = await newPage(browser);
    await gotoUi(p, net.url, "#/s/exports");
    await p.waitForSelector(".detail-status.live", { timeout: 15_000 });
    await until("the first state", async () => (await p.$$eval(".summary dd", (d) => d.length)) > 0);
    // an event first: the stream has an id to resume from (as EventSource, none before one)
    const first = await api(base(), "POST", "/v1/semaphores/exports/acquire", { ttl_ms: 60_000, owner: "before" });
    await until("the first event", async () => (await text(p, ".timeline")).includes("before was granted"));
    net.cut();
    await until("reconnecting", async () => (await text(p, ".detail-status")).includes("Reconnecting"));
    const missed = [];
    for (const who of ["while-away-1", "while-away-2"]) {
      const g = await api(base(), "POST", "/v1/semaphores/exports/acquire", { ttl_ms: 60_000, owner: who });
      assert.equal(g.status, 200);
      missed.push(g.body.lease);
    }
    net.mend();
    await p.waitForSelector(".detail-status.live", { timeout: 15_000 });
    // the timeline is made of events only: these two came as the stream's replay
    await until("the missed grants in the timeline", async () => {
      const t = await text(p, ".timeline");
      return t.includes("while-away-1 was granted") && t.includes("while-away-2 was granted");
    });
    for (const l of [first.body.lease, ...missed])
      assert.equal((await api(base(), "DELETE", `/v1/leases/${l}`)).status, 204);
    await p.close();
    net.close();
  });

  await step("the event-stream reader: events cut anywhere, CR LF, comments", 10_000, async () => {
    const got = await page.evaluate(async () => {
      const { sseParser } = await import("./ui/sse.js");
      const text = ": subscribed\r\n\r\nid: 7-1\r\nevent: granted\r\ndata: {\"lease\":\"a\"}\r\n\r\n" +
        ": ping\n\nid: 7-2\nevent: released\ndata: {\"lease\":\n\n";
      const out = [];
      for (let cut = 1; cut < text.length; cut++) { // every place a read may end
        const evs = [];
        const p = sseParser((e) => evs.push(e), () => {});
        p.feed(text.slice(0, cut));
        p.feed(text.slice(cut));
        out.push(JSON.stringify(evs));
      }
      return [...new Set(out)];
    });
    assert.deepEqual(got, [JSON.stringify([
      { id: "7-1", event: "granted", data: '{"lease":"a"}' },
      { id: "7-2", event: "released", data: '{"lease":' },
    ])]);
  });

  await step("revoke from the keyboard, confirmed; resize; delete wants the name", 45_000, async () => {
    const h = await api(base(), "POST", "/v1/semaphores/db%2Fprimary/acquire", { ttl_ms: 60_000, owner: "stuck-job" });
    const btn = `tr[data-key="${h.body.lease}"] button`;
    await page.waitForSelector(btn, { timeout: 5000 });
    await page.focus(btn);
    await page.keyboard.press("Enter");
    await page.waitForSelector("dialog[open]");
    assert.match(await text(page, "dialog[open]"), /Revoke this lease\?/);
    // the safe answer has the focus: Escape leaves everything as it was
    await page.keyboard.press("Escape");
    await until("the dialog closed", async () => !(await page.$("dialog[open]")));
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Revoke");
    await page.keyboard.press("Enter");
    await page.waitForSelector("dialog[open]");
    await page.keyboard.press("Tab"); // Cancel -> Revoke
    await page.keyboard.press("Enter");
    await until("the revoked holder gone", async () => !(await page.$(btn)));
    const renew = await api(base(), "POST", `/v1/leases/${h.body.lease}/renew`, {});
    assert.equal(renew.status, 410);
    assert.equal(renew.body.code, "lease_revoked");
    await until("the timeline's revoke", async () => (await text(page, ".timeline")).includes("was revoked"));

    await page.click(".actions button:not(.danger)"); // Resize
    await page.waitForSelector("dialog[open] input");
    await page.$eval("dialog[open] input", (i) => { i.value = ""; });
    await page.type("dialog[open] input", "12");
    await page.keyboard.press("Enter");
    await until("capacity 12", async () => (await text(page, ".summary div:first-child dd")) === "12");
    assert.equal((await api(base(), "GET", "/v1/semaphores/db%2Fprimary")).body.capacity, 12);

    assert.equal((await api(base(), "PUT", "/v1/semaphores/scratch", { capacity: 1 })).status, 201);
    await gotoUi(page, base(), "#/s/scratch");
    await page.waitForSelector(".detail-status.live", { timeout: 15_000 });
    await page.click(".actions button.danger");
    await page.waitForSelector("dialog[open] input");
    await page.type("dialog[open] input", "scratc");
    await page.keyboard.press("Enter");
    await until("the refusal of a wrong name", async () => (await text(page, "dialog[open] .error")).includes("exactly"));
    assert.equal((await api(base(), "GET", "/v1/semaphores/scratch")).status, 200);
    await page.type("dialog[open] input", "h");
    await page.keyboard.press("Enter");
    await until("back on the overview", async () => (await page.evaluate(() => location.hash)) === "#/");
    assert.equal((await api(base(), "GET", "/v1/semaphores/scratch")).status, 404);
  });

  await step("a cross-site page cannot take a unit", 20_000, async () => {
    // another origin (another port of 127.0.0.1: same site, not the same origin)
    const evil = createServer((req, res) => {
      res.setHeader("Content-Type", "text/html");
      res.end(`<!doctype html><script>
        fetch(${JSON.stringify(base())} + "/v1/semaphores/exports/acquire", { method: "POST",
          mode: "no-cors", body: JSON.stringify({ owner: "csrf" }) })
          .then(() => { document.title = "sent"; }, () => { document.title = "failed"; });
      </script>`);
    });
    await new Promise((r) => evil.listen(0, "127.0.0.1", r));
    const p = await newPage(browser);
    await p.goto(`http://127.0.0.1:${evil.address().port}/`);
    await until("the page's request", async () => ["sent", "failed"].includes(await p.title()));
    const s = (await api(base(), "GET", "/v1/semaphores/exports")).body;
    assert.equal(s.held, 0, JSON.stringify(s));
    await p.close();
    evil.close();
  });

  let load;
  await step(`${BULK} semaphores and a queue of ${QUEUE}: pages, search, a window of rows; screenshots`, 150_000, async () => {
    const t0 = Date.now();
    await pool(BULK, 32, async (i) => {
      const r = await api(base(), "PUT", `/v1/semaphores/tenant%2F${String(i).padStart(5, "0")}`, { capacity: 4 });
      assert.equal(r.status, 201);
    });
    console.log(`# ${BULK} semaphores made in ${Date.now() - t0} ms`);
    const gate = await api(base(), "POST", "/v1/semaphores/gpu/acquire", { weight: 2, ttl_ms: 600_000, owner: "trainer" });
    assert.equal(gate.status, 200);
    await pool(QUEUE, 32, async (i) => {
      const r = await api(base(), "POST", "/v1/semaphores/gpu/tickets",
        { owner: `visitor-${i}`, keepalive_ms: 3_600_000 });
      assert.equal(r.status, 201);
    });
    // the overview: a page of 50, the totals, the next page, a search
    await gotoUi(page, base());
    await until("the first page", async () => (await rowNames(page)).length === 50);
    await until("the totals", async () => (await text(page, "#totals")).replace(/[^0-9 ]/g, "")
      .includes(` ${BULK + names.length} `));
    let t = Date.now();
    await page.click(".pager button:last-child");
    await until("the second page", async () => (await rowNames(page))[0] === "tenant/00045");
    console.log(`# next page in ${Date.now() - t} ms`);
    t = Date.now();
    await page.$eval("#prefix", (i) => { i.value = ""; });
    await page.type("#prefix", "tenant/0999");
    await page.keyboard.press("Enter");
    await until("the search", async () => (await rowNames(page)).join() ===
      Array.from({ length: 10 }, (_, i) => `tenant/0999${i}`).join());
    console.log(`# search in ${Date.now() - t} ms`);
    // the queue of 1,000: in order, drawn as a window of rows
    t = Date.now();
    await gotoUi(page, base(), "#/s/gpu");
    await until("the queue", async () => (await page.$$eval("section[aria-labelledby=queue-title] table",
      (x) => x[0]?.getAttribute("aria-rowcount"))) === String(QUEUE + 1));
    console.log(`# the queue of ${QUEUE} drawn in ${Date.now() - t} ms`);
    const drawn = await page.$$eval("section[aria-labelledby=queue-title] tbody tr:not(.spacer)", (r) => r.length);
    assert.ok(drawn < 60, `${drawn} rows in the document`);
    await page.$eval("section[aria-labelledby=queue-title] .scroller", (s) => { s.scrollTop = s.scrollHeight; });
    await until("the last place", async () => (await page.$$eval("section[aria-labelledby=queue-title] tbody td:first-child",
      (c) => c.map((x) => x.textContent))).includes(`#${QUEUE}`), 5000);
    // a semaphore under load: workers take a unit, hold it a moment, give it back
    load = Array.from({ length: 12 }, (_, w) => (async () => {
      while (!stopLoad.stop) {
        const g = await api(base(), "POST", "/v1/semaphores/render-farm/acquire",
          { timeout_ms: 5000, ttl_ms: 30_000, owner: `render-${w}` }).catch(() => null);
        if (!g || g.status !== 200) { await sleep(100); continue; }
        await sleep(150 + ((w * 97) % 500));
        await api(base(), "DELETE", `/v1/leases/${g.body.lease}`).catch(() => null);
      }
    })());
    await gotoUi(page, base(), "#/s/render-farm");
    await page.waitForSelector(".detail-status.live", { timeout: 15_000 });
    await until("the load in the timeline", async () => (await page.$$eval(".timeline li", (l) => l.length)) > 20);
    // the page keeps up: frames keep coming while events stream in
    const gap = await page.evaluate(() => new Promise((r) => {
      let last = performance.now(), worst = 0;
      const end = last + 2000;
      const f = (now) => { worst = Math.max(worst, now - last); last = now; if (now < end) requestAnimationFrame(f); else r(worst); };
      requestAnimationFrame(f);
    }));
    console.log(`# the longest frame under load: ${Math.round(gap)} ms`);
    await page.setViewport({ width: 1280, height: 1200 });
    await page.evaluate(() => document.querySelector("section[aria-labelledby=queue-title]").scrollIntoView());
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(SHOTS, "dashboard-semaphore.png") });
    await page.setViewport({ width: 1280, height: 800 });
    await gotoUi(page, base());
    await until("the overview", async () => (await rowNames(page)).length === 50);
    await sleep(2500); // two reads: grants per second
    await page.screenshot({ path: join(SHOTS, "dashboard-overview.png") });
  });

  await step("axe-core: no serious or critical violation", 60_000, async () => {
    const p = await newPage(browser);
    for (const scheme of ["light", "dark"]) {
      await p.emulateMediaFeatures([{ name: "prefers-color-scheme", value: scheme }]);
      await gotoUi(p, base());
      await until("the overview", async () => (await rowNames(p)).length > 0);
      await axeScan(p, `overview (${scheme})`);
      await gotoUi(p, base(), "#/s/render-farm");
      await p.waitForSelector(".detail-status.live", { timeout: 15_000 });
      await until("holders", async () => (await p.$$eval(".summary dd", (d) => d.length)) > 0);
      await axeScan(p, `semaphore (${scheme})`);
      await p.click(".actions button:not(.danger)");
      await p.waitForSelector("dialog[open]");
      await axeScan(p, `resize dialog (${scheme})`);
      await p.keyboard.press("Escape");
    }
    await p.setViewport({ width: 390, height: 844 });
    await gotoUi(p, base(), "#/locks");
    await sleep(500);
    await axeScan(p, "locks, a phone's width");
    await gotoUi(p, base());
    await until("the overview", async () => (await rowNames(p)).length > 0);
    const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `the page is ${overflow} px wider than a phone`);
    await p.close();
  });

  await step("the page survives a semad restart", 60_000, async () => {
    stopLoad.stop = true;
    await Promise.all(load);
    const over = await newPage(browser);
    await gotoUi(over, base());
    await until("the overview", async () => (await rowNames(over)).length === 50);
    await gotoUi(page, base(), "#/s/exports");
    await page.waitForSelector(".detail-status.live", { timeout: 15_000 });
    const port = A.port;
    assert.equal(await A.stop(), 0);
    await until("the overview reconnecting", async () => (await text(over, "#conn")) === "Reconnecting…");
    await until("the semaphore reconnecting", async () => (await text(page, ".detail-status")).includes("Reconnecting"));
    A = await semad(["--listen", `127.0.0.1:${port}`], join(tmp, "a"));
    await until("the overview connected", async () => (await text(over, "#conn")) === "Connected", 20_000);
    await until("the list again", async () => (await rowNames(over)).includes("exports"));
    await page.waitForSelector(".detail-status.live", { timeout: 20_000 });
    const g = await api(base(), "POST", "/v1/semaphores/exports/acquire", { ttl_ms: 60_000, owner: "after-restart" });
    assert.equal(g.status, 200);
    await page.waitForSelector(`tr[data-key="${g.body.lease}"]`, { timeout: 5000 });
    await over.close();
  });

  await step("--auth: a read token has no actions, an admin token has", 60_000, async () => {
    const file = join(tmp, "tokens");
    const tok = (name, rights) => {
      const r = spawnSync(SEMA, ["token", "new", name, "--rights", rights, "--file", file], { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
      return r.stdout.trim();
    };
    const viewer = tok("viewer", "read");
    const ops = tok("ops", "admin");
    const r = spawnSync(SEMA, ["token", "new", "team", "--rights", "read", "--prefix", "ci", "--file", file],
      { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    const team = r.stdout.trim();
    const B = await semad(["--listen", "127.0.0.1:0", "--auth", file], join(tmp, "b"));
    assert.equal((await api(B.url, "PUT", "/v1/semaphores/ci", { capacity: 2 }, { token: ops })).status, 201);
    const lease = (await api(B.url, "POST", "/v1/semaphores/ci/acquire", { ttl_ms: 60_000 }, { token: ops })).body.lease;
    for (const [who, t, admin] of [["viewer", viewer, false], ["ops", ops, true]]) {
      const p = await newPage(browser);
      await gotoUi(p, B.url, "#/s/ci");
      await p.waitForSelector("dialog[open] input[type=password]", { timeout: 15_000 });
      if (!admin) await axeScan(p, "the token dialog");
      await p.type("dialog[open] input", "sema_not_a_token");
      await p.keyboard.press("Enter");
      await until("the unknown token refused", async () => (await text(p, "dialog[open] .error")).includes("does not know"));
      await p.$eval("dialog[open] input", (i) => { i.value = ""; });
      await p.type("dialog[open] input", t);
      await p.keyboard.press("Enter");
      await p.waitForSelector(`tr[data-key="${lease}"]`, { timeout: 15_000 });
      assert.match(await text(p, "#who"), new RegExp(`Token ${who}`));
      const buttons = await p.$$eval("main button", (b) => b.map((x) => x.textContent));
      if (admin) assert.deepEqual(buttons.sort(), ["Delete", "Resize", "Revoke"]);
      else assert.deepEqual(buttons, []);
      // the token lives in the tab: a reload keeps it, another tab does not have it
      await p.reload({ waitUntil: "domcontentloaded" });
      await p.waitForSelector(`tr[data-key="${lease}"]`, { timeout: 15_000 });
      assert.equal(await p.$("dialog[open]"), null);
      await p.close();
    }
    // a token limited to a prefix lists under it: the search starts there
    assert.equal((await api(B.url, "PUT", "/v1/semaphores/other", { capacity: 1 }, { token: ops })).status, 201);
    {
      const p = await newPage(browser);
      await gotoUi(p, B.url);
      await p.waitForSelector("dialog[open] input", { timeout: 15_000 });
      await p.type("dialog[open] input", team);
      await p.keyboard.press("Enter");
      await until("the token's names only", async () => (await rowNames(p)).join() === "ci");
      assert.equal(await p.$eval("#prefix", (i) => i.value), "ci");
      await p.close();
    }
    // what the page would send, from the page, with the read token: refused
    const p = await newPage(browser);
    await gotoUi(p, B.url);
    await p.waitForSelector("dialog[open] input", { timeout: 15_000 });
    const st = await p.evaluate(async (u, t, id) => (await fetch(`v1/leases/${id}/revoke`,
      { method: "POST", headers: { Authorization: `Bearer ${t}` } })).status, B.url, viewer, lease);
    assert.equal(st, 403);
    await p.close();
    await B.stop();
  });

  await step("--ui-read-only: no actions, and the page cannot change state", 30_000, async () => {
    const C = await semad(["--listen", "127.0.0.1:0", "--ui-read-only"], join(tmp, "c"));
    assert.equal((await api(C.url, "PUT", "/v1/semaphores/ro", { capacity: 2 })).status, 201);
    const lease = (await api(C.url, "POST", "/v1/semaphores/ro/acquire", { ttl_ms: 60_000 })).body.lease;
    const p = await newPage(browser);
    await gotoUi(p, C.url, "#/s/ro");
    await p.waitForSelector(`tr[data-key="${lease}"]`, { timeout: 15_000 });
    assert.deepEqual(await p.$$eval("main button", (b) => b.length), 0);
    assert.match(await text(p, "#who"), /read-only/);
    const st = await p.evaluate(async (id) => (await fetch(`v1/leases/${id}/revoke`, { method: "POST" })).status, lease);
    assert.equal(st, 403);
    await p.close();
    await C.stop();
  });

  const csp = await page.evaluate(() => window.__csp);
  assert.deepEqual(csp, [], `CSP violations: ${csp}`);
  assert.deepEqual(pageErrors, [], `errors in the page: ${pageErrors.join("; ")}`);
  await A.stop();
  console.log("ok dashboard");
} catch (e) {
  console.error(e);
  process.exitCode = 1;
} finally {
  stopLoad.stop = true;
  await browser?.close().catch(() => {});
  for (const c of children) c.kill("SIGKILL");
  rmSync(tmp, { recursive: true, force: true });
  process.exit(process.exitCode ?? 0); // nothing left open (a relay, a worker) holds it
}
