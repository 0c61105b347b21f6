// SPDX-License-Identifier: MIT
// server.mjs - a waiting room for an expensive job, on semad tickets. Each visitor's page
// takes a ticket (its id kept in a cookie, so a reload keeps the place), shows "you are
// number N, about M s", and when its turn comes the server runs the job while holding the
// ticket's lease: never more than the semaphore's capacity at once, in arrival order.
//
//   SEMA_SERVER=http://127.0.0.1:7070 node server.mjs
//
// Settings (environment): PORT (0: any; the address is printed), ROOM (semaphore name),
// CAPACITY (jobs at once), JOB_MS (how long the simulated job takes), KEEPALIVE_MS (a ticket
// nobody reads this long leaves the line), POLL_MS (longest long-poll to semad).
import { createServer } from "node:http";
import { createClient, SemaTicketEndedError, SemaNotFoundError } from "@sema/client";

const ROOM = process.env.ROOM || "waiting-room";
const CAPACITY = Number(process.env.CAPACITY || 2);
const JOB_MS = Number(process.env.JOB_MS || 5000);
const KEEPALIVE_MS = Number(process.env.KEEPALIVE_MS || 30000);
const POLL_MS = Number(process.env.POLL_MS || 10000);

const client = createClient();
const sem = await client.createSemaphore(ROOM, CAPACITY); // the room is this server's: made at start

/** Jobs by ticket id: { state: "running" | "done", started, ended, result }. */
const jobs = new Map();
const stats = { running: 0, maxRunning: 0, done: 0, log: [] };

function cookieTicket(req) {
  const m = /(?:^|;\s*)ticket=([A-Za-z0-9_-]+)/.exec(req.headers.cookie || "");
  return m ? m[1] : undefined;
}

function send(res, status, body, headers = {}) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  res.writeHead(status, {
    "content-type": typeof body === "string" ? "text/html; charset=utf-8" : "application/json",
    "cache-control": "no-store",
    ...headers,
  });
  res.end(text);
}

/** The expensive job, run while the ticket's lease is held (renewed in the background). */
async function runJob(ticket) {
  if (jobs.has(ticket.id)) return;
  const permit = client.ticketPermit(ticket);
  const job = { state: "running", started: Date.now(), ended: 0, result: "" };
  jobs.set(ticket.id, job);
  stats.running++;
  stats.maxRunning = Math.max(stats.maxRunning, stats.running);
  try {
    await new Promise((r) => setTimeout(r, JOB_MS));
    job.result = `rendered for ticket ${ticket.id.slice(0, 6)} with fence ${permit.fence}`;
  } finally {
    job.ended = Date.now();
    stats.running--;
    stats.done++;
    stats.log.push({ ticket: ticket.id, started: job.started, ended: job.ended });
    job.state = "done";
    await permit.release();
  }
}

/** What the page shows, from a ticket (or a job once granted). */
function view(ticket) {
  const job = jobs.get(ticket.id);
  if (job) return { ticket: ticket.id, state: job.state, result: job.result };
  if (ticket.status === "granted") {
    void runJob(ticket);
    return { ticket: ticket.id, state: "running", result: "" };
  }
  return {
    ticket: ticket.id,
    state: "waiting",
    position: ticket.position,
    estimateMs: ticket.estimateMs,
    pollAfterMs: ticket.pollAfterMs,
  };
}

/** POST /api/ticket: the visitor's ticket (kept from the cookie when it is still in line). */
async function take(req, res) {
  const id = cookieTicket(req);
  if (id) {
    const job = jobs.get(id);
    if (job) return send(res, 200, { ticket: id, state: job.state, result: job.result });
    try {
      return send(res, 200, view(await client.ticket(id)));
    } catch (e) {
      if (!(e instanceof SemaTicketEndedError || e instanceof SemaNotFoundError)) throw e;
    }
  }
  const t = await sem.takeTicket({ keepaliveMs: KEEPALIVE_MS, owner: "web" });
  send(res, 201, view(t), { "set-cookie": `ticket=${t.id}; Path=/; HttpOnly; SameSite=Lax` });
}

