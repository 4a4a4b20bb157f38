// What the memory, knowledge, tools and settings views share: their header and the states a panel can be in
// (loading, empty, its part not running in this server, an error with a way to try again).
import { h } from "./dom.js";

/** The view's title and what it is for. */
export function header(title, intro) {
  return h("header.panel-head", h("h1", title), intro ? h("p.muted", intro) : null);
}

export function loading(what) {
  return h("p.muted.loading", { role: "status" }, `Loading ${what}…`);
}

/** Mark the view loaded (main[data-ready], what tests and benches wait for), unless it was left meanwhile. */
export function ready(main, view, signal) {
  if (!signal.aborted) main.dataset.ready = view;
}

/** A panel with nothing to show: the first line says so, the others say how it gets filled. */
export function empty(first, ...more) {
  return h("div.card.empty", { role: "status" }, h("p", h("strong", first)), more.map((m) => h("p.muted", m)));
}

/**
 * A failed load: a 503 of type `not_enabled` means the part does not run in this server (the server's message
 * says how to turn it on); anything else (a damaged store, a lost connection) is an error, with `retry`
 * offered as a button.
 */
export function failure(e, what, retry) {
  if (notEnabled(e)) {
    return h("div.card.unavailable", { role: "status" },
      h("p", h("strong", `${what} does not run in this server.`)),
      h("p.muted", e.message),
    );
  }
  return h("div.card.failed", { role: "alert" },
    h("p.error", `${what} could not be loaded: ${e ? e.message : "unknown error"}`),
    retry ? h("button", { type: "button", on: { click: retry } }, "Try again") : null,
  );
}

export function notEnabled(e) {
  return Boolean(e) && e.status === 503 && e.type === "not_enabled";
}

export function badge(text, kind) {
  return h(kind ? `span.badge.${kind}` : "span.badge", String(text));
}

/** Seconds since the epoch as the reader's local date and time. */
export function dateTime(ts) {
  return ts ? new Date(ts * 1000).toLocaleString() : "–";
}

/** `n thing(s)`. */
export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}
