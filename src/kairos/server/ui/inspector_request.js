// One request in the inspector: its numbers, the prompt in its parts in order, and the prefix audit.
// Built off-DOM; a part's text is only put in the page when the part is opened (prompts can be huge).
import { h, secs } from "./dom.js";
import { fmt, fresh, verdict, verdictBadge } from "./inspector_session.js";

const FOLD = 4000; // a longer text shows this much until "show all"
const CONTEXT = 300; // characters shown before the diverging one
const SPAN = 3000; // characters marked after it (the rest is counted)

const KIND_LABEL = {
  system_static: "system (static)",
  system_deployment: "system (deployment)",
  tool: "tool",
  message: "message",
  status: "status",
};
const SECTION = {
  system_static: "System prompt",
  system_deployment: "System prompt",
  tool: "Tools",
  message: "Trajectory",
  status: "Trailing status (never cached)",
};

/** A Python code-point index as a JS string index (they differ only past characters outside the BMP). */
export function jsIndex(text, cp) {
  if (!/[\uD800-\uDFFF]/.test(text)) return Math.min(cp, text.length);
  let i = 0;
  for (let n = 0; n < cp && i < text.length; n++) i += text.codePointAt(i) > 0xffff ? 2 : 1;
  return i;
}

/** `text` around the code point `at`: some context before it, then <mark> from it on (capped, the rest counted). */
export function markedFrom(text, at) {
  const i = jsIndex(text, at);
  const start = Math.max(0, i - CONTEXT);
  const end = Math.min(text.length, i + SPAN);
  const pre = h("pre.insp-text.insp-marked");
  if (start > 0) pre.append(h("span.muted", `… ${fmt(start)} chars before …\n`));
  pre.append(text.slice(start, i));
  if (i < text.length) pre.append(h("mark", text.slice(i, end)));
  else pre.append(h("span.muted", "⟨ends here⟩"));
  if (end < text.length) pre.append(h("span.muted", `\n… ${fmt(text.length - end)} more chars`));
  return pre;
}

function folded(text) {
  const pre = h("pre.insp-text");
  if (!text) {
    pre.append(h("span.muted", "(empty)"));
    return pre;
  }
  if (text.length <= FOLD) {
    pre.textContent = text;
    return pre;
  }
  pre.textContent = text.slice(0, FOLD);
  const more = h("button.insp-more", { type: "button" }, `show all ${fmt(text.length)} chars`);
  more.addEventListener("click", () => {
    pre.textContent = text;
    more.remove();
  });
  return h("div", pre, more);
}

/** A closed <details> whose body is built when it is first opened. */
function lazy(title, build) {
  const d = h("details.insp-lazy", h("summary", title));
  d.addEventListener("toggle", () => {
    if (d.open && d.childElementCount === 1) d.append(build());
  });
  return d;
}

/** Which part the divergence names: the `item`-th system, tool or message part. */
export function divergingPart(parts, divergence) {
  if (!divergence) return -1;
  const kinds = { system: ["system_static", "system_deployment"], tool: ["tool"], message: ["message"] }[
    divergence.part
  ] || [];
  let seen = 0;
  for (let i = 0; i < parts.length; i++) {
    if (!kinds.includes(parts[i].part)) continue;
    if (seen === divergence.item) return i;
    seen++;
  }
  return -1;
}

function reasonLine(record, divergence) {
  const reason = divergence?.reason ?? record.deliberate;
  if (reason) return h("p.insp-reason.warn", h("strong", "changed on purpose: "), reason);
  return h("p.insp-reason.error", h("strong", "prefix broken"),
    record.diverged_at ? ` at ${record.diverged_at} (an accidental change: the cache is lost from here)` : "");
}

