// kairos: the page's interactive elements in document order, with the text between them (structured Set-of-Mark).
// Run by Playwright as `page.evaluate(source)`; returns {items, next}. Numbers are kept on the elements
// (data-kairos-index) so an element keeps its number while the page lives: the model's references stay valid
// and a second look shows only what changed. A new document starts again at 1.
(() => {
  const ATTR = "data-kairos-index";
  const ROLES = new Set(["button", "link", "checkbox", "radio", "tab", "menuitem", "menuitemcheckbox",
    "menuitemradio", "option", "combobox", "textbox", "searchbox", "switch", "slider", "spinbutton", "treeitem",
    "listbox"]);
  const TAGS = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY", "DETAILS", "OPTION"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "SVG"]);
  const clean = (s, n) => {
    s = (s || "").replace(/\s+/g, " ").trim();
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  };
  const shown = (el) => {
    const st = getComputedStyle(el);
    if (st.display === "none" || st.visibility === "hidden" || st.visibility === "collapse") return false;
    if (parseFloat(st.opacity) === 0 && el.tagName !== "INPUT") return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const interactive = (el) => {
    if (el.getAttribute("aria-hidden") === "true") return false;
    const own = el.getAttribute("role");
    if ((own === "presentation" || own === "none") && el.parentElement && interactive(el.parentElement)) return false;
    if (TAGS.has(el.tagName)) {
      if (el.tagName === "A") return el.hasAttribute("href") || el.hasAttribute("onclick");
      if (el.tagName === "INPUT") return el.type !== "hidden";
      if (el.tagName === "OPTION") return false;  // listed with their select
      return true;
    }
    const role = el.getAttribute("role");
    if (role && ROLES.has(role)) return true;
    if (el.isContentEditable && !el.parentElement?.isContentEditable) return true;
    if (el.hasAttribute("onclick")) return true;
    const tab = el.getAttribute("tabindex");
    if (tab !== null && parseInt(tab, 10) >= 0) return true;
    // a region the page made clickable (cursor: pointer) counts once, at its outermost element
    if (getComputedStyle(el).cursor === "pointer") {
      const up = el.parentElement;
      return !up || getComputedStyle(up).cursor !== "pointer";
    }
    return false;
  };
  const byId = (id) => (id ? document.getElementById(id) : null);
  const nameOf = (el) => {
    const aria = el.getAttribute("aria-label");
    if (aria) return aria;
    const by = el.getAttribute("aria-labelledby");
    if (by) return by.split(/\s+/).map((i) => byId(i)?.innerText || "").join(" ");
    if (el.labels && el.labels.length) return Array.from(el.labels).map((l) => l.innerText).join(" ");
    if (el.tagName === "INPUT" && ["button", "submit", "reset"].includes(el.type)) return el.value;
    if (el.tagName === "INPUT" || el.tagName === "TEXTAREA") return el.placeholder || el.title || el.name || "";
    if (el.tagName === "SELECT") return el.title || el.name || "";
    if (el.tagName === "IMG") return el.alt;
    return el.innerText || el.title || el.getAttribute("alt") || el.value || "";
  };
  const roleOf = (el) => {
    const role = el.getAttribute("role");
    if (role) return role;
    switch (el.tagName) {
      case "A": return "link";
      case "BUTTON": case "SUMMARY": return "button";
      case "SELECT": return "combobox";
      case "TEXTAREA": return "textbox";
      case "INPUT": {
        const t = el.type;
        if (["button", "submit", "reset", "image"].includes(t)) return "button";
        if (t === "checkbox" || t === "radio") return t;
        if (t === "range") return "slider";
        if (t === "number") return "spinbutton";
        if (t === "search") return "searchbox";
        return t === "text" || t === "email" || t === "password" || t === "tel" || t === "url" ? "textbox" : t;
      }
    }
    return el.isContentEditable ? "textbox" : "clickable";
  };
  const blocks = new Map();
  const blockOf = (el) => {
    let b = el;
    while (b.parentElement && getComputedStyle(b).display.startsWith("inline")) b = b.parentElement;
    if (!blocks.has(b)) blocks.set(b, blocks.size + 1);
    return blocks.get(b);
  };
  let next = Math.max(window.__kairosNext || 1, 1);
  const items = [];
  const vw = window.innerWidth, vh = window.innerHeight;
  const visit = (node, inside) => {
    if (node.nodeType === Node.TEXT_NODE) {
      if (inside) return;
      const text = clean(node.textContent, 200);
      if (!text || !node.parentElement || !shown(node.parentElement)) return;
      const block = blockOf(node.parentElement);
      const last = items[items.length - 1];
      if (last && last.kind === "text" && last.block === block && last.text.length < 300) last.text += " " + text;
      else items.push({ kind: "text", text, block });  // inline pieces of one block are one line
      return;
    }
    if (node.nodeType !== Node.ELEMENT_NODE || SKIP.has(node.tagName)) return;
    const el = node;
    if (!inside && interactive(el) && shown(el)) {
      let index = parseInt(el.getAttribute(ATTR) || "0", 10);
      if (!index) { index = next++; el.setAttribute(ATTR, String(index)); }
      const r = el.getBoundingClientRect();
      const item = {
        kind: "el", index, tag: el.tagName.toLowerCase(), role: roleOf(el), name: clean(nameOf(el), 80),
        box: [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)],
        inView: r.bottom > 0 && r.right > 0 && r.top < vh && r.left < vw,
        disabled: !!el.disabled || el.getAttribute("aria-disabled") === "true",
      };
      if (el.tagName === "INPUT" && (el.type === "checkbox" || el.type === "radio")) item.checked = el.checked;
      else if (el.getAttribute("aria-checked")) item.checked = el.getAttribute("aria-checked") === "true";
      else if (el.tagName === "INPUT" || el.tagName === "TEXTAREA") item.value = el.type === "password" ? "•".repeat(el.value.length) : clean(el.value, 120);
      else if (el.isContentEditable) item.value = clean(el.innerText, 120);
      if (el.tagName === "SELECT") {
        item.value = clean(el.selectedOptions[0]?.text || "", 80);
        item.options = Array.from(el.options).slice(0, 20).map((o) => clean(o.text, 40));
      }
      const exp = el.getAttribute("aria-expanded");
      if (exp !== null) item.expanded = exp === "true";
      if (document.activeElement === el) item.focused = true;
      items.push(item);
      // a control's own text is its name; a clickable region may hold more controls
      const holds = !["A", "BUTTON", "SELECT", "TEXTAREA", "INPUT", "OPTION"].includes(el.tagName);
      if (!holds) return;
      for (const child of el.childNodes) visit(child, !child.nodeType || child.nodeType === Node.TEXT_NODE || !interactive(child));
      return;
    }
    if (el.shadowRoot) for (const child of el.shadowRoot.childNodes) visit(child, inside);
    for (const child of el.childNodes) visit(child, inside);
  };
  if (document.body) visit(document.body, false);
  window.__kairosNext = next;
  for (const it of items) delete it.block;
  if (!window.__kairosDoc) window.__kairosDoc = Math.random().toString(36).slice(2);
  return { items, next, doc: window.__kairosDoc };
})()
