// The inspector's session level: the requests table, the cache-reuse chart and the compression view.
import { h, secs } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";

const NUMBER = new Intl.NumberFormat("en-US"); // one formatter: toLocaleString per number is slow on 1,000s
export const fmt = (n) => (n === null || n === undefined ? "–" : NUMBER.format(n));
export const fresh = (r) => Math.max(0, (r.prompt_tokens || 0) - (r.cached_prompt_tokens || 0));
export const requestHref = (sid, index) => `#/inspector/${encodeURIComponent(sid)}/${index}`;

/** The prefix verdict of a request record: {key: first|ok|deliberate|broken, label, detail}. */
export function verdict(r) {
  if (r.first_request) return { key: "first", label: "first", detail: "the first request: nothing to compare with" };
  if (r.prefix_ok) return { key: "ok", label: "ok", detail: "the previous request is a prefix of this one" };
  if (r.deliberate) {
    return { key: "deliberate", label: "changed on purpose", detail: `changed on purpose: ${r.deliberate}` };
  }
  return { key: "broken", label: "BROKEN", detail: `prefix broken at ${r.diverged_at || "?"}` };
}

const BADGE_CLASS = { first: "", ok: "ok", deliberate: "warn", broken: "bad" };

export function verdictBadge(r, { long = false, short = false } = {}) {
  const v = verdict(r);
  const where = r.diverged_at ? ` at ${r.diverged_at}` : "";
  const cls = BADGE_CLASS[v.key] ? `span.badge.insp-verdict.${BADGE_CLASS[v.key]}` : "span.badge.insp-verdict";
  let text = long && v.key === "deliberate" ? `${v.label} (${r.deliberate})` : v.label;
  if (short && v.key === "deliberate") text = "on purpose";
  return h(cls, { title: v.detail + (v.key === "deliberate" ? where : ""), dataset: { verdict: v.key } }, text);
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/**
 * Cached vs new prompt tokens per request as SVG bars; a prefix break is a red (or, on purpose, amber) cap
 * above its bar. `current` is outlined; a click on a bar calls onPick(index).
 */
export function chart(requests, { current = null, onPick = null, compact = false } = {}) {
  const n = requests.length;
  const slots = Math.max(n, 24);
  const top = Math.max(1, ...requests.map((r) => r.prompt_tokens || 0));
  const H = 100, BODY = 88;
  const root = svg("svg", {
    viewBox: `0 0 ${slots * 10} ${H}`, preserveAspectRatio: "none", role: "img",
    "aria-label": `prompt tokens per request, cached and new (${n} requests)`, class: "insp-chart-svg",
  });
  root.append(svg("line", { x1: 0, y1: H, x2: slots * 10, y2: H, class: "insp-axis" }));
  requests.forEach((r, i) => {
    const x = i * 10 + 1.5;
    const cached = ((r.cached_prompt_tokens || 0) / top) * BODY;
    const added = (fresh(r) / top) * BODY;
    const v = verdict(r);
    const g = svg("g", { class: `insp-bar v-${v.key}${r.index === current ? " current" : ""}`, "data-index": r.index });
    g.append(svg("rect", { x: x - 1.5, y: 0, width: 10, height: H, class: "insp-hit" }));
    g.append(svg("rect", { x, y: H - cached, width: 7, height: cached, class: "insp-cached" }));
    g.append(svg("rect", { x, y: H - cached - added, width: 7, height: added, class: "insp-new" }));
    if (v.key === "broken" || v.key === "deliberate") {
      g.append(svg("rect", { x: x - 1, y: 0, width: 9, height: 7, class: "insp-break" }));
    }
    root.append(g);
  });
  // one listener each for the whole chart: a bar's tooltip is written when the pointer first reaches it
  const barOf = (ev) => ev.target.closest?.("g.insp-bar");
  root.addEventListener("mouseover", (ev) => {
    const g = barOf(ev);
    if (!g || g.firstChild.nodeName === "title") return;
    const r = requests.find((x) => String(x.index) === g.dataset.index);
    const v = verdict(r);
    g.prepend(svg("title", {}, `request ${r.index}: ${fmt(r.prompt_tokens)} prompt tokens, `
      + `${fmt(r.cached_prompt_tokens)} cached, ${fmt(fresh(r))} new · prefix `
      + (v.key === "deliberate" ? v.detail : v.label)));
  });
  if (onPick) {
    root.addEventListener("click", (ev) => {
      const g = barOf(ev);
      if (g) onPick(Number(g.dataset.index));
    });
  }
  const reused = requests.reduce((a, r) => a + (r.cached_prompt_tokens || 0), 0);
  const prompt = requests.reduce((a, r) => a + (r.prompt_tokens || 0), 0);
  const breaks = requests.filter((r) => verdict(r).key === "broken").length;
  return h(`figure.insp-chart${compact ? ".compact" : ""}`,
    h("div.insp-chart-plot", h("span.insp-chart-max.muted", fmt(top)), root),
    h("figcaption.row.muted",
      h("span.insp-key.cached", "cached"), h("span.insp-key.new", "new"), h("span.insp-key.break", "prefix break"),
      h("span.grow"),
      `${n} requests · ${prompt ? Math.round((100 * reused) / prompt) : 0}% of prompt tokens from cache · `,
      h(breaks ? "strong.error" : "span", `${breaks} accidental prefix break${breaks === 1 ? "" : "s"}`),
    ),
  );
}

/** The session's requests as a table of links (keyboard: the rows' links, j/k move between them). */
export function requestsTable(sid, requests) {
  if (!requests.length) return h("p.muted", "This session has made no model request yet.");
  const head = h("tr",
    h("th", "#"), h("th.num", "prompt"), h("th.num", "cached"), h("th.num", "new"), h("th.num.insp-opt", "completion"),
    h("th.num.insp-opt", "TTFT"), h("th.num.insp-opt", "total"), h("th.insp-opt", "tool choice"), h("th", "prefix"),
  );
  const body = document.createDocumentFragment();
  for (const r of requests) {
    body.append(h("tr", { dataset: { index: r.index } },
      h("td", h("a.insp-nav", { href: requestHref(sid, r.index) }, `#${r.index}`)),
      h("td.num", fmt(r.prompt_tokens)), h("td.num", fmt(r.cached_prompt_tokens)), h("td.num", fmt(fresh(r))),
      h("td.num.insp-opt", fmt(r.completion_tokens)), h("td.num.insp-opt", secs(r.ttft_s)),
      h("td.num.insp-opt", secs(r.total_s)), h("td.insp-opt", r.tool_choice ?? "–"),
      h("td", verdictBadge(r, { long: true }), r.diverged_at ? h("span.muted", ` ${r.diverged_at}`) : null),
    ));
  }
  return h("div.insp-scroll", h("table.insp-requests", h("thead", head), h("tbody", body)));
}

const LAYER_LABEL = {
  spill: "spilled to a file", noise: "noise removed", compressed: "summarised", round: "round archived",
};

function folded(text, limit = 1500) {
  const pre = h("pre.insp-text");
  if (text.length <= limit) {
    pre.textContent = text;
    return pre;
  }
  pre.textContent = text.slice(0, limit);
  const more = h("button.insp-more", { type: "button" }, `show all ${fmt(text.length)} chars`);
  more.addEventListener("click", () => {
    pre.textContent = text;
    more.remove();
  });
  return h("div", pre, more);
}

/** One replacement: what the model now sees, and the stored original one click away (built when opened). */
function replacement(r) {
  const text = r.text || "";
  const hasOriginal = typeof r.original === "string";
  let original;
  if (hasOriginal) {
    original = h("details.insp-original", h("summary", `the original (${fmt(r.original.length)} chars, as stored)`));
    original.addEventListener("toggle", () => {
      if (original.open && original.childElementCount === 1) original.append(folded(r.original, 20000));
    });
  } else {
    original = h("p.muted", r.layer === "round"
      ? "An archived round: it stands for several messages, no single original."
      : "The original is not stored.");
  }
  const what = r.layer === "round" ? `round ${r.seq}` : `message ${r.seq}`;
  return h("article.card.insp-replacement", { dataset: { seq: r.seq, layer: r.layer } },
    h("div.row",
      h("strong", what), h("span.badge", LAYER_LABEL[r.layer] || r.layer),
      r.spill_path ? h("code.insp-path", r.spill_path) : null,
      h("span.grow"),
      h("span.muted", `${fmt(text.length)} chars seen` + (hasOriginal ? ` of ${fmt(r.original.length)}` : "")),
    ),
    h("div.muted.insp-label", "what the model sees now"),
    folded(text),
    original,
  );
}

/** The compression tab: events (what was done when) and each replaced message with its original. */
export function compressionView(sid, data) {
  const events = data.events || [];
  const repl = data.replacements || [];
  const out = h("div.insp-compression");
  if (!events.length && !repl.length) {
    out.append(h("p.muted", "Nothing in this session was spilled, shrunk, archived or summarised."));
    return out;
  }
  const counts = {};
  for (const r of repl) counts[r.layer] = (counts[r.layer] || 0) + 1;
  out.append(h("p.row", ...Object.entries(counts).map(([k, c]) => h("span.badge", `${LAYER_LABEL[k] || k}: ${c}`))));
  if (events.length) {
    const rows = events.map((e) => h("tr",
      h("td", h("span.badge", e.kind)),
      h("td", e.message || ""),
      h("td", e.request === null || e.request === undefined ? "–"
        : h("a", { href: requestHref(sid, e.request) }, `#${e.request}`)),
      h("td.muted", (e.seqs || []).join(", ")),
    ));
    out.append(h("section.card",
      h("h3", "What compression did"),
      h("div.insp-scroll", h("table.insp-events",
        h("thead", h("tr", h("th", "kind"), h("th", "what"), h("th", "request"), h("th", "messages"))),
        h("tbody", rows),
      )),
    ));
  }
  if (repl.length) {
    out.append(h("h3", "Replaced messages"), ...repl.map(replacement));
  }
  return out;
}