/** The previous request's version of the item beside this one, both marked from the diverging byte. */
function comparison(record, divergence) {
  const side = (title, text) => h("div.insp-side",
    h("div.muted.insp-label", title),
    text ? markedFrom(text, divergence.byte) : h("pre.insp-text", h("span.muted", "(not there: the item is new)")),
  );
  return h("div.insp-divergence",
    reasonLine(record, divergence),
    h("p.muted", `first difference at byte ${fmt(divergence.byte)} of `
      + (divergence.part === "system" ? "the system prompt" : `${divergence.part}s[${divergence.item}]`)),
    h("div.insp-compare",
      side("previous request", divergence.previous || ""),
      side("this request", divergence.current || ""),
    ),
  );
}

function origin(part) {
  const o = part.origin;
  if (!o) return null;
  if (o.kind === "user" && !o.source) return null;
  return h("span.insp-origin.muted", `${o.kind}${o.source ? ": " + o.source : ""}`);
}

function partLabel(part) {
  if (part.part === "tool") return `tool ${part.name || ""}`;
  if (part.part !== "message") return KIND_LABEL[part.part] || part.part;
  if (part.role === "tool") return `tool result${part.name ? " · " + part.name : ""}`;
  return part.role || "message";
}

function partSummary(part, i, added) {
  const label = partLabel(part);
  const text = part.text || "";
  const snippet = text.length > 140 ? text.slice(0, 140).replace(/\s+/g, " ") + "…" : text.replace(/\s+/g, " ");
  return h("summary",
    h("span.insp-pno.muted", String(i)),
    h(`span.insp-kind.k-${part.part}${part.role ? ".r-" + part.role : ""}`, label),
    part.seq !== null && part.seq !== undefined ? h("span.muted.insp-seq", `#${part.seq}`) : null,
    origin(part),
    added ? h("span.badge.insp-added", { title: `added by the plugin ${added.plugin} at ${added.at}` },
      `${added.plugin} @ ${added.at}`) : null,
    h("span.insp-snippet.muted", snippet),
    part.tokens !== null && part.tokens !== undefined ? h("span.insp-tok.muted", `${fmt(part.tokens)} tok`) : null,
  );
}

const opener = new WeakMap(); // a part's <details> → open it with its body built

/** One collapsible part; its body is built the first time it is opened. */
function partView(part, i, { added, diverging, record, divergence }) {
  const d = h(`details.insp-part.k-${part.part}`, { dataset: { part: i, kind: part.part } },
    partSummary(part, i, added));
  if (diverging) {
    d.classList.add("insp-diverging");
    d.dataset.diverging = "1";
  }
  const build = () => {
    if (d.dataset.built) return;
    d.dataset.built = "1";
    if (diverging && divergence) {
      d.append(comparison(record, divergence));
      if (part.text !== divergence.current) d.append(lazy("the part, readable", () => folded(part.text)));
    } else {
      d.append(folded(part.text || ""));
    }
  };
  d.addEventListener("toggle", () => d.open && build());
  opener.set(d, () => {
    build();
    d.open = true;
  });
  return d;
}

/** A bar of the prompt by parts (width: tokens where the parts carry them, else characters), the cached share below. */
function promptMap(parts, record, details) {
  const byTokens = parts.some((p) => p.tokens);
  const size = (p) => (byTokens ? p.tokens || 0 : (p.text || "").length);
  const unit = byTokens ? "tokens" : "chars";
  if (!parts.reduce((a, p) => a + size(p), 0)) return null;
  const bar = h("div.insp-map-bar");
  parts.forEach((p, i) => {
    if (!size(p) || !details[i]) return;
    const seg = h(`span.insp-seg.k-${p.part}`, { title: `${i}: ${partLabel(p)} · ${fmt(size(p))} ${unit}` });
    seg.style.flexGrow = String(size(p));
    seg.addEventListener("click", () => {
      opener.get(details[i])();
      details[i].scrollIntoView({ block: "start" });
    });
    bar.append(seg);
  });
  const share = record.prompt_tokens ? Math.min(1, (record.cached_prompt_tokens || 0) / record.prompt_tokens) : 0;
  const cached = h("div.insp-map-cached");
  cached.style.width = `${(share * 100).toFixed(1)}%`;
  return h("div.insp-map",
    h("div.muted.insp-label", `the prompt by parts (width: ${unit}; click one to open it), and below it the share of `
      + `prompt tokens read from the cache: ${Math.round(share * 100)}%`),
    bar, h("div.insp-map-cache", cached));
}

