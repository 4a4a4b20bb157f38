// Knowledge: search the knowledge base as the agent's kb_search does (with each retriever's rank, so the
// user sees why a passage came first) and list its documents with their ingest state. The search lives in
// the address (#/knowledge/QUERY/MODE/K) so a reload or a shared link shows the same passages.
import { api } from "./api.js";
import { clear, h } from "./dom.js";
import { badge, dateTime, empty, failure, header, loading, notEnabled, plural, ready } from "./panels.js";

const MODES = { hybrid: "hybrid (words + meaning)", bm25: "BM25 (words)", dense: "dense (meaning)" };
const PAGE = 50;
const COLUMNS = ["Title", "Source", "Kind", "Version", "Chunks", "Added"];

export function mount(main, args) {
  const ctl = new AbortController();
  const signal = ctl.signal;
  const [q0 = "", mode0 = "hybrid", k0 = "5"] = args;

  const q = h("input#kb-q.grow", {
    type: "search", required: true, maxlength: "2000", placeholder: "What are you looking for?",
    "aria-label": "Search the knowledge base",
  });
  q.value = q0;
  const mode = h("select#kb-mode", Object.entries(MODES).map(([v, label]) => h("option", { value: v }, label)));
  mode.value = MODES[mode0] ? mode0 : "hybrid";
  mode.addEventListener("change", () => { if (q.value.trim()) search(); });  // compare retrievers at once
  const k = h("input#kb-k", { type: "number", min: "1", max: "50", value: String(Number(k0) || 5) });
  const form = h("form.kb-search", { role: "search", on: { submit: (ev) => { ev.preventDefault(); search(); } } },
    h("div.row", q, h("button.primary", { type: "submit" }, "Search")),
    h("div.row.kb-options",
      h("label.row", { for: "kb-mode" }, "Retriever"), mode,
      h("label.row", { for: "kb-k" }, "Passages"), k,
    ),
  );
  const results = h("section.kb-results", { "aria-live": "polite", "aria-label": "Search results" });
  const docs = h("section.kb-docs", { "aria-labelledby": "kb-docs-title" });
  const body = h("div.kb-body", form, results, docs);
  const page = h("div.kb-page");
  main.append(
    header("Knowledge", "Search your documents the way the agent's kb_search does, and see what the knowledge "
      + "base holds. Conversations and memories are private and are not listed here."),
    page,
  );

  let searching = 0;
  async function search() {
    const text = q.value.trim();
    if (!text) {
      q.focus();
      return;
    }
    const n = Math.min(50, Math.max(1, Math.round(Number(k.value) || 5)));
    k.value = String(n);
    const mine = ++searching;
    history.replaceState(null, "", "#/knowledge/" + [text, mode.value, n].map(encodeURIComponent).join("/"));
    clear(results).append(loading("passages"));
    try {
      const params = new URLSearchParams({ q: text, k: String(n), mode: mode.value });
      const found = await api(`/v1/knowledge/search?${params}`, { signal });
      if (mine === searching) showHits(text, found);
    } catch (e) {
      if (signal.aborted || mine !== searching) return;
      clear(results).append(failure(e, "The search"));
    }
  }

  function showHits(text, found) {
    clear(results).append(h("h2", `Passages for “${text}”`));
    if (found.warning) results.append(h("p.warn.card", found.warning));
    for (const c of found.conflicts || []) {
      results.append(h("p.warn.card", `${c.source}: versions ${c.versions.join(", ")} both match — ${c.note}.`));
    }
    if (!found.hits.length) {
      results.append(empty(`No passage matches “${text}”.`, mode.value === "dense"
        ? "Dense search only finds chunks that have their vector; try hybrid or BM25."
        : "Try other words, or the dense retriever for the meaning rather than the words."));
      return;
    }
    results.append(h("ol.kb-hits", found.hits.map((hit, i) => h("li.card.hit",
      h("div.row.hit-head",
        h("strong.hit-rank", `${i + 1}.`),
        h("code.hit-source", hit.source),
        badge(`position ${hit.position}`),
        hit.version > 1 ? badge(`version ${hit.version}`) : null,
        h("span.grow"),
        badge(`score ${formatScore(hit.score)}`, "ok"),
        badge(hit.bm25_rank ? `BM25 rank ${hit.bm25_rank}` : "BM25 –"),
        badge(hit.dense_rank ? `dense rank ${hit.dense_rank}` : "dense –"),
        hit.context_rank ? badge(`context rank ${hit.context_rank}`) : null,
      ),
      hit.context ? h("p.muted.small.hit-context", `Context: ${hit.context}`) : null,
      h("pre.hit-text", hit.text),
    ))));
  }

  async function listDocuments(offset, focus = false) {
    clear(docs).append(loading("documents"));
    let data;
    try {
      data = await api(`/v1/knowledge/documents?offset=${offset}&limit=${PAGE}`, { signal });
    } catch (e) {
      if (signal.aborted) return;
      if (notEnabled(e)) {
        clear(page).append(failure(e, "The knowledge base"));
        return;
      }
      clear(docs).append(failure(e, "The documents", () => listDocuments(offset)));
      return;
    }
    if (!body.isConnected) page.append(body);
    const title = h("h2#kb-docs-title", { tabindex: "-1" }, "Documents");
    clear(docs).append(title, vectorState(data));
    if (!data.documents.length) {
      docs.append(offset
        ? empty("No more documents.")
        : empty("No documents yet.", "`kairos kb add PATH` adds files and folders; the agent then finds them "
          + "with kb_search."));
    } else {
      docs.append(h("div.table-wrap", h("table.kb-table.stack",
        h("thead", h("tr", COLUMNS.map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", data.documents.map((d) => h("tr",
          [d.title || "–", h("code", d.source), d.kind, String(d.version), String(d.chunks), dateTime(d.added_at)]
            .map((v, i) => h(i === 3 || i === 4 ? "td.num" : "td", { "data-label": COLUMNS[i] }, v)),
        ))),
      )));
    }
    if (offset || data.next_offset !== null) {
      const first = offset + 1;
      const last = offset + data.documents.length;
      docs.append(h("nav.row.pager", { "aria-label": "Documents pages" },
        h("button", {
          type: "button", disabled: offset === 0, on: { click: () => listDocuments(Math.max(0, offset - PAGE), true) },
        }, "Previous"),
        h("span.muted", data.documents.length ? `${first}–${last}` : ""),
        h("button", {
          type: "button", disabled: data.next_offset === null, on: { click: () => listDocuments(data.next_offset, true) },
        }, "Next"),
      ));
    }
    if (focus) title.focus();  // a new page: the reader starts again at its top
  }

  delete main.dataset.ready;
  listDocuments(0).then(async () => {
    if (q0 && body.isConnected) await search();
    else if (body.isConnected) q.focus();
    ready(main, "knowledge", signal);
  });
  return () => ctl.abort();
}

/** Whether every chunk has its vector: those without one are found by BM25, not by dense search. */
function vectorState(data) {
  const n = data.chunks_without_vectors;
  const by = data.embedder ? ` (embedder ${data.embedder})` : "";
  if (!n) return h("p.ok.kb-vectors", `Every chunk has its vector${by}: all three retrievers see everything.`);
  return h("p.warn.card.kb-vectors", { role: "status" },
    `${plural(n, "chunk")} still ${n === 1 ? "waits" : "wait"} for a vector${by}: BM25 finds `
    + `${n === 1 ? "it" : "them"}, dense search does not until the next \`kairos kb add\` embeds `
    + `${n === 1 ? "it" : "them"}.`);
}

function formatScore(s) {
  if (typeof s !== "number") return "–";
  return Math.abs(s) >= 1 ? s.toFixed(2) : s.toPrecision(3);
}
