// The session's browser (computer use): the latest screenshot, its interactive elements numbered in boxes, with the
// page's title and address above it. Nothing shows until the session has used a browser.
//
// /browser/page is read every second while the view is open and the tab visible (every few seconds while the
// session has no browser; at once when a tool call ends), and the image is fetched again only when the record's
// `at` or `screen_at` changed. The image comes with the bearer header (an <img src> could not send it) and goes
// in as a data: URL, which the page's policy allows.
import { api, fetchBlob } from "./api.js";
import { h, when } from "./dom.js";

const SHOWN_MS = 1000;
const ABSENT_MS = 3000;

function path(sid, rest) {
  return `/v1/sessions/${encodeURIComponent(sid)}/browser/${rest}`;
}

function dataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

export class BrowserPanel {
  constructor(sid) {
    this.sid = sid;
    this.version = "";
    this.timer = 0;
    this.busy = false;
    this.closed = false;
    this.ctl = new AbortController();
    this.title = h("span.bp-title#browser-title");
    this.url = h("span.bp-url#browser-url");
    this.meta = h("span.bp-meta.small.muted#browser-meta");
    this.img = h("img.bp-img#browser-screen", { alt: "", decoding: "async" });
    this.big = h("img.bp-big", { alt: "" });
    this.dialog = h("dialog.bp-dialog", { "aria-label": "The browser's screenshot, full size" },
      h("form", { method: "dialog" }, h("button.small", { type: "submit" }, "Close")),
      this.big);
    this.dialog.addEventListener("click", (ev) => {
      if (ev.target === this.dialog) this.dialog.close(); // a click beside the image
    });
    const open = h("button.bp-open", { type: "button", title: "Show full size", on: { click: () => this.enlarge() } },
      this.img);
    this.el = h("section.browser-panel#browser-panel", { "aria-labelledby": "browser-heading", hidden: true },
      h("h2#browser-heading", "Browser"),
      h("p.bp-page", this.title, this.url, this.meta),
      open,
      this.dialog);
    this.onVisibility = () => (document.visibilityState === "visible" ? this.poll() : this.pause());
    document.addEventListener("visibilitychange", this.onVisibility);
  }

  start() {
    if (document.visibilityState === "visible") this.poll();
  }

  /** Read the record now (a tool call just ended: it may have been a browser action). */
  poke() {
    if (!this.closed && !this.busy && document.visibilityState === "visible") this.poll();
  }

  pause() {
    clearTimeout(this.timer);
    this.timer = 0;
  }

  close() {
    this.closed = true;
    this.pause();
    this.ctl.abort();
    document.removeEventListener("visibilitychange", this.onVisibility);
  }

  enlarge() {
    if (!this.img.src) return;
    this.big.src = this.img.src;
    this.big.alt = this.img.alt;
    this.dialog.showModal();
  }

  async poll() {
    this.pause();
    if (this.closed || this.busy) return;
    this.busy = true;
    let next = SHOWN_MS;
    try {
      const page = await api(path(this.sid, "page"), { signal: this.ctl.signal });
      if (this.closed) return;
      await this.show(page);
    } catch (e) {
      if (this.closed || e.name === "AbortError") return;
      if (e.status === 401) return; // the page asks for the token; this view goes
      if (e.status === 404) {
        this.el.hidden = true;
        this.version = "";
        next = ABSENT_MS;
      } // else (503: being written, a network blip): keep what is shown, ask again
    } finally {
      this.busy = false;
    }
    if (!this.closed && document.visibilityState === "visible") this.timer = setTimeout(() => this.poll(), next);
  }

  async show(page) {
    const title = page.title || "(untitled page)";
    this.title.textContent = title;
    this.url.textContent = page.url || "";
    this.url.title = page.url || "";
    const count = Array.isArray(page.elements) ? page.elements.length : 0;
    this.meta.textContent = `${count} numbered element${count === 1 ? "" : "s"} · ${when(page.at)}`;
    const version = `${page.at}/${page.screen_at}`;
    if (version === this.version) return;
    if (page.screen_at === null || page.screen_at === undefined) {
      this.version = version;
      this.img.removeAttribute("src");
      this.img.hidden = true;
    } else {
      const blob = await fetchBlob(path(this.sid, "screen"), { signal: this.ctl.signal });
      const src = await dataUrl(blob);
      if (this.closed) return;
      this.img.src = src;
      await this.img.decode().catch(() => {});
      this.img.hidden = false;
      this.version = version;
    }
    this.img.alt = `The browser's screen: ${title} (${page.url || "no address"}), ${count} interactive elements numbered`;
    this.el.dataset.at = String(page.at);
    this.el.hidden = false;
  }
}
