"""Permission rules: one decision per tool call, evaluated deny → ask → allow (issue 10 §3).

Rules come from ``[[permissions.rules]]`` in kairos.toml::

    [[permissions.rules]]
    action = "deny"                 # deny | ask | allow
    tool = "bash"                   # a glob on the tool's name
    command = "git push*"           # any other key: a glob on that argument (its text)
    reason = "pushing is for humans"

    [[permissions.rules]]
    action = "ask"
    tool = "write_file"
    path = "*.lock"                 # a path argument matches as given or as the absolute path

The user's rules come first: any matching ``deny`` refuses the call; else any matching ``ask``
sends it to the approver; else any matching ``allow`` runs it. Without a matching rule the
defaults decide: a command that looks dangerous (``rm -rf /``, ``curl … | sh``, a fork bomb, see
:mod:`kairos.security.dangerous`), a call that asks for the network, a tool that reaches the network
from kairos itself (``fetch_url``, ``web_search``; ``[sandbox] network`` allows or denies them too)
and a command that would run outside the sandbox all *ask*, with the reason shown; a tool listed
for confirmation (``[defences]``) asks; anything else (read-only tools, writes inside the
workspace, sandboxed commands) is allowed. An untrusted workspace may add ``deny`` and ``ask``
rules, never ``allow`` ones (:mod:`kairos.security.trust`).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kairos.security.dangerous import dangerous
from kairos.tools.base import Tool
from kairos.tools.sandbox import Grant, Sandbox

Action: TypeAlias = Literal["deny", "ask", "allow"]
SANDBOXED_TOOLS = ("bash", "python")
"""Tools whose work runs inside the sandbox (:mod:`kairos.tools.sandbox`)."""
COMMAND_ARGS = ("command", "code")
"""Arguments checked for dangerous commands."""
PATH_ARGS = ("path", "file", "filename", "directory", "dir", "cwd", "target")
_RULE_KEYS = {"action", "tool", "reason"}


class PermissionRule(BaseModel):
    """One rule: ``action`` for calls of ``tool`` whose arguments match every other key's glob."""

    model_config = ConfigDict(extra="allow", frozen=True)

    action: Action
    tool: str = Field("*", description="glob on the tool name")
    reason: str = Field("", description="shown to the user and the model")

    @model_validator(mode="after")
    def _patterns_are_text(self) -> PermissionRule:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, str):
                raise ValueError(f'argument pattern {key!r} must be a string glob, e.g. {key} = "git push*"')
        return self

    @property
    def patterns(self) -> dict[str, str]:
        """Argument name → glob."""
        return {k: str(v) for k, v in (self.model_extra or {}).items() if k not in _RULE_KEYS}

    def matches(self, tool: str, arguments: dict[str, Any], cwd: Path | None = None) -> bool:
        """Whether this rule covers a call of ``tool`` with ``arguments``."""
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        for key, glob in self.patterns.items():
            if key not in arguments:
                return False
            if not any(fnmatch.fnmatchcase(v, glob) for v in _forms(key, arguments[key], cwd)):
                return False
        return True

    def describe(self) -> str:
        """``deny bash command="git push*"``: how decisions name the rule."""
        pats = " ".join(f"{k}={v!r}" for k, v in self.patterns.items())
        return f"{self.action} {self.tool}" + (f" {pats}" if pats else "")


