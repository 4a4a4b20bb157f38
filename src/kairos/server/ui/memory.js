// Memory: what the agent remembers about the user, each memory with its versions and where each came from.
// The user filters them, corrects one (a new version "edited by the user", the old one kept in its history)
// or forgets one (every version erased, after a confirm step).
import { api } from "./api.js";
import { append, clear, h, toast } from "./dom.js";
import { badge, dateTime, empty, failure, header, loading, plural, ready } from "./panels.js";

const SOURCES = {
  user: ["said by the user", "ok"],
  confirmed: ["confirmed by the user", "ok"],
  external: ["from external content", "warn"],
  harness: ["written by kairos", ""],
};

export function mount(main) {
  const ctl = new AbortController();
  const signal = ctl.signal;
  const state = {
    current: [], byKey: new Map(), query: "", showPast: false,
    editing: null, draft: null, confirming: null, open: new Set(),
  };

  const filter = h("input.grow", {
    type: "search", placeholder: "Filter by text, category, session…", "aria-label": "Filter memories",
    on: { input: () => { state.query = filter.value.trim().toLowerCase(); render(); } },
  });
  const past = h("input", { type: "checkbox", on: { change: () => { state.showPast = past.checked; render(); } } });
  const count = h("span.muted", { role: "status", "aria-live": "polite" });
  const toolbar = h("div.row.toolbar", filter, h("label.check", past, "Show past memories"), count);
  const list = h("div.mem-list");
  main.append(
    header("Memory", "What the agent remembers about you from earlier sessions, and where each memory came "
      + "from. Correct a memory by editing it (the old text stays in its history), or forget it for good."),
    toolbar, list,
  );

  async function load(focusKey) {
    clear(list).append(loading("memories"));
    try {
      const [now, all] = await Promise.all([
        api("/v1/memory", { signal }),
        api("/v1/memory?history=1", { signal }),
      ]);
      state.current = now.memories;
      state.byKey = new Map();
      for (const m of all.memories) {
        if (!state.byKey.has(m.key)) state.byKey.set(m.key, []);
        state.byKey.get(m.key).push(m);
      }
      for (const versions of state.byKey.values()) versions.sort((a, b) => a.version - b.version);
      toolbar.hidden = false;
      render();
      if (focusKey) list.querySelector(`article[data-key="${CSS.escape(focusKey)}"] h2`)?.focus();
    } catch (e) {
      if (signal.aborted) return;
      toolbar.hidden = true;
      clear(list).append(failure(e, "User memory", () => load()));
    }
  }

  function versionsOf(m) {
    return state.byKey.get(m.key) || [m];
  }

  function matches(m) {
    if (!state.query) return true;
    const text = versionsOf(m).map((v) => [
      v.content, v.category, v.kind, v.format, v.status, JSON.stringify(v.data),
      v.provenance.session_id, v.provenance.note, (SOURCES[v.provenance.source] || [v.provenance.source])[0],
    ].join(" ")).join(" ");
    return text.toLowerCase().includes(state.query);
  }

  /** Memories with no live version: deleted, merged into a summary, or expired (their last version). */
  function pastMemories() {
    const live = new Set(state.current.map((m) => m.key));
    return [...state.byKey.entries()].filter(([key]) => !live.has(key)).map(([, vs]) => vs[vs.length - 1]);
  }

  function render() {
    clear(list);
    const gone = pastMemories();
    if (!state.current.length && !gone.length) {
      list.append(empty("No memories yet.",
        "The agent writes them after a session when [memory] is enabled: what you tell it about yourself, "
        + "your preferences and plans."));
      count.textContent = "";
      return;
    }
    const shown = state.current.filter(matches);
    const shownPast = state.showPast ? gone.filter(matches) : [];
    count.textContent = state.query
      ? `${shown.length} of ${plural(state.current.length, "memory", "memories")}`
      : plural(state.current.length, "memory", "memories");
    if (!state.current.length && !state.showPast) {
      list.append(empty("No current memories.", `${plural(gone.length, "past memory", "past memories")} `
        + "(deleted, merged or expired) are kept in history: tick “Show past memories” to see them."));
    } else if (!shown.length && !shownPast.length) {
      list.append(empty(state.query ? `No memory matches “${filter.value.trim()}”.` : "No current memories."));
    }
    append(list, shown.map((m) => card(m, false)));
    if (shownPast.length) {
      append(list, [h("h2.mem-past-title", "Past memories"), shownPast.map((m) => card(m, true))]);
    }
  }

  function card(m, isPast) {
    const versions = versionsOf(m);
    const art = h(`article.card.memory${isPast ? ".past" : ""}`, { dataset: { id: String(m.id), key: m.key } },
      h("h2.mem-title.row", { tabindex: "-1" }, h("span.mem-id", `Memory ${m.id}`),
        h("span.row.mem-badges",
          badge(m.category), badge(m.kind),
          m.format !== "note" ? badge(m.format.replaceAll("_", " ")) : null,
          badge(`importance ${Number(m.importance).toFixed(2)}`),
          badge(`version ${m.version}`),
          isPast ? badge(pastStatus(m), "warn") : null,
        ),
      ),
      state.editing === m.id ? editor(m) : h("p.mem-content", m.content),
      dataLine(m),
      provenance(m),
    );
    if (state.confirming === m.id) art.append(confirmForget(m, versions.length));
    else art.append(actions(m, isPast));
    art.append(historyOf(m, versions));
    return art;
  }

  function actions(m, isPast) {
    return h("div.row.mem-actions",
      isPast || state.editing === m.id ? null : h("button.edit", {
        type: "button", "aria-label": `Edit memory ${m.id}`,
        on: { click: () => { edit(m); } },
      }, "Edit"),
      h("button.danger.forget", {
        type: "button", "aria-label": `Forget memory ${m.id}`,
        on: {
          click: () => {
            Object.assign(state, { confirming: m.id, editing: null, draft: null });
            render();
            focusIn(m, ".cancel");
          },
        },
      }, "Forget…"),
    );
  }

  function edit(m) {
    Object.assign(state, { editing: m.id, draft: null, confirming: null });
    render();
    focusIn(m, "textarea");
  }

  function focusIn(m, selector) {
    list.querySelector(`article[data-id="${m.id}"] ${selector}`)?.focus();
  }

  function editor(m) {
    const area = h("textarea.mem-edit", {
      rows: 3, maxlength: "4000", "aria-label": `New text of memory ${m.id}`,
      on: { input: () => { state.draft = area.value; } },
    });
    area.value = state.draft ?? m.content;  // a draft survives the list being drawn again (the filter)
    const problem = h("p.error", { role: "alert" });
    const save = h("button.primary.save", { type: "button", on: { click: () => submit() } }, "Save as a new version");
    const cancel = h("button.cancel", { type: "button", on: { click: () => stop() } }, "Cancel");
    const stop = () => { state.editing = state.draft = null; render(); focusIn(m, "button.edit"); };
    async function submit() {
      const text = area.value.trim();
      if (!text) {
        problem.textContent = "A memory needs some text; to remove it, use Forget.";
        area.focus();
        return;
      }
      save.disabled = cancel.disabled = true;
      try {
        const { memory } = await api(`/v1/memory/${m.id}`, { method: "PUT", body: { content: text }, signal });
        state.editing = state.draft = null;
        toast(memory.id === m.id ? "Nothing changed." : `Saved as version ${memory.version}.`, "info");
        await load(m.key);
      } catch (e) {
        if (signal.aborted) return;
        save.disabled = cancel.disabled = false;
        problem.textContent = `Not saved: ${e.message}`;
      }
    }
    area.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") stop();
      else if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) submit();
    });
    return h("div.mem-editor",
      area,
      h("p.muted.small", "The old text stays in this memory's history; the new version is marked “edited by "
        + "the user”. Ctrl+Enter saves, Escape cancels."),
      problem,
      h("div.row", save, cancel),
    );
  }

  function confirmForget(m, n) {
    const cancel = h("button.cancel", {
      type: "button", on: { click: () => { state.confirming = null; render(); focusIn(m, "button.forget"); } },
    }, "Cancel");
    const yes = h("button.danger.confirm-forget", { type: "button", on: { click: () => forget() } }, "Forget for good");
    async function forget() {
      yes.disabled = cancel.disabled = true;
      try {
        const { forgotten } = await api(`/v1/memory/${m.id}`, { method: "DELETE", signal });
        toast(`Forgotten: ${plural(forgotten, "version")} erased.`, "info");
      } catch (e) {
        if (signal.aborted) return;
        toast(e.status === 404 ? "That memory was already gone." : `Not forgotten: ${e.message}`);
      }
      state.confirming = null;
      await load();
      filter.focus();
    }
    const box = h("div.confirm", { role: "group", "aria-label": `Forget memory ${m.id}` },
      h("p", `Forget this memory? ${n === 1 ? "It is" : `All ${n} versions are`} erased from this computer; `
        + "this cannot be undone."),
      h("div.row", yes, cancel),
    );
    box.addEventListener("keydown", (ev) => { if (ev.key === "Escape") cancel.click(); });
    return box;
  }

  function historyOf(m, versions) {
    const details = h("details.mem-history", {
      open: state.open.has(m.key),
      on: { toggle: () => (details.open ? state.open.add(m.key) : state.open.delete(m.key)) },
    },
      h("summary", `Version history (${versions.length})`),
      h("ol.mem-versions", versions.map((v) => h("li",
        h("div.row", badge(`version ${v.version}`), badge(v.status, v.status === "current" ? "ok" : ""),
          h("span.muted", `${v.op} · ${dateTime(v.created_at)}`)),
        h("p.mem-content", v.content),
        provenance(v),
      ))),
    );
    return details;
  }

  delete main.dataset.ready;
  load().then(() => ready(main, "memory", signal));
  return () => ctl.abort();
}

