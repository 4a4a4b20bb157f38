// The conversation: the stored messages, then the session's live records (text deltas, tool cards, answers,
// events, questions). Everything goes in as text (dom.js); callers batch records per animation frame.
import { append, h, secs } from "./dom.js";
import { isApproval, questionCard } from "./chat_outbox.js";

const SPILL = /([^\s'"`(\[]*\.kairos\/spill\/[^\s'"`:,;)\]]+)/;
const FOLD_CHARS = 700;
const FOLD_LINES = 12;
const PAGE_MESSAGES = 120;
/** Messages rendered at first and per "show earlier" (then back to the start of that turn, within reason). */

/** Control tokens of a spoken reply ([THINKING], [EMO:happy], [SPEED:0.8x], [PAUSE:500ms]): never shown.
 * The same pattern as kairos.voice.speech_text._TOKEN; a "[" that may still open one waits for more text, and
 * so does a token at the end (with the space before it: the two spaces around a token become one). */
const TOKEN = /\[([A-Z][A-Z_]*)(?::([^\]\s]{1,24}))?\]/g;
const TOKEN_OPEN = /\[(?:[A-Z][A-Z_]*(?::[^\]\s]{0,24})?)?\]?$/; // open, or closed with nothing after it yet
const MAX_TOKEN = 40;

const SPACED = new RegExp(`( ?)${TOKEN.source}( ?)`, "g");

/** The agent's text without control tokens (a token between two spaces leaves one). */
export function stripTokens(text) {
  return text.replace(SPACED, (_m, before, _name, _value, after) => (before && after ? " " : before || after));
}

/** Streamed text in, text to show out: tokens removed even when split across deltas. */
export class TokenFilter {
  constructor() {
    this.held = "";
    this.space = false;
  }

  feed(delta) {
    let text = this.held + delta;
    this.held = "";
    const open = text.match(TOKEN_OPEN);
    if (open && text.length - open.index < MAX_TOKEN) {
      this.held = text.slice(open.index);
      text = text.slice(0, open.index);
    }
    let out = stripTokens(text);
    if (this.space && out) out = ` ${out.replace(/^ /, "")}`;
    this.space = this.space && !out;
    if (out.endsWith(" ")) { // a token may follow: the space waits, so the two spaces around it become one
      this.space = true;
      out = out.slice(0, -1);
    }
    return out;
  }
}

const STOPS = {
  interrupted: "interrupted",
  max_iterations: "stopped: too many steps",
  loop_guard: "stopped: the loop guard",
  length: "cut: the length limit",
  error: "stopped by an error",
};

/** The arguments as the model wrote them, pretty-printed when they are JSON. */
export function prettyArgs(text) {
  if (!text || !text.trim()) return "{}";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** A tool result's text with spill-file paths marked (the whole output is kept there, in the workspace). */
function withSpills(text) {
  const parts = text.split(SPILL);
  if (parts.length === 1) return [text];
  return parts.map((p, i) => (i % 2 ? h("code.spill", { title: "the whole output, saved in the workspace" }, p) : p));
}

function lines(text) {
  let n = 1;
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) n++;
  return n;
}

/** A result block, folded in a <details> when long. */
export function resultBlock(content, truncated = false) {
  const pre = h("pre.result", withSpills(content));
  const note = truncated
    ? h("p.muted.small", "Cut at 4,000 characters here; the whole result is in the session.") : null;
  const n = lines(content);
  if (content.length <= FOLD_CHARS && n <= FOLD_LINES) return [pre, note];
  const size = `Result: ${content.length.toLocaleString()} characters, ${n} lines`;
  return h("details.fold", h("summary", size), pre, note);
}