class PermissionsConfig(BaseModel):
    """``[permissions]`` in kairos.toml."""

    model_config = ConfigDict(extra="forbid")

    rules: list[PermissionRule] = Field(default_factory=list, description="evaluated deny → ask → allow")
    dangerous: Action = Field("ask", description="what a dangerous-looking command gets: ask | deny | allow")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the check decided for one call, and why."""

    action: Action
    reason: str
    source: str
    """``rule: deny bash command='git push*'``, ``default: dangerous command``, …"""
    grants: tuple[Grant, ...] = ()
    """What the call gets if it runs (network, running unconfined)."""


def _forms(key: str, value: Any, cwd: Path | None) -> list[str]:
    text = value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    out = [text]
    if key in PATH_ARGS and isinstance(value, str) and cwd is not None:
        out.append(os.path.normpath(os.path.join(cwd, os.path.expanduser(value))))
    return out


class Permissions:
    """The one place that decides whether a call runs, asks or is refused.

    Args:
        config: the rules.
        confirm: tools that always ask (``[defences]``: side-effecting ones when ``confirm_side_effects``).
        confirm_side_effects: every side-effecting tool asks (unless ``exempt``).
        exempt: side-effecting tools that do not ask for that reason.
    """

    def __init__(
        self,
        config: PermissionsConfig | None = None,
        *,
        confirm: Iterable[str] = (),
        confirm_side_effects: bool = False,
        exempt: Iterable[str] = (),
    ) -> None:
        self.config = config or PermissionsConfig()
        self.confirm = frozenset(confirm)
        self.confirm_side_effects = confirm_side_effects
        self.exempt = frozenset(exempt)

    async def evaluate(
        self, tool: Tool, arguments: dict[str, Any], *, sandbox: Sandbox | None = None, cwd: Path | None = None
    ) -> Verdict:
        """Decide one call (never raises for odd arguments)."""
        grants = await self._grants(tool.name, arguments, sandbox)
        matched = [r for r in self.config.rules if r.matches(tool.name, arguments, cwd)]
        for action in ("deny", "ask", "allow"):
            for rule in matched:
                if rule.action == action:
                    reason = rule.reason or f"a permission rule says {action}"
                    return Verdict(action, reason, f"rule: {rule.describe()}", grants)
        return await self._default(tool, arguments, sandbox, grants)

    async def _grants(self, name: str, arguments: dict[str, Any], sandbox: Sandbox | None) -> tuple[Grant, ...]:
        if name not in SANDBOXED_TOOLS or sandbox is None:
            return ()
        out: list[Grant] = []
        if arguments.get("network") is True:
            out.append("network")
        if sandbox.config.mode == "ask" and not await sandbox.confined():
            out.append("unconfined")
        return tuple(out)

    async def _default(
        self, tool: Tool, arguments: dict[str, Any], sandbox: Sandbox | None, grants: tuple[Grant, ...]
    ) -> Verdict:
        asks: list[str] = []
        deny: list[str] = []
        if tool.name in SANDBOXED_TOOLS:
            for key in COMMAND_ARGS:
                value = arguments.get(key)
                if isinstance(value, str):
                    for finding in dangerous(value) if self.config.dangerous != "allow" else ():
                        (deny if self.config.dangerous == "deny" else asks).append(f"dangerous command: {finding}")
        elif getattr(tool, "network", False) is True:  # fetch_url, web_search: the network from kairos itself
            policy = sandbox.config.network if sandbox is not None else "ask"
            if policy != "allow":
                (deny if policy == "deny" else asks).append("it reaches the network")
        if tool.name in SANDBOXED_TOOLS and sandbox is not None:
            if "network" in grants and sandbox.config.network == "ask":
                asks.append("it asks for network access")
            if "unconfined" in grants and not sandbox.unconfined_approved:
                asks.append("bubblewrap is unavailable: it would run unconfined, with your rights")
            elif sandbox.config.mode == "off":
                asks.append("the sandbox is off: it runs unconfined, with your rights")
        if asks_why := getattr(tool, "asks", ""):  # the tool always asks (a browser's irreversible click)
            asks.append(str(asks_why))
        if tool.name in self.confirm or (
            self.confirm_side_effects and tool.side_effects and tool.name not in self.exempt
        ):
            asks.append("this tool has side effects")
        if deny:
            return Verdict("deny", "; ".join(deny), "default: " + deny[0].split(":")[0], grants)
        if asks:
            return Verdict("ask", "; ".join(asks), "default: " + asks[0].split(":")[0], grants)
        if tool.name in SANDBOXED_TOOLS:
            why = "sandboxed command"
        else:
            why = "read-only tool" if tool.read_only or not tool.side_effects else "side effects allowed"
        return Verdict("allow", "allowed by default", f"default: {why}", grants)


__all__ = ["SANDBOXED_TOOLS", "Action", "PermissionRule", "Permissions", "PermissionsConfig", "Verdict"]
