// SPDX-License-Identifier: MIT
// dialogs.js - the questions the page asks: "are you sure" before revoke, resize and delete
// (delete wants the name typed, as it cannot be undone), and the token when semad runs with
// --auth. Native modal <dialog>s: the page behind is inert, Escape cancels, focus returns to
// what opened them.

import { h } from "./dom.js";

/** Ask in a modal dialog. `body`: nodes; `field`: {label, type, value, min, mustEqual,
 * autocomplete} for an answer to type. Resolves with the answer (true without a field), or
 * null when cancelled. `run(answer)` (optional) is awaited before the dialog closes; an
 * error it throws is shown in the dialog, which stays open. */
export function ask({ title, body = [], field = null, confirm = "OK", danger = false, run }) {
  return new Promise((resolve) => {
    const opener = document.activeElement;
    const id = `d${Math.random().toString(36).slice(2, 8)}`;
    const error = h("p", { class: "error", role: "alert", id: `${id}-err` });
    const input = field ? h("input", {
      id: `${id}-in`, type: field.type || "text", value: field.value ?? "", min: field.min,
      step: field.type === "number" ? "1" : null, required: true,
      autocomplete: field.autocomplete || "off", spellcheck: "false",
      "aria-describedby": `${id}-err`,
    }) : null;
    const ok = h("button", { type: "submit", class: danger ? "danger" : "primary" }, confirm);
    const cancel = h("button", { type: "button", onclick: () => close(null) }, "Cancel");
    const form = h("form", { novalidate: true },
      h("h2", { id: `${id}-title` }, title),
      h("div", { class: "dialog-body" }, body),
      field ? h("p", {}, h("label", { for: `${id}-in` }, field.label), input) : null,
      error,
      h("p", { class: "buttons" }, cancel, ok));
    const dlg = h("dialog", { "aria-labelledby": `${id}-title` }, form);
    let done = false;
    function close(v) {
      if (done) return;
      done = true;
      dlg.close();
      dlg.remove();
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
      resolve(v);
    }
    function answer() {
      if (!field) return true;
      const v = input.value.trim();
      if (v === "") return { error: `${field.label} is needed.` };
      if (field.mustEqual !== undefined && v !== field.mustEqual)
        return { error: `Type ${field.mustEqual} exactly to go on.` };
      if (field.type === "number" && !/^[0-9]+$/.test(v))
        return { error: `${field.label} must be a whole number.` };
      return v;
    }
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const v = answer();
      if (v && v.error) {
        error.textContent = v.error;
        input?.focus();
        return;
      }
      if (!run) return close(v);
      ok.disabled = true;
      try {
        await run(v);
        close(v);
      } catch (err) {
        error.textContent = err.message || String(err);
        ok.disabled = false;
      }
    });
    dlg.addEventListener("cancel", (e) => {
      e.preventDefault();
      close(null);
    });
    document.body.append(dlg);
    dlg.showModal();
    (input || cancel).focus();
  });
}
