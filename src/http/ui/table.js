// SPDX-License-Identifier: MIT
// table.js - a table that stays fast with thousands of rows: only the rows in view (and a
// few around them) are in the document, between two spacer rows as tall as the rest, so
// 1,000 waiters cost about thirty rows. Rows are kept by key, so an update leaves a focused
// button where it is. aria-rowcount and aria-rowindex tell a screen reader the whole size.

import { h, keyedRows, perFrame, placeChildren } from "./dom.js";

const OVERSCAN = 8;
const ROW_REM = 2.5; // the height of a row, as style.css sets it

export class VirtualTable {
  /** columns: [{label, className, cell(item) -> string | Node}]; key(item) -> string;
   * caption: the table's accessible name; empty: text when there are no rows. */
  constructor({ caption, columns, key, empty, maxVisible = 16 }) {
    this.columns = columns;
    this.items = [];
    this.rowHeight = 0;
    this.maxVisible = maxVisible;
    this.emptyText = empty;
    this.key = key;
    this.rows = keyedRows(key, (item) => this.makeRow(item), (row, item) => this.updateRow(row, item));
    this.top = h("tr", { class: "spacer", "aria-hidden": "true" });
    this.bottom = h("tr", { class: "spacer", "aria-hidden": "true" });
    this.body = h("tbody");
    this.table = h("table", {},
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", { "aria-rowindex": "1" },
        columns.map((c) => h("th", { scope: "col", class: c.className }, c.label)))),
      this.body);
    this.empty = h("p", { class: "empty" }, empty);
    this.scroller = h("div", { class: "scroller", tabindex: "0", role: "region",
      "aria-label": caption }, this.table);
    this.el = h("div", { class: "vtable" }, this.scroller, this.empty);
    this.render = perFrame(() => this.draw());
    this.scroller.addEventListener("scroll", this.render, { passive: true });
  }

  makeRow(item) {
    const cells = this.columns.map((c) => h("td", { class: c.className }));
    const row = h("tr", { "data-key": this.key(item) }, cells);
    row.cells_ = cells;
    return row;
  }

  updateRow(row, item) {
    this.columns.forEach((c, i) => {
      const v = c.cell(item);
      const td = row.cells_[i];
      if (v instanceof Node) {
        if (td.firstChild !== v) td.replaceChildren(v);
      } else if (td.textContent !== String(v)) {
        td.textContent = String(v);
      }
    });
  }

  /** Show `items` (drawn at the next frame). */
  setItems(items) {
    this.items = items;
    this.render();
  }

  /** Draw again (ages move on with the clock). */
  refresh() {
    this.render();
  }

  draw() {
    const n = this.items.length;
    this.table.setAttribute("aria-rowcount", String(n + 1));
    this.empty.hidden = n > 0;
    this.scroller.hidden = n === 0;
    if (n === 0) {
      placeChildren(this.body, []);
      return;
    }
    if (!this.rowHeight) this.measure();
    const rh = this.rowHeight;
    const visible = Math.max(1, Math.ceil(this.scroller.clientHeight / rh) || this.maxVisible);
    const first = Math.max(0, Math.floor(this.scroller.scrollTop / rh) - OVERSCAN);
    const last = Math.min(n, first + visible + 2 * OVERSCAN);
    const rows = this.rows(this.items.slice(first, last));
    rows.forEach((r, i) => r.setAttribute("aria-rowindex", String(first + i + 2)));
    this.top.style.height = `${first * rh}px`;
    this.bottom.style.height = `${(n - last) * rh}px`;
    placeChildren(this.body, [...(first > 0 ? [this.top] : []), ...rows,
      ...(last < n ? [this.bottom] : [])]);
    this.scroller.classList.toggle("scrolls", n > this.maxVisible);
  }

  /** The height of one row: every row is ROW_REM high (style.css, tr). */
  measure() {
    const rem = parseFloat(getComputedStyle(document.documentElement).fontSize) || 16;
    this.rowHeight = ROW_REM * rem;
  }
}
