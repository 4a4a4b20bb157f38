// The chat view (#/chat/<id>): the sessions sidebar; the conversation with its activity line, inline questions
// and a composer that stays usable while the agent works; the outbox and the event timeline beside it.
//
// Loading: the stored records up to a cursor (the timeline), the stored messages (the history shown), then
// the session's stream resumed after that cursor, so nothing is missed or shown twice. Live records are
// queued and applied once per animation frame, off the layout of everything already on the page.
import { api, follow } from "./api.js";
import { BrowserPanel } from "./browser_panel.js";
import { clear, h, toast } from "./dom.js";
import { Inbox } from "./chat_outbox.js";
import { Conversation } from "./chat_render.js";
import { Sessions } from "./chat_sessions.js";
import { Timeline } from "./timeline.js";
import { Voice } from "./voice.js";

const PAGE = 5000;
const REFRESH_MS = 15000;
const QUIET = new Set(["agent.text", "agent.reasoning", "agent.activity"]);
/** Records that leave the stored messages as they were (the load's consistency check lets them pass). */

function path(sid, rest = "") {
  return `/v1/sessions/${encodeURIComponent(sid)}${rest}`;
}

async function recordsAfter(sid, after) {
  const out = [];
  for (;;) {
    const page = await api(path(sid, `/timeline?after=${after}&limit=${PAGE}`));
    for (const r of page.records) out.push(r);
    if (page.records.length < PAGE) return out;
    after = page.records[page.records.length - 1].cursor;
  }
}

async function allMessages(sid) {
  const out = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = await api(path(sid, `/messages?offset=${offset}&limit=${PAGE}`));
    for (const m of page.messages) out.push(m);
    if (page.messages.length < PAGE) return out;
  }
}

/**
 * The session as of one cursor: its records up to it and the messages stored by then. When a record that
 * changes the messages came in while they were read, they are read again (so the stream does not repeat them).
 * (Plain requests are never aborted when the view closes: they finish and their answer is dropped.)
 */
async function snapshot(sid) {
  const records = await recordsAfter(sid, 0);
  let cursor = records.length ? records[records.length - 1].cursor : 0;
  for (let tries = 0; ; tries++) {
    const [info, messages] = await Promise.all([api(path(sid)), allMessages(sid)]);
    const extra = await recordsAfter(sid, cursor);
    for (const r of extra) records.push(r);
    if (extra.length) cursor = extra[extra.length - 1].cursor;
    if (tries >= 3 || extra.every((r) => QUIET.has(r.type))) return { records, cursor, info, messages };
  }
}

/** What the stored records say about a run still going: text not stored yet, calls running, the activity. */
function inProgress(records) {
  let start = -1;
  for (let i = records.length - 1; i >= 0 && start < 0; i--) {
    if (records[i].type === "run.ended") return null;
    if (records[i].type === "run.started") start = i;
  }
  if (start < 0) return null;
  const run = { text: "", running: new Set(), activity: null };
  for (let i = start + 1; i < records.length; i++) {
    const { type, data } = records[i];
    if (type === "agent.text") run.text += data.text;
    else if (type === "agent.request" || type === "agent.tool_started" || type === "agent.final") run.text = "";
    if (type === "agent.tool_started") run.running.add(data.id);
    else if (type === "agent.tool_finished") run.running.delete(data.id);
    else if (type === "agent.activity") run.activity = data;
  }
  return run;
}

/** The events still queued for the session (accepted, not taken up yet): the last `pending` with a seq. */
function queued(records, pending) {
  const out = [];
  for (let i = records.length - 1; i >= 0 && out.length < pending; i--) {
    const r = records[i];
    if (r.type === "event.accepted" && r.data.seq !== undefined && r.data.seq !== null) out.push(r);
  }
  return out.reverse();
}

/** Show the questions the records leave open (asked and not closed); returns the ids of the closed ones. */
function questionsIn(records, show) {
  const open = new Map();
  const shut = new Set();
  for (const { type, data } of records) {
    if (type === "outbox.message" && data.kind === "question" && data.status === "pending") open.set(data.id, data);
    else if (type === "outbox.closed") shut.add(data.id);
  }
  for (const [id, q] of open) if (!shut.has(id)) show(q);
  return shut;
}

function activityText(d) {
  if (!d) return "";
  const pct = d.total ? ` ${Math.round((100 * d.done) / d.total)}%` : "";
  return d.kind === "reading" ? `reading the prompt${pct}` : d.text || d.kind;
}

/** What the receipt of a message means, in words (with the strategy's name). */
export function receiptText(r, busy) {
  if (r.duplicate) return "Already sent: nothing was queued again.";
  switch (r.strategy) {
    case "queue":
      return busy ? "Sent: it joins at the next safe point (queue)." : "Sent (queue).";
    case "interrupt":
      return "Sent: it interrupts the running turn (interrupt).";
    case "parallel":
      return "Sent: answered beside the running task (parallel).";
    case "drop":
      return `Dropped: ${r.reason} (drop).`;
    default:
      return `Sent (${r.strategy}).`;
  }
}