/** One tool call: name, state, arguments, then its result. */
class ToolCard {
  constructor(id, name, args) {
    this.id = id;
    this.name = name;
    this.state = h("span.badge", "running");
    this.time = h("span.muted.tool-time");
    const pretty = prettyArgs(args);
    const argBlock = pretty.length > FOLD_CHARS || lines(pretty) > FOLD_LINES
      ? h("details.fold", h("summary", "Arguments"), h("pre.args", pretty))
      : [h("div.label", "Arguments"), h("pre.args", pretty)];
    this.el = h("div.tool.card", {
      dataset: { call: id, state: "running" },
      role: "group",
      "aria-label": `Tool call ${name}`,
    },
      h("div.tool-head", h("span.tool-name", name), this.state, this.time),
      argBlock,
    );
    this.done = false;
  }

  /** state: what the badge says; look: running, ok, error or interrupted (the card's data-state). */
  set(state, look) {
    this.state.textContent = state;
    this.el.dataset.state = look;
  }

  finish(content, isError, truncated, duration) {
    if (this.done) return;
    this.done = true;
    const interrupted = content.startsWith("[interrupted:");
    if (isError) this.set("error", "error");
    else if (interrupted) this.set("interrupted", "interrupted");
    else this.set("done", "ok");
    if (duration !== undefined && duration !== null) this.time.textContent = secs(duration);
    append(this.el, [h("div.label", isError ? "Error" : "Result"), resultBlock(content, truncated)]);
  }

  /** No result came: the run was stopped (or the result was never stored). */
  stop(label = "interrupted") {
    if (this.done) return;
    this.done = true;
    this.set(label, "interrupted");
  }
}

function bubble(kind, text, who) {
  return h(`div.msg.${kind}`, h("div.who", who), h("div.body", text));
}

function source(src) {
  if (!src || typeof src !== "object") return "";
  return src.sender || src.name || src.type || "";
}

/** The conversation pane (a scrolling log); `el` goes in the page. */
export class Conversation {
  constructor() {
    this.more = h("button.show-earlier", { type: "button", hidden: true, on: { click: () => this.showEarlier() } },
      "Show earlier messages");
    this.list = h("div.turn-list");
    this.el = h("div.turns", {
      role: "log",
      "aria-label": "Conversation",
      tabindex: "0",
      on: { scroll: () => this.onScroll() },
    }, this.more, this.list);
    this.stick = true;
    this.pinned = 0;
    this.cards = new Map();
    this.questions = new Map();
    this.open = null;
    this.reasoning = null;
    this.history = [];
    this.start = 0;
    this.facts = new Map();
    this.busy = false;
    this.interim = null;
    this.heardVoice = false;
  }

  // -- stored history -----------------------------------------------------------------------------

  /**
   * Show the stored messages (the last turns; earlier ones on demand).
   * facts: tool call id → {duration_s, is_error} from the timeline; running: ids of calls still running.
   */
  showHistory(messages, facts = new Map(), running = new Set()) {
    this.history = messages;
    this.facts = facts;
    this.start = this.chunkStart(messages.length);
    this.list.append(this.renderRange(this.start, messages.length));
    for (const [id, card] of this.cards) if (!card.done && !running.has(id)) card.stop("no result");
    this.more.hidden = this.start === 0;
  }

  chunkStart(end) {
    let i = Math.max(0, end - PAGE_MESSAGES);
    const floor = Math.max(0, i - 200);
    while (i > floor && this.history[i].role !== "user") i--;
    return i;
  }

  renderRange(from, to) {
    const frag = document.createDocumentFragment();
    for (let i = from; i < to; i++) {
      const m = this.history[i];
      const content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
      if (m.role === "user") frag.append(this.storedInput(m, content));
      else if (m.role === "assistant") {
        const shown = stripTokens(content).trim();
        if (shown) frag.append(bubble("assistant", shown, "kairos"));
        for (const [id, name, args] of m.tool_calls || []) {
          const card = new ToolCard(id, name, args);
          this.cards.set(id, card);
          frag.append(card.el);
        }
      } else if (m.role === "tool") {
        let card = this.cards.get(m.tool_call_id);
        if (!card) {
          card = new ToolCard(m.tool_call_id || "", m.name || "tool", "");
          frag.append(card.el);
        }
        const f = this.facts.get(m.tool_call_id) || {};
        card.finish(content, Boolean(f.is_error), false, f.duration_s);
      }
    }
    return frag;
  }

