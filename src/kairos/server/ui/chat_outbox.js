// Questions (tool-call approvals, ask_user) answered inline, and the outbox: messages for the user, read or not.
import { api } from "./api.js";
import { clear, h, toast } from "./dom.js";

const CLOSED = { answered: "Answered", expired: "No answer in time; the default was used", cancelled: "Cancelled" };

/** Whether a question is a tool call's approval (the outbox approver asks approve or deny). */
export function isApproval(q) {
  const opts = q.options || [];
  return opts.length === 2 && opts[0] === "approve" && opts[1] === "deny";
}

/** A question card with a button per option, or a free-text answer when it has none. */
export function questionCard(q) {
  const approval = isApproval(q);
  const problem = h("p.error", { role: "alert", hidden: true });
  const controls = [];
  let area;

  async function answer(text) {
    if (!text.trim()) return;
    for (const c of controls) c.disabled = true;
    problem.hidden = true;
    try {
      await api(`/v1/questions/${encodeURIComponent(q.id)}/answer`, { method: "POST", body: { text } });
      close({ status: "answered", answer: text });
    } catch (e) {
      problem.textContent = `The answer was not taken: ${e.message}`;
      problem.hidden = false;
      toast(`The answer was not taken: ${e.message}`);
      for (const c of controls) c.disabled = false;
    }
  }

  if (q.options && q.options.length) {
    area = h("div.options", q.options.map((opt) => {
      const cls = opt === "approve" ? "button.primary" : opt === "deny" ? "button.danger" : "button";
      const b = h(cls, { type: "button", on: { click: () => answer(opt) } }, opt);
      controls.push(b);
      return b;
    }));
  } else {
    const input = h("input", { type: "text", "aria-label": "Your answer", autocomplete: "off" });
    const send = h("button.primary", { type: "submit" }, "Answer");
    controls.push(input, send);
    area = h("form.options", { on: { submit: (ev) => { ev.preventDefault(); answer(input.value); } } }, input, send);
  }
  const status = h("p.q-status", { hidden: true });
  const el = h("div.question.card", {
    dataset: { question: q.id },
    role: "group",
    "aria-label": approval ? "Approval needed" : "Question from the agent",
  },
    h("div.q-head", h("span.badge.warn", approval ? "approval needed" : "question")),
    h("p.q-text", q.text),
    area, problem, status,
  );

  function close(rec) {
    if (el.classList.contains("closed")) return;
    el.classList.add("closed");
    area.remove();
    problem.hidden = true;
    const what = CLOSED[rec.status] || rec.status || "Closed";
    status.textContent = rec.answer ? `${what}: ${rec.answer}` : what;
    status.hidden = false;
  }
  if (q.status && q.status !== "pending") close(q);
  return { el, close };
}

function clock(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

/** The outbox panel: newest first, unread marked, "Mark read" per message and for all. */
export class Inbox {
  constructor(sessionId) {
    this.session = sessionId;
    this.messages = new Map();
    this.count = h("span.badge", "0 unread");
    this.list = h("ul.outbox-list");
    this.note = h("p.muted.small", "Loading…");
    this.all = h("button.small", { type: "button", on: { click: () => this.markRead(this.unread()) } },
      "Mark all read");
    this.controls = h("span.row", this.count, this.all,
      h("button.small", { type: "button", "aria-label": "Refresh the outbox", on: { click: () => this.load() } },
        "Refresh"));
    this.el = h("section.outbox", { "aria-label": "Outbox" },
      h("div.row", h("h2", "Outbox"), h("span.grow"), this.controls), this.note, this.list);
  }

  async load() {
    try {
      const data = await api("/v1/outbox?limit=100");
      const same = JSON.stringify(data.messages) === JSON.stringify([...this.messages.values()]);
      if (same && this.note.hidden) return;
      this.messages = new Map(data.messages.map((m) => [m.id, m]));
      this.note.hidden = true;
      this.controls.hidden = false;
    } catch (e) {
      this.note.hidden = false;
      this.missing = e.status === 503;
      this.controls.hidden = this.missing;
      if (e.status === 503) {
        this.note.textContent = "No outbox runs on this server.";
        this.note.className = "muted small";
      } else {
        this.note.textContent = `The outbox did not load: ${e.message}`;
        this.note.className = "error small";
      }
    }
    this.render();
  }

  /** Reload on a timer (not where the server has no outbox: that does not change while it runs). */
  refresh() {
    if (!this.missing) this.load();
  }

  /** A message from the session's stream (outbox.message / outbox.closed). */
  add(m) {
    const old = this.messages.get(m.id);
    this.messages.set(m.id, old ? { ...old, ...m, read: old.read || m.read } : m);
    this.note.hidden = true;
    this.render();
  }

  unread() {
    return [...this.messages.values()].filter((m) => !m.read).map((m) => m.id);
  }

  async markRead(ids) {
    if (!ids.length) return;
    try {
      await api("/v1/outbox/read", { method: "POST", body: { ids } });
      for (const id of ids) {
        const m = this.messages.get(id);
        if (m) m.read = true;
      }
      this.render();
    } catch (e) {
      toast(`Could not mark read: ${e.message}`);
    }
  }

  render() {
    const all = [...this.messages.values()].reverse();
    const unread = all.filter((m) => !m.read).length;
    this.count.textContent = `${unread} unread`;
    this.count.className = unread ? "badge warn" : "badge";
    this.all.disabled = !unread;
    const frag = document.createDocumentFragment();
    for (const m of all) frag.append(this.item(m));
    clear(this.list).append(frag);
    if (!all.length && this.note.hidden) this.list.append(h("li.muted", "Nothing for you yet."));
  }

  item(m) {
    const text = m.text.length > 280
      ? h("details", h("summary", m.text.slice(0, 200) + "…"), h("div.body", m.text))
      : h("div.body", m.text);
    const where = m.session && m.session !== this.session
      ? h("a", { href: `#/chat/${encodeURIComponent(m.session)}` }, `session ${m.session}`) : null;
    const extra = m.kind === "question" && m.status ? h("span.badge", m.status) : null;
    return h(`li${m.read ? ".read" : ".unread"}`, { dataset: { message: m.id } },
      h("div.row",
        h("span.badge", m.kind), extra, m.priority && m.priority !== "normal" ? h("span.badge.warn", m.priority) : null,
        h("span.muted.small", clock(m.created)), where, h("span.grow"),
        m.read ? h("span.muted.small", "read")
          : h("button.small", { type: "button", "aria-label": "Mark read", on: { click: () => this.markRead([m.id]) } },
            "Mark read")),
      text);
  }
}
