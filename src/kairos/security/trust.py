"""Workspace trust: which workspaces the user vouched for with ``kairos trust``.

A workspace is often someone else's code (a cloned repository). Until the user trusts it, its
``kairos.toml`` may only change harmless behaviour (settings that redirect the model endpoint or
credentials, or widen trust and approval, are ignored with a notice; see :mod:`kairos.config`)
and the skills inside it need approval like any third-party skill.

Trust is recorded in ``<user config dir>/trusted-workspaces.json`` as resolved paths, never inside
a workspace: a repository cannot declare itself trusted. Trust is exact, not inherited: trusting
``~/code`` does not trust a repository cloned into ``~/code/x`` later.
"""

from __future__ import annotations

import copy
import math
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kairos.paths import is_inside, user_config_dir
from kairos.security.review import JsonFile
from kairos.storage.config import mask_url
from kairos.tools.toolsets.config import NotifyChannel

TRUST_FILE = "trusted-workspaces.json"


@dataclass(frozen=True, slots=True)
class TrustedWorkspace:
    """One trusted workspace."""

    path: Path
    trusted_at: str = ""


def workspace_key(workspace: Path) -> str:
    """The workspace as recorded: absolute, every link followed (a link to it is the same place)."""
    return os.path.realpath(workspace.expanduser())


class TrustStore:
    """The trusted workspaces: ``{"/resolved/path": {"trusted_at": ...}}`` in a JSON file.

    Lookups cost one ``stat`` while the file is unchanged. A file that cannot be read trusts
    nothing (fail closed); :attr:`problem` says why.

    Example::

        store = TrustStore()            # <user config dir>/trusted-workspaces.json
        store.trust(Path("."))
        store.is_trusted(Path("."))     # True
    """

    def __init__(self, path: Path | None = None) -> None:
        """Open the store (the file is read on use, not here).

        Args:
            path: the JSON file; default ``<user config dir>/trusted-workspaces.json``.
        """
        self._file = JsonFile(path or user_config_dir() / TRUST_FILE, "trusted workspaces")

    @property
    def path(self) -> Path:
        """The JSON file trust is kept in."""
        return self._file.path

    @property
    def problem(self) -> str | None:
        """Why the file could not be used at the last read (then nothing is trusted), or None."""
        return self._file.problem

    def is_trusted(self, workspace: Path) -> bool:
        """Whether the user trusted exactly this workspace (after following links)."""
        return workspace_key(workspace) in self._file.read()

    def workspaces(self) -> list[TrustedWorkspace]:
        """Every trusted workspace, sorted by path."""
        out = []
        for key, rec in sorted(self._file.read().items()):
            when = rec.get("trusted_at", "") if isinstance(rec, dict) else ""
            out.append(TrustedWorkspace(Path(key), str(when)))
        return out

    def trust(self, workspace: Path, now: datetime | None = None) -> Path:
        """Record ``workspace`` as trusted; returns the path as recorded.

        Raises:
            OSError: the file cannot be written.
        """
        key = workspace_key(workspace)
        data = dict(self._file.read())
        data[key] = {"trusted_at": (now or datetime.now(UTC)).isoformat(timespec="seconds")}
        self._file.write(data)
        return Path(key)

    def revoke(self, workspace: Path) -> bool:
        """Withdraw trust; False when the workspace was not trusted.

        A path that no longer exists is matched as written too, so a deleted workspace can be
        removed from the list.

        Raises:
            OSError: the file cannot be written.
        """
        data = dict(self._file.read())
        found = False
        for key in {workspace_key(workspace), os.path.abspath(workspace.expanduser())}:
            found = data.pop(key, None) is not None or found
        if found:
            self._file.write(data)
        return found


# ---- what an untrusted workspace's kairos.toml may not do -----------------------------------

BUNDLED_MODELS = ("local", "local-small")
_APPROVER_RANK = {"allow": 0, "interactive": 1, "auto": 2, "deny": 3}
"""Looser to stricter: ``interactive`` reads an answer even from a pipe, ``auto`` denies there."""
_ADDITIVE = ("secrets", "confirm_tools", "external_tools")
"""``[defences]`` lists that add protection: a workspace's entries are added, never a replacement."""
_WIDENING_SWITCHES = ("trust_workspace", "trust_builtin", "entry_points")
"""``[skills]`` switches whose ``true`` trusts or offers more skills."""
_ENDPOINT = "it decides where your requests and API key go"