  storedInput(m, content) {
    const [kind, from] = m.origin || ["user"];
    if (kind === "user") return bubble("user", content, "you");
    const label = kind === "external" ? `external content${from ? ` from ${from}` : ""}`
      : kind === "event" ? `event${from ? `: ${from}` : ""}` : `${kind} note${from ? ` (${from})` : ""}`;
    return h(`div.msg.event.${kind}`, h("details", h("summary", label), h("pre", content)));
  }

  showEarlier() {
    if (this.start === 0) return;
    const end = this.start;
    this.start = this.chunkStart(end);
    const before = this.el.scrollHeight;
    this.list.prepend(this.renderRange(this.start, end));
    this.el.scrollTop += this.el.scrollHeight - before;
    this.more.hidden = this.start === 0;
    if (this.more.hidden) this.el.focus(); // the button is gone: keep the keyboard in the log
  }

  // -- live records -------------------------------------------------------------------------------

  append(node) {
    this.list.append(node);
    return node;
  }

  /** Streamed answer text: appended to the open bubble (one text node, no re-layout of earlier turns). */
  text(delta) {
    if (!this.open) {
      const node = document.createTextNode("");
      const el = this.append(h("div.msg.assistant.streaming", h("div.who", "kairos"), h("div.body", node)));
      this.open = { el, node, tokens: new TokenFilter() };
    }
    const shown = this.open.tokens.feed(delta);
    this.open.node.appendData(this.open.node.length ? shown : shown.trimStart());
  }

  think(delta) {
    if (!this.reasoning) {
      const node = document.createTextNode("");
      this.append(h("details.msg.reasoning", h("summary", "reasoning"), h("pre", node)));
      this.reasoning = node;
    }
    this.reasoning.appendData(delta);
  }

  closeText() {
    if (this.open) this.open.el.classList.remove("streaming");
    this.open = null;
    this.reasoning = null;
  }

  final(d) {
    let el = this.open?.el;
    if (el) {
      const shown = stripTokens(d.text || "").trim();
      if (shown && shown !== this.open.node.data.trim()) this.open.node.data = shown;
    } else if (stripTokens(d.text || "").trim()) {
      el = this.append(bubble("assistant", stripTokens(d.text).trim(), "kairos"));
    }
    this.closeText();
    if (d.stop_reason && d.stop_reason !== "answer") {
      const label = STOPS[d.stop_reason] || d.stop_reason;
      if (!el) el = this.append(h("div.msg.assistant", h("div.who", "kairos")));
      el.classList.add("stopped");
      el.querySelector(".who").append(" ", h("span.badge.warn", label));
      this.stopRunning(d.stop_reason === "interrupted" ? "interrupted" : "stopped");
    }
  }

  stopRunning(label) {
    for (const card of this.cards.values()) if (!card.done) card.stop(label);
  }

  accepted(d, dropped = false) {
    const how = dropped ? `dropped: ${d.reason}` : this.strategyText(d.strategy);
    if (d.type === "user.input") {
      const voice = d.channel === "voice";
      if (voice) {
        this.heardVoice = true;
        this.dropInterim();
      }
      const el = bubble("user", d.content, voice ? "you (voice)" : "you");
      if (how) el.querySelector(".who").append(" ", h(`span.badge${dropped ? ".bad" : ""}`, how));
      return this.append(el);
    }
    if (dropped) return null; // an event nobody asked for: the timeline shows it
    const from = source(d.source);
    return this.append(h("div.msg.event", h("details",
      h("summary", `${d.type}${from ? ` from ${from}` : ""}${d.channel ? ` (${d.channel})` : ""} · ` +
        (how || d.strategy)),
      h("pre", d.content))));
  }

