// Tiny DOM helpers: every text goes in as text (never innerHTML), so model output and tool results cannot inject markup.

/** h("div.cls#id", {attrs, on: {click}}, ...children) → an element. Children: strings, nodes, arrays, null. */
export function h(spec, attrs, ...children) {
  const [tag, ...rest] = spec.split(/(?=[.#])/);
  const el = document.createElement(tag || "div");
  for (const part of rest) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "class") el.className = v;
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** A number of seconds as "0.31 s" / "12 ms". */
export function secs(s) {
  if (s === null || s === undefined) return "–";
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

export function when(at) {
  return at ? new Date(at * 1000).toLocaleTimeString() : "";
}

/** Show a short message at the bottom of the page (errors the user should see). */
export function toast(message, kind = "error") {
  const box = document.getElementById("toast");
  const item = h(`div.toast.${kind}`, message);
  box.append(item);
  setTimeout(() => item.remove(), 6000);
}