def model_spec_problem(spec: str, workspace: Path) -> str | None:
    """Why an untrusted workspace may not choose the model ``spec``, or None if it may.

    Bundled models and ``.gguf`` files inside the workspace are fine; a remote model
    (``openai:``, ``anthropic:``), a file outside the workspace or anything unknown is not.
    """
    if spec in BUNDLED_MODELS:
        return None
    if spec.startswith(("openai:", "anthropic:")):
        return "a remote model: your conversation and API key would go to it"
    if spec.endswith(".gguf"):
        p = Path(spec).expanduser()
        if is_inside(Path(os.path.realpath(p if p.is_absolute() else workspace / p)), workspace):
            return None
        return "a model file outside the workspace"
    return "not a bundled model or a .gguf file inside the workspace"


def restrict_untrusted(
    data: Mapping[str, Any], baseline: Mapping[str, Any], workspace: Path, path: Path
) -> tuple[dict[str, Any], list[str]]:
    """Drop what an untrusted workspace's ``kairos.toml`` may not set; say what was dropped.

    An untrusted workspace may change harmless behaviour and make things safer. Anything that
    redirects the model endpoint or credentials, speaks with the user's authority or widens
    trust or approval is removed (see :mod:`kairos.config` for the list).

    Args:
        data: the workspace file's table, already validated.
        baseline: the settings without the workspace (defaults and user config), as a dict.
        workspace: the workspace, resolved.
        path: the workspace file, for the notices.

    Returns:
        The table to use, and one notice per ignored setting plus how to trust the workspace
        (no notices when nothing was ignored).
    """
    out: dict[str, Any] = copy.deepcopy(dict(data))
    ignored: list[tuple[str, Any, str]] = []

    def drop(table: dict[str, Any], key: str, name: str, why: str) -> None:
        ignored.append((name, table.pop(key), why))

    if "base_url" in out:
        drop(out, "base_url", "base_url", _ENDPOINT)
    if "remote" in out:
        drop(out, "remote", "[remote]", "it configures how the model endpoint is reached")
    if "instructions" in out:
        drop(out, "instructions", "instructions", "it would be placed in the system prompt with your authority")
    if isinstance(out.get("model"), str) and (why := model_spec_problem(out["model"], workspace)):
        drop(out, "model", "model", why)
    compression = out.get("compression")
    summarizer = compression.get("summarizer") if isinstance(compression, dict) else None
    why = model_spec_problem(summarizer, workspace) if isinstance(summarizer, str) else None
    if isinstance(compression, dict) and why:
        drop(compression, "summarizer", "compression.summarizer", why)
    fast_slow = out.get("fast_slow")
    background = fast_slow.get("background") if isinstance(fast_slow, dict) else None
    why = model_spec_problem(background, workspace) if isinstance(background, str) else None
    if isinstance(fast_slow, dict) and why:
        drop(fast_slow, "background", "fast_slow.background", why)
    defences = out.get("defences")
    if isinstance(defences, dict):
        _restrict_defences(defences, baseline["defences"], ignored)
    skills = out.get("skills")
    if isinstance(skills, dict):
        _restrict_skills(skills, baseline["skills"], workspace, ignored)
    sandbox = out.get("sandbox")
    if isinstance(sandbox, dict):
        _restrict_sandbox(sandbox, baseline["sandbox"], ignored)
    permissions = out.get("permissions")
    if isinstance(permissions, dict):
        _restrict_permissions(permissions, baseline["permissions"], ignored)
    runtime = out.get("runtime")
    if isinstance(runtime, dict):
        if "mail" in runtime:
            drop(runtime, "mail", "runtime.mail", "it names a mail server and the variable that holds its password")
        if "handlers" in runtime:
            drop(runtime, "handlers", "runtime.handlers", "its instructions would reach the agent with your authority")
        classifier = runtime.get("classifier")
        if isinstance(classifier, str) and (why := model_spec_problem(classifier, workspace)):
            drop(runtime, "classifier", "runtime.classifier", why)
        if "mail" in runtime.get("toolsets", []):  # lossless: a mailbox in the user config brings the tools back
            runtime["toolsets"] = [t for t in runtime["toolsets"] if t != "mail"]
    review = out.get("review")
    if isinstance(review, dict):
        _restrict_review(review, baseline["review"], workspace, ignored)
    _restrict_toolsets(out, baseline, ignored)
    memory = out.get("memory")
    if isinstance(memory, dict) and "user" in memory:
        drop(memory, "user", "memory.user", "it would read and write another user's memories")
    if isinstance(memory, dict) and memory.get("scrub_timeout_s", math.inf) < baseline["memory"]["scrub_timeout_s"]:
        drop(memory, "scrub_timeout_s", "memory.scrub_timeout_s", "it would look for less personal data")
    local = out.get("local")
    if isinstance(local, dict) and "prefix_cache_mb" in local:
        drop(local, "prefix_cache_mb", "local.prefix_cache_mb", "it sizes a cache every workspace shares")
    if "storage" in out:  # shown masked: a URL may carry a password
        ignored.append(("[storage]", _masked_storage(out.pop("storage")), _STORAGE))
    browser = out.get("browser")
    if isinstance(browser, dict):
        if "executable" in browser:
            drop(browser, "executable", "browser.executable", "it names a program kairos would start")
        if browser.get("allow_hosts"):
            drop(browser, "allow_hosts", "browser.allow_hosts", "it would let the browser reach more hosts")
        if browser.get("confirm_irreversible") is False:
            drop(
                browser,
                "confirm_irreversible",
                "browser.confirm_irreversible",
                "it would click irreversible controls without asking",
            )
    mcp = out.get("mcp")
    if isinstance(mcp, dict) and mcp.get("servers"):
        drop(mcp, "servers", "mcp.servers", "MCP servers would start programs or connect to servers")
    if not ignored:
        return out, []
    notices = [f"{path}: ignored {name} = {_show(value)}: {why}" for name, value, why in ignored]
    notices.append(
        f"the workspace {workspace} is not trusted, so its {path.name} cannot change these settings; "
        f"if you trust its content, run: kairos trust {shlex.quote(str(workspace))}"
    )
    return out, notices


