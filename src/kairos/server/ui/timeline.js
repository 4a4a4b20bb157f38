// The event timeline: every record that reached the session, newest at the bottom, one compact row each
// (streamed text deltas folded into one row), filterable by kind; a row opens to show the record's data.
import { clear, h, secs } from "./dom.js";

export const KINDS = [
  ["all", "All kinds"],
  ["event", "Events"],
  ["run", "Runs"],
  ["tool", "Tool calls"],
  ["request", "Requests"],
  ["text", "Text"],
  ["activity", "Activity"],
  ["outbox", "Outbox"],
  ["error", "Errors"],
  ["other", "Other"],
];
const WINDOW = 300;
/** Rows rendered at first and per "show earlier". */
const ERRORS = new Set(["agent.error", "session.error", "component.error", "watch.failed", "agent.hook_failed"]);

/** The filter kind of a record type. */
export function kindOf(type) {
  if (ERRORS.has(type)) return "error";
  if (type.startsWith("event.")) return "event";
  if (type.startsWith("run.") || type.startsWith("parallel.")) return "run";
  if (type.startsWith("agent.tool_")) return "tool";
  if (type === "agent.request") return "request";
  if (type === "agent.text" || type === "agent.reasoning" || type === "agent.final") return "text";
  if (type === "agent.activity" || type === "agent.notice") return "activity";
  if (type.startsWith("outbox.")) return "outbox";
  return "other";
}

const CLOCK = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
/** One formatter for every row (toLocaleTimeString builds one per call: slow for thousands of rows). */

function clock(at) {
  return at ? CLOCK.format(new Date(at * 1000)) : "";
}

function clip(text, n = 120) {
  const one = String(text ?? "").replace(/\s+/g, " ").trim();
  return one.length > n ? one.slice(0, n - 1) + "…" : one;
}

function from(src) {
  if (!src || typeof src !== "object") return "";
  return [src.type, src.sender || src.name].filter(Boolean).join(": ");
}

const TEXTS = new Set(["text", "content", "arguments"]);

/** One line saying what a record is (a field missing from a record shows as "?"). */
export function summarize(type, data, count = 1) {
  const d = new Proxy(data && typeof data === "object" ? data : {}, {
    get: (o, k) => (o[k] === undefined || o[k] === null ? (TEXTS.has(k) ? "" : "?") : o[k]),
  });
  switch (type) {
    case "event.accepted":
      return `${d.type} from ${from(d.source) || "?"} via ${d.channel || "?"} → ${d.strategy} (${d.reason})`;
    case "event.dropped":
      return `${d.type} from ${from(d.source) || "?"} via ${d.channel || "?"} dropped: ${d.reason}`;
    case "run.started":
      return `run started (${d.pending} pending)`;
    case "run.ended":
      return `run ended (${d.pending} pending)`;
    case "agent.tool_started":
      return `${d.name} ${clip(d.arguments, 80)}`;
    case "agent.tool_finished":
      return `${d.name} ${d.is_error === true ? "failed" : "done"} in ${secs(data?.duration_s)}: ` +
        clip(d.content, 80);
    case "agent.request": {
      const audit = d.prefix_ok === false ? ` · prefix changed at ${d.diverged_at}` : "";
      return `#${d.index}: ${d.prompt_tokens} prompt (${d.cached_prompt_tokens} cached), ${d.completion_tokens} out, ` +
        `${secs(data?.total_s)}${audit}`;
    }
    case "agent.text":
    case "agent.reasoning":
      return `${count} ${count === 1 ? "delta" : "deltas"}: ${clip(d.text, 90)}`;
    case "agent.final":
      return `${d.stop_reason}: ${clip(d.text, 100)}`;
    case "agent.activity":
      return d.text || d.kind;
    case "agent.notice":
      return `${d.source}: ${clip(d.text)}`;
    case "agent.error":
    case "session.error":
      return d.message;
    case "agent.hook_failed":
      return `${d.plugin}.${d.hook}: ${d.message}`;
    case "component.error":
      return `${d.component}: ${d.message}`;
    case "watch.failed":
      return `${d.watch_id}: ${d.message}`;
    case "outbox.message":
      return `${d.kind}: ${clip(d.text, 100)}`;
    case "outbox.closed":
      return `${d.status}${d.answer ? `: ${clip(d.answer, 60)}` : ""} — ${clip(d.text, 60)}`;
    case "parallel.started":
      return `side session ${d.side_session}: ${clip(d.question, 80)}`;
    case "parallel.answer":
      return `${clip(d.answer, 100)}`;
    case "session.created":
      return d.title ? `“${d.title}”` : "untitled";
    default:
      return clip(JSON.stringify(data), 120);
  }
}

/** The timeline column; `el` goes in the page. */
export class Timeline {
  constructor() {
    this.entries = [];
    this.filter = "all";
    this.limit = WINDOW;
    this.select = h("select#timeline-kind", { on: { change: () => this.setFilter(this.select.value) } },
      KINDS.map(([v, label]) => h("option", { value: v }, label)));
    this.count = h("span.muted.small");
    this.more = h("button.show-earlier", { type: "button", hidden: true, on: { click: () => this.earlier() } },
      "Show earlier records");
    this.rows = h("ol.timeline-rows", { "aria-label": "Records, oldest first", tabindex: "0" });
    this.scroller = h("div.timeline-scroll", { on: { scroll: () => this.onScroll() } }, this.more, this.rows);
    this.stick = true;
    this.pinned = 0;
    this.stale = new Set();
    this.timer = 0;
    this.work = h("div.tl-work", { hidden: true, "aria-label": "Async tasks and timers" });
    this.el = h("section.timeline", { "aria-label": "Event timeline" },
      h("div.row", h("h2", "Timeline"), this.count, h("span.grow"),
        h("label.small", { for: "timeline-kind" }, "Show "), this.select),
      this.work,
      this.scroller);
  }