function pastStatus(m) {
  if (m.status === "archived") return "merged";
  if (m.status === "current") return "expired";
  return m.status;
}

/** A card format's structure: a JSON card's path and value, a person's relationship and backstory, merges. */
function dataLine(m) {
  const d = m.data || {};
  const parts = [];
  if (d.path) parts.push(d.value !== undefined ? `${d.path} = ${d.value}` : d.path);
  if (d.person) parts.push(d.relationship ? `${d.person} (${d.relationship})` : d.person);
  if (d.backstory) parts.push(`backstory: ${d.backstory}`);
  if (Array.isArray(d.merged)) parts.push(`summarises memories ${d.merged.join(", ")}`);
  if (d.merged_into) parts.push(`merged into memory ${d.merged_into}`);
  return parts.length ? h("p.mem-data", parts.join(" · ")) : null;
}

/** Where a version came from: whose words, which session and messages, when. */
function provenance(m) {
  const p = m.provenance || {};
  const [label, kind] = SOURCES[p.source] || [p.source || "unknown origin", ""];
  const parts = [];
  if (p.note) parts.push(p.source === "confirmed" ? `stated by the ${p.note}` : p.note);
  if (p.session_id) {
    parts.push(h("span", "session ",
      h("a", { href: `#/inspector/${encodeURIComponent(p.session_id)}` }, p.session_id)));
  }
  if (p.messages && p.messages.length) {
    parts.push(`${p.messages.length === 1 ? "message" : "messages"} ${p.messages.join(", ")}`);
  }
  parts.push(`written ${dateTime(m.created_at)}`);
  if (m.valid_from && Math.abs(m.valid_from - m.created_at) > 60) parts.push(`holds from ${dateTime(m.valid_from)}`);
  if (m.valid_to) parts.push(`until ${dateTime(m.valid_to)}`);
  if (m.expires_at) parts.push(`expires ${dateTime(m.expires_at)}`);
  const line = h("p.mem-prov.muted", badge(label, kind));
  for (const part of parts) line.append(" · ", part);
  return line;
}