def _restrict_review(
    table: dict[str, Any], base: Mapping[str, Any], workspace: Path, ignored: list[tuple[str, Any, str]]
) -> None:
    """Review may be made stricter, never switched off, loosened or pointed at a remote model."""
    found = table.get("sidecar")
    side: dict[str, Any] = found if isinstance(found, dict) else {}
    for tab, bas, prefix in ((table, base, "review."), (side, base["sidecar"], "review.sidecar.")):
        for key in ("enabled", "confirm_irreversible", "confirm_dangerous"):
            if tab.get(key) is False and bas.get(key):
                ignored.append((prefix + key, tab.pop(key), "a workspace cannot switch off a check your config has on"))
        if isinstance(tab.get("model"), str) and (why := model_spec_problem(tab["model"], workspace)):
            ignored.append((prefix + "model", tab.pop("model"), why))
    if table.get("mode") == "replace" and base["mode"] != "replace":
        ignored.append(("review.mode", table.pop("mode"), "it would let the reviewer approve instead of you"))
    if "confirm_ttl_s" in table and table["confirm_ttl_s"] > base["confirm_ttl_s"]:
        ignored.append(("review.confirm_ttl_s", table.pop("confirm_ttl_s"), "a workspace may only shorten it"))
    if "tools" in table:
        table["tools"] = [*base["tools"], *(g for g in table["tools"] if g not in base["tools"])]
    if "max_rejections" in side and side["max_rejections"] > base["sidecar"]["max_rejections"]:
        ignored.append(("review.sidecar.max_rejections", side.pop("max_rejections"), "a workspace may only lower it"))
    if "tools" in side and not set(base["sidecar"]["tools"]) <= set(side["tools"]):
        ignored.append(("review.sidecar.tools", side.pop("tools"), "it would classify fewer tools"))
    if side.get("skip_read_only") is True and not base["sidecar"]["skip_read_only"]:
        ignored.append(("review.sidecar.skip_read_only", side.pop("skip_read_only"), "it would classify fewer tools"))


def _restrict_toolsets(out: dict[str, Any], baseline: Mapping[str, Any], ignored: list[tuple[str, Any, str]]) -> None:
    """Built-in tools the user left out, ``[tools.web_search]`` endpoint and key, new ``[[notify.channels]]``."""
    tools = out.get("tools") or {}
    builtins = tools.get("builtins")
    if builtins is not None and not set(builtins) <= set(baseline["tools"]["builtins"]):
        ignored.append(("tools.builtins", tools.pop("builtins"), "it gives back built-in tools your config left out"))
    search = tools.get("web_search")
    if isinstance(search, dict):
        for key in ("url", "api_key_env"):
            if key in search:
                why = _ENDPOINT if key == "url" else "it picks which secret is sent to the search endpoint"
                ignored.append((f"tools.web_search.{key}", search.pop(key), why))
    notify = out.get("notify")
    if isinstance(notify, dict) and "channels" in notify:
        known = [NotifyChannel.model_validate(c).model_dump() for c in baseline.get("notify", {}).get("channels", ())]
        if any(NotifyChannel.model_validate(c).model_dump() not in known for c in notify["channels"]):
            why = "it adds notification channels: where messages (and the session's data) are sent"
            ignored.append(("notify.channels", notify.pop("channels"), why))


