// Settings: the server's effective configuration, read-only, one section per table of the config file, with
// where the values came from and, first and highlighted, the settings that were ignored and why (a
// workspace may not widen what the agent may do on its own).
import { api } from "./api.js";
import { append, clear, h } from "./dom.js";
import { badge, empty, failure, header, loading, plural, ready } from "./panels.js";

export function mount(main) {
  const ctl = new AbortController();
  const signal = ctl.signal;
  const body = h("div.settings-body");
  main.append(
    header("Settings", "The configuration this server runs with, read-only: change it in the config files "
      + "(or with `kairos config`) and restart `kairos serve`."),
    body,
  );

  async function load() {
    clear(body).append(loading("settings"));
    try {
      show(await api("/v1/settings", { signal }));
    } catch (e) {
      if (signal.aborted) return;
      clear(body).append(failure(e, "Settings", () => load()));
    }
  }

  function show(data) {
    clear(body);
    const values = data.settings && typeof data.settings === "object" ? data.settings : {};
    const notices = data.notices || [];
    const sources = data.sources || [];
    if (notices.length) {
      body.append(h("section.card.notices", { role: "note", "aria-labelledby": "settings-notices" },
        h("h2#settings-notices", `${plural(notices.length, "setting")} ignored`),
        h("ul", notices.map((n) => h("li", n))),
      ));
    }
    if (!Object.keys(values).length) {
      body.append(empty("This server was started without its settings.",
        "`kairos serve` shows the effective configuration here."));
      return;
    }
    if (sources.length) {
      body.append(h("section.settings-sources", h("h2", "Where they come from"),
        h("p.muted", "Later sources override earlier ones."),
        h("ol", sources.map((s) => h("li", h("code", s))))));
    }
    const filter = h("input.grow", {
      type: "search", placeholder: "Filter by name or value", "aria-label": "Filter settings",
      on: { input: () => narrow(filter.value.trim().toLowerCase()) },
    });
    const count = h("span.muted", { role: "status", "aria-live": "polite" });
    const none = h("p.muted", { hidden: true }, "No setting matches.");
    body.append(h("div.row.toolbar", filter, count), none);

    const general = Object.entries(values).filter(([, v]) => !isTable(v));
    const tables = Object.entries(values).filter(([, v]) => isTable(v));
    const sections = [];
    if (general.length) sections.push(section("general", "General", general));
    for (const [name, v] of tables) sections.push(section(name, `[${name}]`, flatten(v)));
    append(body, sections);

    function narrow(query) {
      let shown = 0;
      for (const s of sections) {
        let any = false;
        for (const row of s.querySelectorAll("tbody tr")) {
          const hit = !query || row.dataset.text.includes(query) || s.dataset.name.includes(query);
          row.hidden = !hit;
          any ||= hit;
          shown += hit ? 1 : 0;
        }
        s.hidden = !any;
        if (query && any) s.open = true;
      }
      none.hidden = shown > 0;
      count.textContent = query ? plural(shown, "setting") : "";
    }
  }

  delete main.dataset.ready;
  load().then(() => ready(main, "settings", signal));
  return () => ctl.abort();
}

function isTable(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** A table's values as dotted names (`spill.max_chars`), nested tables inline; lists stay whole. */
function flatten(obj, prefix = "") {
  const out = [];
  for (const [k, v] of Object.entries(obj)) {
    const name = prefix ? `${prefix}.${k}` : k;
    if (isTable(v) && Object.keys(v).length) out.push(...flatten(v, name));
    else out.push([name, v]);
  }
  return out;
}

function section(name, title, rows) {
  return h("details.card.settings-section", { open: true, dataset: { name: name.toLowerCase() } },
    h("summary", h("h2", title), h("span.muted", ` ${plural(rows.length, "setting")}`)),
    h("div.table-wrap", h("table.settings-table",
      h("thead", h("tr", h("th", { scope: "col" }, "Setting"), h("th", { scope: "col" }, "Value"))),
      h("tbody", rows.map(([k, v]) => h("tr", { dataset: { text: `${k} ${text(v)}`.toLowerCase() } },
        h("th", { scope: "row" }, h("code", k)),
        h("td", value(v)),
      ))),
    )),
  );
}

function text(v) {
  if (v === null || v === undefined) return "none";
  return typeof v === "string" ? v : JSON.stringify(v);
}

function value(v) {
  if (v === null || v === undefined) return h("span.muted", "not set");
  if (typeof v === "boolean") return badge(v ? "on" : "off", v ? "ok" : "");
  if (Array.isArray(v) && !v.length) return h("span.muted", "none");
  if (Array.isArray(v) && v.every((x) => x === null || typeof x !== "object")) {
    return h("span.settings-list", v.map((x) => h("code", String(x))));
  }
  if (isTable(v)) return h("span.muted", "none");  // an empty table
  if (typeof v === "string") return v ? h("code", v) : h("span.muted", "empty");
  if (typeof v === "number") return h("code", String(v));
  return h("pre.settings-json", JSON.stringify(v, null, 2));
}