function numbers(r) {
  const item = (k, v, cls = "") => h(`div.insp-num${cls}`, h("dt", k), h("dd", v));
  return h("dl.insp-numbers",
    item("prompt", fmt(r.prompt_tokens)),
    item("cached", fmt(r.cached_prompt_tokens)),
    item("new", fmt(fresh(r))),
    item("completion", fmt(r.completion_tokens)),
    item("TTFT", secs(r.ttft_s)),
    item("total", secs(r.total_s)),
    item("tool choice", r.tool_choice ?? "–"),
    item("prefix", verdictBadge(r, { long: true })),
  );
}

/**
 * The request view's content for `data` = {request, parts, divergence, added} (its previous / next links, hidden,
 * are `.insp-step.prev` / `.next` for the caller to point).
 * Returns {node, reveal}: reveal() (after the node is in the page) opens and scrolls to the diverging part.
 */
export function requestView(data) {
  const r = data.request;
  const parts = data.parts || [];
  const addedBy = new Map();
  for (const a of data.added || []) for (const i of a.parts || []) addedBy.set(i, a);
  const at = divergingPart(parts, data.divergence);
  const v = verdict(r);

  const list = document.createDocumentFragment();
  const details = [];
  let section = null;
  parts.forEach((p, i) => {
    if (p.part === "cache_boundary") {
      details.push(null);
      list.append(h("div.insp-boundary", { role: "separator", title: p.text || "" },
        h("span", "cache boundary"), p.text ? h("span.muted", ` ${p.text.slice(0, 120)}`) : null));
      return;
    }
    if (SECTION[p.part] !== section) {
      section = SECTION[p.part];
      list.append(h("h4.insp-section", section));
    }
    const d = partView(p, i, { added: addedBy.get(i), diverging: i === at, record: r, divergence: data.divergence });
    details.push(d);
    list.append(d);
  });

  const head = h("div.row.insp-req-head",
    h("h2", `Request #${r.index}`),
    verdictBadge(r, { long: true }),
    h("span.grow"),
    h("a.insp-step.prev", { hidden: true }, "← previous"),
    h("a.insp-step.next", { hidden: true }, "next →"),
  );
  const audit = h(`section.card.insp-audit.v-${v.key}`, h("h3", "Prefix audit"));
  if (v.key === "first" || v.key === "ok") {
    audit.append(h("p", v.key === "ok" ? h("span.ok", "prefix ok: ") : null, v.detail));
  } else {
    audit.append(reasonLine(r, data.divergence));
    if (at >= 0) {
      audit.append(h("button.insp-goto", { type: "button", on: { click: () => reveal("start") } },
        `show the changed part: ${partLabel(parts[at])} (part ${at})`));
    } else if (!data.divergence) {
      audit.append(h("p.muted", "The server kept no text of the previous request for this item."));
    }
  }
  if (at >= 0) opener.get(details[at])(); // opened off-DOM: one layout when the view goes in
  const node = h("div.insp-request", { dataset: { index: r.index } },
    head, numbers(r), audit, promptMap(parts, r, details),
    h("section.insp-parts", { "aria-label": "the prompt in its parts" }, list),
  );
  function reveal(block = "start") {
    if (at < 0) return;
    opener.get(details[at])();
    details[at].scrollIntoView({ block });
    details[at].querySelector("summary").focus({ preventScroll: true });
  }
  return { node, reveal };
}
