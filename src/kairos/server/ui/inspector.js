// The context inspector (issue 25 §1): what the model saw in each request and what it cost.
//   #/inspector                    the sessions
//   #/inspector/<sid>              its requests (table) and the cache-reuse chart
//   #/inspector/<sid>/<index>      one request: its numbers, the prompt in its parts, the prefix audit
//   #/inspector/<sid>/compression  what compression spilled, shrank, archived or summarised, with the originals
// Keys: j / → next request, k / ← previous, u / Escape back to the session (in lists j/k move between rows).
import { api } from "./api.js";
import { h, when } from "./dom.js";
import { requestView } from "./inspector_request.js";
import { chart, compressionView, requestHref, requestsTable, verdictBadge, fmt } from "./inspector_session.js";

const enc = encodeURIComponent;
// session id → {info, requests} as last loaded: j/k work at once and a request opens on one fetch
const known = new Map();
const sessionHref = (sid) => `#/inspector/${enc(sid)}`;
// "sid/index" → the request laid out (a promise): a past request never changes, so its neighbours are fetched
// ahead and j/k open them at once; the newest few are kept
const laidOut = new Map();

function layout(sid, index) {
  const key = `${sid}/${index}`;
  let p = laidOut.get(key);
  if (!p) {
    p = api(`/v1/sessions/${enc(sid)}/requests/${index}`);
    p.catch(() => laidOut.delete(key));
    laidOut.set(key, p);
    while (laidOut.size > 12) laidOut.delete(laidOut.keys().next().value);
  }
  return p;
}

/** Mount the view; returns its cleanup at once (loading goes on behind it and stops when cleaned up). */
export function mount(main, args, { go }) {
  const [sid, sub] = args;
  const ctl = new AbortController();
  const root = h("div.insp", { dataset: { state: "loading" } }, h("p.muted", "Loading…"));
  delete main.dataset.ready;
  main.append(root);
  const ctx = { root, go, signal: ctl.signal, sid, sub, nav: null };
  const ready = !sid ? "sessions" : sub === "compression" ? "compression" : sub ? `request-${sub}` : "session";
  const onKey = (ev) => keys(ev, ctx);
  document.addEventListener("keydown", onKey);
  let job;
  if (!sid) job = sessions(ctx);
  else if (sub === "compression") job = compression(ctx);
  else if (sub !== undefined && sub !== "") job = request(ctx, sub);
  else job = overview(ctx);
  job.then(() => {
    if (ctl.signal.aborted) return;
    root.dataset.state = "ready";
    main.dataset.ready = ready; // what benches and tests wait for: "request-<index>" once a request is shown
  }).catch((e) => {
    if (ctl.signal.aborted || e.name === "AbortError") return;
    show(ctx, h("p.error", e.status === 404 ? `Not found: ${e.message}` : `Could not load: ${e.message}`),
      sid ? h("p", h("a", { href: sid && sub ? sessionHref(sid) : "#/inspector" }, "← back")) : null);
    root.dataset.state = "error";
  });
  return () => {
    ctl.abort();
    delete main.dataset.ready;
    document.removeEventListener("keydown", onKey);
  };
}

function show(ctx, ...children) {
  ctx.root.replaceChildren();
  ctx.root.append(...children.flat().filter(Boolean));
}

const get = (ctx, path) => api(path, { signal: ctx.signal });

function crumbs(ctx, info, active) {
  const { sid } = ctx;
  const tab = (name, href, label) => h(`a.insp-tab${active === name ? ".active" : ""}`,
    { href, "aria-current": active === name ? "page" : null }, label);
  return h("nav.row.insp-crumbs", { "aria-label": "inspector" },
    h("a", { href: "#/inspector" }, "Sessions"), h("span.muted", "/"),
    h("strong.insp-title", { title: sid }, info?.title || sid),
    h("span.grow"),
    tab("requests", sessionHref(sid), "Requests"),
    tab("compression", `${sessionHref(sid)}/compression`, "Compression"),
  );
}

async function sessions(ctx) {
  const data = await get(ctx, "/v1/sessions?limit=200");
  const list = data.sessions || [];
  if (!list.length) {
    show(ctx, h("h2", "Inspector"),
      h("p.muted", "No sessions yet: start one in Chat, then see here what the model saw."));
    return;
  }
  const rows = list.map((s) => h("tr",
    h("td", h("a.insp-nav", { href: sessionHref(s.id) }, s.title || "untitled"), h("div.muted.insp-id", s.id)),
    h("td.insp-opt", when(s.created_at)),
    h("td.num", fmt(s.messages)),
    h("td", s.busy ? h("span.badge.warn", "working") : ""),
  ));
  show(ctx,
    h("h2", "Inspector"),
    h("p.muted", "Pick a session: each model request, what its prompt held and what the cache reused."),
    h("div.insp-scroll", h("table.insp-sessions",
      h("thead", h("tr", h("th", "session"), h("th.insp-opt", "created"), h("th.num", "messages"), h("th", ""))),
      h("tbody", rows),
    )),
  );
}

async function overview(ctx) {
  const [info, data] = await Promise.all([
    get(ctx, `/v1/sessions/${enc(ctx.sid)}`).catch(() => null),
    get(ctx, `/v1/sessions/${enc(ctx.sid)}/requests`),
  ]);
  const requests = data.requests || [];
  known.set(ctx.sid, { info, requests });
  show(ctx,
    crumbs(ctx, info, "requests"),
    requests.length ? chart(requests, { onPick: (i) => ctx.go("inspector", ctx.sid, String(i)) }) : null,
    requestsTable(ctx.sid, requests),
  );
}