/** GET /api/status: long-polls the ticket; answers when it moves, is granted, or in POLL_MS. */
async function status(req, res) {
  const id = cookieTicket(req);
  if (!id) return send(res, 404, { error: "no ticket" });
  const job = jobs.get(id);
  if (job) return send(res, 200, { ticket: id, state: job.state, result: job.result });
  // The page went away: stop reading, so its ticket's keepalive runs out and it leaves.
  const ac = new AbortController();
  res.on("close", () => ac.abort());
  try {
    send(res, 200, view(await client.ticket(id, { waitMs: POLL_MS, signal: ac.signal })));
  } catch (e) {
    if (ac.signal.aborted) return;
    if (e instanceof SemaTicketEndedError || e instanceof SemaNotFoundError)
      return send(res, 410, { error: "your place in line ended; reload to take a new one" });
    throw e;
  }
}

const page = `<!doctype html>
<html><head><meta charset="utf-8"><title>Waiting room</title>
<style>
body{font-family:system-ui,sans-serif;background:#f4f1ea;color:#222;display:flex;
 justify-content:center;align-items:center;height:100vh;margin:0}
.card{background:#fff;border-radius:12px;box-shadow:0 2px 12px #0002;padding:2em 3em;
 min-width:22em;text-align:center}
h1{font-size:1.3em;margin:0 0 .8em}#n{font-size:2.6em;font-weight:700;margin:.2em 0}
#eta{color:#666}#result{color:#176;font-weight:600}
</style></head>
<body><div class="card"><h1>Image generator</h1>
<div id="status">taking a place in line…</div><div id="n"></div><div id="eta"></div>
<div id="result"></div></div>
<script>
const $ = (id) => document.getElementById(id);
window.seen = { ticket: null, positions: [], states: [], lastReply: 0, longestGap: 0 };
function show(v) {
  const now = Date.now();
  if (window.seen.lastReply) window.seen.longestGap = Math.max(window.seen.longestGap, now - window.seen.lastReply);
  window.seen.lastReply = now;
  window.seen.ticket = v.ticket;
  window.seen.states.push(v.state);
  if (v.state === "waiting") {
    window.seen.positions.push(v.position);
    $("status").textContent = "You are number";
    $("n").textContent = v.position;
    const s = (ms) => Math.max(1, Math.round(ms / 1000)) + " s";
    $("eta").textContent = v.estimateMs
      ? "about " + s(v.estimateMs.p50) + " (9 in 10 within " + s(v.estimateMs.p90) + ")"
      : "estimating the wait…";
    if (v.estimateMs) window.seen.estimatedAt = Math.max(window.seen.estimatedAt || 0, v.position);
  } else if (v.state === "running") {
    $("status").textContent = "Your turn: running the job…";
    $("n").textContent = ""; $("eta").textContent = "";
  } else {
    $("status").textContent = "Done";
    $("n").textContent = ""; $("eta").textContent = "";
    $("result").textContent = v.result;
  }
  document.body.dataset.state = v.state;
}
async function main() {
  let v = await (await fetch("/api/ticket", { method: "POST" })).json();
  show(v);
  while (v.state !== "done") {
    const sent = Date.now();
    const r = await fetch("/api/status");
    if (r.status === 410) {
      window.seen.expired = { sentAfterMs: sent - window.seen.lastReply, answeredAfterMs: Date.now() - sent };
      $("status").textContent = "Your place expired: reload"; return;
    }
    v = await r.json();
    show(v);
    if (v.state === "running") await new Promise((ok) => setTimeout(ok, 200));
  }
}
main().catch((e) => { $("status").textContent = "error: " + e; });
</script></body></html>`;

const server = createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const route = `${req.method} ${url.pathname}`;
  const handler =
    route === "GET /" ? () => send(res, 200, page)
    : route === "POST /api/ticket" ? () => take(req, res)
    : route === "GET /api/status" ? () => status(req, res)
    : route === "GET /api/stats" ? () => send(res, 200, stats)
    : () => send(res, 404, { error: "no such page" });
  Promise.resolve(handler()).catch((e) => {
    if (!res.headersSent) send(res, 502, { error: String(e?.message ?? e) });
  });
});
server.listen(Number(process.env.PORT || 8080), "127.0.0.1", () => {
  console.log(`waiting room on http://127.0.0.1:${server.address().port}/ (semaphore ${ROOM}, capacity ${CAPACITY})`);
});