  /** The session's async tasks (state, progress) and timers (schedule, next due), above the records. */
  showBackground({ tasks = [], timers = [] } = {}) {
    const live = tasks.filter((t) => t.status === "running");
    const ended = tasks.length - live.length;
    clear(this.work);
    this.work.hidden = !tasks.length && !timers.length;
    const task = (t) => h(`li.tl-task.s-${t.status}`, h("span.badge", t.status), " ", t.title || t.id,
      t.progress ? h("span.muted", ` ${clip(t.progress, 40)}`) : null,
      t.exit_code !== null && t.exit_code !== undefined ? h("span.muted", ` exit ${t.exit_code}`) : null);
    const timer = (t) => h("li.tl-timer", h("span.badge", t.schedule), " ", clip(t.message, 60),
      h("span.muted", ` next ${clock(t.next_due)}${t.late ? " (late)" : ""}`));
    if (tasks.length) {
      this.work.append(h("h3.small", `Async tasks: ${live.length} running, ${ended} ended`),
        h("ul.tl-list", [...live, ...tasks.filter((t) => t.status !== "running").slice(-5)].map(task)));
    }
    if (timers.length) this.work.append(h("h3.small", `Timers: ${timers.length}`), h("ul.tl-list", timers.map(timer)));
  }

  /** Take a record in; a text delta right after another of its type joins that row. Returns [entry, isNew]. */
  ingest(rec) {
    const last = this.entries[this.entries.length - 1];
    if ((rec.type === "agent.text" || rec.type === "agent.reasoning") && last && last.type === rec.type) {
      last.count += 1;
      last.text += rec.data?.text || "";
      return [last, false];
    }
    const entry = { type: rec.type, kind: kindOf(rec.type), rec, at: rec.at, count: 1, el: null };
    if (entry.kind === "text" && rec.type !== "agent.final") entry.text = rec.data?.text || "";
    this.entries.push(entry);
    return [entry, true];
  }

  load(records) {
    for (const rec of records) this.ingest(rec);
    this.render();
  }

  shows(entry) {
    return this.filter === "all" || entry.kind === this.filter;
  }

  row(entry) {
    const data = entry.text !== undefined ? { ...entry.rec.data, text: entry.text } : entry.rec.data;
    const sum = h("span.tl-sum", summarize(entry.type, data, entry.count));
    const body = h("pre.tl-data");
    const el = h(`li.tl-row.k-${entry.kind}`, { dataset: { type: entry.type, cursor: entry.rec.cursor } },
      h("details", {
        on: {
          toggle: (ev) => {
            if (ev.target.open && !body.firstChild) {
              const d = entry.text !== undefined
                ? { ...entry.rec.data, text: entry.text, deltas: entry.count } : entry.rec.data;
              body.textContent = JSON.stringify(d, null, 2);
            }
          },
        },
      },
        h("summary", h("time.tl-time", clock(entry.at)), h("span.tl-type", entry.type), sum), body));
    entry.el = el;
    entry.sum = sum;
    return el;
  }

  render() {
    this.stale.clear();
    const shown = [];
    for (let i = this.entries.length - 1; i >= 0 && shown.length <= this.limit; i--) {
      if (this.shows(this.entries[i])) shown.push(this.entries[i]);
    }
    this.more.hidden = shown.length <= this.limit;
    if (!this.more.hidden) shown.pop();
    const frag = document.createDocumentFragment();
    for (let i = shown.length - 1; i >= 0; i--) frag.append(this.row(shown[i]));
    clear(this.rows).append(frag);
    this.counted();
  }

  counted() {
    this.count.textContent = `${this.entries.length.toLocaleString()} rows`;
  }

  setFilter(kind) {
    this.filter = kind;
    this.limit = WINDOW;
    this.render();
    this.toBottom();
  }

  earlier() {
    const before = this.scroller.scrollHeight;
    this.limit += WINDOW;
    this.render();
    this.scroller.scrollTop += this.scroller.scrollHeight - before;
  }

  /** Live records (one animation frame's worth). A row of streamed deltas is recounted a few times a second. */
  add(records) {
    const frag = document.createDocumentFragment();
    for (const rec of records) {
      const [entry, isNew] = this.ingest(rec);
      if (!this.shows(entry)) continue;
      if (isNew) frag.append(this.row(entry));
      else if (entry.sum) this.stale.add(entry);
    }
    if (frag.firstChild) {
      this.recount();
      this.rows.append(frag);
      this.counted();
      if (this.stick) this.toBottom();
    } else if (this.stale.size && !this.timer) {
      this.timer = setTimeout(() => this.recount(), 250);
    }
  }

  recount() {
    clearTimeout(this.timer);
    this.timer = 0;
    for (const entry of this.stale) {
      entry.sum.textContent = summarize(entry.type, { ...entry.rec.data, text: entry.text }, entry.count);
    }
    this.stale.clear();
  }

  onScroll() {
    const el = this.scroller;
    if (el.scrollHeight - el.scrollTop - el.clientHeight < 40) this.stick = true;
    else if (el.scrollTop < this.pinned) this.stick = false;
    this.pinned = el.scrollTop;
  }

  toBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.pinned = this.scroller.scrollTop;
    this.stick = true;
  }

  close() {
    clearTimeout(this.timer);
  }
}
