// The shell: token, hash router (#/view/arg/arg), one view mounted at a time. Views live in their own modules
// and export `mount(main, args, ctx)`, returning an optional cleanup function.
import { adoptToken, api, setToken } from "./api.js";
import { clear, h, toast } from "./dom.js";

const VIEWS = {
  chat: () => import("./chat.js"),
  inspector: () => import("./inspector.js"),
  memory: () => import("./memory.js"),
  knowledge: () => import("./knowledge.js"),
  tools: () => import("./tools.js"),
  settings: () => import("./settings.js"),
};

let cleanup = null;
let generation = 0;

function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = VIEWS[parts[0]] ? parts[0] : "chat";
  return { view, args: VIEWS[parts[0]] ? parts.slice(1) : [] };
}

export function go(view, ...args) {
  location.hash = "#/" + [view, ...args].map(encodeURIComponent).join("/");
}

async function route() {
  const { view, args } = parseHash();
  const mine = ++generation;
  if (cleanup) {
    try { cleanup(); } catch (e) { console.error(e); }
    cleanup = null;
  }
  for (const a of document.querySelectorAll("#nav a")) {
    a.toggleAttribute("aria-current", a.dataset.view === view);
  }
  const main = clear(document.getElementById("main"));
  main.dataset.view = view;
  try {
    const mod = await VIEWS[view]();
    if (mine !== generation) return;
    cleanup = (await mod.mount(main, args, { go })) || null;
  } catch (e) {
    if (mine !== generation) return;
    main.append(h("p.error", `This page failed to load: ${e.message}`));
    console.error(e);
  }
}

function askToken() {
  const main = clear(document.getElementById("main"));
  const input = h("input#token", { type: "password", autocomplete: "off", "aria-label": "API token" });
  const form = h("form.login", {
    on: {
      submit: (ev) => {
        ev.preventDefault();
        setToken(input.value.trim());
        boot();
      },
    },
  },
    h("h1", "This server needs its API token"),
    h("p", "Paste the value of KAIROS_API_TOKEN (it stays in this tab only), or open the page with `kairos ui`."),
    input,
    h("button", { type: "submit" }, "Connect"),
  );
  main.append(form);
  input.focus();
}

window.addEventListener("kairos:unauthorized", () => {
  if (!document.querySelector("form.login")) {
    setToken(null);
    askToken();
  }
});
window.addEventListener("hashchange", () => (/(?:^#|&)token=/.test(location.hash) ? boot() : route()));
window.addEventListener("unhandledrejection", (ev) => toast(String(ev.reason?.message || ev.reason)));

/** Start: a server that needs a token refuses /v1/sessions without one (then the page asks for it). */
async function boot() {
  adoptToken();
  try {
    const health = await api("/v1/health");
    document.getElementById("conn").textContent = health.accepting ? "" : "the server is not accepting events";
    await api("/v1/sessions?limit=1");
  } catch (e) {
    if (e.status !== 401) toast(`cannot reach the server: ${e.message}`);
    return;
  }
  route();
}

boot();