  /** What the microphone hears, greyed, until the session takes it as the user's message (final: the last words). */
  showInterim(text, final = false) {
    if (!this.interim) this.interim = this.append(h("div.msg.user.interim", h("div.who", "you (speaking)"),
      h("div.body", "")));
    this.interim.querySelector(".body").textContent = text;
    this.interim.classList.toggle("final", final);
  }

  dropInterim() {
    if (this.interim) this.interim.remove();
    this.interim = null;
  }

  strategyText(strategy) {
    if (strategy === "queue") return this.busy ? "queued: joins at the next safe point" : "";
    if (strategy === "interrupt") return "interrupts the running turn";
    if (strategy === "parallel") return "answered beside the running task";
    return strategy || "";
  }

  /** A question card; an approval also marks its call as waiting for it. */
  question(q) {
    if (this.questions.has(q.id)) return;
    const card = questionCard(q);
    const calls = [...this.cards.values()].reverse();
    const call = isApproval(q) ? calls.find((c) => !c.done && q.text.startsWith(`Allow ${c.name}(`)) : null;
    if (call && (!q.status || q.status === "pending")) {
      call.set("waiting for approval", "running");
      const close = card.close;
      card.close = (rec) => {
        close(rec);
        if (!call.done) call.set("running", "running");
      };
    }
    this.questions.set(q.id, card);
    this.append(card.el);
  }

  /** Apply one live record (text deltas are merged by the caller and come as agent.text). */
  apply(rec) {
    const d = rec.data || {};
    switch (rec.type) {
      case "agent.text":
        this.text(d.text || "");
        break;
      case "agent.reasoning":
        this.think(d.text || "");
        break;
      case "agent.tool_started": {
        this.closeText();
        if (!this.cards.has(d.id)) {
          const card = new ToolCard(d.id, d.name, d.arguments);
          this.cards.set(d.id, card);
          this.append(card.el);
        }
        break;
      }
      case "agent.tool_finished": {
        let card = this.cards.get(d.id);
        if (!card) {
          card = new ToolCard(d.id, d.name, "");
          this.cards.set(d.id, card);
          this.append(card.el);
        }
        card.finish(d.content || "", d.is_error, d.truncated, d.duration_s);
        break;
      }
      case "agent.final":
        this.final(d);
        break;
      case "agent.error":
      case "session.error":
        this.closeText();
        this.append(h("div.msg.note.error", `The run failed: ${d.message}`));
        break;
      case "agent.notice":
        this.append(h("div.msg.note", d.text));
        break;
      case "agent.hook_failed":
        this.append(h("div.msg.note.warn", `The ${d.plugin} plugin failed in ${d.hook}: ${d.message}`));
        break;
      case "event.accepted":
        this.accepted(d);
        break;
      case "event.dropped":
        this.accepted(d, true);
        break;
      case "parallel.answer": {
        const el = this.append(bubble("assistant", stripTokens(d.answer || "").trim(), "kairos"));
        el.querySelector(".who").append(" ", h("span.badge", `beside the running task, to: ${d.question}`));
        break;
      }
      case "run.started":
        this.busy = true;
        break;
      case "run.ended":
        this.closeText();
        this.stopRunning("interrupted");
        this.busy = false;
        break;
      case "outbox.message":
        if (d.kind === "question" && d.status === "pending") this.question(d);
        break;
      case "outbox.closed":
        this.questions.get(d.id)?.close(d);
        break;
      default:
        break;
    }
  }

  /** Whether the log was at its bottom when the user last scrolled (new content keeps it there). */
  onScroll() {
    const el = this.el;
    if (el.scrollHeight - el.scrollTop - el.clientHeight < 40) this.stick = true;
    else if (el.scrollTop < this.pinned) this.stick = false; // the user went up (content growing is not that)
    this.pinned = el.scrollTop;
  }

  /** Once per frame: keep the log at its bottom unless the user scrolled up to read. */
  follow() {
    if (this.stick) this.toBottom();
  }

  toBottom() {
    this.el.scrollTop = this.el.scrollHeight;
    this.pinned = this.el.scrollTop;
    this.stick = true;
  }
}