def _restrict_defences(table: dict[str, Any], base: Mapping[str, Any], ignored: list[tuple[str, Any, str]]) -> None:
    approver = table.get("approver")
    if approver is not None and _APPROVER_RANK[approver] < _APPROVER_RANK[base["approver"]]:
        why = f"it approves more than {base['approver']!r} does (only a stricter approver is taken)"
        ignored.append(("defences.approver", table.pop("approver"), why))
    exempt = table.get("exempt_tools")
    if exempt is not None and not set(exempt) <= set(base["exempt_tools"]):
        ignored.append(("defences.exempt_tools", table.pop("exempt_tools"), "it would let tools skip confirmation"))
    if table.get("confirm_side_effects") is False and base["confirm_side_effects"]:
        why = "your config asks before side effects; a workspace cannot turn that off"
        ignored.append(("defences.confirm_side_effects", table.pop("confirm_side_effects"), why))
    for key in _ADDITIVE:
        if key in table:
            table[key] = [*base[key], *(v for v in table[key] if v not in base[key])]


_MODE_RANK = {"off": 0, "ask": 1, "bwrap": 2}
_NETWORK_RANK = {"allow": 0, "ask": 1, "deny": 2}
_LIMITS = ("cpu_s", "memory_mb", "max_processes", "max_file_mb")


def _restrict_sandbox(table: dict[str, Any], base: Mapping[str, Any], ignored: list[tuple[str, Any, str]]) -> None:
    """Only a stricter sandbox: no weaker mode or network policy, no other program, no higher limit, no paths."""
    if "mode" in table and _MODE_RANK[table["mode"]] < _MODE_RANK[base["mode"]]:
        ignored.append(("sandbox.mode", table.pop("mode"), "it would let commands run outside the sandbox"))
    if "network" in table and _NETWORK_RANK[table["network"]] < _NETWORK_RANK[base["network"]]:
        ignored.append(("sandbox.network", table.pop("network"), "it would give commands the network"))
    if "bwrap" in table and table["bwrap"] != base["bwrap"]:
        ignored.append(("sandbox.bwrap", table.pop("bwrap"), "it names the program that confines commands"))
    for key in _LIMITS:
        if key in table and table[key] > base[key]:
            ignored.append((f"sandbox.{key}", table.pop(key), "a workspace may only lower the sandbox's limits"))
    for key in ("read_only_paths", "writable_paths"):
        if table.get(key):
            ignored.append((f"sandbox.{key}", table.pop(key), "it would show the sandbox more of your files"))


def _restrict_permissions(table: dict[str, Any], base: Mapping[str, Any], ignored: list[tuple[str, Any, str]]) -> None:
    """Deny and ask rules are added to the user's; allow rules and a looser ``dangerous`` are dropped."""
    if "dangerous" in table and _NETWORK_RANK[table["dangerous"]] < _NETWORK_RANK[base["dangerous"]]:
        ignored.append(
            ("permissions.dangerous", table.pop("dangerous"), "it would stop asking about dangerous commands")
        )
    rules = table.get("rules")
    if rules is None:
        return
    allows = [r for r in rules if r.get("action") == "allow"]
    if allows:
        ignored.append(("permissions.rules (allow)", allows, "a workspace may add deny and ask rules, never allow"))
    table["rules"] = [*base["rules"], *(r for r in rules if r.get("action") != "allow")]


def _restrict_skills(
    table: dict[str, Any], base: Mapping[str, Any], workspace: Path, ignored: list[tuple[str, Any, str]]
) -> None:
    for key in _WIDENING_SWITCHES:
        if table.get(key) is True and not base[key]:
            ignored.append((f"skills.{key}", table.pop(key), "it would trust more skills than your config does"))
    dirs = table.get("dirs")
    if dirs is None:
        return
    outside = [d for d in dirs if not is_inside(Path(os.path.realpath(workspace / Path(d).expanduser())), workspace)]
    if outside:
        table["dirs"] = [d for d in dirs if d not in outside]
        ignored.append(("skills.dirs (outside the workspace)", outside, "skills from there are not this workspace's"))


_STORAGE = "it chooses where your sessions and events are stored and which servers (and credentials) are used"


def _masked_storage(table: Any) -> Any:
    if not isinstance(table, Mapping):
        return table
    return {k: mask_url(v) if isinstance(v, str) else v for k, v in table.items()}


def _show(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "BUNDLED_MODELS",
    "TRUST_FILE",
    "TrustStore",
    "TrustedWorkspace",
    "model_spec_problem",
    "restrict_untrusted",
    "workspace_key",
]
