// Tools and trust: the agent's MCP servers, what each lists and whether the user approved it. A server's
// tool descriptions reach the model with the user's authority, so a listing is offered only once approved,
// and a listing that changed since (added, removed or reworded tools) is shown as a diff before the user
// approves it again.
import { api } from "./api.js";
import { append, clear, h, toast } from "./dom.js";
import { badge, empty, failure, header, loading, plural, ready } from "./panels.js";

const APPROVAL = {
  approved: ["approved", "ok"],
  changed: ["changed since approval", "warn"],
  needs_approval: ["not approved", "bad"],
};
const STATES = { up: "ok", down: "bad", closed: "bad" };
const COLUMNS = ["Tool", "Offered", "Effect", "Description"];

export function mount(main) {
  const ctl = new AbortController();
  const signal = ctl.signal;
  const list = h("div.mcp-list");
  const refresh = h("button", { type: "button", on: { click: () => load() } }, "Refresh");
  main.append(
    header("Tools and trust", "The agent's MCP servers. A server's tools reach the agent only once you approve "
      + "the listing it offers: their names, descriptions and arguments are what the model reads. When a "
      + "listing changes after your approval, its new or changed tools are withheld until you approve again."),
    h("div.row.toolbar", refresh),
    list,
  );

  async function load() {
    clear(list).append(loading("MCP servers"));
    try {
      const { servers } = await api("/v1/mcp/servers", { signal });
      clear(list);
      if (!servers.length) {
        list.append(empty("No MCP servers in this server.",
          "Add them under [[mcp.servers]] in the settings (or with `kairos mcp add`), then restart `kairos serve`."));
      }
      append(list, servers.map(card));
    } catch (e) {
      if (signal.aborted) return;
      clear(list).append(failure(e, "MCP servers", () => load()));
    }
  }

  /** Approve or revoke, then show the server as the reply has it (the approval applies from the next turn). */
  async function act(s, action, section) {
    for (const b of section.querySelectorAll("button")) b.disabled = true;
    try {
      // an approval names the listing the user read: the server refuses it (409) if it listed anew since
      const query = action === "approve" ? `?digest=${encodeURIComponent(s.digest)}` : "";
      const path = `/v1/mcp/servers/${encodeURIComponent(s.name)}/${action}${query}`;
      const rec = await api(path, { method: "POST", signal });
      const fresh = card(rec);
      section.replaceWith(fresh);
      fresh.querySelector("h2").focus();
      const offered = rec.tools.filter((t) => t.offered).length;
      toast(action === "approve"
        ? `${s.name} approved: ${plural(offered, "tool")} offered from the agent's next turn.`
        : `${s.name}: approval withdrawn; its tools are withheld from the next turn.`, "info");
    } catch (e) {
      if (signal.aborted) return;
      for (const b of section.querySelectorAll("button")) b.disabled = false;
      toast(`${s.name}: ${action} failed: ${e.message}`);
      if (e.status === 409) load();  // show the listing as it is now
    }
  }

  function card(s) {
    const id = `mcp-${s.name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const [label, kind] = APPROVAL[s.approval] || ["not listed yet", ""];
    const section = h("section.card.mcp-server", { "aria-labelledby": id, dataset: { name: s.name } });
    const offered = s.tools.filter((t) => t.offered).length;
    append(section, [
      h("div.row.mcp-head",
        h(`h2#${id}`, { tabindex: "-1" }, s.name),
        badge(s.state, STATES[s.state] || ""),
        h("span.badge.approval" + (kind ? `.${kind}` : ""), label),
        h("span.muted", `${plural(s.tools.length, "tool")} listed, ${offered} offered`),
      ),
      h("p.mcp-target", h("span.muted", "Runs: "), h("code", s.target)),
      s.error ? h("p.error", s.error) : null,
      h("p.muted.small", s.summary),
    ]);
    if (s.approval !== "approved" && s.approval) section.append(review(s, section));
    const buttons = h("div.row.mcp-actions");
    if (s.approval && s.approval !== "approved") {
      buttons.append(h("button.primary.approve", {
        type: "button", disabled: !s.tools.length, "aria-describedby": `${id}-review`,
        on: { click: () => act(s, "approve", section) },
      }, s.approval === "changed" ? "Approve the new listing" : "Approve this listing"));
    }
    if (s.approval === "approved" || s.approval === "changed") {
      buttons.append(h("button.danger.revoke", {
        type: "button", on: { click: () => act(s, "revoke", section) },
      }, "Revoke approval"));
    }
    if (buttons.childElementCount) section.append(buttons);
    section.append(toolsTable(s));
    return section;
  }

  delete main.dataset.ready;
  load().then(() => ready(main, "tools", signal));
  return () => ctl.abort();
}

/** What the user approves: on a first approval the whole listing, after a change the tools that differ. */
function review(s, section) {
  const id = section.getAttribute("aria-labelledby");
  const box = h(`div.mcp-review#${id}-review`);
  if (s.approval === "needs_approval") {
    box.append(h("p", h("strong", "Not approved yet: "),
      `none of its tools are offered to the agent. Read the ${plural(s.tools.length, "tool")} below `
      + "(what the model will read) before approving."));
    return box;
  }
  const kept = s.tools.filter((t) => t.offered).length;
  box.append(h("p", h("strong", "The listing changed since you approved it. "),
    "What is new or changed is withheld until you approve the new listing"
    + (kept ? `; the ${plural(kept, "tool")} approved as they are still offered.`
      : "; until then no tool is offered.")));
  if (!s.changes) {
    box.append(h("p.muted", "The approved listing was not kept, so the change cannot be shown: read the tools below."));
    return box;
  }
  const { added, removed, changed } = s.changes;
  const groups = [["Added", added, "add"], ["Changed", changed, "change"], ["Removed", removed, "del"]];
  const lists = h("div.row.mcp-changes");
  for (const [title, names, cls] of groups) {
    if (!names.length) continue;
    lists.append(h(`div.mcp-change.${cls}`, h("h3", `${title} (${names.length})`),
      h("ul", names.map((n) => h("li", h("code", n))))));
  }
  if (lists.childElementCount) box.append(lists);
  else box.append(h("p.muted", "No tool differs: the server's command or URL changed since the approval."));
  if (s.diff.length) {
    box.append(h("details.mcp-diff", { open: true },
      h("summary", "The difference, line by line (approved → now)"),
      h("pre.diff", { tabindex: "0", "aria-label": "Listing diff" }, s.diff.map(diffLine)),
    ));
  }
  return box;
}

function diffLine(line) {
  let cls = "ctx";
  if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
  else if (line.startsWith("@@")) cls = "hunk";
  else if (line.startsWith("+")) cls = "add";
  else if (line.startsWith("-")) cls = "del";
  return h(`span.d-${cls}`, line + "\n");
}

function toolsTable(s) {
  if (!s.tools.length) {
    return h("p.muted", s.state === "up" ? "It lists no tools." : "No listing yet: the server has not answered.");
  }
  return h("details.mcp-tools", { open: s.approval !== "approved" },
    h("summary", `Tools (${s.tools.length})`),
    h("div.table-wrap", h("table.stack",
      h("thead", h("tr", COLUMNS.map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", s.tools.map((t) => h("tr", { dataset: { tool: t.name } },
        h("td", h("code", t.name)),
        h("td", { "data-label": "Offered" }, t.offered ? badge("offered", "ok") : badge("withheld", "warn")),
        h("td", { "data-label": "Effect" }, t.read_only ? badge("read-only") : badge("may change things", "warn")),
        h("td.mcp-desc", t.description || h("span.muted", "(no description)")),
      ))),
    )),
  );
}