export function mount(main, args, { go }) {
  const sid = args[0] || "";
  const ctl = new AbortController();
  const timers = [];
  const conv = new Conversation();
  const timeline = new Timeline();
  const inbox = new Inbox(sid);
  const voice = sid ? new Voice(sid, conv) : null;
  const browser = sid ? new BrowserPanel(sid) : null;
  const title = h("h1#chat-title", sid ? "…" : "Chat");
  const sessions = new Sessions(sid, go, (s) => (title.textContent = s.title || "Untitled"));
  const state = h("span.badge#chat-state", { hidden: true });
  const stream = h("span.small.muted#chat-stream", { role: "status" });
  const activity = h("div.activity#chat-activity", { role: "status", "aria-live": "polite" });
  let busy = false;

  const stop = h("button.danger.stop#chat-stop", { type: "button", hidden: true, on: { click: () => interrupt() } },
    "Stop");
  const text = h("textarea#composer-text", {
    rows: 2,
    placeholder: "Message kairos (Enter sends, Shift+Enter for a new line)",
    on: { keydown: (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        form.requestSubmit();
      }
    } },
  });
  const status = h("p.composer-status.small.muted#composer-status", { role: "status", "aria-live": "polite" });
  const submit = (ev) => {
    ev.preventDefault();
    send();
  };
  const form = h("form.composer", { "aria-label": "Send a message", on: { submit } },
    h("label.vh", { for: "composer-text" }, "Message"),
    text,
    voice ? voice.button : null,
    h("button.primary#composer-send", { type: "submit" }, "Send"),
    voice ? voice.line : null,
    status,
  );
  const head = h("header.chat-head", title, sid ? h("span.sid.small.muted", sid) : null, state, stream, stop);
  const center = h("section.chat-main", { "aria-labelledby": "chat-title" }, head, conv.el, activity, form);
  const aside = h("aside.chat-aside", { "aria-label": "Browser, outbox and event timeline" },
    browser ? browser.el : null, inbox.el, timeline.el);
  const layout = h("div.chat.split3", sessions.el, center, aside);
  main.append(layout);
  const resized = new ResizeObserver(() => conv.follow()); // a phone's keyboard opening keeps the last turn in view
  resized.observe(conv.el);

  function setBusy(value) {
    busy = value;
    conv.busy = value;
    if (!value && document.activeElement === stop) text.focus(); // the button goes: keep the keyboard here
    stop.hidden = !value;
    state.hidden = !value;
    state.textContent = "working";
    state.className = "badge warn";
    if (!value) activity.textContent = "";
    if (!value && voice) voice.runEnded();
    else if (!activity.textContent) activity.textContent = "working…";
    if (sid) sessions.setBusy(sid, value);
  }

  async function send() {
    const value = text.value;
    if (!value.trim() || !sid) return;
    const working = busy; // as the user saw it when sending (the run may start before the receipt comes)
    text.value = "";
    status.textContent = "Sending…";
    status.className = "composer-status small muted";
    try {
      const r = await api(path(sid, "/messages"), { method: "POST", body: { text: value } });
      status.textContent = receiptText(r, working);
    } catch (e) {
      if (!text.value) text.value = value; // nothing lost: the text is back in the box
      status.textContent = `Not sent: ${e.message}`;
      status.className = "composer-status small error";
      toast(`Not sent: ${e.message}`);
    }
  }

  async function interrupt() {
    stop.disabled = true;
    try {
      const r = await api(path(sid, "/interrupt"), { method: "POST", body: { reason: "stopped from the web UI" } });
      if (!r.interrupted) toast("Nothing was running.", "info");
    } catch (e) {
      toast(`Stop failed: ${e.message}`);
    } finally {
      stop.disabled = false;
    }
  }

  // -- live records ---------------------------------------------------------------------------------------
  // The records of one network read are applied together (a microtask), so a delta is on the page for the
  // next paint; what reads layout (keeping the log scrolled to the bottom) and the timeline's rows wait for
  // the animation frame, once per frame however many records came.
  const queue = [];
  const settled = [];
  let draining = false;
  let frame = 0;

  function onRecord(rec) {
    queue.push(rec);
    if (!draining) {
      draining = true;
      queueMicrotask(drain);
    }
  }

  function drain() {
    draining = false;
    const batch = queue.splice(0);
    let delta = "";
    for (const rec of batch) {
      if (rec.type === "agent.text") {
        delta += rec.data.text;
        continue;
      }
      if (delta) conv.text(delta);
      delta = "";
      applyState(rec);
      conv.apply(rec);
    }
    if (delta) {
      conv.text(delta);
      if (busy) activity.textContent = "writing the answer";
    }
    for (const rec of batch) settled.push(rec);
    if (!frame) frame = requestAnimationFrame(paint);
  }

  function paint() {
    frame = 0;
    const batch = settled.splice(0);
    timeline.add(batch);
    conv.follow();
    if (batch.length) conv.el.dataset.cursor = String(batch[batch.length - 1].cursor);
  }

  /** Tasks and timers change when a tool runs (start_task, set_timer) or a run ends: read them again then. */
  let backgroundDue = 0;
  function refreshBackground() {
    if (!sid || backgroundDue) return;
    backgroundDue = setTimeout(() => {
      backgroundDue = 0;
      if (closed()) return;
      api(path(sid, "/background"), { signal: ctl.signal }).then((b) => timeline.showBackground(b), () => {});
    }, 200);
  }

  function applyState(rec) {
    const d = rec.data || {};
    if (rec.type === "agent.tool_finished" || rec.type === "run.ended") refreshBackground();
    if (rec.type === "agent.tool_finished" && browser) browser.poke();
    if (rec.type === "run.started") setBusy(true);
    else if (rec.type === "run.ended") setBusy(false);
    else if (rec.type === "agent.activity" && busy) activity.textContent = activityText(d);
    else if (rec.type === "outbox.message" || rec.type === "outbox.closed") inbox.add(d);
  }

  // -- loading ------------------------------------------------------------------------------------------
  const closed = () => ctl.signal.aborted;

  /** The sidebar, the outbox, then the session: ready (main[data-ready]) once all of it is on the page. */
  async function load() {
    timers.push(setInterval(() => {
      if (document.visibilityState === "visible") {
        sessions.refresh();
        inbox.refresh();
        refreshBackground();
      }
    }, REFRESH_MS));
    const side = Promise.all([
      sessions.load().catch((e) => toast(`The session list did not load: ${e.message}`)),
      inbox.load(),
    ]);
    if (!sid) {
      conv.list.append(h("p.muted", "No session is open: pick one, or start a new session."));
      form.hidden = true;
      timeline.load([]);
      await side;
      if (closed()) return;
      if (sessions.list.length) location.replace(`#/chat/${encodeURIComponent(sessions.list[0].id)}`);
      else main.dataset.ready = "chat";
      return;
    }
    conv.el.setAttribute("aria-busy", "true");
    const asked = api("/v1/questions").then((data) => data.questions, (e) => {
      if (e.status !== 503 && !closed()) toast(`Open questions did not load: ${e.message}`);
      return [];
    });
    let snap;
    try {
      snap = await snapshot(sid);
    } catch (e) {
      await side;
      if (closed()) return;
      const msg = e.status === 404 ? `There is no session ${sid}.` : `This session did not load: ${e.message}`;
      conv.list.append(h("p.error", { role: "alert" }, msg));
      conv.el.removeAttribute("aria-busy");
      form.hidden = true;
      main.dataset.ready = "chat";
      if (e.status !== 404) toast(msg);
      return;
    }
    if (closed()) return;
    const { records, cursor, info, messages } = snap;
    title.textContent = info.title || "Untitled";
    const facts = new Map();
    for (const r of records) if (r.type === "agent.tool_finished") facts.set(r.data.id, r.data);
    const run = inProgress(records);
    conv.showHistory(messages, facts, run ? run.running : new Set());
    setBusy(Boolean(run));
    for (const r of queued(records, info.pending || 0)) conv.apply(r);
    const shut = questionsIn(records, (q) => conv.question(q));
    if (run) {
      if (run.text) conv.text(run.text);
      activity.textContent = activityText(run.activity) || "working…";
    }
    timeline.load(records);
    refreshBackground();
    browser.start();
    conv.el.removeAttribute("aria-busy");
    conv.el.dataset.cursor = String(cursor);
    conv.toBottom();
    timeline.toBottom();
    follow(sid, cursor, onRecord, ctl.signal, (s) => {
      stream.textContent = s === "live" ? "" : s === "reconnecting" ? "reconnecting…" : "stream closed";
    });
    const [open] = await Promise.all([asked, side]);
    if (closed()) return;
    for (const q of open) if (q.session === sid && !shut.has(q.id)) conv.question(q); // older than the stream keeps
    conv.follow();
    main.dataset.ready = "chat";
  }

  load().catch((e) => {
    if (!closed()) toast(`The chat failed: ${e.message}`);
  });
  if (sid) text.focus();

  return () => {
    clearTimeout(backgroundDue);
    if (voice) voice.close();
    if (browser) browser.close();
    ctl.abort();
    for (const t of timers) clearInterval(t);
    timeline.close();
    resized.disconnect();
    if (frame) cancelAnimationFrame(frame);
    delete main.dataset.ready;
    clear(main);
  };
}
