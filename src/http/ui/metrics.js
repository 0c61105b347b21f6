// SPDX-License-Identifier: MIT
// metrics.js - the wait and hold time distributions, from semad's /metrics (Prometheus text):
// semad_wait_seconds (request to grant) and semad_hold_seconds (grant to end), histograms of
// the whole instance since it started. Drawn as one bar per bucket, with the bucket that
// holds the median and the 90th and 99th percentiles named.

import { fill, fmtCount, h } from "./dom.js";

/** The buckets of histogram `name` in Prometheus text: [{le, count}] (counts not
 * cumulative), and the total. */
export function histogram(text, name) {
  const re = new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\d+)$`, "gm");
  const out = [];
  let prev = 0;
  for (let m; (m = re.exec(text)) !== null;) {
    const cum = Number(m[2]);
    out.push({ le: m[1] === "+Inf" ? Infinity : Number(m[1]), count: cum - prev });
    prev = cum;
  }
  return { buckets: out, total: prev };
}

function fmtBound(le) {
  if (le === Infinity) return "longer";
  if (le < 1) return `≤ ${+(le * 1000).toFixed(1)} ms`;
  return le < 60 ? `≤ ${le} s` : `≤ ${le / 60} min`;
}

/** The bucket bound under which fraction `q` of the observations fall. */
export function quantileBound(hist, q) {
  let seen = 0;
  for (const b of hist.buckets) {
    seen += b.count;
    if (hist.total > 0 && seen >= q * hist.total) return b.le;
  }
  return null;
}

/** Draw `hist` into `el` (a figure): a list of bars, each labelled with its bucket, count
 * and share, and a caption of the percentiles. */
export function drawHistogram(el, title, hist) {
  const max = Math.max(1, ...hist.buckets.map((b) => b.count));
  // from the first bucket with something in it to the last
  const used = hist.buckets.map((b, i) => (b.count ? i : -1)).filter((i) => i >= 0);
  const shown = used.length ? hist.buckets.slice(used[0], used[used.length - 1] + 1) : [];
  const rows = shown.map((b) => {
    const bar = h("span", { class: "hbar" });
    bar.style.setProperty("--w", `${(100 * b.count) / max}%`);
    const share = hist.total ? Math.round((100 * b.count) / hist.total) : 0;
    return h("li", {}, h("span", { class: "hlabel" }, fmtBound(b.le)), bar,
      h("span", { class: "hcount" }, `${fmtCount(b.count)} (${share}%)`));
  });
  const q = (p) => {
    const v = quantileBound(hist, p);
    return v === null ? "—" : fmtBound(v);
  };
  fill(el,
    h("figcaption", {}, h("strong", {}, title), ` — ${fmtCount(hist.total)} in all; median ${q(0.5)},` +
      ` p90 ${q(0.9)}, p99 ${q(0.99)}`),
    hist.total ? h("ol", { class: "histogram" }, rows) : h("p", { class: "empty" }, "Nothing yet."));
}