async function compression(ctx) {
  const [info, data] = await Promise.all([
    get(ctx, `/v1/sessions/${enc(ctx.sid)}`).catch(() => null),
    get(ctx, `/v1/sessions/${enc(ctx.sid)}/compression`),
  ]);
  show(ctx, crumbs(ctx, info, "compression"), compressionView(ctx.sid, data));
}

/** The compact list beside an open request: every request with its verdict, the open one marked. */
function sideList(sid, requests, current) {
  const items = requests.map((r) => h("li",
    h(`a.insp-nav${r.index === current ? ".current" : ""}`,
      { href: requestHref(sid, r.index), "aria-current": r.index === current ? "page" : null },
      h("span.insp-side-no", `#${r.index}`),
      h("span.muted.insp-side-tok", `${fmt(r.prompt_tokens)} tok`),
      verdictBadge(r, { short: true })),
  ));
  return h("aside.insp-side-list", { "aria-label": "requests" }, h("ol", items));
}

function neighbours(requests, index) {
  const pos = requests.findIndex((r) => r.index === index);
  const at = (i) => (i >= 0 && i < requests.length ? requests[i].index : null);
  return pos < 0 ? { prev: null, next: null } : { prev: at(pos - 1), next: at(pos + 1) };
}

async function request(ctx, sub) {
  const index = Number(sub);
  if (!Number.isInteger(index) || index < 0) throw Object.assign(new Error(`no request "${sub}"`), { status: 404 });
  const base = `/v1/sessions/${enc(ctx.sid)}`;
  const lists = () => Promise.all([get(ctx, base).catch(() => null), get(ctx, `${base}/requests`)]);
  let seen = known.get(ctx.sid);
  ctx.nav = neighbours(seen?.requests || [], index);
  let data;
  if (seen && seen.requests.some((r) => r.index === index)) {
    data = await layout(ctx.sid, index); // the list is known: show first, refresh it after
  } else {
    const [[info, list], one] = await Promise.all([lists(), layout(ctx.sid, index)]);
    seen = { info, requests: list.requests || [] };
    known.set(ctx.sid, seen);
    data = one;
  }
  if (ctx.signal.aborted) return;
  const { node, reveal } = requestView(data);
  const nav = h("div.insp-nav-slot");
  show(ctx, crumbs(ctx, seen.info, null), nav, h("div.insp-layout", h("div.insp-side-slot"), node));
  const place = ({ info, requests }) => {
    ctx.nav = neighbours(requests, index);
    const href = (i) => (i === null ? null : requestHref(ctx.sid, i));
    ctx.root.querySelector(".insp-crumbs").replaceWith(crumbs(ctx, info, null));
    const pick = (i) => ctx.go("inspector", ctx.sid, String(i));
    nav.replaceChildren(chart(requests, { current: index, onPick: pick, compact: true }));
    ctx.root.querySelector(".insp-side-slot").replaceChildren(sideList(ctx.sid, requests, index));
    for (const [dir, label, key] of [["prev", "← previous", "k"], ["next", "next →", "j"]]) {
      const a = node.querySelector(`.insp-step.${dir}`);
      const to = href(ctx.nav[dir]);
      a.hidden = !to;
      if (to) a.href = to;
      a.title = `${label} (${key})`;
    }
    const current = ctx.root.querySelector(".insp-side-list a.current");
    if (current) current.scrollIntoView({ block: "nearest" });
  };
  place(seen);
  reveal("nearest");
  // a live session goes on: once the view is painted, the list is fetched again and placed again if it grew
  const last = (l) => JSON.stringify(l.requests.at(-1) || null) + l.requests.length + (l.info?.title || "");
  requestAnimationFrame(() => setTimeout(() => {
    if (ctx.signal.aborted) return;
    for (const i of [ctx.nav.next, ctx.nav.prev]) if (i !== null) layout(ctx.sid, i).catch(() => {});
    lists().then(([info, list]) => {
      const fresh = { info, requests: list.requests || [] };
      if (ctx.signal.aborted) return;
      known.set(ctx.sid, fresh);
      if (last(fresh) !== last(seen)) place(fresh);
    }).catch(() => {});
  }, 0));
}

function typing(ev) {
  const t = ev.target;
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return true;
  return Boolean(t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)));
}

function keys(ev, ctx) {
  if (typing(ev)) return;
  const down = ev.key === "j" || ev.key === "ArrowRight";
  const up = ev.key === "k" || ev.key === "ArrowLeft";
  if (ctx.nav) {
    const to = down ? ctx.nav.next : up ? ctx.nav.prev : null;
    if (to !== null && (down || up)) {
      ev.preventDefault();
      ctx.go("inspector", ctx.sid, String(to));
    } else if (ev.key === "u" || ev.key === "Escape") {
      ev.preventDefault();
      ctx.go("inspector", ctx.sid);
    }
    return;
  }
  if (ev.key !== "j" && ev.key !== "k") return;
  const links = [...ctx.root.querySelectorAll("a.insp-nav")];
  if (!links.length) return;
  ev.preventDefault();
  const at = links.indexOf(document.activeElement);
  const to = at < 0 ? 0 : Math.max(0, Math.min(links.length - 1, at + (ev.key === "j" ? 1 : -1)));
  links[to].focus();
}
