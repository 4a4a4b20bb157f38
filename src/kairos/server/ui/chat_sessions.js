// The chat's sessions sidebar: search by title or id, a new session, inline rename, busy and active badges.
import { api } from "./api.js";
import { clear, h, toast } from "./dom.js";

export class Sessions {
  /** current: the open session's id; go: the shell's router; onRenamed(session): the open one got a title. */
  constructor(current, go, onRenamed = () => {}) {
    this.current = current;
    this.go = go;
    this.onRenamed = onRenamed;
    this.list = [];
    this.renaming = null;
    this.search = h("input#session-search", {
      type: "search",
      placeholder: "Search sessions",
      autocomplete: "off",
      on: { input: () => this.render(), keydown: (ev) => this.searchKey(ev) },
    });
    this.ul = h("ul.sessions");
    this.el = h("nav.chat-side", { "aria-label": "Sessions" },
      h("div.row", h("h2", "Sessions"), h("span.grow"),
        h("button.primary#new-session", { type: "button", on: { click: () => this.create() } }, "New session")),
      h("label.vh", { for: "session-search" }, "Search sessions by title or id"),
      this.search,
      this.ul,
    );
  }

  async load() {
    const data = await api("/v1/sessions?limit=500");
    const same = JSON.stringify(data.sessions) === JSON.stringify(this.list);
    this.list = data.sessions;
    if (!same || !this.ul.firstChild) this.render();
    return this.list;
  }

  /** Reload quietly (a timer); problems show once, not every time. */
  async refresh() {
    try {
      await this.load();
      this.failed = false;
    } catch (e) {
      if (!this.failed) toast(`The session list did not refresh: ${e.message}`);
      this.failed = true;
    }
  }

  shown() {
    const q = this.search.value.trim().toLowerCase();
    if (!q) return this.list;
    return this.list.filter((s) => (s.title || "").toLowerCase().includes(q) || s.id.toLowerCase().includes(q));
  }

  render() {
    if (this.renaming) return; // do not pull the rename field from under the user's fingers
    const shown = this.shown();
    const focused = this.ul.contains(document.activeElement) ? document.activeElement : null;
    const where = focused && [focused.closest("li")?.dataset.session, focused.matches("a") ? "a" : "button.rename"];
    const frag = document.createDocumentFragment();
    for (const s of shown) frag.append(this.item(s));
    clear(this.ul).append(frag);
    if (!shown.length) this.ul.append(h("li.muted", this.list.length ? "No session matches." : "No sessions yet."));
    if (where) this.ul.querySelector(`li[data-session="${CSS.escape(where[0] || "")}"] ${where[1]}`)?.focus();
  }

  item(s) {
    const li = h("li", { dataset: { session: s.id } });
    const badges = [];
    if (s.busy) badges.push(h("span.badge.warn", "busy"));
    else if (s.active) badges.push(h("span.badge.ok", "active"));
    li.append(
      h("a.session-link", {
        href: `#/chat/${encodeURIComponent(s.id)}`,
        "aria-current": s.id === this.current ? "page" : null,
      }, h("span.title", s.title || "Untitled"), h("span.sid", s.id)),
      h("span.badges", badges),
      h("button.rename.small", {
        type: "button",
        "aria-label": `Rename ${s.title || s.id}`,
        on: { click: () => this.startRename(li, s) },
      }, "Rename"),
    );
    return li;
  }

  searchKey(ev) {
    if (ev.key === "Enter") {
      const first = this.shown()[0];
      if (first) this.go("chat", first.id);
    } else if (ev.key === "ArrowDown") {
      ev.preventDefault();
      this.ul.querySelector("a")?.focus();
    }
  }

  startRename(li, s) {
    const input = h("input", {
      type: "text",
      value: s.title || "",
      maxlength: "500",
      "aria-label": `New title for ${s.id}`,
    });
    const done = (focus = true) => {
      this.renaming = null;
      this.render();
      if (focus) this.ul.querySelector(`li[data-session="${CSS.escape(s.id)}"] button.rename`)?.focus();
    };
    const form = h("form.rename-form", {
      on: {
        submit: async (ev) => {
          ev.preventDefault();
          if (await this.rename(s, input.value.trim())) done();
        },
        keydown: (ev) => {
          if (ev.key === "Escape") {
            ev.preventDefault();
            done();
          }
        },
      },
    },
      input,
      h("button.primary.small", { type: "submit" }, "Save"),
      h("button.small", { type: "button", on: { click: () => done() } }, "Cancel"),
    );
    this.renaming = s.id;
    clear(li).append(form);
    input.focus();
    input.select();
  }

  /** PATCH /v1/sessions/{id} {title}; true when the server took it. */
  async rename(s, title) {
    try {
      const out = await api(`/v1/sessions/${encodeURIComponent(s.id)}`, { method: "PATCH", body: { title } });
      Object.assign(s, out && typeof out.title === "string" ? out : { title });
      if (s.id === this.current) this.onRenamed(s);
      return true;
    } catch (e) {
      const missing = e.status === 404 || e.status === 405;
      toast(missing ? `This server cannot rename sessions yet (${e.message})` : `Rename failed: ${e.message}`);
      return missing; // nothing to retry: close the field
    }
  }

  async create() {
    try {
      const s = await api("/v1/sessions", { method: "POST", body: { title: "" } });
      this.go("chat", s.id);
    } catch (e) {
      toast(`No new session: ${e.message}`);
    }
  }

  /** The open session's state changed (from its stream). */
  setBusy(id, busy) {
    const s = this.list.find((x) => x.id === id);
    if (!s || (s.busy === busy && s.active)) return;
    s.busy = busy;
    s.active = true;
    this.render();
  }

  find(id) {
    return this.list.find((s) => s.id === id);
  }
}
